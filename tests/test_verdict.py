"""The statistical gate's verdict (``--gate significant``): pass, regression or
inconclusive, MaxT over the family, exact sign tests, effect sizes, the honest
ratchet and ``--calibrate``, each against an independent computation.
"""

import action
import itertools
import json
import math
import os
import random
import tempfile
import unittest
import unittest.mock
from fractions import Fraction

import rag_eval
from tests.helpers import ERROR_PREFIX, QRELS, RUN, assert_error_line, run_main, scores_by_metric, TempDirMixin


class TestSignificantGateTestsWhatItGates(TempDirMixin, unittest.TestCase):
    """Item 9: the paired test and the drop cover the same queries; a baseline must reproduce its means."""

    def setUp(self):
        super().setUp()
        self.saved = self.path("saved.json")
        code, out, err = run_main([QRELS, RUN, "--save-baseline", self.saved])
        self.assertEqual(code, 0, err)

    def test_other_queries_are_refused(self):
        qrels = json.loads(self.read(QRELS))
        qrels.update({f"new{i}": {f"doc{i}": 2} for i in range(25)})  # 25 queries more, all missed: a big drop
        changed = self.write("qrels.json", qrels)
        line = self.assert_error([changed, RUN, "--baseline", self.saved, "--gate", "significant",
                                  "--allow-qrels-change", "--allow-partial-run"], ["--gate significant", "3 queries", "28"])
        self.assertIn("3 of them shared", line)
        code, out, err = run_main([changed, RUN, "--baseline", self.saved, "--allow-qrels-change", "--allow-partial-run"])
        self.assertEqual(code, rag_eval.EXIT_REGRESSION, err)  # the drop rule still gates it

    def test_same_queries_still_gate(self):
        code, out, err = run_main([QRELS, RUN, "--baseline", self.saved, "--gate", "significant"])
        self.assertEqual(code, rag_eval.EXIT_INCONCLUSIVE, err)  # gated: 3 queries decide nothing either way
        self.assertEqual(json.loads(out)["gate"]["verdict"], "inconclusive")

    def test_a_baseline_whose_scores_miss_its_means_is_corrupt(self):
        data = json.loads(self.read(self.saved))
        data["mean"]["recall@5"] = 0.9  # the per-query scores average to 2/3
        corrupt = self.write("corrupt.json", data)
        line = self.assert_error([QRELS, RUN, "--baseline", corrupt], [corrupt, "corrupt", "recall@5"])
        self.assertIn("do not average to its mean", line)
        data["mean"]["recall@5"] = 2 / 3 + 1e-12  # float noise is no corruption
        self.assertEqual(run_main([QRELS, RUN, "--baseline", self.write("noise.json", data)])[0], 0)


class TestSignificantGate(unittest.TestCase):
    """The rule of docs/gate.md, by hand: a regression when D + w(q at alpha / tests) < -t, a pass when
    D - w(q at alpha) - 1 / (2 n) >= -t, w = a + sqrt(a**2 + q**2 s**2 / n), a = q**2 / (2 n).  Kills: a regression read
    off the p-value, a bound compared with 0 instead of the tolerance, a pass on no evidence (s = 0)."""

    @staticmethod
    def judge(deltas, tolerance=0.0, start=1.0):
        """Gate recall@5 on queries that moved by ``deltas`` from ``start``, rule significant."""
        qids = [f"q{i:03d}" for i in range(len(deltas))]
        now = {qid: start + delta for qid, delta in zip(qids, deltas)}
        result = {"k": 5, "mean": {"recall@5": math.fsum(now.values()) / len(now)},
                  "per_query": {qid: {"recall": value} for qid, value in now.items()}}
        baseline = rag_eval.Baseline({"recall@5": start}, {"recall@5": {qid: start for qid in qids}})
        settings = rag_eval.GateSettings(rule="significant", default=rag_eval.Tolerance(tolerance), resamples=200)
        return rag_eval.gate(result, baseline, settings)["metrics"]["recall@5"]

    @staticmethod
    def bounds(deltas):
        n, mean = len(deltas), math.fsum(deltas) / len(deltas)
        spread = rag_eval._standard_deviation(deltas)
        width = [rag_eval._bound_width(spread, n, rag_eval._quantile(0.95, n - 1)) for _ in "lh"]
        return [mean - width[0] - 1 / (2 * n), mean + width[1]]  # the pass bound's half step

    def test_the_bounds_by_hand(self):
        for deltas in ([-0.5] * 40, [-0.01] * 30 + [-0.99] * 10, [0.0] * 300, [0.0, -0.5] * 20):
            with self.subTest(deltas=deltas[:2]):
                entry = self.judge(deltas, 0.05)
                for got, want in zip(entry["interval"], self.bounds(deltas)):
                    self.assertAlmostEqual(got, max(-1.0, min(1.0, want)), places=12)

    def test_six_equal_falls_are_no_evidence_forty_are(self):
        # every delta -1/2, no spread: a t bound would be [-1/2, -1/2] at any n; this one is q**2 / n wide
        six, forty = self.judge([-0.5] * 6), self.judge([-0.5] * 40)
        self.assertEqual((six["p_value"], six["exact"]), (2 / 64, True))  # significant against no change ...
        self.assertAlmostEqual(six["interval"][1], -0.5 + rag_eval._quantile(0.95, 5) ** 2 / 6, places=12)
        self.assertEqual(six["verdict"], "inconclusive")  # ... but 6 queries cannot show it
        self.assertAlmostEqual(forty["interval"][1], -0.5 + rag_eval._quantile(0.95, 39) ** 2 / 40, places=12)
        self.assertEqual(forty["verdict"], "regression")

    def test_a_fall_shown_beyond_zero_but_not_beyond_the_tolerance_is_inconclusive(self):
        deltas = [-1.0] * 30 + [0.0] * 170  # D = -0.15, p against no change tiny
        high = self.bounds(deltas)[1]  # about -0.101
        for tolerance, verdict in ((0.05, "regression"), (0.12, "inconclusive"), (0.21, "pass")):
            with self.subTest(tolerance=tolerance):
                entry = self.judge(deltas, tolerance)
                self.assertLess(entry["p_adjusted"], 0.01)  # 1 / (1 + resamples): significant against no change
                self.assertEqual(entry["verdict"], verdict)
                self.assertEqual(entry["verdict"] == "regression", high < -tolerance)

    def test_no_query_changed_passes_only_on_enough_queries(self):
        # the "[0, 0] when no query changed": the low bound is -(q**2 + 1/2) / n, the rule of three
        for n, verdict in ((10, "inconclusive"), (100, "inconclusive"), (200, "pass"), (1000, "pass")):
            with self.subTest(n=n):
                entry = self.judge([0.0] * n, 0.02)
                self.assertAlmostEqual(entry["interval"][0], -(rag_eval._quantile(0.95, n - 1) ** 2 + 0.5) / n,
                                       places=12)
                self.assertEqual(entry["verdict"], verdict)

    def test_a_0_1_measure_falling_by_its_tolerance_passes_at_most_alpha(self):
        # Exact, not simulated: a 0/1 measure loses x of n queries (delta -1), each with chance t, the true drop;
        # the verdict depends on x alone, so P(pass) = sum over the x that pass of Binomial(x; n, t).  Without
        # the half step the bound is Wilson's, and at t = 2.75 / n it passed x = 0, (1 - t)**n = 6.3% at n = 200
        # (6.0% at 100, 6.5% at 1000; tools/bench/audit_gate.py finds the worst t).
        for n in (50, 200, 1000):
            for c in (2.73, 2.75, 2.85, 3.0, 3.3, 4.5, 6.1):
                t, chance, x = c / n, 0.0, 0
                with self.subTest(n=n, t=t):
                    while self.judge([-1.0] * x + [0.0] * (n - x), t)["verdict"] == "pass":
                        chance += math.comb(n, x) * t ** x * (1 - t) ** (n - x)
                        x += 1
                    self.assertLessEqual(chance, 0.05)

    def test_a_fall_of_exactly_the_tolerance_is_neither(self):
        # every query falls by exactly the tolerance: shown neither beyond it nor within it, at any n
        for n in (10, 100, 2000):
            with self.subTest(n=n):
                self.assertEqual(self.judge([-0.02] * n, 0.02)["verdict"], "inconclusive")

    def test_a_tolerance_of_zero_passes_only_a_gain_shown(self):
        self.assertEqual(self.judge([0.0] * 2000, 0.0)["verdict"], "inconclusive")
        self.assertEqual(self.judge([0.5] * 40, 0.0, start=0.5)["verdict"], "pass")

    def test_below_six_queries_nothing_is_decided(self):
        self.assertEqual(rag_eval._MIN_PAIRED, 6)
        self.assertEqual(self.judge([-1.0] * 5, 0.0)["verdict"], "inconclusive")
        self.assertEqual(self.judge([0.5] * 5, 0.5, start=0.5)["verdict"], "inconclusive")

    def test_rule_drop_fails_both(self):
        for deltas in ([-0.5] * 6, [-0.01] * 5 + [-0.99]):
            with self.subTest(deltas=deltas):
                qids = [f"q{i}" for i in range(6)]
                result = {"k": 5, "mean": {"recall@5": 1.0 + math.fsum(deltas) / 6},
                          "per_query": {qid: {"recall": 1.0 + d} for qid, d in zip(qids, deltas)}}
                baseline = rag_eval.Baseline({"recall@5": 1.0}, {"recall@5": {qid: 1.0 for qid in qids}})
                settings = rag_eval.GateSettings(rule="drop", default=rag_eval.Tolerance(0.0), resamples=200)
                self.assertEqual(rag_eval.gate(result, baseline, settings)["metrics"]["recall@5"]["verdict"],
                                 "regression")


