/* The same-host rings: RoCEv2 packets through shared memory instead of
 * loopback UDP, between uroce processes of one network namespace and one rendezvous directory (see
 * docs/architecture.md, "Same-host rings").  This is the mechanism --
 * regions, rings, their memory ordering; the backend built on it is
 * ring.c.  The packets are the very bytes the UDP path sends (BTH .. ICRC,
 * ICRC computed for the IPv4 ID the UDP path would have had), so the
 * receive path, the pcap tap and fault injection are the same for both;
 * only the loopback socket hop is gone.
 *
 * Every receive address (GID) of a device publishes one region of
 * SHM_RINGS single-producer rings: a sealed memfd, handed by file
 * descriptor to each process of our user that connects to the unix socket
 * "rx.<netns inode>.<GID and QPN slot in hex>" in a directory only our
 * user can enter (shm.c, "Rendezvous"): processes that share an address
 * (net/share.h) have a region each, and a flow finds its peer QP's by the
 * slot in the QPN.  A connected QP's flow claims one ring in its peer's region when it
 * opens and keeps it for its life, so each flow's packets keep their order
 * and never mix paths.  A receiver whose engine sleeps on its sockets says
 * so in the region; a sender that published into it then sends a 12-byte
 * UDP datagram (a doorbell, naming the slot: net.c rings it through
 * udp.c) to wake it. */
#ifndef UROCE_NET_SHM_H
#define UROCE_NET_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct uroce_txmsg;
struct uroce_rxpkt;
struct shm_rx;
struct shm_tx;

/* Receiver side: the region of one receive address, for the process whose
 * QPNs carry `slot`; NULL when there is none (no memfd, no socket,
 * UROCE_SHM=0). */
struct shm_rx *shm_rx_open(const uint8_t gid[16], unsigned slot);
/* The directory of the address registries (net/share.c), private to our
 * uid and the same for all its processes: its fd (O_PATH, checked; not
 * ours to close) or -EACCES. */
int shm_registry_dir(void);
/* Its name, for paths other programs' calls are sent to (sysfs/); NULL
 * when shm_registry_dir has none, or the name no longer names it. */
const char *shm_registry_path(void);
/* The network namespace's inode number: names are per namespace. */
unsigned long shm_netns_id(void);
void shm_rx_close(struct shm_rx *rx);
/* The socket producers connect to, for the engine's epoll (readable: a
 * producer waits for shm_rx_serve); -1 in a forked child, which serves
 * nothing. */
int shm_rx_listen_fd(const struct shm_rx *rx);
/* The region's bell, for the engine's epoll (level-triggered: readable
 * while a producer's doorbell, a datagram, waits on it); -1 when it has
 * none or in a forked child.  Each producer gets a socket of its own
 * connected to it, after the region (shm_rx_serve). */
int shm_rx_bell_fd(const struct shm_rx *rx);
/* Reads the doorbells waiting on the bell (a bounded number), closing any
 * fd one brought; returns how many, and adds its receive calls to *calls. */
unsigned shm_rx_bell_drain(struct shm_rx *rx, unsigned *calls);
/* Tests: what shm_rx_serve hands producers after the region. */
enum {
	SHM_TEST_BELL_OWN,       /* the region's bell */
	SHM_TEST_BELL_NONE,      /* none */
	SHM_TEST_BELL_STREAM,    /* a unix stream socket */
	SHM_TEST_BELL_NOT_SOCKET,
	SHM_TEST_BELL_BLOCKING,  /* the region's, made blocking first (O_NONBLOCK cleared) */
};
void shm_test_bell(int what);
/* Hands the region to every producer of our user waiting on the socket;
 * never blocks.  A producer waits SHM_CONNECT_WAIT_MS (shm.c) for it.
 * -1: a connection could not be accepted (no memory), the socket stays
 * readable: the caller stops watching it until it serves again.  The
 * accept4 calls it made in *accepts (NULL: not wanted); a look at an idle
 * socket is one. */
