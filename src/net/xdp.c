/* The AF_XDP backend (UROCE_XDP=1): RoCEv2 packets straight between the
 * process and the interface of its address, past the kernel's IP and UDP
 * layers, for the path between hosts (issue #17).
 *
 * Receive: xdp_filter.bpf.c, attached to the interface, hands every
 * RoCEv2 packet (IPv4, UDP port 4791) to an AF_XDP socket of the queue it
 * came in on, one per receive queue, and passes all else to the stack.  A
 * packet is read where the kernel put it, in a frame of the socket's
 * memory (UMEM); the frames go back to the fill ring at the next receive
 * call, when the transport is done with the last call's packets (as udp.c
 * reuses its buffers).  Whether a packet waits is a look at the receive
 * ring's indexes in shared memory, not a system call (rx_ready): the
 * ppoll that the UDP backend's pollers make before each receive is what
 * costs them most of a hop (docs/architecture.md, "Where a packet's time
 * goes").
 *
 * Transmit: each packet is written whole into a frame -- Ethernet, IPv4
 * and UDP headers made here, then the transport's iovecs -- and the
 * frames go out through queue 0's socket with one system call per batch.
 * The headers being ours, a QP's UDP source port is the one it asked for
 * (roce-wire.md §1.4), and the IPv4 Identification is the packet's
 * gso_idx, always 0 here (no GSO: net->gso_max_segs stays 0), which is
 * what the transport computed the ICRC with (§4.2).  The link address of
 * the peer comes from the kernel's neighbour table (/proc/net/arp), which
 * a datagram to the peer's discard port fills when it lacks it; peers are
 * those on the interface's own link (no gateway).
 *
 * What it is not: it needs CAP_NET_ADMIN and CAP_BPF (root), carries IPv4
 * only, one address, no multicast and no same-host rings (a peer of this
 * network namespace is not on the far side of the interface), and one
 * process per interface holds it (the filter's BPF link: it goes when the
 * process does, killed or not).  Frames are one page, so the port MTU is at most
 * 2048.  The default stays the UDP backend, which needs none of this. */
#include "net.h"
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/xsk.h>
#include "../wire/hdr.h"
#include "../wire/opcode.h"
#include "../wire/ip.h"
#include "../util/dl.h"

/* the filter's object file, compiled by clang -target bpf (CMakeLists.txt) */
extern const unsigned char uroce_xdp_filter_obj[];
extern const unsigned int uroce_xdp_filter_obj_len;

/* libxdp and libbpf, opened by the first AF_XDP open (util/dl.h), not in
 * every process liburoce is preloaded into; the xsk_ring_* and
 * xsk_umem__*_addr helpers are inline in xsk.h */
#define XDP_SYMS(X) X(xsk_umem__create) X(xsk_umem__delete) X(xsk_socket__create) \
	X(xsk_socket__delete) X(xsk_socket__fd)
#define BPF_SYMS(X) X(libbpf_set_print) X(bpf_object__open_mem) X(bpf_object__next_map) \
	X(bpf_map__name) X(bpf_map__set_initial_value) X(bpf_object__load) \
	X(bpf_object__find_program_by_name) X(bpf_program__attach_xdp) X(bpf_link__destroy) \
	X(bpf_object__close) X(bpf_map_update_elem) X(bpf_object__find_map_fd_by_name)
static struct { XDP_SYMS(DL_SLOT) } xl;
static struct { BPF_SYMS(DL_SLOT) } bpf;
static const char *const xl_names[] = { XDP_SYMS(DL_NAME) };
static const char *const bpf_names[] = { BPF_SYMS(DL_NAME) };
static struct dl_lib xl_lib = { UROCE_XDP_SONAME, UROCE_XDP_PATH, 0 },
	bpf_lib = { UROCE_BPF_SONAME, UROCE_BPF_PATH, 0 };

#define XDP_QUEUES_MAX 64      /* the filter's map (xdp_filter.bpf.c) */
#define XDP_FRAME 4096         /* one page: aligned UMEM chunks */
#define XDP_RX_FRAMES 2048     /* per queue: the fill ring's, all in it when idle */
#define XDP_TX_FRAMES 2048     /* per queue, queue 0's used */
#define XDP_FRAMES (XDP_RX_FRAMES + XDP_TX_FRAMES)
#define XDP_HDRS 42            /* Ethernet 14 + IPv4 20 + UDP 8 */
/* what a frame holds of a packet: the chunk less the kernel's headroom
 * (XDP_PACKET_HEADROOM, 256) that copy mode keeps in front of it */
