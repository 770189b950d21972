"""An independent audit of ``--gate significant`` (issue 31 item 1): A/A and planted-drop simulations.

    nice -n 10 python3 tools/bench/audit_gate.py [--simulations 200] [--chains 100] [--seed 0] [--only PART]

Standard library only, seeded (random.Random per cell), shares of simulations +- one Monte Carlo standard
error sqrt(r (1 - r) / N).  Written without tools/bench/calibrate_study.py: its own generator and its own
planting.  The generator: each query has a latent difficulty h ~ N(0, 1), 1 to 4 relevant documents of
grades 1 to 3 among 30 non-relevant ones; a retriever of quality THETA scores a relevant document of grade
g as THETA (0.5 + 0.25 g) - h + N(0, 1) and a non-relevant one N(0, 1), and returns its top 20, so recall,
success, mrr and ndcg at 5 and 10 (scored by ``rag_eval.evaluate``) are correlated, 0/1 and graded.
An equally good second retriever redraws the noise of a share (the churn, 5% to 20%) of the queries, which
then rank better or worse.  A planted drop zeroes a metric's score on a share of the queries (one uniform
per query, shares nested, so the metrics fall on the same queries) set so that the metric's mean falls by
the asked amount in expectation (its population mean from a pilot of 20,000 queries).

The gate is driven as a user following docs/gate.md would: the baseline is run A's extended baseline
(``Baseline(mean, per_query)``, what ``read_baseline`` returns of ``--save-baseline``), the recommended
tolerances are ``resolved_tolerances`` of its scores as ``--save-baseline`` prints them (4 decimals),
``gate(result_B, baseline, GateSettings(rule="significant", tolerances=...))``; the exit code is 1 for
regression, 3 inconclusive, 0 pass.  ``--only cli`` checks that ``main()`` on files gives the same exit
codes; the ratchet chains run ``main()`` itself (``--update-baseline --ratchet``).  Slices: 3 slices
(query i in slice i mod 3), each gated by a tolerance naming it (``s0:recall@5``), 32 tests.
"""

import argparse
import json
import math
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
import rag_eval  # noqa: E402

K = [5, 10]
METRICS = [f"{m}@{k}" for k in K for m in ("recall", "success", "mrr", "ndcg")]
THETA = 2.0
NONREL = 30
DEPTH = 20
RESAMPLES = 100  # the rule reads bounds, not p-values: the fewest resamples the command line takes
SLICES = 3


# --- the generator -----------------------------------------------------------------------------------

def draw_queries(n, rng, prefix="q"):
    """n queries: qid -> (difficulty, {doc: grade})."""
    queries = {}
    for i in range(n):
        relevant = rng.choices((1, 2, 3, 4), (0.45, 0.3, 0.15, 0.1))[0]
        grades = {f"r{j}": (rng.choice((2, 3)) if j == 0 else rng.choice((1, 2, 3))) for j in range(relevant)}
        queries[f"{prefix}{i:05d}"] = (rng.gauss(0, 1), grades)
    return queries


def rank(query, theta, rng):
    """One retriever's top DEPTH for a query: doc -> score."""
    difficulty, grades = query
    scores = {doc: theta * (0.5 + 0.25 * g) - difficulty + rng.gauss(0, 1) for doc, g in grades.items()}
    scores.update({f"n{j}": rng.gauss(0, 1) for j in range(NONREL)})
    top = sorted(scores.items(), key=lambda item: -item[1])[:DEPTH]
    return dict(top)


def qrels_of(queries):
    return {qid: dict(grades) for qid, (_, grades) in queries.items()}


def run_of(queries, rng, theta=THETA):
    return {qid: rank(q, theta, rng) for qid, q in queries.items()}


def churned(queries, run, churn, rng, theta=THETA):
    """An equally good retriever: each query's ranking redrawn with probability ``churn``."""
    return {qid: (rank(queries[qid], theta, rng) if rng.random() < churn else ranking) for qid, ranking in run.items()}


def score(queries, run):
    return rag_eval.evaluate(qrels_of(queries), run, K)


