/* The UDP socket backend: RoCEv2 over ordinary UDP sockets, no privileges.
 *
 * Receive: one socket per GID bound to <address>:4791.  Transmit: a small
 * pool of UDP_TX_POOL unconnected sockets per GID, bound to the fixed
 * source ports 0xC000 | 0..UDP_TX_POOL-1, each shared by every flow whose
 * source port folds to it (tx_sock) -- not a socket per QP, so the number
 * of QPs is not bound by RLIMIT_NOFILE (issue #13).  A QP's datagrams all leave from
 * one socket, so its source port stays fixed for its life (§1.4).  The
 * pool's sockets set SO_REUSEPORT, so processes of one user that share an
 * address (the rdma_cm issue's design) can each bind the same pool; a port
 * taken otherwise falls back to one ephemeral-port socket.
 *
 * ICRC note (§4.2): the kernel picks the IPv4 Identification, which the ICRC
 * covers.  An unconnected socket that sets DF gets ID 0 (ip_select_ident:
 * a socket with no inet_daddr), however many flows share it, which is what
 * the transport assumes when it computes the ICRC.  Runs of equal-size
 * packets leave in one GSO send (UDP_SEGMENT per call, so nothing of it
 * stays on the shared socket); received bundles (GRO) are split here.  The
 * traffic class goes with each call too (IP_TOS / IPV6_TCLASS control
 * messages), since QPs sharing a socket may differ in it.
 *
 * It also offers doorbells: an 8-byte datagram sent from a flow to a peer's
 * port 4791 that wakes the peer's sleeping engine and is recognised and
 * skipped on receipt.  They belong to the same-host rings (ring.c, shm.h),
 * whose packets never touch these sockets; net.c, which holds both
 * backends, rings them. */
#include "net.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <ifaddrs.h>
#include <net/if.h>
#include "../util/fds.h"
#include "share.h"
#include "../wire/hdr.h"
#include "../wire/ip.h"
#include <sys/syscall.h>

/* sendmmsg/recvmmsg as bare system calls: glibc's wrappers are
 * cancellation points and switch asynchronous cancellation on and off
 * around every call, a visible part of a polling loop's time; uroce never
 * cancels threads, and an empty poll is most of what the loop does.
 * Sends never block: a transmit socket is shared by every QP whose source
 * port maps to it (UDP_TX_POOL), so a send buffer that a slow link (a
 * qdisc holding packets, netem) keeps full must not stall the other QPs,
 * nor the engine sending an ACK under rx_lock.  What a full buffer
 * refuses is lost like a packet dropped on the wire, and RC's
 * retransmission recovers it (counted: tx_full). */
static int sys_sendmmsg(struct uroce_stats_page *stats, int fd, struct mmsghdr *mm, unsigned n)
{
	UROCE_COUNT_SYSCALL(stats, UC_sys_sendmmsg, 1);
	return (int)syscall(SYS_sendmmsg, fd, mm, n, MSG_DONTWAIT);
}

static int sys_recvmmsg(struct uroce_stats_page *stats, int fd, struct mmsghdr *mm, unsigned n)
{
	UROCE_COUNT_SYSCALL(stats, UC_sys_recvmmsg, 1);
	return (int)syscall(SYS_recvmmsg, fd, mm, n, MSG_DONTWAIT, NULL);
}

#ifndef UDP_NO_CHECK6_RX
#define UDP_NO_CHECK6_RX 102
#endif

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* A shared transmit socket (fd -1: not opened yet, -2: its port could not
 * be bound, the ephemeral-port one stands in).  sendmmsg on one
 * socket from several threads is safe: the kernel sends each datagram
 * whole, and nothing per flow is kept on the socket. */
struct udp_txsock {
	int fd;
	bool v4;
	uint16_t port;  /* the source port it sends from */
};

/* The pool's size: source ports 0xC000 | (the asked port's low 6 bits).
 * rxe uses the whole 14-bit hash of rdma_get_udp_sport (§1.4); 64 ports
 * keep ECMP entropy across flows, and the port is only that -- §1.4:
 * receivers must accept any value, and none (rxe, a NIC, uroce) looks at
 * it beyond the ICRC, which is computed with the port actually sent
 * (net_flow_sport). */
#define UDP_TX_POOL 64

/* Receive sockets: one per GID, then, for each GID whose address is
 * shared (share.h), its forward socket. */
#define UDP_RX_FDS (2 * UROCE_MAX_GIDS)
/* The side sockets' safety net: a receive call reads them at least this
 * often (below). */
#define SIDE_EVERY_NS 1000000ull

