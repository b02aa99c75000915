#!/bin/bash
# Open MPI, unmodified, over uroce (issue #16): our MPI program
# (mpi_check.c: ping-pong 1 B - 4 MiB with data checks, allreduce,
# alltoall) on NP ranks, through
#   ucx: --mca pml ucx, UCX on uroce0:1 (rc_verbs, UD for wire-up)
#   ofi: --mca pml cm --mca mtl ofi, libfabric's verbs;ofi_rxd
#   tcp: --mca pml ob1 --mca btl tcp,self (no uroce: the bench's baseline)
# on one host (`uroce run -- mpirun`, every rank a child of it), or across
# two network namespaces: mpirun in NS_A, the ranks split between NS_A and
# NS_B, NS_B's started by Open MPI's rsh launcher through an agent of ours
# that enters the namespace (`ip netns exec`) where ssh would log in; each
# namespace's ranks on its veth address.  The output of mpi_check goes to
# stdout (the bench reads its "pingpong" lines); the last line says PASS
# only when mpirun exited 0 (mpi_check's own PASS line comes before
# MPI_Finalize).
#   mpi.sh LAUNCHER MPI_CHECK host|netns ucx|ofi|tcp NP
set -u
L=$1 PROG=$2 MODE=$3 PML=$4 NP=$5
command -v mpirun >/dev/null || { echo "openmpi-bin not installed"; exit 1; }
T=300
# CI runs as root; Open MPI refuses root unless told
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
case $PML in
ucx) args=(--mca pml ucx --mca osc ucx -x UCX_TLS=rc_verbs,ud_verbs -x UCX_NET_DEVICES=uroce0:1 -x UCX_WARN_UNUSED_ENV_VARS=n) ;;
ofi) args=(--mca pml cm --mca mtl ofi -x "FI_PROVIDER=verbs;ofi_rxd") ;;
tcp) args=(--mca pml ob1 --mca btl tcp,self) ;;
*) echo "unknown pml $PML"; exit 2 ;;
esac
run=("$L" run --)
[ "$PML" = tcp ] && run=()
if [ "$MODE" = netns ]; then
	. "$(dirname "$0")/../net/lib.sh"
	netns_setup
	net=${ADDR_A%.*}.0/24
	cat >"$NETNS_TMPDIR/agent" <<AGENT
#!/bin/sh
# Open MPI's rsh agent: HOST COMMAND... -> COMMAND in HOST's namespace
h=\$1; shift
case \$h in
$ADDR_A) ns=$NS_A ;;
$ADDR_B) ns=$NS_B ;;
*) echo "agent: unknown host \$h" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" env UROCE_ADDR="\$h" sh -c "\$*"
AGENT
	chmod +x "$NETNS_TMPDIR/agent"
	printf '%s slots=%d\n%s slots=%d\n' "$ADDR_A" $(((NP + 1) / 2)) "$ADDR_B" $((NP / 2)) >"$NETNS_TMPDIR/hosts"
	# the TCP paths (Open MPI's out-of-band and btl tcp) on the veth; the
	# two "nodes" are one machine, whose cores each would bind its first
	# rank to: core 0 twice, two spinning ranks on one CPU
	args+=(--hostfile "$NETNS_TMPDIR/hosts" --map-by node --bind-to none --mca plm_rsh_agent "$NETNS_TMPDIR/agent"
	       --mca oob_tcp_if_include "$net" --mca btl_tcp_if_include "$net")
	ip netns exec "$NS_A" env UROCE_ADDR="$ADDR_A" timeout $T "${run[@]}" mpirun -np "$NP" "${args[@]}" "$PROG"
	rc=$?
else
	timeout $T "${run[@]}" mpirun -np "$NP" "${args[@]}" "$PROG"
	rc=$?
fi
echo "mpirun: exit $rc"
[ $rc = 0 ] && echo "PASS ($MODE, pml $PML, $NP ranks)"
exit $rc
