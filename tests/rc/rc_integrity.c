/*
 * rc_integrity — an RC data-integrity test written only against the standard
 * libibverbs API, so it runs the same on uroce, rxe or a ConnectX NIC.
 *
 *   server:  rc_integrity [options]
 *   client:  rc_integrity [options] server_host
 *
 * The client drives everything over a TCP control channel (like
 * ibv_rc_pingpong): for every batch it tells the server what is coming (PREP),
 * the server posts receive buffers and fills RDMA READ sources, the client
 * posts one randomized post list, checks its completions and local memory,
 * then asks the server (CHECK) to verify its receive completions, receive
 * buffers, RDMA WRITE targets, guard bytes and atomic words.
 *
 * Run a pair on one host under uroce (tests/rc/run_pair.sh does this):
 *   uroce run -- rc_integrity -p 0 -P /tmp/port              # server
 *   uroce run -- rc_integrity -p $(cat /tmp/port) -s 1 127.0.0.1   # client
 * Options: see usage() or --help.  A failing run prints the seed and client
 * index; the same -s/-i reproduce the same sequence of WRs.
 *
 * Every byte carries a pattern derived from (seed, client index, message
 * index) and its offset in the message; every byte of every registered buffer
 * that is not in use holds a per-buffer canary pattern, so stray writes,
 * short/long placement and misrouted data are all detected.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
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
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Sizes and limits                                                          */

#define PROTO_VERSION   3u
#define MAX_SGE_USE     8           /* never use more SGEs than this */
#define MAX_BATCH       8           /* WRs per post list */
#define GUARD           64          /* canary bytes checked around every range */
#define LOCAL_MRS       4
#define LOCAL_MR_SIZE   (12u << 20)
#define RECV_MRS        3
#define RECV_MR_SIZE    (12u << 20)
#define RDMA_MR_SIZE    (12u << 20)
#define RO_MR_SIZE      (1u << 20)
#define ATOMIC_MR_SIZE  4096u
#define MAX_MSG         (4u << 20)  /* largest single message */
#define BATCH_BUDGET    (8u << 20)  /* payload bytes per post list */
#define SQ_DEPTH        64
#define RQ_DEPTH        64
#define CQ_DEPTH        256
#define MAX_CLIENTS     32
#define SIGNAL_EVERY    4           /* at most this many WRs per signaled one */
#define BURST_BATCHES   8           /* FETCH_AND_ADD bursts at start and end */
#define CQ_TIMEOUT_S    30.0
#define ERR_CQ_TIMEOUT_S 10.0
#define COUNTER_INIT    ((uint64_t)0x00000000FFFFF000ull)   /* crosses 2^32 early */

/* remote MR indices as the client sees them */
enum { RMR_RDMA0, RMR_RDMA1, RMR_RO, RMR_ATOMIC, RMR_COUNT };

/* operation kinds (wire values) */
enum { K_NONE, K_SEND, K_SEND_IMM, K_WRITE, K_WRITE_IMM, K_READ, K_CAS, K_FAA, K_MAX };
static const char *const kind_name[K_MAX] = {
	"?", "SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM",
	"RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD",
};

/* op flags (wire) */
#define F_READBACK  1u   /* READ of a region written earlier in the batch */
#define F_CHAINED   2u   /* SEND/WRITE carrying data a fenced-on READ fetched */
#define F_SHARED    4u   /* atomic on the shared counter */

/* control messages */
enum {
	MSG_HELLO = 1, MSG_HELLO_ACK, MSG_PREP, MSG_READY, MSG_CHECK, MSG_RESULT,
	MSG_ERRPHASE, MSG_ERRPHASE_ACK, MSG_ERRCHECK, MSG_FINAL,
};

/* error phases (--errors), each on a fresh QP pair */
enum {
	EP_BAD_RKEY_WRITE, EP_READ_BEYOND_MR, EP_WRITE_BEFORE_MR, EP_WRITE_READONLY_MR,
	EP_ATOMIC_NO_ACCESS, EP_ATOMIC_MISALIGNED, EP_SEND_TOO_LONG, EP_BAD_LKEY,
	EP_COUNT
};
static const char *const ep_name[EP_COUNT] = {
	"bad_rkey_write", "read_beyond_mr", "write_before_mr", "write_readonly_mr",
	"atomic_no_access", "atomic_misaligned", "send_too_long", "bad_lkey",
};

/* ------------------------------------------------------------------------ */
/* Options, logging                                                          */

static struct {
	int port;
	const char *port_file;
	const char *dev;
	int gid_idx;
	int mtu_bytes;          /* 0 = port active_mtu */
	long iters;
	uint64_t seed;
	bool seed_set;
	int clients;
	int timeout;
	bool errors;
	unsigned error_mask;    /* which error phases (--errors=LIST) */
	int client_index;       /* -1 = any */
	bool verbose;
	const char *host;
} opt = {
	.port = 18515, .iters = 100, .clients = 1, .timeout = 120,
	.client_index = -1,
};

/* snprintf for messages: truncation is acceptable, so no format-truncation analysis */
__attribute__((format(printf, 3, 4)))
static void xsnprintf(char *buf, size_t sz, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sz, fmt, ap);
	va_end(ap);
}

static _Thread_local char g_role[32] = "rc_integrity";

static void logf_(FILE *f, const char *tag, const char *fmt, va_list ap)
{
	char line[2048];
	vsnprintf(line, sizeof(line), fmt, ap);
	fprintf(f, "[%s]%s %s\n", g_role, tag, line);
	fflush(f);
}

__attribute__((format(printf, 1, 2)))
static void info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	logf_(stdout, "", fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 1, 2)))
static void vinfo(const char *fmt, ...)
{
	if (!opt.verbose)
		return;
	va_list ap;
	va_start(ap, fmt);
	logf_(stdout, "", fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 1, 2), noreturn))
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	logf_(stderr, " FATAL:", fmt, ap);
	va_end(ap);
	exit(1);
}

/* A failure report: every line goes to stderr at once and the first lines are
 * kept so the server can send them to the client. */
struct report {
	int nfail;
	size_t n;
	char text[6144];
};

__attribute__((format(printf, 2, 3)))
static void rep_fail(struct report *r, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "[%s] FAIL: %s\n", g_role, line);
	fflush(stderr);
	r->nfail++;
	if (r->nfail <= 24 && r->n + strlen(line) + 2 < sizeof(r->text))
		r->n += (size_t)snprintf(r->text + r->n, sizeof(r->text) - r->n, "%s\n", line);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What the process is doing, for the timeout message (any thread may set it;
 * the last writer wins, which is what a hang leaves behind). */
static char g_step[4][200];
static volatile int g_step_i;

__attribute__((format(printf, 1, 2)))
static void step(const char *fmt, ...)
{
	int i = (g_step_i + 1) & 3;
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(g_step[i], sizeof(g_step[i]), "[%s] ", g_role);
	if (n > 0 && (size_t)n < sizeof(g_step[i]))
		vsnprintf(g_step[i] + n, sizeof(g_step[i]) - (size_t)n, fmt, ap);
	va_end(ap);
	g_step_i = i;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "[rc_integrity] FAIL: global timeout (-t) expired; "
				  "the test did not finish in time. Last step: ";
	const char *st = g_step[g_step_i];
	ssize_t rc = write(2, msg, sizeof(msg) - 1);
	rc = write(2, st, strnlen(st, sizeof(g_step[0])));
	rc = write(2, "\n", 1);
	(void)rc;
	_exit(1);
}

/* ------------------------------------------------------------------------ */
/* Random numbers and data patterns                                          */

static inline uint64_t mix64(uint64_t z)
{
	z += 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

struct rng {
	uint64_t s[4];
};

static void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = mix64(seed + (uint64_t)i * 0x632BE59BD9B4E019ull);
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rnd64(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return res;
}

static uint64_t rnd_below(struct rng *r, uint64_t n)
{
	return n ? rnd64(r) % n : 0;
}

static bool rnd_pct(struct rng *r, unsigned pct)
{
	return rnd_below(r, 100) < pct;
}

/* The pattern of message `idx` of client `client` for a run with `seed`. */
static uint64_t make_pid(uint64_t seed, uint32_t client, uint64_t idx)
{
	return mix64(mix64(mix64(seed) ^ ((uint64_t)client << 40)) ^ idx);
}

static inline uint64_t pat_word(uint64_t pid, uint64_t w)
{
	return mix64(pid ^ (w * 0xD6E8FEB86659FD93ull));
}

static inline uint8_t pat_byte(uint64_t pid, uint64_t pos)
{
	return (uint8_t)(pat_word(pid, pos >> 3) >> ((pos & 7) * 8));
}

/* Fill p[0..len) with bytes pos..pos+len of pattern pid. */
static void pat_fill(uint8_t *p, size_t len, uint64_t pid, uint64_t pos)
{
	while (len && (pos & 7)) {
		*p++ = pat_byte(pid, pos++);
		len--;
	}
	while (len >= 8) {
		uint64_t w = htole64(pat_word(pid, pos >> 3));
		memcpy(p, &w, 8);
		p += 8;
		pos += 8;
		len -= 8;
	}
	while (len) {
		*p++ = pat_byte(pid, pos++);
		len--;
	}
}

/* Count bytes of p[0..len) that differ from the pattern; report first/last. */
static size_t pat_diff(const uint8_t *p, size_t len, uint64_t pid, uint64_t pos,
		       size_t *first, size_t *last)
{
	size_t bad = 0, i = 0;
	while (i < len) {
		if (((pos + i) & 7) == 0 && len - i >= 8) {
			uint64_t w = htole64(pat_word(pid, (pos + i) >> 3)), g;
			memcpy(&g, p + i, 8);
			if (w == g) {
				i += 8;
				continue;
			}
		}
		if (p[i] != pat_byte(pid, pos + i)) {
			if (!bad)
				*first = i;
			*last = i;
			bad++;
		}
		i++;
	}
	return bad;
}

static void hex16(char *out, size_t outsz, const uint8_t *p, size_t n)
{
	size_t o = 0;
	out[0] = 0;
	for (size_t i = 0; i < n && o + 3 < outsz; i++)
		o += (size_t)snprintf(out + o, outsz - o, "%02x", p[i]);
}

/* Check p[0..len) against pattern pid at stream position pos. */
static bool check_pat(struct report *r, const char *what, const uint8_t *p, size_t len,
		      uint64_t pid, uint64_t pos, const char *expect_name)
{
	size_t first = 0, last = 0;
	size_t bad = pat_diff(p, len, pid, pos, &first, &last);
	if (!bad)
		return true;
	uint8_t exp[16];
	size_t n = len - first < 16 ? len - first : 16;
	for (size_t i = 0; i < n; i++)
		exp[i] = pat_byte(pid, pos + first + i);
	char he[40], hg[40];
	hex16(he, sizeof(he), exp, n);
	hex16(hg, sizeof(hg), p + first, n);
	rep_fail(r, "%s: %zu of %zu bytes differ from the %s (first at byte %zu: expected %s got %s; last at byte %zu)",
		 what, bad, len, expect_name, first, he, hg, last);
	return false;
}

/* ------------------------------------------------------------------------ */
/* Registered buffers with a canary and a two-ended range allocator         */

struct mbuf {
	uint8_t *mem;           /* allocation (NULL for a mirror of a remote MR) */
	uint8_t *addr;          /* registered start */
	size_t len;
	struct ibv_mr *mr;
	uint64_t canary;        /* pattern of the bytes at rest */
	char name[24];
	size_t lo, hi;          /* free space is [lo, hi) */
	bool lo_used, hi_used;
};

static void mbuf_init(struct mbuf *m, struct ibv_pd *pd, size_t len, size_t misalign,
		      int access, const char *name, uint64_t canary_id)
{
	memset(m, 0, sizeof(*m));
	void *mem;
	if (posix_memalign(&mem, 4096, len + 4096))
		die("out of memory for %s", name);
	m->mem = mem;
	m->addr = m->mem + misalign;
	m->len = len;
	m->canary = mix64(0xCA9A27ull ^ mix64(canary_id));
	xsnprintf(m->name, sizeof(m->name), "%s", name);
	pat_fill(m->addr, len, m->canary, 0);
	m->mr = ibv_reg_mr(pd, m->addr, len, access);
	if (!m->mr)
		die("ibv_reg_mr(%s, %zu bytes, access 0x%x) failed: %s", name, len, access,
		    strerror(errno));
	m->hi = len;
}

static void mbuf_mirror(struct mbuf *m, size_t len, const char *name)
{
	memset(m, 0, sizeof(*m));
	m->len = len;
	m->hi = len;
	xsnprintf(m->name, sizeof(m->name), "%s", name);
}

static void mbuf_free(struct mbuf *m)
{
	if (m->mr && ibv_dereg_mr(m->mr))
		die("ibv_dereg_mr(%s) failed", m->name);
	free(m->mem);
	memset(m, 0, sizeof(*m));
}

static void mbuf_reset_alloc(struct mbuf *m)
{
	m->lo = 0;
	m->hi = m->len;
	m->lo_used = m->hi_used = false;
}

static void mbuf_restore(struct mbuf *m, size_t off, size_t len)
{
	pat_fill(m->addr + off, len, m->canary, off);
}

static bool mbuf_check_canary(struct report *r, const char *what, struct mbuf *m,
			      size_t off, size_t len)
{
	char w[256];
	xsnprintf(w, sizeof(w), "%s (%s bytes %zu..%zu)", what, m->name, off, off + len);
	return check_pat(r, w, m->addr + off, len, m->canary, off, "canary (bytes must be untouched)");
}

/* The GUARD bytes on both sides of [off, off+len) must still hold the canary. */
static bool mbuf_check_guards(struct report *r, const char *what, struct mbuf *m,
			      size_t off, size_t len)
{
	bool ok = true;
	char w[256];
	size_t b = off >= GUARD ? off - GUARD : 0;
	if (off > b) {
		xsnprintf(w, sizeof(w), "%s: guard before the range", what);
		ok &= mbuf_check_canary(r, w, m, b, off - b);
	}
	size_t e = off + len + GUARD <= m->len ? off + len + GUARD : m->len;
	if (e > off + len) {
		xsnprintf(w, sizeof(w), "%s: guard after the range", what);
		ok &= mbuf_check_canary(r, w, m, off + len, e - off - len);
	}
	return ok;
}

/* Reserve len bytes at a random place near either end of the free space,
 * keeping at least GUARD bytes from every other range of this batch. */
static bool mbuf_alloc(struct mbuf *m, struct rng *r, size_t len, size_t align, size_t *off)
{
	size_t extra;
	unsigned c = (unsigned)rnd_below(r, 10);
	if (c < 4)
		extra = 0;
	else if (c < 7)
		extra = rnd_below(r, 64);
	else if (c < 9)
		extra = rnd_below(r, 4096);
	else
		extra = rnd_below(r, 65536);
	if (align < 1)
		align = 1;
	if (rnd_pct(r, 15) && align < 64)
		align = rnd_pct(r, 50) ? 64 : 4096;

	if (rnd_pct(r, 70)) {   /* from the bottom */
		size_t start = m->lo + (m->lo_used ? GUARD : 0) + extra;
		start = (start + align - 1) / align * align;
		size_t need_hi = m->hi_used ? GUARD : 0;
		if (start > m->hi || m->hi - start < len + need_hi)
			return false;
		*off = start;
		m->lo = start + len;
		m->lo_used = true;
		return true;
	}
	/* from the top; extra == 0 on an untouched top ends at the last byte */
	size_t gap = (m->hi_used ? GUARD : 0) + extra;
	if (m->hi < gap + len)
		return false;
	size_t start = (m->hi - gap - len) / align * align;
	size_t need_lo = m->lo + (m->lo_used ? GUARD : 0);
	if (start < need_lo)
		return false;
	*off = start;
	m->hi = start;
	m->hi_used = true;
	return true;
}

/* ------------------------------------------------------------------------ */
/* TCP control channel                                                       */

struct wb {
	uint8_t *p;
	size_t n, cap;
};

static void wb_put(struct wb *b, const void *d, size_t n)
{
	if (b->n + n > b->cap) {
		size_t nc = b->cap ? b->cap * 2 : 256;
		while (nc < b->n + n)
			nc *= 2;
		b->p = realloc(b->p, nc);
		if (!b->p)
			die("out of memory");
		b->cap = nc;
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
}

static void wb_u8(struct wb *b, uint8_t v) { wb_put(b, &v, 1); }
static void wb_u32(struct wb *b, uint32_t v) { v = htobe32(v); wb_put(b, &v, 4); }
static void wb_u64(struct wb *b, uint64_t v) { v = htobe64(v); wb_put(b, &v, 8); }
static void wb_free(struct wb *b) { free(b->p); memset(b, 0, sizeof(*b)); }

struct rb {
	const uint8_t *p;
	size_t n, pos;
	bool err;
};

static void rb_get(struct rb *b, void *d, size_t n)
{
	if (b->err || b->n - b->pos < n) {
		b->err = true;
		memset(d, 0, n);
		return;
	}
	memcpy(d, b->p + b->pos, n);
	b->pos += n;
}

static uint8_t rb_u8(struct rb *b) { uint8_t v; rb_get(b, &v, 1); return v; }
static uint32_t rb_u32(struct rb *b) { uint32_t v; rb_get(b, &v, 4); return be32toh(v); }
static uint64_t rb_u64(struct rb *b) { uint64_t v; rb_get(b, &v, 8); return be64toh(v); }

static bool send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

static bool recv_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = recv(fd, p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

static bool send_msg(int fd, uint32_t type, const struct wb *b)
{
	uint32_t hdr[2] = { htobe32(type), htobe32(b ? (uint32_t)b->n : 0) };
	if (!send_all(fd, hdr, sizeof(hdr)))
		return false;
	return !b || !b->n || send_all(fd, b->p, b->n);
}

/* Receive one message; *payload is malloc'd (free it). */
static bool recv_msg(int fd, uint32_t *type, uint8_t **payload, size_t *len)
{
	uint32_t hdr[2];
	*payload = NULL;
	*len = 0;
	if (!recv_all(fd, hdr, sizeof(hdr)))
		return false;
	*type = be32toh(hdr[0]);
	uint32_t n = be32toh(hdr[1]);
	if (n > (64u << 20))
		return false;
	*payload = malloc(n ? n : 1);
	if (!*payload)
		die("out of memory");
	if (n && !recv_all(fd, *payload, n)) {
		free(*payload);
		*payload = NULL;
		return false;
	}
	*len = n;
	return true;
}

/* Wait for one message of the given type; dies on EOF or another type. */
static void expect_msg(int fd, uint32_t want, uint8_t **payload, size_t *len, const char *ctx)
{
	uint32_t type;
	step("%s: waiting for the peer on the control connection", ctx);
	if (!recv_msg(fd, &type, payload, len))
		die("%s: control connection closed by the peer (did it fail? see its output)", ctx);
	if (type != want)
		die("%s: protocol error: got message %u, expected %u", ctx, type, want);
}

static int tcp_listen(int port, int *bound)
{
	int fd = socket(AF_INET6, SOCK_STREAM, 0);
	bool v6 = fd >= 0;
	if (!v6)
		fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	int one = 1, zero = 0;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_storage ss;
	socklen_t sl;
	memset(&ss, 0, sizeof(ss));
	if (v6) {
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_any;
		a->sin6_port = htons((uint16_t)port);
		sl = sizeof(*a);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(INADDR_ANY);
		a->sin_port = htons((uint16_t)port);
		sl = sizeof(*a);
	}
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0)
		die("bind to TCP port %d: %s", port, strerror(errno));
	if (listen(fd, MAX_CLIENTS) < 0)
		die("listen: %s", strerror(errno));
	sl = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	*bound = ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
			  : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

static int tcp_connect(const char *host, int port)
{
	char ps[16];
	xsnprintf(ps, sizeof(ps), "%d", port);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
	double deadline = now_s() + 20.0;
	for (;;) {
		int rc = getaddrinfo(host, ps, &hints, &res);
		if (rc)
			die("getaddrinfo(%s): %s", host, gai_strerror(rc));
		for (struct addrinfo *a = res; a; a = a->ai_next) {
			int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
			if (fd < 0)
				continue;
			if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
				freeaddrinfo(res);
				int one = 1;
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				return fd;
			}
			close(fd);
		}
		freeaddrinfo(res);
		if (now_s() > deadline)
			die("cannot connect to %s:%d (is the server running?)", host, port);
		usleep(100000);
	}
}

/* ------------------------------------------------------------------------ */
/* Verbs setup                                                               */

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_device_attr attr;
	struct ibv_port_attr port;
	union ibv_gid gid;
	const char *name;
	int port_mtu;           /* bytes: -m or active_mtu */
};

struct peer {
	uint32_t qpn, psn;
	uint8_t gid[16];
};

struct qp_ctx {
	struct ibv_qp *qp;
	struct ibv_cq *scq, *rcq;
	uint32_t psn;
	uint32_t max_inline;
	int max_send_sge, max_recv_sge;
};

static int mtu_to_bytes(enum ibv_mtu m)
{
	switch (m) {
	case IBV_MTU_256: return 256;
	case IBV_MTU_512: return 512;
	case IBV_MTU_1024: return 1024;
	case IBV_MTU_2048: return 2048;
	case IBV_MTU_4096: return 4096;
	}
	return 0;
}

static enum ibv_mtu bytes_to_mtu(int b)
{
	switch (b) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	}
	return 0;
}

