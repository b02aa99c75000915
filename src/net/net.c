/* The selector and the backend-independent part of packet I/O (net.h).
 *
 * It holds the backends -- UDP and the same-host rings, or one given
 * backend alone -- and chooses per flow: the ring of its peer when there
 * is one, else UDP, for the flow's life.  Receiving takes the rings first
 * and the sockets every SOCKET_EVERY-th call while a ring is busy.  A
 * doorbell is the rings', by the receiver's bell (ring.c), or by UDP where
 * it has none: the flow's UDP side then rings it.  Counters, fault injection
 * for deterministic tests (UROCE_FAULT_DROP_TX/RX) and the pcap tap apply
 * to both paths alike. */
#include "net.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "../wire/hdr.h"
#include "share.h"
#include <sys/random.h>
#include <unistd.h>
#include "../wire/ip.h"

/* While a ring is busy an empty receive call reads the rings alone (tens of
 * ns) and the sockets (0.3-1 us) every SOCKET_EVERY-th time: a UDP peer's
 * packet then waits at most that many ring polls (a few us), and a ring
 * packet rarely comes while the poller sits in recvmmsg. */
#define SOCKET_EVERY 64

/* A flow on a ring keeps its UDP side too: its doorbells leave from that
 * socket, and a packet to another GID than the ring's (an AV changed while
 * the source port did not, so the flow stayed) cannot go into the ring. */
struct uroce_flow {
	struct uroce_backend_flow *wire;  /* always */
	struct uroce_backend_flow *ring;  /* NULL: the flow goes by the wire */
	uint8_t peer[16];                 /* the GID the ring reaches */
	unsigned peer_slot;               /* and its owner's QPN slot: the doorbell names it */
	uint16_t sport;                   /* what its packets carry (net_flow_sport) */
};

static int backend_open(struct uroce_net *net, struct uroce_backend *be, const struct uroce_net_ops *ops)
{
	be->net = net;
	be->ops = ops;
	int rc = ops->open(be);
	if (rc < 0)
		be->ops = NULL;
	return rc;
}

static void backend_close(struct uroce_backend *be)
{
	if (be->ops)
		be->ops->close(be);
	be->ops = NULL;
}

static struct uroce_net *net_open(struct uroce_config *cfg, struct uroce_stats_page *stats,
				  const struct uroce_net_ops *wire, bool rings)
{
	struct uroce_net *net = calloc(1, sizeof(*net));
	int rc;

	if (!net)
		return NULL;
	net->cfg = cfg;
	net->stats = stats;
	atomic_init(&net->fault_rng, 0x9E3779B97F4A7C15ul ^ ((unsigned long)cfg->fault_seed * 0xBF58476D1CE4E5B9ul));
	/* a QPN's high bits: random unless a shared address's registry gives
	 * them (udp.c); stale packets of another process that used this
	 * address before are then for QPNs nobody has */
	uint16_t r;
	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r = (uint16_t)getpid();
	net->qpn_slot = SHARE_SLOT_FIRST + r % (SHARE_SLOT_LAST - SHARE_SLOT_FIRST + 1);
	/* the wire first: it fills in automatic addresses, which the rings'
	 * regions are named after (binding them made them ours) */
	rc = backend_open(net, &net->wire, wire);
	if (rc == 0 && rings && cfg->shm) {
		rc = backend_open(net, &net->ring, &uroce_ring_ops);
		if (rc < 0)
			backend_close(&net->wire);
	}
	if (rc < 0) {
		free(net);
		errno = -rc;
		return NULL;
	}
	if (cfg->pcap_path[0]) {
		net->pcap = pcap_tap_open(cfg->pcap_path);
		if (!net->pcap)
			LOG_ERR("uroce: cannot write pcap %s", cfg->pcap_path);
		else
			net_rx_ip_meta(net, true); /* the tap records them */
	}
	return net;
}

struct uroce_net *net_create(struct uroce_config *cfg, struct uroce_stats_page *stats)
{
	/* AF_XDP: the peers are past the interface, none through a ring */
	if (cfg->xdp)
		return net_open(cfg, stats, &uroce_xdp_ops, false);
	return net_open(cfg, stats, &uroce_udp_ops, true);
}

