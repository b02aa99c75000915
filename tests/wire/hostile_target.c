/*
 * hostile_target: a plain libibverbs program that holds RC QPs in RTS,
 * connected to a peer that does not exist as a verbs process: the
 * hostile-packet test (hostile_packets.py) plays that peer with raw UDP
 * datagrams.  Standard verbs API only.
 *
 *   hostile_target PEER_IPV4 NQP PEER_QPN_BASE PSN0 PSN
 *
 * QP i (0 <= i < NQP) is connected to PEER_IPV4, remote QPN PEER_QPN_BASE+i;
 * QP 0 uses PSN0 (for both rq_psn and sq_psn, so the test can cross the
 * 24-bit PSN wrap), the others PSN.  One more RC QP is left in INIT and one
 * UD QP (Q_Key 0x11111111) is brought to RTS.
 *
 * Memory: one 4096-byte RDMA MR (remote write/read/atomic) sits between two
 * unregistered guard pages filled with 0xA5; receive buffers (RECV_LEN bytes,
 * RQ_DEPTH per QP) live in a second MR, also followed by a guard page.
 *
 * stdout, first line:
 *   READY gid=A.B.C.D pid=N mr_va=0x.. mr_rkey=0x.. mr_len=4096 recv_len=N
 *         qpns=0x..,0x.. init_qpn=0x.. ud_qpn=0x..
 * then commands on stdin, one per line, each answered and ended by "END":
 *   poll            WC qp=0x.. wr_id=N status=N opcode=N len=N flags=N imm=0x.. src_qp=0x..
 *                      data=HEX(first <=64 bytes of the receive buffer)
 *                   (successful receives are reposted)
 *   mem             MEM guard=ok|bad@OFF data=HEX(4096 B)
 *   state           STATE qp=0x.. state=N  (every QP)
 *   send I LEN      post a signaled SEND of LEN bytes (0x5A..) on QP I
 *   quit
 * The program exits by itself after 600 s.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096u
#define MR_LEN 4096u
#define RQ_DEPTH 16u
#define RECV_LEN 2048u
#define SEND_MAX 4096u
#define MAX_QP 64
#define UD_QKEY 0x11111111u

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qps[MAX_QP], *init_qp, *ud_qp;
static int nqp;
static uint8_t *rdma_area, *recv_area, *send_buf;
static struct ibv_mr *rdma_mr, *recv_mr, *send_mr;
static size_t recv_area_len;

static void die(const char *what)
{
	printf("ERROR %s: %s\n", what, strerror(errno));
	fflush(stdout);
	exit(1);
}

static uint8_t *recv_slot(int q, unsigned k)
{
	return recv_area + ((size_t)q * RQ_DEPTH + k) * RECV_LEN;
}

static void post_recv(int q, unsigned k)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)recv_slot(q, k), .length = RECV_LEN, .lkey = recv_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)q << 32 | k, .sg_list = &sge, .num_sge = 1 }, *bad;

	memset(recv_slot(q, k), 0, RECV_LEN);
	if (ibv_post_recv(q < nqp ? qps[q] : ud_qp, &wr, &bad))
		die("ibv_post_recv");
}

static void to_rts(struct ibv_qp *qp, uint32_t rqpn, uint32_t psn, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			    IBV_ACCESS_REMOTE_ATOMIC;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("ibv_modify_qp(INIT)");
	if (!dgid)
		return;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = rqpn;
	a.rq_psn = psn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("ibv_modify_qp(RTR)");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 20; /* 4.3 s: no retransmission while the test talks */
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = 4;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("ibv_modify_qp(RTS)");
}

static struct ibv_qp *create_qp(enum ibv_qp_type t)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = t,
		.cap = { .max_send_wr = 16, .max_recv_wr = RQ_DEPTH, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		die("ibv_create_qp");
	return qp;
}

static void hex(const uint8_t *p, size_t n)
{
	static const char d[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++)
		putchar(d[p[i] >> 4]), putchar(d[p[i] & 15]);
}

static void cmd_poll(void)
{
	struct ibv_wc wc[32];
	int n;

	while ((n = ibv_poll_cq(cq, 32, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			int q = (int)(wc[i].wr_id >> 32);
			unsigned k = (unsigned)(wc[i].wr_id & 0xFFFFFFFF);
			printf("WC qp=0x%x wr_id=%llu status=%d opcode=%d len=%u flags=%u imm=0x%08x src_qp=0x%x data=",
			       wc[i].qp_num, (unsigned long long)wc[i].wr_id, wc[i].status, wc[i].opcode,
			       wc[i].byte_len, wc[i].wc_flags, ntohl(wc[i].imm_data), wc[i].src_qp);
			bool is_recv = wc[i].opcode & IBV_WC_RECV;
			if (wc[i].status == IBV_WC_SUCCESS && is_recv && q <= nqp && k < RQ_DEPTH) {
				hex(recv_slot(q, k), wc[i].byte_len < 64 ? wc[i].byte_len : 64);
				post_recv(q, k);
			}
			putchar('\n');
		}
	}
	if (n < 0)
		printf("ERROR ibv_poll_cq %d\n", n);
}

static void cmd_mem(void)
{
	long bad = -1;

	for (size_t i = 0; i < PAGE && bad < 0; i++)
		if (rdma_area[i] != 0xA5)
			bad = (long)i;
	for (size_t i = 0; i < PAGE && bad < 0; i++)
		if (rdma_area[2 * PAGE + i] != 0xA5)
			bad = (long)(2 * PAGE + i);
	for (size_t i = 0; i < PAGE && bad < 0; i++)
		if (recv_area[recv_area_len + i] != 0xA5)
			bad = (long)(recv_area_len + i) + 0x1000000;
	if (bad < 0)
		printf("MEM guard=ok data=");
	else
		printf("MEM guard=bad@%ld data=", bad);
	hex(rdma_area + PAGE, MR_LEN);
	putchar('\n');
}

static void cmd_state(void)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	for (int i = 0; i < nqp; i++) {
		if (ibv_query_qp(qps[i], &a, IBV_QP_STATE, &ia))
			printf("STATE qp=0x%x state=-1\n", qps[i]->qp_num);
		else
			printf("STATE qp=0x%x state=%d\n", qps[i]->qp_num, a.qp_state);
	}
}

