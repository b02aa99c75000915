/* ICRC (shared/docs/roce-wire.md §4). */
#ifndef UROCE_ICRC_H
#define UROCE_ICRC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include "ip.h"

/* Fields of the IP and UDP headers the ICRC covers.  The GIDs are 16-byte
 * RoCEv2 GIDs: IPv4-mapped (::ffff:a.b.c.d) means IPv4 (§9). */
struct icrc_iphdr {
	const uint8_t *sgid, *dgid;
	uint16_t sport, dport;
	uint16_t udp_len;  /* 8 + BTH .. ICRC inclusive */
	uint16_t ip_id;    /* IPv4 Identification (covered by the ICRC, §4.2) */
	uint16_t ip_frag;  /* IPv4 flags + fragment offset, 0x4000 = DF */
};

/* CRC state (zlib's finalised form) after the 8×0xFF prefix and the masked
 * IP and UDP headers. */
uint32_t icrc_begin(const struct icrc_iphdr *h);
/* Feed the BTH (with byte 4 masked) and everything after it. */
uint32_t icrc_bth(uint32_t crc, const uint8_t *bth, size_t len);
/* The ICRC of a whole packet: the masked IP and UDP headers of h, then the
 * n parts in order (BTH .. pad, without the ICRC).  The first part starts
 * with the BTH and holds at least its 12 bytes. */
uint32_t icrc_packet(const struct icrc_iphdr *h, const struct iovec *v, int n);

/* The ICRC trailer is the CRC value least-significant byte first (§4.4). */
static inline void icrc_store(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline uint32_t icrc_load(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A UDP socket does not show the receiver the IPv4 Identification field, yet
 * the ICRC covers it (§4.2).  uroce sends ID 0; rxe sends the kernel's IP-ID.
 * Given the ICRC computed with ID 0 over a packet whose covered stream is
 * `covered_len` bytes (prefix + IP + UDP + BTH..pad) and the received ICRC,
 * find the one ID that makes them agree.  Returns 0 and sets *id, or -1 when
 * no 16-bit ID explains the difference (the packet is corrupt).  The check
 * keeps 16 of its 32 bits for such packets. */
int icrc_solve_ipv4_id(uint32_t icrc_id0, uint32_t icrc_rx, size_t covered_len, uint16_t *id);

#endif
