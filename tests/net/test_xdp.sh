#!/usr/bin/env bash
# tests/net/test_xdp.sh LAUNCHER - the AF_XDP backend (UROCE_XDP=1, src/net/xdp.c)
# between two network namespaces joined by a veth pair (tests/net/lib.sh),
# with unmodified programs:
#   * ibv_rc_pingpong -c (every byte checked) AF_XDP on both sides, and
#     AF_XDP against the UDP backend both ways: the frames xdp.c makes pass
#     the peer kernel's IP and UDP checks and uroce's ICRC check, and the
#     kernel's packets pass the filter's;
#   * ibv_ud_pingpong -c (UD: the address handle, the GRH) and rping (rdma_cm
#     over QP1) AF_XDP on both sides;
#   * AF_XDP really carried them: no recvmmsg on an AF_XDP side, some on a
#     UDP side;
#   * a peer missing from the neighbour table is resolved before rdma_cm's
#     first MAD to it leaves (no packet lost for want of it);
#   * another address of the interface keeps its RoCEv2 traffic (the filter
#     takes only its own address's): the UDP backend on a second address
#     works while an AF_XDP process holds the interface;
#   * clear errors: UROCE_XDP without UROCE_ADDR, a second process on the
#     same address, a second filter on the interface;
#   * the filter is there while its process is, and goes with it: after a
#     clean exit and after a kill, and the next process attaches its own.
# Needs root (CAP_NET_ADMIN, CAP_BPF) and ip netns (exit 77 otherwise).
set -u
U=$1
. "$(dirname "$0")/lib.sh"
for p in ibv_rc_pingpong ibv_ud_pingpong rping; do
    command -v $p >/dev/null || net_skip "$p missing"
done
netns_setup
FAILS=0 PASSES=0
fail() { echo "not ok $*"; FAILS=$((FAILS + 1)); }
ok() { echo "ok $*"; PASSES=$((PASSES + 1)); }
T=$NETNS_TMPDIR

# env_of A|B xdp|udp: the environment of one side
env_of() {
    local addr=$ADDR_A
    [ "$1" = B ] && addr=$ADDR_B
    echo "UROCE_ADDR=$addr UROCE_STATS=1"
    [ "$2" = xdp ] && echo "UROCE_XDP=1"
}

# pair NAME SERVER_BACKEND CLIENT_BACKEND TCP_PORT PROGRAM ARGS...: server in
# NS_B, client in NS_A (the client's last argument is the server's address;
# rping takes it as -a, and is tried again while its server has not begun
# to listen: rdma_cm's listener shows in no socket table); sets S_RC C_RC
pair() {
    local name=$1 sb=$2 cb=$3 port=$4 prog=$5; shift 5
    local sargs=("$@") cargs=("$@" "$ADDR_B")
    if [ "$prog" = rping ]; then
        sargs=(-s -a "$ADDR_B" -p "$port" "$@")
        cargs=(-c -a "$ADDR_B" -p "$port" "$@")
    fi
    # shellcheck disable=SC2046
    ns_exec "$NS_B" env $(env_of B "$sb") timeout 60 "$U" run -- "$prog" "${sargs[@]}" >"$T/$name.server" 2>&1 &
    local spid=$!
    [ "$prog" = rping ] || ns_wait_listen "$NS_B" "$port" $spid
    for _ in $(seq 20); do
        [ -n "${FORGET_NEIGH:-}" ] && forget_neigh
        # shellcheck disable=SC2046
        ns_exec "$NS_A" env $(env_of A "$cb") timeout 30 "$U" run -- "$prog" "${cargs[@]}" >"$T/$name.client" 2>&1
        C_RC=$?
        [ "$prog" = rping ] && [ "$C_RC" != 0 ] && kill -0 $spid 2>/dev/null && { sleep 0.5; continue; }
        break
    done
    wait $spid
    S_RC=$?
}

# forget_neigh: each namespace's neighbour entry for the other removed (and checked gone)
forget_neigh() {
    ip netns exec "$NS_A" ip neigh del "$ADDR_B" dev "$VETH_A" 2>/dev/null
    ip netns exec "$NS_B" ip neigh del "$ADDR_A" dev "$VETH_B" 2>/dev/null
    if ip netns exec "$NS_A" ip neigh show "$ADDR_B" | grep -q . ||
       ip netns exec "$NS_B" ip neigh show "$ADDR_A" | grep -q .; then
        fail "neigh_forgotten: the neighbour entries could not be removed"
    fi
}

# xdp_on: a filter is on the veth of NS_A
xdp_on() { ip netns exec "$NS_A" ip -d link show dev "$VETH_A" | grep -q "prog/xdp"; }