struct udp_priv {
	int rx_fd[UDP_RX_FDS];
	int8_t rx_gid[UDP_RX_FDS];           /* the GID it receives for */
	bool rx_fwd[UDP_RX_FDS];             /* a forward socket: packets come wrapped */
	/* [gid][source port % UDP_TX_POOL]; the last one is the ephemeral fallback */
	struct udp_txsock tx[UROCE_MAX_GIDS][UDP_TX_POOL + 1];
	pthread_mutex_t tx_lock;             /* opening pool sockets (flow_open only) */
	struct uroce_config *cfg;
	int nrx;
	unsigned rr;
	/* Forward and multicast sockets (the side sockets) are read when a
	 * look found them readable (rx_ready), the engine woke for the
	 * sockets, or a millisecond after they were last read (a receive
	 * call that no look came before: a due ACK or timer, housekeeping):
	 * an empty receive call on them in every poll was a system call per
	 * look, ~1.5 us on ib_write_lat's round trip between two processes
	 * with an address of their own, and one every 16th call still
	 * ~0.1 us. */
	atomic_bool side_due;
	uint64_t side_read_ns;               /* the side sockets were last read (rx_lock) */
	uint8_t *bufs;                       /* UROCE_RX_BUFS buffers of UROCE_RX_BUFSZ */
	struct mmsghdr mm[UROCE_RX_BUFS];
	struct iovec iov[UROCE_RX_BUFS];
	struct sockaddr_storage from[UROCE_RX_BUFS];
	uint8_t cbuf[UROCE_RX_BUFS][192];
	struct uroce_stats_page *stats;
	/* Multicast groups (udp_mcast_join): a socket each, bound to the
	 * group's address and port 4791 and a member on every address of the
	 * device of its family.  Changed under rx_lock, as udp_recv reads
	 * them; rx_ready looks without it (a socket closed meanwhile only
	 * makes a look say "maybe").  Read as the forward sockets are. */
	_Atomic int mc_fd[UROCE_MAX_MCAST_GRP];
	uint8_t mc_gid[UROCE_MAX_MCAST_GRP][16];
	atomic_int nmc;
	atomic_bool ip_meta;                 /* rx_ip_meta's, for group sockets opened later */
	int epfd;                            /* the engine's (add_fds), for those too; -1: none */
	pid_t epfd_pid;                      /* whose it is: a forked child's epoll is its parent's */
	unsigned ifindex[UROCE_MAX_GIDS];    /* an IPv6 address's interface (multicast names it) */
};

/* A transmit socket's sends to a multicast group: the hop limit the
 * kernel's rdma_cm gives a RoCEv2 group (cm-wire.md, multicast), not IP's
 * 1; an IPv4 group leaves by the interface of the bound source address,
 * an IPv6 one must be told it. */
static void tx_mcast_opts(const struct udp_priv *p, int g, int fd)
{
	int hops = 64, ifx = (int)p->ifindex[g];

	if (gid_is_ipv4(p->cfg->gids[g])) {
		setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &hops, sizeof(hops));
		return;
	}
	setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &hops, sizeof(hops));
	if (ifx > 0)
		setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, &ifx, sizeof(ifx));
}

/* A doorbell: "uroce-db" and the QPN slot of the process whose region it
 * wakes (big-endian: a shared address's steering program reads it, and a
 * member it reaches by mistake passes it on), 12 bytes, shorter than any
 * RoCE packet (BTH and ICRC), so nothing else could be taken for it;
 * anything else that short is dropped as truncated. */
#define DOORBELL_LEN 12
static const uint8_t doorbell_magic[8] = { 'u', 'r', 'o', 'c', 'e', '-', 'd', 'b' };

/* A QP's transmit flow: its pool socket, and room to gather a batch into
 * GSO sends.  Used under its QP's lock only; the socket is the pool's. */
struct uroce_backend_flow {
	const struct udp_txsock *sock;
	struct uroce_stats_page *stats;      /* the device's: tx_full */
	struct mmsghdr mm[UROCE_TX_BATCH];
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cmsg[UROCE_TX_BATCH];
	struct iovec iov[UROCE_TX_BATCH * 4 + UROCE_TX_IOV];
};


int net_route_mtu(const uint8_t sgid[16], const uint8_t dgid[16])
{
	struct sockaddr_storage src, dst;
	socklen_t sl, dl;
	bool v4 = gid_is_ipv4(sgid);
	int fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int mtu = 0, rc = 0;

	if (fds_retry(fd))
		fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	socklen_t ml = sizeof(mtu);

	if (fd < 0)
		return -errno;
	gid_to_sockaddr(sgid, 0, &src, &sl);
	gid_to_sockaddr(dgid, ROCE_UDP_PORT, &dst, &dl);
	if (bind(fd, (struct sockaddr *)&src, sl) < 0 || connect(fd, (struct sockaddr *)&dst, dl) < 0 ||
	    getsockopt(fd, v4 ? IPPROTO_IP : IPPROTO_IPV6, v4 ? IP_MTU : IPV6_MTU, &mtu, &ml) < 0)
		rc = -errno;
	close(fd);
	return rc ? rc : mtu;
}

/* The index of the interface that has the address gid, or 0: IPv6
 * multicast names its interface by index, not by an address. */
static unsigned addr_ifindex(const uint8_t gid[16])
{
	struct ifaddrs *ifs, *i;
	unsigned idx = 0;

	if (getifaddrs(&ifs) < 0)
		return 0;
	for (i = ifs; i && !idx; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6 ||
		    memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, gid, 16))
			continue;
		idx = if_nametoindex(i->ifa_name);
	}
	freeifaddrs(ifs);
	return idx;
}

