/*
 * test_objects.c - verbs object-rule conformance checks for uroce.
 *
 * Written only against the public <infiniband/verbs.h> API (Debian 12,
 * libibverbs-dev 44), so the same binary can be pointed at any RoCE device.
 * The expected values are what rdma-core 44's libibverbs plus a kernel
 * provider (rxe, the model uroce follows; mlx5 where noted) return; the
 * function that decides each one is cited next to the check.
 *
 * Conventions being checked (rdma-core 44):
 *   - int-returning verbs return 0 or a positive errno value (not -1), e.g.
 *     ibv_dealloc_pd, ibv_modify_qp, ibv_query_port, ibv_destroy_cq;
 *   - object-returning verbs return NULL and set errno;
 *   - ibv_query_gid / ibv_query_pkey return -1 on error (libibverbs/verbs.c);
 *   - ibv_query_gid_table returns a negative errno on error.
 *
 * Output: one line per check, "ok NAME" or "not ok NAME: expected X got Y"
 * ("ok NAME # SKIP why" for checks that do not apply), then a final line
 * "N passed, M failed" (", K skipped" appended when K > 0).  Exit 1 if any
 * check failed.
 *
 * Each group runs in its own freshly exec'd copy of this program (with the
 * environment, so LD_PRELOAD of the library under test, inherited): a crash
 * or hang (60 s alarm) in one group is reported as a failure of that group
 * and the other groups still run.
 *
 *   test_objects                run every group, each in a child process
 *   test_objects GROUP...       run the named groups, each in a child
 *   test_objects --inline       run every group in this process
 *   test_objects --group GROUP  run one group in this process (used by the
 *                               parent; prints no summary line)
 *   test_objects --list         list the groups
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEV_NAME "uroce0"
/* more GIDs than a process has (uroce: at most 4 addresses) */
#define UROCE_TEST_GIDS 16

/* ------------------------------------------------------------------ */
/* Reporting                                                           */
/* ------------------------------------------------------------------ */

static int n_pass, n_fail, n_skip;
static const char *cur_group = "main";

static const char *errname(int e)
{
	switch (e < 0 ? -e : e) {
	case 0: return "OK";
	case EPERM: return "EPERM";
	case ENOENT: return "ENOENT";
	case EIO: return "EIO";
	case ENXIO: return "ENXIO";
	case EBADF: return "EBADF";
	case EAGAIN: return "EAGAIN";
	case ENOMEM: return "ENOMEM";
	case EACCES: return "EACCES";
	case EFAULT: return "EFAULT";
	case EBUSY: return "EBUSY";
	case EEXIST: return "EEXIST";
	case ENODEV: return "ENODEV";
	case EINVAL: return "EINVAL";
	case ENOSPC: return "ENOSPC";
	case ERANGE: return "ERANGE";
	case ENOSYS: return "ENOSYS";
	case ENODATA: return "ENODATA";
	case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ETIMEDOUT: return "ETIMEDOUT";
	default: return "E?";
	}
}

static void pass(const char *name)
{
	printf("ok %s\n", name);
	n_pass++;
}

static void skip(const char *name, const char *why)
{
	printf("ok %s # SKIP %s\n", name, why);
	n_skip++;
}

static void fail(const char *name, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void fail(const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("not ok %s: ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	n_fail++;
}

static bool check(const char *name, bool cond, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static bool check(const char *name, bool cond, const char *fmt, ...)
{
	va_list ap;

	if (cond) {
		pass(name);
		return true;
	}
	printf("not ok %s: ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	n_fail++;
	return false;
}

static bool expect_i(const char *name, long long exp, long long got)
{
	return check(name, exp == got, "expected %lld got %lld", exp, got);
}

static bool expect_x(const char *name, unsigned long long exp,
		     unsigned long long got)
{
	return check(name, exp == got, "expected 0x%llx got 0x%llx", exp, got);
}

static bool expect_ge(const char *name, long long min, long long got)
{
	return check(name, got >= min, "expected >= %lld got %lld", min, got);
}

/* For verbs that return 0 or an errno value. */
static bool expect_ret(const char *name, int exp, int got)
{
	return check(name, exp == got, "expected %d (%s%s) got %d (%s%s)",
		     exp, exp < 0 ? "-" : "", errname(exp),
		     got, got < 0 ? "-" : "", errname(got));
}

typedef void (*dtor_fn)(void *);

static void d_mr(void *p) { ibv_dereg_mr(p); }
static void d_cq(void *p) { ibv_destroy_cq(p); }
static void d_qp(void *p) { ibv_destroy_qp(p); }
static void d_ah(void *p) { ibv_destroy_ah(p); }
static void d_srq(void *p) { ibv_destroy_srq(p); }
static void d_xrcd(void *p) { ibv_close_xrcd(p); }

static void expect_null_(const char *name, void *obj, int err, int experr,
			 dtor_fn d)
{
	if (obj) {
		fail(name, "expected NULL with errno %d (%s) got a non-NULL object",
		     experr, errname(experr));
		if (d)
			d(obj);
		return;
	}
	check(name, err == experr,
	      "expected NULL with errno %d (%s) got NULL with errno %d (%s)",
	      experr, errname(experr), err, errname(err));
}

/* Object-returning verb expected to fail with NULL + errno. */
#define EXPECT_NULL(name, expr, experr, dtor)                                  \
	do {                                                                   \
		errno = 0;                                                     \
		void *o__ = (void *)(expr);                                    \
		int e__ = errno;                                               \
		expect_null_((name), o__, e__, (experr), (dtor));              \
	} while (0)

/* Object-returning verb expected to succeed; assigns var. */
#define EXPECT_OBJ(name, var, expr)                                            \
	do {                                                                   \
		errno = 0;                                                     \
		(var) = (expr);                                                \
		int e__ = errno;                                               \
		check((name), (var) != NULL,                                   \
		      "expected an object got NULL with errno %d (%s)", e__,   \
		      errname(e__));                                           \
	} while (0)

static const char *rereg_name(int rc)
{
	switch (rc) {
	case 0: return "OK";
	case IBV_REREG_MR_ERR_INPUT: return "IBV_REREG_MR_ERR_INPUT";
	case IBV_REREG_MR_ERR_DONT_FORK_NEW: return "IBV_REREG_MR_ERR_DONT_FORK_NEW";
	case IBV_REREG_MR_ERR_DO_FORK_OLD: return "IBV_REREG_MR_ERR_DO_FORK_OLD";
	case IBV_REREG_MR_ERR_CMD: return "IBV_REREG_MR_ERR_CMD";
	case IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW: return "IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW";
	default: return "?";
	}
}

static const char *gidstr(const union ibv_gid *g, char *buf, size_t len)
{
	if (!inet_ntop(AF_INET6, g->raw, buf, len))
		snprintf(buf, len, "?");
	return buf;
}

static const char *nm(const char *a, const char *b)
{
	static char buf[256];

	snprintf(buf, sizeof buf, "%s_%s", a, b);
	return buf;
}

/* ------------------------------------------------------------------ */
/* Fixture                                                             */
/* ------------------------------------------------------------------ */

struct fixture {
	struct ibv_device **list;
	struct ibv_device *dev;
	struct ibv_context *ctx;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	union ibv_gid gid0;
	uint8_t rd_atom;	/* power of two <= min(4, max_qp_init_rd_atom) */
	uint8_t dest_rd_atom;	/* power of two <= min(4, max_qp_rd_atom) */
	uint32_t sge;		/* min(2, max_sge) */
};

static struct fixture F;

static uint8_t pow2_upto4(int max)
{
	if (max >= 4)
		return 4;
	if (max >= 2)
		return 2;
	if (max >= 1)
		return 1;
	return 0;
}

static struct ibv_device *find_dev(struct ibv_device **list)
{
	for (int i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), DEV_NAME))
			return list[i];
	return NULL;
}

static bool fx_open(void)
{
	const char *setup = nm(cur_group, "setup");
	int rc;

	memset(&F, 0, sizeof F);
	F.list = ibv_get_device_list(NULL);
	F.dev = find_dev(F.list);
	if (!F.dev) {
		fail(setup, "expected device %s in ibv_get_device_list got none",
		     DEV_NAME);
		goto err;
	}
	F.ctx = ibv_open_device(F.dev);
	if (!F.ctx) {
		fail(setup, "expected ibv_open_device to succeed got NULL errno %d (%s)",
		     errno, errname(errno));
		goto err;
	}
	rc = ibv_query_device(F.ctx, &F.da);
	if (rc) {
		fail(setup, "expected ibv_query_device 0 got %d", rc);
		goto err;
	}
	rc = ibv_query_port(F.ctx, 1, &F.pa);
	if (rc) {
		fail(setup, "expected ibv_query_port(1) 0 got %d", rc);
		goto err;
	}
	rc = ibv_query_gid(F.ctx, 1, 0, &F.gid0);
	if (rc) {
		fail(setup, "expected ibv_query_gid(1, 0) 0 got %d", rc);
		goto err;
	}
	F.rd_atom = pow2_upto4(F.da.max_qp_init_rd_atom);
	F.dest_rd_atom = pow2_upto4(F.da.max_qp_rd_atom);
	F.sge = F.da.max_sge >= 2 ? 2 : 1;
	return true;
err:
	if (F.ctx)
		ibv_close_device(F.ctx);
	if (F.list)
		ibv_free_device_list(F.list);
	memset(&F, 0, sizeof F);
	return false;
}

static void fx_close(void)
{
	if (F.ctx) {
		int rc = ibv_close_device(F.ctx);

		if (rc)
			fail(nm(cur_group, "close_device"), "expected 0 got %d", rc);
	}
	if (F.list)
		ibv_free_device_list(F.list);
	memset(&F, 0, sizeof F);
}

/* 64 KiB of page-aligned memory for MRs. */
static unsigned char buf[16 * 4096] __attribute__((aligned(4096)));

/* ------------------------------------------------------------------ */
/* QP helpers                                                          */
/* ------------------------------------------------------------------ */

#define RQ_PSN 0x123456u
#define SQ_PSN 0x654321u
#define QKEY 0x11111111u
#define QP_ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define HOP_LIMIT 64
#define MIN_RNR 12
#define TIMEOUT 14

#define ALL_QP_MASK                                                            \
	(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS |  \
	 IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |       \
	 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT |   \
	 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |                 \
	 IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_CAP)

static struct ibv_qp *mk_qp(struct ibv_pd *pd, struct ibv_cq *cq,
			    enum ibv_qp_type t, struct ibv_qp_init_attr *out)
{
	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof ia);
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = t;
	ia.sq_sig_all = 1;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = F.sge;
	ia.cap.max_recv_sge = F.sge;
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (out)
		*out = ia;
	return qp;
}

/* Every attribute filled with the values used for target state st. */
static void std_attr(struct ibv_qp *qp, enum ibv_qp_state st,
		     struct ibv_qp_attr *a)
{
	memset(a, 0, sizeof *a);
	a->qp_state = st;
	a->pkey_index = 0;
	a->port_num = 1;
	a->qp_access_flags = QP_ACCESS;
	a->qkey = QKEY;
	a->path_mtu = IBV_MTU_1024;
	a->dest_qp_num = qp->qp_num;	/* connected to itself */
	a->rq_psn = RQ_PSN;
	a->max_dest_rd_atomic = F.dest_rd_atom;
	a->min_rnr_timer = MIN_RNR;
	a->ah_attr.is_global = 1;
	a->ah_attr.grh.dgid = F.gid0;
	a->ah_attr.grh.sgid_index = 0;
	a->ah_attr.grh.hop_limit = HOP_LIMIT;
	a->ah_attr.port_num = 1;
	a->timeout = TIMEOUT;
	a->retry_cnt = 7;
	a->rnr_retry = 7;
	a->sq_psn = SQ_PSN;
	a->max_rd_atomic = F.rd_atom;
}

/* Required attributes per kernel qp_state_table (drivers/infiniband/core/verbs.c). */
static int std_mask(enum ibv_qp_type t, enum ibv_qp_state st)
{
	int m;

	switch (st) {
	case IBV_QPS_INIT:
		return IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
		       (t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
	case IBV_QPS_RTR:
		if (t == IBV_QPT_UD)
			return IBV_QP_STATE;
		m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
		    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (t == IBV_QPT_RC || t == IBV_QPT_XRC_RECV)
			m |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		return m;
	case IBV_QPS_RTS:
		if (t == IBV_QPT_XRC_RECV)
			return IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
		if (t != IBV_QPT_RC && t != IBV_QPT_XRC_SEND)
			return IBV_QP_STATE | IBV_QP_SQ_PSN;
		return IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
	default:
		return IBV_QP_STATE;
	}
}

static int step(struct ibv_qp *qp, enum ibv_qp_state st)
{
	struct ibv_qp_attr a;

	std_attr(qp, st, &a);
	return ibv_modify_qp(qp, &a, std_mask(qp->qp_type, st));
}

static int query_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof a);
	memset(&ia, 0, sizeof ia);
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return (int)a.qp_state;
}

/* Move qp (via RESET) to target.  Returns 0 or the first failing rc. */
static int drive(struct ibv_qp *qp, enum ibv_qp_state target)
{
	static const enum ibv_qp_state path[] = {
		IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD
	};
	int rc = step(qp, IBV_QPS_RESET);

	if (rc || target == IBV_QPS_RESET)
		return rc;
	if (target == IBV_QPS_ERR) {
		rc = step(qp, IBV_QPS_INIT);
		return rc ? rc : step(qp, IBV_QPS_ERR);
	}
	for (size_t i = 0; i < sizeof path / sizeof path[0]; i++) {
		rc = step(qp, path[i]);
		if (rc || path[i] == target)
			return rc;
	}
	return EINVAL;
}

/*
 * A modify that must be rejected.  If it is accepted, the QP is put back
 * in the state it had so later checks are not disturbed.
 */
static void bad_modify(const char *name, struct ibv_qp *qp,
		       struct ibv_qp_attr *a, int mask, int experr)
{
	int before = query_state(qp);
	int rc = ibv_modify_qp(qp, a, mask);

	expect_ret(name, experr, rc);
	if (rc == 0 && before >= 0) {
		printf("# %s: modify unexpectedly accepted, restoring state %d\n",
		       name, before);
		drive(qp, (enum ibv_qp_state)before);
	}
}

static void expect_state(const char *name, struct ibv_qp *qp,
			 enum ibv_qp_state st)
{
	int got = query_state(qp);

	check(name, got == (int)st && qp->state == st,
	      "expected ibv_query_qp state %d and qp->state %d got %d and %d",
	      st, st, got, qp->state);
}

/* How many GIDs the port has (ibv_query_gid_table lists valid ones). */
static int valid_gids(void)
{
	struct ibv_gid_entry tbl[UROCE_TEST_GIDS];
	ssize_t n = ibv_query_gid_table(F.ctx, tbl, UROCE_TEST_GIDS, 0);

	return n < 0 ? 0 : (int)n;
}

static struct ibv_mr *reg_buf(struct ibv_pd *pd)
{
	return ibv_reg_mr(pd, buf, sizeof buf,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			  IBV_ACCESS_REMOTE_READ);
}

static int poll_cq_for(struct ibv_cq *cq, struct ibv_wc *wc, int want,
		       int timeout_ms)
{
	struct timespec t0, t;
	int got = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, want - got, wc + got);

		if (n < 0)
			return n;
		got += n;
		if (got >= want)
			return got;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 +
		    (t.tv_nsec - t0.tv_nsec) / 1000000 > timeout_ms)
			return got;
		usleep(1000);
	}
}

/* ------------------------------------------------------------------ */
/* Group: device                                                       */
/* ------------------------------------------------------------------ */

static void g_device(void)
{
	struct ibv_device **list;
	struct ibv_device *dev;
	struct ibv_context *ctx, *ctx2;
	struct ibv_device_attr da;
	struct ibv_device_attr_ex dx;
	struct ibv_port_attr pa;
	union ibv_gid g, g2;
	struct ibv_gid_entry ge;
	char s1[64], s2[64];
	int n = -1, rc;

	list = ibv_get_device_list(&n);
	if (!check("device_list", list != NULL,
		   "expected a device list got NULL errno %d (%s)", errno,
		   errname(errno)))
		return;
	expect_ge("device_list_count", 1, n);
	check("device_list_null_terminated", n >= 0 && list[n] == NULL,
	      "expected list[%d] == NULL got %p", n, n >= 0 ? (void *)list[n] : NULL);
	dev = find_dev(list);
	if (!check("device_list_has_" DEV_NAME, dev != NULL,
		   "expected a device named " DEV_NAME " got %d other device(s)", n)) {
		ibv_free_device_list(list);
		return;
	}
	expect_i("device_node_type_ca", IBV_NODE_CA, dev->node_type);
	expect_i("device_transport_ib", IBV_TRANSPORT_IB, dev->transport_type);
	__be64 guid = ibv_get_device_guid(dev);
	check("device_guid_nonzero", guid != 0, "expected nonzero node GUID got 0");

	errno = 0;
	ctx = ibv_open_device(dev);
	if (!check("device_open", ctx != NULL, "expected a context got NULL errno %d (%s)",
		   errno, errname(errno))) {
		ibv_free_device_list(list);
		return;
	}
	check("context_device", ctx->device == dev, "expected ctx->device %p got %p",
	      (void *)dev, (void *)ctx->device);
	expect_ge("context_num_comp_vectors", 1, ctx->num_comp_vectors);

	/* ibv_query_device */
	memset(&da, 0, sizeof da);
	rc = ibv_query_device(ctx, &da);
	expect_ret("query_device", 0, rc);
	expect_ge("query_device_max_qp", 1, da.max_qp);
	expect_ge("query_device_max_qp_wr", 1, da.max_qp_wr);
	expect_ge("query_device_max_sge", 1, da.max_sge);
	expect_ge("query_device_max_cq", 1, da.max_cq);
	expect_ge("query_device_max_cqe", 1, da.max_cqe);
	expect_ge("query_device_max_mr", 1, da.max_mr);
	check("query_device_max_mr_size", da.max_mr_size > 0, "expected > 0 got 0");
	expect_ge("query_device_max_pd", 1, da.max_pd);
	check("query_device_vendor_id", da.vendor_id != 0, "expected nonzero got 0");
	expect_i("query_device_phys_port_cnt", 1, da.phys_port_cnt);
	check("query_device_page_size_cap", da.page_size_cap != 0,
	      "expected nonzero got 0");
	expect_ge("query_device_max_qp_rd_atom", 1, da.max_qp_rd_atom);
	expect_ge("query_device_max_qp_init_rd_atom", 1, da.max_qp_init_rd_atom);
	/* ibv_get_device_guid (sysfs node_guid) and query_device node_guid are
	 * the same value in rdma-core. */
	expect_x("query_device_node_guid_matches_device_guid", guid, da.node_guid);
	check("query_device_fw_ver_terminated",
	      memchr(da.fw_ver, 0, sizeof da.fw_ver) != NULL,
	      "expected a NUL-terminated fw_ver got none");

	/* ibv_query_device_ex (inline; dispatches to the context op) */
	memset(&dx, 0xa5, sizeof dx);
	rc = ibv_query_device_ex(ctx, NULL, &dx);
	expect_ret("query_device_ex_null_input", 0, rc);
	{
		struct ibv_query_device_ex_input in = { .comp_mask = 0 };

		memset(&dx, 0xa5, sizeof dx);
		rc = ibv_query_device_ex(ctx, &in, &dx);
		expect_ret("query_device_ex_comp_mask_0", 0, rc);
	}
	if (rc == 0) {
		check("query_device_ex_orig_attr_matches",
		      dx.orig_attr.max_qp == da.max_qp &&
		      dx.orig_attr.max_qp_wr == da.max_qp_wr &&
		      dx.orig_attr.max_sge == da.max_sge &&
		      dx.orig_attr.max_cqe == da.max_cqe &&
		      dx.orig_attr.max_mr_size == da.max_mr_size &&
		      dx.orig_attr.vendor_id == da.vendor_id &&
		      dx.orig_attr.phys_port_cnt == da.phys_port_cnt &&
		      dx.orig_attr.node_guid == da.node_guid,
		      "expected orig_attr == ibv_query_device got max_qp %d/%d max_qp_wr %d/%d max_sge %d/%d max_cqe %d/%d vendor 0x%x/0x%x ports %d/%d",
		      dx.orig_attr.max_qp, da.max_qp, dx.orig_attr.max_qp_wr,
		      da.max_qp_wr, dx.orig_attr.max_sge, da.max_sge,
		      dx.orig_attr.max_cqe, da.max_cqe, dx.orig_attr.vendor_id,
		      da.vendor_id, dx.orig_attr.phys_port_cnt, da.phys_port_cnt);
	}

	/* ibv_query_port */
	memset(&pa, 0xa5, sizeof pa);
	rc = ibv_query_port(ctx, 1, &pa);
	expect_ret("query_port_1", 0, rc);
	expect_i("query_port_state_active", IBV_PORT_ACTIVE, pa.state);
	expect_i("query_port_link_layer_ethernet", IBV_LINK_LAYER_ETHERNET,
		 pa.link_layer);
	{
		/* UROCE_MTU, else rxe's rule on the interface MTU: the largest
		 * IB MTU <= MTU - 80 (roce-wire.md §7); the automatic address
		 * is on lo */
		int want = -1;
		const char *e = getenv("UROCE_MTU");
		if (e && *e) {
			for (int m = IBV_MTU_256; m <= IBV_MTU_4096; m++)
				if (atoi(e) == 128 << m)
					want = m;
		} else if (!getenv("UROCE_ADDR")) {
			FILE *f = fopen("/sys/class/net/lo/mtu", "r");
			unsigned mtu = 0;
			if (f && fscanf(f, "%u", &mtu) == 1) {
				want = IBV_MTU_256;
				while (want < IBV_MTU_4096 && (128u << (want + 1)) + 80 <= mtu)
					want++;
			}
			if (f)
				fclose(f);
		}
		if (want >= 0)
			expect_i("query_port_active_mtu_from_interface", want, pa.active_mtu);
		else
			expect_ge("query_port_active_mtu_valid", IBV_MTU_256, pa.active_mtu);
	}
	expect_ge("query_port_max_mtu_ge_active", pa.active_mtu, pa.max_mtu);
	expect_ge("query_port_gid_tbl_len", 1, pa.gid_tbl_len);
	expect_ge("query_port_pkey_tbl_len", 1, pa.pkey_tbl_len);
	/* RoCE ports have no LID (rxe and mlx5 report 0). */
	expect_i("query_port_lid_zero_on_roce", 0, pa.lid);
	/* IB phys state 5 = LinkUp (rxe_query_port / mlx5 on an up netdev). */
	expect_i("query_port_phys_state_linkup", 5, pa.phys_state);
	check("query_port_max_msg_sz", pa.max_msg_sz > 0, "expected > 0 got 0");
	/* ib_query_port(): !rdma_is_port_valid() -> -EINVAL, returned by
	 * rdma-core as the positive errno value. */
	rc = ibv_query_port(ctx, 2, &pa);
	expect_ret("query_port_2_einval", EINVAL, rc);
	rc = ibv_query_port(ctx, 0, &pa);
	expect_ret("query_port_0_einval", EINVAL, rc);
	memset(&pa, 0, sizeof pa);
	ibv_query_port(ctx, 1, &pa);

	/* ibv_query_gid */
	memset(&g, 0, sizeof g);
	rc = ibv_query_gid(ctx, 1, 0, &g);
	expect_ret("query_gid_0", 0, rc);
	{
		static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
						 0xff, 0xff };
		bool mapped = !memcmp(g.raw, pfx, sizeof pfx);
		bool v4nz = g.raw[12] | g.raw[13] | g.raw[14] | g.raw[15];

		check("query_gid_0_ipv4_mapped", mapped,
		      "expected ::ffff:a.b.c.d got %s", gidstr(&g, s1, sizeof s1));
		check("query_gid_0_nonzero", v4nz,
		      "expected a nonzero IPv4 address got %s",
		      gidstr(&g, s1, sizeof s1));
	}
	/* libibverbs ibv_query_gid: any error other than ENODATA -> -1;
	 * kernel rdma_get_gid_attr: index >= table size -> -EINVAL. */
	rc = ibv_query_gid(ctx, 1, pa.gid_tbl_len, &g2);
	expect_i("query_gid_index_out_of_range", -1, rc);
	rc = ibv_query_gid(ctx, 2, 0, &g2);
	expect_i("query_gid_port_2", -1, rc);

	/* ibv_query_gid_ex (inline -> _ibv_query_gid_ex) */
	memset(&ge, 0xa5, sizeof ge);
	rc = ibv_query_gid_ex(ctx, 1, 0, &ge, 0);
	expect_ret("query_gid_ex_0", 0, rc);
	if (rc == 0) {
		expect_i("query_gid_ex_type_roce_v2", IBV_GID_TYPE_ROCE_V2,
			 ge.gid_type);
		check("query_gid_ex_gid_matches", !memcmp(&ge.gid, &g, sizeof g),
		      "expected %s got %s", gidstr(&g, s1, sizeof s1),
		      gidstr(&ge.gid, s2, sizeof s2));
		expect_i("query_gid_ex_port_num", 1, ge.port_num);
		expect_i("query_gid_ex_gid_index", 0, ge.gid_index);
	}
	/* rdma_get_gid_attr(): out-of-range index or bad port -> EINVAL. */
	rc = ibv_query_gid_ex(ctx, 1, pa.gid_tbl_len, &ge, 0);
	expect_ret("query_gid_ex_index_out_of_range_einval", EINVAL, rc);
	rc = ibv_query_gid_ex(ctx, 2, 0, &ge, 0);
	expect_ret("query_gid_ex_port_2_einval", EINVAL, rc);

	/* The table has spare slots, as rxe's (RXE_PORT_GID_TBL_LEN 1024):
	 * an empty one is rdma_get_gid_attr's ENODATA, which ibv_query_gid
	 * turns into the zero GID; ibv_query_gid_table lists valid entries
	 * only.  The last slot is empty with one address per process. */
	expect_i("query_port_gid_tbl_len_1024", 1024, pa.gid_tbl_len);
	if (pa.gid_tbl_len > 1) {
		static const union ibv_gid zero_gid;
		int last = pa.gid_tbl_len - 1;
		memset(&g2, 0xff, sizeof g2);
		rc = ibv_query_gid(ctx, 1, last, &g2);
		check("query_gid_empty_slot_zero", rc == 0 && !memcmp(&g2, &zero_gid, sizeof g2),
		      "expected 0 and the zero GID got %d and %s", rc, gidstr(&g2, s1, sizeof s1));
		rc = ibv_query_gid_ex(ctx, 1, (uint32_t)last, &ge, 0);
		expect_ret("query_gid_ex_empty_slot_enodata", ENODATA, rc);
		struct ibv_gid_entry tbl[UROCE_TEST_GIDS];
		ssize_t cnt = ibv_query_gid_table(ctx, tbl, UROCE_TEST_GIDS, 0);
		check("query_gid_table_valid_entries_only", cnt >= 1 && cnt < UROCE_TEST_GIDS,
		      "expected between 1 and %d entries in a buffer of %d got %zd", UROCE_TEST_GIDS - 1,
		      UROCE_TEST_GIDS, cnt);
	}

	/* ibv_query_gid_table (inline -> _ibv_query_gid_table) */
	{
		size_t max = pa.gid_tbl_len > 0 && pa.gid_tbl_len < 1024 ?
			     (size_t)pa.gid_tbl_len : 16;
		struct ibv_gid_entry *tbl = calloc(max, sizeof *tbl);
		ssize_t cnt = tbl ? ibv_query_gid_table(ctx, tbl, max, 0) : -ENOMEM;
		bool found = false;

		check("query_gid_table", cnt >= 1,
		      "expected >= 1 entries got %zd", cnt);
		for (ssize_t i = 0; i < cnt; i++) {
			if (tbl[i].gid_index == 0 && tbl[i].port_num == 1) {
				found = true;
				check("query_gid_table_entry0",
				      tbl[i].gid_type == IBV_GID_TYPE_ROCE_V2 &&
				      !memcmp(&tbl[i].gid, &g, sizeof g),
				      "expected RoCE v2 (2) %s got type %u %s",
				      gidstr(&g, s1, sizeof s1), tbl[i].gid_type,
				      gidstr(&tbl[i].gid, s2, sizeof s2));
			}
		}
		if (cnt >= 1 && !found)
			fail("query_gid_table_entry0",
			     "expected an entry for port 1 index 0 got none of %zd",
			     cnt);
		/* Too small a buffer: -EINVAL (rdma-core's own pyverbs
		 * test_query_gid_table_bad_flow expects exactly this). */
		cnt = tbl ? ibv_query_gid_table(ctx, tbl, 0, 0) : -ENOMEM;
		expect_i("query_gid_table_too_small_einval", -EINVAL, cnt);
		free(tbl);
	}

	/* ibv_query_pkey: rdma-core reads ports/N/pkeys/I, -1 on error. */
	{
		__be16 pk = 0;

		rc = ibv_query_pkey(ctx, 1, 0, &pk);
		expect_ret("query_pkey_0", 0, rc);
		expect_x("query_pkey_0_default", 0xffff, be16toh(pk));
		rc = ibv_query_pkey(ctx, 1, pa.pkey_tbl_len, &pk);
		expect_i("query_pkey_index_out_of_range", -1, rc);
	}

	/* A second context on the same device, open at the same time. */
	errno = 0;
	ctx2 = ibv_open_device(dev);
	if (check("device_open_twice", ctx2 != NULL && ctx2 != ctx,
		  "expected a second distinct context got %p errno %d (%s)",
		  (void *)ctx2, errno, errname(errno))) {
		struct ibv_pd *pd2 = ibv_alloc_pd(ctx2);

		check("device_second_context_usable", pd2 != NULL,
		      "expected ibv_alloc_pd on the second context to work got NULL errno %d (%s)",
		      errno, errname(errno));
		if (pd2)
			ibv_dealloc_pd(pd2);
		expect_ret("device_close_second_context", 0, ibv_close_device(ctx2));
	}
	expect_ret("device_close", 0, ibv_close_device(ctx));
	ibv_free_device_list(list);
}

