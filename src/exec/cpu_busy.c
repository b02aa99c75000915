/* Per-CPU busy shares from /proc/stat's idle times (cpu_busy.h). */
#include "cpu_busy.h"
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One "cpuN user nice system idle iowait ..." line: false for any other
 * (the machine's total, "cpu  ...", has no number). */
static bool parse_cpu_line(const char *line, int *cpu, uint64_t *idle_ticks)
{
	if (strncmp(line, "cpu", 3) != 0 || !isdigit((unsigned char)line[3]))
		return false;
	unsigned long long user, nice, sys, idle, iowait;
	if (sscanf(line + 3, "%d %llu %llu %llu %llu %llu", cpu, &user, &nice, &sys, &idle, &iowait) != 6)
		return false;
	*idle_ticks = idle + iowait;
	return true;
}

/* Calls fn for each CPU line of /proc/stat; false if it could not be read.
 * The CPU lines come first, so a buffer that cuts the interrupt lines off
 * loses nothing. */
static bool read_stat(int fd, void (*fn)(void *, int, uint64_t), void *arg)
{
	char buf[4096];
	ssize_t len = pread(fd, buf, sizeof(buf) - 1, 0);
	if (len <= 0)
		return false;
	buf[len] = 0;
	for (char *line = buf; *line;) {
		int cpu;
		uint64_t idle;
		if (parse_cpu_line(line, &cpu, &idle))
			fn(arg, cpu, idle);
		char *nl = strchr(line, '\n');
		if (!nl)
			break;
		line = nl + 1;
	}
	return true;
}

static uint64_t ticks_to_us(const struct cpu_busy *cb, uint64_t ticks)
{
	return ticks * 1000000ull / cb->hz;
}

static void note_cpu(void *arg, int cpu, uint64_t idle)
{
	struct cpu_busy *cb = arg;
	if (cb->n < CPU_BUSY_MAX) {
		cb->cpu[cb->n] = cpu;
		cb->idle_us[cb->n] = ticks_to_us(cb, idle);
	}
	cb->n++;  /* counts past the limit: too many */
}

struct idle_now {
	const struct cpu_busy *cb;
	uint64_t *idle_us;
};

static void take_idle(void *arg, int cpu, uint64_t idle)
{
	struct idle_now *in = arg;
	for (int i = 0; i < in->cb->n; i++)
		if (in->cb->cpu[i] == cpu)
			in->idle_us[i] = ticks_to_us(in->cb, idle);
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void forget(struct cpu_busy *cb)
{
	for (int i = 0; i < CPU_BUSY_MAX; i++)
		cb->share[i] = -1;
}

bool cpu_busy_open(struct cpu_busy *cb)
{
	memset(cb, 0, sizeof(*cb));
	long hz = sysconf(_SC_CLK_TCK);
	cb->hz = hz > 0 ? (uint64_t)hz : 100;
	cb->stat_fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
	if (cb->stat_fd < 0)
		return false;
	forget(cb);
	/* the online CPUs: an offline one has no line */
	if (!read_stat(cb->stat_fd, note_cpu, cb) || cb->n < 2 || cb->n > CPU_BUSY_MAX) {
		cpu_busy_close(cb);
		return false;
	}
	return true;
}

void cpu_busy_close(struct cpu_busy *cb)
{
	if (cb->stat_fd >= 0)
		close(cb->stat_fd);
	cb->stat_fd = -1;
	cb->n = 0;
}

bool cpu_busy_sample(struct cpu_busy *cb, uint64_t now, int here)
{
	cb->calls = 0;
	if (cb->n == 0 || now - cb->at_ns < CPU_BUSY_WINDOW_NS)
		return false;
	/* A CPU gone offline since keeps its last idle time and reads as
	 * busy from then on: never chosen. */
	uint64_t idle[CPU_BUSY_MAX];
	memcpy(idle, cb->idle_us, sizeof(idle));
	struct idle_now in = { cb, idle };
	uint64_t then = cb->at_ns, self_then = cb->self_ns;
	/* the window moves on whatever the read gives, so that a failing
	 * read is not tried again at every sleep */
	cb->at_ns = now;
	cb->calls = 2;
	cb->self_ns = thread_cpu_ns();
	forget(cb);
	if (!read_stat(cb->stat_fd, take_idle, &in))
		return false;
	uint64_t prev[CPU_BUSY_MAX];
	memcpy(prev, cb->idle_us, sizeof(prev));
	memcpy(cb->idle_us, idle, sizeof(idle));
	/* A window many times the shortest (the engine slept through a quiet
	 * spell) says nothing of now: it only starts the next one. */
	if (then == 0 || now - then > 10 * CPU_BUSY_WINDOW_NS)
		return false;
	uint64_t window_us = (now - then) / 1000;
	uint64_t self_us = cb->self_ns > self_then ? (cb->self_ns - self_then) / 1000 : 0;
	for (int i = 0; i < cb->n; i++) {
		uint64_t idle_d = idle[i] > prev[i] ? idle[i] - prev[i] : 0;
		uint64_t busy = idle_d < window_us ? window_us - idle_d : 0;
		/* this thread's own time, all of it counted where it is now:
		 * it ran mostly there */
		if (cb->cpu[i] == here)
			busy = busy > self_us ? busy - self_us : 0;
		cb->share[i] = (double)busy / (double)window_us;
	}
	return true;
}

double cpu_busy_share(const struct cpu_busy *cb, int cpu)
{
	for (int i = 0; i < cb->n; i++)
		if (cb->cpu[i] == cpu)
			return cb->share[i];
	return -1;
}

int cpu_busy_least(const struct cpu_busy *cb, const cpu_set_t *allowed, int except, double *share)
{
	int best = -1;
	for (int i = 0; i < cb->n; i++)
		if (cb->cpu[i] != except && CPU_ISSET(cb->cpu[i], allowed) && cb->share[i] >= 0 &&
		    (best < 0 || cb->share[i] < *share)) {
			best = cb->cpu[i];
			*share = cb->share[i];
		}
	return best;
}
