package kubecontrollers

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	anpclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/palisade-net/palisade/kube-controllers/config"
	"github.com/palisade-net/palisade/kube-controllers/controllers"
	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
	"github.com/palisade-net/palisade/libcalico/datastore"
	"github.com/palisade-net/palisade/libcalico/datastore/etcdv3"
	"github.com/palisade-net/palisade/libcalico/ipam"
	libmetrics "github.com/palisade-net/palisade/libcalico/metrics"
)

// Options are Run's settings.
type Options struct {
	Static config.Static
	// RESTConfig, when set, is used instead of Static.Kubeconfig (for
	// tests in the same process).
	RESTConfig *rest.Config
	// OnListen, when set, is told the health server's address.
	OnListen func(net.Addr)
}

// errConfigChanged ends a leadership term when the configuration
// resource's spec changes: the controllers restart with the new one.
var errConfigChanged = errors.New("the KubeControllersConfiguration changed")

// ErrLostLeadership is returned when another replica took the lease.
var ErrLostLeadership = errors.New("lost the leader election lease")

// Run runs calico-kube-controllers until ctx ends (nil) or it can no
// longer lead (ErrLostLeadership; the caller exits and is restarted, as
// Calico's does).
func Run(ctx context.Context, o Options) error {
	h := newHealth()
	st := o.Static
	listening := false
	listen := func(port int) error {
		if listening || port == 0 {
			return nil
		}
		addr, err := h.serve(ctx, port)
		if err != nil {
			return err
		}
		listening = true
		log.WithField("address", addr.String()).Info("Serving /liveness, /readiness and /metrics")
		if o.OnListen != nil {
			o.OnListen(addr)
		}
		return nil
	}
	if st.HealthPort != nil {
		if err := listen(*st.HealthPort); err != nil {
			return err
		}
	}
	rc := o.RESTConfig
	if rc == nil {
		var err error
		if rc, err = clientcmd.BuildConfigFromFlags("", st.Kubeconfig); err != nil {
			return fmt.Errorf("kubeconfig %q: %w", st.Kubeconfig, err)
		}
	}
	rc = rest.CopyConfig(rc)
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	rc.QPS, rc.Burst = 200, 400
	rc.UserAgent = "calico-kube-controllers (palisade)"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	go checkAPIServer(ctx, client, h)
	// The network-policy-api types are CRDs, served as JSON only.
	arc := rest.CopyConfig(rc)
	arc.ContentType, arc.AcceptContentTypes = "application/json", "application/json"
	admin, err := anpclient.NewForConfig(arc)
	if err != nil {
		return fmt.Errorf("network-policy-api client: %w", err)
	}

	store, err := connectEtcd(ctx, st.Etcd, h)
	if err != nil {
		return err
	}
	defer store.Close()
	go checkEtcd(ctx, store, h)
	h.reg.MustRegister(ipamCollector{store: store, alloc: ipam.New(store, store.KV()), leader: h.isLeader},
		libmetrics.NewBadValues(datastore.BadValuesOf(store)))

	for {
		spec, rev, err := loadConfig(ctx, store)
		if err != nil {
			return err
		}
		run, status, warnings, err := config.Merge(spec, st.Env, st.HealthPort)
		if err != nil {
			h.set(func(h *Health) { h.fatal = err })
			return fmt.Errorf("KubeControllersConfiguration %q: %w", config.ConfigName, err)
		}
		for _, w := range warnings {
			log.Warn("Accepted but not acted on: " + w)
		}
		if run.LogLevel == "none" {
			// Calico's "None": nothing below a panic reaches the screen.
			log.SetLevel(log.PanicLevel)
		} else if lvl, err := log.ParseLevel(run.LogLevel); err == nil {
			log.SetLevel(lvl)
		}
		if run.HealthEnabled {
			if err := listen(run.MetricsPort); err != nil {
				return err
			}
		}
		log.WithFields(log.Fields{"controllers": run.Enabled, "leakGracePeriod": run.LeakGracePeriod,
			"compactionPeriod": run.CompactionPeriod}).Info("Configuration loaded")
		err = lead(ctx, o, client, admin, store, h, run, status, spec, rev)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errConfigChanged):
			log.Info("KubeControllersConfiguration changed; restarting the controllers")
			continue
		default:
			return err
		}
	}
}

