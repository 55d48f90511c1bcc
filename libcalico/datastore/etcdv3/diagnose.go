package etcdv3

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// diagnosis is what dialling the endpoints ourselves found.
type diagnosis struct {
	// problems is "" when every endpoint looks fine at this level.
	problems string
	// fatal is set when every endpoint refused our TLS settings: waiting
	// longer cannot help.
	fatal bool
}

// diagnose dials each endpoint itself (TCP, then the TLS handshake for
// https) to find why gRPC, which only reports a deadline, could not get
// through.
func diagnose(ctx context.Context, endpoints []string, tc *tls.Config) diagnosis {
	var problems []string
	fatal := true
	for _, ep := range endpoints {
		p := diagnoseOne(ctx, ep, tc)
		if p != "" {
			problems = append(problems, ep+": "+p)
		}
		if !strings.Contains(p, "tls:") && !strings.Contains(p, "x509:") {
			fatal = false
		}
	}
	return diagnosis{problems: strings.Join(problems, "; "), fatal: fatal}
}

func diagnoseOne(ctx context.Context, endpoint string, tc *tls.Config) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return "not a URL (want http://host:port or https://host:port)"
	}
	d := net.Dialer{}
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	if u.Scheme != "https" {
		return ""
	}
	cfg := &tls.Config{}
	if tc != nil {
		cfg = tc.Clone()
	}
	cfg.ServerName = u.Hostname()
	cfg.NextProtos = []string{"h2"}
	tconn := tls.Client(conn, cfg)
	if err := tconn.HandshakeContext(ctx); err != nil {
		return err.Error()
	}
	// With TLS 1.3 a rejected client certificate shows only when reading:
	// the server answers with an alert, where a healthy one waits for us.
	_ = tconn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 1)
	if _, err := tconn.Read(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err.Error()
	}
	return ""
}
