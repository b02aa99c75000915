/* Same-host rings (src/net/shm.c), white box: packets come out as they went
 * in, in order, across wraps and full rings; the doorbell flag follows the
 * consumer's sleep; a ring claimed anew does not replay what an earlier
 * producer left; a consumer survives a producer that writes nonsense; a
 * region whose owner died is not used; a region is found by its socket,
 * also over a stale or silent socket file; hostile answers are refused and
 * leave no fd; a failed ask is cached; a connection that cannot be
 * accepted does not spin the engine; a peer cannot truncate a region (it
 * is sealed), so a thread that blocks SIGBUS survives the attempt; a
 * forked child neither produces into nor gives back its parent's rings,
 * and holds nothing of them when its parent dies.  The second review of
 * issue #13: a cancelled ask leaves nothing stuck, a kept handed-over fd
 * does not keep a dead owner alive, a stalled listener is served again on
 * an idle device, F_SEAL_EXEC is accepted, a replaced directory is not
 * bound in, no fork inherits a region fd in a gap, attach never asks. */
#include "exec/exec.h"
#include "net/net.h"
#include "net/shm.h"
#include "util/counters.h"
#include "util/stats.h"
#include <assert.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* The QPN slot of the regions these tests open and attach to (shm.h: a
 * region is named by its address and its owner's slot) */
#define TEST_SLOT 1u

static int failures;
#define CHECK(c, ...) do { if (!(c)) { failures++; printf("not ok: %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static uint8_t gid_a[16] = { 0,0,0,0, 0,0,0,0, 0,0,0xff,0xff, 127,99,0,0 };
static const uint8_t sgid[16] = { 0,0,0,0, 0,0,0,0, 0,0,0xff,0xff, 127,99,1,1 };

/* The region of gid among this process's fds, opened afresh through
 * /proc/self/fd as a peer of our user could open it through /proc/PID/fd
 * (a memfd: "/memfd:uroce-rx"; the code before issue #13's fix had
 * "/dev/shm/uroce-rx.*" files); the header's gid is at byte 32.  -1: none. */
static int region_fd(const uint8_t gid[16])
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int found = -1;

	while (found < 0 && d && (e = readdir(d))) {
		char path[300], link[300];
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		if (strncmp(link, "/memfd:uroce-rx", 15) && strncmp(link, "/dev/shm/uroce-rx.", 18))
			continue;
		int fd = open(path, O_RDWR | O_CLOEXEC);
		uint8_t hdr[48];
		if (fd >= 0 && pread(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr) && !memcmp(hdr + 32, gid, 16))
			found = fd;
		else if (fd >= 0)
			close(fd);
	}
	if (d)
		closedir(d);
	return found;
}

/* packet `seq` of `len` bytes: the seq, then a pattern of it */
static void fill(uint8_t *b, uint32_t len, uint32_t seq)
{
	for (uint32_t i = 0; i < len; i++)
		b[i] = (uint8_t)(i < 4 ? seq >> (8 * i) : seq * 31 + i);
}

static bool matches(const uint8_t *b, uint32_t len, uint32_t seq)
{
	uint8_t want[4400];
	fill(want, len, seq);
	return !memcmp(b, want, len);
}

/* send packet `seq` of `len` bytes alone */
static void send_one(struct shm_tx *tx, uint32_t seq, uint32_t len)
{
	static uint8_t b[4400];
	fill(b, len, seq);
	struct uroce_txmsg m = { .iov = { { b, len } }, .iovcnt = 1, .len = len };
	bool db;
	shm_tx_send(tx, sgid, 7, 0, &m, 1, &db);
}

/* one poll; is it exactly packet `seq` of `len` bytes? */
static bool got_one(struct shm_rx *rx, uint32_t seq, uint32_t len)
{
	static struct uroce_rxpkt pkts[64];
	uint64_t bad = 0;
	bool more = false;
	int n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	return n == 1 && pkts[0].len == len && matches(pkts[0].buf, len, seq);
}

/* A ring in gid's region for a flow, as a QP gets one: asked for first
 * (shm_tx_prepare: ibv_modify_qp before the QP's lock), then attached. */
static struct shm_tx *attach(const uint8_t *gid)
{
	shm_tx_prepare(gid, TEST_SLOT);
	return shm_tx_attach(gid, TEST_SLOT);
}

/* an address of this test's own, unlike any device's: gid_a with last byte k */
static void test_gid(uint8_t gid[16], uint8_t k)
{
	memcpy(gid, gid_a, 16);
	gid[15] = k;
}

/* The region of test address k */
static struct shm_rx *region_of(uint8_t gid[16], uint8_t k)
{
	test_gid(gid, k);
	struct shm_rx *rx = shm_rx_open(gid, TEST_SLOT);
	CHECK(rx, "region");
	return rx;
}

/* A region of test address k with a ring claimed in it */
static bool region_and_ring(uint8_t gid[16], uint8_t k, struct shm_rx **rx, struct shm_tx **tx)
{
	test_gid(gid, k);
	*rx = shm_rx_open(gid, TEST_SLOT);
	*tx = *rx ? attach(gid) : NULL;
	CHECK(*rx && *tx, "region and ring");
	return *tx != NULL;
}

static uint32_t len_of(uint32_t seq)
{
	/* small ACK-like packets, MTU-size ones, and sizes around a unit */
	static const uint32_t sizes[] = { 20, 32, 33, 95, 96, 97, 1024 + 28, 4096 + 28 + 4 + 3, 4096 + 16 };
	return sizes[(seq * 7) % (sizeof(sizes) / sizeof(sizes[0]))];
}

static void test_order_and_wrap(void)
{
	struct shm_rx *rx = shm_rx_open(gid_a, TEST_SLOT);
	CHECK(rx, "region opens");
	if (!rx)
		return;
	struct shm_tx *tx = attach(gid_a);
	CHECK(tx, "ring claimed");
	CHECK(shm_rx_active(rx), "the region sees its ring");
	static struct uroce_rxpkt pkts[64];
	static uint8_t buf[2][4400];
	uint32_t sent = 0, got = 0, fulls = 0;
	unsigned rng = 1;

	/* 40 MiB through a 2 MiB ring: many wraps (skip records), and bursts
	 * that fill it */
	while (sent < 20000) {
		int burst = 1 + (int)((rng = rng * 1103515245 + 12345) >> 16) % 1500;
		for (int b = 0; b < burst && sent < 20000; b++) {
			struct uroce_txmsg m[2];
			uint32_t l0 = len_of(sent), l1 = len_of(sent + 1);
			fill(buf[0], l0, sent);
			fill(buf[1], l1, sent + 1);
			/* the second packet in two iovecs, as header + payload */
			m[0] = (struct uroce_txmsg){ .iov = { { buf[0], l0 } }, .iovcnt = 1, .len = l0,
						     .gso_idx = (uint16_t)sent };
			m[1] = (struct uroce_txmsg){ .iov = { { buf[1], 12 }, { buf[1] + 12, l1 - 12 } }, .iovcnt = 2,
						     .len = l1, .gso_idx = (uint16_t)(sent + 1) };
			bool db;
			int n = shm_tx_send(tx, sgid, 0xC123, 0, m, 2, &db);
			CHECK(!db, "no doorbell while the consumer is awake");
			sent += (uint32_t)n;
			if (n < 2) {
				fulls++;
				break;
			}
		}
		bool more;
		do {
			uint64_t bad = 0;
			more = false;
			int n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
			CHECK(bad == 0, "nothing malformed");
			for (int i = 0; i < n; i++, got++) {
				if (pkts[i].len != len_of(got) || !matches(pkts[i].buf, pkts[i].len, got) ||
				    pkts[i].sport != 0xC123 || memcmp(pkts[i].sgid, sgid, 16) || memcmp(pkts[i].dgid, gid_a, 16) ||
				    pkts[i].ip_id_hint != (uint16_t)got) {
					CHECK(0, "packet %u arrives whole and in order (len %u)", got, pkts[i].len);
					shm_tx_detach(tx);
					shm_rx_close(rx);
					return;
				}
			}
		} while (more);
	}
	CHECK(got == sent, "all %u packets came (%u)", sent, got);
	CHECK(fulls > 0, "the ring filled at times (%u)", fulls);

	/* the doorbell flag */
	struct uroce_txmsg m = { .iov = { { buf[0], 20 } }, .iovcnt = 1, .len = 20 };
	bool db;
	shm_rx_sleeping(rx, true);
	shm_tx_send(tx, sgid, 1, 0, &m, 1, &db);
	CHECK(db, "a sleeping consumer asks for a doorbell");
	shm_rx_sleeping(rx, false);
	shm_tx_send(tx, sgid, 1, 0, &m, 1, &db);
	CHECK(!db, "an awake one does not");

	/* a ring given back with two records unread: they are still
	 * delivered (a destroyed QP's last ACK), then the ring is free again */
	shm_tx_detach(tx);
	CHECK(shm_rx_active(rx), "a given-back ring is read until drained");
	uint64_t bad = 0;
	bool more = false;
	int n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	CHECK(n == 2, "the two records sent before the ring was given back are delivered (%d)", n);
	n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	CHECK(n == 0 && !shm_rx_active(rx), "then the ring is free (%d)", n);
	tx = attach(gid_a);
	CHECK(tx, "ring claimed again");
	send_one(tx, 777, 40);
	CHECK(got_one(rx, 777, 40), "the new producer's packet alone");
	shm_tx_detach(tx);
	shm_rx_close(rx);
}

/* The region of gid, mapped as another process could map it; its
 * rings start at *ring0 (header first, then 32 rings of 2 MiB). */
static uint8_t *map_region(const uint8_t gid[16], size_t *len, uint8_t **ring0)
{
	int fd = region_fd(gid);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		CHECK(0, "region fd");
		return NULL;
	}
	uint8_t *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return NULL;
	*len = (size_t)st.st_size;
	*ring0 = map + *len - 32 * (size_t)2097152;
	return map;
}

struct rec {
	uint32_t seq, len;
	uint16_t units, sport, ip_id;
	uint8_t tos, pad;
	uint8_t sgid[16];
};

/* Positions are 32-bit and wrap: a record is still told from a cleared
 * unit at position 2^32 - 1 (where position + 1 is 0), and an old header
 * left there is not delivered. */
