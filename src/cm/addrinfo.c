/* rdma_getaddrinfo (shared/docs/cm-wire.md §2.8): getaddrinfo's first
 * answer as an rdma_addrinfo.  No ibacm: ai_route and ai_connect stay
 * empty. */
#include "cm.h"
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static struct sockaddr *addr_copy(const struct sockaddr *a, socklen_t len)
{
	struct sockaddr *c = malloc(len);
	if (c)
		memcpy(c, a, len);
	return c;
}

EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = n;
	}
}

EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			    struct rdma_addrinfo **res)
{
	struct addrinfo ah = { 0 }, *ai = NULL;
	int rc;

	if (!res)
		return EAI_FAIL;
	if (hints) {
		if (hints->ai_family == AF_IB) {
			errno = EAFNOSUPPORT; /* AF_IB is not offered (§6.1 item 13) */
			return EAI_FAMILY;
		}
		ah.ai_flags = (hints->ai_flags & RAI_PASSIVE ? AI_PASSIVE : 0) |
			      (hints->ai_flags & RAI_NUMERICHOST ? AI_NUMERICHOST : 0);
		ah.ai_family = hints->ai_family;
		if (hints->ai_qp_type == IBV_QPT_UD)
			ah.ai_socktype = SOCK_DGRAM;
		else if (hints->ai_qp_type)
			ah.ai_socktype = SOCK_STREAM;
		if (hints->ai_port_space == RDMA_PS_TCP)
			ah.ai_protocol = IPPROTO_TCP;
		else if (hints->ai_port_space == RDMA_PS_UDP || hints->ai_port_space == RDMA_PS_IPOIB)
			ah.ai_protocol = IPPROTO_UDP;
		if (ah.ai_protocol == IPPROTO_UDP && !ah.ai_socktype)
			ah.ai_socktype = SOCK_DGRAM;
		if (ah.ai_protocol == IPPROTO_TCP && !ah.ai_socktype)
			ah.ai_socktype = SOCK_STREAM;
	}
	if (!ah.ai_socktype && !ah.ai_protocol) {
		ah.ai_socktype = SOCK_STREAM;
		ah.ai_protocol = IPPROTO_TCP;
	}
	if (!node && !service && !hints) {
		errno = EINVAL; /* librdmacm's ERR(EINVAL) */
		return -1;
	}
	if ((node || service) && (rc = getaddrinfo(node, service, &ah, &ai)))
		return rc;

	struct rdma_addrinfo *r = calloc(1, sizeof(*r));
	if (!r) {
		freeaddrinfo(ai);
		return EAI_MEMORY;
	}
	r->ai_flags = hints ? hints->ai_flags : 0;
	r->ai_family = ai ? ai->ai_family : hints->ai_family;
	/* without a name, what the hints say (librdmacm copies them as they are) */
	bool stream = ai ? ai->ai_socktype != SOCK_DGRAM
			 : !(hints->ai_qp_type == IBV_QPT_UD || hints->ai_port_space == RDMA_PS_UDP ||
			     hints->ai_port_space == RDMA_PS_IPOIB);
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : stream ? IBV_QPT_RC : IBV_QPT_UD;
	r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : stream ? RDMA_PS_TCP : RDMA_PS_UDP;
	bool ok = true;
	if (ai && ai->ai_addr) {
		struct sockaddr *a = addr_copy(ai->ai_addr, ai->ai_addrlen);
		ok = a != NULL;
		if (r->ai_flags & RAI_PASSIVE) {
			r->ai_src_addr = a;
			r->ai_src_len = ai->ai_addrlen;
		} else {
			r->ai_dst_addr = a;
			r->ai_dst_len = ai->ai_addrlen;
		}
		if (ai->ai_canonname)
			r->ai_dst_canonname = strdup(ai->ai_canonname);
	}
	/* librdmacm 44 (addrinfo.c rdma_getaddrinfo): the hints' source when
	 * the name gave none, passive or not -- libfabric's ofi_rxm asks for
	 * its msg endpoints' address by hints alone, RAI_PASSIVE, and binds
	 * what comes back; the hints' destination when there is no name */
	if (hints && !r->ai_src_addr && hints->ai_src_addr && hints->ai_src_len) {
		r->ai_src_addr = addr_copy(hints->ai_src_addr, hints->ai_src_len);
		r->ai_src_len = hints->ai_src_len;
		ok = ok && r->ai_src_addr;
	}
	if (hints && hints->ai_dst_addr && hints->ai_dst_len && !r->ai_dst_addr && (!(r->ai_flags & RAI_PASSIVE) || !ai)) {
		r->ai_dst_addr = addr_copy(hints->ai_dst_addr, hints->ai_dst_len);
		r->ai_dst_len = hints->ai_dst_len;
		ok = ok && r->ai_dst_addr;
	}
	freeaddrinfo(ai);
	if (!ok) {
		rdma_freeaddrinfo(r);
		return EAI_MEMORY;
	}
	*res = r;
	return 0;
}
