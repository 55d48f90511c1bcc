// Package session starts every invocation of the calico and calico-ipam
// plugins the same way: configuration loaded, logging set up, node found,
// workload identified, and a context bounding the datastore work.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/cni-plugin/logging"
	"github.com/palisade-net/palisade/cni-plugin/netconf"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdhttp"
)

// Session is what every command starts from.
type Session struct {
	Conf     *netconf.NetConf
	Workload netconf.Workload
	Log      *log.Entry
	Ctx      context.Context
	cancel   context.CancelFunc
	logFile  io.Closer
	conn     *etcdhttp.Store
}

// invocationTimeouts bounds a whole invocation, in datastore timeouts.
const invocationTimeouts = 4

// Start loads the configuration, sets up logging, finds the node and
// identifies the workload. The context bounds the whole invocation by four
// datastore timeouts; wrap the store with Bound to bound each call by one.
func Start(args *skel.CmdArgs) (*Session, error) {
	conf, err := netconf.Load(args.StdinData)
	if err != nil {
		return nil, err
	}
	logger, logFile, err := logging.Setup(conf.LogLevel, conf.LogFilePath)
	if err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	node, err := conf.NodeName()
	if err != nil {
		logFile.Close()
		return nil, types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	w, err := netconf.IdentifyWorkload(args.Args, args.ContainerID, args.IfName, node)
	if err != nil {
		logFile.Close()
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	// A malformed prevResult is refused, except by DEL, which must clean
	// up whatever it is given.
	if command := os.Getenv("CNI_COMMAND"); conf.RawPrevResult != nil && command != "DEL" {
		if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
			logFile.Close()
			return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("network %q: prevResult: %v", conf.Name, err), "")
		}
	}
	entry := logger.WithFields(log.Fields{"command": os.Getenv("CNI_COMMAND"), "containerID": w.ContainerID,
		"node": node, "workload": w.Namespace + "/" + w.Name, "iface": w.Endpoint})
	ctx, cancel := context.WithTimeout(context.Background(), invocationTimeouts*conf.Timeout())
	return &Session{Conf: conf, Workload: w, Log: entry, Ctx: ctx, cancel: cancel, logFile: logFile}, nil
}

// Store opens the datastore connection, each call bounded by the
// datastore timeout; Close closes it. It makes no request: the first
// call connects.
func (s *Session) Store() (datastore.Interface, error) {
	if s.conn == nil {
		conn, err := s.Conf.Open()
		if err != nil {
			return nil, err
		}
		s.conn = conn
	}
	return Bound(s.conn, s.Conf.Timeout()), nil
}

// KV is the raw key-value view of the connection Store opened (nil
// before Store), for the IPAM allocator, each call bounded as Store's.
func (s *Session) KV() datastore.KV {
	if s.conn == nil {
		return nil
	}
	return BoundKV(s.conn.KV(), s.Conf.Timeout())
}

// Reachable checks that the datastore answers (for STATUS).
func (s *Session) Reachable() error {
	conn, err := s.Conf.Connect(s.Ctx)
	if err != nil {
		return err
	}
	return conn.Close()
}

// Close ends the session.
func (s *Session) Close() {
	if s.conn != nil {
		s.conn.Close()
	}
	s.cancel()
	s.logFile.Close()
}

// Retryable marks datastore failures the runtime may retry (etcd down,
// unreachable or contended) as "try again later"; others stay internal
// errors. Since no invocation checks the connection before its first
// request, an unreachable datastore is reported here.
func Retryable(err error) error {
	switch {
	case errors.Is(err, datastore.ErrUnavailable):
		return types.NewError(types.ErrTryAgainLater, "connecting to the datastore: "+err.Error(), "")
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, datastore.ErrConflict):
		return types.NewError(types.ErrTryAgainLater, err.Error(), "")
	}
	return err
}
