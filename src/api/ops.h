/* The verbs surface: the ops table that installs the provider's entry
 * points (the object verbs of obj/, posting of sq/, polling and queries of
 * api/). */
#ifndef UROCE_OPS_H
#define UROCE_OPS_H
#include <infiniband/verbs.h>
#include <sys/types.h>
#include "../obj/obj.h"
#include "../sq/sq.h"

void uroce_fill_ops(struct verbs_context *vctx);

int uroce_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
			  struct ibv_device_attr_ex *attr, size_t attr_size);
int uroce_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);

__be64 uroce_node_guid(void);
int uroce_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc);

#endif
