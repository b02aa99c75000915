/* Responder: executes requests against memory and the receive queue and
 * answers with ACK / NAK / READ responses / atomic ACKs (§5, §6.2-§6.5).
 * Every check has a named verdict, mapped to a NAK in one place (nak_for). */
#include <string.h>
#include "transport.h"
#include "hdr.h"
#include "tx.h"
#include "icrc.h"

enum resp_verdict {
	RV_OK,
	RV_INV_REQ,      /* NAK 0x61: bad opcode sequence, length, op not enabled */
	RV_ACCESS,       /* NAK 0x62: R_Key, bounds or permission */
	RV_OP_ERR,       /* NAK 0x63: local failure (bad receive WQE) */
	RV_RNR,          /* RNR NAK: no receive WQE */
};

static void flush_owed_ack(struct uroce_qp *qp);

/* ACK deferral (ack_defer) */
#define ACK_RIDE_HITS_MAX 8
#define ACK_RIDE_HITS_START 4   /* a new or reset QP defers */
#define ACK_ANSWER_NS 1000000ull /* a request this soon after a late ACK answers it */

/* An ACK/NAK (BTH + AETH) as the next packet of `b`. */
static void aeth_add(struct uroce_qp *qp, struct tx_batch *b, uint8_t op, uint8_t syndrome, uint32_t psn)
{
	uint8_t *h = txb_hdr(b);

	bth_set(h, op, 0, 0, qp->attr.dest_qp_num, 0, psn);
	aeth_set(h + BTH_LEN, syndrome, qp->msn);
	txb_add(b, BTH_LEN + AETH_LEN, NULL, 0, 0, 0);
}

static void send_aeth(struct uroce_qp *qp, uint8_t op, uint8_t syndrome, uint32_t psn)
{
	struct tx_batch b;

	flush_owed_ack(qp);
	txb_init(&b, qp);
	aeth_add(qp, &b, op, syndrome, psn);
	txb_flush(&b);
}

static void send_ack(struct uroce_qp *qp, uint32_t psn)
{
	dev_count(qp->dev, UC_acks_tx, 1);
	send_aeth(qp, OP_RC_ACK, AETH_ACK_UNLIMITED, psn);
}

/* ACK coalescing (§6.5: an ACK acknowledges every PSN up to its own, and
 * responders may coalesce): an ACK a SEND/WRITE (or a duplicate) asks for
 * is owed until the receive batch is done, then one goes out per QP however
 * many packets asked -- a stream of small WRITEs no longer costs one ACK
 * datagram each.  Any other response of the QP sends it first, so the wire
 * stays in PSN order.  All under rx_lock (transport_rx's caller). */
static void ack_owe(struct uroce_qp *qp, uint32_t psn, bool msg_end)
{
	struct uroce_dev *dev = qp->dev;

	if (qp->ack_owed) {
		if (psn_cmp(psn, qp->ack_owed_psn) > 0) {
			qp->ack_owed_psn = psn;
			qp->ack_owed_msg_end = msg_end;
		}
		if (!msg_end)
			qp->ack_owed_msg_end = false;  /* a retry or a mid-message AckReq: at once */
		if (!qp->ack_defer_ns || msg_end)
			return;  /* on this batch's list, or a deferral still bounded by its deadline */
		qp->ack_defer_ns = 0;  /* a mid-message AckReq: no answer can come first (ack_defer) */
	} else {
		qp->ack_owed = true;
		qp->ack_owed_psn = psn;
		qp->ack_owed_msg_end = msg_end;
	}
	if (dev->n_acks_owed == UROCE_RX_BATCH) {
		flush_owed_ack(qp);
		return;
	}
	dev->acks_owed[dev->n_acks_owed++] = qp;
}

static void flush_owed_ack(struct uroce_qp *qp)
{
	if (qp->ack_owed) {
		qp->ack_owed = false;
		qp->ack_defer_ns = 0;
		send_ack(qp, qp->ack_owed_psn);
	}
}

static bool ack_may_be_sent(const struct uroce_qp *qp)
{
	return qp->attr.qp_state == IBV_QPS_RTR || qp->attr.qp_state == IBV_QPS_RTS ||
	       qp->attr.qp_state == IBV_QPS_SQD || qp->attr.qp_state == IBV_QPS_SQE;
}

