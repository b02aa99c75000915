/* A verbs context of a device opened without libibverbs (the white-box
 * tests and the fuzzer): what ibv_open_device would have set up, an async
 * event fd included.  0, or -1 when the eventfd cannot be had. */
#ifndef UROCE_TESTS_FAKE_CTX_H
#define UROCE_TESTS_FAKE_CTX_H

#include <pthread.h>
#include <sys/eventfd.h>
#include "core/objects.h"

static inline int fake_context_init(struct uroce_context *uctx, struct uroce_dev *dev)
{
	struct ibv_context *ctx = &uctx->vctx.context;

	uctx->dev = dev;
	ctx->async_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	pthread_mutex_init(&uctx->async_lock, NULL);
	return ctx->async_fd >= 0 ? 0 : -1;
}

#endif
