#!/bin/bash
# One fuzz target for a while (ctest -L fuzz): the checked-in seeds and
# regressions first, then new inputs for SECONDS; fails on any finding
# (libFuzzer exits non-zero and leaves the input as WORK/crash-*).
# usage: run_fuzz.sh BINARY SEEDS REGRESSIONS WORK SECONDS
set -eu
bin=$1 seeds=$2 regr=$3 work=$4 secs=$5
mkdir -p "$work/corpus"
dirs=("$work/corpus" "$seeds")
[ -d "$regr" ] && dirs+=("$regr")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# one process, no forks: the 2-core machine is shared; -timeout: an input
# that runs 10 s is a hang, reported as one
exec "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$work/" "${dirs[@]}"
