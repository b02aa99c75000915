/* Header accessors: every wire field is read and written here, and byte order
 * is converted here and nowhere else (shared/docs/roce-wire.md §2). */
#ifndef UROCE_HDR_H
#define UROCE_HDR_H

#include <stdint.h>
#include <string.h>
#include <endian.h>
#include "opcode.h"

#define ROCE_UDP_PORT 4791
#define ROCE_PKEY_DEFAULT 0xFFFF
#define PSN_MASK 0xFFFFFFu

static inline uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return be16toh(v); }
static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return be32toh(v); }
static inline uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return be64toh(v); }
static inline void st16(uint8_t *p, uint16_t v) { v = htobe16(v); memcpy(p, &v, 2); }
static inline void st32(uint8_t *p, uint32_t v) { v = htobe32(v); memcpy(p, &v, 4); }
static inline void st64(uint8_t *p, uint64_t v) { v = htobe64(v); memcpy(p, &v, 8); }

/* PSN arithmetic on the 24-bit circle (§6.1): >0 when a is after b. */
static inline int32_t psn_cmp(uint32_t a, uint32_t b)
{
	return (int32_t)((a - b) << 8) >> 8;
}
static inline uint32_t psn_add(uint32_t a, uint32_t n) { return (a + n) & PSN_MASK; }

/* --- BTH (§2.1) --- */
static inline uint8_t bth_opcode(const uint8_t *b) { return b[0]; }
static inline int bth_se(const uint8_t *b) { return b[1] >> 7; }
static inline int bth_migreq(const uint8_t *b) { return (b[1] >> 6) & 1; }
static inline unsigned bth_pad(const uint8_t *b) { return (b[1] >> 4) & 3; }
static inline unsigned bth_tver(const uint8_t *b) { return b[1] & 0xF; }
static inline uint16_t bth_pkey(const uint8_t *b) { return ld16(b + 2); }
static inline int bth_becn(const uint8_t *b) { return (b[4] >> 6) & 1; }
static inline uint32_t bth_qpn(const uint8_t *b) { return ld32(b + 4) & 0xFFFFFF; }
static inline int bth_ackreq(const uint8_t *b) { return b[8] >> 7; }
static inline uint32_t bth_psn(const uint8_t *b) { return ld32(b + 8) & PSN_MASK; }

static inline void bth_set(uint8_t *b, uint8_t opcode, int se, unsigned pad, uint32_t dqpn,
			   int ackreq, uint32_t psn)
{
	b[0] = opcode;
	b[1] = (uint8_t)((se ? 0x80 : 0) | (pad & 3) << 4); /* M=0, TVer=0 */
	st16(b + 2, ROCE_PKEY_DEFAULT);
	st32(b + 4, dqpn & 0xFFFFFF); /* FECN=BECN=0 */
	st32(b + 8, (ackreq ? 0x80000000u : 0) | (psn & PSN_MASK));
}
static inline void bth_set_becn(uint8_t *b) { b[4] |= 0x40; }

/* --- RETH --- */
static inline uint64_t reth_va(const uint8_t *h) { return ld64(h); }
static inline uint32_t reth_rkey(const uint8_t *h) { return ld32(h + 8); }
static inline uint32_t reth_len(const uint8_t *h) { return ld32(h + 12); }
static inline void reth_set(uint8_t *h, uint64_t va, uint32_t rkey, uint32_t len)
{
	st64(h, va); st32(h + 8, rkey); st32(h + 12, len);
}

/* --- AETH (§5) --- */
enum {
	AETH_ACK = 0x00,
	AETH_RNR_NAK = 0x20,
	AETH_NAK = 0x60,
	AETH_TYPE_MASK = 0x60,
	AETH_ACK_UNLIMITED = 0x1F,
	AETH_NAK_PSN_SEQ = 0x60,
	AETH_NAK_INV_REQ = 0x61,
	AETH_NAK_REM_ACCESS = 0x62,
	AETH_NAK_REM_OP = 0x63,
};
static inline uint8_t aeth_syndrome(const uint8_t *h) { return h[0]; }
static inline uint32_t aeth_msn(const uint8_t *h) { return ld32(h) & 0xFFFFFF; }
static inline void aeth_set(uint8_t *h, uint8_t syndrome, uint32_t msn)
{
	st32(h, (uint32_t)syndrome << 24 | (msn & 0xFFFFFF));
}

/* --- AtomicETH / AtomicAckETH --- */
static inline uint64_t atmeth_va(const uint8_t *h) { return ld64(h); }
static inline uint32_t atmeth_rkey(const uint8_t *h) { return ld32(h + 8); }
static inline uint64_t atmeth_swap_add(const uint8_t *h) { return ld64(h + 12); }
static inline uint64_t atmeth_compare(const uint8_t *h) { return ld64(h + 20); }
static inline void atmeth_set(uint8_t *h, uint64_t va, uint32_t rkey, uint64_t swap_add, uint64_t cmp)
{
	st64(h, va); st32(h + 8, rkey); st64(h + 12, swap_add); st64(h + 20, cmp);
}
static inline uint64_t atmack_orig(const uint8_t *h) { return ld64(h); }
static inline void atmack_set(uint8_t *h, uint64_t orig) { st64(h, orig); }

/* --- DETH --- */
static inline uint32_t deth_qkey(const uint8_t *h) { return ld32(h); }
static inline uint32_t deth_sqpn(const uint8_t *h) { return ld32(h + 4) & 0xFFFFFF; }
static inline void deth_set(uint8_t *h, uint32_t qkey, uint32_t sqpn)
{
	st32(h, qkey); st32(h + 4, sqpn & 0xFFFFFF);
}

/* --- XRCETH (§2.2): the XRC SRQ number, on every XRC request --- */
static inline uint32_t xrceth_srqn(const uint8_t *h) { return ld32(h) & 0xFFFFFF; }
static inline void xrceth_set(uint8_t *h, uint32_t srqn) { st32(h, srqn & 0xFFFFFF); }

/* --- ImmDt / IETH: ImmDt bytes equal the verbs __be32 bytes, no swap (§2.2). */
static inline uint32_t immdt_raw(const uint8_t *h) { uint32_t v; memcpy(&v, h, 4); return v; }
static inline void immdt_set_raw(uint8_t *h, uint32_t be_imm) { memcpy(h, &be_imm, 4); }
static inline uint32_t ieth_rkey(const uint8_t *h) { return ld32(h); }
static inline void ieth_set(uint8_t *h, uint32_t rkey) { st32(h, rkey); }

/* Pad so that payload + pad is a multiple of 4 (§7). */
static inline unsigned pad_for(uint32_t len) { return (4 - (len & 3)) & 3; }

#endif
