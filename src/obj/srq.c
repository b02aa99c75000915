/* Receive queues (a QP's own, or shared: SRQ) as objects: their storage,
 * and the SRQ verbs.  Posting to them is sq/post.c's. */
#include "obj.h"
#include <errno.h>
#include <stdlib.h>

int rq_init(struct uroce_rq *rq, uint32_t max_wr, uint32_t max_sge)
{
	rq->max_wr = max_wr ? max_wr : 1;
	rq->max_sge = max_sge ? max_sge : 1;
	rq->wqe = calloc(rq->max_wr, sizeof(*rq->wqe));
	rq->sges = calloc((size_t)rq->max_wr * rq->max_sge, sizeof(*rq->sges));
	if (!rq->wqe || !rq->sges)
		return ENOMEM;
	for (uint32_t i = 0; i < rq->max_wr; i++)
		rq->wqe[i].sge = rq->sges + (size_t)i * rq->max_sge;
	pthread_spin_init(&rq->lock, PTHREAD_PROCESS_PRIVATE);
	return 0;
}

void rq_fini(struct uroce_rq *rq)
{
	free(rq->wqe);
	free(rq->sges);
}


struct ibv_srq *uroce_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct uroce_srq *srq;

	if (!attr->attr.max_wr || attr->attr.max_wr > UROCE_MAX_SRQ_WR || attr->attr.max_sge > UROCE_MAX_SGE ||
	    attr->attr.srq_limit > attr->attr.max_wr) {
		errno = EINVAL;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq || rq_init(&srq->rq, attr->attr.max_wr, attr->attr.max_sge)) {
		free(srq);
		errno = ENOMEM;
		return NULL;
	}
	srq->ibv.context = pd->context;
	srq->ibv.srq_context = attr->srq_context;
	srq->ibv.pd = pd;
	pthread_mutex_init(&srq->ibv.mutex, NULL);
	pthread_cond_init(&srq->ibv.cond, NULL);
	srq->srq_limit = attr->attr.srq_limit;
	atomic_fetch_add(&to_upd(pd)->refcnt, 1);
	return &srq->ibv;
}

int uroce_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
	struct uroce_srq *srq = to_usrq(ibsrq);

	if (mask & IBV_SRQ_MAX_WR)
		return EINVAL; /* resizing an SRQ is not offered */
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit > srq->rq.max_wr)
			return EINVAL;
		srq->srq_limit = attr->srq_limit;
	}
	return 0;
}

int uroce_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct uroce_srq *srq = to_usrq(ibsrq);

	attr->max_wr = srq->rq.max_wr;
	attr->max_sge = srq->rq.max_sge;
	attr->srq_limit = srq->srq_limit;
	return 0;
}

int uroce_destroy_srq(struct ibv_srq *ibsrq)
{
	struct uroce_srq *srq = to_usrq(ibsrq);
	struct uroce_dev *dev = to_uctx(ibsrq->context)->dev;

	pthread_mutex_lock(&dev->lock);
	if (srq->refcnt) {
		pthread_mutex_unlock(&dev->lock);
		return EBUSY;
	}
	pthread_mutex_unlock(&dev->lock);
	atomic_fetch_sub(&to_upd(ibsrq->pd)->refcnt, 1);
	rq_fini(&srq->rq);
	free(srq);
	return 0;
}
