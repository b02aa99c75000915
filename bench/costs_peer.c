/*
 * costs_peer: what one message costs, measured on both sides (issue #18;
 * bench/costs.py runs it and prints the cost model beside it).
 *
 *   server:  costs_peer --transport=tcp|verbs [--port=N] [--port-file=F]
 *   client:  costs_peer --transport=tcp|verbs [--port=N] [--size=65536] [--iters=2000]
 *                       [--warmup=100] [--wait=block|spin] HOST
 *
 * A plain program: `verbs` is libibverbs (run under `uroce run --`, or on
 * rxe or a NIC), `tcp` is a TCP socket.  The two sides meet on a TCP side
 * channel (the client sends the size, counts and wait mode; for verbs
 * both then trade QPN, PSN, GID, rkey and address as ibv_rc_pingpong and
 * perftest do) and run two timed phases:
 *
 *   pingpong  the client sends SIZE bytes, the server sends them back,
 *             ITERS times (verbs: RC SENDs into posted receives; tcp: send
 *             and recv on the side channel's socket).  The client times
 *             each round trip; half of it is the latency.
 *   read      the client fetches SIZE bytes of the server's memory READS
 *             times, one at a time (verbs: RDMA READ; tcp: an 8-byte
 *             request that the server's application answers with send).
 *             The verbs server's application blocks in read() on the side
 *             channel meanwhile: it runs nothing while its memory is read.
 *
 * --wait=block (the default) waits as the classic model does, in the
 * kernel: a blocking recv, or a completion channel (ibv_req_notify_cq,
 * ibv_get_cq_event); --wait=spin polls (non-blocking recv, ibv_poll_cq).
 * --reads=N sets the READ phase's count apart (default: --iters): the
 * target application's fixed cost there, its two side-channel calls and
 * one wake-up, is spread over N READs.
 *
 * Around each phase each side takes a snapshot of: the CPU time of each
 * of its threads (their CPU-time clocks), split into uroce's (named
 * "uroce-*": the engine, what a hardware NIC would do, and uroce's other
 * threads) and the application's (the rest); uroce's counters, read from this process's own
 * stats page (/dev/shm/uroce.<pid>, the page `uroce stat` reads), whose
 * sys_* and copy_* counters say which system calls uroce made and which
 * payload copies it did; for tcp, its own count of system calls and of the
 * bytes passed to send and returned by recv; each thread's context
 * switches (voluntary: it slept; involuntary: it was preempted); and
 * instructions by thread
 * where perf_event_open gives a hardware counter (a VM often hides it:
 * then the reason).  Each side prints one JSON line a phase:
 *
 *   {"role":"client","phase":"pingpong","transport":"verbs","size":65536,"n":2000,
 *    "wall_ns":..,"app_cpu_ns":..,"uroce_cpu_ns":..,"own_syscalls":..,"own_tx_bytes":..,
 *    "own_rx_bytes":..,"app_vcsw":..,"app_ivcsw":..,"uroce_vcsw":..,"uroce_ivcsw":..,"counters":{"sys_sendmmsg":..,..}|null,"instr_app":..|null,
 *    "instr_uroce":..|null,"instr_note":"..","lat_ns":[..]}  (lat_ns: client, median and p99)
 *
 * Exit status: 0 ok, 1 a failed operation or setup (printed).
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "bench_clock.h"
#include "../src/util/stats.h"   /* the stats page and its counters: the library's one table */

#define MAGIC 0x636f7331u        /* "cos1": side-channel version */
#define RECVS 4                  /* receives the verbs sides keep posted */
#define MAX_THREADS 64

enum transport { T_TCP, T_VERBS };
static const char *const transport_name[] = { "tcp", "verbs" };

static struct {
	enum transport transport;
	int port;
	const char *port_file, *host;    /* host NULL: the server */
	uint32_t size;
	uint32_t iters, warmup, reads;
	bool spin;
} opt = { .transport = T_VERBS, .port = 18540, .size = 65536, .iters = 2000, .warmup = 100 };

__attribute__((format(printf, 1, 2), noreturn))
static void fail(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "costs_peer[%s]: FAIL: ", opt.host ? "client" : "server");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* ------------------------------------------------------------ snapshots -- */

