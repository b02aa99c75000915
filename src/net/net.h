/* Packet I/O behind a small backend interface.  The transport hands over
 * packets as iovecs (headers, then payload straight from registered memory,
 * then pad + ICRC) and receives UDP payloads (BTH .. ICRC) with addresses.
 *
 * What is where: net.c holds the backends and selects between them, and
 * applies what is common to both paths (counters, fault injection, the
 * pcap tap); udp.c is the UDP socket backend, which reaches every peer;
 * xdp.c is the AF_XDP backend (UROCE_XDP), which an administrator may
 * choose for peers across a link; ring.c is the same-host ring backend, built on the rings of shm.c, for a
 * connected flow whose peer is a uroce process of this network namespace;
 * pcap.c writes the capture. */
#ifndef UROCE_NET_H
#define UROCE_NET_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include "../util/clock.h"
#include "../util/config.h"
#include "../util/limits.h"
#include "../util/log.h"
#include "../util/stats.h"

#define UROCE_TX_BATCH 64
#define UROCE_TX_IOV (UROCE_MAX_SGE + 3)
#define UROCE_RX_BUFS 16      /* datagrams (or GRO bundles) per receive call */
#define UROCE_RX_BUFSZ 65536  /* one GRO bundle: up to 64 KiB of equal-size packets */
#define UROCE_RX_BATCH 1024   /* packets per receive call, bundles split */
#define UROCE_GSO_MAX_SEGS 64 /* packets in one UDP GSO send of ours */
#define UROCE_GRO_MAX_SEGS 128 /* packets in one received bundle (Linux allows 128) */
#define UROCE_GSO_MAX_BYTES 65000

/* One packet to send.  Runs of packets of the same size (the last may be
 * shorter) leave in one UDP GSO send; gso_idx is the packet's place in its
 * run (0 starts a run).  The kernel gives segment k of a GSO send the IPv4
 * Identification k (base 0 for an unconnected DF socket), so the ICRC of
 * that packet is computed with ID k (roce-wire.md §4.2). */
struct uroce_txmsg {
	struct iovec iov[UROCE_TX_IOV];
	int iovcnt;
	uint32_t len;
	uint16_t gso_idx;
	uint8_t flags;          /* NET_PKT_* */
};

/* What a packet carries besides its bytes, on a backend that can say it
 * (the rings: net_flow_ref_peer); the UDP backend neither sends nor
 * receives any, so a packet from the network never has them.
 * NET_PKT_REF: its payload is no data but a reference to the data in the
 * sender's memory, which the receiver copies from there itself
 * (transport/ref.h: the single copy on one host, issue #17); a flow whose
 * packets must go by UDP drops it (net_send), and RC resends it as data.
 * NET_PKT_REF_OK: its sender takes an answer by reference (a READ). */
#define NET_PKT_REF 1u
#define NET_PKT_REF_OK 2u
/* NET_PKT_REF_NAK: this sequence NAK refuses a reference at its PSN (the
 * bytes could not be read there): resend as packets, no loss. */
#define NET_PKT_REF_NAK 4u
#define NET_PKT_FLAGS (NET_PKT_REF | NET_PKT_REF_OK | NET_PKT_REF_NAK)
/* NET_PKT_VIA_RING: received from a same-host ring (set by the receiver,
 * never carried): its bytes were copied out of the ring, not out of the
 * kernel (counted: copy_ring_out_bytes). */
#define NET_PKT_VIA_RING 8u

struct uroce_rxpkt {
	uint8_t *buf;           /* UDP payload: BTH .. ICRC */
	uint32_t len;
	uint8_t sgid[16], dgid[16];
	uint16_t sport;
	uint8_t tos;
	uint8_t ttl;            /* IPv4 TTL / IPv6 hop limit */
	uint16_t ip_id_hint;    /* place in a GRO bundle: the IPv4 ID its sender used */
	uint8_t flags;          /* NET_PKT_*: only a ring's packets have any */
};

/* A QP's transmit flow as the transport holds it (net.c): the backend the
 * selector chose when it opened, kept for its life. */
struct uroce_flow;
/* A backend's own flow; each backend defines it. */
struct uroce_backend_flow;
struct uroce_net;

/* One backend as opened on a net: its ops and its own state. */
struct uroce_backend {
	const struct uroce_net_ops *ops;       /* NULL: not opened */
	struct uroce_net *net;                 /* the config and counters it reports to */
	void *priv;
};