struct uroce_net *net_create_backend(struct uroce_config *cfg, struct uroce_stats_page *stats,
				     const struct uroce_net_ops *ops)
{
	return net_open(cfg, stats, ops, false);
}

void net_destroy(struct uroce_net *net)
{
	if (!net)
		return;
	if (net->pcap)
		pcap_tap_close(net->pcap);
	backend_close(&net->ring);
	backend_close(&net->wire);
	free(net);
}

struct uroce_flow *net_flow_open(struct uroce_net *net, const uint8_t sgid[16], uint16_t sport,
				 const uint8_t *peer, uint32_t peer_qpn)
{
	struct uroce_flow *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->wire = net->wire.ops->flow_open(&net->wire, sgid, sport, peer, peer_qpn);
	if (!f->wire) {
		int e = errno;
		free(f);
		errno = e;
		return NULL;
	}
	f->sport = net->wire.ops->flow_sport ? net->wire.ops->flow_sport(f->wire) : sport;
	if (peer && net->ring.ops) {
		f->ring = net->ring.ops->flow_open(&net->ring, sgid, f->sport, peer, peer_qpn);
		if (f->ring) {
			memcpy(f->peer, peer, 16);
			f->peer_slot = share_slot_of(peer_qpn);
		}
	}
	return f;
}

void net_flow_prepare(struct uroce_net *net, const uint8_t peer[16], uint32_t peer_qpn)
{
	if (net->ring.ops && net->ring.ops->flow_prepare)
		net->ring.ops->flow_prepare(&net->ring, peer, peer_qpn);
	if (net->wire.ops->flow_prepare)  /* AF_XDP: the peer's link address */
		net->wire.ops->flow_prepare(&net->wire, peer, peer_qpn);
}

void net_flow_close(struct uroce_net *net, struct uroce_flow *flow)
{
	if (!flow)
		return;
	if (flow->ring)
		net->ring.ops->flow_close(flow->ring);
	net->wire.ops->flow_close(flow->wire);
	free(flow);
}

uint16_t net_flow_sport(const struct uroce_flow *flow)
{
	return flow->sport;
}

uint32_t net_flow_part_bytes(struct uroce_net *net, const struct uroce_flow *flow)
{
	if (!flow)
		return 0;
	if (flow->ring)
		return net->ring.ops->flow_part_bytes ? net->ring.ops->flow_part_bytes(flow->ring) : 0;
	return net->wire.ops->flow_part_bytes ? net->wire.ops->flow_part_bytes(flow->wire) : 0;
}

pid_t net_flow_ref_peer(struct uroce_net *net, const struct uroce_flow *flow, pid_t *self)
{
	*self = 0;
	if (!flow)
		return 0;
	if (flow->ring)
		return net->ring.ops->flow_ref_peer ? net->ring.ops->flow_ref_peer(flow->ring, self) : 0;
	return net->wire.ops->flow_ref_peer ? net->wire.ops->flow_ref_peer(flow->wire, self) : 0;
}

/* Packets of a ring's flow that go by the wire after all lose what only
 * the ring carries: a reference is dropped, as a lost packet (RC resends
 * it as data: a resent packet is never a reference, transport/ref.h), and
 * the rest are kept in order.  Returns how many are left. */
static int wire_only(struct uroce_net *net, struct uroce_txmsg *msgs, int n)
{
	int k = 0;

	for (int i = 0; i < n; i++) {
		if (msgs[i].flags & NET_PKT_REF) {
			UROCE_COUNT(net->stats, UC_ref_dropped, 1);
			continue;
		}
		if (k != i)
			msgs[k] = msgs[i];
		k++;
	}
	return k;
}

static bool fault_hit(struct uroce_net *net, atomic_uint *seq, unsigned every, double pct)
{
	if (every)
		return (atomic_fetch_add_explicit(seq, 1, memory_order_relaxed) + 1) % every == 0;
	if (pct <= 0)
		return false;
	/* a seeded xorshift: the same seed drops the same packet numbers */
	unsigned long x = atomic_load_explicit(&net->fault_rng, memory_order_relaxed), y;
	do {
		y = x ^ (x << 13);
		y ^= y >> 7;
		y ^= y << 17;
	} while (!atomic_compare_exchange_weak(&net->fault_rng, &x, y));
	return (double)(y % 1000000) < pct * 10000.0;
}

