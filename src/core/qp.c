/* Queue pairs: create / modify / query / destroy, posting, and the error
 * paths (flush, retire) the transport roles share. */
#include "device.h"
#include "../verbs/ops.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "qp_state.h"
#include "../transport/hdr.h"
#include "../transport/icrc.h"
#include "../transport/transport.h"

/* ------------------------------------------------------------ helpers */

bool async_event_is_qp(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST: case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED:
		return true;
	default:
		return false;
	}
}

void qp_post_async_event(struct uroce_qp *qp, enum ibv_event_type type)
{
	struct uroce_context *uctx = to_uctx(qp->ibv.qp_base.context);
	struct ibv_async_event ev = { .event_type = type };
	uint64_t one = 1;

	ev.element.qp = &qp->ibv.qp_base;
	pthread_mutex_lock(&uctx->async_lock);
	if (uctx->async_n == uctx->async_cap) {
		unsigned ncap = uctx->async_cap ? uctx->async_cap * 2 : 16;
		struct ibv_async_event *q = realloc(uctx->async_q, ncap * sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&uctx->async_lock);
			return;
		}
		uctx->async_q = q;
		uctx->async_cap = ncap;
	}
	uctx->async_q[uctx->async_n++] = ev;
	pthread_mutex_unlock(&uctx->async_lock);
	if (write(uctx->vctx.context.async_fd, &one, sizeof(one)) < 0)
		LOG_ERR("uroce: async event write failed");
}

static void fill_send_wc(struct uroce_qp *qp, struct uroce_send_wqe *w, struct ibv_wc *wc)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = w->wr_id;
	wc->status = w->status;
	wc->qp_num = qp->qpn;
	switch (w->opcode) {
	case IBV_WR_SEND: case IBV_WR_SEND_WITH_IMM: case IBV_WR_SEND_WITH_INV:
		wc->opcode = IBV_WC_SEND; break;
	case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM:
		wc->opcode = IBV_WC_RDMA_WRITE; break;
	case IBV_WR_RDMA_READ:
		wc->opcode = IBV_WC_RDMA_READ;
		wc->byte_len = w->length;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		wc->opcode = IBV_WC_COMP_SWAP; wc->byte_len = 8; break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		wc->opcode = IBV_WC_FETCH_ADD; wc->byte_len = 8; break;
	default:
		wc->opcode = IBV_WC_SEND; break;
	}
}

/* Mark a WQE complete; completions leave strictly in posting order. */
void qp_complete_send(struct uroce_qp *qp, struct uroce_send_wqe *w, enum ibv_wc_status st)
{
	(void)qp;
	if (w->state == WQE_DONE)
		return;
	if (w->status == IBV_WC_SUCCESS)
		w->status = st;
	w->state = WQE_DONE;
}

void qp_retire_sends(struct uroce_qp *qp)
{
	while (qp->sq_tail != qp->sq_head) {
		struct uroce_send_wqe *w = &qp->sq[qp->sq_tail % qp->sq_size];
		if (w->state != WQE_DONE)
			break;
		if (qp->sq_sig_all || (w->send_flags & IBV_SEND_SIGNALED) || w->status != IBV_WC_SUCCESS) {
			struct ibv_wc wc;
			fill_send_wc(qp, w, &wc);
			cq_push(qp->send_cq, &wc, false);
		}
		if (qp->sq_send == qp->sq_tail)
			qp->sq_send++;
		qp->sq_tail++;
	}
	if (qp->attr.qp_state == IBV_QPS_SQD && qp->sq_draining && qp->sq_tail == qp->sq_send &&
	    psn_cmp(qp->una_psn, qp->snd_psn) >= 0) {
		qp->sq_draining = false;
		if (qp->sqd_event_pending)
			qp_post_async_event(qp, IBV_EVENT_SQ_DRAINED);
		qp->sqd_event_pending = false;
	}
}

static void flush_recv_queue(struct uroce_qp *qp)
{
	struct uroce_recv_wqe r;

	if (qp->srq)
		return; /* SRQ receives belong to the SRQ, not this QP */
	if (qp->cur_recv_valid) {
		struct ibv_wc wc = { .wr_id = qp->cur_recv.wr_id, .status = IBV_WC_WR_FLUSH_ERR,
				     .opcode = IBV_WC_RECV, .qp_num = qp->qpn };
		cq_push(qp->recv_cq, &wc, false);
		qp->cur_recv_valid = false;
	}
	while (qp_rq_pop(qp, &r) == 0) {
		struct ibv_wc wc = { .wr_id = r.wr_id, .status = IBV_WC_WR_FLUSH_ERR,
				     .opcode = IBV_WC_RECV, .qp_num = qp->qpn };
		cq_push(qp->recv_cq, &wc, false);
	}
}

