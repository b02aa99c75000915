/* The IB CM of a uroce process: QP1 (a UD QP of our own, numbered 1,
 * obj/qp.c uroce_create_gsi_qp), the MADs of shared/docs/cm-wire.md §3 and
 * the kernel's state machines and timers (§4), run by one thread, the CM
 * thread, that sleeps in epoll on QP1's completion channel and a timer
 * (no CPU while nothing is due).  Application threads send the MADs their
 * calls make themselves, under cm.lock. */
#include "cm.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "../obj/obj.h"
#include "../net/net.h"
#include "../net/share.h"
#include "../wire/cm_mad.h"
#include "../wire/ip.h"

#define GSI_RECVS 1024
#define GSI_SENDS 256
#define GSI_BUF (40 + MAD_LEN)

/* §4.1 with the capture's packet lifetime (§6.2 item 1) */
#define CM_PLT 18
#define CM_RESPONSE_TIMEOUT 20   /* Local/RemoteCMResponseTimeout we send */
#define CM_MAX_RETRIES 15
#define CM_HOP_LIMIT 64
#define CM_MRA_TIMEOUT 24

static struct {
	struct ibv_comp_channel *cc;
	struct ibv_cq *rcq, *scq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *bufs;               /* GSI_RECVS receive buffers; sends are inline */
	int epfd, kick_fd;
	pthread_t thread;
} gsi = { .epfd = -1, .kick_fd = -1 };

uint64_t cm_now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint32_t cm_random(void)
{
	uint32_t v;
	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)cm_now_ns() * 2654435761u;
	return v;
}

static struct uroce_dev *cm_dev(void) { return to_uctx(cm.ctx)->dev; }
static void cm_count(enum uroce_counter c) { dev_count(cm_dev(), c, 1); }

/* 2^(t-8) ms: the kernel's reading of 4.096 us x 2^t (§3.6) */
static uint32_t cm_to_ms(unsigned t) { return t <= 8 ? 1 : 1u << (t - 8 > 20 ? 20 : t - 8); }

/* §3.6 cm_ack_timeout: the QP's ACK timeout from the peer's ACK delay */
static uint8_t cm_ack_timeout(uint8_t ack_delay)
{
	unsigned t = CM_PLT + 1;
	if (t >= ack_delay)
		t += ack_delay >= t - 1;
	else
		t = ack_delay + (t >= (unsigned)ack_delay - 1);
	return (uint8_t)(t > 31 ? 31 : t);
}

int cm_port_claim(int gid_index, uint16_t ps, uint16_t port)
{
	return -net_cm_port_claim(cm_dev()->net, gid_index, ps, port);
}

void cm_port_release(int gid_index, uint16_t ps, uint16_t port)
{
	net_cm_port_release(cm_dev()->net, gid_index, ps, port);
}

int cm_gid_index(const uint8_t gid[16])
{
	for (int i = 0; i < cm.ngids; i++)
		if (!memcmp(cm.gids[i], gid, 16))
			return i;
	return -1;
}

void cm_kick(void)
{
	uint64_t one = 1;
	if (gsi.kick_fd >= 0 && write(gsi.kick_fd, &one, 8) < 0) {
		/* full counter: the thread is woken anyway */
	}
}

/* ------------------------------------------------------------ QP1 I/O */

static int gsi_post_recv(unsigned i)
{
	struct ibv_sge sge = { (uintptr_t)(gsi.bufs + (size_t)i * GSI_BUF), GSI_BUF, gsi.mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_recv(gsi.qp, &wr, &bad);
}

/* One MAD to QP1 of gid, from our GID sgid_index (cm.lock held). */
static int gsi_send(const uint8_t gid[16], int sgid_index, uint8_t tclass, const uint8_t mad[MAD_LEN])
{
	struct ibv_wc wc[16];
	while (ibv_poll_cq(gsi.scq, 16, wc) > 0) {
	}
	struct ibv_ah_attr aa = {
		.is_global = 1, .port_num = 1,
		.grh = { .sgid_index = (uint8_t)(sgid_index < 0 ? 0 : sgid_index), .hop_limit = CM_HOP_LIMIT,
			 .traffic_class = tclass },
	};
	memcpy(aa.grh.dgid.raw, gid, 16);
	struct ibv_ah *ah = ibv_create_ah(cm.pd, &aa);
	if (!ah)
		return -1;
	/* inline: the MAD is copied at the post, so no buffer is still to be
	 * read by a WQE when the next MAD is built (a QP1 flood fills the SQ) */
	struct ibv_sge sge = { (uintptr_t)mad, MAD_LEN, 0 };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE },
			   *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = GSI_QPN;
	wr.wr.ud.remote_qkey = GSI_QKEY;
	int rc = ibv_post_send(gsi.qp, &wr, &bad);
	ibv_destroy_ah(ah); /* the WQE took its address (sq/post.c) */
	if (!rc)
		cm_count(UC_cm_mads_tx);
	return rc ? -1 : 0;
}

static void conn_send(struct cm_conn *k)
{
	gsi_send(k->peer_gid, k->sgid_index, k->tclass, k->mad);
}

static void conn_arm(struct cm_conn *k, uint32_t ms, int retries)
{
	k->timeout_ms = ms;
	k->retries = retries;
	k->due_ns = cm_now_ns() + (uint64_t)ms * 1000000ull;
	cm_kick();
}

/* ------------------------------------------------------------ connections */

struct cm_conn *cm_conn_new(struct cm_id *id)
{
	struct cm_conn *k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	k->id = id;
	/* a random comm ID of no live or timewait connection (§3.4), with
	 * our slot in its high bits: on a shared address the replies to it
	 * find this process (net/share.h) */
	for (;;) {
		k->local_id = (uint32_t)cm_dev()->net->qpn_slot << SHARE_COMM_ID_SHIFT |
			      (cm_random() & ((1u << SHARE_COMM_ID_SHIFT) - 1));
		bool used = !k->local_id;
		for (struct cm_conn *o = cm.conns; o && !used; o = o->next)
			used = o->local_id == k->local_id;
		if (!used)
			break;
	}
	k->rq_psn = cm_random() & 0xFFFFFF;
	k->hop_limit = CM_HOP_LIMIT;
	cm_count(UC_cm_conns_made);
	k->next = cm.conns;
	cm.conns = k;
	if (id)
		id->conn = k;
	return k;
}

static void conn_free(struct cm_conn *k)
{
	for (struct cm_conn **pp = &cm.conns; *pp; pp = &(*pp)->next)
		if (*pp == k) {
			*pp = k->next;
			break;
		}
	if (k->id && k->id->conn == k)
		k->id->conn = NULL;
	free(k);
	cm_count(UC_cm_conns_freed);
}

static struct cm_conn *conn_by_local(uint32_t id)
{
	for (struct cm_conn *k = cm.conns; k; k = k->next)
		if (k->local_id == id)
			return k;
	return NULL;
}

