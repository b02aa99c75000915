/* Many connected RC QPs in one process, past the fd limit (issue #13 item 3).
 *
 * Two processes (this one and a fork, each its own uroce device and
 * address) each create N RC QPs (default 10,000), connect QP i of one to
 * QP i of the other, and send one 64-byte SEND on every QP both ways; each
 * receive's bytes are checked against the sender's side and QP index.  The
 * ctest runs it under `ulimit -n 1024` (soft and hard), by UDP
 * (UROCE_SHM=0) and with the same-host rings.  Before the shared transmit
 * sockets of net/udp.c each QP opened its own socket at RTR, and this
 * failed with EMFILE near QP 1,000.  It also reports the fds and the
 * resident memory per QP, and fails when a QP costs more than -m KiB.
 *
 * A plain libibverbs program: nothing in it is uroce's. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MSG 64

static int nqp = 10000;
static long max_kib_per_qp = 64;
static const char *side;
static unsigned timeout_s;
/* -r: ibv_open_device leaves the soft RLIMIT_NOFILE as it is (a raised one
 * would be inherited by every program the application runs: util/fds.h);
 * then the application uses up its fd table, and the QPs' setup must raise
 * the limit to the hard one on its own EMFILE and go on */
static int check_rlimit;

#define DIE(...) do { fprintf(stderr, "many_qps %s: ", side); fprintf(stderr, __VA_ARGS__); \
		      fputc('\n', stderr); exit(1); } while (0)

static void xfer(int fd, void *buf, size_t len, int out)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t r = out ? write(fd, p, len) : read(fd, p, len);
		if (r <= 0)
			DIE("exchange with the peer process: %s", r < 0 ? strerror(errno) : "closed");
		p += r;
		len -= (size_t)r;
	}
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3;  /* ., .. and the DIR's own */
}

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

/* What QP i of `who` (0: parent, 1: child) sends. */
static uint8_t pattern(int who, int i, int k)
{
	return (uint8_t)(who * 131 + i * 7 + k * 13 + (i >> 8));
}

