/* The responder's ACK policy (§6.5, §6.6): which ACK is owed, coalescing
 * within a receive batch, and deferral -- an owed ACK waiting for a request
 * of its QP to ride with, or for more of a stream of messages.  All under
 * the QP's lock; the lists of owed and deferred ACKs under rx_lock
 * (transport_rx's caller). */
#include <string.h>
#include "transport.h"
#include "tx.h"
#include "../core/wake.h"
#include "../wire/hdr.h"

/* ACK deferral (ack_defer) */
#define ACK_RIDE_HITS_MAX 8
#define ACK_RIDE_HITS_START 4   /* a new or reset QP defers */
#define ACK_ANSWER_NS 1000000ull /* a request this soon after a late ACK answers it */
#define ACK_PROBE_EVERY 16       /* a QP that stopped deferring tries again this often */
#define ACK_WAIT_MAX_X 50        /* the wait grows to at most this many UROCE_ACK_DEFER_US */

/* ACK coalescing in a stream (ack_stream) */
#define ACK_STREAM_PKTS 16          /* a waiting ACK covers at most this many packets more: an
				     * eighth of a window of 128, our requesters' least by
				     * default (cc_window_max) and rxe's */
#define ACK_STREAM_WAIT_MIN_NS 1000ull  /* it waits twice the stream's gap between batches, */
#define ACK_STREAM_WAIT_MAX_NS 10000ull /* within these bounds; a longer gap is a pause */
#define ACK_STREAM_UNFILLED_MAX 4   /* waits in a row that end at their deadline, short of the 16, */
#define ACK_STREAM_SKIP_MIN 16      /* and pipelined batches then passed over, */
#define ACK_STREAM_SKIP_MAX 1024    /* doubling each time until a wait fills */

/* An ACK/NAK (BTH + AETH) as the next packet of `b`. */
static void aeth_add(struct uroce_qp *qp, struct tx_batch *b, uint8_t op, uint8_t syndrome, uint32_t psn,
		     uint8_t flags)
{
	uint8_t *h = txb_hdr(b);

	bth_set(h, op, 0, 0, qp->attr.dest_qp_num, 0, psn);
	aeth_set(h + BTH_LEN, syndrome, qp->resp.msn);
	txb_add_flags(b, BTH_LEN + AETH_LEN, NULL, 0, 0, 0, flags);
}

void ack_send_aeth_flags(struct uroce_qp *qp, uint8_t op, uint8_t syndrome, uint32_t psn, uint8_t flags)
{
	TXB_ON_STACK(b, 1);

	ack_flush_owed(qp);
	txb_init(&b, qp);
	aeth_add(qp, &b, op, syndrome, psn, flags);
	txb_flush(&b);
}

void ack_send_aeth(struct uroce_qp *qp, uint8_t op, uint8_t syndrome, uint32_t psn)
{
	ack_send_aeth_flags(qp, op, syndrome, psn, 0);
}

static void send_ack(struct uroce_qp *qp, uint32_t psn)
{
	dev_count(qp->dev, UC_acks_tx, 1);
	ack_send_aeth(qp, OP_RC_ACK | qp_opcode_base(qp), AETH_ACK_UNLIMITED, psn);
}

/* ACK coalescing (§6.5: an ACK acknowledges every PSN up to its own, and
 * responders may coalesce): an ACK a SEND/WRITE (or a duplicate) asks for
 * is owed until the receive batch is done, then one goes out per QP however
 * many packets asked -- so a stream of small WRITEs does not cost one ACK
 * datagram each.  Any other response of the QP sends it first, so the wire
 * stays in PSN order.  All under rx_lock (transport_rx's caller). */
