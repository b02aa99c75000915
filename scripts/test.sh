#!/bin/bash
# The test command (README): installs what is missing from Debian's packages,
# builds, and runs every test through ctest; then builds with ASan + UBSan and
# runs the tests that exercise uroce's own code paths again; then builds the
# fuzz targets with clang (libFuzzer + ASan + UBSan) and runs each for
# UROCE_FUZZ_SECONDS (75) from the checked-in seeds (README, "Fuzzing").
set -euo pipefail
UROCE_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$UROCE_ROOT/scripts/deps.sh"
uroce_install_deps
cd "$UROCE_ROOT"

echo "== build (RelWithDebInfo)"
uroce_build build
echo "== ctest: every test"
(cd build && ctest --output-on-failure --timeout 600 "$@")

if [ "${UROCE_SKIP_SANITIZE:-0}" != 1 ]; then
	echo "== build with AddressSanitizer + UndefinedBehaviorSanitizer"
	uroce_build build-asan -DUROCE_SANITIZE=ON
	# the preloaded library is instrumented, the programs are not: ASan's
	# runtime goes first (the launcher keeps it there)
	asan=$(gcc -print-file-name=libasan.so)
	ubsan=$(gcc -print-file-name=libubsan.so)
	export UROCE_SANITIZER_RUNTIME="$asan:$ubsan"
	export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:verify_asan_link_order=0
	export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
	# coreutils run here too (middleware_sysfs_tools: ls, cat, ibstat's
	# shell): they hung at their start while liburoce linked libpcap, whose
	# libgcrypt's libgpg-error constructor made ASan's first malloc inside
	# bindtextdomain; liburoce opens libpcap only for UROCE_PCAP now
	# (src/util/dl.h)
	echo "== ctest under sanitizers (all but the multi-host network and rxe VM tests)"
	(cd build-asan && ctest --output-on-failure --timeout 600 -LE 'net|interop' "$@")
	# of the network tests, the AF_XDP backend's: the only one that runs net/xdp.c
	echo "== the AF_XDP backend's test under sanitizers"
	(cd build-asan && ctest --output-on-failure --timeout 600 -L xdp "$@")
	unset UROCE_SANITIZER_RUNTIME ASAN_OPTIONS UBSAN_OPTIONS

	# ThreadSanitizer: the library and the stress tests instrumented (libibverbs
	# is not; it only dispatches), the runtime preloaded first by the launcher
	# (tests/stress/README.md); a data race fails the test.  Label stress:
	# rc_stress's cases and unit_pull (the pull helper's ticket, mem/pull.c)
	echo "== build with ThreadSanitizer; the concurrency stress tests under it"
	cmake -S "$UROCE_ROOT" -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUROCE_TSAN=ON >/dev/null
	cmake --build build-tsan -j"$(nproc)" --target uroce uroce-launcher rc_stress test_pull
	export UROCE_SANITIZER_RUNTIME=$(gcc -print-file-name=libtsan.so)
	export TSAN_OPTIONS=halt_on_error=1:report_signal_unsafe=0
	(cd build-tsan && ctest --output-on-failure --timeout 600 -L stress "$@")
fi

if [ "${UROCE_SKIP_FUZZ:-0}" != 1 ]; then
	secs=${UROCE_FUZZ_SECONDS:-75}
	echo "== fuzz targets (clang, libFuzzer + ASan + UBSan), ${secs} s each"
	# one command each: set -e stops at any of them
	CC=clang cmake -S "$UROCE_ROOT" -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUROCE_FUZZ=ON \
		-DUROCE_FUZZ_SECONDS="$secs" >/dev/null
	cmake --build build-fuzz -j"$(nproc)" --target fuzz_rx fuzz_shm
	(cd build-fuzz && ctest --output-on-failure --no-tests=error -L fuzz)
fi
