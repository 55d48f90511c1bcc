//go:build ignore

/* Palisade's TCX programs. pal_ingress and pal_egress are attached to every
 * interface felix manages; they parse the packet, apply anti-spoofing and
 * conntrack, and tail-call the generated policy program of each stage the
 * interface's entry (pal_ep) names. A policy program leaves its verdict in
 * the per-CPU state and tail-calls pal_resume (slot 0 of pal_progs), which
 * takes the walk on from the stage that ran. Conntrack entries are per
 * interface: a flow is allowed at an interface once that interface's
 * policy allowed its first packet. See felix/dataplane/bpf/DESIGN.md.
 *
 * Regenerate the object with `go generate ./bpf` (needs clang-14 and
 * libbpf-dev: hack/install-deps.sh --bpf).
 */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "palisade.h"

char _license[] SEC("license") = "Dual MIT/GPL";

/* Conntrack timeouts (ns), set by the loader. */
volatile const __u64 ct_tcp_syn = 20ULL * 1000000000;
volatile const __u64 ct_tcp_est = 3600ULL * 1000000000;
volatile const __u64 ct_tcp_fin = 30ULL * 1000000000;
volatile const __u64 ct_tcp_rst = 10ULL * 1000000000;
volatile const __u64 ct_udp = 60ULL * 1000000000;
volatile const __u64 ct_icmp = 5ULL * 1000000000;
volatile const __u64 ct_other = 600ULL * 1000000000;
volatile const __u64 frag_timeout = 30ULL * 1000000000;
/* Counting on (1) or off (0, benchmarks only: the cost of counting). */
volatile const __u32 count_packets = 1;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct state);
} pal_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct ep);
} pal_ep SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} pal_progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct src_key);
	__type(value, __u8);
} pal_src SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4194304);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct set_key);
	__type(value, __u8);
} pal_sets SEC(".maps");

/* The calc IP set ids behind the 64-bit ids, for dumps (no program reads
 * it). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct set_name);
} pal_setnames SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct port_key);
	__type(value, __u8);
} pal_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct failsafe_key);
	__type(value, __u8);
} pal_failsafe SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512000);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ct_key);
	__type(value, struct ct_value);
} pal_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct frag_key);
	__type(value, struct frag_value);
} pal_frag SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 524288);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct counter_key);
	__type(value, struct counter_value);
} pal_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 262144);
} pal_events SEC(".maps");

/* The helpers below are global functions: the verifier checks each once,
 * not at every call site, which keeps loading fast. A pointer argument of
 * a global function may be NULL as far as the verifier knows. */
#define GLOBAL __attribute__((noinline))

GLOBAL int count(__u32 ifindex, __u32 stage, __u64 rule, __u32 len)
{
	if (!count_packets)
		return 0;
	struct counter_key k = {.ifindex = ifindex, .stage = stage, .rule = rule};
	struct counter_value *v = bpf_map_lookup_elem(&pal_counters, &k);
	if (v) {
		v->packets += 1;
		v->bytes += len;
		return 0;
	}
	struct counter_value first = {.packets = 1, .bytes = len};
	bpf_map_update_elem(&pal_counters, &k, &first, BPF_NOEXIST);
	return 0;
}

static __always_inline int drop(struct state *st, __u16 reason)
{
	count(st->ifindex, PAL_COUNTER_GENERAL, reason, st->len);
	return PAL_TCX_DROP;
}

/* allow lets the packet go on; at ingress it is marked seen. */
static __always_inline int allow(struct __sk_buff *skb, struct state *st)
{
	if (!(st->flags & PAL_F_OUT))
		skb->mark |= PAL_MARK_SEEN;
	return PAL_TCX_NEXT;
}

static __always_inline int allow_because(struct __sk_buff *skb, struct state *st, __u16 reason)
{
	count(st->ifindex, PAL_COUNTER_GENERAL, reason, st->len);
	return allow(skb, st);
}

enum { P_OK, P_NOT_IP, P_BAD, P_FRAG_LATER };

static __always_inline void map4(__u8 *dst, __be32 a)
{
	__u32 *w = (__u32 *)dst;
	w[0] = 0;
	w[1] = 0;
	w[2] = bpf_htonl(0x0000ffff);
	w[3] = a;
}

static __always_inline int has_ports(__u8 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE || proto == IPPROTO_SCTP;
}

static __always_inline int is_icmp(struct state *st)
{
	return (st->family == 4 && st->proto == IPPROTO_ICMP) || (st->family == 6 && st->proto == IPPROTO_ICMPV6);
}

static __always_inline int icmp_is_echo(struct state *st)
{
	__u8 t = st->icmp_type;
	if (st->family == 4)
		return t == 0 || t == 8 || t == 13 || t == 14 || t == 15 || t == 16 || t == 17 || t == 18;
	return t == 128 || t == 129;
}

static __always_inline int icmp_is_error(struct state *st)
{
	__u8 t = st->icmp_type;
	if (st->family == 4)
		return t == 3 || t == 4 || t == 5 || t == 11 || t == 12;
	return t >= 1 && t <= 4;
}

/* parse_ip reads the IP header at off into st (family, addresses,
 * protocol, fragment) and returns the offset of the layer 4 header, or
 * -P_* (ipv6 says which family the ethertype named). */
GLOBAL int parse_ip(struct __sk_buff *skb, struct state *st, __u32 off, __u32 ipv6)
{
	if (!st)
		return -P_BAD;
	if (!ipv6) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, off, &ip, sizeof(ip)) < 0)
			return -P_BAD;
		if (ip.version != 4 || ip.ihl < 5)
			return -P_BAD;
		st->family = 4;
		st->proto = ip.protocol;
		map4(st->src, ip.saddr);
		map4(st->dst, ip.daddr);
		__u16 fo = bpf_ntohs(ip.frag_off);
		st->frag_id = bpf_ntohs(ip.id);
		if (fo & 0x1fff)
			return -P_FRAG_LATER;
		if (fo & 0x2000)
			st->flags |= PAL_F_FRAG;
		return off + ip.ihl * 4;
	}
	struct ipv6hdr ip6;
	if (bpf_skb_load_bytes(skb, off, &ip6, sizeof(ip6)) < 0)
		return -P_BAD;
	if (ip6.version != 6)
		return -P_BAD;
	st->family = 6;
	__builtin_memcpy(st->src, &ip6.saddr, 16);
	__builtin_memcpy(st->dst, &ip6.daddr, 16);
	/* IPv4-mapped addresses never appear on the wire: such a packet could
	 * pass for IPv4 in the IP sets. */
	__u32 *s = (__u32 *)st->src, *d = (__u32 *)st->dst;
	if ((s[0] == 0 && s[1] == 0 && s[2] == bpf_htonl(0xffff)) || (d[0] == 0 && d[1] == 0 && d[2] == bpf_htonl(0xffff)))
		return -P_BAD;
	__u8 next = ip6.nexthdr;
	off += sizeof(ip6);
	for (int i = 0; i < 6; i++) {
		if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS) {
			__u8 h[2];
			if (bpf_skb_load_bytes(skb, off, h, 2) < 0)
				return -P_BAD;
			next = h[0];
			off += (h[1] + 1) * 8;
		} else if (next == IPPROTO_AH) {
			__u8 h[2];
			if (bpf_skb_load_bytes(skb, off, h, 2) < 0)
				return -P_BAD;
			next = h[0];
			off += (h[1] + 2) * 4;
		} else if (next == IPPROTO_FRAGMENT) {
			struct {
				__u8 next, res;
				__be16 off;
				__be32 id;
			} f;
			if (bpf_skb_load_bytes(skb, off, &f, sizeof(f)) < 0)
				return -P_BAD;
			next = f.next;
			off += 8;
			st->frag_id = bpf_ntohl(f.id);
			__u16 fo = bpf_ntohs(f.off);
			if (fo & 0xfff8) {
				st->proto = next;
				return -P_FRAG_LATER;
			}
			if (fo & 1)
				st->flags |= PAL_F_FRAG;
		} else {
			break;
		}
		if (off > 1024)
			return -P_BAD;
	}
	st->proto = next;
	return off;
}

