/* One RoCE address shared by the uroce processes of one user: the registry,
 * the steering program and the forwarding of misdelivered packets (share.h;
 * docs/architecture.md, "One address, many processes"). */
#include "share.h"
#include "net.h"
#include "shm.h"
#include "../util/clock.h"
#include "../util/log.h"
#include "../wire/cm_mad.h"
#include "../wire/hdr.h"
#include "../wire/ip.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/types.h>

#define SHARE_MAGIC 0x31676572656f7275ull   /* "uroereg1" */
/* A new round of probes after a misdelivery at most this often: a dead
 * member's peers retransmit to it for a while, and each of those packets
 * is a misdelivery. */
#define SHARE_REPROBE_NS 20000000ull
/* How long device open waits for the registry lock (held for a few system
 * calls; a holder stopped by SIGSTOP must not hang the others' open). */
#define SHARE_LOCK_WAIT_NS 200000000ull

/* The steering program's words (loaded big-endian, BPF_ABS): "uroc" then
 * "e-px" (a probe: the group index follows) or "e-db" (a doorbell, udp.c's:
 * the slot whose region it wakes follows). */
#define W_UROC 0x75726f63u
#define W_EPX 0x652d7078u
#define W_EDB 0x652d6462u

struct share_hdr {
	_Atomic uint64_t magic;              /* SHARE_MAGIC once made */
	uint64_t nonce;                      /* probes and forwards carry it */
	_Atomic uint32_t gen;                /* the probe round */
	uint32_t reserved;
	_Atomic uint64_t round_ns;           /* when the last round began (CLOCK_MONOTONIC) */
	_Atomic uint32_t steer_seq;          /* bumped by each index recorded */
	uint8_t pad[28];
};

struct share_slot {
	_Atomic uint32_t index;              /* its socket's index in the group, as of round index_gen */
	_Atomic uint32_t index_gen;
	_Atomic uint32_t fwd_port;           /* its forward socket's port (host order; 0: none) */
	_Atomic uint32_t cm;                 /* 1: it runs a connection manager (QP1, cm/) */
	uint8_t pad[48];
};

/* The rdma_cm ports bound on the address (issue #15 item 2), per port
 * space: the binder's slot, valid while the binder holds the port's lock
 * (an OFD lock on byte SHARE_PORT_LOCKS + space * 65536 + port, released
 * by the kernel when it exits), so a REQ finds the process of its port. */
#define SHARE_PORT_SPACES 4
#define SHARE_PORT_LOCKS ((off_t)1 << 32)

struct share_map {
	struct share_hdr hdr;
	struct share_slot slot[SHARE_SLOTS];
	_Atomic uint16_t port_owner[SHARE_PORT_SPACES][65536];
};

struct share {
	int fd;                              /* our own open of the registry: our OFD locks */
	struct share_map *map;
	int guard;                           /* shm_guard_mapping's slot */
	unsigned slot;
	int rx_fd, fwd_fd;                   /* udp.c's */
	uint8_t gid[16];
	uint64_t nonce;
	pid_t opener;                        /* a forked child's close leaves the registry alone */
	atomic_bool steer_due;               /* an index changed while the lock was busy */
	atomic_bool told_attach, told_foreign;
	/* share_alone's answers, each with the (round, steer_seq) it holds for */
	_Atomic uint64_t alone_key, shared_key;
};

/* A probe: "uroce-px", the index it goes to, the round, the nonce. */
struct share_probe {
	uint8_t magic[8];
	uint32_t index_be, gen_be;
	uint64_t nonce;
};

/* A forward's wrapper (SHARE_FWD_HDR bytes), then the packet. */
struct share_fwd {
	uint8_t magic[8];
	uint64_t nonce;
	uint8_t sgid[16], dgid[16];
	uint16_t sport;
	uint8_t tos, ttl;
	uint16_t ip_id_hint;
	uint8_t pad[2];
};
_Static_assert(sizeof(struct share_fwd) == SHARE_FWD_HDR, "forward wrapper size");

static const uint8_t probe_magic[8] = { 'u', 'r', 'o', 'c', 'e', '-', 'p', 'x' };
static const uint8_t fwd_magic[8] = { 'u', 'r', 'o', 'c', 'e', '-', 'f', 'w' };

