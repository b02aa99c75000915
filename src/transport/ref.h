/* The single copy on one host (issue #17): a message part or a READ's
 * answer sent by reference.
 *
 * Between two uroce processes of one host whose flow is a same-host ring,
 * the data of a large message need not travel through the ring (a copy in,
 * a copy out, an ICRC on each side, a record per packet).  The side that
 * has the data sends one record that names it in its own memory -- its pid
 * and the addresses of the bytes -- and the side that places the data
 * copies it straight from there into its own registered memory with
 * process_vm_readv, after its own key checks: one copy, done by the side
 * that writes, into its own memory only.
 *
 * - SEND and WRITE (RC): the requester sends a span of a message -- packets
 *   [i, j] of it, at most REF_SPAN_BYTES -- as one packet with the headers
 *   the span's first packet would have had (RETH on a FIRST or ONLY) and
 *   its last one's (immediate data, IETH, on a LAST or ONLY), at the
 *   span's first PSN, with AckReq; the opcode is the span's (FIRST, MIDDLE,
 *   LAST or ONLY of the message).  Its payload is the reference.  The
 *   responder checks it as it checks data (the same opcode sequence, rkey
 *   and receive-WQE checks, lengths by the span's packets: ref_span_pkts),
 *   pulls the bytes where the data would have gone, and takes the span's
 *   PSNs as if its packets had come.  The requester's buffer is its WQE's
 *   until the WQE completes, which the ACK after the pull allows.
 * - READ (RC): a fresh READ request on such a flow says NET_PKT_REF_OK and
 *   asks for up to REF_SPAN_BYTES at once; the responder may answer with one
 *   READ_RESPONSE_ONLY whose payload is a reference to the bytes in its
 *   memory, standing for all the request's responses.  The requester pulls
 *   them into its WQE's memory (checking its lkeys then) and completes.
 *   The data is read when the requester pulls, not when the responder
 *   executes the request: so until it has pulled, the requester sends no
 *   later request of that QP but READs (requester.c, ref_read_pending).
 *   A responder executes a QP's requests in order (IBA 9.5), and a WRITE,
 *   SEND or atomic after the READ -- the peer's "I have read it, reuse the
 *   buffer" -- must not be executed before the READ's data has been read.
 *
 * A packet resent for any reason is data, never a reference (a reference is
 * sent only at a PSN never sent before), and a READ asked again does not
 * say NET_PKT_REF_OK: a reference that cannot be pulled (the process is
 * gone, its memory was unmapped, no permission to read it) is dropped by
 * its receiver and what it stood for comes again as packets, at once: a
 * responder NAKs its PSN (a sequence NAK, §6.2, flagged NET_PKT_REF_NAK so
 * that the requester spends no retry and its window takes no loss), a
 * requester asks its READ again.  A QP whose references were refused
 * REF_GIVE_UP times sends or asks for no more.
 *
 * Who may be named: a reference comes only from a ring (NET_PKT_REF, which
 * the UDP backend never reports), so only a process of our own user can send
 * one, and the rings trust those already (README "Security model").  It must
 * name the peer itself: the pid this process found behind the QP's flow by
 * reading a word the peer published (shm.c, probe_owner), so a peer cannot
 * make us read a process it may not read itself, and the pid means the same
 * process in both pid namespaces.  process_vm_readv checks our right to
 * read it with our own credentials.  The probe stands for the peer's
 * reading us; a non-dumpable process, Yama's ptrace_scope or a seccomp
 * filter can make that one-way, and the NAKs above then bring packets.
 *
 * Layout (host byte order: both ends are on one host): pid (u32), nseg
 * (u32), then nseg times { address (u64), length (u32), 0 (u32) }. */
#ifndef UROCE_TRANSPORT_REF_H
#define UROCE_TRANSPORT_REF_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include "../core/objects.h"