/* ACK deferral: in a request-response exchange the application answers a
 * message it just received with a request of its own, within a microsecond
 * or two.  An owed ACK that waits for that request leaves in the same
 * sendmmsg, behind it (requester_run -> responder_ack_ride; behind its first
 * packet when the window cuts the message), so the peer, polling for the
 * ACK, has the request (or its start: dev_poll_found) in its socket before
 * the ACK: one syscall instead of two, and a one-sided request is placed by
 * the peer's poll instead of waking its engine.  A QP defers while
 * deferring works (ack_ride_hits; responder_request_follows), and tries
 * again every 16th ACK otherwise; the wait is bounded by UROCE_ACK_DEFER_US
 * (§6.6 allows an ACK any time before the requester's timer; the
 * coalescing of §6.5 covers the PSNs in between). */
static bool ack_defer(struct uroce_qp *qp)
{
	/* only the ACK of a whole message can be answered: one asked for in the
	 * middle (a window-filling packet) goes at once, or the requester stalls */
	if (!qp->dev->cfg.ack_defer_us || qp->type != IBV_QPT_RC || !qp->ack_owed_msg_end)
		return false;
	/* an ordinary (not real-time) engine may wake for the deadline tens of
	 * ms late on a loaded host: what it receives is ACKed at once */
	if (!qp->dev->engine_rt && dev_on_engine_thread())
		return false;
	if (qp->ack_late_ns) {
		/* the last deferred ACK went alone and no request followed:
		 * a real miss (one-way traffic) */
		qp->ack_late_ns = 0;
		qp->ack_wait_us = 0;
		if (qp->ack_ride_hits)
			qp->ack_ride_hits--;
	}
	return qp->ack_ride_hits || (++qp->ack_defer_probe & 15) == 0;
}

/* A deferral paid off: the QP's request came (ack_defer). */
static void ack_ride_hit(struct uroce_qp *qp)
{
	if (qp->ack_ride_hits < ACK_RIDE_HITS_MAX)
		qp->ack_ride_hits++;
}

static uint64_t ack_wait_ns(const struct uroce_qp *qp)
{
	return (qp->ack_wait_us ? qp->ack_wait_us : qp->dev->cfg.ack_defer_us) * 1000ull;
}

/* The requester sends: if the last deferred ACK went alone, at its deadline,
 * shortly before, the exchange is request-response all the same, only
 * slower than the wait (a loaded host, a large message to take in): wait
 * twice as long next time, up to 50 x UROCE_ACK_DEFER_US.  Under qp->lock. */
void responder_request_follows(struct uroce_qp *qp)
{
	uint64_t late = qp->ack_late_ns;

	qp->ack_late_ns = 0;
	if (now_ns() - late > ACK_ANSWER_NS)
		return;
	unsigned base = qp->dev->cfg.ack_defer_us, w = qp->ack_wait_us ? qp->ack_wait_us : base;
	qp->ack_wait_us = 2 * w < 50 * base ? 2 * w : 50 * base;
	ack_ride_hit(qp);
}

void transport_rx_batch_end(struct uroce_dev *dev)
{
	uint64_t now = 0;

	for (unsigned i = 0; i < dev->n_acks_owed; i++) {
		struct uroce_qp *qp = dev->acks_owed[i];
		pthread_mutex_lock(&qp->lock);
		if (!qp->ack_owed || !ack_may_be_sent(qp)) {
			responder_ack_now(qp);  /* nothing to send: owed and deferral both end */
		} else if (!qp->ack_defer_ns && ack_defer(qp)) {
			if (!now)
				now = now_ns();
			qp->ack_defer_ns = now;
			if (!qp->ack_deferred_listed) {
				qp->ack_deferred_listed = true;
				qp->next_deferred = dev->acks_deferred;
				dev->acks_deferred = qp;
			}
			/* the engine looks at least once per poll grace while
			 * applications poll; kick it only if it sleeps longer */
			uint64_t wait = ack_wait_ns(qp), grace = dev->cfg.poll_grace_us * 1000ull;
			dev_lower_deadline(dev, &dev->ack_flush_next, now + wait, false);
			dev_engine_wake_by(dev, now + (wait > grace ? wait : grace));
		} else if (!qp->ack_defer_ns) {
			flush_owed_ack(qp);
		}
		pthread_mutex_unlock(&qp->lock);
	}
	dev->n_acks_owed = 0;
}

