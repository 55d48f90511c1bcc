package felix

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/palisade-net/palisade/felix/dataplane/nstest"
)

// TestIptablesActionsAndMarkMask: Calico's iptablesFilterDenyAction,
// iptablesFilterAllowAction, iptablesMangleAllowAction and
// iptablesMarkMask change what felix's rules do, in the kernel.
func TestIptablesActionsAndMarkMask(t *testing.T) {
	c := newCluster(t, "NFT")
	setupPods(c)
	rs := c.apply(core[1].yaml) // web: TCP 8080 from app == 'client' of ns-a, the rest denied.
	c.waitPolicies(rs, true)
	config := func(extra, want string) {
		t.Helper()
		c.apply(felixConfigBase + extra)
		c.waitFor("the rules of "+strings.TrimSpace(extra), func() bool { return strings.Contains(c.filter(), want) })
	}
	web := c.pods["web"]
	connect := func(port int) error {
		_, err := nstest.TCP(c.pods["client"].run, web.ip, port)
		return err
	}

	t.Run("iptablesFilterDenyAction Reject", func(t *testing.T) {
		c.t = t
		// Drop: the SYN vanishes, the connect times out.
		if err := connect(8081); err == nil || errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("denied with DROP: got %v, want a timeout", err)
		}
		config("  iptablesFilterDenyAction: Reject\n", "-j REJECT")
		c.waitFor("a denied connect refused at once", func() bool {
			start := time.Now()
			err := connect(8081)
			return errors.Is(err, syscall.ECONNREFUSED) && time.Since(start) < nstest.ProbeTimeout
		})
		c.expect(allow("client", "web", "tcp", 8080), deny("other", "web", "tcp", 8080))
	})

	// A rule of another program after felix's jump (Insert mode): with
	// Accept it never sees what felix allowed, with Return it decides.
	t.Run("iptablesFilterAllowAction Return", func(t *testing.T) {
		c.t = t
		config("", "Policy explicitly accepted packet.\" -j ACCEPT")
		c.node.MustRun(t, "iptables-nft", "-A", "FORWARD", "-d", web.ip.String(), "-p", "tcp", "--dport", "8080", "-j", "DROP")
		defer c.node.MustRun(t, "iptables-nft", "-D", "FORWARD", "-d", web.ip.String(), "-p", "tcp", "--dport", "8080", "-j", "DROP")
		c.expect(allow("client", "web", "tcp", 8080))
		config("  iptablesFilterAllowAction: Return\n", "Policy explicitly accepted packet.\" -j RETURN")
		c.expect(deny("client", "web", "tcp", 8080), deny("client", "web", "tcp", 8081), allow("web", "client", "tcp", 8080))
	})

	t.Run("iptablesMangleAllowAction Return", func(t *testing.T) {
		c.t = t
		config("", "Policy explicitly accepted packet.\" -j ACCEPT")
		// Counts the established packets to web that reach the rules after
		// felix's mangle jump.
		rule := []string{"-t", "mangle", "-A", "PREROUTING", "-d", web.ip.String(), "-p", "tcp", "--dport", "8080", "-m", "conntrack", "--ctstate", "ESTABLISHED"}
		c.node.MustRun(t, append([]string{"iptables-nft"}, rule...)...)
		rule[2] = "-D"
		defer c.node.MustRun(t, append([]string{"iptables-nft"}, rule...)...)
		seen := func() int { return c.counted("mangle", "-A PREROUTING -d "+web.ip.String()+"/32", "ESTABLISHED") }
		c.expect(allow("client", "web", "tcp", 8080))
		if n := seen(); n != 0 {
			t.Fatalf("with Accept, %d established packets passed felix's mangle chain", n)
		}
		c.apply(felixConfigBase + "  iptablesMangleAllowAction: Return\n")
		c.waitFor("mangle RETURN", func() bool {
			for _, l := range strings.Split(c.node.MustRun(t, c.save, "-t", "mangle"), "\n") {
				if strings.HasPrefix(l, "-A cali-PREROUTING -m conntrack --ctstate RELATED,ESTABLISHED") && strings.HasSuffix(l, "-j RETURN") {
					return true
				}
			}
			return false
		})
		c.waitFor("established packets after felix's mangle chain", func() bool {
			c.send(allow("client", "web", "tcp", 8080))
			return seen() > 0
		})
	})

	// Felix's accept mark stays on an allowed packet: with the default
	// mask it is 0x10000, a bit another program may own; with
	// 0xf0000000 felix keeps to 0x10000000.
	t.Run("iptablesMarkMask", func(t *testing.T) {
		c.t = t
		c.node.MustRun(t, "iptables-nft", "-t", "mangle", "-A", "POSTROUTING", "-m", "mark", "--mark", "0x10000/0x10000")
		c.node.MustRun(t, "iptables-nft", "-t", "mangle", "-A", "POSTROUTING", "-m", "mark", "--mark", "0x10000000/0x10000000")
		marked := func(bit string) int { return c.counted("mangle", "-A POSTROUTING", "--mark "+bit+"/"+bit) }
		config("", "Policy explicitly accepted packet.\" -j ACCEPT")
		c.expect(allow("client", "web", "tcp", 8080))
		if marked("0x10000") == 0 {
			t.Fatalf("default mask: no allowed packet carried 0x10000:\n%s", c.node.MustRun(t, c.save, "-c", "-t", "mangle"))
		}
		config("  iptablesMarkMask: 0xf0000000\n", "--set-xmark 0x10000000/0x10000000")
		before := marked("0x10000")
		c.expect(allow("client", "web", "tcp", 8080), deny("client", "web", "tcp", 8081), deny("other", "web", "tcp", 8080))
		if after := marked("0x10000"); after != before {
			t.Errorf("mask 0xf0000000: %d more packets carried 0x10000", after-before)
		}
		if marked("0x10000000") == 0 {
			t.Errorf("mask 0xf0000000: no allowed packet carried 0x10000000")
		}
		if strings.Contains(c.filter(), "0x10000/") {
			t.Errorf("mask 0xf0000000: felix still uses 0x10000:\n%s", c.filter())
		}
	})
	c.t = t
	c.apply(felixConfigBase)
}