static int udp_socket(const uint8_t gid[16], uint16_t port, bool reuse, bool rx)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	bool v4 = gid_is_ipv4(gid);
	int fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fds_retry(fd))
		fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (reuse) {
		/* SO_REUSEADDR would let any user's socket with it bind the
		 * receive port too (and take its unicast packets): a shared
		 * receive socket sets SO_REUSEPORT alone, whose group the
		 * kernel keeps to one effective uid.  So does a multicast
		 * group's socket: the kernel gives every member socket of a
		 * group its own copy of a datagram, with no reuseport choice
		 * (__udp4_lib_mcast_deliver), and no other user joins ours */
		if (!rx)
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	}
	if (v4) {
		int pmtu = IP_PMTUDISC_DO; /* DF, as RoCEv2 sends (§1.2) */
		setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
		/* The UDP checksum is left on, unlike rxe's 0 (§1.4 allows a
		 * correct one; receivers verify it): Linux refuses UDP GSO on a
		 * socket without checksums, and offload makes it free. */
		if (rx)
			setsockopt(fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one));
	} else {
		int pmtu = IPV6_PMTUDISC_DO;
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof(pmtu));
		if (rx) {
			/* rxe sends IPv6 with UDP checksum 0 (§1.4) */
			setsockopt(fd, IPPROTO_UDP, UDP_NO_CHECK6_RX, &one, sizeof(one));
			setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &one, sizeof(one));
		}
	}
	int buf = 8 << 20;
	if (rx) {
		/* GSO sends arrive as one bundle (one copy, one syscall) */
		setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one));
		if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf)) < 0)
			setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	} else {
		if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof(buf)) < 0)
			setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
		/* transmit sockets never expect traffic; keep their queue tiny */
		int small = 4096;
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	}
	gid_to_sockaddr(gid, port, &ss, &sl);
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	if (rx)
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

/* Zero configuration (issue: any number of processes on one host each get
 * their own address): 127.x.y.z derived from the PID, probed by binding. */
static int bind_auto_address(struct uroce_config *cfg, int *fd_out)
{
	unsigned pid = (unsigned)getpid();
	unsigned seed = pid ^ (unsigned)now_ns();

	for (int attempt = 0; attempt < 64; attempt++) {
		unsigned v = attempt == 0 ? pid : (unsigned)rand_r(&seed);
		uint8_t gid[16] = { 0,0,0,0, 0,0,0,0, 0,0,0xff,0xff, 127,
			(uint8_t)(64 + ((v >> 16) & 63)), (uint8_t)(v >> 8), (uint8_t)v };
		if (gid[15] == 0 || gid[15] == 255)
			gid[15] = 1;
		int fd = udp_socket(gid, ROCE_UDP_PORT, false, true);
		if (fd >= 0) {
			memcpy(cfg->gids[0], gid, 16);
			cfg->ngids = 1;
			*fd_out = fd;
			return 0;
		}
		if (fd != -EADDRINUSE)
			return fd;
	}
	return -EADDRINUSE;
}

/* What a receive call needs in header i; the kernel rewrites the lengths
 * and flags of the headers it fills, so those are reset after use. */
static void rx_hdr_reset(struct udp_priv *p, int i)
{
	struct msghdr *h = &p->mm[i].msg_hdr;

	memset(h, 0, sizeof(*h));
	h->msg_name = &p->from[i];
	h->msg_namelen = sizeof(p->from[i]);
	h->msg_iov = &p->iov[i];
	h->msg_iovlen = 1;
	h->msg_control = p->cbuf[i];
	h->msg_controllen = sizeof(p->cbuf[i]);
}

/* A packet (or doorbell) of `len` bytes for another process of a shared
 * address, forwarded (share_forward: f > 0 sent on, f < 0 the send failed,
 * 0 nobody to send it to) with `calls` system calls, counted. */
static void share_count(struct uroce_stats_page *stats, int f, uint32_t len, unsigned calls)
{
	UROCE_COUNT_SYSCALL(stats, UC_sys_other, calls);
	if (f != 0)
		UROCE_COUNT(stats, UC_copy_forward_bytes, len);
	UROCE_COUNT(stats, f > 0 ? UC_share_forwarded : f == 0 ? UC_share_unowned : UC_share_forward_failed, 1);
}

static void share_release(struct uroce_net *net)
{
	for (int i = 0; i < UROCE_MAX_GIDS; i++) {
		share_close(net->share[i]);
		net->share[i] = NULL;
	}
}

/* One slot, the same in the registry of every GID of the device (a QPN's
 * high bits name the process whichever of its addresses a packet comes
 * to): net->share[] and net->qpn_slot, or -errno when an address has no
 * registry (no private rendezvous directory): then none is shared. */
static int share_claim(struct uroce_net *net, struct uroce_config *cfg)
{
	const unsigned span = SHARE_SLOT_LAST - SHARE_SLOT_FIRST + 1;
	unsigned start = net->qpn_slot - SHARE_SLOT_FIRST;

	for (unsigned t = 0; t < span; t++) {
		unsigned slot = SHARE_SLOT_FIRST + (start + t) % span;
		int i, rc = 0;
		for (i = 0; i < cfg->ngids; i++)
			if ((rc = share_open(cfg->gids[i], slot, &net->share[i])) < 0)
				break;
		if (i == cfg->ngids) {
			net->qpn_slot = slot;
			return 0;
		}
		net->share[i] = NULL;
		share_release(net);
		if (rc != -EBUSY)
			return rc;
	}
	return -EBUSY;
}

