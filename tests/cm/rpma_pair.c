/* rpma_pair: a small librpma server and client of ours (issue #15: Debian's
 * librpma-dev ships no examples), run unmodified over uroce by cm_pair.sh.
 *   rpma_pair server ADDR [PORT]   serve one connection, then exit
 *   rpma_pair client ADDR [PORT]   ADDR: the server's
 * The server registers BUF_SIZE bytes holding pattern A and hands its MR
 * descriptor to the client in the connection's private data (librpma's
 * usual way).  The client
 *   1. READs the whole buffer and checks pattern A byte by byte;
 *   2. WRITEs pattern B over it and flushes it (librpma 1.2 flushes by an
 *      RDMA READ behind the WRITE), then rpma_atomic_write()s 8 bytes into
 *      it (an inline, fenced RDMA WRITE: Debian's librpma0 1.2.0 is built
 *      without its IBV_WR_ATOMIC_WRITE path, whatever the device offers)
 *      and flushes again, READs it all back and checks it;
 *   3. SENDs "written"; the server then checks pattern B in its own memory
 *      (the bytes really landed there, not only in what the client read
 *      back) and SENDs its verdict, which the client RECVs.
 * Each side exits 0 and prints PASS only when every byte matched. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <librpma.h>

#define BUF_SIZE (256 * 1024) /* many packets each way at any MTU */
#define MSG_SIZE 64           /* one SEND / RECV slot */
_Static_assert(2 * MSG_SIZE <= 4096, "the message buffer: a page");
#define SEED_A 0x11
#define SEED_B 0x5a
#define AW_OFF 4104 /* rpma_atomic_write's 8 bytes: 8-aligned, past a page */
static const char aw_val[8] = "atomic!";

/* op contexts: librpma hands them back as wc.wr_id */
enum { OP_READ = 1, OP_WRITE_FLUSH = 2, OP_SEND = 4, OP_RECV = 8 };

static const char *role = "?";

static int fail_rpma(const char *what, int ret)
{
	fprintf(stderr, "%s: %s: %s\nFAIL\n", role, what, rpma_err_2str(ret));
	return 1;
}

/* not periodic in 256 or in a page: a byte at the wrong offset shows */
static uint8_t pattern(size_t i, unsigned seed)
{
	return (uint8_t)(i * 131 + seed + (i >> 9) * 7);
}

static void fill(uint8_t *b, unsigned seed)
{
	for (size_t i = 0; i < BUF_SIZE; i++)
		b[i] = pattern(i, seed);
}

/* offset of the first byte that differs, or -1 when all match; `aw`: the
 * atomic write's 8 bytes at AW_OFF instead of the pattern's */
static long check(const uint8_t *b, unsigned seed, bool aw)
{
	for (size_t i = 0; i < BUF_SIZE; i++) {
		bool in_aw = aw && i >= AW_OFF && i < AW_OFF + 8;
		if (b[i] != (in_aw ? (uint8_t)aw_val[i - AW_OFF] : pattern(i, seed)))
			return (long)i;
	}
	return -1;
}

/* Waits until every op in `want` has completed successfully.  Completions
 * of one CQ (SENDs, RECVs, READs, WRITEs: no separate receive CQ is
 * configured) come in any order between the kinds, so they are collected
 * in `done` until all wanted ones are there. */
static int wait_ops(struct rpma_conn *conn, unsigned want)
{
	static unsigned done;
	struct rpma_cq *cq;
	int ret = rpma_conn_get_cq(conn, &cq);
	if (ret)
		return fail_rpma("rpma_conn_get_cq", ret);
	while ((done & want) != want) {
		struct ibv_wc wc;
		int n = 0;
		ret = rpma_cq_get_wc(cq, 1, &wc, &n);
		if (ret == RPMA_E_NO_COMPLETION) {
			/* blocks on the CQ's completion channel, then re-arms it */
			ret = rpma_cq_wait(cq);
			if (ret)
				return fail_rpma("rpma_cq_wait", ret);
			continue;
		}
		if (ret)
			return fail_rpma("rpma_cq_get_wc", ret);
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "%s: op %" PRIu64 " completed with %s\nFAIL\n", role, wc.wr_id,
				ibv_wc_status_str(wc.status));
			return 1;
		}
		done |= (unsigned)wc.wr_id;
	}
	done &= ~want;
	return 0;
}

