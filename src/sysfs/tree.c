/* The view's files: what Linux 6.1's ib_core (drivers/infiniband/core/
 * sysfs.c), uverbs and rxe show for a RoCE device, with uroce0's facts --
 * the ones its verbs answer (api/query.c, api/verbs.c) -- made as real
 * files, so that every way a program reads a file (read, fread, mmap,
 * getline, readdir) works on them unchanged.
 *
 * Each process has its own tree, <registry dir>/sysfs.<pid>.<hash>.<nonce>:
 * its GIDs are its own (one automatic address per process).  The hash
 * names the content, so facts that change (the device opens and gets its
 * automatic address) make a new tree; the one before stays a generation
 * more.  A tree's "owner" file stays locked (flock) while its process
 * lives: whoever makes a tree removes the trees whose lock it can take,
 * the leftovers of killed processes -- by lock, not by PID, which another
 * PID namespace may reuse. */
#include "sysfs.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../api/ops.h"
#include "../exec/exec.h"
#include "../net/shm.h"
#include "../util/config.h"
#include "../util/limits.h"
#include "../wire/ip.h"

#define DEV "sys/class/infiniband/uroce0"
#define PORT DEV "/ports/1"

/* The view's entries in the order they are made: kind ('d' directory,
 * 'f' file, 'l' symlink), path relative to the root, content or target. */
struct tree {
	char *buf;
	size_t len, cap;
	bool failed;
};

static void put(struct tree *t, char kind, const char *path, const char *content)
{
	size_t need = 1 + strlen(path) + 1 + strlen(content) + 1;
	if (t->failed)
		return;
	if (t->len + need > t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16384;
		while (cap < t->len + need)
			cap *= 2;
		char *b = realloc(t->buf, cap);
		if (!b) {
			t->failed = true;
			return;
		}
		t->buf = b;
		t->cap = cap;
	}
	t->buf[t->len++] = kind;
	t->len += (size_t)sprintf(t->buf + t->len, "%s", path) + 1;
	t->len += (size_t)sprintf(t->buf + t->len, "%s", content) + 1;
}

static void dir(struct tree *t, const char *path)
{
	put(t, 'd', path, "");
}

static void link_to(struct tree *t, const char *path, const char *target)
{
	put(t, 'l', path, target);
}

