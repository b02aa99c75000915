/*
 * mcast_group: UD multicast group membership in one process, through the
 * public verbs only (ibv_attach_mcast / ibv_detach_mcast, an AH to the
 * group, QPN 0xFFFFFF).  A sender QP S and two receiver QPs A and B of one
 * process; the group's datagrams come back through the host's IP multicast
 * loop.  Steps, each checked by data and by count:
 *   1. A and B attached: each receives every datagram, S (not attached) none
 *   2. B detached: A receives every datagram, B none
 *   3. A detached too (the group left, its socket closed) and attached
 *      again: A receives every datagram once more
 *   4. B attached again and destroyed while the datagrams come: A receives
 *      every one, nothing breaks
 * "None" needs no waiting: a datagram is delivered to every QP of the group
 * in one pass of the receive path (transport/recv.c), so once A has all of
 * a step's datagrams, another attached QP has them too.
 *   mcast_group GROUP        (an IPv4 multicast address; run under uroce)
 * Prints one line per step and PASS, or FAIL with the reason; exit 0 / 1.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QKEY 0x11111111u
#define N 64
#define SIZE 256
#define GRH 40

struct rq {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	uint8_t *buf;   /* N slots of GRH + SIZE */
	struct ibv_mr *mr;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid group;

static void die(const char *what)
{
	printf("FAIL: %s\n", what);
	exit(1);
}

static struct ibv_qp *ud_qp(struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = N, .max_recv_wr = N, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("RTS");
	return qp;
}

static void rq_open(struct rq *r)
{
	r->cq = ibv_create_cq(ctx, 2 * N, NULL, NULL, 0);
	r->buf = calloc(N, GRH + SIZE);
	r->mr = r->buf ? ibv_reg_mr(pd, r->buf, N * (GRH + SIZE), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!r->cq || !r->mr)
		die("receiver setup");
	r->qp = ud_qp(r->cq, r->cq);
}

static void post_recvs(struct rq *r)
{
	memset(r->buf, 0, N * (GRH + SIZE));
	for (int i = 0; i < N; i++) {
		struct ibv_sge sge = { (uintptr_t)(r->buf + i * (GRH + SIZE)), GRH + SIZE, r->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(r->qp, &wr, &bad))
			die("ibv_post_recv");
	}
}

/* Every datagram of step `step` once, in any order, each its own bytes;
 * 10 s without progress is a failure, not a timing check. */
static void expect_all(struct rq *r, int step, const char *who)
{
	int got = 0;
	uint8_t seen[N] = { 0 };
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (got < N) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(r->cq, 1, &wc);
		if (n < 0)
			die("ibv_poll_cq");
		if (n == 0) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 10) {
				printf("FAIL: step %d: %s received %d of %d\n", step, who, got, N);
				exit(1);
			}
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &t0);
		/* sl: the L3 header type of a RoCE UD receive, 2 for IPv4 (src/transport/ud.c) */
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.byte_len != GRH + SIZE ||
		    !(wc.wc_flags & IBV_WC_GRH) || wc.src_qp == 0 || wc.sl != 2) {
			printf("FAIL: step %d: %s completion status %d opcode %d len %u sl %u\n", step, who, wc.status,
			       wc.opcode, wc.byte_len, wc.sl);
			exit(1);
		}
		const uint8_t *p = r->buf + wc.wr_id * (GRH + SIZE) + GRH;
		int seq = p[0];
		if (p[1] != step || seq >= N || seen[seq]) {
			printf("FAIL: step %d: %s got datagram %d of step %d twice or out of range\n", step, who, seq, p[1]);
			exit(1);
		}
		for (int k = 2; k < SIZE; k++)
			if (p[k] != (uint8_t)(seq * 7 + k + step)) {
				printf("FAIL: step %d: %s datagram %d byte %d wrong\n", step, who, seq, k);
				exit(1);
			}
		seen[seq] = 1;
		got++;
	}
}

static int count_recvs(struct rq *r)
{
	struct ibv_wc wc[N];
	int n = ibv_poll_cq(r->cq, N, wc);
	return n < 0 ? 0 : n;
}

