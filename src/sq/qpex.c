/* The extended QP's work-request API (ibv_wr_*, man ibv_wr_post(3)).
 *
 * verbs.h's inline ibv_wr_* wrappers call the pointers of the QP's struct
 * ibv_qp_ex (verbs-abi.md, "Dispatch"); qpex_create fills every one of them,
 * so none is NULL whatever send_ops_flags asked for.  A batch is built in
 * per-QP storage sized at create time -- one struct ibv_send_wr, its SGEs and
 * an inline area per send queue slot, so building allocates nothing -- and
 * wr_complete hands the list to sq/post.c's one queuing path, all or none.
 *
 * Semantics (as mlx5's, where rdma-core documents none):
 * - wr_start enters the QP's critical region (a per-QP mutex, not qp->lock:
 *   the engine keeps running the QP's responder and completer while the
 *   application builds); wr_complete / wr_abort leave it (ibv_wr_post(3)
 *   "CONCURRENCY").
 * - each builder appends one WR taking qp_ex->wr_id and wr_flags as they are
 *   at that call; the setters fill the last WR built.  IBV_SEND_INLINE in
 *   wr_flags means nothing here: inline data is what wr_set_inline_data* set.
 * - the first failure -- a builder not in send_ops_flags (EINVAL, what
 *   ibv_post_send answers for an opcode the QP does not take), more WRs than
 *   the send queue has slots or than it has free at wr_complete (ENOMEM),
 *   inline data beyond max_inline_data, an SGE list beyond max_send_sge, or
 *   anything ibv_post_send refuses (EINVAL in a state that does not post) --
 *   makes wr_complete return that errno and drops the whole batch
 *   (ibv_wr_post(3): "the entire posting will be aborted").
 * - wr_abort drops the batch. */
#include "sq.h"
#include "../core/wr.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct uroce_qpex {
	pthread_mutex_t lock;       /* the critical region: wr_start .. wr_complete / wr_abort */
	uint64_t ops;               /* send_ops_flags */
	uint32_t cap;               /* WRs a batch holds: the send queue's slots */
	uint32_t max_sge;           /* SGEs per WR: the QP's max_send_sge */
	uint32_t inl_size;          /* inline bytes per WR: max_inline_data, at least 8 */
	uint32_t n;                 /* WRs built */
	int err;                    /* the first failure: wr_complete returns it */
	struct ibv_send_wr *cur;    /* the WR the setters fill, NULL before a builder */
	struct ibv_send_wr *wr;     /* cap WRs */
	struct ibv_sge *sge;        /* cap x max_sge */
	uint8_t *inl;               /* cap x inl_size */
};

/* The builders each QP type takes: those whose work-request opcode the QP
 * type takes in ibv_post_send (core/wr.h, the one table of which opcode
 * goes with which QP type), so a QP is never created with a builder its
 * wr_complete would refuse.  TSO is a raw packet QP's only. */
static const struct { uint64_t flag; enum ibv_wr_opcode op; } qpex_builders[] = {
	{ IBV_QP_EX_WITH_RDMA_WRITE, IBV_WR_RDMA_WRITE },
	{ IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM },
	{ IBV_QP_EX_WITH_SEND, IBV_WR_SEND },
	{ IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_WR_SEND_WITH_IMM },
	{ IBV_QP_EX_WITH_RDMA_READ, IBV_WR_RDMA_READ },
	{ IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_CMP_AND_SWP },
	{ IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_FETCH_AND_ADD },
	{ IBV_QP_EX_WITH_LOCAL_INV, IBV_WR_LOCAL_INV },
	{ IBV_QP_EX_WITH_BIND_MW, IBV_WR_BIND_MW },
	{ IBV_QP_EX_WITH_SEND_WITH_INV, IBV_WR_SEND_WITH_INV },
	{ IBV_QP_EX_WITH_ATOMIC_WRITE, IBV_WR_ATOMIC_WRITE },
};

