package etcdtest

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EnableAuth turns on etcd authentication through admin: user root, with
// rootPassword and the root role, then auth enabled. After it every
// client must log in.
func EnableAuth(ctx context.Context, t testing.TB, admin *clientv3.Client, rootPassword string) {
	t.Helper()
	steps := []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("enabling etcd auth, step %d: %v", i, err)
		}
	}
}
