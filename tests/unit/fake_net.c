/* The fake backend (fake_net.h).  One per process: the tests open one
 * device on it at a time. */
#include "fake_net.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct uroce_backend_flow {
	uint8_t sgid[16];
	uint16_t sport;
};

static struct fake_pkt sent[FAKE_SENT_MAX];
static unsigned nsent;
static bool sent_overflow_drops;
static bool refs;

static struct fake_pkt rxq[FAKE_RX_MAX];
static unsigned rx_head, rx_tail;   /* tail: next to hand out */

unsigned fake_sent_count(void) { return nsent; }
const struct fake_pkt *fake_sent(unsigned i) { return i < nsent ? &sent[i] : NULL; }
void fake_sent_clear(void) { nsent = 0; }
void fake_sent_overflow_drops(bool on) { sent_overflow_drops = on; }
unsigned fake_rx_pending(void) { return rx_head - rx_tail; }
void fake_net_refs(bool on) { refs = on; }

static void die(const char *why)
{
	fprintf(stderr, "fake_net: %s\n", why);
	abort();
}

void fake_net_setenv(void)
{
	/* GID 0 for the fake (it has no automatic address); no same-host
	 * rings; ACK deferral off, so that an owed ACK leaves at the end of
	 * transport_rx_batch instead of waiting for a request to ride with
	 * (transport/ack.c, ack_defer) */
	setenv("UROCE_ADDR", "198.18.0.1", 1);
	setenv("UROCE_SHM", "0", 1);
	setenv("UROCE_ACK_DEFER_US", "0", 1);
	setenv("UROCE_MTU", "4096", 1);
	setenv("UROCE_SHM_DIRECT_MIN", "16384", 1);  /* references, when a test turns them on (fake_net_refs) */
	static const char *const unset[] = { "UROCE_WINDOW", "UROCE_FAULT_DROP_TX", "UROCE_FAULT_DROP_RX",
					     "UROCE_PCAP", "UROCE_NO_GSO" };
	for (size_t i = 0; i < sizeof(unset) / sizeof(unset[0]); i++)
		unsetenv(unset[i]);
}

void fake_rx_queue(const uint8_t *buf, uint32_t len, const uint8_t sgid[16], const uint8_t dgid[16],
		   uint16_t sport)
{
	if (rx_head == FAKE_RX_MAX)
		die("receive queue full");
	if (len > FAKE_PKT_BYTES)
		die("packet too long to queue");
	struct fake_pkt *p = &rxq[rx_head++];
	memcpy(p->buf, buf, len);
	p->len = len;
	memcpy(p->sgid, sgid, 16);
	memcpy(p->dgid, dgid, 16);
	p->sport = sport;
	p->ip_id = 0;
	p->flags = 0;
}

void fake_rx_flags(uint8_t flags)
{
	if (rx_head == rx_tail)
		die("no packet queued to flag");
	rxq[rx_head - 1].flags = flags;
}

void fake_rx_queue_sent(const struct fake_pkt *p)
{
	fake_rx_queue(p->buf, p->len, p->sgid, p->dgid, p->sport);
	rxq[rx_head - 1].ip_id = p->ip_id;
	rxq[rx_head - 1].flags = p->flags;
}

static int fake_open(struct uroce_backend *be)
{
	struct uroce_net *net = be->net;

	/* no automatic address: the test names GID 0 (UROCE_ADDR) */
	if (net->cfg->ngids == 0) {
		fprintf(stderr, "fake_net: set UROCE_ADDR before opening the device\n");
		return -EADDRNOTAVAIL;
	}
	net->gso_max_segs = 0;  /* one packet per datagram: every ICRC covers IPv4 ID 0 */
	nsent = 0;
	rx_head = rx_tail = 0;
	refs = false;
	return 0;
}

static void fake_close(struct uroce_backend *be) { (void)be; }

static struct uroce_backend_flow *fake_flow_open(struct uroce_backend *be, const uint8_t sgid[16],
						 uint16_t sport, const uint8_t *peer, uint32_t peer_qpn)
{
	struct uroce_backend_flow *f = calloc(1, sizeof(*f));

	(void)be;
	(void)peer;
	(void)peer_qpn;
	if (!f) {
		errno = ENOMEM;
		return NULL;
	}
	memcpy(f->sgid, sgid, 16);
	f->sport = sport;
	return f;
}

static void fake_flow_close(struct uroce_backend_flow *flow) { free(flow); }

static pid_t fake_flow_ref_peer(const struct uroce_backend_flow *flow, pid_t *self)
{
	(void)flow;
	*self = getpid();  /* the peer is this process too */
	return refs ? *self : 0;
}

static int fake_send(struct uroce_backend_flow *flow, const uint8_t dgid[16], uint8_t tos,
		     struct uroce_txmsg *msgs, int n, bool *wake)
{
	(void)tos;
	(void)wake;
	for (int i = 0; i < n; i++) {
		if (nsent == FAKE_SENT_MAX) {
			if (sent_overflow_drops)
				return n;  /* sent, and lost on the wire */
			die("too many packets sent without fake_sent_clear");
		}
		struct fake_pkt *p = &sent[nsent++];
		uint32_t off = 0;
		for (int k = 0; k < msgs[i].iovcnt; k++) {
			if (off + msgs[i].iov[k].iov_len > FAKE_PKT_BYTES)
				die("packet too long to record");
			memcpy(p->buf + off, msgs[i].iov[k].iov_base, msgs[i].iov[k].iov_len);
			off += (uint32_t)msgs[i].iov[k].iov_len;
		}
		p->len = off;
		memcpy(p->sgid, flow->sgid, 16);
		memcpy(p->dgid, dgid, 16);
		p->sport = flow->sport;
		p->ip_id = msgs[i].gso_idx;
		p->flags = msgs[i].flags;
	}
	return n;
}

static int fake_recv(struct uroce_backend *be, struct uroce_rxpkt *pkts, int max, bool *more, bool *busy)
{
	int n = 0;

	while (n < max && rx_tail != rx_head) {
		struct fake_pkt *q = &rxq[rx_tail++];
		struct uroce_rxpkt *p = &pkts[n++];
		memset(p, 0, sizeof(*p));
		p->buf = q->buf;
		p->len = q->len;
		memcpy(p->sgid, q->sgid, 16);
		memcpy(p->dgid, q->dgid, 16);
		p->sport = q->sport;
		p->ttl = 64;
		p->ip_id_hint = q->ip_id;
		p->flags = q->flags;
	}
	(void)be;
	(void)busy;
	if (rx_tail != rx_head)
		*more = true;
	return n;
}

static void fake_recv_done(struct uroce_backend *be, struct uroce_rxpkt *pkts, int n)
{
	(void)be;
	(void)pkts;
	(void)n;
	/* the buffers are reused once every queued packet was handed out */
	if (rx_tail == rx_head)
		rx_head = rx_tail = 0;
}

const struct uroce_net_ops fake_net_ops = {
	.name = "fake",
	.open = fake_open,
	.close = fake_close,
	.flow_open = fake_flow_open,
	.flow_close = fake_flow_close,
	.flow_ref_peer = fake_flow_ref_peer,
	.send = fake_send,
	.recv = fake_recv,
	.recv_done = fake_recv_done,
	/* the optional ops are left out: no parts, no fds, no IP metadata */
};
