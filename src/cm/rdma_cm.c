/* librdmacm's API (shared/docs/cm-wire.md §1-§2): every exported rdma_*
 * of librdmacm 44, so that none reaches the real library (it would misread
 * our objects, §1.2), and rsockets inside librdmacm, which calls them
 * through its PLT, gets ours.
 *
 * Error convention (librdmacm): -1 with errno set. */
#include "cm.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "../wire/cm_mad.h"
#include "../wire/ip.h"

#define EXPORT __attribute__((visibility("default")))

static int fail(int e)
{
	errno = e;
	return -1;
}

/* ------------------------------------------------------------ events */

static struct cm_channel *to_chan(struct rdma_event_channel *c) { return (struct cm_channel *)c; }

EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cm_channel *ch = cm_channel_new();
	if (!ch)
		errno = ENOMEM;
	return ch ? &ch->ch : NULL;
}

EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (!channel)
		return;
	struct cm_channel *ch = to_chan(channel);
	pthread_mutex_lock(&cm.lock);
	/* ids still on it (the man page forbids, the kernel tolerates): it
	 * goes with the last of them, so that no event is queued to freed
	 * memory or written to a closed fd the application has reused */
	if (ch->nids > 0)
		ch->orphan = true;
	else
		cm_channel_free(ch);
	pthread_mutex_unlock(&cm.lock);
}

static void mc_joined_locked(struct cm_event *e);

EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cm_channel *ch = to_chan(channel);
	if (!channel || !event)
		return fail(EINVAL);
	for (;;) {
		uint64_t v;
		/* the channel outlives a destroy while we are in here: another
		 * thread's rdma_destroy_event_channel (rping's main, its event
		 * thread blocked here) frees it once the last reader is out */
		pthread_mutex_lock(&cm.lock);
		ch->readers++;
		pthread_mutex_unlock(&cm.lock);
		/* blocks, or EAGAIN when the application made the fd non-blocking */
		ssize_t got = read(ch->ch.fd, &v, 8);
		int err = errno;
		pthread_mutex_lock(&cm.lock);
		if (ch->closed && got == 8) {
			/* destroyed while we were blocked, and woken by an event
			 * the destroy dropped: on the kernel's fd this read would
			 * never return (a blocked read holds the file), and rping's
			 * event thread exits the process with an error on any
			 * return; so it blocks for good, the channel kept for it */
			pthread_mutex_unlock(&cm.lock);
			for (;;)
				pause();
		}
		if (ch->closed) {
			pthread_mutex_unlock(&cm.lock); /* kept: a reader may be blocked in it */
			return fail(EBADF);
		}
		ch->readers--;
		if (got != 8) {
			pthread_mutex_unlock(&cm.lock);
			errno = err;
			return -1;
		}
		struct cm_event *e = ch->head;
		if (!e) {
			pthread_mutex_unlock(&cm.lock);
			continue;
		}
		ch->head = e->next;
		if (!ch->head)
			ch->tail = &ch->head;
		if (e->dead) {
			free(e);
			pthread_mutex_unlock(&cm.lock);
			continue;
		}
		/* a CONNECT_REQUEST is the listener's event until acked: the
		 * child may be rejected and destroyed first (UCX does), as
		 * librdmacm counts it (ucma_process_conn_req) */
		if (e->ev.event == RDMA_CM_EVENT_MULTICAST_JOIN)
			mc_joined_locked(e);
		struct cm_id *owner = to_cmid(e->ev.listen_id ? e->ev.listen_id : e->ev.id);
		owner->unacked++;
		if (e->ev.listen_id) {
			owner->reqs_unread--;
			cm_child_taken(to_cmid(e->ev.id));
		}
		pthread_mutex_unlock(&cm.lock);
		*event = &e->ev;
		return 0;
	}
}

EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return fail(EINVAL);
	pthread_mutex_lock(&cm.lock);
	to_cmid(event->listen_id ? event->listen_id : event->id)->unacked--;
	pthread_cond_broadcast(&cm.cond);
	pthread_mutex_unlock(&cm.lock);
	free(event);
	return 0;
}

static const char *const event_names[] = {
	"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED",
	"RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED",
	"RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
	"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE",
	"RDMA_CM_EVENT_TIMEWAIT_EXIT",
};

EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	return (unsigned)event < sizeof(event_names) / sizeof(event_names[0]) ? event_names[event]
									    : "UNKNOWN EVENT";
}

/* Synchronous mode (§2.7): the id's next event, kept in id->event, its
 * status as errno. */
