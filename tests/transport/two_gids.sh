#!/bin/sh
# rc_scenarios --two-gids on a device with two addresses, so two receive
# sockets, both streaming at once: besides the data (checked by the
# scenario), nothing may have been dropped or resent -- a packet whose
# buffer another socket's datagram overwrote fails its ICRC and is resent.
# usage: two_gids.sh LAUNCHER RC_SCENARIOS
set -u
err=$(mktemp)
trap 'rm -f "$err"' EXIT
UROCE_ADDR=127.77.0.1,127.77.0.2 UROCE_STATS=1 "$1" run -- "$2" --two-gids 2>"$err"
rc=$?
cat "$err" >&2
if grep -E 'uroce: +(icrc_errors|retransmits|timeouts|seq_naks_tx|out_of_sequence|drop_[a-z_]+) ' "$err"; then
	echo "not ok: packets were dropped or resent (counters above)"
	exit 1
fi
grep -qE 'uroce: +rx_packets ' "$err" || { echo "not ok: no UROCE_STATS counters"; exit 1; }
exit $rc