static void send_all(struct ibv_qp *s, struct ibv_cq *scq, struct ibv_ah *ah, uint8_t *buf, struct ibv_mr *mr,
		     int step)
{
	for (int i = 0; i < N; i++) {
		uint8_t *p = buf + i * SIZE;
		p[0] = (uint8_t)i;
		p[1] = (uint8_t)step;
		for (int k = 2; k < SIZE; k++)
			p[k] = (uint8_t)(i * 7 + k + step);
		struct ibv_sge sge = { (uintptr_t)p, SIZE, mr->lkey };
		struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = 0xFFFFFF;
		wr.wr.ud.remote_qkey = QKEY;
		if (ibv_post_send(s, &wr, &bad))
			die("ibv_post_send");
	}
	for (int done = 0; done < N;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(scq, 1, &wc);
		if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS))
			die("send completion");
		done += n;
	}
}

int main(int argc, char **argv)
{
	struct in_addr g;
	int ndev;
	if (argc != 2 || inet_pton(AF_INET, argv[1], &g) != 1) {
		fprintf(stderr, "usage: mcast_group IPV4_GROUP\n");
		return 2;
	}
	memset(&group, 0, sizeof(group));
	group.raw[10] = group.raw[11] = 0xff;
	memcpy(group.raw + 12, &g, 4);
	struct ibv_device **list = ibv_get_device_list(&ndev);
	if (!list || !ndev || !(ctx = ibv_open_device(list[0])) || !(pd = ibv_alloc_pd(ctx)))
		die("device");
	struct rq a, b;
	rq_open(&a);
	rq_open(&b);
	struct ibv_cq *scq = ibv_create_cq(ctx, 2 * N, NULL, NULL, 0);
	if (!scq)
		die("ibv_create_cq");
	/* the sender's own receive CQ apart: it must stay empty */
	struct rq s = { .cq = ibv_create_cq(ctx, 2 * N, NULL, NULL, 0) };
	if (!s.cq)
		die("ibv_create_cq");
	s.qp = ud_qp(scq, s.cq);
	s.buf = calloc(N, GRH + SIZE);
	s.mr = s.buf ? ibv_reg_mr(pd, s.buf, N * (GRH + SIZE), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!s.mr)
		die("sender setup");
	post_recvs(&s);
	uint8_t *sbuf = calloc(N, SIZE);
	struct ibv_mr *smr = sbuf ? ibv_reg_mr(pd, sbuf, N * SIZE, 0) : NULL;
	struct ibv_ah_attr aha = { .is_global = 1, .port_num = 1,
				   .grh = { .dgid = group, .sgid_index = 0, .hop_limit = 64 } };
	struct ibv_ah *ah = smr ? ibv_create_ah(pd, &aha) : NULL;
	if (!ah)
		die("ibv_create_ah to the group");

	/* 1 */
	post_recvs(&a);
	post_recvs(&b);
	if (ibv_attach_mcast(a.qp, &group, 0) || ibv_attach_mcast(b.qp, &group, 0))
		die("ibv_attach_mcast");
	send_all(s.qp, scq, ah, sbuf, smr, 1);
	expect_all(&a, 1, "A");
	expect_all(&b, 1, "B");
	if (count_recvs(&s))
		die("step 1: the sender, not attached, received its own datagrams");
	printf("step 1: A and B attached: %d datagrams each, the sender none\n", N);

	/* 2 */
	post_recvs(&a);
	post_recvs(&b);
	if (ibv_detach_mcast(b.qp, &group, 0))
		die("ibv_detach_mcast B");
	send_all(s.qp, scq, ah, sbuf, smr, 2);
	expect_all(&a, 2, "A");
	int nb = count_recvs(&b);
	if (nb) {
		printf("FAIL: step 2: B, detached, received %d datagrams\n", nb);
		return 1;
	}
	printf("step 2: B detached: A %d datagrams, B none\n", N);

	/* 3 */
	if (ibv_detach_mcast(a.qp, &group, 0) || ibv_attach_mcast(a.qp, &group, 0))
		die("detach and attach A again");
	post_recvs(&a);
	send_all(s.qp, scq, ah, sbuf, smr, 3);
	expect_all(&a, 3, "A");
	printf("step 3: the group left and joined again: A %d datagrams\n", N);

	/* 4 */
	post_recvs(&a);
	if (ibv_attach_mcast(b.qp, &group, 0))
		die("attach B again");
	send_all(s.qp, scq, ah, sbuf, smr, 4);
	if (ibv_destroy_qp(b.qp))
		die("destroy B while attached");
	expect_all(&a, 4, "A");
	if (ibv_detach_mcast(a.qp, &group, 0))
		die("detach A at the end");
	printf("step 4: B destroyed while attached and datagrams came: A %d datagrams\n", N);

	ibv_destroy_ah(ah);
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(s.qp);
	printf("PASS\n");
	return 0;
}
