"""Time the unit tests one by one: where the suite's seconds go.

    python3 tools/bench/test_times.py [--top 30] [PATTERN ...]

Run from the repository root.  It discovers the tests as ``python3 -m
unittest`` does (or only the modules or test ids given, as ``unittest``
takes them), runs them once, and prints the total wall and CPU time (user +
sys, this process and the processes it waited for), then the ``--top``
slowest tests by wall time, each with its CPU time and the number of
processes it started.  The tests' verdicts are printed as unittest prints
them; the exit code is unittest's (0 when all pass).

Standard library only; timings are measured, never asserted.  On a shared
machine quote the CPU column: load inflates the wall time, much less the CPU.
"""

import argparse
import os
import subprocess
import sys
import time
import unittest


def cpu_seconds():
    """User + sys seconds of this process and of the children it has waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def children_seconds():
    """User + sys seconds of the children this process has waited for."""
    t = os.times()
    return t.children_user + t.children_system


class TimingResult(unittest.TextTestResult):
    """A text result that also records (wall, cpu, processes started) per test."""

    spawned = 0  # processes started so far (counted by the patched Popen.__init__)
    programs = {}  # program name -> processes started

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.times = {}

    def startTest(self, test):
        self._start = (time.perf_counter(), cpu_seconds(), TimingResult.spawned)
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        wall, cpu, spawned = self._start
        self.times[test.id()] = (time.perf_counter() - wall, cpu_seconds() - cpu, TimingResult.spawned - spawned)


def count_processes():
    original = subprocess.Popen.__init__

    def counting_init(self, args, *rest, **kwargs):
        TimingResult.spawned += 1
        program = os.path.basename(str(args if isinstance(args, (str, bytes)) else args[0]))
        TimingResult.programs[program] = TimingResult.programs.get(program, 0) + 1
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = counting_init


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=30, help="how many of the slowest tests to list (default 30)")
    parser.add_argument("names", nargs="*", help="test modules or ids (default: discover all, as unittest does)")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.getcwd())
    count_processes()
    loader = unittest.TestLoader()
    suite = loader.loadTestsFromNames(args.names) if args.names else loader.discover(".")
    runner = unittest.TextTestRunner(resultclass=TimingResult, verbosity=1)
    wall, cpu, children = time.perf_counter(), cpu_seconds(), children_seconds()
    result = runner.run(suite)
    wall, cpu, children = time.perf_counter() - wall, cpu_seconds() - cpu, children_seconds() - children
    by_module = {}
    for name, (w, c, n) in result.times.items():
        module = name.split(".")[0]
        total = by_module.setdefault(module, [0.0, 0.0, 0, 0])
        total[0] += w
        total[1] += c
        total[2] += n
        total[3] += 1
    print(f"\n{result.testsRun} tests: {wall:.1f} s wall, {cpu:.1f} s CPU (user+sys, children included), "
          f"{TimingResult.spawned} processes started, using {children:.1f} s CPU; Python {sys.version.split()[0]}")
    print("processes by program: " + ", ".join(f"{name} {count}" for name, count in
                                                sorted(TimingResult.programs.items(), key=lambda item: -item[1])))
    print(f"\n{'wall s':>7} {'cpu s':>7} {'procs':>5} {'tests':>5}  module")
    for module, (w, c, n, count) in sorted(by_module.items(), key=lambda item: -item[1][0]):
        print(f"{w:7.2f} {c:7.2f} {n:5d} {count:5d}  {module}")
    print(f"\n{'wall s':>7} {'cpu s':>7} {'procs':>5}  test (the {args.top} slowest)")
    for name, (w, c, n) in sorted(result.times.items(), key=lambda item: -item[1][0])[:args.top]:
        print(f"{w:7.2f} {c:7.2f} {n:5d}  {name}")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
