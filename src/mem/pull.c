/* A large pull shared between two CPUs (pull.h). */
#include "pull.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "../util/thread.h"

/* The ticket: the job's sequence number (bits 32-63), its chunks (16-31)
 * and the next chunk to take (0-15), in one word, so that taking a chunk
 * (a compare-and-swap) also proves the job is still the one it read: a
 * helper that wakes after its job ended takes nothing of the next one. */
#define T_SEQ(t) ((uint32_t)((t) >> 32))
#define T_CHUNKS(t) ((uint32_t)((t) >> 16) & 0xffffu)
#define T_NEXT(t) ((uint32_t)(t) & 0xffffu)

static inline void sched_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

enum helper_state { HELPER_NONE, HELPER_RUNNING, HELPER_UNAVAILABLE };

/* The process's one job slot and helper.  The job's fields are written by
 * the caller that owns the slot (`busy`) before it publishes the ticket
 * (release) and read by a thread only after it took a chunk of that
 * ticket (acquire); the caller keeps them until every chunk taken is done
 * (`done`), so a taker never sees them change. */
static struct {
	_Atomic uint64_t ticket;
	_Atomic uint32_t done;        /* chunks of this job finished */
	_Atomic uint32_t failed;      /* a chunk read short */
	_Atomic uint64_t helper_bytes;
	_Atomic uint32_t helper_readv;
	_Atomic uint32_t helper_reads; /* eventfd reads since the last job's end */
	atomic_bool busy;             /* a caller owns the job slot */
	pid_t pid;
	size_t len;
	unsigned nl, nr;
	struct iovec local[PULL_MAX_LOCAL], remote[PULL_MAX_REMOTE];
	/* the helper: created by the first pull that wants it, under busy */
	enum helper_state state;
	pthread_t thread;
	int efd;
	int off_cpu;                  /* the CPU the helper is kept off (-1: none yet) */
	uint32_t seq;
} pull = { .efd = -1, .off_cpu = -1 };

unsigned pull_iov_slice(const struct iovec *v, unsigned n, size_t off, size_t len, struct iovec *out,
			unsigned max)
{
	unsigned k = 0;

	for (unsigned i = 0; i < n && len; i++) {
		if (off >= v[i].iov_len) {
			off -= v[i].iov_len;
			continue;
		}
		size_t take = v[i].iov_len - off;
		if (take > len)
			take = len;
		if (k == max)
			return 0;
		out[k].iov_base = (char *)v[i].iov_base + off;
		out[k].iov_len = take;
		k++;
		len -= take;
		off = 0;
	}
	return len ? 0 : k;
}

/* Copies chunk c of the current job: the bytes read, or -1.  Both sides
 * hold exactly the job's length (pull_copy), so the slices always fit. */
static ssize_t copy_chunk(uint32_t c)
{
	struct iovec l[PULL_MAX_LOCAL], r[PULL_MAX_REMOTE];
	size_t off = (size_t)c * PULL_CHUNK, len = pull.len - off < PULL_CHUNK ? pull.len - off : PULL_CHUNK;
	unsigned nl = pull_iov_slice(pull.local, pull.nl, off, len, l, PULL_MAX_LOCAL);
	unsigned nr = pull_iov_slice(pull.remote, pull.nr, off, len, r, PULL_MAX_REMOTE);

	ssize_t got = process_vm_readv(pull.pid, l, nl, r, nr, 0);
	if (got != (ssize_t)len)
		atomic_store_explicit(&pull.failed, 1, memory_order_relaxed);
	return got;
}

/* Takes and copies chunks of job `seq` until none is left; returns the
 * process_vm_readv calls made.  The helper counts its calls and bytes
 * before each chunk is done, which the caller waits for before it reads
 * them. */
static unsigned take_chunks(uint32_t seq, bool helper)
{
	uint64_t t = atomic_load_explicit(&pull.ticket, memory_order_acquire);
	unsigned calls = 0;

	for (;;) {
		if (T_SEQ(t) != seq || T_NEXT(t) >= T_CHUNKS(t))
			return calls;
		if (!atomic_compare_exchange_weak_explicit(&pull.ticket, &t, t + 1, memory_order_acq_rel,
							   memory_order_acquire))
			continue;
		ssize_t got = copy_chunk(T_NEXT(t));
		calls++;
		if (helper) {
			atomic_fetch_add_explicit(&pull.helper_readv, 1, memory_order_relaxed);
			if (got > 0)
				atomic_fetch_add_explicit(&pull.helper_bytes, (uint64_t)got, memory_order_relaxed);
		}
		atomic_fetch_add_explicit(&pull.done, 1, memory_order_release);
		t = atomic_load_explicit(&pull.ticket, memory_order_acquire);
	}
}

static void *helper_main(void *arg)
{
	sigset_t all;
	uint64_t v;

	(void)arg;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);  /* the application's signals are not ours */
	for (;;) {
		if (read(pull.efd, &v, sizeof v) != (ssize_t)sizeof v) {
			if (errno == EINTR)
				continue;
			return NULL;  /* the eventfd is gone */
		}
		atomic_fetch_add_explicit(&pull.helper_reads, 1, memory_order_relaxed);
		take_chunks(T_SEQ(atomic_load_explicit(&pull.ticket, memory_order_acquire)), true);
	}
}

