/* Shared layout of Palisade's BPF maps and of the per-packet state the
 * generated policy programs read. The Go side takes its offsets from the
 * types bpf2go generates from this file, so the two cannot drift apart.
 */
#ifndef PALISADE_H
#define PALISADE_H

/* TCX verdicts (linux/bpf.h of kernels >= 6.6). */
#define PAL_TCX_NEXT (-1)
#define PAL_TCX_PASS 0
#define PAL_TCX_DROP 2

/* Mark set on every packet an ingress program let through; the iptables
 * guard drops packets from workload interfaces without it. */
#define PAL_MARK_SEEN 0x01000000

/* Stages: one policy program each, indexed into pal_ep.slots. "in" is a
 * packet arriving on the interface (TCX ingress), "out" one leaving by it. */
#define PAL_STAGE_UNTRACKED_IN 0
#define PAL_STAGE_PREDNAT_IN 1
#define PAL_STAGE_NORMAL_IN 2
#define PAL_STAGE_FWD_IN 3
#define PAL_STAGE_UNTRACKED_OUT 4
#define PAL_STAGE_NORMAL_OUT 5
#define PAL_STAGE_FWD_OUT 6
#define PAL_STAGES 7
/* Fixed slots of pal_progs: the resume programs (0-3, see palisade.c),
 * then the forward program (empty when the host conntrack bypass is off
 * or the kernel cannot run it); policy programs take the slots after. */
#define PAL_SLOT_FWD 4

/* pal_state.phase before any stage ran. */
#define PAL_PHASE_START 0xff

/* Verdicts a policy program leaves in pal_state.verdict. */
#define PAL_VERDICT_NONE 0
#define PAL_VERDICT_ALLOW 1
#define PAL_VERDICT_DENY 2

/* pal_ep.flags */
#define PAL_EP_WORKLOAD 0x1
#define PAL_EP_HOST 0x2
/* A workload interface felix does not know: everything drops. */
#define PAL_EP_BLOCKED 0x4
/* DefaultEndpointToHostAction Drop: workload traffic to the host drops. */
#define PAL_EP_TOHOST_DROP 0x8
/* A host data interface (bpfDataIfacePattern): its ingress program only
 * sends established flows to local workloads on (host conntrack bypass). */
#define PAL_EP_DATA 0x10
/* The interface is a veth and bpfRedirectToPeer is not Disabled: packets
 * for its workload may be redirected straight to its peer. */
#define PAL_EP_VETH 0x20
/* A host data interface without an Ethernet header (an L3 device) whose
 * packets may go straight to a veth workload's peer, given one
 * (bpfRedirectToPeer Enabled). */
#define PAL_EP_PEER_L3 0x40
/* The node port tunnel's device (nat.h). */
#define PAL_EP_TUNNEL 0x80

/* pal_state.flags */
#define PAL_F_OUT 0x1        /* egress hook */
#define PAL_F_TOHOST 0x2     /* destined to this host */
#define PAL_F_FAILSAFE 0x4   /* a failsafe port */
#define PAL_F_PREDNAT_OK 0x8 /* allowed by preDNAT policy */
#define PAL_F_UNTRACKED 0x10 /* allowed by doNotTrack policy: no conntrack */
#define PAL_F_FRAG 0x20      /* first fragment of a fragmented packet */
#define PAL_F_SRC_A 0x40     /* the source is side a of the conntrack key */
#define PAL_F_CT_WRITTEN 0x80 /* the conntrack entry was written (new state, or refreshed) */

/* Counter slots of pal_counter_key.stage PAL_COUNTER_GENERAL. */
#define PAL_COUNTER_GENERAL 0xff
#define PAL_C_ESTABLISHED 0  /* allowed by conntrack */
#define PAL_C_RELATED 1      /* ICMP error of a tracked flow */
#define PAL_C_SPOOFED 2      /* source not the workload's */
#define PAL_C_BLOCKED 3      /* unknown workload interface */
#define PAL_C_TOHOST_DROP 4  /* DefaultEndpointToHostAction Drop */
#define PAL_C_FAILSAFE 5     /* failsafe port */
#define PAL_C_NO_FWD_POLICY 6 /* forwarded, no applyOnForward policy */
#define PAL_C_FRAG_DROP 7    /* fragment of no allowed packet */
#define PAL_C_MALFORMED 8    /* IP header that does not parse */
#define PAL_C_FROM_HOST 9    /* host to local workload */
#define PAL_C_ND 10          /* IPv6 neighbour discovery, MLD */
#define PAL_C_CT_FULL 11     /* allowed, but the conntrack map is full */
#define PAL_C_NO_PROGRAM 12  /* a stage's program is missing */
#define PAL_C_NO_ENDPOINT 13 /* interface with no endpoint entry */
#define PAL_C_PREDNAT_ALLOW 14
#define PAL_C_UNTRACKED_ALLOW 15
#define PAL_C_FRAG_ALLOW 16
#define PAL_C_FORWARDED 17   /* established, sent on by the program (host conntrack bypass) */
#define PAL_C_NAT_REJECT 18 /* to a Service without backends (ICMP unreachable), or a flow whose backend left (TCP reset) */
#define PAL_C_NAT_NOLOCAL 19 /* to a Service whose Local traffic policy allows no backend here */
#define PAL_C_NAT_TUNNEL 20  /* sent by the node port tunnel to another node */
#define PAL_C_TUNNEL_PEER 21 /* by the node port tunnel, from no known node or of no known kind */
#define PAL_C_MAX 22

