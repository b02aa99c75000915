/*
 * tcp_pingpong: loopback TCP/UDP baseline for the uroce benchmark (bench/).
 *
 *   server:  tcp_pingpong -p PORT [options]
 *   client:  tcp_pingpong -p PORT [options] HOST
 *
 * Modes (given to the client; the server learns them from the client's hello):
 *   ping-pong (default)  the client sends an N-byte message, the server echoes
 *                        it; one-way latency = RTT / 2, reported as median,
 *                        p99, mean, min and max over the measured iterations.
 *   --stream             the client streams N-byte messages for -D seconds;
 *                        the receiver (server) reports what it received.
 * Transport:  TCP (default, TCP_NODELAY) or --udp (a message larger than one
 *             datagram is split into datagrams of at most 65507 bytes, each
 *             with a 20-byte header carrying sequence and offset).
 * Waiting:    busy-polling non-blocking recv/send (default) or --blocking.
 *
 * Each side prints one line "RESULT key=value ..." on stdout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include "bench_clock.h"

#define HELLO_MAGIC 0x75504e47u /* "uPNG" */
#define DG_MAGIC 0x75444721u
#define UDP_MAX_PAYLOAD 65507u
#define DG_HDR ((uint32_t)sizeof(struct dg_hdr))
#define DG_CHUNK (UDP_MAX_PAYLOAD - DG_HDR)

enum { MODE_PINGPONG = 0, MODE_STREAM = 1 };
enum { DG_HELLO = 1, DG_HELLO_ACK = 2, DG_DATA = 3, DG_FIN = 4 };

struct hello {
	uint32_t magic;
	uint32_t mode;
	uint32_t blocking;
	uint32_t pad;
	uint64_t size;
};

struct dg_hdr {
	uint32_t magic;
	uint32_t type;
	uint32_t seq;
	uint32_t off;
	uint32_t total;
};

struct opts {
	const char *host;
	const char *bind_addr;
	int port;
	bool udp;
	bool blocking;
	int mode;
	uint64_t size;
	long iters;
	long warmup;
	double duration;
	double timeout;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	fprintf(stderr, "tcp_pingpong: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void fail(const char *msg)
{
	fprintf(stderr, "tcp_pingpong: %s\n", msg);
	exit(1);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: tcp_pingpong -p PORT [-s SIZE] [-n ITERS] [-w WARMUP] [-D SECS]\n"
		"                    [--udp] [--blocking] [--stream] [--bind ADDR] [--timeout SECS] [HOST]\n"
		"  without HOST: server (one client, then exit); with HOST: client\n"
		"  -s SIZE     message size in bytes (default 2)\n"
		"  -n ITERS    ping-pong iterations measured (default 10000)\n"
		"  -w WARMUP   ping-pong iterations not measured (default 100)\n"
		"  -D SECS     ping-pong: stop after SECS even if -n not reached (default 10);\n"
		"              stream: stream for SECS (default 1)\n"
		"  --udp       UDP instead of TCP\n"
		"  --blocking  blocking recv/send instead of busy-polling non-blocking ones\n"
		"  --stream    throughput: the client streams, the server receives\n"
		"  --bind ADDR server address (default 127.0.0.1)\n"
		"  --timeout S give up after S seconds without progress (default 20)\n");
	exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	o->bind_addr = "127.0.0.1";
	o->size = 2;
	o->iters = 10000;
	o->warmup = 100;
	o->duration = -1;
	o->timeout = 20;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = (i + 1 < argc) ? argv[i + 1] : NULL;
		if (!strcmp(a, "-p") && v) {
			o->port = atoi(v);
			i++;
		} else if (!strcmp(a, "-s") && v) {
			o->size = strtoull(v, NULL, 0);
			i++;
		} else if (!strcmp(a, "-n") && v) {
			o->iters = atol(v);
			i++;
		} else if (!strcmp(a, "-w") && v) {
			o->warmup = atol(v);
			i++;
		} else if (!strcmp(a, "-D") && v) {
			o->duration = atof(v);
			i++;
		} else if (!strcmp(a, "--bind") && v) {
			o->bind_addr = v;
			i++;
		} else if (!strcmp(a, "--timeout") && v) {
			o->timeout = atof(v);
			i++;
		} else if (!strcmp(a, "--udp")) {
			o->udp = true;
		} else if (!strcmp(a, "--blocking")) {
			o->blocking = true;
		} else if (!strcmp(a, "--stream")) {
			o->mode = MODE_STREAM;
		} else if (a[0] == '-') {
			usage();
		} else if (!o->host) {
			o->host = a;
		} else {
			usage();
		}
	}
	if (o->port <= 0 || o->port > 65535 || o->size < 1 || o->size > (1u << 30) || o->iters < 1 ||
	    o->warmup < 0 || o->timeout <= 0)
		usage();
	if (o->duration < 0)
		o->duration = o->mode == MODE_STREAM ? 1.0 : 10.0;
}

