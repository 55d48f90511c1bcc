/* Service load balancing in the programs (kube-proxy's job, done as
 * Calico's eBPF dataplane does it): a workload's packet to a Service
 * frontend (ClusterIP:port/protocol, pal_svc) is given a backend
 * (pal_be) at the workload's interface ingress, before conntrack and
 * policy, so both judge the backend; the flow's translation is kept in
 * pal_nat, keyed by the packet as the interface sees it:
 *
 *   FWD  client:c -> frontend:f   rewrite the destination to backend:b
 *                                 (read by the client's ingress hook)
 *   REV  backend:b -> client:c    rewrite the source to frontend:f, after
 *                                 conntrack and policy, at the egress to
 *                                 the client's interface (ifindex) or
 *                                 where the bypass redirects to it
 *   HPR  client:b -> hairpin:c    hairpin reply (a pod reaching itself):
 *                                 rewrite the destination to the client
 *
 * A hairpin flow (the backend is the client) leaves the client's
 * interface with the source rewritten to PAL_HAIRPIN4, so the pod does
 * not see a packet from itself. A frontend without backends is rejected
 * with an ICMP port unreachable (as kube-proxy's REJECT), sent back into
 * the workload. The translation of an established flow is kept across
 * Service and endpoint changes while its backend is still one of the
 * frontend's (pal_be_live); a TCP flow whose backend went is reset (a
 * TCP reset from the frontend), a UDP one picks another backend.
 * Included by palisade.c (it uses its state and helpers).
 */
#ifndef PALISADE_NAT_H
#define PALISADE_NAT_H

/* Mark bits (besides PAL_MARK_SEEN) carried from a workload's ingress
 * hook to its egress hook of the same packet: a hairpin flow's packet,
 * whose source is rewritten after the egress hook's conntrack; a reply
 * the program made (ICMP unreachable, TCP reset), let through. */
#define PAL_MARK_HAIRPIN 0x02000000
#define PAL_MARK_REPLY 0x04000000

/* 169.254.1.1, every workload's gateway: a hairpin flow's source. */
#define PAL_HAIRPIN4 0xa9fe0101

#define PAL_NAT_FWD 1
#define PAL_NAT_REV 2
#define PAL_NAT_HPR 3
/* nat_value.flags */
#define PAL_NAT_F_HAIRPIN 0x1

/* A Service frontend: address (IPv4-mapped for IPv4), port, protocol. */
struct svc_key {
	__u8 addr[16];
	__u16 port;
	__u8 proto;
	__u8 pad;
};

/* Its backends are pal_be {id, 0 .. count-1}; count 0: rejected. */
struct svc_value {
	__u32 id;
	__u32 count;
	__u32 flags;
	__u32 pad;
};

struct be_key {
	__u32 id;
	__u32 idx;
};

struct be_value {
	__u8 addr[16];
	__u16 port;
	__u8 pad[2];
};

/* A backend of frontend id, whatever its index: flows keep it while it is
 * one. */
struct be_live_key {
	__u32 id;
	__u16 port;
	__u8 pad[2];
	__u8 addr[16];
};

