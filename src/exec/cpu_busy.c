/* Per-CPU busy shares from the kernel's idle time (cpu_busy.h). */
#include "cpu_busy.h"
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_STATES 10
/* cpuidle counts microseconds: a 10 ms window resolves 0.1%.  /proc/stat
 * counts clock ticks (USER_HZ, 100 a second): 100 ms resolves 10%. */
#define WINDOW_CPUIDLE_NS 10000000ull
#define WINDOW_STAT_NS 100000000ull

static int open_state(int cpu, int state)
{
	char path[96];
	snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cpuidle/state%d/time", cpu, state);
	return open(path, O_RDONLY | O_CLOEXEC);
}

static bool read_u64(int fd, uint64_t *v)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = 0;
	char *end;
	*v = strtoull(buf, &end, 10);
	return end != buf;
}

/* Idle microseconds of each CPU looked at, cumulative. */
static bool read_idle(struct cpu_busy *cb, uint64_t *idle_us)
{
	if (cb->fd) {
		for (int i = 0; i < cb->n; i++) {
			idle_us[i] = 0;
			for (int s = 0; s < cb->nfd[i]; s++) {
				uint64_t v;
				cb->reads++;
				if (!read_u64(cb->fd[i * MAX_STATES + s], &v))
					return false;
				idle_us[i] += v;
			}
		}
		return true;
	}
	char buf[8192];
	cb->reads++;
	ssize_t len = pread(cb->stat_fd, buf, sizeof(buf) - 1, 0);
	if (len <= 0)
		return false;
	buf[len] = 0;
	long tick = sysconf(_SC_CLK_TCK);
	if (tick <= 0)
		tick = 100;
	int found = 0;
	for (int i = 0; i < cb->n; i++)
		idle_us[i] = 0;
	for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		int cpu;
		unsigned long long user, nice, sys, idle, iowait;
		if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu", &cpu, &user, &nice, &sys, &idle, &iowait) != 6)
			continue;
		for (int i = 0; i < cb->n; i++)
			if (cb->cpu[i] == cpu) {
				idle_us[i] = (idle + iowait) * (1000000ull / (uint64_t)tick);
				found++;
			}
	}
	return found > 0;  /* an offline CPU has no line: it reads as never idle */
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool cpu_busy_open(struct cpu_busy *cb, bool cpuidle)
{
	memset(cb, 0, sizeof(*cb));
	cb->stat_fd = -1;
	long conf = sysconf(_SC_NPROCESSORS_CONF);
	if (conf < 2 || conf > CPU_BUSY_MAX)
		return false;
	cb->fd = malloc(sizeof(int) * (size_t)conf * MAX_STATES);
	/* cpuidle's counters where CPU 0 has them (then every online CPU
	 * does; an offline one is not looked at), else /proc/stat */
	int fd0 = cpuidle ? open_state(0, 0) : -1;
	if (fd0 >= 0 && cb->fd) {
		close(fd0);
		for (int c = 0; c < conf; c++) {
			int i = cb->n, k = 0;
			for (int s = 0; s < MAX_STATES; s++) {
				int fd = open_state(c, s);
				if (fd < 0)
					break;
				cb->fd[i * MAX_STATES + k++] = fd;
			}
			if (k) {
				cb->cpu[i] = c;
				cb->nfd[i] = k;
				cb->n++;
			}
		}
	} else {
		if (fd0 >= 0)
			close(fd0);
		free(cb->fd);
		cb->fd = NULL;
		cb->stat_fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
		if (cb->stat_fd < 0)
			return false;
		for (int c = 0; c < conf; c++)
			cb->cpu[cb->n++] = c;
	}
	cb->window_ns = cb->fd ? WINDOW_CPUIDLE_NS : WINDOW_STAT_NS;
	if (cb->n < 2 || !read_idle(cb, cb->idle_us)) {
		cpu_busy_close(cb);
		return false;
	}
	return true;
}

void cpu_busy_close(struct cpu_busy *cb)
{
	if (cb->fd) {
		for (int i = 0; i < cb->n; i++)
			for (int s = 0; s < cb->nfd[i]; s++)
				close(cb->fd[i * MAX_STATES + s]);
		free(cb->fd);
		cb->fd = NULL;
	}
	if (cb->stat_fd >= 0)
		close(cb->stat_fd);
	cb->stat_fd = -1;
	cb->n = 0;
}

bool cpu_busy_sample(struct cpu_busy *cb, uint64_t now, int here, const cpu_set_t *allowed,
		     double *here_busy, int *other, double *other_busy)
{
	cb->reads = 0;
	if (cb->n == 0 || now - cb->at_ns < cb->window_ns)
		return false;
	uint64_t idle[CPU_BUSY_MAX] = { 0 };
	cb->reads = 1;  /* and the clock below */
	if (!read_idle(cb, idle))
		return false;
	uint64_t self = thread_cpu_ns();
	uint64_t window_us = (now - cb->at_ns) / 1000, self_us = (self - cb->self_ns) / 1000;
	/* A window many times the shortest (the engine slept through a quiet
	 * spell) says nothing of now: it only starts the next one. */
	bool fresh = cb->at_ns != 0 && now - cb->at_ns <= 10 * cb->window_ns;
	uint64_t prev[CPU_BUSY_MAX];
	memcpy(prev, cb->idle_us, sizeof(prev));
	memcpy(cb->idle_us, idle, sizeof(idle));
	cb->at_ns = now;
	cb->self_ns = self;
	if (!fresh || window_us == 0)
		return false;
	bool seen_here = false;
	*other = -1;
	*other_busy = 1.0;
	for (int i = 0; i < cb->n; i++) {
		uint64_t idle_d = idle[i] > prev[i] ? idle[i] - prev[i] : 0;
		uint64_t busy = idle_d < window_us ? window_us - idle_d : 0;
		if (cb->cpu[i] == here) {
			/* this thread's own time, all of it counted here: it
			 * ran mostly where it is now */
			busy = busy > self_us ? busy - self_us : 0;
			*here_busy = (double)busy / (double)window_us;
			seen_here = true;
		} else if (CPU_ISSET(cb->cpu[i], allowed) &&
			   (*other < 0 || (double)busy / (double)window_us < *other_busy)) {
			*other_busy = (double)busy / (double)window_us;
			*other = cb->cpu[i];
		}
	}
	return seen_here && *other >= 0;
}
