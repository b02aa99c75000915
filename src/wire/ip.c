/* GIDs as addresses, and the IP header of a RoCEv2 packet. */
#include "ip.h"
#include <arpa/inet.h>
#include <string.h>

static const uint8_t v4mapped_prefix[12] = { 0,0,0,0, 0,0,0,0, 0,0,0xff,0xff };

bool gid_is_ipv4(const uint8_t gid[16])
{
	return memcmp(gid, v4mapped_prefix, 12) == 0;
}

int gid_parse(const char *s, uint8_t gid[16])
{
	struct in_addr a4;
	struct in6_addr a6;

	if (inet_pton(AF_INET, s, &a4) == 1) {
		memcpy(gid, v4mapped_prefix, 12);
		memcpy(gid + 12, &a4, 4);
		return 0;
	}
	if (inet_pton(AF_INET6, s, &a6) == 1) {
		memcpy(gid, &a6, 16);
		return 0;
	}
	return -1;
}

const char *gid_format(const uint8_t gid[16], char *buf, size_t n)
{
	if (gid_is_ipv4(gid))
		inet_ntop(AF_INET, gid + 12, buf, (socklen_t)n);
	else
		inet_ntop(AF_INET6, gid, buf, (socklen_t)n);
	return buf;
}

size_t ip_header_build(uint8_t *out, const uint8_t sgid[16], const uint8_t dgid[16], uint16_t udp_len,
		       uint16_t ip_id, uint8_t tos, uint8_t ttl)
{
	if (gid_is_ipv4(sgid)) {
		uint16_t tot = (uint16_t)(20 + udp_len);
		uint8_t h[20] = { 0x45, tos, (uint8_t)(tot >> 8), (uint8_t)tot, (uint8_t)(ip_id >> 8), (uint8_t)ip_id,
				  0x40, 0, ttl, 17, 0, 0 };
		memcpy(h + 12, sgid + 12, 4);
		memcpy(h + 16, dgid + 12, 4);
		uint32_t s = 0;
		for (int i = 0; i < 20; i += 2)
			s += (uint32_t)h[i] << 8 | h[i + 1];
		while (s >> 16)
			s = (s & 0xFFFF) + (s >> 16);
		h[10] = (uint8_t)(~s >> 8);
		h[11] = (uint8_t)~s;
		memcpy(out, h, 20);
		return 20;
	}
	uint8_t h[40] = { (uint8_t)(0x60 | tos >> 4), (uint8_t)(tos << 4), 0, 0, (uint8_t)(udp_len >> 8), (uint8_t)udp_len,
			  17, ttl };
	memcpy(h + 8, sgid, 16);
	memcpy(h + 24, dgid, 16);
	memcpy(out, h, 40);
	return 40;
}
