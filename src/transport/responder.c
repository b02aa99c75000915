/* Responder: executes requests against memory and the receive queue and
 * answers with ACK / NAK / READ responses / atomic ACKs (§5, §6.2-§6.5).
 * Every check has a named verdict, mapped to a NAK in one place (nak_for). */
#include <string.h>
#include "transport.h"
#include "../wire/hdr.h"
#include "tx.h"
#include "../core/async.h"
#include "../core/cq_ring.h"
#include "../core/place.h"
#include "../mem/mem.h"
#include "../mem/mw.h"
#include "ref.h"

enum resp_verdict {
	RV_OK,
	RV_INV_REQ,      /* NAK 0x61: bad opcode sequence, length, op not enabled */
	RV_ACCESS,       /* NAK 0x62: R_Key, bounds or permission */
	RV_OP_ERR,       /* NAK 0x63: local failure (bad receive WQE) */
	RV_RNR,          /* RNR NAK: no receive WQE */
	RV_UNREAD,       /* a reference whose bytes could not be read: go back to its PSN (ref.h) */
};

/* A failed memory check (never MEM_OK) answers the NAK mem/'s verdict
 * table gives (§5.3); a row without a NAK of its own is an access error. */
static enum resp_verdict verdict_of_nak(uint8_t syndrome)
{
	switch (syndrome) {
	case AETH_NAK_INV_REQ: return RV_INV_REQ;
	case AETH_NAK_REM_OP: return RV_OP_ERR;
	default: return RV_ACCESS;
	}
}

/* The PD a request's memory is checked against: the QP's, or for an XRC
 * TGT QP (which has none) the PD of the XRC SRQ the request names (IBA
 * A14; the rxe XRC series does the same). */
static struct uroce_pd *resp_pd(const struct uroce_qp *qp)
{
	return qp->resp.xrc_srq ? to_upd(qp->resp.xrc_srq->ibv.pd) : qp->pd;
}

/* ... for an rkey in a request */
static enum resp_verdict verdict_of_mem(enum uroce_mem_verdict mv)
{
	return verdict_of_nak(mem_verdict_nak(mv));
}

/* A message was accepted: the MSN its ACKs carry counts it (§5.4). */
static void msn_next(struct uroce_qp *qp)
{
	qp->resp.msn = (qp->resp.msn + 1) & 0xFFFFFF;
}

/* A new or reset QP's responder: no message under way.  Under qp->lock or
 * before publication. */
void responder_reset(struct uroce_qp *qp)
{
	qp->resp.epsn = 0;
	qp->resp.msn = 0;
	qp->resp.nak_sent = false;
	qp->resp.in_send = false;
	qp_set_in_write(qp, false);
	qp->resp.cur_recv_valid = false;
	qp->resp.xrc_srq = NULL;
	if (qp->resp.res)
		memset(qp->resp.res, 0, qp->resp.res_size * sizeof(*qp->resp.res));
	qp->resp.res_next = 0;
}

/* NAK codes 1-3 put the responder's QP in the error state too (§5.3). */
static void nak_for(struct uroce_qp *qp, enum resp_verdict v, uint32_t psn)
{
	switch (v) {
	case RV_RNR:
		dev_count(qp->dev, UC_rnr_naks_tx, 1);
		ack_send_aeth(qp, OP_RC_ACK | qp_opcode_base(qp), (uint8_t)(AETH_RNR_NAK | (qp->attr.min_rnr_timer & 0x1F)), psn);
		return;
	case RV_INV_REQ:
		dev_count(qp->dev, UC_inv_req_naks_tx, 1);
		ack_send_aeth(qp, OP_RC_ACK | qp_opcode_base(qp), AETH_NAK_INV_REQ, psn);
		break;
	case RV_ACCESS:
		dev_count(qp->dev, UC_access_naks_tx, 1);
		ack_send_aeth(qp, OP_RC_ACK | qp_opcode_base(qp), AETH_NAK_REM_ACCESS, psn);
		break;
	case RV_OP_ERR:
		dev_count(qp->dev, UC_op_naks_tx, 1);
		ack_send_aeth(qp, OP_RC_ACK | qp_opcode_base(qp), AETH_NAK_REM_OP, psn);
		break;
	case RV_OK:
	case RV_UNREAD:  /* responder_rx: a sequence NAK */
		return;
	}
	if (qp_reliable(qp)) {
		qp_enter_error(qp);
		qp_post_async_event(qp, IBV_EVENT_QP_FATAL);
	}
}