static int sync_wait(struct cm_id *c)
{
	/* after the exit sweep no event comes (engine.c cm_at_exit) */
	if (!c->compat_sync || __atomic_load_n(&cm.exiting, __ATOMIC_RELAXED))
		return 0;
	if (c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	if (rdma_get_cm_event(c->id.channel, &c->id.event))
		return -1;
	int st = c->id.event->status;
	if (!st)
		return 0;
	return fail(c->id.event->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : st < 0 ? -st : st);
}

/* ------------------------------------------------------------ ids */

/* cm.lock, once every event reported for the id is acked: librdmacm's
 * destroy and migrate wait so (§2.2).  A synchronous id keeps its last
 * event in id->event (§2.7), acked first as librdmacm does, or the wait
 * would never end (libfabric's verbs msg endpoints resolve synchronously,
 * then migrate to their EQ). */
static void lock_acked(struct cm_id *c)
{
	if (c->compat_sync && c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	pthread_mutex_lock(&cm.lock);
	while (c->unacked > 0)
		pthread_cond_wait(&cm.cond, &cm.lock);
}

static void unbind_locked(struct cm_id *c);

static void mc_free_locked(struct cm_id *c, struct cm_mc *mc);

static void id_free_locked(struct cm_id *c)
{
	if (c->conn)
		cm_conn_detach(c->conn);
	/* the kernel leaves an id's groups with it (cma_leave_mc_groups) */
	while (c->mcs) {
		struct cm_mc *mc = c->mcs;
		c->mcs = mc->next;
		mc_free_locked(c, mc);
	}
	unbind_locked(c);
	for (struct cm_id **pp = &cm.ids; *pp; pp = &(*pp)->next_all)
		if (*pp == c) {
			*pp = c->next_all;
			break;
		}
	/* its queued events are dropped when read; a request nobody took
	 * takes its child along (the kernel's CM rejects it, §2.2) */
	for (struct cm_event *e = c->chan->head; e; e = e->next) {
		if (e->dead || (e->ev.id != &c->id && e->ev.listen_id != &c->id))
			continue;
		e->dead = true;
		if (e->ev.listen_id == &c->id && e->ev.id != &c->id)
			id_free_locked(to_cmid(e->ev.id));
		else if (e->ev.listen_id)
			to_cmid(e->ev.listen_id)->reqs_unread--;
	}
	cm_id_leave_channel(c);
	free(c->ep_qp_attr);
	free(c->ep_connect);
	free(c);
}

EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
			  enum rdma_port_space ps)
{
	if (!id || (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB))
		return fail(EINVAL);
	pthread_mutex_lock(&cm.lock);
	int rc = cm_start_locked();
	struct cm_id *c = rc ? NULL
			     : cm_id_new(channel ? to_chan(channel) : NULL, context, ps,
				      ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC);
	pthread_mutex_unlock(&cm.lock);
	if (!c)
		return fail(rc ? rc : ENOMEM);
	*id = &c->id;
	return 0;
}

EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	if (!id)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	lock_acked(c);
	for (struct cm_id *o = cm.ids; o; o = o->next_all)
		if (o->listener == c)
			o->listener = NULL;
	id_free_locked(c);
	pthread_mutex_unlock(&cm.lock);
	return 0;
}

/* ------------------------------------------------------------ addresses */

static bool addr_is_any(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

static socklen_t addr_len(const struct sockaddr *a)
{
	return a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static void set_port(struct sockaddr *a, uint16_t port)
{
	((struct sockaddr_in *)a)->sin_port = htons(port); /* same offset in sockaddr_in6 */
}

static bool port_taken(uint16_t ps, uint16_t port, int gi, const struct cm_id *self, bool reuse)
{
	for (struct cm_id *o = cm.ids; o; o = o->next_all)
		if (o != self && o->port_held && o->port == port && o->id.ps == ps &&
		    (o->gid_index < 0 || gi < 0 || o->gid_index == gi) &&
		    !(reuse && o->reuseaddr && o->state != ID_LISTEN))
			return true;
	return false;
}

/* Does an id of ours other than c hold port of space ps on GID index i
 * (bound to it, or to the wildcard)?  Ids of ours on one port (REUSEADDR)
 * hold one claim on it against the other processes of the address (an OFD
 * lock, not counted: net/share.c), which must stay while any of them needs
 * it. */
static bool port_needed(const struct cm_id *c, uint16_t ps, uint16_t port, int i)
{
	for (struct cm_id *o = cm.ids; o; o = o->next_all)
		if (o != c && o->port_held && o->id.ps == ps && o->port == port && (o->gid_index < 0 || o->gid_index == i))
			return true;
	return false;
}

/* Lets go of the claims on port that c's binding to gi (-1: every GID) made,
 * but keep's and those another id of ours still needs. */
static void release_claims_locked(const struct cm_id *c, int gi, uint16_t ps, uint16_t port, int keep)
{
	for (int i = 0; i < cm.ngids; i++)
		if (i != keep && (gi < 0 || i == gi) && !port_needed(c, ps, port, i))
			cm_port_release(i, ps, port);
}

static void unbind_locked(struct cm_id *c)
{
	if (c->port_held)
		release_claims_locked(c, c->gid_index, (uint16_t)c->id.ps, c->port, -1);
	c->port_held = false;
}

/* Claims port on gi (-1: every GID) against the other processes of a shared
 * address, GID by GID, so that a claim that fails part-way lets go only of
 * what no other id of ours holds (a claim already ours succeeds again). */
static int claim_locked(const struct cm_id *c, int gi, uint16_t ps, uint16_t port)
{
	for (int i = 0; i < cm.ngids; i++) {
		if (gi >= 0 && i != gi)
			continue;
		int rc = cm_port_claim(i, ps, port);
		if (rc) {
			/* releasing one never held is a no-op (share_port_release) */
			release_claims_locked(c, gi, ps, port, -1);
			return rc;
		}
	}
	return 0;
}

/* Binds c to gid index gi (-1: wildcard) and port (0: an ephemeral one),
 * against this process's ids and the other processes of a shared address */
static int bind_locked(struct cm_id *c, const struct sockaddr *a, int gi, uint16_t port)
{
	uint16_t ps = (uint16_t)c->id.ps;
	if (port) {
		if (port_taken(ps, port, gi, c, c->reuseaddr) || claim_locked(c, gi, ps, port))
			return EADDRINUSE;
	} else {
		/* the kernel's ephemeral range, from a random start */
		uint32_t start = (uint32_t)cm_now_ns();
		for (uint32_t i = 0; i < 28232 && !port; i++) {
			uint16_t p = (uint16_t)(32768 + (start + i * 7919u) % 28232);
			if (!port_taken(ps, p, gi, c, false) && !claim_locked(c, gi, ps, p))
				port = p;
		}
		if (!port)
			return EADDRINUSE;
	}
	memcpy(&c->id.route.addr.src_addr, a, addr_len(a));
	set_port(&c->id.route.addr.src_addr, port);
	c->port = port;
	c->port_held = true;
	c->gid_index = gi;
	c->state = ID_BOUND;
	if (gi >= 0)
		cm_id_attach_device(c, gi);
	return 0;
}

static int sockaddr_gid(const struct sockaddr *a, uint8_t gid[16], uint16_t *port)
{
	struct sockaddr_storage ss;
	if (!a || (a->sa_family != AF_INET && a->sa_family != AF_INET6))
		return EAFNOSUPPORT; /* AF_IB too: librdmacm's probe keeps it off (§6.1 item 13) */
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, a, addr_len(a));
	sockaddr_to_gid(&ss, gid, port);
	return 0;
}

EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	uint8_t gid[16];
	uint16_t port;
	int rc;
	if (!id || !addr)
		return fail(EINVAL);
	if ((rc = sockaddr_gid(addr, gid, &port)))
		return fail(rc);
	struct cm_id *c = to_cmid(id);
	pthread_mutex_lock(&cm.lock);
	/* The kernel's rdma_cm binds a loopback address as it binds the wildcard
	 * (cma_any_addr: zero or loopback): no device is acquired (id->verbs stays
	 * NULL), a listener hears requests for every address, and
	 * rdma_get_local_addr still names the loopback address.  Seen on the
	 * kernel's rxe (../shared/rxe-vm): `rping -s -a 127.0.0.1` listens, and
	 * libfabric 1.17's verbs provider, whose msg server binds "localhost"
	 * when given no node, then takes its addresses from the interfaces
	 * (prov/verbs vrb_fill_addr) and is reached from another host.  Here a
	 * loopback address may also be one of uroce0's own GIDs (the automatic
	 * 127.64/10 ones, a UROCE_ADDR of 127.x): such an address binds to it as
	 * any device address does; only one no device has is the wildcard
	 * (gid_is_loopback). */
	int gi = addr_is_any(addr) ? -1 : cm_gid_index(gid);
	if (c->state != ID_IDLE)
		rc = EINVAL;
	else if (gi < 0 && !addr_is_any(addr) && !gid_is_loopback(gid))
		rc = ENODEV; /* no RDMA device has the address (the kernel's cma_acquire_dev) */
	else
		rc = bind_locked(c, addr, gi, port);
	pthread_mutex_unlock(&cm.lock);
	return rc ? fail(rc) : 0;
}

