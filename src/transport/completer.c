/* Completer: ACKs, NAKs, READ responses and atomic ACKs become send
 * completions; counts down retry_cnt and rnr_retry on NAKs and READ gaps
 * (§5, §6.5, §6.6; the timers are timer.c's and retry.c's).
 * Responses must arrive in PSN order: the next one expected is una_psn. */
#include <string.h>
#include "transport.h"
#include "../wire/hdr.h"
#include "../core/wake.h"
#include "../core/wr.h"
#include "../mem/mem.h"
#include "ref.h"

/* RNR NAK timer codes in microseconds (§5.2; 61.44 ms for code 25 per §11.2). */
static const uint32_t rnr_timer_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
	163840, 245760, 327680, 491520,
};

static bool is_rd_atomic(const struct uroce_send_wqe *w)
{
	return (wr_info(w->opcode)->flags & WRF_RD_ATOMIC) != 0;
}

static void progress_made(struct uroce_qp *qp, uint32_t old_una)
{
	if (psn_cmp(qp->comp.una_psn, old_una) > 0) {
		cc_on_ack(&qp->cc, (uint32_t)psn_cmp(qp->comp.una_psn, old_una));
		if (qp->rtt.timing && psn_cmp(qp->comp.una_psn, qp->rtt.psn) > 0)
			rtt_sample(&qp->rtt, now_ns());
	}
	/* forward progress reloads both retry counters (§6.6) and restarts
	 * the timers */
	qp->comp.retry_left = qp->attr.retry_cnt;
	qp->comp.rnr_left = qp->attr.rnr_retry;
	qp->rtt.backoff = 0;
	qp->req.probe_out = false;
	qp_timers_off(qp);
	qp->comp.read_gap_asked = false;
	qp->comp.rnr_nak_seen = false;
}

/* Everything before `psn` is acknowledged (an ACK for psn-1, or a NAK or
 * response for psn).  SEND/WRITE WQEs wholly before it complete; a READ or
 * atomic before it whose response is missing means the response was lost
 * (implied NAK, §6.6): restart there.  Returns false on such a restart. */
static bool ack_before(struct uroce_qp *qp, uint32_t psn)
{
	/* one pass from the oldest WQE: those completed here stay in the
	 * queue until qp_retire_sends, so asking sq_oldest_started() again per
	 * WQE would rescan them -- quadratic in the WQEs one coalesced ACK
	 * covers, which a small-message stream makes many */
	for (uint32_t i = qp->sq_tail; i != qp->sq_head; i++) {
		struct uroce_send_wqe *w = &qp->sq[i % qp->sq_size];
		if (!w->started)
			break;
		if (w->state == WQE_DONE)
			continue;
		if (psn_cmp(w->first_psn, psn) >= 0)
			break;
		if (is_rd_atomic(w)) {
			/* only its own responses complete it and move una; a PSN
			 * inside its range is one of them */
			if (psn_cmp(psn, w->last_psn) <= 0)
				return true;
			uint32_t resume = psn_add(w->first_psn, w->resp_bytes / qp->pmtu);
			if (psn_cmp(resume, qp->comp.una_psn) > 0)
				qp->comp.una_psn = resume;
			/* a loss like any other: the window hears of it */
			requester_retry_from(qp, qp->comp.una_psn, false);
			return false;
		}
		if (psn_cmp(w->last_psn, psn) >= 0) {
			/* partly acknowledged message */
			if (psn_cmp(psn, qp->comp.una_psn) > 0)
				qp->comp.una_psn = psn;
			return true;
		}
		qp_complete_send(qp, w, IBV_WC_SUCCESS);
		qp->comp.una_psn = psn_add(w->last_psn, 1);
	}
	if (psn_cmp(psn, qp->comp.una_psn) > 0)
		qp->comp.una_psn = psn;
	return true;
}

/* A reference of ours the peer refused at psn, or an answer by reference
 * we could not pull (or that named another process than the peer): what
 * it stood for goes again, as packets, from psn at once, spending no retry
 * (a PSN sent before is never a reference, a READ asked again never asks
 * for one: ref.h). */
static void ref_refused(struct uroce_qp *qp, uint32_t psn)
{
	if (qp->req.ref_refusals < REF_GIVE_UP)
		qp->req.ref_refusals++;
	requester_rewind(qp, psn);
}

