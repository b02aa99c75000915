/* A large pull shared between two CPUs (issue #16: MPI's 1 MiB messages on
 * one host; docs/architecture.md, "The single copy on one host").
 *
 * A reference's bytes are copied by one process_vm_readv in the thread that
 * received it, one CPU's copy: ~85-90 us for 1 MiB that the peer has just
 * written, on this project's machine, while the peer usually spins waiting
 * for the answer on the other CPU.  A copy of `split_min` bytes or more is
 * cut into chunks of PULL_CHUNK bytes that the calling thread and a helper
 * thread of the process ("uroce-pull", asleep on an eventfd until a pull
 * wakes it, kept off the caller's CPU) take one at a time from a shared
 * counter.  The caller never waits for a chunk that nobody has begun: a
 * helper that wakes late, or never (one CPU, a busy real-time CPU), leaves
 * the caller to copy everything as before, at the price of one eventfd
 * write.  One pull at a time uses the helper; another thread's pull
 * meanwhile copies alone. */
#ifndef UROCE_MEM_PULL_H
#define UROCE_MEM_PULL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include "../util/limits.h"

#define PULL_CHUNK (128u << 10)
#define PULL_MAX_LOCAL (UROCE_MAX_SGE + 1u)  /* iovecs on our side: a WQE's SGEs and the last byte's */
#define PULL_MAX_REMOTE 8u

/* What a pull cost, for the caller's counters: the system calls of the
 * calling thread, and those of the helper. */
struct pull_cost {
	unsigned readv_calls;     /* the caller's process_vm_readv calls */
	unsigned eventfd_calls;   /* the caller's kick */
	unsigned sched_calls;     /* the caller's setting of the helper's CPUs */
	unsigned helper_readv;    /* the helper's process_vm_readv calls */
	unsigned helper_reads;    /* the helper's eventfd reads, since the previous pull it shared */
	uint64_t helper_bytes;    /* bytes the helper copied */
};

/* Copies the `len` bytes remote[0..nr) of process pid names into
 * local[0..nl) (exactly len bytes), with the helper when len >= split_min
 * (0: never) and it can run beside the caller.  `rt`: the helper thread, if
 * this call creates it, asks for SCHED_FIFO priority 1 as the engine does.
 * True when every byte was read; what was read stays either way. */
bool pull_copy(pid_t pid, const struct iovec *local, unsigned nl, const struct iovec *remote, unsigned nr,
	       size_t len, size_t split_min, bool rt, struct pull_cost *cost);

/* The iovecs that cover bytes [off, off + len) of v[0..n): into out (at
 * most max), returning how many, or 0 when they are not there or do not fit. */
unsigned pull_iov_slice(const struct iovec *v, unsigned n, size_t off, size_t len, struct iovec *out,
			unsigned max);

#endif
