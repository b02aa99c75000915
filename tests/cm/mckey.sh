#!/bin/bash
# mckey (rdmacm-utils), unmodified: UD multicast through rdma_join_multicast
# (cm/rdma_cm.c) and ibv_attach_mcast (obj/mcast.c), the group's datagrams
# carried by an IP multicast group (net/udp.c).  Every receiver joins
# first; then one sender sends COUNT datagrams to the group; each receiver
# must receive them all (mckey polls until it has COUNT completions: a
# lost one hangs it until the timeout), and its counters must show COUNT
# multicast packets received and none dropped for want of a receive.
#   mckey.sh LAUNCHER host    on this host: two receivers and the sender on
#                             one address (three processes sharing it), a
#                             third receiver on an address of its own
#   mckey.sh LAUNCHER netns   between two network namespaces (needs root):
#                             three receivers on NS_A's one address, two
#                             receivers and the sender on NS_B's
set -u
LAUNCHER=$1 MODE=$2
COUNT=20
T=60
if [ "$MODE" = netns ]; then
	. "$(dirname "$0")/../net/lib.sh"
	netns_setup
	DIR=$NETNS_TMPDIR
	GROUP=239.93.0.1
	# NAME NS ADDR for each receiver; the sender last
	RECV=("r1 $NS_A $ADDR_A" "r2 $NS_A $ADDR_A" "r3 $NS_A $ADDR_A" "r4 $NS_B $ADDR_B" "r5 $NS_B $ADDR_B")
	SEND="s $NS_B $ADDR_B"
else
	DIR=$(mktemp -d)
	trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$DIR"' EXIT
	K=$(( $$ % 200 + 20 ))
	GROUP=239.94.$K.1
	RECV=("r1 - 127.94.$K.1" "r2 - 127.94.$K.1" "r3 - 127.94.$K.2")
	SEND="s - 127.94.$K.1"
fi
run() { # NAME NS ADDR mckey-args...
	local n=$1 ns=$2 a=$3; shift 3
	local pre=()
	[ "$ns" != - ] && pre=(ip netns exec "$ns")
	"${pre[@]}" env UROCE_ADDR="$a" UROCE_STATS=1 timeout $T "$LAUNCHER" run -- mckey -m "$GROUP" -C $COUNT "$@" \
		>"$DIR/$n.out" 2>&1
	echo $? >"$DIR/$n.rc"
}
names=()
for r in "${RECV[@]}"; do
	# shellcheck disable=SC2086
	run $r &
	names+=("${r%% *}")
done
# the receivers have joined (and posted their receives) before anything is sent
for i in $(seq 100); do
	j=0
	for n in "${names[@]}"; do grep -q "joined dgid" "$DIR/$n.out" 2>/dev/null && j=$((j + 1)); done
	[ $j = ${#names[@]} ] && break
	sleep 0.1
done
# shellcheck disable=SC2086
run $SEND -s
wait
fail=0
for n in "${names[@]}" s; do
	rc=$(cat "$DIR/$n.rc")
	echo "--- $n: exit $rc"
	grep -E "^mckey|complete|status" "$DIR/$n.out"
	[ "$rc" = 0 ] || fail=1
	[ "$n" = s ] && continue
	got=$(awk '$2 == "mcast_rx" { print $3 }' "$DIR/$n.out")
	norecv=$(awk '$2 == "drop_no_recv" { print $3 }' "$DIR/$n.out")
	echo "    multicast packets received: ${got:-0}, dropped for want of a receive: ${norecv:-0}"
	[ "${got:-0}" = $COUNT ] && [ "${norecv:-0}" = 0 ] || fail=1
done
[ $fail = 0 ] && { echo PASS; exit 0; }
echo FAIL
exit 1
