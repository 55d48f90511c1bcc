/* The policy engine: a stage decided from data felix writes into pal_pol,
 * so the per-packet cost does not grow with the stage's rules
 * (felix/dataplane/bpf/DESIGN.md, "The policy engine";
 * felix/dataplane/bpf/policy writes the layout read here). The entry and
 * resume programs run it in place of a stage's program when the stage's
 * slot has data (run_stage): no tail call.
 *
 * A stage is a list of entries in Calico's order (each rule, or each
 * alternative of a rule whose ports are OR'd with named ports; the ends
 * of tiers; the final end). A packet has four dimensions: L4 (family,
 * protocol, destination port or ICMP type and code), the source port,
 * the source address, the destination address. For the packet's value of
 * each, the stage holds a class record: per signature (a set of
 * dimensions some entries constrain), a sparse bitmap of those entries
 * whose constraint on the dimension holds. An entry matches when every
 * dimension of its signature holds, so the first match is the first set
 * bit of the OR over signatures of the AND over their dimensions'
 * bitmaps, found through summaries (one bit a block of 64 entries).
 * Addresses are classed through identities: IPv4 by a DIR-16-8-8 table,
 * IPv6 by pal_id6, then the stage's table by identity.
 */

/* pal_pol: one value of POL_WORDS 64-bit words, read by index masked into
 * it and written by felix through its mapping. */
#define POL_BITS 21
#define POL_WORDS (1u << POL_BITS)
#define POL_MASK (POL_WORDS - 1)
#define POL_MASK32 (2 * POL_WORDS - 1)

struct pol {
	__u64 w[POL_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct pol);
} pal_pol SEC(".maps");

/* IPv6 address → identity, per generation of felix's tables. */
struct id6_key {
	__u32 prefixlen;
	__u32 gen;
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct id6_key);
	__type(value, __u32);
} pal_id6 SEC(".maps");

/* The walk's per-CPU scratch. */
struct eng {
	__u32 sub[16][4]; /* sub-record offsets of each signature's dimensions */
	__u64 acc[16];    /* each live signature's candidate blocks in word cw */
	__u32 rec[4];     /* the packet's class record in each dimension */
	__u32 sigs;       /* u32 index of the signature table */
	__u32 words, U, E, P, nent;
	__u32 pos;   /* the first entry that may decide */
	__u32 w;     /* the summary word to read next */
	__u32 cw;    /* the summary word of cand */
	__u32 first; /* w is pos's word: mask the blocks before */
	__u32 live;  /* live signatures (each dimension has a sub-record) */
	__u32 rest;  /* those not yet looked at, in a loop over them */
	__s32 result;
	__u64 cand;  /* candidate blocks of word cw not yet looked at */
	__u64 bit;   /* the block being looked at, as its bit in word cw */
	__u64 m;     /* the entries of that block that match */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct eng);
} pal_eng SEC(".maps");

/* The fixed layout (word offsets): words [0, PE_ZERO) are zero (an
 * empty record or sub-record is offset 0); PE_SLOTS holds the stage
 * header of each pal_progs slot (u32 each, 0: not an engine stage). */
#define PE_ZERO 2048
#define PE_SLOTS 4096
#define PE_VERSION 1
/* A table entry (u32) with this bit points to a table of 256 (its word
 * offset in the other bits); without, it is a record or an identity. */
#define PE_TABLE 0x80000000u

/* Stage header words. */
#define PH_INFO 0    /* nentries (u32) | W << 32 | nsig << 40 | dims << 48 | version << 56 */
#define PH_ADDR 1    /* dir4 (word offset of the IPv4 table) | gen6 << 32 */
#define PH_PORTS 2   /* L4 table (512 u32) | source port table (256 u32) << 32 */
#define PH_IDTAB 3   /* identity table | its length << 32 */
#define PH_ENTRIES 4 /* entries | U (unconstrained entries: W summaries, then the blocks) << 32 */
#define PH_POST 5    /* post-check lists */
#define PH_DIMSIGS 6 /* u16 per dimension: the signatures containing it */
#define PH_SIGS 7    /* 16 u32: signature dims | record slot of each dimension << (4 + 4 * dim) */

