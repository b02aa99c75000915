#!/bin/bash
# The kernel's Soft-RoCE as a live peer (../shared/rxe-vm): one program of
# ibverbs-utils or perftest on rxe0 in the VM, the same unmodified program on
# the host through uroce, in either direction.
#   rxe_peer.sh build WORKDIR
#   rxe_peer.sh run   WORKDIR LAUNCHER NAME rxe-server|rxe-client TOOL [ARGS...]
#   rxe_peer.sh icrc-verdict-selftest WORKDIR
#
# `run` boots the VM once and runs TOOL in it once per step, rxe and uroce
# side by side (RXE_STEPS chooses the steps; default "default mtu1024 loss5"):
#   default   the tools' own MTU choice (pingpongs 1024, perftest the port's
#             active MTU: rxe's 1024 with the VM's 1500-byte eth0, uroce's
#             1024 from the bridge's 1500, util/config_table.h UROCE_MTU)
#   mtu1024   the same with -m 1024 on both sides
#   loss5     as default, with netem dropping RXE_LOSS_PCT (5) percent of the
#             RoCE packets rxe sends (VM eth0 egress: prio band + u32 on UDP
#             dport 4791, as run-pair.sh; the host kernel has no netem, and the
#             VM's has no ingress qdisc), and uroce dropping as many of its own
#             (UROCE_FAULT_DROP_TX, seeded: the same drops every run).  So both
#             sides' requests, ACKs, NAKs and READ/atomic responses are lost,
#             and each side's requester must recover through the other's
#             sequence NAKs, duplicate re-ACKs and its own timers.
#             A pingpong has an end-of-run race no RC peer can hide (the ACK
#             of a side's last SEND lost after its peer has exited;
#             tests/netrc/netrc_linger.c), so in this step both sides of a
#             pingpong run with that shim (RXE_LINGER_LIB), which delays
#             ibv_destroy_qp by RXE_LINGER_MS (250) ms -- in the VM too, from
#             the 9p share (rxe answers for a QP that still exists).  rxe
#             treats retry_cnt 7 as "retry forever" (rxe_comp.c; IBA makes only
#             rnr_retry 7 infinite), so without the shim an rxe client whose
#             last SEND's ACK was lost retransmits until the step's timeout.
# rxe-server: the VM runs the server, the host the client (connecting to
# 198.18.0.2); rxe-client: the host runs the server, the VM the client
# (connecting to 198.18.0.1).  A client whose TCP connect finds no server yet
# is started again; any other failure is final.
#
# A run passes when, for every step, both programs exit 0 (rxe drops a packet
# that fails its checks -- ICRC, header, length -- so a bad packet of uroce's
# shows as a run that does not complete), every RoCEv2 packet of the capture
# on the bridge (uroce's and rxe's) has a correct ICRC (icrc_check.py: at least
# one packet, no mismatch), and uroce's own counters (UROCE_STATS=1, printed
# when the device closes) show no packet dropped for its ICRC, its header or
# its length, and no failed send.
# Needs root (network namespace, qemu); exits 77 (skipped) only when the VM
# harness is absent or the user is not root.
#
# rdma_cm tools (rdmacm-utils rping, ucmatose, udaddy, mckey; perftest with -R):
# the connection is made by IB CM MADs on QP1 (uroce's src/cm on the host,
# the kernel's rdma_cm in the VM), so they take addresses, not a device and a
# GID index, and their words differ per tool (cm_args below): rping -s -a SELF
# / -c -a SERVER; ucmatose and udaddy listen on the wildcard and take
# -s SERVER on the client only; mckey (UD multicast) receives on the server
# side and sends (-s) on the client side, both bound to their own address
# and given the group; perftest keeps -d/-x/-F and its trailing
# server address, -R is in ARGS (on both sides).  A host client waits until
# the VM has started the step's server (STEP-START on its console), and any
# client that is rejected for want of a listener (REJ 8; SIDR status 1) is
# started again, as the TCP tools are when connect() finds no server.
# A perftest -R client on the host runs under RXE_CM_DELAY_LIB when set
# (cm_connect_delay.c: perftest's own data-connection race).
# Besides the checks above a CM case also writes a decode of every CM MAD
# of the capture (cm.txt next to capture.pcap; RXE_KEEP=1 keeps both).
set -uo pipefail
mode=$1; work=$2
here=$(cd "$(dirname "$0")" && pwd)
vm=$(cd "$here/../../.." && pwd)/shared/rxe-vm
[ -x "$vm/run-vm.sh" ] || { echo "skip: no $vm"; exit 77; }

