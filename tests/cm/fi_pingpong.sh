#!/bin/bash
# libfabric's fi_pingpong, unmodified, over its verbs provider on uroce:
# -e msg (RC endpoints connected through rdma_cm: synchronous ids migrated
# to the endpoint's EQ channel) and -e dgram (UD, addresses by libfabric's
# name server), data checked (-c), server and client in one network
# namespace on one shared address.
# Why a namespace: the verbs provider offers msg endpoints only for an
# interface other than "lo" whose address rdma_cm binds (libfabric
# prov/verbs vrb_getifaddrs), so the test needs a veth.  Why 127.0.0.1 in
# UROCE_ADDR: fi_pingpong's server asks for no node, the provider then binds
# "localhost", which rdma_cm (the kernel's too) binds only where an RDMA
# device has that address; the server's endpoint listens there.
#   fi_pingpong.sh LAUNCHER
set -u
LAUNCHER=$1
command -v fi_pingpong >/dev/null || { echo "fi_pingpong not installed (libfabric-bin)"; exit 77; }
. "$(dirname "$0")/../net/lib.sh"
netns_setup
T=120
fail=0
for spec in "msg 64" "msg 65536" "dgram 1024"; do
	set -- $spec
	ep=$1 size=$2
	ip netns exec "$NS_A" env UROCE_ADDR="$ADDR_A,127.0.0.1" timeout $T "$LAUNCHER" run -- \
		fi_pingpong -p verbs -e "$ep" -I 1000 -S "$size" -c >"$NETNS_TMPDIR/s" 2>&1 &
	spid=$!
	# a client started before the server listens is refused; start it again
	sleep 1
	for try in $(seq 1 10); do
		ip netns exec "$NS_A" env UROCE_ADDR="$ADDR_A,127.0.0.1" timeout $T "$LAUNCHER" run -- \
			fi_pingpong -p verbs -e "$ep" -I 1000 -S "$size" -c "$ADDR_A" >"$NETNS_TMPDIR/c" 2>&1
		crc=$?
		grep -q "failed to connect: Connection refused" "$NETNS_TMPDIR/c" || break
		sleep 1
	done
	wait $spid
	src=$?
	echo "--- fi_pingpong -e $ep -S $size: server exit $src, client exit $crc"
	tail -n 3 "$NETNS_TMPDIR/c"
	[ $src = 0 ] && [ $crc = 0 ] && grep -q "^[0-9.]*[km]* *1k *=1k" "$NETNS_TMPDIR/c" || { fail=1; tail -n 5 "$NETNS_TMPDIR/s"; }
done
[ $fail = 0 ] && { echo PASS; exit 0; }
echo FAIL
exit 1
