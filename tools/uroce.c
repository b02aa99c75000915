/* uroce: the launcher.
 *   uroce run [--] CMD ARGS...   run CMD with liburoce.so preloaded
 *   uroce info                   the device, its addresses, the configuration,
 *                                and every running uroce process
 *   uroce info --settings-markdown   README's configuration table, from
 *                                util/config_table.h
 *   uroce stat [-a] [PID]        counters of running uroce processes */
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "util/config_table.h"
#include "util/stats.h"

static const char *const counter_names[] = {
#define X(n, d) #n,
	UROCE_COUNTERS(X)
#undef X
};
static const char *const counter_help[] = {
#define X(n, d) d,
	UROCE_COUNTERS(X)
#undef X
};

static const struct setting {
	const char *name, *shown, *help;
} settings[] = {
#define X(name, field, kind, a, b, def, shown, help) { #name, shown, help },
	UROCE_CONFIG_TABLE(X)
#undef X
};
#define NSETTINGS (sizeof(settings) / sizeof(settings[0]))

static void usage(FILE *f)
{
	fprintf(f,
		"usage: uroce run [--] PROGRAM [ARGS...]   run PROGRAM on the uroce0 RDMA device\n"
		"       uroce info                       show the device, its addresses and settings\n"
		"       uroce info --settings-markdown   the UROCE_* settings as README's table\n"
		"       uroce stat [-a] [PID]            show counters of running uroce processes\n"
		"\n"
		"environment: UROCE_* settings, listed with their values by `uroce info`\n");
}

static int find_library(char *out, size_t n)
{
	const char *e = getenv("UROCE_LIB");
	char self[PATH_MAX];
	ssize_t k;

	if (e && *e) {
		snprintf(out, n, "%s", e);
		return access(out, R_OK);
	}
	k = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (k < 0)
		return -1;
	self[k] = 0;
	const char *dir = dirname(self);
	const char *cand[] = { "%s/../lib/liburoce.so", "%s/liburoce.so", "%s/../lib/uroce/liburoce.so" };
	for (size_t i = 0; i < sizeof(cand) / sizeof(cand[0]); i++) {
		snprintf(out, n, cand[i], dir);
		if (access(out, R_OK) == 0) {
			char *r = realpath(out, NULL);
			if (r) {
				snprintf(out, n, "%s", r);
				free(r);
			}
			return 0;
		}
	}
	return -1;
}

static int check_real_libibverbs(void)
{
	void *h = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (!h)
		h = dlopen("libibverbs.so.1", RTLD_LAZY);
	if (!h) {
		fprintf(stderr,
			"uroce: the system's libibverbs (libibverbs.so.1) is missing.\n"
			"       uroce implements the verbs API in front of it; install it with:\n"
			"       apt-get install libibverbs1 ibverbs-providers\n");
		return -1;
	}
	return 0;
}

/* Is entry (len bytes of an LD_PRELOAD list) a liburoce, this one or
 * another build's?  One copy goes first; a second would define every verb
 * twice. */
static bool is_liburoce(const char *entry, size_t len)
{
	static const char base[] = "liburoce.so";
	const char *slash = memrchr(entry, '/', len);
	const char *name = slash ? slash + 1 : entry;
	return (size_t)(entry + len - name) == sizeof(base) - 1 && !memcmp(name, base, sizeof(base) - 1);
}

/* LD_PRELOAD for the program: the sanitizer runtime of a sanitizer build
 * (it must come first), liburoce, then every entry the caller had, in its
 * order, less liburoce and that runtime (issue #16: `mpirun -x
 * LD_PRELOAD=shim.so uroce run --` keeps its shim).  ld.so splits the list
 * at colons and spaces; so does this. */
