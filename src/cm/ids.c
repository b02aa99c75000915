/* The objects of connection management that both the API (rdma_cm.c) and
 * the IB CM (engine.c) make and report on: the state every one hangs off,
 * event channels and their events, ids and a listener's children.  Below
 * both, using neither (docs/architecture.md, "## Tree"). */
#include "cm.h"
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct cm_state cm = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/* ------------------------------------------------------------ events */

struct cm_channel *cm_channel_new(void)
{
	struct cm_channel *ch = calloc(1, sizeof(*ch));
	if (!ch)
		return NULL;
	/* readable while events are queued; a read takes one (§2.2) */
	ch->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (ch->ch.fd < 0) {
		free(ch);
		return NULL;
	}
	ch->tail = &ch->head;
	return ch;
}

void cm_channel_free(struct cm_channel *ch)
{
	for (struct cm_event *e = ch->head, *n; e; e = n) {
		n = e->next;
		free(e);
	}
	ch->head = NULL;
	ch->tail = &ch->head;
	/* a reader blocked in read() stays blocked, as on the kernel's fd */
	close(ch->ch.fd);
	if (ch->readers)
		ch->closed = true; /* kept for its readers, blocked for good (rdma_get_cm_event) */
	else
		free(ch);
}

struct cm_event *cm_report_ev(struct cm_id *c, enum rdma_cm_event_type type, int status)
{
	struct cm_event *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	/* a request comes on its listener's channel, whatever the child's */
	struct cm_channel *ch = type == RDMA_CM_EVENT_CONNECT_REQUEST && c->listener ? c->listener->chan : c->chan;
	e->ev.id = &c->id;
	e->ev.event = type;
	e->ev.status = status;
	*ch->tail = e;
	ch->tail = &e->next;
	uint64_t one = 1;
	if (write(ch->ch.fd, &one, 8) < 0) {
		/* a counter near 2^64: cannot happen */
	}
	return e;
}

void cm_report(struct cm_id *c, enum rdma_cm_event_type type, int status, const void *priv, uint8_t priv_len)
{
	struct cm_event *e = cm_report_ev(c, type, status);
	if (e && priv_len) {
		memcpy(e->priv, priv, priv_len);
		e->ev.param.conn.private_data = e->priv;
		e->ev.param.conn.private_data_len = priv_len;
	}
}

/* ------------------------------------------------------------ ids */

void cm_id_attach_device(struct cm_id *c, int gid_index)
{
	c->id.verbs = cm.ctx;
	c->id.pd = cm.pd;
	c->id.port_num = 1;
	if (gid_index >= 0)
		memcpy(c->id.route.addr.addr.ibaddr.sgid.raw, cm.gids[gid_index], 16);
	c->id.route.addr.addr.ibaddr.pkey = htons(0xFFFF);
}

struct cm_id *cm_id_new(struct cm_channel *ch, void *context, enum rdma_port_space ps, enum ibv_qp_type qpt)
{
	bool sync = !ch;
	if (sync && !(ch = cm_channel_new()))
		return NULL;
	struct cm_id *c = calloc(1, sizeof(*c));
	if (!c) {
		if (sync)
			cm_channel_free(ch);
		return NULL;
	}
	c->compat_sync = sync;
	c->chan = ch;
	ch->nids++;
	c->id.channel = &ch->ch;
	c->id.context = context;
	c->id.ps = ps;
	c->id.qp_type = qpt;
	c->gid_index = -1;
	c->ud_qkey = RDMA_UDP_QKEY;
	c->next_all = cm.ids;
	cm.ids = c;
	return c;
}

struct cm_id *cm_child_new(struct cm_id *l)
{
	/* on the listener's channel, where its request comes; a sync
	 * listener's child gets a channel of its own once the request is
	 * read (§2.2, librdmacm's ucma_process_conn_req), so that requests
	 * nobody has read hold no fd */
	struct cm_id *c = cm_id_new(l->chan, l->id.context, l->id.ps, l->id.qp_type);
	if (!c)
		return NULL;
	c->listener = l;
	c->sync_pending = l->compat_sync;
	cm_id_attach_device(c, -1);
	return c;
}

void cm_child_drop(struct cm_id *c)
{
	for (struct cm_id **pp = &cm.ids; *pp; pp = &(*pp)->next_all)
		if (*pp == c) {
			*pp = c->next_all;
			break;
		}
	cm_id_leave_channel(c);
	free(c);
}

void cm_events_move(struct cm_id *c, struct cm_channel *to)
{
	struct cm_channel *from = c->chan;
	for (struct cm_event *e = from->head; e; e = e->next) {
		/* a listener's requests are its own (ev.id is the child) */
		if (e->dead || (e->ev.listen_id ? e->ev.listen_id : e->ev.id) != &c->id)
			continue;
		struct cm_event *m = malloc(sizeof(*m));
		if (m) {
			*m = *e;
			m->next = NULL;
			if (e->ev.param.conn.private_data == e->priv)
				m->ev.param.conn.private_data = m->priv;
			*to->tail = m;
			to->tail = &m->next;
			uint64_t one = 1;
			if (write(to->ch.fd, &one, 8) < 0) {
				/* a counter near 2^64: cannot happen */
			}
		}
		e->dead = true; /* dropped when read there */
	}
}

void cm_child_taken(struct cm_id *c)
{
	if (!c->sync_pending)
		return;
	c->sync_pending = false;
	struct cm_channel *ch = cm_channel_new();
	if (!ch)
		return; /* no fd: it stays on the listener's channel */
	cm_events_move(c, ch);
	c->chan->nids--;
	ch->nids++;
	c->chan = ch;
	c->id.channel = &ch->ch;
	c->compat_sync = 1;
}

void cm_id_leave_channel(struct cm_id *c)
{
	struct cm_channel *ch = c->chan;
	ch->nids--;
	if (c->compat_sync)
		ch->orphan = true; /* a child whose request is unread may still be on it */
	if (ch->orphan && !ch->nids)
		cm_channel_free(ch);
}

struct cm_id *cm_find_listener(uint16_t ps, uint16_t port, int gid_index, bool *port_has_listener)
{
	struct cm_id *found = NULL;
	*port_has_listener = false;
	for (struct cm_id *o = cm.ids; o; o = o->next_all)
		if (o->state == ID_LISTEN && o->id.ps == ps && o->port == port) {
			*port_has_listener = true;
			if (o->gid_index < 0 || o->gid_index == gid_index)
				if (!found || o->gid_index >= 0)
					found = o;
		}
	return found;
}
