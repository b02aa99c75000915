#!/usr/bin/env bash
# tests/net/test_tx_full.sh LAUNCHER UD_FLOOD - a transmit socket whose send
# buffer is full never blocks the sender (src/net/udp.c, sys_sendmmsg).
#
# A veth pair whose sending end lets 1 Mbit/s through and queues the rest (a
# tbf qdisc with room for all of it: queued packets stay charged to the
# socket that sent them), and a UD sender
# posting far more than the socket's send buffer holds.  With blocking sends
# the sender stalls inside ibv_post_send until the qdisc lets packets go (and
# an ACK of the engine, sent under rx_lock on the same shared socket, would
# stall with it); here every send completes, and the datagrams the full
# buffer refused are counted as tx_full (lost, as on the wire).
# Needs root and ip netns (exit 77 otherwise).
set -u
U=$1 FLOOD=$2
. "$(dirname "$0")/lib.sh"
command -v tc >/dev/null || net_skip "tc missing (iproute2)"
netns_setup
ip netns exec "$NS_A" tc qdisc add dev "$VETH_A" root tbf rate 1mbit burst 32kb limit 200mb ||
    net_skip "tbf qdisc unavailable (sch_tbf)"
out=$(ns_exec "$NS_A" env UROCE_ADDR="$ADDR_A" UROCE_LAUNCHER="$U" timeout 25 "$U" run -- "$FLOOD" "$ADDR_B" 60000 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || { echo "not ok ud_flood exited $rc (124: it blocked)"; exit 1; }
full=$(awk '$1 == "tx_full" { print $2 }' <<<"$out")
[ -n "$full" ] && [ "$full" -gt 0 ] || { echo "not ok no send was refused as tx_full (the buffer never filled?)"; exit 1; }
echo "ok tx_never_blocks: 60000 sends completed, $full refused by the full buffer"
