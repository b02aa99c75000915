#!/bin/bash
# rsockets under an unmodified TCP program (issue #15 item 2): librspreload
# preloaded behind uroce turns tcp_echo's sockets into rsockets, whose own
# calls into rdma_* (inside librdmacm) reach uroce's.  4 MiB echoed and
# checked, on two addresses and on one both share; the client's counters
# (UROCE_STATS) must show CM MADs and packets, or the preload fell back to
# the kernel's TCP and the test fails.
#   rspreload.sh LAUNCHER TCP_ECHO
set -u
LAUNCHER=$1 ECHO=$2
RS=$(ls /usr/lib/*/rsocket/librspreload.so 2>/dev/null | head -n 1)
[ -n "$RS" ] || { echo "librspreload.so not found (librdmacm1)"; exit 77; }
OUT=${TMPDIR:-/tmp}/rspreload.$$
mkdir -p "$OUT"
fail=0
port=19790
for mode in two shared; do
	S=127.96.1.1 C=127.96.1.2
	[ $mode = shared ] && C=$S
	port=$((port + 1))
	UROCE_ADDR=$S timeout 60 "$LAUNCHER" run -- sh -c 'LD_PRELOAD="$LD_PRELOAD:$0" exec "$@"' "$RS" \
		"$ECHO" -s "$S" $port >"$OUT/s" 2>&1 &
	spid=$!
	rc=1
	# refused until the server listens: again
	for try in 1 2 3 4 5 6 7 8 9 10; do
		sleep 0.5
		UROCE_STATS=1 UROCE_ADDR=$C timeout 60 "$LAUNCHER" run -- sh -c 'LD_PRELOAD="$LD_PRELOAD:$0" exec "$@"' "$RS" \
			"$ECHO" -c "$S" $port 4194304 >"$OUT/c" 2>&1
		rc=$?
		grep -q "Connection refused" "$OUT/c" || break
	done
	wait $spid
	src=$?
	mads=$(awk '$2 == "cm_mads_tx" { print $3 }' "$OUT/c")
	pkts=$(awk '$2 == "tx_packets" { print $3 }' "$OUT/c")
	echo "--- $mode: server exit $src, client exit $rc, client cm_mads_tx ${mads:-none}, tx_packets ${pkts:-none}"
	grep -v "^uroce: " "$OUT/c" | tail -n 3
	if [ $rc != 0 ] || [ $src != 0 ] || ! grep -q "^PASS" "$OUT/c" || [ "${mads:-0}" -lt 1 ] || [ "${pkts:-0}" -lt 1000 ]; then
		fail=1
		tail -n 5 "$OUT/s"
	fi
done
rm -rf "$OUT"
[ $fail = 0 ] && { echo PASS; exit 0; }
echo FAIL
exit 1
