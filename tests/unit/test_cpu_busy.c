/* exec/cpu_busy.c: how busy each CPU has been, from cpuidle's counters and
 * from /proc/stat.  A thread pinned to one CPU spins there while another,
 * pinned to a second CPU, samples: the spinner's CPU must read as busy
 * (almost all of the window: a CPU with a runnable thread is never idle,
 * whatever else runs there), and the sampler's own time must be left out of
 * its CPU's share.  Not a timing test: nothing here depends on the other
 * CPU being idle, which a loaded machine would not promise.  Skipped (77)
 * with one CPU, more than CPU_BUSY_MAX, or no source (a container without
 * /proc/stat). */
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

static void pin(int cpu)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	sched_setaffinity(0, sizeof(one), &one);
}

static void *spinner(void *arg)
{
	(void)arg;
	pin(spin_cpu);
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		;
	return NULL;
}

/* Samples until one window's answer, or gives up after `tries` windows. */
static bool sample(struct cpu_busy *cb, int here, const cpu_set_t *allowed, double *here_busy,
		   int *other, double *other_busy)
{
	for (int i = 0; i < 40; i++) {
		uint64_t until = now_ns() + cb->window_ns + cb->window_ns / 10;
		if (i % 2) {
			/* the sampler spins on its own CPU: its own time is
			 * left out, so its CPU must not read busy from it */
			while (now_ns() < until)
				;
		} else {
			struct timespec ts = { 0, (long)(until - now_ns()) };
			nanosleep(&ts, NULL);
		}
		if (cpu_busy_sample(cb, now_ns(), here, allowed, here_busy, other, other_busy))
			return true;
	}
	return false;
}

static int run(bool cpuidle, const char *what)
{
	struct cpu_busy cb;
	if (!cpu_busy_open(&cb, cpuidle)) {
		printf("# %s: no source here\n", what);
		return 0;
	}
	if (cpuidle && cb.window_ns != 10000000ull)
		printf("# %s: no cpuidle counters here: /proc/stat read instead\n", what);
	cpu_set_t allowed;
	CPU_ZERO(&allowed);
	CPU_SET(cb.cpu[0], &allowed);
	CPU_SET(cb.cpu[1], &allowed);
	spin_cpu = cb.cpu[0];
	int here = cb.cpu[1];
	pin(here);
	atomic_store(&stop, false);
	pthread_t t;
	pthread_create(&t, NULL, spinner, NULL);
	double here_busy = -1, other_busy = -1;
	int other = -1;
	/* a first sample only starts a window; a window's answer follows */
	bool got = sample(&cb, here, &allowed, &here_busy, &other, &other_busy);
	/* and a second, the spinner pinned throughout */
	got = got && sample(&cb, here, &allowed, &here_busy, &other, &other_busy);
	atomic_store(&stop, true);
	pthread_join(t, NULL);
	printf("# %s: CPU %d (spinner) busy %.3f; CPU %d (sampler, its own time left out) busy %.3f\n", what,
	       other, other_busy, here, here_busy);
	char name[128];
	snprintf(name, sizeof(name), "%s: a window's answer", what);
	CHECK(got, name);
	snprintf(name, sizeof(name), "%s: the other CPU is the spinner's", what);
	CHECK(other == spin_cpu, name);
	snprintf(name, sizeof(name), "%s: the spinner's CPU reads busy", what);
	CHECK(other_busy >= 0.9, name);
	snprintf(name, sizeof(name), "%s: shares are shares", what);
	CHECK(here_busy >= 0 && here_busy <= 1 && other_busy <= 1, name);
	/* Too soon after a sample: no answer, and nothing read */
	snprintf(name, sizeof(name), "%s: no answer within a window", what);
	CHECK(!cpu_busy_sample(&cb, cb.at_ns + 1, here, &allowed, &here_busy, &other, &other_busy), name);
	/* No other CPU allowed: no answer */
	cpu_set_t only_here;
	CPU_ZERO(&only_here);
	CPU_SET(here, &only_here);
	bool any = false;
	for (int i = 0; i < 3 && !any; i++) {
		struct timespec ts = { 0, (long)(cb.window_ns + cb.window_ns / 10) };
		nanosleep(&ts, NULL);
		any = cpu_busy_sample(&cb, now_ns(), here, &only_here, &here_busy, &other, &other_busy);
	}
	snprintf(name, sizeof(name), "%s: no other CPU allowed, no answer", what);
	CHECK(!any, name);
	cpu_busy_close(&cb);
	return 1;
}

int main(void)
{
	long n = sysconf(_SC_NPROCESSORS_CONF);
	if (n < 2 || n > CPU_BUSY_MAX) {
		printf("test_cpu_busy: skipped, %ld CPUs\n", n);
		return 77;
	}
	int sources = run(true, "cpuidle") + run(false, "/proc/stat");
	if (!sources) {
		printf("test_cpu_busy: skipped, no source\n");
		return 77;
	}
	printf("%d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}