static void registry_name(const uint8_t gid[16], char *name, size_t n)
{
	int k = snprintf(name, n, "addr.%lu.", shm_netns_id());
	for (int i = 0; i < 16 && k > 0 && (size_t)k + 3 < n; i++)
		k += snprintf(name + k, n - (size_t)k, "%02x", gid[i]);
}

static int lock_byte(int fd, off_t at, short type, bool wait)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1 };
	return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
}

/* The registry lock on fd, waited for up to SHARE_LOCK_WAIT_NS. */
static bool fd_lock_patient(int fd)
{
	uint64_t until = now_ns() + SHARE_LOCK_WAIT_NS;
	while (lock_byte(fd, 0, F_WRLCK, false) < 0) {
		if (now_ns() > until)
			return false;
		usleep(200);
	}
	return true;
}

/* The registry lock, waited for when `patient` (device open), else tried
 * once (the receive path never waits on another process). */
static bool registry_lock(struct share *sh, bool patient)
{
	return patient ? fd_lock_patient(sh->fd) : lock_byte(sh->fd, 0, F_WRLCK, false) == 0;
}

static void registry_unlock(struct share *sh)
{
	lock_byte(sh->fd, 0, F_UNLCK, false);
}

static void steer_locked(struct share *sh);

/* A new program from the registry.  An index recorded meanwhile by a
 * member that found the lock busy is seen by steer_seq and built again; a
 * lock still busy leaves it to the next receive call (steer_due). */
static void steer(struct share *sh, bool patient)
{
	for (int k = 0; k < 4; k++) {
		if (!registry_lock(sh, patient))
			break;
		uint32_t seen = atomic_load(&sh->map->hdr.steer_seq);
		steer_locked(sh);
		registry_unlock(sh);
		if (atomic_load(&sh->map->hdr.steer_seq) == seen) {
			atomic_store(&sh->steer_due, false);
			return;
		}
	}
	atomic_store(&sh->steer_due, true);
}

void share_rx_tick(struct share *sh)
{
	if (atomic_load_explicit(&sh->steer_due, memory_order_relaxed))
		steer(sh, false);
}

/* Slots in [lo, hi] held by another open of the registry than fd's:
 * F_OFD_GETLK reports one conflicting lock at a time, not necessarily the
 * lowest, so the range is split around each. */
static void scan_held(int fd, unsigned lo, unsigned hi, uint8_t *held, unsigned *n)
{
	while (lo <= hi) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1 + (off_t)lo,
				    .l_len = (off_t)(hi - lo + 1) };
		if (fcntl(fd, F_OFD_GETLK, &fl) < 0 || fl.l_type == F_UNLCK)
			return;
		off_t a = fl.l_start - 1, b = fl.l_len > 0 ? a + fl.l_len - 1 : (off_t)hi;
		if (a < (off_t)lo)
			a = lo;
		if (b > (off_t)hi)
			b = hi;
		for (off_t s = a; s <= b; s++)
			if (!held[s]) {
				held[s] = 1;
				(*n)++;
			}
		if (a > (off_t)lo)
			scan_held(fd, lo, (unsigned)a - 1, held, n);
		lo = (unsigned)b + 1;
	}
}

static bool slot_held(int fd, unsigned s)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1 + (off_t)s, .l_len = 1 };
	return fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

static int reg_openat(int dfd, const char *name, int flags)
{
	int fd = openat(dfd, name, flags | O_CLOEXEC | O_NOFOLLOW, 0600);
	return fd < 0 ? -errno : fd;
}

/* Opens gid's registry, making it (initialised, then renamed into place,
 * so nobody sees it half made) when absent. */
