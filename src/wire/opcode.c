/* Builds the per-opcode header layout from the one table in opcode.h, in the
 * wire order of shared/docs/roce-wire.md §2.3:
 * BTH, XRCETH, DETH, RETH|AtomicETH|AETH, AtomicAckETH, ImmDt|IETH, payload. */
#include "opcode.h"

/* BTH and the XRCETH that follows it on XRC requests: where the rest starts */
#define BASE(m) (BTH_LEN + (((m) & OPF_XRCETH) ? XRCETH_LEN : 0))
#define LAYOUT(m) \
	.off_xrceth = ((m) & OPF_XRCETH) ? BTH_LEN : 0, \
	.off_deth = ((m) & OPF_DETH) ? BASE(m) : 0, \
	.off_reth = ((m) & OPF_RETH) ? BASE(m) + (((m) & OPF_DETH) ? DETH_LEN : 0) : 0, \
	.off_atmeth = ((m) & OPF_ATMETH) ? BASE(m) : 0, \
	.off_aeth = ((m) & OPF_AETH) ? BASE(m) : 0, \
	.off_atmack = ((m) & OPF_ATMACK) ? BASE(m) + AETH_LEN : 0, \
	.off_imm = ((m) & OPF_IMMDT) ? BASE(m) + (((m) & OPF_DETH) ? DETH_LEN : 0) + \
		(((m) & OPF_RETH) ? RETH_LEN : 0) : 0, \
	.off_ieth = ((m) & OPF_IETH) ? BASE(m) : 0, \
	.hdr_len = BASE(m) + (((m) & OPF_DETH) ? DETH_LEN : 0) + (((m) & OPF_RETH) ? RETH_LEN : 0) + \
		(((m) & OPF_AETH) ? AETH_LEN : 0) + (((m) & OPF_ATMETH) ? ATMETH_LEN : 0) + \
		(((m) & OPF_ATMACK) ? ATMACK_LEN : 0) + (((m) & OPF_IMMDT) ? IMMDT_LEN : 0) + \
		(((m) & OPF_IETH) ? IETH_LEN : 0) + (((m) & OPF_CNP) ? CNP_RSVD_LEN : 0)

const struct uroce_opinfo uroce_opinfo[256] = {
#define X(nm, val, m) [val] = { .name = #nm, .mask = (m), LAYOUT(m) },
	UROCE_OPCODES(X)
#undef X
};
