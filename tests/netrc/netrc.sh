#!/usr/bin/env bash
#
# tests/netrc/netrc.sh CASE - unmodified verbs programs over a real (veth)
# network between two namespaces, each side running on its own uroce
# instance (UROCE_ADDR = that namespace's address), with and without
# impairments from tests/net/lib.sh.
#
#   clean            ibv_rc_pingpong -c: default size and -s 65536 -n 200 over
#                    IPv4 and IPv6; plus -m 4096 with the veth MTU raised to
#                    9000 (see "MTU" below)
#   loss             the same (IPv4 + IPv6) with 5% loss on both directions
#                    (nft, netdev ingress); counters must show retransmits and
#                    timeouts/NAKs, nft must show drops.  The programs run with
#                    netrc_linger.so: ibv_rc_pingpong's lost-last-ACK race
#                    would fail ~1 run in 10 on any NIC (see netrc_linger.c)
#   dup              the same with 5% duplication on both directions;
#                    counters must show duplicate requests
#   delay_reorder    the same with 1 ms delay + 0..1 us jitter + 2% of the
#                    packets held 2 ms more (uroce-netem) on both directions;
#                    counters must show out_of_sequence/seq NAKs, uroce-netem
#                    must show delayed and reordered packets.  The default-size
#                    runs use UROCE_NO_GSO=1 (see "GSO" below)
#   all              loss 5% + dup 5% + delay/jitter/reorder on both
#                    directions: ib_write_bw, ib_read_bw (-n 200 -s 65536),
#                    ib_send_bw, ib_atomic_bw (-n 200), TCP ports distinct
#   integrity        all impairments with rc_integrity -n 40 (server + client,
#                    the seed is printed; NETRC_SEED=N repeats it); skipped
#                    (77) if rc_integrity is not built
#
# Every run prints its wall time, the exit codes and the non-zero counters of
# both sides; a failing run also prints the exact commands to reproduce it
# (with the namespace names of that run: set NETRC_PCAP_DIR to get pcaps).
#
# A case fails if a program exits non-zero, hangs (each server/client pair
# is bounded by NETRC_BOUND seconds; on a hang the live counters of both
# sides are printed before they are killed), prints a data-validation or
# completion error, or if the uroce counters (and the nft / uroce-netem
# counters) do not prove that the impairment really happened.
#
# MTU: the veth pair has MTU 1500 and uroce sends each RoCE packet as one
# UDP datagram: IP(20|40) + UDP 8 + BTH 12 (+ RETH 16 ...) + payload + ICRC 4.
# So the RoCE path MTU must be <= 1024 on it (the active MTU derived from it, 1024, is
# fine; -m 2048/4096 does not fit).  -m 4096 needs the link MTU raised to
# ~4200+ (the clean case sets the veth MTU to 9000 and runs with
# UROCE_MTU=4096 -m 4096).  With -m 4096 on the 1500-byte veth the full-size
# packets (DF set) fail in sendmsg with EMSGSIZE (counter tx_errors), the
# sender ends with IBV_WC_RETRY_EXC_ERR after retry_cnt timeouts and its
# peer waits forever.
#
# GSO: uroce sends a burst of packets as one UDP GSO datagram, which the veth
# pair carries whole.  In the impaired cases UDP segmentation offload is
# turned off on the veths (ethtool), so the ingress loss hits single packets;
# duplication (egress hook) and uroce-netem (POSTROUTING, it queues GSO
# datagrams unsegmented) still act on whole bursts.
#
# Counters: uroce publishes them in /dev/shm/uroce.<pid> and unlinks that
# file when the process exits.  To get the *final* values, a watcher
# hard-links the file (into /dev/shm/netrc.<pid>/) as soon as it appears; the
# link keeps the page alive after the process is gone.  It is decoded with
# the build's own `uroce stat -a`, by linking it for a moment as
# /dev/shm/uroce.<pid of this script> (uroce stat only lists pages named
# after a live pid; this script is a bash, never a uroce process itself),
# so no struct layout is hard-coded here.
#
# Environment:
#   UROCE          launcher (default <repo>/build/bin/uroce)
#   UROCE_NETEM    uroce-netem (lib.sh; default <repo>/build/bin/uroce-netem)
#   RC_INTEGRITY   rc_integrity binary (default <repo>/build/bin/rc_integrity)
#   NETRC_BOUND    seconds allowed for one server/client pair (default 90;
#                  ctest sets 60, 100 for integrity)
#   NETRC_REPEAT   run the case's program list this many times (default 1)
#   NETRC_PCAP_DIR if set, every process writes UROCE_PCAP=<dir>/<run>-<side>.pcap
#   NETRC_LOG_DIR  if set, program logs and counters are kept there
#   NETRC_SEED     rc_integrity seed (default: derived from time)
#   NETRC_LINGER_LIB  netrc_linger.so (default: from the build tree, else it
#                  is compiled with $CC into the scratch directory)
#   NETRC_LINGER_MS   QP destroy delay of the shim in the loss case (default
#                  1000; 0 = do not use the shim, see netrc_linger.c)
#   NETRC_LOSS_PCT NETRC_DUP_PCT NETRC_DELAY_US NETRC_JITTER_US NETRC_REORDER_PCT
#                  override the impairment parameters
#   NETRC_IMPAIR   all/integrity: the impairments to apply (default
#                  "loss dup delay"; e.g. "loss" to bisect a failure)
#   NETRC_VERBOSE=1  print the program outputs of passing runs too
#   NETRC_ONLY     regex: only run the programs whose run name matches
#                  (pp_v4_default pp_v4_64k pp_v6_default pp_v6_64k
#                  pp_v4_mtu4096 write_bw read_bw send_bw atomic_bw
#                  rc_integrity_s<seed>)
#
# Exit: 0 pass, 1 fail, 77 skip (not root / no netns / nothing to run).

