package workload

import (
	"context"
	"errors"
	"io/fs"
	"net/netip"
	"time"

	"github.com/palisade-net/palisade/libcalico/endpointstatus"
)

// pollInterval is how often WaitProgrammed looks for felix's report.
const pollInterval = 5 * time.Millisecond

// WaitProgrammed waits until felix reports the endpoint namespace/name
// programmed with every address in addrs (its status file in dir), or
// until timeout. It reports whether the report came; a timeout is not an
// error, as in Calico: the pod starts, its traffic dropped until felix
// catches up.
func WaitProgrammed(ctx context.Context, dir, namespace, name string, addrs []netip.Addr, timeout time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		st, err := endpointstatus.Read(dir, namespace, name)
		if err == nil && st.Covers(addrs) {
			return true, nil
		}
		if errors.Is(err, fs.ErrPermission) {
			return false, err
		}
		// Absent, an older pod's, or caught half-written: look again.
		select {
		case <-ctx.Done():
			return false, nil
		case <-tick.C:
		}
	}
}
