/* Completion delivery shared by the transport roles: send WQEs complete in
 * posting order (IBA 10.8.3), a QP entering ERROR flushes every outstanding
 * WR (IBA 10.7.3.1), and the receive queue is consumed here. */
#include <string.h>
#include "transport.h"
#include "../wire/hdr.h"
#include "../core/async.h"
#include "../core/cq_ring.h"
#include "../core/wr.h"

static void fill_send_wc(struct uroce_qp *qp, struct uroce_send_wqe *w, struct ibv_wc *wc)
{
	const struct uroce_wr_info *op = wr_info(w->opcode);

	memset(wc, 0, sizeof(*wc));
	wc->wr_id = w->wr_id;
	wc->status = w->status;
	wc->qp_num = qp->qpn;
	wc->opcode = op->wc_opcode;
	if (op->flags & WRF_WC_LEN)
		wc->byte_len = w->length;  /* READ: the message; atomics: 8 */
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
			qp_cq_push(qp, qp->send_cq, &wc, false);
		}
		if (qp->req.sq_send == qp->sq_tail)
			qp->req.sq_send++;
		qp->sq_tail++;
	}
	if (qp->attr.qp_state == IBV_QPS_SQD && qp->req.sq_draining && qp->sq_tail == qp->req.sq_send &&
	    psn_cmp(qp->comp.una_psn, qp->req.snd_psn) >= 0) {
		qp->req.sq_draining = false;
		if (qp->req.sqd_event_pending)
			qp_post_async_event(qp, IBV_EVENT_SQ_DRAINED);
		qp->req.sqd_event_pending = false;
	}
	if (qp->cq_lost)
		qp_cq_lost(qp);  /* after the loop: entering ERR retires again */
}

void qp_cq_push(struct uroce_qp *qp, struct uroce_cq *cq, const struct ibv_wc *wc, bool solicited)
{
	if (cq_push(cq, wc, solicited) < 0)
		qp->cq_lost = true;
}

/* A completion of this QP did not fit its CQ (cq_push raised CQ_ERR): the
 * QP cannot go on as if it had been delivered, so it enters ERR and says
 * so (QP_FATAL), as rxe's responder does on a full CQ.  Called where no
 * loop over the queues is under way. */
void qp_cq_lost(struct uroce_qp *qp)
{
	qp->cq_lost = false;
	if (qp->attr.qp_state == IBV_QPS_ERR || qp->attr.qp_state == IBV_QPS_RESET)
		return;
	qp_enter_error(qp);
	qp_post_async_event(qp, IBV_EVENT_QP_FATAL);
}

void qp_flush_recv_queue(struct uroce_qp *qp)
{
	struct uroce_recv_wqe r;
	/* an XRC TGT QP's receives complete to their XRC SRQ's CQ */
	struct uroce_cq *cq = qp->resp.xrc_srq ? qp->resp.xrc_srq->cq : qp->recv_cq;

	/* the WQE a message under way consumed is this QP's, an SRQ's too */
	if (qp->resp.cur_recv_valid) {
		struct ibv_wc wc = { .wr_id = qp->resp.cur_recv.wr_id, .status = IBV_WC_WR_FLUSH_ERR,
				     .opcode = IBV_WC_RECV, .qp_num = qp->qpn };
		if (cq)
			cq_push(cq, &wc, false);
		qp->resp.cur_recv_valid = false;
	}
	if (qp->srq || qp->type == IBV_QPT_XRC_RECV || qp->type == IBV_QPT_XRC_SEND)
		return; /* the SRQ's other receives belong to the SRQ, not this QP; XRC QPs have no RQ */
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
	qp->req.sq_send = qp->sq_head;
	qp_retire_sends(qp);
	/* flushed WQEs always complete, signaled or not (IBA 10.7.3.1) */
	qp_flush_recv_queue(qp);
	qp_timers_off(qp);
	qp->req.rd_atomic_out = 0;
}

/* Enter ERROR: every outstanding WR completes with IBV_WC_WR_FLUSH_ERR. */
void qp_enter_error(struct uroce_qp *qp)
{
	if (qp->attr.qp_state == IBV_QPS_ERR)
		return;
	/* an ACK deferred for a request to ride with (ack.c) acknowledges
	 * what was placed: it leaves while the state still allows */
	ack_now(qp);
	/* no WRITE is under way in a QP that no longer receives (the engine's
	 * spin and the hand-back count them: rx_writes_open) */
	qp_set_in_write(qp, false);
	qp->attr.qp_state = IBV_QPS_ERR;
	qp_flush_queues(qp);
}

int qp_rq_pop(struct uroce_qp *qp, struct uroce_recv_wqe *out)
{
	struct uroce_rq *rq = qp->resp.xrc_srq ? &qp->resp.xrc_srq->rq : qp->srq ? &qp->srq->rq : &qp->rq;
	int rc = -1;

	pthread_spin_lock(&rq->lock);
	if (rq->tail != rq->head) {
		const struct uroce_recv_wqe *r = &rq->wqe[rq->tail % rq->max_wr];
		/* copy the SGEs out: once popped, post_recv may reuse the slot */
		*out = *r;
		out->sge = qp->resp.cur_recv_sges;
		memcpy(qp->resp.cur_recv_sges, r->sge, r->nsge * sizeof(*r->sge));
		rq->tail++;
		rc = 0;
	}
	pthread_spin_unlock(&rq->lock);
	return rc;
}


/* The oldest WQE not yet completed that has packets on the wire. */
struct uroce_send_wqe *sq_oldest_started(struct uroce_qp *qp)
{
	for (uint32_t i = qp->sq_tail; i != qp->sq_head; i++) {
		struct uroce_send_wqe *w = &qp->sq[i % qp->sq_size];
		if (!w->started)
			return NULL;
		if (w->state != WQE_DONE)
			return w;
	}
	return NULL;
}

void qp_fail_oldest(struct uroce_qp *qp, enum ibv_wc_status st)
{
	struct uroce_send_wqe *w = sq_oldest_started(qp);

	if (w)
		qp_complete_send(qp, w, st);
	qp_retire_sends(qp);
	qp_enter_error(qp);
}