/* A packet I/O backend.  Ops marked optional may be NULL. */
struct uroce_net_ops {
	const char *name;
	/* Sets be->priv; may fill in automatic addresses (be->net->cfg) and
	 * be->net->gso_max_segs.  0 or -errno. */
	int (*open)(struct uroce_backend *be);
	void (*close)(struct uroce_backend *be);
	/* A transmit flow: source GID and UDP source port of one QP; `peer`
	 * and `peer_qpn` are the destination of a connected QP (NULL for UD).
	 * NULL with errno when this backend cannot carry it (the rings: the
	 * peer QP's process has no live region in this namespace, or no ring
	 * is free). */
	struct uroce_backend_flow *(*flow_open)(struct uroce_backend *be, const uint8_t sgid[16],
						uint16_t sport, const uint8_t *peer, uint32_t peer_qpn);
	void (*flow_close)(struct uroce_backend_flow *flow);
	/* Optional: what flow_open to peer will need, found out now, without
	 * the caller's locks (the rings: the peer's region, shm_tx_prepare;
	 * AF_XDP: the peer's link address). */
	void (*flow_prepare)(struct uroce_backend *be, const uint8_t peer[16], uint32_t peer_qpn);
	/* Optional: the UDP source port the flow's packets carry, which the
	 * ICRC covers (UDP: its pool socket's port, not always the one asked
	 * for); NULL: the one asked for. */
	uint16_t (*flow_sport)(const struct uroce_backend_flow *flow);
	/* Sends msgs to dgid; returns how many were sent (the rest are lost, and
	 * retransmission recovers them), or -errno when none did.  Sets
	 * *wake when the receiver sleeps and must be sent a doorbell (the
	 * rings); never clears it. */
	int (*send)(struct uroce_backend_flow *flow, const uint8_t dgid[16], uint8_t tos,
		    struct uroce_txmsg *msgs, int n, bool *wake);
	/* Optional: how many bytes a send call on this flow may hold before
	 * the transport ends it early, at a packet that completes nothing
	 * (tx.c); 0 or NULL: never.  The rings: SHM_PART_BYTES (shm.h). */
	uint32_t (*flow_part_bytes)(const struct uroce_backend_flow *flow);
	/* Optional: the pid of the flow's peer process when this process has
	 * read the peer's memory through it, so that the flow carries
	 * NET_PKT_REF packets (the rings: the probe, shm_tx_ref_peer), with
	 * this process's pid, as the peer names it, in *self; 0: it carries
	 * none.  A reference received for the flow's QP must name that pid. */
	pid_t (*flow_ref_peer)(const struct uroce_backend_flow *flow, pid_t *self);
	/* Optional: sends a doorbell from this flow to dgid, which wakes the
	 * engine sleeping there and is not taken for a packet (UDP: an
	 * 8-byte datagram to its port 4791).  0 or -errno. */
	int (*doorbell)(struct uroce_backend_flow *flow, const uint8_t dgid[16], unsigned slot);
	/* Non-blocking: up to max packets (none when max <= 0), 0 when none
	 * is waiting.  Sets *more when packets are left waiting (a full
	 * batch, a socket or ring not read); sets *busy when packets may
	 * come this way at any moment without waking the engine (a claimed
	 * ring), so that the selector reads the other backend only every few
	 * calls.  Never clears either. */
	int (*recv)(struct uroce_backend *be, struct uroce_rxpkt *pkts, int max, bool *more, bool *busy);
	/* Optional: may a recv call find a packet now?  Without rx_lock,
	 * from any thread, consuming nothing (a hint: a packet may come the
	 * next moment).  Sets *busy as recv does.  NULL: always may. */
	bool (*rx_ready)(struct uroce_backend *be, bool *busy);
	/* Optional: is rx_ready a system call that costs what an empty recv
	 * does (one socket to read, none on the side)?  Then a caller that
	 * would receive right after a look may receive instead of looking. */
	bool (*rx_look_is_recv)(struct uroce_backend *be);
	/* Optional: the packets of the last receive call have been processed
	 * (with net_create_backend all of them are this backend's; UDP and
	 * the rings reuse their buffers on the next call and need none). */
	void (*recv_done)(struct uroce_backend *be, struct uroce_rxpkt *pkts, int n);
	/* Optional: the fds whose readiness means packets, for the engine's
	 * epoll.  0 or -errno. */
	int (*add_fds)(struct uroce_backend *be, int epfd);
	/* Optional: report each received packet's IP traffic class and hop
	 * limit (the GRH a UD receive gets, the pcap tap) or not; the dgid is
	 * always reported. */
	void (*rx_ip_meta)(struct uroce_backend *be, bool on);
	/* Optional: the engine is about to sleep on its fds (true; a receive
	 * call follows before it sleeps) or has woken (false): packets that
	 * come by another way must then wake it (the rings: a doorbell). */
	void (*rx_sleeping)(struct uroce_backend *be, bool sleeping);
	/* Optional: fds that need an answer whatever the engine sleeps on,
	 * added to each of its epoll sets with data.u32 NET_EV_SERVE (the
	 * rings' listening sockets), and their answer, non-blocking, when the
	 * engine woke with one readable (net_serve). */
	int (*add_serve_fds)(struct uroce_backend *be, int epfd);
	void (*serve)(struct uroce_backend *be);
	/* Optional: reads the doorbells that woke the engine through its
	 * NET_EV_BELL fds (add_fds), which stay readable until then; returns
	 * how many. */
	unsigned (*bells)(struct uroce_backend *be);
	/* Optional: receive the packets sent to multicast group mgid on
	 * every address of the device of mgid's family, or stop (mcast_leave
	 * with a group mcast_join took).  Under rx_lock, as recv.  0 or
	 * -errno (-EOPNOTSUPP: this backend carries no multicast). */
	int (*mcast_join)(struct uroce_backend *be, const uint8_t mgid[16]);
	void (*mcast_leave)(struct uroce_backend *be, const uint8_t mgid[16]);
};
/* The engine's epoll tags: its kick is 0, packet fds (add_fds) 1, but a
 * ring's bell (ring.c): doorbells for records already in memory, which ask
 * for no socket to be read, and are read by net_bells. */
