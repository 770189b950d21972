"""Tests of the CI gate of rag_eval.py: statistics, baselines, tolerances,
paired comparisons, safe baseline updates and ``--ci``.

One TestCase per part of the gate.  Expected values are written as arithmetic,
with the grades or the deltas in a comment (STYLE.md, point 11).  Conventions:
gain ``2**grade - 1`` (grade 2 -> 3, grade 1 -> 1), discount ``log2(1 + rank)``.

Statistical checks compare with an independent computation: a brute-force
enumeration of sign patterns, a textbook percentile bootstrap, normal theory,
exact binomial tails from ``math.comb``.  Where two random procedures are
compared, the tolerance is several Monte Carlo standard errors, and the seeds
are fixed so that the test is deterministic.

Tests whose comment starts ``Regression:`` pin a bug found while writing this
file, now fixed; each comment says what went wrong.

Run with ``python3 -m unittest test_gate`` from the repository root; standard
library only.
"""

import errno
import gzip
import hashlib
import io
import itertools
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import unittest
from fractions import Fraction
from statistics import NormalDist
from unittest import mock

import rag_eval
import helpers_for_tests as helpers
from helpers_for_tests import ERROR_PREFIX, child_env, run_main

REPO = os.path.dirname(os.path.abspath(__file__))
QRELS = os.path.join(REPO, "fixtures", "qrels.json")
RUN = os.path.join(REPO, "fixtures", "run.json")
BASELINE = os.path.join(REPO, "baseline.json")
R = 500  # resamples for command-line runs: small, so the suite stays fast

# The fixtures, worked by hand at k = 5.
# q1 grades: refund-policy#2 = 2 (rank 2), refund-policy#3 = 1 (rank 4)
# q2 grades: sla-uptime#1 = 2, never retrieved
# q3 grades: sso-setup#5 = 2 (rank 1), okta-guide#1 = 1 (rank 2), sso-setup#4 = 2 (rank 5)
# q4 grades: pricing#3 = 0 only -> unscored
Q1_NDCG5 = (3 / math.log2(3) + 1 / math.log2(5)) / (3 + 1 / math.log2(3))
Q3_NDCG5 = (3 + 1 / math.log2(3) + 3 / math.log2(6)) / (3 + 3 / math.log2(3) + 1 / math.log2(4))
FIXTURE_PER_QUERY = {
    "recall@5": {"q1": 2 / 2, "q2": 0 / 1, "q3": 3 / 3},
    "success@5": {"q1": 1.0, "q2": 0.0, "q3": 1.0},
    "mrr@5": {"q1": 1 / 2, "q2": 0.0, "q3": 1 / 1},
    "ndcg@5": {"q1": Q1_NDCG5, "q2": 0.0, "q3": Q3_NDCG5},
}
FIXTURE_MEANS = {metric: sum(values.values()) / 3 for metric, values in FIXTURE_PER_QUERY.items()}
# The shipped baseline: {"recall@5": 0.70, "success@5": 0.6667, "mrr@5": 0.55, "ndcg@5": 0.52}
# Falls: recall 0.70 - 2/3 = 0.0333, mrr 0.55 - 1/2 = 0.05, ndcg 0.52 - 0.5095 = 0.0105,
# success 0.6667 - 2/3 = 0.00003.
MANY = 250  # queries: above it, rag_eval once switched to a second bootstrap; sizes around it stay tested


# === Helpers ===


def regression_lines(err):
    return [line for line in err.splitlines() if line.startswith("REGRESSION")]


def brute_force_p(numerators):
    """Two-sided sign-flip p of integer deltas: the share of all 2**n sign patterns
    whose |sum| is at least the observed |sum| (zeros included: they change nothing)."""
    observed = abs(sum(numerators))
    sums = [0]  # the signed sum of every sign pattern of the numerators so far, one entry per pattern
    for m in numerators:
        sums = [s + m for s in sums] + [s - m for s in sums]
    return Fraction(sum(1 for s in sums if abs(s) >= observed), 2 ** len(numerators))


def textbook_bootstrap(values, resamples, rng, confidence=0.95):
    """Percentile bootstrap of the mean, straight from Efron & Tibshirani, ch. 13."""
    n = len(values)
    means = sorted(math.fsum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1 - confidence) / 2
    return means[math.ceil(tail * resamples) - 1], means[math.ceil((1 - tail) * resamples) - 1]


def binomial_at_least(x, n, p):
    return math.fsum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(x, n + 1))


def binomial_at_most(x, n, p):
    return math.fsum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(0, x + 1))


def is_hit(ranking, k=5):
    return any(doc.endswith(("-a", "-b")) for doc in ranking[:k])


def reciprocal_rank(ranking, k=5):
    for rank, doc in enumerate(ranking[:k], 1):
        if doc.endswith(("-a", "-b")):
            return 1 / rank
    return 0.0


def synthetic(n, seed=20240501):
    """A seeded collection of ``n`` queries: qrels and a base run.

    Every query q has q-a (grade 2), q-b (grade 1) and six judged non-relevant
    fillers q-n0..q-n5 (grade 0), so judged@5 is 1 and no warning is printed.
    The run ranks the fillers and inserts each relevant document, with chance
    3/4, at a random rank from 1 to 6.
    """
    rng = random.Random(seed)
    qrels, run = {}, {}
    for i in range(n):
        q = f"q{i:03d}"
        fillers = [f"{q}-n{j}" for j in range(6)]
        qrels[q] = {f"{q}-a": 2, f"{q}-b": 1, **{doc: 0 for doc in fillers}}
        ranking = list(fillers)
        for doc in (f"{q}-a", f"{q}-b"):
            if rng.random() < 0.75:
                ranking.insert(rng.randrange(0, 6), doc)
        run[q] = ranking
    return qrels, run


def missed(ranking):
    """The same documents with the relevant ones moved to ranks 7 and 8: a miss at k = 5."""
    return [doc for doc in ranking if not is_hit([doc])] + [doc for doc in ranking if is_hit([doc])]


def found_at_5(q, ranking):
    """q-b (grade 1) at rank 5, the rest as before: a hit with RR 1/5."""
    rest = [doc for doc in ranking if doc != f"{q}-b"]
    return rest[:4] + [f"{q}-b"] + rest[4:]


class TempDirMixin(helpers.TempDirMixin):
    def gate_report(self, argv, expected_code):
        code, out, err = run_main(argv)
        self.assertEqual(code, expected_code, err)
        for line in err.splitlines():
            self.assertTrue(line.startswith(("REGRESSION ", "rag_eval: note:", "rag_eval: warning:")), line)
        return json.loads(out), err


# === Statistics ===


class TestSignFlipTest(unittest.TestCase):
    def test_matches_enumeration_of_every_sign_pattern(self):
        # Deltas are multiples of 1/8 (values such as 1/2, 1/4, 1/8 that per-query
        # measures take), drawn from few values so that ties and zeros are common.
        rng = random.Random(11)
        checked = 0
        for n in range(1, 13):
            for trial in range(12):
                pool = [-8, -4, -2, -1, 0, 1, 2, 4, 8] if trial % 2 else [-2, -1, 0, 0, 1, 2, 3]
                numerators = [rng.choice(pool) for _ in range(n)]
                with self.subTest(deltas=[f"{m}/8" for m in numerators]):
                    p, exact = rag_eval.sign_flip_test([m / 8 for m in numerators], 100, random.Random(0))
                    self.assertTrue(exact)
                    self.assertEqual(Fraction(p), brute_force_p(numerators))
                    self.assertGreater(p, 0)
                    checked += 1
        self.assertEqual(checked, 12 * 12)

    def test_hand_worked(self):
        for deltas, expected in [
            ([0.5, 0.5, 0.5], 2 / 2 ** 3),  # only +++ and --- reach |1.5|
            ([0.5, 0.5, 0.5, 0.0, 0.0], 2 / 2 ** 3),  # zeros carry no sign: still 2 of 8
            ([1.0, -1.0], 4 / 2 ** 2),  # observed 0: every pattern is as extreme
            ([1.0, 0.5, 0.25], 2 / 2 ** 3),  # 1.75: only +++ and ---
            ([1.0, 0.5, 0.5], 2 / 2 ** 3),  # sums 2, 1, 1, 0, 0, -1, -1, -2: only |2| reaches 2
            # 1, 1, -1/2, -1/2 (observed 1): when the two 1s take opposite signs the
            # sum is -(c + d) / 2, which reaches |1| only when the halves agree, so
            # 2 (which 1 is flipped) * 2 (halves that disagree) = 4 patterns miss
            ([1.0, 1.0, -0.5, -0.5], (16 - 2 * 2) / 2 ** 4),
        ]:
            with self.subTest(deltas=deltas):
                self.assertEqual(rag_eval.sign_flip_test(deltas), (expected, True))

    def test_all_zero_deltas(self):
        for deltas in ([], [0.0], [0.0] * 7, [0.0] * (rag_eval.EXACT_SIGN_FLIP_MAX + 10)):
            with self.subTest(n=len(deltas)):
                self.assertEqual(rag_eval.sign_flip_test(deltas, 100, random.Random(0)), (1.0, True))

    def test_exact_up_to_the_limit_of_differing_queries(self):
        limit = rag_eval.EXACT_SIGN_FLIP_MAX
        # zeros do not count as differing: limit nonzero deltas and 10 zeros are still exact
        _, exact = rag_eval.sign_flip_test([0.25] * limit + [0.0] * 10, 100, random.Random(0))
        self.assertTrue(exact)
        _, exact = rag_eval.sign_flip_test([0.25] * limit + [0.5], 100, random.Random(0))
        self.assertFalse(exact)
        # deltas of one size (a 0/1 measure) are the sign test, exact at any count
        self.assertEqual(rag_eval.sign_flip_test([0.25] * (limit + 1), 100, random.Random(0)),
                         (2 / 2 ** (limit + 1), True))

    def test_sampled_p_is_one_plus_count_over_one_plus_resamples(self):
        rng = random.Random(3)
        deltas = [rng.choice([-0.5, -0.25, 0.25, 0.5, 1.0]) for _ in range(rag_eval.EXACT_SIGN_FLIP_MAX + 9)]
        for resamples in (100, 999, 2000):
            with self.subTest(resamples=resamples):
                p, exact = rag_eval.sign_flip_test(deltas, resamples, random.Random(5))
                self.assertFalse(exact)
                count = p * (1 + resamples) - 1
                self.assertAlmostEqual(count, round(count), places=6)
                self.assertTrue(0 <= round(count) <= resamples)

    def test_sampled_p_is_never_zero(self):
        # 40 positive deltas of two sizes (one size would be the exact sign test): 2 of
        # 2**40 patterns are as extreme, so no sample hits one and p is the smallest
        # value it can take, 1 / (1 + R).
        p, exact = rag_eval.sign_flip_test([0.5] * 20 + [0.25] * 20, 200, random.Random(0))
        self.assertEqual((p, exact), (1 / (1 + 200), False))

    def test_sampled_agrees_with_exact_on_the_same_data(self):
        rng = random.Random(17)
        resamples = 4000
        for case in range(4):
            numerators = [rng.choice([-4, -2, -1, 1, 2, 4, 8]) for _ in range(14)]
            deltas = [m / 8 for m in numerators]
            p_exact, exact = rag_eval.sign_flip_test(deltas, resamples, random.Random(case))
            self.assertTrue(exact)
            self.assertEqual(Fraction(p_exact), brute_force_p(numerators))
            with mock.patch.object(rag_eval, "EXACT_SIGN_FLIP_MAX", 4):
                p_sampled, exact = rag_eval.sign_flip_test(deltas, resamples, random.Random(case))
            self.assertFalse(exact)
            # Monte Carlo standard error of a share p from R draws: sqrt(p (1 - p) / R)
            error = math.sqrt(p_exact * (1 - p_exact) / resamples)
            with self.subTest(deltas=numerators, exact=p_exact, sampled=p_sampled):
                self.assertLess(abs(p_sampled - p_exact), 4 * error + 2 / resamples)

    def test_deterministic_given_the_seed(self):
        rng = random.Random(2)  # one generator: 60 different deltas (a fresh one each time gave 60 equal ones)
        deltas = [rng.uniform(-1, 1) for _ in range(60)]
        first = rag_eval.sign_flip_test(deltas, 300, random.Random(42))
        self.assertEqual(rag_eval.sign_flip_test(deltas, 300, random.Random(42)), first)
        self.assertFalse(first[1])

    def test_matches_enumeration_with_thirds(self):
        # Regression: per-query values such as 1/3 and 2/3 (recall with 3 relevant
        # documents, RR at rank 3) were rounded to a fixed-point grid (since
        # removed), and the rounding errors of the observed sum and of a flipped sum differ,
        # so exact ties are lost.  Deltas 2/3, 2/3, -1/3, -1/3, -1/3 (sum 1/3):
        # every pattern's sum is an odd number of thirds, so |sum| >= 1/3 always
        # and p = 1; rag_eval says 0.625.
        self.assertEqual(rag_eval.sign_flip_test([2 / 3, 2 / 3, -1 / 3, -1 / 3, -1 / 3]), (1.0, True))
        rng = random.Random(5)
        wrong = []
        for n in range(1, 10):
            for _ in range(20):
                numerators = [rng.randint(-3, 3) for _ in range(n)]
                p, _ = rag_eval.sign_flip_test([m / 3 for m in numerators])
                if Fraction(p) != brute_force_p(numerators):
                    wrong.append((numerators, p, float(brute_force_p(numerators))))
        self.assertEqual(wrong, [], "(deltas in thirds, rag_eval's p, enumerated p)")

    def test_lost_ties_can_cross_alpha(self):
        # Regression (same cause): deltas -1/3, -1/3, 2/3, 2/3, 2/3, 1, 1, 1 (in thirds:
        # -1 -1 2 2 2 3 3 3, sum 13); 14 of the 2**8 = 256 sign patterns reach
        # |sum| >= 13, so p = 14/256 = 0.0547 > 0.05; rag_eval says 0.03125,
        # below alpha: a lost tie turns "not significant" into "significant".
        numerators = [-1, -1, 2, 2, 2, 3, 3, 3]
        self.assertEqual(brute_force_p(numerators), Fraction(14, 256))
        p, exact = rag_eval.sign_flip_test([m / 3 for m in numerators])
        self.assertEqual((p, exact), (14 / 256, True))


