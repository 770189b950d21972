"""Time the gate's paired statistics: queries x metrics x resamples, in process and as whole processes.

    python3 tools/bench/bench_stats.py [--queries 1000,3000,10000] [--resamples 10000]
                                 [--changed 1.0,0.3] [--repeat 3] [--no-process]
                                 [--calibrate QUERIES] [--reference OLD/rag_eval.py]

Standard library only.  Two parts:

1. In process: each of 4 metrics gets seeded per-query scores before and
   after; a share ``changed`` of the queries differ (1.0 is the worst case:
   every query moved).  For each number of queries it prints the median CPU
   time (user + sys of this process) of ``rag_eval.compare_paired`` over the
   4 metrics (sign-flip test, bootstrap interval, largest drops; each metric
   its own draw), of the gate's family of the 4 metrics on one shared draw
   (``rag_eval._paired_family``: the 4 comparisons and the MaxT adjustment,
   what ``--gate significant`` runs), and of ``rag_eval._mean_intervals`` (the
   ``--ci`` intervals), and the cost per changed query, metric and resample.
   Linear scaling: the times of the sizes above 250 queries must fit a fixed
   cost plus a cost per unit (least squares) within 15%.  With
   ``--calibrate QUERIES``, ``rag_eval.calibrate`` too: 100 simulations per
   scenario on that many queries' seeded scores of the 4 metrics, under
   ``--gate significant`` and ``--gate drop``.  With ``--reference``, every
   timing is also taken of that other copy of rag_eval.py, interleaved with
   this one's, and the table shows both and the ratio (reference / this).
2. Whole processes (skipped with ``--no-process``): ``python rag_eval.py
   QRELS RUN --baseline-run OLD`` on a generated TREC workload of the largest
   number of queries (20 documents each; in OLD a share ``changed`` of the
   queries have their ranking reversed), next to the same command without
   ``--baseline-run`` and a bare interpreter: what the statistics add to a
   real gate, start-up included.  Files go to ``--workdir``.
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
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
import rag_eval  # noqa: E402

METRICS = ("recall@10", "success@10", "mrr@10", "ndcg@10")
SMALL = 250  # sizes up to this are left out of the linear fit (the fixed costs dominate them)
LINEAR_TOLERANCE = 0.15  # time = fixed + per unit x units must fit every size above the switch this well
DOCS_PER_QUERY = 20  # the whole-process workload


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
    """Median CPU seconds of ``function()`` (the machine is shared: wall time measures the neighbours)."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
    return statistics.median(times)


def timed_each(functions, repeat: int):
    """``timed`` of several functions, their runs interleaved so that the machine's load hits them alike."""
    times = [[] for _ in functions]
    for _ in range(repeat):
        for function, seen in zip(functions, times):
            start = time.process_time()
            function()
            seen.append(time.process_time() - start)
    return [statistics.median(seen) for seen in times]


def load_reference(path):
    """Another copy of rag_eval.py, imported under its own name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rag_eval_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cell(seconds, reference):
    """A table cell: this copy's median, and with a reference its median and the ratio."""
    if reference is None:
        return f"{seconds:.2f}"
    return f"{seconds:.2f} (ref {reference:.2f}, {reference / seconds:.2f}x)"


def workloads(module, before, after, resamples):
    """The three timed jobs of one size in ``module``: paired statistics, the gate's family, --ci intervals."""
    result = {"k": [10], "per_query": {qid: {m: after[m][qid] for m in METRICS} for qid in after[METRICS[0]]}}
    targets = [module._Target(m, None, None, before[m], after[m]) for m in METRICS]
    settings = module.GateSettings(rule="significant", resamples=resamples)

    def paired():
        for metric in METRICS:
            module.compare_paired(metric, before[metric], after[metric], resamples=resamples)

    return [paired, lambda: module._paired_family(targets, settings), lambda: getattr(module, "_mean_intervals", getattr(module, "mean_intervals", None))(result, resamples)]