#define XDP_FRAME_ROOM (XDP_FRAME - 256)
#define XDP_NEIGH 64           /* link addresses kept */
#define XDP_NEIGH_RETRY_NS 1000000ull  /* a missing one is looked for again after 1 ms */
#define XDP_NEIGH_FRESH_NS 5000000000ull  /* a known one is read again after 5 s (a peer's new NIC) */
#define XDP_NEIGH_WAIT_US 10000           /* a send waits this long for a new one, once (neigh_wait) */
#define XDP_KICK_TRIES 64

struct xdp_queue {
	void *area;
	struct xsk_umem *umem;
	struct xsk_socket *xsk;
	struct xsk_ring_prod fq, tx;
	struct xsk_ring_cons cq, rx;
	int fd;
	/* frames handed up by the last receive call, for the fill ring at the next */
	uint64_t taken[UROCE_RX_BATCH];
	unsigned ntaken;
	/* queue 0's transmit frames that are not in flight (under tx_lock) */
	uint64_t tx_free[XDP_TX_FRAMES];
	unsigned ntx_free;
};

struct xdp_neigh {
	uint32_t ip;           /* network order; 0: free */
	bool known;
	uint8_t mac[6];
	uint64_t looked_ns;    /* last read of the kernel's table for it */
	bool gave_up;          /* a wait for it ended without it: none again until it is known */
};

struct xdp_priv {
	struct uroce_config *cfg;
	struct uroce_stats_page *stats;
	char ifname[IF_NAMESIZE];
	int ifindex;
	uint8_t mac[6];
	uint32_t addr;         /* the device's one address, network order */
	struct bpf_object *obj;
	struct bpf_link *link; /* the filter on the interface, while it is open */
	bool forked;           /* this is a forked child's copy (xdp_forked) */
	int claim_fd;          /* <address>:4791 bound, never read (below) */
	int probe_fd;          /* sends the datagrams that make the kernel resolve a link address */
	unsigned nq;
	struct xdp_queue *q;
	unsigned rr;
	/* queue 0's transmit ring and frames, and the neighbour table: a
	 * lock of the device's, as a NIC's send queue is one (the UDP
	 * backend's sockets lock inside the kernel instead) */
	pthread_mutex_t tx_lock;
	struct xdp_neigh neigh[XDP_NEIGH];
};

/* Each queue's socket, its UMEM and its frames (those it has) closed. */
static void queues_release(struct xdp_priv *p)
{
	for (unsigned i = 0; p->q && i < p->nq; i++) {
		struct xdp_queue *q = &p->q[i];
		if (q->xsk)
			xl.xsk_socket__delete(q->xsk);
		if (q->umem)
			xl.xsk_umem__delete(q->umem);
		if (q->area)
			munmap(q->area, (size_t)XDP_FRAMES * XDP_FRAME);
		q->xsk = NULL;
		q->umem = NULL;
		q->area = NULL;
		q->fd = -1;
	}
}

/* The open backend of this process, for a forked child (xdp_forked). */
static struct xdp_priv *xdp_live;
static pthread_once_t xdp_atfork_once = PTHREAD_ONCE_INIT;

/* In a forked child: the parent's AF_XDP rings are mapped shared and its
 * send lock may have been held at the fork, so the child sends and
 * receives nothing here (its posts are lost, as to a device it does not
 * own); and it lets go of its copies of the sockets, their rings, the
 * filter's link and the port, so that they go when the parent does,
 * whatever the child does.  The frames are not the child's
 * (MADV_DONTFORK): their range may hold the child's own memory later, so
 * nothing of it is unmapped here. */
static void xdp_forked(void)
{
	struct xdp_priv *p = xdp_live;

	if (!p)
		return;
	p->forked = true;
	for (unsigned i = 0; p->q && i < p->nq; i++)
		p->q[i].area = NULL;  /* not the child's: left alone */
	queues_release(p);
	if (p->link) {
		bpf.bpf_link__destroy(p->link);
		p->link = NULL;
	}
	if (p->claim_fd >= 0) {
		close(p->claim_fd);
		p->claim_fd = -1;
	}
}