static uint64_t qpex_ops_of(enum ibv_qp_type t)
{
	uint64_t ops = 0;

	for (size_t i = 0; i < sizeof(qpex_builders) / sizeof(qpex_builders[0]); i++)
		if (wr_allowed(qpex_builders[i].op, t))
			ops |= qpex_builders[i].flag;
	return ops;
}

static struct uroce_qp *qp_of(struct ibv_qp_ex *q) { return container_of(q, struct uroce_qp, ibv); }

static void batch_fail(struct uroce_qpex *x, int err)
{
	if (!x->err)
		x->err = err;
	x->cur = NULL;
}

/* A builder's new WR, or NULL when the batch failed (the setters that
 * follow then do nothing). */
static struct ibv_send_wr *wr_new(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint64_t flag)
{
	struct uroce_qpex *x = qp_of(q)->qpex;

	if (x->err)
		return NULL;
	if (!(x->ops & flag)) {
		batch_fail(x, EINVAL);
		return NULL;
	}
	if (x->n >= x->cap) {
		batch_fail(x, ENOMEM);  /* more WRs than the send queue could ever hold */
		return NULL;
	}
	struct ibv_send_wr *wr = &x->wr[x->n];
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = q->wr_id;
	wr->opcode = op;
	wr->send_flags = q->wr_flags & ~(unsigned)IBV_SEND_INLINE;
	wr->sg_list = &x->sge[(size_t)x->n * x->max_sge];
	x->n++;
	x->cur = wr;
	return wr;
}

/* ---------------------------------------------------------------- builders */

static void qx_send(struct ibv_qp_ex *q)
{
	wr_new(q, IBV_WR_SEND, IBV_QP_EX_WITH_SEND);
}

static void qx_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	struct ibv_send_wr *wr = wr_new(q, IBV_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM);
	if (wr)
		wr->imm_data = imm;
}

static void qx_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct ibv_send_wr *wr = wr_new(q, IBV_WR_SEND_WITH_INV, IBV_QP_EX_WITH_SEND_WITH_INV);
	if (wr)
		wr->invalidate_rkey = rkey;
}

static void qx_send_tso(struct ibv_qp_ex *q, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr; (void)hdr_sz; (void)mss;
	wr_new(q, IBV_WR_TSO, IBV_QP_EX_WITH_TSO);  /* never in ops: fails the batch */
}

static struct ibv_send_wr *rdma_new(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint64_t flag, uint32_t rkey,
				    uint64_t raddr)
{
	struct ibv_send_wr *wr = wr_new(q, op, flag);
	if (wr) {
		wr->wr.rdma.rkey = rkey;
		wr->wr.rdma.remote_addr = raddr;
	}
	return wr;
}

static void qx_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr)
{
	rdma_new(q, IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE, rkey, raddr);
}

static void qx_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, __be32 imm)
{
	struct ibv_send_wr *wr = rdma_new(q, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, rkey, raddr);
	if (wr)
		wr->imm_data = imm;
}

static void qx_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr)
{
	rdma_new(q, IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ, rkey, raddr);
}

static void atomic_new(struct ibv_qp_ex *q, enum ibv_wr_opcode op, uint64_t flag, uint32_t rkey, uint64_t raddr,
		       uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr *wr = wr_new(q, op, flag);
	if (wr) {
		wr->wr.atomic.rkey = rkey;
		wr->wr.atomic.remote_addr = raddr;
		wr->wr.atomic.compare_add = compare_add;
		wr->wr.atomic.swap = swap;
	}
}

static void qx_atomic_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, uint64_t compare, uint64_t swap)
{
	atomic_new(q, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, rkey, raddr, compare, swap);
}

static void qx_atomic_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, uint64_t add)
{
	atomic_new(q, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, rkey, raddr, add, 0);
}

/* The 8 bytes are copied now (the caller may reuse them at once, as with
 * inline data) into the WR's inline area and go to post.c as an inline
 * SGE, which keeps them in the WQE. */
