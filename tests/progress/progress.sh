#!/usr/bin/env bash
# One-sided operations make progress without the target application's help
# (issue #14): bench/onesided_lat --check runs every operation against a
# target that does not poll for it, and fails on a wrong byte, a completion
# status other than IBV_WC_SUCCESS, or an operation with no completion
# within its timeout.  Not a timing test: only "served at all, and right".
#
#   progress.sh LAUNCHER ONESIDED_LAT [--path rings|udp] [--target BEHAVIOUR]...
#               [--op read|write|fadd]... [--iters N] [--expect-timeout]
#               [--engine-share PCT] [--engine-share-max PCT] [--target-arg ARG]...
#               [--pin] [--engine-moves-min N] [--engine-moves-max N]
#               [--looks-min PCT] [--looks-max PCT] [-- CLIENT ARGS...]
#
# One run per (target, op), each a target and a client under `LAUNCHER run --`
# on loopback (127.0.0.1, no namespace, no root).  --path udp sets
# UROCE_SHM=0 for both, so they talk by loopback UDP instead of the
# same-host rings.  Defaults: targets compute, poll-once-read, poll-sleep;
# ops read, write, fadd; 10,000 operations each, back to back.
# --expect-timeout turns the test around (the instrument's own check): every
# run must end in the client's timeout (exit 3).
# --engine-share PCT: the target's engine thread, not its application's
# polls, must have received at least PCT % of the target's packets (the
# counters rx_by_engine and rx_packets, printed at its exit by UROCE_STATS=1):
# a target that polls now and then must not keep the engine off the receive
# path (docs/architecture.md "Execution model"), which a pass alone does not
# show, since its own polls would serve the operations too, only later.
# --engine-share-max PCT: at most PCT % (a target that spins on its CQ
# receives itself; the engine stays off the sockets).
# --target-arg ARG: passed to the target (e.g. --target-burst=16).
# --pin: the target runs on the first CPU this script may use, its engine
# too at first (a thread inherits its creator's CPUs), and the client on
# the second; once the target's engine runs, it may use both (the target's
# engine placement: docs/architecture.md "Where the engine sleeps").
# Skipped (77) with fewer than two CPUs, or an engine that is not real-time
# (no root, CAP_SYS_NICE or RLIMIT_RTPRIO): only a real-time one is placed.
# --engine-moves-min N, --engine-moves-max N: the target's engine moved
# (the counter engine_moves) at least, at most N times.  With a minimum,
# skipped (77) with more than 16 CPUs online (exec/cpu_busy.h CPU_BUSY_MAX:
# not looked at).
# --looks-min PCT, --looks-max PCT: the target's sys_poll (its pollers'
# ppoll looks at the sockets, and its engine's sleeps) at least, at most
# PCT % of its rx_packets: a poller alone receives without looking first,
# several look first (docs/architecture.md "Execution model", issue #14).
set -u

usage() {
	sed -n '2,17p' "$0" >&2
	exit 2
}

[ $# -ge 2 ] || usage
launcher=$1 bin=$2
shift 2
path=rings iters=10000 expect_timeout=0 engine_share="" engine_share_max="" targs=()
pin=0 moves_min="" moves_max="" looks_min="" looks_max=""
targets=() ops=() extra=()
while [ $# -gt 0 ]; do
	case "$1" in
	--path) path=$2; shift 2 ;;
	--target) targets+=("$2"); shift 2 ;;
	--op) ops+=("$2"); shift 2 ;;
	--iters) iters=$2; shift 2 ;;
	--expect-timeout) expect_timeout=1; shift ;;
	--engine-share) engine_share=$2; shift 2 ;;
	--engine-share-max) engine_share_max=$2; shift 2 ;;
	--target-arg) targs+=("$2"); shift 2 ;;
	--pin) pin=1; shift ;;
	--engine-moves-min) moves_min=$2; shift 2 ;;
	--engine-moves-max) moves_max=$2; shift 2 ;;
	--looks-min) looks_min=$2; shift 2 ;;
	--looks-max) looks_max=$2; shift 2 ;;
	--) shift; extra=("$@"); break ;;
	*) usage ;;
	esac