/* The application's own system calls and the bytes it moved through the
 * kernel (tcp): counted where they are made, the data path only. */
static uint64_t own_syscalls, own_tx_bytes, own_rx_bytes;

static const volatile struct uroce_stats_page *stats_page;
/* the counters' names, from the library's one table (counters.h) */
static const char *const counter_name[UC__COUNT] = {
#define X(n, d) #n,
	UROCE_COUNTERS(X)
#undef X
};

/* This process's stats page, if uroce is preloaded (stats.c names it
 * uroce.<pid>, or uroce.<pid>.<hex> when that name was taken). */
static void stats_find(void)
{
	char prefix[32];
	int pl = snprintf(prefix, sizeof(prefix), "uroce.%d", (int)getpid());
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	while (d && !stats_page && (e = readdir(d))) {
		if (strncmp(e->d_name, prefix, (size_t)pl) || (e->d_name[pl] && e->d_name[pl] != '.'))
			continue;
		char path[300];
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) || (size_t)st.st_size < sizeof(struct uroce_stats_page)) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		const struct uroce_stats_page *p =
			mmap(NULL, sizeof(*p), PROT_READ, MAP_SHARED, fd, 0);
		close(fd);
		if (p == MAP_FAILED)
			continue;
		if (p->magic == UROCE_STATS_MAGIC && p->version == UROCE_STATS_VERSION && p->pid == (uint32_t)getpid())
			stats_page = p;
		else
			munmap((void *)p, sizeof(*p));
	}
	if (d)
		closedir(d);
}

struct instr {
	int fd[MAX_THREADS];
	bool uroce[MAX_THREADS];
	int n;
	bool user_only;
	char note[160];          /* why there are none, or what they leave out */
};

/* the threads' CPU times at a snapshot, by thread: a thread that ended
 * during a phase takes its time with it (not counted), one that began in
 * it counts from 0 */
struct thread_cpu {
	int n;
	pid_t tid[MAX_THREADS];
	uint64_t ns[MAX_THREADS];
	uint64_t vcsw[MAX_THREADS], ivcsw[MAX_THREADS];   /* context switches: it slept; it was preempted */
	bool uroce[MAX_THREADS];
};

struct snap {
	uint64_t t_ns;
	struct thread_cpu cpu;
	uint64_t sys, tx, rx;
	uint64_t ctr[UC__COUNT];
	uint64_t instr_app, instr_uroce;
};

static bool read_small(const char *path, char *buf, size_t room)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, room - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	return true;
}

/* uroce's threads are named (exec/engine.c, cm/engine.c) */
static bool thread_is_uroce(const char *tid)
{
	char path[300], comm[32];
	snprintf(path, sizeof(path), "/proc/self/task/%s/comm", tid);
	return read_small(path, comm, sizeof(comm)) && !strncmp(comm, "uroce-", 6);
}

/* A thread's CPU-time clock by its tid (the kernel's encoding of a
 * per-thread CPUCLOCK_SCHED clock, as pthread_getcpuclockid makes it):
 * unlike schedstat, which lags by the running slice, it counts up to now. */
static clockid_t thread_clock(pid_t tid)
{
	return (clockid_t)((~(unsigned)tid << 3) | 6u);
}

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;
	if (clock_gettime(c, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* a thread's context switches (/proc/self/task/<tid>/status): voluntary
 * (it slept: in epoll, read, a contended lock's futex...) and not */
static void csw_read(struct thread_cpu *c, int i)
{
	char path[64], buf[2048];
	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)c->tid[i]);
	c->vcsw[i] = c->ivcsw[i] = 0;
	if (!read_small(path, buf, sizeof(buf)))
		return;
	const char *v = strstr(buf, "\nvoluntary_ctxt_switches:"), *nv = strstr(buf, "nonvoluntary_ctxt_switches:");
	if (v)
		c->vcsw[i] = strtoull(v + 26, NULL, 10);
	if (nv)
		c->ivcsw[i] = strtoull(nv + 27, NULL, 10);
}

/* each other thread's time on a CPU, in ns (the calling thread's:
 * snap_take) */
static void cpu_read(struct thread_cpu *c)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	pid_t self = (pid_t)syscall(SYS_gettid);
	while (d && (e = readdir(d)) && c->n < MAX_THREADS) {
		pid_t tid = (pid_t)atoi(e->d_name);
		if (e->d_name[0] == '.' || tid == self)
			continue;
		uint64_t ns = clock_ns(thread_clock(tid));
		if (!ns)
			continue;  /* it ended */
		c->tid[c->n] = tid;
		c->uroce[c->n] = thread_is_uroce(e->d_name);
		c->ns[c->n] = ns;
		csw_read(c, c->n++);
	}
	if (d)
		closedir(d);
}

