/* The transport (shared/docs/roce-wire.md §5-§7), one file per role:
 *   recv.c        validation and demultiplexing of every received packet
 *   requester.c   send queue -> request packets (go-back-N restarts)
 *   completer.c   ACKs, NAKs, READ responses, atomic ACKs -> send completions
 *   responder.c   requests -> memory, receive queue, NAK/READ responses
 *   ack.c         the responder's ACKs: coalescing and deferral
 *   ud.c          UD sends and receives
 *   timer.c       arming the requester's timers; retry.c what they do
 *   completion.c  in-order send completion, flush, the error state
 *   tx.c          packet assembly and batched transmission
 * No two of these files call each other (docs/architecture.md, the
 * dependency rule): recv.c and retry.c call the roles, the completer calls
 * the requester, the roles call ack.c, timer.c and completion.c, and all of
 * them tx.c.  Everything runs with qp->lock held unless said otherwise. */
#ifndef UROCE_TRANSPORT_H
#define UROCE_TRANSPORT_H

#include "../core/device.h"
#include "../net/net.h"

/* A parsed, validated packet. */
struct uroce_pkt {
	const uint8_t *bth;
	const uint8_t *payload;
	uint32_t paylen;
	uint32_t mask;         /* opinfo mask */
	uint8_t opcode;
	uint32_t psn;
	uint16_t ip_id;        /* IPv4 Identification the ICRC check found */
	const struct uroce_rxpkt *rx;
	/* A same-host peer's reference (ref.h): paylen is then the bytes it
	 * stands for, which are in the peer's memory, and payload is NULL. */
	const struct ref_src *ref;
};

struct tx_batch;
struct ref_src;

/* recv.c: every received packet; takes the QP lock itself (under rx_lock). */
void transport_rx(struct uroce_dev *dev, struct uroce_rxpkt *pkt);
/* A batch of received packets: transport_rx for each, responses first,
 * then ack_rx_batch_end. */
void transport_rx_batch(struct uroce_dev *dev, struct uroce_rxpkt *pkts, int n);

/* retry.c: the QP's timer deadline passed (exec/progress.c). */
void retry_timer_fire(struct uroce_qp *qp, uint64_t now);

/* requester.c */
void requester_run(struct uroce_qp *qp);
/* A new or reset QP's requester state: nothing sent. */
void requester_reset(struct uroce_qp *qp);
/* Start again at PSN `psn` (go-back-N, §6.6). */
void requester_rewind(struct uroce_qp *qp, uint32_t psn);
/* Resend the packet at una with AckReq, send position unchanged; false if
 * una is not a SEND/WRITE packet (retry.c: the adaptive timer). */
bool requester_probe(struct uroce_qp *qp);
/* After a loss signal (sequence NAK, READ gap, probe that found a loss,
 * timeout): shrink the congestion window and go back to `psn` (§6.6). */
void requester_retry_from(struct uroce_qp *qp, uint32_t psn, bool timeout);

/* timer.c */
/* Arm what is not armed of the local ACK timer (§6.6) and the adaptive
 * retransmission timer while requests are outstanding; both off otherwise. */
void requester_arm_timer(struct uroce_qp *qp);

/* completer.c */
void completer_rx(struct uroce_qp *qp, struct uroce_pkt *pkt);
/* A new or reset QP's completer state: nothing acknowledged. */
void completer_reset(struct uroce_qp *qp);

/* responder.c */
void responder_rx(struct uroce_qp *qp, struct uroce_pkt *pkt);
/* A new or reset QP's responder state: no message under way, no saved
 * READ/atomic. */
void responder_reset(struct uroce_qp *qp);

/* The PD a receive WQE's SGEs are checked against: its SRQ's, or the
 * QP's (an SRQ has its own PD, ibv_create_srq(3)). */
