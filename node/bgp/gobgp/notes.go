package gobgp

import (
	"fmt"
	"strings"
	"sync"

	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	bgppkt "github.com/osrg/gobgp/v3/pkg/packet/bgp"
	log "github.com/sirupsen/logrus"
)

// peerNotes remembers, per neighbour address, why a session is not up, as
// GoBGP's log tells it: a local error that keeps it down (a socket option
// GoBGP could not set on its listener or connection) and the last reason
// it went down. GoBGP's API reports neither.
type peerNotes struct {
	mu    sync.Mutex
	local map[string]string
	last  map[string]string
}

func newPeerNotes() *peerNotes {
	return &peerNotes{local: map[string]string{}, last: map[string]string{}}
}

// reason says why the session with addr is down: its local error, else
// the last reason it went down ("" when none is known).
func (n *peerNotes) reason(addr string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e := n.local[addr]; e != "" {
		return "Local error: " + e
	}
	return n.last[addr]
}

// forget drops what is known about addr (the session is made again).
func (n *peerNotes) forget(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.local, addr)
	delete(n.last, addr)
}

func (n *peerNotes) setLocal(addr, what string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.local[addr] = what
}

func (n *peerNotes) setLast(addr, what string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.last[addr] = what
}

// localErrors are GoBGP's warnings that mean a session cannot come up
// because of something on this node; they are logged at warning level
// and shown with the session.
var localErrors = map[string]string{
	"failed to set md5":               "setting the TCP MD5 password on the BGP listener",
	"cannot set TTL for peer":         "setting the TTL (TTL security) on the connection",
	"failed to resolve local address": "resolving the session's local address",
}

// notice reads one GoBGP log line for what it says about a session; it
// returns true when the line must be logged at warning level.
func (n *peerNotes) notice(msg string, f gobgplog.Fields) bool {
	key, _ := f["Key"].(string)
	if what, ok := localErrors[msg]; ok {
		err := f["Error"]
		if err == nil {
			err = f["Err"]
		}
		if key != "" {
			n.setLocal(key, fmt.Sprintf("%s: %v", what, err))
		}
		return true
	}
	if key == "" {
		return msg == "cannot set TTL (255) for TCPListener"
	}
	switch msg {
	case "received notification":
		n.setLast(key, "Received: "+notification(f["Code"], f["Subcode"]))
	case "hold timer expired":
		n.setLast(key, "Hold timer expired")
	case "Closed an accepted connection":
		n.setLast(key, "Connection collision: closed a connection the peer opened in "+fsmState(f["State"]))
	case "state changed":
		if s, _ := f["new"].(string); s == bgppkt.BGP_FSM_IDLE.String() {
			if r := fmt.Sprint(f["reason"]); r != "" && r != "<nil>" && !strings.Contains(r, "idle-hold-timer-expired") {
				n.setLast(key, "Went down in "+fsmState(f["old"])+": "+downReason(r))
			}
		}
	}
	return false
}

// downReason says in words what GoBGP's reason for leaving a state means.
func downReason(r string) string {
	for code, words := range map[string]string{
		"read-failed":           "the peer closed the connection",
		"write-failed":          "sending failed",
		"hold-timer-expired":    "hold timer expired",
		"invalid-msg":           "unexpected message (a NOTIFICATION, during OPEN)",
		"admin-down":            "administratively down",
		"graceful-restart":      "the connection broke (graceful restart)",
		"restart-timer-expired": "the peer did not come back within its restart time",
		"notification-received": "NOTIFICATION received:",
		"notification-sent":     "NOTIFICATION sent:",
		"hard-reset":            "hard reset by the peer",
	} {
		if strings.HasPrefix(r, code) {
			return words + strings.TrimPrefix(r, code)
		}
	}
	return r
}

// notification names a NOTIFICATION's code and subcode.
func notification(code, subcode any) string {
	c, ok1 := code.(uint8)
	s, ok2 := subcode.(uint8)
	if !ok1 || !ok2 {
		return fmt.Sprintf("notification %v/%v", code, subcode)
	}
	return bgppkt.NewNotificationErrorCode(c, s).String()
}

// fsmState shortens GoBGP's "BGP_FSM_OPENSENT" to "OpenSent".
func fsmState(v any) string {
	s := fmt.Sprint(v)
	for st, name := range map[string]string{
		bgppkt.BGP_FSM_IDLE.String(): "Idle", bgppkt.BGP_FSM_CONNECT.String(): "Connect",
		bgppkt.BGP_FSM_ACTIVE.String(): "Active", bgppkt.BGP_FSM_OPENSENT.String(): "OpenSent",
		bgppkt.BGP_FSM_OPENCONFIRM.String(): "OpenConfirm", bgppkt.BGP_FSM_ESTABLISHED.String(): "Established",
	} {
		if s == st {
			return name
		}
	}
	return s
}

// logAdapter sends GoBGP's logs to logrus, one level quieter than GoBGP
// chooses (its Info is chatty), except the warnings that mean a session
// cannot come up through a fault of this node, which stay warnings. Every
// line goes past notes first.
type logAdapter struct {
	e     *log.Entry
	notes *peerNotes
}

func (l *logAdapter) fields(f gobgplog.Fields) *log.Entry {
	return l.e.WithFields(log.Fields(f))
}
func (l *logAdapter) Panic(msg string, f gobgplog.Fields) {
	l.notes.notice(msg, f)
	l.fields(f).Error(msg)
}
func (l *logAdapter) Fatal(msg string, f gobgplog.Fields) {
	l.notes.notice(msg, f)
	l.fields(f).Error(msg)
}
func (l *logAdapter) Error(msg string, f gobgplog.Fields) {
	l.notes.notice(msg, f)
	l.fields(f).Warn(msg)
}
func (l *logAdapter) Warn(msg string, f gobgplog.Fields) {
	if l.notes.notice(msg, f) {
		l.fields(f).Warn(msg)
		return
	}
	l.fields(f).Info(msg)
}
func (l *logAdapter) Info(msg string, f gobgplog.Fields) {
	l.notes.notice(msg, f)
	if l.e.Logger.IsLevelEnabled(log.DebugLevel) {
		l.fields(f).Debug(msg)
	}
}
func (l *logAdapter) Debug(msg string, f gobgplog.Fields) {
	l.notes.notice(msg, f)
	if l.e.Logger.IsLevelEnabled(log.TraceLevel) {
		l.fields(f).Trace(msg)
	}
}
func (l *logAdapter) SetLevel(gobgplog.LogLevel) {}
func (l *logAdapter) GetLevel() gobgplog.LogLevel {
	if l.e.Logger.IsLevelEnabled(log.TraceLevel) {
		return gobgplog.DebugLevel
	}
	return gobgplog.InfoLevel
}
