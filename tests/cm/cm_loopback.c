/* rdma_cm's address rules where uroce follows the kernel and librdmacm,
 * run under uroce with an address that is not 127.0.0.1 (UROCE_ADDR):
 *  - a loopback address no device has binds as the wildcard (the kernel's
 *    cma_any_addr): the bind succeeds, no device is attached, the id still
 *    names the address, and a listener on it hears a connect to the
 *    device's own address;
 *  - an address neither ours nor loopback is refused with ENODEV;
 *  - a bound id resolves only a destination of its family, else EINVAL
 *    (the kernel's resolve_prepare_src), and a wildcard-bound one takes
 *    the route's address and keeps its port;
 *  - a port bound by two ids of ours (REUSEADDR), one of them since
 *    narrowed to the device's address by resolving, stays claimed against
 *    another process of the address while either holds it, and is free once
 *    both are gone (another process: this program again, --try-bind);
 *  - with two addresses, a wildcard bind that another process's claim on
 *    the second refuses lets go of nothing an id of ours still holds on
 *    the first;
 *  - rdma_getaddrinfo without a name takes the hints' source, passive or
 *    not, and refuses no name, no service and no hints with EINVAL
 *    (librdmacm 44 addrinfo.c).
 *   cm_loopback OUR_IPV4 [OUR_SECOND_IPV4]
 *   cm_loopback --try-bind IPV4 PORT   exit 0 bound, 3 EADDRINUSE, 1 otherwise
 *   cm_loopback --hold-bind IPV4 PORT FILE   binds, writes "bound" to FILE,
 *                                            holds it until FILE is gone */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;
#define CHECK(c, ...) \
	do { \
		bool ok_ = (c); \
		printf("%s ", ok_ ? "ok  " : "FAIL"); \
		printf(__VA_ARGS__); \
		printf("\n"); \
		if (!ok_) \
			failures++; \
	} while (0)

static struct sockaddr_in sin_of(const char *ip, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* The next event of ch, which must be `want` (acked; its id in *id). */
static bool expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, struct rdma_cm_id **id)
{
	struct rdma_cm_event *e;
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	/* a lost event fails the check instead of hanging the test */
	if (poll(&p, 1, 20000) != 1) {
		printf("     no event in 20 s, wanted %s\n", rdma_event_str(want));
		return false;
	}
	if (rdma_get_cm_event(ch, &e)) {
		printf("     rdma_get_cm_event: %s\n", strerror(errno));
		return false;
	}
	bool ok = e->event == want;
	if (!ok)
		printf("     got %s (status %d), wanted %s\n", rdma_event_str(e->event), e->status, rdma_event_str(want));
	if (id)
		*id = e->id;
	rdma_ack_cm_event(e);
	return ok;
}

static void test_getaddrinfo(const char *ours)
{
	struct sockaddr_in src = sin_of(ours, 0);
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP,
				       .ai_src_addr = (struct sockaddr *)&src, .ai_src_len = sizeof(src) };
	struct rdma_addrinfo *res = NULL;
	int rc = rdma_getaddrinfo(NULL, NULL, &hints, &res);
	CHECK(rc == 0 && res && res->ai_src_addr && res->ai_src_len == sizeof(src) &&
		      !memcmp(&((struct sockaddr_in *)res->ai_src_addr)->sin_addr, &src.sin_addr, 4),
	      "rdma_getaddrinfo(NULL, NULL, passive hints with a source): the hints' source (rc %d)", rc);
	if (!rc)
		rdma_freeaddrinfo(res);
	errno = 0;
	rc = rdma_getaddrinfo(NULL, NULL, NULL, &res);
	CHECK(rc == -1 && errno == EINVAL, "rdma_getaddrinfo(NULL, NULL, NULL): -1 EINVAL (rc %d, %s)", rc,
	      strerror(errno));
}

/* A fresh id of the TCP port space, or NULL (a failed check). */
static struct rdma_cm_id *new_id(void)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP)) {
		CHECK(false, "rdma_create_id: %s", strerror(errno));
		return NULL;
	}
	return id;
}