static void test_position_wrap(void)
{
	uint8_t gid[16];
	struct shm_rx *rx = region_of(gid, 5);
	if (!rx)
		return;
	shm_rx_test_position(rx, 0xFFFFFFF0u);
	size_t len;
	uint8_t *ring;
	uint8_t *map = map_region(gid, &len, &ring);
	struct shm_tx *tx = attach(gid);
	CHECK(map && tx, "mapped, ring claimed");
	if (!map || !tx)
		return;
	/* an old lap's one-unit record in the last unit */
	struct rec old = { .seq = 0, .len = 20, .units = 1 };
	memcpy(ring + 32767 * 64, &old, sizeof(old));
	fill(ring + 32767 * 64 + 32, 20, 666);
	for (uint32_t k = 0; k < 40; k++) {
		send_one(tx, 1000 + k, 20);
		if (!got_one(rx, 1000 + k, 20)) {
			CHECK(0, "record %u at position 0x%x comes alone and whole", k, 0xFFFFFFF0u + k);
			break;
		}
	}
	munmap(map, len);
	shm_tx_detach(tx);
	shm_rx_close(rx);
}

/* The records of one send call appear together: a consumer polling while
 * the producer writes pairs (a request and the ACK riding behind it) never
 * gets half a pair. */
struct pairs_arg {
	struct shm_tx *tx;
	uint32_t pairs;
	atomic_uint cut;
};

static void *send_pairs(void *arg)
{
	struct pairs_arg *a = arg;
	uint8_t b[2][40];

	for (uint32_t k = 0; k < a->pairs; k++) {
		fill(b[0], 40, 2 * k);
		fill(b[1], 20, 2 * k + 1);
		struct uroce_txmsg m[2] = { { .iov = { { b[0], 40 } }, .iovcnt = 1, .len = 40 },
					    { .iov = { { b[1], 20 } }, .iovcnt = 1, .len = 20 } };
		bool db;
		int sent = 0;
		while (sent < 2) {
			/* full: the consumer has not caught up; a pair cut by a
			 * full ring is two calls, which the consumer may see apart */
			int r = shm_tx_send(a->tx, sgid, 8, 0, m + sent, 2 - sent, &db);
			if (r == 1 && sent == 0)
				atomic_fetch_add(&a->cut, 1);
			sent += r;
		}
	}
	return NULL;
}

static void test_calls_appear_whole(void)
{
	uint8_t gid[16];
	struct shm_rx *rx;
	struct shm_tx *tx;
	if (!region_and_ring(gid, 6, &rx, &tx))
		return;
	struct pairs_arg a = { tx, 200000, 0 };
	pthread_t t;
	pthread_create(&t, NULL, send_pairs, &a);
	static struct uroce_rxpkt pkts[64];
	uint32_t got = 0, halves = 0;
	while (got < 2 * a.pairs) {
		uint64_t bad = 0;
		bool more = false;
		int n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
		halves += n % 2;
		for (int i = 0; i < n; i++, got++)
			if (!matches(pkts[i].buf, pkts[i].len, got)) {
				CHECK(0, "packet %u in order", got);
				got = 2 * a.pairs;
				break;
			}
	}
	pthread_join(t, NULL);
	CHECK(halves <= 2 * atomic_load(&a.cut), "no poll got half a call (%u did, %u pairs cut by a full ring)", halves,
	      atomic_load(&a.cut));
	shm_tx_detach(tx);
	shm_rx_close(rx);
}

/* A producer that writes nonsense over its ring: the consumer copies out
 * at most a packet's size, never reads outside the ring, and counts it. */
static void test_hostile_producer(void)
{
	uint8_t gid[16];
	struct shm_rx *rx;
	struct shm_tx *tx;
	if (!region_and_ring(gid, 2, &rx, &tx))
		return;
	/* scribble over ring 0 as another process could */
	size_t maplen;
	uint8_t *ring;
	uint8_t *map = map_region(gid, &maplen, &ring);
	if (!map)
		return;
	static struct uroce_rxpkt pkts[64];
	struct rec rec;
	uint64_t bad;
	bool more;
	/* 1: a length beyond any packet, in a record that claims 200 units */
	memset(&rec, 0, sizeof(rec));
	rec.seq = 1; rec.len = 1u << 30; rec.units = 200;
	memcpy(ring, &rec, sizeof(rec));
	bad = 0; more = false;
	int n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	CHECK(n == 1 && pkts[0].len == 0 && bad == 1, "huge length: dropped as truncated and counted (n %d len %u bad %llu)",
	      n, n ? pkts[0].len : 0, (unsigned long long)bad);
	/* 2: a record running past the ring's end */
	memset(&rec, 0, sizeof(rec));
	rec.seq = 201; rec.len = 20; rec.units = 40000;
	memcpy(ring + 200 * 64, &rec, sizeof(rec));
	bad = 0;
	n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	CHECK(n == 0 && bad == 1, "record past the ring end: refused (n %d bad %llu)", n, (unsigned long long)bad);
	bad = 0;
	n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	CHECK(n == 0 && bad == 0, "the broken ring is not read again (n %d bad %llu)", n, (unsigned long long)bad);
	/* 3: given back, the ring is free; claimed anew, it works; zero units
	 * break it again */
	shm_tx_detach(tx);
	n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	CHECK(!shm_rx_active(rx), "a broken ring given back is freed");
	tx = attach(gid);
	CHECK(tx, "and claimed again");
	if (!tx)
		return;
	send_one(tx, 5, 20);
	CHECK(got_one(rx, 5, 20), "a packet after the repair");
	memset(&rec, 0, sizeof(rec));
	rec.seq = 201 + 1; rec.len = 20; rec.units = 0; /* the next record: after the 1-unit one at 200 */
	memcpy(ring + 201 * 64, &rec, sizeof(rec));
	bad = 0;
	n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	CHECK(n == 0 && bad == 1, "zero-unit record: refused (n %d bad %llu)", n, (unsigned long long)bad);
	/* 4: a skip record short of the ring's end (a producer chaining them
	 * would hold the consumer) */
	shm_tx_detach(tx);
	shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	tx = attach(gid);
	CHECK(tx, "claimed once more");
	if (!tx)
		return;
	rec.units = 1; rec.len = 0;
	memcpy(ring + 201 * 64, &rec, sizeof(rec));
	bad = 0;
	n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	CHECK(n == 0 && bad == 1, "skip record inside the ring: refused (n %d bad %llu)", n, (unsigned long long)bad);
	munmap(map, maplen);
	shm_tx_detach(tx);
	shm_rx_close(rx);
}

/* The region a child opened, which it serves (as its engine would) until
 * it is killed. */
static struct shm_rx *child_rx;

/* Serve rx (as this process's engine would) until fd is readable. */
static void serve_until(struct shm_rx *rx, int fd)
{
	for (;;) {
		struct pollfd pfd[2] = { { .fd = fd, .events = POLLIN }, { .fd = shm_rx_listen_fd(rx), .events = POLLIN } };
		if (poll(pfd, rx ? 2 : 1, -1) < 0 && errno != EINTR)
			return;
		if (pfd[0].revents)
			return;
		if (rx && pfd[1].revents)
			shm_rx_serve(rx, NULL);
	}
}

/* Run fn(gid) in a child that then waits to be killed; true if fn said it
 * succeeded.  Meanwhile this process serves its region serve (a forked
 * child holds no fd of its parent's regions: it asks like any process). */
static bool in_child_serving(bool (*fn)(const uint8_t *gid), const uint8_t gid[16], pid_t *child, struct shm_rx *serve)
{
	int p[2];
	char c = 0;

	if (pipe(p) < 0)
		return false;
	*child = fork();
	if (*child == 0) {
		c = fn(gid);
		if (write(p[1], &c, 1) < 0)
			_exit(1);
		for (;;) {
			if (!child_rx) {
				pause();
				continue;
			}
			struct pollfd pfd = { .fd = shm_rx_listen_fd(child_rx), .events = POLLIN };
			if (poll(&pfd, 1, -1) == 1)
				shm_rx_serve(child_rx, NULL);
		}
	}
	if (*child > 0)
		serve_until(serve, p[0]);
	if (*child < 0 || read(p[0], &c, 1) != 1)
		c = 0;
	close(p[0]);
	close(p[1]);
	return c == 1;
}

static bool in_child(bool (*fn)(const uint8_t *gid), const uint8_t gid[16], pid_t *child)
{
	return in_child_serving(fn, gid, child, NULL);
}

static bool child_opens_region(const uint8_t *gid)
{
	return (child_rx = shm_rx_open(gid, TEST_SLOT)) != NULL;
}

static bool child_sends_two(const uint8_t *gid)
{
	struct shm_tx *tx = attach(gid);
	if (tx) {
		send_one(tx, 9, 30);
		send_one(tx, 9, 30);
	}
	return tx != NULL;
}

/* A child's region at test address k (the child serves it until killed). */
static void child_region(uint8_t gid[16], uint8_t k, pid_t *child)
{
	test_gid(gid, k);
	CHECK(in_child(child_opens_region, gid, child), "a child opened its region (address %u)", k);
}

/* Another process's region is handed over through its socket; once the
 * owner is killed, it is not attached to (and nothing of it is left: the
 * memfd went with its last holder). */
static void test_dead_owner(void)
{
	uint8_t gid[16];
	test_gid(gid, 3);
	pid_t child;
	CHECK(in_child(child_opens_region, gid, &child), "the child opened its region");
	struct shm_tx *tx = attach(gid);
	CHECK(tx, "a live owner's region is attached to");
	send_one(tx, 5, 60);
	int fd = region_fd(gid);
	CHECK(fd >= 0, "the region is held here by an fd of its own");
	if (fd >= 0)
		close(fd);
	shm_tx_detach(tx);
	fd = region_fd(gid);
	CHECK(fd < 0, "and let go with the last ring");
	if (fd >= 0)
		close(fd);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	tx = attach(gid);
	CHECK(!tx, "a dead owner's region is not");
	shm_tx_detach(tx);
}

/* The fd gid's owner hands to whoever connects, received as a careless
 * (or hostile) producer would and kept as it came; -1: none. */
/* The fd an owner's first message brought (its region's), or -1; any
 * more it brought are closed.  (The bell comes in a message of its own,
 * which the caller's close of the connection releases.) */
