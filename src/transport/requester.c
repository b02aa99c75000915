/* Requester: turns the send queue into request packets.
 *
 * PSNs are assigned when a WQE first goes out and never change, so a
 * go-back-N restart (§6.6) only moves sq_send/next_pkt back and resends the
 * same packets.  An RDMA READ is asked for in chunks of READ_CHUNK_BYTES
 * of response packets, each its own READ request at the PSN of its first
 * response (§6.3), so that responses never overrun the receive path and a
 * lost response costs at most one chunk again; each chunk counts against
 * max_rd_atomic.
 *
 * How many packets may be unacknowledged is the QP's congestion window
 * (cc/cc.h, at most UROCE_WINDOW); every loss signal is reported to it. */
#include "transport.h"
#include "../wire/hdr.h"
#include "tx.h"
#include "../core/wake.h"
#include "../core/wr.h"
#include "../mem/mem.h"
#include "../mem/mw.h"
#include "ref.h"
#include <string.h>

/* 128 KiB: the 32 packets of 4,096 bytes it always was; counted in bytes, as
 * the window is (cc.h), since at a path MTU of 1024 32 packets left ib_read_bw
 * 1 MiB between two namespaces at 2.0-2.1 GB/s, 128 gave 3.2 */
#define READ_CHUNK_BYTES (128u << 10)
_Static_assert(TX_HDR_MAX >= BTH_LEN + RETH_LEN + IMMDT_LEN + REF_BYTES(REF_MAX_SEGS), "a span's headers and reference fit");

static uint32_t qp_window(const struct uroce_qp *qp)
{
	return cc_window(&qp->cc);
}

static bool wqe_is_read(const struct uroce_send_wqe *w) { return wr_info(w->opcode)->kind == WRK_READ; }
static bool wqe_is_atomic(const struct uroce_send_wqe *w) { return wr_info(w->opcode)->kind == WRK_ATOMIC; }
/* answered by its own response: READ, atomics, ATOMIC_WRITE (wr.h) */
static bool wqe_is_rd_atomic(const struct uroce_send_wqe *w) { return wr_info(w->opcode)->flags & WRF_RD_ATOMIC; }

static uint32_t read_chunk_pkts(const struct uroce_qp *qp)
{
	uint32_t w = qp->cc.max, c = READ_CHUNK_BYTES / qp->pmtu;
	return w < c ? w : c;
}

/* The pid a reference to w's bytes names (ref.h), or 0 for none: only an
 * RC SEND, WRITE or READ of UROCE_SHM_DIRECT_MIN bytes or more, not
 * inline, on a flow that carries references.  Found once, when the WQE
 * starts: a flow's backend is its for life. */
static pid_t wqe_ref_self(struct uroce_qp *qp, const struct uroce_send_wqe *w)
{
	unsigned kind = wr_info(w->opcode)->kind;
	pid_t self;

	if (w->length < qp->dev->cfg.shm_direct_min || w->inline_data ||
	    (kind != WRK_SEND && kind != WRK_WRITE && kind != WRK_READ))
		return 0;
	return ref_peer(qp, &self) ? self : 0;
}

static void wqe_start(struct uroce_qp *qp, struct uroce_send_wqe *w)
{
	w->npkts = (wqe_is_atomic(w)) ? 1 : (w->length + qp->pmtu - 1) / qp->pmtu;
	if (w->npkts == 0)
		w->npkts = 1;
	/* A new WQE follows every PSN ever sent: after a go-back-N rewind the
	 * WQEs before it may have completed (ACKed) without being resent, which
	 * leaves snd_psn behind; their PSNs must never be reused. */
	qp->req.snd_psn = qp->req.max_psn;
	w->first_psn = qp->req.snd_psn;
	w->last_psn = psn_add(w->first_psn, w->npkts - 1);
	w->next_pkt = 0;
	w->resp_bytes = 0;
	w->ref_asked = false;
	w->ref_self = wqe_ref_self(qp, w);
	w->started = true;
}

