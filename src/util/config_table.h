/* Every UROCE_* environment setting, once.  The library's loader and printer
 * (config.c), `uroce info` and README.md's "Configuration (environment)"
 * table (printed by `uroce info --settings-markdown`, compared by ctest
 * unit_readme_config) are all made from these rows.  Plain macros, no
 * includes: the launcher compiles the table without the library.
 *
 * X(NAME, FIELD, KIND, A, B, DEF, SHOWN, HELP)
 *   NAME   the variable
 *   FIELD  the struct uroce_config field it fills (none: launcher only)
 *   KIND   how the value is read (config.c, LOAD_<KIND>); unset or empty
 *          means DEF unless said otherwise:
 *     addr      IPv4/IPv6 addresses, comma separated, at most UROCE_MAX_GIDS
 *               (also ngids, addr_from_env); a bad one is EINVAL
 *     mtu       256, 512, 1024, 2048 or 4096, anything else is EINVAL
 *               (also mtu_from); DEF is a call that sets the default
 *     path      a file name, "%p" in it becomes the PID; empty: off
 *     uint      strtoul (any base), then clamped to A..B
 *     level     as uint, into an int
 *     bool      off when the value starts with '0', else on
 *     set       on when set at all, even to "" or "0"
 *     word      on when the value is exactly A, off otherwise (B the other
 *               word, for display)
 *     fault     "N": every N-th packet into FIELD; "P%": P percent, clamped
 *               0..100, into the field named by A
 *     launcher  read by tools/uroce.c only, no field
 *   DEF    the default, a C expression over the rows above it (rows load in
 *          order); 0 where KIND has none
 *   SHOWN  the default as people are shown it (README, `uroce info`)
 *   HELP   the README's meaning column (markdown, no '|')
 */
#ifndef UROCE_UTIL_CONFIG_TABLE_H
#define UROCE_UTIL_CONFIG_TABLE_H

