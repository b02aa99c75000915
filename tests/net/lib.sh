# shellcheck shell=bash
#
# tests/net/lib.sh - network namespace + impairment helpers for uroce tests.
#
# Source this from a bash test script:
#
#     . "$(dirname "$0")/lib.sh"
#     netns_setup                       # exits 77 (ctest SKIP) if unusable
#     impair_loss  "$NS_B" "$VETH_B" 5  # drop 5% of UDP/4791 received by NS_B
#     impair_dup   "$NS_A" "$VETH_A" 5  # duplicate 5% of UDP/4791 sent by NS_A
#     impair_delay "$NS_A" 2000 500 10  # delay/jitter/reorder UDP/4791 sent by NS_A
#     ns_exec "$NS_B" ./server & ...
#
# netns_setup installs "trap netns_teardown EXIT" (plus INT/TERM/HUP traps
# that exit, so EXIT runs) unless the caller already has an EXIT trap; in
# that case the caller must call netns_teardown from its own trap.
#
# Exported by netns_setup:
#   NS_A NS_B          namespace names (unique per process and call)
#   VETH_A VETH_B      veth ends: VETH_A lives in NS_A, VETH_B in NS_B
#   ADDR_A ADDR_B      198.18.X.1 / 198.18.X.2   (/24)
#   ADDR6_A ADDR6_B    2001:db8:X::1 / 2001:db8:X::2   (/64, nodad)
#   MAC_A MAC_B        veth MAC addresses (neighbours are pre-populated as
#                      permanent entries, so no ARP/ND loss at start-up)
#   NETNS_TMPDIR       scratch directory removed by netns_teardown
#
# Impairments only match UDP destination port $UROCE_IMPAIR_PORT (default
# 4791, RoCEv2), IPv4 and IPv6.  Other traffic is never touched.
#   impair_loss  NS DEV PCT   nftables netdev *ingress* on DEV: packets that
#                             NS receives on DEV are dropped with prob PCT%.
#   impair_dup   NS DEV PCT   nftables netdev *egress* on DEV: packets that NS
#                             sends on DEV get exactly one extra copy with
#                             prob PCT% (see the mark note at impair_dup).
#   impair_delay NS USEC JITTER_USEC REORDER_PCT [uroce-netem args...]
#                             iptables mangle POSTROUTING -> NFQUEUE (with
#                             --queue-bypass) + uroce-netem running inside NS:
#                             packets NS *sends* are delayed.
#   PCT may be fractional ("0.5"); PCT 0 removes that impairment.
#   impair_delay_stop NS      stop uroce-netem, print its counters; sets
#                             NETEM_COUNTERS to its final "exit ..." line and
#                             NETEM_BYPASSED to the packets that skipped it.
#   impair_clear NS           remove every impairment in NS.
#   impair_show NS            dump nft/iptables state of NS to stderr.
#
# Also: ns_exec NS cmd...      run cmd inside NS (ip netns exec)
#       ns_exec_bg NS cmd...   same, in the background; pid in NS_BG_PID
#       netns_teardown         kill everything running in our namespaces,
#                              delete them and NETNS_TMPDIR (idempotent)
# Namespaces of runs that died without teardown (SIGKILL, ctest timeout) are
# removed by the next netns_setup.  X is derived from $$ so parallel runs
# use different subnets; they could not collide anyway (separate netns).
#
# Environment:
#   UROCE_NETEM        uroce-netem binary (default <repo>/build/bin/uroce-netem,
#                      then ./build/bin/uroce-netem relative to $PWD)
#   UROCE_NETEM_QUEUE  NFQUEUE number (default 4791; queues are per netns)
#   UROCE_IMPAIR_PORT  UDP destination port to impair (default 4791)
#   UROCE_DUP_MARK     skb mark bit used to stop dup recursion (0x40000000)
#   NETLIB_VERBOSE=1   echo every command
#   NETLIB_KEEP_TMP=1  keep NETNS_TMPDIR (uroce-netem logs, probe results)

_NETLIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_NETLIB_ROOT=$(cd "$_NETLIB_DIR/../.." && pwd)

