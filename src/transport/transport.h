/* Entry points of the transport roles (shared/docs/roce-wire.md §5-§7):
 *   recv.c       validation and demultiplexing of every received packet
 *   requester.c  send queue -> request packets (go-back-N restarts)
 *   completer.c  ACKs, NAKs, READ responses, atomic ACKs -> send completions
 *   responder.c  requests -> memory, receive queue, ACK/NAK/READ responses
 * All of them run with qp->lock held unless said otherwise. */
#ifndef UROCE_TRANSPORT_H
#define UROCE_TRANSPORT_H

#include "../core/device.h"
#include "../net/net.h"

/* recv.c: the engine (or a poller) hands every received packet here;
 * takes the QP lock itself. */
void transport_rx(struct uroce_dev *dev, struct uroce_rxpkt *pkt);
/* A batch of received packets: transport_rx for each, responses first,
 * then transport_rx_batch_end (recv.c). */
void transport_rx_batch(struct uroce_dev *dev, struct uroce_rxpkt *pkts, int n);
/* After a receive batch: send the ACKs the responder coalesced (responder.c). */
void transport_rx_batch_end(struct uroce_dev *dev);
/* Send the deferred ACKs whose wait is over (responder.c); under rx_lock. */
void transport_flush_deferred_acks(struct uroce_dev *dev, uint64_t now);

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
};

/* requester.c */
void requester_run(struct uroce_qp *qp);
/* Start again at PSN `psn` (go-back-N, §6.6). */
void requester_rewind(struct uroce_qp *qp, uint32_t psn);
/* Arm what is not armed of the local ACK timer (§6.6) and the adaptive
 * retransmission timer while requests are outstanding; both off otherwise. */
void requester_arm_timer(struct uroce_qp *qp);
/* Resend the packet at una with AckReq, send position unchanged; false if
 * una is not a SEND/WRITE packet (completer.c: the adaptive timer). */
bool requester_probe(struct uroce_qp *qp);
/* The timed packet was acknowledged at `now`: update srtt/rttvar. */
void requester_rtt_sample(struct uroce_qp *qp, uint64_t now);
/* After a loss signal (sequence NAK, READ gap, probe that found a loss,
 * timeout): shrink the congestion window and go back to `psn` (§6.6). */
void requester_retry_from(struct uroce_qp *qp, uint32_t psn, bool timeout);
/* Congestion window: ACKed progress. */
void requester_cwnd_progress(struct uroce_qp *qp, uint32_t acked);
/* Build and send one packet of a responder-generated kind (ACK, NAK, READ
 * response, atomic ACK) from `hdr` (BTH..ext headers) + payload segments. */
int transport_send_response(struct uroce_qp *qp, uint8_t *hdr, uint32_t hdrlen,
			    const struct uroce_seg *seg, int nseg, uint32_t paylen);

/* completer.c */
void completer_rx(struct uroce_qp *qp, struct uroce_pkt *pkt);
void completer_timer(struct uroce_qp *qp, uint64_t now);

/* responder.c */
void responder_rx(struct uroce_qp *qp, struct uroce_pkt *pkt);
struct tx_batch;
/* A deferred ACK leaves with the requests in `b` (responder.c). */
void responder_ack_ride(struct uroce_qp *qp, struct tx_batch *b);
/* The requester sends after a deferred ACK went alone (responder.c). */
void responder_request_follows(struct uroce_qp *qp);
/* The owed ACK, if any, goes out now (responder.c). */
void responder_ack_now(struct uroce_qp *qp);
/* A new or reset QP's responder state: no ACK owed, no message under way. */
void responder_reset(struct uroce_qp *qp);
/* A QP being destroyed leaves the responder's bookkeeping (under rx_lock). */
void responder_qp_gone(struct uroce_qp *qp);
/* UD receive (§6.7, §9): Q_Key check, no PSN order, 40-byte GRH area. */
void ud_rx(struct uroce_qp *qp, struct uroce_pkt *pkt);

/* qp.c: error handling shared by the roles. */
void qp_enter_error(struct uroce_qp *qp);           /* qp->lock held */
void qp_complete_send(struct uroce_qp *qp, struct uroce_send_wqe *w, enum ibv_wc_status st);
void qp_retire_sends(struct uroce_qp *qp);          /* deliver DONE WQEs in order */
void qp_flush_queues(struct uroce_qp *qp);
int qp_rq_pop(struct uroce_qp *qp, struct uroce_recv_wqe *out);  /* 0 ok, -1 empty */
void qp_post_async_event(struct uroce_qp *qp, enum ibv_event_type type);
bool async_event_is_qp(enum ibv_event_type t);

/* cq.c */
int cq_push(struct uroce_cq *cq, const struct ibv_wc *wc, bool solicited);

/* mr.c */
struct uroce_mr *mr_get(struct uroce_dev *dev, uint32_t key);
enum uroce_mem_verdict mr_check_remote(struct uroce_dev *dev, struct uroce_pd *pd, uint32_t rkey,
				       uint64_t va, uint64_t len, unsigned access, struct uroce_mr **out);
enum uroce_mem_verdict mr_resolve_local(struct uroce_dev *dev, struct uroce_pd *pd, const struct ibv_sge *sge,
					unsigned access, struct uroce_seg *out);
static inline uint8_t *mr_host(const struct uroce_mr *mr, uint64_t va)
{
	return mr->host + (va - mr->iova);
}

/* copy helpers over a segment list */
void seg_copy_to(const struct uroce_seg *seg, uint32_t nseg, uint32_t off, const uint8_t *src, uint32_t len);
/* iovecs for `len` bytes at offset `off`; returns the iovec count used */
int seg_iov(const struct uroce_seg *seg, uint32_t nseg, uint32_t off, uint32_t len, struct iovec *iov, int max);

#endif
