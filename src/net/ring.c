/* The same-host ring backend: a connected flow whose peer is a uroce
 * process of this network namespace sends through a ring in the peer's
 * region, and every receive address reads its own region (shm.h; the
 * rings, regions and their memory ordering are shm.c's).
 *
 * It carries only what a ring can: flow_open refuses a peer without a live
 * region (or with no free ring) and the selector (net.c) sends that flow by
 * UDP.  A receiver that sleeps is woken by a doorbell: a datagram to the
 * bell its owner handed over with the region (a socket in the owner's
 * epoll, add_fds), or where it gave none, a datagram to its address that
 * net.c has the flow's UDP side send.  Only the bell wakes the engine's
 * epoll for ring packets, so while a ring is claimed receive reports
 * itself busy.  Each region's listening socket is in both of the engine's
 * epoll sets (add_serve_fds):
 * producers connecting to ask for the region are answered whenever the
 * engine wakes, also while an application polls (serve). */
#include "net.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include "shm.h"
#include "share.h"

struct ring_priv {
	struct shm_rx *rx[UROCE_MAX_GIDS];  /* a region per address, NULL when none */
	int n;
	struct uroce_stats_page *stats;
	int epfd[2], nep;                  /* where the listeners are watched (add_serve_fds) */
	bool unwatched[UROCE_MAX_GIDS];    /* shm_rx_serve failed: watched again at the next serve
					    * (within SERVE_STALLED_NS: net->serve_stalled) */
};

/* A ring in the peer's region, claimed for one flow's life. */
struct uroce_backend_flow {
	struct shm_tx *tx;
	struct uroce_stats_page *stats;
	uint8_t sgid[16];            /* what its packets say they came from */
	uint16_t sport;
};

/* After the UDP backend: its sockets bound the addresses (automatic ones
 * filled in), which made them ours and names our regions after them. */
static int ring_open(struct uroce_backend *be)
{
	struct uroce_config *cfg = be->net->cfg;
	struct ring_priv *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->stats = be->net->stats;
	shm_refs(cfg->shm_direct_min != 0);
	shm_bells(cfg->shm_bell);
	/* one region per address, named by it and this device's QPN slot:
	 * processes sharing an address (share.h) have one each */
	for (int i = 0; i < cfg->ngids; i++)
		if (!(p->rx[i] = shm_rx_open(cfg->gids[i], be->net->qpn_slot)) && !shm_dir_refused())
			UROCE_COUNT(p->stats, UC_shm_region_failed, 1);
	p->n = cfg->ngids;
	if (cfg->ngids && shm_dir_refused())
		UROCE_COUNT(p->stats, UC_shm_dir_refused, 1);
	be->priv = p;
	return 0;
}

static void ring_close(struct uroce_backend *be)
{
	struct ring_priv *p = be->priv;

	if (!p)
		return;
	for (int i = 0; i < p->n; i++)
		shm_rx_close(p->rx[i]);
	free(p);
	be->priv = NULL;
}

