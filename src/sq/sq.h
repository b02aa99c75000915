/* Posting (sq/): work requests become WQEs. */
#ifndef UROCE_SQ_H
#define UROCE_SQ_H

#include "../core/device.h"

int uroce_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int uroce_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int uroce_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

#endif
