#!/bin/bash
# ports_taken.sh LAUNCHER RC_SCENARIOS: the transmit pool's source ports
# (0xC000..0xC03F, src/net/udp.c) held by another program's sockets, as
# another user's could be: every QP then sends from the one ephemeral-port
# socket, and its ICRC must be computed with that port (net_flow_sport), not
# the one it asked for.  rc_scenarios by UDP on an address of this test's
# own; no packet may fail its ICRC.
set -u
U=$1 prog=$2
addr=127.13.$(( ($$ >> 8) % 250 + 1 )).$(( $$ % 250 + 1 ))
out=$(mktemp) && trap 'rm -f "$out"; kill $holder 2>/dev/null' EXIT
# The pool's 64 ports always; the rest of rxe's range 0xC000..0xFFFF (where
# the old socket-per-QP code bound each QP's hash port) as far as the fd
# limit goes, so that the old code fails here too.
exec 3< <(python3 -c '
import resource, socket, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held = []
for p in range(0xC000, 0x10000):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((sys.argv[1], p))
    except OSError:
        if p < 0xC040:
            raise
        break
    held.append(s)
print("held", flush=True)
sys.stdin.read()
' "$addr" </dev/zero 2>&1)
holder=$!
read -r -u 3 line && [ "$line" = held ] || { echo "ports_taken.sh: could not hold the ports: $line"; exit 1; }
UROCE_SHM=0 UROCE_ADDR=$addr UROCE_STATS=1 "$U" run -- "$prog" >"$out" 2>&1
rc=$?
grep -vE '^uroce:  ' "$out" | tail -20
if [ $rc -ne 0 ]; then
	grep -E 'icrc' "$out"
	echo "ports_taken.sh: rc_scenarios failed ($rc) with the pool's ports taken"
	exit 1
fi
if grep -E '^uroce: +icrc_errors' "$out"; then
	echo "ports_taken.sh: ICRCs computed with another port than sent"; exit 1
fi
echo "ports_taken.sh: rc_scenarios passed from the ephemeral-port socket, every ICRC good"
