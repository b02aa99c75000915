/* Memory: the MR table and its keys, the one memory check with its named
 * verdicts, and copies over resolved segment lists.
 *
 * Keys: bits 8..23 index the key table, bits 24..31 and 0..7 are random, so
 * a key is unique and not trivially guessable; lkey == rkey as on rxe.  An
 * index names an MR or a memory window (mem/mw.h), never both, and the low
 * 8 bits are the part a type 2 bind replaces (IBA 10.6.7.2.4, ibv_inc_rkey).  The
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
	X(MEM_QP_MISMATCH, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR) /* a type 2 window of another QP */

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
static inline uint32_t mem_key_index(uint32_t key)
{
	return (key >> 8) & (UROCE_MAX_MR - 1);
}
/* The windows' slots of the same table (mem/mw.c compares the whole key). */
struct uroce_mw;
void mem_mw_publish(uint32_t key, struct uroce_mw *mw);
void mem_mw_unpublish(uint32_t key);
struct uroce_mw *mem_mw_slot(uint32_t key);

struct uroce_mr *mr_get(struct uroce_dev *dev, uint32_t key);
enum uroce_mem_verdict mr_check_remote(struct uroce_dev *dev, struct uroce_pd *pd, uint32_t rkey,
				       uint64_t va, uint64_t len, unsigned access, struct uroce_mr **out);
enum uroce_mem_verdict mr_resolve_local(struct uroce_dev *dev, struct uroce_pd *pd, const struct ibv_sge *sge,
					unsigned access, struct uroce_seg *out);
static inline uint8_t *mr_host(const struct uroce_mr *mr, uint64_t va)
{
	return mr->host + (va - mr->iova);
}

/* copy helpers over a segment list */
void seg_copy_to(const struct uroce_seg *seg, uint32_t nseg, uint32_t off, const uint8_t *src, uint32_t len);
/* iovecs for `len` bytes at offset `off`; returns the iovec count used */
int seg_iov(const struct uroce_seg *seg, uint32_t nseg, uint32_t off, uint32_t len, struct iovec *iov, int max);

#endif
