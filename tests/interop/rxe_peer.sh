#!/bin/bash
# The kernel's Soft-RoCE as a live peer (../shared/rxe-vm): a server in the
# VM on rxe0, a client on the host through uroce, both unmodified programs.
#   rxe_peer.sh build WORKDIR
#   rxe_peer.sh run   WORKDIR LAUNCHER NAME 'server command in the VM' 'client command'
# `run` passes when both programs exit 0 and every RoCEv2 packet of the
# capture -- uroce's and rxe's -- has a correct ICRC (icrc_check.py).
# Needs root (network namespace, qemu); exits 77 (skipped) only when the VM
# harness is absent or the user is not root.
set -uo pipefail
mode=$1; work=$2
here=$(cd "$(dirname "$0")" && pwd)
vm=$(cd "$here/../../.." && pwd)/shared/rxe-vm
[ -x "$vm/run-host-peer.sh" ] || { echo "skip: no $vm"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "skip: the rxe VM needs root"; exit 77; }
export RXEVM_WORK=$work
mkdir -p "$work"

if [ "$mode" = build ]; then
	exec "$vm/build.sh"
fi

launcher=$3; name=$4; server=$5; client=$6
log=$work/$name.log
# the host side of the VM's bridge is 198.18.0.1: uroce's GID 0 there
timeout 240 "$vm/run-host-peer.sh" -o "$work/captures" -S "$server" "$name" -- \
	env UROCE_ADDR=198.18.0.1 UROCE_SHM=0 "$launcher" run -- $client >"$log" 2>&1
rc=$?
grep -E "RESULT|ICRC:" "$log"
icrc=$(grep -E '^ICRC:' "$log" | tail -1)
ok=$(echo "$icrc" | sed -n 's/^ICRC: \([0-9]*\) OK, \([0-9]*\) mismatch.*/\1 \2/p')
if [ $rc != 0 ] || [ -z "$ok" ] || [ "${ok#* }" != 0 ] || [ "${ok% *}" = 0 ]; then
	echo "FAIL $name (rc $rc, $icrc); the log:"
	tail -60 "$log"
	exit 1
fi
echo "PASS $name"
