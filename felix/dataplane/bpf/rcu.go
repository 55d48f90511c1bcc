package bpf

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	log "github.com/sirupsen/logrus"
)

// rcuExpedited is the kernel's switch making synchronize_rcu expedited.
const rcuExpedited = "/sys/kernel/rcu_expedited"

// rcuMark is the file saying felix turned the switch on. It is on the
// host's run directory (a tmpfs, as the switch lives until the next
// boot), so a felix killed within an attachment, switch on, finds it at
// its next start and turns the switch off again.
const rcuMark = "/var/run/calico/bpf-rcu-expedited"

// rcuScope expedites the kernel's RCU grace periods for the duration of
// felix's own TCX attachments (FelixConfiguration bpfExpediteAttach,
// Palisade's own). A TCX attachment waits for a plain grace period while
// it holds the rtnl lock (tcx_entry_sync); the kernel's own netdev work
// under rtnl takes expedited ones (synchronize_net). The switch is
// node-wide and counted here: the first attachment under way turns it on
// when it reads 0, the last one to end turns it back off. A switch an
// operator keeps on (1 when the first attachment starts, and no mark of
// ours), or one felix cannot write (/sys read-only), is left alone and
// logged once. Writing the switch stores an integer: it takes no grace
// period, and a grace period already begun keeps the kind it started
// with, so the switch is turned on before the attachment starts.
type rcuScope struct {
	// file is the switch, mark felix's mark (tests give their own).
	file, mark string
	log        *log.Entry

	mu sync.Mutex
	// off: bpfExpediteAttach is false.
	off bool
	// n counts the attachments under way; ours: the switch was turned
	// on by us for them.
	n    int
	ours bool
	// turnedOn counts the times the switch was turned on by us.
	turnedOn int
	// recovered: the mark of an earlier felix has been looked for.
	recovered bool
	// noted is what was logged once: "operator" or "unwritable".
	noted map[string]bool
}

func newRCUScope(file, mark string, logger *log.Entry) *rcuScope {
	return &rcuScope{file: file, mark: mark, log: logger, noted: map[string]bool{}}
}

// setEnabled follows bpfExpediteAttach; attachments under way keep the
// switch as it is until the last one ends. The first call (felix's
// start) turns off a switch an earlier felix left on.
func (s *rcuScope) setEnabled(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recoverLocked()
	s.off = !on
}

// enter is called before a fresh TCX attachment, exit after it.
func (s *rcuScope) enter() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recoverLocked()
	s.n++
	if s.n > 1 || s.off {
		return
	}
	b, err := os.ReadFile(s.file)
	if err != nil {
		s.noteLocked("unwritable", err, "Cannot read the kernel's expedited RCU switch: TCX attachments wait for plain grace periods")
		return
	}
	if v := strings.TrimSpace(string(b)); v != "0" {
		s.noteLocked("operator", nil, "RCU grace periods are expedited on this node already (not by felix): left as they are")
		return
	}
	// The mark goes first: a felix killed between the two writes finds
	// it and turns off a switch that may be on.
	if err := writeFile(s.mark, "1"); err != nil {
		s.noteLocked("unwritable", err, "Cannot write felix's mark of the expedited RCU switch: the switch is left alone, TCX attachments wait for plain grace periods")
		return
	}
	if err := writeFile(s.file, "1"); err != nil {
		_ = os.Remove(s.mark)
		s.noteLocked("unwritable", err, "Cannot write the kernel's expedited RCU switch (/sys read-only?): TCX attachments wait for plain grace periods")
		return
	}
	s.ours = true
	s.turnedOn++
}

func (s *rcuScope) exit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
	if s.n > 0 || !s.ours {
		return
	}
	s.ours = false
	if err := writeFile(s.file, "0"); err != nil {
		s.log.WithError(err).WithField("file", s.file).Warn("Cannot turn the kernel's expedited RCU grace periods off again")
		return
	}
	if err := os.Remove(s.mark); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.WithError(err).WithField("file", s.mark).Warn("Cannot remove felix's mark of the expedited RCU switch")
	}
}

// recoverLocked turns off, once, a switch an earlier felix left on
// (killed within an attachment): its mark is still there.
func (s *rcuScope) recoverLocked() {
	if s.recovered {
		return
	}
	s.recovered = true
	if _, err := os.Stat(s.mark); err != nil {
		return
	}
	if err := writeFile(s.file, "0"); err != nil {
		s.log.WithError(err).WithField("file", s.file).Warn("An earlier felix left the kernel's RCU grace periods expedited; cannot turn them off")
		return
	}
	_ = os.Remove(s.mark)
	s.log.WithField("file", s.file).Info("An earlier felix left the kernel's RCU grace periods expedited (stopped within an attachment): turned off")
}

func (s *rcuScope) noteLocked(what string, err error, msg string) {
	if s.noted[what] {
		return
	}
	s.noted[what] = true
	s.log.WithError(err).WithField("file", s.file).Info(msg)
}

// writeFile writes a small file whole (sysfs takes one write).
func writeFile(path, v string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// noteRCUGracePeriods logs, once, what a TCX attachment costs on this
// kernel when felix does not expedite them (bpfExpediteAttach false):
// each hook's attachment waits for an RCU grace period under the rtnl
// lock (about 7 ms at best with HZ=250, tens of ms on a busy node), which
// a new pod waits for twice before its traffic is let through. A node
// that turns on expedited grace periods pays tens of µs instead.
func noteRCUGracePeriods(logger *log.Entry, file string) {
	b, err := os.ReadFile(file)
	if err != nil || strings.TrimSpace(string(b)) != "0" {
		return
	}
	logger.WithField("file", file).Info("TCX attachments wait for RCU grace periods, milliseconds per new interface; " +
		"bpfExpediteAttach (the default), expedited grace periods (1 in the file, or rcupdate.rcu_expedited=1 at boot) or bpfAttachType TC make them sub-millisecond (docs/bpf.md)")
}
