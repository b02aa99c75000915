/* Requester: turns the send queue into request packets.
 *
 * PSNs are assigned when a WQE first goes out and never change, so a
 * go-back-N restart (§6.6) only moves sq_send/next_pkt back and resends the
 * same packets.  An RDMA READ is asked for in chunks of READ_CHUNK_PKTS
 * response packets, each its own READ request at the PSN of its first
 * response (§6.3), so that responses never overrun the receive path and a
 * lost response costs at most one chunk again; each chunk counts against
 * max_rd_atomic.
 *
 * How many packets may be unacknowledged is the QP's congestion window
 * (cwnd, at most UROCE_WINDOW): halved on every loss signal, grown again as
 * ACKs arrive.  Go-back-N resends the whole window after a loss, so under
 * loss a small window is what keeps the retransmissions (and the peer's
 * duplicate work) bounded. */
#include "transport.h"
#include "hdr.h"
#include "tx.h"
#include <string.h>

#define READ_CHUNK_PKTS 32u

static uint32_t qp_window(const struct uroce_qp *qp)
{
	return qp->cwnd ? qp->cwnd : qp->dev->cfg.window;
}

/* A loss signal: shrink the window (to 4 on a timeout) and remember when,
 * which arms the adaptive timer for a while (rto_ns). */
static void cwnd_loss(struct uroce_qp *qp, bool timeout)
{
	qp->loss_ns = now_ns();
	uint32_t w = qp_window(qp);
	qp->ssthresh = w / 2 > 4 ? w / 2 : 4;
	qp->cwnd = timeout ? 4 : qp->ssthresh;
	qp->cwnd_acc = 0;
}

void requester_cwnd_progress(struct uroce_qp *qp, uint32_t acked)
{
	uint32_t max = qp->dev->cfg.window;
	if (!qp->cwnd)
		return;
	if (qp->cwnd < qp->ssthresh) {
		qp->cwnd += acked;  /* slow start */
	} else {
		qp->cwnd_acc += acked;  /* one packet per window acknowledged */
		while (qp->cwnd_acc >= qp->cwnd) {
			qp->cwnd_acc -= qp->cwnd;
			qp->cwnd++;
		}
	}
	if (qp->cwnd > max)
		qp->cwnd = max;
}

