package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	log "github.com/sirupsen/logrus"

	libmetrics "github.com/palisade-net/palisade/libcalico/metrics"
	"github.com/palisade-net/palisade/node/bgp"
)

// DefaultBGPMetricsPort is where BGP metrics are served when
// BGP_PROMETHEUSMETRICSENABLED is true (Calico Enterprise's BGP metrics
// port).
const DefaultBGPMetricsPort = 9900

// bgpMetricsAddr reads BGP_PROMETHEUSMETRICSENABLED,
// BGP_PROMETHEUSMETRICSHOST and BGP_PROMETHEUSMETRICSPORT: "" when off.
func bgpMetricsAddr(getenv func(string) string) (string, error) {
	on, err := envBool(getenv, "BGP_PROMETHEUSMETRICSENABLED")
	if err != nil || !on {
		return "", err
	}
	port := DefaultBGPMetricsPort
	if v := getenv("BGP_PROMETHEUSMETRICSPORT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 65535 {
			return "", fmt.Errorf("BGP_PROMETHEUSMETRICSPORT %q: want a port number 0-65535", v)
		}
		port = n
	}
	return libmetrics.Addr(getenv("BGP_PROMETHEUSMETRICSHOST"), port), nil
}

// bgpCollector reads the BGP speaker at each scrape: per-peer session
// state and uptime, prefixes received, accepted and advertised, the age of
// the last UPDATE, and the kernel routes BGP wants and has programmed.
type bgpCollector struct {
	table *bgp.PeerTable
	log   *log.Entry
}

var (
	bgpPeersDesc = prometheus.NewDesc("bgp_peers", "Number of BGP sessions by state and IP version.",
		[]string{"status", "ip_version"}, nil)
	peerLabels       = []string{"peer", "type", "ip_version"}
	bgpPeerUpDesc    = prometheus.NewDesc("bgp_peer_up", "1 while the session is Established.", peerLabels, nil)
	bgpPeerStateDesc = prometheus.NewDesc("bgp_peer_session_state", "1 for the session's BGP FSM state.",
		append(append([]string(nil), peerLabels...), "state"), nil)
	bgpUptimeDesc = prometheus.NewDesc("bgp_peer_session_uptime_seconds", "Seconds since the session was Established (0 when it is not).", peerLabels, nil)
	bgpRecvDesc   = prometheus.NewDesc("bgp_peer_routes_received", "Prefixes received from the peer.", peerLabels, nil)
	bgpAccDesc    = prometheus.NewDesc("bgp_peer_routes_accepted", "Prefixes received from the peer and accepted by import policy.", peerLabels, nil)
	bgpAdvDesc    = prometheus.NewDesc("bgp_peer_routes_advertised", "Prefixes advertised to the peer.", peerLabels, nil)
	bgpUpdDesc    = prometheus.NewDesc("bgp_peer_updates_received", "UPDATE messages received in the current session.", peerLabels, nil)
	bgpAgeDesc    = prometheus.NewDesc("bgp_peer_last_update_age_seconds",
		"Seconds since the last UPDATE from the peer (to within a second; absent before its first).", peerLabels, nil)
	bgpWantedDesc     = prometheus.NewDesc("bgp_routes_wanted", "Kernel routes BGP wants (learned best paths).", nil, nil)
	bgpProgrammedDesc = prometheus.NewDesc("bgp_routes_programmed", "Kernel routes BGP wants that the kernel holds.", nil, nil)
	bgpUpDesc         = prometheus.NewDesc("bgp_speaker_up", "1 while the BGP speaker runs and answers.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c bgpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{bgpPeersDesc, bgpPeerUpDesc, bgpPeerStateDesc, bgpUptimeDesc, bgpRecvDesc, bgpAccDesc,
		bgpAdvDesc, bgpUpdDesc, bgpAgeDesc, bgpWantedDesc, bgpProgrammedDesc, bgpUpDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c bgpCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if wanted, programmed, ok := c.table.Routes(); ok {
		gauge(bgpWantedDesc, float64(wanted))
		gauge(bgpProgrammedDesc, float64(programmed))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps, err := c.table.ListPeersAdvertised(ctx)
	if err != nil {
		c.log.WithError(err).Debug("BGP metrics: no peer list")
		gauge(bgpUpDesc, 0)
		return
	}
	gauge(bgpUpDesc, 1)
	now := time.Now()
	counts := map[[2]string]int{}
	for _, p := range ps {
		ipv := "IPv4"
		if p.Address.Is6() {
			ipv = "IPv6"
		}
		counts[[2]string{p.State, ipv}]++
		l := []string{p.Address.String(), p.Description, ipv}
		up, uptime := 0.0, 0.0
		if p.State == "Established" {
			up = 1
			if !p.Since.IsZero() {
				uptime = now.Sub(p.Since).Seconds()
			}
		}
		gauge(bgpPeerUpDesc, up, l...)
		gauge(bgpPeerStateDesc, 1, append(l, p.State)...)
		gauge(bgpUptimeDesc, uptime, l...)
		gauge(bgpRecvDesc, float64(p.Received), l...)
		gauge(bgpAccDesc, float64(p.Accepted), l...)
		gauge(bgpAdvDesc, float64(p.Advertised), l...)
		ch <- prometheus.MustNewConstMetric(bgpUpdDesc, prometheus.CounterValue, float64(p.UpdatesReceived), l...)
		if at, ok := c.table.LastUpdate(p.Address.String()); ok {
			gauge(bgpAgeDesc, now.Sub(at).Seconds(), l...)
		}
	}
	for k, n := range counts {
		gauge(bgpPeersDesc, float64(n), strings.Clone(k[0]), k[1])
	}
}