set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../net/lib.sh
. "$HERE/../net/lib.sh" || { echo "cannot source $HERE/../net/lib.sh" >&2; exit 1; }

CASE=${1:-}
UROCE=${UROCE:-$ROOT/build/bin/uroce}
RC_INTEGRITY=${RC_INTEGRITY:-$ROOT/build/bin/rc_integrity}
NETRC_BOUND=${NETRC_BOUND:-90}
NETRC_REPEAT=${NETRC_REPEAT:-1}
PEER_GRACE=10

# impairment parameters
LOSS_PCT=${NETRC_LOSS_PCT:-5}
DUP_PCT=${NETRC_DUP_PCT:-5}
DELAY_US=${NETRC_DELAY_US:-1000}
JITTER_US=${NETRC_JITTER_US:-1}
REORDER_PCT=${NETRC_REORDER_PCT:-2}

case "$CASE" in
clean | loss | dup | delay_reorder | all | integrity) ;;
*)
    sed -n '2,40p' "$0" >&2
    exit 2
    ;;
esac

log() { echo "[netrc] $*" >&2; }

[ -x "$UROCE" ] || { log "launcher '$UROCE' not found (build first, or set UROCE)"; exit 1; }
if [ "$CASE" = integrity ] && [ ! -x "$RC_INTEGRITY" ]; then
    log "SKIP: $RC_INTEGRITY not built"
    exit 77
fi
for p in ibv_rc_pingpong ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw; do
    case "$CASE:$p" in
    clean:ibv* | loss:ibv* | dup:ibv* | delay_reorder:ibv* | all:ib_*)
        command -v "$p" >/dev/null 2>&1 || { log "SKIP: $p not installed"; exit 77; } ;;
    esac
done

# ------------------------------------------------------------- bookkeeping --

FAILS=0
CHECKS=0
WARNINGS=0
KEEP_DIR=""     # /dev/shm/netrc.<pid>: hard links to the counter pages
RUN_SEQ=0
PORT_BASE=$((18600 + ($$ % 200) * 10))
declare -A TOT=()        # counter totals of the current case (both sides, all runs)
declare -A CS=() CC=()   # counters of the last run: server, client
declare -a RUN_ENV=()    # extra environment for both sides of the next run
declare -a SUMMARY=()
LINGER=0                 # 1: run the programs with netrc_linger.so (see there)
LINGER_LIB=""

