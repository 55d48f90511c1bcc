package client

import v3 "github.com/palisade-net/palisade/libcalico/api/v3"

// TEMPORARY until v3.Default and v3.Validate land.
func defaultResource(r v3.Resource)        {}
func validateResource(r v3.Resource) error { return nil }