def wall_timed(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def in_process(sizes, changes, resamples, repeat, reference=None):
    """The table of part 1; returns {changed: [(queries, ns per unit)]} for the scaling check."""
    print(f"## In process: 4 metrics x {resamples:,} resamples, median CPU of {repeat}\n")
    print("| queries | changed | paired statistics s | ns per changed query x metric x resample "
          "| gate family s | --ci intervals s |")
    print("|---:|---:|---:|---:|---:|---:|")
    costs = {}  # changed -> [(queries, units, seconds)]
    for queries in sizes:
        for changed in changes:
            before, after = scores(queries, changed, seed=1)
            jobs = workloads(rag_eval, before, after, resamples)
            old = workloads(reference, before, after, resamples) if reference else [None] * len(jobs)
            seconds, was = [], []
            for job, old_job in zip(jobs, old):
                found = timed_each([job, old_job] if old_job else [job], repeat)
                seconds.append(found[0])
                was.append(found[1] if old_job else None)
            moved = sum(1 for m in METRICS for qid in before[m] if before[m][qid] != after[m][qid])
            unit = seconds[0] / (max(moved, 1) * resamples) * 1e9
            costs.setdefault(changed, []).append((queries, moved * resamples, seconds[0]))
            print(f"| {queries:,} | {changed:.0%} | {cell(seconds[0], was[0])} | {unit:.1f} | {cell(seconds[1], was[1])} "
                  f"| {cell(seconds[2], was[2])} |")
    print()
    return costs


def calibration(queries, repeat, reference=None):
    """``calibrate`` on a baseline of ``queries`` queries' seeded scores, 4 metrics, 100 simulations per scenario."""
    print(f"## --calibrate: {queries:,} queries x 4 metrics, 100 simulations per scenario, median CPU of {repeat}\n")
    print("| rule | calibrate s |")
    print("|---|---:|")
    before, _ = scores(queries, 1.0, seed=2)
    for rule in ("significant", "drop"):
        jobs = []
        for module in (rag_eval, reference) if reference else (rag_eval,):
            baseline = module.Baseline({m: module._mean(v.values()) for m, v in before.items()}, before)
            settings = module.GateSettings(rule=rule)
            jobs.append(lambda module=module, baseline=baseline, settings=settings: module.calibrate(baseline, settings))
        if reference and jobs[0]() != jobs[1]():
            raise SystemExit("calibrate: this copy and the reference disagree")
        found = timed_each(jobs, repeat)
        print(f"| {rule} | {cell(found[0], found[1] if reference else None)} |")
    print()


def scaling_lines(costs):
    """One line per share changed: the fit of time = fixed + per unit x units, and whether it holds."""
    lines = []
    for changed, points in costs.items():
        above = [(units, seconds) for queries, units, seconds in points if queries > SMALL]
        if len(above) < 2:
            continue
        mean_u = statistics.fmean(u for u, _ in above)
        mean_t = statistics.fmean(t for _, t in above)
        spread_u = sum((u - mean_u) ** 2 for u, _ in above)
        per_unit = sum((u - mean_u) * (t - mean_t) for u, t in above) / spread_u if spread_u else 0.0
        fixed = mean_t - per_unit * mean_u
        misfit = max(abs(fixed + per_unit * u - t) / t for u, t in above)
        verdict = "linear" if misfit <= LINEAR_TOLERANCE else f"NOT linear (tolerance {LINEAR_TOLERANCE:.0%})"
        lines.append(f"- {changed:.0%} changed: time = {fixed * 1e3:.0f} ms + {per_unit * 1e9:.2f} ns per changed "
                     f"query x metric x resample over {len(above)} sizes; largest misfit {misfit:.0%}: {verdict}")
    return lines


def write_workload(folder, queries, changed, seed=7):
    """TREC qrels, a run, and an old run in which a share ``changed`` of the queries are ranked in reverse."""
    rng = random.Random(seed)
    paths = {name: os.path.join(folder, f"stats_{queries}_{changed}_{name}") for name in ("qrels", "run", "old")}
    if all(os.path.exists(path) for path in paths.values()):
        return paths
    with open(paths["qrels"], "w") as qrels, open(paths["run"], "w") as run, open(paths["old"], "w") as old:
        for q in range(queries):
            qid = f"q{q}"
            docs = [f"doc-{q}-{d}" for d in range(DOCS_PER_QUERY)]
            for docid in rng.sample(docs, 3):
                qrels.write(f"{qid} 0 {docid} {rng.randint(1, 3)}\n")
            rng.shuffle(docs)
            reverse = rng.random() < changed
            for rank, docid in enumerate(docs, 1):
                score = DOCS_PER_QUERY - rank
                run.write(f"{qid} Q0 {docid} {rank} {score} new\n")
                old.write(f"{qid} Q0 {docid} {rank} {rank if reverse else score} old\n")
    return paths


def whole_processes(queries, changes, repeat, workdir):
    print(f"## Whole processes: {queries:,} queries x {DOCS_PER_QUERY} documents, TREC, median of {repeat}\n")
    print("| command | changed | median wall s |")
    print("|---|---:|---:|")
    os.makedirs(workdir, exist_ok=True)
    python = sys.executable

    def wall(argv):
        def run():
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        return wall_timed(run, repeat)

    print(f"| `python -c pass` | - | {wall([python, '-c', 'pass']):.3f} |")
    for changed in changes:
        paths = write_workload(workdir, queries, changed)
        plain = [python, RAG_EVAL, paths["qrels"], paths["run"], "--k", "10"]
        check = subprocess.run(plain + ["--baseline-run", paths["old"]], capture_output=True, text=True)
        if check.returncode not in (0, 1):  # 1: a regression, which the reversed rankings may well cause
            raise SystemExit(f"rag_eval failed: {check.stderr.strip()}")
        print(f"| rag_eval, no baseline | {changed:.0%} | {wall(plain):.3f} |")
        print(f"| rag_eval --baseline-run OLD | {changed:.0%} | {wall(plain + ['--baseline-run', paths['old']]):.3f} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", default="1000,3000,10000", help="comma-separated numbers of queries")
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--changed", default="1.0,0.3", help="comma-separated shares of queries that changed")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "rag_eval_bench"))
    parser.add_argument("--no-process", action="store_true", help="skip the whole-process part")
    parser.add_argument("--calibrate", type=int, default=0, help="queries for a --calibrate timing (default 0: none)")
    parser.add_argument("--reference", help="another rag_eval.py to time beside this one, interleaved")
    args = parser.parse_args()
    reference = load_reference(args.reference) if args.reference else None
    sizes = [int(text) for text in args.queries.split(",")]
    changes = [float(text) for text in args.changed.split(",")]
    print(f"# rag_eval paired statistics benchmark (Python {sys.version.split()[0]})\n")
    costs = in_process(sizes, changes, args.resamples, args.repeat, reference)
    for line in scaling_lines(costs):
        print(line)
    print()
    if args.calibrate:
        calibration(args.calibrate, args.repeat, reference)
    if not args.no_process:
        whole_processes(max(sizes), changes, args.repeat, args.workdir)


if __name__ == "__main__":
    main()