static void cpu_self(struct thread_cpu *c)
{
	if (c->n < MAX_THREADS) {
		c->tid[c->n] = (pid_t)syscall(SYS_gettid);
		c->uroce[c->n] = false;
		c->ns[c->n] = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		csw_read(c, c->n++);
	}
}

/* What the threads spent between a and b, the application's and uroce's:
 * [0] CPU ns, [1] voluntary and [2] involuntary context switches */
static void cpu_between(const struct thread_cpu *a, const struct thread_cpu *b, uint64_t app[3], uint64_t uroce[3])
{
	memset(app, 0, 3 * sizeof(*app));
	memset(uroce, 0, 3 * sizeof(*uroce));
	for (int i = 0; i < b->n; i++) {
		uint64_t from[3] = { 0, 0, 0 };
		for (int j = 0; j < a->n; j++)
			if (a->tid[j] == b->tid[i])
				from[0] = a->ns[j], from[1] = a->vcsw[j], from[2] = a->ivcsw[j];
		uint64_t to[3] = { b->ns[i], b->vcsw[i], b->ivcsw[i] }, *sum = b->uroce[i] ? uroce : app;
		for (int k = 0; k < 3; k++)
			if (to[k] > from[k])
				sum[k] += to[k] - from[k];
	}
}

static int perf_open(pid_t tid, bool user_only)
{
	struct perf_event_attr a = {
		.type = PERF_TYPE_HARDWARE, .size = sizeof(a), .config = PERF_COUNT_HW_INSTRUCTIONS,
		.disabled = 0, .exclude_hv = 1, .exclude_kernel = user_only,
	};
	return (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/* One instruction counter per thread, kernel included if permitted
 * (perf_event_paranoid <= 1), else user space only, else none. */
static void instr_open(struct instr *in)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	in->n = 0;
	in->note[0] = 0;
	in->user_only = false;
	while (d && (e = readdir(d)) && in->n < MAX_THREADS) {
		if (e->d_name[0] == '.')
			continue;
		pid_t tid = (pid_t)atoi(e->d_name);
		int fd = perf_open(tid, in->user_only);
		if (fd < 0 && !in->user_only && (errno == EACCES || errno == EPERM)) {
			in->user_only = true;
			fd = perf_open(tid, true);
		}
		if (fd < 0) {
			snprintf(in->note, sizeof(in->note),
				 "no hardware instruction counter here (perf_event_open: %s; a VM often hides them)",
				 strerror(errno));
			for (int i = 0; i < in->n; i++)
				close(in->fd[i]);
			in->n = -1;
			break;
		}
		in->uroce[in->n] = thread_is_uroce(e->d_name);
		in->fd[in->n++] = fd;
	}
	if (d)
		closedir(d);
	if (in->n >= 0 && in->user_only)
		snprintf(in->note, sizeof(in->note), "user-space instructions only (perf_event_paranoid > 1)");
}

static void instr_read(struct instr *in, uint64_t *app, uint64_t *uroce)
{
	*app = *uroce = 0;
	for (int i = 0; i < in->n; i++) {
		uint64_t v = 0;
		if (read(in->fd[i], &v, sizeof(v)) == sizeof(v))
			*(in->uroce[i] ? uroce : app) += v;
	}
}

static void instr_close(struct instr *in)
{
	for (int i = 0; i < in->n; i++)
		close(in->fd[i]);
	if (in->n > 0)
		in->n = 0;
}

/* A phase's start (end = false) or end: the calling thread's CPU time is
 * read last at the start and first at the end, so that the snapshot's own
 * work is not counted to the phase (a target that runs nothing in a READ
 * phase is charged its two side-channel calls and its wake-up only). */
static void snap_take(struct snap *s, struct instr *in, bool end)
{
	s->cpu.n = 0;
	if (end) {
		cpu_self(&s->cpu);
		cpu_read(&s->cpu);
	}
	s->t_ns = now_ns();
	s->sys = own_syscalls, s->tx = own_tx_bytes, s->rx = own_rx_bytes;
	if (stats_page)
		for (int i = 0; i < UC__COUNT; i++)
			s->ctr[i] = __atomic_load_n(&stats_page->counters[i], __ATOMIC_RELAXED);
	if (in->n > 0)
		instr_read(in, &s->instr_app, &s->instr_uroce);
	if (!end) {
		cpu_read(&s->cpu);
		cpu_self(&s->cpu);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* one JSON line for the phase between a and b */
static void report(const char *phase, uint32_t n, const struct snap *a, const struct snap *b, const struct instr *in,
		   uint64_t *lat, uint32_t nlat)
{
	uint64_t app[3], uroce[3];
	cpu_between(&a->cpu, &b->cpu, app, uroce);
	printf("{\"role\":\"%s\",\"phase\":\"%s\",\"transport\":\"%s\",\"wait\":\"%s\",\"size\":%u,\"n\":%u,"
	       "\"wall_ns\":%" PRIu64 ",\"app_cpu_ns\":%" PRIu64 ",\"uroce_cpu_ns\":%" PRIu64
	       ",\"own_syscalls\":%" PRIu64 ",\"own_tx_bytes\":%" PRIu64 ",\"own_rx_bytes\":%" PRIu64,
	       opt.host ? "client" : "server", phase, transport_name[opt.transport], opt.spin ? "spin" : "block",
	       opt.size, n, b->t_ns - a->t_ns, app[0], uroce[0],
	       b->sys - a->sys, b->tx - a->tx, b->rx - a->rx);
	printf(",\"app_vcsw\":%" PRIu64 ",\"app_ivcsw\":%" PRIu64 ",\"uroce_vcsw\":%" PRIu64
	       ",\"uroce_ivcsw\":%" PRIu64, app[1], app[2], uroce[1], uroce[2]);
	if (stats_page) {
		printf(",\"counters\":{");
		bool first = true;
		for (int i = 0; i < UC__COUNT; i++)
			if (b->ctr[i] != a->ctr[i]) {
				printf("%s\"%s\":%" PRIu64, first ? "" : ",", counter_name[i], b->ctr[i] - a->ctr[i]);
				first = false;
			}
		printf("}");
	} else {
		printf(",\"counters\":null");
	}
	if (in->n > 0)
		printf(",\"instr_app\":%" PRIu64 ",\"instr_uroce\":%" PRIu64, b->instr_app - a->instr_app,
		       b->instr_uroce - a->instr_uroce);
	else
		printf(",\"instr_app\":null,\"instr_uroce\":null");
	printf(",\"instr_note\":\"%s\"", in->note);
	if (nlat) {
		qsort(lat, nlat, sizeof(*lat), cmp_u64);
		printf(",\"lat_ns\":[%" PRIu64 ",%" PRIu64 "]", lat[nlat / 2], lat[(size_t)nlat * 99 / 100]);
	}
	printf("}\n");
	fflush(stdout);
}

/* --------------------------------------------------------- side channel -- */

/* all of buf, or the run fails; each call counted when `counted` (the
 * tcp transport's data path) */
static void xfer(int fd, void *buf, size_t n, bool out, bool counted)
{
	char *p = buf;
	/* spin: a busy-polling receiver (as bench/tcp_pingpong's); sends block */
	int flags = counted && opt.spin && !out ? MSG_DONTWAIT : 0;
	while (n) {
		ssize_t k = out ? send(fd, p, n, flags | MSG_NOSIGNAL) : recv(fd, p, n, flags | MSG_WAITALL);
		if (counted)
			own_syscalls++;
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (k <= 0)
			fail("%s: %s", out ? "send" : "recv", k ? strerror(errno) : "closed by the peer");
		if (counted)
			*(out ? &own_tx_bytes : &own_rx_bytes) += (uint64_t)k;
		p += k;
		n -= (size_t)k;
	}
}

static void put(int fd, const void *buf, size_t n) { xfer(fd, (void *)buf, n, true, false); }
static void get(int fd, void *buf, size_t n) { xfer(fd, buf, n, false, false); }

/* both sides reach this point before either goes on */
static void barrier(int fd)
{
	char c = 'B';
	put(fd, &c, 1);
	get(fd, &c, 1);
}

/* A measured phase begins: the server takes its snapshot, then lets the
 * client take its own and start.  Nothing of the phase reaches the server
 * before its snapshot (its engine counts what it receives whenever it
 * comes); the server ends its phase only once its last message completed. */
static void phase_start(int fd, struct snap *a, struct instr *in)
{
	char c = 'G';
	if (opt.host) {
		get(fd, &c, 1);
		instr_open(in);
		snap_take(a, in, false);
	} else {
		instr_open(in);
		snap_take(a, in, false);
		put(fd, &c, 1);
	}
}

static int side_channel(void)
{
	int one = 1, fd;
	if (!opt.host) {
		int ls = socket(AF_INET6, SOCK_STREAM, 0), zero = 0;
		struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)opt.port),
					  .sin6_addr = in6addr_any };
		socklen_t al = sizeof(a);
		if (ls < 0)
			fail("socket: %s", strerror(errno));
		setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1) ||
		    getsockname(ls, (struct sockaddr *)&a, &al))
			fail("listen on TCP port %d: %s", opt.port, strerror(errno));
		if (opt.port_file) {
			char tmp[4096];
			snprintf(tmp, sizeof(tmp), "%s.tmp", opt.port_file);
			FILE *f = fopen(tmp, "w");
			if (!f || fprintf(f, "%u\n", ntohs(a.sin6_port)) < 0 || fclose(f) || rename(tmp, opt.port_file))
				fail("writing %s: %s", opt.port_file, strerror(errno));
		}
		while ((fd = accept(ls, NULL, NULL)) < 0 && errno == EINTR)
			;
		if (fd < 0)
			fail("accept: %s", strerror(errno));
		close(ls);
	} else {
		char port[16];
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
		snprintf(port, sizeof(port), "%d", opt.port);
		int rc = getaddrinfo(opt.host, port, &hints, &res);
		if (rc)
			fail("%s: %s", opt.host, gai_strerror(rc));
		fd = -1;
		for (uint64_t give_up = now_ns() + 20000000000ull; fd < 0; usleep(50000)) {
			for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
				fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
				if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen)) {
					close(fd);
					fd = -1;
				}
			}
			if (fd < 0 && now_ns() > give_up)
				fail("no server at %s:%d", opt.host, opt.port);
		}
		freeaddrinfo(res);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* the client's parameters, in network order */