static bool wqe_is_read(const struct uroce_send_wqe *w) { return w->opcode == IBV_WR_RDMA_READ; }
static bool wqe_is_atomic(const struct uroce_send_wqe *w)
{
	return w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

static uint32_t read_chunk_pkts(const struct uroce_qp *qp)
{
	uint32_t w = qp->dev->cfg.window;
	return w < READ_CHUNK_PKTS ? w : READ_CHUNK_PKTS;
}

static void wqe_start(struct uroce_qp *qp, struct uroce_send_wqe *w)
{
	w->npkts = (wqe_is_atomic(w)) ? 1 : (w->length + qp->pmtu - 1) / qp->pmtu;
	if (w->npkts == 0)
		w->npkts = 1;
	/* A new WQE follows every PSN ever sent: after a go-back-N rewind the
	 * WQEs before it may have completed (ACKed) without being resent, which
	 * leaves snd_psn behind; their PSNs must never be reused. */
	qp->snd_psn = qp->max_psn;
	w->first_psn = qp->snd_psn;
	w->last_psn = psn_add(w->first_psn, w->npkts - 1);
	w->next_pkt = 0;
	w->resp_bytes = 0;
	w->started = true;
}

/* Opcode of packet `i` of `n` for SEND / WRITE (§7). */
static uint8_t data_opcode(const struct uroce_qp *qp, const struct uroce_send_wqe *w, uint32_t i, uint32_t n)
{
	bool first = i == 0, last = i == n - 1;
	uint8_t base = qp->type == IBV_QPT_UC ? 0x20 : 0x00;
	uint8_t op;

	switch (w->opcode) {
	case IBV_WR_SEND:
		op = first && last ? OP_RC_SEND_ONLY : first ? OP_RC_SEND_FIRST : last ? OP_RC_SEND_LAST : OP_RC_SEND_MIDDLE;
		break;
	case IBV_WR_SEND_WITH_IMM:
		op = first && last ? OP_RC_SEND_ONLY_IMM : first ? OP_RC_SEND_FIRST : last ? OP_RC_SEND_LAST_IMM : OP_RC_SEND_MIDDLE;
		break;
	case IBV_WR_SEND_WITH_INV:
		op = first && last ? OP_RC_SEND_ONLY_INV : first ? OP_RC_SEND_FIRST : last ? OP_RC_SEND_LAST_INV : OP_RC_SEND_MIDDLE;
		break;
	case IBV_WR_RDMA_WRITE:
		op = first && last ? OP_RC_WRITE_ONLY : first ? OP_RC_WRITE_FIRST : last ? OP_RC_WRITE_LAST : OP_RC_WRITE_MIDDLE;
		break;
	default: /* IBV_WR_RDMA_WRITE_WITH_IMM */
		op = first && last ? OP_RC_WRITE_ONLY_IMM : first ? OP_RC_WRITE_FIRST : last ? OP_RC_WRITE_LAST_IMM : OP_RC_WRITE_MIDDLE;
		break;
	}
	return (uint8_t)(base | op);
}

/* Emit the next packet of `w`.  Returns false when the window or the
 * READ/atomic limit says wait. */
static bool send_next_packet(struct uroce_qp *qp, struct uroce_send_wqe *w, struct tx_batch *b,
			     bool force_ackreq)
{
	uint32_t psn = psn_add(w->first_psn, w->next_pkt);
	uint8_t *h = txb_hdr(b);
	bool rc = qp->type == IBV_QPT_RC;

	if (rc && psn_cmp(psn, qp->una_psn) >= (int32_t)qp_window(qp))
		return false;
	if (wqe_is_read(w) || wqe_is_atomic(w)) {
		uint32_t limit = qp->attr.max_rd_atomic ? qp->attr.max_rd_atomic : 1;
		if (qp->rd_atomic_out >= limit)
			return false;
	}
	if (psn_cmp(psn, qp->max_psn) < 0) {
		dev_count(qp->dev, UC_retransmits, 1);
	} else if (rc && !qp->rtt_timing && qp->dev->cfg.rto_min_us) {
		/* time one fresh packet per round trip (never a resent one:
		 * Karn's rule, hence the reset in requester_rewind) */
		qp->rtt_timing = true;
		qp->rtt_psn = psn;
		qp->rtt_start_ns = now_ns();
	}

	if (wqe_is_read(w)) {
		uint32_t chunk = read_chunk_pkts(qp);
		uint32_t end = (w->next_pkt / chunk + 1) * chunk;
		if (end > w->npkts)
			end = w->npkts;
		uint32_t off = w->next_pkt * qp->pmtu;
		uint32_t len = (end == w->npkts ? w->length : end * qp->pmtu) - off;
		bth_set(h, OP_RC_READ_REQUEST, 0, 0, qp->attr.dest_qp_num, 1, psn);
		reth_set(h + BTH_LEN, w->remote_addr + off, w->rkey, len);
		txb_add(b, BTH_LEN + RETH_LEN, NULL, 0, 0, 0);
		qp->rd_atomic_out++;
		w->next_pkt = end;
	} else if (wqe_is_atomic(w)) {
		uint8_t op = w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ? OP_RC_CMP_SWAP : OP_RC_FETCH_ADD;
		bth_set(h, op, 0, 0, qp->attr.dest_qp_num, 1, psn);
		if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP)
			atmeth_set(h + BTH_LEN, w->remote_addr, w->rkey, w->swap, w->compare_add);
		else
			atmeth_set(h + BTH_LEN, w->remote_addr, w->rkey, w->compare_add, 0);
		txb_add(b, BTH_LEN + ATMETH_LEN, NULL, 0, 0, 0);
		qp->rd_atomic_out++;
		w->next_pkt = 1;
	} else {
		uint32_t i = w->next_pkt, n = w->npkts;
		uint8_t op = data_opcode(qp, w, i, n);
		const struct uroce_opinfo *oi = opinfo(op);
		uint32_t off = i * qp->pmtu;
		uint32_t len = (i == n - 1) ? w->length - off : qp->pmtu;
		bool last = i == n - 1;
		/* AckReq: on every last packet (rxe ACKs only what asks, §6.5),
		 * a quarter window after the previous AckReq inside long
		 * messages, and on the packet that fills the window when no
		 * AckReq is outstanding -- otherwise the sender could stop with
		 * nothing left that asks for an ACK.  (Asking on *every*
		 * window-filling packet made a window-limited sender ask on each
		 * small burst: an ACK per 4 packets at 1 MiB.)  Never on UC (§6.7). */
		uint32_t every = qp_window(qp) / 4 + 1;
		bool far = !qp->ackreq_valid || psn_cmp(psn, qp->ackreq_psn) >= (int32_t)every;
		bool asked = qp->ackreq_valid && psn_cmp(qp->ackreq_psn, qp->una_psn) >= 0;
		bool fills = psn_cmp(psn, qp->una_psn) + 1 >= (int32_t)qp_window(qp);
		bool ackreq = rc && (force_ackreq || last || far || (fills && !asked));
		if (ackreq && !force_ackreq) {
			qp->ackreq_valid = true;
			qp->ackreq_psn = psn;
		}
		bool se = last && (w->send_flags & IBV_SEND_SOLICITED);
		bth_set(h, op, se, 0, qp->attr.dest_qp_num, ackreq, psn);
		if (oi->off_reth)
			reth_set(h + oi->off_reth, w->remote_addr, w->rkey, w->length);
		if (oi->off_imm)
			immdt_set_raw(h + oi->off_imm, w->imm_data);
		if (oi->off_ieth)
			ieth_set(h + oi->off_ieth, w->imm_data);
		txb_add(b, oi->hdr_len, w->seg, w->nseg, off, len);
		w->next_pkt++;
	}
	uint32_t next = psn_add(w->first_psn, w->next_pkt);
	if (psn_cmp(next, qp->max_psn) > 0)
		qp->max_psn = next;
	qp->snd_psn = next;
	return true;
}

