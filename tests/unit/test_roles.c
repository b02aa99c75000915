/* The transport roles driven alone (issue 11, item 4): a device on the fake
 * backend (fake_net.h) without an engine thread, objects made with the
 * provider's own entry points, packets crafted with wire/hdr.h handed to
 * transport_rx_batch, and what the roles send read back from the fake.
 * Assertions are on what can be observed -- memory, completions, the
 * packets on the wire -- never on the QP's internal state, with the rule of
 * shared/docs/roce-wire.md each one checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fake_net.h"
#include "fake_ctx.h"
#include "api/ops.h"
#include "core/cq_ring.h"
#include "exec/exec.h"
#include "obj/obj.h"
#include <errno.h>
#include "sq/sq.h"
#include "transport/transport.h"
#include "transport/ref.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/opcode.h"

static int failures, checks, test_failures;

#define CHECK(cond, ...) do { \
	checks++; \
	if (!(cond)) { \
		failures++; \
		test_failures++; \
		printf("  not ok %s:%d: ", __FILE__, __LINE__); \
		printf(__VA_ARGS__); \
		printf("\n"); \
	} \
} while (0)

#define PEER_QPN 0x00ABCDu
#define PEER_SPORT 0xC0DEu
#define SQ_PSN 0x000100u
#define RQ_PSN 0x000200u
#define MIN_RNR_TIMER 12

/* GID 0 of the device (UROCE_ADDR) and the peer, IPv4-mapped (§9) */
static const uint8_t local_gid[16] = { [10] = 0xff, [11] = 0xff, 198, 18, 0, 1 };
static const uint8_t peer_gid[16] = { [10] = 0xff, [11] = 0xff, 198, 18, 0, 2 };

static struct uroce_dev *dev;
static struct uroce_context uctx;
static struct ibv_context *ctx;
static struct ibv_pd *pd;

/* ------------------------------------------------------------ objects */

struct rig {
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	uint32_t qpn;
};

struct conn {
	enum ibv_mtu mtu;
	const uint8_t *dgid;
	uint32_t dqpn, sq_psn, rq_psn;
	uint8_t retry_cnt;
};

static const struct conn conn_default = {
	.mtu = IBV_MTU_1024, .dgid = peer_gid, .dqpn = PEER_QPN, .sq_psn = SQ_PSN, .rq_psn = RQ_PSN, .retry_cnt = 7,
};

static bool rig_create(struct rig *r)
{
	memset(r, 0, sizeof(*r));
	r->scq = uroce_create_cq(ctx, 64, NULL, NULL, 0);
	r->rcq = uroce_create_cq(ctx, 64, NULL, NULL, 0);
	if (!r->scq || !r->rcq)
		return false;
	struct ibv_qp_init_attr ia = {
		.send_cq = r->scq, .recv_cq = r->rcq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 4, .max_recv_sge = 4 },
	};
	r->qp = uroce_create_qp(pd, &ia);
	if (!r->qp)
		return false;
	r->qpn = r->qp->qp_num;
	return true;
}

/* RESET -> INIT -> RTR -> RTS with the masks IBA 11.2.5 asks for RC. */
static bool rig_connect(struct rig *r, const struct conn *c)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	if (uroce_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return false;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 64;
	memcpy(a.ah_attr.grh.dgid.raw, c->dgid, 16);
	a.path_mtu = c->mtu;
	a.dest_qp_num = c->dqpn;
	a.rq_psn = c->rq_psn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = MIN_RNR_TIMER;
	/* an XRC INI QP takes no responder attributes (IBA 11.2.5, ib_core) */
	bool ini = r->qp->qp_type == IBV_QPT_XRC_SEND, tgt = r->qp->qp_type == IBV_QPT_XRC_RECV;
	if (uroce_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN | (ini ? 0 : IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		return false;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = c->sq_psn;
	a.timeout = 14;
	a.retry_cnt = c->retry_cnt;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	/* an XRC TGT QP no requester ones */
	if (uroce_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
			    (tgt ? 0 : IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)))
		return false;
	fake_sent_clear();
	return true;
}

static bool rig_up_with(struct rig *r, const struct conn *c)
{
	bool ok = rig_create(r) && rig_connect(r, c);
	CHECK(ok, "QP setup failed");
	return ok;
}

static bool rig_up(struct rig *r)
{
	return rig_up_with(r, &conn_default);
}

static void rig_down(struct rig *r)
{
	if (r->qp)
		CHECK(uroce_destroy_qp(r->qp) == 0, "destroy QP");
	if (r->scq)
		CHECK(uroce_destroy_cq(r->scq) == 0, "destroy send CQ");
	if (r->rcq)
		CHECK(uroce_destroy_cq(r->rcq) == 0, "destroy recv CQ");
}

static enum ibv_qp_state qp_state(struct ibv_qp *q)
{
	struct ibv_qp_attr a;
	uroce_query_qp(q, &a, IBV_QP_STATE, NULL);
	return a.qp_state;
}

/* A buffer of `alloc` bytes filled with 0xEE, its first `reg` bytes
 * registered at an iova that is not its host address: SGEs and RETHs
 * name iova addresses, and the transport must translate them. */
struct mem {
	uint8_t *host;
	size_t alloc;
	uint64_t iova;
	struct ibv_mr *mr;
};

static bool mem_up(struct mem *m, size_t alloc, size_t reg, unsigned access)
{
	static uint64_t next_iova = 0x7a0000000000ull;

	memset(m, 0, sizeof(*m));
	m->alloc = (alloc + 4095) & ~(size_t)4095;
	m->host = aligned_alloc(4096, m->alloc);
	if (!m->host)
		return false;
	memset(m->host, 0xEE, m->alloc);
	m->iova = next_iova;
	next_iova += 1ull << 24;
	m->mr = uroce_reg_mr_iova(pd, m->host, reg, m->iova, access);
	CHECK(m->mr, "register MR");
	return m->mr != NULL;
}

/* Also for a mem never set up (zeroed). */
static void mem_down(struct mem *m)
{
	if (m->mr)
		CHECK(uroce_dereg_mr(m->mr) == 0, "deregister MR");
	free(m->host);
	memset(m, 0, sizeof(*m));
}

/* Are bytes [off, off+n) of m all 0xEE (never written)? */
static bool untouched(const struct mem *m, size_t off, size_t n)
{
	for (size_t i = off; i < off + n; i++)
		if (m->host[i] != 0xEE)
			return false;
	return true;
}

static void pattern(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 7 + seed * 31 + (i >> 8));
}

/* ------------------------------------------------------------ packets in */

static struct uroce_rxpkt rx_pkts[UROCE_RX_BATCH];

/* What exec's receive loop does: one receive call, its packets as one
 * batch, under rx_lock (exec/progress.c). */
static int deliver(void)
{
	pthread_mutex_lock(&dev->rx_lock);
	int n = net_recv(dev->net, rx_pkts, UROCE_RX_BATCH);
	if (n > 0) {
		transport_rx_batch(dev, rx_pkts, n);
		net_recv_done(dev->net, rx_pkts, n);
	}
	pthread_mutex_unlock(&dev->rx_lock);
	return n;
}

/* A packet from the peer: the BTH here, extension headers at their
 * opinfo offsets (set by the caller), then pkt_queue. */
struct pkt {
	uint8_t b[FAKE_PKT_BYTES];
	uint8_t op;
};

static uint8_t *pkt_begin(struct pkt *p, uint8_t op, uint32_t dqpn, bool ackreq, uint32_t psn)
{
	memset(p->b, 0, 64);
	p->op = op;
	bth_set(p->b, op, 0, 0, dqpn, ackreq, psn);
	return p->b;
}

/* Payload, pad (§7) and an ICRC as the peer's IP layer would carry it:
 * IPv4 ID 0, DF, UDP 4791 (§4; recv.c icrc_ok). */
static void pkt_queue_ex(struct pkt *p, const void *payload, uint32_t n, bool corrupt)
{
	uint32_t hl = opinfo(p->op)->hdr_len;
	unsigned pad = pad_for(n);
	uint32_t len = hl + n + pad + ICRC_LEN;

	if (n)
		memcpy(p->b + hl, payload, n);
	memset(p->b + hl + n, 0, pad);
	p->b[1] = (uint8_t)((p->b[1] & ~0x30) | pad << 4);
	struct icrc_iphdr ih = {
		.sgid = peer_gid, .dgid = local_gid, .sport = PEER_SPORT, .dport = ROCE_UDP_PORT,
		.udp_len = (uint16_t)(len + 8), .ip_id = 0, .ip_frag = 0x4000,
	};
	struct iovec v = { p->b, len - ICRC_LEN };
	icrc_store(p->b + len - ICRC_LEN, icrc_packet(&ih, &v, 1) ^ (corrupt ? 1u : 0));
	fake_rx_queue(p->b, len, peer_gid, local_gid, PEER_SPORT);
}

static void pkt_queue(struct pkt *p, const void *payload, uint32_t n)
{
	pkt_queue_ex(p, payload, n, false);
}

static void queue_write(uint8_t op, uint32_t dqpn, uint32_t psn, bool ackreq, uint64_t va, uint32_t rkey,
			uint32_t dma_len, const void *data, uint32_t n)
{
	struct pkt p;
	uint8_t *h = pkt_begin(&p, op, dqpn, ackreq, psn);
	if (opinfo(op)->off_reth)
		reth_set(h + opinfo(op)->off_reth, va, rkey, dma_len);
	pkt_queue(&p, data, n);
}

static void queue_send(uint8_t op, uint32_t dqpn, uint32_t psn, bool ackreq, const void *data, uint32_t n)
{
	struct pkt p;
	pkt_begin(&p, op, dqpn, ackreq, psn);
	pkt_queue(&p, data, n);
}

static void queue_read_req(uint32_t dqpn, uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len)
{
	struct pkt p;
	uint8_t *h = pkt_begin(&p, OP_RC_READ_REQUEST, dqpn, true, psn);
	reth_set(h + BTH_LEN, va, rkey, len);
	pkt_queue(&p, NULL, 0);
}

/* An ACK, NAK or READ response (AETH where the opcode has one, §5). */
static void queue_resp(uint8_t op, uint32_t dqpn, uint32_t psn, uint8_t syndrome, uint32_t msn,
		       const void *data, uint32_t n)
{
	struct pkt p;
	uint8_t *h = pkt_begin(&p, op, dqpn, false, psn);
	if (opinfo(op)->off_aeth)
		aeth_set(h + opinfo(op)->off_aeth, syndrome, msn);
	pkt_queue(&p, data, n);
}

/* ------------------------------------------------------------ packets out */

static const uint8_t *pkt_payload(const struct fake_pkt *p) { return p->buf + opinfo(p->buf[0])->hdr_len; }

static uint32_t pkt_paylen(const struct fake_pkt *p)
{
	uint32_t fixed = opinfo(p->buf[0])->hdr_len + bth_pad(p->buf) + ICRC_LEN;
	return p->len >= fixed ? p->len - fixed : UINT32_MAX;
}

/* The ICRC over the packet as the kernel would put it on the wire: the
 * IPv4 ID of its GSO place (§4.2), DF, UDP 4791. */
static bool pkt_icrc_ok(const struct fake_pkt *p)
{
	if (p->len < BTH_LEN + ICRC_LEN)
		return false;
	struct icrc_iphdr ih = {
		.sgid = p->sgid, .dgid = p->dgid, .sport = p->sport, .dport = ROCE_UDP_PORT,
		.udp_len = (uint16_t)(p->len + 8), .ip_id = p->ip_id, .ip_frag = 0x4000,
	};
	struct iovec v = { (void *)p->buf, p->len - ICRC_LEN };
	return icrc_packet(&ih, &v, 1) == icrc_load(p->buf + p->len - ICRC_LEN);
}

/* Packet from a default rig to the peer: its addresses, destination QP,
 * opcode and PSN, a well-formed length and a valid ICRC. */
static bool check_out(const struct fake_pkt *p, uint8_t op, uint32_t psn, const char *what)
{
	CHECK(p, "%s: not sent", what);
	if (!p)
		return false;
	CHECK(bth_opcode(p->buf) == op, "%s: opcode 0x%02x, expected 0x%02x (%s)", what, bth_opcode(p->buf), op,
	      opinfo(op)->name);
	CHECK(bth_psn(p->buf) == psn, "%s: PSN 0x%06x, expected 0x%06x", what, bth_psn(p->buf), psn);
	CHECK(bth_qpn(p->buf) == PEER_QPN, "%s: destination QP 0x%x", what, bth_qpn(p->buf));
	CHECK(!memcmp(p->sgid, local_gid, 16) && !memcmp(p->dgid, peer_gid, 16), "%s: addresses", what);
	CHECK(pkt_paylen(p) != UINT32_MAX, "%s: %u bytes, shorter than its headers", what, p->len);
	CHECK(pkt_icrc_ok(p), "%s: bad ICRC", what);
	return bth_opcode(p->buf) == op;
}

/* An ACKNOWLEDGE (or NAK) of psn with this syndrome and MSN (§5, §5.4). */
static void check_aeth(const struct fake_pkt *p, uint32_t psn, uint8_t syndrome, uint32_t msn, const char *what)
{
	if (!check_out(p, OP_RC_ACK, psn, what))
		return;
	const uint8_t *ae = p->buf + BTH_LEN;
	CHECK(aeth_syndrome(ae) == syndrome, "%s: syndrome 0x%02x, expected 0x%02x", what, aeth_syndrome(ae), syndrome);
	CHECK(aeth_msn(ae) == msn, "%s: MSN %u, expected %u", what, aeth_msn(ae), msn);
	CHECK(pkt_paylen(p) == 0, "%s: carries %u payload bytes", what, pkt_paylen(p));
	CHECK(!bth_ackreq(p->buf), "%s: AckReq on a response", what);
}

static void check_nsent(unsigned n, const char *what)
{
	CHECK(fake_sent_count() == n, "%s: %u packets sent, expected %u", what, fake_sent_count(), n);
}

/* ------------------------------------------------------------ completions */

static int cq_take(struct ibv_cq *cq, struct ibv_wc *wc, int max)
{
	int n = 0;
	while (n < max && cq_pop(to_ucq(cq), &wc[n]))
		n++;
	return n;
}

static void check_wc(const struct ibv_wc *wc, uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode op,
		     uint32_t qpn, const char *what)
{
	CHECK(wc->wr_id == wr_id, "%s: wr_id 0x%llx, expected 0x%llx", what, (unsigned long long)wc->wr_id,
	      (unsigned long long)wr_id);
	CHECK(wc->status == st, "%s: status %d, expected %d", what, wc->status, st);
	/* the opcode of an error completion is undefined (IBA 11.4.2.1) */
	if (st == IBV_WC_SUCCESS)
		CHECK(wc->opcode == op, "%s: opcode %d, expected %d", what, wc->opcode, op);
	CHECK(wc->qp_num == qpn, "%s: qp_num 0x%x", what, wc->qp_num);
}

/* The next async event of the context, if any (ibv_get_async_event). */
static bool async_take(struct ibv_async_event *ev)
{
	uint64_t v;
	bool got = false;

	pthread_mutex_lock(&uctx.async_lock);
	if (uctx.async_n) {
		*ev = uctx.async_q[0];
		memmove(uctx.async_q, uctx.async_q + 1, --uctx.async_n * sizeof(*ev));
		got = true;
	}
	pthread_mutex_unlock(&uctx.async_lock);
	if (got)
		CHECK(read(ctx->async_fd, &v, sizeof(v)) == sizeof(v), "async_fd not readable with an event queued");
	return got;
}

static void async_drain(void)
{
	struct ibv_async_event ev;
	while (async_take(&ev))
		;
}

/* ------------------------------------------------------------ posting */

static int post_send(struct rig *r, uint64_t wr_id, enum ibv_wr_opcode op, struct ibv_sge *sge, int nsge,
		     uint64_t raddr, uint32_t rkey)
{
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = sge, .num_sge = nsge, .opcode = op, .send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	int rc = uroce_post_send(r->qp, &wr, &bad);
	CHECK(rc == 0, "post_send: %d", rc);
	return rc;
}

static int post_recv(struct rig *r, uint64_t wr_id, struct mem *m, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { m->iova + off, len, m->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	int rc = uroce_post_recv(r->qp, &wr, &bad);
	CHECK(rc == 0, "post_recv: %d", rc);
	return rc;
}

/* The QP's timers fire at `now` (exec/progress.c run_timers: rx_lock,
 * then the QP's lock). */
static void fire_timers(struct rig *r, uint64_t now)
{
	struct uroce_qp *qp = to_uqp(r->qp);

	pthread_mutex_lock(&dev->rx_lock);
	pthread_mutex_lock(&qp->lock);
	retry_timer_fire(qp, now);
	pthread_mutex_unlock(&qp->lock);
	pthread_mutex_unlock(&dev->rx_lock);
}

/* ============================================================ responder */

/* §7: a WRITE ONLY lands at its RETH address; one ACK per batch (§6.5),
 * of the last PSN, with the MSN counting messages (§5.4). */
static void test_resp_write_only(void)
{
	struct rig r;
	struct mem m = { 0 };
	uint8_t d1[700], d2[40], d3[33];

	if (!rig_up(&r) || !mem_up(&m, 8192, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	pattern(d1, sizeof(d1), 1);
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN, true, m.iova + 100, m.mr->rkey, sizeof(d1), d1, sizeof(d1));
	CHECK(deliver() == 1, "one packet received");
	CHECK(!memcmp(m.host + 100, d1, sizeof(d1)), "WRITE ONLY bytes in the MR");
	CHECK(untouched(&m, 0, 100) && untouched(&m, 800, m.alloc - 800), "bytes around the WRITE untouched");
	check_nsent(1, "WRITE ONLY");
	check_aeth(fake_sent(0), RQ_PSN, AETH_ACK_UNLIMITED, 1, "ACK of the WRITE ONLY");

	/* two messages in one batch: one ACK, of the second (coalesced) */
	fake_sent_clear();
	pattern(d2, sizeof(d2), 2);
	pattern(d3, sizeof(d3), 3);
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN + 1, true, m.iova + 2000, m.mr->rkey, sizeof(d2), d2, sizeof(d2));
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN + 2, true, m.iova + 3001, m.mr->rkey, sizeof(d3), d3, sizeof(d3));
	CHECK(deliver() == 2, "two packets received");
	CHECK(!memcmp(m.host + 2000, d2, sizeof(d2)) && !memcmp(m.host + 3001, d3, sizeof(d3)),
	      "both WRITEs in the MR");
	CHECK(untouched(&m, 3001 + sizeof(d3), m.alloc - 3001 - sizeof(d3)), "nothing written past the last WRITE");
	check_nsent(1, "two WRITEs in one batch");
	check_aeth(fake_sent(0), RQ_PSN + 2, AETH_ACK_UNLIMITED, 3, "coalesced ACK");
out:
	mem_down(&m);
	rig_down(&r);
}

/* FIRST/MIDDLE/LAST at PMTU 1024 (§7): placed in order, nothing ACKed
 * that did not ask, one ACK for a batch whose packets all asked. */
static void test_resp_write_multi(void)
{
	struct rig r;
	struct mem m = { 0 };
	uint8_t d[2548];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	pattern(d, sizeof(d), 4);
	uint64_t va = m.iova + 16;
	queue_write(OP_RC_WRITE_FIRST, r.qpn, RQ_PSN, false, va, m.mr->rkey, sizeof(d), d, 1024);
	CHECK(deliver() == 1, "FIRST received");
	CHECK(!memcmp(m.host + 16, d, 1024), "FIRST bytes in the MR");
	check_nsent(0, "FIRST without AckReq");
	queue_write(OP_RC_WRITE_MIDDLE, r.qpn, RQ_PSN + 1, true, 0, 0, 0, d + 1024, 1024);
	queue_write(OP_RC_WRITE_LAST, r.qpn, RQ_PSN + 2, true, 0, 0, 0, d + 2048, 500);
	CHECK(deliver() == 2, "MIDDLE and LAST received");
	CHECK(!memcmp(m.host + 16, d, sizeof(d)), "the whole WRITE in the MR");
	CHECK(untouched(&m, 0, 16) && untouched(&m, 16 + sizeof(d), m.alloc - 16 - sizeof(d)),
	      "bytes around the WRITE untouched");
	check_nsent(1, "MIDDLE+LAST in one batch, both with AckReq");
	check_aeth(fake_sent(0), RQ_PSN + 2, AETH_ACK_UNLIMITED, 1, "ACK of the LAST");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A WRITE the memory check refuses: NAK remote access error (0x62) with
 * the offending PSN and the MSN unchanged (§5.3, §5.4), the memory as it
 * was, the responder's QP in ERROR with QP_FATAL, later requests dropped. */
static void write_refused(const char *what, size_t alloc, size_t reg, unsigned access, uint64_t off,
			  uint32_t len, uint32_t rkey_xor)
{
	struct rig r;
	struct mem m = { 0 };
	uint8_t d[512];
	struct ibv_async_event ev;

	async_drain();
	if (!rig_up(&r) || !mem_up(&m, alloc, reg, access))
		goto out;
	pattern(d, sizeof(d), 5);
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN, true, m.iova + off, m.mr->rkey ^ rkey_xor, len, d, len);
	CHECK(deliver() == 1, "%s: received", what);
	check_nsent(1, what);
	check_aeth(fake_sent(0), RQ_PSN, AETH_NAK_REM_ACCESS, 0, what);
	CHECK(untouched(&m, 0, m.alloc), "%s: memory changed", what);
	CHECK(qp_state(r.qp) == IBV_QPS_ERR, "%s: responder QP not in ERROR", what);
	CHECK(async_take(&ev) && ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == r.qp,
	      "%s: no QP_FATAL event", what);
	/* in ERROR nothing is executed or answered any more */
	fake_sent_clear();
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN + 1, true, m.iova, m.mr->rkey, 16, d, 16);
	deliver();
	check_nsent(0, "a WRITE after the NAK");
	CHECK(untouched(&m, 0, m.alloc), "%s: a WRITE after the NAK changed memory", what);
out:
	mem_down(&m);
	rig_down(&r);
	async_drain();
}

static void test_resp_write_bad_rkey(void)
{
	/* same table index, other random part: a key never handed out */
	write_refused("bad rkey", 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 64, 256, 0x5a0000a5u);
}

static void test_resp_write_past_end(void)
{
	/* 8 KiB allocated, 4 KiB registered: the last 100 bytes fit, 100 do not */
	write_refused("past the MR's end", 8192, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
		      4096 - 100, 200, 0);
}

static void test_resp_write_no_permission(void)
{
	write_refused("MR without remote write", 4096, 4096, IBV_ACCESS_LOCAL_WRITE, 0, 64, 0);
}

static void test_resp_write_one_past_end(void)
{
	/* 200 bytes ending one byte past the MR */
	write_refused("one byte past the MR's end", 8192, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
		      4096 - 199, 200, 0);
}

/* The RETH's length is checked at the FIRST (§7: it is the whole
 * message's): a FIRST that fits in the MR, of a message that does not,
 * is NAKed before anything is placed. */