static int udp_open(struct uroce_backend *be)
{
	struct udp_priv *p = calloc(1, sizeof(*p));
	struct uroce_net *net = be->net;
	struct uroce_config *cfg = net->cfg;
	int rc;

	if (!p)
		return -ENOMEM;
	for (int g = 0; g < UROCE_MAX_GIDS; g++)
		for (int i = 0; i <= UDP_TX_POOL; i++)
			p->tx[g][i].fd = -1;
	pthread_mutex_init(&p->tx_lock, NULL);
	p->cfg = cfg;
	p->epfd = -1;
	p->bufs = malloc((size_t)UROCE_RX_BUFS * UROCE_RX_BUFSZ);
	if (!p->bufs) {
		free(p);
		return -ENOMEM;
	}
	if (!cfg->addr_from_env) {
		rc = bind_auto_address(cfg, &p->rx_fd[0]);
		if (rc < 0)
			goto fail;
		p->nrx = 1;
	} else {
		rc = share_claim(net, cfg);
		if (rc < 0)
			LOG_INFO("uroce: the address is this process's alone (no registry: %s)", strerror(-rc));
		for (int i = 0; i < cfg->ngids; i++) {
			int fd = udp_socket(cfg->gids[i], ROCE_UDP_PORT, net->share[i] != NULL, true);
			if (fd < 0) {
				char a[64];
				LOG_ERR("uroce: cannot bind %s port %d: %s%s", gid_format(cfg->gids[i], a, sizeof(a)),
					ROCE_UDP_PORT, strerror(-fd),
					fd == -EADDRINUSE ? " (a program that is not uroce, or another user's uroce, has it: "
							    "processes share an address only within one user)" : "");
				rc = fd;
				goto fail;
			}
			p->rx_gid[p->nrx] = (int8_t)i;
			p->rx_fd[p->nrx++] = fd;
		}
		for (int i = 0; i < cfg->ngids; i++) {
			if (!net->share[i])
				continue;
			/* the forward socket: <address>:ephemeral, no GRO (each
			 * datagram is one wrapped packet) */
			int fd = udp_socket(cfg->gids[i], 0, false, true), zero = 0;
			if (fd >= 0)
				setsockopt(fd, IPPROTO_UDP, UDP_GRO, &zero, sizeof(zero));
			if (fd < 0 || (rc = share_join(net->share[i], p->rx_fd[i], fd)) < 0) {
				rc = fd < 0 ? fd : rc;
				if (fd >= 0)
					close(fd);
				LOG_ERR("uroce: cannot open the forward socket of a shared address: %s", strerror(-rc));
				goto fail;
			}
			p->rx_gid[p->nrx] = (int8_t)i;
			p->rx_fwd[p->nrx] = true;
			p->rx_fd[p->nrx++] = fd;
		}
	}
	for (int i = 0; i < UROCE_RX_BUFS; i++) {
		p->iov[i].iov_base = p->bufs + (size_t)i * UROCE_RX_BUFSZ;
		p->iov[i].iov_len = UROCE_RX_BUFSZ;
		rx_hdr_reset(p, i);
	}
	/* UDP GSO (Linux 4.18+): probe it once */
	int probe = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int gso = 1024;
	if (probe >= 0 && setsockopt(probe, IPPROTO_UDP, UDP_SEGMENT, &gso, sizeof(gso)) == 0 &&
	    !net->cfg->no_gso)
		net->gso_max_segs = UROCE_GSO_MAX_SEGS;
	if (probe >= 0)
		close(probe);
	for (int i = 0; i < cfg->ngids && i < UROCE_MAX_GIDS; i++)
		if (!gid_is_ipv4(cfg->gids[i]))
			p->ifindex[i] = addr_ifindex(cfg->gids[i]);
	p->stats = net->stats;
	be->priv = p;
	return 0;
fail:
	for (int i = 0; i < p->nrx; i++)
		close(p->rx_fd[i]);
	share_release(net);
	pthread_mutex_destroy(&p->tx_lock);
	free(p->bufs);
	free(p);
	return rc;
}

static void udp_close(struct uroce_backend *be)
{
	struct udp_priv *p = be->priv;

	if (!p)
		return;
	/* the slot first: a round of probes meanwhile would count a member
	 * whose socket has gone */
	share_release(be->net);
	for (int i = 0; i < p->nrx; i++)
		close(p->rx_fd[i]);
	for (int i = 0; i < atomic_load(&p->nmc); i++)
		close(p->mc_fd[i]);
	for (int g = 0; g < UROCE_MAX_GIDS; g++)
		for (int i = 0; i <= UDP_TX_POOL; i++)
			if (p->tx[g][i].fd >= 0)
				close(p->tx[g][i].fd);
	pthread_mutex_destroy(&p->tx_lock);
	free(p->bufs);
	free(p);
	be->priv = NULL;
}

/* The pool socket of sgid for source port sport, opened on first use and
 * kept until the backend closes: at most UDP_TX_POOL + 1 fds per address,
 * however many QPs. */
static const struct udp_txsock *tx_sock(struct udp_priv *p, const uint8_t sgid[16], uint16_t sport)
{
	int g;

	for (g = 0; g < p->cfg->ngids && memcmp(p->cfg->gids[g], sgid, 16); g++)
		;
	if (g == p->cfg->ngids || g >= UROCE_MAX_GIDS) {
		errno = EADDRNOTAVAIL;
		return NULL;
	}
	int i = (int)(sport % UDP_TX_POOL), fd = 0;
	struct udp_txsock *s = &p->tx[g][i];
	pthread_mutex_lock(&p->tx_lock);
	if (s->fd == -1) {
		s->port = (uint16_t)(0xC000 | i);
		fd = udp_socket(sgid, s->port, true, false);
		s->v4 = gid_is_ipv4(sgid);
		if (fd >= 0) {
			tx_mcast_opts(p, g, fd);
			s->fd = fd;
		}
		else if (fd == -EADDRINUSE || fd == -EACCES)
			s->fd = -2;  /* not tried again */
	}
	if (s->fd == -2) {
		/* the port is someone else's (another user's socket): this
		 * pool slot sends from the ephemeral-port socket, still a
		 * valid RoCEv2 sender, receivers accept any source port (§1.4) */
		s = &p->tx[g][UDP_TX_POOL];
		if (s->fd < 0) {
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			uint8_t gid[16];
			fd = udp_socket(sgid, 0, false, false);
			if (fd >= 0 && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
				tx_mcast_opts(p, g, fd);
				sockaddr_to_gid(&ss, gid, &s->port);
				s->v4 = gid_is_ipv4(sgid);
				s->fd = fd;
			} else if (fd >= 0) {
				int e = errno;
				close(fd);
				fd = -e;
			}
		}
	}
	if (s->fd < 0)
		s = NULL;  /* out of fds or the like: tried again next time */
	pthread_mutex_unlock(&p->tx_lock);
	if (!s)
		errno = fd < 0 ? -fd : EIO;
	return s;
}

