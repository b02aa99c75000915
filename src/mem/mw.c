/* Memory windows: binding, invalidation and the remote key check (mw.h).
 * The rules cite IBA 10.6.7 and follow rxe's rxe_mw.c where it is the
 * reference for the errors. */
#include "mw.h"

#define MW_REMOTE_ACCESS (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)

void mw_init(struct uroce_mw *mw, uint32_t key)
{
	pthread_spin_init(&mw->lock, PTHREAD_PROCESS_PRIVATE);
	mw->key = key;
	/* rxe: a type 1 window starts valid with nothing bound (length 0,
	 * no access), a type 2 one free until a BIND_MW WR */
	mw->state = mw->ibv.type == IBV_MW_TYPE_2 ? MW_FREE : MW_VALID;
}

/* Drop the MR and QP a window is bound to.  Under mw->lock. */
static void mw_unbind(struct uroce_mw *mw)
{
	if (mw->mr)
		atomic_fetch_sub(&mw->mr->nmw, 1);
	mw->mr = NULL;
	mw->mr_lkey = 0;
	mw->qp = NULL;
	mw->qpn = 0;
	mw->addr = mw->length = 0;
	mw->access = 0;
}

void mw_release(struct uroce_mw *mw)
{
	pthread_spin_lock(&mw->lock);
	mw_unbind(mw);
	mw->state = MW_FREE;
	mw->key = 0;
	pthread_spin_unlock(&mw->lock);
	pthread_spin_destroy(&mw->lock);
}

/* The window `w` binds may be bound so (rxe_check_bind_mw; IBA 10.6.7.2
 * C10-72..75, o10-36.2.2, o10-37.2.30/40).  Under mw->lock. */