/* Deferred ACKs whose wait is over go out (a miss: the QP stops deferring);
 * those that rode with a request leave the list.  Under rx_lock. */
void transport_flush_deferred_acks(struct uroce_dev *dev, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	atomic_store(&dev->ack_flush_next, UINT64_MAX);
	for (struct uroce_qp **pp = &dev->acks_deferred; *pp;) {
		struct uroce_qp *qp = *pp;
		pthread_mutex_lock(&qp->lock);
		bool keep = false;
		uint64_t wait = ack_wait_ns(qp);
		if (qp->ack_owed && qp->ack_defer_ns && now - qp->ack_defer_ns < wait) {
			keep = true;
			if (qp->ack_defer_ns + wait < next)
				next = qp->ack_defer_ns + wait;
		} else if (qp->ack_owed && qp->ack_defer_ns) {
			dev_count(dev, UC_acks_deferred_late, 1);
			qp->ack_late_ns = now;  /* a miss, unless a request follows soon */
			responder_ack_now(qp);
		}
		if (!keep) {
			qp->ack_deferred_listed = false;
			*pp = qp->next_deferred;
		} else {
			pp = &qp->next_deferred;
		}
		pthread_mutex_unlock(&qp->lock);
	}
	if (next != UINT64_MAX)
		dev_lower_deadline(dev, &dev->ack_flush_next, next, false);
}

/* An ACK still owed goes out now, if the QP's state still sends: its wait
 * is over, or the QP leaves the states that send (the peer's requester must
 * not be left to retry into a QP that no longer answers). */
void responder_ack_now(struct uroce_qp *qp)
{
	if (qp->ack_owed && ack_may_be_sent(qp))
		flush_owed_ack(qp);
	qp->ack_owed = false;
	qp->ack_defer_ns = 0;
}

/* A new or reset QP: no ACK owed, and ACKs may wait for a request to ride
 * with (ack_defer) from the start.  Under qp->lock or before publication. */
void responder_reset(struct uroce_qp *qp)
{
	qp->ack_owed = false;
	qp->ack_defer_ns = 0;
	qp->ack_late_ns = 0;
	qp->ack_wait_us = 0;
	qp->ack_ride_hits = ACK_RIDE_HITS_START;
	qp->in_send = false;
	qp_set_in_write(qp, false);
}

/* The QP is being destroyed (under rx_lock): off the deferred list, its owed
 * ACK sent, no longer counted as inside a WRITE. */
void responder_qp_gone(struct uroce_qp *qp)
{
	for (struct uroce_qp **pp = &qp->dev->acks_deferred; *pp; pp = &(*pp)->next_deferred)
		if (*pp == qp) {
			*pp = qp->next_deferred;
			break;
		}
	pthread_mutex_lock(&qp->lock);
	responder_ack_now(qp);
	qp_set_in_write(qp, false);
	pthread_mutex_unlock(&qp->lock);
}

/* Called by the requester with request packets in `b`: the owed ACK rides
 * behind them (see ack_defer).  Under qp->lock. */
void responder_ack_ride(struct uroce_qp *qp, struct tx_batch *b)
{
	if (!qp->ack_owed || !ack_may_be_sent(qp))
		return;
	if (qp->ack_defer_ns) {
		dev_count(qp->dev, UC_acks_ridden, 1);
		ack_ride_hit(qp);
	}
	qp->ack_owed = false;
	qp->ack_defer_ns = 0;
	dev_count(qp->dev, UC_acks_tx, 1);
	aeth_add(qp, b, OP_RC_ACK, AETH_ACK_UNLIMITED, qp->ack_owed_psn);
}