static int answer_fd(struct msghdr *mh)
{
	struct cmsghdr *cm = CMSG_FIRSTHDR(mh);
	int fds[2] = { -1, -1 }, n = 0;
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
		n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		memcpy(fds, CMSG_DATA(cm), sizeof(int) * (size_t)(n < 2 ? n : 2));
	}
	if (fds[1] >= 0)
		close(fds[1]);
	return fds[0];
}

static int receive_region_fd(const uint8_t gid[16])
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (!shm_test_socket_path(gid, TEST_SLOT, sa.sun_path, sizeof(sa.sun_path)))
		return -1;
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	char d;
	union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * 2)]; } u;
	struct iovec iov = { &d, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
	int fd = -1;
	if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0 && recvmsg(s, &mh, MSG_CMSG_CLOEXEC) == 1)
		fd = answer_fd(&mh);
	if (s >= 0)
		close(s);
	return fd;
}

/* Third review, item 1: nobody can queue an fd on a region's socket (a
 * TCP socket lingering on unsent data, released when the engine closes the
 * connection, would stall the engine): a connector's sendmsg with
 * SCM_RIGHTS is refused (SO_PASSRIGHTS 0 on the listener, Linux 6.16;
 * skipped where the kernel lacks the option). */
static void test_no_fds_to_owner(void)
{
	uint8_t gid[16];
	test_gid(gid, 12);
	int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), zero = 0;
	if (probe < 0 || setsockopt(probe, SOL_SOCKET, 83 /* SO_PASSRIGHTS */, &zero, sizeof(zero)) < 0) {
		printf("skip: no SO_PASSRIGHTS on this kernel\n");
		if (probe >= 0)
			close(probe);
		return;
	}
	close(probe);
	pid_t child;
	CHECK(in_child(child_opens_region, gid, &child), "the child opened its region");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	CHECK(shm_test_socket_path(gid, TEST_SLOT, sa.sun_path, sizeof(sa.sun_path)), "its socket's path");
	int passed = open("/dev/null", O_RDONLY | O_CLOEXEC), s = -1;
	ssize_t n = 0;
	/* EPIPE: the owner served and closed this connection before the
	 * message went (1-2 runs in 100 under ASan, every attempt under
	 * ctest -j2): inconclusive, again.  The owner stopped meanwhile: a
	 * connect completes in its listener's backlog all the same, and the
	 * connection is the listener's (SO_PASSRIGHTS 0) from then on */
	kill(child, SIGSTOP);
	for (int attempt = 0; attempt < 8; attempt++) {
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	CHECK(s >= 0 && passed >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connected to it");
	char d = 'x';
	union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int))]; } u;
	memset(&u, 0, sizeof(u));
	struct iovec iov = { &d, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &passed, sizeof(int));
	errno = 0;
	n = sendmsg(s, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (!(n < 0 && errno == EPIPE))
		break;
	close(s);
	s = -1;
	}
	CHECK(n < 0 && errno == EPERM, "an fd sent to the owner is refused (sendmsg %zd, %s)", n, strerror(errno));
	kill(child, SIGCONT);
	if (s >= 0)
		close(s);
	close(passed);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

/* Review 2, item 2: a process that keeps the fd it was handed does not
 * keep a dead owner "alive": the owner hands out a description of its
 * own, not the one that holds its flock, so a flow attached after the
 * owner died finds no region (on the old code it got a ring nobody reads). */
static void test_kept_fd_not_alive(void)
{
	uint8_t gid[16];
	pid_t child;
	child_region(gid, 72, &child);
	int kept = receive_region_fd(gid);
	CHECK(kept >= 0, "a producer received the region's fd and keeps it");
	struct shm_tx *tx = attach(gid);
	CHECK(tx, "a live owner's region is attached to");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	struct shm_tx *tx2 = attach(gid);
	CHECK(!tx2, "the owner died: no ring, whoever keeps the fd it handed out");
	shm_tx_detach(tx2);
	shm_tx_detach(tx);
	if (kept >= 0)
		close(kept);
}

/* A listener at gid's socket file that never answers (a stopped owner,
 * or a process of ours that took the path): its fd.  With stale, closed
 * again at once: the file stays, and connects are refused. */
static int listen_at(const uint8_t gid[16], bool stale)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (!shm_test_socket_path(gid, TEST_SLOT, sa.sun_path, sizeof(sa.sun_path)))
		return -1;
	unlink(sa.sun_path);
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 4) < 0) {
		if (s >= 0)
			close(s);
		return -1;
	}
	if (stale) {
		close(s);
		return 0;
	}
	return s;
}

/* A stale socket file (its owner was killed) or one a process of ours
 * listens at without answering: the address's new owner replaces it, and a
 * producer finds the region there. */
static void test_squatted_name(void)
{
	uint8_t gid[16];
	test_gid(gid, 14);
	for (int stale = 0; stale < 2; stale++) {
		gid[15] = (uint8_t)(14 + 100 * stale);
		int s = listen_at(gid, stale);
		CHECK(s >= 0, "a listener at the socket file");
		pid_t child;
		CHECK(in_child(child_opens_region, gid, &child), "the child opened its region over the %s socket",
		      stale ? "stale" : "silent");
		struct shm_tx *tx = attach(gid);
		CHECK(tx, "a producer finds it (%s)", stale ? "stale" : "silent");
		if (tx) {
			send_one(tx, 6, 70);
			shm_tx_detach(tx);
		}
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		if (s > 0)
			close(s);
	}
}

static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

/* Our fd count once it is back to `want`, or after 5 s: what is not
 * shared memory is closed by a thread of its own (close_foreign), soon
 * but not at once. */
static int fd_count_back_to(int want)
{
	int after = fd_count();
	for (int i = 0; i < 5000 && after != want; i++) {
		usleep(1000);
		after = fd_count();
	}
	return after;
}

/* An attach that had to be refused was, and left no fd with us (`before`:
 * our count before it). */
static void check_refused_clean(const char *what, struct shm_tx *tx, int before)
{
	int after = fd_count_back_to(before);
	CHECK(!tx, "%s: refused", what);
	CHECK(after == before, "%s: no fd left behind (%d before, %d after)", what, before, after);
}

/* A memfd as an owner's would be, but for what `how` spoils. */
static int bad_memfd(int how)
{
	int fd = memfd_create("uroce-rx", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	size_t size = shm_test_region_bytes();
	if (fd < 0 || ftruncate(fd, (off_t)(how == 2 ? 4096 : size)) < 0)
		return fd;
	if (how == 1)
		return fd;  /* unsealed */
	int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	if (how == 3)
		seals |= F_SEAL_WRITE;
	(void)fcntl(fd, F_ADD_SEALS, seals);
	return fd;
}

/* Answer one ask at gid's socket with `how` (hostile_answer), in a child;
 * the pipe p says when it listens. */
static void hostile_owner(const uint8_t gid[16], int how, int ready)
{
	int s = listen_at(gid, false);
	char c = 1;
	if (s < 0 || write(ready, &c, 1) != 1)
		_exit(1);
	int a = accept(s, NULL, NULL);
	int fds[3] = { -1, -1, -1 }, nfds = 1;
	char data = 'r';
	struct iovec iov = { &data, 1 };
	union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * 3)]; } u;
	memset(&u, 0, sizeof(u));
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b };
	switch (how) {
	case 0: nfds = 2; fds[0] = bad_memfd(0); fds[1] = bad_memfd(0); break;  /* two fds */
	case 1: nfds = 3; fds[0] = bad_memfd(0); fds[1] = bad_memfd(0); fds[2] = bad_memfd(0); break;
	case 2: fds[0] = bad_memfd(0); iov.iov_len = 0; break;  /* a 0-byte message */
	case 3: fds[0] = open("/dev/null", O_RDWR); break;      /* not a memfd */
	case 4: fds[0] = bad_memfd(1); break;                   /* unsealed */
	case 5: fds[0] = bad_memfd(2); break;                   /* the wrong size */
	case 6: fds[0] = bad_memfd(3); break;                   /* sealed against writes too */
	}
	mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
	memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	if (a < 0 || sendmsg(a, &mh, 0) < 0)
		_exit(2);
	pause();
	_exit(0);
}

/* Issue #13, item 6 and the region checks: an answer of two fds, of three
 * (more than the control buffer of before held: MSG_CTRUNC), a 0-byte
 * message with an fd, a non-memfd, an unsealed memfd, one of the wrong
 * size, one with a seal too many: no region, and no fd left behind. */
static void test_hostile_handover(void)
{
	static const char *what[] = { "two fds", "three fds", "a 0-byte message", "a non-memfd", "an unsealed memfd",
				      "a memfd of the wrong size", "a memfd sealed against writes" };
	for (int how = 0; how < 7; how++) {
		uint8_t gid[16];
		test_gid(gid, (uint8_t)(40 + how));
		int p[2];
		char c;
		if (pipe(p) < 0)
			return;
		pid_t child = fork();
		if (child == 0)
			hostile_owner(gid, how, p[1]);
		CHECK(read(p[0], &c, 1) == 1, "the hostile owner listens");
		int before = fd_count();
		struct shm_tx *tx = attach(gid);
		check_refused_clean(what[how], tx, before);
		shm_tx_detach(tx);
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		close(p[0]);
		close(p[1]);
	}
}

/* A TCP socket of our own, connected over loopback, whose close lingers
 * (SO_LINGER 60 s) on unsent data its peer never reads: the fd, and in
 * *peer the other end's (-1s if one cannot be made). */
static int lingering_tcp(int *peer)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int small = 4096;
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	*peer = -1;
	if (ls < 0 || s < 0 || setsockopt(ls, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) < 0 ||
	    bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 1) < 0 ||
	    getsockname(ls, (struct sockaddr *)&a, &l) < 0 || setsockopt(s, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) < 0 ||
	    connect(s, (struct sockaddr *)&a, sizeof(a)) < 0 || (*peer = accept4(ls, NULL, NULL, SOCK_CLOEXEC)) < 0) {
		if (ls >= 0)
			close(ls);
		if (s >= 0)
			close(s);
		return -1;
	}
	close(ls);
	struct linger lg = { .l_onoff = 1, .l_linger = 60 };
	setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	static char junk[4096];
	while (send(s, junk, sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
		;
	struct timeval tv = { .tv_sec = 30 };
	setsockopt(*peer, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return s;
}

/* Did the lingering socket whose peer end is peer close at once (a reset:
 * SO_LINGER 0, close_foreign) rather than linger and then end in order
 * (EOF)?  Reads what was queued first; the peer end is closed. */
static bool reset_seen(int peer)
{
	static char buf[65536];
	ssize_t n;
	while ((n = recv(peer, buf, sizeof(buf), 0)) > 0)
		;
	bool reset = n < 0 && errno == ECONNRESET;
	close(peer);
	return reset;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A message to s of one byte with n fds (none: n 0; empty: no byte), in m
 * (its control buffer in cb). */
struct fd_out {
	struct msghdr mh;
	struct iovec iov;
	char d;
	union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * 4)]; } u;
};

