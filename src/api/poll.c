/* ibv_poll_cq: an application's poll is also a progress point -- posts
 * held back to join a stream leave (sq/post.c), an empty CQ runs the
 * receive path (exec/progress.c, the hand-off), completions found may hand
 * it back to the engine. */
#include "ops.h"
#include "../core/cq_ring.h"
#include "../exec/exec.h"
#include "../sq/sq.h"

int uroce_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc)
{
	struct uroce_cq *cq = to_ucq(ibcq);

	if (num <= 0)
		return 0;
	uint64_t now = 0;

	sq_send_corked(cq->dev);  /* posts that waited for more of a stream go now (sq/post.c) */

	/* lock-free check first: an empty CQ is the common case of a poll loop */
	if (__atomic_load_n(&cq->head, __ATOMIC_ACQUIRE) == cq->tail) {
		now = exec_poll_progress(cq->dev);
		if (__atomic_load_n(&cq->head, __ATOMIC_ACQUIRE) == cq->tail)
			return 0;
	}
	int n = cq_pop_many(cq, wc, num);
	exec_poll_found(cq->dev, now);
	return n;
}
