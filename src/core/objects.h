/* Core objects of the uroce device.  The verbs structs are embedded first so
 * that provider objects convert with container_of-style helpers (to_uqp ...).
 * Lock order (docs/architecture.md): dev->rx_lock -> dev->lock -> qp->lock ->
 * rq/srq lock -> cq->lock -> channel->lock; dev->cork_lock with none of
 * them held, before a qp->lock (sq/post.c). */
#ifndef UROCE_OBJECTS_H
#define UROCE_OBJECTS_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include "../util/counters.h"
#include "../util/config.h"
#include "../util/limits.h"
#include "../cc/cc.h"
#include "../cc/rtt.h"

#define container_of(p, T, m) ((T *)((char *)(p) - offsetof(T, m)))

struct uroce_dev;

/* A resolved local buffer: a host pointer the transport reads or writes,
 * valid only within the lock hold that resolved it (mem.h). */
struct uroce_seg {
	uint8_t *addr;
	uint32_t len;
};

/* A local buffer as posted (ibv_sge): its lkey and address are checked and
 * translated each time the WQE executes (mem.h, mem_sge_resolve), never
 * kept translated, so a deregistered or re-registered MR is never used
 * through a stale translation. */
struct uroce_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

/* ---------------------------------------------------------------- MR ---- */
struct uroce_mr {
	struct ibv_mr ibv;
	uint64_t iova;        /* the address remote and local keys are checked against */
	uint8_t *host;        /* host address that iova maps to */
	uint64_t length;
	unsigned access;
	atomic_uint nmw;      /* memory windows bound to it (mem/mw.c) */
	struct uroce_dm *dm;  /* the device memory of an ibv_reg_dm_mr MR (obj/dm.c) */
};

/* Device memory (ibv_alloc_dm): memory the NIC owns, here the library's. */
struct uroce_dm {
	struct ibv_dm ibv;
	uint8_t *mem;
	uint64_t length;
	atomic_uint refcnt;   /* MRs registered on it */
};
static inline struct uroce_dm *to_udm(struct ibv_dm *d) { return container_of(d, struct uroce_dm, ibv); }


/* ---------------------------------------------------------------- CQ ---- */
struct uroce_comp_channel {
	struct ibv_comp_channel ibv;
	pthread_mutex_t lock;
	struct uroce_cq **pending;   /* FIFO of CQs with an undelivered event */
	unsigned npending, cap;
	int refcnt;
};

struct uroce_cq {
	struct ibv_cq_ex ibv;         /* ibv_cq is its prefix */
	pthread_spinlock_t lock;
	struct ibv_wc *ring;
	uint32_t size;                /* entries in ring (power of 2) */
	struct uroce_pd *pdom;        /* the parent domain whose allocator gave ring, or NULL */
	uint32_t head, tail;          /* tail: next to poll; head: next to fill */
	enum { CQ_ARM_NONE, CQ_ARM_SOLICITED, CQ_ARM_ALL } armed;
	int refcnt;                   /* QPs / SRQs using it */
	bool overrun;                 /* a completion was lost; IBV_EVENT_CQ_ERR was raised */
	uint32_t comp_events_reported;
	uint32_t async_events_reported; /* CQ_ERR events read (ibv_get_async_event) */
	struct ibv_wc cur;            /* the entry start_poll/next_poll exposed */
	struct uroce_dev *dev;
};

/* --------------------------------------------------------------- QP ----- */
enum uroce_wqe_state {
	WQE_POSTED,    /* not fully transmitted */
	WQE_SENT,      /* every packet sent, waiting for ACK or response */
	WQE_DONE,      /* completed (or flushed), waiting to leave in order */
};