static void xdp_atfork(void)
{
	pthread_atfork(NULL, NULL, xdp_forked);
}

struct uroce_backend_flow {
	struct xdp_priv *p;
	uint16_t sport;
	uint8_t sgid[16];      /* the source address, for ip_header_build */
};

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char line[256];

	if (level == LIBBPF_DEBUG)
		return 0;
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = 0;
	LOG_INFO("uroce: libbpf: %s", line);
	return 0;
}

/* The interface that holds addr, its index and link address. */
static int find_interface(struct xdp_priv *p)
{
	if (!config_netdev_of(p->cfg->gids[0], p->ifname))
		return -EADDRNOTAVAIL;
	p->ifindex = (int)if_nametoindex(p->ifname);
	struct ifreq r;
	memset(&r, 0, sizeof(r));
	snprintf(r.ifr_name, sizeof(r.ifr_name), "%s", p->ifname);
	if (ioctl(p->probe_fd, SIOCGIFHWADDR, &r) < 0)
		return -errno;
	if (r.ifr_hwaddr.sa_family != 1 /* ARPHRD_ETHER */)
		return -EOPNOTSUPP;  /* loopback and tunnels carry no Ethernet header */
	memcpy(p->mac, r.ifr_hwaddr.sa_data, 6);
	return 0;
}

static unsigned rx_queues(const char *ifname)
{
	char path[96];
	unsigned n = 0;

	for (;;) {
		snprintf(path, sizeof(path), "/sys/class/net/%s/queues/rx-%u", ifname, n);
		if (access(path, F_OK) < 0)
			break;
		n++;
	}
	return n ? n : 1;
}

/* By a BPF link, whose life is this process's: the kernel detaches the
 * filter when the link's fd closes, at a clean exit or a kill alike, and
 * refuses a second filter on the interface while one is there (EBUSY:
 * another uroce process, or another program's). */
static int attach_filter(struct xdp_priv *p)
{
	/* libbpf's messages to uroce's log while it loads ours; the
	 * application's own printer, if it set one, is put back */
	libbpf_print_fn_t app_print = bpf.libbpf_set_print(libbpf_quiet);
	p->obj = bpf.bpf_object__open_mem(uroce_xdp_filter_obj, uroce_xdp_filter_obj_len, NULL);
	if (!p->obj) {
		int e = -errno;
		bpf.libbpf_set_print(app_print);
		return e;
	}
	int rc = -ENOENT;
	struct bpf_map *m;
	/* the filter's one constant, the address, before the load */
	for (m = bpf.bpf_object__next_map(p->obj, NULL); m; m = bpf.bpf_object__next_map(p->obj, m)) {
		const char *nm = bpf.bpf_map__name(m);
		size_t l = strlen(nm);
		if (l >= 7 && !strcmp(nm + l - 7, ".rodata"))
			rc = bpf.bpf_map__set_initial_value(m, &p->addr, sizeof(p->addr));
	}
	if (rc == 0)
		rc = bpf.bpf_object__load(p->obj);
	bpf.libbpf_set_print(app_print);
	if (rc < 0)
		return rc;
	struct bpf_program *prog = bpf.bpf_object__find_program_by_name(p->obj, "uroce_xdp_filter");
	if (!prog)
		return -ENOENT;
	p->link = bpf.bpf_program__attach_xdp(prog, p->ifindex);
	if (!p->link)
		return -errno;
	return 0;
}

