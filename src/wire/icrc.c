/* ICRC over the RoCEv2 packet (shared/docs/roce-wire.md §4), computed with
 * ISA-L's PCLMUL CRC-32 (crc32_gzip_refl: zlib's CRC-32, finalised form). */
#include "icrc.h"
#include "opcode.h"
#include <string.h>
#include <immintrin.h>
#include <isa-l/crc.h>
#include <zlib.h>

/* ISA-L's CRC on a CPU with AVX-512 (crc32_gzip_refl_by16_10) returns
 * with the upper halves of the vector registers dirty, no vzeroupper:
 * every legacy-SSE instruction after it (glibc's, the compiler's own xmm
 * moves) then pays the AVX-SSE transition.  Clearing them after each call
 * took ib_write_bw 1 MiB between two namespaces at MTU 1500 from
 * 1.9-2.0 GB/s to 2.7-3.0 GB/s (docs/architecture.md "Where a packet's
 * time goes").  Only a CPU with AVX has the instruction, or the state. */
__attribute__((target("avx"))) static void zero_upper(void)
{
	_mm256_zeroupper();
}

static uint32_t crc32_clean(uint32_t seed, const uint8_t *b, uint64_t n)
{
	uint32_t c = crc32_gzip_refl(seed, b, n);
	if (__builtin_cpu_supports("avx"))
		zero_upper();
	return c;
}

/* zlib-form CRC of the 8-byte 0xFF prefix: crc32(0, ff*8) (§4.3). */
#define ICRC_PREFIX_SEED 0x2144DF1Cu

/* The 8-byte 0xFF prefix is in the seed; writes the masked IP and UDP
 * headers (§4.2) to b and returns their length: 28 (IPv4) or 48 (IPv6). */
static size_t icrc_pseudo(const struct icrc_iphdr *h, uint8_t *b)
{
	size_t n;

	if (gid_is_ipv4(h->sgid)) {
		/* IPv4 with TOS, TTL and checksum masked (§4.2). */
		uint16_t tot = (uint16_t)(20 + h->udp_len);
		b[0] = 0x45; b[1] = 0xFF;
		b[2] = (uint8_t)(tot >> 8); b[3] = (uint8_t)tot;
		b[4] = (uint8_t)(h->ip_id >> 8); b[5] = (uint8_t)h->ip_id;
		b[6] = (uint8_t)(h->ip_frag >> 8); b[7] = (uint8_t)h->ip_frag;
		b[8] = 0xFF; b[9] = 17; b[10] = 0xFF; b[11] = 0xFF;
		memcpy(b + 12, h->sgid + 12, 4);
		memcpy(b + 16, h->dgid + 12, 4);
		n = 20;
	} else {
		/* IPv6 with traffic class, flow label and hop limit masked. */
		b[0] = 0x6F; b[1] = 0xFF; b[2] = 0xFF; b[3] = 0xFF;
		b[4] = (uint8_t)(h->udp_len >> 8); b[5] = (uint8_t)h->udp_len;
		b[6] = 17; b[7] = 0xFF;
		memcpy(b + 8, h->sgid, 16);
		memcpy(b + 24, h->dgid, 16);
		n = 40;
	}
	uint8_t *u = b + n;
	u[0] = (uint8_t)(h->sport >> 8); u[1] = (uint8_t)h->sport;
	u[2] = (uint8_t)(h->dport >> 8); u[3] = (uint8_t)h->dport;
	u[4] = (uint8_t)(h->udp_len >> 8); u[5] = (uint8_t)h->udp_len;
	u[6] = 0xFF; u[7] = 0xFF; /* UDP checksum masked */
	return n + 8;
}

uint32_t icrc_begin(const struct icrc_iphdr *h)
{
	uint8_t b[48];

	return crc32_clean(ICRC_PREFIX_SEED, b, icrc_pseudo(h, b));
}

uint32_t icrc_bth(uint32_t crc, const uint8_t *bth, size_t len)
{
	uint8_t m[BTH_LEN];

	memcpy(m, bth, BTH_LEN);
	m[4] = 0xFF; /* FECN, BECN and reserved bits are variant (§4.2) */
	crc = crc32_clean(crc, m, BTH_LEN);
	return crc32_clean(crc, bth + BTH_LEN, len - BTH_LEN);
}