static int registry_open(const uint8_t gid[16])
{
	char name[96], tmp[128];
	int dfd = shm_registry_dir();

	if (dfd < 0)
		return dfd;
	registry_name(gid, name, sizeof(name));
	for (int attempt = 0; attempt < 4; attempt++) {
		int fd = reg_openat(dfd, name, O_RDWR);
		if (fd != -ENOENT)
			return fd;
		uint64_t nonce;
		if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce))
			return -EIO;
		snprintf(tmp, sizeof(tmp), "%s.new.%d.%llx", name, (int)getpid(), (unsigned long long)nonce);
		fd = reg_openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL);
		if (fd < 0)
			return fd;
		struct share_hdr h = { .nonce = nonce };
		atomic_init(&h.magic, SHARE_MAGIC);
		int rc = ftruncate(fd, sizeof(struct share_map)) == 0 && pwrite(fd, &h, sizeof(h), 0) == sizeof(h) ?
			 renameat2(dfd, tmp, dfd, name, RENAME_NOREPLACE) : -1;
		int e = errno;
		close(fd);
		if (rc < 0)
			unlinkat(dfd, tmp, 0);
		if (rc < 0 && e != EEXIST)
			return -e;
		/* made, or another process made it first: open what is there */
	}
	return -EAGAIN;
}

/* Is fd the registry now named for gid?  The last member to leave unlinks
 * it (share_close), so an open that came before may hold one nobody else
 * will find. */