static void qx_atomic_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr, const void *atomic_wr)
{
	struct uroce_qpex *x = qp_of(q)->qpex;
	struct ibv_send_wr *wr = rdma_new(q, IBV_WR_ATOMIC_WRITE, IBV_QP_EX_WITH_ATOMIC_WRITE, rkey, raddr);
	if (!wr)
		return;
	uint8_t *buf = x->inl + (size_t)(x->n - 1) * x->inl_size;
	memcpy(buf, atomic_wr, 8);
	wr->sg_list[0] = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 8 };
	wr->num_sge = 1;
	wr->send_flags |= IBV_SEND_INLINE;
}

static void qx_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	struct ibv_send_wr *wr = wr_new(q, IBV_WR_BIND_MW, IBV_QP_EX_WITH_BIND_MW);
	if (wr) {
		wr->bind_mw.mw = mw;
		wr->bind_mw.rkey = rkey;
		if (info)
			wr->bind_mw.bind_info = *info;
	}
}

static void qx_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	struct ibv_send_wr *wr = wr_new(q, IBV_WR_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV);
	if (wr)
		wr->invalidate_rkey = rkey;
}

/* ----------------------------------------------------------------- setters */

/* The WR a setter fills; a setter before any builder fails the batch. */
static struct ibv_send_wr *wr_cur(struct ibv_qp_ex *q)
{
	struct uroce_qpex *x = qp_of(q)->qpex;

	if (!x->cur && !x->err)
		batch_fail(x, EINVAL);
	return x->cur;
}

static void qx_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *list)
{
	struct uroce_qpex *x = qp_of(q)->qpex;
	struct ibv_send_wr *wr = wr_cur(q);
	if (!wr)
		return;
	if (n > x->max_sge) {
		batch_fail(x, EINVAL);  /* ibv_post_send: num_sge > max_send_sge */
		return;
	}
	if (n)
		memcpy(wr->sg_list, list, n * sizeof(*list));
	wr->num_sge = (int)n;
	wr->send_flags &= ~(unsigned)IBV_SEND_INLINE;
}

static void qx_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };
	qx_set_sge_list(q, 1, &sge);
}

static void qx_set_inline_data_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *bufs)
{
	struct uroce_qpex *x = qp_of(q)->qpex;
	struct ibv_send_wr *wr = wr_cur(q);
	if (!wr)
		return;
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += bufs[i].length;
	if (total > qp_of(q)->cap.max_inline_data) {
		batch_fail(x, EINVAL);  /* ibv_post_send: more inline bytes than max_inline_data */
		return;
	}
	/* copied now: the caller may reuse its buffers when the setter returns */
	uint8_t *buf = x->inl + (size_t)(wr - x->wr) * x->inl_size;
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		if (!bufs[i].length)   /* may have no address: nothing to copy */
			continue;
		memcpy(buf + off, bufs[i].addr, bufs[i].length);
		off += bufs[i].length;
	}
	wr->sg_list[0] = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = (uint32_t)total };
	wr->num_sge = 1;
	wr->send_flags |= IBV_SEND_INLINE;
}

static void qx_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t length)
{
	struct ibv_data_buf b = { .addr = addr, .length = length };
	qx_set_inline_data_list(q, 1, &b);
}

static void qx_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct ibv_send_wr *wr = wr_cur(q);
	if (wr) {
		wr->wr.ud.ah = ah;
		wr->wr.ud.remote_qpn = remote_qpn;
		wr->wr.ud.remote_qkey = remote_qkey;
	}
}

static void qx_set_xrc_srqn(struct ibv_qp_ex *q, uint32_t remote_srqn)
{
	struct ibv_send_wr *wr = wr_cur(q);
	if (wr)
		wr->qp_type.xrc.remote_srqn = remote_srqn;
}

/* ------------------------------------------------------------ the region */

static void batch_reset(struct uroce_qpex *x)
{
	x->n = 0;
	x->err = 0;
	x->cur = NULL;
}