static void dev_open(struct dev *d)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list failed: %s (is the RDMA library loaded? run under 'uroce run --')",
		    strerror(errno));
	struct ibv_device *pick = NULL;
	for (int i = 0; i < n; i++)
		if (!opt.dev || !strcmp(ibv_get_device_name(list[i]), opt.dev)) {
			pick = list[i];
			break;
		}
	if (!pick)
		die(opt.dev ? "device %s not found" : "no RDMA device found%s", opt.dev ? opt.dev : "");
	d->name = strdup(ibv_get_device_name(pick));
	d->ctx = ibv_open_device(pick);
	if (!d->ctx)
		die("ibv_open_device(%s) failed: %s", d->name, strerror(errno));
	ibv_free_device_list(list);
	if (ibv_query_device(d->ctx, &d->attr))
		die("ibv_query_device failed");
	if (ibv_query_port(d->ctx, 1, &d->port))
		die("ibv_query_port(1) failed");
	if (d->port.state != IBV_PORT_ACTIVE)
		info("warning: port 1 state is %d, not ACTIVE", d->port.state);
	if (d->port.link_layer != IBV_LINK_LAYER_ETHERNET)
		info("warning: port 1 link layer is %d, not Ethernet (a GRH is used anyway)",
		     d->port.link_layer);
	if (ibv_query_gid(d->ctx, 1, opt.gid_idx, &d->gid))
		die("ibv_query_gid(port 1, index %d) failed", opt.gid_idx);
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd)
		die("ibv_alloc_pd failed");
	d->port_mtu = opt.mtu_bytes ? opt.mtu_bytes : mtu_to_bytes(d->port.active_mtu);
	if (!d->port_mtu)
		die("port reports an invalid active_mtu %d", d->port.active_mtu);
	if (opt.mtu_bytes && opt.mtu_bytes > mtu_to_bytes(d->port.max_mtu))
		info("warning: -m %d is above the port max_mtu %d", opt.mtu_bytes,
		     mtu_to_bytes(d->port.max_mtu));
	char g[64];
	inet_ntop(AF_INET6, d->gid.raw, g, sizeof(g));
	info("device %s: port 1 active_mtu %d max_msg_sz %u, gid[%d] %s, max_sge %d max_sge_rd %d "
	     "max_qp_wr %d max_qp_rd_atom %d max_qp_init_rd_atom %d atomic_cap %d",
	     d->name, mtu_to_bytes(d->port.active_mtu), d->port.max_msg_sz, opt.gid_idx, g,
	     d->attr.max_sge, d->attr.max_sge_rd, d->attr.max_qp_wr, d->attr.max_qp_rd_atom,
	     d->attr.max_qp_init_rd_atom, d->attr.atomic_cap);
}

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

static void qp_create(struct dev *d, struct qp_ctx *q, struct rng *r)
{
	memset(q, 0, sizeof(*q));
	int cqe = imin(CQ_DEPTH, d->attr.max_cqe > 0 ? d->attr.max_cqe : CQ_DEPTH);
	q->scq = ibv_create_cq(d->ctx, cqe, NULL, NULL, 0);
	q->rcq = ibv_create_cq(d->ctx, cqe, NULL, NULL, 0);
	if (!q->scq || !q->rcq)
		die("ibv_create_cq(%d) failed: %s", cqe, strerror(errno));
	static const uint32_t inl[] = { 256, 220, 128, 64, 0 };
	struct ibv_qp_init_attr ia;
	for (size_t i = 0; i < sizeof(inl) / sizeof(inl[0]); i++) {
		memset(&ia, 0, sizeof(ia));
		ia.send_cq = q->scq;
		ia.recv_cq = q->rcq;
		ia.qp_type = IBV_QPT_RC;
		ia.sq_sig_all = 0;
		ia.cap.max_send_wr = (uint32_t)imin(SQ_DEPTH, d->attr.max_qp_wr);
		ia.cap.max_recv_wr = (uint32_t)imin(RQ_DEPTH, d->attr.max_qp_wr);
		ia.cap.max_send_sge = (uint32_t)imax(1, imin(MAX_SGE_USE, d->attr.max_sge));
		ia.cap.max_recv_sge = (uint32_t)imax(1, imin(MAX_SGE_USE, d->attr.max_sge));
		ia.cap.max_inline_data = inl[i];
		q->qp = ibv_create_qp(d->pd, &ia);
		if (q->qp)
			break;
	}
	if (!q->qp)
		die("ibv_create_qp(RC) failed: %s", strerror(errno));
	q->max_inline = ia.cap.max_inline_data;
	q->max_send_sge = imin(MAX_SGE_USE, (int)ia.cap.max_send_sge);
	q->max_recv_sge = imin(MAX_SGE_USE, (int)ia.cap.max_recv_sge);
	/* "max_inline_data reported by the QP": believe the smaller of the two */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	if (ibv_query_qp(q->qp, &qa, IBV_QP_CAP, &qia) == 0) {
		if (qa.cap.max_inline_data < q->max_inline)
			q->max_inline = qa.cap.max_inline_data;
		if (qa.cap.max_send_sge && (int)qa.cap.max_send_sge < q->max_send_sge)
			q->max_send_sge = (int)qa.cap.max_send_sge;
		if (qa.cap.max_recv_sge && (int)qa.cap.max_recv_sge < q->max_recv_sge)
			q->max_recv_sge = (int)qa.cap.max_recv_sge;
	}
	q->max_send_sge = imax(1, q->max_send_sge);
	q->max_recv_sge = imax(1, q->max_recv_sge);
	q->psn = (uint32_t)rnd64(r) & 0xffffff;
}

static void qp_destroy(struct qp_ctx *q)
{
	step("ibv_destroy_qp(QPN 0x%x)", q->qp ? q->qp->qp_num : 0);
#ifdef RC_INTEGRITY_DRAIN_ASYNC
	/* exploration only: read and ack pending async events first */
	for (;;) {
		struct pollfd pfd = { q->qp->context->async_fd, POLLIN, 0 };
		struct ibv_async_event ev;
		if (poll(&pfd, 1, 0) != 1 || ibv_get_async_event(q->qp->context, &ev))
			break;
		info("async event %s", ibv_event_type_str(ev.event_type));
		ibv_ack_async_event(&ev);
	}
#endif
	if (q->qp && ibv_destroy_qp(q->qp))
		die("ibv_destroy_qp failed");
	if (q->scq && ibv_destroy_cq(q->scq))
		die("ibv_destroy_cq failed");
	if (q->rcq && ibv_destroy_cq(q->rcq))
		die("ibv_destroy_cq failed");
	memset(q, 0, sizeof(*q));
}

static void qp_connect(struct dev *d, struct qp_ctx *q, const struct peer *p, int mtu_bytes)
{
	step("connecting QPN 0x%x to 0x%x (ibv_modify_qp INIT/RTR/RTS)", q->qp->qp_num, p->qpn);
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		die("ibv_modify_qp(INIT) failed: %s", strerror(errno));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = bytes_to_mtu(mtu_bytes);
	a.dest_qp_num = p->qpn;
	a.rq_psn = p->psn;
	a.max_dest_rd_atomic = (uint8_t)imax(1, imin(16, d->attr.max_qp_rd_atom));
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, p->gid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)opt.gid_idx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.dlid = 0;
	a.ah_attr.sl = 0;
	a.ah_attr.src_path_bits = 0;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		die("ibv_modify_qp(RTR) failed: %s", strerror(errno));

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = q->psn;
	a.max_rd_atomic = (uint8_t)imax(1, imin(16, d->attr.max_qp_init_rd_atom));
	if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("ibv_modify_qp(RTS) failed: %s", strerror(errno));
}

static void wb_peer(struct wb *b, const struct qp_ctx *q, const struct dev *d)
{
	wb_u32(b, q->qp->qp_num);
	wb_u32(b, q->psn);
	wb_put(b, d->gid.raw, 16);
}

