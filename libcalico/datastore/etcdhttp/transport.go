package etcdhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdcore"
)

// Gateway paths.
const (
	pathRange        = "/v3/kv/range"
	pathTxn          = "/v3/kv/txn"
	pathAuthenticate = "/v3/auth/authenticate"
)

// maxErrorBody bounds how much of an unexpected answer an error quotes.
const maxErrorBody = 200

// transport is etcdcore.Transport over etcd's JSON gateway. Requests go
// to the endpoint that last answered; one whose connection cannot even be
// dialled hands over to the next. A write that reached etcd is never sent
// again, since it may have been applied; a read is sent again, as etcd's
// gRPC client does, while an election or a lost member makes it fail for
// a moment (see readRetry).
type transport struct {
	client    *http.Client
	endpoints []string
	// readBudget bounds how long one read keeps being sent again.
	readBudget time.Duration
	cur        atomic.Int32
	user       string
	password   string

	mu    sync.Mutex
	token string
	// lazyAuth: no token was asked for yet (Open); the first request
	// authenticates, once, before it is sent.
	lazyAuth bool
	authMu   sync.Mutex
}

var _ etcdcore.Transport = (*transport)(nil)

// etcdError is an error etcd answered with.
type etcdError struct {
	Endpoint string
	// Code is the gRPC status code; Message etcd's text, e.g.
	// "etcdserver: permission denied".
	Code    int
	Message string
}

func (e *etcdError) Error() string { return e.Message }

// The gRPC codes and messages the client reacts to.
const (
	codePermissionDenied = 7
	// codeUnavailable is what etcd answers while it cannot serve for a
	// moment: "leader changed", "no leader", "request timed out".
	codeUnavailable   = 14
	msgInvalidToken   = "etcdserver: invalid auth token"
	msgAuthNotEnabled = "etcdserver: authentication is not enabled"
)

// newTransport checks the endpoints and prepares the HTTP client; it
// does not connect.
func newTransport(cfg etcdcore.Config) (*transport, error) {
	tlsCfg, err := cfg.TLSConfig()
	if err != nil {
		return nil, err
	}
	t := &transport{user: cfg.Username, password: cfg.Password, readBudget: cfg.Timeout()}
	for _, ep := range cfg.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("endpoint %q is not a URL (want http://host:port or https://host:port)", ep)
		}
		t.endpoints = append(t.endpoints, u.Scheme+"://"+u.Host)
	}
	timeout := cfg.Timeout()
	t.client = &http.Client{Transport: &http.Transport{
		Proxy:               nil, // etcd is never reached through an HTTP proxy
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: timeout,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
	}}
	return t, nil
}

// Range reads key, or every key under it.
func (t *transport) Range(ctx context.Context, key string, prefix bool) (etcdcore.RangeResult, error) {
	req := rangeRequest{Key: []byte(key)}
	if prefix {
		req.RangeEnd = []byte(etcdcore.PrefixEnd(key))
	}
	var resp rangeResponse
	if err := t.call(ctx, pathRange, req, &resp, true); err != nil {
		return etcdcore.RangeResult{}, err
	}
	return etcdcore.RangeResult{KVs: keyValues(resp.KVs), Revision: int64(resp.Header.Revision)}, nil
}

// Txn runs one etcd transaction.
func (t *transport) Txn(ctx context.Context, cmps []etcdcore.Compare, then, els []etcdcore.Op) (etcdcore.TxnResult, error) {
	req := txnRequest{Success: requestOps(then), Failure: requestOps(els)}
	for _, c := range cmps {
		wc, err := wireCompare(c)
		if err != nil {
			return etcdcore.TxnResult{}, err
		}
		req.Compare = append(req.Compare, wc)
	}
	var resp txnResponse
	if err := t.call(ctx, pathTxn, req, &resp, readOnly(then) && readOnly(els)); err != nil {
		return etcdcore.TxnResult{}, err
	}
	out := etcdcore.TxnResult{Succeeded: resp.Succeeded, Revision: int64(resp.Header.Revision), Results: make([]etcdcore.OpResult, len(resp.Responses))}
	for i, r := range resp.Responses {
		switch {
		case r.Range != nil:
			out.Results[i].KVs = keyValues(r.Range.KVs)
		case r.DeleteRange != nil:
			out.Results[i] = etcdcore.OpResult{KVs: keyValues(r.DeleteRange.PrevKVs), Deleted: int64(r.DeleteRange.Deleted)}
		}
	}
	return out, nil
}