/* The local bytes [off, off+len) of a SEND/WRITE WQE as host segments
 * (at most UROCE_MAX_SGE), checked and translated now: every packet, a
 * retransmission too, so a deregistered or re-registered MR is never read
 * (mem.h).  Inline data was copied at post time.  A failed check sets the
 * WQE's status (LOC_PROT_ERR, mem.h's table) and returns false. */
static bool wqe_local_segs(struct uroce_qp *qp, struct uroce_send_wqe *w, uint32_t off, uint32_t len,
			   struct uroce_seg *seg, uint32_t *nseg)
{
	if (w->inline_data) {
		seg[0].addr = w->inline_data + off;
		seg[0].len = len;
		*nseg = len ? 1 : 0;
		return true;
	}
	enum uroce_mem_verdict v = mem_sge_resolve(qp->dev, qp->pd, w->sge, w->nsge, off, len, 0, seg, nseg);
	if (v == MEM_OK)
		return true;
	LOG_DBG("uroce: qp 0x%x WQE 0x%llx: local SGE fails (%s)", qp->qpn, (unsigned long long)w->wr_id,
		mem_verdict_name(v));
	w->status = mem_verdict_local_status(v);
	return false;
}

/* An XRC request names the XRC SRQ of the target's domain that receives
 * it, in the XRCETH after the BTH (§2.2; IBA A14); every XRC request
 * carries one, the packets of a READ or WRITE too. */
static void set_xrceth(const struct uroce_send_wqe *w, uint8_t *h, uint8_t op)
{
	if (opinfo(op)->off_xrceth)
		xrceth_set(h + opinfo(op)->off_xrceth, w->remote_srqn);
}

/* The extension headers after the BTH of a SEND or WRITE packet `op` of
 * `w`: XRCETH, RETH (FIRST, ONLY: the whole message), immediate data or
 * the rkey to invalidate (LAST, ONLY), as the opcode has them (§2.2). */
static void set_message_headers(const struct uroce_send_wqe *w, uint8_t *h, uint8_t op)
{
	const struct uroce_opinfo *oi = opinfo(op);

	set_xrceth(w, h, op);
	if (oi->off_reth)
		reth_set(h + oi->off_reth, w->remote_addr, w->rkey, w->length);
	if (oi->off_imm)
		immdt_set_raw(h + oi->off_imm, w->imm_data);
	if (oi->off_ieth)
		ieth_set(h + oi->off_ieth, w->imm_data);
}

/* The pid the packet of `w` at psn names in a reference, or 0: at a PSN
 * never sent before, while the peer has not refused REF_GIVE_UP of them,
 * and (a READ) while it answers READs by reference. */
static pid_t ref_pid(const struct uroce_qp *qp, const struct uroce_send_wqe *w, uint32_t psn)
{
	if (!w->ref_self || psn_cmp(psn, qp->req.max_psn) < 0 || qp->req.ref_refusals >= REF_GIVE_UP ||
	    (qp->req.no_ref_reads && wqe_is_read(w)))
		return 0;
	return w->ref_self;
}

/* Time one fresh packet per round trip (never a resent one: Karn's rule,
 * hence the reset in requester_rewind). */
static void rtt_start(struct uroce_qp *qp, uint32_t psn)
{
	if (psn_cmp(psn, qp->req.max_psn) < 0) {
		dev_count(qp->dev, UC_retransmits, 1);
	} else if (qp_reliable(qp) && !qp->rtt.timing && qp->dev->cfg.rto_min_us) {
		qp->rtt.timing = true;
		qp->rtt.psn = psn;
		qp->rtt.start_ns = now_ns();
	}
}

/* A span of a SEND or WRITE -- its packets from w->next_pkt on, up to
 * REF_SPAN_BYTES -- as one packet whose payload is a reference to the
 * bytes (ref.h), at psn, asking for an ACK.  1: sent; 0: not to be sent so
 * (more local segments than a reference holds), send packets; -1: its
 * local memory failed the check (w->status says so). */