static int queue_open(struct xdp_priv *p, unsigned qi, int map_fd)
{
	struct xdp_queue *q = &p->q[qi];
	size_t size = (size_t)XDP_FRAMES * XDP_FRAME;
	struct xsk_umem_config uc = {
		.fill_size = XDP_RX_FRAMES, .comp_size = XDP_TX_FRAMES,
		.frame_size = XDP_FRAME, .frame_headroom = 0, .flags = 0,
	};
	struct xsk_socket_config sc = {
		.rx_size = XDP_RX_FRAMES, .tx_size = XDP_TX_FRAMES,
		.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,  /* the filter is ours */
		.bind_flags = 0,  /* zero-copy where the driver has it, else copy */
	};
	uint32_t idx;
	int rc;

	q->fd = -1;
	q->area = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (q->area == MAP_FAILED) {
		q->area = NULL;
		return -errno;
	}
	/* a forked child gets none of the frames (xdp_forked) */
	madvise(q->area, size, MADV_DONTFORK);
	rc = xl.xsk_umem__create(&q->umem, q->area, size, &q->fq, &q->cq, &uc);
	if (rc < 0)
		return rc;
	rc = xl.xsk_socket__create(&q->xsk, p->ifname, qi, q->umem, &q->rx, &q->tx, &sc);
	if (rc < 0)
		return rc;
	q->fd = xl.xsk_socket__fd(q->xsk);
	fcntl(q->fd, F_SETFD, FD_CLOEXEC);  /* libxdp makes it without: exec'd programs get none */
	if (bpf.bpf_map_update_elem(map_fd, &qi, &q->fd, 0) < 0)
		return -errno;
	/* the first XDP_RX_FRAMES frames receive, the rest transmit */
	if (xsk_ring_prod__reserve(&q->fq, XDP_RX_FRAMES, &idx) != XDP_RX_FRAMES)
		return -ENOMEM;
	for (unsigned i = 0; i < XDP_RX_FRAMES; i++)
		*xsk_ring_prod__fill_addr(&q->fq, idx + i) = (uint64_t)i * XDP_FRAME;
	xsk_ring_prod__submit(&q->fq, XDP_RX_FRAMES);
	for (unsigned i = 0; i < XDP_TX_FRAMES; i++)
		q->tx_free[q->ntx_free++] = (uint64_t)(XDP_RX_FRAMES + i) * XDP_FRAME;
	return 0;
}

static void xdp_close(struct uroce_backend *be)
{
	struct xdp_priv *p = be->priv;

	if (!p)
		return;
	queues_release(p);
	free(p->q);
	if (p->link)
		bpf.bpf_link__destroy(p->link);
	if (p->obj)
		bpf.bpf_object__close(p->obj);
	if (p->claim_fd >= 0)
		close(p->claim_fd);
	if (p->probe_fd >= 0)
		close(p->probe_fd);
	if (!p->forked)
		pthread_mutex_destroy(&p->tx_lock);  /* a child's copy may be held */
	if (xdp_live == p)
		xdp_live = NULL;
	free(p);
	be->priv = NULL;
}

static int xdp_open(struct uroce_backend *be)
{
	struct uroce_config *cfg = be->net->cfg;
	int rc;

	if (!dl_load(&xl_lib, &xl, xl_names, DL_COUNT(xl_names), "UROCE_XDP") ||
	    !dl_load(&bpf_lib, &bpf, bpf_names, DL_COUNT(bpf_names), "UROCE_XDP"))
		return -ELIBACC;
	struct xdp_priv *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->cfg = cfg;
	p->stats = be->net->stats;
	p->claim_fd = -1;
	pthread_mutex_init(&p->tx_lock, NULL);
	be->priv = p;
	p->probe_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (p->probe_fd < 0) {
		rc = -errno;
		goto fail;
	}
	if (!cfg->addr_from_env || cfg->ngids != 1 || !gid_is_ipv4(cfg->gids[0])) {
		LOG_ERR("uroce: UROCE_XDP needs UROCE_ADDR to name one IPv4 address");
		rc = -EINVAL;
		goto fail;
	}
	memcpy(&p->addr, cfg->gids[0] + 12, 4);
	rc = find_interface(p);
	if (rc < 0) {
		LOG_ERR("uroce: UROCE_XDP: no Ethernet interface holds the address: %s", strerror(-rc));
		goto fail;
	}
	/* the RoCE MTU and its headers in one frame: 2048 at most (4096 does
	 * not fit a page); the default is capped so (util/config.c), a
	 * UROCE_MTU of 4096 is refused */
	if (cfg->active_mtu > IBV_MTU_2048) {
		LOG_ERR("uroce: UROCE_XDP carries a port MTU of 2048 at most (UROCE_MTU)");
		rc = -EINVAL;
		goto fail;
	}
	/* <address>:4791 bound: the port is this process's, as the UDP
	 * backend's would be (another uroce there fails to bind it rather
	 * than wait for packets the filter takes) */
	p->claim_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(ROCE_UDP_PORT) };
	sin.sin_addr.s_addr = p->addr;
	if (p->claim_fd < 0 || bind(p->claim_fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
		rc = -errno;
		LOG_ERR("uroce: UROCE_XDP: cannot bind port %d of the address: %s", ROCE_UDP_PORT, strerror(-rc));
		goto fail;
	}
	rc = attach_filter(p);
	if (rc < 0) {
		LOG_ERR("uroce: UROCE_XDP: cannot attach the filter to %s: %s", p->ifname,
			rc == -EBUSY ? "the interface has an XDP program already (another process's)"
				     : rc == -EPERM ? "it needs CAP_NET_ADMIN and CAP_BPF" : strerror(-rc));
		goto fail;
	}
	int map_fd = bpf.bpf_object__find_map_fd_by_name(p->obj, "uroce_xsks");
	p->nq = rx_queues(p->ifname);
	if (p->nq > XDP_QUEUES_MAX)
		p->nq = XDP_QUEUES_MAX;
	p->q = calloc(p->nq, sizeof(*p->q));
	if (!p->q || map_fd < 0) {
		rc = p->q ? map_fd : -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < p->nq; i++) {
		rc = queue_open(p, i, map_fd);
		if (rc < 0) {
			LOG_ERR("uroce: UROCE_XDP: cannot open an AF_XDP socket on %s queue %u: %s", p->ifname, i,
				strerror(-rc));
			goto fail;
		}
	}
	be->net->gso_max_segs = 0;
	pthread_once(&xdp_atfork_once, xdp_atfork);
	xdp_live = p;
	LOG_INFO("uroce: AF_XDP on %s, %u queue(s)", p->ifname, p->nq);
	return 0;
fail:
	xdp_close(be);
	return rc;
}

