/* Queue pairs: create / modify / query / destroy.  Posting is sq/post.c's;
 * completion, flush and the error state are transport/completion.c's. */
#include "obj.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "qp_state.h"
#include "../wire/hdr.h"
#include "../wire/ip.h"
#include "../net/share.h"
#include "../core/async.h"
#include "../core/cq_ring.h"
#include "../core/wake.h"
#include "../sq/sq.h"
#include "../transport/transport.h"

/* ------------------------------------------------------------ create */

static void qp_free(struct uroce_qp *qp)
{
	pd_buf_free(qp->pd, qp->sq, UROCE_RES_QP, qp->sq_custom);
	free(qp->sq_sges);
	free(qp->sq_inline);
	free(qp->resp.res);
	qpex_free(qp);
	rq_fini(&qp->rq);
	pthread_mutex_destroy(&qp->lock);
	free(qp);
}

static struct ibv_qp *create_qp(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a, bool gsi)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	struct uroce_qp *qp;
	int err = EINVAL;

	if (a->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
				       IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) {
		/* RSS ... are not offered */
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* create flags name offloads of a hardware NIC (scatter FCS, VLAN
	 * stripping, self-multicast loopback ...): none of them is offered,
	 * and asking for none is a plain create (rdma-core tests pass 0) */
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* the XRC halves ignore what they do not have (below): a copy, so the
	 * caller's attributes stay as given */
	struct ibv_qp_init_attr_ex in = *a;
	bool tgt = in.qp_type == IBV_QPT_XRC_RECV;
	if (tgt) {
		/* an XRC TGT QP belongs to an XRC domain and has neither PD, CQs
		 * nor queues of its own (IBA A14: its requests name the XRC SRQ
		 * that receives them); ib_core ignores the rest */
		if (!(in.comp_mask & IBV_QP_INIT_ATTR_XRCD) || !in.xrcd || in.xrcd->context != ctx) {
			errno = EINVAL;
			return NULL;
		}
		in.pd = NULL;
		in.send_cq = in.recv_cq = NULL;
		in.srq = NULL;
		memset(&in.cap, 0, sizeof(in.cap));
	} else if (!(in.comp_mask & IBV_QP_INIT_ATTR_PD) || !in.pd || in.pd->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	if (in.qp_type != IBV_QPT_RC && in.qp_type != IBV_QPT_UC && in.qp_type != IBV_QPT_UD &&
	    in.qp_type != IBV_QPT_XRC_SEND && !tgt) {
		errno = in.qp_type == IBV_QPT_RAW_PACKET || in.qp_type == IBV_QPT_DRIVER ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	if (in.qp_type == IBV_QPT_XRC_SEND) {
		/* an XRC INI QP is a send queue alone: no receive CQ, no RQ, no
		 * SRQ (IBA A14; ib_core ignores recv_cq and the receive caps) */
		if (in.srq) {
			errno = EINVAL;
			return NULL;
		}
		in.recv_cq = NULL;
		in.cap.max_recv_wr = in.cap.max_recv_sge = 0;
	}
	if ((!tgt && (!in.send_cq || in.send_cq->context != ctx)) ||
	    (!in.recv_cq && !tgt && in.qp_type != IBV_QPT_XRC_SEND) || (in.recv_cq && in.recv_cq->context != ctx) ||
	    in.cap.max_send_wr > UROCE_MAX_QP_WR || in.cap.max_recv_wr > UROCE_MAX_QP_WR ||
	    in.cap.max_send_sge > UROCE_MAX_SGE || in.cap.max_recv_sge > UROCE_MAX_SGE ||
	    in.cap.max_inline_data > UROCE_MAX_INLINE || (in.srq && in.srq->context != ctx)) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->dev = dev;
	qp->type = in.qp_type;
	responder_reset(qp);
	ack_reset(qp);
	qp->sq_sig_all = in.sq_sig_all;
	qp->cap = in.cap;
	if (qp->cap.max_send_sge == 0)
		qp->cap.max_send_sge = 1;
	qp->sq_size = in.cap.max_send_wr ? in.cap.max_send_wr : 1;
	qp->pd = in.pd ? to_upd(in.pd) : NULL;
	/* the WQE ring from a parent domain's allocator (obj/pd.c) */
	qp->sq = pd_buf_alloc(qp->pd, (size_t)qp->sq_size * sizeof(*qp->sq), UROCE_RES_QP, &qp->sq_custom);
	qp->sq_sges = calloc((size_t)qp->sq_size * qp->cap.max_send_sge, sizeof(*qp->sq_sges));
	qp->sq_inline = qp->cap.max_inline_data ? malloc((size_t)qp->sq_size * qp->cap.max_inline_data) : NULL;
	if (!qp->sq || !qp->sq_sges || (qp->cap.max_inline_data && !qp->sq_inline))
		goto fail_nomem;
	for (uint32_t i = 0; i < qp->sq_size; i++)
		qp->sq[i].sge = qp->sq_sges + (size_t)i * qp->cap.max_send_sge;
	/* the ibv_wr_* API only for a QP that asks for it (ibv_qp_to_qp_ex
	 * answers NULL otherwise, as libibverbs does) */
	if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (err = qpex_create(qp, a->send_ops_flags)))
		goto fail;
	if (in.srq) {
		qp->srq = to_usrq(in.srq);
		qp->cap.max_recv_wr = 0;
		qp->cap.max_recv_sge = 0;
	} else if (rq_init(&qp->rq, in.cap.max_recv_wr, in.cap.max_recv_sge)) {
		goto fail_nomem;
	}
	pthread_mutex_init(&qp->lock, NULL);
	qp->pd = in.pd ? to_upd(in.pd) : NULL;
	qp->send_cq = in.send_cq ? to_ucq(in.send_cq) : NULL;
	qp->recv_cq = in.recv_cq ? to_ucq(in.recv_cq) : NULL;
	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.path_mtu = dev->cfg.active_mtu;
	qp->pmtu = 128u << dev->cfg.active_mtu;
	qp->cc.max = cc_window_max(dev->cfg.window, qp->pmtu);

	struct ibv_qp *q = &qp->ibv.qp_base;
	q->context = ctx;
	q->qp_context = in.qp_context;
	q->pd = in.pd;
	q->send_cq = in.send_cq;
	q->recv_cq = in.recv_cq;
	q->srq = in.srq;
	q->state = IBV_QPS_RESET;
	q->qp_type = in.qp_type;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);

	/* allocate a QPN and publish the QP */
	pthread_mutex_lock(&dev->lock);
	if (dev->nqp >= UROCE_MAX_QP - 3) {
		pthread_mutex_unlock(&dev->lock);
		err = ENOMEM;
		goto fail;
	}
	/* QPN = the device's slot << SHARE_SLOT_SHIFT | table index: the
	 * slot names this process on a shared address (net/share.h), the
	 * index moves on with every QP, so a QPN comes back only after
	 * UROCE_MAX_QP others (a destroyed QP's late packets find no QP) */
	if (gsi) {
		/* QP1 (GSI): the connection manager's (cm/), one per process;
		 * on a shared address net/ hands each process the QP1 packets
		 * that name it (net/share.h) */
		if (atomic_load(&dev->qp_table[1])) {
			pthread_mutex_unlock(&dev->lock);
			err = EBUSY;
			goto fail;
		}
		qp->qpn = 1;
	}
	for (; !gsi;) {
		uint32_t idx = dev->qpn_next++ & (UROCE_MAX_QP - 1);
		if (idx < 2 || idx == UROCE_MAX_QP - 1 || atomic_load(&dev->qp_table[idx]))
			continue;
		qp->qpn = (uint32_t)dev->net->qpn_slot << SHARE_SLOT_SHIFT | idx;
		break;
	}
	q->qp_num = qp->qpn;
	q->handle = qp->qpn;
	if (qp->type == IBV_QPT_UD && dev->nqp_ud++ == 0)
		net_rx_ip_meta(dev->net, true);
	atomic_store_explicit(&dev->qp_table[qp->qpn & (UROCE_MAX_QP - 1)], qp, memory_order_release);
	qp->next_in_dev = dev->qp_list;
	dev->qp_list = qp;
	dev->nqp++;
	if (qp->send_cq)
		qp->send_cq->refcnt++;
	if (qp->recv_cq)
		qp->recv_cq->refcnt++;
	if (qp->srq)
		qp->srq->refcnt++;
	if (tgt) {
		qp->xrcd = to_uxrcd(in.xrcd);
		qp->xrcd->refcnt++;  /* ibv_close_xrcd: EBUSY while it lives */
	}
	pthread_mutex_unlock(&dev->lock);
	if (qp->pd)
		atomic_fetch_add(&qp->pd->refcnt, 1);
	a->cap = qp->cap;
	return q;
fail_nomem:
	err = ENOMEM;
fail:
	pd_buf_free(qp->pd, qp->sq, UROCE_RES_QP, qp->sq_custom);
	free(qp->sq_sges);
	free(qp->sq_inline);
	qpex_free(qp);
	rq_fini(&qp->rq);
	free(qp);
	errno = err;
	return NULL;
}

