/*
 * rc_stress — a concurrency stress test written against the plain libibverbs
 * API (it would run the same on rxe or a ConnectX NIC), run as a server and a
 * client process under the uroce launcher by tests/rc/run_pair.sh.
 *
 *   server:  rc_stress -p 0 -P portfile [-n units] [-N churn] [-t alarm_s]
 *   client:  rc_stress -p port [-n units] [-N churn] [-t alarm_s] 127.0.0.1
 *
 * Each process runs several application threads at once, while the engine
 * thread runs too (issue #13 item 5):
 *  - lanes 0..2: three RC QPs whose send CQ (client) and receive CQ (server)
 *    are one CQ each, polled by one thread; lane 0 is posted to by two
 *    threads at once (ibv_post_send is thread-safe, ibv_post_send(3));
 *  - lane 3: its CQ on a completion channel, one thread in
 *    ibv_get_cq_event/ibv_req_notify_cq while another posts;
 *  - lane 4 (the victim): one thread posts SENDs while another moves the QP
 *    to ERR with ibv_modify_qp once a count of them completed;
 *  - a churn thread creates and destroys CQs, QPs, SRQs, MRs and memory
 *    windows, runs traffic on them (a QP pair connected to itself), and
 *    rereg/deregs an MR nobody uses, for as long as the lanes run.
 * Every unit a poster issues is a SEND (the server checks every byte, the
 * length, the immediate and the order), a WRITE then a READ of the same
 * remote slot (the READ's bytes are checked), or a FETCH_AND_ADD on one
 * counter (every value it returns must be returned once, and the final
 * counter must equal their number).  Everything is bounded by counts, never
 * by time; -t is only an alarm that fails a hang.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NLANES      5
#define LANE_CHAN   3               /* the completion-channel lane */
#define LANE_VICTIM 4               /* the lane moved to ERR while posting */
#define MAX_TID     2               /* posters per lane (lane 0 has two) */
#define K           16              /* slots per poster: outstanding units at most */
#define MAXMSG      9000u           /* several packets at any MTU */
#define HDR         16u             /* a SEND's header: magic, lane, tid, seq, len */
#define RQ_DEPTH    256
#define MAX_INLINE  64
#define MAGIC       0x5354524bu
#define CH_MSGS     8               /* churn: messages per self-connected pair */
#define CH_MSG      2048u

enum { U_SEND, U_SEND_IMM, U_WRITE_READ, U_FAA };

static struct {
	int port;
	const char *port_file;
	const char *host;
	unsigned units;                 /* units per poster */
	unsigned churn_min;             /* churn rounds at least */
	unsigned alarm_s;
	int gid_idx;
} opt = { .port = 18515, .units = 1500, .churn_min = 40, .alarm_s = 240 };

static bool is_server;

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "rc_stress %s: FAIL: ", is_server ? "server" : "client");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	fflush(stderr);
	_exit(1);
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "rc_stress: FAIL: hang guard (-t) expired\n";
	ssize_t r = write(2, m, sizeof(m) - 1);
	(void)r;
	_exit(1);
}

/* ------------------------------------------------------------------ */
/* What a unit is: a function of (lane, tid, seq), known to both sides  */

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static uint64_t unit_hash(unsigned lane, unsigned tid, uint32_t seq)
{
	return mix(((uint64_t)lane << 40) | ((uint64_t)tid << 32) | seq);
}

static int unit_kind(unsigned lane, unsigned tid, uint32_t seq)
{
	if (lane == LANE_VICTIM)
		return U_SEND;
	unsigned r = (unsigned)(unit_hash(lane, tid, seq) % 10);
	return r < 3 ? U_SEND : r < 5 ? U_SEND_IMM : r < 8 ? U_WRITE_READ : U_FAA;
}

static uint32_t unit_len(unsigned lane, unsigned tid, uint32_t seq)
{
	uint64_t h = unit_hash(lane, tid, seq) >> 8;
	/* a quarter of them short enough to go inline */
	if ((h & 3) == 0)
		return HDR + (uint32_t)((h >> 2) % (MAX_INLINE - HDR + 1));
	return HDR + (uint32_t)((h >> 2) % (MAXMSG - HDR + 1));
}

static uint8_t pat(uint64_t h, uint32_t i)
{
	return (uint8_t)((h >> ((i & 7) * 8)) + i * 131u + (i >> 8));
}

static void fill(uint8_t *p, unsigned lane, unsigned tid, uint32_t seq, uint32_t len)
{
	uint64_t h = unit_hash(lane, tid, seq);
	uint32_t hdr[4] = { MAGIC, (lane << 8) | tid, seq, len };
	memcpy(p, hdr, HDR);
	for (uint32_t i = HDR; i < len; i++)
		p[i] = pat(h, i);
}

/* 0 if p holds what fill() wrote, else the first bad offset + 1 */
static uint32_t check(const uint8_t *p, unsigned lane, unsigned tid, uint32_t seq, uint32_t len)
{
	uint64_t h = unit_hash(lane, tid, seq);
	uint32_t hdr[4] = { MAGIC, (lane << 8) | tid, seq, len };
	if (memcmp(p, hdr, HDR))
		return 1;
	for (uint32_t i = HDR; i < len; i++)
		if (p[i] != pat(h, i))
			return i + 1;
	return 0;
}

static unsigned lane_posters(unsigned lane) { return lane == 0 ? 2 : 1; }

/* the SENDs (with or without immediate) a poster issues */
static unsigned sends_of(unsigned lane, unsigned tid, unsigned units)
{
	unsigned n = 0;
	for (uint32_t s = 0; s < units; s++)
		n += unit_kind(lane, tid, s) <= U_SEND_IMM;
	return n;
}

/* ------------------------------------------------------------------ */
/* The control channel                                                 */

struct lane_info {
	uint32_t qpn, psn;
	uint64_t tgt_addr;              /* server: WRITE/READ slots */
	uint32_t tgt_rkey, pad;
};

