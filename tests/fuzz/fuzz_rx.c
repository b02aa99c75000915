/* libFuzzer target: the packet receive path (transport_rx_batch) on a
 * device over the fake backend (tests/unit/fake_net.c), as the white-box
 * tests build it (tests/unit/test_roles.c), with QPs of every type and
 * state, outstanding WQEs so that responses mean something, MRs with and
 * without remote access, and memory windows.  README.md, "Fuzzing", says
 * how to run it; tests/fuzz/make_seeds.py writes the seed corpus and
 * documents the input format (kept in step with the parser below).
 *
 * Each input gets fresh QPs, CQs, SRQs and windows (the MRs stay
 * registered; their bytes are refilled), so a run depends on its input
 * alone: QP numbers and keys are random, and the input names them by
 * index, never by value.  Timers fire only when the input says so, at a
 * time far in the future, never by the clock.
 *
 * After each input it asserts (abort, which libFuzzer reports as a crash):
 *   - no byte of an MR without remote write changed, nor any of a
 *     window's MR outside the window, nor any canary byte around any
 *     registered region (canary pages before and after each buffer, and
 *     PROT_NONE pages beyond them, which fault on a wild access);
 *   - every object is destroyed cleanly and the device's counts are back
 *     where they were. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>
#include "../unit/fake_ctx.h"
#include "../unit/fake_net.h"
#include "fuzz_input.h"
#include "core/cq_ring.h"
#include "exec/exec.h"
#include "obj/obj.h"
#include "sq/sq.h"
#include "transport/transport.h"
#include "transport/ref.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/opcode.h"

#define FILL 0xA5
#define PAGE 4096u
#define BUF_PAGES 4u
#define MR_HEAD 40u        /* an MR starts 40 bytes into its first page ... */
#define MR_TAIL 24u        /* ... and ends 24 bytes before its last one ends */
#define MR_LEN (BUF_PAGES * PAGE - MR_HEAD - MR_TAIL)
#define QKEY 0x11111111u
#define PEER_QPN 0x00ABCDu
#define PEER_SPORT 0xC0DEu
#define NQP 16
#define NKEYS 16
#define FAR_FUTURE (UINT64_MAX / 4)

static const uint8_t local_gid[16] = { [10] = 0xff, [11] = 0xff, 198, 18, 0, 1 };
static const uint8_t peer_gid[16] = { [10] = 0xff, [11] = 0xff, 198, 18, 0, 2 };

static struct uroce_dev *dev;
static struct uroce_context uctx;
static struct ibv_context *ctx;
static struct ibv_pd *pd, *pd2;
static struct ibv_ah *ah[2];  /* UD destinations: the fake peer, this device */

static void die(const char *what)
{
	fprintf(stderr, "fuzz_rx: %s\n", what);
	abort();
}

/* ------------------------------------------------------------ memory */

/* [PROT_NONE][canary page][buffer pages][canary page][PROT_NONE]; the MR
 * covers [host, host + MR_LEN) of the buffer pages, the rest is canary. */
struct region {
	uint8_t *map;      /* the first accessible (canary) page */
	uint8_t *host;     /* the MR's first byte */
	uint64_t iova;
	struct ibv_mr *mr;
	unsigned access;
	struct ibv_pd *pd;
	bool local_target; /* the harness posts receives / READ targets into it */
	bool written;      /* may change: local target with LOCAL_WRITE in pd, or remote write */
	/* bytes of the MR a window may let a peer write: [wlo, whi) */
	uint32_t wlo[2], whi[2];
};

enum { M_ALL, M_RREAD, M_NONE, M_LOCAL, M_WIN_RO, M_WIN_RW, M_OTHER_PD, NMR };
static struct region mr[NMR];
#define MAP_BYTES ((BUF_PAGES + 2) * PAGE)

static void region_up(struct region *r, unsigned access, struct ibv_pd *p, bool local_target, uint64_t iova)
{
	uint8_t *m = mmap(NULL, MAP_BYTES + 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED || mprotect(m + PAGE, MAP_BYTES, PROT_READ | PROT_WRITE))
		die("mmap");
	r->map = m + PAGE;
	r->host = r->map + PAGE + MR_HEAD;
	r->iova = iova + MR_HEAD;  /* the same offset in its page as the host address */
	r->access = access;
	r->pd = p;
	r->local_target = local_target;
	r->written = (local_target && (access & IBV_ACCESS_LOCAL_WRITE) && p == pd) ||
		     (access & IBV_ACCESS_REMOTE_WRITE);
	memset(r->map, FILL, MAP_BYTES);
	r->mr = uroce_reg_mr_iova(p, r->host, MR_LEN, r->iova, access);
	if (!r->mr)
		fprintf(stderr, "reg_mr access 0x%x: %s\n", access, strerror(errno)), die("reg_mr");
}

static uint8_t fill_page[PAGE];