/* The peer's engine sleeps on its sockets and handed over no bell (ring.c):
 * a doorbell datagram wakes it.  One that cannot leave is counted; the
 * peer's own timer or the next doorbell wakes it. */
static void ring_doorbell(struct uroce_net *net, struct uroce_flow *flow, const uint8_t dgid[16])
{
	const struct uroce_net_ops *w = net->wire.ops;

	if (w->doorbell && w->doorbell(flow->wire, dgid, flow->peer_slot) == 0) {
		UROCE_COUNT(net->stats, UC_shm_doorbells_tx, 1);
		UROCE_COUNT(net->stats, UC_shm_doorbells_udp, 1);
	}
	else
		UROCE_COUNT(net->stats, UC_tx_errors, 1);
}

/* The route refused a packet as larger than its MTU (DF is set, §1.2):
 * modify_qp checks the path MTU against the route (obj/qp.c), so the route
 * changed since, or an interface's MTU did.  Counted, and said once: the
 * transport retransmits it until retry_cnt runs out, as a lost packet. */
static void tx_too_big(struct uroce_net *net, const struct uroce_txmsg *m, const uint8_t dgid[16])
{
	static atomic_bool told;
	char d[64];

	UROCE_COUNT(net->stats, UC_tx_too_big, 1);
	if (!atomic_exchange(&told, true))
		LOG_ERR("uroce: a %u-byte packet to %s is larger than the route's MTU (EMSGSIZE): the QP's path "
			"MTU does not fit the link", m->len, gid_format(dgid, d, sizeof(d)));
}

/* The message payload of msgs: every iovec but the headers (the first)
 * and the pad and ICRC (the last), tx.c's layout; a reference is no
 * payload (its one copy is the receiver's). */
static uint64_t msgs_payload(const struct uroce_txmsg *msgs, int n)
{
	uint64_t bytes = 0;

	for (int i = 0; i < n; i++)
		if (!(msgs[i].flags & NET_PKT_REF))
			for (int k = 1; k < msgs[i].iovcnt - 1; k++)
				bytes += msgs[i].iov[k].iov_len;
	return bytes;
}

int net_send(struct uroce_net *net, struct uroce_flow *flow, const uint8_t sgid[16],
	     const uint8_t dgid[16], uint8_t tos, struct uroce_txmsg *msgs, int n)
{
	uint64_t bytes = 0;
	bool wake = false;
	int sent;

	if (n == 0)
		return 0;
	if (net->pcap)
		for (int i = 0; i < n; i++)
			/* a reference is not what any wire carries, and the
			 * dissector would take it for a short payload */
			if (!(msgs[i].flags & NET_PKT_REF))
				pcap_tap_write(net->pcap, sgid, dgid, flow->sport, ROCE_UDP_PORT, msgs[i].gso_idx, tos, 64,
				       msgs[i].iov, msgs[i].iovcnt);
	/* only a flow that has a ring ever had a reference to send */
	bool had_ring = flow->ring != NULL;
	bool on_ring = had_ring && !memcmp(dgid, flow->peer, 16);
	sent = on_ring ? net->ring.ops->send(flow->ring, dgid, tos, msgs, n, &wake) : -EPIPE;
	if (sent > 0)
		UROCE_COUNT(net->stats, UC_copy_ring_in_bytes, msgs_payload(msgs, sent));
	if (on_ring && sent == -EPIPE) {
		/* its ring is not this process's (a forked child's flow on its
		 * parent's ring: shm.c, "fork"): the flow goes by UDP for the
		 * rest of its life.  Nothing went into the ring, so nothing
		 * there overtakes what follows */
		net->ring.ops->flow_close(flow->ring);
		flow->ring = NULL;
		wake = false;
	}
	if (sent == -EPIPE) {
		if (had_ring)
			n = wire_only(net, msgs, n);
		sent = n ? net->wire.ops->send(flow->wire, dgid, tos, msgs, n, &wake) : 0;
		if (sent > 0)
			UROCE_COUNT(net->stats, UC_copy_to_kernel_bytes, msgs_payload(msgs, sent));
	}
	if (wake)
		ring_doorbell(net, flow, dgid);
	if (sent < 0) {
		UROCE_COUNT(net->stats, UC_tx_errors, 1);
		if (sent == -EMSGSIZE)
			tx_too_big(net, msgs, dgid);
		return sent;
	}
	for (int i = 0; i < sent; i++)
		bytes += msgs[i].len;
	UROCE_COUNT(net->stats, UC_tx_packets, (uint64_t)sent);
	UROCE_COUNT(net->stats, UC_tx_bytes, bytes);
	if (sent < n)
		UROCE_COUNT(net->stats, UC_tx_errors, (uint64_t)(n - sent));
	return sent;
}

