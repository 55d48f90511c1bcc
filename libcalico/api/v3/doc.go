// Package v3 holds the projectcalico.org/v3 resource types that Calico users
// write, with their defaulting, validation and strict decoding. Field names
// and JSON tags follow Calico's API so YAML written for Calico decodes
// unchanged.
package v3
