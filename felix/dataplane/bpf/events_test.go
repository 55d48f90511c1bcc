package bpf

import (
	"testing"

	log "github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/dataplane/bpf/policy"
)

// TestLogEventNamedBySlot: a Log rule's event is named from the program
// of the slot it was decided in, known as soon as the program is in its
// slot — also when the interfaces' view still names the stage's earlier
// program (a packet right after the interface's entry changed, before
// the apply updated the view), and when it names none.
func TestLogEventNamedBySlot(t *testing.T) {
	logger, hook := test.NewNullLogger()
	e := &eventReader{log: log.NewEntry(logger), ifaces: map[uint32]string{3: "cali1"},
		stages: map[uint32][palbpf.Stages]*policy.Description{}, slots: map[uint32]*policy.Description{}}
	old := &policy.Description{Slots: []policy.Slot{{Tier: "default", Policy: "before", Rule: 0, Action: "Allow"}}}
	var view [palbpf.Stages]*policy.Description
	view[palbpf.StageNormalIn] = old
	e.set(3, "cali1", view)
	e.setSlot(9, old)
	e.setSlot(10, &policy.Description{Slots: []policy.Slot{{Tier: "default", Policy: "log", Rule: 0, Action: "Log"}}})
	for _, c := range []struct {
		ifindex, slot uint32
		want          string
	}{{3, 10, "log"}, {3, 9, "before"}, {4, 10, "log"}} {
		hook.Reset()
		e.logPacket(palbpf.State{Ifindex: c.ifindex, Phase: uint8(palbpf.StageNormalIn), Rule: 0, Slot: c.slot})
		if got := hook.LastEntry(); got == nil || got.Data["policy"] != c.want {
			t.Errorf("interface %d, slot %d: logged %v, want policy %q", c.ifindex, c.slot, got, c.want)
		}
	}
	e.setSlot(10, nil)
	hook.Reset()
	e.logPacket(palbpf.State{Ifindex: 3, Phase: uint8(palbpf.StageNormalIn), Slot: 10})
	if got := hook.LastEntry(); got == nil || got.Data["policy"] != "before" {
		t.Errorf("an emptied slot: logged %v, want the view's policy", got)
	}
}
