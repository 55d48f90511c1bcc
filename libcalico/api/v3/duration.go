package v3

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time span written as a Go duration string ("90s", "1m30s",
// "10m"), as Calico's Kubernetes-style duration fields are.
type Duration struct {
	time.Duration
}

// NewDuration wraps d.
func NewDuration(d time.Duration) *Duration { return &Duration{d} }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.Duration.String()) }

// UnmarshalJSON reads a duration string such as "90s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want a string like \"90s\" or \"5m\"", b)
	}
	parsed, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: want a string like \"90s\" or \"5m\"", s)
	}
	d.Duration = parsed
	return nil
}
