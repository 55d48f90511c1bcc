package bpf

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// loopCalls counts, per program of spec, the instructions calling the
// bpf_loop helper (181), which a kernel before 5.17 refuses to load.
func loopCalls(spec *ebpf.CollectionSpec) map[string]int {
	calls := map[string]int{}
	for name, p := range spec.Programs {
		for _, ins := range p.Instructions {
			if ins.IsBuiltinCall() && ins.Constant == int64(asm.FnLoop) {
				calls[name]++
			}
		}
	}
	return calls
}

// TestNoLoopObject: the object built with -DPAL_NO_LOOP calls bpf_loop
// from no program and has none of the policy engine's maps, while the
// default object's entry programs do call it (the check finds calls
// where there are some); both have the same programs and the same other
// maps, so Open uses either in one maps directory.
func TestNoLoopObject(t *testing.T) {
	if asm.FnLoop != 181 {
		t.Fatalf("asm.FnLoop is %d, want helper 181", asm.FnLoop)
	}
	def, err := loadObject(false)
	if err != nil {
		t.Fatal(err)
	}
	noLoop, err := loadObject(true)
	if err != nil {
		t.Fatal(err)
	}
	if calls := loopCalls(noLoop); len(calls) > 0 {
		t.Errorf("the no-loop object calls bpf_loop: %v", calls)
	}
	calls := loopCalls(def)
	for _, name := range []string{"pal_wl_in", "pal_wl_out", "pal_hep_in", "pal_hep_out", "pal_resume_wl_in"} {
		if calls[name] == 0 {
			t.Errorf("the default object's %s calls no bpf_loop (calls: %v)", name, calls)
		}
	}
	for name := range def.Programs {
		if noLoop.Programs[name] == nil {
			t.Errorf("the no-loop object lacks program %s", name)
		}
	}
	for name := range noLoop.Programs {
		if def.Programs[name] == nil {
			t.Errorf("the no-loop object has program %s the default one lacks", name)
		}
	}
	for name, m := range def.Maps {
		nm := noLoop.Maps[name]
		switch {
		case engineMaps[name] && nm != nil:
			t.Errorf("the no-loop object has the engine's map %s", name)
		case engineMaps[name]:
		case nm == nil:
			t.Errorf("the no-loop object lacks map %s", name)
		case nm.Type != m.Type || nm.KeySize != m.KeySize || nm.ValueSize != m.ValueSize || nm.MaxEntries != m.MaxEntries || nm.Flags != m.Flags:
			t.Errorf("map %s differs between the objects: %v, %v", name, m, nm)
		}
	}
	for name := range engineMaps {
		if def.Maps[name] == nil {
			t.Errorf("the default object has no map %s (engineMaps is stale)", name)
		}
	}
	if specHash(def) != specHash(noLoop) {
		t.Errorf("the objects' maps directories differ: %s, %s", specHash(def), specHash(noLoop))
	}
}
