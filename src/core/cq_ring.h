#ifndef UROCE_CORE_CQ_RING_H
#define UROCE_CORE_CQ_RING_H

#include "device.h"

/* Add a completion; -1 on overrun.  `solicited`: the message asked for an
 * event (BTH SE), which fires a CQ armed for solicited completions. */
int cq_push(struct uroce_cq *cq, const struct ibv_wc *wc, bool solicited);
/* Remove the completions of QP `qpn` the application has not polled,
 * keeping the others in order (a QP moved to RESET: mlx5_cq_clean). */
void cq_purge_qp(struct uroce_cq *cq, uint32_t qpn);
/* The oldest completion into *wc: 1, or 0 when the CQ is empty. */
int cq_pop(struct uroce_cq *cq, struct ibv_wc *wc);
/* Up to num completions; returns how many. */
int cq_pop_many(struct uroce_cq *cq, struct ibv_wc *wc, int num);

#endif