// Close drops the idle connections.
func (t *transport) Close() error {
	t.client.CloseIdleConnections()
	return nil
}

// authenticate trades the username and password for a token that later
// requests carry. Without auth enabled in etcd there is no token to get.
func (t *transport) authenticate(ctx context.Context) error {
	var resp authenticateResponse
	err := t.send(ctx, pathAuthenticate, authenticateRequest{Name: t.user, Password: t.password}, &resp, false)
	var ee *etcdError
	if errors.As(err, &ee) && ee.Message == msgAuthNotEnabled {
		resp.Token, err = "", nil
	}
	if err != nil {
		return fmt.Errorf("authenticating as %q: %w", t.user, err)
	}
	t.mu.Lock()
	t.token, t.lazyAuth = resp.Token, false
	t.mu.Unlock()
	return nil
}

// authenticateOnce gets the first token of a client Open made with a
// username; concurrent first requests wait for the one that asks. A
// failed attempt leaves the next request to try again.
func (t *transport) authenticateOnce(ctx context.Context) error {
	if !t.needsToken() {
		return nil
	}
	t.authMu.Lock()
	defer t.authMu.Unlock()
	if !t.needsToken() {
		return nil
	}
	return t.authenticate(ctx)
}

func (t *transport) needsToken() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lazyAuth
}

// call posts in and decodes the answer into out, authenticating again
// once when etcd says the token expired. A read (read set) is sent again
// while it fails in a way that passes (readRetry).
func (t *transport) call(ctx context.Context, path string, in, out any, read bool) error {
	if err := t.authenticateOnce(ctx); err != nil {
		return err
	}
	attempt := func() error {
		err := t.send(ctx, path, in, out, true)
		var ee *etcdError
		if t.user != "" && errors.As(err, &ee) && ee.Message == msgInvalidToken {
			if aerr := t.authenticate(ctx); aerr != nil {
				return aerr
			}
			err = t.send(ctx, path, in, out, true)
		}
		return err
	}
	if !read {
		return attempt()
	}
	return t.readRetry(ctx, attempt)
}

// Pauses between the attempts of a read: doubling from the first to the
// last, each with up to half again of jitter.
const (
	firstReadPause = 25 * time.Millisecond
	lastReadPause  = 400 * time.Millisecond
)

// readRetry runs a read until it succeeds, fails in a way that does not
// pass, or t.readBudget (the dial timeout) is spent. What passes: etcd
// answering Unavailable (an election under way: "leader changed", "no
// leader"), and a connection lost after the request went out and before
// the answer (the member died); the latter moves to the next endpoint. A
// dial that every endpoint refuses does not pass: the read fails at once,
// as before. An election in a healthy cluster ends within about a second.
func (t *transport) readRetry(ctx context.Context, attempt func() error) error {
	deadline := time.Now().Add(t.readBudget)
	pause := firstReadPause
	for {
		err := attempt()
		if err == nil || !passing(err) || ctx.Err() != nil {
			return err
		}
		if errors.Is(err, datastore.ErrUnavailable) && len(t.endpoints) > 1 {
			t.moveOn(err)
		}
		wait := pause + time.Duration(rand.Int64N(int64(pause/2)+1))
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
		pause = min(2*pause, lastReadPause)
	}
}