static void test_bind(const char *ours)
{
	struct rdma_cm_id *id;
	struct sockaddr_in a;

	if (!(id = new_id()))
		return;
	a = sin_of("127.0.0.1", 0);
	int rc = rdma_bind_addr(id, (struct sockaddr *)&a);
	struct sockaddr_in *l = (struct sockaddr_in *)rdma_get_local_addr(id);
	CHECK(rc == 0, "bind 127.0.0.1, no device's address: bound as the wildcard (%s)", rc ? strerror(errno) : "0");
	CHECK(rc == 0 && !id->verbs, "... with no device attached (id->verbs %p)", (void *)id->verbs);
	CHECK(rc == 0 && l->sin_family == AF_INET && l->sin_addr.s_addr == htonl(INADDR_LOOPBACK) && l->sin_port,
	      "... and the id names 127.0.0.1 with a port (%s:%u)", inet_ntoa(l->sin_addr), ntohs(l->sin_port));
	rdma_destroy_id(id);

	if (!(id = new_id()))
		return;
	a = sin_of("127.3.2.1", 0);
	rc = rdma_bind_addr(id, (struct sockaddr *)&a);
	CHECK(rc == 0 && !id->verbs, "bind 127.3.2.1: all of 127/8 is loopback (%s)", rc ? strerror(errno) : "0");
	rdma_destroy_id(id);

	if (!(id = new_id()))
		return;
	a = sin_of("192.0.2.77", 0);
	errno = 0;
	rc = rdma_bind_addr(id, (struct sockaddr *)&a);
	CHECK(rc == -1 && errno == ENODEV, "bind 192.0.2.77, neither ours nor loopback: ENODEV (%s)", strerror(errno));
	rdma_destroy_id(id);

	if (!(id = new_id()))
		return;
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	rc = rdma_bind_addr(id, (struct sockaddr *)&a6);
	CHECK(rc == 0 && !id->verbs, "bind ::1: loopback too (%s)", rc ? strerror(errno) : "0");
	rdma_destroy_id(id);

	if (!(id = new_id()))
		return;
	a = sin_of(ours, 0);
	rc = rdma_bind_addr(id, (struct sockaddr *)&a);
	CHECK(rc == 0 && id->verbs, "bind %s, the device's address: the device attached", ours);
	rdma_destroy_id(id);
}

static void test_resolve(const char *ours)
{
	struct rdma_cm_id *id;
	struct sockaddr_in dst = sin_of(ours, 7174), any = sin_of("0.0.0.0", 0);
	struct sockaddr_in6 lo6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	int rc;

	if (!(id = new_id()))
		return;
	errno = 0;
	rc = rdma_bind_addr(id, (struct sockaddr *)&lo6) ? -2 : rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000);
	CHECK(rc == -1 && errno == EINVAL, "an id bound to ::1 resolving %s: EINVAL (rc %d, %s)", ours, rc, strerror(errno));
	rdma_destroy_id(id);

	if (!(id = new_id()))
		return;
	errno = 0;
	rc = rdma_resolve_addr(id, (struct sockaddr *)&lo6, (struct sockaddr *)&dst, 2000);
	CHECK(rc == -1 && errno == EINVAL, "resolving %s from the source ::1: EINVAL (rc %d, %s)", ours, rc,
	      strerror(errno));
	rdma_destroy_id(id);

	if (!(id = new_id()))
		return;
	errno = 0;
	lo6.sin6_port = htons(7174);
	rc = rdma_bind_addr(id, (struct sockaddr *)&any) ? -2 : rdma_resolve_addr(id, NULL, (struct sockaddr *)&lo6, 2000);
	CHECK(rc == -1 && errno == EINVAL, "an id bound to 0.0.0.0 resolving [::1]: EINVAL (rc %d, %s)", rc,
	      strerror(errno));
	rdma_destroy_id(id);

	if (!(id = new_id()))
		return;
	rc = rdma_bind_addr(id, (struct sockaddr *)&any);
	uint16_t port = rc ? 0 : ntohs(rdma_get_src_port(id));
	rc = rc ? -2 : rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000);
	struct sockaddr_in *l = (struct sockaddr_in *)rdma_get_local_addr(id);
	CHECK(rc == 0 && port && id->verbs && l->sin_family == AF_INET &&
		      l->sin_addr.s_addr == sin_of(ours, 0).sin_addr.s_addr && ntohs(l->sin_port) == port,
	      "an id bound to 0.0.0.0:%u resolving %s leaves from %s:%u with the device attached (rc %d)", port, ours,
	      inet_ntoa(l->sin_addr), ntohs(l->sin_port), rc);
	rdma_destroy_id(id);
}

/* Another process of the address (this program, --try-bind) binds ip:port:
 * 0 bound, 3 EADDRINUSE */
