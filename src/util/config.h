/* The configuration of a process's device, from the environment
 * (README, "Configuration"): the fields the rows of config_table.h fill. */
#ifndef UROCE_UTIL_CONFIG_H
#define UROCE_UTIL_CONFIG_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define UROCE_MAX_GIDS 4             /* addresses of one device (UROCE_ADDR) */

struct uroce_config {
	uint8_t gids[UROCE_MAX_GIDS][16];
	int ngids;
	bool addr_from_env;      /* UROCE_ADDR given */
	enum ibv_mtu active_mtu; /* UROCE_MTU, else from the interface MTU (rxe's rule) */
	char mtu_from[48];       /* where active_mtu came from, for `uroce info` */
	char pcap_path[256];     /* UROCE_PCAP */
	unsigned window;         /* UROCE_WINDOW: max unacknowledged packets per QP; 0: by bytes (cc_window_max) */
	/* UROCE_FAULT_DROP_TX / _RX: "N" drops every N-th packet sent/received;
	 * "P%" drops P percent at random from the seed UROCE_FAULT_SEED */
	unsigned fault_drop_tx, fault_drop_rx;
	double fault_pct_tx, fault_pct_rx;
	unsigned fault_seed;
	int log_level;           /* UROCE_LOG: 0 errors, 1 info, 2 debug */
	unsigned spin_us;        /* UROCE_SPIN_US: engine busy-polls this long after traffic */
	unsigned rto_min_us;     /* UROCE_RTO_MIN_US: floor of the adaptive retransmission
				  * timer; 0 = only the IBA ACK timer */
	unsigned poll_grace_us;  /* UROCE_POLL_GRACE_US: the longest the engine stays off the
				  * sockets while an application spins on its CQ */
	unsigned poll_spin_us;   /* UROCE_POLL_SPIN_US: polls this close, for 10 us: a spin */
	bool handoff_defer;      /* UROCE_HANDOFF=defer */
	bool poll_progress;      /* UROCE_POLL_PROGRESS=0: ibv_poll_cq never receives */
	bool shm;                /* UROCE_SHM=0: same-host peers are reached by UDP too */
	bool shm_bell;           /* UROCE_SHM_BELL: our regions come with a bell (net/shm.c) */
	bool xdp;                /* UROCE_XDP=1: the AF_XDP backend (net/xdp.c) instead of UDP sockets */
	unsigned shm_direct_min; /* UROCE_SHM_DIRECT_MIN: messages this large go by one copy on one host (transport/ref.h) */
	unsigned pull_split_min; /* UROCE_PULL_SPLIT_MIN: such copies this large are shared with a helper thread (mem/pull.h) */
	unsigned ack_defer_us;   /* UROCE_ACK_DEFER_US: how long an owed ACK may wait for a
				  * request of its QP to ride with; 0 = never */
	unsigned cork_pkts;      /* UROCE_CORK_PKTS: packets a stream's posts may hold back
				  * to leave together (sq/post.c); 0 = never */
	bool engine_rt;          /* UROCE_ENGINE_RT=0: the engine stays an ordinary thread */
	bool engine_place;       /* UROCE_ENGINE_PLACE=0: the kernel alone places the engine */
	bool no_gso;             /* UROCE_NO_GSO: one datagram per packet */
	bool stats_at_exit;      /* UROCE_STATS=1: counters to stderr when the device closes */
	unsigned stats_mode;     /* UROCE_STATS_MODE: the stats page's permissions (& 0644) */
};

/* The interface that holds `gid`, its name into name[IFNAMSIZ]
 * (loopback addresses are on "lo"); false if none does. */
bool config_netdev_of(const uint8_t gid[16], char *name);

/* 0, or -EINVAL for a UROCE_ADDR or UROCE_MTU that cannot be used (logged). */
int uroce_config_load(struct uroce_config *cfg);
/* Every setting the library reads, "  NAME value" a line, for diagnostics. */
void uroce_config_print(const struct uroce_config *cfg, FILE *f);

#endif