struct ibv_qp *uroce_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	return create_qp(ctx, a, false);
}

struct ibv_qp *uroce_create_gsi_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = attr->send_cq, .recv_cq = attr->recv_cq, .cap = attr->cap, .qp_type = IBV_QPT_UD,
		.sq_sig_all = attr->sq_sig_all, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
	};
	return pd ? create_qp(pd->context, &a, true) : NULL;
}

struct ibv_qp *uroce_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex a = { 0 };

	if (!pd) {
		errno = EINVAL;
		return NULL;
	}
	a.qp_context = attr->qp_context;
	a.send_cq = attr->send_cq;
	a.recv_cq = attr->recv_cq;
	a.srq = attr->srq;
	a.cap = attr->cap;
	a.qp_type = attr->qp_type;
	a.sq_sig_all = attr->sq_sig_all;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	struct ibv_qp *q = uroce_create_qp_ex(pd->context, &a);
	if (q)
		attr->cap = a.cap;
	return q;
}

int uroce_destroy_qp(struct ibv_qp *ibqp)
{
	struct uroce_qp *qp = to_uqp(ibqp);
	struct uroce_dev *dev = qp->dev;

	/* unpublish under rx_lock: afterwards no packet or timer can reach it */
	pthread_mutex_lock(&dev->rx_lock);
	pthread_mutex_lock(&dev->lock);
	if (qp->opens) {
		/* an XRC TGT QP opened by ibv_open_qp lives until its last
		 * handle is destroyed (ib_core keeps the shared QP so) */
		qp->opens--;
		pthread_mutex_unlock(&dev->lock);
		pthread_mutex_unlock(&dev->rx_lock);
		return 0;
	}
	atomic_store(&dev->qp_table[qp->qpn & (UROCE_MAX_QP - 1)], NULL);
	for (struct uroce_qp **pp = &dev->qp_list; *pp; pp = &(*pp)->next_in_dev)
		if (*pp == qp) {
			*pp = qp->next_in_dev;
			break;
		}
	ack_qp_gone(qp);  /* a deferred ACK is not lost with the QP */
	if (qp->type == IBV_QPT_UD)
		mcast_qp_gone(dev, qp);
	if (qp->type == IBV_QPT_UD && --dev->nqp_ud == 0)
		net_rx_ip_meta(dev->net, false);
	dev->nqp--;
	if (qp->send_cq)
		qp->send_cq->refcnt--;
	if (qp->recv_cq)
		qp->recv_cq->refcnt--;
	if (qp->srq)
		qp->srq->refcnt--;
	if (qp->xrcd)
		qp->xrcd->refcnt--;
	pthread_mutex_unlock(&dev->lock);
	pthread_mutex_unlock(&dev->rx_lock);
	sq_cork_gone(qp);
	/* events never read are dropped with the QP (the kernel does so); those
	 * read must be acknowledged first (rdma-core ibv_cmd_destroy_qp) */
	async_drop_events(to_uctx(ibqp->context), ibqp, true);
	pthread_mutex_lock(&ibqp->mutex);
	while (ibqp->events_completed != qp->events_reported)
		pthread_cond_wait(&ibqp->cond, &ibqp->mutex);
	pthread_mutex_unlock(&ibqp->mutex);
	pthread_mutex_lock(&qp->lock);
	if (qp->type == IBV_QPT_UD) {
		for (int i = 0; i < UROCE_MAX_GIDS; i++)
			if (qp->ud_flows[i])
				net_flow_close(dev->net, qp->ud_flows[i]);
	} else if (qp->flow) {
		net_flow_close(dev->net, qp->flow);
	}
	qp->flow = NULL;
	pthread_mutex_unlock(&qp->lock);
	if (qp->pd)
		atomic_fetch_sub(&qp->pd->refcnt, 1);
	qp_free(qp);
	return 0;
}

