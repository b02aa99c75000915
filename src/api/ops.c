/* The one ops table: context->ops (called by the header's inline wrappers,
 * several without a NULL check, so every slot there is a real function) and
 * the verbs_context extended ops.  What uroce does not offer yet answers
 * EOPNOTSUPP here, in one place. */
#include <errno.h>
#include <string.h>
#include "ops.h"
#include "../exec/exec.h"

static struct ibv_srq *create_srq_ex(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *a)
{
	if ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type == IBV_SRQT_XRC &&
	    !(a->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
					  IBV_SRQ_INIT_ATTR_CQ)))
		return uroce_create_xrc_srq(ctx, a);
	if ((a->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD)) ||
	    ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type != IBV_SRQT_BASIC)) {
		errno = EOPNOTSUPP; /* tag-matching SRQs */
		return NULL;
	}
	if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd || a->pd->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_srq_init_attr b = { .srq_context = a->srq_context, .attr = a->attr };
	struct ibv_srq *s = uroce_create_srq(a->pd, &b);
	if (s)
		a->attr = b.attr;
	return s;
}

/* ibv_req_notify_cq: armed, the application blocks next (exec_poll_block) */
static int req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	int rc = uroce_req_notify_cq(cq, solicited_only);
	if (rc == 0)
		exec_poll_block(to_ucq(cq)->dev);
	return rc;
}

void uroce_fill_ops(struct verbs_context *v)
{
	struct ibv_context_ops *o = &v->context.ops;

	memset(o, 0, sizeof(*o));
	o->post_send = uroce_post_send;
	o->post_recv = uroce_post_recv;
	o->post_srq_recv = uroce_post_srq_recv;
	o->poll_cq = uroce_poll_cq;
	o->req_notify_cq = req_notify_cq;
	o->alloc_mw = uroce_alloc_mw;
	o->bind_mw = uroce_bind_mw;
	o->dealloc_mw = uroce_dealloc_mw;

	v->query_port = uroce_query_port;
	v->query_device_ex = uroce_query_device_ex;
	v->create_cq_ex = uroce_create_cq_ex;
	v->create_qp_ex = uroce_create_qp_ex;
	v->create_srq_ex = create_srq_ex;
	v->open_xrcd = uroce_open_xrcd;
	v->close_xrcd = uroce_close_xrcd;
	v->get_srq_num = uroce_get_srq_num;
	v->open_qp = uroce_open_qp;
	v->advise_mr = uroce_advise_mr;
	v->alloc_parent_domain = uroce_alloc_parent_domain;
	v->alloc_dm = uroce_alloc_dm;
	v->free_dm = uroce_free_dm;
	v->reg_dm_mr = uroce_reg_dm_mr;
}
