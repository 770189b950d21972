"""How often the gate is wrong, measured on simulated runs: A/A, drops of the tolerance and of twice it.

    python3 tools/bench/calibrate_study.py [--queries 10,50,200,1000] [--simulations 100] [--seed 0]

Standard library only; prints a markdown table (pasted into docs/gate.md).  Each query has 1 to 3
relevant documents; a run places each at a rank drawn from the query's own difficulty (often in the top
5, often beyond 10), so per-query scores look like real ones: 0/1 for success, graded for the rest, many
ties at 0 and 1.  The family: recall, success, mrr, ndcg at 5 and 10 (8 tests), and with slices the same
on two slices of half the queries each too (24 tests).  The tolerance of each test is the one
``--save-baseline`` recommends (``rag_eval._resolved_tolerances`` of the baseline run's scores).

Scenarios, each a fresh pair of runs of the same queries.  A/A: the second run redraws 30% of the queries
from the same distribution (the churn of an equally good change), so every fail is a false fail and
every pass is right.  "fall = tol" and "fall = 2 tol": besides, each metric's mean falls by its
tolerance (or twice it) in expectation, a share of the queries scoring 0 on it (nested shares, as
``--calibrate`` plants them; a slice falls in proportion): at "tol" a fail and a pass are both wrong
(each at most alpha), at "2 tol" a fail is power.  First at the recommended tolerances, then at the
tolerances one A/A comparison reports it resolves (``resolution`` of the deltas' own spread: what
teams learn from their gates), with ``--calibrate`` (``rag_eval.calibrate``, 100 simulations, on one
A/A pair; without slices) beside: its A/A pass and 2x fail rates should match the study's within
Monte Carlo error.  The last column gates at 0.02 everywhere (the README's example) with every
metric falling by 0.02: a pass is a false pass, at every size.  Rates are shares of the simulations,
+- one Monte Carlo standard error.

A second table, at a tolerance of 0 (the hardest case) and 200 queries (``--chains``): five equally good
candidates gated with one baseline (``runs``: the exit code fails when any candidate fails), and the
ratchet: a real gain (a better system: each query's difficulty x 0.8), then 15 honest reruns of it, each
gated against a baseline that rises by the rise shown (``significant_gains``, ``_raised_scores``, as
``--ratchet`` does), against one that rises to the observed mean (the old ratchet), and against a fixed
baseline, the better system's own first run.  Are honest runs after a rise failed more often?
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


def pair(queries, rng, lose=None):
    """Two runs of one system, (before, after): metric -> qid -> score; ``lose``: metric -> the share of
    queries that score 0 on it in the second run (nested: a query below a smaller share loses more metrics)."""
    before, after = {}, {}
    for qid, (difficulty, relevant) in queries.items():
        first = draw_ranks(difficulty, relevant, rng)
        second = draw_ranks(difficulty, relevant, rng) if rng.random() < CHURN else first
        before[qid], after[qid] = scores(first, relevant), scores(second, relevant)
        lost = rng.random()
        after[qid] = {m: 0.0 if lose and lost < lose[m] else v for m, v in after[qid].items()}
    return by_metric(before), by_metric(after)


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
    better = {qid: (difficulty * 0.8, relevant) for qid, (difficulty, relevant) in queries.items()}
    zero = None
    fails, rises, counts = 0, 0, {way: [0, 0] for way in ("fixed", "shown", "observed")}
    for _ in range(args.chains):
        first = {qid: draw_ranks(*queries[qid], rng) for qid in queries}
        start = by_metric({qid: scores(first[qid], queries[qid][1]) for qid in queries})
        zero = zero or dict.fromkeys(start, 0.0)
        # five equal candidates against one baseline: the exit code fails when any does
        fails += any(verdict(start, by_metric(rerun(queries, first, rng)), zero, runs=5) == "regression"
                     for _ in range(5))
        # a real gain, then honest reruns of the better system, ratcheted by the rise shown or to the observed
        # mean (the old ratchet); a fixed baseline is the better system's own first run
        new = {qid: draw_ranks(*better[qid], rng) for qid in better}
        fixed = by_metric({qid: scores(new[qid], better[qid][1]) for qid in better})
        baselines = {"shown": start, "observed": start}
        for _ in range(15):
            now = by_metric(rerun(better, new, rng))
            for way, baseline in list(baselines.items()) + [("fixed", fixed)]:
                report = verdict(baseline, now, zero, "gate")
                if way == "fixed" or baseline is not start:  # honest runs after a rise
                    counts[way][0] += report["verdict"] == "regression"
                    counts[way][1] += 1
                gains = rag_eval._significant_gains(report) if way != "fixed" else {}
                if gains:
                    baselines[way] = dict(baseline, **{m: rag_eval._raised_scores(baseline[m], now[m], g if way == "shown"
                                                                                  else math.inf) for m, g in gains.items()})
        rises += baselines["shown"] is not start
    print(f"\n{args.chains} chains, 200 queries, tolerance 0, 8 tests\n")
    print("| 5 equal candidates, one baseline: the exit code fails | a real gain: chains that rose | honest runs "
          "failed after a rise by the rise shown | after a rise to the observed mean | on a fixed baseline |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {share(fails, args.chains)} | {share(rises, args.chains)} | "
          + " | ".join(f"{share(*counts[way])} ({counts[way][1]} runs)" for way in ("shown", "observed", "fixed")) + " |")


def calibrated(before, after, tolerances):
    settings = rag_eval.GateSettings(rule="significant", tolerances={k: rag_eval.Tolerance(t) for k, t in tolerances.items()})
    found = rag_eval.calibrate(rag_eval.Baseline({m: rag_eval._mean(v.values()) for m, v in before.items()}, before),
                               settings, 100, now=after)["scenarios"]
    return (f"{found['a/a']['pass']['rate']:.1%} ± {found['a/a']['pass']['se']:.1%}, "
            f"{found['drop 2x tolerance']['regression']['rate']:.1%} ± {found['drop 2x tolerance']['regression']['se']:.1%}")


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
          "| fall = tol: fail / pass | fall = 2 tol: fail | resolution seen (recall@5) | A/A: pass / fail "
          "| fall = tol: fail / pass | fall = 2 tol: fail | --calibrate: A/A pass, 2x fail | 0.02, fall = 0.02: pass / fail |")
    print("|---:|---:|---|---|---|---:|---:|---|---|---:|---|---|")
    for n in (int(x) for x in args.queries.split(",")):
        for sliced in (False, True):
            rng = random.Random(f"study:{args.seed}:{n}:{sliced}")
            queries = {f"q{i:04d}": (rng.choice([0.1, 0.3, 0.5, 0.7, 0.9]), rng.randint(1, 3)) for i in range(n)}
            qids = sorted(queries)
            slices = {"a": qids[::2], "b": qids[1::2]} if sliced else None
            saved = with_slices(pair(queries, rng)[0], slices)  # the baseline run: its recommended tolerances
            means = {m: rag_eval._mean(v.values()) for m, v in saved.items() if ":" not in m}
            recommended = rag_eval._resolved_tolerances(saved)
            seen = verdict(*(with_slices(table, slices) for table in pair(queries, rng)), recommended, "resolution")
            cells = [f"{n:,}", str(len(recommended)),
                     ", ".join(f"{recommended[m]:.3f}" for m in ("recall@5", "success@5", "ndcg@10"))]

            def rates(tolerances, factor, shown):
                lose = {m: min(1.0, factor * tolerances[m] / means[m]) if means[m] else 0.0 for m in means}
                counts = {"pass": 0, "inconclusive": 0, "regression": 0}
                for _ in range(sims):
                    before, after = (with_slices(table, slices) for table in pair(queries, rng, lose))
                    counts[verdict(before, after, tolerances)] += 1
                return " / ".join(share(counts[v], sims) for v in shown)

            for tolerances in (recommended, seen):
                if tolerances is seen:
                    cells.append(f"{seen['recall@5']:.3f}")
                cells.append(rates(tolerances, 0.0, ("pass", "inconclusive", "regression") if tolerances is recommended
                                   else ("pass", "regression")))
                cells.append(rates(tolerances, 1.0, ("regression", "pass")))
                cells.append(rates(tolerances, 2.0, ("regression",)))
            cells.append(calibrated(*pair(queries, rng), seen) if not sliced else "-")
            cells.append(rates(dict.fromkeys(recommended, 0.02), 1.0, ("pass", "regression")))
            print("| " + " | ".join(cells) + " |", flush=True)
    chains_table(args)


if __name__ == "__main__":
    main()