#define NET_EV_SERVE 2u
#define NET_EV_BELL 3u

struct uroce_net {
	/* UDP (or net_create_backend's one backend): every flow has one */
	struct uroce_backend wire;
	/* the same-host rings (ops NULL: off, UROCE_SHM=0 or one backend alone) */
	struct uroce_backend ring;
	struct uroce_config *cfg;      /* the device's: the UDP backend fills in automatic addresses */
	struct uroce_stats_page *stats;
	struct pcap_tap *pcap;
	unsigned gso_max_segs;  /* 0: no UDP GSO */
	/* set by each recv: a socket or ring may hold more (a call filled its
	 * batch or left one unread).  False lets a poll loop skip the empty
	 * receive call that would only confirm it (a system call per message). */
	bool rx_more;
	/* the engine woke for its sockets: the next recv reads them, even
	 * when same-host rings let it read them only every few calls */
	atomic_bool rx_sockets_due;
	/* it was set for this receive call (the backend may read what it
	 * reads only now and then: udp.c's forward sockets); under rx_lock */
	bool rx_sockets_woke;
	/* a backend stopped watching a serve fd (a connection could not be
	 * accepted: ring.c): the engine's sleeps end after SERVE_STALLED_NS
	 * and serve again (exec/engine.c), or an idle device never would */
	atomic_bool serve_stalled;
	unsigned ring_polls;    /* receive calls with a ring busy (SOCKET_EVERY, net.c) */
	atomic_uint fault_tx_seq, fault_rx_seq;
	atomic_ulong fault_rng;
	/* The high bits of every QPN of this device (QPN = qpn_slot <<
	 * SHARE_SLOT_SHIFT | index, obj/qp.c): its slot in each shared
	 * address's registry (net/share.h), the same for all its GIDs, or a
	 * random one when no address is shared. */
	unsigned qpn_slot;
	/* per GID: its registry when the address is shared (UROCE_ADDR),
	 * NULL otherwise (udp.c's, read by ring.c) */
	struct share *share[UROCE_MAX_GIDS];
};

/* Might net_recv find a packet now?  Without rx_lock, from any thread
 * (exec/progress.c: a polling application takes rx_lock only when it
 * might, issue #14).  The sockets are looked at every SOCKET_EVERY-th
 * call while a ring is busy, as net_recv reads them.  With `skip_call`,
 * a look at the sockets that would cost a system call as dear as the
 * receive itself (rx_look_is_recv) is not made: the answer is "may". */
bool net_rx_ready(struct uroce_net *net, bool skip_call);

/* UDP and the same-host rings (when cfg->shm). */
struct uroce_net *net_create(struct uroce_config *cfg, struct uroce_stats_page *stats);
/* On one given backend alone, rings off (the white-box tests' fake one). */
struct uroce_net *net_create_backend(struct uroce_config *cfg, struct uroce_stats_page *stats,
				     const struct uroce_net_ops *ops);
void net_destroy(struct uroce_net *net);
/* On a ring when peer (NULL for UD) has a live region in this namespace
 * and rings are on, else by UDP, for the flow's life: its packets to the
 * peer keep their order on one path (a packet to another GID goes by UDP). */
/* The MTU of the route from sgid to dgid (IP_MTU / IPV6_MTU of a probe
 * socket bound to sgid and connected to dgid: the outgoing interface's MTU
 * or a smaller path MTU the kernel learned), or -errno when there is no
 * route.  Path MTUs are checked against it at RTR (obj/qp.c). */
int net_route_mtu(const uint8_t sgid[16], const uint8_t dgid[16]);
struct uroce_flow *net_flow_open(struct uroce_net *net, const uint8_t sgid[16], uint16_t sport,
				 const uint8_t *peer, uint32_t peer_qpn);
