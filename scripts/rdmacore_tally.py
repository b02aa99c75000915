#!/usr/bin/env python3
"""rdmacore_tally.py -- tally rdma-core v44's pyverbs suite on uroce and keep
README.md's table of the remaining skips true.

  rdmacore_tally.py UROCE [--suite DIR] [--write README.md] [--floors]

Runs every generic module (the list in tests/rdmacore/CMakeLists.txt)
through tests/rdmacore/run_module.py, prints each module's ok / skipped /
failed / error counts and the total, and a markdown table of the skips:
one row per reason, with how many tests give it and why it remains (the
WHY table below; a reason it does not know is "unclassified", which
--write refuses).  --write replaces the table under README.md's heading
"### rdma-core's suite: what remains skipped"; --floors prints lines for
tests/rdmacore/floors.txt.  Exit 1 when a module failed.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

from readme_config import table_span

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HEADING = "### rdma-core's suite: what remains skipped"

# (pattern of "module: skip reason", why it remains), first match wins
HW = 'hardware only'
WHY = [
    (r'^tag_matching: ', f'{HW}: tag matching offload (its extended CQs and SRQs)'),
    (r'dmabuf', f'{HW}: dma-buf MRs need a GPU render node exporting dma-bufs (`/dev/dri/renderD128`)'),
    (r'Raw Packet|QP type 8', f'{HW}: raw packet QPs (Ethernet frames below RoCE)'),
    (r'[Ff]low|steering', f'{HW}: flow steering of raw packet QPs'),
    (r'RSS|WQ', f'{HW}: receive-side scaling over work queues'),
    (r'[Tt]ag[ -]matching|TM ', f'{HW}: tag matching offload'),
    (r'huge pages', 'environment: no 2 MiB huge pages reserved (run as root to let the test reserve them)'),
    (r'Extended QP', 'not built yet: the `ibv_wr_*` API (`ibv_qp_to_qp_ex`)'),
    (r'XRCD|XRC', 'not built yet: XRC'),
    (r'MW|memory window', 'not built yet: memory windows'),
    (r'Extended CQ', 'not built yet: extended CQs in a parent domain'),
    (r'Parent Domain', 'not built yet: parent domains'),
    (r"doesn't have net interface", 'without `UROCE_ADDR`: pyverbs takes the first address of the '
     'interface in `/sys/class/infiniband/<dev>/device/net/`, and an automatic address is on no '
     "interface's list, so the view has no `device/net`; with `UROCE_ADDR=127.0.0.1` 7 of the 10 "
     'pass, the two multicast tests and the external-QP test do not yet'),
    (r'imports', 'not built yet: `ibv_import_device` / object import (shared contexts)'),
    (r'[Ss]hared PD|[Ii]mport', 'not built yet: `ibv_import_device` / object import (shared contexts)'),
]


def modules():
    with open(os.path.join(ROOT, 'tests', 'rdmacore', 'CMakeLists.txt')) as f:
        text = f.read()
    body = re.search(r'set\(RDMACORE_MODULES(.*?)\)', text, re.S).group(1)
    return body.split()


def why(module, reason):
    key = f"{module.replace('test_', '')}: {reason}"
    for pat, w in WHY:
        if re.search(pat, key):
            return w
    return 'unclassified'


def table(skips):
    by = {}
    for module, tid, reason in skips:
        w = why(module, reason)
        by.setdefault((reason, w), []).append(module)
    rows = ['| skip reason (as pyverbs prints it) | tests | modules | why it remains |', '|---|---|---|---|']
    for reason, w in sorted(by, key=lambda k: (k[1], -len(by[k]), k[0])):
        mods = by[(reason, w)]
        names = ', '.join(sorted(set(m.replace('test_', '') for m in mods)))
        rows.append(f'| {reason.replace("|", "/")} | {len(mods)} | {names} | {w} |')
    return rows


def write_readme(path, rows):
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    start, end = table_span(lines, HEADING)
    lines[start:end] = rows
    with open(path, 'w', encoding='utf-8') as f:
        f.write('\n'.join(lines))


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    launcher = argv[1]
    suite = os.path.join(os.path.dirname(ROOT), 'shared', 'rdma-core-v44')
    readme = None
    floors = False
    i = 2
    while i < len(argv):
        if argv[i] == '--suite':
            suite = argv[i + 1]
            i += 1
        elif argv[i] == '--write':
            readme = argv[i + 1]
            i += 1
        elif argv[i] == '--floors':
            floors = True
        else:
            print(__doc__.strip(), file=sys.stderr)
            return 2
        i += 1
    total = {'ok': 0, 'skipped': 0, 'failed': 0, 'errors': 0}
    skips, counts, bad = [], [], False
    for m in modules():
        fd, out = tempfile.mkstemp(suffix='.json')
        os.close(fd)
        r = subprocess.run([sys.executable, os.path.join(ROOT, 'tests', 'rdmacore', 'run_module.py'),
                            '--launcher', launcher, '--suite', suite, '--json', out, m],
                           capture_output=True, text=True, errors='replace')
        try:
            with open(out) as f:
                d = json.load(f)
        except (OSError, ValueError):
            d = {'ok': [], 'skipped': [], 'failed': [m], 'errors': []}
        os.unlink(out)
        n = {k: len(d[k]) for k in total}
        for k in total:
            total[k] += n[k]
        bad |= r.returncode not in (0, 77) or bool(n['failed'] or n['errors'])
        counts.append((m, n['ok']))
        skips += [(m, tid, reason) for tid, reason in d['skipped']]
        print(f"{m:24} {n['ok']:3} ok {n['skipped']:3} skipped {n['failed']:2} failed {n['errors']:2} errors",
              flush=True)
    print(f"{'total':24} {total['ok']:3} ok {total['skipped']:3} skipped {total['failed']:2} failed "
          f"{total['errors']:2} errors")
    rows = table(skips)
    print()
    print('\n'.join(rows))
    if floors:
        print()
        for m, n in counts:
            print(f'{m} {n}')
    if readme:
        if any('unclassified' in r for r in rows):
            print('rdmacore_tally: unclassified skip reasons; add them to WHY', file=sys.stderr)
            return 1
        write_readme(readme, rows)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