/* A packet this short is gathered behind its IP/UDP headers and takes one
 * CRC call: below 256 bytes ISA-L's PCLMUL CRC costs 10-18 ns a call, little
 * of it for the bytes, so copying the pieces together and making one call
 * beats one call per piece (headers, BTH, the rest of the headers, payload);
 * the figures are in bench/README.md. */
#define ICRC_GATHER_MAX 512

uint32_t icrc_packet(const struct icrc_iphdr *h, const struct iovec *v, int n)
{
	_Alignas(64) uint8_t b[ICRC_GATHER_MAX];
	size_t hl = icrc_pseudo(h, b), total = hl;

	for (int i = 0; i < n; i++)
		total += v[i].iov_len;
	if (total <= sizeof(b)) {
		size_t at = hl;
		for (int i = 0; i < n; i++) {
			memcpy(b + at, v[i].iov_base, v[i].iov_len);
			at += v[i].iov_len;
		}
		b[hl + 4] = 0xFF; /* BTH byte 4, as in icrc_bth */
		return crc32_clean(ICRC_PREFIX_SEED, b, total);
	}
	/* behind the IP/UDP headers, one call: the headers (a sent packet's
	 * v[0], at most TX_HDR_MAX), or the BTH of a part too long to gather
	 * (a received packet is one part); then the rest of that part, the
	 * payload and the pad, a call each that has bytes */
	size_t take = hl + v[0].iov_len <= sizeof(b) ? v[0].iov_len : BTH_LEN;
	memcpy(b + hl, v[0].iov_base, take);
	b[hl + 4] = 0xFF; /* BTH byte 4, as in icrc_bth */
	uint32_t crc = crc32_clean(ICRC_PREFIX_SEED, b, hl + take);
	if (take < v[0].iov_len)
		crc = crc32_clean(crc, (const uint8_t *)v[0].iov_base + take, v[0].iov_len - take);
	for (int i = 1; i < n; i++)
		if (v[i].iov_len)
			crc = crc32_clean(crc, v[i].iov_base, v[i].iov_len);
	return crc;
}

/* The CRC is affine over GF(2): flipping bits of the ID flips the result by
 * L(delta), a linear function of the 16 ID bits that depends only on how many
 * bytes follow the ID.  Build the 16 columns of L and solve by elimination. */
int icrc_solve_ipv4_id(uint32_t icrc_id0, uint32_t icrc_rx, size_t covered_len, uint16_t *id)
{
	/* The ID sits at bytes 12..13 of the covered stream (8 prefix + 4). */
	const size_t after = covered_len - 14;
	const uLong op = crc32_combine_gen((z_off_t)after);
	const uint8_t zero2[2] = { 0, 0 };
	const uLong z = crc32(0, zero2, 2);
	uint32_t col[16], target = icrc_id0 ^ icrc_rx;
	uint16_t combo[16];

	for (int i = 0; i < 16; i++) {
		uint16_t v = (uint16_t)(1u << i);
		uint8_t d[2] = { (uint8_t)(v >> 8), (uint8_t)v };
		/* linear part of the CRC of the 2-byte delta, shifted past `after` bytes */
		col[i] = (uint32_t)crc32_combine_op(crc32(0, d, 2) ^ z, 0, op);
		combo[i] = v;
	}
	/* Gaussian elimination: reduce target by the basis. */
	for (int bit = 31, row = 0; bit >= 0 && row < 16; bit--) {
		int piv = -1;
		for (int i = row; i < 16; i++)
			if (col[i] >> bit & 1) { piv = i; break; }
		if (piv < 0)
			continue;
		uint32_t tc = col[piv]; col[piv] = col[row]; col[row] = tc;
		uint16_t tm = combo[piv]; combo[piv] = combo[row]; combo[row] = tm;
		for (int i = 0; i < 16; i++)
			if (i != row && (col[i] >> bit & 1)) { col[i] ^= col[row]; combo[i] ^= combo[row]; }
		row++;
	}
	uint16_t result = 0;
	for (int i = 0; i < 16; i++) {
		if (!col[i])
			continue;
		int top = 31 - __builtin_clz(col[i]);
		if (target >> top & 1) { target ^= col[i]; result ^= combo[i]; }
	}
	if (target)
		return -1;
	*id = result;
	return 0;
}