/* NAK codes 1-3 put the responder's QP in the error state too (§5.3). */
static void nak_for(struct uroce_qp *qp, enum resp_verdict v, uint32_t psn)
{
	switch (v) {
	case RV_RNR:
		dev_count(qp->dev, UC_rnr_naks_tx, 1);
		send_aeth(qp, OP_RC_ACK, (uint8_t)(AETH_RNR_NAK | (qp->attr.min_rnr_timer & 0x1F)), psn);
		return;
	case RV_INV_REQ:
		dev_count(qp->dev, UC_inv_req_naks_tx, 1);
		send_aeth(qp, OP_RC_ACK, AETH_NAK_INV_REQ, psn);
		break;
	case RV_ACCESS:
		dev_count(qp->dev, UC_access_naks_tx, 1);
		send_aeth(qp, OP_RC_ACK, AETH_NAK_REM_ACCESS, psn);
		break;
	case RV_OP_ERR:
		dev_count(qp->dev, UC_op_naks_tx, 1);
		send_aeth(qp, OP_RC_ACK, AETH_NAK_REM_OP, psn);
		break;
	case RV_OK:
		return;
	}
	if (qp->type == IBV_QPT_RC) {
		qp_enter_error(qp);
		qp_post_async_event(qp, IBV_EVENT_QP_FATAL);
	}
}

static void complete_recv(struct uroce_qp *qp, enum ibv_wc_status st, enum ibv_wc_opcode op,
			  uint32_t byte_len, struct uroce_pkt *pkt, bool solicited)
{
	struct ibv_wc wc = {
		.wr_id = qp->cur_recv.wr_id, .status = st, .opcode = op, .byte_len = byte_len,
		.qp_num = qp->qpn, .src_qp = qp->attr.dest_qp_num,
	};
	if (pkt && (pkt->mask & OPF_IMMDT)) {
		wc.imm_data = immdt_raw(pkt->bth + opinfo(pkt->opcode)->off_imm);
		wc.wc_flags |= IBV_WC_WITH_IMM;
	} else if (pkt && (pkt->mask & OPF_IETH)) {
		wc.invalidated_rkey = ieth_rkey(pkt->bth + opinfo(pkt->opcode)->off_ieth);
		wc.wc_flags |= IBV_WC_WITH_INV;
	}
	qp->cur_recv_valid = false;
	cq_push(qp->recv_cq, &wc, solicited);
}

/* Length rules per packet position (§7): FIRST/MIDDLE exactly PMTU, LAST
 * 1..PMTU, ONLY 0..PMTU. */
static bool length_ok(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	uint32_t m = pkt->mask & (OPF_FIRST | OPF_MIDDLE | OPF_LAST);
	if (m == OPF_FIRST || m == OPF_MIDDLE)
		return pkt->paylen == qp->pmtu;
	if (m == OPF_LAST)
		return pkt->paylen >= 1 && pkt->paylen <= qp->pmtu;
	return pkt->paylen <= qp->pmtu;
}

static enum resp_verdict do_send(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	if (pkt->mask & OPF_FIRST) {
		if (qp_rq_pop(qp, &qp->cur_recv) < 0)
			return RV_RNR;
		qp->cur_recv_valid = true;
		qp->recv_off = 0;
		if (qp->cur_recv.status != IBV_WC_SUCCESS) {
			complete_recv(qp, IBV_WC_LOC_PROT_ERR, IBV_WC_RECV, 0, NULL, false);
			return RV_OP_ERR;
		}
	}
	if (!qp->cur_recv_valid)
		return RV_INV_REQ;
	if ((uint64_t)qp->recv_off + pkt->paylen > qp->cur_recv.length) {
		/* receive buffer too small: LOC_LEN_ERR here, and the requester
		 * gets an invalid request NAK (rxe) */
		complete_recv(qp, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0, NULL, false);
		return RV_INV_REQ;
	}
	seg_copy_to(qp->cur_recv.seg, qp->cur_recv.nseg, qp->recv_off, pkt->payload, pkt->paylen);
	qp->recv_off += pkt->paylen;
	qp->in_send = !(pkt->mask & OPF_LAST);
	if (pkt->mask & OPF_LAST) {
		complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV, qp->recv_off, pkt, bth_se(pkt->bth));
		qp->msn = (qp->msn + 1) & 0xFFFFFF;
	}
	return RV_OK;
}

