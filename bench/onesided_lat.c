/*
 * onesided_lat: the latency of one-sided operations (RDMA READ, WRITE,
 * FETCH_AND_ADD) by what the target application does meanwhile (issue #14:
 * a one-sided operation is served by the target's RDMA device, whatever
 * its application is doing).  A plain libibverbs program: it runs on uroce
 * (`uroce run --`), on rxe or on a NIC alike.
 *
 *   target:  onesided_lat [--port=N | --port=0 --port-file=F] --target=BEHAVIOUR [--target-period-us=500]
 *                         [--target-burst=1]
 *   client:  onesided_lat [--port=N] [--op=read|write|fadd] [--size=64] [--iters=2000]
 *                         [--pace-us=100] [--warmup=20] [--check] [--timeout-s=10] HOST
 *
 * The two sides connect one RC QP each over a TCP side channel, as
 * ibv_rc_pingpong and perftest do (QPN, PSN, GID of index 0, rkey and
 * address; the device is the first one listed).  The client then posts one
 * operation at a time, busy-polls its own CQ for its completion and times
 * each with CLOCK_MONOTONIC (post to completion; for a WRITE that is its
 * ACK, which the target sends only once the data is placed), sleeping
 * --pace-us between operations.  The target never polls for these
 * operations: its device must serve them while it does BEHAVIOUR:
 *
 *   idle            blocks in read() on the TCP socket until the client is done
 *   compute         a busy loop on arithmetic, no verbs calls
 *   spin-mem        spins reading its buffer's last byte, no verbs calls
 *   poll-compute    ibv_poll_cq once every --target-period-us (--target-burst times in a
 *                   row), busy computing in between
 *   poll-sleep      ibv_poll_cq once every period, nanosleep in between
 *   poll-spin       ibv_poll_cq in a tight loop
 *   poll-threads    two threads, each busy-polling its own CQ (the QP's CQ is one)
 *   poll-once-read  one ibv_poll_cq after connecting, then blocks in read()
 *   fork-child      forks after connecting: the parent blocks in waitpid, the
 *                   child computes (fork-safety is the library's business)
 *   stopped         is stopped (SIGSTOP, every thread) before the client may
 *                   start: the instrument's own check, the first operation
 *                   must time out
 *
 * The target posts a few receives, so its polls look at a real queue (no
 * completion ever arrives there).  Every behaviour but idle and
 * poll-once-read, which block in read(), looks at the socket for the
 * client's "done" once a millisecond or once a period, without a verbs call.
 *
 * --check verifies every operation, each with its own pattern: a READ's
 * destination is poisoned first and must then hold what the target wrote
 * into its region at setup (a function of the offset; the offset moves with
 * the iteration); a WRITE carries the iteration's own pattern, which the
 * client reads back after the WRITE completes; FETCH_AND_ADD must return
 * exactly 0, add, 2 add, ... (this client is the only one adding), and the
 * word must end as (operations) x add.  Any mismatch, any completion status
 * but IBV_WC_SUCCESS, or no completion within --timeout-s (a progress
 * failure, not a timing check: the operation and iteration are printed)
 * exits non-zero.
 *
 * Output, one line a run:
 *   onesided op=read size=64 target=poll-compute iters=2000 median_us=.. p99_us=.. max_us=.. min_us=.. pace_us=..
 * and a line for people.  Exit status: 0 ok, 1 data mismatch, 2 completion
 * error, 3 timeout, 4 setup failure.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "bench_clock.h"

enum { EXIT_MISMATCH = 1, EXIT_WC = 2, EXIT_TIMEOUT = 3, EXIT_SETUP = 4 };

#define MAGIC      0x6f6e6531u   /* "one1": side-channel version */
#define SPAN       4096u         /* READ/WRITE offsets move within this */
#define FADD_ADD   UINT64_C(0x0000000100000003)/* carries into the high half */
#define RECVS      8             /* receives the target posts */
#define DONE_BYTE  'D'

/* ------------------------------------------------------------- targets -- */

#define TARGETS(X) \
	X(IDLE, "idle") X(COMPUTE, "compute") X(SPIN_MEM, "spin-mem") \
	X(POLL_COMPUTE, "poll-compute") X(POLL_SLEEP, "poll-sleep") \
	X(POLL_SPIN, "poll-spin") X(POLL_THREADS, "poll-threads") \
	X(POLL_ONCE_READ, "poll-once-read") X(FORK_CHILD, "fork-child") \
	X(STOPPED, "stopped")
#define T_ENUM(e, s) T_##e,
#define T_NAME(e, s) s,
enum target { TARGETS(T_ENUM) T_COUNT };
static const char *const target_name[T_COUNT] = { TARGETS(T_NAME) };

