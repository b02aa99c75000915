/* Completion queues and completion channels.
 *
 * A CQ is a ring of struct ibv_wc under a spinlock.  A completion channel is
 * an eventfd (a real pollable fd, as applications expect of channel->fd) plus
 * a FIFO of the CQs that fired; ibv_get_cq_event reads one. */
#include "obj.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "../core/async.h"
#include "../core/cq_ring.h"
#include "../sq/sq.h"
#include "../util/fds.h"

struct ibv_comp_channel *uroce_create_comp_channel(struct ibv_context *ctx)
{
	struct uroce_comp_channel *ch = calloc(1, sizeof(*ch));

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->ibv.context = ctx;
	ch->ibv.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (fds_retry(ch->ibv.fd))
		ch->ibv.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (ch->ibv.fd < 0) {
		free(ch);
		return NULL;
	}
	pthread_mutex_init(&ch->lock, NULL);
	return &ch->ibv;
}

int uroce_destroy_comp_channel(struct ibv_comp_channel *ibch)
{
	struct uroce_comp_channel *ch = to_uchan(ibch);

	pthread_mutex_lock(&ch->lock);
	if (ch->refcnt) {
		pthread_mutex_unlock(&ch->lock);
		return EBUSY;
	}
	pthread_mutex_unlock(&ch->lock);
	close(ch->ibv.fd);
	pthread_mutex_destroy(&ch->lock);
	free(ch->pending);
	free(ch);
	return 0;
}

int uroce_get_cq_event(struct ibv_comp_channel *ibch, struct ibv_cq **cq, void **cq_context)
{
	struct uroce_comp_channel *ch = to_uchan(ibch);
	uint64_t v;

	for (;;) {
		/* blocks unless the application made the fd non-blocking (EAGAIN then) */
		dev_count_syscall(to_uctx(ibch->context)->dev, UC_sys_eventfd);
		if (read(ibch->fd, &v, sizeof(v)) != sizeof(v))
			return -1;
		pthread_mutex_lock(&ch->lock);
		if (ch->npending)
			break;
		/* the event's CQ was destroyed before the event was read */
		pthread_mutex_unlock(&ch->lock);
	}
	struct uroce_cq *c = ch->pending[0];
	memmove(ch->pending, ch->pending + 1, (ch->npending - 1) * sizeof(*ch->pending));
	ch->npending--;
	/* counted when read: destroy waits for exactly these acknowledgements */
	c->comp_events_reported++;
	pthread_mutex_unlock(&ch->lock);
	*cq = (struct ibv_cq *)&c->ibv;
	*cq_context = c->ibv.cq_context;
	return 0;
}

void uroce_ack_cq_events(struct ibv_cq *ibcq, unsigned int nevents)
{
	pthread_mutex_lock(&ibcq->mutex);
	ibcq->comp_events_completed += nevents;
	pthread_cond_signal(&ibcq->cond);
	pthread_mutex_unlock(&ibcq->mutex);
}

/* ---- extended CQ polling (ibv_start_poll & co) over the same ring ---- */

static void cqx_fill(struct uroce_cq *cq)
{
	cq->ibv.wr_id = cq->cur.wr_id;
	cq->ibv.status = cq->cur.status;
}
static int cqx_start_poll(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
	struct uroce_cq *cq = to_ucqx(c);
	if (attr->comp_mask)
		return EINVAL;
	sq_send_corked(cq->dev);  /* as ibv_poll_cq (api/poll.c) */
	if (!cq_pop(cq, &cq->cur))
		return ENOENT;
	cqx_fill(cq);
	return 0;
}
static int cqx_next_poll(struct ibv_cq_ex *c)
{
	struct uroce_cq *cq = to_ucqx(c);
	if (!cq_pop(cq, &cq->cur))
		return ENOENT;
	cqx_fill(cq);
	return 0;
}
static void cqx_end_poll(struct ibv_cq_ex *c) { (void)c; }
static enum ibv_wc_opcode cqx_read_opcode(struct ibv_cq_ex *c) { return to_ucqx(c)->cur.opcode; }
static uint32_t cqx_read_vendor_err(struct ibv_cq_ex *c) { return to_ucqx(c)->cur.vendor_err; }
static uint32_t cqx_read_byte_len(struct ibv_cq_ex *c) { return to_ucqx(c)->cur.byte_len; }
static __be32 cqx_read_imm_data(struct ibv_cq_ex *c) { return to_ucqx(c)->cur.imm_data; }
static uint32_t cqx_read_qp_num(struct ibv_cq_ex *c) { return to_ucqx(c)->cur.qp_num; }
static uint32_t cqx_read_src_qp(struct ibv_cq_ex *c) { return to_ucqx(c)->cur.src_qp; }
static unsigned int cqx_read_wc_flags(struct ibv_cq_ex *c) { return to_ucqx(c)->cur.wc_flags; }
static uint32_t cqx_read_slid(struct ibv_cq_ex *c) { return to_ucqx(c)->cur.slid; }
static uint8_t cqx_read_sl(struct ibv_cq_ex *c) { return to_ucqx(c)->cur.sl; }
static uint8_t cqx_read_dlid_path_bits(struct ibv_cq_ex *c) { return to_ucqx(c)->cur.dlid_path_bits; }

