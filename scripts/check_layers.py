#!/usr/bin/env python3
"""check_layers.py -- the source tree's dependencies point one way.

docs/architecture.md's dependency rule: the library's source is split into
rooms (the folders of src/), listed top to bottom as the rows of the table
under "## Tree".  A file may depend on files of its own room and of the rooms
below it (later rows), never on a room above, and no two source files may
depend on each other, directly or through others.  This script checks that
rule on the two dependency graphs a C tree has:

  * the include graph: every quoted #include "..." of every .c/.h under src/,
    resolved relative to the including file, then relative to src/
    (#include <...> is ignored: it is never one of ours);
  * the symbol graph (with --objdir): object A -> object B when A uses
    (nm: U) a global symbol that B defines (T D B R W V C ...), read with nm
    from the compiled objects of the library.

It reports, and exits 1 on:
  * a subfolder of src/ holding .c/.h files with no row in the table, or a
    row whose folder does not exist (the doc and the tree must name each
    other);
  * an include or a symbol use that points to a room above the user's;
  * every cycle: each strongly connected component of more than one file of
    the symbol graph, and each cycle of the include graph, given as one
    concrete path (with the symbols on each edge of a symbol cycle).

A cycle inside one room is a cycle all the same: the room order says which
way rooms point, the absence of cycles says that files point one way too.

--inject-edge FROM:TO adds a fake symbol edge before the checks, so a test
can show that a deliberately added back-edge is caught.

Exit status: 0 clean (one summary line), 1 problems found (listed, then the
summary line), 2 the check could not be made (bad arguments, no table, no
objects, nm failed).  Python standard library only, plus binutils' nm.
"""

import argparse
import collections
import os
import re
import subprocess
import sys

# ---------------------------------------------------------------- the table

ROW_FOLDER = re.compile(r'^`?(src/[^`|]*/)`?$')


class Fatal(Exception):
    """The check cannot be made at all (exit 2)."""


def read_rooms(doc_path):
    """The rooms, top to bottom: 'src/<room>/' folders from the first cells of
    the table rows under '## Tree' (up to the next '#' or '##' heading).
    Rows whose first cell is not a src/ folder (tools/, tests/, the header
    row, files) are ignored."""
    try:
        with open(doc_path, encoding='utf-8') as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise Fatal(f'cannot read {doc_path}: {e.strerror}')
    rooms, in_tree, seen_heading = [], False, False
    for line in lines:
        heading = re.match(r'^(#+)\s+(.*?)\s*$', line)
        if heading:
            if in_tree and len(heading.group(1)) <= 2:
                break
            if heading.group(1) == '##' and heading.group(2) == 'Tree':
                in_tree = seen_heading = True
            continue
        if not in_tree or not line.lstrip().startswith('|'):
            continue
        cells = line.strip().strip('|').split('|')
        m = ROW_FOLDER.match(cells[0].strip())
        if m:
            rooms.append(os.path.normpath(m.group(1)) + '/')
    if not seen_heading:
        raise Fatal(f'{doc_path}: no "## Tree" heading')
    if not rooms:
        raise Fatal(f'{doc_path}: no | `src/<room>/` | rows under "## Tree"')
    return rooms


class Rooms:
    """Room order and the room of a file (the deepest row folder holding it)."""

    def __init__(self, folders):
        self.folders = folders
        self.rank = {}
        for i, folder in enumerate(folders):
            self.rank.setdefault(folder, i)

    def of(self, path):
        best = None
        for folder in self.folders:
            if path.startswith(folder) and (best is None or len(folder) > len(best)):
                best = folder
        return best

    @staticmethod
    def name(folder):
        return folder[len('src/'):-1] if folder else '(none)'

    def above(self, target_room, user_room):
        """True when target_room is above user_room: a use pointing upwards."""
        return self.rank[target_room] < self.rank[user_room]


# ------------------------------------------------------------- the sources

