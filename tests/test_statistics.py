"""Statistics: the sign-flip test, the wild bootstrap, Clopper-Pearson, Holm,
power and queries needed, paired comparisons, and the ways of summing random
halves.

Each is checked against an independent computation: a brute-force
enumeration of sign patterns, a textbook percentile bootstrap (Efron &
Tibshirani), normal theory, exact binomial tails from ``math.comb``.
"""

import itertools
import math
import random
import statistics
import unittest
import unittest.mock
from fractions import Fraction
from statistics import NormalDist
from unittest import mock

import rag_eval


# The shipped baseline: {"recall@5": 0.70, "success@5": 0.6667, "mrr@5": 0.55, "ndcg@5": 0.52}
# Falls: recall 0.70 - 2/3 = 0.0333, mrr 0.55 - 1/2 = 0.05, ndcg 0.52 - 0.5095 = 0.0105,
# success 0.6667 - 2/3 = 0.00003.
MANY = 250  # queries: above it, rag_eval once switched to a second bootstrap; sizes around it stay tested


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
        for deltas in ([], [0.0], [0.0] * 7, [0.0] * (rag_eval._EXACT_SIGN_FLIP_MAX + 10)):
            with self.subTest(n=len(deltas)):
                self.assertEqual(rag_eval.sign_flip_test(deltas, 100, random.Random(0)), (1.0, True))

    def test_exact_up_to_the_limit_of_differing_queries(self):
        limit = rag_eval._EXACT_SIGN_FLIP_MAX
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
        deltas = [rng.choice([-0.5, -0.25, 0.25, 0.5, 1.0]) for _ in range(rag_eval._EXACT_SIGN_FLIP_MAX + 9)]
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
            with mock.patch.object(rag_eval, "_EXACT_SIGN_FLIP_MAX", 4):
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
                got = rag_eval._clopper_pearson(x, n)
                low_places, high_places = places if isinstance(places, tuple) else (places, places)
                self.assertEqual(round(got.low, low_places), low)
                self.assertEqual(round(got.high, high_places), high)
        self.assertAlmostEqual(rag_eval._clopper_pearson(0, 10).high, 1 - 0.025 ** (1 / 10), places=12)
        self.assertAlmostEqual(rag_eval._clopper_pearson(10, 10).low, 0.025 ** (1 / 10), places=12)

    def test_defining_property(self):
        # low: P(X >= x | n, low) = 0.025; high: P(X <= x | n, high) = 0.025
        for n in list(range(1, 21)) + [37, 100, 250]:
            for x in sorted({0, 1, n // 3, n // 2, n - 1, n} & set(range(n + 1))):
                low, high = rag_eval._clopper_pearson(x, n)
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
        low, high = rag_eval._clopper_pearson(3, 20, confidence=0.90)  # tails of 0.05
        self.assertAlmostEqual(binomial_at_least(3, 20, low), 0.05, delta=1e-9)
        self.assertAlmostEqual(binomial_at_most(3, 20, high), 0.05, delta=1e-9)

    def test_invalid(self):
        for x, n in [(1, 0), (0, 0), (-1, 5), (6, 5)]:
            with self.subTest(x=x, n=n):
                with self.assertRaises(ValueError):
                    rag_eval._clopper_pearson(x, n)


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
                adjusted = rag_eval._holm(p_values)
                self.assertEqual(set(adjusted), set(expected))
                for name, value in expected.items():
                    self.assertAlmostEqual(adjusted[name], value, places=15)

    def test_monotone_and_at_most_one(self):
        rng = random.Random(12)
        for trial in range(50):
            p_values = {f"m{i}": rng.choice([rng.random(), rng.random() ** 4, 1.0]) for i in range(rng.randint(1, 8))}
            adjusted = rag_eval._holm(p_values)
            with self.subTest(p_values=p_values):
                for name, p in p_values.items():
                    self.assertGreaterEqual(adjusted[name], p)
                    self.assertLessEqual(adjusted[name], 1.0)
                    self.assertLessEqual(adjusted[name], min(1.0, len(p_values) * p) + 1e-15)  # Bonferroni bounds it
                for a, b in itertools.permutations(p_values, 2):
                    if p_values[a] <= p_values[b]:
                        self.assertLessEqual(adjusted[a], adjusted[b])


class TestPower(unittest.TestCase):
    """The sizing of docs/gate.md, "The rule": the bound's width, and the figures that describe the gate's rule."""

    def test_bound_width_formula(self):
        for spread, n, q, reach in [(0.2, 100, 1.66, 1.0), (0.35, 50, 2.6, 1.0), (0.0, 10, 1.83, 1.0), (0.5, 7, 3.0, 4.0)]:
            with self.subTest(spread=spread, n=n):
                a = q * q * reach / (2 * n)
                self.assertAlmostEqual(rag_eval._bound_width(spread, n, q, reach),
                                       a + math.sqrt(a * a + q * q * spread * spread / n), places=14)
        # no query changed: q**2 reach / n, never 0 (the rule of three's 3 / n at q**2 = 3)
        self.assertAlmostEqual(rag_eval._bound_width(None, 100, math.sqrt(3)), 0.03, places=14)

    def test_student_quantiles(self):
        # Student's t quantiles from a table (scipy.stats.t.ppf), within 0.1% from 5 degrees of freedom
        for p, df, exact in [(0.95, 5, 2.0150), (0.95, 9, 1.8331), (0.975, 20, 2.0860), (1 - 0.05 / 8, 49, 2.5933),
                             (0.999, 199, 3.1317), (0.95, 0, NormalDist().inv_cdf(0.95))]:
            with self.subTest(p=p, df=df):
                self.assertAlmostEqual(rag_eval._quantile(p, df), exact, delta=exact * 1e-3)

    def test_figures_move_the_right_way(self):
        resolution, detectable = rag_eval._resolution, rag_eval._detectable_drop
        for spread in (None, 0.1, 0.3):
            with self.subTest(spread=spread):
                self.assertGreater(resolution(spread, 50), resolution(spread, 200))  # more queries resolve more
                self.assertLess(resolution(spread, 200), resolution(spread, 200, tests=8))  # a family costs
                self.assertLess(resolution(spread, 200, alpha=0.1), resolution(spread, 200))
                self.assertLess(resolution(spread, 200, power=0.5), resolution(spread, 200))
                self.assertGreater(detectable(spread, 200, tolerance=0.05), 0.05)  # beyond the tolerance
                self.assertLess(detectable(spread, 200, tolerance=0.05), detectable(spread, 200, tolerance=0.1))
        self.assertLess(resolution(0.1, 200), resolution(0.3, 200))
        self.assertGreater(resolution(0.0, 200), 0)  # no query changed still needs queries

    def test_nothing_to_estimate(self):
        self.assertIsNone(rag_eval._detectable_drop(0.2, 1))
        self.assertIsNone(rag_eval._resolution(0.2, 1))
        self.assertIsNone(rag_eval._queries_needed(0.2, 0.0))
        self.assertEqual(rag_eval._resolution(None, 100), rag_eval._resolution(0.0, 100))

    def test_queries_needed_inverts_resolution(self):
        # queries_needed(s, t) is the smallest n whose resolution is within t
        wrong = []
        for spread in (0.0, 0.05, 0.2, 0.37):
            for tests in (1, 8):
                for n in range(2, 200, 7):
                    found = rag_eval._queries_needed(spread, rag_eval._resolution(spread, n, tests=tests), tests=tests)
                    if found != n:
                        wrong.append((spread, tests, n, found))
        self.assertEqual(wrong, [], "(spread, tests, n, queries_needed)")


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

    def test_exact(self):
        limit = rag_eval._EXACT_SIGN_FLIP_MAX
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


class TestStatistics(unittest.TestCase):
    def test_sign_flip_test_exact(self):
        for deltas, expected in [
            ([0.5, 0.5, 0.5], 2 / 2 ** 3),  # only all-plus and all-minus are as extreme as +1.5
            ([0.5, 0.5, 0.5, 0.0], 2 / 2 ** 3),  # a zero difference carries no sign
            ([0.25, -0.25], 4 / 2 ** 2),  # observed sum 0: every pattern is as extreme
            ([0.5, 0.25], 2 / 2 ** 2),  # +0.75: only (+,+) and (-,-) reach |0.75|
            ([], 1.0),
        ]:
            with self.subTest(deltas=deltas):
                self.assertEqual(rag_eval.sign_flip_test(deltas), (expected, True))

    def test_sign_flip_test_sampled_is_never_zero(self):
        # 20 positive differences of two sizes: 2 of 2**20 patterns as extreme; sampled,
        # p = (1 + hits) / (1 + 100) (one size would be the exact sign test)
        deltas = [0.1] * 10 + [0.2] * 10
        p, exact = rag_eval.sign_flip_test(deltas, 100, random.Random(1))
        self.assertFalse(exact)
        self.assertGreaterEqual(p, 1 / 101)
        self.assertEqual(rag_eval.sign_flip_test(deltas, 100, random.Random(1)), (p, exact))

    def test_clopper_pearson(self):
        # no success in n: upper = 1 - (alpha/2) ** (1/n); all successes: lower = (alpha/2) ** (1/n)
        low, high = rag_eval._clopper_pearson(0, 10)
        self.assertEqual(low, 0.0)
        self.assertAlmostEqual(high, 1 - 0.025 ** (1 / 10), places=12)
        low, high = rag_eval._clopper_pearson(10, 10)
        self.assertAlmostEqual(low, 0.025 ** (1 / 10), places=12)
        self.assertEqual(high, 1.0)

    def test_holm(self):
        # sorted: a 0.01 * 3 = 0.03; c 0.03 * 2 = 0.06; b max(0.06, 0.04 * 1) = 0.06
        adjusted = rag_eval._holm({"a": 0.01, "b": 0.04, "c": 0.03})
        self.assertEqual(set(adjusted), {"a", "b", "c"})
        for name, value in {"a": 3 * 0.01, "c": 2 * 0.03, "b": 2 * 0.03}.items():
            self.assertAlmostEqual(adjusted[name], value, places=15)

    def test_bootstrap_interval(self):
        self.assertEqual(tuple(rag_eval.bootstrap_interval([0.25] * 5)), (0.25, 0.25))
        low, high = rag_eval.bootstrap_interval([0.0, 1.0] * 10)
        self.assertLessEqual(low, 0.5)
        self.assertGreaterEqual(high, 0.5)
        self.assertEqual(rag_eval.bootstrap_interval([0.0, 1.0] * 10), (low, high))  # seeded, repeatable


def thirds_as_measures_give_them(numerators):
    """Deltas of m thirds as after - before of per-query values in thirds (0, 1/3, 2/3, 1):
    1 - 2/3 and 2/3 - 1/3 both mean 1/3, and are two different floats."""
    pairs = {m: [(b + m, b) for b in range(4) if 0 <= b + m <= 3] for m in range(-3, 4)}
    deltas = []
    for index, m in enumerate(numerators):
        after, before = pairs[m][index % len(pairs[m])]
        deltas.append(after / 3 - before / 3)
    return deltas


class TestSampledPIsNeverZero(unittest.TestCase):
    """Kills: the sampled p computed as extreme / resamples (0 when no sample is as extreme)."""

    def test_sign_flip_test(self):
        # 40 positive deltas of two sizes (one size is the exact sign test): only 2 of
        # 2**40 patterns are as extreme, so no sample of 200 hits one and p is its
        # smallest value, 1 / (1 + 200).
        self.assertEqual(rag_eval.sign_flip_test([0.5] * 20 + [0.25] * 20, 200, random.Random(0)), (1 / 201, False))

    def test_compare_paired(self):
        before = {f"q{i:02d}": 1.0 for i in range(40)}
        after = {qid: 0.5 if i % 2 else 0.75 for i, qid in enumerate(before)}  # two sizes: sampled
        comparison = rag_eval.compare_paired("mrr@5", before, after, resamples=300)
        self.assertEqual((comparison.p_value, comparison.exact), (1 / 301, False))

    def test_compare_paired_tests_with_the_metrics_generator(self):
        # One resampling serves the test and the interval: the p of compare_paired
        # is sign_flip_test's with the generator seeded by the metric's name.
        rng = random.Random(31)
        before = {f"q{i:02d}": rng.choice([0.0, 0.25, 0.5, 1.0]) for i in range(60)}
        after = {qid: rng.choice([0.0, 0.25, 0.5, 1.0]) for qid in before}
        comparison = rag_eval.compare_paired("recall@5", before, after, resamples=500, seed=9)
        deltas = [after[qid] - before[qid] for qid in sorted(before)]
        expected = rag_eval.sign_flip_test(deltas, 500, random.Random("rag_eval:9:recall@5"))
        self.assertEqual((comparison.p_value, comparison.exact), expected)


class TestTiesSurviveRounding(unittest.TestCase):
    """Kills: a flipped sum that equals the observed one in arithmetic but not in
    floats (1 - 2/3 against 2/3 - 1/3) counted as less extreme."""

    def test_floats_really_differ(self):
        self.assertNotEqual(1 - 2 / 3, 2 / 3 - 1 / 3)  # the premise: the same third, two floats

    def test_exact_enumeration(self):
        rng = random.Random(13)
        wrong = []
        for n in range(1, 12):
            for _ in range(15):
                numerators = [rng.randint(-3, 3) for _ in range(n)]
                p, exact = rag_eval.sign_flip_test(thirds_as_measures_give_them(numerators))
                if not exact or Fraction(p) != brute_force_p(numerators):
                    wrong.append((numerators, p, float(brute_force_p(numerators))))
        self.assertEqual(wrong, [], "(deltas in thirds, rag_eval's p, enumerated p)")

    def test_sampled_every_pattern_ties_or_exceeds(self):
        # 25 deltas of +-1/3, 13 up and 12 down (observed sum 1/3): any sign pattern
        # sums to an odd number of thirds, so |sum| >= 1/3 always and p = 1 exactly,
        # (1 + R) / (1 + R), even though the floats of 1/3 differ.
        numerators = [1] * 13 + [-1] * 12
        deltas = thirds_as_measures_give_them(numerators)
        self.assertGreater(len(set(map(abs, deltas))), 1)
        self.assertEqual(rag_eval.sign_flip_test(deltas, 400, random.Random(2)), (1.0, False))
        before = {f"q{i:02d}": 0.5 for i in range(len(deltas))}
        after = {qid: 0.5 + delta for qid, delta in zip(sorted(before), deltas)}
        self.assertEqual(rag_eval.compare_paired("recall@5", before, after, resamples=400).p_value, 1.0)

    def test_a_near_tie_that_is_not_one_is_not_counted(self):
        # [1, 1, 1 - 1e-6] flipped to [1, 1, -(1 - 1e-6)] is 1 + 1e-6, short of
        # the observed 3 - 1e-6; only +++ and --- are as extreme: 2 of 8.
        self.assertEqual(rag_eval.sign_flip_test([1.0, 1.0, 1 - 1e-6]), (0.25, True))


class TestPercentileRanks(unittest.TestCase):
    """Kills: the low percentile index off by one (ceil(tail R) instead of ceil(tail R) - 1)."""

    def test_ranks_of_known_means(self):
        # The ceil(0.025 R)-th and ceil(0.975 R)-th smallest of R means 1..R:
        for resamples, low, high in [
            (40, 1, 39),  # 0.025 * 40 = 1, 0.975 * 40 = 39
            (200, 5, 195),
            (1000, 25, 975),
            (10_000, 250, 9750),  # 0.025 * 10_000 is 250.00000000000023 in floats: still rank 250
            (10, 1, 10),  # ceil(0.25) = 1, ceil(9.75) = 10
            (1, 1, 1),
        ]:
            means = list(range(1, resamples + 1))
            random.Random(resamples).shuffle(means)
            with self.subTest(resamples=resamples):
                self.assertEqual(tuple(rag_eval._percentile_interval(means, 0.95)), (low, high))
        means = list(range(1, 101))
        self.assertEqual(tuple(rag_eval._percentile_interval(means, 0.90)), (5, 95))

    def test_bootstrap_of_two_values(self):
        # Values 0 and 1 (mean 1/2, distances -+1/2): each resample's mean is
        # 1/2 + (s1 * -1/2 + s2 * 1/2) / 2, that is 0, 1/2 or 1 with chances 1/4,
        # 1/2, 1/4: at R = 10_000 the 250th smallest is 0 and the 9750th is 1.
        self.assertEqual(tuple(rag_eval.bootstrap_interval([0.0, 1.0], 10_000, random.Random(4))), (0.0, 1.0))


class TestBootstrapIsTheWildBootstrap(unittest.TestCase):
    """The interval is the percentile interval of mean + sum(signs * (values - mean)) / n:
    checked by enumerating every sign pattern for a few values (no sampling at all)."""

    def test_distribution_by_enumeration(self):
        values = [0.0, 0.25, 1.0, 1.0]  # mean 9/16; distances -9/16, -5/16, 7/16, 7/16
        mean = Fraction(9, 16)
        outcomes = sorted(mean + sum(s * (Fraction(v) - mean) for s, v in zip(signs, values)) / len(values)
                          for signs in itertools.product((1, -1), repeat=len(values)))
        # 16 equally likely means; 50,000 resamples put some 3,125 on each, so the
        # 2.5% and 97.5% points are the smallest and largest pattern's means.
        low, high = rag_eval.bootstrap_interval(values, 50_000, random.Random(5))
        self.assertEqual((Fraction(low), Fraction(high)), (outcomes[0], outcomes[-1]))
        # 9/16 -+ (9 + 5 + 7 + 7) / 16 / 4 = 9/16 -+ 7/16
        self.assertEqual((outcomes[0], outcomes[-1]), (Fraction(1, 8), Fraction(1)))


class TestClopperPearsonAtLargeN(unittest.TestCase):
    """Kills: binomial tails that overflow (math.comb(n, i) * p**i as floats) or cost O(n) at large n."""

    def test_defining_property_with_few_successes(self):
        n = 100_000
        for x in (1, 3, 20):
            low, high = rag_eval._clopper_pearson(x, n)
            at_most = lambda m, p: math.fsum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(m + 1))
            with self.subTest(x=x):
                self.assertAlmostEqual(1 - at_most(x - 1, low), 0.025, delta=1e-9)  # P(X >= x | low)
                self.assertAlmostEqual(at_most(x, high), 0.025, delta=1e-9)  # P(X <= x | high)
                # and the mirror image: n - x successes
                mirror = rag_eval._clopper_pearson(n - x, n)
                self.assertAlmostEqual(mirror.low, 1 - high, delta=1e-12)
                self.assertAlmostEqual(mirror.high, 1 - low, delta=1e-12)

    def test_half_of_a_million_is_near_normal_theory(self):
        # x = n/2: symmetric about 1/2, half-width close to 1.96 * sqrt(1/4 / n).
        n = 1_000_000
        low, high = rag_eval._clopper_pearson(n // 2, n)
        self.assertAlmostEqual(low + high, 1.0, delta=1e-12)
        self.assertAlmostEqual(high - 0.5, 1.959964 * math.sqrt(0.25 / n), delta=2e-6)

    def test_confidence_one_is_the_whole_range(self):
        # Kills: a tail evaluated at p = 1 (log1p(-1) raises), which the bisection reaches when
        # confidence 1 leaves a tail of 0 to solve for.
        self.assertEqual(tuple(rag_eval._clopper_pearson(0, 10, 1.0)), (0.0, 1.0))
        low, high = rag_eval._clopper_pearson(3, 10, 1.0)
        self.assertEqual(high, 1.0)
        self.assertLess(low, 1e-15)


class TestEdgeCounts(unittest.TestCase):
    def test_sign_test_without_differing_queries_is_one(self):
        # Kills: a dropped guard, where 1 << -1 raises for a negative count.
        for better, differing in ((0, 0), (0, -1), (2, -3)):
            with self.subTest(better=better, differing=differing):
                self.assertEqual(rag_eval._sign_test(better, differing), 1.0)

    def test_one_common_query_has_no_spread(self):
        # One query: the sign test gives p = 2 of 2 patterns, no spread to estimate.
        comparison = rag_eval.compare_paired("ndcg@5", {"q1": 0.25, "q2": 0.5}, {"q1": 0.75})
        self.assertEqual((comparison.queries, comparison.p_value, comparison.exact, comparison.spread),
                         (1, 1.0, True, None))
        self.assertEqual(tuple(comparison.interval), (0.5, 0.5))


class TestHalfSumsEveryWay(unittest.TestCase):
    """Kills: a way of summing random halves (popcount masks, one per bit of the values; table
    lookups on Python 3.9; the bounds of the coarse sums) that loses a bit, a sign or a draw.

    The reference is the plain Python of the definition: for each draw, the sum of the
    integers whose bit is set."""

    @staticmethod
    def reference(values, draws):
        return [sum(value for i, value in enumerate(values) if draw >> i & 1) for draw in draws]

    def columns(self, rng, width):
        big = (1 << 53) // width - 1  # as _on_grid makes them: sum(|values|) < 2**53
        return [
            [rng.choice((-1, 0, 1)) << 40 for _ in range(width)],  # a 0/1 measure: two masks
            [rng.choice((-3, -1, 0, 2, 5)) * 977 for _ in range(width)],  # few values
            [rng.randrange(-big, big) for _ in range(width)],  # every bit, negative and positive
            [rng.randrange(0, big) if i % 5 == 0 else 0 for i in range(width)],  # sparse
            [0] * width,
            [-big] * width,  # all at the bound, negative: the top (sign) bit of two's complement
        ]

    def test_masks_and_lookups_agree_with_the_definition(self):
        rng = random.Random(21)
        for width in (1, 7, 8, 9, 64, 301):
            for values in self.columns(rng, width):
                draws = [rng.getrandbits(width) for _ in range(40)] + [0, (1 << width) - 1]
                expected = self.reference(values, draws)
                terms = rag_eval._mask_terms(values)
                got = [sum(weight * bin(draw & mask).count("1") for weight, mask in terms) for draw in draws]
                with self.subTest(width=width, values=values[:4]):
                    self.assertEqual(got, expected)
                    self.assertEqual(rag_eval._lookup_sums([values], draws), [expected])

    def test_packed_lookups_keep_every_lane(self):
        # Several columns in 64-bit lanes of one integer, negative sums included: each lane must
        # come out as the column's own sums (and one column at a time, beyond PACK_WIDTH).
        rng = random.Random(27)
        for width in (1, 9, 200):
            columns = self.columns(rng, width)
            draws = [rng.getrandbits(width) for _ in range(30)] + [0, (1 << width) - 1]
            expected = [self.reference(values, draws) for values in columns]
            for pack in (10 ** 9, 0):
                with self.subTest(width=width, pack=pack), unittest.mock.patch.object(rag_eval, "_PACK_WIDTH", pack):
                    self.assertEqual(rag_eval._lookup_sums(columns, draws), expected)

    def test_bounds_hold_and_exact_sums_are_the_definitions(self):
        # Every half's exact sum is the definition's (on the grid) and lies within its bounds, on
        # both ways and whatever the coarse grid (COARSE_SHARE 1: wide bounds; 10**30: none).
        rng = random.Random(22)
        for width in (1, 9, 200, 1000):
            for values in self.columns(rng, width):
                layout = [math.ldexp(value, -60) for value in values]
                scale, whole = rag_eval._on_grid(layout)
                draws = [rng.getrandbits(width) for _ in range(30)]
                expected = [math.ldexp(total, scale) for total in self.reference(whole, draws)]
                for way in ({"_COARSE_SHARE": 1, "_LOOKUP_BELOW": 0, "_COARSE_FROM": 0},
                            {"_COARSE_SHARE": 64, "_LOOKUP_BELOW": 0, "_COARSE_FROM": 0},
                            {"_COARSE_SHARE": 10 ** 30, "_LOOKUP_BELOW": 0, "_COARSE_FROM": 0},
                            {"_HAS_BIT_COUNT": False}):
                    if "_COARSE_SHARE" in way and not rag_eval._HAS_BIT_COUNT:
                        continue  # Python 3.9: no masks
                    with self.subTest(width=width, way=way), unittest.mock.patch.multiple(rag_eval, **way):
                        halves = rag_eval._halves_of([layout], [None], draws)[0]
                        self.assertEqual([halves.exact(r) for r in range(len(draws))], expected)
                        self.assertTrue(all(low <= want <= high
                                            for low, want, high in zip(halves.low, expected, halves.high)))
                        self.assertEqual(halves.sizes, [bin(draw).count("1") for draw in draws])

    def test_results_do_not_depend_on_the_bounds(self):
        # Kills: a test that reads a bound where the exact sum was needed.  Wide bounds (every
        # decision open) and no bounds at all give the p-values, intervals and MaxT of the default.
        rng = random.Random(25)
        before = {f"q{i:03d}": rng.random() for i in range(400)}
        after = {qid: rng.choice((value, rng.random(), 1 - value)) for qid, value in before.items()}  # p near 1/2
        family = {"a": {qid: after[qid] - before[qid] for qid in before},
                  "b": {qid: (before[qid] - after[qid]) / 3 for qid in list(before)[:300]}}

        def results():
            comparison = rag_eval.compare_paired("ndcg@5", before, after, resamples=800)
            return (comparison.p_value, comparison.interval, rag_eval.maxt(family, 600, 1),
                    rag_eval.bootstrap_interval(list(after.values()), 700, random.Random(3)))

        default = results()
        ways = [{"_HAS_BIT_COUNT": False}]
        if rag_eval._HAS_BIT_COUNT:
            ways += [{"_COARSE_SHARE": share, "_LOOKUP_BELOW": 0, "_PACK_WIDTH": 0, "_COARSE_FROM": 0}
                     for share in (1, 4, 10 ** 30)]
        for way in ways:
            with self.subTest(way=way), unittest.mock.patch.multiple(rag_eval, **way):
                self.assertEqual(results(), default)

    def test_a_fixed_seed_gives_the_numbers_it_always_gave(self):
        # Kills: any change of the resampling stream or of the sums (pinned from the code before the
        # sums took bounds, on Python 3.9, 3.11 and 3.13 alike).
        rng = random.Random(2027)
        before = {f"q{i:03d}": rng.random() for i in range(300)}
        after = {q: (v + rng.random()) / 2 if rng.random() < 0.8 else v for q, v in before.items()}
        comparison = rag_eval.compare_paired("ndcg@10", before, after, resamples=3000, seed=4)
        self.assertEqual((comparison.p_value, comparison.exact, tuple(comparison.interval)),
                         (0.2409196934355215, False, (-0.032339465614001646, 0.008873862034313102)))
        deltas = {m: {q: (after[q] - before[q]) * f for q in list(before)[:300 - 40 * j]}
                  for j, (m, f) in enumerate((("ndcg@10", 1.0), ("mrr@10", -0.5), ("recall@10", 0.25)))}
        self.assertEqual(rag_eval.maxt(deltas, 2000, 3),
                         {"mrr@10": 0.544727636181909, "ndcg@10": 0.3543228385807096, "recall@10": 0.6456771614192903})
        self.assertEqual(tuple(rag_eval.bootstrap_interval(list(after.values()), 2500, random.Random(8))),
                         (0.46099162222233697, 0.5063647552840914))
        self.assertEqual(rag_eval.sign_flip_test([after[q] - before[q] for q in sorted(before)], 1500, random.Random(6)),
                         (0.2558294470353098, False))

    def test_sampled_p_and_interval_against_exact_rationals(self):
        # The sampled p and the bootstrap interval recomputed from the same random stream in exact
        # rationals: the halves of the rounded values, |total - 2 half| >= |total| counted, the
        # resampled means mean + (total - 2 half - mean (n - 2 size)) / n ranked.
        rng = random.Random(26)
        values = [rng.random() - 0.5 for _ in range(40)]  # 40 differing, two sizes at least: sampled
        resamples = 500
        p, exact = rag_eval.sign_flip_test(values, resamples, random.Random(7))
        low, high = rag_eval.bootstrap_interval(values, resamples, random.Random(7))
        unit = Fraction(2) ** (math.frexp(math.fsum(map(abs, values)))[1] - 53)
        rounded = [round(Fraction(v) / unit) * unit for v in values]
        total, n = sum(map(Fraction, values)), len(values)
        mean = total / n
        stream = random.Random(7)
        extreme, means = 0, []
        for _ in range(resamples):
            draw = stream.getrandbits(n)
            chosen = [i for i in range(n) if draw >> i & 1]
            half = sum(rounded[i] for i in chosen)
            extreme += abs(total - 2 * half) >= abs(total)
            means.append(mean + (total - 2 * half - mean * (n - 2 * len(chosen))) / n)
        means.sort()
        self.assertEqual((p, exact), ((1 + extreme) / (1 + resamples), False))
        self.assertAlmostEqual(low, float(means[math.ceil(0.025 * resamples) - 1]), delta=1e-15)
        self.assertAlmostEqual(high, float(means[math.ceil(0.975 * resamples) - 1]), delta=1e-15)

    def test_halves_are_the_rounded_values_summed(self):
        # _shared_halves: (sum of the half, its size) with each value rounded to its grid of
        # 2**(e - 53), e the exponent of sum(|values|); the grid makes the float sums exact.
        # Kills too: a change of which query gets which random bit (every seeded number changes).
        rng = random.Random(23)
        # Bit i of each draw belongs to the i-th nonzero value, then come the zeros (the stream
        # that every seeded p and interval rests on).
        values = [rng.random() - 0.5 if i % 4 else 0.0 for i in range(55)]
        halves = rag_eval._shared_halves([values], 60, random.Random(9))[0]
        stream = random.Random(9)
        unit = 2.0 ** (math.frexp(math.fsum(map(abs, values)))[1] - 53)
        layout = [v for v in values if v] + [0.0] * values.count(0.0)
        rounded = [Fraction(round(v / unit)) * Fraction(unit) for v in layout]
        for resample, size in enumerate(halves.sizes):
            draw = stream.getrandbits(55)
            chosen = [i for i in range(55) if draw >> i & 1]
            self.assertEqual((Fraction(halves.exact(resample)), size), (sum(rounded[i] for i in chosen), len(chosen)))

    def test_shared_halves_are_each_lists_own(self):
        # compare_runs draws once per metric for every pair: each list must get exactly the
        # halves it would draw alone from a generator seeded the same way.
        rng = random.Random(24)
        lists = [[rng.choice((0.0, 0.0, 0.25, -0.5, 1.0)) for _ in range(70)] for _ in range(5)]
        lists.append([rng.choice((0.0, 1.0, -1.0)) for _ in range(70)])
        shared = rag_eval._shared_halves(lists, 80, random.Random("rag_eval:0:ndcg@5"))
        for values, halves in zip(lists, shared):
            alone = rag_eval._shared_halves([values], 80, random.Random("rag_eval:0:ndcg@5"))[0]
            self.assertEqual([halves.exact(r) for r in range(80)], [alone.exact(r) for r in range(80)])
            self.assertEqual((halves.low, halves.high, halves.sizes), (alone.low, alone.high, alone.sizes))

    def test_a_grid_that_rounding_would_overfill_is_made_coarser(self):
        # Twelve values just below shares of 1 (their sum 0.99999999999999989, exponent 0): on the
        # grid 2**-53 they round to units summing to 2**53 + 2, past what floats hold exactly, so
        # the grid must be 2**-52; every half then sums exactly to its values on that grid.
        values = [0.05583070688878883, 0.0883986192405823, 0.09034969233078191, 0.014708089449197057,
                  0.10956025814197808, 0.09605282905598078, 0.09710340687378057, 0.14272850067537143,
                  0.028215518535194353, 0.14452949122017106, 0.021011556355995793, 0.11151133123217769]
        self.assertEqual(sum(round(v * 2 ** 53) for v in values), 2 ** 53 + 2)
        rounded = [Fraction(round(v * 2 ** 52), 2 ** 52) for v in values]
        stream = random.Random(5)
        halves = rag_eval._shared_halves([values], 300, random.Random(5))[0]
        for resample, size in enumerate(halves.sizes):
            draw = stream.getrandbits(12)
            chosen = [i for i in range(12) if draw >> i & 1]
            self.assertEqual((Fraction(halves.exact(resample)), size), (sum(rounded[i] for i in chosen), len(chosen)))


class TestArgumentsAndDefaults(unittest.TestCase):
    """The checks and the default generator of the statistics' public functions."""

    def test_clopper_pearson_refuses_impossible_counts(self):
        for successes, trials in ((-1, 5), (6, 5), (0, 0), (1, 0)):
            with self.subTest(successes=successes, trials=trials):
                with self.assertRaises(rag_eval.RagEvalError) as caught:
                    rag_eval._clopper_pearson(successes, trials)
                self.assertTrue(str(caught.exception).startswith("clopper_pearson "), caught.exception)
                self.assertTrue(str(caught.exception).endswith(f" {successes}/{trials}"), caught.exception)
        # the edges are taken: 0 of 1 and 1 of 1 (low 0 and high 1 are exact there)
        self.assertEqual(rag_eval._clopper_pearson(0, 1).low, 0.0)
        self.assertEqual(rag_eval._clopper_pearson(1, 1).high, 1.0)

    def test_a_value_that_is_not_finite_is_refused(self):
        # a NaN delta gave p = 0 (and after a refactoring p = 1) instead of an error; an infinity, a NaN interval
        nan, inf = float("nan"), float("inf")
        calls = {"sign_flip_test": lambda bad: rag_eval.sign_flip_test([0.5, bad]),
                 "bootstrap_interval": lambda bad: rag_eval.bootstrap_interval([0.5, bad]),
                 "maxt": lambda bad: rag_eval.maxt({"a": {"q1": 0.5, "q2": bad}}),
                 "compare_paired": lambda bad: rag_eval.compare_paired("m", {"q1": 0.0, "q2": 0.0},
                                                                       {"q1": 0.5, "q2": bad})}
        for name, call in calls.items():
            for bad in (nan, inf, -inf):
                with self.subTest(name, bad=bad), self.assertRaises(rag_eval.RagEvalError):
                    call(bad)
            self.assertIsNotNone(call(0.25))  # the same call with a finite value is answered

    def test_the_default_generator_is_seeded_by_default_seed(self):
        # values that need sampling (17 differing deltas of several sizes), no generator given
        values = [(-1) ** i * (i % 5 + 1) / 8 for i in range(rag_eval._EXACT_SIGN_FLIP_MAX + 1)]
        seeded = random.Random(rag_eval._DEFAULT_SEED)
        self.assertEqual(rag_eval.bootstrap_interval(values, 300), rag_eval.bootstrap_interval(values, 300, seeded))
        seeded = random.Random(rag_eval._DEFAULT_SEED)
        self.assertEqual(rag_eval.sign_flip_test(values, 300), rag_eval.sign_flip_test(values, 300, seeded))
        self.assertFalse(rag_eval.sign_flip_test(values, 300)[1])  # sampled, so the generator was used

    def test_clopper_pearson_to_the_last_bit(self):
        # The bounds are published as floats (JSON, reports): the same bits on every Python, so they are
        # pinned here, beside the defining equation they solve.  Low of 1 in 11 at 99%: P(X >= 1 | p) =
        # 1 - (1 - p)**11 = 0.005, so p = 1 - 0.995**(1/11); the bisection's 64 halvings reach its last bit.
        low, high = rag_eval._clopper_pearson(1, 11, 0.99)
        self.assertAlmostEqual(low / -math.expm1(math.log1p(-0.005) / 11), 1.0, places=12)
        self.assertEqual((low, high), (0.00045558181139859516, 0.5085647296886293))
        self.assertEqual(tuple(rag_eval._clopper_pearson(3, 1363)), (0.0004541349194476241, 0.006418739305654628))


if __name__ == "__main__":
    unittest.main()