static struct uroce_backend_flow *xdp_flow_open(struct uroce_backend *be, const uint8_t sgid[16],
						uint16_t sport, const uint8_t *peer, uint32_t peer_qpn)
{
	struct uroce_backend_flow *f;

	(void)peer;
	(void)peer_qpn;
	if (!gid_is_ipv4(sgid)) {
		errno = EAFNOSUPPORT;
		return NULL;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->p = be->priv;
	f->sport = sport;
	memcpy(f->sgid, sgid, 16);
	return f;
}

static void xdp_flow_close(struct uroce_backend_flow *f)
{
	free(f);
}

/* ip's entry of /proc/net/arp on our interface, when complete (flags 0x2). */
static bool arp_read(const struct xdp_priv *p, uint32_t ip, uint8_t mac[6])
{
	FILE *fp = fopen("/proc/net/arp", "re");
	char line[256], a[64], hw[64], dev[64];
	unsigned type, flags;
	bool found = false;

	if (!fp)
		return false;
	if (!fgets(line, sizeof(line), fp)) {  /* the heading */
		fclose(fp);
		return false;
	}
	while (!found && fgets(line, sizeof(line), fp)) {
		struct in_addr in;
		if (sscanf(line, "%63s %x %x %63s %*s %63s", a, &type, &flags, hw, dev) != 5)
			continue;
		if (!(flags & 0x2) || strcmp(dev, p->ifname) || inet_pton(AF_INET, a, &in) != 1 || in.s_addr != ip)
			continue;
		found = sscanf(hw, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4],
			       &mac[5]) == 6;
	}
	fclose(fp);
	return found;
}

/* A datagram to ip's discard port, which its stack answers or drops (the
 * filter passes it): the kernel resolves or confirms ip's link address. */
static void neigh_probe(struct xdp_priv *p, uint32_t ip)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(9) };

	sin.sin_addr.s_addr = ip;
	UROCE_COUNT_SYSCALL(p->stats, UC_sys_other, 1);
	(void)sendto(p->probe_fd, "", 0, MSG_DONTWAIT, (struct sockaddr *)&sin, sizeof(sin));
}

/* The link address of ip, under tx_lock, and its entry in *entry.  A
 * miss asks the kernel to resolve it (a datagram to the peer's discard
 * port, which its stack answers or drops: the filter passes it) and says
 * no (neigh_wait waits). */