/* parse_l4 reads ports (or ICMP type, code and echo id). */
GLOBAL int parse_l4(struct __sk_buff *skb, struct state *st, __u32 off)
{
	if (!st)
		return -P_BAD;
	if (st->proto == IPPROTO_TCP) {
		/* Ports to flags in one read; a header too short for the
		 * flags (a tiny first fragment) is read for its ports, flags
		 * 0, as before. */
		__u8 h[14];
		if (bpf_skb_load_bytes(skb, off, h, sizeof(h)) == 0) {
			st->tcp_flags = h[13];
		} else if (bpf_skb_load_bytes(skb, off, h, 4) < 0) {
			return -P_BAD;
		}
		st->sport = (h[0] << 8) | h[1];
		st->dport = (h[2] << 8) | h[3];
	} else if (has_ports(st->proto)) {
		__be16 p[2];
		if (bpf_skb_load_bytes(skb, off, p, sizeof(p)) < 0)
			return -P_BAD;
		st->sport = bpf_ntohs(p[0]);
		st->dport = bpf_ntohs(p[1]);
	} else if (is_icmp(st)) {
		__u8 h[8];
		if (bpf_skb_load_bytes(skb, off, h, sizeof(h)) < 0)
			return -P_BAD;
		st->icmp_type = h[0];
		st->icmp_code = h[1];
		if (icmp_is_echo(st)) {
			st->sport = (h[4] << 8) | h[5];
			st->dport = st->sport;
		}
	}
	return 0;
}

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

/* side_a_is_src orders the two sides of a flow (any total order will do,
 * the same everywhere). */
static __always_inline int side_a_is_src(struct state *st)
{
	__u32 *s = (__u32 *)st->src, *d = (__u32 *)st->dst;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u32 x = bpf_ntohl(s[i]), y = bpf_ntohl(d[i]);
		if (x != y)
			return x < y;
	}
	return st->sport <= st->dport;
}

/* icmp_query is an ICMP query's request type (a reply maps to its
 * request), so the two directions of one exchange meet in one entry. */
static __always_inline __u8 icmp_query(struct state *st)
{
	if (!is_icmp(st))
		return 0;
	__u8 t = st->icmp_type;
	if (st->family == 4) {
		if (t == 0)
			return 8;
		if (t == 14 || t == 16 || t == 18)
			return t - 1;
		return t;
	}
	return t == 129 ? 128 : t;
}

static __always_inline void ct_key_of(struct state *st, struct ct_key *k, int src_is_a)
{
	k->ifindex = st->ifindex;
	k->proto = st->proto;
	k->icmp = icmp_query(st);
	if (src_is_a) {
		__builtin_memcpy(k->a, st->src, 16);
		__builtin_memcpy(k->b, st->dst, 16);
		k->pa = st->sport;
		k->pb = st->dport;
	} else {
		__builtin_memcpy(k->a, st->dst, 16);
		__builtin_memcpy(k->b, st->src, 16);
		k->pa = st->dport;
		k->pb = st->sport;
	}
}

static __always_inline __u64 ct_timeout(__u8 proto, __u32 flags)
{
	if (proto == IPPROTO_TCP) {
		if (flags & PAL_CT_RST)
			return ct_tcp_rst;
		if ((flags & (PAL_CT_FIN_A | PAL_CT_FIN_B)) == (PAL_CT_FIN_A | PAL_CT_FIN_B))
			return ct_tcp_fin;
		if (flags & PAL_CT_REPLY)
			return ct_tcp_est;
		return ct_tcp_syn;
	}
	if (proto == IPPROTO_UDP || proto == IPPROTO_UDPLITE)
		return ct_udp;
	if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6)
		return ct_icmp;
	return ct_other;
}

/* ct_refresh is how far an entry's last_seen may lag its last packet:
 * a sixteenth of its timeout, at most a second. An entry is rewritten
 * only when it lagged more, or when its TCP state changed, so a busy
 * flow does not write (and move between CPUs) a cache line on every
 * packet; it expires between timeout - ct_refresh and timeout after its
 * last packet. */
static __always_inline __u64 ct_refresh(__u64 timeout)
{
	__u64 r = timeout >> 4;
	return r < 1000000000ULL ? r : 1000000000ULL;
}

#include "lb.h"

/* frag_note records the first fragment of a fragmented packet let
 * through, which its later fragments follow. */
static __always_inline void frag_note(struct state *st, __u64 t)
{
	struct frag_key fk = {.ifindex = st->ifindex, .id = st->frag_id, .proto = st->proto};
	__builtin_memcpy(fk.src, st->src, 16);
	__builtin_memcpy(fk.dst, st->dst, 16);
	struct frag_value fv = {.last_seen = t};
	bpf_map_update_elem(&pal_frag, &fk, &fv, BPF_ANY);
}

/* ct_established reports whether the packet belongs to a flow this
 * interface allowed, and updates the entry (its flags when the TCP state
 * changed, its last_seen when that lagged by more than ct_refresh). */
GLOBAL int ct_established(struct state *st)
{
	if (!st)
		return 0;
	struct ct_key k = {};
	int a = side_a_is_src(st);
	if (a)
		st->flags |= PAL_F_SRC_A;
	ct_key_of(st, &k, a);
	struct ct_value *v = bpf_map_lookup_elem(&pal_ct, &k);
	if (!v)
		return 0;
	__u64 t = now();
	__u32 flags = v->flags, nflags = flags;
	__u64 last = v->last_seen;
	__u64 timeout = ct_timeout(st->proto, flags);
	if (idle(t, last) > timeout)
		return 0;
	/* The later fragments of an established flow's packet follow its
	 * first. */
	if (st->flags & PAL_F_FRAG)
		frag_note(st, t);
	if (st->proto == IPPROTO_TCP) {
		__u8 f = st->tcp_flags;
		/* A new SYN on a closed flow's tuple is a new connection. */
		if ((f & (TCP_SYN | TCP_ACK)) == TCP_SYN && (flags & (PAL_CT_RST | PAL_CT_FIN_A | PAL_CT_FIN_B)))
			return 0;
		if (f & TCP_RST)
			nflags |= PAL_CT_RST;
		if (f & TCP_FIN)
			nflags |= a ? PAL_CT_FIN_A : PAL_CT_FIN_B;
	}
	if (!a != !(flags & PAL_CT_ORIG_A))
		nflags |= PAL_CT_REPLY;
	if (nflags != flags) {
		/* A new state's timeout counts from this packet. Another CPU
		 * may write the flags at once; a bit lost so is set again by
		 * the next packet that carries it. */
		v->flags = nflags;
		v->last_seen = t;
		st->flags |= PAL_F_CT_WRITTEN;
		st->ct_ms = ct_timeout(st->proto, nflags) / 1000000;
	} else if (idle(t, last) > ct_refresh(timeout)) {
		v->last_seen = t;
		st->flags |= PAL_F_CT_WRITTEN;
		st->ct_ms = timeout / 1000000;
	}
	return 1;
}