/* A file of the view: one line, as sysfs shows an attribute. */
static void file(struct tree *t, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void file(struct tree *t, const char *path, const char *fmt, ...)
{
	char content[256];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(content, sizeof(content) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if (n > (int)sizeof(content) - 2)
		n = (int)sizeof(content) - 2;
	content[n++] = '\n';
	content[n] = '\0';
	put(t, 'f', path, content);
}

/* ib_core's GUIDs: four groups of four hex digits */
static void guid_str(__be64 g, char *out)
{
	uint64_t v = be64toh(g);
	sprintf(out, "%04x:%04x:%04x:%04x", (unsigned)(v >> 48) & 0xffff, (unsigned)(v >> 32) & 0xffff,
		(unsigned)(v >> 16) & 0xffff, (unsigned)v & 0xffff);
}

/* the kernel's %pI6: eight groups of four hex digits, nothing shortened */
static void gid_str(const uint8_t g[16], char *out)
{
	for (int i = 0; i < 8; i++)
		out += sprintf(out, "%s%02x%02x", i ? ":" : "", g[2 * i], g[2 * i + 1]);
}

/* The facts: the open device's configuration (its automatic address
 * filled in), else the one it would open with -- without UROCE_ADDR, no
 * address yet, so a GID table of empty slots and the loopback interface. */
static void build(struct tree *t)
{
	static const uint8_t zero[16];
	struct uroce_config cfg;
	char s[64], p[96], hostname[65] = "";

	if (!uroce_dev_config(&cfg) && uroce_config_load(&cfg) < 0)
		cfg.ngids = 0;
	gethostname(hostname, sizeof(hostname) - 1);

	dir(t, "sys");
	dir(t, "sys/class");
	dir(t, "sys/class/infiniband");
	dir(t, DEV);
	file(t, DEV "/node_type", "1: CA");
	guid_str(uroce_node_guid(), s);
	file(t, DEV "/node_guid", "%s", s);
	file(t, DEV "/sys_image_guid", "%s", s);
	file(t, DEV "/node_desc", "%.57s uroce0", hostname);
	file(t, DEV "/fw_ver", "uroce 0.1");   /* as ibv_query_device's fw_ver */
	file(t, DEV "/hw_rev", "1");
	file(t, DEV "/hca_type", "uroce");
	file(t, DEV "/board_id", "uroce");
	/* the parent device, whose net/ lists the interfaces that hold the
	 * device's addresses: rdma-core's tests take an interface's first
	 * address (`ip addr show`) for the device's.  An automatic address
	 * (127.64/10) is reached through lo but is not one lo lists, so that
	 * would be 127.0.0.1, an address no uroce device has: without
	 * UROCE_ADDR, no net/ (the tests then skip, "no IP", as before there
	 * was a view: an empty one they would take for an interface) */
	dir(t, DEV "/device");
	file(t, DEV "/device/numa_node", "-1");   /* no NUMA node: UCX reads it */
	if (cfg.addr_from_env)
		dir(t, DEV "/device/net");
	char ndevs[UROCE_MAX_GIDS][IFNAMSIZ];
	for (int i = 0; i < cfg.ngids; i++)
		if (!config_netdev_of(cfg.gids[i], ndevs[i]))
			snprintf(ndevs[i], IFNAMSIZ, "lo");
	for (int i = 0; cfg.addr_from_env && i < cfg.ngids; i++) {
		bool listed = false;
		for (int j = 0; j < i; j++)
			listed = listed || !strcmp(ndevs[j], ndevs[i]);
		if (listed)
			continue;
		char target[48];
		snprintf(p, sizeof(p), DEV "/device/net/%.15s", ndevs[i]);
		snprintf(target, sizeof(target), "/sys/class/net/%.15s", ndevs[i]);
		link_to(t, p, target);
	}

	dir(t, DEV "/ports");
	dir(t, PORT);
	/* as uroce_query_port answers: ACTIVE, LinkUp, 1X EDR, Ethernet */
	file(t, PORT "/state", "4: ACTIVE");
	file(t, PORT "/phys_state", "5: LinkUp");
	file(t, PORT "/rate", "25 Gb/sec (1X EDR)");
	file(t, PORT "/link_layer", "Ethernet");
	file(t, PORT "/lid", "0x0");
	file(t, PORT "/sm_lid", "0x0");
	file(t, PORT "/lid_mask_count", "0");
	file(t, PORT "/sm_sl", "0");
	file(t, PORT "/cap_mask", "0x00000000");
	dir(t, PORT "/pkeys");
	file(t, PORT "/pkeys/0", "0xffff");
	/* every slot of the table, an empty one as the zero GID (ib_core's
	 * show_port_gid); types and ndevs only for the filled ones (the
	 * kernel's read of an empty one fails) */
	dir(t, PORT "/gids");
	dir(t, PORT "/gid_attrs");
	dir(t, PORT "/gid_attrs/types");
	dir(t, PORT "/gid_attrs/ndevs");
	for (int i = 0; i < UROCE_GID_TBL_LEN; i++) {
		gid_str(i < cfg.ngids ? cfg.gids[i] : zero, s);
		snprintf(p, sizeof(p), PORT "/gids/%d", i);
		file(t, p, "%s", s);
	}
	for (int i = 0; i < cfg.ngids; i++) {
		snprintf(p, sizeof(p), PORT "/gid_attrs/types/%d", i);
		file(t, p, "RoCE v2");
		snprintf(p, sizeof(p), PORT "/gid_attrs/ndevs/%d", i);
		file(t, p, "%s", ndevs[i]);
	}

	/* uverbs: the character device's class entry, and the device itself,
	 * which UCX requires to be a read-write character device before it
	 * opens the verbs device (uct_ib_device_is_accessible); nothing opens
	 * it but the kernel's libibverbs, which uroce stands in for */
	dir(t, "sys/class/infiniband_verbs");
	file(t, "sys/class/infiniband_verbs/abi_version", "6");
	dir(t, "sys/class/infiniband_verbs/uverbs0");
	file(t, "sys/class/infiniband_verbs/uverbs0/ibdev", "uroce0");
	file(t, "sys/class/infiniband_verbs/uverbs0/abi_version", "1");
	/* the numbers of the character device found there (/dev/null) */
	file(t, "sys/class/infiniband_verbs/uverbs0/dev", "1:3");
	dir(t, "dev");
	dir(t, "dev/infiniband");
	link_to(t, "dev/infiniband/uverbs0", "/dev/null");
	link_to(t, "dev/infiniband/rdma_cm", "/dev/null");
}

static uint64_t fnv1a(const char *b, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)b[i]) * 0x100000001b3ull;
	return h;
}

