package rules

import (
	"reflect"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
)

// TestProtocolAndNotProtocol: iptables takes one -p per rule, so a rule
// with both fields must not render "-p X ! -p Y" (iptables-restore
// refuses it, and with it the whole table).
func TestProtocolAndNotProtocol(t *testing.T) {
	m := newMarks(0xffff0000)
	cases := []struct {
		name string
		rule calc.Rule
		want []string
	}{
		{"protocol only", calc.Rule{Protocol: 6}, []string{"-p tcp"}},
		{"notProtocol only", calc.Rule{NotProtocol: 6}, []string{"! -p tcp"}},
		{"both, different", calc.Rule{Protocol: 17, NotProtocol: 6}, []string{"-p udp"}},
		{"both, the same", calc.Rule{Protocol: 6, NotProtocol: 6}, nil},
	}
	for _, c := range cases {
		if got := ruleMatches(c.rule, 4, m); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
