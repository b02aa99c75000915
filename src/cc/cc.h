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
