"""How often the gate is wrong, measured on simulated runs: A/A, drops of the tolerance and of twice it.

    python3 bench/calibrate_study.py [--queries 10,50,200,1000] [--simulations 100] [--seed 0]

Standard library only; prints a markdown table (pasted into docs/gate.md).  Each query has 1 to 3
relevant documents; a run places each at a rank drawn from the query's own difficulty (often in the top
5, often beyond 10), so per-query scores look like real ones: 0/1 for success, graded for the rest, many
ties at 0 and 1.  The family: recall, success, mrr, ndcg at 5 and 10 (8 tests), and with slices the same
on two slices of half the queries each too (24 tests).  The tolerance of each test is the one
``--save-baseline`` recommends (``rag_eval.resolved_tolerances`` of the baseline run's scores).

Scenarios, each a fresh pair of runs of the same queries: A/A, the second run redraws 30% of the queries
from the same distribution (the churn of an equally good change), so every fail is a false fail and
every pass is right.  Drops: in the second run a random share of the queries also loses its relevant
documents, the share set from each metric's tolerance t and mean: "tol, at most": the smallest share,
so no metric falls by more than its tolerance (a fail is a false fail); "tol, at least": the largest,
so every metric falls by at least its tolerance (a pass is a false pass); "2 tol": twice the largest,
so every metric falls by twice its tolerance or more (a fail is power).  The last column gates with a
tolerance of 0.02 everywhere (the README's example) and plants "0.02, at least": a pass is a false pass,
at every size.  Rates are shares of the simulations, +- one Monte Carlo standard error.
"""

import argparse
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import rag_eval  # noqa: E402

CUTOFFS = (5, 10)
CHURN = 0.3  # share of queries the second run redraws


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
    """Two runs of one system, (before, after): metric -> qid -> score; ``lose``: the share of queries
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


def with_slices(table, slices):
    """The table, and with ``slices`` (tag -> qids) each metric on each slice as ``tag:metric``."""
    found = dict(table)
    for tag, members in (slices or {}).items():
        found.update({f"{tag}:{m}": {q: values[q] for q in members} for m, values in table.items()})
    return found


def verdict(before, after, tolerances, seed):
    """The gate's verdict, as ``gate`` gives it, on the per-query scores of every test."""
    settings = rag_eval.GateSettings(rule="significant", tolerances={k: rag_eval.Tolerance(t) for k, t in tolerances.items()},
                                     resamples=200, seed=seed)
    targets = [rag_eval._Target(k, rag_eval._mean(before[k].values()), rag_eval._mean(after[k].values()),
                                before[k], after[k]) for k in sorted(before)]
    paired, p_holm, p_adjusted = rag_eval._paired_family(targets, settings)
    return rag_eval._overall_verdict(rag_eval._gated_metric(t, settings, paired[t.key], p_holm[t.key], p_adjusted[t.key],
                                                            len(paired))["verdict"] for t in targets)


def share(count, total):
    rate = count / total
    return f"{rate:.1%} ± {math.sqrt(rate * (1 - rate) / total):.1%}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", default="10,50,200,1000")
    parser.add_argument("--simulations", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sims = args.simulations
    print(f"{sims} simulations per cell, alpha 0.05, churn {CHURN:.0%}, seed {args.seed}; "
          "rates ± one Monte Carlo standard error\n")
    print("| queries | tests | recommended tolerance (recall@5, success@5, ndcg@10) | A/A: pass / inconclusive / fail "
          "| tol, at most: fail | tol, at least: pass | 2 tol: fail | 0.02, at least: pass |")
    print("|---:|---:|---|---|---:|---:|---:|---:|")
    for n in (int(x) for x in args.queries.split(",")):
        for sliced in (False, True):
            rng = random.Random(f"study:{args.seed}:{n}:{sliced}")
            queries = {f"q{i:04d}": (rng.choice([0.1, 0.3, 0.5, 0.7, 0.9]), rng.randint(1, 3)) for i in range(n)}
            qids = sorted(queries)
            slices = {"a": qids[::2], "b": qids[1::2]} if sliced else None
            saved = with_slices(pair(queries, rng)[0], slices)  # the baseline run: its recommended tolerances
            tolerances = {k: t for k, t in rag_eval.resolved_tolerances(saved).items()}
            means = {m: rag_eval._mean(v.values()) for m, v in saved.items() if ":" not in m}
            shares = [tolerances[m] / means[m] for m in means if means[m] > 0]
            cells = [f"{n:,}", str(len(tolerances)),
                     ", ".join(f"{tolerances[m]:.3f}" for m in ("recall@5", "success@5", "ndcg@10"))]
            flat = dict.fromkeys(tolerances, 0.02)
            for scenario, lose, tol, wanted in (("a/a", 0.0, tolerances, None),
                                                ("at most", min(shares), tolerances, "regression"),
                                                ("at least", max(shares), tolerances, "pass"),
                                                ("twice", 2 * max(shares), tolerances, "regression"),
                                                ("flat", max(0.02 / m for m in means.values() if m), flat, "pass")):
                counts = {"pass": 0, "inconclusive": 0, "regression": 0}
                for s in range(sims):
                    before, after = (with_slices(table, slices) for table in pair(queries, rng, min(1.0, lose)))
                    counts[verdict(before, after, tol, s)] += 1
                if wanted is None:
                    cells.append(" / ".join(share(counts[v], sims) for v in ("pass", "inconclusive", "regression")))
                else:
                    cells.append(share(counts[wanted], sims))
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
