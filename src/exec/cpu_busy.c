/* Per-CPU busy shares from /proc/stat's idle times (cpu_busy.h). */
#include "cpu_busy.h"
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "../util/clock.h"

/* Reads the "cpuN user nice system idle iowait ..." lines of /proc/stat
 * (the machine's total, "cpu  ...", has no number; an offline CPU has no
 * line) into cpu[] and idle_us[], at most CPU_BUSY_MAX of them.  Returns
 * how many lines there were (more than CPU_BUSY_MAX: too many to look
 * at), -1 if it could not be read.  The CPU lines come first, so a buffer
 * that cuts the interrupt lines off loses nothing. */
static int read_stat(const struct cpu_busy *cb, int cpu[], uint64_t idle_us[])
{
	char buf[4096];
	ssize_t len = pread(cb->stat_fd, buf, sizeof(buf) - 1, 0);
	if (len <= 0)
		return -1;
	buf[len] = 0;
	int n = 0;
	for (char *line = buf; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		int c;
		unsigned long long user, nice, sys, idle, iowait;
		if (strncmp(line, "cpu", 3) != 0 || !isdigit((unsigned char)line[3]) ||
		    sscanf(line + 3, "%d %llu %llu %llu %llu %llu", &c, &user, &nice, &sys, &idle, &iowait) != 6)
			continue;
		if (n < CPU_BUSY_MAX) {
			cpu[n] = c;
			idle_us[n] = (idle + iowait) * 1000000ull / cb->hz;
		}
		n++;
	}
	return n;
}

bool cpu_busy_open(struct cpu_busy *cb)
{
	memset(cb, 0, sizeof(*cb));
	long hz = sysconf(_SC_CLK_TCK);
	cb->hz = hz > 0 ? (uint64_t)hz : 100;
	for (int i = 0; i < CPU_BUSY_MAX; i++)
		cb->share[i] = -1;
	cb->stat_fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
	if (cb->stat_fd < 0)
		return false;
	/* the online CPUs (the first sample starts the first window) */
	cb->n = read_stat(cb, cb->cpu, cb->idle_us);
	if (cb->n < 2 || cb->n > CPU_BUSY_MAX) {
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
	if (cb->n == 0 || now - cb->at_ns < CPU_BUSY_WINDOW_NS)
		return false;
	uint64_t then = cb->at_ns, self_then = cb->self_ns;
	/* the window moves on whatever the read gives, so that a failing
	 * read is not tried again at every sleep */
	cb->at_ns = now;
	cb->self_ns = thread_cpu_ns();
	for (int i = 0; i < cb->n; i++)
		cb->share[i] = -1;
	int cpu[CPU_BUSY_MAX];
	uint64_t idle[CPU_BUSY_MAX];
	int m = read_stat(cb, cpu, idle);
	/* A window many times the shortest (the engine slept through a quiet
	 * spell) says nothing of now: it only starts the next one. */
	bool fresh = then != 0 && now - then <= 10 * CPU_BUSY_WINDOW_NS;
	uint64_t window_us = (now - then) / 1000;
	uint64_t self_us = cb->self_ns > self_then ? (cb->self_ns - self_then) / 1000 : 0;
	for (int i = 0; i < cb->n; i++)
		for (int j = 0; j < m && j < CPU_BUSY_MAX; j++) {
			if (cpu[j] != cb->cpu[i])
				continue;
			/* a CPU gone offline has no line: no share, never chosen */
			uint64_t idle_d = idle[j] > cb->idle_us[i] ? idle[j] - cb->idle_us[i] : 0;
			cb->idle_us[i] = idle[j];
			if (!fresh || window_us == 0)
				break;
			uint64_t busy = idle_d < window_us ? window_us - idle_d : 0;
			/* this thread's own time, all of it counted where it
			 * is now: it ran mostly there */
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
