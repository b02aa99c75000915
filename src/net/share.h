/* One RoCE address shared by the uroce processes of one user (issue #15,
 * docs/architecture.md "One address, many processes").
 *
 * A peer sends every packet to <address>:4791 and names the QP by the BTH
 * destination QPN (roce-wire.md §3.1); so each process's receive socket
 * joins one SO_REUSEPORT group on <address>:4791, and a classic-BPF program
 * attached to the group (SO_ATTACH_REUSEPORT_CBPF) picks the socket from
 * the destination QPN.  A QPN's high bits are its process's slot (QPN =
 * slot << SHARE_SLOT_SHIFT | index), claimed in a registry per address: a
 * file in a directory private to the user (shm_registry_dir) whose slot s
 * is held by an OFD lock on byte 1 + s for the holder's life, released by
 * the kernel when it exits or crashes.
 *
 * The program returns an index into the group, and the kernel reorders the
 * group when a member leaves (the last one takes the leaver's place); so
 * each member learns its index by probes (a datagram the program sends to
 * the index it carries), and a packet that still reaches the wrong process
 * is forwarded to its owner's private socket, wrapped with what the
 * receive path needs (addresses, traffic class, hop limit), and sets off a
 * new round of probes.  Steering is therefore only an optimisation:
 * whatever the group's order, a packet for a live process's QP reaches it.
 *
 * Registry layout: a share_hdr and SHARE_SLOTS share_slot, every field
 * written by its slot's holder only (the header under the registry lock,
 * OFD lock on byte 0).  Nothing read from it is trusted beyond bounds: a
 * process of our user could write anything there, and the worst it can do
 * is misroute our user's packets, which it could send itself. */
#ifndef UROCE_NET_SHARE_H
#define UROCE_NET_SHARE_H

#include <stdbool.h>
#include <stdint.h>
#include "../util/limits.h"

#define SHARE_SLOT_SHIFT 14                     /* the QPN index bits: UROCE_MAX_QP */
#define SHARE_SLOTS (1u << (24 - SHARE_SLOT_SHIFT))
/* Slot 0 holds QP0 and QP1 (GSI: the CM's, issue #15 item 3) and the last
 * slot the multicast QPN 0xFFFFFF: no process's. */
#define SHARE_SLOT_FIRST 1u
#define SHARE_SLOT_LAST (SHARE_SLOTS - 2)

_Static_assert(UROCE_MAX_QP == 1u << SHARE_SLOT_SHIFT, "a QPN is slot << SHARE_SLOT_SHIFT | QP table index");

/* The wrapper a forwarded packet travels in (to the owner's forward
 * socket): the packet as the first receiver saw it. */
#define SHARE_FWD_HDR 56

struct share;
struct uroce_rxpkt;

static inline unsigned share_slot_of(uint32_t qpn)
{
	return (qpn & 0xFFFFFF) >> SHARE_SLOT_SHIFT;
}

/* Claims slot `slot` of gid's registry (made if absent): 0, -EBUSY when a
 * live process holds it, another -errno when there is no registry (no
 * private rendezvous directory): the address is then not shared. */
int share_open(const uint8_t gid[16], unsigned slot, struct share **out);
/* Releases the slot (and the program, which the group keeps until another
 * member replaces it). */
void share_close(struct share *sh);
/* After the receive socket rx_fd joined the group and the forward socket
 * fwd_fd is bound: records the forward port, attaches a program and sends
 * a round of probes. */
int share_join(struct share *sh, int rx_fd, int fwd_fd);

/* Receive side, for packets that came on the shared socket.  A probe (its
 * bytes, len): true when it was one (consumed). */
bool share_rx_probe(struct share *sh, const uint8_t *buf, uint32_t len);
/* A datagram for another slot than ours, to its owner's forward socket:
 * a packet (buf, len of pk) wrapped with pk's addresses, or, pk NULL, a
 * doorbell as it is.  1: sent; 0: nobody holds that slot; -1: the send
 * failed (the caller drops and counts it).  A forward starts a new round
 * of probes, at most one per SHARE_REPROBE_NS for the address.  The
 * system calls it made for the packet (the slot's lock test, the send) in
 * *syscalls; a round of probes' own are not counted. */
int share_forward(struct share *sh, unsigned slot, const struct uroce_rxpkt *pk, const uint8_t *buf, uint32_t len,
		  unsigned *syscalls);
/* Each receive call: a program update left for later (lock busy). */
void share_rx_tick(struct share *sh);
/* A datagram that came on the forward socket: fills pk (the wrapped packet
 * in place); false when it is no forward of our registry's. */
bool share_unwrap(struct share *sh, uint8_t *buf, uint32_t len, struct uroce_rxpkt *pk);

/* rdma_cm on a shared address (cm/): an rdma_cm port of space ps bound by
 * this process (0, -EADDRINUSE when another process holds it) and let go;
 * this process runs a CM; and, for a QP1 packet (BTH on), the slot whose CM
 * it is for -- the comm ID a reply names (share_comm_id), a REQ's port's
 * binder, else a process that runs a CM to reject it -- or 0: ours to
 * handle. */
int share_port_claim(struct share *sh, uint16_t ps, uint16_t port);
void share_port_release(struct share *sh, uint16_t ps, uint16_t port);
void share_cm_enable(struct share *sh);
unsigned share_cm_owner(struct share *sh, const uint8_t *pkt, uint32_t len);
/* A CM comm ID names its process by the slot in its high bits, as a QPN. */
#define SHARE_COMM_ID_SHIFT 22
static inline unsigned share_slot_of_comm_id(uint32_t id)
{
	return id >> SHARE_COMM_ID_SHIFT;
}

/* No other live member of the address, as the registry stood at the last
 * probe round and index recorded: nothing is forwarded to this member.  A
 * join begins a round, so a new member counts from then; one that left
 * counts until the next round or index (the safe side: net/udp.c then
 * looks at the forward socket before each receive).  One load of two words
 * unless they changed since the last answer, then a scan of the slots'
 * locks.  Any thread. */
bool share_alone(struct share *sh);

/* Tests: whether other live processes hold slots of this registry now;
 * whether more than one holds slots of gid's (from a fresh open of it). */
bool share_test_others(struct share *sh);
bool share_test_gid_shared(const uint8_t gid[16]);

#endif
