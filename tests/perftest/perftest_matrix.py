#!/usr/bin/env python3
"""Every perftest RC tool, unmodified, through `uroce run`: default runs, -a,
-q 4, -e, -I, -b and -D with --cpu_util, as far as each tool takes them.

Each case runs the tool's server and client (two uroce processes, on one host
or in two network namespaces, see run_matrix.sh) and checks:
  * both exit 0;
  * the result table has the rows the options ask for (-a: every size from
    2 B to 8 MiB), with positive iteration counts and figures that agree
    with each other (bandwidth = message rate x size; lat: min <= typical
    <= max);
  * what perftest says moved agrees with what uroce moved: the UDP payload
    both processes sent (UROCE_STATS counters) is at least the messages x
    size perftest reports, and -- outside duration mode, where perftest
    leaves warm-up traffic out of its figures -- at most that plus headers
    of every packet and the resent packets.

usage: perftest_matrix.py [--server-ns NS --client-ns NS --server-addr A
                           --client-addr A] [--only TOOL[:MODE]] [--list]
env:   UROCE  the launcher (default build/bin/uroce)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UROCE = os.environ.get('UROCE', os.path.join(ROOT, 'build', 'bin', 'uroce'))

# -a and its 23 sizes up to 8 MiB at perftest's default iterations (5000
# for bandwidth) would move ~80 GB per tool: 100 iterations per size keep
# the case to seconds and still cover every size
MODES = {
    'default': [],
    'a': ['-a', '-n', '100'],
    'q4': ['-q', '4'],
    'e': ['-e'],
    'I': ['-s', '64', '-I', '64'],
    'b': ['-b'],
    'D': ['-D', '2', '--cpu_util'],
}
# which options each tool takes (its --help)
TOOLS = {
    'ib_send_bw': ('bw', ['default', 'a', 'q4', 'e', 'I', 'b', 'D']),
    'ib_send_lat': ('lat', ['default', 'a', 'e', 'I', 'D']),
    'ib_write_bw': ('bw', ['default', 'a', 'q4', 'I', 'b', 'D']),
    'ib_write_lat': ('lat', ['default', 'a', 'I', 'D']),
    'ib_read_bw': ('bw', ['default', 'a', 'q4', 'e', 'b', 'D']),
    'ib_read_lat': ('lat', ['default', 'a', 'e', 'D']),
    'ib_atomic_bw': ('bw', ['default', 'q4', 'e', 'b', 'D']),
    'ib_atomic_lat': ('lat', ['default', 'e', 'D']),
}
A_SIZES = [2 << i for i in range(23)]          # 2 B .. 8 MiB
HDR_MAX = 12 + 16 + 28 + 4 + 3                  # BTH + RETH + AtomicETH + ICRC + pad, per packet
RUN_BOUND = 180                                 # s per program


def counters(text):
    """UROCE_STATS=1 output: 'uroce:   name   value  meaning'."""
    c = {}
    for m in re.finditer(r'^uroce:\s+([a-z_0-9]+)\s+(\d+)\b', text, re.M):
        c[m.group(1)] = int(m.group(2))
    return c


def table(text):
    """perftest's result rows: the lines of numbers after the '#bytes' header."""
    rows, seen = [], False
    for line in text.splitlines():
        if line.strip().startswith('#bytes'):
            seen = True
            continue
        if not seen:
            continue
        f = line.split()
        # perftest prints t_stdev as -nan when its variance sum goes
        # negative by rounding (a spread of latencies over a stalled
        # host): the row is a result all the same
        if f and all(re.fullmatch(r'[0-9.]+|-?nan', x) for x in f) and len(f) >= 3:
            rows.append([float(x) for x in f])
        elif f and f[0].startswith('---') and rows:
            break
    return rows


def ns_prefix(ns):
    return ['ip', 'netns', 'exec', ns] if ns else []


def listening(ns, port):
    out = subprocess.run(ns_prefix(ns) + ['ss', '-ltnH', f'sport = :{port}'],
                         capture_output=True, text=True).stdout
    return bool(out.strip())