/* [off, end) of the mapping as filled?  memcmp: a byte loop would be most
 * of the fuzzer's time under its comparison tracing. */
static bool filled(const struct region *r, uint32_t off, uint32_t end)
{
	while (off < end) {
		uint32_t n = end - off < PAGE ? end - off : PAGE;
		if (memcmp(r->map + off, fill_page, n))
			return false;
		off += n;
	}
	return true;
}

/* Bytes that may have changed are those of a written MR and a window's
 * writable range; everything else of the mapping is as filled. */
static void region_check(const struct region *r, int i)
{
	const uint32_t mr0 = PAGE + MR_HEAD, mr1 = mr0 + MR_LEN;
	bool ok = filled(r, 0, mr0) && filled(r, mr1, MAP_BYTES);

	if (ok && !r->written) {
		/* the window ranges, in order, are all that may differ */
		uint32_t lo0 = mr0 + r->wlo[0], hi0 = mr0 + r->whi[0], lo1 = mr0 + r->wlo[1], hi1 = mr0 + r->whi[1];
		if (r->whi[0] == 0)
			lo0 = hi0 = lo1 = hi1 = mr1;
		ok = filled(r, mr0, lo0) && filled(r, hi0, lo1) && filled(r, hi1, mr1);
	}
	if (!ok) {
		for (uint32_t off = 0; off < MAP_BYTES; off++)
			if (r->map[off] != FILL) {
				fprintf(stderr, "fuzz_rx: region %d: byte %u (MR offset %lld) is 0x%02x\n", i, off,
					(long long)off - mr0, r->map[off]);
				break;
			}
		die("a byte outside what may be written changed");
	}
}

/* ------------------------------------------------------------ objects */

enum slot_kind { K_RC, K_UC, K_UD, K_TGT, K_INI };
struct slot {
	enum slot_kind kind;
	int peer;            /* the slot it is connected to, -1: the fake peer */
	bool srq;            /* on the SRQ */
	enum ibv_qp_state final;
	enum ibv_mtu mtu;
};

/* Every type and state; 1<->2, 4<->5, 8->9 are connected to each other,
 * so that REFLECT makes real responses of real requests. */
static const struct slot slots[NQP] = {
	{ K_RC, -1, false, IBV_QPS_RTS, IBV_MTU_1024 },
	{ K_RC, 2, false, IBV_QPS_RTS, IBV_MTU_1024 },
	{ K_RC, 1, true, IBV_QPS_RTS, IBV_MTU_1024 },
	{ K_UC, -1, false, IBV_QPS_RTS, IBV_MTU_1024 },
	{ K_UC, 5, false, IBV_QPS_RTS, IBV_MTU_256 },
	{ K_UC, 4, true, IBV_QPS_RTS, IBV_MTU_256 },
	{ K_UD, -1, false, IBV_QPS_RTS, IBV_MTU_1024 },
	{ K_TGT, -1, false, IBV_QPS_RTS, IBV_MTU_1024 },
	{ K_INI, 9, false, IBV_QPS_RTS, IBV_MTU_1024 },
	{ K_TGT, 8, false, IBV_QPS_RTS, IBV_MTU_1024 },
	{ K_RC, -1, false, IBV_QPS_RTR, IBV_MTU_1024 },
	{ K_RC, -1, false, IBV_QPS_SQD, IBV_MTU_1024 },
	{ K_RC, -1, false, IBV_QPS_ERR, IBV_MTU_1024 },
	{ K_RC, -1, false, IBV_QPS_INIT, IBV_MTU_1024 },
	{ K_RC, -1, false, IBV_QPS_RESET, IBV_MTU_1024 },
	{ K_UD, -1, true, IBV_QPS_RTR, IBV_MTU_1024 },
};

#define SQ_PSN(i) (0x100u * (unsigned)(i) + 0x10)
#define RQ_PSN(i) (0x100u * (unsigned)(i) + 0x80)

static struct {
	struct ibv_cq *scq, *rcq, *xcq;
	struct ibv_srq *srq, *xsrq[2];
	uint32_t xsrqn[2];
	struct ibv_xrcd *xrcd;
	struct ibv_qp *qp[NQP];
	struct ibv_mw *mw[3];
	uint32_t key[NKEYS];
	uint64_t key_va[NKEYS];
} o;

static unsigned base_nqp, base_ncq, base_nsrq;

