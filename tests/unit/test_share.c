/* One address shared by several members (net/share.c), driven in one
 * process, deterministically: two members of one registry, each with its
 * receive socket in the SO_REUSEPORT group and its forward socket, as two
 * processes would have them (OFD locks of two opens of the registry are
 * two owners).  Loopback delivers a datagram before sendto returns, so
 * every step reads what the previous one sent.
 *
 *  1. slots: a held slot cannot be claimed again; each member sees the other;
 *  2. probes: each member learns its group index from a round of probes,
 *     and the program then steers a packet to the member its QPN names;
 *  3. forward: with the group's program replaced by one that sends
 *     everything to index 0 (a group whose order changed), a packet for
 *     the other member reaches the first, is forwarded, and comes out of
 *     the owner's forward socket unwrapped with its bytes and addresses;
 *  4. a packet for a slot nobody holds is not forwarded; a forward or a
 *     probe with another registry's nonce is refused;
 *  5. a member that closes is no longer seen, and its slot can be claimed.
 * Each step fails on its own if its part of share.c is disabled. */
#include "net/net.h"
#include "net/share.h"
#include "wire/hdr.h"
#include "wire/ip.h"
#include <errno.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

static int failures;
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); failures++; } } while (0)

static uint8_t gid[16] = { 0,0,0,0, 0,0,0,0, 0,0,0xff,0xff, 127, 91 };