static enum resp_verdict do_write(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	struct uroce_mr *mr;

	if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE))
		return RV_INV_REQ;
	if (pkt->mask & OPF_FIRST) {
		const uint8_t *reth = pkt->bth + opinfo(pkt->opcode)->off_reth;
		qp->write_va = reth_va(reth);
		qp->write_rkey = reth_rkey(reth);
		qp->write_left = reth_len(reth);
		/* zero-length writes touch no memory: no key check (IBA 9.4.3) */
		if (qp->write_left &&
		    mr_check_remote(qp->dev, qp->pd, qp->write_rkey, qp->write_va, qp->write_left,
				    IBV_ACCESS_REMOTE_WRITE, &mr) != MEM_OK)
			return RV_ACCESS;
		qp_set_in_write(qp, true);
		qp->recv_off = 0;
	}
	if (!qp->in_write)
		return RV_INV_REQ;
	if (pkt->paylen > qp->write_left || ((pkt->mask & OPF_LAST) && pkt->paylen != qp->write_left))
		return RV_INV_REQ; /* more or fewer bytes than the RETH said (§7) */
	/* a WRITE with immediate needs a receive WQE: check before placing */
	if ((pkt->mask & OPF_LAST) && (pkt->mask & OPF_IMMDT) && !qp->cur_recv_valid) {
		if (qp_rq_pop(qp, &qp->cur_recv) < 0)
			return RV_RNR;
		qp->cur_recv_valid = true;
	}
	if (pkt->paylen) {
		/* re-resolve per packet: no MR pointer is kept across packets */
		if (mr_check_remote(qp->dev, qp->pd, qp->write_rkey, qp->write_va, pkt->paylen,
				    IBV_ACCESS_REMOTE_WRITE, &mr) != MEM_OK)
			return RV_ACCESS;
		memcpy(mr_host(mr, qp->write_va), pkt->payload, pkt->paylen);
	}
	qp->write_va += pkt->paylen;
	qp->write_left -= pkt->paylen;
	qp->recv_off += pkt->paylen;
	if (pkt->mask & OPF_LAST) {
		qp_set_in_write(qp, false);
		qp->msn = (qp->msn + 1) & 0xFFFFFF;
		if (pkt->mask & OPF_IMMDT)
			complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, qp->recv_off, pkt, bth_se(pkt->bth));
	}
	return RV_OK;
}

static struct uroce_rd_res *res_alloc(struct uroce_qp *qp)
{
	struct uroce_rd_res *r = &qp->res[qp->res_next];
	qp->res_next = (qp->res_next + 1) % qp->res_size;
	memset(r, 0, sizeof(*r));
	r->valid = true;
	return r;
}

/* Send READ response packets [from_psn .. last] of resource r. */
static void send_read_responses(struct uroce_qp *qp, const struct uroce_rd_res *r, uint32_t from_psn)
{
	struct tx_batch b;
	struct uroce_mr *mr = NULL;
	uint32_t n = r->last_psn == r->first_psn ? 1 : (uint32_t)psn_cmp(r->last_psn, r->first_psn) + 1;
	uint32_t i0 = (uint32_t)psn_cmp(from_psn, r->first_psn);

	if (r->length && mr_check_remote(qp->dev, qp->pd, r->rkey, r->va, r->length, IBV_ACCESS_REMOTE_READ, &mr) != MEM_OK)
		return; /* the region went away since: let the requester time out */
	struct uroce_seg seg = { mr ? mr_host(mr, r->va) : NULL, r->length };
	flush_owed_ack(qp);
	txb_init(&b, qp);
	for (uint32_t i = i0; i < n; i++) {
		uint8_t *h = txb_hdr(&b);
		uint8_t op;
		/* a replay starting mid-message continues with MIDDLE/LAST (§6.4) */
		if (n == 1)
			op = OP_RC_READ_RESP_ONLY;
		else if (i == 0)
			op = OP_RC_READ_RESP_FIRST;
		else if (i == n - 1)
			op = OP_RC_READ_RESP_LAST;
		else
			op = OP_RC_READ_RESP_MIDDLE;
		uint32_t off = i * qp->pmtu;
		uint32_t len = (i == n - 1) ? r->length - off : qp->pmtu;
		bth_set(h, op, 0, 0, qp->attr.dest_qp_num, 0, psn_add(r->first_psn, i));
		uint32_t hl = BTH_LEN;
		if (opinfo(op)->mask & OPF_AETH) {
			aeth_set(h + BTH_LEN, AETH_ACK_UNLIMITED, qp->msn);
			hl += AETH_LEN;
		}
		txb_add(&b, hl, &seg, 1, off, len);
	}
	txb_flush(&b);
}