static struct cm_conn *conn_by_remote(uint32_t rid, uint64_t guid)
{
	for (struct cm_conn *k = cm.conns; k; k = k->next)
		if (k->remote_id == rid && k->remote_guid == guid && k->state != CS_REQ_SENT &&
		    k->state != CS_SIDR_REQ_SENT)
			return k;
	return NULL;
}

/* An ended connection: its id may connect again; a detached one goes. */
static void conn_end(struct cm_conn *k)
{
	k->state = CS_IDLE;
	k->due_ns = 0;
	if (!k->id)
		conn_free(k);
}

static void conn_timewait(struct cm_conn *k)
{
	k->state = CS_TIMEWAIT;
	conn_arm(k, cm_to_ms(k->ack_timeout ? k->ack_timeout : CM_PLT + 1), 0);
}

/* ------------------------------------------------------------ messages */

static void mad_start(struct cm_conn *k, uint16_t attr)
{
	mad_hdr_set(k->mad, attr, k->tid);
	memset(k->mad + MAD_HDR_LEN, 0, CM_BODY_LEN);
}
static uint8_t *body(struct cm_conn *k) { return k->mad + MAD_HDR_LEN; }

/* The 36-byte IP CM header (§3.3) */
static void ip_hdr_put(uint8_t *h, const struct cm_id *c)
{
	const struct sockaddr *src = &c->id.route.addr.src_addr, *dst = &c->id.route.addr.dst_addr;
	h[0] = 0;
	h[1] = src->sa_family == AF_INET6 ? 0x60 : 0x40;
	memcpy(h + 2, &((const struct sockaddr_in *)src)->sin_port, 2); /* same offset in sockaddr_in6 */
	if (src->sa_family == AF_INET6) {
		memcpy(h + 4, &((const struct sockaddr_in6 *)src)->sin6_addr, 16);
		memcpy(h + 20, &((const struct sockaddr_in6 *)dst)->sin6_addr, 16);
	} else {
		memcpy(h + 16, &((const struct sockaddr_in *)src)->sin_addr, 4);
		memcpy(h + 32, &((const struct sockaddr_in *)dst)->sin_addr, 4);
	}
}

int cm_send_req(struct cm_id *c, const struct rdma_conn_param *p)
{
	struct cm_conn *k = c->conn;
	uint8_t *b;
	uint16_t sport = ntohs(((struct sockaddr_in *)&c->id.route.addr.src_addr)->sin_port);
	uint16_t dport = ntohs(((struct sockaddr_in *)&c->id.route.addr.dst_addr)->sin_port);

	k->tid = (uint64_t)cm_random() << 32 | k->local_id;
	mad_start(k, CM_ATTR_REQ);
	b = body(k);
	st32(b + REQ_LOCAL_COMM_ID, k->local_id);
	st64(b + REQ_SERVICE_ID, cm_service_id((uint16_t)c->id.ps, dport));
	memcpy(b + REQ_LOCAL_CA_GUID, &cm.guid, 8);
	st32(b + REQ_QPN_RESP_RES, k->local_qpn << 8 | k->resp_res);
	st32(b + REQ_EECN_INIT_DEPTH, k->init_depth);
	b[REQ_TIMEOUT_TYPE] = (uint8_t)(CM_RESPONSE_TIMEOUT << 3 | (k->qp_type == IBV_QPT_UC ? 1 : 0) << 1 |
					(k->flow_control & 1));
	st32(b + REQ_START_PSN, k->rq_psn << 8 | CM_RESPONSE_TIMEOUT << 3 | (k->retry & 7));
	st16(b + REQ_PKEY, 0xFFFF);
	b[REQ_MTU_RNR] = (uint8_t)(k->mtu << 4 | (k->rnr & 7));
	b[REQ_MAXRETRY_SRQ] = (uint8_t)(CM_MAX_RETRIES << 4 | (k->srq & 1) << 3);
	st16(b + REQ_LOCAL_LID, 0xFFFF);
	st16(b + REQ_REMOTE_LID, 0xFFFF);
	memcpy(b + REQ_LOCAL_GID, cm.gids[k->sgid_index], 16);
	memcpy(b + REQ_REMOTE_GID, k->peer_gid, 16);
	/* §3.4: the kernel's RoCE flow label from the two ports */
	k->flow_label = ((uint32_t)sport * 31 + dport) & 0xFFFFF;
	st32(b + REQ_FLOW_LABEL, k->flow_label << 12);
	b[REQ_TCLASS] = k->tclass;
	b[REQ_HOP_LIMIT] = k->hop_limit;
	b[REQ_ACK_TIMEOUT] = (uint8_t)(k->ack_timeout << 3);
	ip_hdr_put(b + REQ_PRIVATE, c);
	if (p && p->private_data_len)
		memcpy(b + REQ_PRIVATE + CM_IP_HDR_LEN, p->private_data, p->private_data_len);
	k->state = CS_REQ_SENT;
	conn_send(k);
	/* §4.1: 2 x packet lifetime + the peer's response timeout */
	conn_arm(k, 2 * cm_to_ms(CM_PLT) + cm_to_ms(CM_RESPONSE_TIMEOUT), CM_MAX_RETRIES);
	return 0;
}

int cm_send_rep(struct cm_id *c, const struct rdma_conn_param *p)
{
	struct cm_conn *k = c->conn;
	uint8_t *b;

	mad_start(k, CM_ATTR_REP);
	b = body(k);
	st32(b + REP_LOCAL_COMM_ID, k->local_id);
	st32(b + REP_REMOTE_COMM_ID, k->remote_id);
	st32(b + REP_LOCAL_QKEY, 0);
	st32(b + REP_LOCAL_QPN, k->local_qpn << 8);
	st32(b + REP_START_PSN, k->rq_psn << 8);
	b[REP_RESP_RES] = k->resp_res;
	b[REP_INIT_DEPTH] = k->init_depth;
	b[REP_ACK_DELAY] = (uint8_t)(cm.ack_delay << 3 | (k->flow_control & 1));
	b[REP_RNR_SRQ] = (uint8_t)((k->rnr & 7) << 5 | (k->srq & 1) << 4);
	memcpy(b + REP_LOCAL_CA_GUID, &cm.guid, 8);
	if (p && p->private_data_len)
		memcpy(b + REP_PRIVATE, p->private_data, p->private_data_len);
	k->state = CS_REP_SENT;
	conn_send(k);
	/* §4.1: the REQ's LocalCMResponseTimeout, its MaxCMRetries */
	conn_arm(k, k->timeout_ms, k->retries);
	return 0;
}

static void ids_put(uint8_t *b, uint32_t local, uint32_t remote)
{
	st32(b, local);
	st32(b + 4, remote);
}

int cm_send_rtu(struct cm_conn *k)
{
	mad_start(k, CM_ATTR_RTU);
	ids_put(body(k), k->local_id, k->remote_id);
	k->state = CS_ESTABLISHED;
	k->due_ns = 0;
	conn_send(k);
	return 0;
}