static uint64_t ack_timeout_ns(const struct uroce_qp *qp)
{
	/* 4.096 us * 2^timeout (§6.6); 0 means no timer */
	return qp->attr.timeout ? 4096ull << qp->attr.timeout : 0;
}

/* The adaptive retransmission timeout: 2 srtt + 4 rttvar, at least
 * UROCE_RTO_MIN_US, doubled per probe without progress; 0 = none.  RFC 6298
 * has 1 srtt, but a reordered packet arrives late by up to about one more
 * round trip, and a probe for it only costs duplicates; the doubled srtt
 * keeps those rare.
 * It is armed only where it can help: on a path whose round trip is not a
 * same-host one (srtt >= RTO_PATH_NS), or for a second after a loss signal.
 * On a loss-free loopback the timer would only ever fire on host stalls, and
 * arming it costs: engine timer wake-ups every 10 ms took ~10% off
 * ib_atomic_bw on this 2-core VM (measured; every 1 ms, 7x on ib_send_lat). */
#define RTO_PATH_NS 500000ull
#define RTO_AFTER_LOSS_NS 1000000000ull

static uint64_t rto_ns(const struct uroce_qp *qp, uint64_t *now)
{
	uint64_t min = (uint64_t)qp->dev->cfg.rto_min_us * 1000;
	if (!min || !qp->srtt_ns)
		return 0;
	if (qp->srtt_ns < RTO_PATH_NS) {
		if (!qp->loss_ns)
			return 0;
		if (!*now)
			*now = now_ns();
		if (*now - qp->loss_ns >= RTO_AFTER_LOSS_NS)
			return 0;
	}
	uint64_t rto = 2 * qp->srtt_ns + 4 * qp->rttvar_ns;
	if (rto < min)
		rto = min;
	return rto << (qp->rto_backoff < 10 ? qp->rto_backoff : 10);
}

void requester_rtt_sample(struct uroce_qp *qp, uint64_t now)
{
	uint64_t r = now - qp->rtt_start_ns;

	qp->rtt_timing = false;
	if (!qp->srtt_ns) {
		qp->srtt_ns = r ? r : 1;
		qp->rttvar_ns = r / 2;
	} else {
		uint64_t dev = qp->srtt_ns > r ? qp->srtt_ns - r : r - qp->srtt_ns;
		qp->rttvar_ns = (3 * qp->rttvar_ns + dev) / 4;
		qp->srtt_ns = (7 * qp->srtt_ns + r) / 8;
		if (!qp->srtt_ns)
			qp->srtt_ns = 1;
	}
}

void requester_arm_timer(struct uroce_qp *qp)
{
	if (qp->rnr_wait || qp->type != IBV_QPT_RC)
		return;
	bool outstanding = psn_cmp(qp->snd_psn, qp->una_psn) > 0 || qp->rd_atomic_out;
	if (!outstanding) {
		qp_timers_off(qp);
		return;
	}
	uint64_t now = 0, t = ack_timeout_ns(qp);
	uint64_t r = qp->rto_deadline ? 0 : rto_ns(qp, &now);
	if ((t && !qp->ack_deadline) || r) {
		if (!now)
			now = now_ns();
		if (t && !qp->ack_deadline)
			qp->ack_deadline = now + t;
		if (r)
			qp->rto_deadline = now + r;
	}
	/* a probe no earlier than the IBA timer is no use */
	if (qp->ack_deadline && qp->rto_deadline >= qp->ack_deadline)
		qp->rto_deadline = 0;
	uint64_t d = qp->ack_deadline;
	if (qp->rto_deadline && (!d || qp->rto_deadline < d))
		d = qp->rto_deadline;
	if (d != qp->timer_deadline)
		qp_arm_timer(qp, d);
}