enum op { OP_READ, OP_WRITE, OP_FADD, OP_COUNT };
static const char *const op_name[OP_COUNT] = { "read", "write", "fadd" };
static const char *const op_label[OP_COUNT] = { "READ", "WRITE", "FETCH_AND_ADD" };

static struct {
	int port;
	const char *port_file;
	const char *host;       /* NULL: the target */
	enum target target;
	unsigned period_us;
	unsigned burst;          /* polls in a row each period (poll-compute, poll-sleep) */
	enum op op;
	uint32_t size;
	long iters, warmup;
	unsigned pace_us;
	bool check;
	double timeout_s;
	int qp_timeout;
} opt = {
	.port = 18530, .target = T_IDLE, .period_us = 500, .burst = 1, .op = OP_READ, .size = 64,
	.iters = 2000, .warmup = 20, .pace_us = 100, .timeout_s = 10.0, .qp_timeout = 14,
};

__attribute__((format(printf, 2, 3), noreturn))
static void fail(int code, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "onesided_lat[%s]: FAIL: ", opt.host ? "client" : "target");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

/* ------------------------------------------------------------ patterns -- */

/* splitmix64's finaliser: neighbouring inputs give unrelated outputs, so a
 * stale or shifted copy of a pattern never matches it */
static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* byte `pos` of pattern `stream`: stream 0 is the target's region as set
 * up, stream 1 + i the WRITE of iteration i, ~i the poison before op i */
static uint8_t pat_byte(uint64_t stream, uint64_t pos)
{
	return (uint8_t)(mix64(stream * 0x100000000ull ^ (pos >> 3)) >> (8 * (pos & 7)));
}

static void pat_fill(uint8_t *p, size_t len, uint64_t stream, uint64_t pos)
{
	for (size_t k = 0; k < len; k++)
		p[k] = pat_byte(stream, pos + k);
}

/* the first byte of p that is not the pattern, or len */
static size_t pat_mismatch(const uint8_t *p, size_t len, uint64_t stream, uint64_t pos)
{
	for (size_t k = 0; k < len; k++)
		if (p[k] != pat_byte(stream, pos + k))
			return k;
	return len;
}

/* WRITEs go to slots one after the other, and --check reads a lap of
 * them back in one READ: a WRITE costs a slot's share of a READ, not one */
static uint32_t write_slots(void)
{
	uint32_t n = (64u << 10) / opt.size;
	return n < 1 ? 1 : n > 64 ? 64 : n;
}

/* where operation i reads or writes in the target's region */
static uint64_t op_offset(long i)
{
	switch (opt.op) {
	case OP_READ: return ((uint64_t)i * 8) % SPAN;
	case OP_WRITE: return (uint64_t)(i % write_slots()) * opt.size;
	default: return 0;   /* the FETCH_AND_ADD word */
	}
}

/* the target's region: every offset above, and the size past it */
static size_t region_len(void)
{
	switch (opt.op) {
	case OP_READ: return (size_t)opt.size + SPAN;
	case OP_WRITE: return (size_t)opt.size * write_slots();
	default: return 8;
	}
}

/* --------------------------------------------------------- side channel -- */

struct wire_qp {          /* both directions, network byte order */
	uint32_t magic, qpn, psn, op, size, rkey;
	uint64_t addr, len;
	uint8_t gid[16];
	char target[16];
};

/* the whole of buf, written (out) or read, or the run fails */
static void xfer(int fd, void *buf, size_t n, bool out)
{
	char *p = buf;
	while (n) {
		ssize_t k = out ? write(fd, p, n) : read(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			fail(EXIT_SETUP, "side channel %s: %s", out ? "write" : "read",
			     k ? strerror(errno) : "closed by the peer");
		p += k;
		n -= (size_t)k;
	}
}

static void xwrite(int fd, const void *buf, size_t n)
{
	xfer(fd, (void *)buf, n, true);
}

static void xread(int fd, void *buf, size_t n)
{
	xfer(fd, buf, n, false);
}

/* the target: listen (port 0: any, written to --port-file), take one client */
static int accept_one(void)
{
	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port),
				 .sin_addr.s_addr = htonl(INADDR_ANY) };
	socklen_t al = sizeof(a);
	if (ls < 0)
		fail(EXIT_SETUP, "socket: %s", strerror(errno));
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&a, &al))
		fail(EXIT_SETUP, "listen on TCP port %d: %s", opt.port, strerror(errno));
	if (opt.port_file) {
		char tmp[4096];
		snprintf(tmp, sizeof(tmp), "%s.tmp", opt.port_file);
		FILE *f = fopen(tmp, "w");
		if (!f || fprintf(f, "%u\n", ntohs(a.sin_port)) < 0 || fclose(f) || rename(tmp, opt.port_file))
			fail(EXIT_SETUP, "writing the port file %s: %s", opt.port_file, strerror(errno));
	}
	printf("target %s listening on TCP port %u\n", target_name[opt.target], ntohs(a.sin_port));
	fflush(stdout);
	int fd;
	while ((fd = accept(ls, NULL, NULL)) < 0 && errno == EINTR)
		;
	if (fd < 0)
		fail(EXIT_SETUP, "accept: %s", strerror(errno));
	close(ls);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* the client: the target may not listen yet, so try for 20 s */