void qp_flush_queues(struct uroce_qp *qp)
{
	for (uint32_t i = qp->sq_tail; i != qp->sq_head; i++) {
		struct uroce_send_wqe *w = &qp->sq[i % qp->sq_size];
		if (w->state != WQE_DONE) {
			w->status = w->status == IBV_WC_SUCCESS ? IBV_WC_WR_FLUSH_ERR : w->status;
			w->state = WQE_DONE;
		}
	}
	qp->sq_send = qp->sq_head;
	qp_retire_sends(qp);
	/* flushed WQEs always complete, signaled or not (IBA 10.7.3.1) */
	flush_recv_queue(qp);
	qp_timers_off(qp);
	qp->rd_atomic_out = 0;
}

/* Enter ERROR: every outstanding WR completes with IBV_WC_WR_FLUSH_ERR. */
void qp_enter_error(struct uroce_qp *qp)
{
	if (qp->attr.qp_state == IBV_QPS_ERR)
		return;
	/* an ACK deferred for a request to ride with (responder.c) acknowledges
	 * what was placed: it leaves while the state still allows */
	responder_ack_now(qp);
	qp->attr.qp_state = IBV_QPS_ERR;
	qp_flush_queues(qp);
}

int qp_rq_pop(struct uroce_qp *qp, struct uroce_recv_wqe *out)
{
	struct uroce_rq *rq = qp->srq ? &qp->srq->rq : &qp->rq;
	int rc = -1;

	pthread_spin_lock(&rq->lock);
	if (rq->tail != rq->head) {
		const struct uroce_recv_wqe *r = &rq->wqe[rq->tail % rq->max_wr];
		/* copy the segments out: once popped, post_recv may reuse the slot */
		*out = *r;
		out->seg = qp->cur_recv_segs;
		memcpy(qp->cur_recv_segs, r->seg, r->nseg * sizeof(*r->seg));
		rq->tail++;
		rc = 0;
	}
	pthread_spin_unlock(&rq->lock);
	return rc;
}

/* ------------------------------------------------------------ create */

static int rq_init(struct uroce_rq *rq, uint32_t max_wr, uint32_t max_sge)
{
	rq->max_wr = max_wr ? max_wr : 1;
	rq->max_sge = max_sge ? max_sge : 1;
	rq->wqe = calloc(rq->max_wr, sizeof(*rq->wqe));
	rq->segs = calloc((size_t)rq->max_wr * rq->max_sge, sizeof(*rq->segs));
	if (!rq->wqe || !rq->segs)
		return ENOMEM;
	for (uint32_t i = 0; i < rq->max_wr; i++)
		rq->wqe[i].seg = rq->segs + (size_t)i * rq->max_sge;
	pthread_spin_init(&rq->lock, PTHREAD_PROCESS_PRIVATE);
	return 0;
}

static void rq_fini(struct uroce_rq *rq)
{
	free(rq->wqe);
	free(rq->segs);
}

static void qp_free(struct uroce_qp *qp)
{
	free(qp->sq);
	free(qp->sq_segs);
	free(qp->sq_inline);
	free(qp->res);
	rq_fini(&qp->rq);
	pthread_mutex_destroy(&qp->lock);
	free(qp);
}

