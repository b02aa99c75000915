/* Protection domains, memory regions and their keys.
 *
 * Keys: low 16 bits index the MR table, high 16 bits are random, so a key is
 * unique and not trivially guessable; lkey == rkey as on rxe.  The responder
 * looks keys up under dev->rx_lock, and deregistration removes an MR under
 * that same lock, so no remote access can be in flight on a freed MR; the
 * transport never keeps an MR pointer across packets. */
#include "device.h"
#include "../verbs/ops.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include "../transport/transport.h"

static struct uroce_mr *mr_table[UROCE_MAX_MR];
static uint32_t mr_hint = 1;

static uint16_t random16(void)
{
	uint16_t v = 0;
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v))
		v = (uint16_t)now_ns();
	return v;
}

struct ibv_pd *uroce_alloc_pd(struct ibv_context *ctx)
{
	struct uroce_dev *dev = to_uctx(ctx)->dev;
	struct uroce_pd *pd;

	pthread_mutex_lock(&dev->lock);
	if (dev->npd >= UROCE_MAX_PD) {
		pthread_mutex_unlock(&dev->lock);
		errno = ENOMEM;
		return NULL;
	}
	dev->npd++;
	pthread_mutex_unlock(&dev->lock);
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->ibv.context = ctx;
	pd->ibv.handle = dev->npd;
	atomic_init(&pd->refcnt, 0);
	return &pd->ibv;
}

int uroce_dealloc_pd(struct ibv_pd *ibpd)
{
	struct uroce_pd *pd = to_upd(ibpd);
	struct uroce_dev *dev = to_uctx(ibpd->context)->dev;

	if (atomic_load(&pd->refcnt))
		return EBUSY;
	pthread_mutex_lock(&dev->lock);
	dev->npd--;
	pthread_mutex_unlock(&dev->lock);
	free(pd);
	return 0;
}

#define MR_KNOWN_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
	IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND | \
	IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_OPTIONAL_RANGE)

static int check_access(unsigned access)
{
	if (access & ~(unsigned)MR_KNOWN_ACCESS)
		return EINVAL;
	/* IBA: remote write or atomic access requires local write (C10-...;
	 * ib_core's ib_check_mr_access) */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	return 0;
}

struct ibv_mr *uroce_reg_mr_iova(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova, unsigned access)
{
	struct uroce_dev *dev = to_uctx(ibpd->context)->dev;
	struct uroce_mr *mr;
	int rc;

	/* optional access bits are hints a device may ignore (verbs.h) */
	access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;
	rc = check_access(access);
	/* ib_uverbs_reg_mr: the iova keeps the address's offset in its page */
	if (!rc && !(access & IBV_ACCESS_ZERO_BASED) && ((iova ^ (uintptr_t)addr) & 4095))
		rc = EINVAL;
	if (rc || length == 0 || length > (1ull << 40) || (access & IBV_ACCESS_ON_DEMAND)) {
		errno = rc ? rc : EINVAL;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&dev->rx_lock);
	uint32_t idx = 0;
	for (uint32_t i = 0; i < UROCE_MAX_MR - 1; i++) {
		uint32_t c = (mr_hint + i) % UROCE_MAX_MR;
		if (c && !mr_table[c]) {
			idx = c;
			break;
		}
	}
	if (!idx) {
		pthread_mutex_unlock(&dev->rx_lock);
		free(mr);
		errno = ENOMEM;
		return NULL;
	}
	mr_hint = idx + 1;
	uint32_t key = (uint32_t)random16() << 16 | idx;
	mr->ibv.context = ibpd->context;
	mr->ibv.pd = ibpd;
	mr->ibv.addr = addr;
	mr->ibv.length = length;
	mr->ibv.handle = idx;
	mr->ibv.lkey = mr->ibv.rkey = key;
	mr->iova = (access & IBV_ACCESS_ZERO_BASED) ? 0 : iova;
	mr->host = addr;
	mr->length = length;
	mr->access = access;
	mr_table[idx] = mr;
	pthread_mutex_unlock(&dev->rx_lock);
	atomic_fetch_add(&to_upd(ibpd)->refcnt, 1);
	pthread_mutex_lock(&dev->lock);
	dev->nmr++;
	pthread_mutex_unlock(&dev->lock);
	return &mr->ibv;
}

int uroce_dereg_mr(struct ibv_mr *ibmr)
{
	struct uroce_mr *mr = to_umr(ibmr);
	struct uroce_dev *dev = to_uctx(ibmr->context)->dev;

	pthread_mutex_lock(&dev->rx_lock);
	mr_table[ibmr->lkey & (UROCE_MAX_MR - 1)] = NULL;
	pthread_mutex_unlock(&dev->rx_lock);
	atomic_fetch_sub(&to_upd(ibmr->pd)->refcnt, 1);
	pthread_mutex_lock(&dev->lock);
	dev->nmr--;
	pthread_mutex_unlock(&dev->lock);
	free(mr);
	return 0;
}