static int connect_target(void)
{
	char port[16];
	snprintf(port, sizeof(port), "%d", opt.port);
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	int rc = getaddrinfo(opt.host, port, &hints, &res);
	if (rc)
		fail(EXIT_SETUP, "%s: %s", opt.host, gai_strerror(rc));
	uint64_t give_up = now_ns() + 20000000000ull;
	for (;;) {
		for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
			int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol), one = 1;
			if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
				freeaddrinfo(res);
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				return fd;
			}
			if (fd >= 0)
				close(fd);
		}
		if (now_ns() > give_up)
			fail(EXIT_SETUP, "no target at %s:%d", opt.host, opt.port);
		usleep(50000);
	}
}

/* has the client said it is done (or gone)?  One system call, no verbs */
static bool client_done(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, 0) > 0;
}

/* block until the client is done */
static void wait_done(int fd)
{
	char c;
	while (read(fd, &c, 1) < 0 && errno == EINTR)
		;
}

/* ---------------------------------------------------------------- verbs -- */

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
	enum ibv_mtu mtu;
	uint32_t psn;
};

static void side_open(struct side *s)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		fail(EXIT_SETUP, "no RDMA device (run it under `uroce run --`)");
	s->ctx = ibv_open_device(list[0]);
	if (!s->ctx)
		fail(EXIT_SETUP, "ibv_open_device(%s): %s", ibv_get_device_name(list[0]), strerror(errno));
	ibv_free_device_list(list);
	struct ibv_port_attr pa;
	if (ibv_query_port(s->ctx, 1, &pa) || ibv_query_gid(s->ctx, 1, 0, &s->gid))
		fail(EXIT_SETUP, "ibv_query_port/gid: %s", strerror(errno));
	s->mtu = pa.active_mtu;
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = RECVS, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	s->qp = s->pd && s->cq ? ibv_create_qp(s->pd, &ia) : NULL;
	if (!s->qp)
		fail(EXIT_SETUP, "PD/CQ/QP creation: %s", strerror(errno));
	s->psn = (uint32_t)(mix64((uint64_t)getpid() ^ now_ns()) & 0xffffff);
}

static struct ibv_mr *reg(struct side *s, void *p, size_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(s->pd, p, len, access);
	if (!mr)
		fail(EXIT_SETUP, "ibv_reg_mr(%zu bytes): %s", len, strerror(errno));
	return mr;
}

static void *alloc_buf(size_t len)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, len))
		fail(EXIT_SETUP, "out of memory (%zu bytes)", len);
	memset(p, 0, len);
	return p;
}

/* INIT -> RTR -> RTS toward the peer's QP (IBA 10.3; the attributes
 * ibv_rc_pingpong and perftest use) */
static void side_connect(struct side *s, const struct wire_qp *peer)
{
	struct ibv_qp_attr init = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
	};
	struct ibv_qp_attr rtr = {
		.qp_state = IBV_QPS_RTR, .path_mtu = s->mtu, .dest_qp_num = ntohl(peer->qpn),
		.rq_psn = ntohl(peer->psn), .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .sgid_index = 0, .hop_limit = 64 } },
	};
	memcpy(rtr.ah_attr.grh.dgid.raw, peer->gid, 16);
	struct ibv_qp_attr rts = {
		.qp_state = IBV_QPS_RTS, .sq_psn = s->psn, .timeout = (uint8_t)opt.qp_timeout,
		.retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1,
	};
	int rc;   /* ibv_modify_qp(3) returns the errno */
	if ((rc = ibv_modify_qp(s->qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				IBV_QP_ACCESS_FLAGS)) ||
	    (rc = ibv_modify_qp(s->qp, &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) ||
	    (rc = ibv_modify_qp(s->qp, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
				IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)))
		fail(EXIT_SETUP, "ibv_modify_qp toward RTS: %s", strerror(rc));
}

static void wire_fill(struct wire_qp *w, const struct side *s)
{
	memset(w, 0, sizeof(*w));
	w->magic = htonl(MAGIC);
	w->qpn = htonl(s->qp->qp_num);
	w->psn = htonl(s->psn);
	memcpy(w->gid, s->gid.raw, 16);
}