static int udp_bound(uint16_t port, bool reuseport)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int one = 1, fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (reuseport)
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	gid_to_sockaddr(gid, port, &ss, &sl);
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* what the socket holds now (-1: nothing) */
static int take(int fd, uint8_t *buf, size_t n, uint16_t *from_port)
{
	struct sockaddr_in from;
	socklen_t fl = sizeof(from);
	ssize_t r = recvfrom(fd, buf, n, MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
	if (r >= 0 && from_port)
		*from_port = ntohs(from.sin_port);
	return (int)r;
}

/* A member: its registry slot, receive socket and forward socket. */
struct member {
	struct share *sh;
	int rx, fwd;
	unsigned slot;
};

static int join(struct member *m, unsigned slot)
{
	int rc = share_open(gid, slot, &m->sh);
	if (rc < 0)
		return rc;
	m->slot = slot;
	m->rx = udp_bound(ROCE_UDP_PORT, true);
	m->fwd = udp_bound(0, false);
	if (m->rx < 0 || m->fwd < 0)
		return -errno;
	return share_join(m->sh, m->rx, m->fwd);
}

/* Every probe waiting on the member's receive socket, handled as udp.c
 * would; returns how many. */
static int drain_probes(struct member *m)
{
	uint8_t b[256];
	int n = 0, r;
	while ((r = take(m->rx, b, sizeof(b), NULL)) >= 0)
		n += share_rx_probe(m->sh, b, (uint32_t)r);
	return n;
}

/* A SEND-only packet to QPN qpn, from port sport */
static int send_to_qpn(int from_fd, uint32_t qpn, const char *tag)
{
	uint8_t p[64] = { 0 };
	p[0] = 0x04;  /* RC SEND only */
	p[5] = (uint8_t)(qpn >> 16), p[6] = (uint8_t)(qpn >> 8), p[7] = (uint8_t)qpn;
	snprintf((char *)p + 12, sizeof(p) - 12, "%s", tag);
	struct sockaddr_storage to;
	socklen_t tl;
	gid_to_sockaddr(gid, ROCE_UDP_PORT, &to, &tl);
	return sendto(from_fd, p, sizeof(p), 0, (struct sockaddr *)&to, tl) == (ssize_t)sizeof(p) ? 0 : -1;
}

int main(void)
{
	/* an address of this run's own, so that other runs' registries and
	 * sockets do not meet ours */
	uint16_t r;
	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (uint16_t)getpid();
	gid[14] = (uint8_t)(1 + r % 250), gid[15] = (uint8_t)(1 + (r >> 8) % 250);
	struct member a = { 0 }, b = { 0 };
	int sender = udp_bound(0, false);
	uint8_t buf[512];

	/* 1. slots */
	CHECK(join(&a, 100) == 0, "member a joins slot 100");
	struct share *again;
	CHECK(share_open(gid, 100, &again) == -EBUSY, "slot 100 is held");
	CHECK(!share_test_others(a.sh), "a alone");
	CHECK(join(&b, 200) == 0, "member b joins slot 200");
	CHECK(share_test_others(a.sh) && share_test_others(b.sh), "each sees the other");
	CHECK(share_test_gid_shared(gid), "the address is shared");

	/* 2. probes: a's join probed index 0 (a alone), b's join 0 and 1 */
	int pa = drain_probes(&a), pb = drain_probes(&b);
	CHECK(pa >= 1 && pb >= 1, "probes reached both members (a %d, b %d)", pa, pb);
	CHECK(send_to_qpn(sender, 200u << SHARE_SLOT_SHIFT | 5, "to-b") == 0, "send to b's QP");
	CHECK(take(b.rx, buf, sizeof(buf), NULL) == 64 && !strcmp((char *)buf + 12, "to-b"),
	      "the program steered b's packet to b");
	CHECK(send_to_qpn(sender, 100u << SHARE_SLOT_SHIFT | 7, "to-a") == 0, "send to a's QP");
	CHECK(take(a.rx, buf, sizeof(buf), NULL) == 64 && !strcmp((char *)buf + 12, "to-a"),
	      "the program steered a's packet to a");

	/* 3. forward: everything to index 0 (a joined first) */
	struct sock_filter ret0 = BPF_STMT(BPF_RET | BPF_K, 0);
	struct sock_fprog prog = { 1, &ret0 };
	CHECK(setsockopt(a.rx, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof(prog)) == 0, "steer to 0");
	uint16_t sport = 0;
	CHECK(send_to_qpn(sender, 200u << SHARE_SLOT_SHIFT | 9, "fwd-b") == 0, "send to b's QP");
	int n = take(a.rx, buf, sizeof(buf), &sport);
	CHECK(n == 64 && take(b.rx, buf + 256, 256, NULL) < 0, "b's packet came to a (%d)", n);
	struct uroce_rxpkt pk = { .buf = buf, .len = 64, .sport = sport, .tos = 0x12, .ttl = 33, .ip_id_hint = 3 };
	memcpy(pk.sgid, gid, 16);
	memcpy(pk.dgid, gid, 16);
	pk.sgid[15] ^= 1;  /* as if from another address */
	/* past the address's limit of one round per SHARE_REPROBE_NS (20 ms)
	 * since b's join: a lower bound on the time, met by any sleep this long */
	usleep(25000);
	unsigned calls = 0;
	CHECK(share_forward(a.sh, 200, &pk, pk.buf, pk.len, &calls) == 1 && calls == 2,
	      "a forwards it, with two system calls (the slot's lock test, the send: %u)", calls);
	uint8_t fb[512];
	n = take(b.fwd, fb, sizeof(fb), NULL);
	CHECK(n == SHARE_FWD_HDR + 64, "b's forward socket has it (%d bytes)", n);
	struct uroce_rxpkt out = { 0 };
	CHECK(n > 0 && share_unwrap(b.sh, fb, (uint32_t)n, &out), "b unwraps it");
	CHECK(out.len == 64 && !memcmp(out.buf, buf, 64) && !memcmp(out.sgid, pk.sgid, 16) &&
	      !memcmp(out.dgid, gid, 16) && out.sport == sport && out.tos == 0x12 && out.ttl == 33 &&
	      out.ip_id_hint == 3, "the packet and its addresses arrive as they came");
	/* the forward began a round: both members learn their indexes again,
	 * and the program they attach steers right once more */
	pa = drain_probes(&a), pb = drain_probes(&b);
	CHECK(pa + pb >= 2, "the forward started a round of probes (a %d, b %d)", pa, pb);
	CHECK(send_to_qpn(sender, 200u << SHARE_SLOT_SHIFT | 11, "again-b") == 0, "send to b's QP");
	CHECK(take(b.rx, buf, sizeof(buf), NULL) == 64 && !strcmp((char *)buf + 12, "again-b"),
	      "steered to b again after the round");

	/* 4. nobody's slot; another registry's nonce */
	pk.buf[5] = 0x01, pk.buf[6] = 0x2c, pk.buf[7] = 0;  /* QPN 0x012c00: slot 4 */
	CHECK(share_forward(a.sh, share_slot_of(bth_qpn(pk.buf)), &pk, pk.buf, pk.len, &calls) == 0 && calls <= 1,
	      "a packet for a slot nobody holds is not forwarded (%u system calls)", calls);
	fb[8] ^= 0xff;  /* the nonce */
	CHECK(!share_unwrap(b.sh, fb, SHARE_FWD_HDR + 64, &out), "a forward with another nonce is refused");
	uint8_t probe[24] = { 'u', 'r', 'o', 'c', 'e', '-', 'p', 'x', 0, 0, 0, 9 };
	CHECK(share_rx_probe(b.sh, probe, sizeof(probe)), "a probe with another nonce is taken as a probe");
	CHECK(send_to_qpn(sender, 200u << SHARE_SLOT_SHIFT | 13, "still-b") == 0 &&
	      take(b.rx, buf, sizeof(buf), NULL) == 64 && !strcmp((char *)buf + 12, "still-b"),
	      "and changes nothing");

	/* 5. a leaves */
	share_close(a.sh);
	close(a.rx);
	close(a.fwd);
	CHECK(!share_test_others(b.sh), "b alone after a closed");
	CHECK(share_open(gid, 100, &again) == 0, "slot 100 is free again");
	if (again)
		share_close(again);
	share_close(b.sh);
	close(b.rx);
	close(b.fwd);
	close(sender);
	if (failures)
		printf("%d failures\n", failures);
	else
		printf("test_share: every check passed\n");
	return failures != 0;
}