#define CQX_SUPPORTED_WC_FLAGS (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | \
	IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

struct ibv_cq_ex *uroce_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	struct uroce_cq *cq;
	uint32_t size = 1;

	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->wc_flags & ~(uint64_t)CQX_SUPPORTED_WC_FLAGS) {
		errno = EOPNOTSUPP; /* never leave an ibv_wc_read_* pointer NULL */
		return NULL;
	}
	if (attr->cqe < 1 || attr->cqe > UROCE_MAX_CQE || attr->comp_vector >= (uint32_t)ctx->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	/* mlx5_create_cq_ex: MASK_PD names a parent domain, whose allocator
	 * gives the ring (obj/pd.c) */
	struct uroce_pd *pdom = NULL;
	if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) {
		if (!attr->parent_domain || attr->parent_domain->context != ctx || !to_upd(attr->parent_domain)->parent) {
			errno = EINVAL;
			return NULL;
		}
		pdom = to_upd(attr->parent_domain);
	}
	pthread_mutex_lock(&dev->lock);
	if (dev->ncq >= UROCE_MAX_CQ) {
		pthread_mutex_unlock(&dev->lock);
		errno = ENOMEM;
		return NULL;
	}
	dev->ncq++;
	pthread_mutex_unlock(&dev->lock);
	while (size < attr->cqe + 1)
		size <<= 1;
	cq = calloc(1, sizeof(*cq));
	bool custom = false;
	if (!cq || !(cq->ring = pd_buf_alloc(pdom, size * sizeof(struct ibv_wc), UROCE_RES_CQ, &custom))) {
		free(cq);
		pthread_mutex_lock(&dev->lock);
		dev->ncq--;
		pthread_mutex_unlock(&dev->lock);
		errno = ENOMEM;
		return NULL;
	}
	cq->size = size;
	cq->dev = dev;
	if (custom && pdom) { /* custom implies pdom; said for GCC 12 -O3 (stringop-overflow) */
		cq->pdom = pdom;
		atomic_fetch_add(&pdom->refcnt, 1);
	}
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	cq->ibv.context = ctx;
	cq->ibv.channel = attr->channel;
	cq->ibv.cq_context = attr->cq_context;
	cq->ibv.cqe = (int)(size - 1);
	pthread_mutex_init(&cq->ibv.mutex, NULL);
	pthread_cond_init(&cq->ibv.cond, NULL);
	cq->ibv.start_poll = cqx_start_poll;
	cq->ibv.next_poll = cqx_next_poll;
	cq->ibv.end_poll = cqx_end_poll;
	cq->ibv.read_opcode = cqx_read_opcode;
	cq->ibv.read_vendor_err = cqx_read_vendor_err;
	cq->ibv.read_byte_len = cqx_read_byte_len;
	cq->ibv.read_imm_data = cqx_read_imm_data;
	cq->ibv.read_qp_num = cqx_read_qp_num;
	cq->ibv.read_src_qp = cqx_read_src_qp;
	cq->ibv.read_wc_flags = cqx_read_wc_flags;
	cq->ibv.read_slid = cqx_read_slid;
	cq->ibv.read_sl = cqx_read_sl;
	cq->ibv.read_dlid_path_bits = cqx_read_dlid_path_bits;
	if (attr->channel) {
		struct uroce_comp_channel *ch = to_uchan(attr->channel);
		pthread_mutex_lock(&ch->lock);
		ch->refcnt++;
		pthread_mutex_unlock(&ch->lock);
	}
	return &cq->ibv;
}

struct ibv_cq *uroce_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			       struct ibv_comp_channel *channel, int comp_vector)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = cqe < 0 ? 0 : (uint32_t)cqe, .cq_context = cq_context, .channel = channel,
		.comp_vector = comp_vector < 0 ? UINT32_MAX : (uint32_t)comp_vector,
	};
	if (cqe < 0) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_cq_ex *c = uroce_create_cq_ex(ctx, &a);
	return c ? ibv_cq_ex_to_cq(c) : NULL;
}

