/* The uroce device: one per process, shared by every ibv_context opened on
 * uroce0 (libibverbs allows several).  It owns the addresses (GIDs), the
 * packet I/O backend, the object tables and the engine thread. */
#ifndef UROCE_DEVICE_H
#define UROCE_DEVICE_H

#include "objects.h"
#include <stdio.h>
#include <time.h>

struct uroce_net;
struct uroce_rxpkt;

struct uroce_config {
	uint8_t gids[UROCE_MAX_GIDS][16];
	int ngids;
	bool addr_from_env;      /* UROCE_ADDR given */
	enum ibv_mtu active_mtu; /* UROCE_MTU, else from the interface MTU (rxe's rule) */
	char mtu_from[48];       /* where active_mtu came from, for `uroce info` */
	char pcap_path[256];     /* UROCE_PCAP */
	unsigned window;         /* UROCE_WINDOW: max unacknowledged packets per QP */
	/* UROCE_FAULT_DROP_TX / _RX: "N" drops every N-th packet sent/received;
	 * "P%" drops P percent at random from the seed UROCE_FAULT_SEED */
	unsigned fault_drop_tx, fault_drop_rx;
	double fault_pct_tx, fault_pct_rx;
	unsigned fault_seed;
	int log_level;           /* UROCE_LOG: 0 errors, 1 info, 2 debug */
	unsigned spin_us;        /* UROCE_SPIN_US: engine busy-polls this long after traffic */
	unsigned rto_min_us;     /* UROCE_RTO_MIN_US: floor of the adaptive retransmission
				  * timer (completer.c); 0 = only the IBA ACK timer */
	unsigned poll_grace_us;  /* UROCE_POLL_GRACE_US: an application poll keeps the engine
				  * off the sockets this long */
	bool handoff_defer;      /* UROCE_HANDOFF=defer (engine.c) */
	bool poll_progress;      /* UROCE_POLL_PROGRESS=0: ibv_poll_cq never receives */
	bool shm;                /* UROCE_SHM=0: same-host peers are reached by UDP too */
	unsigned ack_defer_us;   /* UROCE_ACK_DEFER_US: how long an owed ACK may wait for a
				  * request of its QP to ride with (responder.c); 0 = never */
};

struct uroce_dev {
	pthread_mutex_t lock;          /* refcnt, qp_list, object counts */
	int refcnt;
	struct uroce_config cfg;
	struct uroce_net *net;
	struct uroce_shm *shm;         /* counters, published at /dev/shm/uroce.<pid> */
	char shm_path[64];

	_Atomic(struct uroce_qp *) qp_table[UROCE_MAX_QP];
	struct uroce_qp *qp_list;
	uint32_t qpn_next;
	unsigned nqp, ncq, nmr, npd, nah, nsrq;
	unsigned nqp_ud;               /* (dev->lock) while > 0: net_rx_ip_meta */

	/* engine (core/engine.c) */
	pthread_t engine;
	bool engine_running;
	bool engine_rt;                /* SCHED_FIFO: wakes fast */
	bool engine_fair;              /* a real-time engine spinning as SCHED_OTHER (engine thread only) */
	int ncpus;                     /* CPUs this process may run on */
	int loadavg_fd;                /* /proc/loadavg: may the engine spin? (engine.c) */
	int epfd, kick_fd;
	int epfd_timers;                /* kick_fd only: sleep while applications poll */
	_Atomic uint64_t app_poll_ns;   /* last time an application's poll drove progress */
	atomic_int rx_writes_open;      /* QPs with an RDMA WRITE partly received (qp_set_in_write) */
	_Atomic uint64_t handback_ns;   /* last dev_poll_found() hand-back */
	atomic_bool stop;
	atomic_bool sleeping;
	pthread_mutex_t rx_lock;       /* whoever processes received packets and timers */
	struct uroce_rxpkt *rx_pkts;   /* receive batch, used under rx_lock */
	struct uroce_qp **acks_owed;   /* QPs owing a coalesced ACK after this batch (rx_lock) */
	unsigned n_acks_owed;
	struct uroce_qp *acks_deferred; /* QPs whose owed ACK waits for a request (rx_lock) */
	_Atomic uint64_t ack_flush_next; /* earliest deferred ACK deadline, ns */
	_Atomic uint64_t engine_wake_ns; /* when the sleeping engine will wake at the latest */
	_Atomic uint64_t timer_next;   /* earliest armed QP deadline, ns */
};

struct uroce_dev *uroce_dev_get(void);   /* opens on first use */
void uroce_dev_put(struct uroce_dev *dev);
int uroce_config_load(struct uroce_config *cfg);
void uroce_config_print(const struct uroce_config *cfg, FILE *f);

static inline void dev_count(struct uroce_dev *dev, enum uroce_counter c, uint64_t n)
{
	__atomic_fetch_add(&dev->shm->counters[c], n, __ATOMIC_RELAXED);
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* QP table (qp.c): QPN = salt << 14 | index; index 0, 1 and 0x3FFF unused so
 * that QPN 0, 1 (GSI) and 0xFFFFFF (multicast) are never handed out. */
static inline struct uroce_qp *dev_lookup_qp(struct uroce_dev *dev, uint32_t qpn)
{
	struct uroce_qp *qp = atomic_load_explicit(&dev->qp_table[qpn & (UROCE_MAX_QP - 1)],
						   memory_order_acquire);
	return (qp && qp->qpn == qpn) ? qp : NULL;
}

/* A QP's responder starts or ends an RDMA WRITE of several packets; the
 * device counts them for dev_poll_found().  Under qp->lock. */
static inline void qp_set_in_write(struct uroce_qp *qp, bool on)
{
	if (qp->in_write != on) {
		qp->in_write = on;
		atomic_fetch_add_explicit(&qp->dev->rx_writes_open, on ? 1 : -1, memory_order_relaxed);
	}
}

/* engine.c */
int engine_start(struct uroce_dev *dev);
void engine_stop(struct uroce_dev *dev);
void engine_kick(struct uroce_dev *dev);
void qp_arm_timer(struct uroce_qp *qp, uint64_t deadline);
/* Lower the deadline *next (timer_next, ack_flush_next) to `deadline`; with
 * `kick`, wake the engine if it sleeps past it. */
void dev_lower_deadline(struct uroce_dev *dev, _Atomic uint64_t *next, uint64_t deadline, bool kick);
/* Wake the engine if it sleeps past `deadline` (not from the engine itself). */
void dev_engine_wake_by(struct uroce_dev *dev, uint64_t deadline);
/* Is the calling thread the engine? */
bool dev_on_engine_thread(void);
int dev_progress(struct uroce_dev *dev, int budget);
/* From ibv_poll_cq on an empty CQ: process what has arrived, if no one else is. */
void dev_poll_progress(struct uroce_dev *dev);
/* ibv_poll_cq returns completions: the application may stop polling now. */
void dev_poll_found(struct uroce_dev *dev);

/* log */
void uroce_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define LOG_ERR(...) uroce_log(0, __VA_ARGS__)
#define LOG_INFO(...) uroce_log(1, __VA_ARGS__)
#define LOG_DBG(...) uroce_log(2, __VA_ARGS__)

#endif