static void handle_aeth(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	uint8_t syn = aeth_syndrome(pkt->bth + opinfo(pkt->opcode)->off_aeth);
	uint32_t psn = pkt->psn;

	switch (syn & AETH_TYPE_MASK) {
	case AETH_ACK:
		dev_count(qp->dev, UC_acks_rx, 1);
		if (psn_cmp(psn, qp->comp.una_psn) < 0) {
			dev_count(qp->dev, UC_dup_responses, 1);
			return;
		}
		{
			uint32_t old_una = qp->comp.una_psn;
			bool probe_hit = qp->req.probe_out && psn == qp->req.probe_psn;
			if (ack_before(qp, psn_add(psn, 1)))
				progress_made(qp, old_una);
			/* The ACK names exactly the probed PSN: the responder has
			 * nothing after it, though more was sent before the probe
			 * on the same path -- lost, or dropped after a NAK.  Go
			 * back to there now (§6.6). */
			if (probe_hit && psn_cmp(qp->req.snd_psn, psn_add(psn, 1)) > 0) {
				requester_retry_from(qp, psn_add(psn, 1), false);
			}
		}
		break;
	case AETH_RNR_NAK: {
		dev_count(qp->dev, UC_rnr_naks_rx, 1);
		if (psn_cmp(psn, qp->comp.una_psn) < 0)
			return;
		if (!ack_before(qp, psn))
			return;
		/* rnr_retry 7 means retry forever (§6.6) */
		if (qp->attr.rnr_retry != 7) {
			if (qp->comp.rnr_left == 0) {
				qp_fail_oldest(qp, IBV_WC_RNR_RETRY_EXC_ERR);
				return;
			}
			qp->comp.rnr_left--;
		}
		qp->comp.rnr_wait = true;
		qp->comp.rnr_nak_seen = true;
		qp->comp.rnr_nak_psn = psn;
		qp->comp.una_psn = psn;
		qp_timers_off(qp);
		qp_timer_set(qp, now_ns() + (uint64_t)rnr_timer_us[syn & 0x1F] * 1000);
		break;
	}
	default: /* NAK */
		if (psn_cmp(psn, qp->comp.una_psn) < 0)
			return;
		if (syn == AETH_NAK_PSN_SEQ) {
			/* one flagged NET_PKT_REF_NAK: the peer could not read a
			 * reference of ours at psn, and what it stood for goes
			 * again as packets (a PSN sent before is never a
			 * reference again); no loss, so no retry is spent and
			 * the window is left alone (ref.h) */
			bool refused = pkt->rx->flags & NET_PKT_REF_NAK;
			dev_count(qp->dev, refused ? UC_ref_naks_rx : UC_seq_naks_rx, 1);
			/* after an RNR NAK the responder NAKs the packets that
			 * followed (rxe does, see rxe-captures/rnr.txt); the RNR
			 * timer restarts them anyway.  Such a NAK may also come
			 * after the wait (a short min_rnr_timer): it names the
			 * RNR NAK's PSN, which the RNR retry already went back
			 * to, so it is no new gap.  Charged to retry_cnt, each
			 * RNR round would spend a transport retry, and a slow
			 * receiver under rnr_retry 7 (for ever, §6.6) would end
			 * in RETRY_EXC_ERR; a real loss of the resent packet is
			 * still caught by the ACK timer. */
			if (qp->comp.rnr_wait || (qp->comp.rnr_nak_seen && psn == qp->comp.rnr_nak_psn))
				return;
			uint32_t old_una = qp->comp.una_psn;
			if (!ack_before(qp, psn))
				return;
			/* the NAK acknowledged packets before it: forward progress
			 * reloads the retry counter (§6.6) */
			if (psn_cmp(qp->comp.una_psn, old_una) > 0)
				progress_made(qp, old_una);
			if (refused) {
				ref_refused(qp, psn);
				break;
			}
			if (qp->comp.retry_left == 0) {
				qp_fail_oldest(qp, IBV_WC_RETRY_EXC_ERR);
				return;
			}
			qp->comp.retry_left--;
			requester_retry_from(qp, psn, false);
			qp_timers_off(qp);
			break;
		}
		dev_count(qp->dev, UC_err_naks_rx, 1);
		ack_before(qp, psn);
		qp_fail_oldest(qp, syn == AETH_NAK_INV_REQ ? IBV_WC_REM_INV_REQ_ERR :
			    syn == AETH_NAK_REM_ACCESS ? IBV_WC_REM_ACCESS_ERR : IBV_WC_REM_OP_ERR);
		return;
	}
}

/* A READ response or atomic ACK also acknowledges everything before it.
 * Returns false when the packet is done with (stale, or a restart was
 * triggered); otherwise *w is the WQE it should answer: the oldest
 * outstanding one, which the caller still has to match. */
static bool response_wqe(struct uroce_qp *qp, uint32_t psn, struct uroce_send_wqe **w)
{
	if (psn_cmp(psn, qp->comp.una_psn) < 0) {
		dev_count(qp->dev, UC_dup_responses, 1);
		return false;
	}
	if (!ack_before(qp, psn))
		return false;
	*w = sq_oldest_started(qp);
	return true;
}

