/* Memory: the MR table and its keys, the one memory check with its named
 * verdicts, and the execution-time translation of a WQE's SGEs.
 *
 * Keys: bits 8..23 index the key table, bits 24..31 and 0..7 are random, so
 * a key is unique and not trivially guessable; lkey == rkey as on rxe.  An
 * index names an MR or a memory window (mem/mw.h), never both, and the low
 * 8 bits are the part a type 2 bind replaces (IBA 10.6.7.2.4, ibv_inc_rkey).
 *
 * When memory is checked (docs/architecture.md, "Where memory is checked,
 * and when"): every key -- an rkey in a request, an lkey in a WQE -- is
 * looked up and checked when the access executes, never when a WQE is
 * posted, as rxe's copy_data/lookup_mr and mlx5 do.  A host pointer from a
 * lookup lives only within the lock hold that made it: the requester's
 * under qp->lock, the responder's and completer's under dev->rx_lock (and
 * qp->lock).  ibv_dereg_mr/ibv_rereg_mr unpublish the MR and then fence
 * both (obj/mr.c, mr_unpublish_fenced), so once they return no execution can still
 * use the old translation. */
#ifndef UROCE_MEM_H
#define UROCE_MEM_H

#include "../core/device.h"
#include "../wire/hdr.h"

/* The verdicts of a memory check (siw style) and what each means on the
 * wire and in a completion, in one place: X(name,
 *   NAK syndrome a responder answers a failed rkey with (§5.3),
 *   status of a local work request whose SGE fails it when it executes --
 *     a send/WRITE/READ/atomic WQE at its requester, a receive WQE at the
 *     responder,
 *   NAK syndrome a responder answers when the receive WQE a request
 *     consumed fails it).
 * rxe and mlx5 answer every failed remote check with the remote access
 * error NAK and fail every local WQE whose lkey fails with LOC_PROT_ERR;
 * a receive WQE that fails is the responder's own fault, so the requester
 * is told Remote Operational Error (NAK 0x63, §5.3: rxe's
 * RESPST_ERR_MALFORMED_WQE; pyverbs test_mr_rereg_addr/_pd expect "Remote
 * operation error" at the sender).  rxe completes that receive
 * LOC_QP_OP_ERR, mlx5 LOC_PROT_ERR; uroce follows mlx5. */
#define UROCE_MEM_VERDICTS(X) \
	X(MEM_OK, 0, IBV_WC_SUCCESS, 0) \
	X(MEM_KEY_INVALID, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR, AETH_NAK_REM_OP) \
	X(MEM_PD_MISMATCH, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR, AETH_NAK_REM_OP) \
	X(MEM_ACCESS, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR, AETH_NAK_REM_OP) \
	X(MEM_BOUNDS, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR, AETH_NAK_REM_OP) \
	X(MEM_QP_MISMATCH, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR, AETH_NAK_REM_OP) /* a type 2 window of another QP */ \
	X(MEM_UNMAPPED, AETH_NAK_REM_ACCESS, IBV_WC_LOC_PROT_ERR, AETH_NAK_REM_OP) /* ODP: not mapped with that permission now */

enum uroce_mem_verdict {
#define X(name, nak, wc, rnak) name,
	UROCE_MEM_VERDICTS(X)
#undef X
};

struct uroce_mem_verdict_info {
	const char *name;
	uint8_t nak_syndrome;           /* AETH syndrome of the NAK; 0 for MEM_OK */
	enum ibv_wc_status local_status;
	uint8_t recv_nak_syndrome;      /* a receive WQE failed it; 0 for MEM_OK */
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
static inline uint8_t mem_verdict_recv_nak(enum uroce_mem_verdict v)
{
	return uroce_mem_verdicts[v].recv_nak_syndrome;
}
static inline const char *mem_verdict_name(enum uroce_mem_verdict v)
{
	return uroce_mem_verdicts[v].name;
}

/* The MR table (changed under dev->rx_lock, read by the requester under
 * qp->lock alone, hence atomic slots): a fresh key on a free index, 0 when
 * the table is full; publish/unpublish an MR under its key; a new key on
 * the same index (ibv_rereg_mr of the translation: old keys stop working). */
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
/* Executing a WQE: bytes [off, off+len) of its SGE list, each SGE they
 * touch checked now (lkey, PD, `access`, bounds of the bytes touched, as
 * rxe's copy_data) and translated into host segments, at most one per SGE
 * (out[] has room for nsge).  Returns the verdict of the first SGE that
 * fails; *nout is the segment count.  Under qp->lock or dev->rx_lock; the
 * segments are good only until that lock is released. */
enum uroce_mem_verdict mem_sge_resolve(struct uroce_dev *dev, struct uroce_pd *pd, const struct uroce_sge *sge,
				       uint32_t nsge, uint32_t off, uint32_t len, unsigned access,
				       struct uroce_seg *out, uint32_t *nout);
/* Place `len` bytes at offset `off` of an SGE list (LOCAL_WRITE), nothing
 * unless every SGE they touch passes. */
enum uroce_mem_verdict mem_sge_copy_to(struct uroce_dev *dev, struct uroce_pd *pd, const struct uroce_sge *sge,
				       uint32_t nsge, uint32_t off, const uint8_t *src, uint32_t len);
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

/* over resolved segments: iovecs for `len` bytes at offset `off`; returns the iovec count used */
int seg_iov(const struct uroce_seg *seg, uint32_t nseg, uint32_t off, uint32_t len, struct iovec *iov, int max);

#endif
