/* Per-device counters: the one table (name, meaning).  Bumped where the
 * decision is made; readable from another process with `uroce stat`. */
#ifndef UROCE_UTIL_COUNTERS_H
#define UROCE_UTIL_COUNTERS_H

#include <stdint.h>

#define UROCE_COUNTERS(X) \
	X(tx_packets, "packets sent") \
	X(tx_bytes, "UDP payload bytes sent") \
	X(rx_packets, "packets received") \
	X(rx_bytes, "UDP payload bytes received") \
	X(rx_by_engine, "packets received by the engine thread (the rest by applications' polls)") \
	X(tx_errors, "send syscalls that failed") \
	X(tx_full, "packets not sent: the shared socket's send buffer was full (lost; RC resends them)") \
	X(tx_too_big, "sends the route refused as larger than its MTU (EMSGSIZE)") \
	X(path_mtu_refused, "modify_qp calls refused: the path MTU does not fit the route") \
	X(retransmits, "packets sent again (go-back-N)") \
	X(timeouts, "local ACK timeouts") \
	X(rto_probes, "probes sent by the adaptive retransmission timer") \
	X(rnr_naks_rx, "RNR NAKs received") \
	X(rnr_naks_tx, "RNR NAKs sent") \
	X(seq_naks_rx, "PSN sequence error NAKs received") \
	X(seq_naks_tx, "PSN sequence error NAKs sent") \
	X(inv_req_naks_tx, "invalid request NAKs sent") \
	X(access_naks_tx, "remote access error NAKs sent") \
	X(op_naks_tx, "remote operational error NAKs sent") \
	X(err_naks_rx, "invalid request/access/operational NAKs received") \
	X(acks_tx, "ACKs sent") \
	X(acks_ridden, "ACKs that waited for and left with a request of their QP") \
	X(acks_deferred_late, "deferred ACKs sent alone when no request came in time") \
	X(acks_stream_waits, "owed ACKs that waited for more of a stream of messages, to cover them all") \
	X(acks_stream_unfilled, "stream ACK waits that ended at their deadline: the QP waits no more for a while") \
	X(acks_rx, "ACKs received") \
	X(posts_corked, "one-packet posts that waited for later posts of their stream, to leave with them") \
	X(corked_sent_by_poll, "QPs whose waiting posts a CQ poll or arm sent") \
	X(cork_misses, "lone waiting posts a response of their QP sent: the QP sends at once for a while") \
	X(duplicates, "duplicate requests answered") \
	X(dup_responses, "duplicate or stale responses ignored") \
	X(out_of_sequence, "requests ahead of the expected PSN") \
	X(icrc_errors, "packets dropped: bad ICRC") \
	X(icrc_ipid_solved, "IPv4 packets whose ICRC matched a non-zero IP ID") \
	X(drop_truncated, "packets dropped: too short for their headers") \
	X(drop_bad_header, "packets dropped: bad TVer, P_Key, pad or opcode") \
	X(drop_unknown_qp, "packets dropped: no such destination QP") \
	X(drop_qp_state, "packets dropped: QP not in a receiving state") \
	X(drop_wrong_peer, "packets dropped: source address or transport mismatch") \
	X(drop_psn_window, "packets dropped: out of sequence after NAK") \
	X(drop_qkey, "packets dropped: bad Q_Key") \
	X(drop_no_recv, "UD/UC packets dropped: no receive posted") \
	X(mcast_rx, "multicast packets received for a group that QPs here are attached to") \
	X(drop_injected, "packets dropped by UROCE_FAULT_* fault injection") \
	X(cq_overruns, "completion queue overruns") \
	X(engine_kicks, "engine wake-ups asked for by another thread (an earlier deadline, a hand-back)") \
	X(timer_scans, "scans of the QP timers") \
	X(engine_sleeps, "engine sleeps on the sockets once traffic was seen") \
	X(engine_spin_no_cpu, "engine spins not begun: no CPU to spare (/proc/loadavg)") \
	X(engine_moves, "engine moves to a CPU other threads leave idle, before it sleeps (its own kept busy)") \
	X(engine_spin_displaced, "engine spins given up: a yield lost the CPU for a slice (a thread computes on it)") \
	X(shm_packets_tx, "packets sent through same-host rings (counted in tx_packets too)") \
	X(shm_packets_rx, "packets received from same-host rings (counted in rx_packets too)") \
	X(shm_ring_full, "packets lost: the peer's same-host ring was full") \
	X(shm_doorbells_tx, "doorbells rung for a peer whose engine slept: datagrams to its bell, or to its address where it gave none") \
	X(shm_doorbells_udp, "of those, datagrams to its address: the peer handed over no bell with its region") \
	X(shm_doorbells_rx, "doorbells received: on our bell, and datagrams to our address") \
	X(shm_bad, "same-host ring entries dropped: impossible count or length") \
	X(shm_fork_refused, "same-host ring sends refused: a forked child's flow on its parent's ring (by UDP from then on)") \
	X(shm_dir_refused, "devices opened without same-host rings: the rendezvous directory is not private (net/shm.c)") \
	X(shm_region_failed, "same-host ring regions that could not be made (memfd, seals, mapping or socket: logged once): that address takes UDP") \
	X(shm_serve_stalled, "same-host rendezvous listeners unwatched for up to 10 ms (the engine then serves again): a connection could not be accepted") \
	X(shm_parts_tx, "send calls into same-host rings ended after a part of a long message (SHM_PART_BYTES)") \
	X(ref_tx, "message parts and READ answers sent to a same-host peer by reference, for it to copy from this process's memory (UROCE_SHM_DIRECT_MIN)") \
	X(ref_bytes_tx, "bytes sent by reference (ref_tx)") \
	X(ref_rx, "references received and copied from the peer's memory (one copy, no packets)") \
	X(ref_bytes_rx, "bytes copied from a same-host peer's memory by reference") \
	X(ref_pull_helper_bytes, "bytes of large references (UROCE_PULL_SPLIT_MIN) that the pull helper thread copied beside the thread that received them") \
	X(ref_pull_failed, "references refused: the peer's memory could not be read (process gone, no permission, memory unmapped), or they named another process than the peer's; what they stood for comes again as packets") \
	X(ref_naks_rx, "references the peer refused (a sequence NAK flagged so): resent as packets, counted as no loss") \
	X(ref_dropped, "references not sent: the flow had to go by UDP, which cannot carry one (resent as data)") \
	X(ref_refused, "references dropped as malformed or where none may come (not RC, not SEND/WRITE/READ answer)") \
	X(xdp_no_neigh, "packets not sent by AF_XDP (UROCE_XDP): the peer's link address was not known yet (lost; RC resends them)") \
	X(xdp_rx_not_ours, "frames the AF_XDP filter handed over that held no RoCEv2 packet for this device's address") \
	X(cnps_rx, "congestion notification packets received (handed to the QP's controller)") \
	X(share_forwarded, "packets for another process's QP on a shared address, forwarded to it (net/share.c)") \
	X(share_forwarded_rx, "packets that another process of a shared address forwarded here") \
	X(share_unowned, "packets dropped: for a QP slot of a shared address that no live process holds") \
	X(share_forward_failed, "packets dropped: the forward to their process could not be sent (its socket buffer full)") \
	X(share_probes_rx, "probes received that told this process its place in a shared address's group") \
	X(share_bad, "datagrams on a shared address's forward socket that were no forward of its registry") \
	X(cm_mads_tx, "connection manager MADs sent on QP1 (cm/)") \
	X(cm_mads_rx, "connection manager MADs received on QP1") \
	X(cm_mads_bad, "QP1 datagrams dropped: no well-formed CM MAD (size, versions, class, method, attribute, fields)") \
	X(cm_mads_unmatched, "CM MADs dropped: they name no connection of ours, or one in another state") \
	X(cm_retransmits, "CM MADs sent again on a timeout (REQ, REP, DREQ, SIDR_REQ)") \
	X(cm_rejects_tx, "REJs sent (no listener, a rejection, a failed REQ or REP)") \
	X(cm_conns_made, "CM connection records made (a connect, a REQ or SIDR_REQ received)") \
	X(cm_conns_freed, "CM connection records freed (their id destroyed and the protocol, timewait too, over)") \
	X(cm_backlog_drops, "REQs and SIDR_REQs dropped: their listener's backlog of unread requests was full") \
	X(sys_sendmmsg, "sendmmsg system calls (packets to the kernel's UDP), and with UROCE_XDP the AF_XDP socket's send calls") \
	X(sys_recvmmsg, "recvmmsg system calls, those that found nothing included, and reads of our same-host bell (doorbells)") \
	X(sys_poll, "epoll_pwait2 and ppoll system calls: the engine's sleeps, pollers' looks at the sockets") \
	X(sys_eventfd, "eventfd reads and writes: engine kicks, completion channel events and async events") \
	X(sys_yield, "sched_yield system calls of a spinning engine") \
	X(sys_vm_readv, "process_vm_readv system calls: same-host references pulled (a large one in chunks: UROCE_PULL_SPLIT_MIN)") \
	X(sys_sched, "sched_setscheduler and sched_{get,set}affinity system calls: a real-time engine spinning as an ordinary thread and back, and looking where to sleep (engine_place)") \
	X(sys_other, "other data-path system calls: doorbells, shared-address forwards, /proc/loadavg reads, per-CPU idle times (engine_place), looks for same-host rendezvous (accept4), ring producers' liveness (fcntl)") \
	X(sys_by_engine, "system calls counted above that the engine thread made (the rest: applications' threads in verbs calls, and the pull helper: UROCE_PULL_SPLIT_MIN)") \
	X(copy_to_kernel_bytes, "message payload bytes given to sendmmsg: the kernel copies them from registered memory (one copy)") \
	X(copy_from_kernel_bytes, "message payload bytes recvmmsg copied from the kernel into packet buffers") \
	X(copy_ring_in_bytes, "message payload bytes copied into a same-host peer's ring") \
	X(copy_ring_out_bytes, "message payload bytes copied out of a same-host ring into packet buffers") \
	X(copy_place_bytes, "message payload bytes copied from packet buffers into registered memory (placement)") \
	X(copy_inline_bytes, "message payload bytes copied into the work request when posted (IBV_SEND_INLINE)") \
	X(copy_forward_bytes, "bytes of packets for another process of a shared address, headers included: received here, then sent on to it (two copies each)")

enum uroce_counter {
#define X(n, d) UC_##n,
	UROCE_COUNTERS(X)
#undef X
	UC__COUNT
};

extern const char *const uroce_counter_names[UC__COUNT];
extern const char *const uroce_counter_help[UC__COUNT];

/* Add n to counter c of a stats page (stats.h); relaxed: counters order
 * nothing. */
#define UROCE_COUNT(page, c, n) __atomic_fetch_add(&(page)->counters[c], (n), __ATOMIC_RELAXED)

/* Set on the engine thread (exec/engine.c, mark_engine_thread): the
 * system calls counted below are told apart by who made them. */
extern _Thread_local _Bool uroce_engine_thread;

/* n system calls of kind c (a UC_sys_* counter) made by uroce's code:
 * bench/costs.py reads these per message, and tests/costs checks them
 * against strace's count of the same calls. */
#define UROCE_COUNT_SYSCALL(page, c, n) \
	do { \
		UROCE_COUNT(page, c, (n)); \
		if (uroce_engine_thread) \
			UROCE_COUNT(page, UC_sys_by_engine, (n)); \
	} while (0)

#endif
