/* Posting (sq/): work requests become WQEs. */
#ifndef UROCE_SQ_H
#define UROCE_SQ_H

#include "../core/device.h"

int uroce_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int uroce_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int uroce_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* Queues a list of WRs all or none (ibv_wr_complete); 0 or ibv_post_send's errno. */
int sq_post_batch(struct uroce_qp *qp, struct ibv_send_wr *wr);

/* Posts held back to leave with later ones (post.c, post_cork) are sent:
 * called by every CQ poll and arm, a lock-free look when there are none. */
void sq_send_corked(struct uroce_dev *dev);
/* A QP being destroyed leaves the device's list of corked QPs. */
void sq_cork_gone(struct uroce_qp *qp);

/* The ibv_wr_* API (qpex.c).  qpex_create checks send_ops_flags against the
 * QP's type (EOPNOTSUPP for one it does not take) and fills qp->ibv's wr_*
 * pointers and qp->qpex; an errno on failure.  qpex_free frees what it made. */
int qpex_create(struct uroce_qp *qp, uint64_t send_ops_flags);
void qpex_free(struct uroce_qp *qp);

#endif
