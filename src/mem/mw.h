/* Memory windows (IBA 10.6.7; man ibv_alloc_mw, ibv_bind_mw): the window
 * objects, the rules of binding and invalidating them, and the remote key
 * check that accepts an rkey naming an MR or a bound window.
 *
 * A window shares the key table with the MRs (mem.h): its rkey's index
 * names it, the random parts make it unguessable, and a bind replaces the
 * low 8 bits.  Type 1 windows belong to their PD and are bound with
 * ibv_bind_mw; type 2 windows are bound by an IBV_WR_BIND_MW work request
 * to the QP that posted it, and only that QP's requests may use them.
 *
 * Locks: a window's own spinlock guards its binding, taken inside
 * qp->lock (bind and LOCAL_INV run in the requester) and inside rx_lock
 * (the responder's checks and remote invalidation).  Allocation and
 * deallocation change the key table under rx_lock, as MRs do, so the
 * responder never sees a freed window. */
#ifndef UROCE_MEM_MW_H
#define UROCE_MEM_MW_H

#include "mem.h"

enum uroce_mw_state {
	MW_FREE,   /* type 2, unbound (IBA 10.6.7.2.4) */
	MW_VALID,  /* bound: type 1 always (a zero-length bind leaves it unusable) */
};

struct uroce_mw {
	struct ibv_mw ibv;            /* ibv.rkey: what the application was told */
	pthread_spinlock_t lock;
	enum uroce_mw_state state;
	uint32_t key;                 /* the rkey that names it now */
	uint64_t addr, length;        /* the range, in the MR's address space */
	unsigned access;              /* IBV_ACCESS_* of the bind */
	struct uroce_mr *mr;          /* bound to (its nmw counts this window), or NULL */
	uint32_t mr_lkey;             /* that MR's key when bound: a changed key is a dead window */
	const struct uroce_qp *qp;    /* type 2: the QP it is bound to (compared, never used) */
	uint32_t qpn;
	struct uroce_mr view;         /* what the responder may touch, as an MR (mw_check) */
};

static inline struct uroce_mw *to_umw(struct ibv_mw *m) { return container_of(m, struct uroce_mw, ibv); }

/* A new window on `key` (not yet published), and the end of one: its
 * binding released.  Under rx_lock. */
void mw_init(struct uroce_mw *mw, uint32_t key);
void mw_release(struct uroce_mw *mw);

/* The requester's execution of a WRK_LOCAL WQE (BIND_MW, LOCAL_INV), under
 * qp->lock: the completion status (IBV_WC_MW_BIND_ERR for a refused bind,
 * IBV_WC_LOC_QP_OP_ERR for a refused invalidation, as rxe's requester). */
enum ibv_wc_status mw_local_op(struct uroce_qp *qp, struct uroce_send_wqe *w);

/* Remote invalidation (SEND_WITH_INVALIDATE's IETH), at the responder:
 * false when the rkey names no window this QP may invalidate. */
bool mw_invalidate_remote(struct uroce_qp *qp, struct uroce_pd *pd, uint32_t rkey);

/* The responder's key check: an rkey naming a window is checked against
 * the window (state, `pd` -- the QP's, or an XRC TGT's SRQ's --, QP for type 2,
 * access, range) and its MR; any
 * other goes to mr_check_remote.  *out is an MR whose mr_host() maps the
 * request's addresses (a window's view: zero-based windows translate). */
enum uroce_mem_verdict rkey_check_remote(struct uroce_qp *qp, struct uroce_pd *pd, uint32_t rkey, uint64_t va,
					 uint64_t len, unsigned access, struct uroce_mr **out);

#endif
