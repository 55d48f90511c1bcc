package ipam

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// stickyAttrs are a sticky reservation's attributes for container on
// node.
func stickyAttrs(container, node string) map[string]string {
	return map[string]string{AttrReleasePolicy: "immutable", AttrOwnerKind: "StatefulSet", AttrOwnerName: "db",
		AttrOwnerUID: "uid-db", "namespace": "ns", "pod": "db-0", AttrPodUID: "uid-" + container, AttrContainer: container, AttrNode: node}
}

// TestStickyUse: a reservation is created once (NewHandle), is used by
// one container at a time, survives its container's teardown with no
// node attribute (so it is not routed), is taken up by the next
// container on another node with the same address, and is refused, with
// a clear error and nothing changed, to a container while another still
// uses it.
func TestStickyUse(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.40.0.0/24", nil)
	h := StickyHandleID("k8s-pod-network", "ns", "StatefulSet", "db", "db-0")
	v4, _, err := e.alloc.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: h, NewHandle: true, Hostname: "node-a", Attrs: stickyAttrs("c1", "node-a")})
	if err != nil {
		t.Fatal(err)
	}
	ip := v4.IPs[0].Addr()
	if _, _, err := e.alloc.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: h, NewHandle: true, Hostname: "node-b"}); !errors.Is(err, ErrAlreadyAssigned) {
		t.Fatalf("second creation of the reservation: %v, want ErrAlreadyAssigned", err)
	}
	// c2 (the re-created pod, on node-b) while c1 still uses it.
	before := e.blocks()
	_, err = e.alloc.UseSticky(ctxT(t), h, stickyAttrs("c2", "node-b"))
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "c1") || !strings.Contains(err.Error(), ip.String()) {
		t.Fatalf("use while c1 holds it: %v, want ErrInUse naming c1 and %s", err, ip)
	}
	if after := e.blocks(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("a refused use changed the blocks:\n%v\n%v", before, after)
	}
	if n, err := e.alloc.StopUsingSticky(ctxT(t), "c1"); err != nil || n != 1 {
		t.Fatalf("stop using: %d, %v", n, err)
	}
	al, err := e.alloc.GetAssignmentAttributes(ctxT(t), ip)
	if err != nil || al.HandleID != h || al.InUse() || al.Attrs[AttrNode] != "" || !al.IsSticky() {
		t.Fatalf("after its container's DEL: %+v, %v (want reserved, unused, no node)", al, err)
	}
	got, err := e.alloc.UseSticky(ctxT(t), h, stickyAttrs("c2", "node-b"))
	if err != nil || len(got) != 1 || got[0] != ip {
		t.Fatalf("use by c2: %v, %v, want %s", got, err, ip)
	}
	al, _ = e.alloc.GetAssignmentAttributes(ctxT(t), ip)
	if al.Attrs[AttrContainer] != "c2" || al.Attrs[AttrNode] != "node-b" {
		t.Errorf("after c2 took it: %v", al.Attrs)
	}
	// The same container again (a repeated ADD) is fine; a late DEL of
	// c1 changes nothing.
	if _, err := e.alloc.UseSticky(ctxT(t), h, stickyAttrs("c2", "node-b")); err != nil {
		t.Errorf("repeated use by c2: %v", err)
	}
	if n, err := e.alloc.StopUsingSticky(ctxT(t), "c1"); err != nil || n != 0 {
		t.Errorf("late stop by c1: %d, %v", n, err)
	}
	if _, err := e.alloc.UseSticky(ctxT(t), "ns.nothing", stickyAttrs("c3", "node-a")); !errors.Is(err, datastore.ErrNotFound) {
		t.Errorf("use of a handle that does not exist: %v", err)
	}
	e.checkInvariants()
	if err := e.alloc.ReleaseByHandle(ctxT(t), h); err != nil {
		t.Fatal(err)
	}
	if _, err := e.alloc.GetAssignmentAttributes(ctxT(t), ip); !errors.Is(err, ErrNotAssigned) {
		t.Errorf("after releasing the reservation: %v", err)
	}
}

// TestStickyUseRace: containers racing to use one free reservation:
// exactly one gets it, the others ErrInUse.
func TestStickyUseRace(t *testing.T) {
	e := newEnv(t)
	e.pool("p", "10.41.0.0/24", nil)
	h := StickyHandleID("net", "ns", "StatefulSet", "db", "db-1")
	if _, _, err := e.alloc.AutoAssign(ctxT(t), AutoAssignArgs{Num4: 1, HandleID: h, NewHandle: true, Hostname: "node-a", Attrs: stickyAttrs("c0", "node-a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.alloc.StopUsingSticky(ctxT(t), "c0"); err != nil {
		t.Fatal(err)
	}
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		_, a := e.connect()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = a.UseSticky(ctxT(t), h, stickyAttrs(fmt.Sprintf("r%d", i), fmt.Sprintf("node-%d", i)))
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrInUse):
			t.Errorf("racer %d: %v", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d containers got the address (errors %v)", won, errs)
	}
}