/* -------------------------------------------------------------- target -- */

static volatile uint64_t sink;   /* keeps the arithmetic from being optimised out */

/* busy arithmetic until `until` (CLOCK_MONOTONIC ns) */
static void compute_until(uint64_t until)
{
	uint64_t x = sink;
	do {
		for (int k = 0; k < 256; k++)
			x = x * 6364136223846793005ull + 1442695040888963407ull;
	} while (now_ns() < until);
	sink = x;
}

/* compute, looking at the socket once a millisecond */
static void compute_loop(int fd)
{
	while (!client_done(fd))
		compute_until(now_ns() + 1000000);
}

static void spin_mem_loop(int fd, const volatile uint8_t *last)
{
	uint64_t seen = 0;
	for (;;) {
		uint64_t until = now_ns() + 1000000;
		do {
			for (int k = 0; k < 256; k++)
				seen += *last;
		} while (now_ns() < until);
		if (client_done(fd))
			break;
	}
	sink = seen;
}

static unsigned long target_polls;   /* ibv_poll_cq calls, reported at the end */

static void poll_cq_once(struct ibv_cq *cq)
{
	struct ibv_wc wc[4];
	if (ibv_poll_cq(cq, 4, wc) < 0)
		fail(EXIT_SETUP, "target's ibv_poll_cq failed");
	target_polls++;
}

/* poll once a period; compute (or sleep) in between */
static void poll_periodic_loop(int fd, struct ibv_cq *cq, bool sleep_between)
{
	uint64_t period = (uint64_t)(opt.period_us ? opt.period_us : 1) * 1000, next = now_ns();
	do {
		for (unsigned i = 0; i < opt.burst; i++)
			poll_cq_once(cq);
		next += period;
		uint64_t now = now_ns();
		if (next < now)
			next = now;   /* fell behind (descheduled): no burst of catch-up polls */
		if (sleep_between) {
			struct timespec ts = { (time_t)(next / 1000000000ull), (long)(next % 1000000000ull) };
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
		} else {
			compute_until(next);
		}
	} while (!client_done(fd));
}

struct poller {
	pthread_t tid;
	struct ibv_cq *cq;
	atomic_bool *stop;
	unsigned long polls;
};

static void *poller_main(void *arg)
{
	struct poller *p = arg;
	struct ibv_wc wc[4];
	while (!atomic_load_explicit(p->stop, memory_order_relaxed)) {
		if (ibv_poll_cq(p->cq, 4, wc) < 0)
			fail(EXIT_SETUP, "target's ibv_poll_cq failed");
		p->polls++;
	}
	return NULL;
}

static void poll_spin_loop(int fd, struct ibv_cq *cq)
{
	for (;;) {
		uint64_t until = now_ns() + 1000000;
		do {
			for (int k = 0; k < 64; k++)
				poll_cq_once(cq);
		} while (now_ns() < until);
		if (client_done(fd))
			return;
	}
}

/* two threads, each spinning on its own CQ; this one waits for the client */
static void poll_threads(int fd, struct side *s)
{
	atomic_bool stop = false;
	struct poller p[2] = { { .cq = s->cq, .stop = &stop },
			       { .cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0), .stop = &stop } };
	if (!p[1].cq)
		fail(EXIT_SETUP, "ibv_create_cq: %s", strerror(errno));
	for (int i = 0; i < 2; i++)
		if (pthread_create(&p[i].tid, NULL, poller_main, &p[i]))
			fail(EXIT_SETUP, "pthread_create failed");
	wait_done(fd);
	atomic_store(&stop, true);
	for (int i = 0; i < 2; i++) {
		pthread_join(p[i].tid, NULL);
		target_polls += p[i].polls;
	}
	ibv_destroy_cq(p[1].cq);
}

