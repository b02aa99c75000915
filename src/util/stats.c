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
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
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
 * process does not map it; no when that cannot be told.  The mapping is
 * found by its inode, whatever name /proc/PID/maps shows for it (a page
 * made with O_TMPFILE may show as "/dev/shm/#<inode> (deleted)"). */
static bool pid_reused(long pid, const char *name, int dfd)
{
	struct stat st;
	char path[64], line[512];
	bool mapped = false;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || time(NULL) - st.st_mtime < 5)
		return false;
	snprintf(path, sizeof(path), "/proc/%ld/maps", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	while (!mapped && fgets(line, sizeof(line), f)) {
		unsigned maj, min;
		unsigned long long ino;
		mapped = sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) == 3 && ino == st.st_ino &&
			 makedev(maj, min) == st.st_dev;
	}
	fclose(f);
	return !mapped;
}

/* A page name: uroce.<pid>, or uroce.<pid>.<hex> (page_publish's fallback);
 * the PID, or 0. */
static long page_name_pid(const char *name)
{
	char *end;

	if (strncmp(name, "uroce.", 6))
		return 0;
	long pid = strtol(name + 6, &end, 10);
	if (*end == '.' && end[1] && strspn(end + 1, "0123456789abcdef") == strlen(end + 1))
		end += strlen(end);
	return *end || pid <= 0 || pid > INT32_MAX ? 0 : pid;
}

static void stats_sweep_stale(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		long pid = page_name_pid(e->d_name);
		if (!pid || pid == (long)getpid())
			continue;
		struct stat st;
		/* only our own pages: a name another user made (or a symlink)
		 * is not ours to remove.  A page somebody hard-linked is kept
		 * on purpose (tests/netrc) */
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
		    st.st_uid != geteuid() || st.st_nlink > 1)
			continue;
		if ((kill((pid_t)pid, 0) == 0 || errno != ESRCH) && !pid_reused(pid, e->d_name, dirfd(d)))
			continue;
		unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
}

static int link_fd(int fd, const char *path)
{
	char fdpath[32];

	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, fdpath, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
}

/* Give the page (an unnamed file, already sized and mapped) its name.
 * linkat never follows a symlink at the new name and fails on any name that
 * exists, so a name somebody made in advance -- a symlink to a file of
 * ours, or a file of theirs to truncate under us (issue 13) -- is never
 * opened.  A stale page of our own at our PID's name (a killed process of
 * an earlier PID lap) is replaced; any other name makes us publish at a
 * random one, uroce.<pid>.<hex>, which `uroce stat` finds as well. */
static void page_publish(int fd, char path[64])
{
	struct stat st;

	snprintf(path, 64, "/dev/shm/uroce.%d", (int)getpid());
	if (link_fd(fd, path) == 0)
		return;
	if (errno == EEXIST && lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	    st.st_nlink == 1 && unlink(path) == 0 && link_fd(fd, path) == 0)
		return;
	for (int i = 0; i < 4 && (i == 0 || errno == EEXIST); i++) {
		uint64_t r = 0;
		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			break;
		snprintf(path, 64, "/dev/shm/uroce.%d.%016llx", (int)getpid(), (unsigned long long)r);
		if (link_fd(fd, path) == 0)
			return;
	}
	path[0] = 0;
}

struct uroce_stats_page *stats_page_open(char path[64], unsigned mode)
{
	struct uroce_stats_page *s;
	void *p = MAP_FAILED;

	stats_sweep_stale();
	path[0] = 0;
	/* made unnamed (mode 0600 whatever the umask, then the configured
	 * one, never writable by others), named only once it is sized */
	int fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0 && fchmod(fd, mode & 0644) == 0 && ftruncate(fd, sizeof(*s)) == 0) {
		page_publish(fd, path);
		/* mapped through its name, so that /proc/PID/maps shows it: the
		 * sweeps of earlier uroce versions (on the same host) look for
		 * the name there, and would take the page for a reused PID's */
		int nfd = path[0] ? open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) : -1;
		struct stat a, b;
		if (nfd >= 0 && fstat(nfd, &a) == 0 && fstat(fd, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
			close(fd);
			fd = nfd;
		} else if (nfd >= 0) {
			close(nfd);
		}
		p = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	}
	if (fd >= 0)
		close(fd);
	if (p == MAP_FAILED) {
		/* counters still work in-process; `uroce stat` just won't see them */
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
