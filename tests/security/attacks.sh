#!/bin/bash
# Issue 13, items 1 and 2, as an attacker would try them on a host where
# fs.protected_symlinks and fs.protected_regular are 0 (the kernel default):
#  1. symlink: user nobody pre-creates /dev/shm/uroce.<pid> as a symlink to
#     a root-owned file, for the PID a root uroce process is about to have;
#     the process must not touch the target (the old code truncated and
#     overwrote it: open(O_CREAT|O_TRUNC) followed the link);
#  2. plain file: nobody pre-creates that name as a file of its own and
#     truncates it once the root process runs; the process must neither
#     truncate nobody's file nor die of SIGBUS at its next counter (the old
#     code did both), and `uroce stat PID` still finds its counters;
#  3. the counters page is the owner's alone (0600; UROCE_STATS_MODE=0644
#     widens it), and another user cannot read it;
#  4. ring truncation: while two root uroce processes ping-pong through
#     their same-host rings, a third process of the same user truncates both
#     regions; neither dies, both abandon the rings (shm_truncated counted)
#     and finish the run by UDP, data checked by the pingpong.
# A PID is known in advance by starting the process held on a FIFO and
# exec-ing it once the trap is set (exec keeps the PID).
# usage: attacks.sh LAUNCHER   (needs root and user nobody; 77 otherwise)
set -u
U=$1
[ "$(id -u)" = 0 ] || { echo "skip: needs root (to be attacked by nobody)"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "skip: no user nobody"; exit 77; }
command -v ibv_rc_pingpong >/dev/null || { echo "skip: ibv_rc_pingpong missing (apt-get install ibverbs-utils)"; exit 77; }
command -v setpriv >/dev/null || { echo "skip: setpriv missing"; exit 77; }
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do rm -f "/dev/shm/uroce.$p"; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM  # ctest's timeout: the EXIT trap kills what is left
fail=0
ok() { echo "ok   $*"; }
bad() { echo "not ok: $*"; fail=1; }
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_listen() { for _ in $(seq 200); do ss -ltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0; sleep 0.05; done; return 1; }
# dies_of_signal STATUS: 128+N from a shell's wait means signal N (no
# `timeout` in front of the programs: it would fork, and the PID would not
# be the uroce process's)
dies_of_signal() { [ "$1" -gt 128 ]; }

# held OUT PROG...: start PROG (through uroce run) held on a FIFO; sets HELD
# (its PID, already final) and HELD_FIFO
held() {
	local out=$1; shift
	HELD_FIFO=$tmp/fifo.$RANDOM$RANDOM
	mkfifo "$HELD_FIFO"
	bash -c 'read -r _ <"$0"; exec "$@"' "$HELD_FIFO" "$@" >"$out" 2>&1 &
	HELD=$!
	pids+=("$HELD")
}
release() { echo go >"$HELD_FIFO"; }
# client_survives NAME PID PORT WHAT: the pingpong client of server PID on
# PORT runs its 2000 iterations, and both exit 0 (files $tmp/NAME.{s,c})
client_survives() {
	local crc src
	timeout 120 "$U" run -- ibv_rc_pingpong -g 0 -p "$3" -n 2000 127.0.0.1 >"$tmp/$1.c" 2>&1; crc=$?
	wait "$2"; src=$?
	if [ $src -eq 0 ] && [ $crc -eq 0 ] && grep -q "iters in" "$tmp/$1.c"; then
		ok "$1: $4"
	else
		bad "$1: server $src client $crc$(dies_of_signal $src && echo " (server killed by signal $((src - 128)))")"
		cat "$tmp/$1.s" "$tmp/$1.c"
	fi
}

echo "fs.protected_symlinks=$(sysctl -n fs.protected_symlinks 2>/dev/null) fs.protected_regular=$(sysctl -n fs.protected_regular 2>/dev/null)"