static int send_span(struct uroce_qp *qp, struct uroce_send_wqe *w, struct tx_batch *b, uint32_t psn, pid_t pid)
{
	const struct uroce_wr_info *info = wr_info(w->opcode);
	uint32_t i = w->next_pkt, n = w->npkts, k = n - i, most = REF_SPAN_BYTES / qp->pmtu;
	struct uroce_seg seg[UROCE_MAX_SGE];
	uint32_t nseg;

	if (k > most)
		k = most;
	bool first = i == 0, last = i + k == n;
	uint32_t off = i * qp->pmtu;
	uint32_t len = (last ? w->length : (i + k) * qp->pmtu) - off;
	if (!wqe_local_segs(qp, w, off, len, seg, &nseg))
		return -1;
	if (!nseg || nseg > REF_MAX_SEGS) {
		w->ref_self = 0;  /* not resolved again for each of its packets */
		return 0;
	}
	uint8_t op = (uint8_t)((first && last ? info->only : first ? info->first : last ? info->last : info->middle) |
			       qp_opcode_base(qp));
	const struct uroce_opinfo *oi = opinfo(op);
	uint8_t *h = txb_hdr(b);
	rtt_start(qp, psn);
	bth_set(h, op, last && (w->send_flags & IBV_SEND_SOLICITED), 0, qp->attr.dest_qp_num, 1, psn);
	set_message_headers(w, h, op);
	uint32_t rl = ref_put(h + oi->hdr_len, pid, seg, nseg);
	txb_add_flags(b, oi->hdr_len + rl, NULL, 0, 0, 0, NET_PKT_REF);
	cc_on_tx(&qp->cc, len);
	/* the span asks for its ACK, which names its last PSN */
	qp->req.ackreq_valid = true;
	qp->req.ackreq_psn = psn_add(psn, k - 1);
	w->next_pkt += k;
	dev_count(qp->dev, UC_ref_tx, 1);
	dev_count(qp->dev, UC_ref_bytes_tx, len);
	return 1;
}

/* Is a READ this QP asked by reference still unanswered?  Its bytes are
 * read when the answer comes, so no later request but a READ goes out
 * before (ref.h). */
static bool ref_read_pending(struct uroce_qp *qp)
{
	for (uint32_t i = qp->sq_tail; i != qp->req.sq_send; i++) {
		const struct uroce_send_wqe *x = &qp->sq[i % qp->sq_size];
		if (x->started && x->ref_asked && x->state != WQE_DONE)
			return true;
	}
	qp->req.ref_reads = false;
	return false;
}

/* Emit the next packet of `w`.  Returns false when the window or the
 * READ/atomic limit says wait, or when its local memory failed the check
 * (then w->status says so and nothing was sent). */
