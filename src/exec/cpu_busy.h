/* How busy each CPU this process may run on has been, for choosing where a
 * real-time engine sleeps (docs/architecture.md, "Execution model": where
 * the engine sleeps).  Read from the kernel's per-CPU idle time: cpuidle's
 * sysfs counters (microseconds) where there are, else /proc/stat (clock
 * ticks, so over longer windows). */
#ifndef UROCE_CPU_BUSY_H
#define UROCE_CPU_BUSY_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

/* The CPUs looked at: those numbered below this.  A machine with more is
 * not looked at (a look would cost too much, and a busy CPU's wake-up is
 * the rarer case there). */
#define CPU_BUSY_MAX 16

struct cpu_busy {
	int n;                           /* CPUs looked at (0: no source) */
	int cpu[CPU_BUSY_MAX];           /* their numbers */
	int nfd[CPU_BUSY_MAX];           /* cpuidle state files per CPU */
	int *fd;                         /* n * max states, -1 unused; NULL: /proc/stat */
	int nstates;
	int stat_fd;                     /* /proc/stat when there is no cpuidle */
	uint64_t window_ns;              /* the shortest window the source resolves */
	uint64_t at_ns;                  /* the last sample */
	uint64_t idle_us[CPU_BUSY_MAX];  /* idle time at the last sample */
	uint64_t self_ns;                /* the sampling thread's CPU time then */
	unsigned reads;                  /* system calls the last sample made */
};

/* Opens the source for the machine's CPUs (all of them: the thread's
 * affinity may change later): cpuidle's counters if `cpuidle` and there are
 * any, else /proc/stat.  False: none (one CPU, too many, or no source
 * readable). */
bool cpu_busy_open(struct cpu_busy *cb, bool cpuidle);
void cpu_busy_close(struct cpu_busy *cb);

/* Call from the thread whose own time is to be left out.  When a window has
 * passed since the last sample, returns true and sets *here_busy to the
 * share (0..1) of the window that threads other than this one kept `here`
 * busy, *other to the least busy CPU of `allowed` but `here` and
 * *other_busy to its share; false otherwise (too soon, a first sample, or
 * no such CPU). */
bool cpu_busy_sample(struct cpu_busy *cb, uint64_t now, int here, const cpu_set_t *allowed,
		     double *here_busy, int *other, double *other_busy);

#endif