# 1. symlink to a root-owned file
target=$tmp/precious
printf 'root-owned data that must survive\n' >"$target"
cp "$target" "$tmp/precious.orig"
held "$tmp/devinfo.out" "$U" run -- ibv_devinfo -v
p=$HELD
as_nobody ln -s "$target" "/dev/shm/uroce.$p" || bad "nobody could not plant the symlink"
release
wait "$p"; rc=$?
if [ $rc -ne 0 ] || ! grep -q uroce0 "$tmp/devinfo.out"; then
	bad "symlink: ibv_devinfo failed ($rc)"; cat "$tmp/devinfo.out"
fi
if cmp -s "$target" "$tmp/precious.orig"; then
	ok "symlink: the root-owned target is untouched"
else
	bad "symlink: the root process followed /dev/shm/uroce.$p and rewrote $target ($(stat -c %s "$target") bytes now)"
fi
[ -L "/dev/shm/uroce.$p" ] && [ "$(stat -c %U "/dev/shm/uroce.$p")" = nobody ] \
	&& ok "symlink: nobody's link itself is left as it was" || bad "symlink: nobody's link was removed or replaced"
rm -f "/dev/shm/uroce.$p"

# 2. a plain file of nobody's at the name, truncated under the process
port=$(free_port)
held "$tmp/plain.s" env UROCE_STATS=1 "$U" run -- ibv_rc_pingpong -g 0 -p "$port" -n 2000
p=$HELD
as_nobody sh -c "printf 'nobody was here\n' > /dev/shm/uroce.$p && chmod 666 /dev/shm/uroce.$p" || bad "nobody could not plant the file"
release
wait_listen "$port" || bad "plain file: the server does not listen"
[ "$(tr -d "\0" <"/dev/shm/uroce.$p")" = "nobody was here" ] && ok "plain file: nobody's file is not truncated or written by root" \
	|| bad "plain file: the root process opened nobody's /dev/shm/uroce.$p (now $(stat -c %s "/dev/shm/uroce.$p") bytes)"
page=$(ls /dev/shm/uroce."$p".* 2>/dev/null | head -1)
[ -n "$page" ] && [ "$(stat -c '%a %U' "$page")" = "600 root" ] && ok "plain file: the page went to $(basename "$page"), mode 0600, root's" \
	|| bad "plain file: no page of root's own at a name of its own (${page:-none})"
"$U" stat "$p" | grep -q "pid $p " && ok "plain file: uroce stat $p finds the counters" || bad "plain file: uroce stat $p does not find the process"
as_nobody truncate -s 0 "/dev/shm/uroce.$p"
client_survives plain "$p" "$port" "the root process ran its traffic after nobody truncated the name"
rm -f "/dev/shm/uroce.$p"

# 3. the page's mode; another user cannot read it
for mode in default 0644; do
	port=$(free_port)
	envs=(); want=600
	[ $mode = default ] || { envs=(UROCE_STATS_MODE=$mode); want=644; }
	env "${envs[@]}" "$U" run -- ibv_rc_pingpong -g 0 -p "$port" -n 10 >"$tmp/mode.s" 2>&1 &
	p=$!; pids+=("$p")
	wait_listen "$port" || bad "mode $mode: the server does not listen"
	got=$(stat -c '%a %U' "/dev/shm/uroce.$p" 2>/dev/null)
	[ "$got" = "$want root" ] && ok "mode $mode: /dev/shm/uroce.$p is $got" || bad "mode $mode: /dev/shm/uroce.$p is '${got:-missing}', want $want root"
	if [ $mode = default ]; then
		as_nobody cat "/dev/shm/uroce.$p" >/dev/null 2>&1 && bad "mode default: nobody reads root's counters" \
			|| ok "mode default: nobody cannot read them"
		"$U" stat "$p" | grep -q "pid $p " && ok "mode default: root's uroce stat $p reads them" || bad "mode default: uroce stat $p does not"
	fi
	timeout 60 "$U" run -- ibv_rc_pingpong -g 0 -p "$port" -n 10 127.0.0.1 >"$tmp/mode.c" 2>&1
	wait "$p"
done

