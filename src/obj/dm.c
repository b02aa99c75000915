/* Device memory (ibv_alloc_dm(3), ibv_reg_dm_mr): on a NIC, memory on the
 * adapter that the host reaches by MMIO and the NIC without crossing PCIe
 * (mlx5's MEMIC).  A NIC in user space owns ordinary memory, so a DM is a
 * buffer of the library's that the application reaches only through
 * ibv_memcpy_to_dm / ibv_memcpy_from_dm, and a DM MR is a zero-based MR
 * over it.  The rules are mlx5's, the one device that has DM: offsets and
 * lengths of the copies are multiples of 4 (its MMIO word), a DM MR must
 * be IBV_ACCESS_ZERO_BASED and fit the DM (uverbs' DM_MR_REG), and the DMs
 * of a process share max_dm_size. */
#include "obj.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "../mem/mem.h"

static atomic_uint_fast64_t dm_used;   /* bytes of all DMs of the process (one device) */

static int dm_copy_check(const struct uroce_dm *dm, uint64_t off, size_t len)
{
	/* mlx5_dm_memcpy: a range past the DM is EFAULT, unaligned EINVAL */
	if (off > dm->length || len > dm->length - off)
		return EFAULT;
	if ((off | len) & 3)
		return EINVAL;
	return 0;
}

static int dm_memcpy_to(struct ibv_dm *ibdm, uint64_t off, const void *host, size_t len)
{
	struct uroce_dm *dm = to_udm(ibdm);
	int rc = dm_copy_check(dm, off, len);

	if (!rc)
		memcpy(dm->mem + off, host, len);
	return rc;
}

static int dm_memcpy_from(void *host, struct ibv_dm *ibdm, uint64_t off, size_t len)
{
	struct uroce_dm *dm = to_udm(ibdm);
	int rc = dm_copy_check(dm, off, len);

	if (!rc)
		memcpy(host, dm->mem + off, len);
	return rc;
}

struct ibv_dm *uroce_alloc_dm(struct ibv_context *ctx, struct ibv_alloc_dm_attr *attr)
{
	struct uroce_dm *dm;

	/* mlx5_alloc_dm: no comp_mask bit is defined; zero or too long a
	 * length is EINVAL; uroce aligns up to a page (log_align_req <= 12) */
	if (attr->comp_mask || !attr->length || attr->length > UROCE_MAX_DM || attr->log_align_req > 12) {
		errno = EINVAL;
		return NULL;
	}
	uint64_t len = (attr->length + 3) & ~(uint64_t)3;
	uint_fast64_t used = atomic_load(&dm_used);
	do {
		if (used + len > UROCE_MAX_DM) {
			errno = ENOMEM;   /* mlx5: no MEMIC left */
			return NULL;
		}
	} while (!atomic_compare_exchange_weak(&dm_used, &used, used + len));
	dm = calloc(1, sizeof(*dm));
	size_t align = (size_t)1 << (attr->log_align_req < 6 ? 6 : attr->log_align_req);
	/* a spare word past the end: an empty DM MR registers one byte
	 * (uroce_reg_dm_mr), which stays inside the allocation even at an
	 * offset of the DM's whole length */
	if (!dm || posix_memalign((void **)&dm->mem, align, len + 4)) {
		free(dm);
		atomic_fetch_sub(&dm_used, len);
		errno = ENOMEM;
		return NULL;
	}
	memset(dm->mem, 0, len + 4);
	dm->length = len;
	dm->ibv.context = ctx;
	dm->ibv.memcpy_to_dm = dm_memcpy_to;
	dm->ibv.memcpy_from_dm = dm_memcpy_from;
	atomic_init(&dm->refcnt, 0);
	return &dm->ibv;
}

int uroce_free_dm(struct ibv_dm *ibdm)
{
	struct uroce_dm *dm = to_udm(ibdm);

	if (atomic_load(&dm->refcnt))
		return EBUSY;   /* an MR still uses it (uverbs' usecnt) */
	atomic_fetch_sub(&dm_used, dm->length);
	free(dm->mem);
	free(dm);
	return 0;
}

struct ibv_mr *uroce_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *ibdm, uint64_t off, size_t length,
			       unsigned int access)
{
	struct uroce_dm *dm = to_udm(ibdm);

	/* uverbs DM_MR_REG: zero-based only, within the DM; mlx5 allows the
	 * local and remote access bits and nothing else */
	if (!(access & IBV_ACCESS_ZERO_BASED) || off > dm->length || length > dm->length - off ||
	    (access & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED))) {
		errno = EINVAL;
		return NULL;
	}
	/* a DM MR may be empty (pyverbs' test_create_dm_mr registers 0 bytes;
	 * an ordinary MR may not): register a byte and cover none of it */
	struct ibv_mr *mr = uroce_reg_mr_iova(pd, dm->mem + off, length ? length : 1, 0, access);
	if (!mr)
		return NULL;
	mr->length = length;
	to_umr(mr)->length = length;
	/* rdma-core's ibv_cmd_reg_dm_mr leaves addr NULL: the MR's addresses
	 * are offsets */
	mr->addr = NULL;
	to_umr(mr)->dm = dm;
	atomic_fetch_add(&dm->refcnt, 1);
	return mr;
}