/* ------------------------------------------------------------------ */
/* Group: async                                                        */
/* ------------------------------------------------------------------ */

static void g_async(void)
{
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_qp *qp = NULL, *qp2 = NULL;
	struct ibv_async_event ev;
	struct pollfd p;
	int fd, fl, rc, pr;

	if (!fx_open())
		return;
	fd = F.ctx->async_fd;
	fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
	check("async_fd_is_open", fd >= 0 && fl != -1,
	      "expected a valid fd got %d (fcntl F_GETFL %d, errno %s)", fd, fl,
	      errname(errno));
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	pr = poll(&p, 1, 0);
	expect_i("async_fd_poll_no_event", 0, pr);

	/* libibverbs ibv_get_async_event is a read() on async_fd: -1/EAGAIN
	 * on a non-blocking fd with no event. */
	if (fl != -1 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0) {
		errno = 0;
		rc = ibv_get_async_event(F.ctx, &ev);
		int e = errno;

		check("async_get_event_nonblocking_eagain", rc == -1 && e == EAGAIN,
		      "expected -1 with errno EAGAIN got %d with errno %d (%s)",
		      rc, e, errname(e));
		if (rc == 0)
			ibv_ack_async_event(&ev);
		fcntl(fd, F_SETFL, fl);
	} else {
		fail("async_fd_set_nonblock", "expected fcntl(O_NONBLOCK) to work got errno %d (%s)",
		     errno, errname(errno));
	}

	pd = ibv_alloc_pd(F.ctx);
	cq = ibv_create_cq(F.ctx, 32, NULL, NULL, 0);
	if (!pd || !cq) {
		fail("async_setup_objects", "expected PD and CQ got pd %p cq %p",
		     (void *)pd, (void *)cq);
		goto out;
	}

	/* A modify to ERR requested by the consumer raises no async event
	 * (rxe_qp_error / mlx5 only report QP_FATAL for errors they detect). */
	qp = mk_qp(pd, cq, IBV_QPT_RC, NULL);
	if (qp) {
		expect_ret("async_qp_to_init", 0, drive(qp, IBV_QPS_INIT));
		expect_ret("async_modify_to_err", 0, step(qp, IBV_QPS_ERR));
		pr = poll(&p, 1, 300);
		check("async_no_event_on_modify_to_err", pr == 0,
		      "expected no async event within 300 ms got poll()=%d", pr);
		if (pr == 1 && ibv_get_async_event(F.ctx, &ev) == 0) {
			printf("# unexpected async event %d (%s)\n", ev.event_type,
			       ibv_event_type_str(ev.event_type));
			ibv_ack_async_event(&ev);
		}
	} else {
		fail("async_qp_create", "expected a QP got NULL errno %d (%s)",
		     errno, errname(errno));
	}

	/* RTS->SQD with en_sqd_async_notify: IBV_EVENT_SQ_DRAINED once the
	 * (empty) send queue is drained (IBA 11.6.3; rxe_req.c emits
	 * IB_EVENT_SQ_DRAINED when sq_draining finishes). */
	qp2 = mk_qp(pd, cq, IBV_QPT_RC, NULL);
	if (qp2 && expect_ret("async_qp2_to_rts", 0, drive(qp2, IBV_QPS_RTS))) {
		struct ibv_qp_attr a;

		memset(&a, 0, sizeof a);
		a.qp_state = IBV_QPS_SQD;
		a.en_sqd_async_notify = 1;
		rc = ibv_modify_qp(qp2, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY);
		expect_ret("async_rts_to_sqd_with_notify", 0, rc);
		if (rc == 0) {
			pr = poll(&p, 1, 2000);
			check("async_sq_drained_event_ready", pr == 1,
			      "expected the async fd readable within 2 s (IBV_EVENT_SQ_DRAINED) got poll()=%d",
			      pr);
			if (pr == 1) {
				memset(&ev, 0, sizeof ev);
				rc = ibv_get_async_event(F.ctx, &ev);
				check("async_sq_drained_event",
				      rc == 0 && ev.event_type == IBV_EVENT_SQ_DRAINED &&
				      ev.element.qp == qp2,
				      "expected IBV_EVENT_SQ_DRAINED (%d) for qp %p got rc %d event %d (%s) qp %p",
				      IBV_EVENT_SQ_DRAINED, (void *)qp2, rc,
				      ev.event_type, ibv_event_type_str(ev.event_type),
				      rc == 0 ? (void *)ev.element.qp : NULL);
				if (rc == 0)
					ibv_ack_async_event(&ev);
			}
		}
	}
out:
	if (qp)
		expect_ret("async_destroy_qp", 0, ibv_destroy_qp(qp));
	if (qp2)
		expect_ret("async_destroy_qp2", 0, ibv_destroy_qp(qp2));
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: pd_mr                                                        */
/* ------------------------------------------------------------------ */

static void g_pd_mr(void)
{
	struct ibv_pd *pd, *pd2 = NULL;
	struct ibv_mr *mr = NULL, *mrs[12];
	int nmrs = 0, rc;
	volatile int acc;

	if (!fx_open())
		return;
	EXPECT_OBJ("pd_alloc", pd, ibv_alloc_pd(F.ctx));
	if (!pd)
		goto out;
	check("pd_context", pd->context == F.ctx, "expected pd->context %p got %p",
	      (void *)F.ctx, (void *)pd->context);

	EXPECT_OBJ("mr_reg_local_write", mr, ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE));
	if (mr) {
		check("mr_fields", mr->addr == buf && mr->length == 4096 &&
		      mr->pd == pd && mr->context == F.ctx,
		      "expected addr %p length 4096 pd %p context %p got %p %zu %p %p",
		      (void *)buf, (void *)pd, (void *)F.ctx, mr->addr, mr->length,
		      (void *)mr->pd, (void *)mr->context);
		mrs[nmrs++] = mr;
	}
	EXPECT_OBJ("mr_reg_access_0", mr, ibv_reg_mr(pd, buf + 4096, 4096, 0));
	if (mr)
		mrs[nmrs++] = mr;
	EXPECT_OBJ("mr_reg_remote_read_without_local_write", mr,
		   ibv_reg_mr(pd, buf + 2 * 4096, 4096, IBV_ACCESS_REMOTE_READ));
	if (mr)
		mrs[nmrs++] = mr;

	/* ib_check_mr_access(): REMOTE_WRITE or REMOTE_ATOMIC without
	 * LOCAL_WRITE -> -EINVAL; unsupported non-optional bits -> -EINVAL.
	 * Constant access goes through the ibv_reg_mr symbol, a runtime
	 * value through ibv_reg_mr_iova2 (verbs.h __ibv_reg_mr); test both. */
	EXPECT_NULL("mr_reg_remote_write_without_local_write",
		    ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE), EINVAL, d_mr);
	acc = IBV_ACCESS_REMOTE_WRITE;
	EXPECT_NULL("mr_reg_iova2_remote_write_without_local_write",
		    ibv_reg_mr(pd, buf, 4096, acc), EINVAL, d_mr);
	EXPECT_NULL("mr_reg_remote_atomic_without_local_write",
		    ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_ATOMIC), EINVAL, d_mr);
	acc = IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ;
	EXPECT_NULL("mr_reg_iova2_remote_atomic_without_local_write",
		    ibv_reg_mr(pd, buf, 4096, acc), EINVAL, d_mr);
	acc = IBV_ACCESS_LOCAL_WRITE | (1 << 15);
	EXPECT_NULL("mr_reg_unknown_access_bit", ibv_reg_mr(pd, buf, 4096, acc),
		    EINVAL, d_mr);
	/* Optional-range bits (IBV_ACCESS_OPTIONAL_RANGE) are best effort:
	 * libibverbs strips them or the kernel accepts IB_ACCESS_OPTIONAL. */
	EXPECT_OBJ("mr_reg_relaxed_ordering_accepted", mr,
		   ibv_reg_mr(pd, buf + 3 * 4096, 4096,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING));
	if (mr)
		mrs[nmrs++] = mr;
	acc = IBV_ACCESS_LOCAL_WRITE | (1 << 25);
	EXPECT_OBJ("mr_reg_unknown_optional_bit_ignored", mr,
		   ibv_reg_mr(pd, buf + 4 * 4096, 4096, acc));
	if (mr)
		mrs[nmrs++] = mr;

	/* Several more MRs; every lkey and every rkey must be distinct. */
	for (int i = 0; i < 6; i++) {
		mr = ibv_reg_mr(pd, buf + (5 + i) * 4096, 4096,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_READ);
		if (!mr) {
			fail("mr_reg_many", "expected MR %d got NULL errno %d (%s)",
			     i, errno, errname(errno));
			break;
		}
		mrs[nmrs++] = mr;
	}
	{
		bool lk = true, rk = true;
		uint32_t dup_l = 0, dup_r = 0;

		for (int i = 0; i < nmrs; i++)
			for (int j = i + 1; j < nmrs; j++) {
				if (mrs[i]->lkey == mrs[j]->lkey) {
					lk = false;
					dup_l = mrs[i]->lkey;
				}
				if (mrs[i]->rkey == mrs[j]->rkey) {
					rk = false;
					dup_r = mrs[i]->rkey;
				}
			}
		check("mr_lkeys_unique", lk, "expected %d distinct lkeys got duplicate 0x%x",
		      nmrs, dup_l);
		check("mr_rkeys_unique", rk, "expected %d distinct rkeys got duplicate 0x%x",
		      nmrs, dup_r);
	}

	/* ibv_reg_mr_iova (inline -> ibv_reg_mr_iova / ibv_reg_mr_iova2) */
	EXPECT_OBJ("mr_reg_iova", mr,
		   ibv_reg_mr_iova(pd, buf + 11 * 4096, 4096, 0x100000000000ULL,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
	if (mr) {
		/* libibverbs sets mr->addr to the user address, not the iova. */
		check("mr_reg_iova_addr_field", mr->addr == buf + 11 * 4096 &&
		      mr->length == 4096,
		      "expected addr %p length 4096 got %p %zu",
		      (void *)(buf + 11 * 4096), mr->addr, mr->length);
		mrs[nmrs++] = mr;
	}
	/* ib_uverbs_reg_mr(): (start & ~PAGE_MASK) != (hca_va & ~PAGE_MASK)
	 * -> -EINVAL. */
	EXPECT_NULL("mr_reg_iova_page_offset_mismatch",
		    ibv_reg_mr_iova(pd, buf + 12 * 4096, 4096, 0x100000000123ULL,
				    IBV_ACCESS_LOCAL_WRITE), EINVAL, d_mr);

	/* uverbs_free_pd -> ib_destroy_usecnt(): -EBUSY while MRs exist. */
	rc = ibv_dealloc_pd(pd);
	expect_ret("pd_dealloc_with_mr_ebusy", EBUSY, rc);
	if (rc == 0) {
		/* The PD is gone; the MRs cannot be used safely any more. */
		pd = NULL;
		goto out;
	}

	/* ibv_rereg_mr (libibverbs/verbs.c): input checks return
	 * IBV_REREG_MR_ERR_INPUT with errno EINVAL; a provider/kernel failure
	 * returns IBV_REREG_MR_ERR_CMD. */
	{
		struct ibv_mr *m = ibv_reg_mr(pd, buf + 13 * 4096, 4096,
					      IBV_ACCESS_LOCAL_WRITE);

		if (!m) {
			fail("mr_rereg_setup", "expected MR got NULL errno %d (%s)",
			     errno, errname(errno));
			goto dereg;
		}
		uint32_t lkey0 = m->lkey, rkey0 = m->rkey;
		rc = ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				  IBV_ACCESS_REMOTE_READ);
		check("mr_rereg_change_access", rc == 0, "expected 0 got %d (%s)", rc,
		      rereg_name(rc));
		/* mlx5 changes access and PD in place: the keys stay (pyverbs
		 * test_mr_rereg_access goes on with the old rkey) */
		check("mr_rereg_access_keeps_keys", m->lkey == lkey0 && m->rkey == rkey0,
		      "expected lkey 0x%x rkey 0x%x got 0x%x 0x%x", lkey0, rkey0, m->lkey, m->rkey);
		check("mr_rereg_keeps_addr_length",
		      m->addr == buf + 13 * 4096 && m->length == 4096 && m->pd == pd,
		      "expected addr %p length 4096 pd %p got %p %zu %p",
		      (void *)(buf + 13 * 4096), (void *)pd, m->addr, m->length,
		      (void *)m->pd);
		/* ib_uverbs_rereg_mr -> ib_check_mr_access -> -EINVAL */
		rc = ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				  IBV_ACCESS_REMOTE_WRITE);
		check("mr_rereg_remote_write_without_local_write",
		      rc == IBV_REREG_MR_ERR_CMD,
		      "expected %d (IBV_REREG_MR_ERR_CMD: the provider/kernel rejects it) got %d (%s)",
		      IBV_REREG_MR_ERR_CMD, rc, rereg_name(rc));
		errno = 0;
		rc = ibv_rereg_mr(m, 1 << 7, NULL, NULL, 0, 0);
		check("mr_rereg_unknown_flag", rc == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
		      "expected %d (IBV_REREG_MR_ERR_INPUT) with errno EINVAL got %d with errno %d (%s)",
		      IBV_REREG_MR_ERR_INPUT, rc, errno, errname(errno));
		errno = 0;
		rc = ibv_rereg_mr(m, 0, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
		check("mr_rereg_access_without_change_access_flag",
		      rc == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
		      "expected %d (IBV_REREG_MR_ERR_INPUT) with errno EINVAL got %d with errno %d (%s)",
		      IBV_REREG_MR_ERR_INPUT, rc, errno, errname(errno));
		errno = 0;
		rc = ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0);
		check("mr_rereg_translation_without_addr",
		      rc == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
		      "expected %d (IBV_REREG_MR_ERR_INPUT) with errno EINVAL got %d with errno %d (%s)",
		      IBV_REREG_MR_ERR_INPUT, rc, errno, errname(errno));

		/* Moving the MR to another PD moves the PD reference. */
		pd2 = ibv_alloc_pd(F.ctx);
		if (pd2) {
			rc = ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0);
			check("mr_rereg_change_pd", rc == 0 && m->pd == pd2,
			      "expected 0 and mr->pd %p got %d (%s) and %p", (void *)pd2,
			      rc, rereg_name(rc), (void *)m->pd);
			check("mr_rereg_pd_keeps_keys", m->lkey == lkey0 && m->rkey == rkey0,
			      "expected lkey 0x%x rkey 0x%x got 0x%x 0x%x", lkey0, rkey0, m->lkey, m->rkey);
			if (rc == 0) {
				rc = ibv_dealloc_pd(pd2);
				expect_ret("pd_dealloc_after_rereg_to_it_ebusy", EBUSY, rc);
				if (rc == 0)
					pd2 = NULL;
			}
		}
		/* a new translation gets new keys: the old ones named the old memory */
		rc = ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf + 14 * 4096, 4096, 0);
		check("mr_rereg_translation_new_keys",
		      rc == 0 && m->addr == buf + 14 * 4096 && m->lkey != lkey0 && m->rkey != rkey0,
		      "expected 0, addr %p and keys other than 0x%x/0x%x got %d (%s), %p, 0x%x/0x%x",
		      (void *)(buf + 14 * 4096), lkey0, rkey0, rc, rereg_name(rc), m->addr, m->lkey, m->rkey);
		expect_ret("mr_dereg_after_rereg", 0, ibv_dereg_mr(m));
		if (pd2)
			expect_ret("pd_dealloc_after_rereg_mr_gone", 0, ibv_dealloc_pd(pd2));
	}

dereg:
	{
		int bad = 0, first = 0;

		for (int i = 0; i < nmrs; i++) {
			rc = ibv_dereg_mr(mrs[i]);
			if (rc && !bad++)
				first = rc;
		}
		check("mr_dereg_all", bad == 0, "expected 0 from %d ibv_dereg_mr got %d failures (first %d)",
		      nmrs, bad, first);
	}
	nmrs = 0;
	expect_ret("pd_dealloc", 0, ibv_dealloc_pd(pd));
	pd = NULL;

	/* MR on a PD of another context of the same device. */
	{
		struct ibv_context *c2 = ibv_open_device(F.dev);
		struct ibv_pd *pb = c2 ? ibv_alloc_pd(c2) : NULL;

		if (!pb) {
			fail("mr_other_context_setup", "expected second context and PD got %p %p errno %d (%s)",
			     (void *)c2, (void *)pb, errno, errname(errno));
		} else {
			struct ibv_mr *mb;
			struct ibv_pd *pa;

			EXPECT_OBJ("mr_reg_on_other_context_pd", mb,
				   ibv_reg_mr(pb, buf, 4096, IBV_ACCESS_LOCAL_WRITE));
			if (mb)
				check("mr_other_context_fields", mb->context == c2 && mb->pd == pb,
				      "expected context %p pd %p got %p %p", (void *)c2,
				      (void *)pb, (void *)mb->context, (void *)mb->pd);
			/* Objects in one context do not pin objects in another. */
			pa = ibv_alloc_pd(F.ctx);
			if (pa)
				expect_ret("pd_dealloc_unaffected_by_other_context", 0,
					   ibv_dealloc_pd(pa));
			if (mb) {
				rc = ibv_dealloc_pd(pb);
				expect_ret("pd_dealloc_other_context_with_mr_ebusy", EBUSY, rc);
				if (rc == 0)
					pb = NULL;
				ibv_dereg_mr(mb);
			}
			if (pb)
				expect_ret("pd_dealloc_other_context", 0, ibv_dealloc_pd(pb));
		}
		if (c2)
			expect_ret("close_other_context", 0, ibv_close_device(c2));
	}
