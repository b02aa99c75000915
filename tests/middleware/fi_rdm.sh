#!/bin/bash
# libfabric's fi_pingpong, unmodified, over verbs;ofi_rxd reliable
# datagram endpoints on uroce's UD QPs (issue #16): every size of its
# list, 64 B to 1 MiB, 100 round trips each, data checked (-c), two
# processes of one host on their automatic addresses.  The datagrams
# that found no receive posted (drop_no_recv, UROCE_STATS) are printed, not
# judged: on an idle machine there are none (issue #16's runs had 10-13k a
# rank), but a receiver kept off its CPU long enough runs its receive
# queue dry, as it would on a NIC, and ofi_rxd sends those again.
#   fi_rdm.sh LAUNCHER
set -u
L=$1
command -v fi_pingpong >/dev/null || { echo "fi_pingpong not installed (libfabric-bin)"; exit 1; }
T=120
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
port=$((9500 + ($$ % 400)))
export UROCE_STATS=1
timeout $T "$L" run -- fi_pingpong -p "verbs;ofi_rxd" -e rdm -I 100 -c -B $port >"$t/s" 2>&1 &
spid=$!
for try in $(seq 1 20); do
	sleep 0.5
	timeout $T "$L" run -- fi_pingpong -p "verbs;ofi_rxd" -e rdm -I 100 -c -P $port 127.0.0.1 >"$t/c" 2>&1
	crc=$?
	grep -q "Connection refused" "$t/c" || break
done
wait $spid; src=$?
echo "server exit $src, client exit $crc"; grep -v "^uroce:" "$t/c"
fail=0
[ $src = 0 ] && [ $crc = 0 ] || fail=1
for size in 64 256 1k 4k 64k 1m; do
	grep -qE "^$size +100 +=100 " "$t/c" || { echo "FAIL: no checked result for $size"; fail=1; }
done
drops() { awk '/drop_no_recv/ {n += $3} END {print n + 0}' "$1"; }
echo "datagrams dropped for want of a receive: server $(drops "$t/s"), client $(drops "$t/c")"
[ $fail = 0 ] && { echo PASS; exit 0; }
tail -n 5 "$t/s"; echo FAIL; exit 1
