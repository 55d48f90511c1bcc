package lab

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// Ping sends ICMP echo requests from inside the target's namespace (a
// node, or a pod "namespace/name") to dst, one every 100 ms, until a reply
// comes or timeout passes. It returns the round trip of the reply.
func (l *Lab) Ping(ctx context.Context, from string, dst netip.Addr, timeout time.Duration) (time.Duration, error) {
	var c *icmp.PacketConn
	if err := l.InNamespace(from, func() (err error) {
		c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		return 0, fmt.Errorf("ping from %s: %w", from, err)
	}
	defer c.Close()
	var idb [2]byte
	_, _ = rand.Read(idb[:])
	id := int(binary.BigEndian.Uint16(idb[:]))
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	sent := map[int]time.Time{}
	buf := make([]byte, 1500)
	for seq := 1; time.Now().Before(deadline); seq++ {
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("palisade-lab")}}
		wb, err := msg.Marshal(nil)
		if err != nil {
			return 0, err
		}
		sent[seq] = time.Now()
		if _, err := c.WriteTo(wb, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			// No route yet: wait and try again.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		wait := time.Now().Add(100 * time.Millisecond)
		if wait.After(deadline) {
			wait = deadline
		}
		_ = c.SetReadDeadline(wait)
		for {
			n, peer, err := c.ReadFrom(buf)
			if err != nil {
				break
			}
			rm, err := icmp.ParseMessage(1, buf[:n])
			if err != nil || rm.Type != ipv4.ICMPTypeEchoReply {
				continue
			}
			echo, ok := rm.Body.(*icmp.Echo)
			if !ok || echo.ID != id || peer.String() != dst.String() {
				continue
			}
			if t, ok := sent[echo.Seq]; ok {
				return time.Since(t), nil
			}
		}
	}
	return 0, fmt.Errorf("ping %s → %s: no reply in %s", from, dst, timeout)
}

// Matrix is the result of pinging every pod from every other pod.
type Matrix struct {
	Pods []Pod
	// Err[i][j] is nil when Pods[i] reached Pods[j].
	Err [][]error
	// RTT[i][j] is the round trip of the reply.
	RTT [][]time.Duration
}

// Failures counts the pairs that did not reach each other.
func (m Matrix) Failures() int {
	n := 0
	for i := range m.Err {
		for j := range m.Err[i] {
			if i != j && m.Err[i][j] != nil {
				n++
			}
		}
	}
	return n
}

// Reachability pings every pod from every other pod, all at once.
func (l *Lab) Reachability(ctx context.Context, timeout time.Duration) Matrix {
	pods := l.Pods()
	m := Matrix{Pods: pods, Err: make([][]error, len(pods)), RTT: make([][]time.Duration, len(pods))}
	var wg sync.WaitGroup
	for i := range pods {
		m.Err[i] = make([]error, len(pods))
		m.RTT[i] = make([]time.Duration, len(pods))
		for j := range pods {
			if i == j {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.RTT[i][j], m.Err[i][j] = l.Ping(ctx, pods[i].Key(), pods[j].IP, timeout)
			}()
		}
	}
	wg.Wait()
	return m
}

// WaitReachable repeats Reachability until every pair answers or timeout
// passes; it returns the last matrix.
func (l *Lab) WaitReachable(ctx context.Context, timeout time.Duration) (Matrix, error) {
	deadline := time.Now().Add(timeout)
	for {
		m := l.Reachability(ctx, 2*time.Second)
		if m.Failures() == 0 {
			return m, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var sb strings.Builder
			m.Print(&sb)
			return m, fmt.Errorf("%d pod pair(s) unreachable after %s:\n%s", m.Failures(), timeout, sb.String())
		}
	}
}

// Print writes the matrix: a row per source pod, a column per
// destination, "ok" or "--".
func (m Matrix) Print(w io.Writer) {
	label := func(p Pod) string { return fmt.Sprintf("%s (%s, %s)", p.Key(), p.Node, p.IP) }
	width := 0
	for _, p := range m.Pods {
		if len(label(p)) > width {
			width = len(label(p))
		}
	}
	fmt.Fprintf(w, "%-*s", width+4, "from \\ to")
	for j := range m.Pods {
		fmt.Fprintf(w, " %4s", fmt.Sprintf("#%d", j+1))
	}
	fmt.Fprintln(w)
	for i, p := range m.Pods {
		fmt.Fprintf(w, "%-4s%-*s", fmt.Sprintf("#%d", i+1), width, label(p))
		for j := range m.Pods {
			cell := "  ok"
			switch {
			case i == j:
				cell = "   ·"
			case m.Err[i][j] != nil:
				cell = "  --"
			}
			fmt.Fprintf(w, " %s", cell)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%d of %d pairs reach each other\n", len(m.Pods)*(len(m.Pods)-1)-m.Failures(), len(m.Pods)*(len(m.Pods)-1))
}