static enum resp_verdict do_read(struct uroce_qp *qp, struct uroce_pkt *pkt, uint32_t *npsn)
{
	const uint8_t *reth = pkt->bth + opinfo(pkt->opcode)->off_reth;
	uint64_t va = reth_va(reth);
	uint32_t rkey = reth_rkey(reth), len = reth_len(reth);
	struct uroce_mr *mr;

	if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_READ) || qp->attr.max_dest_rd_atomic == 0)
		return RV_INV_REQ;
	if (len > UROCE_MAX_MSG)
		return RV_INV_REQ;
	if (len && mr_check_remote(qp->dev, qp->pd, rkey, va, len, IBV_ACCESS_REMOTE_READ, &mr) != MEM_OK)
		return RV_ACCESS;
	uint32_t n = len ? (len + qp->pmtu - 1) / qp->pmtu : 1;
	struct uroce_rd_res *r = res_alloc(qp);
	r->first_psn = pkt->psn;
	r->last_psn = psn_add(pkt->psn, n - 1);
	r->va = va;
	r->rkey = rkey;
	r->length = len;
	qp->msn = (qp->msn + 1) & 0xFFFFFF; /* +1 when a READ is accepted (§5.4) */
	send_read_responses(qp, r, r->first_psn);
	*npsn = n;
	return RV_OK;
}

static void send_atomic_ack(struct uroce_qp *qp, uint32_t psn, uint64_t orig)
{
	struct tx_batch b;
	uint8_t *h;

	flush_owed_ack(qp);
	txb_init(&b, qp);
	h = txb_hdr(&b);
	bth_set(h, OP_RC_ATOMIC_ACK, 0, 0, qp->attr.dest_qp_num, 0, psn);
	aeth_set(h + BTH_LEN, AETH_ACK_UNLIMITED, qp->msn);
	atmack_set(h + BTH_LEN + AETH_LEN, orig);
	txb_add(&b, BTH_LEN + AETH_LEN + ATMACK_LEN, NULL, 0, 0, 0);
	txb_flush(&b);
}

static enum resp_verdict do_atomic(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const uint8_t *ae = pkt->bth + opinfo(pkt->opcode)->off_atmeth;
	uint64_t va = atmeth_va(ae);
	struct uroce_mr *mr;

	if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_ATOMIC) || qp->attr.max_dest_rd_atomic == 0)
		return RV_INV_REQ;
	if (va & 7)
		return RV_INV_REQ; /* misaligned atomic (§5.3) */
	if (mr_check_remote(qp->dev, qp->pd, atmeth_rkey(ae), va, 8, IBV_ACCESS_REMOTE_ATOMIC, &mr) != MEM_OK)
		return RV_ACCESS;
	uint64_t *target = (uint64_t *)(void *)mr_host(mr, va);
	uint64_t orig;
	if (!((uintptr_t)target & 7)) {
		/* atomic with respect to other atomics and the CPU's own */
		if (pkt->opcode == OP_RC_CMP_SWAP) {
			orig = atmeth_compare(ae);
			__atomic_compare_exchange_n(target, &orig, atmeth_swap_add(ae), false,
						    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		} else {
			orig = __atomic_fetch_add(target, atmeth_swap_add(ae), __ATOMIC_SEQ_CST);
		}
	} else {
		return RV_INV_REQ; /* host address not 8-aligned (zero-based MR) */
	}
	struct uroce_rd_res *r = res_alloc(qp);
	r->atomic = true;
	r->first_psn = r->last_psn = pkt->psn;
	r->orig = orig;
	qp->msn = (qp->msn + 1) & 0xFFFFFF;
	send_atomic_ack(qp, pkt->psn, orig);
	return RV_OK;
}

