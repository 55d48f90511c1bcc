// Command calico-kube-controllers keeps the Calico resources Kubernetes
// objects imply in etcd: NetworkPolicies, namespace and service-account
// Profiles, pod labels on WorkloadEndpoints, and the Calico side of
// deleted nodes and leaked addresses. See package kubecontrollers.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/go-logr/logr/funcr"
	log "github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	kubecontrollers "github.com/palisade-net/palisade/kube-controllers"
	"github.com/palisade-net/palisade/kube-controllers/config"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
)

// defaultGCPercent is the garbage collector's target unless GOGC says
// otherwise: the controllers hold large caches (every pod, policy and
// endpoint), and growing the heap to twice them before collecting would
// double their memory.
const defaultGCPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "calico-kube-controllers:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "calico-kube-controllers",
		Short: "Palisade's Kubernetes controllers (Calico's etcd-datastore model)",
		Long: `calico-kube-controllers watches the Kubernetes API and keeps etcd's Calico
resources in step: NetworkPolicy → NetworkPolicy knp.default.<name>, Namespace
→ Profile kns.<namespace>, ServiceAccount → Profile ksa.<namespace>.<name>, pod
labels → WorkloadEndpoint labels (endpoints of vanished pods removed), and a
deleted Node → its Calico node removed; leaked pod addresses are released
after the leak grace period.

It is configured as Calico's: DATASTORE_TYPE=etcdv3, ETCD_ENDPOINTS,
ETCD_CA_CERT_FILE, ETCD_CERT_FILE, ETCD_KEY_FILE, ETCD_USERNAME, ETCD_PASSWORD,
KUBECONFIG (empty: in-cluster), and the KubeControllersConfiguration "default"
(created when missing), whose fields LOG_LEVEL, ENABLED_CONTROLLERS,
RECONCILER_PERIOD, COMPACTION_PERIOD, HEALTH_ENABLED, SYNC_NODE_LABELS and
AUTO_HOST_ENDPOINTS override. Replicas elect a leader through the Lease
LEASE_NAMESPACE/LEASE_NAME (default kube-system/calico-kube-controllers). It
serves /liveness, /readiness and /metrics on the configuration's
prometheusMetricsPort (9094), or HEALTH_PORT.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log.SetOutput(os.Stderr)
			log.SetFormatter(&log.TextFormatter{FullTimestamp: true})
			// client-go logs through klog: into the same log.
			klog.SetLogger(funcr.New(func(prefix, args string) {
				log.WithField("from", "client-go").Info(strings.TrimSpace(prefix + " " + args))
			}, funcr.Options{}))
			st, err := config.FromEnv(os.Getenv)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			err = kubecontrollers.Run(ctx, kubecontrollers.Options{Static: st})
			if errors.Is(err, kubecontrollers.ErrLostLeadership) {
				log.Error("Lost the leader election lease; exiting to start over")
			}
			return err
		},
	}
	root.AddCommand(buildinfo.Command())
	return root
}