static void rb_peer(struct rb *b, struct peer *p)
{
	p->qpn = rb_u32(b);
	p->psn = rb_u32(b);
	rb_get(b, p->gid, 16);
}

/* Poll one completion: 1 = got one, 0 = timeout, -1 = ibv_poll_cq error. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, double timeout_s)
{
	step("polling a CQ for a completion (timeout %.0f s)", timeout_s);
	double deadline = now_s() + timeout_s;
	unsigned spins = 0;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			return -1;
		if (n > 0)
			return 1;
		if (++spins > 64) {
			if (now_s() > deadline)
				return 0;
			struct timespec ts = { 0, 20000 };
			nanosleep(&ts, NULL);
		}
	}
}

static const char *wc_opcode_name(int op)
{
	switch (op) {
	case IBV_WC_SEND: return "IBV_WC_SEND";
	case IBV_WC_RDMA_WRITE: return "IBV_WC_RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "IBV_WC_RDMA_READ";
	case IBV_WC_COMP_SWAP: return "IBV_WC_COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "IBV_WC_FETCH_ADD";
	case IBV_WC_BIND_MW: return "IBV_WC_BIND_MW";
	case IBV_WC_LOCAL_INV: return "IBV_WC_LOCAL_INV";
	case IBV_WC_RECV: return "IBV_WC_RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "IBV_WC_RECV_RDMA_WITH_IMM";
	}
	return "unknown opcode";
}

static const char *qp_state_name(int s)
{
	static const char *const n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };
	return s >= 0 && s < 7 ? n[s] : "unknown";
}

static void wc_str(char *buf, size_t sz, const struct ibv_wc *wc)
{
	xsnprintf(buf, sz, "{wr_id 0x%" PRIx64 " status %s(%d) opcode %s(%d) vendor_err 0x%x byte_len %u "
		 "imm_data 0x%08x qp_num 0x%x src_qp 0x%x wc_flags 0x%x}",
		 wc->wr_id, ibv_wc_status_str(wc->status), wc->status,
		 wc_opcode_name(wc->opcode), wc->opcode, wc->vendor_err, wc->byte_len,
		 ntohl(wc->imm_data), wc->qp_num, wc->src_qp, (unsigned)wc->wc_flags);
}

/* ------------------------------------------------------------------------ */
/* Batch descriptions shared by both sides                                   */

struct piece {
	int mr;
	size_t off;
	uint32_t len;
};

/* what the server learns about each WR of a batch */
struct sop {
	int kind;
	unsigned flags;
	int rmr;
	uint64_t roff;
	uint32_t len;
	uint64_t pid_idx;
	uint32_t imm;
	uint64_t after;         /* private atomic word after this op */
};

static void wb_sop(struct wb *b, const struct sop *o)
{
	wb_u8(b, (uint8_t)o->kind);
	wb_u8(b, (uint8_t)o->flags);
	wb_u8(b, (uint8_t)o->rmr);
	wb_u8(b, 0);
	wb_u32(b, o->len);
	wb_u64(b, o->roff);
	wb_u64(b, o->pid_idx);
	wb_u32(b, o->imm);
	wb_u64(b, o->after);
}

static void rb_sop(struct rb *b, struct sop *o)
{
	o->kind = rb_u8(b);
	o->flags = rb_u8(b);
	o->rmr = rb_u8(b);
	(void)rb_u8(b);
	o->len = rb_u32(b);
	o->roff = rb_u64(b);
	o->pid_idx = rb_u64(b);
	o->imm = rb_u32(b);
	o->after = rb_u64(b);
}

/* Split len bytes into 1..maxn pieces (rarely with zero-length ones). */
static int split_len(struct rng *r, uint32_t len, int maxn, uint32_t *out)
{
	int n = 1 + (int)rnd_below(r, (uint64_t)maxn);
	if (n == 1) {
		out[0] = len;
		return 1;
	}
	bool allow_zero = rnd_pct(r, 10);
	uint32_t cut[MAX_SGE_USE + 1];
	int nc = 0;
	cut[nc++] = 0;
	for (int i = 0; i < n - 1; i++) {
		uint32_t c = (uint32_t)rnd_below(r, (uint64_t)len + 1);
		cut[nc++] = c;
	}
	cut[nc++] = len;
	/* sort */
	for (int i = 1; i < nc; i++)
		for (int j = i; j > 0 && cut[j - 1] > cut[j]; j--) {
			uint32_t t = cut[j];
			cut[j] = cut[j - 1];
			cut[j - 1] = t;
		}
	int k = 0;
	for (int i = 1; i < nc; i++) {
		uint32_t l = cut[i] - cut[i - 1];
		if (l == 0 && !allow_zero)
			continue;
		out[k++] = l;
	}
	if (k == 0)
		out[k++] = len;
	return k;
}

/* ======================================================================== */
/* SERVER                                                                    */
/* ======================================================================== */

struct faa_rec {
	uint64_t fetched, add;
	uint32_t client;
	uint32_t n;
};

static struct {
	struct dev d;
	struct mbuf amr;                /* shared atomic MR: counter at 0 */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int ndone;
	bool used_idx[MAX_CLIENTS];
	struct faa_rec *faa;
	size_t nfaa, capfaa;
	bool incomplete;
	bool verdict_ready, verdict_ok;
	char verdict[2048];
	int nfailed;
} S = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

struct rexp {                   /* one posted receive and what it must get */
	uint64_t wr_id;
	int kind;
	unsigned flags;
	uint32_t len;
	uint64_t pid;
	uint32_t imm;
	int op;
	int nsge;
	struct piece sge[MAX_SGE_USE];
};

struct sconn {
	int fd;
	uint32_t idx;
	pthread_t th;
	struct qp_ctx q;
	struct peer cp;
	uint64_t seed;
	struct rng rng;
	int mtu;
	struct mbuf rmr[3];             /* RDMA0, RDMA1, RO */
	struct mbuf recv[RECV_MRS];
	size_t priv_off;
	uint64_t priv_val;
	/* current batch */
	uint32_t batch;
	int nops;
	struct sop ops[MAX_BATCH];
	int nrexp;
	struct rexp rexp[MAX_BATCH];
	uint64_t recv_seq;
	bool prepared;
	/* stats */
	uint64_t bytes, nrecv, nwrite_regions, nread_sources;
	uint64_t src_qp_zero, src_qp_peer;
	bool failed, finished, counted;
};

static volatile uint64_t *amr_word(size_t off)
{
	return (volatile uint64_t *)(void *)(S.amr.addr + off);
}

static uint64_t amr_load(size_t off)
{
	return __atomic_load_n((uint64_t *)(void *)(S.amr.addr + off), __ATOMIC_SEQ_CST);
}

static void send_result(struct sconn *c, const struct report *r, uint64_t bytes, uint64_t nrecv)
{
	struct wb b = { 0 };
	wb_u32(&b, r->nfail == 0);
	wb_u64(&b, bytes);
	wb_u64(&b, nrecv);
	wb_u32(&b, (uint32_t)r->n);
	wb_put(&b, r->text, r->n);
	if (!send_msg(c->fd, MSG_RESULT, &b))
		info("could not send a result to client %u", c->idx);
	wb_free(&b);
	if (r->nfail)
		c->failed = true;
}

static struct mbuf *srv_region(struct sconn *c, int rmr)
{
	return rmr >= 0 && rmr < 3 ? &c->rmr[rmr] : NULL;
}

/* Post a receive of cap bytes scattered over random pieces. */
static bool srv_post_recv_list(struct sconn *c, struct rexp *e, int n, struct report *rep)
{
	struct ibv_recv_wr wr[MAX_BATCH];
	struct ibv_sge sg[MAX_BATCH][MAX_SGE_USE];
	for (int i = 0; i < n; i++) {
		memset(&wr[i], 0, sizeof(wr[i]));
		wr[i].wr_id = e[i].wr_id;
		wr[i].num_sge = e[i].nsge;
		wr[i].sg_list = e[i].nsge ? sg[i] : NULL;
		for (int j = 0; j < e[i].nsge; j++) {
			struct mbuf *m = &c->recv[e[i].sge[j].mr];
			sg[i][j].addr = (uintptr_t)(m->addr + e[i].sge[j].off);
			sg[i][j].length = e[i].sge[j].len;
			sg[i][j].lkey = m->mr->lkey;
		}
	}
	/* post as one list or in chunks */
	int i = 0;
	while (i < n) {
		int k = n - i;
		if (k > 1 && rnd_pct(&c->rng, 30))
			k = 1 + (int)rnd_below(&c->rng, (uint64_t)k);
		wr[i + k - 1].next = NULL;
		for (int j = i; j < i + k - 1; j++)
			wr[j].next = &wr[j + 1];
		struct ibv_recv_wr *bad = NULL;
		int rc = ibv_post_recv(c->q.qp, &wr[i], &bad);
		if (rc) {
			rep_fail(rep, "ibv_post_recv failed: %s (bad_wr index %td)", strerror(rc),
				 bad ? bad - wr : -1);
			return false;
		}
		i += k;
	}
	return true;
}

static bool srv_place_recv(struct sconn *c, struct rexp *e, uint32_t cap)
{
	uint32_t parts[MAX_SGE_USE];
	int n;
	if (cap == 0 && rnd_pct(&c->rng, 50)) {
		e->nsge = 0;
		return true;
	}
	n = split_len(&c->rng, cap, c->q.max_recv_sge, parts);
	for (int i = 0; i < n; i++) {
		bool ok = false;
		int start = (int)rnd_below(&c->rng, RECV_MRS);
		for (int t = 0; t < RECV_MRS && !ok; t++) {
			int mi = (start + t) % RECV_MRS;
			size_t off;
			if (mbuf_alloc(&c->recv[mi], &c->rng, parts[i], 1, &off)) {
				e->sge[i] = (struct piece){ mi, off, parts[i] };
				ok = true;
			}
		}
		if (!ok)
			return false;
	}
	e->nsge = n;
	return true;
}

static void srv_prep(struct sconn *c, struct rb *b)
{
	struct report rep = { 0 };
	c->batch = rb_u32(b);
	c->nops = (int)rb_u32(b);
	if (c->nops < 0 || c->nops > MAX_BATCH)
		die("protocol error: %d ops in a batch", c->nops);
	for (int i = 0; i < c->nops; i++)
		rb_sop(b, &c->ops[i]);
	if (b->err)
		die("protocol error: short PREP message");
	for (int i = 0; i < RECV_MRS; i++)
		mbuf_reset_alloc(&c->recv[i]);
	c->nrexp = 0;
	for (int i = 0; i < c->nops; i++) {
		struct sop *o = &c->ops[i];
		uint64_t pid = make_pid(c->seed, c->idx, o->pid_idx);
		if (o->kind == K_WRITE || o->kind == K_WRITE_IMM || o->kind == K_READ) {
			struct mbuf *m = srv_region(c, o->rmr);
			if (!m || o->roff > m->len || m->len - o->roff < o->len)
				die("protocol error: op %d region %d+%" PRIu64 "/%u out of range", i,
				    o->rmr, o->roff, o->len);
			if (o->kind != K_READ && o->rmr == RMR_RO)
				die("protocol error: write to the read-only MR");
		}
		if (o->kind == K_READ && !(o->flags & F_READBACK))
			pat_fill(c->rmr[o->rmr].addr + o->roff, o->len, pid, 0);
		if (o->kind == K_SEND || o->kind == K_SEND_IMM || o->kind == K_WRITE_IMM) {
			struct rexp *e = &c->rexp[c->nrexp++];
			memset(e, 0, sizeof(*e));
			e->wr_id = 0x5EC0000000000000ull | ((uint64_t)c->idx << 40) | c->recv_seq++;
			e->kind = o->kind;
			e->flags = o->flags;
			e->len = o->len;
			e->pid = pid;
			e->imm = o->imm;
			e->op = i;
			uint32_t cap;
			if (o->kind == K_WRITE_IMM) {
				cap = rnd_pct(&c->rng, 40) ? 0 : (uint32_t)rnd_below(&c->rng, 4096);
			} else {
				unsigned s = (unsigned)rnd_below(&c->rng, 10);
				uint32_t slack = s < 4 ? 0 : s < 8 ? (uint32_t)rnd_below(&c->rng, 512) + 1
					       : (uint32_t)rnd_below(&c->rng, 65536) + 1;
				cap = o->len + slack;
			}
			if (!srv_place_recv(c, e, cap))
				die("internal: receive buffers exhausted (batch %u)", c->batch);
		}
	}
	if (c->nrexp)
		srv_post_recv_list(c, c->rexp, c->nrexp, &rep);
	c->prepared = true;
	if (rep.nfail) {
		send_result(c, &rep, 0, 0);
		return;
	}
	if (!send_msg(c->fd, MSG_READY, NULL))
		die("lost the control connection");
}

