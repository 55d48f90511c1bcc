package etcdv3

import (
	"errors"
	"testing"

	log "github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLogLevelFor: a watcher retrying because etcd is away or leaderless
// says so at debug level (the agent reports the outage once); anything
// else is a warning.
func TestLogLevelFor(t *testing.T) {
	for _, c := range []struct {
		err  error
		want log.Level
	}{
		{rpctypes.ErrNoLeader, log.DebugLevel},
		{rpctypes.ErrGRPCNoLeader, log.DebugLevel},
		{status.Error(codes.Unavailable, "connection refused"), log.DebugLevel},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), log.DebugLevel},
		{rpctypes.ErrPermissionDenied, log.WarnLevel},
		{errors.New("something else"), log.WarnLevel},
	} {
		if got := logLevelFor(c.err); got != c.want {
			t.Errorf("logLevelFor(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}