cleanup() {
    local rc=$?
    rm -f "/dev/shm/uroce.$$"
    [ -n "$KEEP_DIR" ] && rm -rf -- "$KEEP_DIR"
    netns_teardown
    return $rc
}
trap cleanup EXIT

fail() {
    FAILS=$((FAILS + 1))
    echo "  FAIL $*"
}
ok() { echo "  ok   $*"; }
warn() {
    WARNINGS=$((WARNINGS + 1))
    echo "  warn $*"
}
# check "description" VALUE OP LIMIT   (integers; OP: -gt -ge -eq -lt -le)
check() {
    local desc=$1 v=${2:-0} op=$3 lim=$4
    CHECKS=$((CHECKS + 1))
    # shellcheck disable=SC2086
    if [ "$v" $op "$lim" ]; then ok "$desc ($v $op $lim)"; else fail "$desc ($v, want $op $lim)"; fi
}

now() { printf '%s\n' "${EPOCHREALTIME/./}"; }   # microseconds

# "counter packets N" of the last counter rule of an nft chain (0 if none)
nft_counter() {
    local n
    n=$(ip netns exec "$1" nft list chain netdev uroce_impair "$2" 2>/dev/null |
        grep -o 'counter packets [0-9]*' | tail -n1 | awk '{print $3}')
    echo "${n:-0}"
}

# _watch_shm PID DEST: hard-link /dev/shm/uroce.PID to DEST once it exists.
_watch_shm() {
    local pid=$1 dest=$2
    while kill -0 "$pid" 2>/dev/null; do
        ln "/dev/shm/uroce.$pid" "$dest" 2>/dev/null && return 0
        sleep 0.005
    done
    return 1
}

# load_counters FILE ARRAYNAME: decode a kept counter page into an assoc
# array with the build's own `uroce stat` (see "Counters" above)
load_counters() {
    local f=$1 name val
    local -n arr=$2
    arr=()
    [ -f "$f" ] || return 1
    ln -f "$f" "/dev/shm/uroce.$$" || return 1
    while read -r name val _; do
        [[ "$val" =~ ^[0-9]+$ ]] && arr[$name]=$val
    done < <("$UROCE" stat -a "$$" | tail -n +2)
    rm -f "/dev/shm/uroce.$$"
    [ "${#arr[@]}" -gt 0 ]
}

# the counters worth showing in a one-line summary
SHOW_COUNTERS=(tx_packets retransmits timeouts rto_probes seq_naks_rx seq_naks_tx duplicates dup_responses
    out_of_sequence drop_psn_window rnr_naks_rx tx_errors icrc_errors drop_wrong_peer drop_qp_state)

fmt_counters() {   # ARRAYNAME
    local -n a=$1
    local c out=""
    for c in "${SHOW_COUNTERS[@]}"; do
        [ "${a[$c]:-0}" != 0 ] && out+=" $c=${a[$c]}"
    done
    echo "${out:- (none)}"
}

# c NAME: server + client value of a counter in the last run
c() { echo $(( ${CS[$1]:-0} + ${CC[$1]:-0} )); }


show_file() {   # TAG FILE
    [ -s "$2" ] && sed "s/^/    $1| /" "$2"
}

