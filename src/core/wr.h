/* The one work-request opcode table: what each ibv_wr_opcode means, read by
 * posting (sq/post.c), the requester, the completer and completion delivery
 * instead of switching on opcodes (IBA 10.8.2, roce-wire.md §3, §7).
 *
 * X(WR opcode, completion opcode, kind, flags, QP types,
 *   wire opcodes of an RC message's FIRST, MIDDLE, LAST and ONLY packet
 *   -- UC's are RC's | WR_UC_BASE --, the UD opcode or 0)
 * READ, atomics and ATOMIC_WRITE are one request packet whatever the
 * message length: their four wire opcodes are that request's.  The QP
 * types of LOCAL_INV (RC) and BIND_MW (RC, UC) are rxe's (rxe_opcode.c). */
#ifndef UROCE_CORE_WR_H
#define UROCE_CORE_WR_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>
#include "../wire/opcode.h"

/* WRK_LOCAL: executed by the requester in send-queue order, no packet and
 * no PSN (rxe's rxe_do_local_ops): the memory-window operations of mem/mw.h */
enum wr_kind { WRK_NONE, WRK_SEND, WRK_WRITE, WRK_READ, WRK_ATOMIC, WRK_ATOMIC_WRITE, WRK_LOCAL };

enum {
	WRF_IMM = 1u << 0,         /* carries immediate data (wr->imm_data) */
	WRF_INV = 1u << 1,         /* carries an rkey to invalidate (wr->invalidate_rkey) */
	WRF_RDMA = 1u << 2,        /* wr.rdma: remote address and rkey */
	WRF_ATOMIC_ARGS = 1u << 3, /* wr.atomic: remote address, rkey, compare/add, swap */
	WRF_RESPONSE = 1u << 4,    /* answered by a response that writes local memory: needs
				    * local write access, never inline */
	WRF_WC_LEN = 1u << 5,      /* the completion reports the message length */
	WRF_RD_ATOMIC = 1u << 6,   /* answered by its own response (a READ response or an atomic
				    * ACK), never by a plain ACK: counts against max_rd_atomic, and
				    * an ACK beyond it is an implied NAK (§6.3, §6.6) */
};

#define WR_QPT(t) (1u << (t))
/* an XRC INI QP takes what an RC QP takes (IBA A14: XRC is RC's transport) */
#define WR_QPT_RCX (WR_QPT(IBV_QPT_RC) | WR_QPT(IBV_QPT_XRC_SEND))
#define WR_QPT_RC_UC_UD (WR_QPT_RCX | WR_QPT(IBV_QPT_UC) | WR_QPT(IBV_QPT_UD))
#define WR_QPT_RC_UC (WR_QPT_RCX | WR_QPT(IBV_QPT_UC))
#define WR_UC_BASE 0x20  /* UC opcodes are RC's with this bit (§3) */