# icrc_verdict PCAP LOG: 0 when the capture has packets and every ICRC is
# right; the per-packet lines go to LOG, mismatches and the summary to stdout
icrc_verdict() {
	python3 "$vm/icrc_check.py" "$1" >"$2" 2>&1
	grep MISMATCH "$2" | head -5
	local sum ok bad
	sum=$(grep -E '^ICRC:' "$2" | tail -1)
	echo "$sum"
	ok=$(echo "$sum" | sed -n 's/^ICRC: \([0-9]*\) OK, \([0-9]*\) mismatch.*/\1/p')
	bad=$(echo "$sum" | sed -n 's/^ICRC: \([0-9]*\) OK, \([0-9]*\) mismatch.*/\2/p')
	[ -n "$ok" ] && [ "$ok" != 0 ] && [ "$bad" = 0 ]
}

if [ "$mode" = icrc-verdict-selftest ]; then
	# the verdict must pass a reference capture of rxe and fail the same
	# capture with one ICRC byte changed (no root, no VM needed)
	ref=$(cd "$vm/.." && pwd)/rxe-captures/rc_send.pcap
	[ -f "$ref" ] || { echo "skip: no $ref"; exit 77; }
	mkdir -p "$work"
	icrc_verdict "$ref" "$work/selftest-good.txt" || { echo "FAIL: the reference capture was rejected"; exit 1; }
	# the last byte of the first RoCE packet's record is its ICRC's
	python3 - "$ref" "$work/selftest-bad.pcap" <<'EOF' || exit 1
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
end = "<" if struct.unpack("<I", d[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
off = 24
while off + 16 <= len(d):
    incl = struct.unpack(end + "I", d[off + 8:off + 12])[0]
    pkt = d[off + 16:off + 16 + incl]
    if len(pkt) > 42 and pkt[12:14] == b"\x08\x00" and pkt[23] == 17 and \
            struct.unpack(">H", pkt[36:38])[0] == 4791:
        tot = struct.unpack(">H", pkt[16:18])[0]
        d[off + 16 + 14 + tot - 1] ^= 0x01
        open(sys.argv[2], "wb").write(d)
        sys.exit(0)
    off += 16 + incl
sys.exit("no RoCE packet in " + sys.argv[1])
EOF
	if icrc_verdict "$work/selftest-bad.pcap" "$work/selftest-bad.txt"; then
		echo "FAIL: a capture with one wrong ICRC passed"; exit 1
	fi
	echo "PASS: the reference capture passes, one flipped ICRC bit fails"
	exit 0
fi

[ "$(id -u)" = 0 ] || { echo "skip: the rxe VM needs root"; exit 77; }
export RXEVM_WORK=$work
mkdir -p "$work"

if [ "$mode" = build ]; then
	exec "$vm/build.sh"
fi

launcher=$3; name=$4; dir=$5; tool=$6; shift 6
args="$*"
steps=${RXE_STEPS:-default mtu1024 loss5}
loss=${RXE_LOSS_PCT:-5}
step_tmo=${RXE_STEP_TIMEOUT:-60}
linger_lib=${RXE_LINGER_LIB:-}
linger_ms=${RXE_LINGER_MS:-250}
. "$vm/lib.sh"

cm=0
case $tool in
ibv_*) gid=-g; extra= ;;
ib_*)  gid=-x; extra=-F; case " $args " in *" -R "*) cm=1 ;; esac ;;
rping|ucmatose|udaddy|mckey) gid= extra= cm=1 ;;
*) echo "unknown tool $tool"; exit 2 ;;
esac
# cm_args SIDE SELF PEER: an rdma_cm tool's arguments before ARGS and the
# step's MTU option (SIDE vm|host; PEER empty on the server)
cm_args() {
	case $tool in
	rping) [ -n "$3" ] && echo "-c -a $3" || echo "-s -a $2" ;;
	ucmatose|udaddy) [ -n "$3" ] && echo "-s $3" ;;
	# a UD multicast group: the server side receives, the client sends
	mckey) [ -n "$3" ] && echo "-b $2 -s -m $MCKEY_GROUP" || echo "-b $2 -m $MCKEY_GROUP" ;;
	ib_*) [ "$1" = vm ] && echo "-d rxe0 -x 1 -F" || echo "-x 0 -F" ;;
	esac
}
MCKEY_GROUP=239.93.200.1
# and after them: perftest's server address comes last
cm_tail() { case $tool in ib_*) echo "$1" ;; esac; }
case $dir in
rxe-server) vm_peer=; host_peer=198.18.0.2 ;;
rxe-client) vm_peer=198.18.0.1; host_peer= ;;
*) echo "unknown direction $dir"; exit 2 ;;
esac

