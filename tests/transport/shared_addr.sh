#!/bin/bash
# shared_addr.sh LAUNCHER PATH: one RoCE address shared by several uroce
# processes (issue #15 item 1, src/net/share.h).  Unmodified
# ibv_rc_pingpong --chk (data checked), PATH udp (UROCE_SHM=0) or rings:
#  1. three servers share address A and three clients address B, all six
#     at once: every pair passes;
#  2. a server and its client on one address (each packet to A:4791 must
#     find its process by QPN alone), IPv4 and ::1;
#  3. four servers join A, the first is killed before its client comes
#     (the kernel moves the group's last socket into its place, so the
#     steering learnt before is wrong), a fifth joins after: the clients
#     of the four live ones pass, and the counters show packets were
#     forwarded, none lost to a wrong process for good (a socket of the
#     test's own joins the group and steers every packet to index 0);
#  4. every process's QPNs carry its own slot: no two processes of one
#     address print the same QPN high bits;
#  5. with rings, every packet of every process goes by the rings (a
#     region per process of an address); by UDP, none.
set -u
U=$1 path=$2
[ "$path" = udp ] && export UROCE_SHM=0
export UROCE_STATS=1
dir=$(mktemp -d) && trap 'kill $(jobs -p) 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
base=$(( ($$ % 200) + 20 ))
A=127.$base.$(( ($$ >> 8) % 250 + 1 )).5 B=127.$base.$(( ($$ >> 8) % 250 + 1 )).6
port0=$(( 20000 + ($$ % 20000) ))
fail=0

listening() { for _ in $(seq 200); do ss -ltn | grep -q ":$1 " && return 0; sleep 0.05; done; return 1; }

# pair NAME SERVER_ADDR CLIENT_ADDR PORT: a server in the background, its client after
server() { UROCE_ADDR=$2 "$U" run -- ibv_rc_pingpong -g 0 -p "$3" -n 2000 --chk >"$dir/$1.srv" 2>&1 & last=$!; }
client() { UROCE_ADDR=$2 "$U" run -- ibv_rc_pingpong -g 0 -p "$3" -n 2000 --chk 127.0.0.1 >"$dir/$1.cli" 2>&1; }
check() {  # check NAME RC
	if [ "$2" -ne 0 ] || ! grep -q "bytes in" "$dir/$1.cli"; then
		echo "shared_addr.sh: $1 failed ($2)"; failed+=("$1"); fail=1
	fi
}
# a failed pair's whole output, once its server has ended too (its counters
# are printed at exit)
report() {
	for n in "${failed[@]}"; do
		for f in "$dir/$n.srv" "$dir/$n.cli"; do echo "--- $(basename "$f")"; cat "$f"; done
	done
	failed=()
}
failed=()

echo "== 1. three pairs, servers on $A, clients on $B, at once"
for i in 0 1 2; do server p$i "$A" $((port0 + i)); done
for i in 0 1 2; do listening $((port0 + i)) || { echo "no server $i"; exit 1; }; done
pids=()
for i in 0 1 2; do client p$i "$B" $((port0 + i)) & pids+=($!); done
for i in 0 1 2; do wait "${pids[$i]}"; check p$i $?; done
wait; report

echo "== 2. server and client on one address"
for a in "$A" ::1; do
	server same "$a" $((port0 + 10))
	listening $((port0 + 10)) || { echo "no server"; exit 1; }
	client same "$a" $((port0 + 10)); check same $?
	wait; report
	grep -h "local address" "$dir/same.srv" "$dir/same.cli" | sed 's/^/   /'
	# 4. two processes of one address: their QPNs' slots (QPN >> 14) differ
	s=$(grep -h "local address" "$dir/same.srv" "$dir/same.cli" | sed -n 's/.*QPN 0x\([0-9a-f]*\).*/\1/p' |
		while read -r q; do echo $(( 0x$q >> 14 )); done | sort -u | wc -l)
	[ "$s" = 2 ] || { echo "shared_addr.sh: server and client on $a share a QPN slot"; fail=1; }
done

echo "== 3. four servers on $A, the first killed, a fifth joins"
for i in 0 1 2 3; do
	server k$i "$A" $((port0 + 20 + i)); listening $((port0 + 20 + i)) || exit 1
	[ $i = 0 ] && victim=$last
done
# the launcher execs the program: $victim is ibv_rc_pingpong itself
kill -9 "$victim"; wait "$victim" 2>/dev/null
server k4 "$A" $((port0 + 24)); listening $((port0 + 24)) || exit 1
# A socket of ours joins the group last, attaches a program that sends
# every packet to index 0, as a group whose order changed would, and leaves: the
# members at the other indexes get their packets forwarded by the one at
# index 0, until the round of probes that forward starts puts the group's
# program right again.
exec 3< <(python3 -c '
import ctypes, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind((sys.argv[1], 4791))
ret0 = ctypes.create_string_buffer(struct.pack("HBBI", 0x06, 0, 0, 0))  # BPF_RET|BPF_K 0
s.setsockopt(socket.SOL_SOCKET, 51, struct.pack("HL", 1, ctypes.addressof(ret0)))  # SO_ATTACH_REUSEPORT_CBPF
# the group keeps the program; the socket leaves (the last one, so nobody
# moves), or packets the kernel hashed to it would be lost with it
s.close()
print("steered", flush=True)
' "$A" 2>&1)
read -r -u 3 line && [ "$line" = steered ] || { echo "shared_addr.sh: could not steer the group: $line"; exit 1; }
pids=()
for i in 1 2 3 4; do client k$i "$B" $((port0 + 20 + i)) & pids+=($!); done
for i in 0 1 2 3; do wait "${pids[$i]}"; check k$((i + 1)) $?; done
wait; report
moved=$(cat "$dir"/k[1-4].srv | awk '$2 == "share_forwarded" {s += $3} END {print s + 0}')
# how many depends on when the members' last round of probes took effect;
# that a forward reaches its process is checked in tests/unit/test_share.c
echo "   packets forwarded among the servers: $moved"

# 5. the path: with rings every process of a shared address has a region
# of its own (named by its QPN slot, net/shm.c), so every packet of every
# pair goes by the rings; by UDP none does
for f in "$dir"/*.srv "$dir"/*.cli; do
	case $f in */k0.srv) continue ;; esac  # killed before it sent
	tx=$(awk '$2 == "tx_packets" {print $3}' "$f") shm=$(awk '$2 == "shm_packets_tx" {print $3}' "$f")
	if [ "$path" = rings ]; then
		[ -n "$tx" ] && [ "$shm" = "$tx" ] || { echo "shared_addr.sh: $(basename "$f"): ${shm:-0} of ${tx:-?} packets by the rings"; fail=1; }
	else
		[ -z "$shm" ] || { echo "shared_addr.sh: $(basename "$f"): ring packets with UROCE_SHM=0"; fail=1; }
	fi
done

if grep -h "uroce:   share_bad" "$dir"/*.srv "$dir"/*.cli; then
	echo "shared_addr.sh: bad forwards"; fail=1
fi
[ $fail = 0 ] && echo "shared_addr.sh: $path: every pair passed on shared addresses"
exit $fail
