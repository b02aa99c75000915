#include "wr.h"

const struct uroce_wr_info uroce_wr_info[UROCE_WR_TABLE_SIZE] = {
#define X(op, wc, kind, flags, types, first, middle, last, only, ud) \
	[op] = { kind, wc, flags, types, first, middle, last, only, ud },
	UROCE_WR_OPCODES(X)
#undef X
};