/* ------------------------------------------------------------ modify */

/* Kernel convention for the UDP source port (§1.4, rdma_get_udp_sport). */
static uint16_t roce_udp_sport(uint32_t fl, uint32_t lqpn, uint32_t rqpn)
{
	if (!fl) {
		uint64_t v = (uint64_t)lqpn * rqpn;
		v ^= v >> 20;
		v ^= v >> 40;
		fl = (uint32_t)(v & 0xFFFFF);
	}
	return (uint16_t)(0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)));
}

static int check_attr_values(struct uroce_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct uroce_dev *dev = qp->dev;

	if ((mask & IBV_QP_PORT) && a->port_num != 1)
		return EINVAL;
	if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0)
		return EINVAL;
	if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
		return EINVAL;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > UROCE_MAX_RD_ATOMIC)
		return EINVAL;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > UROCE_MAX_RD_ATOMIC)
		return EINVAL;
	if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
		return EINVAL;
	if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
		return EINVAL;
	if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
		return EINVAL;
	if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
		return EINVAL;
	if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xFFFFFF)
		return EINVAL;
	/* IBV_ACCESS_ON_DEMAND is an MR bit that pyverbs' ODP tests pass in the
	 * QP's flags too; the kernel passes it on and mlx5 ignores it */
	if ((mask & IBV_QP_ACCESS_FLAGS) &&
	    (a->qp_access_flags & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND |
					      IBV_ACCESS_ON_DEMAND)))
		return EINVAL;
	if (mask & IBV_QP_AV) {
		/* RoCE needs a GRH: a non-global AH cannot be routed (rdma-core
		 * tests expect EINVAL) */
		if (!a->ah_attr.is_global || (a->ah_attr.port_num && a->ah_attr.port_num != 1))
			return EINVAL;
		/* an empty GID slot: rdma_fill_sgid_attr's ENODATA (api/verbs.c) */
		if (a->ah_attr.grh.sgid_index >= dev->cfg.ngids)
			return ENODATA;
		const uint8_t *dg = a->ah_attr.grh.dgid.raw;
		static const uint8_t zero[16];
		if (!memcmp(dg, zero, 16))
			return EINVAL;
		/* the destination must be the same IP family as the source GID */
		if (gid_is_ipv4(dg) != gid_is_ipv4(dev->cfg.gids[a->ah_attr.grh.sgid_index]))
			return EINVAL;
	}
	/* _ib_modify_qp: alternate paths are banned on RoCE */
	if (mask & IBV_QP_ALT_PATH)
		return EINVAL;
	return 0;
}