out:
	for (int i = 0; i < nmrs && pd; i++)
		ibv_dereg_mr(mrs[i]);
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: cq                                                           */
/* ------------------------------------------------------------------ */

static int cq_tag;

static void g_cq(void)
{
	struct ibv_cq *cq, *cq2;
	struct ibv_comp_channel *ch;
	struct ibv_wc wc[4];
	int rc;

	if (!fx_open())
		return;

	EXPECT_OBJ("cq_create", cq, ibv_create_cq(F.ctx, 16, &cq_tag, NULL, 0));
	if (cq) {
		expect_ge("cq_cqe_at_least_requested", 16, cq->cqe);
		check("cq_fields", cq->context == F.ctx && cq->cq_context == &cq_tag &&
		      cq->channel == NULL,
		      "expected context %p cq_context %p channel NULL got %p %p %p",
		      (void *)F.ctx, (void *)&cq_tag, (void *)cq->context,
		      cq->cq_context, (void *)cq->channel);
		expect_i("cq_poll_empty", 0, ibv_poll_cq(cq, 4, wc));
		expect_ret("cq_req_notify", 0, ibv_req_notify_cq(cq, 0));
		expect_ret("cq_req_notify_solicited_only", 0, ibv_req_notify_cq(cq, 1));
		/* rxe_resize_cq -> rxe_cq_chk_attr(): cqe <= 0 or > max_cqe
		 * -> -EINVAL; on success ibv_cmd_resize_cq updates cq->cqe. */
		rc = ibv_resize_cq(cq, 64);
		expect_ret("cq_resize", 0, rc);
		if (rc == 0)
			expect_ge("cq_resize_cqe", 64, cq->cqe);
		expect_ret("cq_resize_zero_einval", EINVAL, ibv_resize_cq(cq, 0));
		if (F.da.max_cqe < INT_MAX)
			expect_ret("cq_resize_above_max_einval", EINVAL,
				   ibv_resize_cq(cq, F.da.max_cqe + 1));
		expect_ret("cq_destroy", 0, ibv_destroy_cq(cq));
	}

	/* rxe_cq_chk_attr(): cqe <= 0 or cqe > max_cqe -> -EINVAL. */
	EXPECT_NULL("cq_create_cqe_zero_einval", ibv_create_cq(F.ctx, 0, NULL, NULL, 0),
		    EINVAL, d_cq);
	EXPECT_NULL("cq_create_cqe_negative_einval",
		    ibv_create_cq(F.ctx, -1, NULL, NULL, 0), EINVAL, d_cq);
	if (F.da.max_cqe < INT_MAX)
		EXPECT_NULL("cq_create_cqe_above_max_einval",
			    ibv_create_cq(F.ctx, F.da.max_cqe + 1, NULL, NULL, 0),
			    EINVAL, d_cq);
	/* uverbs create_cq(): comp_vector >= num_comp_vectors -> -EINVAL
	 * (comp_vector is a __u32 in the command, so -1 is out of range). */
	EXPECT_NULL("cq_create_comp_vector_out_of_range_einval",
		    ibv_create_cq(F.ctx, 16, NULL, NULL, F.ctx->num_comp_vectors),
		    EINVAL, d_cq);
	EXPECT_NULL("cq_create_comp_vector_negative_einval",
		    ibv_create_cq(F.ctx, 16, NULL, NULL, -1), EINVAL, d_cq);
	EXPECT_OBJ("cq_create_last_comp_vector", cq,
		   ibv_create_cq(F.ctx, 16, NULL, NULL, F.ctx->num_comp_vectors - 1));
	if (cq)
		ibv_destroy_cq(cq);

	/* Completion channel */
	EXPECT_OBJ("comp_channel_create", ch, ibv_create_comp_channel(F.ctx));
	if (!ch)
		goto out;
	{
		int fl = ch->fd >= 0 ? fcntl(ch->fd, F_GETFL) : -1;
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };

		check("comp_channel_fd_valid", ch->fd >= 0 && fl != -1 &&
		      ch->context == F.ctx,
		      "expected an open fd and context %p got fd %d (F_GETFL %d) context %p",
		      (void *)F.ctx, ch->fd, fl, (void *)ch->context);
		expect_i("comp_channel_poll_no_event", 0, poll(&p, 1, 0));

		EXPECT_OBJ("cq_create_with_channel", cq2,
			   ibv_create_cq(F.ctx, 16, &cq_tag, ch, 0));
		if (cq2) {
			check("cq_channel_field", cq2->channel == ch,
			      "expected cq->channel %p got %p", (void *)ch,
			      (void *)cq2->channel);
			expect_ret("cq_req_notify_with_channel", 0,
				   ibv_req_notify_cq(cq2, 0));
			expect_i("comp_channel_no_event_after_arm", 0, poll(&p, 1, 0));
			/* ibv_get_cq_event is a read() on the channel fd. */
			if (fl != -1 && fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0) {
				struct ibv_cq *ecq = NULL;
				void *ectx = NULL;

				errno = 0;
				rc = ibv_get_cq_event(ch, &ecq, &ectx);
				int e = errno;

				check("comp_channel_get_event_nonblocking_eagain",
				      rc == -1 && e == EAGAIN,
				      "expected -1 with errno EAGAIN got %d with errno %d (%s)",
				      rc, e, errname(e));
				if (rc == 0)
					ibv_ack_cq_events(ecq, 1);
				fcntl(ch->fd, F_SETFL, fl);
			}
			/* ibv_destroy_comp_channel: refcnt != 0 -> EBUSY. */
			rc = ibv_destroy_comp_channel(ch);
			expect_ret("comp_channel_destroy_in_use_ebusy", EBUSY, rc);
			if (rc == 0)
				ch = NULL;
			expect_ret("cq_destroy_with_channel", 0, ibv_destroy_cq(cq2));
		}
		if (ch)
			expect_ret("comp_channel_destroy", 0, ibv_destroy_comp_channel(ch));
	}

	/* A CQ used by a QP: ib_destroy_cq_user(): usecnt -> -EBUSY. */
	{
		struct ibv_pd *pd = ibv_alloc_pd(F.ctx);
		struct ibv_cq *c = ibv_create_cq(F.ctx, 32, NULL, NULL, 0);
		struct ibv_qp *qp = (pd && c) ? mk_qp(pd, c, IBV_QPT_RC, NULL) : NULL;

		if (!qp) {
			fail("cq_in_use_setup", "expected PD, CQ and QP got %p %p %p errno %d (%s)",
			     (void *)pd, (void *)c, (void *)qp, errno, errname(errno));
		} else {
			rc = ibv_destroy_cq(c);
			expect_ret("cq_destroy_in_use_by_qp_ebusy", EBUSY, rc);
			expect_ret("cq_in_use_destroy_qp", 0, ibv_destroy_qp(qp));
			if (rc != 0)
				expect_ret("cq_destroy_after_qp", 0, ibv_destroy_cq(c));
			c = NULL;
		}
		if (c)
			ibv_destroy_cq(c);
		if (pd)
			ibv_dealloc_pd(pd);
	}
out:
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: cq_events (completion channel delivery via flush errors)     */
/* ------------------------------------------------------------------ */

static void g_cq_events(void)
{
	struct ibv_comp_channel *ch = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_mr *mr = NULL;
	struct ibv_qp *qp = NULL;
	struct ibv_wc wc[4];
	int rc;

	if (!fx_open())
		return;
	ch = ibv_create_comp_channel(F.ctx);
	cq = ch ? ibv_create_cq(F.ctx, 16, &cq_tag, ch, 0) : NULL;
	pd = ibv_alloc_pd(F.ctx);
	mr = pd ? reg_buf(pd) : NULL;
	qp = (cq && mr) ? mk_qp(pd, cq, IBV_QPT_RC, NULL) : NULL;
	if (!qp) {
		fail("cq_events_setup", "expected channel, CQ, PD, MR, QP got %p %p %p %p %p errno %d (%s)",
		     (void *)ch, (void *)cq, (void *)pd, (void *)mr, (void *)qp,
		     errno, errname(errno));
		goto out;
	}
	expect_ret("cq_events_qp_to_init", 0, drive(qp, IBV_QPS_INIT));

	/* Receives may be posted in INIT (IBA C10-97.2.1). */
	{
		struct ibv_sge sge[2] = {
			{ .addr = (uintptr_t)buf, .length = 256, .lkey = mr->lkey },
			{ .addr = (uintptr_t)buf + 256, .length = 256, .lkey = mr->lkey },
		};
		struct ibv_recv_wr r2 = { .wr_id = 0x1002, .sg_list = &sge[1], .num_sge = 1 };
		struct ibv_recv_wr r1 = { .wr_id = 0x1001, .sg_list = &sge[0], .num_sge = 1,
					  .next = &r2 };
		struct ibv_recv_wr *bad = NULL;

		rc = ibv_post_recv(qp, &r1, &bad);
		expect_ret("cq_events_post_recv_in_init", 0, rc);
	}
	expect_ret("cq_events_arm", 0, ibv_req_notify_cq(cq, 0));

	/* Moving to ERR completes every outstanding WR with
	 * IBV_WC_WR_FLUSH_ERR, in order (IBA 10.3.1 Error state; rxe:
	 * rxe_resp.c flush_recv_queue on Linux >= 6.4 - older rxe drained
	 * user RQs silently). */
	expect_ret("cq_events_modify_to_err", 0, step(qp, IBV_QPS_ERR));
	memset(wc, 0, sizeof wc);
	int n = poll_cq_for(cq, wc, 2, 2000);

	if (check("cq_flush_recv_completions", n == 2,
		  "expected 2 flushed receive completions within 2 s got %d", n)) {
		check("cq_flush_status", wc[0].status == IBV_WC_WR_FLUSH_ERR &&
		      wc[1].status == IBV_WC_WR_FLUSH_ERR,
		      "expected status %d (%s) twice got %d (%s) and %d (%s)",
		      IBV_WC_WR_FLUSH_ERR, ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR),
		      wc[0].status, ibv_wc_status_str(wc[0].status), wc[1].status,
		      ibv_wc_status_str(wc[1].status));
		check("cq_flush_wr_id_in_order", wc[0].wr_id == 0x1001 &&
		      wc[1].wr_id == 0x1002,
		      "expected wr_id 0x1001, 0x1002 got 0x%llx, 0x%llx",
		      (unsigned long long)wc[0].wr_id, (unsigned long long)wc[1].wr_id);
		check("cq_flush_qp_num", wc[0].qp_num == qp->qp_num &&
		      wc[1].qp_num == qp->qp_num,
		      "expected qp_num %u got %u and %u", qp->qp_num, wc[0].qp_num,
		      wc[1].qp_num);
	}
	{
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		int pr = poll(&p, 1, 2000);

		if (check("cq_event_channel_readable", pr == 1,
			  "expected the channel fd readable within 2 s got poll()=%d", pr)) {
			struct ibv_cq *ecq = NULL;
			void *ectx = NULL;

			rc = ibv_get_cq_event(ch, &ecq, &ectx);
			check("cq_event_get", rc == 0 && ecq == cq && ectx == &cq_tag,
			      "expected 0, cq %p, cq_context %p got %d, %p, %p",
			      (void *)cq, (void *)&cq_tag, rc, (void *)ecq, ectx);
			if (rc == 0)
				ibv_ack_cq_events(ecq, 1);
			expect_i("cq_event_consumed", 0, poll(&p, 1, 0));
		}
	}
out:
	if (qp)
		expect_ret("cq_events_destroy_qp", 0, ibv_destroy_qp(qp));
	if (mr)
		ibv_dereg_mr(mr);
	if (pd)
		ibv_dealloc_pd(pd);
	if (cq)
		expect_ret("cq_events_destroy_cq", 0, ibv_destroy_cq(cq));
	if (ch)
		expect_ret("cq_events_destroy_channel", 0, ibv_destroy_comp_channel(ch));
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: qp_create                                                    */
/* ------------------------------------------------------------------ */

static int qp_tag;

static void check_cap(const char *name, const struct ibv_qp_cap *got,
		      uint32_t wr, uint32_t sge)
{
	check(name, got->max_send_wr >= wr && got->max_recv_wr >= wr &&
	      got->max_send_sge >= sge && got->max_recv_sge >= sge,
	      "expected send/recv wr >= %u and sge >= %u got wr %u/%u sge %u/%u",
	      wr, sge, got->max_send_wr, got->max_recv_wr, got->max_send_sge,
	      got->max_recv_sge);
}

static void g_qp_create(void)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp = NULL, *qp2 = NULL, *ud = NULL, *uc = NULL;
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr qi;
	int rc;

	if (!fx_open())
		return;
	pd = ibv_alloc_pd(F.ctx);
	cq = ibv_create_cq(F.ctx, 64, NULL, NULL, 0);
	if (!pd || !cq) {
		fail("qp_create_setup", "expected PD and CQ got %p %p", (void *)pd,
		     (void *)cq);
		goto out;
	}

	memset(&ia, 0, sizeof ia);
	ia.qp_context = &qp_tag;
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 1;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = F.sge;
	ia.cap.max_recv_sge = F.sge;
	EXPECT_OBJ("qp_create_rc", qp, ibv_create_qp(pd, &ia));
	if (!qp)
		goto out;
	/* libibverbs ibv_create_qp sets these fields itself. */
	expect_i("qp_create_state_field_reset", IBV_QPS_RESET, qp->state);
	expect_i("qp_create_type_field", IBV_QPT_RC, qp->qp_type);
	check("qp_create_fields", qp->pd == pd && qp->send_cq == cq &&
	      qp->recv_cq == cq && qp->qp_context == &qp_tag && qp->context == F.ctx &&
	      qp->srq == NULL,
	      "expected pd/send_cq/recv_cq/qp_context/context to be the creation values got %p %p %p %p %p",
	      (void *)qp->pd, (void *)qp->send_cq, (void *)qp->recv_cq,
	      qp->qp_context, (void *)qp->context);
	/* QPN 0 and 1 are the special QP0/QP1. */
	check("qp_num_not_special", qp->qp_num > 1 && qp->qp_num <= 0xffffff,
	      "expected 2..0xffffff got %u", qp->qp_num);
	/* ibv_create_qp(3): cap is updated with the actual values, >= asked. */
	check_cap("qp_create_cap_updated", &ia.cap, 16, F.sge);

	memset(&a, 0, sizeof a);
	memset(&qi, 0, sizeof qi);
	rc = ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_CAP, &qi);
	if (expect_ret("qp_query_reset", 0, rc)) {
		expect_i("qp_query_state_reset", IBV_QPS_RESET, a.qp_state);
		check_cap("qp_query_cap", &a.cap, 16, F.sge);
		check_cap("qp_query_init_attr_cap", &qi.cap, 16, F.sge);
		check("qp_query_init_attr", qi.qp_type == IBV_QPT_RC &&
		      qi.sq_sig_all == 1 && qi.send_cq == cq && qi.recv_cq == cq &&
		      qi.qp_context == &qp_tag && qi.srq == NULL,
		      "expected type RC sq_sig_all 1 send/recv cq %p context %p got %d %d %p %p %p",
		      (void *)cq, (void *)&qp_tag, qi.qp_type, qi.sq_sig_all,
		      (void *)qi.send_cq, (void *)qi.recv_cq, qi.qp_context);
	}

	/* ibv_create_qp_ex with IBV_QP_INIT_ATTR_CREATE_FLAGS: no flag is a
	 * plain create (rdma-core's tests pass 0); a hardware offload flag
	 * uroce does not offer is EOPNOTSUPP. */
	{
		struct ibv_qp_init_attr_ex ix;
		struct ibv_qp *qx = NULL;
		memset(&ix, 0, sizeof ix);
		ix.send_cq = cq;
		ix.recv_cq = cq;
		ix.qp_type = IBV_QPT_RC;
		ix.cap = ia.cap;
		ix.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
		ix.pd = pd;
		ix.create_flags = 0;
		EXPECT_OBJ("qp_create_ex_create_flags_0", qx, ibv_create_qp_ex(F.ctx, &ix));
		if (qx)
			ibv_destroy_qp(qx);
		ix.create_flags = IBV_QP_CREATE_SCATTER_FCS;
		EXPECT_NULL("qp_create_ex_create_flags_scatter_fcs", ibv_create_qp_ex(F.ctx, &ix), EOPNOTSUPP, d_qp);
	}

	qp2 = mk_qp(pd, cq, IBV_QPT_RC, NULL);
	if (check("qp_create_second", qp2 != NULL, "expected a QP got NULL errno %d (%s)",
		  errno, errname(errno)))
		check("qp_num_unique", qp2->qp_num != qp->qp_num,
		      "expected distinct QPNs got %u twice", qp->qp_num);

	/* rxe_qp_chk_cap(): any cap above the device limit -> -EINVAL. */
	if ((unsigned)F.da.max_qp_wr < UINT32_MAX) {
		ia.cap.max_send_wr = (uint32_t)F.da.max_qp_wr + 1;
		EXPECT_NULL("qp_create_send_wr_above_max_einval", ibv_create_qp(pd, &ia),
			    EINVAL, d_qp);
		ia.cap.max_send_wr = 16;
		ia.cap.max_recv_wr = (uint32_t)F.da.max_qp_wr + 1;
		EXPECT_NULL("qp_create_recv_wr_above_max_einval", ibv_create_qp(pd, &ia),
			    EINVAL, d_qp);
		ia.cap.max_recv_wr = 16;
	}
	ia.cap.max_send_sge = (uint32_t)F.da.max_sge + 1;
	EXPECT_NULL("qp_create_send_sge_above_max_einval", ibv_create_qp(pd, &ia),
		    EINVAL, d_qp);
	ia.cap.max_send_sge = F.sge;
	ia.cap.max_recv_sge = (uint32_t)F.da.max_sge + 1;
	EXPECT_NULL("qp_create_recv_sge_above_max_einval", ibv_create_qp(pd, &ia),
		    EINVAL, d_qp);
	ia.cap.max_recv_sge = F.sge;
	/* rxe_qp_chk_cap(): max_inline_data > rxe->max_inline_data -> -EINVAL */
	ia.cap.max_inline_data = 1u << 20;
	EXPECT_NULL("qp_create_inline_1mib_einval", ibv_create_qp(pd, &ia), EINVAL, d_qp);
	ia.cap.max_inline_data = 0;

	ud = mk_qp(pd, cq, IBV_QPT_UD, NULL);
	check("qp_create_ud", ud != NULL, "expected a UD QP got NULL errno %d (%s)",
	      errno, errname(errno));
	if (ud)
		expect_i("qp_create_ud_state_reset", IBV_QPS_RESET, query_state(ud));

	uc = mk_qp(pd, cq, IBV_QPT_UC, NULL);
	if (uc)
		pass("qp_create_uc");
	else
		skip("qp_create_uc", "UC QPs not supported by this device");

	/* The kernel resolves object handles per context, so "a CQ from another
	 * context" cannot be expressed reliably through the public API (the
	 * provider passes the foreign CQ's handle, which may name an unrelated
	 * CQ of this context). */
	skip("qp_create_with_cq_from_other_context",
	     "not meaningful through the public API (handles are per context)");

	/* uverbs_free_pd -> ib_destroy_usecnt(): -EBUSY while QPs exist. */
	rc = ibv_dealloc_pd(pd);
	expect_ret("pd_dealloc_with_qp_ebusy", EBUSY, rc);
	if (rc == 0)
		pd = NULL;

	expect_ret("qp_destroy_rc", 0, ibv_destroy_qp(qp));
	if (qp2)
		expect_ret("qp_destroy_rc_second", 0, ibv_destroy_qp(qp2));
	if (ud)
		expect_ret("qp_destroy_ud", 0, ibv_destroy_qp(ud));
	if (uc)
		expect_ret("qp_destroy_uc", 0, ibv_destroy_qp(uc));
	qp = NULL;
out:
	if (qp)
		ibv_destroy_qp(qp);
	if (cq)
		expect_ret("qp_create_destroy_cq", 0, ibv_destroy_cq(cq));
	if (pd)
		expect_ret("qp_create_dealloc_pd", 0, ibv_dealloc_pd(pd));
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: qp_rc_modify - the RC state machine                          */
/* ------------------------------------------------------------------ */

