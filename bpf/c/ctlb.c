//go:build ignore

/* Connect-time load balancing (FelixConfiguration
 * bpfConnectTimeLoadBalancing, as Calico's): cgroup sock_addr programs
 * attached to the root of the cgroup v2 hierarchy, so that a process of
 * the node's own network namespace (calico-node, the kubelet, a
 * hostNetwork pod) reaches a Service's cluster address without
 * kube-proxy. A connect() or an unconnected sendmsg() to a frontend is
 * given a backend before the socket sends anything, by the same lookup
 * and choice as the programs on the interfaces (lb.h: nat_pick, asked as
 * PAL_HOW_HOST, so affinity, internalTrafficPolicy Local and floating
 * IPs hold for the host's clients too); getpeername() and recvmsg() then
 * report the frontend, not the backend.
 *
 * The cgroup hierarchy is the machine's, not the namespace's: every
 * program first checks that the socket is in the network namespace the
 * loader named (netns_cookie) and leaves every other socket alone, so
 * several felixes (the lab's nodes) can share one machine.
 *
 * pal_ctlb keeps, per socket (its cookie):
 *   PEER  backend:b -> frontend:f   what getpeername/recvmsg report
 *   SEND  frontend:f -> backend:b   an unconnected UDP socket's choice,
 *                                   kept while the backend stays one
 *
 * Regenerate the object with `go generate ./bpf`.
 */

#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "palisade.h"

char _license[] SEC("license") = "Dual MIT/GPL";

#define GLOBAL __attribute__((noinline))

static __always_inline void map4(__u8 *dst, __be32 a)
{
	__u32 *w = (__u32 *)dst;
	w[0] = 0;
	w[1] = 0;
	w[2] = bpf_htonl(0x0000ffff);
	w[3] = a;
}

#include "lb.h"

/* is_loopback: 127.0.0.0/8 (mapped) or ::1. */
static __always_inline int is_loopback(const __u8 *a)
{
	const __u32 *w = (const __u32 *)a;
	if (is_mapped4(a))
		return a[12] == 127;
	return w[0] == 0 && w[1] == 0 && w[2] == 0 && w[3] == bpf_htonl(1);
}

#define SOCK_STREAM 1
#define SOCK_DGRAM 2
#define EPERM 1
#define ECONNREFUSED 111

/* refuse fails the call as kube-proxy's REJECT fails a host's: a TCP
 * connect is refused (its ICMP error), a UDP send (or connect here) is
 * not permitted (the datagram dropped in OUTPUT). */
static __always_inline int refuse(__u8 proto)
{
	bpf_set_retval(proto == IPPROTO_TCP ? -ECONNREFUSED : -EPERM);
	return 0;
}

/* drop fails the call as kube-proxy's DROP (a Local traffic policy
 * without a backend here) fails a host's: not permitted. */
static __always_inline int drop(void)
{
	bpf_set_retval(-EPERM);
	return 0;
}

/* The network namespace whose sockets are translated (SO_NETNS_COOKIE). */
volatile const __u64 netns_cookie = 0;
/* 1: UDP sockets too (bpfConnectTimeLoadBalancing Enabled, or TCP with
 * bpfHostNetworkedNATWithoutCTLB Enabled: docs/bpf.md); 0: TCP only. */
volatile const __u32 ctlb_udp = 1;

#define PAL_CTLB_PEER 1
#define PAL_CTLB_SEND 2

struct ctlb_key {
	__u64 cookie;
	__u8 addr[16];
	__u16 port; /* host order */
	__u8 proto;
	__u8 kind; /* PAL_CTLB_* */
	__u32 pad;
};

struct ctlb_value {
	__u8 addr[16];
	__u16 port;
	__u8 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ctlb_key);
	__type(value, struct ctlb_value);
} pal_ctlb SEC(".maps");

/* ctlb_proto is the protocol of a socket the programs translate, 0 for
 * one they leave alone. */