static void test_resp_write_reth_past_end(void)
{
	struct rig r;
	struct mem m = { 0 };
	uint8_t d[1024];

	if (!rig_up(&r) || !mem_up(&m, 8192, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	pattern(d, sizeof(d), 88);
	queue_write(OP_RC_WRITE_FIRST, r.qpn, RQ_PSN, false, m.iova + 4096 - 1024, m.mr->rkey, 2048, d, 1024);
	deliver();
	check_nsent(1, "FIRST of a WRITE past the MR's end");
	check_aeth(fake_sent(0), RQ_PSN, AETH_NAK_REM_ACCESS, 0, "NAK at the FIRST");
	CHECK(untouched(&m, 0, m.alloc), "FIRST of a WRITE past the end was placed");
out:
	mem_down(&m);
	rig_down(&r);
}

/* The bounds check is exact: a WRITE ending at the MR's last byte lands. */
static void test_resp_write_to_end(void)
{
	struct rig r;
	struct mem m = { 0 };
	uint8_t d[200];

	if (!rig_up(&r) || !mem_up(&m, 8192, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	pattern(d, sizeof(d), 6);
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN, true, m.iova + 4096 - 200, m.mr->rkey, 200, d, 200);
	deliver();
	CHECK(!memcmp(m.host + 4096 - 200, d, 200), "WRITE up to the MR's end in the MR");
	CHECK(untouched(&m, 4096, 4096), "nothing past the MR");
	check_nsent(1, "WRITE up to the end");
	check_aeth(fake_sent(0), RQ_PSN, AETH_ACK_UNLIMITED, 1, "ACK of the WRITE up to the end");
out:
	mem_down(&m);
	rig_down(&r);
}

/* SENDs consume posted receives in order and complete them with their
 * length (IBV_WC_RECV), a multi-packet SEND too. */
static void test_resp_send(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[4];
	uint8_t d1[300], d2[1034];

	if (!rig_up(&r) || !mem_up(&m, 8192, 8192, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	post_recv(&r, 0x51, &m, 0, 4096);
	post_recv(&r, 0x52, &m, 4096, 4096);
	pattern(d1, sizeof(d1), 7);
	queue_send(OP_RC_SEND_ONLY, r.qpn, RQ_PSN, true, d1, sizeof(d1));
	deliver();
	CHECK(cq_take(r.rcq, wc, 4) == 1, "one receive completion");
	check_wc(&wc[0], 0x51, IBV_WC_SUCCESS, IBV_WC_RECV, r.qpn, "SEND ONLY");
	CHECK(wc[0].byte_len == sizeof(d1), "SEND ONLY byte_len %u", wc[0].byte_len);
	CHECK(wc[0].src_qp == PEER_QPN, "SEND ONLY src_qp 0x%x", wc[0].src_qp);
	CHECK(!memcmp(m.host, d1, sizeof(d1)) && untouched(&m, sizeof(d1), 4096 - sizeof(d1)),
	      "SEND ONLY bytes in the receive buffer");
	check_nsent(1, "SEND ONLY");
	check_aeth(fake_sent(0), RQ_PSN, AETH_ACK_UNLIMITED, 1, "ACK of the SEND ONLY");

	fake_sent_clear();
	pattern(d2, sizeof(d2), 8);
	queue_send(OP_RC_SEND_FIRST, r.qpn, RQ_PSN + 1, false, d2, 1024);
	queue_send(OP_RC_SEND_LAST, r.qpn, RQ_PSN + 2, true, d2 + 1024, 10);
	deliver();
	CHECK(cq_take(r.rcq, wc, 4) == 1, "one receive completion for FIRST+LAST");
	check_wc(&wc[0], 0x52, IBV_WC_SUCCESS, IBV_WC_RECV, r.qpn, "SEND FIRST+LAST");
	CHECK(wc[0].byte_len == sizeof(d2), "SEND FIRST+LAST byte_len %u", wc[0].byte_len);
	CHECK(!memcmp(m.host + 4096, d2, sizeof(d2)), "SEND FIRST+LAST bytes in the second buffer");
	check_nsent(1, "SEND FIRST+LAST");
	check_aeth(fake_sent(0), RQ_PSN + 2, AETH_ACK_UNLIMITED, 2, "ACK of the SEND LAST");
out:
	mem_down(&m);
	rig_down(&r);
}

/* No receive posted: RNR NAK with the QP's min_rnr_timer and the PSN of
 * the SEND (§5.2, §5.4); not fatal -- the retried SEND lands once a
 * receive is posted. */
static void test_resp_send_rnr(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[2];
	uint8_t d[64];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	pattern(d, sizeof(d), 9);
	queue_send(OP_RC_SEND_ONLY, r.qpn, RQ_PSN, true, d, sizeof(d));
	deliver();
	check_nsent(1, "SEND with no receive");
	check_aeth(fake_sent(0), RQ_PSN, AETH_RNR_NAK | MIN_RNR_TIMER, 0, "RNR NAK");
	CHECK(cq_take(r.rcq, wc, 2) == 0, "a receive completion without a receive");
	CHECK(qp_state(r.qp) == IBV_QPS_RTS, "RNR NAK changed the QP's state");

	fake_sent_clear();
	post_recv(&r, 0x61, &m, 0, 4096);
	queue_send(OP_RC_SEND_ONLY, r.qpn, RQ_PSN, true, d, sizeof(d));
	deliver();
	CHECK(cq_take(r.rcq, wc, 2) == 1, "the retried SEND completes");
	check_wc(&wc[0], 0x61, IBV_WC_SUCCESS, IBV_WC_RECV, r.qpn, "retried SEND");
	CHECK(!memcmp(m.host, d, sizeof(d)), "retried SEND bytes");
	check_nsent(1, "retried SEND");
	check_aeth(fake_sent(0), RQ_PSN, AETH_ACK_UNLIMITED, 1, "ACK of the retried SEND");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A READ request: responses at PSN, PSN+1 ... cut at the PMTU, AETH on
 * FIRST/LAST/ONLY only, MSN counting the READ when accepted (§5.4, §6.3,
 * §7); the next request's PSN follows the responses. */
static void test_resp_read(void)
{
	struct rig r;
	struct mem m = { 0 };
	static const uint32_t want_len[3] = { 1024, 1024, 952 };
	static const uint8_t want_op[3] = { OP_RC_READ_RESP_FIRST, OP_RC_READ_RESP_MIDDLE, OP_RC_READ_RESP_LAST };

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ))
		goto out;
	pattern(m.host, 4096, 10);
	queue_read_req(r.qpn, RQ_PSN, m.iova + 8, m.mr->rkey, 3000);
	deliver();
	check_nsent(3, "READ of 3000 bytes at PMTU 1024");
	uint32_t off = 0;
	for (unsigned i = 0; i < 3 && i < fake_sent_count(); i++) {
		const struct fake_pkt *p = fake_sent(i);
		char what[48];
		snprintf(what, sizeof(what), "READ response %u", i);
		if (!check_out(p, want_op[i], RQ_PSN + i, what))
			continue;
		CHECK(pkt_paylen(p) == want_len[i], "%s: %u bytes, expected %u", what, pkt_paylen(p), want_len[i]);
		CHECK(!memcmp(pkt_payload(p), m.host + 8 + off, want_len[i]), "%s: wrong data", what);
		if (i != 1) {
			const uint8_t *ae = p->buf + BTH_LEN;
			CHECK(aeth_syndrome(ae) == AETH_ACK_UNLIMITED && aeth_msn(ae) == 1, "%s: AETH 0x%02x MSN %u",
			      what, aeth_syndrome(ae), aeth_msn(ae));
		}
		off += want_len[i];
	}

	/* the next READ starts at PSN + 3; 5 bytes: ONLY with 3 pad bytes */
	fake_sent_clear();
	queue_read_req(r.qpn, RQ_PSN + 3, m.iova + 4000, m.mr->rkey, 5);
	deliver();
	check_nsent(1, "READ of 5 bytes");
	const struct fake_pkt *p = fake_sent(0);
	if (check_out(p, OP_RC_READ_RESP_ONLY, RQ_PSN + 3, "READ ONLY response")) {
		CHECK(pkt_paylen(p) == 5 && bth_pad(p->buf) == 3, "READ ONLY: %u bytes, pad %u", pkt_paylen(p),
		      bth_pad(p->buf));
		CHECK(!memcmp(pkt_payload(p), m.host + 4000, 5), "READ ONLY: wrong data");
		CHECK(aeth_msn(p->buf + BTH_LEN) == 2, "READ ONLY: MSN %u", aeth_msn(p->buf + BTH_LEN));
	}
out:
	mem_down(&m);
	rig_down(&r);
}

/* How long a spin holds the sockets (exec_spin_held, docs/architecture.md,
 * "How long a spin holds the sockets"): a process that receives only
 * answers holds them the whole grace after a spin; once a peer's request
 * came, as long as the spin lasted, between UROCE_POLL_SPIN_US and the
 * grace.  A batch of responses alone does not make a process a target.
 * The stamps are set by hand and `now` is given, so nothing here depends
 * on timing. */
static void test_spin_hold(void)
{
	struct rig r;
	struct mem m = { 0 };
	const uint64_t grace = (uint64_t)dev->cfg.poll_grace_us * 1000, gap = (uint64_t)dev->cfg.poll_spin_us * 1000;

	CHECK(grace > gap && gap > 0, "defaults: grace %llu ns, spin gap %llu ns", (unsigned long long)grace,
	      (unsigned long long)gap);
	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ))
		goto out;
	atomic_store(&dev->eng.rx_request_ns, 0);
	/* an ACK (a response) is no request */
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN, AETH_ACK_UNLIMITED, 0, NULL, 0);
	deliver();
	CHECK(atomic_load(&dev->eng.rx_request_ns) == 0, "a batch of responses marked the process a target");

	uint64_t t = now_ns(), spin = t - 10000;
	atomic_store(&dev->eng.app_spin_ns, spin);
	atomic_store(&dev->eng.app_spin_from_ns, spin - 60000);
	CHECK(exec_spin_held(dev, t) == spin + grace, "no target: a 60 us spin held %lld ns, want the grace",
	      (long long)(exec_spin_held(dev, t) - spin));

	queue_read_req(r.qpn, RQ_PSN, m.iova, m.mr->rkey, 8);
	deliver();
	check_nsent(1, "READ answered");
	uint64_t stamp = atomic_load(&dev->eng.rx_request_ns);
	CHECK(stamp >= t, "a READ request did not mark the process a target");
	t = stamp;
	spin = t - 10000;
	static const struct { uint64_t lasted, held; const char *what; } rows[] = {
		{ 60000, 0, "a 60 us spin: the spin gap" },
		{ 1000000, 1000000, "a 1 ms spin: 1 ms" },
		{ 10000000, 1, "a 10 ms spin: the grace" },
	};
	for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		uint64_t want = rows[i].held == 0 ? gap : rows[i].held == 1 ? grace : rows[i].held;
		atomic_store(&dev->eng.app_spin_ns, spin);
		atomic_store(&dev->eng.app_spin_from_ns, spin - rows[i].lasted);
		uint64_t held = exec_spin_held(dev, t) - spin;
		CHECK(held == want, "target, %s: held %llu ns, want %llu", rows[i].what, (unsigned long long)held,
		      (unsigned long long)want);
	}
	/* a torn read (the start of a later run than the spin) gets the grace */
	atomic_store(&dev->eng.app_spin_from_ns, spin + 5000);
	CHECK(exec_spin_held(dev, t) == spin + grace, "torn stamps: held %lld ns, want the grace",
	      (long long)(exec_spin_held(dev, t) - spin));
	/* a grace after the last request the process is no target again */
	atomic_store(&dev->eng.app_spin_from_ns, spin - 60000);
	CHECK(exec_spin_held(dev, stamp + grace) == spin + grace, "a grace after the request: not the whole grace");
	/* the engine asleep off the sockets until a hold it computed before
	 * the hold shrank: an armed CQ still hands the sockets back */
	atomic_store(&dev->eng.app_spin_ns, 0);
	atomic_store(&dev->eng.app_spin_from_ns, 0);
	uint64_t hb = atomic_load(&dev->eng.handback_ns);
	exec_poll_block(dev);
	CHECK(atomic_load(&dev->eng.handback_ns) == hb, "no spin, engine on the sockets: a hand-back");
	atomic_store(&dev->eng.off_until_ns, now_ns() + 1000000000ull);
	exec_poll_block(dev);
	CHECK(atomic_load(&dev->eng.handback_ns) != hb, "engine off the sockets: no hand-back at ibv_req_notify_cq");
	atomic_store(&dev->eng.off_until_ns, 0);
	atomic_store(&dev->eng.rx_request_ns, 0);
out:
	mem_down(&m);
	rig_down(&r);
}

/* An atomic executes once and answers the original value (§6.3, §5.4). */
static void test_resp_fetch_add(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct pkt pk;

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC))
		goto out;
	uint64_t v = 1000;
	memcpy(m.host + 64, &v, 8);
	uint8_t *h = pkt_begin(&pk, OP_RC_FETCH_ADD, r.qpn, true, RQ_PSN);
	atmeth_set(h + BTH_LEN, m.iova + 64, m.mr->rkey, 5, 0);
	pkt_queue(&pk, NULL, 0);
	deliver();
	memcpy(&v, m.host + 64, 8);
	CHECK(v == 1005, "FETCH_ADD left %llu, expected 1005", (unsigned long long)v);
	check_nsent(1, "FETCH_ADD");
	const struct fake_pkt *p = fake_sent(0);
	if (check_out(p, OP_RC_ATOMIC_ACK, RQ_PSN, "ATOMIC ACK")) {
		CHECK(aeth_msn(p->buf + BTH_LEN) == 1, "ATOMIC ACK MSN %u", aeth_msn(p->buf + BTH_LEN));
		CHECK(atmack_orig(p->buf + opinfo(OP_RC_ATOMIC_ACK)->off_atmack) == 1000, "ATOMIC ACK original value");
	}
out:
	mem_down(&m);
	rig_down(&r);
}

/* A PSN gap: one sequence NAK of ePSN (§6.2, §5.4), the next packet out
 * of order dropped silently; in-order packets resume, and a later gap is
 * NAKed again. */
static void test_resp_psn_gap(void)
{
	struct rig r;
	struct mem m = { 0 };
	uint8_t d[4][64];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	for (int i = 0; i < 4; i++)
		pattern(d[i], 64, 20 + i);
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN + 1, true, m.iova + 64, m.mr->rkey, 64, d[1], 64);
	deliver();
	check_nsent(1, "first packet after a gap");
	check_aeth(fake_sent(0), RQ_PSN, AETH_NAK_PSN_SEQ, 0, "sequence NAK");
	fake_sent_clear();
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN + 2, true, m.iova + 128, m.mr->rkey, 64, d[2], 64);
	deliver();
	check_nsent(0, "second packet after the gap (one NAK per gap)");
	CHECK(untouched(&m, 0, m.alloc), "out-of-order WRITEs changed memory");

	/* go-back-N from the NAK's PSN */
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN, true, m.iova, m.mr->rkey, 64, d[0], 64);
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN + 1, true, m.iova + 64, m.mr->rkey, 64, d[1], 64);
	deliver();
	CHECK(!memcmp(m.host, d[0], 64) && !memcmp(m.host + 64, d[1], 64), "resent WRITEs in the MR");
	CHECK(untouched(&m, 128, m.alloc - 128), "the dropped WRITE left no trace");
	check_nsent(1, "resent WRITEs");
	check_aeth(fake_sent(0), RQ_PSN + 1, AETH_ACK_UNLIMITED, 2, "ACK after the resend");

	/* a new gap gets its own NAK */
	fake_sent_clear();
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN + 3, true, m.iova + 192, m.mr->rkey, 64, d[3], 64);
	deliver();
	check_nsent(1, "a later gap");
	check_aeth(fake_sent(0), RQ_PSN + 2, AETH_NAK_PSN_SEQ, 2, "second sequence NAK");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A packet whose ICRC does not match is dropped before anything else
 * (§4): the crafted packets of this file are checked, not waved through. */
