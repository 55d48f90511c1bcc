// Command testnode runs bgp.Run for one node, for the namespace tests that
// need a separate process (one per node namespace, or one to kill with -9).
// With -peers it serves the speaker's session table (bgp.PeerTable, what
// the agent's status API reports) as JSON on a unix socket.
//
// Like calico-node it listens with plain TCP, not Multipath TCP, so BGP
// passwords and GTSM work on accepted sessions.
//
//go:debug multipathtcp=0
package main

import (
	"context"
	"encoding/json"
	"flag"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/node/bgp"
)

func main() {
	name := flag.String("name", "", "node name")
	etcd := flag.String("etcd", "", "etcd endpoints, comma separated")
	grpc := flag.String("grpc", "", "GoBGP gRPC listen address")
	poll := flag.Duration("poll", 200*time.Millisecond, "IPAM poll interval")
	stale := flag.Duration("stale", 10*time.Second, "stale route timeout")
	secrets := flag.String("secrets", "", "directory of BGP password files <secret>/<key>")
	peersSock := flag.String("peers", "", "unix socket serving the session table as JSON")
	proto := flag.Uint("proto", 0, "route protocol of the kernel routes (0: the default)")
	downWarn := flag.Duration("down-warning", 3*time.Second, "how long a session is down before a warning")
	flag.Parse()
	log.SetLevel(log.InfoLevel)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	// Keep trying for a while, as a restarted DaemonSet pod would: the
	// fabric may still be settling when the node starts.
	var store *etcdv3.Store
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		if store, err = etcdv3.New(ctx, etcdv3.Config{Endpoints: strings.Split(*etcd, ",")}); err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		log.WithError(err).Warn("etcd not reachable yet; retrying")
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		log.WithError(err).Fatal("connecting to etcd")
	}
	defer store.Close()
	table := &bgp.PeerTable{}
	if *peersSock != "" {
		servePeers(*peersSock, table)
	}
	err = bgp.Run(ctx, bgp.Config{
		NodeName: *name, Store: store, KV: store.KV(), GRPCListen: *grpc,
		PollInterval: *poll, StaleRouteTimeout: *stale, SecretsDir: *secrets,
		Peers: table, RouteProtocol: uint8(*proto), DownWarning: *downWarn,
	})
	if err != nil {
		log.WithError(err).Fatal("bgp")
	}
}

// servePeers answers every request on the socket with the session table.
func servePeers(path string, table *bgp.PeerTable) {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		log.WithError(err).Fatal("peers socket")
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps, err := table.ListPeers(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(ps)
	})
	go func() { _ = http.Serve(l, h) }()
}