static int bind_elsewhere(const char *ip, uint16_t port)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "/proc/%d/exe --try-bind %s %u", (int)getpid(), ip, port);
	int st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static struct rdma_cm_id *reuse_id(void)
{
	struct rdma_cm_id *id = new_id();
	int one = 1;
	if (id && rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one))) {
		CHECK(false, "RDMA_OPTION_ID_REUSEADDR: %s", strerror(errno));
		rdma_destroy_id(id);
		return NULL;
	}
	return id;
}

static void test_shared_claim(const char *ours)
{
	struct sockaddr_in any = sin_of("0.0.0.0", 0), dst = sin_of(ours, 7174);
	struct rdma_cm_id *a = reuse_id(), *b = reuse_id();

	if (!a || !b)
		return;
	bool ok = !rdma_bind_addr(a, (struct sockaddr *)&any);
	uint16_t port = ok ? ntohs(rdma_get_src_port(a)) : 0;
	any.sin_port = htons(port);
	ok = ok && !rdma_bind_addr(b, (struct sockaddr *)&any) && !rdma_resolve_addr(a, NULL, (struct sockaddr *)&dst, 2000);
	CHECK(ok, "two ids of ours on 0.0.0.0:%u (REUSEADDR), the first resolved to %s", port, ours);
	if (!ok)
		return;
	rdma_destroy_id(b);
	int rc = bind_elsewhere(ours, port);
	CHECK(rc == 3, "the wildcard one destroyed: another process binding %s:%u gets EADDRINUSE (exit %d)", ours, port,
	      rc);
	rdma_destroy_id(a);
	rc = bind_elsewhere(ours, port);
	CHECK(rc == 0, "both destroyed: another process binds %s:%u (exit %d)", ours, port, rc);
}

/* A second address's port held by another process (--hold-bind) refuses a
 * wildcard bind part-way: the bind's claim on the first address, which an
 * id of ours already holds, must stay. */
static void test_partial_claim(const char *ours, const char *second)
{
	struct sockaddr_in first = sin_of(ours, 0), any = sin_of("0.0.0.0", 0);
	struct rdma_cm_id *a = reuse_id(), *b = reuse_id();
	char file[64], cmd[256], buf[16] = "";

	if (!a || !b)
		return;
	bool ok = !rdma_bind_addr(a, (struct sockaddr *)&first);
	uint16_t port = ok ? ntohs(rdma_get_src_port(a)) : 0;
	snprintf(file, sizeof(file), "/tmp/cm_loopback.%d", (int)getpid());
	snprintf(cmd, sizeof(cmd), "/proc/%d/exe --hold-bind %s %u %s &", (int)getpid(), second, port, file);
	ok = ok && system(cmd) == 0;
	for (int i = 0; ok && i < 2000 && !buf[0]; i++) {
		FILE *f = fopen(file, "r");
		if (!f || !fgets(buf, sizeof(buf), f))
			usleep(10000);
		if (f)
			fclose(f);
	}
	buf[strcspn(buf, "\n")] = 0;
	CHECK(ok && !strcmp(buf, "bound"), "%s:%u ours, %s:%u another process's (%s)", ours, port, second, port, buf);
	any.sin_port = htons(port);
	errno = 0;
	int rc = rdma_bind_addr(b, (struct sockaddr *)&any);
	CHECK(rc == -1 && errno == EADDRINUSE, "a second id of ours binding 0.0.0.0:%u: EADDRINUSE (%s)", port,
	      strerror(errno));
	rc = bind_elsewhere(ours, port);
	CHECK(rc == 3, "... and %s:%u is still ours: another process gets EADDRINUSE (exit %d)", ours, port, rc);
	unlink(file);
	rdma_destroy_id(b);
	rdma_destroy_id(a);
}

static int hold_bind(const char *ip, const char *port, const char *file)
{
	struct rdma_cm_id *id;
	struct sockaddr_in a = sin_of(ip, (uint16_t)atoi(port));
	FILE *f = fopen(file, "w");
	if (!f || rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP))
		return 1;
	int rc = rdma_bind_addr(id, (struct sockaddr *)&a);
	fprintf(f, "%s\n", rc ? "refused" : "bound");
	fclose(f);
	/* held until the test is done with it (20 s at most) */
	for (int i = 0; i < 2000 && access(file, F_OK) == 0; i++)
		usleep(10000);
	rdma_destroy_id(id);
	return rc ? 1 : 0;
}

