/*
 * netrc_linger.so - preload shim used by tests/netrc/netrc.sh for
 * ibv_rc_pingpong under packet loss.
 *
 * ibv_rc_pingpong has an end-of-run race that no RC implementation can hide:
 * when the ACK of a side's *last* SEND is lost, that side retransmits, but
 * its peer has already finished, destroyed its QP and exited, so nobody
 * re-acknowledges and the side fails with IBV_WC_RETRY_EXC_ERR ("transport
 * retry counter exceeded") about (retry_cnt + 1) * timeout later.  With 5%
 * loss that happens to roughly one run in ten, on any NIC.
 *
 * This shim delays ibv_destroy_qp() of RC QPs by NETRC_LINGER_MS (default
 * 1000) milliseconds.  The uroce engine thread keeps running meanwhile, so
 * the QP's responder still answers the peer's retransmissions with the
 * duplicate re-ACK (roce-wire.md §6.4).  Nothing else changes: the program
 * and the uroce library are the unmodified ones.
 *
 * It must come before liburoce.so in LD_PRELOAD (liburoce defines the ibv_*
 * entry points itself), so it is added by an `env` run *under* the launcher:
 *     uroce run -- env LD_PRELOAD=netrc_linger.so:$LD_PRELOAD PROGRAM ...
 * NETRC_LINGER_MS=0 disables it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include <infiniband/verbs.h>

int ibv_destroy_qp(struct ibv_qp *qp)
{
	static int (*next)(struct ibv_qp *);
	const char *e = getenv("NETRC_LINGER_MS");
	long ms = e ? atol(e) : 1000;

	if (!next) {
		next = (int (*)(struct ibv_qp *))dlsym(RTLD_NEXT, "ibv_destroy_qp");
		if (!next)
			return EINVAL;
	}
	if (qp && qp->qp_type == IBV_QPT_RC && ms > 0) {
		struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
	return next(qp);
}
