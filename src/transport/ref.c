/* References to a same-host peer's memory (ref.h). */
#include "ref.h"
#include <string.h>
#include "transport.h"
#include "../core/place.h"
#include "../mem/pull.h"
#include "../util/limits.h"

_Static_assert(REF_SPAN_BYTES <= UROCE_MAX_MSG, "a span is part of one message");

uint32_t ref_put(uint8_t *dst, pid_t pid, const struct uroce_seg *seg, uint32_t nseg)
{
	uint32_t v[2] = { (uint32_t)pid, nseg };

	memcpy(dst, v, REF_HDR);
	for (uint32_t i = 0; i < nseg; i++) {
		uint64_t addr = (uint64_t)(uintptr_t)seg[i].addr;
		uint32_t l[2] = { seg[i].len, 0 };
		memcpy(dst + REF_BYTES(i), &addr, 8);
		memcpy(dst + REF_BYTES(i) + 8, l, 8);
	}
	return REF_BYTES(nseg);
}

bool ref_get(const uint8_t *p, uint32_t n, struct ref_src *out)
{
	uint32_t v[2];
	uint64_t sum = 0;

	if (n < REF_BYTES(1))
		return false;
	memcpy(v, p, REF_HDR);
	if ((int32_t)v[0] <= 0 || v[1] < 1 || v[1] > REF_MAX_SEGS || n != REF_BYTES(v[1]))
		return false;
	out->pid = (pid_t)v[0];
	out->nseg = v[1];
	for (uint32_t i = 0; i < out->nseg; i++) {
		uint64_t addr;
		uint32_t l[2];
		memcpy(&addr, p + REF_BYTES(i), 8);
		memcpy(l, p + REF_BYTES(i) + 8, 8);
		if (!l[0] || l[1])
			return false;
		out->seg[i].iov_base = (void *)(uintptr_t)addr;
		out->seg[i].iov_len = l[0];
		sum += l[0];
	}
	if (sum > REF_SPAN_BYTES)
		return false;
	out->len = (uint32_t)sum;
	return true;
}

bool ref_pull(struct uroce_dev *dev, const struct ref_src *src, const struct uroce_seg *dst, uint32_t ndst)
{
	struct iovec local[UROCE_MAX_SGE + 1];
	uint64_t total = 0;
	uint32_t k = 0;

	if (ndst > UROCE_MAX_SGE)
		return false;
	for (uint32_t i = 0; i < ndst; i++) {
		if (!dst[i].len)
			continue;
		local[k].iov_base = dst[i].addr;
		local[k].iov_len = dst[i].len;
		total += dst[i].len;
		k++;
	}
	if (total != src->len || !k)
		return false;
	/* The last byte goes to a private byte, and from there into place with
	 * a release store once the rest has been copied (core/place.h: a peer
	 * that polls the last byte must find the rest there when it changes,
	 * whatever order the kernel's copy stores in). */
	uint8_t *last = (uint8_t *)local[k - 1].iov_base + local[k - 1].iov_len - 1, byte;
	if (--local[k - 1].iov_len == 0)
		k--;
	local[k].iov_base = &byte;
	local[k].iov_len = 1;
	k++;
	/* a large one shared with the pull helper on another CPU (mem/pull.h) */
	struct pull_cost cost;
	bool ok = pull_copy(src->pid, local, k, src->seg, src->nseg, src->len, dev->cfg.pull_split_min, dev->eng.rt,
			    &cost);
	UROCE_COUNT_SYSCALL(dev->stats, UC_sys_vm_readv, cost.readv_calls);
	/* the rest is a shared pull's (below UROCE_PULL_SPLIT_MIN, all 0: no
	 * locked adds of nothing on every reference) */
	if (cost.eventfd_calls | cost.sched_calls | cost.helper_readv | cost.helper_reads) {
		UROCE_COUNT_SYSCALL(dev->stats, UC_sys_eventfd, cost.eventfd_calls);
		UROCE_COUNT_SYSCALL(dev->stats, UC_sys_sched, cost.sched_calls);
		/* the helper's calls are no engine's (UROCE_COUNT_SYSCALL tells by the calling thread) */
		dev_count(dev, UC_sys_vm_readv, cost.helper_readv);
		dev_count(dev, UC_sys_eventfd, cost.helper_reads);
		dev_count(dev, UC_ref_pull_helper_bytes, cost.helper_bytes);
	}
	if (!ok)
		return false;
	__atomic_store_n(last, byte, __ATOMIC_RELEASE);
	return true;
}

bool ref_from_peer(const struct uroce_qp *qp, const struct ref_src *ref)
{
	pid_t self, peer = ref_peer(qp, &self);
	return peer && ref->pid == peer;
}

bool pkt_place(struct uroce_dev *dev, const struct uroce_pkt *pkt, const struct uroce_seg *seg, uint32_t nseg)
{
	if (pkt->ref) {
		/* the one copy, counted where it is made: before the completion
		 * it leads to, which a reader of the counters may be waiting for */
		if (!ref_pull(dev, pkt->ref, seg, nseg))
			return false;
		dev_count(dev, UC_ref_rx, 1);
		dev_count(dev, UC_ref_bytes_rx, pkt->ref->len);
		return true;
	}
	place_segs(seg, nseg, pkt->payload);  /* the last byte last (core/place.h) */
	dev_count(dev, UC_copy_place_bytes, pkt->paylen);
	return true;
}

pid_t ref_peer(const struct uroce_qp *qp, pid_t *self)
{
	*self = 0;
	if (qp->type != IBV_QPT_RC || !qp->dev->cfg.shm_direct_min)
		return 0;
	return net_flow_ref_peer(qp->dev->net, qp->flow, self);
}