/* ct_related reports whether an ICMP error is about a flow this interface
 * allowed: the packet it quotes is looked up. */
GLOBAL int ct_related(struct __sk_buff *skb, struct state *st, __u32 l4)
{
	if (!st || !is_icmp(st) || !icmp_is_error(st))
		return 0;
	struct state in = {};
	in.ifindex = st->ifindex;
	int l4in = parse_ip(skb, &in, l4 + 8, st->family == 6);
	if (l4in < 0 || in.family != st->family)
		return 0;
	if (has_ports(in.proto)) {
		__be16 p[2];
		if (bpf_skb_load_bytes(skb, l4in, p, sizeof(p)) < 0)
			return 0;
		in.sport = bpf_ntohs(p[0]);
		in.dport = bpf_ntohs(p[1]);
	} else if (is_icmp(&in)) {
		__u8 h[8];
		if (bpf_skb_load_bytes(skb, l4in, h, sizeof(h)) < 0)
			return 0;
		in.icmp_type = h[0];
		if (!icmp_is_echo(&in))
			return 0;
		in.sport = (h[4] << 8) | h[5];
		in.dport = in.sport;
	}
	struct ct_key k = {};
	ct_key_of(&in, &k, side_a_is_src(&in));
	struct ct_value *v = bpf_map_lookup_elem(&pal_ct, &k);
	if (!v)
		return 0;
	return idle(now(), v->last_seen) <= ct_timeout(in.proto, v->flags);
}

/* ct_create records an allowed flow (and the first fragment of a
 * fragmented packet, which the later fragments follow). */
GLOBAL int ct_create(struct state *st)
{
	if (!st || (st->flags & PAL_F_UNTRACKED))
		return 0;
	__u64 t = now();
	if (st->flags & PAL_F_FRAG)
		frag_note(st, t);
	struct ct_key k = {};
	int a = !!(st->flags & PAL_F_SRC_A);
	ct_key_of(st, &k, a);
	struct ct_value v = {.created = t, .last_seen = t, .flags = a ? PAL_CT_ORIG_A : 0};
	if (bpf_map_update_elem(&pal_ct, &k, &v, BPF_ANY) < 0)
		count(st->ifindex, PAL_COUNTER_GENERAL, PAL_C_CT_FULL, st->len);
	return 0;
}

GLOBAL int frag_allowed(struct state *st)
{
	if (!st)
		return 0;
	struct frag_key fk = {.ifindex = st->ifindex, .id = st->frag_id, .proto = st->proto};
	__builtin_memcpy(fk.src, st->src, 16);
	__builtin_memcpy(fk.dst, st->dst, 16);
	struct frag_value *fv = bpf_map_lookup_elem(&pal_frag, &fk);
	if (!fv)
		return 0;
	__u64 t = now(), last = fv->last_seen;
	if (idle(t, last) > frag_timeout)
		return 0;
	if (idle(t, last) > ct_refresh(frag_timeout))
		fv->last_seen = t;
	return 1;
}

/* to_host reports whether the host itself is the destination: a FIB
 * lookup finds no route to forward by. */
GLOBAL int to_host(struct __sk_buff *skb, struct state *st)
{
	if (!st)
		return 0;
	struct bpf_fib_lookup p = {};
	p.ifindex = st->ifindex;
	p.l4_protocol = st->proto;
	if (st->family == 4) {
		p.family = 2; /* AF_INET */
		p.ipv4_src = ((__u32 *)st->src)[3];
		p.ipv4_dst = ((__u32 *)st->dst)[3];
	} else {
		p.family = 10; /* AF_INET6 */
		__builtin_memcpy(p.ipv6_src, st->src, 16);
		__builtin_memcpy(p.ipv6_dst, st->dst, 16);
	}
	int rc = bpf_fib_lookup(skb, &p, sizeof(p), 0);
	return rc == BPF_FIB_LKUP_RET_NOT_FWDED || rc == BPF_FIB_LKUP_RET_FWD_DISABLED;
}

/* failsafe reports a failsafe port: inbound by destination port and
 * source address, outbound by destination port and address. */
GLOBAL int failsafe(struct state *st, __u32 out)
{
	if (!st || !has_ports(st->proto))
		return 0;
	struct failsafe_key k = {.prefixlen = 32 + 128, .dir = out, .proto = st->proto};
	k.port = bpf_htons(st->dport);
	__builtin_memcpy(k.addr, out ? st->dst : st->src, 16);
	return bpf_map_lookup_elem(&pal_failsafe, &k) != 0;
}

/* nd reports IPv6 neighbour discovery and MLD between a workload and the
 * host (link-local or multicast destination): always allowed, as with
 * iptables. */
static __always_inline int nd(struct state *st)
{
	if (st->family != 6 || st->proto != IPPROTO_ICMPV6)
		return 0;
	__u8 t = st->icmp_type;
	if (!(t == 130 || t == 131 || t == 132 || t == 133 || t == 135 || t == 136))
		return 0;
	return st->dst[0] == 0xff || (st->dst[0] == 0xfe && (st->dst[1] & 0xc0) == 0x80);
}

/* own_src4 reports the workload's own IPv4 address as the source: the
 * common case, decided without pal_src's trie walk. */
static __always_inline int own_src4(struct state *st, struct ep *ep)
{
	return st->family == 4 && ep->src4 && *(__u32 *)&st->src[12] == ep->src4;
}

/* spoofed reports a source address the workload may not send from. */
GLOBAL int spoofed(struct state *st)
{
	if (!st)
		return 1;
	struct src_key k = {.prefixlen = 32 + 128, .ifindex = st->ifindex};
	__builtin_memcpy(k.addr, st->src, 16);
	return bpf_map_lookup_elem(&pal_src, &k) == 0;
}

#include "nat.h"

/* nat_verdict is the verdict of a nat_* result other than PAL_NAT_GO,
 * counted. */
static __always_inline int nat_verdict(struct state *st, int r)
{
	if (r == PAL_NAT_REJECTED) {
		count(st->ifindex, PAL_COUNTER_GENERAL, PAL_C_NAT_REJECT, st->len);
		return TC_ACT_REDIRECT;
	}
	if (r == PAL_NAT_NOLOCAL)
		return drop(st, PAL_C_NAT_NOLOCAL);
	if (r == TC_ACT_REDIRECT)
		count(st->ifindex, PAL_COUNTER_GENERAL, PAL_C_NAT_TUNNEL, st->len);
	return r;
}

/* tunnel_back sends a backend's reply back through the node port tunnel
 * (nat_tunnel_back), marked seen as allow does. */
static __always_inline int tunnel_back(struct __sk_buff *skb, struct state *st)
{
	int r = nat_tunnel_back(skb, st);
	if (r == PAL_NAT_GO)
		return allow(skb, st);
	skb->mark |= PAL_MARK_SEEN;
	return nat_verdict(st, r);
}