/* Every peer is reached the same way: `peer` says nothing here. */
static struct uroce_backend_flow *udp_flow_open(struct uroce_backend *be, const uint8_t sgid[16],
						uint16_t sport, const uint8_t *peer, uint32_t peer_qpn)
{
	struct uroce_backend_flow *f = calloc(1, sizeof(*f));

	(void)peer;
	(void)peer_qpn;
	if (!f)
		return NULL;
	f->sock = tx_sock(be->priv, sgid, sport);
	f->stats = ((struct udp_priv *)be->priv)->stats;
	if (!f->sock) {
		int e = errno;
		free(f);
		errno = e;
		return NULL;
	}
	return f;
}

static void udp_flow_close(struct uroce_backend_flow *f)
{
	free(f);  /* the socket is the pool's */
}

static uint16_t udp_flow_sport(const struct uroce_backend_flow *f)
{
	return f->sock->port;
}

/* Wakes the engine sleeping at dgid's port 4791 (udp_recv skips it). */
static int udp_doorbell(struct uroce_backend_flow *f, const uint8_t dgid[16], unsigned slot)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	uint8_t d[DOORBELL_LEN];

	memcpy(d, doorbell_magic, 8);
	d[8] = (uint8_t)(slot >> 24), d[9] = (uint8_t)(slot >> 16), d[10] = (uint8_t)(slot >> 8), d[11] = (uint8_t)slot;
	gid_to_sockaddr(dgid, ROCE_UDP_PORT, &ss, &sl);
	UROCE_COUNT_SYSCALL(f->stats, UC_sys_other, 1);
	ssize_t r = sendto(f->sock->fd, d, sizeof(d), 0, (struct sockaddr *)&ss, sl);
	return r > 0 ? 0 : r < 0 ? -errno : -EIO;
}

/* A call's control messages: the traffic class unless it is 0 (the
 * socket's own), and the GSO segment size of a run (segsz 0: one packet).
 * Both per call, as the socket is shared. */
static void tx_cmsgs(struct msghdr *h, char *buf, size_t room, bool v4, uint8_t tos, uint16_t segsz)
{
	size_t len = 0;

	if (!tos && !segsz)
		return;
	memset(buf, 0, room);
	h->msg_control = buf;
	h->msg_controllen = room;
	struct cmsghdr *c = CMSG_FIRSTHDR(h);
	if (tos) {
		int t = tos;
		c->cmsg_level = v4 ? IPPROTO_IP : IPPROTO_IPV6;
		c->cmsg_type = v4 ? IP_TOS : IPV6_TCLASS;
		c->cmsg_len = CMSG_LEN(sizeof(t));
		memcpy(CMSG_DATA(c), &t, sizeof(t));
		len += CMSG_SPACE(sizeof(t));
		c = CMSG_NXTHDR(h, c);
	}
	if (segsz) {
		c->cmsg_level = IPPROTO_UDP;
		c->cmsg_type = UDP_SEGMENT;
		c->cmsg_len = CMSG_LEN(sizeof(segsz));
		memcpy(CMSG_DATA(c), &segsz, sizeof(segsz));
		len += CMSG_SPACE(sizeof(segsz));
	}
	h->msg_controllen = len;
}

static int udp_send(struct uroce_backend_flow *f, const uint8_t dgid[16], uint8_t tos,
		    struct uroce_txmsg *msgs, int n, bool *wake)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int sent = 0;

	(void)wake; /* a socket's peer wakes on its own */
	gid_to_sockaddr(dgid, ROCE_UDP_PORT, &ss, &sl);
	while (sent < n) {
		/* one datagram per GSO run: the run's packets' iovecs back to back */
		int nm = 0, niov = 0, first[UROCE_TX_BATCH], count[UROCE_TX_BATCH];
		int i = sent;
		while (i < n && nm < UROCE_TX_BATCH) {
			int j = i + 1;
			while (j < n && msgs[j].gso_idx)
				j++;
			int need = 0;
			for (int k = i; k < j; k++)
				need += msgs[k].iovcnt;
			if (niov + need > (int)(sizeof(f->iov) / sizeof(f->iov[0])))
				break;
			struct msghdr *h = &f->mm[nm].msg_hdr;
			memset(h, 0, sizeof(*h));
			h->msg_name = &ss;
			h->msg_namelen = sl;
			h->msg_iov = &f->iov[niov];
			for (int k = i; k < j; k++) {
				memcpy(&f->iov[niov], msgs[k].iov, sizeof(struct iovec) * (size_t)msgs[k].iovcnt);
				niov += msgs[k].iovcnt;
			}
			h->msg_iovlen = (size_t)need;
			tx_cmsgs(h, f->cmsg[nm].buf, sizeof(f->cmsg[nm].buf), f->sock->v4, tos,
				 j - i > 1 ? (uint16_t)msgs[i].len : 0);
			first[nm] = i;
			count[nm] = j - i;
			nm++;
			i = j;
		}
		int r = sys_sendmmsg(f->stats, f->sock->fd, f->mm, (unsigned)nm);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				/* the send buffer is full: what is left is lost
				 * (sys_sendmmsg); the caller's count says how much went */
				UROCE_COUNT(f->stats, UC_tx_full, (uint64_t)(n - sent));
				return sent;
			}
			/* report and skip the first unsent datagram: the transport's
			 * retransmission recovers it like a lost packet */
			if (sent == 0)
				return -errno;
			return sent;
		}
		for (int k = 0; k < r; k++)
			sent = first[k] + count[k];
		if (r < nm)
			return sent;
	}
	return sent;
}

