/* Protection domains and memory regions: the verbs.  Keys, the MR table and
 * the memory checks are mem/'s (mem.h). */
#include "obj.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "../mem/mem.h"

struct ibv_pd *uroce_alloc_pd(struct ibv_context *ctx)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	struct uroce_pd *pd;

	pthread_mutex_lock(&dev->lock);
	if (dev->npd >= UROCE_MAX_PD) {
		pthread_mutex_unlock(&dev->lock);
		errno = ENOMEM;
		return NULL;
	}
	dev->npd++;
	pthread_mutex_unlock(&dev->lock);
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->ibv.context = ctx;
	pd->ibv.handle = dev->npd;
	pd->protection = pd;
	atomic_init(&pd->refcnt, 0);
	return &pd->ibv;
}

int uroce_dealloc_pd(struct ibv_pd *ibpd)
{
	struct uroce_pd *pd = to_upd(ibpd);
	struct uroce_dev *dev = to_uctx(ibpd->context)->dev;

	if (atomic_load(&pd->refcnt))
		return EBUSY;
	if (pd->parent) {   /* obj/pd.c: not one of the device's PDs */
		atomic_fetch_sub(&pd->protection->refcnt, 1);
		free(pd);
		return 0;
	}
	pthread_mutex_lock(&dev->lock);
	dev->npd--;
	pthread_mutex_unlock(&dev->lock);
	free(pd);
	return 0;
}

#define MR_KNOWN_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
	IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND | \
	IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_OPTIONAL_RANGE)

static int check_access(unsigned access)
{
	if (access & ~(unsigned)MR_KNOWN_ACCESS)
		return EINVAL;
	/* IBA: remote write or atomic access requires local write (C10-...;
	 * ib_core's ib_check_mr_access) */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	return 0;
}

struct ibv_mr *uroce_reg_mr_iova(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova, unsigned access)
{
	struct uroce_dev *dev = to_uctx(ibpd->context)->dev;
	struct uroce_mr *mr;
	int rc;

	/* optional access bits are hints a device may ignore (verbs.h) */
	access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;
	rc = check_access(access);
	/* ib_uverbs_reg_mr: the iova keeps the address's offset in its page */
	if (!rc && !(access & IBV_ACCESS_ZERO_BASED) && ((iova ^ (uintptr_t)addr) & 4095))
		rc = EINVAL;
	/* ODP (IBV_ACCESS_ON_DEMAND): all of uroce's memory is on demand, as
	 * nothing is pinned, so an ODP MR is an ordinary one whose accesses are
	 * checked against the mapping (mem.c, mr_check).  The implicit one
	 * (ibv_reg_mr(3)) covers the whole address space from iova 0, and
	 * mlx5 refuses it with any other iova. */
	bool implicit = mr_is_implicit(addr, length, access);
	if (implicit && iova)
		rc = EINVAL;
	if (rc || length == 0 || (length > (1ull << 40) && !implicit)) {
		errno = rc ? rc : EINVAL;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&dev->rx_lock);
	uint32_t key = mem_key_alloc();
	if (!key) {
		pthread_mutex_unlock(&dev->rx_lock);
		free(mr);
		errno = ENOMEM;
		return NULL;
	}
	uint32_t idx = mem_key_index(key);
	mr->ibv.context = ibpd->context;
	mr->ibv.pd = ibpd;
	mr->ibv.addr = addr;
	mr->ibv.length = length;
	mr->ibv.handle = idx;
	mr->ibv.lkey = mr->ibv.rkey = key;
	mr->iova = (access & IBV_ACCESS_ZERO_BASED) ? 0 : iova;
	mr->host = addr;
	mr->length = implicit ? UINT64_MAX : length;
	mr->access = access;
	mem_mr_publish(mr);
	pthread_mutex_unlock(&dev->rx_lock);
	atomic_fetch_add(&to_upd(ibpd)->refcnt, 1);
	pthread_mutex_lock(&dev->lock);
	dev->nmr++;
	pthread_mutex_unlock(&dev->lock);
	return &mr->ibv;
}

