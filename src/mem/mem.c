#include "mem.h"
#include "../core/place.h"
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14 */
#define MADV_POPULATE_WRITE 23
#endif

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

/* The kernel walks the page tables and answers for them: ENOMEM for a
 * hole, EINVAL for a mapping without the permission (PROT_NONE guard pages,
 * read-only text for a write) or one that cannot be faulted (VM_IO), EFAULT
 * where the access would raise SIGBUS/SIGSEGV (a file mapping past its end)
 * -- so a range a remote names is checked without touching it, and no
 * signal handler is needed (madvise(2), MADV_POPULATE_READ/WRITE).  A
 * populated range costs one page-table walk; anonymous memory a write
 * faults in is allocated, as the write itself would. */
bool mem_populate(const void *addr, uint64_t len, bool write)
{
	static long page;
	if (!page)
		page = sysconf(_SC_PAGESIZE);
	if (!len)
		return true;
	uintptr_t a = (uintptr_t)addr, start = a & ~(uintptr_t)(page - 1);
	if (len > UINTPTR_MAX - a)
		return false;
	uintptr_t end = a + (uintptr_t)len;
	int rc;
	do
		rc = madvise((void *)start, end - start, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
	while (rc && errno == EINTR);
	return rc == 0;
}

/* The one memory check: key, protection domain, access, bounds, each with
 * its named verdict (UROCE_MEM_VERDICTS says what each means).
 *
 * An ODP MR (IBV_ACCESS_ON_DEMAND) pins nothing and promises nothing about
 * what is mapped: an implicit one spans the whole address space, and an
 * explicit one may be unmapped and mapped again after registration.  So
 * every access through one is checked against the process's mapping at
 * the moment of the access, as an ODP NIC's page fault is, and a hole or a
 * page without the permission is the verdict MEM_UNMAPPED (a remote access
 * error NAK, as mlx5 answers a page fault it cannot resolve).  A remote
 * peer thus cannot make the process touch unmapped memory.  (The
 * application unmapping a range while a packet is being placed in it is
 * the application's race, as for any MR.) */
static enum uroce_mem_verdict mr_check(struct uroce_dev *dev, struct uroce_pd *pd, uint32_t key, uint64_t va,
				       uint64_t len, unsigned access, struct uroce_mr **out)
{
	bool probe = !(access & MEM_CHECK_NO_PROBE);
	access &= ~MEM_CHECK_NO_PROBE;
	struct uroce_mr *mr = mr_get(dev, key);

	if (!mr)
		return MEM_KEY_INVALID;
	/* between protection domains: a parent domain's is its PD's (obj/pd.c);
	 * no PD (an XRC TGT QP's own) matches none */
	if (!pd || to_upd(mr->ibv.pd)->protection != pd->protection)
		return MEM_PD_MISMATCH;
	if ((mr->access & access) != access)
		return MEM_ACCESS;
	if (!range_ok(mr, va, len))
		return MEM_BOUNDS;
	if (probe && (mr->access & IBV_ACCESS_ON_DEMAND) &&
	    !mem_populate(mr_host(mr, va), len,
			  access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)))
		return MEM_UNMAPPED;
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
	place_segs(seg, k, src);  /* the last byte last (core/place.h) */
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