/* Slots of pal_progs holding the resume programs, by kind and direction;
 * policy programs go after them. */
#define PAL_RESUME_WL_IN 0
#define PAL_RESUME_WL_OUT 1
#define PAL_RESUME_HEP_IN 2
#define PAL_RESUME_HEP_OUT 3

/* PAL_NO_LOOP builds the object for kernels without bpf_loop (before
 * Linux 5.17): no policy engine (its maps and its bpf_loop walk drop
 * out), every stage's slot is a program felix compiles into
 * instructions, tail-called (bpf/objects.go chooses the object). */
#ifndef PAL_NO_LOOP
#include "engine.h"
#endif

/* PAL_RAN: run_stage decided the stage in place (the policy engine); the
 * walk goes on after it in the same program. */
#define PAL_RAN 0x100

/* run_stage runs a stage: the policy engine decides it in place when the
 * slot is an engine stage's (PAL_RAN, the rule that decided counted, as a
 * resume program counts it), else it tail-calls the slot's program; on
 * return something failed. */
static __always_inline int run_stage(struct __sk_buff *skb, struct state *st, struct ep *ep, __u32 stage)
{
	__u32 slot = ep->slots[stage & 7];
	if (slot == 0 || stage >= PAL_STAGES)
		return drop(st, PAL_C_NO_PROGRAM);
	st->phase = stage;
	st->verdict = PAL_VERDICT_NONE;
	st->slot = slot;
#ifndef PAL_NO_LOOP
	int r = engine(st);
	if (r > 0) {
		count(st->ifindex, stage, st->rule_id, st->len);
		return PAL_RAN;
	}
	if (r < 0)
		return drop(st, PAL_C_NO_PROGRAM);
#endif
	bpf_tail_call(skb, &pal_progs, slot);
	return drop(st, PAL_C_NO_PROGRAM);
}

/* PAL_WALKS bounds the stages one walk runs in place (a host endpoint's
 * ingress: doNotTrack, preDNAT, then normal or forward). */
#ifndef PAL_NO_LOOP
#define PAL_WALKS 4
#else
#define PAL_WALKS 1 /* nothing runs in place */
#endif

static __always_inline struct state *state(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&pal_state, &zero);
}

/* begin sets up the state of a new packet and parses it. It returns the
 * layer 4 offset (>= 0), or a verdict to return as -(verdict + 16). */
static __always_inline int begin(struct __sk_buff *skb, struct state *st, struct ep **epp, int out, __u8 resume)
{
	__u32 ifindex = skb->ifindex;
	struct ep *ep = bpf_map_lookup_elem(&pal_ep, &ifindex);
	__builtin_memset(st, 0, sizeof(*st));
	st->ifindex = ifindex;
	st->len = skb->len;
	st->phase = PAL_PHASE_START;
	st->resume = resume;
	if (out)
		st->flags |= PAL_F_OUT;
	*epp = ep;
	if (!ep)
		return -(drop(st, PAL_C_NO_ENDPOINT) + 16);
	/* Bytes are counted from the IP header on, as iptables counts them. */
	if (st->len > (ep->l2len & 0xff))
		st->len -= ep->l2len & 0xff;
	if (ep->flags & PAL_EP_BLOCKED)
		return -(drop(st, PAL_C_BLOCKED) + 16);
	int ipv6;
	if (skb->protocol == bpf_htons(ETH_P_IP))
		ipv6 = 0;
	else if (skb->protocol == bpf_htons(ETH_P_IPV6))
		ipv6 = 1;
	else
		return -(PAL_TCX_NEXT + 16);
	st->l3 = ep->l2len & 0xff;
	int l4 = parse_ip(skb, st, st->l3, ipv6);
	if (l4 == -P_FRAG_LATER) {
		int wl = ep->flags & PAL_EP_WORKLOAD;
		if (wl && !out && !own_src4(st, ep) && spoofed(st))
			return -(drop(st, PAL_C_SPOOFED) + 16);
		/* A translated datagram's fragment follows its first (nat.h):
		 * translated before conntrack in, after it out. */
		if (wl && !out && nat_frag_later(skb, st) < 0)
			return -(drop(st, PAL_C_MALFORMED) + 16);
		if (!frag_allowed(st))
			return -(drop(st, PAL_C_FRAG_DROP) + 16);
		if (wl && out && nat_frag_later(skb, st) < 0)
			return -(drop(st, PAL_C_MALFORMED) + 16);
		return -(allow_because(skb, st, PAL_C_FRAG_ALLOW) + 16);
	}
	if (l4 < 0 || parse_l4(skb, st, l4) < 0)
		return -(drop(st, PAL_C_MALFORMED) + 16);
	st->l4 = l4;
	return l4;
}

/* resumed finds a resumed packet's state and entry; the layer 4 offset
 * is the one the entry program parsed (in the state, which the tail
 * calls keep). */
static __always_inline int resumed(struct __sk_buff *skb, struct state *st, struct ep **epp)
{
	__u32 ifindex = st->ifindex;
	struct ep *ep = bpf_map_lookup_elem(&pal_ep, &ifindex);
	*epp = ep;
	if (!ep || ifindex != skb->ifindex)
		return -(drop(st, PAL_C_NO_ENDPOINT) + 16);
	count(ifindex, st->phase, st->rule_id, st->len);
	return st->l4 & 0xffff;
}

/* The walks. Each starts at PAL_PHASE_START (from the entry program) or
 * after the stage whose verdict the state holds (from a resume program). */

static __always_inline int walk_wl_in(struct __sk_buff *skb, struct state *st, struct ep *ep, __u32 l4)
{
	if (st->phase == PAL_PHASE_START) {
		if (nd(st))
			return allow_because(skb, st, PAL_C_ND);
		if (!own_src4(st, ep) && spoofed(st))
			return drop(st, PAL_C_SPOOFED);
		/* A Service frontend becomes its backend before conntrack
		 * and policy (nat.h). */
		int nv = nat_fwd(skb, st);
		if (nv != PAL_NAT_GO && nv != PAL_NAT_ESTABLISHED)
			return nat_verdict(st, nv);
		if (nv == PAL_NAT_ESTABLISHED || ct_established(st)) {
			count(st->ifindex, PAL_COUNTER_GENERAL, PAL_C_ESTABLISHED, st->len);
			if ((st->flags & PAL_F_NAT_FIP) && nat_fip_out(skb, st) < 0)
				return drop(st, PAL_C_MALFORMED);
			if (st->flags & PAL_F_NAT_TUNNEL)
				return tunnel_back(skb, st);
			/* The forward program sends it on, when it can; an
			 * empty slot falls through. */
			if (!(st->flags & PAL_F_FRAG))
				bpf_tail_call(skb, &pal_progs, PAL_SLOT_FWD);
			return allow(skb, st);
		}
		if (ct_related(skb, st, l4))
			return allow_because(skb, st, PAL_C_RELATED);
		if (to_host(skb, st))
			st->flags |= PAL_F_TOHOST;
		return run_stage(skb, st, ep, PAL_STAGE_NORMAL_IN);
	}
	if (st->verdict != PAL_VERDICT_ALLOW)
		return PAL_TCX_DROP;
	if ((st->flags & PAL_F_TOHOST) && (ep->flags & PAL_EP_TOHOST_DROP))
		return drop(st, PAL_C_TOHOST_DROP);
	ct_create(st);
	if ((st->flags & PAL_F_NAT_FIP) && nat_fip_out(skb, st) < 0)
		return drop(st, PAL_C_MALFORMED);
	if (st->flags & PAL_F_NAT_TUNNEL)
		return tunnel_back(skb, st);
	return allow(skb, st);
}