# counter FILE NAME: a counter UROCE_STATS printed, 0 when absent
counter() { awk -v n="$2" '$2 == n { print $3; f = 1 } END { if (!f) print 0 }' "$1"; }

check() {
    local name=$1 what=$2
    if [ "$C_RC" = 0 ] && [ "$S_RC" = 0 ] && grep -q "$what" "$T/$name.client"; then
        ok "$name"
    else
        fail "$name: client $C_RC server $S_RC"
        echo "--- $name server"; tail -20 "$T/$name.server"
        echo "--- $name client"; tail -20 "$T/$name.client"
    fi
}

# the filter can be attached here at all (a kernel without AF_XDP, a
# container without CAP_BPF): otherwise skip, saying why
probe=$(ns_exec "$NS_A" env UROCE_XDP=1 UROCE_ADDR="$ADDR_A" timeout 10 "$U" run -- ibv_devinfo 2>&1)
if grep -q "cannot attach the filter\|cannot open an AF_XDP socket" <<<"$probe"; then
    net_skip "AF_XDP unavailable here: $(grep -m1 'UROCE_XDP' <<<"$probe")"
fi
if grep -q "uroce0" <<<"$probe"; then
    ok "devinfo_xdp"
else
    fail "devinfo_xdp: $probe"
fi

pair rc_xdp xdp xdp 18515 ibv_rc_pingpong -g 0 -c -s 4096 -n 500
check rc_xdp "iters in"
# each side sent and received its 500 x 5 packets (4096 B at MTU 1024), by
# AF_XDP (not one recvmmsg), none lost for want of a link address (the
# programs' TCP exchange resolved them before)
for side in client server; do
    tx=$(counter "$T/rc_xdp.$side" tx_packets) rx=$(counter "$T/rc_xdp.$side" rx_packets)
    rm=$(counter "$T/rc_xdp.$side" sys_recvmmsg) nn=$(counter "$T/rc_xdp.$side" xdp_no_neigh)
    if [ "$tx" -ge 2500 ] && [ "$rx" -ge 2500 ] && [ "$rm" = 0 ] && [ "$nn" = 0 ]; then
        ok "rc_xdp_${side}_by_af_xdp"
    else
        fail "rc_xdp_${side}_by_af_xdp: tx_packets $tx rx_packets $rx sys_recvmmsg $rm xdp_no_neigh $nn"
    fi
done

pair rc_xdp_to_udp udp xdp 18516 ibv_rc_pingpong -g 0 -c -s 65536 -n 100
check rc_xdp_to_udp "iters in"
pair rc_udp_to_xdp xdp udp 18517 ibv_rc_pingpong -g 0 -c -s 65536 -n 100
check rc_udp_to_xdp "iters in"
# the UDP side received by recvmmsg, the AF_XDP side never did
for name in rc_xdp_to_udp rc_udp_to_xdp; do
    xs=client us=server
    [ $name = rc_udp_to_xdp ] && xs=server us=client
    xr=$(counter "$T/$name.$xs" sys_recvmmsg) ur=$(counter "$T/$name.$us" sys_recvmmsg)
    if [ "$xr" = 0 ] && [ "$ur" -gt 0 ]; then
        ok "${name}_paths"
    else
        fail "${name}_paths: recvmmsg on the AF_XDP side $xr, on the UDP side $ur"
    fi
done
# the UDP side's kernel checked the IPv4 header the XDP side made; uroce
# checked every ICRC: none failed
for name in rc_xdp_to_udp rc_udp_to_xdp; do
    bad=0
    for side in client server; do
        bad=$((bad + $(counter "$T/$name.$side" icrc_errors) + $(counter "$T/$name.$side" drop_truncated)))
    done
    if [ "$bad" = 0 ]; then ok "${name}_no_bad_packets"; else fail "${name}_no_bad_packets: $bad"; fi
done

pair ud_xdp xdp xdp 18518 ibv_ud_pingpong -g 0 -c -s 1024 -n 200
check ud_xdp "iters in"

# rdma_cm's first MAD to a peer the neighbour tables do not know (no TCP
# exchange before it, as ibv_rc_pingpong's): sent once the kernel resolved
# it, not lost (xdp_no_neigh 0); forgotten again before each attempt of the
# client, whose log is the last attempt's
FORGET_NEIGH=1 pair rping_xdp xdp xdp 7471 rping -v -C 20
nn=$(( $(counter "$T/rping_xdp.client" xdp_no_neigh) + $(counter "$T/rping_xdp.server" xdp_no_neigh) ))
if [ "$C_RC" = 0 ] && [ "$S_RC" = 0 ] && [ "$(grep -c 'ping data' "$T/rping_xdp.client")" -ge 20 ] && [ "$nn" = 0 ]; then
    ok "rping_xdp"
