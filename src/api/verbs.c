/* The verbs surface: every libibverbs entry point an application reaches
 * (exported functions, context->ops, the verbs_context extended ops), as a
 * thin layer over exec/, obj/ and sq/.  See shared/docs/verbs-abi.md for
 * why each exists.
 *
 * Error convention (rdma-core): int-returning verbs return a positive errno;
 * pointer-returning ones return NULL and set errno. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/types.h>
#include <unistd.h>
#include "ops.h"
#include "../exec/exec.h"
#include "../wire/ip.h"
#include "../core/async.h"

#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------ device */

static struct ibv_device uroce_ibv_device = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "uroce0",
	/* the names libibverbs gives a kernel device, which programs turn into
	 * paths (UCX stats /dev/infiniband/<dev_name>): sysfs/ makes them
	 * exist; nothing opens the character device */
	.dev_name = "uverbs0",
	.dev_path = "/sys/class/infiniband_verbs/uverbs0",
	.ibdev_path = "/sys/class/infiniband/uroce0",
};

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **l = calloc(2, sizeof(*l));

	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	l[0] = &uroce_ibv_device;
	if (num)
		*num = 1;
	return l;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	(void)device;
	return uroce_node_guid();
}

EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	(void)device;
	return 0;
}

EXPORT int ibv_fork_init(void)
{
	return 0; /* nothing is pinned: fork is always safe */
}

EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}


EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct uroce_context *uctx;

	if (device != &uroce_ibv_device) {
		errno = ENODEV;
		return NULL;
	}
	uctx = calloc(1, sizeof(*uctx));
	if (!uctx) {
		errno = ENOMEM;
		return NULL;
	}
	uctx->dev = uroce_dev_get();
	if (!uctx->dev) {
		int e = errno;
		free(uctx);
		errno = e;
		return NULL;
	}
	struct ibv_context *ctx = &uctx->vctx.context;
	ctx->device = device;
	ctx->cmd_fd = eventfd(0, EFD_CLOEXEC);
	ctx->async_fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	pthread_mutex_init(&uctx->async_lock, NULL);
	uroce_fill_ops(&uctx->vctx);
	/* verbs-abi.md: mark the context extended, sz spans the ops we fill */
	ctx->abi_compat = (void *)UINTPTR_MAX;
	uctx->vctx.sz = sizeof(struct verbs_context);
	return ctx;
}

EXPORT struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT int ibv_close_device(struct ibv_context *ctx)
{
	struct uroce_context *uctx = to_uctx(ctx);

	close(ctx->cmd_fd);
	close(ctx->async_fd);
	pthread_mutex_destroy(&ctx->mutex);
	pthread_mutex_destroy(&uctx->async_lock);
	free(uctx->async_q);
	uroce_dev_put(uctx->dev);
	free(uctx);
	return 0;
}

EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	return uroce_query_port(ctx, port, (struct ibv_port_attr *)attr, sizeof(struct ibv_port_attr));
}

/* The GID table has UROCE_GID_TBL_LEN slots, as rxe's, and only the
 * configured addresses fill it.  The kernel's rdma_get_gid_attr answers
 * EINVAL past the table and ENODATA for an empty slot; libibverbs'
 * ibv_query_gid turns ENODATA into the zero GID and success ("preserve API
 * behavior for empty GID"), and ibv_query_gid_table lists valid entries
 * only.  So a program that walks the table (perftest, ibv_devinfo) sees
 * what it sees on rxe. */
static int gid_slot(struct uroce_dev *dev, uint32_t port, uint32_t index)
{
	if (port != 1 || index >= UROCE_GID_TBL_LEN)
		return EINVAL;
	return index < (uint32_t)dev->cfg.ngids ? 0 : ENODATA;
}

EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	int rc = index < 0 ? EINVAL : gid_slot(dev, port, (uint32_t)index);

	if (rc == EINVAL) {
		errno = EINVAL;
		return -1;
	}
	if (rc == ENODATA)
		memset(gid->raw, 0, 16);
	else
		memcpy(gid->raw, dev->cfg.gids[index], 16);
	return 0;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
			     struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	struct ibv_gid_entry e;
	int rc;

	if (flags || entry_size < sizeof(e.gid))
		return EINVAL;
	if ((rc = gid_slot(dev, port, index)))
		return rc;
	memset(&e, 0, sizeof(e));
	memcpy(e.gid.raw, dev->cfg.gids[index], 16);
	e.gid_index = index;
	e.port_num = 1;
	e.gid_type = IBV_GID_TYPE_ROCE_V2;
	e.ndev_ifindex = 0;
	memcpy(entry, &e, entry_size < sizeof(e) ? entry_size : sizeof(e));
	return 0;
}

EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
				    size_t max_entries, uint32_t flags, size_t entry_size)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	size_t n = 0;

	if (flags || entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	for (int i = 0; i < dev->cfg.ngids; i++) {
		if (n == max_entries)
			return -EINVAL;
		_ibv_query_gid_ex(ctx, 1, (uint32_t)i, (struct ibv_gid_entry *)((char *)entries + n * entry_size),
				  0, entry_size);
		n++;
	}
	return (ssize_t)n;
}

/* IBVERBS_PRIVATE_34: its enum differs from ibv_gid_entry's (1 = RoCE v2).
 * libibverbs reads sysfs gid_attrs/types/N, which the kernel fails for an
 * empty slot (ENODATA); libibverbs then answers -1 with errno EFAULT. */
EXPORT int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, int *type)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	int rc = gid_slot(dev, port, index);

	if (rc) {
		errno = rc == ENODATA ? EFAULT : EINVAL;
		return -1;
	}
	*type = 1; /* IBV_GID_TYPE_SYSFS_ROCE_V2 */
	return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	(void)ctx;
	if (port != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(0xFFFF);
	return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	(void)ctx;
	if (port != 1 || be16toh(pkey) != 0xFFFF) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ async events */

EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
	struct uroce_context *uctx = to_uctx(ctx);
	uint64_t v;

	for (;;) {
		/* blocks unless the application made the fd non-blocking */
		dev_count_syscall(uctx->dev, UC_sys_eventfd);
		if (read(ctx->async_fd, &v, sizeof(v)) != sizeof(v))
			return -1;
		pthread_mutex_lock(&uctx->async_lock);
		if (uctx->async_n)
			break;
		/* the event's object was destroyed before it was read */
		pthread_mutex_unlock(&uctx->async_lock);
	}
	*event = uctx->async_q[0];
	memmove(uctx->async_q, uctx->async_q + 1, (uctx->async_n - 1) * sizeof(*event));
	uctx->async_n--;
	/* counted when read: destroy waits for exactly these acknowledgements */
	if (async_event_is_qp(event->event_type))
		to_uqp(event->element.qp)->events_reported++;
	else if (event->event_type == IBV_EVENT_CQ_ERR)
		to_ucq(event->element.cq)->async_events_reported++;
	pthread_mutex_unlock(&uctx->async_lock);
	return 0;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
	if (async_event_is_qp(event->event_type)) {
		struct ibv_qp *qp = event->element.qp;
		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
		return;
	}
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR: {
		struct ibv_cq *cq = event->element.cq;
		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_signal(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
		break;
	}
	case IBV_EVENT_SRQ_ERR: case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct ibv_srq *srq = event->element.srq;
		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
		break;
	}
	default:
		break;
	}
}

/* ------------------------------------------------------------ PD / MR */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx) { return uroce_alloc_pd(ctx); }
EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) { return uroce_dealloc_pd(pd); }

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return uroce_reg_mr_iova(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return uroce_reg_mr_iova(pd, addr, length, iova, (unsigned)access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	return uroce_reg_mr_iova(pd, addr, length, iova, access);
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access)
{
	(void)pd; (void)offset; (void)length; (void)iova; (void)fd; (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return uroce_rereg_mr(mr, flags, pd, addr, length, access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr) { return uroce_dereg_mr(mr); }

EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *ctx, uint32_t h) { (void)ctx; (void)h; errno = EOPNOTSUPP; return NULL; }
EXPORT void ibv_unimport_pd(struct ibv_pd *pd) { (void)pd; }
EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t h) { (void)pd; (void)h; errno = EOPNOTSUPP; return NULL; }
EXPORT void ibv_unimport_mr(struct ibv_mr *mr) { (void)mr; }
EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *ctx, uint32_t h) { (void)ctx; (void)h; errno = EOPNOTSUPP; return NULL; }
EXPORT void ibv_unimport_dm(struct ibv_dm *dm) { (void)dm; }

/* ------------------------------------------------------------ CQ */

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx) { return uroce_create_comp_channel(ctx); }
EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) { return uroce_destroy_comp_channel(ch); }
EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	return uroce_create_cq(ctx, cqe, cq_context, channel, comp_vector);
}
EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe) { return uroce_resize_cq(cq, cqe); }
EXPORT int ibv_destroy_cq(struct ibv_cq *cq) { return uroce_destroy_cq(cq); }
EXPORT int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	return uroce_get_cq_event(ch, cq, cq_context);
}
EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents) { uroce_ack_cq_events(cq, nevents); }

