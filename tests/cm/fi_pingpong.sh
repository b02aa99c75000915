#!/bin/bash
# libfabric's fi_pingpong, unmodified, over its verbs provider on uroce:
# -e msg (RC endpoints connected through rdma_cm: synchronous ids migrated
# to the endpoint's EQ channel), -e dgram (UD, addresses by libfabric's
# name server) and -e rdm over ofi_rxm (msg endpoints connected on demand,
# a CQ of 786,432 entries: util/limits.h UROCE_MAX_CQE), data checked
# (-c), each side given only its veth's address:
# server and client in one network namespace on its one address, then the
# client in the other namespace.
# Why a namespace: the verbs provider offers msg endpoints only for an
# interface other than "lo" whose address rdma_cm binds (libfabric
# prov/verbs vrb_getifaddrs).  The msg server, given no node, binds
# "localhost"; rdma_cm binds a loopback address no device has as the
# wildcard (the kernel's cma_any_addr; cm/rdma_cm.c rdma_bind_addr), so
# the provider takes the interface's address for the endpoint it names to
# the client (vrb_fill_addr), which is how the kernel's rxe runs it
# between two hosts.
#   fi_pingpong.sh LAUNCHER
set -u
LAUNCHER=$1
command -v fi_pingpong >/dev/null || { echo "fi_pingpong not installed (libfabric-bin)"; exit 77; }
. "$(dirname "$0")/../net/lib.sh"
netns_setup
T=120
fail=0
for spec in "verbs msg 64 A" "verbs msg 65536 A" "verbs dgram 1024 A" "verbs;ofi_rxm rdm 4096 A" \
	    "verbs msg 64 B" "verbs msg 65536 B" "verbs dgram 1024 B" "verbs;ofi_rxm rdm 4096 B"; do
	set -- $spec
	prov=$1 ep=$2 size=$3
	if [ "$4" = A ]; then cns=$NS_A caddr=$ADDR_A; else cns=$NS_B caddr=$ADDR_B; fi
	ip netns exec "$NS_A" env UROCE_ADDR="$ADDR_A" timeout $T "$LAUNCHER" run -- \
		fi_pingpong -p "$prov" -e "$ep" -I 1000 -S "$size" -c >"$NETNS_TMPDIR/s" 2>&1 &
	spid=$!
	# a client started before the server listens is refused; start it again
	sleep 1
	for try in $(seq 1 10); do
		ip netns exec "$cns" env UROCE_ADDR="$caddr" timeout $T "$LAUNCHER" run -- \
			fi_pingpong -p "$prov" -e "$ep" -I 1000 -S "$size" -c "$ADDR_A" >"$NETNS_TMPDIR/c" 2>&1
		crc=$?
		grep -q "failed to connect: Connection refused" "$NETNS_TMPDIR/c" || break
		sleep 1
	done
	wait $spid
	src=$?
	echo "--- fi_pingpong -p $prov -e $ep -S $size, client in $cns ($caddr): server exit $src, client exit $crc"
	tail -n 3 "$NETNS_TMPDIR/c"
	[ $src = 0 ] && [ $crc = 0 ] && grep -q "^[0-9.]*[km]* *1k *=1k" "$NETNS_TMPDIR/c" || { fail=1; tail -n 5 "$NETNS_TMPDIR/s"; }
done
[ $fail = 0 ] && { echo PASS; exit 0; }
echo FAIL
exit 1