struct wire_params {
	uint32_t magic, size, iters, warmup, spin, reads;
};

static void trade_params(int fd)
{
	struct wire_params w;
	if (opt.host) {
		w = (struct wire_params){ htonl(MAGIC), htonl(opt.size), htonl(opt.iters), htonl(opt.warmup),
					  htonl(opt.spin), htonl(opt.reads) };
		put(fd, &w, sizeof(w));
	} else {
		get(fd, &w, sizeof(w));
		if (ntohl(w.magic) != MAGIC)
			fail("the client speaks another side-channel version");
		opt.size = ntohl(w.size), opt.iters = ntohl(w.iters), opt.warmup = ntohl(w.warmup);
		opt.spin = ntohl(w.spin) != 0;
		opt.reads = ntohl(w.reads);
	}
}

/* ------------------------------------------------------------- pingpong -- */

/* One round trip: the client sends and waits for the answer, the server
 * waits and answers.  drain (optional): the server's end of a run of n. */
typedef void round_fn(void *side);
typedef void drain_fn(void *side, uint32_t n);

/* --warmup rounds, then the measured --iters (the client times each) */
static void pingpong(int fd, round_fn *round, drain_fn *drain, void *side, uint64_t *lat)
{
	struct snap a, b;
	struct instr in;
	for (uint32_t phase = 0; phase < 2; phase++) {
		uint32_t n = phase ? opt.iters : opt.warmup;
		if (phase)
			phase_start(fd, &a, &in);
		else
			barrier(fd);
		for (uint32_t i = 0; i < n; i++) {
			uint64_t t0 = now_ns();
			round(side);
			if (phase && opt.host)
				lat[i] = (now_ns() - t0) / 2;
		}
		if (drain && !opt.host)
			drain(side, n);
		if (phase) {
			snap_take(&b, &in, true);
			report("pingpong", opt.iters, &a, &b, &in, lat, opt.host ? opt.iters : 0);
			instr_close(&in);
		}
	}
}

