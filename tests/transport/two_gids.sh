#!/bin/sh
# rc_scenarios --two-gids on a device with two addresses, so two receive
# sockets (and two same-host regions), both streaming at once: besides the
# data (checked by the scenario), nothing may have been dropped or resent --
# a packet whose buffer another socket's datagram overwrote fails its ICRC
# and is resent.  Run by UDP (UROCE_SHM=0: the two QP pairs live in one
# process, which would otherwise reach itself through its rings) and through
# the rings.
# usage: two_gids.sh LAUNCHER RC_SCENARIOS
set -u
err=$(mktemp)
trap 'rm -f "$err"' EXIT
for shm in 0 1; do
	echo "--- UROCE_SHM=$shm"
	UROCE_SHM=$shm UROCE_ADDR=127.77.0.1,127.77.0.2 UROCE_STATS=1 "$1" run -- "$2" --two-gids 2>"$err"
	rc=$?
	cat "$err" >&2
	if grep -E 'uroce: +(icrc_errors|retransmits|timeouts|seq_naks_tx|out_of_sequence|shm_ring_full|shm_bad|drop_[a-z_]+) ' "$err"; then
		echo "not ok: packets were dropped or resent (counters above)"
		exit 1
	fi
	grep -qE 'uroce: +rx_packets ' "$err" || { echo "not ok: no UROCE_STATS counters"; exit 1; }
	if [ $shm = 0 ] && grep -qE 'uroce: +shm_packets_tx ' "$err"; then
		echo "not ok: UROCE_SHM=0 used the rings"; exit 1
	fi
	if [ $shm = 1 ] && ! grep -qE 'uroce: +shm_packets_tx ' "$err"; then
		echo "not ok: the rings were not used"; exit 1
	fi
	[ $rc = 0 ] || exit $rc
done
exit 0