struct ibv_qp *uroce_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	struct uroce_qp *qp;
	int err = EINVAL;

	if (a->comp_mask & ~(uint32_t)IBV_QP_INIT_ATTR_PD) {
		/* send_ops_flags (ibv_wr_*), XRC, RSS ... are not offered */
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || a->pd->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD) {
		errno = a->qp_type == IBV_QPT_XRC_SEND || a->qp_type == IBV_QPT_XRC_RECV ||
			a->qp_type == IBV_QPT_RAW_PACKET || a->qp_type == IBV_QPT_DRIVER ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	if (!a->send_cq || !a->recv_cq || a->send_cq->context != ctx || a->recv_cq->context != ctx ||
	    a->cap.max_send_wr > UROCE_MAX_QP_WR || a->cap.max_recv_wr > UROCE_MAX_QP_WR ||
	    a->cap.max_send_sge > UROCE_MAX_SGE || a->cap.max_recv_sge > UROCE_MAX_SGE ||
	    a->cap.max_inline_data > UROCE_MAX_INLINE || (a->srq && a->srq->context != ctx)) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->dev = dev;
	qp->type = a->qp_type;
	responder_reset(qp);
	qp->sq_sig_all = a->sq_sig_all;
	qp->cap = a->cap;
	if (qp->cap.max_send_sge == 0)
		qp->cap.max_send_sge = 1;
	qp->sq_size = a->cap.max_send_wr ? a->cap.max_send_wr : 1;
	qp->sq = calloc(qp->sq_size, sizeof(*qp->sq));
	/* one extra segment slot per WQE carries inline data */
	qp->sq_segs = calloc((size_t)qp->sq_size * (qp->cap.max_send_sge + 1), sizeof(*qp->sq_segs));
	qp->sq_inline = qp->cap.max_inline_data ? malloc((size_t)qp->sq_size * qp->cap.max_inline_data) : NULL;
	if (!qp->sq || !qp->sq_segs || (qp->cap.max_inline_data && !qp->sq_inline))
		goto fail_nomem;
	for (uint32_t i = 0; i < qp->sq_size; i++)
		qp->sq[i].seg = qp->sq_segs + (size_t)i * (qp->cap.max_send_sge + 1);
	if (a->srq) {
		qp->srq = to_usrq(a->srq);
		qp->cap.max_recv_wr = 0;
		qp->cap.max_recv_sge = 0;
	} else if (rq_init(&qp->rq, a->cap.max_recv_wr, a->cap.max_recv_sge)) {
		goto fail_nomem;
	}
	pthread_mutex_init(&qp->lock, NULL);
	qp->pd = to_upd(a->pd);
	qp->send_cq = to_ucq(a->send_cq);
	qp->recv_cq = to_ucq(a->recv_cq);
	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.path_mtu = dev->cfg.active_mtu;
	qp->pmtu = 128u << dev->cfg.active_mtu;

	struct ibv_qp *q = &qp->ibv.qp_base;
	q->context = ctx;
	q->qp_context = a->qp_context;
	q->pd = a->pd;
	q->send_cq = a->send_cq;
	q->recv_cq = a->recv_cq;
	q->srq = a->srq;
	q->state = IBV_QPS_RESET;
	q->qp_type = a->qp_type;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);

	/* allocate a QPN and publish the QP */
	pthread_mutex_lock(&dev->lock);
	if (dev->nqp >= UROCE_MAX_QP - 3) {
		pthread_mutex_unlock(&dev->lock);
		err = ENOMEM;
		goto fail;
	}
	uint16_t salt;
	if (getrandom(&salt, sizeof(salt), GRND_NONBLOCK) != sizeof(salt))
		salt = (uint16_t)now_ns();
	for (;;) {
		uint32_t idx = dev->qpn_next++ & (UROCE_MAX_QP - 1);
		if (idx < 2 || idx == UROCE_MAX_QP - 1 || atomic_load(&dev->qp_table[idx]))
			continue;
		qp->qpn = (uint32_t)(salt & 0x3FF) << 14 | idx;
		break;
	}
	q->qp_num = qp->qpn;
	q->handle = qp->qpn;
	if (qp->type == IBV_QPT_UD && dev->nqp_ud++ == 0)
		net_rx_ip_meta(dev->net, true);
	atomic_store_explicit(&dev->qp_table[qp->qpn & (UROCE_MAX_QP - 1)], qp, memory_order_release);
	qp->next_in_dev = dev->qp_list;
	dev->qp_list = qp;
	dev->nqp++;
	qp->send_cq->refcnt++;
	qp->recv_cq->refcnt++;
	if (qp->srq)
		qp->srq->refcnt++;
	pthread_mutex_unlock(&dev->lock);
	atomic_fetch_add(&qp->pd->refcnt, 1);
	a->cap = qp->cap;
	return q;
fail_nomem:
	err = ENOMEM;
fail:
	free(qp->sq);
	free(qp->sq_segs);
	free(qp->sq_inline);
	rq_fini(&qp->rq);
	free(qp);
	errno = err;
	return NULL;
}

struct ibv_qp *uroce_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex a = { 0 };

	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	a.qp_context = attr->qp_context;
	a.send_cq = attr->send_cq;
	a.recv_cq = attr->recv_cq;
	a.srq = attr->srq;
	a.cap = attr->cap;
	a.qp_type = attr->qp_type;
	a.sq_sig_all = attr->sq_sig_all;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	struct ibv_qp *q = uroce_create_qp_ex(pd->context, &a);
	if (q)
		attr->cap = a.cap;
	return q;
}

