/* Service load balancing in the programs (kube-proxy's job, done as
 * Calico's eBPF dataplane does it).
 *
 * Frontends (pal_svc: address, port, protocol; a node port is the
 * unspecified address of its family) have their backends in pal_be
 * {id, 0 .. count-1}, then this node's ones {id, count .. count+local-1}
 * for the Local traffic policies; nat_pick is the one entry point that
 * looks a destination up and chooses a backend for a new flow (the
 * client's affinity, else Maglev, else random), for every program that
 * load-balances (the workload and host interfaces here, connect-time
 * load balancing elsewhere).
 *
 *  - From a workload (its interface's ingress, before conntrack and
 *    policy, so both judge the backend): the destination becomes the
 *    backend; the reply gets the frontend back at the client's
 *    interface (REV, ifindex), also where the bypass redirects to it.
 *  - From outside (a host data interface's ingress: node ports on every
 *    address of the node, load balancer and external addresses, cluster
 *    addresses routed to the node): a backend on this node, or one whose
 *    node is unknown, is given the packet (DNAT, source kept) and the
 *    reply the frontend back at the egress of the host interface it
 *    leaves by (REV, PAL_NAT_F_HOST). A backend on another node gets the
 *    packet untranslated through the node port tunnel (VXLAN, the
 *    tunnel device's metadata: bpf_skb_set_tunnel_key), its flow
 *    remembered (TUN) so its next packets follow; that node chooses one
 *    of its own backends the same way (Maglev and affinity choose the
 *    same) and either sends the replies back through the tunnel,
 *    translated, for the first node to send on (bpfExternalServiceMode
 *    Tunnel, Calico's default: REV with PAL_NAT_F_TUNNEL) or straight to
 *    the client (DSR: REV with PAL_NAT_F_HOST).
 *
 * The flows' translations are in pal_nat, keyed by the packet as the
 * interface sees it:
 *
 *   FWD  client:c -> frontend:f   the destination becomes backend:b
 *   REV  backend:b -> client:c    the source becomes frontend:f
 *   HPR  client:b -> hairpin:c    hairpin reply (a pod reaching itself):
 *                                 the destination becomes the client
 *   TUN  client:c -> frontend:f   sent through the tunnel to a node
 *
 * Entries expire as conntrack's do (TCP established, FINs of both sides,
 * reset; UDP; other), checked by the programs on every lookup and swept
 * by felix; a flow keeps its backend while that backend is one of its
 * frontend's (pal_be_live), across Service and endpoint changes; a TCP
 * flow whose backend went is reset (a TCP reset from the frontend),
 * another one picks again. A frontend without backends is rejected with
 * an ICMP port unreachable (as kube-proxy's REJECT); one with backends
 * but none the Local policy allows drops (as kube-proxy's DROP).
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

/* pal_state.flags of the NAT (apart from palisade.h's): a reply that
 * leaves a backend for the node port tunnel (nat_tunnel_back); a reply
 * to a flow that came to the workload's floating IP (nat_fip_out). */
#define PAL_F_NAT_TUNNEL 0x10000
#define PAL_F_NAT_FIP 0x20000

/* 169.254.1.1, every workload's gateway: a hairpin flow's source. */
#define PAL_HAIRPIN4 0xa9fe0101

/* The node port tunnel's VXLAN network identifiers: Calico's for a
 * forward packet whose replies come back the same way, and two of our
 * own for one whose replies go straight to the client (DSR) and for a
 * reply, translated already, for the first node to send on. */
#define PAL_VNI_TUNNEL 0xca11c0
#define PAL_VNI_DSR 0xca11c1
#define PAL_VNI_REPLY 0xca11c2

#define PAL_NAT_FWD 1
#define PAL_NAT_REV 2
#define PAL_NAT_HPR 3
#define PAL_NAT_TUN 4
/* nat_value.flags */
#define PAL_NAT_F_HAIRPIN 0x01
#define PAL_NAT_F_TUNNEL 0x02 /* REV: the reply goes back through the tunnel to node */
#define PAL_NAT_F_HOST 0x04   /* REV: translated at the egress of a host interface */
#define PAL_NAT_F_DSR 0x08    /* TUN: the backend's node replies to the client itself */
#define PAL_NAT_F_FIN_C 0x10  /* TCP: the client's FIN was seen */
#define PAL_NAT_F_FIN_B 0x20  /* TCP: the backend's FIN was seen */
#define PAL_NAT_F_RST 0x40    /* TCP: a reset was seen */
#define PAL_NAT_F_FIP 0x80    /* FWD, REV: a flow to a floating IP (at the workload's own interface) */


/* Clients outside bpfDSROptoutCIDRs get DSR. */
struct dsr_key {
	__u32 prefixlen;
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
	 * (new destination, port unchanged); TUN: the backend chosen. */
	__u8 addr[16];
	/* REV with PAL_NAT_F_TUNNEL: the node the replies go back to; TUN:
	 * the node the flow goes to. */
	__u8 node[16];
	__u64 last_seen; /* now() */
	__u16 port;
	__u8 kind;     /* PAL_NAT_* */
	__u8 flags;    /* PAL_NAT_F_* */
	__u32 ifindex; /* REV: the client's workload interface (0: none) */
	__u32 svc;     /* FWD, TUN: the frontend's id */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct dsr_key);
	__type(value, __u8);
} pal_dsr_optout SEC(".maps");