static void fd_out_init(struct fd_out *m, const int *fds, int n, bool empty)
{
	memset(m, 0, sizeof(*m));
	m->d = 'r';
	m->iov = (struct iovec){ &m->d, empty ? 0 : 1 };
	m->mh.msg_iov = &m->iov;
	m->mh.msg_iovlen = 1;
	if (n) {
		m->mh.msg_control = m->u.b;
		m->mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m->mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n);
	}
}

/* Send fds (n of them) to s in one message. */
static bool send_fds(int s, const int *fds, int n)
{
	struct fd_out m;
	fd_out_init(&m, fds, n, false);
	return sendmsg(s, &m.mh, MSG_NOSIGNAL) == 1;
}

/* An owner at gid's socket that answers one ask with a region-like memfd
 * beside a lingering TCP socket (how 0); with the memfd and then, in a
 * second message, the socket (how 1); or with the memfd, an empty message
 * and the socket (how 2), all in one sendmmsg; and closes its own copy, so
 * that ours is the socket's last: the producer's close of it would wait
 * out the linger (60 s) in the caller's thread.  The pipe says when it
 * listens, and then whether every message went ('S'): a producer that
 * gave up waiting (SHM_CONNECT_WAIT_MS) before the owner answered has shut
 * the connection, and the test is inconclusive. */
static void lingering_owner(const uint8_t gid[16], int how, int sock, int ready)
{
	/* real-time where permitted, on the test's one CPU (the caller pins
	 * both): the producer, woken by the first message, cannot run -- and
	 * refuse and close -- before the messages behind it are sent too.
	 * Without that, under load it did so in 6 runs of 15 (two CPUs each
	 * busy with a spinning process), and every attempt was inconclusive */
	struct sched_param sp = { .sched_priority = 1 };
	sched_setscheduler(0, SCHED_FIFO, &sp);
	int s = listen_at(gid, false);
	char c = 1;
	if (s < 0 || write(ready, &c, 1) != 1)
		_exit(1);
	int a = accept(s, NULL, NULL);
	int fds[2] = { bad_memfd(0), sock };
	struct fd_out m[3];
	struct mmsghdr mm[3];
	int n = 0;
	if (how == 0) {
		fd_out_init(&m[n++], fds, 2, false);
	} else {
		fd_out_init(&m[n++], fds, 1, false);
		if (how == 2)
			fd_out_init(&m[n++], NULL, 0, true);
		fd_out_init(&m[n++], &sock, 1, false);
	}
	memset(mm, 0, sizeof(mm));
	for (int i = 0; i < n; i++)
		mm[i].msg_hdr = m[i].mh;
	bool sent = a >= 0 && sendmmsg(a, mm, (unsigned)n, MSG_NOSIGNAL) == n;
	c = sent ? 'S' : 'F';
	if (write(ready, &c, 1) != 1)
		_exit(2);
	/* After the status: when the producer gave up before the answer
	 * (sent 'F'), this close is the lingering socket's last and waits
	 * out its linger -- the test, reading for the status first, hung
	 * past ctest's 60 s once in ~20 runs.  The SIGKILL that ends this
	 * child interrupts such a close. */
	close(sock);
	pause();
	_exit(0);
}

/* Third review, item 2: the fds a hostile owner hands a producer beside
 * (or behind) its answer are closed without waiting on them: a lingering
 * TCP socket is reset (SO_LINGER 0) rather than held open for its linger
 * in the attach (on the old code the peer saw an orderly end, after 60 s);
 * it is closed by a thread of its own; the attach is refused. */
static void test_lingering_fds_from_owner(void)
{
	static const char *what[] = { "beside the answer", "behind the answer", "behind an empty message" };
	/* the owner is a forked child: on a loaded machine (ctest -j2 beside
	 * a spinning uroce process) it missed the 50 ms answer bound 8 times
	 * running; what is tested here is what happens after the answer */
	shm_test_connect_wait(5000);
	cpu_set_t all, one;
	bool pinned = sched_getaffinity(0, sizeof(all), &all) == 0;
	if (pinned) {
		CPU_ZERO(&one);
		CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
		pinned = sched_setaffinity(0, sizeof(one), &one) == 0;
	}
	for (int how = 0; how < 3; how++) {
		for (int attempt = 0;; attempt++) {
			uint8_t gid[16];
			/* an address of each attempt's own: a retry at the same
			 * one found the earlier attempt's ask still cached and
			 * never connected, so the owner waited in accept and
			 * this test for its status, past ctest's 60 s (CI, ASan) */
			test_gid(gid, (uint8_t)(180 + 3 * attempt + how));
			int peer, sock = lingering_tcp(&peer), p[2];
			char c = 0, sent = 0;
			CHECK(sock >= 0, "a lingering TCP socket");
			if (sock < 0 || pipe(p) < 0)
				return;
			pid_t child = fork();
			if (child == 0)
				lingering_owner(gid, how, sock, p[1]);
			close(sock);
			CHECK(read(p[0], &c, 1) == 1, "the owner listens");
			unsigned long by_thread = shm_test_foreign_closes();
			double t0 = now_s();
			struct shm_tx *tx = attach(gid);
			double took = now_s() - t0;
			/* bounded all the same: no status means no connection,
			 * an inconclusive attempt */
			struct pollfd pf = { .fd = p[0], .events = POLLIN };
			if (poll(&pf, 1, 20000) != 1 || read(p[0], &sent, 1) != 1)
				sent = 0;
			shm_tx_detach(tx);
			/* the socket is gone when the owner is: ours is then its last */
			kill(child, SIGKILL);
			waitpid(child, NULL, 0);
			close(p[0]);
			close(p[1]);
			/* the producer may refuse and close on the first message
			 * before the ones behind it went: the owner's send fails,
			 * the attempt is inconclusive (about one in two under load) */
			if (sent != 'S' && attempt < 19) {
				close(peer);
				printf("# %s: the owner answered after the producer gave up; again\n", what[how]);
				continue;
			}
			CHECK(sent == 'S', "%s: the owner answered in time (20 attempts)", what[how]);
			CHECK(!tx, "%s: refused", what[how]);
			CHECK(reset_seen(peer), "%s: the lingering socket was reset, not held (attach took %.3f s)", what[how], took);
			CHECK(shm_test_foreign_closes() > by_thread, "%s: closed by a thread of its own", what[how]);
			break;
		}
	}
	if (pinned)
		sched_setaffinity(0, sizeof(all), &all);
	shm_test_connect_wait(0);
}

/* Third review, item 2, on kernels before 6.16 (no SO_PASSRIGHTS; the
 * test hook opens the region without it): a producer that queues an empty
 * message and a lingering TCP socket on the owner's socket before the owner
 * answers does
 * not stall the owner's engine: the owner receives it and resets it
 * (close_foreign), rather than releasing it with the connection in
 * shm_rx_serve's thread; the connector still gets the region. */
static void test_lingering_fds_to_owner(void)
{
	uint8_t gid[16];
	test_gid(gid, 53);
	shm_test_passrights(false);
	struct shm_rx *rx = shm_rx_open(gid, TEST_SLOT);
	shm_test_passrights(true);
	CHECK(rx, "a region without SO_PASSRIGHTS");
	int peer, sock = lingering_tcp(&peer);
	CHECK(sock >= 0, "a lingering TCP socket");
	if (!rx || sock < 0) {
		shm_rx_close(rx);
		return;
	}
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	CHECK(shm_test_socket_path(gid, TEST_SLOT, sa.sun_path, sizeof(sa.sun_path)), "its socket's path");
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	CHECK(s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connected to the owner");
	/* an empty message first: the drain must not take it for the end */
	struct fd_out empty;
	fd_out_init(&empty, NULL, 0, true);
	CHECK(sendmsg(s, &empty.mh, MSG_NOSIGNAL) == 0, "an empty message queued for the owner");
	CHECK(send_fds(s, &sock, 1), "the socket queued for the owner (no SO_PASSRIGHTS)");
	close(sock);
	unsigned long by_thread = shm_test_foreign_closes();
	double t0 = now_s();
	shm_rx_serve(rx, NULL);
	double took = now_s() - t0;
	CHECK(reset_seen(peer), "the queued socket was reset by the owner (serve took %.3f s)", took);
	CHECK(shm_test_foreign_closes() > by_thread, "closed by a thread of its own");
	char d;
	union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int))]; } u;
	struct iovec iov = { &d, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
	CHECK(recvmsg(s, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) == 1 && CMSG_FIRSTHDR(&mh), "the connector got the region");
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	if (cm && cm->cmsg_type == SCM_RIGHTS) {
		int f;
		memcpy(&f, CMSG_DATA(cm), sizeof(int));
		close(f);
	}
	close(s);
	shm_rx_close(rx);
}

/* An owner whose region (sealed, of a region's size) carries a lease:
 * the producer's reopen breaks it.  Answers one ask, then holds the lease
 * until killed. */
static void leased_owner(const uint8_t gid[16], int ready)
{
	signal(SIGIO, SIG_IGN);  /* the lease break's notice */
	int s = listen_at(gid, false);
	/* a read lease: on a read-only description of the memfd once its
	 * writable one is closed (a memfd takes no write lease) */
	int w = bad_memfd(0), fd = -1;
	char path[32];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", w);
	if (w >= 0)
		fd = open(path, O_RDONLY | O_CLOEXEC);
	close(w);
	char c = fd >= 0 && fcntl(fd, F_SETLEASE, F_RDLCK) == 0 ? 1 : 2;
	if (s < 0 || write(ready, &c, 1) != 1)
		_exit(1);
	int a = accept(s, NULL, NULL);
	if (a < 0 || !send_fds(a, &fd, 1))
		_exit(2);
	pause();
	_exit(0);
}

