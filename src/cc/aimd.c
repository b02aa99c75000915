/* AIMD: halve the window on every loss signal (down to 4 packets on a
 * timeout), grow it by one packet per window acknowledged, after a slow
 * start back to the threshold.  Go-back-N resends the whole window after a
 * loss, so under loss a small window is what keeps the retransmissions (and
 * the peer's duplicate work) bounded. */
#include "cc.h"

#define AIMD_MIN_WINDOW 4

static void aimd_init(struct uroce_cc *cc, uint32_t max)
{
	cc->max = max;
	cc->cwnd = cc->ssthresh = max;
	cc->acc = 0;
}

static void aimd_on_ack(struct uroce_cc *cc, uint32_t acked)
{
	if (!cc->cwnd)
		return;
	if (cc->cwnd < cc->ssthresh) {
		cc->cwnd += acked;  /* slow start */
	} else {
		cc->acc += acked;  /* one packet per window acknowledged */
		while (cc->acc >= cc->cwnd) {
			cc->acc -= cc->cwnd;
			cc->cwnd++;
		}
	}
	if (cc->cwnd > cc->max)
		cc->cwnd = cc->max;
}

static void aimd_on_loss(struct uroce_cc *cc, bool timeout)
{
	uint32_t w = cc_window(cc);
	/* the floor is never above UROCE_WINDOW, even one set below 4; w <= max,
	 * so neither is anything derived from it */
	uint32_t floor = cc->max < AIMD_MIN_WINDOW ? cc->max : AIMD_MIN_WINDOW;
	cc->ssthresh = w / 2 > floor ? w / 2 : floor;
	cc->cwnd = timeout ? floor : cc->ssthresh;
	cc->acc = 0;
}

static void aimd_ignore(struct uroce_cc *cc)
{
	(void)cc;  /* AIMD reacts to loss only */
}

const struct cc_ops cc_aimd = {
	.name = "aimd",
	.init = aimd_init,
	.on_ack = aimd_on_ack,
	.on_loss = aimd_on_loss,
	.on_ecn = aimd_ignore,
	.on_cnp = aimd_ignore,
};