struct uroce_send_wqe {
	uint64_t wr_id;
	uint32_t opcode;          /* enum ibv_wr_opcode */
	uint32_t send_flags;
	uint32_t imm_data;        /* __be32, or invalidate rkey (host) */
	uint32_t rkey;
	uint64_t remote_addr;
	uint64_t compare_add, swap;
	uint32_t length;          /* message bytes */
	uint32_t nsge;
	struct uroce_sge *sge;    /* the local SGEs as posted (non-empty ones) */
	uint8_t *inline_data;     /* IBV_SEND_INLINE: the `length` bytes copied at post, else NULL */
	enum ibv_wc_status status;/* non-success: completes with it on reaching the head */
	enum uroce_wqe_state state;
	/* PSN bookkeeping, set when the first packet goes out. */
	bool started;
	uint32_t first_psn, last_psn;
	uint32_t npkts;
	uint32_t next_pkt;        /* next packet index to transmit */
	uint32_t resp_bytes;      /* READ: bytes placed so far */
	pid_t ref_self;           /* the pid its references name, 0: none (transport/ref.h; requester.c) */
	bool ref_asked;           /* READ: a request of it said NET_PKT_REF_OK */
	/* BIND_MW (mem/mw.c): the window, the MR's lkey, the range
	 * (remote_addr, bind_len), the access; the new key is in rkey */
	struct ibv_mw *bind_mw;
	uint32_t bind_lkey;
	unsigned bind_access;
	uint64_t bind_len;
	/* UD: the address vector of the WR */
	uint32_t remote_qpn, remote_qkey;
	uint8_t dgid[16];
	uint8_t sgid_index, tclass;
	uint32_t remote_srqn;     /* XRC INI: the XRC SRQ its XRCETH names (wr.qp_type.xrc) */
};

struct uroce_recv_wqe {
	uint64_t wr_id;
	uint32_t nsge;
	uint32_t length;          /* total buffer bytes */
	struct uroce_sge *sge;    /* as posted; checked when data is placed */
};

struct uroce_rq {
	pthread_spinlock_t lock;
	struct uroce_recv_wqe *wqe;
	struct uroce_sge *sges;
	uint32_t max_wr, max_sge;
	uint32_t head, tail;      /* head: next free; tail: next to consume */
};

/* A saved READ/atomic request at the responder, for duplicate replay (§6.4). */
struct uroce_rd_res {
	bool valid;
	bool atomic;
	bool atomic_write;        /* an ATOMIC_WRITE: replayed as its empty READ response */
	uint32_t first_psn, last_psn;
	uint64_t va;
	uint32_t rkey, length;
	uint64_t orig;            /* atomic: value before the operation */
	uint8_t atomic_op;
};

/* An XRC domain as an application holds it (obj/xrc.c): each
 * ibv_open_xrcd returns its own handle; handles opened on one file share
 * `dom`, and objects of the same dom belong to the same domain. */
struct uroce_xrc_dom;
struct uroce_xrcd {
	struct ibv_xrcd ibv;          /* what applications see */
	struct uroce_xrc_dom *dom;
	int refcnt;                   /* XRC SRQs and TGT QPs made with this handle (dev->lock) */
};

struct uroce_srq {
	struct ibv_srq ibv;
	struct uroce_rq rq;
	uint32_t srq_limit;
	int refcnt;
	/* XRC SRQ (IBV_SRQT_XRC): its number, domain and the CQ its receives
	 * complete to (XRC TGT QPs have none of their own) */
	uint32_t srqn;                /* 0: not an XRC SRQ */
	struct uroce_xrcd *xrcd;
	struct uroce_cq *cq;
};

struct uroce_ah {
	struct ibv_ah ibv;
	struct ibv_ah_attr attr;
};

/* A wait that keeps missing backs off: after a miss, `skip` chances pass
 * untried, the least the first time and twice as many each time after, up
 * to a most; a wait that fills starts over (transport/ack.c's stream waits,
 * sq/post.c's held posts). */
struct uroce_backoff {
	uint16_t skip;              /* chances left to pass over */
	uint16_t next;              /* the next miss's skip, 0 = the least */
};

/* True, and one chance fewer, while the backoff passes chances over. */
static inline bool backoff_skip(struct uroce_backoff *b)
{
	if (!b->skip)
		return false;
	b->skip--;
	return true;
}