static int expect_event(struct rpma_conn *conn, enum rpma_conn_event want)
{
	enum rpma_conn_event ev;
	int ret = rpma_conn_next_event(conn, &ev);
	if (ret)
		return fail_rpma("rpma_conn_next_event", ret);
	if (ev != want) {
		/* "RPMA_CONN_REJECTED" tells cm_pair.sh the server was not listening yet */
		fprintf(stderr, "%s: RPMA_CONN_%s instead of RPMA_CONN_%s\nFAIL\n", role,
			ev == RPMA_CONN_REJECTED ? "REJECTED" : rpma_utils_conn_event_2str(ev),
			want == RPMA_CONN_ESTABLISHED ? "ESTABLISHED" : "CLOSED");
		return 1;
	}
	return 0;
}

static int server(const char *addr, const char *port)
{
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	struct rpma_mr_local *mr, *msg_mr;
	struct rpma_ep *ep;
	struct rpma_conn_req *req;
	struct rpma_conn *conn = NULL;
	uint8_t *buf = aligned_alloc(4096, BUF_SIZE);
	/* aligned_alloc wants a size that is a multiple of the alignment (C11) */
	char *msg = aligned_alloc(4096, 4096); /* [0]: send, [MSG_SIZE]: recv */
	int ret;

	if (!buf || !msg)
		return fail_rpma("aligned_alloc", RPMA_E_NOMEM);
	fill(buf, SEED_A);
	memset(msg, 0, 2 * MSG_SIZE);
	/* the device that holds the address we listen on */
	if ((ret = rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL, &ctx)))
		return fail_rpma("rpma_utils_get_ibv_context", ret);
	if ((ret = rpma_peer_new(ctx, &peer)))
		return fail_rpma("rpma_peer_new", ret);
	/* READ_SRC, WRITE_DST: the client's READs and WRITEs; FLUSH_TYPE_VISIBILITY:
	 * its rpma_flush (refused with RPMA_E_NOSUPP without it) */
	if ((ret = rpma_mr_reg(peer, buf, BUF_SIZE,
			       RPMA_MR_USAGE_READ_SRC | RPMA_MR_USAGE_WRITE_DST |
				       RPMA_MR_USAGE_FLUSH_TYPE_VISIBILITY,
			       &mr)))
		return fail_rpma("rpma_mr_reg", ret);
	if ((ret = rpma_mr_reg(peer, msg, 2 * MSG_SIZE, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &msg_mr)))
		return fail_rpma("rpma_mr_reg msg", ret);

	/* the descriptor goes out in the CM REP's private data */
	size_t desc_size;
	if ((ret = rpma_mr_get_descriptor_size(mr, &desc_size)))
		return fail_rpma("rpma_mr_get_descriptor_size", ret);
	char desc[64];
	if (desc_size > sizeof(desc))
		return fail_rpma("descriptor size", RPMA_E_INVAL);
	if ((ret = rpma_mr_get_descriptor(mr, desc)))
		return fail_rpma("rpma_mr_get_descriptor", ret);
	struct rpma_conn_private_data pdata = { desc, (uint8_t)desc_size };

	if ((ret = rpma_ep_listen(peer, addr, port, &ep)))
		return fail_rpma("rpma_ep_listen", ret);
	printf("%s: listening on %s:%s\n", role, addr, port);
	fflush(stdout);
	if ((ret = rpma_ep_next_conn_req(ep, NULL, &req)))
		return fail_rpma("rpma_ep_next_conn_req", ret);
	/* the RECV for the client's "written" is posted before we accept, so
	 * its SEND never meets an empty receive queue */
	if ((ret = rpma_conn_req_recv(req, msg_mr, MSG_SIZE, MSG_SIZE, (void *)(uintptr_t)OP_RECV)))
		return fail_rpma("rpma_conn_req_recv", ret);
	if ((ret = rpma_conn_req_connect(&req, &pdata, &conn)))
		return fail_rpma("rpma_conn_req_connect (accept)", ret);
	if (expect_event(conn, RPMA_CONN_ESTABLISHED))
		return 1;

	if (wait_ops(conn, OP_RECV))
		return 1;
	if (strcmp(msg + MSG_SIZE, "written")) {
		fprintf(stderr, "%s: got \"%.*s\", expected \"written\"\nFAIL\n", role, MSG_SIZE, msg + MSG_SIZE);
		return 1;
	}
	/* the client's WRITE must have reached our memory byte for byte */
	long bad = check(buf, SEED_B, true);
	if (bad >= 0)
		snprintf(msg, MSG_SIZE, "bad %ld", bad);
	else
		snprintf(msg, MSG_SIZE, "ok");
	if ((ret = rpma_send(conn, msg_mr, 0, MSG_SIZE, RPMA_F_COMPLETION_ALWAYS, (void *)(uintptr_t)OP_SEND)))
		return fail_rpma("rpma_send", ret);
	if (wait_ops(conn, OP_SEND))
		return 1;

	/* the client disconnects once it has our verdict */
	if (expect_event(conn, RPMA_CONN_CLOSED))
		return 1;
	if ((ret = rpma_conn_disconnect(conn)) || (ret = rpma_conn_delete(&conn)) ||
	    (ret = rpma_ep_shutdown(&ep)) || (ret = rpma_mr_dereg(&msg_mr)) || (ret = rpma_mr_dereg(&mr)) ||
	    (ret = rpma_peer_delete(&peer)))
		return fail_rpma("teardown", ret);
	free(buf);
	free(msg);
	if (bad >= 0) {
		printf("%s: byte %ld of the client's WRITE differs\nFAIL\n", role, bad);
		return 1;
	}
	printf("%s: %d bytes written (and 8 atomically) by the client checked in our memory\nPASS\n", role,
	       BUF_SIZE);
	return 0;
}

