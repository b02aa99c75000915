#!/bin/bash
# rdma_cm between two network namespaces, several uroce processes in each,
# all of a namespace on its one address (issue #15: "three or more uroce
# processes per namespace sharing its one address"): the servers of one
# SET in NS_A, their clients in NS_B, all started together.  Every CM MAD
# reaches its process through the address's steering and forwarding
# (net/share.c: a reply by the comm ID's slot, a REQ by its port's
# binder), and so does every data packet.
#   netns_shared.sh LAUNCHER SHIM RPMA_PAIR SET
#     SHIM: tests/interop/cm_connect_delay.c (perftest -R's own race)
#     RPMA_PAIR: tests/cm/rpma_pair.c's program, or - without librpma
#     SET: a  rping, ucmatose, udaddy, ib_write_bw -R
#          b  fi_pingpong -e msg and -e dgram, fio's rdma engine, librpma
#          c  rdma_server/rdma_client, rstream, riostream, cmtime
#          d  ib_send_bw, ib_send_lat, ib_read_bw, ib_read_lat -R
#          e  ib_atomic_bw, ib_atomic_lat, ib_write_lat -R
# Each program has a port of its own.  A client that finds no listener yet
# (REJ 8; a refused connection) is started again while its server lives.
set -u
LAUNCHER=$1 SHIM=$2 RPMA=$3 SET=$4
. "$(dirname "$0")/../net/lib.sh"
netns_setup
T=150
A=$ADDR_A
# NAME|server command|client command, @A@ the server's address.  A name
# starting with "k_": the server never exits by itself (cmtime's) and is
# stopped once its client is done.
perf() { # tool port: a perftest -R pair, the client under the shim
	echo "$1|$1 -R -n 200 -p $2|@SHIM@ $1 -R -n 200 -p $2 @A@"
}
case $SET in
a) pairs=("rping|rping -s -a @A@ -p 7001 -v -C 1000|rping -c -a @A@ -p 7001 -v -C 1000"
	  "ucmatose|ucmatose -c 50|ucmatose -s @A@ -c 50"
	  "udaddy|udaddy|udaddy -s @A@"
	  "$(perf ib_write_bw 18601)") ;;
# fi_pingpong's msg server names its endpoint by the interface's address
# (fi_pingpong.sh says why); -e dgram sends the endpoint's GID and QPN.
b) pairs=("fi_dgram|fi_pingpong -p verbs -e dgram -B 9302 -I 1000 -S 1024 -c|fi_pingpong -p verbs -e dgram -P 9302 -I 1000 -S 1024 -c @A@"
	  "fi_msg|fi_pingpong -p verbs -e msg -B 9303 -I 1000 -S 4096 -c|fi_pingpong -p verbs -e msg -P 9303 -I 1000 -S 4096 -c @A@"
	  "fio|fio --name=srv --ioengine=rdma --port=5555 --rw=read --bs=64k --size=32m|fio --name=cli --ioengine=rdma --hostname=@A@ --port=5555 --verb=write --rw=write --bs=64k --size=32m")
   [ "$RPMA" != - ] && pairs+=("rpma|$RPMA server @A@ 7701|$RPMA client @A@ 7701") ;;
c) pairs=("rdma_server|rdma_server -s @A@ -p 7471|rdma_client -s @A@ -p 7471"
	  "rstream|rstream -b @A@ -p 7472|rstream -s @A@ -p 7472"
	  "riostream|riostream -b @A@ -p 7473|riostream -s @A@ -p 7473"
	  "k_cmtime|cmtime -b @A@ -p 7474 -c 1000|cmtime -s @A@ -p 7474 -c 1000") ;;
d) pairs=("$(perf ib_send_bw 18602)" "$(perf ib_send_lat 18603)" "$(perf ib_read_bw 18604)"
	  "$(perf ib_read_lat 18605)") ;;