/* The int an IP_TTL / IPV6_HOPLIMIT / IPV6_TCLASS / UDP_GRO message carries. */
static int cmsg_int(const struct cmsghdr *c)
{
	int v;
	memcpy(&v, CMSG_DATA(c), sizeof(v));
	return v;
}
static void parse_cmsgs(struct msghdr *h, struct uroce_rxpkt *pk, int *gso)
{
	memset(pk->dgid, 0, 16);
	pk->tos = 0;
	pk->ttl = 64;
	*gso = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
		if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
			struct in_pktinfo pi;
			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			pk->dgid[10] = pk->dgid[11] = 0xff;
			memcpy(pk->dgid + 12, &pi.ipi_addr, 4);
		} else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
			pk->tos = *(uint8_t *)CMSG_DATA(c);
		} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
			struct in6_pktinfo pi;
			memcpy(&pi, CMSG_DATA(c), sizeof(pi));
			memcpy(pk->dgid, &pi.ipi6_addr, 16);
		} else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
			pk->tos = (uint8_t)cmsg_int(c);
		} else if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) ||
			   (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT)) {
			pk->ttl = (uint8_t)cmsg_int(c);
		} else if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
			*gso = cmsg_int(c);
		}
	}
}

static int udp_recv(struct uroce_backend *be, struct uroce_rxpkt *pkts, int max, bool *more, bool *busy)
{
	struct udp_priv *p = be->priv;
	int got = 0, used = 0, k;

	(void)busy; /* a socket's packets wake the engine's epoll */
	int nmc = atomic_load_explicit(&p->nmc, memory_order_acquire);
	/* forward and multicast sockets, read now and then */
	bool side_read = false;
	if (p->nrx > p->cfg->ngids || nmc > 0) {
		uint64_t now = now_ns();
		side_read = atomic_exchange_explicit(&p->side_due, false, memory_order_relaxed) ||
			   be->net->rx_sockets_woke || now - p->side_read_ns > SIDE_EVERY_NS;
		if (side_read)
			p->side_read_ns = now;
	}
	/* each socket's datagrams go to buffers after the previous socket's:
	 * the packets of this call point into all of them */
	int nfd = p->nrx + (side_read ? nmc : 0);
	for (k = 0; k < nfd && got + UROCE_GRO_MAX_SEGS <= max && used < UROCE_RX_BUFS; k++) {
		/* the unicast sockets in turn, then the groups' */
		int fi = k < p->nrx ? (int)((p->rr + (unsigned)k) % (unsigned)p->nrx) : k;
		bool mc = fi >= p->nrx;
		int fd = mc ? p->mc_fd[fi - p->nrx] : p->rx_fd[fi];
		if (!mc && p->rx_fwd[fi] && !side_read)
			continue;
		/* a shared address's registry: a packet for another process's
		 * QP is forwarded, one that came forwarded is unwrapped; a
		 * group's packet is every member's, each with its own copy */
		struct share *sh = mc ? NULL : be->net->share[p->rx_gid[fi]];
		if (sh && !p->rx_fwd[fi])
			share_rx_tick(sh);
		/* every datagram may be a bundle of up to UROCE_GRO_MAX_SEGS packets */
		int want = (max - got) / UROCE_GRO_MAX_SEGS;
		if (want > UROCE_RX_BUFS - used)
			want = UROCE_RX_BUFS - used;
		int r = sys_recvmmsg(p->stats, fd, p->mm + used, (unsigned)want);
		if (r <= 0)
			continue;
		if (r == want)
			*more = true;
		/* a side socket that had packets stays due while it has them: an
		 * engine busy receiving makes no look, and the 1 ms net would
		 * cap forwarded or multicast packets at a batch a millisecond */
		if (mc || p->rx_fwd[fi])
			atomic_store_explicit(&p->side_due, true, memory_order_relaxed);
		for (int i = used; i < used + r; i++) {
			struct msghdr *h = &p->mm[i].msg_hdr;
			struct uroce_rxpkt tmpl = { .flags = 0 };  /* nothing from the network is a reference (net.h) */
			int gso;
			uint32_t len = p->mm[i].msg_len;
			uint8_t *buf = p->iov[i].iov_base;

			sockaddr_to_gid(&p->from[i], tmpl.sgid, &tmpl.sport);
			parse_cmsgs(h, &tmpl, &gso);
			if (h->msg_flags & MSG_TRUNC)
				len = 0; /* larger than any RoCE packet: dropped as truncated */
			else if (len == DOORBELL_LEN && !memcmp(buf, doorbell_magic, 8)) {
				/* a same-host peer's doorbell: it woke the engine,
				 * or, on a shared address, another process's */
				unsigned slot = ld32(buf + 8);
				if (sh && slot != be->net->qpn_slot) {
					unsigned calls;
					int f = share_forward(sh, slot, NULL, buf, len, &calls);
					share_count(p->stats, f, len, calls);
				} else {
					UROCE_COUNT(p->stats, UC_shm_doorbells_rx, 1);
				}
				rx_hdr_reset(p, i);
				continue;
			} else if (sh && p->rx_fwd[fi]) {
				rx_hdr_reset(p, i);
				if (got < max && share_unwrap(sh, buf, len, &pkts[got])) {
					UROCE_COUNT(p->stats, UC_share_forwarded_rx, 1);
					got++;
				} else {
					UROCE_COUNT(p->stats, UC_share_bad, 1);
				}
				continue;
			} else if (sh && share_rx_probe(sh, buf, len)) {
				UROCE_COUNT(p->stats, UC_share_probes_rx, 1);
				rx_hdr_reset(p, i);
				continue;
			}
			rx_hdr_reset(p, i);
			uint32_t seg = gso > 0 && (uint32_t)gso < len ? (uint32_t)gso : (len ? len : 1);
			uint16_t idx = 0;
			for (uint32_t off = 0; off < len || (len == 0 && idx == 0); off += seg, idx++) {
				if (got == max)
					break; /* cannot happen: room for a full bundle was kept */
				struct uroce_rxpkt *pk = &pkts[got++];
				*pk = tmpl;
				pk->buf = buf + off;
				pk->len = len ? (len - off < seg ? len - off : seg) : 0;
				/* segment k of a GSO send carried IPv4 ID k (net.h) */
				pk->ip_id_hint = idx;
				if (sh && pk->len >= BTH_LEN) {
					uint32_t dqpn = bth_qpn(pk->buf);
					unsigned slot = share_slot_of(dqpn);
					/* QP1 is every process's: the CM MAD names its process */
					if (dqpn == 1)
						slot = share_cm_owner(sh, pk->buf, pk->len);
					if (slot != be->net->qpn_slot && slot >= SHARE_SLOT_FIRST && slot <= SHARE_SLOT_LAST) {
						/* the group's order changed, or a
						 * member has not learnt its index yet */
						unsigned calls;
						int f = share_forward(sh, slot, pk, pk->buf, pk->len, &calls);
						share_count(p->stats, f, pk->len, calls);
						got--;
					}
				}
			}
		}
		used += r;
	}
	if (k < nfd)
		*more = true; /* sockets left unread for want of room */
	if (k < nfd && side_read)
		atomic_store_explicit(&p->side_due, true, memory_order_relaxed);  /* the side sockets' turn stands */
	p->rr++;
	return got;
}