# run_pair NAME FAMILY(v4|v6) -- ARGV...
# Server: ARGV in NS_B; client: ARGV + server address in NS_A.  Each under
# `uroce run` with UROCE_ADDR of its namespace and RUN_ENV.  Sets RUN_OK
# (1/0), RUN_SECS, CS/CC (final counters) and adds the counters to TOT.
run_pair() {
    local name=$1 fam=$2
    shift 3
    local -a argv=("$@")
    RUN_SEQ=$((RUN_SEQ + 1))
    local port=$((PORT_BASE + RUN_SEQ))
    local addr_a=$ADDR_A addr_b=$ADDR_B
    if [ "$fam" = v6 ]; then addr_a=$ADDR6_A; addr_b=$ADDR6_B; fi
    local tag
    tag=$(printf '%02d-%s' "$RUN_SEQ" "$name")
    local d="$NETNS_TMPDIR/$tag"
    mkdir -p "$d"
    local -a env_b=(env "UROCE_ADDR=$addr_b" "${RUN_ENV[@]}")
    local -a env_a=(env "UROCE_ADDR=$addr_a" "${RUN_ENV[@]}")
    if [ -n "${NETRC_PCAP_DIR:-}" ]; then
        mkdir -p "$NETRC_PCAP_DIR"
        env_b+=("UROCE_PCAP=$NETRC_PCAP_DIR/$tag-server.pcap")
        env_a+=("UROCE_PCAP=$NETRC_PCAP_DIR/$tag-client.pcap")
    fi
    # the TCP side channel always uses IPv4: the programs' servers bind the
    # first getaddrinfo() result, which need not be the IPv6 wildcard; the
    # RoCE traffic uses the GID (UROCE_ADDR) whatever the TCP family is.
    local -a scmd=("${argv[@]}" -p "$port")
    local -a ccmd=("${argv[@]}" -p "$port" "$ADDR_B")
    if [ "$LINGER" = 1 ]; then
        # netrc_linger.so must precede liburoce.so, which `uroce run` puts
        # first: add it from inside the launcher
        local -a pre=(sh -c 'LD_PRELOAD="$0${LD_PRELOAD:+:$LD_PRELOAD}" exec "$@"' "$LINGER_LIB")
        scmd=("${pre[@]}" "${scmd[@]}")
        ccmd=("${pre[@]}" "${ccmd[@]}")
    fi
    {
        echo "# server (netns $NS_B):"
        echo "ip netns exec $NS_B ${env_b[*]} $UROCE run -- ${scmd[*]@Q}"
        echo "# client (netns $NS_A):"
        echo "ip netns exec $NS_A ${env_a[*]} $UROCE run -- ${ccmd[*]@Q}"
    } >"$d/repro"

    local t0 spid cpid="" swatch cwatch="" srv_rc=125 cli_rc=125 hung=0 p
    t0=$(now)
    ip netns exec "$NS_B" "${env_b[@]}" "$UROCE" run -- "${scmd[@]}" >"$d/server.log" 2>&1 </dev/null &
    spid=$!
    # the watchers run real-time when they may: two spinning uroce processes
    # on two CPUs can starve an ordinary one past a short run's whole life
    ( chrt -f -p 2 $BASHPID >/dev/null 2>&1; _watch_shm "$spid" "$KEEP_DIR/$tag-server" ) &
    swatch=$!
    if ns_wait_listen "$NS_B" "$port" "$spid"; then
        ip netns exec "$NS_A" "${env_a[@]}" "$UROCE" run -- "${ccmd[@]}" >"$d/client.log" 2>&1 </dev/null &
        cpid=$!
        ( chrt -f -p 2 $BASHPID >/dev/null 2>&1; _watch_shm "$cpid" "$KEEP_DIR/$tag-client" ) &
        cwatch=$!
    else
        echo "server did not listen on TCP $port" >>"$d/client.log"
    fi

    # Wait for both within the bound.  Once one side has failed, the other
    # gets PEER_GRACE seconds (enough for its own retry timer to fire):
    # ibv_rc_pingpong waiting for a receive from a dead peer blocks forever.
    local deadline=$((t0 + NETRC_BOUND * 1000000)) peer_failed=0 t
    local s_done=0 c_done=0
    [ -n "$cpid" ] || c_done=1
    while :; do
        if [ $s_done = 0 ] && ! kill -0 "$spid" 2>/dev/null; then
            wait "$spid"; srv_rc=$?; s_done=1
            [ "$srv_rc" = 0 ] || peer_failed=1
        fi
        if [ $c_done = 0 ] && ! kill -0 "$cpid" 2>/dev/null; then
            wait "$cpid"; cli_rc=$?; c_done=1
            [ "$cli_rc" = 0 ] || peer_failed=1
        fi
        [ $s_done = 1 ] && [ $c_done = 1 ] && break
        t=$(now)
        if [ $peer_failed = 1 ] && [ $deadline -gt $((t + PEER_GRACE * 1000000)) ]; then
            deadline=$((t + PEER_GRACE * 1000000))
        fi
        if [ "$t" -ge $deadline ]; then
            [ $peer_failed = 1 ] && hung=2 || hung=1
            {
                if [ $hung = 1 ]; then
                    echo "HANG: still running after ${NETRC_BOUND}s; live counters:"
                else
                    echo "peer failed; the survivor still runs ${PEER_GRACE}s later; its live counters:"
                fi
                for p in $spid $cpid; do
                    kill -0 "$p" 2>/dev/null && "$UROCE" stat -a "$p"
                done
            } >"$d/hang.txt" 2>&1
            for p in $spid $cpid; do kill -TERM "$p" 2>/dev/null; done
            sleep 1
            for p in $spid $cpid; do kill -KILL "$p" 2>/dev/null; done
            [ $s_done = 1 ] || { wait "$spid"; srv_rc=$?; }
            [ $c_done = 1 ] || { wait "$cpid"; cli_rc=$?; }
            break
        fi
        sleep 0.05
    done
    RUN_SECS=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", (b - a) / 1e6 }')
    kill "$swatch" $cwatch 2>/dev/null
    wait "$swatch" $cwatch 2>/dev/null

    local got_s=1 got_c=1
    load_counters "$KEEP_DIR/$tag-server" CS || got_s=0
    load_counters "$KEEP_DIR/$tag-client" CC || got_c=0
    local k
    for k in "${!CS[@]}"; do TOT[$k]=$(( ${TOT[$k]:-0} + CS[$k] )); done
    for k in "${!CC[@]}"; do TOT[$k]=$(( ${TOT[$k]:-0} + CC[$k] )); done
    {
        echo "# server counters"; for k in "${!CS[@]}"; do echo "$k ${CS[$k]}"; done | sort
        echo "# client counters"; for k in "${!CC[@]}"; do echo "$k ${CC[$k]}"; done | sort
    } >"$d/counters"

    RUN_OK=1
    echo "run $tag ($fam): ${RUN_SECS}s server=$srv_rc client=$cli_rc"
    echo "    server:$(fmt_counters CS)"
    echo "    client:$(fmt_counters CC)"
    [ $got_s = 1 ] || echo "    (server counters not captured)"
    [ $got_c = 1 ] || echo "    (client counters not captured)"
    CHECKS=$((CHECKS + 1))
    if [ $hung = 1 ]; then
        fail "$tag: HANG (bound ${NETRC_BOUND}s)"
        RUN_OK=0
    elif [ $hung = 2 ]; then
        fail "$tag: exit status server=$srv_rc client=$cli_rc (the survivor was killed ${PEER_GRACE}s after its peer failed)"
        RUN_OK=0
    elif [ "$srv_rc" != 0 ] || [ "$cli_rc" != 0 ]; then
        fail "$tag: exit status server=$srv_rc client=$cli_rc"
        RUN_OK=0
    fi
    # ibv_rc_pingpong -c only *prints* "invalid data in page N"; perftest and
    # rc_integrity print completion errors
    if grep -qE 'invalid data in page|Failed status|Failed to|Completion with error|FAIL' \
        "$d/server.log" "$d/client.log" 2>/dev/null; then
        CHECKS=$((CHECKS + 1))
        fail "$tag: error reported in the output"
        RUN_OK=0
    fi
    # ibv_rc_pingpong prints the GIDs: make sure the family is the intended one
    if grep -q 'local address:.*GID' "$d/server.log" 2>/dev/null &&
        ! grep -q "local address:.*GID \\(::ffff:\\)\\?$addr_b\$" "$d/server.log"; then
        CHECKS=$((CHECKS + 1))
        fail "$tag: server GID is not $addr_b"
        RUN_OK=0
    fi
    if [ $RUN_OK = 0 ] || [ "${NETRC_VERBOSE:-0}" = 1 ]; then
        show_file repro "$d/repro"
        show_file hang "$d/hang.txt"
        show_file server "$d/server.log"
        show_file client "$d/client.log"
    fi
    if [ -n "${NETRC_LOG_DIR:-}" ]; then
        mkdir -p "$NETRC_LOG_DIR" && cp -r "$d" "$NETRC_LOG_DIR/$CASE-$$-$tag"
    fi
    SUMMARY+=("$tag ${RUN_SECS}s $([ $RUN_OK = 1 ] && echo ok || echo FAIL)")
    return 0
}

