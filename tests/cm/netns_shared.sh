#!/bin/bash
# rdma_cm between two network namespaces, four uroce processes in each, all
# of a namespace on its one address (issue #15: "three or more uroce
# processes per namespace sharing its one address"): in NS_A the servers of
# rping, ucmatose, udaddy and ib_write_bw -R, in NS_B their clients, started
# together.  Every CM MAD reaches its process through the address's
# steering and forwarding (net/share.c: a reply by the comm ID's slot, a
# REQ by its port's binder), and so does every data packet.
#   netns_shared.sh LAUNCHER SHIM   (SHIM: tests/interop/cm_connect_delay.c)
set -u
LAUNCHER=$1 SHIM=$2
. "$(dirname "$0")/../net/lib.sh"
netns_setup
T=120
run() { # NS ADDR NAME cmd...
	local ns=$1 a=$2 n=$3; shift 3
	ip netns exec "$ns" env UROCE_ADDR="$a" timeout $T "$LAUNCHER" run -- "$@" >"$NETNS_TMPDIR/$n.out" 2>&1
	echo $? >"$NETNS_TMPDIR/$n.rc"
}
run "$NS_A" "$ADDR_A" s_rping rping -s -a "$ADDR_A" -p 7001 -v -C 500 &
run "$NS_A" "$ADDR_A" s_ucmatose ucmatose -c 20 &
run "$NS_A" "$ADDR_A" s_udaddy udaddy &
run "$NS_A" "$ADDR_A" s_write_bw ib_write_bw -R -n 200 &
sleep 2
run "$NS_B" "$ADDR_B" c_rping rping -c -a "$ADDR_A" -p 7001 -v -C 500 &
run "$NS_B" "$ADDR_B" c_ucmatose ucmatose -s "$ADDR_A" -c 20 &
run "$NS_B" "$ADDR_B" c_udaddy udaddy -s "$ADDR_A" &
run "$NS_B" "$ADDR_B" c_write_bw sh -c 'LD_PRELOAD="$0${LD_PRELOAD:+:$LD_PRELOAD}" exec "$@"' "$SHIM" \
	ib_write_bw -R -n 200 "$ADDR_A" &
wait
fail=0
for n in s_rping s_ucmatose s_udaddy s_write_bw c_rping c_ucmatose c_udaddy c_write_bw; do
	rc=$(cat "$NETNS_TMPDIR/$n.rc")
	echo "--- $n: exit $rc"
	tail -n 4 "$NETNS_TMPDIR/$n.out"
	[ "$rc" = 0 ] || fail=1
done
pings=$(grep -c "^ping data" "$NETNS_TMPDIR/c_rping.out")
echo "rping client pings checked: $pings"
[ "$pings" = 500 ] || fail=1
[ $fail = 0 ] && { echo PASS; exit 0; }
echo FAIL
exit 1