static __always_inline __u8 ctlb_proto(struct bpf_sock_addr *ctx)
{
	if (bpf_get_netns_cookie(ctx) != netns_cookie)
		return 0;
	if (ctx->type == SOCK_STREAM && ctx->protocol == IPPROTO_TCP)
		return IPPROTO_TCP;
	if (ctx->type == SOCK_DGRAM && ctx->protocol == IPPROTO_UDP && ctlb_udp)
		return IPPROTO_UDP;
	return 0;
}

/* ctlb_fwd gives a connect (send 0) or an unconnected send (send 1) to
 * a frontend its backend, in a and *port: 1 translated, 0 not a
 * frontend, -1 a frontend without backends, -2 one with backends but
 * none its Local traffic policy allows here.
 *
 * The host is one client (the unspecified address of the family, no
 * port: a connect has no source port yet) for the affinity, as
 * kube-proxy sees the node's own address; a node port is translated
 * when it is asked on a loopback address or on any node's address
 * (pal_nodes: this one's or another's, as Calico's connect-time programs
 * do); another address of the node (the programs here cannot ask the
 * FIB) goes untranslated. */
static __always_inline int ctlb_fwd(struct bpf_sock_addr *ctx, __u8 proto, __u8 *a, __u16 *port, int send)
{
	struct nat_query q = {.dport = *port, .proto = proto, .how = PAL_HOW_HOST};
	__builtin_memcpy(q.dst, a, 16);
	if (is_mapped4(a)) {
		q.src[10] = 0xff;
		q.src[11] = 0xff;
	}
	q.dst_local = is_loopback(a) || bpf_map_lookup_elem(&pal_nodes, (struct nat_addr *)a) ? PAL_DST_LOCAL : PAL_DST_NOT_LOCAL;
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct ctlb_key sk = {.cookie = cookie, .port = *port, .proto = proto, .kind = PAL_CTLB_SEND};
	__builtin_memcpy(sk.addr, a, 16);
	struct ctlb_value be = {};
	struct ctlb_value *prev = send ? bpf_map_lookup_elem(&pal_ctlb, &sk) : 0;
	struct nat_pick p = {};
	int r = nat_pick(&q, &p);
	if (r == PAL_PICK_REJECT)
		return -1;
	if (r == PAL_PICK_DROP)
		return -2;
	if (r != PAL_PICK_OK)
		return 0;
	if (prev && !(p.flags & PAL_SVC_FIP) && be_live(p.svc, prev->addr, prev->port)) {
		/* An unconnected socket keeps its backend while it is one. */
		__builtin_memcpy(be.addr, prev->addr, 16);
		be.port = prev->port;
	} else {
		__builtin_memcpy(be.addr, p.be.addr, 16);
		be.port = p.be.port;
		if (send)
			bpf_map_update_elem(&pal_ctlb, &sk, &be, BPF_ANY);
	}
	struct ctlb_key pk = {.cookie = cookie, .port = be.port, .proto = proto, .kind = PAL_CTLB_PEER};
	__builtin_memcpy(pk.addr, be.addr, 16);
	struct ctlb_value fe = {.port = *port};
	__builtin_memcpy(fe.addr, a, 16);
	bpf_map_update_elem(&pal_ctlb, &pk, &fe, BPF_ANY);
	__builtin_memcpy(a, be.addr, 16);
	*port = be.port;
	return 1;
}

/* ctlb_rev puts back the frontend a socket asked for in place of its
 * backend (getpeername, recvmsg): 1 when it did. */
static __always_inline int ctlb_rev(struct bpf_sock_addr *ctx, __u8 proto, __u8 *a, __u16 *port)
{
	struct ctlb_key pk = {.cookie = bpf_get_socket_cookie(ctx), .port = *port, .proto = proto, .kind = PAL_CTLB_PEER};
	__builtin_memcpy(pk.addr, a, 16);
	struct ctlb_value *fe = bpf_map_lookup_elem(&pal_ctlb, &pk);
	if (!fe)
		return 0;
	__builtin_memcpy(a, fe->addr, 16);
	*port = fe->port;
	return 1;
}

static __always_inline __u16 ctx_port(struct bpf_sock_addr *ctx)
{
	return bpf_ntohs((__u16)ctx->user_port);
}

/* The socket call's IPv6 address, word by word (the context's fields
 * take 4-byte accesses), and its port in host order. */