static inline struct uroce_pd *qp_recv_pd(const struct uroce_qp *qp)
{
	/* an XRC TGT QP has no PD and no SRQ of its own: the XRC SRQ the
	 * message's XRCETH named gave the WQE (IBA A14) */
	if (qp->resp.xrc_srq)
		return to_upd(qp->resp.xrc_srq->ibv.pd);
	return qp->srq ? to_upd(qp->srq->ibv.pd) : qp->pd;
}

/* ud.c (§6.7, §9) */
void ud_rx(struct uroce_qp *qp, struct uroce_pkt *pkt);
/* One UD message into `b` (its destination from the WQE, its payload the
 * segments the requester resolved, mem.h). */
void ud_send(struct uroce_qp *qp, struct uroce_send_wqe *w, struct tx_batch *b, const struct uroce_seg *seg,
	     uint32_t nseg);

/* ack.c */
/* Owe an ACK of `psn` (msg_end: the last packet of a message, which may
 * wait for a request to ride with); one goes out per QP per batch. */
void ack_owe(struct uroce_qp *qp, uint32_t psn, bool msg_end);
/* An ACK/NAK of `syndrome` for `psn` now, after any ACK still owed. */
void ack_send_aeth(struct uroce_qp *qp, uint8_t op, uint8_t syndrome, uint32_t psn);
/* ... with NET_PKT_* flags (a sequence NAK that refuses a reference:
 * NET_PKT_REF_NAK, ref.h) */
void ack_send_aeth_flags(struct uroce_qp *qp, uint8_t op, uint8_t syndrome, uint32_t psn, uint8_t flags);
/* The owed ACK, if any, goes out now (before another response of the QP). */
void ack_flush_owed(struct uroce_qp *qp);
/* After a receive batch ending at `now` (0: not read): send the ACKs
 * coalesced in it, or let them wait. */
void ack_rx_batch_end(struct uroce_dev *dev, uint64_t now);
/* Send the deferred ACKs whose wait is over; under rx_lock. */
void ack_flush_deferred(struct uroce_dev *dev, uint64_t now);
/* A deferred ACK leaves with the requests in `b`. */
void ack_ride(struct uroce_qp *qp, struct tx_batch *b);
/* The requester sends after a deferred ACK went alone. */
void ack_request_follows(struct uroce_qp *qp);
/* The owed ACK, if any, goes out now if the state still sends; owed and
 * deferral end either way. */
void ack_now(struct uroce_qp *qp);
/* A new or reset QP: no ACK owed. */
void ack_reset(struct uroce_qp *qp);
/* A QP being destroyed leaves the ACK lists (under rx_lock). */
void ack_qp_gone(struct uroce_qp *qp);

/* completion.c: shared by the roles. */
void qp_enter_error(struct uroce_qp *qp);
void qp_complete_send(struct uroce_qp *qp, struct uroce_send_wqe *w, enum ibv_wc_status st);
void qp_retire_sends(struct uroce_qp *qp);          /* deliver DONE WQEs in order */
void qp_flush_queues(struct uroce_qp *qp);
void qp_flush_recv_queue(struct uroce_qp *qp);
int qp_rq_pop(struct uroce_qp *qp, struct uroce_recv_wqe *out);  /* 0 ok, -1 empty */
/* The oldest WQE not yet completed that has packets on the wire, or NULL. */
struct uroce_send_wqe *sq_oldest_started(struct uroce_qp *qp);
/* A completion of the QP into cq; one that does not fit marks the QP
 * (cq_lost), and where no queue loop is under way -- the end of
 * qp_retire_sends, of transport_rx's packet -- qp_cq_lost moves it to
 * ERROR.  Flush completions ignore a full CQ: the QP is in ERROR already. */
void qp_cq_push(struct uroce_qp *qp, struct uroce_cq *cq, const struct ibv_wc *wc, bool solicited);
void qp_cq_lost(struct uroce_qp *qp);
/* The oldest started WQE completes with `st`; the QP enters ERROR. */
void qp_fail_oldest(struct uroce_qp *qp, enum ibv_wc_status st);

#endif
