#!/bin/bash
# One ucx_perftest pair for bench/middleware.py: the server, then the
# client, on one host or between two network namespaces (tests/net/lib.sh).
# UCX_TLS=tcp runs without uroce.
#   ucx_pair.sh LAUNCHER host|netns TLS TEST SIZE ITERS
set -u
L=$1 MODE=$2 TLS=$3 TEST=$4 SIZE=$5 N=$6
export UCX_TLS=$TLS UCX_WARN_UNUSED_ENV_VARS=n
run=("$L" run --)
if [ "$TLS" = tcp ]; then run=(); else export UCX_NET_DEVICES=uroce0:1; fi
PORT=$((14000 + ($$ % 900)))
if [ "$MODE" = netns ]; then
	. "$(dirname "$0")/../tests/net/lib.sh"
	netns_setup >/dev/null 2>&1
	[ "$TLS" = tcp ] && export UCX_NET_DEVICES=all
	SRV=(ip netns exec "$NS_A" env UROCE_ADDR="$ADDR_A") CLI=(ip netns exec "$NS_B" env UROCE_ADDR="$ADDR_B")
	HOST=$ADDR_A
else
	SRV=(env) CLI=(env) HOST=127.0.0.1
fi
"${SRV[@]}" timeout 120 "${run[@]}" ucx_perftest -p $PORT >/dev/null 2>&1 &
spid=$!
for try in $(seq 1 20); do
	sleep 0.3
	out=$("${CLI[@]}" timeout 120 "${run[@]}" ucx_perftest "$HOST" -p $PORT -t "$TEST" -s "$SIZE" -n "$N" -f 2>&1)
	rc=$?
	echo "$out" | grep -q "Connection refused\|connect() failed" || break
done
wait $spid
echo "$out"
exit $rc