d=$work/cases/$name
rm -rf "$d"; mkdir -p "$d/share"
# the VM's image has no mckey: the host's (the same Debian rdmacm-utils,
# whose libraries the image has for rping) goes in through the share
vm_tool=$tool
if [ "$tool" = mckey ]; then
	cp "$(command -v mckey)" "$d/share/mckey" || exit 1
	vm_tool=/mnt/host/mckey
fi
# the pingpongs' loss step runs under the linger shim on both sides (above)
vm_linger= host_linger=()
if [ "$tool" != "${tool#ibv_}" ] && [ -n "$linger_lib" ]; then
	cp "$linger_lib" "$d/share/linger.so" || exit 1
	vm_linger="env LD_PRELOAD=/mnt/host/linger.so NETRC_LINGER_MS=$linger_ms"
	host_linger=(env NETRC_LINGER_MS="$linger_ms" sh -c 'LD_PRELOAD="$0${LD_PRELOAD:+:$LD_PRELOAD}" exec "$@"' "$linger_lib")
fi
# a client that finds no server listening yet: the pingpongs' and perftest's words
noserver="Couldn't connect to|Unable to open file descriptor for socket connection|Unable to init the socket connection"
# ... and an rdma_cm client's: no listener yet (REJ reason 8, SIDR status 1)
[ $cm = 1 ] && noserver="$noserver|RDMA_CM_EVENT_REJECTED, error:? 8|RDMA_CM_EVENT_UNREACHABLE, error:? 1"
lossq="tc qdisc add dev eth0 root handle 1: prio && tc qdisc add dev eth0 parent 1:3 handle 30: netem loss $loss% && tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dport 4791 0xffff flowid 1:3"

# the VM's script (shared read-only by 9p, so no command-line length limit)
{
	echo "noserver=\"$noserver\""
	cat <<'EOF'
step() {  # step N CLIENT? COMMAND...
	i=$1 cli=$2; shift 2; n=0
	echo "STEP-START $i: $*"
	while :; do
		timeout STEPTMO "$@" >/tmp/out 2>&1; rc=$?
		if [ $cli = 1 ] && [ $rc != 0 ] && [ $n -lt 150 ] && grep -qE "$noserver" /tmp/out; then
			n=$((n + 1)); usleep 200000; continue
		fi
		break
	done
	cat /tmp/out
	echo "STEP-EXIT $i rc=$rc"
}
EOF
	i=0
	for s in $steps; do
		i=$((i + 1))
		m=; [ "$s" = mtu1024 ] && m="-m 1024"
		pre=
		if [ "$s" = loss5 ]; then
			echo "$lossq || echo LOSS-SETUP-FAILED"
			pre=$vm_linger
		fi
		cli=0; [ -n "$vm_peer" ] && cli=1
		if [ $cm = 1 ]; then
			echo "step $i $cli $pre $vm_tool $(cm_args vm 198.18.0.2 "$vm_peer") $args $m $(cm_tail "$vm_peer")"
		else
			echo "step $i $cli $pre $tool -d rxe0 $gid 1 $extra $args $m $vm_peer"
		fi
	done
} | sed "s/STEPTMO/$step_tmo/" >"$d/share/vm.sh"