/* §6.4: duplicates are answered, never executed twice (READs excepted,
 * which are re-read from memory). */
static void handle_duplicate(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	dev_count(qp->dev, UC_duplicates, 1);
	if (pkt->mask & (OPF_SEND | OPF_WRITE)) {
		ack_owe(qp, psn_add(qp->epsn, PSN_MASK), false); /* ePSN - 1; a retry is answered at once */
		return;
	}
	for (uint32_t i = 0; i < qp->res_size; i++) {
		struct uroce_rd_res *r = &qp->res[i];
		if (!r->valid || psn_cmp(pkt->psn, r->first_psn) < 0 || psn_cmp(pkt->psn, r->last_psn) > 0)
			continue;
		if (pkt->mask & OPF_ATOMIC) {
			if (r->atomic && r->first_psn == pkt->psn)
				send_atomic_ack(qp, r->first_psn, r->orig);
			return;
		}
		if (r->atomic)
			return;
		/* the retried READ must lie within the original (§6.4) */
		const uint8_t *reth = pkt->bth + opinfo(pkt->opcode)->off_reth;
		uint32_t k = (uint32_t)psn_cmp(pkt->psn, r->first_psn);
		uint64_t off = (uint64_t)k * qp->pmtu;
		if (reth_rkey(reth) != r->rkey || reth_va(reth) != r->va + off || off + reth_len(reth) > r->length)
			return;
		send_read_responses(qp, r, pkt->psn);
		return;
	}
}

void responder_rx(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	enum ibv_qp_state st = qp->attr.qp_state;
	int32_t d;
	enum resp_verdict v;
	uint32_t consumed = 1;

	if (st != IBV_QPS_RTR && st != IBV_QPS_RTS && st != IBV_QPS_SQD && st != IBV_QPS_SQE) {
		dev_count(qp->dev, UC_drop_qp_state, 1);
		return;
	}
	d = psn_cmp(pkt->psn, qp->epsn);
	if (qp->type == IBV_QPT_UC) {
		/* UC (§6.7): on a gap drop the message, resync on FIRST/ONLY */
		if (d != 0) {
			if (!(pkt->mask & OPF_FIRST)) {
				qp->in_send = false;
				qp_set_in_write(qp, false);
				dev_count(qp->dev, UC_drop_psn_window, 1);
				qp->epsn = psn_add(pkt->psn, 1);
				return;
			}
			qp->in_send = false;
			qp_set_in_write(qp, false);
		}
	} else if (d > 0) {
		dev_count(qp->dev, UC_out_of_sequence, 1);
		if (!qp->nak_sent) {
			qp->nak_sent = true;
			dev_count(qp->dev, UC_seq_naks_tx, 1);
			send_aeth(qp, OP_RC_ACK, AETH_NAK_PSN_SEQ, qp->epsn);
		} else {
			dev_count(qp->dev, UC_drop_psn_window, 1);
		}
		return;
	} else if (d < 0) {
		handle_duplicate(qp, pkt);
		return;
	}
	qp->nak_sent = false;

	/* opcode sequence: a message in progress continues, otherwise a new
	 * one starts (IBA 9.8.3.1; rxe check_op_seq) */
	bool starts = pkt->mask & OPF_FIRST;
	if ((qp->in_send && (!(pkt->mask & OPF_SEND) || starts)) ||
	    (qp->in_write && (!(pkt->mask & OPF_WRITE) || starts)) ||
	    (!qp->in_send && !qp->in_write && !starts))
		v = RV_INV_REQ;
	else if (!(pkt->mask & (OPF_READ | OPF_ATOMIC)) && !length_ok(qp, pkt))
		v = RV_INV_REQ;
	else if (pkt->mask & OPF_SEND)
		v = do_send(qp, pkt);
	else if (pkt->mask & OPF_WRITE)
		v = do_write(qp, pkt);
	else if (pkt->mask & OPF_READ)
		v = qp->type == IBV_QPT_RC ? do_read(qp, pkt, &consumed) : RV_INV_REQ;
	else if (pkt->mask & OPF_ATOMIC)
		v = qp->type == IBV_QPT_RC ? do_atomic(qp, pkt) : RV_INV_REQ;
	else
		v = RV_INV_REQ;

	if (v != RV_OK) {
		if (qp->type == IBV_QPT_UC) {
			/* UC has no NAKs: drop the rest of the message (§6.7) */
			qp->in_send = false;
			qp_set_in_write(qp, false);
			if (v == RV_RNR)
				dev_count(qp->dev, UC_drop_no_recv, 1);
			qp->epsn = psn_add(pkt->psn, 1);
			return;
		}
		LOG_DBG("uroce: qp 0x%x NAK verdict %d for %s psn 0x%x len %u (in_send %d in_write %d)", qp->qpn, v,
			opinfo(pkt->opcode)->name, pkt->psn, pkt->paylen, qp->in_send, qp->in_write);
		nak_for(qp, v, pkt->psn);
		return;
	}
	qp->epsn = psn_add(pkt->psn, consumed);
	if (qp->type == IBV_QPT_RC && (pkt->mask & (OPF_SEND | OPF_WRITE))) {
		if (bth_ackreq(pkt->bth))
			ack_owe(qp, pkt->psn, (pkt->mask & OPF_LAST) != 0);
	}
}