/* A fragmented datagram's translation, for its later fragments (which
 * have no ports): the datagram as the first fragment was seen (its
 * addresses, IP identification, protocol) → the new address, of the
 * destination or the source. */
struct natfrag_key {
	__u8 src[16];
	__u8 dst[16];
	__u32 id;
	__u8 proto;
	__u8 pad[3];
};

struct natfrag_value {
	__u8 addr[16];
	__u64 last_seen;
	__u8 dst; /* the destination is rewritten (else the source) */
	__u8 pad[7];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct natfrag_key);
	__type(value, struct natfrag_value);
} pal_natfrag SEC(".maps");

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

/* nat_timeout is how long an entry lives after its last packet, as
 * conntrack's (ct_timeout): a TCP flow's after a reset, after both
 * FINs, else established. */
static __always_inline __u64 nat_timeout(__u8 proto, __u8 flags)
{
	if (proto == IPPROTO_TCP) {
		if (flags & PAL_NAT_F_RST)
			return ct_tcp_rst;
		if ((flags & (PAL_NAT_F_FIN_C | PAL_NAT_F_FIN_B)) == (PAL_NAT_F_FIN_C | PAL_NAT_F_FIN_B))
			return ct_tcp_fin;
		return ct_tcp_est;
	}
	if (proto == IPPROTO_UDP)
		return ct_udp;
	return ct_other;
}

/* nat_live reports whether an entry has not expired at t. */
static __always_inline int nat_live(struct nat_value *v, __u8 proto, __u64 t)
{
	return idle(t, v->last_seen) <= nat_timeout(proto, v->flags);
}

/* nat_sibling is the key of an entry's other direction: a FWD's REV
 * (backend -> client) and a REV's FWD (client -> frontend); 0 when the
 * kind has none. */
static __always_inline int nat_sibling(struct nat_key *k, struct nat_value *v, struct nat_key *sk)
{
	if (v->kind != PAL_NAT_FWD && v->kind != PAL_NAT_REV)
		return 0;
	__builtin_memcpy(sk->src, v->addr, 16);
	__builtin_memcpy(sk->dst, k->src, 16);
	sk->sport = v->port;
	sk->dport = k->sport;
	sk->proto = k->proto;
	if (v->kind == PAL_NAT_REV) {
		/* The FWD is client -> frontend: the REV's destination is the
		 * client, its value the frontend. */
		__builtin_memcpy(sk->src, k->dst, 16);
		__builtin_memcpy(sk->dst, v->addr, 16);
		sk->sport = k->dport;
		sk->dport = v->port;
	}
	return 1;
}

/* nat_seen refreshes an entry for a packet at t: its last_seen when that
 * lagged by more than its refresh interval, and a TCP packet's FIN
 * (from_client says whose) or reset; both written to its sibling too,
 * so a flow's two directions expire together. */
GLOBAL int nat_seen(struct nat_key *k, struct nat_value *v, __u8 tcp_flags, __u32 from_client, __u64 t)
{
	if (!k || !v)
		return 0;
	__u8 add = 0;
	if (k->proto == IPPROTO_TCP) {
		if (tcp_flags & TCP_RST)
			add |= PAL_NAT_F_RST;
		if (tcp_flags & TCP_FIN)
			add |= from_client ? PAL_NAT_F_FIN_C : PAL_NAT_F_FIN_B;
	}
	__u8 flags = v->flags;
	if ((flags | add) == flags && idle(t, v->last_seen) <= ct_refresh(nat_timeout(k->proto, flags)))
		return 0;
	v->flags = flags | add;
	v->last_seen = t;
	struct nat_key sk = {};
	if (!nat_sibling(k, v, &sk))
		return 0;
	struct nat_value *s = bpf_map_lookup_elem(&pal_nat, &sk);
	if (s) {
		s->flags |= add;
		s->last_seen = t;
	}
	return 0;
}

/* nat_frag_note records, for the first fragment of a datagram about to
 * be translated (st as it arrived), the new address its later fragments
 * get. */
static __always_inline void nat_frag_note(struct state *st, const __u8 *addr, __u8 dst)
{
	if (!(st->flags & PAL_F_FRAG))
		return;
	struct natfrag_key k = {.id = st->frag_id, .proto = st->proto};
	__builtin_memcpy(k.src, st->src, 16);
	__builtin_memcpy(k.dst, st->dst, 16);
	struct natfrag_value v = {.last_seen = now(), .dst = dst};
	__builtin_memcpy(v.addr, addr, 16);
	bpf_map_update_elem(&pal_natfrag, &k, &v, BPF_ANY);
}

/* nat_frag_later translates a later fragment (no layer 4 header) of a
 * datagram whose first was translated: the address only (with the IPv4
 * header checksum; the datagram's layer 4 checksum was fixed in its
 * first fragment). -1 when a rewrite failed. */