static void srv_check_recv(struct sconn *c, struct rexp *e, struct report *rep, double deadline)
{
	char what[256];
	struct ibv_wc wc;
	xsnprintf(what, sizeof(what), "batch %u op %d (%s%s, %u bytes): receive completion",
		 c->batch, e->op, kind_name[e->kind],
		 (e->flags & F_CHAINED) ? " of data a fenced-on RDMA_READ fetched" : "", e->len);
	double left = deadline - now_s();
	int rc = poll_one(c->q.rcq, &wc, left > 0 ? left : 0);
	if (rc <= 0) {
		rep_fail(rep, "%s: %s", what, rc < 0 ? "ibv_poll_cq failed"
			 : "no receive completion within the timeout");
		return;
	}
	char ws[320];
	wc_str(ws, sizeof(ws), &wc);
	int nf = rep->nfail;
	if (wc.wr_id != e->wr_id)
		rep_fail(rep, "%s: wr_id 0x%" PRIx64 ", expected 0x%" PRIx64 " (receives must complete in order)",
			 what, wc.wr_id, e->wr_id);
	if (wc.status != IBV_WC_SUCCESS) {
		rep_fail(rep, "%s: status %s (%d), expected success; wc %s", what,
			 ibv_wc_status_str(wc.status), wc.status, ws);
		return;
	}
	int want_op = e->kind == K_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
	if ((int)wc.opcode != want_op)
		rep_fail(rep, "%s: opcode %s (%d), expected %s", what, wc_opcode_name(wc.opcode),
			 wc.opcode, wc_opcode_name(want_op));
	if (wc.byte_len != e->len)
		rep_fail(rep, "%s: byte_len %u, expected %u", what, wc.byte_len, e->len);
	bool has_imm = e->kind != K_SEND;
	unsigned flags = (unsigned)wc.wc_flags & ~(unsigned)IBV_WC_IP_CSUM_OK;
	unsigned want_flags = has_imm ? IBV_WC_WITH_IMM : 0;
	if (flags != want_flags)
		rep_fail(rep, "%s: wc_flags 0x%x, expected 0x%x (IBV_WC_WITH_IMM %s%s)", what,
			 (unsigned)wc.wc_flags, want_flags, has_imm ? "set" : "clear",
			 (flags & IBV_WC_GRH) ? "; IBV_WC_GRH is only valid for UD" : "");
	if (has_imm && wc.imm_data != htonl(e->imm))
		rep_fail(rep, "%s: imm_data 0x%08x (network order as received), expected 0x%08x",
			 what, ntohl(wc.imm_data), e->imm);
	if (wc.qp_num != c->q.qp->qp_num)
		rep_fail(rep, "%s: qp_num 0x%x, expected the local QP 0x%x", what, wc.qp_num,
			 c->q.qp->qp_num);
	if (wc.src_qp == 0)
		c->src_qp_zero++;
	else if (wc.src_qp == c->cp.qpn)
		c->src_qp_peer++;
	else
		rep_fail(rep, "%s: src_qp 0x%x is neither 0 nor the peer QP 0x%x", what, wc.src_qp,
			 c->cp.qpn);
	if (wc.vendor_err)
		rep_fail(rep, "%s: vendor_err 0x%x on a successful completion", what, wc.vendor_err);
	if (rep->nfail != nf)
		rep_fail(rep, "%s: the completion was %s", what, ws);

	/* data: the first len bytes across the pieces carry the pattern */
	uint64_t pos = 0;
	uint32_t msg = e->kind == K_WRITE_IMM ? 0 : e->len;
	uint64_t cap = 0;
	for (int j = 0; j < e->nsge; j++)
		cap += e->sge[j].len;
	if (cap < msg) {
		rep_fail(rep, "%s: internal: buffer %" PRIu64 " < message %u", what, cap, msg);
		return;
	}
	for (int j = 0; j < e->nsge; j++) {
		struct piece *p = &e->sge[j];
		struct mbuf *m = &c->recv[p->mr];
		uint32_t take = (uint32_t)(msg - pos < p->len ? msg - pos : p->len);
		char w[320];
		xsnprintf(w, sizeof(w), "batch %u op %d (%s%s, %u bytes) receive SGE %d/%d (%s+%zu, %u bytes, "
			 "message bytes %" PRIu64 "..%" PRIu64 ")", c->batch, e->op, kind_name[e->kind],
			 (e->flags & F_CHAINED) ? " of fenced READ data" : "",
			 e->len, j, e->nsge, m->name, p->off, p->len, pos, pos + take);
		if (take && check_pat(rep, w, m->addr + p->off, take, e->pid, pos, "message pattern"))
			c->bytes += take;
		if (p->len > take) {
			char w2[400];
			xsnprintf(w2, sizeof(w2), "%s: bytes past the end of the message", w);
			mbuf_check_canary(rep, w2, m, p->off + take, p->len - take);
		}
		mbuf_check_guards(rep, w, m, p->off, p->len);
		pos += take;
	}
}

static void srv_check(struct sconn *c, struct rb *b)
{
	struct report rep = { 0 };
	uint64_t bytes0 = c->bytes;
	uint32_t client_ok = rb_u32(b);
	if (!c->prepared || b->err)
		die("protocol error: CHECK without PREP");
	c->prepared = false;
	/* after a failure on the client side do not wait long for what may never come */
	double deadline = now_s() + (client_ok ? CQ_TIMEOUT_S : 2.0);
	for (int i = 0; i < c->nrexp; i++)
		srv_check_recv(c, &c->rexp[i], &rep, deadline);
	struct ibv_wc wc;
	int extra = ibv_poll_cq(c->q.rcq, 1, &wc);
	if (extra > 0) {
		char ws[320];
		wc_str(ws, sizeof(ws), &wc);
		rep_fail(&rep, "batch %u: unexpected extra receive completion %s", c->batch, ws);
	}
	bool have_priv = false;
	uint64_t priv_after = 0;
	for (int i = 0; i < c->nops; i++) {
		struct sop *o = &c->ops[i];
		uint64_t pid = make_pid(c->seed, c->idx, o->pid_idx);
		char w[256];
		if (o->kind == K_WRITE || o->kind == K_WRITE_IMM) {
			struct mbuf *m = &c->rmr[o->rmr];
			xsnprintf(w, sizeof(w), "batch %u op %d (%s%s, %u bytes) target %s+%" PRIu64,
				 c->batch, i, kind_name[o->kind], (o->flags & F_CHAINED) ? " of fenced READ data" : "",
				 o->len, m->name, o->roff);
			if (check_pat(&rep, w, m->addr + o->roff, o->len, pid, 0, "message pattern"))
				c->bytes += o->len;
			mbuf_check_guards(&rep, w, m, o->roff, o->len);
			c->nwrite_regions++;
		} else if (o->kind == K_READ && !(o->flags & F_READBACK)) {
			struct mbuf *m = &c->rmr[o->rmr];
			xsnprintf(w, sizeof(w), "batch %u op %d (RDMA_READ source, %u bytes) %s+%" PRIu64
				 " must be unchanged by the READ", c->batch, i, o->len, m->name, o->roff);
			check_pat(&rep, w, m->addr + o->roff, o->len, pid, 0, "pattern written before the READ");
			mbuf_check_guards(&rep, w, m, o->roff, o->len);
			c->nread_sources++;
		} else if ((o->kind == K_CAS || o->kind == K_FAA) && !(o->flags & F_SHARED)) {
			have_priv = true;
			priv_after = o->after;
		}
	}
	if (have_priv) {
		uint64_t v = amr_load(c->priv_off);
		if (v != priv_after)
			rep_fail(&rep, "batch %u: private atomic word (atomic MR+%zu) holds 0x%016" PRIx64
				 " after the batch, expected 0x%016" PRIx64, c->batch, c->priv_off, v, priv_after);
		c->priv_val = priv_after;
		c->bytes += 8;
	}
	/* back to rest: canary everywhere */
	for (int i = 0; i < c->nrexp; i++)
		for (int j = 0; j < c->rexp[i].nsge; j++) {
			struct piece *p = &c->rexp[i].sge[j];
			mbuf_restore(&c->recv[p->mr], p->off, p->len);
		}
	for (int i = 0; i < c->nops; i++) {
		struct sop *o = &c->ops[i];
		if (o->kind == K_WRITE || o->kind == K_WRITE_IMM || o->kind == K_READ)
			mbuf_restore(&c->rmr[o->rmr], o->roff, o->len);
	}
	c->nrecv += (uint64_t)c->nrexp;
	send_result(c, &rep, c->bytes - bytes0, (uint64_t)c->nrexp);
}

/* Whole-buffer scan: everything not in use must hold the canary. */
static void srv_scan_all(struct sconn *c, struct report *rep, const char *when)
{
	char w[128];
	xsnprintf(w, sizeof(w), "%s: full scan", when);
	/* after a reported difference, restore so the next check stands alone */
	for (int i = 0; i < 3; i++)
		if (!mbuf_check_canary(rep, w, &c->rmr[i], 0, c->rmr[i].len))
			mbuf_restore(&c->rmr[i], 0, c->rmr[i].len);
	for (int i = 0; i < RECV_MRS; i++)
		if (!mbuf_check_canary(rep, w, &c->recv[i], 0, c->recv[i].len))
			mbuf_restore(&c->recv[i], 0, c->recv[i].len);
}

static void srv_errphase(struct sconn *c, struct rb *b)
{
	uint32_t phase = rb_u32(b);
	struct peer p;
	rb_peer(b, &p);
	if (b->err || phase >= EP_COUNT)
		die("protocol error: bad ERRPHASE");
	struct qp_ctx eq;
	qp_create(&S.d, &eq, &c->rng);
	qp_connect(&S.d, &eq, &p, c->mtu);
	uint32_t small = (uint32_t)(2 * c->mtu);
	uint64_t id1 = 0xE440000000000001ull, id2 = 0xE440000000000002ull;
	if (phase == EP_SEND_TOO_LONG) {
		struct ibv_sge s1 = { (uintptr_t)c->recv[0].addr, small, c->recv[0].mr->lkey };
		struct ibv_sge s2 = { (uintptr_t)c->recv[1].addr, 65536, c->recv[1].mr->lkey };
		struct ibv_recv_wr w2 = { .wr_id = id2, .sg_list = &s2, .num_sge = 1 };
		struct ibv_recv_wr w1 = { .wr_id = id1, .next = &w2, .sg_list = &s1, .num_sge = 1 };
		struct ibv_recv_wr *bad;
		if (ibv_post_recv(eq.qp, &w1, &bad))
			die("ibv_post_recv failed in error phase");
	}
	struct wb w = { 0 };
	wb_peer(&w, &eq, &S.d);
	if (!send_msg(c->fd, MSG_ERRPHASE_ACK, &w))
		die("lost the control connection");
	wb_free(&w);

	uint8_t *pl;
	size_t len;
	expect_msg(c->fd, MSG_ERRCHECK, &pl, &len, "error phase");
	free(pl);
	struct report rep = { 0 };
	char tag[64];
	xsnprintf(tag, sizeof(tag), "error phase %s", ep_name[phase]);
	if (phase == EP_SEND_TOO_LONG) {
		static const struct { uint64_t id; enum ibv_wc_status st; } want[2] = {
			{ 0xE440000000000001ull, IBV_WC_LOC_LEN_ERR },
			{ 0xE440000000000002ull, IBV_WC_WR_FLUSH_ERR },
		};
		for (int i = 0; i < 2; i++) {
			struct ibv_wc wc;
			int rc = poll_one(eq.rcq, &wc, ERR_CQ_TIMEOUT_S);
			if (rc <= 0) {
				rep_fail(&rep, "%s: receiver: no completion for receive %d (expected %s)", tag,
					 i + 1, ibv_wc_status_str(want[i].st));
				break;
			}
			char ws[320];
			wc_str(ws, sizeof(ws), &wc);
			if (wc.wr_id != want[i].id || wc.status != want[i].st || wc.qp_num != eq.qp->qp_num)
				rep_fail(&rep, "%s: receiver completion %d is %s, expected wr_id 0x%" PRIx64
					 " status %s qp_num 0x%x", tag, i + 1, ws, want[i].id,
					 ibv_wc_status_str(want[i].st), eq.qp->qp_num);
		}
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qia;
		if (ibv_query_qp(eq.qp, &qa, IBV_QP_STATE, &qia))
			rep_fail(&rep, "%s: ibv_query_qp on the receiver failed", tag);
		else if (qa.qp_state != IBV_QPS_ERR)
			rep_fail(&rep, "%s: receiver QP state %s after IBV_WC_LOC_LEN_ERR, expected ERR", tag,
				 qp_state_name(qa.qp_state));
		/* the failed receive's buffer is undefined; the flushed one must be untouched */
		mbuf_restore(&c->recv[0], 0, small);
	}
	srv_scan_all(c, &rep, tag);
	uint64_t v = amr_load(c->priv_off);
	if (v != c->priv_val) {
		rep_fail(&rep, "%s: private atomic word changed to 0x%016" PRIx64 " (was 0x%016" PRIx64 ")",
			 tag, v, c->priv_val);
		*amr_word(c->priv_off) = c->priv_val;
	}
	if (amr_load(c->priv_off + 8) != 0) {
		rep_fail(&rep, "%s: the word after the private atomic word changed", tag);
		*amr_word(c->priv_off + 8) = 0;
	}
	qp_destroy(&eq);
	send_result(c, &rep, 0, 0);
}

static int faa_cmp(const void *a, const void *b)
{
	const struct faa_rec *x = a, *y = b;
	return x->fetched < y->fetched ? -1 : x->fetched > y->fetched;
}

/* The FETCH_AND_ADD results of all clients must form one chain from the
 * initial value to the final value: each result unique, no add lost. */
static void srv_faa_verdict(void)
{
	struct report rep = { 0 };
	uint64_t fin = amr_load(0);
	if (S.incomplete) {
		rep_fail(&rep, "shared counter: NOT CHECKED, a client failed before reporting its "
			 "FETCH_AND_ADD results (counter is 0x%016" PRIx64 ")", fin);
	} else {
		struct faa_rec *f = S.faa;
		size_t n = S.nfaa;
		qsort(f, n, sizeof(*f), faa_cmp);
		uint64_t expect = COUNTER_INIT, total = 0;
		for (size_t i = 0; i < n; i++)
			total += f[i].add;
		for (size_t i = 0; i < n; i++) {
			if (i && f[i].fetched == f[i - 1].fetched) {
				rep_fail(&rep, "shared counter: fetch result 0x%016" PRIx64
					 " returned twice (client %u op %u and client %u op %u)", f[i].fetched,
					 f[i - 1].client, f[i - 1].n, f[i].client, f[i].n);
			} else if (f[i].fetched != expect) {
				rep_fail(&rep, "shared counter: the sorted fetch results break the chain at "
					 "0x%016" PRIx64 " (client %u op %u): expected 0x%016" PRIx64
					 " (previous result plus its add)", f[i].fetched, f[i].client, f[i].n, expect);
			}
			expect = f[i].fetched + f[i].add;
			if (rep.nfail > 8)
				break;
		}
		if (fin != COUNTER_INIT + total)
			rep_fail(&rep, "shared counter: final value 0x%016" PRIx64 ", expected 0x%016" PRIx64
				 " = initial 0x%016" PRIx64 " + total added %" PRIu64 " over %zu FETCH_AND_ADDs",
				 fin, COUNTER_INIT + total, COUNTER_INIT, total, n);
		else
			info("shared counter: %zu FETCH_AND_ADDs from %d client(s), all results unique, "
			     "final 0x%016" PRIx64 " == initial + %" PRIu64, n, opt.clients, fin, total);
	}
	S.verdict_ok = rep.nfail == 0;
	xsnprintf(S.verdict, sizeof(S.verdict), "%s", rep.text);
}

static void srv_mark_done(struct sconn *c)
{
	pthread_mutex_lock(&S.mu);
	if (!c->counted) {
		c->counted = true;
		if (!c->finished)
			S.incomplete = true;
		if (c->failed)
			S.nfailed++;
		if (++S.ndone == opt.clients) {
			srv_faa_verdict();
			S.verdict_ready = true;
			pthread_cond_broadcast(&S.cv);
		}
	}
	pthread_mutex_unlock(&S.mu);
}

