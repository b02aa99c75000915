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
#     their same-host rings, a third process of the same user finds every
#     region they hold (sealed memfds, /proc/PID/fd/N -> /memfd:uroce-rx)
#     and tries to truncate it: every attempt is refused (the seals), both
#     processes live and finish the run through the rings, data checked by
#     the pingpong (--chk).  (The code before the seals had /dev/shm files
#     that a truncation cut: SIGBUS, or a run that fell back to UDP.)
#  5. squatting: before two processes of user nobody start, user daemon
#     binds the abstract socket names their regions would have
#     (uroce-rx.65534.<gid>, and decoys with a random-looking tail) and
#     plants files at the /dev/shm names earlier versions used; the rings
#     still carry the run (ring counters), data checked.  (The code before:
#     no rings at all, its rename onto daemon's file in sticky /dev/shm
#     failed.  Root's rename would not have: hence two users that are not
#     root.)
# A PID is known in advance by starting the process held on a FIFO and
# exec-ing it once the trap is set (exec keeps the PID).
# usage: attacks.sh LAUNCHER   (needs root, user nobody and user daemon; 77 otherwise)
set -u
U=$1
[ "$(id -u)" = 0 ] || { echo "skip: needs root (to be attacked by nobody)"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "skip: no user nobody"; exit 77; }
[ "$(id -u daemon 2>/dev/null)" = 1 ] || { echo "skip: no user daemon (uid 1)"; exit 77; }
command -v ibv_rc_pingpong >/dev/null || { echo "skip: ibv_rc_pingpong missing (apt-get install ibverbs-utils)"; exit 77; }
command -v setpriv >/dev/null || { echo "skip: setpriv missing"; exit 77; }
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do rm -f "/dev/shm/uroce.$p"; done
	rm -f /dev/shm/uroce-rx.*.00000000000000000000ffff7f00630[12]  # section 5's plants
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM  # ctest's timeout: the EXIT trap kills what is left
fail=0
ok() { echo "ok   $*"; }
bad() { echo "not ok: $*"; fail=1; }
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
as_daemon() { setpriv --reuid=1 --regid=1 --clear-groups -- "$@"; }
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
# guarded (net/shm.c), so the process counts on into zero pages
port=$(free_port)
"$U" run -- ibv_rc_pingpong -g 0 -p "$port" -n 2000 >"$tmp/page.s" 2>&1 &
p=$!; pids+=("$p")
wait_listen "$port" || bad "page truncation: the server does not listen"
truncate -s 0 "/dev/shm/uroce.$p" || bad "page truncation: no page at /dev/shm/uroce.$p"
client_survives page "$p" "$port" "the server ran its traffic after its counters page was truncated"

# 4. a peer of the same user tries to truncate every same-host region under
# traffic
port=$(free_port)
# enough iterations that the run outlasts finding the regions and trying
# them (the first 1000 ring packets come within the first few thousand
# iterations)
iters=200000
UROCE_STATS=1 "$U" run -- ibv_rc_pingpong -g 0 -p "$port" -s 1024 -c -n $iters >"$tmp/ring.s" 2>&1 &
sp=$!; pids+=("$sp")
wait_listen "$port" || bad "rings: the server does not listen"
UROCE_STATS=1 "$U" run -- ibv_rc_pingpong -g 0 -p "$port" -s 1024 -c -n $iters 127.0.0.1 >"$tmp/ring.c" 2>&1 &
cp=$!; pids+=("$cp")
# traffic flows through the rings: the server's counters show ring packets
flowing=0
for _ in $(seq 400); do
	n=$("$U" stat -a "$sp" 2>/dev/null | awk '$1 == "shm_packets_rx" { print $2 }')
	[ "${n:-0}" -gt 1000 ] && { flowing=1; break; }
	sleep 0.05
