"""The pace behind rag_eval's work budget: CPU nanoseconds per value resampled (measured, never asserted).

    python3 tools/bench/bench_budget.py [--queries 500,2000] [--metrics 4,16] [--resamples 10000]

Each resampling refuses up front to take more than ``WORK_BUDGET`` seconds, as
estimated from its sizes at ``NS_PER_VALUE`` ns per value resampled (one
query's value of one metric in one resample; docs/reliability.md).  This
script times each routine on seeded inputs and prints its CPU time divided by
the values its estimate counts, to set and check that constant:

- the paired family of ``--gate significant`` (sign flips, MaxT, intervals):
  resamples x queries x tests;
- ``--ci`` (``mean_intervals``): resamples x queries x metrics;
- several runs (``compare_runs``, one candidate): 2 x resamples x queries x metrics;
- ``--calibrate 10`` (``calibrate``): 10 x 3 x queries x metrics x 400 (rule
  significant) or x 50 (rule drop).
"""

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import rag_eval  # noqa: E402


def timed(call) -> float:
    start = time.process_time()
    call()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", default="500,2000")
    parser.add_argument("--metrics", default="4,16")
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args()
    rng = random.Random(0)
    resamples = args.resamples
    print(f"NS_PER_VALUE = {rag_eval._NS_PER_VALUE}, WORK_BUDGET = {rag_eval._WORK_BUDGET} s")
    for queries in map(int, args.queries.split(",")):
        for count in map(int, args.metrics.split(",")):
            metrics = [f"{m}@{k}" for m in ("recall", "mrr", "ndcg", "success") for k in range(1, count // 4 + 1)]
            before = {m: {f"q{i}": rng.random() for i in range(queries)} for m in metrics}
            after = {m: {q: min(1.0, max(0.0, v + rng.gauss(0, 0.1))) for q, v in scores.items()}
                     for m, scores in before.items()}
            targets = [rag_eval._Target(m, 0.5, 0.5, before[m], after[m]) for m in metrics]
            result = {"k": [5], "mean": {m: 0.5 for m in metrics},
                      "per_query": {q: {m: after[m][q] for m in metrics} for q in after[metrics[0]]}}
            other = dict(result, per_query={q: {m: before[m][q] for m in metrics} for q in before[metrics[0]]})
            baseline = rag_eval.Baseline({m: 0.5 for m in metrics}, before)
            cells = queries * len(metrics)
            cases = [
                ("paired family", lambda: rag_eval._paired_family(
                    targets, rag_eval.GateSettings(rule="significant", resamples=resamples)), resamples * cells),
                ("--ci", lambda: rag_eval._mean_intervals(result, resamples), resamples * cells),
                ("two runs", lambda: rag_eval.compare_runs([("a", result), ("b", other)], resamples=resamples),
                 2 * resamples * cells),
                ("--calibrate 10 significant", lambda: rag_eval.calibrate(
                    baseline, rag_eval.GateSettings(rule="significant"), 10), 10 * 3 * cells * 400),
                ("--calibrate 10 drop", lambda: rag_eval.calibrate(baseline, rag_eval.GateSettings(), 10),
                 10 * 3 * cells * 50),
            ]
            for name, call, values in cases:
                seconds = timed(call)
                print(f"{queries} queries x {len(metrics)} metrics  {name:28} {seconds:7.2f} s  "
                      f"{seconds / values * 1e9:5.1f} ns per value")


if __name__ == "__main__":
    main()