/* Third review, item 3: a region handed over with a lease on it does not
 * hold the producer in the reopen (and under fork_lock) for
 * fs.lease-break-time: the reopen is non-blocking, fails at once, and the
 * flow goes by UDP.  On the old code the attach took the whole 45 s. */
static void test_leased_region(void)
{
	uint8_t gid[16];
	test_gid(gid, 54);
	int p[2], brk = 45;
	char c;
	FILE *f = fopen("/proc/sys/fs/lease-break-time", "r");
	if (f) {
		if (fscanf(f, "%d", &brk) != 1)
			brk = 45;
		fclose(f);
	}
	if (pipe(p) < 0)
		return;
	pid_t child = fork();
	if (child == 0)
		leased_owner(gid, p[1]);
	if (read(p[0], &c, 1) != 1 || c != 1) {
		printf("skip: no lease on a memfd here\n");
	} else if (brk < 4) {
		printf("skip: fs.lease-break-time is %d s, too short to tell\n", brk);
	} else {
		double t0 = now_s();
		struct shm_tx *tx = attach(gid);
		double took = now_s() - t0;
		CHECK(!tx, "a leased region: refused");
		shm_tx_detach(tx);
		CHECK(took < brk / 2.0, "the reopen did not wait for the lease's break (%.3f s; the break time is %d s)", took, brk);
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	close(p[0]);
	close(p[1]);
}

/* Review 2, item 4: under vm.memfd_noexec=1/2 the kernel adds F_SEAL_EXEC
 * (0x20) to our seals, F_GET_SEALS reads 0x27: still a region's (a test
 * cannot set the sysctl, so the check itself); a seal against writes is
 * not, nor are missing seals. */
static void test_seals_check(void)
{
	const int ours = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	CHECK(shm_seals_ok(ours), "our seals (%#x)", ours);
	CHECK(shm_seals_ok(0x27), "ours and F_SEAL_EXEC (0x27, vm.memfd_noexec)");
	CHECK(!shm_seals_ok(ours | F_SEAL_WRITE), "F_SEAL_WRITE refused");
	CHECK(!shm_seals_ok(0x27 | F_SEAL_WRITE), "F_SEAL_WRITE with F_SEAL_EXEC refused");
	CHECK(!shm_seals_ok(ours | 0x10), "F_SEAL_FUTURE_WRITE refused");
	CHECK(!shm_seals_ok(F_SEAL_SHRINK | F_SEAL_SEAL | 0x20), "a seal missing refused");
	CHECK(!shm_seals_ok(-1), "no seals to read (not a memfd) refused");
}

/* Issue #13, item 2: an owner that never answers is asked once, not once
 * per attach (the failure is cached), and a second attach costs no wait. */
static void test_negative_cache(void)
{
	uint8_t gid[16];
	test_gid(gid, 60);
	int s = listen_at(gid, false);
	CHECK(s >= 0, "a silent listener");
	unsigned long asks = shm_tx_test_asks();
	shm_tx_prepare(gid, TEST_SLOT);
	struct shm_tx *tx = shm_tx_attach(gid, TEST_SLOT);
	CHECK(!tx, "no answer: no ring");
	CHECK(shm_tx_test_asks() == asks + 1, "asked once (%lu)", shm_tx_test_asks() - asks);
	for (int i = 0; i < 100; i++)
		shm_tx_detach(attach(gid));
	CHECK(shm_tx_test_asks() == asks + 1, "and not again for the next 100 attaches (%lu)", shm_tx_test_asks() - asks);
	close(s);
	/* a region answered is cached too: prepare, then attach, ask once */
	uint8_t gid2[16];
	test_gid(gid2, 61);
	pid_t child;
	CHECK(in_child(child_opens_region, gid2, &child), "a child's region");
	asks = shm_tx_test_asks();
	shm_tx_prepare(gid2, TEST_SLOT);
	tx = shm_tx_attach(gid2, TEST_SLOT);
	CHECK(tx && shm_tx_test_asks() == asks + 1, "prepared, then attached: one ask (%lu)", shm_tx_test_asks() - asks);
	shm_tx_detach(tx);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

/* Review 2, item 7: shm_tx_attach, called under the QP's lock, never asks
 * (never waits): not without a prepare, not after the prepared answer
 * expired; a connect refused at once (no socket: every remote GID) is not
 * cached, so it fills no slot and is asked again at the next prepare. */
static void test_attach_never_asks(void)
{
	uint8_t gid[16], none[16];
	pid_t child;
	child_region(gid, 73, &child);
	unsigned long asks = shm_tx_test_asks();
	struct shm_tx *tx = shm_tx_attach(gid, TEST_SLOT);
	CHECK(!tx && shm_tx_test_asks() == asks, "unprepared: no ring, asked %lu times", shm_tx_test_asks() - asks);
	shm_tx_prepare(gid, TEST_SLOT);
	shm_tx_test_expire();  /* as a second later */
	asks = shm_tx_test_asks();
	tx = shm_tx_attach(gid, TEST_SLOT);
	CHECK(!tx && shm_tx_test_asks() == asks, "the prepared answer expired: no ring, asked %lu times",
	      shm_tx_test_asks() - asks);
	tx = attach(gid);
	CHECK(tx, "prepared afresh: a ring");
	shm_tx_detach(tx);
	test_gid(none, 74);  /* nobody's socket */
	asks = shm_tx_test_asks();
	shm_tx_prepare(none, TEST_SLOT);
	shm_tx_prepare(none, TEST_SLOT);
	CHECK(shm_tx_test_asks() == asks + 2, "no socket: not cached, asked again (%lu asks)", shm_tx_test_asks() - asks);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

/* Review 2, item 1: threads cancelled while they ask (the asker in its
 * poll, a coalesced waiter in its wait) leave nothing behind: no slot
 * pending for ever, no peers_lock held.  The asker is cancelled once the
 * silent listener has its connection (so it is at, or about to enter,
 * its poll); then prepares of the same and of another address complete
 * (within the test's own timeout: a helper thread that this test joins,
 * alarm() the backstop). */
static uint8_t cancel_gid[16];
static void *prepare_thread(void *arg)
{
	shm_tx_prepare(arg ? (const uint8_t *)arg : cancel_gid, TEST_SLOT);
	for (;;)
		pause();  /* a cancellation point: the cancel lands here at the latest */
	return NULL;
}

static void *prepare_then_done(void *arg)
{
	shm_tx_prepare((const uint8_t *)arg, TEST_SLOT);
	return arg;
}

static bool prepare_completes(const uint8_t gid[16])
{
	pthread_t t;
	void *ret = NULL;
	if (pthread_create(&t, NULL, prepare_then_done, (void *)gid))
		return false;
	return pthread_join(t, &ret) == 0 && ret == gid;
}

static void on_cancel_hang(int sig)
{
	(void)sig;
	static const char m[] = "not ok: test_cancelled_ask: a prepare after a cancelled ask hangs\n";
	if (write(1, m, sizeof(m) - 1) < 0)
		_exit(2);
	_exit(1);
}

static void test_cancelled_ask(void)
{
	uint8_t other[16];
	test_gid(cancel_gid, 70);
	test_gid(other, 71);
	int s = listen_at(cancel_gid, false);
	CHECK(s >= 0, "a silent listener");
	if (s < 0)
		return;
	signal(SIGALRM, on_cancel_hang);
	alarm(20);
	pthread_t asker, waiter;
	CHECK(pthread_create(&asker, NULL, prepare_thread, NULL) == 0, "asker");
	int c = accept(s, NULL, NULL);  /* the asker has connected: it polls for the answer */
	CHECK(pthread_create(&waiter, NULL, prepare_thread, NULL) == 0, "waiter");
	sched_yield();  /* the waiter is likely waiting for the asker's answer now (not asserted) */
	pthread_cancel(waiter);
	pthread_cancel(asker);
	pthread_join(asker, NULL);
	pthread_join(waiter, NULL);
	if (c >= 0)
		close(c);
	CHECK(prepare_completes(other), "a prepare of another address completes");
	close(s);
	s = listen_at(cancel_gid, true);  /* a stale file: refused at once */
	CHECK(prepare_completes(cancel_gid), "a prepare of the same address completes");
	CHECK(!attach(cancel_gid), "and finds no region");
	alarm(0);
	signal(SIGALRM, SIG_DFL);
}

/* Issue #13, item 5: a connection that cannot be accepted (no fd left)
 * does not stay queued: the listener is not readable after a serve (else
 * the level-triggered engine would wake for it again and again). */
static int accept_fails_wakes(bool hard)
{
	uint8_t gid[16];
	struct shm_rx *rx = region_of(gid, (uint8_t)(62 + 100 * hard));
	if (!rx)
		return -1;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	shm_test_socket_path(gid, TEST_SLOT, sa.sun_path, sizeof(sa.sun_path));
	int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN };
	if (c < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, shm_rx_listen_fd(rx), &ev) < 0 ||
	    connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	struct rlimit old, lim;
	getrlimit(RLIMIT_NOFILE, &old);
	int lowest = dup(0);  /* every fd below it is open */
	close(lowest);
	lim.rlim_cur = (rlim_t)lowest;
	lim.rlim_max = hard ? (rlim_t)lowest : old.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &lim) < 0)
		return -1;
	int wakes = 0;
	for (int i = 0; i < 100; i++) {
		struct epoll_event got;
		if (epoll_wait(ep, &got, 1, 0) != 1)
			break;
		wakes++;
		shm_rx_serve(rx, NULL);
	}
	setrlimit(RLIMIT_NOFILE, &old);  /* the soft limit only */
	close(c);
	close(ep);
	shm_rx_close(rx);
	return wakes;
}

/* Issue #13, item 5: a connection that cannot be accepted (no fd left:
 * the soft limit is raised, fds_retry; at the hard limit the spare fd
 * accepts and closes it) does not stay queued: the listener is not
 * readable after a serve (else the level-triggered engine would wake for
 * it again and again).  The hard limit cannot be raised again: in a child. */
static void test_accept_fails(void)
{
	int w = accept_fails_wakes(false);
	CHECK(w == 1, "soft limit: one wake-up for the connection, not a spin (%d)", w);
	pid_t child = fork();
	if (child == 0)
		_exit(accept_fails_wakes(true) & 0xff);
	int status = 0;
	waitpid(child, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "hard limit: one wake-up, not a spin (status %#x)", status);
}