e) pairs=("$(perf ib_atomic_bw 18606)" "$(perf ib_atomic_lat 18607)" "$(perf ib_write_lat 18608)") ;;
*) echo "unknown set $SET"; exit 2 ;;
esac
[ ${#pairs[@]} -ge 3 ] || { echo "set $SET: fewer than three processes per namespace"; exit 2; }
ADDRS_A=$A

# NS ADDRS NAME COMMAND: one program under uroce, its output and status kept
run() {
	local ns=$1 a=$2 n=$3 cmd=$4 pre=()
	cmd=${cmd//@A@/$A}
	if [ "${cmd#@SHIM@ }" != "$cmd" ]; then
		cmd=${cmd#@SHIM@ }
		pre=(sh -c 'LD_PRELOAD="$0${LD_PRELOAD:+:$LD_PRELOAD}" exec "$@"' "$SHIM")
	fi
	# shellcheck disable=SC2086
	ip netns exec "$ns" env UROCE_ADDR="$a" timeout $T "$LAUNCHER" run -- "${pre[@]}" $cmd >"$NETNS_TMPDIR/$n.out" 2>&1
	echo $? >"$NETNS_TMPDIR/$n.rc"
}
noserver='REJECTED, error:? 8|error 8$|status 8|Connection refused|RDMA_CM_EVENT_REJECTED instead|RPMA_CONN_REJECTED'
client() { # NAME COMMAND: started again while its server lives and it found no listener
	local n=$1 try
	for try in $(seq 1 10); do
		run "$NS_B" "$ADDR_B" "c_$n" "$2"
		[ "$(cat "$NETNS_TMPDIR/c_$n.rc")" = 0 ] && break
		[ -e "$NETNS_TMPDIR/s_$n.rc" ] && break
		grep -qE "$noserver" "$NETNS_TMPDIR/c_$n.out" || break
		echo "$n: client found no listener yet, try $try" >&2
		sleep 1
	done
}
spids=()
for p in "${pairs[@]}"; do
	IFS='|' read -r n s c <<<"$p"
	run "$NS_A" "$ADDRS_A" "s_$n" "$s" &
	spids+=($!)
done
sleep 2
cpids=()
for p in "${pairs[@]}"; do
	IFS='|' read -r n s c <<<"$p"
	client "$n" "$c" &
	cpids+=($!)
done
wait "${cpids[@]}"
for p in "${pairs[@]}"; do
	IFS='|' read -r n s c <<<"$p"
	[ "${n#k_}" != "$n" ] && ip netns exec "$NS_A" pkill -f -- "${s%% *} -b $A -p" 2>/dev/null
done
wait "${spids[@]}"
fail=0
for p in "${pairs[@]}"; do
	IFS='|' read -r n s c <<<"$p"
	for side in s c; do
		rc=$(cat "$NETNS_TMPDIR/${side}_$n.rc" 2>/dev/null || echo none)
		# a server stopped by us exits by the signal
		[ $side = s ] && [ "${n#k_}" != "$n" ] && rc=0
		echo "--- $side $n: exit $rc"
		tail -n 3 "$NETNS_TMPDIR/${side}_$n.out"
		[ "$rc" = 0 ] || fail=1
	done
	case $n in
	# each ping's number once: rping's unbuffered stderr (its CM thread's
	# "client DISCONNECT EVENT...") can land inside a line of its
	# block-buffered stdout when both go to one file
	rping) pings=$(grep -o "rdma-ping-[0-9]*:" "$NETNS_TMPDIR/c_rping.out" | sort -u | wc -l)
	       echo "rping client pings checked: $pings"; [ "$pings" = 1000 ] || fail=1 ;;
	fi_*)  grep -q "^[0-9.]*[km]* *1k *=1k" "$NETNS_TMPDIR/c_$n.out" || { echo "$n: no result line"; fail=1; } ;;
	rpma)  for side in s c; do grep -q "PASS" "$NETNS_TMPDIR/${side}_rpma.out" || { echo "rpma $side: no PASS"; fail=1; }; done ;;
	esac
done
[ $fail = 0 ] && { echo PASS; exit 0; }
echo FAIL
exit 1