done
[ ${#targets[@]} -gt 0 ] || targets=(compute poll-once-read poll-sleep)
[ ${#ops[@]} -gt 0 ] || ops=(read write fadd)
case "$path" in
rings) export UROCE_SHM=1 ;;
udp) export UROCE_SHM=0 ;;
*) usage ;;
esac
for f in "$launcher" "$bin"; do
	[ -x "$f" ] || { echo "progress: $f is not executable" >&2; exit 2; }
done
on_target=() on_client=()
if [ $pin = 1 ]; then
	# two CPUs this script may use (a cpuset or taskset may leave out 0 and 1)
	read -r cpu0 cpu1 < <(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])')
	[ -n "${cpu1:-}" ] || { echo "progress: skipped, fewer than two CPUs"; exit 77; }
	on_target=(taskset -c "$cpu0") on_client=(taskset -c "$cpu1")
fi
if [ -n "$moves_min" ]; then
	online=$(grep -c '^cpu[0-9]' /proc/stat 2>/dev/null || echo 0)
	if [ "$online" -lt 2 ] || [ "$online" -gt 16 ]; then
		echo "progress: skipped, $online CPUs online (engine placement looks at 2-16)"; exit 77
	fi
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/progress.XXXXXX")
server=""
# the target runs in its own session, so it and a forked child end together
stop_server() {
	[ -n "$server" ] || return 0
	kill -KILL -- "-$server" 2>/dev/null
	wait "$server" 2>/dev/null
	server=""
}
# shellcheck disable=SC2317  # called through the trap
cleanup() {
	stop_server
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "progress: interrupted" >&2; exit 1' INT TERM

# --pin: the target's engine may use both CPUs once it runs (the target
# opens its device, and starts its engine, once the client is in); 77: it
# is not real-time here
widen_engine() {
	local etid="" t
	for _ in $(seq 400); do
		for t in /proc/$server/task/*; do
			[ "$(cat "$t/comm" 2>/dev/null)" = uroce-engine ] && etid=${t##*/}
		done
		[ -n "$etid" ] && break
		sleep 0.025
	done
	[ -n "$etid" ] || { echo "progress: FAIL: the target has no engine"; return 1; }
	chrt -p "$etid" | grep -q SCHED_FIFO || { echo "progress: skipped, the engine is not real-time here"; return 77; }
	taskset -p -c "$cpu0,$cpu1" "$etid" >/dev/null
}

# one target and one client; prints a line, returns 0 when the run is as
# expected, 77 when it cannot be made here
# share_check COUNTER MIN_PCT MAX_PCT WHAT: the target's COUNTER is at least
# MIN_PCT, at most MAX_PCT % of its rx_packets (either may be empty: no
# bound; both: nothing checked).  The counters are printed at its exit
# (UROCE_STATS), those at 0 not.
share_check() {
	local name=$1 min=$2 max=$3 what=$4 rx n
	[ -n "$min$max" ] || return 0
	rx=$(awk '$2 == "rx_packets" { print $3 }' "$tmp/target.log")
	n=$(awk -v c="$name" '$2 == c { m = $3 } END { print m + 0 }' "$tmp/target.log")
	if [ -z "$rx" ] || { [ -n "$min" ] && [ $((n * 100)) -lt $((min * rx)) ]; } ||
	   { [ -n "$max" ] && [ $((n * 100)) -gt $((max * rx)) ]; }; then
		echo "progress: FAIL $op target=$target path=$path: $n $what of ${rx:-?} packets" \
		     "(wanted at least ${min:-0} %, at most ${max:-any} %)"
		return 1
	fi
	echo "progress: $n $what of $rx packets"
}

