#!/bin/bash
# The uroce benchmark, one command:
#   bench/run.sh [--quick] [--reps N] [--out DIR] [--sizes 2,64,...] [--no-build] [--onesided]
# Builds what is needed (cmake/make in build/, beside this directory), then runs
# bench/bench.py: uroce through perftest, TCP (qperf and bench/tcp_pingpong),
# UDP (bench/tcp_pingpong --udp) and memcpy (bench/memcpy_bw) for 2 B, 64 B,
# 4 KiB, 64 KiB and 1 MiB, then one-sided latency by target behaviour
# (bench/onesided_lat); prints the table and writes results.json,
# results.md, results.txt and results.png to DIR (default bench/results/).
# --onesided runs only the one-sided section (DIR bench/results-onesided/).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD="$ROOT/build"
build=1
onesided=0
args=()
for a in "$@"; do
	case "$a" in
	--no-build) build=0 ;;
	-h|--help)
		sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
		exec "${PYTHON:-python3}" "$ROOT/bench/bench.py" --help ;;
	--onesided) onesided=1; args+=("$a") ;;
	*) args+=("$a") ;;
	esac
done

missing=""
for t in perftest qperf gnuplot; do
	case $t in
	perftest) command -v ib_write_bw >/dev/null || missing="$missing perftest" ;;
	qperf) command -v qperf >/dev/null || missing="$missing qperf" ;;
	gnuplot) command -v gnuplot >/dev/null || missing="$missing gnuplot-nox" ;;
	esac
done
command -v ibv_rc_pingpong >/dev/null || missing="$missing ibverbs-utils"
# the one-sided section needs none of them
if [ -n "$missing" ] && [ $onesided = 0 ]; then
	echo "run.sh: missing Debian packages:$missing (apt-get install$missing); those measurements will fail" >&2
fi

if [ $build = 1 ]; then
	# The uroce tree (library + launcher): an ordinary incremental build.
	# If it fails (e.g. src/ mid-edit) but earlier binaries exist, go on with them.
	if [ ! -f "$BUILD/Makefile" ]; then
		cmake -S "$ROOT" -B "$BUILD" >/dev/null || echo "run.sh: cmake of $ROOT failed" >&2
	fi
	if ! make -C "$BUILD" -j2 >"$BUILD/bench-make.log" 2>&1; then
		if [ -x "$BUILD/bin/uroce" ] && [ -f "$BUILD/lib/liburoce.so" ]; then
			echo "run.sh: make in $BUILD failed (log: $BUILD/bench-make.log); using the binaries already there" >&2
		else
			echo "run.sh: build failed, see $BUILD/bench-make.log" >&2
			tail -20 "$BUILD/bench-make.log" >&2
			exit 1
		fi
	fi
	# bench/ programs: part of the top-level build once it has add_subdirectory(bench),
	# otherwise built on their own into the same build/bin.
	if ! grep -qE '^[[:space:]]*add_subdirectory\(bench\)' "$ROOT/CMakeLists.txt"; then
		cmake -S "$ROOT/bench" -B "$BUILD/bench-standalone" \
			-DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$BUILD/bin" >/dev/null &&
			make -C "$BUILD/bench-standalone" -j2 >"$BUILD/bench-standalone.log" 2>&1 ||
			{ echo "run.sh: building bench/ failed:" >&2; tail -20 "$BUILD/bench-standalone.log" >&2; exit 1; }
	fi
fi

PY=${PYTHON:-}
if [ -z "$PY" ]; then
	if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=python3; fi
fi
exec "$PY" "$ROOT/bench/bench.py" "${args[@]}"