static void qx_start(struct ibv_qp_ex *q)
{
	struct uroce_qpex *x = qp_of(q)->qpex;

	/* an error-checking mutex: a second wr_start by the thread inside the
	 * region (EDEADLK) restarts its batch instead of hanging */
	pthread_mutex_lock(&x->lock);
	batch_reset(x);
}

static int qx_complete(struct ibv_qp_ex *q)
{
	struct uroce_qp *qp = qp_of(q);
	struct uroce_qpex *x = qp->qpex;
	int rc = x->err;

	if (!rc && x->n) {
		for (uint32_t i = 0; i + 1 < x->n; i++)
			x->wr[i].next = &x->wr[i + 1];
		x->wr[x->n - 1].next = NULL;
		rc = sq_post_batch(qp, x->wr);
	}
	batch_reset(x);
	pthread_mutex_unlock(&x->lock);
	return rc;
}

static void qx_abort(struct ibv_qp_ex *q)
{
	struct uroce_qpex *x = qp_of(q)->qpex;

	batch_reset(x);
	pthread_mutex_unlock(&x->lock);
}

/* ---------------------------------------------------------- create, free */

int qpex_create(struct uroce_qp *qp, uint64_t ops)
{
	if (ops & ~qpex_ops_of(qp->type))
		return EOPNOTSUPP;  /* ibv_wr_post(3): creation fails for an operation not supported */
	struct uroce_qpex *x = calloc(1, sizeof(*x));
	if (!x)
		return ENOMEM;
	x->ops = ops;
	x->cap = qp->sq_size;
	x->max_sge = qp->cap.max_send_sge;
	x->inl_size = qp->cap.max_inline_data > 8 ? qp->cap.max_inline_data : 8;
	x->wr = calloc(x->cap, sizeof(*x->wr));
	x->sge = calloc((size_t)x->cap * x->max_sge, sizeof(*x->sge));
	x->inl = malloc((size_t)x->cap * x->inl_size);
	if (!x->wr || !x->sge || !x->inl) {
		free(x->wr);
		free(x->sge);
		free(x->inl);
		free(x);
		return ENOMEM;
	}
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
	pthread_mutex_init(&x->lock, &ma);
	pthread_mutexattr_destroy(&ma);

	struct ibv_qp_ex *q = &qp->ibv;
	q->comp_mask = 0;
	q->wr_id = 0;
	q->wr_flags = 0;
	q->wr_atomic_cmp_swp = qx_atomic_cmp_swp;
	q->wr_atomic_fetch_add = qx_atomic_fetch_add;
	q->wr_bind_mw = qx_bind_mw;
	q->wr_local_inv = qx_local_inv;
	q->wr_rdma_read = qx_rdma_read;
	q->wr_rdma_write = qx_rdma_write;
	q->wr_rdma_write_imm = qx_rdma_write_imm;
	q->wr_send = qx_send;
	q->wr_send_imm = qx_send_imm;
	q->wr_send_inv = qx_send_inv;
	q->wr_send_tso = qx_send_tso;
	q->wr_set_ud_addr = qx_set_ud_addr;
	q->wr_set_xrc_srqn = qx_set_xrc_srqn;
	q->wr_set_inline_data = qx_set_inline_data;
	q->wr_set_inline_data_list = qx_set_inline_data_list;
	q->wr_set_sge = qx_set_sge;
	q->wr_set_sge_list = qx_set_sge_list;
	q->wr_start = qx_start;
	q->wr_complete = qx_complete;
	q->wr_abort = qx_abort;
	q->wr_atomic_write = qx_atomic_write;
	qp->qpex = x;
	return 0;
}

void qpex_free(struct uroce_qp *qp)
{
	struct uroce_qpex *x = qp->qpex;

	if (!x)
		return;
	pthread_mutex_destroy(&x->lock);
	free(x->wr);
	free(x->sge);
	free(x->inl);
	free(x);
	qp->qpex = NULL;
}
