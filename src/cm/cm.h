/* Connection management: librdmacm's API (rdma_cm.c, addrinfo.c) over an
 * IB CM of our own (engine.c) that speaks the kernel's MADs on QP1
 * (shared/docs/cm-wire.md).  docs/architecture.md, "Connection management".
 *
 * The objects (ids.c) sit below both.
 *
 * One lock, cm.lock, guards every id, channel, connection and the port
 * table: connection management is no fast path, and one lock makes the
 * protocol's cross-object steps (a REQ creating a child id on a listener's
 * channel, a destroy leaving a connection to finish its DREQ) plain. */
#ifndef UROCE_CM_H
#define UROCE_CM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* An event as the application gets it: the rdma_cm_event first, then the
 * private data it points to, valid until rdma_ack_cm_event (§2.1). */
struct cm_event {
	struct rdma_cm_event ev;
	struct cm_event *next;
	bool dead;                    /* its id went first: dropped when read */
	const void *mc;               /* a MULTICAST_JOIN's or _ERROR's group (struct cm_mc), compared only */
	uint8_t priv[256];
};

struct cm_channel {
	struct rdma_event_channel ch; /* fd: an eventfd (semaphore) counting the queued events */
	struct cm_event *head, **tail;
	int nids;                     /* ids on it */
	bool orphan;                  /* destroyed with ids on it: freed with the last */
	int readers;                  /* threads in rdma_get_cm_event on it */
	bool closed;                  /* destroyed while read: kept, its readers blocked for good */
};

/* The kernel's ucma max_backlog: a listener's unread requests beyond its
 * backlog are dropped without a REJ, and the peer resends (§4.3). */
#define CM_MAX_BACKLOG 1024

enum cm_id_state {
	ID_IDLE, ID_BOUND, ID_ADDR_QUERY, ID_ADDR_RESOLVED, ID_ROUTE_QUERY, ID_ROUTE_RESOLVED,
	ID_LISTEN, ID_CONNECT, ID_CONNECTED, ID_DISCONNECT,
};

/* The IB CM's connection states (§4.2) */
enum cm_conn_state {
	CS_IDLE, CS_REQ_SENT, CS_REP_RCVD, CS_REQ_RCVD, CS_REP_SENT, CS_ESTABLISHED,
	CS_DREQ_SENT, CS_DREQ_RCVD, CS_TIMEWAIT, CS_SIDR_REQ_SENT,
};

struct cm_id;

/* A multicast group an id joined (rdma_join_multicast): leaving it or
 * destroying the id detaches the QP it attached, as librdmacm does. */
struct cm_mc {
	struct cm_mc *next;
	struct sockaddr_storage addr;  /* as joined: rdma_leave_multicast finds it by it */
	union ibv_gid mgid;
	bool sendonly;                 /* RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: no attach, no detach */
};

/* One connection's protocol state.  It outlives its id when the id is
 * destroyed mid-protocol: the kernel's CM still sends the DREQ, REJ or
 * DREP then (§2.2), and a timewait still guards the comm ID (§4.1). */
struct cm_conn {
	struct cm_conn *next;
	struct cm_id *id;              /* NULL once the id is gone */
	enum cm_conn_state state;
	uint32_t local_id, remote_id;  /* comm IDs (§3.4) */
	uint64_t remote_guid;          /* network order, as on the wire */
	uint64_t tid;                  /* the REQ's, reused by every message (§3.2) */
	uint8_t peer_gid[16];          /* where our messages go (REQ PrimaryLocalGID, §3.8) */
	int sgid_index;
	uint32_t local_qpn, remote_qpn;
	uint32_t rq_psn, sq_psn;       /* ours to receive from, ours to send from (§6.1 item 1) */
	uint8_t resp_res, init_depth;  /* this side's, after the swap (§2.6) */
	uint8_t retry, rnr, mtu, ack_timeout, srq, flow_control, qp_type;
	uint8_t tclass, hop_limit;
	uint32_t flow_label;
	uint8_t mad[256];              /* the last message sent, resent on a timeout */
	uint64_t due_ns;               /* 0: no timer */
	uint32_t timeout_ms;
	int retries;                   /* resends left */
};

/* An rdma_cm_id.  librdmacm's own helpers that rsockets call directly read
 * two fields of librdmacm's private id past the public struct: cma_dev at
 * byte 416 (NULL: it scans the devices itself) and sync at byte 448
 * (cm-wire.md §1.2); the layout keeps both. */
