/* A plain TCP program of ours, for librspreload (rsockets under a TCP
 * program, issue #15 item 2): socket/bind/listen/accept/connect/send/recv
 * and nothing else, none of the calls rsockets lacks (sendto on a stream,
 * F_SETOWN, SOCK_CLOEXEC in socket's type: sockperf, qperf and python
 * fall back to the kernel's TCP or fail for those).
 *   tcp_echo -s ADDR PORT        echo one connection back, then exit
 *   tcp_echo -c ADDR PORT BYTES  send BYTES in 4 KiB pieces, each echoed
 *                                and checked; "PASS" and exit 0 when all match */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int all(ssize_t (*op)(int, void *, size_t, int), int fd, unsigned char *b, size_t n)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = op(fd, b + done, n - done, 0);
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

static ssize_t send_op(int fd, void *b, size_t n, int f) { return send(fd, b, n, f); }

int main(int argc, char **argv)
{
	if (argc < 4 || (strcmp(argv[1], "-s") && strcmp(argv[1], "-c")) || (!strcmp(argv[1], "-c") && argc < 5)) {
		fprintf(stderr, "usage: tcp_echo -s ADDR PORT | -c ADDR PORT BYTES\n");
		return 2;
	}
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3])) };
	if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1)
		return 2;
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0) {
		perror("socket");
		return 1;
	}
	unsigned char buf[4096], back[4096];
	if (!strcmp(argv[1], "-s")) {
		int one = 1;
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 1)) {
			perror("bind/listen");
			return 1;
		}
		int c = accept(s, NULL, NULL);
		if (c < 0) {
			perror("accept");
			return 1;
		}
		for (ssize_t n; (n = recv(c, buf, sizeof(buf), 0)) > 0;)
			if (all(send_op, c, buf, (size_t)n))
				return 1;
		close(c);
		close(s);
		return 0;
	}
	if (connect(s, (struct sockaddr *)&a, sizeof(a))) {
		perror("connect");
		return 1;
	}
	long total = atol(argv[4]);
	unsigned seed = 1;
	for (long done = 0; done < total; done += (long)sizeof(buf)) {
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = (unsigned char)(rand_r(&seed) >> 7);
		if (all(send_op, s, buf, sizeof(buf)) || all(recv, s, back, sizeof(back))) {
			fprintf(stderr, "send/recv failed after %ld bytes\n", done);
			return 1;
		}
		if (memcmp(buf, back, sizeof(buf))) {
			fprintf(stderr, "FAIL: echoed data differs at byte %ld\n", done);
			return 1;
		}
	}
	close(s);
	printf("%ld bytes echoed and checked\nPASS\n", total);
	return 0;
}
