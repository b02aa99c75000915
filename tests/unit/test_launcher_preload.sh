#!/bin/bash
# `uroce run` keeps every LD_PRELOAD entry of the caller, liburoce first and
# once (issue #16: `mpirun -x LD_PRELOAD=shim.so uroce run --`): entries
# separated by colons or spaces (ld.so's separators), a liburoce of another
# build dropped, an empty LD_PRELOAD giving liburoce alone.
#   test_launcher_preload.sh LAUNCHER LIBUROCE
set -u
LAUNCHER=$1 LIB=$2
# two libraries every Debian machine has, loadable as preloads (this
# architecture's: the launcher's own multiarch directory)
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -dumpmachine)
Z=$(ls /lib/$arch/libz.so.1 /usr/lib/$arch/libz.so.1 2>/dev/null | head -1)
M=$(ls /lib/$arch/libm.so.6 /usr/lib/$arch/libm.so.6 2>/dev/null | head -1)
[ -n "$Z" ] && [ -n "$M" ] || { echo "FAIL: libz or libm not found"; exit 1; }
fail=0
check() { # WANT LD_PRELOAD (a sanitizer build's runtime goes first: scripts/test.sh)
	local got
	set -- "${UROCE_SANITIZER_RUNTIME:+$UROCE_SANITIZER_RUNTIME:}$1" "$2"
	got=$(LD_PRELOAD="$2" "$LAUNCHER" run -- sh -c 'printf %s "$LD_PRELOAD"' 2>/dev/null)
	if [ "$got" = "$1" ]; then echo "ok: '$2' -> '$got'"; else echo "FAIL: '$2' -> '$got', want '$1'"; fail=1; fi
}
check "$LIB:$Z:$M" "$Z:$LIB $M"
check "$LIB:$Z" "$Z"
check "$LIB" ""
check "$LIB:$Z:$M" "/elsewhere/liburoce.so:$Z::$M"
check "$LIB:$M" "$LIB:$LIB:$M"
[ $fail = 0 ] && { echo PASS; exit 0; }
exit 1