# run_check NAME FAMILY CHECKER -- ARGV...: run_pair, then CHECKER NAME.
# Runs whose NAME does not match the regex NETRC_ONLY are skipped.
run_check() {
    local name=$1 fam=$2 checker=$3
    shift 4
    if [ -n "${NETRC_ONLY:-}" ] && ! [[ "$name" =~ $NETRC_ONLY ]]; then
        return 1
    fi
    run_pair "$name" "$fam" -- "$@"
    $checker "$name"
    return 0
}

# ------------------------------------------------------------------ cases --

# pingpong runs shared by clean/loss/dup/delay_reorder; $1 = per-run checker
# pingpong_set CHECKER [DEFAULT_ENV...]: DEFAULT_ENV is extra environment
# for the default-size runs only
pingpong_set() {
    local checker=$1 fam
    shift
    for fam in v4 v6; do
        RUN_ENV=("$@")
        run_check "pp_${fam}_default" $fam $checker -- ibv_rc_pingpong -g 0 -c
        RUN_ENV=()
        run_check "pp_${fam}_64k" $fam $checker -- ibv_rc_pingpong -g 0 -c -s 65536 -n 200
    done
}

# uroce sends a burst of a QP's packets as one UDP GSO datagram (up to 64
# packets), and the veth pair passes such a datagram through whole: an nft
# drop at the receiver's ingress would drop the whole burst.  With UDP
# segmentation offload off on the veths the kernel segments before the wire,
# so loss hits single RoCE packets as on a real network.  (Duplication and
# uroce-netem's delay/reorder act before segmentation: they still take a
# burst as a unit.)
veth_segment() {
    command -v ethtool >/dev/null 2>&1 || { log "ethtool missing: loss drops whole GSO bursts"; return 0; }
    ip netns exec "$NS_A" ethtool -K "$VETH_A" tx-udp-segmentation off >/dev/null 2>&1 &&
        ip netns exec "$NS_B" ethtool -K "$VETH_B" tx-udp-segmentation off >/dev/null 2>&1 ||
        log "ethtool -K tx-udp-segmentation off failed: loss drops whole GSO bursts"
    return 0
}

