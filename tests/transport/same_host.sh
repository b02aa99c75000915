#!/bin/bash
# Same-host rings (src/net/shm.c) with Debian's unmodified ibv_rc_pingpong:
#  1. two uroce processes of one namespace exchange every packet through the
#     rings (UROCE_STATS: shm_packets_* are all of tx/rx_packets), nothing
#     dropped, resent or timed out;
#  2. with events (-e) and no engine spin (UROCE_SPIN_US=0) the engines
#     sleep on their sockets between messages, so senders must wake them with
#     doorbells: some are rung and no ACK times out (a lost wake-up shows as
#     a timeout, 67 ms, and a resend); each a datagram to the peer's bell,
#     or with UROCE_SHM_BELL=0 to its address;
#  3. a message of 64 KiB sent as packets (UROCE_SHM_DIRECT_MIN=0) goes
#     into the ring in parts while the peer polls (SHM_PART_BYTES: a send
#     call ends after 16 KiB at a first or middle packet) -- at most 3 cuts
#     a message, data checked by the pingpong -- and with events (-e, the
#     peer's engine asleep) arrives whole too;
#  4. by default, a message of 64 KiB is copied once, by reference
#     (transport/ref.h): one record a message, its bytes pulled by the
#     receiver (ref_rx, ref_bytes_rx), no parts, data checked;
#  5. UROCE_SHM=0 sends everything by UDP.
# usage: same_host.sh LAUNCHER
set -u
U=$1
command -v ibv_rc_pingpong >/dev/null || { echo "ibv_rc_pingpong missing (apt-get install ibverbs-utils)"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0

run_pair() { # name env... -- pingpong args
	local name=$1; shift
	local envs=()
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	env "${envs[@]}" UROCE_STATS=1 timeout 120 "$U" run -- ibv_rc_pingpong -g 0 -p "$port" "$@" >"$tmp/$name.s" 2>&1 &
	local spid=$!
	for _ in $(seq 100); do
		ss -ltn "sport = :$port" 2>/dev/null | grep -q LISTEN && break
		sleep 0.05
	done
	env "${envs[@]}" UROCE_STATS=1 timeout 120 "$U" run -- ibv_rc_pingpong -g 0 -p "$port" "$@" 127.0.0.1 >"$tmp/$name.c" 2>&1
	local crc=$?
	wait $spid
	local src=$?
	if [ $crc -ne 0 ] || [ $src -ne 0 ] || ! grep -q "iters in" "$tmp/$name.c"; then
		echo "not ok: $name: pingpong failed (client $crc, server $src)"
		cat "$tmp/$name.s" "$tmp/$name.c"
		fail=1
		return 1
	fi
	return 0
}

counter() { # file name -> value (0 when not printed)
	awk -v n="$2" '$1 == "uroce:" && $2 == n { v = $3 } END { print v + 0 }' "$1"
}

no_loss() { # name
	for side in s c; do
		local f=$tmp/$1.$side
		if grep -E 'uroce: +(icrc_errors|timeouts|seq_naks_tx|out_of_sequence|shm_ring_full|shm_bad|drop_[a-z_]+) ' "$f"; then
			echo "not ok: $1 ($side): packets were lost, resent or timed out"
			fail=1
		fi
		# A probe of the adaptive timer (architecture.md, "Timers") is a
		# host stall, not a loss: on a loaded machine the process may
		# sleep past 2 srtt.  Every other resend is a loss.
		local rt probes
		rt=$(counter "$f" retransmits); probes=$(counter "$f" rto_probes)
		if [ "$rt" -gt "$probes" ]; then
			echo "not ok: $1 ($side): $rt packets resent, $probes of them probes: packets were lost"
			fail=1
		fi
	done
}

if run_pair rings -- -c -s 3000 -n 500; then
	no_loss rings
	for side in s c; do
		f=$tmp/rings.$side
		tx=$(counter "$f" tx_packets); stx=$(counter "$f" shm_packets_tx)
		rx=$(counter "$f" rx_packets); srx=$(counter "$f" shm_packets_rx)
		if [ "$tx" -lt 1000 ] || [ "$stx" -ne "$tx" ] || [ "$srx" -ne "$rx" ]; then
			echo "not ok: rings ($side): tx $tx (rings $stx), rx $rx (rings $srx): not all through the rings"
			fail=1
		else
			echo "ok: rings ($side): $stx of $tx packets sent and $srx of $rx received through the rings"
		fi
	done
fi

# a doorbell is a datagram to the peer's bell (a unix socket it handed over
# with its region); with UROCE_SHM_BELL=0 the peer hands none and it is a
# datagram to the peer's address
for bell in 1 0; do
	name=doorbells_bell$bell
	if run_pair $name UROCE_SPIN_US=0 UROCE_SHM_BELL=$bell -- -c -e -s 100 -n 300; then
		no_loss $name
		rung=$(( $(counter "$tmp/$name.s" shm_doorbells_tx) + $(counter "$tmp/$name.c" shm_doorbells_tx) ))
		udp=$(( $(counter "$tmp/$name.s" shm_doorbells_udp) + $(counter "$tmp/$name.c" shm_doorbells_udp) ))
		heard=$(( $(counter "$tmp/$name.s" shm_doorbells_rx) + $(counter "$tmp/$name.c" shm_doorbells_rx) ))
		want_udp=0
		[ $bell = 0 ] && want_udp=$rung
		if [ "$rung" -eq 0 ] || [ "$heard" -eq 0 ]; then
			echo "not ok: $name: $rung rung, $heard heard: the sleeping engines were never woken by one"
			fail=1
		elif [ "$udp" -ne "$want_udp" ]; then
			echo "not ok: $name: $rung rung, $udp of them by UDP (want $want_udp)"
			fail=1
		else
			echo "ok: $name: $rung rung ($udp by UDP), $heard heard, no timeout"
		fi
	fi
done

# parts need the peer's engine off its sockets while its application polls,
# as in the default hand-off, grace (with UROCE_HANDOFF=defer it sleeps on
# them throughout), whatever the caller's environment says
if run_pair parts UROCE_SHM_DIRECT_MIN=0 UROCE_HANDOFF=grace UROCE_POLL_PROGRESS=1 -- -c -m 4096 -s 65536 -n 300; then
	no_loss parts
	for side in s c; do
		f=$tmp/parts.$side
		parts=$(counter "$f" shm_parts_tx); msgs=$(( $(counter "$f" shm_packets_tx) / 16 ))
		if [ "$parts" -eq 0 ] || [ "$parts" -gt $(( 3 * msgs )) ]; then
			echo "not ok: parts ($side): $parts calls cut short for ~$msgs messages of 16 packets (want some, at most 3 a message)"
			fail=1
		else
			echo "ok: parts ($side): $parts calls cut short for ~$msgs messages of 64 KiB"
		fi
	done
fi
if run_pair parts_events UROCE_SHM_DIRECT_MIN=0 UROCE_SPIN_US=0 -- -c -e -m 4096 -s 65536 -n 200; then
	no_loss parts_events
	echo "ok: parts_events: 64 KiB messages with sleeping engines, checked"
fi
if run_pair direct -- -c -m 4096 -s 65536 -n 300; then
	no_loss direct
	for side in s c; do
		f=$tmp/direct.$side
		refs=$(counter "$f" ref_rx); bytes=$(counter "$f" ref_bytes_rx); parts=$(counter "$f" shm_parts_tx)
		# ibv_rc_pingpong: 300 messages each way, every one a reference
		if [ "$refs" -lt 300 ] || [ "$bytes" -lt $((300 * 65536)) ] || [ "$parts" -ne 0 ]; then
			echo "not ok: direct ($side): $refs references and $bytes bytes pulled, $parts parts (want 300, 300 x 64 KiB, 0)"
			fail=1
		else
			echo "ok: direct ($side): $refs messages of 64 KiB pulled by reference, checked"
		fi
	done
fi

if run_pair udp UROCE_SHM=0 -- -c -s 3000 -n 500; then
	no_loss udp
	for side in s c; do
		f=$tmp/udp.$side
		if [ "$(counter "$f" shm_packets_tx)" -ne 0 ] || [ "$(counter "$f" tx_packets)" -lt 1000 ]; then
			echo "not ok: udp ($side): UROCE_SHM=0 still used the rings"
			fail=1
		else
			echo "ok: udp ($side): $(counter "$f" tx_packets) packets by UDP"
		fi
	done
fi
exit $fail