int cm_send_rej(struct cm_conn *k, uint16_t reason, const void *pd, uint8_t len)
{
	uint8_t *b;
	mad_start(k, CM_ATTR_REJ);
	b = body(k);
	ids_put(b, k->local_id, k->remote_id);
	/* the kernel's cm_format_rej: what the state says was rejected */
	b[REJ_MSG] = (uint8_t)((k->state == CS_REQ_RCVD	  ? CM_MSG_REQ
				: k->state == CS_REP_RCVD ? CM_MSG_REP
							  : CM_MSG_OTHER)
			       << 6);
	st16(b + REJ_REASON, reason);
	if (reason == CM_REJ_TIMEOUT) {
		/* ARI: our CA GUID (§2.2) */
		b[REJ_INFO_LEN] = 8 << 1;
		memcpy(b + REJ_ARI, &cm.guid, 8);
	}
	if (pd && len)
		memcpy(b + REJ_PRIVATE, pd, len);
	conn_send(k);
	cm_count(UC_cm_rejects_tx);
	return 0;
}

int cm_send_dreq(struct cm_conn *k)
{
	uint8_t *b;
	mad_start(k, CM_ATTR_DREQ);
	b = body(k);
	ids_put(b, k->local_id, k->remote_id);
	/* the receiver's QPN: the kernel drops a DREQ naming another (§6.1 item 3) */
	st32(b + DREQ_REMOTE_QPN, k->remote_qpn << 8);
	k->state = CS_DREQ_SENT;
	conn_send(k);
	conn_arm(k, 2 * cm_to_ms(CM_PLT) + cm_to_ms(CM_RESPONSE_TIMEOUT), CM_MAX_RETRIES);
	return 0;
}

int cm_send_drep(struct cm_conn *k)
{
	mad_start(k, CM_ATTR_DREP);
	ids_put(body(k), k->local_id, k->remote_id);
	conn_send(k);
	conn_timewait(k);
	return 0;
}

int cm_send_sidr_req(struct cm_id *c, const struct rdma_conn_param *p)
{
	struct cm_conn *k = c->conn;
	uint8_t *b;
	uint16_t dport = ntohs(((struct sockaddr_in *)&c->id.route.addr.dst_addr)->sin_port);

	k->tid = (uint64_t)cm_random() << 32 | k->local_id;
	mad_start(k, CM_ATTR_SIDR_REQ);
	b = body(k);
	st32(b + SIDR_REQ_ID, k->local_id);
	st16(b + SIDR_REQ_PKEY, 0xFFFF);
	st64(b + SIDR_REQ_SERVICE_ID, cm_service_id((uint16_t)c->id.ps, dport));
	ip_hdr_put(b + SIDR_REQ_PRIVATE, c);
	if (p && p->private_data_len)
		memcpy(b + SIDR_REQ_PRIVATE + CM_IP_HDR_LEN, p->private_data, p->private_data_len);
	k->state = CS_SIDR_REQ_SENT;
	conn_send(k);
	conn_arm(k, cm_to_ms(CM_RESPONSE_TIMEOUT), CM_MAX_RETRIES);
	return 0;
}

/* A SIDR_REP (a reply, no state of its own: the connection ends with it) */
static void sidr_rep_put(uint8_t mad[MAD_LEN], uint64_t tid, uint32_t req_id, uint64_t sid, int status, uint32_t qpn,
			 uint32_t qkey, const void *pd, uint8_t len)
{
	uint8_t *b = mad + MAD_HDR_LEN;
	mad_hdr_set(mad, CM_ATTR_SIDR_REP, tid);
	memset(b, 0, CM_BODY_LEN);
	st32(b + SIDR_REP_ID, req_id);
	b[SIDR_REP_STATUS] = (uint8_t)status;
	st32(b + SIDR_REP_QPN, qpn << 8);
	st64(b + SIDR_REP_SERVICE_ID, sid);
	st32(b + SIDR_REP_QKEY, qkey);
	if (pd && len)
		memcpy(b + SIDR_REP_PRIVATE, pd, len);
}

int cm_send_sidr_rep(struct cm_id *c, int status, const struct rdma_conn_param *p)
{
	struct cm_conn *k = c->conn;
	sidr_rep_put(k->mad, k->tid, k->remote_id, cm_service_id((uint16_t)c->id.ps, c->port), status,
		     c->id.qp ? c->id.qp->qp_num : p ? p->qp_num : 0, c->ud_qkey, p ? p->private_data : NULL,
		     p ? p->private_data_len : 0);
	conn_send(k);
	conn_end(k);
	return 0;
}

void cm_conn_detach(struct cm_conn *k)
{
	k->id = NULL;
	switch (k->state) {
	case CS_ESTABLISHED:
		cm_send_dreq(k);
		break;
	case CS_REQ_SENT:
		cm_send_rej(k, CM_REJ_TIMEOUT, NULL, 0);
		conn_end(k);
		break;
	case CS_REQ_RCVD: case CS_REP_SENT: case CS_REP_RCVD:
		cm_send_rej(k, CM_REJ_CONSUMER_DEFINED, NULL, 0);
		conn_end(k);
		break;
	case CS_DREQ_RCVD:
		cm_send_drep(k);
		break;
	case CS_DREQ_SENT: case CS_TIMEWAIT:
		break; /* the timer ends it */
	default:
		conn_end(k);
	}
}

/* ------------------------------------------------------------ QP attributes (§2.5) */

int cm_qp_attr(struct cm_id *c, struct ibv_qp_attr *a, int *mask)
{
	struct cm_conn *k = c->conn;
	enum ibv_qp_state want = a->qp_state;
	bool ud = c->id.qp_type == IBV_QPT_UD;

	memset(a, 0, sizeof(*a));
	a->qp_state = want;
	switch (want) {
	case IBV_QPS_INIT:
		*mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		a->port_num = 1;
		if (ud) {
			a->qkey = c->ud_qkey;
			*mask |= IBV_QP_QKEY;
		} else {
			*mask |= IBV_QP_ACCESS_FLAGS;
			/* no CM state yet on an active id: 0 (§2.5) */
			if (k && k->state != CS_IDLE)
				a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
						     (k->resp_res ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0);
		}
		return 0;
	case IBV_QPS_RTR:
		*mask = IBV_QP_STATE;
		if (ud)
			return 0;
		if (!k || k->state == CS_IDLE)
			return EINVAL;
		*mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		a->ah_attr.is_global = 1;
		a->ah_attr.port_num = 1;
		memcpy(a->ah_attr.grh.dgid.raw, k->peer_gid, 16);
		a->ah_attr.grh.sgid_index = (uint8_t)k->sgid_index;
		a->ah_attr.grh.hop_limit = k->hop_limit;
		a->ah_attr.grh.traffic_class = k->tclass;
		a->ah_attr.grh.flow_label = k->flow_label;
		a->path_mtu = (enum ibv_mtu)k->mtu;
		a->dest_qp_num = k->remote_qpn;
		a->rq_psn = k->rq_psn;
		if (c->id.qp_type == IBV_QPT_RC) {
			*mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
			a->max_dest_rd_atomic = k->resp_res;
			a->min_rnr_timer = 0;
		}
		return 0;
	case IBV_QPS_RTS:
		*mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		if (ud)
			return 0;
		if (!k || k->state == CS_IDLE)
			return EINVAL;
		a->sq_psn = k->sq_psn;
		if (c->id.qp_type == IBV_QPT_RC) {
			*mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
			a->timeout = c->ack_timeout_set ? c->ack_timeout : k->ack_timeout;
			a->retry_cnt = k->retry;
			a->rnr_retry = k->rnr;
			a->max_rd_atomic = k->init_depth;
		}
		return 0;
	default:
		return EINVAL;
	}
}

