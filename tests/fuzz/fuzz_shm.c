/* libFuzzer target: the same-host ring consumer (net/shm.c, shm_rx_poll)
 * against a producer that writes anything: raw bytes anywhere in its
 * rings, records with any header, the header words a producer can reach
 * (owner, the claimed-rings mask, the tail), polls in between.  The rings
 * are shared with every peer process of the user, so the consumer must
 * take no length on trust (docs/architecture.md, "Same-host rings",
 * Trust).  README.md, "Fuzzing", says how to run it; make_seeds.py writes
 * the seeds and documents the input format.
 *
 * One region serves every input: what an input wrote is cleared and the
 * consumer made to forget (shm_rx_test_reset) before the next, so a run
 * depends on its input alone.  Two rings are played (3 and 5); the last page of ring 2,
 * the first and last of ring 4 and the first of ring 6 are PROT_NONE, so a
 * read outside the played rings faults.  After each poll: every packet's
 * length is bounded and its bytes readable (ASan checks the copy-out
 * buffers); after each input: the consumer wrote nothing into the rings
 * (their bytes are what the producer wrote). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "net/net.h"
#include "net/shm.h"
#include "fuzz_input.h"

/* The QPN slot of the regions these tests open and attach to (shm.h: a
 * region is named by its address and its owner's slot) */
#define TEST_SLOT 1u

#define PAGE 4096u
#define UNIT 64u
#define PKT_MAX 4288u         /* shm.c's SHM_PKT_MAX */
static const unsigned played[2] = { 3, 5 };

/* shm.c's record header (struct shm_rec_hdr), as a producer writes it */
struct rec {
	uint32_t seq, len;
	uint16_t units, sport, ip_id;
	uint8_t tos, pad;
	uint8_t sgid[16];
};
_Static_assert(sizeof(struct rec) == 32, "half a unit");

static const uint8_t gid[16] = { [10] = 0xff, [11] = 0xff, 198, 18, 0, 9 };
static uint8_t *shadow[2];
static size_t dlo[2], dhi[2];  /* the bytes of each ring the last input wrote */
static struct uroce_rxpkt pkts[64];
static volatile uint8_t sink;

static void die(const char *what)
{
	fprintf(stderr, "fuzz_shm: %s\n", what);
	abort();
}