/* A packet as an interface sees it (ports in host order). */
struct nat_key {
	__u8 src[16];
	__u8 dst[16];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct nat_value {
	/* FWD: the backend; REV: the frontend (new source); HPR: the client
	 * (new destination, port unchanged). */
	__u8 addr[16];
	__u16 port;
	__u8 kind;  /* PAL_NAT_* */
	__u8 flags; /* PAL_NAT_F_* */
	__u32 ifindex; /* REV: the client's interface */
	__u32 svc;     /* FWD: the frontend's id */
	__u32 pad;
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

/* The translations of flows: least recently used go first when full. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 512000);
	__type(key, struct nat_key);
	__type(value, struct nat_value);
} pal_nat SEC(".maps");

static __always_inline int nat_proto(__u8 proto)
{
	return proto == IPPROTO_TCP || proto == IPPROTO_UDP;
}

static __always_inline void nat_key_of(struct state *st, struct nat_key *k)
{
	__builtin_memcpy(k->src, st->src, 16);
	__builtin_memcpy(k->dst, st->dst, 16);
	k->sport = st->sport;
	k->dport = st->dport;
	k->proto = st->proto;
}

/* An address as a global function's argument (the verifier sizes a
 * pointer argument by its type). */
struct nat_addr {
	__u8 a[16];
};

/* nat_rewrite writes a new address and port on the source (dst 0) or the
 * destination (dst 1) of the packet and in st, with the checksums. */
GLOBAL int nat_rewrite(struct __sk_buff *skb, struct state *st, __u32 dst, struct nat_addr *addr, __u16 port)
{
	if (!st || !addr)
		return -1;
	__u32 l3 = st->l3 & 0xff, l4 = st->l4 & 0xffff;
	__u32 csum = st->proto == IPPROTO_TCP ? l4 + 16 : l4 + 6;
	__u32 flags = st->proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__u8 *old = dst ? st->dst : st->src;
	__u16 oldport = dst ? st->dport : st->sport;
	__u8 na[16];
	__builtin_memcpy(na, addr->a, 16);
	if (st->family == 4) {
		__be32 from = *(__be32 *)&old[12], to = *(__be32 *)&na[12];
		if (from != to) {
			if (bpf_l4_csum_replace(skb, csum, from, to, flags | BPF_F_PSEUDO_HDR | 4) < 0 ||
			    bpf_l3_csum_replace(skb, l3 + 10, from, to, 4) < 0 ||
			    bpf_skb_store_bytes(skb, l3 + (dst ? 16 : 12), &to, 4, 0) < 0)
				return -1;
		}
	} else {
		__u8 oa[16];
		__builtin_memcpy(oa, old, 16);
		__s64 diff = bpf_csum_diff((__be32 *)oa, 16, (__be32 *)na, 16, 0);
		if (diff < 0 || bpf_l4_csum_replace(skb, csum, 0, diff, flags | BPF_F_PSEUDO_HDR) < 0 ||
		    bpf_skb_store_bytes(skb, l3 + (dst ? 24 : 8), na, 16, 0) < 0)
			return -1;
	}
	if (port != oldport) {
		__be16 pf = bpf_htons(oldport), pt = bpf_htons(port);
		if (bpf_l4_csum_replace(skb, csum, pf, pt, flags | 2) < 0 ||
		    bpf_skb_store_bytes(skb, l4 + (dst ? 2 : 0), &pt, 2, 0) < 0)
			return -1;
	}
	if (dst) {
		__builtin_memcpy(st->dst, na, 16);
		st->dport = port;
	} else {
		__builtin_memcpy(st->src, na, 16);
		st->sport = port;
	}
	return 0;
}

static __always_inline __u32 fold(__s64 s)
{
	__u32 c = (__u32)s;
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	return ~c & 0xffff;
}

/* swap_macs turns the Ethernet header round, for a reply sent back. */
static __always_inline int swap_macs(struct __sk_buff *skb)
{
	__u8 mac[12], sw[12];
	if (bpf_skb_load_bytes(skb, 0, mac, 12) < 0)
		return -1;
	__builtin_memcpy(sw, mac + 6, 6);
	__builtin_memcpy(sw + 6, mac, 6);
	return bpf_skb_store_bytes(skb, 0, sw, 12, 0);
}

/* The reply nat_reject builds: IP header, ICMP header, then the start of
 * the packet rejected (its IP header and 8 bytes). */
struct reject4 {
	struct iphdr ip;
	__u8 icmp[8];
	__u8 quote[28];
};

struct reject6 {
	struct ipv6hdr ip;
	__u8 icmp[8];
	__u8 quote[48];
};

/* nat_reject turns the packet into an ICMP port unreachable from its
 * destination (a frontend without backends) and sends it back into the
 * workload (TC_ACT_REDIRECT); PAL_TCX_DROP when it cannot. */
GLOBAL int nat_reject(struct __sk_buff *skb, struct state *st)
{
	if (!st)
		return PAL_TCX_DROP;
	__u32 l3 = st->l3 & 0xff;
	if (l3 != 0 && l3 != 14)
		return PAL_TCX_DROP;
	if (l3 == 14 && swap_macs(skb) < 0)
		return PAL_TCX_DROP;
	if (st->family == 4) {
		struct reject4 r = {};
		if (bpf_skb_load_bytes(skb, l3, r.quote, sizeof(r.quote)) < 0 || (r.quote[0] & 0xf) != 5)
			return PAL_TCX_DROP;
		if (bpf_skb_change_tail(skb, l3 + sizeof(r), 0) < 0)
			return PAL_TCX_DROP;
		r.ip.version = 4;
		r.ip.ihl = 5;
		r.ip.tot_len = bpf_htons(sizeof(r));
		r.ip.ttl = 64;
		r.ip.protocol = IPPROTO_ICMP;
		r.ip.saddr = *(__u32 *)&st->dst[12];
		r.ip.daddr = *(__u32 *)&st->src[12];
		r.ip.check = fold(bpf_csum_diff(0, 0, (__be32 *)&r.ip, sizeof(r.ip), 0));
		r.icmp[0] = 3; /* destination unreachable */
		r.icmp[1] = 3; /* port unreachable */
		__u16 c = fold(bpf_csum_diff(0, 0, (__be32 *)r.icmp, sizeof(r.icmp) + sizeof(r.quote), 0));
		r.icmp[2] = c & 0xff; /* the sum is in network order already */
		r.icmp[3] = c >> 8;
		if (bpf_skb_store_bytes(skb, l3, &r, sizeof(r), 0) < 0)
			return PAL_TCX_DROP;
	} else {
		struct reject6 r = {};
		if (bpf_skb_load_bytes(skb, l3, r.quote, sizeof(r.quote)) < 0)
			return PAL_TCX_DROP;
		if (bpf_skb_change_tail(skb, l3 + sizeof(r), 0) < 0)
			return PAL_TCX_DROP;
		__u16 plen = sizeof(r.icmp) + sizeof(r.quote);
		r.ip.version = 6;
		r.ip.payload_len = bpf_htons(plen);
		r.ip.nexthdr = IPPROTO_ICMPV6;
		r.ip.hop_limit = 64;
		__builtin_memcpy(&r.ip.saddr, st->dst, 16);
		__builtin_memcpy(&r.ip.daddr, st->src, 16);
		r.icmp[0] = 1; /* destination unreachable */
		r.icmp[1] = 4; /* port unreachable */
		/* The pseudo header: addresses, length, next header. */
		__be32 ph[2] = {bpf_htonl(plen), bpf_htonl(IPPROTO_ICMPV6)};
		__s64 s = bpf_csum_diff(0, 0, (__be32 *)&r.ip.saddr, 32, 0);
		s = bpf_csum_diff(0, 0, ph, sizeof(ph), (__u32)s);
		s = bpf_csum_diff(0, 0, (__be32 *)r.icmp, plen, (__u32)s);
		__u16 c = fold(s);
		r.icmp[2] = c & 0xff;
		r.icmp[3] = c >> 8;
		if (bpf_skb_store_bytes(skb, l3, &r, sizeof(r), 0) < 0)
			return PAL_TCX_DROP;
	}
	skb->mark |= PAL_MARK_REPLY;
	return bpf_redirect(skb->ifindex, 0);
}

struct tcp_min {
	__be16 sport, dport;
	__be32 seq, ack;
	__u8 doff, flags;
	__be16 win, csum, urg;
};

/* nat_reset answers a TCP packet of a flow whose backend went with a
 * reset from its frontend, sent back into the workload (TC_ACT_REDIRECT;
 * an ICMP error would not end an established connection);
 * PAL_TCX_DROP when it cannot. */
GLOBAL int nat_reset(struct __sk_buff *skb, struct state *st)
{
	if (!st || st->proto != IPPROTO_TCP)
		return PAL_TCX_DROP;
	__u32 l3 = st->l3 & 0xff, l4 = st->l4 & 0xffff;
	if (l3 != 0 && l3 != 14)
		return PAL_TCX_DROP;
	struct tcp_min in;
	if (bpf_skb_load_bytes(skb, l4, &in, sizeof(in)) < 0)
		return PAL_TCX_DROP;
	if (in.flags & TCP_RST)
		return PAL_TCX_DROP;
	__u32 paylen;
	if (st->family == 4) {
		__be16 tot;
		if (bpf_skb_load_bytes(skb, l3 + 2, &tot, 2) < 0)
			return PAL_TCX_DROP;
		paylen = bpf_ntohs(tot) - (l4 - l3) - (in.doff >> 4) * 4;
	} else {
		__be16 pl;
		if (bpf_skb_load_bytes(skb, l3 + 4, &pl, 2) < 0)
			return PAL_TCX_DROP;
		paylen = bpf_ntohs(pl) - (l4 - l3 - 40) - (in.doff >> 4) * 4;
	}
	struct tcp_min r = {.sport = in.dport, .dport = in.sport, .doff = 5 << 4};
	if (in.flags & TCP_ACK) {
		r.seq = in.ack;
		r.flags = TCP_RST;
	} else {
		r.ack = bpf_htonl(bpf_ntohl(in.seq) + (paylen & 0xffff) + !!(in.flags & TCP_SYN) + !!(in.flags & TCP_FIN));
		r.flags = TCP_RST | TCP_ACK;
	}
	if (l3 == 14 && swap_macs(skb) < 0)
		return PAL_TCX_DROP;
	if (st->family == 4) {
		struct iphdr ip = {.version = 4, .ihl = 5, .ttl = 64, .protocol = IPPROTO_TCP};
		ip.tot_len = bpf_htons(sizeof(ip) + sizeof(r));
		ip.saddr = *(__u32 *)&st->dst[12];
		ip.daddr = *(__u32 *)&st->src[12];
		ip.check = fold(bpf_csum_diff(0, 0, (__be32 *)&ip, sizeof(ip), 0));
		__be32 ph[3] = {ip.saddr, ip.daddr, bpf_htonl((IPPROTO_TCP << 16) | sizeof(r))};
		__s64 c = bpf_csum_diff(0, 0, ph, sizeof(ph), 0);
		r.csum = fold(bpf_csum_diff(0, 0, (__be32 *)&r, sizeof(r), (__u32)c));
		if (bpf_skb_change_tail(skb, l3 + sizeof(ip) + sizeof(r), 0) < 0 ||
		    bpf_skb_store_bytes(skb, l3, &ip, sizeof(ip), 0) < 0 ||
		    bpf_skb_store_bytes(skb, l3 + sizeof(ip), &r, sizeof(r), 0) < 0)
			return PAL_TCX_DROP;
	} else {
		struct ipv6hdr ip = {.version = 6, .nexthdr = IPPROTO_TCP, .hop_limit = 64};
		ip.payload_len = bpf_htons(sizeof(r));
		__builtin_memcpy(&ip.saddr, st->dst, 16);
		__builtin_memcpy(&ip.daddr, st->src, 16);
		__be32 ph[2] = {bpf_htonl(sizeof(r)), bpf_htonl(IPPROTO_TCP)};
		__s64 c = bpf_csum_diff(0, 0, (__be32 *)&ip.saddr, 32, 0);
		c = bpf_csum_diff(0, 0, ph, sizeof(ph), (__u32)c);
		r.csum = fold(bpf_csum_diff(0, 0, (__be32 *)&r, sizeof(r), (__u32)c));
		if (bpf_skb_change_tail(skb, l3 + sizeof(ip) + sizeof(r), 0) < 0 ||
		    bpf_skb_store_bytes(skb, l3, &ip, sizeof(ip), 0) < 0 ||
		    bpf_skb_store_bytes(skb, l3 + sizeof(ip), &r, sizeof(r), 0) < 0)
			return PAL_TCX_DROP;
	}
	skb->mark |= PAL_MARK_REPLY;
	return bpf_redirect(skb->ifindex, 0);
}

/* The selection, behind small functions that the connect-time programs
 * (ctlb.c) call too. svc_lookup: the frontend of a destination (port in
 * host order), or NULL. */
static __always_inline struct svc_value *svc_lookup(const __u8 *addr, __u16 port, __u8 proto)
{
	struct svc_key sk = {.port = port, .proto = proto};
	__builtin_memcpy(sk.addr, addr, 16);
	return bpf_map_lookup_elem(&pal_svc, &sk);
}

/* svc_choose: the backend of a new flow to frontend sv; NULL when it has
 * none (the frontend rejects). */
static __always_inline struct be_value *svc_choose(struct svc_value *sv)
{
	__u32 n = sv->count;
	if (n == 0)
		return 0;
	struct be_key bk = {.id = sv->id, .idx = bpf_get_prandom_u32() % n};
	return bpf_map_lookup_elem(&pal_be, &bk);
}

/* svc_be_live: addr:port is still a backend of frontend id (flows keep
 * it while it is). */
static __always_inline int svc_be_live(__u32 id, const __u8 *addr, __u16 port)
{
	struct be_live_key k = {.id = id, .port = port};
	__builtin_memcpy(k.addr, addr, 16);
	return bpf_map_lookup_elem(&pal_be_live, &k) != 0;
}

static __always_inline int be_live(__u32 id, struct nat_value *v)
{
	return svc_be_live(id, v->addr, v->port);
}

#define PAL_NAT_GO (-100)

/* nat_fwd translates a workload's packet to a Service frontend (or a
 * hairpin reply) before its interface's conntrack and policy. It returns
 * PAL_NAT_GO to go on, or a verdict (a reject). */
GLOBAL int nat_fwd(struct __sk_buff *skb, struct state *st)
{
	if (!st || !nat_proto(st->proto) || (st->flags & PAL_F_FRAG))
		return PAL_NAT_GO;
	struct nat_key k = {};
	nat_key_of(st, &k);
	struct nat_value *v = bpf_map_lookup_elem(&pal_nat, &k);
	/* A backend's reply (its translation is the client's egress's):
	 * its destination is a client, never a frontend. */
	if (v && v->kind == PAL_NAT_REV)
		return PAL_NAT_GO;
	if (v && v->kind == PAL_NAT_HPR) {
		if (nat_rewrite(skb, st, 1, (struct nat_addr *)v->addr, st->dport) < 0)
			return PAL_TCX_DROP;
		return PAL_NAT_GO;
	}
	if (v && v->kind == PAL_NAT_FWD) {
		if (be_live(v->svc, v)) {
			__u8 hairpin = v->flags & PAL_NAT_F_HAIRPIN;
			if (nat_rewrite(skb, st, 1, (struct nat_addr *)v->addr, v->port) < 0)
				return PAL_TCX_DROP;
			if (hairpin)
				skb->mark |= PAL_MARK_HAIRPIN;
			return PAL_NAT_GO;
		}
		/* Its backend went: a TCP flow is reset (a new SYN picks
		 * another), anything else picks another. */
		if (st->proto == IPPROTO_TCP && (st->tcp_flags & (TCP_SYN | TCP_ACK)) != TCP_SYN)
			return nat_reset(skb, st);
	}
	struct svc_value *sv = svc_lookup(st->dst, st->dport, st->proto);
	if (!sv) {
		/* A new connection straight to an address and port that was
		 * a backend of an earlier one through a Service, from the
		 * same source port: that flow's reply translation is stale
		 * (a live one would share its tuple at the backend) and
		 * would turn this one's replies into the frontend's. */
		if (st->proto == IPPROTO_TCP && (st->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN) {
			struct nat_key rk = {.sport = st->dport, .dport = st->sport, .proto = st->proto};
			__builtin_memcpy(rk.src, st->dst, 16);
			__builtin_memcpy(rk.dst, st->src, 16);
			struct nat_value *rv = bpf_map_lookup_elem(&pal_nat, &rk);
			if (rv && rv->kind == PAL_NAT_REV)
				bpf_map_delete_elem(&pal_nat, &rk);
		}
		return PAL_NAT_GO;
	}
	__u32 id = sv->id;
	struct be_value *be = svc_choose(sv);
	if (!be)
		return nat_reject(skb, st);
	struct nat_value fwd = {.kind = PAL_NAT_FWD, .svc = id, .port = be->port};
	__builtin_memcpy(fwd.addr, be->addr, 16);
	int hairpin = st->family == 4 && *(__u32 *)&be->addr[12] == *(__u32 *)&st->src[12] &&
		      *(__u32 *)&be->addr[8] == *(__u32 *)&st->src[8];
	if (hairpin)
		fwd.flags = PAL_NAT_F_HAIRPIN;
	/* The reply, seen at the client's interface. */
	struct nat_key rk = {.sport = be->port, .dport = st->sport, .proto = st->proto};
	__builtin_memcpy(rk.src, be->addr, 16);
	__builtin_memcpy(rk.dst, st->src, 16);
	struct nat_value rev = {.kind = PAL_NAT_REV, .port = st->dport, .ifindex = st->ifindex};
	__builtin_memcpy(rev.addr, st->dst, 16);
	if (bpf_map_update_elem(&pal_nat, &rk, &rev, BPF_ANY) < 0 || bpf_map_update_elem(&pal_nat, &k, &fwd, BPF_ANY) < 0)
		return PAL_TCX_DROP;
	if (hairpin) {
		/* The pod answers the hairpin source. */
		struct nat_key hk = {.sport = be->port, .dport = st->sport, .proto = st->proto};
		__builtin_memcpy(hk.src, be->addr, 16);
		map4(hk.dst, bpf_htonl(PAL_HAIRPIN4));
		struct nat_value hv = {.kind = PAL_NAT_HPR};
		__builtin_memcpy(hv.addr, st->src, 16);
		if (bpf_map_update_elem(&pal_nat, &hk, &hv, BPF_ANY) < 0)
			return PAL_TCX_DROP;
	}
	if (nat_rewrite(skb, st, 1, (struct nat_addr *)fwd.addr, fwd.port) < 0)
		return PAL_TCX_DROP;
	if (hairpin)
		skb->mark |= PAL_MARK_HAIRPIN;
	return PAL_NAT_GO;
}

/* nat_rev translates a packet leaving by the egress to the client's
 * interface ifindex after its conntrack and policy: a reply gets the
 * frontend as source, a hairpin flow's packet the hairpin source. -1 when
 * a rewrite failed. */
GLOBAL int nat_rev(struct __sk_buff *skb, struct state *st, __u32 ifindex)
{
	if (!st || !nat_proto(st->proto) || (st->flags & PAL_F_FRAG))
		return 0;
	if (skb->mark & PAL_MARK_HAIRPIN) {
		skb->mark &= ~PAL_MARK_HAIRPIN;
		__u8 h[16];
		map4(h, bpf_htonl(PAL_HAIRPIN4));
		return nat_rewrite(skb, st, 0, (struct nat_addr *)h, st->sport);
	}
	struct nat_key k = {};
	nat_key_of(st, &k);
	struct nat_value *v = bpf_map_lookup_elem(&pal_nat, &k);
	if (!v || v->kind != PAL_NAT_REV || v->ifindex != ifindex)
		return 0;
	__u8 a[16];
	__builtin_memcpy(a, v->addr, 16);
	return nat_rewrite(skb, st, 0, (struct nat_addr *)a, v->port);
}

#endif