check_clean() {
    # no impairment: a retransmit here means a spurious timeout or probe
    # (a loaded machine delays packets by ms); worth a look but not a
    # failure.  A probe resends one packet, which the peer may count as a
    # duplicate: more duplicates than probes would be a bug.
    local n
    n=$(( $(c retransmits) + $(c timeouts) + $(c seq_naks_tx) ))
    [ "$n" = 0 ] || warn "$1: retransmits/timeouts/NAKs on a clean link ($n; rto_probes $(c rto_probes))"
    CHECKS=$((CHECKS + 1))
    if [ "$(c duplicates)" -gt "$(( $(c rto_probes) + $(c timeouts) ))" ] || [ "$(c icrc_errors)" != 0 ]; then
        fail "$1: duplicates=$(c duplicates) (rto_probes $(c rto_probes)) icrc_errors=$(c icrc_errors) on a clean link"
    fi
}

check_loss() {
    check "$1: retransmits" "$(c retransmits)" -gt 0
    check "$1: timeouts + probes + seq NAKs received" $(( $(c timeouts) + $(c rto_probes) + $(c seq_naks_rx) )) -gt 0
}

check_dup() {
    check "$1: duplicate requests answered" "$(c duplicates)" -gt 0
}

check_reorder() {
    check "$1: out_of_sequence + seq NAKs" $(( $(c out_of_sequence) + $(c seq_naks_tx) )) -gt 0
}

check_none() { :; }

check_all() {
    has_impair loss && check "$1: retransmits (loss)" "$(c retransmits)" -gt 0
    has_impair dup && check "$1: duplicates + dup_responses (dup)" $(( $(c duplicates) + $(c dup_responses) )) -gt 0
    return 0
}

