package etcdhttp

import (
	"encoding/json"
	"testing"
)

// TestInt64s: the gateway writes 64-bit integers as strings, but a number
// must be read too.
func TestInt64s(t *testing.T) {
	cases := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{`{"mod_revision":"9007199254740993"}`, 9007199254740993, false},
		{`{"mod_revision":42}`, 42, false},
		{`{}`, 0, false},
		{`{"mod_revision":null}`, 0, false},
		{`{"mod_revision":"4x"}`, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			var kv keyValue
			err := json.Unmarshal([]byte(tc.in), &kv)
			if (err != nil) != tc.wantErr {
				t.Fatalf("decoding %s: error %v, want error %v", tc.in, err, tc.wantErr)
			}
			if err == nil && int64(kv.ModRevision) != tc.want {
				t.Errorf("decoding %s: %d, want %d", tc.in, kv.ModRevision, tc.want)
			}
		})
	}
}