static void complete_recv(struct uroce_qp *qp, enum ibv_wc_status st, enum ibv_wc_opcode op,
			  uint32_t byte_len, struct uroce_pkt *pkt, bool solicited)
{
	struct ibv_wc wc = {
		.wr_id = qp->resp.cur_recv.wr_id, .status = st, .opcode = op, .byte_len = byte_len,
		.qp_num = qp->qpn, .src_qp = qp->attr.dest_qp_num,
	};
	if (pkt && (pkt->mask & OPF_IMMDT)) {
		wc.imm_data = immdt_raw(pkt->bth + opinfo(pkt->opcode)->off_imm);
		wc.wc_flags |= IBV_WC_WITH_IMM;
	} else if (pkt && (pkt->mask & OPF_IETH)) {
		wc.invalidated_rkey = ieth_rkey(pkt->bth + opinfo(pkt->opcode)->off_ieth);
		wc.wc_flags |= IBV_WC_WITH_INV;
	}
	qp->resp.cur_recv_valid = false;
	/* an XRC receive completes to its SRQ's CQ (IBA A14) */
	qp_cq_push(qp, qp->resp.xrc_srq ? qp->resp.xrc_srq->cq : qp->recv_cq, &wc, solicited);
}

/* Length rules per packet position (§7): FIRST/MIDDLE exactly PMTU, LAST
 * 1..PMTU, ONLY 0..PMTU; a reference's span, per packet it stands for
 * (ref_span_pkts), which *npsn receives. */
static bool length_ok(struct uroce_qp *qp, struct uroce_pkt *pkt, uint32_t *npsn)
{
	uint32_t m = pkt->mask & (OPF_FIRST | OPF_MIDDLE | OPF_LAST);
	if (pkt->ref)
		return (*npsn = ref_span_pkts(pkt->paylen, qp->pmtu, (m & OPF_LAST) != 0)) != 0;
	if (m == OPF_FIRST || m == OPF_MIDDLE)
		return pkt->paylen == qp->pmtu;
	if (m == OPF_LAST)
		return pkt->paylen >= 1 && pkt->paylen <= qp->pmtu;
	return pkt->paylen <= qp->pmtu;
}

static enum resp_verdict do_send(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	if (pkt->mask & OPF_FIRST) {
		/* a UC message cut by a PSN gap (§6.7) left its receive WQE
		 * unfinished: the next message takes that WQE, as rxe's does,
		 * instead of consuming another and losing this one */
		if (!qp->resp.cur_recv_valid) {
			if (qp_rq_pop(qp, &qp->resp.cur_recv) < 0)
				return RV_RNR;
			qp->resp.cur_recv_valid = true;
		}
		qp->resp.recv_off = 0;
	}
	if (!qp->resp.cur_recv_valid)
		return RV_INV_REQ;
	if ((uint64_t)qp->resp.recv_off + pkt->paylen > qp->resp.cur_recv.length) {
		/* receive buffer too small: LOC_LEN_ERR here, and the requester
		 * gets an invalid request NAK (rxe) */
		complete_recv(qp, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0, NULL, false);
		return RV_INV_REQ;
	}
	/* the receive WQE's memory is checked as each packet lands (mem.h):
	 * an lkey that fails -- a bad one, or an MR deregistered or
	 * re-registered since posting -- completes the receive in error and
	 * NAKs the requester, both as mem.h's table says; nothing is placed */
	struct uroce_seg seg[UROCE_MAX_SGE];
	uint32_t nseg, nsge = qp->resp.cur_recv.nsge;
	enum uroce_mem_verdict mv = mem_sge_resolve(qp->dev, qp_recv_pd(qp), qp->resp.cur_recv.sge,
						    nsge < UROCE_MAX_SGE ? nsge : UROCE_MAX_SGE, qp->resp.recv_off,
						    pkt->paylen, IBV_ACCESS_LOCAL_WRITE, seg, &nseg);
	if (mv == MEM_OK && !pkt_place(qp->dev, pkt, seg, nseg))
		return RV_UNREAD;
	if (mv != MEM_OK) {
		LOG_DBG("uroce: qp 0x%x receive WQE 0x%llx: SGE fails (%s)", qp->qpn,
			(unsigned long long)qp->resp.cur_recv.wr_id, mem_verdict_name(mv));
		complete_recv(qp, mem_verdict_local_status(mv), IBV_WC_RECV, 0, NULL, false);
		return verdict_of_nak(mem_verdict_recv_nak(mv));
	}
	qp->resp.recv_off += pkt->paylen;
	qp->resp.in_send = !(pkt->mask & OPF_LAST);
	if (pkt->mask & OPF_LAST) {
		/* SEND_WITH_INVALIDATE: the IETH's window is revoked as the
		 * message completes; one this QP may not invalidate is a class J
		 * error -- rxe completes the receive REM_INV_REQ_ERR and the QP
		 * enters ERR; the requester is told by an invalid request NAK */
		if ((pkt->mask & OPF_IETH) &&
		    !mw_invalidate_remote(qp, resp_pd(qp), ieth_rkey(pkt->bth + opinfo(pkt->opcode)->off_ieth))) {
			complete_recv(qp, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, 0, NULL, false);
			return RV_INV_REQ;
		}
		complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV, qp->resp.recv_off, pkt, bth_se(pkt->bth));
		msn_next(qp);
	}
	return RV_OK;
}