static void test_resp_bad_icrc(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct pkt p;
	uint8_t d[32];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	pattern(d, sizeof(d), 30);
	uint8_t *h = pkt_begin(&p, OP_RC_WRITE_ONLY, r.qpn, true, RQ_PSN);
	reth_set(h + BTH_LEN, m.iova, m.mr->rkey, sizeof(d));
	pkt_queue_ex(&p, d, sizeof(d), true);
	deliver();
	check_nsent(0, "bad ICRC");
	CHECK(untouched(&m, 0, m.alloc), "a packet with a bad ICRC changed memory");
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN, true, m.iova, m.mr->rkey, sizeof(d), d, sizeof(d));
	deliver();
	CHECK(!memcmp(m.host, d, sizeof(d)), "the same WRITE with a good ICRC lands");
	check_nsent(1, "good ICRC");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A UC QP (RESET -> INIT -> RTR -> RTS with UC's masks, IBA 11.2.5),
 * optionally on an SRQ. */
static bool uc_rig_up(struct rig *r, struct ibv_srq *srq, enum ibv_qp_type type)
{
	memset(r, 0, sizeof(*r));
	r->scq = uroce_create_cq(ctx, 64, NULL, NULL, 0);
	r->rcq = uroce_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {
		.send_cq = r->scq, .recv_cq = r->rcq, .srq = srq, .qp_type = type,
		.cap = { .max_send_wr = 32, .max_recv_wr = srq ? 0 : 32, .max_send_sge = 4, .max_recv_sge = 4 },
	};
	if (r->scq && r->rcq)
		r->qp = uroce_create_qp(pd, &ia);
	if (!r->qp)
		return false;
	r->qpn = r->qp->qp_num;
	if (type == IBV_QPT_RC)
		return rig_connect(r, &conn_default);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	if (uroce_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return false;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.hop_limit = 64;
	memcpy(a.ah_attr.grh.dgid.raw, peer_gid, 16);
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = PEER_QPN;
	a.rq_psn = RQ_PSN;
	if (uroce_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
		return false;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = SQ_PSN;
	if (uroce_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return false;
	fake_sent_clear();
	return true;
}

/* UC (§6.7): a PSN gap inside a message drops the rest of it; its receive
 * WQE is not lost but takes the next message (rxe does the same), so every
 * posted receive completes, in order: 3 posted, a message cut by a gap,
 * then 3 whole ones -> wr_ids 0x400, 0x401, 0x402 with the whole messages'
 * lengths. */
static void test_uc_gap_reuses_wqe(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[8];
	uint8_t d[1024 + 100];

	CHECK(uc_rig_up(&r, NULL, IBV_QPT_UC), "UC QP setup failed");
	if (!r.qp || !mem_up(&m, 8192, 8192, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	for (int i = 0; i < 3; i++)
		post_recv(&r, 0x400 + (uint64_t)i, &m, (uint32_t)i * 2048, 2048);
	pattern(d, sizeof(d), 40);
	queue_send(OP_UC_SEND_FIRST, r.qpn, RQ_PSN, false, d, 1024);
	/* RQ_PSN + 1 (a MIDDLE) is lost */
	queue_send(OP_UC_SEND_LAST, r.qpn, RQ_PSN + 2, false, d, 100);
	for (uint32_t i = 0; i < 3; i++)
		queue_send(OP_UC_SEND_ONLY, r.qpn, RQ_PSN + 3 + i, false, d, 10 + i);
	deliver();
	int n = cq_take(r.rcq, wc, 8);
	CHECK(n == 3, "UC after a gap: %d receive completions, want 3", n);
	for (int i = 0; i < n && i < 3; i++) {
		check_wc(&wc[i], 0x400 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_RECV, r.qpn, "UC receives in order");
		CHECK(wc[i].byte_len == 10u + (unsigned)i, "UC receive %d: byte_len %u, want %d", i, wc[i].byte_len, 10 + i);
	}
	check_nsent(0, "UC answers nothing");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A receive WQE of an SRQ that a QP consumed for a message under way is the
 * QP's: when the QP goes to ERR it completes with IBV_WC_WR_FLUSH_ERR
 * (IBA 10.7.3.1), while the SRQ's other WQEs stay for other QPs. */
static void test_srq_flush_consumed(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[8];
	uint8_t d[1024];
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = uroce_create_srq(pd, &sa);

	CHECK(srq != NULL, "SRQ create");
	CHECK(srq && uc_rig_up(&r, srq, IBV_QPT_RC), "RC QP on an SRQ: setup failed");
	if (!srq || !r.qp || !mem_up(&m, 8192, 8192, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = { m.iova + (uint64_t)i * 2048, 2048, m.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 0x500 + (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(uroce_post_srq_recv(srq, &wr, &bad) == 0, "post_srq_recv");
	}
	pattern(d, sizeof(d), 41);
	queue_send(OP_RC_SEND_FIRST, r.qpn, RQ_PSN, false, d, 1024);
	deliver();
	CHECK(cq_take(r.rcq, wc, 8) == 0, "a message under way completed early");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	CHECK(uroce_modify_qp(r.qp, &a, IBV_QP_STATE) == 0, "modify to ERR");
	int n = cq_take(r.rcq, wc, 8);
	CHECK(n == 1, "the consumed SRQ WQE: %d flush completions, want 1", n);
	if (n >= 1)
		check_wc(&wc[0], 0x500, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, r.qpn, "consumed SRQ WQE flushed");
	async_drain();
out:
	mem_down(&m);
	rig_down(&r);
	if (srq)
		CHECK(uroce_destroy_srq(srq) == 0, "destroy SRQ");
}

/* A CQ too small for what arrives (a 4-entry CQ holds 7: its ring is the
 * next power of two above 4, one slot kept free): the 8th completion is
 * lost, so the CQ raises IBV_EVENT_CQ_ERR once and the QP whose completion
 * it was enters ERR with IBV_EVENT_QP_FATAL (rxe does both); what follows
 * in the batch is not executed. */
static void test_cq_overrun(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[32];
	struct ibv_async_event ev;
	uint8_t d[8];

	memset(&r, 0, sizeof(r));
	r.scq = uroce_create_cq(ctx, 64, NULL, NULL, 0);
	r.rcq = uroce_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {
		.send_cq = r.scq, .recv_cq = r.rcq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 4, .max_recv_sge = 4 },
	};
	if (r.scq && r.rcq)
		r.qp = uroce_create_qp(pd, &ia);
	CHECK(r.qp && rig_connect(&r, &conn_default), "QP setup failed");
	if (!r.qp || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	r.qpn = r.qp->qp_num;
	for (int i = 0; i < 16; i++)
		post_recv(&r, 0x300 + (uint64_t)i, &m, (uint32_t)i * 64, 64);
	async_drain();
	uint64_t overruns = dev->stats->counters[UC_cq_overruns];
	pattern(d, sizeof(d), 32);
	for (int i = 0; i < 16; i++)
		queue_send(OP_RC_SEND_ONLY, r.qpn, RQ_PSN + (uint32_t)i, false, d, sizeof(d));
	deliver();
	int n = cq_take(r.rcq, wc, 32);
	CHECK(n == 7, "a 4-entry CQ kept %d completions, not 7", n);
	for (int i = 0; i < n && i < 7; i++)
		check_wc(&wc[i], 0x300 + (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_RECV, r.qpn, "completions before the overrun");
	CHECK(dev->stats->counters[UC_cq_overruns] > overruns, "the overrun was not counted");
	CHECK(async_take(&ev) && ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == r.rcq,
	      "no IBV_EVENT_CQ_ERR for the full CQ first");
	CHECK(async_take(&ev) && ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == r.qp,
	      "no IBV_EVENT_QP_FATAL for the QP whose completion was lost");
	CHECK(!async_take(&ev), "one CQ_ERR and one QP_FATAL, nothing more (event %d)", ev.event_type);
	CHECK(qp_state(r.qp) == IBV_QPS_ERR, "the QP whose completion was lost is not in ERR");
	check_nsent(0, "requests after the overrun: not executed, not ACKed");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A CNP (§8: opcode 0x81, 16 reserved bytes) goes to its QP's congestion
 * controller and nowhere else: counted, nothing sent, the QP's state and
 * its PSNs as they were (the next request is taken as usual). */
static void test_cnp(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct pkt p;
	uint8_t d[16];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	uint64_t before = dev->stats->counters[UC_cnps_rx];
	uint8_t *h = pkt_begin(&p, OP_CNP, r.qpn, false, 0);
	bth_set_becn(h);
	pkt_queue(&p, NULL, 0);
	deliver();
	CHECK(dev->stats->counters[UC_cnps_rx] == before + 1, "a CNP was not counted");
	check_nsent(0, "CNP");
	CHECK(qp_state(r.qp) == IBV_QPS_RTS, "a CNP changed the QP's state");
	pattern(d, sizeof(d), 31);
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN, true, m.iova, m.mr->rkey, sizeof(d), d, sizeof(d));
	deliver();
	CHECK(!memcmp(m.host, d, sizeof(d)), "the request after a CNP did not land");
	check_nsent(1, "request after CNP");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A duplicate SEND/WRITE is not executed again but re-ACKed with ePSN - 1,
 * AckReq or not (§6.4). */
static void test_resp_dup_write(void)
{
	struct rig r;
	struct mem m = { 0 };
	uint8_t d1[64], d2[64];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	pattern(d1, sizeof(d1), 80);
	pattern(d2, sizeof(d2), 81);
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN, true, m.iova, m.mr->rkey, 64, d1, 64);
	deliver();
	check_nsent(1, "WRITE");
	fake_sent_clear();
	/* the same PSN with other bytes: if it were executed, they would show */
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN, false, m.iova, m.mr->rkey, 64, d2, 64);
	deliver();
	CHECK(!memcmp(m.host, d1, 64), "a duplicate WRITE was executed again");
	check_nsent(1, "duplicate WRITE without AckReq");
	check_aeth(fake_sent(0), RQ_PSN, AETH_ACK_UNLIMITED, 1, "re-ACK of the duplicate");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A duplicate READ is answered again from memory, a partial retry from
 * its PSN with MIDDLE/LAST (§6.4). */
static void test_resp_dup_read(void)
{
	struct rig r;
	struct mem m = { 0 };

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ))
		goto out;
	pattern(m.host, 4096, 82);
	queue_read_req(r.qpn, RQ_PSN, m.iova, m.mr->rkey, 3000);
	deliver();
	check_nsent(3, "READ");
	fake_sent_clear();
	queue_read_req(r.qpn, RQ_PSN, m.iova, m.mr->rkey, 3000);
	deliver();
	check_nsent(3, "the whole READ again");
	check_out(fake_sent(0), OP_RC_READ_RESP_FIRST, RQ_PSN, "replayed FIRST");
	check_out(fake_sent(2), OP_RC_READ_RESP_LAST, RQ_PSN + 2, "replayed LAST");
	fake_sent_clear();
	queue_read_req(r.qpn, RQ_PSN + 1, m.iova + 1024, m.mr->rkey, 3000 - 1024);
	deliver();
	check_nsent(2, "READ retried from its 2nd response");
	const struct fake_pkt *p = fake_sent(0);
	if (check_out(p, OP_RC_READ_RESP_MIDDLE, RQ_PSN + 1, "partial replay, 1st packet"))
		CHECK(pkt_paylen(p) == 1024 && !memcmp(pkt_payload(p), m.host + 1024, 1024), "partial replay: MIDDLE data");
	p = fake_sent(1);
	if (check_out(p, OP_RC_READ_RESP_LAST, RQ_PSN + 2, "partial replay, 2nd packet"))
		CHECK(pkt_paylen(p) == 952 && !memcmp(pkt_payload(p), m.host + 2048, 952), "partial replay: LAST data");
	/* the requester's next new request is still expected at PSN + 3 */
	fake_sent_clear();
	queue_read_req(r.qpn, RQ_PSN + 3, m.iova, m.mr->rkey, 4);
	deliver();
	check_nsent(1, "READ after the replays");
	check_out(fake_sent(0), OP_RC_READ_RESP_ONLY, RQ_PSN + 3, "READ after the replays");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A duplicate atomic is never executed twice: the saved ATOMIC ACK is
 * sent again (§6.4). */
static void test_resp_dup_atomic(void)
{
	struct rig r;
	struct mem m = { 0 };

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC))
		goto out;
	uint64_t v = 1000;
	memcpy(m.host + 64, &v, 8);
	for (int i = 0; i < 2; i++) {
		struct pkt pk;
		uint8_t *h = pkt_begin(&pk, OP_RC_FETCH_ADD, r.qpn, true, RQ_PSN);
		atmeth_set(h + BTH_LEN, m.iova + 64, m.mr->rkey, 5, 0);
		pkt_queue(&pk, NULL, 0);
		fake_sent_clear();
		deliver();
		check_nsent(1, i ? "duplicate FETCH_ADD" : "FETCH_ADD");
		const struct fake_pkt *p = fake_sent(0);
		if (check_out(p, OP_RC_ATOMIC_ACK, RQ_PSN, i ? "replayed ATOMIC ACK" : "ATOMIC ACK"))
			CHECK(atmack_orig(p->buf + BTH_LEN + AETH_LEN) == 1000, "ATOMIC ACK %d: original %llu", i,
			      (unsigned long long)atmack_orig(p->buf + BTH_LEN + AETH_LEN));
	}
	memcpy(&v, m.host + 64, 8);
	CHECK(v == 1005, "FETCH_ADD executed %s: %llu", v == 1010 ? "twice" : "wrongly", (unsigned long long)v);
out:
	mem_down(&m);
	rig_down(&r);
}

/* RDMA WRITE with immediate: placed, and it consumes a receive that
 * completes RECV_RDMA_WITH_IMM with the immediate and the length. */
static void test_resp_write_imm(void)
{
	struct rig r;
	struct mem m = { 0 }, rb = { 0 };
	struct ibv_wc wc[2];
	struct pkt pk;
	uint8_t d[100];
	const uint32_t imm = htobe32(0x11223344);

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) ||
	    !mem_up(&rb, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	post_recv(&r, 0x5a, &rb, 0, 4096);
	pattern(d, sizeof(d), 83);
	uint8_t *h = pkt_begin(&pk, OP_RC_WRITE_ONLY_IMM, r.qpn, true, RQ_PSN);
	reth_set(h + opinfo(OP_RC_WRITE_ONLY_IMM)->off_reth, m.iova + 8, m.mr->rkey, sizeof(d));
	immdt_set_raw(h + opinfo(OP_RC_WRITE_ONLY_IMM)->off_imm, imm);
	pkt_queue(&pk, d, sizeof(d));
	deliver();
	CHECK(!memcmp(m.host + 8, d, sizeof(d)), "WRITE with immediate placed");
	CHECK(cq_take(r.rcq, wc, 2) == 1, "WRITE with immediate: not 1 receive completion");
	check_wc(&wc[0], 0x5a, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, r.qpn, "WRITE with immediate");
	CHECK(wc[0].byte_len == sizeof(d), "WRITE with immediate byte_len %u", wc[0].byte_len);
	CHECK((wc[0].wc_flags & IBV_WC_WITH_IMM) && wc[0].imm_data == imm, "immediate 0x%x flags 0x%x",
	      be32toh(wc[0].imm_data), wc[0].wc_flags);
	CHECK(untouched(&rb, 0, rb.alloc), "WRITE with immediate wrote the receive buffer");
	check_nsent(1, "WRITE with immediate");
	check_aeth(fake_sent(0), RQ_PSN, AETH_ACK_UNLIMITED, 1, "ACK of the WRITE with immediate");
out:
	mem_down(&rb);
	mem_down(&m);
	rig_down(&r);
}

/* Requests the responder cannot make sense of: NAK invalid request (0x61)
 * with the offending PSN, the QP in ERROR (§5.3, §7). */
static void invalid_request(const char *what, uint8_t op, uint32_t paylen, bool post_small_recv)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[2];
	uint8_t d[1024];

	async_drain();
	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	if (post_small_recv)
		post_recv(&r, 0x5b, &m, 0, 64);
	pattern(d, sizeof(d), 84);
	queue_write(op, r.qpn, RQ_PSN, true, m.iova + 2048, m.mr->rkey, paylen, d, paylen);
	deliver();
	check_nsent(1, what);
	check_aeth(fake_sent(0), RQ_PSN, AETH_NAK_INV_REQ, 0, what);
	CHECK(qp_state(r.qp) == IBV_QPS_ERR, "%s: QP not in ERROR", what);
	if (post_small_recv) {
		/* the receive that was too small completes with the error */
		CHECK(cq_take(r.rcq, wc, 2) == 1, "%s: not 1 receive completion", what);
		check_wc(&wc[0], 0x5b, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, r.qpn, what);
	} else {
		CHECK(untouched(&m, 0, m.alloc), "%s: memory changed", what);
	}
out:
	mem_down(&m);
	rig_down(&r);
	async_drain();
}

static void test_resp_inv_req(void)
{
	invalid_request("WRITE MIDDLE without a FIRST", OP_RC_WRITE_MIDDLE, 1024, false);
	invalid_request("WRITE FIRST shorter than the PMTU", OP_RC_WRITE_FIRST, 1000, false);
	invalid_request("SEND longer than the receive", OP_RC_SEND_ONLY, 100, true);
}

/* A message may not start inside another (IBA 9.8.3.1): a SEND between a
 * WRITE's FIRST and LAST is NAKed invalid request at its PSN. */
static void test_resp_send_inside_write(void)
{
	struct rig r;
	struct mem m = { 0 };
	uint8_t d[1024];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	post_recv(&r, 0x5c, &m, 3072, 1024);
	pattern(d, sizeof(d), 89);
	queue_write(OP_RC_WRITE_FIRST, r.qpn, RQ_PSN, false, m.iova, m.mr->rkey, 2048, d, 1024);
	queue_send(OP_RC_SEND_ONLY, r.qpn, RQ_PSN + 1, true, d, 16);
	deliver();
	check_nsent(1, "SEND inside a WRITE");
	check_aeth(fake_sent(0), RQ_PSN + 1, AETH_NAK_INV_REQ, 0, "NAK of the SEND inside a WRITE");
	CHECK(untouched(&m, 3072, 1024), "the SEND inside a WRITE was placed");
out:
	mem_down(&m);
	rig_down(&r);
}

/* An ACK owed in a batch leaves before a NAK of a later packet of the
 * same batch: the wire stays in PSN order (§6.5). */
static void test_resp_ack_before_nak(void)
{
	struct rig r;
	struct mem m = { 0 };
	uint8_t d[64];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	pattern(d, sizeof(d), 85);
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN, true, m.iova, m.mr->rkey, 64, d, 64);
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN + 2, true, m.iova + 64, m.mr->rkey, 64, d, 64);
	deliver();
	check_nsent(2, "WRITE and a WRITE after a gap in one batch");
	check_aeth(fake_sent(0), RQ_PSN, AETH_ACK_UNLIMITED, 1, "ACK first");
	check_aeth(fake_sent(1), RQ_PSN + 1, AETH_NAK_PSN_SEQ, 1, "then the sequence NAK");
out:
	mem_down(&m);
	rig_down(&r);
}

/* Deferred ACKs whose wait has ended by `at` go out (ack_flush_deferred). */
static void flush_acks(uint64_t at)
{
	pthread_mutex_lock(&dev->rx_lock);
	ack_flush_deferred(dev, at);
	pthread_mutex_unlock(&dev->rx_lock);
}

/* Two WRITE ONLYs of 64 bytes in one batch, at psn and psn + 1. */
static void deliver_two(struct rig *r, struct mem *m, uint32_t psn, const uint8_t *d)
{
	queue_write(OP_RC_WRITE_ONLY, r->qpn, psn, true, m->iova, m->mr->rkey, 64, d, 64);
	queue_write(OP_RC_WRITE_ONLY, r->qpn, psn + 1, true, m->iova + 64, m->mr->rkey, 64, d, 64);
	CHECK(deliver() == 2, "two WRITEs received");
}

/* §6.5 coalescing across batches (ack.c, ack_stream): the ACK of a peer that
 * pipelines its messages waits for more of them, covers at most 16 packets
 * more, and goes at its deadline when no more come; after four waits in a
 * row that ended at their deadline, the QP ACKs at once until 16 pipelined
 * batches have shown a stream again.  Every ACK acknowledges the last PSN received.
 * Rides wait 1 ms here, stream waits at most 10 us: a flush 15 us on tells
 * them apart however slowly this thread runs. */
static void test_resp_ack_stream(void)
{
	struct rig r;
	struct mem m = { 0 };
	uint8_t d[64];
	uint32_t psn = RQ_PSN, msn = 0;
	unsigned defer_us = dev->cfg.ack_defer_us;

	dev->cfg.ack_defer_us = 1000;  /* the fake turns ACK waits off */
	/* streams wait only on a real-time engine receiving: this thread plays it */
	bool rt = dev->eng.rt;
	dev->eng.rt = true;
	uroce_engine_thread = true;
	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	pattern(d, sizeof(d), 86);

	/* one message at a time: its ACK waits for a request to ride with
	 * until that stops paying (ack_defer), then goes at the batch's end */
	bool at_once = false;
	for (int i = 0; i < 12 && !at_once; i++) {
		fake_sent_clear();
		queue_write(OP_RC_WRITE_ONLY, r.qpn, psn++, true, m.iova, m.mr->rkey, 64, d, 64);
		msn++;
		deliver();
		at_once = fake_sent_count() == 1;
		flush_acks(now_ns() + 1000000000ull);
		check_nsent(1, "a lone WRITE's ACK");
	}
	CHECK(at_once, "one-way single WRITEs are ACKed at the batch's end once no request follows");

	/* two in a batch: the peer pipelines, and the ACK waits for more */
	fake_sent_clear();
	deliver_two(&r, &m, psn, d);
	psn += 2, msn += 2;
	check_nsent(0, "the ACK of a stream's batch waits");
	/* batches that join it: the ACK goes once it covers 16 packets more than
	 * the first one it waited for, and acknowledges the last */
	uint32_t first = psn - 1;
	int batches = 0;
	while (fake_sent_count() == 0 && batches < 40) {
		queue_write(OP_RC_WRITE_ONLY, r.qpn, psn++, true, m.iova, m.mr->rkey, 64, d, 64);
		msn++;
		deliver();
		batches++;
	}
	CHECK(psn - 1 - first == 16, "the stream's ACK went after %u packets more, expected 16", psn - 1 - first);
	check_nsent(1, "the stream's ACK");
	check_aeth(fake_sent(0), psn - 1, AETH_ACK_UNLIMITED, msn, "the stream's ACK, of its last PSN");

	/* a wait that no more join ends at its deadline, at most 10 us; three
	 * such in a row are a stream's hiccups */
	for (int i = 0; i < 4; i++) {
		fake_sent_clear();
		deliver_two(&r, &m, psn, d);
		psn += 2, msn += 2;
		check_nsent(0, "a batch's ACK waits, after waits that ended at their deadline");
		flush_acks(now_ns() + 15000);
		check_nsent(1, "the ACK at its deadline");
		check_aeth(fake_sent(0), psn - 1, AETH_ACK_UNLIMITED, msn, "the ACK at its deadline");
	}

	/* the fourth: the peer's window may be smaller than a wait's 16
	 * packets, so the next 16 pipelined batches are ACKed at once (a batch
	 * whose ACK waits for a ride instead -- ack_defer tries again now and
	 * then -- is flushed past the ride's wait and not counted), and the one
	 * after waits again */
	int immediate = 0;
	for (int i = 0; i < 40 && immediate < 17; i++) {
		fake_sent_clear();
		deliver_two(&r, &m, psn, d);
		psn += 2, msn += 2;
		if (fake_sent_count() == 1) {
			check_aeth(fake_sent(0), psn - 1, AETH_ACK_UNLIMITED, msn, "an ACK at once");
			immediate++;
			continue;
		}
		flush_acks(now_ns() + 15000);
		if (fake_sent_count() == 1)
			break;  /* a stream's wait: waiting again */
		flush_acks(now_ns() + 1000000000ull);  /* a ride's */
		check_nsent(1, "a ride's ACK at its deadline");
	}
	CHECK(immediate == 16, "%d pipelined batches ACKed at once after four waits to their deadline, expected 16",
	      immediate);
out:
	uroce_engine_thread = false;
	dev->eng.rt = rt;
	dev->cfg.ack_defer_us = defer_us;
	mem_down(&m);
	rig_down(&r);
}

/* ============================================================ requester */

/* 5000 bytes from two SGEs at PMTU 1024: FIRST, 3 MIDDLE, LAST with
 * consecutive PSNs from sq_psn across the 24-bit wrap (§6.1), 4 x 1024 +
 * 904 bytes, AckReq on the LAST (§6.5, §7). */
static void test_req_send_segmented(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct conn c = conn_default;
	struct ibv_wc wc[2];
	static const uint8_t want_op[5] = { OP_RC_SEND_FIRST, OP_RC_SEND_MIDDLE, OP_RC_SEND_MIDDLE,
					     OP_RC_SEND_MIDDLE, OP_RC_SEND_LAST };
	uint8_t whole[5000];

	c.sq_psn = 0xFFFFFE;
	if (!rig_up_with(&r, &c) || !mem_up(&m, 8192, 8192, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	pattern(m.host, 8192, 40);
	struct ibv_sge sge[2] = {
		{ m.iova, 3000, m.mr->lkey }, { m.iova + 4096, 2000, m.mr->lkey },
	};
	memcpy(whole, m.host, 3000);
	memcpy(whole + 3000, m.host + 4096, 2000);
	post_send(&r, 0x71, IBV_WR_SEND, sge, 2, 0, 0);
	check_nsent(5, "5000-byte SEND");
	uint32_t off = 0;
	for (unsigned i = 0; i < 5 && i < fake_sent_count(); i++) {
		const struct fake_pkt *p = fake_sent(i);
		char what[32];
		uint32_t want = i < 4 ? 1024 : 904;
		snprintf(what, sizeof(what), "SEND packet %u", i);
		if (!check_out(p, want_op[i], psn_add(c.sq_psn, i), what))
			continue;
		CHECK(pkt_paylen(p) == want, "%s: %u bytes, expected %u", what, pkt_paylen(p), want);
		CHECK(!memcmp(pkt_payload(p), whole + off, want), "%s: wrong data", what);
		/* AckReq elsewhere is the requester's policy; on the last it is a must */
		if (i == 4)
			CHECK(bth_ackreq(p->buf), "%s: no AckReq on the LAST", what);
		off += want;
	}
	CHECK(cq_take(r.scq, wc, 2) == 0, "SEND completed before its ACK");
	queue_resp(OP_RC_ACK, r.qpn, psn_add(c.sq_psn, 4), AETH_ACK_UNLIMITED, 1, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 1, "one send completion after the ACK");
	check_wc(&wc[0], 0x71, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "5000-byte SEND");
out:
	mem_down(&m);
	rig_down(&r);
}

/* An RDMA WRITE: the RETH (va, rkey, whole length) on the FIRST only (§7);
 * the LAST pads to 4 bytes with zeros. */
static void test_req_write(void)
{
	struct rig r;
	struct mem m = { 0 };
	static const uint8_t want_op[3] = { OP_RC_WRITE_FIRST, OP_RC_WRITE_MIDDLE, OP_RC_WRITE_LAST };
	static const uint32_t want_len[3] = { 1024, 1024, 454 };
	const uint64_t raddr = 0x123456789abc0ull;
	const uint32_t rkey = 0xcafebabe;

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	pattern(m.host, 4096, 41);
	struct ibv_sge sge = { m.iova, 2502, m.mr->lkey };
	post_send(&r, 0x72, IBV_WR_RDMA_WRITE, &sge, 1, raddr, rkey);
	check_nsent(3, "2502-byte WRITE");
	uint32_t off = 0;
	for (unsigned i = 0; i < 3 && i < fake_sent_count(); i++) {
		const struct fake_pkt *p = fake_sent(i);
		char what[32];
		snprintf(what, sizeof(what), "WRITE packet %u", i);
		if (!check_out(p, want_op[i], SQ_PSN + i, what))
			continue;
		/* the length says whether a RETH is there: BTH (+ RETH) + data + pad + ICRC */
		uint32_t hl = i == 0 ? BTH_LEN + RETH_LEN : BTH_LEN;
		CHECK(p->len == hl + want_len[i] + pad_for(want_len[i]) + ICRC_LEN, "%s: %u bytes on the wire", what,
		      p->len);
		CHECK(pkt_paylen(p) == want_len[i], "%s: %u payload bytes", what, pkt_paylen(p));
		CHECK(!memcmp(pkt_payload(p), m.host + off, want_len[i]), "%s: wrong data", what);
		if (i == 0) {
			const uint8_t *reth = p->buf + BTH_LEN;
			CHECK(reth_va(reth) == raddr && reth_rkey(reth) == rkey && reth_len(reth) == 2502,
			      "%s: RETH va 0x%llx rkey 0x%x len %u", what, (unsigned long long)reth_va(reth),
			      reth_rkey(reth), reth_len(reth));
		}
		if (i == 2) {
			CHECK(bth_pad(p->buf) == 2, "%s: pad %u, expected 2", what, bth_pad(p->buf));
			CHECK(p->buf[p->len - ICRC_LEN - 1] == 0 && p->buf[p->len - ICRC_LEN - 2] == 0,
			      "%s: pad bytes not zero", what);
			CHECK(bth_ackreq(p->buf), "%s: no AckReq on the LAST", what);
		}
		off += want_len[i];
	}
out:
	mem_down(&m);
	rig_down(&r);
}

/* The cut follows the QP's path MTU: §7's example v15, 600 bytes at 256
 * -> FIRST 256 (RETH length 600), MIDDLE 256, LAST 88. */
static void test_req_write_mtu256(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct conn c = conn_default;
	static const uint8_t want_op[3] = { OP_RC_WRITE_FIRST, OP_RC_WRITE_MIDDLE, OP_RC_WRITE_LAST };
	static const uint32_t want_len[3] = { 256, 256, 88 };

	c.mtu = IBV_MTU_256;
	if (!rig_up_with(&r, &c) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	pattern(m.host, 4096, 42);
	struct ibv_sge sge = { m.iova, 600, m.mr->lkey };
	post_send(&r, 0x76, IBV_WR_RDMA_WRITE, &sge, 1, 0x4000, 0x55);
	check_nsent(3, "600-byte WRITE at PMTU 256");
	uint32_t off = 0;
	for (unsigned i = 0; i < 3 && i < fake_sent_count(); i++) {
		const struct fake_pkt *p = fake_sent(i);
		if (!check_out(p, want_op[i], SQ_PSN + i, "WRITE at PMTU 256"))
			continue;
		CHECK(pkt_paylen(p) == want_len[i] && !memcmp(pkt_payload(p), m.host + off, want_len[i]),
		      "WRITE at PMTU 256, packet %u: %u bytes", i, pkt_paylen(p));
		off += want_len[i];
	}
	if (fake_sent_count())
		CHECK(reth_len(fake_sent(0)->buf + BTH_LEN) == 600, "RETH length %u",
		      reth_len(fake_sent(0)->buf + BTH_LEN));
out:
	mem_down(&m);
	rig_down(&r);
}

/* An RDMA READ: one READ request with the RETH and no payload, and it
 * consumes one PSN per response packet (§6.3). */
static void test_req_read(void)
{
	struct rig r;
	struct mem m = { 0 };
	const uint64_t raddr = 0xabcdef000ull;
	const uint32_t rkey = 0x1234;

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge sge = { m.iova, 3000, m.mr->lkey };
	post_send(&r, 0x73, IBV_WR_RDMA_READ, &sge, 1, raddr, rkey);
	check_nsent(1, "READ");
	const struct fake_pkt *p = fake_sent(0);
	if (check_out(p, OP_RC_READ_REQUEST, SQ_PSN, "READ request")) {
		const uint8_t *reth = p->buf + BTH_LEN;
		CHECK(p->len == BTH_LEN + RETH_LEN + ICRC_LEN, "READ request: %u bytes", p->len);
		CHECK(reth_va(reth) == raddr && reth_rkey(reth) == rkey && reth_len(reth) == 3000,
		      "READ request RETH va 0x%llx rkey 0x%x len %u", (unsigned long long)reth_va(reth),
		      reth_rkey(reth), reth_len(reth));
	}
	CHECK(untouched(&m, 0, m.alloc), "READ wrote its buffer before any response");
	fake_sent_clear();
	struct ibv_sge s2 = { m.iova + 3000, 8, m.mr->lkey };
	post_send(&r, 0x74, IBV_WR_SEND, &s2, 1, 0, 0);
	check_nsent(1, "SEND after the READ");
	check_out(fake_sent(0), OP_RC_SEND_ONLY, SQ_PSN + 3, "SEND after a 3-packet READ");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A READ is asked in chunks of 128 KiB of responses (requester.c
 * READ_CHUNK_BYTES), each its own request at the PSN of its first response
 * (§6.3): 300 KiB at the rig's path MTU 1024 is 128 + 128 + 44 packets, three
 * requests within max_rd_atomic 4. */
static void test_req_read_chunks(void)
{
	struct rig r;
	struct mem m = { 0 };
	const uint32_t len = 300 * 1024;
	const uint64_t raddr = 0x10000000ull;

	if (!rig_up(&r) || !mem_up(&m, len, len, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge sge = { m.iova, len, m.mr->lkey };
	post_send(&r, 0x76, IBV_WR_RDMA_READ, &sge, 1, raddr, 0x1234);
	check_nsent(3, "300 KiB READ: three chunk requests");
	static const uint32_t pkts[3] = { 128, 128, 44 };
	uint32_t psn = SQ_PSN, off = 0;
	for (unsigned i = 0; i < 3 && i < fake_sent_count(); i++) {
		const struct fake_pkt *p = fake_sent(i);
		if (!check_out(p, OP_RC_READ_REQUEST, psn, "READ chunk request"))
			break;
		const uint8_t *reth = p->buf + BTH_LEN;
		CHECK(reth_va(reth) == raddr + off && reth_len(reth) == pkts[i] * 1024,
		      "chunk %u: va +%llu len %u", i, (unsigned long long)(reth_va(reth) - raddr), reth_len(reth));
		psn += pkts[i];
		off += pkts[i] * 1024;
	}
out:
	mem_down(&m);
	rig_down(&r);
}

/* At most the window unacknowledged: by default 512 KiB of packets at the
 * path MTU (cc.h cc_window_max; the rig's is 1024, so 512 packets).  A
 * 600-packet SEND stops at 512, an ACK of 64 lets 64 more go. */
static void test_req_window(void)
{
	struct rig r;
	struct mem m = { 0 };
	const uint32_t len = 600 * 1024;

	if (!rig_up(&r) || !mem_up(&m, len, len, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge sge = { m.iova, len, m.mr->lkey };
	post_send(&r, 0x75, IBV_WR_SEND, &sge, 1, 0, 0);
	check_nsent(512, "600-packet SEND, window 512");
	bool in_order = true;
	for (unsigned i = 0; i < fake_sent_count(); i++)
		in_order &= bth_psn(fake_sent(i)->buf) == SQ_PSN + i;
	CHECK(in_order, "window: PSNs not consecutive");
	fake_sent_clear();
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN + 63, AETH_ACK_UNLIMITED, 0, NULL, 0);
	deliver();
	check_nsent(64, "after an ACK of 64 packets");
	if (fake_sent_count())
		check_out(fake_sent(0), OP_RC_SEND_MIDDLE, SQ_PSN + 512, "first packet the ACK let go");
out:
	mem_down(&m);
	rig_down(&r);
}

/* Posts that join a stream (sq/post.c, post_cork): a one-packet WRITE
 * posted while an earlier one is unacknowledged waits, and leaves -- in
 * order, its PSNs as posted -- when UROCE_CORK_PKTS wait, when a CQ is
 * polled or armed, when a response of the QP comes, or with a post that may
 * not wait; nothing in flight, or an owed ACK, sends at once.  A QP
 * destroyed with posts waiting leaves the device's list. */
static void cork_write(struct rig *r, struct mem *m, uint64_t wr_id, uint32_t len)
{
	struct ibv_sge sge = { m->iova, len, m->mr->lkey };
	post_send(r, wr_id, IBV_WR_RDMA_WRITE, &sge, 1, 0x10000 + wr_id * 64, 0x1234);
}

/* Longer than completer.c's CORK_IDLE_NS since the last post: a response
 * now ends a hold the application stopped adding to (a lower bound: a
 * slower run waits longer, to the same effect). */
static void cork_idle(void)
{
	uint64_t t0 = now_ns();
	while (now_ns() - t0 < 20000)
		;
}

/* An ACK of psn (MSN msn) comes in; then n packets are on the fake wire. */
static void ack_then_nsent(struct rig *r, uint32_t psn, uint32_t msn, unsigned n, const char *what)
{
	queue_resp(OP_RC_ACK, r->qpn, psn, AETH_ACK_UNLIMITED, msn, NULL, 0);
	deliver();
	check_nsent(n, what);
}

/* 64-byte WRITEs wr_id from..to posted; then n packets are on the fake wire. */
static void cork_writes(struct rig *r, struct mem *m, uint64_t from, uint64_t to, unsigned n, const char *what)
{
	for (uint64_t id = from; id <= to; id++)
		cork_write(r, m, id, 64);
	check_nsent(n, what);
}

static void check_psns(unsigned from, unsigned n, uint32_t psn, const char *what)
{
	for (unsigned i = 0; i < n && from + i < fake_sent_count(); i++)
		CHECK(bth_psn(fake_sent(from + i)->buf) == psn + i, "%s: packet %u has PSN 0x%x, expected 0x%x", what,
		      from + i, bth_psn(fake_sent(from + i)->buf), psn + i);
}

static void test_req_cork(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[32];
	unsigned cork = dev->cfg.cork_pkts, defer_us = dev->cfg.ack_defer_us;

	dev->cfg.cork_pkts = 4;
	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	cork_write(&r, &m, 1, 64);
	check_nsent(1, "a WRITE with nothing in flight");
	cork_write(&r, &m, 2, 64);
	check_nsent(1, "a WRITE behind an unacknowledged one");
	CHECK(uroce_poll_cq(r.scq, 4, wc) == 0, "a poll found a completion before any ACK");
	check_nsent(2, "after a CQ poll");
	check_psns(0, 2, SQ_PSN, "poll");

	/* 4 waiting leave together, the 4th with the first three */
	cork_writes(&r, &m, 3, 5, 2, "three WRITEs waiting");
	cork_write(&r, &m, 6, 64);
	check_nsent(6, "the 4th waiting WRITE");
	check_psns(2, 4, SQ_PSN + 2, "four at once");

	/* a response of the QP sends what waits (two: a hold that was joined) */
	cork_write(&r, &m, 7, 64);
	cork_write(&r, &m, 8, 64);
	check_nsent(6, "two WRITEs behind six");
	ack_then_nsent(&r, SQ_PSN, 1, 8, "after the ACK of the 1st");
	check_psns(6, 2, SQ_PSN + 6, "ACK");
	/* a slow run may have seen that as a miss (test_req_cork_bounds) */
	to_uqp(r.qp)->req.cork_backoff = (struct uroce_backoff){ 0 };
	CHECK(cq_take(r.scq, wc, 32) == 1, "the ACK of the 1st: not 1 completion");

	/* a post that may not wait (two packets) takes the waiting one along */
	cork_write(&r, &m, 9, 64);
	check_nsent(8, "a WRITE behind eight");
	cork_write(&r, &m, 10, 2000);
	check_nsent(11, "a two-packet WRITE");
	check_psns(8, 3, SQ_PSN + 8, "two-packet WRITE");

	/* arming a CQ sends what waits */
	cork_write(&r, &m, 11, 64);
	check_nsent(11, "a WRITE behind eleven packets");
	CHECK(uroce_req_notify_cq(r.scq, 0) == 0, "req_notify_cq");
	check_nsent(12, "after arming the CQ");

	/* everything acknowledged: completions of all, in order; then nothing
	 * is in flight and a post sends at once */
	ack_then_nsent(&r, SQ_PSN + 11, 11, 12, "after the ACK of all");
	int n = cq_take(r.scq, wc, 32);
	CHECK(n == 10, "the ACK of all: %d completions, expected 10", n);
	for (int i = 0; i < n; i++)
		CHECK(wc[i].wr_id == (uint64_t)i + 2 && wc[i].status == IBV_WC_SUCCESS, "completion %d: wr_id %llu status %d",
		      i, (unsigned long long)wc[i].wr_id, wc[i].status);
	cork_write(&r, &m, 12, 64);
	check_nsent(13, "a WRITE with everything acknowledged");

	/* an owed ACK waiting for a ride (ack.c: the fake turns waits off, a
	 * QP whose rides paid waits) goes now, with the post */
	dev->cfg.ack_defer_us = 1000;
	to_uqp(r.qp)->ack.ride_hits = 1;
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN, true, m.iova, m.mr->rkey, 8, m.host + 2048, 8);
	deliver();
	check_nsent(13, "an ACK owed, waiting for a ride");
	cork_write(&r, &m, 13, 64);
	check_nsent(15, "a post with an ACK owed");
	if (fake_sent_count() == 15) {
		check_out(fake_sent(13), OP_RC_WRITE_ONLY, SQ_PSN + 13, "the post with an ACK owed");
		check_out(fake_sent(14), OP_RC_ACK, RQ_PSN, "the ACK that rode it");
	}
	dev->cfg.ack_defer_us = defer_us;

	/* destroyed with a post waiting: off the list */
	cork_write(&r, &m, 14, 64);
	CHECK(atomic_load(&dev->corked) == to_uqp(r.qp), "the QP with a post waiting is not listed");
out:
	mem_down(&m);
	rig_down(&r);
	CHECK(atomic_load(&dev->corked) == NULL, "a destroyed QP left on the list of corked QPs");
	dev->cfg.cork_pkts = cork;
	dev->cfg.ack_defer_us = defer_us;
	flush_acks(UINT64_MAX);
	fake_sent_clear();
}

/* The bounds of posts that join a stream: a hold that a response ends
 * well after its last post is a miss, and the QP sends its next 16 posts at
 * once, then holds again; a hold that fills resets that.  The retry timer runs the requester; a
 * READ and a post that adds no WQE (refused) never wait; RTS -> SQD sends
 * what waits; a QP destroyed with posts held sends the other listed QPs'
 * and leaves the list empty. */
static void test_req_cork_bounds(void)
{
	struct rig r, r2 = { 0 };
	struct mem m = { 0 };
	struct ibv_wc wc[32];
	unsigned cork = dev->cfg.cork_pkts;

	dev->cfg.cork_pkts = 16;
	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	/* a miss: the 1st's ACK comes well after the 2nd was held */
	cork_write(&r, &m, 1, 64);
	cork_write(&r, &m, 2, 64);
	check_nsent(1, "a WRITE held behind the 1st");
	cork_idle();
	ack_then_nsent(&r, SQ_PSN, 1, 2, "the held WRITE, after the 1st's ACK");
	cork_write(&r, &m, 3, 64);
	check_nsent(3, "a WRITE after a miss, at once");
	cork_writes(&r, &m, 4, 18, 18, "16 WRITEs after a miss, each at once");
	ack_then_nsent(&r, SQ_PSN + 17, 18, 18, "an ACK with nothing held");

	/* a hold that fills (16 packets) ends the backing off ... */
	cork_writes(&r, &m, 19, 34, 19, "15 WRITEs held behind the 19th");
	cork_writes(&r, &m, 35, 35, 35, "the 16th held WRITE");
	check_psns(0, 35, SQ_PSN, "a filled hold");
	ack_then_nsent(&r, SQ_PSN + 34, 35, 35, "the ACK of all");
	CHECK(cq_take(r.scq, wc, 32) == 32 && cq_take(r.scq, wc, 32) == 3, "not 35 completions");

	/* ... so the next miss backs off for 16 posts again, not 32 */
	cork_write(&r, &m, 36, 64);
	cork_write(&r, &m, 37, 64);
	cork_idle();
	ack_then_nsent(&r, SQ_PSN + 35, 36, 37, "a second miss");
	cork_writes(&r, &m, 38, 53, 53, "16 WRITEs after the second miss, each at once");
	cork_writes(&r, &m, 54, 54, 53, "the 17th WRITE after the second miss");

	/* the retry timer runs the requester: what waits goes once the window,
	 * cut by the timeout, lets it */
	fire_timers(&r, now_ns() + 60000000000ull);
	CHECK(to_uqp(r.qp)->req.corked == 0, "a post still held after the retry timer fired");
	fake_sent_clear();
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN + 52, AETH_ACK_UNLIMITED, 53, NULL, 0);
	deliver();
	bool held_sent = false;
	for (unsigned i = 0; i < fake_sent_count(); i++)
		held_sent |= bth_psn(fake_sent(i)->buf) == SQ_PSN + 53;
	CHECK(held_sent, "the held WRITE not sent after the retry");
	fake_sent_clear();
	ack_then_nsent(&r, SQ_PSN + 53, 54, 0, "the ACK of all");
	CHECK(cq_take(r.scq, wc, 32) == 19, "not 19 completions");

	/* a READ never waits */
	cork_write(&r, &m, 55, 64);
	struct ibv_sge rsge = { m.iova + 1024, 64, m.mr->lkey };
	post_send(&r, 56, IBV_WR_RDMA_READ, &rsge, 1, 0x20000, 0x1234);
	check_nsent(2, "a READ behind an unacknowledged WRITE");
	ack_then_nsent(&r, SQ_PSN + 54, 55, 2, "the WRITE's ACK");
	cq_take(r.scq, wc, 32);
	CHECK(uroce_poll_cq(r.scq, 32, wc) >= 0, "poll");
	check_nsent(2, "after a poll");
	fake_sent_clear();

	/* refused: no WQE, nothing held or listed anew */
	struct ibv_sge sge = { m.iova, 64, m.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 22, .sg_list = &sge, .num_sge = 99, .opcode = IBV_WR_RDMA_WRITE }, *bad;
	CHECK(uroce_post_send(r.qp, &wr, &bad) == EINVAL, "a WR with 99 SGEs not refused");
	CHECK(atomic_load(&dev->corked) == NULL, "a refused post listed its QP");

	/* RTS -> SQD: what waits starts before the drain */
	cork_write(&r, &m, 23, 64);  /* behind the READ, unanswered */
	cork_write(&r, &m, 24, 64);
	check_nsent(0, "two WRITEs held before SQD");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_SQD };
	CHECK(uroce_modify_qp(r.qp, &a, IBV_QP_STATE) == 0, "RTS -> SQD");
	check_nsent(2, "the held WRITEs, at RTS -> SQD");
	a.qp_state = IBV_QPS_RTS;
	CHECK(uroce_modify_qp(r.qp, &a, IBV_QP_STATE) == 0, "SQD -> RTS");

	/* two QPs with posts held; destroying one sends the other's */
	if (!rig_up(&r2))
		goto out;
	fake_sent_clear();
	cork_write(&r2, &m, 31, 64);
	cork_write(&r2, &m, 32, 64);
	cork_write(&r, &m, 27, 64);
	check_nsent(1, "two QPs with a WRITE held each");
	CHECK(uroce_destroy_qp(r.qp) == 0, "destroy the QP with a post held");
	r.qp = NULL;
	check_nsent(2, "the other QP's held WRITE, as the first is destroyed");
	if (fake_sent_count() == 2)
		CHECK(bth_qpn(fake_sent(1)->buf) == PEER_QPN && bth_psn(fake_sent(1)->buf) == SQ_PSN + 1,
		      "the held WRITE sent: PSN 0x%x", bth_psn(fake_sent(1)->buf));
	CHECK(atomic_load(&dev->corked) == NULL, "the list of QPs with posts held not empty");
out:
	mem_down(&m);
	rig_down(&r);
	rig_down(&r2);
	dev->cfg.cork_pkts = cork;
	flush_acks(UINT64_MAX);
	fake_sent_clear();
}

/* ============================================================ completer */

/* Three SENDs of 100 bytes each, signaled; returns their PSNs. */
static bool send_three(struct rig *r, struct mem *m, uint64_t wr_base, uint32_t psn[3])
{
	for (int i = 0; i < 3; i++) {
		struct ibv_sge sge = { m->iova + 100 * i, 100, m->mr->lkey };
		if (post_send(r, wr_base + i, IBV_WR_SEND, &sge, 1, 0, 0))
			return false;
	}
	check_nsent(3, "three SENDs");
	for (unsigned i = 0; i < 3; i++) {
		const struct fake_pkt *p = fake_sent(i);
		if (!check_out(p, OP_RC_SEND_ONLY, SQ_PSN + i, "SEND of three"))
			return false;
		psn[i] = bth_psn(p->buf);
	}
	fake_sent_clear();
	return true;
}

/* An ACK completes exactly the WQEs up to its PSN, in order (§6.5); an
 * old ACK is a duplicate (§6.6). */
static void test_comp_ack(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[4];
	uint32_t psn[3];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE) || !send_three(&r, &m, 0x81, psn))
		goto out;
	queue_resp(OP_RC_ACK, r.qpn, psn[1], AETH_ACK_UNLIMITED, 2, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 4) == 2, "ACK of the 2nd SEND: not 2 completions");
	check_wc(&wc[0], 0x81, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "1st SEND");
	check_wc(&wc[1], 0x82, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "2nd SEND");
	check_nsent(0, "after a plain ACK");
	queue_resp(OP_RC_ACK, r.qpn, psn[2], AETH_ACK_UNLIMITED, 3, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 4) == 1, "ACK of the 3rd SEND: not 1 completion");
	check_wc(&wc[0], 0x83, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "3rd SEND");
	queue_resp(OP_RC_ACK, r.qpn, psn[1], AETH_ACK_UNLIMITED, 2, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 4) == 0, "a duplicate ACK completed something");
	check_nsent(0, "after a duplicate ACK");
out:
	mem_down(&m);
	rig_down(&r);
}

/* An ACK of a middle packet of a message acknowledges it only partly:
 * nothing completes until its LAST is ACKed (§6.5). */
static void test_comp_partial_ack(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[2];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge sge = { m.iova, 2500, m.mr->lkey };
	post_send(&r, 0x89, IBV_WR_SEND, &sge, 1, 0, 0);
	check_nsent(3, "3-packet SEND");
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN + 1, AETH_ACK_UNLIMITED, 0, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 0, "an ACK of the 2nd of 3 packets completed the SEND");
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN + 2, AETH_ACK_UNLIMITED, 1, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 1, "ACK of the LAST: not 1 completion");
	check_wc(&wc[0], 0x89, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "3-packet SEND");
out:
	mem_down(&m);
	rig_down(&r);
}

/* NAK remote access error (§5.3): the WQE it names completes with
 * REM_ACCESS_ERR, the QP enters ERROR and the rest are flushed; the
 * PSNs before the NAK's are acknowledged by it (§6.5). */
static void nak_access(unsigned nak_at, uint64_t wr_base)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[4];
	uint32_t psn[3];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE) || !send_three(&r, &m, wr_base, psn))
		goto out;
	queue_resp(OP_RC_ACK, r.qpn, psn[nak_at], AETH_NAK_REM_ACCESS, nak_at, NULL, 0);
	deliver();
	int n = cq_take(r.scq, wc, 4);
	CHECK(n == 3, "NAK: %d completions, expected 3", n);
	for (unsigned i = 0; i < 3 && i < (unsigned)n; i++) {
		enum ibv_wc_status st = i < nak_at ? IBV_WC_SUCCESS : i == nak_at ? IBV_WC_REM_ACCESS_ERR
										  : IBV_WC_WR_FLUSH_ERR;
		check_wc(&wc[i], wr_base + i, st, IBV_WC_SEND, r.qpn, "after NAK remote access");
	}
	CHECK(qp_state(r.qp) == IBV_QPS_ERR, "requester QP not in ERROR after the NAK");
	check_nsent(0, "after a NAK remote access");