static bool registry_linked(int fd, const uint8_t gid[16])
{
	char name[96];
	struct stat a, b;
	int dfd = shm_registry_dir();

	registry_name(gid, name, sizeof(name));
	return dfd >= 0 && fstat(fd, &a) == 0 && fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* gid's registry, open with the registry lock held and still linked (a
 * last member's close may have unlinked it between the open and the lock). */
static int registry_open_locked(const uint8_t gid[16])
{
	for (int attempt = 0; attempt < 8; attempt++) {
		int fd = registry_open(gid);
		if (fd < 0)
			return fd;
		if (!fd_lock_patient(fd)) {
			/* not "the slot is taken" (-EBUSY): share_claim would try
			 * every slot, 200 ms each, behind a member stopped with
			 * the lock held */
			close(fd);
			LOG_INFO("uroce: the registry of a shared address stayed locked by another process");
			return -ETIMEDOUT;
		}
		if (registry_linked(fd, gid))
			return fd;
		close(fd);  /* and its lock */
	}
	return -EAGAIN;
}

int share_open(const uint8_t gid[16], unsigned slot, struct share **out)
{
	if (slot < SHARE_SLOT_FIRST || slot > SHARE_SLOT_LAST)
		return -EINVAL;
	int fd = registry_open_locked(gid);
	if (fd < 0)
		return fd;
	struct stat st;
	/* a registry made before the port table was: grown (sparse, zero) */
	if (fstat(fd, &st) < 0)
		st.st_size = 0;
	if (st.st_size >= (off_t)offsetof(struct share_map, port_owner) && st.st_size < (off_t)sizeof(struct share_map) &&
	    ftruncate(fd, sizeof(struct share_map)) == 0)
		st.st_size = sizeof(struct share_map);
	if (st.st_size < (off_t)sizeof(struct share_map)) {
		close(fd);
		return -EIO;
	}
	int locked = lock_byte(fd, 1 + (off_t)slot, F_WRLCK, false), e = errno;
	/* the slot is held: the registry may be let go */
	lock_byte(fd, 0, F_UNLCK, false);
	if (locked < 0) {
		close(fd);
		return e == EAGAIN || e == EACCES ? -EBUSY : -e;
	}
	struct share_map *m = mmap(NULL, sizeof(*m), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		close(fd);
		return -ENOMEM;
	}
	struct share *sh = calloc(1, sizeof(*sh));
	if (!sh) {
		munmap(m, sizeof(*m));
		close(fd);
		return -ENOMEM;
	}
	sh->fd = fd;
	sh->alone_key = sh->shared_key = UINT64_MAX;  /* no answer yet */
	sh->map = m;
	sh->slot = slot;
	/* a process of our user could truncate it under us (share.h) */
	sh->guard = shm_guard_mapping(m, sizeof(*m));
	if (atomic_load(&m->hdr.magic) != SHARE_MAGIC) {
		share_close(sh);
		return -EIO;
	}
	sh->rx_fd = sh->fwd_fd = -1;
	sh->nonce = m->hdr.nonce;
	sh->opener = getpid();
	memcpy(sh->gid, gid, 16);
	struct share_slot *me = &m->slot[slot];
	atomic_store(&me->fwd_port, 0);
	atomic_store(&me->index_gen, 0);
	atomic_store(&me->cm, 0);
	*out = sh;
	return 0;
}

void share_close(struct share *sh)
{
	if (!sh)
		return;
	/* a forked child closing its copy: the slot stays its parent's */
	if (sh->map && sh->opener == getpid()) {
		atomic_store(&sh->map->slot[sh->slot].fwd_port, 0);
		atomic_store(&sh->map->slot[sh->slot].cm, 0);
	}
	if (sh->map) {
		if (sh->guard >= 0)
			shm_unguard_mapping(sh->guard);
		munmap(sh->map, sizeof(*sh->map));
	}
	/* the last member out removes the registry, under its lock, which
	 * every joiner takes before its slot and then checks the file is
	 * still named (registry_open_locked): nobody is left holding one
	 * that others will not find.  Any lock of another open past byte 0
	 * (a slot, a port) is a member. */
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 0 };
	int dfd = shm_registry_dir();
	if (sh->fd >= 0 && sh->opener == getpid() && dfd >= 0 && fd_lock_patient(sh->fd)) {
		if (fcntl(sh->fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK && registry_linked(sh->fd, sh->gid)) {
			char name[96];
			registry_name(sh->gid, name, sizeof(name));
			unlinkat(dfd, name, 0);
		}
	}
	if (sh->fd >= 0)
		close(sh->fd);  /* releases the slot's lock and the registry's */
	free(sh);
}

/* The live slots, ours among them (our own lock conflicts with nobody). */
static unsigned live_slots(struct share *sh, uint8_t held[SHARE_SLOTS])
{
	unsigned n = 0;
	memset(held, 0, SHARE_SLOTS);
	scan_held(sh->fd, SHARE_SLOT_FIRST, SHARE_SLOT_LAST, held, &n);
	if (!held[sh->slot]) {
		held[sh->slot] = 1;
		n++;
	}
	return n;
}

/* Builds the steering program from the registry and attaches it to the
 * group (whichever member attaches last, its program is the group's).
 * Caller holds the registry lock. */
static void steer_locked(struct share *sh)
{
	struct sock_filter *f = malloc(sizeof(*f) * (16 + 2 * SHARE_SLOTS));
	uint8_t held[SHARE_SLOTS];

	if (!f)
		return;
	unsigned n = 0;

#ifndef SO_DETACH_REUSEPORT_BPF
#define SO_DETACH_REUSEPORT_BPF 68  /* Linux 5.8; before it the old program stays, harmless */
#endif
	/* a member alone has every packet without a program, which would
	 * only cost each of them a run in the softirq (~0.1 us a round trip
	 * of ib_write_lat by UDP); the next member's probes build one */
	if (live_slots(sh, held) <= 1) {
		free(f);
		setsockopt(sh->rx_fd, SOL_SOCKET, SO_DETACH_REUSEPORT_BPF, NULL, 0);
		return;
	}
	/* 0-5: a probe returns the index it carries */
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0);
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, W_UROC, 0, 7);   /* no: 9 */
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 4);
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, W_EPX, 0, 2);    /* no: 6 */
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 8);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_A, 0);
	/* 6-8: a doorbell goes to the slot it names */
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, W_EDB, 0, 2);    /* no: 9 */
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 8);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, 3);                       /* 12 */
	/* 9-11: the slot of the BTH destination QPN (bytes 5-7, §3.1) */
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 4);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xFFFFFF);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, SHARE_SLOT_SHIFT);
	/* 12-: slot -> index, for the slots whose index this round found */
	for (unsigned s = SHARE_SLOT_FIRST; s <= SHARE_SLOT_LAST; s++) {
		struct share_slot *sl = &sh->map->slot[s];
		/* the last index it learnt, of this round or an earlier one:
		 * a stale one sends its packets elsewhere, to be forwarded,
		 * as the hash would */
		if (!held[s] || !atomic_load_explicit(&sl->index_gen, memory_order_acquire))
			continue;
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, s, 0, 1);
		f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, atomic_load(&sl->index));
	}
	/* anything else: past the group, so the kernel picks by hash (and a
	 * wrong pick is forwarded) */
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0xFFFFFFFFu);
	struct sock_fprog prog = { .len = (unsigned short)n, .filter = f };
	if (setsockopt(sh->rx_fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)) < 0 &&
	    !atomic_exchange(&sh->told_attach, true))
		LOG_INFO("uroce: steering program of a shared address refused (%s): its packets are picked by hash "
			 "and forwarded", strerror(errno));
	free(f);
}

