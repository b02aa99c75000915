#!/bin/bash
# many_qps.sh UROCE MANY_QPS PATH: many_qps (10,000 RC QPs per process, two
# processes) under `ulimit -n 1024`, soft and hard, so that raising the soft
# limit cannot hide a socket per QP; PATH udp (UROCE_SHM=0) or rings.  Checks
# from each process's UROCE_STATS that every packet took that path and that
# no received IPv4 ICRC needed a non-zero IP ID (the shared unconnected
# transmit sockets send ID 0, docs/architecture.md "Packet I/O").
set -u
uroce=$1 prog=$2 path=$3
out=$(mktemp) && trap 'rm -f "$out"' EXIT
[ "$path" = udp ] && export UROCE_SHM=0
ulimit -n 1024 || exit 1
UROCE_STATS=1 "$uroce" run -- "$prog" -n 10000 -m 64 -t 240 >"$out" 2>&1
rc=$?
cat "$out"
[ $rc -eq 0 ] || { echo "many_qps.sh: many_qps failed ($rc)"; exit 1; }
tx=$(awk '$2 == "tx_packets" {print $3}' "$out")
shm=$(awk '$2 == "shm_packets_tx" {print $3}' "$out")
[ "$(echo "$tx" | wc -l)" = 2 ] || { echo "many_qps.sh: no counters of both processes"; exit 1; }
for t in $tx; do
	[ "$t" -ge 20000 ] || { echo "many_qps.sh: $t packets sent, fewer than 20000"; exit 1; }
done
if [ "$path" = rings ]; then
	[ "$(echo $shm)" = "$(echo $tx)" ] || { echo "many_qps.sh: not every packet by the rings ($shm of $tx)"; exit 1; }
else
	[ -z "$shm" ] || { echo "many_qps.sh: ring packets with UROCE_SHM=0"; exit 1; }
fi
if grep -qE '^uroce: +(icrc_ipid_solved|icrc_errors)' "$out"; then
	echo "many_qps.sh: ICRCs that did not match IPv4 ID 0"; exit 1
fi
echo "many_qps.sh: $path: every packet by $path, ICRCs with IPv4 ID 0"