GLOBAL int nat_frag_later(struct __sk_buff *skb, struct state *st)
{
	if (!st)
		return 0;
	struct natfrag_key k = {.id = st->frag_id, .proto = st->proto};
	__builtin_memcpy(k.src, st->src, 16);
	__builtin_memcpy(k.dst, st->dst, 16);
	struct natfrag_value *v = bpf_map_lookup_elem(&pal_natfrag, &k);
	if (!v || idle(now(), v->last_seen) > frag_timeout)
		return 0;
	__u8 dst = v->dst, na[16];
	__builtin_memcpy(na, v->addr, 16);
	__u32 l3 = st->l3 & 0xff;
	if (st->family == 4) {
		__be32 from = *(__be32 *)&(dst ? st->dst : st->src)[12], to = *(__be32 *)&na[12];
		if (bpf_l3_csum_replace(skb, l3 + 10, from, to, 4) < 0 || bpf_skb_store_bytes(skb, l3 + (dst ? 16 : 12), &to, 4, 0) < 0)
			return -1;
	} else if (bpf_skb_store_bytes(skb, l3 + (dst ? 24 : 8), na, 16, 0) < 0) {
		return -1;
	}
	__builtin_memcpy(dst ? st->dst : st->src, na, 16);
	return 0;
}

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
 * destination (a frontend without backends) and sends it back out of
 * the interface it came by (TC_ACT_REDIRECT); PAL_TCX_DROP when it
 * cannot. */
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
 * reset from its frontend, sent back out of the interface it came by
 * (TC_ACT_REDIRECT; an ICMP error would not end an established
 * connection); PAL_TCX_DROP when it cannot. */
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

/* fwd_live reports whether a FWD or TUN entry's backend is still its
 * frontend's: a Service's backend, or a floating IP's workload. */
static __always_inline int fwd_live(struct nat_key *k, struct nat_value *v)
{
	if (v->flags & PAL_NAT_F_FIP) {
		struct fip_value *f = bpf_map_lookup_elem(&pal_fip, (struct nat_addr *)k->dst);
		return f && addr_eq(f->internal, v->addr);
	}
	return be_live(v->svc, v->addr, v->port);
}

#define PAL_NAT_GO (-100)

/* nat_track records a new flow's translation: the forward entry (the
 * packet as it is) and the reply's (backend -> client), with the
 * reply's flags, interface and node; for a hairpin flow, the reply to
 * PAL_HAIRPIN4. It returns whether the flow is a hairpin, or -1 when a
 * map is full. One key and one value on the stack, filled in turn: the
 * stack is short. */
GLOBAL int nat_track(struct state *st, struct nat_pick *p, __u32 rev_flags, __u32 ifindex, struct nat_addr *node)
{
	if (!st || !p || !node)
		return -1;
	struct nat_key k = {.sport = p->be.port, .dport = st->sport, .proto = st->proto};
	struct nat_value v = {.kind = PAL_NAT_REV, .port = st->dport, .ifindex = ifindex, .flags = rev_flags, .last_seen = now()};
	__builtin_memcpy(k.src, p->be.addr, 16);
	__builtin_memcpy(k.dst, st->src, 16);
	__builtin_memcpy(v.addr, st->dst, 16);
	__builtin_memcpy(v.node, node->a, 16);
	if (bpf_map_update_elem(&pal_nat, &k, &v, BPF_ANY) < 0)
		return -1;
	int hairpin = st->family == 4 && ifindex && *(__u32 *)&p->be.addr[12] == *(__u32 *)&st->src[12] &&
		      *(__u32 *)&p->be.addr[8] == *(__u32 *)&st->src[8];
	if (hairpin) {
		/* The pod answers the hairpin source. */
		map4(k.dst, bpf_htonl(PAL_HAIRPIN4));
		v.kind = PAL_NAT_HPR;
		v.flags = 0;
		v.port = 0;
		v.ifindex = 0;
		__builtin_memcpy(v.addr, st->src, 16);
		if (bpf_map_update_elem(&pal_nat, &k, &v, BPF_ANY) < 0)
			return -1;
	}
	nat_key_of(st, &k);
	v.kind = PAL_NAT_FWD;
	v.flags = hairpin ? PAL_NAT_F_HAIRPIN : 0;
	if (p->flags & PAL_SVC_FIP)
		v.flags |= PAL_NAT_F_FIP;
	v.port = p->be.port;
	v.ifindex = 0;
	v.svc = p->svc;
	__builtin_memcpy(v.addr, p->be.addr, 16);
	__builtin_memset(v.node, 0, 16);
	if (bpf_map_update_elem(&pal_nat, &k, &v, BPF_ANY) < 0)
		return -1;
	return hairpin;
}

/* nat_forget_stale drops the reply translation a new TCP connection
 * straight to an address and port that was a backend of an earlier one
 * through a Service, from the same source port, would otherwise meet
 * (a live one would share its tuple at the backend): its replies would
 * be given the frontend's address. */