static inline void backoff_miss(struct uroce_backoff *b, uint16_t least, uint16_t most)
{
	b->skip = b->next ? b->next : least;
	b->next = b->skip < most / 2 ? 2 * b->skip : most;
}

static inline void backoff_filled(struct uroce_backoff *b)
{
	b->next = 0;
}

/* The requester's state (transport/requester.c): which packets of the send
 * queue went out. */
struct uroce_req {
	uint32_t sq_send;           /* next WQE with packets to send */
	uint32_t snd_psn;           /* next PSN to transmit */
	uint32_t max_psn;           /* highest PSN ever sent + 1 */
	uint32_t rd_atomic_out;     /* READ/atomic requests awaiting responses */
	bool ackreq_valid;          /* ackreq_psn: the last packet sent with AckReq */
	uint32_t ackreq_psn;
	bool probe_out;             /* a probe of probe_psn awaits its ACK (retry.c) */
	uint32_t probe_psn;
	bool sq_draining;           /* SQD requested */
	bool sqd_event_pending;
	/* references (transport/ref.h) */
	bool ref_reads;             /* a READ was asked by reference: maybe one is unanswered */
	bool no_ref_reads;          /* the peer answered one by packets: READs are asked so */
	unsigned ref_refusals;      /* references the peer refused or we could not pull (REF_GIVE_UP) */
	/* posts held back for later ones to join (sq/post.c, post_cork) */
	uint32_t corked;            /* packets held back */
	struct uroce_backoff cork_backoff; /* posts that go at once: a response ended a hold
				     * long after its last post (completer.c, cork_missed) */
	uint64_t cork_post_ns;      /* when the last held post was made */
};

/* The completer's state (transport/completer.c, retry.c): what the
 * responses acknowledged, and the retry budgets (§6.6). */
struct uroce_comp {
	uint32_t una_psn;           /* oldest unacknowledged PSN */
	unsigned retry_left, rnr_left;
	bool rnr_wait;              /* an RNR NAK's wait is running */
	bool rnr_nak_seen;          /* an RNR NAK of rnr_nak_psn came since the last progress */
	uint32_t rnr_nak_psn;
	bool read_gap_asked;        /* a READ gap was re-requested; no more until progress */
	uint32_t read_gap_psn;
};

/* The requester's timers (transport/timer.c arms, retry.c fires). */
struct uroce_qp_timers {
	uint64_t deadline;          /* ns, 0 = off: the earlier of the two below, or the RNR wait */
	uint64_t ack;               /* the IBA local ACK timer (§6.6), 0 = off */
	uint64_t rto;               /* adaptive retransmission, 0 = off */
};

/* The responder's state (transport/responder.c): the message being
 * received and the saved READ/atomic requests. */
struct uroce_resp {
	uint32_t epsn;              /* expected request PSN */
	uint32_t msn;
	bool nak_sent;              /* one NAK per sequence gap (§6.2) */
	bool in_send, in_write;
	struct uroce_recv_wqe cur_recv;  /* a copy of the consumed RQ WQE ... */
	struct uroce_sge cur_recv_sges[UROCE_MAX_SGE]; /* ... and of its SGEs: the
					 * ring slot may be reposted while a message arrives */
	bool cur_recv_valid;
	uint32_t recv_off;
	uint64_t write_va;
	uint32_t write_rkey, write_left;
	struct uroce_rd_res *res;   /* max_dest_rd_atomic ring */
	uint32_t res_size, res_next;
	/* XRC TGT: the XRC SRQ the last request's XRCETH named, if it is one
	 * of the QP's domain (NULL otherwise); its PD checks the request's
	 * memory, its CQ takes the receive completions (obj/xrc.c clears it
	 * when that SRQ is destroyed) */
	struct uroce_srq *xrc_srq;
};

/* The responder's ACKs (transport/ack.c): the one owed, and whether it
 * waits for a request of the QP to ride with. */
