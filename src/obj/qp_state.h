#ifndef UROCE_QP_STATE_H
#define UROCE_QP_STATE_H
#include <infiniband/verbs.h>
#include <stdbool.h>

/* ib_modify_qp_is_ok semantics: transition exists, required attributes
 * present, nothing outside required|optional. */
bool qp_modify_is_ok(enum ibv_qp_state cur, enum ibv_qp_state next, enum ibv_qp_type type, unsigned mask);
const char *qp_state_name(enum ibv_qp_state s);
#endif
