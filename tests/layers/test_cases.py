#!/usr/bin/env python3
"""The layer check's own test: each cases/*.case is checked as if it lay
where its "// as:" line says, and must give exactly its "// expect:" lines
(none: it must pass).

    test_cases.py SOURCE_ROOT BUILD_ROOT
"""
import glob
import os
import subprocess
import sys

if 'vgpreload' in os.environ.get('LD_PRELOAD', ''):
    print('skipped under valgrind: this checks sources, not memory')
    sys.exit(77)
here = os.path.dirname(os.path.abspath(__file__))
root, build_root = sys.argv[1], sys.argv[2]
cases = sorted(glob.glob(os.path.join(here, 'cases', '*.case')))
failures = 0
for case in cases:
    with open(case, encoding='utf-8') as f:
        lines = f.read().splitlines()
    where = [line.split(':', 1)[1].strip() for line in lines if line.startswith('// as:')][0]
    expected = [line.split(':', 1)[1].strip() for line in lines if line.startswith('// expect:')]
    run = subprocess.run([sys.executable, os.path.join(here, 'check_layers.py'), root, build_root, '--as', where, case],
                         capture_output=True, text=True)
    got = run.stdout.splitlines()
    if got != expected or run.returncode != (1 if expected else 0):
        failures += 1
        print(f'FAIL {os.path.basename(case)} (exit {run.returncode})\n  expected: {expected}\n  got:      {got}\n'
              f'  stderr:   {run.stderr.strip()}')
    else:
        print(f'ok   {os.path.basename(case)}')
if not cases:
    sys.exit('no cases found')
sys.exit(1 if failures else 0)