/* One ppoll over every receive socket (no more system calls than an empty
 * recvmmsg of one socket); the raw system call, as sys_recvmmsg: glibc's
 * is a cancellation point, and ibv_poll_cq is none. */
static bool udp_rx_ready(struct uroce_backend *be, bool *busy)
{
	struct udp_priv *p = be->priv;
	struct pollfd pfd[UDP_RX_FDS + UROCE_MAX_MCAST_GRP];
	struct timespec zero = { 0, 0 };
	int nfd = p->nrx, nmc = atomic_load_explicit(&p->nmc, memory_order_acquire);

	(void)busy;
	for (int i = 0; i < p->nrx; i++)
		pfd[i] = (struct pollfd){ .fd = p->rx_fd[i], .events = POLLIN };
	for (int i = 0; i < nmc; i++)
		pfd[nfd++] = (struct pollfd){ .fd = atomic_load_explicit(&p->mc_fd[i], memory_order_relaxed),
					      .events = POLLIN };
	UROCE_COUNT_SYSCALL(p->stats, UC_sys_poll, 1);
	long n = syscall(SYS_ppoll, pfd, (unsigned long)nfd, &zero, NULL, 8ul);  /* 8: the kernel's sigset; an error: let recv find out */
	for (int i = p->cfg->ngids; n > 0 && i < nfd; i++)
		if (pfd[i].revents)
			atomic_store_explicit(&p->side_due, true, memory_order_relaxed);
	return n != 0;
}

/* One address, no multicast group, and no other member of the address to
 * forward packets to this one (share_alone): udp_recv reads one socket a
 * call, as the ppoll of udp_rx_ready looks at one.  With another member,
 * the forward socket carries this one's connection manager's packets,
 * which the group's steering leaves to a hash (QP1); read only every
 * SIDE_EVERY_NS without a look, they would wait up to that long.  (A member
 * joining is seen at its first probe round; until then its forwards wait
 * so, as while the engine is busy receiving.) */
static bool udp_rx_look_is_recv(struct uroce_backend *be)
{
	struct udp_priv *p = be->priv;
	struct share *sh = be->net->share[0];

	return p->cfg->ngids == 1 && !atomic_load_explicit(&p->nmc, memory_order_relaxed) &&
	       (!sh || share_alone(sh));
}

static int udp_add_fds(struct uroce_backend *be, int epfd)
{
	struct udp_priv *p = be->priv;
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 1 };

	for (int i = 0; i < p->nrx; i++)
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, p->rx_fd[i], &ev) < 0)
			return -errno;
	for (int i = 0; i < atomic_load(&p->nmc); i++)
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, p->mc_fd[i], &ev) < 0)
			return -errno;
	p->epfd = epfd;
	p->epfd_pid = getpid();
	return 0;
}

/* Traffic class and hop limit come as two more control messages per
 * datagram, work on every receive call; only a UD
 * receive (its GRH) and the pcap tap need them, so they are asked for
 * while a UD QP is open or a capture runs.  The kernel adds them as a
 * packet is read: when the last UD QP goes, it is unpublished already. */