static __always_inline void nat_forget_stale(struct state *st)
{
	if (st->proto != IPPROTO_TCP || (st->tcp_flags & (TCP_SYN | TCP_ACK)) != TCP_SYN)
		return;
	struct nat_key rk = {.sport = st->dport, .dport = st->sport, .proto = st->proto};
	__builtin_memcpy(rk.src, st->dst, 16);
	__builtin_memcpy(rk.dst, st->src, 16);
	struct nat_value *rv = bpf_map_lookup_elem(&pal_nat, &rk);
	if (rv && rv->kind == PAL_NAT_REV)
		bpf_map_delete_elem(&pal_nat, &rk);
}

/* nat_gone answers a packet of a flow whose backend went: a TCP one
 * (but a new SYN, which picks again) is reset; PAL_NAT_GO to pick
 * again. */
static __always_inline int nat_gone(struct __sk_buff *skb, struct state *st)
{
	if (st->proto == IPPROTO_TCP && (st->tcp_flags & (TCP_SYN | TCP_ACK)) != TCP_SYN)
		return nat_reset(skb, st);
	return PAL_NAT_GO;
}

/* nat_closed reports a new SYN on the tuple of a flow that closed (FIN
 * or reset): a new connection, which picks again. */
static __always_inline int nat_closed(struct nat_value *v, struct state *st)
{
	return (v->flags & (PAL_NAT_F_RST | PAL_NAT_F_FIN_C | PAL_NAT_F_FIN_B)) &&
	       (st->tcp_flags & (TCP_SYN | TCP_ACK)) == TCP_SYN;
}

/* nat_pick_packet is nat_pick for the packet in st, arriving as how
 * says, when only a node port could answer: a node port answers on an
 * address of this node (the FIB has no route to forward by) and, for a
 * workload's packet, on any node's address (pal_nodes), translated here
 * as Calico's eBPF dataplane does: the flow goes straight to its
 * backend, not through that node (whose reply would take another way
 * back than the request, or come back through the tunnel to the
 * client's own node). A TCP packet without SYN starts no flow (one
 * through a frontend has its entries): it is not looked up, which keeps
 * the lookups off an established TCP flow's packets. */
GLOBAL int nat_pick_packet(struct __sk_buff *skb, struct state *st, __u32 how, struct nat_pick *p)
{
	if (!st || !p || (st->proto == IPPROTO_TCP && !(st->tcp_flags & TCP_SYN)))
		return PAL_PICK_NONE;
	struct nat_query q = {.sport = st->sport, .dport = st->dport, .proto = st->proto, .how = how,
			      .dst_local = how == PAL_HOW_TUNNEL ? PAL_DST_NOT_LOCAL : PAL_DST_UNKNOWN};
	__builtin_memcpy(q.dst, st->dst, 16);
	__builtin_memcpy(q.src, st->src, 16);
	int r = nat_pick(&q, p);
	if (r == PAL_PICK_ASK) {
		int node = how == PAL_HOW_WORKLOAD && bpf_map_lookup_elem(&pal_nodes, (struct nat_addr *)q.dst);
		q.dst_local = node || to_host(skb, st) ? PAL_DST_LOCAL : PAL_DST_NOT_LOCAL;
		r = nat_pick(&q, p);
	}
	return r;
}

/* nat_fip_hairpin translates a workload's new flow to its own floating
 * IP: to its own address, from the floating IP (so the reply comes back
 * through the host), as Calico's cali-fip-snat; the reply's entry
 * (REV, PAL_NAT_F_FIP) gives it the floating IP as source and the
 * workload as destination (nat_fip_out). */
GLOBAL int nat_fip_hairpin(struct __sk_buff *skb, struct state *st, struct nat_pick *p)
{
	if (!st || !p)
		return PAL_TCX_DROP;
	__u64 t = now();
	struct nat_addr fip, self;
	__builtin_memcpy(fip.a, st->dst, 16);
	__builtin_memcpy(self.a, st->src, 16);
	/* The reply: self:p -> fip:c. */
	struct nat_key k = {.sport = st->dport, .dport = st->sport, .proto = st->proto};
	__builtin_memcpy(k.src, self.a, 16);
	__builtin_memcpy(k.dst, fip.a, 16);
	struct nat_value v = {.kind = PAL_NAT_REV, .flags = PAL_NAT_F_FIP | PAL_NAT_F_HAIRPIN, .port = st->dport, .last_seen = t};
	__builtin_memcpy(v.addr, fip.a, 16);
	__builtin_memcpy(v.node, self.a, 16);
	if (bpf_map_update_elem(&pal_nat, &k, &v, BPF_ANY) < 0)
		return PAL_TCX_DROP;
	nat_key_of(st, &k);
	v.kind = PAL_NAT_FWD;
	__builtin_memcpy(v.addr, self.a, 16);
	__builtin_memcpy(v.node, fip.a, 16);
	if (bpf_map_update_elem(&pal_nat, &k, &v, BPF_ANY) < 0)
		return PAL_TCX_DROP;
	if (nat_rewrite(skb, st, 1, &self, st->dport) < 0 || nat_rewrite(skb, st, 0, &fip, st->sport) < 0)
		return PAL_TCX_DROP;
	return PAL_NAT_GO;
}

/* The results of nat_fwd and its kin besides PAL_NAT_GO and a verdict:
 * rejected (counted apart), dropped by the Local traffic policy. */