/* ------------------------------------------------------------------ tcp -- */

struct tcp_side {
	int fd;
	uint8_t *buf;
};

static void tcp_round(void *side)
{
	struct tcp_side *t = side;
	xfer(t->fd, t->buf, opt.size, opt.host != NULL, true);
	xfer(t->fd, t->buf, opt.size, opt.host == NULL, true);
}

static void tcp_run(int fd)
{
	uint8_t *buf = malloc(opt.size);
	uint64_t *lat = calloc(opt.iters > opt.reads ? opt.iters : opt.reads, sizeof(*lat));
	struct snap a, b;
	struct instr in;
	if (!buf || !lat)
		fail("out of memory");
	memset(buf, 0x5a, opt.size);

	struct tcp_side t = { fd, buf };
	pingpong(fd, tcp_round, NULL, &t, lat);

	/* read: an 8-byte request (1: send SIZE bytes, 0: done) the server's
	 * application must receive and answer */
	phase_start(fd, &a, &in);
	uint64_t req;
	if (opt.host) {
		for (uint32_t i = 0; i < opt.reads; i++) {
			uint64_t t0 = now_ns();
			req = 1;
			xfer(fd, &req, sizeof(req), true, true);
			xfer(fd, buf, opt.size, false, true);
			lat[i] = now_ns() - t0;
		}
		snap_take(&b, &in, true);
		req = 0;
		put(fd, &req, sizeof(req));
	} else {
		for (;;) {
			xfer(fd, &req, sizeof(req), false, true);
			if (!req)
				break;
			xfer(fd, buf, opt.size, true, true);
		}
		snap_take(&b, &in, true);
	}
	report("read", opt.reads, &a, &b, &in, lat, opt.host ? opt.reads : 0);
	instr_close(&in);
	free(buf);
	free(lat);
}

