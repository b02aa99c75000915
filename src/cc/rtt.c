#include "rtt.h"
#include "../util/clock.h"

/* The adaptive retransmission timeout: 2 srtt + 4 rttvar, at least
 * UROCE_RTO_MIN_US, doubled per probe without progress; 0 = none.  RFC 6298
 * has 1 srtt, but a reordered packet arrives late by up to about one more
 * round trip, and a probe for it only costs duplicates; the doubled srtt
 * keeps those rare.
 * It is armed only where it can help: on a path whose round trip is not a
 * same-host one (srtt >= RTO_PATH_NS), or for a second after a loss signal.
 * On a loss-free loopback the timer would only ever fire on host stalls,
 * yet its deadlines wake the engine, and those wake-ups cost the
 * applications throughput and latency (figures: bench/README.md). */
#define RTO_PATH_NS 500000ull
#define RTO_AFTER_LOSS_NS 1000000000ull

uint64_t rtt_rto_ns(const struct uroce_rtt *q, uint64_t min, uint64_t *now)
{
	if (!min || !q->srtt_ns)
		return 0;
	if (q->srtt_ns < RTO_PATH_NS) {
		if (!q->loss_ns)
			return 0;
		if (!*now)
			*now = now_ns();
		if (*now - q->loss_ns >= RTO_AFTER_LOSS_NS)
			return 0;
	}
	uint64_t rto = 2 * q->srtt_ns + 4 * q->rttvar_ns;
	if (rto < min)
		rto = min;
	return rto << (q->backoff < 10 ? q->backoff : 10);
}

void rtt_sample(struct uroce_rtt *q, uint64_t now)
{
	uint64_t r = now - q->start_ns;

	q->timing = false;
	if (!q->srtt_ns) {
		q->srtt_ns = r ? r : 1;
		q->rttvar_ns = r / 2;
	} else {
		uint64_t dev = q->srtt_ns > r ? q->srtt_ns - r : r - q->srtt_ns;
		q->rttvar_ns = (3 * q->rttvar_ns + dev) / 4;
		q->srtt_ns = (7 * q->srtt_ns + r) / 8;
		if (!q->srtt_ns)
			q->srtt_ns = 1;
	}
}