static int set_preload(void)
{
	char lib[PATH_MAX];

	if (find_library(lib, sizeof(lib)) != 0) {
		fprintf(stderr, "uroce: cannot find liburoce.so next to this program (set UROCE_LIB)\n");
		return -1;
	}
	if (check_real_libibverbs())
		return -1;
	const char *old = getenv("LD_PRELOAD");
	const char *first = getenv("UROCE_SANITIZER_RUNTIME");
	if (!old)
		old = "";
	if (!first)
		first = "";
	size_t room = strlen(first) + strlen(lib) + strlen(old) + 3;
	char *buf = malloc(room), *w = buf;
	if (!buf)
		return -1;
	w += sprintf(w, "%s%s%s", first, *first ? ":" : "", lib);
	for (const char *p = old; *p;) {
		size_t len = strcspn(p, ": ");
		/* the runtime's entries are colon-separated in `first` */
		bool runtime = false;
		for (const char *f = first; *f && !runtime;) {
			size_t fl = strcspn(f, ":");
			runtime = fl == len && !memcmp(f, p, len);
			f += fl + (f[fl] == ':');
		}
		if (len && !runtime && !is_liburoce(p, len))
			w += sprintf(w, ":%.*s", (int)len, p);
		p += len + (p[len] != 0);
	}
	setenv("LD_PRELOAD", buf, 1);
	free(buf);
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	if (argc > 0 && !strcmp(argv[0], "--"))
		argc--, argv++;
	if (argc < 1) {
		usage(stderr);
		return 2;
	}
	if (set_preload())
		return 127;
	execvp(argv[0], argv);
	fprintf(stderr, "uroce: cannot run %s: %s\n", argv[0], strerror(errno));
	return 127;
}

static const char *gid_str(const uint8_t *g, char *buf, size_t n)
{
	static const uint8_t v4[12] = { 0,0,0,0,0,0,0,0,0,0,0xff,0xff };
	if (!memcmp(g, v4, 12))
		inet_ntop(AF_INET, g + 12, buf, (socklen_t)n);
	else
		inet_ntop(AF_INET6, g, buf, (socklen_t)n);
	return buf;
}

typedef int (*for_each_fn)(const struct uroce_stats_page *s, void *arg);

/* Walk the /dev/shm/uroce.<pid> (or uroce.<pid>.<hex>) pages of live
 * processes.  A page is trusted only if it is a regular file of the
 * process's own user that nobody else may write, of exactly a page's size,
 * and it is read by copy, not mapped: a file that shrinks under us costs a
 * short read, not a SIGBUS (issue 13). */
static int for_each_process(for_each_fn fn, void *arg, int only_pid)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	struct uroce_stats_page *s = malloc(sizeof(*s));
	int n = 0;

	if (!d || !s) {
		if (d)
			closedir(d);
		free(s);
		return 0;
	}
	while ((e = readdir(d))) {
		int pid;
		if (sscanf(e->d_name, "uroce.%d", &pid) != 1)
			continue;
		if (only_pid && pid != only_pid)
			continue;
		char path[300];
		struct stat proc, st;
		snprintf(path, sizeof(path), "/proc/%d", pid);
		if (stat(path, &proc) < 0)
			continue; /* a process that died without cleaning up */
		int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0)
			continue;
		bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == proc.st_uid &&
			  !(st.st_mode & 022) && (size_t)st.st_size == sizeof(*s) &&
			  pread(fd, s, sizeof(*s), 0) == (ssize_t)sizeof(*s);
		close(fd);
		if (ok && s->magic == UROCE_STATS_MAGIC && s->version == UROCE_STATS_VERSION) {
			s->cmdline[sizeof(s->cmdline) - 1] = 0;
			fn(s, arg);
			n++;
		}
	}
	closedir(d);
	free(s);
	return n;
}

static int print_process(const struct uroce_stats_page *s, void *arg)
{
	char a[64];
	(void)arg;
	printf("  pid %-7u", s->pid);
	for (uint32_t i = 0; i < s->ngids && i < UROCE_MAX_GIDS; i++)
		printf(" gid[%u]=%s", i, gid_str(s->gids[i], a, sizeof(a)));
	printf("  %s\n", s->cmdline);
	return 0;
}