void net_flow_close(struct uroce_net *net, struct uroce_flow *flow);
/* Before net_flow_open to peer, with no lock held (flow_prepare). */
void net_flow_prepare(struct uroce_net *net, const uint8_t peer[16], uint32_t peer_qpn);
/* The UDP source port the flow's packets carry, which may differ from the
 * one asked for (a shared socket's, udp.c): the QP computes its ICRC with
 * it, and net_send sends from it. */
uint16_t net_flow_sport(const struct uroce_flow *flow);
uint32_t net_flow_part_bytes(struct uroce_net *net, const struct uroce_flow *flow);
/* The flow's peer's pid when the flow carries references, with this
 * process's pid in *self (uroce_net_ops.flow_ref_peer); 0 otherwise. */
pid_t net_flow_ref_peer(struct uroce_net *net, const struct uroce_flow *flow, pid_t *self);
/* Sends with fault injection, pcap and counters applied. */
int net_send(struct uroce_net *net, struct uroce_flow *flow, const uint8_t sgid[16],
	     const uint8_t dgid[16], uint8_t tos, struct uroce_txmsg *msgs, int n);
int net_recv(struct uroce_net *net, struct uroce_rxpkt *pkts, int max);
void net_recv_done(struct uroce_net *net, struct uroce_rxpkt *pkts, int n);
int net_add_fds(struct uroce_net *net, int epfd);
/* The engine woke for a NET_EV_BELL fd: read the doorbells (counted). */
void net_bells(struct uroce_net *net);
/* add_serve_fds and serve of every backend (struct uroce_net_ops). */
int net_add_serve_fds(struct uroce_net *net, int epfd);
void net_serve(struct uroce_net *net);
void net_rx_ip_meta(struct uroce_net *net, bool on);
/* Multicast groups: the wire backend's mcast_join / mcast_leave (the
 * rings carry no multicast: a UD flow always goes by UDP).  Under rx_lock. */
int net_mcast_join(struct uroce_net *net, const uint8_t mgid[16]);
void net_mcast_leave(struct uroce_net *net, const uint8_t mgid[16]);
void net_rx_sleeping(struct uroce_net *net, bool sleeping);
/* UROCE_FAULT_DROP_TX: true when the next packet to build must be dropped. */
bool net_fault_tx(struct uroce_net *net);


/* pcap.c: a capture Wireshark opens as Ethernet/IP/UDP/RoCEv2. */
struct pcap_tap *pcap_tap_open(const char *path);
void pcap_tap_close(struct pcap_tap *tap);
void pcap_tap_write(struct pcap_tap *tap, const uint8_t sgid[16], const uint8_t dgid[16],
		    uint16_t sport, uint16_t dport, uint16_t ip_id, uint8_t tos, uint8_t ttl,
		    const struct iovec *iov, int iovcnt);

/* udp.c: reaches any peer; offers doorbells. */
extern const struct uroce_net_ops uroce_udp_ops;
/* xdp.c: AF_XDP on the interface of the device's one IPv4 address
 * (UROCE_XDP), alone: no rings, no doorbells, no multicast. */
extern const struct uroce_net_ops uroce_xdp_ops;
/* ring.c: same-host peers only, never alone -- its doorbells and its
 * flows' packets to other GIDs go by UDP (net.c). */
extern const struct uroce_net_ops uroce_ring_ops;


/* Received packets go to the pcap once their ICRC check has told the IPv4 ID. */
static inline void net_tap_rx(struct uroce_net *net, const struct uroce_rxpkt *p, uint16_t ip_id)
{
	if (net->pcap && !(p->flags & NET_PKT_REF)) {  /* as net_send: no wire carries a reference */
		struct iovec iov = { p->buf, p->len };
		pcap_tap_write(net->pcap, p->sgid, p->dgid, p->sport, 4791, ip_id, p->tos, p->ttl, &iov, 1);
	}
}
/* rdma_cm (cm/) on shared addresses (share.h): a port bound by this
 * process on GID index gid_index (cm/ claims a wildcard GID by GID), 0 or
 * -EADDRINUSE when another process of the address holds it; released; this
 * process runs a CM (QP1).  On an
 * address nobody shares they do nothing (the process's own table is
 * cm/'s).  A CM comm ID carries net->qpn_slot in its high bits
 * (SHARE_COMM_ID_SHIFT), so a reply finds the process. */
int net_cm_port_claim(struct uroce_net *net, int gid_index, uint16_t ps, uint16_t port);
void net_cm_port_release(struct uroce_net *net, int gid_index, uint16_t ps, uint16_t port);
void net_cm_enable(struct uroce_net *net);

#endif