def run_case(tool, mode, port, topo):
    kind = TOOLS[tool][0]
    args = ['-p', str(port), '-x', '0'] + MODES[mode]
    env = dict(os.environ, UROCE_STATS='1')
    senv = dict(env, **({'UROCE_ADDR': topo['server_addr']} if topo['server_addr'] else {}))
    cenv = dict(env, **({'UROCE_ADDR': topo['client_addr']} if topo['client_addr'] else {}))
    target = topo['server_addr'] or '127.0.0.1'
    server = subprocess.Popen(ns_prefix(topo['server_ns']) + ['timeout', str(RUN_BOUND), UROCE, 'run', '--', tool] + args,
                              env=senv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the client connects once: start it when the server listens
    deadline = time.monotonic() + 30
    while not listening(topo['server_ns'], port):
        if server.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    client = subprocess.run(ns_prefix(topo['client_ns']) + ['timeout', str(RUN_BOUND), UROCE, 'run', '--', tool] + args + [target],
                            env=cenv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sout, serr = server.communicate(timeout=RUN_BOUND + 10)
    except subprocess.TimeoutExpired:
        server.kill()
        sout, serr = server.communicate()
    # perftest's results on stdout, uroce's counters (UROCE_STATS) on stderr
    cout, cerr = client.stdout, client.stderr
    problems = []
    if client.returncode != 0 or server.returncode != 0:
        problems.append(f'exit status: client {client.returncode}, server {server.returncode}')
    rows = table(cout)
    if not rows:
        problems.append('no result rows in the client output')
    else:
        problems += check_rows(kind, mode, rows)
        problems += check_moved(tool, kind, mode, rows, counters(cerr), counters(serr))
    return problems, cout + cerr, sout + serr, rows


def check_rows(kind, mode, rows):
    p = []
    if mode == 'a':
        sizes = [int(r[0]) for r in rows]
        if sizes != A_SIZES:
            p.append(f'-a rows for sizes {sizes}, expected {A_SIZES}')
    elif len(rows) != 1:
        p.append(f'{len(rows)} result rows, expected 1')
    for r in rows:
        size, iters = r[0], r[1]
        if iters <= 0:
            p.append(f'size {size:.0f}: {iters:.0f} iterations')
            continue
        if kind == 'bw':
            # #bytes #iterations BW_peak BW_average MsgRate [CPU...]: BW in
            # MB/s (2^20) = MsgRate (Mpps) x size
            bw_avg, rate = r[3], r[4]
            # BW is printed to 2 decimals: a slow size's may read 0.00
            if bw_avg < 0 or rate <= 0:
                p.append(f'size {size:.0f}: bandwidth {bw_avg} MB/s, rate {rate} Mpps')
            elif abs(rate * 1e6 * size / 2**20 - bw_avg) > 0.02 * bw_avg + 0.02:
                p.append(f'size {size:.0f}: {rate} Mpps x {size:.0f} B != {bw_avg} MB/s')
        elif mode == 'D':
            # #bytes #iterations t_avg tps [CPU...]
            if r[2] <= 0 or r[3] <= 0:
                p.append(f'size {size:.0f}: t_avg {r[2]} us, {r[3]} tps')
        else:
            # #bytes #iterations t_min t_max t_typical t_avg t_stdev p99 p99.9
            tmin, tmax, ttyp = r[2], r[3], r[4]
            if not (0 < tmin <= ttyp <= tmax):
                p.append(f'size {size:.0f}: t_min {tmin} <= t_typical {ttyp} <= t_max {tmax} does not hold')
    return p


def payload_bytes(tool, kind, mode, rows):
    """Bytes perftest says moved, summed over both directions."""
    total = 0
    for r in rows:
        size, iters = r[0], r[1]
        if 'atomic' in tool:
            size = 8
        msgs = iters
        if kind == 'lat' and tool in ('ib_send_lat', 'ib_write_lat'):
            msgs = 2 * iters          # a ping-pong: both sides send each iteration
        if mode == 'b':
            msgs = 2 * iters          # bidirectional: both sides run the test
        total += msgs * size
    return total


def check_moved(tool, kind, mode, rows, cc, sc):
    if 'tx_bytes' not in cc or 'tx_bytes' not in sc:
        return ['no UROCE_STATS counters in the output']
    claimed = payload_bytes(tool, kind, mode, rows)
    # a same-host peer copies large messages straight from the sender's
    # memory (ref_bytes_tx: bytes sent by reference, not in any packet)
    sent = cc['tx_bytes'] + sc['tx_bytes'] + cc.get('ref_bytes_tx', 0) + sc.get('ref_bytes_tx', 0)
    packets = cc['tx_packets'] + sc['tx_packets']
    resent = cc.get('retransmits', 0) + sc.get('retransmits', 0)
    p = []
    if sent < claimed:
        p.append(f'perftest reports {claimed} payload bytes, uroce sent {sent} (UDP payload bytes and bytes by reference)')
    if mode != 'D':
        # -q 4 and -b: perftest's figures are per side/QP as printed; allow
        # the headers of every packet and any resent packet in full
        bound = claimed + packets * HDR_MAX + resent * 4200 + 1000000
        if sent > bound:
            p.append(f'uroce sent {sent} UDP payload bytes, perftest reports {claimed} '
                     f'(+ headers of {packets} packets, {resent} resent: at most {bound})')
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--server-ns')
    ap.add_argument('--client-ns')
    ap.add_argument('--server-addr')
    ap.add_argument('--client-addr')
    ap.add_argument('--only', action='append', default=[], help='TOOL or TOOL:MODE')
    ap.add_argument('--list', action='store_true')
    ap.add_argument('--port', type=int, default=18700)
    a = ap.parse_args()
    topo = dict(server_ns=a.server_ns, client_ns=a.client_ns, server_addr=a.server_addr,
                client_addr=a.client_addr)
    if not shutil.which('ib_write_bw'):
        print('perftest is not installed (apt-get install perftest): skipped')
        return 77
    cases = [(t, m) for t, (_, modes) in TOOLS.items() for m in modes
             if not a.only or t in a.only or f'{t}:{m}' in a.only]
    if a.list:
        for t, m in cases:
            print(t, ' '.join(MODES[m]))
        return 0
    where = f'{a.client_ns} -> {a.server_ns}' if a.server_ns else 'one host'
    print(f'perftest matrix ({where}): {len(cases)} cases')
    failed = []
    t0 = time.monotonic()
    for i, (tool, mode) in enumerate(cases):
        t = time.monotonic()
        problems, cout, sout, rows = run_case(tool, mode, a.port + i, topo)
        line = f'{tool} {" ".join(MODES[mode]) or "(default)"}'
        if problems:
            failed.append(line)
            print(f'FAIL {line} ({time.monotonic() - t:.1f}s)')
            for x in problems:
                print(f'     {x}')
            print('---- client output (tail)')
            print('\n'.join(cout.splitlines()[-25:]))
            print('---- server output (tail)')
            print('\n'.join(sout.splitlines()[-25:]))
        else:
            r = rows[-1]
            print(f'ok   {line}: {len(rows)} row(s), last {" ".join(f"{x:g}" for x in r[:6])} '
                  f'({time.monotonic() - t:.1f}s)')
        sys.stdout.flush()
    print(f'perftest matrix ({where}): {len(cases) - len(failed)}/{len(cases)} ok in {time.monotonic() - t0:.0f}s')
    for f in failed:
        print(f'  failed: {f}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
