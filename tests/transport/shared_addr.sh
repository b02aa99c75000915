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
#     forwarded or re-steered, none lost to a wrong process for good;
#  4. every process's QPNs carry its own slot: no two processes of one
#     address print the same QPN high bits.
set -u
U=$1 path=$2
[ "$path" = udp ] && export UROCE_SHM=0
export UROCE_STATS=1
dir=$(mktemp -d) && trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
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
		echo "shared_addr.sh: $1 failed ($2)"; tail -5 "$dir/$1.srv" "$dir/$1.cli"; fail=1
	fi
}

echo "== 1. three pairs, servers on $A, clients on $B, at once"
for i in 0 1 2; do server p$i "$A" $((port0 + i)); done
for i in 0 1 2; do listening $((port0 + i)) || { echo "no server $i"; exit 1; }; done
pids=()
for i in 0 1 2; do client p$i "$B" $((port0 + i)) & pids+=($!); done
for i in 0 1 2; do wait "${pids[$i]}"; check p$i $?; done
wait

echo "== 2. server and client on one address"
for a in "$A" ::1; do
	server same "$a" $((port0 + 10))
	listening $((port0 + 10)) || { echo "no server"; exit 1; }
	client same "$a" $((port0 + 10)); check same $?
	wait
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
pids=()
for i in 1 2 3 4; do client k$i "$B" $((port0 + 20 + i)) & pids+=($!); done
for i in 0 1 2 3; do wait "${pids[$i]}"; check k$((i + 1)) $?; done
sleep 0.2
moved=$(cat "$dir"/k[1-4].srv | awk '$2 ~ /^share_(forwarded|probes_rx)$/ {s += $3} END {print s + 0}')
echo "   probes and forwards among the survivors: $moved"
[ "$moved" -gt 0 ] || { echo "shared_addr.sh: no probe or forward after a member left"; fail=1; }

if grep -h "uroce:   share_bad" "$dir"/*.srv "$dir"/*.cli; then
	echo "shared_addr.sh: bad forwards"; fail=1
fi
[ $fail = 0 ] && echo "shared_addr.sh: $path: every pair passed on shared addresses"
exit $fail