static bool bind_ok(const struct uroce_qp *qp, const struct uroce_mw *mw, const struct uroce_send_wqe *w,
		    const struct uroce_mr *mr)
{
	bool zb = w->bind_access & IBV_ACCESS_ZERO_BASED;

	if (mw->ibv.type == IBV_MW_TYPE_1 && zb)
		return false;                   /* o10-36.2.2: no zero-based type 1 */
	if (mw->ibv.type == IBV_MW_TYPE_2) {
		if (mw->state != MW_FREE)       /* o10-37.2.30: invalidate first */
			return false;
		if (!qp->pd || to_upd(mw->ibv.pd)->protection != qp->pd->protection) /* C10-72 */
			return false;
		if (!w->bind_len)               /* o10-37.2.40: no zero-length type 2 bind */
			return false;
	}
	if (!w->bind_len)
		return true;                    /* type 1: unbinds */
	if (!mr || to_upd(mr->ibv.pd)->protection != to_upd(mw->ibv.pd)->protection)
		return false;                   /* the MR and the window share a PD */
	if (mr->access & IBV_ACCESS_ZERO_BASED)
		return false;                   /* rxe: no window on a zero-based MR */
	if (!(mr->access & IBV_ACCESS_MW_BIND))
		return false;                   /* C10-73 */
	if ((w->bind_access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(mr->access & IBV_ACCESS_LOCAL_WRITE))
		return false;                   /* C10-74 */
	/* C10-75: the window lies inside the MR (rxe checks only the length
	 * of a zero-based one; its start must be inside the MR all the same,
	 * since that is where its offset 0 lands) */
	return w->remote_addr >= mr->iova && w->bind_len <= mr->length &&
	       w->remote_addr - mr->iova <= mr->length - w->bind_len;
}

static enum ibv_wc_status mw_bind(struct uroce_qp *qp, struct uroce_send_wqe *w)
{
	/* the window by its key's index (the new rkey differs only in its low
	 * 8 bits), never through the WR's pointer: a window deallocated after
	 * the post is gone from the table (obj/mw.c fences the requester) */
	struct uroce_mw *mw = mem_mw_slot(w->rkey);
	struct uroce_mr *mr = w->bind_len ? mr_get(qp->dev, w->bind_lkey) : NULL;

	if (!mw || &mw->ibv != w->bind_mw)
		return IBV_WC_MW_BIND_ERR;
	pthread_spin_lock(&mw->lock);
	if (!bind_ok(qp, mw, w, mr)) {
		pthread_spin_unlock(&mw->lock);
		return IBV_WC_MW_BIND_ERR;
	}
	mw_unbind(mw);
	/* the consumer owns the key's low 8 bits (IBA 10.6.7.2.4): the
	 * old rkey stops working here */
	mw->key = (mw->key & ~0xFFu) | (w->rkey & 0xFFu);
	mw->ibv.rkey = mw->key;
	mw->state = MW_VALID;
	if (mr) {
		atomic_fetch_add(&mr->nmw, 1);
		mw->mr = mr;
		mw->mr_lkey = mr->ibv.lkey;
		mw->addr = w->remote_addr;
		mw->length = w->bind_len;
		mw->access = w->bind_access;
	}
	if (mw->ibv.type == IBV_MW_TYPE_2) {
		mw->qp = qp;
		mw->qpn = qp->qpn;
	}
	pthread_spin_unlock(&mw->lock);
	return IBV_WC_SUCCESS;
}

/* Invalidate the window `rkey` names for `qp`: only a bound type 2 window
 * (o10-37.2.26: type 1 windows cannot be invalidated) of the QP's PD, and
 * for a remote invalidation one bound to this QP.  rxe checks neither the
 * PD nor the QP (rxe_check_invalidate_mw); IBA 10.6.7.2.6 asks for both,
 * and without them any peer could revoke another QP's windows. */
static bool mw_invalidate(struct uroce_qp *qp, struct uroce_pd *pd, uint32_t rkey, bool remote)
{
	struct uroce_mw *mw = mem_mw_slot(rkey);
	bool ok;

	if (!mw)
		return false;
	pthread_spin_lock(&mw->lock);
	ok = mw->key == rkey && mw->ibv.type == IBV_MW_TYPE_2 && mw->state == MW_VALID &&
	     pd && to_upd(mw->ibv.pd)->protection == pd->protection && (!remote || (mw->qp == qp && mw->qpn == qp->qpn));
	if (ok) {
		mw_unbind(mw);
		mw->state = MW_FREE;
	}
	pthread_spin_unlock(&mw->lock);
	return ok;
}

enum ibv_wc_status mw_local_op(struct uroce_qp *qp, struct uroce_send_wqe *w)
{
	if (w->opcode == IBV_WR_BIND_MW)
		return mw_bind(qp, w);
	/* LOCAL_INV: uroce has no fast-registration MRs, so only a window's
	 * key can be invalidated (rxe: LOC_QP_OP_ERR otherwise) */
	return mw_invalidate(qp, qp->pd, w->imm_data, false) ? IBV_WC_SUCCESS : IBV_WC_LOC_QP_OP_ERR;
}

bool mw_invalidate_remote(struct uroce_qp *qp, struct uroce_pd *pd, uint32_t rkey)
{
	return mw_invalidate(qp, pd, rkey, true);
}

/* The window check (rxe_lookup_mw, then the MR's range as it is now: a
 * re-registered MR may no longer hold the window).  Under rx_lock, which
 * keeps mw->view stable for the caller's use of it. */
static enum uroce_mem_verdict mw_check(struct uroce_qp *qp, struct uroce_pd *pd, struct uroce_mw *mw, uint32_t rkey,
				       uint64_t va, uint64_t len, unsigned access, struct uroce_mr **out)
{
	enum uroce_mem_verdict v = MEM_OK;
	bool zb, probe = !(access & MEM_CHECK_NO_PROBE);
	struct uroce_mr *mr;

	access &= ~MEM_CHECK_NO_PROBE;

	pthread_spin_lock(&mw->lock);
	zb = mw->access & IBV_ACCESS_ZERO_BASED;
	mr = mw->mr ? mr_get(qp->dev, mw->mr_lkey) : NULL;
	if (mw->key != rkey || mw->state != MW_VALID || !mw->length || mr != mw->mr || !mr)
		v = MEM_KEY_INVALID;            /* unbound, invalidated, or a key of before */
	else if (!pd || to_upd(mw->ibv.pd)->protection != pd->protection)  /* as mem.c's MR check */
		v = MEM_PD_MISMATCH;
	else if (mw->ibv.type == IBV_MW_TYPE_2 && (mw->qp != qp || mw->qpn != qp->qpn))
		v = MEM_QP_MISMATCH;            /* IBA 10.6.7.2.4: type 2 works through its QP only */
	else if ((mw->access & access & MW_REMOTE_ACCESS) != access)
		v = MEM_ACCESS;
	else if (mw->addr < mr->iova || mw->length > mr->length || mw->addr - mr->iova > mr->length - mw->length)
		v = MEM_BOUNDS;                 /* the MR shrank or moved under the window */
	if (v == MEM_OK) {
		mw->view.ibv = mr->ibv;
		mw->view.iova = zb ? 0 : mw->addr;
		mw->view.host = mr_host(mr, mw->addr);
		mw->view.length = mw->length;
		mw->view.access = mw->access;
		uint64_t off = zb ? va : va - mw->addr;
		if ((!zb && va < mw->addr) || len > mw->length || off > mw->length - len)
			v = MEM_BOUNDS;
	}
	pthread_spin_unlock(&mw->lock);
	/* a window on an ODP MR: the mapping is checked as for the MR itself
	 * (mem.c mr_check), so a peer cannot make the responder touch a hole */
	if (v == MEM_OK && probe && (mw->view.access & IBV_ACCESS_ON_DEMAND || (mr->access & IBV_ACCESS_ON_DEMAND)) &&
	    !mem_populate(mr_host(&mw->view, va), len, access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)))
		v = MEM_UNMAPPED;
	if (v == MEM_OK)
		*out = &mw->view;
	return v;
}

enum uroce_mem_verdict rkey_check_remote(struct uroce_qp *qp, struct uroce_pd *pd, uint32_t rkey, uint64_t va,
					 uint64_t len, unsigned access, struct uroce_mr **out)
{
	struct uroce_mw *mw = mem_mw_slot(rkey);

	if (mw)
		return mw_check(qp, pd, mw, rkey, va, len, access, out);
	return mr_check_remote(qp->dev, pd, rkey, va, len, access, out);
}