static bool send_next_packet(struct uroce_qp *qp, struct uroce_send_wqe *w, struct tx_batch *b,
			     bool force_ackreq)
{
	uint32_t psn = psn_add(w->first_psn, w->next_pkt);
	uint8_t *h = txb_hdr(b);
	bool rc = qp_reliable(qp);

	if (rc && psn_cmp(psn, qp->comp.una_psn) >= (int32_t)qp_window(qp))
		return false;
	if (wqe_is_rd_atomic(w)) {
		uint32_t limit = qp->attr.max_rd_atomic ? qp->attr.max_rd_atomic : 1;
		if (qp->req.rd_atomic_out >= limit)
			return false;
	}
	pid_t pid = ref_pid(qp, w, psn);
	if (pid && !wqe_is_read(w)) {
		int r = send_span(qp, w, b, psn, pid);
		if (r < 0)
			return false;
		if (r > 0)
			goto sent;
	}
	struct uroce_seg seg[UROCE_MAX_SGE];
	uint32_t nseg = 0;
	if (!wqe_is_read(w) && !wqe_is_atomic(w)) {
		uint32_t off = w->next_pkt * qp->pmtu;
		if (!wqe_local_segs(qp, w, off, w->next_pkt == w->npkts - 1 ? w->length - off : qp->pmtu, seg, &nseg))
			return false;
	}
	rtt_start(qp, psn);

	if (wqe_is_read(w)) {
		uint32_t chunk = read_chunk_pkts(qp);
		uint32_t end = (w->next_pkt / chunk + 1) * chunk;
		uint8_t flags = 0;
		if (end > w->npkts)
			end = w->npkts;
		if (pid && w->next_pkt == 0) {
			w->ref_asked = true;
			qp->req.ref_reads = true;
		}
		if (w->ref_asked) {
			/* asked in spans of up to REF_SPAN_BYTES, for an answer by
			 * reference (ref.h; completer.c expects it so) -- and so
			 * when asked again, whatever the flow carries now: a
			 * responder answers a request again only within the one
			 * it executed (§6.4, handle_duplicate), and its answer
			 * runs to that one's end */
			end = ref_read_end(qp->pmtu, w->npkts, w->next_pkt);
			if (pid)
				flags = NET_PKT_REF_OK;
		}
		uint32_t off = w->next_pkt * qp->pmtu;
		uint32_t len = (end == w->npkts ? w->length : end * qp->pmtu) - off;
		uint8_t op = OP_RC_READ_REQUEST | qp_opcode_base(qp);
		bth_set(h, op, 0, 0, qp->attr.dest_qp_num, 1, psn);
		set_xrceth(w, h, op);
		reth_set(h + opinfo(op)->off_reth, w->remote_addr + off, w->rkey, len);
		txb_add_flags(b, opinfo(op)->hdr_len, NULL, 0, 0, 0, flags);
		cc_on_tx(&qp->cc, 0);
		qp->req.rd_atomic_out++;
		w->next_pkt = end;
	} else if (wqe_is_atomic(w)) {
		uint8_t op = wr_info(w->opcode)->only | qp_opcode_base(qp);
		uint8_t *ae = h + opinfo(op)->off_atmeth;
		bth_set(h, op, 0, 0, qp->attr.dest_qp_num, 1, psn);
		set_xrceth(w, h, op);
		if (wr_info(w->opcode)->only == OP_RC_CMP_SWAP)
			atmeth_set(ae, w->remote_addr, w->rkey, w->swap, w->compare_add);
		else
			atmeth_set(ae, w->remote_addr, w->rkey, w->compare_add, 0);
		txb_add(b, opinfo(op)->hdr_len, NULL, 0, 0, 0);
		cc_on_tx(&qp->cc, 0);
		qp->req.rd_atomic_out++;
		w->next_pkt = 1;
	} else {
		uint32_t i = w->next_pkt, n = w->npkts;
		uint8_t op = wr_packet_opcode(wr_info(w->opcode), i, n, false) | qp_opcode_base(qp);
		const struct uroce_opinfo *oi = opinfo(op);
		uint32_t off = i * qp->pmtu;
		uint32_t len = (i == n - 1) ? w->length - off : qp->pmtu;
		bool last = i == n - 1;
		/* AckReq: on every last packet (rxe ACKs only what asks, §6.5),
		 * a quarter window after the previous AckReq inside long
		 * messages, and on the packet that fills the window when no
		 * AckReq is outstanding -- otherwise the sender could stop with
		 * nothing left that asks for an ACK.  (Only then: asking on
		 * *every* window-filling packet would make a window-limited
		 * sender ask on each small burst.)  Never on UC (§6.7). */
		uint32_t every = qp_window(qp) / 4 + 1;
		bool far = !qp->req.ackreq_valid || psn_cmp(psn, qp->req.ackreq_psn) >= (int32_t)every;
		bool asked = qp->req.ackreq_valid && psn_cmp(qp->req.ackreq_psn, qp->comp.una_psn) >= 0;
		bool fills = psn_cmp(psn, qp->comp.una_psn) + 1 >= (int32_t)qp_window(qp);
		bool ackreq = rc && (force_ackreq || last || far || (fills && !asked));
		if (ackreq && !force_ackreq) {
			qp->req.ackreq_valid = true;
			qp->req.ackreq_psn = psn;
		}
		bool se = last && (w->send_flags & IBV_SEND_SOLICITED);
		bth_set(h, op, se, 0, qp->attr.dest_qp_num, ackreq, psn);
		set_message_headers(w, h, op);
		txb_add(b, oi->hdr_len, seg, nseg, 0, len);
		cc_on_tx(&qp->cc, len);
		/* an ATOMIC_WRITE (one packet: RETH and its 8 bytes) is answered
		 * by an empty READ response, like a READ (roce-wire.md §3) */
		if (wqe_is_rd_atomic(w))
			qp->req.rd_atomic_out++;
		w->next_pkt++;
	}
sent:;
	uint32_t next = psn_add(w->first_psn, w->next_pkt);
	if (psn_cmp(next, qp->req.max_psn) > 0)
		qp->req.max_psn = next;
	qp->req.snd_psn = next;
	return true;
}

