/* The QP state machine: which transitions exist and which attributes each
 * requires or allows, per transport (IBA 11.2.5 tables, as ib_core's
 * qp_state_table implements them).  One table; modify_qp only consults it. */
#include "qp_state.h"

#define RC_UC_INIT (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define UD_INIT (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)

/* T_XI: XRC INI (IBV_QPT_XRC_SEND), T_XT: XRC TGT (IBV_QPT_XRC_RECV): RC's
 * attributes, the INI without the responder's and the TGT without the
 * requester's retry ones (ib_core's qp_state_table rows for XRC) */
enum { T_RC, T_UC, T_UD, T_XI, T_XT, T__N };

struct transition {
	bool valid;
	unsigned req[T__N], opt[T__N];
};

static const struct transition table[IBV_QPS_ERR + 1][IBV_QPS_ERR + 1] = {
	[IBV_QPS_RESET] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_INIT] = { .valid = true, .req = { [T_RC] = RC_UC_INIT, [T_UC] = RC_UC_INIT, [T_UD] = UD_INIT,
							   [T_XI] = RC_UC_INIT, [T_XT] = RC_UC_INIT } },
	},
	[IBV_QPS_INIT] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
		[IBV_QPS_INIT] = { .valid = true, .opt = { [T_RC] = RC_UC_INIT, [T_UC] = RC_UC_INIT, [T_UD] = UD_INIT,
							   [T_XI] = RC_UC_INIT, [T_XT] = RC_UC_INIT } },
		[IBV_QPS_RTR] = { .valid = true,
			.req = { [T_RC] = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
				 [T_UC] = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
				 [T_XI] = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
				 [T_XT] = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER },
			.opt = { [T_RC] = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
				 [T_UC] = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
				 [T_UD] = IBV_QP_PKEY_INDEX | IBV_QP_QKEY,
				 [T_XI] = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
				 [T_XT] = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX } },
	},
	[IBV_QPS_RTR] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
		[IBV_QPS_RTS] = { .valid = true,
			.req = { [T_RC] = IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT,
				 [T_UC] = IBV_QP_SQ_PSN, [T_UD] = IBV_QP_SQ_PSN,
				 [T_XI] = IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT,
				 [T_XT] = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT },
			.opt = { [T_RC] = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
					  IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE,
				 [T_UC] = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE,
				 [T_UD] = IBV_QP_CUR_STATE | IBV_QP_QKEY,
				 [T_XI] = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE,
				 [T_XT] = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
					  IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE } },
	},
	[IBV_QPS_RTS] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
		[IBV_QPS_RTS] = { .valid = true,
			.opt = { [T_RC] = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH |
					  IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER,
				 [T_UC] = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE,
				 [T_UD] = IBV_QP_CUR_STATE | IBV_QP_QKEY,
				 [T_XI] = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE,
				 [T_XT] = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH |
					  IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER } },
		[IBV_QPS_SQD] = { .valid = true,
			.opt = { [T_RC] = IBV_QP_EN_SQD_ASYNC_NOTIFY, [T_UC] = IBV_QP_EN_SQD_ASYNC_NOTIFY,
				 [T_UD] = IBV_QP_EN_SQD_ASYNC_NOTIFY, [T_XI] = IBV_QP_EN_SQD_ASYNC_NOTIFY,
				 [T_XT] = IBV_QP_EN_SQD_ASYNC_NOTIFY } },
	},
	[IBV_QPS_SQD] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
		[IBV_QPS_RTS] = { .valid = true,
			.opt = { [T_RC] = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
					  IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE,
				 [T_UC] = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE,
				 [T_UD] = IBV_QP_CUR_STATE | IBV_QP_QKEY,
				 [T_XI] = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE,
				 [T_XT] = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
					  IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE } },
		[IBV_QPS_SQD] = { .valid = true,
			.opt = { [T_RC] = IBV_QP_PKEY_INDEX | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC |
					  IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS |
					  IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE,
				 [T_UC] = IBV_QP_PKEY_INDEX | IBV_QP_AV | IBV_QP_CUR_STATE | IBV_QP_ALT_PATH |
					  IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE,
				 [T_UD] = IBV_QP_PKEY_INDEX | IBV_QP_QKEY,
				 [T_XI] = IBV_QP_PKEY_INDEX | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_ALT_PATH |
					  IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE,
				 [T_XT] = IBV_QP_PKEY_INDEX | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_MAX_DEST_RD_ATOMIC |
					  IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
					  IBV_QP_PATH_MIG_STATE } },
	},
	[IBV_QPS_SQE] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
		[IBV_QPS_RTS] = { .valid = true,
			.opt = { [T_UC] = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS,
				 [T_UD] = IBV_QP_CUR_STATE | IBV_QP_QKEY } },
	},
	[IBV_QPS_ERR] = {
		[IBV_QPS_RESET] = { .valid = true },
		[IBV_QPS_ERR] = { .valid = true },
	},
};

bool qp_modify_is_ok(enum ibv_qp_state cur, enum ibv_qp_state next, enum ibv_qp_type type, unsigned mask)
{
	int t;

	switch (type) {
	case IBV_QPT_RC: t = T_RC; break;
	case IBV_QPT_UC: t = T_UC; break;
	case IBV_QPT_UD: t = T_UD; break;
	case IBV_QPT_XRC_SEND: t = T_XI; break;
	case IBV_QPT_XRC_RECV: t = T_XT; break;
	default: return false;
	}
	if (cur > IBV_QPS_ERR || next > IBV_QPS_ERR)
		return false;
	/* IBV_QP_CUR_STATE only makes sense from RTR, RTS, SQD and SQE */
	if ((mask & IBV_QP_CUR_STATE) && cur != IBV_QPS_RTR && cur != IBV_QPS_RTS &&
	    cur != IBV_QPS_SQD && cur != IBV_QPS_SQE)
		return false;
	const struct transition *tr = &table[cur][next];
	if (!tr->valid)
		return false;
	unsigned req = tr->req[t], opt = tr->opt[t];
	if ((mask & req) != req)
		return false;
	if (mask & ~(req | opt | IBV_QP_STATE))
		return false;
	return true;
}

const char *qp_state_name(enum ibv_qp_state s)
{
	static const char *const names[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };
	return s <= IBV_QPS_ERR ? names[s] : "UNKNOWN";
}