void ack_owe(struct uroce_qp *qp, uint32_t psn, bool msg_end)
{
	struct uroce_dev *dev = qp->dev;

	if (qp->ack.owed) {
		if (psn_cmp(psn, qp->ack.owed_psn) > 0) {
			qp->ack.owed_psn = psn;
			qp->ack.owed_msg_end = msg_end;
		}
		if (msg_end && qp->ack.owed_msgs < UINT16_MAX)
			qp->ack.owed_msgs++;
		else if (!msg_end)
			qp->ack.owed_msg_end = false;  /* a retry or a mid-message AckReq: at once */
		if (!qp->ack.defer_ns)
			return;  /* on this batch's list */
		if (!msg_end) {
			/* a mid-message AckReq: no answer can come first (ack_defer),
			 * and a window waits for it (ack_stream) */
			qp->ack.defer_ns = 0;
			qp->ack.stream = false;
		} else if (qp->ack.stream && !qp->ack.stream_listed) {
			qp->ack.stream_listed = true;  /* more of the stream: the batch's end counts it */
		} else {
			return;  /* a deferral still bounded by its deadline, or listed already */
		}
	} else {
		qp->ack.owed = true;
		qp->ack.owed_psn = psn;
		qp->ack.owed_msg_end = msg_end;
		qp->ack.owed_msgs = msg_end;
	}
	if (dev->n_acks_owed == UROCE_RX_BATCH) {
		ack_flush_owed(qp);
		return;
	}
	dev->acks_owed[dev->n_acks_owed++] = qp;
}

/* The owed ACK is sent or dropped: whatever waited for it, waits no more. */
static void ack_settled(struct uroce_qp *qp)
{
	qp->ack.owed = false;
	qp->ack.defer_ns = 0;
	qp->ack.owed_msgs = 0;
	qp->ack.stream = false;
	qp->ack.stream_listed = false;
}

void ack_flush_owed(struct uroce_qp *qp)
{
	if (qp->ack.owed) {
		uint32_t psn = qp->ack.owed_psn;
		ack_settled(qp);
		send_ack(qp, psn);
	}
}

static bool ack_may_be_sent(const struct uroce_qp *qp)
{
	return qp_state_responds(qp->attr.qp_state);
}

/* ACK deferral: in a request-response exchange the application answers a
 * message it just received with a request of its own, within a microsecond
 * or two.  An owed ACK that waits for that request leaves in the same
 * sendmmsg, behind it (requester_run -> ack_ride; behind its first
 * packet when the window cuts the message), so the peer, polling for the
 * ACK, has the request (or its start: exec_poll_found) in its socket before
 * the ACK: one syscall instead of two, and a one-sided request is placed by
 * the peer's poll instead of waking its engine.  A QP defers while
 * deferring works (ack_ride_hits; ack_request_follows), and tries
 * again every 16th ACK otherwise; the wait is bounded by UROCE_ACK_DEFER_US
 * (§6.6 allows an ACK any time before the requester's timer; the
 * coalescing of §6.5 covers the PSNs in between). */
/* May the owed ACK wait at all (for a ride or for more of a stream)?  Only
 * the ACK of a whole message can be answered: one asked for in the middle
 * (a window-filling packet) goes at once, or the requester stalls. */
static bool ack_may_wait(const struct uroce_qp *qp)
{
	return qp->dev->cfg.ack_defer_us && qp->type == IBV_QPT_RC && qp->ack.owed_msg_end;
}

static bool ack_defer(struct uroce_qp *qp)
{
	/* an ordinary (not real-time) engine may wake for the deadline tens of
	 * ms late on a loaded host: what it receives is ACKed at once */
	if (!ack_may_wait(qp) || (!qp->dev->eng.rt && on_engine_thread()))
		return false;
	if (qp->ack.late_ns) {
		/* the last deferred ACK went alone and no request followed:
		 * a real miss (one-way traffic) */
		qp->ack.late_ns = 0;
		qp->ack.wait_us = 0;
		if (qp->ack.ride_hits)
			qp->ack.ride_hits--;
	}
	return qp->ack.ride_hits || (++qp->ack.defer_probe % ACK_PROBE_EVERY) == 0;
}

/* A deferral paid off: the QP's request came (ack_defer). */
static void ack_ride_hit(struct uroce_qp *qp)
{
	if (qp->ack.ride_hits < ACK_RIDE_HITS_MAX)
		qp->ack.ride_hits++;
}

