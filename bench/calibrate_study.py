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
so every metric falls by twice its tolerance or more (a fail is power).  Then the gate at the tolerance
that one A/A comparison reports it resolves (``resolution``, from the deltas' own spread: the churn
teams learn from their gates): A/A and "2 tol" again.  The last column gates with a tolerance of 0.02
everywhere (the README's example) and plants "0.02, at least": a pass is a false pass, at every size.
Rates are shares of the simulations, +- one Monte Carlo standard error.

A second table, at a tolerance of 0 (the hardest case) and 200 queries (``--chains``): five equally good
candidates gated with one baseline (``runs``: the exit code fails when any candidate fails), and the
ratchet: chains of 15 honest reruns of one system, each gated against the baseline, which rises by
the rise shown (``significant_gains``, ``raised_scores``) as ``--ratchet`` does.  Are honest runs after
a rise failed more often than on the fixed baseline of the chain's start?
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


def rerun(queries, first, rng):
    """Per-query scores of a rerun of the run whose ranks are ``first``: 30% of the queries redrawn."""
    return {qid: scores(draw_ranks(*queries[qid], rng) if rng.random() < CHURN else first[qid], queries[qid][1])
            for qid in queries}


def by_metric(table):
    return {m: {q: table[q][m] for q in table} for m in table[next(iter(table))]}


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


def verdict(before, after, tolerances, field="verdict", runs=1):
    """The gate's verdict on the per-query scores of every test (or each test's ``field``): _gated_metric, the
    rule as built, on each test's paired comparison.  The comparison's p-values (which the rule does not
    read, and which cost most of the time) are left at 1."""
    settings = rag_eval.GateSettings(rule="significant", tolerances={k: rag_eval.Tolerance(t) for k, t in tolerances.items()},
                                     runs=runs)
    entries = {}
    for key in sorted(before):
        deltas = [after[key][q] - before[key][q] for q in sorted(before[key])]
        comparison = rag_eval.PairedComparison(
            key, len(deltas), rag_eval._mean(deltas), sum(d > 0 for d in deltas), sum(d < 0 for d in deltas),
            deltas.count(0), 1.0, False, rag_eval.Interval(0.0, 0.0), [], [], rag_eval._standard_deviation(deltas))
        target = rag_eval._Target(key, rag_eval._mean(before[key].values()), rag_eval._mean(after[key].values()),
                                  before[key], after[key])
        entries[key] = rag_eval._gated_metric(target, settings, comparison, 1.0, 1.0, len(before))
    if field == "gate":
        return {"metrics": entries, "verdict": rag_eval._overall_verdict(e["verdict"] for e in entries.values())}
    if field != "verdict":
        return {key: entry[field] for key, entry in entries.items()}
    return rag_eval._overall_verdict(entry["verdict"] for entry in entries.values())


def chains_table(args):
    n, rng = 200, random.Random(f"study:{args.seed}:chains")
    queries = {f"q{i:04d}": (rng.choice([0.1, 0.3, 0.5, 0.7, 0.9]), rng.randint(1, 3)) for i in range(n)}
    zero = None
    fails, rises, after_rise, fixed = 0, 0, [0, 0], [0, 0]
    for _ in range(args.chains):
        first = {qid: draw_ranks(*queries[qid], rng) for qid in queries}
        start = by_metric({qid: scores(first[qid], queries[qid][1]) for qid in queries})
        zero = zero or dict.fromkeys(start, 0.0)
        # five equal candidates against one baseline: the exit code fails when any does
        fails += any(verdict(start, by_metric(rerun(queries, first, rng)), zero, runs=5) == "regression"
                     for _ in range(5))
        baseline, rose = start, False
        for _ in range(15):
            now = by_metric(rerun(queries, first, rng))
            report = verdict(baseline, now, zero, "gate")
            (after_rise if rose else fixed)[0] += report["verdict"] == "regression"
            (after_rise if rose else fixed)[1] += 1
            gains = rag_eval.significant_gains(report)
            if gains:
                baseline = dict(baseline, **{m: rag_eval.raised_scores(baseline[m], now[m], g) for m, g in gains.items()})
                rose = True
        rises += rose
    print(f"\n{args.chains} chains, 200 queries, tolerance 0, 8 tests\n")
    print("| 5 equal candidates, one baseline: the exit code fails | chains with a rise | honest runs failed "
          "after a rise | on the fixed baseline (before any rise) |")
    print("|---:|---:|---:|---:|")
    print(f"| {share(fails, args.chains)} | {share(rises, args.chains)} | "
          f"{share(*after_rise) if after_rise[1] else '-'} ({after_rise[1]} runs) | {share(*fixed)} ({fixed[1]} runs) |")


def share(count, total):
    rate = count / total
    return f"{rate:.1%} ± {math.sqrt(rate * (1 - rate) / total):.1%}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", default="10,50,200,1000")
    parser.add_argument("--simulations", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chains", type=int, default=100)
    args = parser.parse_args()
    sims = args.simulations
    print(f"{sims} simulations per cell, alpha 0.05, churn {CHURN:.0%}, seed {args.seed}; "
          "rates ± one Monte Carlo standard error\n")
    print("| queries | tests | recommended tolerance (recall@5, success@5, ndcg@10) | A/A: pass / inconclusive / fail "
          "| tol, at most: fail | tol, at least: pass | 2 tol: fail | resolution seen (recall@5) | A/A: pass / fail "
          "| 2 tol: fail | 0.02, at least: pass |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---|---:|---:|")
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
            seen = verdict(*(with_slices(table, slices) for table in pair(queries, rng)), tolerances, "resolution")
            twice_seen = 2 * max(seen[m] / means[m] for m in means if means[m] > 0)
            for scenario, lose, tol, wanted in (("a/a", 0.0, tolerances, None),
                                                ("at most", min(shares), tolerances, "regression"),
                                                ("at least", max(shares), tolerances, "pass"),
                                                ("twice", 2 * max(shares), tolerances, "regression"),
                                                ("seen a/a", 0.0, seen, "seen"),
                                                ("seen twice", twice_seen, seen, "regression"),
                                                ("flat", max(0.02 / m for m in means.values() if m), flat, "pass")):
                if scenario == "seen a/a":
                    cells.append(f"{seen['recall@5']:.3f}")
                counts = {"pass": 0, "inconclusive": 0, "regression": 0}
                for s in range(sims):
                    before, after = (with_slices(table, slices) for table in pair(queries, rng, min(1.0, lose)))
                    counts[verdict(before, after, tol)] += 1
                if wanted is None:
                    cells.append(" / ".join(share(counts[v], sims) for v in ("pass", "inconclusive", "regression")))
                elif wanted == "seen":
                    cells.append(" / ".join(share(counts[v], sims) for v in ("pass", "regression")))
                else:
                    cells.append(share(counts[wanted], sims))
            print("| " + " | ".join(cells) + " |", flush=True)
    chains_table(args)


if __name__ == "__main__":
    main()