# the host's side, one program per step, each under uroce
host_steps() {
	local i=0 s m n rc
	local -a fault pre
	for s in $steps; do
		i=$((i + 1))
		m=; [ "$s" = mtu1024 ] && m="-m 1024"
		fault=() pre=()
		[ "$s" = loss5 ] && fault=(UROCE_FAULT_DROP_TX="$loss%") pre=("${host_linger[@]}")
		n=0
		local -a cmd=($tool $gid 0 $extra $args $m $host_peer)
		if [ $cm = 1 ]; then
			cmd=($tool $(cm_args host 198.18.0.1 "$host_peer") $args $m $(cm_tail "$host_peer"))
			# a client: not before the VM has started this step's server
			if [ -n "$host_peer" ]; then
				wait_log "$d/vm.log" "STEP-START $i:" $((step_tmo + 150)) && sleep "${RXE_CM_SERVER_DELAY:-1}"
			fi
		fi
		# perftest -R's data-connection race (cm_connect_delay.c): the host
		# client under the delay shim, ahead of uroce, as host_linger
		if [ $cm = 1 ] && [ -n "$host_peer" ] && [ "$tool" != "${tool#ib_}" ] && [ -n "${RXE_CM_DELAY_LIB:-}" ]; then
			pre=(env RXE_CM_DELAY_MS="${RXE_CM_DELAY_MS:-300}" sh -c 'LD_PRELOAD="$0${LD_PRELOAD:+:$LD_PRELOAD}" exec "$@"' "$RXE_CM_DELAY_LIB")
		fi
		echo "${pre[*]} ${cmd[*]}" >"$d/host.$i.cmd"
		while :; do
			ip netns exec "$NS" env UROCE_ADDR=198.18.0.1 UROCE_SHM=0 UROCE_STATS=1 "${fault[@]}" \
				timeout "$step_tmo" "$launcher" run -- "${pre[@]}" "${cmd[@]}" \
				>"$d/host.$i.log" 2>&1
			rc=$?
			if [ -n "$host_peer" ] && [ $rc != 0 ] && [ $n -lt 150 ] && grep -qE "$noserver" "$d/host.$i.log"; then
				n=$((n + 1)); sleep 0.2; continue
			fi
			break
		done
		echo "$rc" >"$d/host.$i.rc"
	done
}

