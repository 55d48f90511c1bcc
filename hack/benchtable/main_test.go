package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	out := `goos: linux
pkg: github.com/palisade-net/palisade/libcalico/datastore/etcdv3
BenchmarkList10000-2   	time="2026-11-30T07:20:31Z" level=info msg="a log line between name and figures"
      26	  59402596 ns/op	         1.890 x/ref
BenchmarkFoo-2   	      26	  100 ns/op	         3.0 x/ref	 5 B/op
PASS
pkg: github.com/palisade-net/palisade/libcalico/selector
BenchmarkEvaluateTenTerms-2 	 1000	 92 ns/op	 1.9 x/ref
ok
`
	want := []row{
		{name: "etcdv3.List10000-2", metrics: []string{"59402596 ns/op", "1.890 x/ref"}},
		{name: "etcdv3.Foo-2", metrics: []string{"100 ns/op", "3.0 x/ref", "5 B/op"}},
		{name: "selector.EvaluateTenTerms-2", metrics: []string{"92 ns/op", "1.9 x/ref"}},
	}
	if got := parse(strings.NewReader(out)); !reflect.DeepEqual(got, want) {
		t.Fatalf("parse:\n got %#v\nwant %#v", got, want)
	}
}