static void resolve(const char *host, int port, int socktype, struct sockaddr_storage *ss, socklen_t *len)
{
	struct addrinfo hints = { 0 }, *res;
	char portstr[16];
	snprintf(portstr, sizeof(portstr), "%d", port);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = socktype;
	int rc = getaddrinfo(host, portstr, &hints, &res);
	if (rc) {
		fprintf(stderr, "tcp_pingpong: %s: %s\n", host, gai_strerror(rc));
		exit(1);
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
}

/* A socket of `socktype` for host:port, whose address is left in ss/len. */
static int open_socket(const char *host, int port, int socktype, struct sockaddr_storage *ss, socklen_t *len)
{
	resolve(host, port, socktype, ss, len);
	int fd = socket(ss->ss_family, socktype, 0);
	if (fd < 0)
		die("socket");
	return fd;
}

static void set_bufs(int fd, int bytes)
{
	/* SO_*BUFFORCE works for root (beyond rmem_max); fall back otherwise. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof(bytes)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

static void set_rcvtimeo(int fd, double secs)
{
	struct timeval tv = { .tv_sec = (time_t)secs, .tv_usec = (suseconds_t)((secs - (double)(time_t)secs) * 1e6) };
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		die("SO_RCVTIMEO");
}

/* ---------------------------------------------------------------- TCP --- */

/* Send/receive exactly len bytes.  Busy mode spins on EAGAIN; returns 0 on
 * success, -1 on EOF/error, -2 on timeout (no progress for timeout secs). */
/* A non-blocking call found nothing to do: true once `timeout` seconds have
 * passed without progress (the clock is read every 1024 spins). */
static bool stalled(unsigned *spins, double *last, double timeout)
{
	if ((++*spins & 1023) != 0)
		return false;
	double t = now_s();
	if (*last == 0) {
		*last = t;
		return false;
	}
	return t - *last > timeout;
}

static int tcp_send_all(int fd, const char *buf, size_t len, bool blocking, double timeout)
{
	size_t done = 0;
	double last = 0;
	unsigned spins = 0;
	while (done < len) {
		ssize_t n = send(fd, buf + done, len - done, MSG_NOSIGNAL | (blocking ? 0 : MSG_DONTWAIT));
		if (n > 0) {
			done += (size_t)n;
			last = 0;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
			if (stalled(&spins, &last, timeout))
				return -2;
			continue;
		}
		return -1;
	}
	return 0;
}

static int tcp_recv_all(int fd, char *buf, size_t len, bool blocking, double timeout)
{
	size_t done = 0;
	double last = 0;
	unsigned spins = 0;
	while (done < len) {
		ssize_t n = recv(fd, buf + done, len - done, blocking ? 0 : MSG_DONTWAIT);
		if (n > 0) {
			done += (size_t)n;
			last = 0;
			continue;
		}
		if (n == 0)
			return -1;
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
			if (blocking)
				return -2; /* SO_RCVTIMEO expired */
			if (stalled(&spins, &last, timeout))
				return -2;
			continue;
		}
		return -1;
	}
	return 0;
}

static void tcp_opts(int fd)
{
	int one = 1;
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		die("TCP_NODELAY");
}

/* ---------------------------------------------------------------- UDP --- */

static int udp_send_dg(int fd, char *dgbuf, uint32_t type, uint32_t seq, uint32_t off, uint32_t total,
		       const char *payload, uint32_t len, bool blocking)
{
	struct dg_hdr h = { DG_MAGIC, type, seq, off, total };
	memcpy(dgbuf, &h, sizeof(h));
	if (len)
		memcpy(dgbuf + DG_HDR, payload, len);
	for (;;) {
		ssize_t n = send(fd, dgbuf, DG_HDR + len, blocking ? 0 : MSG_DONTWAIT);
		if (n >= 0)
			return 0;
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ENOBUFS)
			continue;
		if (errno == ECONNREFUSED) /* peer not there (yet/anymore): datagram lost */
			return -1;
		return -1;
	}
}