static struct uroce_backend_flow *ring_flow_open(struct uroce_backend *be, const uint8_t sgid[16],
						 uint16_t sport, const uint8_t *peer, uint32_t peer_qpn)
{
	struct uroce_backend_flow *f;

	if (!peer) {
		errno = EINVAL;  /* UD: no one peer */
		return NULL;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->tx = shm_tx_attach(peer, share_slot_of(peer_qpn));
	if (!f->tx) {
		free(f);
		errno = ENOENT;
		return NULL;
	}
	f->stats = be->net->stats;
	memcpy(f->sgid, sgid, 16);
	f->sport = sport;
	return f;
}

static void ring_flow_prepare(struct uroce_backend *be, const uint8_t peer[16], uint32_t peer_qpn)
{
	(void)be;
	shm_tx_prepare(peer, share_slot_of(peer_qpn));
}

static void ring_flow_close(struct uroce_backend_flow *f)
{
	if (!f)
		return;
	shm_tx_detach(f->tx);
	free(f);
}

/* Parts only while the peer's engine is awake (SHM_PART_BYTES). */
static uint32_t ring_flow_part_bytes(const struct uroce_backend_flow *f)
{
	return !shm_tx_peer_sleeping(f->tx) ? SHM_PART_BYTES : 0;
}

static pid_t ring_flow_ref_peer(const struct uroce_backend_flow *f, pid_t *self)
{
	return shm_tx_ref_peer(f->tx, self);
}

static int ring_send(struct uroce_backend_flow *f, const uint8_t dgid[16], uint8_t tos,
		     struct uroce_txmsg *msgs, int n, bool *wake)
{
	bool doorbell;

	(void)dgid;  /* the ring's peer (net.c sends nothing else here) */
	int sent = shm_tx_send(f->tx, f->sgid, f->sport, tos, msgs, n, &doorbell);
	if (sent < 0) {
		UROCE_COUNT(f->stats, UC_shm_fork_refused, 1);
		return sent;  /* -EPIPE (a forked child's flow): net.c closes the flow's ring and sends by UDP */
	}
	UROCE_COUNT(f->stats, UC_shm_packets_tx, (uint64_t)sent);
	if (sent < n)
		UROCE_COUNT(f->stats, UC_shm_ring_full, (uint64_t)(n - sent));
	if (doorbell) {
		int rc = shm_tx_ring_bell(f->tx);
		if (rc != -ENODEV)
			UROCE_COUNT_SYSCALL(f->stats, UC_sys_other, 1);
		if (rc == 0)
			UROCE_COUNT(f->stats, UC_shm_doorbells_tx, 1);
		else
			*wake = true;  /* by UDP (net.c, ring_doorbell) */
	}
	return sent;
}

static int ring_recv(struct uroce_backend *be, struct uroce_rxpkt *pkts, int max, bool *more, bool *busy)
{
	struct ring_priv *p = be->priv;
	int got = 0;

	for (int k = 0; k < p->n; k++) {
		if (!shm_rx_active(p->rx[k]))
			continue;
		uint64_t bad = 0;
		unsigned calls = 0;
		int room = max - got;
		if (room <= 0) {
			*more = true;
			break;
		}
		int r = shm_rx_poll(p->rx[k], pkts + got, room, more, &bad, &calls);
		*busy = true;
		got += r;
		if (r)  /* an empty poll (most of them) touches no counter */
			UROCE_COUNT(p->stats, UC_shm_packets_rx, (uint64_t)r);
		if (bad)
			UROCE_COUNT(p->stats, UC_shm_bad, bad);
		if (calls)
			UROCE_COUNT_SYSCALL(p->stats, UC_sys_other, calls);
	}
	return got;
}

static bool ring_rx_ready(struct uroce_backend *be, bool *busy)
{
	struct ring_priv *p = be->priv;

	for (int k = 0; k < p->n; k++)
		if (shm_rx_active(p->rx[k])) {
			*busy = true;
			if (shm_rx_ready(p->rx[k]))
				return true;
		}
	return false;
}

static void ring_rx_sleeping(struct uroce_backend *be, bool sleeping)
{
	struct ring_priv *p = be->priv;

	for (int i = 0; i < p->n; i++)
		shm_rx_sleeping(p->rx[i], sleeping);
}

/* Each region's fd_of (-1: none) into epfd, level-triggered, tagged. */
static int watch_regions(struct ring_priv *p, int epfd, int (*fd_of)(const struct shm_rx *), uint32_t tag)
{
	for (int i = 0; i < p->n; i++) {
		int fd = fd_of(p->rx[i]);
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = tag };
		if (fd >= 0 && epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
			return -errno;
	}
	return 0;
}

/* The bells, readable until ring_bells reads them. */
static int ring_add_fds(struct uroce_backend *be, int epfd)
{
	return watch_regions(be->priv, epfd, shm_rx_bell_fd, NET_EV_BELL);
}

static unsigned ring_bells(struct uroce_backend *be)
{
	struct ring_priv *p = be->priv;
	unsigned rung = 0, calls = 0;

	for (int i = 0; i < p->n; i++)
		rung += shm_rx_bell_drain(p->rx[i], &calls);
	if (calls)
		UROCE_COUNT_SYSCALL(p->stats, UC_sys_recvmmsg, calls);
	return rung;
}

static int ring_add_serve_fds(struct uroce_backend *be, int epfd)
{
	struct ring_priv *p = be->priv;
	int rc = watch_regions(p, epfd, shm_rx_listen_fd, NET_EV_SERVE);

	if (rc < 0)
		return rc;
	if (p->nep < 2)
		p->epfd[p->nep++] = epfd;
	return 0;
}

static void ring_watch(struct ring_priv *p, int i, bool on)
{
	struct epoll_event ev = { .events = on ? EPOLLIN : 0, .data.u32 = NET_EV_SERVE };
	int fd = shm_rx_listen_fd(p->rx[i]);

	for (int k = 0; fd >= 0 && k < p->nep; k++)
		(void)epoll_ctl(p->epfd[k], EPOLL_CTL_MOD, fd, &ev);
	p->unwatched[i] = !on;
}

/* A listener whose connection could not be accepted (no memory, or no fd
 * and no spare) would stay readable and wake the engine again at once,
 * for ever (level-triggered): it is not watched for a while (a producer
 * meanwhile waits in vain and goes by UDP).  While any is unwatched, the
 * net says so (serve_stalled), and the engine's sleeps end within
 * SERVE_STALLED_NS to serve again (exec/engine.c): watched again, the
 * queue accepted, the spare fd opened anew (shm_rx_serve) -- on an idle
 * device too, where no traffic would bring the next serve pass (issue
 * #13, second review). */
static void ring_serve(struct uroce_backend *be)
{
	struct ring_priv *p = be->priv;
	bool stalled = false;

	for (int i = 0; i < p->n; i++) {
		if (p->unwatched[i])
			ring_watch(p, i, true);
		unsigned accepts;
		int rc = shm_rx_serve(p->rx[i], &accepts);
		UROCE_COUNT_SYSCALL(p->stats, UC_sys_other, accepts);
		if (rc < 0) {
			ring_watch(p, i, false);
			UROCE_COUNT(p->stats, UC_shm_serve_stalled, 1);
			stalled = true;
		}
	}
	atomic_store(&be->net->serve_stalled, stalled);
}

/* Received packets are copied out into the region's buffers, reused by the
 * next poll (no recv_done); a record always carries its traffic class, and
 * its hop limit is 64 (no rx_ip_meta); its fds are the bells. */
const struct uroce_net_ops uroce_ring_ops = {
	.name = "ring",
	.open = ring_open,
	.close = ring_close,
	.flow_open = ring_flow_open,
	.flow_prepare = ring_flow_prepare,
	.flow_close = ring_flow_close,
	.send = ring_send,
	.flow_part_bytes = ring_flow_part_bytes,
	.flow_ref_peer = ring_flow_ref_peer,
	.recv = ring_recv,
	.rx_ready = ring_rx_ready,
	.rx_sleeping = ring_rx_sleeping,
	.add_fds = ring_add_fds,
	.bells = ring_bells,
	.add_serve_fds = ring_add_serve_fds,
	.serve = ring_serve,
};
