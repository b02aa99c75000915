#!/usr/bin/env bash
# tests/unit/test_shm_sweep.sh UROCE - counter pages of dead processes are
# removed when a device opens; live ones, and hard-linked ones, are kept.
set -u
UROCE=$1
fails=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }

sh -c 'exit 0' & dead=$!; wait $dead
sleep 60 & live=$!
sleep 60 & fresh=$!
server=
cleanup() {
    kill $live $fresh 2>/dev/null
    rm -rf /dev/shm/uroce-sweep-test.$$
    if [ -n "$server" ]; then
        kill $server 2>/dev/null
        wait $server 2>/dev/null
        rm -f /dev/shm/uroce.$server
    fi
}
trap cleanup EXIT

echo stale > /dev/shm/uroce.$dead && touch -d '1 minute ago' /dev/shm/uroce.$dead
echo reused > /dev/shm/uroce.$live && touch -d '1 minute ago' /dev/shm/uroce.$live
echo young > /dev/shm/uroce.$fresh
mkdir -p /dev/shm/uroce-sweep-test.$$
echo linked > /dev/shm/uroce.$((dead + 100000)) && touch -d '1 minute ago' /dev/shm/uroce.$((dead + 100000))
ln /dev/shm/uroce.$((dead + 100000)) /dev/shm/uroce-sweep-test.$$/kept

# a running uroce process (a pingpong server waiting for its client)
"$UROCE" run -- ibv_rc_pingpong -g 0 -p $((20000 + $$ % 1000)) > /dev/null 2>&1 & server=$!
for _ in $(seq 100); do [ -e /dev/shm/uroce.$server ] && break; sleep 0.05; done
check "a running uroce process publishes its page" "[ -e /dev/shm/uroce.$server ]"
touch -d '1 minute ago' /dev/shm/uroce.$server

"$UROCE" info > /dev/null 2>&1   # opens the device: sweeps

check "page of a dead PID removed" "[ ! -e /dev/shm/uroce.$dead ]"
check "page of a reused PID (not mapped by it, 1 min old) removed" "[ ! -e /dev/shm/uroce.$live ]"
check "page of a live PID younger than 5 s kept" "[ -e /dev/shm/uroce.$fresh ]"
check "hard-linked page kept" "[ -e /dev/shm/uroce.$((dead + 100000)) ]"
check "running uroce process's page kept" "[ -e /dev/shm/uroce.$server ]"
rm -f /dev/shm/uroce.$fresh /dev/shm/uroce.$((dead + 100000))
echo "$fails failure(s)"
[ $fails = 0 ]
