/* Clocks shared by the bench programs: wall time and this process's CPU. */
#ifndef UROCE_BENCH_CLOCK_H
#define UROCE_BENCH_CLOCK_H

#include <stdint.h>
#include <sys/resource.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* user + system CPU seconds of this process so far */
static inline double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

#endif