/* A new or reset QP's requester: nothing sent.  Under qp->lock. */
void requester_reset(struct uroce_qp *qp)
{
	memset(&qp->req, 0, sizeof(qp->req));
}

void requester_run(struct uroce_qp *qp)
{
	TXB_ON_STACK(b, UROCE_TX_BATCH);
	bool local_done = false;

	qp->req.corked = 0;  /* what posts held back (sq/post.c) goes now, or when the window, an RNR wait or the state lets it */
	if ((qp->attr.qp_state != IBV_QPS_RTS && qp->attr.qp_state != IBV_QPS_SQD) || qp->comp.rnr_wait)
		return;
	if (qp->ack.late_ns && qp->req.sq_send != qp->sq_head)
		ack_request_follows(qp);
	txb_init(&b, qp);
	while (qp->req.sq_send != qp->sq_head) {
		struct uroce_send_wqe *w = &qp->sq[qp->req.sq_send % qp->sq_size];

		if (w->state == WQE_DONE) {  /* already completed (e.g. responses raced a rewind) */
			qp->req.sq_send++;
			continue;
		}
		if (w->status != IBV_WC_SUCCESS) {
			/* a local error found at post time, or when the WQE
			 * executed (its memory failed the check: wqe_local_segs):
			 * completes in order, then the QP enters the error state
			 * (rxe, mlx5).  What this run completed before it (UC, UD)
			 * is retired first, so it is at the head if nothing older
			 * is outstanding. */
			txb_flush(&b);
			qp_retire_sends(qp);
			if (qp->attr.qp_state == IBV_QPS_ERR)
				return;
			if (qp->sq_tail != qp->req.sq_send)
				break;
			qp_complete_send(qp, w, w->status);
			qp_retire_sends(qp);
			qp_enter_error(qp);
			return;
		}
		if (qp->type == IBV_QPT_UD) {
			if (qp->attr.qp_state == IBV_QPS_SQD)
				break;
			struct uroce_seg seg[UROCE_MAX_SGE];
			uint32_t nseg;
			if (!wqe_local_segs(qp, w, 0, w->length, seg, &nseg))
				continue;  /* completes with its status above */
			ud_send(qp, w, &b, seg, nseg);
			w->state = WQE_SENT;
			qp->req.sq_send++;
			qp_complete_send(qp, w, IBV_WC_SUCCESS);
			continue;
		}
		if (!w->started && wr_info(w->opcode)->kind == WRK_LOCAL) {
			if (qp->attr.qp_state == IBV_QPS_SQD)
				break;
			/* a memory-window operation runs here, in send-queue order,
			 * with no packet (rxe_do_local_ops); a refused one completes
			 * with its error at the head, then the QP enters ERR */
			w->status = mw_local_op(qp, w);
			if (w->status != IBV_WC_SUCCESS)
				continue;
			w->started = true;
			qp->req.sq_send++;
			qp_complete_send(qp, w, IBV_WC_SUCCESS);
			local_done = true;
			continue;
		}
		if (!w->started) {
			if (qp->attr.qp_state == IBV_QPS_SQD)
				break; /* SQD: finish what started, begin nothing new */
			/* IBV_SEND_FENCE: wait for earlier READs/atomics to finish */
			if ((w->send_flags & IBV_SEND_FENCE) && qp->req.rd_atomic_out)
				break;
			if (qp->req.ref_reads && !wqe_is_read(w) && ref_read_pending(qp))
				break;
			if (qp_reliable(qp) && psn_cmp(qp->req.snd_psn, qp->comp.una_psn) >= (int32_t)qp_window(qp))
				break;
			wqe_start(qp, w);
		}
		bool failed = false;
		while (w->next_pkt < w->npkts) {
			if (!send_next_packet(qp, w, &b, false)) {
				if (w->status == IBV_WC_SUCCESS)
					goto out;
				failed = true;  /* its memory failed the check */
				break;
			}
			/* an owed ACK rides behind the request (ack.c,
			 * ack_defer), so the peer has the request before the ACK it
			 * polls for; behind its first packet when the window cuts
			 * the message, as a window takes longer to build than the
			 * ACK may wait (the peer's poll sees a WRITE under way and
			 * hands the rest to its engine: exec_poll_found) */
			if (qp->ack.owed && b.added && qp_reliable(qp) &&
			    psn_cmp(psn_add(w->first_psn, w->npkts), psn_add(qp->comp.una_psn, qp_window(qp))) > 0) {
				ack_ride(qp, &b);
				txb_flush(&b);  /* now, not after a batch more of packets */
			}
		}
		if (failed)
			continue;  /* completes with its status above */
		w->state = WQE_SENT;
		qp->req.sq_send++;
		if (qp->type == IBV_QPT_UC) {
			/* UC: complete once sent, no ACKs (§6.7) */
			qp_complete_send(qp, w, IBV_WC_SUCCESS);
		}
	}
out:
	/* b.added, not b.n: a call that ended after a part of a long message
	 * (tx.c) left the batch empty, and the ACK rides all the same */
	if (qp->ack.owed && b.added)
		ack_ride(qp, &b);
	txb_flush(&b);
	if (qp->type == IBV_QPT_UC || qp->type == IBV_QPT_UD || local_done)
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

	qp->rtt.timing = false;
	qp->req.probe_out = false;
	qp->req.ackreq_valid = false;  /* what is resent asks afresh */
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
		qp->req.sq_send = i;
		qp->req.snd_psn = psn_add(w->first_psn, k);
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
		qp->req.rd_atomic_out = 0;
	}
}