static void cmd_send(int i, unsigned len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)send_buf, .length = len, .lkey = send_mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 0xFFFF0000u + (unsigned)i, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
	}, *bad;

	if (i < 0 || i >= nqp || len > SEND_MAX) {
		printf("ERROR bad send arguments\n");
		return;
	}
	int rc = ibv_post_send(qps[i], &wr, &bad);
	printf("SENT rc=%d\n", rc);
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: %s PEER_IPV4 NQP PEER_QPN_BASE PSN0 PSN\n", argv[0]);
		return 2;
	}
	union ibv_gid peer = { .raw = { [10] = 0xff, [11] = 0xff } };
	if (inet_pton(AF_INET, argv[1], peer.raw + 12) != 1) {
		fprintf(stderr, "bad address %s\n", argv[1]);
		return 2;
	}
	nqp = atoi(argv[2]);
	if (nqp < 1 || nqp > MAX_QP)
		return 2;
	uint32_t qbase = (uint32_t)strtoul(argv[3], NULL, 0);
	uint32_t psn0 = (uint32_t)strtoul(argv[4], NULL, 0) & 0xFFFFFF;
	uint32_t psn = (uint32_t)strtoul(argv[5], NULL, 0) & 0xFFFFFF;
	alarm(600);
	setvbuf(stdout, NULL, _IOLBF, 0);

	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no RDMA device");
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		die("ibv_query_gid");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
	if (!pd || !cq)
		die("pd/cq");

	rdma_area = mmap(NULL, 3 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	recv_area_len = (size_t)(nqp + 1) * RQ_DEPTH * RECV_LEN;
	recv_area = mmap(NULL, recv_area_len + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	send_buf = mmap(NULL, SEND_MAX, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (rdma_area == MAP_FAILED || recv_area == MAP_FAILED || send_buf == MAP_FAILED)
		die("mmap");
	memset(rdma_area, 0xA5, 3 * PAGE);
	for (unsigned i = 0; i < MR_LEN; i++)
		rdma_area[PAGE + i] = (uint8_t)(i * 7 + 3);
	memset(recv_area + recv_area_len, 0xA5, PAGE);
	memset(send_buf, 0x5A, SEND_MAX);
	rdma_mr = ibv_reg_mr(pd, rdma_area + PAGE, MR_LEN,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			     IBV_ACCESS_REMOTE_ATOMIC);
	recv_mr = ibv_reg_mr(pd, recv_area, recv_area_len, IBV_ACCESS_LOCAL_WRITE);
	send_mr = ibv_reg_mr(pd, send_buf, SEND_MAX, 0);
	if (!rdma_mr || !recv_mr || !send_mr)
		die("ibv_reg_mr");

	for (int i = 0; i < nqp; i++) {
		qps[i] = create_qp(IBV_QPT_RC);
		to_rts(qps[i], qbase + (uint32_t)i, i == 0 ? psn0 : psn, &peer);
		for (unsigned k = 0; k < RQ_DEPTH; k++)
			post_recv(i, k);
	}
	init_qp = create_qp(IBV_QPT_RC);
	to_rts(init_qp, 0, 0, NULL);

	ud_qp = create_qp(IBV_QPT_UD);
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = UD_QKEY;
	if (ibv_modify_qp(ud_qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("ibv_modify_qp(UD INIT)");
	for (unsigned k = 0; k < RQ_DEPTH; k++)
		post_recv(nqp, k);
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(ud_qp, &a, IBV_QP_STATE))
		die("ibv_modify_qp(UD RTR)");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(ud_qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("ibv_modify_qp(UD RTS)");

	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, gid.raw + 12, ip, sizeof(ip));
	printf("READY gid=%s pid=%d mr_va=0x%llx mr_rkey=0x%x mr_len=%u recv_len=%u qpns=", ip, (int)getpid(),
	       (unsigned long long)(uintptr_t)(rdma_area + PAGE), rdma_mr->rkey, MR_LEN, RECV_LEN);
	for (int i = 0; i < nqp; i++)
		printf("%s0x%x", i ? "," : "", qps[i]->qp_num);
	printf(" init_qpn=0x%x ud_qpn=0x%x\n", init_qp->qp_num, ud_qp->qp_num);

	char line[256];
	while (fgets(line, sizeof(line), stdin)) {
		int i;
		unsigned len;
		if (!strncmp(line, "poll", 4))
			cmd_poll();
		else if (!strncmp(line, "mem", 3))
			cmd_mem();
		else if (!strncmp(line, "state", 5))
			cmd_state();
		else if (sscanf(line, "send %d %u", &i, &len) == 2)
			cmd_send(i, len);
		else if (!strncmp(line, "quit", 4))
			break;
		else
			printf("ERROR unknown command\n");
		printf("END\n");
	}
	return 0;
}
