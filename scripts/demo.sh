#!/bin/bash
# The demo (README): installs what is missing, builds, shows the uroce0
# device, then runs Debian's unmodified ibv_rc_pingpong as a server and a
# client on this host through uroce, validating every byte, and prints the
# counters of both processes.
set -euo pipefail
UROCE_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$UROCE_ROOT/scripts/deps.sh"
uroce_install_deps
cd "$UROCE_ROOT"
uroce_build build
U=build/bin/uroce

echo; echo "=== ibv_devices, through uroce"
$U run -- ibv_devices
echo; echo "=== uroce info"
$U info
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo; echo "=== ibv_rc_pingpong server and client (-c validates the data), 4 KiB x 1000 messages each way"
UROCE_STATS=1 $U run -- ibv_rc_pingpong -g 0 -c -p "$port" > /tmp/uroce-demo-server.log 2>&1 &
spid=$!
for _ in $(seq 100); do ss -ltn "sport = :$port" | grep -q LISTEN && break; sleep 0.05; done
UROCE_STATS=1 $U run -- ibv_rc_pingpong -g 0 -c -p "$port" 127.0.0.1 2>&1 | sed 's/^/client: /'
wait $spid
sed 's/^/server: /' /tmp/uroce-demo-server.log
echo; echo "=== the same over RDMA WRITE: perftest's ib_write_bw, 64 KiB messages"
$U run -- ib_write_bw -p $((port + 1)) -s 65536 -n 2000 > /tmp/uroce-demo-bw.log 2>&1 &
spid=$!
for _ in $(seq 100); do ss -ltn "sport = :$((port + 1))" | grep -q LISTEN && break; sleep 0.05; done
$U run -- ib_write_bw -p $((port + 1)) -s 65536 -n 2000 127.0.0.1 | grep -E "#bytes|^ +[0-9]" || true
wait $spid