/* ------------------------------------------------------------ QP */

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr) { return uroce_create_qp(pd, attr); }
EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) { return uroce_modify_qp(qp, attr, mask); }
EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	return uroce_query_qp(qp, attr, mask, init);
}
EXPORT int ibv_destroy_qp(struct ibv_qp *qp) { return uroce_destroy_qp(qp); }

/* Only QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS have the ibv_wr_*
 * API (sq/qpex.c); libibverbs returns NULL for the others. */
EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct uroce_qp *u = to_uqp(qp);

	if (!u->qpex) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return &u->ibv;
}

EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp; (void)op; (void)flags;
	return 0; /* data is placed in packet order, but promise nothing more */
}

EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece) { (void)qp; (void)ece; return EOPNOTSUPP; }
EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece) { (void)qp; (void)ece; return EOPNOTSUPP; }

/* ------------------------------------------------------------ SRQ */

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr) { return uroce_create_srq(pd, attr); }
EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask) { return uroce_modify_srq(srq, attr, mask); }
EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr) { return uroce_query_srq(srq, attr); }
EXPORT int ibv_destroy_srq(struct ibv_srq *srq) { return uroce_destroy_srq(srq); }

/* ------------------------------------------------------------ AH, multicast */

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct uroce_dev *dev = to_uctx(pd->context)->dev;
	struct uroce_ah *ah;

	/* RoCE routes by GRH only: a non-global AH is refused (verbs-abi.md);
	 * an sgid_index of an empty slot is rdma_get_gid_attr's ENODATA */
	if (!attr->is_global || (attr->port_num && attr->port_num != 1)) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->grh.sgid_index >= dev->cfg.ngids) {
		errno = ENODATA;
		return NULL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	ah->ibv.context = pd->context;
	ah->ibv.pd = pd;
	ah->attr = *attr;
	atomic_fetch_add(&to_upd(pd)->refcnt, 1);
	return &ah->ibv;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ibah)
{
	atomic_fetch_sub(&to_upd(ibah->pd)->refcnt, 1);
	free(to_uah(ibah));
	return 0;
}

/* The address back to a UD datagram's sender, from its completion and
 * the 40-byte GRH area (roce-wire.md §9: the IPv6 header, or 20 zero
 * bytes then the IPv4 header): the sender's address is the destination,
 * ours the source GID (udaddy's reply AH, cm-wire.md §6.1 item 12). */
EXPORT int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
			       struct ibv_ah_attr *ah_attr)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	const uint8_t *g = (const uint8_t *)grh;
	uint8_t peer[16], ours[16] = { 0 };

	if (!wc || !grh || !ah_attr || !(wc->wc_flags & IBV_WC_GRH)) {
		errno = EINVAL; /* RoCE routes by the GRH alone */
		return -1;
	}
	memset(ah_attr, 0, sizeof(*ah_attr));
	if ((g[0] >> 4) == 6) {
		memcpy(peer, g + 8, 16);
		memcpy(ours, g + 24, 16);
		ah_attr->grh.traffic_class = (uint8_t)((g[0] & 0xF) << 4 | g[1] >> 4);
		ah_attr->grh.flow_label = ((uint32_t)(g[1] & 0xF) << 16 | (uint32_t)g[2] << 8 | g[3]);
	} else if ((g[20] >> 4) == 4) {
		memset(peer, 0, 10);
		peer[10] = peer[11] = 0xFF;
		memcpy(ours, peer, 12);
		memcpy(peer + 12, g + 20 + 12, 4);
		memcpy(ours + 12, g + 20 + 16, 4);
		ah_attr->grh.traffic_class = g[21];
	} else {
		errno = EINVAL;
		return -1;
	}
	int idx = -1;
	for (int i = 0; i < dev->cfg.ngids && idx < 0; i++)
		if (!memcmp(dev->cfg.gids[i], ours, 16))
			idx = i;
	if (idx < 0) {
		errno = EINVAL; /* sent to no address of ours */
		return -1;
	}
	ah_attr->dlid = (uint16_t)wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port;
	ah_attr->is_global = 1;
	memcpy(ah_attr->grh.dgid.raw, peer, 16);
	ah_attr->grh.sgid_index = (uint8_t)idx;
	ah_attr->grh.hop_limit = 0xFF; /* rdma-core's choice for a reply */
	return 0;
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr a;
	if (!pd || ibv_init_ah_from_wc(pd->context, port, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}

EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return uroce_attach_mcast(qp, gid, lid);
}

EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	return uroce_detach_mcast(qp, gid, lid);
}

EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr, uint8_t eth_mac[6], uint16_t *vid)
{
	(void)ctx; (void)attr; (void)eth_mac; (void)vid;
	return EOPNOTSUPP;
}