static void g_qp_rc(void)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr = NULL;
	struct ibv_qp *qp = NULL;
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a, q;
	struct ibv_qp_init_attr qi;
	char s1[64], s2[64];
	int rc;

	if (!fx_open())
		return;
	pd = ibv_alloc_pd(F.ctx);
	cq = ibv_create_cq(F.ctx, 64, NULL, NULL, 0);
	mr = pd ? reg_buf(pd) : NULL;
	qp = (cq && mr) ? mk_qp(pd, cq, IBV_QPT_RC, &ia) : NULL;
	if (!qp) {
		fail("qp_rc_setup", "expected PD, CQ, MR, QP got %p %p %p %p errno %d (%s)",
		     (void *)pd, (void *)cq, (void *)mr, (void *)qp, errno, errname(errno));
		goto out;
	}
	const int INIT_M = std_mask(IBV_QPT_RC, IBV_QPS_INIT);
	const int RTR_M = std_mask(IBV_QPT_RC, IBV_QPS_RTR);
	const int RTS_M = std_mask(IBV_QPT_RC, IBV_QPS_RTS);

	/* RESET -> RESET is valid with no attributes (qp_state_table). */
	expect_ret("qp_rc_reset_to_reset", 0, step(qp, IBV_QPS_RESET));

	/* RESET -> INIT: required PKEY_INDEX | PORT | ACCESS_FLAGS, nothing
	 * optional (ib_modify_qp_is_ok / qp_state_table). */
	std_attr(qp, IBV_QPS_INIT, &a);
	bad_modify("qp_rc_reset_to_init_missing_pkey_index", qp, &a,
		   INIT_M & ~IBV_QP_PKEY_INDEX, EINVAL);
	bad_modify("qp_rc_reset_to_init_missing_port", qp, &a,
		   INIT_M & ~IBV_QP_PORT, EINVAL);
	bad_modify("qp_rc_reset_to_init_missing_access_flags", qp, &a,
		   INIT_M & ~IBV_QP_ACCESS_FLAGS, EINVAL);
	bad_modify("qp_rc_reset_to_init_extra_qkey", qp, &a, INIT_M | IBV_QP_QKEY,
		   EINVAL);
	bad_modify("qp_rc_reset_to_init_extra_path_mtu", qp, &a,
		   INIT_M | IBV_QP_PATH_MTU, EINVAL);
	/* uverbs modify_qp(): IB_QP_PORT with !rdma_is_port_valid -> -EINVAL */
	a.port_num = 2;
	bad_modify("qp_rc_reset_to_init_port_2", qp, &a, INIT_M, EINVAL);
	a.port_num = 0;
	bad_modify("qp_rc_reset_to_init_port_0", qp, &a, INIT_M, EINVAL);
	/* ib_modify_qp_is_ok(): IB_QP_CUR_STATE only from RTR/RTS/SQD/SQE. */
	std_attr(qp, IBV_QPS_INIT, &a);
	a.cur_qp_state = IBV_QPS_RESET;
	bad_modify("qp_rc_reset_to_init_with_cur_state", qp, &a,
		   INIT_M | IBV_QP_CUR_STATE, EINVAL);
	/* Illegal transitions out of RESET (only RESET and INIT are valid;
	 * note RESET -> ERR is not in the kernel table either). */
	std_attr(qp, IBV_QPS_RTR, &a);
	bad_modify("qp_rc_reset_to_rtr", qp, &a, RTR_M, EINVAL);
	std_attr(qp, IBV_QPS_RTS, &a);
	bad_modify("qp_rc_reset_to_rts", qp, &a, RTS_M, EINVAL);
	std_attr(qp, IBV_QPS_SQD, &a);
	bad_modify("qp_rc_reset_to_sqd", qp, &a, IBV_QP_STATE, EINVAL);
	std_attr(qp, IBV_QPS_ERR, &a);
	bad_modify("qp_rc_reset_to_err", qp, &a, IBV_QP_STATE, EINVAL);
	/* uverbs modify_qp(): qp_state > IB_QPS_ERR -> -EINVAL */
	std_attr(qp, IBV_QPS_INIT, &a);
	a.qp_state = (enum ibv_qp_state)(IBV_QPS_UNKNOWN + 1);
	bad_modify("qp_rc_invalid_state_value", qp, &a, INIT_M, EINVAL);
	expect_state("qp_rc_still_reset_after_rejects", qp, IBV_QPS_RESET);

	/* RESET -> INIT */
	std_attr(qp, IBV_QPS_INIT, &a);
	rc = ibv_modify_qp(qp, &a, INIT_M);
	if (!expect_ret("qp_rc_reset_to_init", 0, rc))
		goto out;
	expect_i("qp_rc_state_field_init", IBV_QPS_INIT, qp->state);
	memset(&q, 0, sizeof q);
	rc = ibv_query_qp(qp, &q, ALL_QP_MASK, &qi);
	if (expect_ret("qp_rc_query_init", 0, rc))
		check("qp_rc_query_init_attrs", q.qp_state == IBV_QPS_INIT &&
		      q.port_num == 1 && q.pkey_index == 0 &&
		      q.qp_access_flags == QP_ACCESS,
		      "expected state %d port 1 pkey_index 0 access 0x%x got %d %d %d 0x%x",
		      IBV_QPS_INIT, QP_ACCESS, q.qp_state, q.port_num, q.pkey_index,
		      q.qp_access_flags);

	/* INIT -> INIT with the optional attributes */
	std_attr(qp, IBV_QPS_INIT, &a);
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
	expect_ret("qp_rc_init_to_init", 0, rc);
	memset(&q, 0, sizeof q);
	if (rc == 0 && ibv_query_qp(qp, &q, IBV_QP_ACCESS_FLAGS, &qi) == 0)
		expect_x("qp_rc_init_to_init_access_flags", IBV_ACCESS_REMOTE_READ,
			 q.qp_access_flags);
	/* IBV_QP_CAP is in no row of qp_state_table (QP resize is not
	 * supported through modify) -> -EINVAL. */
	std_attr(qp, IBV_QPS_INIT, &a);
	a.cap = ia.cap;
	bad_modify("qp_rc_init_to_init_extra_cap", qp, &a, IBV_QP_STATE | IBV_QP_CAP,
		   EINVAL);

	/* INIT -> RTR: required AV | PATH_MTU | DEST_QPN | RQ_PSN |
	 * MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER; optional ALT_PATH |
	 * ACCESS_FLAGS | PKEY_INDEX. */
	std_attr(qp, IBV_QPS_RTR, &a);
	bad_modify("qp_rc_init_to_rtr_missing_av", qp, &a, RTR_M & ~IBV_QP_AV, EINVAL);
	bad_modify("qp_rc_init_to_rtr_missing_path_mtu", qp, &a,
		   RTR_M & ~IBV_QP_PATH_MTU, EINVAL);
	bad_modify("qp_rc_init_to_rtr_missing_dest_qpn", qp, &a,
		   RTR_M & ~IBV_QP_DEST_QPN, EINVAL);
	bad_modify("qp_rc_init_to_rtr_missing_rq_psn", qp, &a,
		   RTR_M & ~IBV_QP_RQ_PSN, EINVAL);
	bad_modify("qp_rc_init_to_rtr_missing_max_dest_rd_atomic", qp, &a,
		   RTR_M & ~IBV_QP_MAX_DEST_RD_ATOMIC, EINVAL);
	bad_modify("qp_rc_init_to_rtr_missing_min_rnr_timer", qp, &a,
		   RTR_M & ~IBV_QP_MIN_RNR_TIMER, EINVAL);
	bad_modify("qp_rc_init_to_rtr_extra_sq_psn", qp, &a, RTR_M | IBV_QP_SQ_PSN,
		   EINVAL);
	bad_modify("qp_rc_init_to_rtr_extra_timeout", qp, &a, RTR_M | IBV_QP_TIMEOUT,
		   EINVAL);
	bad_modify("qp_rc_init_to_rtr_extra_max_qp_rd_atomic", qp, &a,
		   RTR_M | IBV_QP_MAX_QP_RD_ATOMIC, EINVAL);
	bad_modify("qp_rc_init_to_rtr_extra_port", qp, &a, RTR_M | IBV_QP_PORT, EINVAL);
	/* ALT_PATH is optional in the table but _ib_modify_qp() bans APM on
	 * RoCE ("Ban them in roce mode") -> -EINVAL. */
	a.alt_ah_attr = a.ah_attr;
	a.alt_port_num = 1;
	a.alt_timeout = TIMEOUT;
	bad_modify("qp_rc_init_to_rtr_alt_path_on_roce", qp, &a,
		   RTR_M | IBV_QP_ALT_PATH, EINVAL);
	/* rdma_check_ah_attr(): RoCE AH without GRH -> -EINVAL. */
	std_attr(qp, IBV_QPS_RTR, &a);
	a.ah_attr.is_global = 0;
	bad_modify("qp_rc_init_to_rtr_non_global_ah", qp, &a, RTR_M, EINVAL);
	/* uverbs modify_qp(): AV port invalid or != QP port -> -EINVAL. */
	std_attr(qp, IBV_QPS_RTR, &a);
	a.ah_attr.port_num = 2;
	bad_modify("qp_rc_init_to_rtr_ah_port_2", qp, &a, RTR_M, EINVAL);
	/* rdma_fill_sgid_attr() -> rdma_get_gid_attr(): index >= table size
	 * -> -EINVAL. */
	if (F.pa.gid_tbl_len < 256) {
		std_attr(qp, IBV_QPS_RTR, &a);
		a.ah_attr.grh.sgid_index = (uint8_t)F.pa.gid_tbl_len;
		bad_modify("qp_rc_init_to_rtr_sgid_index_out_of_range", qp, &a, RTR_M,
			   EINVAL);
	}
	/* ... and an empty slot within the table -> -ENODATA. */
	if (valid_gids() < F.pa.gid_tbl_len && valid_gids() < 256) {
		std_attr(qp, IBV_QPS_RTR, &a);
		a.ah_attr.grh.sgid_index = (uint8_t)valid_gids();
		bad_modify("qp_rc_init_to_rtr_sgid_index_empty_enodata", qp, &a, RTR_M, ENODATA);
	}
	/* rxe_qp_chk_attr(): path_mtu > port max_mtu -> -EINVAL. */
	if (F.pa.max_mtu < IBV_MTU_4096) {
		std_attr(qp, IBV_QPS_RTR, &a);
		a.path_mtu = IBV_MTU_4096;
		bad_modify("qp_rc_init_to_rtr_path_mtu_above_port_max", qp, &a, RTR_M,
			   EINVAL);
	}
	expect_state("qp_rc_still_init_after_rejects", qp, IBV_QPS_INIT);

	/* INIT -> RTR, with the optional ACCESS_FLAGS setting access back. */
	std_attr(qp, IBV_QPS_RTR, &a);
	rc = ibv_modify_qp(qp, &a, RTR_M | IBV_QP_ACCESS_FLAGS);
	if (!expect_ret("qp_rc_init_to_rtr", 0, rc))
		goto out;
	expect_state("qp_rc_state_rtr", qp, IBV_QPS_RTR);

	/* RTR -> RTS: required TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN |
	 * MAX_QP_RD_ATOMIC; optional CUR_STATE | ALT_PATH | ACCESS_FLAGS |
	 * MIN_RNR_TIMER | PATH_MIG_STATE. */
	std_attr(qp, IBV_QPS_RTS, &a);
	bad_modify("qp_rc_rtr_to_rts_missing_timeout", qp, &a, RTS_M & ~IBV_QP_TIMEOUT,
		   EINVAL);
	bad_modify("qp_rc_rtr_to_rts_missing_retry_cnt", qp, &a,
		   RTS_M & ~IBV_QP_RETRY_CNT, EINVAL);
	bad_modify("qp_rc_rtr_to_rts_missing_rnr_retry", qp, &a,
		   RTS_M & ~IBV_QP_RNR_RETRY, EINVAL);
	bad_modify("qp_rc_rtr_to_rts_missing_sq_psn", qp, &a, RTS_M & ~IBV_QP_SQ_PSN,
		   EINVAL);
	bad_modify("qp_rc_rtr_to_rts_missing_max_qp_rd_atomic", qp, &a,
		   RTS_M & ~IBV_QP_MAX_QP_RD_ATOMIC, EINVAL);
	bad_modify("qp_rc_rtr_to_rts_extra_path_mtu", qp, &a, RTS_M | IBV_QP_PATH_MTU,
		   EINVAL);
	bad_modify("qp_rc_rtr_to_rts_extra_dest_qpn", qp, &a, RTS_M | IBV_QP_DEST_QPN,
		   EINVAL);
	bad_modify("qp_rc_rtr_to_rts_extra_rq_psn", qp, &a, RTS_M | IBV_QP_RQ_PSN,
		   EINVAL);
	/* rxe_qp_chk_attr(): timeout > 31 -> -EINVAL (5-bit field). */
	a.timeout = 32;
	bad_modify("qp_rc_rtr_to_rts_timeout_32", qp, &a, RTS_M, EINVAL);
	a.timeout = TIMEOUT;
	/* rxe_qp_chk_attr(): max_rd_atomic > max_qp_rd_atom -> -EINVAL (use
	 * one above both device limits). */
	{
		int lim = F.da.max_qp_rd_atom > F.da.max_qp_init_rd_atom ?
			  F.da.max_qp_rd_atom : F.da.max_qp_init_rd_atom;

		if (lim < 255) {
			a.max_rd_atomic = (uint8_t)(lim + 1);
			bad_modify("qp_rc_rtr_to_rts_max_rd_atomic_above_device", qp, &a,
				   RTS_M, EINVAL);
			a.max_rd_atomic = F.rd_atom;
		}
	}
	expect_state("qp_rc_still_rtr_after_rejects", qp, IBV_QPS_RTR);

	rc = ibv_modify_qp(qp, &a, RTS_M);
	if (!expect_ret("qp_rc_rtr_to_rts", 0, rc))
		goto out;
	expect_state("qp_rc_state_rts", qp, IBV_QPS_RTS);

	/* Everything that was set is reported back. */
	memset(&q, 0, sizeof q);
	memset(&qi, 0, sizeof qi);
	rc = ibv_query_qp(qp, &q, ALL_QP_MASK, &qi);
	if (expect_ret("qp_rc_query_rts", 0, rc)) {
		expect_i("qp_rc_query_state", IBV_QPS_RTS, q.qp_state);
		expect_i("qp_rc_query_path_mtu", IBV_MTU_1024, q.path_mtu);
		expect_i("qp_rc_query_dest_qp_num", qp->qp_num, q.dest_qp_num);
		expect_x("qp_rc_query_rq_psn", RQ_PSN, q.rq_psn);
		expect_x("qp_rc_query_sq_psn", SQ_PSN, q.sq_psn);
		expect_i("qp_rc_query_timeout", TIMEOUT, q.timeout);
		expect_i("qp_rc_query_retry_cnt", 7, q.retry_cnt);
		expect_i("qp_rc_query_rnr_retry", 7, q.rnr_retry);
		expect_i("qp_rc_query_min_rnr_timer", MIN_RNR, q.min_rnr_timer);
		/* Powers of two, so rxe's roundup_pow_of_two leaves them alone. */
		expect_i("qp_rc_query_max_rd_atomic", F.rd_atom, q.max_rd_atomic);
		expect_i("qp_rc_query_max_dest_rd_atomic", F.dest_rd_atom,
			 q.max_dest_rd_atomic);
		expect_x("qp_rc_query_qp_access_flags", QP_ACCESS, q.qp_access_flags);
		expect_i("qp_rc_query_port_num", 1, q.port_num);
		expect_i("qp_rc_query_pkey_index", 0, q.pkey_index);
		check("qp_rc_query_ah_attr", q.ah_attr.is_global == 1 &&
		      q.ah_attr.port_num == 1 && q.ah_attr.grh.sgid_index == 0 &&
		      q.ah_attr.grh.hop_limit == HOP_LIMIT &&
		      !memcmp(&q.ah_attr.grh.dgid, &F.gid0, sizeof F.gid0),
		      "expected is_global 1 port 1 sgid_index 0 hop_limit %d dgid %s got %d %d %d %d %s",
		      HOP_LIMIT, gidstr(&F.gid0, s1, sizeof s1), q.ah_attr.is_global,
		      q.ah_attr.port_num, q.ah_attr.grh.sgid_index,
		      q.ah_attr.grh.hop_limit, gidstr(&q.ah_attr.grh.dgid, s2, sizeof s2));
		check_cap("qp_rc_query_cap", &q.cap, 16, F.sge);
		check_cap("qp_rc_query_init_attr_cap", &qi.cap, 16, F.sge);
		check("qp_rc_query_cap_matches_create",
		      q.cap.max_send_wr == ia.cap.max_send_wr &&
		      q.cap.max_recv_wr == ia.cap.max_recv_wr &&
		      q.cap.max_send_sge == ia.cap.max_send_sge &&
		      q.cap.max_recv_sge == ia.cap.max_recv_sge,
		      "expected the caps ibv_create_qp returned (%u/%u/%u/%u) got %u/%u/%u/%u",
		      ia.cap.max_send_wr, ia.cap.max_recv_wr, ia.cap.max_send_sge,
		      ia.cap.max_recv_sge, q.cap.max_send_wr, q.cap.max_recv_wr,
		      q.cap.max_send_sge, q.cap.max_recv_sge);
		check("qp_rc_query_init_attr", qi.qp_type == IBV_QPT_RC &&
		      qi.sq_sig_all == 1 && qi.send_cq == cq && qi.recv_cq == cq,
		      "expected type RC sq_sig_all 1 cqs %p got %d %d %p %p", (void *)cq,
		      qi.qp_type, qi.sq_sig_all, (void *)qi.send_cq, (void *)qi.recv_cq);
	}

	/* RTS -> RTS: optional CUR_STATE | ACCESS_FLAGS | ALT_PATH |
	 * PATH_MIG_STATE | MIN_RNR_TIMER. */
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.min_rnr_timer = 20;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER);
	expect_ret("qp_rc_rts_to_rts_min_rnr_timer", 0, rc);
	memset(&q, 0, sizeof q);
	if (rc == 0 && ibv_query_qp(qp, &q, IBV_QP_MIN_RNR_TIMER, &qi) == 0)
		expect_i("qp_rc_rts_to_rts_min_rnr_timer_query", 20, q.min_rnr_timer);
	a.cur_qp_state = IBV_QPS_RTS;
	expect_ret("qp_rc_rts_to_rts_cur_state", 0,
		   ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE));
	std_attr(qp, IBV_QPS_RTS, &a);
	bad_modify("qp_rc_rts_to_rts_extra_path_mtu", qp, &a,
		   IBV_QP_STATE | IBV_QP_PATH_MTU, EINVAL);
	bad_modify("qp_rc_rts_to_rts_extra_sq_psn", qp, &a,
		   IBV_QP_STATE | IBV_QP_SQ_PSN, EINVAL);
	std_attr(qp, IBV_QPS_INIT, &a);
	bad_modify("qp_rc_rts_to_init", qp, &a, INIT_M, EINVAL);
	std_attr(qp, IBV_QPS_RTR, &a);
	bad_modify("qp_rc_rts_to_rtr", qp, &a, RTR_M, EINVAL);
	expect_state("qp_rc_still_rts_after_rejects", qp, IBV_QPS_RTS);

	/* Posting more SGEs than the QP's capability: EINVAL, bad_wr = the WR.
	 * (rdma-core's pyverbs create_rq_with_larger_sgl_bad_flow expects
	 * EINVAL for receives; for sends rxe's validate_send_wr returns
	 * -EINVAL - a sign slip in rxe - and mlx5 returns ENOMEM.) */
	{
		enum { MAXS = 64 };
		struct ibv_sge sge[MAXS];

		for (int i = 0; i < MAXS; i++)
			sge[i] = (struct ibv_sge){ .addr = (uintptr_t)buf + 64 * i,
						   .length = 16, .lkey = mr->lkey };
		if (ia.cap.max_send_sge + 1 <= MAXS) {
			struct ibv_send_wr wr = { .wr_id = 1, .sg_list = sge,
						  .num_sge = (int)ia.cap.max_send_sge + 1,
						  .opcode = IBV_WR_SEND,
						  .send_flags = IBV_SEND_SIGNALED };
			struct ibv_send_wr *bad = NULL;

			rc = ibv_post_send(qp, &wr, &bad);
			check("qp_rc_post_send_too_many_sge", rc == EINVAL && bad == &wr,
			      "expected %d (EINVAL) with bad_wr = wr got %d (%s%s) with bad_wr %s",
			      EINVAL, rc, rc < 0 ? "-" : "", errname(rc),
			      bad == &wr ? "= wr" : bad ? "other" : "NULL");
		}
		if (ia.cap.max_recv_sge + 1 <= MAXS) {
			struct ibv_recv_wr wr = { .wr_id = 2, .sg_list = sge,
						  .num_sge = (int)ia.cap.max_recv_sge + 1 };
			struct ibv_recv_wr *bad = NULL;

			rc = ibv_post_recv(qp, &wr, &bad);
			check("qp_rc_post_recv_too_many_sge", rc == EINVAL && bad == &wr,
			      "expected %d (EINVAL) with bad_wr = wr got %d (%s%s) with bad_wr %s",
			      EINVAL, rc, rc < 0 ? "-" : "", errname(rc),
			      bad == &wr ? "= wr" : bad ? "other" : "NULL");
		}
	}

	/* RTS -> SQD -> SQD -> RTS */
	rc = step(qp, IBV_QPS_SQD);
	expect_ret("qp_rc_rts_to_sqd", 0, rc);
	if (rc == 0) {
		expect_state("qp_rc_state_sqd", qp, IBV_QPS_SQD);
		/* SQD -> SQD may change path/timeouts (TIMEOUT is optional). */
		memset(&a, 0, sizeof a);
		a.qp_state = IBV_QPS_SQD;
		a.timeout = 15;
		rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT);
		expect_ret("qp_rc_sqd_to_sqd_timeout", 0, rc);
		memset(&q, 0, sizeof q);
		if (rc == 0 && ibv_query_qp(qp, &q, IBV_QP_TIMEOUT, &qi) == 0)
			expect_i("qp_rc_sqd_to_sqd_timeout_query", 15, q.timeout);
		std_attr(qp, IBV_QPS_SQD, &a);
		bad_modify("qp_rc_sqd_to_sqd_extra_sq_psn", qp, &a,
			   IBV_QP_STATE | IBV_QP_SQ_PSN, EINVAL);
		/* SQD -> RTS: nothing required; optional CUR_STATE | ALT_PATH |
		 * ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE - the RTR->RTS
		 * attributes (TIMEOUT, SQ_PSN, ...) are not allowed. */
		std_attr(qp, IBV_QPS_RTS, &a);
		bad_modify("qp_rc_sqd_to_rts_extra_sq_psn", qp, &a,
			   IBV_QP_STATE | IBV_QP_SQ_PSN, EINVAL);
		a.min_rnr_timer = MIN_RNR;
		rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER);
		expect_ret("qp_rc_sqd_to_rts", 0, rc);
		if (rc == 0)
			expect_state("qp_rc_state_rts_after_sqd", qp, IBV_QPS_RTS);
		else
			drive(qp, IBV_QPS_RTS);
	}

	/* RTS -> ERR -> (ERR) -> RESET */
	rc = step(qp, IBV_QPS_ERR);
	expect_ret("qp_rc_rts_to_err", 0, rc);
	if (rc == 0) {
		expect_state("qp_rc_state_err", qp, IBV_QPS_ERR);
		std_attr(qp, IBV_QPS_RTS, &a);
		bad_modify("qp_rc_err_to_rts", qp, &a, RTS_M, EINVAL);
		std_attr(qp, IBV_QPS_INIT, &a);
		bad_modify("qp_rc_err_to_init", qp, &a, INIT_M, EINVAL);
		expect_ret("qp_rc_err_to_err", 0, step(qp, IBV_QPS_ERR));
	}
	rc = step(qp, IBV_QPS_RESET);
	expect_ret("qp_rc_err_to_reset", 0, rc);
	if (rc == 0)
		expect_state("qp_rc_state_reset_again", qp, IBV_QPS_RESET);

	/* A QP is reusable after RESET. */
	expect_ret("qp_rc_reuse_reset_to_init", 0, step(qp, IBV_QPS_INIT));
	expect_ret("qp_rc_init_to_reset", 0, step(qp, IBV_QPS_RESET));
	expect_ret("qp_rc_reuse_to_init_again", 0, step(qp, IBV_QPS_INIT));
	expect_ret("qp_rc_init_to_err", 0, step(qp, IBV_QPS_ERR));
	expect_ret("qp_rc_err_to_reset_from_init", 0, step(qp, IBV_QPS_RESET));
	expect_ret("qp_rc_reuse_to_rtr", 0, drive(qp, IBV_QPS_RTR));
	expect_ret("qp_rc_rtr_to_err", 0, step(qp, IBV_QPS_ERR));

	/* _ib_modify_qp(): on IB/RoCE, rq_psn/sq_psn above 24 bits are
	 * masked to 24 bits (with a warning), not rejected. */
	drive(qp, IBV_QPS_INIT);
	std_attr(qp, IBV_QPS_RTR, &a);
	a.rq_psn = 0x01abcdef;
	rc = ibv_modify_qp(qp, &a, RTR_M);
	expect_ret("qp_rc_rtr_rq_psn_over_24_bits_accepted", 0, rc);
	memset(&q, 0, sizeof q);
	if (rc == 0 && ibv_query_qp(qp, &q, IBV_QP_RQ_PSN, &qi) == 0)
		expect_x("qp_rc_rq_psn_masked_to_24_bits", 0xabcdef, q.rq_psn);
	if (rc == 0) {
		std_attr(qp, IBV_QPS_RTS, &a);
		a.sq_psn = 0xff123456;
		rc = ibv_modify_qp(qp, &a, RTS_M);
		expect_ret("qp_rc_rts_sq_psn_over_24_bits_accepted", 0, rc);
		memset(&q, 0, sizeof q);
		if (rc == 0 && ibv_query_qp(qp, &q, IBV_QP_SQ_PSN, &qi) == 0)
			expect_x("qp_rc_sq_psn_masked_to_24_bits", 0x123456, q.sq_psn);
		/* Any state -> RESET directly. */
		expect_ret("qp_rc_rts_to_reset", 0, step(qp, IBV_QPS_RESET));
	}
