#include "mem.h"
#include <string.h>
#include <sys/random.h>

const struct uroce_mem_verdict_info uroce_mem_verdicts[] = {
#define X(n, nak, wc, rnak) [n] = { #n, nak, wc, rnak },
	UROCE_MEM_VERDICTS(X)
#undef X
};

/* Written under dev->rx_lock; read under it (responder, completer) or
 * under a qp->lock alone (the requester in ibv_post_send), hence atomic
 * slots: an MR's fields are set before it is published (release) and
 * changed only while it is unpublished and fenced (obj/mr.c). */
static struct uroce_mr *mr_table[UROCE_MAX_MR];
static struct uroce_mw *mw_table[UROCE_MAX_MR]; /* the same indexes: one key space */
static uint32_t mr_hint = 1;

static uint16_t random16(void)
{
	uint16_t v = 0;
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v))
		v = (uint16_t)now_ns();
	return v;
}

uint32_t mem_key_alloc(void)
{
	for (uint32_t i = 0; i < UROCE_MAX_MR - 1; i++) {
		uint32_t c = (mr_hint + i) % UROCE_MAX_MR;
		if (c && !__atomic_load_n(&mr_table[c], __ATOMIC_RELAXED) && !__atomic_load_n(&mw_table[c], __ATOMIC_RELAXED)) {
			mr_hint = c + 1;
			return mem_key_renew(c << 8);
		}
	}
	return 0;
}

void mem_mr_publish(struct uroce_mr *mr)
{
	__atomic_store_n(&mr_table[mem_key_index(mr->ibv.lkey)], mr, __ATOMIC_RELEASE);
}

void mem_mr_unpublish(struct uroce_mr *mr)
{
	__atomic_store_n(&mr_table[mem_key_index(mr->ibv.lkey)], NULL, __ATOMIC_RELEASE);
}

void mem_mw_publish(uint32_t key, struct uroce_mw *mw)
{
	__atomic_store_n(&mw_table[mem_key_index(key)], mw, __ATOMIC_RELEASE);
}

void mem_mw_unpublish(uint32_t key)
{
	__atomic_store_n(&mw_table[mem_key_index(key)], NULL, __ATOMIC_RELEASE);
}

struct uroce_mw *mem_mw_slot(uint32_t key)
{
	return __atomic_load_n(&mw_table[mem_key_index(key)], __ATOMIC_ACQUIRE);
}

uint32_t mem_key_renew(uint32_t key)
{
	uint16_t r = random16();
	return (uint32_t)(r >> 8) << 24 | (key & 0x00FFFF00u) | (r & 0xFFu);
}

struct uroce_mr *mr_get(struct uroce_dev *dev, uint32_t key)
{
	struct uroce_mr *mr = __atomic_load_n(&mr_table[mem_key_index(key)], __ATOMIC_ACQUIRE);
	(void)dev;
	return (mr && mr->ibv.lkey == key) ? mr : NULL;
}

static bool range_ok(const struct uroce_mr *mr, uint64_t va, uint64_t len)
{
	return va >= mr->iova && len <= mr->length && va - mr->iova <= mr->length - len;
}

/* The one memory check: key, protection domain, access, bounds, each with
 * its named verdict (UROCE_MEM_VERDICTS says what each means). */
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

enum uroce_mem_verdict mem_sge_resolve(struct uroce_dev *dev, struct uroce_pd *pd, const struct uroce_sge *sge,
				       uint32_t nsge, uint32_t off, uint32_t len, unsigned access,
				       struct uroce_seg *out, uint32_t *nout)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < nsge && len; i++) {
		if (off >= sge[i].length) {
			off -= sge[i].length;
			continue;
		}
		uint32_t n = sge[i].length - off;
		if (n > len)
			n = len;
		struct uroce_mr *mr;
		/* only the bytes this execution touches are checked (rxe's
		 * copy_data), one table lookup and compare per SGE */
		enum uroce_mem_verdict v = mr_check(dev, pd, sge[i].lkey, sge[i].addr + off, n, access, &mr);
		if (v != MEM_OK) {
			*nout = k;
			return v;
		}
		out[k].addr = mr_host(mr, sge[i].addr + off);
		out[k].len = n;
		k++;
		len -= n;
		off = 0;
	}
	*nout = k;
	return MEM_OK;
}

enum uroce_mem_verdict mem_sge_copy_to(struct uroce_dev *dev, struct uroce_pd *pd, const struct uroce_sge *sge,
				       uint32_t nsge, uint32_t off, const uint8_t *src, uint32_t len)
{
	struct uroce_seg seg[UROCE_MAX_SGE];
	uint32_t k;
	enum uroce_mem_verdict v = mem_sge_resolve(dev, pd, sge, nsge < UROCE_MAX_SGE ? nsge : UROCE_MAX_SGE, off, len,
						   IBV_ACCESS_LOCAL_WRITE, seg, &k);

	if (v != MEM_OK)
		return v;
	for (uint32_t i = 0; i < k; i++) {
		memcpy(seg[i].addr, src, seg[i].len);
		src += seg[i].len;
	}
	return MEM_OK;
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