/* Producer writes go to the ring and to its shadow alike. */
static void put(struct shm_test_view *v, int r, size_t off, const void *src, size_t len)
{
	if (off >= v->ring_bytes)
		return;
	if (len > v->ring_bytes - off)
		len = v->ring_bytes - off;
	memcpy(v->ring + off, src, len);
	memcpy(shadow[r] + off, src, len);
	if (off < dlo[r])
		dlo[r] = off;
	if (off + len > dhi[r])
		dhi[r] = off + len;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct shm_rx *rx;
static struct shm_test_view v[2];
static size_t rb;

static void region_gone(void)
{
	shm_rx_close(rx);  /* its memfd and socket go with it */
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	rx = shm_rx_open(gid, TEST_SLOT);
	atexit(region_gone);
	if (!rx)
		die("shm_rx_open (needs memfd_create and a private rendezvous directory, net/shm.c)");
	for (int r = 0; r < 2; r++) {
		shm_rx_test_view(rx, played[r], &v[r]);
		if (!(shadow[r] = calloc(1, v[r].ring_bytes)))
			die("calloc");
		dlo[r] = v[r].ring_bytes;
	}
	rb = v[0].ring_bytes;
	uint8_t *ring0 = v[0].ring - (size_t)played[0] * rb;  /* ring 0 */
	if (mprotect(ring0 + 3 * rb - PAGE, PAGE, PROT_NONE) || mprotect(ring0 + 4 * rb, PAGE, PROT_NONE) ||
	    mprotect(ring0 + 5 * rb - PAGE, PAGE, PROT_NONE) || mprotect(ring0 + 6 * rb, PAGE, PROT_NONE))
		die("mprotect");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };

	/* the rings as new: what the last input wrote is cleared, the
	 * consumer forgets, and starts at the position the input chooses
	 * (near the 32-bit wrap, if it likes) */
	for (int r = 0; r < 2; r++) {
		if (dlo[r] < dhi[r]) {
			memset(v[r].ring + dlo[r], 0, dhi[r] - dlo[r]);
			memset(shadow[r] + dlo[r], 0, dhi[r] - dlo[r]);
		}
		dlo[r] = rb;
		dhi[r] = 0;
	}
	__atomic_store_n(v[0].ring_mask, 0, __ATOMIC_RELEASE);
	shm_rx_test_reset(rx);
	uint32_t pos0 = u32(&in);
	shm_rx_test_position(rx, pos0);
	/* a producer claims both played rings, as shm_tx_attach does */
	for (int r = 0; r < 2; r++)
		__atomic_store_n(v[r].owner, 1000u + (unsigned)r, __ATOMIC_RELEASE);
	__atomic_store_n(v[0].ring_mask, 1u << played[0] | 1u << played[1], __ATOMIC_RELEASE);

	uint64_t bad = 0;
	uint32_t next[2] = { pos0, pos0 };  /* where a RECORD op writes, in units from pos0 */
	for (int ops = 0; in.n && ops < 256; ops++) {
		uint8_t op = u8(&in);
		int r = (op >> 3) & 1;
		switch (op % 8) {
		case 0: { /* raw bytes at any offset of a ring */
			uint32_t off = u32(&in) % (uint32_t)rb;
			uint16_t len = u16(&in) % 512;
			if (len > in.n)
				len = (uint16_t)in.n;
			put(&v[r], r, off, in.p, len);
			in.p += len;
			in.n -= len;
			break;
		}
		case 1:
		case 2: { /* a record at the ring's next position, its header partly the input's */
			struct rec h;
			uint8_t fl = u8(&in);
			memset(&h, 0, sizeof(h));
			h.len = u16(&in) % (PKT_MAX + 64);
			h.units = fl & 1 ? u16(&in) : (uint16_t)((sizeof(h) + h.len + UNIT - 1) / UNIT);
			h.sport = 0xC0DE;
			h.ip_id = u8(&in);
			h.tos = u8(&in);
			memcpy(h.sgid, gid, 16);
			uint32_t at = next[r] + (fl & 2 ? (uint32_t)(int32_t)(int8_t)u8(&in) : 0);
			h.seq = fl & 4 ? u32(&in) : at + 1;
			size_t off = (size_t)(at % (uint32_t)(rb / UNIT)) * UNIT;
			uint32_t body = h.len;
			if (body > in.n)
				body = (uint32_t)in.n;
			put(&v[r], r, off + sizeof(h), in.p, body);
			in.p += body;
			in.n -= body;
			/* seq last, as a producer publishes */
			put(&v[r], r, off + 4, (uint8_t *)&h + 4, sizeof(h) - 4);
			put(&v[r], r, off, &h.seq, 4);
			next[r] = at + (h.units ? h.units : 1);
			break;
		}
		case 3: { /* the producer gives the ring back, or claims it again */
			uint32_t w = u8(&in) & 1 ? 0 : 1000u + (unsigned)r;
			__atomic_store_n(v[r].owner, w, __ATOMIC_RELEASE);
			break;
		}
		case 4: { /* a claimed-rings mask: the played rings, and the first and
			   * last (empty) of the region -- each ring claimed costs
			   * the consumer 2 MiB populated, so not all of them */
			uint32_t m = u32(&in) & (1u << played[0] | 1u << played[1] | 1u << 0 | 1u << 31);
			__atomic_store_n(v[0].ring_mask, m, __ATOMIC_RELEASE);
			break;
		}
		case 5: /* the tail word the consumer publishes: a producer may scribble */
			__atomic_store_n(v[r].tail, u32(&in), __ATOMIC_RELEASE);
			break;
		default: { /* the consumer polls */
			bool more = false;
			int max = 1 + u8(&in) % 64;
			int n = shm_rx_poll(rx, pkts, max, &more, &bad, NULL);
			if (n < 0 || n > max)
				die("poll returned more than asked");
			for (int i = 0; i < n; i++) {
				if (pkts[i].len > PKT_MAX)
					die("a packet longer than a record may hold");
				uint8_t x = 0;
				for (uint32_t k = 0; k < pkts[i].len; k++)
					x ^= pkts[i].buf[k];  /* readable, every byte (ASan) */
				sink = x;
				if (memcmp(pkts[i].dgid, gid, 16))
					die("a packet not to the region's address");
			}
			break;
		}
		}
	}
	/* the consumer reads the rings, it never writes them */
	for (int r = 0; r < 2; r++)
		if (memcmp(v[r].ring, shadow[r], rb))
			die("the consumer wrote into a ring");
	return 0;
}