struct uroce_qp;
struct uroce_ack {
	bool owed;                  /* a coalesced ACK of owed_psn is due */
	uint32_t owed_psn;
	bool owed_msg_end;          /* owed_psn is the last packet of a message */
	uint64_t defer_ns;          /* the owed ACK waits for a request to ride with since, 0 = not */
	uint8_t ride_hits;          /* deferred ACKs that found a request to ride with, recently:
				     * +1 per ride, -1 per miss, between 0 and ACK_RIDE_HITS_MAX */
	uint8_t defer_probe;        /* counts ACKs sent at once, to try deferring now and then */
	unsigned wait_us;           /* how long an ACK waits here, 0 = UROCE_ACK_DEFER_US */
	uint64_t late_ns;           /* a deferred ACK went alone then, 0 = not since */
	bool deferred_listed;       /* on dev->acks_deferred (rx_lock) */
	struct uroce_qp *next_deferred;
	/* a stream of messages (ack.c, ack_stream): the owed ACK waits for more */
	uint16_t owed_msgs;         /* message ends the owed ACK covers */
	bool stream;                /* defer_ns is a wait for more of a stream, not for a request */
	bool streaming;             /* the peer sends messages without waiting for each ACK */
	bool stream_listed;         /* waiting for more, and on this batch's owed list */
	uint32_t stream_psn;        /* owed_psn when the wait began */
	uint32_t stream_gap_ns;     /* the stream's gap between batches, averaged */
	uint64_t stream_seen_ns;    /* the last batch that brought a message end */
	struct uroce_backoff stream_backoff; /* pipelined batches to pass over before waiting again */
	uint8_t stream_unfilled;    /* waits in a row that ended at their deadline */
};

struct uroce_flow; /* net/ */
struct uroce_qpex; /* sq/qpex.c: the ibv_wr_* batch */

struct uroce_qp {
	struct ibv_qp_ex ibv;     /* ibv.qp_base is the ibv_qp */
	struct uroce_dev *dev;
	pthread_mutex_t lock;     /* requester, completer and responder state */
	uint32_t qpn;
	enum ibv_qp_type type;
	bool sq_sig_all;
	/* attributes (ibv_modify_qp) */
	struct ibv_qp_attr attr;
	struct ibv_qp_cap cap;
	uint8_t dgid[16], sgid[16];
	uint16_t sport_asked;     /* the rdma_get_udp_sport hash the flow was opened with */
	uint8_t tx_tos;           /* IP TOS / traffic class of what it sends */
	uint32_t pmtu;            /* bytes */
	struct uroce_flow *flow;  /* transmit socket in use */
	struct uroce_flow *ud_flows[UROCE_MAX_GIDS]; /* UD: one per source GID */

	/* ---- the send queue (sq/post.c fills it, the requester drains it) */
	struct uroce_send_wqe *sq;
	bool sq_custom;             /* sq came from its parent domain's allocator (obj/pd.c) */
	struct uroce_sge *sq_sges;  /* max_sge per WQE */
	uint8_t *sq_inline;         /* max_inline bytes per WQE */
	uint32_t sq_size;
	uint32_t sq_head;           /* next free slot */
	uint32_t sq_tail;           /* oldest not yet completed */
	/* ---- the receive queue (its own, or the SRQ's) */
	struct uroce_rq rq;
	struct uroce_srq *srq;
	struct uroce_qpex *qpex;    /* created with send_ops_flags: the ibv_wr_* API, else NULL */

	/* ---- the roles' state, one part each with its own reset */
	struct uroce_req req;
	struct uroce_comp comp;
	struct uroce_qp_timers timer;
	struct uroce_cc cc;
	struct uroce_rtt rtt;
	struct uroce_resp resp;
	struct uroce_ack ack;

	/* ---- objects */
	struct uroce_cq *send_cq, *recv_cq;   /* XRC: INI has no recv_cq, TGT neither */
	struct uroce_pd *pd;                 /* NULL for an XRC TGT QP */
	struct uroce_xrcd *xrcd;             /* XRC TGT: the domain (obj/xrc.c) */
	int opens;                           /* XRC TGT: ibv_open_qp handles besides the creator's (dev->lock) */
	uint32_t events_reported;
	bool cq_lost;             /* a completion of this QP did not fit its CQ (qp_cq_lost) */
	struct uroce_qp *next_in_dev;   /* dev->qp_list, under dev->lock */
	atomic_bool cork_listed;        /* on dev->corked (sq/post.c) */
	struct uroce_qp *next_corked;
};

