package v3

import (
	"encoding/json"
	"fmt"
	"math"
)

// This file holds the checks of Calico's CRD schemas that the Go types do
// not express, run on the decoded document before its fields are typed.

// schemaProblems returns what Calico's schema of the kind refuses in obj.
func schemaProblems(kind string, obj map[string]any) []error {
	var errs []error
	switch kind {
	case KindBGPPeer:
		// The schema types a BGPPeer's asNumber as an int32 integer: a
		// dotted "64512.10" or a string is refused there, though the
		// AS number type reads both elsewhere.
		spec, _ := obj["spec"].(map[string]any)
		if v, ok := spec["asNumber"]; ok && v != nil {
			if err := int32Number(v); err != nil {
				errs = append(errs, fmt.Errorf("spec.asNumber %v: %w", describeValue(v), err))
			}
		}
	}
	return errs
}

// int32Number checks a JSON value is an integer of 0-2147483647.
func int32Number(v any) error {
	n, ok := v.(json.Number)
	if !ok {
		return fmt.Errorf("want an integer 0-2147483647: Calico's schema takes a BGPPeer's asNumber as a plain number, not dotted or quoted")
	}
	i, err := n.Int64()
	if err != nil || i < 0 || i > math.MaxInt32 {
		return fmt.Errorf("want an integer 0-2147483647: Calico's schema stores a BGPPeer's asNumber as a 32-bit signed integer")
	}
	return nil
}
