#!/usr/bin/env bash
#
# net_impair_selftest: prove that the tests/net impairments really happen.
#
# Two namespaces joined by a veth pair (lib.sh netns_setup).  For each case
# udp_probe.py sends N numbered UDP datagrams NS_A -> NS_B and the receiver
# counts missing / duplicated / reordered datagrams and one-way latency.
#
#   baseline       no impairment: nothing lost or duplicated, low latency
#   loss v4/v6     impair_loss 5% on NS_B ingress: 2%..10% missing, and the
#                  nft drop counter equals the number missing
#   loss control   same rule, UDP port 4792: nothing missing (port filter)
#   dup 5%         impair_dup on NS_A egress: 2%..10% duplicates, never
#                  more than one extra copy
#   dup 100%       every datagram arrives exactly twice (no dup recursion)
#   delay fixed    impair_delay 3000us, no jitter: latency >= 3000us, order kept
#   delay+jitter   impair_delay 3000us +0..1000us, 10% reordered: reordering
#   (v4 and v6)    observed, latency >= 3000us, uroce-netem counters sane
#
# Exit: 0 pass, 1 fail, 77 skip (not root / no netns).
# Environment: UROCE_NETEM (binary), SELFTEST_N (default 2000), PYTHON.
# Fault injection, to check that this test can fail: SELFTEST_APPLY_LOSS_PCT,
# SELFTEST_APPLY_DUP_PCT, SELFTEST_APPLY_DELAY_US, SELFTEST_APPLY_JITTER_US,
# SELFTEST_APPLY_REORDER_PCT change what is applied but not what is expected.

set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$HERE/lib.sh" || { echo "cannot source $HERE/lib.sh" >&2; exit 1; }

PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=$(command -v python3 || true)
[ -n "$PY" ] || net_die "python3 not found (set PYTHON=)"
PROBE="$HERE/udp_probe.py"

N=${SELFTEST_N:-2000}
INTERVAL_US=50
PORT=4791

# nominal impairments (expectations are derived from these)
LOSS_PCT=5
DUP_PCT=5
DELAY_US=3000
JITTER_US=1000
REORDER_PCT=10
REORDER_GAP_US=2000

APPLY_LOSS_PCT=${SELFTEST_APPLY_LOSS_PCT:-$LOSS_PCT}
APPLY_DUP_PCT=${SELFTEST_APPLY_DUP_PCT:-$DUP_PCT}
APPLY_DELAY_US=${SELFTEST_APPLY_DELAY_US:-$DELAY_US}
APPLY_JITTER_US=${SELFTEST_APPLY_JITTER_US:-$JITTER_US}
APPLY_REORDER_PCT=${SELFTEST_APPLY_REORDER_PCT:-$REORDER_PCT}

T_START=$(date +%s)
FAILS=0
CHECKS=0

# check "description" ARITHMETIC-EXPR
check() {
    local desc=$1 expr=$2
    CHECKS=$((CHECKS + 1))
    # shellcheck disable=SC2004  # expr is a whole expression, not a variable
    if (( $expr )); then
        echo "  ok   $desc"
    else
        local v vals=""
        for v in $(printf '%s\n' "$expr" | grep -oE '[A-Za-z_][A-Za-z0-9_]*' | sort -u); do
            vals+=" $v=${!v:-?}"
        done
        echo "  FAIL $desc    [$expr ;$vals]"
        FAILS=$((FAILS + 1))
    fi
}