FULL = os.environ.get("RAG_EVAL_FULL") == "1"  # CI's full runs: the gates of the ratchet chains draw more resamples


def brute_force_maxt(deltas):
    """Step-down MaxT (Westfall & Young 1993, algorithm 2.8) over every sign pattern of the
    queries where any test differs; statistic |sum| / sqrt(sum of squares); exact rationals."""
    keys = sorted(deltas)
    queries = sorted({q for key in keys for q, d in deltas[key].items() if d})
    def stat(key, signs):
        values = deltas[key]
        scale = math.sqrt(sum(d * d for d in values.values()))
        if not scale:
            return 0.0
        return abs(sum(signs.get(q, 1) * d for q, d in values.items())) / scale
    identity = {}
    observed = {key: stat(key, identity) for key in keys}
    order = sorted(keys, key=lambda key: (-observed[key], key))
    patterns = [dict(zip(queries, signs)) for signs in itertools.product((1, -1), repeat=len(queries))]
    adjusted, floor = {}, Fraction(0)
    for rank, key in enumerate(order):
        later = order[rank:]
        hits = sum(1 for signs in patterns
                   if max(stat(other, signs) for other in later) >= observed[key] * (1 - 1e-9))
        floor = max(floor, Fraction(hits, len(patterns)))
        adjusted[key] = floor
    return adjusted


def exact_sign_test(better, worse):
    n, fewer = better + worse, min(better, worse)
    if 2 * fewer >= n:
        return Fraction(1)
    return min(Fraction(1), Fraction(2 * sum(math.comb(n, i) for i in range(fewer + 1)), 2 ** n))


def gate_of(before, after, rule="significant", tolerance=0.0, adjust="maxt", resamples=2000, slices=None,
            tolerances=None):
    """Gate every metric of ``before``/``after`` ({metric: {qid: value}}), k = 5."""
    qids = sorted(next(iter(after.values())))
    result = {"k": 5, "mean": {m: math.fsum(v.values()) / len(v) for m, v in after.items()},
              "per_query": {q: {m.split("@")[0]: after[m][q] for m in after} for q in qids}}
    baseline = rag_eval.Baseline({m: math.fsum(v.values()) / len(v) for m, v in before.items()}, before)
    settings = rag_eval.GateSettings(rule=rule, default=rag_eval.Tolerance(tolerance), resamples=resamples,
                                     adjust=adjust, tolerances=tolerances or {})
    return rag_eval.gate(result, baseline, settings, slices)


