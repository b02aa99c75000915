/*
 * uroce-netem: user-space delay / jitter / reorder impairment for NFQUEUE.
 *
 * The kernel used for uroce testing has no sch_netem, so packet delay and
 * reordering are emulated here: an iptables rule sends the packets to
 * NFQUEUE <n> (e.g. "-p udp --dport 4791 -j NFQUEUE --queue-num 4791
 * --queue-bypass"), this program binds that queue, keeps every packet's
 * verdict pending until the packet is due, then issues NF_ACCEPT.  Verdicts
 * are issued in due-time order, which is not packet-id order once jitter or
 * reordering is in effect; the kernel accepts verdicts for any outstanding id.
 *
 *   due = arrival + delay + uniform(0..jitter) [+ reorder_gap for reorder_pct%]
 *
 * Only metadata is copied to user space (NFQNL_COPY_META), the payload is
 * never touched.  The queue is configured fail-open: if the kernel queue is
 * full or the netlink socket overflows the kernel accepts the packet instead
 * of dropping it, and if more than --max-held packets are pending, new ones
 * are accepted immediately ("overflow").  Nothing can deadlock: on exit all
 * held packets are released before the queue is unbound.
 *
 * SIGTERM / SIGINT: release everything, print counters to stderr, exit 0.
 * SIGUSR1: print counters to stderr and continue.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netlink.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#ifndef SOL_NETLINK
#define SOL_NETLINK 270
#endif

#define PROG "uroce-netem"

struct held {
	uint64_t due_ns;
	uint64_t seq;  /* arrival order, tie-break so equal due times stay FIFO */
	uint32_t id;   /* kernel packet id */
};

struct counters {
	uint64_t seen;           /* packets received from the queue */
	uint64_t delayed;        /* packets held back for a non-zero time */
	uint64_t reordered;      /* packets given the extra reorder gap */
	uint64_t passed;         /* zero delay -> accepted immediately */
	uint64_t overflow;       /* --max-held reached -> accepted immediately */
	uint64_t released;       /* held packets accepted after their delay */
	uint64_t out_of_order;   /* verdicts issued for an id lower than a previous one */
	uint64_t verdict_errors; /* nfq_set_verdict failed (packet gone?) */
	uint64_t recv_errors;    /* netlink recv errors (ENOBUFS etc.) */
	uint64_t max_held_seen;  /* high-water mark of pending packets */
};

struct opts {
	unsigned queue;
	uint64_t delay_us;
	uint64_t jitter_us;
	double reorder_pct;
	uint64_t reorder_gap_us;
	uint64_t seed;
	bool seed_set;
	uint32_t max_held;
	uint32_t queue_maxlen;   /* 0 = derive from max_held */
	int rcvbuf;
	bool verbose;
};

static struct opts g_opt = {
	.queue = 0,
	.delay_us = 0,
	.jitter_us = 0,
	.reorder_pct = 0.0,
	.reorder_gap_us = 2000,
	.seed = 0,
	.seed_set = false,
	.max_held = 16384,
	.queue_maxlen = 0,
	.rcvbuf = 8 << 20,
	.verbose = false,
};

static struct counters g_cnt;
static struct nfq_q_handle *g_qh;

static struct held *g_heap;
static uint32_t g_nheld;
static uint64_t g_seq;
static bool g_have_released;
static uint32_t g_max_released_id;

static volatile sig_atomic_t g_stop;
static volatile sig_atomic_t g_dump;

/* ------------------------------------------------------------------ rng -- */

static uint64_t g_rng;