static int try_bind(const char *ip, const char *port)
{
	struct rdma_cm_id *id;
	struct sockaddr_in a = sin_of(ip, (uint16_t)atoi(port));
	if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP))
		return 1;
	int rc = rdma_bind_addr(id, (struct sockaddr *)&a) ? (errno == EADDRINUSE ? 3 : 1) : 0;
	rdma_destroy_id(id);
	return rc;
}

/* A listener bound to 127.0.0.1 hears a connect to dst (our own address,
 * or 127.0.0.1 itself), and the connection is established. */
static void test_listen_connect(const char *ours, const char *to)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *lid, *cid, *child = NULL, *id;
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
						.max_recv_sge = 1 }, .qp_type = IBV_QPT_RC };
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7 };

	if (!ch || rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) || rdma_create_id(ch, &cid, NULL, RDMA_PS_TCP)) {
		CHECK(false, "event channel and ids: %s", strerror(errno));
		return;
	}
	struct sockaddr_in a = sin_of("127.0.0.1", 0);
	bool ok = !rdma_bind_addr(lid, (struct sockaddr *)&a) && !rdma_listen(lid, 4);
	uint16_t port = ntohs(rdma_get_src_port(lid));
	CHECK(ok && port, "listen on 127.0.0.1, port %u", port);
	struct sockaddr_in dst = sin_of(to, port);
	ok = ok && !rdma_resolve_addr(cid, NULL, (struct sockaddr *)&dst, 2000) &&
	     expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL) && !rdma_resolve_route(cid, 2000) &&
	     expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL) && !rdma_create_qp(cid, NULL, &qa) &&
	     !rdma_connect(cid, &cp);
	CHECK(ok, "a client resolves %s:%u and connects", to, port);
	if (ok && strcmp(to, ours)) {
		struct sockaddr_in *l = (struct sockaddr_in *)rdma_get_local_addr(cid);
		CHECK(cid->verbs && l->sin_addr.s_addr == sin_of(ours, 0).sin_addr.s_addr,
		      "... from the device's address %s (%s)", ours, inet_ntoa(l->sin_addr));
	}
	ok = ok && expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &child) && child != cid;
	CHECK(ok, "the listener on 127.0.0.1 hears the request for %s", to);
	ok = ok && !rdma_create_qp(child, NULL, &qa) && !rdma_accept(child, &cp);
	/* both ends' ESTABLISHED, in either order */
	int est = 0;
	for (int i = 0; ok && i < 2; i++)
		if (expect(ch, RDMA_CM_EVENT_ESTABLISHED, &id) && (id == cid || id == child))
			est++;
	CHECK(est == 2, "both ends established (%d of 2)", est);
	if (ok && child) {
		struct sockaddr_in *l = (struct sockaddr_in *)rdma_get_local_addr(child);
		CHECK(l->sin_addr.s_addr == dst.sin_addr.s_addr, "the accepted id names the address connected to (%s)",
		      inet_ntoa(l->sin_addr));
	}
	if (est == 2) {
		/* the passive end answers the DREQ by its own rdma_disconnect, as rping does */
		int disc = 0;
		rdma_disconnect(cid);
		for (int i = 0; i < 2; i++)
			if (expect(ch, RDMA_CM_EVENT_DISCONNECTED, &id) && (id == cid || id == child)) {
				disc++;
				if (id == child)
					rdma_disconnect(child);
			}
		CHECK(disc == 2, "both ends disconnected (%d of 2)", disc);
	}
	if (child) {
		rdma_destroy_qp(child);
		rdma_destroy_id(child);
	}
	if (cid->qp)
		rdma_destroy_qp(cid);
	rdma_destroy_id(cid);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ch);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "--try-bind"))
		return try_bind(argv[2], argv[3]);
	if (argc == 5 && !strcmp(argv[1], "--hold-bind"))
		return hold_bind(argv[2], argv[3], argv[4]);
	if (argc != 2 && argc != 3) {
		fprintf(stderr, "usage: cm_loopback OUR_IPV4 [OUR_SECOND_IPV4]\n");
		return 2;
	}
	test_getaddrinfo(argv[1]);
	test_bind(argv[1]);
	test_resolve(argv[1]);
	test_shared_claim(argv[1]);
	if (argc == 3)
		test_partial_claim(argv[1], argv[2]);
	test_listen_connect(argv[1], argv[1]);
	printf("%s\n", failures ? "FAIL" : "PASS");
	return failures ? 1 : 0;
}
