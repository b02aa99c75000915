/* Receive path: validation as a linear pipeline, then demultiplexing to the
 * responder (requests) or the completer (responses).  Every drop is counted
 * under its reason; nothing here trusts a length it has not checked. */
#include "transport.h"
#include "../wire/hdr.h"
#include "../wire/icrc.h"
#include "ref.h"
#include <string.h>

/* §4: ICRC over the packet as the IP layer carried it.  A UDP socket hides
 * the IPv4 Identification; see icrc_solve_ipv4_id. */
static bool icrc_ok(struct uroce_dev *dev, const struct uroce_rxpkt *p, uint16_t *ip_id)
{
	/* first guess: the ID of its place in a GSO bundle (0 when alone) */
	uint16_t hint = gid_is_ipv4(p->sgid) ? p->ip_id_hint : 0;
	struct icrc_iphdr ih = {
		.sgid = p->sgid, .dgid = p->dgid, .sport = p->sport, .dport = ROCE_UDP_PORT,
		.udp_len = (uint16_t)(p->len + 8), .ip_id = hint, .ip_frag = 0x4000,
	};
	struct iovec span = { .iov_base = (void *)p->buf, .iov_len = p->len - ICRC_LEN };
	uint32_t crc = icrc_packet(&ih, &span, 1);
	uint32_t rx = icrc_load(p->buf + p->len - ICRC_LEN);
	uint16_t delta;

	*ip_id = hint;
	if (crc == rx)
		return true;
	if (gid_is_ipv4(p->sgid)) {
		/* the CRC is affine in the ID: solve for (ID xor hint).
		 * covered: 8 prefix + 20 IP + 8 UDP + (len - 4) */
		size_t covered = 8 + 20 + 8 + p->len - ICRC_LEN;
		if (icrc_solve_ipv4_id(crc, rx, covered, &delta) == 0) {
			*ip_id = hint ^ delta;
			dev_count(dev, UC_icrc_ipid_solved, 1);
			return true;
		}
	}
	return false;
}

static void qp_rx(struct uroce_dev *dev, struct uroce_qp *qp, struct uroce_pkt *pkt);

void transport_rx(struct uroce_dev *dev, struct uroce_rxpkt *rx)
{
	struct uroce_pkt pkt;
	const struct uroce_opinfo *oi;
	uint16_t ip_id;

	/* 1. enough bytes for a BTH and an ICRC */
	if (rx->len < BTH_LEN + ICRC_LEN) {
		dev_count(dev, UC_drop_truncated, 1);
		return;
	}
	const uint8_t *bth = rx->buf;
	/* 2. known opcode, TVer 0, our partition (§1.5) */
	oi = opinfo(bth_opcode(bth));
	if (!oi->name || bth_tver(bth) != 0 || (bth_pkey(bth) & 0x7FFF) != (ROCE_PKEY_DEFAULT & 0x7FFF)) {
		dev_count(dev, UC_drop_bad_header, 1);
		return;
	}
	/* 3. headers, pad and ICRC fit */
	if (rx->len < (uint32_t)oi->hdr_len + ICRC_LEN + bth_pad(bth)) {
		dev_count(dev, UC_drop_truncated, 1);
		return;
	}
	uint32_t paylen = rx->len - oi->hdr_len - ICRC_LEN - bth_pad(bth);
	if (paylen && !(oi->mask & OPF_PAYLOAD)) {
		dev_count(dev, UC_drop_bad_header, 1);
		return;
	}
	/* a pad count that does not round the payload to 4 bytes is malformed */
	if (bth_pad(bth) != pad_for(paylen)) {
		dev_count(dev, UC_drop_bad_header, 1);
		return;
	}
	/* 4. ICRC */
	if (!icrc_ok(dev, rx, &ip_id)) {
		dev_count(dev, UC_icrc_errors, 1);
		net_tap_rx(dev->net, rx, 0);
		return;
	}
	net_tap_rx(dev->net, rx, ip_id);
	pkt.bth = bth;
	pkt.payload = bth + oi->hdr_len;
	pkt.paylen = paylen;
	pkt.ref = NULL;
	/* the copy that brought the payload here (a reference's own bytes
	 * are no payload: its one copy is pkt_place's) */
	if (!(rx->flags & NET_PKT_REF))
		dev_count(dev, rx->flags & NET_PKT_VIA_RING ? UC_copy_ring_out_bytes : UC_copy_from_kernel_bytes, paylen);
	struct ref_src ref;
	if (rx->flags & NET_PKT_REF) {
		/* a ring's reference to the sender's memory, in place of the
		 * payload (ref.h); only RC SEND/WRITE requests and READ answers
		 * carry one (responder_rx, completer_rx check the rest) */
		if (!(oi->mask & OPF_RC) || !(oi->mask & OPF_PAYLOAD) || !(oi->mask & (OPF_SEND | OPF_WRITE | OPF_READ)) ||
		    !ref_get(pkt.payload, paylen, &ref)) {
			dev_count(dev, UC_ref_refused, 1);
			return;
		}
		pkt.ref = &ref;
		pkt.payload = NULL;
		pkt.paylen = ref.len;
	}
	pkt.mask = oi->mask;
	pkt.opcode = bth_opcode(bth);
	pkt.psn = bth_psn(bth);
	pkt.ip_id = ip_id;
	pkt.rx = rx;
	/* 5. destination QP */
	uint32_t qpn = bth_qpn(bth);
	if (qpn == 0xFFFFFF) {
		/* §1.5 item 2: multicast, UD only, to a multicast GID: every QP
		 * of ours attached to the group gets its copy */
		struct uroce_mcast_group *g = (oi->mask & OPF_UD) && gid_is_multicast(rx->dgid)
						      ? dev_mcast_group(dev, rx->dgid) : NULL;
		if (!g) {
			dev_count(dev, UC_drop_unknown_qp, 1);
			return;
		}
		dev_count(dev, UC_mcast_rx, 1);
		for (unsigned i = 0; i < g->nqp; i++)
			qp_rx(dev, g->qp[i], &pkt);
		return;
	}
	/* QP0 is IB's subnet management, absent on RoCE (§3.1); QP1 is the
	 * connection manager's GSI QP when cm/ made one */
	struct uroce_qp *qp = qpn != 0 ? dev_lookup_qp(dev, qpn) : NULL;
	if (!qp) {
		dev_count(dev, UC_drop_unknown_qp, 1);
		return;
	}
	if (oi->mask & OPF_CNP) {
		/* a CNP names the QP whose requests met congestion (§8): its
		 * controller decides (cc/cc.h; AIMD reacts to loss only) */
		dev_count(dev, UC_cnps_rx, 1);
		pthread_mutex_lock(&qp->lock);
		if (qp->type == IBV_QPT_RC || qp->type == IBV_QPT_UC || qp->type == IBV_QPT_XRC_SEND)
			cc_on_cnp(&qp->cc);
		pthread_mutex_unlock(&qp->lock);
		return;
	}
	qp_rx(dev, qp, &pkt);
}