static uint64_t rng_next(void)
{
	/* splitmix64: tiny, good enough, reproducible with --seed */
	uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* uniform in [0, n] */
static uint64_t rng_upto(uint64_t n)
{
	if (n == 0)
		return 0;
	if (n == UINT64_MAX)
		return rng_next();
	return rng_next() % (n + 1);
}

/* true with probability pct/100 */
static bool rng_pct(double pct)
{
	if (pct <= 0.0)
		return false;
	if (pct >= 100.0)
		return true;
	/* 53 random bits -> [0,1) */
	double u = (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
	return u * 100.0 < pct;
}

/* ----------------------------------------------------------------- time -- */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ----------------------------------------------------------------- heap -- */

static bool held_before(const struct held *a, const struct held *b)
{
	if (a->due_ns != b->due_ns)
		return a->due_ns < b->due_ns;
	return a->seq < b->seq;
}

static void heap_push(struct held h)
{
	uint32_t i = g_nheld++;
	while (i > 0) {
		uint32_t p = (i - 1) / 2;
		if (!held_before(&h, &g_heap[p]))
			break;
		g_heap[i] = g_heap[p];
		i = p;
	}
	g_heap[i] = h;
}

static struct held heap_pop(void)
{
	struct held top = g_heap[0];
	struct held last = g_heap[--g_nheld];
	uint32_t i = 0;
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, m = i;
		const struct held *mv = &last;
		if (l < g_nheld && held_before(&g_heap[l], mv)) {
			m = l;
			mv = &g_heap[l];
		}
		if (r < g_nheld && held_before(&g_heap[r], mv))
			m = r;
		if (m == i)
			break;
		g_heap[i] = g_heap[m];
		i = m;
	}
	if (g_nheld > 0)
		g_heap[i] = last;
	return top;
}

/* -------------------------------------------------------------- verdicts -- */

static void accept_id(uint32_t id)
{
	if (g_have_released && id < g_max_released_id)
		g_cnt.out_of_order++;
	if (!g_have_released || id > g_max_released_id)
		g_max_released_id = id;
	g_have_released = true;

	if (nfq_set_verdict(g_qh, id, NF_ACCEPT, 0, NULL) < 0) {
		g_cnt.verdict_errors++;
		if (g_opt.verbose)
			fprintf(stderr, PROG ": verdict for id %" PRIu32 " failed: %s\n",
				id, strerror(errno));
	}
}

static void release_due(uint64_t now)
{
	while (g_nheld > 0 && g_heap[0].due_ns <= now) {
		struct held h = heap_pop();
		accept_id(h.id);
		g_cnt.released++;
	}
}

static void release_all(void)
{
	while (g_nheld > 0) {
		struct held h = heap_pop();
		accept_id(h.id);
		g_cnt.released++;
	}
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg,
		     struct nfq_data *nfa, void *data)
{
	(void)qh;
	(void)msg;
	(void)data;

	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
	if (!ph)
		return 0;
	uint32_t id = ntohl(ph->packet_id);
	g_cnt.seen++;

	uint64_t extra_us = g_opt.delay_us + rng_upto(g_opt.jitter_us);
	bool reorder = rng_pct(g_opt.reorder_pct);
	if (reorder)
		extra_us += g_opt.reorder_gap_us;

	if (extra_us == 0) {
		g_cnt.passed++;
		accept_id(id);
		return 0;
	}
	if (g_nheld >= g_opt.max_held) {
		g_cnt.overflow++;
		accept_id(id);
		return 0;
	}

	struct held h = {
		.due_ns = now_ns() + extra_us * 1000ULL,
		.seq = g_seq++,
		.id = id,
	};
	heap_push(h);
	g_cnt.delayed++;
	if (reorder)
		g_cnt.reordered++;
	if (g_nheld > g_cnt.max_held_seen)
		g_cnt.max_held_seen = g_nheld;
	return 0;
}

/* --------------------------------------------------------------- output -- */

static void print_counters(const char *why)
{
	fprintf(stderr,
		PROG ": %s queue=%u seen=%" PRIu64 " delayed=%" PRIu64
		" reordered=%" PRIu64 " passed=%" PRIu64 " overflow=%" PRIu64
		" released=%" PRIu64 " out_of_order=%" PRIu64
		" verdict_errors=%" PRIu64 " recv_errors=%" PRIu64
		" held_now=%" PRIu32 " held_max=%" PRIu64 "\n",
		why, g_opt.queue, g_cnt.seen, g_cnt.delayed, g_cnt.reordered,
		g_cnt.passed, g_cnt.overflow, g_cnt.released, g_cnt.out_of_order,
		g_cnt.verdict_errors, g_cnt.recv_errors, g_nheld,
		g_cnt.max_held_seen);
}

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		g_dump = 1;
	else
		g_stop = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --queue N [options]\n"
		"  -q, --queue N           NFQUEUE number to bind (0..65535, required)\n"
		"  -d, --delay-us U        fixed delay added to every packet (default 0)\n"
		"  -j, --jitter-us J       extra uniform delay 0..J per packet (reorders)\n"
		"  -r, --reorder-pct P     percent of packets held an extra --reorder-gap-us\n"
		"  -g, --reorder-gap-us G  extra hold for reordered packets (default 2000)\n"
		"  -s, --seed S            RNG seed (default: time ^ pid, printed at start)\n"
		"  -m, --max-held N        max packets pending at once; beyond that packets\n"
		"                          pass undelayed (default 16384)\n"
		"  -l, --queue-maxlen N    kernel queue length (default max-held + 1024);\n"
		"                          the queue is fail-open when full\n"
		"  -b, --rcvbuf BYTES      netlink receive buffer (default 8 MiB); when it\n"
		"                          overflows the kernel accepts packets undelayed\n"
		"  -v, --verbose           log configuration and errors\n"
		"  -h, --help\n"
		"SIGTERM/SIGINT: release held packets, print counters, exit 0.\n"
		"SIGUSR1: print counters.\n");
}