#define UROCE_WR_OPCODES(X) \
	X(IBV_WR_SEND, IBV_WC_SEND, WRK_SEND, 0, WR_QPT_RC_UC_UD, \
	  OP_RC_SEND_FIRST, OP_RC_SEND_MIDDLE, OP_RC_SEND_LAST, OP_RC_SEND_ONLY, OP_UD_SEND_ONLY) \
	X(IBV_WR_SEND_WITH_IMM, IBV_WC_SEND, WRK_SEND, WRF_IMM, WR_QPT_RC_UC_UD, \
	  OP_RC_SEND_FIRST, OP_RC_SEND_MIDDLE, OP_RC_SEND_LAST_IMM, OP_RC_SEND_ONLY_IMM, OP_UD_SEND_ONLY_IMM) \
	X(IBV_WR_SEND_WITH_INV, IBV_WC_SEND, WRK_SEND, WRF_INV, WR_QPT_RCX, \
	  OP_RC_SEND_FIRST, OP_RC_SEND_MIDDLE, OP_RC_SEND_LAST_INV, OP_RC_SEND_ONLY_INV, 0) \
	X(IBV_WR_RDMA_WRITE, IBV_WC_RDMA_WRITE, WRK_WRITE, WRF_RDMA, WR_QPT_RC_UC, \
	  OP_RC_WRITE_FIRST, OP_RC_WRITE_MIDDLE, OP_RC_WRITE_LAST, OP_RC_WRITE_ONLY, 0) \
	X(IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WC_RDMA_WRITE, WRK_WRITE, WRF_RDMA | WRF_IMM, WR_QPT_RC_UC, \
	  OP_RC_WRITE_FIRST, OP_RC_WRITE_MIDDLE, OP_RC_WRITE_LAST_IMM, OP_RC_WRITE_ONLY_IMM, 0) \
	X(IBV_WR_RDMA_READ, IBV_WC_RDMA_READ, WRK_READ, WRF_RDMA | WRF_RESPONSE | WRF_RD_ATOMIC | WRF_WC_LEN, WR_QPT_RCX, \
	  OP_RC_READ_REQUEST, OP_RC_READ_REQUEST, OP_RC_READ_REQUEST, OP_RC_READ_REQUEST, 0) \
	X(IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WC_COMP_SWAP, WRK_ATOMIC, WRF_ATOMIC_ARGS | WRF_RESPONSE | WRF_RD_ATOMIC | WRF_WC_LEN, \
	  WR_QPT_RCX, OP_RC_CMP_SWAP, OP_RC_CMP_SWAP, OP_RC_CMP_SWAP, OP_RC_CMP_SWAP, 0) \
	X(IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WC_FETCH_ADD, WRK_ATOMIC, WRF_ATOMIC_ARGS | WRF_RESPONSE | WRF_RD_ATOMIC | WRF_WC_LEN, \
	  WR_QPT_RCX, OP_RC_FETCH_ADD, OP_RC_FETCH_ADD, OP_RC_FETCH_ADD, OP_RC_FETCH_ADD, 0) \
	X(IBV_WR_ATOMIC_WRITE, IBV_WC_ATOMIC_WRITE, WRK_ATOMIC_WRITE, WRF_RDMA | WRF_RD_ATOMIC, WR_QPT(IBV_QPT_RC), \
	  OP_RC_ATOMIC_WRITE, OP_RC_ATOMIC_WRITE, OP_RC_ATOMIC_WRITE, OP_RC_ATOMIC_WRITE, 0) \
	X(IBV_WR_LOCAL_INV, IBV_WC_LOCAL_INV, WRK_LOCAL, WRF_INV, WR_QPT(IBV_QPT_RC), 0, 0, 0, 0, 0) \
	X(IBV_WR_BIND_MW, IBV_WC_BIND_MW, WRK_LOCAL, 0, WR_QPT_RC_UC, 0, 0, 0, 0, 0)

struct uroce_wr_info {
	enum wr_kind kind;              /* WRK_NONE: not offered */
	enum ibv_wc_opcode wc_opcode;
	uint32_t flags;                 /* WRF_* */
	uint32_t qp_types;              /* WR_QPT() of the QP types that take it */
	uint8_t first, middle, last, only; /* RC wire opcodes */
	uint8_t ud;                     /* UD wire opcode, 0 = none */
};

#define UROCE_WR_TABLE_SIZE 16
extern const struct uroce_wr_info uroce_wr_info[UROCE_WR_TABLE_SIZE];

/* The row of an opcode; one that uroce does not offer has kind WRK_NONE. */
static inline const struct uroce_wr_info *wr_info(uint32_t op)
{
	static const struct uroce_wr_info none = { .kind = WRK_NONE };
	return op < UROCE_WR_TABLE_SIZE ? &uroce_wr_info[op] : &none;
}

static inline bool wr_allowed(uint32_t op, enum ibv_qp_type t)
{
	const struct uroce_wr_info *i = wr_info(op);
	return i->kind != WRK_NONE && (i->qp_types & WR_QPT(t));
}

/* The wire opcode of packet i of n of an RC or UC message (§7). */
static inline uint8_t wr_packet_opcode(const struct uroce_wr_info *i, uint32_t pkt, uint32_t n, bool uc)
{
	bool first = pkt == 0, last = pkt == n - 1;
	uint8_t op = first && last ? i->only : first ? i->first : last ? i->last : i->middle;
	return (uint8_t)(uc ? op | WR_UC_BASE : op);
}

#endif
