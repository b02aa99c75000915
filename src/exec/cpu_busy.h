/* How busy each online CPU has been, for choosing where a real-time engine
 * sleeps (docs/architecture.md, "Execution model": where the engine
 * sleeps).  Read from the kernel's idle time per CPU in /proc/stat, which
 * counts an idle period still under way (cpuidle's counters in sysfs count
 * one only once the CPU leaves it, so a CPU idle all through a window read
 * as never idle), in clock ticks (USER_HZ, 100 a second): hence windows of
 * CPU_BUSY_WINDOW_NS, a tick a third of one. */
#ifndef UROCE_CPU_BUSY_H
#define UROCE_CPU_BUSY_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

/* Machines with more online CPUs are not looked at: a look at /proc/stat
 * costs more with every CPU and interrupt line, and the chance that the CPU
 * a wake-up lands on is busy is smaller there. */
#define CPU_BUSY_MAX 16
#define CPU_BUSY_WINDOW_NS 30000000ull

struct cpu_busy {
	int n;                           /* online CPUs looked at (0: none) */
	int cpu[CPU_BUSY_MAX];           /* their numbers */
	int stat_fd;                     /* /proc/stat */
	uint64_t hz;                     /* its clock ticks a second */
	uint64_t at_ns;                  /* the last sample (0: none yet) */
	uint64_t idle_us[CPU_BUSY_MAX];  /* idle time at the last sample */
	uint64_t self_ns;                /* the sampling thread's CPU time then */
	double share[CPU_BUSY_MAX];      /* the last window's busy shares, -1: none */
};

/* The system calls a sample makes: the thread's CPU clock and the pread. */
#define CPU_BUSY_SAMPLE_CALLS 2

/* Opens /proc/stat and notes the online CPUs; false: not looked at (one
 * CPU, more than CPU_BUSY_MAX, or no /proc/stat). */
bool cpu_busy_open(struct cpu_busy *cb);
void cpu_busy_close(struct cpu_busy *cb);

/* Call from the thread whose own time is to be left out, which runs on
 * `here` now.  When a window has passed since the last sample, takes one
 * and returns true.  It sets each CPU's share (0..1) of the window that it
 * was kept busy, less, for `here`, this thread's own time; after a first
 * sample, a window many times too long or a failed read, the shares are
 * unknown (cpu_busy_share: -1).  False: too soon, nothing read. */
bool cpu_busy_sample(struct cpu_busy *cb, uint64_t now, int here);

/* The last window's share of `cpu`; -1 if not known. */
double cpu_busy_share(const struct cpu_busy *cb, int cpu);

/* The least busy CPU of `allowed` but `except` by the last window, and its
 * share in *share; -1 if none is known. */
int cpu_busy_least(const struct cpu_busy *cb, const cpu_set_t *allowed, int except, double *share);

#endif
