#!/bin/bash
# One rdma_cm program pair, unmodified, through `uroce run` on this host.
#   cm_pair.sh LAUNCHER NAME MODE [--kill-server] SERVER_CMD... -- CLIENT_CMD...
# MODE two: server and client on addresses of their own (127.93.K.1 and
# 127.93.K.2, K of the test's own, so tests running at once never meet); shared:
# both on 127.93.K.1, one address of many processes (net/share.h), where
# every CM MAD is steered to the process it is for.  @S@ in a command is the
# server's address.  Passes when both exit 0; --kill-server: the server
# never exits by itself (cmtime's), so it is stopped once the client is done
# and only the client's status counts.
# CM_CLIENT_SHIM: a library preloaded in front of uroce's in the client
# (tests/interop/cm_connect_delay.c for perftest -R, whose own retry after
# a REJ 8 on its data connection crashes on any librdmacm).
# A client that the server's CM rejected with reason 8 (no listener yet:
# the server is still starting) is started again, up to 10 times.
set -u
LAUNCHER=$1 NAME=$2 MODE=$3; shift 3
KILL=0
[ "${1:-}" = --kill-server ] && { KILL=1; shift; }
SRV=() CLI=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do SRV+=("$1"); shift; done
shift
CLI=("$@")
# CM_K: the test's own (tests/cm/CMakeLists.txt counts them); else from NAME
K=${CM_K:-$(( $(printf %s "$NAME" | cksum | cut -d' ' -f1) % 250 + 1 ))}
S=127.93.$K.1
C=$S
[ "$MODE" = two ] && C=127.93.$K.2
SRV=("${SRV[@]//@S@/$S}") CLI=("${CLI[@]//@S@/$S}")
T=${CM_TIMEOUT:-120}
OUT=${TMPDIR:-/tmp}/cm_pair.$NAME.$$
mkdir -p "$OUT"

UROCE_ADDR=$S timeout $T "$LAUNCHER" run -- "${SRV[@]}" >"$OUT/server" 2>&1 &
spid=$!
sleep 1
rc=1
for try in 1 2 3 4 5 6 7 8 9 10; do
	if [ -n "${CM_CLIENT_SHIM:-}" ]; then
		UROCE_ADDR=$C timeout $T "$LAUNCHER" run -- sh -c 'LD_PRELOAD="$0${LD_PRELOAD:+:$LD_PRELOAD}" exec "$@"' \
			"$CM_CLIENT_SHIM" "${CLI[@]}" >"$OUT/client" 2>&1
	else
		UROCE_ADDR=$C timeout $T "$LAUNCHER" run -- "${CLI[@]}" >"$OUT/client" 2>&1
	fi
	rc=$?
	[ $rc -eq 0 ] && break
	kill -0 $spid 2>/dev/null || break
	grep -qE 'REJECTED, error:? 8|error 8$|status 8|Connection refused|RDMA_CM_EVENT_REJECTED instead|RPMA_CONN_REJECTED instead' "$OUT/client" || break
	echo "client rejected (no listener yet), try $try" >&2
	sleep 1
done
if [ $KILL = 1 ]; then
	kill $spid 2>/dev/null
	wait $spid
	src=0
else
	wait $spid
	src=$?
fi
echo "--- server (${SRV[*]}) on $S: exit $src"; tail -n 15 "$OUT/server"
echo "--- client (${CLI[*]}) on $C: exit $rc"; tail -n 15 "$OUT/client"
rm -rf "$OUT"
[ $rc -eq 0 ] && [ $src -eq 0 ] && { echo PASS; exit 0; }
echo FAIL
exit 1
