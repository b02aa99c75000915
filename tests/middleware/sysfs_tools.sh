#!/bin/bash
# The device where the system's tools look for one (issue #16, sysfs/):
# infiniband-diags' ibstat and ibstatus (a shell script: ls and cat, each a
# program of its own, read /sys/class/infiniband), ibv_devinfo, and the
# files UCX and rdma-core's tests read, all unmodified under `uroce run`
# with one address: each must show uroce0, ACTIVE, its rate and its GID.
# Then: the view is per process (gone after exit), and outside `uroce run`
# nothing of it is seen.
#   sysfs_tools.sh LAUNCHER
set -u
L=$1
export UROCE_ADDR=127.88.0.1
fail=0
expect() { # WHAT OUTPUT-FILE REGEX...
	local what=$1 out=$2; shift 2
	for re in "$@"; do
		if grep -qE -- "$re" "$out"; then echo "ok   $what: /$re/"
		else echo "FAIL $what: no line matches /$re/"; fail=1; fi
	done
}
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT

if command -v ibstat >/dev/null; then
	"$L" run -- ibstat >"$t/ibstat" 2>&1; echo "ibstat: exit $?"; cat "$t/ibstat"
	expect ibstat "$t/ibstat" "^CA 'uroce0'" "State: Active" "Physical state: LinkUp" "Rate: 25" \
		"Link layer: Ethernet" "Port GUID: 0x0000ffff7f580001" "Node GUID: 0x[0-9a-f]{16}"
	"$L" run -- ibstatus >"$t/ibstatus" 2>&1; echo "ibstatus: exit $?"; cat "$t/ibstatus"
	expect ibstatus "$t/ibstatus" "device 'uroce0' port 1" \
		"default gid:.*0000:0000:0000:0000:0000:ffff:7f58:0001" "state:.*4: ACTIVE" \
		"rate:.*25 Gb/sec \(1X EDR\)" "link_layer:.*Ethernet"
else
	echo "infiniband-diags not installed: ibstat and ibstatus not run"; fail=1
fi
"$L" run -- ibv_devinfo -v >"$t/devinfo" 2>&1; echo "ibv_devinfo: exit $?"
expect ibv_devinfo "$t/devinfo" "hca_id:.*uroce0" "state:.*PORT_ACTIVE" "link_layer:.*Ethernet" \
	"GID\[ *0\]:.*::ffff:127.88.0.1, RoCE v2"

# what UCX and rdma-core's tests read, by a program that opened the device
# (its own GID) and by a shell's children
"$L" run -- /usr/bin/python3 - >"$t/py" 2>&1 <<'PY'
import os, stat
import pyverbs.device as d
ctx = d.Context(name='uroce0')
base = '/sys/class/infiniband/uroce0/ports/1/'
def rd(p): return open(p).read().strip()
print('gid0', rd(base + 'gids/0'))
print('type0', rd(base + 'gid_attrs/types/0'))
print('ndev0', rd(base + 'gid_attrs/ndevs/0'))
print('net', os.listdir('/sys/class/infiniband/uroce0/device/net/'))
st = os.stat('/dev/infiniband/uverbs0')
print('uverbs0 chr', stat.S_ISCHR(st.st_mode), 'rw', os.access('/dev/infiniband/uverbs0', os.R_OK | os.W_OK))
print('ibdev', rd('/sys/class/infiniband_verbs/uverbs0/ibdev'))
print('classes', sorted(os.listdir('/sys/class/infiniband')))
PY
echo "python: exit $?"; cat "$t/py"
expect python "$t/py" "^gid0 0000:0000:0000:0000:0000:ffff:7f58:0001$" "^type0 RoCE v2$" "^ndev0 lo$" \
	"^net \['lo'\]$" "^uverbs0 chr True rw True$" "^ibdev uroce0$" "^classes \['uroce0'\]$"

# an address on no interface of ours: no ndev, and still loopback's GID
# format; a GID past the configured ones is the zero GID, as ib_core shows
UROCE_ADDR=127.88.0.1,127.88.0.2 "$L" run -- sh -c 'cat /sys/class/infiniband/uroce0/ports/1/gids/1 /sys/class/infiniband/uroce0/ports/1/gids/5; ls /sys/class/infiniband/uroce0/ports/1/gid_attrs/types | wc -l; ls /sys/class/infiniband/uroce0/ports/1/gids | wc -l' >"$t/two" 2>&1
cat "$t/two"
expect "two addresses" "$t/two" "^0000:0000:0000:0000:0000:ffff:7f58:0002$" "^0000:0000:0000:0000:0000:0000:0000:0000$" "^2$" "^1024$"

# per process: a finished program's view is gone
sh -c 'echo $$ >"$0/pid"; exec "$1" run -- cat /sys/class/infiniband/uroce0/node_type' "$t" "$L" >/dev/null
pid=$(cat "$t/pid")
left=$(ls -d /run/uroce/sysfs."$pid".* /dev/shm/uroce-"$(id -u)"/sysfs."$pid".* 2>/dev/null)
if [ -z "$left" ]; then echo "ok   no view left by pid $pid"; else echo "FAIL left behind: $left"; fail=1; fi
# a killed process cannot remove its view: the next process that makes
# one removes it (its owner lock is free)
"$L" run -- /usr/bin/python3 -c 'import os; open("/sys/class/infiniband/uroce0/node_type").read(); print(os.getpid(), flush=True); os.kill(os.getpid(), 9)' >"$t/killed" 2>/dev/null
kpid=$(cat "$t/killed")
views() { ls -d /run/uroce/sysfs."$1".* /dev/shm/uroce-"$(id -u)"/sysfs."$1".* 2>/dev/null; }
if [ -n "$kpid" ] && [ -n "$(views "$kpid")" ]; then echo "ok   the killed pid $kpid left its view"
else echo "FAIL the killed process (pid '$kpid') made no view"; fail=1; fi
"$L" run -- cat /sys/class/infiniband/uroce0/node_type >/dev/null
if [ -n "$kpid" ] && [ -z "$(views "$kpid")" ]; then echo "ok   the next view's maker removed it"
else echo "FAIL the killed process's view is still there: $(views "$kpid")"; fail=1; fi
# outside uroce: the system as it is
if [ -e /sys/class/infiniband/uroce0 ] || [ -e /sys/class/infiniband_verbs/uverbs0/ibdev ] &&
	grep -qx uroce0 /sys/class/infiniband_verbs/uverbs0/ibdev; then
	echo "FAIL uroce0 is visible outside uroce run"; fail=1
else
	echo "ok   nothing of the view outside uroce run"
fi
[ $fail = 0 ] && { echo PASS; exit 0; }
echo FAIL; exit 1