bool net_fault_tx(struct uroce_net *net)
{
	struct uroce_config *cfg = net->cfg;

	if (!cfg->fault_drop_tx && cfg->fault_pct_tx <= 0)
		return false;
	if (!fault_hit(net, &net->fault_tx_seq, cfg->fault_drop_tx, cfg->fault_pct_tx))
		return false;
	UROCE_COUNT(net->stats, UC_drop_injected, 1);
	return true;
}

/* Rings first; the sockets then, unless a ring is busy and this is not the
 * SOCKET_EVERY-th call and the engine did not wake for them. */
static int recv_backends(struct uroce_net *net, struct uroce_rxpkt *pkts, int max)
{
	bool more = false, busy = false;
	int got = 0;

	if (net->ring.ops)
		/* room for one socket bundle is kept */
		got = net->ring.ops->recv(&net->ring, pkts, max - UROCE_GRO_MAX_SEGS, &more, &busy);
	bool due = atomic_load_explicit(&net->rx_sockets_due, memory_order_relaxed);
	if (busy && !due && ++net->ring_polls % SOCKET_EVERY) {
		net->rx_more = more;
		return got;
	}
	if (due)
		atomic_store_explicit(&net->rx_sockets_due, false, memory_order_relaxed);
	net->rx_sockets_woke = due;
	int r = net->wire.ops->recv(&net->wire, pkts + got, max - got, &more, &busy);
	net->rx_more = more;
	if (r < 0)
		return got ? got : r;
	return got + r;
}

bool net_rx_ready(struct uroce_net *net, bool skip_call)
{
	/* this thread's count: the pollers are many, and no locked
	 * instruction belongs in a poll loop */
	static _Thread_local unsigned ring_looks;
	bool busy = false;

	if (net->ring.ops && (!net->ring.ops->rx_ready || net->ring.ops->rx_ready(&net->ring, &busy)))
		return true;
	if (atomic_load_explicit(&net->rx_sockets_due, memory_order_relaxed))
		return true;
	if (busy && ++ring_looks % SOCKET_EVERY)
		return false;
	bool skip = skip_call && net->wire.ops->rx_look_is_recv && net->wire.ops->rx_look_is_recv(&net->wire);
	if (!skip && net->wire.ops->rx_ready && !net->wire.ops->rx_ready(&net->wire, &busy))
		return false;
	/* the receive call this leads to reads the sockets, not only the
	 * rings (recv_backends: its own count would skip them 63 times in 64) */
	if (busy)
		atomic_store_explicit(&net->rx_sockets_due, true, memory_order_relaxed);
	return true;
}

int net_recv(struct uroce_net *net, struct uroce_rxpkt *pkts, int max)
{
	struct uroce_config *cfg = net->cfg;
	int n = recv_backends(net, pkts, max);
	uint64_t bytes = 0;

	if (n <= 0)
		return n;
	for (int i = 0; i < n; i++)
		bytes += pkts[i].len;
	UROCE_COUNT(net->stats, UC_rx_packets, (uint64_t)n);
	UROCE_COUNT(net->stats, UC_rx_bytes, bytes);
	if (cfg->fault_drop_rx || cfg->fault_pct_rx > 0) {
		int k = 0;
		for (int i = 0; i < n; i++) {
			if (fault_hit(net, &net->fault_rx_seq, cfg->fault_drop_rx, cfg->fault_pct_rx)) {
				UROCE_COUNT(net->stats, UC_drop_injected, 1);
				continue;
			}
			if (k != i)
				pkts[k] = pkts[i];
			k++;
		}
		n = k;
	}
	return n;
}