int uroce_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct uroce_mr *mr = to_umr(ibmr);
	struct uroce_dev *dev = to_uctx(ibmr->context)->dev;

	/* argument checks done by rdma-core's ibv_rereg_mr before the command */
	if ((flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS)) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!length || !addr)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	/* checks the kernel makes (ib_uverbs_rereg_mr): a failed command */
	if (!flags || ((flags & IBV_REREG_MR_CHANGE_ACCESS) &&
		       check_access((unsigned)access & ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE)) ||
	    ((flags & IBV_REREG_MR_CHANGE_PD) && (!pd || pd->context != ibmr->context))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_CMD;
	}
	pthread_mutex_lock(&dev->rx_lock);
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		mr->ibv.addr = addr;
		mr->ibv.length = length;
		mr->host = addr;
		mr->iova = (mr->access & IBV_ACCESS_ZERO_BASED) ? 0 : (uint64_t)(uintptr_t)addr;
		mr->length = length;
	}
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		mr->access = (unsigned)access & ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		atomic_fetch_sub(&to_upd(mr->ibv.pd)->refcnt, 1);
		atomic_fetch_add(&to_upd(pd)->refcnt, 1);
		mr->ibv.pd = pd;
	}
	/* new keys, as a real rereg hands out (old rkeys must stop working) */
	uint32_t idx = mr->ibv.lkey & (UROCE_MAX_MR - 1);
	mr->ibv.lkey = mr->ibv.rkey = (uint32_t)random16() << 16 | idx;
	pthread_mutex_unlock(&dev->rx_lock);
	return 0;
}

struct uroce_mr *mr_get(struct uroce_dev *dev, uint32_t key)
{
	struct uroce_mr *mr = mr_table[key & (UROCE_MAX_MR - 1)];
	(void)dev;
	return (mr && mr->ibv.lkey == key) ? mr : NULL;
}

static bool range_ok(const struct uroce_mr *mr, uint64_t va, uint64_t len)
{
	return va >= mr->iova && len <= mr->length && va - mr->iova <= mr->length - len;
}

/* The one memory check: key, protection domain, access, bounds, each with
 * its named verdict (mapped to NAKs in responder.c, WC statuses in qp.c). */
static enum uroce_mem_verdict mr_check(struct uroce_dev *dev, struct uroce_pd *pd, uint32_t key, uint64_t va,
				       uint64_t len, unsigned access, struct uroce_mr **out)
{
	struct uroce_mr *mr = mr_get(dev, key);

	if (!mr)
		return MEM_KEY_INVALID;
	if (to_upd(mr->ibv.pd) != pd)
		return MEM_PD_MISMATCH;
	if ((mr->access & access) != access)
		return MEM_ACCESS;
	if (!range_ok(mr, va, len))
		return MEM_BOUNDS;
	*out = mr;
	return MEM_OK;
}

enum uroce_mem_verdict mr_check_remote(struct uroce_dev *dev, struct uroce_pd *pd, uint32_t rkey,
				       uint64_t va, uint64_t len, unsigned access, struct uroce_mr **out)
{
	return mr_check(dev, pd, rkey, va, len, access, out);
}

enum uroce_mem_verdict mr_resolve_local(struct uroce_dev *dev, struct uroce_pd *pd, const struct ibv_sge *sge,
					unsigned access, struct uroce_seg *out)
{
	struct uroce_mr *mr;
	enum uroce_mem_verdict v = mr_check(dev, pd, sge->lkey, sge->addr, sge->length, access, &mr);

	if (v == MEM_OK) {
		out->addr = mr_host(mr, sge->addr);
		out->len = sge->length;
	}
	return v;
}

void seg_copy_to(const struct uroce_seg *seg, uint32_t nseg, uint32_t off, const uint8_t *src, uint32_t len)
{
	struct iovec iov[UROCE_MAX_SGE + 1];
	int k = seg_iov(seg, nseg, off, len, iov, UROCE_MAX_SGE + 1);

	for (int i = 0; i < k; i++) {
		memcpy(iov[i].iov_base, src, iov[i].iov_len);
		src += iov[i].iov_len;
	}
}

int seg_iov(const struct uroce_seg *seg, uint32_t nseg, uint32_t off, uint32_t len, struct iovec *iov, int max)
{
	int k = 0;

	for (uint32_t i = 0; i < nseg && len && k < max; i++) {
		if (off >= seg[i].len) {
			off -= seg[i].len;
			continue;
		}
		uint32_t n = seg[i].len - off;
		if (n > len)
			n = len;
		iov[k].iov_base = seg[i].addr + off;
		iov[k].iov_len = n;
		k++;
		len -= n;
		off = 0;
	}
	return k;
}
