/* The one opcode table (shared/docs/roce-wire.md §3).
 *
 * Each row: name, opcode value, header mask, payload kind.  Everything the
 * transport needs to know about an opcode (which extension headers follow the
 * BTH, whether it starts/ends a message, what kind of operation it is) comes
 * from this table; code tests mask bits instead of switching on opcodes. */
#ifndef UROCE_OPCODE_H
#define UROCE_OPCODE_H

#include <stdint.h>

/* Header presence and meaning bits. */
enum {
	OPF_RETH = 1u << 0,
	OPF_AETH = 1u << 1,
	OPF_ATMETH = 1u << 2,
	OPF_ATMACK = 1u << 3,
	OPF_IMMDT = 1u << 4,
	OPF_IETH = 1u << 5,
	OPF_DETH = 1u << 6,
	OPF_PAYLOAD = 1u << 7, /* may carry payload */
	OPF_REQ = 1u << 8,     /* requester -> responder */
	OPF_RESP = 1u << 9,    /* responder -> requester */
	OPF_SEND = 1u << 10,
	OPF_WRITE = 1u << 11,
	OPF_READ = 1u << 12,   /* READ request or READ response */
	OPF_ATOMIC = 1u << 13, /* atomic request or atomic ack */
	OPF_ACK = 1u << 14,    /* plain ACKNOWLEDGE */
	OPF_FIRST = 1u << 15,
	OPF_MIDDLE = 1u << 16,
	OPF_LAST = 1u << 17,
	OPF_ONLY = OPF_FIRST | OPF_LAST,
	OPF_RC = 1u << 18,
	OPF_UC = 1u << 19,
	OPF_UD = 1u << 20,
	OPF_CNP = 1u << 21,
	OPF_ATOMIC_WRITE = 1u << 22, /* ATOMIC_WRITE request: RETH and 8 bytes of payload */
};