class TestBootstrapInterval(unittest.TestCase):
    def test_constant_data(self):
        above = MANY + 50
        for c in (0.25, 1.0, -0.5, 0.125):
            for n in (1, 5, above):
                with self.subTest(c=c, n=n):
                    self.assertEqual(tuple(rag_eval.bootstrap_interval([c] * n, 200, random.Random(0))), (c, c))

    def test_all_zero_data_above_the_ordinary_bootstrap_limit(self):
        # Regression: with more than 250 values (then another bootstrap) that are all 0 there
        # is no nonzero value, the random halves (then _random_halves) got an empty list and
        # ``chosen[-1] &= last_bits`` raises IndexError on the empty bytearray.
        # Through the command line: gating a run of > 250
        # queries against its own extended baseline crashes (see
        # TestPairedGate.test_identical_large_run_against_its_own_baseline).
        n = MANY + 1
        self.assertEqual(tuple(rag_eval.bootstrap_interval([0.0] * n, 100, random.Random(0))), (0.0, 0.0))

    def test_constant_data_that_is_not_a_multiple_of_a_power_of_two(self):
        # Doubtful: the interval was computed on a fixed-point grid of 2**-30 (since
        # removed) and never mapped back, so constant data 1/3 gave
        # [0.33333333302, 0.33333333302], which does not contain the mean 1/3.
        for n in (5, MANY + 50):
            with self.subTest(n=n):
                low, high = rag_eval.bootstrap_interval([1 / 3] * n, 100, random.Random(0))
                self.assertLessEqual(low, statistics.fmean([1 / 3] * n))
                self.assertGreaterEqual(high, statistics.fmean([1 / 3] * n))

    def test_contains_the_mean(self):
        rng = random.Random(8)
        for n in (2, 3, 10, 50, MANY + 10):
            values = [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(n)]
            if len(set(values)) == 1:
                values[0] = 1.0 - values[0]
            with self.subTest(n=n):
                low, high = rag_eval.bootstrap_interval(values, 500, random.Random(n))
                self.assertLessEqual(low, statistics.fmean(values))
                self.assertGreaterEqual(high, statistics.fmean(values))
                self.assertLess(low, high)

    def test_matches_a_textbook_percentile_bootstrap(self):
        # Different seeds on each side: they agree within Monte Carlo error.  The
        # 2.5% quantile of R bootstrap means has standard error about
        # sqrt(0.025 * 0.975 / R) / density(1.96), some 1% of the interval width
        # at R = 4000, and rag_eval's interval is symmetric where the textbook's
        # follows the skew of the data.  Allowed: 10% of the width (30 seeds gave
        # at most 5.5%).  With fewer values the two methods differ more (n = 8:
        # up to 18% of the width): see test_few_values_match_every_sign_pattern.
        rng = random.Random(4)
        resamples = 4000
        for n in (40, MANY):
            values = [rng.choice([0.0, 1 / 3, 0.5, 1.0, 0.25]) for _ in range(n)]
            ours = rag_eval.bootstrap_interval(values, resamples, random.Random(1))
            theirs = textbook_bootstrap(values, resamples, random.Random(2))
            width = theirs[1] - theirs[0]
            with self.subTest(n=n, ours=ours, textbook=theirs):
                self.assertLess(abs(ours[0] - theirs[0]), 0.1 * width)
                self.assertLess(abs(ours[1] - theirs[1]), 0.1 * width)

    def test_few_values_match_every_sign_pattern(self):
        # n = 8: the resampled mean is mean + sum(s_i (x_i - mean)) / n for random
        # signs s (Rademacher weights), so its distribution is that of the 2**8
        # equally likely patterns, enumerated here exactly.  rag_eval's sampled
        # 2.5% point must be a pattern's mean with at most 2.5% + 1% of the
        # patterns below it and at least 2.5% - 1% at or below it (1% is 4
        # standard errors of a share 0.025 estimated from 4000 resamples), and
        # likewise its 97.5% point.
        rng = random.Random(4)
        for trial in range(10):
            values = [rng.choice([0.0, 1 / 3, 0.5, 1.0, 0.25]) for _ in range(8)]
            mean = Fraction(math.fsum(values)) / 8
            deviations = [Fraction(x) - mean for x in values]  # exact, so computed once
            means = [float(mean + sum(s * d for s, d in zip(signs, deviations)) / 8)
                     for signs in itertools.product((1, -1), repeat=8)]
            ours = rag_eval.bootstrap_interval(values, 4000, random.Random(trial))
            for point, share in zip(ours, (0.025, 0.975)):
                below = sum(1 for m in means if m < point - 1e-12) / 256
                at_or_below = sum(1 for m in means if m <= point + 1e-12) / 256
                with self.subTest(values=values, point=point, share=share):
                    self.assertTrue(any(abs(m - point) <= 1e-12 for m in means))
                    self.assertLessEqual(below, share + 0.01)
                    self.assertGreaterEqual(at_or_below, share - 0.01)

    def test_large_n_agrees_with_normal_theory(self):
        # n = 3000, with many zeros: the zeros' coin flips still weigh in.
        # Normal theory: mean +- 1.96 sd / sqrt(n); agreement within 10% of the width.
        class NoChoices(random.Random):  # proves that the ordinary bootstrap is not used
            def choices(self, *args, **kwargs):
                raise AssertionError("the ordinary bootstrap is used")

        rng = random.Random(9)
        n = 3000
        self.assertGreater(n, MANY)
        cases = {
            "normal(0.5, 0.2)": [rng.gauss(0.5, 0.2) for _ in range(n)],
            "0/1 with p = 0.3 (zeros)": [1.0 if rng.random() < 0.3 else 0.0 for _ in range(n)],
            "graded, mostly zero": [rng.choice([0.0, 0.0, 0.0, 1 / 3, 1.0]) for _ in range(n)],
        }
        for label, values in cases.items():
            mean, sd = statistics.fmean(values), statistics.stdev(values)
            half = NormalDist().inv_cdf(0.975) * sd / math.sqrt(n)
            low, high = rag_eval.bootstrap_interval(values, 2000, NoChoices(1))
            with self.subTest(label, interval=(low, high), normal=(mean - half, mean + half)):
                self.assertLess(abs(low - (mean - half)), 0.1 * 2 * half)
                self.assertLess(abs(high - (mean + half)), 0.1 * 2 * half)

    def test_deterministic_given_the_seed(self):
        rng = random.Random(6)
        for n in (30, MANY + 30):
            values = [rng.random() for _ in range(n)]
            with self.subTest(n=n):
                first = rag_eval.bootstrap_interval(values, 300, random.Random(7))
                self.assertEqual(rag_eval.bootstrap_interval(values, 300, random.Random(7)), first)
                self.assertIsInstance(first, tuple)
                self.assertEqual(first._fields, ("low", "high"))

    def test_no_values_is_an_error(self):
        with self.assertRaises(ValueError):
            rag_eval.bootstrap_interval([], 100, random.Random(0))