static int client(const char *addr, const char *port)
{
	struct ibv_context *ctx;
	struct rpma_peer *peer;
	struct rpma_mr_local *mr, *msg_mr;
	struct rpma_mr_remote *rmr;
	struct rpma_conn_req *req;
	struct rpma_conn *conn;
	uint8_t *buf = aligned_alloc(4096, BUF_SIZE);
	char *msg = aligned_alloc(4096, 4096);
	long bad;
	int ret;

	if (!buf || !msg)
		return fail_rpma("aligned_alloc", RPMA_E_NOMEM);
	memset(buf, 0, BUF_SIZE);
	memset(msg, 0, 2 * MSG_SIZE);
	/* the local device that routes to the server's address */
	if ((ret = rpma_utils_get_ibv_context(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE, &ctx)))
		return fail_rpma("rpma_utils_get_ibv_context", ret);
	if ((ret = rpma_peer_new(ctx, &peer)))
		return fail_rpma("rpma_peer_new", ret);
	if ((ret = rpma_mr_reg(peer, buf, BUF_SIZE, RPMA_MR_USAGE_READ_DST | RPMA_MR_USAGE_WRITE_SRC, &mr)))
		return fail_rpma("rpma_mr_reg", ret);
	if ((ret = rpma_mr_reg(peer, msg, 2 * MSG_SIZE, RPMA_MR_USAGE_SEND | RPMA_MR_USAGE_RECV, &msg_mr)))
		return fail_rpma("rpma_mr_reg msg", ret);

	if ((ret = rpma_conn_req_new(peer, addr, port, NULL, &req)))
		return fail_rpma("rpma_conn_req_new", ret);
	/* the RECV for the server's verdict, posted before the connection exists */
	if ((ret = rpma_conn_req_recv(req, msg_mr, MSG_SIZE, MSG_SIZE, (void *)(uintptr_t)OP_RECV)))
		return fail_rpma("rpma_conn_req_recv", ret);
	if ((ret = rpma_conn_req_connect(&req, NULL, &conn)))
		return fail_rpma("rpma_conn_req_connect", ret);
	if (expect_event(conn, RPMA_CONN_ESTABLISHED))
		return 1;

	/* the server's MR, from the REP's private data */
	struct rpma_conn_private_data pdata;
	if ((ret = rpma_conn_get_private_data(conn, &pdata)))
		return fail_rpma("rpma_conn_get_private_data", ret);
	if (!pdata.ptr)
		return fail_rpma("no private data from the server", RPMA_E_INVAL);
	if ((ret = rpma_mr_remote_from_descriptor(pdata.ptr, pdata.len, &rmr)))
		return fail_rpma("rpma_mr_remote_from_descriptor", ret);
	size_t rsize;
	if ((ret = rpma_mr_remote_get_size(rmr, &rsize)))
		return fail_rpma("rpma_mr_remote_get_size", ret);
	if (rsize != BUF_SIZE) {
		fprintf(stderr, "%s: remote MR of %zu bytes, expected %d\nFAIL\n", role, rsize, BUF_SIZE);
		return 1;
	}

	/* 1. READ pattern A */
	if ((ret = rpma_read(conn, mr, 0, rmr, 0, BUF_SIZE, RPMA_F_COMPLETION_ALWAYS, (void *)(uintptr_t)OP_READ)))
		return fail_rpma("rpma_read", ret);
	if (wait_ops(conn, OP_READ))
		return 1;
	if ((bad = check(buf, SEED_A, false)) >= 0) {
		fprintf(stderr, "%s: READ: byte %ld differs\nFAIL\n", role, bad);
		return 1;
	}
	printf("%s: READ of %d bytes checked\n", role, BUF_SIZE);

	/* 2. WRITE pattern B, flush (its completion says the WRITE is visible
	 * at the server), then READ it back into a cleared buffer */
	fill(buf, SEED_B);
	if ((ret = rpma_write(conn, rmr, 0, mr, 0, BUF_SIZE, RPMA_F_COMPLETION_ON_ERROR, NULL)))
		return fail_rpma("rpma_write", ret);
	if ((ret = rpma_flush(conn, rmr, 0, BUF_SIZE, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS,
			      (void *)(uintptr_t)OP_WRITE_FLUSH)))
		return fail_rpma("rpma_flush", ret);
	if (wait_ops(conn, OP_WRITE_FLUSH))
		return 1;
	if ((ret = rpma_atomic_write(conn, rmr, AW_OFF, aw_val, RPMA_F_COMPLETION_ON_ERROR, NULL)))
		return fail_rpma("rpma_atomic_write", ret);
	if ((ret = rpma_flush(conn, rmr, AW_OFF, 8, RPMA_FLUSH_TYPE_VISIBILITY, RPMA_F_COMPLETION_ALWAYS,
			      (void *)(uintptr_t)OP_WRITE_FLUSH)))
		return fail_rpma("rpma_flush after rpma_atomic_write", ret);
	if (wait_ops(conn, OP_WRITE_FLUSH))
		return 1;
	memset(buf, 0, BUF_SIZE);
	if ((ret = rpma_read(conn, mr, 0, rmr, 0, BUF_SIZE, RPMA_F_COMPLETION_ALWAYS, (void *)(uintptr_t)OP_READ)))
		return fail_rpma("rpma_read back", ret);
	if (wait_ops(conn, OP_READ))
		return 1;
	if ((bad = check(buf, SEED_B, true)) >= 0) {
		fprintf(stderr, "%s: WRITE + atomic write read back: byte %ld differs\nFAIL\n", role, bad);
		return 1;
	}
	printf("%s: WRITE + flush of %d bytes and atomic write + flush of 8 read back and checked\n", role,
	       BUF_SIZE);

	/* 3. tell the server; it checks its own memory and answers */
	snprintf(msg, MSG_SIZE, "written");
	if ((ret = rpma_send(conn, msg_mr, 0, MSG_SIZE, RPMA_F_COMPLETION_ALWAYS, (void *)(uintptr_t)OP_SEND)))
		return fail_rpma("rpma_send", ret);
	if (wait_ops(conn, OP_SEND | OP_RECV))
		return 1;
	if (strcmp(msg + MSG_SIZE, "ok")) {
		fprintf(stderr, "%s: server says \"%.*s\"\nFAIL\n", role, MSG_SIZE, msg + MSG_SIZE);
		return 1;
	}

	if ((ret = rpma_conn_disconnect(conn)))
		return fail_rpma("rpma_conn_disconnect", ret);
	if (expect_event(conn, RPMA_CONN_CLOSED))
		return 1;
	if ((ret = rpma_conn_delete(&conn)) || (ret = rpma_mr_remote_delete(&rmr)) ||
	    (ret = rpma_mr_dereg(&msg_mr)) || (ret = rpma_mr_dereg(&mr)) || (ret = rpma_peer_delete(&peer)))
		return fail_rpma("teardown", ret);
	free(buf);
	free(msg);
	printf("%s: READ, WRITE + flush, atomic write + flush, SEND / RECV all checked\nPASS\n", role);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server|client ADDR [PORT]\n", argv[0]);
		return 2;
	}
	role = argv[1];
	/* RPMA_PAIR_DEBUG=1: librpma's own log on stderr, down to its debug level */
	if (getenv("RPMA_PAIR_DEBUG"))
		(void)(rpma_log_set_threshold(RPMA_LOG_THRESHOLD, RPMA_LOG_LEVEL_DEBUG) ||
		       rpma_log_set_threshold(RPMA_LOG_THRESHOLD_AUX, RPMA_LOG_LEVEL_DEBUG));
	const char *port = argc == 4 ? argv[3] : "7204";
	return role[0] == 's' ? server(argv[2], port) : client(argv[2], port);
}