static void srv_final(struct sconn *c, struct rb *b)
{
	struct report rep = { 0 };
	uint64_t priv = rb_u64(b);
	uint32_t n = rb_u32(b);
	if (b->err || (uint64_t)n * 16 > b->n - b->pos)
		die("protocol error: bad FINAL");
	pthread_mutex_lock(&S.mu);
	if (S.nfaa + n > S.capfaa) {
		S.capfaa = (S.nfaa + n) * 2;
		S.faa = realloc(S.faa, S.capfaa * sizeof(*S.faa));
		if (!S.faa)
			die("out of memory");
	}
	for (uint32_t i = 0; i < n; i++) {
		struct faa_rec *f = &S.faa[S.nfaa++];
		f->fetched = rb_u64(b);
		f->add = rb_u64(b);
		f->client = c->idx;
		f->n = i;
	}
	pthread_mutex_unlock(&S.mu);
	uint64_t v = amr_load(c->priv_off);
	if (v != priv || v != c->priv_val)
		rep_fail(&rep, "final: private atomic word 0x%016" PRIx64 ", client expects 0x%016" PRIx64,
			 v, priv);
	srv_scan_all(c, &rep, "final");
	if (rep.nfail)
		c->failed = true;
	c->finished = true;
	srv_mark_done(c);
	step("final: waiting for every client to finish");
	pthread_mutex_lock(&S.mu);
	while (!S.verdict_ready)
		pthread_cond_wait(&S.cv, &S.mu);
	if (!S.verdict_ok) {
		/* copy the shared verdict into this client's report */
		rep.nfail++;
		size_t l = strlen(S.verdict);
		if (rep.n + l < sizeof(rep.text)) {
			memcpy(rep.text + rep.n, S.verdict, l + 1);
			rep.n += l;
		}
	}
	pthread_mutex_unlock(&S.mu);
	send_result(c, &rep, 8, 0);
	info("client %u: %s; %" PRIu64 " receives and %" PRIu64 " RDMA WRITE targets verified, %"
	     PRIu64 " READ sources intact, %" PRIu64 " bytes verified at the server; src_qp reported as "
	     "0: %" PRIu64 ", as the peer QPN: %" PRIu64, c->idx, c->failed ? "FAILED" : "passed",
	     c->nrecv, c->nwrite_regions, c->nread_sources, c->bytes, c->src_qp_zero, c->src_qp_peer);
}

static void *srv_thread(void *arg)
{
	struct sconn *c = arg;
	uint8_t *pl;
	size_t len;
	xsnprintf(g_role, sizeof(g_role), "server");
	expect_msg(c->fd, MSG_HELLO, &pl, &len, "hello");
	struct rb b = { pl, len, 0, false };
	uint32_t ver = rb_u32(&b);
	c->seed = rb_u64(&b);
	uint32_t want_idx = rb_u32(&b);
	uint32_t cmtu = rb_u32(&b);
	rb_peer(&b, &c->cp);
	free(pl);
	if (b.err || ver != PROTO_VERSION)
		die("bad HELLO (version %u, expected %u)", ver, PROTO_VERSION);

	pthread_mutex_lock(&S.mu);
	if (want_idx < (uint32_t)opt.clients && !S.used_idx[want_idx]) {
		c->idx = want_idx;
	} else {
		c->idx = 0;
		while (S.used_idx[c->idx])
			c->idx++;
	}
	S.used_idx[c->idx] = true;
	pthread_mutex_unlock(&S.mu);
	xsnprintf(g_role, sizeof(g_role), "server/c%u", c->idx);

	rng_seed(&c->rng, c->seed ^ 0x5E55E55Eull ^ ((uint64_t)c->idx << 32));
	c->mtu = imin(S.d.port_mtu, (int)cmtu);
	if (!bytes_to_mtu(c->mtu))
		die("client sent an invalid MTU %u", cmtu);
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	uint64_t cid = ((uint64_t)c->idx + 1) << 8;
	mbuf_init(&c->rmr[RMR_RDMA0], S.d.pd, RDMA_MR_SIZE, 0, rw, "srv-rdma0", cid + 1);
	mbuf_init(&c->rmr[RMR_RDMA1], S.d.pd, RDMA_MR_SIZE, 1234, rw, "srv-rdma1", cid + 2);
	mbuf_init(&c->rmr[RMR_RO], S.d.pd, RO_MR_SIZE, 4000, IBV_ACCESS_REMOTE_READ, "srv-readonly",
		  cid + 3);
	for (int i = 0; i < RECV_MRS; i++) {
		char nm[24];
		xsnprintf(nm, sizeof(nm), "srv-recv%d", i);
		mbuf_init(&c->recv[i], S.d.pd, RECV_MR_SIZE, (size_t)i * 1111 % 4096,
			  IBV_ACCESS_LOCAL_WRITE, nm, cid + 10 + (uint64_t)i);
	}
	c->priv_off = 64 * ((size_t)c->idx + 1);
	c->priv_val = rnd64(&c->rng);
	*amr_word(c->priv_off) = c->priv_val;
	*amr_word(c->priv_off + 8) = 0;

	qp_create(&S.d, &c->q, &c->rng);
	qp_connect(&S.d, &c->q, &c->cp, c->mtu);

	struct wb w = { 0 };
	wb_u32(&w, c->idx);
	wb_u32(&w, (uint32_t)c->mtu);
	wb_peer(&w, &c->q, &S.d);
	for (int i = 0; i < 3; i++) {
		wb_u64(&w, (uintptr_t)c->rmr[i].addr);
		wb_u32(&w, c->rmr[i].mr->rkey);
		wb_u64(&w, c->rmr[i].len);
	}
	wb_u64(&w, (uintptr_t)S.amr.addr);
	wb_u32(&w, S.amr.mr->rkey);
	wb_u64(&w, S.amr.len);
	wb_u64(&w, 0);                  /* shared counter offset */
	wb_u64(&w, c->priv_off);
	wb_u64(&w, COUNTER_INIT);
	wb_u64(&w, c->priv_val);
	if (!send_msg(c->fd, MSG_HELLO_ACK, &w))
		die("lost the control connection");
	wb_free(&w);
	info("client %u connected: server QPN 0x%x, client QPN 0x%x, MTU %d, seed %" PRIu64
	     ", max_inline %u", c->idx, c->q.qp->qp_num, c->cp.qpn, c->mtu, c->seed, c->q.max_inline);

	for (;;) {
		uint32_t type;
		step("waiting for the client's next request");
		if (!recv_msg(c->fd, &type, &pl, &len)) {
			if (!c->finished) {
				info("client %u closed the control connection before finishing", c->idx);
				c->failed = true;
			}
			break;
		}
		struct rb rb = { pl, len, 0, false };
		switch (type) {
		case MSG_PREP: srv_prep(c, &rb); break;
		case MSG_CHECK: srv_check(c, &rb); break;
		case MSG_ERRPHASE: srv_errphase(c, &rb); break;
		case MSG_FINAL: srv_final(c, &rb); break;
		default: die("protocol error: unexpected message %u", type);
		}
		free(pl);
	}
	srv_mark_done(c);
	qp_destroy(&c->q);
	for (int i = 0; i < 3; i++)
		mbuf_free(&c->rmr[i]);
	for (int i = 0; i < RECV_MRS; i++)
		mbuf_free(&c->recv[i]);
	close(c->fd);
	return NULL;
}

static int run_server(void)
{
	xsnprintf(g_role, sizeof(g_role), "server");
	dev_open(&S.d);
	if (S.d.attr.atomic_cap == IBV_ATOMIC_NONE)
		info("warning: device reports atomic_cap NONE; the atomic checks will fail");
	mbuf_init(&S.amr, S.d.pd, ATOMIC_MR_SIZE, 0,
		  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC, "srv-atomic", 1);
	memset(S.amr.addr, 0, ATOMIC_MR_SIZE);
	*amr_word(0) = COUNTER_INIT;

	int port;
	int lfd = tcp_listen(opt.port, &port);
	info("listening on TCP port %d for %d client(s)", port, opt.clients);
	if (opt.port_file) {
		char tmp[4096];
		xsnprintf(tmp, sizeof(tmp), "%s.tmp", opt.port_file);
		FILE *f = fopen(tmp, "w");
		if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) || rename(tmp, opt.port_file))
			die("cannot write the port file %s", opt.port_file);
	}
	struct sconn *conns = calloc((size_t)opt.clients, sizeof(*conns));
	for (int i = 0; i < opt.clients; i++) {
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR) {
				i--;
				continue;
			}
			die("accept: %s", strerror(errno));
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		conns[i].fd = fd;
		if (pthread_create(&conns[i].th, NULL, srv_thread, &conns[i]))
			die("pthread_create failed");
	}
	close(lfd);
	for (int i = 0; i < opt.clients; i++)
		pthread_join(conns[i].th, NULL);
	bool ok = S.verdict_ok && S.nfailed == 0;
	for (int i = 0; i < opt.clients; i++)
		ok &= !conns[i].failed && conns[i].finished;
	info("%s: %d client(s), shared counter %s", ok ? "PASS" : "FAIL", opt.clients,
	     S.verdict_ok ? "exact" : S.incomplete ? "not checked" : "WRONG");
	return ok ? 0 : 1;
}

/* ======================================================================== */
/* CLIENT                                                                    */
/* ======================================================================== */

struct rinfo {
	uint64_t addr;
	uint32_t rkey;
	uint64_t len;
};

struct cop {
	int kind;
	unsigned wflags;                /* F_* (wire) */
	unsigned sflags;                /* IBV_SEND_* */
	uint32_t len;
	int nsge;
	struct piece sge[MAX_SGE_USE];
	int rmr;
	uint64_t roff;
	uint64_t pid_idx;
	uint32_t imm;
	uint64_t cmp_add, swap;
	uint64_t expect_ret;            /* private atomics: known */
	uint64_t after;
	int chain_of;                   /* index of the READ whose buffer this op sends */
	uint64_t wr_id;
};

struct client {
	int fd;
	struct dev d;
	struct qp_ctx q;
	struct peer sp;
	uint32_t idx;
	uint64_t seed;
	struct rng rng;
	int mtu;
	uint32_t max_msg;
	int max_read_sge;
	struct mbuf lmr[LOCAL_MRS];
	struct rinfo rmr[RMR_COUNT];
	struct mbuf mirror[3];
	uint64_t counter_off, priv_off, counter_init, priv_val;
	uint64_t msg_idx;
	uint32_t batch;
	/* the current batch */
	int nops;
	struct cop ops[MAX_BATCH];
	/* shared-counter FETCH_AND_ADD results */
	struct { uint64_t fetched, add; } *faa;
	size_t nfaa, capfaa;
	/* stats */
	unsigned long cnt[K_MAX];
	unsigned long n_inline, n_unsig, n_fence, n_zero, n_multisge, n_chain, n_readback;
	unsigned long n_mtu_edge, cas_hit, cas_miss, n_faa_shared, batches;
	uint64_t bytes_local, bytes_remote;
	int phases_run, phases_ok;
};

static uint32_t pick_size(struct client *c, uint32_t maxlen)
{
	uint32_t s, mtu = (uint32_t)c->mtu;
	unsigned r = (unsigned)rnd_below(&c->rng, 100);
	if (r < 8) {
		s = 0;
	} else if (r < 28) {
		s = 1 + (uint32_t)rnd_below(&c->rng, 64);
	} else if (r < 53) {
		uint32_t k = 1 + (uint32_t)rnd_below(&c->rng, 16);
		s = k * mtu + (uint32_t)rnd_below(&c->rng, 3) - 1;   /* k*mtu - 1, +0, +1 */
		c->n_mtu_edge++;
	} else if (r < 73) {
		s = 65 + (uint32_t)rnd_below(&c->rng, 16384 - 65);
	} else if (r < 88) {
		s = 16384 + (uint32_t)rnd_below(&c->rng, (256u << 10) - 16384);
	} else if (r < 96) {
		s = (256u << 10) + (uint32_t)rnd_below(&c->rng, 768u << 10);
	} else {
		s = rnd_pct(&c->rng, 25) ? c->max_msg
		    : (1u << 20) + (uint32_t)rnd_below(&c->rng, c->max_msg - (1u << 20) + 1);
	}
	return s < maxlen ? s : maxlen;
}

/* Place a local buffer of len bytes as 1..maxsge pieces over the local MRs. */
static bool place_local(struct client *c, struct cop *o, uint32_t len, int maxsge, size_t align)
{
	uint32_t parts[MAX_SGE_USE];
	int n;
	if (len == 0 && rnd_pct(&c->rng, 50)) {
		o->nsge = 0;
		return true;
	}
	n = split_len(&c->rng, len, maxsge, parts);
	for (int i = 0; i < n; i++) {
		bool ok = false;
		int start = (int)rnd_below(&c->rng, LOCAL_MRS);
		for (int t = 0; t < LOCAL_MRS && !ok; t++) {
			int mi = (start + t) % LOCAL_MRS;
			size_t off;
			if (mbuf_alloc(&c->lmr[mi], &c->rng, parts[i], align, &off)) {
				o->sge[i] = (struct piece){ mi, off, parts[i] };
				ok = true;
			}
		}
		if (!ok)
			return false;
	}
	o->nsge = n;
	return true;
}

static void fill_local(struct client *c, struct cop *o)
{
	uint64_t pid = make_pid(c->seed, c->idx, o->pid_idx), pos = 0;
	for (int i = 0; i < o->nsge; i++) {
		pat_fill(c->lmr[o->sge[i].mr].addr + o->sge[i].off, o->sge[i].len, pid, pos);
		pos += o->sge[i].len;
	}
}

static bool place_remote(struct client *c, int rmr, uint32_t len, uint64_t *off)
{
	size_t o;
	if (!mbuf_alloc(&c->mirror[rmr], &c->rng, len, 1, &o))
		return false;
	*off = o;
	return true;
}

