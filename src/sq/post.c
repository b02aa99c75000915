/* Posting: work requests become WQEs (ibv_post_send, ibv_post_recv,
 * ibv_post_srq_recv).  A send post runs the requester at once, under the
 * QP's lock (transport/requester.c), unless it joins a stream (post_cork). */
#include "sq.h"
#include <errno.h>
#include <string.h>
#include "../core/wr.h"
#include "../mem/mem.h"
#include "../transport/transport.h"


/* The 8 bytes an ATOMIC_WRITE writes, from the local buffer of `sge`
 * (read access, as any data a request sends) or, inline, from its address. */
static enum ibv_wc_status atomic_write_value(struct uroce_qp *qp, const struct ibv_sge *sge, bool is_inline,
					     uint64_t *val)
{
	struct uroce_seg seg;

	if (is_inline) {
		memcpy(val, (const void *)(uintptr_t)sge->addr, 8);
		return IBV_WC_SUCCESS;
	}
	struct uroce_sge s8 = { .addr = sge->addr, .length = 8, .lkey = sge->lkey };
	uint32_t nseg;
	enum uroce_mem_verdict v = mem_sge_resolve(qp->dev, qp->pd, &s8, 1, 0, 8, 0, &seg, &nseg);
	if (v != MEM_OK)
		return mem_verdict_local_status(v);
	memcpy(val, seg.addr, 8);
	return IBV_WC_SUCCESS;
}