/* ACK coalescing in a stream (issue #17).  Within a receive batch the owed
 * ACKs of a QP go as one (ack_owe, §6.5), but a receiver that keeps up with
 * a stream of small messages sees batches of one or two, and answered about
 * one message in two with an ACK datagram of its own: a system call on each
 * side beside the requests (ib_write_bw 64 B between two namespaces: 0.50-0.58
 * ACKs a message).  A peer that sends messages without waiting for each
 * one's ACK -- two or more owed in one batch show it -- loses nothing when
 * the ACK waits a little for more of them: its window is open, and one ACK
 * covers every PSN up to its own (§6.5; §6.6 allows it any time before the
 * requester's timer).  So the ACK of such a QP waits until twice the
 * stream's gap between batches has passed with nothing more of it, or until
 * it covers ACK_STREAM_PKTS packets more: a stream fills that before the
 * deadline.  The wait is what a burst's last message pays, so it follows
 * the stream (a ring's batches come ~1 us apart, a namespace's UDP several),
 * within 1-10 us.  A wait that ends at its deadline was a burst's end or a
 * hiccup of the stream -- or a peer whose window or send queue holds fewer
 * than the wait's 16 packets, waiting for this very ACK.  Four such waits in
 * a row say the latter: the QP then ACKs at once until more pipelined
 * batches have shown a stream again, 16 and twice as many each time until a
 * wait fills, so a peer that cannot fill one pays the wait ever more
 * rarely.  A pause longer than any wait ends the stream.  Only on the
 * real-time engine, whose sockets they are when it receives: an application
 * spinning on its CQ that received the stream and then stopped polling
 * would leave the ACK to the engine's next look, up to a poll grace later,
 * and the engine, asleep beside the spinner, would wake for every wait's
 * deadline (engine.c).  One message at
 * a time (ping-pong, a READ, a WRITE and its completion) never puts two in
 * a batch; request-response traffic has its ACKs ride (ack_defer), tried
 * first unless the QP streams; UROCE_ACK_DEFER_US=0 turns both off.
 * Not a pure test: it counts pipelined batches off the skip, and starts a
 * stream. */
static bool ack_stream(struct uroce_qp *qp)
{
	/* the real-time engine receives: the sockets are its own (pollers
	 * receive only while a spin holds them, exec/progress.c); an ordinary
	 * engine may wake for the deadline late, as for a ride */
	if (!ack_may_wait(qp) || !on_engine_thread() || !qp->dev->eng.rt)
		return false;
	if (!qp->ack.streaming) {
		if (qp->ack.owed_msgs < 2)
			return false;
		if (backoff_skip(&qp->ack.stream_backoff))
			return false;
		qp->ack.streaming = true;
	}
	return true;
}

static uint64_t ack_stream_wait_ns(const struct uroce_qp *qp)
{
	uint64_t w = 2ull * qp->ack.stream_gap_ns;
	return w < ACK_STREAM_WAIT_MIN_NS ? ACK_STREAM_WAIT_MIN_NS : w > ACK_STREAM_WAIT_MAX_NS ? ACK_STREAM_WAIT_MAX_NS : w;
}

/* A batch brought message ends of the QP: the gap since the last such batch,
 * averaged over the last few; a pause, longer than any wait, ends a stream. */
static void ack_stream_seen(struct uroce_qp *qp, uint64_t now)
{
	uint64_t gap = now - qp->ack.stream_seen_ns;

	if (!qp->ack.stream_seen_ns || gap >= ACK_STREAM_WAIT_MAX_NS) {
		qp->ack.streaming = false;
		qp->ack.stream_gap_ns = 0;
	} else if (!qp->ack.stream_gap_ns) {
		qp->ack.stream_gap_ns = (uint32_t)gap;
	} else {
		qp->ack.stream_gap_ns = (uint32_t)((7ull * qp->ack.stream_gap_ns + gap) / 8);
	}
	qp->ack.stream_seen_ns = now;
}

/* A stream's wait ended at its deadline, short of ACK_STREAM_PKTS
 * (ack_stream). */