static int qp_to(struct cm_id *c, enum ibv_qp_state s)
{
	struct ibv_qp_attr a = { .qp_state = s };
	int mask, rc = cm_qp_attr(c, &a, &mask);
	return rc ? rc : ibv_modify_qp(c->id.qp, &a, mask);
}

int cm_qp_rtr_rts(struct cm_id *c)
{
	int rc;
	if (!c->id.qp)
		return 0;
	/* INIT again with the access the connection allows (§2.5) */
	if ((rc = qp_to(c, IBV_QPS_INIT)) || (rc = qp_to(c, IBV_QPS_RTR)) || (rc = qp_to(c, IBV_QPS_RTS)))
		return rc;
	return 0;
}

void cm_qp_to_err(struct cm_id *c)
{
	if (c->id.qp) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
		ibv_modify_qp(c->id.qp, &a, IBV_QP_STATE);
	}
}

/* ------------------------------------------------------------ receive */

/* A reply made on receive, with no connection behind it: to the packet's
 * source (§3.8). */
static void reply_rej(const uint8_t *req, const uint8_t src[16], int sgid_index, uint16_t reason)
{
	uint8_t mad[MAD_LEN] = { 0 }, *b = mad + MAD_HDR_LEN;
	mad_hdr_set(mad, CM_ATTR_REJ, mad_tid(req));
	st32(b, 0);
	st32(b + 4, ld32(req + MAD_HDR_LEN)); /* the REQ's Local Comm ID */
	b[REJ_MSG] = CM_MSG_REQ << 6;
	st16(b + REJ_REASON, reason);
	gsi_send(src, sgid_index, 0, mad);
	cm_count(UC_cm_rejects_tx);
}

static void reply_drep(const uint8_t *dreq, const uint8_t src[16], int sgid_index)
{
	uint8_t mad[MAD_LEN] = { 0 }, *b = mad + MAD_HDR_LEN;
	mad_hdr_set(mad, CM_ATTR_DREP, mad_tid(dreq));
	ids_put(b, ld32(dreq + MAD_HDR_LEN + 4), ld32(dreq + MAD_HDR_LEN));
	gsi_send(src, sgid_index, 0, mad);
}

/* The IP CM header of a REQ / SIDR_REQ (§3.3): the peer's and our
 * address as socket addresses; false when malformed. */
static bool ip_hdr_get(const uint8_t *h, uint16_t dport, struct sockaddr_storage *src, struct sockaddr_storage *dst)
{
	uint8_t ver = h[1] >> 4;
	memset(src, 0, sizeof(*src));
	memset(dst, 0, sizeof(*dst));
	if (h[0] != 0 || (ver != 4 && ver != 6))
		return false;
	if (ver == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)src, *d = (struct sockaddr_in *)dst;
		s->sin_family = d->sin_family = AF_INET;
		memcpy(&s->sin_port, h + 2, 2);
		memcpy(&s->sin_addr, h + 16, 4);
		memcpy(&d->sin_addr, h + 32, 4);
		d->sin_port = htons(dport);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)src, *d = (struct sockaddr_in6 *)dst;
		s->sin6_family = d->sin6_family = AF_INET6;
		memcpy(&s->sin6_port, h + 2, 2);
		memcpy(&s->sin6_addr, h + 4, 16);
		memcpy(&d->sin6_addr, h + 20, 16);
		d->sin6_port = htons(dport);
	}
	return true;
}

/* The index of the GID a request was sent to (its IP CM header's
 * destination), -1 when it is none of ours. */
static int local_gid_index(const struct sockaddr_storage *local)
{
	uint8_t gid[16];
	uint16_t port;
	sockaddr_to_gid(local, gid, &port);
	return cm_gid_index(gid);
}

static void set_route_addrs(struct cm_id *c, const struct sockaddr_storage *local, const struct sockaddr_storage *peer)
{
	memcpy(&c->id.route.addr.src_storage, local, sizeof(*local));
	memcpy(&c->id.route.addr.dst_storage, peer, sizeof(*peer));
}

/* A request's child that cannot be reported: nobody knows of it yet, so
 * it goes without a word, as a dropped REQ (the peer resends). */
static void conn_drop_child(struct cm_id *c)
{
	struct cm_conn *k = c->conn;
	if (k) {
		k->id = NULL;
		conn_free(k);
	}
	cm_child_drop(c);
}

/* A request's child takes its addresses (the IP CM header's, §3.3) and
 * is reported on its listener's channel; NULL: it could not be, and is
 * gone. */
