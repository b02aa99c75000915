/* RoCEv2 GIDs and the IP header a packet travels in (shared/docs/roce-wire.md
 * §1, §9): a GID is a 16-byte IPv6 address, IPv4-mapped (::ffff:a.b.c.d)
 * for IPv4. */
#ifndef UROCE_WIRE_IP_H
#define UROCE_WIRE_IP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

bool gid_is_ipv4(const uint8_t gid[16]);
/* A multicast GID (roce-wire.md §1.5 item 2, §9): an IPv4-mapped
 * 224.0.0.0/4 address or an IPv6 ff00::/8 one, as the kernel's
 * rdma_is_multicast_addr. */
static inline bool gid_is_multicast(const uint8_t gid[16])
{
	return gid_is_ipv4(gid) ? (gid[12] & 0xF0) == 0xE0 : gid[0] == 0xFF;
}
/* A loopback GID: an IPv4-mapped 127.0.0.0/8 address or ::1, as the
 * kernel's cma_loopback_addr. */
static inline bool gid_is_loopback(const uint8_t gid[16])
{
	static const uint8_t one[16] = { [15] = 1 };
	return gid_is_ipv4(gid) ? gid[12] == 127 : !memcmp(gid, one, 16);
}
/* An IPv4 or IPv6 address in text as a GID; -1 if it is neither. */
int gid_parse(const char *s, uint8_t gid[16]);
/* The GID's address as text (dotted quad for IPv4-mapped ones). */
const char *gid_format(const uint8_t gid[16], char *buf, size_t n);
/* The socket address of a GID and a UDP port (host order), and back:
 * inline, both are on the packet path (net/udp.c). */
static inline void gid_to_sockaddr(const uint8_t gid[16], uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	if (gid_is_ipv4(gid)) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, gid + 12, 4);
		*len = sizeof(*s);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		memcpy(&s->sin6_addr, gid, 16);
		*len = sizeof(*s);
	}
}

static inline void sockaddr_to_gid(const struct sockaddr_storage *ss, uint8_t gid[16], uint16_t *port)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)ss;
		memset(gid, 0, 10); gid[10] = gid[11] = 0xff;
		memcpy(gid + 12, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
	} else {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ss;
		memcpy(gid, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
	}
}

/* The IP header a RoCEv2 packet of `udp_len` UDP bytes travels in: IPv4
 * with DF and its header checksum (20 bytes), or IPv6 (40 bytes); returns
 * the length written.  The pcap tap and the UD GRH share it. */
size_t ip_header_build(uint8_t *out, const uint8_t sgid[16], const uint8_t dgid[16], uint16_t udp_len,
		       uint16_t ip_id, uint8_t tos, uint8_t ttl);

#endif