/* Send one message as datagrams; returns datagrams sent. */
static long udp_send_msg(int fd, char *dgbuf, uint32_t seq, const char *msg, uint64_t size, bool blocking)
{
	long n = 0;
	for (uint64_t off = 0; off < size; off += DG_CHUNK) {
		uint32_t len = (uint32_t)(size - off < DG_CHUNK ? size - off : DG_CHUNK);
		if (udp_send_dg(fd, dgbuf, DG_DATA, seq, (uint32_t)off, (uint32_t)size, msg + off, len, blocking) == 0)
			n++;
	}
	return n;
}

/* Receive one datagram. Returns length, 0 on timeout. */
static ssize_t udp_recv_dg(int fd, char *dgbuf, bool blocking, double deadline)
{
	unsigned spins = 0;
	for (;;) {
		ssize_t n = recv(fd, dgbuf, UDP_MAX_PAYLOAD, blocking ? 0 : MSG_DONTWAIT);
		if (n >= (ssize_t)DG_HDR) {
			struct dg_hdr h;
			memcpy(&h, dgbuf, sizeof(h));
			if (h.magic == DG_MAGIC)
				return n;
			continue;
		}
		if (n >= 0)
			continue; /* runt: ignore */
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNREFUSED) {
			if (blocking) {
				if (now_s() > deadline)
					return 0;
				continue;
			}
			if ((++spins & 255) == 0 && now_s() > deadline)
				return 0;
			continue;
		}
		die("recv");
	}
}

/* ------------------------------------------------------------- results --- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void report_pingpong(const struct opts *o, uint64_t *rtt, long n, long lost, double elapsed, double cpu)
{
	const char *proto = o->udp ? "udp" : "tcp";
	const char *poll = o->blocking ? "blocking" : "busy";
	if (n == 0) {
		printf("RESULT proto=%s mode=pingpong poll=%s size=%llu iters=0 lost=%ld elapsed_s=%.3f cpu_s=%.3f\n",
		       proto, poll, (unsigned long long)o->size, lost, elapsed, cpu);
		return;
	}
	qsort(rtt, (size_t)n, sizeof(*rtt), cmp_u64);
	double med = (n & 1) ? (double)rtt[n / 2] : ((double)rtt[n / 2 - 1] + (double)rtt[n / 2]) / 2.0;
	long k99 = (long)((double)n * 0.99 + 0.999999) - 1; /* nearest rank */
	if (k99 < 0)
		k99 = 0;
	if (k99 >= n)
		k99 = n - 1;
	double sum = 0;
	for (long i = 0; i < n; i++)
		sum += (double)rtt[i];
	/* one-way latency = RTT / 2, in microseconds */
	printf("RESULT proto=%s mode=pingpong poll=%s size=%llu iters=%ld lost=%ld "
	       "lat_median_us=%.3f lat_p99_us=%.3f lat_mean_us=%.3f lat_min_us=%.3f lat_max_us=%.3f "
	       "rtt_median_us=%.3f elapsed_s=%.3f cpu_s=%.3f\n",
	       proto, poll, (unsigned long long)o->size, n, lost, med / 2e3, (double)rtt[k99] / 2e3,
	       sum / (double)n / 2e3, (double)rtt[0] / 2e3, (double)rtt[n - 1] / 2e3, med / 1e3, elapsed, cpu);
}