/* wl_out_allow lets a packet to a workload through, a Service's reply
 * given its frontend as source (nat.h). */
static __always_inline int wl_out_allow(struct __sk_buff *skb, struct state *st, __u16 reason)
{
	if (nat_rev(skb, st, st->ifindex) < 0)
		return drop(st, PAL_C_MALFORMED);
	if (reason != PAL_C_MAX)
		count(st->ifindex, PAL_COUNTER_GENERAL, reason, st->len);
	return allow(skb, st);
}

static __always_inline int walk_wl_out(struct __sk_buff *skb, struct state *st, struct ep *ep, __u32 l4)
{
	if (st->phase == PAL_PHASE_START) {
		if (skb->mark & PAL_MARK_REPLY) {
			/* A reject the workload's ingress program made. */
			skb->mark &= ~PAL_MARK_REPLY;
			return allow(skb, st);
		}

		if (skb->ingress_ifindex == 0) {
			/* Open, and tracked: the workload's replies are
			 * established, not new traffic to the host. */
			if (!ct_established(st))
				ct_create(st);
			return wl_out_allow(skb, st, PAL_C_FROM_HOST);
		}
		if (ct_established(st))
			return wl_out_allow(skb, st, PAL_C_ESTABLISHED);
		if (ct_related(skb, st, l4)) {
			/* An error about a translated flow: the client's view. */
			if (nat_icmp_rev(skb, st, st->ifindex, 0) < 0)
				return drop(st, PAL_C_MALFORMED);
			return wl_out_allow(skb, st, PAL_C_RELATED);
		}
		return run_stage(skb, st, ep, PAL_STAGE_NORMAL_OUT);
	}
	if (st->verdict != PAL_VERDICT_ALLOW)
		return PAL_TCX_DROP;
	ct_create(st);
	return wl_out_allow(skb, st, PAL_C_MAX);
}

static __always_inline int walk_hep_in(struct __sk_buff *skb, struct state *st, struct ep *ep, __u32 l4)
{
	__u8 phase = st->phase, verdict = st->verdict;
	if (phase == PAL_PHASE_START) {
		if (ep->slots[PAL_STAGE_UNTRACKED_IN])
			return run_stage(skb, st, ep, PAL_STAGE_UNTRACKED_IN);
		goto after_untracked;
	}
	if (phase == PAL_STAGE_UNTRACKED_IN) {
		if (verdict == PAL_VERDICT_DENY)
			return PAL_TCX_DROP;
		if (verdict == PAL_VERDICT_ALLOW) {
			st->flags |= PAL_F_UNTRACKED;
			if (to_host(skb, st))
				return allow(skb, st);
			goto forward;
		}
		goto after_untracked;
	}
	if (phase == PAL_STAGE_PREDNAT_IN) {
		if (verdict == PAL_VERDICT_DENY)
			return PAL_TCX_DROP;
		if (verdict == PAL_VERDICT_ALLOW)
			st->flags |= PAL_F_PREDNAT_OK;
		goto after_prednat;
	}
	/* After the normal or the forward stage. */
	if (verdict != PAL_VERDICT_ALLOW)
		return PAL_TCX_DROP;
	ct_create(st);
	return allow(skb, st);

after_untracked:
	if (ct_established(st))
		return allow_because(skb, st, PAL_C_ESTABLISHED);
	if (ct_related(skb, st, l4))
		return allow_because(skb, st, PAL_C_RELATED);
	if (failsafe(st, 0))
		st->flags |= PAL_F_FAILSAFE;
	else if (ep->slots[PAL_STAGE_PREDNAT_IN])
		return run_stage(skb, st, ep, PAL_STAGE_PREDNAT_IN);
after_prednat:
	if (to_host(skb, st)) {
		st->flags |= PAL_F_TOHOST;
		if (st->flags & (PAL_F_FAILSAFE | PAL_F_PREDNAT_OK)) {
			count(st->ifindex, PAL_COUNTER_GENERAL, (st->flags & PAL_F_FAILSAFE) ? PAL_C_FAILSAFE : PAL_C_PREDNAT_ALLOW, st->len);
			ct_create(st);
			return allow(skb, st);
		}
		return run_stage(skb, st, ep, PAL_STAGE_NORMAL_IN);
	}
forward:
	if (ep->slots[PAL_STAGE_FWD_IN])
		return run_stage(skb, st, ep, PAL_STAGE_FWD_IN);
	count(st->ifindex, PAL_COUNTER_GENERAL, PAL_C_NO_FWD_POLICY, st->len);
	ct_create(st);
	return allow(skb, st);
}

static __always_inline int walk_hep_out(struct __sk_buff *skb, struct state *st, struct ep *ep, __u32 l4)
{
	int local = skb->ingress_ifindex == 0;
	__u8 phase = st->phase, verdict = st->verdict;
	if (phase == PAL_PHASE_START) {
		if (local && ep->slots[PAL_STAGE_UNTRACKED_OUT])
			return run_stage(skb, st, ep, PAL_STAGE_UNTRACKED_OUT);
		goto after_untracked;
	}
	if (phase == PAL_STAGE_UNTRACKED_OUT) {
		if (verdict == PAL_VERDICT_DENY)
			return PAL_TCX_DROP;
		if (verdict == PAL_VERDICT_ALLOW)
			return allow_because(skb, st, PAL_C_UNTRACKED_ALLOW);
		goto after_untracked;
	}
	if (verdict != PAL_VERDICT_ALLOW)
		return PAL_TCX_DROP;
	ct_create(st);
	return allow(skb, st);

after_untracked:
	if (ct_established(st))
		return allow_because(skb, st, PAL_C_ESTABLISHED);
	if (ct_related(skb, st, l4))
		return allow_because(skb, st, PAL_C_RELATED);
	if (local) {
		if (failsafe(st, 1)) {
			count(st->ifindex, PAL_COUNTER_GENERAL, PAL_C_FAILSAFE, st->len);
			ct_create(st);
			return allow(skb, st);
		}
		return run_stage(skb, st, ep, PAL_STAGE_NORMAL_OUT);
	}
	if (ep->slots[PAL_STAGE_FWD_OUT])
		return run_stage(skb, st, ep, PAL_STAGE_FWD_OUT);
	count(st->ifindex, PAL_COUNTER_GENERAL, PAL_C_NO_FWD_POLICY, st->len);
	ct_create(st);
	return allow(skb, st);
}

/* Entry and resume programs of one kind and direction. walks_ goes on
 * walking after each stage the engine decided in place. */