static struct cm_event *child_request(struct cm_id *c, struct cm_id *l, int gi, uint16_t port,
				      const struct sockaddr_storage *local, const struct sockaddr_storage *peer,
				      const uint8_t peer_gid[16])
{
	c->gid_index = gi;
	c->port = port;
	set_route_addrs(c, local, peer);
	memcpy(c->id.route.addr.addr.ibaddr.sgid.raw, cm.gids[gi], 16);
	memcpy(c->id.route.addr.addr.ibaddr.dgid.raw, peer_gid, 16);
	c->id.route.addr.addr.ibaddr.pkey = htons(0xFFFF);
	c->state = ID_CONNECT;
	struct cm_event *e = cm_report_ev(c, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
	if (!e) {
		conn_drop_child(c);
		return NULL;
	}
	l->reqs_unread++;
	e->ev.listen_id = &l->id;
	return e;
}

static void on_req(const uint8_t *mad, const uint8_t src[16], int dst_index, uint8_t ttl)
{
	const uint8_t *b = mad + MAD_HDR_LEN;
	uint32_t rid = ld32(b + REQ_LOCAL_COMM_ID);
	uint64_t guid;
	memcpy(&guid, b + REQ_LOCAL_CA_GUID, 8);

	struct cm_conn *dup = conn_by_remote(rid, guid);
	if (dup) {
		/* §3.8 a retransmitted REQ */
		if (dup->state == CS_REP_SENT)
			conn_send(dup);
		else if (dup->state == CS_REQ_RCVD) {
			uint8_t m[MAD_LEN] = { 0 };
			mad_hdr_set(m, CM_ATTR_MRA, dup->tid);
			ids_put(m + MAD_HDR_LEN, dup->local_id, dup->remote_id);
			m[MAD_HDR_LEN + MRA_MSG] = CM_MSG_REQ << 6;
			m[MAD_HDR_LEN + MRA_TIMEOUT] = CM_MRA_TIMEOUT << 3;
			gsi_send(dup->peer_gid, dup->sgid_index, dup->tclass, m);
		} else if (dup->state == CS_TIMEWAIT)
			reply_rej(mad, src, dst_index, CM_REJ_STALE_CONN);
		return;
	}
	uint64_t sid = ld64(b + REQ_SERVICE_ID);
	uint16_t ps = (uint16_t)(sid >> 16), port = (uint16_t)sid;
	struct sockaddr_storage peer, local;
	bool port_listened;
	if (sid >> 32 || (ps != RDMA_PS_TCP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB)) {
		reply_rej(mad, src, dst_index, CM_REJ_INVALID_SERVICE_ID);
		return;
	}
	bool hdr_ok = ip_hdr_get(b + REQ_PRIVATE, port, &peer, &local);
	int gi = hdr_ok ? local_gid_index(&local) : -1;
	struct cm_id *l = cm_find_listener(ps, port, gi, &port_listened);
	if (!port_listened) {
		reply_rej(mad, src, dst_index, CM_REJ_INVALID_SERVICE_ID);
		return;
	}
	unsigned type = (b[REQ_TIMEOUT_TYPE] >> 1) & 3;
	enum ibv_qp_type qpt = type == 1 ? IBV_QPT_UC : IBV_QPT_RC;
	/* §4.3: a listener of another QP type rejects (the kernel's
	 * cma_check_req_qp_type) */
	if (!l || !hdr_ok || gi < 0 || (type != 0 && type != 1) || l->id.qp_type != qpt) {
		reply_rej(mad, src, dst_index, CM_REJ_CONSUMER_DEFINED);
		return;
	}
	if (l->reqs_unread >= l->backlog) {
		cm_count(UC_cm_backlog_drops);
		return; /* §4.3: dropped without a REJ, the peer resends */
	}
	struct cm_id *c = cm_child_new(l);
	struct cm_conn *k = c ? cm_conn_new(c) : NULL;
	if (!k) {
		if (c)
			cm_child_drop(c);
		return; /* like a full backlog: dropped, the peer resends (§4.3) */
	}
	k->remote_id = rid;
	k->remote_guid = guid;
	k->tid = mad_tid(mad);
	memcpy(k->peer_gid, b + REQ_LOCAL_GID, 16);
	k->sgid_index = gi;
	k->remote_qpn = ld32(b + REQ_QPN_RESP_RES) >> 8;
	k->sq_psn = ld32(b + REQ_START_PSN) >> 8;
	/* §6.1 item 2: the peer's ResponderResources are our initiator depth */
	k->init_depth = b[REQ_QPN_RESP_RES + 3];
	k->resp_res = b[REQ_EECN_INIT_DEPTH + 3];
	k->retry = b[REQ_START_PSN + 3] & 7;
	k->rnr = b[REQ_MTU_RNR] & 7;
	k->mtu = b[REQ_MTU_RNR] >> 4;
	if (k->mtu < IBV_MTU_256 || k->mtu > IBV_MTU_4096)
		k->mtu = IBV_MTU_1024;
	k->srq = (b[REQ_MAXRETRY_SRQ] >> 3) & 1;
	k->flow_control = b[REQ_TIMEOUT_TYPE] & 1;
	k->qp_type = (uint8_t)qpt;
	k->ack_timeout = b[REQ_ACK_TIMEOUT] >> 3;
	k->tclass = b[REQ_TCLASS];
	k->hop_limit = ttl ? ttl : CM_HOP_LIMIT;
	k->flow_label = ld32(b + REQ_FLOW_LABEL) >> 12;
	/* our REP's resends: the REQ's LocalCMResponseTimeout and MaxCMRetries (§4.1) */
	k->timeout_ms = cm_to_ms(b[REQ_START_PSN + 3] >> 3);
	k->retries = b[REQ_MAXRETRY_SRQ] >> 4;
	k->state = CS_REQ_RCVD;
	c->req_resp_res = k->resp_res;
	c->req_init_depth = k->init_depth;
	/* §2.4: the private data after the IP header, always 56 bytes */
	struct cm_event *e = child_request(c, l, gi, port, &local, &peer, k->peer_gid);
	if (!e)
		return;
	memcpy(e->priv, b + REQ_PRIVATE + CM_IP_HDR_LEN, REQ_PRIVATE_LEN - CM_IP_HDR_LEN);
	e->ev.param.conn.private_data = e->priv;
	e->ev.param.conn.private_data_len = REQ_PRIVATE_LEN - CM_IP_HDR_LEN;
	e->ev.param.conn.responder_resources = k->resp_res;
	e->ev.param.conn.initiator_depth = k->init_depth;
	e->ev.param.conn.flow_control = k->flow_control;
	e->ev.param.conn.retry_count = k->retry;
	e->ev.param.conn.rnr_retry_count = k->rnr;
	e->ev.param.conn.srq = k->srq;
	e->ev.param.conn.qp_num = k->remote_qpn;
}

static void fill_rep_event(struct cm_event *e, struct cm_conn *k, const uint8_t *b)
{
	memcpy(e->priv, b + REP_PRIVATE, REP_PRIVATE_LEN);
	e->ev.param.conn.private_data = e->priv;
	e->ev.param.conn.private_data_len = REP_PRIVATE_LEN;
	e->ev.param.conn.responder_resources = k->resp_res;
	e->ev.param.conn.initiator_depth = k->init_depth;
	e->ev.param.conn.flow_control = k->flow_control;
	e->ev.param.conn.rnr_retry_count = k->rnr;
	e->ev.param.conn.srq = k->srq;
	e->ev.param.conn.qp_num = k->remote_qpn;
}

static void on_rep(struct cm_conn *k, const uint8_t *mad)
{
	const uint8_t *b = mad + MAD_HDR_LEN;
	struct cm_id *c = k->id;

	if (k->state == CS_ESTABLISHED && k->remote_id == ld32(b + REP_LOCAL_COMM_ID)) {
		/* our RTU was lost (§4.1) */
		mad_start(k, CM_ATTR_RTU);
		ids_put(body(k), k->local_id, k->remote_id);
		conn_send(k);
		return;
	}
	if (k->state != CS_REQ_SENT) {
		cm_count(UC_cm_mads_unmatched);
		return;
	}
	k->remote_id = ld32(b + REP_LOCAL_COMM_ID);
	memcpy(&k->remote_guid, b + REP_LOCAL_CA_GUID, 8);
	k->remote_qpn = ld32(b + REP_LOCAL_QPN) >> 8;
	k->sq_psn = ld32(b + REP_START_PSN) >> 8;
	k->init_depth = b[REP_RESP_RES];
	k->resp_res = b[REP_INIT_DEPTH];
	k->rnr = b[REP_RNR_SRQ] >> 5;
	k->srq = (b[REP_RNR_SRQ] >> 4) & 1;
	k->flow_control = b[REP_ACK_DELAY] & 1;
	k->ack_timeout = cm_ack_timeout(b[REP_ACK_DELAY] >> 3);
	k->due_ns = 0;
	if (!c) {
		conn_end(k);
		return;
	}
	if (!c->id.qp) {
		/* rdma_establish sends the RTU (UCX, rping -q) */
		k->state = CS_REP_RCVD;
		struct cm_event *e = cm_report_ev(c, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
		if (e)
			fill_rep_event(e, k, b);
		return;
	}
	k->state = CS_REP_RCVD;
	if (cm_qp_rtr_rts(c)) {
		/* §4.2: the QP to error, REJ 28, CONNECT_ERROR */
		cm_qp_to_err(c);
		cm_send_rej(k, CM_REJ_CONSUMER_DEFINED, NULL, 0);
		conn_end(k);
		c->connect_error = true;
		c->state = ID_ROUTE_RESOLVED;
		cm_report(c, RDMA_CM_EVENT_CONNECT_ERROR, -EINVAL, NULL, 0);
		return;
	}
	cm_send_rtu(k);
	c->state = ID_CONNECTED;
	struct cm_event *e = cm_report_ev(c, RDMA_CM_EVENT_ESTABLISHED, 0);
	if (e)
		fill_rep_event(e, k, b);
}

static void on_rtu(struct cm_conn *k)
{
	if (k->state != CS_REP_SENT) {
		cm_count(UC_cm_mads_unmatched);
		return;
	}
	k->state = CS_ESTABLISHED;
	k->due_ns = 0;
	if (k->id) {
		k->id->state = ID_CONNECTED;
		cm_report(k->id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
	}
}

static void on_rej(struct cm_conn *k, const uint8_t *mad)
{
	const uint8_t *b = mad + MAD_HDR_LEN;
	uint16_t reason = ld16(b + REJ_REASON);
	struct cm_id *c = k->id;

	if (k->state != CS_REQ_SENT && k->state != CS_REP_SENT && k->state != CS_REP_RCVD && k->state != CS_REQ_RCVD) {
		cm_count(UC_cm_mads_unmatched);
		return;
	}
	if (reason == CM_REJ_STALE_CONN)
		conn_timewait(k);
	else
		conn_end(k);
	if (!c)
		return;
	cm_qp_to_err(c); /* §2.3 REJECTED also moves the QP to ERR */
	c->state = c->listener ? ID_IDLE : ID_ROUTE_RESOLVED;
	if (c->connect_error)
		return;
	struct cm_event *e = cm_report_ev(c, RDMA_CM_EVENT_REJECTED, reason);
	if (e) {
		memcpy(e->priv, b + REJ_PRIVATE, REJ_PRIVATE_LEN);
		e->ev.param.conn.private_data = e->priv;
		e->ev.param.conn.private_data_len = REJ_PRIVATE_LEN;
	}
}

static void on_mra(struct cm_conn *k, const uint8_t *mad)
{
	unsigned to = mad[MAD_HDR_LEN + MRA_TIMEOUT] >> 3;
	if (k->state != CS_REQ_SENT && k->state != CS_REP_SENT && k->state != CS_DREQ_SENT)
		return;
	/* §4.1: the service timeout plus a packet lifetime, the retries kept */
	k->due_ns = cm_now_ns() + ((uint64_t)cm_to_ms(to) + cm_to_ms(CM_PLT + 1)) * 1000000ull;
	cm_kick();
}

static void on_dreq(struct cm_conn *k, const uint8_t *mad, const uint8_t src[16], int dst_index)
{
	const uint8_t *b = mad + MAD_HDR_LEN;
	if ((ld32(b + DREQ_REMOTE_QPN) >> 8) != k->local_qpn) {
		cm_count(UC_cm_mads_unmatched); /* the kernel drops it silently too (§3.5) */
		return;
	}
	switch (k->state) {
	case CS_ESTABLISHED: case CS_REP_SENT:
		k->state = CS_DREQ_RCVD;
		k->due_ns = 0;
		if (!k->id) {
			cm_send_drep(k);
			return;
		}
		k->id->state = ID_DISCONNECT;
		if (!k->id->connect_error)
			cm_report(k->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
		break;
	case CS_DREQ_SENT:
		/* crossed DREQs: each answers the other's */
		cm_send_drep(k);
		if (k->id && !k->id->connect_error)
			cm_report(k->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
		break;
	case CS_TIMEWAIT:
		mad_start(k, CM_ATTR_DREP);
		ids_put(body(k), k->local_id, k->remote_id);
		conn_send(k);
		break;
	default:
		reply_drep(mad, src, dst_index);
	}
}

static void on_drep(struct cm_conn *k)
{
	if (k->state != CS_DREQ_SENT) {
		cm_count(UC_cm_mads_unmatched);
		return;
	}
	conn_timewait(k);
	if (k->id && !k->id->connect_error)
		cm_report(k->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
}

static void on_sidr_req(const uint8_t *mad, const uint8_t src[16], int dst_index)
{
	const uint8_t *b = mad + MAD_HDR_LEN;
	uint64_t sid = ld64(b + SIDR_REQ_SERVICE_ID);
	uint16_t ps = (uint16_t)(sid >> 16), port = (uint16_t)sid;
	uint32_t rid = ld32(b + SIDR_REQ_ID);
	struct sockaddr_storage peer, local;
	bool port_listened;

	/* §3.7: duplicates by request ID */
	for (struct cm_conn *o = cm.conns; o; o = o->next)
		if (o->remote_id == rid && o->state == CS_REQ_RCVD && o->qp_type == IBV_QPT_UD && !memcmp(o->peer_gid, src, 16))
			return;
	bool hdr_ok = ip_hdr_get(b + SIDR_REQ_PRIVATE, port, &peer, &local);
	int gi = hdr_ok ? local_gid_index(&local) : -1;
	struct cm_id *l = sid >> 32 ? NULL : cm_find_listener(ps, port, gi, &port_listened);
	/* a listener that is not UD: the kernel's CM answers REJECT
	 * (cma_check_req_qp_type fails, cm_destroy_id in SIDR_REQ_RCVD) */
	int status = !l || !hdr_ok || gi < 0 ? SIDR_UNSUPPORTED : l->id.qp_type != IBV_QPT_UD ? SIDR_REJECT : SIDR_OK;
	if (status != SIDR_OK) {
		uint8_t m[MAD_LEN];
		sidr_rep_put(m, mad_tid(mad), rid, sid, (uint8_t)status, 0, 0, NULL, 0);
		gsi_send(src, dst_index, 0, m);
		return;
	}
	if (l->reqs_unread >= l->backlog) {
		cm_count(UC_cm_backlog_drops);
		return; /* §4.3: dropped, the peer resends */
	}
	struct cm_id *c = cm_child_new(l);
	struct cm_conn *k = c ? cm_conn_new(c) : NULL;
	if (!k) {
		if (c)
			cm_child_drop(c);
		return;
	}
	k->remote_id = rid;
	k->tid = mad_tid(mad);
	memcpy(k->peer_gid, src, 16);
	k->sgid_index = gi;
	k->qp_type = IBV_QPT_UD;
	k->state = CS_REQ_RCVD;
	struct cm_event *e = child_request(c, l, gi, port, &local, &peer, src);
	if (!e)
		return;
	memcpy(e->priv, b + SIDR_REQ_PRIVATE + CM_IP_HDR_LEN, SIDR_REQ_PRIVATE_LEN - CM_IP_HDR_LEN);
	e->ev.param.ud.private_data = e->priv;
	e->ev.param.ud.private_data_len = SIDR_REQ_PRIVATE_LEN - CM_IP_HDR_LEN;
}

static void on_sidr_rep(struct cm_conn *k, const uint8_t *mad)
{
	const uint8_t *b = mad + MAD_HDR_LEN;
	struct cm_id *c = k->id;
	int status = b[SIDR_REP_STATUS];

	if (k->state != CS_SIDR_REQ_SENT) {
		cm_count(UC_cm_mads_unmatched);
		return;
	}
	conn_end(k);
	if (!c)
		return;
	if (status != SIDR_OK) {
		c->state = ID_ROUTE_RESOLVED;
		cm_report(c, RDMA_CM_EVENT_UNREACHABLE, status, NULL, 0);
		return;
	}
	c->state = ID_CONNECTED;
	struct cm_event *e = cm_report_ev(c, RDMA_CM_EVENT_ESTABLISHED, 0);
	if (!e)
		return;
	memcpy(e->priv, b + SIDR_REP_PRIVATE, SIDR_REP_PRIVATE_LEN);
	struct rdma_ud_param *u = &e->ev.param.ud;
	u->private_data = e->priv;
	u->private_data_len = SIDR_REP_PRIVATE_LEN;
	u->qp_num = ld32(b + SIDR_REP_QPN) >> 8;
	u->qkey = ld32(b + SIDR_REP_QKEY);
	u->ah_attr.is_global = 1;
	u->ah_attr.port_num = 1;
	memcpy(u->ah_attr.grh.dgid.raw, k->peer_gid, 16);
	u->ah_attr.grh.sgid_index = (uint8_t)k->sgid_index;
	u->ah_attr.grh.hop_limit = CM_HOP_LIMIT;
	u->ah_attr.grh.traffic_class = k->tclass;
}

/* One received datagram on QP1: buf = the 40-byte GRH area, then len
 * bytes.  Anything but a well-formed CM MAD is dropped and counted. */
static void cm_rx(const uint8_t *buf, uint32_t len)
{
	uint8_t src[16], dst[16];
	const uint8_t *grh = buf, *mad = buf + 40;
	uint8_t ttl;

	/* the GRH area: IPv6, or 20 zero bytes and the IPv4 header (§9) */
	if ((grh[0] >> 4) == 6) {
		memcpy(src, grh + 8, 16);
		memcpy(dst, grh + 24, 16);
		ttl = grh[7];
	} else {
		memset(src, 0, 10); src[10] = src[11] = 0xFF;
		memcpy(dst, src, 12);
		memcpy(src + 12, grh + 20 + 12, 4);
		memcpy(dst + 12, grh + 20 + 16, 4);
		ttl = grh[20 + 8];
	}
	uint16_t attr = len == 40 + MAD_LEN ? mad_attr(mad) : 0;
	if (len != 40 + MAD_LEN || mad_base_version(mad) != MAD_BASE_VERSION || mad_class(mad) != MAD_CLASS_CM ||
	    mad_class_version(mad) != MAD_CM_CLASS_VERSION || mad_method(mad) != MAD_METHOD_SEND ||
	    attr < CM_ATTR_REQ || attr > CM_ATTR_SIDR_REP) {
		cm_count(UC_cm_mads_bad);
		return;
	}
	cm_count(UC_cm_mads_rx);
	int di = cm_gid_index(dst);
	if (di < 0)
		di = 0;
	if (attr == CM_ATTR_REQ) {
		on_req(mad, src, di, ttl);
		return;
	}
	if (attr == CM_ATTR_SIDR_REQ) {
		on_sidr_req(mad, src, di);
		return;
	}
	uint32_t lid = 0;
	cm_receiver_id(mad, &lid);
	struct cm_conn *k = conn_by_local(lid);
	if (!k) {
		if (attr == CM_ATTR_DREQ)
			reply_drep(mad, src, di); /* §4.2: a DREQ for unknown IDs still gets its DREP */
		else
			cm_count(UC_cm_mads_unmatched);
		return;
	}
	/* every reply but a REJ of our REQ names the sender's ID too */
	uint32_t rid = ld32(mad + MAD_HDR_LEN);
	if (attr != CM_ATTR_SIDR_REP && attr != CM_ATTR_REP && k->remote_id && rid && rid != k->remote_id) {
		cm_count(UC_cm_mads_unmatched);
		return;
	}
	switch (attr) {
	case CM_ATTR_REP: on_rep(k, mad); break;
	case CM_ATTR_RTU: on_rtu(k); break;
	case CM_ATTR_REJ: on_rej(k, mad); break;
	case CM_ATTR_MRA: on_mra(k, mad); break;
	case CM_ATTR_DREQ: on_dreq(k, mad, src, di); break;
	case CM_ATTR_DREP: on_drep(k); break;
	case CM_ATTR_SIDR_REP: on_sidr_rep(k, mad); break;
	default: cm_count(UC_cm_mads_bad); /* LAP/APR: dropped as the kernel does on RoCE (§3.7) */
	}
}

/* ------------------------------------------------------------ timers */

static void conn_expired(struct cm_conn *k)
{
	struct cm_id *c = k->id;
	if (k->retries > 0 && k->state != CS_TIMEWAIT) {
		k->retries--;
		conn_send(k);
		cm_count(UC_cm_retransmits);
		k->due_ns = cm_now_ns() + (uint64_t)k->timeout_ms * 1000000ull;
		return;
	}
	switch (k->state) {
	case CS_REQ_SENT: case CS_REP_SENT: case CS_SIDR_REQ_SENT:
		conn_end(k);
		if (c) {
			cm_qp_to_err(c);
			c->state = c->listener ? ID_IDLE : ID_ROUTE_RESOLVED;
			cm_report(c, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL, 0);
		}
		break;
	case CS_DREQ_SENT:
		conn_timewait(k);
		if (c && !c->connect_error)
			cm_report(c, RDMA_CM_EVENT_DISCONNECTED, -ETIMEDOUT, NULL, 0);
		break;
	case CS_TIMEWAIT:
		conn_end(k);
		if (c && c->state == ID_DISCONNECT)
			cm_report(c, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, NULL, 0);
		break;
	default:
		k->due_ns = 0;
	}
}

/* Runs what is due; the ns until the next deadline, -1: none */
static int64_t cm_timers(void)
{
	uint64_t now = cm_now_ns(), next = UINT64_MAX;
	for (struct cm_conn *k = cm.conns, *n; k; k = n) {
		n = k->next;
		if (k->due_ns && k->due_ns <= now)
			conn_expired(k);
	}
	for (struct cm_conn *k = cm.conns; k; k = k->next)
		if (k->due_ns && k->due_ns < next)
			next = k->due_ns;
	return next == UINT64_MAX ? -1 : (int64_t)(next > now ? next - now : 0);
}

/* ------------------------------------------------------------ the CM thread */

/* cm.lock for the CM thread, which parks for good once the exit sweep has
 * run: no MAD or timer of ours is handled while the process's destructors
 * tear the device down, and the lock stays free for the application's own
 * atexit handlers and destructors. */
static void cm_thread_lock(void)
{
	pthread_mutex_lock(&cm.lock);
	while (cm.exiting)
		pthread_cond_wait(&cm.cond, &cm.lock);
}

static void *cm_thread(void *arg)
{
	(void)arg;
	for (;;) {
		cm_thread_lock();
		int64_t ns = cm_timers();
		pthread_mutex_unlock(&cm.lock);
		struct epoll_event ev[2];
		int n = epoll_wait(gsi.epfd, ev, 2, ns < 0 ? -1 : (int)(ns / 1000000 + 1));
		for (int i = 0; i < n; i++) {
			if (ev[i].data.u32 == 1) {
				uint64_t v;
				if (read(gsi.kick_fd, &v, 8) < 0) {
					/* EAGAIN: another read took it */
				}
				continue;
			}
			struct ibv_cq *cq;
			void *cq_ctx;
			if (ibv_get_cq_event(gsi.cc, &cq, &cq_ctx) == 0) {
				ibv_ack_cq_events(cq, 1);
				ibv_req_notify_cq(cq, 0);
			}
			struct ibv_wc wc[16];
			int got;
			while ((got = ibv_poll_cq(gsi.rcq, 16, wc)) > 0) {
				cm_thread_lock();
				for (int j = 0; j < got; j++) {
					if (wc[j].status == IBV_WC_SUCCESS)
						cm_rx(gsi.bufs + wc[j].wr_id * GSI_BUF, wc[j].byte_len);
					else if (wc[j].status == IBV_WC_LOC_LEN_ERR)
						cm_count(UC_cm_mads_bad); /* larger than a MAD */
					gsi_post_recv((unsigned)wc[j].wr_id);
				}
				pthread_mutex_unlock(&cm.lock);
			}
		}
	}
	return NULL;
}

/* At exit, what the kernel's CM does for a process's ids when it closes
 * them (§2.2): an established connection's DREQ, a pending one's REJ, a
 * DREQ's DREP -- so a peer (rxe's rping waiting 98 s on its DREQ) learns
 * at once.  Not waited for: the replies go to nobody.  A process killed
 * leaves its peers to their timers, as the kernel's would not, and as any
 * vanished host does. */
static pid_t cm_pid;

static void cm_at_exit(void)
{
	int locked = -1;
	/* a forked child's exit leaves its parent's connections alone */
	if (getpid() != cm_pid)
		return;
	for (int i = 0; i < 100 && (locked = pthread_mutex_trylock(&cm.lock)); i++)
		usleep(1000);
	if (locked)
		return; /* a thread of ours stuck under the lock: nothing safe to do */
	for (struct cm_conn *k = cm.conns, *n; k; k = n) {
		n = k->next;
		if (k->id) {
			k->id->conn = NULL;
			cm_conn_detach(k);
		}
	}
	__atomic_store_n(&cm.exiting, true, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&cm.lock);
}

/* Opens the device and QP1 and starts the CM thread, once (cm.lock held). */
int cm_start_locked(void)
{
	if (cm.started)
		return 0;
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (!l || n < 1) {
		ibv_free_device_list(l);
		return ENODEV;
	}
	cm.ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	if (!cm.ctx)
		return errno ? errno : ENODEV;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	if (ibv_query_device(cm.ctx, &da) || ibv_query_port(cm.ctx, 1, &pa))
		return EIO;
	cm.guid = da.node_guid;
	cm.max_rd_atom = (uint32_t)da.max_qp_rd_atom;
	cm.max_init_rd_atom = (uint32_t)da.max_qp_init_rd_atom;
	cm.ack_delay = da.local_ca_ack_delay;
	/* §3.4: the kernel's largest MTU the route takes; uroce's port
	 * reports the MTU of its addresses' routes already */
	cm.active_mtu = (uint8_t)pa.active_mtu;
	for (cm.ngids = 0; cm.ngids < 16 && cm.ngids < pa.gid_tbl_len; cm.ngids++) {
		union ibv_gid g;
		static const uint8_t zero[16];
		if (ibv_query_gid(cm.ctx, 1, cm.ngids, &g) || !memcmp(g.raw, zero, 16))
			break;
		memcpy(cm.gids[cm.ngids], g.raw, 16);
	}
	cm.pd = ibv_alloc_pd(cm.ctx);
	gsi.cc = ibv_create_comp_channel(cm.ctx);
	if (!cm.pd || !gsi.cc)
		return ENOMEM;
	gsi.rcq = ibv_create_cq(cm.ctx, GSI_RECVS, NULL, gsi.cc, 0);
	gsi.scq = ibv_create_cq(cm.ctx, GSI_SENDS, NULL, NULL, 0);
	gsi.bufs = calloc(GSI_RECVS, GSI_BUF);
	if (!gsi.rcq || !gsi.scq || !gsi.bufs)
		return ENOMEM;
	gsi.mr = ibv_reg_mr(cm.pd, gsi.bufs, (size_t)GSI_RECVS * GSI_BUF, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr qa = {
		.send_cq = gsi.scq, .recv_cq = gsi.rcq, .qp_type = IBV_QPT_UD, .sq_sig_all = 1,
		.cap = { .max_send_wr = GSI_SENDS, .max_recv_wr = GSI_RECVS, .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = MAD_LEN },
	};
	gsi.qp = gsi.mr ? uroce_create_gsi_qp(cm.pd, &qa) : NULL;
	if (!gsi.qp)
		return errno ? errno : ENOMEM;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = GSI_QKEY };
	if (ibv_modify_qp(gsi.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return EIO;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(gsi.qp, &a, IBV_QP_STATE))
		return EIO;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(gsi.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return EIO;
	for (unsigned i = 0; i < GSI_RECVS; i++)
		if (gsi_post_recv(i))
			return EIO;
	fcntl(gsi.cc->fd, F_SETFL, fcntl(gsi.cc->fd, F_GETFL) | O_NONBLOCK);
	ibv_req_notify_cq(gsi.rcq, 0);
	gsi.epfd = epoll_create1(EPOLL_CLOEXEC);
	gsi.kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	struct epoll_event e0 = { .events = EPOLLIN, .data.u32 = 0 }, e1 = { .events = EPOLLIN, .data.u32 = 1 };
	if (gsi.epfd < 0 || gsi.kick_fd < 0 || epoll_ctl(gsi.epfd, EPOLL_CTL_ADD, gsi.cc->fd, &e0) ||
	    epoll_ctl(gsi.epfd, EPOLL_CTL_ADD, gsi.kick_fd, &e1))
		return errno;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&gsi.thread, NULL, cm_thread, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return rc;
	pthread_detach(gsi.thread);
	pthread_setname_np(gsi.thread, "uroce-cm");
	net_cm_enable(cm_dev()->net);
	cm_pid = getpid();
	atexit(cm_at_exit);
	cm.started = true;
	return 0;
}
