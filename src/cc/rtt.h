/* The round trip of a QP's requests, measured, and the adaptive
 * retransmission timeout drawn from it (transport/timer.c arms it,
 * transport/retry.c acts on it). */
#ifndef UROCE_CC_RTT_H
#define UROCE_CC_RTT_H

#include <stdbool.h>
#include <stdint.h>

struct uroce_rtt {
	uint64_t srtt_ns, rttvar_ns;  /* smoothed round trip and its variation; 0 = no sample yet */
	unsigned backoff;             /* probes since the last progress */
	uint64_t loss_ns;             /* last loss signal, 0 = none */
	bool timing;                  /* a fresh packet's round trip is being timed ... */
	uint32_t psn;                 /* ... this one ... */
	uint64_t start_ns;            /* ... sent then */
};

/* The timed packet was acknowledged at `now`. */
void rtt_sample(struct uroce_rtt *r, uint64_t now);
/* The adaptive retransmission timeout, 0 = not armed now (see rtt.c);
 * *now is read from the clock if 0 and needed. */
uint64_t rtt_rto_ns(const struct uroce_rtt *r, uint64_t min_ns, uint64_t *now);

#endif
