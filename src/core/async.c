/* Asynchronous events (ibv_get_async_event): queued on the context, and
 * its async_fd (an eventfd) counts them. */
#include "async.h"
#include <stdlib.h>
#include <unistd.h>

bool async_event_is_qp(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST: case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED:
		return true;
	default:
		return false;
	}
}

static void post_async_event(struct uroce_context *uctx, const struct ibv_async_event ev)
{
	uint64_t one = 1;

	pthread_mutex_lock(&uctx->async_lock);
	if (uctx->async_n == uctx->async_cap) {
		unsigned ncap = uctx->async_cap ? uctx->async_cap * 2 : 16;
		struct ibv_async_event *q = realloc(uctx->async_q, ncap * sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&uctx->async_lock);
			return;
		}
		uctx->async_q = q;
		uctx->async_cap = ncap;
	}
	uctx->async_q[uctx->async_n++] = ev;
	pthread_mutex_unlock(&uctx->async_lock);
	dev_count_syscall(uctx->dev, UC_sys_eventfd);
	if (write(uctx->vctx.context.async_fd, &one, sizeof(one)) < 0)
		LOG_ERR("uroce: async event write failed");
}


void async_drop_events(struct uroce_context *uctx, const void *obj, bool of_qp)
{
	pthread_mutex_lock(&uctx->async_lock);
	unsigned k = 0;
	for (unsigned i = 0; i < uctx->async_n; i++) {
		const struct ibv_async_event *ev = &uctx->async_q[i];
		bool its = of_qp ? async_event_is_qp(ev->event_type) && (const void *)ev->element.qp == obj
				 : ev->event_type == IBV_EVENT_CQ_ERR && (const void *)ev->element.cq == obj;
		if (!its)
			uctx->async_q[k++] = *ev;
	}
	uctx->async_n = k;
	pthread_mutex_unlock(&uctx->async_lock);
}

void qp_post_async_event(struct uroce_qp *qp, enum ibv_event_type type)
{
	struct ibv_async_event ev = { .event_type = type };

	ev.element.qp = &qp->ibv.qp_base;
	post_async_event(to_uctx(qp->ibv.qp_base.context), ev);
}

void cq_post_async_event(struct uroce_cq *cq, enum ibv_event_type type)
{
	struct ibv_async_event ev = { .event_type = type };

	ev.element.cq = (struct ibv_cq *)&cq->ibv;
	post_async_event(to_uctx(cq->ibv.context), ev);
}
