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
#  5. the rendezvous directory: (a) user nobody makes daemon's directory
#     /dev/shm/uroce-1 first: daemon's processes refuse it and run by
#     UDP, data checked, no crash (daemon's /dev/shm/uroce-0 does not
#     concern root, which meets in /run/uroce: section 4 runs with it
#     planted); (b) in daemon's own directory, nobody's connect flood on
#     the sockets fails at once (the abstract names of before anyone could
#     reach, fill and wake), and the rings carry daemon's run.
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
	rm -rf /dev/shm/uroce-0 /dev/shm/uroce-1 /tmp/uroce-flood-stop  # section 4's and 5's
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
# traffic.  daemon has made /dev/shm/uroce-0 first: root meets its peers in
# /run/uroce, unaffected.
rm -rf /dev/shm/uroce-0
as_daemon mkdir -m 0777 /dev/shm/uroce-0 || bad "rings: daemon could not make /dev/shm/uroce-0"
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
rm -rf /dev/shm/uroce-0
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

# 5. the rendezvous directory (net/shm.c, "Rendezvous"): user daemon
# (no XDG_RUNTIME_DIR) meets its peers in /dev/shm/uroce-1, root in
# /run/uroce.  (Not nobody: its uid is the overflow uid, which has no
# rings at all, as every unmapped uid of a user namespace reads as it.)
counter() { awk -v n="$2" '$1 == "uroce:" && $2 == n { v = $3 } END { print v + 0 }' "$1"; }
# daemon_pair NAME ITERS: a pingpong of two processes of daemon's, data
# checked; files $tmp/NAME.{s,c}
daemon_pair() {
	local port src crc
	port=$(free_port)
	env -u XDG_RUNTIME_DIR UROCE_ADDR=127.0.99.1 UROCE_STATS=1 setpriv --reuid=1 --regid=1 --clear-groups -- \
		"$U" run -- ibv_rc_pingpong -g 0 -p "$port" -s 1024 -c -n "$2" >"$tmp/$1.s" 2>&1 &
	p=$!; pids+=("$p")
	wait_listen "$port" || bad "$1: the server does not listen"
	env -u XDG_RUNTIME_DIR UROCE_ADDR=127.0.99.2 UROCE_STATS=1 timeout 120 setpriv --reuid=1 --regid=1 --clear-groups -- \
		"$U" run -- ibv_rc_pingpong -g 0 -p "$port" -s 1024 -c -n "$2" 127.0.0.1 >"$tmp/$1.c" 2>&1; crc=$?
	wait "$p"; src=$?
	if [ $src -eq 0 ] && [ $crc -eq 0 ] && grep -q "$2 iters in" "$tmp/$1.c"; then
		ok "$1: the pingpong ran, data checked"
	else
		bad "$1: server $src client $crc"; tail -n 5 "$tmp/$1.s" "$tmp/$1.c"
	fi
}
# 5a. nobody makes daemon's directory first (it cannot make root's: /run
# is not world-writable): daemon's processes have no rings (counted), and
# run by UDP, data exact; no crash
rm -rf /dev/shm/uroce-1
as_nobody mkdir -m 0777 /dev/shm/uroce-1 || bad "squat: nobody could not make /dev/shm/uroce-1"
daemon_pair squat 2000
for side in s c; do
	r=$(counter "$tmp/squat.$side" shm_packets_rx)
	d=$(counter "$tmp/squat.$side" shm_dir_refused)
	[ "$r" = 0 ] && [ "$d" -ge 1 ] && ok "squat ($side): nobody's directory is refused (shm_dir_refused $d), the run went by UDP" \
		|| bad "squat ($side): shm_packets_rx $r shm_dir_refused $d: nobody's directory was used"
done
[ -z "$(ls -A /dev/shm/uroce-1)" ] && ok "squat: nothing of daemon's in nobody's directory" || bad "squat: daemon wrote into nobody's directory"
rm -rf /dev/shm/uroce-1
# 5b. daemon's own directory: nobody cannot reach the sockets in it (a
# connect flood throughout the run fails at once), and the rings carry the
# run.  (The abstract names before: anyone could connect, fill the backlog
# and wake the engine.)  The targets are the real socket paths
# (rx.<netns inode>.<GID hex><QPN slot hex> of daemon's two addresses, whose
# slots daemon's processes pick: net/shm.c region_key), which root finds
# and hands nobody in a file, as nobody cannot list the directory.
rm -f /tmp/uroce-flood-targets
as_nobody /usr/bin/python3 -c '
import socket, os, time, errno
ok = refused = 0
end = time.time() + 60
while time.time() < end:
    try:
        paths = open("/tmp/uroce-flood-targets").read().split()
    except OSError:
        paths = []
    for path in paths:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.setblocking(False)
        try:
            s.connect(path)
            ok += 1
        except OSError as e:
            refused += 1
        s.close()
    try:
        open("/tmp/uroce-flood-stop").close()
        break
    except OSError:
        pass
print("connected", ok, "refused", refused, flush=True)' >"$tmp/flood.out" 2>&1 &
fl=$!; pids+=("$fl")
rm -f /tmp/uroce-flood-stop
# root finds daemon's sockets of the two addresses, hands them to the flood,
# and sees whether the flood's targets are daemon's sockets
ns=$(stat -L -c %i /proc/self/ns/net)
( seen=0; while [ ! -e /tmp/uroce-flood-stop ]; do
	t=$(ls -d /dev/shm/uroce-1/rx.$ns.00000000000000000000ffff7f0063{01,02}* 2>/dev/null | tr '\n' ' ')
	[ -n "$t" ] && { echo "$t" >/tmp/uroce-flood-targets.new; chmod 644 /tmp/uroce-flood-targets.new
		mv /tmp/uroce-flood-targets.new /tmp/uroce-flood-targets; }
	for f in $t; do [ -S "$f" ] && [ "$(stat -c %U "$f")" = daemon ] && seen=1; done
	sleep 0.05; done; echo "$seen" >"$tmp/flood.seen" ) &
sn=$!; pids+=("$sn")
rm -f /tmp/uroce-flood-stop
daemon_pair flood 20000
touch /tmp/uroce-flood-stop
wait "$fl"
wait "$sn"
rm -f /tmp/uroce-flood-stop /tmp/uroce-flood-targets
[ "$(cat "$tmp/flood.seen" 2>/dev/null)" = 1 ] && ok "flood: its target is daemon's socket (computed path seen during the run)" \
	|| bad "flood: the target rx.$ns.<key> was never daemon's socket"
read -r _ conn _ refused <"$tmp/flood.out"
[ "${conn:-1}" = 0 ] && [ "${refused:-0}" -gt 0 ] && ok "flood: nobody's $refused connects all failed" \
	|| bad "flood: nobody connected ${conn:-?} times ($(cat "$tmp/flood.out"))"
[ "$(stat -c '%a %U' /dev/shm/uroce-1 2>/dev/null)" = "700 daemon" ] && ok "flood: /dev/shm/uroce-1 is daemon's, 0700" \
	|| bad "flood: /dev/shm/uroce-1 is $(stat -c '%a %U' /dev/shm/uroce-1 2>&1)"
for side in s c; do
	r=$(counter "$tmp/flood.$side" shm_packets_rx)
	[ "$r" -ge 40000 ] && ok "flood ($side): the rings carried the run (shm_packets_rx $r)" \
		|| bad "flood ($side): shm_packets_rx $r, want >= 40000: no rings"
done
rm -rf /dev/shm/uroce-1

[ $fail = 0 ] && echo "ok: attacks" || echo "FAILED"
exit $fail
