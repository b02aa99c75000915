/* Configuration from the environment (README, "Configuration"): read once,
 * when the device opens. */
#include "config.h"
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>
#include "log.h"
#include "../wire/ip.h"

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
			if (cfg->ngids == UROCE_MAX_GIDS || gid_parse(t, cfg->gids[cfg->ngids]) < 0) {
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
	e = getenv("UROCE_ENGINE_RT");
	cfg->engine_rt = !e || *e != '0';
	e = getenv("UROCE_NO_GSO");
	cfg->no_gso = e != NULL;
	e = getenv("UROCE_STATS");
	cfg->stats_at_exit = e && *e && *e != '0';
	uroce_log_set_level(cfg->log_level);
	return 0;
}

void uroce_config_print(const struct uroce_config *cfg, FILE *f)
{
	char a[64];

	for (int i = 0; i < cfg->ngids; i++)
		fprintf(f, "  gid[%d]        %s (RoCE v2, UDP port 4791)\n", i, gid_format(cfg->gids[i], a, sizeof(a)));
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