/* An ATOMIC_WRITE is answered by an RDMA_READ_RESPONSE_ONLY without
 * payload at its PSN (roce-wire.md §3, rxe's atomic_write_reply). */
static void handle_atomic_write_response(struct uroce_qp *qp, struct uroce_send_wqe *w, struct uroce_pkt *pkt)
{
	if (pkt->paylen || (pkt->mask & OPF_ONLY) != OPF_ONLY) {
		qp_fail_oldest(qp, IBV_WC_BAD_RESP_ERR);
		return;
	}
	uint32_t old_una = qp->comp.una_psn;
	qp->comp.una_psn = psn_add(pkt->psn, 1);
	if (qp->req.rd_atomic_out)
		qp->req.rd_atomic_out--;
	progress_made(qp, old_una);
	qp_complete_send(qp, w, IBV_WC_SUCCESS);
}

static void handle_read_response(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	uint32_t psn = pkt->psn;
	struct uroce_send_wqe *w;

	if (!response_wqe(qp, psn, &w))
		return;
	if (w && wr_info(w->opcode)->kind == WRK_ATOMIC_WRITE && w->first_psn == psn) {
		handle_atomic_write_response(qp, w, pkt);
		return;
	}
	if (!w || wr_info(w->opcode)->kind != WRK_READ || psn_cmp(psn, w->first_psn) < 0 ||
	    psn_cmp(psn, w->last_psn) > 0) {
		LOG_DBG("uroce: qp 0x%x READ response psn 0x%x outside the oldest WQE (%s 0x%x..0x%x)", qp->qpn, psn,
			w ? (wr_info(w->opcode)->kind == WRK_READ ? "READ" : "not READ") : "none", w ? w->first_psn : 0,
			w ? w->last_psn : 0);
		dev_count(qp->dev, UC_dup_responses, 1);
		return;
	}
	uint32_t idx = (uint32_t)psn_cmp(psn, w->first_psn);
	uint32_t expect_idx = w->resp_bytes / qp->pmtu;
	if (idx != expect_idx) {
		/* a response went missing: ask again from the first gap, once
		 * per gap -- the rest of the old stream is still arriving and
		 * must not trigger more requests (the timer covers a lost retry) */
		uint32_t gap = psn_add(w->first_psn, expect_idx);
		if (idx > expect_idx && !(qp->comp.read_gap_asked && qp->comp.read_gap_psn == gap)) {
			if (qp->comp.retry_left == 0) {
				qp_fail_oldest(qp, IBV_WC_RETRY_EXC_ERR);
				return;
			}
			qp->comp.retry_left--;
			qp->comp.read_gap_asked = true;
			qp->comp.read_gap_psn = gap;
			requester_retry_from(qp, gap, false);
		}
		LOG_DBG("uroce: qp 0x%x READ response psn 0x%x is #%u, expected #%u", qp->qpn, psn, idx, expect_idx);
		dev_count(qp->dev, UC_dup_responses, 1);
		return;
	}
	/* The packets this response stands for, [idx, end): one, or for an
	 * answer by reference (ref.h) a READ_RESPONSE_ONLY standing for all
	 * those of a request this QP asked with NET_PKT_REF_OK. */
	uint32_t end = idx + 1;
	if (pkt->ref) {
		end = ref_read_end(qp->pmtu, w->npkts, idx);
		if (!w->ref_asked || (pkt->mask & OPF_ONLY) != OPF_ONLY)
			end = 0;  /* an answer by reference to no such request: malformed */
	} else if (w->ref_asked) {
		/* asked by reference and answered by packets: the peer will not
		 * answer so (its probe of us failed), and an answer of up to
		 * REF_SPAN_BYTES of packets at once overruns the window: the
		 * QP asks its READs in chunks from now on */
		qp->req.no_ref_reads = true;
	}
	uint32_t off = idx * qp->pmtu;
	uint32_t want = (end == w->npkts ? w->length : end * qp->pmtu) - off;
	if (!end || pkt->paylen != want) {
		/* a malformed response: the responder misbehaves */
		qp_fail_oldest(qp, IBV_WC_BAD_RESP_ERR);
		return;
	}
	if (pkt->ref && !ref_from_peer(qp, pkt->ref)) {
		dev_count(qp->dev, UC_ref_pull_failed, 1);
		ref_refused(qp, psn);
		return;
	}
	/* the READ's local memory is checked as the data lands (mem.h): a
	 * failed lkey, or an MR deregistered since posting, completes the WQE
	 * LOC_PROT_ERR and the QP enters ERR (rxe's completer, mlx5) */
	struct uroce_seg seg[UROCE_MAX_SGE];
	uint32_t nseg;
	enum uroce_mem_verdict mv = mem_sge_resolve(qp->dev, qp->pd, w->sge, w->nsge < UROCE_MAX_SGE ? w->nsge : UROCE_MAX_SGE,
						    off, want, IBV_ACCESS_LOCAL_WRITE, seg, &nseg);
	if (mv != MEM_OK) {
		qp_fail_oldest(qp, mem_verdict_local_status(mv));
		return;
	}
	if (!pkt_place(qp->dev, pkt, seg, nseg)) {
		dev_count(qp->dev, UC_ref_pull_failed, 1);
		ref_refused(qp, psn);
		return;
	}
	w->resp_bytes += want;
	uint32_t old_una = qp->comp.una_psn;
	qp->comp.una_psn = psn_add(w->first_psn, end);
	progress_made(qp, old_una);
	/* end of a chunk request (§6.3: one READ request per chunk) */
	if ((pkt->mask & OPF_LAST) && qp->req.rd_atomic_out)
		qp->req.rd_atomic_out--;
	if (end == w->npkts)
		qp_complete_send(qp, w, IBV_WC_SUCCESS);
}

