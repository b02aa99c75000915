#include "tx.h"
#include "hdr.h"
#include "icrc.h"

void txb_flush(struct tx_batch *b)
{
	struct uroce_qp *qp = b->qp;

	if (!b->n)
		return;
	if (qp->flow)
		net_send(qp->dev->net, qp->flow, qp->sgid, qp->sport, qp->dgid,
			 qp->attr.ah_attr.grh.traffic_class, b->msg, b->n);
	b->n = 0;
}

void txb_add(struct tx_batch *b, uint32_t hdrlen, const struct uroce_seg *seg, uint32_t nseg,
	     uint32_t off, uint32_t len)
{
	struct uroce_qp *qp = b->qp;
	struct uroce_txmsg *m = &b->msg[b->n];
	uint8_t *hdr = b->hdr[b->n];
	uint8_t *trl = b->trailer[b->n];
	unsigned pad = pad_for(len);

	hdr[1] = (uint8_t)((hdr[1] & ~0x30) | pad << 4); /* BTH PadCnt (§7) */
	uint32_t udp_len = 8 + hdrlen + len + pad + ICRC_LEN;
	struct icrc_iphdr ih = {
		.sgid = qp->sgid, .dgid = qp->dgid, .sport = qp->sport, .dport = ROCE_UDP_PORT,
		.udp_len = (uint16_t)udp_len, .ip_id = 0, .ip_frag = 0x4000,
	};
	uint32_t crc = icrc_bth(icrc_begin(&ih), hdr, hdrlen);

	m->iov[0].iov_base = hdr;
	m->iov[0].iov_len = hdrlen;
	m->iovcnt = 1;
	if (len) {
		int k = seg_iov(seg, nseg, off, len, &m->iov[1], UROCE_TX_IOV - 2);
		for (int i = 1; i <= k; i++)
			crc = icrc_update(crc, m->iov[i].iov_base, m->iov[i].iov_len);
		m->iovcnt += k;
	}
	for (unsigned i = 0; i < pad; i++)
		trl[i] = 0;
	if (pad)
		crc = icrc_update(crc, trl, pad);
	icrc_store(trl + pad, crc);
	m->iov[m->iovcnt].iov_base = trl;
	m->iov[m->iovcnt].iov_len = pad + ICRC_LEN;
	m->iovcnt++;
	m->len = udp_len - 8;
	if (++b->n == UROCE_TX_BATCH)
		txb_flush(b);
}
