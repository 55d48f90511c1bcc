// Command install-cni puts the calico and calico-ipam plugins, their
// network configuration and a kubeconfig for them onto a Kubernetes node,
// as Calico's install does, and keeps the kubeconfig current while the
// ServiceAccount token rotates. See package install.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/palisade-net/palisade/cni-plugin/install"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "install-cni:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var root string
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "install-cni",
		Short: "Install the Palisade CNI plugins and their configuration on this node",
		Long: `install-cni copies the CNI binaries in /opt/cni/bin to the host's
(/host/opt/cni/bin, and /host/secondary-bin-dir when mounted), the etcd
certificates in TLS_ASSETS_DIR (/calico-secrets) to
/host/etc/cni/net.d/calico-tls, a kubeconfig made from the pod's
ServiceAccount token to /host/etc/cni/net.d/calico-kubeconfig, and last the
network configuration CNI_NETWORK_CONFIG (placeholders filled) to
/host/etc/cni/net.d/$CNI_CONF_NAME, as Calico's install-cni does and with
its environment: CNI_NET_DIR, CNI_CONF_NAME, CNI_OLD_CONF_NAME,
CNI_NETWORK_CONFIG, CNI_NETWORK_CONFIG_FILE, CNI_MTU, KUBERNETES_NODE_NAME,
ETCD_ENDPOINTS, DATASTORE_TYPE, LOG_LEVEL, LOG_FILE_PATH, SKIP_CNI_BINARIES,
UPDATE_CNI_BINARIES, SKIP_TLS_VERIFY, KUBERNETES_SERVICE_HOST/PORT/PROTOCOL.

With SLEEP=true (the default) it keeps running and rewrites the kubeconfig
when the token rotates (and the certificates when the secret changes);
SLEEP=false exits after the install.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log.SetFormatter(&log.TextFormatter{FullTimestamp: true})
			if lvl, err := log.ParseLevel(os.Getenv("LOG_LEVEL")); err == nil {
				log.SetLevel(lvl)
			}
			c, err := install.FromEnv(os.Getenv, root)
			if err != nil {
				return err
			}
			if interval <= 0 {
				return fmt.Errorf("--poll-interval %s: want a positive duration", interval)
			}
			c.PollInterval = interval
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return c.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&root, "root", "/", "Prefix of every path in the container (for tests)")
	cmd.Flags().DurationVar(&interval, "poll-interval", time.Second, "How often the token and certificates are checked for changes (with SLEEP=true)")
	cmd.AddCommand(buildinfo.Command())
	return cmd
}
