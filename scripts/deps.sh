#!/bin/bash
# Installs, from Debian's packages, whatever uroce's build, demo and tests
# need and the machine lacks.  Sourced by demo.sh and test.sh.
UROCE_PACKAGES="cmake make gcc libc6-dev pkg-config python3 iproute2
  libibverbs-dev libibverbs1 ibverbs-utils ibverbs-providers perftest python3-pyverbs
  librdmacm-dev librdmacm1 rdmacm-utils libfabric-bin fio librpma-dev
  ucx-utils openmpi-bin libopenmpi-dev infiniband-diags
  libisal-dev libpcap-dev zlib1g-dev libnetfilter-queue-dev libxdp-dev libbpf-dev
  nftables iptables tshark python3-scapy qperf sockperf gnuplot-nox
  qemu-system-x86 kmod cpio binutils xz-utils strace
  clang libclang-rt-dev"

uroce_install_deps() {
	local missing=()
	for p in $UROCE_PACKAGES; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "uroce: installing from Debian: ${missing[*]}"
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get update -qq || return 1
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || return 1
}

uroce_build() {
	local dir=$1; shift
	cmake -S "$UROCE_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null &&
		cmake --build "$dir" -j"$(nproc)"
}