// passing says a read's failure is one that passes by itself: etcd's
// Unavailable, or a connection that reached etcd and was then lost (reset
// or closed before the answer). A refused dial, a TLS handshake etcd
// rejects and a timeout do not pass.
func passing(err error) bool {
	var ee *etcdError
	if errors.As(err, &ee) {
		return ee.Code == codeUnavailable
	}
	if !errors.Is(err, datastore.ErrUnavailable) || isDialError(err) {
		return false
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// moveOn makes the endpoint after the one err names the current one.
func (t *transport) moveOn(err error) {
	var ue *datastore.UnavailableError
	if !errors.As(err, &ue) {
		return
	}
	for i, ep := range t.endpoints {
		if ep == ue.Endpoint {
			t.cur.CompareAndSwap(int32(i), int32((i+1)%len(t.endpoints)))
			return
		}
	}
}

// readOnly says a transaction's operations only read.
func readOnly(ops []etcdcore.Op) bool {
	for _, o := range ops {
		if o.Kind == etcdcore.Put || o.Kind == etcdcore.Delete {
			return false
		}
	}
	return true
}

// send posts in to the current endpoint, or to the next ones while they
// cannot be dialled.
func (t *transport) send(ctx context.Context, path string, in, out any, withToken bool) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding %s request: %w", path, err)
	}
	token := ""
	if withToken {
		t.mu.Lock()
		token = t.token
		t.mu.Unlock()
	}
	n := len(t.endpoints)
	start := int(t.cur.Load())
	var undialled []string
	for i := range n {
		idx := (start + i) % n
		err := t.post(ctx, t.endpoints[idx], path, body, token, out)
		switch {
		case err == nil:
			t.cur.Store(int32(idx))
			return nil
		case !isDialError(err) || ctx.Err() != nil || n == 1:
			return err
		case i < n-1:
			undialled = append(undialled, err.Error())
		default:
			return fmt.Errorf("no endpoint answered (%s); %w", strings.Join(undialled, "; "), err)
		}
	}
	return errors.New("no endpoints")
}

// post makes one request to one endpoint.
func (t *transport) post(ctx context.Context, endpoint, path string, body []byte, token string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &datastore.UnavailableError{Endpoint: endpoint, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return &datastore.UnavailableError{Endpoint: endpoint, Err: fmt.Errorf("reading the answer to %s: %w", path, err)}
	}
	if resp.StatusCode != http.StatusOK {
		var eb errorBody
		if json.Unmarshal(data, &eb) == nil && (eb.Message != "" || eb.Error != "") {
			msg := eb.Message
			if msg == "" {
				msg = eb.Error
			}
			return &etcdError{Endpoint: endpoint, Code: eb.Code, Message: msg}
		}
		if len(data) > maxErrorBody {
			data = data[:maxErrorBody]
		}
		hint := ""
		if resp.StatusCode == http.StatusNotFound {
			hint = " (is etcd's gRPC gateway enabled? --enable-grpc-gateway)"
		}
		return fmt.Errorf("%s%s: HTTP %s%s: %s", endpoint, path, resp.Status, hint, bytes.TrimSpace(data))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s%s: decoding the answer: %w", endpoint, path, err)
	}
	return nil
}

// isDialError says the request never reached etcd.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// wireCompare turns a condition into the gateway's JSON.
func wireCompare(c etcdcore.Compare) (compare, error) {
	out := compare{Key: []byte(c.Key)}
	switch c.Result {
	case etcdcore.Equal:
		out.Result = "EQUAL"
	case etcdcore.Greater:
		out.Result = "GREATER"
	case etcdcore.Less:
		out.Result = "LESS"
	default:
		return out, fmt.Errorf("transaction condition on %q: unknown relation %d", c.Key, c.Result)
	}
	rev := c.Revision
	switch c.Target {
	case etcdcore.CreateRevision:
		out.Target, out.CreateRevision = "CREATE", &rev
	case etcdcore.ModRevision:
		out.Target, out.ModRevision = "MOD", &rev
	default:
		return out, fmt.Errorf("transaction condition on %q: unknown target %d", c.Key, c.Target)
	}
	if c.Prefix {
		out.RangeEnd = []byte(etcdcore.PrefixEnd(c.Key))
	}
	return out, nil
}

// requestOps turns operations into the gateway's JSON.
func requestOps(in []etcdcore.Op) []requestOp {
	out := make([]requestOp, len(in))
	for i, o := range in {
		switch o.Kind {
		case etcdcore.Put:
			v := o.Value
			if v == nil {
				v = []byte{}
			}
			out[i].Put = &putRequest{Key: []byte(o.Key), Value: v}
		case etcdcore.Delete:
			out[i].DeleteRange = &deleteRangeRequest{Key: []byte(o.Key), PrevKV: o.PrevKV}
		default:
			out[i].Range = &rangeRequest{Key: []byte(o.Key), KeysOnly: o.KeysOnly}
		}
	}
	return out
}

// keyValues converts the gateway's key-values.
func keyValues(kvs []keyValue) []etcdcore.KeyValue {
	out := make([]etcdcore.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = etcdcore.KeyValue{Key: string(kv.Key), Value: kv.Value, ModRevision: int64(kv.ModRevision)}
	}
	return out
}