static bool neigh_find(struct xdp_priv *p, uint32_t ip, uint8_t mac[6], struct xdp_neigh **entry)
{
	struct xdp_neigh *e = NULL, *free_e = NULL;
	uint64_t now;

	for (int i = 0; i < XDP_NEIGH; i++) {
		if (p->neigh[i].ip == ip) {
			e = &p->neigh[i];
			break;
		}
		if (!p->neigh[i].ip && !free_e)
			free_e = &p->neigh[i];
	}
	*entry = e;
	now = now_ns();
	if (e && e->known && now - e->looked_ns < XDP_NEIGH_FRESH_NS) {
		memcpy(mac, e->mac, 6);
		return true;
	}
	if (e && !e->known && now - e->looked_ns < XDP_NEIGH_RETRY_NS)
		return false;
	if (!e) {
		/* full: one is forgotten, by the address's low bits */
		e = free_e ? free_e : &p->neigh[ntohl(ip) % XDP_NEIGH];
		memset(e, 0, sizeof(*e));
		e->ip = ip;
		*entry = e;
	}
	e->looked_ns = now;
	if (arp_read(p, ip, e->mac)) {
		e->known = true;
		e->gave_up = false;
		/* the kernel's entry goes stale, since our traffic to the peer
		 * never confirms it: a probe now and then keeps it true (a peer's
		 * new NIC, an entry collected) */
		neigh_probe(p, ip);
		memcpy(mac, e->mac, 6);
		return true;
	}
	neigh_probe(p, ip);
	if (e->known) {
		/* gone from the table since: the address it had until resolved again */
		memcpy(mac, e->mac, 6);
		return true;
	}
	return false;
}

/* Waits up to wait_us for the kernel to resolve ip, tx_lock not held, as
 * the kernel holds its own first packet to a new neighbour: the first
 * packet to a peer (a CM MAD, a UD datagram, an RC request the CM did not
 * precede) is sent, not lost.  An address that did not answer is not
 * waited for again until it is known: its packets are lost at once, as on
 * a NIC with no neighbour (xdp_no_neigh; RC's retry and the CM's resend
 * try again), so a peer stalls its sender (and the locks it holds: the
 * engine's ACKs go under rx_lock) at most once, for XDP_NEIGH_WAIT_US. */
static bool neigh_wait(struct xdp_priv *p, uint32_t ip, uint8_t mac[6], unsigned wait_us)
{
	for (unsigned waited = 0;; waited += 500) {
		pthread_mutex_lock(&p->tx_lock);
		struct xdp_neigh *e;
		bool known = neigh_find(p, ip, mac, &e);
		bool give_up = !known && (waited >= wait_us || e->gave_up);
		if (give_up)
			e->gave_up = true;
		pthread_mutex_unlock(&p->tx_lock);
		if (known || give_up)
			return known;
		usleep(500);
	}
}

/* A connected QP's peer resolved before its first packet, outside the
 * caller's locks (net_flow_prepare, at RTR): up to 100 ms. */
static void xdp_flow_prepare(struct uroce_backend *be, const uint8_t peer[16], uint32_t peer_qpn)
{
	uint8_t mac[6];

	(void)peer_qpn;
	if (gid_is_ipv4(peer)) {
		uint32_t ip;
		memcpy(&ip, peer + 12, 4);
		neigh_wait(be->priv, ip, mac, 100000);
	}
}

static void reclaim_tx(struct xdp_queue *q)
{
	uint32_t idx;
	unsigned n = xsk_ring_cons__peek(&q->cq, XDP_TX_FRAMES, &idx);

	for (unsigned i = 0; i < n; i++)
		q->tx_free[q->ntx_free++] = *xsk_ring_cons__comp_addr(&q->cq, idx + i);
	xsk_ring_cons__release(&q->cq, n);
}

/* The kernel sends what the ring holds, a batch a call (EAGAIN: more left). */
static void kick_tx(struct xdp_priv *p, struct xdp_queue *q)
{
	for (int i = 0; i < XDP_KICK_TRIES; i++) {
		UROCE_COUNT_SYSCALL(p->stats, UC_sys_sendmmsg, 1);
		if (sendto(q->fd, NULL, 0, MSG_DONTWAIT, NULL, 0) >= 0)
			return;
		if (errno != EAGAIN && errno != EBUSY && errno != EINTR) {
			UROCE_COUNT(p->stats, UC_tx_errors, 1);
			return;
		}
	}
}

static int xdp_send(struct uroce_backend_flow *f, const uint8_t dgid[16], uint8_t tos,
		    struct uroce_txmsg *msgs, int n, bool *wake)
{
	struct xdp_priv *p = f->p;
	struct xdp_queue *q = &p->q[0];
	uint8_t dmac[6];
	uint32_t daddr, idx;
	int sent = 0;