int uroce_destroy_qp(struct ibv_qp *ibqp)
{
	struct uroce_qp *qp = to_uqp(ibqp);
	struct uroce_dev *dev = qp->dev;

	/* unpublish under rx_lock: afterwards no packet or timer can reach it */
	pthread_mutex_lock(&dev->rx_lock);
	pthread_mutex_lock(&dev->lock);
	atomic_store(&dev->qp_table[qp->qpn & (UROCE_MAX_QP - 1)], NULL);
	for (struct uroce_qp **pp = &dev->qp_list; *pp; pp = &(*pp)->next_in_dev)
		if (*pp == qp) {
			*pp = qp->next_in_dev;
			break;
		}
	responder_qp_gone(qp);  /* a deferred ACK is not lost with the QP */
	if (qp->type == IBV_QPT_UD && --dev->nqp_ud == 0)
		net_rx_ip_meta(dev->net, false);
	dev->nqp--;
	qp->send_cq->refcnt--;
	qp->recv_cq->refcnt--;
	if (qp->srq)
		qp->srq->refcnt--;
	pthread_mutex_unlock(&dev->lock);
	pthread_mutex_unlock(&dev->rx_lock);
	/* events never read are dropped with the QP (the kernel does so); those
	 * read must be acknowledged first (rdma-core ibv_cmd_destroy_qp) */
	struct uroce_context *uctx = to_uctx(ibqp->context);
	pthread_mutex_lock(&uctx->async_lock);
	unsigned k = 0;
	for (unsigned i = 0; i < uctx->async_n; i++)
		if (uctx->async_q[i].element.qp != ibqp || !async_event_is_qp(uctx->async_q[i].event_type))
			uctx->async_q[k++] = uctx->async_q[i];
	uctx->async_n = k;
	pthread_mutex_unlock(&uctx->async_lock);
	pthread_mutex_lock(&ibqp->mutex);
	while (ibqp->events_completed != qp->events_reported)
		pthread_cond_wait(&ibqp->cond, &ibqp->mutex);
	pthread_mutex_unlock(&ibqp->mutex);
	pthread_mutex_lock(&qp->lock);
	if (qp->type == IBV_QPT_UD) {
		for (int i = 0; i < UROCE_MAX_GIDS; i++)
			if (qp->ud_flows[i])
				net_flow_close(dev->net, qp->ud_flows[i]);
	} else if (qp->flow) {
		net_flow_close(dev->net, qp->flow);
	}
	qp->flow = NULL;
	pthread_mutex_unlock(&qp->lock);
	atomic_fetch_sub(&qp->pd->refcnt, 1);
	qp_free(qp);
	return 0;
}

/* ------------------------------------------------------------ modify */

/* Kernel convention for the UDP source port (§1.4, rdma_get_udp_sport). */
static uint16_t roce_udp_sport(uint32_t fl, uint32_t lqpn, uint32_t rqpn)
{
	if (!fl) {
		uint64_t v = (uint64_t)lqpn * rqpn;
		v ^= v >> 20;
		v ^= v >> 40;
		fl = (uint32_t)(v & 0xFFFFF);
	}
	return (uint16_t)(0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)));
}

static int check_attr_values(struct uroce_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct uroce_dev *dev = qp->dev;

	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		return EINVAL;
	if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0)
		return EINVAL;
	if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
		return EINVAL;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > UROCE_MAX_RD_ATOMIC)
		return EINVAL;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > UROCE_MAX_RD_ATOMIC)
		return EINVAL;
	if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
		return EINVAL;
	if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
		return EINVAL;
	if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
		return EINVAL;
	if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
		return EINVAL;
	if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xFFFFFF)
		return EINVAL;
	if ((mask & IBV_QP_ACCESS_FLAGS) &&
	    (a->qp_access_flags & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)))
		return EINVAL;
	if (mask & IBV_QP_AV) {
		/* RoCE needs a GRH: a non-global AH cannot be routed (rdma-core
		 * tests expect EINVAL) */
		if (!a->ah_attr.is_global || a->ah_attr.grh.sgid_index >= dev->cfg.ngids ||
		    (a->ah_attr.port_num && a->ah_attr.port_num != 1))
			return EINVAL;
		const uint8_t *dg = a->ah_attr.grh.dgid.raw;
		static const uint8_t zero[16];
		if (!memcmp(dg, zero, 16))
			return EINVAL;
		/* the destination must be the same IP family as the source GID */
		if (gid_is_ipv4(dg) != gid_is_ipv4(dev->cfg.gids[a->ah_attr.grh.sgid_index]))
			return EINVAL;
	}
	/* _ib_modify_qp: alternate paths are banned on RoCE */
	if (mask & IBV_QP_ALT_PATH)
		return EINVAL;
	return 0;
}

