/* Builds the per-opcode header layout from the one table in opcode.h, in the
 * wire order of shared/docs/roce-wire.md §2.3:
 * BTH, DETH, RETH|AtomicETH|AETH, AtomicAckETH, ImmDt|IETH, payload. */
#include "opcode.h"

#define LAYOUT(m) \
	.off_deth = ((m) & OPF_DETH) ? BTH_LEN : 0, \
	.off_reth = ((m) & OPF_RETH) ? BTH_LEN + (((m) & OPF_DETH) ? DETH_LEN : 0) : 0, \
	.off_atmeth = ((m) & OPF_ATMETH) ? BTH_LEN : 0, \
	.off_aeth = ((m) & OPF_AETH) ? BTH_LEN : 0, \
	.off_atmack = ((m) & OPF_ATMACK) ? BTH_LEN + AETH_LEN : 0, \
	.off_imm = ((m) & OPF_IMMDT) ? BTH_LEN + (((m) & OPF_DETH) ? DETH_LEN : 0) + \
		(((m) & OPF_RETH) ? RETH_LEN : 0) : 0, \
	.off_ieth = ((m) & OPF_IETH) ? BTH_LEN : 0, \
	.hdr_len = BTH_LEN + (((m) & OPF_DETH) ? DETH_LEN : 0) + (((m) & OPF_RETH) ? RETH_LEN : 0) + \
		(((m) & OPF_AETH) ? AETH_LEN : 0) + (((m) & OPF_ATMETH) ? ATMETH_LEN : 0) + \
		(((m) & OPF_ATMACK) ? ATMACK_LEN : 0) + (((m) & OPF_IMMDT) ? IMMDT_LEN : 0) + \
		(((m) & OPF_IETH) ? IETH_LEN : 0) + (((m) & OPF_CNP) ? CNP_RSVD_LEN : 0)

const struct uroce_opinfo uroce_opinfo[256] = {
#define X(nm, val, m) [val] = { .name = #nm, .mask = (m), LAYOUT(m) },
	UROCE_OPCODES(X)
#undef X
};