out:
	mem_down(&m);
	rig_down(&r);
}

static void test_comp_nak_access_oldest(void) { nak_access(0, 0x91); }
static void test_comp_nak_access_second(void) { nak_access(1, 0xa1); }

/* NAK sequence error (§6.6): what is before it completes, the rest goes
 * again from the NAK's PSN, in order. */
static void test_comp_seq_nak(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[4];
	uint32_t psn[3];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE) || !send_three(&r, &m, 0xb1, psn))
		goto out;
	pattern(m.host, 4096, 50);  /* the resend reads the buffers again */
	queue_resp(OP_RC_ACK, r.qpn, psn[1], AETH_NAK_PSN_SEQ, 1, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 4) == 1, "sequence NAK: not 1 completion");
	check_wc(&wc[0], 0xb1, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "SEND before the NAK");
	check_nsent(2, "go-back-N after a sequence NAK");
	for (unsigned i = 0; i < 2 && i < fake_sent_count(); i++) {
		const struct fake_pkt *p = fake_sent(i);
		if (check_out(p, OP_RC_SEND_ONLY, psn[1 + i], "resent SEND"))
			CHECK(pkt_paylen(p) == 100 && !memcmp(pkt_payload(p), m.host + 100 * (1 + i), 100),
			      "resent SEND %u: wrong data", i);
	}
	queue_resp(OP_RC_ACK, r.qpn, psn[2], AETH_ACK_UNLIMITED, 3, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 4) == 2, "ACK after the resend: not 2 completions");
	check_wc(&wc[0], 0xb2, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "resent 2nd SEND");
	check_wc(&wc[1], 0xb3, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "resent 3rd SEND");
out:
	mem_down(&m);
	rig_down(&r);
}

/* READ responses are placed in the local buffer in order; the READ
 * completes with the LAST, with its length. */
static void test_comp_read_response(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[2];
	uint8_t d[3000];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge sge = { m.iova + 32, sizeof(d), m.mr->lkey };
	post_send(&r, 0xc1, IBV_WR_RDMA_READ, &sge, 1, 0x5000, 0x99);
	check_nsent(1, "READ request");
	if (!check_out(fake_sent(0), OP_RC_READ_REQUEST, SQ_PSN, "READ request"))
		goto out;
	uint32_t psn = bth_psn(fake_sent(0)->buf);
	pattern(d, sizeof(d), 51);
	queue_resp(OP_RC_READ_RESP_FIRST, r.qpn, psn, AETH_ACK_UNLIMITED, 1, d, 1024);
	queue_resp(OP_RC_READ_RESP_MIDDLE, r.qpn, psn + 1, 0, 0, d + 1024, 1024);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 0, "READ completed before its LAST response");
	CHECK(!memcmp(m.host + 32, d, 2048), "FIRST and MIDDLE responses placed");
	queue_resp(OP_RC_READ_RESP_LAST, r.qpn, psn + 2, AETH_ACK_UNLIMITED, 1, d + 2048, 952);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 1, "READ: not 1 completion after the LAST");
	check_wc(&wc[0], 0xc1, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, r.qpn, "READ");
	CHECK(wc[0].byte_len == sizeof(d), "READ byte_len %u", wc[0].byte_len);
	CHECK(!memcmp(m.host + 32, d, sizeof(d)), "READ data in the local buffer");
	CHECK(untouched(&m, 0, 32) && untouched(&m, 32 + sizeof(d), m.alloc - 32 - sizeof(d)),
	      "READ wrote outside its buffer");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A FETCH_ADD: the request carries the AtomicETH; the ATOMIC ACK's
 * original value lands in the local 8 bytes (§2.2, §6.3). */
static void test_comp_atomic(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[2];
	struct pkt pk;
	const uint64_t orig = 0x0123456789abcdefull;

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge sge = { m.iova + 16, 8, m.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 0xd1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	wr.wr.atomic.remote_addr = 0x10000;
	wr.wr.atomic.rkey = 0x77;
	wr.wr.atomic.compare_add = 5;
	CHECK(uroce_post_send(r.qp, &wr, &bad) == 0, "post FETCH_ADD");
	check_nsent(1, "FETCH_ADD");
	const struct fake_pkt *p = fake_sent(0);
	if (!check_out(p, OP_RC_FETCH_ADD, SQ_PSN, "FETCH_ADD request"))
		goto out;
	const uint8_t *ae = p->buf + BTH_LEN;
	CHECK(atmeth_va(ae) == 0x10000 && atmeth_rkey(ae) == 0x77 && atmeth_swap_add(ae) == 5,
	      "FETCH_ADD AtomicETH va 0x%llx rkey 0x%x add %llu", (unsigned long long)atmeth_va(ae), atmeth_rkey(ae),
	      (unsigned long long)atmeth_swap_add(ae));
	CHECK(p->len == BTH_LEN + ATMETH_LEN + ICRC_LEN, "FETCH_ADD request: %u bytes", p->len);
	uint8_t *h = pkt_begin(&pk, OP_RC_ATOMIC_ACK, r.qpn, false, bth_psn(p->buf));
	aeth_set(h + BTH_LEN, AETH_ACK_UNLIMITED, 1);
	atmack_set(h + BTH_LEN + AETH_LEN, orig);
	pkt_queue(&pk, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 1, "FETCH_ADD: not 1 completion");
	check_wc(&wc[0], 0xd1, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD, r.qpn, "FETCH_ADD");
	CHECK(wc[0].byte_len == 8, "FETCH_ADD byte_len %u", wc[0].byte_len);
	uint64_t got;
	memcpy(&got, m.host + 16, 8);
	CHECK(got == orig, "FETCH_ADD original value 0x%llx in the local buffer", (unsigned long long)got);
	CHECK(untouched(&m, 0, 16) && untouched(&m, 24, m.alloc - 24), "FETCH_ADD wrote outside its 8 bytes");
out:
	mem_down(&m);
	rig_down(&r);
}

/* An ATOMIC_WRITE (§3, 0x1D): one request with a RETH of length 8 and the
 * 8 bytes taken from the local buffer when it was posted; answered only by
 * an empty READ_RESPONSE_ONLY -- a plain ACK past it is an implied NAK
 * (§6.6) that asks it again, as for a READ. */
static void test_comp_atomic_write(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[2];
	const uint8_t val[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	memcpy(m.host + 40, val, 8);
	struct ibv_sge sge = { m.iova + 40, 8, m.mr->lkey };
	post_send(&r, 0xe1, IBV_WR_ATOMIC_WRITE, &sge, 1, 0x20008, 0x55);
	memset(m.host + 40, 0xEE, 8);  /* taken at post time */
	check_nsent(1, "ATOMIC_WRITE");
	const struct fake_pkt *p = fake_sent(0);
	if (!check_out(p, OP_RC_ATOMIC_WRITE, SQ_PSN, "ATOMIC_WRITE request"))
		goto out;
	const uint8_t *reth = p->buf + BTH_LEN;
	CHECK(reth_va(reth) == 0x20008 && reth_rkey(reth) == 0x55 && reth_len(reth) == 8,
	      "ATOMIC_WRITE RETH va 0x%llx rkey 0x%x len %u", (unsigned long long)reth_va(reth), reth_rkey(reth),
	      reth_len(reth));
	CHECK(pkt_paylen(p) == 8 && !memcmp(p->buf + BTH_LEN + RETH_LEN, val, 8), "ATOMIC_WRITE payload: %u bytes",
	      pkt_paylen(p));
	fake_sent_clear();
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN, AETH_ACK_UNLIMITED, 1, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 0, "a plain ACK completed the ATOMIC_WRITE");
	check_nsent(1, "ATOMIC_WRITE asked again after an ACK past it");
	check_out(fake_sent(0), OP_RC_ATOMIC_WRITE, SQ_PSN, "ATOMIC_WRITE retry");
	queue_resp(OP_RC_READ_RESP_ONLY, r.qpn, SQ_PSN, AETH_ACK_UNLIMITED, 1, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 1, "ATOMIC_WRITE: not 1 completion after its response");
	check_wc(&wc[0], 0xe1, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, r.qpn, "ATOMIC_WRITE");
	CHECK(untouched(&m, 0, m.alloc), "ATOMIC_WRITE wrote local memory");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A response for a PSN never sent is ignored (§6.6). */
static void test_comp_ack_beyond(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[4];
	uint32_t psn[3];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE) || !send_three(&r, &m, 0x85, psn))
		goto out;
	queue_resp(OP_RC_ACK, r.qpn, psn[2] + 10, AETH_ACK_UNLIMITED, 3, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 4) == 0, "an ACK beyond anything sent completed something");
	check_nsent(0, "after an ACK beyond anything sent");
	CHECK(qp_state(r.qp) == IBV_QPS_RTS, "an ACK beyond anything sent changed the state");
