package scale

import (
	"context"
	"fmt"
	"time"

	log "github.com/sirupsen/logrus"

	v3 "github.com/palisade-net/palisade/libcalico/api/v3"
)

// SpeakerReadMetrics are the values SpeakerReads reports.
var SpeakerReadMetrics = []Metric{
	{"reads_kib_s", "etcd bytes sent to one quiet BGP speaker", "KiB/s"},
	{"cluster_mib_s", "the same for N speakers (one per node)", "MiB/s"},
	{"speaker_cpu_pct", "the speaker's CPU while quiet", "%"},
	{"speaker_rss_mb", "the speaker's RSS", "MiB"},
}

// readWindow is how long a quiet speaker is watched.
const readWindow = 10 * time.Second

// SpeakerReads measures, at each size n, what one node's BGP speaker
// (node/bgp, as calico-node runs it, in a child process) costs etcd while
// nothing in the cluster changes: a cluster of n nodes with 3 pods each
// (Nodes, WorkloadEndpoints, an IPAM block and affinity per node) and the
// mesh off, so that the speaker has no sessions and everything it does is
// read the datastore. After a warm-up (its first lists), the bytes etcd
// sends over readWindow are its steady read rate; every node of the
// cluster runs one such speaker, hence cluster_mib_s.
func SpeakerReads(ctx context.Context, sizes []int, dir string) (Series, error) {
	s := Series{Name: "bgp-reads", Metrics: SpeakerReadMetrics}
	for _, n := range sizes {
		p, err := speakerReadsOnce(ctx, n, dir)
		if err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("bgp-reads: not measured at %d nodes and above: %v", n, err))
			log.WithError(err).Error("BGP speaker reads failed")
			break
		}
		log.WithFields(log.Fields{"n": n, "values": p.Values}).Info("BGP speaker reads measured")
		s.Points = append(s.Points, p)
	}
	s.Notes = append(s.Notes, fmt.Sprintf("bgp-reads: one speaker (node-0, mesh off, no sessions) in an n-node cluster with 3 pods per node, one etcd member; bytes over %s after a 5 s warm-up", readWindow))
	return s, nil
}

func speakerReadsOnce(ctx context.Context, n int, dir string) (Point, error) {
	r, err := startRun(ctx, dir, fmt.Sprintf("reads-%d-", n), 1)
	if err != nil {
		return Point{}, err
	}
	defer r.stop()
	if err := populate(ctx, r.w, Cluster{Nodes: n, PodsPerNode: 3, Namespaces: 50}); err != nil {
		return Point{}, err
	}
	off := false
	if _, err := r.w.Create(ctx, &v3.BGPConfiguration{TypeMeta: v3.TypeMeta{Kind: v3.KindBGPConfiguration, APIVersion: v3.APIVersion},
		ObjectMeta: v3.ObjectMeta{Name: "default"}, Spec: v3.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}}); err != nil {
		return Point{}, fmt.Errorf("writing the BGPConfiguration: %w", err)
	}
	cmd, done, err := startNode(NodeName(0), r.etcd, r.dir)
	if err != nil {
		return Point{}, err
	}
	defer stopProcess(cmd, done)
	select {
	case <-ctx.Done():
		return Point{}, ctx.Err()
	case <-done:
		return Point{}, fmt.Errorf("the speaker exited")
	case <-time.After(5 * time.Second):
	}
	pid := cmd.Process.Pid
	b0, err := r.etcd.SentBytes()
	if err != nil {
		return Point{}, err
	}
	c0, err := ProcCPUSeconds(pid)
	if err != nil {
		return Point{}, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return Point{}, ctx.Err()
	case <-done:
		return Point{}, fmt.Errorf("the speaker exited")
	case <-time.After(readWindow):
	}
	b1, err := r.etcd.SentBytes()
	if err != nil {
		return Point{}, err
	}
	c1, err := ProcCPUSeconds(pid)
	if err != nil {
		return Point{}, err
	}
	secs := time.Since(t0).Seconds()
	rss, err := ProcRSSMiB(pid)
	if err != nil {
		return Point{}, err
	}
	rate := (b1 - b0) / secs
	return Point{N: n, Values: map[string]float64{
		"reads_kib_s":     rate / 1024,
		"cluster_mib_s":   rate * float64(n) / (1 << 20),
		"speaker_cpu_pct": 100 * (c1 - c0) / secs,
		"speaker_rss_mb":  rss,
	}}, nil
}