static __always_inline void load6(struct bpf_sock_addr *ctx, __u32 *w)
{
	w[0] = ctx->user_ip6[0];
	w[1] = ctx->user_ip6[1];
	w[2] = ctx->user_ip6[2];
	w[3] = ctx->user_ip6[3];
}

static __always_inline void store6(struct bpf_sock_addr *ctx, const __u32 *w, __u16 port)
{
	ctx->user_ip6[0] = w[0];
	ctx->user_ip6[1] = w[1];
	ctx->user_ip6[2] = w[2];
	ctx->user_ip6[3] = w[3];
	ctx->user_port = bpf_htons(port);
}

static __always_inline void store4(struct bpf_sock_addr *ctx, const __u8 *a, __u16 port)
{
	ctx->user_ip4 = *(__u32 *)&a[12];
	ctx->user_port = bpf_htons(port);
}

/* fwd4 and fwd6 translate the destination of a connect or a send;
 * they return the program's verdict (0 refuses: the errno is set). */
static __always_inline int fwd4(struct bpf_sock_addr *ctx, int send)
{
	__u8 proto = ctlb_proto(ctx);
	if (!proto || (send && proto != IPPROTO_UDP))
		return 1;
	__u8 a[16];
	map4(a, ctx->user_ip4);
	__u16 port = ctx_port(ctx);
	int r = ctlb_fwd(ctx, proto, a, &port, send);
	if (r == -2)
		return drop();
	if (r < 0)
		return refuse(proto);
	if (r > 0 && is_mapped4(a))
		store4(ctx, a, port);
	return 1;
}

static __always_inline int fwd6(struct bpf_sock_addr *ctx, int send)
{
	__u8 proto = ctlb_proto(ctx);
	if (!proto || (send && proto != IPPROTO_UDP))
		return 1;
	__u32 w[4];
	load6(ctx, w);
	__u16 port = ctx_port(ctx);
	int r = ctlb_fwd(ctx, proto, (__u8 *)w, &port, send);
	if (r == -2)
		return drop();
	if (r < 0)
		return refuse(proto);
	if (r > 0)
		store6(ctx, w, port);
	return 1;
}

static __always_inline int rev4(struct bpf_sock_addr *ctx)
{
	__u8 proto = ctlb_proto(ctx);
	if (!proto)
		return 1;
	__u8 a[16];
	map4(a, ctx->user_ip4);
	__u16 port = ctx_port(ctx);
	if (ctlb_rev(ctx, proto, a, &port) && is_mapped4(a))
		store4(ctx, a, port);
	return 1;
}

static __always_inline int rev6(struct bpf_sock_addr *ctx)
{
	__u8 proto = ctlb_proto(ctx);
	if (!proto)
		return 1;
	__u32 w[4];
	load6(ctx, w);
	__u16 port = ctx_port(ctx);
	if (ctlb_rev(ctx, proto, (__u8 *)w, &port))
		store6(ctx, w, port);
	return 1;
}

SEC("cgroup/connect4")
int pal_connect4(struct bpf_sock_addr *ctx) { return fwd4(ctx, 0); }

SEC("cgroup/connect6")
int pal_connect6(struct bpf_sock_addr *ctx) { return fwd6(ctx, 0); }

SEC("cgroup/sendmsg4")
int pal_sendmsg4(struct bpf_sock_addr *ctx) { return fwd4(ctx, 1); }

SEC("cgroup/sendmsg6")
int pal_sendmsg6(struct bpf_sock_addr *ctx) { return fwd6(ctx, 1); }

SEC("cgroup/recvmsg4")
int pal_recvmsg4(struct bpf_sock_addr *ctx) { return rev4(ctx); }

SEC("cgroup/recvmsg6")
int pal_recvmsg6(struct bpf_sock_addr *ctx) { return rev6(ctx); }

SEC("cgroup/getpeername4")
int pal_getpeername4(struct bpf_sock_addr *ctx) { return rev4(ctx); }

SEC("cgroup/getpeername6")
int pal_getpeername6(struct bpf_sock_addr *ctx) { return rev6(ctx); }
