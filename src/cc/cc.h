/* Congestion control: how many packets a QP may have unacknowledged.
 * A controller is a small table of events (cc_ops); the transport reports
 * what happened and reads the window.  AIMD (aimd.c) is the one today; a
 * rate-based DCQCN or a delay-based controller is another file that fills
 * the same table (on_ecn / on_cnp are their inputs, unused by AIMD). */
#ifndef UROCE_CC_H
#define UROCE_CC_H

#include <stdbool.h>
#include <stdint.h>

struct cc_ops;

struct uroce_cc {
	const struct cc_ops *ops;
	uint32_t max;             /* UROCE_WINDOW: the window never grows past it */
	uint32_t cwnd;            /* packets; 0 until cc_init (then max) */
	uint32_t ssthresh, acc;   /* AIMD: slow-start threshold, ACKed packets toward +1 */
};

struct cc_ops {
	const char *name;
	void (*init)(struct uroce_cc *cc, uint32_t max);
	/* optional: a request packet with `bytes` of payload goes out -- a
	 * rate-based controller's clock; AIMD needs none */
	void (*on_tx)(struct uroce_cc *cc, uint32_t bytes);
	/* `acked` packets newly acknowledged (forward progress) */
	void (*on_ack)(struct uroce_cc *cc, uint32_t acked);
	/* a loss signal: a sequence NAK, a READ gap, a probe that found a
	 * loss (timeout false), or the ACK timer (true) */
	void (*on_loss)(struct uroce_cc *cc, bool timeout);
	/* a packet arrived with ECN CE (the responder's side: a CNP is owed) */
	void (*on_ecn)(struct uroce_cc *cc);
	/* a CNP arrived (the requester's side: slow down) */
	void (*on_cnp)(struct uroce_cc *cc);
};

extern const struct cc_ops cc_aimd;

/* The most request packets an RC QP may have unacknowledged: UROCE_WINDOW
 * when set, else CC_WINDOW_BYTES of packets at the QP's path MTU.  The
 * pipe to fill is bytes (a path's bandwidth times its round trip), so a
 * window counted in packets alone left a 1,024-byte path MTU a quarter of
 * what a 4,096-byte one keeps in flight: between two namespaces over veth
 * at MTU 1500, ib_write_bw 1 MiB moved 0.95 GB/s with 128 packets, 1.9 with
 * 256, 2.0 with 512 (docs/architecture.md "Where a packet's time goes").
 * 512 KiB is the 128 packets of 4,096 bytes that loopback always had.  A
 * responder takes any number in flight below 2^23 (roce-wire.md §6.2; the
 * 128 of rxe's requester is its own limit, not the peer's). */
#define CC_WINDOW_BYTES (512u << 10)
#define CC_WINDOW_MIN 128u
#define CC_WINDOW_MAX 4096u
static inline uint32_t cc_window_max(unsigned configured, uint32_t pmtu)
{
	if (configured)
		return configured;
	uint32_t w = pmtu ? CC_WINDOW_BYTES / pmtu : CC_WINDOW_MIN;
	return w < CC_WINDOW_MIN ? CC_WINDOW_MIN : w > CC_WINDOW_MAX ? CC_WINDOW_MAX : w;
}

/* A QP entering RTS starts with the whole window. */
static inline void cc_init(struct uroce_cc *cc, uint32_t max)
{
	cc->ops = &cc_aimd;
	cc->ops->init(cc, max);
}
static inline uint32_t cc_window(const struct uroce_cc *cc)
{
	return cc->cwnd ? cc->cwnd : cc->max;
}
static inline void cc_on_ack(struct uroce_cc *cc, uint32_t acked)
{
	if (cc->ops)
		cc->ops->on_ack(cc, acked);
}
static inline void cc_on_loss(struct uroce_cc *cc, bool timeout)
{
	if (cc->ops)
		cc->ops->on_loss(cc, timeout);
}
static inline void cc_on_tx(struct uroce_cc *cc, uint32_t bytes)
{
	if (cc->ops && cc->ops->on_tx)
		cc->ops->on_tx(cc, bytes);
}
static inline void cc_on_cnp(struct uroce_cc *cc)
{
	if (cc->ops)
		cc->ops->on_cnp(cc);
}

#endif