static void qp_reset(struct uroce_qp *qp)
{
	qp->sq_head = qp->sq_tail = 0;
	qp->rq.head = qp->rq.tail = 0;
	requester_reset(qp);
	completer_reset(qp);
	qp_timers_off(qp);
	memset(&qp->rtt, 0, sizeof(qp->rtt));
	responder_reset(qp);
	ack_reset(qp);
}

/* A connected QP's path MTU must fit the route to its peer.  RoCEv2 sets
 * DF (§1.2), so a packet larger than the route carries is refused by the
 * kernel (EMSGSIZE) every time it is sent, fragmentation being no option:
 * a QP whose full-size packets can never leave would end, after retry_cnt
 * timeouts, in a RETRY_EXC_ERR that names no cause.  So modify_qp fails
 * with EINVAL, and says why once, where the path MTU and the address
 * vector meet (RTR, or a later change of either) -- as a port's MTU bounds
 * the path MTU on InfiniBand (IBA 11.2.4.2's PMTU).  rxe and mlx5 accept
 * any path MTU up to 4096 at RTR and then lose the packets the link cannot
 * carry.  The largest packet of path MTU P is P + 64 bytes of IPv4, UDP,
 * BTH, RETH, ImmDt and ICRC (P + 84 over IPv6).  Without a route (no
 * interface yet) nothing can be said and nothing is refused. */
static int check_path_mtu(struct uroce_qp *qp, const struct ibv_qp_attr *a, int mask, enum ibv_qp_state next)
{
	static atomic_bool told;
	struct uroce_dev *dev = qp->dev;

	if ((qp->type != IBV_QPT_RC && qp->type != IBV_QPT_UC && qp->type != IBV_QPT_XRC_SEND &&
	     qp->type != IBV_QPT_XRC_RECV) || next < IBV_QPS_RTR || next == IBV_QPS_ERR ||
	    !(mask & (IBV_QP_PATH_MTU | IBV_QP_AV)))
		return 0;
	enum ibv_mtu pm = (mask & IBV_QP_PATH_MTU) ? a->path_mtu : qp->attr.path_mtu;
	const struct ibv_ah_attr *ah = (mask & IBV_QP_AV) ? &a->ah_attr : &qp->attr.ah_attr;
	const uint8_t *sgid = dev->cfg.gids[ah->grh.sgid_index], *dgid = ah->grh.dgid.raw;
	int route = net_route_mtu(sgid, dgid);
	unsigned need = (128u << pm) + (gid_is_ipv4(sgid) ? 64 : 84);
	if (route <= 0 || need <= (unsigned)route)
		return 0;
	dev_count(dev, UC_path_mtu_refused, 1);
	if (!atomic_exchange(&told, true)) {
		char d[64];
		LOG_ERR("uroce: modify_qp: path MTU %u does not fit the route to %s (IP MTU %d, a packet needs %u): "
			"EINVAL; use a path MTU up to the port's active_mtu, or a larger link MTU",
			128u << pm, gid_format(dgid, d, sizeof(d)), route, need);
	}
	return EINVAL;
}