static void ack_stream_unfilled(struct uroce_dev *dev, struct uroce_qp *qp)
{
	dev_count(dev, UC_acks_stream_unfilled, 1);
	if (++qp->ack.stream_unfilled < ACK_STREAM_UNFILLED_MAX)
		return;
	qp->ack.stream_unfilled = 0;
	qp->ack.streaming = false;
	backoff_miss(&qp->ack.stream_backoff, ACK_STREAM_SKIP_MIN, ACK_STREAM_SKIP_MAX);
}

static uint64_t ack_wait_ns(const struct uroce_qp *qp)
{
	if (qp->ack.stream)
		return ack_stream_wait_ns(qp);
	return (qp->ack.wait_us ? qp->ack.wait_us : qp->dev->cfg.ack_defer_us) * 1000ull;
}

/* The requester sends: if the last deferred ACK went alone, at its deadline,
 * shortly before, the exchange is request-response all the same, only
 * slower than the wait (a loaded host, a large message to take in): wait
 * twice as long next time, up to 50 x UROCE_ACK_DEFER_US.  Under qp->lock. */
void ack_request_follows(struct uroce_qp *qp)
{
	uint64_t late = qp->ack.late_ns;

	qp->ack.late_ns = 0;
	if (now_ns() - late > ACK_ANSWER_NS)
		return;
	unsigned base = qp->dev->cfg.ack_defer_us, w = qp->ack.wait_us ? qp->ack.wait_us : base;
	qp->ack.wait_us = 2 * w < ACK_WAIT_MAX_X * base ? 2 * w : ACK_WAIT_MAX_X * base;
	ack_ride_hit(qp);
}

/* The owed ACK waits from now (a ride's or a stream's: ack_wait_ns), on the
 * list of deferred ACKs.  The engine looks at least once per poll grace
 * while applications poll, and a spinning engine or poller runs the
 * deadline; the engine is kicked only if it sleeps longer. */
static void ack_wait(struct uroce_dev *dev, struct uroce_qp *qp, uint64_t now)
{
	qp->ack.defer_ns = now;
	if (!qp->ack.deferred_listed) {
		qp->ack.deferred_listed = true;
		qp->ack.next_deferred = dev->acks_deferred;
		dev->acks_deferred = qp;
	}
	uint64_t wait = ack_wait_ns(qp), grace = dev->cfg.poll_grace_us * 1000ull;
	deadline_lower(dev, &dev->ack_flush_next, now + wait, false);
	wake_engine_by(dev, now + (wait > grace ? wait : grace));
}

void ack_rx_batch_end(struct uroce_dev *dev, uint64_t now)
{
	if (dev->n_acks_owed && !now)
		now = now_ns();  /* owed by a packet the batch did not count as a request */
	for (unsigned i = 0; i < dev->n_acks_owed; i++) {
		struct uroce_qp *qp = dev->acks_owed[i];
		pthread_mutex_lock(&qp->lock);
		if (qp->ack.owed_msgs && qp->ack.stream_seen_ns != now)
			ack_stream_seen(qp, now);
		if (!qp->ack.owed || !ack_may_be_sent(qp)) {
			ack_now(qp);  /* nothing to send: owed and deferral both end */
		} else if (!qp->ack.defer_ns && !qp->ack.streaming && ack_defer(qp)) {
			ack_wait(dev, qp, now);
		} else if (!qp->ack.defer_ns && ack_stream(qp)) {
			dev_count(dev, UC_acks_stream_waits, 1);
			qp->ack.stream = true;
			qp->ack.stream_psn = qp->ack.owed_psn;
			ack_wait(dev, qp, now);
		} else if (qp->ack.stream && qp->ack.stream_listed) {
			/* more of the stream joined its waiting ACK (ack_owe) */
			qp->ack.stream_listed = false;
			if (psn_cmp(qp->ack.owed_psn, qp->ack.stream_psn) >= (int32_t)ACK_STREAM_PKTS) {
				backoff_filled(&qp->ack.stream_backoff);  /* a stream for sure */
				qp->ack.stream_unfilled = 0;
				ack_flush_owed(qp);
			} else {
				ack_wait(dev, qp, now);
			}
		} else if (!qp->ack.defer_ns) {
			ack_flush_owed(qp);
		}
		pthread_mutex_unlock(&qp->lock);
	}
	dev->n_acks_owed = 0;
}