def plant(result, shares, rng):
    """Zero metric m on the queries whose uniform falls below shares[m] (nested), means recomputed."""
    for qid in sorted(result["per_query"]):
        u = rng.random()
        row = result["per_query"][qid]
        for metric, share in shares.items():
            if u < share:
                row[metric] = 0.0
    table = rag_eval._per_query_by_metric(result)
    result["mean"] = {m: math.fsum(v.values()) / len(v) for m, v in table.items()}
    return result


_POPULATION = {}


def population_means():
    """Each metric's population mean (a pilot of 20,000 queries): the truth a planted drop is sized on."""
    if not _POPULATION:
        rng = random.Random("audit:population")
        queries = draw_queries(20000, rng, "p")
        _POPULATION.update(score(queries, run_of(queries, rng))["mean"])
    return _POPULATION


# --- the gate, as a user drives it ----------------------------------------------------------------------

def slices_of(qids):
    ordered = sorted(qids)
    return {qid: f"s{i % SLICES}" for i, qid in enumerate(ordered)}


def with_slice_scores(per_query, slices):
    """per_query (metric -> qid -> value) plus each slice's entries, as the library's slice keys."""
    table = dict(per_query)
    for tag in sorted(set(slices.values())):
        for metric in per_query:
            table[f"{tag}:{metric}"] = {q: v for q, v in per_query[metric].items() if slices[q] == tag}
    return table


def recommended(result, slices=None, slice_rule="metric"):
    """What --save-baseline prints (4 decimals); slices: the metric's value ("metric") or the library's
    resolved_tolerances on the slice's own scores ("resolved", not printed by the command line)."""
    per_query = rag_eval._per_query_by_metric(result)
    tolerances = {m: round(v, 4) for m, v in rag_eval._resolved_tolerances(per_query).items()}
    if slices:
        if slice_rule == "resolved":
            every = rag_eval._resolved_tolerances(with_slice_scores(per_query, slices))
            tolerances = {m: round(v, 4) for m, v in every.items()}
        else:
            for tag in sorted(set(slices.values())):
                tolerances.update({f"{tag}:{m}": tolerances[m] for m in METRICS})
    return tolerances


def settings_for(tolerances, runs=1):
    return rag_eval.GateSettings(rule="significant", resamples=RESAMPLES, runs=runs,
                                 tolerances={m: rag_eval.Tolerance(t) for m, t in tolerances.items()})


def baseline_of(result):
    return rag_eval.Baseline(dict(result["mean"]), rag_eval._per_query_by_metric(result))


def gate(result_a, result_b, tolerances, slices=None, runs=1):
    return rag_eval.gate(result_b, baseline_of(result_a), settings_for(tolerances, runs),
                         {q: [t] for q, t in slices.items()} if slices else None)


EXIT = {"pass": 0, "regression": 1, "inconclusive": 3}


class Rates:
    def __init__(self):
        self.counts, self.total = {}, 0

    def add(self, outcome):
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        self.total += 1

    def rate(self, outcome):
        r = self.counts.get(outcome, 0) / self.total
        return r, math.sqrt(r * (1 - r) / self.total)

    def show(self, *outcomes):
        return " / ".join("%.1f%% ± %.1f" % tuple(100 * x for x in self.rate(o)) for o in outcomes)


# --- the cells --------------------------------------------------------------------------------------------

_PAIRS = {}


def pairs(n, sims, seed, churn=None):
    """``sims`` fresh (queries, result A, result B) of n queries: B an equally good retriever (churn 5-20%,
    drawn per pair, unless given).  Cached: the cells of one size share their pairs (planting copies B)."""
    key = (n, sims, seed, churn)
    if key not in _PAIRS:
        rng = random.Random(f"audit:{seed}:pairs:{n}:{churn}")
        found = []
        for _ in range(sims):
            queries = draw_queries(n, rng)
            run_a = run_of(queries, rng)
            run_b = churned(queries, run_a, churn if churn is not None else rng.uniform(0.05, 0.2), rng)
            found.append((sorted(queries), score(queries, run_a), score(queries, run_b)))
        _PAIRS[key] = found
    return _PAIRS[key]


def copied(result):
    return dict(result, per_query={q: dict(row) for q, row in result["per_query"].items()}, mean=dict(result["mean"]))


