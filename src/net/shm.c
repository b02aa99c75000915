/* Same-host rings (shm.h, docs/architecture.md "Same-host rings").
 *
 * Region layout: a header (ring control words, each on its own cache line)
 * and SHM_RINGS rings of SHM_UNITS 64-byte units.  A ring has one producer
 * (the flow that claimed it) and one consumer (the region's owner).  A
 * packet is a record of whole units, never wrapping (a skip record fills
 * the end of the ring): a 32-byte header, then the packet.  The header's
 * seq, stored last, is the record's position + 1 (positions are
 * free-running unit counters), so the consumer learns that a record is
 * there from the very cache line that carries it -- a small packet is one
 * line, one transfer between the cores -- and a stale record of an earlier
 * lap never matches.  The consumer publishes its tail for the producer's
 * room check.  Neither side trusts the other: the producer keeps its
 * position privately and writes only inside its ring; the consumer bounds
 * every length it reads and copies a packet out before the transport
 * looks at it.
 *
 * Lifetime: the owner holds an exclusive flock on the region for its life,
 * so a free lock means a dead owner (a region left by a killed process is
 * removed by the next device that opens); a producer holds a lock on a byte
 * of its ring the same way (ring_lock).  A ring's pages are allocated
 * (fallocate) when a flow claims it, so a full /dev/shm refuses the claim
 * and the flow uses UDP, instead of a write into the mapping faulting. */
#include "shm.h"
#include "net.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_MAGIC 0x78722d65636f7275ull /* "uroce-rx" */
#define SHM_VERSION 1
#define SHM_RINGS 32
#define SHM_UNIT 64
#define SHM_UNITS 32768          /* 2 MiB: a QP's window (128 packets of 4 KiB) and READ responses */
#define SHM_PKT_MAX 4288         /* the largest packet at MTU 4096 with its headers */
#define SHM_RX_BATCH 64          /* packets copied out per region and poll */

struct shm_rec_hdr {
	_Atomic uint32_t seq;    /* position + 1, stored last */
	uint32_t len;            /* UDP payload bytes: BTH .. ICRC; 0 with units: a skip record */
	uint16_t units;          /* the record's size */
	uint16_t sport;          /* the UDP source port the packet would have had */
	uint16_t ip_id;          /* the IPv4 ID its ICRC was computed with */
	uint8_t tos;
	uint8_t pad;
	uint8_t sgid[16];
};
_Static_assert(sizeof(struct shm_rec_hdr) == 32, "half a unit");

struct shm_ring_ctl {
	alignas(64) _Atomic uint32_t tail;   /* consumer: units taken */
	alignas(64) _Atomic uint32_t owner;  /* producing process, 0: free */
};

struct shm_region {
	uint64_t magic;
	uint32_t version, reserved0;
	uint32_t nrings, nunits, unit, reserved;
	uint8_t gid[16];
	alignas(64) _Atomic uint32_t rx_sleeping; /* the owner's engine sleeps on its sockets */
	alignas(64) _Atomic uint32_t ring_mask;   /* claimed rings */
	struct shm_ring_ctl ring[SHM_RINGS];
};

#define SHM_HDR_BYTES ((sizeof(struct shm_region) + 4095) & ~(size_t)4095)
#define SHM_RING_BYTES ((size_t)SHM_UNITS * SHM_UNIT)
#define SHM_REGION_BYTES (SHM_HDR_BYTES + (size_t)SHM_RINGS * SHM_RING_BYTES)
_Static_assert(SHM_RING_BYTES % 4096 == 0, "rings are mapped page by page");
_Static_assert(SHM_PKT_MAX >= 4096 + 64 + 4 + 3, "a record holds a packet at MTU 4096 with its headers");

struct shm_rx {
	struct shm_region *r;
	int fd;                          /* holds the owner's lock */
	int slot;                        /* the mapping's guard (shm_guard_add) */
	atomic_bool dead;                /* truncated under us: not read again (the engine's
					  * sleep flag reads it outside rx_lock) */
	char path[96];
	uint8_t gid[16];
	uint32_t tail[SHM_RINGS];        /* the consumer's own copy: never read back */
	uint32_t populated;              /* rings whose pages this mapping has */
	uint32_t broken;                 /* rings whose producer wrote nonsense: not read */
	unsigned polls;                  /* picks the first ring to read; every REAP_EVERY-th
					  * also looks for dead producers */
	uint8_t *bufs;                   /* SHM_RX_BATCH packets copied out */
};

/* A peer's region as this process's senders see it: one fd and one header
 * mapping per peer address, however many flows send there (an fd per flow
 * would bound the QPs by RLIMIT_NOFILE, issue #13), and the rings this
 * process holds in it.  Kept while it holds a ring (peers_lock). */
struct shm_peer {
	struct shm_peer *next;
	uint8_t gid[16];
	struct shm_region *r;            /* header only */
	int fd;                          /* holds this process's ring locks */
	ino_t ino;                       /* the region's file, to tell a successor's */
	struct shm_tx *held[SHM_RINGS];  /* this process's rings, NULL: not held */
	unsigned nheld;
	int slot_hdr;                    /* the header mapping's guard (shm_guard_add) */
};

