#!/bin/bash
# Debian's unmodified ibv_*_pingpong, server and client as two processes on
# this host, both through `uroce run`.
# Usage: run_pingpong.sh LAUNCHER [--tool ibv_ud_pingpong] [pingpong args...]
# Exit 0 only if both sides exit 0.
set -u
U=$1; shift
TOOL=ibv_rc_pingpong
if [ "${1:-}" = --tool ]; then TOOL=$2; shift 2; fi
command -v "$TOOL" >/dev/null || { echo "$TOOL missing (apt-get install ibverbs-utils)"; exit 77; }
# a free TCP port for the pingpong's own out-of-band exchange
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
timeout 120 "$U" run -- "$TOOL" -g 0 -p "$port" "$@" >"$tmp/server" 2>&1 &
spid=$!
# wait until the server listens
for _ in $(seq 100); do
	ss -ltn "sport = :$port" 2>/dev/null | grep -q LISTEN && break
	sleep 0.05
done
timeout 120 "$U" run -- "$TOOL" -g 0 -p "$port" "$@" 127.0.0.1 >"$tmp/client" 2>&1
crc=$?
wait $spid
src=$?
echo "--- server (exit $src)"; cat "$tmp/server"
echo "--- client (exit $crc)"; cat "$tmp/client"
# ibv_xsrq_pingpong reports "success" instead of a rate
[ $crc -eq 0 ] && [ $src -eq 0 ] && grep -qE "iters in|^success" "$tmp/client"