/* A wildcard-bound id takes the address its route leaves from, keeping
 * its port: gi's claim stays held throughout (releasing the whole claim and
 * claiming gi's again left a moment in which another process of a shared
 * address could take the port), and the other addresses' claims go unless
 * another id of ours still holds the port there. */
static void narrow_locked(struct cm_id *c, int gi)
{
	release_claims_locked(c, -1, (uint16_t)c->id.ps, c->port, gi);
	socklen_t len;
	gid_to_sockaddr(cm.gids[gi], c->port, &c->id.route.addr.src_storage, &len);
	c->gid_index = gi;
	cm_id_attach_device(c, gi);
}

/* The local GID to reach dst: dst itself when it is ours, else the first
 * of its family (uroce's addresses are the device's only routes). */
static int route_gid(const uint8_t dst[16])
{
	int gi = cm_gid_index(dst);
	for (int i = 0; gi < 0 && i < cm.ngids; i++)
		if (gid_is_ipv4(cm.gids[i]) == gid_is_ipv4(dst))
			gi = i;
	return gi;
}

EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
			     int timeout_ms)
{
	uint8_t dgid[16];
	uint16_t dport;
	int rc;
	(void)timeout_ms;
	if (!id || !dst_addr)
		return fail(EINVAL);
	if ((rc = sockaddr_gid(dst_addr, dgid, &dport)))
		return fail(rc);
	struct cm_id *c = to_cmid(id);
	if (src_addr && c->state == ID_IDLE && rdma_bind_addr(id, src_addr))
		return -1;
	pthread_mutex_lock(&cm.lock);
	if (c->state != ID_IDLE && c->state != ID_BOUND) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	int gi = c->gid_index >= 0 ? c->gid_index : route_gid(dgid);
	if (c->state == ID_BOUND && c->id.route.addr.src_addr.sa_family != dst_addr->sa_family) {
		/* the kernel's resolve_prepare_src: a bound id resolves only a
		 * destination of its own family (a listener bound to :: hears
		 * IPv4 too, but an id bound to ::1 or :: does not reach one) */
		rc = EINVAL;
	} else if (gi < 0) {
		rc = EADDRNOTAVAIL;
	} else if (c->state == ID_IDLE) {
		/* bind to the source address the route takes */
		struct sockaddr_storage ss;
		socklen_t len;
		gid_to_sockaddr(cm.gids[gi], 0, &ss, &len);
		rc = bind_locked(c, (struct sockaddr *)&ss, gi, 0);
	} else if (c->gid_index < 0) {
		narrow_locked(c, gi);
	}
	if (!rc) {
		memcpy(&c->id.route.addr.dst_addr, dst_addr, addr_len(dst_addr));
		memcpy(c->id.route.addr.addr.ibaddr.dgid.raw, dgid, 16);
		c->state = ID_ADDR_RESOLVED;
		cm_report(c, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	}
	pthread_mutex_unlock(&cm.lock);
	if (rc)
		return fail(rc);
	return sync_wait(c);
}

EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	(void)timeout_ms;
	if (!id)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	pthread_mutex_lock(&cm.lock);
	if (c->state != ID_ADDR_RESOLVED && c->state != ID_ROUTE_RESOLVED) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	/* §2.3: no SA on RoCE: the path is built here */
	struct ibv_sa_path_rec *p = &c->path;
	memset(p, 0, sizeof(*p));
	p->dgid = c->id.route.addr.addr.ibaddr.dgid;
	p->sgid = c->id.route.addr.addr.ibaddr.sgid;
	p->pkey = htons(0xFFFF);
	p->hop_limit = 64;
	p->traffic_class = c->tos;
	p->mtu = cm.active_mtu;
	p->mtu_selector = 2;
	p->reversible = 1;
	p->numb_path = 1;
	p->packet_life_time = 18;
	c->id.route.path_rec = p;
	c->id.route.num_paths = 1;
	c->state = ID_ROUTE_RESOLVED;
	cm_report(c, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	pthread_mutex_unlock(&cm.lock);
	return sync_wait(c);
}

EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	if (!id)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	int rc = 0;
	pthread_mutex_lock(&cm.lock);
	if (c->state == ID_IDLE) {
		struct sockaddr_in any = { .sin_family = AF_INET };
		rc = bind_locked(c, (struct sockaddr *)&any, -1, 0);
	}
	if (!rc && c->state != ID_BOUND && c->state != ID_LISTEN)
		rc = EINVAL;
	if (!rc && port_taken((uint16_t)id->ps, c->port, c->gid_index, c, false))
		rc = EADDRINUSE;
	if (!rc) {
		c->state = ID_LISTEN;
		/* the kernel's ucma: 1..max_backlog (1024), else max_backlog */
		c->backlog = backlog > 0 && backlog < CM_MAX_BACKLOG ? backlog : CM_MAX_BACKLOG;
	}
	pthread_mutex_unlock(&cm.lock);
	return rc ? fail(rc) : 0;
}