# probe NAME DST_ADDR PORT: run receiver in NS_B and sender in NS_A, then
# load the receiver's results into R_* variables.
probe() {
    local name=$1 dst=$2 port=$3
    local ready="$NETNS_TMPDIR/$name.ready" env="$NETNS_TMPDIR/$name.env"
    local run_id=$((RANDOM * 32768 + RANDOM)) rpid
    rm -f "$ready" "$env"
    timeout 30 ip netns exec "$NS_B" "$PY" "$PROBE" recv --bind "$dst" --port "$port" \
        --count "$N" --run-id "$run_id" --idle-ms 400 --timeout 15 \
        --out "$NETNS_TMPDIR/$name.json" --ready-file "$ready" --shell >"$env" &
    rpid=$!
    for _ in $(seq 1 100); do
        [ -e "$ready" ] && break
        kill -0 "$rpid" 2>/dev/null || break
        sleep 0.05
    done
    [ -e "$ready" ] || net_die "$name: receiver did not start (bind $dst:$port in $NS_B)"
    timeout 30 ip netns exec "$NS_A" "$PY" "$PROBE" send --dst "$dst" --port "$port" \
        --count "$N" --interval-us "$INTERVAL_US" --run-id "$run_id" \
        || net_die "$name: sender failed"
    wait "$rpid" || net_die "$name: receiver failed (rc=$?)"
    unset "${!R_@}"
    # shellcheck disable=SC1090
    . "$env"
    [ -n "${R_RECEIVED:-}" ] || net_die "$name: no receiver results"
    echo "[$name] dst=$dst:$port sent=$N received=$R_RECEIVED missing=$R_MISSING" \
         "dups=$R_DUPLICATES max_copies=$R_MAX_COPIES reordered=$R_REORDERED" \
         "(max_dist=$R_MAX_REORDER_DISTANCE) lat_us min/p50/p99/max=$R_LAT_MIN_US/$R_LAT_P50_US/$R_LAT_P99_US/$R_LAT_MAX_US" \
         "rcvbuf_err=$R_RCVBUF_ERRORS"
}

# integer microseconds from "1234.5"
us() { printf '%s\n' "${1%.*}"; }

# "counter packets N" of the first counter in an nft chain
nft_counter() {
    ip netns exec "$1" nft list chain netdev uroce_impair "$2" 2>/dev/null \
        | grep -o 'counter packets [0-9]*' | tail -n1 | awk '{print $3}'
}

# netem_field KEY: value from the last uroce-netem "exit" counters line
netem_field() {
    printf '%s\n' "$NETEM_COUNTERS" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'
}

netns_setup
NETEM_BIN=$(_net_netem_bin) || exit 1   # fail early if uroce-netem is missing
echo "using uroce-netem: $NETEM_BIN"

# ---------------------------------------------------------------- baseline --
probe baseline "$ADDR_B" $PORT
check "baseline: nothing missing" "R_MISSING == 0"
check "baseline: no duplicates" "R_DUPLICATES == 0"
check "baseline: no socket buffer drops" "R_RCVBUF_ERRORS == 0"
check "baseline: min latency < ${DELAY_US}us" "$(us "$R_LAT_MIN_US") < DELAY_US"
BASE_REORDERED=$R_REORDERED
BASE_P50=$(us "$R_LAT_P50_US")

# -------------------------------------------------------------------- loss --
LO=$((N * 2 / 100)); HI=$((N * 10 / 100))
impair_loss "$NS_B" "$VETH_B" "$APPLY_LOSS_PCT"
probe loss_v4 "$ADDR_B" $PORT
DROPPED=$(nft_counter "$NS_B" "loss_$VETH_B")
echo "[loss_v4] nft drop counter=$DROPPED"
check "loss v4: missing in [$LO,$HI] (2%..10%)" "R_MISSING >= LO && R_MISSING <= HI"
check "loss v4: no duplicates" "R_DUPLICATES == 0"
check "loss v4: no socket buffer drops" "R_RCVBUF_ERRORS == 0"
check "loss v4: nft drop counter == missing" "${DROPPED:-0} == R_MISSING"

probe loss_ctrl "$ADDR_B" 4792
check "loss control (port 4792 not impaired): nothing missing" "R_MISSING == 0"

probe loss_v6 "$ADDR6_B" $PORT
check "loss v6: missing in [$LO,$HI] (2%..10%)" "R_MISSING >= LO && R_MISSING <= HI"
check "loss v6: no duplicates" "R_DUPLICATES == 0"
impair_loss "$NS_B" "$VETH_B" 0

probe loss_off "$ADDR_B" $PORT
check "loss removed (PCT 0): nothing missing" "R_MISSING == 0"

# --------------------------------------------------------------------- dup --
impair_dup "$NS_A" "$VETH_A" "$APPLY_DUP_PCT"
probe dup5 "$ADDR_B" $PORT
check "dup 5%: duplicates in [$LO,$HI] (2%..10%)" "R_DUPLICATES >= LO && R_DUPLICATES <= HI"
check "dup 5%: at most one extra copy per datagram" "R_MAX_COPIES <= 2"
check "dup 5%: nothing missing" "R_MISSING == 0"