run_one() {
	local target=$1 op=$2 t0=$SECONDS port crc src=0
	rm -f "$tmp/port"
	setsid "${on_target[@]}" env UROCE_STATS=1 "$launcher" run -- "$bin" --port=0 --port-file="$tmp/port" --target="$target" "${targs[@]}" \
		>"$tmp/target.log" 2>&1 </dev/null &
	server=$!
	while [ ! -s "$tmp/port" ]; do
		if ! kill -0 "$server" 2>/dev/null || [ $((SECONDS - t0)) -ge 30 ]; then
			echo "progress: FAIL $op target=$target path=$path: the target did not listen"
			sed 's/^/  target| /' "$tmp/target.log"
			stop_server
			return 1
		fi
		sleep 0.05
	done
	port=$(cat "$tmp/port")
	# the client's own --timeout-s (10 s an operation) ends a stall; this
	# bound only ends a client that hangs in something else
	"${on_client[@]}" timeout -s KILL 300 "$launcher" run -- "$bin" --port="$port" --op="$op" --check --pace-us=0 \
		--iters="$iters" "${extra[@]}" 127.0.0.1 >"$tmp/client.log" 2>&1 </dev/null &
	local client=$!
	if [ $pin = 1 ]; then
		widen_engine
		local w=$?
		if [ $w != 0 ]; then
			kill "$client" 2>/dev/null
			wait "$client" 2>/dev/null
			stop_server
			return $w
		fi
	fi
	wait "$client"
	crc=$?
	if [ $expect_timeout = 1 ]; then
		stop_server
		if [ $crc = 3 ]; then
			echo "progress: ok $op target=$target path=$path: timed out, as it must ($((SECONDS - t0)) s)"
			grep -h FAIL "$tmp/client.log" | sed 's/^/  client| /'
			return 0
		fi
		echo "progress: FAIL $op target=$target path=$path: client exit $crc, not the timeout (3)"
		sed 's/^/  client| /' "$tmp/client.log"
		return 1
	fi
	# the target ends once the client says it is done
	local waited=0
	while kill -0 "$server" 2>/dev/null && [ $waited -lt 200 ]; do
		sleep 0.1
		waited=$((waited + 1))
	done
	if kill -0 "$server" 2>/dev/null; then
		src="still running 20 s after the client"
		stop_server
	else
		wait "$server"
		src=$?
		server=""
	fi
	if [ $crc = 0 ] && [ "$src" = 0 ]; then
		share_check rx_by_engine "$engine_share" "$engine_share_max" "packets received by the engine" || return 1
		share_check sys_poll "$looks_min" "$looks_max" "looks (sys_poll)" || return 1
	fi
	if [ $crc = 0 ] && [ "$src" = 0 ] && [ -n "$moves_min$moves_max" ]; then
		# the counters are printed at exit (UROCE_STATS), those at 0 not:
		# engine_sleeps is there in any run that served, so a missing
		# engine_moves is a 0, not a target that printed nothing
		local moves
		moves=$(awk '$2 == "engine_moves" { m = $3 } END { print m + 0 }' "$tmp/target.log")
		if ! grep -q engine_sleeps "$tmp/target.log" ||
		   { [ -n "$moves_min" ] && [ "$moves" -lt "$moves_min" ]; } ||
		   { [ -n "$moves_max" ] && [ "$moves" -gt "$moves_max" ]; }; then
			echo "progress: FAIL $op target=$target path=$path: the engine moved $moves times" \
			     "(wanted at least ${moves_min:-0}, at most ${moves_max:-any})"
			sed 's/^/  target| /' "$tmp/target.log"
			return 1
		fi
		echo "progress: the engine moved $moves times"
	fi
	if [ $crc = 0 ] && [ "$src" = 0 ]; then
		echo "progress: ok $op target=$target path=$path ($((SECONDS - t0)) s): $(grep -h '^onesided ' "$tmp/client.log")"
		return 0
	fi
	echo "progress: FAIL $op target=$target path=$path: client exit $crc, target exit $src"
	sed 's/^/  client| /' "$tmp/client.log"
	sed 's/^/  target| /' "$tmp/target.log"
	return 1
}

rc=0 n=0 bad=0
for target in "${targets[@]}"; do
	for op in "${ops[@]}"; do
		n=$((n + 1))
		run_one "$target" "$op"
		r=$?
		[ $r = 77 ] && exit 77
		[ $r = 0 ] || { rc=1; bad=$((bad + 1)); }
	done
done
echo "progress: $((n - bad)) of $n runs as expected (path $path, $iters operations each)"
exit $rc