class TestClopperPearson(unittest.TestCase):
    def test_known_values(self):
        for (x, n), (low, high), places in [
            ((5, 10), (0.1871, 0.8129), 4),
            ((0, 10), (0.0, 0.3085), 4),  # high = 1 - 0.025 ** (1/10)
            ((10, 10), (0.6915, 1.0), 4),  # low = 0.025 ** (1/10)
            ((1, 100), (0.000253, 0.0545), (6, 4)),
        ]:
            with self.subTest(x=x, n=n):
                got = rag_eval.clopper_pearson(x, n)
                low_places, high_places = places if isinstance(places, tuple) else (places, places)
                self.assertEqual(round(got.low, low_places), low)
                self.assertEqual(round(got.high, high_places), high)
        self.assertAlmostEqual(rag_eval.clopper_pearson(0, 10).high, 1 - 0.025 ** (1 / 10), places=12)
        self.assertAlmostEqual(rag_eval.clopper_pearson(10, 10).low, 0.025 ** (1 / 10), places=12)

    def test_defining_property(self):
        # low: P(X >= x | n, low) = 0.025; high: P(X <= x | n, high) = 0.025
        for n in list(range(1, 21)) + [37, 100, 250]:
            for x in sorted({0, 1, n // 3, n // 2, n - 1, n} & set(range(n + 1))):
                low, high = rag_eval.clopper_pearson(x, n)
                with self.subTest(x=x, n=n):
                    if x == 0:
                        self.assertEqual(low, 0.0)
                    else:
                        self.assertAlmostEqual(binomial_at_least(x, n, low), 0.025, delta=1e-9)
                    if x == n:
                        self.assertEqual(high, 1.0)
                    else:
                        self.assertAlmostEqual(binomial_at_most(x, n, high), 0.025, delta=1e-9)
                    self.assertLessEqual(low, x / n)
                    self.assertGreaterEqual(high, x / n)

    def test_confidence(self):
        low, high = rag_eval.clopper_pearson(3, 20, confidence=0.90)  # tails of 0.05
        self.assertAlmostEqual(binomial_at_least(3, 20, low), 0.05, delta=1e-9)
        self.assertAlmostEqual(binomial_at_most(3, 20, high), 0.05, delta=1e-9)

    def test_invalid(self):
        for x, n in [(1, 0), (0, 0), (-1, 5), (6, 5)]:
            with self.subTest(x=x, n=n):
                with self.assertRaises(ValueError):
                    rag_eval.clopper_pearson(x, n)


class TestHolm(unittest.TestCase):
    def test_hand_worked(self):
        for p_values, expected in [
            # sorted a 0.01, b 0.02, c 0.03, d 0.5:
            # a 4 * 0.01; b max(0.04, 3 * 0.02); c max(0.06, 2 * 0.03); d max(0.06, 1 * 0.5)
            ({"d": 0.5, "a": 0.01, "c": 0.03, "b": 0.02},
             {"a": 4 * 0.01, "b": 3 * 0.02, "c": 3 * 0.02, "d": 1 * 0.5}),
            # x 2 * 0.4 = 0.8; y max(0.8, 1 * 0.6) = 0.8
            ({"x": 0.4, "y": 0.6}, {"x": 2 * 0.4, "y": 2 * 0.4}),
            # capped at 1: u min(1, 3 * 0.5); v, w stay at 1
            ({"u": 0.5, "v": 0.7, "w": 0.9}, {"u": 1.0, "v": 1.0, "w": 1.0}),
            ({"only": 0.03}, {"only": 0.03}),
            ({}, {}),
        ]:
            with self.subTest(p_values=p_values):
                adjusted = rag_eval.holm(p_values)
                self.assertEqual(set(adjusted), set(expected))
                for name, value in expected.items():
                    self.assertAlmostEqual(adjusted[name], value, places=15)

    def test_monotone_and_at_most_one(self):
        rng = random.Random(12)
        for trial in range(50):
            p_values = {f"m{i}": rng.choice([rng.random(), rng.random() ** 4, 1.0]) for i in range(rng.randint(1, 8))}
            adjusted = rag_eval.holm(p_values)
            with self.subTest(p_values=p_values):
                for name, p in p_values.items():
                    self.assertGreaterEqual(adjusted[name], p)
                    self.assertLessEqual(adjusted[name], 1.0)
                    self.assertLessEqual(adjusted[name], min(1.0, len(p_values) * p) + 1e-15)  # Bonferroni bounds it
                for a, b in itertools.permutations(p_values, 2):
                    if p_values[a] <= p_values[b]:
                        self.assertLessEqual(adjusted[a], adjusted[b])


class TestPower(unittest.TestCase):
    Z = NormalDist().inv_cdf(1 - 0.05 / 2) + NormalDist().inv_cdf(0.80)  # 1.95996 + 0.84162

    def test_detectable_drop_formula(self):
        for spread, n in [(0.2, 100), (0.35, 50), (0.05, 2), (1.0, 1000)]:
            with self.subTest(spread=spread, n=n):
                self.assertAlmostEqual(rag_eval.detectable_drop(spread, n), self.Z * spread / math.sqrt(n), places=12)
        z = NormalDist().inv_cdf(1 - 0.01 / 2) + NormalDist().inv_cdf(0.9)
        self.assertAlmostEqual(rag_eval.detectable_drop(0.2, 100, alpha=0.01, power=0.9), z * 0.2 / 10, places=12)

    def test_queries_needed_formula(self):
        for spread, drop in [(0.2, 0.05), (0.35, 0.02), (0.1, 0.1)]:
            with self.subTest(spread=spread, drop=drop):
                self.assertEqual(rag_eval.queries_needed(spread, drop), math.ceil((self.Z * spread / drop) ** 2))

    def test_nothing_to_estimate(self):
        self.assertIsNone(rag_eval.detectable_drop(None, 100))
        self.assertIsNone(rag_eval.detectable_drop(0.0, 100))
        self.assertIsNone(rag_eval.detectable_drop(0.2, 1))
        self.assertIsNone(rag_eval.queries_needed(None, 0.02))
        self.assertIsNone(rag_eval.queries_needed(0.0, 0.02))
        self.assertIsNone(rag_eval.queries_needed(0.2, 0.0))

    def test_they_invert_each_other(self):
        # queries_needed(s, d) is the smallest n whose detectable drop is at most d
        for spread in (0.05, 0.2, 0.37):
            for drop in (0.003, 0.01, 0.02, 0.05):
                with self.subTest(spread=spread, drop=drop):
                    n = rag_eval.queries_needed(spread, drop)
                    self.assertLessEqual(rag_eval.detectable_drop(spread, n), drop * (1 + 1e-12))
                    if n > 2:
                        self.assertGreater(rag_eval.detectable_drop(spread, n - 1), drop)

    def test_queries_needed_of_the_detectable_drop_is_n(self):
        # Doubtful: ceil() of a float that should be the integer n, so float noise
        # makes it n + 1 (about a quarter of the cases), e.g.
        # queries_needed(0.05, detectable_drop(0.05, 2)) == 3.
        wrong = [(spread, n, rag_eval.queries_needed(spread, rag_eval.detectable_drop(spread, n)))
                 for spread in (0.05, 0.2, 0.37) for n in range(2, 200)
                 if rag_eval.queries_needed(spread, rag_eval.detectable_drop(spread, n)) != n]
        self.assertEqual(wrong, [], "(spread, n, queries_needed)")


class TestComparePaired(unittest.TestCase):
    def test_hand_worked(self):
        before = {"a": 1.0, "b": 0.5, "c": 0.0, "d": 1.0, "e": 0.25, "f": 0.5, "only-before": 1.0}
        after = {"a": 0.0, "b": 0.5, "c": 1.0, "d": 0.5, "e": 0.0, "f": 0.75, "only-after": 0.0}
        # deltas on the 6 common queries: a -1, b 0, c +1, d -1/2, e -1/4, f +1/4
        comparison = rag_eval.compare_paired("mrr@5", before, after, resamples=200, seed=3)
        self.assertIsInstance(comparison, rag_eval.PairedComparison)
        self.assertEqual(comparison.metric, "mrr@5")
        self.assertEqual(comparison.queries, 6)
        self.assertEqual((comparison.improved, comparison.worse, comparison.same), (2, 3, 1))  # c f / a d e / b
        self.assertAlmostEqual(comparison.mean_delta, (-1 + 0 + 1 - 0.5 - 0.25 + 0.25) / 6, places=15)
        self.assertEqual(comparison.hit_to_miss, ["a", "e"])  # above 0 before, 0 after
        self.assertEqual(comparison.largest_drops, [("a", -1.0), ("d", -0.5), ("e", -0.25)])
        self.assertTrue(comparison.exact)
        # in eighths: -8, 0, +8, -4, -2, +2
        self.assertEqual(Fraction(comparison.p_value), brute_force_p([-8, 0, 8, -4, -2, 2]))
        self.assertTrue(comparison.unresolvable)  # 5 differ: the smallest p is 2 / 2**5 > 0.05
        self.assertAlmostEqual(comparison.spread, statistics.stdev([-1, 0, 1, -0.5, -0.25, 0.25]), places=12)
        low, high = comparison.interval
        self.assertLessEqual(low, comparison.mean_delta)
        self.assertGreaterEqual(high, comparison.mean_delta)

    def test_largest_drops_are_the_most_negative_first(self):
        rng = random.Random(21)
        before = {f"q{i:02d}": rng.choice([0.0, 0.25, 0.5, 1.0]) for i in range(40)}
        after = {q: rng.choice([0.0, 0.25, 0.5, 1.0]) for q in before}
        comparison = rag_eval.compare_paired("recall@5", before, after, resamples=100, show=7)
        expected = sorted((after[q] - before[q], q) for q in before if after[q] < before[q])[:7]
        self.assertEqual(comparison.largest_drops, [(q, delta) for delta, q in expected])
        self.assertEqual(comparison.hit_to_miss, sorted(q for q in before if before[q] > 0 and after[q] == 0))
        self.assertEqual(rag_eval.compare_paired("recall@5", before, after, resamples=100, show=0).largest_drops, [])

    def test_unresolvable_and_exact(self):
        # unresolvable when even the most extreme outcome, p = 2 / 2**differing, is above alpha
        limit = rag_eval.EXACT_SIGN_FLIP_MAX
        for differing, alpha, unresolvable in [
            (0, 0.05, True),
            (4, 0.05, True),  # 2**-3 = 0.125
            (5, 0.05, True),  # 2**-4 = 0.0625
            (6, 0.05, False),  # 2**-5 = 0.03125
            (5, 0.10, False),  # 2**-4 = 0.0625 < 0.10
            (7, 0.01, True),  # 2**-6 = 0.0156
            (8, 0.01, False),  # 2**-7 = 0.0078
        ]:
            before = {f"q{i:02d}": 0.5 for i in range(20)}
            after = dict(before, **{f"q{i:02d}": 0.0 for i in range(differing)})
            with self.subTest(differing=differing, alpha=alpha):
                comparison = rag_eval.compare_paired("recall@5", before, after, resamples=100, alpha=alpha)
                self.assertEqual(comparison.unresolvable, unresolvable)
                self.assertEqual((comparison.worse, comparison.same), (differing, 20 - differing))
        for differing, exact in [(limit, True), (limit + 1, False)]:
            before = {f"q{i:02d}": 1.0 for i in range(limit + 5)}
            # deltas of two sizes: one size (a 0/1 measure) is the sign test, exact at any count
            after = dict(before, **{f"q{i:02d}": 0.5 if i == 0 else 0.0 for i in range(differing)})
            with self.subTest(differing=differing):
                self.assertEqual(rag_eval.compare_paired("success@5", before, after, resamples=100).exact, exact)

    def test_seeded(self):
        rng = random.Random(22)
        before = {f"q{i:02d}": rng.random() for i in range(60)}
        after = {q: rng.random() for q in before}
        first = rag_eval.compare_paired("ndcg@5", before, after, resamples=300, seed=4)
        self.assertEqual(rag_eval.compare_paired("ndcg@5", before, after, resamples=300, seed=4), first)

    def test_no_common_query(self):
        with self.assertRaises(ValueError):
            rag_eval.compare_paired("recall@5", {"a": 1.0}, {"b": 1.0}, resamples=100)


# === Baseline and gate ===


class TestBaselines(TempDirMixin, unittest.TestCase):
    def test_save_baseline_writes_an_extended_baseline(self):
        path = self.path("saved.json")
        code, out, err = run_main([QRELS, RUN, "--save-baseline", path], env={"SOURCE_DATE_EPOCH": "86400"})
        self.assertEqual(code, 0, err)
        self.assertEqual(out, run_main([QRELS, RUN])[1])  # the report is the same as without it
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        self.assertEqual(saved["format"], "rag_eval-baseline/1")
        self.assertEqual(saved["format"], rag_eval.BASELINE_FORMAT)
        self.assertEqual(saved["tool"], f"rag_eval {rag_eval.__version__}")
        self.assertEqual(saved["created"], "1970-01-02T00:00:00Z")  # SOURCE_DATE_EPOCH = 86400 = one day
        self.assertEqual(saved["qrels_sha256"], rag_eval.qrels_fingerprint(rag_eval.read_qrels(QRELS)))
        self.assertRegex(saved["qrels_sha256"], "^[0-9a-f]{64}$")
        expected = {"k": [5], "gain": "exp", "min_grade": 1, "judged_only": False, "ties": rag_eval.TIE_RULE}
        self.assertEqual({key: saved["conventions"].get(key) for key in expected}, expected)  # more may be added
        self.assertEqual(set(saved["mean"]), set(FIXTURE_MEANS))
        for metric, value in FIXTURE_MEANS.items():
            self.assertAlmostEqual(saved["mean"][metric], value, places=15)  # full precision, not rounded
        self.assertEqual(set(saved["per_query"]), set(FIXTURE_PER_QUERY))
        for metric, values in FIXTURE_PER_QUERY.items():
            self.assertEqual(set(saved["per_query"][metric]), {"q1", "q2", "q3"})  # q4 is unscored
            for qid, value in values.items():
                self.assertAlmostEqual(saved["per_query"][metric][qid], value, places=15)

    def test_read_baseline_gives_a_baseline(self):
        path = self.path("saved.json")
        self.assertEqual(run_main([QRELS, RUN, "--save-baseline", path])[0], 0)
        baseline = rag_eval.read_baseline(path)
        self.assertIsInstance(baseline, rag_eval.Baseline)
        self.assertIsInstance(baseline, tuple)
        self.assertLessEqual({"means", "per_query", "conventions", "qrels_sha256"}, set(baseline._fields))
        self.assertEqual(baseline.means.keys(), FIXTURE_MEANS.keys())
        self.assertEqual(baseline.per_query["mrr@5"], {"q1": 0.5, "q2": 0.0, "q3": 1.0})
        self.assertEqual(baseline.conventions["k"], [5])
        self.assertEqual(baseline.qrels_sha256, rag_eval.qrels_fingerprint(rag_eval.read_qrels(QRELS)))
        flat = rag_eval.read_baseline(BASELINE)
        self.assertEqual(flat, rag_eval.Baseline({"recall@5": 0.70, "success@5": 0.6667, "mrr@5": 0.55, "ndcg@5": 0.52}))
        self.assertIsNone(flat.per_query)

    def test_same_run_against_its_own_baseline_passes(self):
        path = self.path("saved.json")
        self.assertEqual(run_main([QRELS, RUN, "--save-baseline", path])[0], 0)
        report, err = self.gate_report([QRELS, RUN, "--baseline", path, "--resamples", R], 0)
        self.assertEqual(regression_lines(err), [])
        self.assertTrue(report["gate"]["passed"])
        self.assertFalse(report["gate"]["qrels_changed"])
        for metric, entry in report["gate"]["metrics"].items():
            with self.subTest(metric):
                self.assertEqual(entry["verdict"], "pass")
                self.assertEqual((entry["improved"], entry["worse"], entry["same"]), (0, 0, 3))
                self.assertEqual(entry["p_value"], 1.0)
                self.assertEqual(entry["delta"], 0.0)

    def test_flat_baseline_of_the_spec(self):
        code, out, err = run_main([QRELS, RUN, "--baseline", BASELINE])
        self.assertEqual(code, 1, err)
        self.assertEqual(regression_lines(err), [
            "REGRESSION mrr@5: baseline 0.5500, now 0.5000",
            "REGRESSION recall@5: baseline 0.7000, now 0.6667",
        ])
        gate = json.loads(out)["gate"]
        self.assertEqual({m: e["verdict"] for m, e in gate["metrics"].items()},
                         {"mrr@5": "regression", "recall@5": "regression", "ndcg@5": "pass", "success@5": "pass"})
        self.assertNotIn("p_value", gate["metrics"]["mrr@5"])  # no per-query scores in a flat baseline

    def test_save_baseline_refuses_to_overwrite_an_input(self):
        baseline = self.write("baseline.json", self.read(BASELINE))
        qrels = self.write("qrels.json", self.read(QRELS))
        run = self.write("run.json", self.read(RUN))
        old_run = self.write("old-run.json", self.read(RUN))
        for label, argv, target in [
            ("qrels", [qrels, run, "--save-baseline", qrels], qrels),
            ("run", [qrels, run, "--save-baseline", run], run),
            ("baseline", [qrels, run, "--baseline", baseline, "--save-baseline", baseline], baseline),
            ("baseline, other spelling", [qrels, run, "--baseline", baseline,
                                          "--save-baseline", os.path.join(self.tmp, ".", "x", "..", "baseline.json")],
             baseline),
            ("baseline run", [qrels, run, "--baseline-run", old_run, "--save-baseline", old_run], old_run),
        ]:
            with self.subTest(label):
                before = self.read(target)
                self.assert_error(argv, ["--save-baseline"])
                self.assertEqual(self.read(target), before)

    def test_save_baseline_into_a_missing_folder(self):
        # the folders are made, and the file named in a note
        target = self.path("no/such/dir/b.json")
        code, out, err = run_main([QRELS, RUN, "--save-baseline", target])
        self.assertEqual(code, rag_eval.EXIT_OK, err)
        self.assertEqual(rag_eval.read_baseline(target).means.keys(), json.loads(out)["mean"].keys())
        self.assertIn(f"rag_eval: note: wrote {target}", err)
        # a folder that cannot be made (a file is in the way) is an error line
        blocked = self.path("no/such/dir/b.json/c.json")
        code, out, err = run_main([QRELS, RUN, "--save-baseline", blocked])
        self.assertEqual(code, rag_eval.EXIT_ERROR, err)
        self.assertTrue(err.splitlines()[-1].startswith(ERROR_PREFIX + blocked), err)
        self.assertNotIn("Traceback", err)

    def in_tmp(self, argv, stdin=b""):
        """run_main from the temporary folder, with ``stdin`` on standard input."""
        old = os.getcwd()
        os.chdir(self.tmp)
        try:
            with mock.patch.object(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(stdin)))):
                return run_main(argv)
        finally:
            os.chdir(old)

    def test_save_baseline_dash_is_refused(self):
        code, out, err = self.in_tmp([QRELS, RUN, "--save-baseline", "-"])
        self.assertEqual(code, rag_eval.EXIT_ERROR, err)
        self.assertTrue(err.startswith(ERROR_PREFIX), err)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_update_baseline_read_from_stdin(self):
        # Regression: ``--baseline - --update-baseline`` reads the baseline from standard
        # input, then "updates" it by writing a new file literally named "-" in
        # the working directory (stderr: "rag_eval: note: updated -").  It should
        # be refused (exit 2), as ``--save-baseline -`` is.
        code, out, err = self.in_tmp([QRELS, RUN, "--baseline", "-", "--update-baseline", "--max-drop", "0.1"],
                                     stdin=self.read(BASELINE))
        self.assertEqual(os.listdir(self.tmp), [], "a file named '-' was written")
        self.assertEqual(code, rag_eval.EXIT_ERROR, err)


