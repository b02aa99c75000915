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
# The target computes on one CPU (taskset), and its engine starts there too,
# since a thread inherits its creator's CPUs; the test then lets the engine
# run on that CPU and a second.  The client runs on the second alone and
# sleeps 100 us between READs, so that CPU is idle most of the time and the
# first never: the engine must move (the counter engine_moves, printed by
# UROCE_STATS=1 at exit), and every READ must be right (--check).  Serial
# (ctest RUN_SERIAL): another test's load on the second CPU would leave it
# nowhere to go.  The same run with
# UROCE_ENGINE_PLACE=0 must not move it.  Not a timing test: no latency is
# looked at.  Skipped (77) with fewer than two CPUs, more than 16 online
# (not looked at), or an engine that is not real-time (no root,
# CAP_SYS_NICE or RLIMIT_RTPRIO): only a real-time engine is placed by
# uroce.
set -u
U=$1 B=$2 path=$3
# two CPUs this test may use (a cpuset or taskset may leave out 0 and 1)
read -r C0 C1 < <(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])')
[ -n "${C1:-}" ] || { echo "engine_placement.sh: skipped, fewer than two CPUs"; exit 77; }
online=$(grep -c '^cpu[0-9]' /proc/stat 2>/dev/null || echo 0)
if [ "$online" -lt 2 ] || [ "$online" -gt 16 ]; then
	# exec/cpu_busy.h CPU_BUSY_MAX: not looked at
	echo "engine_placement.sh: skipped, $online CPUs online in /proc/stat (placement looks at 2-16)"; exit 77
fi
export UROCE_STATS=1
[ "$path" = udp ] && export UROCE_SHM=0
dir=$(mktemp -d) && trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT

# one run; the target's engine_moves go to $dir/moves
run() {
	local place=$1
	rm -f "$dir/port" "$dir/moves"
	# a spin of 0: the engine sleeps as soon as a request is served, so it
	# decides where to sleep often
	UROCE_ENGINE_PLACE=$place UROCE_SPIN_US=0 taskset -c "$C0" "$U" run -- "$B" --port=0 --port-file="$dir/port" \
		--target=compute >"$dir/t" 2>&1 &
	local tpid=$!  # the launcher execs the program: this is onesided_lat itself
	for _ in $(seq 200); do [ -s "$dir/port" ] && break; sleep 0.05; done
	[ -s "$dir/port" ] || { echo "engine_placement.sh: no target"; cat "$dir/t"; exit 1; }
	taskset -c "$C1" "$U" run -- "$B" --port="$(cat "$dir/port")" --op=read --iters=5000 --check 127.0.0.1 \
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
	[ -n "$etid" ] || { echo "engine_placement.sh: the target has no engine"; cat "$dir/t" "$dir/c"; exit 1; }
	if ! chrt -p "$etid" | grep -q SCHED_FIFO; then
		echo "engine_placement.sh: skipped, the engine is not real-time here"
		exit 77
	fi
	taskset -p -c "$C0,$C1" "$etid" >/dev/null
	wait "$cpid"; local crc=$?
	wait "$tpid"; local trc=$?
	grep -h "^onesided" "$dir/c" | head -n 1
	if [ "$crc" -ne 0 ] || [ "$trc" -ne 0 ]; then
		echo "engine_placement.sh: the client ($crc) or the target ($trc) failed"; cat "$dir/c" "$dir/t"; exit 1
	fi
	# the counters are printed at exit (UROCE_STATS): engine_sleeps is
	# there in any run that served, so their absence is no 0
	grep -q "engine_sleeps" "$dir/t" || { echo "engine_placement.sh: no counters from the target"; cat "$dir/t"; exit 1; }
	awk '$2 == "engine_moves" {m = $3} END {print m + 0}' "$dir/t" >"$dir/moves"
}

run 1
moves=$(cat "$dir/moves")
echo "$path: the target's engine moved $moves times off the computing CPU $C0"
if [ "$moves" -lt 1 ]; then
	echo "engine_placement.sh: the engine stayed on the CPU its application keeps busy"; cat "$dir/t"; exit 1
fi
run 0
moves=$(cat "$dir/moves")
echo "$path, UROCE_ENGINE_PLACE=0: moved $moves times"
if [ "$moves" -ne 0 ]; then
	echo "engine_placement.sh: UROCE_ENGINE_PLACE=0 moved the engine"; cat "$dir/t"; exit 1
fi
echo "engine_placement.sh: $path: the engine left the busy CPU, and stays put when told to"