/* Generate one batch.  burst = only shared-counter FETCH_AND_ADDs. */
static void gen_batch(struct client *c, bool burst)
{
	for (int i = 0; i < LOCAL_MRS; i++)
		mbuf_reset_alloc(&c->lmr[i]);
	for (int i = 0; i < 3; i++)
		mbuf_reset_alloc(&c->mirror[i]);
	int want = 1 + (int)rnd_below(&c->rng, MAX_BATCH);
	if (burst)
		want = MAX_BATCH;
	uint32_t budget = BATCH_BUDGET;
	int n = 0, tries = 0;
	int send_sge = c->q.max_send_sge;
	int read_sge = imin(c->max_read_sge, send_sge);
	bool atomics = c->d.attr.atomic_cap != IBV_ATOMIC_NONE;
	while (n < want && tries++ < 64) {
		struct cop *o = &c->ops[n];
		memset(o, 0, sizeof(*o));
		o->chain_of = -1;
		unsigned w = (unsigned)rnd_below(&c->rng, 100);
		int kind;
		bool chain = false, readback = false;
		if (burst)
			kind = K_FAA;
		else if (w < 15) kind = K_SEND;
		else if (w < 27) kind = K_SEND_IMM;
		else if (w < 42) kind = K_WRITE;
		else if (w < 54) kind = K_WRITE_IMM;
		else if (w < 68) kind = K_READ;
		else if (w < 73) { kind = K_READ; readback = true; }
		else if (w < 78) { kind = K_READ; chain = true; }
		else if (w < 86) kind = K_CAS;
		else kind = K_FAA;
		if ((kind == K_CAS || kind == K_FAA) && !atomics)
			continue;
		if (chain && n + 2 > want)
			continue;
		o->kind = kind;
		if (kind == K_CAS || kind == K_FAA) {
			o->len = 8;
			size_t align = rnd_pct(&c->rng, 75) ? 8 : 1;
			if (!place_local(c, o, 8, 1, align) || o->nsge != 1) {
				/* place_local may choose no SGE only for zero length */
				continue;
			}
			bool shared = kind == K_FAA && (burst || rnd_pct(&c->rng, 60));
			o->rmr = RMR_ATOMIC;
			if (shared) {
				o->wflags |= F_SHARED;
				o->roff = c->counter_off;
				o->cmp_add = 1 + rnd_below(&c->rng, 65536);
			} else {
				o->roff = c->priv_off;
				o->expect_ret = c->priv_val;
				if (kind == K_FAA) {
					o->cmp_add = rnd64(&c->rng);
					o->after = c->priv_val + o->cmp_add;
				} else {
					bool hit = rnd_pct(&c->rng, 50);
					o->cmp_add = hit ? c->priv_val
						     : c->priv_val ^ (1ull << rnd_below(&c->rng, 64));
					o->swap = rnd64(&c->rng);
					o->after = hit ? o->swap : c->priv_val;
				}
				c->priv_val = o->after;
			}
			/* the local result buffer starts as canary */
			n++;
			continue;
		}
		if (readback) {
			/* READ back a region written earlier in this batch */
			int src = -1;
			for (int i = 0; i < n; i++)
				if ((c->ops[i].kind == K_WRITE || c->ops[i].kind == K_WRITE_IMM) &&
				    c->ops[i].len > 0 && c->ops[i].len <= budget)
					src = i;
			if (src < 0)
				continue;
			o->wflags |= F_READBACK;
			o->len = c->ops[src].len;
			o->rmr = c->ops[src].rmr;
			o->roff = c->ops[src].roff;
			o->pid_idx = c->ops[src].pid_idx;
			if (!place_local(c, o, o->len, read_sge, 1))
				continue;
			budget -= o->len;
			n++;
			continue;
		}
		uint32_t maxlen = c->max_msg < budget ? c->max_msg : budget;
		int rmr = RMR_RDMA0 + (int)rnd_below(&c->rng, 2);
		if (kind == K_READ && !chain && rnd_pct(&c->rng, 20)) {
			rmr = RMR_RO;
			if (maxlen > RO_MR_SIZE - 2 * GUARD)
				maxlen = RO_MR_SIZE - 2 * GUARD;
		}
		o->len = pick_size(c, maxlen);
		o->pid_idx = c->msg_idx++;
		bool is_write = kind == K_WRITE || kind == K_WRITE_IMM;
		if (kind == K_SEND_IMM || kind == K_WRITE_IMM)
			o->imm = (uint32_t)rnd64(&c->rng);
		if (is_write || kind == K_READ) {
			o->rmr = rmr;
			if (!place_remote(c, rmr, o->len, &o->roff))
				continue;
		}
		int maxsge = kind == K_READ ? read_sge : send_sge;
		if (!place_local(c, o, o->len, maxsge, 1))
			continue;
		if ((kind != K_READ) && o->len <= c->q.max_inline && rnd_pct(&c->rng, 50))
			o->sflags |= IBV_SEND_INLINE;
		if (kind == K_READ && rnd_pct(&c->rng, 25))
			o->sflags |= IBV_SEND_FENCE;
		else if (rnd_pct(&c->rng, 8))
			o->sflags |= IBV_SEND_FENCE;
		if ((kind == K_SEND || kind == K_SEND_IMM) && rnd_pct(&c->rng, 20))
			o->sflags |= IBV_SEND_SOLICITED;
		if (kind != K_READ)
			fill_local(c, o);
		budget -= o->len;
		n++;
		if (chain) {
			/* a fenced SEND or WRITE of the buffer the READ fills */
			struct cop *s = &c->ops[n];
			memset(s, 0, sizeof(*s));
			s->kind = rnd_pct(&c->rng, 50) ? K_WRITE : K_SEND;
			s->wflags = F_CHAINED;
			s->sflags = IBV_SEND_FENCE;
			s->len = o->len;
			s->pid_idx = o->pid_idx;
			s->nsge = o->nsge;
			memcpy(s->sge, o->sge, sizeof(s->sge));
			s->chain_of = n - 1;
			if (s->kind == K_WRITE) {
				s->rmr = RMR_RDMA0 + (int)rnd_below(&c->rng, 2);
				if (!place_remote(c, s->rmr, s->len, &s->roff))
					s->kind = K_SEND;
			}
			n++;
		}
	}
	c->nops = n;
	/* signaling: at least every SIGNAL_EVERY WRs, and always the last */
	int run = 0;
	for (int i = 0; i < n; i++) {
		struct cop *o = &c->ops[i];
		bool sig = burst ? rnd_pct(&c->rng, 30) : rnd_pct(&c->rng, 50);
		if (run >= SIGNAL_EVERY - 1 || i == n - 1)
			sig = true;
		if (sig) {
			o->sflags |= IBV_SEND_SIGNALED;
			run = 0;
		} else {
			run++;
		}
		o->wr_id = 0xB000000000000000ull | ((uint64_t)c->batch << 8) | (uint64_t)i;
	}
}

static void describe(const struct cop *o, int i, char *buf, size_t sz)
{
	xsnprintf(buf, sz, "op %d %s%s%s len %u sge %d%s%s%s%s", i, kind_name[o->kind],
		 (o->wflags & F_READBACK) ? " (read-back of an earlier WRITE)" : "",
		 (o->wflags & F_CHAINED) ? " (sends data of a preceding READ)" : "",
		 o->len, o->nsge,
		 (o->sflags & IBV_SEND_INLINE) ? " inline" : "",
		 (o->sflags & IBV_SEND_FENCE) ? " fence" : "",
		 (o->sflags & IBV_SEND_SIGNALED) ? " signaled" : " unsignaled",
		 (o->wflags & F_SHARED) ? " shared-counter" : "");
}

static int wc_opcode_for(int kind)
{
	switch (kind) {
	case K_SEND: case K_SEND_IMM: return IBV_WC_SEND;
	case K_WRITE: case K_WRITE_IMM: return IBV_WC_RDMA_WRITE;
	case K_READ: return IBV_WC_RDMA_READ;
	case K_CAS: return IBV_WC_COMP_SWAP;
	case K_FAA: return IBV_WC_FETCH_ADD;
	}
	return -1;
}

static bool post_batch(struct client *c, struct report *rep)
{
	struct ibv_send_wr wr[MAX_BATCH];
	struct ibv_sge sg[MAX_BATCH][MAX_SGE_USE];
	for (int i = 0; i < c->nops; i++) {
		struct cop *o = &c->ops[i];
		struct ibv_send_wr *w = &wr[i];
		memset(w, 0, sizeof(*w));
		w->wr_id = o->wr_id;
		w->num_sge = o->nsge;
		w->sg_list = o->nsge ? sg[i] : NULL;
		w->send_flags = o->sflags;
		for (int j = 0; j < o->nsge; j++) {
			struct mbuf *m = &c->lmr[o->sge[j].mr];
			sg[i][j].addr = (uintptr_t)(m->addr + o->sge[j].off);
			sg[i][j].length = o->sge[j].len;
			sg[i][j].lkey = m->mr->lkey;
		}
		const struct rinfo *ri = &c->rmr[o->rmr];
		switch (o->kind) {
		case K_SEND: w->opcode = IBV_WR_SEND; break;
		case K_SEND_IMM: w->opcode = IBV_WR_SEND_WITH_IMM; w->imm_data = htonl(o->imm); break;
		case K_WRITE: w->opcode = IBV_WR_RDMA_WRITE; break;
		case K_WRITE_IMM: w->opcode = IBV_WR_RDMA_WRITE_WITH_IMM; w->imm_data = htonl(o->imm); break;
		case K_READ: w->opcode = IBV_WR_RDMA_READ; break;
		case K_CAS: w->opcode = IBV_WR_ATOMIC_CMP_AND_SWP; break;
		case K_FAA: w->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; break;
		}
		if (o->kind == K_WRITE || o->kind == K_WRITE_IMM || o->kind == K_READ) {
			w->wr.rdma.remote_addr = ri->addr + o->roff;
			w->wr.rdma.rkey = ri->rkey;
		} else if (o->kind == K_CAS || o->kind == K_FAA) {
			w->wr.atomic.remote_addr = ri->addr + o->roff;
			w->wr.atomic.rkey = ri->rkey;
			w->wr.atomic.compare_add = o->cmp_add;
			w->wr.atomic.swap = o->swap;
		}
	}
	int i = 0;
	while (i < c->nops) {
		int k = c->nops - i;
		if (k > 1 && rnd_pct(&c->rng, 30))
			k = 1 + (int)rnd_below(&c->rng, (uint64_t)k);
		for (int j = i; j < i + k - 1; j++)
			wr[j].next = &wr[j + 1];
		wr[i + k - 1].next = NULL;
		struct ibv_send_wr *bad = NULL;
		int rc = ibv_post_send(c->q.qp, &wr[i], &bad);
		if (rc) {
			char d[160];
			int bi = bad ? (int)(bad - wr) : -1;
			if (bi >= 0 && bi < c->nops)
				describe(&c->ops[bi], bi, d, sizeof(d));
			else
				xsnprintf(d, sizeof(d), "?");
			rep_fail(rep, "batch %u: ibv_post_send failed: %s; bad_wr = %s", c->batch,
				 strerror(rc), d);
			return false;
		}
		i += k;
	}
	/* inline data must have been copied: overwrite the source at once */
	for (int i2 = 0; i2 < c->nops; i2++) {
		struct cop *o = &c->ops[i2];
		if (o->sflags & IBV_SEND_INLINE)
			for (int j = 0; j < o->nsge; j++)
				mbuf_restore(&c->lmr[o->sge[j].mr], o->sge[j].off, o->sge[j].len);
	}
	return true;
}

static bool poll_batch(struct client *c, struct report *rep)
{
	for (int i = 0; i < c->nops; i++) {
		struct cop *o = &c->ops[i];
		if (!(o->sflags & IBV_SEND_SIGNALED))
			continue;
		char d[200];
		describe(o, i, d, sizeof(d));
		struct ibv_wc wc;
		int rc = poll_one(c->q.scq, &wc, CQ_TIMEOUT_S);
		if (rc <= 0) {
			rep_fail(rep, "batch %u %s: %s", c->batch, d, rc < 0 ? "ibv_poll_cq failed"
				 : "no send completion within the timeout");
			return false;
		}
		char ws[320];
		wc_str(ws, sizeof(ws), &wc);
		int nf = rep->nfail;
		if (wc.wr_id != o->wr_id) {
			int other = (wc.wr_id >> 8) == (o->wr_id >> 8) ? (int)(wc.wr_id & 0xff) : -1;
			char od[200] = "a WR not of this batch";
			if (other >= 0 && other < c->nops)
				describe(&c->ops[other], other, od, sizeof(od));
			if (wc.status != IBV_WC_SUCCESS && other >= 0 && other < i) {
				/* an unsignaled WR that failed completes anyway: legitimate */
				rep_fail(rep, "batch %u %s: status %s (%d); completion %s", c->batch, od,
					 ibv_wc_status_str(wc.status), wc.status, ws);
				return false;
			}
			rep_fail(rep, "batch %u %s: completion has wr_id 0x%" PRIx64 " (%s), expected 0x%"
				 PRIx64 "; completions must be in order and only for signaled WRs", c->batch,
				 d, wc.wr_id, od, o->wr_id);
		}
		if (wc.status != IBV_WC_SUCCESS) {
			rep_fail(rep, "batch %u %s: status %s (%d); completion %s", c->batch, d,
				 ibv_wc_status_str(wc.status), wc.status, ws);
			return false;
		}
		int want = wc_opcode_for(o->kind);
		if ((int)wc.opcode != want)
			rep_fail(rep, "batch %u %s: opcode %s (%d), expected %s", c->batch, d,
				 wc_opcode_name(wc.opcode), wc.opcode, wc_opcode_name(want));
		if (wc.qp_num != c->q.qp->qp_num)
			rep_fail(rep, "batch %u %s: qp_num 0x%x, expected 0x%x", c->batch, d, wc.qp_num,
				 c->q.qp->qp_num);
		if (wc.vendor_err)
			rep_fail(rep, "batch %u %s: vendor_err 0x%x on success", c->batch, d, wc.vendor_err);
		if (o->kind == K_READ && wc.byte_len != o->len)
			rep_fail(rep, "batch %u %s: byte_len %u, expected %u (the READ length)", c->batch,
				 d, wc.byte_len, o->len);
		if ((o->kind == K_CAS || o->kind == K_FAA) && wc.byte_len != 8)
			rep_fail(rep, "batch %u %s: byte_len %u, expected 8", c->batch, d, wc.byte_len);
		if (rep->nfail != nf)
			rep_fail(rep, "batch %u %s: the completion was %s", c->batch, d, ws);
	}
	struct ibv_wc wc;
	if (ibv_poll_cq(c->q.scq, 1, &wc) > 0) {
		char ws[320];
		wc_str(ws, sizeof(ws), &wc);
		rep_fail(rep, "batch %u: unexpected extra send completion %s", c->batch, ws);
	}
	return rep->nfail == 0;
}

