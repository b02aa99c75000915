/* The device's limits: what ibv_query_device reports and the objects are
 * sized by (api/verbs.c reports them, obj/ and sq/ enforce them). */
#ifndef UROCE_UTIL_LIMITS_H
#define UROCE_UTIL_LIMITS_H

#define UROCE_VENDOR_ID 0x5552ce    /* ours ("UR"); neither Mellanox (0x02c9) nor Amazon (0x1d0f) */
#define UROCE_VENDOR_PART_ID 0x0001
#define UROCE_MAX_QP 16384          /* QPN index bits: 14 */
#define UROCE_MAX_QP_WR 16384
#define UROCE_MAX_SGE 32
#define UROCE_MAX_INLINE 512
/* ConnectX's (mlx5: 2^22 - 1), not rxe's 32767: libfabric's ofi_rxm sizes
 * its msg CQ by its universe, (rx + tx) x 1024 = 786,432 entries by
 * default, which rxe refuses (fi_enable EINVAL, seen on ../shared/rxe-vm)
 * and a NIC takes.  A CQ's ring is anonymous memory that completions
 * touch as they cycle through it (core/cq_ring.c): a CQ of N entries
 * costs N x sizeof(struct ibv_wc) once N completions have passed, as a
 * NIC's costs its N entries at once. */
#define UROCE_MAX_CQE 4194303
#define UROCE_MAX_CQ 16384
#define UROCE_MAX_MR 65536
#define UROCE_MAX_PD 16384
#define UROCE_MAX_RD_ATOMIC 128        /* as rxe: perftest asks a peer for its max_qp_rd_atom */
#define UROCE_MAX_MSG (1u << 31)    /* RETH DMA length limit (§2.2) */
#define UROCE_MAX_AH 65536
#define UROCE_MAX_SRQ 4096
#define UROCE_MAX_SRQ_WR 16384
/* The port's GID table, as rxe's (RXE_PORT_GID_TBL_LEN): the configured
 * addresses first, the rest empty slots (api/verbs.c says how each query
 * answers one). */
#define UROCE_GID_TBL_LEN 1024
/* Multicast (obj/mcast.c): groups a process's QPs are attached to (a
 * socket each, net/udp.c), and QPs per group, as rxe's
 * RXE_MAX_MCAST_QP_ATTACH; rxe allows 8192 groups, a socket each would be
 * a process's fds. */
#define UROCE_MAX_MCAST_GRP 64
#define UROCE_MAX_MCAST_QP_ATTACH 56
/* Device memory of a process (max_dm_size; mlx5's MEMIC is 128-256 KiB) */
#define UROCE_MAX_DM (256u << 10)

#endif
