/* Provider entry points of core/ and the ops table that installs them. */
#ifndef UROCE_OPS_H
#define UROCE_OPS_H
#include <infiniband/verbs.h>
#include <sys/types.h>

void uroce_fill_ops(struct verbs_context *vctx);

int uroce_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
			  struct ibv_device_attr_ex *attr, size_t attr_size);
int uroce_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);

struct ibv_pd *uroce_alloc_pd(struct ibv_context *ctx);
int uroce_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *uroce_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned access);
int uroce_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access);
int uroce_dereg_mr(struct ibv_mr *mr);

struct ibv_comp_channel *uroce_create_comp_channel(struct ibv_context *ctx);
int uroce_destroy_comp_channel(struct ibv_comp_channel *ch);
struct ibv_cq *uroce_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			       struct ibv_comp_channel *channel, int comp_vector);
struct ibv_cq_ex *uroce_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
int uroce_resize_cq(struct ibv_cq *cq, int cqe);
int uroce_destroy_cq(struct ibv_cq *cq);
int uroce_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
void uroce_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);
int uroce_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc);
int uroce_req_notify_cq(struct ibv_cq *cq, int solicited_only);

struct ibv_qp *uroce_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
struct ibv_qp *uroce_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
int uroce_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int uroce_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init);
int uroce_destroy_qp(struct ibv_qp *qp);
int uroce_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int uroce_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

struct ibv_srq *uroce_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
int uroce_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask);
int uroce_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int uroce_destroy_srq(struct ibv_srq *srq);
int uroce_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

#endif