#define REF_HDR 8u
#define REF_SEG 16u
#define REF_MAX_SEGS 5u      /* what fits beside the headers in a packet's header buffer (tx.h) */
#define REF_BYTES(n) (REF_HDR + REF_SEG * (n))
/* The most one reference stands for: a pull of this size holds rx_lock for
 * ~70-100 us on this project's machine (bench/README.md), and larger
 * messages go as several spans. */
#define REF_SPAN_BYTES (1u << 20)
/* A QP whose references were refused by the peer, or whose READ answers by
 * reference could not be pulled, this many times sends or asks for no
 * more: the peer cannot read our memory or we cannot read its. */
#define REF_GIVE_UP 8u

/* A received reference, checked: the peer's bytes. */
struct ref_src {
	pid_t pid;
	uint32_t nseg;
	uint32_t len;                  /* their sum: the bytes it stands for */
	struct iovec seg[REF_MAX_SEGS];
};

/* Packets a span of `len` bytes stands for, or 0 if no span may be that
 * long: one that ends its message (LAST or ONLY) has 1..n*pmtu bytes in n
 * packets, any other exactly n*pmtu, n >= 1 (§7's length rules, per packet). */
static inline uint32_t ref_span_pkts(uint32_t len, uint32_t pmtu, bool ends_message)
{
	if (ends_message)
		return len ? (len + pmtu - 1) / pmtu : 0;
	return len >= pmtu && len % pmtu == 0 ? len / pmtu : 0;
}

/* A READ asked by reference from its packet idx on asks up to the next
 * REF_SPAN_BYTES boundary of the message (or its end): the packet after
 * the last one the answer stands for.  The requester asks so
 * (requester.c) and the completer expects so. */
static inline uint32_t ref_read_end(uint32_t pmtu, uint32_t npkts, uint32_t idx)
{
	uint32_t chunk = REF_SPAN_BYTES / pmtu;
	uint32_t end = (idx / chunk + 1) * chunk;
	return end < npkts ? end : npkts;
}

/* Writes the reference to segs (nseg <= REF_MAX_SEGS) of process pid at
 * dst; returns its length, REF_BYTES(nseg). */
uint32_t ref_put(uint8_t *dst, pid_t pid, const struct uroce_seg *seg, uint32_t nseg);
/* Reads and checks the n bytes at p: false if they are no reference
 * (length, counts, an empty segment, more than REF_SPAN_BYTES). */
bool ref_get(const uint8_t *p, uint32_t n, struct ref_src *out);
/* Copies the src->len bytes it names into dst (local, resolved and
 * checked by the caller, exactly src->len bytes in all), the last byte
 * last (core/place.h: a peer may poll it).  False when they could not all
 * be read; what was copied stays, as a NIC's partly placed message. */
struct uroce_dev;
bool ref_pull(struct uroce_dev *dev, const struct ref_src *src, const struct uroce_seg *dst, uint32_t ndst);

struct uroce_qp;
/* The pid of the QP's peer when its flow carries references (this process
 * read the peer's memory through it: net_flow_ref_peer) and they are on
 * (UROCE_SHM_DIRECT_MIN), with ours in *self; 0 otherwise.  A reference
 * received for the QP must name exactly that pid: a peer may name only
 * itself, never a process we can read and it cannot. */
pid_t ref_peer(const struct uroce_qp *qp, pid_t *self);
/* Does a reference received for qp name that peer? */
bool ref_from_peer(const struct uroce_qp *qp, const struct ref_src *ref);

struct uroce_pkt;
/* Places a received packet's payload into seg (resolved and checked by the
 * caller, exactly pkt->paylen bytes), the last byte last: copied from the
 * packet, or pulled from the peer when the packet is a reference (counted:
 * copy_place_bytes, or sys_vm_readv, ref_rx and ref_bytes_rx).  False: a reference whose bytes
 * could not be read. */
bool pkt_place(struct uroce_dev *dev, const struct uroce_pkt *pkt, const struct uroce_seg *seg, uint32_t nseg);

#endif
