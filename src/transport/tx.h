/* Building packets for one QP and sending them in batches (sendmmsg).
 * Headers are written into the batch; payload iovecs point straight into
 * registered memory (no copy); pad and ICRC go in a small trailer. */
#ifndef UROCE_TX_H
#define UROCE_TX_H

#include "transport.h"

#define TX_HDR_MAX 64

struct tx_batch {
	struct uroce_qp *qp;
	int n;
	bool run_closed;      /* the current GSO run ended with a short packet */
	int run_iovs;         /* iovecs in the current GSO run */
	uint32_t part_max;    /* end the call early after this many bytes (net_flow_part_bytes) */
	uint32_t part_bytes;  /* bytes in the call so far */
	bool holds_end;       /* the call has a packet that completes a message */
	unsigned added;       /* packets added since txb_init, flushed or not */
	struct uroce_txmsg msg[UROCE_TX_BATCH];
	uint8_t hdr[UROCE_TX_BATCH][TX_HDR_MAX];
	uint8_t trailer[UROCE_TX_BATCH][8];
};

/* An empty send call: no packet, no GSO run, no part yet; whether it may
 * end early is asked anew each time (the peer's engine may have gone to
 * sleep meanwhile, SHM_PART_BYTES). */
static inline void txb_begin_call(struct tx_batch *b)
{
	b->n = 0;
	b->run_closed = false;
	b->run_iovs = 0;
	b->part_max = net_flow_part_bytes(b->qp->dev->net, b->qp->flow);
	b->part_bytes = 0;
	b->holds_end = false;
}

static inline void txb_init(struct tx_batch *b, struct uroce_qp *qp)
{
	b->qp = qp;
	b->added = 0;
	txb_begin_call(b);
}

/* The header buffer for the next packet. */
static inline uint8_t *txb_hdr(struct tx_batch *b)
{
	return b->hdr[b->n];
}

/* Finish the packet whose BTH + extension headers (hdrlen bytes) are in
 * txb_hdr(b), with `len` payload bytes at offset `off` of `seg`. Pads, adds
 * the ICRC and queues it; sends the batch when full. */
void txb_add(struct tx_batch *b, uint32_t hdrlen, const struct uroce_seg *seg, uint32_t nseg,
	     uint32_t off, uint32_t len);
void txb_flush(struct tx_batch *b);

#endif
