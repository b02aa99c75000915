/*
 * memcpy_bw: the memcpy bound for the uroce benchmark (bench/).
 *
 *   memcpy_bw [-s SIZE[,SIZE...]] [-t SECS] [--pool-mb MB]
 *
 * For every size, two runs of single-threaded memcpy:
 *   warm  the same source and destination buffers again and again (they stay
 *         in cache when they fit);
 *   cold  copies walk through a source pool and a destination pool that
 *         together exceed the last-level cache (default: 2 x L3, at least
 *         64 MiB, at most 1 GiB), each copy at a new 4 KiB-aligned slot, so
 *         the data comes from memory.
 * Copies are timed in batches; per-copy time = batch time / copies in the
 * batch.  Reported: bandwidth (GB = 1e9 bytes), median and p99 per-copy time,
 * and CPU seconds per GB (getrusage).  One "RESULT key=value ..." line per
 * size and kind.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "bench_clock.h"

/* A call through a volatile pointer cannot be elided or inlined away. */
static void *(*volatile memcpy_fn)(void *, const void *, size_t) = memcpy;

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static size_t l3_bytes(void)
{
	long v = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
	v = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
	if (v > 0)
		return (size_t)v;
	FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
	if (f) {
		char buf[64] = { 0 };
		if (fgets(buf, sizeof(buf), f)) {
			char *end;
			unsigned long n = strtoul(buf, &end, 10);
			if (*end == 'K')
				n <<= 10;
			else if (*end == 'M')
				n <<= 20;
			v = (long)n;
		}
		fclose(f);
	}
	return v > 0 ? (size_t)v : (size_t)32 << 20;
}

static void *alloc(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "memcpy_bw: mmap %zu: %s\n", len, strerror(errno));
		exit(1);
	}
	memset(p, 0x5a, len); /* fault every page in before timing */
	return p;
}

struct sample {
	double *per_copy_ns;
	size_t n, cap;
};

static void push(struct sample *s, double v)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 1024;
		s->per_copy_ns = realloc(s->per_copy_ns, s->cap * sizeof(double));
		if (!s->per_copy_ns) {
			perror("realloc");
			exit(1);
		}
	}
	s->per_copy_ns[s->n++] = v;
}

/* Copy `size` bytes from src+i*stride to dst+i*stride, i cycling over
 * `slots`, for about `secs`.  slots == 1 is the warm case. */
static void run(const char *kind, size_t size, char *src, char *dst, size_t slots, size_t stride, double secs)
{
	/* batch: enough copies for ~20 us; calibrated 5 times over 100 us,
	 * keeping the fastest (a descheduled calibration would say 1). */
	size_t batch = 1;
	double best = 0;
	for (int c = 0, k = 0; c < 5; c++) {
		uint64_t t0 = now_ns(), t1;
		size_t copies = 0;
		while ((t1 = now_ns()) - t0 < 100000) {
			memcpy_fn(dst + ((size_t)k % slots) * stride, src + ((size_t)k % slots) * stride, size);
			k++;
			copies++;
		}
		double per = (double)(t1 - t0) / (double)copies;
		if (c == 0 || per < best)
			best = per;
	}
	batch = (size_t)(20000.0 / best);
	if (batch < 1)
		batch = 1;
	struct sample s = { 0 };
	size_t i = 0;
	uint64_t copies = 0;
	double c0 = cpu_s();
	uint64_t start = now_ns(), end = start + (uint64_t)(secs * 1e9);
	uint64_t t = start;
	while (t < end) {
		uint64_t b0 = t;
		for (size_t k = 0; k < batch; k++) {
			memcpy_fn(dst + i * stride, src + i * stride, size);
			if (++i == slots)
				i = 0;
		}
		t = now_ns();
		copies += batch;
		push(&s, (double)(t - b0) / (double)batch);
	}
	double cpu = cpu_s() - c0;
	double wall = (double)(t - start) * 1e-9;
	qsort(s.per_copy_ns, s.n, sizeof(double), cmp_d);
	double med = s.n & 1 ? s.per_copy_ns[s.n / 2] : (s.per_copy_ns[s.n / 2 - 1] + s.per_copy_ns[s.n / 2]) / 2;
	size_t k99 = (size_t)((double)s.n * 0.99 + 0.999999);
	if (k99 > 0)
		k99--;
	if (k99 >= s.n)
		k99 = s.n - 1;
	double gb = (double)copies * (double)size / 1e9;
	printf("RESULT kind=%s size=%zu copies=%llu seconds=%.4f bw_GBps=%.4f copy_ns_median=%.2f copy_ns_p99=%.2f "
	       "cpu_s=%.4f cpu_s_per_GB=%.5f batch=%zu slots=%zu\n",
	       kind, size, (unsigned long long)copies, wall, gb / wall, med, s.per_copy_ns[k99], cpu,
	       gb > 0 ? cpu / gb : 0, batch, slots);
	fflush(stdout);
	free(s.per_copy_ns);
}

int main(int argc, char **argv)
{
	const char *sizes = "2,64,4096,65536,1048576";
	double secs = 0.3;
	size_t pool = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-s") && i + 1 < argc)
			sizes = argv[++i];
		else if (!strcmp(argv[i], "-t") && i + 1 < argc)
			secs = atof(argv[++i]);
		else if (!strcmp(argv[i], "--pool-mb") && i + 1 < argc)
			pool = strtoull(argv[++i], NULL, 0) << 20;
		else {
			fprintf(stderr, "usage: memcpy_bw [-s SIZE[,SIZE...]] [-t SECS] [--pool-mb MB]\n");
			return 2;
		}
	}
	if (secs <= 0)
		secs = 0.3;
	size_t l3 = l3_bytes();
	if (!pool) {
		pool = 2 * l3;
		if (pool < ((size_t)64 << 20))
			pool = (size_t)64 << 20;
		if (pool > ((size_t)1 << 30))
			pool = (size_t)1 << 30;
	}
	size_t half = pool / 2; /* source pool + destination pool = pool */
	printf("INFO l3_bytes=%zu pool_bytes=%zu secs=%.3f\n", l3, pool, secs);
	fflush(stdout);

	char *copy = strdup(sizes);
	size_t maxsize = 0;
	for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
		size_t s = strtoull(tok, NULL, 0);
		if (s > maxsize)
			maxsize = s;
	}
	free(copy);
	if (!maxsize)
		return 2;
	char *wsrc = alloc(maxsize + 4096), *wdst = alloc(maxsize + 4096);
	char *csrc = alloc(half), *cdst = alloc(half);

	copy = strdup(sizes);
	for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
		size_t size = strtoull(tok, NULL, 0);
		if (!size)
			continue;
		run("warm", size, wsrc, wdst, 1, 0, secs);
		size_t stride = (size + 4095) & ~(size_t)4095;
		size_t slots = half / stride;
		if (slots < 2) {
			printf("RESULT kind=cold size=%zu error=pool_too_small\n", size);
			continue;
		}
		run("cold", size, csrc, cdst, slots, stride, secs);
	}
	free(copy);
	return 0;
}