/* s without markdown's backquotes, for a terminal. */
static const char *plain(const char *s, char *buf, size_t n)
{
	size_t k = 0;

	for (; *s && k + 1 < n; s++)
		if (*s != '`')
			buf[k++] = *s;
	buf[k] = 0;
	return buf;
}

/* README.md's "Configuration (environment)" table (ctest unit_readme_config
 * compares them). */
static int cmd_settings_markdown(void)
{
	printf("| variable | meaning | default |\n|---|---|---|\n");
	for (size_t i = 0; i < NSETTINGS; i++)
		printf("| `%s` | %s | %s |\n", settings[i].name, settings[i].help, settings[i].shown);
	return 0;
}

/* Runs with liburoce preloaded (re-executed by cmd_info). */
static int cmd_info_preloaded(void)
{
	char text[512];
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fprintf(stderr, "uroce: no RDMA device visible\n");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) {
		fprintf(stderr, "uroce: cannot open %s: %s\n", ibv_get_device_name(list[0]), strerror(errno));
		return 1;
	}
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	ibv_query_device(ctx, &da);
	ibv_query_port(ctx, 1, &pa);
	printf("device        %s (vendor 0x%x part 0x%x, fw %s)\n", ibv_get_device_name(list[0]),
	       da.vendor_id, da.vendor_part_id, da.fw_ver);
	printf("port 1        %s, link layer %s, active_mtu %d, max_mtu %d\n",
	       pa.state == IBV_PORT_ACTIVE ? "ACTIVE" : "DOWN",
	       pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand",
	       128 << pa.active_mtu, 128 << pa.max_mtu);
	printf("limits        max_qp %d, max_qp_wr %d, max_sge %d, max_cqe %d, max_mr %d, max_qp_rd_atom %d\n",
	       da.max_qp, da.max_qp_wr, da.max_sge, da.max_cqe, da.max_mr, da.max_qp_rd_atom);
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry g;
		char a[64];
		/* the table's empty slots answer ENODATA */
		if (ibv_query_gid_ex(ctx, 1, (uint32_t)i, &g, 0) == 0)
			printf("gid[%d]        %s  (RoCE v2, this process)\n", i, gid_str(g.gid.raw, a, sizeof(a)));
	}
	printf("settings\n");
	for (size_t i = 0; i < NSETTINGS; i++) {
		const char *e = getenv(settings[i].name);
		printf("  %-24s ", settings[i].name);
		if (e)
			printf("%s\n", *e ? e : "(set, empty)");
		else
			printf("(default: %s)\n", plain(settings[i].shown, text, sizeof(text)));
	}
	printf("uroce processes on this host\n");
	for_each_process(print_process, NULL, 0);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}

static int cmd_info(char *self)
{
	if (set_preload())
		return 127;
	execl("/proc/self/exe", self, "__info", (char *)NULL);
	perror("uroce: exec");
	return 127;
}

static int print_stat(const struct uroce_stats_page *s, void *arg)
{
	int all = *(int *)arg;
	print_process(s, NULL);
	for (int i = 0; i < UC__COUNT; i++)
		if (all || s->counters[i])
			printf("    %-20s %14llu  %s\n", counter_names[i], (unsigned long long)s->counters[i], counter_help[i]);
	return 0;
}

static int cmd_stat(int argc, char **argv)
{
	int all = 0, pid = 0;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "-a"))
			all = 1;
		else
			pid = atoi(argv[i]);
	}
	if (!for_each_process(print_stat, &all, pid)) {
		printf("no running uroce process%s\n", pid ? " with that PID" : "");
		return pid ? 1 : 0;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 2, argv + 2);
	if (!strcmp(argv[1], "info") && argc > 2 && !strcmp(argv[2], "--settings-markdown"))
		return cmd_settings_markdown();
	if (!strcmp(argv[1], "info"))
		return cmd_info(argv[0]);
	if (!strcmp(argv[1], "__info"))
		return cmd_info_preloaded();
	if (!strcmp(argv[1], "stat"))
		return cmd_stat(argc - 2, argv + 2);
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	usage(stderr);
	return 2;
}