#define PROGRAMS(name, out, resume_slot)                                           \
	static __always_inline int walks_##name(struct __sk_buff *skb, struct state *st, struct ep *ep, __u32 l4) \
	{                                                                          \
		for (int i = 0; i < PAL_WALKS; i++) {                              \
			int r = walk_##name(skb, st, ep, l4);                      \
			if (r != PAL_RAN)                                          \
				return r;                                          \
		}                                                                  \
		return PAL_TCX_DROP;                                               \
	}                                                                          \
	SEC("tc") int pal_##name(struct __sk_buff *skb)                            \
	{                                                                          \
		struct state *st = state();                                        \
		if (!st)                                                           \
			return PAL_TCX_DROP;                                       \
		struct ep *ep;                                                     \
		int l4 = begin(skb, st, &ep, out, resume_slot);                    \
		if (l4 < 0)                                                        \
			return -l4 - 16;                                           \
		if (!ep)                                                           \
			return PAL_TCX_DROP;                                       \
		return walks_##name(skb, st, ep, l4);                              \
	}                                                                          \
	SEC("tc") int pal_resume_##name(struct __sk_buff *skb)                     \
	{                                                                          \
		struct state *st = state();                                        \
		if (!st)                                                           \
			return PAL_TCX_DROP;                                       \
		struct ep *ep;                                                     \
		int l4 = resumed(skb, st, &ep);                                    \
		if (l4 < 0)                                                        \
			return -l4 - 16;                                           \
		if (!ep)                                                           \
			return PAL_TCX_DROP;                                       \
		return walks_##name(skb, st, ep, l4);                              \
	}

PROGRAMS(wl_in, 0, PAL_RESUME_WL_IN)
PROGRAMS(wl_out, 1, PAL_RESUME_WL_OUT)
PROGRAMS(hep_in, 0, PAL_RESUME_HEP_IN)
PROGRAMS(hep_out, 1, PAL_RESUME_HEP_OUT)

/* The host conntrack bypass (FelixConfiguration bpfHostConntrackBypass).
 * A packet of a flow the workload's interface has allowed is sent on by
 * a FIB lookup straight to the egress of the interface the kernel would
 * forward it by (bpf_redirect_neigh), skipping the host's netfilter
 * (conntrack, iptables) and IP forwarding, when the host's conntrack
 * tracks the flow without changing it: confirmed, its reply seen (TCP:
 * its handshake done, assured), no NAT, no helper. Anything else — the
 * host itself as destination, a TTL that runs out, a packet too big for
 * the next link, ICMP, a flow kube-proxy or natOutgoing translates —
 * takes the kernel's path as before. The host's entry is kept as long as
 * ours: each time the program writes its own entry (a new TCP state, or
 * every ct_refresh), the host entry's timeout is set to ours, so it
 * closes with the flow though it sees none of its packets. The program
 * is loaded on its own (its kfuncs need nf_conntrack's BTF): where the
 * kernel has none, the slot stays empty and nothing is bypassed. */

struct nf_conn {
	unsigned long status;
} __attribute__((preserve_access_index));

/* The kernel's struct bpf_ct_opts as of Linux 6.0 (12 bytes, accepted
 * by later kernels too). */
struct pal_ct_opts {
	__s32 netns_id;
	__s32 error;
	__u8 l4proto;
	__u8 dir;
	__u8 reserved[2];
};

extern struct nf_conn *bpf_skb_ct_lookup(struct __sk_buff *skb, struct bpf_sock_tuple *tuple, __u32 tuple__sz,
					 struct pal_ct_opts *opts, __u32 opts__sz) __ksym;
extern void bpf_ct_release(struct nf_conn *ct) __ksym;
extern int bpf_ct_change_timeout(struct nf_conn *ct, __u32 timeout) __ksym;

#define PAL_NF_NEEDED (IPS_CONFIRMED | IPS_SEEN_REPLY)
#define PAL_NF_CHANGES (IPS_SRC_NAT | IPS_DST_NAT | IPS_SEQ_ADJUST | IPS_HELPER)

/* host_ct_plain reports whether the host's conntrack tracks the packet's
 * flow without translating it (see above), and passes our entry's new
 * timeout on to it. */
static __always_inline int host_ct_plain(struct __sk_buff *skb, struct state *st)
{
	struct bpf_sock_tuple t = {};
	__u32 tsz;
	if (st->family == 4) {
		t.ipv4.saddr = *(__u32 *)&st->src[12];
		t.ipv4.daddr = *(__u32 *)&st->dst[12];
		t.ipv4.sport = bpf_htons(st->sport);
		t.ipv4.dport = bpf_htons(st->dport);
		tsz = sizeof(t.ipv4);
	} else {
		__builtin_memcpy(t.ipv6.saddr, st->src, 16);
		__builtin_memcpy(t.ipv6.daddr, st->dst, 16);
		t.ipv6.sport = bpf_htons(st->sport);
		t.ipv6.dport = bpf_htons(st->dport);
		tsz = sizeof(t.ipv6);
	}
	struct pal_ct_opts o = {.netns_id = -1, .l4proto = st->proto};
	struct nf_conn *ct = bpf_skb_ct_lookup(skb, &t, tsz, &o, sizeof(o));
	if (!ct)
		return 0;
	unsigned long status = ct->status;
	int plain = (status & PAL_NF_NEEDED) == PAL_NF_NEEDED && !(status & PAL_NF_CHANGES) &&
		    (st->proto != IPPROTO_TCP || (status & IPS_ASSURED));
	if (plain && (st->flags & PAL_F_CT_WRITTEN) && st->ct_ms)
		bpf_ct_change_timeout(ct, st->ct_ms);
	bpf_ct_release(ct);
	return plain;
}

/* ct_live_at reports whether interface ifindex has a live conntrack
 * entry of the packet's flow. */
static __always_inline int ct_live_at(struct state *st, __u32 ifindex)
{
	struct ct_key k = {};
	ct_key_of(st, &k, !!(st->flags & PAL_F_SRC_A));
	k.ifindex = ifindex;
	struct ct_value *v = bpf_map_lookup_elem(&pal_ct, &k);
	return v && idle(now(), v->last_seen) <= ct_timeout(st->proto, v->flags);
}

#ifndef BPF_FIB_LKUP_RET_NO_NEIGH
#define BPF_FIB_LKUP_RET_NO_NEIGH 7
#endif

/* decrement_ttl decrements the TTL (IPv6: hop limit) as forwarding
 * would, with the IPv4 header checksum; -1 when it would run out (the
 * kernel's path sends the ICMP error) or the packet cannot be written. */
static __always_inline int decrement_ttl(struct __sk_buff *skb, struct state *st)
{
	__u32 l3 = st->l3;
	if (st->family == 4) {
		/* The TTL is the high byte of its header word. */
		__be16 w;
		if (bpf_skb_load_bytes(skb, l3 + 8, &w, 2) < 0)
			return -1;
		if ((bpf_ntohs(w) >> 8) <= 1)
			return -1;
		__be16 nw = bpf_htons(bpf_ntohs(w) - 0x100);
		if (bpf_l3_csum_replace(skb, l3 + 10, w, nw, 2) < 0 || bpf_skb_store_bytes(skb, l3 + 8, &nw, 2, 0) < 0)
			return -1;
		return 0;
	}
	__u8 hops;
	if (bpf_skb_load_bytes(skb, l3 + 7, &hops, 1) < 0 || hops <= 1)
		return -1;
	hops--;
	return bpf_skb_store_bytes(skb, l3 + 7, &hops, 1, 0) < 0 ? -1 : 0;
}

/* fib_route looks up where the kernel would forward the packet, arriving
 * on the interface in st: the egress interface and next hop in p. It
 * returns the lookup's result (SUCCESS with the MAC addresses resolved,
 * NO_NEIGH without), or -1. */