struct info {
	uint8_t gid[16];
	struct lane_info lane[NLANES];
	uint64_t atom_addr;
	uint32_t atom_rkey;
	uint32_t units;
};

struct done_msg {
	uint32_t victim_posted, victim_ok;
};

static void xfer(int fd, void *buf, size_t n, bool send_it)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = send_it ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			die("control channel %s: %s", send_it ? "send" : "recv", r ? strerror(errno) : "closed");
		p += r;
		n -= (size_t)r;
	}
}

static int ctl_server(void)
{
	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (ls < 0)
		die("socket: %s", strerror(errno));
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1))
		die("bind/listen: %s", strerror(errno));
	socklen_t al = sizeof(a);
	getsockname(ls, (struct sockaddr *)&a, &al);
	if (opt.port_file) {
		char tmp[4096];
		snprintf(tmp, sizeof(tmp), "%s.tmp", opt.port_file);
		FILE *f = fopen(tmp, "w");
		if (!f || fprintf(f, "%u\n", ntohs(a.sin_port)) < 0 || fclose(f) || rename(tmp, opt.port_file))
			die("writing the port file %s", opt.port_file);
	}
	int fd = accept(ls, NULL, NULL);
	if (fd < 0)
		die("accept: %s", strerror(errno));
	close(ls);
	return fd;
}

static int ctl_client(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port) };
	if (fd < 0 || inet_pton(AF_INET, opt.host, &a.sin_addr) != 1)
		die("bad server address %s", opt.host);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		die("connect %s:%d: %s", opt.host, opt.port, strerror(errno));
	return fd;
}

/* ------------------------------------------------------------------ */
/* Verbs objects                                                       */

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid my_gid;

static struct ibv_qp *make_qp(struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq,
			      unsigned sq, unsigned rq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq, .recv_cq = rcq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = sq, .max_recv_wr = srq ? 0 : rq, .max_send_sge = 2,
			 .max_recv_sge = 1, .max_inline_data = MAX_INLINE },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		die("ibv_create_qp: %s", strerror(errno));
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t my_psn, const uint8_t *dgid, uint32_t dqpn, uint32_t dpsn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("ibv_modify_qp(INIT): %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dqpn;
	a.rq_psn = dpsn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)opt.gid_idx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("ibv_modify_qp(RTR): %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	/* 0.54 s (4.096 us x 2^17): a loss is recovered by uroce's adaptive
	 * timer long before, and a host that stalls a process under load (two
	 * cores, a dozen threads each) does not spend the 7 retries */
	a.timeout = 17;
	a.retry_cnt = 7;
	a.rnr_retry = 7;                /* infinite: a slow receiver only slows the sender */
	a.sq_psn = my_psn;
	a.max_rd_atomic = 4;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("ibv_modify_qp(RTS): %s", strerror(errno));
}

static struct ibv_cq *make_cq(int n, struct ibv_comp_channel *ch)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, n, NULL, ch, 0);
	if (!cq)
		die("ibv_create_cq(%d): %s", n, strerror(errno));
	return cq;
}

/* Poll cq until one completion; spins, bounded only by the alarm. */
static void poll1(struct ibv_cq *cq, struct ibv_wc *wc)
{
	int n;
	while ((n = ibv_poll_cq(cq, 1, wc)) == 0)
		sched_yield();
	if (n < 0)
		die("ibv_poll_cq: %d", n);
}

static atomic_bool traffic_done;

/* ------------------------------------------------------------------ */
/* Churn: objects created and destroyed while the lanes run            */

