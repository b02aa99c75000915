#!/bin/bash
# UCX, unmodified, on uroce0 (issue #16): `ucx_info -d` lists rc_verbs and
# ud_verbs on uroce0:1, then ucx_perftest's tag_lat, tag_bw, put_bw,
# get_bw and am_lat between two processes, over one transport:
#   rc: UCX_TLS=rc_verbs,ud_verbs (the tag lane is rc_verbs, checked in
#       UCX's own ep_cfg line; UCP wires RC up over UD); put_bw, get and
#       am_lat as UCT tests on -x rc_verbs (zero-copy RDMA WRITE and READ)
#   ud: UCX_TLS=ud_verbs; UD has no one-sided operations, so put and get
#       are UCP's (ucp_put_bw, ucp_get, emulated over active messages) and
#       am_lat the UCT test on -x ud_verbs
# on one host (automatic addresses) or between two network namespaces
# (each on its veth address).
#   ucx.sh LAUNCHER host|netns rc|ud
set -u
L=$1 MODE=$2 TL=$3
command -v ucx_perftest >/dev/null || { echo "ucx-utils not installed"; exit 1; }
T=120
fail=0
export UCX_NET_DEVICES=uroce0:1 UCX_WARN_UNUSED_ENV_VARS=n
PORT=$((13500 + ($$ % 400)))
if [ "$MODE" = netns ]; then
	. "$(dirname "$0")/../net/lib.sh"
	netns_setup
	SRV=(ip netns exec "$NS_A" env UROCE_ADDR="$ADDR_A")
	CLI=(ip netns exec "$NS_B" env UROCE_ADDR="$ADDR_B")
	HOST=$ADDR_A
	OUT=$NETNS_TMPDIR
else
	SRV=(env) CLI=(env) HOST=127.0.0.1
	OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT
fi

"${CLI[@]}" timeout $T "$L" run -- ucx_info -d >"$OUT/info" 2>&1
for t in rc_verbs ud_verbs; do
	if grep -A1 "Transport: $t" "$OUT/info" | grep -q "Device: uroce0:1"; then echo "ok   ucx_info -d: $t on uroce0:1"
	else echo "FAIL ucx_info -d: no $t on uroce0:1"; fail=1; fi
done

# NAME TLS ARGS...: one ucx_perftest pair; the server serves one test
pair() {
	local n=$1 tls=$2; shift 2
	"${SRV[@]}" UCX_TLS="$tls" timeout $T "$L" run -- ucx_perftest -p $PORT >"$OUT/s_$n" 2>&1 &
	local spid=$! try crc
	for try in $(seq 1 20); do
		sleep 0.5
		"${CLI[@]}" UCX_TLS="$tls" UCX_LOG_LEVEL=info timeout $T "$L" run -- \
			ucx_perftest "$HOST" -p $PORT "$@" -f >"$OUT/c_$n" 2>&1
		crc=$?
		# the server not listening yet: connection refused, try again
		grep -q "Connection refused\|connect() failed" "$OUT/c_$n" || break
	done
	wait $spid; local src=$?
	local res; res=$(grep -E "^ +[0-9]+ +[0-9.]+ " "$OUT/c_$n" | tail -1)
	echo "--- $n ($*): server exit $src, client exit $crc"
	echo "    iterations, 50%ile us, avg us, overall us, avg MB/s, overall MB/s, msg/s: ${res:-none}"
	if [ $src != 0 ] || [ $crc != 0 ] || [ -z "$res" ]; then
		fail=1; tail -n 5 "$OUT/s_$n" "$OUT/c_$n"
	fi
	PORT=$((PORT + 1))
}
if [ "$TL" = rc ]; then
	tls=rc_verbs,ud_verbs
	pair tag_lat $tls -t tag_lat -s 8 -n 20000
	if grep -q "tag(rc_verbs/uroce0:1)" "$OUT/c_tag_lat"; then echo "ok   UCP's tag lane is rc_verbs on uroce0:1"
	else echo "FAIL UCP's tag lane is not rc_verbs on uroce0:1:"; grep ep_cfg "$OUT/c_tag_lat"; fail=1; fi
	pair tag_bw $tls -t tag_bw -s 1048576 -n 200
	pair put_bw $tls -t put_bw -x rc_verbs -d uroce0:1 -D zcopy -s 65536 -n 2000
	pair get_bw $tls -t get -x rc_verbs -d uroce0:1 -D zcopy -s 65536 -n 2000
	pair am_lat $tls -t am_lat -x rc_verbs -d uroce0:1 -s 8 -n 20000
else
	tls=ud_verbs
	pair tag_lat $tls -t tag_lat -s 8 -n 20000
	if grep -q "tag(ud_verbs/uroce0:1)" "$OUT/c_tag_lat"; then echo "ok   UCP's tag lane is ud_verbs on uroce0:1"
	else echo "FAIL UCP's tag lane is not ud_verbs on uroce0:1:"; grep ep_cfg "$OUT/c_tag_lat"; fail=1; fi
	pair tag_bw $tls -t tag_bw -s 1048576 -n 100
	pair put_bw $tls -t ucp_put_bw -s 65536 -n 1000
	pair get_bw $tls -t ucp_get -s 65536 -n 1000
	pair am_lat $tls -t am_lat -x ud_verbs -d uroce0:1 -s 8 -n 20000
fi
[ $fail = 0 ] && { echo PASS; exit 0; }
echo FAIL; exit 1