int uroce_destroy_cq(struct ibv_cq *ibcq)
{
	struct uroce_cq *cq = to_ucq(ibcq);
	struct uroce_dev *dev = cq->dev;

	pthread_mutex_lock(&dev->lock);
	if (cq->refcnt) {
		pthread_mutex_unlock(&dev->lock);
		return EBUSY;
	}
	dev->ncq--;
	pthread_mutex_unlock(&dev->lock);
	if (ibcq->channel) {
		struct uroce_comp_channel *ch = to_uchan(ibcq->channel);
		/* events not yet read go away with the CQ; those read must be
		 * acknowledged first (rdma-core ibv_cmd_destroy_cq) */
		pthread_mutex_lock(&ch->lock);
		unsigned k = 0;
		for (unsigned i = 0; i < ch->npending; i++)
			if (ch->pending[i] != cq)
				ch->pending[k++] = ch->pending[i];
		ch->npending = k;
		pthread_mutex_unlock(&ch->lock);
		pthread_mutex_lock(&ibcq->mutex);
		while (ibcq->comp_events_completed != cq->comp_events_reported)
			pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
		pthread_mutex_unlock(&ibcq->mutex);
		pthread_mutex_lock(&ch->lock);
		ch->refcnt--;
		pthread_mutex_unlock(&ch->lock);
	}
	/* its async events (CQ_ERR) likewise: unread ones go, read ones must be
	 * acknowledged first */
	async_drop_events(to_uctx(ibcq->context), ibcq, false);
	pthread_mutex_lock(&ibcq->mutex);
	while (ibcq->async_events_completed != cq->async_events_reported)
		pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
	pthread_mutex_unlock(&ibcq->mutex);
	/* make sure no engine work still holds the CQ (QPs are gone already) */
	pthread_mutex_lock(&dev->rx_lock);
	pthread_mutex_unlock(&dev->rx_lock);
	pthread_spin_destroy(&cq->lock);
	pd_buf_free(cq->pdom, cq->ring, UROCE_RES_CQ, cq->pdom != NULL);
	if (cq->pdom)
		atomic_fetch_sub(&cq->pdom->refcnt, 1);
	free(cq);
	return 0;
}

int uroce_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct uroce_cq *cq = to_ucq(ibcq);
	uint32_t size = 1;

	if (cqe < 1 || cqe > UROCE_MAX_CQE)
		return EINVAL;
	while (size < (uint32_t)cqe + 1)
		size <<= 1;
	bool custom = false;
	struct ibv_wc *ring = pd_buf_alloc(cq->pdom, size * sizeof(*ring), UROCE_RES_CQ, &custom);
	if (!ring)
		return ENOMEM;
	/* one ring of the allocator's and one of calloc's would need two
	 * owners: a default answer to a resize keeps the allocator's type */
	if (custom != (cq->pdom != NULL)) {
		pd_buf_free(cq->pdom, ring, UROCE_RES_CQ, custom);
		return ENOMEM;
	}
	pthread_spin_lock(&cq->lock);
	uint32_t n = cq->head - cq->tail;
	if (n > size - 1) {
		pthread_spin_unlock(&cq->lock);
		pd_buf_free(cq->pdom, ring, UROCE_RES_CQ, custom);
		return EINVAL;
	}
	for (uint32_t i = 0; i < n; i++)
		ring[i] = cq->ring[(cq->tail + i) & (cq->size - 1)];
	struct ibv_wc *old = cq->ring;
	cq->ring = ring;
	cq->size = size;
	cq->tail = 0;
	cq->head = n;
	cq->ibv.cqe = (int)(size - 1);
	pthread_spin_unlock(&cq->lock);
	pd_buf_free(cq->pdom, old, UROCE_RES_CQ, custom);
	return 0;
}

int uroce_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct uroce_cq *cq = to_ucq(ibcq);

	/* the application waits for an event next: what it posted must not
	 * wait for it (sq/post.c) */
	sq_send_corked(cq->dev);
	pthread_spin_lock(&cq->lock);
	/* "next completion" wins over "solicited only" when both were asked */
	if (cq->armed != CQ_ARM_ALL)
		cq->armed = solicited_only ? CQ_ARM_SOLICITED : CQ_ARM_ALL;
	pthread_spin_unlock(&cq->lock);
	return 0;
}
