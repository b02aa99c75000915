#!/usr/bin/env bash
# A real-time engine moves off a CPU that another thread keeps busy, to one
# that is left idle, before it sleeps (docs/architecture.md "Execution
# model", where the engine sleeps; exec/engine.c engine_place): the
# scheduler wakes a real-time thread where it last ran, so an engine left
# beside its application's computing thread was woken there from the
# requester's CPU, through an inter-processor interrupt, for every request.
#
#   engine_placement.sh LAUNCHER ONESIDED_LAT rings|udp
#
# The target computes on CPU 0 (taskset), and its engine starts there too,
# since a thread inherits its creator's CPUs; the test then lets the engine
# run on CPUs 0 and 1.  The client runs on CPU 1 alone and sleeps 100 us
# between READs, so CPU 1 is idle most of the time and CPU 0 never: the
# engine must move (the counter engine_moves, printed by UROCE_STATS=1 at
# exit), and every READ must be right (--check).  The same run with
# UROCE_ENGINE_PLACE=0 must not move it.  Not a timing test: no latency is
# looked at.  Skipped (77) with fewer than two CPUs or an engine that is not
# real-time (no root, CAP_SYS_NICE or RLIMIT_RTPRIO): only a real-time
# engine is placed by uroce.
set -u
U=$1 B=$2 path=$3
[ "$(nproc)" -ge 2 ] || { echo "engine_placement.sh: skipped, one CPU"; exit 77; }
export UROCE_STATS=1
[ "$path" = udp ] && export UROCE_SHM=0
dir=$(mktemp -d) && trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT

# one run; prints the target's engine_moves
run() {
	local place=$1
	rm -f "$dir/port"
	# a spin of 0: the engine sleeps as soon as a request is served, so it
	# decides where to sleep often
	UROCE_ENGINE_PLACE=$place UROCE_SPIN_US=0 taskset -c 0 "$U" run -- "$B" --port=0 --port-file="$dir/port" \
		--target=compute >"$dir/t" 2>&1 &
	local tpid=$!  # the launcher execs the program: this is onesided_lat itself
	for _ in $(seq 200); do [ -s "$dir/port" ] && break; sleep 0.05; done
	[ -s "$dir/port" ] || { echo "engine_placement.sh: no target" >&2; cat "$dir/t" >&2; exit 1; }
	taskset -c 1 "$U" run -- "$B" --port="$(cat "$dir/port")" --op=read --iters=5000 --check 127.0.0.1 \
		>"$dir/c" 2>&1 &
	local cpid=$!
	# the target opens its device, and starts its engine, once the client is in
	local etid=""
	for _ in $(seq 400); do
		for t in /proc/$tpid/task/*; do
			[ "$(cat "$t/comm" 2>/dev/null)" = uroce-engine ] && etid=${t##*/}
		done
		[ -n "$etid" ] && break
		sleep 0.025
	done
	[ -n "$etid" ] || { echo "engine_placement.sh: the target has no engine" >&2; cat "$dir/t" "$dir/c" >&2; exit 1; }
	if ! chrt -p "$etid" | grep -q SCHED_FIFO; then
		echo "engine_placement.sh: skipped, the engine is not real-time here" >&2
		exit 77
	fi
	taskset -p -c 0,1 "$etid" >/dev/null
	wait "$cpid"; local crc=$?
	wait "$tpid"
	grep -h "^onesided" "$dir/c" | head -n 1 >&2
	if [ "$crc" -ne 0 ]; then
		echo "engine_placement.sh: the client failed ($crc)" >&2; cat "$dir/c" >&2; exit 1
	fi
	awk '$2 == "engine_moves" {m = $3} END {print m + 0}' "$dir/t"
}

moves=$(run 1) || exit $?
echo "$path: the target's engine moved $moves times off the computing CPU"
if [ "$moves" -lt 1 ]; then
	echo "engine_placement.sh: the engine stayed on the CPU its application keeps busy"; cat "$dir/t"; exit 1
fi
moves=$(run 0) || exit $?
echo "$path, UROCE_ENGINE_PLACE=0: moved $moves times"
if [ "$moves" -ne 0 ]; then
	echo "engine_placement.sh: UROCE_ENGINE_PLACE=0 moved the engine"; cat "$dir/t"; exit 1
fi
echo "engine_placement.sh: $path: the engine left the busy CPU, and stays put when told to"
