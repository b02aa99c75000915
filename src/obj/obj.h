/* The object verbs (obj/): PDs, MRs, CQs and channels, QPs, SRQs -- create,
 * modify, query, destroy.  api/ops.c installs them. */
#ifndef UROCE_OBJ_H
#define UROCE_OBJ_H

#include "../core/device.h"

struct ibv_pd *uroce_alloc_pd(struct ibv_context *ctx);
int uroce_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *uroce_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned access);
int uroce_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access);
int uroce_dereg_mr(struct ibv_mr *mr);
struct ibv_pd *uroce_alloc_parent_domain(struct ibv_context *ctx, struct ibv_parent_domain_init_attr *attr);
/* A queue's storage from pd's allocator when pd is a parent domain with
 * one (zeroed; *custom says so), else calloc; pd_buf_free gives it back. */
enum { UROCE_RES_QP = 1, UROCE_RES_SRQ = 4, UROCE_RES_CQ = 5 };
void *pd_buf_alloc(struct uroce_pd *pd, size_t size, uint64_t type, bool *custom);
void pd_buf_free(struct uroce_pd *pd, void *p, uint64_t type, bool custom);
struct ibv_dm *uroce_alloc_dm(struct ibv_context *ctx, struct ibv_alloc_dm_attr *attr);
int uroce_free_dm(struct ibv_dm *dm);
struct ibv_mr *uroce_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm, uint64_t dm_offset, size_t length,
			       unsigned int access);
int uroce_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
		    uint32_t num_sge);

struct ibv_mw *uroce_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int uroce_dealloc_mw(struct ibv_mw *mw);
int uroce_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);

struct ibv_comp_channel *uroce_create_comp_channel(struct ibv_context *ctx);
int uroce_destroy_comp_channel(struct ibv_comp_channel *ch);
struct ibv_cq *uroce_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			       struct ibv_comp_channel *channel, int comp_vector);
struct ibv_cq_ex *uroce_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
int uroce_resize_cq(struct ibv_cq *cq, int cqe);
int uroce_destroy_cq(struct ibv_cq *cq);
int uroce_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
void uroce_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);
int uroce_req_notify_cq(struct ibv_cq *cq, int solicited_only);

struct ibv_qp *uroce_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
struct ibv_qp *uroce_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
/* A UD QP numbered 1, the GSI QP of the connection manager (cm/); EBUSY
 * when the process has one. */
struct ibv_qp *uroce_create_gsi_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
int uroce_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int uroce_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init);
int uroce_destroy_qp(struct ibv_qp *qp);
/* Multicast (mcast.c): errno values, as ibv_attach_mcast returns them. */
int uroce_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
int uroce_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
void mcast_qp_gone(struct uroce_dev *dev, struct uroce_qp *qp);

struct ibv_srq *uroce_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
int uroce_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask);
int uroce_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int uroce_destroy_srq(struct ibv_srq *srq);

/* XRC (xrc.c): domains, XRC SRQs, opening a TGT QP by number. */
struct ibv_xrcd *uroce_open_xrcd(struct ibv_context *ctx, struct ibv_xrcd_init_attr *attr);
int uroce_close_xrcd(struct ibv_xrcd *xrcd);
struct ibv_srq *uroce_create_xrc_srq(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *attr);
int uroce_get_srq_num(struct ibv_srq *srq, uint32_t *num);
struct ibv_qp *uroce_open_qp(struct ibv_context *ctx, struct ibv_qp_open_attr *attr);
/* An XRC SRQ being destroyed leaves its number (0, or EBUSY). */
int xrc_srq_unpublish(struct uroce_srq *srq);
/* After a key left the table (under dev->rx_lock, held): wait until no
 * requester can still be using what it named, by taking and releasing
 * every QP's lock once (obj/mr.c; "Where memory is checked, and when"). */
void obj_fence_executions(struct uroce_dev *dev);

/* A receive queue's storage: max_wr WQEs of max_sge segments each (srq.c). */
int rq_init(struct uroce_rq *rq, uint32_t max_wr, uint32_t max_sge);
void rq_fini(struct uroce_rq *rq);

#endif