static void handle_atomic_ack(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	uint32_t psn = pkt->psn;
	struct uroce_send_wqe *w;

	if (!response_wqe(qp, psn, &w))
		return;
	if (!w || wr_info(w->opcode)->kind != WRK_ATOMIC ||
	    w->first_psn != psn) {
		dev_count(qp->dev, UC_dup_responses, 1);
		return;
	}
	/* the original value, in host order, into the local 8 bytes */
	uint64_t orig = atmack_orig(pkt->bth + opinfo(pkt->opcode)->off_atmack);
	enum uroce_mem_verdict mv = mem_sge_copy_to(qp->dev, qp->pd, w->sge, w->nsge, 0, (const uint8_t *)&orig, 8);
	if (mv != MEM_OK) {
		qp_fail_oldest(qp, mem_verdict_local_status(mv));  /* as a READ's, above */
		return;
	}
	w->resp_bytes = 8;
	uint32_t old_una = qp->comp.una_psn;
	qp->comp.una_psn = psn_add(psn, 1);
	if (qp->req.rd_atomic_out)
		qp->req.rd_atomic_out--;
	progress_made(qp, old_una);
	qp_complete_send(qp, w, IBV_WC_SUCCESS);
}

/* A new or reset QP's completer: nothing acknowledged.  The retry budgets
 * are loaded at RTS.  Under qp->lock. */
void completer_reset(struct uroce_qp *qp)
{
	memset(&qp->comp, 0, sizeof(qp->comp));
}

/* A response comes while posts are held back to join a stream
 * (sq/post.c, post_cork), CORK_IDLE_NS or more after the last of them: the
 * application had stopped posting and waited for an answer without a verbs
 * call (a WRITE of data, then a WRITE of a flag, then a spin on memory), and
 * the peer's ACK may itself have waited for a ride on that answer.  Such a
 * QP sends at once for its next CORK_SKIP_MIN posts, twice as many each time
 * this repeats (up to CORK_SKIP_MAX), until a hold fills (post_cork).  A
 * stream's posts come a microsecond or two apart, so an ACK that overtakes
 * one of its holds is no miss.  Under qp->lock. */
#define CORK_IDLE_NS 5000ull
#define CORK_SKIP_MIN 16u
#define CORK_SKIP_MAX 4096u
static void cork_missed(struct uroce_qp *qp)
{
	if (now_ns() - qp->req.cork_post_ns < CORK_IDLE_NS)
		return;
	backoff_miss(&qp->req.cork_backoff, CORK_SKIP_MIN, CORK_SKIP_MAX);
	dev_count(qp->dev, UC_cork_misses, 1);
}

void completer_rx(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	if (!qp_reliable(qp))
		return;
	/* responses for PSNs never sent are bogus (§6.6: ignore what is not
	 * outstanding) */
	if (psn_cmp(pkt->psn, qp->req.max_psn) >= 0) {
		LOG_DBG("uroce: qp 0x%x response psn 0x%x beyond anything sent (0x%x)", qp->qpn, pkt->psn, qp->req.max_psn);
		dev_count(qp->dev, UC_dup_responses, 1);
		return;
	}
	if (pkt->mask & OPF_READ) {
		handle_read_response(qp, pkt);
		/* a READ response's AETH acknowledges like an ACK; its PSN handling
		 * is done above */
	} else if (pkt->mask & OPF_ATOMIC) {
		handle_atomic_ack(qp, pkt);
	} else {
		handle_aeth(qp, pkt);
	}
	if (qp->attr.qp_state == IBV_QPS_ERR)
		return;
	qp_retire_sends(qp);
	if (qp->req.corked)
		cork_missed(qp);
	requester_run(qp);  /* sends what the window allows and (re)arms the timers */
}