out:
	if (qp)
		expect_ret("qp_rc_destroy", 0, ibv_destroy_qp(qp));
	if (mr)
		ibv_dereg_mr(mr);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: qp_ud_modify                                                 */
/* ------------------------------------------------------------------ */

static void g_qp_ud(void)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp = NULL;
	struct ibv_qp_attr a, q;
	struct ibv_qp_init_attr qi;
	int rc;

	if (!fx_open())
		return;
	pd = ibv_alloc_pd(F.ctx);
	cq = ibv_create_cq(F.ctx, 64, NULL, NULL, 0);
	qp = (pd && cq) ? mk_qp(pd, cq, IBV_QPT_UD, NULL) : NULL;
	if (!qp) {
		fail("qp_ud_setup", "expected PD, CQ, UD QP got %p %p %p errno %d (%s)",
		     (void *)pd, (void *)cq, (void *)qp, errno, errname(errno));
		goto out;
	}
	const int INIT_M = std_mask(IBV_QPT_UD, IBV_QPS_INIT);

	/* RESET -> INIT for UD: required PKEY_INDEX | PORT | QKEY. */
	std_attr(qp, IBV_QPS_INIT, &a);
	bad_modify("qp_ud_reset_to_init_missing_qkey", qp, &a, INIT_M & ~IBV_QP_QKEY,
		   EINVAL);
	bad_modify("qp_ud_reset_to_init_missing_pkey_index", qp, &a,
		   INIT_M & ~IBV_QP_PKEY_INDEX, EINVAL);
	bad_modify("qp_ud_reset_to_init_missing_port", qp, &a, INIT_M & ~IBV_QP_PORT,
		   EINVAL);
	bad_modify("qp_ud_reset_to_init_extra_access_flags", qp, &a,
		   INIT_M | IBV_QP_ACCESS_FLAGS, EINVAL);
	rc = ibv_modify_qp(qp, &a, INIT_M);
	if (!expect_ret("qp_ud_reset_to_init", 0, rc))
		goto out;
	memset(&q, 0, sizeof q);
	rc = ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_PORT |
			  IBV_QP_PKEY_INDEX, &qi);
	if (expect_ret("qp_ud_query_init", 0, rc)) {
		expect_i("qp_ud_query_state_init", IBV_QPS_INIT, q.qp_state);
		expect_x("qp_ud_query_qkey", QKEY, q.qkey);
		expect_i("qp_ud_query_port_num", 1, q.port_num);
	}

	/* INIT -> RTR for UD: nothing required; PKEY_INDEX | QKEY optional. */
	std_attr(qp, IBV_QPS_RTR, &a);
	bad_modify("qp_ud_init_to_rtr_extra_av", qp, &a, IBV_QP_STATE | IBV_QP_AV,
		   EINVAL);
	bad_modify("qp_ud_init_to_rtr_extra_dest_qpn", qp, &a,
		   IBV_QP_STATE | IBV_QP_DEST_QPN, EINVAL);
	expect_ret("qp_ud_init_to_rtr", 0, ibv_modify_qp(qp, &a, IBV_QP_STATE));

	/* RTR -> RTS for UD: SQ_PSN required; CUR_STATE | QKEY optional. */
	std_attr(qp, IBV_QPS_RTS, &a);
	bad_modify("qp_ud_rtr_to_rts_missing_sq_psn", qp, &a, IBV_QP_STATE, EINVAL);
	bad_modify("qp_ud_rtr_to_rts_extra_timeout", qp, &a,
		   IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT, EINVAL);
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	expect_ret("qp_ud_rtr_to_rts", 0, rc);
	memset(&q, 0, sizeof q);
	rc = ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_SQ_PSN, &qi);
	if (expect_ret("qp_ud_query_rts", 0, rc)) {
		expect_i("qp_ud_query_state_rts", IBV_QPS_RTS, q.qp_state);
		expect_x("qp_ud_query_qkey_rts", QKEY, q.qkey);
		expect_x("qp_ud_query_sq_psn", SQ_PSN, q.sq_psn);
		expect_i("qp_ud_query_init_attr_type", IBV_QPT_UD, qi.qp_type);
	}
	/* RTS -> RTS may change the QKEY. */
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.qkey = 0x22222222;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_QKEY);
	expect_ret("qp_ud_rts_to_rts_qkey", 0, rc);
	memset(&q, 0, sizeof q);
	if (rc == 0 && ibv_query_qp(qp, &q, IBV_QP_QKEY, &qi) == 0)
		expect_x("qp_ud_rts_to_rts_qkey_query", 0x22222222, q.qkey);
	expect_ret("qp_ud_rts_to_err", 0, step(qp, IBV_QPS_ERR));
	expect_ret("qp_ud_err_to_reset", 0, step(qp, IBV_QPS_RESET));
out:
	if (qp)
		expect_ret("qp_ud_destroy", 0, ibv_destroy_qp(qp));
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: qp_uc_modify                                                 */
/* ------------------------------------------------------------------ */

static void g_qp_uc(void)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp = NULL;
	struct ibv_qp_attr a, q;
	struct ibv_qp_init_attr qi;
	int rc;

	if (!fx_open())
		return;
	pd = ibv_alloc_pd(F.ctx);
	cq = ibv_create_cq(F.ctx, 64, NULL, NULL, 0);
	if (!pd || !cq) {
		fail("qp_uc_setup", "expected PD and CQ got %p %p", (void *)pd, (void *)cq);
		goto out;
	}
	qp = mk_qp(pd, cq, IBV_QPT_UC, NULL);
	if (!qp) {
		skip("qp_uc_modify", "UC QPs not supported by this device");
		goto out;
	}
	const int RTR_M = std_mask(IBV_QPT_UC, IBV_QPS_RTR);

	expect_ret("qp_uc_reset_to_init", 0, step(qp, IBV_QPS_INIT));
	/* INIT -> RTR for UC: AV | PATH_MTU | DEST_QPN | RQ_PSN; the RC-only
	 * MAX_DEST_RD_ATOMIC / MIN_RNR_TIMER are not allowed. */
	std_attr(qp, IBV_QPS_RTR, &a);
	bad_modify("qp_uc_init_to_rtr_extra_max_dest_rd_atomic", qp, &a,
		   RTR_M | IBV_QP_MAX_DEST_RD_ATOMIC, EINVAL);
	bad_modify("qp_uc_init_to_rtr_extra_min_rnr_timer", qp, &a,
		   RTR_M | IBV_QP_MIN_RNR_TIMER, EINVAL);
	bad_modify("qp_uc_init_to_rtr_missing_rq_psn", qp, &a, RTR_M & ~IBV_QP_RQ_PSN,
		   EINVAL);
	expect_ret("qp_uc_init_to_rtr", 0, ibv_modify_qp(qp, &a, RTR_M));
	/* RTR -> RTS for UC: SQ_PSN only. */
	std_attr(qp, IBV_QPS_RTS, &a);
	bad_modify("qp_uc_rtr_to_rts_extra_timeout", qp, &a,
		   IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT, EINVAL);
	bad_modify("qp_uc_rtr_to_rts_extra_max_qp_rd_atomic", qp, &a,
		   IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC, EINVAL);
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	expect_ret("qp_uc_rtr_to_rts", 0, rc);
	memset(&q, 0, sizeof q);
	rc = ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_SQ_PSN |
			  IBV_QP_RQ_PSN | IBV_QP_PATH_MTU, &qi);
	if (expect_ret("qp_uc_query", 0, rc))
		check("qp_uc_query_attrs", q.qp_state == IBV_QPS_RTS &&
		      q.dest_qp_num == qp->qp_num && q.sq_psn == SQ_PSN &&
		      q.rq_psn == RQ_PSN && q.path_mtu == IBV_MTU_1024,
		      "expected RTS dest %u sq_psn 0x%x rq_psn 0x%x mtu %d got %d %u 0x%x 0x%x %d",
		      qp->qp_num, SQ_PSN, RQ_PSN, IBV_MTU_1024, q.qp_state,
		      q.dest_qp_num, q.sq_psn, q.rq_psn, q.path_mtu);
	expect_ret("qp_uc_destroy", 0, ibv_destroy_qp(qp));
	qp = NULL;
out:
	if (qp)
		ibv_destroy_qp(qp);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: post_state - posting vs. QP state                            */
/* ------------------------------------------------------------------ */

/*
 * Memory windows (man ibv_alloc_mw, ibv_bind_mw): ib_uverbs_alloc_mw takes
 * types 1 and 2 only (EINVAL, pyverbs test_reg_mw_wrong_type); a PD with a
 * window is busy; libibverbs' inline ibv_bind_mw refuses a type 2 window
 * (EINVAL) and an MR of another PD (EPERM); a type 1 bind is a work request
 * that completes IBV_WC_BIND_MW and changes the rkey's low 8 bits at once
 * (rxe's provider); an MR with a bound window cannot be deregistered (rxe's
 * rxe_dereg_mr: EINVAL, IBA 10.6.7.2.6); BIND_MW on a UD QP is refused.
 */
