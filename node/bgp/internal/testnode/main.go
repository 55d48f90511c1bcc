// Command testnode runs bgp.Run for one node, for the namespace tests that
// need a separate process (one per node namespace, or one to kill with -9).
package main

import (
	"context"
	"flag"
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
	flag.Parse()
	log.SetLevel(log.InfoLevel)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	store, err := etcdv3.New(ctx, etcdv3.Config{Endpoints: strings.Split(*etcd, ",")})
	if err != nil {
		log.WithError(err).Fatal("connecting to etcd")
	}
	defer store.Close()
	err = bgp.Run(ctx, bgp.Config{
		NodeName: *name, Store: store, KV: store.KV(), GRPCListen: *grpc,
		PollInterval: *poll, StaleRouteTimeout: *stale, SecretsDir: *secrets,
	})
	if err != nil {
		log.WithError(err).Fatal("bgp")
	}
}