else
    echo "xdp_no_neigh $nn"

    fail "rping_xdp: client $C_RC server $S_RC"
    tail -n 5 "$T/rping_xdp.server" "$T/rping_xdp.client"
fi

# A holder: an AF_XDP ibv_rc_pingpong server in NS_A, waiting for a client,
# in a session of its own (killed as a group); HOLDER_PORT
hold() {
    HOLDER_PORT=$1
    setsid ip netns exec "$NS_A" env UROCE_XDP=1 UROCE_ADDR="$ADDR_A" timeout 60 "$U" run -- \
        ibv_rc_pingpong -g 0 -p "$HOLDER_PORT" -n 20 >"$T/holder.$HOLDER_PORT" 2>&1 &
    HOLDER=$!
    ns_wait_listen "$NS_A" "$HOLDER_PORT" $HOLDER
}

hold 18519
if xdp_on; then ok "filter_attached_while_open"; else fail "filter_attached_while_open"; fi

# clear errors: UROCE_XDP without an address; the same address again (its
# port is the holder's); another address of the interface (its filter is
# the holder's)
out=$(ns_exec "$NS_A" env UROCE_XDP=1 timeout 10 "$U" run -- ibv_devinfo 2>&1)
if grep -q "UROCE_XDP needs UROCE_ADDR to name one IPv4 address" <<<"$out"; then
    ok "error_without_addr"
else
    fail "error_without_addr: $out"
fi
out=$(ns_exec "$NS_A" env UROCE_XDP=1 UROCE_ADDR="$ADDR_A" timeout 10 "$U" run -- ibv_devinfo 2>&1)
if grep -q "cannot bind port 4791 of the address" <<<"$out"; then
    ok "error_address_held"
else
    fail "error_address_held: $out"
fi
ADDR_A2=${ADDR_A%.1}.11
ip netns exec "$NS_A" ip addr add "$ADDR_A2/24" dev "$VETH_A"
out=$(ns_exec "$NS_A" env UROCE_XDP=1 UROCE_ADDR="$ADDR_A2" timeout 10 "$U" run -- ibv_devinfo 2>&1)
if grep -q "the interface has an XDP program already" <<<"$out"; then
    ok "error_interface_held"
else
    fail "error_interface_held: $out"
fi

# the second address's RoCEv2 goes on to its UDP sockets past the holder's filter
ns_exec "$NS_B" env UROCE_ADDR="$ADDR_B" timeout 30 "$U" run -- ibv_rc_pingpong -g 0 -p 18521 -c -n 100 \
    >"$T/other_addr.server" 2>&1 &
spid=$!
ns_wait_listen "$NS_B" 18521 $spid
ns_exec "$NS_A" env UROCE_ADDR="$ADDR_A2" timeout 30 "$U" run -- ibv_rc_pingpong -g 0 -p 18521 -c -n 100 "$ADDR_B" \
    >"$T/other_addr.client" 2>&1
C_RC=$?
wait $spid
S_RC=$?
check other_addr "iters in"

# a clean exit: the holder's client comes, both finish, the filter goes
ns_exec "$NS_B" env UROCE_ADDR="$ADDR_B" timeout 30 "$U" run -- ibv_rc_pingpong -g 0 -p 18519 -n 20 "$ADDR_A" \
    >"$T/holder_client" 2>&1
wait $HOLDER
if ! xdp_on && grep -q "iters in" "$T/holder.18519"; then
    ok "filter_detached_on_exit"
else
    fail "filter_detached_on_exit: $(ip netns exec "$NS_A" ip -d link show dev "$VETH_A" | grep xdp)"
    tail -n 5 "$T/holder.18519"
fi

# a kill: the filter goes with the process (its BPF link), and the next
# process attaches its own
hold 18520
if xdp_on; then ok "filter_attached_before_kill"; else fail "filter_attached_before_kill"; fi
kill -9 -- -"$HOLDER" 2>/dev/null
wait $HOLDER 2>/dev/null
for _ in $(seq 50); do
    xdp_on || break
    sleep 0.1
done
if xdp_on; then fail "filter_detached_on_kill"; else ok "filter_detached_on_kill"; fi
pair rc_after_kill xdp xdp 18522 ibv_rc_pingpong -g 0 -c -s 1024 -n 100
check rc_after_kill "iters in"

echo "$PASSES passed, $FAILS failed"
[ "$FAILS" = 0 ]