// connectEtcd connects to etcd, retrying with backoff while it is
// unreachable.
func connectEtcd(ctx context.Context, cfg etcdv3.Config, h *Health) (*etcdv3.Store, error) {
	for attempt := 0; ; attempt++ {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		store, err := etcdv3.New(dctx, cfg)
		cancel()
		if err == nil {
			h.set(func(h *Health) { h.etcd = nil })
			return store, nil
		}
		h.set(func(h *Health) { h.etcd = err })
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d := min(30*time.Second, 200*time.Millisecond<<min(attempt, 8))
		log.WithError(err).WithField("retryIn", d).Warn("etcd is unreachable; retrying")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d):
		}
	}
}

// checkAPIServer keeps the API server's health current.
func checkAPIServer(ctx context.Context, client kubernetes.Interface, h *Health) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(cctx).Error()
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			err = fmt.Errorf("kube-apiserver: %w", err)
		}
		h.set(func(h *Health) { h.apiserver = err })
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// checkEtcd keeps etcd's health current.
func checkEtcd(ctx context.Context, store datastore.Interface, h *Health) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := store.Get(cctx, datastore.Key{Kind: v3.KindKubeControllersConfiguration, Name: config.ConfigName})
		cancel()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, datastore.ErrNotFound) {
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("etcd: %w", err)
		}
		h.set(func(h *Health) { h.etcd = err })
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// loadConfig reads the configuration resource, creating Calico's
// default when there is none, retrying while etcd fails.
func loadConfig(ctx context.Context, store datastore.Interface) (v3.KubeControllersConfigurationSpec, string, error) {
	k := datastore.Key{Kind: v3.KindKubeControllersConfiguration, Name: config.ConfigName}
	for attempt := 0; ; attempt++ {
		r, err := store.Get(ctx, k)
		if errors.Is(err, datastore.ErrNotFound) {
			def := config.Default()
			v3.Default(def)
			if r, err = store.Create(ctx, def); err == nil {
				log.Info("Created the default KubeControllersConfiguration")
			} else if errors.Is(err, datastore.ErrAlreadyExists) {
				continue
			}
		}
		if err == nil {
			kcc := r.(*v3.KubeControllersConfiguration)
			return kcc.Spec, kcc.ResourceVersion, nil
		}
		if ctx.Err() != nil {
			return v3.KubeControllersConfigurationSpec{}, "", ctx.Err()
		}
		d := min(30*time.Second, 200*time.Millisecond<<min(attempt, 8))
		log.WithError(err).WithField("retryIn", d).Warn("Reading the KubeControllersConfiguration failed; retrying")
		select {
		case <-ctx.Done():
			return v3.KubeControllersConfigurationSpec{}, "", ctx.Err()
		case <-time.After(d):
		}
	}
}

func specHash(s v3.KubeControllersConfigurationSpec) [32]byte {
	b, _ := json.Marshal(s)
	return sha256.Sum256(b)
}