void net_recv_done(struct uroce_net *net, struct uroce_rxpkt *pkts, int n)
{
	if (net->ring.ops && net->ring.ops->recv_done)
		net->ring.ops->recv_done(&net->ring, pkts, n);
	if (net->wire.ops->recv_done)
		net->wire.ops->recv_done(&net->wire, pkts, n);
}

int net_add_fds(struct uroce_net *net, int epfd)
{
	int rc = 0;

	if (net->ring.ops && net->ring.ops->add_fds)
		rc = net->ring.ops->add_fds(&net->ring, epfd);
	if (rc == 0 && net->wire.ops->add_fds)
		rc = net->wire.ops->add_fds(&net->wire, epfd);
	return rc;
}

void net_bells(struct uroce_net *net)
{
	if (net->ring.ops && net->ring.ops->bells) {
		unsigned n = net->ring.ops->bells(&net->ring);
		if (n)
			UROCE_COUNT(net->stats, UC_shm_doorbells_rx, n);
	}
}

int net_mcast_join(struct uroce_net *net, const uint8_t mgid[16])
{
	return net->wire.ops->mcast_join ? net->wire.ops->mcast_join(&net->wire, mgid) : -EOPNOTSUPP;
}

void net_mcast_leave(struct uroce_net *net, const uint8_t mgid[16])
{
	if (net->wire.ops->mcast_leave)
		net->wire.ops->mcast_leave(&net->wire, mgid);
}

int net_add_serve_fds(struct uroce_net *net, int epfd)
{
	int rc = 0;

	if (net->ring.ops && net->ring.ops->add_serve_fds)
		rc = net->ring.ops->add_serve_fds(&net->ring, epfd);
	if (rc == 0 && net->wire.ops->add_serve_fds)
		rc = net->wire.ops->add_serve_fds(&net->wire, epfd);
	return rc;
}

void net_serve(struct uroce_net *net)
{
	if (net->ring.ops && net->ring.ops->serve)
		net->ring.ops->serve(&net->ring);
	if (net->wire.ops->serve)
		net->wire.ops->serve(&net->wire);
}

void net_rx_ip_meta(struct uroce_net *net, bool on)
{
	on = on || net->pcap;
	if (net->ring.ops && net->ring.ops->rx_ip_meta)
		net->ring.ops->rx_ip_meta(&net->ring, on);
	if (net->wire.ops->rx_ip_meta)
		net->wire.ops->rx_ip_meta(&net->wire, on);
}

void net_rx_sleeping(struct uroce_net *net, bool sleeping)
{
	if (net->ring.ops && net->ring.ops->rx_sleeping)
		net->ring.ops->rx_sleeping(&net->ring, sleeping);
	if (net->wire.ops->rx_sleeping)
		net->wire.ops->rx_sleeping(&net->wire, sleeping);
}

/* ------------------------------------------------------------ rdma_cm (cm/) */

/* The registry of GID gid_index's address; NULL: the address is this
 * process's alone, with nothing to claim against. */
static struct share *cm_share(struct uroce_net *net, int gid_index)
{
	return gid_index >= 0 && gid_index < UROCE_MAX_GIDS ? net->share[gid_index] : NULL;
}

int net_cm_port_claim(struct uroce_net *net, int gid_index, uint16_t ps, uint16_t port)
{
	struct share *sh = cm_share(net, gid_index);
	return sh ? share_port_claim(sh, ps, port) : 0;
}

void net_cm_port_release(struct uroce_net *net, int gid_index, uint16_t ps, uint16_t port)
{
	struct share *sh = cm_share(net, gid_index);
	if (sh)
		share_port_release(sh, ps, port);
}

void net_cm_enable(struct uroce_net *net)
{
	for (int i = 0; i < UROCE_MAX_GIDS; i++)
		if (net->share[i])
			share_cm_enable(net->share[i]);
}