/* Connect to gid's socket and wait up to wait_ms for the region's fd:
 * 1 an fd came (closed again), 0 the owner closed the connection without
 * one, -1 no answer (or no connection). */
static int ask_raw(const uint8_t gid[16], unsigned slot, int wait_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (!shm_test_socket_path(gid, slot, sa.sun_path, sizeof(sa.sun_path)))
		return -1;
	/* non-blocking: the backlog of unanswered connections fills up (EAGAIN) */
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int r = -1;
	if (s >= 0 && connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		struct pollfd pfd = { .fd = s, .events = POLLIN };
		if (poll(&pfd, 1, wait_ms) == 1) {
			char d;
			union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * 2)]; } u;
			struct iovec iov = { &d, 1 };
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
					     .msg_controllen = sizeof(u.b) };
			ssize_t n = recvmsg(s, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
			int fd = -1;
			r = 0;
			if (n == 1 && (fd = answer_fd(&mh)) >= 0) {
				close(fd);
				r = 1;
			}
		}
	}
	if (s >= 0)
		close(s);
	return r;
}

/* The owner of the stalled-listener test: a device with its engine (UDP
 * on its own 127.64.x.y, and rings), run out of fds at the hard limit,
 * then given some back.  It tells the parent its GID and QPN slot (its
 * region's key), waits until its
 * engine stalled a listener, frees its fds, and says so. */