#define PAL_NAT_REJECTED (-101)
#define PAL_NAT_NOLOCAL (-102)
/* nat_fwd: not translated, and established in the interface's conntrack
 * (ct_established ran). */
#define PAL_NAT_ESTABLISHED (-103)

/* nat_lookup_live reads the packet's translation (its key into k, the
 * time into t): none when the entry is not live. */
static __always_inline struct nat_value *nat_lookup_live(struct state *st, struct nat_key *k, __u64 *t)
{
	nat_key_of(st, k);
	*t = now();
	struct nat_value *v = bpf_map_lookup_elem(&pal_nat, k);
	if (v && !nat_live(v, st->proto, *t))
		return 0;
	return v;
}

/* nat_fwd translates a workload's packet to a Service frontend (or a
 * hairpin reply) before its interface's conntrack and policy; a reply a
 * backend sends back through the node port tunnel is flagged
 * (PAL_F_NAT_TUNNEL) for nat_tunnel_back. It returns PAL_NAT_GO to go on,
 * or a verdict (a reject: TC_ACT_REDIRECT; a drop). */
GLOBAL int nat_fwd(struct __sk_buff *skb, struct state *st)
{
	if (!st || !nat_proto(st->proto))
		return PAL_NAT_GO;
	struct nat_key k = {};
	__u64 t;
	struct nat_value *v = nat_lookup_live(st, &k, &t);
	if (v && v->kind == PAL_NAT_HPR) {
		nat_seen(&k, v, st->tcp_flags, 1, t);
		if (nat_rewrite(skb, st, 1, (struct nat_addr *)v->addr, st->dport) < 0)
			return PAL_TCX_DROP;
		return PAL_NAT_GO;
	}
	if (v && v->kind == PAL_NAT_REV) {
		/* A backend's reply. */
		nat_seen(&k, v, st->tcp_flags, 0, t);
		if (v->flags & PAL_NAT_F_TUNNEL)
			st->flags |= PAL_F_NAT_TUNNEL;
		if (v->flags & PAL_NAT_F_FIP)
			st->flags |= PAL_F_NAT_FIP;
		return PAL_NAT_GO;
	}
	if (v && v->kind == PAL_NAT_FWD) {
		int closed = nat_closed(v, st);
		if (!closed && fwd_live(&k, v)) {
			__u8 hairpin = v->flags & PAL_NAT_F_HAIRPIN, fip = v->flags & PAL_NAT_F_FIP;
			struct nat_addr src;
			__builtin_memcpy(src.a, v->node, 16);
			nat_seen(&k, v, st->tcp_flags, 1, t);
			if (!(hairpin && fip))
				nat_frag_note(st, v->addr, 1);
			if (nat_rewrite(skb, st, 1, (struct nat_addr *)v->addr, v->port) < 0)
				return PAL_TCX_DROP;
			if (hairpin && fip)
				return nat_rewrite(skb, st, 0, &src, st->sport) < 0 ? PAL_TCX_DROP : PAL_NAT_GO;
			if (hairpin)
				skb->mark |= PAL_MARK_HAIRPIN;
			return PAL_NAT_GO;
		}
		if (!closed) {
			int r = nat_gone(skb, st);
			if (r != PAL_NAT_GO)
				return r == PAL_TCX_DROP ? r : PAL_NAT_REJECTED;
		}
	}
	/* A UDP flow that is no Service's and already known to the
	 * interface's conntrack is not looked up again (a TCP one's packets
	 * after its SYN are not either: nat_pick_packet). */
	if (st->proto == IPPROTO_UDP && ct_established(st))
		return PAL_NAT_ESTABLISHED;
	struct nat_pick p = {};
	int r = nat_pick_packet(skb, st, PAL_HOW_WORKLOAD, &p);
	if (r == PAL_PICK_NONE) {
		nat_forget_stale(st);
		return PAL_NAT_GO;
	}
	if (r == PAL_PICK_REJECT)
		return nat_reject(skb, st) == PAL_TCX_DROP ? PAL_TCX_DROP : PAL_NAT_REJECTED;
	if (r != PAL_PICK_OK)
		return PAL_NAT_NOLOCAL;
	if ((p.flags & PAL_SVC_FIP) && addr_eq(st->src, p.be.addr))
		return nat_fip_hairpin(skb, st, &p);
	/* The reply's node is not read (no PAL_NAT_F_TUNNEL). */
	int hairpin = nat_track(st, &p, 0, st->ifindex, (struct nat_addr *)p.be.node);
	if (hairpin < 0)
		return PAL_TCX_DROP;
	nat_frag_note(st, p.be.addr, 1);
	if (nat_rewrite(skb, st, 1, (struct nat_addr *)p.be.addr, p.be.port) < 0)
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
	if (!st || !nat_proto(st->proto))
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
	__u64 t = now();
	if (!nat_live(v, st->proto, t))
		return 0;
	nat_seen(&k, v, st->tcp_flags, 0, t);
	struct nat_addr a;
	__builtin_memcpy(a.a, v->addr, 16);
	nat_frag_note(st, a.a, 0);
	return nat_rewrite(skb, st, 0, &a, v->port);
}