static int modify(struct ibv_qp *q, const struct slot *s, int i, enum ibv_qp_state to)
{
	struct ibv_qp_attr a;
	bool ini = s->kind == K_INI, tgt = s->kind == K_TGT, ud = s->kind == K_UD;

	memset(&a, 0, sizeof(a));
	a.qp_state = to;
	switch (to) {
	case IBV_QPS_INIT:
		a.port_num = 1;
		if (ud) {
			a.qkey = QKEY;
			return uroce_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
		}
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		return uroce_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	case IBV_QPS_RTR:
		if (ud)
			return uroce_modify_qp(q, &a, IBV_QP_STATE);
		a.ah_attr.is_global = 1;
		a.ah_attr.port_num = 1;
		a.ah_attr.grh.hop_limit = 64;
		memcpy(a.ah_attr.grh.dgid.raw, s->peer < 0 ? peer_gid : local_gid, 16);
		a.path_mtu = s->mtu;
		a.dest_qp_num = s->peer < 0 ? PEER_QPN : o.qp[s->peer] ? o.qp[s->peer]->qp_num : PEER_QPN;
		a.rq_psn = RQ_PSN(i);
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 12;
		return uroce_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					      IBV_QP_RQ_PSN |
					      (ini || s->kind == K_UC ? 0 : IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
	case IBV_QPS_RTS:
		a.sq_psn = SQ_PSN(i);
		if (ud)
			return uroce_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
		a.timeout = 14;
		a.retry_cnt = 3;
		a.rnr_retry = 3;
		a.max_rd_atomic = 4;
		if (s->kind == K_UC)
			return uroce_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
		return uroce_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					      (tgt ? 0 : IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
	default:
		return uroce_modify_qp(q, &a, IBV_QP_STATE);
	}
}

static enum ibv_qp_state qp_state(int i)
{
	return to_uqp(o.qp[i])->attr.qp_state;
}

/* RESET -> INIT -> RTR -> RTS as far as `to` asks. */
static void bring_to(int i, enum ibv_qp_state to)
{
	static const enum ibv_qp_state path[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
	const struct slot *s = &slots[i];

	for (unsigned k = 0; k < 3 && to != IBV_QPS_RESET; k++) {
		if (modify(o.qp[i], s, i, path[k]))
			die("modify_qp up");
		if (path[k] == to)
			return;
	}
}

static void async_drain(void)
{
	uint64_t v;
	pthread_mutex_lock(&uctx.async_lock);
	uctx.async_n = 0;
	pthread_mutex_unlock(&uctx.async_lock);
	while (read(ctx->async_fd, &v, sizeof(v)) == sizeof(v))
		;
}

static void cq_drain(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	if (cq)
		while (cq_pop(to_ucq(cq), &wc))
			;
}

static void poll_all(void)
{
	cq_drain(o.scq);
	cq_drain(o.rcq);
	cq_drain(o.xcq);
	async_drain();
}

static struct ibv_qp *qp_make(const struct slot *s)
{
	if (s->kind == K_TGT) {
		struct ibv_qp_init_attr_ex ia = { .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD,
						  .xrcd = o.xrcd };
		return uroce_create_qp_ex(ctx, &ia);
	}
	static const enum ibv_qp_type t[] = { [K_RC] = IBV_QPT_RC, [K_UC] = IBV_QPT_UC, [K_UD] = IBV_QPT_UD,
					      [K_INI] = IBV_QPT_XRC_SEND };
	struct ibv_qp_init_attr_ex ia = {
		.qp_type = t[s->kind], .send_cq = o.scq, .recv_cq = s->kind == K_INI ? NULL : o.rcq, .srq = s->srq ? o.srq : NULL,
		.cap = { .max_send_wr = 32, .max_recv_wr = s->kind == K_INI ? 0 : 32, .max_send_sge = 4,
			 .max_recv_sge = 4, .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
	};
	return uroce_create_qp_ex(ctx, &ia);
}

/* A window bound by slot 0 (type 2) or with ibv_bind_mw (type 1). */
static void window_up(int w, enum ibv_mw_type type, struct region *r, uint32_t off, uint32_t len, unsigned access)
{
	o.mw[w] = uroce_alloc_mw(pd, type);
	if (!o.mw[w])
		die("alloc_mw");
	struct ibv_mw_bind_info bi = { .mr = r->mr, .addr = r->iova + off, .length = len, .mw_access_flags = access };
	if (type == IBV_MW_TYPE_2) {
		struct ibv_send_wr wr = { .wr_id = 0xb1, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		wr.bind_mw.mw = o.mw[w];
		wr.bind_mw.rkey = ibv_inc_rkey(o.mw[w]->rkey);
		wr.bind_mw.bind_info = bi;
		if (uroce_post_send(o.qp[0], &wr, &bad))
			die("post BIND_MW");
	} else {
		struct ibv_mw_bind b = { .wr_id = 0xb2, .send_flags = IBV_SEND_SIGNALED, .bind_info = bi };
		if (uroce_bind_mw(o.qp[1], o.mw[w], &b))
			die("bind_mw");
	}
	struct ibv_wc wc;
	if (!cq_pop(to_ucq(o.scq), &wc) || wc.status != IBV_WC_SUCCESS)
		die("window bind did not complete");
}

static void objects_up(void)
{
	o.scq = uroce_create_cq(ctx, 256, NULL, NULL, 0);
	o.rcq = uroce_create_cq(ctx, 256, NULL, NULL, 0);
	o.xcq = uroce_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 32, .max_sge = 4 } };
	o.srq = uroce_create_srq(pd, &sa);
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1,
					 .oflags = O_CREAT };
	o.xrcd = uroce_open_xrcd(ctx, &xa);
	if (!o.scq || !o.rcq || !o.xcq || !o.srq || !o.xrcd)
		die("objects");
	for (int k = 0; k < 2; k++) {
		struct ibv_srq_init_attr_ex xs = {
			.attr = { .max_wr = 16, .max_sge = 2 }, .srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = o.xrcd,
			.cq = o.xcq,
			.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
				     IBV_SRQ_INIT_ATTR_CQ,
		};
		o.xsrq[k] = uroce_create_xrc_srq(ctx, &xs);
		if (!o.xsrq[k] || uroce_get_srq_num(o.xsrq[k], &o.xsrqn[k]))
			die("XRC SRQ");
	}
	for (int i = 0; i < NQP; i++)
		if (!(o.qp[i] = qp_make(&slots[i])))
			die("create_qp");
	for (int i = 0; i < NQP; i++)
		bring_to(i, slots[i].final == IBV_QPS_SQD || slots[i].final == IBV_QPS_ERR ? IBV_QPS_RTS
											     : slots[i].final);
	/* windows need an RTS QP to bind them (slot 0 type 2, slot 1 type 1) */
	window_up(0, IBV_MW_TYPE_2, &mr[M_WIN_RW], 512, 2048, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	window_up(1, IBV_MW_TYPE_2, &mr[M_WIN_RO], 256, 4096, IBV_ACCESS_REMOTE_READ);
	window_up(2, IBV_MW_TYPE_1, &mr[M_WIN_RW], 8192, 1000, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	for (int i = 0; i < NQP; i++)
		if (slots[i].final == IBV_QPS_SQD || slots[i].final == IBV_QPS_ERR)
			if (modify(o.qp[i], &slots[i], i, slots[i].final))
				die("modify_qp to SQD/ERR");
	/* keys the input names by index: each MR's rkey and lkey, the windows,
	 * and keys no object has */
	int k = 0;
	for (int m = 0; m < NMR; m++) {
		o.key[k] = mr[m].mr->rkey;
		o.key_va[k++] = mr[m].iova;
	}
	for (int w = 0; w < 3; w++) {
		o.key[k] = o.mw[w]->rkey;
		o.key_va[k++] = w == 0 ? mr[M_WIN_RW].iova + 512 : w == 1 ? mr[M_WIN_RO].iova + 256
									     : mr[M_WIN_RW].iova + 8192;
	}
	o.key[k] = mr[M_ALL].mr->lkey;
	o.key_va[k++] = mr[M_ALL].iova;
	o.key[k] = o.mw[0]->rkey - 1;  /* the window's key before its bind */
	o.key_va[k++] = mr[M_WIN_RW].iova + 512;
	o.key[k] = mr[M_ALL].mr->rkey ^ 0x100;  /* another slot */
	o.key_va[k++] = mr[M_ALL].iova;
	o.key[k] = 0;
	o.key_va[k++] = 0;
	o.key[k] = 0xFFFFFFFFu;
	o.key_va[k++] = mr[M_ALL].iova;
	o.key[k] = mr[M_NONE].mr->lkey;
	o.key_va[k++] = mr[M_NONE].iova;
	if (k != NKEYS)
		die("key table");
	poll_all();
	fake_sent_clear();
}

static void objects_down(void)
{
	poll_all();
	for (int w = 0; w < 3; w++)
		if (uroce_dealloc_mw(o.mw[w]))
			die("dealloc_mw");
	for (int i = 0; i < NQP; i++)
		if (uroce_destroy_qp(o.qp[i]))
			die("destroy_qp");
	for (int k = 0; k < 2; k++)
		if (uroce_destroy_srq(o.xsrq[k]))
			die("destroy XRC SRQ");
	if (uroce_destroy_srq(o.srq) || uroce_close_xrcd(o.xrcd))
		die("destroy SRQ / close XRCD");
	if (uroce_destroy_cq(o.scq) || uroce_destroy_cq(o.rcq) || uroce_destroy_cq(o.xcq))
		die("destroy_cq");
	memset(&o, 0, sizeof(o));
	async_drain();
	fake_sent_clear();
	if (dev->nqp != base_nqp || dev->ncq != base_ncq || dev->nsrq != base_nsrq)
		die("objects left behind");
}

/* ------------------------------------------------------------ input */

/* Packet flags (make_seeds.py: F_*) */
#define F_RAW 0x01        /* as given: no fix-ups, no ICRC added (the input's last 4 bytes are it) */
#define F_QPN_RAW 0x02    /* keep the BTH's destination QP */
#define F_PSN_REL 0x04    /* PSN = the slot's expected one + (int8) PSN byte 11 */
#define F_KEY 0x08        /* RETH/AtomicETH key and address from the key table */
#define F_XRC_SRQ 0x10    /* XRCETH names XRC SRQ (byte 12 & 1), or keeps its raw value */
#define F_QKEY 0x20       /* DETH Q_Key = the UD QPs' */
#define F_WRONG_PEER 0x40 /* source GID not the QP's peer */
#define F_BAD_ICRC 0x80   /* ICRC flipped */

/* Each bundle's packets live in buffers of exactly their length, so that
 * ASan sees a read past a packet's end. */
static uint8_t *pbuf[UROCE_RX_BATCH];
static struct uroce_rxpkt rx[UROCE_RX_BATCH];

static void run_bundle(int n)
{
	pthread_mutex_lock(&dev->rx_lock);
	transport_rx_batch(dev, rx, n);
	pthread_mutex_unlock(&dev->rx_lock);
	for (int i = 0; i < n; i++) {
		free(pbuf[i]);
		pbuf[i] = NULL;
	}
}

static void add_icrc(uint8_t *b, uint32_t len, const uint8_t *sgid, const uint8_t *dgid, uint16_t sport,
		     uint16_t ip_id, bool bad)
{
	struct icrc_iphdr ih = { .sgid = sgid, .dgid = dgid, .sport = sport, .dport = ROCE_UDP_PORT,
				 .udp_len = (uint16_t)(len + 8), .ip_id = ip_id, .ip_frag = 0x4000 };
	struct iovec v = { b, len - ICRC_LEN };
	icrc_store(b + len - ICRC_LEN, icrc_packet(&ih, &v, 1) ^ (bad ? 1u : 0));
}

/* Inputs of odd length run as between same-host peers (LLVMFuzzerTestOneInput). */
static bool refs_input;
/* What references in crafted packets name: bytes of this process. */
static uint8_t ref_source[65536];

/* On an input of odd length, F_QKEY on a packet without a DETH stands for a
 * ring's flag: a payload of the size of a reference (ref.h) becomes one,
 * naming this process and bytes of ref_source at offsets and lengths from
 * the input (a length may be 0 or run past: refused), and is received as
 * NET_PKT_REF; a READ request is received as NET_PKT_REF_OK, an ACK or NAK
 * as NET_PKT_REF_NAK. */
static uint8_t ref_flags(uint8_t *b, uint32_t len, uint8_t fl)
{
	if (!refs_input || !(fl & F_QKEY) || len < BTH_LEN)
		return 0;
	const struct uroce_opinfo *oi = opinfo(b[0]);
	if (oi->off_deth)
		return 0;
	if ((oi->mask & OPF_READ) && (oi->mask & OPF_REQ))
		return NET_PKT_REF_OK;
	if (oi->mask & OPF_ACK)
		return NET_PKT_REF_NAK;
	uint32_t pay = len - oi->hdr_len - ICRC_LEN;
	if (!(oi->mask & OPF_PAYLOAD) || len < (uint32_t)oi->hdr_len + ICRC_LEN || pay < REF_BYTES(1) ||
	    (pay - REF_HDR) % REF_SEG || (pay - REF_HDR) / REF_SEG > REF_MAX_SEGS)
		return 0;
	uint8_t *r = b + oi->hdr_len;
	uint32_t pid = (uint32_t)getpid();
	memcpy(r, &pid, 4);
	for (uint32_t i = 0; i < (pay - REF_HDR) / REF_SEG; i++) {
		uint8_t *sg = r + REF_BYTES(i);
		uint64_t at = (uint64_t)(uintptr_t)(ref_source + ld16(sg) % sizeof(ref_source));
		memcpy(sg, &at, 8);
	}
	b[1] &= (uint8_t)~0x30;  /* no pad: a reference is whole words */
	return NET_PKT_REF;
}

static void op_bundle(struct in *in)
{
	int n = 1 + u8(in) % 16;

	for (int i = 0; i < n; i++) {
		uint8_t fl = u8(in), sel = u8(in);
		uint32_t len = u16(in) % (FAKE_PKT_BYTES - ICRC_LEN);
		if (len > in->n)
			len = (uint32_t)in->n;
		uint32_t blen = fl & F_RAW ? len : len + ICRC_LEN;
		uint8_t *b = malloc(blen ? blen : 1);
		if (!b)
			die("malloc");
		memcpy(b, in->p, len);
		in->p += len;
		in->n -= len;
		const uint8_t *sgid = peer_gid;
		int s = sel % NQP;
		if (!(fl & F_RAW) && len >= BTH_LEN) {
			const struct uroce_opinfo *oi = opinfo(b[0]);
			struct uroce_qp *q = to_uqp(o.qp[s]);
			if (!(fl & F_QPN_RAW))
				st32(b + 4, (ld32(b + 4) & 0xFF000000u) | q->qpn);
			if (fl & F_PSN_REL) {
				uint32_t base = oi->mask & OPF_RESP ? q->comp.una_psn : q->resp.epsn;
				st32(b + 8, (ld32(b + 8) & 0xFF000000u) | psn_add(base, (uint32_t)(int32_t)(int8_t)b[11]));
			}
			unsigned kk = (unsigned)sel / NQP;  /* 0..15 */
			if ((fl & F_KEY) && oi->off_reth && oi->off_reth + 16u <= len)
				reth_set(b + oi->off_reth, o.key_va[kk] + (uint64_t)(int64_t)(int16_t)ld16(b + oi->off_reth + 6),
					 o.key[kk], reth_len(b + oi->off_reth));
			if ((fl & F_KEY) && oi->off_atmeth && oi->off_atmeth + 28u <= len)
				st64(b + oi->off_atmeth, o.key_va[kk] + ((uint64_t)(int64_t)(int16_t)ld16(b + oi->off_atmeth + 6)));
			if ((fl & F_KEY) && oi->off_atmeth && oi->off_atmeth + 28u <= len)
				st32(b + oi->off_atmeth + 8, o.key[kk]);
			if ((fl & F_KEY) && oi->off_ieth && oi->off_ieth + 4u <= len)
				st32(b + oi->off_ieth, o.key[kk]);
			if ((fl & F_XRC_SRQ) && oi->off_xrceth && oi->off_xrceth + 4u <= len)
				xrceth_set(b + oi->off_xrceth, o.xsrqn[b[oi->off_xrceth] & 1]);
			if ((fl & F_QKEY) && oi->off_deth && oi->off_deth + 8u <= len)
				st32(b + oi->off_deth, QKEY);
			sgid = slots[s].peer >= 0 ? local_gid : peer_gid;
		}
		if (fl & F_WRONG_PEER)
			sgid = sgid == peer_gid ? local_gid : peer_gid;
		uint8_t flags = fl & F_RAW ? 0 : ref_flags(b, blen, fl);
		if (!(fl & F_RAW))
			add_icrc(b, blen, sgid, local_gid, PEER_SPORT, (uint16_t)i, fl & F_BAD_ICRC);
		pbuf[i] = b;
		memset(&rx[i], 0, sizeof(rx[i]));
		rx[i].flags = flags;
		rx[i].buf = b;
		rx[i].len = blen;
		memcpy(rx[i].sgid, sgid, 16);
		memcpy(rx[i].dgid, local_gid, 16);
		rx[i].sport = PEER_SPORT;
		rx[i].ttl = 64;
		rx[i].ip_id_hint = (uint16_t)i;  /* its place in a GRO bundle */
	}
	run_bundle(n);
}

/* What the QPs sent, fed back as one bundle (loopback pairs answer each
 * other); one byte of one packet may be changed on the way (ICRC made
 * again unless asked not to). */
static void op_reflect(struct in *in)
{
	uint8_t which = u8(in), x = u8(in), fl = u8(in);
	uint16_t pos = u16(in);
	unsigned n = fake_sent_count();

	if (n > UROCE_RX_BATCH)
		n = UROCE_RX_BATCH;
	for (unsigned i = 0; i < n; i++) {
		const struct fake_pkt *p = fake_sent(i);
		uint8_t *b = malloc(p->len ? p->len : 1);
		if (!b)
			die("malloc");
		memcpy(b, p->buf, p->len);
		if (i == which % (n ? n : 1) && x && p->len > ICRC_LEN) {
			b[pos % (p->len - ICRC_LEN)] ^= x;
			if (!(fl & 1))
				add_icrc(b, p->len, p->sgid, p->dgid, p->sport, p->ip_id, false);
		}
		pbuf[i] = b;
		memset(&rx[i], 0, sizeof(rx[i]));
		rx[i].buf = b;
		rx[i].len = p->len;
		memcpy(rx[i].sgid, p->sgid, 16);
		memcpy(rx[i].dgid, p->dgid, 16);
		rx[i].sport = p->sport;
		rx[i].ttl = 64;
		rx[i].ip_id_hint = p->ip_id;
		rx[i].flags = p->flags;
	}
	fake_sent_clear();
	if (n)
		run_bundle((int)n);
}

static const struct {
	enum ibv_wr_opcode op;
	bool local_write;   /* its local SGE is written (READ, atomics) */
} wr_ops[] = {
	{ IBV_WR_SEND, false },          { IBV_WR_SEND_WITH_IMM, false }, { IBV_WR_RDMA_WRITE, false },
	{ IBV_WR_RDMA_WRITE_WITH_IMM, false }, { IBV_WR_RDMA_READ, true }, { IBV_WR_ATOMIC_CMP_AND_SWP, true },
	{ IBV_WR_ATOMIC_FETCH_AND_ADD, true }, { IBV_WR_SEND_WITH_INV, false }, { IBV_WR_ATOMIC_WRITE, false },
	{ IBV_WR_LOCAL_INV, false },
};
#define NWR_OPS (sizeof(wr_ops) / sizeof(wr_ops[0]))

/* Regions a WQE may name: any for what is only read; only local targets
 * (and never a window's MR) for what is written. */
static struct region *pick_region(uint8_t sel, bool write)
{
	static const int targets[] = { M_ALL, M_LOCAL, M_NONE, M_OTHER_PD, M_RREAD };
	return write ? &mr[targets[sel % 5]] : &mr[sel % NMR];
}

static void op_post_send(struct in *in)
{
	int s = u8(in) % NQP;
	uint8_t opsel = u8(in), msel = u8(in), ksel = u8(in), fl = u8(in);
	uint16_t len = u16(in), off = u16(in);
	const bool wr_write = wr_ops[opsel % NWR_OPS].local_write;
	struct region *r = pick_region(msel, wr_write);
	struct ibv_qp *q = o.qp[s];

	if (slots[s].kind == K_TGT)
		return;  /* no send queue */
	enum ibv_wr_opcode op = wr_ops[opsel % NWR_OPS].op;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_WRITE) {
		len = 8;
		off &= ~7u;
	}
	struct ibv_sge sge = { r->iova + off % MR_LEN, len % (MR_LEN + 64), r->mr->lkey };
	if (sge.addr + sge.length > r->iova + MR_LEN && wr_write)
		sge.length = (uint32_t)(r->iova + MR_LEN - sge.addr);  /* out-of-range local writes are refused by
									 * the post already; keep it in */
	struct ibv_send_wr wr = { .wr_id = 0x5000 + s, .sg_list = &sge, .num_sge = len ? 1 : 0, .opcode = op,
				  .send_flags = (fl & 1 ? IBV_SEND_SIGNALED : 0) | (fl & 2 ? IBV_SEND_INLINE : 0) |
						(fl & 4 ? IBV_SEND_FENCE : 0) | (fl & 8 ? IBV_SEND_SOLICITED : 0) },
			   *bad;
	if (fl & 2 && (wr_write || sge.length > 64))
		wr.send_flags &= ~(unsigned)IBV_SEND_INLINE;
	/* inline data is read at post time from the application's pointer,
	 * not through the MR (ibv_post_send(3)) */
	if (wr.send_flags & IBV_SEND_INLINE)
		sge.addr = (uintptr_t)r->host + (sge.addr - r->iova);
	unsigned kk = ksel % NKEYS;
	wr.wr.rdma.remote_addr = o.key_va[kk] + (uint64_t)(int64_t)(int16_t)u16(in);
	wr.wr.rdma.rkey = o.key[kk];
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = wr.wr.rdma.remote_addr & ~7ull;
		wr.wr.atomic.rkey = o.key[kk];
		wr.wr.atomic.compare_add = fl;
		wr.wr.atomic.swap = 0x1234;
	}
	if (op == IBV_WR_SEND_WITH_INV || op == IBV_WR_LOCAL_INV)
		wr.invalidate_rkey = o.key[kk];
	if (slots[s].kind == K_UD) {
		wr.wr.ud.ah = ah[!!(fl & 16)];
		wr.wr.ud.remote_qpn = fl & 16 ? o.qp[6]->qp_num : PEER_QPN;
		wr.wr.ud.remote_qkey = QKEY;
	}
	if (slots[s].kind == K_INI)
		wr.qp_type.xrc.remote_srqn = o.xsrqn[fl >> 7];
	(void)uroce_post_send(q, &wr, &bad);  /* refusals are fine: the post's errno */
}

static void op_post_recv(struct in *in)
{
	uint8_t t = u8(in), msel = u8(in);
	uint16_t len = u16(in), off = u16(in);
	struct region *r = pick_region(msel, true);
	struct ibv_sge sge = { r->iova + off % MR_LEN, len % MR_LEN, r->mr->lkey };
	if (sge.addr + sge.length > r->iova + MR_LEN)
		sge.length = (uint32_t)(r->iova + MR_LEN - sge.addr);
	struct ibv_recv_wr wr = { .wr_id = 0x7000 + t, .sg_list = &sge, .num_sge = 1 }, *bad;

	switch (t % 4) {
	case 0: {
		int s = (t >> 2) % NQP;
		if (slots[s].kind != K_TGT && slots[s].kind != K_INI && !slots[s].srq)
			(void)uroce_post_recv(o.qp[s], &wr, &bad);
		break;
	}
	case 1:
		(void)uroce_post_srq_recv(o.srq, &wr, &bad);
		break;
	default:
		(void)uroce_post_srq_recv(o.xsrq[t & 1], &wr, &bad);
		break;
	}
}

static void op_modify(struct in *in)
{
	static const enum ibv_qp_state to[] = { IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
						IBV_QPS_SQD, IBV_QPS_ERR };
	int s = u8(in) % NQP;
	enum ibv_qp_state t = to[u8(in) % 6];

	if (t == IBV_QPS_RESET || t == IBV_QPS_ERR || t == IBV_QPS_SQD) {
		(void)modify(o.qp[s], &slots[s], s, t);
		return;
	}
	/* up from wherever it is: a refused step is the verbs' answer, fine */
	if (qp_state(s) == IBV_QPS_ERR)
		(void)modify(o.qp[s], &slots[s], s, IBV_QPS_RESET);
	if (qp_state(s) == IBV_QPS_SQD)
		(void)modify(o.qp[s], &slots[s], s, IBV_QPS_RTS);
	for (enum ibv_qp_state st = IBV_QPS_INIT; st <= t; st++)
		if (qp_state(s) < st)
			(void)modify(o.qp[s], &slots[s], s, st);
}

static void op_timers(void)
{
	for (int i = 0; i < NQP; i++) {
		struct uroce_qp *qp = to_uqp(o.qp[i]);
		pthread_mutex_lock(&dev->rx_lock);
		pthread_mutex_lock(&qp->lock);
		retry_timer_fire(qp, FAR_FUTURE);
		pthread_mutex_unlock(&qp->lock);
		pthread_mutex_unlock(&dev->rx_lock);
	}
	pthread_mutex_lock(&dev->rx_lock);
	ack_flush_deferred(dev, FAR_FUTURE);
	pthread_mutex_unlock(&dev->rx_lock);
}

/* ------------------------------------------------------------ entry */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fake_net_setenv();  /* as tests/unit/test_roles.c */
	/* messages here are small: references from 2 KiB on */
	setenv("UROCE_SHM_DIRECT_MIN", "2048", 1);
	fake_sent_overflow_drops(true);
	dev = uroce_dev_open(&fake_net_ops, false);
	if (!dev)
		die("uroce_dev_open");
	ctx = &uctx.vctx.context;
	if (fake_context_init(&uctx, dev))
		die("eventfd");
	pd = uroce_alloc_pd(ctx);
	pd2 = uroce_alloc_pd(ctx);
	if (!pd || !pd2)
		die("context");
	for (int k = 0; k < 2; k++) {
		struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .grh = { .hop_limit = 64, .sgid_index = 0 } };
		memcpy(aa.grh.dgid.raw, k ? local_gid : peer_gid, 16);
		if (!(ah[k] = ibv_create_ah(pd, &aa)))
			die("create_ah");
	}
	const unsigned rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	region_up(&mr[M_ALL], rw | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC, pd, true, 0x7a0000000000ull);
	region_up(&mr[M_RREAD], IBV_ACCESS_REMOTE_READ, pd, true, 0x7a0001000000ull);
	region_up(&mr[M_NONE], 0, pd, true, 0x7a0002000000ull);
	region_up(&mr[M_LOCAL], IBV_ACCESS_LOCAL_WRITE, pd, true, 0x7a0003000000ull);
	region_up(&mr[M_WIN_RO], IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, pd, false, 0x7a0004000000ull);
	region_up(&mr[M_WIN_RW], IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND, pd, false, 0x7a0005000000ull);
	region_up(&mr[M_OTHER_PD], rw | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC, pd2, true,
		  0x7a0006000000ull);
	/* the windows' writable ranges (window_up's offsets) */
	mr[M_WIN_RW].wlo[0] = 512, mr[M_WIN_RW].whi[0] = 512 + 2048;
	mr[M_WIN_RW].wlo[1] = 8192, mr[M_WIN_RW].whi[1] = 8192 + 1000;
	memset(fill_page, FILL, sizeof(fill_page));
	for (size_t i = 0; i < sizeof(ref_source); i++)
		ref_source[i] = (uint8_t)(i * 13 + 5);
	base_nqp = dev->nqp;
	base_ncq = dev->ncq;
	base_nsrq = dev->nsrq;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };

	for (int m = 0; m < NMR; m++)
		memset(mr[m].map, FILL, MAP_BYTES);
	/* inputs of odd length run as between same-host peers: large SENDs,
	 * WRITEs and READs go by reference to this process's memory
	 * (transport/ref.h), and REFLECT feeds them back as such */
	fake_net_refs(size & 1);
	refs_input = size & 1;
	objects_up();
	for (int ops = 0; in.n && ops < 64; ops++) {
		switch (u8(&in) % 8) {
		case 0:
		case 1:
			op_bundle(&in);
			break;
		case 2:
			op_post_send(&in);
			break;
		case 3:
			op_post_recv(&in);
			break;
		case 4:
			op_reflect(&in);
			break;
		case 5:
			op_modify(&in);
			break;
		case 6:
			op_timers();
			break;
		default:
			poll_all();
			break;
		}
		/* the fake records at most FAKE_SENT_MAX packets and loses
		 * the rest, as a wire would; a REFLECT takes what is there */
	}
	objects_down();
	for (int m = 0; m < NMR; m++)
		region_check(&mr[m], m);
	return 0;
}
