package manifests

import _ "embed"

// CoreDNS is coredns.yaml, the cluster DNS add-on the lab installs on real
// nodes (the e2e suites reach Services by name).
//
//go:embed coredns.yaml
var CoreDNS string
