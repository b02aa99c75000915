/* cm_cycles: N rdma_cm connect / SEND / disconnect / destroy cycles in one
 * process (a listener and a client of its own address, through the CM's
 * MADs on QP1 like any peer's), then checks that they left nothing behind
 * (issue #15 item 4): file descriptors, /dev/shm entries and heap as after
 * the first cycles, and, once the last timewait is over, every connection
 * the CM made freed (uroce stat: cm_conns_made == cm_conns_freed).
 *   uroce run -- cm_cycles ADDR [N]        (ADDR: the process's UROCE_ADDR) */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#define PORT 7300
#define MSG 64

static void die(const char *what)
{
	fprintf(stderr, "FAIL: %s: %s\n", what, strerror(errno));
	exit(1);
}

static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type t)
{
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		die("rdma_get_cm_event");
	if (e->event != t) {
		fprintf(stderr, "FAIL: got %s (status %d), expected %s\n", rdma_event_str(e->event), e->status,
			rdma_event_str(t));
		exit(1);
	}
	return e;
}

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	int n = 0;
	if (!d)
		return -1;
	/* another process's counters file (uroce.<pid>) is not ours to
	 * count: tests run beside this one, and killed ones leave theirs */
	char own[32];
	snprintf(own, sizeof(own), "uroce.%d", (int)getpid());
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.' && (strncmp(e->d_name, "uroce.", 6) || !strcmp(e->d_name, own));
	closedir(d);
	return n;
}

static long counter(const char *name)
{
	char cmd[128], line[512];
	long v = -1;
	snprintf(cmd, sizeof(cmd), "%s stat -a %d", getenv("UROCE_LAUNCHER") ? getenv("UROCE_LAUNCHER") : "uroce",
		 (int)getpid());
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		char n[64];
		long x;
		if (sscanf(line, " %63s %ld", n, &x) == 2 && !strcmp(n, name))
			v = x;
	}
	pclose(p);
	return v;
}

static void wait_wc(struct ibv_cq *cq, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	for (long spins = 0;; spins++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("ibv_poll_cq");
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS || wc.opcode != op) {
				fprintf(stderr, "FAIL: completion %s opcode %d\n", ibv_wc_status_str(wc.status), wc.opcode);
				exit(1);
			}
			return;
		}
		if (spins > 2000000000L) {
			fprintf(stderr, "FAIL: no completion\n");
			exit(1);
		}
	}
}

/* The device's transmit sockets open: UDP sockets bound to addr on one of
 * the pool's ports 0xC000..0xC03F (docs/architecture.md, "Addresses").  A
 * QP opens the pool socket of its two QPNs' hash when it first sends, so
 * how many are open by a given cycle depends on the QPNs drawn; the fds
 * besides them are what must not grow.  (The address is the test's own:
 * no other process binds it.) */
