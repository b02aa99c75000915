#!/usr/bin/env bash
# The single copy on one host (transport/ref.h), judged by rc_integrity's
# data checks and by the counters both processes print at exit:
#   direct.sh on      both processes copy from each other: every check passes
#                     and each side pulled bytes by reference (ref_rx > 0)
#   direct.sh denied  the server may not read the client (no_vm_read): the
#                     client's references fail there, are NAKed and resent as
#                     packets, and the client stops sending them; every check
#                     still passes
# Env: UROCE (launcher), RC_INTEGRITY, NO_VM_READ, RUN_PAIR.
set -u
mode=${1:?on or denied}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

args=(-k 1 -b 100)
[ "$mode" = denied ] && args+=(-S "$NO_VM_READ")
# seed 11: large SENDs, WRITEs and READs with several SGEs each
UROCE_STATS=1 bash "$RUN_PAIR" "${args[@]}" -- "$RC_INTEGRITY" -s 11 -n 60 -t 80 >"$out" 2>&1
rc=$?
# counter of a side ("server" or "client0"), 0 when absent
count() {
	awk -v who="$1|" -v name="$2" '$1 == who && $2 == "uroce:" && $3 == name { n = $4 } END { print n + 0 }' "$out"
}
s_rx=$(count server ref_rx) c_rx=$(count client0 ref_rx)
s_fail=$(count server ref_pull_failed) c_tx=$(count client0 ref_tx) s_tx=$(count server ref_tx)
c_naks=$(count client0 ref_naks_rx)
echo "direct.sh $mode: server ref_rx $s_rx ref_tx $s_tx ref_pull_failed $s_fail; client ref_rx $c_rx ref_tx $c_tx ref_naks_rx $c_naks"
if [ $rc -ne 0 ]; then
	cat "$out"
	echo "direct.sh: FAIL: rc_integrity failed" >&2
	exit 1
fi
fail() { grep -E "\| uroce:   (ref_|seq_naks|retransmits)" "$out"; echo "direct.sh: FAIL: $*" >&2; exit 1; }
case $mode in
on)
	[ "$s_rx" -gt 0 ] || fail "the server pulled nothing by reference"
	[ "$c_rx" -gt 0 ] || fail "the client pulled nothing by reference (READ answers)"
	[ "$s_fail" -eq 0 ] || fail "$s_fail pulls failed"
	;;
denied)
	[ "$s_rx" -eq 0 ] || fail "the server pulled $s_rx references although it may not read the client"
	[ "$s_fail" -gt 0 ] || fail "no reference reached the server to be refused: the test tests nothing"
	# the server probed the client in vain: it answers READs as packets
	[ "$s_tx" -eq 0 ] || fail "the server sent $s_tx references it could not have probed for"
	# each refusal came back as one (NET_PKT_REF_NAK), no loss
	[ "$c_naks" -eq "$s_fail" ] || fail "$s_fail references refused, $c_naks refusals heard"
	# REF_GIVE_UP (8) refusals, and the spans sent behind them
	[ "$c_tx" -le 16 ] || fail "the client kept sending references ($c_tx)"
	;;
*) echo "direct.sh: mode on or denied" >&2; exit 2 ;;
esac
echo "direct.sh $mode: PASS"
