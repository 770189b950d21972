"""Time the gate's paired statistics: queries x metrics x resamples, in one process.

    python3 bench/bench_stats.py [--queries 10000] [--resamples 10000] [--changed 1.0,0.3] [--repeat 3]

Each metric gets seeded per-query scores before and after; a share ``changed``
of the queries differ (1.0 is the worst case: every query moved).  Prints the
median wall time of ``rag_eval.compare_paired`` over all metrics, and of
``rag_eval.mean_intervals`` (the --ci intervals) on the same scores.
"""

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rag_eval  # noqa: E402

METRICS = ("recall@10", "success@10", "mrr@10", "ndcg@10")


def scores(queries: int, changed: float, seed: int):
    """Per-metric before/after scores shaped like real ones: 0/1 for success, fractions elsewhere."""
    rng = random.Random(seed)
    before, after = {}, {}
    for metric in METRICS:
        old, new = {}, {}
        for i in range(queries):
            qid = f"q{i}"
            if metric.startswith("success"):
                value = float(rng.random() < 0.8)
                moved = 1.0 - value
            elif metric.startswith("mrr"):
                value = 1 / rng.randint(1, 10)
                moved = 1 / rng.randint(1, 10)
            else:
                value = rng.random()
                moved = rng.random()
            old[qid] = value
            new[qid] = moved if rng.random() < changed else value
        before[metric], after[metric] = old, new
    return before, after


def timed(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--changed", default="1.0,0.3")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {args.queries} queries x {len(METRICS)} metrics x "
          f"{args.resamples} resamples, median of {args.repeat}")
    print(f"{'changed':>8}  {'paired (s)':>10}  {'--ci (s)':>9}")
    for changed in map(float, args.changed.split(",")):
        before, after = scores(args.queries, changed, seed=1)

        def paired():
            for metric in METRICS:
                rag_eval.compare_paired(metric, before[metric], after[metric], resamples=args.resamples)

        result = {"k": [10], "per_query": {qid: {m: after[m][qid] for m in METRICS} for qid in after[METRICS[0]]}}
        intervals = timed(lambda: rag_eval.mean_intervals(result, args.resamples), args.repeat)
        print(f"{changed:>8.0%}  {timed(paired, args.repeat):>10.2f}  {intervals:>9.2f}")


if __name__ == "__main__":
    main()
