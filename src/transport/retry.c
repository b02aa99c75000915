/* What the requester's timers do when they fire (§6.6): the RNR wait ends,
 * the adaptive retransmission timer probes, the IBA ACK timer retries or
 * gives up.  Called by exec/progress.c for each QP whose deadline passed. */
#include "transport.h"
#include "../wire/hdr.h"
#include "../core/wake.h"

/* The adaptive retransmission timer (early retry).  Go-back-N recovers a
 * lost packet only when a NAK or the ACK timer says so, and the responder
 * NAKs a gap just once (§6.2): a lost tail, or a retransmission that is
 * itself lost or overtaken (a reordering network), leaves the requester
 * waiting for the full IBA ACK timeout (67 ms at the usual timeout 14) with
 * nothing in flight.  So, like hardware RNICs' adaptive retransmission, the
 * requester probes earlier, after a timeout measured from the round trip
 * (rtt_rto_ns: 2 srtt + 4 rttvar, at least UROCE_RTO_MIN_US, doubling while
 * nothing moves).  A probe resends only the packet at una with AckReq:
 * - if the packets after it were merely late (a loaded host delays loopback
 *   packets by milliseconds), they reach the responder first and the ACK
 *   covers them: one duplicate was the whole cost;
 * - if they were lost, the responder ACKs exactly the probe and handle_aeth
 *   goes back to the PSN after it.
 * Una inside a READ or atomic is asked again whole (go-back-N).  Probes do
 * not count against retry_cnt: the IBA ACK timer still runs from the last
 * progress and alone decides IBV_WC_RETRY_EXC_ERR, so what an application
 * sees of timeouts and retry counts is unchanged (§6.6). */
void retry_timer_fire(struct uroce_qp *qp, uint64_t now)
{
	qp->timer.deadline = 0;
	if (qp->attr.qp_state != IBV_QPS_RTS && qp->attr.qp_state != IBV_QPS_SQD)
		return;
	if (qp->comp.rnr_wait) {
		/* RNR timer expired: resend from the NAKed PSN */
		qp->comp.rnr_wait = false;
		requester_rewind(qp, qp->comp.una_psn);
	} else if (psn_cmp(qp->req.snd_psn, qp->comp.una_psn) <= 0 && !qp->req.rd_atomic_out) {
		qp_timers_off(qp); /* nothing outstanding */
		return;
	} else if (!qp->timer.ack || now < qp->timer.ack) {
		if (!qp->timer.rto || now < qp->timer.rto) {
			requester_arm_timer(qp);  /* early: not this one's time */
			return;
		}
		dev_count(qp->dev, UC_rto_probes, 1);
		LOG_DBG("uroce: qp 0x%x early retry: una 0x%x snd 0x%x srtt %llu ns rttvar %llu ns backoff %u",
			qp->qpn, qp->comp.una_psn, qp->req.snd_psn, (unsigned long long)qp->rtt.srtt_ns,
			(unsigned long long)qp->rtt.rttvar_ns, qp->rtt.backoff);
		qp->timer.rto = 0;
		qp->rtt.backoff++;
		if (requester_probe(qp)) {
			requester_arm_timer(qp);
			return;
		}
		requester_retry_from(qp, qp->comp.una_psn, false);
	} else {
		dev_count(qp->dev, UC_timeouts, 1);
		LOG_DBG("uroce: qp 0x%x ACK timeout: una 0x%x snd 0x%x max 0x%x rd_atomic_out %u retry_left %u, late by %lld ns",
			qp->qpn, qp->comp.una_psn, qp->req.snd_psn, qp->req.max_psn, qp->req.rd_atomic_out, qp->comp.retry_left,
			(long long)(now_ns() - qp->timer.ack));
		qp->timer.ack = qp->timer.rto = 0;
		if (qp->comp.retry_left == 0) {
			qp_fail_oldest(qp, IBV_WC_RETRY_EXC_ERR);
			return;
		}
		qp->comp.retry_left--;
		qp->rtt.backoff++;
		requester_retry_from(qp, qp->comp.una_psn, true);
	}
	requester_run(qp);
}