/* X(name, value, mask) */
#define UROCE_OPCODES(X) \
	X(RC_SEND_FIRST, 0x00, OPF_RC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_FIRST) \
	X(RC_SEND_MIDDLE, 0x01, OPF_RC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_MIDDLE) \
	X(RC_SEND_LAST, 0x02, OPF_RC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_LAST) \
	X(RC_SEND_LAST_IMM, 0x03, OPF_RC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_LAST | OPF_IMMDT) \
	X(RC_SEND_ONLY, 0x04, OPF_RC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_ONLY) \
	X(RC_SEND_ONLY_IMM, 0x05, OPF_RC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_ONLY | OPF_IMMDT) \
	X(RC_WRITE_FIRST, 0x06, OPF_RC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_FIRST | OPF_RETH) \
	X(RC_WRITE_MIDDLE, 0x07, OPF_RC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_MIDDLE) \
	X(RC_WRITE_LAST, 0x08, OPF_RC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_LAST) \
	X(RC_WRITE_LAST_IMM, 0x09, OPF_RC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_LAST | OPF_IMMDT) \
	X(RC_WRITE_ONLY, 0x0A, OPF_RC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_ONLY | OPF_RETH) \
	X(RC_WRITE_ONLY_IMM, 0x0B, OPF_RC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_ONLY | OPF_RETH | OPF_IMMDT) \
	X(RC_READ_REQUEST, 0x0C, OPF_RC | OPF_REQ | OPF_READ | OPF_ONLY | OPF_RETH) \
	X(RC_READ_RESP_FIRST, 0x0D, OPF_RC | OPF_RESP | OPF_READ | OPF_PAYLOAD | OPF_FIRST | OPF_AETH) \
	X(RC_READ_RESP_MIDDLE, 0x0E, OPF_RC | OPF_RESP | OPF_READ | OPF_PAYLOAD | OPF_MIDDLE) \
	X(RC_READ_RESP_LAST, 0x0F, OPF_RC | OPF_RESP | OPF_READ | OPF_PAYLOAD | OPF_LAST | OPF_AETH) \
	X(RC_READ_RESP_ONLY, 0x10, OPF_RC | OPF_RESP | OPF_READ | OPF_PAYLOAD | OPF_ONLY | OPF_AETH) \
	X(RC_ACK, 0x11, OPF_RC | OPF_RESP | OPF_ACK | OPF_ONLY | OPF_AETH) \
	X(RC_ATOMIC_ACK, 0x12, OPF_RC | OPF_RESP | OPF_ATOMIC | OPF_ONLY | OPF_AETH | OPF_ATMACK) \
	X(RC_CMP_SWAP, 0x13, OPF_RC | OPF_REQ | OPF_ATOMIC | OPF_ONLY | OPF_ATMETH) \
	X(RC_FETCH_ADD, 0x14, OPF_RC | OPF_REQ | OPF_ATOMIC | OPF_ONLY | OPF_ATMETH) \
	X(RC_SEND_LAST_INV, 0x16, OPF_RC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_LAST | OPF_IETH) \
	X(RC_SEND_ONLY_INV, 0x17, OPF_RC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_ONLY | OPF_IETH) \
	X(RC_ATOMIC_WRITE, 0x1D, OPF_RC | OPF_REQ | OPF_ATOMIC_WRITE | OPF_PAYLOAD | OPF_ONLY | OPF_RETH) \
	X(UC_SEND_FIRST, 0x20, OPF_UC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_FIRST) \
	X(UC_SEND_MIDDLE, 0x21, OPF_UC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_MIDDLE) \
	X(UC_SEND_LAST, 0x22, OPF_UC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_LAST) \
	X(UC_SEND_LAST_IMM, 0x23, OPF_UC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_LAST | OPF_IMMDT) \
	X(UC_SEND_ONLY, 0x24, OPF_UC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_ONLY) \
	X(UC_SEND_ONLY_IMM, 0x25, OPF_UC | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_ONLY | OPF_IMMDT) \
	X(UC_WRITE_FIRST, 0x26, OPF_UC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_FIRST | OPF_RETH) \
	X(UC_WRITE_MIDDLE, 0x27, OPF_UC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_MIDDLE) \
	X(UC_WRITE_LAST, 0x28, OPF_UC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_LAST) \
	X(UC_WRITE_LAST_IMM, 0x29, OPF_UC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_LAST | OPF_IMMDT) \
	X(UC_WRITE_ONLY, 0x2A, OPF_UC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_ONLY | OPF_RETH) \
	X(UC_WRITE_ONLY_IMM, 0x2B, OPF_UC | OPF_REQ | OPF_WRITE | OPF_PAYLOAD | OPF_ONLY | OPF_RETH | OPF_IMMDT) \
	X(UD_SEND_ONLY, 0x64, OPF_UD | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_ONLY | OPF_DETH) \
	X(UD_SEND_ONLY_IMM, 0x65, OPF_UD | OPF_REQ | OPF_SEND | OPF_PAYLOAD | OPF_ONLY | OPF_DETH | OPF_IMMDT) \
	X(CNP, 0x81, OPF_CNP)

enum uroce_opcode {
#define X(name, val, mask) OP_##name = val,
	UROCE_OPCODES(X)
#undef X
};

/* Extension header sizes (§2.2). */
enum {
	BTH_LEN = 12,
	RETH_LEN = 16,
	AETH_LEN = 4,
	ATMETH_LEN = 28,
	ATMACK_LEN = 8,
	IMMDT_LEN = 4,
	IETH_LEN = 4,
	DETH_LEN = 8,
	CNP_RSVD_LEN = 16,
	ICRC_LEN = 4,
};

struct uroce_opinfo {
	const char *name;  /* NULL: no such opcode; packets carrying it are dropped */
	uint32_t mask;
	uint8_t hdr_len;   /* BTH + every extension header */
	/* offsets from the start of the BTH, 0 when absent */
	uint8_t off_deth, off_reth, off_aeth, off_atmeth, off_atmack, off_imm, off_ieth;
};

extern const struct uroce_opinfo uroce_opinfo[256];

static inline const struct uroce_opinfo *opinfo(uint8_t op)
{
	return &uroce_opinfo[op];
}

#endif
