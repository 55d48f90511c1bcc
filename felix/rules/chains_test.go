package rules

import (
	"regexp"
	"slices"
	"testing"
)

// TestTargets checks Rule.Targets against the restore text of every rule
// of the golden catalogue: each chain a rule jumps or goes to is listed,
// and each one listed is a chain of the same table.
func TestTargets(t *testing.T) {
	jump := regexp.MustCompile(`-[jg] (cali-\S+)`)
	seen := 0
	for _, c := range catalogue() {
		s := calculate(c.resources)
		for _, fam := range c.families {
			rs := s.render(fam)
			for table, chains := range rs.Tables {
				names := map[string]bool{}
				for _, ch := range chains {
					names[ch.Name] = true
				}
				for _, ch := range chains {
					for _, r := range ch.Rules {
						var want []string
						for _, m := range jump.FindAllStringSubmatch(r.Text(), -1) {
							want = append(want, m[1])
						}
						got := r.Targets()
						slices.Sort(want)
						slices.Sort(got)
						if !slices.Equal(got, want) {
							t.Errorf("%s %s: %q targets %v, want %v", c.name, table, r.Text(), got, want)
						}
						for _, g := range got {
							seen++
							if !names[g] {
								t.Errorf("%s %s: %q targets %s, not a chain of the table", c.name, table, r.Text(), g)
							}
						}
					}
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no rule of the catalogue jumps anywhere")
	}
}
