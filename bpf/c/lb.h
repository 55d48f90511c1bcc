/* The load balancer's selection, shared by the programs on the
 * interfaces (palisade.c, nat.h) and the connect-time programs (ctlb.c):
 * the frontends and their backends (pal_svc, pal_be, pal_be_live), the
 * clients' affinities, the Maglev tables, the node ports and floating
 * IPs, and nat_pick, the one function that looks a new flow's
 * destination up and chooses its backend. It reads no packet. The file
 * that includes it defines GLOBAL first.
 */
#ifndef PALISADE_LB_H
#define PALISADE_LB_H

/* now is the conntrack clock: CLOCK_MONOTONIC_COARSE (a tick behind
 * CLOCK_MONOTONIC at most, which felix's sweep reads), a fraction of
 * bpf_ktime_get_ns's cost. */
static __always_inline __u64 now(void)
{
	return bpf_ktime_get_coarse_ns();
}

/* idle is how long ago last was (0 for a time not yet reached: an entry
 * written by a finer clock). */
static __always_inline __u64 idle(__u64 t, __u64 last)
{
	return t > last ? t - last : 0;
}

/* svc_value.flags */
#define PAL_SVC_EXTERNAL 0x1  /* a load balancer or external address */
#define PAL_SVC_NODEPORT 0x2  /* a node port */
#define PAL_SVC_EXT_LOCAL 0x4 /* externalTrafficPolicy Local */
#define PAL_SVC_INT_LOCAL 0x8 /* internalTrafficPolicy Local */
#define PAL_SVC_FIP 0x10      /* nat_pick: a floating IP (pal_fip), not a Service */

/* pal_natcfg.flags */
#define PAL_NATCFG_DSR 0x1 /* bpfExternalServiceMode DSR */
#define PAL_NATCFG_FIP 0x2 /* some workload of this node has a floating IP */
/* A Service frontend: address (IPv4-mapped for IPv4; a node port the
 * unspecified address of its family), port, protocol. */
struct svc_key {
	__u8 addr[16];
	__u16 port;
	__u8 proto;
	__u8 pad;
};

struct svc_value {
	__u32 id;
	__u32 count;    /* backends {id, 0 .. count-1}; 0: rejected */
	__u32 local;    /* this node's, {id, count .. count+local-1} */
	__u32 flags;    /* PAL_SVC_* */
	__u32 aff_id;   /* the Service port: the affinity's key */
	__u32 aff_secs; /* sessionAffinity ClientIP's timeout (0: none) */
	__u32 maglev;   /* Maglev's table size (0: random) */
	__u32 pad;
};

struct be_key {
	__u32 id;
	__u32 idx;
};

struct be_value {
	__u8 addr[16];
	__u16 port;
	__u8 local; /* on this node */
	__u8 pad;
	/* A remote backend's node (zero: unknown), where traffic from
	 * outside goes through the tunnel. */
	__u8 node[16];
};

/* A backend of frontend id, whatever its index: flows keep it while it is
 * one. */
struct be_live_key {
	__u32 id;
	__u16 port;
	__u8 pad[2];
	__u8 addr[16];
};

/* A client's affinity to a backend of a Service port. */
struct aff_key {
	__u32 id;
	__u8 client[16];
};

struct aff_value {
	__u64 last_seen;
	struct be_value be;
};

/* A slot of a frontend's Maglev table. */
struct maglev_key {
	__u32 id;
	__u32 slot;
};

/* What felix tells the programs of the node. */
struct nat_cfg {
	__u32 tun_ifindex; /* the node port tunnel's device (0: none) */
	__u32 flags;       /* PAL_NATCFG_* */
};

/* An address, as a map key and a global function's argument (the
 * verifier sizes a pointer argument by its type). */
struct nat_addr {
	__u8 a[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct svc_key);
	__type(value, struct svc_value);
} pal_svc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct be_key);
	__type(value, struct be_value);
} pal_be SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct be_live_key);
	__type(value, __u8);
} pal_be_live SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct aff_key);
	__type(value, struct aff_value);
} pal_aff SEC(".maps");

/* Sized by the loader: bpfMaglevMaxServices tables of their size. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct maglev_key);
	__type(value, struct be_value);
} pal_maglev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nat_cfg);
} pal_natcfg SEC(".maps");

/* The node ports, a bit each: a new flow's destination is looked up as a
 * node port only when its port is one (a hash lookup saved on the others). */