/* nat_host_rev translates a reply leaving by a host interface (a flow
 * from outside, its backend on this node): the frontend as source. -1
 * when a rewrite failed. */
GLOBAL int nat_host_rev(struct __sk_buff *skb, struct state *st)
{
	if (!st || !nat_proto(st->proto) || (st->flags & PAL_F_FRAG))
		return 0;
	struct nat_key k = {};
	nat_key_of(st, &k);
	struct nat_value *v = bpf_map_lookup_elem(&pal_nat, &k);
	if (!v || v->kind != PAL_NAT_REV || !(v->flags & PAL_NAT_F_HOST))
		return 0;
	__u64 t = now();
	if (!nat_live(v, st->proto, t))
		return 0;
	nat_seen(&k, v, st->tcp_flags, 0, t);
	struct nat_addr a;
	__builtin_memcpy(a.a, v->addr, 16);
	return nat_rewrite(skb, st, 0, &a, v->port);
}

static __always_inline struct nat_cfg *nat_cfg(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&pal_natcfg, &zero);
}

/* nat_encap sends the packet to node through the node port tunnel
 * (TC_ACT_REDIRECT to the tunnel device, which encapsulates it), or
 * PAL_TCX_DROP. */
GLOBAL int nat_encap(struct __sk_buff *skb, struct nat_addr *node, __u32 vni)
{
	if (!node)
		return PAL_TCX_DROP;
	struct nat_cfg *c = nat_cfg();
	if (!c || !c->tun_ifindex)
		return PAL_TCX_DROP;
	__u32 ifindex = c->tun_ifindex;
	struct bpf_tunnel_key key = {.tunnel_id = vni, .tunnel_ttl = 64};
	__u64 flags = 0;
	if (is_mapped4(node->a)) {
		key.remote_ipv4 = bpf_ntohl(*(__u32 *)&node->a[12]);
	} else {
		__builtin_memcpy(key.remote_ipv6, node->a, 16);
		flags = BPF_F_TUNINFO_IPV6;
	}
	if (bpf_skb_set_tunnel_key(skb, &key, sizeof(key), flags) < 0)
		return PAL_TCX_DROP;
	return bpf_redirect(ifindex, 0);
}

/* dsr reports whether a client gets DSR (bpfExternalServiceMode DSR, and
 * not in bpfDSROptoutCIDRs). */
static __always_inline int dsr(struct state *st)
{
	struct nat_cfg *c = nat_cfg();
	if (!c || !(c->flags & PAL_NATCFG_DSR))
		return 0;
	struct dsr_key k = {.prefixlen = 128};
	__builtin_memcpy(k.addr, st->src, 16);
	return bpf_map_lookup_elem(&pal_dsr_optout, &k) == 0;
}

/* nat_to_tunnel sends a new flow from outside through the tunnel to the
 * node of its backend p, untranslated (that node chooses among its own),
 * and remembers it (TUN) for its next packets. */
GLOBAL int nat_to_tunnel(struct __sk_buff *skb, struct state *st, struct nat_pick *p)
{
	if (!st || !p)
		return PAL_TCX_DROP;
	struct nat_key k = {};
	nat_key_of(st, &k);
	struct nat_value tun = {.kind = PAL_NAT_TUN, .svc = p->svc, .port = p->be.port, .last_seen = now()};
	__builtin_memcpy(tun.addr, p->be.addr, 16);
	__builtin_memcpy(tun.node, p->be.node, 16);
	if (dsr(st))
		tun.flags = PAL_NAT_F_DSR;
	if (bpf_map_update_elem(&pal_nat, &k, &tun, BPF_ANY) < 0)
		return PAL_TCX_DROP;
	return nat_encap(skb, (struct nat_addr *)p->be.node, (tun.flags & PAL_NAT_F_DSR) ? PAL_VNI_DSR : PAL_VNI_TUNNEL);
}

/* nat_outside translates a packet that arrived on a host data interface
 * to a frontend: a backend on this node (or one whose node is unknown)
 * gets it (DNAT), a backend on another node through the tunnel. It
 * returns PAL_NAT_GO to go on (translated or not ours), or a verdict
 * (the tunnel, a reject: TC_ACT_REDIRECT; a drop). */