static void report_stream(const struct opts *o, const char *role, uint64_t bytes, uint64_t msgs, double secs,
			  double cpu, uint64_t peer_bytes, long dgrams)
{
	double bw = secs > 0 ? (double)bytes / secs : 0;
	printf("RESULT proto=%s mode=stream poll=%s role=%s size=%llu bytes=%llu msgs=%llu seconds=%.6f "
	       "bw_GBps=%.6f msg_rate=%.1f cpu_s=%.3f",
	       o->udp ? "udp" : "tcp", o->blocking ? "blocking" : "busy", role, (unsigned long long)o->size,
	       (unsigned long long)bytes, (unsigned long long)msgs, secs, bw / 1e9,
	       secs > 0 ? (double)msgs / secs : 0, cpu);
	if (peer_bytes) {
		double loss = peer_bytes > bytes ? 100.0 * (double)(peer_bytes - bytes) / (double)peer_bytes : 0;
		printf(" sent_bytes=%llu loss_pct=%.3f", (unsigned long long)peer_bytes, loss);
	}
	if (dgrams >= 0)
		printf(" datagrams=%ld", dgrams);
	printf("\n");
}

/* ------------------------------------------------------------- TCP roles --- */

static void tcp_client(const struct opts *o)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int fd = open_socket(o->host, o->port, SOCK_STREAM, &ss, &sl);
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0)
		die("connect");
	tcp_opts(fd);
	if (o->blocking)
		set_rcvtimeo(fd, o->timeout);
	struct hello h = { HELLO_MAGIC, (uint32_t)o->mode, o->blocking, 0, o->size };
	if (tcp_send_all(fd, (char *)&h, sizeof(h), true, o->timeout) || tcp_recv_all(fd, (char *)&h, sizeof(h), true, o->timeout))
		fail("hello exchange failed");
	char *buf = malloc(o->size);
	if (!buf)
		die("malloc");
	memset(buf, 'a', o->size);

	if (o->mode == MODE_PINGPONG) {
		uint64_t *rtt = malloc(sizeof(*rtt) * (size_t)o->iters);
		if (!rtt)
			die("malloc");
		long n = 0;
		double c0 = cpu_s(), t0 = now_s(), end = t0 + o->duration;
		/* warm-up: -w iterations, at most a tenth of -D */
		double warm_end = t0 + o->duration / 10;
		bool measuring = o->warmup == 0;
		for (long i = 0; n < o->iters; i++) {
			uint64_t a = now_ns();
			if (tcp_send_all(fd, buf, o->size, o->blocking, o->timeout))
				fail("send failed");
			if (tcp_recv_all(fd, buf, o->size, o->blocking, o->timeout))
				fail("recv failed (peer gone or timeout)");
			uint64_t b = now_ns();
			if (!measuring && (i >= o->warmup || now_s() > warm_end))
				measuring = true;
			if (measuring)
				rtt[n++] = b - a;
			if ((i & 15) == 0 && now_s() > end && n > 0)
				break;
		}
		double t1 = now_s();
		shutdown(fd, SHUT_WR);
		report_pingpong(o, rtt, n, 0, t1 - t0, cpu_s() - c0);
		free(rtt);
	} else {
		uint64_t msgs = 0;
		double c0 = cpu_s(), t0 = now_s(), end = t0 + o->duration;
		for (;;) {
			if (tcp_send_all(fd, buf, o->size, o->blocking, o->timeout))
				fail("send failed");
			msgs++;
			if ((msgs & 15) == 0 && now_s() > end)
				break;
		}
		double t1 = now_s();
		shutdown(fd, SHUT_WR);
		uint64_t got = 0;
		if (tcp_recv_all(fd, (char *)&got, sizeof(got), true, o->timeout))
			fail("no final count from the receiver");
		report_stream(o, "send", msgs * o->size, msgs, t1 - t0, cpu_s() - c0, 0, -1);
	}
	free(buf);
	close(fd);
}