out:
	mem_down(&m);
	rig_down(&r);
}

/* Implied NAK (§6.6): an ACK past a READ that got no response means the
 * response was lost -- the READ is asked again, and what follows it. */
static void test_comp_implied_nak(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[4];
	uint8_t d[3000];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge s1 = { m.iova, 3000, m.mr->lkey }, s2 = { m.iova + 3000, 8, m.mr->lkey };
	post_send(&r, 0xc5, IBV_WR_RDMA_READ, &s1, 1, 0x5000, 0x99);
	post_send(&r, 0xc6, IBV_WR_SEND, &s2, 1, 0, 0);
	check_nsent(2, "READ and SEND");
	fake_sent_clear();
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN + 3, AETH_ACK_UNLIMITED, 2, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 4) == 0, "implied NAK: something completed");
	check_nsent(2, "go-back-N from the READ");
	const struct fake_pkt *p = fake_sent(0);
	if (check_out(p, OP_RC_READ_REQUEST, SQ_PSN, "READ asked again"))
		CHECK(reth_va(p->buf + BTH_LEN) == 0x5000 && reth_len(p->buf + BTH_LEN) == 3000,
		      "READ asked again: va 0x%llx len %u", (unsigned long long)reth_va(p->buf + BTH_LEN),
		      reth_len(p->buf + BTH_LEN));
	check_out(fake_sent(1), OP_RC_SEND_ONLY, SQ_PSN + 3, "SEND after the READ sent again");
	pattern(d, sizeof(d), 86);
	queue_resp(OP_RC_READ_RESP_FIRST, r.qpn, SQ_PSN, AETH_ACK_UNLIMITED, 1, d, 1024);
	queue_resp(OP_RC_READ_RESP_MIDDLE, r.qpn, SQ_PSN + 1, 0, 0, d + 1024, 1024);
	queue_resp(OP_RC_READ_RESP_LAST, r.qpn, SQ_PSN + 2, AETH_ACK_UNLIMITED, 1, d + 2048, 952);
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN + 3, AETH_ACK_UNLIMITED, 2, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 4) == 2, "READ and SEND: not 2 completions");
	check_wc(&wc[0], 0xc5, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, r.qpn, "READ after the implied NAK");
	check_wc(&wc[1], 0xc6, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "SEND after the implied NAK");
	CHECK(!memcmp(m.host, d, sizeof(d)), "READ data after the implied NAK");
out:
	mem_down(&m);
	rig_down(&r);
}

/* A READ response missing: the rest is asked for again from the gap,
 * with the RETH advanced (§6.4, §6.6), and the READ completes whole. */
static void test_comp_read_gap(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[2];
	uint8_t d[3000];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge sge = { m.iova, sizeof(d), m.mr->lkey };
	post_send(&r, 0xc9, IBV_WR_RDMA_READ, &sge, 1, 0x5000, 0x99);
	fake_sent_clear();
	pattern(d, sizeof(d), 87);
	queue_resp(OP_RC_READ_RESP_FIRST, r.qpn, SQ_PSN, AETH_ACK_UNLIMITED, 1, d, 1024);
	queue_resp(OP_RC_READ_RESP_LAST, r.qpn, SQ_PSN + 2, AETH_ACK_UNLIMITED, 1, d + 2048, 952);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 0, "READ completed with a response missing");
	check_nsent(1, "READ asked again from the gap");
	const struct fake_pkt *p = fake_sent(0);
	if (check_out(p, OP_RC_READ_REQUEST, SQ_PSN + 1, "READ asked from the gap"))
		CHECK(reth_va(p->buf + BTH_LEN) == 0x5000 + 1024 && reth_len(p->buf + BTH_LEN) == 3000 - 1024 &&
		      reth_rkey(p->buf + BTH_LEN) == 0x99, "READ from the gap: va 0x%llx len %u",
		      (unsigned long long)reth_va(p->buf + BTH_LEN), reth_len(p->buf + BTH_LEN));
	queue_resp(OP_RC_READ_RESP_MIDDLE, r.qpn, SQ_PSN + 1, 0, 0, d + 1024, 1024);
	queue_resp(OP_RC_READ_RESP_LAST, r.qpn, SQ_PSN + 2, AETH_ACK_UNLIMITED, 1, d + 2048, 952);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 1, "READ: not 1 completion after the retry");
	check_wc(&wc[0], 0xc9, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, r.qpn, "READ after a gap");
	CHECK(!memcmp(m.host, d, sizeof(d)), "READ data after a gap");
out:
	mem_down(&m);
	rig_down(&r);
}

/* ============================================================ timers */

/* The local ACK timer (§6.6): the unacknowledged packet goes again with
 * AckReq; with retry_cnt spent the WQE completes RETRY_EXC_ERR. */
static void test_timer_retry(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct conn c = conn_default;
	struct ibv_wc wc[2];

	c.retry_cnt = 1;
	if (!rig_up_with(&r, &c) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	pattern(m.host, 4096, 60);
	struct ibv_sge sge = { m.iova, 100, m.mr->lkey };
	post_send(&r, 0xe1, IBV_WR_SEND, &sge, 1, 0, 0);
	check_nsent(1, "SEND");
	fake_sent_clear();
	fire_timers(&r, now_ns() + 1000000000ull);
	check_nsent(1, "ACK timeout");
	const struct fake_pkt *p = fake_sent(0);
	if (check_out(p, OP_RC_SEND_ONLY, SQ_PSN, "SEND resent at the timeout")) {
		CHECK(bth_ackreq(p->buf), "the resent SEND does not ask for an ACK");
		CHECK(pkt_paylen(p) == 100 && !memcmp(pkt_payload(p), m.host, 100), "resent SEND: wrong data");
	}
	CHECK(cq_take(r.scq, wc, 2) == 0, "a completion after one timeout of retry_cnt 1");
	fake_sent_clear();
	fire_timers(&r, now_ns() + 2000000000ull);
	check_nsent(0, "timeout with retry_cnt spent");
	CHECK(cq_take(r.scq, wc, 2) == 1, "retries spent: not 1 completion");
	check_wc(&wc[0], 0xe1, IBV_WC_RETRY_EXC_ERR, IBV_WC_SEND, r.qpn, "SEND out of retries");
	CHECK(qp_state(r.qp) == IBV_QPS_ERR, "QP not in ERROR after RETRY_EXC_ERR");
out:
	mem_down(&m);
	rig_down(&r);
}

/* An RNR NAK (§5.2): nothing goes again until its timer, then the NAKed
 * PSN does; nothing completes meanwhile. */
static void test_timer_rnr(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[2];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge sge = { m.iova, 100, m.mr->lkey };
	post_send(&r, 0xf1, IBV_WR_SEND, &sge, 1, 0, 0);
	fake_sent_clear();
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN, AETH_RNR_NAK | 1, 0, NULL, 0);
	deliver();
	check_nsent(0, "right after an RNR NAK");
	CHECK(cq_take(r.scq, wc, 2) == 0, "a completion after an RNR NAK");
	/* after the RNR wait (code 1: 10 us), before the ACK timer (67 ms at
	 * timeout 14) and the RTO floor (10 ms): only the RNR timer resends */
	fire_timers(&r, now_ns() + 1000000ull);
	check_nsent(1, "RNR timer");
	check_out(fake_sent(0), OP_RC_SEND_ONLY, SQ_PSN, "SEND resent after the RNR wait");
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN, AETH_ACK_UNLIMITED, 1, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 1, "ACK after the RNR retry: not 1 completion");
	check_wc(&wc[0], 0xf1, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "SEND after an RNR retry");
out:
	mem_down(&m);
	rig_down(&r);
}

/* The sequence NAK a responder sends for the packets behind an RNR NAKed
 * one may arrive after a short RNR wait, when the retry already went back
 * to that PSN: it is no new gap and spends no transport retry, so a slow
 * receiver under rnr_retry 7 never ends in RETRY_EXC_ERR (§6.6; found by
 * tests/stress/rc_stress over UDP). */
static void test_timer_rnr_then_seq_nak(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[2];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge sge = { m.iova, 100, m.mr->lkey };
	post_send(&r, 0xf2, IBV_WR_SEND, &sge, 1, 0, 0);
	/* more rounds than retry_cnt (7) allows */
	for (unsigned i = 0; i < 10; i++) {
		fake_sent_clear();
		queue_resp(OP_RC_ACK, r.qpn, SQ_PSN, AETH_RNR_NAK | 1, 0, NULL, 0);
		deliver();
		fire_timers(&r, now_ns() + 1000000ull);
		check_nsent(1, "RNR timer");
		queue_resp(OP_RC_ACK, r.qpn, SQ_PSN, AETH_NAK_PSN_SEQ, 0, NULL, 0);
		deliver();
		CHECK(cq_take(r.scq, wc, 2) == 0, "round %u: a completion (status %d) after RNR and sequence NAKs",
		      i, (int)wc[0].status);
	}
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN, AETH_ACK_UNLIMITED, 1, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 1, "ACK after the RNR rounds: not 1 completion");
	check_wc(&wc[0], 0xf2, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "SEND after RNR rounds");
out:
	mem_down(&m);
	rig_down(&r);
}

/* ============================================================ both ends */

/* Requester and responder on one device, the captured packets fed back:
 * a WRITE of 3 packets lands and its ACK completes it. */