/* A ring in a peer's region, claimed by this process and shared by every
 * flow given it (users): the first SHM_RINGS_OWN flows to a peer get a
 * ring each, later ones share the least used (shm_tx_attach).  A flow
 * keeps its ring for life, so its packets keep their order.  `lock`
 * makes each send call one producer's, as the ring has one producer: it
 * is held only by the flows of this ring, never across rings or QPs
 * otherwise, and nothing is taken inside it. */
struct shm_tx {
	struct shm_peer *peer;
	uint8_t *ring;
	struct shm_ring_ctl *ctl;
	unsigned idx;
	unsigned users;                  /* flows on it (peers_lock) */
	pthread_mutex_t lock;            /* the producer's side: head, tail_seen, the ring's bytes */
	uint32_t head, tail_seen;
	int slot_ring;                   /* the ring mapping's guard (shm_guard_add) */
};

/* How many rings of a peer's region one process claims before its flows
 * share them: a quarter, so that four processes sending to one peer each
 * get rings of their own. */
#define SHM_RINGS_OWN (SHM_RINGS / 4)
static unsigned rings_own = SHM_RINGS_OWN;  /* shm_tx_test_rings_own */

void shm_tx_test_rings_own(unsigned n)
{
	rings_own = n ? n : SHM_RINGS_OWN;
}

static pthread_mutex_t peers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_peer *peers;       /* peers_lock */
/* The process the list is of: a forked child shares the parent's fds,
 * ring locks and rings, and must not produce into them (two producers
 * of two processes, each under its own lock) nor give them back. */
static pid_t peers_pid;

/* Truncation (issue 13).  A region is a file that every process of its
 * user may open, so a peer can ftruncate it under us: an access to a page
 * past the new end raises SIGBUS, in the consumer's poll and in a
 * producer's copy.  (Seals would refuse the truncation, but only a memfd
 * takes them, and a memfd has no name a peer of another PID namespace
 * could rendezvous at.)  So every mapping of a region is registered here,
 * and a SIGBUS whose address lies in one makes that mapping dead: the
 * handler maps anonymous zero pages over the whole of it and returns, the
 * faulting access completes on them (reads of zero find no record; writes
 * go nowhere), and its user sees `dead` after the access and abandons the
 * mapping -- the consumer stops reading its region and truncates it to 0
 * so that every producer faults too (shm_rx_poll), a producer's flow goes
 * on by UDP (net.c).  No sigsetjmp on the fast path: the check is one
 * load of the dead flag after each call.  A SIGBUS at any other address
 * goes to the handler that was installed before ours (or the default
 * action), so an application's own faults are its own as before.  An
 * application that installs a SIGBUS handler after ours takes these
 * faults away from us (README "Security model"). */
#define SHM_MAPS_MAX (2 * 16384 + 64)  /* two per producer (header, ring) on every QP, a region per address */
struct shm_map {
	_Atomic uintptr_t lo, hi;      /* [lo, hi), lo 0: a free slot */
	_Atomic int dead;
};
static struct shm_map shm_maps[SHM_MAPS_MAX];
static _Atomic unsigned shm_maps_used;   /* slots below this may be in use */
static struct sigaction shm_old_bus;
static pthread_once_t shm_guard_once = PTHREAD_ONCE_INIT;

static void shm_on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	unsigned n = atomic_load(&shm_maps_used);

	for (unsigned i = 0; si->si_code > 0 && i < n; i++) {
		uintptr_t lo = atomic_load(&shm_maps[i].lo), hi = atomic_load(&shm_maps[i].hi);
		if (!lo || a < lo || a >= hi)
			continue;
		atomic_store(&shm_maps[i].dead, 1);
		/* mmap is a system call, safe in a handler (not in POSIX's list,
		 * but it takes no user-space lock) */
		if (mmap((void *)lo, hi - lo, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
		    MAP_FAILED)
			return;
		break;
	}
	if (shm_old_bus.sa_flags & SA_SIGINFO) {
		if (shm_old_bus.sa_sigaction) {
			shm_old_bus.sa_sigaction(sig, si, uc);
			return;
		}
	} else if (shm_old_bus.sa_handler != SIG_DFL && shm_old_bus.sa_handler != SIG_IGN) {
		shm_old_bus.sa_handler(sig);
		return;
	} else if (shm_old_bus.sa_handler == SIG_IGN && si->si_code <= 0) {
		return;  /* a SIGBUS sent by kill(), which the application ignores */
	}
	/* the default action: a fault re-raises on return, a sent signal is
	 * raised again (blocked here, delivered on return) */
	signal(SIGBUS, SIG_DFL);
	if (si->si_code <= 0)
		raise(SIGBUS);
}

static void shm_guard_install(void)
{
	struct sigaction sa = { .sa_sigaction = shm_on_sigbus, .sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &shm_old_bus);
}

/* Registers [p, p + len): a slot, or -1 when none is free (the caller then
 * does without the mapping). */
