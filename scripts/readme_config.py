#!/usr/bin/env python3
"""readme_config.py -- README.md's configuration table is the config table.

The table under "## Configuration (environment)" in README.md (its first run
of '|' lines) must be exactly, row for row and in order, what
`uroce info --settings-markdown` prints from src/util/config_table.h.

  readme_config.py README.md UROCE            check: exit 0 same, 1 differs
  readme_config.py README.md UROCE --write    replace README's table with it

Exit 2 when the check cannot be made (no such heading or table, the launcher
failed).  Python standard library only.
"""

import difflib
import subprocess
import sys

HEADING = '## Configuration (environment)'


def table_span(lines, heading=HEADING):
    """[start, end) of the table's lines under heading (scripts/rdmacore_tally.py
    uses it for its table too)."""
    try:
        h = lines.index(heading)
    except ValueError:
        raise SystemExit(f'readme_config: no "{heading}" heading')
    start = h + 1
    while start < len(lines) and not lines[start].startswith('|'):
        if lines[start].startswith('#'):
            raise SystemExit('readme_config: no table under the heading')
        start += 1
    end = start
    while end < len(lines) and lines[end].startswith('|'):
        end += 1
    if start == end:
        raise SystemExit('readme_config: no table under the heading')
    return start, end


def main(argv):
    if len(argv) not in (3, 4) or (len(argv) == 4 and argv[3] != '--write'):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    readme, launcher = argv[1], argv[2]
    try:
        out = subprocess.run([launcher, 'info', '--settings-markdown'], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f'readme_config: {launcher}: {e}', file=sys.stderr)
        return 2
    generated = out.splitlines()
    # a '|' in a help or default would add a column
    bad = [r for r in generated if r.count('|') != 4]
    if bad:
        print('readme_config: rows that are not 3 cells:', *bad, sep='\n  ', file=sys.stderr)
        return 1
    with open(readme, encoding='utf-8') as f:
        lines = f.read().split('\n')
    try:
        start, end = table_span(lines)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    if len(argv) == 4:
        lines[start:end] = generated
        with open(readme, 'w', encoding='utf-8') as f:
            f.write('\n'.join(lines))
        return 0
    if lines[start:end] == generated:
        print(f'readme_config: {len(generated) - 2} settings, README agrees')
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        [l + '\n' for l in lines[start:end]], [l + '\n' for l in generated],
        'README.md', 'uroce info --settings-markdown'))
    print('readme_config: README.md differs from src/util/config_table.h; regenerate it with\n'
          f'  {argv[0]} {readme} {launcher} --write')
    return 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