GLOBAL int nat_outside(struct __sk_buff *skb, struct state *st)
{
	if (!st || !nat_proto(st->proto) || (st->flags & PAL_F_FRAG))
		return PAL_NAT_GO;
	struct nat_key k = {};
	__u64 t;
	struct nat_value *v = nat_lookup_live(st, &k, &t);
	if (v && (v->kind == PAL_NAT_FWD || v->kind == PAL_NAT_TUN)) {
		int closed = nat_closed(v, st);
		if (!closed && fwd_live(&k, v)) {
			nat_seen(&k, v, st->tcp_flags, 1, t);
			if (v->kind == PAL_NAT_TUN)
				return nat_encap(skb, (struct nat_addr *)v->node, (v->flags & PAL_NAT_F_DSR) ? PAL_VNI_DSR : PAL_VNI_TUNNEL);
			if (nat_rewrite(skb, st, 1, (struct nat_addr *)v->addr, v->port) < 0)
				return PAL_TCX_DROP;
			return PAL_NAT_GO;
		}
		if (!closed) {
			int r = nat_gone(skb, st);
			if (r != PAL_NAT_GO)
				return r == PAL_TCX_DROP ? r : PAL_NAT_REJECTED;
		}
	}
	struct nat_pick p = {};
	int r = nat_pick_packet(skb, st, PAL_HOW_OUTSIDE, &p);
	if (r == PAL_PICK_NONE)
		return PAL_NAT_GO;
	if (r == PAL_PICK_REJECT)
		return nat_reject(skb, st) == PAL_TCX_DROP ? PAL_TCX_DROP : PAL_NAT_REJECTED;
	if (r != PAL_PICK_OK)
		return PAL_NAT_NOLOCAL;
	if (!p.be.local && !addr_zero(p.be.node))
		return nat_to_tunnel(skb, st, &p);
	if (nat_track(st, &p, PAL_NAT_F_HOST, 0, (struct nat_addr *)p.be.node) < 0)
		return PAL_TCX_DROP;
	if (nat_rewrite(skb, st, 1, (struct nat_addr *)p.be.addr, p.be.port) < 0)
		return PAL_TCX_DROP;
	return PAL_NAT_GO;
}

/* nat_tunneled translates a packet that came by the node port tunnel from
 * node (vni PAL_VNI_TUNNEL or PAL_VNI_DSR) to one of this node's
 * backends, its replies to go back through the tunnel or straight to
 * the client. PAL_NAT_GO, or a verdict. */
GLOBAL int nat_tunneled(struct __sk_buff *skb, struct state *st, struct nat_addr *node, __u32 vni)
{
	if (!st || !node || !nat_proto(st->proto) || (st->flags & PAL_F_FRAG))
		return PAL_TCX_DROP;
	struct nat_key k = {};
	__u64 t;
	struct nat_value *v = nat_lookup_live(st, &k, &t);
	if (v && v->kind == PAL_NAT_FWD && fwd_live(&k, v)) {
		nat_seen(&k, v, st->tcp_flags, 1, t);
		if (nat_rewrite(skb, st, 1, (struct nat_addr *)v->addr, v->port) < 0)
			return PAL_TCX_DROP;
		return PAL_NAT_GO;
	}
	struct nat_pick p = {};
	int r = nat_pick_packet(skb, st, PAL_HOW_TUNNEL, &p);
	if (r == PAL_PICK_NONE || r == PAL_PICK_REJECT)
		return PAL_TCX_DROP;
	if (r != PAL_PICK_OK)
		return PAL_NAT_NOLOCAL;
	__u32 flags = vni == PAL_VNI_DSR ? PAL_NAT_F_HOST : PAL_NAT_F_TUNNEL;
	if (nat_track(st, &p, flags, 0, node) < 0)
		return PAL_TCX_DROP;
	if (nat_rewrite(skb, st, 1, (struct nat_addr *)p.be.addr, p.be.port) < 0)
		return PAL_TCX_DROP;
	return PAL_NAT_GO;
}

/* nat_tunnel_back sends a backend's reply (flagged by nat_fwd) back
 * through the tunnel to the node its flow came from, translated: the
 * frontend as source. TC_ACT_REDIRECT, PAL_NAT_GO when it is none (any
 * more), or PAL_TCX_DROP. */
GLOBAL int nat_tunnel_back(struct __sk_buff *skb, struct state *st)
{
	if (!st)
		return PAL_TCX_DROP;
	struct nat_key k = {};
	nat_key_of(st, &k);
	struct nat_value *v = bpf_map_lookup_elem(&pal_nat, &k);
	if (!v || v->kind != PAL_NAT_REV || !(v->flags & PAL_NAT_F_TUNNEL))
		return PAL_NAT_GO;
	struct nat_addr a, node;
	__builtin_memcpy(a.a, v->addr, 16);
	__builtin_memcpy(node.a, v->node, 16);
	__u16 port = v->port;
	if (nat_rewrite(skb, st, 0, &a, port) < 0)
		return PAL_TCX_DROP;
	return nat_encap(skb, &node, PAL_VNI_REPLY);
}

/* Floating IPs (WorkloadEndpoint ipNATs), as Calico's cali-fip-dnat and
 * cali-fip-snat: a workload's floating IP (pal_fip) is a frontend of
 * every port and protocol whose one backend is the workload's own
 * address, the port kept (nat_pick), translated where its clients'
 * packets enter (a workload's interface, a host data interface: the
 * replies get the floating IP back there), before conntrack, policy and
 * routing; the host's own packets are translated by the nat table's
 * cali-fip-dnat (OUTPUT). A workload reaching its own floating IP gets
 * the packet from the floating IP (as cali-fip-snat): both addresses of
 * such a flow are rewritten where it leaves the workload, and the
 * reply's (REV with PAL_NAT_F_FIP, node the workload's address) after
 * its interface's conntrack (nat_fip_out). TCP and UDP. */