static int shm_guard_add(void *p, size_t len)
{
	pthread_once(&shm_guard_once, shm_guard_install);
	for (unsigned i = 0; i < SHM_MAPS_MAX; i++) {
		uintptr_t free_lo = 0;
		if (atomic_load(&shm_maps[i].lo) ||
		    !atomic_compare_exchange_strong(&shm_maps[i].lo, &free_lo, (uintptr_t)1))
			continue;
		/* lo before hi: the handler never sees a range wider than this */
		atomic_store(&shm_maps[i].dead, 0);
		atomic_store(&shm_maps[i].lo, (uintptr_t)p);
		atomic_store(&shm_maps[i].hi, (uintptr_t)p + len);
		unsigned used = atomic_load(&shm_maps_used);
		while (used < i + 1 && !atomic_compare_exchange_weak(&shm_maps_used, &used, i + 1))
			;
		return (int)i;
	}
	return -1;
}

/* Before the mapping is unmapped: its range may be reused by anyone. */
static void shm_guard_del(int slot)
{
	if (slot < 0)
		return;
	atomic_store(&shm_maps[slot].hi, 0);
	atomic_store(&shm_maps[slot].lo, 0);
}

int shm_guard_mapping(void *p, size_t len)
{
	return shm_guard_add(p, len);
}

void shm_unguard_mapping(int slot)
{
	shm_guard_del(slot);
}

static bool shm_guard_dead(int slot)
{
	return atomic_load_explicit(&shm_maps[slot].dead, memory_order_relaxed) != 0;
}

/* Regions are per network namespace: an address means a socket of this
 * namespace only (a veth peer in another one is reached by UDP). */
static int region_path(const uint8_t gid[16], char *out, size_t n)
{
	struct stat st;

	if (stat("/proc/self/ns/net", &st) < 0)
		return -1;
	int k = snprintf(out, n, "/dev/shm/uroce-rx.%llu.", (unsigned long long)st.st_ino);
	for (int i = 0; i < 16 && k + 2 < (int)n; i++)
		k += snprintf(out + k, n - (size_t)k, "%02x", gid[i]);
	return 0;
}

/* Map a ring's pages now: the first pass over a ring would otherwise take
 * page faults on both sides, a few per message until the ring has wrapped
 * once. */
static void populate(void *p, size_t len, bool write)
{
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif
	if (madvise(p, len, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0)
		return;
	/* before Linux 5.14: touch a byte of every page */
	for (size_t off = 0; off < len; off += 4096)
		(void)*(volatile uint8_t *)((uint8_t *)p + off);
}

void shm_sweep_stale_regions(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "uroce-rx.", 9))
			continue;
		/* O_NONBLOCK: a FIFO planted at such a name does not hang us */
		int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0)
			continue;
		/* only our own user's regular files: another user's name is not
		 * ours to remove (root could).  Free lock: its owner is gone (a
		 * region is locked before it has a name); and the name is still
		 * that file's, not a live region renamed onto it meanwhile */
		struct stat a, b;
		if (fstat(fd, &a) == 0 && S_ISREG(a.st_mode) && a.st_uid == geteuid() &&
		    flock(fd, LOCK_EX | LOCK_NB) == 0 &&
		    fstatat(dirfd(d), e->d_name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino)
			unlinkat(dirfd(d), e->d_name, 0);
		close(fd);
	}
	closedir(d);
}

struct shm_rx *shm_rx_open(const uint8_t gid[16])
{
	struct shm_rx *rx = calloc(1, sizeof(*rx));
	char tmp[136];
	void *m = MAP_FAILED;

	if (!rx)
		return NULL;
	rx->fd = -1;
	rx->slot = -1;
	if (region_path(gid, rx->path, sizeof(rx->path)) < 0)
		goto fail;
	/* made unnamed and locked, so that no sweep takes it for a dead
	 * owner's; named (and renamed into place) only once set up */
	rx->fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (rx->fd < 0)
		goto fail;
	if (flock(rx->fd, LOCK_EX | LOCK_NB) < 0 || ftruncate(rx->fd, (off_t)SHM_REGION_BYTES) < 0 ||
	    fallocate(rx->fd, 0, 0, (off_t)SHM_HDR_BYTES) < 0)
		goto fail;
	m = mmap(NULL, SHM_REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, rx->fd, 0);
	rx->bufs = malloc((size_t)SHM_RX_BATCH * SHM_PKT_MAX);
	if (m == MAP_FAILED || !rx->bufs || (rx->slot = shm_guard_add(m, SHM_REGION_BYTES)) < 0)
		goto fail;
	rx->r = m;
	rx->r->version = SHM_VERSION;
	rx->r->nrings = SHM_RINGS;
	rx->r->nunits = SHM_UNITS;
	rx->r->unit = SHM_UNIT;
	memcpy(rx->r->gid, gid, 16);
	memcpy(rx->gid, gid, 16);
	__atomic_store_n(&rx->r->magic, SHM_MAGIC, __ATOMIC_RELEASE);
	/* binding the address made it ours: a region left under this name
	 * by a process that died is replaced whole */
	char fdpath[32];
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", rx->fd);
	/* a random temporary name: one planted in advance would refuse the
	 * link (linkat neither follows nor replaces) and cost us the rings */
	uint64_t r = 0;
	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		goto fail;
	snprintf(tmp, sizeof(tmp), "%s.%d.%016llx", rx->path, (int)getpid(), (unsigned long long)r);
	if (linkat(AT_FDCWD, fdpath, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) < 0)
		goto fail;
	if (rename(tmp, rx->path) < 0) {
		unlink(tmp);
		goto fail;
	}
	return rx;
fail:
	shm_guard_del(rx->slot);
	if (m != MAP_FAILED)
		munmap(m, SHM_REGION_BYTES);
	if (rx->fd >= 0)
		close(rx->fd);
	free(rx->bufs);
	free(rx);
	return NULL;
}