static void g_mw(void)
{
	struct ibv_pd *pd = NULL, *pd2 = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_mr *mr = NULL, *mr2 = NULL;
	struct ibv_qp *qp = NULL, *ud = NULL;
	struct ibv_mw *mw1 = NULL, *mw2 = NULL;
	struct ibv_wc wc[2];
	int n;

	if (!fx_open())
		return;
	pd = ibv_alloc_pd(F.ctx);
	pd2 = ibv_alloc_pd(F.ctx);
	cq = ibv_create_cq(F.ctx, 64, NULL, NULL, 0);
	mr = pd ? ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) : NULL;
	mr2 = pd2 ? ibv_reg_mr(pd2, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) : NULL;
	qp = (cq && mr) ? mk_qp(pd, cq, IBV_QPT_RC, NULL) : NULL;
	ud = qp ? mk_qp(pd, cq, IBV_QPT_UD, NULL) : NULL;
	if (!ud || !mr2 || drive(qp, IBV_QPS_RTS) || drive(ud, IBV_QPS_RTS)) {
		fail("mw_setup", "expected PDs, CQ, MRs, QPs in RTS, errno %d (%s)", errno, errname(errno));
		goto out;
	}
	EXPECT_NULL("mw_alloc_type_3_einval", ibv_alloc_mw(pd, (enum ibv_mw_type)3), EINVAL, NULL);
	EXPECT_OBJ("mw_alloc_type_1", mw1, ibv_alloc_mw(pd, IBV_MW_TYPE_1));
	EXPECT_OBJ("mw_alloc_type_2", mw2, ibv_alloc_mw(pd, IBV_MW_TYPE_2));
	if (!mw1 || !mw2)
		goto out;
	check("mw_fields", mw1->pd == pd && mw1->context == F.ctx && mw1->type == IBV_MW_TYPE_1 &&
	      mw2->type == IBV_MW_TYPE_2 && mw1->rkey != mw2->rkey && mw1->rkey != mr->rkey,
	      "expected pd, context, types and distinct keys got %p %p %d %d 0x%x 0x%x",
	      (void *)mw1->pd, (void *)mw1->context, mw1->type, mw2->type, mw1->rkey, mw2->rkey);
	expect_ret("mw_dealloc_pd_busy", EBUSY, ibv_dealloc_pd(pd));

	struct ibv_mw_bind b = { .wr_id = 0x61, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = { .mr = mr, .addr = (uintptr_t)buf + 1024, .length = 2048,
						.mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	expect_ret("mw_bind_type_2_einval", EINVAL, ibv_bind_mw(qp, mw2, &b));
	b.bind_info.mr = mr2;
	expect_ret("mw_bind_other_pd_mr_eperm", EPERM, ibv_bind_mw(qp, mw1, &b));
	b.bind_info.mr = mr;
	uint32_t old = mw1->rkey;
	expect_ret("mw_bind_type_1", 0, ibv_bind_mw(qp, mw1, &b));
	n = poll_cq_for(cq, wc, 1, 1000);
	check("mw_bind_type_1_completion", n == 1 && wc[0].wr_id == 0x61 && wc[0].status == IBV_WC_SUCCESS &&
	      wc[0].opcode == IBV_WC_BIND_MW,
	      "expected one BIND_MW success got %d wr_id 0x%llx status %d opcode %d", n,
	      n > 0 ? (unsigned long long)wc[0].wr_id : 0ull, n > 0 ? (int)wc[0].status : -1, n > 0 ? (int)wc[0].opcode : -1);
	expect_x("mw_bind_type_1_rkey", ibv_inc_rkey(old), mw1->rkey);
	expect_ret("mw_dereg_mr_with_bound_window_einval", EINVAL, ibv_dereg_mr(mr));

	struct ibv_send_wr wr = { .wr_id = 0x62, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.bind_mw.mw = mw2;
	wr.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	wr.bind_mw.bind_info = b.bind_info;
	expect_ret("mw_bind_wr_on_ud_einval", EINVAL, ibv_post_send(ud, &wr, &bad));
	expect_ret("mw_dealloc_bound_type_1", 0, ibv_dealloc_mw(mw1));
	mw1 = NULL;
	expect_ret("mw_dereg_mr_after_dealloc", 0, ibv_dereg_mr(mr));
	mr = NULL;
out:
	if (mw1)
		ibv_dealloc_mw(mw1);
	if (mw2)
		ibv_dealloc_mw(mw2);
	if (ud)
		ibv_destroy_qp(ud);
	if (qp)
		ibv_destroy_qp(qp);
	if (mr)
		ibv_dereg_mr(mr);
	if (mr2)
		ibv_dereg_mr(mr2);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	if (pd2)
		ibv_dealloc_pd(pd2);
	fx_close();
}

static void g_post_state(void)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr = NULL;
	struct ibv_qp *qp = NULL;
	struct ibv_sge sge;
	struct ibv_send_wr swr, *sbad;
	struct ibv_recv_wr rwr, *rbad;
	struct ibv_wc wc[4];
	int rc;

	if (!fx_open())
		return;
	pd = ibv_alloc_pd(F.ctx);
	cq = ibv_create_cq(F.ctx, 64, NULL, NULL, 0);
	mr = pd ? reg_buf(pd) : NULL;
	qp = (cq && mr) ? mk_qp(pd, cq, IBV_QPT_RC, NULL) : NULL;
	if (!qp) {
		fail("post_state_setup", "expected PD, CQ, MR, QP got %p %p %p %p errno %d (%s)",
		     (void *)pd, (void *)cq, (void *)mr, (void *)qp, errno, errname(errno));
		goto out;
	}
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	swr = (struct ibv_send_wr){ .wr_id = 0x51, .sg_list = &sge, .num_sge = 1,
				    .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	rwr = (struct ibv_recv_wr){ .wr_id = 0x52, .sg_list = &sge, .num_sge = 1 };

	/*
	 * Send in RESET/INIT/RTR: EINVAL.  rxe: the doorbell write reaches
	 * the kernel's rxe_post_send(), "qp not ready to send" (state < RTS)
	 * -> -EINVAL, returned as EINVAL by post_send_db(); rxe leaves
	 * bad_wr NULL in that path, so bad_wr is not checked here.  rdma-core's
	 * pyverbs post_sq_state_bad_flow expects EINVAL too.
	 * Receive in RESET: EINVAL (providers/rxe rxe_post_recv: "see
	 * C10-97.2.1", ibqp->state == IBV_QPS_RESET); allowed from INIT on.
	 */
	sbad = NULL;
	expect_ret("post_send_in_reset_einval", EINVAL, ibv_post_send(qp, &swr, &sbad));
	rbad = NULL;
	expect_ret("post_recv_in_reset_einval", EINVAL, ibv_post_recv(qp, &rwr, &rbad));

	if (!expect_ret("post_state_to_init", 0, drive(qp, IBV_QPS_INIT)))
		goto out;
	sbad = NULL;
	expect_ret("post_send_in_init_einval", EINVAL, ibv_post_send(qp, &swr, &sbad));
	rbad = NULL;
	expect_ret("post_recv_in_init_ok", 0, ibv_post_recv(qp, &rwr, &rbad));

	/* Keep the queues clean: go back through RESET (drops the WQEs). */
	if (!expect_ret("post_state_to_rtr", 0, drive(qp, IBV_QPS_RTR)))
		goto out;
	sbad = NULL;
	expect_ret("post_send_in_rtr_einval", EINVAL, ibv_post_send(qp, &swr, &sbad));
	rbad = NULL;
	expect_ret("post_recv_in_rtr_ok", 0, ibv_post_recv(qp, &rwr, &rbad));

	/* In ERR, sends are accepted and complete with WR_FLUSH_ERR (IBA
	 * 10.8.3.3; rxe_post_send only rejects state < RTS). */
	if (!expect_ret("post_state_to_err", 0, drive(qp, IBV_QPS_ERR)))
		goto out;
	while (ibv_poll_cq(cq, 4, wc) > 0)
		;
	sbad = NULL;
	rc = ibv_post_send(qp, &swr, &sbad);
	expect_ret("post_send_in_err_ok", 0, rc);
	if (rc == 0) {
		memset(wc, 0, sizeof wc);
		int n = poll_cq_for(cq, wc, 1, 2000);

		check("post_send_in_err_flushed",
		      n == 1 && wc[0].status == IBV_WC_WR_FLUSH_ERR && wc[0].wr_id == 0x51,
		      "expected 1 completion wr_id 0x51 status %d (%s) within 2 s got %d completion(s), first wr_id 0x%llx status %d (%s)",
		      IBV_WC_WR_FLUSH_ERR, ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), n,
		      (unsigned long long)wc[0].wr_id, wc[0].status,
		      ibv_wc_status_str(wc[0].status));
	}
	rbad = NULL;
	expect_ret("post_recv_in_err_ok", 0, ibv_post_recv(qp, &rwr, &rbad));
out:
	if (qp)
		expect_ret("post_state_destroy_qp", 0, ibv_destroy_qp(qp));
	if (mr)
		ibv_dereg_mr(mr);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: ah                                                           */
/* ------------------------------------------------------------------ */

static void g_ah(void)
{
	struct ibv_pd *pd;
	struct ibv_ah *ah = NULL;
	struct ibv_ah_attr a;
	int rc;

	if (!fx_open())
		return;
	pd = ibv_alloc_pd(F.ctx);
	if (!pd) {
		fail("ah_setup", "expected PD got NULL");
		goto out;
	}
	memset(&a, 0, sizeof a);
	a.is_global = 1;
	a.grh.dgid = F.gid0;
	a.grh.sgid_index = 0;
	a.grh.hop_limit = HOP_LIMIT;
	a.port_num = 1;
	EXPECT_OBJ("ah_create_global", ah, ibv_create_ah(pd, &a));
	if (ah)
		check("ah_fields", ah->pd == pd && ah->context == F.ctx,
		      "expected pd %p context %p got %p %p", (void *)pd, (void *)F.ctx,
		      (void *)ah->pd, (void *)ah->context);

	/* rdma_check_ah_attr(): RoCE without GRH, or invalid port -> -EINVAL;
	 * rdma_get_gid_attr(): sgid_index out of range -> -EINVAL. */
	a.is_global = 0;
	EXPECT_NULL("ah_create_non_global_on_roce_einval", ibv_create_ah(pd, &a), EINVAL,
		    d_ah);
	a.is_global = 1;
	a.port_num = 2;
	EXPECT_NULL("ah_create_port_2_einval", ibv_create_ah(pd, &a), EINVAL, d_ah);
	a.port_num = 1;
	if (F.pa.gid_tbl_len < 256) {
		a.grh.sgid_index = (uint8_t)F.pa.gid_tbl_len;
		EXPECT_NULL("ah_create_sgid_index_out_of_range_einval",
			    ibv_create_ah(pd, &a), EINVAL, d_ah);
		a.grh.sgid_index = 0;
	}
	if (valid_gids() < F.pa.gid_tbl_len && valid_gids() < 256) {
		a.grh.sgid_index = (uint8_t)valid_gids();
		EXPECT_NULL("ah_create_sgid_index_empty_enodata", ibv_create_ah(pd, &a), ENODATA, d_ah);
		a.grh.sgid_index = 0;
	}
	if (ah) {
		/* rdma_create_user_ah takes a PD reference. */
		rc = ibv_dealloc_pd(pd);
		expect_ret("pd_dealloc_with_ah_ebusy", EBUSY, rc);
		if (rc == 0)
			pd = NULL;
		expect_ret("ah_destroy", 0, ibv_destroy_ah(ah));
	}
	if (pd)
		expect_ret("ah_dealloc_pd", 0, ibv_dealloc_pd(pd));
out:
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: srq                                                          */
/* ------------------------------------------------------------------ */

static void g_srq(void)
{
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_srq *srq = NULL;
	struct ibv_mr *mr = NULL;
	struct ibv_qp *qp = NULL;
	struct ibv_srq_init_attr si;
	struct ibv_srq_attr sa;
	int rc;

	if (!fx_open())
		return;
	if (F.da.max_srq <= 0) {
		skip("srq", "device reports max_srq = 0");
		goto out;
	}
	pd = ibv_alloc_pd(F.ctx);
	cq = ibv_create_cq(F.ctx, 64, NULL, NULL, 0);
	mr = pd ? reg_buf(pd) : NULL;
	if (!pd || !cq || !mr) {
		fail("srq_setup", "expected PD, CQ, MR got %p %p %p", (void *)pd, (void *)cq,
		     (void *)mr);
		goto out;
	}
	memset(&si, 0, sizeof si);
	si.attr.max_wr = 16;
	si.attr.max_sge = 1;
	EXPECT_OBJ("srq_create", srq, ibv_create_srq(pd, &si));
	if (!srq)
		goto out;
	/* ibv_cmd_create_srq writes the actual sizes back. */
	check("srq_create_attr_updated", si.attr.max_wr >= 16 && si.attr.max_sge >= 1,
	      "expected max_wr >= 16 max_sge >= 1 got %u %u", si.attr.max_wr,
	      si.attr.max_sge);
	memset(&sa, 0, sizeof sa);
	rc = ibv_query_srq(srq, &sa);
	expect_ret("srq_query", 0, rc);
	if (rc == 0)
		check("srq_query_attrs", sa.max_wr >= 16 && sa.max_sge >= 1,
		      "expected max_wr >= 16 max_sge >= 1 got %u %u", sa.max_wr, sa.max_sge);
	{
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 };
		struct ibv_recv_wr *bad = NULL;

		expect_ret("srq_post_recv", 0, ibv_post_srq_recv(srq, &wr, &bad));
	}
	/* rxe_srq_chk_init(): max_wr > max_srq_wr or max_sge > max_srq_sge
	 * -> -EINVAL. */
	if (F.da.max_srq_wr < INT_MAX) {
		struct ibv_srq_init_attr b = { .attr = { .max_wr = (uint32_t)F.da.max_srq_wr + 1,
							 .max_sge = 1 } };

		EXPECT_NULL("srq_create_max_wr_above_device_einval", ibv_create_srq(pd, &b),
			    EINVAL, d_srq);
	}
	{
		struct ibv_srq_init_attr b = { .attr = { .max_wr = 16,
							 .max_sge = (uint32_t)F.da.max_srq_sge + 1 } };

		EXPECT_NULL("srq_create_max_sge_above_device_einval", ibv_create_srq(pd, &b),
			    EINVAL, d_srq);
	}
	/* A QP attached to the SRQ pins it (ib_destroy_srq_user: usecnt ->
	 * -EBUSY) and the PD (-EBUSY). */
	{
		struct ibv_qp_init_attr ia;

		memset(&ia, 0, sizeof ia);
		ia.send_cq = cq;
		ia.recv_cq = cq;
		ia.srq = srq;
		ia.qp_type = IBV_QPT_RC;
		ia.cap.max_send_wr = 16;
		ia.cap.max_send_sge = 1;
		EXPECT_OBJ("srq_qp_create", qp, ibv_create_qp(pd, &ia));
		if (qp) {
			check("srq_qp_srq_field", qp->srq == srq, "expected qp->srq %p got %p",
			      (void *)srq, (void *)qp->srq);
			rc = ibv_destroy_srq(srq);
			expect_ret("srq_destroy_in_use_by_qp_ebusy", EBUSY, rc);
			if (rc == 0)
				srq = NULL;
			expect_ret("srq_qp_destroy", 0, ibv_destroy_qp(qp));
			qp = NULL;
		}
	}
	if (srq) {
		rc = ibv_dealloc_pd(pd);
		expect_ret("pd_dealloc_with_srq_ebusy", EBUSY, rc);
		if (rc == 0)
			pd = NULL;
		expect_ret("srq_destroy", 0, ibv_destroy_srq(srq));
		srq = NULL;
	}
out:
	if (qp)
		ibv_destroy_qp(qp);
	if (srq)
		ibv_destroy_srq(srq);
	if (mr)
		ibv_dereg_mr(mr);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: xrc - XRC domains, XRC SRQs, INI / TGT QPs, ibv_open_qp      */
/* ------------------------------------------------------------------ */

static struct ibv_xrcd *open_xrcd(int fd, int oflags)
{
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = fd, .oflags = oflags,
	};

	errno = 0;
	return ibv_open_xrcd(F.ctx, &xa);
}

static struct ibv_srq *mk_xsrq(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_xrcd *x, uint32_t comp_mask)
{
	struct ibv_srq_init_attr_ex sa;

	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 16;
	sa.attr.max_sge = 1;
	sa.comp_mask = comp_mask;
	sa.srq_type = IBV_SRQT_XRC;
	sa.pd = pd;
	sa.cq = cq;
	sa.xrcd = x;
	errno = 0;
	return ibv_create_srq_ex(F.ctx, &sa);
}

static struct ibv_qp *mk_tgt(struct ibv_xrcd *x, uint32_t comp_mask, struct ibv_pd *pd)
{
	struct ibv_qp_init_attr_ex ia;

	memset(&ia, 0, sizeof ia);
	ia.qp_type = IBV_QPT_XRC_RECV;
	ia.comp_mask = comp_mask;
	ia.xrcd = x;
	ia.pd = pd;
	errno = 0;
	return ibv_create_qp_ex(F.ctx, &ia);
}

static void g_xrc(void)
{
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_mr *mr = NULL;
	struct ibv_xrcd *x = NULL, *x2 = NULL, *xp = NULL;
	struct ibv_srq *srq = NULL, *bsrq = NULL;
	struct ibv_qp *tgt = NULL, *ini = NULL, *opened = NULL;
	const uint32_t xsrq_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
				   IBV_SRQ_INIT_ATTR_CQ;
	char path[] = "/tmp/uroce-xrcd-XXXXXX";
	int fd = -1, rc;
	uint32_t num = 0;

	if (!fx_open())
		return;
	/* uroce offers XRC (rxe does not): on another device without the cap
	 * the group does not apply */
	if (!(F.da.device_cap_flags & IBV_DEVICE_XRC)) {
		if (strcmp(ibv_get_device_name(F.dev), DEV_NAME))
			skip("xrc", "device does not report IBV_DEVICE_XRC");
		else
			fail("xrc_device_cap", "expected IBV_DEVICE_XRC in device_cap_flags got 0x%x",
			     F.da.device_cap_flags);
		goto out;
	}
	pd = ibv_alloc_pd(F.ctx);
	cq = ibv_create_cq(F.ctx, 64, NULL, NULL, 0);
	mr = pd ? reg_buf(pd) : NULL;
	fd = mkstemp(path);
	if (!pd || !cq || !mr || fd < 0) {
		fail("xrc_setup", "expected PD, CQ, MR, a file got %p %p %p %d", (void *)pd, (void *)cq,
		     (void *)mr, fd);
		goto out;
	}
	/* ibv_cmd_open_xrcd: fd and oflags are both required */
	{
		struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD, .fd = -1 };
		EXPECT_NULL("xrcd_open_without_oflags_einval", ibv_open_xrcd(F.ctx, &xa), EINVAL,
			    d_xrcd);
	}
	/* ib_uverbs_open_xrcd: fdget fails -> EBADF; no domain on the inode
	 * yet and no O_CREAT -> EINVAL; O_CREAT | O_EXCL on one there -> EINVAL */
	EXPECT_NULL("xrcd_open_bad_fd_ebadf", open_xrcd(1000000, O_CREAT), EBADF, d_xrcd);
	EXPECT_NULL("xrcd_open_new_inode_without_o_creat_einval", open_xrcd(fd, 0), EINVAL, d_xrcd);
	EXPECT_OBJ("xrcd_open_file", x, open_xrcd(fd, O_CREAT));
	EXPECT_OBJ("xrcd_open_private", xp, open_xrcd(-1, O_CREAT));
	if (!x || !xp)
		goto out;
	EXPECT_NULL("xrcd_open_o_excl_existing_einval", open_xrcd(fd, O_CREAT | O_EXCL), EINVAL,
		    d_xrcd);
	{
		int fd2 = open(path, O_RDONLY);
		EXPECT_OBJ("xrcd_open_same_inode_other_fd", x2, open_xrcd(fd2, 0));
		if (fd2 >= 0)
			close(fd2);
	}
	/* XRC SRQ: PD, XRCD and CQ are all required (ib_uverbs create_srq) */
	EXPECT_NULL("xsrq_without_xrcd_einval",
		    mk_xsrq(pd, cq, x, IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ), EINVAL,
		    d_srq);
	EXPECT_NULL("xsrq_without_cq_einval", mk_xsrq(pd, NULL, x, xsrq_mask), EINVAL, d_srq);
	EXPECT_OBJ("xsrq_create", srq, mk_xsrq(pd, cq, x, xsrq_mask));
	if (!srq)
		goto out;
	rc = ibv_get_srq_num(srq, &num);
	expect_ret("xsrq_get_srq_num", 0, rc);
	check("xsrq_srq_num_24_bits", rc == 0 && num != 0 && num <= 0xFFFFFF, "expected 1..0xFFFFFF got 0x%x", num);
	{
		struct ibv_srq_init_attr si = { .attr = { .max_wr = 4, .max_sge = 1 } };
		bsrq = ibv_create_srq(pd, &si);
		if (bsrq)
			expect_ret("basic_srq_get_srq_num_einval", EINVAL, ibv_get_srq_num(bsrq, &num));
	}
	/* TGT QP: needs its XRCD (ibv_create_qp_ex with PD alone goes to
	 * ibv_create_qp, which has no XRCD) */
	EXPECT_NULL("tgt_qp_without_xrcd_einval", mk_tgt(NULL, IBV_QP_INIT_ATTR_PD, pd), EINVAL, d_qp);
	EXPECT_OBJ("tgt_qp_create", tgt, mk_tgt(x, IBV_QP_INIT_ATTR_XRCD, NULL));
	/* INI QP: a send queue alone; an SRQ is refused */
	{
		struct ibv_qp_init_attr ia;
		memset(&ia, 0, sizeof ia);
		ia.qp_type = IBV_QPT_XRC_SEND;
		ia.send_cq = cq;
		ia.srq = srq;
		ia.cap.max_send_wr = 4;
		ia.cap.max_send_sge = 1;
		EXPECT_NULL("ini_qp_with_srq_einval", ibv_create_qp(pd, &ia), EINVAL, d_qp);
		ia.srq = NULL;
		EXPECT_OBJ("ini_qp_create", ini, ibv_create_qp(pd, &ia));
	}
	if (!tgt || !ini)
		goto out;
	expect_ret("tgt_qp_to_rts", 0, drive(tgt, IBV_QPS_RTS));
	expect_ret("ini_qp_to_rts", 0, drive(ini, IBV_QPS_RTS));
	{
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *rbad = NULL;
		struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND },
				   *sbad = NULL;
		/* no receive queue on either half (mlx5: EINVAL) */
		expect_ret("tgt_qp_post_recv_einval", EINVAL, ibv_post_recv(tgt, &rw, &rbad));
		expect_ret("ini_qp_post_recv_einval", EINVAL, ibv_post_recv(ini, &rw, &rbad));
		/* a TGT QP has no send queue */
		expect_ret("tgt_qp_post_send_einval", EINVAL, ibv_post_send(tgt, &sw, &sbad));
	}
	/* in use: ibv_close_xrcd -> EBUSY (uverbs: the handle's usecnt) */
	expect_ret("xrcd_close_with_srq_and_tgt_ebusy", EBUSY, ibv_close_xrcd(x));
	/* ibv_open_qp: by number, in the same domain (another handle of the
	 * same inode is the same domain), never in another */
	{
		struct ibv_qp_open_attr oa = {
			.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
			.qp_num = tgt->qp_num, .xrcd = xp, .qp_type = IBV_QPT_XRC_RECV,
		};
		EXPECT_NULL("open_qp_other_xrcd_einval", ibv_open_qp(F.ctx, &oa), EINVAL, d_qp);
		oa.xrcd = x;
		oa.qp_num = ini->qp_num;
		EXPECT_NULL("open_qp_not_a_tgt_einval", ibv_open_qp(F.ctx, &oa), EINVAL, d_qp);
		oa.qp_num = tgt->qp_num ^ 0x800000;
		EXPECT_NULL("open_qp_no_such_qp_einval", ibv_open_qp(F.ctx, &oa), EINVAL, d_qp);
		oa.qp_num = tgt->qp_num;
		oa.xrcd = x2 ? x2 : x;
		EXPECT_OBJ("open_qp_same_domain", opened, ibv_open_qp(F.ctx, &oa));
		if (opened) {
			check("open_qp_number", opened->qp_num == tgt->qp_num, "expected 0x%x got 0x%x",
			      tgt->qp_num, opened->qp_num);
			expect_ret("open_qp_destroy", 0, ibv_destroy_qp(opened));
			opened = NULL;
			check("tgt_qp_outlives_opened_handle", query_state(tgt) == IBV_QPS_RTS,
			      "expected RTS got %d", query_state(tgt));
		}
	}
	/* to RESET purges a QP's completions from its CQs: an INI QP has no
	 * receive CQ and a TGT QP neither (both crashed there once) */
	{
		struct ibv_qp_attr ra = { .qp_state = IBV_QPS_RESET };
		expect_ret("ini_qp_to_reset", 0, ibv_modify_qp(ini, &ra, IBV_QP_STATE));
		expect_ret("tgt_qp_to_reset", 0, ibv_modify_qp(tgt, &ra, IBV_QP_STATE));
	}
	expect_ret("ini_qp_destroy", 0, ibv_destroy_qp(ini));
	ini = NULL;
	expect_ret("tgt_qp_destroy", 0, ibv_destroy_qp(tgt));
	tgt = NULL;
	expect_ret("xrcd_close_with_srq_ebusy", EBUSY, ibv_close_xrcd(x));
	expect_ret("xsrq_destroy", 0, ibv_destroy_srq(srq));
	srq = NULL;
	expect_ret("xrcd_close", 0, ibv_close_xrcd(x));
	x = NULL;
out:
	if (opened)
		ibv_destroy_qp(opened);
	if (ini)
		ibv_destroy_qp(ini);
	if (tgt)
		ibv_destroy_qp(tgt);
	if (srq)
		ibv_destroy_srq(srq);
	if (bsrq)
		ibv_destroy_srq(bsrq);
	if (x)
		ibv_close_xrcd(x);
	if (x2)
		ibv_close_xrcd(x2);
	if (xp)
		ibv_close_xrcd(xp);
	if (fd >= 0) {
		close(fd);
		unlink(path);
	}
	if (mr)
		ibv_dereg_mr(mr);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: ordering - destroy-while-in-use                              */
/* ------------------------------------------------------------------ */

static void g_ordering(void)
{
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_mr *mr = NULL;
	struct ibv_qp *qp = NULL;
	int rc;

	if (!fx_open())
		return;
	ch = ibv_create_comp_channel(F.ctx);
	cq = ch ? ibv_create_cq(F.ctx, 16, NULL, ch, 0) : NULL;
	pd = ibv_alloc_pd(F.ctx);
	mr = pd ? reg_buf(pd) : NULL;
	qp = (cq && mr) ? mk_qp(pd, cq, IBV_QPT_RC, NULL) : NULL;
	if (!qp) {
		fail("order_setup", "expected channel, CQ, PD, MR, QP got %p %p %p %p %p errno %d (%s)",
		     (void *)ch, (void *)cq, (void *)pd, (void *)mr, (void *)qp, errno,
		     errname(errno));
		goto out;
	}
	expect_ret("order_qp_to_rts", 0, drive(qp, IBV_QPS_RTS));

	/* Wrong order: every parent refuses to go while a child holds it.
	 * (If one is wrongly destroyed, it is dropped from the rest of the
	 * sequence.) */
	rc = ibv_destroy_comp_channel(ch);
	expect_ret("order_destroy_channel_with_cq_ebusy", EBUSY, rc);
	if (rc == 0)
		ch = NULL;
	rc = ibv_destroy_cq(cq);
	expect_ret("order_destroy_cq_with_qp_ebusy", EBUSY, rc);
	if (rc == 0)
		cq = NULL;
	rc = ibv_dealloc_pd(pd);
	expect_ret("order_dealloc_pd_with_qp_and_mr_ebusy", EBUSY, rc);
	if (rc == 0)
		pd = NULL;

	/* Right order. */
	expect_ret("order_destroy_qp", 0, ibv_destroy_qp(qp));
	qp = NULL;
	if (pd) {
		rc = ibv_dealloc_pd(pd);
		expect_ret("order_dealloc_pd_with_mr_ebusy", EBUSY, rc);
		if (rc == 0)
			pd = NULL;
	}
	if (ch) {
		rc = ibv_destroy_comp_channel(ch);
		expect_ret("order_destroy_channel_with_cq_after_qp_ebusy", EBUSY, rc);
		if (rc == 0)
			ch = NULL;
	}
	if (pd) {
		expect_ret("order_dereg_mr", 0, ibv_dereg_mr(mr));
		mr = NULL;
		expect_ret("order_dealloc_pd", 0, ibv_dealloc_pd(pd));
		pd = NULL;
	}
	if (cq) {
		expect_ret("order_destroy_cq", 0, ibv_destroy_cq(cq));
		cq = NULL;
	}
	if (ch) {
		expect_ret("order_destroy_channel", 0, ibv_destroy_comp_channel(ch));
		ch = NULL;
	}
out:
	if (qp)
		ibv_destroy_qp(qp);
	if (mr && pd)
		ibv_dereg_mr(mr);
	if (pd)
		ibv_dealloc_pd(pd);
	if (cq)
		ibv_destroy_cq(cq);
	if (ch)
		ibv_destroy_comp_channel(ch);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: qp_ex - the ibv_wr_* API (ibv_wr_post(3)) over an RC pair     */
/* ------------------------------------------------------------------ */

#define QX_SGE 4
#define QX_INLINE 64
#define QX_SQ 8
/* offsets into buf */
#define QX_SRC 0
#define QX_RECV 8192		/* B's receive buffers, 1 KiB each */
#define QX_WDST 24576		/* WRITE targets */
#define QX_RSRC 28672		/* READ source */
#define QX_RDST 32768		/* READ destination */
#define QX_ATOM 40960		/* remote atomic targets: CAS, FAA, ATOMIC_WRITE */
#define QX_ALOC 41984		/* local 8-byte results */

static struct ibv_qp *mk_qpx(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type t,
			     uint64_t ops, uint32_t max_send_wr)
{
	struct ibv_qp_init_attr_ex ix;

	memset(&ix, 0, sizeof ix);
	ix.send_cq = cq;
	ix.recv_cq = cq;
	ix.qp_type = t;
	ix.cap.max_send_wr = max_send_wr;
	ix.cap.max_recv_wr = 16;
	ix.cap.max_send_sge = QX_SGE;
	ix.cap.max_recv_sge = 1;
	ix.cap.max_inline_data = QX_INLINE;
	ix.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ix.pd = pd;
	ix.send_ops_flags = ops;
	errno = 0;
	return ibv_create_qp_ex(F.ctx, &ix);
}

/* RESET -> INIT -> RTR -> RTS, connected to dest, atomics allowed. */
static int qx_connect(struct ibv_qp *qp, uint32_t dest)
{
	static const enum ibv_qp_state path[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
	struct ibv_qp_attr a;
	int rc = step(qp, IBV_QPS_RESET);

	for (size_t i = 0; !rc && i < sizeof path / sizeof path[0]; i++) {
		std_attr(qp, path[i], &a);
		a.dest_qp_num = dest;
		a.rq_psn = SQ_PSN;	/* the peer's sq_psn */
		a.qp_access_flags = QP_ACCESS | IBV_ACCESS_REMOTE_ATOMIC;
		rc = ibv_modify_qp(qp, &a, std_mask(qp->qp_type, path[i]));
	}
	return rc;
}

static void qx_post_recvs(struct ibv_qp *qp, struct ibv_mr *mr, int n, uint64_t wr_id0)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)buf + QX_RECV + 1024 * (uint64_t)(wr_id0 + i) % (16 * 1024),
				     .length = 1024, .lkey = mr->lkey };
		struct ibv_recv_wr r = { .wr_id = wr_id0 + i, .sg_list = &s, .num_sge = 1 }, *bad;

		if (ibv_post_recv(qp, &r, &bad))
			fail("qp_ex_post_recv", "expected 0 got errno %d", errno);
	}
}

/* The next n completions of cq carry these wr_ids, in order, successfully. */
static bool qx_expect_wcs(const char *name, struct ibv_cq *cq, int n, const uint64_t *ids,
			  struct ibv_wc *wc)
{
	int got = poll_cq_for(cq, wc, n, 5000);
	char have[256] = "";
	bool ok = got == n;

	for (int i = 0; i < got && i < n; i++) {
		size_t l = strlen(have);
		snprintf(have + l, sizeof have - l, " 0x%llx/%s", (unsigned long long)wc[i].wr_id,
			 ibv_wc_status_str(wc[i].status));
		ok = ok && wc[i].wr_id == ids[i] && wc[i].status == IBV_WC_SUCCESS;
	}
	return check(name, ok, "expected %d successful completion(s) in order got %d:%s", n, got, have);
}

/* One batch of n signaled 1-byte inline SENDs, wr_ids id0, id0+1, ... */
static int qx_sends(struct ibv_qp_ex *x, int n, uint64_t id0)
{
	ibv_wr_start(x);
	x->wr_flags = IBV_SEND_SIGNALED;
	for (int i = 0; i < n; i++) {
		x->wr_id = id0 + i;
		ibv_wr_send(x);
		ibv_wr_set_inline_data(x, "q", 1);
	}
	return ibv_wr_complete(x);
}