class TestThreeOutcomes(unittest.TestCase):
    """--gate significant: pass, regression or inconclusive (exit 3)."""

    def one_metric(self, deltas, tolerance=0.02, n=50):
        before = {"recall@5": {f"q{i:02d}": 1.0 for i in range(n)}}
        after = {"recall@5": {f"q{i:02d}": 1.0 + (deltas[i] if i < len(deltas) else 0.0) for i in range(n)}}
        return gate_of(before, after, tolerance=tolerance)

    def test_no_evidence_is_inconclusive_not_pass(self):
        # the two cases: one query 1.0 -> 0.0, two queries falling by 0.5
        for deltas in ([-1.0], [-0.5, -0.5]):
            with self.subTest(deltas=deltas):
                gate = self.one_metric(deltas)
                entry = gate["metrics"]["recall@5"]
                self.assertEqual(entry["verdict"], "inconclusive")
                self.assertEqual(gate["verdict"], "inconclusive")
                self.assertFalse(gate["passed"])
                self.assertIsNotNone(entry["queries_needed"])

    def test_identical_runs_pass_on_enough_queries(self):
        # no query changed is evidence in proportion to n: within 0.02 on 200 queries, not on 50; never within 0
        self.assertEqual(self.one_metric([], tolerance=0.02, n=200)["verdict"], "pass")
        self.assertEqual(self.one_metric([], tolerance=0.02, n=50)["verdict"], "inconclusive")
        self.assertEqual(self.one_metric([], tolerance=0.0, n=200)["verdict"], "inconclusive")

    def test_evidence_within_the_tolerance_passes(self):
        # 200 queries, 10 lose 0.01: mean -0.0005, the interval's low end far above -0.02
        gate = self.one_metric([-0.01] * 10, tolerance=0.02, n=200)
        self.assertEqual(gate["metrics"]["recall@5"]["verdict"], "pass")

    def test_significant_drop_beyond_the_tolerance_is_a_regression(self):
        gate = self.one_metric([-1.0] * 10)  # 10 of 50 from 1 to 0: p = 2 / 2**10
        entry = gate["metrics"]["recall@5"]
        self.assertEqual(entry["verdict"], "regression")
        self.assertEqual(entry["p_value"], 2 / 2 ** 10)
        self.assertEqual(gate["verdict"], "regression")

    def test_exit_codes_and_the_inconclusive_option(self):
        with tempfile.TemporaryDirectory() as tmp:
            qrels = {f"q{i}": {f"d{i}": 1} for i in range(30)}
            run = {f"q{i}": [f"d{i}"] for i in range(30)}
            worse = dict(run, q0=["x"])  # one query from 1 to 0
            paths = {}
            for name, data in (("qrels", qrels), ("run", run), ("worse", worse)):
                paths[name] = os.path.join(tmp, name + ".json")
                with open(paths[name], "w") as f:
                    json.dump(data, f)
            common = [paths["qrels"], paths["worse"], "--baseline-run", paths["run"], "--gate", "significant",
                      "--resamples", "200"]
            for extra, code in (([], rag_eval.EXIT_INCONCLUSIVE), (["--inconclusive", "pass"], 0),
                                (["--inconclusive", "fail"], 1), (["--inconclusive", "exit"], 3)):
                with self.subTest(extra=extra):
                    got, out, err = run_main(common + extra)
                    self.assertEqual(got, code, err)
                    self.assertEqual(json.loads(out)["gate"]["verdict"], "inconclusive")
                    self.assertNotIn("REGRESSION", err)  # exit 1 from --inconclusive fail, but no regression line
            got, out, err = run_main(common + ["--format", "table"])
            self.assertTrue(out.startswith("INCONCLUSIVE (4: "), out)
            self.assertIn("queries would resolve it", out)
            # the default rule is unchanged: a drop of 1/30 beyond 0.02 fails
            got, _, _ = run_main([paths["qrels"], paths["worse"], "--baseline-run", paths["run"]])
            self.assertEqual(got, 1)

    def test_exit_3_is_documented_and_mapped_by_the_action(self):
        self.assertEqual(rag_eval.EXIT_INCONCLUSIVE, 3)
        self.assertIn("3 inconclusive", " ".join(rag_eval.__doc__.split()))
        self.assertIn(f"  {rag_eval.EXIT_INCONCLUSIVE}    inconclusive", rag_eval._help_epilog())
        self.assertEqual(action.outputs_of(3, "", "")["verdict"], "inconclusive")
        self.assertEqual(action.outputs_of(3, "", "")["passed"], "false")
        self.assertEqual(action.outputs_of(4, "", "")["verdict"], "error")


class TestExactSignTest(unittest.TestCase):
    def test_against_exact_rationals(self):
        for better, worse in [(0, 1), (0, 6), (1, 5), (3, 3), (0, 17), (2, 40), (10, 6), (7, 8), (0, 60), (45, 80)]:
            with self.subTest(better=better, worse=worse):
                want = exact_sign_test(better, worse)
                got = rag_eval._sign_test(better, better + worse)
                self.assertEqual(got, float(want))  # one correctly rounded division
                self.assertGreater(got, 0)

    def test_seventeen_all_worse_is_exact(self):
        before = {f"q{i:02d}": 1.0 for i in range(40)}
        after = dict(before, **{f"q{i:02d}": 0.0 for i in range(17)})
        comparison = rag_eval.compare_paired("success@5", before, after, resamples=500)
        self.assertEqual((comparison.p_value, comparison.exact), (2 / 2 ** 17, True))  # not 1/(1+R)

    def test_large_counts_never_zero(self):
        self.assertEqual(rag_eval._sign_test(0, 5000), 5e-324)  # below the smallest float: shown as it
        self.assertEqual(rag_eval._sign_test(2500, 5000), 1.0)
        p = rag_eval._sign_test(960, 2_000)  # the exact rational reference costs seconds at 10,000
        self.assertAlmostEqual(p, float(exact_sign_test(960, 1040)), delta=1e-12 * p)