void shm_rx_test_position(struct shm_rx *rx, uint32_t pos)
{
	for (unsigned i = 0; i < SHM_RINGS; i++) {
		rx->tail[i] = pos;
		atomic_store(&rx->r->ring[i].tail, pos);
	}
}

void shm_rx_test_view(struct shm_rx *rx, unsigned idx, struct shm_test_view *v)
{
	v->ring = (uint8_t *)rx->r + SHM_HDR_BYTES + (size_t)idx * SHM_RING_BYTES;
	v->ring_bytes = SHM_RING_BYTES;
	v->nrings = SHM_RINGS;
	v->ring_mask = (uint32_t *)&rx->r->ring_mask;
	v->owner = (uint32_t *)&rx->r->ring[idx].owner;
	v->tail = (uint32_t *)&rx->r->ring[idx].tail;
}

void shm_rx_test_reset(struct shm_rx *rx)
{
	rx->broken = 0;
	rx->polls = 0;
}

void shm_rx_close(struct shm_rx *rx)
{
	struct stat a, b;

	if (!rx)
		return;
	if (!rx->dead)
		__atomic_store_n(&rx->r->magic, 0, __ATOMIC_RELEASE);
	/* the name may already be another live owner's (ours died and was
	 * replaced): remove only our own file */
	if (lstat(rx->path, &a) == 0 && fstat(rx->fd, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
		unlink(rx->path);
	shm_guard_del(rx->slot);
	munmap(rx->r, SHM_REGION_BYTES);
	close(rx->fd);
	free(rx->bufs);
	free(rx);
}

/* The region was truncated under us (a fault on it made its mapping
 * zeros, "Truncation" above): read it no more, take its name away, and
 * truncate it to nothing, so that every producer still writing into it
 * faults too and goes on by UDP (its records were lost with the pages;
 * RC's retransmission resends them). */
static bool rx_dead(struct shm_rx *rx)
{
	if (rx->dead || !shm_guard_dead(rx->slot))
		return rx->dead;
	rx->dead = true;
	struct stat a, b;
	if (lstat(rx->path, &a) == 0 && fstat(rx->fd, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
		unlink(rx->path);
	if (ftruncate(rx->fd, 0) < 0) {
		/* nothing else to do: producers find out on their next fault */
	}
	return true;
}

bool shm_rx_active(struct shm_rx *rx)
{
	if (!rx || rx->dead)
		return false;
	bool active = atomic_load_explicit(&rx->r->ring_mask, memory_order_relaxed) != 0;
	return !rx_dead(rx) && active;
}

bool shm_rx_truncated(const struct shm_rx *rx)
{
	return rx && rx->dead;
}

bool shm_tx_peer_sleeping(const struct shm_tx *tx)
{
	return atomic_load_explicit(&tx->peer->r->rx_sleeping, memory_order_relaxed) != 0;
}

void shm_rx_sleeping(struct shm_rx *rx, bool sleeping)
{
	if (!rx || rx->dead)
		return;
	atomic_store_explicit(&rx->r->rx_sleeping, sleeping, memory_order_relaxed);
	/* Dekker with shm_tx_send: either its publication is seen by the poll
	 * that follows, or it sees this flag and rings the doorbell */
	atomic_thread_fence(memory_order_seq_cst);
}

/* A producer holds an open-file-description lock on byte SHM_RING_LOCK + idx
 * of the region for as long as it owns ring idx: the kernel drops it when
 * the process dies, in whatever PID namespace it lived (a PID would say
 * nothing across namespaces that share /dev/shm).  flock and these locks
 * do not interact, so the owner's flock stays apart. */
#define SHM_RING_LOCK 1024
static bool ring_lock(int fd, unsigned idx, bool lock)
{
	struct flock fl = { .l_type = lock ? F_WRLCK : F_UNLCK, .l_whence = SEEK_SET,
			    .l_start = SHM_RING_LOCK + (off_t)idx, .l_len = 1 };
	return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

/* Does a live producer hold ring idx?  (Our own region fd holds no ring
 * locks, so any lock seen is another open file's.) */
static bool ring_held(int fd, unsigned idx)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = SHM_RING_LOCK + (off_t)idx, .l_len = 1 };
	return fcntl(fd, F_OFD_GETLK, &fl) < 0 || fl.l_type != F_UNLCK;
}

/* Rings whose producer died without giving them back (killed) would stay
 * claimed until another producer takes them over -- a broken one forever --
 * and while any ring is claimed the sockets are read only every 64th call.
 * Now and then the consumer gives such rings back itself: a producer that
 * claims one meanwhile holds its lock, or wins the owner's CAS. */
#define REAP_EVERY 4096
static void reap_dead_producers(struct shm_rx *rx, uint32_t mask)
{
	for (unsigned i = 0; i < SHM_RINGS; i++) {
		if (!(mask & (1u << i)))
			continue;
		uint32_t o = atomic_load(&rx->r->ring[i].owner);
		if (o && !ring_held(rx->fd, i))
			atomic_compare_exchange_strong(&rx->r->ring[i].owner, &o, 0);
	}
}

/* Ring i gave nothing this time: if its producer has given it back and
 * everything it sent has been taken (or it is broken), return it to the
 * free rings.  The producer stored owner 0 after its last record, so an
 * owner of 0 read here makes every record it sent visible.  A claim made
 * meanwhile shows as an owner again, and the ring stays in use. */
static void ring_release_if_done(struct shm_rx *rx, unsigned i, const uint8_t *ring)
{
	struct shm_ring_ctl *ctl = &rx->r->ring[i];
	const struct shm_rec_hdr *rec = (const void *)(ring + (size_t)(rx->tail[i] % SHM_UNITS) * SHM_UNIT);

	if (atomic_load(&ctl->owner) != 0)
		return;
	if (!(rx->broken & (1u << i)) && atomic_load_explicit(&rec->seq, memory_order_acquire) == rx->tail[i] + 1)
		return;  /* its last records: the next poll takes them */
	atomic_fetch_and(&rx->r->ring_mask, ~(1u << i));
	rx->broken &= ~(1u << i);
	if (atomic_load(&ctl->owner) != 0)
		atomic_fetch_or(&rx->r->ring_mask, 1u << i);
}

static int rx_poll(struct shm_rx *rx, struct uroce_rxpkt *pkts, int max, bool *more, uint64_t *bad)
{
	uint32_t mask = atomic_load_explicit(&rx->r->ring_mask, memory_order_acquire);
	int got = 0;

	if (!mask)
		return 0;
	unsigned poll = rx->polls++;
	if (poll % REAP_EVERY == REAP_EVERY - 1)
		reap_dead_producers(rx, mask);
	if (mask & ~rx->populated) {
		for (unsigned i = 0; i < SHM_RINGS; i++)
			if (mask & ~rx->populated & (1u << i))
				populate((uint8_t *)rx->r + SHM_HDR_BYTES + (size_t)i * SHM_RING_BYTES, SHM_RING_BYTES, false);
		rx->populated |= mask;
	}
	if (max > SHM_RX_BATCH)
		max = SHM_RX_BATCH;
	/* start at a different ring each call: one busy ring does not starve the rest */
	unsigned start = poll % SHM_RINGS;
	for (unsigned k = 0; k < SHM_RINGS; k++) {
		unsigned i = (start + k) % SHM_RINGS;
		if (!(mask & (1u << i)))
			continue;
		if (got == max) {
			*more = true;
			break;
		}
		const uint8_t *ring = (const uint8_t *)rx->r + SHM_HDR_BYTES + (size_t)i * SHM_RING_BYTES;
		uint32_t tail = rx->tail[i], taken = tail;
		if (rx->broken & (1u << i)) {
			ring_release_if_done(rx, i, ring);
			continue;
		}
		while (got < max) {
			uint32_t at = tail % SHM_UNITS;
			const struct shm_rec_hdr *rec = (const void *)(ring + (size_t)at * SHM_UNIT);
			if (atomic_load_explicit(&rec->seq, memory_order_acquire) != tail + 1)
				break;  /* not written yet (or by an earlier lap) */
			struct shm_rec_hdr h;
			memcpy(&h, rec, sizeof(h));
			uint32_t units = h.units;
			if (!units || units > SHM_UNITS - at) {
				/* no honest producer writes this: the ring is not
				 * read again until it is given back */
				(*bad)++;
				rx->broken |= 1u << i;
				break;
			}
			if (!h.len) {
				/* a skip record fills the ring's end, nothing else: a
				 * producer chaining skips would hold us here */
				if (at + units != SHM_UNITS) {
					(*bad)++;
					rx->broken |= 1u << i;
					break;
				}
				tail += units;
				continue;
			}
			tail += units;
			uint32_t len = h.len;
			if (len > SHM_PKT_MAX || sizeof(h) + len > (size_t)units * SHM_UNIT) {
				(*bad)++;
				len = 0;  /* dropped as truncated */
			}
			struct uroce_rxpkt *pk = &pkts[got++];
			pk->buf = rx->bufs + (size_t)(got - 1) * SHM_PKT_MAX;
			memcpy(pk->buf, rec + 1, len);
			pk->len = len;
			memcpy(pk->sgid, h.sgid, 16);
			memcpy(pk->dgid, rx->gid, 16);
			pk->sport = h.sport;
			pk->tos = h.tos;
			pk->ttl = 64;
			pk->ip_id_hint = h.ip_id;
		}
		if (tail != taken) {
			rx->tail[i] = tail;
			atomic_store_explicit(&rx->r->ring[i].tail, tail, memory_order_release);
		} else {
			ring_release_if_done(rx, i, ring);
		}
		if (got == max)
			*more = true;
	}
	return got;
}

int shm_rx_poll(struct shm_rx *rx, struct uroce_rxpkt *pkts, int max, bool *more, uint64_t *bad)
{
	if (rx->dead)
		return 0;
	int got = rx_poll(rx, pkts, max, more, bad);
	/* a fault during the poll: what was copied out may be half zeros */
	if (rx_dead(rx)) {
		*more = false;
		return 0;
	}
	return got;
}

/* A ring of the region open at fd, its pages allocated (a full /dev/shm
 * refuses here rather than faulting later) and mapped. */
static uint8_t *ring_map(int fd, unsigned idx, int *slot)
{
	off_t off = (off_t)(SHM_HDR_BYTES + (size_t)idx * SHM_RING_BYTES);

	if (fallocate(fd, 0, off, (off_t)SHM_RING_BYTES) < 0)
		return NULL;
	void *ring = mmap(NULL, SHM_RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
	if (ring == MAP_FAILED)
		return NULL;
	if ((*slot = shm_guard_add(ring, SHM_RING_BYTES)) < 0) {
		munmap(ring, SHM_RING_BYTES);
		return NULL;
	}
	populate(ring, SHM_RING_BYTES, true);
	return ring;
}

static void ring_unmap(uint8_t *ring, int slot)
{
	shm_guard_del(slot);
	munmap(ring, SHM_RING_BYTES);
}

/* Is the region's owner alive?  It holds the lock exclusively. */
static bool owner_alive(int fd)
{
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		flock(fd, LOCK_UN);
		return false;
	}
	return errno == EWOULDBLOCK;
}

/* The region of dgid, opened and checked, its header mapped: a new peer
 * entry, or NULL. */
static struct shm_peer *peer_open(const uint8_t dgid[16])
{
	char path[96];
	struct stat st;

	if (region_path(dgid, path, sizeof(path)) < 0)
		return NULL;
	/* never through a symlink, never blocking on a FIFO someone put at
	 * the name; only a regular file of our own user that no other user
	 * may write, of a region's size, whose owner lives */
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 022) ||
	    st.st_size != (off_t)SHM_REGION_BYTES || st.st_uid != geteuid() || !owner_alive(fd)) {
		close(fd);
		return NULL;
	}
	int slot_hdr = -1;
	struct shm_region *r = mmap(NULL, SHM_HDR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (r != MAP_FAILED && (slot_hdr = shm_guard_add(r, SHM_HDR_BYTES)) < 0)
		munmap(r, SHM_HDR_BYTES);
	if (r == MAP_FAILED || slot_hdr < 0) {
		close(fd);
		return NULL;
	}
	struct shm_peer *pe = calloc(1, sizeof(*pe));
	if (!pe || __atomic_load_n(&r->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC || r->version != SHM_VERSION ||
	    r->nrings != SHM_RINGS || r->nunits != SHM_UNITS || r->unit != SHM_UNIT ||
	    memcmp(r->gid, dgid, 16) || shm_guard_dead(slot_hdr)) {
		free(pe);
		shm_guard_del(slot_hdr);
		munmap(r, SHM_HDR_BYTES);
		close(fd);
		return NULL;
	}
	memcpy(pe->gid, dgid, 16);
	pe->r = r;
	pe->fd = fd;
	pe->ino = st.st_ino;
	pe->slot_hdr = slot_hdr;
	return pe;
}

/* Is the entry still the live region its name gives?  Its owner may have
 * died (its lock is free) or its address may have gone to a successor's
 * region; then its rings serve the flows that have them, and new flows
 * open the name afresh. */
static bool peer_current(const struct shm_peer *pe)
{
	char path[96];
	struct stat st;

	return !shm_guard_dead(pe->slot_hdr) && region_path(pe->gid, path, sizeof(path)) == 0 && stat(path, &st) == 0 && st.st_ino == pe->ino &&
	       owner_alive(pe->fd);
}

static void peer_unlink(struct shm_peer *pe)
{
	for (struct shm_peer **pp = &peers; *pp; pp = &(*pp)->next)
		if (*pp == pe) {
			*pp = pe->next;
			break;
		}
	pe->next = NULL;
}

static void peer_free(struct shm_peer *pe)
{
	shm_guard_del(pe->slot_hdr);
	munmap(pe->r, SHM_HDR_BYTES);
	close(pe->fd);
	free(pe);
}

/* Claim a ring of pe's region not held by this process: a free one (given
 * back and drained by the consumer), or one whose producer died once the
 * consumer has taken all it left (so that the consumer stands where we
 * begin).  Its lock first: a live producer of another process holds it
 * (our own rings, whose locks are on this very fd and so would not
 * conflict, are skipped by `held`). */
static struct shm_tx *ring_claim(struct shm_peer *pe)
{
	struct shm_region *r = pe->r;
	uint32_t me = (uint32_t)getpid();
	unsigned idx;
	uint8_t *ring = NULL;
	int slot_ring = -1;

	for (idx = 0; idx < SHM_RINGS; idx++) {
		if (pe->held[idx] || !ring_lock(pe->fd, idx, true))
			continue;
		uint32_t o = atomic_load(&r->ring[idx].owner);
		if (!o && (atomic_load(&r->ring_mask) & (1u << idx))) {
			ring_lock(pe->fd, idx, false);
			continue;  /* given back, its last records not yet taken */
		}
		ring = ring_map(pe->fd, idx, &slot_ring);
		if (!ring) {
			ring_lock(pe->fd, idx, false);
			return NULL;  /* /dev/shm is full: UDP */
		}
		uint32_t t = atomic_load(&r->ring[idx].tail);
		const struct shm_rec_hdr *rec = (const void *)(ring + (size_t)(t % SHM_UNITS) * SHM_UNIT);
		if ((!o || atomic_load(&rec->seq) != t + 1) &&
		    atomic_compare_exchange_strong(&r->ring[idx].owner, &o, me))
			break;
		ring_unmap(ring, slot_ring);
		ring = NULL;
		ring_lock(pe->fd, idx, false);
	}
	if (!ring)
		return NULL;
	struct shm_tx *tx = shm_guard_dead(slot_ring) ? NULL : calloc(1, sizeof(*tx));
	if (!tx) {
		ring_unmap(ring, slot_ring);
		atomic_store(&r->ring[idx].owner, 0);
		ring_lock(pe->fd, idx, false);
		return NULL;
	}
	pthread_mutex_init(&tx->lock, NULL);
	tx->peer = pe;
	tx->slot_ring = slot_ring;
	tx->ring = ring;
	tx->idx = idx;
	tx->ctl = &r->ring[idx];
	/* records start where the consumer stands; the bytes there are an
	 * earlier lap's and must not be taken for a record of ours while we
	 * write over them */
	tx->head = tx->tail_seen = atomic_load(&tx->ctl->tail);
	struct shm_rec_hdr *first = (void *)(tx->ring + (size_t)(tx->head % SHM_UNITS) * SHM_UNIT);
	atomic_store(&first->seq, tx->head);  /* anything but head + 1 */
	atomic_fetch_or(&r->ring_mask, 1u << idx);
	pe->held[idx] = tx;
	pe->nheld++;
	return tx;
}

static bool tx_dead(const struct shm_tx *tx);

struct shm_tx *shm_tx_attach(const uint8_t dgid[16])
{
	struct shm_peer *pe;
	struct shm_tx *tx = NULL;

	pthread_mutex_lock(&peers_lock);
	if (peers_pid != getpid()) {
		peers = NULL;  /* the parent's (a child's copy is left alone) */
		peers_pid = getpid();
	}
	for (pe = peers; pe && memcmp(pe->gid, dgid, 16); pe = pe->next)
		;
	if (pe && !peer_current(pe)) {
		peer_unlink(pe);  /* freed with its last ring */
		pe = NULL;
	}
	bool fresh = !pe;
	if (fresh && !(pe = peer_open(dgid)))
		goto out;
	if (pe->nheld < rings_own)
		tx = ring_claim(pe);
	if (!tx) {
		/* none to claim: share the least used of ours */
		for (unsigned i = 0; i < SHM_RINGS; i++)
			if (pe->held[i] && !tx_dead(pe->held[i]) && (!tx || pe->held[i]->users < tx->users))
				tx = pe->held[i];
	}
	if (tx)
		tx->users++;
	if (fresh) {
		if (tx) {
			pe->next = peers;
			peers = pe;
		} else {
			peer_free(pe);
		}
	}
out:
	pthread_mutex_unlock(&peers_lock);
	return tx;
}

static bool tx_dead(const struct shm_tx *tx)
{
	return shm_guard_dead(tx->peer->slot_hdr) || shm_guard_dead(tx->slot_ring);
}

void shm_tx_detach(struct shm_tx *tx)
{
	if (!tx)
		return;
	pthread_mutex_lock(&peers_lock);
	if (peers_pid != getpid()) {
		pthread_mutex_unlock(&peers_lock);
		return;  /* the parent's ring, still the parent's */
	}
	if (--tx->users == 0) {
		struct shm_peer *pe = tx->peer;
		/* the consumer takes what is left and then frees the ring
		 * (ring_release_if_done): the last ACK of a QP destroyed right
		 * after it is still delivered */
		if (!tx_dead(tx))
			atomic_store(&tx->ctl->owner, 0);
		ring_lock(pe->fd, tx->idx, false);
		ring_unmap(tx->ring, tx->slot_ring);
		pe->held[tx->idx] = NULL;
		pthread_mutex_destroy(&tx->lock);
		free(tx);
		if (--pe->nheld == 0) {
			peer_unlink(pe);
			peer_free(pe);
		}
	}
	pthread_mutex_unlock(&peers_lock);
}

/* Write the record at position pos (units long) and publish it.  The seq of
 * the unit after it is cleared first, so that the consumer, arriving there,
 * never takes a stale lap's bytes for a record (the room check keeps that
 * unit free).  Cleared means its own position, which is never what the
 * consumer waits for there (position + 1) -- 0 would be, at position
 * 2^32 - 1. */
static void rec_publish(uint8_t *ring, uint32_t pos, struct shm_rec_hdr *h, bool publish)
{
	struct shm_rec_hdr *rec = (void *)(ring + (size_t)(pos % SHM_UNITS) * SHM_UNIT);
	struct shm_rec_hdr *next = (void *)(ring + (size_t)((pos + h->units) % SHM_UNITS) * SHM_UNIT);

	atomic_store_explicit(&next->seq, pos + h->units, memory_order_relaxed);
	memcpy((uint8_t *)rec + sizeof(rec->seq), (uint8_t *)h + sizeof(h->seq), sizeof(*h) - sizeof(h->seq));
	if (publish)
		atomic_store_explicit(&rec->seq, pos + 1, memory_order_release);
}

/* Room for `need` more units between the producer's head and the
 * consumer's tail?  A tail ahead of the head (a consumer that lies) has
 * none. */
static bool ring_room(uint32_t head, uint32_t tail, uint32_t need)
{
	uint32_t used = head - tail;
	return used <= SHM_UNITS && need <= SHM_UNITS - used;
}

/* A call's records appear to the consumer all at once, as a GSO datagram
 * or a sendmmsg batch does: the first one's seq is stored last.  The
 * transport relies on it -- an ACK riding behind a request must not come
 * in a receive batch after it (transport_rx_batch runs responses first: a
 * send completion before the receive of the answer, which ib_send_lat -e
 * needs: it hung in a CI run while the rings published record by record). */

int shm_tx_send(struct shm_tx *tx, const uint8_t sgid[16], uint16_t sport, uint8_t tos,
		const struct uroce_txmsg *msgs, int n, bool *doorbell)
{
	int i;

	*doorbell = false;
	pthread_mutex_lock(&tx->lock);  /* one producer per call (struct shm_tx) */
	if (tx_dead(tx)) {
		pthread_mutex_unlock(&tx->lock);
		return -EPIPE;
	}
	uint32_t head = tx->head;
	/* the first record is published last (rec_publish) */
	for (i = 0; i < n; i++) {
		uint32_t len = msgs[i].len > SHM_PKT_MAX ? SHM_PKT_MAX : msgs[i].len; /* MTU <= 4096: never cut */
		uint32_t units = (uint32_t)((sizeof(struct shm_rec_hdr) + len + SHM_UNIT - 1) / SHM_UNIT);
		uint32_t at = head % SHM_UNITS;
		uint32_t skip = at + units > SHM_UNITS ? SHM_UNITS - at : 0;
		uint32_t need = skip + units + 1;
		if (!len)
			break;  /* no packet is empty; a record of length 0 is a skip */
		if (!ring_room(head, tx->tail_seen, need)) {
			tx->tail_seen = atomic_load_explicit(&tx->ctl->tail, memory_order_acquire);
			if (!ring_room(head, tx->tail_seen, need))
				break;  /* full (or a consumer that lies: the same) */
		}
		if (skip) {
			struct shm_rec_hdr h = { .units = (uint16_t)skip };
			rec_publish(tx->ring, head, &h, head != tx->head);
			head += skip;
		}
		uint8_t *d = tx->ring + (size_t)(head % SHM_UNITS) * SHM_UNIT + sizeof(struct shm_rec_hdr);
		size_t off = 0;
		for (int k = 0; k < msgs[i].iovcnt && off < len; k++) {
			size_t l = msgs[i].iov[k].iov_len;
			if (l > len - off)
				l = len - off;
			memcpy(d + off, msgs[i].iov[k].iov_base, l);
			off += l;
		}
		struct shm_rec_hdr h = { .len = (uint32_t)off, .units = (uint16_t)units, .sport = sport,
					 .ip_id = msgs[i].gso_idx, .tos = tos };
		memcpy(h.sgid, sgid, 16);
		rec_publish(tx->ring, head, &h, head != tx->head);
		head += units;
	}
	if (head != tx->head) {
		struct shm_rec_hdr *first = (void *)(tx->ring + (size_t)(tx->head % SHM_UNITS) * SHM_UNIT);
		atomic_store_explicit(&first->seq, tx->head + 1, memory_order_release);
		tx->head = head;
		atomic_thread_fence(memory_order_seq_cst);  /* see shm_rx_sleeping */
		*doorbell = atomic_load_explicit(&tx->peer->r->rx_sleeping, memory_order_relaxed) != 0;
	}
	/* a fault during the copy: these records went nowhere */
	int rc = tx_dead(tx) ? -EPIPE : i;
	pthread_mutex_unlock(&tx->lock);
	return rc;
}