static bool parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	if (!s || !*s || *s == '-')
		return false;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end || v > max)
		return false;
	*out = v;
	return true;
}

static bool parse_pct(const char *s, double *out)
{
	char *end;
	if (!s || !*s)
		return false;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || !(v >= 0.0 && v <= 100.0))
		return false;
	*out = v;
	return true;
}

static void bad_arg(const char *opt, const char *val)
{
	fprintf(stderr, PROG ": invalid value for %s: '%s' (see --help)\n",
		opt, val ? val : "");
	exit(2);
}

static void parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "queue", required_argument, NULL, 'q' },
		{ "delay-us", required_argument, NULL, 'd' },
		{ "jitter-us", required_argument, NULL, 'j' },
		{ "reorder-pct", required_argument, NULL, 'r' },
		{ "reorder-gap-us", required_argument, NULL, 'g' },
		{ "seed", required_argument, NULL, 's' },
		{ "max-held", required_argument, NULL, 'm' },
		{ "queue-maxlen", required_argument, NULL, 'l' },
		{ "rcvbuf", required_argument, NULL, 'b' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	/* one hour: keeps due-time arithmetic far from overflow */
	const uint64_t max_us = 3600ULL * 1000000ULL;
	bool have_queue = false;
	uint64_t v;
	int c;

	while ((c = getopt_long(argc, argv, "q:d:j:r:g:s:m:l:b:vh", lo, NULL)) != -1) {
		switch (c) {
		case 'q':
			if (!parse_u64(optarg, 65535, &v))
				bad_arg("--queue", optarg);
			g_opt.queue = (unsigned)v;
			have_queue = true;
			break;
		case 'd':
			if (!parse_u64(optarg, max_us, &g_opt.delay_us))
				bad_arg("--delay-us", optarg);
			break;
		case 'j':
			if (!parse_u64(optarg, max_us, &g_opt.jitter_us))
				bad_arg("--jitter-us", optarg);
			break;
		case 'r':
			if (!parse_pct(optarg, &g_opt.reorder_pct))
				bad_arg("--reorder-pct", optarg);
			break;
		case 'g':
			if (!parse_u64(optarg, max_us, &g_opt.reorder_gap_us))
				bad_arg("--reorder-gap-us", optarg);
			break;
		case 's':
			if (!parse_u64(optarg, UINT64_MAX, &g_opt.seed))
				bad_arg("--seed", optarg);
			g_opt.seed_set = true;
			break;
		case 'm':
			if (!parse_u64(optarg, 1u << 24, &v) || v == 0)
				bad_arg("--max-held", optarg);
			g_opt.max_held = (uint32_t)v;
			break;
		case 'l':
			if (!parse_u64(optarg, UINT32_MAX, &v) || v == 0)
				bad_arg("--queue-maxlen", optarg);
			g_opt.queue_maxlen = (uint32_t)v;
			break;
		case 'b':
			if (!parse_u64(optarg, INT_MAX, &v) || v < 65536)
				bad_arg("--rcvbuf", optarg);
			g_opt.rcvbuf = (int)v;
			break;
		case 'v':
			g_opt.verbose = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			fprintf(stderr, PROG ": see --help\n");
			exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s' (see --help)\n",
			argv[optind]);
		exit(2);
	}
	if (!have_queue) {
		fprintf(stderr, PROG ": --queue is required (see --help)\n");
		exit(2);
	}
	if (g_opt.queue_maxlen == 0)
		g_opt.queue_maxlen = g_opt.max_held + 1024u;
}

/* ----------------------------------------------------------------- main -- */