/* A class record: word 0 the signatures it has a sub-record for, words
 * 1-4 eight u32 sub-record offsets, by slot. A sub-record: per summary
 * word, the word and the rank of its first block; then the blocks. */
#define PR_SUBS 1

#define PD_L4 0
#define PD_SPORT 1
#define PD_SRC 2
#define PD_DST 3

/* Entry word 0: action, PE_POST, slot << 8, next << 28, post-check
 * list << 48; word 1: the rule id. */
#define PA_ALLOW 0
#define PA_DENY 1
#define PA_NONE 2
#define PA_PASS 3
#define PA_LOG 4
#define PE_POST 0x10

#define PE_MAX_POST 8

static __always_inline __u64 rd(struct pol *p, __u32 i)
{
	return p->w[i & POL_MASK];
}

static __always_inline __u32 rd32(struct pol *p, __u32 i)
{
	return ((__u32 *)p->w)[i & POL_MASK32];
}

static __always_inline __u64 popcnt(__u64 x)
{
	x = x - ((x >> 1) & 0x5555555555555555ULL);
	x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
	return (x * 0x0101010101010101ULL) >> 56;
}

/* ctz of a non-zero word. */
static __always_inline __u64 ctz(__u64 x)
{
	return popcnt((x & -x) - 1);
}

/* table256 follows a table entry (u32) down to its record: e is a record,
 * or a table indexed by the value's high byte, then its low byte. */
static __always_inline __u32 table256(struct pol *p, __u32 e, __u32 v)
{
	if (e & PE_TABLE) {
		e = rd32(p, 2 * (e & ~PE_TABLE) + ((v >> 8) & 0xff));
		if (e & PE_TABLE)
			e = rd32(p, 2 * (e & ~PE_TABLE) + (v & 0xff));
	}
	return e;
}

/* ident is an address's identity. */
static __always_inline __u32 ident(struct pol *p, struct state *st, __u8 *addr, __u64 hdr_addr)
{
	if (st->family == 4) {
		__u32 a = bpf_ntohl(*(__u32 *)&addr[12]);
		__u32 e = rd32(p, 2 * (__u32)hdr_addr + (a >> 16));
		return table256(p, e, a);
	}
	struct id6_key k = {.prefixlen = 32 + 128, .gen = hdr_addr >> 32};
	__builtin_memcpy(k.addr, addr, 16);
	__u32 *v = bpf_map_lookup_elem(&pal_id6, &k);
	return v ? *v : 0;
}

/* The walk's context, for the bpf_loop callbacks. */
struct ectx {
	struct pol *p;
	struct eng *e;
	struct state *st;
};

static __always_inline void restart_at(struct eng *e, __u32 pos)
{
	e->pos = pos;
	e->w = pos >> 12;
	e->cand = 0;
	e->first = 1;
}

/* post_ok checks an entry's named-port alternatives and exclusions. */
static __always_inline int post_ok(struct pol *p, struct state *st, __u32 at)
{
	__u32 n = rd(p, at);
	if (n > PE_MAX_POST)
		return 0;
	for (int i = 0; i < PE_MAX_POST; i++) {
		if (i >= n)
			break;
		__u64 id = rd(p, at + 1 + 2 * i);
		__u64 f = rd(p, at + 2 + 2 * i);
		struct port_key k = {.id_hi = id >> 32, .id_lo = (__u32)id, .proto = st->proto};
		if (f & 1) {
			__builtin_memcpy(k.addr, st->src, 16);
			k.port = st->sport;
		} else {
			__builtin_memcpy(k.addr, st->dst, 16);
			k.port = st->dport;
		}
		int member = bpf_map_lookup_elem(&pal_ports, &k) != 0;
		if (member == !!(f & 2))
			return 0;
	}
	return 1;
}

/* next_sig takes the next live signature of the loop (rest). */
static __always_inline __u32 next_sig(struct eng *e)
{
	__u32 rest = e->rest;
	e->rest = rest & (rest - 1);
	return ctz(rest) & 15;
}

/* and_word takes the next live signature and ANDs its dimensions'
 * summary words cw: its candidate blocks there, kept in acc (with its
 * sub-records, for and_block) and OR'd into the candidates. */