done
[ $flowing = 1 ] || bad "rings: no traffic through the rings"
tried=0 cut=0
for who in "$sp" "$cp"; do
	for f in /proc/"$who"/fd/*; do
		case $(readlink "$f" 2>/dev/null) in
		/memfd:uroce-rx*)
			tried=$((tried + 1))
			truncate -s 0 "$f" 2>/dev/null && cut=$((cut + 1))
			truncate -s 4096 "$f" 2>/dev/null && cut=$((cut + 1))
			;;
		esac
	done
done
# each process holds its own region and its peer's (>= 4 in all)
running() { kill -0 "$sp" 2>/dev/null && kill -0 "$cp" 2>/dev/null; }
if [ $tried -ge 4 ] && [ $cut = 0 ] && running; then
	ok "rings: $tried regions found by /proc/PID/fd, every truncation refused, the pingpong still running"
else
	bad "rings: $tried regions found, $cut truncations went through, the pingpong was $(running && echo running || echo over)"
fi
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
	r=$(counter "$tmp/ring.$side" shm_packets_rx)
	[ "$r" -ge $((2 * iters)) ] && ok "rings ($side): all the run through the rings (shm_packets_rx $r)" \
		|| bad "rings ($side): shm_packets_rx $r, want >= $((2 * iters)): the rings were given up"
done

# 5. daemon squats nobody's rendezvous names (and the old /dev/shm names)
# first (fixed addresses, so that the names are known in advance)
gid_of() { IFS=. read -r a b c d <<<"$1"; printf '00000000000000000000ffff%02x%02x%02x%02x' "$a" "$b" "$c" "$d"; }
addr_s=127.0.99.1 addr_c=127.0.99.2
netns=$(stat -L -c %i /proc/self/ns/net)
names=()
for a in $addr_s $addr_c; do
	h=$(gid_of $a)
	names+=("uroce-rx.65534.$h")
	for k in $(seq 12); do names+=("uroce-rx.65534.$h.$(printf '%016x' $k)"); done
	as_daemon sh -c "printf squat > /dev/shm/uroce-rx.$netns.$h; chmod 666 /dev/shm/uroce-rx.$netns.$h" \
		|| bad "squat: daemon could not plant /dev/shm/uroce-rx.$netns.$h"
done
as_daemon /usr/bin/python3 -c '
import socket, sys, time
held = []
for n in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind("\0" + n)
    s.listen(1)
    held.append(s)
print("ready", flush=True)
time.sleep(600)' "${names[@]}" >"$tmp/squat.out" 2>&1 &
sq=$!; pids+=("$sq")
for _ in $(seq 200); do grep -q ready "$tmp/squat.out" && break; sleep 0.05; done
grep -q ready "$tmp/squat.out" && ok "squat: daemon holds ${#names[@]} names (uroce-rx.65534.<gid> and decoys) and the old /dev/shm names" \
	|| { bad "squat: daemon's sockets"; cat "$tmp/squat.out"; }
port=$(free_port)
UROCE_ADDR=$addr_s UROCE_STATS=1 as_nobody "$U" run -- ibv_rc_pingpong -g 0 -p "$port" -s 1024 -c -n 20000 >"$tmp/squat.s" 2>&1 &
p=$!; pids+=("$p")
wait_listen "$port" || bad "squat: the server does not listen"
UROCE_ADDR=$addr_c UROCE_STATS=1 timeout 120 setpriv --reuid=65534 --regid=65534 --clear-groups -- "$U" run -- ibv_rc_pingpong -g 0 -p "$port" -s 1024 -c -n 20000 127.0.0.1 >"$tmp/squat.c" 2>&1; crc=$?
wait "$p"; src=$?
if [ $src -eq 0 ] && [ $crc -eq 0 ] && grep -q "20000 iters in" "$tmp/squat.c"; then
	ok "squat: the pingpong ran, data checked"
else
	bad "squat: server $src client $crc"; tail -n 5 "$tmp/squat.s" "$tmp/squat.c"
fi
for side in s c; do
	r=$(counter "$tmp/squat.$side" shm_packets_rx)
	[ "$r" -ge 40000 ] && ok "squat ($side): the rings carried the run (shm_packets_rx $r)" \
		|| bad "squat ($side): shm_packets_rx $r, want >= 40000: no rings"
done
kill "$sq" 2>/dev/null
for a in $addr_s $addr_c; do rm -f "/dev/shm/uroce-rx.$netns.$(gid_of $a)"; done

[ $fail = 0 ] && echo "ok: attacks" || echo "FAILED"
exit $fail
