/* The CQ ring: completions in, completions out, and the event a channel
 * gets when an armed CQ fills (IBA 11.4.2.2). */
#include "cq_ring.h"
#include "async.h"
#include <stdlib.h>
#include <unistd.h>

static void channel_signal(struct uroce_cq *cq)
{
	struct uroce_comp_channel *ch = to_uchan(cq->ibv.channel);
	uint64_t one = 1;

	pthread_mutex_lock(&ch->lock);
	if (ch->npending == ch->cap) {
		unsigned ncap = ch->cap ? ch->cap * 2 : 16;
		struct uroce_cq **p = realloc(ch->pending, ncap * sizeof(*p));
		if (!p) {
			pthread_mutex_unlock(&ch->lock);
			return;
		}
		ch->pending = p;
		ch->cap = ncap;
	}
	ch->pending[ch->npending++] = cq;
	pthread_mutex_unlock(&ch->lock);
	dev_count_syscall(cq->dev, UC_sys_eventfd);
	if (write(ch->ibv.fd, &one, sizeof(one)) < 0)
		LOG_ERR("uroce: completion channel write failed");
}

/* Add a completion.  Returns -1 on overrun: the completion is lost, and
 * the first overrun of the CQ raises IBV_EVENT_CQ_ERR, an affiliated async
 * error of the CQ, as rxe's rxe_cq_post does (the caller moves the QP
 * whose completion it was to ERR).  Unlike hardware the CQ stays usable:
 * completions fit again once the application polled some. */
int cq_push(struct uroce_cq *cq, const struct ibv_wc *wc, bool solicited)
{
	bool fire = false;

	pthread_spin_lock(&cq->lock);
	if (cq->head - cq->tail >= cq->size - 1) {
		bool first = !cq->overrun;
		cq->overrun = true;
		pthread_spin_unlock(&cq->lock);
		dev_count(cq->dev, UC_cq_overruns, 1);
		if (first)
			cq_post_async_event(cq, IBV_EVENT_CQ_ERR);
		return -1;
	}
	cq->ring[cq->head & (cq->size - 1)] = *wc;
	__atomic_store_n(&cq->head, cq->head + 1, __ATOMIC_RELEASE);
	if (cq->armed == CQ_ARM_ALL || (cq->armed == CQ_ARM_SOLICITED && (solicited || wc->status != IBV_WC_SUCCESS))) {
		cq->armed = 0;
		fire = true;
	}
	pthread_spin_unlock(&cq->lock);
	if (fire && cq->ibv.channel)
		channel_signal(cq);
	return 0;
}

void cq_purge_qp(struct uroce_cq *cq, uint32_t qpn)
{
	pthread_spin_lock(&cq->lock);
	uint32_t to = cq->tail;
	for (uint32_t from = cq->tail; from != cq->head; from++) {
		const struct ibv_wc *wc = &cq->ring[from & (cq->size - 1)];
		if (wc->qp_num == qpn)
			continue;
		if (to != from)
			cq->ring[to & (cq->size - 1)] = *wc;
		to++;
	}
	/* the unlocked empty check (poll.c) reads head: it may only see it
	 * move back once the entries before it are in place */
	__atomic_store_n(&cq->head, to, __ATOMIC_RELEASE);
	pthread_spin_unlock(&cq->lock);
}

int cq_pop(struct uroce_cq *cq, struct ibv_wc *wc)
{
	int got = 0;

	pthread_spin_lock(&cq->lock);
	if (cq->head != cq->tail) {
		*wc = cq->ring[cq->tail & (cq->size - 1)];
		cq->tail++;
		got = 1;
	}
	pthread_spin_unlock(&cq->lock);
	return got;
}

int cq_pop_many(struct uroce_cq *cq, struct ibv_wc *wc, int num)
{
	int n = 0;

	pthread_spin_lock(&cq->lock);
	while (n < num && cq->head != cq->tail) {
		wc[n++] = cq->ring[cq->tail & (cq->size - 1)];
		cq->tail++;
	}
	pthread_spin_unlock(&cq->lock);
	return n;
}
