package status

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/palisade-net/palisade/felix/calc"
)

// noCountersPolicy is a felix whose dataplane keeps no per-rule counters.
type noCountersPolicy struct{}

func (noCountersPolicy) Explain(context.Context, calc.Query) (*calc.Explanation, error) {
	return nil, fmt.Errorf("%w: bad", calc.ErrBadQuery)
}

func (noCountersPolicy) RuleCounters(context.Context) ([]calc.RuleCounter, error) {
	return nil, fmt.Errorf("%w: the dataplane has none", calc.ErrNoCounters)
}

// TestRuleStatsNoCounters: a dataplane without per-rule counters reaches
// the caller as calc.ErrNoCounters with its reason, not as numbers or an
// internal error.
func TestRuleStatsNoCounters(t *testing.T) {
	sock := filepath.Join(t.TempDir(), SocketName)
	s, err := Listen(sock, func(context.Context) (Report, error) { return Report{}, nil }, noCountersPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cs, err := RuleStats(context.Background(), sock)
	if !errors.Is(err, calc.ErrNoCounters) || !strings.HasSuffix(err.Error(), ": no per-rule counters: the dataplane has none") || cs != nil {
		t.Fatalf("RuleStats = %v, %v; want ErrNoCounters with the reason", cs, err)
	}
	if _, err := Explain(context.Background(), sock, calc.Query{}); !errors.Is(err, calc.ErrBadQuery) {
		t.Fatalf("Explain of a bad query: %v, want ErrBadQuery", err)
	}
}
