/* Placing received data into application memory as a NIC's DMA engine
 * does: the last byte of what one packet places is stored once, after every
 * other byte of it.
 *
 * A one-sided protocol may watch the memory a peer writes and then write it
 * itself: riostream (rsockets' riowrite) spins on the last byte of its
 * buffer until the peer's WRITE sets it, then sets it to its own marker and
 * WRITEs the buffer back.  libc's memcpy is free to store a byte twice: for
 * 64 bytes, __memmove_avx512_unaligned_erms stores two overlapping 64-byte
 * vectors, [0, 64) and [n - 64, n), the same bytes.  A target that saw the
 * first store and wrote its marker before the second one lost its marker to
 * the old byte, sent that old byte back, and both sides spun forever
 * (riostream hung after a few thousand round trips, both QPs idle, every
 * packet ACKed).  A NIC writes each byte once, in order, so the last byte
 * showing means the rest is there and nothing more will be stored.  Copying
 * all but the last byte with memcpy (stores it may repeat are all done
 * before) and then the last byte alone keeps that promise at memcpy's
 * speed. */
#ifndef UROCE_CORE_PLACE_H
#define UROCE_CORE_PLACE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "objects.h"

/* Copy n bytes to dst (application memory, maybe watched by its threads)
 * from src; dst's last byte is stored once, after all the others. */
static inline void place_bytes(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

	if (!n)
		return;
	memcpy(d, s, n - 1);
	/* a release store: every earlier store is visible before the last
	 * byte (a plain store on x86, whose stores are seen in program order;
	 * no fence, which ThreadSanitizer cannot follow) */
	__atomic_store_n(d + n - 1, s[n - 1], __ATOMIC_RELEASE);
}

/* The same across resolved segments (mem_sge_resolve), in order: the bytes
 * of seg[0], then seg[1] ... taken from src one after the other. */
static inline void place_segs(const struct uroce_seg *seg, uint32_t nseg, const uint8_t *src)
{
	for (uint32_t i = 0; i < nseg; i++) {
		place_bytes(seg[i].addr, src, seg[i].len);
		src += seg[i].len;
	}
}

#endif
