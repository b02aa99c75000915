/*
 * shm_pingpong: the bound for a same-host ping-pong (bench/).  Two processes
 * (this one and a forked child) bounce an N-byte message through shared
 * memory, each busy-polling a sequence word: no system call, no protocol --
 * the least any same-host transport pays, including this machine's noise
 * (a preempted vCPU shows in the tail here as in any transport's).
 *
 *   shm_pingpong -s SIZE [-D SECONDS] [-w WARMUP] [-n MAX_ITERS] [-W NS]
 *
 * -W NS: each side also busy-works NS nanoseconds per hop before it answers,
 * to see what the machine's noise does to the tail of a ping-pong as slow
 * as a given transport's.
 *
 * Prints "RESULT mode=pingpong size=... iters=... lat_median_us=...
 * lat_p99_us=... lat_mean_us=... lat_min_us=... lat_max_us=..." (one-way =
 * round trip / 2), as tcp_pingpong does.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench_clock.h"

struct box {
	_Alignas(64) _Atomic uint64_t seq;   /* message i is in data when seq == i */
	_Alignas(64) uint8_t data[];
};

static void busy(uint64_t ns)
{
	if (!ns)
		return;
	uint64_t t = now_ns();
	while (now_ns() - t < ns)
		;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	size_t size = 2;
	double secs = 2.0;
	long warm = 1000, max = 5000000;
	uint64_t work = 0;
	int c;

	while ((c = getopt(argc, argv, "s:D:w:n:W:")) != -1) {
		switch (c) {
		case 's': size = strtoull(optarg, NULL, 0); break;
		case 'D': secs = atof(optarg); break;
		case 'w': warm = atol(optarg); break;
		case 'n': max = atol(optarg); break;
		case 'W': work = strtoull(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: shm_pingpong -s SIZE [-D SECONDS] [-w WARMUP] [-n MAX_ITERS] [-W NS]\n");
			return 2;
		}
	}
	size_t boxsz = (sizeof(struct box) + size + 4095) & ~(size_t)4095;
	uint8_t *m = mmap(NULL, 2 * boxsz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint64_t *rtt = malloc(sizeof(*rtt) * (size_t)max);
	uint8_t *msg = malloc(size ? size : 1);
	if (m == MAP_FAILED || !rtt || !msg) {
		perror("shm_pingpong");
		return 1;
	}
	struct box *ping = (struct box *)m, *pong = (struct box *)(m + boxsz);
	memset(msg, 'p', size);
	atomic_store(&ping->seq, 0);
	atomic_store(&pong->seq, 0);
	pid_t child = fork();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	if (child == 0) {
		/* echo: copy the message out and back, as a receiver and a sender would */
		uint8_t *in = malloc(size ? size : 1);
		for (uint64_t i = 1;; i++) {
			uint64_t s;
			while ((s = atomic_load_explicit(&ping->seq, memory_order_acquire)) < i)
				;
			if (s == UINT64_MAX)
				_exit(0);
			memcpy(in, ping->data, size);
			busy(work);
			memcpy(pong->data, in, size);
			atomic_store_explicit(&pong->seq, i, memory_order_release);
		}
	}
	long n = 0;
	double c0 = cpu_s();
	uint64_t t_end = 0;
	for (uint64_t i = 1; n < max; i++) {
		if ((long)i == warm + 1)
			t_end = now_ns() + (uint64_t)(secs * 1e9);
		uint64_t t0 = now_ns();
		busy(work);
		memcpy(ping->data, msg, size);
		atomic_store_explicit(&ping->seq, i, memory_order_release);
		while (atomic_load_explicit(&pong->seq, memory_order_acquire) < i)
			;
		memcpy(msg, pong->data, size);
		uint64_t t1 = now_ns();
		if ((long)i > warm) {
			rtt[n++] = t1 - t0;
			if (t1 >= t_end)
				break;
		}
	}
	atomic_store_explicit(&ping->seq, UINT64_MAX, memory_order_release);
	waitpid(child, NULL, 0);
	if (!n) {
		printf("RESULT mode=pingpong size=%zu iters=0\n", size);
		return 1;
	}
	double sum = 0;
	for (long i = 0; i < n; i++)
		sum += (double)rtt[i];
	qsort(rtt, (size_t)n, sizeof(*rtt), cmp_u64);
	printf("RESULT mode=pingpong size=%zu iters=%ld lost=0 lat_median_us=%.3f lat_p99_us=%.3f lat_mean_us=%.3f "
	       "lat_min_us=%.3f lat_max_us=%.3f cpu_s=%.3f\n",
	       size, n, rtt[n / 2] / 2000.0, rtt[(size_t)((double)n * 0.99)] / 2000.0, sum / (double)n / 2000.0,
	       rtt[0] / 2000.0, rtt[n - 1] / 2000.0, cpu_s() - c0);
	return 0;
}