def source_files(root):
    """Every .c/.h under src/, as repo-relative paths, sorted."""
    out = []
    for d, dirs, files in os.walk(os.path.join(root, 'src')):
        dirs.sort()
        for fn in sorted(files):
            if fn.endswith(('.c', '.h')):
                out.append(os.path.relpath(os.path.join(d, fn), root))
    return out


def check_tree(files, rooms, root):
    """The doc and the tree name each other."""
    problems = []
    for folder in rooms.folders:
        if not os.path.isdir(os.path.join(root, folder)):
            problems.append(f'{folder}: row in the Tree table, but no such folder')
    for folder, n in collections.Counter(rooms.folders).items():
        if n > 1:
            problems.append(f'{folder}: {n} rows in the Tree table')
    unroomed = collections.defaultdict(int)
    for path in files:
        if rooms.of(path) is None:
            unroomed[os.path.dirname(path) + '/'] += 1
    for folder in sorted(unroomed):
        problems.append(f'{folder}: holds .c/.h files ({unroomed[folder]}) '
                        'but has no row in the Tree table')
    return problems


# Strings, character constants and comments; comments are blanked (keeping
# their newlines) so that a commented-out #include is not taken for one.
C_TOKENS = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*', re.S)
QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)


def strip_comments(text):
    return C_TOKENS.sub(lambda m: m.group(0) if m.group(0)[0] in '"\''
                        else '\n' * m.group(0).count('\n') or ' ', text)


def include_graph(files, root):
    """{file: {header: None}} of quoted includes, and the problems of the
    includes that resolve to nothing."""
    graph, problems = {}, []
    for path in files:
        with open(os.path.join(root, path), encoding='utf-8', errors='replace') as f:
            text = strip_comments(f.read())
        edges = graph.setdefault(path, {})
        for name in QUOTED_INCLUDE.findall(text):
            for base in (os.path.dirname(path), 'src'):
                target = os.path.normpath(os.path.join(base, name))
                if os.path.isfile(os.path.join(root, target)):
                    edges[target] = None
                    break
            else:
                problems.append(f'{path}: includes "{name}", which is neither '
                                'beside it nor under src/')
    return graph, problems


# ------------------------------------------------------------- the objects

DEFINED = set('TDBRWVCGSIu')       # global definitions (weak and common too)
UNDEFINED = set('Uwv')             # uses, including weak undefined ones
WEAK = set('WVwvC')


def object_sources(objdir, root):
    """{object path: repo-relative source path} for every *.o under objdir.
    CMake names an object after its source, relative to the folder of the
    CMakeLists.txt that built it (src/ here): <objdir>/net/net.c.o is
    src/net/net.c.  Objects whose source no longer exists (a build dir from
    before files moved) are left out, with a note."""
    if not os.path.isdir(objdir):
        raise Fatal(f'--objdir {objdir}: no such directory')
    objs, stale = {}, []
    for d, dirs, fns in os.walk(objdir):
        dirs.sort()
        for fn in sorted(fns):
            if not fn.endswith('.o'):
                continue
            obj = os.path.join(d, fn)
            rel = os.path.relpath(obj, objdir)[:-len('.o')]
            rel = '/'.join('..' if c == '__' else c for c in rel.split(os.sep))
            for cand in (os.path.join('src', rel), rel):
                cand = os.path.normpath(cand)
                if os.path.isfile(os.path.join(root, cand)):
                    objs[obj] = cand
                    break
            else:
                stale.append(os.path.relpath(obj, objdir))
    if stale:
        print(f'layers: note: {len(stale)} objects under {objdir} have no source '
              f'(stale build?), left out: {", ".join(stale)}', file=sys.stderr)
    if not objs:
        raise Fatal(f'--objdir {objdir}: no objects of sources under {root} '
                    '(build the library first)')
    return objs


