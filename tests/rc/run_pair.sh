#!/usr/bin/env bash
# Run an rc_integrity server and K clients on this host, each under the uroce
# launcher, and fail if any of them fails or the whole run exceeds a bound.
#
#   UROCE=/path/to/uroce run_pair.sh [-k clients] [-b bound_s] [-C 'client-only args'] \
#       [-S 'server-only command prefix'] \
#       -- /path/to/rc_integrity [args given to the server and every client]
#
# The server binds a free TCP port (-p 0) and reports it through a port file,
# so parallel runs never collide.  UROCE="" runs the binaries directly (for a
# real RDMA device or rxe).
set -u

usage() {
	sed -n '2,11p' "$0" >&2
	exit 2
}

clients=1
bound=240
client_args=""
server_prefix=""
while [ $# -gt 0 ]; do
	case "$1" in
	-k) clients=$2; shift 2 ;;
	-b) bound=$2; shift 2 ;;
	-C) client_args=$2; shift 2 ;;
	-S) server_prefix=$2; shift 2 ;;
	--) shift; break ;;
	*) usage ;;
	esac
done
[ $# -ge 1 ] || usage
bin=$1
shift
[ -x "$bin" ] || { echo "run_pair: $bin is not executable" >&2; exit 2; }
if [ -z "${UROCE+set}" ]; then
	echo "run_pair: set UROCE to the uroce launcher (or to an empty string to run directly)" >&2
	exit 2
fi
launch=()
if [ -n "$UROCE" ]; then
	[ -x "$UROCE" ] || { echo "run_pair: launcher $UROCE is not executable" >&2; exit 2; }
	launch=("$UROCE" run --)
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rc_pair.XXXXXX")
pids=()
names=()
logs=()

# Each process runs in its own session (setsid), so a timeout can end it and
# anything it started, by its own process group id.
stop_all() {
	local sig=$1 p
	for p in "${pids[@]}"; do
		kill -0 "$p" 2>/dev/null || continue
		kill "-$sig" -- "-$p" 2>/dev/null || kill "-$sig" "$p" 2>/dev/null
	done
}

show_logs() {
	local i
	for i in "${!names[@]}"; do
		echo "----- ${names[$i]}: ${logs[$i]##*/} -----"
		sed "s/^/${names[$i]}| /" "${logs[$i]}"
	done
}

# shellcheck disable=SC2317  # called through the EXIT trap
cleanup() {
	stop_all KILL
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "run_pair: interrupted" >&2; exit 1' INT TERM

start() {   # name log cmd...
	local name=$1 log=$2
	shift 2
	setsid "$@" >"$log" 2>&1 </dev/null &
	pids+=($!)
	names+=("$name")
	logs+=("$log")
}

t0=$SECONDS
# shellcheck disable=SC2086  # server_prefix is a word list on purpose
start server "$tmp/server.log" "${launch[@]}" $server_prefix "$bin" -p 0 -P "$tmp/port" -c "$clients" "$@"

# wait for the server to report its port
port=""
while [ -z "$port" ]; do
	if [ -s "$tmp/port" ]; then
		port=$(cat "$tmp/port")
		break
	fi
	if ! kill -0 "${pids[0]}" 2>/dev/null; then
		echo "run_pair: FAIL: the server exited before listening" >&2
		show_logs
		exit 1
	fi
	if [ $((SECONDS - t0)) -ge 30 ]; then
		echo "run_pair: FAIL: the server did not listen within 30 s" >&2
		stop_all TERM
		show_logs
		exit 1
	fi
	sleep 0.1
done

for ((i = 0; i < clients; i++)); do
	# shellcheck disable=SC2086  # client_args is a word list on purpose
	start "client$i" "$tmp/client$i.log" "${launch[@]}" "$bin" -p "$port" -i "$i" "$@" $client_args 127.0.0.1
done

# wait for everyone, within the bound
timed_out=0
while :; do
	alive=0
	for p in "${pids[@]}"; do
		kill -0 "$p" 2>/dev/null && alive=1
	done
	[ $alive -eq 0 ] && break
	if [ $((SECONDS - t0)) -ge "$bound" ]; then
		timed_out=1
		echo "run_pair: FAIL: still running after $bound s; stopping everything" >&2
		stop_all TERM
		sleep 2
		stop_all KILL
		break
	fi
	sleep 0.2
done

rc=0
summary=""
for i in "${!pids[@]}"; do
	wait "${pids[$i]}"
	st=$?
	summary+=" ${names[$i]}=$st"
	[ "$st" -eq 0 ] || rc=1
done
[ $timed_out -eq 0 ] || rc=1

show_logs
if [ $rc -eq 0 ]; then
	echo "run_pair: PASS ($((SECONDS - t0)) s, exit codes:$summary)"
else
	[ $timed_out -eq 0 ] || summary+=", timed out after $bound s"
	echo "run_pair: FAIL ($((SECONDS - t0)) s, exit codes:$summary)"
fi
exit $rc