/* Conntrack flags. */
#define PAL_CT_ORIG_A 0x01   /* side a opened the flow */
#define PAL_CT_REPLY 0x02    /* a packet of the other side was seen */
#define PAL_CT_FIN_A 0x04
#define PAL_CT_FIN_B 0x08
#define PAL_CT_RST 0x10

/* The packet being decided, as the entry program parsed it, and where its
 * walk is. Addresses are IPv6 or IPv4-mapped IPv6 (::ffff:a.b.c.d), in
 * network order; ports in host order (ICMP echo: the identifier). */
struct state {
	__u8 src[16];
	__u8 dst[16];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 family; /* 4 or 6 */
	__u8 icmp_type;
	__u8 icmp_code;
	__u32 ifindex;
	__u8 phase;   /* stage just run, PAL_PHASE_START before */
	__u8 verdict; /* PAL_VERDICT_* of that stage */
	__u16 rule;   /* description slot of what decided (Log events) */
	__u32 flags;  /* PAL_F_* */
	__u32 frag_id;
	__u8 resume;    /* slot of pal_progs the policy program returns to */
	__u8 tcp_flags; /* TCP: the header's flags (0 when not read) */
	__u16 l3;       /* offset of the IP header */
	__u32 len;     /* the IP packet's length (as iptables counts bytes) */
	__u32 l4;      /* offset of the layer 4 header, for the resume program */
	__u64 rule_id; /* counter key of what decided: its stable rule id */
	/* With PAL_F_CT_WRITTEN: the timeout (ms) of the entry's state, for
	 * the host's conntrack entry of a bypassed flow. */
	__u32 ct_ms;
	__u32 slot; /* the pal_progs slot of the stage being run (the engine's key) */
};

/* An interface's entry: what it is and its stages' programs (index into
 * pal_progs, 0 for none). */
struct ep {
	__u32 flags;
	__u32 l2len;
	__u32 slots[PAL_STAGES];
	/* A workload's own IPv4 address (network order; 0 for none): the
	 * source nearly all its packets carry, checked before pal_src. */
	__u32 src4;
};

/* Anti-spoofing: the addresses a workload may send from. LPM key: 32 bits
 * of ifindex, then the address. */
struct src_key {
	__u32 prefixlen;
	__u32 ifindex;
	__u8 addr[16];
};

/* IP set member. LPM key: 64 bits of set id, then the address. */
struct set_key {
	__u32 prefixlen;
	__u32 id_hi;
	__u32 id_lo;
	__u8 addr[16];
};

/* A calc IP set id ("s:…", "n:…"), NUL-padded. */
struct set_name {
	char id[64];
};

/* Named-port IP set member (hash:ip,port). */
struct port_key {
	__u32 id_hi;
	__u32 id_lo;
	__u8 addr[16];
	__u16 port;
	__u8 proto;
	__u8 pad;
};

/* Failsafe port. LPM key: direction (0 in, 1 out), protocol, port, then
 * the peer's address (source in, destination out). */
struct failsafe_key {
	__u32 prefixlen;
	__u8 dir;
	__u8 proto;
	__u16 port; /* network order */
	__u8 addr[16];
};

/* Conntrack: one entry per interface and flow. a and b are the two sides,
 * a the lower (address, port). */
struct ct_key {
	__u32 ifindex;
	__u8 proto;
	__u8 icmp; /* ICMP query: the request's type (echo 8, 128, …) */
	__u8 pad[2];
	__u8 a[16];
	__u8 b[16];
	__u16 pa;
	__u16 pb;
};

struct ct_value {
	__u64 created;   /* bpf_ktime_get_ns */
	__u64 last_seen; /* bpf_ktime_get_ns */
	__u32 flags;     /* PAL_CT_* */
	__u32 pad;
};

/* Non-first fragments follow their first fragment's verdict. */
struct frag_key {
	__u32 ifindex;
	__u32 id;
	__u8 src[16];
	__u8 dst[16];
	__u8 proto;
	__u8 pad[3];
};

struct frag_value {
	__u64 last_seen;
};

/* Per-rule and per-reason packet and byte counters (per CPU, summed when
 * read). rule is, for a policy stage, the stable id of the rule (or
 * implicit end) that decided, as the program's description names it: a
 * hash of where the rule is and of its policy's rules, so an edited
 * policy counts anew and the others of a rewritten program keep counting
 * (as iptables chains do). For PAL_COUNTER_GENERAL it is a PAL_C_*. */
struct counter_key {
	__u32 ifindex;
	__u8 stage; /* PAL_STAGE_* or PAL_COUNTER_GENERAL */
	__u8 pad[3];
	__u64 rule;
};

struct counter_value {
	__u64 packets;
	__u64 bytes;
};

#endif
