/* UD (§6.7, §9): datagrams, one packet per message, no ACKs -- the
 * receive side (Q_Key check, no PSN order, the 40-byte GRH area) and the
 * send side (a flow per source GID, the destination per work request). */
#include <string.h>
#include "transport.h"
#include "tx.h"
#include "../core/cq_ring.h"
#include "../core/wr.h"
#include "../mem/mem.h"
#include "../wire/hdr.h"
#include "../wire/ip.h"

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

	if (!qp_state_responds(st)) {
		dev_count(qp->dev, UC_drop_qp_state, 1);
		return;
	}
	/* §1.5 item 6: the Q_Key must match; the PSN is not checked (§6.7) */
	if (deth_qkey(deth) != qp->attr.qkey) {
		dev_count(qp->dev, UC_drop_qkey, 1);
		return;
	}
	if (qp_rq_pop(qp, &qp->resp.cur_recv) < 0) {
		dev_count(qp->dev, UC_drop_no_recv, 1);
		return;
	}
	qp->resp.cur_recv_valid = true;
	/* On RoCE, a UD receive's sl tells the packet's L3 header, as mlx5
	 * reports it (its PRM: bits 2:0, 1 IPv6, 2 IPv4; UCX's ud transports
	 * read it so to find the destination GID in the GRH area, and drop
	 * what does not match); rxe leaves 0, which UCX takes for IPv6. */
	struct ibv_wc wc = {
		.wr_id = qp->resp.cur_recv.wr_id, .opcode = IBV_WC_RECV, .qp_num = qp->qpn,
		.src_qp = deth_sqpn(deth), .wc_flags = IBV_WC_GRH, .sl = gid_is_ipv4(pkt->rx->sgid) ? 2 : 1,
	};
	struct uroce_recv_wqe *r = &qp->resp.cur_recv;
	if (40 + (uint64_t)pkt->paylen > r->length) {
		/* IBA: a receive buffer too small completes in error; rxe drops
		 * the packet silently instead (roce-wire.md §6.7) */
		wc.status = IBV_WC_LOC_LEN_ERR;
	} else {
		/* the receive's memory is checked as the datagram lands (mem.h) */
		build_grh(pkt, grh);
		enum uroce_mem_verdict mv = mem_sge_copy_to(qp->dev, qp_recv_pd(qp), r->sge, r->nsge, 0, grh, 40);
		if (mv == MEM_OK && (mv = mem_sge_copy_to(qp->dev, qp_recv_pd(qp), r->sge, r->nsge, 40, pkt->payload,
							  pkt->paylen)) == MEM_OK)
			dev_count(qp->dev, UC_copy_place_bytes, pkt->paylen);
		wc.status = mem_verdict_local_status(mv);
		if (mv == MEM_OK)
			wc.byte_len = 40 + pkt->paylen;
		if (mv == MEM_OK && (pkt->mask & OPF_IMMDT)) {
			wc.imm_data = immdt_raw(pkt->bth + opinfo(pkt->opcode)->off_imm);
			wc.wc_flags |= IBV_WC_WITH_IMM;
		}
	}
	qp->resp.cur_recv_valid = false;
	qp_cq_push(qp, qp->recv_cq, &wc, bth_se(pkt->bth));
}

/* UD (§6.7): one packet per message, no ACKs, the PSN only counts.  The
 * payload is `seg`, the WQE's memory the requester checked just now. */
void ud_send(struct uroce_qp *qp, struct uroce_send_wqe *w, struct tx_batch *b, const struct uroce_seg *seg,
	     uint32_t nseg)
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
		qp->ud_flows[w->sgid_index] = net_flow_open(dev->net, dev->cfg.gids[w->sgid_index], sport, NULL, 0);
		if (!qp->ud_flows[w->sgid_index])
			return;
	}
	qp->flow = qp->ud_flows[w->sgid_index];
	memcpy(qp->dgid, w->dgid, 16);
	memcpy(qp->sgid, dev->cfg.gids[w->sgid_index], 16);
	qp->tx_tos = w->tclass;

	uint8_t *h = txb_hdr(b);
	uint8_t op = wr_info(w->opcode)->ud;
	const struct uroce_opinfo *oi = opinfo(op);
	bth_set(h, op, (w->send_flags & IBV_SEND_SOLICITED) != 0, 0, w->remote_qpn, 0, qp->req.snd_psn);
	deth_set(h + oi->off_deth, w->remote_qkey, qp->qpn);
	if (oi->off_imm)
		immdt_set_raw(h + oi->off_imm, w->imm_data);
	txb_add(b, oi->hdr_len, seg, nseg, 0, w->length);
	qp->req.snd_psn = psn_add(qp->req.snd_psn, 1);
}

