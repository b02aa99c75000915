/* Memory: the MR table and its keys, the one memory check with its named
 * verdicts, and copies over resolved segment lists.
 *
 * Keys: the low 16 bits index the MR table, the high 16 bits are random, so
 * a key is unique and not trivially guessable; lkey == rkey as on rxe.  The
 * responder looks keys up under dev->rx_lock, and deregistration removes an
 * MR under that same lock, so no remote access can be in flight on a freed
 * MR; the transport never keeps an MR pointer across packets. */
#ifndef UROCE_MEM_H
#define UROCE_MEM_H

#include "../core/device.h"
#include "../wire/hdr.h"

/* The verdicts of a memory check (siw style) and what each means on the
 * wire and in a completion, in one place: X(name, NAK syndrome a responder
 * answers a remote access with (§5.3), status of a local work request
 * whose SGE fails it).  rxe and mlx5 answer every failed remote check with
 * the remote access error NAK and every failed lkey with LOC_PROT_ERR. */
#define UROCE_MEM_VERDICTS(X) \
	X(MEM_OK, 0, IBV_WC_SUCCESS) \
	X(MEM_KEY_INVALID, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR) \
	X(MEM_PD_MISMATCH, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR) \
	X(MEM_ACCESS, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR) \
	X(MEM_BOUNDS, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR) \
	X(MEM_UNMAPPED, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR)

enum uroce_mem_verdict {
#define X(name, nak, wc) name,
	UROCE_MEM_VERDICTS(X)
#undef X
};

struct uroce_mem_verdict_info {
	const char *name;
	uint8_t nak_syndrome;           /* AETH syndrome of the NAK; 0 for MEM_OK */
	enum ibv_wc_status local_status;
};
extern const struct uroce_mem_verdict_info uroce_mem_verdicts[];

static inline uint8_t mem_verdict_nak(enum uroce_mem_verdict v)
{
	return uroce_mem_verdicts[v].nak_syndrome;
}
static inline enum ibv_wc_status mem_verdict_local_status(enum uroce_mem_verdict v)
{
	return uroce_mem_verdicts[v].local_status;
}
static inline const char *mem_verdict_name(enum uroce_mem_verdict v)
{
	return uroce_mem_verdicts[v].name;
}

/* The MR table (under dev->rx_lock): a fresh key on a free index, 0 when
 * the table is full; publish/unpublish an MR under its key; a new key on
 * the same index (ibv_rereg_mr: old rkeys stop working). */
uint32_t mem_key_alloc(void);
void mem_mr_publish(struct uroce_mr *mr);
void mem_mr_unpublish(struct uroce_mr *mr);
uint32_t mem_key_renew(uint32_t key);

struct uroce_mr *mr_get(struct uroce_dev *dev, uint32_t key);
enum uroce_mem_verdict mr_check_remote(struct uroce_dev *dev, struct uroce_pd *pd, uint32_t rkey,
				       uint64_t va, uint64_t len, unsigned access, struct uroce_mr **out);
enum uroce_mem_verdict mr_resolve_local(struct uroce_dev *dev, struct uroce_pd *pd, const struct ibv_sge *sge,
					unsigned access, struct uroce_seg *out);
/* In integers: an implicit ODP MR has host NULL and iova 0, and an offset
 * from a null pointer is undefined behaviour. */
static inline uint8_t *mr_host(const struct uroce_mr *mr, uint64_t va)
{
	return (uint8_t *)((uintptr_t)mr->host + (uintptr_t)(va - mr->iova));
}

/* An access modifier for mr_check_remote: key, PD, access and bounds only,
 * no look at the mapping (a WRITE's first packet checks the whole message's
 * range, and its packets are each checked with the mapping as they land,
 * so one request cannot make the responder fault in gigabytes). */
#define MEM_CHECK_NO_PROBE (1u << 31)

/* An implicit ODP MR (ibv_reg_mr(3): addr NULL, length SIZE_MAX with
 * IBV_ACCESS_ON_DEMAND): its keys cover the whole address space. */
static inline bool mr_is_implicit(const void *addr, size_t length, unsigned access)
{
	return !addr && length == SIZE_MAX && (access & IBV_ACCESS_ON_DEMAND);
}

/* Whether [addr, addr+len) is mapped with read (or, with `write`, write)
 * permission now, faulting its pages in as a write (or read) would: what
 * an ODP MR's page fault does (ibv_advise_mr's prefetch uses it too). */
bool mem_populate(const void *addr, uint64_t len, bool write);

/* copy helpers over a segment list */
void seg_copy_to(const struct uroce_seg *seg, uint32_t nseg, uint32_t off, const uint8_t *src, uint32_t len);
/* iovecs for `len` bytes at offset `off`; returns the iovec count used */
int seg_iov(const struct uroce_seg *seg, uint32_t nseg, uint32_t off, uint32_t len, struct iovec *iov, int max);

#endif