/* The states in which a QP's responder takes requests and answers them
 * (IBA 10.3.1: RTR and after, until ERR). */
static inline bool qp_state_responds(enum ibv_qp_state st)
{
	return st == IBV_QPS_RTR || st == IBV_QPS_RTS || st == IBV_QPS_SQD || st == IBV_QPS_SQE;
}

/* RC's transport rules (ACKs, NAKs, retries, READ/atomics) also hold for
 * both halves of XRC: an XRC INI QP is an RC requester, an XRC TGT QP an RC
 * responder whose receives go to the SRQ each request names (IBA 9.2,
 * Annex A14). */
static inline bool qp_reliable(const struct uroce_qp *qp)
{
	return qp->type == IBV_QPT_RC || qp->type == IBV_QPT_XRC_SEND || qp->type == IBV_QPT_XRC_RECV;
}

/* The transport prefix of the QP's wire opcodes (§3): RC 0x00, UC 0x20,
 * XRC 0xA0, each ORed onto RC's operation code. */
static inline uint8_t qp_opcode_base(const struct uroce_qp *qp)
{
	if (qp->type == IBV_QPT_UC)
		return 0x20;
	return qp->type == IBV_QPT_XRC_SEND || qp->type == IBV_QPT_XRC_RECV ? 0xA0 : 0;
}

/* Every send-side timer off (nothing outstanding, a flush, a reset). */
static inline void qp_timers_off(struct uroce_qp *qp)
{
	qp->timer.deadline = qp->timer.ack = qp->timer.rto = 0;
}

struct uroce_pd {
	struct ibv_pd ibv;
	atomic_int refcnt;            /* MRs, QPs, AHs, SRQs, MWs (a PD: and its parent domains) */
	/* Protection is checked between protection domains: a PD's is itself,
	 * a parent domain's the PD it was made on (obj/pd.c). */
	struct uroce_pd *protection;
	bool parent;                  /* a parent domain (ibv_alloc_parent_domain) */
	struct ibv_parent_domain_init_attr pa;   /* its allocators and pd_context */
};

struct uroce_context {
	struct verbs_context vctx;    /* vctx.context is what applications see */
	struct uroce_dev *dev;
	pthread_mutex_t async_lock;
	struct ibv_async_event *async_q;
	unsigned async_n, async_cap;
};

static inline struct uroce_context *to_uctx(struct ibv_context *c) { return container_of(c, struct uroce_context, vctx.context); }
static inline struct uroce_pd *to_upd(struct ibv_pd *p) { return container_of(p, struct uroce_pd, ibv); }
static inline struct uroce_mr *to_umr(struct ibv_mr *m) { return container_of(m, struct uroce_mr, ibv); }
static inline struct uroce_cq *to_ucq(struct ibv_cq *c) { return container_of((struct ibv_cq_ex *)c, struct uroce_cq, ibv); }
static inline struct uroce_cq *to_ucqx(struct ibv_cq_ex *c) { return container_of(c, struct uroce_cq, ibv); }
static inline struct uroce_qp *to_uqp(struct ibv_qp *q) { return container_of(q, struct uroce_qp, ibv.qp_base); }
static inline struct uroce_srq *to_usrq(struct ibv_srq *s) { return container_of(s, struct uroce_srq, ibv); }
static inline struct uroce_xrcd *to_uxrcd(struct ibv_xrcd *x) { return container_of(x, struct uroce_xrcd, ibv); }
static inline struct uroce_ah *to_uah(struct ibv_ah *a) { return container_of(a, struct uroce_ah, ibv); }
static inline struct uroce_comp_channel *to_uchan(struct ibv_comp_channel *c) { return container_of(c, struct uroce_comp_channel, ibv); }

#endif