static void churn_round(unsigned i, struct ibv_mr **spare, uint8_t *spare_buf[2])
{
	struct ibv_cq *cq1 = make_cq(2 * CH_MSGS + 4 + (int)(i % 37), NULL);
	struct ibv_cq *cq2 = i % 2 ? make_cq(CH_MSGS + (int)(i % 11), NULL) : cq1;
	struct ibv_srq *srq = NULL;
	if (i % 3 == 0) {
		struct ibv_srq_init_attr sa = { .attr = { .max_wr = 2 * CH_MSGS, .max_sge = 1 } };
		srq = ibv_create_srq(pd, &sa);
		if (!srq)
			die("ibv_create_srq: %s", strerror(errno));
	}
	size_t blen = 2 * (size_t)CH_MSGS * CH_MSG;
	uint8_t *buf = malloc(blen);
	if (!buf)
		die("malloc");
	memset(buf, 0xee, blen);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, blen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
	if (!mr)
		die("ibv_reg_mr: %s", strerror(errno));
	struct ibv_qp *qa = make_qp(cq1, cq2, NULL, 2 * CH_MSGS + 4, 4);
	struct ibv_qp *qb = make_qp(cq1, cq2, srq, 4, 2 * CH_MSGS);
	connect_qp(qa, 100 + i, my_gid.raw, qb->qp_num, 900 + i);
	connect_qp(qb, 900 + i, my_gid.raw, qa->qp_num, 100 + i);

	uint8_t *rx = buf + CH_MSGS * CH_MSG;
	for (unsigned m = 0; m < CH_MSGS; m++) {
		struct ibv_sge sg = { (uintptr_t)(rx + m * CH_MSG), CH_MSG, mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = m, .sg_list = &sg, .num_sge = 1 }, *bad;
		if (srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qb, &wr, &bad))
			die("churn post_recv");
	}
	for (unsigned m = 0; m < CH_MSGS; m++) {
		uint32_t len = HDR + (uint32_t)(unit_hash(7, i, m) % (CH_MSG - HDR));
		fill(buf + m * CH_MSG, 7, i & 0xff, m, len);
		struct ibv_sge sg = { (uintptr_t)(buf + m * CH_MSG), len, mr->lkey };
		struct ibv_send_wr wr = { .wr_id = m, .sg_list = &sg, .num_sge = 1,
			.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
		if (ibv_post_send(qa, &wr, &bad))
			die("churn post_send: %s", strerror(errno));
	}
	unsigned got_s = 0, got_r = 0;
	while (got_s < CH_MSGS || got_r < CH_MSGS) {
		struct ibv_wc wc;
		poll1(cq1, &wc);
		if (wc.status != IBV_WC_SUCCESS)
			die("churn round %u: %s (wr_id %" PRIu64 ")", i, ibv_wc_status_str(wc.status), wc.wr_id);
		if (wc.opcode == IBV_WC_SEND) {
			got_s++;
		} else if (wc.opcode == IBV_WC_RECV) {
			uint32_t m = (uint32_t)wc.wr_id;
			const uint8_t *p = rx + m * CH_MSG;
			uint32_t hdr[4];
			memcpy(hdr, p, HDR);
			if (hdr[3] != wc.byte_len || check(p, 7, i & 0xff, hdr[2], wc.byte_len))
				die("churn round %u: received bytes differ", i);
			got_r++;
		} else {
			die("churn: unexpected opcode %d", wc.opcode);
		}
		if (cq2 != cq1 && got_s == CH_MSGS) {
			while (got_r < CH_MSGS) {
				poll1(cq2, &wc);
				if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV)
					die("churn round %u: receive %s", i, ibv_wc_status_str(wc.status));
				const uint8_t *p = rx + (uint32_t)wc.wr_id * CH_MSG;
				uint32_t hdr[4];
				memcpy(hdr, p, HDR);
				if (hdr[3] != wc.byte_len || check(p, 7, i & 0xff, hdr[2], wc.byte_len))
					die("churn round %u: received bytes differ", i);
				got_r++;
			}
		}
	}

	/* a type 1 window over the receive half, bound by qa, then a WRITE
	 * through it lands there and a READ through it brings it back */
	if (i % 4 == 0) {
		struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
		if (!mw)
			die("ibv_alloc_mw: %s", strerror(errno));
		struct ibv_mw_bind bind = { .wr_id = 77, .send_flags = IBV_SEND_SIGNALED,
			.bind_info = { .mr = mr, .addr = (uintptr_t)rx, .length = CH_MSG,
				       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ } };
		if (ibv_bind_mw(qa, mw, &bind))
			die("ibv_bind_mw: %s", strerror(errno));
		struct ibv_wc wc;
		poll1(cq1, &wc);
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_BIND_MW)
			die("churn bind_mw: %s", ibv_wc_status_str(wc.status));
		fill(buf, 8, i & 0xff, 0, CH_MSG);
		struct ibv_sge sg = { (uintptr_t)buf, CH_MSG, mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 78, .sg_list = &sg, .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = { (uintptr_t)rx, mw->rkey } }, *bad;
		if (ibv_post_send(qa, &wr, &bad))
			die("churn write: %s", strerror(errno));
		poll1(cq1, &wc);
		if (wc.status != IBV_WC_SUCCESS)
			die("churn write through a window: %s", ibv_wc_status_str(wc.status));
		memset(buf, 0, CH_MSG);
		wr.opcode = IBV_WR_RDMA_READ;
		wr.wr_id = 79;
		if (ibv_post_send(qa, &wr, &bad))
			die("churn read: %s", strerror(errno));
		poll1(cq1, &wc);
		if (wc.status != IBV_WC_SUCCESS)
			die("churn read through a window: %s", ibv_wc_status_str(wc.status));
		if (check(rx, 8, i & 0xff, 0, CH_MSG) || check(buf, 8, i & 0xff, 0, CH_MSG))
			die("churn round %u: bytes through the window differ", i);
		if (ibv_dealloc_mw(mw))
			die("ibv_dealloc_mw");
	}

	/* the spare MR is in no WQE: rereg its access, its translation, or
	 * deregister and register it again */
	unsigned acc = IBV_ACCESS_LOCAL_WRITE | (i % 2 ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE);
	if (i % 5 == 4) {
		if (ibv_dereg_mr(*spare))
			die("ibv_dereg_mr(spare)");
		*spare = ibv_reg_mr(pd, spare_buf[i % 2], 65536, acc);
		if (!*spare)
			die("ibv_reg_mr(spare): %s", strerror(errno));
	} else if (i % 5 == 3) {
		int r = ibv_rereg_mr(*spare, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS,
				     NULL, spare_buf[i % 2], 65536, (int)acc);
		if (r)
			die("ibv_rereg_mr(translation): %d %s", r, strerror(errno));
	} else {
		int r = ibv_rereg_mr(*spare, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, (int)acc);
		if (r)
			die("ibv_rereg_mr(access): %d %s", r, strerror(errno));
	}

	/* destroy in an order that varies */
	if (i % 2) {
		if (ibv_destroy_qp(qb) || ibv_destroy_qp(qa))
			die("ibv_destroy_qp");
	} else {
		if (ibv_destroy_qp(qa) || ibv_destroy_qp(qb))
			die("ibv_destroy_qp");
	}
	if (srq && ibv_destroy_srq(srq))
		die("ibv_destroy_srq");
	if (i % 3 == 1) {
		if (ibv_dereg_mr(mr))
			die("ibv_dereg_mr");
		mr = NULL;
	}
	if (cq2 != cq1 && ibv_destroy_cq(cq2))
		die("ibv_destroy_cq");
	if (ibv_destroy_cq(cq1))
		die("ibv_destroy_cq");
	if (mr && ibv_dereg_mr(mr))
		die("ibv_dereg_mr");
	free(buf);
}

static unsigned churn_rounds;

static void *churn_thread(void *arg)
{
	(void)arg;
	uint8_t *spare_buf[2] = { malloc(65536), malloc(65536) };
	if (!spare_buf[0] || !spare_buf[1])
		die("malloc");
	struct ibv_mr *spare = ibv_reg_mr(pd, spare_buf[0], 65536, IBV_ACCESS_LOCAL_WRITE);
	if (!spare)
		die("ibv_reg_mr(spare): %s", strerror(errno));
	/* at least churn_min rounds, and on for as long as the lanes run */
	unsigned i = 0;
	while (i < opt.churn_min || !atomic_load(&traffic_done))
		churn_round(i++, &spare, spare_buf);
	churn_rounds = i;
	if (ibv_dereg_mr(spare))
		die("ibv_dereg_mr(spare)");
	free(spare_buf[0]);
	free(spare_buf[1]);
	return NULL;
}

