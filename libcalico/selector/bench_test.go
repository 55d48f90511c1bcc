package selector

import (
	"strings"
	"testing"
	"time"
)

// tenTermSelector mixes every kind of term a policy commonly uses.
const tenTermSelector = "app == 'web' && tier in {'frontend', 'backend'} && has(version) && !has(canary) && " +
	"owner contains 'team' && env != 'dev' && (region == 'eu' || region == 'us') && " +
	"zone starts with 'z' && track not in {'alpha', 'beta'}"

// tenTermsByHand is tenTermSelector written directly in Go: the reference
// that shows what the interpreter costs on top of the map lookups.
func tenTermsByHand(l map[string]string) bool {
	if v, ok := l["app"]; !ok || v != "web" {
		return false
	}
	if v, ok := l["tier"]; !ok || v != "frontend" && v != "backend" {
		return false
	}
	if _, ok := l["version"]; !ok {
		return false
	}
	if _, ok := l["canary"]; ok {
		return false
	}
	if v, ok := l["owner"]; !ok || !strings.Contains(v, "team") {
		return false
	}
	if v, ok := l["env"]; ok && v == "dev" {
		return false
	}
	if v, ok := l["region"]; !ok || v != "eu" && v != "us" {
		return false
	}
	if v, ok := l["zone"]; !ok || !strings.HasPrefix(v, "z") {
		return false
	}
	if v, ok := l["track"]; ok && (v == "alpha" || v == "beta") {
		return false
	}
	return true
}

// benchLabelSets: one matching (every term evaluated), one failing on the
// last term, one failing on the first.
var benchLabelSets = []map[string]string{
	{"app": "web", "tier": "backend", "version": "v2", "owner": "team-a", "env": "prod",
		"region": "us", "zone": "z1", "track": "stable", "pod-template-hash": "5d8f"},
	{"app": "web", "tier": "frontend", "version": "v2", "owner": "team-b", "env": "prod",
		"region": "eu", "zone": "z2", "track": "beta"},
	{"app": "db", "tier": "backend", "version": "v1"},
}

func TestTenTermReferenceAgrees(t *testing.T) {
	sel := MustParse(tenTermSelector)
	for i, labels := range benchLabelSets {
		want := []bool{true, false, false}[i]
		if got := tenTermsByHand(labels); got != want {
			t.Errorf("tenTermsByHand(%v) = %v, want %v", labels, got, want)
		}
		if got := sel.Evaluate(labels); got != want {
			t.Errorf("Evaluate(%v) = %v, want %v", labels, got, want)
		}
	}
}

var benchSink bool

// BenchmarkEvaluateTenTerms reports ns/op of Evaluate and, as x/ref, its
// ratio to tenTermsByHand timed in the same run on the same inputs.
func BenchmarkEvaluateTenTerms(b *testing.B) {
	sel := MustParse(tenTermSelector)
	n := len(benchLabelSets)

	start := time.Now()
	for i := 0; i < b.N; i++ {
		benchSink = tenTermsByHand(benchLabelSets[i%n])
	}
	ref := time.Since(start)

	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchSink = sel.Evaluate(benchLabelSets[i%n])
	}
	b.StopTimer()

	b.ReportMetric(float64(ref.Nanoseconds())/float64(b.N), "ref-ns/op")
	if ref > 0 {
		b.ReportMetric(float64(b.Elapsed())/float64(ref), "x/ref")
	}
}
