"""How often the gate is wrong, measured on simulated runs: A/A false fails and power.

    python3 tools/bench/calibrate_study.py [--queries 50,200,1000] [--simulations 200] [--resamples 500] [--seed 0]

Standard library only; prints a markdown table (pasted into docs/gate.md).
Each query has 1 to 3 relevant documents; a run places each one at a rank
drawn from the query's own difficulty (often in the top 5, often beyond 10),
so per-query scores look like real ones: 0/1 for success, graded for the
rest, many ties at 0 and at 1.  Metrics: recall, success, mrr, ndcg at 5 and
10 (8 tests, one family).  A/A: the second run redraws 30% of the queries
from the same distribution (the others are unchanged), so both runs are
exchangeable and every fail is a false fail.  Power: in the second run a
random share of the queries loses its relevant documents (beyond rank 10),
the share chosen so that the metric's mean falls by the detectable drop the
gate reports on such a change (``min_detectable_drop``; a drop widens the
deltas, so the drop is found as a fixed point: drop = the detectable drop
reported at that drop, 3 steps of 30 pilot simulations from the A/A value).  The gate:
``--gate significant`` with tolerance 0, alpha 0.05, MaxT and Holm.
"""

import argparse
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
import rag_eval  # noqa: E402

CUTOFFS = (5, 10)
MEASURES = ("recall", "success", "mrr", "ndcg")
POWER_METRICS = ("success@5", "ndcg@10")
CHURN = 0.3  # share of queries the second run of an A/A pair redraws


def draw_ranks(difficulty, relevant, rng):
    """Ranks of the relevant documents: each at 1 + geometric with the query's difficulty, distinct."""
    ranks = set()
    while len(ranks) < relevant:
        rank = 1
        while rng.random() < difficulty and rank < 50:
            rank += 1
        ranks.add(rank if rank not in ranks else rank + len(ranks) * 7)
    return sorted(ranks)


def scores(ranks, relevant):
    found = {}
    for k in CUTOFFS:
        top = [r for r in ranks if r <= k]
        ideal = sum(1 / math.log2(1 + i) for i in range(1, min(relevant, k) + 1))
        found[f"recall@{k}"] = len(top) / relevant
        found[f"success@{k}"] = 1.0 if top else 0.0
        found[f"mrr@{k}"] = 1 / top[0] if top else 0.0
        found[f"ndcg@{k}"] = sum(1 / math.log2(1 + r) for r in top) / ideal
    return found


def pair(queries, rng, lose=0.0):
    """Two runs of one system: (before, after) per-query scores by metric; ``lose``: share of queries
    that lose every relevant document in the second run."""
    before, after = {}, {}
    for qid, (difficulty, relevant) in queries.items():
        first = draw_ranks(difficulty, relevant, rng)
        second = draw_ranks(difficulty, relevant, rng) if rng.random() < CHURN else first
        if rng.random() < lose:
            second = [100 + r for r in second]
        before[qid], after[qid] = scores(first, relevant), scores(second, relevant)
    metrics = sorted(before[next(iter(before))])
    return ({m: {q: before[q][m] for q in before} for m in metrics}, {m: {q: after[q][m] for q in after} for m in metrics})


def judge(before, after, adjust, resamples, seed):
    settings = rag_eval.GateSettings(rule="significant", default=rag_eval.Tolerance(0.0), resamples=resamples,
                                     seed=seed, adjust=adjust)
    targets = [rag_eval._Target(m, rag_eval._mean(before[m].values()), rag_eval._mean(after[m].values()),
                                before[m], after[m]) for m in before]
    paired, p_holm, p_adjusted = rag_eval._paired_family(targets, settings)
    return {t.key: rag_eval._gated_metric(t, settings, paired[t.key], p_holm[t.key], p_adjusted[t.key])
            for t in targets}


def share(count, total):
    rate = count / total
    return f"{rate:.1%} ± {math.sqrt(rate * (1 - rate) / total):.1%}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", default="50,200,1000")
    parser.add_argument("--simulations", type=int, default=200)
    parser.add_argument("--resamples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{args.simulations} simulations per cell, {args.resamples} resamples, alpha 0.05, tolerance 0, "
          f"8 tests (4 measures x k = 5, 10), seed {args.seed}; rates ± one Monte Carlo standard error\n")
    print("| queries | A/A false fails, MaxT | A/A false fails, Holm | "
          + " | ".join(f"{m}: detectable drop, power (raw p / MaxT gate / Holm gate)" for m in POWER_METRICS) + " |")
    print("|---:|---:|---:|" + "---:|" * len(POWER_METRICS))
    for n in (int(x) for x in args.queries.split(",")):
        rng = random.Random(f"study:{args.seed}:{n}")
        queries = {f"q{i:04d}": (rng.choice([0.1, 0.3, 0.5, 0.7, 0.9]), rng.randint(1, 3)) for i in range(n)}
        fails = {"maxt": 0, "holm": 0}
        spreads = {m: [] for m in POWER_METRICS}
        for s in range(args.simulations):
            before, after = pair(queries, rng)
            for adjust in fails:
                verdicts = judge(before, after, adjust, args.resamples, s)
                fails[adjust] += any(e["verdict"] == "regression" for e in verdicts.values())
                if adjust == "maxt":
                    for m in POWER_METRICS:
                        if verdicts[m]["min_detectable_drop"]:
                            spreads[m].append(verdicts[m]["min_detectable_drop"])
        cells = [share(fails["maxt"], args.simulations), share(fails["holm"], args.simulations)]
        for m in POWER_METRICS:
            drop = sum(spreads[m]) / len(spreads[m])
            mean = sum(pair(queries, random.Random(1))[0][m].values()) / n
            # The gate reports the detectable drop from the deltas it sees, and a drop widens them:
            # find the drop that equals the detectable drop reported on it (a fixed point, 3 steps).
            for step in range(3):
                seen = [judge(*pair(queries, rng, lose=min(1.0, drop / mean)), "maxt", 100, step)[m]
                        ["min_detectable_drop"] for _ in range(30)]
                drop = sum(x for x in seen if x) / max(1, sum(1 for x in seen if x))
            hits = {"raw": 0, "maxt": 0, "holm": 0}
            for s in range(args.simulations):
                before, after = pair(queries, rng, lose=min(1.0, drop / mean))
                for adjust in ("maxt", "holm"):
                    entry = judge(before, after, adjust, args.resamples, s)[m]
                    hits[adjust] += entry["verdict"] == "regression"
                    if adjust == "maxt":
                        hits["raw"] += entry["p_value"] < 0.05 and entry["mean_delta"] < 0
            cells.append(f"{drop:.3f}: " + " / ".join(share(hits[a], args.simulations) for a in ("raw", "maxt", "holm")))
        print(f"| {n:,} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
