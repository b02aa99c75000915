/* cpu_stalls: how often, and for how long, a thread that never yields is
 * kept from running anyway -- the floor under every busy-polling latency
 * tail on this machine.  One thread per CPU of the affinity mask, each
 * pinned and reading the clock in a loop for SECONDS; a gap of STALL_NS or
 * more between two reads is a stall (in a VM mostly the host running
 * something else on the vCPU; also the guest's own interrupts).
 *
 *   cpu_stalls [-D SECONDS]
 *
 * Prints one line: RESULT mode=stalls cpus=N per_s=<stalls per second per
 * CPU> lost_pct=<share of the time stalled> median_us=<stall length>
 * p99_us=<stall length> max_us=...
 *
 * Why it is in the bench: a ping-pong whose hop takes H us is hit by a
 * stall of length L in per_s x 2H to twice that of its iterations (the
 * CPU on the critical path; the waiting one when its stall covers the
 * arrival) and then takes up to L longer; once that share passes 1%, p99
 * is the median plus a typical stall, whatever the transport.
 * shm_pingpong -W, matched to a transport's median, measures that bound
 * directly (bench.py). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench_clock.h"

#define STALL_NS 1000
#define MAX_STALLS (1 << 20)

struct spinner {
	int cpu;
	double secs;
	uint64_t *stalls; /* lengths, ns: the first MAX_STALLS */
	size_t n, kept;
	uint64_t lost_ns, spun_ns; /* spun_ns 0: the thread could not be pinned */
};

static void *spin(void *arg)
{
	struct spinner *s = arg;
	cpu_set_t one;

	CPU_ZERO(&one);
	CPU_SET(s->cpu, &one);
	if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one))
		return NULL;
	uint64_t start = now_ns(), end = start + (uint64_t)(s->secs * 1e9), prev = start;
	for (;;) {
		uint64_t t = now_ns();
		if (t - prev >= STALL_NS) {
			s->lost_ns += t - prev;
			s->n++;
			if (s->kept < MAX_STALLS)
				s->stalls[s->kept++] = t - prev;
		}
		prev = t;
		if (t >= end)
			break;
	}
	s->spun_ns = prev - start;
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	double secs = 1.0;
	int c;

	while ((c = getopt(argc, argv, "D:")) != -1) {
		if (c == 'D') {
			secs = atof(optarg);
		} else {
			fprintf(stderr, "usage: cpu_stalls [-D SECONDS]\n");
			return 2;
		}
	}
	cpu_set_t mask;
	if (sched_getaffinity(0, sizeof(mask), &mask)) {
		perror("sched_getaffinity");
		return 1;
	}
	int ncpu = CPU_COUNT(&mask), k = 0;
	struct spinner *sp = calloc((size_t)ncpu, sizeof(*sp));
	pthread_t *th = calloc((size_t)ncpu, sizeof(*th));
	if (!sp || !th)
		return 1;
	for (int cpu = 0; cpu < CPU_SETSIZE && k < ncpu; cpu++) {
		if (!CPU_ISSET(cpu, &mask))
			continue;
		sp[k] = (struct spinner){ .cpu = cpu, .secs = secs, .stalls = malloc(sizeof(uint64_t) * MAX_STALLS) };
		if (!sp[k].stalls || pthread_create(&th[k], NULL, spin, &sp[k])) {
			fprintf(stderr, "cpu_stalls: cannot start a spinner\n");
			return 1;
		}
		k++;
	}
	size_t total = 0, kept = 0;
	uint64_t lost = 0, spun = 0;
	int ran = 0;
	for (int i = 0; i < k; i++) {
		pthread_join(th[i], NULL);
		if (!sp[i].spun_ns)
			continue;
		ran++;
		total += sp[i].n;
		kept += sp[i].kept;
		lost += sp[i].lost_ns;
		spun += sp[i].spun_ns;
	}
	if (!spun) {
		fprintf(stderr, "cpu_stalls: no thread could be pinned to its CPU\n");
		return 1;
	}
	uint64_t *all = malloc(sizeof(uint64_t) * (kept ? kept : 1));
	if (!all)
		return 1;
	size_t at = 0;
	for (int i = 0; i < k; i++) {
		memcpy(all + at, sp[i].stalls, sizeof(uint64_t) * sp[i].kept);
		at += sp[i].kept;
	}
	qsort(all, kept, sizeof(*all), cmp_u64);
	double per_cpu_s = (double)spun / 1e9;
	printf("RESULT mode=stalls cpus=%d per_s=%.0f lost_pct=%.2f median_us=%.2f p99_us=%.2f max_us=%.1f\n", ran,
	       (double)total / per_cpu_s, 100.0 * (double)lost / (double)spun,
	       kept ? (double)all[kept / 2] / 1e3 : 0.0,
	       kept ? (double)all[(size_t)((double)kept * 0.99)] / 1e3 : 0.0,
	       kept ? (double)all[kept - 1] / 1e3 : 0.0);
	return 0;
}
