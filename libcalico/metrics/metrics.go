// Package metrics holds what Palisade's Prometheus and health endpoints
// share: an HTTP listener that follows its configured address (started,
// moved or stopped as the configuration changes), the collector of the
// datastore's bad stored values, and the address rules of Calico's
// host/port settings.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore"
)

// Addr is host:port as Calico's *Host/*Port settings give it: an empty
// host listens on every address.
func Addr(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// Endpoint is one HTTP listener whose address follows a setting: Set
// starts it, moves it when the address changes and stops it for "".
// Safe for concurrent use.
type Endpoint struct {
	name    string
	handler http.Handler
	log     *log.Entry

	mu   sync.Mutex
	addr string
	srv  *http.Server
	got  net.Addr
	err  error
}

// NewEndpoint returns a stopped endpoint serving handler; name is used
// in logs ("metrics", "health").
func NewEndpoint(name string, handler http.Handler, logger *log.Entry) *Endpoint {
	if logger == nil {
		logger = log.NewEntry(log.StandardLogger())
	}
	return &Endpoint{name: name, handler: handler, log: logger.WithField("endpoint", name)}
}

// Set makes the endpoint listen on addr ("" stops it). A failure to
// listen is logged and returned, and tried again at the next Set with
// the same address.
func (e *Endpoint) Set(addr string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if addr == e.addr && (e.srv != nil || addr == "") {
		return nil
	}
	e.stopLocked()
	e.addr = addr
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		e.err = fmt.Errorf("%s server on %s: %w", e.name, addr, err)
		e.log.WithError(err).WithField("addr", addr).Error("Cannot listen")
		return e.err
	}
	srv := &http.Server{Handler: e.handler, ReadHeaderTimeout: 5 * time.Second}
	e.srv, e.got, e.err = srv, l.Addr(), nil
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.WithError(err).Error("Server stopped")
		}
	}()
	e.log.WithField("addr", l.Addr().String()).Info("Serving")
	return nil
}

// Addr is the address listened on (nil while stopped).
func (e *Endpoint) Addr() net.Addr {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.got
}

// Close stops the endpoint.
func (e *Endpoint) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopLocked()
	e.addr = ""
}

func (e *Endpoint) stopLocked() {
	if e.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx)
	e.srv, e.got = nil, nil
}

// badValuesDesc describes palisade_datastore_bad_values_total.
var badValuesDesc = prometheus.NewDesc("palisade_datastore_bad_values_total",
	"Stored values skipped because they are not valid resources, by kind (each value once per revision)",
	[]string{"kind"}, nil)

// BadValues is a collector of the datastore's skipped-value counts.
type BadValues struct{ b *datastore.BadValues }

// NewBadValues returns the collector of b.
func NewBadValues(b *datastore.BadValues) BadValues { return BadValues{b: b} }

// Describe implements prometheus.Collector.
func (c BadValues) Describe(ch chan<- *prometheus.Desc) { ch <- badValuesDesc }

// Collect implements prometheus.Collector.
func (c BadValues) Collect(ch chan<- prometheus.Metric) {
	for kind, n := range c.b.ByKind() {
		ch <- prometheus.MustNewConstMetric(badValuesDesc, prometheus.CounterValue, float64(n), kind)
	}
}