static void ip_meta_set(int fd, bool on)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int v = on;

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		return;
	if (ss.ss_family == AF_INET) {
		setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &v, sizeof(v));
		setsockopt(fd, IPPROTO_IP, IP_RECVTTL, &v, sizeof(v));
	} else {
		setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &v, sizeof(v));
		setsockopt(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, &v, sizeof(v));
	}
}

static void udp_rx_ip_meta(struct uroce_backend *be, bool on)
{
	struct udp_priv *p = be->priv;

	atomic_store(&p->ip_meta, on);
	for (int i = 0; i < p->nrx; i++)
		ip_meta_set(p->rx_fd[i], on);
	for (int i = 0; i < atomic_load(&p->nmc); i++)
		ip_meta_set(p->mc_fd[i], on);
}

/* A multicast group (§1.5 item 2: BTH destination QPN 0xFFFFFF, an IP
 * multicast destination): a socket bound to the group's address, so that
 * it gets the group's datagrams and no other, a member on every address of
 * the device of the group's family (the kernel's IGMP / MLD join, as the
 * kernel's rdma_cm sends for a RoCEv2 group), and only for the groups
 * joined on those interfaces (IP_MULTICAST_ALL off: by default a socket
 * bound to a group also gets it from any interface where any socket of the
 * host joined it). */
static int udp_mcast_join(struct uroce_backend *be, const uint8_t mgid[16])
{
	struct udp_priv *p = be->priv;
	int n = atomic_load(&p->nmc);
	bool v4 = gid_is_ipv4(mgid);
	int joined = 0, err = 0, any = 0, zero = 0;

	for (int i = 0; i < p->cfg->ngids; i++)
		any += gid_is_ipv4(p->cfg->gids[i]) == v4;
	/* no address of the group's family: nothing can arrive, and the
	 * attach is a verbs matter (rxe's attach has no IP side to fail) */
	if (!any)
		return 0;
	/* an IPv6 group of link or interface scope is bound with a scope
	 * id, which a device of several interfaces has none of */
	if (!v4 && (mgid[1] & 0x0F) <= 2)
		return -EOPNOTSUPP;
	if (n == UROCE_MAX_MCAST_GRP)
		return -ENOMEM;
	int fd = udp_socket(mgid, ROCE_UDP_PORT, true, true);
	if (fd < 0)
		return fd;
	if (v4)
		setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero));
	else
		setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_ALL, &zero, sizeof(zero));
	for (int i = 0; i < p->cfg->ngids; i++) {
		const uint8_t *a = p->cfg->gids[i];
		int rc;
		if (gid_is_ipv4(a) != v4)
			continue;
		if (v4) {
			struct ip_mreqn mr = { .imr_ifindex = 0 };
			memcpy(&mr.imr_multiaddr, mgid + 12, 4);
			memcpy(&mr.imr_address, a + 12, 4);
			rc = setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof(mr));
		} else {
			struct ipv6_mreq mr = { .ipv6mr_interface = p->ifindex[i] };
			memcpy(&mr.ipv6mr_multiaddr, mgid, 16);
			rc = setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &mr, sizeof(mr));
		}
		/* two addresses on one interface: one membership */
		if (rc == 0 || errno == EADDRINUSE)
			joined++;
		else
			err = errno;
	}
	if (!joined) {
		close(fd);
		return -err;
	}
	if (atomic_load(&p->ip_meta))
		ip_meta_set(fd, true);
	/* the engine's epoll set, not in a forked child: it is its parent's */
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 1 };
	if (p->epfd >= 0 && p->epfd_pid == getpid() && epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		err = errno;
		close(fd);
		return -err;
	}
	memcpy(p->mc_gid[n], mgid, 16);
	atomic_store(&p->mc_fd[n], fd);
	atomic_store_explicit(&p->nmc, n + 1, memory_order_release);
	return 0;
}

static void udp_mcast_leave(struct uroce_backend *be, const uint8_t mgid[16])
{
	struct udp_priv *p = be->priv;
	int n = atomic_load(&p->nmc);

	for (int i = 0; i < n; i++) {
		if (memcmp(p->mc_gid[i], mgid, 16))
			continue;
		int fd = p->mc_fd[i];
		/* the last takes its place: a look meanwhile may poll one
		 * socket twice or a closed one, which only says "maybe" */
		memcpy(p->mc_gid[i], p->mc_gid[n - 1], 16);
		atomic_store(&p->mc_fd[i], p->mc_fd[n - 1]);
		atomic_store(&p->nmc, n - 1);
		/* out of the epoll set first: a forked child may still hold the
		 * socket open, and a closed fd leaves epoll only with its last */
		if (p->epfd >= 0 && p->epfd_pid == getpid())
			epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL);
		close(fd);
		return;
	}
}

/* Whole send calls (no flow_part_bytes: there a call is a system call);
 * receive buffers are reused by the next call (no recv_done); a packet on
 * a socket wakes the engine's epoll itself (no rx_sleeping). */
const struct uroce_net_ops uroce_udp_ops = {
	.name = "udp",
	.open = udp_open,
	.close = udp_close,
	.flow_open = udp_flow_open,
	.flow_close = udp_flow_close,
	.flow_sport = udp_flow_sport,
	.send = udp_send,
	.doorbell = udp_doorbell,
	.recv = udp_recv,
	.rx_ready = udp_rx_ready,
	.rx_look_is_recv = udp_rx_look_is_recv,
	.add_fds = udp_add_fds,
	.rx_ip_meta = udp_rx_ip_meta,
	.mcast_join = udp_mcast_join,
	.mcast_leave = udp_mcast_leave,
};