/* A round of probes: one to each index the group can have (one socket per
 * live slot that has joined), each received by the member at that index,
 * which records it and attaches a new program. */
static void probe_round(struct share *sh, bool patient)
{
	uint8_t held[SHARE_SLOTS];

	if (!registry_lock(sh, patient))
		return;
	uint64_t now = now_ns(), last = atomic_load(&sh->map->hdr.round_ns);
	/* one round per SHARE_REPROBE_NS for the whole address, however many
	 * members saw a misdelivery (a join always begins one) */
	if (!patient && now - last < SHARE_REPROBE_NS) {
		registry_unlock(sh);
		return;
	}
	atomic_store(&sh->map->hdr.round_ns, now);
	unsigned members = 0;
	live_slots(sh, held);
	for (unsigned s = SHARE_SLOT_FIRST; s <= SHARE_SLOT_LAST; s++)
		if (held[s] && atomic_load(&sh->map->slot[s].fwd_port))
			members++;
	uint32_t gen = atomic_load(&sh->map->hdr.gen) + 1;
	if (!gen)
		gen = 1;
	atomic_store(&sh->map->hdr.gen, gen);
	registry_unlock(sh);
	struct sockaddr_storage to;
	socklen_t tl;
	gid_to_sockaddr(sh->gid, ROCE_UDP_PORT, &to, &tl);
	for (unsigned k = 0; k < members; k++) {
		struct share_probe p = { .index_be = htonl(k), .gen_be = htonl(gen), .nonce = sh->nonce };
		memcpy(p.magic, probe_magic, 8);
		if (sendto(sh->fwd_fd, &p, sizeof(p), MSG_DONTWAIT, (struct sockaddr *)&to, tl) < 0)
			LOG_DBG("uroce: probe: %s", strerror(errno));
	}
}

static void maybe_reprobe(struct share *sh)
{
	uint64_t now = now_ns();
	if (now - atomic_load_explicit(&sh->map->hdr.round_ns, memory_order_relaxed) < SHARE_REPROBE_NS)
		return;  /* cheap: no lock */
	probe_round(sh, false);
}

int share_join(struct share *sh, int rx_fd, int fwd_fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	sh->rx_fd = rx_fd;
	sh->fwd_fd = fwd_fd;
	uint8_t gid[16];
	uint16_t port;
	if (getsockname(fwd_fd, (struct sockaddr *)&ss, &sl) < 0)
		return -errno;
	sockaddr_to_gid(&ss, gid, &port);
	atomic_store(&sh->map->slot[sh->slot].fwd_port, port);
	/* a program before the first probe: without one the group picks by
	 * hash, and a probe would reach a member at another index */
	steer(sh, true);
	probe_round(sh, true);
	return 0;
}

bool share_alone(struct share *sh)
{
	uint64_t key = (uint64_t)atomic_load_explicit(&sh->map->hdr.gen, memory_order_acquire) << 32 |
		       atomic_load_explicit(&sh->map->hdr.steer_seq, memory_order_acquire);
	if (atomic_load_explicit(&sh->alone_key, memory_order_relaxed) == key)
		return true;
	if (atomic_load_explicit(&sh->shared_key, memory_order_relaxed) == key)
		return false;
	uint8_t held[SHARE_SLOTS];
	bool alone = live_slots(sh, held) <= 1;
	atomic_store_explicit(alone ? &sh->alone_key : &sh->shared_key, key, memory_order_relaxed);
	return alone;
}

bool share_test_others(struct share *sh)
{
	uint8_t held[SHARE_SLOTS];
	return live_slots(sh, held) > 1;
}