static long and_word(__u32 i, void *ctx)
{
	struct ectx *c = ctx;
	struct pol *p = c->p;
	struct eng *e = c->e;
	__u32 s = next_sig(e);
	__u32 sg = rd32(p, e->sigs + s);
	__u32 w2 = 2 * e->cw;
	__u64 a = ~0ULL;
#pragma unroll
	for (int d = 0; d < 4; d++) {
		if (sg & (1 << d)) {
			__u32 so = rd32(p, 2 * (e->rec[d] + PR_SUBS) + ((sg >> (4 + 4 * d)) & 7));
			e->sub[s][d] = so;
			a &= rd(p, so + w2);
		}
	}
	e->acc[s] = a;
	e->cand |= a;
	return 0;
}

/* block_word is a sub-record's word of the block at bit of summary word
 * cw: zero when the summary says the block is empty. */
static __always_inline __u64 block_word(struct pol *p, struct eng *e, __u32 so, __u64 bit)
{
	__u32 w2 = 2 * e->cw;
	__u64 sw = rd(p, so + w2);
	if (!(sw & bit))
		return 0;
	__u64 r = rd(p, so + w2 + 1) + popcnt(sw & (bit - 1));
	return rd(p, so + 2 * (e->words & 31) + r);
}

/* and_block takes the next live signature and ORs into m the entries of
 * block bit that it matches. */
static long and_block(__u32 i, void *ctx)
{
	struct ectx *c = ctx;
	struct pol *p = c->p;
	struct eng *e = c->e;
	__u32 s = next_sig(e);
	__u64 bit = e->bit;
	if (!(e->acc[s] & bit))
		return 0;
	__u32 sg = rd32(p, e->sigs + s);
	__u64 t = ~0ULL;
#pragma unroll
	for (int d = 0; d < 4; d++) {
		if ((sg & (1 << d)) && t)
			t &= block_word(p, e, e->sub[s][d], bit);
	}
	e->m |= t;
	return 0;
}

/* step is one step of the walk (bpf_loop): read the next summary word,
 * or look at the next candidate block; an entry found decides, or the
 * walk goes on after it (Log, Pass, a named port not matched). */
static long step(__u32 i, void *ctx)
{
	struct ectx *c = ctx;
	struct pol *p = c->p;
	struct eng *e = c->e;
	__u32 W = e->words & 31;
	if (e->cand == 0) {
		__u32 w = e->w;
		if (w >= W) {
			e->result = -1; /* no end entry: bad data */
			return 1;
		}
		e->cw = w;
		e->cand = rd(p, e->U + w);
		__u32 live = e->live;
		if (live) {
			e->rest = live;
			bpf_loop(popcnt(live) & 0xff, and_word, c, 0);
		}
		if (e->first) {
			e->cand &= ~0ULL << ((e->pos >> 6) & 63);
			e->first = 0;
		}
		e->w = w + 1;
		return 0;
	}
	__u64 bit = e->cand & -e->cand;
	e->cand ^= bit;
	__u32 b = e->cw * 64 + ctz(bit);
	e->m = rd(p, e->U + W + b);
	__u32 live = e->live;
	if (live) {
		e->bit = bit;
		e->rest = live;
		bpf_loop(popcnt(live) & 0xff, and_block, c, 0);
	}
	__u64 m = e->m;
	__u32 pos = e->pos;
	if (b == pos >> 6)
		m &= ~0ULL << (pos & 63);
	if (!m)
		return 0;
	__u32 n = b * 64 + ctz(m);
	if (n >= e->nent) {
		e->result = -1;
		return 1;
	}
	__u64 w0 = rd(p, e->E + 2 * n);
	struct state *st = c->st;
	if ((w0 & PE_POST) && !post_ok(p, st, e->P + (w0 >> 48))) {
		restart_at(e, n + 1);
		return 0;
	}
	__u32 act = w0 & 0xf;
	if (act <= PA_NONE) {
		e->result = n;
		return 1;
	}
	__u64 id = rd(p, e->E + 2 * n + 1);
	if (act == PA_LOG) {
		st->rule = (w0 >> 8) & 0xfffff;
		bpf_ringbuf_output(&pal_events, st, sizeof(*st), 0);
	}
	count(st->ifindex, st->phase, id, st->len);
	restart_at(e, (w0 >> 28) & 0xfffff);
	return 0;
}