/* ---------------------------------------------------------------- verbs -- */

struct wire_qp {
	uint32_t magic, qpn, psn, rkey;
	uint64_t addr;
	uint8_t gid[16];
};

struct verbs {
	struct ibv_context *ctx;
	struct ibv_comp_channel *ch;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;            /* [0, size): sent and read from; [size, 2 size): received and read into */
	union ibv_gid gid;
	enum ibv_mtu mtu;
	uint32_t psn;
	uint32_t rkey;           /* the peer's */
	uint64_t raddr;
	uint32_t recvs_done, sends_done;
};

static void post_recv(struct verbs *v)
{
	struct ibv_sge sge = { (uintptr_t)(v->buf + opt.size), opt.size, v->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	int rc = ibv_post_recv(v->qp, &wr, &bad);
	if (rc)
		fail("ibv_post_recv: %s", strerror(rc));
}

static void post_send(struct verbs *v, enum ibv_wr_opcode op)
{
	bool read = op == IBV_WR_RDMA_READ;
	struct ibv_sge sge = { (uintptr_t)(v->buf + (read ? opt.size : 0)), opt.size, v->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (read) {
		wr.wr.rdma.remote_addr = v->raddr;
		wr.wr.rdma.rkey = v->rkey;
	}
	int rc = ibv_post_send(v->qp, &wr, &bad);
	if (rc)
		fail("ibv_post_send: %s", strerror(rc));
}

/* One poll of the CQ: completions counted (a receive's replaced); how many */
static int poll_once(struct verbs *v)
{
	struct ibv_wc wc[4];
	int n = ibv_poll_cq(v->cq, 4, wc);
	if (n < 0)
		fail("ibv_poll_cq: %d", n);
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			fail("completion %s (%s)", ibv_wc_status_str(wc[i].status),
			     wc[i].wr_id == 1 ? "receive" : "send or READ");
		if (wc[i].wr_id == 1) {
			v->recvs_done++;
			post_recv(v);
		} else {
			v->sends_done++;
		}
	}
	return n;
}

/* until `recvs` receives and `sends` sends have completed since the last
 * call: polls, and (--wait=block) sleeps on the completion channel */
static void reap(struct verbs *v, uint32_t recvs, uint32_t sends)
{
	while (v->recvs_done < recvs || v->sends_done < sends) {
		if (poll_once(v) || opt.spin)
			continue;
		/* armed, then polled again: what came before arming is no event */
		if (ibv_req_notify_cq(v->cq, 0))
			fail("ibv_req_notify_cq: %s", strerror(errno));
		if (poll_once(v))
			continue;
		struct ibv_cq *cq;
		void *cq_ctx;
		if (ibv_get_cq_event(v->ch, &cq, &cq_ctx))
			fail("ibv_get_cq_event: %s", strerror(errno));
		ibv_ack_cq_events(cq, 1);
	}
	v->recvs_done -= recvs;
	v->sends_done -= sends;
}

static void verbs_round(void *side)
{
	struct verbs *v = side;
	if (opt.host) {
		post_send(v, IBV_WR_SEND);
		reap(v, 1, 1);
	} else {
		reap(v, 1, 0);
		post_send(v, IBV_WR_SEND);
	}
}

/* the server's answers complete once acknowledged: the last may still wait */
static void verbs_drain(void *side, uint32_t n)
{
	reap(side, 0, n);
}

static void verbs_open(struct verbs *v)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		fail("no RDMA device (run it under `uroce run --`)");
	v->ctx = ibv_open_device(list[0]);
	if (!v->ctx)
		fail("ibv_open_device: %s", strerror(errno));
	ibv_free_device_list(list);
	struct ibv_port_attr pa;
	if (ibv_query_port(v->ctx, 1, &pa) || ibv_query_gid(v->ctx, 1, 0, &v->gid))
		fail("ibv_query_port/gid: %s", strerror(errno));
	v->mtu = pa.active_mtu;
	v->ch = ibv_create_comp_channel(v->ctx);
	v->pd = ibv_alloc_pd(v->ctx);
	v->cq = v->ch ? ibv_create_cq(v->ctx, 64, NULL, v->ch, 0) : NULL;
	struct ibv_qp_init_attr ia = {
		.send_cq = v->cq, .recv_cq = v->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = RECVS, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	v->qp = v->pd && v->cq ? ibv_create_qp(v->pd, &ia) : NULL;
	if (!v->qp)
		fail("PD/CQ/QP creation: %s", strerror(errno));
	if (posix_memalign((void **)&v->buf, 4096, 2 * (size_t)opt.size))
		fail("out of memory");
	memset(v->buf, 0x5a, 2 * (size_t)opt.size);
	v->mr = ibv_reg_mr(v->pd, v->buf, 2 * (size_t)opt.size,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	if (!v->mr)
		fail("ibv_reg_mr: %s", strerror(errno));
	v->psn = (uint32_t)((now_ns() ^ (uint64_t)getpid() * 2654435761u) & 0xffffff);
}

/* INIT -> RTR -> RTS toward the peer (the attributes ibv_rc_pingpong uses) */
static void verbs_connect(struct verbs *v, const struct wire_qp *peer)
{
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				    .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
						       IBV_ACCESS_REMOTE_WRITE };
	struct ibv_qp_attr rtr = {
		.qp_state = IBV_QPS_RTR, .path_mtu = v->mtu, .dest_qp_num = ntohl(peer->qpn),
		.rq_psn = ntohl(peer->psn), .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1, .grh = { .sgid_index = 0, .hop_limit = 64 } },
	};
	memcpy(rtr.ah_attr.grh.dgid.raw, peer->gid, 16);
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS, .sq_psn = v->psn, .timeout = 14, .retry_cnt = 7,
				   .rnr_retry = 7, .max_rd_atomic = 1 };
	int rc;
	if ((rc = ibv_modify_qp(v->qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) ||
	    (rc = ibv_modify_qp(v->qp, &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) ||
	    (rc = ibv_modify_qp(v->qp, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)))
		fail("ibv_modify_qp toward RTS: %s", strerror(rc));
	v->rkey = ntohl(peer->rkey);
	v->raddr = be64toh(peer->addr);
}

static void verbs_run(int fd)
{
	struct verbs v = { 0 };
	struct wire_qp me, peer;
	uint64_t *lat = calloc(opt.iters > opt.reads ? opt.iters : opt.reads, sizeof(*lat));
	struct snap a, b;
	struct instr in;

	if (!lat)
		fail("out of memory");
	verbs_open(&v);
	stats_find();
	me = (struct wire_qp){ htonl(MAGIC), htonl(v.qp->qp_num), htonl(v.psn), htonl(v.mr->rkey),
			       htobe64((uintptr_t)v.buf), { 0 } };
	memcpy(me.gid, v.gid.raw, 16);
	put(fd, &me, sizeof(me));
	get(fd, &peer, sizeof(peer));
	verbs_connect(&v, &peer);
	/* posted before the barrier: no SEND meets an empty queue (an RNR) */
	for (int i = 0; i < RECVS; i++)
		post_recv(&v);

	/* pingpong: SENDs into posted receives */
	pingpong(fd, verbs_round, verbs_drain, &v, lat);

	/* read: the server's application waits in read() for the client's
	 * "done" (two side-channel calls in the phase, counted); its memory is
	 * read meanwhile by its device alone */
	char c;
	if (opt.host) {
		phase_start(fd, &a, &in);
		for (uint32_t i = 0; i < opt.reads; i++) {
			uint64_t t0 = now_ns();
			post_send(&v, IBV_WR_RDMA_READ);
			reap(&v, 0, 1);
			lat[i] = now_ns() - t0;
		}
		snap_take(&b, &in, true);
		put(fd, "D", 1);
	} else {
		phase_start(fd, &a, &in);
		get(fd, &c, 1);
		own_syscalls += 2;   /* phase_start's "go" and this wait */
		snap_take(&b, &in, true);
	}
	report("read", opt.reads, &a, &b, &in, lat, opt.host ? opt.reads : 0);
	instr_close(&in);
	barrier(fd);
	ibv_destroy_qp(v.qp);
	ibv_dereg_mr(v.mr);
	ibv_destroy_cq(v.cq);
	ibv_destroy_comp_channel(v.ch);
	ibv_dealloc_pd(v.pd);
	ibv_close_device(v.ctx);
	free(v.buf);
	free(lat);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "transport", required_argument, NULL, 't' }, { "port", required_argument, NULL, 'p' },
		{ "port-file", required_argument, NULL, 'f' }, { "size", required_argument, NULL, 's' },
		{ "iters", required_argument, NULL, 'n' },     { "warmup", required_argument, NULL, 'w' },
		{ "wait", required_argument, NULL, 'W' },      { "reads", required_argument, NULL, 'r' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 't':
			if (!strcmp(optarg, "tcp"))
				opt.transport = T_TCP;
			else if (!strcmp(optarg, "verbs"))
				opt.transport = T_VERBS;
			else
				fail("--transport: tcp or verbs");
			break;
		case 'p': opt.port = atoi(optarg); break;
		case 'f': opt.port_file = optarg; break;
		case 's': opt.size = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'n': opt.iters = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'w': opt.warmup = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'r': opt.reads = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'W':
			if (strcmp(optarg, "block") && strcmp(optarg, "spin"))
				fail("--wait: block or spin");
			opt.spin = !strcmp(optarg, "spin");
			break;
		default:
			return 2;
		}
	}
	if (optind < argc)
		opt.host = argv[optind];
	if (!opt.reads)
		opt.reads = opt.iters;
	if (!opt.size || !opt.iters || opt.size > (1u << 30))
		fail("--size and --iters must be 1 or more (size at most 1 GiB)");
	int fd = side_channel();
	trade_params(fd);
	if (opt.transport == T_TCP)
		tcp_run(fd);
	else
		verbs_run(fd);
	close(fd);
	return 0;
}
