#!/usr/bin/env python3
"""run_module.py -- one module of rdma-core v44's pyverbs suite on uroce0.

  run_module.py --launcher UROCE --suite RDMA_CORE_DIR [--floors FILE] [--json OUT] MODULE

Runs tests/MODULE.py of the suite with Debian's /usr/bin/python3 through
`UROCE run`, the way tests/run_tests.py does (--dev uroce0), and prints every
test with its outcome, each skip with its reason, then
"MODULE: N ok, M skipped, F failed, E errors".  The exit status is 1 on any
FAIL or ERROR, or when fewer tests pass than MODULE's floor in FILE (a line
"MODULE N"), 77 when the suite is absent, else 0.  --json writes the tally
(ok, failed and errored test ids, skips with reasons) for
scripts/rdmacore_tally.py.

test_odp and test_parent_domain each have tests that want 2 MiB huge pages;
as root, when none are reserved, this reserves 8 for the run and gives them
back afterwards (vm.nr_hugepages as it was).

Outcomes come from a unittest result class in the child (--inner mode),
not from parsing -v output, whose lines warnings can split.
"""

import json
import os
import subprocess
import sys
import tempfile

HUGE_MODULES = ('test_odp', 'test_parent_domain')
NR_HUGEPAGES = '/proc/sys/vm/nr_hugepages'


def inner(suite, module, out):
    """In the uroce process: run the module, write the tally as JSON."""
    import unittest
    from importlib.machinery import SourceFileLoader
    tdir = os.path.join(suite, 'tests')
    os.chdir(suite)
    sys.path.insert(0, tdir)
    sys.argv = [os.path.join(tdir, 'run_tests.py'), '--dev', 'uroce0', module]
    from args_parser import parser
    tests = SourceFileLoader('tests', os.path.join(tdir, '__init__.py')).load_module()
    parser.parse_args()
    tally = {'ok': [], 'skipped': [], 'failed': [], 'errors': []}

    class Recording(unittest.TextTestResult):
        def addSuccess(self, test):
            super().addSuccess(test)
            tally['ok'].append(test.id())

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            tally['skipped'].append([test.id(), reason])

        def addFailure(self, test, err):
            super().addFailure(test, err)
            tally['failed'].append(test.id())

        def addError(self, test, err):
            super().addError(test, err)
            tally['errors'].append(test.id())

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err)
            tally['ok'].append(test.id())

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test)
            tally['failed'].append(test.id())

    runner = unittest.TextTestRunner(verbosity=2, resultclass=Recording, stream=sys.stdout)
    unittest.main(module=tests, testRunner=runner, exit=False)
    with open(out, 'w') as f:
        json.dump(tally, f)
    return 0


def floor_of(path, module):
    if not path:
        return 0
    with open(path) as f:
        for line in f:
            p = line.split('#')[0].split()
            if len(p) == 2 and p[0] == module:
                return int(p[1])
    return 0


def reserve_huge_pages(module):
    """Reserve 2 MiB pages for the module's huge-page tests; returns what to
    restore, or None."""
    if module not in HUGE_MODULES or os.geteuid() != 0:
        return None
    try:
        with open(NR_HUGEPAGES) as f:
            before = f.read().strip()
        if int(before) > 0:
            return None
        with open(NR_HUGEPAGES, 'w') as f:
            f.write('8')
        return before
    except OSError:
        return None


def main(argv):
    args = {'--launcher': None, '--suite': None, '--floors': None, '--json': None}
    rest = []
    it = iter(argv[1:])
    for a in it:
        if a in args:
            args[a] = next(it, None)
        elif a == '--inner':
            return inner(next(it), next(it), next(it))
        else:
            rest.append(a)
    if len(rest) != 1 or not args['--launcher'] or not args['--suite']:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    module = rest[0]
    suite = args['--suite']
    if not os.path.isfile(os.path.join(suite, 'tests', module + '.py')):
        print(f'{module}: no rdma-core suite at {suite}: skipped')
        return 77
    restore = reserve_huge_pages(module)
    fd, out = tempfile.mkstemp(prefix='rdmacore-', suffix='.json')
    os.close(fd)
    try:
        rc = subprocess.run([os.path.abspath(args['--launcher']), 'run', '--', '/usr/bin/python3', os.path.abspath(__file__),
                             '--inner', suite, module, out], cwd=suite).returncode
        with open(out) as f:
            text = f.read()
        tally = json.loads(text) if text else None
    finally:
        os.unlink(out)
        if restore is not None:
            with open(NR_HUGEPAGES, 'w') as f:
                f.write(restore)
    if tally is None:
        print(f'not ok {module}: the suite did not finish (exit status {rc})')
        return 1
    print(f'\n# {module}: skips and their reasons')
    for tid, reason in tally['skipped']:
        print(f'#   {tid}: {reason}')
    n_ok, n_skip = len(tally['ok']), len(tally['skipped'])
    n_fail, n_err = len(tally['failed']), len(tally['errors'])
    print(f'{module}: {n_ok} ok, {n_skip} skipped, {n_fail} failed, {n_err} errors')
    if args['--json']:
        with open(args['--json'], 'w') as f:
            json.dump(dict(tally, module=module), f, indent=1)
    floor = floor_of(args['--floors'], module)
    # the floors count the huge-page tests (a root run reserves the pages);
    # where none could be reserved, those skips are the environment's
    n_huge = sum(1 for _, reason in tally['skipped'] if 'huge pages' in reason)
    if n_huge:
        print(f'# {module}: {n_huge} skipped for want of huge pages; the floor drops by as many')
        floor -= n_huge
    bad = False
    for tid in tally['failed'] + tally['errors']:
        print(f'not ok {tid}')
        bad = True
    if n_ok < floor:
        print(f'not ok {module}: {n_ok} ok, below its floor of {floor} ({args["--floors"]})')
        bad = True
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