struct cm_id {
	struct rdma_cm_id id;
	void *compat_cma_dev;
	uint8_t compat_pad[24];
	int compat_sync;
	struct cm_channel *chan;
	enum cm_id_state state;
	int unacked;                   /* events reported, not acked (destroy / migrate wait) */
	int gid_index;                 /* -1: bound to the wildcard */
	uint16_t port;                 /* host order, 0: none */
	bool port_held;
	struct cm_id *listener;        /* a CONNECT_REQUEST's child: its listener */
	int backlog;
	int reqs_unread;               /* a listener's CONNECT_REQUESTs queued, not read */
	bool sync_pending;             /* a sync listener's child: its channel comes when its request is read */
	struct cm_conn *conn;
	bool connect_error;            /* a CONNECT_ERROR was reported: no REJECTED / DISCONNECTED */
	bool has_path;
	struct ibv_sa_path_rec path;
	uint8_t tos, ack_timeout;
	bool tos_set, ack_timeout_set;
	int reuseaddr, afonly;
	/* what the CONNECT_REQUEST told (passive), for accept's defaults */
	uint8_t req_resp_res, req_init_depth;
	/* rdma_create_ep: a passive id's QP attributes and PD for
	 * rdma_get_request, an active one's ai_connect */
	struct ibv_qp_init_attr *ep_qp_attr;
	struct ibv_pd *ep_pd;
	void *ep_connect;
	size_t ep_connect_len;
	uint32_t ud_qkey;
	struct cm_mc *mcs;             /* groups joined */
	struct cm_id *next_all;
};
_Static_assert(offsetof(struct cm_id, compat_cma_dev) == 416, "librdmacm's cma_dev offset (cm-wire.md §1.2)");
_Static_assert(offsetof(struct cm_id, compat_sync) == 448, "librdmacm's sync offset (cm-wire.md §1.2)");

static inline struct cm_id *to_cmid(struct rdma_cm_id *id) { return (struct cm_id *)id; }

struct cm_state {
	pthread_mutex_t lock;
	pthread_cond_t cond;           /* acks and sync-mode waits */
	bool started;
	bool exiting;                  /* the exit sweep ran: the CM thread is parked */
	struct ibv_context *ctx;       /* the one context every id shares (§2.1) */
	struct ibv_pd *pd;             /* ids' default PD */
	struct cm_id *ids;
	struct cm_conn *conns;
	int ngids;
	uint8_t gids[16][16];
	uint64_t guid;                 /* network order */
	uint8_t active_mtu;
	uint8_t ack_delay;
	uint32_t max_rd_atom, max_init_rd_atom;
};
extern struct cm_state cm;

/* engine.c */
int cm_start_locked(void);
void cm_kick(void);
uint64_t cm_now_ns(void);
int cm_gid_index(const uint8_t gid[16]);
/* A port on a shared address, against the other processes of it (0 or
 * EADDRINUSE; net/share.h); let go. */
int cm_port_claim(int gid_index, uint16_t ps, uint16_t port);
void cm_port_release(int gid_index, uint16_t ps, uint16_t port);
struct cm_conn *cm_conn_new(struct cm_id *id);
/* The protocol steps an id asks for; each sends its MAD (cm.lock held). */
int cm_send_req(struct cm_id *c, const struct rdma_conn_param *p);
int cm_send_rep(struct cm_id *c, const struct rdma_conn_param *p);
int cm_send_rtu(struct cm_conn *k);
int cm_send_rej(struct cm_conn *k, uint16_t reason, const void *pd, uint8_t len);
int cm_send_dreq(struct cm_conn *k);
int cm_send_drep(struct cm_conn *k);
int cm_send_sidr_req(struct cm_id *c, const struct rdma_conn_param *p);
int cm_send_sidr_rep(struct cm_id *c, int status, const struct rdma_conn_param *p);
/* The id is being destroyed: its connection does what the kernel's CM
 * does then (§2.2), on its own. */
void cm_conn_detach(struct cm_conn *k);
/* QP attributes rdma_init_qp_attr gives (§2.5). */
int cm_qp_attr(struct cm_id *c, struct ibv_qp_attr *a, int *mask);
/* Moves the id's QP to RTR then RTS from the connection (§2.5). */
int cm_qp_rtr_rts(struct cm_id *c);
void cm_qp_to_err(struct cm_id *c);

/* ids.c: the objects both rdma_cm.c and engine.c use (cm.lock held) */
struct cm_channel *cm_channel_new(void);
void cm_channel_free(struct cm_channel *ch);
/* Queues an event for an id, with its private data. */
void cm_report(struct cm_id *c, enum rdma_cm_event_type type, int status, const void *priv, uint8_t priv_len);
struct cm_event *cm_report_ev(struct cm_id *c, enum rdma_cm_event_type type, int status);
/* A new id on ch (NULL: synchronous, a channel of its own), on cm.ids. */
struct cm_id *cm_id_new(struct cm_channel *ch, void *context, enum rdma_port_space ps, enum ibv_qp_type qpt);
void cm_id_attach_device(struct cm_id *c, int gid_index);
/* A REQ / SIDR_REQ for a listener: the new child id, or NULL (no memory). */
struct cm_id *cm_child_new(struct cm_id *listener);
/* A child never reported (no memory for its connection or event): gone. */
void cm_child_drop(struct cm_id *child);
/* Its CONNECT_REQUEST was read: a sync listener's child gets its channel. */
void cm_child_taken(struct cm_id *child);
/* The id's queued events, from its channel to another. */
void cm_events_move(struct cm_id *c, struct cm_channel *to);
/* The id is freed: an id's channel counts it no more (freed when the id
 * was synchronous or the channel was destroyed). */
void cm_id_leave_channel(struct cm_id *c);
/* The listener for port space / port and local address, or NULL. */
struct cm_id *cm_find_listener(uint16_t ps, uint16_t port, int gid_index, bool *port_has_listener);

#endif