static enum resp_verdict do_write(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	struct uroce_mr *mr;
	enum uroce_mem_verdict mv;

	if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE))
		return RV_INV_REQ;
	if (pkt->mask & OPF_FIRST) {
		const uint8_t *reth = pkt->bth + opinfo(pkt->opcode)->off_reth;
		qp->resp.write_va = reth_va(reth);
		qp->resp.write_rkey = reth_rkey(reth);
		qp->resp.write_left = reth_len(reth);
		/* zero-length writes touch no memory: no key check (IBA 9.4.3) */
		if (qp->resp.write_left &&
		    (mv = rkey_check_remote(qp, resp_pd(qp), qp->resp.write_rkey, qp->resp.write_va, qp->resp.write_left,
				    IBV_ACCESS_REMOTE_WRITE | MEM_CHECK_NO_PROBE, &mr)) != MEM_OK)
			return verdict_of_mem(mv);
		qp->resp.recv_off = 0;
	}
	/* (a MIDDLE or LAST with no WRITE under way was refused by
	 * responder_rx's opcode sequence check) */
	if (pkt->paylen > qp->resp.write_left || ((pkt->mask & OPF_LAST) && pkt->paylen != qp->resp.write_left))
		return RV_INV_REQ; /* more or fewer bytes than the RETH said (§7) */
	/* a WRITE with immediate needs a receive WQE: check before placing */
	if ((pkt->mask & OPF_LAST) && (pkt->mask & OPF_IMMDT) && !qp->resp.cur_recv_valid) {
		if (qp_rq_pop(qp, &qp->resp.cur_recv) < 0)
			return RV_RNR;
		qp->resp.cur_recv_valid = true;
	}
	if (pkt->paylen) {
		/* re-resolve per packet: no MR pointer is kept across packets */
		if ((mv = rkey_check_remote(qp, resp_pd(qp), qp->resp.write_rkey, qp->resp.write_va, pkt->paylen,
				    IBV_ACCESS_REMOTE_WRITE, &mr)) != MEM_OK)
			return verdict_of_mem(mv);
		struct uroce_seg seg = { mr_host(mr, qp->resp.write_va), pkt->paylen };
		if (!pkt_place(qp->dev, pkt, &seg, 1))
			return RV_UNREAD;
	}
	qp->resp.write_va += pkt->paylen;
	qp->resp.write_left -= pkt->paylen;
	qp->resp.recv_off += pkt->paylen;
	/* A WRITE is under way once a packet of it is taken, not before: a
	 * FIRST refused without error (an ONLY with immediate finding no
	 * receive WQE: RNR NAK; a reference not read) leaves none, so the
	 * WRITE sent again from its start is not met as one "under way" and
	 * NAKed as an invalid request (as do_send's in_send) */
	qp_set_in_write(qp, !(pkt->mask & OPF_LAST));
	if (pkt->mask & OPF_LAST) {
		msn_next(qp);
		if (pkt->mask & OPF_IMMDT)
			complete_recv(qp, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, qp->resp.recv_off, pkt, bth_se(pkt->bth));
	}
	return RV_OK;
}