/* A valid packet for qp, to the role that takes it. */
static void qp_rx(struct uroce_dev *dev, struct uroce_qp *qp, struct uroce_pkt *pkt)
{
	const struct uroce_rxpkt *rx = pkt->rx;
	uint32_t mask = pkt->mask;

	pthread_mutex_lock(&qp->lock);
	/* 6. transport and peer match the QP (§1.5 items 3-4) */
	bool type_ok = (qp->type == IBV_QPT_RC && (mask & OPF_RC)) ||
		       (qp->type == IBV_QPT_UC && (mask & OPF_UC)) ||
		       (qp->type == IBV_QPT_UD && (mask & OPF_UD)) ||
		       /* XRC: the INI QP only requests, the TGT QP only responds (IBA A14) */
		       (qp->type == IBV_QPT_XRC_SEND && (mask & OPF_XRC) && (mask & OPF_RESP)) ||
		       (qp->type == IBV_QPT_XRC_RECV && (mask & OPF_XRC) && (mask & OPF_REQ));
	if (!type_ok || qp->attr.qp_state < IBV_QPS_RTR ||
	    (qp->type != IBV_QPT_UD && (memcmp(rx->sgid, qp->dgid, 16) || memcmp(rx->dgid, qp->sgid, 16)))) {
		dev_count(dev, type_ok && qp->attr.qp_state < IBV_QPS_RTR ? UC_drop_qp_state : UC_drop_wrong_peer, 1);
		pthread_mutex_unlock(&qp->lock);
		return;
	}
	if (qp->type == IBV_QPT_UD)
		ud_rx(qp, pkt);
	else if (mask & OPF_REQ)
		responder_rx(qp, pkt);
	else if (qp->attr.qp_state == IBV_QPS_RTS || qp->attr.qp_state == IBV_QPS_SQD)
		completer_rx(qp, pkt);
	else
		dev_count(dev, UC_drop_qp_state, 1);
	if (qp->cq_lost)
		qp_cq_lost(qp);
	pthread_mutex_unlock(&qp->lock);
}

/* A receive batch: responses first, then requests.  Both PSN spaces are
 * independent, so the order between them is free; this one keeps what a
 * hardware responder shows.  There the ACK of a message leaves at once and
 * reaches the requester before the application's answer to the message; an
 * ACK that rode with that answer (ack.c, ack_defer) arrives behind
 * it, and processed in arrival order it would complete the send after the
 * answer's receive -- perftest's ib_send_lat -e, which waits for one event
 * on a channel shared by both CQs, then overruns its send CQ. */
/* How often a batch with requests restamps eng.rx_request_ns at most:
 * spinners on other cores read that line on every poll, and the stamp
 * needs to be fresh only to within a small part of the poll grace. */
#define REQUEST_STAMP_NS 256000ull

void transport_rx_batch(struct uroce_dev *dev, struct uroce_rxpkt *pkts, int n)
{
	bool req[UROCE_RX_BATCH], requests = false;

	for (int i = 0; i < n; i++) {
		/* a runt goes with the requests, to be dropped and counted */
		uint32_t mask = pkts[i].len < BTH_LEN ? 0 : opinfo(pkts[i].buf[0])->mask;
		req[i] = !(mask & OPF_RESP);
		/* a runt, an unknown opcode or a CNP is no peer's request to serve */
		requests |= mask && !(mask & (OPF_RESP | OPF_CNP));
		if (!req[i])
			transport_rx(dev, &pkts[i]);
	}
	for (int i = 0; i < n; i++)
		if (req[i])
			transport_rx(dev, &pkts[i]);
	/* one clock reading for the batch's end, taken only if it held
	 * requests: only they owe ACKs (ack_rx_batch_end's waits) */
	uint64_t now = requests ? now_ns() : 0;
	ack_rx_batch_end(dev, now);
	/* peers send this process requests: its spins hold the sockets no
	 * longer than they lasted (exec_spin_held) */
	if (requests && now - atomic_load_explicit(&dev->eng.rx_request_ns, memory_order_relaxed) > REQUEST_STAMP_NS)
		atomic_store_explicit(&dev->eng.rx_request_ns, now, memory_order_relaxed);
}