	(void)wake;
	if (p->forked)
		return -EPIPE;
	if (!gid_is_ipv4(dgid))
		return -EAFNOSUPPORT;
	/* a packet larger than a frame ends the call before it (the port MTU
	 * keeps RC's below; a path MTU set above the port's does not) */
	for (int i = 0; i < n; i++)
		if (XDP_HDRS + msgs[i].len > XDP_FRAME_ROOM) {
			if (i == 0)
				return -EMSGSIZE;  /* counted by net_send (tx_too_big) */
			UROCE_COUNT(p->stats, UC_tx_too_big, 1);
			n = i;
			break;
		}
	memcpy(&daddr, dgid + 12, 4);
	pthread_mutex_lock(&p->tx_lock);
	struct xdp_neigh *e;
	bool known = neigh_find(p, daddr, dmac, &e);
	if (!known) {
		pthread_mutex_unlock(&p->tx_lock);
		known = neigh_wait(p, daddr, dmac, XDP_NEIGH_WAIT_US);
		pthread_mutex_lock(&p->tx_lock);
	}
	if (!known) {
		pthread_mutex_unlock(&p->tx_lock);
		UROCE_COUNT(p->stats, UC_xdp_no_neigh, (uint64_t)n);
		return 0;  /* none sent: lost, and the transport's retry resends them */
	}
	if (q->ntx_free < (unsigned)n)
		reclaim_tx(q);
	int room = (int)q->ntx_free < n ? (int)q->ntx_free : n;
	uint32_t ring_free = xsk_prod_nb_free(&q->tx, (uint32_t)room);  /* the ring may hold fewer */
	if ((int)ring_free < room)
		room = (int)ring_free;
	if (room > 0)
		room = (int)xsk_ring_prod__reserve(&q->tx, (uint32_t)room, &idx);
	for (; sent < room; sent++) {
		const struct uroce_txmsg *m = &msgs[sent];
		uint64_t addr = q->tx_free[--q->ntx_free];
		uint8_t *fr = (uint8_t *)q->area + addr, *d = fr + XDP_HDRS;
		uint32_t len = m->len, total = XDP_HDRS + len;  /* within a frame: checked above */

		memcpy(fr, dmac, 6);
		memcpy(fr + 6, p->mac, 6);
		fr[12] = 0x08, fr[13] = 0x00;
		/* IPv4 with DF and the ID the ICRC was computed with (§1.2, §4.2) */
		ip_header_build(fr + 14, f->sgid, dgid, (uint16_t)(8 + len), m->gso_idx, tos, 64);
		uint8_t *udp = fr + 34;
		st16(udp, f->sport);
		st16(udp + 2, ROCE_UDP_PORT);
		st16(udp + 4, (uint16_t)(8 + len));
		st16(udp + 6, 0);          /* §1.4: sent as 0 */
		for (int k = 0; k < m->iovcnt; k++) {
			memcpy(d, m->iov[k].iov_base, m->iov[k].iov_len);
			d += m->iov[k].iov_len;
		}
		struct xdp_desc *desc = xsk_ring_prod__tx_desc(&q->tx, idx + (uint32_t)sent);
		desc->addr = addr;
		desc->len = total;
		desc->options = 0;
	}
	if (sent) {
		xsk_ring_prod__submit(&q->tx, (uint32_t)sent);
		kick_tx(p, q);
	}
	pthread_mutex_unlock(&p->tx_lock);
	if (sent < n)
		UROCE_COUNT(p->stats, UC_tx_full, (uint64_t)(n - sent));
	return sent;
}

/* The last call's frames back to the fill ring: the transport is done with them. */
static void refill(struct xdp_queue *q)
{
	uint32_t idx;

	if (!q->ntaken || xsk_ring_prod__reserve(&q->fq, q->ntaken, &idx) != q->ntaken)
		return;  /* cannot be short: the ring holds every receive frame */
	for (unsigned i = 0; i < q->ntaken; i++)
		*xsk_ring_prod__fill_addr(&q->fq, idx + i) = q->taken[i];
	xsk_ring_prod__submit(&q->fq, q->ntaken);
	q->ntaken = 0;
}

