/* Building packets for one QP and sending them in batches (sendmmsg).
 * Headers are written into the batch; payload iovecs point straight into
 * registered memory (no copy); pad and ICRC go in a small trailer. */
#ifndef UROCE_TX_H
#define UROCE_TX_H

#include "transport.h"

/* a packet's headers, or a reference packet's headers and its reference
 * (ref.h: REF_BYTES(REF_MAX_SEGS) after at most 32 bytes of headers) */
#define TX_HDR_MAX 128

/* A batch of up to `cap` packets; its storage is the caller's
 * (TXB_ON_STACK), sized for what it sends: a lone ACK, NAK or atomic ACK
 * takes one slot (under 1 KB), a run of requests or READ responses
 * UROCE_TX_BATCH (about 40 KB). */
struct tx_batch {
	struct uroce_qp *qp;
	int n, cap;
	bool run_closed;      /* the current GSO run ended with a short packet */
	int run_iovs;         /* iovecs in the current GSO run */
	uint32_t part_max;    /* end the call early after this many bytes (net_flow_part_bytes) */
	uint32_t part_bytes;  /* bytes in the call so far */
	bool holds_end;       /* the call has a packet that completes a message */
	unsigned added;       /* packets added since txb_init, flushed or not */
	struct uroce_txmsg *msg;
	uint8_t (*hdr)[TX_HDR_MAX];
	uint8_t (*trailer)[8];
};

/* Declares `struct tx_batch name` with storage for cap_ packets. */
#define TXB_ON_STACK(name, cap_) \
	struct uroce_txmsg name##_msg[cap_]; \
	uint8_t name##_hdr[cap_][TX_HDR_MAX]; \
	uint8_t name##_trailer[cap_][8]; \
	struct tx_batch name = { .cap = (cap_), .msg = name##_msg, .hdr = name##_hdr, \
				 .trailer = name##_trailer }

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
 * the ICRC and queues it; sends the batch when full.  `flags`: NET_PKT_*
 * (a reference packet's reference is in the header buffer, within
 * hdrlen, and it has no other payload). */
void txb_add_flags(struct tx_batch *b, uint32_t hdrlen, const struct uroce_seg *seg, uint32_t nseg,
		   uint32_t off, uint32_t len, uint8_t flags);
static inline void txb_add(struct tx_batch *b, uint32_t hdrlen, const struct uroce_seg *seg, uint32_t nseg,
			   uint32_t off, uint32_t len)
{
	txb_add_flags(b, hdrlen, seg, nseg, off, len, 0);
}
void txb_flush(struct tx_batch *b);

#endif