/* Unpublish an MR and wait until no execution can still be using it.
 * Every use of an MR -- a key looked up and its host pointer used -- lies
 * within one hold of dev->rx_lock (responder, completer, timers) or of a
 * qp->lock (the requester, also run by ibv_post_send with qp->lock alone;
 * mem.h).  The MR leaves the table under rx_lock, so receive-path uses
 * after it fail the lookup; then each QP's lock is taken and released once
 * (rx_lock -> dev->lock -> qp->lock, the documented order), so a requester
 * that looked the MR up before has finished, and one that starts later
 * sees the empty slot (its lock acquisition orders it after the store).
 * Called and returns with rx_lock held, so the caller can change the MR and
 * publish it again before any packet sees it.  O(QPs), as mlx5's dereg is
 * a command to the device; nothing on the fast path pays for it. */
void obj_fence_executions(struct uroce_dev *dev)
{
	pthread_mutex_lock(&dev->lock);
	for (struct uroce_qp *qp = dev->qp_list; qp; qp = qp->next_in_dev) {
		pthread_mutex_lock(&qp->lock);
		pthread_mutex_unlock(&qp->lock);
	}
	pthread_mutex_unlock(&dev->lock);
}

static void mr_unpublish_fenced(struct uroce_dev *dev, struct uroce_mr *mr)
{
	mem_mr_unpublish(mr);
	obj_fence_executions(dev);
}

/* ibv_dereg_mr(3) while work requests still name the MR returns 0 (rxe and
 * mlx5 do); those WQEs find the lkey gone when they execute and complete in
 * error without touching the memory (mem.h). */
int uroce_dereg_mr(struct ibv_mr *ibmr)
{
	struct uroce_mr *mr = to_umr(ibmr);
	struct uroce_dev *dev = to_uctx(ibmr->context)->dev;

	pthread_mutex_lock(&dev->rx_lock);
	/* IBA 10.6.7.2.6: not while windows are bound to it -- rxe's
	 * rxe_dereg_mr answers EINVAL (mlx5 lets it go and the windows die) */
	if (atomic_load(&mr->nmw)) {
		pthread_mutex_unlock(&dev->rx_lock);
		return EINVAL;
	}
	mr_unpublish_fenced(dev, mr);
	/* a bind that found the MR before it left the table has run by now
	 * (the fence); after it none can, so the count can only fall */
	if (atomic_load(&mr->nmw)) {
		mem_mr_publish(mr);
		pthread_mutex_unlock(&dev->rx_lock);
		return EINVAL;
	}
	pthread_mutex_unlock(&dev->rx_lock);
	atomic_fetch_sub(&to_upd(ibmr->pd)->refcnt, 1);
	if (mr->dm)
		atomic_fetch_sub(&mr->dm->refcnt, 1);
	pthread_mutex_lock(&dev->lock);
	dev->nmr--;
	pthread_mutex_unlock(&dev->lock);
	free(mr);
	return 0;
}

/* ibv_advise_mr(3): a prefetch faults the pages of an ODP MR's range in
 * (mem_populate), for reading or, with PREFETCH_WRITE, for writing;
 * PREFETCH_NO_FAULT only makes present pages the device's, which they
 * always are here.  The errors are mlx5's (mlx5_ib_advise_mr): an advice
 * it does not know is EOPNOTSUPP, a flag other than FLUSH EINVAL (uverbs),
 * an lkey that is not an ODP MR of this PD (or not writable for
 * PREFETCH_WRITE) ENOENT when synchronous (IBV_ADVISE_MR_FLAG_FLUSH) and
 * EINVAL when not, and with FLUSH a range outside the MR or not mapped
 * EFAULT (the man page); without FLUSH the prefetch is best effort. */
