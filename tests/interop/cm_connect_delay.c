/* A test shim for perftest -R's data connection race (tests/interop,
 * rxe_peer.sh RXE_CM_DELAY_LIB): every rdma_resolve_addr after the
 * process's first waits RXE_CM_DELAY_MS (300) ms, then goes on to the next
 * definition (uroce's).
 *
 * Why: perftest -R makes a control connection, hand-shakes over it, and
 * only then does its server create, bind and listen a new id for the data
 * connection, while its client connects as soon as it has the server's
 * last handshake message.  A client faster than the server's listen gets
 * REJ 8 (no listener), and perftest's retry after that
 * (rdma_cm_client_connection -> rdma_cm_destroy_cma, which frees
 * cma_master.nodes and the channel, then _rdma_cm_client_connection again
 * on the freed nodes) crashes on any librdmacm.  A uroce client on the host
 * beats rxe's server in a TCG VM by ~2 ms; a kernel client in a VM does not.
 * The delay stands for that slower client; the programs are unmodified. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

struct rdma_cm_id;
struct sockaddr;

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int timeout_ms)
{
	static int calls;
	static int (*next)(struct rdma_cm_id *, struct sockaddr *, struct sockaddr *, int);
	if (!next)
		next = (int (*)(struct rdma_cm_id *, struct sockaddr *, struct sockaddr *, int))dlsym(RTLD_NEXT,
												 "rdma_resolve_addr");
	if (calls++) {
		const char *ms = getenv("RXE_CM_DELAY_MS");
		usleep((useconds_t)(ms ? atoi(ms) : 300) * 1000u);
	}
	return next(id, src, dst, timeout_ms);
}