int main(int argc, char **argv)
{
	parse_args(argc, argv);

	if (!g_opt.seed_set)
		g_opt.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ now_ns();
	g_rng = g_opt.seed;

	g_heap = calloc(g_opt.max_held, sizeof(*g_heap));
	if (!g_heap) {
		fprintf(stderr, PROG ": out of memory\n");
		return 1;
	}

	/* Signals are blocked except while waiting in ppoll(): no lost wakeups. */
	sigset_t block, waitmask;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGUSR1);
	sigprocmask(SIG_BLOCK, &block, &waitmask);
	sigdelset(&waitmask, SIGTERM);
	sigdelset(&waitmask, SIGINT);
	sigdelset(&waitmask, SIGUSR1);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* Tighter timer wakeups than the default 50us slack. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);

	struct nfq_handle *h = nfq_open();
	if (!h) {
		fprintf(stderr, PROG ": nfq_open failed: %s (need CAP_NET_ADMIN)\n",
			strerror(errno));
		return 1;
	}
	g_qh = nfq_create_queue(h, (uint16_t)g_opt.queue, on_packet, NULL);
	if (!g_qh) {
		fprintf(stderr,
			PROG ": cannot bind NFQUEUE %u: %s (already bound by another "
			"process in this network namespace?)\n",
			g_opt.queue, strerror(errno));
		nfq_close(h);
		return 1;
	}
	if (nfq_set_mode(g_qh, NFQNL_COPY_META, 0) < 0) {
		fprintf(stderr, PROG ": nfq_set_mode failed: %s\n", strerror(errno));
		goto fail;
	}
	if (nfq_set_queue_maxlen(g_qh, g_opt.queue_maxlen) < 0) {
		fprintf(stderr, PROG ": nfq_set_queue_maxlen failed: %s\n", strerror(errno));
		goto fail;
	}
	/* FAIL_OPEN: accept rather than drop when the queue or socket is full.
	 * GSO: do not segment GSO packets just to queue them (we copy no payload). */
	uint32_t flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO;
	if (nfq_set_queue_flags(g_qh, flags, flags) < 0) {
		fprintf(stderr, PROG ": nfq_set_queue_flags(FAIL_OPEN|GSO) failed: %s\n",
			strerror(errno));
		goto fail;
	}

	int fd = nfq_fd(h);
	int one = 1;
	/* Overruns are survivable (fail-open); don't make recv() report them. */
	setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof(one));
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &g_opt.rcvbuf, sizeof(g_opt.rcvbuf)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &g_opt.rcvbuf, sizeof(g_opt.rcvbuf));
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		fprintf(stderr, PROG ": cannot make netlink socket non-blocking: %s\n",
			strerror(errno));
		goto fail;
	}

	fprintf(stderr,
		PROG ": bound queue=%u delay_us=%" PRIu64 " jitter_us=%" PRIu64
		" reorder_pct=%g reorder_gap_us=%" PRIu64 " seed=%" PRIu64
		" max_held=%" PRIu32 " queue_maxlen=%" PRIu32 "\n",
		g_opt.queue, g_opt.delay_us, g_opt.jitter_us, g_opt.reorder_pct,
		g_opt.reorder_gap_us, g_opt.seed, g_opt.max_held, g_opt.queue_maxlen);

	static char buf[65536 + 4096] __attribute__((aligned(8)));
	int exit_rc = 0;
	while (!g_stop) {
		uint64_t now = now_ns();
		release_due(now);

		struct timespec ts, *tsp = NULL;
		if (g_nheld > 0) {
			uint64_t due = g_heap[0].due_ns;
			uint64_t wait = due > now ? due - now : 0;
			ts.tv_sec = (time_t)(wait / 1000000000ULL);
			ts.tv_nsec = (long)(wait % 1000000000ULL);
			tsp = &ts;
		}
		struct pollfd pfd = { .fd = fd, .events = POLLIN, .revents = 0 };
		int rc = ppoll(&pfd, 1, tsp, &waitmask);
		if (g_dump) {
			g_dump = 0;
			print_counters("stats");
		}
		if (rc < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, PROG ": ppoll: %s\n", strerror(errno));
			exit_rc = 1;
			break;
		}
		if (rc == 0 || !(pfd.revents & (POLLIN | POLLERR)))
			continue;

		/* Drain a bounded batch, then go back to check timers. */
		for (int i = 0; i < 1024; i++) {
			ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (n < 0) {
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					break;
				if (errno == EINTR)
					continue;
				g_cnt.recv_errors++;
				if (errno == ENOBUFS)
					continue;
				fprintf(stderr, PROG ": recv: %s\n", strerror(errno));
				exit_rc = 1;
				g_stop = 1;
				break;
			}
			if (n == 0)
				break;
			nfq_handle_packet(h, buf, (int)n);
			/* Packets whose due time passes while we drain are released
			 * without waiting for the batch to end. */
			if (g_nheld > 0 && (i & 63) == 63)
				release_due(now_ns());
		}
	}

	release_all();
	print_counters("exit");
	nfq_destroy_queue(g_qh);
	nfq_close(h);
	free(g_heap);
	return exit_rc;

fail:
	nfq_destroy_queue(g_qh);
	nfq_close(h);
	free(g_heap);
	return 1;
}
