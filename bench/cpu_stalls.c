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
 * stall of length L in about per_s x 2H of its iterations and then takes
 * up to L longer; once that share passes 1%, p99 is the median plus a
 * typical stall, whatever the transport.  shm_pingpong -W, matched to a
 * transport's median, measures that bound directly (bench.py). */
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
	uint64_t *stalls; /* lengths, ns */
	size_t n;
	uint64_t lost_ns, spun_ns;
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
			if (s->n < MAX_STALLS)
				s->stalls[s->n++] = t - prev;
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
	size_t total = 0;
	uint64_t lost = 0, spun = 0;
	for (int i = 0; i < k; i++) {
		pthread_join(th[i], NULL);
		total += sp[i].n;
		lost += sp[i].lost_ns;
		spun += sp[i].spun_ns;
	}
	if (!spun) {
		printf("RESULT mode=stalls cpus=%d per_s=0\n", k);
		return 1;
	}
	uint64_t *all = malloc(sizeof(uint64_t) * (total ? total : 1));
	if (!all)
		return 1;
	size_t at = 0;
	for (int i = 0; i < k; i++) {
		memcpy(all + at, sp[i].stalls, sizeof(uint64_t) * sp[i].n);
		at += sp[i].n;
	}
	qsort(all, total, sizeof(*all), cmp_u64);
	double per_cpu_s = (double)spun / 1e9;
	printf("RESULT mode=stalls cpus=%d per_s=%.0f lost_pct=%.2f median_us=%.2f p99_us=%.2f max_us=%.1f\n", k,
	       (double)total / per_cpu_s, 100.0 * (double)lost / (double)spun,
	       total ? (double)all[total / 2] / 1e3 : 0.0,
	       total ? (double)all[(size_t)((double)total * 0.99)] / 1e3 : 0.0,
	       total ? (double)all[total - 1] / 1e3 : 0.0);
	return 0;
}