// lead takes part in the leader election and, while leading, runs the
// controllers. It returns errConfigChanged when the configuration's spec
// changes, ErrLostLeadership when another replica took the lease.
func lead(ctx context.Context, o Options, client kubernetes.Interface, admin anpclient.Interface, store *etcdv3.Store, h *Health,
	run config.Run, status v3.KubeControllersConfigurationStatus, spec v3.KubeControllersConfigurationSpec, rev string) error {
	st := o.Static
	ectx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchConfig(ectx, store, rev, specHash(spec), func() { cancel(errConfigChanged) })
	h.set(func(h *Health) { h.standby, h.leader = false, false })
	defer h.set(func(h *Health) { h.standby, h.leader = false, false })
	runErr := make(chan error, 1)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: st.LeaseName, Namespace: st.LeaseNamespace},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: st.Identity},
		},
		LeaseDuration: st.LeaseDuration, RenewDeadline: st.RenewDeadline, RetryPeriod: st.RetryPeriod,
		ReleaseOnCancel: true, Name: "calico-kube-controllers",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				log.WithField("identity", st.Identity).Info("Elected leader; starting the controllers")
				h.set(func(h *Health) { h.leader, h.standby = true, false; h.leaderGauge.Set(1) })
				runErr <- runControllers(lctx, client, admin, store, h, run, status)
			},
			OnStoppedLeading: func() {
				h.set(func(h *Health) { h.leader = false; h.leaderGauge.Set(0); h.controllers = map[string]controllerHealth{} })
				log.WithField("identity", st.Identity).Info("Stopped leading")
			},
			OnNewLeader: func(id string) {
				if id != st.Identity {
					h.set(func(h *Health) { h.standby = true })
					log.WithField("leader", id).Info("Another replica leads; standing by")
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ectx)
	if ctx.Err() != nil {
		return nil
	}
	if cause := context.Cause(ectx); errors.Is(cause, errConfigChanged) {
		return errConfigChanged
	}
	select {
	case err := <-runErr:
		if err != nil {
			return err
		}
	default:
	}
	return ErrLostLeadership
}

