/* Multicast (IBA 10.5, roce-wire.md §1.5 item 2): a UD QP attached to a
 * group receives every datagram sent to the group's GID with destination
 * QPN 0xFFFFFF (transport/recv.c delivers a copy to each).  The group's
 * packets reach this process through a socket the wire backend opens for
 * it (net/udp.c, udp_mcast_join): a member of the IP group on the device's
 * addresses, as the kernel's rdma_cm joins a RoCEv2 group by IGMP. */
#include <errno.h>
#include <string.h>
#include "obj.h"
#include "../net/net.h"
#include "../wire/ip.h"

/* g loses qp; an empty group is left and its entry given to the last. */
static void group_drop(struct uroce_dev *dev, struct uroce_mcast_group *g, unsigned i)
{
	g->qp[i] = g->qp[--g->nqp];
	if (g->nqp)
		return;
	net_mcast_leave(dev->net, g->mgid);
	*g = dev->mcast[--dev->nmcast];
}

/* ib_attach_mcast's and ib_detach_mcast's checks: a UD QP and a multicast
 * GID, else EINVAL (RoCE has no LIDs: the kernel checks a multicast LID on
 * IB ports only, is_valid_mcast_lid).  0 with the QP's group, or NULL, and
 * rx_lock and dev->lock held: the receive path reads the groups under
 * rx_lock. */
static int groups_lock(struct uroce_qp *qp, const union ibv_gid *gid, struct uroce_mcast_group **g)
{
	if (qp->type != IBV_QPT_UD || !gid_is_multicast(gid->raw))
		return EINVAL;
	pthread_mutex_lock(&qp->dev->rx_lock);
	pthread_mutex_lock(&qp->dev->lock);
	*g = dev_mcast_group(qp->dev, gid->raw);
	return 0;
}

static void groups_unlock(struct uroce_dev *dev)
{
	pthread_mutex_unlock(&dev->lock);
	pthread_mutex_unlock(&dev->rx_lock);
}

int uroce_attach_mcast(struct ibv_qp *ibqp, const union ibv_gid *gid, uint16_t lid)
{
	struct uroce_qp *qp = to_uqp(ibqp);
	struct uroce_dev *dev = qp->dev;
	struct uroce_mcast_group *g;
	int rc;

	(void)lid;
	if ((rc = groups_lock(qp, gid, &g)))
		return rc;
	if (!g) {
		/* rxe: ENOMEM past its groups */
		if (dev->nmcast == UROCE_MAX_MCAST_GRP)
			rc = ENOMEM;
		else if ((rc = -net_mcast_join(dev->net, gid->raw)) == 0) {
			g = &dev->mcast[dev->nmcast++];
			memcpy(g->mgid, gid->raw, 16);
			g->nqp = 0;
		}
	}
	if (g) {
		unsigned i = 0;
		while (i < g->nqp && g->qp[i] != qp)
			i++;
		/* attached already: 0, as uverbs answers (ib_uverbs_attach_mcast);
		 * rxe: ENOMEM past its QPs per group */
		if (i == g->nqp && g->nqp == UROCE_MAX_MCAST_QP_ATTACH)
			rc = ENOMEM;
		else if (i == g->nqp)
			g->qp[g->nqp++] = qp;
	}
	groups_unlock(dev);
	return rc;
}

int uroce_detach_mcast(struct ibv_qp *ibqp, const union ibv_gid *gid, uint16_t lid)
{
	struct uroce_qp *qp = to_uqp(ibqp);
	struct uroce_mcast_group *g;

	(void)lid;
	if (groups_lock(qp, gid, &g))
		return EINVAL;
	int rc = EINVAL;  /* not attached: uverbs's answer (ib_uverbs_detach_mcast) */
	for (unsigned i = 0; g && i < g->nqp; i++)
		if (g->qp[i] == qp) {
			group_drop(qp->dev, g, i);
			rc = 0;
			break;
		}
	groups_unlock(qp->dev);
	return rc;
}

/* qp is destroyed: it leaves every group (rx_lock and dev->lock held), as
 * the kernel detaches a destroyed QP's groups (ib_uverbs_cleanup_...). */
void mcast_qp_gone(struct uroce_dev *dev, struct uroce_qp *qp)
{
	for (unsigned k = dev->nmcast; k-- > 0;) {
		struct uroce_mcast_group *g = &dev->mcast[k];
		for (unsigned i = 0; i < g->nqp; i++)
			if (g->qp[i] == qp) {
				group_drop(dev, g, i);
				break;
			}
	}
}
