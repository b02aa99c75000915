/* Receive queues (a QP's own, or shared: SRQ) as objects: their storage,
 * and the SRQ verbs, XRC SRQs with their numbers too (IBA A14).  Posting to them is sq/post.c's. */
#include "obj.h"
#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>

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

	if (srq->srqn) {
		int rc = xrc_srq_unpublish(srq);  /* an XRC SRQ: its number goes first */
		if (rc)
			return rc;
	} else {
		pthread_mutex_lock(&dev->lock);
		if (srq->refcnt) {
			pthread_mutex_unlock(&dev->lock);
			return EBUSY;
		}
		pthread_mutex_unlock(&dev->lock);
	}
	atomic_fetch_sub(&to_upd(ibsrq->pd)->refcnt, 1);
	rq_fini(&srq->rq);
	free(srq);
	return 0;
}

/* An XRC SRQ (ibv_create_srq_ex with IBV_SRQT_XRC): an SRQ of `pd` whose
 * receives complete to `cq`, numbered so that requests can name it, in
 * the XRC domain of `xrcd` (all four are required, as ib_uverbs asks). */
struct ibv_srq *uroce_create_xrc_srq(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *a)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	const uint32_t need = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
			      IBV_SRQ_INIT_ATTR_CQ;

	if ((a->comp_mask & need) != need || !a->pd || a->pd->context != ctx || !a->xrcd ||
	    a->xrcd->context != ctx || !a->cq || a->cq->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_srq_init_attr b = { .srq_context = a->srq_context, .attr = a->attr };
	struct ibv_srq *ibs = uroce_create_srq(a->pd, &b);
	if (!ibs)
		return NULL;
	a->attr = b.attr;
	struct uroce_srq *srq = to_usrq(ibs);
	uint16_t salt;
	if (getrandom(&salt, sizeof(salt), GRND_NONBLOCK) != sizeof(salt))
		salt = (uint16_t)now_ns();

	/* publish under rx_lock and dev->lock, as a QP is (qp.c) */
	pthread_mutex_lock(&dev->rx_lock);
	pthread_mutex_lock(&dev->lock);
	uint32_t idx = 0;
	for (uint32_t tries = 0; tries < UROCE_MAX_SRQ; tries++) {
		uint32_t i = dev->srqn_next++ & (UROCE_MAX_SRQ - 1);
		if (i && !atomic_load(&dev->srq_table[i])) {
			idx = i;
			break;
		}
	}
	if (!idx) {
		pthread_mutex_unlock(&dev->lock);
		pthread_mutex_unlock(&dev->rx_lock);
		uroce_destroy_srq(ibs);
		errno = ENOMEM;
		return NULL;
	}
	srq->srqn = (uint32_t)(salt & 0xFFF) << 12 | idx;  /* 24 bits (§2.2) */
	srq->xrcd = to_uxrcd(a->xrcd);
	srq->cq = to_ucq(a->cq);
	srq->xrcd->refcnt++;
	srq->cq->refcnt++;
	atomic_store_explicit(&dev->srq_table[idx], srq, memory_order_release);
	pthread_mutex_unlock(&dev->lock);
	pthread_mutex_unlock(&dev->rx_lock);
	return ibs;
}

/* The XRC SRQ leaves its number (uroce_destroy_srq, before it is freed):
 * unpublished under rx_lock, no request finds it any more, and a TGT QP
 * that last received into it forgets it -- with the receive a message
 * under way took from it, which goes with the SRQ uncompleted, as the
 * SRQ's other WQEs do.  Returns EBUSY when SRQ-attached QPs still use it. */
int xrc_srq_unpublish(struct uroce_srq *srq)
{
	struct uroce_dev *dev = to_uctx(srq->ibv.context)->dev;

	pthread_mutex_lock(&dev->rx_lock);
	pthread_mutex_lock(&dev->lock);
	if (srq->refcnt) {
		pthread_mutex_unlock(&dev->lock);
		pthread_mutex_unlock(&dev->rx_lock);
		return EBUSY;
	}
	atomic_store(&dev->srq_table[srq->srqn & (UROCE_MAX_SRQ - 1)], NULL);
	for (struct uroce_qp *qp = dev->qp_list; qp; qp = qp->next_in_dev) {
		if (qp->type != IBV_QPT_XRC_RECV)
			continue;
		pthread_mutex_lock(&qp->lock);
		if (qp->resp.xrc_srq == srq) {
			qp->resp.xrc_srq = NULL;
			qp->resp.cur_recv_valid = false;
			qp->resp.in_send = false;
		}
		pthread_mutex_unlock(&qp->lock);
	}
	srq->xrcd->refcnt--;
	srq->cq->refcnt--;
	srq->srqn = 0;
	pthread_mutex_unlock(&dev->lock);
	pthread_mutex_unlock(&dev->rx_lock);
	return 0;
}

int uroce_get_srq_num(struct ibv_srq *ibs, uint32_t *num)
{
	struct uroce_srq *srq = to_usrq(ibs);

	if (!srq->srqn)
		return EINVAL;  /* only XRC SRQs are numbered */
	*num = srq->srqn;
	return 0;
}