/* nat_fip_out gives a workload's reply (flagged by nat_fwd) to a flow
 * that came to its floating IP the floating IP as source (a hairpin's:
 * the workload as destination too), after its interface's conntrack.
 * -1 when a rewrite failed. */
GLOBAL int nat_fip_out(struct __sk_buff *skb, struct state *st)
{
	if (!st)
		return -1;
	struct nat_key k = {};
	nat_key_of(st, &k);
	struct nat_value *v = bpf_map_lookup_elem(&pal_nat, &k);
	if (!v || v->kind != PAL_NAT_REV || !(v->flags & PAL_NAT_F_FIP))
		return 0;
	struct nat_addr src, dst;
	__builtin_memcpy(src.a, v->addr, 16);
	__builtin_memcpy(dst.a, v->node, 16);
	__u8 hairpin = v->flags & PAL_NAT_F_HAIRPIN;
	if (nat_rewrite(skb, st, 0, &src, st->sport) < 0)
		return -1;
	if (hairpin && nat_rewrite(skb, st, 1, &dst, st->dport) < 0)
		return -1;
	return 0;
}

/* nat_icmp_rev translates an ICMP error about a translated flow on its
 * way to the flow's client: the packet it quotes (client -> backend) gets
 * the frontend back as destination, and the error's own source, when it
 * is the backend, the frontend's address; the ICMP checksum (and the
 * quoted IPv4 header's) follow. The quoted layer 4 checksum is left as
 * it was (no one checks it: the kernel finds the socket by the
 * addresses and ports). Its REV entry must be the client interface's
 * (ifindex), or a host interface's (host). -1 when a rewrite failed. */
GLOBAL int nat_icmp_rev(struct __sk_buff *skb, struct state *st, __u32 ifindex, __u32 host)
{
	if (!st || !is_icmp(st) || !icmp_is_error(st))
		return 0;
	__u32 l3 = st->l3 & 0xff, l4 = st->l4 & 0x3ff, csum = l4 + 2;
	struct state in = {};
	int il4 = parse_ip(skb, &in, l4 + 8, st->family == 6);
	if (il4 < 0 || in.family != st->family || !nat_proto(in.proto))
		return 0;
	__be16 ports[2];
	if (bpf_skb_load_bytes(skb, il4 & 0x7ff, ports, sizeof(ports)) < 0)
		return 0;
	/* The reply's entry: backend -> client. */
	struct nat_key k = {.sport = bpf_ntohs(ports[1]), .dport = bpf_ntohs(ports[0]), .proto = in.proto};
	__builtin_memcpy(k.src, in.dst, 16);
	__builtin_memcpy(k.dst, in.src, 16);
	struct nat_value *v = bpf_map_lookup_elem(&pal_nat, &k);
	if (!v || v->kind != PAL_NAT_REV || (host ? !(v->flags & PAL_NAT_F_HOST) : v->ifindex != ifindex))
		return 0;
	__u8 fe[16];
	__builtin_memcpy(fe, v->addr, 16);
	__be16 fport = bpf_htons(v->port);
	__u32 il3 = (l4 + 8) & 0x3ff;
	int outer = addr_eq(st->src, in.dst);
	if (st->family == 4) {
		__be32 from = *(__be32 *)&in.dst[12], to = *(__be32 *)&fe[12];
		__be16 oldc, newc;
		if (bpf_skb_load_bytes(skb, il3 + 10, &oldc, 2) < 0 || bpf_l3_csum_replace(skb, il3 + 10, from, to, 4) < 0 ||
		    bpf_skb_load_bytes(skb, il3 + 10, &newc, 2) < 0 || bpf_skb_store_bytes(skb, il3 + 16, &to, 4, 0) < 0 ||
		    bpf_l4_csum_replace(skb, csum, from, to, 4) < 0 || bpf_l4_csum_replace(skb, csum, oldc, newc, 2) < 0)
			return -1;
		if (outer && (bpf_l3_csum_replace(skb, l3 + 10, from, to, 4) < 0 || bpf_skb_store_bytes(skb, l3 + 12, &to, 4, 0) < 0))
			return -1;
	} else {
		__u8 old[16];
		__builtin_memcpy(old, in.dst, 16);
		__s64 diff = bpf_csum_diff((__be32 *)old, 16, (__be32 *)fe, 16, 0);
		if (diff < 0 || bpf_skb_store_bytes(skb, il3 + 24, fe, 16, 0) < 0 || bpf_l4_csum_replace(skb, csum, 0, diff, 0) < 0)
			return -1;
		/* ICMPv6's checksum covers the outer addresses too. */
		if (outer && (bpf_skb_store_bytes(skb, l3 + 8, fe, 16, 0) < 0 || bpf_l4_csum_replace(skb, csum, 0, diff, BPF_F_PSEUDO_HDR) < 0))
			return -1;
	}
	if (ports[1] != fport &&
	    (bpf_skb_store_bytes(skb, (il4 & 0x7ff) + 2, &fport, 2, 0) < 0 || bpf_l4_csum_replace(skb, csum, ports[1], fport, 2) < 0))
		return -1;
	if (outer)
		__builtin_memcpy(st->src, fe, 16);
	return 0;
}

#endif
