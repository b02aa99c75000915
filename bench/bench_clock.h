/* Clocks shared by the bench programs: wall time and this process's CPU. */
#ifndef UROCE_BENCH_CLOCK_H
#define UROCE_BENCH_CLOCK_H

#include <stdint.h>
#include <sys/resource.h>
#include <time.h>
#include "../src/util/clock.h"   /* now_ns: the library's one clock */

/* user + system CPU seconds of this process so far */
static inline double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

#endif