static int post_one_send(struct uroce_qp *qp, struct ibv_send_wr *wr)
{
	if (qp->sq_head - qp->sq_tail >= qp->sq_size)
		return ENOMEM;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_send_sge || !wr_allowed(wr->opcode, qp->type))
		return EINVAL;
	if (qp->type == IBV_QPT_UD && (!wr->wr.ud.ah || wr->wr.ud.ah->context != qp->ibv.qp_base.context))
		return EINVAL;

	const struct uroce_wr_info *op = wr_info(wr->opcode);
	/* inline data is what the requester sends, never a response's target */
	bool is_inline = (wr->send_flags & IBV_SEND_INLINE) && !(op->flags & WRF_RESPONSE);
	bool atomic_write = op->kind == WRK_ATOMIC_WRITE;
	struct uroce_send_wqe *w = &qp->sq[qp->sq_head % qp->sq_size];
	struct uroce_sge *sges = w->sge;
	uint64_t total = 0;

	for (int i = 0; i < wr->num_sge; i++)
		total += wr->sg_list[i].length;
	/* an ATOMIC_WRITE's 8 bytes live in its WQE, whatever max_inline_data */
	if (is_inline && total > qp->cap.max_inline_data && !atomic_write)
		return EINVAL;
	memset(w, 0, sizeof(*w));
	w->sge = sges;
	w->wr_id = wr->wr_id;
	w->opcode = wr->opcode;
	w->send_flags = wr->send_flags;
	w->status = IBV_WC_SUCCESS;
	w->state = WQE_POSTED;
	if (op->flags & WRF_RDMA) {
		w->remote_addr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
	} else if (op->flags & WRF_ATOMIC_ARGS) {
		w->remote_addr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->compare_add = wr->wr.atomic.compare_add;
		w->swap = wr->wr.atomic.swap;
	}
	if (qp->type == IBV_QPT_UD) {
		const struct uroce_ah *ah = to_uah(wr->wr.ud.ah);
		w->remote_qpn = wr->wr.ud.remote_qpn & 0xFFFFFF;
		/* a "controlled" Q_Key (bit 31) means: use the QP's own (§2.2) */
		w->remote_qkey = (wr->wr.ud.remote_qkey & 0x80000000u) ? qp->attr.qkey : wr->wr.ud.remote_qkey;
		memcpy(w->dgid, ah->attr.grh.dgid.raw, 16);
		w->sgid_index = ah->attr.grh.sgid_index;
		w->tclass = ah->attr.grh.traffic_class;
	}
	if (wr->opcode == IBV_WR_BIND_MW) {
		/* executed by the requester (mem/mw.c); what it binds is checked there */
		const struct ibv_mw_bind_info *bi = &wr->bind_mw.bind_info;
		if (!wr->bind_mw.mw || wr->bind_mw.mw->context != qp->ibv.qp_base.context ||
		    (bi->mr && bi->mr->context != qp->ibv.qp_base.context))
			return EINVAL;
		w->bind_mw = wr->bind_mw.mw;
		/* the consumer's 8 bits of the new key on the window's own
		 * index: the requester finds the window by it (mem/mw.c) */
		w->rkey = (wr->bind_mw.mw->rkey & ~0xFFu) | (wr->bind_mw.rkey & 0xFFu);
		w->bind_lkey = bi->mr ? bi->mr->lkey : 0;
		w->remote_addr = bi->addr;
		w->bind_len = bi->mr ? bi->length : 0;
		w->bind_access = bi->mw_access_flags;
	}
	if (qp->type == IBV_QPT_XRC_SEND)
		w->remote_srqn = wr->qp_type.xrc.remote_srqn & 0xFFFFFF;  /* its XRCETH (§2.2) */
	if (op->flags & WRF_IMM)
		w->imm_data = wr->imm_data;
	else if (op->flags & WRF_INV)
		w->imm_data = wr->invalidate_rkey;

	if (total > UROCE_MAX_MSG) {
		w->status = IBV_WC_LOC_LEN_ERR;
		total = 0;
	}
	w->length = (uint32_t)total;
	bool atomic = op->kind == WRK_ATOMIC;
	if (atomic) {
		w->length = 8;
		if (wr->num_sge < 1 || wr->sg_list[0].length < 8)
			w->status = IBV_WC_LOC_LEN_ERR;
	}
	if (atomic_write) {
		/* the 8 bytes to write (sg_list[0], by lkey or inline) are taken
		 * now and kept in the WQE: the requester sends them from there,
		 * as a retry does (rxe copies them into its WQE too) */
		w->length = 8;
		if (wr->num_sge < 1 || wr->sg_list[0].length < 8)
			w->status = IBV_WC_LOC_LEN_ERR;
		else if (w->status == IBV_WC_SUCCESS)
			w->status = atomic_write_value(qp, &wr->sg_list[0], is_inline, &w->compare_add);
		w->inline_data = (uint8_t *)&w->compare_add;
	} else if (w->status != IBV_WC_SUCCESS) {
		/* completes with the error when it reaches the head */
	} else if (is_inline) {
		uint8_t *buf = qp->sq_inline + (size_t)(qp->sq_head % qp->sq_size) * qp->cap.max_inline_data;
		uint32_t off = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			/* an empty SGE may have no address (UCX's zero-length
			 * active messages post NULL): nothing to copy */
			if (!wr->sg_list[i].length)
				continue;
			memcpy(buf + off, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			off += wr->sg_list[i].length;
		}
		dev_count(qp->dev, UC_copy_inline_bytes, off);
		w->inline_data = buf;
	} else {
		/* the SGEs as posted: their lkeys are checked each time the WQE
		 * executes (mem.h), as rxe and mlx5 do, so a dereg or rereg
		 * after posting is seen (ibv_dereg_mr(3)) */
		uint32_t n = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			if (!wr->sg_list[i].length)
				continue;
			sges[n].addr = wr->sg_list[i].addr;
			sges[n].length = wr->sg_list[i].length;
			sges[n].lkey = wr->sg_list[i].lkey;
			n++;
		}
		w->nsge = n;
	}
	qp->sq_head++;
	return 0;
}

/* Posts that join a stream.  A post sends at once, which keeps a lone
 * message's latency low, but an application that streams small messages
 * (ib_write_bw 64 B: one WQE a call) then pays a sendmmsg, and the receiver
 * a receive, for each packet: between two namespaces that bound it to about
 * 0.6x a bare UDP stream, while the same posts made 16 to a call (-l 16)
 * left as one GSO bundle and ran 9x faster.  So a one-packet SEND or WRITE
 * posted while its RC QP has packets unacknowledged waits for the next
 * posts, as TCP's autocork holds a segment while one is still in the
 * queue.  What ends the wait: UROCE_CORK_PKTS packets waiting (they leave in
 * one call), a post that may not wait, any CQ poll or arm of the device
 * (sq_send_corked: the application looks for completions or goes to sleep),
 * and the QP's next response: the unacknowledged packets asked for one (the
 * last packet of each message asks, requester.c), and completer_rx runs the
 * requester when it comes, whoever receives it -- the peer ACKs within its
 * own bounded waits (ack.c: a ride's UROCE_ACK_DEFER_US, a stream's 10 us)
 * or the retry timer runs the requester (so never with no timer armed).
 * Never while the QP owes an ACK: the post carries it now (a peer streaming
 * back would otherwise wait for it while it waits for ours).  Never on UC or
 * UD, which have no responses to end a wait, nor with the send queue full.
 * A hold that a response ended well after its last post was a request the
 * application waits on without a verbs call: the QP then sends at once for
 * a while (completer.c, cork_missed).  Under qp->lock; true if the posts from
 * `head` wait. */