#define UROCE_CONFIG_TABLE(X) \
	X(UROCE_ADDR, gids, addr, 0, 0, 0, \
	  "a unique `127.64.x.y` per process (same-host only)", \
	  "IPv4/IPv6 address(es) to bind, comma separated; GID index 0 is the first") \
	/* before UROCE_MTU, whose default it caps at 2048 */ \
	X(UROCE_XDP, xdp, bool, 0, 0, false, "0", \
	  "`1`: send and receive by AF_XDP on the interface of `UROCE_ADDR` (one IPv4 address) instead of " \
	  "UDP sockets, past the kernel's IP and UDP layers: lower latency to peers on that link. Needs " \
	  "CAP_NET_ADMIN and CAP_BPF (root), one process per interface, a port MTU of 2048 at most; no " \
	  "same-host rings or multicast (docs/architecture.md \"The AF_XDP backend\")") \
	/* rxe's rule, after the addresses: their interfaces' MTUs */ \
	X(UROCE_MTU, active_mtu, mtu, 0, 0, active_mtu_from_netdevs(cfg), \
	  "as rxe: the largest that fits the interface MTU less 80 bytes (loopback 4096, Ethernet 1500 → 1024)", \
	  "port active MTU: 256, 512, 1024, 2048, 4096 (applications may choose any path MTU up to the " \
	  "port's at RTR; it must fit the link: 1500-byte Ethernet takes ≤ 1024)") \
	X(UROCE_PCAP, pcap_path, path, 0, 0, 0, "off", \
	  "write every packet sent and received to this pcap (Wireshark/tshark decode it as RoCEv2); " \
	  "`%p` in the name becomes the PID") \
	/* 0: the bandwidth-delay product in bytes decides (cc.h cc_window_max) */ \
	X(UROCE_WINDOW, window, uint, 0, 4096, 0, \
	  "as many packets as 512 KiB at the QP's path MTU (128 at 4096, 512 at 1024)", \
	  "most unacknowledged packets per RC QP (and READ response chunk), 1..4096; `0` or unset: " \
	  "the default, which keeps the same bytes in flight whatever the path MTU") \
	/* 10 ms: a 1 ms floor woke the engine often enough to cost latency on \
	 * a small machine; 10 ms still recovers a lost tail well before the \
	 * usual 67 ms ACK timeout */ \
	X(UROCE_RTO_MIN_US, rto_min_us, uint, 0, UINT_MAX, 10000, "10000", \
	  "floor of the adaptive retransmission timer: an RC requester that hears nothing for 2 × the " \
	  "measured round trip (+ 4 × its variation), and at least this long, resends its oldest " \
	  "unacknowledged packet without waiting for the ACK timeout (armed on paths with a round trip " \
	  "of 0.5 ms or more, and for a second after a loss); `0` turns it off") \
	X(UROCE_SHM, shm, bool, 0, 0, true, "1", \
	  "`0`: reach other uroce processes of this host by loopback UDP too, instead of shared-memory " \
	  "rings (a `tshark -i lo` capture then sees their traffic; `UROCE_PCAP` records either way)") \
	X(UROCE_SHM_BELL, shm_bell, bool, 0, 0, true, "1", \
	  "a process hands the uroce processes that send to it through its rings a socket to wake " \
	  "its sleeping engine by (a doorbell); `0`: it hands none, and they wake it by a datagram to " \
	  "its address (docs/architecture.md \"Same-host rings\", Wake-up)") \
	X(UROCE_SHM_DIRECT_MIN, shm_direct_min, uint, 0, UINT_MAX, 16384, "16384", \
	  "RC SENDs, WRITEs and READs of at least this many bytes between uroce processes of one host " \
	  "are copied once, straight between the two processes' memory (`process_vm_readv`), instead " \
	  "of as packets through the ring; `0`: never (docs/architecture.md \"The single copy\")") \
	/* 256 KiB: below it the helper's wake-up (~10-20 us on this \
	 * project's machine) is most of the copy's time */ \
	X(UROCE_PULL_SPLIT_MIN, pull_split_min, uint, 0, UINT_MAX, 262144, "262144", \
	  "a same-host copy by reference of at least this many bytes is shared, 128 KiB at a time, " \
	  "with a helper thread on another CPU; `0`: one thread copies it (docs/architecture.md " \
	  "\"The single copy\")") \
	X(UROCE_SPIN_US, spin_us, uint, 0, UINT_MAX, 50, "50", \
	  "how long the engine busy-polls after the last packet before sleeping, when no application " \
	  "polls, and only while no more threads are runnable than there are CPUs") \
	X(UROCE_HANDOFF, handoff_defer, word, "defer", "grace", false, "`grace`", \
	  "`grace` or `defer`: how the engine and applications polling their CQs share the receive " \
	  "path (docs/architecture.md)") \
	/* after UROCE_HANDOFF: defer hands over within microseconds */ \
	X(UROCE_POLL_GRACE_US, poll_grace_us, uint, 0, UINT_MAX, cfg->handoff_defer ? 5 : 3000, \
	  "3000 (grace), 5 (defer)", \
	  "grace: the engine stays off the sockets while an application spins on its CQ and after, " \
	  "at most this long (in a process that peers send requests to, as long as the spin lasted, " \
	  "at least UROCE_POLL_SPIN_US); defer: an application that polled this recently is given " \
	  "the packets first") \
	X(UROCE_POLL_SPIN_US, poll_spin_us, uint, 0, UINT_MAX, 200, "200", \
	  "polls of the CQs this close together, for 10 us or more, mean an application spins on " \
	  "them and receives itself; polls further apart or in shorter runs leave receiving to the " \
	  "engine; `0`: never a spin") \
	X(UROCE_ACK_DEFER_US, ack_defer_us, uint, 0, UINT_MAX, 20, "20", \
	  "how long an owed ACK may wait for a request of its QP to leave with (the answer of a " \
	  "request-response exchange); `0`: ACK at the end of each receive batch, with no wait for " \
	  "more of a stream (docs/architecture.md, ACKs of a stream)") \
	X(UROCE_CORK_PKTS, cork_pkts, uint, 0, 4096, 16, "16", \
	  "a one-packet SEND or WRITE posted while its RC QP has packets unacknowledged waits, " \
	  "so that later posts leave with it in one send, until this many wait, the application " \
	  "polls a CQ or arms one, or a response of the QP comes; `0`: every post sends at once " \
	  "(docs/architecture.md, Posts that join a stream)") \
	X(UROCE_ENGINE_RT, engine_rt, bool, 0, 0, true, "on when permitted", \
	  "`0`: keep the engine thread an ordinary thread; otherwise it takes `SCHED_FIFO` priority 1 " \
	  "when permitted (root, CAP_SYS_NICE, RLIMIT_RTPRIO)") \
	X(UROCE_ENGINE_PLACE, engine_place, bool, 0, 0, true, "1", \
	  "`0`: leave where a real-time engine wakes to the kernel; otherwise, before it sleeps, it " \
	  "moves off a CPU that other threads keep busy to one they leave idle") \
	X(UROCE_NO_GSO, no_gso, set, 0, 0, false, "off", \
	  "set (to any value, even `0`): one datagram per packet instead of UDP GSO bundles") \
	X(UROCE_POLL_PROGRESS, poll_progress, bool, 0, 0, true, "1", \
	  "`0`: `ibv_poll_cq` only reads the CQ and leaves receiving to the engine (diagnostic)") \
	X(UROCE_STATS, stats_at_exit, bool, 0, 0, false, "off", \
	  "`1`: print the counters to stderr when the device closes") \
	/* owner-only by default: the page carries the command line; write \
	 * bits are never granted (the page is ours alone to change) */ \
	X(UROCE_STATS_MODE, stats_mode, uint, 0, 0644, 0600, "0600", \
	  "permissions of the counters page `/dev/shm/uroce.<pid>` (octal with a leading 0); `0644` lets " \
	  "other users' `uroce stat` read it; write bits are masked off") \
	X(UROCE_LOG, log_level, level, 0, UINT_MAX, 0, "0", \
	  "0 errors, 1 info, 2 debug") \
	X(UROCE_FAULT_DROP_TX, fault_drop_tx, fault, fault_pct_tx, 0, 0, "off", \
	  "`N`: drop every N-th packet sent; `P%`: drop P percent at random (seeded by " \
	  "`UROCE_FAULT_SEED`, so a failure reproduces)") \
	X(UROCE_FAULT_DROP_RX, fault_drop_rx, fault, fault_pct_rx, 0, 0, "off", \
	  "as `UROCE_FAULT_DROP_TX`, for packets received") \
	X(UROCE_FAULT_SEED, fault_seed, uint, 0, UINT_MAX, 1, "1", \
	  "seed of the random drops of `UROCE_FAULT_DROP_TX` and `UROCE_FAULT_DROP_RX`") \
	X(UROCE_LIB, none, launcher, 0, 0, 0, "next to the launcher", \
	  "path of liburoce.so for the launcher") \
	X(UROCE_SANITIZER_RUNTIME, none, launcher, 0, 0, 0, "none", \
	  "sanitizer runtime(s), colon separated, the launcher preloads ahead of a sanitizer build of " \
	  "liburoce.so (scripts/test.sh sets it)")

#endif
