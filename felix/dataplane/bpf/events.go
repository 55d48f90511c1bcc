package bpf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf/ringbuf"
	log "github.com/sirupsen/logrus"

	palbpf "github.com/palisade-net/palisade/bpf"
	"github.com/palisade-net/palisade/felix/dataplane/bpf/policy"
)

// eventReader logs the packets Log rules matched, as
// "calico-packet: …" lines in felix's log (the iptables dataplane's LOG
// rules write to the kernel log with that prefix).
type eventReader struct {
	r    *ringbuf.Reader
	log  *log.Entry
	done chan struct{}

	mu sync.Mutex
	// view names interfaces and programs for the messages.
	ifaces map[uint32]string
	stages map[uint32][palbpf.Stages]*policy.Description
	// slots are the programs' descriptions by pal_progs slot, known as
	// soon as a program is in its slot, before any interface's entry
	// names it: an event carries the slot it was decided in, so a Log
	// rule's first packet is named even if it comes before the
	// interfaces' view above is updated.
	slots map[uint32]*policy.Description
}

// setSlot gives the reader the description of the program in a slot
// (nil: the slot is emptied).
func (e *eventReader) setSlot(slot uint32, d *policy.Description) {
	e.mu.Lock()
	if d == nil {
		delete(e.slots, slot)
	} else {
		e.slots[slot] = d
	}
	e.mu.Unlock()
}

func newEventReader(objs *palbpf.Objects, logger *log.Entry) (*eventReader, error) {
	r, err := ringbuf.NewReader(objs.Maps[palbpf.MapEvents])
	if err != nil {
		return nil, err
	}
	e := &eventReader{r: r, log: logger, done: make(chan struct{}),
		ifaces: map[uint32]string{}, stages: map[uint32][palbpf.Stages]*policy.Description{}, slots: map[uint32]*policy.Description{}}
	go e.loop()
	return e, nil
}

// set gives the reader an interface's name and its stages' programs.
func (e *eventReader) set(idx uint32, name string, stages [palbpf.Stages]*policy.Description) {
	e.mu.Lock()
	e.ifaces[idx], e.stages[idx] = name, stages
	e.mu.Unlock()
}

// remove forgets an interface.
func (e *eventReader) remove(idx uint32) {
	e.mu.Lock()
	delete(e.ifaces, idx)
	delete(e.stages, idx)
	e.mu.Unlock()
}

func (e *eventReader) loop() {
	defer close(e.done)
	for {
		rec, err := e.r.Read()
		if err != nil {
			if errors.Is(err, ringbuf.ErrClosed) {
				return
			}
			continue
		}
		var st palbpf.State
		if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &st); err != nil {
			continue
		}
		e.logPacket(st)
	}
}

func (e *eventReader) logPacket(st palbpf.State) {
	src, dst := netip.AddrFrom16(st.Src).Unmap(), netip.AddrFrom16(st.Dst).Unmap()
	fields := log.Fields{"src": src.String(), "dst": dst.String(), "proto": st.Proto, "sport": st.Sport, "dport": st.Dport}
	e.mu.Lock()
	fields["iface"] = e.ifaces[st.Ifindex]
	if int(st.Phase) < palbpf.Stages {
		fields["stage"] = palbpf.StageNames[st.Phase]
		d := e.slots[st.Slot]
		if d == nil {
			d = e.stages[st.Ifindex][st.Phase]
		}
		if d != nil && int(st.Rule) < len(d.Slots) {
			s := d.Slots[st.Rule]
			if s.Profile != "" {
				fields["profile"] = s.Profile
			} else {
				fields["tier"], fields["policy"] = s.Tier, s.Policy
			}
			fields["rule"] = s.Rule
		}
	}
	e.mu.Unlock()
	e.log.WithFields(fields).Info("calico-packet: Log rule matched")
}

func (e *eventReader) close() {
	e.r.Close()
	<-e.done
}