static void qp_reset(struct uroce_qp *qp)
{
	qp->sq_head = qp->sq_send = qp->sq_tail = 0;
	qp->rq.head = qp->rq.tail = 0;
	qp->snd_psn = qp->una_psn = qp->max_psn = 0;
	qp->rd_atomic_out = 0;
	qp_timers_off(qp);
	qp->srtt_ns = qp->rttvar_ns = 0;
	qp->rto_backoff = 0;
	qp->loss_ns = 0;
	qp->rtt_timing = false;
	qp->probe_out = false;
	qp->ackreq_valid = false;
	qp->rnr_wait = false;
	qp->epsn = 0;
	qp->msn = 0;
	qp->nak_sent = false;
	responder_reset(qp);
	qp->cur_recv_valid = false;
	if (qp->res)
		memset(qp->res, 0, qp->res_size * sizeof(*qp->res));
	qp->res_next = 0;
}

int uroce_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask)
{
	struct uroce_qp *qp = to_uqp(ibqp);
	struct uroce_dev *dev = qp->dev;
	int rc;

	pthread_mutex_lock(&qp->lock);
	enum ibv_qp_state cur = qp->attr.qp_state;
	enum ibv_qp_state next = (mask & IBV_QP_STATE) ? a->qp_state : cur;
	if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) {
		rc = EINVAL;
		goto out;
	}
	if (!qp_modify_is_ok(cur, next, qp->type, (unsigned)mask)) {
		rc = EINVAL;
		goto out;
	}
	rc = check_attr_values(qp, a, mask);
	if (rc)
		goto out;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
		uint32_t n = a->max_dest_rd_atomic ? a->max_dest_rd_atomic : 1;
		struct uroce_rd_res *r = calloc(n, sizeof(*r));
		if (!r) {
			rc = ENOMEM;
			goto out;
		}
		free(qp->res);
		qp->res = r;
		qp->res_size = n;
		qp->res_next = 0;
		qp->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
	}
	if (mask & IBV_QP_PKEY_INDEX) qp->attr.pkey_index = a->pkey_index;
	if (mask & IBV_QP_PORT) qp->attr.port_num = a->port_num;
	if (mask & IBV_QP_QKEY) qp->attr.qkey = a->qkey;
	if (mask & IBV_QP_ACCESS_FLAGS) qp->attr.qp_access_flags = a->qp_access_flags;
	if (mask & IBV_QP_PATH_MTU) {
		qp->attr.path_mtu = a->path_mtu;
		qp->pmtu = 128u << a->path_mtu;
	}
	if (mask & IBV_QP_DEST_QPN) qp->attr.dest_qp_num = a->dest_qp_num;
	if (mask & IBV_QP_RQ_PSN) qp->attr.rq_psn = a->rq_psn & PSN_MASK;
	if (mask & IBV_QP_SQ_PSN) qp->attr.sq_psn = a->sq_psn & PSN_MASK;
	if (mask & IBV_QP_MIN_RNR_TIMER) qp->attr.min_rnr_timer = a->min_rnr_timer;
	if (mask & IBV_QP_TIMEOUT) qp->attr.timeout = a->timeout;
	if (mask & IBV_QP_RETRY_CNT) qp->attr.retry_cnt = a->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY) qp->attr.rnr_retry = a->rnr_retry;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp->attr.max_rd_atomic = a->max_rd_atomic;
	if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) qp->attr.en_sqd_async_notify = a->en_sqd_async_notify;
	if (mask & IBV_QP_PATH_MIG_STATE) qp->attr.path_mig_state = a->path_mig_state;
	if (mask & IBV_QP_ALT_PATH) {
		qp->attr.alt_ah_attr = a->alt_ah_attr;
		qp->attr.alt_pkey_index = a->alt_pkey_index;
		qp->attr.alt_port_num = a->alt_port_num;
		qp->attr.alt_timeout = a->alt_timeout;
	}
	if (mask & IBV_QP_AV) {
		qp->attr.ah_attr = a->ah_attr;
		qp->tx_tos = a->ah_attr.grh.traffic_class;
		memcpy(qp->dgid, a->ah_attr.grh.dgid.raw, 16);
		memcpy(qp->sgid, dev->cfg.gids[a->ah_attr.grh.sgid_index], 16);
	}
	if ((mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) && next >= IBV_QPS_RTR && next != IBV_QPS_ERR) {
		uint16_t sport = roce_udp_sport(qp->attr.ah_attr.grh.flow_label, qp->qpn, qp->attr.dest_qp_num);
		if (!qp->flow || sport != qp->sport) {
			struct uroce_flow *f = net_flow_open(dev->net, qp->sgid, sport,
							       qp->type == IBV_QPT_UD ? NULL : qp->dgid);
			if (!f) {
				rc = errno ? errno : ENOMEM;
				goto out;
			}
			if (qp->flow)
				net_flow_close(dev->net, qp->flow);
			qp->flow = f;
			qp->sport = sport;
		}
	}

	if (mask & IBV_QP_STATE) {
		if (next == IBV_QPS_RESET)
			responder_ack_now(qp);  /* as qp_enter_error: what was placed is ACKed */
		switch (next) {
		case IBV_QPS_RESET:
			if (cur != IBV_QPS_RESET) {
				/* leaving ERROR for RESET drops what is left without
				 * completions, as a hardware reset does */
				qp_reset(qp);
			}
			break;
		case IBV_QPS_RTR:
			if (cur == IBV_QPS_INIT) {
				qp->epsn = qp->attr.rq_psn;
				qp->msn = 0;
			}
			break;
		case IBV_QPS_RTS:
			if (cur == IBV_QPS_RTR) {
				qp->snd_psn = qp->una_psn = qp->max_psn = qp->attr.sq_psn;
				qp->cwnd = qp->ssthresh = dev->cfg.window;
				qp->cwnd_acc = 0;
			}
			qp->retry_left = qp->attr.retry_cnt;
			qp->rnr_left = qp->attr.rnr_retry;
			qp->sq_draining = false;
			break;
		case IBV_QPS_SQD:
			qp->sq_draining = true;
			qp->sqd_event_pending = (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) && a->en_sqd_async_notify;
			break;
		case IBV_QPS_ERR:
			qp->attr.qp_state = next;
			ibqp->state = next;
			qp->attr.qp_state = cur; /* let qp_enter_error see the transition */
			qp_enter_error(qp);
			break;
		default:
			break;
		}
		qp->attr.qp_state = next;
		ibqp->state = next;
		if (next == IBV_QPS_SQD)
			qp_retire_sends(qp); /* may already be drained */
		if (next == IBV_QPS_RTS && cur == IBV_QPS_SQD)
			requester_run(qp);
	}