/* ------------------------------------------------------------------ */
/* Client                                                              */

struct poster {
	unsigned lane, tid;
	uint8_t *sbuf, *rbuf;           /* K slots of MAXMSG each */
	uint64_t *abuf;                 /* K FETCH_AND_ADD results */
	atomic_uint outstanding;        /* units posted and not completed */
	atomic_uint completed;
	unsigned posted;
};

static struct poster posters[NLANES][MAX_TID];
static struct ibv_qp *lane_qp[NLANES];
static struct ibv_cq *lane_scq[NLANES], *lane_rcq[NLANES];
static struct ibv_comp_channel *chan;
static struct ibv_mr *local_mr;
static struct info peer;
static atomic_uint faa_bits[1 + (NLANES * MAX_TID * 65536u) / 32];
static atomic_uint faa_done;
static atomic_uint victim_done, victim_ok;
static atomic_bool victim_flushed, victim_in_err;

static uint64_t wrid(unsigned lane, unsigned tid, int kind, uint32_t seq)
{
	return ((uint64_t)lane << 56) | ((uint64_t)tid << 48) | ((uint64_t)kind << 40) | seq;
}

static uint64_t slot_remote(unsigned lane, unsigned tid, uint32_t seq)
{
	return peer.lane[lane].tgt_addr + ((uint64_t)tid * K + seq % K) * MAXMSG;
}

/* one client completion: checks it and retires its unit */
static void client_wc(const struct ibv_wc *wc)
{
	unsigned lane = (unsigned)(wc->wr_id >> 56), tid = (unsigned)(wc->wr_id >> 48) & 0xff;
	int kind = (int)(wc->wr_id >> 40) & 0xff;
	uint32_t seq = (uint32_t)wc->wr_id;
	if (lane >= NLANES || tid >= lane_posters(lane))
		die("completion with a wr_id no WR had: %" PRIx64, wc->wr_id);
	struct poster *p = &posters[lane][tid];
	if (lane == LANE_VICTIM) {
		/* in order: nothing succeeds after the first flushed WR (IBA 10.7.3.1) */
		if (wc->status == IBV_WC_SUCCESS) {
			if (atomic_load(&victim_flushed))
				die("victim: seq %u succeeded after a flushed WR", seq);
			atomic_fetch_add(&victim_ok, 1);
		} else if (wc->status == IBV_WC_WR_FLUSH_ERR) {
			if (!atomic_load(&victim_in_err))
				die("victim: seq %u flushed before ibv_modify_qp(ERR)", seq);
			atomic_store(&victim_flushed, true);
		} else {
			die("victim: seq %u completed %s", seq, ibv_wc_status_str(wc->status));
		}
		atomic_fetch_add(&victim_done, 1);
		atomic_fetch_add(&p->completed, 1);
		atomic_fetch_sub(&p->outstanding, 1);
		return;
	}
	if (wc->status != IBV_WC_SUCCESS)
		die("lane %u tid %u seq %u kind %d: %s", lane, tid, seq, kind, ibv_wc_status_str(wc->status));
	if (kind == U_WRITE_READ) {
		if (wc->opcode != IBV_WC_RDMA_READ)
			die("lane %u seq %u: opcode %d, not a READ", lane, seq, wc->opcode);
		uint32_t len = unit_len(lane, tid, seq);
		uint32_t bad = check(p->rbuf + (seq % K) * MAXMSG, lane, tid, seq, len);
		if (bad)
			die("lane %u tid %u seq %u: READ back of the WRITE differs at byte %u of %u",
			    lane, tid, seq, bad - 1, len);
	} else if (kind == U_FAA) {
		if (wc->opcode != IBV_WC_FETCH_ADD)
			die("lane %u seq %u: opcode %d, not FETCH_ADD", lane, seq, wc->opcode);
		uint64_t v = p->abuf[seq % K];
		if (v >= 32ull * (sizeof(faa_bits) / sizeof(faa_bits[0])))
			die("FETCH_AND_ADD returned %" PRIu64 ", more than were issued", v);
		unsigned bit = 1u << (v % 32);
		if (atomic_fetch_or(&faa_bits[v / 32], bit) & bit)
			die("FETCH_AND_ADD returned %" PRIu64 " twice", v);
		atomic_fetch_add(&faa_done, 1);
	} else if (wc->opcode != IBV_WC_SEND) {
		die("lane %u seq %u: opcode %d, not SEND", lane, seq, wc->opcode);
	}
	atomic_fetch_add(&p->completed, 1);
	atomic_fetch_sub(&p->outstanding, 1);
}

