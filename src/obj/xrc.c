/* XRC objects (IBA Annex A14; ibv_open_xrcd(3), ibv_create_srq_ex(3),
 * ibv_open_qp(3)): XRC domains and opening an XRC TGT QP by number.  The
 * XRC QPs themselves are qp.c's, XRC SRQs and their numbers srq.c's; the
 * transport (transport/responder.c) looks XRC SRQs up by number on every
 * request.
 *
 * What sharing by file means in a user-space NIC.  The kernel keys an XRC
 * domain by the inode of the file given to ibv_open_xrcd, so that processes
 * of one device share it.  uroce's device is the process's own, so here a
 * domain is shared between the ibv_open_xrcd calls of one process that name
 * the same inode (any fd of that file, any context of uroce0), with the man
 * page's O_CREAT / O_EXCL rules, and each call returns its own handle whose
 * close ends only its use.  Two processes that open the same file get two
 * domains: an XRC TGT QP or XRC SRQ of another process cannot be reached by
 * ibv_open_qp or named by a local TGT QP, only over the wire, as any peer's. */
#include "obj.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

/* A domain: the XRCD handles opened on one inode (or one fd -1 open). */
struct uroce_xrc_dom {
	bool has_inode;
	dev_t st_dev;
	ino_t st_ino;
	int handles;                  /* open uroce_xrcd handles */
	struct uroce_xrc_dom *next;
};

/* The process's domains with an inode; taken alone (never with another lock
 * held inside). */
static pthread_mutex_t dom_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uroce_xrc_dom *doms;

struct ibv_xrcd *uroce_open_xrcd(struct ibv_context *ctx, struct ibv_xrcd_init_attr *attr)
{
	struct uroce_xrc_dom *dom = NULL;
	struct stat st;

	/* rdma-core's ibv_cmd_open_xrcd: both fields are required */
	if (!attr || attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ||
	    (attr->oflags & ~(O_CREAT | O_EXCL))) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->fd != -1 && fstat(attr->fd, &st) != 0) {
		errno = EBADF;
		return NULL;
	}
	struct uroce_xrcd *x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&dom_lock);
	if (attr->fd != -1)
		for (dom = doms; dom; dom = dom->next)
			if (dom->st_dev == st.st_dev && dom->st_ino == st.st_ino)
				break;
	/* the kernel's rules (ib_uverbs_open_xrcd): a domain not there yet
	 * needs O_CREAT, one there refuses O_EXCL -- both EINVAL */
	if ((!dom && !(attr->oflags & O_CREAT) && attr->fd != -1) || (dom && (attr->oflags & O_EXCL))) {
		pthread_mutex_unlock(&dom_lock);
		free(x);
		errno = EINVAL;
		return NULL;
	}
	if (!dom) {
		dom = calloc(1, sizeof(*dom));
		if (!dom) {
			pthread_mutex_unlock(&dom_lock);
			free(x);
			errno = ENOMEM;
			return NULL;
		}
		if (attr->fd != -1) {
			dom->has_inode = true;
			dom->st_dev = st.st_dev;
			dom->st_ino = st.st_ino;
			dom->next = doms;
			doms = dom;
		}
	}
	dom->handles++;
	pthread_mutex_unlock(&dom_lock);
	x->dom = dom;
	x->ibv.context = ctx;
	return &x->ibv;
}

int uroce_close_xrcd(struct ibv_xrcd *ibx)
{
	struct uroce_xrcd *x = to_uxrcd(ibx);
	struct uroce_dev *dev = to_uctx(ibx->context)->dev;

	/* ib_uverbs: a handle with XRC SRQs or TGT QPs made through it is busy */
	pthread_mutex_lock(&dev->lock);
	if (x->refcnt) {
		pthread_mutex_unlock(&dev->lock);
		return EBUSY;
	}
	pthread_mutex_unlock(&dev->lock);
	pthread_mutex_lock(&dom_lock);
	struct uroce_xrc_dom *dom = x->dom;
	if (--dom->handles == 0) {
		for (struct uroce_xrc_dom **pp = &doms; *pp; pp = &(*pp)->next)
			if (*pp == dom) {
				*pp = dom->next;
				break;
			}
		free(dom);
	}
	pthread_mutex_unlock(&dom_lock);
	free(x);
	return 0;
}

/* ibv_open_qp: another handle on an XRC TGT QP, found by number in the
 * caller's XRC domain.  A user-space device has one object per QP, so the
 * handle is the QP's own: each open is matched by one ibv_destroy_qp, and
 * the QP goes with the last (qp->opens); its qp_context stays the
 * creator's. */
struct ibv_qp *uroce_open_qp(struct ibv_context *ctx, struct ibv_qp_open_attr *a)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	const uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;

	if ((a->comp_mask & need) != need || a->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED || !a->xrcd ||
	    a->xrcd->context != ctx || a->qp_type != IBV_QPT_XRC_RECV) {
		errno = EINVAL;
		return NULL;
	}
	pthread_mutex_lock(&dev->lock);
	struct uroce_qp *qp = dev_lookup_qp(dev, a->qp_num);
	if (!qp || qp->type != IBV_QPT_XRC_RECV || qp->xrcd->dom != to_uxrcd(a->xrcd)->dom) {
		pthread_mutex_unlock(&dev->lock);
		errno = EINVAL;
		return NULL;
	}
	qp->opens++;
	pthread_mutex_unlock(&dev->lock);
	return &qp->ibv.qp_base;
}