/* Removes the tree `name` under dfd, depth first; errors are left. */
static void remove_tree(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!d) {
		if (fd >= 0)
			close(fd);
		unlinkat(dfd, name, 0);
		return;
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (e->d_type == DT_DIR)
			remove_tree(fd, e->d_name);
		else
			unlinkat(fd, e->d_name, 0);
	}
	closedir(d);
	unlinkat(dfd, name, AT_REMOVEDIR);
}

/* Makes the entries under the new directory `name`; false on a failure. */
static bool make_tree(int dfd, const char *name, const struct tree *t)
{
	int root = -1;
	bool ok = mkdirat(dfd, name, 0700) == 0 &&
		  (root = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0;

	for (size_t off = 0; ok && off < t->len;) {
		char kind = t->buf[off++];
		const char *path = t->buf + off;
		off += strlen(path) + 1;
		const char *content = t->buf + off;
		off += strlen(content) + 1;
		if (kind == 'd') {
			ok = mkdirat(root, path, 0755) == 0;
		} else if (kind == 'l') {
			ok = symlinkat(content, root, path) == 0;
		} else {
			int fd = openat(root, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
			size_t n = strlen(content);
			ok = fd >= 0 && write(fd, content, n) == (ssize_t)n;
			if (fd >= 0)
				close(fd);
		}
	}
	if (root >= 0)
		close(root);
	return ok;
}

/* A tree of this process's: its name under the registry directory, and
 * its "owner" file, open and locked, with what that file is (a program
 * that closes every fd, as daemons do, drops the lock, and its number may
 * be another file's then: never trusted, never closed, unless it is
 * still this file). */
struct view_tree {
	char name[64];
	int owner_fd;
	dev_t dev;
	ino_t ino;
};

static pthread_mutex_t view_lock = PTHREAD_MUTEX_INITIALIZER;
/* view_lock: */
static struct view_tree view_cur = { .owner_fd = -1 }, view_prev = { .owner_fd = -1 };
static pid_t view_pid;          /* made by this process (a forked child makes its own) */
static uint64_t view_hash;      /* the content of view_cur */
static unsigned view_gen;       /* the device generation it was built at */

/* A child forked while another thread held view_lock must not wait for a
 * thread it does not have. */
static void view_lock_reset_in_child(void)
{
	pthread_mutex_init(&view_lock, NULL);
}

__attribute__((constructor)) static void view_atfork(void)
{
	pthread_atfork(NULL, NULL, view_lock_reset_in_child);
}

static bool tree_held(const struct view_tree *v)
{
	struct stat st;
	return v->owner_fd >= 0 && fstat(v->owner_fd, &st) == 0 && st.st_dev == v->dev && st.st_ino == v->ino &&
	       st.st_nlink > 0;
}

/* Removes a tree of this process's, and lets its lock go. */
static void tree_drop(int dfd, struct view_tree *v)
{
	if (v->owner_fd >= 0 && tree_held(v)) {
		remove_tree(dfd, v->name);
		close(v->owner_fd);
	}
	v->owner_fd = -1;
	v->name[0] = '\0';
}

/* Removes every sysfs.* tree under dfd whose owner lock can be taken: its
 * process is gone.  A live one's lock is held, ours included (flock locks
 * are per open file, so our own new open of it conflicts too).  A tree
 * being made is named otherwise (.new.*) until its owner is locked. */
static void sweep(int dfd)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *e;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((e = readdir(d))) {
		char owner[300];
		if (strncmp(e->d_name, "sysfs.", 6))
			continue;
		snprintf(owner, sizeof(owner), "%s/owner", e->d_name);
		int ofd = openat(dfd, owner, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (ofd < 0)
			continue;
		if (flock(ofd, LOCK_EX | LOCK_NB) == 0)
			remove_tree(dfd, e->d_name);
		close(ofd);
	}
	closedir(d);
}

/* Makes the tree `t` as this process's newest: built under a name the
 * sweep passes over, its owner file created and locked, then renamed into
 * place -- so no other process ever sees it unlocked. */
static bool tree_make(int dfd, const struct tree *t, uint64_t h, struct view_tree *v)
{
	char tmp[64], owner[96];
	struct timespec ts;
	struct stat st;

	/* the PID and a nonce: a process of another PID namespace may have
	 * our PID, and the same content */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	unsigned long nonce = (unsigned long)(ts.tv_nsec ^ (ts.tv_sec << 20)) & 0xffffffffUL;
	snprintf(tmp, sizeof(tmp), ".new.%d.%08lx", (int)getpid(), nonce);
	snprintf(v->name, sizeof(v->name), "sysfs.%d.%016llx.%08lx", (int)getpid(), (unsigned long long)h, nonce);
	snprintf(owner, sizeof(owner), "%s/owner", tmp);
	v->owner_fd = -1;
	if (make_tree(dfd, tmp, t) &&
	    (v->owner_fd = openat(dfd, owner, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400)) >= 0 &&
	    flock(v->owner_fd, LOCK_EX | LOCK_NB) == 0 && fstat(v->owner_fd, &st) == 0 &&
	    renameat(dfd, tmp, dfd, v->name) == 0) {
		v->dev = st.st_dev;
		v->ino = st.st_ino;
		return true;
	}
	if (v->owner_fd >= 0)
		close(v->owner_fd);
	v->owner_fd = -1;
	remove_tree(dfd, tmp);
	return false;
}

bool sysfs_view_root(char *root, size_t n)
{
	const char *base = shm_registry_path();
	int dfd = shm_registry_dir();
	unsigned gen = uroce_dev_generation();
	bool ok = false;

	if (!base || dfd < 0) {
		errno = EACCES;
		return false;
	}
	pthread_mutex_lock(&view_lock);
	if (view_pid == getpid() && view_gen == gen && tree_held(&view_cur)) {
		ok = true;   /* the device as it was when the tree was made */
		goto out;
	}
	struct tree t = { 0 };
	build(&t);
	if (t.failed) {
		free(t.buf);
		errno = ENOMEM;
		goto out;
	}
	uint64_t h = fnv1a(t.buf, t.len);
	if (view_pid == getpid() && view_hash == h && tree_held(&view_cur)) {
		ok = true;
	} else {
		struct view_tree v;
		if (tree_make(dfd, &t, h, &v)) {
			if (view_pid == getpid()) {
				/* the tree before stays one generation more: a thread
				 * may be opening a path it got from it */
				tree_drop(dfd, &view_prev);
				view_prev = view_cur;
			} else {
				/* a forked child: the trees it knows are its parent's */
				view_prev.owner_fd = -1;
			}
			view_cur = v;
			view_hash = h;
			view_pid = getpid();
			sweep(dfd);
			ok = true;
		} else {
			errno = EACCES;
		}
	}
	free(t.buf);
	if (ok)
		view_gen = gen;
out:
	if (ok)
		snprintf(root, n, "%s/%s", base, view_cur.name);
	pthread_mutex_unlock(&view_lock);
	return ok;
}

/* The process's trees go with it: only the process that made them removes
 * them (a forked child exits with its parent's trees still in use). */
__attribute__((destructor)) static void view_remove_at_exit(void)
{
	pthread_mutex_lock(&view_lock);
	if (view_pid == getpid()) {
		int dfd = shm_registry_dir();
		if (dfd >= 0) {
			tree_drop(dfd, &view_prev);
			tree_drop(dfd, &view_cur);
		}
		view_pid = 0;
	}
	pthread_mutex_unlock(&view_lock);
}