/* the parent waits in waitpid while its child computes */
static void fork_child(int fd)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		fail(EXIT_SETUP, "fork: %s", strerror(errno));
	if (pid == 0) {
		compute_loop(fd);
		exit(0);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			fail(EXIT_SETUP, "waitpid: %s", strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail(EXIT_SETUP, "the forked child ended with status 0x%x", st);
}

/* are all threads of process pid stopped (state T in /proc/PID/task/TID/stat)? */
static bool all_stopped(pid_t pid)
{
	char dir[64], path[128], buf[512];
	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return false;
	bool all = true;
	for (struct dirent *e; all && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%.20s/stat", dir, e->d_name);
		FILE *f = fopen(path, "r");
		size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
		if (f)
			fclose(f);
		buf[n] = 0;
		const char *rp = strrchr(buf, ')');   /* the state follows the command's ") " */
		all = rp && rp[1] == ' ' && (rp[2] == 'T' || rp[2] == 't');
	}
	closedir(d);
	return all;
}

/* `stopped`: a child stops this process, every thread, the engine's too,
 * and only then hands the client the connection, so that not one
 * operation is served */
static void stop_then_reply(int fd, const struct wire_qp *me)
{
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		fail(EXIT_SETUP, "fork: %s", strerror(errno));
	if (pid == 0) {
		kill(parent, SIGSTOP);
		while (!all_stopped(parent))
			usleep(1000);
		xwrite(fd, me, sizeof(*me));
		wait_done(fd);
		_exit(0);
	}
	wait_done(fd);
}

static int run_target(void)
{
	if (opt.target == T_FORK_CHILD && ibv_fork_init())
		/* ibv_fork_init(3): a program that forks with verbs objects
		 * open calls it before any other verbs call */
		fail(EXIT_SETUP, "ibv_fork_init: %s", strerror(errno));
	int fd = accept_one();
	struct wire_qp peer, me;
	xread(fd, &peer, sizeof(peer));
	if (ntohl(peer.magic) != MAGIC || ntohl(peer.op) >= OP_COUNT)
		fail(EXIT_SETUP, "the client speaks another side-channel version");
	opt.op = (enum op)ntohl(peer.op);
	opt.size = ntohl(peer.size);
	if (opt.size < 1 || opt.size > 1u << 30 || (opt.op == OP_FADD && opt.size != 8))
		fail(EXIT_SETUP, "the client asks for %s of %u bytes", op_label[opt.op], opt.size);

	struct side s;
	side_open(&s);
	/* a FADD's word starts at 0, a READ's or WRITE's region is pattern 0 */
	size_t len = region_len();
	uint8_t *region = alloc_buf(len);
	if (opt.op != OP_FADD)
		pat_fill(region, len, 0, 0);
	struct ibv_mr *mr = reg(&s, region, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
				IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	uint8_t *rbuf = alloc_buf(RECVS * 64);
	struct ibv_mr *rmr = reg(&s, rbuf, RECVS * 64, IBV_ACCESS_LOCAL_WRITE);
	side_connect(&s, &peer);
	for (int i = 0; i < RECVS; i++) {   /* after INIT: a QP in RESET takes none */
		struct ibv_sge sge = { (uintptr_t)(rbuf + 64 * i), 64, rmr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
		int rc = ibv_post_recv(s.qp, &wr, &bad);
		if (rc)
			fail(EXIT_SETUP, "ibv_post_recv: %s", strerror(rc));
	}
	wire_fill(&me, &s);
	me.rkey = htonl(mr->rkey);
	me.addr = htobe64((uint64_t)(uintptr_t)region);
	me.len = htobe64(len);
	snprintf(me.target, sizeof(me.target), "%s", target_name[opt.target]);
	if (opt.target != T_STOPPED)
		xwrite(fd, &me, sizeof(me));

	switch (opt.target) {
	case T_IDLE: wait_done(fd); break;
	case T_COMPUTE: compute_loop(fd); break;
	case T_SPIN_MEM: spin_mem_loop(fd, region + len - 1); break;
	case T_POLL_COMPUTE: poll_periodic_loop(fd, s.cq, false); break;
	case T_POLL_SLEEP: poll_periodic_loop(fd, s.cq, true); break;
	case T_POLL_SPIN: poll_spin_loop(fd, s.cq); break;
	case T_POLL_THREADS: poll_threads(fd, &s); break;
	case T_POLL_ONCE_READ: poll_cq_once(s.cq); wait_done(fd); break;
	case T_FORK_CHILD: fork_child(fd); break;
	case T_STOPPED: stop_then_reply(fd, &me); break;
	case T_COUNT: break;
	}
	printf("target %s: done, %lu ibv_poll_cq calls\n", target_name[opt.target], target_polls);
	ibv_destroy_qp(s.qp);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(rmr);
	ibv_destroy_cq(s.cq);
	ibv_dealloc_pd(s.pd);
	ibv_close_device(s.ctx);
	free(region);
	free(rbuf);
	close(fd);
	return 0;
}

/* -------------------------------------------------------------- client -- */

struct client {
	struct side s;
	struct wire_qp peer;
	uint64_t raddr;
	uint32_t rkey;
	uint8_t *buf, *back;      /* the op's local buffer; a WRITE's read-back */
	struct ibv_mr *mr, *back_mr;
};

/* post one operation and busy-poll for its completion; the latency in ns */
static uint64_t one_op(struct client *c, enum op op, const char *what, long i, uint64_t off, uint8_t *local,
		       uint32_t lkey, uint32_t len)
{
	static const enum ibv_wr_opcode wr_op[OP_COUNT] = {
		IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_ATOMIC_FETCH_AND_ADD };
	static const enum ibv_wc_opcode wc_op[OP_COUNT] = {
		IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_FETCH_ADD };
	struct ibv_sge sge = { (uintptr_t)local, len, lkey };
	struct ibv_send_wr wr = {
		.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1, .opcode = wr_op[op],
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	if (op == OP_FADD) {
		wr.wr.atomic.remote_addr = c->raddr + off;
		wr.wr.atomic.compare_add = FADD_ADD;
		wr.wr.atomic.rkey = c->rkey;
	} else {
		wr.wr.rdma.remote_addr = c->raddr + off;
		wr.wr.rdma.rkey = c->rkey;
	}
	struct ibv_wc wc;
	uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)(opt.timeout_s * 1e9), t1;
	int rc = ibv_post_send(c->s.qp, &wr, &bad);
	if (rc)
		fail(EXIT_WC, "%s iteration %ld: ibv_post_send: %s", what, i, strerror(rc));
	for (unsigned spins = 0;; spins++) {
		int n = ibv_poll_cq(c->s.cq, 1, &wc);
		if (n < 0)
			fail(EXIT_WC, "%s iteration %ld: ibv_poll_cq failed", what, i);
		if (n) {
			t1 = now_ns();
			break;
		}
		if ((spins & 255) == 255 && now_ns() > deadline)
			fail(EXIT_TIMEOUT, "%s iteration %ld (target %s): no completion within %.3g s: "
			     "the target's side did not serve it (a progress failure)",
			     what, i, c->peer.target, opt.timeout_s);
	}
	if (wc.status != IBV_WC_SUCCESS)
		fail(EXIT_WC, "%s iteration %ld (target %s): completion status %s (%d)%s", what, i,
		     c->peer.target, ibv_wc_status_str(wc.status), wc.status,
		     wc.status == IBV_WC_RETRY_EXC_ERR ? ": the target's side answered nothing "
							   "(a progress failure)" : "");
	if (wc.wr_id != (uint64_t)i || wc.opcode != wc_op[op])
		fail(EXIT_WC, "%s iteration %ld: completion of wr_id %" PRIu64 ", opcode %d", what, i,
		     wc.wr_id, wc.opcode);
	return t1 - t0;
}

__attribute__((noreturn))
static void mismatch(const char *what, long i, uint64_t off, size_t at, const uint8_t *got, uint8_t want)
{
	fail(EXIT_MISMATCH, "%s iteration %ld: byte %zu (target offset %" PRIu64 ") is 0x%02x, not 0x%02x",
	     what, i, at, off + at, got[at], want);
}

/* read back the WRITEs first .. first + n - 1, a lap of slots from slot 0:
 * RC executes them before the READ (IBA 9.5) */
static void check_writes(struct client *c, long first, uint32_t n)
{
	size_t len = (size_t)n * opt.size, at;
	pat_fill(c->back, len, ~(uint64_t)first, 0);   /* poison */
	one_op(c, OP_READ, "READ of WRITEs", first, 0, c->back, c->back_mr->lkey, (uint32_t)len);
	for (uint32_t k = 0; k < n; k++) {
		const uint8_t *got = c->back + (size_t)k * opt.size;
		uint64_t stream = 1 + (uint64_t)first + k;
		if ((at = pat_mismatch(got, opt.size, stream, 0)) < opt.size)
			mismatch("WRITE (read back)", first + k, (uint64_t)k * opt.size, at, got,
				 pat_byte(stream, at));
	}
}

/* one timed operation, checked with --check; the latency in ns */
static uint64_t client_iter(struct client *c, long i)
{
	uint64_t off = op_offset(i);
	uint32_t len = opt.size;
	if (opt.check) {
		if (opt.op == OP_WRITE)
			pat_fill(c->buf, len, 1 + (uint64_t)i, 0);
		else
			pat_fill(c->buf, len, ~(uint64_t)i, 0);   /* poison */
	}
	uint64_t ns = one_op(c, opt.op, op_label[opt.op], i, off, c->buf, c->mr->lkey, len);
	if (!opt.check)
		return ns;
	size_t at;
	switch (opt.op) {
	case OP_READ:
		if ((at = pat_mismatch(c->buf, len, 0, off)) < len)
			mismatch("READ", i, off, at, c->buf, pat_byte(0, off + at));
		break;
	case OP_WRITE:
		if ((i + 1) % write_slots() == 0)
			check_writes(c, i + 1 - write_slots(), write_slots());
		break;
	case OP_FADD: {
		/* the original value, in host byte order as rxe returns it */
		uint64_t old;
		memcpy(&old, c->buf, 8);
		if (old != (uint64_t)i * FADD_ADD)
			fail(EXIT_MISMATCH, "FETCH_AND_ADD iteration %ld returned 0x%" PRIx64 ", not 0x%" PRIx64,
			     i, old, (uint64_t)i * FADD_ADD);
		break;
	}
	case OP_COUNT:
		break;
	}
	return ns;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int run_client(void)
{
	struct client c = { 0 };
	int fd = connect_target();
	side_open(&c.s);
	uint32_t len = opt.size;
	c.buf = alloc_buf(len);
	c.back = alloc_buf(region_len());   /* a lap of WRITEs read back */
	c.mr = reg(&c.s, c.buf, len, IBV_ACCESS_LOCAL_WRITE);
	c.back_mr = reg(&c.s, c.back, region_len(), IBV_ACCESS_LOCAL_WRITE);
	struct wire_qp me;
	wire_fill(&me, &c.s);
	me.op = htonl(opt.op);
	me.size = htonl(opt.size);
	xwrite(fd, &me, sizeof(me));
	xread(fd, &c.peer, sizeof(c.peer));
	if (ntohl(c.peer.magic) != MAGIC)
		fail(EXIT_SETUP, "the target speaks another side-channel version");
	c.peer.target[sizeof(c.peer.target) - 1] = 0;
	c.rkey = ntohl(c.peer.rkey);
	c.raddr = be64toh(c.peer.addr);
	side_connect(&c.s, &c.peer);

	long total = opt.warmup + opt.iters;
	uint64_t *lat = calloc((size_t)opt.iters, sizeof(*lat));
	if (!lat)
		fail(EXIT_SETUP, "out of memory");
	struct timespec pace = { (time_t)(opt.pace_us / 1000000), (long)(opt.pace_us % 1000000) * 1000 };
	for (long i = 0; i < total; i++) {
		uint64_t ns = client_iter(&c, i);
		if (i >= opt.warmup)
			lat[i - opt.warmup] = ns;
		if (opt.pace_us)
			nanosleep(&pace, NULL);
	}
	if (opt.check && opt.op == OP_WRITE && total % write_slots())
		check_writes(&c, total - total % write_slots(), (uint32_t)(total % write_slots()));
	if (opt.check && opt.op == OP_FADD) {
		/* the word ends as every add made it */
		uint64_t want = (uint64_t)total * FADD_ADD, got;
		memset(c.back, 0xa5, 8);
		one_op(&c, OP_READ, "READ of the FETCH_AND_ADD word", total, 0, c.back, c.back_mr->lkey, 8);
		memcpy(&got, c.back, 8);
		if (got != want)
			fail(EXIT_MISMATCH, "FETCH_AND_ADD: the word is 0x%" PRIx64 " after %ld adds, not 0x%" PRIx64,
			     got, total, want);
	}
	char done = DONE_BYTE;
	xwrite(fd, &done, 1);

	qsort(lat, (size_t)opt.iters, sizeof(*lat), cmp_u64);
	size_t n = (size_t)opt.iters, p99 = (n * 99 + 99) / 100 - 1;   /* nearest rank */
	double med = n % 2 ? lat[n / 2] / 1e3 : (lat[n / 2 - 1] + lat[n / 2]) / 2e3;
	printf("onesided op=%s size=%u target=%s iters=%ld median_us=%.2f p99_us=%.2f max_us=%.2f "
	       "min_us=%.2f pace_us=%u\n", op_name[opt.op], len, c.peer.target, opt.iters, med,
	       lat[p99] / 1e3, lat[n - 1] / 1e3, lat[0] / 1e3, opt.pace_us);
	printf("%s of %u B, target %s: median %.2f us, p99 %.2f us, max %.2f us over %ld operations "
	       "(%ld warm-up; %u us between)%s\n", op_label[opt.op], len, c.peer.target, med, lat[p99] / 1e3,
	       lat[n - 1] / 1e3, opt.iters, opt.warmup, opt.pace_us,
	       opt.check ? "; every one checked" : "");
	free(lat);
	ibv_destroy_qp(c.s.qp);
	ibv_dereg_mr(c.mr);
	ibv_dereg_mr(c.back_mr);
	ibv_destroy_cq(c.s.cq);
	ibv_dealloc_pd(c.s.pd);
	ibv_close_device(c.s.ctx);
	free(c.buf);
	free(c.back);
	close(fd);
	return 0;
}

/* ----------------------------------------------------------------- main -- */

static int lookup(const char *v, const char *const *names, int n, const char *what)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(v, names[i]))
			return i;
	fprintf(stderr, "onesided_lat: unknown %s '%s'; one of:", what, v);
	for (int i = 0; i < n; i++)
		fprintf(stderr, " %s", names[i]);
	fputc('\n', stderr);
	exit(EXIT_SETUP);
}

static long num_arg(const char *v, long lo, long hi, const char *what)
{
	char *end;
	errno = 0;
	long x = strtol(v, &end, 0);
	if (errno || *end || x < lo || x > hi) {
		fprintf(stderr, "onesided_lat: --%s=%s: a number from %ld to %ld\n", what, v, lo, hi);
		exit(EXIT_SETUP);
	}
	return x;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: onesided_lat [--port=N] [--port-file=F] --target=BEHAVIOUR [--target-period-us=500]\n"
		   "                    [--target-burst=1]\n"
		   "       onesided_lat [--port=N] [--op=read|write|fadd] [--size=64] [--iters=2000] [--warmup=20]\n"
		   "                    [--pace-us=100] [--check] [--timeout-s=10] [--qp-timeout=14] HOST\n"
		   "behaviours:");
	for (int i = 0; i < T_COUNT; i++)
		fprintf(f, " %s", target_name[i]);
	fputc('\n', f);
}

int main(int argc, char **argv)
{
	/* id, name, argument: the enum and getopt's table from one list */
#define OPTIONS(X) \
	X(O_PORT, "port", 1) X(O_PORT_FILE, "port-file", 1) X(O_TARGET, "target", 1) \
	X(O_PERIOD, "target-period-us", 1) X(O_OP, "op", 1) X(O_SIZE, "size", 1) \
	X(O_ITERS, "iters", 1) X(O_WARMUP, "warmup", 1) X(O_PACE, "pace-us", 1) \
	X(O_CHECK, "check", 0) X(O_TIMEOUT, "timeout-s", 1) X(O_QP_TIMEOUT, "qp-timeout", 1) \
	X(O_BURST, "target-burst", 1) X(O_HELP, "help", 0)
#define O_ENUM(id, name, arg) id,
#define O_ROW(id, name, arg) { name, arg ? required_argument : no_argument, NULL, id },
	enum { O_FIRST = 255, OPTIONS(O_ENUM) };
	static const struct option lo[] = { OPTIONS(O_ROW) { NULL, 0, NULL, 0 } };
	bool size_set = false;
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case O_PORT: opt.port = (int)num_arg(optarg, 0, 65535, "port"); break;
		case O_PORT_FILE: opt.port_file = optarg; break;
		case O_TARGET: opt.target = (enum target)lookup(optarg, target_name, T_COUNT, "target"); break;
		case O_PERIOD: opt.period_us = (unsigned)num_arg(optarg, 1, 10000000, "target-period-us"); break;
		case O_BURST: opt.burst = (unsigned)num_arg(optarg, 1, 1000000, "target-burst"); break;
		case O_OP: opt.op = (enum op)lookup(optarg, op_name, OP_COUNT, "op"); break;
		case O_SIZE:
			opt.size = (uint32_t)num_arg(optarg, 1, 1 << 30, "size");
			size_set = true;
			break;
		case O_ITERS: opt.iters = num_arg(optarg, 1, 100000000, "iters"); break;
		case O_WARMUP: opt.warmup = num_arg(optarg, 0, 100000000, "warmup"); break;
		case O_PACE: opt.pace_us = (unsigned)num_arg(optarg, 0, 10000000, "pace-us"); break;
		case O_CHECK: opt.check = true; break;
		case O_TIMEOUT:
			opt.timeout_s = atof(optarg);
			if (!(opt.timeout_s > 0 && opt.timeout_s < 1e6)) {
				fprintf(stderr, "onesided_lat: --timeout-s=%s: seconds, more than 0\n", optarg);
				return EXIT_SETUP;
			}
			break;
		case O_QP_TIMEOUT: opt.qp_timeout = (int)num_arg(optarg, 0, 31, "qp-timeout"); break;
		case O_HELP: usage(stdout); return 0;
		default: usage(stderr); return EXIT_SETUP;
		}
	}
	if (optind + 1 < argc) {
		usage(stderr);
		return EXIT_SETUP;
	}
	if (opt.op == OP_FADD) {   /* an atomic is 8 bytes (IBA 9.4.5) */
		if (size_set && opt.size != 8) {
			fprintf(stderr, "onesided_lat: --op=fadd is 8 bytes, not --size=%u\n", opt.size);
			return EXIT_SETUP;
		}
		opt.size = 8;
	}
	if (optind < argc)
		opt.host = argv[optind];
	return opt.host ? run_client() : run_target();
}