class TestProvenance(TempDirMixin, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.saved = self.path("saved.json")
        code, _, err = run_main([QRELS, RUN, "--save-baseline", self.saved])
        self.assertEqual(code, 0, err)
        with open(QRELS, encoding="utf-8") as f:
            self.qrels = json.load(f)

    def test_changed_grade_is_refused(self):
        changed = json.loads(json.dumps(self.qrels))
        changed["q1"]["refund-policy#3"] = 2  # was 1
        path = self.write("changed.json", changed)
        line = self.assert_error([path, RUN, "--baseline", self.saved], [self.saved, "qrels"])
        self.assertTrue(line.startswith(f"{ERROR_PREFIX}{self.saved}: "), line)

    def test_allow_qrels_change(self):
        changed = json.loads(json.dumps(self.qrels))
        changed["q1"]["refund-policy#3"] = 2  # q1's nDCG rises: grades 2 @2, 2 @4; ideal 2, 2
        path = self.write("changed.json", changed)
        report, err = self.gate_report([path, RUN, "--baseline", self.saved, "--allow-qrels-change",
                                        "--resamples", R], 0)
        self.assertTrue(report["gate"]["qrels_changed"])
        self.assertIn("qrels", " ".join(line for line in err.splitlines() if line.startswith("rag_eval: note:")))
        ndcg = report["gate"]["metrics"]["ndcg@5"]
        new_q1 = (3 / math.log2(3) + 3 / math.log2(5)) / (3 + 3 / math.log2(3))
        self.assertAlmostEqual(ndcg["delta"], (new_q1 - Q1_NDCG5) / 3, places=12)
        report, _ = self.gate_report([QRELS, RUN, "--baseline", self.saved, "--resamples", R], 0)
        self.assertFalse(report["gate"]["qrels_changed"])

    def test_other_conventions_are_refused(self):
        for option, names in [
            (["--gain", "linear"], ["gain"]),
            (["--min-grade", "2"], ["min_grade"]),
            (["--judged-only"], ["judged_only"]),
            (["--k", "3"], []),  # no metric in common: refused as well
        ]:
            with self.subTest(option):
                self.assert_error([QRELS, RUN, "--baseline", self.saved, *option], [self.saved, *names])

    def test_more_cutoffs_than_the_baseline_are_comparable(self):
        # every @5 metric of the baseline is computed again, with the same conventions
        code, out, err = run_main([QRELS, RUN, "--baseline", self.saved, "--k", "3,5"])
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(json.loads(out)["gate"]["metrics"]), ["mrr@5", "ndcg@5", "recall@5", "success@5"])

    def test_allow_qrels_change_does_not_allow_other_conventions(self):
        self.assert_error([QRELS, RUN, "--baseline", self.saved, "--gain", "linear", "--allow-qrels-change"],
                          ["gain"])

    def test_reformatting_the_qrels_keeps_the_fingerprint(self):
        trec = "".join(f"{qid} 0 {docid} {grade}\n" for qid, docs in self.qrels.items() for docid, grade in docs.items())
        jsonl = "".join(json.dumps({"query_id": qid, "doc_id": docid, "relevance": grade}) + "\n"
                        for qid, docs in reversed(list(self.qrels.items())) for docid, grade in docs.items())
        with open(QRELS, "rb") as f:
            original = f.read()
        fingerprint = rag_eval.qrels_fingerprint(rag_eval.read_qrels(QRELS))
        self.assertEqual(fingerprint, rag_eval.qrels_fingerprint(self.qrels))
        for label, name, data in [
            ("TREC", "qrels.txt", trec.encode()),
            ("TREC, gzipped", "qrels.txt.gz", gzip.compress(trec.encode())),
            ("JSON, gzipped", "qrels.json.gz", gzip.compress(original)),
            ("JSON, reindented", "qrels2.json", json.dumps(self.qrels, indent=4, sort_keys=True).encode()),
            ("JSONL, other order", "qrels.jsonl", jsonl.encode()),
        ]:
            with self.subTest(label):
                path = self.write(name, data)
                self.assertEqual(rag_eval.qrels_fingerprint(rag_eval.read_qrels(path)), fingerprint)
                report, _ = self.gate_report([path, RUN, "--baseline", self.saved, "--resamples", R], 0)
                self.assertFalse(report["gate"]["qrels_changed"])

    def test_fingerprint_changes_with_any_judgment(self):
        fingerprint = rag_eval.qrels_fingerprint(self.qrels)
        for label, edit in [
            ("grade", lambda q: q["q1"].__setitem__("refund-policy#3", 2)),
            ("new judgment", lambda q: q["q2"].__setitem__("pricing#3", 0)),
            ("removed judgment", lambda q: q["q3"].pop("okta-guide#1")),
            ("renamed query", lambda q: q.__setitem__("q5", q.pop("q4"))),
        ]:
            changed = json.loads(json.dumps(self.qrels))
            edit(changed)
            with self.subTest(label):
                self.assertNotEqual(rag_eval.qrels_fingerprint(changed), fingerprint)

    def test_fingerprint_is_unambiguous(self):
        # Regression: the canonical form joins qid, docid and grade with tabs and
        # newlines, which JSON ids may contain, so different judgments collide:
        # {"a\tb": {"c": 1}} and {"a": {"b\tc": 1}} both hash "a\tb\tc\t1\n".
        self.assertNotEqual(rag_eval.qrels_fingerprint({"a\tb": {"c": 1}}),
                            rag_eval.qrels_fingerprint({"a": {"b\tc": 1}}))