static void verify_local(struct client *c, struct report *rep)
{
	for (int i = 0; i < c->nops; i++) {
		struct cop *o = &c->ops[i];
		char d[200], w[320];
		describe(o, i, d, sizeof(d));
		uint64_t pid = make_pid(c->seed, c->idx, o->pid_idx), pos = 0;
		if (o->chain_of >= 0)
			continue;               /* its buffer is the READ's, checked there */
		for (int j = 0; j < o->nsge; j++) {
			struct piece *p = &o->sge[j];
			struct mbuf *m = &c->lmr[p->mr];
			xsnprintf(w, sizeof(w), "batch %u %s: local SGE %d/%d (%s+%zu, %u bytes)", c->batch,
				 d, j, o->nsge, m->name, p->off, p->len);
			switch (o->kind) {
			case K_READ:
				if (check_pat(rep, w, m->addr + p->off, p->len, pid, pos,
					      "remote data (pattern)"))
					c->bytes_local += p->len;
				break;
			case K_CAS:
			case K_FAA: {
				uint64_t got;
				memcpy(&got, m->addr + p->off, 8);
				if (o->wflags & F_SHARED) {
					if (c->nfaa) {
						uint64_t prev = c->faa[c->nfaa - 1].fetched + c->faa[c->nfaa - 1].add;
						if (got < prev)
							rep_fail(rep, "%s: shared counter returned 0x%016" PRIx64
								 ", but this client's previous FETCH_AND_ADD already"
								 " made it at least 0x%016" PRIx64, w, got, prev);
					} else if (got < c->counter_init) {
						rep_fail(rep, "%s: shared counter returned 0x%016" PRIx64
							 " below its initial value 0x%016" PRIx64, w, got,
							 c->counter_init);
					}
					if (c->nfaa == c->capfaa) {
						c->capfaa = c->capfaa ? c->capfaa * 2 : 1024;
						c->faa = realloc(c->faa, c->capfaa * sizeof(*c->faa));
						if (!c->faa)
							die("out of memory");
					}
					c->faa[c->nfaa].fetched = got;
					c->faa[c->nfaa].add = o->cmp_add;
					c->nfaa++;
					c->n_faa_shared++;
				} else if (got != o->expect_ret) {
					rep_fail(rep, "%s: returned original value 0x%016" PRIx64
						 ", expected 0x%016" PRIx64 " (%s)", w, got, o->expect_ret,
						 o->kind == K_CAS ? (o->cmp_add == o->expect_ret ?
						 "compare matched: swap must happen" :
						 "compare differs: no swap") : "add");
				}
				c->bytes_local += 8;
				break;
			}
			default:
				if (o->sflags & IBV_SEND_INLINE)
					break;  /* overwritten after posting; restored below */
				check_pat(rep, w, m->addr + p->off, p->len, pid, pos,
					  "source data (the send buffer must not change)");
				break;
			}
			mbuf_check_guards(rep, w, m, p->off, p->len);
			pos += p->len;
		}
	}
	for (int i = 0; i < c->nops; i++) {
		struct cop *o = &c->ops[i];
		for (int j = 0; j < o->nsge; j++)
			mbuf_restore(&c->lmr[o->sge[j].mr], o->sge[j].off, o->sge[j].len);
	}
}

/* Receive a RESULT; false (and the server's text printed) on failure. */
static bool get_result(struct client *c, const char *ctx, uint64_t *bytes)
{
	uint8_t *pl;
	size_t len;
	expect_msg(c->fd, MSG_RESULT, &pl, &len, ctx);
	struct rb b = { pl, len, 0, false };
	uint32_t ok = rb_u32(&b);
	uint64_t by = rb_u64(&b);
	(void)rb_u64(&b);
	uint32_t tl = rb_u32(&b);
	char *text = calloc(1, (size_t)tl + 1);
	rb_get(&b, text, tl);
	if (bytes)
		*bytes = by;
	if (!ok)
		fprintf(stderr, "[%s] FAIL: %s: the server reports:\n%s", g_role, ctx, text);
	free(text);
	free(pl);
	return ok && !b.err;
}

static bool run_batch(struct client *c, bool burst)
{
	struct report rep = { 0 };
	gen_batch(c, burst);
	struct wb b = { 0 };
	wb_u32(&b, c->batch);
	wb_u32(&b, (uint32_t)c->nops);
	for (int i = 0; i < c->nops; i++) {
		struct cop *o = &c->ops[i];
		struct sop s = { o->kind, o->wflags, o->rmr, o->roff, o->len, o->pid_idx, o->imm, o->after };
		wb_sop(&b, &s);
	}
	if (!send_msg(c->fd, MSG_PREP, &b))
		die("lost the control connection");
	wb_free(&b);
	uint8_t *pl;
	size_t len;
	uint32_t type;
	step("batch %u: waiting for the server to prepare", c->batch);
	if (!recv_msg(c->fd, &type, &pl, &len))
		die("batch %u: control connection closed by the server", c->batch);
	free(pl);
	if (type == MSG_RESULT)
		die("batch %u: the server could not prepare the batch (see its output)", c->batch);
	if (type != MSG_READY)
		die("protocol error: %u instead of READY", type);
	if (opt.verbose) {
		for (int i = 0; i < c->nops; i++) {
			char d[200];
			describe(&c->ops[i], i, d, sizeof(d));
			vinfo("batch %u %s", c->batch, d);
		}
	}
	step("batch %u: ibv_post_send of %d WRs", c->batch, c->nops);
	bool ok = post_batch(c, &rep) && poll_batch(c, &rep);
	if (ok)
		verify_local(c, &rep);
	struct wb ck = { 0 };
	wb_u32(&ck, ok && rep.nfail == 0);
	if (!send_msg(c->fd, MSG_CHECK, &ck))
		die("lost the control connection");
	wb_free(&ck);
	uint64_t rbytes = 0;
	char ctx[64];
	xsnprintf(ctx, sizeof(ctx), "batch %u", c->batch);
	bool rok = get_result(c, ctx, &rbytes);
	if (!ok || !rok || rep.nfail) {
		fprintf(stderr, "[%s] batch %u was (seed %" PRIu64 ", client %u):\n", g_role, c->batch,
			c->seed, c->idx);
		for (int i = 0; i < c->nops; i++) {
			char d[200];
			describe(&c->ops[i], i, d, sizeof(d));
			fprintf(stderr, "    %s remote %d+%" PRIu64 "\n", d, c->ops[i].rmr, c->ops[i].roff);
		}
		return false;
	}
	c->bytes_remote += rbytes;
	for (int i = 0; i < c->nops; i++) {
		struct cop *o = &c->ops[i];
		c->cnt[o->kind]++;
		c->n_inline += !!(o->sflags & IBV_SEND_INLINE);
		c->n_unsig += !(o->sflags & IBV_SEND_SIGNALED);
		c->n_fence += !!(o->sflags & IBV_SEND_FENCE);
		c->n_zero += o->len == 0 && o->kind != K_CAS && o->kind != K_FAA;
		c->n_multisge += o->nsge > 1;
		c->n_chain += !!(o->wflags & F_CHAINED);
		c->n_readback += !!(o->wflags & F_READBACK);
		if (o->kind == K_CAS)
			*(o->cmp_add == o->expect_ret ? &c->cas_hit : &c->cas_miss) += 1;
	}
	c->batches++;
	c->batch++;
	return true;
}

/* ------------------------------------------------------------------------ */
/* Error phases                                                              */

struct ewant {
	uint64_t wr_id;
	enum ibv_wc_status st;
};

/* A key that is not any of ours.  Flip bits of the low byte first: on most
 * implementations (rxe, mlx5) that keeps the MR index and changes only the
 * key tag, the case a lazy index-only lookup would wrongly accept. */
static uint32_t bad_key(uint32_t good, const uint32_t *avoid, int navoid)
{
	static const uint32_t flips[] = { 0x80, 0x40, 0x01, 0x5A5A00, 0xA5A5A5 };
	for (uint32_t i = 0;; i++) {
		uint32_t cand = good ^ (i < 5 ? flips[i] : i * 0x01000193u);
		bool clash = false;
		for (int i = 0; i < navoid; i++)
			clash |= cand == avoid[i];
		if (!clash)
			return cand;
	}
}

static void mk_rdma(struct ibv_send_wr *w, struct ibv_sge *s, uint64_t id, enum ibv_wr_opcode opc,
		    void *laddr, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	memset(w, 0, sizeof(*w));
	s->addr = (uintptr_t)laddr;
	s->length = len;
	s->lkey = lkey;
	w->wr_id = id;
	w->opcode = opc;
	w->sg_list = s;
	w->num_sge = 1;
	w->send_flags = IBV_SEND_SIGNALED;
	w->wr.rdma.remote_addr = raddr;
	w->wr.rdma.rkey = rkey;
}

static bool run_errphase(struct client *c, int phase)
{
	struct report rep = { 0 };
	char tag[64];
	xsnprintf(tag, sizeof(tag), "error phase %s", ep_name[phase]);
	info("%s: start (fresh QP pair)", tag);
	struct qp_ctx eq;
	qp_create(&c->d, &eq, &c->rng);
	struct wb b = { 0 };
	wb_u32(&b, (uint32_t)phase);
	wb_peer(&b, &eq, &c->d);
	if (!send_msg(c->fd, MSG_ERRPHASE, &b))
		die("lost the control connection");
	wb_free(&b);
	uint8_t *pl;
	size_t len;
	expect_msg(c->fd, MSG_ERRPHASE_ACK, &pl, &len, tag);
	struct rb rb = { pl, len, 0, false };
	struct peer sp;
	rb_peer(&rb, &sp);
	free(pl);
	qp_connect(&c->d, &eq, &sp, c->mtu);

	uint32_t mtu = (uint32_t)c->mtu;
	struct mbuf *l0 = &c->lmr[0], *l1 = &c->lmr[1];
	uint8_t *src = l0->addr + (1u << 20);
	uint8_t *dst = l1->addr + (1u << 20);
	uint32_t srclen = 4 * mtu + 64;
	uint64_t pid = make_pid(c->seed, c->idx, 0xE000 + (uint64_t)phase);
	pat_fill(src, srclen, pid, 0);
	const struct rinfo *r0 = &c->rmr[RMR_RDMA0], *r1 = &c->rmr[RMR_RDMA1],
			   *ro = &c->rmr[RMR_RO], *ra = &c->rmr[RMR_ATOMIC];
	uint32_t rkeys[RMR_COUNT] = { r0->rkey, r1->rkey, ro->rkey, ra->rkey };
	uint32_t lkeys[LOCAL_MRS];
	for (int i = 0; i < LOCAL_MRS; i++)
		lkeys[i] = c->lmr[i].mr->lkey;

	struct ibv_send_wr wr[3];
	struct ibv_sge sg[3];
	struct ewant want[3];
	int n = 0;
	uint64_t id = 0xEE00000000000000ull | ((uint64_t)phase << 8);
	/* every phase ends with valid WRs that must be flushed, not executed */
	switch (phase) {
	case EP_BAD_RKEY_WRITE:
		mk_rdma(&wr[n], &sg[n], id + (uint64_t)n, IBV_WR_RDMA_WRITE, src, 3 * mtu + 7,
			l0->mr->lkey, r0->addr + 4096, bad_key(r0->rkey, rkeys, RMR_COUNT));
		want[n++] = (struct ewant){ id, IBV_WC_REM_ACCESS_ERR };
		break;
	case EP_READ_BEYOND_MR: {
		uint32_t l = 2 * mtu + 5;
		mk_rdma(&wr[n], &sg[n], id + (uint64_t)n, IBV_WR_RDMA_READ, dst, l, l1->mr->lkey,
			r0->addr + r0->len - l + 1, r0->rkey);
		want[n++] = (struct ewant){ id, IBV_WC_REM_ACCESS_ERR };
		break;
	}
	case EP_WRITE_BEFORE_MR:
		/* srv-rdma1 starts 1234 bytes into its allocation: addr-8 is still ours */
		mk_rdma(&wr[n], &sg[n], id + (uint64_t)n, IBV_WR_RDMA_WRITE, src, 16, l0->mr->lkey,
			r1->addr - 8, r1->rkey);
		want[n++] = (struct ewant){ id, IBV_WC_REM_ACCESS_ERR };
		break;
	case EP_WRITE_READONLY_MR:
		mk_rdma(&wr[n], &sg[n], id + (uint64_t)n, IBV_WR_RDMA_WRITE, src, 128, l0->mr->lkey,
			ro->addr + 256, ro->rkey);
		want[n++] = (struct ewant){ id, IBV_WC_REM_ACCESS_ERR };
		break;
	case EP_ATOMIC_NO_ACCESS:
	case EP_ATOMIC_MISALIGNED:
		memset(&wr[n], 0, sizeof(wr[n]));
		sg[n] = (struct ibv_sge){ (uintptr_t)dst, 8, l1->mr->lkey };
		wr[n].wr_id = id;
		wr[n].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		wr[n].sg_list = &sg[n];
		wr[n].num_sge = 1;
		wr[n].send_flags = IBV_SEND_SIGNALED;
		wr[n].wr.atomic.compare_add = 1;
		if (phase == EP_ATOMIC_NO_ACCESS) {
			wr[n].wr.atomic.remote_addr = r0->addr + 8192;  /* MR without REMOTE_ATOMIC */
			wr[n].wr.atomic.rkey = r0->rkey;
			want[n++] = (struct ewant){ id, IBV_WC_REM_ACCESS_ERR };
		} else {
			wr[n].wr.atomic.remote_addr = ra->addr + c->priv_off + 4;
			wr[n].wr.atomic.rkey = ra->rkey;
			want[n++] = (struct ewant){ id, IBV_WC_REM_INV_REQ_ERR };
		}
		break;
	case EP_SEND_TOO_LONG:
		mk_rdma(&wr[n], &sg[n], id + (uint64_t)n, IBV_WR_SEND, src, 2 * mtu + 1, l0->mr->lkey, 0, 0);
		want[n++] = (struct ewant){ id, IBV_WC_REM_INV_REQ_ERR };
		break;
	case EP_BAD_LKEY:
		mk_rdma(&wr[n], &sg[n], id + (uint64_t)n, IBV_WR_RDMA_WRITE, src, 1000,
			bad_key(l0->mr->lkey, lkeys, LOCAL_MRS), r0->addr + 4096, r0->rkey);
		want[n++] = (struct ewant){ id, IBV_WC_LOC_PROT_ERR };
		break;
	}
	/* followers: a valid WRITE and a valid READ, both must flush */
	mk_rdma(&wr[n], &sg[n], id + (uint64_t)n, IBV_WR_RDMA_WRITE, src + 64, 3 * mtu, l0->mr->lkey,
		r1->addr + 65536, r1->rkey);
	want[n] = (struct ewant){ id + (uint64_t)n, IBV_WC_WR_FLUSH_ERR };
	n++;
	mk_rdma(&wr[n], &sg[n], id + (uint64_t)n, IBV_WR_RDMA_READ, dst + 65536, 100, l1->mr->lkey,
		r1->addr + 131072, r1->rkey);
	want[n] = (struct ewant){ id + (uint64_t)n, IBV_WC_WR_FLUSH_ERR };
	n++;
	for (int i = 0; i < n - 1; i++)
		wr[i].next = &wr[i + 1];
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(eq.qp, &wr[0], &bad);
	if (rc) {
		rep_fail(&rep, "%s: ibv_post_send refused the list (%s, bad_wr %td); the error must be "
			 "reported as a completion", tag, strerror(rc), bad ? bad - wr : -1);
	} else {
		for (int i = 0; i < n; i++) {
			struct ibv_wc wc;
			int pr = poll_one(eq.scq, &wc, ERR_CQ_TIMEOUT_S);
			if (pr <= 0) {
				rep_fail(&rep, "%s: no completion for WR %d (expected %s)", tag, i,
					 ibv_wc_status_str(want[i].st));
				break;
			}
			char ws[320];
			wc_str(ws, sizeof(ws), &wc);
			if (wc.wr_id != want[i].wr_id || wc.status != want[i].st ||
			    wc.qp_num != eq.qp->qp_num)
				rep_fail(&rep, "%s: completion %d is %s; expected wr_id 0x%" PRIx64
					 " status %s (%d) qp_num 0x%x", tag, i, ws, want[i].wr_id,
					 ibv_wc_status_str(want[i].st), want[i].st, eq.qp->qp_num);
			else
				vinfo("%s: completion %d %s as expected", tag, i, ibv_wc_status_str(wc.status));
		}
		struct ibv_wc wc;
		if (ibv_poll_cq(eq.scq, 1, &wc) > 0) {
			char ws[320];
			wc_str(ws, sizeof(ws), &wc);
			rep_fail(&rep, "%s: unexpected extra completion %s", tag, ws);
		}
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qia;
		if (ibv_query_qp(eq.qp, &qa, IBV_QP_STATE, &qia))
			rep_fail(&rep, "%s: ibv_query_qp failed", tag);
		else if (qa.qp_state != IBV_QPS_ERR)
			rep_fail(&rep, "%s: requester QP state %s after an error completion, expected ERR",
				 tag, qp_state_name(qa.qp_state));
	}
	/* the flushed READ must not have written its local buffer */
	mbuf_check_canary(&rep, "flushed RDMA_READ destination", l1, (1u << 20) + 65536, 100);
	if (!send_msg(c->fd, MSG_ERRCHECK, NULL))
		die("lost the control connection");
	bool sok = get_result(c, tag, NULL);
	qp_destroy(&eq);
	mbuf_restore(l0, 1u << 20, srclen);
	mbuf_restore(l1, 1u << 20, 65536 + 100);
	c->phases_run++;
	bool ok = sok && rep.nfail == 0;
	if (ok)
		c->phases_ok++;
	info("%s: %s", tag, ok ? "passed" : "FAILED");
	return ok;
}