static void stalled_owner(int to_parent, int from_parent)
{
	struct uroce_dev *dev = uroce_dev_open(NULL, true);
	char c = 0;
	if (!dev || write(to_parent, dev->cfg.gids[0], 16) != 16 ||
	    write(to_parent, &dev->net->qpn_slot, sizeof(unsigned)) != sizeof(unsigned))
		_exit(1);
	int held[8];
	for (int i = 0; i < 8; i++)
		held[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int lowest = dup(0);  /* every fd below it is open */
	close(lowest);
	struct rlimit lim = { (rlim_t)lowest, (rlim_t)lowest };
	if (setrlimit(RLIMIT_NOFILE, &lim) < 0 || write(to_parent, &c, 1) != 1)
		_exit(1);
	/* the parent's connections: the spare fd takes the first, the next
	 * cannot be accepted: the listener is unwatched */
	while (!__atomic_load_n(&dev->stats->counters[UC_shm_serve_stalled], __ATOMIC_RELAXED))
		usleep(1000);
	for (int i = 0; i < 8; i++)
		close(held[i]);
	if (write(to_parent, &c, 1) != 1 || read(from_parent, &c, 1) < 0)
		_exit(1);
	_exit(0);
}

/* Review 2, item 3: a listener unwatched for want of an fd is watched
 * again, on an idle device too (no traffic brings a serve pass): once fds
 * are free, a producer gets the region (it never did on the old code:
 * every ask went unanswered).  Bounded by the attempts, not timed. */
static void test_stalled_listener_rearmed(void)
{
	int up[2], down[2];
	if (pipe(up) < 0 || pipe(down) < 0)
		return;
	pid_t child = fork();
	if (child == 0) {
		close(up[0]);
		close(down[1]);
		stalled_owner(up[1], down[0]);
	}
	close(up[1]);
	close(down[0]);
	uint8_t gid[16];
	unsigned slot = 0;
	char c;
	CHECK(read(up[0], gid, 16) == 16 && read(up[0], &slot, sizeof(slot)) == sizeof(slot) && read(up[0], &c, 1) == 1,
	      "the owner's device is open, its fds used up");
	/* connections until the owner says its listener stalled: the spare
	 * one is closed (0), the next one is left unanswered */
	int closed = 0;
	struct pollfd pfd = { .fd = up[0], .events = POLLIN };
	for (int i = 0; i < 200 && poll(&pfd, 1, 0) == 0; i++)
		closed += ask_raw(gid, slot, 20) == 0;
	CHECK(poll(&pfd, 1, 10000) == 1 && read(up[0], &c, 1) == 1, "the owner's listener stalled and its fds are free");
	int got = 0;
	for (int i = 0; i < 100 && got != 1; i++)
		got = ask_raw(gid, slot, 50);
	CHECK(got == 1, "then a producer gets the region (%d; %d closed on the spare fd)", got, closed);
	if (write(down[1], &c, 1) != 1) {
	}
	int status;
	waitpid(child, &status, 0);
	close(up[0]);
	close(down[1]);
}

/* Polls rx for ms milliseconds (a few polls a millisecond), or until it has
 * no ring claimed (until_inactive): the consumer looks for dead producers
 * by time (shm.c, REAP_NS), not by a count of polls. */
static void poll_for(struct shm_rx *rx, struct uroce_rxpkt *pkts, int ms, bool until_inactive)
{
	uint64_t bad = 0;
	bool more = false;
	for (int i = 0; i < ms * 5 && !(until_inactive && !shm_rx_active(rx)); i++) {
		shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
		usleep(200);
	}
}

/* Issue #13, item 8: a producer that forked a child and then died: the
 * child holds nothing of the region (the fd closed at the fork, the
 * mappings not inherited), so the consumer reaps the dead producer's ring
 * (ring_mask clears), and the child's own region of before dies with its
 * parent too. */
static _Atomic int *grandchild_pid;  /* a shared page */

static bool child_claims_forks_and_waits(const uint8_t *gid)
{
	struct shm_tx *tx = attach(gid);
	if (!tx)
		return false;
	send_one(tx, 9, 30);
	int p[2];
	char c = 0;
	if (pipe(p) < 0)
		return false;
	pid_t grandchild = fork();
	if (grandchild == 0) {
		/* the fork handler has run: say so, then live on */
		if (write(p[1], "g", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	*grandchild_pid = grandchild;
	return grandchild > 0 && read(p[0], &c, 1) == 1;
}

static void test_fork_parent_dies(void)
{
	uint8_t gid[16];
	struct shm_rx *rx = region_of(gid, 63);
	if (!rx)
		return;
	pid_t child;
	grandchild_pid = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (grandchild_pid == MAP_FAILED)
		return;
	bool ok = in_child_serving(child_claims_forks_and_waits, gid, &child, rx);
	int grandchild = *grandchild_pid;
	CHECK(ok && grandchild > 0, "the child claimed a ring and forked");
	static struct uroce_rxpkt pkts[64];
	uint64_t bad = 0;
	bool more = false;
	CHECK(shm_rx_poll(rx, pkts, 64, &more, &bad, NULL) == 1, "its packet");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	poll_for(rx, pkts, 2000, true);
	CHECK(!shm_rx_active(rx), "the dead producer's ring is reaped though its child lives");
	if (grandchild > 0) {
		kill(grandchild, SIGKILL);
	}
	munmap((void *)grandchild_pid, 4096);
	shm_rx_close(rx);
}

/* The region of test address k, where a child sent two packets and was
 * killed without giving its ring back */
static struct shm_rx *region_with_dead_producer(uint8_t gid[16], uint8_t k)
{
	struct shm_rx *rx = region_of(gid, k);
	pid_t child;
	if (!rx)
		return NULL;
	CHECK(in_child_serving(child_sends_two, gid, &child, rx), "the child sent two packets");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return rx;
}

/* A producer killed with records unread: its ring is taken over only once
 * the consumer has them (else the consumer would stand past where the new
 * producer begins). */
static void test_dead_producer(void)
{
	uint8_t gid[16];
	struct shm_rx *rx = region_with_dead_producer(gid, 4);
	if (!rx)
		return;
	/* every other ring taken (this process may claim them all) */
	shm_tx_test_rings_own(32);
	struct shm_tx *others[31];
	int nothers = 0;
	for (int i = 0; i < 31; i++)
		if ((others[nothers] = attach(gid)))
			nothers++;
	CHECK(nothers == 31, "31 more rings (%d)", nothers);
	struct shm_tx *tx = attach(gid);
	bool ours = false;
	for (int i = 0; i < nothers; i++)
		ours |= tx == others[i];
	CHECK(tx && ours, "the dead producer's ring is not taken while its packets are unread: one of ours is shared");
	shm_tx_detach(tx);
	static struct uroce_rxpkt pkts[64];
	uint64_t bad = 0;
	bool more = false;
	int n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	CHECK(n == 2 && matches(pkts[0].buf, 30, 9), "the dead producer's packets are delivered (%d)", n);
	tx = attach(gid);
	ours = false;
	for (int i = 0; i < nothers; i++)
		ours |= tx == others[i];
	CHECK(tx && !ours, "then its ring is taken over");
	if (tx) {
		send_one(tx, 11, 20);
		CHECK(got_one(rx, 11, 20), "and carries the new producer's packet");
		shm_tx_detach(tx);
	}
	for (int i = 0; i < nothers; i++)
		shm_tx_detach(others[i]);
	shm_tx_test_rings_own(0);
	shm_rx_close(rx);
}

/* A process's flows to one peer: the first quarter of the rings are one
 * each, later flows share the least used of them (one fd and header
 * mapping per peer, not per flow: issue #13).  A shared ring carries each
 * flow's packets, stays claimed while any flow has it, and is given back
 * with the last. */
static void test_rings_shared(void)
{
	uint8_t gid[16];
	struct shm_rx *rx = region_of(gid, 9);
	if (!rx)
		return;
	struct shm_tx *tx[24];
	int distinct = 0;
	for (int i = 0; i < 24; i++) {
		tx[i] = attach(gid);
		CHECK(tx[i], "flow %d has a ring", i);
		if (!tx[i])
			return;
		bool seen = false;
		for (int k = 0; k < i; k++)
			seen |= tx[k] == tx[i];
		distinct += !seen;
		CHECK(seen == (i >= 8), "flow %d: %s ring", i, i >= 8 ? "a shared" : "its own");
	}
	CHECK(distinct == 8, "8 rings claimed (%d)", distinct);
	/* flows 8..15 share rings 0..7 once each, 16..23 twice */
	for (int i = 8; i < 24; i++)
		CHECK(tx[i] == tx[i % 8], "flow %d shares the least used ring", i);
	for (int i = 0; i < 8; i++)
		shm_tx_detach(tx[i]);
	for (int i = 8; i < 24; i++) {
		send_one(tx[i], 100 + (uint32_t)i, 40);
		CHECK(got_one(rx, 100 + (uint32_t)i, 40), "flow %d's packet, after the ring's first flow is gone", i);
	}
	for (int i = 8; i < 24; i++)
		shm_tx_detach(tx[i]);
	CHECK(!got_one(rx, 0, 0) && !shm_rx_active(rx), "the rings are given back with their last flow");
	shm_rx_close(rx);
}

/* A producer killed after its packets were taken: the consumer gives its
 * ring back on its own within a few thousand polls (else the region would
 * look in use, and read its sockets only every 64th call, until someone
 * claimed that ring). */
static void test_dead_producer_reaped(void)
{
	uint8_t gid[16];
	struct shm_rx *rx = region_with_dead_producer(gid, 7);
	if (!rx)
		return;
	static struct uroce_rxpkt pkts[64];
	uint64_t bad = 0;
	bool more = false;
	int n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	CHECK(n == 2, "its packets are delivered (%d)", n);
	CHECK(shm_rx_active(rx), "its ring still looks claimed");
	poll_for(rx, pkts, 2000, true);
	CHECK(!shm_rx_active(rx), "the consumer has given it back");
	shm_rx_close(rx);
}

static int send_ret(struct shm_tx *tx, uint32_t seq, uint32_t len)
{
	static uint8_t b[4400];
	fill(b, len, seq);
	struct uroce_txmsg m = { .iov = { { b, len } }, .iovcnt = 1, .len = len };
	bool db;
	return shm_tx_send(tx, sgid, 7, 0, &m, 1, &db);
}

/* Issue 13, items 1 and 2: a peer of the same user tries to truncate a
 * region under traffic, through /proc as it would (/proc/PID/fd/N).  The
 * region is sealed: every truncation fails with EPERM, and this thread,
 * which blocks SIGBUS (a poller's or poster's mask is the application's),
 * goes on sending and receiving, the data exact.  (The code before the
 * seals let the truncation through, and a fault with SIGBUS blocked
 * killed the process whatever the handler.) */
static void test_truncation_refused(void)
{
	uint8_t gid[16];
	struct shm_rx *rx;
	struct shm_tx *tx1, *tx2;
	sigset_t bus, old;
	sigemptyset(&bus);
	sigaddset(&bus, SIGBUS);
	pthread_sigmask(SIG_BLOCK, &bus, &old);
	if (!region_and_ring(gid, 11, &rx, &tx1))
		goto out;
	tx2 = attach(gid);
	CHECK(tx2, "a second ring");
	send_one(tx1, 1, 100);
	CHECK(got_one(rx, 1, 100), "a packet before the attempt");
	int fd = region_fd(gid);
	CHECK(fd >= 0, "the region among our fds, as /proc shows it to a peer");
	errno = 0;
	CHECK(fd >= 0 && ftruncate(fd, (off_t)1 << 32) < 0 && errno == EPERM, "growing it fails EPERM (errno %d)", errno);
	errno = 0;
	CHECK(fd >= 0 && ftruncate(fd, 4096 + 32768 * 64) < 0 && errno == EPERM, "shrinking it fails EPERM (errno %d)", errno);
	errno = 0;
	CHECK(fd >= 0 && ftruncate(fd, 0) < 0 && errno == EPERM, "truncating it to 0 fails EPERM (errno %d)", errno);
	CHECK(fd >= 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) < 0, "no seal can be added (F_SEAL_SEAL)");
	if (fd >= 0)
		close(fd);
	for (uint32_t k = 0; k < 2000; k++) {
		struct shm_tx *tx = k % 2 ? tx2 : tx1;
		uint32_t len = len_of(k);
		CHECK(send_ret(tx, 10 + k, len) == 1, "send %u after the attempt", k);
		if (!got_one(rx, 10 + k, len)) {
			CHECK(0, "packet %u after the attempt, exact", k);
			break;
		}
	}
	shm_tx_detach(tx1);
	shm_tx_detach(tx2);
	shm_rx_close(rx);
out:
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* fork without exec (issue 13, item 2): the parent holds a ring; its
 * child attaches a ring of its own in the same region, finds the
 * inherited one refused (-EPIPE: net.c then sends that flow by UDP),
 * detaches everything and exits.  The parent's ring is still its own:
 * the owner word and its lock (which the consumer's reaping checks) are
 * untouched, and its packets arrive, exact.  (Before, the child's detach
 * gave the parent's ring back: owner 0 and the lock, on the description
 * both share, released.)  Another parent thread holds peers_lock across
 * the fork: the child's attach does not hang on it. */
static void *hold_peers_lock(void *arg)
{
	/* shm_tx_attach of an address whose listener never answers waits
	 * SHM_CONNECT_WAIT_MS for an answer, its ask in flight (peers_lock
	 * is dropped meanwhile, and taken again after): the fork likely
	 * comes meanwhile (the test passes either way; it then also shows
	 * that the child's lock and ask table were made anew) */
	shm_tx_detach(attach(arg));
	return NULL;
}

static void test_fork(void)
{
	uint8_t gid[16];
	struct shm_rx *rx;
	struct shm_tx *tx;
	if (!region_and_ring(gid, 15, &rx, &tx))
		return;
	send_one(tx, 1, 50);
	CHECK(got_one(rx, 1, 50), "the parent's ring works");
	struct shm_test_view v;
	unsigned idx = 0;
	uint32_t tag = 0;
	for (; idx < 32; idx++) {
		shm_rx_test_view(rx, idx, &v);
		if ((tag = __atomic_load_n(v.owner, __ATOMIC_ACQUIRE)) != 0)
			break;
	}
	CHECK(idx < 32 && tag != (uint32_t)getpid(), "the parent owns a ring, its owner word a tag, not the pid");
	uint8_t nogid[16];
	test_gid(nogid, 250);
	int sq = listen_at(nogid, false);
	pthread_t t;
	pthread_create(&t, NULL, hold_peers_lock, nogid);
	pid_t child = fork();
	if (child == 0) {
		int rc = 0;
		struct shm_tx *mine = attach(gid);
		if (!mine || mine == tx)
			rc |= 1;  /* no ring of its own */
		if (send_ret(tx, 2, 50) != -EPIPE)
			rc |= 2;  /* produced into the parent's ring */
		if (mine && send_ret(mine, 3, 50) != 1)
			rc |= 4;
		static struct uroce_rxpkt cp[64];
		uint64_t cbad = 0;
		bool cmore = false;
		if (shm_rx_poll(rx, cp, 64, &cmore, &cbad, NULL) != 0 || shm_rx_active(rx))
			rc |= 8;  /* the child consumed the parent's region */
		shm_tx_detach(tx);
		shm_tx_detach(mine);
		shm_rx_close(rx);
		_exit(rc);
	}
	int status = 0;
	/* the child asks this process for the region: served until it exits */
	for (;;) {
		struct pollfd pfd = { .fd = shm_rx_listen_fd(rx), .events = POLLIN };
		if (waitpid(child, &status, WNOHANG) == child)
			break;
		if (poll(&pfd, 1, 10) == 1)
			shm_rx_serve(rx, NULL);
	}
	pthread_join(t, NULL);
	close(sq);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child: own ring, inherited one refused, consumed nothing (status %#x)", status);
	CHECK(__atomic_load_n(v.owner, __ATOMIC_ACQUIRE) == tag, "the parent still owns its ring (owner %u)", *v.owner);
	/* the child's packet (ring 3's) first, then the child's ring goes back */
	static struct uroce_rxpkt pkts[64];
	uint64_t bad = 0;
	bool more = false;
	int n = shm_rx_poll(rx, pkts, 64, &more, &bad, NULL);
	CHECK(n == 1 && matches(pkts[0].buf, 50, 3), "the child's own packet (%d)", n);
	/* past a reaping round: a ring whose lock was dropped would be given back */
	poll_for(rx, pkts, 20, false);
	CHECK(__atomic_load_n(v.owner, __ATOMIC_ACQUIRE) == tag, "and its lock: not reaped (owner %u)", *v.owner);
	for (uint32_t k = 0; k < 1000; k++) {
		send_one(tx, 100 + k, len_of(k));
		if (!got_one(rx, 100 + k, len_of(k))) {
			CHECK(0, "the parent's packet %u after the child, exact", k);
			break;
		}
	}
	shm_tx_detach(tx);
	shm_rx_close(rx);
}

/* A SIGBUS anywhere but in a region is not ours: the process dies of it
 * as it would without uroce. */
static void test_foreign_sigbus(void)
{
	uint8_t gid[16];
	test_gid(gid, 13);
	pid_t child = fork();
	if (child == 0) {
		static char page[4096];
		int slot = shm_guard_mapping(page, sizeof(page));  /* installs the handler */
		char name[] = "/dev/shm/uroce-test-bus.XXXXXX";
		int fd = mkstemp(name);
		if (slot < 0 || fd < 0 || ftruncate(fd, 4096) < 0)
			_exit(2);
		unlink(name);
		volatile uint8_t *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED || ftruncate(fd, 0) < 0)
			_exit(2);
		p[0] = 1;
		_exit(3);
	}
	int status = 0;
	waitpid(child, &status, 0);
	/* under ASan its handler, installed before ours, gets the fault and
	 * exits 1 after its report (or aborts, with abort_on_error=1, as
	 * scripts/test.sh sets): chained to, as an application's would be */
	bool chained = (WIFEXITED(status) && WEXITSTATUS(status) == 1) ||
		       (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
	CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) || chained,
	      "a foreign SIGBUS kills, or reaches the handler before ours (status %#x)", status);
}

/* Review 2, item 6 (best effort: a race, so it may pass on the old code
 * too, but never fails on the fixed one): a child forked while another
 * thread opens and closes regions and their handed-over fds inherits no
 * region fd (each open-and-track, untrack-and-close is one step for fork). */
static _Atomic bool churn_stop;
static void *churn_regions(void *arg)
{
	const uint8_t *peer = arg;
	uint8_t own[16];
	test_gid(own, 91);
	while (!atomic_load(&churn_stop)) {
		struct shm_rx *rx = shm_rx_open(own, TEST_SLOT);
		shm_tx_detach(attach(own));  /* region_own: a dup, reopened, closed */
		shm_rx_close(rx);
		shm_tx_detach(attach(peer));  /* an ask: a received fd, reopened, closed */
	}
	return NULL;
}

static bool holds_region_fd(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	bool found = false;
	while (!found && d && (e = readdir(d))) {
		char path[300], link[300];
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = 0;
			found = !strncmp(link, "/memfd:uroce-rx", 15);
		}
	}
	if (d)
		closedir(d);
	return found;
}

static void test_fork_gaps(void)
{
	uint8_t gid[16];
	pid_t owner;
	child_region(gid, 90, &owner);
	atomic_store(&churn_stop, false);
	pthread_t t;
	if (pthread_create(&t, NULL, churn_regions, gid))
		return;
	int inherited = 0;
	for (int i = 0; i < 300; i++) {
		pid_t c = fork();
		if (c == 0)
			_exit(holds_region_fd());
		int status = 0;
		waitpid(c, &status, 0);
		inherited += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	atomic_store(&churn_stop, true);
	pthread_join(t, NULL);
	CHECK(inherited == 0, "forked children inherited no region fd (%d of 300 did)", inherited);
	kill(owner, SIGKILL);
	waitpid(owner, NULL, 0);
}

/* Review 2, item 5: the rendezvous directory is deleted and made again by
 * another user after the first region (RemoveIPC, a tmp cleaner; here
 * uid+1, mode 0777 so that a bind there would succeed): the next region's
 * socket is not in it (on the old code it was: the path was checked once).
 * Run in a fresh child before anything else has set the process's
 * directory: as root with the effective uid of an unused user, its
 * XDG_RUNTIME_DIR a directory of that user's.  Exit status: 0 ok, 1 the
 * socket landed in the other user's directory, 2 no region at all, 77 not
 * root. */
static int dir_replaced_child(void)
{
	if (geteuid() != 0)
		return 77;
	uid_t u = 61000 + (uid_t)(getpid() % 1000);
	char xdg[64], dir[80], old[96];
	snprintf(xdg, sizeof(xdg), "/tmp/uroce-test-dir.%d", (int)getpid());
	snprintf(dir, sizeof(dir), "%s/uroce", xdg);
	snprintf(old, sizeof(old), "%s/uroce.gone", xdg);
	if (mkdir(xdg, 0700) < 0 || chown(xdg, u, u) < 0 || setenv("XDG_RUNTIME_DIR", xdg, 1) < 0 ||
	    setresuid((uid_t)-1, u, 0) < 0)
		return 2;
	uint8_t g1[16], g2[16];
	test_gid(g1, 80);
	test_gid(g2, 81);
	struct shm_rx *a = shm_rx_open(g1, TEST_SLOT);
	int rc = a ? 0 : 2;
	/* as root again (the saved uid): the directory goes, another user's comes */
	if (rc == 0 && (seteuid(0) < 0 || rename(dir, old) < 0 || mkdir(dir, 0777) < 0 || chmod(dir, 0777) < 0 ||
			chown(dir, u + 1, u + 1) < 0 || seteuid(u) < 0))
		rc = 2;
	struct shm_rx *b = rc == 0 ? shm_rx_open(g2, TEST_SLOT) : NULL;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (!strncmp(e->d_name, "rx.", 3))
			rc = 1;
	if (d)
		closedir(d);
	(void)b;  /* NULL (its directory is gone) or in the checked one: both fine */
	if (seteuid(0) == 0) {
		char cmd[160];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", xdg);
		if (system(cmd) != 0)
			rc = rc ? rc : 2;
	}
	return rc;
}

static void test_dir_replaced(void)
{
	pid_t child = fork();
	if (child == 0)
		_exit(dir_replaced_child());
	int status = 0;
	waitpid(child, &status, 0);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
		printf("skip: the directory-replaced test needs root\n");
		return;
	}
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "a region made after the directory was replaced by another user's is not in it (status %#x)", status);
}

/* Issue #16's doorbells: an owner hands each producer a socket of its own
 * connected to its bell after the region, and a producer's doorbell is a
 * datagram on it, which the owner's engine, asleep in epoll on the bell,
 * hears -- in another process (an ask) and in this one
 * (region_own).  An owner that hands none, or a bell that is no datagram
 * socket, leaves the producer to ring by UDP (-ENODEV), the region still
 * taken and the bad fd closed.  A doorbell never blocks: not when the
 * owner reads none (its queue full), nor when it cleared O_NONBLOCK on the
 * end it handed over (an eventfd bell blocked its writer for good so). */
static int bell_pipe = -1;

static bool child_hears_bell(const uint8_t *gid)
{
	struct shm_rx *rx = shm_rx_open(gid, TEST_SLOT);
	char c = rx && shm_rx_bell_fd(rx) >= 0;
	if (write(bell_pipe, &c, 1) != 1 || !c)
		_exit(1);
	for (;;) {
		struct pollfd pfd[2] = { { .fd = shm_rx_listen_fd(rx), .events = POLLIN },
					 { .fd = shm_rx_bell_fd(rx), .events = POLLIN } };
		if (poll(pfd, 2, -1) < 1)
			continue;
		if (pfd[0].revents)
			shm_rx_serve(rx, NULL);
		unsigned calls = 0;
		if (pfd[1].revents && shm_rx_bell_drain(rx, &calls) == 1) {
			c = 'B';
			if (write(bell_pipe, &c, 1) != 1)
				_exit(1);
		}
	}
}

static int bell_kind;

static bool child_hands_bell_kind(const uint8_t *gid)
{
	shm_test_bell(bell_kind);
	return (child_rx = shm_rx_open(gid, TEST_SLOT)) != NULL;
}

static void test_bells(void)
{
	/* another process's bell */
	uint8_t gid[16];
	test_gid(gid, 95);
	int p[2];
	char c = 0;
	CHECK(pipe(p) == 0, "a pipe");
	bell_pipe = p[1];
	pid_t child = fork();
	if (child == 0)
		child_hears_bell(gid);
	CHECK(read(p[0], &c, 1) == 1 && c == 1, "the owner has a bell");
	int before = fd_count();
	struct shm_tx *tx = attach(gid);
	CHECK(tx, "its region is attached to");
	CHECK(fd_count() == before + 2, "the region and its bell are held (%d fds before, %d after)", before,
	      fd_count());
	struct pollfd pfd = { .fd = p[0], .events = POLLIN };
	/* and again after the first producer's entry is gone (its bell
	 * closed): each producer has a socket of its own */
	for (int round = 0; round < 2; round++) {
		if (round) {
			shm_tx_detach(tx);
			shm_tx_test_expire();
			tx = attach(gid);
		}
		CHECK(tx && shm_tx_ring_bell(tx) == 0, "round %d: the producer rings the owner's bell", round);
		c = 0;
		CHECK(poll(&pfd, 1, 10000) == 1 && read(p[0], &c, 1) == 1 && c == 'B',
		      "round %d: and the owner hears it once", round);
	}
	shm_tx_detach(tx);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	close(p[0]);
	close(p[1]);

	/* our own region's, through region_own */
	uint8_t own[16];
	test_gid(own, 96);
	struct shm_rx *rx = shm_rx_open(own, TEST_SLOT);
	for (int round = 0; round < 2; round++) {
		tx = attach(own);
		CHECK(rx && tx && shm_tx_ring_bell(tx) == 0, "round %d: a flow to our own region rings our bell", round);
		pfd = (struct pollfd){ .fd = shm_rx_bell_fd(rx), .events = POLLIN };
		unsigned calls = 0;
		CHECK(rx && poll(&pfd, 1, 0) == 1 && shm_rx_bell_drain(rx, &calls) == 1 && poll(&pfd, 1, 0) == 0,
		      "round %d: and our bell is readable until read", round);
		shm_tx_detach(tx);
		shm_tx_test_expire();
	}
	shm_rx_close(rx);

	static const char *what[] = { "no bell", "a stream socket", "a bell that is no socket",
				      "a bell nobody reads", "a bell made blocking" };
	static const int kind[] = { SHM_TEST_BELL_NONE, SHM_TEST_BELL_STREAM, SHM_TEST_BELL_NOT_SOCKET,
				    SHM_TEST_BELL_OWN, SHM_TEST_BELL_BLOCKING };
	for (int i = 0; i < 5; i++) {
		test_gid(gid, (uint8_t)(97 + i));
		bell_kind = kind[i];
		CHECK(in_child(child_hands_bell_kind, gid, &child), "%s: the owner listens", what[i]);
		before = fd_count();
		tx = attach(gid);
		CHECK(tx, "%s: the region is attached to", what[i]);
		if (i < 3) {
			/* what is not shared memory is closed by a thread of its own */
			int after = fd_count_back_to(before + 1);
			CHECK(tx && shm_tx_ring_bell(tx) == -ENODEV, "%s: doorbells go by UDP", what[i]);
			CHECK(after == before + 1, "%s: only the region is held (%d fds before, %d after)", what[i],
			      before, after);
		} else {
			/* the owner reads nothing: its queue fills, and every
			 * doorbell after that says EAGAIN -- rung all the same,
			 * at once (a doorbell that blocked hangs the test) */
			int rung = 0;
			for (int k = 0; k < 1000 && tx; k++)
				rung += shm_tx_ring_bell(tx) == 0;
			CHECK(rung == 1000, "%s: 1,000 doorbells, none blocked (%d rung)", what[i], rung);
		}
		shm_tx_detach(tx);
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
}

int main(void)
{
	/* an address of this test's own, unlike any device's */
	gid_a[13] = (uint8_t)(getpid() >> 8);
	gid_a[14] = (uint8_t)getpid();
	test_dir_replaced();  /* first: before this process has a rendezvous directory */
	test_order_and_wrap();
	test_hostile_producer();
	test_dead_owner();
	test_kept_fd_not_alive();
	test_no_fds_to_owner();
	test_dead_producer();
	test_dead_producer_reaped();
	test_rings_shared();
	test_position_wrap();
	test_calls_appear_whole();
	test_squatted_name();
	test_hostile_handover();
	test_lingering_fds_from_owner();
	test_lingering_fds_to_owner();
	test_leased_region();
	test_seals_check();
	test_negative_cache();
	test_cancelled_ask();
	test_attach_never_asks();
	test_accept_fails();
	test_stalled_listener_rearmed();
	test_fork_parent_dies();
	test_truncation_refused();
	test_fork();
	test_fork_gaps();
	test_foreign_sigbus();
	test_bells();
	if (failures) {
		printf("%d failures\n", failures);
		return 1;
	}
	printf("ok: same-host rings\n");
	return 0;
}