static void g_qp_ex(void)
{
	const uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
			     IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
			     IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
			     IBV_QP_EX_WITH_ATOMIC_WRITE;
	struct ibv_pd *pd;
	struct ibv_cq *cqa = NULL, *cqb = NULL;
	struct ibv_mr *mr = NULL;
	struct ibv_qp *a = NULL, *b = NULL, *plain = NULL;
	struct ibv_qp_ex *xa = NULL, *xb = NULL;
	struct ibv_wc wc[16];
	uint32_t rkey;
	uint64_t raddr;
	int rc;

	if (!fx_open())
		return;
	pd = ibv_alloc_pd(F.ctx);
	cqa = ibv_create_cq(F.ctx, 64, NULL, NULL, 0);
	cqb = ibv_create_cq(F.ctx, 64, NULL, NULL, 0);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC) : NULL;
	if (!pd || !cqa || !cqb || !mr) {
		fail("qp_ex_setup", "expected PD, 2 CQs, MR got %p %p %p %p", (void *)pd, (void *)cqa,
		     (void *)cqb, (void *)mr);
		goto out;
	}
	rkey = mr->rkey;
	raddr = (uintptr_t)buf;

	/* ibv_wr_post(3): "If the QP does not support all the requested work
	 * request types then QP creation will fail" -- EOPNOTSUPP as mlx5 */
	EXPECT_NULL("qp_ex_create_ud_with_rdma_write",
		    mk_qpx(pd, cqa, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE, QX_SQ),
		    EOPNOTSUPP, d_qp);
	EXPECT_NULL("qp_ex_create_uc_with_read", mk_qpx(pd, cqa, IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ, QX_SQ),
		    EOPNOTSUPP, d_qp);
	EXPECT_NULL("qp_ex_create_rc_with_tso", mk_qpx(pd, cqa, IBV_QPT_RC, IBV_QP_EX_WITH_TSO, QX_SQ),
		    EOPNOTSUPP, d_qp);
	EXPECT_NULL("qp_ex_create_rc_unknown_op", mk_qpx(pd, cqa, IBV_QPT_RC, 1ull << 40, QX_SQ),
		    EOPNOTSUPP, d_qp);
	plain = mk_qp(pd, cqa, IBV_QPT_RC, NULL);
	if (plain) {
		errno = 0;
		check("qp_ex_to_qp_ex_of_plain_qp_null", ibv_qp_to_qp_ex(plain) == NULL,
		      "expected NULL for a QP created without send_ops_flags got a pointer");
	}
	{
		struct ibv_device_attr_ex dx;
		memset(&dx, 0, sizeof dx);
		if (expect_ret("qp_ex_query_device_ex", 0, ibv_query_device_ex(F.ctx, NULL, &dx)))
			check("qp_ex_device_cap_atomic_write", (dx.device_cap_flags_ex >> 40) & 1,
			      "expected device_cap_flags_ex bit 40 (IB_UVERBS_DEVICE_ATOMIC_WRITE) got 0x%llx",
			      (unsigned long long)dx.device_cap_flags_ex);
	}

	EXPECT_OBJ("qp_ex_create_rc", a, mk_qpx(pd, cqa, IBV_QPT_RC, ops, QX_SQ));
	EXPECT_OBJ("qp_ex_create_rc_send_only", b, mk_qpx(pd, cqb, IBV_QPT_RC, IBV_QP_EX_WITH_SEND, QX_SQ));
	if (!a || !b)
		goto out;
	xa = ibv_qp_to_qp_ex(a);
	xb = ibv_qp_to_qp_ex(b);
	if (!check("qp_ex_to_qp_ex", xa && xb && &xa->qp_base == a && &xb->qp_base == b,
		   "expected the ibv_qp_ex whose qp_base is the QP got %p %p", (void *)xa, (void *)xb))
		goto out;

	/* wr_complete in RESET: what ibv_post_send answers (EINVAL) */
	ibv_wr_start(xa);
	xa->wr_id = 1;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(xa);
	ibv_wr_set_sge(xa, mr->lkey, raddr + QX_SRC, 8);
	expect_ret("qp_ex_complete_in_reset_einval", EINVAL, ibv_wr_complete(xa));

	if (!expect_ret("qp_ex_connect_a", 0, qx_connect(a, b->qp_num)) ||
	    !expect_ret("qp_ex_connect_b", 0, qx_connect(b, a->qp_num)))
		goto out;
	qx_post_recvs(b, mr, 16, 0);

	/* Batch 1: SEND over 3 SGEs, SEND_IMM of an inline list, an
	 * unsignaled WRITE, a WRITE over 2 SGEs, WRITE_IMM of inline data.
	 * wr_id and wr_flags are taken at each builder. */
	for (int i = 0; i < 512; i++)
		buf[QX_SRC + i] = (unsigned char)(i * 7 + 1);
	memset(buf + QX_WDST, 0, 1024);
	{
		struct ibv_sge sl[3] = {
			{ .addr = raddr + QX_SRC + 0, .length = 10, .lkey = mr->lkey },
			{ .addr = raddr + QX_SRC + 100, .length = 20, .lkey = mr->lkey },
			{ .addr = raddr + QX_SRC + 300, .length = 30, .lkey = mr->lkey },
		};
		char in1[] = "inline-", in2[] = "list";
		struct ibv_data_buf il[2] = { { in1, 7 }, { in2, 4 } };
		char imm_src[16] = "immwrite-inline";
		static const uint64_t ids[] = { 0x11, 0x12, 0x14, 0x15 };

		ibv_wr_start(xa);
		xa->wr_flags = IBV_SEND_SIGNALED;
		xa->wr_id = 0x11;
		ibv_wr_send(xa);
		ibv_wr_set_sge_list(xa, 3, sl);
		xa->wr_id = 0x12;
		ibv_wr_send_imm(xa, htobe32(0xA1B2C3D4));
		ibv_wr_set_inline_data_list(xa, 2, il);
		memset(in1, 'X', 7);  /* inline data was copied by the setter */
		xa->wr_id = 0x13;
		xa->wr_flags = 0;     /* unsignaled: no completion */
		ibv_wr_rdma_write(xa, rkey, raddr + QX_WDST);
		ibv_wr_set_sge(xa, mr->lkey, raddr + QX_SRC, 16);
		xa->wr_id = 0x14;
		xa->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(xa, rkey, raddr + QX_WDST + 100);
		ibv_wr_set_sge_list(xa, 2, sl + 1);
		xa->wr_id = 0x15;
		ibv_wr_rdma_write_imm(xa, rkey, raddr + QX_WDST + 200, htobe32(0x01020304));
		ibv_wr_set_inline_data(xa, imm_src, 15);
		rc = ibv_wr_complete(xa);
		if (expect_ret("qp_ex_batch1_complete", 0, rc) &&
		    qx_expect_wcs("qp_ex_batch1_send_completions", cqa, 4, ids, wc)) {
			check("qp_ex_batch1_send_opcodes", wc[0].opcode == IBV_WC_SEND && wc[1].opcode == IBV_WC_SEND &&
			      wc[2].opcode == IBV_WC_RDMA_WRITE && wc[3].opcode == IBV_WC_RDMA_WRITE,
			      "expected SEND SEND RDMA_WRITE RDMA_WRITE got %d %d %d %d", wc[0].opcode,
			      wc[1].opcode, wc[2].opcode, wc[3].opcode);
		}
		static const uint64_t rids[] = { 0, 1, 2 };
		if (rc == 0 && qx_expect_wcs("qp_ex_batch1_recv_completions", cqb, 3, rids, wc)) {
			unsigned char want[60];
			memcpy(want, buf + QX_SRC, 10);
			memcpy(want + 10, buf + QX_SRC + 100, 20);
			memcpy(want + 30, buf + QX_SRC + 300, 30);
			check("qp_ex_send_sge_list_data", wc[0].byte_len == 60 && wc[0].opcode == IBV_WC_RECV &&
			      !memcmp(buf + QX_RECV, want, 60),
			      "expected a 60-byte receive of the 3 SGEs got %u bytes, opcode %d, data %s",
			      wc[0].byte_len, wc[0].opcode, memcmp(buf + QX_RECV, want, 60) ? "differs" : "equal");
			check("qp_ex_send_imm_inline_list", wc[1].byte_len == 11 && (wc[1].wc_flags & IBV_WC_WITH_IMM) &&
			      be32toh(wc[1].imm_data) == 0xA1B2C3D4 && !memcmp(buf + QX_RECV + 1024, "inline-list", 11),
			      "expected 11 bytes \"inline-list\" imm 0xa1b2c3d4 got %u bytes flags 0x%x imm 0x%x \"%.11s\"",
			      wc[1].byte_len, wc[1].wc_flags, be32toh(wc[1].imm_data), buf + QX_RECV + 1024);
			check("qp_ex_write_imm_inline", wc[2].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
			      be32toh(wc[2].imm_data) == 0x01020304 && !memcmp(buf + QX_WDST + 200, imm_src, 15),
			      "expected RECV_RDMA_WITH_IMM imm 0x01020304 and 15 bytes written got opcode %d imm 0x%x data %s",
			      wc[2].opcode, be32toh(wc[2].imm_data),
			      memcmp(buf + QX_WDST + 200, imm_src, 15) ? "differs" : "equal");
			check("qp_ex_write_data", !memcmp(buf + QX_WDST, buf + QX_SRC, 16) &&
			      !memcmp(buf + QX_WDST + 100, buf + QX_SRC + 100, 20) &&
			      !memcmp(buf + QX_WDST + 120, buf + QX_SRC + 300, 30),
			      "expected the unsignaled WRITE's 16 bytes and the 2-SGE WRITE's 50 bytes at the target");
		}
	}

	/* Batch 2: READ, CMP_SWP, FETCH_ADD, ATOMIC_WRITE */
	{
		uint64_t *cas = (uint64_t *)(void *)(buf + QX_ATOM), *faa = cas + 1, *aw = cas + 2;
		uint64_t *lcas = (uint64_t *)(void *)(buf + QX_ALOC), *lfaa = lcas + 1;
		uint64_t awv = 0x0123456789ABCDEFull;
		static const uint64_t ids[] = { 0x21, 0x22, 0x23, 0x24 };

		for (int i = 0; i < 3000; i++)
			buf[QX_RSRC + i] = (unsigned char)(i * 13 + 5);
		memset(buf + QX_RDST, 0, 3000);
		*cas = 1000;
		*faa = 5;
		*aw = 0;
		*lcas = *lfaa = 0;
		ibv_wr_start(xa);
		xa->wr_flags = IBV_SEND_SIGNALED;
		xa->wr_id = 0x21;
		ibv_wr_rdma_read(xa, rkey, raddr + QX_RSRC);
		ibv_wr_set_sge(xa, mr->lkey, raddr + QX_RDST, 3000);
		xa->wr_id = 0x22;
		ibv_wr_atomic_cmp_swp(xa, rkey, raddr + QX_ATOM, 1000, 2000);
		ibv_wr_set_sge(xa, mr->lkey, raddr + QX_ALOC, 8);
		xa->wr_id = 0x23;
		ibv_wr_atomic_fetch_add(xa, rkey, raddr + QX_ATOM + 8, 37);
		ibv_wr_set_sge(xa, mr->lkey, raddr + QX_ALOC + 8, 8);
		xa->wr_id = 0x24;
		ibv_wr_atomic_write(xa, rkey, raddr + QX_ATOM + 16, &awv);
		awv = 0;  /* the 8 bytes were taken by the builder */
		rc = ibv_wr_complete(xa);
		if (expect_ret("qp_ex_batch2_complete", 0, rc) &&
		    qx_expect_wcs("qp_ex_batch2_completions", cqa, 4, ids, wc)) {
			check("qp_ex_batch2_opcodes", wc[0].opcode == IBV_WC_RDMA_READ && wc[1].opcode == IBV_WC_COMP_SWAP &&
			      wc[2].opcode == IBV_WC_FETCH_ADD && wc[3].opcode == IBV_WC_ATOMIC_WRITE,
			      "expected RDMA_READ COMP_SWAP FETCH_ADD ATOMIC_WRITE got %d %d %d %d", wc[0].opcode,
			      wc[1].opcode, wc[2].opcode, wc[3].opcode);
			check("qp_ex_read_data", !memcmp(buf + QX_RDST, buf + QX_RSRC, 3000),
			      "expected the 3000 bytes read to equal the source");
			check("qp_ex_cmp_swp", *cas == 2000 && *lcas == 1000,
			      "expected remote 2000 and original 1000 got %llu and %llu", (unsigned long long)*cas,
			      (unsigned long long)*lcas);
			check("qp_ex_fetch_add", *faa == 42 && *lfaa == 5,
			      "expected remote 42 and original 5 got %llu and %llu", (unsigned long long)*faa,
			      (unsigned long long)*lfaa);
			check("qp_ex_atomic_write", *aw == 0x0123456789ABCDEFull,
			      "expected 0x0123456789abcdef written got 0x%llx", (unsigned long long)*aw);
		}
	}

	/* ibv_post_send's IBV_WR_ATOMIC_WRITE takes its 8 bytes from
	 * sg_list[0] (by lkey) when posted */
	{
		uint64_t *aw = (uint64_t *)(void *)(buf + QX_ATOM + 24), *src = (uint64_t *)(void *)(buf + QX_ALOC + 16);
		struct ibv_sge s = { .addr = (uintptr_t)src, .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr w = { .wr_id = 0x25, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_ATOMIC_WRITE,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		static const uint64_t ids[] = { 0x25 };

		*aw = 0;
		*src = 0xFEEDFACECAFEBEEFull;
		w.wr.rdma.remote_addr = raddr + QX_ATOM + 24;
		w.wr.rdma.rkey = rkey;
		if (expect_ret("qp_ex_post_send_atomic_write", 0, ibv_post_send(a, &w, &bad)) &&
		    qx_expect_wcs("qp_ex_post_send_atomic_write_completion", cqa, 1, ids, wc))
			check("qp_ex_post_send_atomic_write_data", *aw == 0xFEEDFACECAFEBEEFull &&
			      wc[0].opcode == IBV_WC_ATOMIC_WRITE,
			      "expected 0xfeedfacecafebeef written and opcode ATOMIC_WRITE got 0x%llx and %d",
			      (unsigned long long)*aw, wc[0].opcode);
	}

	/* wr_abort drops the batch: the next batch's SEND takes the next
	 * receive and is the next completion (RC completes in order) */
	{
		static const uint64_t ids[] = { 0x32 };
		static const uint64_t rids[] = { 3 };

		ibv_wr_start(xa);
		xa->wr_flags = IBV_SEND_SIGNALED;
		xa->wr_id = 0x31;
		ibv_wr_send(xa);
		ibv_wr_set_inline_data(xa, "aborted", 7);
		ibv_wr_abort(xa);
		ibv_wr_start(xa);
		xa->wr_id = 0x32;
		ibv_wr_send(xa);
		ibv_wr_set_inline_data(xa, "kept", 4);
		if (expect_ret("qp_ex_after_abort_complete", 0, ibv_wr_complete(xa)) &&
		    qx_expect_wcs("qp_ex_abort_dropped_batch", cqa, 1, ids, wc) &&
		    qx_expect_wcs("qp_ex_abort_recv", cqb, 1, rids, wc))
			check("qp_ex_abort_recv_data", wc[0].byte_len == 4 && !memcmp(buf + QX_RECV + 3 * 1024, "kept", 4),
			      "expected the 4 bytes \"kept\" got %u bytes", wc[0].byte_len);
	}

	/* A failing batch is dropped whole (ibv_wr_post(3)): a builder not in
	 * send_ops_flags (EINVAL, as ibv_post_send for an opcode the QP does
	 * not take), inline data beyond max_inline_data, more SGEs than
	 * max_send_sge, a setter before any builder.  Each is followed by a
	 * batch whose SEND must be the next completion and receive. */
	{
		static const struct { const char *name; int kind; } cases[] = {
			{ "qp_ex_builder_not_in_send_ops_einval", 0 },
			{ "qp_ex_inline_too_long_einval", 1 },
			{ "qp_ex_sge_list_too_long_einval", 2 },
			{ "qp_ex_setter_before_builder_einval", 3 },
		};
		unsigned char big[QX_INLINE + 1];
		struct ibv_sge sl[QX_SGE + 1];

		memset(big, 'b', sizeof big);
		for (int i = 0; i < QX_SGE + 1; i++)
			sl[i] = (struct ibv_sge){ .addr = raddr + QX_SRC + 8 * i, .length = 8, .lkey = mr->lkey };
		qx_post_recvs(a, mr, (int)(sizeof cases / sizeof cases[0]), 100);
		for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
			uint64_t id = 0x40 + c;
			ibv_wr_start(xb);
			xb->wr_flags = IBV_SEND_SIGNALED;
			xb->wr_id = 0x4F;
			switch (cases[c].kind) {
			case 0:
				ibv_wr_send(xb);
				ibv_wr_set_sge(xb, mr->lkey, raddr + QX_SRC, 8);
				ibv_wr_rdma_write(xb, rkey, raddr + QX_WDST);  /* b has SEND only */
				ibv_wr_set_sge(xb, mr->lkey, raddr + QX_SRC, 8);
				break;
			case 1:
				ibv_wr_send(xb);
				ibv_wr_set_inline_data(xb, big, sizeof big);
				break;
			case 2:
				ibv_wr_send(xb);
				ibv_wr_set_sge_list(xb, QX_SGE + 1, sl);
				break;
			default:
				ibv_wr_set_sge(xb, mr->lkey, raddr + QX_SRC, 8);
				ibv_wr_send(xb);
				break;
			}
			expect_ret(cases[c].name, EINVAL, ibv_wr_complete(xb));
			ibv_wr_start(xb);
			xb->wr_id = id;
			ibv_wr_send(xb);
			ibv_wr_set_sge(xb, mr->lkey, raddr + QX_SRC, 8);
			rc = ibv_wr_complete(xb);
			uint64_t rid = 100 + c;
			if (!expect_ret(nm(cases[c].name, "next_batch"), 0, rc) ||
			    !qx_expect_wcs(nm(cases[c].name, "dropped"), cqb, 1, &id, wc) ||
			    !qx_expect_wcs(nm(cases[c].name, "dropped_recv"), cqa, 1, &rid, wc))
				break;
		}
	}

	/* A full send queue: in SQD nothing new starts, so WQEs stay queued.
	 * A batch that does not fit (more WRs than free slots, or than the
	 * queue has) is ENOMEM and dropped whole; batches that fit are kept. */
	{
		static const uint64_t ids[] = { 0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x60, 0x61 };
		struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS };

		if (!expect_ret("qp_ex_full_to_sqd", 0, step(a, IBV_QPS_SQD)))
			goto out;
		expect_ret("qp_ex_batch_larger_than_sq_enomem", ENOMEM, qx_sends(xa, QX_SQ + 1, 0x70));
		expect_ret("qp_ex_six_of_eight", 0, qx_sends(xa, 6, 0x50));
		expect_ret("qp_ex_three_into_two_free_enomem", ENOMEM, qx_sends(xa, 3, 0x58));
		expect_ret("qp_ex_two_into_two_free", 0, qx_sends(xa, 2, 0x60));
		expect_ret("qp_ex_one_into_full_sq_enomem", ENOMEM, qx_sends(xa, 1, 0x62));
		if (expect_ret("qp_ex_full_sqd_to_rts", 0, ibv_modify_qp(a, &rts, IBV_QP_STATE)))
			qx_expect_wcs("qp_ex_full_sq_kept_batches_only", cqa, 8, ids, wc);
		/* and the refused 0x62 is not behind them */
		static const uint64_t last[] = { 0x63 };
		if (expect_ret("qp_ex_after_full_sq", 0, qx_sends(xa, 1, 0x63)))
			qx_expect_wcs("qp_ex_full_sq_refused_one_dropped", cqa, 1, last, wc);
	}
out:
	if (a)
		ibv_destroy_qp(a);
	if (b)
		ibv_destroy_qp(b);
	if (plain)
		ibv_destroy_qp(plain);
	if (mr)
		ibv_dereg_mr(mr);
	if (cqa)
		ibv_destroy_cq(cqa);
	if (cqb)
		ibv_destroy_cq(cqb);
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Driver                                                              */
/* ------------------------------------------------------------------ */

/* ------------------------------------------------------------------ */
/* Group: odp                                                          */
/* ------------------------------------------------------------------ */

/* One RC operation on a QP connected to itself; returns the completion's
 * status, or -1 when none came within 2 s. */
static int odp_op(struct ibv_qp *qp, struct ibv_cq *cq, enum ibv_wr_opcode op, struct ibv_mr *lmr, void *laddr,
		  uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)laddr, len, lmr->lkey };
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_wc wc;

	memset(&wr, 0, sizeof wr);
	wr.wr_id = 0x0d9;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	if (ibv_post_send(qp, &wr, &bad))
		return -2;
	memset(&wc, 0, sizeof wc);
	if (poll_cq_for(cq, &wc, 1, 2000) != 1)
		return -1;
	return wc.status;
}

/* RESET..RTS connected to peer with the send PSN the receive PSN (so the
 * two are in sequence), remote atomics too.  Two QPs rather than one
 * connected to itself: a responder that NAKs an access error enters ERR
 * itself (IBA 9.9.3.1.3), so a lone QP would flush its WQE first. */