static void test_loopback_write(void)
{
	struct rig a, b;
	struct mem src = { 0 }, dst = { 0 };
	struct ibv_wc wc[2];

	memset(&b, 0, sizeof(b));
	if (!rig_create(&a) || !rig_create(&b))
		goto out;
	struct conn ca = conn_default, cb = conn_default;
	ca.dgid = cb.dgid = local_gid;
	ca.dqpn = b.qpn;
	cb.dqpn = a.qpn;
	ca.sq_psn = cb.rq_psn = 0x777;
	if (!rig_connect(&a, &ca) || !rig_connect(&b, &cb))
		goto out;
	if (!mem_up(&src, 4096, 4096, IBV_ACCESS_LOCAL_WRITE) ||
	    !mem_up(&dst, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	pattern(src.host, 4096, 70);
	struct ibv_sge sge = { src.iova, 2600, src.mr->lkey };
	post_send(&a, 0x101, IBV_WR_RDMA_WRITE, &sge, 1, dst.iova + 100, dst.mr->rkey);
	check_nsent(3, "loopback WRITE");
	unsigned n = fake_sent_count();
	for (unsigned i = 0; i < n; i++)
		fake_rx_queue_sent(fake_sent(i));
	fake_sent_clear();
	deliver();
	CHECK(!memcmp(dst.host + 100, src.host, 2600), "loopback WRITE bytes in the target MR");
	CHECK(untouched(&dst, 0, 100) && untouched(&dst, 2700, dst.alloc - 2700), "loopback WRITE outside its range");
	check_nsent(1, "responder's ACK");
	const struct fake_pkt *ack = fake_sent(0);
	if (ack) {
		CHECK(bth_opcode(ack->buf) == OP_RC_ACK && bth_qpn(ack->buf) == a.qpn && bth_psn(ack->buf) == 0x779,
		      "loopback ACK: opcode 0x%02x QP 0x%x PSN 0x%x", bth_opcode(ack->buf), bth_qpn(ack->buf),
		      bth_psn(ack->buf));
		CHECK(pkt_icrc_ok(ack), "loopback ACK: bad ICRC");
		fake_rx_queue_sent(ack);
		fake_sent_clear();
		deliver();
	}
	CHECK(cq_take(a.scq, wc, 2) == 1, "loopback WRITE: not 1 completion");
	check_wc(&wc[0], 0x101, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, a.qpn, "loopback WRITE");
	check_nsent(0, "after the loopback ACK");
out:
	mem_down(&src);
	mem_down(&dst);
	rig_down(&a);
	rig_down(&b);
}

/* ============================================================ memory windows */

/* Two rigs of the device connected to each other (as test_loopback_write):
 * `a` the requester, `b` the target, whose `dst` MR (MW_BIND, local write,
 * no remote access of its own) the windows are bound over, so that every
 * remote access below can only come through a window (mem/mw.h). */
struct mwfix {
	struct rig a, b;
	struct mem src, dst, rbuf;
	struct ibv_mw *mw;
};

#define MW_OFF 1024u   /* the windows: dst bytes [MW_OFF, MW_OFF + MW_LEN) */
#define MW_LEN 2048u

/* What a and b send, fed back until nobody sends (both directions). */
static void pump(void)
{
	for (int round = 0; round < 16 && fake_sent_count(); round++) {
		unsigned n = fake_sent_count();
		for (unsigned i = 0; i < n; i++)
			fake_rx_queue_sent(fake_sent(i));
		fake_sent_clear();
		deliver();
	}
}

static bool mw_up(struct mwfix *f, unsigned dst_access)
{
	memset(f, 0, sizeof(*f));
	async_drain();
	if (!rig_create(&f->a) || !rig_create(&f->b))
		return false;
	struct conn ca = conn_default, cb = conn_default;
	ca.dgid = cb.dgid = local_gid;
	ca.dqpn = f->b.qpn;
	cb.dqpn = f->a.qpn;
	ca.sq_psn = cb.rq_psn = 0x1000;
	cb.sq_psn = ca.rq_psn = 0x2000;
	bool ok = rig_connect(&f->a, &ca) && rig_connect(&f->b, &cb) &&
		  mem_up(&f->src, 4096, 4096, IBV_ACCESS_LOCAL_WRITE) &&
		  mem_up(&f->dst, 8192, 8192, dst_access) &&
		  mem_up(&f->rbuf, 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(ok, "window rigs");
	pattern(f->src.host, 4096, 91);
	return ok;
}

static void mw_down(struct mwfix *f)
{
	if (f->mw)
		CHECK(uroce_dealloc_mw(f->mw) == 0, "dealloc MW");
	mem_down(&f->src);
	mem_down(&f->dst);
	mem_down(&f->rbuf);
	rig_down(&f->a);
	rig_down(&f->b);
	async_drain();
}

/* Post a BIND_MW on r's send queue: the completion's status (it must be
 * the only one, opcode IBV_WC_BIND_MW when it succeeds). */
static enum ibv_wc_status bind_wr(struct rig *r, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t addr,
				  uint64_t len, unsigned access, uint32_t rkey)
{
	struct ibv_send_wr wr = { .wr_id = 0xb1, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc[2];

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){ .mr = mr, .addr = addr, .length = len,
							  .mw_access_flags = access };
	CHECK(uroce_post_send(r->qp, &wr, &bad) == 0, "post BIND_MW");
	if (cq_take(r->scq, wc, 2) != 1) {
		CHECK(0, "BIND_MW: not one completion");
		return IBV_WC_GENERAL_ERR;
	}
	check_wc(&wc[0], 0xb1, wc[0].status, IBV_WC_BIND_MW, r->qpn, "BIND_MW");
	return wc[0].status;
}

/* A type 2 window of b over dst [MW_OFF, +MW_LEN) with `access`, bound by
 * b's QP; the key's low 8 bits are the bind's (IBA 10.6.7.2.4). */
static bool mw2_bound(struct mwfix *f, unsigned access)
{
	f->mw = uroce_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(f->mw, "alloc MW type 2");
	if (!f->mw)
		return false;
	uint32_t want = ibv_inc_rkey(f->mw->rkey);
	enum ibv_wc_status st = bind_wr(&f->b, f->mw, f->dst.mr, f->dst.iova + MW_OFF, MW_LEN, access, want);
	CHECK(st == IBV_WC_SUCCESS, "BIND_MW of a type 2 window: status %d", st);
	CHECK(f->mw->rkey == want, "window rkey 0x%x after the bind, expected 0x%x", f->mw->rkey, want);
	return st == IBV_WC_SUCCESS;
}

/* a's signaled WQE: its one completion's status. */
static enum ibv_wc_status a_status(struct mwfix *f, uint64_t wr_id, enum ibv_wc_opcode op, const char *what)
{
	struct ibv_wc wc[2];
	if (cq_take(f->a.scq, wc, 2) != 1) {
		CHECK(0, "%s: not one completion at the requester", what);
		return IBV_WC_GENERAL_ERR;
	}
	check_wc(&wc[0], wr_id, wc[0].status, op, f->a.qpn, what);
	return wc[0].status;
}

/* a WRITEs `len` bytes of src to b at `va` with `rkey`: a's status. */
static enum ibv_wc_status write_to_b(struct mwfix *f, uint64_t va, uint32_t rkey, uint32_t len, const char *what)
{
	struct ibv_sge sge = { f->src.iova, len, f->src.mr->lkey };
	post_send(&f->a, 0xa1, IBV_WR_RDMA_WRITE, &sge, 1, va, rkey);
	pump();
	return a_status(f, 0xa1, IBV_WC_RDMA_WRITE, what);
}

/* A refused remote access, seen from both sides: REM_ACCESS_ERR at the
 * requester (NAK 0x62, §5.3), the target's QP in ERROR with QP_FATAL, and
 * not a byte of the target's memory written. */
static void refused_both_sides(struct mwfix *f, enum ibv_wc_status st, const char *what)
{
	struct ibv_async_event ev;
	bool fatal = false;

	CHECK(st == IBV_WC_REM_ACCESS_ERR, "%s: requester status %d, expected REM_ACCESS_ERR", what, st);
	CHECK(qp_state(f->a.qp) == IBV_QPS_ERR, "%s: requester QP not in ERROR", what);
	CHECK(qp_state(f->b.qp) == IBV_QPS_ERR, "%s: target QP not in ERROR", what);
	while (async_take(&ev))
		fatal |= ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == f->b.qp;
	CHECK(fatal, "%s: no QP_FATAL on the target", what);
	CHECK(untouched(&f->dst, 0, f->dst.alloc), "%s: target memory written", what);
}

#define DST_MW_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)

/* A bound type 2 window: a WRITE inside it lands and nothing else moves;
 * a READ of it returns those bytes (the window's rkey through its QP). */
static void test_mw_type2_access(void)
{
	struct mwfix f;
	if (!mw_up(&f, DST_MW_ACCESS) || !mw2_bound(&f, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ))
		goto out;
	enum ibv_wc_status st = write_to_b(&f, f.dst.iova + MW_OFF + 100, f.mw->rkey, 600, "WRITE through a window");
	CHECK(st == IBV_WC_SUCCESS, "WRITE through a window: status %d", st);
	CHECK(!memcmp(f.dst.host + MW_OFF + 100, f.src.host, 600), "WRITE through a window: bytes not there");
	CHECK(untouched(&f.dst, 0, MW_OFF + 100) && untouched(&f.dst, MW_OFF + 700, f.dst.alloc - MW_OFF - 700),
	      "WRITE through a window wrote outside its range");
	/* the window's last byte is inside it */
	st = write_to_b(&f, f.dst.iova + MW_OFF + MW_LEN - 1, f.mw->rkey, 1, "WRITE of the window's last byte");
	CHECK(st == IBV_WC_SUCCESS, "WRITE of the window's last byte: status %d", st);
	struct ibv_sge sge = { f.src.iova + 2048, 600, f.src.mr->lkey };
	post_send(&f.a, 0xa2, IBV_WR_RDMA_READ, &sge, 1, f.dst.iova + MW_OFF + 100, f.mw->rkey);
	pump();
	st = a_status(&f, 0xa2, IBV_WC_RDMA_READ, "READ through a window");
	CHECK(st == IBV_WC_SUCCESS, "READ through a window: status %d", st);
	CHECK(!memcmp(f.src.host + 2048, f.src.host, 600), "READ through a window: bytes");
	/* the MR cannot go while the window is bound (IBA 10.6.7.2.6, rxe) */
	CHECK(uroce_dereg_mr(f.dst.mr) == EINVAL, "dereg of an MR with a bound window not refused EINVAL");
out:
	mw_down(&f);
}

/* A zero-based type 2 window: addresses are offsets into the window. */
static void test_mw_zero_based(void)
{
	struct mwfix f;
	if (!mw_up(&f, DST_MW_ACCESS) || !mw2_bound(&f, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED))
		goto out;
	enum ibv_wc_status st = write_to_b(&f, 100, f.mw->rkey, 300, "WRITE at offset 100 of a zero-based window");
	CHECK(st == IBV_WC_SUCCESS, "zero-based WRITE: status %d", st);
	CHECK(!memcmp(f.dst.host + MW_OFF + 100, f.src.host, 300), "zero-based WRITE: not at the window's offset");
	CHECK(untouched(&f.dst, 0, MW_OFF + 100) && untouched(&f.dst, MW_OFF + 400, f.dst.alloc - MW_OFF - 400),
	      "zero-based WRITE outside its range");
	/* offset MW_LEN - 100, 200 bytes: past the window */
	memset(f.dst.host + MW_OFF + 100, 0xEE, 300);
	st = write_to_b(&f, MW_LEN - 100, f.mw->rkey, 200, "zero-based WRITE past the window");
	refused_both_sides(&f, st, "zero-based WRITE past the window");
out:
	mw_down(&f);
}

/* A WRITE of `len` bytes at dst offset `off` through a type 2 window with
 * `access`, refused: past or before the window though inside the MR, or
 * an access the window does not give. */
static void window_refused(const char *what, unsigned access, uint32_t off, uint32_t len)
{
	struct mwfix f;
	if (mw_up(&f, DST_MW_ACCESS) && mw2_bound(&f, access))
		refused_both_sides(&f, write_to_b(&f, f.dst.iova + off, f.mw->rkey, len, what), what);
	mw_down(&f);
}

static void test_mw_past_bounds(void)
{
	window_refused("WRITE past the window's end", IBV_ACCESS_REMOTE_WRITE, MW_OFF + MW_LEN - 100, 200);
	window_refused("WRITE starting before the window", IBV_ACCESS_REMOTE_WRITE, MW_OFF - 8, 64);
}

static void test_mw_access_lacking(void)
{
	window_refused("WRITE to a read-only window", IBV_ACCESS_REMOTE_READ, MW_OFF, 64);
}

/* Post a LOCAL_INV of rkey on r's send queue: its one completion's status. */
static enum ibv_wc_status local_inv(struct rig *r, uint32_t rkey)
{
	struct ibv_send_wr wr = { .wr_id = 0xb2, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
				  .invalidate_rkey = rkey }, *bad;
	struct ibv_wc wc[2];

	CHECK(uroce_post_send(r->qp, &wr, &bad) == 0, "post LOCAL_INV");
	if (cq_take(r->scq, wc, 2) != 1) {
		CHECK(0, "LOCAL_INV: not one completion");
		return IBV_WC_GENERAL_ERR;
	}
	check_wc(&wc[0], 0xb2, wc[0].status, IBV_WC_LOCAL_INV, r->qpn, "LOCAL_INV");
	return wc[0].status;
}

/* Revoked by LOCAL_INV: completes IBV_WC_LOCAL_INV; the rkey is dead. */
static void test_mw_local_inv(void)
{
	struct mwfix f;
	if (!mw_up(&f, DST_MW_ACCESS) || !mw2_bound(&f, IBV_ACCESS_REMOTE_WRITE))
		goto out;
	enum ibv_wc_status st = local_inv(&f.b, f.mw->rkey);
	CHECK(st == IBV_WC_SUCCESS, "LOCAL_INV of a bound type 2 window: status %d", st);
	st = write_to_b(&f, f.dst.iova + MW_OFF, f.mw->rkey, 64, "WRITE after LOCAL_INV");
	refused_both_sides(&f, st, "WRITE with an rkey revoked by LOCAL_INV");
out:
	mw_down(&f);
}

/* Revoked by the peer's SEND_WITH_INVALIDATE: the receive completes with
 * IBV_WC_WITH_INV and the invalidated rkey; the rkey is dead after it. */
static void test_mw_send_with_inv(void)
{
	struct mwfix f;
	struct ibv_wc wc[2];
	if (!mw_up(&f, DST_MW_ACCESS) || !mw2_bound(&f, IBV_ACCESS_REMOTE_WRITE))
		goto out;
	post_recv(&f.b, 0xc1, &f.rbuf, 0, 4096);
	struct ibv_sge sge = { f.src.iova, 100, f.src.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 0xa3, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				  .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = f.mw->rkey }, *bad;
	CHECK(uroce_post_send(f.a.qp, &wr, &bad) == 0, "post SEND_WITH_INV");
	pump();
	enum ibv_wc_status st = a_status(&f, 0xa3, IBV_WC_SEND, "SEND_WITH_INV");
	CHECK(st == IBV_WC_SUCCESS, "SEND_WITH_INV: status %d", st);
	CHECK(cq_take(f.b.rcq, wc, 2) == 1, "SEND_WITH_INV: not one receive completion");
	check_wc(&wc[0], 0xc1, IBV_WC_SUCCESS, IBV_WC_RECV, f.b.qpn, "receive of a SEND_WITH_INV");
	CHECK((wc[0].wc_flags & IBV_WC_WITH_INV) && wc[0].invalidated_rkey == f.mw->rkey,
	      "receive of a SEND_WITH_INV: flags 0x%x invalidated_rkey 0x%x", wc[0].wc_flags, wc[0].invalidated_rkey);
	CHECK(!memcmp(f.rbuf.host, f.src.host, 100), "SEND_WITH_INV: payload");
	st = write_to_b(&f, f.dst.iova + MW_OFF, f.mw->rkey, 64, "WRITE after SEND_WITH_INV");
	refused_both_sides(&f, st, "WRITE with an rkey revoked by SEND_WITH_INV");
out:
	mw_down(&f);
}

/* Deallocated: the rkey of a freed window is refused. */
static void test_mw_dealloc(void)
{
	struct mwfix f;
	if (!mw_up(&f, DST_MW_ACCESS) || !mw2_bound(&f, IBV_ACCESS_REMOTE_WRITE))
		goto out;
	uint32_t rkey = f.mw->rkey;
	CHECK(uroce_dealloc_mw(f.mw) == 0, "dealloc a bound window");
	f.mw = NULL;
	enum ibv_wc_status st = write_to_b(&f, f.dst.iova + MW_OFF, rkey, 64, "WRITE after dealloc");
	refused_both_sides(&f, st, "WRITE with a deallocated window's rkey");
out:
	mw_down(&f);
}

/* A type 2 window bound by another QP (c, same PD) is not b's. */
static void test_mw_type2_other_qp(void)
{
	struct mwfix f;
	struct rig c;
	memset(&c, 0, sizeof(c));
	if (!mw_up(&f, DST_MW_ACCESS) || !rig_up(&c))
		goto out;
	f.mw = uroce_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(f.mw, "alloc MW type 2");
	if (!f.mw)
		goto out;
	uint32_t key = ibv_inc_rkey(f.mw->rkey);
	CHECK(bind_wr(&c, f.mw, f.dst.mr, f.dst.iova + MW_OFF, MW_LEN, IBV_ACCESS_REMOTE_WRITE, key) ==
	      IBV_WC_SUCCESS, "BIND_MW by QP c");
	enum ibv_wc_status st = write_to_b(&f, f.dst.iova + MW_OFF, key, 64, "WRITE through another QP");
	refused_both_sides(&f, st, "a type 2 window used through another QP");
out:
	mw_down(&f);
	rig_down(&c);
}

/* A type 1 window of another PD (bound to an MR of that PD) is refused
 * through b, whose QP is of `pd`. */
static void test_mw_other_pd(void)
{
	struct mwfix f;
	struct ibv_pd *pd2 = NULL;
	struct ibv_mr *mr2 = NULL;
	struct ibv_mw *mw2 = NULL;
	struct ibv_wc wc[2];

	if (!mw_up(&f, DST_MW_ACCESS))
		goto out;
	pd2 = uroce_alloc_pd(ctx);
	mr2 = pd2 ? uroce_reg_mr_iova(pd2, f.dst.host, 8192, f.dst.iova, DST_MW_ACCESS) : NULL;
	mw2 = mr2 ? uroce_alloc_mw(pd2, IBV_MW_TYPE_1) : NULL;
	CHECK(mw2, "PD 2, its MR and its type 1 window");
	if (!mw2)
		goto out;
	struct ibv_mw_bind b = { .wr_id = 0xb3, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = { .mr = mr2, .addr = f.dst.iova + MW_OFF, .length = MW_LEN,
						.mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	uint32_t old = mw2->rkey;
	CHECK(uroce_bind_mw(f.b.qp, mw2, &b) == 0, "ibv_bind_mw type 1");
	CHECK(mw2->rkey == ibv_inc_rkey(old), "type 1 bind: rkey 0x%x, expected 0x%x", mw2->rkey, ibv_inc_rkey(old));
	CHECK(cq_take(f.b.scq, wc, 2) == 1, "type 1 bind: not one completion");
	check_wc(&wc[0], 0xb3, IBV_WC_SUCCESS, IBV_WC_BIND_MW, f.b.qpn, "type 1 bind");
	enum ibv_wc_status st = write_to_b(&f, f.dst.iova + MW_OFF, mw2->rkey, 64, "WRITE with another PD's window");
	refused_both_sides(&f, st, "a window of another PD");
out:
	if (mw2)
		CHECK(uroce_dealloc_mw(mw2) == 0, "dealloc MW of PD 2");
	if (mr2)
		CHECK(uroce_dereg_mr(mr2) == 0, "dereg MR of PD 2");
	if (pd2)
		CHECK(uroce_dealloc_pd(pd2) == 0, "dealloc PD 2");
	mw_down(&f);
}

/* A type 1 window of b over dst [MW_OFF, +MW_LEN), REMOTE_WRITE, bound by
 * ibv_bind_mw through b's QP (`binds` times: each bind a new rkey); the
 * bind completions are taken. */
static bool mw1_bound(struct mwfix *f, int binds, uint32_t *first_key)
{
	struct ibv_wc wc[4];
	f->mw = uroce_alloc_mw(pd, IBV_MW_TYPE_1);
	CHECK(f->mw, "alloc MW type 1");
	if (!f->mw)
		return false;
	struct ibv_mw_bind b = { .wr_id = 0xb4, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = { .mr = f->dst.mr, .addr = f->dst.iova + MW_OFF, .length = MW_LEN,
						.mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	for (int i = 0; i < binds; i++) {
		CHECK(uroce_bind_mw(f->b.qp, f->mw, &b) == 0, "ibv_bind_mw type 1");
		if (i == 0 && first_key)
			*first_key = f->mw->rkey;
	}
	int n = cq_take(f->b.scq, wc, 4);
	CHECK(n == binds, "%d type 1 binds: %d completions", binds, n);
	for (int i = 0; i < n; i++)
		check_wc(&wc[i], 0xb4, IBV_WC_SUCCESS, IBV_WC_BIND_MW, f->b.qpn, "type 1 bind");
	return n == binds;
}

/* Type 1: a rebind makes the old rkey dead, a zero-length bind unbinds;
 * LOCAL_INV and SEND_WITH_INV cannot invalidate a type 1 window
 * (o10-37.2.26): LOC_QP_OP_ERR, and REM_INV_REQ_ERR at both sides. */
static void test_mw_type1_rules(void)
{
	struct mwfix f;
	uint32_t first = 0;
	if (!mw_up(&f, DST_MW_ACCESS) || !mw1_bound(&f, 2, &first))
		goto out;
	CHECK(f.mw->rkey != first, "a rebind kept the rkey");
	enum ibv_wc_status st = write_to_b(&f, f.dst.iova + MW_OFF, f.mw->rkey, 64, "WRITE with the new rkey");
	CHECK(st == IBV_WC_SUCCESS, "WRITE with the new rkey: status %d", st);
	memset(f.dst.host + MW_OFF, 0xEE, 64);
	/* LOCAL_INV of a type 1 window: LOC_QP_OP_ERR (rxe), b to ERROR */
	st = local_inv(&f.b, f.mw->rkey);
	CHECK(st == IBV_WC_LOC_QP_OP_ERR, "LOCAL_INV of a type 1 window: status %d", st);
	CHECK(qp_state(f.b.qp) == IBV_QPS_ERR, "a failed LOCAL_INV left the QP out of ERROR");
out:
	mw_down(&f);
}

static void test_mw_type1_stale_key(void)
{
	struct mwfix f;
	uint32_t first = 0;
	if (!mw_up(&f, DST_MW_ACCESS) || !mw1_bound(&f, 2, &first))
		goto out;
	enum ibv_wc_status st = write_to_b(&f, f.dst.iova + MW_OFF, first, 64, "WRITE with the rkey before a rebind");
	refused_both_sides(&f, st, "the rkey of before a type 1 rebind");
out:
	mw_down(&f);
}

static void test_mw_type1_unbound(void)
{
	struct mwfix f;
	struct ibv_wc wc[2];
	if (!mw_up(&f, DST_MW_ACCESS) || !mw1_bound(&f, 1, NULL))
		goto out;
	struct ibv_mw_bind b = { .wr_id = 0xb7, .send_flags = IBV_SEND_SIGNALED, .bind_info = { .mr = f.dst.mr } };
	CHECK(uroce_bind_mw(f.b.qp, f.mw, &b) == 0, "zero-length bind (unbind)");
	CHECK(cq_take(f.b.scq, wc, 2) == 1 && wc[0].status == IBV_WC_SUCCESS, "unbind completes");
	enum ibv_wc_status st = write_to_b(&f, f.dst.iova + MW_OFF, f.mw->rkey, 64, "WRITE to an unbound window");
	refused_both_sides(&f, st, "an unbound type 1 window");
out:
	mw_down(&f);
}

/* SEND_WITH_INV naming a type 1 window: the receive completes
 * REM_INV_REQ_ERR (rxe, class J), the sender gets NAK 0x61. */
static void test_mw_send_inv_type1(void)
{
	struct mwfix f;
	struct ibv_wc wc[2];
	if (!mw_up(&f, DST_MW_ACCESS))
		goto out;
	f.mw = uroce_alloc_mw(pd, IBV_MW_TYPE_1);
	if (!f.mw)
		goto out;
	post_recv(&f.b, 0xc2, &f.rbuf, 0, 4096);
	struct ibv_sge sge = { f.src.iova, 100, f.src.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 0xa4, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				  .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = f.mw->rkey }, *bad;
	CHECK(uroce_post_send(f.a.qp, &wr, &bad) == 0, "post SEND_WITH_INV");
	pump();
	enum ibv_wc_status st = a_status(&f, 0xa4, IBV_WC_SEND, "SEND_WITH_INV of a type 1 window");
	CHECK(st == IBV_WC_REM_INV_REQ_ERR, "SEND_WITH_INV of type 1: sender status %d", st);
	CHECK(cq_take(f.b.rcq, wc, 2) == 1, "SEND_WITH_INV of type 1: not one receive completion");
	check_wc(&wc[0], 0xc2, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, f.b.qpn, "receive of a refused invalidation");
	CHECK(qp_state(f.b.qp) == IBV_QPS_ERR, "target QP not in ERROR");
out:
	mw_down(&f);
}

/* Binding needs the MR's MW_BIND (C10-73), and a writable window needs the
 * MR's local write (C10-74); a refused bind completes MW_BIND_ERR and the
 * QP enters ERROR (rxe); the window stays unusable. */
static void bind_refused(const char *what, unsigned mr_access, uint64_t off, uint64_t len, unsigned access)
{
	struct mwfix f;
	if (!mw_up(&f, mr_access))
		goto out;
	f.mw = uroce_alloc_mw(pd, IBV_MW_TYPE_2);
	if (!f.mw)
		goto out;
	enum ibv_wc_status st = bind_wr(&f.b, f.mw, f.dst.mr, f.dst.iova + off, len, access, ibv_inc_rkey(f.mw->rkey));
	CHECK(st == IBV_WC_MW_BIND_ERR, "%s: bind status %d, expected MW_BIND_ERR", what, st);
	CHECK(qp_state(f.b.qp) == IBV_QPS_ERR, "%s: binding QP not in ERROR", what);
	CHECK(uroce_dereg_mr(f.dst.mr) == 0, "%s: the MR is not held by a refused bind", what);
	f.dst.mr = NULL;
out:
	mw_down(&f);
}

static void test_mw_bind_refused(void)
{
	bind_refused("MR without MW_BIND", IBV_ACCESS_LOCAL_WRITE, MW_OFF, MW_LEN, IBV_ACCESS_REMOTE_WRITE);
	bind_refused("writable window on an MR without local write", IBV_ACCESS_MW_BIND, MW_OFF, MW_LEN,
		     IBV_ACCESS_REMOTE_WRITE);
	bind_refused("window past the MR's end", DST_MW_ACCESS, 8192 - 100, 200, IBV_ACCESS_REMOTE_WRITE);
	CHECK(!uroce_alloc_mw(pd, (enum ibv_mw_type)3) && errno == EINVAL, "a type 3 window not refused EINVAL");
}

/* A BIND_MW still queued (the QP in SQD starts no new WQE) when its
 * window is deallocated: the requester finds the window gone from the key
 * table and completes the bind MW_BIND_ERR, never touching the freed
 * window (ASan saw the use after free before obj/mw.c fenced dealloc). */
static void test_mw_dealloc_with_bind_queued(void)
{
	struct mwfix f;
	struct ibv_wc wc[2];
	if (!mw_up(&f, DST_MW_ACCESS))
		goto out;
	struct ibv_mw *mw = uroce_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw, "alloc MW type 2");
	if (!mw)
		goto out;
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_SQD };
	CHECK(uroce_modify_qp(f.b.qp, &at, IBV_QP_STATE) == 0, "b to SQD");
	struct ibv_send_wr wr = { .wr_id = 0xb2, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){ .mr = f.dst.mr, .addr = f.dst.iova + MW_OFF,
							  .length = MW_LEN, .mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
	CHECK(uroce_post_send(f.b.qp, &wr, &bad) == 0, "post BIND_MW in SQD");
	CHECK(cq_take(f.b.scq, wc, 2) == 0, "the bind ran in SQD");
	CHECK(uroce_dealloc_mw(mw) == 0, "dealloc the window a queued bind names");
	at.qp_state = IBV_QPS_RTS;
	CHECK(uroce_modify_qp(f.b.qp, &at, IBV_QP_STATE) == 0, "b back to RTS");
	int n = cq_take(f.b.scq, wc, 2);
	CHECK(n == 1, "%d completions of the queued bind, want 1", n);
	if (n == 1)
		check_wc(&wc[0], 0xb2, IBV_WC_MW_BIND_ERR, IBV_WC_BIND_MW, f.b.qpn, "bind of a deallocated window");
	CHECK(uroce_dereg_mr(f.dst.mr) == 0, "the MR is not held by the failed bind");
	f.dst.mr = NULL;
out:
	mw_down(&f);
}

/* ------------------------------------------------------------ main */

static bool setup(void)
{
	fake_net_setenv();
	setenv("UROCE_RTO_MIN_US", "10000", 1);
	/* every post's packets on the fake wire at once; test_req_cork turns
	 * the wait of posts behind unacknowledged ones on */
	setenv("UROCE_CORK_PKTS", "0", 1);

	dev = uroce_dev_open(&fake_net_ops, false);
	if (!dev) {
		perror("uroce_dev_open");
		return false;
	}
	if (dev->cfg.ngids < 1 || memcmp(dev->cfg.gids[0], local_gid, 16)) {
		fprintf(stderr, "GID 0 is not ::ffff:198.18.0.1\n");
		return false;
	}
	ctx = &uctx.vctx.context;
	if (fake_context_init(&uctx, dev))
		return false;
	pd = uroce_alloc_pd(ctx);
	return pd != NULL;
}

static void teardown(void)
{
	if (pd)
		CHECK(uroce_dealloc_pd(pd) == 0, "dealloc PD");
	free(uctx.async_q);
	pthread_mutex_destroy(&uctx.async_lock);
	pthread_mutex_destroy(&ctx->mutex);
	close(ctx->async_fd);
	uroce_dev_close(dev);
}

/* ============================================================ memory at execution */

/* A receive whose memory no longer holds when the SEND lands (mem.h: the
 * receive's SGEs are checked as data is placed, not at post time): the
 * receive completes LOC_PROT_ERR (mlx5), the requester gets NAK Remote
 * Operational Error 0x63 (§5.3; rxe's malformed WQE) with the SEND's PSN
 * and MSN 0, the QP enters ERR with QP_FATAL, and no byte is written. */
static void recv_refused(struct rig *r, uint64_t wr_id, const char *what)
{
	struct ibv_wc wc[4];
	struct ibv_async_event ev;
	uint8_t d[300];

	pattern(d, sizeof(d), 60);
	queue_send(OP_RC_SEND_ONLY, r->qpn, RQ_PSN, true, d, sizeof(d));
	deliver();
	int n = cq_take(r->rcq, wc, 4);
	CHECK(n == 1, "%s: %d receive completions, want 1", what, n);
	if (n >= 1)
		check_wc(&wc[0], wr_id, IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, r->qpn, what);
	check_nsent(1, what);
	check_aeth(fake_sent(0), RQ_PSN, AETH_NAK_REM_OP, 0, what);
	CHECK(qp_state(r->qp) == IBV_QPS_ERR, "%s: QP not in ERR", what);
	CHECK(async_take(&ev) && ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == r->qp,
	      "%s: no QP_FATAL event", what);
}

/* ibv_rereg_mr of the translation after a receive was posted (pyverbs
 * test_mr_rereg_addr): new keys, and the receive must not land in the old
 * buffer nor in the new one. */
static void test_mem_recv_then_rereg_addr(void)
{
	struct rig r;
	struct mem m = { 0 };
	uint8_t *nbuf = aligned_alloc(4096, 4096);

	async_drain();
	if (!nbuf || !rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	memset(nbuf, 0xEE, 4096);
	post_recv(&r, 0x601, &m, 0, 4096);
	uint32_t lkey = m.mr->lkey, rkey = m.mr->rkey;
	CHECK(uroce_rereg_mr(m.mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, nbuf, 4096, 0) == 0, "rereg translation");
	CHECK(m.mr->lkey != lkey && m.mr->rkey != rkey, "a new translation kept its keys");
	CHECK(m.mr->addr == nbuf && m.mr->length == 4096, "rereg: addr/length not the new ones");
	recv_refused(&r, 0x601, "SEND after rereg(addr)");
	CHECK(untouched(&m, 0, m.alloc), "the SEND landed in the old buffer");
	bool clean = true;
	for (int i = 0; i < 4096; i++)
		clean = clean && nbuf[i] == 0xEE;
	CHECK(clean, "the SEND landed in the new buffer");
out:
	mem_down(&m);
	rig_down(&r);
	free(nbuf);
	async_drain();
}

/* ibv_rereg_mr of the PD after a receive was posted (pyverbs
 * test_mr_rereg_pd): the keys stay, and the receive's PD no longer
 * matches the MR's. */
static void test_mem_recv_then_rereg_pd(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_pd *pd2 = uroce_alloc_pd(ctx);

	async_drain();
	if (!pd2 || !rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	post_recv(&r, 0x602, &m, 0, 4096);
	uint32_t lkey = m.mr->lkey, rkey = m.mr->rkey;
	CHECK(uroce_rereg_mr(m.mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0, "rereg PD");
	CHECK(m.mr->lkey == lkey && m.mr->rkey == rkey, "a PD change renewed the keys");
	CHECK(m.mr->pd == pd2, "rereg: the MR's PD not the new one");
	recv_refused(&r, 0x602, "SEND after rereg(PD)");
	CHECK(untouched(&m, 0, m.alloc), "the SEND landed in an MR of another PD");
out:
	mem_down(&m);
	rig_down(&r);
	if (pd2)
		CHECK(uroce_dealloc_pd(pd2) == 0, "dealloc the second PD");
	async_drain();
}

/* ibv_dereg_mr(3) of an MR a posted receive uses returns 0; the memory is
 * unmapped, then the SEND arrives: the receive fails, nothing is touched
 * (the old code wrote into the unmapped page: SIGSEGV). */
static void test_mem_recv_then_dereg_munmap(void)
{
	struct rig r;
	uint8_t *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	async_drain();
	if (p == MAP_FAILED || !rig_up(&r))
		goto out;
	struct ibv_mr *mr = uroce_reg_mr_iova(pd, p, 4096, (uintptr_t)p, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "register the mapped page");
	if (!mr)
		goto out;
	struct ibv_sge sge = { (uintptr_t)p, 4096, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 0x603, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(uroce_post_recv(r.qp, &wr, &bad) == 0, "post_recv");
	CHECK(uroce_dereg_mr(mr) == 0, "dereg an MR a posted receive uses");
	CHECK(munmap(p, 4096) == 0, "munmap");
	p = MAP_FAILED;
	recv_refused(&r, 0x603, "SEND after dereg + munmap");
out:
	if (p != MAP_FAILED)
		munmap(p, 4096);
	rig_down(&r);
	async_drain();
}

/* A SEND posted but not yet executed (IBV_SEND_FENCE behind a READ,
 * IBA 10.8.3.3) whose MR is then deregistered and freed: when the READ
 * completes, the SEND fails LOC_PROT_ERR without a packet (its memory is
 * never read) and the QP enters ERR; the READ completes first. */
static void test_mem_send_then_dereg(void)
{
	struct rig r;
	struct mem a = { 0 }, s = { 0 };
	struct ibv_wc wc[4];
	uint8_t d[500];

	async_drain();
	if (!rig_up(&r) || !mem_up(&a, 4096, 4096, IBV_ACCESS_LOCAL_WRITE) ||
	    !mem_up(&s, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge rs = { a.iova, sizeof(d), a.mr->lkey };
	post_send(&r, 0x611, IBV_WR_RDMA_READ, &rs, 1, 0x5000, 0x99);
	struct ibv_sge ss = { s.iova, 200, s.mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 0x612, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE,
	}, *bad;
	CHECK(uroce_post_send(r.qp, &wr, &bad) == 0, "post the fenced SEND");
	check_nsent(1, "READ, and the SEND fenced behind it");
	if (!check_out(fake_sent(0), OP_RC_READ_REQUEST, SQ_PSN, "READ request"))
		goto out;
	CHECK(uroce_dereg_mr(s.mr) == 0, "dereg the SEND's MR while the SEND waits");
	s.mr = NULL;
	mem_down(&s);  /* freed: ASan sees any read of it */
	fake_sent_clear();
	pattern(d, sizeof(d), 61);
	queue_resp(OP_RC_READ_RESP_ONLY, r.qpn, SQ_PSN, AETH_ACK_UNLIMITED, 1, d, sizeof(d));
	deliver();
	int n = cq_take(r.scq, wc, 4);
	CHECK(n == 2, "%d send completions, want 2", n);
	if (n >= 2) {
		check_wc(&wc[0], 0x611, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, r.qpn, "the READ");
		check_wc(&wc[1], 0x612, IBV_WC_LOC_PROT_ERR, IBV_WC_SEND, r.qpn, "the SEND of a deregistered MR");
	}
	check_nsent(0, "the SEND of a deregistered MR");
	CHECK(qp_state(r.qp) == IBV_QPS_ERR, "QP not in ERR after a local protection error");
out:
	mem_down(&a);
	mem_down(&s);
	rig_down(&r);
	async_drain();
}

/* A retransmission after the MR was deregistered and freed: the WRITE was
 * sent, then a sequence NAK asks for its 2nd and 3rd packets again (§6.6),
 * or the ACK timer expires (the resend of all three); the go-back-N finds
 * the lkey gone, so nothing is resent, the WRITE completes LOC_PROT_ERR
 * and the QP enters ERR. */
static void test_mem_resend_after_dereg(void)
{
	for (int timeout = 0; timeout < 2; timeout++) {
		struct rig r;
		struct mem m = { 0 };
		struct ibv_wc wc[4];
		const char *what = timeout ? "ACK timeout after dereg" : "sequence NAK after dereg";

		async_drain();
		if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
			goto next;
		struct ibv_sge sge = { m.iova, 3000, m.mr->lkey };
		post_send(&r, 0x621, IBV_WR_RDMA_WRITE, &sge, 1, 0x9000, 0x42);
		check_nsent(3, "3000-byte WRITE");
		fake_sent_clear();
		CHECK(uroce_dereg_mr(m.mr) == 0, "%s: dereg the WRITE's MR with the WRITE unacknowledged", what);
		m.mr = NULL;
		mem_down(&m);  /* freed: ASan sees any read of it */
		if (timeout) {
			fire_timers(&r, now_ns() + 1000000000ull);
		} else {
			queue_resp(OP_RC_ACK, r.qpn, SQ_PSN + 1, AETH_NAK_PSN_SEQ, 0, NULL, 0);
			deliver();
		}
		check_nsent(0, what);
		int n = cq_take(r.scq, wc, 4);
		CHECK(n == 1, "%s: %d send completions, want 1", what, n);
		if (n >= 1)
			check_wc(&wc[0], 0x621, IBV_WC_LOC_PROT_ERR, IBV_WC_RDMA_WRITE, r.qpn, what);
		CHECK(qp_state(r.qp) == IBV_QPS_ERR, "%s: QP not in ERR after a local protection error", what);
next:
		mem_down(&m);
		rig_down(&r);
		async_drain();
	}
}

/* A READ response or ATOMIC ACK for a WQE whose local MR was deregistered
 * meanwhile: nothing is placed, the WQE completes LOC_PROT_ERR, ERR. */
static void test_mem_responses_after_dereg(void)
{
	for (int atomic = 0; atomic < 2; atomic++) {
		struct rig r;
		struct mem m = { 0 };
		struct ibv_wc wc[4];
		struct pkt pk;
		uint8_t d[100];
		const char *what = atomic ? "ATOMIC ACK after dereg" : "READ response after dereg";

		async_drain();
		if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
			goto next;
		struct ibv_sge sge = { m.iova + 64, atomic ? 8 : sizeof(d), m.mr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = 0x631, .sg_list = &sge, .num_sge = 1,
			.opcode = atomic ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
		}, *bad;
		wr.wr.atomic.remote_addr = 0x10000;  /* rdma's remote_addr/rkey overlay these */
		wr.wr.atomic.rkey = 0x77;
		CHECK(uroce_post_send(r.qp, &wr, &bad) == 0, "%s: post", what);
		check_nsent(1, what);
		CHECK(uroce_dereg_mr(m.mr) == 0, "%s: dereg", what);
		m.mr = NULL;
		if (atomic) {
			uint8_t *h = pkt_begin(&pk, OP_RC_ATOMIC_ACK, r.qpn, false, SQ_PSN);
			aeth_set(h + BTH_LEN, AETH_ACK_UNLIMITED, 1);
			atmack_set(h + BTH_LEN + AETH_LEN, 0x1122334455667788ull);
			pkt_queue(&pk, NULL, 0);
		} else {
			pattern(d, sizeof(d), 62);
			queue_resp(OP_RC_READ_RESP_ONLY, r.qpn, SQ_PSN, AETH_ACK_UNLIMITED, 1, d, sizeof(d));
		}
		deliver();
		int n = cq_take(r.scq, wc, 4);
		CHECK(n == 1, "%s: %d completions, want 1", what, n);
		if (n >= 1)
			check_wc(&wc[0], 0x631, IBV_WC_LOC_PROT_ERR, IBV_WC_RDMA_READ, r.qpn, what);
		CHECK(untouched(&m, 0, m.alloc), "%s: placed in a deregistered MR", what);
		CHECK(qp_state(r.qp) == IBV_QPS_ERR, "%s: QP not in ERR", what);
next:
		mem_down(&m);
		rig_down(&r);
		async_drain();
	}
}

/* ibv_rereg_mr(3) keeps lkey and rkey when only the access or the PD
 * changes (mlx5; pyverbs test_mr_rereg_access writes with the old rkey),
 * and the new access or PD is what the next request is checked against. */
static void test_mem_rereg_keeps_keys(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_pd *pd2 = uroce_alloc_pd(ctx);
	uint8_t d[64];

	async_drain();
	if (!pd2 || !rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	uint32_t lkey = m.mr->lkey, rkey = m.mr->rkey;
	CHECK(uroce_rereg_mr(m.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0, "rereg access");
	CHECK(m.mr->lkey == lkey && m.mr->rkey == rkey, "an access change renewed the keys");
	pattern(d, sizeof(d), 63);
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN, true, m.iova + 8, rkey, sizeof(d), d, sizeof(d));
	deliver();
	CHECK(!memcmp(m.host + 8, d, sizeof(d)), "WRITE with the old rkey after an access change did not land");
	check_nsent(1, "WRITE after rereg(access)");
	check_aeth(fake_sent(0), RQ_PSN, AETH_ACK_UNLIMITED, 1, "ACK of the WRITE after rereg(access)");

	/* the PD changes: keys kept, the QP's PD no longer the MR's (§5.3) */
	fake_sent_clear();
	CHECK(uroce_rereg_mr(m.mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0, "rereg PD");
	CHECK(m.mr->lkey == lkey && m.mr->rkey == rkey, "a PD change renewed the keys");
	queue_write(OP_RC_WRITE_ONLY, r.qpn, RQ_PSN + 1, true, m.iova + 200, rkey, sizeof(d), d, sizeof(d));
	deliver();
	CHECK(untouched(&m, 200, sizeof(d)), "WRITE into an MR of another PD landed");
	check_nsent(1, "WRITE after rereg(PD)");
	check_aeth(fake_sent(0), RQ_PSN + 1, AETH_NAK_REM_ACCESS, 1, "NAK of the WRITE after rereg(PD)");
out:
	mem_down(&m);
	rig_down(&r);
	if (pd2)
		CHECK(uroce_dealloc_pd(pd2) == 0, "dealloc the second PD");
	async_drain();
}

/* ============================================================ RESET */

/* A QP moved to RESET takes its unpolled completions out of its CQs
 * (mlx5_cq_clean); another QP's on the same CQ stay, in order. */
static void test_reset_purges_cq(void)
{
	struct ibv_cq *cq = uroce_create_cq(ctx, 64, NULL, NULL, 0);
	struct rig a = { 0 }, b = { 0 };
	struct rig *rs[2] = { &a, &b };
	struct mem m = { 0 };
	struct ibv_wc wc[8];
	uint8_t d[100];

	async_drain();
	CHECK(cq, "create CQ");
	if (!cq || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		};
		rs[i]->qp = uroce_create_qp(pd, &ia);
		CHECK(rs[i]->qp && (rs[i]->qpn = rs[i]->qp->qp_num, rig_connect(rs[i], &conn_default)), "QP %d setup", i);
		if (!rs[i]->qp)
			goto out;
		rs[i]->scq = rs[i]->rcq = cq;
		post_recv(rs[i], 0x700 + 0x10 * (uint64_t)i, &m, 1024 * (uint32_t)i, 512);
		post_recv(rs[i], 0x701 + 0x10 * (uint64_t)i, &m, 1024 * (uint32_t)i + 512, 512);
	}
	pattern(d, sizeof(d), 64);
	queue_send(OP_RC_SEND_ONLY, a.qpn, RQ_PSN, true, d, sizeof(d));
	queue_send(OP_RC_SEND_ONLY, b.qpn, RQ_PSN, true, d, sizeof(d));
	deliver();
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	CHECK(uroce_modify_qp(a.qp, &at, IBV_QP_STATE) == 0 && uroce_modify_qp(b.qp, &at, IBV_QP_STATE) == 0,
	      "both QPs to ERR");
	/* the CQ: a 0x700, b 0x710, a 0x701 flushed, b 0x711 flushed */
	at.qp_state = IBV_QPS_RESET;
	CHECK(uroce_modify_qp(a.qp, &at, IBV_QP_STATE) == 0, "QP a to RESET");
	int n = cq_take(cq, wc, 8);
	CHECK(n == 2, "after QP a's RESET: %d completions, want b's 2", n);
	if (n >= 2) {
		check_wc(&wc[0], 0x710, IBV_WC_SUCCESS, IBV_WC_RECV, b.qpn, "b's receive");
		check_wc(&wc[1], 0x711, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, b.qpn, "b's flushed receive");
	}
	/* b's are polled: its RESET finds nothing to take, and a's new ones stay */
	CHECK(uroce_modify_qp(b.qp, &at, IBV_QP_STATE) == 0, "QP b to RESET");
	CHECK(cq_take(cq, wc, 8) == 0, "completions left after both RESETs");
out:
	for (int i = 0; i < 2; i++)
		if (rs[i]->qp)
			CHECK(uroce_destroy_qp(rs[i]->qp) == 0, "destroy QP %d", i);
	if (cq)
		CHECK(uroce_destroy_cq(cq) == 0, "destroy CQ");
	mem_down(&m);
	async_drain();
}

/* ============================================================ XRC */

/* An XRC TGT QP in its domain and an XRC SRQ of that domain whose
 * receives complete to r->rcq; a second domain with an SRQ of its own. */
struct xrig {
	struct rig r;
	struct mem m;                 /* registered in the PD of both SRQs */
	struct ibv_xrcd *x, *other;
	struct ibv_srq *srq, *other_srq;
	uint32_t srqn, other_srqn;
};

static struct ibv_xrcd *xrcd_private(void)
{
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1, .oflags = O_CREAT,
	};
	return uroce_open_xrcd(ctx, &xa);
}

static struct ibv_srq *xsrq_create(struct ibv_xrcd *x, struct ibv_cq *cq, uint32_t *num)
{
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = 8, .max_sge = 2 }, .srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = x, .cq = cq,
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ,
	};
	struct ibv_srq *s = uroce_create_xrc_srq(ctx, &sa);
	if (s)
		CHECK(uroce_get_srq_num(s, num) == 0, "get_srq_num");
	return s;
}

static bool xrig_up(struct xrig *t, unsigned access)
{
	memset(t, 0, sizeof(*t));
	if (!mem_up(&t->m, 8192, 8192, access))
		goto fail;
	t->x = xrcd_private();
	t->other = xrcd_private();
	t->r.rcq = uroce_create_cq(ctx, 64, NULL, NULL, 0);
	if (!t->x || !t->other || !t->r.rcq)
		goto fail;
	t->srq = xsrq_create(t->x, t->r.rcq, &t->srqn);
	t->other_srq = xsrq_create(t->other, t->r.rcq, &t->other_srqn);
	struct ibv_qp_init_attr_ex ia = { .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = t->x };
	t->r.qp = uroce_create_qp_ex(ctx, &ia);
	if (!t->srq || !t->other_srq || !t->r.qp)
		goto fail;
	t->r.qpn = t->r.qp->qp_num;
	if (rig_connect(&t->r, &conn_default))
		return true;
fail:
	CHECK(0, "XRC TGT setup failed");
	return false;
}

static void xrig_down(struct xrig *t)
{
	if (t->r.qp)
		CHECK(uroce_destroy_qp(t->r.qp) == 0, "destroy TGT QP");
	t->r.qp = NULL;
	if (t->srq)
		CHECK(uroce_destroy_srq(t->srq) == 0, "destroy XRC SRQ");
	if (t->other_srq)
		CHECK(uroce_destroy_srq(t->other_srq) == 0, "destroy the other XRC SRQ");
	rig_down(&t->r);
	if (t->x)
		CHECK(uroce_close_xrcd(t->x) == 0, "close XRCD");
	if (t->other)
		CHECK(uroce_close_xrcd(t->other) == 0, "close the other XRCD");
	mem_down(&t->m);
	async_drain();
}

static void xsrq_post(struct ibv_srq *srq, uint64_t wr_id, struct mem *m, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { m->iova + off, len, m->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(uroce_post_srq_recv(srq, &wr, &bad) == 0, "post_srq_recv");
}

/* An XRC request from the peer: the XRCETH naming srqn right after the
 * BTH (§2.2), the other headers at their opinfo offsets. */
static uint8_t *xrc_begin(struct pkt *p, uint8_t op, uint32_t dqpn, uint32_t psn, uint32_t srqn)
{
	uint8_t *h = pkt_begin(p, op, dqpn, true, psn);
	xrceth_set(h + BTH_LEN, srqn);
	return h;
}

/* An XRC SEND packet of n bytes from the peer into SRQ srqn. */
static void xrc_send(uint8_t op, uint32_t dqpn, uint32_t psn, uint32_t srqn, const void *data, uint32_t n)
{
	struct pkt p;
	xrc_begin(&p, op, dqpn, psn, srqn);
	pkt_queue(&p, data, n);
}

/* An XRC ACK/NAK: XRC's ACKNOWLEDGE opcode, no XRCETH (§2.2, §3). */
static void check_xrc_aeth(const struct fake_pkt *p, uint32_t psn, uint8_t syndrome, const char *what)
{
	if (!check_out(p, OP_XRC_ACK, psn, what))
		return;
	CHECK(aeth_syndrome(p->buf + BTH_LEN) == syndrome, "%s: syndrome 0x%02x, expected 0x%02x", what,
	      aeth_syndrome(p->buf + BTH_LEN), syndrome);
	CHECK(pkt_paylen(p) == 0, "%s: carries %u payload bytes", what, pkt_paylen(p));
}

/* IBA A14: an XRC SEND lands in the XRC SRQ its XRCETH names and completes
 * to that SRQ's CQ with the TGT QP's number; the ACK is XRC's (0xB1). */
static void test_xrc_tgt_send(void)
{
	struct xrig t;
	struct ibv_wc wc[4];
	uint8_t d[1500];

	if (!xrig_up(&t, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	xsrq_post(t.srq, 0x61, &t.m, 0, 4096);
	pattern(d, sizeof(d), 51);
	xrc_send(OP_XRC_SEND_FIRST, t.r.qpn, RQ_PSN, t.srqn, d, 1024);
	xrc_send(OP_XRC_SEND_LAST, t.r.qpn, RQ_PSN + 1, t.srqn, d + 1024, sizeof(d) - 1024);
	deliver();
	CHECK(cq_take(t.r.rcq, wc, 4) == 1, "one receive completion on the XRC SRQ's CQ");
	check_wc(&wc[0], 0x61, IBV_WC_SUCCESS, IBV_WC_RECV, t.r.qpn, "XRC SEND");
	CHECK(wc[0].byte_len == sizeof(d), "XRC SEND byte_len %u", wc[0].byte_len);
	CHECK(!memcmp(t.m.host, d, sizeof(d)) && untouched(&t.m, sizeof(d), 4096 - sizeof(d)),
	      "XRC SEND bytes in the SRQ's receive buffer");
	check_nsent(1, "XRC SEND");
	check_xrc_aeth(fake_sent(0), RQ_PSN + 1, AETH_ACK_UNLIMITED, "ACK of the XRC SEND");
out:
	xrig_down(&t);
}

/* A WRITE and a READ through the TGT QP: memory is checked against the PD
 * of the XRC SRQ the XRCETH names (the TGT QP has none); the READ answers
 * with XRC's READ RESPONSE ONLY (0xB0), which carries no XRCETH. */
static void test_xrc_tgt_write_read(void)
{
	struct xrig t;
	uint8_t d[200];
	struct pkt p;

	if (!xrig_up(&t, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ))
		goto out;
	pattern(d, sizeof(d), 52);
	uint8_t *h = xrc_begin(&p, OP_XRC_WRITE_ONLY, t.r.qpn, RQ_PSN, t.srqn);
	reth_set(h + opinfo(OP_XRC_WRITE_ONLY)->off_reth, t.m.iova + 100, t.m.mr->rkey, sizeof(d));
	pkt_queue(&p, d, sizeof(d));
	deliver();
	CHECK(!memcmp(t.m.host + 100, d, sizeof(d)) && untouched(&t.m, 0, 100), "XRC WRITE landed at its RETH address");
	check_nsent(1, "XRC WRITE");
	check_xrc_aeth(fake_sent(0), RQ_PSN, AETH_ACK_UNLIMITED, "ACK of the XRC WRITE");
	fake_sent_clear();
	h = xrc_begin(&p, OP_XRC_READ_REQUEST, t.r.qpn, RQ_PSN + 1, t.srqn);
	reth_set(h + opinfo(OP_XRC_READ_REQUEST)->off_reth, t.m.iova + 100, t.m.mr->rkey, sizeof(d));
	pkt_queue(&p, NULL, 0);
	deliver();
	check_nsent(1, "XRC READ");
	const struct fake_pkt *o = fake_sent(0);
	if (check_out(o, OP_XRC_READ_RESP_ONLY, RQ_PSN + 1, "XRC READ response")) {
		CHECK(pkt_paylen(o) == sizeof(d) && !memcmp(pkt_payload(o), d, sizeof(d)), "XRC READ response data");
		CHECK(aeth_syndrome(o->buf + BTH_LEN) == AETH_ACK_UNLIMITED, "XRC READ response AETH right after the BTH");
	}
out:
	xrig_down(&t);
}

/* An XRCETH naming no XRC SRQ, or one of another XRC domain: nothing is
 * received, the requester is NAKed 0x62 (an XRC domain violation, as
 * uroce reads IBA A14) and the TGT QP enters ERR. */
static void xrc_bad_srq(bool other_domain)
{
	struct xrig t;
	struct ibv_wc wc[4];
	uint8_t d[64] = { 1 };

	if (!xrig_up(&t, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	xsrq_post(t.srq, 0x62, &t.m, 0, 2048);
	xsrq_post(t.other_srq, 0x63, &t.m, 2048, 2048);
	uint32_t srqn = other_domain ? t.other_srqn : (t.srqn ^ 0x800);
	xrc_send(OP_XRC_SEND_ONLY, t.r.qpn, RQ_PSN, srqn, d, sizeof(d));
	deliver();
	CHECK(cq_take(t.r.rcq, wc, 4) == 0, "a receive completed for an XRCETH %s",
	      other_domain ? "of another domain" : "naming no SRQ");
	CHECK(untouched(&t.m, 0, 4096), "bytes placed for a bad XRCETH");
	check_nsent(1, "bad XRCETH");
	check_xrc_aeth(fake_sent(0), RQ_PSN, AETH_NAK_REM_ACCESS, "NAK of the bad XRCETH");
	CHECK(qp_state(t.r.qp) == IBV_QPS_ERR, "TGT QP state %d after the NAK, want ERR", qp_state(t.r.qp));
out:
	xrig_down(&t);
}

/* The named XRC SRQ is empty: RNR NAK with the TGT QP's min_rnr_timer, in
 * XRC's ACKNOWLEDGE; not fatal, the retried SEND lands once a receive is
 * posted to that SRQ (§5.2). */
static void test_xrc_tgt_rnr(void)
{
	struct xrig t;
	struct ibv_wc wc[2];
	uint8_t d[100] = { 7 };

	if (!xrig_up(&t, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	xsrq_post(t.other_srq, 0x64, &t.m, 0, 2048);  /* another domain's receive is no use */
	xrc_send(OP_XRC_SEND_ONLY, t.r.qpn, RQ_PSN, t.srqn, d, sizeof(d));
	deliver();
	check_nsent(1, "XRC SEND into an empty SRQ");
	check_xrc_aeth(fake_sent(0), RQ_PSN, AETH_RNR_NAK | MIN_RNR_TIMER, "RNR NAK");
	CHECK(qp_state(t.r.qp) == IBV_QPS_RTS, "TGT QP state %d after an RNR NAK, want RTS", qp_state(t.r.qp));
	fake_sent_clear();
	xsrq_post(t.srq, 0x65, &t.m, 2048, 2048);
	xrc_send(OP_XRC_SEND_ONLY, t.r.qpn, RQ_PSN, t.srqn, d, sizeof(d));
	deliver();
	CHECK(cq_take(t.r.rcq, wc, 2) == 1, "one receive completion after the retry");
	check_wc(&wc[0], 0x65, IBV_WC_SUCCESS, IBV_WC_RECV, t.r.qpn, "retried XRC SEND");
	check_xrc_aeth(fake_sent(0), RQ_PSN, AETH_ACK_UNLIMITED, "ACK of the retried SEND");
out:
	xrig_down(&t);
}

/* The XRC SRQ a message under way receives into is destroyed: the TGT QP
 * forgets it with the WQE it took (no completion for it, as for the SRQ's
 * other WQEs), and the rest of the message, naming a number that is gone,
 * is NAKed 0x62. */
static void test_xrc_srq_destroyed_mid_message(void)
{
	struct xrig t;
	struct ibv_wc wc[2];
	uint8_t d[1100];

	if (!xrig_up(&t, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	xsrq_post(t.srq, 0x66, &t.m, 0, 2048);
	pattern(d, sizeof(d), 55);
	xrc_send(OP_XRC_SEND_FIRST, t.r.qpn, RQ_PSN, t.srqn, d, 1024);
	deliver();
	CHECK(uroce_destroy_srq(t.srq) == 0, "destroy the XRC SRQ with a message under way");
	t.srq = NULL;
	fake_sent_clear();
	xrc_send(OP_XRC_SEND_LAST, t.r.qpn, RQ_PSN + 1, t.srqn, d + 1024, sizeof(d) - 1024);
	deliver();
	CHECK(cq_take(t.r.rcq, wc, 2) == 0, "a completion for the destroyed SRQ's WQE");
	check_xrc_aeth(fake_sent(0), RQ_PSN + 1, AETH_NAK_REM_ACCESS, "NAK of the LAST naming a destroyed SRQ");
out:
	xrig_down(&t);
}

static void test_xrc_no_such_srq(void) { xrc_bad_srq(false); }
static void test_xrc_srq_other_domain(void) { xrc_bad_srq(true); }

/* The INI side: a SEND and a READ carry XRC opcodes with the WR's
 * remote_srqn in an XRCETH after the BTH (§2.2); XRC's ACK and READ
 * response complete them. */
/* An XRC INI QP (a send queue alone) with its send CQ, not connected. */
static bool ini_create(struct rig *r)
{
	r->scq = uroce_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .send_cq = r->scq, .qp_type = IBV_QPT_XRC_SEND,
				       .cap = { .max_send_wr = 8, .max_send_sge = 2 } };
	r->qp = r->scq ? uroce_create_qp(pd, &ia) : NULL;
	CHECK(r->qp, "XRC INI QP create");
	if (r->qp)
		r->qpn = r->qp->qp_num;
	return r->qp != NULL;
}

static void test_xrc_ini_requests(void)
{
	struct rig r = { 0 };
	struct mem m = { 0 };
	struct ibv_wc wc[4];
	const uint32_t srqn = 0x00C0DE;

	if (!ini_create(&r))
		goto out;
	if (!rig_connect(&r, &conn_default) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE)) {
		CHECK(0, "XRC INI connect");
		goto out;
	}
	pattern(m.host, 300, 53);
	struct ibv_sge sge = { m.iova, 300, m.mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 0x71, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.qp_type.xrc.remote_srqn = srqn;
	CHECK(uroce_post_send(r.qp, &wr, &bad) == 0, "post_send on the INI QP");
	check_nsent(1, "XRC SEND");
	const struct fake_pkt *o = fake_sent(0);
	if (check_out(o, OP_XRC_SEND_ONLY, SQ_PSN, "XRC SEND")) {
		CHECK(xrceth_srqn(o->buf + BTH_LEN) == srqn, "XRCETH 0x%06x, want 0x%06x", xrceth_srqn(o->buf + BTH_LEN),
		      srqn);
		CHECK(pkt_paylen(o) == 300 && !memcmp(pkt_payload(o), m.host, 300), "XRC SEND payload after the XRCETH");
	}
	fake_sent_clear();
	struct ibv_sge rs = { m.iova + 1024, 64, m.mr->lkey };
	struct ibv_send_wr rd = { .wr_id = 0x72, .sg_list = &rs, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				  .send_flags = IBV_SEND_SIGNALED }, *rbad;
	rd.wr.rdma.remote_addr = 0x1000;
	rd.wr.rdma.rkey = 0x4242;
	rd.qp_type.xrc.remote_srqn = srqn;
	CHECK(uroce_post_send(r.qp, &rd, &rbad) == 0, "post READ on the INI QP");
	check_nsent(1, "XRC READ request");
	o = fake_sent(0);
	if (check_out(o, OP_XRC_READ_REQUEST, SQ_PSN + 1, "XRC READ request")) {
		CHECK(xrceth_srqn(o->buf + BTH_LEN) == srqn, "READ XRCETH 0x%06x", xrceth_srqn(o->buf + BTH_LEN));
		const uint8_t *reth = o->buf + BTH_LEN + XRCETH_LEN;
		CHECK(reth_va(reth) == 0x1000 && reth_rkey(reth) == 0x4242 && reth_len(reth) == 64,
		      "READ RETH after the XRCETH");
	}
	queue_resp(OP_XRC_ACK, r.qpn, SQ_PSN, AETH_ACK_UNLIMITED, 1, NULL, 0);
	uint8_t back[64];
	pattern(back, sizeof(back), 54);
	queue_resp(OP_XRC_READ_RESP_ONLY, r.qpn, SQ_PSN + 1, AETH_ACK_UNLIMITED, 2, back, sizeof(back));
	deliver();
	CHECK(cq_take(r.scq, wc, 4) == 2, "two send completions");
	check_wc(&wc[0], 0x71, IBV_WC_SUCCESS, IBV_WC_SEND, r.qpn, "XRC SEND");
	check_wc(&wc[1], 0x72, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, r.qpn, "XRC READ");
	CHECK(!memcmp(m.host + 1024, back, sizeof(back)), "XRC READ response placed");
out:
	mem_down(&m);
	rig_down(&r);
}

/* Found by tests/fuzz/fuzz_rx.c: an XRC QP to RESET dereferenced the CQ
 * it does not have (a TGT QP has none, an INI QP no receive CQ; IBA A14)
 * while purging its completions.  Both reset cleanly, and come up again. */
static void test_xrc_reset(void)
{
	struct xrig t;
	struct rig ini = { 0 };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	if (!xrig_up(&t, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	CHECK(uroce_modify_qp(t.r.qp, &a, IBV_QP_STATE) == 0, "XRC TGT QP to RESET");
	CHECK(qp_state(t.r.qp) == IBV_QPS_RESET, "XRC TGT QP in RESET");
	CHECK(rig_connect(&t.r, &conn_default), "XRC TGT QP up again after RESET");
	if (!ini_create(&ini))
		goto out;
	CHECK(rig_connect(&ini, &conn_default), "XRC INI connect");
	CHECK(uroce_modify_qp(ini.qp, &a, IBV_QP_STATE) == 0, "XRC INI QP to RESET");
	CHECK(qp_state(ini.qp) == IBV_QPS_RESET, "XRC INI QP in RESET");
out:
	rig_down(&ini);
	xrig_down(&t);
}


/* ============================================================ references (transport/ref.h) */

/* A reference to n bytes at src in this process, after the headers of p. */
static uint32_t ref_to(uint8_t *at, const void *src, uint32_t n)
{
	struct uroce_seg seg = { (uint8_t *)src, n };
	return ref_put(at, getpid(), &seg, 1);
}

/* A SEND or WRITE of UROCE_SHM_DIRECT_MIN bytes or more on a flow that
 * carries references leaves as one packet standing for its span: the
 * message's opcode (ONLY), its RETH, AckReq, a reference naming this
 * process and each local segment; the next message's PSN follows the
 * packets it stood for (5000 at MTU 1024 in one span: 20 PSNs for 20000). */
static void test_ref_req_write(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ref_src src;

	fake_net_refs(true);
	if (!rig_up(&r) || !mem_up(&m, 32768, 32768, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge sge[2] = { { m.iova + 100, 12000, m.mr->lkey }, { m.iova + 16000, 8000, m.mr->lkey } };
	post_send(&r, 0x81, IBV_WR_RDMA_WRITE, sge, 2, 0x70000, 0x77);
	check_nsent(1, "20000-byte WRITE by reference");
	const struct fake_pkt *p = fake_sent(0);
	if (check_out(p, OP_RC_WRITE_ONLY, SQ_PSN, "WRITE by reference")) {
		CHECK(p->flags == NET_PKT_REF, "flags 0x%x", p->flags);
		CHECK(bth_ackreq(p->buf), "no AckReq on a span");
		CHECK(reth_len(p->buf + BTH_LEN) == 20000 && reth_va(p->buf + BTH_LEN) == 0x70000, "RETH len %u",
		      reth_len(p->buf + BTH_LEN));
		bool ok = ref_get(pkt_payload(p), pkt_paylen(p), &src);
		CHECK(ok, "no well-formed reference");
		if (ok) {
			CHECK(src.pid == getpid() && src.nseg == 2 && src.len == 20000, "reference pid %d nseg %u len %u",
			      (int)src.pid, src.nseg, src.len);
			CHECK(src.seg[0].iov_base == m.host + 100 && src.seg[0].iov_len == 12000 &&
			      src.seg[1].iov_base == m.host + 16000 && src.seg[1].iov_len == 8000,
			      "the reference names other bytes");
		}
	}
	/* below UROCE_SHM_DIRECT_MIN: packets */
	fake_sent_clear();
	struct ibv_sge small = { m.iova, 2000, m.mr->lkey };
	post_send(&r, 0x82, IBV_WR_SEND, &small, 1, 0, 0);
	check_nsent(2, "2000-byte SEND as packets");
	if (check_out(fake_sent(0), OP_RC_SEND_FIRST, SQ_PSN + 20, "SEND after 20 PSNs of WRITE"))
		CHECK(fake_sent(0)->flags == 0, "a small SEND flagged 0x%x", fake_sent(0)->flags);
out:
	mem_down(&m);
	rig_down(&r);
	fake_net_refs(false);
}

/* The responder pulls what a reference names into the RETH's memory, and
 * takes the span's PSNs: one ACK, of its last PSN.  A reference it cannot
 * read counts nothing: a sequence NAK at its PSN, memory untouched, and
 * the same PSN sent again as a packet is executed as the message's start. */
static void test_ref_resp_write(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct pkt p;
	static uint8_t d[5000];

	fake_net_refs(true);
	if (!rig_up(&r) || !mem_up(&m, 8192, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		goto out;
	pattern(d, sizeof(d), 61);
	uint8_t *h = pkt_begin(&p, OP_RC_WRITE_ONLY, r.qpn, true, RQ_PSN);
	reth_set(h + BTH_LEN, m.iova + 10, m.mr->rkey, sizeof(d));
	uint32_t rl = ref_to(p.b + BTH_LEN + RETH_LEN, d, sizeof(d));
	pkt_queue(&p, p.b + BTH_LEN + RETH_LEN, rl);
	fake_rx_flags(NET_PKT_REF);
	CHECK(deliver() == 1, "reference received");
	CHECK(!memcmp(m.host + 10, d, sizeof(d)), "the referenced bytes not in the MR");
	CHECK(untouched(&m, 0, 10) && untouched(&m, 10 + sizeof(d), m.alloc - 10 - sizeof(d)),
	      "bytes around the WRITE changed");
	check_nsent(1, "WRITE by reference");
	/* 5000 bytes at MTU 1024: 5 PSNs */
	check_aeth(fake_sent(0), RQ_PSN + 4, AETH_ACK_UNLIMITED, 1, "ACK of the span's last PSN");

	/* bytes that cannot be read (an unmapped page) */
	fake_sent_clear();
	uint8_t *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(gone != MAP_FAILED, "mmap");
	munmap(gone, 4096);
	memset(m.host, 0xEE, m.alloc);
	h = pkt_begin(&p, OP_RC_WRITE_ONLY, r.qpn, true, RQ_PSN + 5);
	reth_set(h + BTH_LEN, m.iova, m.mr->rkey, 3000);
	rl = ref_to(p.b + BTH_LEN + RETH_LEN, gone, 3000);
	pkt_queue(&p, p.b + BTH_LEN + RETH_LEN, rl);
	fake_rx_flags(NET_PKT_REF);
	deliver();
	check_nsent(1, "an unreadable reference");
	check_aeth(fake_sent(0), RQ_PSN + 5, AETH_NAK_PSN_SEQ, 1, "sequence NAK at the reference's PSN");
	if (fake_sent_count())
		CHECK(fake_sent(0)->flags == NET_PKT_REF_NAK, "the NAK does not say it refuses a reference");
	/* a reference naming another process than the peer's: refused unread */
	fake_sent_clear();
	h = pkt_begin(&p, OP_RC_WRITE_ONLY, r.qpn, true, RQ_PSN + 5);
	reth_set(h + BTH_LEN, m.iova, m.mr->rkey, 3000);
	struct uroce_seg other = { d, 3000 };
	rl = ref_put(p.b + BTH_LEN + RETH_LEN, 1, &other, 1);
	pkt_queue(&p, p.b + BTH_LEN + RETH_LEN, rl);
	fake_rx_flags(NET_PKT_REF);
	deliver();
	CHECK(untouched(&m, 0, m.alloc), "a reference to pid 1 was read");
	check_nsent(1, "a reference to another process");
	check_aeth(fake_sent(0), RQ_PSN + 5, AETH_NAK_PSN_SEQ, 1, "NAK of a reference to another process");
	CHECK(qp_state(r.qp) == IBV_QPS_RTS, "the responder's QP left RTS");
	fake_sent_clear();
	queue_write(OP_RC_WRITE_FIRST, r.qpn, RQ_PSN + 5, false, m.iova, m.mr->rkey, 3000, d, 1024);
	queue_write(OP_RC_WRITE_MIDDLE, r.qpn, RQ_PSN + 6, false, 0, 0, 0, d + 1024, 1024);
	queue_write(OP_RC_WRITE_LAST, r.qpn, RQ_PSN + 7, true, 0, 0, 0, d + 2048, 952);
	deliver();
	CHECK(!memcmp(m.host, d, 3000), "the WRITE sent again as packets not placed");
	check_nsent(1, "the WRITE as packets");
	check_aeth(fake_sent(0), RQ_PSN + 7, AETH_ACK_UNLIMITED, 2, "ACK of the WRITE as packets");
	/* a reference where none may be: a READ request's */
	fake_sent_clear();
	queue_read_req(r.qpn, RQ_PSN + 8, m.iova, m.mr->rkey, 64);
	fake_rx_flags(NET_PKT_REF);
	deliver();
	check_nsent(0, "a READ request flagged as a reference");
out:
	mem_down(&m);
	rig_down(&r);
	fake_net_refs(false);
}

/* A READ asked by reference: NET_PKT_REF_OK, the whole READ in one
 * request; a WRITE posted after it (no fence) waits until the answer has
 * been pulled, as the responder would have executed the READ first (IBA
 * 9.5); the answer, one READ_RESPONSE_ONLY standing for 20 PSNs, is pulled
 * into the local memory and completes the READ. */
static void test_ref_read_fence(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct ibv_wc wc[2];
	static uint8_t d[20000];

	fake_net_refs(true);
	if (!rig_up(&r) || !mem_up(&m, 32768, 32768, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	struct ibv_sge sge = { m.iova + 8, sizeof(d), m.mr->lkey };
	post_send(&r, 0x91, IBV_WR_RDMA_READ, &sge, 1, 0x90000, 0x99);
	struct ibv_sge ws = { m.iova + 24000, 100, m.mr->lkey };
	post_send(&r, 0x92, IBV_WR_RDMA_WRITE, &ws, 1, 0x90000, 0x99);
	check_nsent(1, "READ by reference, then a WRITE");
	const struct fake_pkt *p = fake_sent(0);
	if (check_out(p, OP_RC_READ_REQUEST, SQ_PSN, "READ request")) {
		CHECK(p->flags == NET_PKT_REF_OK, "READ request flags 0x%x", p->flags);
		CHECK(reth_len(p->buf + BTH_LEN) == sizeof(d), "READ request asks %u bytes", reth_len(p->buf + BTH_LEN));
	}
	fake_sent_clear();
	pattern(d, sizeof(d), 71);
	struct pkt q;
	uint8_t *h = pkt_begin(&q, OP_RC_READ_RESP_ONLY, r.qpn, false, SQ_PSN);
	aeth_set(h + BTH_LEN, AETH_ACK_UNLIMITED, 1);
	uint32_t rl = ref_to(q.b + BTH_LEN + AETH_LEN, d, sizeof(d));
	pkt_queue(&q, q.b + BTH_LEN + AETH_LEN, rl);
	fake_rx_flags(NET_PKT_REF);
	deliver();
	CHECK(cq_take(r.scq, wc, 2) == 1, "READ by reference not completed");
	check_wc(&wc[0], 0x91, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, r.qpn, "READ by reference");
	CHECK(!memcmp(m.host + 8, d, sizeof(d)), "the READ's bytes not pulled");
	CHECK(untouched(&m, 0, 8) && untouched(&m, 8 + sizeof(d), 24000 - 8 - sizeof(d)), "READ wrote outside its buffer");
	check_nsent(1, "the WRITE after the READ's answer");
	check_out(fake_sent(0), OP_RC_WRITE_ONLY, SQ_PSN + 20, "WRITE after a 20-PSN READ");
out:
	mem_down(&m);
	rig_down(&r);
	fake_net_refs(false);
}


/* An RNR NAK on a WRITE with immediate leaves no message under way: the
 * WRITE sent again from its start is executed, not NAKed as an invalid
 * request (IBA 9.7.5.2.8: an RNR NAKed request is retried whole). */
static void test_resp_write_imm_rnr_retry(void)
{
	struct rig r;
	struct mem m = { 0 }, rb = { 0 };
	struct ibv_wc wc;
	uint8_t d[300];

	if (!rig_up(&r) || !mem_up(&m, 4096, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) ||
	    !mem_up(&rb, 4096, 4096, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	pattern(d, sizeof(d), 81);
	struct pkt p;
	uint8_t *h = pkt_begin(&p, OP_RC_WRITE_ONLY_IMM, r.qpn, true, RQ_PSN);
	reth_set(h + BTH_LEN, m.iova, m.mr->rkey, sizeof(d));
	immdt_set_raw(h + BTH_LEN + RETH_LEN, 0x11223344);
	pkt_queue(&p, d, sizeof(d));
	deliver();
	check_nsent(1, "WRITE with immediate and no receive");
	if (fake_sent_count())
		CHECK((aeth_syndrome(fake_sent(0)->buf + BTH_LEN) & AETH_TYPE_MASK) == AETH_RNR_NAK, "not an RNR NAK");
	fake_sent_clear();
	post_recv(&r, 0xa1, &rb, 0, 64);
	h = pkt_begin(&p, OP_RC_WRITE_ONLY_IMM, r.qpn, true, RQ_PSN);
	reth_set(h + BTH_LEN, m.iova, m.mr->rkey, sizeof(d));
	immdt_set_raw(h + BTH_LEN + RETH_LEN, 0x11223344);
	pkt_queue(&p, d, sizeof(d));
	deliver();
	check_nsent(1, "the WRITE with immediate sent again");
	check_aeth(fake_sent(0), RQ_PSN, AETH_ACK_UNLIMITED, 1, "ACK of the WRITE sent again");
	CHECK(!memcmp(m.host, d, sizeof(d)), "the WRITE sent again not placed");
	CHECK(cq_take(r.rcq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM,
	      "no receive completion for the WRITE with immediate");
	CHECK(qp_state(r.qp) == IBV_QPS_RTS, "the responder's QP left RTS");
out:
	mem_down(&rb);
	mem_down(&m);
	rig_down(&r);
}

/* A sequence NAK that refuses a reference (NET_PKT_REF_NAK) sends what the
 * span stood for again as packets, at once and spending no retry: with
 * retry_cnt 0 a loss would end the QP in RETRY_EXC_ERR. */
static void test_ref_nak_resends_packets(void)
{
	struct rig r;
	struct mem m = { 0 };
	struct conn c = conn_default;
	struct ibv_wc wc;
	struct pkt q;

	c.retry_cnt = 0;
	fake_net_refs(true);
	if (!rig_up_with(&r, &c) || !mem_up(&m, 32768, 32768, IBV_ACCESS_LOCAL_WRITE))
		goto out;
	pattern(m.host, 20000, 91);
	struct ibv_sge sge = { m.iova, 20000, m.mr->lkey };
	post_send(&r, 0xb1, IBV_WR_RDMA_WRITE, &sge, 1, 0x70000, 0x77);
	check_nsent(1, "WRITE by reference");
	fake_sent_clear();
	uint8_t *h = pkt_begin(&q, OP_RC_ACK, r.qpn, false, SQ_PSN);
	aeth_set(h + BTH_LEN, AETH_NAK_PSN_SEQ, 0);
	pkt_queue(&q, NULL, 0);
	fake_rx_flags(NET_PKT_REF_NAK);
	deliver();
	check_nsent(20, "the WRITE again as 20 packets");
	if (fake_sent_count() == 20) {
		check_out(fake_sent(0), OP_RC_WRITE_FIRST, SQ_PSN, "first packet sent again");
		CHECK(fake_sent(0)->flags == 0 && pkt_paylen(fake_sent(0)) == 1024 &&
		      !memcmp(pkt_payload(fake_sent(0)), m.host, 1024), "the WRITE sent again is not data");
		check_out(fake_sent(19), OP_RC_WRITE_LAST, SQ_PSN + 19, "last packet sent again");
	}
	CHECK(qp_state(r.qp) == IBV_QPS_RTS, "a refused reference cost a retry");
	queue_resp(OP_RC_ACK, r.qpn, SQ_PSN + 19, AETH_ACK_UNLIMITED, 1, NULL, 0);
	deliver();
	CHECK(cq_take(r.scq, &wc, 1) == 1 && wc.status == IBV_WC_SUCCESS, "the WRITE did not complete");
out:
	mem_down(&m);
	rig_down(&r);
	fake_net_refs(false);
}

int main(void)
{
	static const struct { const char *name; void (*fn)(void); } tests[] = {
		{ "responder: WRITE ONLY lands, one coalesced ACK per batch", test_resp_write_only },
		{ "responder: WRITE FIRST/MIDDLE/LAST lands, ACK of the LAST", test_resp_write_multi },
		{ "responder: WRITE with a bad rkey is NAKed 0x62", test_resp_write_bad_rkey },
		{ "responder: WRITE past the MR's end is NAKed 0x62", test_resp_write_past_end },
		{ "responder: WRITE to an MR without remote write is NAKed 0x62", test_resp_write_no_permission },
		{ "responder: WRITE one byte past the MR's end is NAKed 0x62", test_resp_write_one_past_end },
		{ "responder: WRITE FIRST of a message past the end is NAKed", test_resp_write_reth_past_end },
		{ "responder: WRITE up to the MR's last byte lands", test_resp_write_to_end },
		{ "responder: SEND lands in the posted receive", test_resp_send },
		{ "responder: SEND without a receive gets an RNR NAK", test_resp_send_rnr },
		{ "responder: READ answered at the path MTU", test_resp_read },
		{ "responder: FETCH_ADD executes and answers the original", test_resp_fetch_add },
		{ "hand-off: a spin holds the sockets by what the process receives", test_spin_hold },
		{ "responder: one sequence NAK per PSN gap", test_resp_psn_gap },
		{ "responder: bad ICRC dropped", test_resp_bad_icrc },
		{ "CNP to the QP's controller", test_cnp },
		{ "CQ overrun: CQ_ERR, the QP to ERR", test_cq_overrun },
		{ "UC: a message cut by a gap leaves its WQE to the next", test_uc_gap_reuses_wqe },
		{ "SRQ: a consumed WQE is flushed with its QP", test_srq_flush_consumed },
		{ "responder: duplicate WRITE re-ACKed, not executed", test_resp_dup_write },
		{ "responder: duplicate READ answered again, partly too", test_resp_dup_read },
		{ "responder: duplicate FETCH_ADD answered, not executed", test_resp_dup_atomic },
		{ "responder: WRITE with immediate consumes a receive", test_resp_write_imm },
		{ "responder: invalid requests NAKed 0x61", test_resp_inv_req },
		{ "responder: SEND inside a WRITE NAKed 0x61", test_resp_send_inside_write },
		{ "responder: owed ACK leaves before a NAK", test_resp_ack_before_nak },
		{ "responder: a stream's ACKs coalesce across batches, bounded", test_resp_ack_stream },
		{ "requester: 5000-byte SEND segmented at MTU 1024", test_req_send_segmented },
		{ "requester: WRITE carries its RETH on the FIRST only", test_req_write },
		{ "requester: WRITE cut at the QP's path MTU 256", test_req_write_mtu256 },
		{ "requester: READ request with RETH, PSNs per response", test_req_read },
		{ "requester: a READ asked in chunks of 128 KiB of responses", test_req_read_chunks },
		{ "requester: at most the window (512 KiB of packets) unacknowledged", test_req_window },
		{ "requester: posts behind unacknowledged ones leave together, bounded", test_req_cork },
		{ "requester: held posts: misses back off; retry timer, SQD, destroy send them", test_req_cork_bounds },
		{ "references: a large WRITE leaves as one span by reference", test_ref_req_write },
		{ "references: the responder pulls a span, NAKs one it cannot read", test_ref_resp_write },
		{ "references: a READ by reference holds a later WRITE until pulled", test_ref_read_fence },
		{ "references: a refusing NAK sends the span again as packets, no retry spent", test_ref_nak_resends_packets },
		{ "responder: WRITE with immediate sent again after an RNR NAK", test_resp_write_imm_rnr_retry },
		{ "completer: ACK completes exactly the WQEs it covers", test_comp_ack },
		{ "completer: ACK of part of a message completes nothing", test_comp_partial_ack },
		{ "completer: NAK remote access on the oldest, rest flushed", test_comp_nak_access_oldest },
		{ "completer: NAK remote access on the 2nd, 1st acknowledged", test_comp_nak_access_second },
		{ "completer: sequence NAK goes back N", test_comp_seq_nak },
		{ "completer: READ responses placed, READ completes", test_comp_read_response },
		{ "completer: ATOMIC ACK completes FETCH_ADD with the original", test_comp_atomic },
		{ "completer: ATOMIC_WRITE answered by an empty READ response only", test_comp_atomic_write },
		{ "completer: ACK beyond anything sent ignored", test_comp_ack_beyond },
		{ "completer: ACK past an unanswered READ asks it again", test_comp_implied_nak },
		{ "completer: missing READ response asked again from the gap", test_comp_read_gap },
		{ "timers: ACK timeout resends, then RETRY_EXC_ERR", test_timer_retry },
		{ "timers: RNR NAK waits for its timer", test_timer_rnr },
		{ "timers: a sequence NAK behind an RNR NAK spends no retry", test_timer_rnr_then_seq_nak },
		{ "both: captured WRITE fed back lands, its ACK completes it", test_loopback_write },
		{ "memory: receive posted, then rereg(addr): LOC_PROT_ERR, NAK 0x63", test_mem_recv_then_rereg_addr },
		{ "memory: receive posted, then rereg(PD): LOC_PROT_ERR, NAK 0x63", test_mem_recv_then_rereg_pd },
		{ "memory: receive posted, then dereg + munmap: nothing touched", test_mem_recv_then_dereg_munmap },
		{ "memory: SEND posted, MR deregistered before it runs", test_mem_send_then_dereg },
		{ "memory: retransmission after dereg sends nothing", test_mem_resend_after_dereg },
		{ "memory: READ response / ATOMIC ACK after dereg placed nowhere", test_mem_responses_after_dereg },
		{ "memory: rereg of access or PD keeps the keys", test_mem_rereg_keeps_keys },
		{ "RESET: the QP's unpolled completions leave its CQ", test_reset_purges_cq },
		{ "windows: type 2 bound, WRITE and READ through it", test_mw_type2_access },
		{ "windows: zero-based type 2 takes offsets", test_mw_zero_based },
		{ "windows: WRITE past or before the window refused", test_mw_past_bounds },
		{ "windows: WRITE to a read-only window refused", test_mw_access_lacking },
		{ "windows: LOCAL_INV revokes the rkey", test_mw_local_inv },
		{ "windows: SEND_WITH_INV revokes the rkey", test_mw_send_with_inv },
		{ "windows: a deallocated window's rkey refused", test_mw_dealloc },
		{ "windows: type 2 through another QP refused", test_mw_type2_other_qp },
		{ "windows: a window of another PD refused", test_mw_other_pd },
		{ "windows: type 1 rebind, LOCAL_INV of type 1 fails", test_mw_type1_rules },
		{ "windows: type 1 rkey of before a rebind refused", test_mw_type1_stale_key },
		{ "windows: unbound type 1 refused", test_mw_type1_unbound },
		{ "windows: SEND_WITH_INV of a type 1 window: REM_INV_REQ_ERR", test_mw_send_inv_type1 },
		{ "windows: binds the MR does not allow: MW_BIND_ERR", test_mw_bind_refused },
		{ "windows: dealloc with a bind queued: MW_BIND_ERR", test_mw_dealloc_with_bind_queued },
		{ "XRC: a SEND lands in the XRC SRQ its XRCETH names", test_xrc_tgt_send },
		{ "XRC: WRITE and READ through a TGT QP, the SRQ's PD", test_xrc_tgt_write_read },
		{ "XRC: an XRCETH naming no SRQ is NAKed 0x62", test_xrc_no_such_srq },
		{ "XRC: an empty XRC SRQ gets an RNR NAK, the retry lands", test_xrc_tgt_rnr },
		{ "XRC: the SRQ destroyed mid-message, the rest NAKed", test_xrc_srq_destroyed_mid_message },
		{ "XRC: an SRQ of another XRC domain is NAKed 0x62", test_xrc_srq_other_domain },
		{ "XRC: INI requests carry the XRCETH, XRC responses complete", test_xrc_ini_requests },
		{ "XRC: TGT and INI QPs reset cleanly (fuzz finding)", test_xrc_reset },
	};
	int failed_tests = 0;

	if (!setup())
		return 1;
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		test_failures = 0;
		fake_sent_clear();
		tests[i].fn();
		if (fake_rx_pending()) {
			CHECK(0, "%u queued packets never received", fake_rx_pending());
			deliver();
		}
		printf("%s - %s\n", test_failures ? "not ok" : "ok", tests[i].name);
		failed_tests += test_failures != 0;
	}
	teardown();
	printf("%d checks, %d failed, %d of %zu tests failed\n", checks, failures, failed_tests,
	       sizeof(tests) / sizeof(tests[0]));
	return failures != 0;
}
