/* The per-process device: configuration, addresses, counters page, engine. */
#include "device.h"
#include "../verbs/ops.h"
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../net/net.h"
#include "../transport/icrc.h"

const char *const uroce_counter_names[UC__COUNT] = {
#define X(n, d) #n,
	UROCE_COUNTERS(X)
#undef X
};
const char *const uroce_counter_help[UC__COUNT] = {
#define X(n, d) d,
	UROCE_COUNTERS(X)
#undef X
};

static int log_level = -1;

void uroce_log(int level, const char *fmt, ...)
{
	va_list ap;

	if (log_level < 0) {
		const char *e = getenv("UROCE_LOG");
		log_level = e ? atoi(e) : 0;
	}
	if (level > log_level)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static int parse_addr(const char *s, uint8_t gid[16])
{
	struct in_addr a4;
	struct in6_addr a6;

	if (inet_pton(AF_INET, s, &a4) == 1) {
		memset(gid, 0, 10);
		gid[10] = gid[11] = 0xff;
		memcpy(gid + 12, &a4, 4);
		return 0;
	}
	if (inet_pton(AF_INET6, s, &a6) == 1) {
		memcpy(gid, &a6, 16);
		return 0;
	}
	return -1;
}

static unsigned env_uint(const char *name, unsigned def)
{
	const char *e = getenv(name);
	return e && *e ? (unsigned)strtoul(e, NULL, 0) : def;
}

static void parse_fault(const char *name, unsigned *every, double *pct)
{
	const char *e = getenv(name);
	char *end;

	*every = 0;
	*pct = 0;
	if (!e || !*e)
		return;
	double v = strtod(e, &end);
	if (*end == '%')
		*pct = v < 0 ? 0 : v > 100 ? 100 : v;
	else
		*every = (unsigned)v;
}

/* Name of the interface that holds `gid` into name[IFNAMSIZ]: loopback
 * addresses (127/8, ::1, the automatic 127.64/10 ones) are on "lo", which
 * need not list them.  False if no interface holds it. */
static bool netdev_of(const uint8_t gid[16], char *name)
{
	static const uint8_t v6_loopback[16] = { [15] = 1 };
	bool v4 = gid_is_ipv4(gid);
	struct ifaddrs *all, *i;

	if ((v4 && gid[12] == 127) || (!v4 && !memcmp(gid, v6_loopback, 16))) {
		snprintf(name, IFNAMSIZ, "lo");
		return true;
	}
	if (getifaddrs(&all) < 0)
		return false;
	for (i = all; i; i = i->ifa_next) {
		const struct sockaddr *sa = i->ifa_addr;
		if (sa && v4 && sa->sa_family == AF_INET &&
		    !memcmp(&((const struct sockaddr_in *)(const void *)sa)->sin_addr, gid + 12, 4))
			break;
		if (sa && !v4 && sa->sa_family == AF_INET6 &&
		    !memcmp(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, gid, 16))
			break;
	}
	if (i)
		snprintf(name, IFNAMSIZ, "%s", i->ifa_name);
	freeifaddrs(all);
	return i != NULL;
}

static unsigned netdev_mtu(const char *name)
{
	struct ifreq ifr;
	unsigned mtu = 0;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
	if (fd >= 0 && ioctl(fd, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0)
		mtu = (unsigned)ifr.ifr_mtu;
	if (fd >= 0)
		close(fd);
	return mtu;
}

/* The port's active MTU without UROCE_MTU: rxe's rule, the largest IB MTU
 * that fits the interface MTU less 80 bytes of headers (roce-wire.md §7):
 * Ethernet 1500 -> 1024, 4200 or more -> 4096, loopback (65536) -> 4096.
 * With several addresses, the smallest; an address on no interface (or an
 * unreadable MTU) counts as 1024. */
static void active_mtu_from_netdevs(struct uroce_config *cfg)
{
	enum ibv_mtu best = IBV_MTU_4096;
	char name[IFNAMSIZ] = "lo", shown[IFNAMSIZ] = "";
	unsigned shown_mtu = 0;
	int n = cfg->addr_from_env ? cfg->ngids : 1;

	for (int g = 0; g < n; g++) {
		unsigned mtu = 0;
		if (!cfg->addr_from_env || netdev_of(cfg->gids[g], name))
			mtu = netdev_mtu(name);
		enum ibv_mtu m = IBV_MTU_1024;
		if (mtu) {
			m = IBV_MTU_256;
			while (m < IBV_MTU_4096 && (128u << (m + 1)) + 80 <= mtu)
				m = (enum ibv_mtu)(m + 1);
		}
		if (m <= best) {
			best = m;
			snprintf(shown, sizeof(shown), "%s", mtu ? name : "");
			shown_mtu = mtu;
		}
	}
	cfg->active_mtu = best;
	if (shown[0])
		snprintf(cfg->mtu_from, sizeof(cfg->mtu_from), "interface %s, MTU %u", shown, shown_mtu);
	else
		snprintf(cfg->mtu_from, sizeof(cfg->mtu_from), "default: interface MTU unknown");
}

int uroce_config_load(struct uroce_config *cfg)
{
	const char *e;

	memset(cfg, 0, sizeof(*cfg));
	cfg->active_mtu = IBV_MTU_1024;
	cfg->window = 128;   /* rxe's limit of unacknowledged PSNs (§10) */
	cfg->spin_us = 50;
	/* 10 ms: a 1 ms floor fired often enough on this 2-core VM to raise
	 * the 2-byte ib_send_lat median from 7 to 49 us (measured; engine
	 * timer wakeups), while 10 ms costs nothing measurable and still
	 * recovers a lost tail ~6x sooner than the usual 67 ms ACK timeout */
	cfg->rto_min_us = 10000;
	e = getenv("UROCE_ADDR");
	if (e && *e) {
		char buf[512], *save = NULL;
		snprintf(buf, sizeof(buf), "%s", e);
		for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
			if (cfg->ngids == UROCE_MAX_GIDS || parse_addr(t, cfg->gids[cfg->ngids]) < 0) {
				LOG_ERR("uroce: UROCE_ADDR: cannot use '%s' (IPv4 or IPv6 addresses, comma separated, at most %d)",
					t, UROCE_MAX_GIDS);
				return -EINVAL;
			}
			cfg->ngids++;
		}
		cfg->addr_from_env = cfg->ngids > 0;
	}
	e = getenv("UROCE_MTU");
	if (!e || !*e)
		active_mtu_from_netdevs(cfg);
	else {
		snprintf(cfg->mtu_from, sizeof(cfg->mtu_from), "UROCE_MTU");
		switch (atoi(e)) {
		case 256: cfg->active_mtu = IBV_MTU_256; break;
		case 512: cfg->active_mtu = IBV_MTU_512; break;
		case 1024: cfg->active_mtu = IBV_MTU_1024; break;
		case 2048: cfg->active_mtu = IBV_MTU_2048; break;
		case 4096: cfg->active_mtu = IBV_MTU_4096; break;
		default:
			LOG_ERR("uroce: UROCE_MTU must be 256, 512, 1024, 2048 or 4096");
			return -EINVAL;
		}
	}
	e = getenv("UROCE_PCAP");
	if (e && *e) {
		/* "%p" becomes the PID, so that both ends can share one setting */
		const char *p = strstr(e, "%p");
		if (p)
			snprintf(cfg->pcap_path, sizeof(cfg->pcap_path), "%.*s%d%s", (int)(p - e), e, (int)getpid(), p + 2);
		else
			snprintf(cfg->pcap_path, sizeof(cfg->pcap_path), "%s", e);
	}
	cfg->window = env_uint("UROCE_WINDOW", cfg->window);
	if (cfg->window < 1)
		cfg->window = 1;
	if (cfg->window > 4096)
		cfg->window = 4096;
	parse_fault("UROCE_FAULT_DROP_TX", &cfg->fault_drop_tx, &cfg->fault_pct_tx);
	parse_fault("UROCE_FAULT_DROP_RX", &cfg->fault_drop_rx, &cfg->fault_pct_rx);
	cfg->fault_seed = env_uint("UROCE_FAULT_SEED", 1);
	cfg->log_level = (int)env_uint("UROCE_LOG", 0);
	cfg->spin_us = env_uint("UROCE_SPIN_US", cfg->spin_us);
	cfg->rto_min_us = env_uint("UROCE_RTO_MIN_US", cfg->rto_min_us);
	/* grace unless told "defer" (docs/architecture.md, engine.c) */
	e = getenv("UROCE_POLL_PROGRESS");
	cfg->poll_progress = !e || *e != '0';
	e = getenv("UROCE_HANDOFF");
	cfg->handoff_defer = e && !strcmp(e, "defer");
	cfg->poll_grace_us = env_uint("UROCE_POLL_GRACE_US", cfg->handoff_defer ? 5 : 3000);
	cfg->ack_defer_us = env_uint("UROCE_ACK_DEFER_US", 20);
	e = getenv("UROCE_SHM");
	cfg->shm = !e || *e != '0';
	return 0;
}

static const char *gid_str(const uint8_t *g, char *buf, size_t n)
{
	if (gid_is_ipv4(g))
		inet_ntop(AF_INET, g + 12, buf, (socklen_t)n);
	else
		inet_ntop(AF_INET6, g, buf, (socklen_t)n);
	return buf;
}

void uroce_config_print(const struct uroce_config *cfg, FILE *f)
{
	char a[64];

	for (int i = 0; i < cfg->ngids; i++)
		fprintf(f, "  gid[%d]        %s (RoCE v2, UDP port 4791)\n", i, gid_str(cfg->gids[i], a, sizeof(a)));
	fprintf(f, "  address from  %s\n", cfg->addr_from_env ? "UROCE_ADDR" : "automatic (127.64.0.0/10, one per process)");
	fprintf(f, "  active_mtu    %d (%s; UROCE_MTU sets it)\n", 128 << cfg->active_mtu, cfg->mtu_from);
	fprintf(f, "  window        %u packets (UROCE_WINDOW)\n", cfg->window);
	fprintf(f, "  pcap          %s (UROCE_PCAP)\n", cfg->pcap_path[0] ? cfg->pcap_path : "off");
	fprintf(f, "  same host     %s (UROCE_SHM)\n", cfg->shm ?
		"shared-memory rings to uroce processes of this network namespace" : "off: UDP to every peer");
	fprintf(f, "  spin          %u us after traffic (UROCE_SPIN_US)\n", cfg->spin_us);
	fprintf(f, "  hand-off      %s: a polling application keeps the engine off the sockets for %u us (UROCE_HANDOFF, UROCE_POLL_GRACE_US)\n",
		cfg->handoff_defer ? "defer" : "grace", cfg->poll_grace_us);
	if (cfg->ack_defer_us)
		fprintf(f, "  ACK deferral  an owed ACK waits up to %u us for a request to ride with (UROCE_ACK_DEFER_US)\n",
			cfg->ack_defer_us);
	else
		fprintf(f, "  ACK deferral  off (UROCE_ACK_DEFER_US=0)\n");
	if (cfg->rto_min_us)
		fprintf(f, "  early retry   after the measured round trip, at least %u us (UROCE_RTO_MIN_US)\n",
			cfg->rto_min_us);
	else
		fprintf(f, "  early retry   off: the IBA ACK timeout only (UROCE_RTO_MIN_US=0)\n");
	if (cfg->fault_drop_tx || cfg->fault_drop_rx || cfg->fault_pct_tx > 0 || cfg->fault_pct_rx > 0)
		fprintf(f, "  fault         drop every %u-th sent (%.2f%%), %u-th received (%.2f%%)\n",
			cfg->fault_drop_tx, cfg->fault_pct_tx, cfg->fault_drop_rx, cfg->fault_pct_rx);
}

static pthread_mutex_t dev_global_lock = PTHREAD_MUTEX_INITIALIZER;

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

static void shm_sweep_stale(void)
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

static int shm_publish(struct uroce_dev *dev)
{
	shm_sweep_stale();
	snprintf(dev->shm_path, sizeof(dev->shm_path), "/dev/shm/uroce.%d", (int)getpid());
	int fd = open(dev->shm_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	void *p = MAP_FAILED;

	if (fd >= 0 && ftruncate(fd, sizeof(struct uroce_shm)) == 0)
		p = mmap(NULL, sizeof(struct uroce_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (fd >= 0)
		close(fd);
	if (p == MAP_FAILED) {
		/* counters still work in-process; `uroce stat` just won't see them */
		dev->shm_path[0] = 0;
		p = mmap(NULL, sizeof(struct uroce_shm), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return -ENOMEM;
	}
	dev->shm = p;
	memset(dev->shm, 0, sizeof(*dev->shm));
	dev->shm->version = UROCE_SHM_VERSION;
	dev->shm->pid = (uint32_t)getpid();
	int cfd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (cfd >= 0) {
		ssize_t n = read(cfd, dev->shm->cmdline, sizeof(dev->shm->cmdline) - 1);
		for (ssize_t i = 0; i + 1 < n; i++)
			if (!dev->shm->cmdline[i])
				dev->shm->cmdline[i] = ' ';
		close(cfd);
	}
	return 0;
}

static void shm_finish(struct uroce_dev *dev)
{
	dev->shm->ngids = (uint32_t)dev->cfg.ngids;
	dev->shm->active_mtu = 128u << dev->cfg.active_mtu;
	memcpy(dev->shm->gids, dev->cfg.gids, sizeof(dev->shm->gids));
	__atomic_store_n(&dev->shm->magic, UROCE_SHM_MAGIC, __ATOMIC_RELEASE);
}

/* UROCE_STATS=1: print the counters when the device closes (the demo uses
 * it; a running process is read with `uroce stat`). */
static void print_stats_at_exit(struct uroce_dev *dev)
{
	const char *e = getenv("UROCE_STATS");
	char a[64];

	if (!e || !*e || *e == '0' || !dev->shm)
		return;
	fprintf(stderr, "uroce: pid %d gid %s counters:\n", (int)getpid(), dev->cfg.ngids ? gid_str(dev->cfg.gids[0], a, sizeof(a)) : "-");
	for (int i = 0; i < UC__COUNT; i++)
		if (dev->shm->counters[i])
			fprintf(stderr, "uroce:   %-20s %12llu  %s\n", uroce_counter_names[i],
				(unsigned long long)dev->shm->counters[i], uroce_counter_help[i]);
}

/* A program that exits without closing its device (perftest's atomic_lat
 * server does) still prints its UROCE_STATS counters. */
static struct uroce_dev *the_dev;

__attribute__((destructor)) static void stats_at_process_exit(void)
{
	if (the_dev)
		print_stats_at_exit(the_dev);
}

static void dev_free(struct uroce_dev *dev)
{
	if (dev->engine_running)
		engine_stop(dev);
	print_stats_at_exit(dev);
	net_destroy(dev->net);
	if (dev->shm) {
		if (dev->shm_path[0])
			unlink(dev->shm_path);
		munmap(dev->shm, sizeof(*dev->shm));
	}
	pthread_mutex_destroy(&dev->lock);
	pthread_mutex_destroy(&dev->rx_lock);
	free(dev);
}

struct uroce_dev *uroce_dev_get(void)
{
	struct uroce_dev *dev;
	int rc;

	pthread_mutex_lock(&dev_global_lock);
	if (the_dev) {
		the_dev->refcnt++;
		dev = the_dev;
		pthread_mutex_unlock(&dev_global_lock);
		return dev;
	}
	dev = calloc(1, sizeof(*dev));
	if (!dev) {
		pthread_mutex_unlock(&dev_global_lock);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&dev->lock, NULL);
	/* priority inheritance: a real-time engine that waits for rx_lock lends
	 * its priority to the application thread holding it (no inversion) */
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setprotocol(&ma, PTHREAD_PRIO_INHERIT);
	pthread_mutex_init(&dev->rx_lock, &ma);
	pthread_mutexattr_destroy(&ma);
	dev->refcnt = 1;
	dev->qpn_next = (uint32_t)getpid() * 2654435761u;
	rc = uroce_config_load(&dev->cfg);
	if (rc == 0)
		rc = shm_publish(dev);
	if (rc == 0) {
		dev->net = net_create(dev);
		if (!dev->net)
			rc = -errno;
	}
	if (rc == 0)
		rc = engine_start(dev);
	if (rc < 0) {
		dev_free(dev);
		pthread_mutex_unlock(&dev_global_lock);
		errno = -rc;
		return NULL;
	}
	shm_finish(dev);
	the_dev = dev;
	pthread_mutex_unlock(&dev_global_lock);
	return dev;
}

void uroce_dev_put(struct uroce_dev *dev)
{
	pthread_mutex_lock(&dev_global_lock);
	if (--dev->refcnt == 0) {
		the_dev = NULL;
		dev_free(dev);
	}
	pthread_mutex_unlock(&dev_global_lock);
}