static void tcp_server(const struct opts *o)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int lfd = open_socket(o->bind_addr, o->port, SOCK_STREAM, &ss, &sl);
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&ss, sl) < 0)
		die("bind");
	if (listen(lfd, 1) < 0)
		die("listen");
	set_rcvtimeo(lfd, o->timeout); /* bounds accept() too */
	printf("READY tcp %d\n", o->port);
	fflush(stdout);
	int fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept");
	close(lfd);
	tcp_opts(fd);
	struct hello h;
	set_rcvtimeo(fd, o->timeout);
	if (tcp_recv_all(fd, (char *)&h, sizeof(h), true, o->timeout) || h.magic != HELLO_MAGIC)
		fail("bad hello");
	if (tcp_send_all(fd, (char *)&h, sizeof(h), true, o->timeout))
		fail("hello ack failed");
	struct opts so = *o;
	so.mode = (int)h.mode;
	so.blocking = h.blocking != 0;
	so.size = h.size;
	if (so.size < 1 || so.size > (1u << 30))
		fail("bad size in hello");
	char *buf = malloc(so.size);
	if (!buf)
		die("malloc");
	memset(buf, 'b', so.size);

	if (so.mode == MODE_PINGPONG) {
		long n = 0;
		double c0 = cpu_s(), t0 = now_s();
		for (;;) {
			int rc = tcp_recv_all(fd, buf, so.size, so.blocking, so.timeout);
			if (rc == -1)
				break; /* client done */
			if (rc)
				fail("recv timeout");
			if (tcp_send_all(fd, buf, so.size, so.blocking, so.timeout))
				fail("send failed");
			n++;
		}
		printf("RESULT proto=tcp mode=pingpong-echo poll=%s size=%llu echoed=%ld elapsed_s=%.3f cpu_s=%.3f\n",
		       so.blocking ? "blocking" : "busy", (unsigned long long)so.size, n, now_s() - t0, cpu_s() - c0);
	} else {
		uint64_t bytes = 0;
		double c0 = cpu_s(), t0 = 0, t1 = 0;
		for (;;) {
			ssize_t r = recv(fd, buf, so.size, so.blocking ? 0 : MSG_DONTWAIT);
			if (r > 0) {
				if (!bytes)
					t0 = now_s();
				bytes += (uint64_t)r;
				continue;
			}
			if (r == 0)
				break;
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
				if (so.blocking)
					fail("recv timeout");
				continue;
			}
			die("recv");
		}
		t1 = now_s();
		(void)tcp_send_all(fd, (char *)&bytes, sizeof(bytes), true, so.timeout);
		report_stream(&so, "recv", bytes, bytes / so.size, t1 - t0, cpu_s() - c0, 0, -1);
	}
	free(buf);
	close(fd);
}

/* ------------------------------------------------------------- UDP roles --- */

