/* The QP state/attribute table (core/qp_state.c) against IBA 11.2.5 cases. */
#include <stdio.h>
#include "obj/qp_state.h"

static int failures, checks;
#define CHECK(cond, name) do { checks++; if (!(cond)) { failures++; printf("not ok: %s\n", name); } } while (0)

int main(void)
{
	const unsigned init_rc = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	const unsigned rtr_rc = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	const unsigned rts_rc = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT |
				IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT;

	CHECK(qp_modify_is_ok(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_RC, init_rc), "RC RESET->INIT");
	CHECK(!qp_modify_is_ok(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_RC, init_rc & ~IBV_QP_PORT), "RC RESET->INIT needs PORT");
	CHECK(!qp_modify_is_ok(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_UD, init_rc), "UD RESET->INIT needs QKEY, not ACCESS");
	CHECK(qp_modify_is_ok(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_UD,
			      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), "UD RESET->INIT");
	CHECK(!qp_modify_is_ok(IBV_QPS_RESET, IBV_QPS_RTR, IBV_QPT_RC, rtr_rc), "RESET->RTR illegal");
	CHECK(qp_modify_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_RC, rtr_rc), "RC INIT->RTR");
	CHECK(!qp_modify_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_RC, rtr_rc | IBV_QP_SQ_PSN), "INIT->RTR extra SQ_PSN");
	CHECK(qp_modify_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_UC,
			      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN), "UC INIT->RTR");
	CHECK(!qp_modify_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_UC, rtr_rc), "UC INIT->RTR no MAX_DEST_RD_ATOMIC");
	CHECK(qp_modify_is_ok(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_RC, rts_rc), "RC RTR->RTS");
	CHECK(!qp_modify_is_ok(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_RC, rts_rc & ~IBV_QP_TIMEOUT), "RTR->RTS needs TIMEOUT");
	CHECK(qp_modify_is_ok(IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPT_RC, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), "RTS->SQD");
	CHECK(qp_modify_is_ok(IBV_QPS_SQD, IBV_QPS_RTS, IBV_QPT_RC, IBV_QP_STATE), "SQD->RTS");
	CHECK(!qp_modify_is_ok(IBV_QPS_SQE, IBV_QPS_RTS, IBV_QPT_RC, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS), "RC SQE->RTS no ACCESS");
	CHECK(qp_modify_is_ok(IBV_QPS_SQE, IBV_QPS_RTS, IBV_QPT_UC, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS), "UC SQE->RTS");
	for (int s = IBV_QPS_INIT; s <= IBV_QPS_ERR; s++)
		CHECK(qp_modify_is_ok(s, IBV_QPS_ERR, IBV_QPT_RC, IBV_QP_STATE), "any->ERR");
	CHECK(!qp_modify_is_ok(IBV_QPS_RESET, IBV_QPS_ERR, IBV_QPT_RC, IBV_QP_STATE), "RESET->ERR illegal");
	for (int s = IBV_QPS_RESET; s <= IBV_QPS_ERR; s++)
		CHECK(qp_modify_is_ok(s, IBV_QPS_RESET, IBV_QPT_RC, IBV_QP_STATE), "any->RESET");
	CHECK(!qp_modify_is_ok(IBV_QPS_ERR, IBV_QPS_RTS, IBV_QPT_RC, IBV_QP_STATE), "ERR->RTS illegal");
	CHECK(!qp_modify_is_ok(IBV_QPS_INIT, IBV_QPS_INIT, IBV_QPT_RC, IBV_QP_CUR_STATE), "CUR_STATE from INIT");
	CHECK(qp_modify_is_ok(IBV_QPS_RTS, IBV_QPS_RTS, IBV_QPT_RC, IBV_QP_CUR_STATE | IBV_QP_MIN_RNR_TIMER), "RTS->RTS");
	CHECK(!qp_modify_is_ok(IBV_QPS_RTS, IBV_QPS_RTS, IBV_QPT_RAW_PACKET, 0), "unsupported type");
	/* XRC (ib_core's rows): the masks ibv_xsrq_pingpong passes; INI has no
	 * responder attributes at RTR, TGT no retry counts at RTS */
	unsigned init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	unsigned rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	CHECK(qp_modify_is_ok(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_XRC_SEND, init), "XRC INI RESET->INIT");
	CHECK(qp_modify_is_ok(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPT_XRC_RECV, init), "XRC TGT RESET->INIT");
	CHECK(qp_modify_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_SEND, rtr), "XRC INI INIT->RTR");
	CHECK(!qp_modify_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_SEND, rtr | IBV_QP_MAX_DEST_RD_ATOMIC),
	      "XRC INI INIT->RTR takes no responder attribute");
	CHECK(!qp_modify_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_RECV, rtr), "XRC TGT RTR needs MAX_DEST_RD_ATOMIC");
	CHECK(qp_modify_is_ok(IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPT_XRC_RECV,
			      rtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "XRC TGT INIT->RTR");
	CHECK(qp_modify_is_ok(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_RECV, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN),
	      "XRC TGT RTR->RTS");
	CHECK(!qp_modify_is_ok(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_SEND, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN),
	      "XRC INI RTS needs the retry counts");
	CHECK(qp_modify_is_ok(IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_XRC_SEND, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN |
			      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC), "XRC INI RTR->RTS");
	printf("%d passed, %d failed\n", checks - failures, failures);
	return failures != 0;
}