def c_library_symbols():
    """The dynamic symbols the C library this Python runs on defines (its
    path from /proc/self/maps); empty where it cannot be read."""
    path = None
    try:
        with open('/proc/self/maps') as f:
            for line in f:
                name = line.split()[-1]
                if os.path.basename(name).startswith('libc.so'):
                    path = name
                    break
    except OSError:
        return set()
    if not path:
        return set()
    try:
        out = subprocess.run(['nm', '-D', '--defined-only', path], check=True,
                             capture_output=True, text=True).stdout
    except (FileNotFoundError, subprocess.CalledProcessError):
        return set()
    return {f.split()[-1].split('@')[0] for f in out.splitlines() if len(f.split()) >= 3}


def symbol_graph(objs):
    """{source: {source it uses: sorted symbols}} from nm of every object."""
    try:
        out = subprocess.run(['nm', '-P', '-A', *sorted(objs)], check=True,
                             capture_output=True, text=True).stdout
    except FileNotFoundError:
        raise Fatal('nm not found (binutils)')
    except subprocess.CalledProcessError as e:
        raise Fatal(f'nm failed: {e.stderr.strip()}')
    defs = collections.defaultdict(lambda: ([], []))   # sym -> (strong, weak)
    uses = collections.defaultdict(set)
    prefix_len = {obj: len(obj) + 2 for obj in objs}   # "<obj>: "
    for line in out.splitlines():
        obj = line.split(': ', 1)[0]
        if obj not in objs:
            continue
        fields = line[prefix_len[obj]:].split()
        if len(fields) < 2:
            continue
        sym, kind = fields[0], fields[1]
        src = objs[obj]
        if kind in UNDEFINED:
            uses[src].add(sym)
        elif kind in DEFINED:
            defs[sym][1 if kind in WEAK else 0].append(src)
    graph = {src: {} for src in objs.values()}
    libc = c_library_symbols()
    for src, syms in uses.items():
        for sym in syms:
            # a call of a C library function is a use of the C library, even
            # where a room stands in for that function for the programs uroce
            # runs in (src/sysfs/paths.c: open, stat, ...)
            if sym in libc:
                continue
            strong, weak = defs.get(sym, ((), ()))
            for target in strong or weak:      # a strong definition wins
                if target != src:
                    graph[src].setdefault(target, []).append(sym)
    for edges in graph.values():
        for target in edges:
            edges[target].sort()
    return graph


# ---------------------------------------------------------------- cycles

def strongly_connected(graph):
    """Tarjan's algorithm, iterative.  Yields the components (lists)."""
    index, low, on_stack, stack = {}, {}, set(), []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            for succ in it:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        n = stack.pop()
                        on_stack.discard(n)
                        comp.append(n)
                        if n == node:
                            break
                    yield sorted(comp)


def shortest_cycle(graph, start, members):
    """The shortest path start -> ... -> start inside members (BFS)."""
    parent = {}
    queue = collections.deque([start])
    seen = {start}
    while queue:
        node = queue.popleft()
        for succ in sorted(graph.get(node, ())):
            if succ == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if succ in members and succ not in seen:
                seen.add(succ)
                parent[succ] = node
                queue.append(succ)
    return None


def cycles(graph, rooms, label, show_symbols):
    """One line per cycle.  For each strongly connected component of more
    than one file (or a file that depends on itself): the shortest cycle
    through its highest file, then through each file not yet on a reported
    cycle, so that every file of the tangle is on one of the paths shown."""
    def order(path):
        room = rooms.of(path)
        return (rooms.rank.get(room, len(rooms.folders)), path)

    def show(path):
        text = path[0]
        for a, b in zip(path, path[1:]):
            text += f' -> {b}'
            if show_symbols:
                syms = graph[a][b]
                more = f', +{len(syms) - 3} more' if len(syms) > 3 else ''
                text += f' ({", ".join(syms[:3])}{more})'
        return f'{label}: {text}'

    out = []
    for comp in strongly_connected(graph):
        if len(comp) == 1 and comp[0] not in graph.get(comp[0], ()):
            continue
        members, covered = set(comp), set()
        first = len(out)
        for start in sorted(comp, key=order):
            if start not in covered:
                path = shortest_cycle(graph, start, members)
                covered.update(path)
                out.append(show(path))
        if len(out) - first > 1:
            out[first] += (f'  [{len(comp)} files tangled, {len(out) - first} cycles '
                           f'shown: {", ".join(sorted(comp, key=order))}]')
    return out