out:
	pthread_mutex_unlock(&qp->lock);
	return rc;
}

int uroce_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	struct uroce_qp *qp = to_uqp(ibqp);

	(void)mask;
	pthread_mutex_lock(&qp->lock);
	*attr = qp->attr;
	attr->cur_qp_state = qp->attr.qp_state;
	attr->sq_draining = qp->attr.qp_state == IBV_QPS_SQD && qp->sq_draining;
	attr->cap = qp->cap;
	attr->port_num = qp->attr.port_num ? qp->attr.port_num : 1;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = ibqp->qp_context;
		init->send_cq = ibqp->send_cq;
		init->recv_cq = ibqp->recv_cq;
		init->srq = ibqp->srq;
		init->cap = qp->cap;
		init->qp_type = qp->type;
		init->sq_sig_all = qp->sq_sig_all;
	}
	pthread_mutex_unlock(&qp->lock);
	return 0;
}

/* ------------------------------------------------------------ posting */

static bool opcode_allowed(enum ibv_qp_type t, enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_SEND: case IBV_WR_SEND_WITH_IMM:
		return true;
	case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM:
		return t == IBV_QPT_RC || t == IBV_QPT_UC;
	case IBV_WR_RDMA_READ: case IBV_WR_ATOMIC_CMP_AND_SWP: case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_SEND_WITH_INV:
		return t == IBV_QPT_RC;
	default:
		return false;
	}
}