: "${UROCE_IMPAIR_PORT:=4791}"
: "${UROCE_NETEM_QUEUE:=4791}"
: "${UROCE_DUP_MARK:=0x40000000}"

_NETNS_SEQ=${_NETNS_SEQ:-0}
_NETNS_LIST=()                   # namespaces we created and must delete
_NETNS_BG=()                     # pids started by ns_exec_bg
declare -gA _NETEM_PID=()         # NS -> pid of uroce-netem
declare -gA _NETEM_LOG=()         # NS -> log file of uroce-netem
_NETNS_TRAPPED=0
NETEM_COUNTERS=""
NETEM_BYPASSED=0

# ----------------------------------------------------------------- logging --

net_log()  { echo "[net] $*" >&2; }
net_die()  { echo "[net] FATAL: $*" >&2; exit 1; }
net_skip() { echo "[net] SKIP: $*" >&2; exit 77; }

# Run a command; on failure die with the command line and its output.
_net_run() {
    local out rc
    [ "${NETLIB_VERBOSE:-0}" = 1 ] && echo "[net] + $*" >&2
    out=$("$@" 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        net_die "command failed (rc=$rc): $*
${out}"
    fi
    [ -n "$out" ] && [ "${NETLIB_VERBOSE:-0}" = 1 ] && echo "$out" >&2
    return 0
}

# Like _net_run but feeds stdin (used for nft -f -).
_net_run_stdin() {
    local input=$1; shift
    local out rc
    [ "${NETLIB_VERBOSE:-0}" = 1 ] && printf '[net] + %s <<EOF\n%s\nEOF\n' "$*" "$input" >&2
    out=$(printf '%s\n' "$input" | "$@" 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        net_die "command failed (rc=$rc): $*
--- input ---
${input}
--- output ---
${out}"
    fi
    return 0
}

_net_need_ns() {
    [ -n "${1:-}" ] || net_die "${FUNCNAME[1]}: namespace argument missing"
    ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF -- "$1" \
        || net_die "${FUNCNAME[1]}: namespace '$1' does not exist"
}

_net_need_cmd() {
    command -v "$1" >/dev/null 2>&1 || net_die "required command '$1' not found in PATH ($2)"
}

# PCT (0..100, may be fractional) -> parts per million, or die.
_net_pct_ppm() {
    local pct=$1 what=$2
    [[ "$pct" =~ ^[0-9]+([.][0-9]+)?$ ]] || net_die "$what: bad percentage '$pct'"
    awk -v p="$pct" 'BEGIN { if (p > 100) exit 1; printf "%d\n", p * 10000 + 0.5 }' \
        || net_die "$what: percentage '$pct' > 100"
}

_net_uint() {
    [[ "$1" =~ ^[0-9]+$ ]] || net_die "$2: expected a non-negative integer, got '$1'"
}

# nft identifiers: keep it simple and safe
_net_ident() { printf '%s' "$1" | tr -c 'A-Za-z0-9_' '_'; }

# ---------------------------------------------------------------- netns ----

ns_exec() {
    local ns=${1:?ns_exec: namespace missing}; shift
    [ $# -gt 0 ] || net_die "ns_exec: no command given"
    ip netns exec "$ns" "$@"
}

# Start "cmd..." inside NS in the background; pid in NS_BG_PID.  Anything
# still running inside our namespaces is killed by netns_teardown.
ns_exec_bg() {
    local ns=${1:?ns_exec_bg: namespace missing}; shift
    ip netns exec "$ns" "$@" &
    NS_BG_PID=$!
    _NETNS_BG+=("$NS_BG_PID")
}

# ns_wait_listen NS PORT [PID]: wait (up to 20 s) until a TCP listener on
# PORT exists in NS; 1 if it never does or PID (the server) exits first.
# Programs that swap addresses over TCP first (ibv_*_pingpong, perftest).
ns_wait_listen() {
    local ns=$1 port=$2 pid=${3:-} i
    for ((i = 0; i < 400; i++)); do
        ip netns exec "$ns" ss -ltnH "sport = :$port" 2>/dev/null | grep -q . && return 0
        [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
        sleep 0.05
    done
    return 1
}

netns_require() {
    [ "$(id -u)" = 0 ] || net_skip "must run as root (network namespaces, nftables)"
    command -v ip >/dev/null 2>&1 || net_skip "iproute2 'ip' not found"
    ip netns list >/dev/null 2>&1 || net_skip "'ip netns' unavailable"
    local probe="uroce-probe-$$"
    if ! ip netns add "$probe" >/dev/null 2>&1; then
        net_skip "cannot create network namespaces (ip netns add failed)"
    fi
    ip netns del "$probe" >/dev/null 2>&1 || true
    return 0
}

_net_kill_ns_pids() {
    local ns=$1 pids
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [ -n "${pids// /}" ] || return 0
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 1 30); do
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        [ -n "${pids// /}" ] || return 0
        sleep 0.1
    done
    net_log "processes still alive in $ns after SIGTERM, sending SIGKILL: $pids"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
    return 0
}

# Remove namespaces left behind by runs that were SIGKILLed (e.g. ctest
# timeout): uroce-a-<pid>-<n> / uroce-b-<pid>-<n> whose <pid> is gone.
_net_sweep_stale() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^uroce-[ab]-[0-9]+-[0-9]+$'); do
        pid=${ns#uroce-?-}; pid=${pid%-*}
        if ! kill -0 "$pid" 2>/dev/null; then
            net_log "removing stale namespace $ns (pid $pid is gone)"
            _net_kill_ns_pids "$ns"
            ip netns del "$ns" 2>/dev/null || true
        fi
    done
    local d
    for d in "${TMPDIR:-/tmp}"/uroce-net.*.??????; do
        [ -d "$d" ] || continue
        pid=${d##*/uroce-net.}; pid=${pid%%.*}
        [[ "$pid" =~ ^[0-9]+$ ]] || continue
        kill -0 "$pid" 2>/dev/null || rm -rf -- "$d"
    done
    return 0
}

_net_wait_carrier() {
    local ns=$1 dev=$2
    for _ in $(seq 1 50); do
        if ip -n "$ns" link show dev "$dev" 2>/dev/null | grep -q 'LOWER_UP'; then
            return 0
        fi
        sleep 0.05
    done
    net_die "link $dev in $ns did not come up: $(ip -n "$ns" link show dev "$dev" 2>&1)"
}

netns_setup() {
    netns_require
    _net_sweep_stale

    _NETNS_SEQ=$((_NETNS_SEQ + 1))
    local x=$(( ($$ + _NETNS_SEQ - 1) % 254 + 1 ))

    NS_A="uroce-a-$$-${_NETNS_SEQ}"
    NS_B="uroce-b-$$-${_NETNS_SEQ}"
    # interfaces are created directly inside the namespaces, so these names
    # never meet the host's; the pid only makes debugging easier.  (<=15 chars)
    VETH_A="ura$$"
    VETH_B="urb$$"
    ADDR_A="198.18.$x.1"
    ADDR_B="198.18.$x.2"
    ADDR6_A="2001:db8:$x::1"
    ADDR6_B="2001:db8:$x::2"
    export NS_A NS_B VETH_A VETH_B ADDR_A ADDR_B ADDR6_A ADDR6_B

    if [ "$_NETNS_TRAPPED" = 0 ]; then
        _NETNS_TRAPPED=1
        if [ -z "$(trap -p EXIT)" ]; then
            trap netns_teardown EXIT
        else
            net_log "caller has its own EXIT trap: it must call netns_teardown"
        fi
        [ -z "$(trap -p INT)" ]  && trap 'exit 130' INT
        [ -z "$(trap -p TERM)" ] && trap 'exit 143' TERM
        [ -z "$(trap -p HUP)" ]  && trap 'exit 129' HUP
    fi

    if [ -z "${NETNS_TMPDIR:-}" ] || [ ! -d "$NETNS_TMPDIR" ]; then
        NETNS_TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/uroce-net.$$.XXXXXX") \
            || net_die "mktemp -d failed"
        export NETNS_TMPDIR
    fi

    _NETNS_LIST+=("$NS_A")
    _net_run ip netns add "$NS_A"
    _NETNS_LIST+=("$NS_B")
    _net_run ip netns add "$NS_B"

    _net_run ip -n "$NS_A" link add "$VETH_A" type veth peer name "$VETH_B" netns "$NS_B"
    _net_run ip -n "$NS_A" link set lo up
    _net_run ip -n "$NS_B" link set lo up
    _net_run ip -n "$NS_A" addr add "$ADDR_A/24" dev "$VETH_A"
    _net_run ip -n "$NS_B" addr add "$ADDR_B/24" dev "$VETH_B"
    _net_run ip -n "$NS_A" -6 addr add "$ADDR6_A/64" dev "$VETH_A" nodad
    _net_run ip -n "$NS_B" -6 addr add "$ADDR6_B/64" dev "$VETH_B" nodad
    _net_run ip -n "$NS_A" link set "$VETH_A" up
    _net_run ip -n "$NS_B" link set "$VETH_B" up
    _net_wait_carrier "$NS_A" "$VETH_A"
    _net_wait_carrier "$NS_B" "$VETH_B"

    MAC_A=$(ip -n "$NS_A" -br link show dev "$VETH_A" | awk '{print $3}')
    MAC_B=$(ip -n "$NS_B" -br link show dev "$VETH_B" | awk '{print $3}')
    if [ -z "$MAC_A" ] || [ -z "$MAC_B" ]; then
        net_die "cannot read veth MAC addresses"
    fi
    export MAC_A MAC_B
    # Permanent neighbours: the first packets of a burst are never lost to an
    # unresolved ARP/ND queue, so loss measurements are not polluted.
    _net_run ip -n "$NS_A" neigh replace "$ADDR_B" lladdr "$MAC_B" dev "$VETH_A" nud permanent
    _net_run ip -n "$NS_B" neigh replace "$ADDR_A" lladdr "$MAC_A" dev "$VETH_B" nud permanent
    _net_run ip -n "$NS_A" -6 neigh replace "$ADDR6_B" lladdr "$MAC_B" dev "$VETH_A" nud permanent
    _net_run ip -n "$NS_B" -6 neigh replace "$ADDR6_A" lladdr "$MAC_A" dev "$VETH_B" nud permanent

    net_log "netns ready: $NS_A($VETH_A $ADDR_A $ADDR6_A) <-> $NS_B($VETH_B $ADDR_B $ADDR6_B)"
    return 0
}

# Trap-safe and idempotent: may be called any number of times, from a trap,
# after a partial setup.  Preserves $? for EXIT traps.
netns_teardown() {
    local rc=$? ns
    for ns in "${!_NETEM_PID[@]}"; do
        impair_delay_stop "$ns" || true
    done
    for ns in "${_NETNS_LIST[@]}"; do
        if ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF -- "$ns"; then
            _net_kill_ns_pids "$ns"
            ip netns del "$ns" 2>/dev/null \
                || net_log "warning: could not delete namespace $ns"
        fi
    done
    _NETNS_LIST=()
    # reap the background children we started (all were inside our
    # namespaces, so they are gone by now)
    local p
    for p in "${_NETNS_BG[@]}"; do wait "$p" 2>/dev/null || true; done
    _NETNS_BG=()
    if [ -n "${NETNS_TMPDIR:-}" ] && [ -d "$NETNS_TMPDIR" ] && [ "${NETLIB_KEEP_TMP:-0}" != 1 ]; then
        rm -rf -- "$NETNS_TMPDIR"
    fi
    NETNS_TMPDIR=""
    return $rc
}

# --------------------------------------------------------- nft impairments --

_NFT_TABLE=uroce_impair

# _net_nft_chain NS HOOK DEV CHAIN RULES... : (re)create a netdev base chain
_net_nft_chain() {
    local ns=$1 hook=$2 dev=$3 chain=$4; shift 4
    local rules="" r
    for r in "$@"; do rules+="    add rule netdev $_NFT_TABLE $chain $r"$'\n'; done
    # "add" is idempotent for tables/chains; flush then refill the chain.
    _net_run_stdin "add table netdev $_NFT_TABLE
add chain netdev $_NFT_TABLE $chain { type filter hook $hook device \"$dev\" priority -100; policy accept; }
flush chain netdev $_NFT_TABLE $chain
$rules" ip netns exec "$ns" nft -f -
}

_net_nft_del_chain() {
    local ns=$1 chain=$2
    if ip netns exec "$ns" nft list chain netdev "$_NFT_TABLE" "$chain" >/dev/null 2>&1; then
        _net_run ip netns exec "$ns" nft delete chain netdev "$_NFT_TABLE" "$chain"
    fi
}

# impair_loss NS DEV PCT: drop PCT% of UDP/$UROCE_IMPAIR_PORT packets that
# arrive on DEV (netdev ingress hook, i.e. packets NS receives).
impair_loss() {
    local ns=${1:-} dev=${2:-} pct=${3:-}
    [ $# -eq 3 ] || net_die "usage: impair_loss NS DEV PCT"
    _net_need_ns "$ns"
    _net_need_cmd nft "install nftables"
    ip -n "$ns" link show dev "$dev" >/dev/null 2>&1 || net_die "impair_loss: no device '$dev' in $ns"
    local ppm; ppm=$(_net_pct_ppm "$pct" impair_loss) || exit 1
    local chain; chain="loss_$(_net_ident "$dev")"
    if [ "$ppm" -eq 0 ]; then
        _net_nft_del_chain "$ns" "$chain"
        return 0
    fi
    _net_nft_chain "$ns" ingress "$dev" "$chain" \
        "udp dport $UROCE_IMPAIR_PORT numgen random mod 1000000 < $ppm counter drop"
    net_log "impair_loss: $ns/$dev ingress udp dport $UROCE_IMPAIR_PORT drop ${pct}%"
}

# impair_dup NS DEV PCT: duplicate PCT% of UDP/$UROCE_IMPAIR_PORT packets
# that NS sends on DEV (netdev egress hook, dup to the same device).
#
# The duplicate made by "dup to DEV" is transmitted through DEV's egress hook
# again (checked on 6.18: without protection every packet leaves 4 times,
# the recursion being cut only by nf_dup's NF_RECURSION_LIMIT).  So the copy
# is tagged with the $UROCE_DUP_MARK skb mark bit, the first rule lets a
# tagged packet through (clearing the bit), and the original's bit is cleared
# again right after the dup.  Result: exactly one extra copy.  The mark does
# not cross the veth (netns switch scrubs it); applications using SO_MARK
# must not use that bit.
impair_dup() {
    local ns=${1:-} dev=${2:-} pct=${3:-}
    [ $# -eq 3 ] || net_die "usage: impair_dup NS DEV PCT"
    _net_need_ns "$ns"
    _net_need_cmd nft "install nftables"
    ip -n "$ns" link show dev "$dev" >/dev/null 2>&1 || net_die "impair_dup: no device '$dev' in $ns"
    local ppm; ppm=$(_net_pct_ppm "$pct" impair_dup) || exit 1
    local chain; chain="dup_$(_net_ident "$dev")"
    if [ "$ppm" -eq 0 ]; then
        _net_nft_del_chain "$ns" "$chain"
        return 0
    fi
    local m=$UROCE_DUP_MARK
    local nm; nm=$(printf '0x%08x' $(( ~m & 0xffffffff )))
    local cond="numgen random mod 1000000 < $ppm"
    [ "$ppm" -ge 1000000 ] && cond=""
    _net_nft_chain "$ns" egress "$dev" "$chain" \
        "meta mark & $m == $m meta mark set meta mark & $nm counter accept" \
        "udp dport $UROCE_IMPAIR_PORT $cond meta mark set meta mark | $m dup to \"$dev\" meta mark set meta mark & $nm counter"
    net_log "impair_dup: $ns/$dev egress udp dport $UROCE_IMPAIR_PORT duplicate ${pct}%"
}

# ------------------------------------------------------- delay (NFQUEUE) ---

_net_netem_bin() {
    local b=${UROCE_NETEM:-}
    if [ -z "$b" ]; then
        if [ -x "$_NETLIB_ROOT/build/bin/uroce-netem" ]; then
            b="$_NETLIB_ROOT/build/bin/uroce-netem"
        else
            b="build/bin/uroce-netem"
        fi
    fi
    [ -x "$b" ] || net_die "uroce-netem binary '$b' not found or not executable;
  build it (cmake --build build --target uroce-netem) or set UROCE_NETEM"
    printf '%s\n' "$b"
}

_net_queue_bound() {
    # shellcheck disable=SC2016  # awk program, not shell
    ip netns exec "$1" awk -v q="$2" '$1 == q { f = 1 } END { exit !f }' \
        /proc/net/netfilter/nfnetlink_queue 2>/dev/null
}

_NFQ_CHAIN=UROCE_DELAY

_net_nfq_rules_del() {
    local ns=$1 ipt
    for ipt in iptables ip6tables; do
        ip netns exec "$ns" "$ipt" -w -t mangle -D POSTROUTING -j "$_NFQ_CHAIN" >/dev/null 2>&1 || true
        ip netns exec "$ns" "$ipt" -w -t mangle -F "$_NFQ_CHAIN" >/dev/null 2>&1 || true
        ip netns exec "$ns" "$ipt" -w -t mangle -X "$_NFQ_CHAIN" >/dev/null 2>&1 || true
    done
    return 0
}

# impair_delay NS USEC JITTER_USEC REORDER_PCT [extra uroce-netem args]
# Packets NS sends to UDP/$UROCE_IMPAIR_PORT (v4+v6) are queued to NFQUEUE
# $UROCE_NETEM_QUEUE and held by uroce-netem (running inside NS) for
# USEC + uniform(0..JITTER_USEC) us; REORDER_PCT% are held an extra
# --reorder-gap-us (default 2000) so later packets overtake them.
# The rule uses --queue-bypass: if uroce-netem is not running packets pass
# undelayed instead of being dropped.  Calling it again replaces the setup.
impair_delay() {
    [ $# -ge 4 ] || net_die "usage: impair_delay NS USEC JITTER_USEC REORDER_PCT [uroce-netem args...]"
    local ns=$1 usec=$2 jitter=$3 rpct=$4; shift 4
    _net_need_ns "$ns"
    _net_uint "$usec" "impair_delay USEC"
    _net_uint "$jitter" "impair_delay JITTER_USEC"
    _net_pct_ppm "$rpct" "impair_delay REORDER_PCT" >/dev/null || exit 1
    _net_need_cmd iptables "install iptables"
    _net_need_cmd ip6tables "install iptables"
    local bin; bin=$(_net_netem_bin) || exit 1
    local q=$UROCE_NETEM_QUEUE

    impair_delay_stop "$ns" >/dev/null 2>&1 || true

    if [ -z "${NETNS_TMPDIR:-}" ] || [ ! -d "$NETNS_TMPDIR" ]; then
        NETNS_TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/uroce-net.$$.XXXXXX") || net_die "mktemp failed"
        export NETNS_TMPDIR
    fi
    local log="$NETNS_TMPDIR/netem-$ns.log"
    : >"$log"
    # ip netns exec execs the binary, so $! is uroce-netem's own pid.
    ip netns exec "$ns" "$bin" --queue "$q" --delay-us "$usec" --jitter-us "$jitter" \
        --reorder-pct "$rpct" "$@" 2>"$log" &
    local pid=$!
    _NETEM_PID[$ns]=$pid
    _NETEM_LOG[$ns]=$log

    local ok=0
    for _ in $(seq 1 100); do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid" 2>/dev/null || true
            unset '_NETEM_PID[$ns]'
            net_die "uroce-netem exited during start-up in $ns:
$(cat "$log")"
        fi
        if _net_queue_bound "$ns" "$q"; then ok=1; break; fi
        sleep 0.05
    done
    [ $ok = 1 ] || net_die "uroce-netem did not bind NFQUEUE $q in $ns within 5 s:
$(cat "$log")"

    _net_nfq_rules_del "$ns"
    local ipt
    for ipt in iptables ip6tables; do
        _net_run ip netns exec "$ns" "$ipt" -w -t mangle -N "$_NFQ_CHAIN"
        _net_run ip netns exec "$ns" "$ipt" -w -t mangle -A "$_NFQ_CHAIN" -p udp \
            --dport "$UROCE_IMPAIR_PORT" -j NFQUEUE --queue-num "$q" --queue-bypass
        _net_run ip netns exec "$ns" "$ipt" -w -t mangle -A POSTROUTING -j "$_NFQ_CHAIN"
    done
    net_log "impair_delay: $ns egress udp dport $UROCE_IMPAIR_PORT delay=${usec}us jitter=${jitter}us reorder=${rpct}% (uroce-netem pid $pid, queue $q)"
}

# packets that hit the NFQUEUE rules (v4 + v6) of NS
_net_nfq_rule_pkts() {
    local ns=$1 ipt n total=0
    for ipt in iptables ip6tables; do
        n=$(ip netns exec "$ns" "$ipt" -w -t mangle -L "$_NFQ_CHAIN" -v -x -n 2>/dev/null \
            | awk '$3 == "NFQUEUE" { s += $1 } END { print s + 0 }')
        total=$((total + ${n:-0}))
    done
    echo "$total"
}

# impair_delay_stop NS: remove the NFQUEUE rules, stop uroce-netem (it
# releases every held packet first), print its log; NETEM_COUNTERS gets the
# final counters line and NETEM_BYPASSED the number of packets that matched
# the rule but never reached uroce-netem (kernel fail-open because the queue
# or the netlink socket was full, or uroce-netem was not running: those went
# out undelayed).  Returns 1 if uroce-netem had died or exited non-zero.
impair_delay_stop() {
    local ns=${1:?impair_delay_stop: namespace missing}
    local pid=${_NETEM_PID[$ns]:-} log=${_NETEM_LOG[$ns]:-} rc=0 matched seen
    matched=$(_net_nfq_rule_pkts "$ns")
    _net_nfq_rules_del "$ns"
    [ -n "$pid" ] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        if kill -0 "$pid" 2>/dev/null; then
            net_log "uroce-netem (pid $pid) ignored SIGTERM, killing"
            kill -KILL "$pid" 2>/dev/null || true
            rc=1
        fi
    else
        net_log "uroce-netem (pid $pid) in $ns had already exited"
        rc=1
    fi
    wait "$pid" 2>/dev/null || rc=1
    unset '_NETEM_PID[$ns]'
    if [ -n "$log" ] && [ -f "$log" ]; then
        sed 's/^/[net] /' "$log" >&2
        NETEM_COUNTERS=$(grep ': exit ' "$log" | tail -n1)
    fi
    seen=$(printf '%s\n' "$NETEM_COUNTERS" | tr ' ' '\n' | awk -F= '$1 == "seen" { print $2 }')
    NETEM_BYPASSED=$(( matched - ${seen:-0} ))
    [ "$NETEM_BYPASSED" -lt 0 ] && NETEM_BYPASSED=0
    if [ "$NETEM_BYPASSED" -gt 0 ]; then
        net_log "uroce-netem in $ns: $NETEM_BYPASSED of $matched matched packets bypassed the delay (fail-open: queue/socket full or uroce-netem not running)"
    fi
    return $rc
}

impair_clear() {
    local ns=${1:?impair_clear: namespace missing}
    impair_delay_stop "$ns" || true
    ip netns exec "$ns" nft delete table netdev "$_NFT_TABLE" >/dev/null 2>&1 || true
    return 0
}

impair_show() {
    local ns=${1:?impair_show: namespace missing}
    {
        echo "=== $ns: nft ruleset"
        ip netns exec "$ns" nft list ruleset 2>&1
        echo "=== $ns: nfnetlink_queue"
        ip netns exec "$ns" cat /proc/net/netfilter/nfnetlink_queue 2>&1
    } | sed 's/^/[net] /' >&2
}