static bool post_cork(struct uroce_qp *qp, uint32_t head)
{
	unsigned max = qp->dev->cfg.cork_pkts;
	uint32_t pkts = qp->req.corked;

	if (!max || !qp_reliable(qp) || qp->attr.qp_state != IBV_QPS_RTS || qp->ack.owed ||
	    psn_cmp(qp->req.snd_psn, qp->comp.una_psn) <= 0 || head == qp->sq_head)
		return false;
	/* no timer armed (an infinite local ACK timeout, no RTT sample yet):
	 * a lost response would leave the post waiting for a verbs call */
	if (!qp->timer.deadline)
		return false;
	/* a full send queue: nothing more can join, and an application that
	 * posts again on ENOMEM would wait for a response */
	if (qp->sq_head - qp->sq_tail >= qp->sq_size)
		return false;
	if (backoff_skip(&qp->req.cork_backoff))  /* holds missed lately (completer.c, cork_missed) */
		return false;
	for (uint32_t i = head; i != qp->sq_head; i++) {
		const struct uroce_send_wqe *w = &qp->sq[i % qp->sq_size];
		enum wr_kind k = wr_info(w->opcode)->kind;
		if ((k != WRK_SEND && k != WRK_WRITE) || w->status != IBV_WC_SUCCESS || w->length > qp->pmtu)
			return false;
		pkts++;
	}
	if (pkts >= max) {
		backoff_filled(&qp->req.cork_backoff);  /* a stream for sure (completer.c, cork_missed) */
		return false;
	}
	qp->req.corked = pkts;
	qp->req.cork_post_ns = now_ns();
	return true;
}

/* The QP on the device's list of corked ones, once, after its lock is let
 * go: a lock-free push, so that posting takes no lock that two QPs share
 * (docs/architecture.md, "Locks").  The list is only ever taken whole
 * (send_listed), so a push needs no ABA guard. */
static void cork_list(struct uroce_qp *qp)
{
	struct uroce_dev *dev = qp->dev;

	dev_count(dev, UC_posts_corked, 1);
	if (atomic_exchange(&qp->cork_listed, true))
		return;
	struct uroce_qp *head = atomic_load_explicit(&dev->corked, memory_order_relaxed);
	do
		qp->next_corked = head;
	while (!atomic_compare_exchange_weak(&dev->corked, &head, qp));
}

/* Runs the requester of every listed QP but `skip` (counted as sent by a
 * poll unless `skip`: a QP's destruction sends them).  Under dev->cork_lock,
 * which keeps a QP being destroyed from going while it is run
 * (sq_cork_gone).  A QP's next is read before it leaves the list: a post
 * may list it again at once. */
static void send_listed(struct uroce_dev *dev, struct uroce_qp *skip)
{
	struct uroce_qp *qp = atomic_exchange_explicit(&dev->corked, NULL, memory_order_acquire);

	while (qp) {
		struct uroce_qp *next = qp->next_corked;
		atomic_store(&qp->cork_listed, false);
		if (qp != skip) {
			pthread_mutex_lock(&qp->lock);
			if (qp->req.corked) {
				if (!skip)
					dev_count(dev, UC_corked_sent_by_poll, 1);
				requester_run(qp);
			}
			pthread_mutex_unlock(&qp->lock);
		}
		qp = next;
	}
}

/* A poll that finds another thread sending the list need not wait; but
 * that thread may have taken the list before a QP was pushed whose thread's
 * trylock then failed (an arm before a sleep), so whoever sends looks again
 * after letting go: a push comes before its failed trylock, which comes
 * before the sender's unlock. */
void sq_send_corked(struct uroce_dev *dev)
{
	while (atomic_load(&dev->corked) && !pthread_mutex_trylock(&dev->cork_lock)) {
		send_listed(dev, NULL);
		pthread_mutex_unlock(&dev->cork_lock);
	}
}

/* The QP is being destroyed: once no thread runs the list, it is on it no
 * more (the others on it are sent; its own posts go with it). */