/* ------------------------------------------------------------ connecting */

static uint8_t clamp7(uint8_t v) { return v > 7 ? 7 : v; }

static int depth(uint8_t v, uint32_t max, bool tcp, uint8_t *out)
{
	if (v == RDMA_MAX_RESP_RES) {
		*out = (uint8_t)(max > 0xFE ? 0xFE : max);
		return 0;
	}
	if (tcp && v > max)
		return EINVAL;
	*out = v;
	return 0;
}

EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	if (!id)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	bool ud = id->qp_type == IBV_QPT_UD;
	int rc = 0;
	/* rdma_create_ep's ai_connect goes first (§2.7) */
	struct rdma_conn_param merged;
	uint8_t pd[256];
	if (c->ep_connect_len) {
		merged = param ? *param : (struct rdma_conn_param){ .responder_resources = RDMA_MAX_RESP_RES,
								    .initiator_depth = RDMA_MAX_INIT_DEPTH,
								    .retry_count = 7, .rnr_retry_count = 7 };
		size_t n = c->ep_connect_len + (param ? param->private_data_len : 0);
		if (n > UINT8_MAX) /* private_data_len is a uint8_t */
			return fail(EINVAL);
		memcpy(pd, c->ep_connect, c->ep_connect_len);
		if (param && param->private_data_len)
			memcpy(pd + c->ep_connect_len, param->private_data, param->private_data_len);
		merged.private_data = pd;
		merged.private_data_len = (uint8_t)n;
		param = &merged;
	}
	size_t max_pd = ud ? SIDR_REQ_PRIVATE_LEN - CM_IP_HDR_LEN : REQ_PRIVATE_LEN - CM_IP_HDR_LEN;
	if ((param && param->private_data_len > max_pd) || (!param && !id->qp && !ud))
		return fail(EINVAL);
	pthread_mutex_lock(&cm.lock);
	if (c->state != ID_ROUTE_RESOLVED || (c->conn && c->conn->state != CS_IDLE)) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	struct cm_conn *k = c->conn ? c->conn : cm_conn_new(c);
	if (!k) {
		pthread_mutex_unlock(&cm.lock);
		return fail(ENOMEM);
	}
	memcpy(k->peer_gid, id->route.addr.addr.ibaddr.dgid.raw, 16);
	k->sgid_index = c->gid_index;
	k->tclass = c->tos;
	c->connect_error = false;
	if (ud) {
		k->qp_type = IBV_QPT_UD;
		rc = cm_send_sidr_req(c, param);
	} else {
		bool tcp = id->ps == RDMA_PS_TCP;
		uint8_t rr = param ? param->responder_resources : RDMA_MAX_RESP_RES;
		uint8_t idp = param ? param->initiator_depth : RDMA_MAX_INIT_DEPTH;
		if ((rc = depth(rr, cm.max_rd_atom, tcp, &k->resp_res)) ||
		    (rc = depth(idp, cm.max_init_rd_atom, tcp, &k->init_depth)))
			goto out;
		k->retry = param ? clamp7(param->retry_count) : 7;
		k->rnr = param ? clamp7(param->rnr_retry_count) : 7;
		k->flow_control = param ? param->flow_control : 1;
		k->srq = id->qp ? id->qp->srq != NULL : param ? param->srq : 0;
		k->local_qpn = id->qp ? id->qp->qp_num : param->qp_num;
		k->qp_type = id->qp ? id->qp->qp_type : IBV_QPT_RC;
		k->mtu = cm.active_mtu;
		/* §3.6: LocalACKTimeout from our ACK delay, or the option */
		k->ack_timeout = c->ack_timeout_set ? c->ack_timeout : (uint8_t)(18 + 1);
		rc = cm_send_req(c, param);
	}
	if (!rc)
		c->state = ID_CONNECT;
out:
	pthread_mutex_unlock(&cm.lock);
	if (rc)
		return fail(rc);
	if (!c->compat_sync)
		return 0;
	/* sync: until ESTABLISHED, or the error as errno */
	return sync_wait(c);
}

EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	if (!id)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	int rc = 0;
	pthread_mutex_lock(&cm.lock);
	struct cm_conn *k = c->conn;
	if (c->state == ID_LISTEN || !k || k->state != CS_REQ_RCVD) {
		pthread_mutex_unlock(&cm.lock);
		return fail(EINVAL);
	}
	if (id->qp_type == IBV_QPT_UD) {
		if (param && param->private_data_len > SIDR_REP_PRIVATE_LEN)
			rc = EINVAL;
		else {
			if (id->qp) {
				struct ibv_qp_attr qa;
				struct ibv_qp_init_attr qi;
				if (!ibv_query_qp(id->qp, &qa, IBV_QP_QKEY, &qi))
					c->ud_qkey = qa.qkey;
			}
			rc = cm_send_sidr_rep(c, SIDR_OK, param);
			c->state = ID_CONNECTED;
		}
		pthread_mutex_unlock(&cm.lock);
		return rc ? fail(rc) : 0;
	}
	if (param && param->private_data_len > REP_PRIVATE_LEN)
		rc = EINVAL;
	if (!rc && !param && !id->qp)
		rc = EINVAL;
	uint8_t rr = param ? param->responder_resources : RDMA_MAX_RESP_RES;
	uint8_t idp = param ? param->initiator_depth : RDMA_MAX_INIT_DEPTH;
	/* §2.6: 0xFF or none: what the request asked, within the device's */
	if (!rc) {
		if (rr == RDMA_MAX_RESP_RES)
			k->resp_res = (uint8_t)(c->req_resp_res < cm.max_rd_atom ? c->req_resp_res : cm.max_rd_atom);
		else if (rr > cm.max_rd_atom)
			rc = EINVAL;
		else
			k->resp_res = rr;
		if (idp == RDMA_MAX_INIT_DEPTH)
			k->init_depth = (uint8_t)(c->req_init_depth < cm.max_init_rd_atom ? c->req_init_depth
											: cm.max_init_rd_atom);
		else if (idp > cm.max_init_rd_atom)
			rc = EINVAL;
		else
			k->init_depth = idp;
	}
	if (!rc) {
		k->rnr = param ? clamp7(param->rnr_retry_count) : 7;
		k->local_qpn = id->qp ? id->qp->qp_num : param->qp_num;
		if (id->qp)
			k->srq = id->qp->srq != NULL;
		if (cm_qp_rtr_rts(c)) {
			/* librdmacm rejects when its QP cannot move (cma.c) */
			cm_qp_to_err(c);
			cm_send_rej(k, CM_REJ_CONSUMER_DEFINED, NULL, 0);
			k->state = CS_IDLE;
			rc = EINVAL;
		} else {
			rc = cm_send_rep(c, param);
		}
	}
	pthread_mutex_unlock(&cm.lock);
	if (rc)
		return fail(rc);
	return sync_wait(c);
}

EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	if (!id)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	int rc = 0;
	pthread_mutex_lock(&cm.lock);
	struct cm_conn *k = c->conn;
	if (!k || k->state != CS_REQ_RCVD)
		rc = EINVAL;
	else if (id->qp_type == IBV_QPT_UD) {
		struct rdma_conn_param p = { .private_data = private_data, .private_data_len = private_data_len };
		rc = private_data_len > SIDR_REP_PRIVATE_LEN ? EINVAL : cm_send_sidr_rep(c, SIDR_REJECT, &p);
	} else if (private_data_len > REJ_PRIVATE_LEN) {
		rc = EINVAL;
	} else {
		cm_send_rej(k, CM_REJ_CONSUMER_DEFINED, private_data, private_data_len);
		k->state = CS_IDLE;
		c->state = ID_IDLE;
	}
	pthread_mutex_unlock(&cm.lock);
	return rc ? fail(rc) : 0;
}

EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	/* reason 35 (vendor option not supported, §4.3) */
	if (!id)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	pthread_mutex_lock(&cm.lock);
	struct cm_conn *k = c->conn;
	int rc = !k || k->state != CS_REQ_RCVD || id->qp_type == IBV_QPT_UD || private_data_len > REJ_PRIVATE_LEN
			 ? EINVAL
			 : 0;
	if (!rc) {
		cm_send_rej(k, 35, private_data, private_data_len);
		k->state = CS_IDLE;
	}
	pthread_mutex_unlock(&cm.lock);
	return rc ? fail(rc) : 0;
}

EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	if (!id)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	pthread_mutex_lock(&cm.lock);
	int rc = c->conn && c->conn->state == CS_REP_RCVD ? 0 : EINVAL;
	if (!rc && id->qp && cm_qp_rtr_rts(c))
		rc = EINVAL;
	if (!rc) {
		cm_send_rtu(c->conn);
		c->state = ID_CONNECTED;
	}
	pthread_mutex_unlock(&cm.lock);
	return rc ? fail(rc) : 0;
}

EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	if (!id || event != IBV_EVENT_COMM_EST)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	pthread_mutex_lock(&cm.lock);
	/* data before the RTU: as the RTU (§2.9) */
	if (c->conn && c->conn->state == CS_REP_SENT) {
		c->conn->state = CS_ESTABLISHED;
		c->conn->due_ns = 0;
		c->state = ID_CONNECTED;
		cm_report(c, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
	}
	pthread_mutex_unlock(&cm.lock);
	return 0;
}

EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	if (!id)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	int rc = 0;
	/* the QP to error first (§2.5) */
	cm_qp_to_err(c);
	pthread_mutex_lock(&cm.lock);
	struct cm_conn *k = c->conn;
	bool sent = false;
	/* the kernel: EINVAL without an IB CM id; with one, 0 whatever its
	 * state, a DREQ or DREP where one is due (cm.c ib_send_cm_dreq) */
	if (!k)
		rc = EINVAL;
	else if (k->state == CS_ESTABLISHED || k->state == CS_REP_SENT)
		sent = !cm_send_dreq(k);
	else if (k->state == CS_DREQ_RCVD)
		sent = !cm_send_drep(k);
	else
		sent = k->state == CS_DREQ_SENT || k->state == CS_TIMEWAIT; /* an event still to come */
	if (!rc)
		c->state = ID_DISCONNECT;
	pthread_mutex_unlock(&cm.lock);
	if (rc)
		return fail(rc);
	return sent ? sync_wait(c) : 0;
}

/* ------------------------------------------------------------ options, devices, ports */

EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (!id || !optval)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				return fail(EINVAL);
			c->tos = *(uint8_t *)optval;
			c->tos_set = true;
			return 0;
		case RDMA_OPTION_ID_REUSEADDR:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			c->reuseaddr = *(int *)optval != 0;
			return 0;
		case RDMA_OPTION_ID_AFONLY:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			c->afonly = *(int *)optval != 0;
			return 0;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t))
				return fail(EINVAL);
			c->ack_timeout = *(uint8_t *)optval;
			c->ack_timeout_set = true;
			return 0;
		}
	}
	/* RDMA_OPTION_IB_PATH: no SA paths on RoCE here */
	return fail(ENOSYS);
}

EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	pthread_mutex_lock(&cm.lock);
	int rc = cm_start_locked();
	pthread_mutex_unlock(&cm.lock);
	struct ibv_context **l = rc ? NULL : calloc(2, sizeof(*l));
	if (!l) {
		errno = rc ? rc : ENOMEM;
		return NULL;
	}
	l[0] = cm.ctx;
	if (num_devices)
		*num_devices = 1;
	return l;
}

EXPORT void rdma_free_devices(struct ibv_context **list) { free(list); }

EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return ((struct sockaddr_in *)&id->route.addr.src_addr)->sin_port;
}

EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return ((struct sockaddr_in *)&id->route.addr.dst_addr)->sin_port;
}

EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	if (!id)
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	if (!channel && c->compat_sync)
		return fail(EINVAL);
	struct cm_channel *to = channel ? to_chan(channel) : cm_channel_new();
	if (!to)
		return fail(ENOMEM);
	lock_acked(c);
	struct cm_channel *from = c->chan;
	cm_events_move(c, to);
	from->nids--;
	to->nids++;
	c->chan = to;
	id->channel = &to->ch;
	bool was_sync = c->compat_sync;
	c->compat_sync = !channel;
	if (was_sync)
		from->orphan = true; /* its unread requests' children may still be on it */
	if (from->orphan && !from->nids)
		cm_channel_free(from);
	pthread_mutex_unlock(&cm.lock);
	return 0;
}

/* ECE (1.3): rxe sends none; ours are zero */
EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece || id->qp)
		return fail(EINVAL);
	return 0;
}

EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || !ece)
		return fail(EINVAL);
	memset(ece, 0, sizeof(*ece));
	return 0;
}

/* Multicast (cm-wire.md, "Multicast (mckey)"): on RoCE the kernel's
 * rdma_cm joins an IPv4 group without an SA -- the MGID is the group's
 * IPv4-mapped address, the hop limit 64, the Q_Key RDMA_UDP_QKEY for
 * RDMA_PS_UDP (cma_iboe_join_multicast) -- and reports MULTICAST_JOIN with
 * the group's address handle attributes, QPN 0xFFFFFF and the user's
 * context as private_data; librdmacm then attaches the id's QP unless the
 * join is send-only (ucma_process_join), and an attach that fails turns the
 * event into MULTICAST_ERROR.  The IP group is joined by the QP's attach
 * (obj/mcast.c, net/udp.c). */
static int join_locked(struct cm_id *c, const struct sockaddr *addr, uint16_t flags, void *context)
{
	uint8_t mgid[16];
	uint16_t port;
	/* an address librdmacm cannot size (AF_IB here too) is its EINVAL */
	if (sockaddr_gid(addr, mgid, &port))
		return EINVAL;
	/* cma_join_multicast: the zero address is no group */
	static const uint8_t any4[16] = { [10] = 0xff, [11] = 0xff }, any6[16];
	if (!memcmp(mgid, any4, 16) || !memcmp(mgid, any6, 16))
		return EINVAL;
	/* cma's rdma_join_multicast: a UD id bound to a device */
	if ((c->state != ID_BOUND && c->state != ID_ADDR_RESOLVED) || c->gid_index < 0 ||
	    c->id.qp_type != IBV_QPT_UD)
		return EINVAL;
	/* cma_iboe_join_multicast: ENOTSUPP (524) for an IPv6 group on
	 * RoCEv2; user space gets the ordinary EOPNOTSUPP here */
	if (!gid_is_ipv4(mgid))
		return EOPNOTSUPP;
	struct cm_mc *mc = calloc(1, sizeof(*mc));
	struct cm_event *e = mc ? cm_report_ev(c, RDMA_CM_EVENT_MULTICAST_JOIN, 0) : NULL;
	if (!e) {
		free(mc);
		return ENOMEM;
	}
	e->mc = mc;
	memcpy(&mc->addr, addr, addr_len(addr));
	memcpy(mc->mgid.raw, mgid, 16);
	mc->next = c->mcs;
	c->mcs = mc;
	struct rdma_ud_param *u = &e->ev.param.ud;
	u->private_data = context;
	u->qp_num = 0xFFFFFF;
	u->qkey = c->ud_qkey;
	u->ah_attr.is_global = 1;
	u->ah_attr.port_num = 1;
	u->ah_attr.grh.dgid = mc->mgid;
	u->ah_attr.grh.sgid_index = (uint8_t)c->gid_index;
	u->ah_attr.grh.hop_limit = 64;
	u->ah_attr.grh.traffic_class = c->tos;
	mc->sendonly = flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	return 0;
}

/* A MULTICAST_JOIN read (cm.lock held): as librdmacm's ucma_process_join,
 * the id's QP of that moment is attached unless the join is send-only,
 * and an attach that fails makes the event MULTICAST_ERROR with
 * rdma_seterrno's status, -1. */
static void mc_joined_locked(struct cm_event *e)
{
	struct cm_id *c = to_cmid(e->ev.id);
	struct cm_mc *mc = NULL;
	for (struct cm_mc *m = c->mcs; m; m = m->next)
		if (m == e->mc)
			mc = m;
	if (!mc || mc->sendonly || !c->id.qp)
		return;
	if (ibv_attach_mcast(c->id.qp, &mc->mgid, 0)) {
		e->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
		e->ev.status = -1;
	}
}