impair_dup "$NS_A" "$VETH_A" 100
probe dup100 "$ADDR_B" $PORT
check "dup 100%: every datagram exactly twice (dups == N)" "R_DUPLICATES == N && R_MAX_COPIES == 2"
impair_dup "$NS_A" "$VETH_A" 0

# ------------------------------------------------------------------- delay --
impair_delay "$NS_A" "$APPLY_DELAY_US" 0 0
probe delay_fixed "$ADDR_B" $PORT
impair_delay_stop "$NS_A" || check "uroce-netem exited cleanly" "0"
check "fixed delay: min latency >= ${DELAY_US}us" "$(us "$R_LAT_MIN_US") >= DELAY_US"
# FIFO release; a few swaps can still come from CPU migration on the path
check "fixed delay: order preserved (reordered <= 0.5%)" "R_REORDERED <= N / 200"
check "fixed delay: nothing missing/duplicated" "R_MISSING == 0 && R_DUPLICATES == 0"

MAXLAT=$((DELAY_US + JITTER_US + REORDER_GAP_US + 20000))
for fam in v4 v6; do
    if [ $fam = v4 ]; then dst=$ADDR_B; else dst=$ADDR6_B; fi
    impair_delay "$NS_A" "$APPLY_DELAY_US" "$APPLY_JITTER_US" "$APPLY_REORDER_PCT" \
        --reorder-gap-us "$REORDER_GAP_US"
    probe "delay_$fam" "$dst" $PORT
    NETEM_OK=1   # used inside check expressions
    # shellcheck disable=SC2034
    impair_delay_stop "$NS_A" || NETEM_OK=0
    check "delay $fam: uroce-netem exited cleanly" "NETEM_OK == 1"
    check "delay $fam: min latency >= ${DELAY_US}us" "$(us "$R_LAT_MIN_US") >= DELAY_US"
    check "delay $fam: p50 latency <= ${MAXLAT}us" "$(us "$R_LAT_P50_US") <= MAXLAT"
    check "delay $fam: reordering observed (>= 1% of N, > baseline $BASE_REORDERED)" \
        "R_REORDERED >= N / 100 && R_REORDERED > BASE_REORDERED"
    check "delay $fam: nothing missing/duplicated" "R_MISSING == 0 && R_DUPLICATES == 0"
    n_seen=$(netem_field seen); n_delayed=$(netem_field delayed)
    n_reord=$(netem_field reordered); n_verr=$(netem_field verdict_errors)
    n_ovf=$(netem_field overflow)
    check "delay $fam: netem seen >= N, all delayed" \
        "${n_seen:-0} >= N && ${n_delayed:-0} == ${n_seen:-0} && ${n_ovf:-1} == 0"
    check "delay $fam: netem reordered in [${REORDER_PCT}%/2, ${REORDER_PCT}%*2]" \
        "${n_reord:-0} * 200 >= N * REORDER_PCT && ${n_reord:-0} * 50 <= N * REORDER_PCT"
    check "delay $fam: netem verdict errors == 0" "${n_verr:-1} == 0"
    check "delay $fam: no packet bypassed uroce-netem (fail-open)" "NETEM_BYPASSED == 0"
    # the order uroce-netem released packets in is the order they arrived in
    n_ooo=$(netem_field out_of_order)
    check "delay $fam: receiver reordered ~= netem out_of_order (${n_ooo:-?})" \
        "${n_ooo:-0} > 0 && R_REORDERED - ${n_ooo:-0} <= N / 100 && ${n_ooo:-0} - R_REORDERED <= N / 100"
done

# ---------------------------------------------------------------- summary --
T_END=$(date +%s)
echo "net_impair_selftest: $((CHECKS - FAILS))/$CHECKS checks passed in $((T_END - T_START))s" \
     "(baseline p50 ${BASE_P50}us, reordered $BASE_REORDERED)"
if [ "$FAILS" -ne 0 ]; then
    impair_show "$NS_A"
    impair_show "$NS_B"
    exit 1
fi
exit 0