/* The 40-byte GRH area at the start of a UD receive buffer (§9): the IPv6
 * header, or for IPv4 20 zero bytes followed by the IPv4 header (rxe). */
static void build_grh(const struct uroce_pkt *pkt, uint8_t grh[40])
{
	const struct uroce_rxpkt *rx = pkt->rx;

	memset(grh, 0, 40);
	ip_header_build(gid_is_ipv4(rx->sgid) ? grh + 20 : grh, rx->sgid, rx->dgid, (uint16_t)(rx->len + 8),
			pkt->ip_id, rx->tos, rx->ttl);
}

void ud_rx(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	enum ibv_qp_state st = qp->attr.qp_state;
	const uint8_t *deth = pkt->bth + opinfo(pkt->opcode)->off_deth;
	uint8_t grh[40];

	if (st != IBV_QPS_RTR && st != IBV_QPS_RTS && st != IBV_QPS_SQD && st != IBV_QPS_SQE) {
		dev_count(qp->dev, UC_drop_qp_state, 1);
		return;
	}
	/* §1.5 item 6: the Q_Key must match; the PSN is not checked (§6.7) */
	if (deth_qkey(deth) != qp->attr.qkey) {
		dev_count(qp->dev, UC_drop_qkey, 1);
		return;
	}
	if (qp_rq_pop(qp, &qp->cur_recv) < 0) {
		dev_count(qp->dev, UC_drop_no_recv, 1);
		return;
	}
	qp->cur_recv_valid = true;
	struct ibv_wc wc = {
		.wr_id = qp->cur_recv.wr_id, .opcode = IBV_WC_RECV, .qp_num = qp->qpn,
		.src_qp = deth_sqpn(deth), .wc_flags = IBV_WC_GRH,
	};
	if (qp->cur_recv.status != IBV_WC_SUCCESS) {
		wc.status = IBV_WC_LOC_PROT_ERR;
	} else if (40 + (uint64_t)pkt->paylen > qp->cur_recv.length) {
		/* IBA: a receive buffer too small completes in error; rxe drops
		 * the packet silently instead (roce-wire.md §6.7) */
		wc.status = IBV_WC_LOC_LEN_ERR;
	} else {
		build_grh(pkt, grh);
		seg_copy_to(qp->cur_recv.seg, qp->cur_recv.nseg, 0, grh, 40);
		seg_copy_to(qp->cur_recv.seg, qp->cur_recv.nseg, 40, pkt->payload, pkt->paylen);
		wc.byte_len = 40 + pkt->paylen;
		if (pkt->mask & OPF_IMMDT) {
			wc.imm_data = immdt_raw(pkt->bth + opinfo(pkt->opcode)->off_imm);
			wc.wc_flags |= IBV_WC_WITH_IMM;
		}
	}
	qp->cur_recv_valid = false;
	cq_push(qp->recv_cq, &wc, bth_se(pkt->bth));
}
