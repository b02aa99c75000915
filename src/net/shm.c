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
 * The region is a sealed memfd (issue #13, item 1): unnamed, so there is no
 * path anyone could plant, squat or redirect, and sealed F_SEAL_SHRINK |
 * F_SEAL_GROW | F_SEAL_SEAL before anyone else sees it, so no holder can
 * change its size: ftruncate fails EPERM (memfd_create(2), fcntl(2) "File
 * Sealing").  Its mappings therefore cannot fault from a truncation, and
 * need no SIGBUS guard (a hole a peer punches with fallocate is refilled
 * with zeros at the next touch, which the consumer takes as no record).
 * Producers get it by file descriptor: the owner listens on a unix
 * socket in a directory only our user can enter ("Rendezvous" below) and
 * hands the fd to each connecting process of its own user (SCM_RIGHTS).
 *
 * Lifetime: the owner holds an exclusive flock on the region for its life,
 * on a description nobody else ever gets: it hands each producer a fresh
 * open of the region (shm_rx_serve), so only the owner's own description
 * holds the lock and a held lock means a live owner (a producer that kept
 * the owner's description would otherwise keep a dead owner "alive":
 * issue #13, second review).  A producer holds an OFD lock on a byte of
 * its ring the same way (ring_lock).  Both locks belong to an open file
 * description, so every producer process opens the region afresh through
 * /proc/self/fd (region_reopen) instead of keeping the description that
 * SCM_RIGHTS passed.  A region vanishes with the last
 * process that holds it: nothing is left behind to sweep.  A ring's pages
 * are allocated (fallocate) when a flow claims it, so memory that runs
 * out refuses the claim and the flow uses UDP. */
#include "shm.h"
#include "net.h"

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83  /* Linux 6.16 (asm-generic/socket.h) */
#endif
#include "../util/fds.h"
#include "../util/log.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC 0x78722d65636f7275ull /* "uroce-rx" */
#define SHM_VERSION 4                   /* 2: a sealed memfd, handed over by fd; 3: named by key (GID and slot);
					 * 4: records carry NET_PKT_* flags, the owner a probe (shm_tx_ref_peer) */
#define SHM_RINGS 32
#define SHM_UNIT 64
#define SHM_UNITS 32768          /* 2 MiB: a QP's window (512 KiB of packets, cc.h; 0.5-0.65 MiB of units at any path MTU) and READ responses */
#define SHM_PKT_MAX 4288         /* the largest packet at MTU 4096 with its headers */
#define SHM_RX_BATCH 64          /* packets copied out per region and poll */

struct shm_rec_hdr {
	_Atomic uint32_t seq;    /* position + 1, stored last */
	uint32_t len;            /* UDP payload bytes: BTH .. ICRC; 0 with units: a skip record */
	uint16_t units;          /* the record's size */
	uint16_t sport;          /* the UDP source port the packet would have had */
	uint16_t ip_id;          /* the IPv4 ID its ICRC was computed with */
	uint8_t tos;
	uint8_t flags;           /* NET_PKT_* */
	uint8_t sgid[16];
};
_Static_assert(sizeof(struct shm_rec_hdr) == 32, "half a unit");

struct shm_ring_ctl {
	alignas(64) _Atomic uint32_t tail;   /* consumer: units taken */
	alignas(64) _Atomic uint32_t owner;  /* producing process, 0: free */
};

/* A region is named and found by its key: the receive address (GID) and
 * the QPN slot of the process that owns it (net/share.h), big-endian, so
 * that processes sharing an address each have a region of their own, and
 * a flow finds its peer QP's process from the QPN alone. */
#define SHM_KEY 20

static void region_key(uint8_t key[SHM_KEY], const uint8_t gid[16], unsigned slot)
{
	memcpy(key, gid, 16);
	key[16] = (uint8_t)(slot >> 24), key[17] = (uint8_t)(slot >> 16);
	key[18] = (uint8_t)(slot >> 8), key[19] = (uint8_t)slot;
}

struct shm_region {
	uint64_t magic;
	uint32_t version, reserved0;
	uint32_t nrings, nunits, unit, reserved;
	uint8_t key[SHM_KEY];            /* its address and owner (region_key) */
	/* The owner's pid and a word of its private memory, there at
	 * probe_addr, for a producer to read with process_vm_readv: a match
	 * says the pid is the owner's in the producer's pid namespace too, and
	 * that the producer may read the owner's memory (shm_tx_ref_peer). */
	int32_t owner_pid;
	uint32_t reserved1;
	uint64_t probe_addr, probe_value;
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
	int fd;                          /* the memfd; holds the owner's flock */
	int lfd;                         /* the listening socket producers connect to */
	int bell;                        /* the bell: a unix datagram socket, bound at bell_sa, in
					  * the engine's epoll; -1: none, doorbells come by UDP */
	struct sockaddr_un bell_sa;      /* its address, where each producer's socket is connected */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* its file, unlinked at close */
	pid_t pid;                       /* the process that opened it (a forked child does
					  * not consume: shm_rx_poll) */
	struct shm_rx *next;             /* own_rx (own_lock) */
	uint8_t key[SHM_KEY];
	uint32_t tail[SHM_RINGS];        /* the consumer's own copy: never read back */
	uint32_t populated;              /* rings whose pages this mapping has */
	uint32_t broken;                 /* rings whose producer wrote nonsense: not read */
	unsigned polls;                  /* picks the first ring to read */
	uint64_t reaped_ns;              /* when a poll last looked for dead producers (REAP_NS) */
	uint8_t *bufs;                   /* SHM_RX_BATCH packets copied out */
	uint64_t probe;                  /* what the header's probe_addr points to */
};

/* A peer's region as this process's senders see it: one fd and one header
 * mapping per peer address, however many flows send there (an fd per flow
 * would bound the QPs by RLIMIT_NOFILE, issue #13), and the rings this
 * process holds in it.  Kept while it holds a ring (peers_lock).  `pid`
 * is the process that opened it: a forked child inherits the entry, the
 * fd (whose open file description, and so its ring locks, stays the
 * parent's) and the mappings, and must neither produce into the parent's
 * rings nor give them back (shm_tx_send, shm_tx_detach). */
struct shm_peer {
	struct shm_peer *next;
	uint8_t key[SHM_KEY];
	struct shm_region *r;            /* header only */
	int fd;                          /* our own open of the region: holds our ring locks */
	int bell;                        /* a socket of ours connected to the owner's bell: a datagram
					  * on it wakes the owner's engine; -1: none */
	pid_t pid;
	uint32_t tag;                    /* the owner word of our rings: random, never 0 */
	uint64_t until;                  /* unheld (asked for by shm_tx_prepare): dropped after */
	pid_t ref_pid;                   /* the owner's pid when its probe answered (probe_owner), else 0 */
	struct shm_tx *held[SHM_RINGS];  /* this process's rings, NULL: not held */
	unsigned nheld;
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
/* This process's own regions, so that its flows to its own addresses take
 * the region without a round through the socket (own_lock, taken alone). */
static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_rx *own_rx;

/* Rendezvous asks, cached per address (shm_tx_prepare): one in flight per
 * address at a time (the others wait for its answer), and a failed one
 * is not repeated for SHM_ASK_FAIL_NS, so that an owner that does not
 * answer (a stopped process) costs one wait, not one per QP (issue #13).
 * Successes are the entries of `peers`.  peers_lock. */
#define SHM_ASKS 64
#define SHM_ASK_FAIL_NS 1000000000ull
struct shm_ask {
	uint8_t key[SHM_KEY];
	bool used, pending;
	uint64_t until;                  /* failed: not asked again before */
};
static struct shm_ask asks[SHM_ASKS];
/* On CLOCK_MONOTONIC (asks_cond_init, from shm_self before any wait): a
 * waiter waits at most SHM_ASK_WAIT_NS, then goes by UDP. */
static pthread_cond_t asks_cond = PTHREAD_COND_INITIALIZER;
static _Atomic unsigned long asks_made;  /* shm_tx_test_asks */
static _Atomic unsigned long foreign_by_thread;  /* shm_test_foreign_closes */
static atomic_bool refuse_rights = true;  /* SO_PASSRIGHTS 0 on new listeners (shm_test_passrights) */

/* Region fds (consumers' memfds and listening sockets, producers' opens)
 * for a forked child to close: its copies would keep the parent's flock
 * and ring locks (they belong to the open file description) held after
 * the parent died, and with them rings and regions nobody uses (issue
 * #13).  A fixed table, lock-free, as the child handler takes no lock.
 * Slots hold fd + 1; a full table leaves the fd to the child (then it
 * holds what it held before this fix). */
#define SHM_FDTAB 2048  /* a peer entry holds two: its region and its bell */
static _Atomic int fdtab[SHM_FDTAB];

static void fd_track(int fd)
{
	for (unsigned i = 0; fd >= 0 && i < SHM_FDTAB; i++) {
		int z = 0;
		if (atomic_compare_exchange_strong(&fdtab[i], &z, fd + 1))
			return;
	}
}

/* Before fd is closed. */
static void fd_untrack(int fd)
{
	for (unsigned i = 0; fd >= 0 && i < SHM_FDTAB; i++) {
		int v = fd + 1;
		if (atomic_compare_exchange_strong(&fdtab[i], &v, 0))
			return;
	}
}

/* An fd opened but not yet in the table, or out of it but not yet closed,
 * would be inherited by a child forked in between (issue #13, second
 * review): every open-and-track and untrack-and-close holds fork_lock,
 * and fork waits for it (pthread_atfork: shm_fork_prepare).  None of
 * those sequences blocks (an open of /proc/self/fd, a memfd_create, a
 * bind, a non-blocking recvmsg, a close), and nothing else is taken
 * inside it. */
static pthread_mutex_t fork_lock = PTHREAD_MUTEX_INITIALIZER;

static void shm_fork_prepare(void)
{
	pthread_mutex_lock(&fork_lock);
}

static void shm_fork_parent(void)
{
	pthread_mutex_unlock(&fork_lock);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Closing an fd a peer handed us may block: a TCP socket lingering on
 * unsent data waits out its linger, a FUSE or NFS file flushes to a server
 * that may never answer, a unix socket releases the fds queued on it, any
 * of which may be such a one (third review).  Shared memory (a memfd's or
 * /dev/shm's file: F_GET_SEALS answers for it alone, without asking the
 * file system -- an fstat of a FUSE file may block too) is closed at once;
 * every other fd by a thread of its own, sockets made to close at once
 * where they can (SO_LINGER 0; ENOTSOCK for the rest), so that no lock we
 * hold (fork_lock, peers_lock, a QP's) and no engine waits for it.  Only a
 * hostile or broken peer sends such fds.  At most CLOSERS_MAX such threads
 * live at a time: past that -- 32 fds a peer handed us whose close still
 * blocks -- or if no thread can be made, the fd is closed here after all,
 * and may block us as long as it blocks.  The threads are ordinary ones
 * (not the engine's real-time class) with every signal blocked. */
#define CLOSERS_MAX 32
static _Atomic int closers;

static void *closer_main(void *arg)
{
	/* uroce's, not the application's, to whoever counts threads' CPU
	 * (bench/costs_peer.c) */
	pthread_setname_np(pthread_self(), "uroce-closer");
	close((int)(intptr_t)arg);
	atomic_fetch_sub(&closers, 1);
	return NULL;
}

static void close_foreign(int fd)
{
	if (fd < 0)
		return;
	if (fcntl(fd, F_GET_SEALS) >= 0) {
		close(fd);
		return;
	}
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	if (atomic_fetch_add(&closers, 1) < CLOSERS_MAX) {
		pthread_t t;
		pthread_attr_t a;
		struct sched_param sp = { .sched_priority = 0 };
		sigset_t all, old;
		sigfillset(&all);
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED);
		pthread_attr_setschedpolicy(&a, SCHED_OTHER);
		pthread_attr_setschedparam(&a, &sp);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		int rc = pthread_create(&t, &a, closer_main, (void *)(intptr_t)fd);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&a);
		if (rc == 0) {
			atomic_fetch_add(&foreign_by_thread, 1);
			return;
		}
	}
	atomic_fetch_sub(&closers, 1);
	close(fd);
}

static void fd_close_tracked(int fd)
{
	if (fd >= 0) {
		pthread_mutex_lock(&fork_lock);
		fd_untrack(fd);
		close(fd);
		pthread_mutex_unlock(&fork_lock);
	}
}

/* fork (without exec).  The child has copies of every entry, but it is
 * another process: its ring locks would be the parent's (one open file
 * description), and a second producer in a ring corrupts it.  So the
 * child handler closes every region fd (fdtab), and the region mappings
 * are not inherited at all (MADV_DONTFORK, map_region): the child holds
 * nothing of the parent's regions, and a parent that dies releases its
 * rings and its own region as if it had no child.  Everything records the
 * pid it belongs to and compares it with shm_pid, which the child handler
 * sets, before it touches an fd or mapping (a load on the fast path, not
 * a getpid() system call: glibc no longer caches the pid).  The handler
 * also starts the child's lists empty (it opens regions afresh when its
 * own flows attach) and re-initialises the locks, which another thread of
 * the parent may have held at the fork. */
static _Atomic pid_t shm_pid;
static pthread_once_t shm_fork_once = PTHREAD_ONCE_INIT;

static void asks_cond_init(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&asks_cond, &ca);
	pthread_condattr_destroy(&ca);
}

static void shm_atfork_child(void)
{
	atomic_store(&shm_pid, getpid());
	pthread_mutex_init(&fork_lock, NULL);  /* held by the forking thread (shm_fork_prepare) */
	/* the parent's closer threads are not here (the fds they close are
	 * copies, CLOEXEC: an exec releases them) */
	atomic_store(&closers, 0);
	for (unsigned i = 0; i < SHM_FDTAB; i++) {
		int v = atomic_exchange(&fdtab[i], 0);
		if (v > 0)
			close(v - 1);
	}
	pthread_mutex_init(&peers_lock, NULL);
	pthread_mutex_init(&own_lock, NULL);
	asks_cond_init();
	memset(asks, 0, sizeof(asks));  /* a parent thread's ask never ends here */
	peers = NULL;  /* the parent's entries stay as they are, ours to drop only */
	own_rx = NULL;
}

static void shm_fork_install(void)
{
	atomic_store(&shm_pid, getpid());
	asks_cond_init();  /* nobody waits on it yet: every waiter came through shm_self */
	pthread_atfork(shm_fork_prepare, shm_fork_parent, shm_atfork_child);
}

static pid_t shm_self(void)
{
	pthread_once(&shm_fork_once, shm_fork_install);
	return atomic_load_explicit(&shm_pid, memory_order_relaxed);
}

/* The counters page (util/stats.c, registered by exec/device.c) is a
 * /dev/shm file of our user, which a process of that user may ftruncate:
 * an access to a page past the new end raises SIGBUS.  The rings cannot
 * fault that way any more (sealed, above), so the page is all this guard
 * is for.  A SIGBUS whose address lies in a guarded mapping turns it into
 * private zero pages: the handler maps anonymous memory over the whole
 * of it and returns, the faulting access completes there, and counting
 * goes on into memory nobody sees.  A SIGBUS at any other address goes to
 * the handler that was installed before ours (or the default action), so
 * an application's own faults are its own as before.  A thread that
 * blocks SIGBUS is killed by such a fault whatever the handler (README
 * "Security model": only a process of the owner's user, which could
 * ptrace it anyway, can do that).
 *
 * A slot's seq is odd while the slot changes (shm_guard_mapping, shm_unguard_mapping), so
 * the handler, which may run between any two stores of theirs, never
 * uses a range read half before and half after a change; lo 1 is a slot
 * being claimed. */
#define SHM_MAPS_MAX 64  /* a counters page per device, and tests' */
struct shm_map {
	_Atomic unsigned seq;          /* odd: lo and hi are changing */
	_Atomic uintptr_t lo, hi;      /* [lo, hi), lo 0: a free slot, 1: being claimed */
};
static struct shm_map shm_maps[SHM_MAPS_MAX];
static _Atomic unsigned shm_maps_used;   /* slots below this may be in use */
static struct sigaction shm_old_bus;
static pthread_once_t shm_guard_once = PTHREAD_ONCE_INIT;

/* The guarded range of slot i, or false when it is free, being changed,
 * or changed while read. */
static bool guard_range(unsigned i, uintptr_t *lo, uintptr_t *hi)
{
	unsigned s = atomic_load(&shm_maps[i].seq);
	if (s & 1)
		return false;
	*lo = atomic_load(&shm_maps[i].lo);
	*hi = atomic_load(&shm_maps[i].hi);
	return atomic_load(&shm_maps[i].seq) == s && *lo > 1 && *hi > *lo;
}

static void shm_on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	unsigned n = atomic_load(&shm_maps_used);

	for (unsigned i = 0; si->si_code > 0 && i < n; i++) {
		uintptr_t lo, hi;
		if (!guard_range(i, &lo, &hi) || a < lo || a >= hi)
			continue;
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

int shm_guard_mapping(void *p, size_t len)
{
	pthread_once(&shm_guard_once, shm_guard_install);
	for (unsigned i = 0; i < SHM_MAPS_MAX; i++) {
		uintptr_t free_lo = 0;
		if (atomic_load(&shm_maps[i].lo) ||
		    !atomic_compare_exchange_strong(&shm_maps[i].lo, &free_lo, (uintptr_t)1))
			continue;
		atomic_fetch_add(&shm_maps[i].seq, 1);  /* odd: changing */
		atomic_store(&shm_maps[i].hi, (uintptr_t)p + len);
		atomic_store(&shm_maps[i].lo, (uintptr_t)p);
		atomic_fetch_add(&shm_maps[i].seq, 1);
		unsigned used = atomic_load(&shm_maps_used);
		while (used < i + 1 && !atomic_compare_exchange_weak(&shm_maps_used, &used, i + 1))
			;
		return (int)i;
	}
	return -1;
}

/* Before the mapping is unmapped: its range may be reused by anyone. */
void shm_unguard_mapping(int slot)
{
	if (slot < 0)
		return;
	atomic_fetch_add(&shm_maps[slot].seq, 1);
	atomic_store(&shm_maps[slot].hi, 0);
	atomic_fetch_add(&shm_maps[slot].seq, 1);
	atomic_store(&shm_maps[slot].lo, 0);  /* free for a claim only now */
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

/* Rendezvous.  The owner of a region listens on a unix socket file
 * "rx.<netns inode>.<key in hex>" (the GID and the owner's QPN slot:
 * region_key; filesystem sockets are not per network
 * namespace, unlike abstract names: the namespace's inode keeps a region
 * the scope of its namespace) in a directory of our user's that no other
 * user can enter (shm_dir): for root /run/uroce, else
 * $XDG_RUNTIME_DIR/uroce when that is a directory of ours of mode 0700,
 * else /dev/shm/uroce-<euid>.  Every one must be a directory (not a
 * symlink) owned by us, of mode 0700, or there are no rings (UDP): a
 * directory another user made first is theirs.  The directory is opened
 * once (O_PATH) and checked by that fd, and every bind and connect goes
 * through /proc/self/fd/<it>, so a directory deleted and made again by
 * someone else later is never used (issue #13, second review).  So a
 * process of another user cannot squat, flood or wake the socket (the
 * abstract names of before could all be: issue #13) -- root can, and any
 * process of our own user, which may bind rx.<ns>.<any key> and answer
 * for an address that is not its own (README "Security model": our own
 * user's processes are trusted) -- and a producer needs no scan: the
 * address names one file.  Binding the UDP address made the address ours, so its
 * new owner replaces a socket file an earlier owner left (killed), and a
 * dead owner's file refuses a connect at once (ECONNREFUSED).  Both ends
 * still check the other's uid (SO_PEERCRED: root may connect anywhere),
 * and a producer checks the fd it gets (region_reopen).  Under an unmapped
 * user namespace uid every other unmapped uid reads as the overflow uid
 * too, so no check of a uid would mean anything: no rings there. */
#define SHM_CONNECT_WAIT_MS 50  /* the owner's engine answers when it wakes */
/* Datagrams an engine's wake-up reads off its bell (shm_rx_bell_drain):
 * producers ring only a sleeping engine, so a few at most are queued; a
 * flood stays readable and is read at the next wake-up. */
#define BELL_DRAIN_MAX 64
#define BELL_DRAIN_BATCH 8u
/* the bound in force: tests whose owner is a forked child, slow to be
 * scheduled on a loaded machine, lengthen it (shm_test_connect_wait) */
static atomic_int connect_wait_ms = SHM_CONNECT_WAIT_MS;
/* A coalesced waiter waits at most three times an ask's bound (the answer,
 * then the bell behind it, and a margin) for the asker's
 * answer (peer_resolve), then goes by UDP: an asker is never cancelled
 * (cancellation is off across the public entries, shm_nocancel), so the
 * bound is only a backstop. */
#define SHM_ASK_WAIT_NS (3ull * (unsigned)atomic_load(&connect_wait_ms) * 1000000ull)
/* fds one message may carry (SCM_MAX_FD, include/net/scm.h): all are
 * received, so that we close every one ourselves (close_foreign); fds that
 * do not fit the control buffer (MSG_CTRUNC) the kernel releases in the
 * receiver's context, where a lingering one would block us */
#define SHM_FDS_MAX 253

static char shm_dir[sizeof(((struct sockaddr_un *)0)->sun_path)];  /* its name, for messages */
static int shm_dirfd = -1;  /* the directory itself (O_PATH): every bind and connect goes through it */
static dev_t shm_dir_dev;   /* and what it was: an application that closed it (a daemon closing */
static ino_t shm_dir_ino;   /* every fd) may have another file at that number now (region_addr) */
static bool shm_dir_ok;
static unsigned long shm_netns;
static pthread_once_t shm_dir_once = PTHREAD_ONCE_INIT;

/* An O_PATH fd of `name` under `parent` (AT_FDCWD: name is absolute), made
 * if need be, if it is a directory (not a symlink: O_NOFOLLOW) of ours of
 * mode 0700; -1 otherwise.  The fd, not the path, is what is checked and
 * then used: a directory deleted and made again by another user later
 * (systemd-logind's RemoveIPC, tmp cleaners) is never the one we bind in
 * (issue #13, second review: the path was checked once, and later binds
 * landed in whatever directory then had the name). */
static int dir_private_fd(int parent, const char *name, bool make)
{
	struct stat st;
	if (make && mkdirat(parent, name, 0700) == 0 && fchmodat(parent, name, 0700, 0) < 0)  /* the umask may have taken bits */
		return -1;
	int fd = openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
			(st.st_mode & 07777) != 0700)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void shm_dir_init(void)
{
	uid_t me = geteuid();
	unsigned long overflow = 65534;
	FILE *f = fopen("/proc/sys/kernel/overflowuid", "re");
	struct stat st;

	if (f) {
		if (fscanf(f, "%lu", &overflow) != 1)
			overflow = 65534;
		fclose(f);
	}
	if (stat("/proc/self/ns/net", &st) == 0)
		shm_netns = (unsigned long)st.st_ino;
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int xfd = me != 0 && xdg && *xdg == '/' ? dir_private_fd(AT_FDCWD, xdg, false) : -1;
	int n;
	if (me == 0) {
		n = snprintf(shm_dir, sizeof(shm_dir), "/run/uroce");
		shm_dirfd = dir_private_fd(AT_FDCWD, shm_dir, true);
	} else if (xfd >= 0) {
		n = snprintf(shm_dir, sizeof(shm_dir), "%s/uroce", xdg);
		shm_dirfd = dir_private_fd(xfd, "uroce", true);
	} else {
		n = snprintf(shm_dir, sizeof(shm_dir), "/dev/shm/uroce-%u", (unsigned)me);
		shm_dirfd = dir_private_fd(AT_FDCWD, shm_dir, true);
	}
	if (xfd >= 0)
		close(xfd);
	if (shm_dirfd >= 0 && fstat(shm_dirfd, &st) == 0) {
		shm_dir_dev = st.st_dev;
		shm_dir_ino = st.st_ino;
	}
	shm_dir_ok = (unsigned long)me != overflow && n > 0 && shm_dirfd >= 0;
	if (!shm_dir_ok)
		LOG_INFO("uroce: no same-host rings: %s is not a private directory of uid %u (or the uid is the overflow uid): UDP",
			 shm_dir, (unsigned)me);
}

bool shm_dir_refused(void)
{
	pthread_once(&shm_dir_once, shm_dir_init);
	return !shm_dir_ok;
}

/* The address registries' directory (net/share.c): /run/uroce for root,
 * /dev/shm/uroce-<uid> for anyone else, whatever XDG_RUNTIME_DIR says.
 * The kernel puts the receive sockets of one effective uid and network
 * namespace in one group, so every process of that uid must find the same
 * registry: one started by cron, `sudo -u` or `env -i` has another
 * XDG_RUNTIME_DIR, or none (review of issue #15: the second registry's
 * packets were dropped as unowned). */
static int reg_dirfd = -1;
static char reg_dir_path[64];
static dev_t reg_dir_dev;
static ino_t reg_dir_ino;
static pthread_once_t reg_dir_once = PTHREAD_ONCE_INIT;

static void reg_dir_init(void)
{
	char *path = reg_dir_path;
	uid_t me = geteuid();
	struct stat st;

	if (me == 0)
		snprintf(path, sizeof(reg_dir_path), "/run/uroce");
	else
		snprintf(path, sizeof(reg_dir_path), "/dev/shm/uroce-%u", (unsigned)me);
	reg_dirfd = dir_private_fd(AT_FDCWD, path, true);
	if (reg_dirfd >= 0 && fstat(reg_dirfd, &st) == 0) {
		reg_dir_dev = st.st_dev;
		reg_dir_ino = st.st_ino;
	} else if (reg_dirfd >= 0) {
		close(reg_dirfd);
		reg_dirfd = -1;
	}
}

int shm_registry_dir(void)
{
	struct stat st;
	pthread_once(&reg_dir_once, reg_dir_init);
	if (reg_dirfd < 0 || fstat(reg_dirfd, &st) < 0 || st.st_dev != reg_dir_dev || st.st_ino != reg_dir_ino)
		return -EACCES;
	return reg_dirfd;
}

const char *shm_registry_path(void)
{
	struct stat st;
	/* the path must still name the directory the fd was checked as: one
	 * deleted and made again by another user is not used */
	if (shm_registry_dir() < 0 || fstatat(AT_FDCWD, reg_dir_path, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
	    st.st_dev != reg_dir_dev || st.st_ino != reg_dir_ino)
		return NULL;
	return reg_dir_path;
}

unsigned long shm_netns_id(void)
{
	pthread_once(&shm_dir_once, shm_dir_init);
	return shm_netns;
}

/* The socket file of key's region; false when there are no rings. */
static bool key_addr(const char *kind, const uint8_t key[SHM_KEY], struct sockaddr_un *sa, socklen_t *len)
{
	struct stat st;
	if (shm_dir_refused() || fstat(shm_dirfd, &st) < 0 || st.st_dev != shm_dir_dev || st.st_ino != shm_dir_ino)
		return false;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	/* through the directory's fd (dir_private_fd): the one checked */
	int k = snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d/%s.%lu.", shm_dirfd, kind, shm_netns);
	for (int i = 0; i < SHM_KEY && k > 0 && k + 3 < (int)sizeof(sa->sun_path); i++)
		k += snprintf(sa->sun_path + k, sizeof(sa->sun_path) - (size_t)k, "%02x", key[i]);
	*len = (socklen_t)sizeof(*sa);
	return k > 0 && k + 1 < (int)sizeof(sa->sun_path);
}

/* Where key's region is asked for ("rx"), and where its bell listens
 * ("bell": shm_rx_open). */
static bool region_addr(const uint8_t key[SHM_KEY], struct sockaddr_un *sa, socklen_t *len)
{
	return key_addr("rx", key, sa, len);
}

static bool peer_is_us(int s)
{
	struct ucred cr;
	socklen_t l = sizeof(cr);
	return getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &l) == 0 && cr.uid == geteuid();
}

/* One byte with up to SHM_FDS_MAX fds (SCM_RIGHTS), to send one or to
 * receive what a peer sent (more than one fd is refused, but every one
 * is received, so that it can be closed).  The control buffer is aligned
 * for a cmsghdr (which has a flexible array member, so it cannot be a
 * member here itself). */
struct fd_msg {
	char data;
	struct iovec iov;
	struct {
		alignas(size_t) char b[CMSG_SPACE(sizeof(int) * SHM_FDS_MAX) + CMSG_SPACE(sizeof(struct ucred))];
	} u;
	struct msghdr mh;
};

static void fd_msg_init(struct fd_msg *m, size_t controllen)
{
	memset(m, 0, sizeof(*m));
	m->data = 'r';
	m->iov = (struct iovec){ &m->data, 1 };
	m->mh = (struct msghdr){ .msg_iov = &m->iov, .msg_iovlen = 1, .msg_control = m->u.b,
				 .msg_controllen = controllen };
}

/* The fds a received message brought, every one ours now: the first kept
 * in *first when first is not NULL, the rest closed (close_foreign).
 * Returns how many fds came; *ncm, when not NULL, how many control
 * messages. */
static int msg_take_fds(struct fd_msg *m, int *first, int *ncm)
{
	int nfds = 0;

	if (first)
		*first = -1;
	if (ncm)
		*ncm = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m->mh); cm; cm = CMSG_NXTHDR(&m->mh, cm)) {
		if (ncm)
			(*ncm)++;
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len < CMSG_LEN(0))
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++, nfds++) {
			int f;
			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (first && nfds == 0)
				*first = f;
			else
				close_foreign(f);
		}
	}
	return nfds;
}

/* Close c, a connected rendezvous socket, without releasing anything a peer
 * queued on it in our context: shut it (the peer's sends fail from here,
 * EPIPE), receive what is queued and close every fd that came
 * (close_foreign).  The owner's listener refuses fds (SO_PASSRIGHTS 0), but
 * kernels before 6.16 have no such option, and a producer must take the
 * fd it asked for, and may get more.  With fork_lock held (the fds are ours
 * for a moment; close_foreign does not block but past CLOSERS_MAX).  Near
 * RLIMIT_NOFILE the kernel installs fewer fds than a message brings
 * (MSG_CTRUNC) and releases the rest here: a remaining limit. */
static void conn_close(int c)
{
	/* every message received from here carries the sender's credentials
	 * (SCM_CREDENTIALS), so a 0-byte message is told from the end: a
	 * peer's empty message must not end the drain before its fds */
	int one = 1;
	(void)setsockopt(c, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	shutdown(c, SHUT_RDWR);
	for (;;) {
		struct fd_msg m;
		fd_msg_init(&m, sizeof(m.u.b));
		ssize_t n = recvmsg(c, &m.mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 || (n == 0 && m.mh.msg_controllen == 0))
			break;  /* nothing queued (EAGAIN), or the end */
		msg_take_fds(&m, NULL, NULL);
	}
	close(c);
}

/* A bell's socket, closed as a rendezvous connection is (conn_close):
 * what a peer queued on it -- fds among them -- is received and closed
 * without waiting on it. */
static void bell_close(int fd)
{
	if (fd < 0)
		return;
	pthread_mutex_lock(&fork_lock);
	fd_untrack(fd);
	conn_close(fd);
	pthread_mutex_unlock(&fork_lock);
}

/* A new socket connected to rx's bell (docs/architecture.md "Same-host
 * rings", Wake-up), for one producer; -1 if none.  A socket of its own:
 * one shared with other producers could be connected elsewhere or shut by
 * any of them, and the bell would fall silent for all.  With fork_lock
 * held (the caller tracks or closes it). */
static int bell_connect(const struct shm_rx *rx)
{
	if (rx->bell < 0)
		return -1;
	int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s >= 0 && connect(s, (const struct sockaddr *)&rx->bell_sa, sizeof(rx->bell_sa)) < 0) {
		close(s);
		s = -1;
	}
	return s;
}

/* A socket of `type` bound at key's address of `kind` (key_addr) in our
 * rendezvous directory, or -1.  No fds may come our way on it (third
 * review): a connector could queue one -- a TCP socket lingering on unsent
 * data, a FUSE file -- whose release, when the engine closes the accepted
 * socket or the bell, blocks the engine for as long as the peer likes.
 * Accepted sockets inherit the setting, and a sendmsg with SCM_RIGHTS to
 * them fails (EPERM; Linux 6.16).  Older kernels refuse the option
 * (ENOPROTOOPT): there the engine receives whatever was queued and closes
 * it by a thread of its own (conn_close, shm_rx_bell_drain). */
static int private_bind(const char *kind, const uint8_t key[SHM_KEY], int type, struct sockaddr_un *sa)
{
	socklen_t l;

	if (!key_addr(kind, key, sa, &l))
		return -1;
	int s = socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	int no_rights = 0;
	if (atomic_load(&refuse_rights) && setsockopt(s, SOL_SOCKET, SO_PASSRIGHTS, &no_rights, sizeof(no_rights)) < 0) {
		/* older kernel: what was queued is received and closed */
	}
	/* an earlier owner's file (it was killed): the address is ours now */
	unlink(sa->sun_path);
	if (bind(s, (struct sockaddr *)sa, l) < 0) {
		close(s);
		return -1;
	}
	return s;
}

/* The listening socket of a new region, its file's path in path. */
static int region_listen(const uint8_t key[SHM_KEY], char *path)
{
	struct sockaddr_un sa;
	int s = private_bind("rx", key, SOCK_SEQPACKET, &sa);

	if (s >= 0 && listen(s, 64) < 0) {
		close(s);
		return -1;
	}
	memcpy(path, sa.sun_path, sizeof(sa.sun_path));
	return s;
}

/* A spare fd, closed to accept a connection when the fd table is full and
 * closed at once (shm_rx_serve): the producer then goes by UDP instead of
 * its connection staying queued, readable, for the engine to wake for
 * again and again. */
static _Atomic int reserve_fd = -1;

static void reserve_open(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int none = -1;
	if (fd >= 0 && !atomic_compare_exchange_strong(&reserve_fd, &none, fd))
		close(fd);
}

/* A shared mapping of a region, never inherited by a forked child
 * (MADV_DONTFORK): a child's copy would keep the region's open file
 * description, and with it the locks on it, alive (fork above). */
static void *map_region(int fd, size_t len, off_t off)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
	if (p != MAP_FAILED && madvise(p, len, MADV_DONTFORK) < 0) {
		munmap(p, len);
		p = MAP_FAILED;
	}
	return p;
}

static void asks_forget(const uint8_t key[SHM_KEY]);

static atomic_bool bells_on = true;  /* shm_bells */

void shm_bells(bool on)
{
	atomic_store(&bells_on, on);
}

/* A region's seals, as F_GET_SEALS reports them: ours (no change of size,
 * no further seals), and at most F_SEAL_EXEC besides, which the kernel
 * adds itself under vm.memfd_noexec=1 or 2 (Linux 6.3+, memfd_create(2)
 * MFD_NOEXEC_SEAL; no mapping of ours is executable).  Anything else --
 * F_SEAL_WRITE, F_SEAL_FUTURE_WRITE -- would make our stores fault or
 * our mappings fail: refused (issue #13, second review). */
#ifndef F_SEAL_EXEC
#define F_SEAL_EXEC 0x0020
#endif
#define SHM_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
bool shm_seals_ok(int seals)
{
	return seals >= 0 && (seals & ~F_SEAL_EXEC) == SHM_SEALS;
}

/* Once per process: why no region could be made (ring.c counts each). */
static void region_failed(const char *what)
{
	static atomic_flag said = ATOMIC_FLAG_INIT;
	int e = errno;
	if (!atomic_flag_test_and_set(&said))
		LOG_INFO("uroce: no same-host ring region (%s: %s): UDP", what, strerror(e));
	errno = e;
}

struct shm_rx *shm_rx_open(const uint8_t gid[16], unsigned slot)
{
	struct shm_rx *rx = calloc(1, sizeof(*rx));
	uint8_t key[SHM_KEY];
	void *m = MAP_FAILED;
	struct stat st;
	const int seals = SHM_SEALS;

	if (!rx)
		return NULL;
	region_key(key, gid, slot);
	rx->pid = shm_self();
	rx->reaped_ns = mono_ns();  /* the first look for dead producers a REAP_NS from now */
	rx->fd = rx->lfd = rx->bell = -1;
	if (shm_dir_refused())
		goto fail;
	if (atomic_load(&reserve_fd) < 0)
		reserve_open();
	/* locked and sealed before anyone else can hold it */
	pthread_mutex_lock(&fork_lock);
	rx->fd = memfd_create("uroce-rx", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	fd_track(rx->fd);
	pthread_mutex_unlock(&fork_lock);
	if (rx->fd < 0) {
		region_failed("memfd_create");
		goto fail;
	}
	if (flock(rx->fd, LOCK_EX | LOCK_NB) < 0 || ftruncate(rx->fd, (off_t)SHM_REGION_BYTES) < 0 ||
	    fallocate(rx->fd, 0, 0, (off_t)SHM_HDR_BYTES) < 0 || fcntl(rx->fd, F_ADD_SEALS, seals) < 0) {
		region_failed("sizing and sealing the memfd");
		goto fail;
	}
	/* Until it was sealed, a process of our user could open it through
	 * /proc/PID/fd and seal it further (F_SEAL_WRITE: our stores would
	 * fault; F_SEAL_SEAL first: our seals fail) or resize it (issue #13):
	 * our seals (shm_seals_ok) and our size, or it is not used. */
	if (!shm_seals_ok(fcntl(rx->fd, F_GET_SEALS)) || fstat(rx->fd, &st) < 0 ||
	    st.st_size != (off_t)SHM_REGION_BYTES) {
		errno = EPERM;
		region_failed("the memfd's seals or size changed");
		goto fail;
	}
	m = map_region(rx->fd, SHM_REGION_BYTES, 0);
	rx->bufs = malloc((size_t)SHM_RX_BATCH * SHM_PKT_MAX);
	if (m == MAP_FAILED || !rx->bufs) {
		region_failed("mapping the region");
		goto fail;
	}
	rx->r = m;
	rx->r->version = SHM_VERSION;
	rx->r->nrings = SHM_RINGS;
	rx->r->nunits = SHM_UNITS;
	rx->r->unit = SHM_UNIT;
	while (!rx->probe && getrandom(&rx->probe, sizeof(rx->probe), GRND_NONBLOCK) != sizeof(rx->probe))
		rx->probe = (uint64_t)mono_ns() * 0x9E3779B97F4A7C15ull;
	rx->r->owner_pid = (int32_t)rx->pid;
	rx->r->probe_addr = (uint64_t)(uintptr_t)&rx->probe;
	rx->r->probe_value = rx->probe;
	memcpy(rx->r->key, key, SHM_KEY);
	memcpy(rx->key, key, SHM_KEY);
	__atomic_store_n(&rx->r->magic, SHM_MAGIC, __ATOMIC_RELEASE);
	pthread_mutex_lock(&fork_lock);
	rx->lfd = region_listen(key, rx->path);
	fd_track(rx->lfd);
	pthread_mutex_unlock(&fork_lock);
	if (rx->lfd < 0) {
		region_failed("its rendezvous socket");
		goto fail;
	}
	/* the bell: watched by the engine, level-triggered (shm_rx_bell_drain
	 * reads it); without one (UROCE_SHM_BELL=0, EMFILE), producers ring
	 * by UDP */
	if (atomic_load(&bells_on)) {
		pthread_mutex_lock(&fork_lock);
		rx->bell = private_bind("bell", key, SOCK_DGRAM, &rx->bell_sa);
		fd_track(rx->bell);
		pthread_mutex_unlock(&fork_lock);
	}
	pthread_mutex_lock(&own_lock);
	rx->next = own_rx;
	own_rx = rx;
	pthread_mutex_unlock(&own_lock);
	asks_forget(key);  /* our own flows to it asked in vain before */
	return rx;
fail:
	if (m != MAP_FAILED)
		munmap(m, SHM_REGION_BYTES);
	fd_close_tracked(rx->fd);
	free(rx->bufs);
	free(rx);
	return NULL;
}

int shm_rx_listen_fd(const struct shm_rx *rx)
{
	return rx && rx->pid == shm_self() ? rx->lfd : -1;
}

int shm_rx_bell_fd(const struct shm_rx *rx)
{
	return rx && rx->pid == shm_self() ? rx->bell : -1;
}

unsigned shm_rx_bell_drain(struct shm_rx *rx, unsigned *calls)
{
	unsigned rung = 0;

	if (!rx || rx->bell < 0 || rx->pid != shm_self())
		return 0;
	/* the fds a datagram may bring (before Linux 6.16, which refuses
	 * them: SO_PASSRIGHTS) are ours from here: closed before a fork can
	 * copy them, without waiting on them (close_foreign) */
	pthread_mutex_lock(&fork_lock);
	while (rung < BELL_DRAIN_MAX) {
		/* one call for what is queued (mostly one doorbell): a call
		 * more would only say that nothing else is */
		struct fd_msg m[BELL_DRAIN_BATCH];
		struct mmsghdr mm[BELL_DRAIN_BATCH];
		memset(mm, 0, sizeof(mm));
		for (unsigned i = 0; i < BELL_DRAIN_BATCH; i++) {
			fd_msg_init(&m[i], sizeof(m[i].u.b));
			mm[i].msg_hdr = m[i].mh;
		}
		int n = recvmmsg(rx->bell, mm, BELL_DRAIN_BATCH, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, NULL);
		++*calls;
		for (int i = 0; i < n; i++) {
			m[i].mh = mm[i].msg_hdr;  /* the lengths the call wrote */
			msg_take_fds(&m[i], NULL, NULL);
		}
		if (n > 0)
			rung += (unsigned)n;
		if (n < (int)BELL_DRAIN_BATCH)
			break;
	}
	pthread_mutex_unlock(&fork_lock);
	return rung;
}

/* Tests: what shm_rx_serve hands over after the region (shm_test_bell). */
static _Atomic int bell_handed = SHM_TEST_BELL_OWN;

void shm_test_bell(int what)
{
	atomic_store(&bell_handed, what);
}

/* The fd this process hands a producer after the region, closed by the
 * caller (fork_lock held): a socket connected to its bell, or for tests
 * none or a wrong one. */
static int bell_to_hand(const struct shm_rx *rx)
{
	int sv[2], s;

	switch (atomic_load(&bell_handed)) {
	case SHM_TEST_BELL_NONE:
		return -1;
	case SHM_TEST_BELL_STREAM:
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
			return -1;
		close(sv[1]);
		return sv[0];
	case SHM_TEST_BELL_NOT_SOCKET:
		return open("/dev/null", O_RDWR | O_CLOEXEC);
	case SHM_TEST_BELL_BLOCKING:
		if ((s = bell_connect(rx)) >= 0)
			(void)fcntl(s, F_SETFL, 0);
		return s;
	default:
		return bell_connect(rx);
	}
}

/* Answer the producers waiting on the socket: the region's fd to each of
 * our own user, nothing to anyone else.  Never blocks: the socket and
 * every accepted one are non-blocking, and one small message fits in a
 * fresh socket's buffer.  A bounded number per call.  A connection that
 * cannot be accepted for want of an fd is accepted on the spare one and
 * closed (the producer goes by UDP): left queued it would keep the
 * level-triggered listener readable and the engine awake for it (issue
 * #13).  -1 when one cannot be accepted at all (ENOMEM, or no fd and no
 * spare): the caller stops watching the socket and serves again within
 * SERVE_STALLED_NS (ring.c, exec/engine.c). */
int shm_rx_serve(struct shm_rx *rx, unsigned *accepts)
{
	unsigned none;
	if (!accepts)
		accepts = &none;
	*accepts = 0;
	if (!rx || rx->pid != shm_self())
		return 0;
	if (atomic_load(&reserve_fd) < 0)
		reserve_open();  /* spent on an earlier connection while no fd was free */
	for (int k = 0; k < 64; k++) {
		int c = accept4(rx->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		++*accepts;
		if (fds_retry(c)) {
			c = accept4(rx->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
			++*accepts;
		}
		if (c < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == ECONNABORTED || errno == EINTR)
				continue;
			int spare = atomic_exchange(&reserve_fd, -1);
			if ((errno != EMFILE && errno != ENFILE) || spare < 0) {
				if (spare >= 0)
					atomic_store(&reserve_fd, spare);
				return -1;
			}
			close(spare);
			c = accept4(rx->lfd, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0)
				close(c);
			reserve_open();
			if (c < 0)
				return -1;
			continue;
		}
		/* A description of its own for the producer, never rx->fd's:
		 * that one holds our flock, and anyone keeping a copy of it would
		 * keep us "alive" after we died (owner_alive), and with us a
		 * region that nobody reads (issue #13, second review).  The
		 * producer reopens it anyway (region_reopen). */
		int give = -1;
		pthread_mutex_lock(&fork_lock);  /* a child forked meanwhile must not inherit it */
		if (peer_is_us(c)) {
			char path[32];
			snprintf(path, sizeof(path), "/proc/self/fd/%d", rx->fd);
			give = open(path, O_RDWR | O_CLOEXEC);
		}
		if (give >= 0) {
			/* the region, and in a message of its own right after
			 * it, a socket connected to our bell: the producer's
			 * doorbells then wake our engine by a datagram to the
			 * bell instead of to our address.  A message of its
			 * own, so that a producer of a library without bells,
			 * which refuses an answer of two fds, takes the region
			 * and closes the bell with the rest of the connection. */
			int bell = bell_to_hand(rx);
			int fds[2] = { give, bell };
			for (int i = 0; i < 2 && fds[i] >= 0; i++) {
				struct fd_msg m;
				fd_msg_init(&m, CMSG_SPACE(sizeof(int)));
				struct cmsghdr *cm = CMSG_FIRSTHDR(&m.mh);
				cm->cmsg_level = SOL_SOCKET;
				cm->cmsg_type = SCM_RIGHTS;
				cm->cmsg_len = CMSG_LEN(sizeof(int));
				memcpy(CMSG_DATA(cm), &fds[i], sizeof(int));
				if (sendmsg(c, &m.mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
					break;  /* the producer gave up waiting: it uses UDP */
			}
			close(give);
			if (bell >= 0)
				close(bell);
		}
		conn_close(c);
		pthread_mutex_unlock(&fork_lock);
	}
	return 0;
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

/* A forked child has neither the fds (closed by the fork handler) nor the
 * mapping (MADV_DONTFORK): it frees only its copy of the entry. */
void shm_rx_close(struct shm_rx *rx)
{
	if (!rx)
		return;
	pthread_mutex_lock(&own_lock);
	for (struct shm_rx **pp = &own_rx; *pp; pp = &(*pp)->next)
		if (*pp == rx) {
			*pp = rx->next;
			break;
		}
	pthread_mutex_unlock(&own_lock);
	if (rx->pid == shm_self()) {
		__atomic_store_n(&rx->r->magic, 0, __ATOMIC_RELEASE);
		/* the UDP address is still ours (ring.c closes before udp.c) */
		unlink(rx->path);
		fd_close_tracked(rx->lfd);
		if (rx->bell >= 0)
			unlink(rx->bell_sa.sun_path);
		bell_close(rx->bell);
		munmap(rx->r, SHM_REGION_BYTES);
		fd_close_tracked(rx->fd);
	}
	free(rx->bufs);
	free(rx);
}

/* A forked child has no engine and is not the region's consumer: its
 * parent is (the rings' single consumer), so the child reads nothing. */
bool shm_rx_active(struct shm_rx *rx)
{
	return rx && rx->pid == shm_self() && atomic_load_explicit(&rx->r->ring_mask, memory_order_relaxed) != 0;
}

pid_t shm_tx_ref_peer(const struct shm_tx *tx, pid_t *self)
{
	pid_t me = atomic_load_explicit(&shm_pid, memory_order_relaxed);

	*self = me;
	/* a forked child's flows go by UDP (shm_tx_send's -EPIPE) */
	if (tx->peer->pid != me)
		return 0;
	return tx->peer->ref_pid;
}

bool shm_tx_peer_sleeping(const struct shm_tx *tx)
{
	/* a forked child's copy has no mapping (MADV_DONTFORK) */
	return tx->peer->pid == atomic_load_explicit(&shm_pid, memory_order_relaxed) &&
	       atomic_load_explicit(&tx->peer->r->rx_sleeping, memory_order_relaxed) != 0;
}

int shm_tx_ring_bell(const struct shm_tx *tx)
{
	static const char ding = 'd';
	const struct shm_peer *pe = tx->peer;

	/* a forked child's copy of the entry is its parent's to ring */
	if (pe->bell < 0 || pe->pid != atomic_load_explicit(&shm_pid, memory_order_relaxed))
		return -ENODEV;
	/* Never blocks, whatever the owner did to the socket (MSG_DONTWAIT
	 * is this call's own, unlike O_NONBLOCK, which the owner shares and
	 * could clear).  EAGAIN: the bell's queue is full, or our own
	 * datagrams fill our send buffer and wait in it -- either way the
	 * bell is readable and its engine woken (level-triggered): rung all
	 * the same.  (The socket is ours alone, so no other producer can
	 * have pointed it elsewhere.) */
	if (send(pe->bell, &ding, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1 || errno == EAGAIN || errno == EWOULDBLOCK)
		return 0;
	return -errno;
}

void shm_rx_sleeping(struct shm_rx *rx, bool sleeping)
{
	if (!rx || rx->pid != shm_self())
		return;
	atomic_store_explicit(&rx->r->rx_sleeping, sleeping, memory_order_relaxed);
	/* Dekker with shm_tx_send: either its publication is seen by the poll
	 * that follows, or it sees this flag and rings the doorbell */
	atomic_thread_fence(memory_order_seq_cst);
}

/* A producer holds an open-file-description lock on byte SHM_RING_LOCK + idx
 * of the region for as long as it owns ring idx: the kernel drops it when
 * the process dies, in whatever PID namespace it lived (a PID would say
 * nothing across PID namespaces).  flock and these locks
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
/* Does ring i (mapped at ring) hold a record at the consumer's tail, not
 * yet taken (a broken ring's are never taken)? */
static bool ring_record_waits(const struct shm_rx *rx, unsigned i, const uint8_t *ring)
{
	const struct shm_rec_hdr *rec = (const void *)(ring + (size_t)(rx->tail[i] % SHM_UNITS) * SHM_UNIT);
	return !(rx->broken & (1u << i)) && atomic_load_explicit(&rec->seq, memory_order_acquire) == rx->tail[i] + 1;
}

#define REAP_NS 4000000ull  /* every 4 ms of polls, however few (a poller polls only when something may be there) */
/* Returns the fcntl calls it made (ring_held), for sys_other. */
static unsigned reap_dead_producers(struct shm_rx *rx, uint32_t mask)
{
	unsigned calls = 0;

	for (unsigned i = 0; i < SHM_RINGS; i++) {
		if (!(mask & (1u << i)))
			continue;
		uint32_t o = atomic_load(&rx->r->ring[i].owner);
		/* records still unread: the ring is left as it is, a producer
		 * may take it over once they are taken (ring_claim) */
		if (ring_record_waits(rx, i, (const uint8_t *)rx->r + SHM_HDR_BYTES + (size_t)i * SHM_RING_BYTES))
			continue;
		if (!o)
			continue;
		calls++;
		if (!ring_held(rx->fd, i))
			atomic_compare_exchange_strong(&rx->r->ring[i].owner, &o, 0);
	}
	return calls;
}

/* Ring i gave nothing this time: if its producer has given it back and
 * everything it sent has been taken (or it is broken), return it to the
 * free rings.  The producer stored owner 0 after its last record, so an
 * owner of 0 read here makes every record it sent visible.  A claim made
 * meanwhile shows as an owner again, and the ring stays in use. */
static void ring_release_if_done(struct shm_rx *rx, unsigned i, const uint8_t *ring)
{
	struct shm_ring_ctl *ctl = &rx->r->ring[i];

	if (atomic_load(&ctl->owner) != 0)
		return;
	if (ring_record_waits(rx, i, ring))
		return;  /* its last records: the next poll takes them */
	atomic_fetch_and(&rx->r->ring_mask, ~(1u << i));
	rx->broken &= ~(1u << i);
	if (atomic_load(&ctl->owner) != 0)
		atomic_fetch_or(&rx->r->ring_mask, 1u << i);
}

static int rx_poll(struct shm_rx *rx, struct uroce_rxpkt *pkts, int max, bool *more, uint64_t *bad, unsigned *calls)
{
	uint32_t mask = atomic_load_explicit(&rx->r->ring_mask, memory_order_acquire);
	int got = 0;

	if (!mask)
		return 0;
	unsigned poll = rx->polls++;
	uint64_t now = mono_ns();
	if (now - rx->reaped_ns >= REAP_NS) {
		rx->reaped_ns = now;
		unsigned n = reap_dead_producers(rx, mask);
		if (calls)
			*calls += n;
	}
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
			memcpy(pk->dgid, rx->key, 16);  /* the key's GID */
			pk->sport = h.sport;
			pk->tos = h.tos;
			pk->ttl = 64;
			pk->ip_id_hint = h.ip_id;
			pk->flags = (h.flags & NET_PKT_FLAGS) | NET_PKT_VIA_RING;
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

bool shm_rx_ready(struct shm_rx *rx)
{
	if (!rx || rx->pid != shm_self())
		return false;
	uint32_t mask = atomic_load_explicit(&rx->r->ring_mask, memory_order_acquire);
	for (unsigned i = 0; mask; i++, mask >>= 1) {
		if (!(mask & 1))
			continue;
		/* the consumer's published position, not its own (rx->tail:
		 * rx_lock's); records before it are taken */
		uint32_t tail = atomic_load_explicit(&rx->r->ring[i].tail, memory_order_acquire);
		const uint8_t *ring = (const uint8_t *)rx->r + SHM_HDR_BYTES + (size_t)i * SHM_RING_BYTES;
		const struct shm_rec_hdr *rec = (const void *)(ring + (size_t)(tail % SHM_UNITS) * SHM_UNIT);
		if (atomic_load_explicit(&rec->seq, memory_order_relaxed) == tail + 1)
			return true;
	}
	return false;
}

int shm_rx_poll(struct shm_rx *rx, struct uroce_rxpkt *pkts, int max, bool *more, uint64_t *bad, unsigned *calls)
{
	if (rx->pid != shm_self())
		return 0;  /* a forked child's copy (shm_rx_active) */
	return rx_poll(rx, pkts, max, more, bad, calls);
}

/* A ring of the region open at fd, its pages allocated (memory that runs
 * out refuses here rather than faulting later) and mapped. */
static uint8_t *ring_map(int fd, unsigned idx)
{
	off_t off = (off_t)(SHM_HDR_BYTES + (size_t)idx * SHM_RING_BYTES);

	if (fallocate(fd, 0, off, (off_t)SHM_RING_BYTES) < 0)
		return NULL;
	void *ring = map_region(fd, SHM_RING_BYTES, off);
	if (ring == MAP_FAILED)
		return NULL;
	populate(ring, SHM_RING_BYTES, true);
	return ring;
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

/* fd, a region someone handed us, opened afresh (an open file description
 * of our own: the owner's flock and our ring locks must not be one) if it
 * is one: a memfd of our own user, sealed against any change of size and
 * nothing else (F_GET_SEALS fails on anything but a memfd), of a region's size, whose
 * owner lives, tracked (fd_track).  The caller's fd, tracked too, is
 * closed in any case.  -1 otherwise. */
static int region_reopen(int fd)
{
	struct stat st;
	char path[32];
	int seals = fcntl(fd, F_GET_SEALS);
	int nfd = -1;

	/* the owner's seals (shm_seals_ok): F_SEAL_WRITE would make our stores fault */
	if (shm_seals_ok(seals) &&
	    fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_size == (off_t)SHM_REGION_BYTES) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		pthread_mutex_lock(&fork_lock);
		/* O_NONBLOCK: a lease on the file (F_SETLEASE by whoever made
		 * it) would hold this open in break_lease for
		 * fs.lease-break-time (45 s) under fork_lock (third review);
		 * it fails at once instead, and the flow goes by UDP */
		nfd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
		fd_track(nfd);
		pthread_mutex_unlock(&fork_lock);
		struct stat nst;
		/* the same file, still (the link is the fd's own) */
		if (nfd >= 0 && (fstat(nfd, &nst) < 0 || nst.st_ino != st.st_ino || nst.st_dev != st.st_dev || !owner_alive(nfd))) {
			fd_close_tracked(nfd);
			nfd = -1;
		}
	}
	/* the fd we were handed: not a memfd, if it failed the checks, and its
	 * close may block (close_foreign), so not under fork_lock */
	pthread_mutex_lock(&fork_lock);
	fd_untrack(fd);
	pthread_mutex_unlock(&fork_lock);
	close_foreign(fd);
	return nfd;
}

/* Is fd a unix datagram socket, as an owner's bell is?  A doorbell is
 * sent from a thread that holds a QP's lock, so it must never block: a
 * socket's send can be made non-blocking by the call (MSG_DONTWAIT),
 * which an owner cannot undo -- O_NONBLOCK belongs to the open file
 * description, which the owner shares and may clear (an eventfd whose
 * counter it then filled blocked the writer for good; a FIFO or a FUSE
 * file would too).  A datagram socket's close never lingers; what the
 * owner may have queued on our end is received and closed by bell_close. */
static bool bell_ok(int fd)
{
	int v = 0;
	socklen_t l = sizeof(v);

	if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || v != AF_UNIX)
		return false;
	l = sizeof(v);
	return getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &l) == 0 && v == SOCK_DGRAM;
}

/* The next message on s, within wait_ms: one byte and exactly one fd,
 * which `ok` (NULL: any) takes -- that fd, tracked -- or -1, every fd it
 * brought closed.  The fds are ours from the receive on: tracked or closed
 * before a fork can copy them (fork_lock); with MSG_CTRUNC the fds that
 * fit were installed, and are closed too. */
static int answer_fd(int s, int wait_ms, bool (*ok)(int fd))
{
	struct pollfd pfd = { .fd = s, .events = POLLIN };
	struct fd_msg m;
	int ncm = 0, got = -1, fd = -1;

	if (poll(&pfd, 1, wait_ms) != 1 || !(pfd.revents & POLLIN))
		return -1;
	fd_msg_init(&m, sizeof(m.u.b));
	pthread_mutex_lock(&fork_lock);
	ssize_t n = recvmsg(s, &m.mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	int nfds = n >= 0 ? msg_take_fds(&m, &got, &ncm) : 0;
	if (n == 1 && !(m.mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) && ncm == 1 && nfds == 1 && (!ok || ok(got)))
		fd_track(fd = got);
	else
		close_foreign(got);
	pthread_mutex_unlock(&fork_lock);
	return fd;
}

/* Ask the owner of key's socket for its region: the fd it sends, or -1
 * (no socket, a dead owner's, another user's, a full backlog, no answer
 * within SHM_CONNECT_WAIT_MS, an answer that is not one fd: the flow then
 * goes by UDP, as with no region; *immediate when the connect itself said
 * so: no socket, a dead owner's), and in *bell the owner's bell, which a
 * second message brings (-1: none, or not one bell_ok takes; its
 * doorbells then go by UDP).  Called without locks (shm_tx_prepare).
 * Every fd an answer carries is received and all but those accepted are
 * closed, so no answer can leave fds with us. */
static int region_ask(const uint8_t key[SHM_KEY], bool *immediate, int *bell)
{
	struct sockaddr_un sa;
	socklen_t l;
	int fd = -1;

	*immediate = false;
	*bell = -1;
	if (!region_addr(key, &sa, &l))
		return -1;
	/* non-blocking: a full backlog refuses at once (EAGAIN) */
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	atomic_fetch_add(&asks_made, 1);
	int rc = connect(s, (struct sockaddr *)&sa, l);
	/* no socket file, or a dead owner's: known at once, nothing to cache
	 * (peer_resolve) */
	*immediate = rc < 0 && (errno == ENOENT || errno == ECONNREFUSED);
	if (rc == 0 && peer_is_us(s)) {
		int wait_ms = atomic_load(&connect_wait_ms);
		fd = answer_fd(s, wait_ms, NULL);
		/* the bell, sent right behind: a moment's wait (an owner
		 * without bells has closed the connection: POLLHUP at once),
		 * as long as for the answer at most -- a loaded machine may run
		 * us between the two messages, and a peer left without its
		 * bell rings by UDP for its life */
		if (fd >= 0)
			*bell = answer_fd(s, wait_ms, bell_ok);
	}
	/* more may be queued behind the answer, fds a hostile owner sent to
	 * be released in our context (conn_close) */
	pthread_mutex_lock(&fork_lock);
	conn_close(s);
	pthread_mutex_unlock(&fork_lock);
	return fd;
}

/* The header of the region open at fd, mapped, if it is key's region in
 * a version this one speaks; NULL otherwise. */
static struct shm_region *header_map(int fd, const uint8_t key[SHM_KEY])
{
	struct shm_region *r = map_region(fd, SHM_HDR_BYTES, 0);

	if (r == MAP_FAILED)
		return NULL;
	if (__atomic_load_n(&r->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC || r->version != SHM_VERSION ||
	    r->nrings != SHM_RINGS || r->nunits != SHM_UNITS || r->unit != SHM_UNIT || memcmp(r->key, key, SHM_KEY)) {
		munmap(r, SHM_HDR_BYTES);
		return NULL;
	}
	return r;
}

static atomic_bool refs_on;  /* shm_refs */

void shm_refs(bool on)
{
	atomic_store(&refs_on, on);
}

/* The owner's pid, if reading the probe word it published through that pid
 * gives the word back; 0 if not (another pid namespace, no permission to
 * read it: a non-dumpable process, Yama's ptrace_scope, a seccomp filter
 * without process_vm_readv), or references are off.  Then the flow's
 * messages go as packets. */
static pid_t probe_owner(const struct shm_region *r)
{
	if (!atomic_load(&refs_on))
		return 0;
	uint64_t want = r->probe_value, got = 0;
	pid_t pid = r->owner_pid;
	struct iovec local = { &got, sizeof(got) };
	struct iovec remote = { (void *)(uintptr_t)r->probe_addr, sizeof(got) };

	if (pid <= 0 || !want || process_vm_readv(pid, &local, 1, &remote, 1, 0) != (ssize_t)sizeof(got) ||
	    got != want)
		return 0;
	return pid;
}

/* key's region as fd, its owner's bell as bell (-1: none; both closed
 * in any case): opened afresh, checked, its header mapped; a new peer
 * entry, or NULL. */
static struct shm_peer *peer_new(int fd, int bell, const uint8_t key[SHM_KEY])
{
	if (fd < 0 || (fd = region_reopen(fd)) < 0) {
		bell_close(bell);
		return NULL;
	}
	struct shm_region *r = header_map(fd, key);
	struct shm_peer *pe = r ? calloc(1, sizeof(*pe)) : NULL;
	uint32_t tag = 0;
	while (pe && !tag && getrandom(&tag, sizeof(tag), GRND_NONBLOCK) != sizeof(tag))
		tag = ((uint32_t)getpid() * 2654435761u) ^ (uint32_t)(uintptr_t)pe;
	if (!pe) {
		if (r)
			munmap(r, SHM_HDR_BYTES);
		fd_close_tracked(fd);
		bell_close(bell);
		return NULL;
	}
	memcpy(pe->key, key, SHM_KEY);
	pe->r = r;
	pe->fd = fd;
	pe->bell = bell;
	pe->pid = shm_self();
	pe->ref_pid = probe_owner(r);
	/* the owner word of our rings: a pid would be reused, or be another
	 * pid namespace's (reap_dead_producers' CAS would hit our claim) */
	pe->tag = tag ? tag : 1;
	return pe;
}

/* One of this process's own regions (a flow to its own address): opened
 * afresh, as another process would.  Never waits. */
static struct shm_peer *region_own(const uint8_t key[SHM_KEY])
{
	int fd = -1, bell = -1;

	pthread_mutex_lock(&own_lock);
	for (struct shm_rx *rx = own_rx; rx; rx = rx->next)
		if (!memcmp(rx->key, key, SHM_KEY)) {
			pthread_mutex_lock(&fork_lock);
			fd = fcntl(rx->fd, F_DUPFD_CLOEXEC, 0);
			fd_track(fd);
			if (fd >= 0)
				fd_track(bell = bell_connect(rx));
			pthread_mutex_unlock(&fork_lock);
			break;
		}
	pthread_mutex_unlock(&own_lock);
	return peer_new(fd, bell, key);
}

/* Is the entry still a live region?  Its owner may have died (its lock
 * is free), and its address gone to a successor's region; then its rings
 * serve the flows that have them, and new flows ask afresh. */
static bool peer_current(const struct shm_peer *pe)
{
	return owner_alive(pe->fd);
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

/* A forked child's copy (fork above) has neither the mapping nor the fd. */
static void peer_free(struct shm_peer *pe)
{
	if (pe->pid == shm_self()) {
		munmap(pe->r, SHM_HDR_BYTES);
		fd_close_tracked(pe->fd);
		bell_close(pe->bell);
	}
	free(pe);
}

static struct shm_ask *ask_find(const uint8_t key[SHM_KEY])
{
	for (unsigned i = 0; i < SHM_ASKS; i++)
		if (asks[i].used && !memcmp(asks[i].key, key, SHM_KEY))
			return &asks[i];
	return NULL;
}

/* A slot for a new ask: a free one, or a failure that has expired; NULL
 * when every one is in flight or a failure still cached: the flow then
 * goes by UDP, not asking (an unexpired failure evicted would be asked,
 * and waited for, again: issue #13, second review). */
static struct shm_ask *ask_slot(uint64_t now)
{
	for (unsigned i = 0; i < SHM_ASKS; i++)
		if (!asks[i].used || (!asks[i].pending && now >= asks[i].until))
			return &asks[i];
	return NULL;
}

static void asks_forget(const uint8_t key[SHM_KEY])
{
	pthread_mutex_lock(&peers_lock);
	struct shm_ask *a = ask_find(key);
	if (a && !a->pending)
		a->used = false;
	pthread_mutex_unlock(&peers_lock);
}

/* With peers_lock held: the live entry of key, asked for if need be and
 * may_ask (the lock is dropped meanwhile), or NULL: no region, it failed
 * less than SHM_ASK_FAIL_NS ago, no slot to ask with, or (!may_ask) no
 * answer at hand.  Entries no flow holds expire as failures do; an entry
 * whose owner died is dropped (freed with its last ring).  Failures the
 * connect reports at once (no socket file, a dead owner's: every remote
 * GID is one) cost nothing to redo and are not cached. */
static struct shm_peer *peer_resolve(const uint8_t key[SHM_KEY], bool may_ask)
{
	uint64_t wait_until = 0;
	for (;;) {
		uint64_t now = mono_ns();
		struct shm_peer *pe, *next;
		for (pe = peers; pe; pe = next) {
			next = pe->next;
			if (!pe->nheld && now > pe->until) {
				peer_unlink(pe);
				peer_free(pe);
			}
		}
		for (pe = peers; pe && memcmp(pe->key, key, SHM_KEY); pe = pe->next)
			;
		if (pe && peer_current(pe))
			return pe;
		if (pe) {
			peer_unlink(pe);
			if (!pe->nheld)
				peer_free(pe);
		}
		if (!(pe = region_own(key))) {
			struct shm_ask *a = ask_find(key);
			if (!may_ask)
				return NULL;  /* under the caller's locks: never an ask, never a wait */
			if (a && a->pending) {
				/* its answer, for a bounded time (SHM_ASK_WAIT_NS) */
				if (!wait_until)
					wait_until = now + SHM_ASK_WAIT_NS;
				struct timespec ts = { .tv_sec = (time_t)(wait_until / 1000000000ull),
						       .tv_nsec = (long)(wait_until % 1000000000ull) };
				if (pthread_cond_timedwait(&asks_cond, &peers_lock, &ts) == ETIMEDOUT)
					return NULL;
				continue;
			}
			if (a && now < a->until)
				return NULL;
			if (!a && !(a = ask_slot(now)))
				return NULL;  /* the table is full of asks and fresh failures: UDP */
			a->used = a->pending = true;
			memcpy(a->key, key, SHM_KEY);
			pthread_mutex_unlock(&peers_lock);
			bool immediate;
			int bell;
			int fd = region_ask(key, &immediate, &bell);
			pe = peer_new(fd, bell, key);
			pthread_mutex_lock(&peers_lock);
			if (a->pending && !memcmp(a->key, key, SHM_KEY)) {  /* not a forked child's table */
				a->pending = false;
				a->until = mono_ns() + SHM_ASK_FAIL_NS;
				a->used = !pe && !immediate;
				pthread_cond_broadcast(&asks_cond);
			}
			if (!pe)
				return NULL;
		}
		pe->until = mono_ns() + SHM_ASK_FAIL_NS;
		pe->next = peers;
		peers = pe;
		return pe;
	}
}

/* The public entries that take peers_lock or may wait run with thread
 * cancellation off (issue #13): a thread cancelled in the ask's poll
 * would leave its slot pending for ever, one cancelled in the timed wait
 * would exit holding peers_lock (pthread_cond_timedwait re-takes the
 * mutex before acting on the cancellation, pthread_cancel(3)), and either
 * would leak the ask's socket.  A cancellation asked for meanwhile is
 * acted upon at the caller's next cancellation point. */
static int shm_nocancel(void)
{
	int old = PTHREAD_CANCEL_ENABLE;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	return old;
}

static void shm_cancel_restore(int old)
{
	pthread_setcancelstate(old, NULL);
}

void shm_tx_prepare(const uint8_t dgid[16], unsigned slot)
{
	uint8_t key[SHM_KEY];
	region_key(key, dgid, slot);
	int cs = shm_nocancel();
	shm_self();  /* the fork handler is in place before any entry exists */
	pthread_mutex_lock(&peers_lock);
	peer_resolve(key, true);
	pthread_mutex_unlock(&peers_lock);
	shm_cancel_restore(cs);
}

bool shm_test_socket_path(const uint8_t gid[16], unsigned slot, char *path, size_t n)
{
	struct sockaddr_un sa;
	socklen_t l;
	uint8_t key[SHM_KEY];
	region_key(key, gid, slot);
	return region_addr(key, &sa, &l) && snprintf(path, n, "%s", sa.sun_path) < (int)n;
}

unsigned long shm_test_foreign_closes(void)
{
	return atomic_load(&foreign_by_thread);
}

void shm_test_connect_wait(int ms)
{
	atomic_store(&connect_wait_ms, ms > 0 ? ms : SHM_CONNECT_WAIT_MS);
}

void shm_test_passrights(bool refuse)
{
	atomic_store(&refuse_rights, refuse);
}

size_t shm_test_region_bytes(void)
{
	return SHM_REGION_BYTES;
}

unsigned long shm_tx_test_asks(void)
{
	return atomic_load(&asks_made);
}

void shm_tx_test_expire(void)
{
	pthread_mutex_lock(&peers_lock);
	for (struct shm_peer *pe = peers; pe; pe = pe->next)
		pe->until = 0;
	for (unsigned i = 0; i < SHM_ASKS; i++)
		asks[i].until = 0;
	pthread_mutex_unlock(&peers_lock);
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
	uint32_t me = pe->tag;
	unsigned idx;
	uint8_t *ring = NULL;

	for (idx = 0; idx < SHM_RINGS; idx++) {
		if (pe->held[idx] || !ring_lock(pe->fd, idx, true))
			continue;
		uint32_t o = atomic_load(&r->ring[idx].owner);
		if (!o && (atomic_load(&r->ring_mask) & (1u << idx))) {
			ring_lock(pe->fd, idx, false);
			continue;  /* given back, its last records not yet taken */
		}
		ring = ring_map(pe->fd, idx);
		if (!ring) {
			ring_lock(pe->fd, idx, false);
			return NULL;  /* no memory for its pages: UDP */
		}
		uint32_t t = atomic_load(&r->ring[idx].tail);
		const struct shm_rec_hdr *rec = (const void *)(ring + (size_t)(t % SHM_UNITS) * SHM_UNIT);
		if ((!o || atomic_load(&rec->seq) != t + 1) &&
		    atomic_compare_exchange_strong(&r->ring[idx].owner, &o, me))
			break;
		munmap(ring, SHM_RING_BYTES);
		ring = NULL;
		ring_lock(pe->fd, idx, false);
	}
	if (!ring)
		return NULL;
	struct shm_tx *tx = calloc(1, sizeof(*tx));
	if (!tx) {
		munmap(ring, SHM_RING_BYTES);
		atomic_store(&r->ring[idx].owner, 0);
		ring_lock(pe->fd, idx, false);
		return NULL;
	}
	pthread_mutex_init(&tx->lock, NULL);
	tx->peer = pe;
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

struct shm_tx *shm_tx_attach(const uint8_t dgid[16], unsigned slot)
{
	struct shm_peer *pe;
	struct shm_tx *tx = NULL;
	uint8_t key[SHM_KEY];
	int cs = shm_nocancel();

	region_key(key, dgid, slot);
	shm_self();  /* the fork handler is in place before any entry exists */
	pthread_mutex_lock(&peers_lock);
	/* asked for by shm_tx_prepare before the caller took its locks; no
	 * answer at hand (none prepared, expired, evicted, the owner changed):
	 * UDP, never an ask or a wait under the caller's locks (shm.h) */
	if (!(pe = peer_resolve(key, false)))
		goto out;
	if (pe->nheld < rings_own)
		tx = ring_claim(pe);
	if (!tx) {
		/* none to claim: share the least used of ours */
		for (unsigned i = 0; i < SHM_RINGS; i++)
			if (pe->held[i] && (!tx || pe->held[i]->users < tx->users))
				tx = pe->held[i];
	}
	if (tx)
		tx->users++;
out:
	pthread_mutex_unlock(&peers_lock);
	shm_cancel_restore(cs);
	return tx;
}

void shm_tx_detach(struct shm_tx *tx)
{
	if (!tx)
		return;
	int cs = shm_nocancel();
	pthread_mutex_lock(&peers_lock);
	struct shm_peer *pe = tx->peer;
	bool ours = pe->pid == shm_self();
	if (--tx->users == 0) {
		if (ours) {
			/* the consumer takes what is left and then frees the ring
			 * (ring_release_if_done): the last ACK of a QP destroyed
			 * right after it is still delivered */
			atomic_store(&tx->ctl->owner, 0);
			ring_lock(pe->fd, tx->idx, false);
			pthread_mutex_destroy(&tx->lock);
			munmap(tx->ring, SHM_RING_BYTES);
		}
		/* else a forked child's copy of its parent's ring: the owner
		 * word is the parent's, and so is the mutex, which a parent
		 * thread may have held at the fork; the lock's fd was closed and
		 * the mapping not inherited (fork above).  Only the entry goes. */
		pe->held[tx->idx] = NULL;
		free(tx);
		if (--pe->nheld == 0) {
			if (ours)
				peer_unlink(pe);  /* the child's list never had the parent's */
			peer_free(pe);  /* nothing holds a dead owner's region any more */
		}
	}
	pthread_mutex_unlock(&peers_lock);
	shm_cancel_restore(cs);
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
	/* a forked child's copy of its parent's ring: the parent produces
	 * into it (struct shm_peer); checked before the lock, which a parent
	 * thread may have held at the fork */
	if (tx->peer->pid != atomic_load_explicit(&shm_pid, memory_order_relaxed))
		return -EPIPE;
	pthread_mutex_lock(&tx->lock);  /* one producer per call (struct shm_tx) */
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
					 .ip_id = msgs[i].gso_idx, .tos = tos, .flags = msgs[i].flags };
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
	pthread_mutex_unlock(&tx->lock);
	return i;
}