int shm_rx_serve(struct shm_rx *rx, unsigned *accepts);
/* Are these F_GET_SEALS bits a region's?  Its own seals, and F_SEAL_EXEC
 * besides (vm.memfd_noexec adds it), nothing else (shm.c). */
bool shm_seals_ok(int seals);
/* No rings in this process: the rendezvous directory is not private, or
 * the euid is the overflow uid (shm.c, "Rendezvous"). */
bool shm_dir_refused(void);
/* Does any sender hold a ring in it?  Never in a forked child: the
 * parent is the consumer. */
bool shm_rx_active(struct shm_rx *rx);
/* Up to max packets, each copied out of its ring into the region's private
 * receive buffers (a sender must not change a packet under validation);
 * *more is set when a ring holds more.  Counts packets that were not, and
 * adds the system calls it made to *calls (NULL: not wanted): a look,
 * every few ms, at rings whose producer may have died. */
int shm_rx_poll(struct shm_rx *rx, struct uroce_rxpkt *pkts, int max, bool *more, uint64_t *bad, unsigned *calls);
/* The engine is about to sleep on the sockets (true) or has woken.  After
 * `true` the caller polls the rings once more before it sleeps. */
void shm_rx_sleeping(struct shm_rx *rx, bool sleeping);
/* Has a ring of the region a record to take?  Without rx_lock, consuming
 * nothing: a hint (a ring that lies reads as ready until it is given
 * back). */
bool shm_rx_ready(struct shm_rx *rx);

/* Sender side: a ring in the region of dgid and slot (the peer QPN's:
 * share_slot_of) for one flow, kept for its
 * life: one of its own for each of the process's first flows to dgid (a
 * quarter of the rings), later ones share the least used of those (shm.c,
 * struct shm_tx); NULL when dgid has no live region in this namespace, or
 * no ring is free and the process holds none there.  The region's fd and
 * header mapping are one per peer address, not per flow. */
struct shm_tx *shm_tx_attach(const uint8_t dgid[16], unsigned slot);
/* Asks dgid's owner for its region, waiting up to SHM_CONNECT_WAIT_MS
 * (shm.c) for its answer, and caches the answer: the region (until a flow
 * attaches, or a second passes), or that there is none (for a second, so
 * that an owner that does not answer costs one wait, not one per QP; a
 * connect refused at once -- no socket file, a dead owner's -- is not
 * cached: it costs nothing to redo).  Concurrent asks for one address are
 * one (a waiter waits at most twice the bound, then UDP).  Called without
 * locks (ibv_modify_qp, before the QP's lock).  shm_tx_attach never asks
 * and never waits: without a fresh answer prepared (none, older than a
 * second, or its owner changed) the flow goes by UDP. */
void shm_tx_prepare(const uint8_t dgid[16], unsigned slot);
/* Tests: every cached answer expires now (as a second later). */
void shm_tx_test_expire(void);
void shm_tx_detach(struct shm_tx *tx);
/* The records of a send call appear to the consumer together (shm.c), so a
 * message is taken in only once the whole call is in the ring.  The
 * transport therefore ends a call on a ring early, after the first or a
 * middle packet of a message once this many bytes are in it: the consumer
 * copies out and places one part while the next is built, instead of the
 * building, the copy out and the placement of a long message following
 * one another (figures: bench/README.md).  Not while the consumer's engine
 * sleeps (shm_tx_peer_sleeping): a part would then ring a doorbell that
 * wakes it for nothing but the next part. */
#define SHM_PART_BYTES 16384

/* The consumer's engine sleeps on its sockets (a doorbell would wake it). */
bool shm_tx_peer_sleeping(const struct shm_tx *tx);
/* The ring owner's pid, if it answered our probe when its region was
 * opened (its pid means the same here, and we may read it: the check that
 * stands for its reading us), with our own pid in *self; 0 otherwise, in a
 * forked child, and when references are off (shm_refs). */