static int join(struct rdma_cm_id *id, const struct sockaddr *addr, uint16_t flags, void *context)
{
	struct cm_id *c = to_cmid(id);
	pthread_mutex_lock(&cm.lock);
	int rc = join_locked(c, addr, flags, context);
	pthread_mutex_unlock(&cm.lock);
	if (rc)
		return fail(rc);
	return sync_wait(c);
}

EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	if (!id || !addr)
		return fail(EINVAL);
	return join(id, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc_join_attr, void *context)
{
	/* librdmacm's checks, in its order */
	if (!id || !mc_join_attr)
		return fail(EINVAL);
	if (mc_join_attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED)
		return fail(ENOTSUP);
	if (!(mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) ||
	    !(mc_join_attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    mc_join_attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED || !mc_join_attr->addr)
		return fail(EINVAL);
	return join(id, mc_join_attr->addr, (uint16_t)mc_join_attr->join_flags, context);
}

/* The group leaves the id (cm.lock held): its JOIN or ERROR event still
 * unread goes too (the kernel's ucma_cleanup_mc_events).  Only
 * rdma_leave_multicast detaches a QP; destroying the id detaches nothing,
 * as the kernel's cma_leave_mc_groups (ibv_destroy_qp leaves its groups,
 * obj/mcast.c). */
static void mc_free_locked(struct cm_id *c, struct cm_mc *mc)
{
	for (struct cm_event *e = c->chan->head; e; e = e->next)
		if (e->mc == mc)
			e->dead = true;
	free(mc);
}

EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!id || !addr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6))
		return fail(EINVAL);
	struct cm_id *c = to_cmid(id);
	struct cm_mc *mc = NULL;
	pthread_mutex_lock(&cm.lock);
	for (struct cm_mc **pp = &c->mcs; *pp; pp = &(*pp)->next)
		if (!memcmp(&(*pp)->addr, addr, addr_len(addr))) {
			mc = *pp;
			*pp = mc->next;
			break;
		}
	/* librdmacm's rdma_leave_multicast: the id's QP of now, unless the
	 * join was send-only (an attach that failed: the detach fails too) */
	if (mc && c->id.qp && !mc->sendonly)
		ibv_detach_mcast(c->id.qp, &mc->mgid, 0);
	if (mc)
		mc_free_locked(c, mc);
	pthread_mutex_unlock(&cm.lock);
	return mc ? 0 : fail(EADDRNOTAVAIL);
}

/* ------------------------------------------------------------ QPs (§2.5) */

static int qp_init(struct cm_id *c)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	int mask;
	pthread_mutex_lock(&cm.lock);
	int rc = cm_qp_attr(c, &a, &mask);
	pthread_mutex_unlock(&cm.lock);
	if (rc || (rc = ibv_modify_qp(c->id.qp, &a, mask)))
		return rc;
	if (c->id.qp_type == IBV_QPT_UD) {
		/* UD: on to RTS at once, sq_psn 0 (§2.5) */
		a.qp_state = IBV_QPS_RTR;
		if ((rc = ibv_modify_qp(c->id.qp, &a, IBV_QP_STATE)))
			return rc;
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		rc = ibv_modify_qp(c->id.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	return rc;
}

static void cqs_destroy(struct rdma_cm_id *id)
{
	if (id->recv_cq)
		ibv_destroy_cq(id->recv_cq);
	if (id->send_cq && id->send_cq != id->recv_cq)
		ibv_destroy_cq(id->send_cq);
	if (id->recv_cq_channel)
		ibv_destroy_comp_channel(id->recv_cq_channel);
	if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel)
		ibv_destroy_comp_channel(id->send_cq_channel);
	id->recv_cq = id->send_cq = NULL;
	id->recv_cq_channel = id->send_cq_channel = NULL;
}

/* A completion channel and a CQ on it for an id, kept in *cq / *channel
 * (freed by cqs_destroy), unless it has one already. */
static int cq_make(struct rdma_cm_id *id, struct ibv_cq **cq, struct ibv_comp_channel **channel, uint32_t size)
{
	if (*cq)
		return 0;
	*channel = ibv_create_comp_channel(id->verbs);
	if (!*channel)
		return -1;
	*cq = ibv_create_cq(id->verbs, size ? (int)size : 1, id, *channel, 0);
	return *cq ? 0 : -1;
}

/* librdmacm's ucma_create_cqs: a channel and CQ for each the caller left out */
static int cqs_create(struct rdma_cm_id *id, struct ibv_cq **send_cq, struct ibv_cq **recv_cq, uint32_t send_size,
		      uint32_t recv_size)
{
	if (recv_cq && !*recv_cq) {
		if (cq_make(id, &id->recv_cq, &id->recv_cq_channel, recv_size))
			return -1;
		*recv_cq = id->recv_cq;
	}
	if (send_cq && !*send_cq) {
		if (cq_make(id, &id->send_cq, &id->send_cq_channel, send_size))
			return -1;
		*send_cq = id->send_cq;
	}
	return 0;
}

EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	if (!id || !attr || id->qp)
		return fail(EINVAL);
	if (!id->verbs)
		return fail(EINVAL); /* unbound: no device yet */
	struct ibv_qp_init_attr_ex a = *attr;
	if (!(a.comp_mask & IBV_QP_INIT_ATTR_PD) || !a.pd) {
		a.comp_mask |= IBV_QP_INIT_ATTR_PD;
		a.pd = id->pd;
	}
	if (a.pd->context != id->verbs)
		return fail(EINVAL);
	bool made_cqs = !a.send_cq || !a.recv_cq;
	if (cqs_create(id, &a.send_cq, a.srq ? NULL : &a.recv_cq, a.cap.max_send_wr, a.cap.max_recv_wr)) {
		int e = errno;
		cqs_destroy(id);
		return fail(e);
	}
	if (!a.recv_cq && a.srq)
		a.recv_cq = a.send_cq;
	struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, &a);
	if (!qp) {
		int e = errno;
		if (made_cqs)
			cqs_destroy(id);
		return fail(e);
	}
	pthread_mutex_lock(&cm.lock);
	id->qp = qp;
	pthread_mutex_unlock(&cm.lock);
	int rc = qp_init(to_cmid(id));
	if (rc) {
		pthread_mutex_lock(&cm.lock);
		id->qp = NULL;
		pthread_mutex_unlock(&cm.lock);
		ibv_destroy_qp(qp);
		if (made_cqs)
			cqs_destroy(id);
		return fail(rc);
	}
	id->pd = a.pd;
	attr->cap = a.cap;
	return 0;
}

EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	if (!qp_init_attr)
		return fail(EINVAL);
	struct ibv_qp_init_attr_ex a = {
		.qp_context = qp_init_attr->qp_context, .send_cq = qp_init_attr->send_cq,
		.recv_cq = qp_init_attr->recv_cq, .srq = qp_init_attr->srq, .cap = qp_init_attr->cap,
		.qp_type = qp_init_attr->qp_type, .sq_sig_all = qp_init_attr->sq_sig_all,
		.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd ? pd : id ? id->pd : NULL,
	};
	int rc = rdma_create_qp_ex(id, &a);
	if (!rc) {
		qp_init_attr->cap = a.cap;
		qp_init_attr->send_cq = a.send_cq;
		qp_init_attr->recv_cq = a.recv_cq;
	}
	return rc;
}

EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (!id || !id->qp)
		return;
	/* the CM thread moves id->qp on a REP, REJ or timeout, under cm.lock */
	pthread_mutex_lock(&cm.lock);
	struct ibv_qp *qp = id->qp;
	id->qp = NULL;
	pthread_mutex_unlock(&cm.lock);
	ibv_destroy_qp(qp);
	/* and the CQs and channels on the id, rsocket's own included (§2.5) */
	cqs_destroy(id);
}

EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	if (!id || !qp_attr || !qp_attr_mask)
		return fail(EINVAL);
	pthread_mutex_lock(&cm.lock);
	int rc = cm_qp_attr(to_cmid(id), qp_attr, qp_attr_mask);
	pthread_mutex_unlock(&cm.lock);
	return rc ? fail(rc) : 0;
}

EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	if (!id || !attr || !id->verbs)
		return fail(EINVAL);
	struct ibv_srq_init_attr_ex a = *attr;
	if (!(a.comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a.pd) {
		a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
		a.pd = id->pd;
	}
	struct ibv_srq *srq = ibv_create_srq_ex(id->verbs, &a);
	if (!srq)
		return -1;
	id->srq = srq;
	id->pd = a.pd;
	return 0;
}

EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!id || !attr || !id->verbs)
		return fail(EINVAL);
	struct ibv_srq *srq = ibv_create_srq(pd ? pd : id->pd, attr);
	if (!srq)
		return -1;
	id->srq = srq;
	if (pd)
		id->pd = pd;
	return 0;
}

EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id && id->srq) {
		ibv_destroy_srq(id->srq);
		id->srq = NULL;
	}
}

/* ------------------------------------------------------------ endpoints (§2.7) */

EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			  struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cid;
	if (!id || !res)
		return fail(EINVAL);
	if (rdma_create_id(NULL, &cid, NULL, (enum rdma_port_space)res->ai_port_space))
		return -1;
	struct cm_id *c = to_cmid(cid);
	if (res->ai_qp_type)
		cid->qp_type = (enum ibv_qp_type)res->ai_qp_type;
	if (res->ai_flags & RAI_PASSIVE) {
		if (res->ai_src_addr && rdma_bind_addr(cid, res->ai_src_addr))
			goto fail;
		if (qp_init_attr) {
			c->ep_qp_attr = malloc(sizeof(*qp_init_attr));
			if (!c->ep_qp_attr)
				goto fail;
			*c->ep_qp_attr = *qp_init_attr;
			c->ep_qp_attr->qp_type = cid->qp_type; /* librdmacm's: from ai_qp_type */
		}
		c->ep_pd = pd;
		*id = cid;
		return 0;
	}
	if (rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000) || rdma_resolve_route(cid, 2000))
		goto fail;
	if (qp_init_attr) {
		qp_init_attr->qp_type = cid->qp_type;
		if (rdma_create_qp(cid, pd, qp_init_attr))
			goto fail;
	}
	if (res->ai_connect_len) {
		c->ep_connect = malloc(res->ai_connect_len);
		if (!c->ep_connect)
			goto fail;
		memcpy(c->ep_connect, res->ai_connect, res->ai_connect_len);
		c->ep_connect_len = res->ai_connect_len;
	}
	*id = cid;
	return 0;
fail: {
	int e = errno;
	rdma_destroy_qp(cid);
	rdma_destroy_id(cid);
	return fail(e);
}
}

EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	rdma_destroy_qp(id);
	rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	if (!listen || !id)
		return fail(EINVAL);
	struct cm_id *l = to_cmid(listen);
	if (!l->compat_sync)
		return fail(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	struct rdma_cm_event *ev;
	for (;;) {
		if (rdma_get_cm_event(listen->channel, &ev))
			return -1;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		rdma_ack_cm_event(ev);
	}
	if (ev->status) {
		int st = ev->status;
		rdma_ack_cm_event(ev);
		return fail(st < 0 ? -st : st);
	}
	struct rdma_cm_id *child = ev->id;
	if (l->ep_qp_attr) {
		struct ibv_qp_init_attr a = *l->ep_qp_attr;
		if (rdma_create_qp(child, l->ep_pd, &a)) {
			int e = errno;
			rdma_reject(child, NULL, 0);
			rdma_ack_cm_event(ev);
			rdma_destroy_id(child);
			return fail(e);
		}
	}
	child->event = ev;
	*id = child;
	return 0;
}
