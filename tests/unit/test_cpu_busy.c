/* exec/cpu_busy.c: how busy each CPU has been, from /proc/stat.  A thread
 * pinned to one CPU spins there while the sampler, pinned to a second CPU,
 * samples with only those two allowed:
 *  - the spinner's CPU reads busy, almost all of each window (a CPU with a
 *    runnable thread is never idle, whatever else runs there);
 *  - in a window where the sampler itself spins, its own time is left out
 *    of its CPU's share: that share is at most what the sampler did not
 *    run of the window, plus a clock tick's rounding (/proc/stat counts
 *    ticks); counted in, it would be the whole window;
 *  - no shares before a window has passed, and none chosen with no other
 *    CPU allowed.
 * Not a timing test: nothing here needs a CPU to be idle, which a loaded
 * machine would not promise.  Skipped (77) with fewer than two CPUs to
 * run on, more online than CPU_BUSY_MAX, or no /proc/stat. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "exec/cpu_busy.h"
#include "util/clock.h"

static int checks, failures;
#define CHECK(cond, name) do { checks++; if (!(cond)) { failures++; printf("not ok: %s\n", name); } } while (0)

static atomic_bool stop;
static int spin_cpu;
static atomic_int spinner_pinned;

static bool pin(int cpu)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	return sched_setaffinity(0, sizeof(one), &one) == 0;
}

static void *spinner(void *arg)
{
	(void)arg;
	atomic_store(&spinner_pinned, pin(spin_cpu) ? 1 : -1);
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		;
	return NULL;
}

/* One window, the sampler sleeping or spinning through it; true with
 * shares.  *own: the share of the window the sampler ran. */
static bool window(struct cpu_busy *cb, bool spin, int here, double *own)
{
	uint64_t start = cb->at_ns, t0 = thread_cpu_ns();
	uint64_t until = start + CPU_BUSY_WINDOW_NS + CPU_BUSY_WINDOW_NS / 10;
	if (spin) {
		while (now_ns() < until)
			;
	} else {
		uint64_t now = now_ns();
		struct timespec ts = { 0, (long)(until > now ? until - now : 0) };
		nanosleep(&ts, NULL);
	}
	uint64_t now = now_ns();
	*own = (double)(thread_cpu_ns() - t0) / (double)(now - start);
	return cpu_busy_sample(cb, now, here) && cpu_busy_share(cb, here) >= 0;
}

int main(void)
{
	cpu_set_t mine;
	if (sched_getaffinity(0, sizeof(mine), &mine) < 0 || CPU_COUNT(&mine) < 2) {
		printf("test_cpu_busy: skipped, fewer than two CPUs to run on\n");
		return 77;
	}
	int cpus[2], k = 0;
	for (int c = 0; c < CPU_SETSIZE && k < 2; c++)
		if (CPU_ISSET(c, &mine))
			cpus[k++] = c;
	struct cpu_busy cb;
	if (!cpu_busy_open(&cb)) {
		printf("test_cpu_busy: skipped, not looked at here (one CPU, more than %d, or no /proc/stat)\n",
		       CPU_BUSY_MAX);
		return 77;
	}
	spin_cpu = cpus[0];
	int here = cpus[1];
	cpu_set_t allowed;
	CPU_ZERO(&allowed);
	CPU_SET(spin_cpu, &allowed);
	CPU_SET(here, &allowed);
	if (!pin(here)) {
		printf("test_cpu_busy: skipped, cannot pin to CPU %d\n", here);
		return 77;
	}
	pthread_t t;
	pthread_create(&t, NULL, spinner, NULL);
	while (!atomic_load(&spinner_pinned))
		;
	if (atomic_load(&spinner_pinned) < 0) {
		atomic_store(&stop, true);
		pthread_join(t, NULL);
		printf("test_cpu_busy: skipped, cannot pin to CPU %d\n", spin_cpu);
		return 77;
	}

	double own = 0, least_share = -1;
	/* a first sample only starts a window */
	CHECK(!window(&cb, false, here, &own), "a first sample gives no shares");
	CHECK(cpu_busy_share(&cb, spin_cpu) < 0 && cpu_busy_least(&cb, &allowed, here, &least_share) < 0,
	      "no shares known before a window");
	bool slept = window(&cb, false, here, &own);
	double spin_busy = cpu_busy_share(&cb, spin_cpu), here_busy = cpu_busy_share(&cb, here);
	printf("# sampler asleep: CPU %d (spinner) busy %.3f; CPU %d busy %.3f\n", spin_cpu, spin_busy, here, here_busy);
	CHECK(slept, "a window's shares");
	CHECK(cpu_busy_least(&cb, &allowed, here, &least_share) == spin_cpu && least_share == spin_busy,
	      "the least busy other CPU allowed is the spinner's (the only one)");
	CHECK(spin_busy >= 0.9, "the spinner's CPU reads busy");
	CHECK(here_busy >= 0 && here_busy <= 1, "a share is a share");

	bool spun = window(&cb, true, here, &own);
	spin_busy = cpu_busy_share(&cb, spin_cpu);
	here_busy = cpu_busy_share(&cb, here);
	double tick = 1e9 / (double)sysconf(_SC_CLK_TCK) / (double)CPU_BUSY_WINDOW_NS;
	printf("# sampler spinning (ran %.3f of the window): CPU %d (spinner) busy %.3f; CPU %d, the sampler's own "
	       "time left out, busy %.3f (at most %.3f)\n", own, spin_cpu, spin_busy, here, here_busy,
	       1 - own + tick + 0.05);
	CHECK(spun, "a window's shares, the sampler spinning");
	CHECK(spin_busy >= 0.9, "the spinner's CPU reads busy, the sampler spinning");
	CHECK(here_busy <= 1 - own + tick + 0.05, "the sampler's own time is left out of its CPU's share");

	CHECK(!cpu_busy_sample(&cb, cb.at_ns + 1, here) && cpu_busy_share(&cb, here) == here_busy,
	      "no sample within a window: the shares stand");
	cpu_set_t only_here;
	CPU_ZERO(&only_here);
	CPU_SET(here, &only_here);
	CHECK(cpu_busy_least(&cb, &only_here, here, &least_share) < 0, "no other CPU allowed, none chosen");
	CHECK(cpu_busy_share(&cb, CPU_SETSIZE - 1) < 0, "a CPU not looked at has no share");

	atomic_store(&stop, true);
	pthread_join(t, NULL);
	cpu_busy_close(&cb);
	printf("%d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}
