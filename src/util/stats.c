/* The stats page (stats.h): published, read by `uroce stat`, swept when its
 * owner died. */
#include "stats.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../wire/ip.h"

/* The counter page of a process killed before it closed its device stays in
 * /dev/shm (timeouts in test harnesses leave hundreds); the next device to
 * open removes the pages whose PID no longer exists.  (A PID namespace that
 * shares this /dev/shm would see another namespace's live pages as stale:
 * `uroce stat` would lose them, the processes themselves would not notice.) */
/* The PID is alive: is it another process than the page's?  Yes if the
 * page is older than a few seconds (not one being set up right now) and the
 * process does not map it; no when that cannot be told. */
static bool pid_reused(long pid, const char *name, int dfd)
{
	struct stat st;
	char path[64], line[512];
	bool mapped = false;

	if (fstatat(dfd, name, &st, 0) < 0 || time(NULL) - st.st_mtime < 5)
		return false;
	snprintf(path, sizeof(path), "/proc/%ld/maps", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	while (!mapped && fgets(line, sizeof(line), f))
		mapped = strstr(line, name) != NULL;
	fclose(f);
	return !mapped;
}

static void stats_sweep_stale(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char *end;
		if (strncmp(e->d_name, "uroce.", 6))
			continue;
		long pid = strtol(e->d_name + 6, &end, 10);
		if (*end || pid <= 0 || pid > INT32_MAX || pid == (long)getpid())
			continue;
		struct stat st;
		/* a page somebody hard-linked is kept on purpose (tests/netrc) */
		if (fstatat(dirfd(d), e->d_name, &st, 0) < 0 || st.st_nlink > 1)
			continue;
		if ((kill((pid_t)pid, 0) == 0 || errno != ESRCH) && !pid_reused(pid, e->d_name, dirfd(d)))
			continue;
		unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
}

struct uroce_stats_page *stats_page_open(char path[64])
{
	struct uroce_stats_page *s;
	void *p = MAP_FAILED;

	stats_sweep_stale();
	snprintf(path, 64, "/dev/shm/uroce.%d", (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0 && ftruncate(fd, sizeof(*s)) == 0)
		p = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (fd >= 0)
		close(fd);
	if (p == MAP_FAILED) {
		/* counters still work in-process; `uroce stat` just won't see them */
		path[0] = 0;
		p = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
	}
	s = p;
	memset(s, 0, sizeof(*s));
	s->version = UROCE_STATS_VERSION;
	s->pid = (uint32_t)getpid();
	int cfd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (cfd >= 0) {
		ssize_t n = read(cfd, s->cmdline, sizeof(s->cmdline) - 1);
		for (ssize_t i = 0; i + 1 < n; i++)
			if (!s->cmdline[i])
				s->cmdline[i] = ' ';
		close(cfd);
	}
	return s;
}

void stats_page_finish(struct uroce_stats_page *s, const struct uroce_config *cfg)
{
	s->ngids = (uint32_t)cfg->ngids;
	s->active_mtu = 128u << cfg->active_mtu;
	memcpy(s->gids, cfg->gids, sizeof(s->gids));
	__atomic_store_n(&s->magic, UROCE_STATS_MAGIC, __ATOMIC_RELEASE);
}

void stats_page_close(struct uroce_stats_page *s, const char *path)
{
	if (!s)
		return;
	if (path[0])
		unlink(path);
	munmap(s, sizeof(*s));
}

void stats_page_print(const struct uroce_stats_page *s, const struct uroce_config *cfg)
{
	char a[64];

	if (!cfg->stats_at_exit || !s)
		return;
	fprintf(stderr, "uroce: pid %d gid %s counters:\n", (int)getpid(),
		cfg->ngids ? gid_format(cfg->gids[0], a, sizeof(a)) : "-");
	for (int i = 0; i < UC__COUNT; i++)
		if (s->counters[i])
			fprintf(stderr, "uroce:   %-20s %12llu  %s\n", uroce_counter_names[i],
				(unsigned long long)s->counters[i], uroce_counter_help[i]);
}