impair_loss_both() {
    impair_loss "$NS_A" "$VETH_A" "$LOSS_PCT"
    impair_loss "$NS_B" "$VETH_B" "$LOSS_PCT"
}
impair_dup_both() {
    impair_dup "$NS_A" "$VETH_A" "$DUP_PCT"
    impair_dup "$NS_B" "$VETH_B" "$DUP_PCT"
}
impair_delay_both() {
    impair_delay "$NS_A" "$DELAY_US" "$JITTER_US" "$REORDER_PCT"
    impair_delay "$NS_B" "$DELAY_US" "$JITTER_US" "$REORDER_PCT"
}

# all/integrity: every impairment, or those named in NETRC_IMPAIR (for
# bisecting a failure: NETRC_IMPAIR="loss", "dup delay", ...)
IMPAIR=${NETRC_IMPAIR:-loss dup delay}
impair_all() {
    local i
    for i in $IMPAIR; do
        case $i in
        loss) impair_loss_both ;;
        dup) impair_dup_both ;;
        delay) impair_delay_both ;;
        *) log "NETRC_IMPAIR: unknown impairment '$i'"; exit 2 ;;
        esac
    done
}
has_impair() { [[ " $IMPAIR " == *" $1 "* ]]; }

# network-level proof, read before the impairments are removed
check_nft_loss() {
    check "nft: packets dropped entering $NS_A" "$(nft_counter "$NS_A" "loss_$VETH_A")" -gt 0
    check "nft: packets dropped entering $NS_B" "$(nft_counter "$NS_B" "loss_$VETH_B")" -gt 0
}
check_nft_dup() {
    check "nft: packets duplicated leaving $NS_A" "$(nft_counter "$NS_A" "dup_$VETH_A")" -gt 0
    check "nft: packets duplicated leaving $NS_B" "$(nft_counter "$NS_B" "dup_$VETH_B")" -gt 0
}
check_netem() {
    local ns f seen reordered
    for ns in "$NS_A" "$NS_B"; do
        impair_delay_stop "$ns" 2>/dev/null || fail "uroce-netem in $ns died or failed"
        f=$NETEM_COUNTERS
        echo "    netem $ns: ${f#*exit } bypassed=$NETEM_BYPASSED"
        seen=$(printf '%s\n' "$f" | tr ' ' '\n' | awk -F= '$1 == "delayed" { print $2 }')
        reordered=$(printf '%s\n' "$f" | tr ' ' '\n' | awk -F= '$1 == "reordered" { print $2 }')
        check "uroce-netem $ns: packets delayed" "${seen:-0}" -gt 0
        check "uroce-netem $ns: packets reordered" "${reordered:-0}" -gt 0
    done
}

show_totals() {
    local k out=""
    for k in "${SHOW_COUNTERS[@]}"; do out+=" $k=${TOT[$k]:-0}"; done
    echo "totals (both sides, all runs):$out"
}

# ------------------------------------------------------------------- main --

# the linger shim (only the loss case uses it)
if [ "$CASE" = loss ]; then
    LINGER_LIB=${NETRC_LINGER_LIB:-}
    for f in "$ROOT/build/lib/libnetrc_linger.so" "$ROOT/build/tests/netrc/libnetrc_linger.so"; do
        [ -z "$LINGER_LIB" ] && [ -f "$f" ] && LINGER_LIB=$f
    done
fi

netns_setup
if [ "$CASE" = loss ] && [ -z "$LINGER_LIB" ]; then
    # not built through CMake (a manual run): build it here
    LINGER_LIB=$NETNS_TMPDIR/libnetrc_linger.so
    ${CC:-cc} -O2 -shared -fPIC -o "$LINGER_LIB" "$HERE/netrc_linger.c" -ldl ||
        { log "cannot build $HERE/netrc_linger.c (set NETRC_LINGER_LIB)"; exit 1; }
fi
# counter pages kept by runs that were killed (ctest timeout)
for d in /dev/shm/netrc.*; do
    [ -d "$d" ] && ! kill -0 "${d##*.}" 2>/dev/null && rm -rf -- "$d"
done
KEEP_DIR=/dev/shm/netrc.$$
mkdir -p "$KEEP_DIR" || { log "cannot create $KEEP_DIR"; exit 1; }
[ "$CASE" = clean ] || veth_segment