/* engine decides the stage of st's slot when the slot is an engine
 * stage's: 1 with the verdict and the rule id in the state, 0 when it is
 * not (the slot's program decides), -1 when its data is bad. */
GLOBAL int engine(struct state *st)
{
	if (!st)
		return -1;
	__u32 zero = 0;
	struct pol *p = bpf_map_lookup_elem(&pal_pol, &zero);
	struct eng *e = bpf_map_lookup_elem(&pal_eng, &zero);
	if (!p || !e)
		return 0;
	__u32 h = rd32(p, 2 * PE_SLOTS + (st->slot & 0xffff));
	if (h == 0)
		return 0;
	__u64 info = rd(p, h + PH_INFO);
	__u32 W = (info >> 32) & 0xff, nsig = (info >> 40) & 0xff, dims = (info >> 48) & 0xff;
	if ((info >> 56) != PE_VERSION || h < PE_ZERO || W == 0 || W > 16 || nsig > 15)
		return -1;

	/* The packet's class record in each dimension the stage uses, and
	 * the signatures each of whose dimensions has a sub-record. */
	__u32 live = (1u << nsig) - 1;
	__u64 dimsigs = rd(p, h + PH_DIMSIGS);
	__u64 ports = rd(p, h + PH_PORTS);
	e->rec[PD_L4] = e->rec[PD_SPORT] = e->rec[PD_SRC] = e->rec[PD_DST] = 0;
	if (dims & (1 << PD_L4)) {
		__u32 row = (st->family == 6 ? 256 : 0) + st->proto;
		__u32 v = st->dport;
		if (is_icmp(st))
			v = ((__u32)st->icmp_type << 8) | st->icmp_code;
		__u32 r = table256(p, rd32(p, 2 * (__u32)ports + row), v);
		e->rec[PD_L4] = r;
		live &= rd(p, r) | ~(dimsigs >> (16 * PD_L4));
	}
	if (dims & (1 << PD_SPORT)) {
		__u32 r = table256(p, PE_TABLE | (__u32)(ports >> 32), st->sport);
		e->rec[PD_SPORT] = r;
		live &= rd(p, r) | ~(dimsigs >> (16 * PD_SPORT));
	}
	if (dims & ((1 << PD_SRC) | (1 << PD_DST))) {
		__u64 addr = rd(p, h + PH_ADDR);
		__u64 idtab = rd(p, h + PH_IDTAB);
		__u32 len = idtab >> 32;
		if (dims & (1 << PD_SRC)) {
			__u32 id = ident(p, st, st->src, addr);
			if (id >= len)
				return -1;
			__u32 r = rd32(p, 2 * ((__u32)idtab + id));
			e->rec[PD_SRC] = r;
			live &= rd(p, r) | ~(dimsigs >> (16 * PD_SRC));
		}
		if (dims & (1 << PD_DST)) {
			__u32 id = ident(p, st, st->dst, addr);
			if (id >= len)
				return -1;
			__u32 r = rd32(p, 2 * ((__u32)idtab + id) + 1);
			e->rec[PD_DST] = r;
			live &= rd(p, r) | ~(dimsigs >> (16 * PD_DST));
		}
	}

	__u64 ent = rd(p, h + PH_ENTRIES);
	e->live = live & 0x7fff;
	e->sigs = 2 * (h + PH_SIGS);
	e->words = W;
	e->U = ent >> 32;
	e->E = (__u32)ent;
	e->P = rd(p, h + PH_POST);
	e->nent = (__u32)info;
	e->result = -1;
	restart_at(e, 0);
	struct ectx c = {.p = p, .e = e, .st = st};
	/* Masked: the verifier's inlined bpf_loop compares all 64 bits of
	 * the count, which clang computes in a register whose high half it
	 * need not clear for a __u32 argument. */
	bpf_loop((4 * e->nent + 64) & 0xffffff, step, &c, 0);
	__s32 n = e->result;
	if (n < 0)
		return -1;
	__u64 w0 = rd(p, e->E + 2 * (__u32)n);
	__u32 act = w0 & 0xf;
	st->verdict = act == PA_ALLOW ? PAL_VERDICT_ALLOW : act == PA_DENY ? PAL_VERDICT_DENY : PAL_VERDICT_NONE;
	st->rule_id = rd(p, e->E + 2 * (__u32)n + 1);
	return 1;
}
