#!/bin/bash
# A peer that vanishes mid-handshake ends in the right event within the
# CM's retry budget (issue #15 item 4; cm-wire.md §4.1), with unmodified
# rping on both sides:
#  a. the server stopped (SIGSTOP) once it listens, alone on its address:
#     the client's REQ is sent 16 times, 6144 ms apart (2 x 2^(18-8) +
#     2^(20-8) ms), then UNREACHABLE -110 -- about 98 s, the kernel's budget.
#  b. on an address shared with a bystander process: the server stopped,
#     the client's REQs go unanswered; the server killed (SIGKILL), its
#     port's lock goes with it, the next resent REQ finds no binder and the
#     bystander's CM rejects it (REJ 8) -- within one resend (6 s).
#   vanish.sh LAUNCHER
set -u
L=$1
K=$(( $$ % 200 + 20 ))
SA=127.96.$K.1 SB=127.96.$K.3 C=127.96.$K.2
OUT=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$OUT"' EXIT
rp() { # ADDR out args...
	local a=$1 o=$2; shift 2
	UROCE_ADDR=$a timeout 150 "$L" run -- rping "$@" >"$OUT/$o" 2>&1
}
# a
rp $SA sa -s -a $SA -p 7400 & sa=$!
# b: bystander and server on SB
rp $SB by -s -a $SB -p 7401 & by=$!
rp $SB sb -s -a $SB -p 7402 & sb=$!
sleep 1.5
spid() { pgrep -f "rping -s -a $1 -p $2" | while read p; do [ "$(cat /proc/$p/comm)" = rping ] && echo $p; done | head -1; }
pa=$(spid $SA 7400) pb=$(spid $SB 7402)
[ -n "$pa" ] && [ -n "$pb" ] || { echo "FAIL: servers did not start"; exit 1; }
kill -STOP $pa $pb
t0=$(date +%s.%N)
( rp $C ca -c -a $SA -p 7400 -C 1; echo "$? $(date +%s.%N)" >"$OUT/ca.end" ) &
( rp $C cb -c -a $SB -p 7402 -C 1; echo "$? $(date +%s.%N)" >"$OUT/cb.end" ) &
sleep 3
kill -9 $pb
wait $sb 2>/dev/null
while [ ! -f "$OUT/ca.end" ] || [ ! -f "$OUT/cb.end" ]; do sleep 1; done
kill -9 $pa 2>/dev/null
kill $by 2>/dev/null
fail=0
read rca tca <"$OUT/ca.end"; read rcb tcb <"$OUT/cb.end"
da=$(awk "BEGIN{print $tca - $t0}") db=$(awk "BEGIN{print $tcb - $t0}")
echo "a. client of the stopped server: exit $rca after ${da}s: $(grep -m1 'cma event' "$OUT/ca")"
echo "b. client of the killed server on a shared address: exit $rcb after ${db}s: $(grep -m1 'cma event' "$OUT/cb")"
grep -q "RDMA_CM_EVENT_UNREACHABLE, error -110" "$OUT/ca" && awk "BEGIN{exit !($da > 90 && $da < 115)}" || fail=1
grep -q "RDMA_CM_EVENT_REJECTED, error 8" "$OUT/cb" && awk "BEGIN{exit !($db < 15)}" || fail=1
[ $fail = 0 ] && { echo PASS; exit 0; }
echo FAIL; tail -5 "$OUT"/*
exit 1
