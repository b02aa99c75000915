#ifndef UROCE_CORE_ASYNC_H
#define UROCE_CORE_ASYNC_H

#include "device.h"

/* An async event of the QP on its context's queue. */
void qp_post_async_event(struct uroce_qp *qp, enum ibv_event_type type);
/* An async event of the CQ (IBV_EVENT_CQ_ERR) on its context's queue. */
void cq_post_async_event(struct uroce_cq *cq, enum ibv_event_type type);
/* The unread events of a QP (of_qp) or a CQ being destroyed go with it, as
 * the kernel drops them; those read must be acknowledged first. */
void async_drop_events(struct uroce_context *uctx, const void *obj, bool of_qp);
/* Is an event of this type about a QP (element.qp)? */
bool async_event_is_qp(enum ibv_event_type t);

#endif
