package bpf

import (
	"testing"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
	"github.com/palisade-net/palisade/felix/dataplane/bpf/policy"
)

// TestCompileCacheOutlivesRounds: a stage compiled by one apply is found
// compiled by a later one, however many applies between did not need it,
// while a program made from it is in use; once no endpoint uses the
// program, or a newer input made the same program, the entry goes.
func TestCompileCacheOutlivesRounds(t *testing.T) {
	ps := newPrograms(nil, log.NewEntry(log.StandardLogger()))
	rules := []calc.Rule{{Action: calc.Allow, Protocol: 6, DstPorts: []calc.PortRange{{Min: 80, Max: 80}}}}
	input := func(rules []calc.Rule) *policy.Input {
		return &policy.Input{Final: true, Tiers: []policy.Tier{{Name: "default", DefaultAction: calc.Deny,
			Policies: []policy.Policy{{ID: calc.PolicyID{Tier: "default", Name: "web"}, Rules: rules}}}}}
	}
	first, err := ps.compile(input(rules))
	if err != nil {
		t.Fatal(err)
	}
	ps.byHash[first.Hash] = &program{hash: first.Hash, refs: 1}
	for range 3 {
		ps.endCompile() // applies that compiled nothing (other pods' churn)
	}
	again, err := ps.compile(input(rules))
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatal("a stage whose program is in use was compiled again after applies that did not need it")
	}
	// The calc replaced the rules with equal ones: the older entry goes.
	ps.endCompile()
	newer := append([]calc.Rule(nil), rules...)
	if _, err := ps.compile(input(newer)); err != nil {
		t.Fatal(err)
	}
	ps.endCompile()
	ps.endCompile()
	if len(ps.compiled) != 1 {
		t.Fatalf("%d cache entries for one program, want 1", len(ps.compiled))
	}
	// No endpoint uses the program any more: its entry goes too.
	ps.byHash[first.Hash].refs = 0
	ps.endCompile()
	ps.endCompile()
	if len(ps.compiled) != 0 {
		t.Fatalf("%d cache entries of an unused program stay", len(ps.compiled))
	}
}