static struct uroce_rd_res *res_alloc(struct uroce_qp *qp)
{
	struct uroce_rd_res *r = &qp->resp.res[qp->resp.res_next];
	qp->resp.res_next = (qp->resp.res_next + 1) % qp->resp.res_size;
	memset(r, 0, sizeof(*r));
	r->valid = true;
	return r;
}

/* Send READ response packets [from_psn .. last] of resource r.  A requester
 * that takes an answer by reference (by_ref: NET_PKT_REF_OK) gets, on a flow
 * that carries them, one READ_RESPONSE_ONLY standing for them all, whose
 * payload names the bytes in this process's memory (ref.h). */
static void send_read_responses(struct uroce_qp *qp, const struct uroce_rd_res *r, uint32_t from_psn, bool by_ref)
{
	TXB_ON_STACK(b, UROCE_TX_BATCH);
	struct uroce_mr *mr = NULL;
	uint32_t n = r->last_psn == r->first_psn ? 1 : (uint32_t)psn_cmp(r->last_psn, r->first_psn) + 1;
	uint32_t i0 = (uint32_t)psn_cmp(from_psn, r->first_psn);
	pid_t self;

	if (r->length && rkey_check_remote(qp, resp_pd(qp), r->rkey, r->va, r->length, IBV_ACCESS_REMOTE_READ, &mr) != MEM_OK)
		return; /* the region went away since: let the requester time out */
	struct uroce_seg seg = { mr ? mr_host(mr, r->va) : NULL, r->length };
	bool ref = by_ref && r->length && !i0 && r->length <= REF_SPAN_BYTES && ref_peer(qp, &self);
	ack_flush_owed(qp);
	txb_init(&b, qp);
	for (uint32_t i = i0; i < n; i++) {
		uint8_t *h = txb_hdr(&b);
		uint8_t op;
		/* a replay starting mid-message continues with MIDDLE/LAST (§6.4) */
		if (n == 1 || ref)
			op = OP_RC_READ_RESP_ONLY;
		else if (i == 0)
			op = OP_RC_READ_RESP_FIRST;
		else if (i == n - 1)
			op = OP_RC_READ_RESP_LAST;
		else
			op = OP_RC_READ_RESP_MIDDLE;
		uint32_t off = i * qp->pmtu;
		uint32_t len = (i == n - 1) ? r->length - off : qp->pmtu;
		op |= qp_opcode_base(qp);  /* XRC responses: 0xAD.., no XRCETH (§2.2) */
		bth_set(h, op, 0, 0, qp->attr.dest_qp_num, 0, psn_add(r->first_psn, i));
		uint32_t hl = BTH_LEN;
		if (opinfo(op)->mask & OPF_AETH) {
			aeth_set(h + BTH_LEN, AETH_ACK_UNLIMITED, qp->resp.msn);
			hl += AETH_LEN;
		}
		if (ref) {
			txb_add_flags(&b, hl + ref_put(h + hl, self, &seg, 1), NULL, 0, 0, 0, NET_PKT_REF);
			dev_count(qp->dev, UC_ref_tx, 1);
			dev_count(qp->dev, UC_ref_bytes_tx, r->length);
			break;
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
	enum uroce_mem_verdict mv;

	if (!(qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_READ) || qp->attr.max_dest_rd_atomic == 0)
		return RV_INV_REQ;
	if (len > UROCE_MAX_MSG)
		return RV_INV_REQ;
	if (len && (mv = rkey_check_remote(qp, resp_pd(qp), rkey, va, len, IBV_ACCESS_REMOTE_READ, &mr)) != MEM_OK)
		return verdict_of_mem(mv);
	uint32_t n = len ? (len + qp->pmtu - 1) / qp->pmtu : 1;
	struct uroce_rd_res *r = res_alloc(qp);
	r->first_psn = pkt->psn;
	r->last_psn = psn_add(pkt->psn, n - 1);
	r->va = va;
	r->rkey = rkey;
	r->length = len;
	msn_next(qp); /* +1 when a READ is accepted (§5.4) */
	send_read_responses(qp, r, r->first_psn, pkt->rx->flags & NET_PKT_REF_OK);
	*npsn = n;
	return RV_OK;
}

static void send_atomic_ack(struct uroce_qp *qp, uint32_t psn, uint64_t orig)
{
	TXB_ON_STACK(b, 1);
	uint8_t *h;

	ack_flush_owed(qp);
	txb_init(&b, qp);
	h = txb_hdr(&b);
	bth_set(h, OP_RC_ATOMIC_ACK | qp_opcode_base(qp), 0, 0, qp->attr.dest_qp_num, 0, psn);
	aeth_set(h + BTH_LEN, AETH_ACK_UNLIMITED, qp->resp.msn);
	atmack_set(h + BTH_LEN + AETH_LEN, orig);
	txb_add(&b, BTH_LEN + AETH_LEN + ATMACK_LEN, NULL, 0, 0, 0);
	txb_flush(&b);
}

/* The 8 bytes an atomic or ATOMIC_WRITE works on: the QP must allow
 * `access` and have responder resources, the address be 8-aligned (a
 * misaligned atomic is an invalid request, §5.3), the R_Key grant it. */
static enum resp_verdict atomic_target(struct uroce_qp *qp, unsigned access, uint32_t rkey, uint64_t va,
				       uint64_t **target)
{
	struct uroce_mr *mr;
	enum uroce_mem_verdict mv;

	if (!(qp->attr.qp_access_flags & access) || qp->attr.max_dest_rd_atomic == 0)
		return RV_INV_REQ;
	if (va & 7)
		return RV_INV_REQ; /* misaligned atomic (§5.3) */
	if ((mv = rkey_check_remote(qp, resp_pd(qp), rkey, va, 8, access, &mr)) != MEM_OK)
		return verdict_of_mem(mv);
	*target = (uint64_t *)(void *)mr_host(mr, va);
	if ((uintptr_t)*target & 7)
		return RV_INV_REQ; /* host address not 8-aligned (zero-based MR) */
	return RV_OK;
}

static enum resp_verdict do_atomic(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const uint8_t *ae = pkt->bth + opinfo(pkt->opcode)->off_atmeth;
	uint64_t *target, orig;
	enum resp_verdict v = atomic_target(qp, IBV_ACCESS_REMOTE_ATOMIC, atmeth_rkey(ae), atmeth_va(ae), &target);

	if (v != RV_OK)
		return v;
	/* atomic with respect to other atomics and the CPU's own */
	if ((pkt->opcode & 0x1F) == OP_RC_CMP_SWAP) {  /* RC's or XRC's (§3) */
		orig = atmeth_compare(ae);
		__atomic_compare_exchange_n(target, &orig, atmeth_swap_add(ae), false, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
	} else {
		orig = __atomic_fetch_add(target, atmeth_swap_add(ae), __ATOMIC_SEQ_CST);
	}
	struct uroce_rd_res *r = res_alloc(qp);
	r->atomic = true;
	r->first_psn = r->last_psn = pkt->psn;
	r->orig = orig;
	msn_next(qp);
	send_atomic_ack(qp, pkt->psn, orig);
	return RV_OK;
}

/* ATOMIC_WRITE (0x1D, roce-wire.md §3): the RETH names 8 bytes, the payload
 * carries them, and they land in one 8-byte store, so no reader sees half
 * of them.  Checked as rxe does (rxe_resp.c): the QP's and the MR's remote
 * write access, an 8-aligned address (else an invalid request, as a
 * misaligned atomic), a responder resource like READ's; answered by an
 * RDMA_READ_RESPONSE_ONLY without payload, saved for a duplicate's replay
 * (§6.4).  The kernel's rxe of 6.1 does not have it (6.2 added it). */
static enum resp_verdict do_atomic_write(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const uint8_t *reth = pkt->bth + opinfo(pkt->opcode)->off_reth;
	uint64_t *target;
	enum resp_verdict v;

	if (pkt->paylen != 8 || reth_len(reth) != 8)
		return RV_INV_REQ;
	if ((v = atomic_target(qp, IBV_ACCESS_REMOTE_WRITE, reth_rkey(reth), reth_va(reth), &target)) != RV_OK)
		return v;
	uint64_t val;
	memcpy(&val, pkt->payload, 8);  /* the bytes as sent: no byte order is implied */
	__atomic_store_n(target, val, __ATOMIC_RELEASE);
	struct uroce_rd_res *r = res_alloc(qp);
	r->atomic_write = true;
	r->first_psn = r->last_psn = pkt->psn;
	msn_next(qp);
	send_read_responses(qp, r, pkt->psn, false);  /* length 0: one empty READ_RESPONSE_ONLY */
	return RV_OK;
}

/* §6.4: duplicates are answered, never executed twice (READs excepted,
 * which are re-read from memory). */
static void handle_duplicate(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	dev_count(qp->dev, UC_duplicates, 1);
	if (pkt->mask & (OPF_SEND | OPF_WRITE)) {
		ack_owe(qp, psn_add(qp->resp.epsn, PSN_MASK), false); /* ePSN - 1; a retry is answered at once */
		return;
	}
	for (uint32_t i = 0; i < qp->resp.res_size; i++) {
		struct uroce_rd_res *r = &qp->resp.res[i];
		if (!r->valid || psn_cmp(pkt->psn, r->first_psn) < 0 || psn_cmp(pkt->psn, r->last_psn) > 0)
			continue;
		if (pkt->mask & OPF_ATOMIC) {
			if (r->atomic && r->first_psn == pkt->psn)
				send_atomic_ack(qp, r->first_psn, r->orig);
			return;
		}
		if (pkt->mask & OPF_ATOMIC_WRITE) {
			/* answered again, not written again */
			if (r->atomic_write && r->first_psn == pkt->psn)
				send_read_responses(qp, r, pkt->psn, false);
			return;
		}
		if (r->atomic || r->atomic_write)
			return;
		/* the retried READ must lie within the original (§6.4) */
		const uint8_t *reth = pkt->bth + opinfo(pkt->opcode)->off_reth;
		uint32_t k = (uint32_t)psn_cmp(pkt->psn, r->first_psn);
		uint64_t off = (uint64_t)k * qp->pmtu;
		if (reth_rkey(reth) != r->rkey || reth_va(reth) != r->va + off || off + reth_len(reth) > r->length)
			return;
		send_read_responses(qp, r, pkt->psn, false);
		return;
	}
}

/* An XRC TGT QP receives into the XRC SRQ the request's XRCETH names,
 * which must exist and belong to the TGT QP's XRC domain (IBA A14: the
 * XRC domain check).  One that does not is an XRC domain violation, which
 * uroce answers as a remote access error: NAK 0x62, the TGT QP to ERR
 * (rxe has no XRC; the rxe XRC series drops such packets instead).  The
 * lookup is a lock-free table read: SRQs are unpublished under rx_lock,
 * which the caller holds. */
static bool xrc_pick_srq(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	uint32_t srqn = xrceth_srqn(pkt->bth + opinfo(pkt->opcode)->off_xrceth);
	struct uroce_srq *srq = srqn ? dev_lookup_srq(qp->dev, srqn) : NULL;

	if (srq && (!srq->xrcd || !qp->xrcd || srq->xrcd->dom != qp->xrcd->dom))
		srq = NULL;
	/* A message under way keeps the SRQ its FIRST packet chose: its
	 * receive WQE came from there, and is completed or flushed there.
	 * A later packet naming another one is refused like a bad number. */
	if (qp->resp.in_send || qp->resp.in_write)
		return qp->resp.xrc_srq && srq == qp->resp.xrc_srq;
	qp->resp.xrc_srq = srq;
	return srq != NULL;
}

void responder_rx(struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	enum ibv_qp_state st = qp->attr.qp_state;
	int32_t d;
	enum resp_verdict v;
	uint32_t consumed = 1;

	if (!qp_state_responds(st)) {
		dev_count(qp->dev, UC_drop_qp_state, 1);
		return;
	}
	bool xrc_ok = qp->type != IBV_QPT_XRC_RECV || xrc_pick_srq(qp, pkt);
	d = psn_cmp(pkt->psn, qp->resp.epsn);
	if (qp->type == IBV_QPT_UC) {
		/* UC (§6.7): on a gap drop the message, resync on FIRST/ONLY */
		if (d != 0) {
			if (!(pkt->mask & OPF_FIRST)) {
				qp->resp.in_send = false;
				qp_set_in_write(qp, false);
				dev_count(qp->dev, UC_drop_psn_window, 1);
				qp->resp.epsn = psn_add(pkt->psn, 1);
				return;
			}
			qp->resp.in_send = false;
			qp_set_in_write(qp, false);
		}
	} else if (d > 0) {
		dev_count(qp->dev, UC_out_of_sequence, 1);
		if (!qp->resp.nak_sent) {
			qp->resp.nak_sent = true;
			dev_count(qp->dev, UC_seq_naks_tx, 1);
			ack_send_aeth(qp, OP_RC_ACK | qp_opcode_base(qp), AETH_NAK_PSN_SEQ, qp->resp.epsn);
		} else {
			dev_count(qp->dev, UC_drop_psn_window, 1);
		}
		return;
	} else if (d < 0) {
		handle_duplicate(qp, pkt);
		return;
	}
	qp->resp.nak_sent = false;

	/* opcode sequence: a message in progress continues, otherwise a new
	 * one starts (IBA 9.8.3.1; rxe check_op_seq) */
	bool starts = pkt->mask & OPF_FIRST;
	if (!xrc_ok)
		v = RV_ACCESS;  /* no XRC SRQ of this domain by that number, or another than the message's: xrc_pick_srq */
	else if ((qp->resp.in_send && (!(pkt->mask & OPF_SEND) || starts)) ||
	    (qp->resp.in_write && (!(pkt->mask & OPF_WRITE) || starts)) ||
	    (!qp->resp.in_send && !qp->resp.in_write && !starts))
		v = RV_INV_REQ;
	else if (!(pkt->mask & (OPF_READ | OPF_ATOMIC | OPF_ATOMIC_WRITE)) && !length_ok(qp, pkt, &consumed))
		v = RV_INV_REQ;
	else if (pkt->ref && !ref_from_peer(qp, pkt->ref))
		v = RV_UNREAD;
	else if (pkt->mask & OPF_SEND)
		v = do_send(qp, pkt);
	else if (pkt->mask & OPF_WRITE)
		v = do_write(qp, pkt);
	else if (pkt->mask & OPF_READ)
		v = qp_reliable(qp) ? do_read(qp, pkt, &consumed) : RV_INV_REQ;
	else if (pkt->mask & OPF_ATOMIC)
		v = qp_reliable(qp) ? do_atomic(qp, pkt) : RV_INV_REQ;
	else if (pkt->mask & OPF_ATOMIC_WRITE)
		v = qp->type == IBV_QPT_RC ? do_atomic_write(qp, pkt) : RV_INV_REQ;
	else
		v = RV_INV_REQ;

	if (v == RV_UNREAD) {
		/* nothing of it counts: the requester goes back to its PSN at
		 * once and sends it again as packets, and the NAK says so
		 * (NET_PKT_REF_NAK: no loss, ref.h) */
		dev_count(qp->dev, UC_ref_pull_failed, 1);
		if (!qp->resp.nak_sent) {
			qp->resp.nak_sent = true;
			dev_count(qp->dev, UC_seq_naks_tx, 1);
			ack_send_aeth_flags(qp, OP_RC_ACK | qp_opcode_base(qp), AETH_NAK_PSN_SEQ, qp->resp.epsn,
					    NET_PKT_REF_NAK);
		}
		return;
	}
	if (v != RV_OK) {
		if (qp->type == IBV_QPT_UC) {
			/* UC has no NAKs: drop the rest of the message (§6.7) */
			qp->resp.in_send = false;
			qp_set_in_write(qp, false);
			if (v == RV_RNR)
				dev_count(qp->dev, UC_drop_no_recv, 1);
			qp->resp.epsn = psn_add(pkt->psn, 1);
			return;
		}
		LOG_DBG("uroce: qp 0x%x NAK verdict %d for %s psn 0x%x len %u (in_send %d in_write %d)", qp->qpn, v,
			opinfo(pkt->opcode)->name, pkt->psn, pkt->paylen, qp->resp.in_send, qp->resp.in_write);
		nak_for(qp, v, pkt->psn);
		return;
	}
	qp->resp.epsn = psn_add(pkt->psn, consumed);
	if (qp_reliable(qp) && (pkt->mask & (OPF_SEND | OPF_WRITE))) {
		if (bth_ackreq(pkt->bth))  /* a reference's span: its last PSN */
			ack_owe(qp, psn_add(pkt->psn, consumed - 1), (pkt->mask & OPF_LAST) != 0);
	}
}