static int run(int sock, int who)
{
	int ndev;
	struct ibv_device **list = ibv_get_device_list(&ndev);
	if (!list || ndev < 1)
		DIE("no RDMA device");
	struct rlimit before, after;
	getrlimit(RLIMIT_NOFILE, &before);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		DIE("ibv_open_device: %s", strerror(errno));
	getrlimit(RLIMIT_NOFILE, &after);
	if (check_rlimit && (before.rlim_cur == before.rlim_max || after.rlim_cur != before.rlim_cur))
		DIE("RLIMIT_NOFILE soft %llu of hard %llu before ibv_open_device, soft %llu after: expected unchanged",
		    (unsigned long long)before.rlim_cur, (unsigned long long)before.rlim_max,
		    (unsigned long long)after.rlim_cur);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *scq = ibv_create_cq(ctx, nqp + 16, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, nqp + 16, NULL, NULL, 0);
	uint8_t *sbuf = calloc((size_t)nqp, MSG), *rbuf = calloc((size_t)nqp, MSG);
	if (!pd || !scq || !rcq || !sbuf || !rbuf)
		DIE("PD/CQs: %s", strerror(errno));
	struct ibv_mr *smr = ibv_reg_mr(pd, sbuf, (size_t)nqp * MSG, 0);
	struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, (size_t)nqp * MSG, IBV_ACCESS_LOCAL_WRITE);
	if (!smr || !rmr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	union ibv_gid gid, pgid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		DIE("ibv_query_gid");

	struct ibv_qp **qp = calloc((size_t)nqp, sizeof(*qp));
	uint32_t *qpn = calloc((size_t)nqp, sizeof(*qpn)), *pqpn = calloc((size_t)nqp, sizeof(*pqpn));
	int fds0 = count_fds();
	long rss0 = rss_kib();
	if (check_rlimit) {
		/* the application's own fds fill the table (kept to the end) */
		int filled = 0;
		while (dup(sock) >= 0)
			filled++;
		if (errno != EMFILE)
			DIE("dup: %s", strerror(errno));
		printf("many_qps %s: RLIMIT_NOFILE soft %llu kept by ibv_open_device; %d fds opened until EMFILE\n",
		       side, (unsigned long long)after.rlim_cur, filled);
	}
	for (int i = 0; i < nqp; i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 },
		};
		qp[i] = ibv_create_qp(pd, &ia);
		if (!qp[i])
			DIE("ibv_create_qp %d: %s", i, strerror(errno));
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
					 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
		if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			DIE("ibv_modify_qp INIT %d: %s", i, strerror(errno));
		qpn[i] = qp[i]->qp_num;
	}
	xfer(sock, &gid, sizeof(gid), 1);
	xfer(sock, qpn, (size_t)nqp * sizeof(*qpn), 1);
	xfer(sock, &pgid, sizeof(pgid), 0);
	xfer(sock, pqpn, (size_t)nqp * sizeof(*pqpn), 0);
	for (int i = 0; i < nqp; i++) {
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = pqpn[i],
			.rq_psn = (uint32_t)i * 3, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
			.ah_attr = { .is_global = 1, .port_num = 1,
				     .grh = { .dgid = pgid, .sgid_index = 0, .hop_limit = 64 } },
		};
		if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
			DIE("ibv_modify_qp RTR %d of %d: %s", i, nqp, strerror(errno));
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = (uint32_t)i * 3;
		/* 1.07 s, 7 retries: a peer stalled for up to ~8 s (descheduled on a
		 * loaded 2-core CI machine under ASan) is waited out; at 14 (67 ms,
		 * ~0.5 s in all) a SIGSTOP of the child for 0.7 s failed the parent
		 * with "transport retry counter exceeded", as CI once did. */
		a.timeout = 18;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		if (ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
			DIE("ibv_modify_qp RTS %d: %s", i, strerror(errno));
		struct ibv_sge sge = { (uintptr_t)(rbuf + (size_t)i * MSG), MSG, rmr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(qp[i], &wr, &bad))
			DIE("ibv_post_recv %d", i);
		for (int k = 0; k < MSG; k++)
			sbuf[(size_t)i * MSG + k] = pattern(who, i, k);
	}
	int fds1 = count_fds();
	long rss1 = rss_kib();
	char c = 1;
	xfer(sock, &c, 1, 1);  /* every receive is posted on both sides */
	xfer(sock, &c, 1, 0);

	int sent = 0, sdone = 0, rdone = 0;
	struct ibv_wc wc[64];
	while (sdone < nqp || rdone < nqp) {
		for (int b = 0; b < 64 && sent < nqp; b++, sent++) {
			struct ibv_sge sge = { (uintptr_t)(sbuf + (size_t)sent * MSG), MSG, smr->lkey };
			struct ibv_send_wr wr = { .wr_id = (uint64_t)sent, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
			if (ibv_post_send(qp[sent], &wr, &bad))
				DIE("ibv_post_send %d: %s", sent, strerror(errno));
		}
		int n = ibv_poll_cq(scq, 64, wc);
		for (int k = 0; k < n; k++)
			if (wc[k].status != IBV_WC_SUCCESS)
				DIE("send %llu: %s", (unsigned long long)wc[k].wr_id, ibv_wc_status_str(wc[k].status));
		sdone += n > 0 ? n : 0;
		n = ibv_poll_cq(rcq, 64, wc);
		for (int k = 0; k < n; k++) {
			int i = (int)wc[k].wr_id;
			if (wc[k].status != IBV_WC_SUCCESS || wc[k].byte_len != MSG || wc[k].qp_num != qpn[i])
				DIE("receive on QP %d: %s, %u bytes", i, ibv_wc_status_str(wc[k].status), wc[k].byte_len);
			for (int j = 0; j < MSG; j++)
				if (rbuf[(size_t)i * MSG + j] != pattern(!who, i, j))
					DIE("QP %d: byte %d is %u, not %u", i, j, rbuf[(size_t)i * MSG + j],
					    pattern(!who, i, j));
		}
		rdone += n > 0 ? n : 0;
	}
	long per_qp = (rss1 - rss0) * 1024 / nqp;
	printf("many_qps %s: %d RC QPs connected, one SEND each way on every one, data exact; "
	       "fds %d before the QPs, %d with them; resident memory %ld KiB before, %ld KiB with them "
	       "(%ld bytes per QP)\n", side, nqp, fds0, fds1, rss0, rss1, per_qp);
	if (per_qp > max_kib_per_qp * 1024)
		DIE("a QP costs %ld bytes, more than %ld KiB", per_qp, max_kib_per_qp);
	if (check_rlimit) {
		struct rlimit now;
		getrlimit(RLIMIT_NOFILE, &now);
		if (now.rlim_cur != now.rlim_max)
			DIE("RLIMIT_NOFILE soft %llu of hard %llu: not raised when the fds ran out",
			    (unsigned long long)now.rlim_cur, (unsigned long long)now.rlim_max);
		printf("many_qps %s: RLIMIT_NOFILE soft limit raised to the hard %llu when the fds ran out\n", side,
		       (unsigned long long)now.rlim_cur);
	}
	xfer(sock, &c, 1, 1);  /* neither side destroys a QP the other still sends to */
	xfer(sock, &c, 1, 0);
	for (int i = 0; i < nqp; i++)
		if (ibv_destroy_qp(qp[i]))
			DIE("ibv_destroy_qp %d", i);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}

int main(int argc, char **argv)
{
	int opt, sv[2];

	while ((opt = getopt(argc, argv, "n:m:t:r")) != -1) {
		if (opt == 'n')
			nqp = atoi(optarg);
		else if (opt == 'm')
			max_kib_per_qp = atol(optarg);
		else if (opt == 'r')
			check_rlimit = 1;
		else if (opt == 't')
			timeout_s = (unsigned)atoi(optarg);
		else {
			fprintf(stderr, "usage: many_qps [-n QPs] [-m max KiB per QP] [-t seconds] [-r]\n");
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return perror("socketpair"), 1;
	/* before any verbs call: each process opens its own device */
	pid_t pid = fork();
	if (pid < 0)
		return perror("fork"), 1;
	alarm(timeout_s);  /* in both: a hang fails well before ctest's TIMEOUT */
	if (pid == 0) {
		close(sv[0]);
		side = "child";
		return run(sv[1], 1);
	}
	close(sv[1]);
	side = "parent";
	int rc = run(sv[0], 0), st;
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "many_qps: the child failed\n");
		return 1;
	}
	return rc;
}
