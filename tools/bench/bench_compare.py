"""Time and memory of several runs in one call: a reference and N candidates against one run alone.

    python3 tools/bench/bench_compare.py [--queries 1000] [--docs 100] [--candidates 10] [--changed 1.0]
                                   [--resamples 10000] [--repeat 3] [--workdir DIR]

Standard library only; measured, not asserted (machines are noisy).  It writes
TREC qrels (5 judged documents per query) and 1 + N TREC runs of ``--docs``
documents per query; in each candidate a share ``--changed`` of the queries
is ranked afresh (1.0, the default, is the worst case for the statistics:
every query differs, so every resample touches every query).  Then, each as
a whole process (start-up included), the best of ``--repeat`` wall times, the
median CPU time (user + sys) and the peak resident memory of:

* one run alone (``rag_eval QRELS RUN``);
* the reference and N candidates (``rag_eval QRELS REF C1 ... CN``);
* the same with runs twice as long (2 x ``--docs``): memory must not grow
  with the runs' lengths beyond the one run being read.

The issue's bound: N = 10 candidates within 11 x the time of one run.
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RAG_EVAL = os.path.join(os.path.dirname(os.path.dirname(HERE)), "rag_eval.py")


def write_workload(folder: str, queries: int, docs: int, candidates: int, changed: float, seed: int = 17):
    """qrels and 1 + candidates runs; returns (qrels path, [run paths])."""
    rng = random.Random(seed)
    pool = docs * 5
    judged = {f"q{i}": {f"d{rng.randrange(pool)}": rng.choice((0, 1, 2)) for _ in range(5)} for i in range(queries)}
    for grades in judged.values():  # every query scored: at least one relevant document
        grades[next(iter(grades))] = 2
    qrels = os.path.join(folder, "qrels.trec")
    with open(qrels, "w") as out:
        out.writelines(f"{qid} 0 {doc} {grade}\n" for qid, grades in judged.items() for doc, grade in grades.items())

    def ranking(qid):
        relevant = [doc for doc in judged[qid] if rng.random() < 0.5]
        others = [f"d{n}" for n in rng.sample(range(pool), docs)]
        return list(dict.fromkeys(relevant + others))[:docs]

    reference = {qid: ranking(qid) for qid in judged}
    paths = []
    for number in range(candidates + 1):
        run = reference if number == 0 else {
            qid: (ranking(qid) if rng.random() < changed else reference[qid]) for qid in judged}
        path = os.path.join(folder, f"run{number}-{docs}.trec")
        with open(path, "w") as out:
            for qid, docids in run.items():
                out.writelines(f"{qid} Q0 {doc} {rank} {docs - rank} r{number}\n"
                               for rank, doc in enumerate(docids, 1))
        paths.append(path)
    return qrels, paths


def measure(argv, repeat: int):
    """(best wall seconds, peak resident memory in MiB, median CPU seconds) of ``python3 rag_eval.py argv``."""
    walls, cpus, peak = [], [], 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, RAG_EVAL, *argv], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        walls.append(time.perf_counter() - start)
        cpus.append(usage.ru_utime + usage.ru_stime)
        child.returncode = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        if child.returncode not in (0, 1):
            raise SystemExit(f"rag_eval exited {child.returncode}: {' '.join(argv)}")
        peak = max(peak, usage.ru_maxrss / (1024 ** 2 if sys.platform == "darwin" else 1024))  # bytes or KiB
    return min(walls), peak, statistics.median(cpus)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--candidates", type=int, default=10)
    parser.add_argument("--changed", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=10_000, help="rag_eval --resamples (its default: 10000)")
    parser.add_argument("--workdir")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.workdir) as folder:
        qrels, runs = write_workload(folder, args.queries, args.docs, args.candidates, args.changed)
        _, long_runs = write_workload(folder, args.queries, 2 * args.docs, args.candidates, args.changed)
        one = measure([qrels, runs[0]], args.repeat)
        resampling = ["--resamples", str(args.resamples)]
        several = measure([qrels, *runs, *resampling], args.repeat)
        longer = measure([qrels, *long_runs, *resampling], args.repeat)
    print(f"{args.queries} queries, {args.candidates} candidates, {args.changed:.0%} of queries changed in each, "
          f"{args.resamples} resamples")
    print(f"  one run of {args.docs} docs/query:           {one[0]:7.2f} s  {one[1]:6.1f} MiB  CPU {one[2]:6.2f} s")
    print(f"  reference + {args.candidates} candidates:          {several[0]:7.2f} s  {several[1]:6.1f} MiB  "
          f"CPU {several[2]:6.2f} s  ({several[0] / one[0]:.1f} x one run, CPU {several[2] / one[2]:.1f} x; "
          f"the bound is {args.candidates + 1} x)")
    print(f"  the same, {2 * args.docs} docs/query:          {longer[0]:7.2f} s  {longer[1]:6.1f} MiB  "
          f"CPU {longer[2]:6.2f} s  (memory {longer[1] / several[1]:.2f} x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
