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
#               [-- CLIENT ARGS...]
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
set -u

usage() {
	sed -n '2,17p' "$0" >&2
	exit 2
}

[ $# -ge 2 ] || usage
launcher=$1 bin=$2
shift 2
path=rings iters=10000 expect_timeout=0 engine_share="" engine_share_max="" targs=()
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

# one target and one client; prints a line, returns 0 when the run is as expected
run_one() {
	local target=$1 op=$2 t0=$SECONDS port crc src=0
	rm -f "$tmp/port"
	setsid env UROCE_STATS=1 "$launcher" run -- "$bin" --port=0 --port-file="$tmp/port" --target="$target" "${targs[@]}" \
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
	timeout -s KILL 300 "$launcher" run -- "$bin" --port="$port" --op="$op" --check --pace-us=0 \
		--iters="$iters" "${extra[@]}" 127.0.0.1 >"$tmp/client.log" 2>&1 </dev/null
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
	if [ $crc = 0 ] && [ "$src" = 0 ] && [ -n "$engine_share$engine_share_max" ]; then
		local rx eng
		rx=$(awk '$2 == "rx_packets" { print $3 }' "$tmp/target.log")
		eng=$(awk '$2 == "rx_by_engine" { print $3 }' "$tmp/target.log")
		eng=${eng:-0}  # a counter at 0 is not printed
		if [ -z "$rx" ] ||
		   { [ -n "$engine_share" ] && [ $((eng * 100)) -lt $((engine_share * rx)) ]; } ||
		   { [ -n "$engine_share_max" ] && [ $((eng * 100)) -gt $((engine_share_max * rx)) ]; }; then
			echo "progress: FAIL $op target=$target path=$path: the engine received $eng of ${rx:-?} packets" \
			     "(wanted at least ${engine_share:-0} %, at most ${engine_share_max:-100} %)"
			return 1
		fi
		echo "progress: the engine received $eng of $rx packets"
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
		run_one "$target" "$op" || { rc=1; bad=$((bad + 1)); }
	done
done
echo "progress: $((n - bad)) of $n runs as expected (path $path, $iters operations each)"
exit $rc