static int odp_rts(struct ibv_qp *qp, struct ibv_qp *peer)
{
	static const enum ibv_qp_state path[] = { IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
	struct ibv_qp_attr a;

	for (size_t i = 0; i < sizeof path / sizeof path[0]; i++) {
		for (int k = 0; k < 2; k++) {
			struct ibv_qp *q = k ? peer : qp;
			std_attr(q, path[i], &a);
			a.dest_qp_num = (k ? qp : peer)->qp_num;
			a.sq_psn = a.rq_psn;
			a.qp_access_flags |= IBV_ACCESS_REMOTE_ATOMIC;
			int rc = ibv_modify_qp(q, &a, std_mask(q->qp_type, path[i]));
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Two RC QPs on pd, each with its own CQ, connected to each other in RTS. */
struct qp_pair {
	struct ibv_cq *cq, *cq2;
	struct ibv_qp *qp, *qp2;
};

static bool pair_open(struct qp_pair *p, struct ibv_pd *pd, const char *name)
{
	memset(p, 0, sizeof *p);
	p->cq = ibv_create_cq(F.ctx, 16, NULL, NULL, 0);
	p->cq2 = ibv_create_cq(F.ctx, 16, NULL, NULL, 0);
	p->qp = p->cq ? mk_qp(pd, p->cq, IBV_QPT_RC, NULL) : NULL;
	p->qp2 = p->cq2 ? mk_qp(pd, p->cq2, IBV_QPT_RC, NULL) : NULL;
	return check(name, p->qp && p->qp2 && !odp_rts(p->qp, p->qp2),
		     "expected two RC QPs connected in RTS (errno %d)", errno);
}

static void pair_close(struct qp_pair *p)
{
	if (p->qp)
		ibv_destroy_qp(p->qp);
	if (p->qp2)
		ibv_destroy_qp(p->qp2);
	if (p->cq)
		ibv_destroy_cq(p->cq);
	if (p->cq2)
		ibv_destroy_cq(p->cq2);
	memset(p, 0, sizeof *p);
}

static void expect_wc(const char *name, int exp, int got)
{
	check(name, exp == got, "expected status %d (%s) got %d (%s)", exp, ibv_wc_status_str(exp), got,
	      got < 0 ? (got == -1 ? "no completion in 2 s" : "post_send failed") : ibv_wc_status_str(got));
}

static void g_odp(void)
{
	struct ibv_device_attr_ex dx;
	struct ibv_pd *pd = NULL;
	struct qp_pair P = { 0 };
	struct ibv_mr *mr = NULL, *ro = NULL, *imr = NULL, *plain = NULL;
	struct ibv_sge sge;
	int rc;
	const unsigned all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ON_DEMAND;

	if (!fx_open())
		return;
	/* mlx5 with ODP: IB_DEVICE_ON_DEMAND_PAGING (1 << 31) and odp_caps */
	memset(&dx, 0, sizeof dx);
	rc = ibv_query_device_ex(F.ctx, NULL, &dx);
	expect_ret("odp_query_device_ex", 0, rc);
	expect_x("odp_general_caps", IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT, dx.odp_caps.general_caps);
	expect_x("odp_rc_caps", IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		 IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV,
		 dx.odp_caps.per_transport_caps.rc_odp_caps);
	check("odp_ud_caps_send_recv", (dx.odp_caps.per_transport_caps.ud_odp_caps &
					(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV)) ==
	      (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV), "expected SEND|RECV got 0x%x",
	      dx.odp_caps.per_transport_caps.ud_odp_caps);
	check("odp_device_cap_flag", (dx.orig_attr.device_cap_flags & (1u << 31)) != 0,
	      "expected bit 31 (IB_DEVICE_ON_DEMAND_PAGING) in 0x%x", dx.orig_attr.device_cap_flags);

	pd = ibv_alloc_pd(F.ctx);
	if (!pd) {
		fail("odp_setup", "expected a PD");
		goto out;
	}
	EXPECT_OBJ("odp_reg_mr_explicit", mr, ibv_reg_mr(pd, buf, sizeof buf, all));
	EXPECT_OBJ("odp_reg_mr_read_only", ro, ibv_reg_mr(pd, buf, sizeof buf,
							 IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_READ));
	/* ibv_reg_mr(3): the implicit ODP MR is addr NULL, length SIZE_MAX */
	EXPECT_OBJ("odp_reg_mr_implicit", imr, ibv_reg_mr(pd, NULL, SIZE_MAX, all));
	EXPECT_NULL("odp_reg_mr_implicit_needs_odp", ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE),
		    EINVAL, d_mr);
	EXPECT_NULL("odp_reg_mr_implicit_iova_einval",
		    ibv_reg_mr_iova(pd, NULL, SIZE_MAX, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND),
		    EINVAL, d_mr);
	plain = reg_buf(pd);
	if (!mr || !ro || !imr || !plain)
		goto out;

	/* ibv_advise_mr(3), errors as mlx5_ib_advise_mr */
	sge = (struct ibv_sge){ (uintptr_t)buf, 4096, mr->lkey };
	expect_ret("advise_mr_prefetch_sync", 0,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
	expect_ret("advise_mr_prefetch_write_async", 0,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1));
	expect_ret("advise_mr_no_fault", 0,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
	expect_ret("advise_mr_bad_advice_eopnotsupp", EOPNOTSUPP,
		   ibv_advise_mr(pd, (enum ibv_advise_mr_advice)7, 0, &sge, 1));
	expect_ret("advise_mr_bad_flags_einval", EINVAL,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 2, &sge, 1));
	expect_ret("advise_mr_no_sge_einval", EINVAL,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0));
	sge.lkey = plain->lkey;
	expect_ret("advise_mr_not_odp_sync_enoent", ENOENT,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
	expect_ret("advise_mr_not_odp_async_einval", EINVAL,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1));
	sge.lkey = ro->lkey;
	expect_ret("advise_mr_write_read_only_enoent", ENOENT,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
	sge = (struct ibv_sge){ (uintptr_t)buf + sizeof buf - 4096, 8192, mr->lkey };
	expect_ret("advise_mr_out_of_bounds_efault", EFAULT,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));

	/* Memory that is not mapped, not readable, not writable: holes that
	 * nothing can fill (the page after NULL, below vm.mmap_min_addr, and
	 * the first address past user space on x86-64 and arm64's 48-bit
	 * layout), a PROT_NONE page, a read-only page. */
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *m = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		fail("odp_mmap", "expected mmap to work got errno %d", errno);
		goto out;
	}
	uint8_t *hole = (uint8_t *)(uintptr_t)4096, *none = m, *rdonly = m + pg;
	uint8_t *past = (uint8_t *)(uintptr_t)(1ull << 47);
	memset(rdonly, 0x5a, pg);
	mprotect(none, pg, PROT_NONE);
	mprotect(rdonly, pg, PROT_READ);
	sge = (struct ibv_sge){ (uintptr_t)hole, 64, imr->lkey };
	expect_ret("advise_mr_implicit_hole_efault", EFAULT,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
	sge = (struct ibv_sge){ (uintptr_t)rdonly, 64, imr->lkey };
	expect_ret("advise_mr_implicit_write_read_only_efault", EFAULT,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
	expect_ret("advise_mr_implicit_read_read_only", 0,
		   ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));

	/* Remote accesses through the implicit rkey (a QP connected to
	 * itself): what is mapped with the permission works, the rest is a
	 * remote access error and the process survives (hostile-input rule). */
	if (!pair_open(&P, pd, "odp_qp_pair"))
		goto unmap;
	struct ibv_qp *qp = P.qp, *qp2 = P.qp2;
	struct ibv_cq *cq = P.cq;
	uint8_t *src = buf, *dst = buf + 8192;
	memset(src, 0xab, 256);
	memset(dst, 0, 256);
	expect_wc("odp_implicit_write_lands", IBV_WC_SUCCESS,
		  odp_op(qp, cq, IBV_WR_RDMA_WRITE, mr, src, 256, (uintptr_t)dst, imr->rkey));
	check("odp_implicit_write_data", !memcmp(src, dst, 256), "expected the 256 bytes written at the target");
	expect_wc("odp_implicit_read_read_only_page", IBV_WC_SUCCESS,
		  odp_op(qp, cq, IBV_WR_RDMA_READ, mr, dst, 64, (uintptr_t)rdonly, imr->rkey));
	check("odp_implicit_read_data", dst[0] == 0x5a && dst[63] == 0x5a, "expected 0x5a read back");

	struct { const char *name; enum ibv_wr_opcode op; uint8_t *at; } bad[] = {
		{ "odp_implicit_write_hole_rem_access", IBV_WR_RDMA_WRITE, hole },
		{ "odp_implicit_read_hole_rem_access", IBV_WR_RDMA_READ, hole },
		{ "odp_implicit_write_past_user_space_rem_access", IBV_WR_RDMA_WRITE, past },
		{ "odp_implicit_read_top_of_address_space_rem_access", IBV_WR_RDMA_READ,
		  (uint8_t *)(uintptr_t)(UINT64_MAX - 7) },
		{ "odp_implicit_read_prot_none_rem_access", IBV_WR_RDMA_READ, none },
		{ "odp_implicit_write_read_only_rem_access", IBV_WR_RDMA_WRITE, rdonly },
		{ "odp_implicit_atomic_read_only_rem_access", IBV_WR_ATOMIC_FETCH_AND_ADD, rdonly },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (odp_rts(qp, qp2)) {
			fail(bad[i].name, "expected the QP back in RTS");
			continue;
		}
		expect_wc(bad[i].name, IBV_WC_REM_ACCESS_ERR,
			  odp_op(qp, cq, bad[i].op, mr, src, 8, (uintptr_t)bad[i].at, imr->rkey));
	}
	check("odp_read_only_page_unchanged", rdonly[0] == 0x5a && rdonly[7] == 0x5a, "expected 0x5a");
	/* a local SGE through the implicit lkey over a hole: the WQE fails
	 * locally instead of faulting (mlx5: a local protection error) */
	if (!odp_rts(qp, qp2))
		expect_wc("odp_implicit_local_sge_hole_loc_prot", IBV_WC_LOC_PROT_ERR,
			  odp_op(qp, cq, IBV_WR_RDMA_WRITE, imr, hole, 64, (uintptr_t)dst, mr->rkey));
unmap:
	munmap(none, 2 * pg);
out:
	pair_close(&P);
	if (plain)
		ibv_dereg_mr(plain);
	if (imr)
		ibv_dereg_mr(imr);
	if (ro)
		ibv_dereg_mr(ro);
	if (mr)
		ibv_dereg_mr(mr);
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: dm (device memory, mlx5's rules)                             */
/* ------------------------------------------------------------------ */

static void d_dm(void *p) { ibv_free_dm(p); }

static void g_dm(void)
{
	struct ibv_device_attr_ex dx;
	struct ibv_alloc_dm_attr at;
	struct ibv_dm *dm = NULL;
	struct ibv_pd *pd = NULL;
	struct qp_pair P = { 0 };
	struct ibv_mr *dmr = NULL, *mr = NULL;
	uint8_t out[256], in[256];

	if (!fx_open())
		return;
	memset(&dx, 0, sizeof dx);
	expect_ret("dm_query_device_ex", 0, ibv_query_device_ex(F.ctx, NULL, &dx));
	if (!check("dm_max_dm_size", dx.max_dm_size >= 4096, "expected >= 4096 got %llu",
		   (unsigned long long)dx.max_dm_size))
		goto out;
	/* mlx5_alloc_dm: a comp_mask bit, 0 bytes or more than max_dm_size */
	at = (struct ibv_alloc_dm_attr){ .length = 4096, .comp_mask = 1 };
	EXPECT_NULL("dm_alloc_comp_mask_einval", ibv_alloc_dm(F.ctx, &at), EINVAL, d_dm);
	at = (struct ibv_alloc_dm_attr){ .length = 0 };
	EXPECT_NULL("dm_alloc_zero_einval", ibv_alloc_dm(F.ctx, &at), EINVAL, d_dm);
	at = (struct ibv_alloc_dm_attr){ .length = dx.max_dm_size + 1 };
	EXPECT_NULL("dm_alloc_too_long_einval", ibv_alloc_dm(F.ctx, &at), EINVAL, d_dm);
	at = (struct ibv_alloc_dm_attr){ .length = dx.max_dm_size / 2 + 4 };
	EXPECT_OBJ("dm_alloc", dm, ibv_alloc_dm(F.ctx, &at));
	/* what is left of max_dm_size is less than another half */
	EXPECT_NULL("dm_alloc_exhausted_enomem", ibv_alloc_dm(F.ctx, &at), ENOMEM, d_dm);
	if (!dm)
		goto out;
	for (int i = 0; i < 256; i++)
		out[i] = (uint8_t)(i * 7 + 1);
	expect_ret("dm_memcpy_to", 0, ibv_memcpy_to_dm(dm, 64, out, 256));
	memset(in, 0, sizeof in);
	expect_ret("dm_memcpy_from", 0, ibv_memcpy_from_dm(in, dm, 64, 256));
	check("dm_memcpy_roundtrip", !memcmp(in, out, 256), "expected the 256 bytes back");
	/* mlx5_dm_memcpy: 4-byte words only, within the DM */
	expect_ret("dm_memcpy_to_unaligned_offset_einval", EINVAL, ibv_memcpy_to_dm(dm, 3, out, 4));
	expect_ret("dm_memcpy_from_unaligned_length_einval", EINVAL, ibv_memcpy_from_dm(in, dm, 4, 3));
	expect_ret("dm_memcpy_to_past_end_efault", EFAULT, ibv_memcpy_to_dm(dm, at.length - 4, out, 8));
	expect_ret("dm_memcpy_from_past_end_efault", EFAULT, ibv_memcpy_from_dm(in, dm, at.length + 4, 4));

	pd = ibv_alloc_pd(F.ctx);
	if (!pd)
		goto out;
	const unsigned acc = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	/* uverbs DM_MR_REG: zero-based only, within the DM */
	EXPECT_NULL("dm_reg_mr_not_zero_based_einval", ibv_reg_dm_mr(pd, dm, 0, 256, IBV_ACCESS_LOCAL_WRITE),
		    EINVAL, d_mr);
	EXPECT_NULL("dm_reg_mr_past_end_einval", ibv_reg_dm_mr(pd, dm, 64, at.length, acc), EINVAL, d_mr);
	EXPECT_NULL("dm_reg_mr_mw_bind_einval", ibv_reg_dm_mr(pd, dm, 0, 256, acc | IBV_ACCESS_MW_BIND), EINVAL,
		    d_mr);
	EXPECT_OBJ("dm_reg_mr", dmr, ibv_reg_dm_mr(pd, dm, 64, 4096, acc));
	if (!dmr)
		goto out;
	expect_ret("dm_free_with_mr_ebusy", EBUSY, ibv_free_dm(dm));

	/* a remote WRITE lands in the DM: the MR's address 0 is DM offset 64 */
	mr = reg_buf(pd);
	if (!pair_open(&P, pd, "dm_qp_pair") || !mr)
		goto out;
	for (int i = 0; i < 256; i++)
		buf[i] = (uint8_t)(0xc3 ^ i);
	expect_wc("dm_remote_write", IBV_WC_SUCCESS, odp_op(P.qp, P.cq, IBV_WR_RDMA_WRITE, mr, buf, 256, 16, dmr->rkey));
	memset(in, 0, sizeof in);
	ibv_memcpy_from_dm(in, dm, 64 + 16, 256);
	check("dm_remote_write_data", !memcmp(in, buf, 256), "expected the written bytes at DM offset 80");
	expect_wc("dm_remote_write_past_mr_rem_access", IBV_WC_REM_ACCESS_ERR,
		  odp_op(P.qp, P.cq, IBV_WR_RDMA_WRITE, mr, buf, 256, 4096 - 128, dmr->rkey));
out:
	pair_close(&P);
	if (mr)
		ibv_dereg_mr(mr);
	if (dmr)
		expect_ret("dm_dereg_mr", 0, ibv_dereg_mr(dmr));
	if (dm)
		expect_ret("dm_free", 0, ibv_free_dm(dm));
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

/* ------------------------------------------------------------------ */
/* Group: parent_domain                                                */
/* ------------------------------------------------------------------ */

static int pdom_allocs, pdom_frees, pdom_default;
static uint64_t pdom_last_type;

static void *pdom_alloc(struct ibv_pd *pd, void *ctx, size_t size, size_t align, uint64_t type)
{
	void *p = NULL;

	(void)pd;
	if (ctx != &pdom_allocs)
		return NULL;   /* the pd_context must be handed back */
	pdom_last_type = type;
	if (pdom_default)
		return IBV_ALLOCATOR_USE_DEFAULT;
	if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size))
		return NULL;
	memset(p, 0xee, size);   /* the provider must not rely on zeroed memory */
	pdom_allocs++;
	return p;
}

static void pdom_free(struct ibv_pd *pd, void *ctx, void *p, uint64_t type)
{
	(void)pd; (void)ctx; (void)type;
	pdom_frees++;
	free(p);
}

static void d_pd(void *p) { ibv_dealloc_pd(p); }

static void g_parent_domain(void)
{
	struct ibv_pd *pd = NULL, *pd2 = NULL, *pdom = NULL;
	struct qp_pair P = { 0 };
	struct ibv_cq_ex *cqx = NULL;
	struct ibv_mr *mr = NULL, *mr2 = NULL;
	struct ibv_parent_domain_init_attr pa;

	if (!fx_open())
		return;
	pd = ibv_alloc_pd(F.ctx);
	pd2 = ibv_alloc_pd(F.ctx);
	if (!pd || !pd2)
		goto out;
	/* mlx5_alloc_parent_domain: a PD, known comp_mask bits, both allocators */
	memset(&pa, 0, sizeof pa);
	EXPECT_NULL("pdom_no_pd_einval", ibv_alloc_parent_domain(F.ctx, &pa), EINVAL, d_pd);
	pa.pd = pd;
	pa.comp_mask = 1u << 7;
	EXPECT_NULL("pdom_unknown_comp_mask_einval", ibv_alloc_parent_domain(F.ctx, &pa), EINVAL, d_pd);
	pa.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
	pa.alloc = pdom_alloc;
	EXPECT_NULL("pdom_alloc_without_free_einval", ibv_alloc_parent_domain(F.ctx, &pa), EINVAL, d_pd);
	pa.free = pdom_free;
	pa.comp_mask |= IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
	pa.pd_context = &pdom_allocs;
	EXPECT_OBJ("pdom_alloc", pdom, ibv_alloc_parent_domain(F.ctx, &pa));
	if (!pdom)
		goto out;
	expect_ret("pdom_pd_busy", EBUSY, ibv_dealloc_pd(pd));

	/* a QP's send queue and a CQ's ring come from the allocator */
	pdom_allocs = pdom_frees = 0;
	mr = reg_buf(pd);
	mr2 = reg_buf(pd2);
	if (!pair_open(&P, pdom, "pdom_qp_pair") || !mr || !mr2)
		goto out;
	check("pdom_qp_buffers_from_allocator", pdom_allocs == 2 && pdom_last_type == 1,
	      "expected 2 allocations of type 1 (QP) got %d, last type %llu", pdom_allocs,
	      (unsigned long long)pdom_last_type);
	struct ibv_cq_init_attr_ex ca = { .cqe = 16, .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = pd };
	EXPECT_NULL("pdom_cq_ex_plain_pd_einval", ibv_create_cq_ex(F.ctx, &ca), EINVAL, d_cq);
	ca.parent_domain = pdom;
	pdom_allocs = 0;
	EXPECT_OBJ("pdom_cq_ex", cqx, ibv_create_cq_ex(F.ctx, &ca));
	check("pdom_cq_ring_from_allocator", pdom_allocs == 1 && pdom_last_type == 5,
	      "expected 1 allocation of type 5 (CQ) got %d, last type %llu", pdom_allocs,
	      (unsigned long long)pdom_last_type);
	if (!cqx)
		goto out;

	/* protection is the PD's: an MR of the PD serves QPs of its parent
	 * domain, an MR of another PD does not */
	memset(buf, 0x3c, 128);
	memset(buf + 4096, 0, 128);
	expect_wc("pdom_write_mr_of_the_pd", IBV_WC_SUCCESS,
		  odp_op(P.qp, P.cq, IBV_WR_RDMA_WRITE, mr, buf, 128, (uintptr_t)buf + 4096, mr->rkey));
	check("pdom_write_data", buf[4096] == 0x3c && buf[4096 + 127] == 0x3c, "expected the bytes written");
	expect_wc("pdom_write_mr_of_another_pd_rem_access", IBV_WC_REM_ACCESS_ERR,
		  odp_op(P.qp, P.cq, IBV_WR_RDMA_WRITE, mr, buf, 128, (uintptr_t)buf + 4096, mr2->rkey));

	pdom_frees = 0;
	expect_ret("pdom_destroy_qp", 0, ibv_destroy_qp(P.qp));
	P.qp = NULL;
	expect_ret("pdom_destroy_cq_ex", 0, ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)));
	cqx = NULL;
	check("pdom_buffers_freed_by_allocator", pdom_frees == 2, "expected 2 frees got %d", pdom_frees);
	/* IBV_ALLOCATOR_USE_DEFAULT: the provider's own memory, never handed
	 * to the application's free */
	pdom_default = 1;
	pdom_frees = 0;
	struct ibv_qp *qp3 = mk_qp(pdom, P.cq, IBV_QPT_RC, NULL);
	check("pdom_use_default_qp", qp3 != NULL, "expected a QP got NULL errno %d", errno);
	if (qp3)
		ibv_destroy_qp(qp3);
	check("pdom_use_default_not_freed_by_app", pdom_frees == 0, "expected 0 frees got %d", pdom_frees);
	pdom_default = 0;
out:
	pair_close(&P);
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	if (mr)
		ibv_dereg_mr(mr);
	if (mr2)
		ibv_dereg_mr(mr2);
	if (pdom)
		expect_ret("pdom_dealloc", 0, ibv_dealloc_pd(pdom));
	if (pd)
		expect_ret("pdom_then_pd_dealloc", 0, ibv_dealloc_pd(pd));
	if (pd2)
		ibv_dealloc_pd(pd2);
	fx_close();
}

struct group {
	const char *name;
	void (*fn)(void);
};

/* ibv_attach_mcast / ibv_detach_mcast (the kernel's ib_attach_mcast and
 * uverbs): a UD QP and a multicast GID, else EINVAL; attaching twice is 0;
 * detaching a group the QP is not attached to is EINVAL; a QP destroyed
 * while attached leaves its groups. */
static void g_mcast(void)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *ud = NULL, *rc = NULL;
	union ibv_gid grp, uni;

	if (!fx_open())
		return;
	pd = ibv_alloc_pd(F.ctx);
	cq = ibv_create_cq(F.ctx, 16, NULL, NULL, 0);
	if (pd && cq) {
		ud = mk_qp(pd, cq, IBV_QPT_UD, NULL);
		rc = mk_qp(pd, cq, IBV_QPT_RC, NULL);
	}
	if (!ud || !rc) {
		fail("mcast_setup", "expected a UD and an RC QP got %p %p errno %d (%s)", (void *)ud, (void *)rc,
		     errno, errname(errno));
		goto out;
	}
	/* ::ffff:239.93.1.7, a group, and ::ffff:198.18.1.7, no group */
	memset(&grp, 0, sizeof(grp));
	grp.raw[10] = grp.raw[11] = 0xff;
	grp.raw[12] = 239, grp.raw[13] = 93, grp.raw[14] = 1, grp.raw[15] = 7;
	uni = grp;
	uni.raw[12] = 198, uni.raw[13] = 18;
	expect_ge("mcast_device_max_mcast_grp", 1, F.da.max_mcast_grp);
	expect_ge("mcast_device_max_mcast_qp_attach", 1, F.da.max_mcast_qp_attach);
	expect_ret("mcast_attach_rc_qp_einval", EINVAL, ibv_attach_mcast(rc, &grp, 0));
	expect_ret("mcast_attach_unicast_gid_einval", EINVAL, ibv_attach_mcast(ud, &uni, 0));
	expect_ret("mcast_detach_not_attached_einval", EINVAL, ibv_detach_mcast(ud, &grp, 0));
	expect_ret("mcast_attach", 0, ibv_attach_mcast(ud, &grp, 0));
	expect_ret("mcast_attach_twice", 0, ibv_attach_mcast(ud, &grp, 0));
	expect_ret("mcast_detach", 0, ibv_detach_mcast(ud, &grp, 0));
	expect_ret("mcast_detach_twice_einval", EINVAL, ibv_detach_mcast(ud, &grp, 0));
	expect_ret("mcast_attach_again", 0, ibv_attach_mcast(ud, &grp, 0));
	expect_ret("mcast_destroy_attached_qp", 0, ibv_destroy_qp(ud));
	ud = mk_qp(pd, cq, IBV_QPT_UD, NULL);
	/* the group went with the QP: the new QP is not in it */
	if (ud)
		expect_ret("mcast_new_qp_not_attached_einval", EINVAL, ibv_detach_mcast(ud, &grp, 0));
out:
	if (ud)
		ibv_destroy_qp(ud);
	if (rc)
		ibv_destroy_qp(rc);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	fx_close();
}

static const struct group groups[] = {
	{ "device", g_device },
	{ "async", g_async },
	{ "pd_mr", g_pd_mr },
	{ "cq", g_cq },
	{ "cq_events", g_cq_events },
	{ "qp_create", g_qp_create },
	{ "qp_rc_modify", g_qp_rc },
	{ "qp_ud_modify", g_qp_ud },
	{ "qp_uc_modify", g_qp_uc },
	{ "post_state", g_post_state },
	{ "ah", g_ah },
	{ "srq", g_srq },
	{ "xrc", g_xrc },
	{ "ordering", g_ordering },
	{ "mw", g_mw },
	{ "qp_ex", g_qp_ex },
	{ "odp", g_odp },
	{ "dm", g_dm },
	{ "parent_domain", g_parent_domain },
	{ "mcast", g_mcast },
};
#define NGROUPS (sizeof groups / sizeof groups[0])

static const struct group *find_group(const char *name)
{
	for (size_t i = 0; i < NGROUPS; i++)
		if (!strcmp(groups[i].name, name))
			return &groups[i];
	return NULL;
}

static char self_buf[PATH_MAX];

static const char *self_path(const char *argv0)
{
	ssize_t n = readlink("/proc/self/exe", self_buf, sizeof self_buf - 1);

	if (n > 0) {
		const char *b;

		self_buf[n] = '\0';
		b = strrchr(self_buf, '/');
		b = b ? b + 1 : self_buf;
		/* Started through an explicit ld.so: /proc/self/exe is ld.so. */
		if (strncmp(b, "ld-", 3) && strncmp(b, "ld.so", 5))
			return self_buf;
	}
	return argv0;
}

static void run_child(const char *self, const char *name)
{
	char line[4096];
	int pfd[2], st = 0, nfail = 0;
	pid_t pid;
	FILE *in;

	if (pipe(pfd)) {
		fail(nm(name, "process"), "expected pipe() to work got errno %d", errno);
		return;
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		fail(nm(name, "process"), "expected fork() to work got errno %d", errno);
		close(pfd[0]);
		close(pfd[1]);
		return;
	}
	if (pid == 0) {
		close(pfd[0]);
		dup2(pfd[1], STDOUT_FILENO);
		close(pfd[1]);
		execl(self, self, "--group", name, (char *)NULL);
		printf("not ok %s_exec: expected exec of %s got errno %d\n", name, self,
		       errno);
		fflush(stdout);
		_exit(2);
	}
	close(pfd[1]);
	in = fdopen(pfd[0], "r");
	while (in && fgets(line, sizeof line, in)) {
		fputs(line, stdout);
		if (!strncmp(line, "not ok ", 7)) {
			n_fail++;
			nfail++;
		} else if (!strncmp(line, "ok ", 3)) {
			if (strstr(line, " # SKIP"))
				n_skip++;
			else
				n_pass++;
		}
	}
	if (in)
		fclose(in);
	else
		close(pfd[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(st))
		fail(nm(name, "process"), "expected the group to exit normally got signal %d (%s)%s",
		     WTERMSIG(st), strsignal(WTERMSIG(st)),
		     WTERMSIG(st) == SIGALRM ? " - timed out after 60 s" : "");
	else if (WIFEXITED(st) && WEXITSTATUS(st) != (nfail ? 1 : 0))
		fail(nm(name, "process"), "expected exit status %d got %d", nfail ? 1 : 0,
		     WEXITSTATUS(st));
}

int main(int argc, char **argv)
{
	const char *self;
	bool inline_mode = false;
	int first = 1;

	setvbuf(stdout, NULL, _IOLBF, 0);

	if (argc == 3 && !strcmp(argv[1], "--group")) {
		const struct group *g = find_group(argv[2]);

		if (!g) {
			fprintf(stderr, "unknown group %s\n", argv[2]);
			return 2;
		}
		cur_group = g->name;
		alarm(60);
		g->fn();
		fflush(stdout);
		return n_fail ? 1 : 0;
	}
	if (argc == 2 && !strcmp(argv[1], "--list")) {
		for (size_t i = 0; i < NGROUPS; i++)
			printf("%s\n", groups[i].name);
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "--inline")) {
		inline_mode = true;
		first = 2;
	}
	for (int i = first; i < argc; i++)
		if (!find_group(argv[i])) {
			fprintf(stderr, "unknown group %s (try --list)\n", argv[i]);
			return 2;
		}

	self = self_path(argv[0]);
	for (size_t i = 0; i < NGROUPS; i++) {
		bool wanted = argc <= first;

		for (int j = first; j < argc; j++)
			if (!strcmp(argv[j], groups[i].name))
				wanted = true;
		if (!wanted)
			continue;
		printf("# group %s\n", groups[i].name);
		if (inline_mode) {
			cur_group = groups[i].name;
			groups[i].fn();
		} else {
			run_child(self, groups[i].name);
		}
	}
	printf("%d passed, %d failed", n_pass, n_fail);
	if (n_skip)
		printf(", %d skipped", n_skip);
	printf("\n");
	return n_fail ? 1 : 0;
}
