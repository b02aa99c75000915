/* Configuration from the environment (README, "Configuration"): read once,
 * when the device opens, row by row of config_table.h.  The only getenv of
 * a UROCE_* setting in the library. */
#include "config.h"
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <stdarg.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>
#include "config_table.h"
#include "log.h"
#include "../wire/ip.h"

/* Name of the interface that holds `gid` into name[IFNAMSIZ]: loopback
 * addresses (127/8, ::1, the automatic 127.64/10 ones) are on "lo", which
 * need not list them.  False if no interface holds it. */
bool config_netdev_of(const uint8_t gid[16], char *name)
{
	bool v4 = gid_is_ipv4(gid);
	struct ifaddrs *all, *i;

	if (gid_is_loopback(gid)) {
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
		if (!cfg->addr_from_env || config_netdev_of(cfg->gids[g], name))
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
	/* AF_XDP (net/xdp.c): a packet and its headers in one page-sized frame */
	if (cfg->xdp && cfg->active_mtu > IBV_MTU_2048) {
		cfg->active_mtu = IBV_MTU_2048;
		snprintf(cfg->mtu_from, sizeof(cfg->mtu_from), "UROCE_XDP: 2048 at most");
	}
}

static unsigned env_uint(const char *e, unsigned def, unsigned lo, unsigned hi)
{
	unsigned v = e && *e ? (unsigned)strtoul(e, NULL, 0) : def;
	return v < lo ? lo : v > hi ? hi : v;
}

static bool env_bool(const char *e, bool def)
{
	return e && *e ? *e != '0' : def;
}

static bool env_word(const char *e, const char *word, bool def)
{
	return e && *e ? !strcmp(e, word) : def;
}

static void env_fault(const char *e, unsigned *every, double *pct)
{
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

static void env_path(const char *e, char *out, size_t n)
{
	if (!e || !*e)
		return;
	/* "%p" becomes the PID, so that both ends can share one setting */
	const char *p = strstr(e, "%p");
	if (p)
		snprintf(out, n, "%.*s%d%s", (int)(p - e), e, (int)getpid(), p + 2);
	else
		snprintf(out, n, "%s", e);
}

static int env_addr(struct uroce_config *cfg, const char *e)
{
	char buf[512], *save = NULL;

	if (!e || !*e)
		return 0;
	snprintf(buf, sizeof(buf), "%s", e);
	for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		if (cfg->ngids == UROCE_MAX_GIDS || gid_parse(t, cfg->gids[cfg->ngids]) < 0) {
			LOG_ERR("uroce: UROCE_ADDR: cannot use '%s' (IPv4 or IPv6 addresses, comma separated, at most %d)",
				t, UROCE_MAX_GIDS);
			return -EINVAL;
		}
		cfg->ngids++;
	}
	cfg->addr_from_env = cfg->ngids > 0;
	return 0;
}

static int env_mtu(struct uroce_config *cfg, const char *e)
{
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
	return 0;
}

/* One statement per kind of row (config_table.h); e is the variable's value,
 * NULL when unset, and is read once. */
#define LOAD_addr(e, fld, a, b, def) \
	if ((rc = env_addr(cfg, e)) < 0) \
		return rc;
#define LOAD_mtu(e, fld, a, b, def) \
	if (!(v = e) || !*v) \
		def; \
	else if ((rc = env_mtu(cfg, v)) < 0) \
		return rc;
#define LOAD_path(e, fld, a, b, def)     env_path(e, cfg->fld, sizeof(cfg->fld));
#define LOAD_uint(e, fld, a, b, def)     cfg->fld = env_uint(e, def, a, b);
/* a level in decimal (atoi), as the log has always read it */
#define LOAD_level(e, fld, a, b, def)    cfg->fld = (e) && *(e) ? atoi(e) : (def);
#define LOAD_bool(e, fld, a, b, def)     cfg->fld = env_bool(e, def);
#define LOAD_set(e, fld, a, b, def)      cfg->fld = (e) != NULL;
#define LOAD_word(e, fld, a, b, def)     cfg->fld = env_word(e, a, def);
#define LOAD_fault(e, fld, a, b, def)    env_fault(e, &cfg->fld, &cfg->a);
#define LOAD_launcher(e, fld, a, b, def)

int uroce_config_load(struct uroce_config *cfg)
{
	const char *v;
	int rc;

	memset(cfg, 0, sizeof(*cfg));
#define X(name, field, kind, a, b, def, shown, help) LOAD_##kind(getenv(#name), field, a, b, def)
	UROCE_CONFIG_TABLE(X)
#undef X
	uroce_log_set_level(cfg->log_level);
	return 0;
}

static void row(FILE *f, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void row(FILE *f, const char *name, const char *fmt, ...)
{
	va_list ap;

	fprintf(f, "  %-20s ", name);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	fputc('\n', f);
}

static void row_addr(FILE *f, const char *name, const struct uroce_config *cfg)
{
	char a[64], all[UROCE_MAX_GIDS * 64 + 1] = "";
	size_t n = 0;

	for (int i = 0; i < cfg->ngids && n < sizeof(all); i++)
		n += (size_t)snprintf(all + n, sizeof(all) - n, "%s%s", i ? "," : "",
				      gid_format(cfg->gids[i], a, sizeof(a)));
	row(f, name, "%s", cfg->addr_from_env ? all : "automatic (127.64.0.0/10, one per process)");
}

static void row_fault(FILE *f, const char *name, unsigned every, double pct)
{
	if (every)
		row(f, name, "every %u-th packet", every);
	else if (pct > 0)
		row(f, name, "%.2f%% at random", pct);
	else
		row(f, name, "off");
}

#define SHOW_addr(n, fld, a, b)     row_addr(f, n, cfg);
#define SHOW_mtu(n, fld, a, b)      row(f, n, "%d (%s)", 128 << cfg->fld, cfg->mtu_from);
#define SHOW_path(n, fld, a, b)     row(f, n, "%s", cfg->fld[0] ? cfg->fld : "off");
#define SHOW_uint(n, fld, a, b)     row(f, n, "%u", cfg->fld);
#define SHOW_level(n, fld, a, b)    row(f, n, "%d", cfg->fld);
#define SHOW_bool(n, fld, a, b)     row(f, n, "%s", cfg->fld ? "on" : "off");
#define SHOW_set                    SHOW_bool
#define SHOW_word(n, fld, a, b)     row(f, n, "%s", cfg->fld ? a : b);
#define SHOW_fault(n, fld, a, b)    row_fault(f, n, cfg->fld, cfg->a);
#define SHOW_launcher(n, fld, a, b)

/* The value in force of every row the library reads, one a line. */
void uroce_config_print(const struct uroce_config *cfg, FILE *f)
{
#define X(name, field, kind, a, b, def, shown, help) SHOW_##kind(#name, field, a, b)
	UROCE_CONFIG_TABLE(X)
#undef X
}