static int xdp_recv(struct uroce_backend *be, struct uroce_rxpkt *pkts, int max, bool *more, bool *busy)
{
	struct xdp_priv *p = be->priv;
	int got = 0;

	(void)busy;  /* a packet wakes the engine's epoll on the socket */
	if (p->forked)
		return 0;
	for (unsigned k = 0; k < p->nq; k++) {
		struct xdp_queue *q = &p->q[(p->rr + k) % p->nq];
		uint32_t idx;

		refill(q);
		if (got >= max)
			continue;
		/* taken[] holds a batch: the rest wait for the next call */
		uint32_t want = (uint32_t)(max - got), room = UROCE_RX_BATCH - q->ntaken;
		if (want > room)
			want = room;
		unsigned n = xsk_ring_cons__peek(&q->rx, want, &idx);
		if (n == want)
			*more = true;
		for (unsigned i = 0; i < n; i++) {
			const struct xdp_desc *desc = xsk_ring_cons__rx_desc(&q->rx, idx + i);
			uint64_t addr = xsk_umem__extract_addr(desc->addr);
			const uint8_t *fr = xsk_umem__get_data(q->area, xsk_umem__add_offset_to_addr(desc->addr));
			uint32_t len = desc->len;

			q->taken[q->ntaken++] = addr;
			/* the filter let only IPv4, IHL 5, UDP, port 4791 through;
			 * the lengths are the sender's word, checked against the
			 * frame's (an Ethernet frame may carry padding after them) */
			const uint8_t *ip = fr + 14, *udp = fr + 34;
			uint32_t ulen = len >= XDP_HDRS ? ld16(udp + 4) : 0, tot = len >= XDP_HDRS ? ld16(ip + 2) : 0;
			if (len < XDP_HDRS || ulen < 8 || tot != 20 + ulen || 14 + tot > len) {
				UROCE_COUNT(p->stats, UC_drop_truncated, 1);
				continue;
			}
			if (memcmp(ip + 16, &p->addr, 4)) {
				UROCE_COUNT(p->stats, UC_xdp_rx_not_ours, 1);
				continue;
			}
			struct uroce_rxpkt *pk = &pkts[got++];
			memset(pk, 0, sizeof(*pk));
			pk->buf = (uint8_t *)udp + 8;
			pk->len = ulen - 8;
			pk->sgid[10] = pk->sgid[11] = 0xff;
			memcpy(pk->sgid + 12, ip + 12, 4);
			pk->dgid[10] = pk->dgid[11] = 0xff;
			memcpy(pk->dgid + 12, ip + 16, 4);
			pk->sport = ld16(udp);
			pk->tos = ip[1];
			pk->ttl = ip[8];
			pk->ip_id_hint = ld16(ip + 4);  /* the sender's own: no solving (§4.2) */
		}
		xsk_ring_cons__release(&q->rx, n);
	}
	p->rr++;
	return got;
}

/* A look at each receive ring's indexes, in memory the kernel shares:
 * from any thread, consuming nothing, no system call. */
static bool xdp_rx_ready(struct uroce_backend *be, bool *busy)
{
	struct xdp_priv *p = be->priv;

	(void)busy;
	if (p->forked)
		return false;
	for (unsigned i = 0; i < p->nq; i++) {
		struct xsk_ring_cons *r = &p->q[i].rx;
		if (__atomic_load_n(r->producer, __ATOMIC_ACQUIRE) != __atomic_load_n(r->consumer, __ATOMIC_RELAXED))
			return true;
	}
	return false;
}

static int xdp_add_fds(struct uroce_backend *be, int epfd)
{
	struct xdp_priv *p = be->priv;
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 1 };

	for (unsigned i = 0; !p->forked && i < p->nq; i++)
		if (epoll_ctl(epfd, EPOLL_CTL_ADD, p->q[i].fd, &ev) < 0)
			return -errno;
	return 0;
}

/* Every header is in hand: the traffic class and hop limit are always
 * reported (no rx_ip_meta); frames go back at the next receive call (no
 * recv_done: net_recv may drop packets from the list it hands on). */
const struct uroce_net_ops uroce_xdp_ops = {
	.name = "xdp",
	.open = xdp_open,
	.close = xdp_close,
	.flow_open = xdp_flow_open,
	.flow_close = xdp_flow_close,
	.flow_prepare = xdp_flow_prepare,
	.send = xdp_send,
	.recv = xdp_recv,
	.rx_ready = xdp_rx_ready,
	.add_fds = xdp_add_fds,
};