T0=$(now)
echo "netrc $CASE: $NS_A ($ADDR_A, $ADDR6_A) <-> $NS_B ($ADDR_B, $ADDR6_B), bound ${NETRC_BOUND}s per pair"

for ((rep = 1; rep <= NETRC_REPEAT; rep++)); do
    [ "$NETRC_REPEAT" -gt 1 ] && echo "=== repetition $rep/$NETRC_REPEAT"
    case "$CASE" in
    clean)
        pingpong_set check_clean
        # path MTU 4096: needs a link MTU > 4096 + headers
        ip -n "$NS_A" link set dev "$VETH_A" mtu 9000
        ip -n "$NS_B" link set dev "$VETH_B" mtu 9000
        RUN_ENV=(UROCE_MTU=4096)
        if run_check pp_v4_mtu4096 v4 check_clean -- ibv_rc_pingpong -g 0 -c -m 4096 -s 65536 -n 200; then
            # proof that 4096-byte packets were used: mean payload per packet
            tx_p=${CC[tx_packets]:-0}
            tx_b=${CC[tx_bytes]:-0}
            check "pp_v4_mtu4096: client mean UDP payload per packet" $(( tx_p ? tx_b / tx_p : 0 )) -gt 3000
        fi
        RUN_ENV=()
        ip -n "$NS_A" link set dev "$VETH_A" mtu 1500
        ip -n "$NS_B" link set dev "$VETH_B" mtu 1500
        ;;
    loss)
        [ $rep = 1 ] && impair_loss_both
        # ibv_rc_pingpong's lost-last-ACK race: see netrc_linger.c
        [ "${NETRC_LINGER_MS:-1000}" != 0 ] && LINGER=1
        pingpong_set check_loss
        LINGER=0
        ;;
    dup)
        [ $rep = 1 ] && impair_dup_both
        pingpong_set check_dup
        ;;
    delay_reorder)
        [ $rep = 1 ] && impair_delay_both
        # a default-size message (4 packets) leaves as one GSO datagram,
        # which uroce-netem holds and releases as a unit, and ibv_rc_pingpong
        # has one message in flight: nothing could be reordered.  Those runs
        # send packet by packet (UROCE_NO_GSO=1); the 64 KiB runs keep GSO
        # (several datagrams in flight are reordered among themselves).
        pingpong_set check_reorder UROCE_NO_GSO=1
        ;;
    all)
        [ $rep = 1 ] && impair_all
        run_check write_bw v4 check_all -- ib_write_bw -x 0 -n 200 -s 65536
        run_check read_bw v4 check_all -- ib_read_bw -x 0 -n 200 -s 65536
        run_check send_bw v4 check_all -- ib_send_bw -x 0 -n 200
        run_check atomic_bw v4 check_all -- ib_atomic_bw -x 0 -n 200
        ;;
    integrity)
        [ $rep = 1 ] && impair_all
        seed=${NETRC_SEED:-$(( $(date +%s) % 100000 + rep ))}
        run_check "rc_integrity_s$seed" v4 check_all -- "$RC_INTEGRITY" -s "$seed" -n 40 -t $((NETRC_BOUND - 10))
        ;;
    esac
done

show_totals
case "$CASE" in
loss) check_nft_loss ;;
dup) check_nft_dup ;;
delay_reorder) check_netem ;;
all | integrity)
    if has_impair loss; then
        check_nft_loss
        check "totals: timeouts + probes + seq NAKs received" $(( ${TOT[timeouts]:-0} + ${TOT[rto_probes]:-0} + ${TOT[seq_naks_rx]:-0} )) -gt 0
    fi
    if has_impair dup; then
        check_nft_dup
        check "totals: duplicate requests answered" "${TOT[duplicates]:-0}" -gt 0
    fi
    has_impair delay && check_netem
    ;;
esac

T1=$(now)
echo "summary: $(printf '%s; ' "${SUMMARY[@]}")"
echo "netrc $CASE: $CHECKS checks, $FAILS failed, $WARNINGS warnings, $(( (T1 - T0) / 1000000 ))s"
[ "$FAILS" = 0 ] || exit 1
exit 0