// watchConfig calls changed once the configuration's spec differs from
// the one running.
func watchConfig(ctx context.Context, store datastore.Interface, rev string, running [32]byte, changed func()) {
	opts := datastore.ListOptions{Kind: v3.KindKubeControllersConfiguration, Name: config.ConfigName}
	for ctx.Err() == nil {
		w, err := store.Watch(ctx, opts, rev)
		if err != nil {
			// Compacted or unreachable: compare with what is stored now.
			r, gerr := store.Get(ctx, datastore.Key{Kind: v3.KindKubeControllersConfiguration, Name: config.ConfigName})
			if gerr == nil {
				if kcc := r.(*v3.KubeControllersConfiguration); specHash(kcc.Spec) != running {
					changed()
					return
				}
				rev = r.GetObjectMeta().ResourceVersion
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range w.Events() {
			if ev.Type == datastore.Modified || ev.Type == datastore.Added {
				if kcc, ok := ev.Object.(*v3.KubeControllersConfiguration); ok && specHash(kcc.Spec) != running {
					w.Stop()
					changed()
					return
				}
			}
			if ev.Revision != "" {
				rev = ev.Revision
			}
		}
		w.Stop()
	}
}

// runControllers runs the enabled controllers until ctx ends.
func runControllers(ctx context.Context, client kubernetes.Interface, admin anpclient.Interface, store *etcdv3.Store, h *Health,
	run config.Run, status v3.KubeControllersConfigurationStatus) error {
	resync := time.Duration(0)
	for _, p := range run.ReconcilerPeriod {
		if resync == 0 || p < resync {
			resync = p
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, resync, informers.WithTransform(trim))
	deps := controllers.Deps{Informers: factory, Client: client, Store: store, KV: store.KV(), Raw: etcdRaw{store.Client()}, Queues: h.queues}
	var cs []controllers.Controller
	for _, name := range run.Enabled {
		d := deps
		d.Period = run.ReconcilerPeriod[name]
		switch name {
		case config.Policy:
			cs = append(cs, controllers.NewPolicy(d))
		case config.AdminNetworkPolicy:
			cs = append(cs, controllers.NewAdminPolicy(d, admin))
		case config.Namespace:
			cs = append(cs, controllers.NewNamespace(d))
		case config.ServiceAccount:
			cs = append(cs, controllers.NewServiceAccount(d))
		case config.WorkloadEndpoint:
			cs = append(cs, controllers.NewWorkloadEndpoints(d))
		case config.Node:
			cs = append(cs, controllers.NewNodes(d, controllers.NodeOptions{SyncLabels: run.SyncLabels, LeakGracePeriod: run.LeakGracePeriod,
				Reclaimed: reclaimedCounter(ctx, store, h.reclaimed)}))
		case config.LoadBalancer:
			cs = append(cs, controllers.NewLoadBalancer(d, controllers.LoadBalancerOptions{AssignIPs: run.AssignIPs,
				Allocated: h.lbAllocated.Set}))
		}
	}
	h.set(func(h *Health) {
		h.controllers = map[string]controllerHealth{}
		for _, c := range cs {
			h.controllers[c.Name()] = controllerHealth{}
		}
	})
	began := time.Now()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for _, c := range cs {
		if !cache.WaitForCacheSync(ctx.Done(), c.HasSynced()...) {
			return nil // ctx ended
		}
	}
	log.WithField("took", time.Since(began).Round(time.Millisecond)).Info("Informers synced")
	go writeStatus(ctx, store, status)
	if run.CompactionPeriod > 0 {
		go compact(ctx, store, run.CompactionPeriod)
	}
	for _, c := range cs {
		go c.Run(ctx)
	}
	synced := false
	for {
		all := true
		h.set(func(h *Health) {
			for _, c := range cs {
				ch := controllerHealth{Synced: c.Synced()}
				if err := c.Err(); err != nil {
					ch.Error = err.Error()
				}
				all = all && ch.Synced
				h.controllers[c.Name()] = ch
				if w, ok := c.(interface{ Writes() int64 }); ok {
					h.writes.WithLabelValues(c.Name()).Set(float64(w.Writes()))
				}
			}
		})
		if all && !synced {
			synced = true
			log.WithField("took", time.Since(began).Round(time.Millisecond)).Info("Every controller finished its first sync")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writeStatus records the running configuration in the resource's
// status, retrying on conflicts and while etcd fails.
func writeStatus(ctx context.Context, store datastore.Interface, status v3.KubeControllersConfigurationStatus) {
	k := datastore.Key{Kind: v3.KindKubeControllersConfiguration, Name: config.ConfigName}
	want, _ := json.Marshal(status)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		r, err := store.Get(ctx, k)
		if err == nil {
			kcc := r.(*v3.KubeControllersConfiguration)
			have, _ := json.Marshal(kcc.Status)
			if string(have) == string(want) {
				return
			}
			kcc.Status = status
			if _, err = store.Update(ctx, kcc); err == nil {
				log.Info("KubeControllersConfiguration status written")
				return
			}
		}
		log.WithError(err).Debug("Writing the KubeControllersConfiguration status failed; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(10*time.Second, 100*time.Millisecond<<min(attempt, 7))):
		}
	}
}

// compact compacts etcd every period to the revision it had one period
// earlier, so watchers always have a period of history.
func compact(ctx context.Context, store *etcdv3.Store, period time.Duration) {
	var last int64
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := store.Client().Get(cctx, "/calico/compaction-marker")
		if err == nil && last > 0 {
			_, err = store.Client().Compact(cctx, last)
		}
		cancel()
		if err != nil {
			log.WithError(err).Warn("etcd compaction failed")
			continue
		}
		if last > 0 {
			log.WithField("revision", last).Debug("etcd compacted")
		}
		last = resp.Header.Revision
	}
}

// trim keeps of each informer object only what the controllers read, so
// a large cluster's caches stay small: no managed fields or annotations
// anywhere (but a Service's projectcalico.org ones, which ask for its
// LoadBalancer addresses), and of a pod only its identity, labels, node,
// service account and addresses.
func trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, UID: o.UID, ResourceVersion: o.ResourceVersion,
				Labels: o.Labels, DeletionTimestamp: o.DeletionTimestamp},
			Spec:   corev1.PodSpec{NodeName: o.Spec.NodeName, ServiceAccountName: o.Spec.ServiceAccountName},
			Status: corev1.PodStatus{Phase: o.Status.Phase, PodIP: o.Status.PodIP, PodIPs: o.Status.PodIPs},
		}, nil
	case *corev1.Service:
		o.SetManagedFields(nil)
		var keep map[string]string
		for k, v := range o.Annotations {
			if strings.HasPrefix(k, "projectcalico.org/") {
				if keep == nil {
					keep = map[string]string{}
				}
				keep[k] = v
			}
		}
		o.SetAnnotations(keep)
	case metav1.Object:
		o.SetManagedFields(nil)
		o.SetAnnotations(nil)
	}
	return obj, nil
}