class TestAtomicWrite(TempDirMixin, unittest.TestCase):
    OLD = '{"recall@5": 0.7}\n'

    def setUp(self):
        super().setUp()
        self.target = self.write("baseline.json", self.OLD)

    def assert_untouched(self):
        with open(self.target, encoding="utf-8") as f:
            self.assertEqual(f.read(), self.OLD)
        self.assertEqual(os.listdir(self.tmp), ["baseline.json"])  # no temporary file left behind

    def test_writes_the_new_text(self):
        rag_eval.write_atomically(self.target, "new\n" * 1000)
        with open(self.target, encoding="utf-8") as f:
            self.assertEqual(f.read(), "new\n" * 1000)
        self.assertEqual(os.listdir(self.tmp), ["baseline.json"])

    def test_failure_leaves_the_old_file(self):
        for label, patch in [
            ("fsync fails", mock.patch.object(rag_eval.os, "fsync", side_effect=OSError(errno.EIO, "I/O error"))),
            ("rename fails", mock.patch.object(rag_eval.os, "replace", side_effect=OSError(errno.EXDEV, "cross-device"))),
        ]:
            with self.subTest(label):
                with patch:
                    with self.assertRaises(rag_eval.RagEvalError) as ctx:
                        rag_eval.write_atomically(self.target, "new\n" * 1000)
                self.assertIn(self.target, str(ctx.exception))
                self.assert_untouched()

    def test_failing_text_write_leaves_the_old_file(self):
        # the disk fills up in the middle of the write: an OSError, reported as one located error
        real_fdopen = os.fdopen

        def failing_fdopen(*args, **kwargs):
            handle = real_fdopen(*args, **kwargs)
            handle.write = mock.Mock(side_effect=OSError(28, "No space left on device"))
            return handle

        with mock.patch.object(rag_eval.os, "fdopen", side_effect=failing_fdopen):
            with self.assertRaises(rag_eval.RagEvalError) as caught:
                rag_eval.write_atomically(self.target, "new\n" * 1000)
        self.assertIn("No space left on device", str(caught.exception))
        self.assert_untouched()

    def test_a_lone_surrogate_is_written_escaped(self):
        # a JSON "\udfff" escape makes a str that UTF-8 cannot encode; the file is still written
        rag_eval.write_atomically(self.target, "id \udfff\n")
        with open(self.target, encoding="utf-8") as f:
            self.assertEqual(f.read(), "id \\udfff\n")

    def test_interrupt_leaves_the_old_file(self):
        with mock.patch.object(rag_eval.os, "fsync", side_effect=KeyboardInterrupt):
            with self.assertRaises(KeyboardInterrupt):
                rag_eval.write_atomically(self.target, "new\n")
        self.assert_untouched()

    @unittest.skipIf(os.name == "nt" or not hasattr(signal, "SIGKILL"), "needs POSIX SIGKILL")
    def test_process_killed_mid_write(self):
        # The child writes the new text, then stalls in fsync; it is killed there.
        child = (
            "import os, sys, time\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "import rag_eval\n"
            "def stall(fd):\n"
            "    sys.stdout.write('writing\\n'); sys.stdout.flush()\n"
            "    while True: time.sleep(3600)  # until killed: no clock decides when the kill must come\n"
            "os.fsync = stall\n"
            "rag_eval.write_atomically(sys.argv[2], 'NEW BASELINE ' * 100000)\n"
        )
        proc = subprocess.Popen([sys.executable, "-c", child, REPO, self.target], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
        try:
            line = proc.stdout.readline()
            self.assertEqual(line.strip(), b"writing", proc.stderr.read() if not line else line)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        self.assertEqual(proc.returncode, -signal.SIGKILL)
        with open(self.target, encoding="utf-8") as f:
            self.assertEqual(f.read(), self.OLD)
        # the new text was written, only elsewhere: the kill came mid-write
        others = [name for name in os.listdir(self.tmp) if name != "baseline.json"]
        self.assertTrue(any(self.read(self.path(name)).startswith(b"NEW BASELINE") for name in others), others)

    @unittest.skipIf(os.name == "nt", "POSIX permissions")
    def test_keeps_the_permissions_of_the_file_it_replaces(self):
        # Regression: tempfile.mkstemp creates the temporary file with mode 0600 and it
        # is renamed over the target, so --update-baseline turns a 0644
        # baseline into 0600, and --save-baseline creates 0600 files whatever
        # the umask: another user (a CI job under another account) cannot read it.
        os.chmod(self.target, 0o644)
        rag_eval.write_atomically(self.target, "new\n")
        self.assertEqual(os.stat(self.target).st_mode & 0o777, 0o644)


# === Tolerances and floors ===


class TestTolerances(TempDirMixin, unittest.TestCase):
    def gate(self, argv, expected_code):
        report, err = self.gate_report([QRELS, RUN, *argv], expected_code)
        return report["gate"], regression_lines(err)

    def test_global_max_drop(self):
        gate, lines = self.gate(["--baseline", BASELINE, "--max-drop", "0.1"], 0)  # largest fall is mrr's 0.05
        self.assertEqual(lines, [])
        self.assertEqual({e["allowed_drop"] for e in gate["metrics"].values()}, {0.1})

    def test_per_metric_max_drop_overrides_the_global_one(self):
        for argv in (["--max-drop", "0.1", "--max-drop", "ndcg@5=0.001"],
                     ["--max-drop", "ndcg@5=0.001", "--max-drop", "0.1"]):  # order does not matter
            with self.subTest(argv):
                # tighter: ndcg fell 0.52 - 0.5095 = 0.0105 > 0.001
                gate, lines = self.gate(["--baseline", BASELINE, *argv], 1)
                self.assertEqual(lines, ["REGRESSION ndcg@5: baseline 0.5200, now 0.5095"])
                self.assertEqual(gate["metrics"]["ndcg@5"]["allowed_drop"], 0.001)
                self.assertEqual(gate["metrics"]["mrr@5"]["allowed_drop"], 0.1)
        # looser: recall fell 0.0333 < 0.5; mrr still fails the default 0.02 with 0.05
        gate, lines = self.gate(["--baseline", BASELINE, "--max-drop", "recall@5=0.5"], 1)
        self.assertEqual(lines, ["REGRESSION mrr@5: baseline 0.5500, now 0.5000"])
        self.assertEqual(gate["metrics"]["recall@5"]["verdict"], "pass")

    def test_relative_max_drop(self):
        # recall@5 is 2/3 now.  A baseline b with b - 2/3 = 5% of b is b = (2/3) / (1 - 0.05).
        exactly = self.write("exactly.json", {"recall@5": (2 / 3) / (1 - 0.05)})
        gate, lines = self.gate(["--baseline", exactly, "--max-drop", "recall@5=5%"], 0)
        entry = gate["metrics"]["recall@5"]
        self.assertEqual(entry["tolerance"], "5%")
        self.assertAlmostEqual(entry["allowed_drop"], 0.05 * (2 / 3) / (1 - 0.05), places=15)
        # a fall of 6% of the baseline, (2/3) / 0.94 - 2/3 = 0.0426: over 5% (0.0355),
        # though under an absolute 0.05
        beyond = self.write("beyond.json", {"recall@5": (2 / 3) / (1 - 0.06)})
        gate, lines = self.gate(["--baseline", beyond, "--max-drop", "recall@5=5%"], 1)
        self.assertEqual(lines, [f"REGRESSION recall@5: baseline {(2 / 3) / 0.94:.4f}, now 0.6667"])
        self.gate(["--baseline", beyond, "--max-drop", "recall@5=0.05"], 0)
        self.gate(["--baseline", beyond, "--max-drop", "5%"], 1)  # global and relative
        self.gate(["--baseline", beyond, "--max-drop", "7%"], 0)

    def test_drop_equal_to_the_tolerance_passes(self):
        baseline = self.write("b.json", {"mrr@5": 0.55, "ndcg@5": 0.52})
        # mrr fell 0.55 - 1/2 = 0.05 (0.050000000000000044 in floats)
        gate, lines = self.gate(["--baseline", baseline, "--max-drop", "mrr@5=0.05", "--max-drop", "0.1"], 0)
        self.assertEqual(gate["metrics"]["mrr@5"]["verdict"], "pass")
        gate, lines = self.gate(["--baseline", baseline, "--max-drop", "mrr@5=0.0499", "--max-drop", "0.1"], 1)
        self.assertEqual(lines, ["REGRESSION mrr@5: baseline 0.5500, now 0.5000"])
        # relative: 10% of 0.55 is 0.055 >= 0.05; 9% is 0.0495 < 0.05
        self.gate(["--baseline", baseline, "--max-drop", "mrr@5=10%", "--max-drop", "0.1"], 0)
        self.gate(["--baseline", baseline, "--max-drop", "mrr@5=9%", "--max-drop", "0.1"], 1)
        # success@5 is 2/3; a baseline of 5/6 falls by 1/6, exactly 20% of 5/6
        fifth = self.write("fifth.json", {"success@5": 5 / 6})
        self.gate(["--baseline", fifth, "--max-drop", "20%"], 0)
        self.gate(["--baseline", fifth, "--max-drop", "19.9%"], 1)

    def test_floors(self):
        # no baseline needed; recall@5 is 2/3 < 0.8
        gate, lines = self.gate(["--min", "recall@5=0.8"], 1)
        self.assertEqual(lines, ["REGRESSION recall@5: floor 0.8000, now 0.6667"])
        self.assertEqual(gate["floors"]["recall@5"]["verdict"], "below floor")
        self.assertEqual(gate["metrics"], {})
        self.assertFalse(gate["passed"])
        gate, lines = self.gate(["--min", "recall@5=0.6", "--min", "mrr@5=0.5"], 0)  # mrr exactly at its floor
        self.assertEqual({m: e["verdict"] for m, e in gate["floors"].items()}, {"recall@5": "pass", "mrr@5": "pass"})
        # with a baseline that passes, a floor still fails
        gate, lines = self.gate(["--baseline", BASELINE, "--max-drop", "0.1", "--min", "ndcg@5=0.6"], 1)
        self.assertEqual(lines, ["REGRESSION ndcg@5: floor 0.6000, now 0.5095"])

    def test_unknown_metric_names_are_reported_at_once(self):
        line = self.assert_error([QRELS, RUN, "--baseline", BASELINE, "--max-drop", "ndgc@5=0.1",
                                  "--min", "recal@5=0.5", "--min", "ndcg@10=0.2", "--max-drop", "mrr=0.1"],
                                 ["ndgc@5", "recal@5", "ndcg@10", "'mrr'"])
        self.assertIn("--max-drop", line)
        self.assertIn("--min", line)

    def test_metric_not_computed(self):
        self.assert_error([QRELS, RUN, "--min", "ap@5=0.1"], ["ap@5"])
        self.assert_error([QRELS, RUN, "--baseline", BASELINE, "--max-drop", "ndcg@10=0.01"], ["ndcg@10"])
        # computed once asked for: ap@5 = mean of q1 (1/2 + 2/4) / 2, q2 0, q3 (1/1 + 2/2 + 3/5) / 3
        gate, lines = self.gate(["--measures", "recall,ap", "--min", "ap@5=0.1"], 0)
        self.assertAlmostEqual(gate["floors"]["ap@5"]["now"], ((1 / 2 + 2 / 4) / 2 + 0 + (1 / 1 + 2 / 2 + 3 / 5) / 3) / 3,
                               places=12)

    def test_baseline_with_no_metric_computed(self):
        baseline = self.write("b.json", {"ndcg@10": 0.5, "recall@10": 0.5})
        self.assert_error([QRELS, RUN, "--baseline", baseline], [baseline])
        # one metric in common is enough; a baseline metric the run no longer reports is a regression
        partly = self.write("partly.json", {"ndcg@10": 0.5, "ndcg@5": 0.5})
        gate, lines = self.gate(["--baseline", partly], 1)
        self.assertEqual(lines, ["REGRESSION ndcg@10: baseline 0.5000, now missing"])

    def test_bad_tolerance_values(self):
        for argv in (["--max-drop", "-0.1"], ["--max-drop", "recall@5=x"], ["--max-drop", "nan"],
                     ["--min", "recall@5=1.5"], ["--min", "recall@5"]):
            with self.subTest(argv):
                self.assert_error([QRELS, RUN, "--baseline", BASELINE, *argv])


# === Paired comparison and gate rules ===


class TestPairedGate(unittest.TestCase):
    """A seeded synthetic collection of 200 queries and three changed runs."""

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = cls._tmp.name
        qrels, base = synthetic(200)
        rng = random.Random(99)
        hits = sorted(q for q, ranking in base.items() if is_hit(ranking))
        misses = sorted(q for q, ranking in base.items() if not is_hit(ranking))
        assert len(hits) >= 110 and len(misses) >= 6, (len(hits), len(misses))
        # slight: 10 hits become misses, 6 misses become hits at rank 5.  success@5
        # falls by (10 - 6) / 200 = 0.02, beyond a tolerance of 0.01, but 10 worse
        # and 6 better out of 16 is no evidence: p = P(|2B - 16| >= 4), B ~ Bin(16, 1/2).
        cls.slight_worse = sorted(rng.sample(hits, 10))
        cls.slight_better = sorted(rng.sample(misses, 6))
        slight = dict(base)
        for q in cls.slight_worse:
            slight[q] = missed(base[q])
        for q in cls.slight_better:
            slight[q] = found_at_5(q, base[q])
        # strong: 100 hits become misses
        cls.strong_worse = sorted(rng.sample(hits, 100))
        strong = dict(base, **{q: missed(base[q]) for q in cls.strong_worse})
        cls.base_run, cls.slight_run = base, slight
        cls.qrels = cls.write("qrels.json", qrels)
        cls.base = cls.write("base.json", base)
        cls.slight = cls.write("slight.json", slight)
        cls.strong = cls.write("strong.json", strong)
        cls.saved = os.path.join(cls.tmp, "saved.json")
        code, _, err = run_main([cls.qrels, cls.base, "--save-baseline", cls.saved])
        assert code == 0, err
        cls.outputs = {}  # (exit code, stdout, stderr) of gate() runs against the saved baseline, by argv

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    @classmethod
    def write(cls, name, data):
        path = os.path.join(cls.tmp, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f)
        return path

    def gate(self, run, expected_code, *options, baseline=None):
        argv = [self.qrels, run, "--baseline", baseline or self.saved, "--resamples", R, *options]
        if baseline is None:  # the class's own files, never rewritten: a run several tests read is made once
            key = tuple(argv)
            if key not in self.outputs:
                self.outputs[key] = run_main(argv)
            code, out, err = self.outputs[key]
        else:
            code, out, err = run_main(argv)
        self.assertEqual(code, expected_code, err)
        for line in err.splitlines():
            self.assertTrue(line.startswith(("REGRESSION ", "rag_eval: note:", "rag_eval: warning:")), line)
        return json.loads(out)["gate"], regression_lines(err)

    def test_strong_degradation_fails_under_both_rules(self):
        for rule in ("drop", "significant"):
            with self.subTest(rule):
                gate, lines = self.gate(self.strong, 1, "--gate", rule)
                self.assertEqual(gate["rule"], rule)
                self.assertFalse(gate["passed"])
                self.assertEqual([line.split(":")[0] for line in lines],
                                 [f"REGRESSION {m}" for m in ("mrr@5", "ndcg@5", "recall@5", "success@5")])
                for metric, entry in gate["metrics"].items():
                    self.assertEqual(entry["verdict"], "regression", metric)
                    # 100 queries differ: sampled, but a 0/1 measure is the sign test, exact at any count
                    self.assertEqual(entry["exact"], metric == "success@5")
                    self.assertEqual(entry["worse"], 100)
                    self.assertLess(entry["p_holm"], 0.05)
                    self.assertLess(entry["interval"][1], 0)
                self.assertEqual(gate["metrics"]["success@5"]["mean_delta"], -100 / 200)

    def test_slight_degradation_fails_drop_but_not_significant(self):
        gate, lines = self.gate(self.slight, 1, "--max-drop", "0.01")
        self.assertEqual(gate["rule"], "drop")
        self.assertEqual(gate["metrics"]["success@5"]["verdict"], "regression")
        self.assertIn("REGRESSION success@5: baseline", "\n".join(lines))
        # Holm: no metric's fall is significant, and none is shown to be within 0.01 either:
        # inconclusive (exit 3), where the two-outcome gate passed them as "not significant".
        gate, lines = self.gate(self.slight, 3, "--max-drop", "0.01", "--gate", "significant", "--adjust", "holm")
        self.assertEqual(gate["rule"], "significant")
        self.assertFalse(gate["passed"])
        self.assertEqual(gate["verdict"], "inconclusive")
        self.assertEqual(lines, [])
        success = gate["metrics"]["success@5"]
        self.assertEqual(success["verdict"], "inconclusive")
        self.assertEqual({e["verdict"] for e in gate["metrics"].values()}, {"inconclusive"})
        # MaxT (the default) shares the 2**16 sign patterns of the 16 differing queries among the four
        # metrics: ndcg@5 (raw p 0.0136, Holm 0.054) adjusts to 0.0315 and its interval is below 0.
        gate, lines = self.gate(self.slight, 1, "--max-drop", "0.01", "--gate", "significant")
        ndcg = gate["metrics"]["ndcg@5"]
        self.assertEqual(ndcg["verdict"], "regression")
        self.assertLess(ndcg["p_adjusted"], 0.05)
        self.assertGreater(ndcg["p_holm"], 0.05)
        self.assertEqual(gate["metrics"]["success@5"]["verdict"], "inconclusive")
        self.assertAlmostEqual(success["delta"], (6 - 10) / 200, places=12)
        self.assertAlmostEqual(success["mean_delta"], (6 - 10) / 200, places=12)
        self.assertEqual((success["worse"], success["improved"], success["same"]), (10, 6, 200 - 16))
        # 16 deltas of +-1, observed |sum| 4: |2B - 16| >= 4 when B <= 6 or B >= 10
        self.assertTrue(success["exact"])
        self.assertAlmostEqual(success["p_value"], 2 * sum(math.comb(16, i) for i in range(0, 7)) / 2 ** 16, places=15)
        self.assertFalse(success["unresolvable"])

    def test_paired_numbers(self):
        gate, _ = self.gate(self.slight, 1, "--max-drop", "0.01")
        for metric, entry in gate["metrics"].items():
            with self.subTest(metric):
                self.assertEqual(entry["queries"], 200)
                self.assertGreaterEqual(entry["p_holm"], entry["p_value"])
                self.assertLessEqual(entry["p_holm"], 1.0)
                low, high = entry["interval"]
                self.assertLess(low, high)
                self.assertLessEqual(low, entry["mean_delta"])
                self.assertGreaterEqual(high, entry["mean_delta"])
                self.assertAlmostEqual(entry["mean_delta"], entry["delta"], places=12)
                # the 10 queries moved out of the top 5 score 0 after, above 0 before
                self.assertEqual(entry["hit_to_miss"], self.slight_worse)
        self.assertEqual(gate["metrics"]["success@5"]["largest_drops"], [[q, -1.0] for q in self.slight_worse[:5]])
        # mrr: each worse query loses its reciprocal rank; the largest losses first, ties by query id
        expected = sorted((-reciprocal_rank(self.base_run[q]), q) for q in self.slight_worse)[:5]
        self.assertEqual([[q, d] for q, d in gate["metrics"]["mrr@5"]["largest_drops"]],
                         [[q, delta] for delta, q in expected])
        gate, _ = self.gate(self.slight, 1, "--max-drop", "0.01", "--largest-drops", "2")
        self.assertEqual(len(gate["metrics"]["success@5"]["largest_drops"]), 2)

    def test_holm_correction_across_metrics(self):
        gate, _ = self.gate(self.slight, 1, "--max-drop", "0.01")
        p_values = {metric: entry["p_value"] for metric, entry in gate["metrics"].items()}
        for metric, value in rag_eval.holm(p_values).items():
            self.assertEqual(gate["metrics"][metric]["p_holm"], value)

    def test_baseline_run_gives_the_same_paired_numbers(self):
        code, out, err = run_main([self.qrels, self.slight, "--baseline-run", self.base, "--resamples", R,
                                   "--max-drop", "0.01"])
        self.assertEqual(code, 1, err)
        from_run = json.loads(out)["gate"]
        from_file, _ = self.gate(self.slight, 1, "--max-drop", "0.01")
        self.assertEqual(from_run, from_file)

    def test_same_inputs_and_seed_same_bytes(self):
        argv = [self.qrels, self.strong, "--baseline", self.saved, "--resamples", R, "--seed", "7", "--ci"]
        first = run_main(argv)
        self.assertEqual(first[0], 1, first[2])
        self.assertEqual(run_main(argv), first)

    def test_other_seed_same_means(self):
        reports = {}
        for seed in ("1", "2"):
            code, out, err = run_main([self.qrels, self.strong, "--baseline", self.saved, "--resamples", "100",
                                       "--seed", seed])
            self.assertEqual(code, 1, err)
            reports[seed] = json.loads(out)
        self.assertEqual(reports["1"]["mean"], reports["2"]["mean"])
        for metric, entry in reports["1"]["gate"]["metrics"].items():
            other = reports["2"]["gate"]["metrics"][metric]
            for key in ("baseline", "now", "delta", "mean_delta", "improved", "worse", "same", "hit_to_miss"):
                self.assertEqual(entry[key], other[key], (metric, key))

    def test_significant_needs_per_query_scores(self):
        flat = self.write("flat.json", rag_eval.read_baseline(self.saved).means)
        code, out, err = run_main([self.qrels, self.slight, "--baseline", flat, "--gate", "significant"])
        self.assertEqual(code, 2, err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertTrue(err.startswith(ERROR_PREFIX), err)
        self.assertIn("--gate significant", err)
        # the flat baseline still gates under the drop rule
        gate, _ = self.gate(self.slight, 1, "--max-drop", "0.01", baseline=flat)
        self.assertNotIn("p_value", gate["metrics"]["success@5"])

    def test_significant_with_a_baseline_lacking_some_per_query_scores(self):
        # An extended baseline whose "per_query" lacks a metric that its "mean"
        # has (hand-edited, or written by another tool): with no pairs there is
        # no test, so a fall beyond the tolerance fails.  (This crashed with
        # KeyError in gate() at ac02464.)
        with open(self.saved, encoding="utf-8") as f:
            data = json.load(f)
        del data["per_query"]["success@5"]
        partial = self.write("partial.json", data)
        gate, lines = self.gate(self.strong, 1, "--gate", "significant", baseline=partial)
        self.assertEqual(gate["metrics"]["success@5"]["verdict"], "regression")
        self.assertNotIn("p_value", gate["metrics"]["success@5"])
        self.assertIn("p_value", gate["metrics"]["recall@5"])
        self.assertIn("REGRESSION success@5: baseline", "\n".join(lines))

    def test_identical_large_run_against_its_own_baseline(self):
        # Regression: see TestBootstrapInterval.test_all_zero_data_above_the_ordinary_bootstrap_limit.
        # More queries than MANY, every delta 0: IndexError.
        with tempfile.TemporaryDirectory() as tmp:
            qrels, run = synthetic(MANY + 10)
            qrels_path, run_path = os.path.join(tmp, "qrels.json"), os.path.join(tmp, "run.json")
            saved = os.path.join(tmp, "saved.json")
            for path, data in ((qrels_path, qrels), (run_path, run)):
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(data, f)
            self.assertEqual(run_main([qrels_path, run_path, "--save-baseline", saved])[0], 0)
            code, out, err = run_main([qrels_path, run_path, "--baseline", saved, "--resamples", "100"])
        self.assertEqual(code, 0, err)


# === Updating the baseline ===


class TestUpdateBaseline(TempDirMixin, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.baseline = self.write("baseline.json", self.read(BASELINE))

    def test_not_rewritten_when_the_gate_fails(self):
        before = self.read(self.baseline)
        with mock.patch.object(rag_eval, "write_atomically", wraps=rag_eval.write_atomically) as spy:
            code, out, err = run_main([QRELS, RUN, "--baseline", self.baseline, "--update-baseline"])
        self.assertEqual(code, 1, err)
        self.assertEqual(self.read(self.baseline), before)
        spy.assert_not_called()
        self.assertEqual(os.listdir(self.tmp), ["baseline.json"])

    def test_rewritten_atomically_when_the_gate_passes(self):
        with mock.patch.object(rag_eval, "write_atomically", wraps=rag_eval.write_atomically) as spy:
            code, out, err = run_main([QRELS, RUN, "--baseline", self.baseline, "--update-baseline",
                                       "--max-drop", "0.1"])
        self.assertEqual(code, 0, err)
        spy.assert_called_once()
        self.assertEqual(spy.call_args[0][0], self.baseline)
        self.assertIn(f"rag_eval: note: updated {self.baseline}", err.splitlines())
        updated = rag_eval.read_baseline(self.baseline)
        self.assertEqual(updated.means.keys(), FIXTURE_MEANS.keys())
        for metric, value in FIXTURE_MEANS.items():
            self.assertAlmostEqual(updated.means[metric], value, places=15)
        self.assertEqual(updated.qrels_sha256, rag_eval.qrels_fingerprint(rag_eval.read_qrels(QRELS)))
        self.assertEqual(os.listdir(self.tmp), ["baseline.json"])
        # and the new baseline passes the same run
        self.assertEqual(run_main([QRELS, RUN, "--baseline", self.baseline, "--resamples", R])[0], 0)

    def test_ratchet_keeps_the_better_mean(self):
        old = {"recall@5": 0.6, "mrr@5": 0.51, "ndcg@5": 0.6, "success@5": 0.5}
        path = self.write("ratchet.json", old)
        code, out, err = run_main([QRELS, RUN, "--baseline", path, "--update-baseline", "--ratchet",
                                   "--max-drop", "0.1"])
        self.assertEqual(code, 0, err)
        means = rag_eval.read_baseline(path).means
        # recall max(0.6, 2/3); mrr max(0.51, 1/2); ndcg max(0.6, 0.5095); success max(0.5, 2/3)
        self.assertAlmostEqual(means["recall@5"], max(0.6, 2 / 3), places=15)
        self.assertEqual(means["mrr@5"], max(0.51, 1 / 2))
        self.assertEqual(means["ndcg@5"], max(0.6, FIXTURE_MEANS["ndcg@5"]))
        self.assertAlmostEqual(means["success@5"], max(0.5, 2 / 3), places=15)
        # without --ratchet the new means replace the old ones, lower or not
        path = self.write("plain.json", old)
        self.assertEqual(run_main([QRELS, RUN, "--baseline", path, "--update-baseline", "--max-drop", "0.1"])[0], 0)
        self.assertEqual(rag_eval.read_baseline(path).means["mrr@5"], 1 / 2)

    def test_needs_a_baseline(self):
        self.assert_error([QRELS, RUN, "--update-baseline"], ["--update-baseline"])
        self.assert_error([QRELS, RUN, "--baseline-run", RUN, "--update-baseline"])
        self.assert_error([QRELS, RUN, "--baseline", self.baseline, "--ratchet"], ["--ratchet"])


# === --ci ===


class TestIntervals(TempDirMixin, unittest.TestCase):
    def test_synthetic(self):
        qrels, run = synthetic(200)
        qrels_path, run_path = self.write("qrels.json", qrels), self.write("run.json", run)
        report, _ = self.gate_report([qrels_path, run_path, "--ci", "--resamples", R, "--k", "3,5"], 0)
        self.assertEqual(set(report["intervals"]), set(report["mean"]))
        hits = {k: sum(1 for ranking in run.values() if is_hit(ranking, k)) for k in (3, 5)}
        for metric, (low, high) in report["intervals"].items():
            with self.subTest(metric):
                mean = report["mean"][metric]
                self.assertLessEqual(low, mean)
                self.assertGreaterEqual(high, mean)
                self.assertLess(low, high)
                if metric.startswith("success@"):
                    k = int(metric.split("@")[1])
                    self.assertEqual(mean, hits[k] / 200)
                    self.assertEqual([low, high], list(rag_eval.clopper_pearson(hits[k], 200)))

    def test_fixtures(self):
        report, _ = self.gate_report([QRELS, RUN, "--ci", "--resamples", R, "--digits", "6"], 0)
        self.assertEqual(set(report["intervals"]), set(FIXTURE_MEANS))
        # success@5: 2 of 3 queries
        self.assertEqual(report["intervals"]["success@5"], list(rag_eval.clopper_pearson(2, 3)))
        # mrr@5 takes 1/2, 0, 1: a bootstrap mean lies between 0 and 1
        low, high = report["intervals"]["mrr@5"]
        self.assertTrue(0 <= low <= 0.5 <= high <= 1, (low, high))
        # recall@5 takes 1, 0, 1 (mean 2/3): the wild bootstrap's highest resample is 2/3 + (1/3 + 2/3 + 1/3) / 3
        # = 10/9, and its interval is symmetric; a mean of recall cannot pass 1, so the interval stops there
        self.assertEqual(report["intervals"]["recall@5"][1], 1.0)
        self.assertGreater(rag_eval.bootstrap_interval([1.0, 0.0, 1.0], 500).high, 1.0)

    def test_mean_intervals_api(self):
        qrels, run = synthetic(60)
        result = rag_eval.evaluate(qrels, run, 5)
        intervals = rag_eval.mean_intervals(result, 300, seed=1)
        self.assertEqual(intervals, rag_eval.mean_intervals(result, 300, seed=1))
        hits = sum(1 for ranking in run.values() if is_hit(ranking))
        self.assertEqual(intervals["success@5"], rag_eval.clopper_pearson(hits, 60))
        for metric, (low, high) in intervals.items():
            self.assertLessEqual(low, result["mean"][metric])
            self.assertGreaterEqual(high, result["mean"][metric])



# === Found in review ===


class TestReviewRegressions(TempDirMixin, unittest.TestCase):
    """Each pins a bug a code review found; the comment says what went wrong."""

    def test_a_floor_equal_to_the_mean_passes(self):
        # recall@5 per query: 0/1, 0/1, 3/5; the mean (0 + 0 + 0.6) / 3 is 0.19999999999999998 in floats
        qrels = self.write("q.json", {"q1": {"f": 1}, "q2": {"g": 1}, "q3": {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}})
        run = self.write("r.json", {"q1": ["a"], "q2": ["b"], "q3": ["a", "b", "c", "x", "y"]})
        report, _ = self.gate_report([qrels, run, "--measures", "recall", "--min", "recall@5=0.2"], 0)
        self.assertEqual(report["gate"]["floors"]["recall@5"]["verdict"], "pass")

    def test_ratchet_from_a_flat_baseline_keeps_no_mismatched_scores(self):
        # The old mean of recall@5 (0.68) beats the new one (2/3): it is kept, without per-query scores,
        # since a flat baseline has none and the new run's would not average to 0.68.
        path = self.write("flat.json", {"recall@5": 0.68, "mrr@5": 0.4, "ndcg@5": 0.5, "success@5": 0.6})
        code, _, err = run_main([QRELS, RUN, "--baseline", path, "--update-baseline", "--ratchet"])
        self.assertEqual(code, 0, err)
        saved = rag_eval.read_baseline(path)
        self.assertEqual(saved.means["recall@5"], 0.68)
        self.assertNotIn("recall@5", saved.per_query)
        for metric in ("mrr@5", "ndcg@5", "success@5"):  # new means, with the new run's per-query scores
            scores = saved.per_query[metric]
            self.assertAlmostEqual(saved.means[metric], math.fsum(scores.values()) / len(scores), places=12)

    def test_ratchet_refuses_means_made_on_other_judgments(self):
        saved = self.path("saved.json")
        self.assertEqual(run_main([QRELS, RUN, "--save-baseline", saved])[0], 0)
        qrels = self.write("q.json", {"q1": {"refund-policy#2": 2}, "q2": {"sla-uptime#1": 2},
                                      "q3": {"sso-setup#4": 2}, "q4": {"pricing#3": 0}})
        self.assert_error([qrels, RUN, "--baseline", saved, "--allow-qrels-change", "--update-baseline", "--ratchet"],
                          ["--ratchet"])

    def test_an_update_keeps_or_names_the_metrics_it_did_not_score(self):
        # Scored now: recall@5 and mrr@5 only.  --ratchet keeps the other two as they were, with their
        # per-query scores (a flat baseline gates every metric it has, so it cannot get here); a plain
        # update drops them and says so.
        saved = self.path("saved.json")
        self.assertEqual(run_main([QRELS, RUN, "--save-baseline", saved])[0], 0)
        before = rag_eval.read_baseline(saved)
        code, _, err = run_main([QRELS, RUN, "--baseline", saved, "--update-baseline", "--ratchet",
                                 "--measures", "recall,mrr"])
        self.assertEqual(code, 0, err)
        after = rag_eval.read_baseline(saved)
        self.assertEqual(after.means, before.means)
        self.assertEqual(after.per_query, before.per_query)
        self.assertIn(f"rag_eval: note: updated {saved} (ratchet)", err.splitlines())
        code, _, err = run_main([QRELS, RUN, "--baseline", saved, "--update-baseline", "--measures", "recall,mrr"])
        self.assertEqual(code, 0, err)
        self.assertEqual(set(rag_eval.read_baseline(saved).means), {"recall@5", "mrr@5"})
        self.assertIn(f"rag_eval: note: updated {saved}; no longer in it (not scored now): success@5, ndcg@5",
                      err.splitlines())

    def test_regressions_refuses_nan(self):
        for current, baseline in [({"recall@5": 0.1}, {"recall@5": float("nan")}),
                                  ({"recall@5": float("nan")}, {"recall@5": 0.5})]:
            with self.subTest(current=current, baseline=baseline), self.assertRaises(ValueError):
                rag_eval.regressions(current, baseline, 0.02)

    def test_conventions_k_must_be_a_list(self):
        saved = self.path("saved.json")
        self.assertEqual(run_main([QRELS, RUN, "--save-baseline", saved])[0], 0)
        with open(saved) as f:
            record = json.load(f)
        for bad in (5, [[5]], [], [0], None):
            record["conventions"]["k"] = bad
            path = self.write("bad.json", record)
            with self.subTest(k=bad):
                self.assert_error([QRELS, RUN, "--baseline", path], ["conventions.k"])

    def test_unjudged_with_judged_only_reads_stdin_once(self):
        # Issue 11 (item 6): the run is read once, so standard input works as a file does.
        from_file = self.path("file.jsonl")
        self.assertEqual(run_main([QRELS, RUN, "--judged-only", "--unjudged", from_file])[0], 0)
        stdin = io.TextIOWrapper(io.BufferedReader(io.BytesIO(self.read(RUN))))
        with mock.patch.object(sys, "stdin", stdin):
            code, out, err = run_main([QRELS, "-", "--judged-only", "--unjudged", self.path("w.jsonl")])
        self.assertEqual(code, 0, err)
        self.assertEqual(self.read(self.path("w.jsonl")), self.read(from_file))
        self.assertTrue(self.read(from_file))

    def test_abstain_below_needs_scores(self):
        # q4 has no relevant document; a ranked list has no score to compare with the threshold
        self.assert_error([QRELS, RUN, "--abstain-below", "0.5"], [RUN, "--abstain-below"])


class TestLeanGateAndReports(TempDirMixin, unittest.TestCase):
    """Issue 12 (lean core, baseline/gate and reporting): what the rewritten helpers must keep doing."""

    def test_natural_order_of_ids(self):
        # runs of ASCII digits compare as numbers (q2 before q10); equal keys fall back to the text (q01 < q1);
        # a digit of another script ("²") is a character like any other, after every ASCII number
        ids = ["q10", "q\u00b2", "q2", "q1", "a", "q01", "q1a", "q1\n"]
        self.assertEqual(sorted(ids, key=rag_eval._natural_order),
                         ["a", "q01", "q1", "q1\n", "q1a", "q2", "q10", "q\u00b2"])

    def test_label_changes_from_digests(self):
        # beyond MAX_STORED_JUDGMENTS only a digest and a count per query are stored: which queries changed, not how
        before = {"q1": {"a": 1, "b": 0}, "q2": {"c": 2}, "q3": {"d": 1}}
        with mock.patch.object(rag_eval, "MAX_STORED_JUDGMENTS", 1):
            stored = rag_eval.stored_judgments(before)
        self.assertEqual(set(stored), {"digests"})
        changes = rag_eval.label_changes(stored, {"q1": {"a": 2, "b": 0}, "q2": {"c": 2}, "q4": {"e": 1}})
        self.assertEqual(changes, {"stored": "digests", "queries": {"q1": {"judged": [2, 2]}},
                                   "counts": {"queries_added": 1, "queries_changed": 1, "queries_removed": 1},
                                   "queries_added": ["q4"], "queries_removed": ["q3"]})
        whole = rag_eval.label_changes(rag_eval.stored_judgments(before), {"q1": {"a": 2}, "q2": {"c": 2, "x": 1}})
        self.assertEqual(whole["counts"], {"added": 1, "queries_added": 0, "queries_changed": 2, "queries_removed": 1,
                                           "regraded": 1, "removed": 1})
        self.assertEqual(whole["queries"], {"q1": {"added": {}, "removed": {"b": 0}, "regraded": {"a": [1, 2]}},
                                            "q2": {"added": {"x": 1}, "removed": {}, "regraded": {}}})

    def test_an_extended_baseline_keeps_its_meta_and_judgments(self):
        saved = self.path("saved.json")
        self.assertEqual(run_main([QRELS, RUN, "--save-baseline", saved, "--meta", "embedder=bge"])[0], 0)
        baseline = rag_eval.read_baseline(saved)
        self.assertEqual(baseline.meta["embedder"], "bge")
        self.assertEqual(baseline.judgments, rag_eval.stored_judgments(rag_eval.read_qrels(QRELS)))
        with open(saved) as f:
            record = json.load(f)
        del record["meta"], record["judgments"]
        older = rag_eval.read_baseline(self.write("older.json", record))
        self.assertEqual((older.meta, older.judgments), (None, None))
        self.assertEqual(older.per_query, baseline.per_query)
        for key, bad in (("meta", {"a=b": "c"}), ("judgments", {"digests": {"q1": {"judged": "3"}}})):
            with self.subTest(key=key):
                path = self.write("bad.json", dict(record, **{key: bad}))
                self.assert_error([QRELS, RUN, "--baseline", path], [path, key])

    def test_openmetrics_text_exactly(self):
        # label values escape backslash, quote and newline; a family without samples is left out (no delta of mrr)
        tag = 'a"b\\c'
        report = {"mean": {"recall@5": 0.5, "mrr@5": 0.25},
                  "slices": {tag: {"queries": 1, "mean": {"recall@5": 0.125, "mrr@5": None}}},
                  "gate": {"passed": False, "metrics": {f"{tag}:recall@5": {"baseline": 0.5, "delta": -0.375},
                                                        "mrr@5": {"baseline": 0.5, "delta": None}}}}
        self.assertEqual(rag_eval._openmetrics_text(report), "\n".join([
            "# TYPE rag_eval_mean gauge", "# HELP rag_eval_mean Mean of the measure over the scored queries.",
            'rag_eval_mean{metric="mrr@5"} 0.25', 'rag_eval_mean{metric="recall@5"} 0.5',
            "# TYPE rag_eval_slice_mean gauge",
            "# HELP rag_eval_slice_mean Mean of the measure over the scored queries of a slice.",
            'rag_eval_slice_mean{slice="a\\"b\\\\c",metric="recall@5"} 0.125',
            "# TYPE rag_eval_baseline gauge", "# HELP rag_eval_baseline The baseline's mean of the measure.",
            'rag_eval_baseline{metric="recall@5",slice="a\\"b\\\\c"} 0.5', 'rag_eval_baseline{metric="mrr@5"} 0.5',
            "# TYPE rag_eval_delta gauge", "# HELP rag_eval_delta Mean now minus the baseline's mean.",
            'rag_eval_delta{metric="recall@5",slice="a\\"b\\\\c"} -0.375',
            "# TYPE rag_eval_passed gauge", "# HELP rag_eval_passed 1 when the gate passed, 0 when it did not (a regression, or inconclusive).",
            "rag_eval_passed 0.0", "# EOF", ""]))

    def test_junit_counts_failures_in_both_elements(self):
        from xml.etree import ElementTree

        code, _, err = run_main([QRELS, RUN, "--baseline", BASELINE, "--min", "ndcg@5=0.9", "--min", "mrr@5=0.1",
                                 "--junit", self.path("j.xml")])
        self.assertEqual(code, 1, err)
        suites = ElementTree.fromstring(self.read(self.path("j.xml")))
        suite = suites.find("testsuite")
        # baseline.json gates 4 metrics (recall@5 and mrr@5 regress); floors: ndcg@5 below, mrr@5 met
        for element in (suites, suite):
            self.assertEqual((element.get("tests"), element.get("failures")), ("6", "3"))
        failed = sorted(case.get("name") for case in suite if case.find("failure") is not None)
        self.assertEqual(failed, ["floor ndcg@5", "mrr@5", "recall@5"])
        self.assertEqual(run_main([QRELS, RUN, "--junit", self.path("none.xml")])[0], 0)
        cases = ElementTree.fromstring(self.read(self.path("none.xml"))).find("testsuite")
        self.assertEqual([(case.get("name"), case.find("system-out").text) for case in cases],
                         [("scored", "pass: 3 queries scored, no baseline or floor to gate")])

    def test_write_atomically_without_commit_leaves_the_target_until_renamed(self):
        target = self.write("target.txt", "old\n")
        os.symlink("target.txt", self.path("link.txt"))
        temporary, replaced = rag_eval.write_atomically(self.path("link.txt"), "new\n", commit=False)
        self.assertEqual(replaced, os.path.realpath(target))  # the link's target, not the link
        self.assertEqual((self.read(target), self.read(temporary)), (b"old\n", b"new\n"))
        os.replace(temporary, replaced)
        self.assertTrue(os.path.islink(self.path("link.txt")))
        self.assertEqual(sorted(os.listdir(self.tmp)), ["link.txt", "target.txt"])
        self.assertEqual(self.read(self.path("link.txt")), b"new\n")
        with self.assertRaisesRegex(rag_eval.RagEvalError, "not a regular file"):
            rag_eval.write_atomically(self.tmp, "x")

    def test_calibration_in_table_and_markdown(self):
        base = self.path("base.json")
        self.assertEqual(run_main([QRELS, RUN, "--save-baseline", base])[0], 0)
        argv = [QRELS, RUN, "--baseline", base, "--calibrate", "10", "--resamples", "200"]
        table, markdown = (run_main(argv + ["--format", fmt])[1] for fmt in ("table", "markdown"))
        first = "10 simulations per scenario on 3 queries resampled against themselves, rule 'drop', maxt, alpha 0.05"
        self.assertIn(f"\n\ncalibration: {first}\n  a/a (false fails = regression): regression ", table)
        self.assertIn(f"\n\nCalibration: {first}:\n\n- a/a (false fails = regression): regression ", markdown)
        self.assertIn("\n- drop 2x tolerance (power = regression): ", markdown)


class TestBaselineAndGateEdges(TempDirMixin, unittest.TestCase):
    """The refusals and edge cases of baselines, locks, comparisons and calibration, each checked by its words."""

    def extended(self):
        saved = self.path("saved.json")
        self.assertEqual(run_main([QRELS, RUN, "--save-baseline", saved])[0], 0)
        with open(saved) as f:
            return json.load(f)

    def test_malformed_extended_baselines_are_refused_by_name(self):
        record = self.extended()
        digests = {"digests": {"q1": {"judged": 2, "sha256": "0" * 16}}}
        self.assertEqual(rag_eval.read_baseline(self.write("d.json", dict(record, judgments=digests))).judgments,
                         digests)
        for change, words in (({"per_query": {"recall@5": [0.5]}}, "per_query must map metric -> {query: value}"),
                              ({"conventions": []}, "conventions must be an object and qrels_sha256 a string"),
                              ({"qrels_sha256": 7}, "conventions must be an object and qrels_sha256 a string"),
                              ({"mean": [0.5]}, "expected an object of name -> number, got a list"),
                              ({"meta": ["a"]}, "meta must be an object of key -> string, got a list")):
            with self.subTest(change=change):
                path = self.write("bad.json", dict(record, **change))
                with self.assertRaises(rag_eval.RagEvalError) as caught:
                    rag_eval.read_baseline(path)
                self.assertEqual(caught.exception.detail, words)

    def test_significant_gains_of_no_gate_is_none(self):
        self.assertEqual((rag_eval.significant_gains(None), rag_eval.significant_gains({})), ([], []))

    @unittest.skipUnless(os.name == "posix", "fcntl.flock")
    def test_lock_refusals_and_a_lock_file_removed_by_another(self):
        import fcntl

        baseline = self.write("b.json", {"recall@5": 0.5})
        lock_path = self.path(".b.json.lock")
        with rag_eval._locked(baseline, 0):
            self.assertTrue(os.path.exists(lock_path))
            os.unlink(lock_path)  # removed by someone else: letting go is still quiet
        self.assertEqual(os.listdir(self.tmp), ["b.json"])
        with mock.patch.dict(sys.modules, fcntl=None):  # no fcntl (Windows): no lock, no lock file
            with rag_eval._locked(baseline, 0):
                self.assertEqual(os.listdir(self.tmp), ["b.json"])
        with self.assertRaisesRegex(rag_eval.RagEvalError, "cannot lock: No such file or directory"):
            with rag_eval._locked(self.path("no/such/b.json"), 0):
                pass
        with mock.patch.object(fcntl, "flock", side_effect=OSError(errno.ENOLCK, "No locks available")):
            with self.assertRaisesRegex(rag_eval.RagEvalError, "cannot lock: No locks available"):
                with rag_eval._locked(baseline, 0):
                    pass
        held = os.open(lock_path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)
            # held all along: the waiter tries again until its time is up, whatever the machine's speed
            with self.assertRaisesRegex(rag_eval.RagEvalError, "its lock .* was still held after 0.1 s"):
                with rag_eval._locked(baseline, 0.1):
                    pass
        finally:
            os.close(held)

    def test_compare_runs_refuses_a_name_twice_and_a_run_lacking_a_metric(self):
        qrels, run = rag_eval.read_qrels(QRELS), rag_eval.read_run(RUN)
        five, three = rag_eval.evaluate(qrels, run, 5), rag_eval.evaluate(qrels, run, 3)
        for results, words in (([("a", five), ("a", five)], "two runs are named 'a'"),
                               ([("a", five), ("b", three)], "run 'b' has no scores for recall@5")):
            with self.subTest(words=words), self.assertRaises(rag_eval.RagEvalError) as caught:
                rag_eval.compare_runs(results, resamples=10)
            self.assertEqual(caught.exception.detail, words)

    def test_calibrate_needs_per_query_scores_of_two_queries(self):
        for baseline, words in ((rag_eval.Baseline({"recall@5": 0.5}), "--calibrate needs per-query scores"),
                                (rag_eval.Baseline({"recall@5": 0.5}, {"recall@5": {"q1": 0.5}}),
                                 "--calibrate needs at least 2 queries scored on every metric")):
            with self.subTest(words=words), self.assertRaisesRegex(rag_eval.RagEvalError, "^" + words):
                rag_eval.calibrate(baseline, simulations=1)

    def test_gate_context_lines_of_digests_and_split_deltas(self):
        stored = {"digests": {"q2": {"judged": 1, "sha256": "0"}, "q1": {"judged": 3, "sha256": "0"}}}
        changes = rag_eval.label_changes(stored, {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}})
        split = rag_eval.delta_split({"mrr@5": 0.5}, {"mrr@5": 0.625}, {"mrr@5": 0.75})
        text = rag_eval._gate_context_text({"label_changes": changes, "delta_split": split}, 3)
        self.assertEqual(text, "\nlabels changed since the baseline: 2 queries changed (stored as digests) "
                               "(q1 3 -> 1 judged, q2 1 -> 1 judged); queries added 1, removed 0"
                               # -0.25 = (0.625 - 0.75) + (0.5 - 0.625)
                               "\ndelta = labels + system: mrr@5 -0.250 = -0.125 + -0.125")


class TestBaselineChecksAndLocks(TempDirMixin, unittest.TestCase):
    """A baseline's names and values are checked with their place named; a fall of exactly the allowed
    drop is no fall; large judgments are stored as 16-character digests; locking and writing leave the
    process as they found it (its umask, its open files)."""

    def read_error(self, data):
        with self.assertRaises(rag_eval.RagEvalError) as caught:
            rag_eval.read_baseline(self.write("b.json", data))
        return str(caught.exception)

    def test_names_are_metrics_spelled_once(self):
        b = self.path("b.json")
        self.assertEqual(self.read_error({"recall@5": 0.5, "foo": 0.3}),
                         f"{b}: baseline names 'foo', which is not a metric (measure@k, or slice:measure@k)")
        # R@5 is recall@5 in another tool's spelling: two spellings of one metric
        self.assertEqual(self.read_error({"recall@5": 0.5, "R@5": 0.4}),
                         f"{b}: baseline names recall@5 twice (in two spellings)")
        self.assertEqual(rag_eval.read_baseline(self.write("b.json", {"R@5": 0.4})).means, {"recall@5": 0.4})

    def test_a_bad_per_query_value_names_its_metric(self):
        extended = {"format": rag_eval.BASELINE_FORMAT, "mean": {"recall@5": 0.5},
                    "per_query": {"recall@5": {"q1": 0.5, "q2": "x"}}, "conventions": {"k": [5]}, "qrels_sha256": "0"}
        self.assertEqual(self.read_error(extended),
                         f"{self.path('b.json')}: recall@5: baseline value of 'q2' must be a finite number, got 'x'")

    def test_a_fall_of_exactly_the_allowed_drop_is_no_fall(self):
        epsilon = rag_eval.DROP_EPSILON
        self.assertEqual(rag_eval.regressions({"m": 0.0}, {"m": epsilon}, 0), {})  # fell by epsilon exactly
        self.assertEqual(rag_eval.regressions({"m": 0.0}, {"m": 2 * epsilon}, 0), {"m": (2 * epsilon, 0.0)})
        self.assertEqual(rag_eval.regressions({"m": 0.25}, {"m": 0.5, "gone": 0.5}, 0.25),  # 0.5 - 0.25 = 0.25: allowed
                         {"gone": (0.5, None)})
        for bad in (-0.01, float("nan"), float("inf")):
            with self.subTest(max_drop=bad):
                with self.assertRaisesRegex(rag_eval.RagEvalError, "^max drop must be a non-negative number, got "):
                    rag_eval.regressions({"m": 0.5}, {"m": 0.5}, bad)

    def test_large_judgments_are_stored_as_digests_of_16_characters(self):
        per_query = rag_eval.MAX_STORED_JUDGMENTS // 2 + 1  # two queries: one judgment too many to store
        qrels = {qid: {f"{qid}-d{i}": i % 3 for i in range(per_query)} for qid in ("q1", "q2")}
        stored = rag_eval.stored_judgments(qrels)
        self.assertEqual(stored, {"digests": {qid: {"judged": per_query, "sha256": rag_eval.qrels_fingerprint(docs)[:16]}
                                              for qid, docs in qrels.items()}})
        self.assertEqual({len(entry["sha256"]) for entry in stored["digests"].values()}, {16})
        small = {"q1": {"b": 1, "a": 0}}
        self.assertEqual(rag_eval.stored_judgments(small), {"qrels": {"q1": {"a": 0, "b": 1}}})

    def test_changed_judgments_name_both_digests(self):
        saved = self.path("b.json")
        self.assertEqual(run_main([QRELS, RUN, "--save-baseline", saved])[0], 0)
        qrels = json.loads(self.read(QRELS))
        qrels["q1"]["refund-policy#3"] = 2
        changed = self.write("changed.json", qrels)
        old, new = json.loads(self.read(saved))["qrels_sha256"], rag_eval.qrels_fingerprint(qrels)
        code, out, err = run_main([changed, RUN, "--baseline", saved])
        self.assertEqual((code, out), (2, ""), err)
        self.assertEqual(err, f"{ERROR_PREFIX}{saved}: not comparable, made with other conventions or judgments: qrels: "
                              f"baseline sha256 {old[:12]}..., now {new[:12]}... (save a new baseline in the change that "
                              "earns it, or accept new judgments with --allow-qrels-change)\n")

    @unittest.skipUnless(os.name == "posix", "POSIX permissions")
    def test_writing_a_new_file_keeps_the_umask(self):
        for umask, mode in ((0o027, 0o640), (0o022, 0o644)):  # rw-r----- and rw-r--r--: no execute bit
            old = os.umask(umask)
            try:
                rag_eval.write_atomically(self.path(f"new{umask:o}.txt"), "x\n")
                self.assertEqual(os.umask(umask), umask)  # still the process's umask
            finally:
                os.umask(old)
            self.assertEqual(os.stat(self.path(f"new{umask:o}.txt")).st_mode & 0o777, mode)

    @unittest.skipUnless(os.name == "posix", "fcntl.flock")
    def test_a_long_name_and_a_held_lock(self):
        import fcntl

        # a name over 60 characters: its lock file keeps the first 47, then "~" and 12 hex digits of its sha256
        name = "b" * 230 + ".json"
        baseline = self.write(name, {"recall@5": 0.5})
        lock_path = self.path(f".{'b' * 47}~{hashlib.sha256(name.encode()).hexdigest()[:12]}.lock")
        with mock.patch.object(os, "open", wraps=os.open) as opened, mock.patch.object(os, "close", wraps=os.close) as closed:
            with rag_eval._locked(baseline, 0):
                self.assertEqual(sorted(os.listdir(self.tmp)), sorted([name, os.path.basename(lock_path)]))
        self.assertEqual((opened.call_count, closed.call_count), (1, 1))  # closing the lock file let the lock go
        held = os.open(lock_path, os.O_RDWR | os.O_CREAT)
        self.addCleanup(os.close, held)
        fcntl.flock(held, fcntl.LOCK_EX)
        # the clock is simulated: 0.0, 0.04, 0.08, ... so the waiter tries 3 times before 0.1 s is up;
        # every file it opened is closed
        ticks = itertools.count(0.0, 0.04)
        with mock.patch("time.monotonic", lambda: next(ticks)), mock.patch("time.sleep") as slept, \
                mock.patch.object(os, "open", wraps=os.open) as opened, mock.patch.object(os, "close", wraps=os.close) as closed:
            with self.assertRaisesRegex(rag_eval.RagEvalError, "was still held after 0.1 s"):
                with rag_eval._locked(baseline, 0.1):
                    pass
        self.assertEqual((opened.call_count, closed.call_count, slept.call_count), (3, 3, 2))

    def test_an_extended_baseline_lacks_what_it_needs(self):
        self.assertEqual(self.read_error({"format": rag_eval.BASELINE_FORMAT, "mean": {"recall@5": 0.5}}),
                         f"{self.path('b.json')}: extended baseline lacks per_query, conventions, qrels_sha256")

    def test_new_metrics_of_an_extended_baseline_and_a_metric_it_cannot_gate(self):
        saved = self.path("b.json")
        self.assertEqual(run_main([QRELS, RUN, "--save-baseline", saved, "--measures", "recall,mrr"])[0], 0)
        baseline = rag_eval.read_baseline(saved)
        result = rag_eval.evaluate(json.loads(self.read(QRELS)), json.loads(self.read(RUN)), 5)
        report = rag_eval.gate(result, baseline)
        self.assertEqual(report["new"], ["ndcg@5", "success@5"])  # measured now, not in the baseline
        self.assertNotIn("new", rag_eval.gate(result, baseline._replace(conventions=None)))  # flat: no conventions
        # a slice's ndcg@5: the baseline has no slice means and no per-query ndcg@5 to take it from
        settings = rag_eval.GateSettings(tolerances={"a:ndcg@5": rag_eval.Tolerance(0.0)})
        with self.assertRaisesRegex(rag_eval.RagEvalError,
                                    "^cannot gate a:ndcg@5: the baseline has neither that mean nor per-query scores$"):
            rag_eval.gate(result, baseline, settings, {"q1": ["a"], "q3": ["a"]})
        settings = rag_eval.GateSettings(tolerances={"a:mrr@5": rag_eval.Tolerance(0.0)})  # mrr@5: from its scores
        self.assertEqual(rag_eval.gate(result, baseline, settings, {"q1": ["a"], "q3": ["a"]})["metrics"]["a:mrr@5"]["baseline"],
                         (1 / 2 + 1 / 1) / 2)  # q1's first relevant at rank 2, q3's at rank 1

    def test_the_spread_of_two_deltas(self):
        # deltas +0.5 and -0.5: mean 0, sample standard deviation sqrt((0.25 + 0.25) / (2 - 1))
        comparison = rag_eval.compare_paired("m", {"q1": 0.5, "q2": 0.5}, {"q1": 1.0, "q2": 0.0})
        self.assertEqual(comparison.spread, math.sqrt(0.5))
        self.assertIsNone(rag_eval.compare_paired("m", {"q1": 0.5}, {"q1": 1.0}).spread)

    def test_two_runs_of_one_name_name_the_repeated_one(self):
        result = rag_eval.evaluate(json.loads(self.read(QRELS)), json.loads(self.read(RUN)), 5)
        with self.assertRaisesRegex(rag_eval.RagEvalError, "^two runs are named 'b'$"):
            rag_eval.compare_runs([("a", result), ("b", result), ("b", result)], resamples=10)

    def test_a_saved_baseline_is_sorted_json_indented_by_two(self):
        saved = self.path("b.json")
        self.assertEqual(run_main([QRELS, RUN, "--save-baseline", saved])[0], 0)
        text = self.read(saved).decode("utf-8")
        self.assertEqual(text, json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n")


if __name__ == "__main__":
    unittest.main()