def cell(n, sims, seed, churn=None, sliced=False, slice_rule="metric", tol="recommended", drop=0.0, which=None):
    """One cell over ``pairs``: a planted drop of ``drop`` x tolerance on ``which`` metrics (None: all);
    ``tol``: "recommended" (A's own, as printed) or a number (every metric and slice)."""
    rng = random.Random(f"audit:{seed}:{n}:{churn}:{sliced}:{slice_rule}:{tol}:{drop}:{which}")
    mu = population_means()
    rates = Rates()
    for qids, result_a, result_b in pairs(n, sims, seed, churn):
        slices = slices_of(qids) if sliced else None
        if tol == "recommended":
            tolerances = recommended(result_a, slices, slice_rule)
        else:
            tolerances = {m: tol for m in METRICS}
            if slices:
                tolerances.update({f"{t}:{m}": tol for t in set(slices.values()) for m in METRICS})
        if drop:
            shares = {m: min(1.0, drop * tolerances[m] / mu[m]) for m in (which or METRICS)}
            result_b = plant(copied(result_b), shares, rng)
        rates.add(gate(result_a, result_b, tolerances, slices)["verdict"])
    return rates


def table_aa(sims, seed, sizes):
    print("\n## A/A: two equally good retrievers (churn 5-20%, drawn per simulation), recommended tolerances\n")
    print("| queries | slices | tests | pass | inconclusive | fail (exit 1) |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        for sliced, rule in ((False, "metric"), (True, "metric"), (True, "resolved")):
            r = cell(n, sims, seed, sliced=sliced, slice_rule=rule)
            label = "no" if not sliced else ("3, slice tol = metric's" if rule == "metric" else "3, resolved per slice")
            print(f"| {n} | {label} | {32 if sliced else 8} | {r.show('pass')} | {r.show('inconclusive')} | "
                  f"{r.show('regression')} |", flush=True)
    print("\nFull churn (every query redrawn: a different retriever of equal quality), no slices:\n")
    for n in sizes:
        r = cell(n, sims, seed, churn=1.0)
        print(f"| {n} | no, churn 100% | 8 | {r.show('pass')} | {r.show('inconclusive')} | {r.show('regression')} |",
              flush=True)


def table_drops(sims, seed, sizes):
    print("\n## Planted drops (churn 5-20%), no slices\n")
    print("| queries | tolerance | planted on | drop | fail (exit 1) | pass | inconclusive |")
    print("|---|---|---|---|---|---|---|")
    for n in sizes:
        for tol in (["recommended"] if n >= 50 else []) + [0.02, 0.1]:
            for which, label in ((None, "all 8"), (["success@5"], "success@5 (0/1)"), (["ndcg@10"], "ndcg@10")):
                for drop in (1.0, 2.0):
                    if drop == 2.0 and which is not None:
                        continue
                    r = cell(n, sims, seed, tol=tol, drop=drop, which=which)
                    print(f"| {n} | {tol} | {label} | {drop:g}x | {r.show('regression')} | {r.show('pass')} | "
                          f"{r.show('inconclusive')} |", flush=True)
    print("\nWith 3 slices (32 tests), recommended tolerances (slices at the metric's), all 8 metrics fall:\n")
    for n in [s for s in sizes if s >= 50]:
        for drop in (1.0, 2.0):
            r = cell(n, sims, seed, sliced=True, drop=drop)
            print(f"| {n} | recommended, 3 slices | all 8 | {drop:g}x | {r.show('regression')} | {r.show('pass')} | "
                  f"{r.show('inconclusive')} |", flush=True)


def five_candidates(n, rng, sims, churn, tolerances):
    """Rates of ``sims`` gates of five candidates with one baseline in one call (runs=5): each candidate is the
    baseline's run with a share ``churn(rng)`` of its queries redrawn; ``tolerances(result)`` the gate's."""
    rates = Rates()
    for _ in range(sims):
        queries = draw_queries(n, rng)
        run_a = run_of(queries, rng)
        result_a = score(queries, run_a)
        allowed = tolerances(result_a)
        verdicts = [gate(result_a, score(queries, churned(queries, run_a, churn(rng), rng)), allowed, runs=5)["verdict"]
                    for _ in range(5)]
        rates.add("regression" if "regression" in verdicts else "inconclusive" if "inconclusive" in verdicts
                  else "pass")
    return rates


def table_candidates(sims, seed, sizes):
    sims = max(20, sims // 2)
    print("\n## Five equally good candidates gated with one baseline in one call (runs=5), recommended tolerances\n")
    print("| queries | exit 1 (any candidate regressed) | exit 0 (all passed) |")
    print("|---|---|---|")
    for n in sizes:
        rates = five_candidates(n, random.Random(f"audit:{seed}:candidates:{n}"), sims,
                                lambda rng: rng.uniform(0.05, 0.2), recommended)
        print(f"| {n} | {rates.show('regression')} | {rates.show('pass')} |", flush=True)
    print("\nThe same at a tolerance of 0.02, every query redrawn (churn 100%):\n")
    for n in [s for s in sizes if s <= 200]:
        rates = five_candidates(n, random.Random(f"audit:{seed}:candidates0.02:{n}"), sims, lambda rng: 1.0,
                                lambda result: {m: 0.02 for m in METRICS})
        print(f"| {n} (churn 100%) | {rates.show('regression')} | - |", flush=True)


def table_sizing(sims, seed, sizes):
    """detectable_drop and queries_needed as reported, against the rule's power measured at them."""
    print("\n## Reported sizing vs measured: a drop of the reported min_detectable_drop (80% power promised) "
          "on one metric, the others at tolerance 1\n")
    print("| queries | metric | tolerance | reported min_detectable_drop (median) | measured: that metric's verdict "
          "is regression |")
    print("|---|---|---|---|---|")
    mu = population_means()
    for n in sizes:
        for metric, tol in (("success@5", 0.05), ("ndcg@10", 0.05), ("recall@5", 0.02)):
            rng = random.Random(f"audit:{seed}:sizing:{n}:{metric}")
            rates, reported = Rates(), []
            for _, result_a, result_b in pairs(n, sims, seed):
                tolerances = {m: 1.0 for m in METRICS}
                tolerances[metric] = tol
                # what the user reads: the detectable drop of this comparison (the A/A gate of the pair)
                shown = gate(result_a, result_b, tolerances)["metrics"][metric]["min_detectable_drop"]
                if shown is None or shown >= mu[metric]:
                    rates.add("beyond the mean")
                    continue
                reported.append(shown)
                dropped = plant(copied(result_b), {metric: shown / mu[metric]}, rng)
                rates.add(gate(result_a, dropped, tolerances)["metrics"][metric]["verdict"])
            median = sorted(reported)[len(reported) // 2] if reported else None
            print(f"| {n} | {metric} | {tol} | {median if median is None else round(median, 4)} | "
                  f"{rates.show('regression')} |", flush=True)
    print("\n| tolerance | metric | reported queries_needed (median over 20 A/A gates of 200 queries) | at that n: "
          "A/A pass | 2x tolerance fail |")
    print("|---|---|---|---|---|")
    for metric, tol in (("success@5", 0.05), ("ndcg@10", 0.05)):
        tolerances = {m: 1.0 for m in METRICS}
        tolerances[metric] = tol
        needed = [gate(a, b, tolerances)["metrics"][metric]["queries_needed"] for _, a, b in pairs(200, sims, seed)[:20]]
        n = sorted(needed)[len(needed) // 2]
        rng = random.Random(f"audit:{seed}:needed:{metric}")
        aa, worse = Rates(), Rates()
        for _, result_a, result_b in pairs(n, sims // 2, seed):
            aa.add(gate(result_a, result_b, tolerances)["metrics"][metric]["verdict"])
            dropped = plant(copied(result_b), {metric: 2 * tol / population_means()[metric]}, rng)
            worse.add(gate(result_a, dropped, tolerances)["metrics"][metric]["verdict"])
        print(f"| {tol} | {metric} | {n} | {aa.show('pass')} | {worse.show('regression')} |", flush=True)


def table_calibrate(sims, seed, sizes):
    print("\n## --calibrate (rag_eval.calibrate, now = run B, 40 simulations) on 5 pairs vs this simulation, "
          "recommended tolerances\n")
    print("| queries | calibrate A/A pass (mean; each pair) | simulated A/A pass | calibrate 2x fail | simulated 2x fail |")
    print("|---|---|---|---|---|")
    for n in [s for s in sizes if s >= 50]:
        shown = {"a/a": [], "drop 2x tolerance": []}
        for _, result_a, result_b in pairs(n, sims, seed)[:5]:
            found = rag_eval.calibrate(baseline_of(result_a), settings_for(recommended(result_a)), 40, None,
                                       rag_eval._per_query_by_metric(result_b))["scenarios"]
            shown["a/a"].append(found["a/a"]["pass"]["rate"])
            shown["drop 2x tolerance"].append(found["drop 2x tolerance"]["regression"]["rate"])
        aa, worse = cell(n, sims, seed), cell(n, sims, seed, drop=2.0)
        mean = lambda xs: "%.1f%% (%s)" % (100 * sum(xs) / len(xs), ", ".join("%.0f" % (100 * x) for x in xs))  # noqa
        print(f"| {n} | {mean(shown['a/a'])} | {aa.show('pass')} | {mean(shown['drop 2x tolerance'])} | "
              f"{worse.show('regression')} |", flush=True)


def table_calibrate_fixed(sims, seed, n=200, tol=0.05, churn=0.125, pairs_shown=10):
    """--calibrate where its rates are neither 0 nor 1: a fixed tolerance, a fixed churn."""
    print(f"\n## --calibrate at a fixed tolerance {tol}, churn {churn:.1%}, {n} queries: calibrate (40 simulations) "
          f"on each of {pairs_shown} pairs vs this simulation ({sims} pairs)\n")
    print("| scenario | calibrate: mean over pairs (min-max) | simulated |")
    print("|---|---|---|")
    tolerances = {m: tol for m in METRICS}
    shown = {"a/a": [], "drop 1x tolerance": [], "drop 2x tolerance": []}
    for _, result_a, result_b in pairs(n, sims, seed, churn)[:pairs_shown]:
        found = rag_eval.calibrate(baseline_of(result_a), settings_for(tolerances), 40, None,
                                   rag_eval._per_query_by_metric(result_b))["scenarios"]
        for name in shown:
            shown[name].append({o: found[name][o]["rate"] for o in ("pass", "regression", "inconclusive")})
    for name, factor in (("a/a", 0.0), ("drop 1x tolerance", 1.0), ("drop 2x tolerance", 2.0)):
        simulated = cell(n, sims, seed, churn=churn, tol=tol, drop=factor)
        for outcome in ("pass", "regression"):
            xs = [row[outcome] for row in shown[name]]
            print(f"| {name}: {outcome} | {100 * sum(xs) / len(xs):.1f}% ({100 * min(xs):.0f}-{100 * max(xs):.0f}) | "
                  f"{simulated.show(outcome)} |", flush=True)


def write_json(path, data):
    with open(path, "w") as out:
        json.dump(data, out)


def cli(argv):
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = rag_eval.main(argv)
    return code, err.getvalue()


def tolerance_args(tolerances):
    return [arg for m, t in sorted(tolerances.items()) for arg in ("--max-drop", f"{m}={t}")]


def table_cli(sims, seed):
    """The command line gives the library's exit codes (a few pairs, with a planted-free A/A)."""
    rng = random.Random(f"audit:{seed}:cli")
    same = 0
    with tempfile.TemporaryDirectory() as folder:
        path = lambda name: os.path.join(folder, name)  # noqa: E731
        for _ in range(sims):
            n = rng.choice((50, 200))
            queries = draw_queries(n, rng)
            run_a = run_of(queries, rng)
            run_b = churned(queries, run_a, rng.uniform(0.05, 0.2), rng)
            write_json(path("qrels.json"), qrels_of(queries))
            write_json(path("a.json"), run_a)
            write_json(path("b.json"), run_b)
            code, err = cli([path("qrels.json"), path("a.json"), "--k", "5,10", "--save-baseline", path("base.json")])
            printed = err.split("resolve (")[1].split("): ")[1].split(" (--max-drop")[0]
            tolerances = dict(item.split("=") for item in printed.split(", "))
            code, _ = cli([path("qrels.json"), path("b.json"), "--k", "5,10", "--baseline", path("base.json"),
                           "--gate", "significant", "--resamples", "100"] + tolerance_args(tolerances))
            library = gate(score(queries, run_a), score(queries, run_b), recommended(score(queries, run_a)))
            same += code == EXIT[library["verdict"]]
    print(f"\nCommand line vs library: {same} of {sims} exit codes equal (printed tolerances parsed from stderr)")


def table_ratchet(chains, seed, n=200, steps=15):
    """Chains of 15 A/A runs through main(): --update-baseline --ratchet vs a fixed baseline."""
    print(f"\n## Ratchet: {chains} chains of {steps} equally good runs (churn 5-20%), {n} queries, "
          "recommended tolerances, main() with --update-baseline --ratchet\n")
    rng = random.Random(f"audit:{seed}:ratchet:{n}")
    rose = after_rise = after_rise_fail = fixed = fixed_fail = 0
    with tempfile.TemporaryDirectory() as folder:
        path = lambda name: os.path.join(folder, name)  # noqa: E731
        for _ in range(chains):
            queries = draw_queries(n, rng)
            run_a = run_of(queries, rng)
            write_json(path("qrels.json"), qrels_of(queries))
            write_json(path("a.json"), run_a)
            cli([path("qrels.json"), path("a.json"), "--k", "5,10", "--save-baseline", path("fixed.json")])
            cli([path("qrels.json"), path("a.json"), "--k", "5,10", "--save-baseline", path("moving.json")])
            tolerances = recommended(score(queries, run_a))
            common = ["--k", "5,10", "--gate", "significant", "--resamples", "100"] + tolerance_args(tolerances)
            risen = False
            for _ in range(steps):
                write_json(path("b.json"), churned(queries, run_a, rng.uniform(0.05, 0.2), rng))
                code_fixed, _ = cli([path("qrels.json"), path("b.json"), "--baseline", path("fixed.json")] + common)
                fixed += 1
                fixed_fail += code_fixed == 1
                with open(path("moving.json")) as inp:
                    before = json.load(inp)["mean"]
                code, _ = cli([path("qrels.json"), path("b.json"), "--baseline", path("moving.json"),
                               "--update-baseline", "--ratchet"] + common)
                if risen:
                    after_rise += 1
                    after_rise_fail += code == 1
                with open(path("moving.json")) as inp:
                    now = json.load(inp)["mean"]
                if any(now[m] > before[m] + 1e-12 for m in before):
                    risen = True
            rose += risen
    se = lambda k, t: "%.1f%% ± %.1f (%d of %d)" % (100 * k / t, 100 * math.sqrt(k / t * (1 - k / t) / t), k, t) \
        if t else "-"  # noqa: E731
    print(f"chains with a rise: {se(rose, chains)}; runs after a rise failed: {se(after_rise_fail, after_rise)}; "
          f"the same runs on the fixed baseline failed: {se(fixed_fail, fixed)}")


def pass_lattice(sizes):
    """Exact (no Monte Carlo): a 0/1 measure, no churn, a true drop t made of queries that lost it
    (P(delta = -1) = t whatever the mean).  The gate's verdict depends only on x, the queries lost, so
    P(pass | drop = t) = sum over x of Binomial(x; n, t) [x passes]; the worst over a grid of t."""
    print("\n## Exact false pass at a true drop = tolerance, 0/1 measure, no churn (binomial, not simulated)\n")
    print("| queries | worst P(pass) | at tolerance t | zero-loss pass threshold (t at which x = 0 passes) |")
    print("|---|---|---|---|")
    for n in sizes:
        passes = {}
        before = {f"q{i:05d}": {"success@5": 1.0} for i in range(n)}

        def passed(x, t):
            if (x, t) not in passes:
                after = {q: {"success@5": 0.0 if i < x else 1.0} for i, q in enumerate(sorted(before))}
                result = {"k": [5], "per_query": after, "mean": {"success@5": (n - x) / n}, "unscored": []}
                base = rag_eval.Baseline({"success@5": 1.0}, {"success@5": {q: 1.0 for q in before}})
                report = rag_eval.gate(result, base, settings_for({"success@5": t}))
                passes[x, t] = report["verdict"] == "pass"
            return passes[x, t]

        worst = (-1.0, 0.0)
        grid = [round(c / n, 6) for c in [i / 20 for i in range(20, 200)]]  # t = 1/n .. 10/n
        for t in grid:
            if t >= 1:
                continue
            total, x = 0.0, 0
            while x <= n and passed(x, t):
                total += math.comb(n, x) * t ** x * (1 - t) ** (n - x)
                x += 1
            worst = max(worst, (total, t))
        threshold = next((t for t in grid if passed(0, t)), None)
        print(f"| {n} | {100 * worst[0]:.2f}% | {worst[1]} ({worst[1] * n:.2f} / n) | {threshold} |", flush=True)


def table_worst(sims, seed, n=200, t=0.01375):
    """The lattice's worst tolerance (2.75 / n) on success@10 (mean 0.93) through the generator, with churn."""
    print(f"\n## A drop of exactly t = {t} on success@10 alone (the others at tolerance 1), {n} queries, "
          f"{sims} simulations: false pass (should be <= 5%)\n")
    print("| churn | pass (a false pass) | fail | inconclusive |")
    print("|---|---|---|---|")
    mu = population_means()
    for churn in (0.0, 0.05, 0.2):
        rng = random.Random(f"audit:{seed}:worst:{churn}")
        rates = Rates()
        tolerances = {m: 1.0 for m in METRICS}
        tolerances["success@10"] = t
        for _, result_a, result_b in pairs(n, sims, seed, churn):
            dropped = plant(copied(result_b), {"success@10": t / mu["success@10"]}, rng)
            rates.add(gate(result_a, dropped, tolerances)["verdict"])
        print(f"| {churn:.0%} | {rates.show('pass')} | {rates.show('regression')} | {rates.show('inconclusive')} |",
              flush=True)


ZOOM = "50:0.1:success@5,200:recommended:success@5,50:0.1:success@10,200:0.02:success@10"


def table_zoom(sims, seed, modules, cells=ZOOM):
    """The cells near alpha, with more simulations, under each rag_eval given (the one before a fix and after)."""
    global rag_eval
    print(f"\n## Near alpha, {sims} simulations per cell (churn 5-20%), one metric falls by exactly its tolerance: "
          "pass (a false pass, <= 5% asked)\n")
    print("| queries | tolerance | planted on | " + " | ".join(name for name, _ in modules) + " |")
    print("|---|---|---|" + "---|" * len(modules))
    for n, tol, which in (text.split(":") for text in cells.split(",")):
        n, tol = int(n), (tol if tol == "recommended" else float(tol))
        shown = []
        for _, module in modules:
            rag_eval = module
            shown.append(cell(n, sims, seed, tol=tol, drop=1.0, which=[which]).show("pass"))
        print(f"| {n} | {tol} | {which} | " + " | ".join(shown) + " |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--simulations", type=int, default=200)
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sizes", default="10,50,200,1000")
    parser.add_argument("--only", default="aa,drops,candidates,sizing,calibrate,calib2,lattice,worst,zoom,cli,ratchet")
    parser.add_argument("--zoom", default=ZOOM, help="the zoom cells: n:tolerance:metric,...")
    parser.add_argument("--reference", help="another rag_eval.py: the zoom cells under it too (before a fix)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    parts = args.only.split(",")
    mu = population_means()
    print("population means: " + ", ".join(f"{m}={mu[m]:.3f}" for m in METRICS))
    if "aa" in parts:
        table_aa(args.simulations, args.seed, sizes)
    if "drops" in parts:
        table_drops(args.simulations, args.seed, sizes)
    if "candidates" in parts:
        table_candidates(args.simulations, args.seed, [s for s in sizes if s >= 50])
    if "sizing" in parts:
        table_sizing(args.simulations, args.seed, [s for s in sizes if s >= 50])
    if "calibrate" in parts:
        table_calibrate(args.simulations, args.seed, sizes)
    if "calib2" in parts:
        table_calibrate_fixed(args.simulations, args.seed)
    if "lattice" in parts:
        pass_lattice(sizes)
    if "worst" in parts:
        table_worst(5 * args.simulations, args.seed)
    if "zoom" in parts:
        modules = [("this rag_eval.py", rag_eval)]
        if args.reference:
            import importlib.util

            spec = importlib.util.spec_from_file_location("rag_eval_reference", args.reference)
            reference = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(reference)
            modules.insert(0, (f"--reference {os.path.basename(args.reference)}", reference))
        table_zoom(5 * args.simulations, args.seed, modules, args.zoom)
    if "cli" in parts:
        table_cli(max(10, args.simulations // 10), args.seed)
    if "ratchet" in parts:
        table_ratchet(args.chains, args.seed)


if __name__ == "__main__":
    main()