# 3b. a process of the same user truncates the live counters page (not a
# planted name: the page itself): the next counter would fault; the page is
# guarded as the ring regions are, so the process counts on into zero pages
port=$(free_port)
"$U" run -- ibv_rc_pingpong -g 0 -p "$port" -n 2000 >"$tmp/page.s" 2>&1 &
p=$!; pids+=("$p")
wait_listen "$port" || bad "page truncation: the server does not listen"
truncate -s 0 "/dev/shm/uroce.$p" || bad "page truncation: no page at /dev/shm/uroce.$p"
client_survives page "$p" "$port" "the server ran its traffic after its counters page was truncated"

# 4. a peer truncates both same-host regions under traffic
gid_hex() { # pid -> the 32 hex digits of its gid[0] (IPv4-mapped)
	local ip
	ip=$("$U" stat "$1" | sed -n 's/.* gid\[0\]=\([0-9.]*\).*/\1/p' | head -1)
	[ -n "$ip" ] || return 1
	IFS=. read -r a b c d <<<"$ip"
	printf '00000000000000000000ffff%02x%02x%02x%02x' "$a" "$b" "$c" "$d"
}
port=$(free_port)
# enough iterations that the run outlasts finding both regions and cutting
# them (the first 1000 ring packets come within the first few thousand
# iterations); the rest of the run goes by UDP, a few seconds
iters=200000
UROCE_STATS=1 "$U" run -- ibv_rc_pingpong -g 0 -p "$port" -s 1024 -n $iters >"$tmp/ring.s" 2>&1 &
sp=$!; pids+=("$sp")
wait_listen "$port" || bad "rings: the server does not listen"
UROCE_STATS=1 "$U" run -- ibv_rc_pingpong -g 0 -p "$port" -s 1024 -n $iters 127.0.0.1 >"$tmp/ring.c" 2>&1 &
cp=$!; pids+=("$cp")
# traffic flows through the rings: the server's counters show ring packets
flowing=0
for _ in $(seq 400); do
	n=$("$U" stat -a "$sp" 2>/dev/null | awk '$1 == "shm_packets_rx" { print $2 }')
	[ "${n:-0}" -gt 1000 ] && { flowing=1; break; }
	sleep 0.05
done
[ $flowing = 1 ] || bad "rings: no traffic through the rings"
cut=0
for who in "$sp" "$cp"; do
	h=$(gid_hex "$who") || { bad "rings: no gid for $who"; continue; }
	for f in /dev/shm/uroce-rx.*."$h"; do
		[ -f "$f" ] && truncate -s 0 "$f" && cut=$((cut + 1))
	done
done
kill -0 "$sp" 2>/dev/null && kill -0 "$cp" 2>/dev/null && [ $cut = 2 ] && ok "rings: both regions truncated while the pingpong ran" \
	|| bad "rings: truncated $cut regions, the pingpong was $(kill -0 "$sp" 2>/dev/null && echo running || echo over)"
wait "$cp"; crc=$?
wait "$sp"; src=$?
counter() { awk -v n="$2" '$1 == "uroce:" && $2 == n { v = $3 } END { print v + 0 }' "$1"; }
if [ $src -eq 0 ] && [ $crc -eq 0 ] && grep -q "$iters iters in" "$tmp/ring.c"; then
	ok "rings: both processes lived and finished all $iters iterations, data checked"
else
	bad "rings: server $src client $crc$(dies_of_signal $src && echo " (server: signal $((src - 128)))")$(dies_of_signal $crc && echo " (client: signal $((crc - 128)))")"
	tail -n 5 "$tmp/ring.s" "$tmp/ring.c"
fi
for side in s c; do
	t=$(counter "$tmp/ring.$side" shm_truncated)
	[ "$t" -ge 1 ] && ok "rings ($side): shm_truncated $t, the flows went on by UDP" || bad "rings ($side): shm_truncated not counted"
done

[ $fail = 0 ] && echo "ok: attacks" || echo "FAILED"
exit $fail