/* The probe of the adaptive retransmission timer (retry.c): send the
 * oldest unacknowledged SEND/WRITE packet once more, asking for an ACK, and
 * leave the send position alone.  Returns false when una belongs to a READ
 * or atomic or ATOMIC_WRITE (their retry is a new request: the caller rewinds instead). */
bool requester_probe(struct uroce_qp *qp)
{
	uint32_t slot;
	struct uroce_send_wqe *w = wqe_reaching(qp, qp->comp.una_psn, &slot);

	if (!w || wqe_is_rd_atomic(w) || psn_cmp(qp->comp.una_psn, w->first_psn) < 0)
		return false;
	uint32_t saved_next = w->next_pkt, saved_snd = qp->req.snd_psn;
	TXB_ON_STACK(b, 1);
	txb_init(&b, qp);
	w->next_pkt = (uint32_t)psn_cmp(qp->comp.una_psn, w->first_psn);
	bool sent = send_next_packet(qp, w, &b, true);
	txb_flush(&b);
	w->next_pkt = saved_next;
	qp->req.snd_psn = saved_snd;
	if (sent) {
		qp->req.probe_psn = qp->comp.una_psn;
		qp->req.probe_out = true;
	}
	return sent;
}

void requester_retry_from(struct uroce_qp *qp, uint32_t psn, bool timeout)
{
	/* the adaptive timer stays armed for a while after a loss (rtt.c) */
	qp->rtt.loss_ns = now_ns();
	cc_on_loss(&qp->cc, timeout);
	requester_rewind(qp, psn);
}