/* Deferred ACKs whose wait is over go out (a miss: the QP stops deferring
 * for a while, ack_defer and ack_stream); those that rode with a request
 * leave the list.  Under rx_lock. */
void ack_flush_deferred(struct uroce_dev *dev, uint64_t now)
{
	uint64_t next = UINT64_MAX;

	atomic_store(&dev->ack_flush_next, UINT64_MAX);
	for (struct uroce_qp **pp = &dev->acks_deferred; *pp;) {
		struct uroce_qp *qp = *pp;
		pthread_mutex_lock(&qp->lock);
		bool keep = false;
		uint64_t wait = ack_wait_ns(qp);
		if (qp->ack.owed && qp->ack.defer_ns && now - qp->ack.defer_ns < wait) {
			keep = true;
			if (qp->ack.defer_ns + wait < next)
				next = qp->ack.defer_ns + wait;
		} else if (qp->ack.owed && qp->ack.defer_ns && qp->ack.stream) {
			ack_stream_unfilled(dev, qp);
			ack_now(qp);
		} else if (qp->ack.owed && qp->ack.defer_ns) {
			dev_count(dev, UC_acks_deferred_late, 1);
			qp->ack.late_ns = now;  /* a miss, unless a request follows soon */
			ack_now(qp);
		}
		if (!keep) {
			qp->ack.deferred_listed = false;
			*pp = qp->ack.next_deferred;
		} else {
			pp = &qp->ack.next_deferred;
		}
		pthread_mutex_unlock(&qp->lock);
	}
	if (next != UINT64_MAX)
		deadline_lower(dev, &dev->ack_flush_next, next, false);
}

/* An ACK still owed goes out now, if the QP's state still sends: its wait
 * is over, or the QP leaves the states that send (the peer's requester must
 * not be left to retry into a QP that no longer answers). */
void ack_now(struct uroce_qp *qp)
{
	if (qp->ack.owed && ack_may_be_sent(qp))
		ack_flush_owed(qp);
	ack_settled(qp);
}

/* A new or reset QP: no ACK owed, and ACKs may wait for a request to ride
 * with (ack_defer) from the start.  Under qp->lock or before publication. */
void ack_reset(struct uroce_qp *qp)
{
	ack_settled(qp);
	qp->ack.late_ns = 0;
	qp->ack.wait_us = 0;
	qp->ack.ride_hits = ACK_RIDE_HITS_START;
	qp->ack.streaming = false;
	qp->ack.stream_backoff = (struct uroce_backoff){ 0 };
	qp->ack.stream_unfilled = 0;
	qp->ack.stream_gap_ns = 0;
	qp->ack.stream_seen_ns = 0;
}

/* The QP is being destroyed (under rx_lock): off the deferred list, its owed
 * ACK sent, no longer counted as inside a WRITE. */
void ack_qp_gone(struct uroce_qp *qp)
{
	for (struct uroce_qp **pp = &qp->dev->acks_deferred; *pp; pp = &(*pp)->ack.next_deferred)
		if (*pp == qp) {
			*pp = qp->ack.next_deferred;
			break;
		}
	pthread_mutex_lock(&qp->lock);
	ack_now(qp);
	qp_set_in_write(qp, false);
	pthread_mutex_unlock(&qp->lock);
}

/* Called by the requester with request packets in `b`: the owed ACK rides
 * behind them (see ack_defer).  Under qp->lock. */
void ack_ride(struct uroce_qp *qp, struct tx_batch *b)
{
	if (!qp->ack.owed || !ack_may_be_sent(qp))
		return;
	if (qp->ack.defer_ns && !qp->ack.stream) {
		dev_count(qp->dev, UC_acks_ridden, 1);
		ack_ride_hit(qp);
	}
	uint32_t psn = qp->ack.owed_psn;
	ack_settled(qp);
	dev_count(qp->dev, UC_acks_tx, 1);
	aeth_add(qp, b, OP_RC_ACK | qp_opcode_base(qp), AETH_ACK_UNLIMITED, psn, 0);
}