struct nodeports {
	__u64 bits[1024];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nodeports);
} pal_nodeports SEC(".maps");

/* A floating IP (WorkloadEndpoint ipNATs) of a workload on this node:
 * its own address and interface. */
struct fip_value {
	__u8 internal[16];
	__u32 ifindex;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct nat_addr);
	__type(value, struct fip_value);
} pal_fip SEC(".maps");

/* Every node's addresses: the node port tunnel's peers, and where a
 * workload's or the host's node port is translated on its own node. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct nat_addr);
	__type(value, __u8);
} pal_nodes SEC(".maps");

static __always_inline int addr_zero(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a;
	return (w[0] | w[1] | w[2] | w[3]) == 0;
}

static __always_inline int addr_eq(const __u8 *a, const __u8 *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;
	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3];
}

static __always_inline int is_mapped4(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a;
	return w[0] == 0 && w[1] == 0 && w[2] == bpf_htonl(0xffff);
}

static __always_inline int be_live(__u32 id, const __u8 *addr, __u16 port)
{
	struct be_live_key k = {.id = id, .port = port};
	__builtin_memcpy(k.addr, addr, 16);
	return bpf_map_lookup_elem(&pal_be_live, &k) != 0;
}

/* What a packet to a frontend is (nat_query.how), which decides the
 * traffic policy that applies. */
#define PAL_HOW_WORKLOAD 0 /* from a workload of this node */
#define PAL_HOW_OUTSIDE 1  /* arrived on a host data interface */
#define PAL_HOW_TUNNEL 2   /* arrived by the node port tunnel: this node's backends */
#define PAL_HOW_HOST 3     /* from the host itself (connect-time load balancing) */

/* nat_query.dst_local */
#define PAL_DST_NOT_LOCAL 0
#define PAL_DST_LOCAL 1   /* a node port answers here (nat_pick_packet: which addresses) */
#define PAL_DST_UNKNOWN 2 /* nat_pick answers PAL_PICK_ASK when it matters */

struct nat_query {
	__u8 dst[16]; /* the frontend asked for */
	__u8 src[16]; /* the client */
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 how;       /* PAL_HOW_* */
	__u8 dst_local; /* PAL_DST_* */
	__u8 pad;
};

struct nat_pick {
	struct be_value be; /* the backend chosen */
	__u32 svc;          /* the frontend's id */
	__u32 flags;        /* its PAL_SVC_* */
};

#define PAL_PICK_NONE 0   /* not a frontend */
#define PAL_PICK_OK 1     /* a backend, in the pick */
#define PAL_PICK_REJECT 2 /* a frontend without backends: ICMP port unreachable */
#define PAL_PICK_DROP 3   /* backends, but none the Local traffic policy allows here */
#define PAL_PICK_ASK 4    /* only a node port can answer: ask again with dst_local known */

/* maglev_hash is the hash of a flow every node computes alike (the
 * frontend's Maglev table is the same on every node, so every node
 * picks the same backend for it). */
static __always_inline __u32 mix32(__u32 h)
{
	h ^= h >> 16;
	h *= 0x7feb352d;
	h ^= h >> 15;
	h *= 0x846ca68b;
	h ^= h >> 16;
	return h;
}

static __always_inline __u32 maglev_hash(struct nat_query *q)
{
	const __u32 *w = (const __u32 *)q->src;
	__u32 h = 0x9e3779b9;
	h = mix32(h ^ w[0]);
	h = mix32(h ^ w[1]);
	h = mix32(h ^ w[2]);
	h = mix32(h ^ w[3]);
	h = mix32(h ^ (((__u32)q->sport << 16) | q->dport));
	return mix32(h ^ q->proto);
}

/* nat_pick looks a new flow's destination up among the frontends (an
 * address and port; a node port when the destination is an address of
 * this node or the flow came by the tunnel) and chooses its backend: the
 * client's affinity to one still live, else Maglev's table (external
 * traffic to a load balancer or external address of a Service that asks
 * for it), else one at random; among this node's backends only for the
 * tunnel and the Local traffic policies (internal: to a cluster address;
 * external: from outside to the others). It returns PAL_PICK_*. */
