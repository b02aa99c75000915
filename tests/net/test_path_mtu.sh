#!/usr/bin/env bash
# tests/net/test_path_mtu.sh LAUNCHER - a path MTU the link cannot carry is a
# clear error, not a silent retry exhaustion (obj/qp.c, check_path_mtu).
#
# Two namespaces joined by a veth pair of MTU 1500 (tests/net/lib.sh), each
# side its own uroce (UROCE_ADDR = its address):
#   * the port's active_mtu follows the GID's interface: 1024 (`uroce info`);
#   * ibv_rc_pingpong -m 4096 fails at once on both sides (the server, which
#     reaches RTR first: "Failed to modify QP to RTR", and uroce's log names
#     the route's MTU; the client loses its peer) instead of ending in
#     "transport retry counter exceeded" after the kernel refused every
#     full-size datagram (EMSGSIZE);
#   * ibv_rc_pingpong -m 1024 -c -s 65536 still works, with 1024-byte packets.
# Needs root and ip netns (exit 77 otherwise).
set -u
U=$1
. "$(dirname "$0")/lib.sh"
command -v ibv_rc_pingpong >/dev/null || net_skip "ibv_rc_pingpong missing (ibverbs-utils)"
netns_setup
FAILS=0 PASSES=0
fail() { echo "not ok $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok $*"; PASSES=$((PASSES + 1)); }
T=$NETNS_TMPDIR

# pingpong NAME ARGS...: server in NS_B, client in NS_A; sets S_RC C_RC
pingpong() {
    local name=$1; shift
    ns_exec "$NS_B" env UROCE_ADDR="$ADDR_B" timeout 30 "$U" run -- ibv_rc_pingpong -g 0 "$@" \
        >"$T/$name.server" 2>&1 &
    local spid=$!
    ns_wait_listen "$NS_B" 18515 $spid
    ns_exec "$NS_A" env UROCE_ADDR="$ADDR_A" timeout 30 "$U" run -- ibv_rc_pingpong -g 0 "$@" "$ADDR_B" \
        >"$T/$name.client" 2>&1
    C_RC=$?
    wait $spid
    S_RC=$?
    echo "--- $name server (exit $S_RC)"; cat "$T/$name.server"
    echo "--- $name client (exit $C_RC)"; cat "$T/$name.client"
}

info=$(ns_exec "$NS_A" env UROCE_ADDR="$ADDR_A" "$U" info 2>&1)
if grep -q "active_mtu 1024," <<<"$info"; then
    ok "active_mtu_from_veth_1500"
else
    fail "active_mtu_from_veth_1500: expected active_mtu 1024 got: $(grep '^port' <<<"$info")"
fi

pingpong mtu4096 -m 4096 -n 5
if [ "$C_RC" = 124 ] || [ "$S_RC" = 124 ]; then
    fail "mtu4096_fails_fast: a side hung until the 30 s bound (client $C_RC, server $S_RC)"
elif [ "$C_RC" = 0 ] || [ "$S_RC" = 0 ]; then
    fail "mtu4096_fails: expected both sides to fail, got client $C_RC server $S_RC"
else
    ok "mtu4096_fails_fast"
fi
# The server reaches RTR first (it connects when the client's address
# arrives) and says why; the client then loses its TCP peer at once.
if grep -q "Failed to modify QP to RTR" "$T/mtu4096.server" &&
   grep -q "path MTU 4096 does not fit the route" "$T/mtu4096.server"; then
    ok "mtu4096_server_says_why"
else
    fail "mtu4096_server_says_why: expected 'Failed to modify QP to RTR' and uroce's path MTU message"
fi
for side in client server; do
    if grep -q "retry counter exceeded" "$T/mtu4096.$side"; then
        fail "mtu4096_${side}_no_retry_exhaustion: it still ends in a retry exhaustion"
    fi
done

pingpong mtu1024 -m 1024 -c -s 65536 -n 50
if [ "$C_RC" = 0 ] && [ "$S_RC" = 0 ] && grep -q "iters in" "$T/mtu1024.client"; then
    ok "mtu1024_works"
else
    fail "mtu1024_works: client $C_RC server $S_RC"
fi

echo "$PASSES passed, $FAILS failed"
[ "$FAILS" = 0 ]
