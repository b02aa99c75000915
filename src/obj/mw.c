/* Memory windows: the verbs (ibv_alloc_mw, ibv_dealloc_mw, ibv_bind_mw).
 * The window objects and their rules are mem/'s (mem/mw.h). */
#include "obj.h"
#include <errno.h>
#include <stdlib.h>
#include "../mem/mw.h"
#include "../sq/sq.h"

struct ibv_mw *uroce_alloc_mw(struct ibv_pd *ibpd, enum ibv_mw_type type)
{
	struct uroce_dev *dev = to_uctx(ibpd->context)->dev;
	struct uroce_mw *mw;

	/* ib_uverbs_alloc_mw: types 1 and 2 only, EINVAL for others */
	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		errno = EINVAL;
		return NULL;
	}
	mw = calloc(1, sizeof(*mw));
	pthread_mutex_lock(&dev->rx_lock);
	uint32_t key = mw ? mem_key_alloc() : 0;  /* 0: the key table is full */
	if (key) {
		mw->ibv.context = ibpd->context;
		mw->ibv.pd = ibpd;
		mw->ibv.rkey = key;
		mw->ibv.handle = mem_key_index(key);
		mw->ibv.type = type;
		mw_init(mw, key);
		mem_mw_publish(key, mw);
	}
	pthread_mutex_unlock(&dev->rx_lock);
	if (!key) {
		free(mw);
		errno = ENOMEM;
		return NULL;
	}
	atomic_fetch_add(&to_upd(ibpd)->refcnt, 1);
	return &mw->ibv;
}

/* A bound window may be deallocated: it is unbound first (rxe_dealloc_mw),
 * and its rkey stops working at once. */
int uroce_dealloc_mw(struct ibv_mw *ibmw)
{
	struct uroce_mw *mw = to_umw(ibmw);
	struct uroce_dev *dev = to_uctx(ibmw->context)->dev;

	/* out of the table, then fenced as a deregistered MR is (obj/mr.c):
	 * a BIND or LOCAL_INV the requester runs under qp->lock alone finds
	 * the window by its key's index, so after the fence none can use it */
	pthread_mutex_lock(&dev->rx_lock);
	mem_mw_unpublish(mw->key);
	obj_fence_executions(dev);
	mw_release(mw);
	pthread_mutex_unlock(&dev->rx_lock);
	atomic_fetch_sub(&to_upd(ibmw->pd)->refcnt, 1);
	free(mw);
	return 0;
}

/* man ibv_bind_mw: a type 1 bind is a work request on qp's send queue; it
 * completes IBV_WC_BIND_MW, and mw->rkey is the new key at once (rxe's
 * provider: "user has to undo this if he gets an error wc").  libibverbs'
 * inline ibv_bind_mw has refused other types, an address without an MR,
 * and an MR of another PD (EPERM). */
int uroce_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	struct ibv_send_wr wr = { .wr_id = b->wr_id, .opcode = IBV_WR_BIND_MW, .send_flags = b->send_flags }, *bad;
	int rc;

	if (mw->type != IBV_MW_TYPE_1 || (b->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED))
		return EINVAL; /* o10-36.2.2, rxe_bind_mw */
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = b->bind_info;
	rc = uroce_post_send(qp, &wr, &bad);
	if (!rc)
		mw->rkey = wr.bind_mw.rkey;
	return rc;
}