GLOBAL int nat_pick(struct nat_query *q, struct nat_pick *out)
{
	if (!q || !out)
		return PAL_PICK_NONE;
	struct svc_key k = {.port = q->dport, .proto = q->proto};
	__builtin_memcpy(k.addr, q->dst, 16);
	struct svc_value *sv = bpf_map_lookup_elem(&pal_svc, &k);
	if (!sv) {
		__u32 zero = 0;
		struct nat_cfg *c = bpf_map_lookup_elem(&pal_natcfg, &zero);
		/* A floating IP: its workload, the same port. */
		struct fip_value *f = 0;
		if (c && (c->flags & PAL_NATCFG_FIP))
			f = bpf_map_lookup_elem(&pal_fip, (struct nat_addr *)q->dst);
		if (f) {
			__builtin_memset(out, 0, sizeof(*out));
			__builtin_memcpy(out->be.addr, f->internal, 16);
			out->be.port = q->dport;
			out->be.local = 1;
			out->flags = PAL_SVC_FIP;
			return PAL_PICK_OK;
		}
		/* A node port: the unspecified address of the family. */
		struct nodeports *np = bpf_map_lookup_elem(&pal_nodeports, &zero);
		__u32 port = q->dport;
		if (!np || !(np->bits[(port >> 6) & 1023] & (1ULL << (port & 63))))
			return PAL_PICK_NONE;
		__builtin_memset(k.addr, 0, 16);
		if (is_mapped4(q->dst)) {
			k.addr[10] = 0xff;
			k.addr[11] = 0xff;
		}
		sv = bpf_map_lookup_elem(&pal_svc, &k);
		if (!sv || !(sv->flags & PAL_SVC_NODEPORT))
			return PAL_PICK_NONE;
		if (q->how != PAL_HOW_TUNNEL && q->dst_local != PAL_DST_LOCAL)
			return q->dst_local == PAL_DST_UNKNOWN ? PAL_PICK_ASK : PAL_PICK_NONE;
	}
	__u32 id = sv->id, n = sv->count, nl = sv->local, flags = sv->flags;
	__u32 aff_id = sv->aff_id, aff_secs = sv->aff_secs, m = sv->maglev;
	out->svc = id;
	out->flags = flags;
	if (n == 0)
		return PAL_PICK_REJECT;
	int external = flags & (PAL_SVC_EXTERNAL | PAL_SVC_NODEPORT);
	int from_outside = q->how == PAL_HOW_OUTSIDE || q->how == PAL_HOW_TUNNEL;
	int maglev = m && (flags & PAL_SVC_EXTERNAL) && from_outside;
	int local = q->how == PAL_HOW_TUNNEL || (!external && (flags & PAL_SVC_INT_LOCAL)) ||
		    (external && (flags & PAL_SVC_EXT_LOCAL) && q->how == PAL_HOW_OUTSIDE && !maglev);
	__u32 base = 0, cnt = n;
	if (local) {
		if (nl == 0)
			return PAL_PICK_DROP;
		base = n;
		cnt = nl;
	}
	__u64 t = now();
	struct aff_key ak = {.id = aff_id};
	if (aff_secs) {
		__builtin_memcpy(ak.client, q->src, 16);
		struct aff_value *av = bpf_map_lookup_elem(&pal_aff, &ak);
		if (av && idle(t, av->last_seen) <= (__u64)aff_secs * 1000000000ULL && (!local || av->be.local) &&
		    be_live(id, av->be.addr, av->be.port)) {
			out->be = av->be;
			av->last_seen = t;
			return PAL_PICK_OK;
		}
	}
	struct be_value *be = 0;
	if (maglev) {
		struct maglev_key mk = {.id = id, .slot = maglev_hash(q) % m};
		be = bpf_map_lookup_elem(&pal_maglev, &mk);
		if (be && local && !be->local)
			be = 0;
	}
	if (!be) {
		struct be_key bk = {.id = id, .idx = base + bpf_get_prandom_u32() % cnt};
		be = bpf_map_lookup_elem(&pal_be, &bk);
	}
	if (!be)
		return PAL_PICK_REJECT;
	out->be = *be;
	if (aff_secs) {
		struct aff_value av = {.last_seen = t, .be = *be};
		bpf_map_update_elem(&pal_aff, &ak, &av, BPF_ANY);
	}
	return PAL_PICK_OK;
}

#endif