class TestMaxT(unittest.TestCase):
    def test_agrees_with_brute_force_over_every_sign_pattern(self):
        rng = random.Random(15)
        checked = 0
        for trial in range(30):
            n = rng.randint(2, 9)
            queries = [f"q{i}" for i in range(n)]
            tests = {}
            for index in range(rng.randint(1, 4)):
                pool = [-1.0, 0.0, 1.0] if index == 0 else [-0.5, -0.25, 0.0, 0.125, 0.25, 0.5, -1.0]
                tests[f"m{index}"] = {q: rng.choice(pool) for q in queries}
            if trial % 3 == 0:  # a slice: a test on some of the queries only
                tests["slice:m0"] = {q: tests["m0"][q] for q in queries[: max(1, n // 2)]}
            with self.subTest(trial=trial, tests=tests):
                want = brute_force_maxt(tests)
                got = rag_eval.maxt(tests, resamples=100)
                for key in tests:
                    raw = rag_eval.sign_flip_test(tests[key].values())[0]
                    self.assertAlmostEqual(got[key], max(float(want[key]), raw), places=12)
                checked += 1
        self.assertEqual(checked, 30)

    def test_an_adjusted_p_is_never_below_the_tests_own(self):
        # 20 of 20 queries worse: the family's share is tiny, but a test's own p (p_values) is a floor, sampled
        # and exact alike (a sampled p of its own draw can exceed the family's share)
        for queries in (12, 20):
            deltas = {"a": {f"q{i}": -1.0 for i in range(queries)}, "b": {f"q{i}": -0.5 for i in range(queries)}}
            with self.subTest(queries=queries):
                shares = rag_eval.maxt(deltas, resamples=200, p_values={"a": 0.0, "b": 0.0})
                self.assertLess(max(shares.values()), 0.01)
                got = rag_eval.maxt(deltas, resamples=200, p_values={"a": 0.3, "b": 0.04})
                self.assertEqual(got, {"a": 0.3, "b": 0.3})  # b: at least a's, which comes before it

    def test_six_worse_of_fifty_maxt_against_holm(self):
        # success@5 falls on 6 of 50 queries and rises on none; recall, nDCG and MRR move on the
        # same six.  Each exact p is 2 / 2**6 = 0.03125 (the two one-sign patterns).  Holm over four
        # metrics: 4 * 0.03125 = 0.125.  MaxT: every metric reaches its own statistic only on those two
        # patterns of the same six signs, so the joint p stays 2/64.
        qids = [f"q{i:02d}" for i in range(50)]
        falls = {"success@5": [1.0] * 6, "recall@5": [0.5, 0.5, 1.0, 0.5, 1.0, 0.5],
                 "ndcg@5": [0.37, 0.63, 1.0, 0.5, 0.8, 0.3], "mrr@5": [0.5, 1.0, 1.0, 0.25, 1.0, 0.5]}
        before = {m: {q: 1.0 for q in qids} for m in falls}
        after = {m: dict(before[m], **{q: 1.0 - f for q, f in zip(qids, fall)}) for m, fall in falls.items()}
        deltas = {m: {q: after[m][q] - before[m][q] for q in qids} for m in falls}
        self.assertEqual(rag_eval.maxt(deltas), dict.fromkeys(sorted(falls), 2 / 64))
        raw = {m: rag_eval.sign_flip_test(d.values())[0] for m, d in deltas.items()}
        self.assertEqual(raw, dict.fromkeys(falls, 2 / 64))
        self.assertEqual(rag_eval._holm(raw), dict.fromkeys(falls, 0.125))
        maxt = gate_of(before, after)
        holm = gate_of(before, after, adjust="holm")
        for metric in falls:
            with self.subTest(metric):
                self.assertEqual(maxt["metrics"][metric]["p_adjusted"], 0.03125)
                self.assertEqual(maxt["metrics"][metric]["p_holm"], 0.125)
                self.assertEqual(holm["metrics"][metric]["p_adjusted"], 0.125)
                # the rule reads its bounds, never the p: the adjustment changes no verdict
                self.assertEqual(maxt["metrics"][metric]["verdict"], holm["metrics"][metric]["verdict"])
        self.assertEqual((maxt["adjust"], holm["adjust"]), ("maxt", "holm"))

    def test_sampled_agrees_with_exact_within_monte_carlo_error(self):
        rng = random.Random(4)
        queries = [f"q{i}" for i in range(12)]
        tests = {f"m{j}": {q: rng.choice([-0.5, -0.25, 0.0, 0.25, -1.0]) for q in queries} for j in range(3)}
        exact = rag_eval.maxt(tests)
        resamples = 4000
        with unittest.mock.patch.object(rag_eval, "_EXACT_SIGN_FLIP_MAX", 4):
            sampled = rag_eval.maxt(tests, resamples=resamples, p_values=dict.fromkeys(tests, 0.0))
        for key in tests:
            error = math.sqrt(exact[key] * (1 - exact[key]) / resamples)
            self.assertLess(abs(sampled[key] - exact[key]), 4 * error + 2 / resamples, key)
            self.assertGreater(sampled[key], 0)

    def test_sampled_is_seeded_and_never_zero(self):
        rng = random.Random(8)
        tests = {f"m{j}": {f"q{i}": -rng.random() for i in range(40)} for j in range(2)}
        first = rag_eval.maxt(tests, resamples=200, seed=3, p_values=dict.fromkeys(tests, 0.0))
        self.assertEqual(rag_eval.maxt(tests, resamples=200, seed=3, p_values=dict.fromkeys(tests, 0.0)), first)
        self.assertEqual(set(first.values()), {1 / 201})  # all 40 fall: no pattern of 200 reaches them

    def test_slices_and_cutoffs_are_in_the_family(self):
        qids = [f"q{i:02d}" for i in range(30)]
        tags = {q: ("billing" if i < 10 else "other") for i, q in enumerate(qids)}
        before = {"recall@5": {q: 1.0 for q in qids}}
        after = {"recall@5": dict(before["recall@5"], **{q: 0.5 for q in qids[:8]})}
        gate = gate_of(before, after, slices=tags, tolerances={"billing:recall@5": rag_eval.Tolerance(0.0)})
        entry = gate["metrics"]["billing:recall@5"]
        # two tests, all falls shared: MaxT keeps the one-test p, 2 / 2**8; Holm would double it
        self.assertEqual(entry["p_value"], 2 / 2 ** 8)
        self.assertEqual(entry["p_adjusted"], 2 / 2 ** 8)
        self.assertEqual(entry["p_holm"], 4 / 2 ** 8)


class TestEffectSizes(unittest.TestCase):
    """The mean delta with its interval, the standardised effect and the counts, in every format."""

    def setUp(self):
        qids = [f"q{i:02d}" for i in range(40)]
        self.before = {"recall@5": {q: 1.0 for q in qids}}
        self.after = {"recall@5": dict(self.before["recall@5"], **{q: 0.5 for q in qids[:8]}, q39=0.75)}

    def test_json_entry(self):
        entry = gate_of(self.before, self.after)["metrics"]["recall@5"]
        deltas = [-0.5] * 8 + [-0.25] + [0.0] * 31
        mean = sum(deltas) / 40
        sd = math.sqrt(sum((d - mean) ** 2 for d in deltas) / 39)
        self.assertAlmostEqual(entry["effect_size"], mean / sd, places=12)
        self.assertEqual((entry["improved"], entry["worse"], entry["same"]), (0, 9, 31))
        self.assertAlmostEqual(entry["mean_delta"], mean, places=15)
        self.assertLessEqual(entry["interval"][0], mean)

    def test_every_format_shows_them(self):
        gate = gate_of(self.before, self.after)
        result = {"abstention": {"queries": 0, "abstained": [], "share": None}, "dropped": [], "k": 5,
                  "mean": {"recall@5": gate["metrics"]["recall@5"]["now"]}, "queries": 40, "skipped": [],
                  "missing": [], "ties": {}, "unscored": []}
        report = rag_eval.build_report(result, gate_report=gate)
        entry = gate["metrics"]["recall@5"]
        for name in ("table", "markdown", "csv"):
            with self.subTest(name):
                text = rag_eval.FORMATTERS[name](report, 4)
                for header in ("delta low", "delta high", "effect", "better/worse/same", "p (adj.)"):
                    self.assertIn(header, text)
                self.assertIn("0/9/31", text)
                self.assertIn(f"{entry['effect_size']:.4f}", text)
                self.assertIn(f"{entry['interval'][0]:.4f}", text)
        data = json.loads(rag_eval.FORMATTERS["json"](report, 4))["gate"]["metrics"]["recall@5"]
        for field in ("effect_size", "interval", "mean_delta", "improved", "worse", "same", "p_adjusted"):
            self.assertIn(field, data)


class TestPowerAtTheEdges(unittest.TestCase):
    """A tolerance or an alpha so small that the power estimates leave a float's range: no traceback."""

    def test_a_tiny_tolerance_still_gates(self):
        # 20 of 40 queries lose 0.5: a regression for any tolerance below 0.1; the queries needed to resolve
        # 1e-160 are some 1e320, past a float (this was an OverflowError, exit 2 on the command line)
        qids = [f"q{i:02d}" for i in range(40)]
        before = {"recall@5": {q: 1.0 for q in qids}}
        after = {"recall@5": dict(before["recall@5"], **{q: 0.5 for q in qids[:20]})}
        for rule in ("drop", "significant"):
            with self.subTest(rule):
                entry = gate_of(before, after, rule=rule, tolerance=1e-160)["metrics"]["recall@5"]
                self.assertEqual((entry["verdict"], entry["queries_needed"]), ("regression", None))
        self.assertIsNone(rag_eval._queries_needed(0.2, 1e-200))

    def test_a_tiny_alpha_is_an_error_not_a_traceback(self):
        # 1 - 1e-17 / 2 is 1.0 in floats, where the normal quantile is infinite
        for call in (lambda: rag_eval._detectable_drop(0.2, 100, alpha=1e-17),
                     lambda: rag_eval._queries_needed(0.2, 0.05, alpha=1e-17)):
            with self.assertRaisesRegex(rag_eval.RagEvalError, r"^alpha .*\[1e-15, 1\).* \(0, 1\), .* 1e-17 and 0\.8$"):
                call()
        with self.assertRaisesRegex(rag_eval.RagEvalError, r"got 0\.05 and 1\.0$"):
            rag_eval._queries_needed(0.2, 0.05, power=1.0)
        with self.assertRaisesRegex(rag_eval.RagEvalError, r"got 1\.5 and 0\.8$"):  # 1 - 1.5/2 is a probability
            rag_eval._detectable_drop(0.2, 100, alpha=1.5)
        self.assertGreater(rag_eval._detectable_drop(0.2, 100, alpha=1e-15), rag_eval._detectable_drop(0.2, 100))
        fixtures = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
        code, out, err = run_main([os.path.join(fixtures, "qrels.json"), os.path.join(fixtures, "run.json"),
                                   "--alpha", "1e-16"])
        self.assertEqual((code, out), (2, ""))
        assert_error_line(self, err, names=["argument --alpha: ", "(1e-15 at least)"], quoted=["1e-16"])


def noisy_run(quality, rng):
    """One run of an unchanged system: per query, success and recall drawn around its quality."""
    per_query = {}
    for qid, q in quality.items():
        recall = min(1.0, max(0.0, round(q + rng.choice([-0.25, 0.0, 0.0, 0.25]), 2)))
        per_query[qid] = {"success": float(rng.random() < q), "recall": recall}
    mean = {f"{m}@5": math.fsum(v[m] for v in per_query.values()) / len(per_query) for m in ("success", "recall")}
    return {"k": 5, "mean": mean, "per_query": per_query, "unscored": [],
            "conventions": {"gain": "exp", "min_grade": 1, "judged_only": False, "doc_id_sep": None}}


def record_of(*arguments):
    """The extended baseline that ``--save-baseline`` (or a ratchet) would write, as read back (``per_query``
    as metric -> {query: value})."""
    record = json.loads(rag_eval._baseline_text(*arguments))
    return dict(record, per_query=scores_by_metric(record))


class TestHonestRatchet(unittest.TestCase):
    def chain(self, honest, runs=15, seed=5):
        rng = random.Random(seed)
        # 100 queries: the margins below are as wide as with 200 (2 raises, naive drift 0.035), in half the time
        quality = {f"q{i:03d}": rng.choice([0.2, 0.5, 0.8, 0.95]) for i in range(100)}
        record = record_of(noisy_run(quality, rng), "x")
        first = dict(record["mean"])
        # The chains end the same with 250 resamples a gate as with 500 (RAG_EVAL_FULL=1): the
        # same raises, the same means.
        settings = rag_eval.GateSettings(resamples=500 if FULL else 250)
        raises = 0
        for _ in range(runs):
            baseline = rag_eval.Baseline(record["mean"], record["per_query"], record["conventions"], "x")
            result = noisy_run(quality, rng)
            if honest:
                raised = rag_eval._significant_gains(rag_eval.gate(result, baseline, settings))
            else:  # the old ratchet takes any higher mean, all of the rise: no gate to run
                raised = {m: now - baseline.means[m] for m, now in result["mean"].items() if now > baseline.means[m]}
            raises += len(raised)
            record = record_of(result, "x", baseline, raised)
            for metric, scores in record["per_query"].items():  # a mean always matches its scores
                self.assertAlmostEqual(math.fsum(scores.values()) / len(scores), record["mean"][metric], places=12)
        return first, record["mean"], raises

    def test_an_unchanged_system_does_not_drift_upward(self):
        # 10 seeded chains of 15 runs of one unchanged system, 2 metrics: 300 chances to rise on noise.
        honest, naive, raises = [], [], 0
        for seed in range(1, 11):
            first, last, count = self.chain(honest=True, seed=seed)
            raises += count
            honest += [last[m] - first[m] for m in first]
            first, last, _ = self.chain(honest=False, seed=seed)
            naive += [last[m] - first[m] for m in first]
        # a false raise needs p < alpha and the interval above 0: at most alpha / 2 a step (7.5 of 300)
        self.assertLessEqual(raises, 2)
        self.assertLess(sum(honest) / len(honest), 0.01)
        # keeping the better mean (the old ratchet) climbs on noise alone: the winner's curse
        self.assertGreater(sum(naive) / len(naive), 0.03)
        self.assertGreater(sum(naive), 4 * sum(honest))

    def test_a_rise_is_taken_as_far_as_it_is_shown(self):
        # 30 queries from 0.5 to 1.0, no spread: the rise shown is 0.5 - q**2 / 30, not the 0.5 observed
        qids = [f"q{i:02d}" for i in range(30)]
        before = {"recall@5": {q: 0.5 for q in qids}}
        after = {"recall@5": {q: 1.0 for q in qids}}
        rise = 0.5 - rag_eval._quantile(0.95, 29) ** 2 / 30
        gains = rag_eval._significant_gains(gate_of(before, after, rule="drop"))
        self.assertEqual(list(gains), ["recall@5"])
        self.assertAlmostEqual(gains["recall@5"], rise, places=12)
        # the ratchet's scores: each moved that share of the way, so they average to the old mean + the rise
        raised = rag_eval._raised_scores(before["recall@5"], after["recall@5"], gains["recall@5"])
        self.assertAlmostEqual(math.fsum(raised.values()) / 30, 0.5 + rise, places=12)
        self.assertTrue(all(0.5 < value < 1.0 for value in raised.values()))
        after = {"recall@5": dict(before["recall@5"], q00=1.0)}  # one query: no evidence
        self.assertEqual(rag_eval._significant_gains(gate_of(before, after, rule="drop")), {})


class TestWorkBudget(TempDirMixin, unittest.TestCase):
    """Each resampling estimates its cost from its sizes and refuses, before any work, past WORK_BUDGET seconds
    (exit 2, the estimate and what would fit in the message): --calibrate 100000 on 1,000 queries ran for hours."""

    def baseline(self, queries=1000, metrics=("mrr@5", "ndcg@5", "recall@5", "success@5")):
        rng = random.Random(5)
        per_query = {m: {f"q{i}": rng.choice([0.0, 0.5, 1.0]) for i in range(queries)} for m in metrics}
        return rag_eval.Baseline({m: 0.5 for m in metrics}, per_query)

    def refused(self, patched: str, call, option: str, count: int, values: float) -> None:
        """``call`` raises before ``patched`` (where the work starts) runs; the estimate is NS_PER_VALUE ns a value."""
        with unittest.mock.patch.object(rag_eval, patched, side_effect=AssertionError("the work started")):
            with self.assertRaises(rag_eval.RagEvalError) as caught:
                call()
        seconds = values * rag_eval._NS_PER_VALUE / 1e9
        self.assertIn(f"about {seconds:,.0f} s ({values:.2g} values resampled)", str(caught.exception))
        self.assertIn(f"{option} {int(count * rag_eval._WORK_BUDGET / seconds)} fits", str(caught.exception))

    def test_calibrate(self):
        baseline = self.baseline()
        for rule, per_value in (("drop", 50), ("significant", 2 * rag_eval._CALIBRATION_RESAMPLES)):
            with self.subTest(rule=rule):  # 3 scenarios x 100000 simulations x 1000 queries x 4 metrics
                self.refused("_random", lambda: rag_eval.calibrate(baseline, rag_eval.GateSettings(rule=rule), 100000),
                             "--calibrate", 100000, 3 * 100000 * 1000 * 4 * per_value)
        self.assertEqual(rag_eval.calibrate(self.baseline(50), rag_eval.GateSettings(), 10)["simulations"], 10)

    def test_paired_gate_intervals_and_comparisons(self):
        baseline, resamples = self.baseline(), 10 ** 9
        result = {"k": [5], "mean": baseline.means, "per_query": {q: {m: baseline.per_query[m][q] for m in baseline.means}
                                                                 for q in baseline.per_query["mrr@5"]}}
        settings = rag_eval.GateSettings(rule="significant", resamples=resamples)
        targets = [rag_eval._Target(m, 0.5, 0.5, scores, scores) for m, scores in baseline.per_query.items()]
        self.refused("_family", lambda: rag_eval._paired_family(targets, settings), "--resamples", resamples,
                     resamples * 4 * 1000)
        self.refused("bootstrap_interval", lambda: rag_eval._mean_intervals(result, resamples), "--resamples",
                     resamples, resamples * 4 * 1000)
        self.refused("_paired_family", lambda: rag_eval.compare_runs([("a", result), ("b", result)],
                                                                       resamples=resamples),
                     "--resamples", resamples, 2 * resamples * 4 * 1000)

    def test_command_line_exit_2(self):
        qrels = self.write("qrels.json", {f"q{i}": {f"d{i}": 1} for i in range(300)})
        run = self.write("run.json", {f"q{i}": ["x", f"d{i}"][i % 2:] for i in range(300)})
        with unittest.mock.patch.object(rag_eval, "_family", side_effect=AssertionError("the work started")):
            line = self.assert_error([qrels, run, "--baseline-run", run, "--gate", "significant", "--resamples",
                                      "999999999"], ["--resamples 999999999"])
        self.assertIn("fits", line)


class TestCalibrate(unittest.TestCase):
    def baseline(self, n=300, seed=2):
        rng = random.Random(seed)
        result = noisy_run({f"q{i:03d}": rng.choice([0.2, 0.5, 0.8, 0.95]) for i in range(n)}, rng)
        record = record_of(result, "x")
        return rag_eval.Baseline(record["mean"], record["per_query"], record["conventions"], "x")

    def test_rates_errors_and_seed(self):
        # A tolerance of 0.15 plants drops that 100 queries resolve even when every query is paired with a
        # random one (no run now: the worst case): power at 2x 0.85 at these seeds (0.425 at 0.1).
        baseline = self.baseline(n=100)
        settings = rag_eval.GateSettings(rule="significant", seed=4, default=rag_eval.Tolerance(0.15))
        found = rag_eval.calibrate(baseline, settings, 40)
        # Seeded: the same numbers.  On 60 queries and 20 simulations (a seventh of the cost), two unseeded
        # calibrations differed in 30 of 30 tries.
        small = self.baseline(n=60)
        self.assertEqual(rag_eval.calibrate(small, settings, 20), rag_eval.calibrate(small, settings, 20))
        self.assertEqual(sorted(found["scenarios"]), ["a/a", "drop 1x tolerance", "drop 2x tolerance"])
        self.assertEqual((found["simulations"], found["queries"], found["resamples"]), (40, 100, 200))
        for name, scenario in found["scenarios"].items():
            with self.subTest(name):
                rates = [scenario[kind]["rate"] for kind in ("regression", "inconclusive", "pass")]
                self.assertAlmostEqual(sum(rates), 1.0, places=12)
                for kind in ("regression", "inconclusive", "pass"):
                    r = scenario[kind]["rate"]
                    self.assertAlmostEqual(scenario[kind]["se"], math.sqrt(r * (1 - r) / 40), places=12)
        aa, big = found["scenarios"]["a/a"]["regression"], found["scenarios"]["drop 2x tolerance"]["regression"]
        self.assertLessEqual(aa["rate"], 0.05 + 3 * math.sqrt(0.05 * 0.95 / 40))  # false fails near alpha or below
        self.assertGreater(big["rate"], aa["rate"] + 0.3)

    def test_a_rerun_pairs_each_query_with_itself(self):
        # Kills: A/A pairing each query with a random one when this run's scores are given.  An unchanged
        # rerun moves no query: every simulated delta is 0, so the gate passes every time (the no-change
        # bound q**2 / n = 0.027 is within 0.15), where random pairs (every query changes) pass 70%.
        baseline = self.baseline(n=100)
        settings = rag_eval.GateSettings(rule="significant", seed=4, default=rag_eval.Tolerance(0.15))
        rerun = rag_eval.calibrate(baseline, settings, 20, now=baseline.per_query)
        alone = rag_eval.calibrate(baseline, settings, 20)
        self.assertEqual((rerun["pairs"], alone["pairs"]), ("rerun", "random"))
        self.assertEqual(rerun["scenarios"]["a/a"]["pass"]["rate"], 1.0)
        self.assertLess(alone["scenarios"]["a/a"]["pass"]["rate"], 0.9)

    def test_command_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            qrels = {f"q{i}": {f"d{i}": 1, f"e{i}": 2} for i in range(60)}
            run = {f"q{i}": ([f"d{i}"] if i % 3 else ["x", f"e{i}"]) for i in range(60)}
            paths = {}
            for name, data in (("qrels", qrels), ("run", run)):
                paths[name] = os.path.join(tmp, name + ".json")
                with open(paths[name], "w") as f:
                    json.dump(data, f)
            code, out, err = run_main([paths["qrels"], paths["run"], "--baseline-run", paths["run"], "--calibrate", "20",
                                       "--format", "table"])
            self.assertEqual(code, 0, err)
            self.assertIn("calibration: 20 simulations per scenario on 60 queries", out)
            self.assertIn("a/a (false fails = regression): regression ", out)
            code, out, _ = run_main([paths["qrels"], paths["run"], "--baseline-run", paths["run"], "--calibrate", "20"])
            self.assertEqual(json.loads(out)["gate"]["calibration"]["simulations"], 20)
            code, _, err = run_main([paths["qrels"], paths["run"], "--calibrate"])
            self.assertEqual(code, 2)
            assert_error_line(self, err, names=[ERROR_PREFIX + "--calibrate "])


class TestPassIsPerMetricAndUnadjusted(unittest.TestCase):
    """The gate passes only when every metric passes, so a false pass needs the one metric that truly
    fell to pass its own test: an intersection-union test (Berger 1982), at level alpha with each
    metric's unadjusted low bound.  A regression needs any one metric to fail, a union, so its bound is
    adjusted for the family.  Kills: a low bound widened for the family, or a high bound that is not."""

    def test_pass_reads_the_metrics_own_bound_whatever_the_family(self):
        rng = random.Random(41)
        qids = [f"q{i:03d}" for i in range(120)]
        before = {m: {q: rng.choice((0.0, 0.5, 1.0)) for q in qids} for m in ("recall@5", "ndcg@5")}
        after = {m: {q: min(1.0, max(0.0, v + rng.choice((-0.05, 0.0, 0.0, 0.04)))) for q, v in values.items()}
                 for m, values in before.items()}
        tags = {q: ["a", "b", "c"][i % 3] for i, q in enumerate(qids)}
        alone = gate_of({"recall@5": before["recall@5"]}, {"recall@5": after["recall@5"]}, tolerance=0.05,
                        resamples=200)["metrics"]["recall@5"]
        slices = {f"{tag}:{m}": rag_eval.Tolerance(0.05) for tag in "abc" for m in before}
        family = gate_of(before, after, tolerance=0.05, resamples=200, slices=tags, tolerances=slices)
        self.assertEqual(len(family["metrics"]), 8)
        entry = family["metrics"]["recall@5"]
        self.assertEqual((alone["tests"], entry["tests"]), (1, 8))
        self.assertEqual(entry["interval"][0], alone["interval"][0])  # the metric's own bound, closed form
        self.assertGreater(entry["interval"][1], alone["interval"][1])  # the regression's, adjusted over 8
        self.assertEqual((alone["verdict"], entry["verdict"]), ("pass", "pass"))
        for key, other in family["metrics"].items():
            with self.subTest(key):
                self.assertEqual(other["verdict"] == "pass", other["interval"][0] >= -other["allowed_drop"])


class TestFusedPIsNeverZero(unittest.TestCase):
    """Kills: the p of a test that shares its draws with others (the gate's family, a metric of
    compare_runs) computed as extreme / resamples, 0 when no draw is as extreme.

    Every delta below is negative, of two sizes (one size would be the exact sign test), on 40
    queries (more than EXACT_SIGN_FLIP_MAX: sampled).  Only 2 of the 2**40 sign patterns are as
    extreme as the observed one (none flipped, all flipped), so no draw of R hits one and
    p = (1 + 0) / (1 + R), whatever the draws."""

    R = 300
    QIDS = [f"q{i:02d}" for i in range(40)]

    def test_the_gates_family(self):
        before = {m: dict.fromkeys(self.QIDS, 1.0) for m in ("mrr@5", "ndcg@5")}
        after = {m: {q: (0.5 if i % 2 else 0.25) for i, q in enumerate(self.QIDS)} for m in before}
        for adjust, adjusted in (("maxt", 1 / (1 + self.R)), ("holm", 2 / (1 + self.R))):  # Holm: 2 tests x 1/(1+R)
            gated = gate_of(before, after, adjust=adjust, resamples=self.R)["metrics"]
            for metric in before:
                with self.subTest(adjust=adjust, metric=metric):
                    entry = gated[metric]
                    self.assertEqual((entry["p_value"], entry["exact"]), (1 / (1 + self.R), False))
                    self.assertEqual(entry["p_adjusted"], adjusted)
                    self.assertEqual(entry["verdict"], "regression")

    def test_compare_runs(self):
        # each query's one relevant document: the reference ranks it 1st, candidate a 2nd or 3rd, b 3rd or 2nd
        qrels = {q: {"rel": 1} for q in self.QIDS}
        ranked = {"ref": lambda i: 0, "a": lambda i: 1 + i % 2, "b": lambda i: 2 - i % 2}
        results = [(name, rag_eval.evaluate(qrels, {q: ["x", "y"][:place(i)] + ["rel"] for i, q in enumerate(self.QIDS)},
                                            5, measures=["mrr", "ndcg"]))
                   for name, place in ranked.items()]
        report = rag_eval.compare_runs(results, resamples=self.R)
        for metric in ("mrr@5", "ndcg@5"):  # mrr deltas -1/2, -2/3; ndcg 1/log2(3) - 1, 1/2 - 1
            for name in ("a", "b"):
                with self.subTest(metric=metric, run=name):
                    entry = report["metrics"][metric]["runs"][name]
                    self.assertEqual((entry["p_value"], entry["exact"]), (1 / (1 + self.R), False))
                    # MaxT over the pair's 2 metrics (both reach theirs on the same 2 patterns only), times 2 runs
                    self.assertEqual(entry["p_adjusted"], 2 / (1 + self.R))


class TestCalibrateSimulatesTheRuleItIsGiven(unittest.TestCase):
    """calibrate runs the gate's own rule on every simulated pair.  Rule drop has two outcomes only
    (never inconclusive); rule significant on 60 noisy queries with a 0.06 tolerance finds too
    little evidence either way in most simulations, a planted drop or none.  Kills: the paired
    statistics skipped (or computed for rule drop only), which makes rule significant rule drop."""

    def test_inconclusive_only_under_rule_significant(self):
        baseline = TestCalibrate().baseline(n=60)
        rates = {}
        for rule in ("drop", "significant"):
            settings = rag_eval.GateSettings(rule=rule, seed=4, default=rag_eval.Tolerance(0.06))
            scenarios = rag_eval.calibrate(baseline, settings, 20)["scenarios"]
            rates[rule] = {name: scenario["inconclusive"]["rate"] for name, scenario in scenarios.items()}
        self.assertEqual(rates["drop"], dict.fromkeys(rates["drop"], 0.0))
        self.assertGreaterEqual(rates["significant"]["a/a"], 0.5, rates)  # 0.9 at these seeds

    def test_metrics_of_the_whole_run_only_and_two_queries_suffice(self):
        baseline = TestCalibrate().baseline(n=60)
        per_query = dict(baseline.per_query, **{"a:recall@5": dict.fromkeys(list(baseline.per_query["recall@5"])[:30], 0.0)})
        settings = rag_eval.GateSettings(rule="drop", seed=4, default=rag_eval.Tolerance(0.06))
        found = rag_eval.calibrate(baseline._replace(per_query=per_query), settings, 20)
        self.assertEqual(found["metrics"], ["recall@5", "success@5"])  # not the slice a:recall@5
        # A drop of one tolerance is planted in expectation: some simulations fall beyond it and some do not
        # (0.5 at these seeds); a drop that took every query, or the complement of the planted share, fails all.
        self.assertGreater(found["scenarios"]["drop 1x tolerance"]["regression"]["rate"], 0.0)
        self.assertLess(found["scenarios"]["drop 1x tolerance"]["regression"]["rate"], 1.0)
        two = rag_eval.Baseline({"recall@5": 0.5}, {"recall@5": {"q1": 0.0, "q2": 1.0}})
        self.assertEqual(rag_eval.calibrate(two, settings, 2)["queries"], 2)


class TestFamilyResamplingEdges(unittest.TestCase):
    """MaxT's ties are relative to the deltas' size, and a slice's interval counts its own queries only."""

    def test_maxt_does_not_depend_on_the_deltas_scale(self):
        # Scaling every delta by a power of 2 changes no statistic |sum| / sqrt(sum of squares) and no
        # tie, so no adjusted p: exactly (12 differing queries: every pattern) and sampled (20: 300 draws).
        rng = random.Random(21)
        family = {queries: {f"m{j}": {f"q{i:02d}": rng.choice([-3, -2, -1, 1, 2]) / 4 for i in range(queries)}
                            for j in range(3)} for queries in (12, 20)}
        p_values = dict.fromkeys(family[12], 0.0)  # the family's own shares alone
        self.assertEqual(rag_eval.maxt(family[12], 1000, 1, p_values),
                         {key: float(p) for key, p in brute_force_maxt(family[12]).items()})
        for queries, resamples in ((12, 1000), (20, 300)):
            tests = family[queries]
            found = rag_eval.maxt(tests, resamples, 1, p_values)
            self.assertLess(min(found.values()), 1.0)  # a scale that made every pattern tie would give 1
            for scale in (2.0 ** -30, 2.0 ** 20):
                with self.subTest(queries=queries, scale=scale):
                    scaled = {key: {qid: delta * scale for qid, delta in values.items()} for key, values in tests.items()}
                    self.assertEqual(rag_eval.maxt(scaled, resamples, 1, p_values), found)

    def test_a_slices_bounds_read_only_its_queries(self):
        # 60 queries, 20 in the slice: each test's bounds come from its own queries' deltas, adjusted over 2 tests
        rng = random.Random(5)
        qids = [f"q{i:02d}" for i in range(60)]
        tags = {qid: ["billing"] if i < 20 else ["other"] for i, qid in enumerate(qids)}
        before = {"recall@5": {qid: rng.choice([3, 4, 5]) / 8 for qid in qids}}  # after: within [0, 1]
        after = {"recall@5": {qid: value - rng.choice([1, 2, 3]) / 8 * (1 if qid < "q20" else rng.choice([-1, 0, 1]))
                              for qid, value in before["recall@5"].items()}}
        gate = gate_of(before, after, resamples=500, slices=tags,
                       tolerances={"billing:recall@5": rag_eval.Tolerance(0.0)})
        for key, members in (("recall@5", qids), ("billing:recall@5", qids[:20])):
            with self.subTest(key=key):
                entry = gate["metrics"][key]
                deltas = [after["recall@5"][qid] - before["recall@5"][qid] for qid in members]
                n, mean, spread = len(deltas), math.fsum(deltas) / len(deltas), rag_eval._standard_deviation(deltas)
                self.assertEqual((entry["queries"], entry["mean_delta"], entry["tests"]), (n, mean, 2))
                low = mean - rag_eval._bound_width(spread, n, rag_eval._quantile(0.95, n - 1)) - 1 / (2 * n)
                high = mean + rag_eval._bound_width(spread, n, rag_eval._quantile(1 - 0.05 / 2, n - 1))
                self.assertEqual(entry["interval"], [low, high])


if __name__ == "__main__":
    unittest.main()