static void udp_client(const struct opts *o)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int fd = open_socket(o->host, o->port, SOCK_DGRAM, &ss, &sl);
	set_bufs(fd, 8 << 20);
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0)
		die("connect");
	if (o->blocking)
		set_rcvtimeo(fd, 0.05);
	char *dg = malloc(UDP_MAX_PAYLOAD + 64);
	char *msg = malloc(o->size);
	if (!dg || !msg)
		die("malloc");
	memset(msg, 'a', o->size);

	/* hello until acknowledged */
	struct hello h = { HELLO_MAGIC, (uint32_t)o->mode, o->blocking, 0, o->size };
	bool acked = false;
	double give_up = now_s() + o->timeout;
	while (!acked && now_s() < give_up) {
		udp_send_dg(fd, dg, DG_HELLO, 0, 0, 0, (char *)&h, sizeof(h), true);
		double until = now_s() + 0.1;
		for (;;) {
			ssize_t n = udp_recv_dg(fd, dg, o->blocking, until);
			if (n == 0)
				break;
			struct dg_hdr r;
			memcpy(&r, dg, sizeof(r));
			if (r.type == DG_HELLO_ACK) {
				acked = true;
				break;
			}
		}
	}
	if (!acked)
		fail("no answer to hello");

	if (o->mode == MODE_PINGPONG) {
		uint64_t *rtt = malloc(sizeof(*rtt) * (size_t)o->iters);
		if (!rtt)
			die("malloc");
		long n = 0, lost = 0;
		uint32_t seq = 0;
		double c0 = cpu_s(), t0 = now_s(), end = t0 + o->duration;
		/* warm-up: -w iterations, at most a tenth of -D */
		double warm_end = t0 + o->duration / 10;
		bool measuring = o->warmup == 0;
		for (long i = 0; n < o->iters; i++) {
			seq++;
			uint64_t a = now_ns();
			udp_send_msg(fd, dg, seq, msg, o->size, o->blocking);
			uint64_t got = 0;
			double deadline = now_s() + 0.2;
			while (got < o->size) {
				ssize_t r = udp_recv_dg(fd, dg, o->blocking, deadline);
				if (r == 0)
					break;
				struct dg_hdr hd;
				memcpy(&hd, dg, sizeof(hd));
				if (hd.type != DG_DATA || hd.seq != seq)
					continue; /* stale */
				memcpy(msg + hd.off, dg + DG_HDR, (size_t)r - DG_HDR);
				got += (uint64_t)r - DG_HDR;
			}
			uint64_t b = now_ns();
			if (got < o->size) {
				lost++;
				if (lost > 100 && lost > n / 10)
					fail("too many lost UDP messages");
			} else {
				if (!measuring && (i >= o->warmup || now_s() > warm_end))
					measuring = true;
				if (measuring)
					rtt[n++] = b - a;
			}
			if ((i & 15) == 0 && now_s() > end && n > 0)
				break;
		}
		double t1 = now_s();
		for (int k = 0; k < 5; k++)
			udp_send_dg(fd, dg, DG_FIN, 0, 0, 0, NULL, 0, true);
		report_pingpong(o, rtt, n, lost, t1 - t0, cpu_s() - c0);
		free(rtt);
	} else {
		uint64_t msgs = 0;
		long dgrams = 0;
		uint32_t seq = 0;
		double c0 = cpu_s(), t0 = now_s(), end = t0 + o->duration;
		for (;;) {
			dgrams += udp_send_msg(fd, dg, ++seq, msg, o->size, o->blocking);
			msgs++;
			if ((msgs & 15) == 0 && now_s() > end)
				break;
		}
		double t1 = now_s();
		uint64_t sent = msgs * o->size;
		for (int k = 0; k < 20; k++) {
			udp_send_dg(fd, dg, DG_FIN, 0, 0, 0, (char *)&sent, sizeof(sent), true);
			usleep(1000);
		}
		report_stream(o, "send", sent, msgs, t1 - t0, cpu_s() - c0, 0, dgrams);
	}
	free(dg);
	free(msg);
	close(fd);
}