static __always_inline int fib_route(struct __sk_buff *skb, struct state *st, struct bpf_fib_lookup *p)
{
	__builtin_memset(p, 0, sizeof(*p));
	p->ifindex = st->ifindex;
	p->l4_protocol = st->proto;
	p->sport = bpf_htons(st->sport);
	p->dport = bpf_htons(st->dport);
	if (st->family == 4) {
		p->family = 2; /* AF_INET */
		p->ipv4_src = *(__u32 *)&st->src[12];
		p->ipv4_dst = *(__u32 *)&st->dst[12];
	} else {
		p->family = 10; /* AF_INET6 */
		__builtin_memcpy(p->ipv6_src, st->src, 16);
		__builtin_memcpy(p->ipv6_dst, st->dst, 16);
	}
	int rc = bpf_fib_lookup(skb, p, sizeof(*p), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return -1;
	return rc;
}

/* to_workload takes, for a packet bound to the local workload interface
 * out (entry dep), what that interface's egress program would do for an
 * established flow: its conntrack entry refreshed (or no: -1) and the
 * packet counted. The packet may then skip that program (redirect_peer). */
static __always_inline int to_workload(struct state *st, __u32 out)
{
	__u32 in = st->ifindex, flags = st->flags;
	st->ifindex = out;
	st->flags = (flags & ~(PAL_F_SRC_A | PAL_F_CT_WRITTEN)) | PAL_F_OUT;
	int ok = ct_established(st);
	if (ok)
		count(out, PAL_COUNTER_GENERAL, PAL_C_ESTABLISHED, st->len);
	st->ifindex = in;
	st->flags = flags | (st->flags & PAL_F_CT_WRITTEN);
	return ok ? 0 : -1;
}

/* deliver sends the packet on by the FIB's answer: straight into a local
 * veth workload's namespace (bpf_redirect_peer, its MAC addresses
 * written) when peer, else to the egress interface's transmit, the next
 * hop resolved as forwarding would (bpf_redirect_neigh). Both want an
 * Ethernet header: a packet that arrived from an L3 device is given one.
 * peer: out is a local veth workload whose egress duties to_workload
 * took, and the FIB gave its MAC addresses. Returns TC_ACT_REDIRECT, -1
 * for the kernel's path, or PAL_TCX_DROP for a packet that can go
 * neither way (its new header left unwritten). */
static __always_inline int deliver(struct __sk_buff *skb, struct state *st, struct bpf_fib_lookup *p, int peer)
{
	__u32 mtu = 0;
	if (bpf_check_mtu(skb, p->ifindex, &mtu, 0, 0) != 0)
		return -1;
	if (decrement_ttl(skb, st) < 0)
		return -1;
	if (peer || st->l3 == 0) {
		struct ethhdr eth;
		__builtin_memcpy(eth.h_dest, p->dmac, 6);
		__builtin_memcpy(eth.h_source, p->smac, 6);
		eth.h_proto = p->family == 2 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6);
		if (st->l3 == 0) {
			if (bpf_skb_change_head(skb, sizeof(eth), 0) != 0)
				return -1;
			if (bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) != 0)
				return PAL_TCX_DROP;
			if (peer)
				return bpf_redirect_peer(p->ifindex, 0);
		} else if (bpf_skb_store_bytes(skb, 0, &eth, 12, 0) == 0) {
			return bpf_redirect_peer(p->ifindex, 0);
		}
	}
	struct bpf_redir_neigh nh = {};
	nh.nh_family = p->family;
	if (p->family == 2)
		nh.ipv4_nh = p->ipv4_dst;
	else
		__builtin_memcpy(nh.ipv6_nh, p->ipv6_dst, 16);
	return bpf_redirect_neigh(p->ifindex, &nh, sizeof(nh), 0);
}

/* peer_ok reports whether a packet routed to the local workload
 * interface out (entry dep) may go straight to its peer: out is a veth
 * (and bpfRedirectToPeer is not Disabled: felix sets PAL_EP_VETH only
 * then), the FIB gave the MAC addresses, and the packet arrived with an
 * Ethernet header or from an L3 device allowed to (from_l3:
 * bpfRedirectToPeer Enabled). */
static __always_inline int peer_ok(struct state *st, struct ep *dep, int rc, int from_l3)
{
	return (dep->flags & PAL_EP_VETH) && rc == BPF_FIB_LKUP_RET_SUCCESS && (st->l3 == 14 || (st->l3 == 0 && from_l3));
}

/* bypassable reports a packet the bypass may send on: TCP without SYN or
 * UDP, not a fragment, arriving on its interface. */
static __always_inline int bypassable(struct state *st)
{
	if (st->flags & (PAL_F_OUT | PAL_F_FRAG))
		return 0;
	if (st->proto == IPPROTO_TCP)
		return !(st->tcp_flags & TCP_SYN);
	return st->proto == IPPROTO_UDP;
}

/* forward sends a workload's established packet on (TC_ACT_REDIRECT), or
 * returns -1 for the kernel's path. */
static __always_inline int forward(struct __sk_buff *skb, struct state *st)
{
	if (!bypassable(st) || !host_ct_plain(skb, st))
		return -1;
	struct bpf_fib_lookup p;
	int rc = fib_route(skb, st, &p);
	if (rc < 0)
		return -1;
	/* To a workload: only through its own conntrack entry of the flow,
	 * which its programs made (so they are attached: the iptables guard
	 * drops what is forwarded to a workload interface not yet attached,
	 * and this packet skips no guard that still had work to do); a
	 * blocked interface is left to that guard too. */
	__u32 out = p.ifindex;
	struct ep *dep = bpf_map_lookup_elem(&pal_ep, &out);
	int peer = 0;
	if (dep) {
		if (dep->flags & PAL_EP_BLOCKED)
			return -1;
		if (dep->flags & PAL_EP_WORKLOAD) {
			peer = peer_ok(st, dep, rc, 0);
			if (peer ? to_workload(st, out) < 0 : !ct_live_at(st, out))
				return -1;
			if (peer && nat_rev(skb, st, out) < 0)
				return PAL_TCX_DROP;
		}
	}
	return deliver(skb, st, &p, peer);
}

/* data_forward sends a packet arriving on a host data interface on to a
 * local workload, when that workload's interface has the flow established
 * and the host tracks it untranslated; -1 for the kernel's path. */
static __always_inline int data_forward(struct __sk_buff *skb, struct state *st, int from_l3)
{
	if (!bypassable(st))
		return -1;
	struct bpf_fib_lookup p;
	int rc = fib_route(skb, st, &p);
	if (rc < 0)
		return -1;
	__u32 out = p.ifindex;
	struct ep *dep = bpf_map_lookup_elem(&pal_ep, &out);
	if (!dep || (dep->flags & (PAL_EP_WORKLOAD | PAL_EP_BLOCKED)) != PAL_EP_WORKLOAD)
		return -1;
	if (!ct_live_at(st, out) || !host_ct_plain(skb, st))
		return -1;
	int peer = peer_ok(st, dep, rc, from_l3);
	if (peer && to_workload(st, out) < 0)
		return -1;
	if (peer && nat_rev(skb, st, out) < 0)
		return PAL_TCX_DROP;
	return deliver(skb, st, &p, peer);
}