int uroce_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask)
{
	struct uroce_qp *qp = to_uqp(ibqp);
	struct uroce_dev *dev = qp->dev;
	int rc;

	/* a same-host peer's region is asked for here, not under qp->lock,
	 * which the engine's timers take under rx_lock (net/shm.c: the ask
	 * may wait for the peer's engine) */
	if ((mask & IBV_QP_AV) && qp->type != IBV_QPT_UD)
		net_flow_prepare(dev->net, a->ah_attr.grh.dgid.raw,
				 (mask & IBV_QP_DEST_QPN) ? a->dest_qp_num : qp->attr.dest_qp_num);
	pthread_mutex_lock(&qp->lock);
	enum ibv_qp_state cur = qp->attr.qp_state;
	enum ibv_qp_state next = (mask & IBV_QP_STATE) ? a->qp_state : cur;
	if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) {
		rc = EINVAL;
		goto out;
	}
	if (!qp_modify_is_ok(cur, next, qp->type, (unsigned)mask)) {
		rc = EINVAL;
		goto out;
	}
	rc = check_attr_values(qp, a, mask);
	if (!rc)
		rc = check_path_mtu(qp, a, mask, next);
	if (rc)
		goto out;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
		uint32_t n = a->max_dest_rd_atomic ? a->max_dest_rd_atomic : 1;
		struct uroce_rd_res *r = calloc(n, sizeof(*r));
		if (!r) {
			rc = ENOMEM;
			goto out;
		}
		free(qp->resp.res);
		qp->resp.res = r;
		qp->resp.res_size = n;
		qp->resp.res_next = 0;
		qp->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
	}
	if (mask & IBV_QP_PKEY_INDEX) qp->attr.pkey_index = a->pkey_index;
	if (mask & IBV_QP_PORT) qp->attr.port_num = a->port_num;
	if (mask & IBV_QP_QKEY) qp->attr.qkey = a->qkey;
	if (mask & IBV_QP_ACCESS_FLAGS) qp->attr.qp_access_flags = a->qp_access_flags;
	if (mask & IBV_QP_PATH_MTU) {
		qp->attr.path_mtu = a->path_mtu;
		qp->pmtu = 128u << a->path_mtu;
	}
	if (mask & IBV_QP_DEST_QPN) qp->attr.dest_qp_num = a->dest_qp_num;
	if (mask & IBV_QP_RQ_PSN) qp->attr.rq_psn = a->rq_psn & PSN_MASK;
	if (mask & IBV_QP_SQ_PSN) qp->attr.sq_psn = a->sq_psn & PSN_MASK;
	if (mask & IBV_QP_MIN_RNR_TIMER) qp->attr.min_rnr_timer = a->min_rnr_timer;
	if (mask & IBV_QP_TIMEOUT) qp->attr.timeout = a->timeout;
	if (mask & IBV_QP_RETRY_CNT) qp->attr.retry_cnt = a->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY) qp->attr.rnr_retry = a->rnr_retry;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC) qp->attr.max_rd_atomic = a->max_rd_atomic;
	if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) qp->attr.en_sqd_async_notify = a->en_sqd_async_notify;
	if (mask & IBV_QP_PATH_MIG_STATE) qp->attr.path_mig_state = a->path_mig_state;
	if (mask & IBV_QP_ALT_PATH) {
		qp->attr.alt_ah_attr = a->alt_ah_attr;
		qp->attr.alt_pkey_index = a->alt_pkey_index;
		qp->attr.alt_port_num = a->alt_port_num;
		qp->attr.alt_timeout = a->alt_timeout;
	}
	if (mask & IBV_QP_AV) {
		qp->attr.ah_attr = a->ah_attr;
		qp->tx_tos = a->ah_attr.grh.traffic_class;
		memcpy(qp->dgid, a->ah_attr.grh.dgid.raw, 16);
		memcpy(qp->sgid, dev->cfg.gids[a->ah_attr.grh.sgid_index], 16);
	}
	if ((mask & (IBV_QP_AV | IBV_QP_DEST_QPN)) && next >= IBV_QPS_RTR && next != IBV_QPS_ERR) {
		uint16_t sport = roce_udp_sport(qp->attr.ah_attr.grh.flow_label, qp->qpn, qp->attr.dest_qp_num);
		if (!qp->flow || sport != qp->sport_asked) {
			struct uroce_flow *f = net_flow_open(dev->net, qp->sgid, sport,
							       qp->type == IBV_QPT_UD ? NULL : qp->dgid,
							       qp->attr.dest_qp_num);
			if (!f) {
				rc = errno ? errno : ENOMEM;
				goto out;
			}
			if (qp->flow)
				net_flow_close(dev->net, qp->flow);
			qp->flow = f;
			qp->sport_asked = sport;
		}
	}

	if (mask & IBV_QP_STATE) {
		if (next == IBV_QPS_RESET)
			ack_now(qp);  /* as qp_enter_error: what was placed is ACKed */
		switch (next) {
		case IBV_QPS_RESET:
			if (cur != IBV_QPS_RESET) {
				/* leaving ERROR for RESET drops what is left without
				 * completions, as a hardware reset does, and the
				 * completions of this QP not yet polled leave its CQs
				 * (mlx5_cq_clean; with an SRQ only this QP's) */
				qp_reset(qp);
				/* an XRC INI QP has no receive CQ and a TGT QP no CQ
				 * at all (IBA A14; found by tests/fuzz/fuzz_rx.c:
				 * a NULL dereference) */
				if (qp->send_cq)
					cq_purge_qp(qp->send_cq, qp->qpn);
				if (qp->recv_cq && qp->recv_cq != qp->send_cq)
					cq_purge_qp(qp->recv_cq, qp->qpn);
			}
			break;
		case IBV_QPS_RTR:
			if (cur == IBV_QPS_INIT) {
				qp->resp.epsn = qp->attr.rq_psn;
				qp->resp.msn = 0;
			}
			break;
		case IBV_QPS_RTS:
			if (cur == IBV_QPS_RTR) {
				qp->req.snd_psn = qp->comp.una_psn = qp->req.max_psn = qp->attr.sq_psn;
				cc_init(&qp->cc, cc_window_max(dev->cfg.window, qp->pmtu));
			}
			qp->comp.retry_left = qp->attr.retry_cnt;
			qp->comp.rnr_left = qp->attr.rnr_retry;
			qp->req.sq_draining = false;
			break;
		case IBV_QPS_SQD:
			/* posts held back to join a stream (sq/post.c) were posted
			 * before the drain: they go, as without the wait */
			if (qp->req.corked)
				requester_run(qp);
			qp->req.sq_draining = true;
			qp->req.sqd_event_pending = (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) && a->en_sqd_async_notify;
			break;
		case IBV_QPS_ERR:
			qp->attr.qp_state = next;
			ibqp->state = next;
			qp->attr.qp_state = cur; /* let qp_enter_error see the transition */
			qp_enter_error(qp);
			break;
		default:
			break;
		}
		qp->attr.qp_state = next;
		ibqp->state = next;
		if (next == IBV_QPS_SQD)
			qp_retire_sends(qp); /* may already be drained */
		if (next == IBV_QPS_RTS && cur == IBV_QPS_SQD)
			requester_run(qp);
	}
out:
	pthread_mutex_unlock(&qp->lock);
	return rc;
}

int uroce_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	struct uroce_qp *qp = to_uqp(ibqp);

	(void)mask;
	pthread_mutex_lock(&qp->lock);
	*attr = qp->attr;
	attr->cur_qp_state = qp->attr.qp_state;
	attr->sq_draining = qp->attr.qp_state == IBV_QPS_SQD && qp->req.sq_draining;
	attr->cap = qp->cap;
	attr->port_num = qp->attr.port_num ? qp->attr.port_num : 1;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = ibqp->qp_context;
		init->send_cq = ibqp->send_cq;
		init->recv_cq = ibqp->recv_cq;
		init->srq = ibqp->srq;
		init->cap = qp->cap;
		init->qp_type = qp->type;
		init->sq_sig_all = qp->sq_sig_all;
	}
	pthread_mutex_unlock(&qp->lock);
	return 0;
}