static void post_unit(struct poster *p, uint32_t seq)
{
	unsigned lane = p->lane, tid = p->tid, slot = seq % K;
	int kind = unit_kind(lane, tid, seq);
	uint32_t len = unit_len(lane, tid, seq);
	struct ibv_send_wr wr[2], *bad;
	struct ibv_sge sg[2];
	memset(wr, 0, sizeof(wr));
	uint8_t *sb = p->sbuf + slot * MAXMSG;
	switch (kind) {
	case U_SEND:
	case U_SEND_IMM:
		fill(sb, lane, tid, seq, len);
		/* two SGEs when long enough: both halves must arrive in order */
		if (len > 2 * HDR && (seq & 1)) {
			sg[0] = (struct ibv_sge){ (uintptr_t)sb, len / 2, local_mr->lkey };
			sg[1] = (struct ibv_sge){ (uintptr_t)sb + len / 2, len - len / 2, local_mr->lkey };
			wr[0].num_sge = 2;
		} else {
			sg[0] = (struct ibv_sge){ (uintptr_t)sb, len, local_mr->lkey };
			wr[0].num_sge = 1;
		}
		wr[0].sg_list = sg;
		wr[0].opcode = kind == U_SEND ? IBV_WR_SEND : IBV_WR_SEND_WITH_IMM;
		wr[0].imm_data = htonl(seq);
		wr[0].send_flags = IBV_SEND_SIGNALED | (len <= MAX_INLINE ? IBV_SEND_INLINE : 0);
		break;
	case U_WRITE_READ:
		fill(sb, lane, tid, seq, len);
		memset(p->rbuf + slot * MAXMSG, 0, len);
		sg[0] = (struct ibv_sge){ (uintptr_t)sb, len, local_mr->lkey };
		sg[1] = (struct ibv_sge){ (uintptr_t)(p->rbuf + slot * MAXMSG), len, local_mr->lkey };
		/* the WRITE unsignaled: it completes with the READ behind it */
		wr[0].sg_list = &sg[0];
		wr[0].num_sge = 1;
		wr[0].opcode = IBV_WR_RDMA_WRITE;
		wr[0].wr.rdma.remote_addr = slot_remote(lane, tid, seq);
		wr[0].wr.rdma.rkey = peer.lane[lane].tgt_rkey;
		wr[0].next = &wr[1];
		wr[1].sg_list = &sg[1];
		wr[1].num_sge = 1;
		wr[1].opcode = IBV_WR_RDMA_READ;
		wr[1].send_flags = IBV_SEND_SIGNALED;
		wr[1].wr.rdma = wr[0].wr.rdma;
		wr[1].wr_id = wrid(lane, tid, kind, seq);
		break;
	case U_FAA:
		p->abuf[slot] = ~0ull;
		sg[0] = (struct ibv_sge){ (uintptr_t)&p->abuf[slot], 8, local_mr->lkey };
		wr[0].sg_list = sg;
		wr[0].num_sge = 1;
		wr[0].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		wr[0].send_flags = IBV_SEND_SIGNALED;
		wr[0].wr.atomic.remote_addr = peer.atom_addr;
		wr[0].wr.atomic.rkey = peer.atom_rkey;
		wr[0].wr.atomic.compare_add = 1;
		break;
	}
	wr[0].wr_id = wrid(lane, tid, kind, seq);
	atomic_fetch_add(&p->outstanding, 1);
	int r = ibv_post_send(lane_qp[lane], wr, &bad);
	if (r) {
		if (lane == LANE_VICTIM && atomic_load(&victim_in_err)) {
			/* not posted: accepted too (a QP in ERR may refuse) */
			atomic_fetch_sub(&p->outstanding, 1);
			return;
		}
		die("lane %u tid %u seq %u: ibv_post_send: %s", lane, tid, seq, strerror(r));
	}
	p->posted++;
}

static void *poster_thread(void *arg)
{
	struct poster *p = arg;
	for (uint32_t s = 0; s < opt.units; s++) {
		while (atomic_load(&p->outstanding) >= K)
			sched_yield();
		post_unit(p, s);
	}
	while (atomic_load(&p->outstanding))
		sched_yield();
	return NULL;
}

static unsigned expected_completions(unsigned lane_lo, unsigned lane_hi)
{
	unsigned n = 0;
	for (unsigned l = lane_lo; l <= lane_hi; l++)
		n += lane_posters(l) * opt.units;
	return n;
}

/* lanes 0..2: one send CQ, one thread */
static void *shared_poller(void *arg)
{
	(void)arg;
	unsigned want = expected_completions(0, 2), got = 0;
	struct ibv_wc wc[16];
	while (got < want) {
		int n = ibv_poll_cq(lane_scq[0], 16, wc);
		if (n < 0)
			die("ibv_poll_cq(shared): %d", n);
		if (n == 0)
			sched_yield();
		for (int i = 0; i < n; i++)
			client_wc(&wc[i]);
		got += (unsigned)n;
	}
	return NULL;
}

/* lane 3: ibv_get_cq_event, ack, re-arm, then poll it empty (ibv_get_cq_event(3)) */
static void channel_loop(struct ibv_cq *cq, unsigned want, void (*handle)(const struct ibv_wc *))
{
	unsigned got = 0, events = 0;
	if (ibv_req_notify_cq(cq, 0))
		die("ibv_req_notify_cq");
	for (;;) {
		struct ibv_wc wc[8];
		int n;
		while ((n = ibv_poll_cq(cq, 8, wc)) > 0) {
			for (int i = 0; i < n; i++)
				handle(&wc[i]);
			got += (unsigned)n;
		}
		if (n < 0)
			die("ibv_poll_cq(channel): %d", n);
		if (got >= want)
			break;
		struct ibv_cq *ev;
		void *evctx;
		if (ibv_get_cq_event(chan, &ev, &evctx))
			die("ibv_get_cq_event: %s", strerror(errno));
		if (ev != cq)
			die("ibv_get_cq_event: an event of another CQ");
		ibv_ack_cq_events(ev, 1);
		events++;
		if (ibv_req_notify_cq(cq, 0))
			die("ibv_req_notify_cq");
	}
	if (!events && want)
		fprintf(stderr, "rc_stress: note: the channel lane needed no event\n");
}

static void *client_channel_thread(void *arg)
{
	(void)arg;
	channel_loop(lane_scq[LANE_CHAN], expected_completions(LANE_CHAN, LANE_CHAN), client_wc);
	return NULL;
}

static void *victim_poller(void *arg)
{
	(void)arg;
	struct poster *p = &posters[LANE_VICTIM][0];
	struct ibv_wc wc[8];
	/* until the poster is finished and everything it posted completed */
	for (;;) {
		int n = ibv_poll_cq(lane_scq[LANE_VICTIM], 8, wc);
		if (n < 0)
			die("ibv_poll_cq(victim): %d", n);
		for (int i = 0; i < n; i++)
			client_wc(&wc[i]);
		if (n == 0) {
			if (atomic_load(&traffic_done) && !atomic_load(&p->outstanding))
				break;
			sched_yield();
		}
	}
	return NULL;
}

