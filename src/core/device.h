/* The uroce device: one per process, shared by every ibv_context opened on
 * uroce0 (libibverbs allows several).  It owns the addresses (GIDs), the
 * packet I/O backend, the object tables and the engine thread. */
#ifndef UROCE_DEVICE_H
#define UROCE_DEVICE_H

#include "objects.h"
#include <string.h>
#include "../util/clock.h"
#include "../util/config.h"
#include "../util/log.h"
#include "../util/stats.h"

struct uroce_net;
struct uroce_rxpkt;

/* The engine thread and its hand-off with polling applications (exec/
 * owns it; core/wake.c reads sleeping and wake_ns and writes kick_fd). */
struct uroce_engine {
	pthread_t thread;
	bool running;
	bool rt;                        /* SCHED_FIFO: wakes fast */
	bool fair;                      /* a real-time engine spinning as SCHED_OTHER (engine thread only) */
	int ncpus;                      /* CPUs this process may run on */
	int loadavg_fd;                 /* /proc/loadavg: may the engine spin? */
	int epfd, kick_fd;
	int epfd_timers;                /* kick_fd only: sleep while applications poll */
	/* the pollers' stamps (exec/progress.c, poll_stamp), on a line of
	 * their own: every poll writes them */
	_Alignas(64) _Atomic uint64_t app_poll_ns; /* an application's last poll */
	_Atomic uint64_t app_run_ns;    /* start of the current run of polls close together */
	_Atomic uint64_t app_spin_ns;   /* last poll of a run that has lasted SPIN_MIN_NS: a spin */
	_Atomic uint64_t app_spin_from_ns; /* the start of that run (exec_spin_held) */
	_Atomic uint64_t app_rx_ns;     /* an application's poll last ran the receive path */
	_Atomic uint64_t app_post_ns;   /* an application's post, every POST_STAMP_EVERY-th (dev_post_stamp) */
	_Atomic uintptr_t rx_poller;    /* the thread whose poll last ran poll_receive (its mark) */
	_Atomic uint64_t rx_pollers_ns; /* another thread's poll last followed it: several poll */
	_Alignas(64) _Atomic uint64_t handback_ns; /* last hand-back (exec_poll_found, exec_poll_block) */
	atomic_bool stop;
	atomic_bool sleeping;
	_Atomic uint64_t wake_ns;       /* when the sleeping engine will wake at the latest */
	_Atomic uint64_t off_until_ns;  /* the engine sleeps off the sockets until then (0: not) */
	/* a request (not a response) from a peer was last received: the
	 * process is a target (transport/recv.c; exec_spin_held) */
	_Alignas(64) _Atomic uint64_t rx_request_ns;
};

/* A multicast group QPs of this process are attached to (obj/mcast.c). */
struct uroce_mcast_group {
	uint8_t mgid[16];
	unsigned nqp;
	struct uroce_qp *qp[UROCE_MAX_MCAST_QP_ATTACH];
};

struct uroce_dev {
	pthread_mutex_t lock;          /* qp_list, object counts (refcnt: dev_global_lock) */
	int refcnt;
	struct uroce_config cfg;
	struct uroce_net *net;
	struct uroce_stats_page *stats; /* counters, published at /dev/shm/uroce.<pid> */
	int stats_guard;                /* its SIGBUS guard (net/shm.h), -1: none */
	char stats_path[64];

	_Atomic(struct uroce_qp *) qp_table[UROCE_MAX_QP];
	struct uroce_qp *qp_list;
	uint32_t qpn_next;
	unsigned nqp, ncq, nmr, npd, nah, nsrq;
	unsigned nqp_ud;               /* (dev->lock) while > 0: net_rx_ip_meta */
	/* XRC SRQs by number (obj/xrc.c publishes under rx_lock and dev->lock) */
	_Atomic(struct uroce_srq *) srq_table[UROCE_MAX_SRQ];
	uint32_t srqn_next;

