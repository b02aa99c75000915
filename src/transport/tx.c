/* Packet assembly and batched transmission for one QP.
 *
 * A packet is [BTH + extension headers][payload iovecs straight from
 * registered memory][pad + ICRC]; nothing is copied.  Consecutive packets
 * of one size (the last of a run may be shorter) go out as one UDP GSO send,
 * and the whole batch in one sendmmsg. */
#include "tx.h"
#include "../wire/hdr.h"
#include "../mem/mem.h"
#include "../wire/icrc.h"

#define GSO_MAX_IOV 1000   /* below the kernel's UIO_MAXIOV per datagram */

void txb_flush(struct tx_batch *b)
{
	struct uroce_qp *qp = b->qp;

	if (!b->n)
		return;
	if (qp->flow)
		net_send(qp->dev->net, qp->flow, qp->sgid, qp->dgid, qp->tx_tos, b->msg, b->n);
	txb_begin_call(b);
}

/* May packet m (udp payload `len`, `iovcnt` iovecs) join the run the
 * previous packet belongs to? */
static uint16_t gso_place(struct tx_batch *b, uint32_t len, int iovcnt)
{
	unsigned max = b->qp->dev->net->gso_max_segs;

	if (!b->n || !max || b->run_closed)
		return 0;
	const struct uroce_txmsg *p = &b->msg[b->n - 1];
	uint32_t seg = (p - p->gso_idx)->len;
	if (len > seg || p->gso_idx + 1u >= max || (uint32_t)(p->gso_idx + 2) * seg > UROCE_GSO_MAX_BYTES ||
	    b->run_iovs + iovcnt > GSO_MAX_IOV)
		return 0;
	return (uint16_t)(p->gso_idx + 1);
}

void txb_add_flags(struct tx_batch *b, uint32_t hdrlen, const struct uroce_seg *seg, uint32_t nseg,
		   uint32_t off, uint32_t len, uint8_t flags)
{
	struct uroce_qp *qp = b->qp;
	struct uroce_txmsg *m = &b->msg[b->n];
	uint8_t *hdr = b->hdr[b->n];
	uint8_t *trl = b->trailer[b->n];
	unsigned pad = pad_for(len);

	/* deterministic fault injection drops a packet before it is built,
	 * so that GSO runs and their IP IDs stay consistent */
	if (net_fault_tx(qp->dev->net))
		return;
	hdr[1] = (uint8_t)((hdr[1] & ~0x30) | pad << 4); /* BTH PadCnt (§7) */
	uint32_t udp_len = 8 + hdrlen + len + pad + ICRC_LEN;

	m->iov[0].iov_base = hdr;
	m->iov[0].iov_len = hdrlen;
	m->iovcnt = 1;
	if (len)
		m->iovcnt += seg_iov(seg, nseg, off, len, &m->iov[1], UROCE_TX_IOV - 2);
	m->iov[m->iovcnt].iov_base = trl;
	m->iov[m->iovcnt].iov_len = pad + ICRC_LEN;
	m->iovcnt++;
	m->len = udp_len - 8;
	m->flags = flags;

	m->gso_idx = gso_place(b, m->len, m->iovcnt);
	if (m->gso_idx == 0) {
		b->run_closed = false;
		b->run_iovs = 0;
	} else if (m->len < (m - m->gso_idx)->len) {
		b->run_closed = true; /* a shorter packet ends its run */
	}
	b->run_iovs += m->iovcnt;

	/* the ICRC covers the IPv4 ID the kernel will give this segment */
	struct icrc_iphdr ih = {
		.sgid = qp->sgid, .dgid = qp->dgid, .sport = net_flow_sport(qp->flow), .dport = ROCE_UDP_PORT,
		.udp_len = (uint16_t)udp_len, .ip_id = m->gso_idx, .ip_frag = 0x4000,
	};
	for (unsigned i = 0; i < pad; i++)
		trl[i] = 0;
	/* covered: the headers, the payload and the pad (the trailer's part
	 * before the ICRC) */
	m->iov[m->iovcnt - 1].iov_len = pad;
	icrc_store(trl + pad, icrc_packet(&ih, m->iov, m->iovcnt));
	m->iov[m->iovcnt - 1].iov_len = pad + ICRC_LEN;
	/* On a same-host ring the call ends early after a packet that completes
	 * nothing, the first or a middle one of a message, so that the peer
	 * takes in this part while the next is built (SHM_PART_BYTES) -- and
	 * never once the call holds a packet that completes a message: the
	 * ACK that may ride at its end must reach the peer in the same call
	 * (shm_tx_send, transport_rx_batch). */
	uint32_t op = opinfo(hdr[0])->mask;
	b->part_bytes += m->len;
	b->added++;
	if (op & OPF_LAST)
		b->holds_end = true;
	bool part_end = b->part_max && !b->holds_end && b->part_bytes >= b->part_max &&
			(op & (OPF_FIRST | OPF_MIDDLE));
	if (++b->n == b->cap) {
		txb_flush(b);
	} else if (part_end) {
		dev_count(qp->dev, UC_shm_parts_tx, 1);
		txb_flush(b);
	}
}