/* A forked child has no helper thread, and no other thread that could own
 * the slot: it starts afresh (its copy of the eventfd is the parent's). */
static void pull_forked(void)
{
	if (pull.efd >= 0)
		close(pull.efd);
	pull.efd = -1;
	pull.state = HELPER_NONE;
	pull.off_cpu = -1;
	atomic_store(&pull.helper_readv, 0);
	atomic_store(&pull.helper_bytes, 0);
	atomic_store(&pull.helper_reads, 0);
	atomic_store(&pull.busy, false);
}

static void register_fork_handler(void)
{
	pthread_atfork(NULL, NULL, pull_forked);
}

/* Under busy.  False: no helper can run beside this thread. */
static bool helper_ready(bool rt, unsigned *sched_calls)
{
	if (pull.state == HELPER_UNAVAILABLE)
		return false;
	if (pull.state == HELPER_NONE) {
		static pthread_once_t once = PTHREAD_ONCE_INIT;
		pthread_once(&once, register_fork_handler);
		pull.state = HELPER_UNAVAILABLE;
		if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
			return false;
		pull.efd = eventfd(0, EFD_CLOEXEC);
		if (pull.efd < 0)
			return false;
		/* real-time as the engine is (engine.c, engine_start) */
		if (thread_start(&pull.thread, helper_main, NULL, &rt, "uroce-pull")) {
			close(pull.efd);
			pull.efd = -1;
			return false;
		}
		pthread_detach(pull.thread);
		pull.state = HELPER_RUNNING;
	}
	/* Off the caller's CPU: a real-time helper woken where it last ran
	 * would take the caller's own CPU (select_task_rq_rt), and the copy
	 * would be no faster.  On any other CPU of the process's cpuset (the
	 * kernel keeps a mask within it), not only the application's own: the
	 * helper is uroce's copy engine, as a NIC's DMA is no application
	 * thread, and an MPI rank bound to one core (Open MPI binds each of
	 * two ranks to a core by default) would otherwise never get one.  It
	 * runs only while a pull waits for it.  Set again only when the
	 * caller moved; refused (a cpuset of the caller's CPU alone), no help. */
	int cpu = sched_getcpu();
	if (cpu < 0 || cpu >= CPU_SETSIZE)
		return false;
	if (cpu == pull.off_cpu)
		return true;
	cpu_set_t set;
	CPU_ZERO(&set);
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (c != cpu)
			CPU_SET(c, &set);
	(*sched_calls)++;
	if (pthread_setaffinity_np(pull.thread, sizeof set, &set)) {
		/* the cpuset holds the caller's CPU alone: never any help */
		pull.state = HELPER_UNAVAILABLE;
		return false;
	}
	pull.off_cpu = cpu;
	return true;
}

bool pull_copy(pid_t pid, const struct iovec *local, unsigned nl, const struct iovec *remote, unsigned nr,
	       size_t len, size_t split_min, bool rt, struct pull_cost *cost)
{
	memset(cost, 0, sizeof *cost);
	uint32_t chunks = (uint32_t)((len + PULL_CHUNK - 1) / PULL_CHUNK);
	bool shared = split_min && len >= split_min && chunks >= 2 && chunks <= 0xffff && nl <= PULL_MAX_LOCAL &&
		      nr <= PULL_MAX_REMOTE && !atomic_exchange_explicit(&pull.busy, true, memory_order_acquire);

	if (shared && !helper_ready(rt, &cost->sched_calls)) {
		atomic_store_explicit(&pull.busy, false, memory_order_release);
		shared = false;
	}
	if (!shared) {
		cost->readv_calls = 1;
		return process_vm_readv(pid, local, nl, remote, nr, 0) == (ssize_t)len;
	}
	pull.pid = pid;
	pull.len = len;
	pull.nl = nl;
	pull.nr = nr;
	memcpy(pull.local, local, nl * sizeof *local);
	memcpy(pull.remote, remote, nr * sizeof *remote);
	atomic_store_explicit(&pull.done, 0, memory_order_relaxed);
	atomic_store_explicit(&pull.failed, 0, memory_order_relaxed);
	uint32_t seq = ++pull.seq;
	atomic_store_explicit(&pull.ticket, (uint64_t)seq << 32 | (uint64_t)chunks << 16, memory_order_release);
	uint64_t one = 1;
	cost->eventfd_calls = 1;
	if (write(pull.efd, &one, sizeof one) < 0) {
		/* not kicked: the caller copies it all */
	}
	cost->readv_calls = take_chunks(seq, false);
	/* only chunks the helper has begun are left: a copy of 128 KiB, unless
	 * its page faults block (the peer's memory, as for one thread's pull) */
	while (atomic_load_explicit(&pull.done, memory_order_acquire) < chunks)
		sched_pause();
	cost->helper_readv = atomic_exchange_explicit(&pull.helper_readv, 0, memory_order_relaxed);
	cost->helper_bytes = atomic_exchange_explicit(&pull.helper_bytes, 0, memory_order_relaxed);
	cost->helper_reads = atomic_exchange_explicit(&pull.helper_reads, 0, memory_order_relaxed);
	bool ok = !atomic_load_explicit(&pull.failed, memory_order_relaxed);
	atomic_store_explicit(&pull.busy, false, memory_order_release);
	return ok;
}
