/* The requester's timers (§6.6): the IBA local ACK timer and the adaptive
 * retransmission timer, armed while requests are outstanding.  What they do
 * when they fire is retry.c's. */
#include "transport.h"
#include "../cc/rtt.h"
#include "../core/wake.h"
#include "../wire/hdr.h"

static uint64_t ack_timeout_ns(const struct uroce_qp *qp)
{
	/* 4.096 us * 2^timeout (§6.6); 0 means no timer */
	return qp->attr.timeout ? 4096ull << qp->attr.timeout : 0;
}

void requester_arm_timer(struct uroce_qp *qp)
{
	if (qp->comp.rnr_wait || !qp_reliable(qp))
		return;
	bool outstanding = psn_cmp(qp->req.snd_psn, qp->comp.una_psn) > 0 || qp->req.rd_atomic_out;
	if (!outstanding) {
		qp_timers_off(qp);
		return;
	}
	uint64_t now = 0, t = ack_timeout_ns(qp);
	uint64_t r = qp->timer.rto ? 0 : rtt_rto_ns(&qp->rtt, (uint64_t)qp->dev->cfg.rto_min_us * 1000, &now);
	if ((t && !qp->timer.ack) || r) {
		if (!now)
			now = now_ns();
		if (t && !qp->timer.ack)
			qp->timer.ack = now + t;
		if (r)
			qp->timer.rto = now + r;
	}
	/* a probe no earlier than the IBA timer is no use */
	if (qp->timer.ack && qp->timer.rto >= qp->timer.ack)
		qp->timer.rto = 0;
	uint64_t d = qp->timer.ack;
	if (qp->timer.rto && (!d || qp->timer.rto < d))
		d = qp->timer.rto;
	if (d != qp->timer.deadline)
		qp_timer_set(qp, d);
}