void sq_cork_gone(struct uroce_qp *qp)
{
	struct uroce_dev *dev = qp->dev;

	pthread_mutex_lock(&dev->cork_lock);
	if (atomic_load(&qp->cork_listed))
		send_listed(dev, qp);
	pthread_mutex_unlock(&dev->cork_lock);
}

/* Queues the list from `wr`, then sends.  all_or_none: a WR that fails
 * drops the whole list (the ibv_wr_* batch, ibv_wr_post(3): "the entire
 * posting will be aborted"); otherwise the WRs before it stay queued, as
 * ibv_post_send does. */
static int post_send_list(struct uroce_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad, bool all_or_none)
{
	int rc = 0;

	pthread_mutex_lock(&qp->lock);
	uint32_t head = qp->sq_head;
	enum ibv_qp_state st = qp->attr.qp_state;
	if (st != IBV_QPS_RTS && st != IBV_QPS_SQD && st != IBV_QPS_ERR) {
		/* rxe: posting before RTS is EINVAL */
		*bad = wr;
		pthread_mutex_unlock(&qp->lock);
		return EINVAL;
	}
	for (; wr; wr = wr->next) {
		rc = post_one_send(qp, wr);
		if (rc) {
			*bad = wr;
			/* nobody saw the slots past head: the requester runs
			 * only under this lock */
			if (all_or_none)
				qp->sq_head = head;
			break;
		}
	}
	bool corked = false;
	if (st == IBV_QPS_ERR)
		qp_flush_queues(qp);
	else if (!(corked = post_cork(qp, head)))
		requester_run(qp);
	pthread_mutex_unlock(&qp->lock);
	if (corked)
		cork_list(qp);
	dev_post_stamp(qp->dev);
	return rc;
}

int uroce_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	return post_send_list(to_uqp(ibqp), wr, bad, false);
}

int sq_post_batch(struct uroce_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	return post_send_list(qp, wr, &bad, true);
}

static int rq_post(struct uroce_rq *rq, struct ibv_recv_wr *wr)
{
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > rq->max_sge)
		return EINVAL;
	pthread_spin_lock(&rq->lock);
	if (rq->head - rq->tail >= rq->max_wr) {
		pthread_spin_unlock(&rq->lock);
		return ENOMEM;
	}
	struct uroce_recv_wqe *r = &rq->wqe[rq->head % rq->max_wr];
	uint32_t n = 0;
	uint64_t total = 0;
	r->wr_id = wr->wr_id;
	/* checked when data is placed (responder.c, mem_sge_copy_to) */
	for (int i = 0; i < wr->num_sge; i++) {
		if (!wr->sg_list[i].length)
			continue;
		r->sge[n].addr = wr->sg_list[i].addr;
		r->sge[n].length = wr->sg_list[i].length;
		r->sge[n].lkey = wr->sg_list[i].lkey;
		total += wr->sg_list[i].length;
		n++;
	}
	r->nsge = n;
	r->length = total > UINT32_MAX ? UINT32_MAX : (uint32_t)total;
	__atomic_store_n(&rq->head, rq->head + 1, __ATOMIC_RELEASE);
	pthread_spin_unlock(&rq->lock);
	return 0;
}

int uroce_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct uroce_qp *qp = to_uqp(ibqp);
	int rc = 0;

	/* an XRC QP has no receive queue: INI only sends, TGT receives into
	 * the XRC SRQs its requests name (mlx5 answers EINVAL too) */
	if (qp->srq || qp->type == IBV_QPT_XRC_SEND || qp->type == IBV_QPT_XRC_RECV) {
		*bad = wr;
		return EINVAL;
	}
	enum ibv_qp_state st = qp->attr.qp_state;
	if (st == IBV_QPS_RESET) {
		*bad = wr;
		return EINVAL;
	}
	for (; wr; wr = wr->next) {
		rc = rq_post(&qp->rq, wr);
		if (rc) {
			*bad = wr;
			break;
		}
	}
	if (st == IBV_QPS_ERR) {
		pthread_mutex_lock(&qp->lock);
		qp_flush_recv_queue(qp);
		pthread_mutex_unlock(&qp->lock);
	}
	return rc;
}


int uroce_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct uroce_srq *srq = to_usrq(ibsrq);
	int rc = 0;

	for (; wr; wr = wr->next) {
		rc = rq_post(&srq->rq, wr);
		if (rc) {
			*bad = wr;
			break;
		}
	}
	return rc;
}