static int post_one_send(struct uroce_qp *qp, struct ibv_send_wr *wr)
{
	if (qp->sq_head - qp->sq_tail >= qp->sq_size)
		return ENOMEM;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge || !opcode_allowed(qp->type, wr->opcode))
		return EINVAL;
	if (qp->type == IBV_QPT_UD && (!wr->wr.ud.ah || wr->wr.ud.ah->context != qp->ibv.qp_base.context))
		return EINVAL;

	struct uroce_send_wqe *w = &qp->sq[qp->sq_head % qp->sq_size];
	struct uroce_seg *segs = w->seg;
	uint64_t total = 0;

	for (int i = 0; i < wr->num_sge; i++)
		total += wr->sg_list[i].length;
	if ((wr->send_flags & IBV_SEND_INLINE) && wr->opcode != IBV_WR_RDMA_READ &&
	    wr->opcode != IBV_WR_ATOMIC_CMP_AND_SWP && wr->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) {
		if (total > qp->cap.max_inline_data)
			return EINVAL;
	}
	memset(w, 0, sizeof(*w));
	w->seg = segs;
	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;
	w->send_flags = wr->send_flags;
	w->status = IBV_WC_SUCCESS;
	w->state = WQE_POSTED;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: case IBV_WR_RDMA_READ:
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP: case IBV_WR_ATOMIC_FETCH_AND_ADD:
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
		break;
	default:
		break;
	}
	if (qp->type == IBV_QPT_UD) {
		const struct uroce_ah *ah = to_uah(wr->wr.ud.ah);
		w->remote_qpn = wr->wr.ud.remote_qpn & 0xFFFFFF;
		/* a "controlled" Q_Key (bit 31) means: use the QP's own (§2.2) */
		w->remote_qkey = (wr->wr.ud.remote_qkey & 0x80000000u) ? qp->attr.qkey : wr->wr.ud.remote_qkey;
		memcpy(w->dgid, ah->attr.grh.dgid.raw, 16);
		w->sgid_index = ah->attr.grh.sgid_index;
		w->tclass = ah->attr.grh.traffic_class;
	}
	if (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		w->imm_data = wr->imm_data;
	else if (wr->opcode == IBV_WR_SEND_WITH_INV)
		w->imm_data = wr->invalidate_rkey;

	if (total > UROCE_MAX_MSG) {
		w->status = IBV_WC_LOC_LEN_ERR;
		total = 0;
	}
	w->length = (uint32_t)total;
	bool atomic = wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
	if (atomic) {
		w->length = 8;
		if (wr->num_sge < 1 || wr->sg_list[0].length < 8)
			w->status = IBV_WC_LOC_LEN_ERR;
	}
	if (w->status != IBV_WC_SUCCESS) {
		/* completes with the error when it reaches the head */
	} else if ((wr->send_flags & IBV_SEND_INLINE) && !atomic && wr->opcode != IBV_WR_RDMA_READ) {
		uint8_t *buf = qp->sq_inline + (size_t)(qp->sq_head % qp->sq_size) * qp->cap.max_inline_data;
		uint32_t off = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			memcpy(buf + off, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			off += wr->sg_list[i].length;
		}
		segs[0].addr = buf;
		segs[0].len = off;
		w->nseg = off ? 1 : 0;
	} else {
		unsigned access = (wr->opcode == IBV_WR_RDMA_READ || atomic) ? IBV_ACCESS_LOCAL_WRITE : 0;
		uint32_t n = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			if (!wr->sg_list[i].length)
				continue;
			if (mr_resolve_local(qp->dev, qp->pd, &wr->sg_list[i], access, &segs[n]) != MEM_OK) {
				w->status = IBV_WC_LOC_PROT_ERR;
				break;
			}
			n++;
		}
		w->nseg = n;
		if (atomic && w->status == IBV_WC_SUCCESS)
			segs[0].len = 8;
	}
	qp->sq_head++;
	return 0;
}

int uroce_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct uroce_qp *qp = to_uqp(ibqp);
	int rc = 0;

	pthread_mutex_lock(&qp->lock);
	enum ibv_qp_state st = qp->attr.qp_state;
	if (st != IBV_QPS_RTS && st != IBV_QPS_SQD && st != IBV_QPS_ERR) {
		/* rxe: posting before RTS is EINVAL */
		*bad = wr;
		pthread_mutex_unlock(&qp->lock);
		return EINVAL;
	}
	for (; wr; wr = wr->next) {
		rc = post_one_send(qp, wr);
		if (rc) {
			*bad = wr;
			break;
		}
	}
	if (st == IBV_QPS_ERR)
		qp_flush_queues(qp);
	else
		requester_run(qp);
	pthread_mutex_unlock(&qp->lock);
	return rc;
}

