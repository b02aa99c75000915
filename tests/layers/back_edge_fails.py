#!/usr/bin/env python3
"""back_edge_fails.py ROOT OBJDIR -- scripts/check_layers.py catches a back-edge.

Reads the room order from ROOT/docs/architecture.md (with check_layers's own
parser), picks a file of the lowest room and one of the highest, and runs
check_layers.py with --inject-edge LOW:HIGH -- a use of the top room by the
bottom one, which the dependency rule forbids.  Passes only when the check
exits 1 (not 0, not a crash or a usage error) and names that edge as a
violation, so a check that fails for some other reason does not count.
"""

import os
import subprocess
import sys

sys.dont_write_bytecode = True


def pick(root, folder):
    """The first .c file of a room (sorted), else its first header."""
    files = []
    for d, dirs, fns in os.walk(os.path.join(root, folder)):
        dirs.sort()
        files += [os.path.relpath(os.path.join(d, f), root) for f in sorted(fns)
                  if f.endswith(('.c', '.h'))]
    files.sort(key=lambda p: (not p.endswith('.c'), p))
    return files[0] if files else None


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    root, objdir = sys.argv[1], sys.argv[2]
    script = os.path.join(root, 'scripts', 'check_layers.py')
    sys.path.insert(0, os.path.dirname(script))
    import check_layers

    rooms = check_layers.read_rooms(os.path.join(root, 'docs', 'architecture.md'))
    if len(rooms) < 2:
        print(f'FAIL: need two rooms for a back-edge, the table has {rooms}')
        return 1
    low, high = pick(root, rooms[-1]), pick(root, rooms[0])
    if not low or not high:
        print(f'FAIL: no .c/.h file in {rooms[-1] if not low else rooms[0]}')
        return 1

    cmd = [sys.executable, script, root, '--objdir', objdir,
           '--inject-edge', f'{low}:{high}']
    print('$', ' '.join(cmd))
    run = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(run.stdout)
    sys.stdout.write(run.stderr)

    want = (f'{low}: uses {high} [<injected>] (room {check_layers.Rooms.name(rooms[0])} '
            f'above room {check_layers.Rooms.name(rooms[-1])})')
    ok = True
    if run.returncode != 1:
        print(f'FAIL: check_layers.py exited {run.returncode}, expected 1')
        ok = False
    if want not in run.stdout.splitlines():
        print(f'FAIL: the output does not name the injected back-edge: {want}')
        ok = False
    if not any(l.startswith('layers: ') for l in run.stdout.splitlines()):
        print('FAIL: no summary line')
        ok = False
    if ok:
        cyc = [l for l in run.stdout.splitlines()
               if l.startswith('cycle: ') and '<injected>' in l]
        print(f'ok: the back-edge {low} -> {high} is reported'
              + (' (and closes a cycle)' if cyc else ''))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