# ---------------------------------------------------------------- the rule

def upward(graph, rooms, verb, show_symbols):
    """Uses of a room above the user's room."""
    out = []
    for src in sorted(graph):
        room = rooms.of(src)
        for target in sorted(graph[src]):
            troom = rooms.of(target)
            if room is None or troom is None:
                if troom is None and room is not None:
                    out.append(f'{src}: {verb} {target} (not in a room)')
                continue
            if rooms.above(troom, room):
                syms = ''
                if show_symbols:
                    s = graph[src][target]
                    more = f', +{len(s) - 5} more' if len(s) > 5 else ''
                    syms = f' [{", ".join(s[:5])}{more}]'
                out.append(f'{src}: {verb} {target}{syms} (room {rooms.name(troom)} '
                           f'above room {rooms.name(room)})')
    return out


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(
        description='Check that src/ depends one way (docs/architecture.md, "## Tree") '
                    'and has no cycles between files.')
    ap.add_argument('root', nargs='?', default=os.path.dirname(here),
                    help='the repository (default: the parent of scripts/)')
    ap.add_argument('--doc', help='the architecture doc (default: ROOT/docs/architecture.md)')
    ap.add_argument('--objdir', help="the library's object dir, e.g. "
                    'build/src/CMakeFiles/uroce.dir (without it only the include checks run)')
    ap.add_argument('--inject-edge', action='append', default=[], metavar='FROM:TO',
                    help='add a fake symbol edge FROM -> TO (repo-relative source '
                    'paths) before the checks; repeatable')
    args = ap.parse_args(argv)

    root = os.path.abspath(args.root)
    doc = args.doc or os.path.join(root, 'docs', 'architecture.md')
    try:
        rooms = Rooms(read_rooms(doc))
        files = source_files(root)
        problems = check_tree(files, rooms, root)

        incl, unresolved = include_graph(files, root)
        problems += unresolved
        problems += upward(incl, rooms, 'includes', False)
        found_cycles = cycles(incl, rooms, 'include cycle', False)

        note = ''
        if args.objdir:
            syms = symbol_graph(object_sources(os.path.abspath(args.objdir), root))
            for spec in args.inject_edge:
                a, sep, b = spec.partition(':')
                if not sep or not a or not b:
                    raise Fatal(f'--inject-edge {spec}: expected FROM:TO')
                a, b = os.path.normpath(a), os.path.normpath(b)
                for p in (a, b):
                    if not os.path.isfile(os.path.join(root, p)):
                        raise Fatal(f'--inject-edge {spec}: {p} is not a file under {root}')
                syms.setdefault(a, {}).setdefault(b, []).append('<injected>')
                syms.setdefault(b, {})
            problems += upward(syms, rooms, 'uses', True)
            found_cycles += cycles(syms, rooms, 'cycle', True)
        else:
            if args.inject_edge:
                raise Fatal('--inject-edge needs --objdir (it is a symbol edge)')
            note = ' (include checks only: no --objdir, symbol checks skipped)'
    except Fatal as e:
        print(f'layers: error: {e}', file=sys.stderr)
        return 2

    for line in problems + found_cycles:
        print(line)
    print(f'layers: {len(rooms.folders)} rooms, {len(files)} files, '
          f'{len(found_cycles)} cycles, {len(problems)} violations{note}')
    return 1 if problems or found_cycles else 0


if __name__ == '__main__':
    sys.exit(main())