/* UD (§6.7): one packet per message, no ACKs, the PSN only counts. */
static void ud_send(struct uroce_qp *qp, struct uroce_send_wqe *w, struct tx_batch *b)
{
	struct uroce_dev *dev = qp->dev;

	/* rxe completes a UD message larger than the MTU without sending it
	 * (IBA C10-93.1.1, roce-wire.md §6.7) */
	if (w->length > qp->pmtu || w->sgid_index >= dev->cfg.ngids)
		return;
	/* a batch goes to one destination */
	if (b->n && (memcmp(qp->dgid, w->dgid, 16) || qp->flow != qp->ud_flows[w->sgid_index] ||
		     qp->tx_tos != w->tclass))
		txb_flush(b);
	if (!qp->ud_flows[w->sgid_index]) {
		/* never given an AV: the older rxe source port (§1.4) */
		uint16_t sport = (uint16_t)(0xC000 + (((qp->qpn * 0x61C88647u) >> 18) & 0x3FFF));
		qp->ud_flows[w->sgid_index] = net_flow_open(dev->net, dev->cfg.gids[w->sgid_index], sport, NULL);
		if (!qp->ud_flows[w->sgid_index])
			return;
		qp->sport = sport;
	}
	qp->flow = qp->ud_flows[w->sgid_index];
	memcpy(qp->dgid, w->dgid, 16);
	memcpy(qp->sgid, dev->cfg.gids[w->sgid_index], 16);
	qp->tx_tos = w->tclass;

	uint8_t *h = txb_hdr(b);
	uint8_t op = w->opcode == IBV_WR_SEND_WITH_IMM ? OP_UD_SEND_ONLY_IMM : OP_UD_SEND_ONLY;
	const struct uroce_opinfo *oi = opinfo(op);
	bth_set(h, op, (w->send_flags & IBV_SEND_SOLICITED) != 0, 0, w->remote_qpn, 0, qp->snd_psn);
	deth_set(h + oi->off_deth, w->remote_qkey, qp->qpn);
	if (oi->off_imm)
		immdt_set_raw(h + oi->off_imm, w->imm_data);
	txb_add(b, oi->hdr_len, w->seg, w->nseg, 0, w->length);
	qp->snd_psn = psn_add(qp->snd_psn, 1);
}

void requester_run(struct uroce_qp *qp)
{
	struct tx_batch b;

	if ((qp->attr.qp_state != IBV_QPS_RTS && qp->attr.qp_state != IBV_QPS_SQD) || qp->rnr_wait)
		return;
	if (qp->ack_late_ns && qp->sq_send != qp->sq_head)
		responder_request_follows(qp);
	txb_init(&b, qp);
	while (qp->sq_send != qp->sq_head) {
		struct uroce_send_wqe *w = &qp->sq[qp->sq_send % qp->sq_size];

		if (w->state == WQE_DONE) {  /* already completed (e.g. responses raced a rewind) */
			qp->sq_send++;
			continue;
		}
		if (w->status != IBV_WC_SUCCESS) {
			/* a local error found at post time: completes in order, then
			 * the QP enters the error state (rxe behaviour) */
			if (qp->sq_tail != qp->sq_send)
				break;
			txb_flush(&b);
			qp_complete_send(qp, w, w->status);
			qp_retire_sends(qp);
			qp_enter_error(qp);
			return;
		}
		if (qp->type == IBV_QPT_UD) {
			if (qp->attr.qp_state == IBV_QPS_SQD)
				break;
			ud_send(qp, w, &b);
			w->state = WQE_SENT;
			qp->sq_send++;
			qp_complete_send(qp, w, IBV_WC_SUCCESS);
			continue;
		}
		if (!w->started) {
			if (qp->attr.qp_state == IBV_QPS_SQD)
				break; /* SQD: finish what started, begin nothing new */
			/* IBV_SEND_FENCE: wait for earlier READs/atomics to finish */
			if ((w->send_flags & IBV_SEND_FENCE) && qp->rd_atomic_out)
				break;
			if (qp->type == IBV_QPT_RC && psn_cmp(qp->snd_psn, qp->una_psn) >= (int32_t)qp_window(qp))
				break;
			wqe_start(qp, w);
		}
		while (w->next_pkt < w->npkts) {
			if (!send_next_packet(qp, w, &b, false))
				goto out;
			/* an owed ACK rides behind the request (responder.c,
			 * ack_defer), so the peer has the request before the ACK it
			 * polls for; behind its first packet when the window cuts
			 * the message, as a window takes longer to build than the
			 * ACK may wait (the peer's poll sees a WRITE under way and
			 * hands the rest to its engine: dev_poll_found) */
			if (qp->ack_owed && b.added && qp->type == IBV_QPT_RC &&
			    psn_cmp(psn_add(w->first_psn, w->npkts), psn_add(qp->una_psn, qp_window(qp))) > 0) {
				responder_ack_ride(qp, &b);
				txb_flush(&b);  /* now, not after a batch more of packets */
			}
		}
		w->state = WQE_SENT;
		qp->sq_send++;
		if (qp->type == IBV_QPT_UC) {
			/* UC: complete once sent, no ACKs (§6.7) */
			qp_complete_send(qp, w, IBV_WC_SUCCESS);
		}
	}
out:
	/* b.added, not b.n: a call that ended after a part of a long message
	 * (tx.c) left the batch empty, and the ACK rides all the same */
	if (qp->ack_owed && b.added)
		responder_ack_ride(qp, &b);
	txb_flush(&b);
	if (qp->type == IBV_QPT_UC || qp->type == IBV_QPT_UD)
		qp_retire_sends(qp);
	requester_arm_timer(qp);
}

