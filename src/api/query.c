/* What the device and its port say of themselves (ibv_query_device(_ex),
 * ibv_query_port): the limits of util/limits.h and the configured port. */
#include "ops.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A stable node GUID: EUI-64 style from the vendor id and the host. */
__be64 uroce_node_guid(void)
{
	uint64_t g = 0x02000000fffe0000ull | (uint64_t)(UROCE_VENDOR_ID & 0xFFFF) << 40 | (gethostid() & 0xFFFF);
	return htobe64(g);
}

#define UROCE_DEVICE_CAP_ATOMIC_WRITE (1ULL << 40)

/* The kernel's IB_DEVICE_ON_DEMAND_PAGING (ib_verbs.h: 1ULL << 31), which
 * mlx5 sets with ODP and libibverbs' enum does not name. */
#define UROCE_DEVICE_ON_DEMAND_PAGING (1u << 31)

/* ODP per transport: memory in a user-space NIC is always on demand (nothing
 * is pinned, mem.c checks each access against the mapping), so every
 * operation of a transport uroce carries is ODP-capable on it: RC and XRC
 * (XRC shares RC's responder) everything, UC no READ/atomics, UD send and
 * receive.  IBV_ODP_SUPPORT_IMPLICIT: ibv_reg_mr(NULL, SIZE_MAX). */
#define ODP_RC (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ | \
		IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV)
#define ODP_UC (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV)
#define ODP_UD (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV)

static void fill_device_attr(struct uroce_dev *dev, struct ibv_device_attr *a)
{
	(void)dev;
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "uroce %s", "0.1");
	a->node_guid = uroce_node_guid();
	a->sys_image_guid = uroce_node_guid();
	a->max_mr_size = 1ull << 40;
	a->page_size_cap = 0xFFFFF000;
	a->vendor_id = UROCE_VENDOR_ID;
	a->vendor_part_id = UROCE_VENDOR_PART_ID;
	a->hw_ver = 1;
	a->max_qp = UROCE_MAX_QP - 3;
	a->max_qp_wr = UROCE_MAX_QP_WR;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID |
			      IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SRQ_RESIZE * 0 |
			      IBV_DEVICE_N_NOTIFY_CQ | IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC |
			      UROCE_DEVICE_ON_DEMAND_PAGING;
	a->max_sge = UROCE_MAX_SGE;
	a->max_sge_rd = UROCE_MAX_SGE;
	a->max_cq = UROCE_MAX_CQ;
	a->max_cqe = UROCE_MAX_CQE;
	a->max_mr = UROCE_MAX_MR - 1;
	a->max_mw = UROCE_MAX_MR - 1;  /* one key table for both (mem/mem.h) */
	a->max_pd = UROCE_MAX_PD;
	a->max_qp_rd_atom = UROCE_MAX_RD_ATOMIC;
	a->max_res_rd_atom = UROCE_MAX_RD_ATOMIC * (UROCE_MAX_QP - 3);
	a->max_qp_init_rd_atom = UROCE_MAX_RD_ATOMIC;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_srq = UROCE_MAX_SRQ;
	a->max_srq_wr = UROCE_MAX_SRQ_WR;
	a->max_srq_sge = UROCE_MAX_SGE;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
	a->max_ah = UROCE_MAX_AH;
	a->max_mcast_grp = UROCE_MAX_MCAST_GRP;
	a->max_mcast_qp_attach = UROCE_MAX_MCAST_QP_ATTACH;
	a->max_total_mcast_qp_attach = UROCE_MAX_MCAST_GRP * UROCE_MAX_MCAST_QP_ATTACH;
}

__attribute__((visibility("default"))) int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	fill_device_attr(to_uctx(ctx)->dev, attr);
	return 0;
}

int uroce_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
			  struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex a;

	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	memset(&a, 0, sizeof(a));
	fill_device_attr(to_uctx(ctx)->dev, &a.orig_attr);
	/* ATOMIC_WRITE (IBV_QP_EX_WITH_ATOMIC_WRITE, sq/qpex.c): the kernel
	 * uAPI's IB_UVERBS_DEVICE_ATOMIC_WRITE (ib_user_verbs.h, Linux 6.2;
	 * Debian 12's headers predate it), where rxe reports it */
	a.device_cap_flags_ex = a.orig_attr.device_cap_flags | UROCE_DEVICE_CAP_ATOMIC_WRITE;
	a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
	a.odp_caps.per_transport_caps.rc_odp_caps = ODP_RC;
	a.odp_caps.per_transport_caps.uc_odp_caps = ODP_UC;
	a.odp_caps.per_transport_caps.ud_odp_caps = ODP_UD;
	a.xrc_odp_caps = ODP_RC;
	a.max_dm_size = UROCE_MAX_DM;   /* obj/dm.c */
	a.phys_port_cnt_ex = 1;
	a.max_wq_type_rq = 0;
	memcpy(attr, &a, attr_size < sizeof(a) ? attr_size : sizeof(a));
	return 0;
}

int uroce_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	struct ibv_port_attr a;

	if (port != 1)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	a.state = IBV_PORT_ACTIVE;
	a.max_mtu = IBV_MTU_4096;
	a.active_mtu = dev->cfg.active_mtu;
	a.gid_tbl_len = UROCE_GID_TBL_LEN;
	a.port_cap_flags = 0;
	a.max_msg_sz = UROCE_MAX_MSG;
	a.pkey_tbl_len = 1;
	a.max_vl_num = 1;
	a.active_width = 1;   /* 1X */
	a.active_speed = 32;  /* EDR (25 Gb/s per lane): a nominal figure */
	a.phys_state = 5;     /* LinkUp */
	a.link_layer = IBV_LINK_LAYER_ETHERNET;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