static int run_client(void)
{
	struct client *c = calloc(1, sizeof(*c));
	xsnprintf(g_role, sizeof(g_role), "client");
	if (!opt.seed_set)
		opt.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
	c->seed = opt.seed;
	dev_open(&c->d);
	struct rng boot;
	rng_seed(&boot, c->seed ^ (uint64_t)getpid() ^ (uint64_t)(now_s() * 1e6));
	qp_create(&c->d, &c->q, &boot);

	c->fd = tcp_connect(opt.host, opt.port);
	struct wb b = { 0 };
	wb_u32(&b, PROTO_VERSION);
	wb_u64(&b, c->seed);
	wb_u32(&b, opt.client_index < 0 ? 0xffffffffu : (uint32_t)opt.client_index);
	wb_u32(&b, (uint32_t)c->d.port_mtu);
	wb_peer(&b, &c->q, &c->d);
	if (!send_msg(c->fd, MSG_HELLO, &b))
		die("lost the control connection");
	wb_free(&b);
	uint8_t *pl;
	size_t len;
	expect_msg(c->fd, MSG_HELLO_ACK, &pl, &len, "hello");
	struct rb rb = { pl, len, 0, false };
	c->idx = rb_u32(&rb);
	c->mtu = (int)rb_u32(&rb);
	rb_peer(&rb, &c->sp);
	for (int i = 0; i < RMR_COUNT; i++) {
		c->rmr[i].addr = rb_u64(&rb);
		c->rmr[i].rkey = rb_u32(&rb);
		c->rmr[i].len = rb_u64(&rb);
	}
	c->counter_off = rb_u64(&rb);
	c->priv_off = rb_u64(&rb);
	c->counter_init = rb_u64(&rb);
	c->priv_val = rb_u64(&rb);
	free(pl);
	if (rb.err)
		die("short HELLO_ACK");
	xsnprintf(g_role, sizeof(g_role), "client %u", c->idx);
	rng_seed(&c->rng, mix64(c->seed) ^ ((uint64_t)c->idx << 32));
	qp_connect(&c->d, &c->q, &c->sp, c->mtu);

	c->max_msg = MAX_MSG;
	if (c->d.port.max_msg_sz && c->d.port.max_msg_sz < c->max_msg)
		c->max_msg = c->d.port.max_msg_sz;
	if (c->max_msg < (2u << 20))
		die("port max_msg_sz %u is too small for this test", c->d.port.max_msg_sz);
	c->max_read_sge = c->d.attr.max_sge_rd > 0 ? imin(MAX_SGE_USE, c->d.attr.max_sge_rd) : 1;
	mbuf_mirror(&c->mirror[RMR_RDMA0], c->rmr[RMR_RDMA0].len, "srv-rdma0");
	mbuf_mirror(&c->mirror[RMR_RDMA1], c->rmr[RMR_RDMA1].len, "srv-rdma1");
	mbuf_mirror(&c->mirror[RMR_RO], c->rmr[RMR_RO].len, "srv-readonly");
	for (int i = 0; i < LOCAL_MRS; i++) {
		char nm[24];
		xsnprintf(nm, sizeof(nm), "cli-local%d", i);
		mbuf_init(&c->lmr[i], c->d.pd, LOCAL_MR_SIZE, (size_t)(i * 1111 + 7) % 4096,
			  IBV_ACCESS_LOCAL_WRITE, nm, 0xC1000ull + ((uint64_t)c->idx << 4) + (uint64_t)i);
	}
	info("seed %" PRIu64 " (reproduce with -s %" PRIu64 " -i %u), client %u, %ld batches, "
	     "MTU %d, QPN 0x%x -> server QPN 0x%x, max_inline %u, send SGEs %d, read SGEs %d, "
	     "recv SGEs %d%s", c->seed, c->seed, c->idx, c->idx, opt.iters, c->mtu, c->q.qp->qp_num,
	     c->sp.qpn, c->q.max_inline, c->q.max_send_sge, c->max_read_sge, c->q.max_recv_sge,
	     opt.errors ? ", error phases on" : "");
	if (c->d.attr.atomic_cap == IBV_ATOMIC_NONE)
		die("device reports atomic_cap IBV_ATOMIC_NONE: atomics cannot be tested");

	double t0 = now_s();
	bool ok = true;
	for (int i = 0; ok && i < BURST_BATCHES; i++)
		ok = run_batch(c, true);
	for (long i = 0; ok && i < opt.iters; i++) {
		ok = run_batch(c, false);
		if (ok && !opt.verbose && (i + 1) % 50 == 0)
			info("%ld/%ld batches verified", i + 1, opt.iters);
	}
	for (int i = 0; ok && i < BURST_BATCHES; i++)
		ok = run_batch(c, true);
	double t1 = now_s();
	bool eok = true;
	if (ok && opt.errors)
		for (int p = 0; p < EP_COUNT; p++)
			if (opt.error_mask & (1u << p))
				eok &= run_errphase(c, p);   /* run them all even if one fails */

	/* the final check still runs when only error phases failed */
	struct report rep = { 0 };
	if (ok) {
		for (int i = 0; i < LOCAL_MRS; i++)
			mbuf_check_canary(&rep, "final full scan", &c->lmr[i], 0, c->lmr[i].len);
		struct wb f = { 0 };
		wb_u64(&f, c->priv_val);
		wb_u32(&f, (uint32_t)c->nfaa);
		for (size_t i = 0; i < c->nfaa; i++) {
			wb_u64(&f, c->faa[i].fetched);
			wb_u64(&f, c->faa[i].add);
		}
		if (!send_msg(c->fd, MSG_FINAL, &f))
			die("lost the control connection");
		wb_free(&f);
		ok = get_result(c, "final check", NULL) && rep.nfail == 0;
	}
	if (!eok) {
		fprintf(stderr, "[%s] FAIL: %d of %d error phases failed (see above)\n", g_role,
			c->phases_run - c->phases_ok, c->phases_run);
		ok = false;
	}
	if (!ok) {
		fprintf(stderr, "[%s] FAIL (seed %" PRIu64 ", client %u; reproduce with -s %" PRIu64
			" -i %u)\n", g_role, c->seed, c->idx, c->seed, c->idx);
		return 1;
	}
	double secs = t1 - t0;
	uint64_t bytes = c->bytes_local + c->bytes_remote;
	info("PASS seed %" PRIu64 ": %lu batches; verified SEND %lu, SEND_WITH_IMM %lu, RDMA_WRITE %lu, "
	     "RDMA_WRITE_WITH_IMM %lu, RDMA_READ %lu (%lu read-backs), ATOMIC_CMP_AND_SWP %lu "
	     "(%lu swapped, %lu not), ATOMIC_FETCH_AND_ADD %lu (%lu on the shared counter); "
	     "inline %lu, unsignaled %lu, fenced %lu, fenced READ->SEND/WRITE chains %lu, "
	     "zero-length %lu, multi-SGE %lu, MTU-edge sizes %lu; error phases %d/%d; "
	     "bytes verified %" PRIu64 " (%" PRIu64 " at the server, %" PRIu64 " locally) "
	     "in %.2f s (%.1f MB/s)",
	     c->seed, c->batches, c->cnt[K_SEND], c->cnt[K_SEND_IMM], c->cnt[K_WRITE],
	     c->cnt[K_WRITE_IMM], c->cnt[K_READ], c->n_readback, c->cnt[K_CAS], c->cas_hit,
	     c->cas_miss, c->cnt[K_FAA], c->n_faa_shared, c->n_inline, c->n_unsig, c->n_fence,
	     c->n_chain, c->n_zero, c->n_multisge, c->n_mtu_edge, c->phases_ok, c->phases_run,
	     bytes, c->bytes_remote, c->bytes_local, secs, secs > 0 ? (double)bytes / secs / 1e6 : 0.0);
	return 0;
}

/* ------------------------------------------------------------------------ */

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [options] [server_host]\n"
		"  without server_host: run the server; with it: run a client\n"
		"  -p, --port N         TCP port (default 18515; server: 0 = any, see -P)\n"
		"  -P, --port-file F    server: write the bound TCP port to F\n"
		"  -d, --ib-dev NAME    RDMA device (default: the first)\n"
		"  -g, --gid-idx N      GID index (default 0)\n"
		"  -m, --mtu BYTES      path MTU 256..4096 (default: port active_mtu)\n"
		"  -n, --iters N        randomized batches (post lists) per client (default 100)\n"
		"  -s, --seed N         seed of the random sequence (default: time; always printed)\n"
		"  -c, --clients K      server: number of clients to serve (default 1)\n"
		"  -i, --client-index I client: ask for index I (default: any free)\n"
		"  -t, --timeout S      fail if not done in S seconds (default 120)\n"
		"  -e, --errors[=LIST]  client: also run the error phases (all, or the comma-separated\n"
		"                       LIST of: bad_rkey_write read_beyond_mr write_before_mr\n"
		"                       write_readonly_mr atomic_no_access atomic_misaligned\n"
		"                       send_too_long bad_lkey)\n"
		"  -v, --verbose        print every WR\n", argv0);
	exit(2);
}

static long parse_num(const char *s, const char *what, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 0);
	if (errno || *end || v < lo || v > hi) {
		fprintf(stderr, "invalid %s '%s' (%ld..%ld)\n", what, s, lo, hi);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "port-file", required_argument, NULL, 'P' },
		{ "ib-dev", required_argument, NULL, 'd' },
		{ "gid-idx", required_argument, NULL, 'g' },
		{ "mtu", required_argument, NULL, 'm' },
		{ "iters", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 's' },
		{ "clients", required_argument, NULL, 'c' },
		{ "client-index", required_argument, NULL, 'i' },
		{ "timeout", required_argument, NULL, 't' },
		{ "errors", optional_argument, NULL, 'e' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "p:P:d:g:m:n:s:c:i:t:evh", lo, NULL)) != -1) {
		switch (ch) {
		case 'p': opt.port = (int)parse_num(optarg, "port", 0, 65535); break;
		case 'P': opt.port_file = optarg; break;
		case 'd': opt.dev = optarg; break;
		case 'g': opt.gid_idx = (int)parse_num(optarg, "gid index", 0, 255); break;
		case 'm':
			opt.mtu_bytes = (int)parse_num(optarg, "mtu", 256, 4096);
			if (!bytes_to_mtu(opt.mtu_bytes)) {
				fprintf(stderr, "mtu must be 256, 512, 1024, 2048 or 4096\n");
				exit(2);
			}
			break;
		case 'n': opt.iters = parse_num(optarg, "iterations", 0, 100000000); break;
		case 's': {
			char *end;
			errno = 0;
			opt.seed = strtoull(optarg, &end, 0);
			if (errno || *end)
				usage(argv[0]);
			opt.seed_set = true;
			break;
		}
		case 'c': opt.clients = (int)parse_num(optarg, "clients", 1, MAX_CLIENTS); break;
		case 'i': opt.client_index = (int)parse_num(optarg, "client index", 0, MAX_CLIENTS - 1); break;
		case 't': opt.timeout = (int)parse_num(optarg, "timeout", 0, 1000000); break;
		case 'e':
			opt.errors = true;
			opt.error_mask = optarg ? 0 : (1u << EP_COUNT) - 1;
			for (char *tok = optarg ? strtok(optarg, ",") : NULL; tok; tok = strtok(NULL, ",")) {
				int k = 0;
				while (k < EP_COUNT && strcmp(tok, ep_name[k]))
					k++;
				if (k == EP_COUNT) {
					fprintf(stderr, "unknown error phase '%s'; phases:", tok);
					for (k = 0; k < EP_COUNT; k++)
						fprintf(stderr, " %s", ep_name[k]);
					fprintf(stderr, "\n");
					exit(2);
				}
				opt.error_mask |= 1u << k;
			}
			break;
		case 'v': opt.verbose = true; break;
		default: usage(argv[0]);
		}
	}
	if (optind < argc)
		opt.host = argv[optind++];
	if (optind < argc)
		usage(argv[0]);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	if (opt.timeout)
		alarm((unsigned)opt.timeout);
	setvbuf(stdout, NULL, _IOLBF, 0);
	return opt.host ? run_client() : run_server();
}
