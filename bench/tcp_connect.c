/* TCP beside cmtime (issue #15's bench row): N connections on loopback,
 * step by step as cmtime times rdma_cm's, in cmtime's table format.
 *   tcp_connect -s ADDR PORT N    accept N connections, close each at its EOF
 *   tcp_connect -c ADDR PORT N    connect N sockets (all open at once, as
 *                                 cmtime's ids are), then close them all
 * Steps: "connect" is socket() + a blocking connect() per connection (the
 * handshake, done when the kernel queued it on the listener), "close" is
 * close() of every one.  Times are CLOCK_MONOTONIC. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void row(const char *step, double t0, double t1, double max_us, double min_us, int n)
{
	printf("%-13s: %11.2f %10.2f %10.2f %10.2f\n", step, (t1 - t0) / 1e3, max_us / 1e3, min_us, (t1 - t0) / n);
}

int main(int argc, char **argv)
{
	if (argc != 5 || (strcmp(argv[1], "-s") && strcmp(argv[1], "-c"))) {
		fprintf(stderr, "usage: tcp_connect -s|-c ADDR PORT N\n");
		return 2;
	}
	int n = atoi(argv[4]);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3])) };
	if (n < 1 || inet_pton(AF_INET, argv[2], &a.sin_addr) != 1)
		return 2;
	if (!strcmp(argv[1], "-s")) {
		int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4096)) {
			perror("tcp_connect: listen");
			return 1;
		}
		printf("listening\n");
		fflush(stdout);
		int *fd = calloc((size_t)n, sizeof(int));
		for (int i = 0; i < n; i++)
			if ((fd[i] = accept(l, NULL, NULL)) < 0) {
				perror("tcp_connect: accept");
				return 1;
			}
		char b;
		for (int i = 0; i < n; i++) {
			if (read(fd[i], &b, 1) < 0) {
				/* a reset: closed all the same */
			}
			close(fd[i]);
		}
		return 0;
	}
	int *fd = calloc((size_t)n, sizeof(int));
	double max = 0, min = 1e18;
	double t0 = now_us();
	for (int i = 0; i < n; i++) {
		double s = now_us();
		fd[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (fd[i] < 0 || connect(fd[i], (struct sockaddr *)&a, sizeof(a))) {
			perror("tcp_connect: connect");
			return 1;
		}
		double d = now_us() - s;
		max = d > max ? d : max;
		min = d < min ? d : min;
	}
	double t1 = now_us();
	printf("step              total ms     max ms     min us  us / conn\n");
	row("connect", t0, t1, max, min, n);
	max = 0, min = 1e18;
	t0 = now_us();
	for (int i = 0; i < n; i++) {
		double s = now_us();
		close(fd[i]);
		double d = now_us() - s;
		max = d > max ? d : max;
		min = d < min ? d : min;
	}
	t1 = now_us();
	row("close", t0, t1, max, min, n);
	return 0;
}