/* The oldest started, not completed WQE whose PSNs reach `psn` (its slot
 * number in *slot), or NULL. */
static struct uroce_send_wqe *wqe_reaching(struct uroce_qp *qp, uint32_t psn, uint32_t *slot)
{
	for (uint32_t i = qp->sq_tail; i != qp->sq_head; i++) {
		struct uroce_send_wqe *w = &qp->sq[i % qp->sq_size];
		if (!w->started)
			return NULL;
		if (w->state != WQE_DONE && psn_cmp(psn, w->last_psn) <= 0) {
			*slot = i;
			return w;
		}
	}
	return NULL;
}

void requester_rewind(struct uroce_qp *qp, uint32_t psn)
{
	uint32_t i;
	struct uroce_send_wqe *w;

	qp->rtt_timing = false;
	qp->probe_out = false;
	qp->ackreq_valid = false;  /* what is resent asks afresh */
	if ((w = wqe_reaching(qp, psn, &i))) {
		uint32_t k = psn_cmp(psn, w->first_psn) > 0 ? (uint32_t)psn_cmp(psn, w->first_psn) : 0;
		if (wqe_is_read(w)) {
			/* resume at the first response not yet placed */
			uint32_t placed = w->resp_bytes / qp->pmtu;
			if (k < placed)
				k = placed;
		}
		w->next_pkt = k;
		w->state = WQE_POSTED;
		qp->sq_send = i;
		qp->snd_psn = psn_add(w->first_psn, k);
		for (uint32_t j = i + 1; j != qp->sq_head; j++) {
			struct uroce_send_wqe *x = &qp->sq[j % qp->sq_size];
			if (!x->started)
				break;
			if (x->state != WQE_DONE) {
				x->next_pkt = 0;
				x->state = WQE_POSTED;
				if (wqe_is_read(x))
					x->resp_bytes = 0;
			}
		}
		/* READ/atomic requests in flight are asked again */
		qp->rd_atomic_out = 0;
	}
}

/* The probe of the adaptive retransmission timer (completer.c): send the
 * oldest unacknowledged SEND/WRITE packet once more, asking for an ACK, and
 * leave the send position alone.  Returns false when una belongs to a READ
 * or atomic (their retry is a new request: the caller rewinds instead). */
bool requester_probe(struct uroce_qp *qp)
{
	uint32_t slot;
	struct uroce_send_wqe *w = wqe_reaching(qp, qp->una_psn, &slot);

	if (!w || wqe_is_read(w) || wqe_is_atomic(w) || psn_cmp(qp->una_psn, w->first_psn) < 0)
		return false;
	uint32_t saved_next = w->next_pkt, saved_snd = qp->snd_psn;
	struct tx_batch b;
	txb_init(&b, qp);
	w->next_pkt = (uint32_t)psn_cmp(qp->una_psn, w->first_psn);
	bool sent = send_next_packet(qp, w, &b, true);
	txb_flush(&b);
	w->next_pkt = saved_next;
	qp->snd_psn = saved_snd;
	if (sent) {
		qp->probe_psn = qp->una_psn;
		qp->probe_out = true;
	}
	return sent;
}

void requester_retry_from(struct uroce_qp *qp, uint32_t psn, bool timeout)
{
	cwnd_loss(qp, timeout);
	requester_rewind(qp, psn);
}
