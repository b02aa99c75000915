/* tests/net/ud_flood.c IPV4 COUNT: post COUNT 1024-byte UD SENDs to IPV4
 * (QPN 1000, nobody need listen), wait for every completion, then print this
 * process's counters (`uroce stat PID`, the launcher given by UROCE_LAUNCHER).
 *
 * UD completes a send once it is on the wire, so the sends do not wait for
 * a peer; test_tx_full.sh makes the link hold them (a tbf qdisc) until the
 * shared transmit socket's send buffer is full.  A send must then not block
 * (src/net/udp.c, sys_sendmmsg): every completion comes at once, and the
 * refused datagrams show as tx_full. */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MSG 1024

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: ud_flood IPV4 COUNT\n");
		return 2;
	}
	int count = atoi(argv[2]);
	struct in_addr ip;
	if (inet_pton(AF_INET, argv[1], &ip) != 1 || count <= 0)
		return 2;
	struct ibv_device **devs = ibv_get_device_list(NULL);
	struct ibv_context *ctx = devs && devs[0] ? ibv_open_device(devs[0]) : NULL;
	if (!ctx) {
		fprintf(stderr, "no device\n");
		return 1;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	char *buf = calloc(1, MSG + 40);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, MSG + 40, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				       .cap = { .max_send_wr = 128, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = mr && cq ? ibv_create_qp(pd, &ia) : NULL;
	if (!qp) {
		fprintf(stderr, "setup failed\n");
		return 1;
	}
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return 1;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		return 1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return 1;
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .grh = { .hop_limit = 64 } };
	aa.grh.dgid.raw[10] = aa.grh.dgid.raw[11] = 0xff;
	memcpy(&aa.grh.dgid.raw[12], &ip, 4);
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	if (!ah) {
		fprintf(stderr, "create_ah failed\n");
		return 1;
	}
	int posted = 0, done = 0;
	while (done < count) {
		while (posted < count && posted - done < 128) {
			struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = MSG, .lkey = mr->lkey };
			struct ibv_send_wr wr = { .wr_id = (uint64_t)posted, .sg_list = &sge, .num_sge = 1,
						  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
					   *bad;
			wr.wr.ud.ah = ah;
			wr.wr.ud.remote_qpn = 1000;
			wr.wr.ud.remote_qkey = 0x11111111;
			if (ibv_post_send(qp, &wr, &bad)) {
				fprintf(stderr, "post_send failed at %d\n", posted);
				return 1;
			}
			posted++;
		}
		struct ibv_wc wc[32];
		int n = ibv_poll_cq(cq, 32, wc);
		if (n < 0)
			return 1;
		for (int i = 0; i < n; i++)
			if (wc[i].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "completion %llu: %s\n", (unsigned long long)wc[i].wr_id,
					ibv_wc_status_str(wc[i].status));
				return 1;
			}
		done += n;
	}
	printf("completed %d sends\n", done);
	fflush(stdout);
	const char *u = getenv("UROCE_LAUNCHER");
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s stat -a %d", u ? u : "uroce", (int)getpid());
	int rc = system(cmd);
	ibv_destroy_qp(qp);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return rc == 0 ? 0 : 1;
}