bool share_test_gid_shared(const uint8_t gid[16])
{
	char name[96];
	registry_name(gid, name, sizeof(name));
	int dfd = shm_registry_dir();
	int fd = dfd < 0 ? -1 : reg_openat(dfd, name, O_RDONLY);
	if (fd < 0)
		return false;
	/* a fresh open: every holder's lock conflicts with it, ours too */
	uint8_t held[SHARE_SLOTS] = { 0 };
	unsigned n = 0;
	scan_held(fd, SHARE_SLOT_FIRST, SHARE_SLOT_LAST, held, &n);
	close(fd);
	return n > 1;
}

bool share_rx_probe(struct share *sh, const uint8_t *buf, uint32_t len)
{
	struct share_probe p;
	if (len != sizeof(p) || memcmp(buf, probe_magic, 8))
		return false;
	memcpy(&p, buf, sizeof(p));
	if (p.nonce != sh->nonce) {
		/* not of our registry: a process of our uid that sees another
		 * one (another mount namespace, docs/architecture.md) is in
		 * the group, and their packets cannot find each other */
		if (!atomic_exchange(&sh->told_foreign, true))
			LOG_ERR("uroce: a process of another address registry shares this address (another mount "
				"namespace?): packets between the two sets of processes are dropped");
		return true;
	}
	uint32_t gen = ntohl(p.gen_be);
	if (gen != atomic_load(&sh->map->hdr.gen))
		return true;  /* an earlier round's */
	struct share_slot *me = &sh->map->slot[sh->slot];
	atomic_store(&me->index, ntohl(p.index_be));
	atomic_store_explicit(&me->index_gen, gen, memory_order_release);
	atomic_fetch_add(&sh->map->hdr.steer_seq, 1);
	steer(sh, false);
	return true;
}

int share_forward(struct share *sh, unsigned slot, const struct uroce_rxpkt *pk, const uint8_t *buf, uint32_t len,
		  unsigned *syscalls)
{
	uint32_t port = slot <= SHARE_SLOT_LAST ? atomic_load(&sh->map->slot[slot].fwd_port) : 0;

	*syscalls = 0;
	if (!port || port > 0xFFFF)
		return 0;
	/* nobody's slot: a dead member's peers retransmitting, or a stray
	 * QPN -- no round of probes for that, steering is not at fault */
	*syscalls = 1;
	if (!slot_held(sh->fd, slot))
		return 0;
	struct share_fwd w = { .nonce = sh->nonce };
	struct iovec iov[2] = { { &w, sizeof(w) }, { (void *)buf, len } };
	struct sockaddr_storage to;
	socklen_t tl;
	gid_to_sockaddr(sh->gid, (uint16_t)port, &to, &tl);
	struct msghdr h = { .msg_name = &to, .msg_namelen = tl, .msg_iov = iov + !pk, .msg_iovlen = pk ? 2 : 1 };
	if (pk) {
		memcpy(w.magic, fwd_magic, 8);
		memcpy(w.sgid, pk->sgid, 16);
		memcpy(w.dgid, pk->dgid, 16);
		w.sport = pk->sport, w.tos = pk->tos, w.ttl = pk->ttl, w.ip_id_hint = pk->ip_id_hint;
	}
	ssize_t want = (ssize_t)len + (pk ? (ssize_t)sizeof(w) : 0);
	*syscalls = 2;
	bool sent = sendmsg(sh->fwd_fd, &h, MSG_DONTWAIT) == want;
	maybe_reprobe(sh);
	return sent ? 1 : -1;
}

bool share_unwrap(struct share *sh, uint8_t *buf, uint32_t len, struct uroce_rxpkt *pk)
{
	struct share_fwd w;
	if (len < sizeof(w) || memcmp(buf, fwd_magic, 8))
		return false;
	memcpy(&w, buf, sizeof(w));
	if (w.nonce != sh->nonce)
		return false;
	memcpy(pk->sgid, w.sgid, 16);
	memcpy(pk->dgid, w.dgid, 16);
	pk->sport = w.sport;
	pk->tos = w.tos;
	pk->ttl = w.ttl;
	pk->ip_id_hint = w.ip_id_hint;
	pk->flags = 0;  /* it came by UDP */
	pk->buf = buf + sizeof(w);
	pk->len = len - (uint32_t)sizeof(w);
	return true;
}