static void *victim_killer(void *arg)
{
	(void)arg;
	/* a quarter of the victim's units completed, then ERR while it posts */
	while (atomic_load(&victim_done) < opt.units / 4)
		sched_yield();
	atomic_store(&victim_in_err, true);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(lane_qp[LANE_VICTIM], &a, IBV_QP_STATE))
		die("ibv_modify_qp(ERR): %s", strerror(errno));
	return NULL;
}

static int run_client(void)
{
	int fd = ctl_client();
	xfer(fd, &peer, sizeof(peer), false);
	if (peer.units != opt.units)
		die("the server runs -n %u, this client -n %u", peer.units, opt.units);

	size_t per = 2 * (size_t)K * MAXMSG + K * 8;
	size_t total = per * NLANES * MAX_TID;
	uint8_t *mem = aligned_alloc(4096, (total + 4095) & ~(size_t)4095);
	if (!mem)
		die("malloc");
	memset(mem, 0, total);
	local_mr = ibv_reg_mr(pd, mem, total, IBV_ACCESS_LOCAL_WRITE);
	if (!local_mr)
		die("ibv_reg_mr: %s", strerror(errno));
	chan = ibv_create_comp_channel(ctx);
	if (!chan)
		die("ibv_create_comp_channel");
	struct ibv_cq *shared_s = make_cq(4 * K * MAX_TID * 2, NULL), *rcq = make_cq(16, NULL);
	struct info me = { .units = opt.units };
	memcpy(me.gid, my_gid.raw, 16);
	for (unsigned l = 0; l < NLANES; l++) {
		lane_scq[l] = l <= 2 ? shared_s : make_cq(4 * K, l == LANE_CHAN ? chan : NULL);
		lane_rcq[l] = rcq;
		lane_qp[l] = make_qp(lane_scq[l], rcq, NULL, 2 * K * MAX_TID + 8, 1);
		me.lane[l].qpn = lane_qp[l]->qp_num;
		me.lane[l].psn = 0x1000 * (l + 1);
		for (unsigned t = 0; t < lane_posters(l); t++) {
			struct poster *p = &posters[l][t];
			uint8_t *b = mem + per * (l * MAX_TID + t);
			p->lane = l;
			p->tid = t;
			p->sbuf = b;
			p->rbuf = b + (size_t)K * MAXMSG;
			p->abuf = (uint64_t *)(b + 2 * (size_t)K * MAXMSG);
		}
	}
	for (unsigned l = 0; l < NLANES; l++)
		connect_qp(lane_qp[l], me.lane[l].psn, peer.gid, peer.lane[l].qpn, peer.lane[l].psn);
	xfer(fd, &me, sizeof(me), true);
	char go;
	xfer(fd, &go, 1, false);        /* the server is at RTS */

	pthread_t th[16];
	int nth = 0;
	pthread_t churn, victim_p;
	if (pthread_create(&churn, NULL, churn_thread, NULL) ||
	    pthread_create(&th[nth++], NULL, shared_poller, NULL) ||
	    pthread_create(&th[nth++], NULL, client_channel_thread, NULL) ||
	    pthread_create(&victim_p, NULL, victim_poller, NULL) ||
	    pthread_create(&th[nth++], NULL, victim_killer, NULL))
		die("pthread_create");
	for (unsigned l = 0; l < NLANES; l++)
		for (unsigned t = 0; t < lane_posters(l); t++)
			if (pthread_create(&th[nth++], NULL, poster_thread, &posters[l][t]))
				die("pthread_create");
	for (int i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	atomic_store(&traffic_done, true);
	pthread_join(victim_p, NULL);
	pthread_join(churn, NULL);

	for (unsigned l = 0; l < NLANES; l++)
		for (unsigned t = 0; t < lane_posters(l); t++) {
			struct poster *p = &posters[l][t];
			if (l != LANE_VICTIM && (p->posted != opt.units || atomic_load(&p->completed) != opt.units))
				die("lane %u tid %u: %u posted, %u completed of %u", l, t, p->posted,
				    atomic_load(&p->completed), opt.units);
			if (l == LANE_VICTIM && atomic_load(&p->completed) != p->posted)
				die("victim: %u posted, %u completed", p->posted, atomic_load(&p->completed));
		}

	/* the counter is the number of FETCH_AND_ADDs, every value below it
	 * was returned once (a READ of it on lane 1) */
	unsigned nfaa = atomic_load(&faa_done);
	for (unsigned v = 0; v < nfaa; v++)
		if (!(atomic_load(&faa_bits[v / 32]) & (1u << (v % 32))))
			die("FETCH_AND_ADD never returned %u of %u", v, nfaa);
	uint64_t *cnt = &posters[1][0].abuf[0];
	*cnt = ~0ull;
	struct ibv_sge sg = { (uintptr_t)cnt, 8, local_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED, .wr.rdma = { peer.atom_addr, peer.atom_rkey } }, *bad;
	if (ibv_post_send(lane_qp[1], &wr, &bad))
		die("post READ of the counter");
	struct ibv_wc wc;
	poll1(shared_s, &wc);
	if (wc.status != IBV_WC_SUCCESS)
		die("READ of the counter: %s", ibv_wc_status_str(wc.status));
	if (*cnt != nfaa)
		die("the counter is %" PRIu64 " after %u FETCH_AND_ADDs", *cnt, nfaa);

	struct done_msg dm = { posters[LANE_VICTIM][0].posted, atomic_load(&victim_ok) };
	xfer(fd, &dm, sizeof(dm), true);
	char verdict;
	xfer(fd, &verdict, 1, false);
	if (verdict != 'K')
		die("the server failed");

	for (unsigned l = 0; l < NLANES; l++)
		if (ibv_destroy_qp(lane_qp[l]))
			die("ibv_destroy_qp");
	for (unsigned l = 3; l < NLANES; l++)
		if (ibv_destroy_cq(lane_scq[l]))
			die("ibv_destroy_cq");
	if (ibv_destroy_cq(shared_s) || ibv_destroy_cq(rcq) || ibv_destroy_comp_channel(chan) ||
	    ibv_dereg_mr(local_mr))
		die("destroying");
	free(mem);
	printf("rc_stress client: PASS: %u units per poster, %u FETCH_AND_ADDs, victim %u of %u "
	       "before ERR, %u churn rounds\n", opt.units, nfaa, dm.victim_ok, dm.victim_posted, churn_rounds);
	close(fd);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Server                                                              */

static uint8_t *srv_rbuf[NLANES];       /* RQ_DEPTH receive buffers each */
static struct ibv_mr *srv_mr;
static uint32_t srv_last_seq[NLANES][MAX_TID];
static bool srv_seen[NLANES][MAX_TID];
static atomic_uint srv_recvd[NLANES];
static atomic_uint srv_target_victim;   /* set once the client says how many succeeded */

static void srv_post_recv(unsigned lane, unsigned idx)
{
	struct ibv_sge sg = { (uintptr_t)(srv_rbuf[lane] + (size_t)idx * MAXMSG), MAXMSG, srv_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = ((uint64_t)lane << 32) | idx, .sg_list = &sg, .num_sge = 1 }, *bad;
	if (ibv_post_recv(lane_qp[lane], &wr, &bad))
		die("ibv_post_recv(lane %u)", lane);
}

static void server_wc(const struct ibv_wc *wc)
{
	unsigned lane = (unsigned)(wc->wr_id >> 32), idx = (unsigned)wc->wr_id;
	if (lane >= NLANES || idx >= RQ_DEPTH)
		die("receive completion with a wr_id no WR had");
	if (wc->status != IBV_WC_SUCCESS)
		die("lane %u: receive %s", lane, ibv_wc_status_str(wc->status));
	if (wc->opcode != IBV_WC_RECV)
		die("lane %u: receive opcode %d", lane, wc->opcode);
	const uint8_t *p = srv_rbuf[lane] + (size_t)idx * MAXMSG;
	uint32_t hdr[4];
	memcpy(hdr, p, HDR);
	unsigned tid = hdr[1] & 0xff, seq = hdr[2];
	if (hdr[0] != MAGIC || (hdr[1] >> 8) != lane || tid >= lane_posters(lane) || seq >= opt.units)
		die("lane %u: a message with a bad header (%08x %08x %u)", lane, hdr[0], hdr[1], seq);
	uint32_t len = unit_len(lane, tid, seq);
	int kind = unit_kind(lane, tid, seq);
	if (kind > U_SEND_IMM || wc->byte_len != len || hdr[3] != len)
		die("lane %u tid %u seq %u: %u bytes arrived, %u sent", lane, tid, seq, wc->byte_len, len);
	uint32_t bad = check(p, lane, tid, seq, len);
	if (bad)
		die("lane %u tid %u seq %u: byte %u of %u differs", lane, tid, seq, bad - 1, len);
	bool imm = wc->wc_flags & IBV_WC_WITH_IMM;
	if (imm != (kind == U_SEND_IMM) || (imm && ntohl(wc->imm_data) != seq))
		die("lane %u tid %u seq %u: immediate wrong", lane, tid, seq);
	/* RC keeps one poster's messages in order, two posters or not */
	if (srv_seen[lane][tid] && seq <= srv_last_seq[lane][tid])
		die("lane %u tid %u: seq %u after %u", lane, tid, seq, srv_last_seq[lane][tid]);
	srv_seen[lane][tid] = true;
	srv_last_seq[lane][tid] = seq;
	atomic_fetch_add(&srv_recvd[lane], 1);
	srv_post_recv(lane, idx);
}

static unsigned lane_sends(unsigned lane)
{
	unsigned n = 0;
	for (unsigned t = 0; t < lane_posters(lane); t++)
		n += sends_of(lane, t, opt.units);
	return n;
}

static void *server_shared_poller(void *arg)
{
	struct ibv_cq *cq = arg;
	unsigned want = lane_sends(0) + lane_sends(1) + lane_sends(2), got = 0;
	struct ibv_wc wc[16];
	while (got < want) {
		int n = ibv_poll_cq(cq, 16, wc);
		if (n < 0)
			die("ibv_poll_cq: %d", n);
		if (n == 0)
			sched_yield();
		for (int i = 0; i < n; i++)
			server_wc(&wc[i]);
		got += (unsigned)n;
	}
	return NULL;
}

static void *server_channel_thread(void *arg)
{
	channel_loop(arg, lane_sends(LANE_CHAN), server_wc);
	return NULL;
}

static void *server_victim_poller(void *arg)
{
	struct ibv_cq *cq = arg;
	struct ibv_wc wc[8];
	/* until as many as the client saw succeed arrived (UINT_MAX: not told yet) */
	while (atomic_load(&srv_recvd[LANE_VICTIM]) < atomic_load(&srv_target_victim)) {
		int n = ibv_poll_cq(cq, 8, wc);
		if (n < 0)
			die("ibv_poll_cq: %d", n);
		if (n == 0)
			sched_yield();
		for (int i = 0; i < n; i++)
			server_wc(&wc[i]);
	}
	return NULL;
}

static int run_server(void)
{
	size_t tgt_len = (size_t)MAX_TID * K * MAXMSG;
	size_t rlen = (size_t)RQ_DEPTH * MAXMSG;
	size_t total = NLANES * (rlen + tgt_len) + 4096;
	uint8_t *mem = aligned_alloc(4096, (total + 4095) & ~(size_t)4095);
	if (!mem)
		die("malloc");
	memset(mem, 0, total);
	srv_mr = ibv_reg_mr(pd, mem, total, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	if (!srv_mr)
		die("ibv_reg_mr: %s", strerror(errno));
	uint64_t *counter = (uint64_t *)(mem + NLANES * (rlen + tgt_len));
	chan = ibv_create_comp_channel(ctx);
	if (!chan)
		die("ibv_create_comp_channel");
	struct ibv_cq *scq = make_cq(16, NULL), *shared_r = make_cq(3 * RQ_DEPTH + 16, NULL);
	struct ibv_cq *rcq[NLANES];
	struct info me = { .units = opt.units, .atom_addr = (uintptr_t)counter, .atom_rkey = srv_mr->rkey };
	memcpy(me.gid, my_gid.raw, 16);
	for (unsigned l = 0; l < NLANES; l++) {
		rcq[l] = l <= 2 ? shared_r : make_cq(RQ_DEPTH + 16, l == LANE_CHAN ? chan : NULL);
		lane_qp[l] = make_qp(scq, rcq[l], NULL, 4, RQ_DEPTH);
		srv_rbuf[l] = mem + l * (rlen + tgt_len);
		me.lane[l].qpn = lane_qp[l]->qp_num;
		me.lane[l].psn = 0x100000 + 0x1000 * l;
		me.lane[l].tgt_addr = (uintptr_t)(srv_rbuf[l] + rlen);
		me.lane[l].tgt_rkey = srv_mr->rkey;
	}
	int fd = ctl_server();
	xfer(fd, &me, sizeof(me), true);
	xfer(fd, &peer, sizeof(peer), false);
	for (unsigned l = 0; l < NLANES; l++) {
		connect_qp(lane_qp[l], me.lane[l].psn, peer.gid, peer.lane[l].qpn, peer.lane[l].psn);
		for (unsigned i = 0; i < RQ_DEPTH; i++)    /* a RESET QP takes none (ibv_post_recv(3)) */
			srv_post_recv(l, i);
	}
	atomic_store(&srv_target_victim, UINT32_MAX);

	pthread_t th[3], churn;
	if (pthread_create(&churn, NULL, churn_thread, NULL) ||
	    pthread_create(&th[0], NULL, server_shared_poller, shared_r) ||
	    pthread_create(&th[1], NULL, server_channel_thread, rcq[LANE_CHAN]) ||
	    pthread_create(&th[2], NULL, server_victim_poller, rcq[LANE_VICTIM]))
		die("pthread_create");
	char go = 'G';
	xfer(fd, &go, 1, true);
	struct done_msg dm;
	xfer(fd, &dm, sizeof(dm), false);
	atomic_store(&srv_target_victim, dm.victim_ok);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	atomic_store(&traffic_done, true);
	pthread_join(churn, NULL);
	for (unsigned l = 0; l < LANE_VICTIM; l++)
		if (atomic_load(&srv_recvd[l]) != lane_sends(l))
			die("lane %u: %u SENDs arrived of %u", l, atomic_load(&srv_recvd[l]), lane_sends(l));
	unsigned rv = atomic_load(&srv_recvd[LANE_VICTIM]);
	if (rv < dm.victim_ok || rv > dm.victim_posted)
		die("victim: %u arrived; the client posted %u, %u succeeded", rv, dm.victim_posted, dm.victim_ok);
	char verdict = 'K';
	xfer(fd, &verdict, 1, true);
	/* the client destroys its QPs after this; ours go now */
	for (unsigned l = 0; l < NLANES; l++)
		if (ibv_destroy_qp(lane_qp[l]))
			die("ibv_destroy_qp");
	for (unsigned l = 3; l < NLANES; l++)
		if (ibv_destroy_cq(rcq[l]))
			die("ibv_destroy_cq");
	if (ibv_destroy_cq(shared_r) || ibv_destroy_cq(scq) || ibv_destroy_comp_channel(chan) ||
	    ibv_dereg_mr(srv_mr))
		die("destroying");
	uint64_t final_counter = *counter;
	free(mem);
	printf("rc_stress server: PASS: %u SENDs checked, counter %" PRIu64 ", %u churn rounds\n",
	       lane_sends(0) + lane_sends(1) + lane_sends(2) + lane_sends(3) + rv, final_counter, churn_rounds);
	close(fd);
	return 0;
}

/* ------------------------------------------------------------------ */

static unsigned num(const char *s, unsigned lo, unsigned hi)
{
	char *e;
	unsigned long v = strtoul(s, &e, 0);
	if (*e || v < lo || v > hi) {
		fprintf(stderr, "rc_stress: bad number %s (%u..%u)\n", s, lo, hi);
		exit(2);
	}
	return (unsigned)v;
}

int main(int argc, char **argv)
{
	int c;
	while ((c = getopt(argc, argv, "p:P:c:i:n:N:t:g:s:")) != -1) {
		switch (c) {
		case 'p': opt.port = (int)num(optarg, 0, 65535); break;
		case 'P': opt.port_file = optarg; break;
		case 'c': if (num(optarg, 1, 1000) != 1) { fprintf(stderr, "rc_stress: one client only\n"); return 2; } break;
		case 'i': case 's': break;     /* run_pair.sh's client index; no seed: all is fixed */
		case 'n': opt.units = num(optarg, 8, 65535); break;
		case 'N': opt.churn_min = num(optarg, 0, 1000000); break;
		case 't': opt.alarm_s = num(optarg, 1, 100000); break;
		case 'g': opt.gid_idx = (int)num(optarg, 0, 255); break;
		default:
			fprintf(stderr, "usage: rc_stress [-p port] [-P portfile] [-n units] [-N churn] [-t alarm_s] [host]\n");
			return 2;
		}
	}
	opt.host = optind < argc ? argv[optind] : NULL;
	is_server = !opt.host;
	signal(SIGALRM, on_alarm);
	alarm(opt.alarm_s);
	setvbuf(stdout, NULL, _IOLBF, 0);

	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no RDMA device");
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	ibv_free_device_list(list);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
	if (ibv_query_gid(ctx, 1, opt.gid_idx, &my_gid))
		die("ibv_query_gid");
	int rc = is_server ? run_server() : run_client();
	if (ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		die("closing the device");
	return rc;
}