/* pal_fwd runs in slot PAL_SLOT_FWD after a workload's entry program
 * found its packet established (and counted it): sent on, or let through
 * as the entry program would. */
SEC("tc")
int pal_fwd(struct __sk_buff *skb)
{
	struct state *st = state();
	if (!st)
		return PAL_TCX_DROP;
	if (st->ifindex != skb->ifindex)
		return drop(st, PAL_C_NO_ENDPOINT);
	__u32 ifindex = st->ifindex;
	struct ep *ep = bpf_map_lookup_elem(&pal_ep, &ifindex);
	if (ep && (ep->flags & PAL_EP_DATA)) {
		/* From pal_data_in. */
		int rc = data_forward(skb, st, !!(ep->flags & PAL_EP_PEER_L3));
		if (rc == TC_ACT_REDIRECT) {
			count(ifindex, PAL_COUNTER_GENERAL, PAL_C_FORWARDED, st->len);
			return rc;
		}
		if (rc == PAL_TCX_DROP)
			return rc;
		return PAL_TCX_NEXT;
	}
	int rc = forward(skb, st);
	if (rc == TC_ACT_REDIRECT) {
		count(st->ifindex, PAL_COUNTER_GENERAL, PAL_C_FORWARDED, st->len);
		return rc;
	}
	if (rc == PAL_TCX_DROP)
		return rc;
	return allow(skb, st);
}

/* data_begin sets up the state of a packet on a host data interface or
 * the tunnel device (entry flag) and parses it: the layer 4 offset, or
 * -1 for a packet of another kind (let through untouched). */
static __always_inline int data_begin(struct __sk_buff *skb, struct state *st, struct ep **epp, __u32 flag, int out)
{
	__u32 ifindex = skb->ifindex;
	struct ep *ep = bpf_map_lookup_elem(&pal_ep, &ifindex);
	*epp = ep;
	if (!ep || !(ep->flags & flag))
		return -1;
	int ipv6;
	if (skb->protocol == bpf_htons(ETH_P_IP))
		ipv6 = 0;
	else if (skb->protocol == bpf_htons(ETH_P_IPV6))
		ipv6 = 1;
	else
		return -1;
	__builtin_memset(st, 0, sizeof(*st));
	st->ifindex = ifindex;
	st->len = skb->len;
	st->phase = PAL_PHASE_START;
	if (out)
		st->flags |= PAL_F_OUT;
	st->l3 = ep->l2len & 0xff;
	if (st->len > st->l3)
		st->len -= st->l3;
	int l4 = parse_ip(skb, st, st->l3, ipv6);
	if (l4 < 0 || parse_l4(skb, st, l4) < 0)
		return -1;
	st->l4 = l4;
	return l4;
}

/* pal_data_in is attached to the ingress of host data interfaces
 * (bpfDataIfacePattern): a packet from outside to a Service frontend is
 * given its backend (nat_outside: here, or on another node through the
 * tunnel); then, while the host conntrack bypass is on (the forward
 * program in its slot), a packet of an established flow to a local
 * workload is sent on to it. Every other packet goes on untouched. */
SEC("tc")
int pal_data_in(struct __sk_buff *skb)
{
	struct state *st = state();
	if (!st)
		return PAL_TCX_NEXT;
	struct ep *ep;
	if (data_begin(skb, st, &ep, PAL_EP_DATA, 0) < 0)
		return PAL_TCX_NEXT;
	int nv = nat_outside(skb, st);
	if (nv != PAL_NAT_GO)
		return nat_verdict(st, nv);
	bpf_tail_call(skb, &pal_progs, PAL_SLOT_FWD);
	return PAL_TCX_NEXT;
}

/* pal_data_out is attached to the egress of host data interfaces: the
 * reply of a flow from outside to a backend on this node gets its
 * frontend back. */
SEC("tc")
int pal_data_out(struct __sk_buff *skb)
{
	struct state *st = state();
	if (!st)
		return PAL_TCX_NEXT;
	struct ep *ep;
	if (data_begin(skb, st, &ep, PAL_EP_DATA, 1) < 0)
		return PAL_TCX_NEXT;
	if (nat_host_rev(skb, st) < 0 || nat_icmp_rev(skb, st, 0, 1) < 0)
		return drop(st, PAL_C_MALFORMED);
	return PAL_TCX_NEXT;
}

/* tun_reply sends a reply that came back through the tunnel on to its
 * client, by the FIB. */
GLOBAL int tun_reply(struct __sk_buff *skb, struct state *st)
{
	if (!st)
		return PAL_TCX_DROP;
	struct bpf_fib_lookup p;
	if (fib_route(skb, st, &p) < 0)
		return drop(st, PAL_C_NAT_NOLOCAL);
	int rc = deliver(skb, st, &p, 0);
	if (rc == TC_ACT_REDIRECT) {
		count(st->ifindex, PAL_COUNTER_GENERAL, PAL_C_FORWARDED, st->len);
		return rc;
	}
	return PAL_TCX_DROP;
}

/* pal_tun_in is attached to the ingress of the node port tunnel's device
 * (VXLAN, its metadata: the sending node and the kind of packet): a flow
 * another node sent here is given one of this node's backends
 * (nat_tunneled) and goes on to it; a reply, translated by the
 * backend's node, is sent on to its client (a FIB lookup: its source is
 * an address of this node, which the kernel's input would refuse).
 * Only known nodes may send. */
SEC("tc")
int pal_tun_in(struct __sk_buff *skb)
{
	struct state *st = state();
	if (!st)
		return PAL_TCX_DROP;
	struct ep *ep;
	if (data_begin(skb, st, &ep, PAL_EP_TUNNEL, 0) < 0)
		return PAL_TCX_DROP;
	struct bpf_tunnel_key key = {};
	struct nat_addr node = {};
	if (bpf_skb_get_tunnel_key(skb, &key, sizeof(key), 0) == 0)
		map4(node.a, bpf_htonl(key.remote_ipv4));
	else if (bpf_skb_get_tunnel_key(skb, &key, sizeof(key), BPF_F_TUNINFO_IPV6) == 0)
		__builtin_memcpy(node.a, key.remote_ipv6, 16);
	else
		return drop(st, PAL_C_TUNNEL_PEER);
	if (!bpf_map_lookup_elem(&pal_nodes, &node))
		return drop(st, PAL_C_TUNNEL_PEER);
	__u32 vni = key.tunnel_id;
	if (vni == PAL_VNI_REPLY)
		return tun_reply(skb, st);
	if (vni != PAL_VNI_TUNNEL && vni != PAL_VNI_DSR)
		return drop(st, PAL_C_TUNNEL_PEER);
	/* The inner frame's MAC is the first node's: ours to take. */
	if (bpf_skb_change_type(skb, 0 /* PACKET_HOST */) < 0)
		return PAL_TCX_DROP;
	int nv = nat_tunneled(skb, st, &node, vni);
	if (nv != PAL_NAT_GO)
		return nat_verdict(st, nv);
	skb->mark |= PAL_MARK_SEEN;
	return PAL_TCX_NEXT;
}

/* pal_drop drops everything: what a policy program slot holds when its
 * program could not be built (fail closed). */
SEC("tc")
int pal_drop(struct __sk_buff *skb)
{
	return PAL_TCX_DROP;
}