/* ------------------------------------------------------------ rdma_cm ports and QP1 */

static int port_space_index(uint16_t ps)
{
	switch (ps) {
	case CM_PS_TCP: return 0;
	case CM_PS_UDP: return 1;
	case CM_PS_IB: return 2;
	case CM_PS_IPOIB: return 3;
	default: return -1;
	}
}

static off_t port_lock_at(int psi, uint16_t port)
{
	return SHARE_PORT_LOCKS + (off_t)psi * 65536 + port;
}

int share_port_claim(struct share *sh, uint16_t ps, uint16_t port)
{
	int psi = port_space_index(ps);
	if (psi < 0)
		return -EINVAL;
	/* another process's bind holds it (our own OFD locks conflict with
	 * nobody of ours: cm/ checks the process's ports first) */
	if (lock_byte(sh->fd, port_lock_at(psi, port), F_WRLCK, false) < 0)
		return errno == EAGAIN || errno == EACCES ? -EADDRINUSE : -errno;
	atomic_store(&sh->map->port_owner[psi][port], (uint16_t)sh->slot);
	return 0;
}

void share_port_release(struct share *sh, uint16_t ps, uint16_t port)
{
	int psi = port_space_index(ps);
	if (psi < 0)
		return;
	uint16_t me = (uint16_t)sh->slot;
	atomic_compare_exchange_strong(&sh->map->port_owner[psi][port], &me, 0);
	lock_byte(sh->fd, port_lock_at(psi, port), F_UNLCK, false);
}

void share_cm_enable(struct share *sh)
{
	atomic_store(&sh->map->slot[sh->slot].cm, 1);
}

/* The slot whose CM a QP1 packet is for (share.h) */
unsigned share_cm_owner(struct share *sh, const uint8_t *pkt, uint32_t len)
{
	/* BTH, DETH, the 256-byte MAD, ICRC (cm-wire.md §3.1) */
	if (len < BTH_LEN + 8 + MAD_LEN + ICRC_LEN || bth_opcode(pkt) != 0x64)
		return 0;
	const uint8_t *mad = pkt + BTH_LEN + 8, *b = mad + MAD_HDR_LEN;
	if (mad_class(mad) != MAD_CLASS_CM)
		return 0;
	uint32_t id;
	if (cm_receiver_id(mad, &id)) {
		unsigned s = share_slot_of_comm_id(id);
		if (s == sh->slot || (s >= SHARE_SLOT_FIRST && s <= SHARE_SLOT_LAST && slot_held(sh->fd, s)))
			return s;
		goto any_cm; /* nobody's ID: a CM of the address drops and counts it, or answers a DREQ */
	}
	uint16_t attr = mad_attr(mad);
	if (attr != CM_ATTR_REQ && attr != CM_ATTR_SIDR_REQ)
		goto any_cm;
	uint64_t sid = ld64(b + (attr == CM_ATTR_REQ ? REQ_SERVICE_ID : SIDR_REQ_SERVICE_ID));
	int psi = port_space_index((uint16_t)(sid >> 16));
	if (psi >= 0 && !(sid >> 32)) {
		uint16_t port = (uint16_t)sid;
		unsigned s = atomic_load(&sh->map->port_owner[psi][port]);
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = port_lock_at(psi, port),
				    .l_len = 1 };
		/* held by another open than ours, or ours */
		if (s >= SHARE_SLOT_FIRST && s <= SHARE_SLOT_LAST &&
		    ((fcntl(sh->fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) || s == sh->slot))
			return s;
	}
	/* nobody's port: a CM of the address rejects it (REJ 8, SIDR status 1),
	 * ours when we have one */
any_cm:
	if (atomic_load(&sh->map->slot[sh->slot].cm))
		return sh->slot;
	uint8_t held[SHARE_SLOTS];
	live_slots(sh, held);
	for (unsigned s = SHARE_SLOT_FIRST; s <= SHARE_SLOT_LAST; s++)
		if (held[s] && atomic_load(&sh->map->slot[s].cm))
			return s;
	return 0;
}