static void udp_server(const struct opts *o)
{
	struct sockaddr_storage ss, peer;
	socklen_t sl, pl = sizeof(peer);
	int fd = open_socket(o->bind_addr, o->port, SOCK_DGRAM, &ss, &sl);
	set_bufs(fd, 8 << 20);
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0)
		die("bind");
	char *dg = malloc(UDP_MAX_PAYLOAD + 64);
	if (!dg)
		die("malloc");
	printf("READY udp %d\n", o->port);
	fflush(stdout);

	/* wait for hello (blocking, bounded) */
	set_rcvtimeo(fd, o->timeout);
	struct hello h;
	for (;;) {
		ssize_t n = recvfrom(fd, dg, UDP_MAX_PAYLOAD, 0, (struct sockaddr *)&peer, &pl);
		if (n < 0)
			die("waiting for hello");
		struct dg_hdr hd;
		if (n < (ssize_t)(DG_HDR + sizeof(h)))
			continue;
		memcpy(&hd, dg, sizeof(hd));
		if (hd.magic != DG_MAGIC || hd.type != DG_HELLO)
			continue;
		memcpy(&h, dg + DG_HDR, sizeof(h));
		if (h.magic == HELLO_MAGIC)
			break;
	}
	if (connect(fd, (struct sockaddr *)&peer, pl) < 0)
		die("connect");
	struct opts so = *o;
	so.mode = (int)h.mode;
	so.blocking = h.blocking != 0;
	so.size = h.size;
	if (so.size < 1 || so.size > (1u << 30))
		fail("bad size in hello");
	udp_send_dg(fd, dg, DG_HELLO_ACK, 0, 0, 0, NULL, 0, true);
	if (so.blocking)
		set_rcvtimeo(fd, 0.05);
	char *msg = malloc(so.size);
	if (!msg)
		die("malloc");
	memset(msg, 'b', so.size);

	if (so.mode == MODE_PINGPONG) {
		long n = 0;
		uint32_t cur = 0;
		uint64_t got = 0;
		double c0 = cpu_s(), t0 = now_s();
		double idle_until = now_s() + so.timeout;
		for (;;) {
			ssize_t r = udp_recv_dg(fd, dg, so.blocking, idle_until);
			if (r == 0)
				fail("client went silent");
			idle_until = now_s() + so.timeout;
			struct dg_hdr hd;
			memcpy(&hd, dg, sizeof(hd));
			if (hd.type == DG_FIN)
				break;
			if (hd.type == DG_HELLO) { /* our ack was lost */
				udp_send_dg(fd, dg, DG_HELLO_ACK, 0, 0, 0, NULL, 0, true);
				continue;
			}
			if (hd.type != DG_DATA)
				continue;
			if (hd.seq != cur) {
				cur = hd.seq;
				got = 0;
			}
			if (hd.off + ((uint64_t)r - DG_HDR) <= so.size)
				memcpy(msg + hd.off, dg + DG_HDR, (size_t)r - DG_HDR);
			got += (uint64_t)r - DG_HDR;
			if (got >= hd.total) {
				udp_send_msg(fd, dg, cur, msg, so.size, so.blocking);
				n++;
				got = 0;
			}
		}
		printf("RESULT proto=udp mode=pingpong-echo poll=%s size=%llu echoed=%ld elapsed_s=%.3f cpu_s=%.3f\n",
		       so.blocking ? "blocking" : "busy", (unsigned long long)so.size, n, now_s() - t0, cpu_s() - c0);
	} else {
		uint64_t bytes = 0, sent = 0;
		long dgrams = 0;
		double c0 = cpu_s(), t0 = 0, t1 = 0;
		double idle_until = now_s() + so.timeout;
		for (;;) {
			ssize_t r = udp_recv_dg(fd, dg, so.blocking, idle_until);
			if (r == 0) {
				if (bytes)
					break; /* FIN lost: the stream is over anyway */
				fail("no data");
			}
			struct dg_hdr hd;
			memcpy(&hd, dg, sizeof(hd));
			if (hd.type == DG_FIN) {
				if ((size_t)r >= DG_HDR + sizeof(sent))
					memcpy(&sent, dg + DG_HDR, sizeof(sent));
				break;
			}
			if (hd.type != DG_DATA)
				continue;
			t1 = now_s();
			if (!bytes)
				t0 = t1;
			bytes += (uint64_t)r - DG_HDR;
			dgrams++;
			idle_until = t1 + 2.0;
		}
		/* a message counts once all of its bytes are in: approximate with bytes/size */
		report_stream(&so, "recv", bytes, bytes / so.size, t1 - t0, cpu_s() - c0, sent, dgrams);
	}
	free(msg);
	free(dg);
	close(fd);
}

int main(int argc, char **argv)
{
	struct opts o;
	parse(argc, argv, &o);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (o.udp)
		o.host ? udp_client(&o) : udp_server(&o);
	else
		o.host ? tcp_client(&o) : tcp_server(&o);
	return 0;
}
