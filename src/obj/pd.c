/* Parent domains (ibv_alloc_parent_domain(3)): a PD that stands for a
 * protection domain and carries the application's allocators for the
 * provider's queue memory.  MRs, QPs, SRQs and AHs made on one are
 * protected by its protection domain (mem.c compares pd->protection), so an
 * MR of the PD serves a QP of its parent domain and the other way round.
 * uroce's queue memory is its send queues' WQE rings and the CQ rings of
 * CQs created with IBV_CQ_INIT_ATTR_MASK_PD: those come from the
 * allocator, which may answer IBV_ALLOCATOR_USE_DEFAULT.  The resource
 * types passed are mlx5dv's numbers (QP 1, SRQ 4, CQ 5), so an allocator
 * written for mlx5 sees familiar ones.  No thread domain is offered
 * (ibv_alloc_td is EOPNOTSUPP), so a td is refused. */
#include "obj.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ibv_pd *uroce_alloc_parent_domain(struct ibv_context *ctx, struct ibv_parent_domain_init_attr *attr)
{
	const uint32_t known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;

	/* mlx5_alloc_parent_domain: a PD of this context, known comp_mask bits,
	 * both allocators or none */
	if (!attr->pd || attr->pd->context != ctx || to_upd(attr->pd)->parent || attr->td ||
	    (attr->comp_mask & ~known) ||
	    ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) && (!attr->alloc || !attr->free))) {
		errno = EINVAL;
		return NULL;
	}
	struct uroce_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->ibv.context = ctx;
	pd->ibv.handle = attr->pd->handle;
	pd->protection = to_upd(attr->pd);
	pd->parent = true;
	pd->pa.comp_mask = attr->comp_mask;
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
		pd->pa.alloc = attr->alloc;
		pd->pa.free = attr->free;
	}
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
		pd->pa.pd_context = attr->pd_context;
	atomic_init(&pd->refcnt, 0);
	atomic_fetch_add(&pd->protection->refcnt, 1);   /* the PD stays while its parent domains live */
	return &pd->ibv;
}

void *pd_buf_alloc(struct uroce_pd *pd, size_t size, uint64_t type, bool *custom)
{
	*custom = false;
	if (pd && pd->parent && (pd->pa.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS)) {
		void *p = pd->pa.alloc(&pd->ibv, pd->pa.pd_context, size, 64, type);
		if (p != IBV_ALLOCATOR_USE_DEFAULT) {
			if (p) {
				memset(p, 0, size);
				*custom = true;
			}
			return p;
		}
	}
	return calloc(1, size);
}

void pd_buf_free(struct uroce_pd *pd, void *p, uint64_t type, bool custom)
{
	if (!p)
		return;
	if (custom)
		pd->pa.free(&pd->ibv, pd->pa.pd_context, p, type);
	else
		free(p);
}