pid_t shm_tx_ref_peer(const struct shm_tx *tx, pid_t *self);
/* Probe peers, and so send references, or not (UROCE_SHM_DIRECT_MIN 0: not
 * even a process_vm_readv, which a seccomp policy may punish). */
void shm_refs(bool on);
/* Regions opened from now on come with a bell (true) or not: producers
 * then ring by UDP (UROCE_SHM_BELL). */
void shm_bells(bool on);

/* Copies msgs into the ring; returns how many fit (the rest are lost as on
 * a full socket, and retransmission recovers them).  *doorbell: the
 * receiver sleeps on its sockets and must be woken.  -EPIPE: the ring is
 * not this process's to produce into (a forked child's copy of its
 * parent's, shm.c "fork"), nothing was sent: the caller detaches and goes
 * on by UDP. */
int shm_tx_send(struct shm_tx *tx, const uint8_t sgid[16], uint16_t sport, uint8_t tos,
		const struct uroce_txmsg *msgs, int n, bool *doorbell);
/* Rings the doorbell shm_tx_send asked for by a datagram to the owner's
 * bell (a socket it handed over with the region); never blocks.  0, or
 * -ENODEV: the owner gave none (no system call made), or -errno: the send
 * failed; then the caller sends the datagram to its address. */
int shm_tx_ring_bell(const struct shm_tx *tx);
/* Tests: every ring of the region starts at position pos (before any is
 * claimed), to reach the 32-bit wrap of positions. */
void shm_rx_test_position(struct shm_rx *rx, uint32_t pos);
/* Tests (tests/fuzz/fuzz_shm.c): what a producer can write in ring idx of
 * the region -- the ring's bytes and the header words -- so that arbitrary
 * producer writes can be played against the consumer. */
struct shm_test_view {
	uint8_t *ring;
	size_t ring_bytes;
	unsigned nrings;
	uint32_t *ring_mask, *owner, *tail;  /* atomics of the region (plain stores will do) */
};
void shm_rx_test_view(struct shm_rx *rx, unsigned idx, struct shm_test_view *v);
/* Tests: the consumer forgets what it learned of the rings (broken ones,
 * where its round-robin starts), as if newly opened; positions stay. */
void shm_rx_test_reset(struct shm_rx *rx);

/* A shared file mapping a process of our user could truncate (the
 * counters page, util/stats.c): a SIGBUS in it turns it into private zero
 * pages (issue #13), and the process goes on, unless the faulting thread
 * blocks SIGBUS (README "Security model").  The rings need no guard: they
 * are sealed.  For the mapping's life (its slot, -1 when the guard table
 * is full); unguarded before it is unmapped. */
int shm_guard_mapping(void *p, size_t len);
void shm_unguard_mapping(int slot);
/* Tests: how many rings of a region the process claims before its flows
 * share them (0: the default, a quarter). */
void shm_tx_test_rings_own(unsigned n);
/* Tests: how many rendezvous asks this process made (connects). */
unsigned long shm_tx_test_asks(void);
/* Tests: how many fds a peer handed us were closed by a thread of their
 * own (close_foreign). */
unsigned long shm_test_foreign_closes(void);
/* Tests: how long a producer waits for an owner's answer (ms; 0: the
 * default, SHM_CONNECT_WAIT_MS). */
void shm_test_connect_wait(int ms);
/* Tests: whether regions opened from here refuse fds on their socket
 * (SO_PASSRIGHTS 0; false: as on a kernel before 6.16). */
void shm_test_passrights(bool refuse);
/* Tests: the size of a region's memfd. */
size_t shm_test_region_bytes(void);
/* Tests: the path of the rendezvous socket file of gid and slot. */
bool shm_test_socket_path(const uint8_t gid[16], unsigned slot, char *path, size_t n);

#endif