int uroce_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
		    uint32_t num_sge)
{
	struct uroce_dev *dev = to_uctx(pd->context)->dev;
	bool sync = flags & IBV_ADVISE_MR_FLAG_FLUSH;

	if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return EOPNOTSUPP;
	if ((flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH) || !num_sge || !sg_list)
		return EINVAL;
	bool write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
	for (uint32_t i = 0; i < num_sge; i++) {
		struct uroce_seg seg = { 0 };
		struct uroce_sge sge = { sg_list[i].addr, sg_list[i].length, sg_list[i].lkey };
		uint32_t nseg;
		pthread_mutex_lock(&dev->rx_lock);
		struct uroce_mr *mr = mr_get(dev, sg_list[i].lkey);
		enum uroce_mem_verdict v = !mr || !(mr->access & IBV_ACCESS_ON_DEMAND) ? MEM_KEY_INVALID :
			mem_sge_resolve(dev, to_upd(pd), &sge, 1, 0, sge.length,
					(write ? IBV_ACCESS_LOCAL_WRITE : 0) | MEM_CHECK_NO_PROBE, &seg, &nseg);
		pthread_mutex_unlock(&dev->rx_lock);
		if (v == MEM_BOUNDS && !sync)
			continue;
		if (v == MEM_BOUNDS)
			return EFAULT;
		if (v != MEM_OK)
			return sync ? ENOENT : EINVAL;
		/* outside rx_lock: a fault may take long, and only touches page
		 * tables (a range unmapped meanwhile just fails) */
		if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT && !mem_populate(seg.addr, seg.len, write) && sync)
			return EFAULT;
	}
	return 0;
}

int uroce_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct uroce_mr *mr = to_umr(ibmr);
	struct uroce_dev *dev = to_uctx(ibmr->context)->dev;

	/* argument checks done by rdma-core's ibv_rereg_mr before the command */
	if ((flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS)) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!length || !addr)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	/* checks the kernel makes (ib_uverbs_rereg_mr): a failed command */
	if (!flags || ((flags & IBV_REREG_MR_CHANGE_ACCESS) &&
		       check_access((unsigned)access & ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE)) ||
	    ((flags & IBV_REREG_MR_CHANGE_PD) && (!pd || pd->context != ibmr->context))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_CMD;
	}
	/* "Conceptually ... deregister followed by register" (ibv_rereg_mr(3)):
	 * out of the table and fenced while it changes, so no execution sees
	 * a half-changed MR or keeps using the old translation */
	pthread_mutex_lock(&dev->rx_lock);
	/* IBA 10.6.7.2.6 as for deregistration: not while windows are bound
	 * to it (their ranges were checked against this translation) */
	if (atomic_load(&mr->nmw)) {
		pthread_mutex_unlock(&dev->rx_lock);
		errno = EINVAL;
		return IBV_REREG_MR_ERR_CMD;
	}
	mr_unpublish_fenced(dev, mr);
	if (atomic_load(&mr->nmw)) {  /* a bind raced the check: see dereg */
		mem_mr_publish(mr);
		pthread_mutex_unlock(&dev->rx_lock);
		errno = EINVAL;
		return IBV_REREG_MR_ERR_CMD;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		mr->ibv.addr = addr;
		mr->ibv.length = length;
		mr->host = addr;
		mr->iova = (mr->access & IBV_ACCESS_ZERO_BASED) ? 0 : (uint64_t)(uintptr_t)addr;
		mr->length = length;
	}
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		mr->access = (unsigned)access & ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		atomic_fetch_sub(&to_upd(mr->ibv.pd)->refcnt, 1);
		atomic_fetch_add(&to_upd(pd)->refcnt, 1);
		mr->ibv.pd = pd;
	}
	/* Keys: kept when only the PD and/or access change, as mlx5 does (it
	 * changes them in place on the same mkey; pyverbs test_mr_rereg_access
	 * goes on using the old rkey).  A new translation gets new keys: a peer
	 * still holding the old rkey, or a WQE posted with the old lkey, meant
	 * the old memory, and must fail (REM_ACCESS_ERR / LOC_PROT_ERR) rather
	 * than reach whatever the new range holds at those addresses. */
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION)
		mr->ibv.lkey = mr->ibv.rkey = mem_key_renew(mr->ibv.lkey);
	mem_mr_publish(mr);
	pthread_mutex_unlock(&dev->rx_lock);
	return 0;
}