static int rq_post(struct uroce_dev *dev, struct uroce_pd *pd, struct uroce_rq *rq, struct ibv_recv_wr *wr)
{
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > rq->max_sge)
		return EINVAL;
	pthread_spin_lock(&rq->lock);
	if (rq->head - rq->tail >= rq->max_wr) {
		pthread_spin_unlock(&rq->lock);
		return ENOMEM;
	}
	struct uroce_recv_wqe *r = &rq->wqe[rq->head % rq->max_wr];
	uint32_t n = 0;
	uint64_t total = 0;
	r->wr_id = wr->wr_id;
	r->status = IBV_WC_SUCCESS;
	for (int i = 0; i < wr->num_sge; i++) {
		if (!wr->sg_list[i].length)
			continue;
		if (mr_resolve_local(dev, pd, &wr->sg_list[i], IBV_ACCESS_LOCAL_WRITE, &r->seg[n]) != MEM_OK) {
			r->status = IBV_WC_LOC_PROT_ERR;
			break;
		}
		total += wr->sg_list[i].length;
		n++;
	}
	r->nseg = n;
	r->length = total > UINT32_MAX ? UINT32_MAX : (uint32_t)total;
	__atomic_store_n(&rq->head, rq->head + 1, __ATOMIC_RELEASE);
	pthread_spin_unlock(&rq->lock);
	return 0;
}

int uroce_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct uroce_qp *qp = to_uqp(ibqp);
	int rc = 0;

	if (qp->srq) {
		*bad = wr;
		return EINVAL;
	}
	enum ibv_qp_state st = qp->attr.qp_state;
	if (st == IBV_QPS_RESET) {
		*bad = wr;
		return EINVAL;
	}
	for (; wr; wr = wr->next) {
		rc = rq_post(qp->dev, qp->pd, &qp->rq, wr);
		if (rc) {
			*bad = wr;
			break;
		}
	}
	if (st == IBV_QPS_ERR) {
		pthread_mutex_lock(&qp->lock);
		flush_recv_queue(qp);
		pthread_mutex_unlock(&qp->lock);
	}
	return rc;
}

/* ------------------------------------------------------------ SRQ */

struct ibv_srq *uroce_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct uroce_srq *srq;

	if (!attr->attr.max_wr || attr->attr.max_wr > UROCE_MAX_SRQ_WR || attr->attr.max_sge > UROCE_MAX_SGE ||
	    attr->attr.srq_limit > attr->attr.max_wr) {
		errno = EINVAL;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq || rq_init(&srq->rq, attr->attr.max_wr, attr->attr.max_sge)) {
		free(srq);
		errno = ENOMEM;
		return NULL;
	}
	srq->ibv.context = pd->context;
	srq->ibv.srq_context = attr->srq_context;
	srq->ibv.pd = pd;
	pthread_mutex_init(&srq->ibv.mutex, NULL);
	pthread_cond_init(&srq->ibv.cond, NULL);
	srq->srq_limit = attr->attr.srq_limit;
	atomic_fetch_add(&to_upd(pd)->refcnt, 1);
	return &srq->ibv;
}

int uroce_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
	struct uroce_srq *srq = to_usrq(ibsrq);

	if (mask & IBV_SRQ_MAX_WR)
		return EINVAL; /* resizing an SRQ is not offered */
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit > srq->rq.max_wr)
			return EINVAL;
		srq->srq_limit = attr->srq_limit;
	}
	return 0;
}

int uroce_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct uroce_srq *srq = to_usrq(ibsrq);

	attr->max_wr = srq->rq.max_wr;
	attr->max_sge = srq->rq.max_sge;
	attr->srq_limit = srq->srq_limit;
	return 0;
}

int uroce_destroy_srq(struct ibv_srq *ibsrq)
{
	struct uroce_srq *srq = to_usrq(ibsrq);
	struct uroce_dev *dev = to_uctx(ibsrq->context)->dev;

	pthread_mutex_lock(&dev->lock);
	if (srq->refcnt) {
		pthread_mutex_unlock(&dev->lock);
		return EBUSY;
	}
	pthread_mutex_unlock(&dev->lock);
	atomic_fetch_sub(&to_upd(ibsrq->pd)->refcnt, 1);
	rq_fini(&srq->rq);
	free(srq);
	return 0;
}

int uroce_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct uroce_srq *srq = to_usrq(ibsrq);
	struct uroce_dev *dev = to_uctx(ibsrq->context)->dev;
	int rc = 0;

	for (; wr; wr = wr->next) {
		rc = rq_post(dev, to_upd(ibsrq->pd), &srq->rq, wr);
		if (rc) {
			*bad = wr;
			break;
		}
	}
	return rc;
}
