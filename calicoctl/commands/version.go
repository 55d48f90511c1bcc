package commands

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/buildinfo"
	"github.com/palisade-net/palisade/libcalico/datastore"
)

func newVersionCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Display the version of this binary and of the cluster",
		Long: `Display the client version, and the cluster version and type read from
ClusterInformation "default" when the datastore is reachable ("unknown"
otherwise, with the reason on stderr).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi := buildinfo.Get()
			version, clusterType, err := a.clusterVersion(cmd.Context())
			fmt.Fprint(a.env.Out, buildinfo.Table([][2]string{
				{"Client Version", bi.Version},
				{"Git commit", bi.GitCommit},
				{"Build date", bi.BuildDate},
				{"Go version", bi.GoVersion},
				{"Cluster Version", version},
				{"Cluster Type", clusterType},
			}))
			if err != nil {
				fmt.Fprintf(a.env.ErrOut, "Unable to retrieve Cluster Version or Type: %v\n", err)
			}
			return nil
		},
	}
}

// clusterVersion reads spec.calicoVersion and spec.clusterType of
// ClusterInformation "default"; "unknown" for what it cannot read.
func (a *app) clusterVersion(ctx context.Context) (version, clusterType string, err error) {
	version, clusterType = "unknown", "unknown"
	info, err := v3.LookupKind("clusterinformation")
	if err != nil {
		return version, clusterType, err
	}
	c, closeFn, err := a.connect(ctx)
	if err != nil {
		return version, clusterType, err
	}
	defer closeFn()
	r, err := c.Get(ctx, datastore.Key{Kind: info.Kind, Name: "default"})
	if err != nil {
		return version, clusterType, err
	}
	obj, err := toMap(r)
	if err != nil {
		return version, clusterType, err
	}
	if v := scalar(get(obj, "spec", "calicoVersion")); v != "" {
		version = v
	}
	if t := scalar(get(obj, "spec", "clusterType")); t != "" {
		clusterType = t
	}
	return version, clusterType, nil
}
