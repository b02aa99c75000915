#!/bin/bash
# The perftest matrix (perftest_matrix.py) on one host, or with "netns"
# between two network namespaces joined by a veth pair (tests/net/lib.sh;
# needs root and ip netns, skips with 77 otherwise).
#   run_matrix.sh [loopback|netns] [perftest_matrix.py args...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
where=${1:-loopback}
shift || true
if [ "$where" = netns ]; then
	. "$here/../net/lib.sh"
	netns_setup
	python3 "$here/perftest_matrix.py" --server-ns "$NS_B" --client-ns "$NS_A" \
		--server-addr "$ADDR_B" --client-addr "$ADDR_A" "$@"
	exit $?
fi
exec python3 "$here/perftest_matrix.py" "$@"