static int pool_sockets(struct in_addr addr)
{
	FILE *f = fopen("/proc/self/net/udp", "r");
	char line[512], want[16];
	int n = 0;
	if (!f)
		return -1;
	/* the kernel prints the address as the 32-bit word it stores */
	snprintf(want, sizeof(want), "%08X:C0", (unsigned)addr.s_addr);
	while (fgets(line, sizeof(line), f)) {
		char local[64];
		if (sscanf(line, " %*[0-9]: %63s", local) == 1 && !strncmp(local, want, 11) && strlen(local) == 13 &&
		    strtoul(local + 9, NULL, 16) <= 0xC03F)
			n++;
	}
	fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: cm_cycles ADDR [N]\n");
		return 2;
	}
	int n = argc > 2 ? atoi(argv[2]) : 1000;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PORT) };
	if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1)
		return 2;
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_cm_id *listen;
	if (!sch || !cch || rdma_create_id(sch, &listen, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listen, (struct sockaddr *)&a) || rdma_listen(listen, 16))
		die("listen");
	static char sbuf[MSG], rbuf[MSG];
	struct ibv_pd *pd = listen->pd;
	struct ibv_mr *smr = ibv_reg_mr(pd, sbuf, MSG, 0), *rmr = ibv_reg_mr(pd, rbuf, MSG, IBV_ACCESS_LOCAL_WRITE);
	if (!smr || !rmr)
		die("ibv_reg_mr");
	int fds0 = 0, shm0 = 0, fds_mid = 0;
	size_t heap10 = 0;
	for (int i = 0; i < n; i++) {
		struct rdma_cm_id *c, *s;
		struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1,
							.max_recv_sge = 1 },
					       .qp_type = IBV_QPT_RC, .sq_sig_all = 1 };
		if (rdma_create_id(cch, &c, NULL, RDMA_PS_TCP) || rdma_resolve_addr(c, NULL, (struct sockaddr *)&a, 2000))
			die("resolve_addr");
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
		if (rdma_resolve_route(c, 2000))
			die("resolve_route");
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
		if (rdma_create_qp(c, pd, &qa))
			die("rdma_create_qp (client)");
		struct rdma_conn_param p = { .private_data = &i, .private_data_len = sizeof(i), .responder_resources = 1,
					     .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7 };
		if (rdma_connect(c, &p))
			die("rdma_connect");
		struct rdma_cm_event *e = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
		s = e->id;
		if (memcmp(e->param.conn.private_data, &i, sizeof(i)) || e->param.conn.private_data_len != 56) {
			fprintf(stderr, "FAIL: cycle %d: the REQ's private data\n", i);
			return 1;
		}
		rdma_ack_cm_event(e);
		struct ibv_qp_init_attr sa = qa;
		if (rdma_create_qp(s, pd, &sa))
			die("rdma_create_qp (server)");
		struct ibv_sge rs = { (uintptr_t)rbuf, MSG, rmr->lkey }, ss = { (uintptr_t)sbuf, MSG, smr->lkey };
		struct ibv_recv_wr rw = { .sg_list = &rs, .num_sge = 1 }, *brw;
		if (ibv_post_recv(s->qp, &rw, &brw))
			die("ibv_post_recv");
		if (rdma_accept(s, NULL))
			die("rdma_accept");
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_ESTABLISHED));
		rdma_ack_cm_event(expect(sch, RDMA_CM_EVENT_ESTABLISHED));
		snprintf(sbuf, MSG, "cycle %d", i);
		struct ibv_send_wr sw = { .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND }, *bsw;
		if (ibv_post_send(c->qp, &sw, &bsw))
			die("ibv_post_send");
		wait_wc(c->send_cq, IBV_WC_SEND);
		wait_wc(s->recv_cq, IBV_WC_RECV);
		if (strcmp(rbuf, sbuf)) {
			fprintf(stderr, "FAIL: cycle %d: received \"%s\"\n", i, rbuf);
			return 1;
		}
		if (rdma_disconnect(c))
			die("rdma_disconnect (client)");
		rdma_ack_cm_event(expect(sch, RDMA_CM_EVENT_DISCONNECTED));
		if (rdma_disconnect(s))
			die("rdma_disconnect (server)");
		rdma_ack_cm_event(expect(cch, RDMA_CM_EVENT_DISCONNECTED));
		rdma_destroy_qp(c);
		rdma_destroy_qp(s);
		if (rdma_destroy_id(c) || rdma_destroy_id(s))
			die("rdma_destroy_id");
		if (i == 9) {
			sleep(3); /* their timewaits (2^(19-8) ms) over */
			fds0 = count_dir("/proc/self/fd") - pool_sockets(a.sin_addr);
			shm0 = count_dir("/dev/shm");
			heap10 = mallinfo2().uordblks;
		}
		if (i == n / 2)
			fds_mid = count_dir("/proc/self/fd") - pool_sockets(a.sin_addr);
	}
	sleep(3); /* every timewait over */
	int pool = pool_sockets(a.sin_addr);
	int fds = count_dir("/proc/self/fd") - pool, shm = count_dir("/dev/shm");
	size_t heap = mallinfo2().uordblks;
	printf("%d cycles, data checked; fds besides the %d transmit sockets %d after 10 cycles, %d after %d; /dev/shm "
	       "entries %d, %d; heap in use %zu, %zu\n",
	       n, pool, fds0, fds, n, shm0, shm, heap10, heap);
	int bad = 0;
	/* the transmit pool (at most 64 sockets, pool_sockets) aside, nothing
	 * may grow after the first cycles */
	if (n >= 100 && (pool < 0 || pool > 64 || fds != fds_mid || fds != fds0)) {
		fprintf(stderr, "FAIL: fds leaked (%d at the middle)\n", fds_mid);
		bad = 1;
	}
	if (n >= 10 && shm != shm0) {
		fprintf(stderr, "FAIL: /dev/shm entries left\n");
		bad = 1;
	}
	if (n >= 10 && heap > heap10 + 64u * 1024) {
		fprintf(stderr, "FAIL: heap grew by %zu bytes\n", heap - heap10);
		bad = 1;
	}
	long made = counter("cm_conns_made"), freed = counter("cm_conns_freed");
	printf("connections made %ld, freed %ld\n", made, freed);
	if (made < 2L * n || made != freed) {
		fprintf(stderr, "FAIL: connection records left\n");
		bad = 1;
	}
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	rdma_destroy_id(listen);
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	if (!bad)
		printf("PASS\n");
	return bad;
}