TSHARK_PID= VM_PID= HOST_PID=
cleanup() {
	[ -n "$HOST_PID" ] && kill "$HOST_PID" 2>/dev/null
	[ -n "$TSHARK_PID" ] && kill -INT "$TSHARK_PID" 2>/dev/null
	[ -n "$VM_PID" ] && kill "$VM_PID" 2>/dev/null
	rm -f "$RUNDIR/vm0.pid"
	if [ -f "$RUNDIR/ns.created" ]; then
		sleep 0.5; ip netns del "$NS" 2>/dev/null; rm -f "$RUNDIR/ns.created"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ns_up; tap_up 0
pcap=$d/capture.pcap
ip netns exec "$NS" tshark -q -i "$BR" -f 'udp port 4791 or tcp port 18515' \
	-a "duration:$((step_tmo * 4 + 60))" -F pcap -w "$pcap" >"$d/tshark.log" 2>&1 &
TSHARK_PID=$!
wait_log "$d/tshark.log" "Capturing on" 20 || { cat "$d/tshark.log"; exit 1; }

t0=$(date +%s)
host_steps & HOST_PID=$!
VM_PID=$("$vm/run-vm.sh" -b -n 0 -t "$((step_tmo * 4 + 30))" -s "$d/share" \
	-c '. /mnt/host/vm.sh' -l "$d/vm.log" 2>>"$d/boot.log")
wait "$HOST_PID"; HOST_PID=
for _ in $(seq $((step_tmo * 8))); do kill -0 "$VM_PID" 2>/dev/null || break; sleep 0.5; done
kill "$VM_PID" 2>/dev/null; VM_PID=
sleep 0.5
kill -INT "$TSHARK_PID" 2>/dev/null; wait "$TSHARK_PID" 2>/dev/null; TSHARK_PID=
sed -i 's/\r$//' "$d/vm.log"
secs=$(( $(date +%s) - t0 ))

fail=0
i=0
for s in $steps; do
	i=$((i + 1))
	hrc=$(cat "$d/host.$i.rc" 2>/dev/null || echo none)
	vrc=$(sed -n "s/.*STEP-EXIT $i rc=\([0-9]*\).*/\1/p" "$d/vm.log" | tail -1)
	cnt=$(sed -n 's/^uroce:   \([a-z_]*\) *\([0-9]*\) .*/\1=\2/p' "$d/host.$i.log" |
		grep -E '^(tx_packets|rx_packets|retransmits|timeouts|rto_probes|seq_naks_rx|seq_naks_tx|duplicates|dup_responses|icrc_errors|icrc_ipid_solved|drop_[a-z_]*|tx_errors|cm_[a-z_]*)=' | tr '\n' ' ')
	bad=$(sed -n 's/^uroce:   \(icrc_errors\|drop_truncated\|drop_bad_header\|tx_errors\) *\([0-9]*\) .*/\1=\2/p' "$d/host.$i.log" | tr '\n' ' ')
	verdict=PASS why=
	[ "$hrc" = 0 ] || { verdict=FAIL; why="$why host rc=$hrc"; }
	[ "${vrc:-none}" = 0 ] || { verdict=FAIL; why="$why rxe rc=${vrc:-none}"; }
	grep -q 'uroce: pid [0-9]* gid .* counters:' "$d/host.$i.log" || { verdict=FAIL; why="$why no counters from uroce"; }
	[ -z "$bad" ] || { verdict=FAIL; why="$why uroce dropped/failed: $bad"; }
	grep -q LOSS-SETUP-FAILED "$d/vm.log" && [ "$s" = loss5 ] && { verdict=FAIL; why="$why netem setup failed"; }
	echo "STEP $i $s: $verdict$why | uroce: $cnt"
	grep -hE 'RESULT|BW average|Mbytes|usec|bytes in .* seconds|#bytes' "$d/host.$i.log" | tail -2 | sed 's/^/    host: /'
	if [ $verdict = FAIL ]; then
		fail=1
		echo "--- host $tool (step $i) log:"; tail -30 "$d/host.$i.log"
		echo "--- VM step $i:"; sed -n "/STEP-START $i:/,/STEP-EXIT $i /p" "$d/vm.log" | tail -30
	fi
done
echo "--- capture $pcap ($secs s for the case):"
icrc_verdict "$pcap" "$d/icrc.txt" || { echo "FAIL: ICRC"; fail=1; }
if [ $cm = 1 ]; then
	# every CM MAD, one line each from its raw bytes (cm_decode.py: tshark
	# 4.0 misreads the REQ's flow-label word, cm-wire.md §3.4), then
	# tshark's full decode
	python3 "$here/cm_decode.py" "$pcap" >"$d/cm.txt" 2>&1
	echo "CM MADs ($d/cm.txt):"
	grep -v '^data ' "$d/cm.txt" | cut -c1-160 | head -40 | sed 's/^/    /'
	{ echo; echo "--- tshark -V"; tshark -r "$pcap" -d udp.port==4791,infiniband -Y 'infiniband.deth.srcqp == 1' -V -x; } \
		>>"$d/cm.txt" 2>/dev/null
fi
if [ $fail = 0 ]; then
	[ "${RXE_KEEP:-0}" = 1 ] || rm -f "$pcap" "$d/icrc.txt"
	echo "PASS $name"
	exit 0
fi
echo "vm console: $d/vm.log"
echo "FAIL $name"
exit 1
