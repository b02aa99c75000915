#!/usr/bin/env python3
"""The middleware beside TCP, in one run (issue #16's bench):

  UCX   ucx_perftest tag_lat (us) and ucp_put_bw (MB/s): UCX_TLS=rc_verbs,ud_verbs
        on uroce0:1 (the tag and put lanes are rc_verbs) against UCX_TLS=tcp
  MPI   tests/middleware/mpi_check's ping-pong (half round trip, us, and MB/s):
        Open MPI's pml ucx on uroce against pml ob1 + btl tcp

at 8 B, 4 KiB, 64 KiB and 1 MiB, on one host (automatic addresses, the
same-host rings; TCP over loopback) and, as root, between two network
namespaces (veth addresses; UDP through the veth, TCP through the veth).
Each figure is the median of --reps runs, uroce and TCP alternated.

  bench/middleware.py [--reps N] [--modes host,netns] [--build DIR]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [8, 4096, 65536, 1048576]


def sh(cmd, env=None, timeout=300):
    """(exit status, output); a run past its time is a failed one (the
    scripts' own timeouts stop what they started)."""
    e = dict(os.environ)
    e.update(env or {})
    try:
        p = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as x:
        out = x.stdout.decode(errors='replace') if isinstance(x.stdout, bytes) else (x.stdout or '')
        return 124, out
    return p.returncode, p.stdout


def ucx_pair(launcher, mode, tls, test, size, iters):
    """One ucx_perftest run through tests/middleware's harness would check;
    here the server and client are started directly (host) or in the
    namespaces of a throwaway netns set-up (netns), by bench/ucx_pair.sh."""
    script = os.path.join(ROOT, 'bench', 'ucx_pair.sh')
    rc, out = sh(['bash', script, launcher, mode, tls, test, str(size), str(iters)])
    m = re.findall(r'^\s+\d+\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)', out, re.M)
    if rc != 0 or not m:
        sys.stderr.write('ucx_perftest %s %s %s %d failed:\n%s\n' % (mode, tls, test, size, out[-800:]))
        return None
    lat50, lat_avg, _, bw_avg, _ = (float(x) for x in m[-1])
    return lat50 if test == 'tag_lat' else bw_avg


def mpi_run(launcher, prog, mode, pml):
    rc, out = sh(['bash', os.path.join(ROOT, 'tests', 'middleware', 'mpi.sh'), launcher, prog, mode, pml, '2'], timeout=600)
    rows = {}
    for size, us, mbps in re.findall(r'^pingpong (\d+) ([0-9.]+) ([0-9.]+)$', out, re.M):
        rows[int(size)] = (float(us), float(mbps))
    if rc != 0 or not rows:
        sys.stderr.write('mpi %s %s failed:\n%s\n' % (mode, pml, out[-800:]))
        return None
    return rows


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, unit):
    if v is None:
        return 'failed'
    return ('%.2f' % v if v < 100 else '%.0f' % v) + ' ' + unit


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--modes', default='host,netns' if os.geteuid() == 0 else 'host')
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    a = ap.parse_args()
    launcher = os.path.join(a.build, 'bin', 'uroce')
    prog = os.path.join(a.build, 'bin', 'mpi_check')
    for f in (launcher, prog):
        if not os.access(f, os.X_OK):
            sys.exit('middleware.py: %s missing: build first (cmake --build build)' % f)
    for mode in a.modes.split(','):
        ucx = {}
        for test in ('tag_lat', 'ucp_put_bw'):
            for size in SIZES:
                iters = 20000 if size <= 4096 else 2000 if size <= 65536 else 300
                for tls in ('rc_verbs,ud_verbs', 'tcp'):
                    ucx[(test, size, tls)] = med([ucx_pair(launcher, mode, tls, test, size, iters)
                                                  for _ in range(a.reps)])
        mpi = {'ucx': [], 'tcp': []}
        for _ in range(a.reps):
            for pml in ('ucx', 'tcp'):
                mpi[pml].append(mpi_run(launcher, prog, mode, pml))
        where = 'one host' if mode == 'host' else 'two network namespaces (veth)'
        print('\n### Middleware beside TCP, %s (median of %d)\n' % (where, a.reps))
        print('| size | UCX tag_lat uroce | UCX tag_lat TCP | UCX put_bw uroce | UCX put_bw TCP '
              '| MPI lat uroce | MPI lat TCP | MPI bw uroce | MPI bw TCP |')
        print('|---|---|---|---|---|---|---|---|---|')
        for size in SIZES:
            def mp(pml, k):
                return med([r[size][k] if r and size in r else None for r in mpi[pml]])
            print('| %d | %s | %s | %s | %s | %s | %s | %s | %s |' % (
                size,
                fmt(ucx[('tag_lat', size, 'rc_verbs,ud_verbs')], 'us'), fmt(ucx[('tag_lat', size, 'tcp')], 'us'),
                fmt(ucx[('ucp_put_bw', size, 'rc_verbs,ud_verbs')], 'MB/s'), fmt(ucx[('ucp_put_bw', size, 'tcp')], 'MB/s'),
                fmt(mp('ucx', 0), 'us'), fmt(mp('tcp', 0), 'us'), fmt(mp('ucx', 1), 'MB/s'), fmt(mp('tcp', 1), 'MB/s')))
        sys.stdout.flush()


if __name__ == '__main__':
    main()