	struct uroce_engine eng;
	atomic_int rx_writes_open;      /* QPs with an RDMA WRITE partly received (qp_set_in_write) */
	pthread_mutex_t rx_lock;       /* whoever processes received packets and timers */
	struct uroce_rxpkt *rx_pkts;   /* receive batch, used under rx_lock */
	struct uroce_qp **acks_owed;   /* QPs owing a coalesced ACK after this batch (rx_lock) */
	unsigned n_acks_owed;
	struct uroce_qp *acks_deferred; /* QPs whose owed ACK waits for a request or more of a stream (rx_lock) */
	_Atomic uint64_t ack_flush_next; /* earliest deferred ACK deadline, ns */
	_Atomic uint64_t timer_next;   /* earliest armed QP deadline, ns */
	/* QPs whose posts wait to leave with later ones (sq/post.c): any
	 * thread's CQ poll or arm sends them.  Posts push lock-free; one
	 * thread at a time takes the whole list (cork_lock) */
	_Atomic(struct uroce_qp *) corked;
	pthread_mutex_t cork_lock;
	/* multicast groups (obj/mcast.c): changed under rx_lock and
	 * dev->lock, read by the receive path under rx_lock */
	struct uroce_mcast_group mcast[UROCE_MAX_MCAST_GRP];
	unsigned nmcast;
};

static inline void dev_count(struct uroce_dev *dev, enum uroce_counter c, uint64_t n)
{
	UROCE_COUNT(dev->stats, c, n);
}

static inline void dev_count_syscall(struct uroce_dev *dev, enum uroce_counter c)
{
	UROCE_COUNT_SYSCALL(dev->stats, c, 1);
}

/* QP table (obj/qp.c): QPN = the device's slot << 14 | index (net/share.h); index 0, 1 and 0x3FFF unused so
 * that QPN 0, 1 (GSI) and 0xFFFFFF (multicast) are never handed out. */
static inline struct uroce_qp *dev_lookup_qp(struct uroce_dev *dev, uint32_t qpn)
{
	struct uroce_qp *qp = atomic_load_explicit(&dev->qp_table[qpn & (UROCE_MAX_QP - 1)],
						   memory_order_acquire);
	return (qp && qp->qpn == qpn) ? qp : NULL;
}

/* The multicast group of mgid this process's QPs are attached to, or NULL
 * (under rx_lock or dev->lock; obj/mcast.c). */
static inline struct uroce_mcast_group *dev_mcast_group(struct uroce_dev *dev, const uint8_t mgid[16])
{
	for (unsigned i = 0; i < dev->nmcast; i++)
		if (!memcmp(dev->mcast[i].mgid, mgid, 16))
			return &dev->mcast[i];
	return NULL;
}

/* XRC SRQ table (obj/xrc.c): SRQN = salt << 12 | index, index 0 unused. */
static inline struct uroce_srq *dev_lookup_srq(struct uroce_dev *dev, uint32_t srqn)
{
	struct uroce_srq *s = atomic_load_explicit(&dev->srq_table[srqn & (UROCE_MAX_SRQ - 1)],
						   memory_order_acquire);
	return (s && s->srqn == srqn) ? s : NULL;
}

/* ibv_post_send, every POST_STAMP_EVERY-th call of a thread: an application
 * that posts is busy with its verbs, and a long run of posts between two
 * polls (ib_write_bw's requester posting a window of 4 KiB WRITEs by UDP,
 * hundreds of microseconds) does not break its spin (exec/progress.c,
 * poll_stamp); a program that polls, posts its answers and computes for
 * long is no spin all the same.  A clock read per 8 posts, and a store. */
#define POST_STAMP_EVERY 8
static inline void dev_post_stamp(struct uroce_dev *dev)
{
	static _Thread_local unsigned posts;

	if (++posts % POST_STAMP_EVERY == 0)
		atomic_store_explicit(&dev->eng.app_post_ns, now_ns(), memory_order_relaxed);
}

/* A QP's responder starts or ends an RDMA WRITE of several packets; the
 * device counts them for exec_poll_found().  Under qp->lock. */
static inline void qp_set_in_write(struct uroce_qp *qp, bool on)
{
	if (qp->resp.in_write != on) {
		qp->resp.in_write = on;
		atomic_fetch_add_explicit(&qp->dev->rx_writes_open, on ? 1 : -1, memory_order_relaxed);
	}
}

#endif
