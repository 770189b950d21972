"""Tests of the statistics of rag_eval.py that pin its guarantees: p never 0,
ties counted when floats round them apart, the percentile ranks, the two
halves of ``--gate significant``, Clopper-Pearson at large n.

Each test names the bug it kills.  Expected values are worked by hand or
computed independently (exact rationals, binomial tails from ``math.comb``,
the plain Python of the method); seeds are fixed, the clock is never read.

Run with ``python3 -m unittest test_stats`` from the repository root.
"""

import itertools
import math
import random
import unittest
import unittest.mock
from fractions import Fraction

import rag_eval

THIRD = 1 / 3


def brute_force_p(numerators):
    """Two-sided sign-flip p of integer deltas, by every sign pattern."""
    observed = abs(sum(numerators))
    extreme = sum(1 for signs in itertools.product((1, -1), repeat=len(numerators))
                  if abs(sum(s * m for s, m in zip(signs, numerators))) >= observed)
    return Fraction(extreme, 2 ** len(numerators))


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


class TestSignificantGate(unittest.TestCase):
    """Kills: rule significant failing a fall on its p alone, without the interval below 0."""

    @staticmethod
    def judge(deltas):
        """Gate recall@5 on 6 queries that fell by ``deltas`` from 1.0, rule significant, tolerance 0."""
        qids = [f"q{i}" for i in range(len(deltas))]
        now = {qid: 1.0 + delta for qid, delta in zip(qids, deltas)}
        result = {"k": 5, "mean": {"recall@5": math.fsum(now.values()) / len(now)},
                  "per_query": {qid: {"recall": value} for qid, value in now.items()}}
        baseline = rag_eval.Baseline({"recall@5": 1.0}, {"recall@5": {qid: 1.0 for qid in qids}})
        settings = rag_eval.GateSettings(rule="significant", default=rag_eval.Tolerance(0.0), resamples=2000)
        return rag_eval.gate(result, baseline, settings)["metrics"]["recall@5"]

    def test_small_p_and_interval_below_zero_fails(self):
        # Six falls of 1/2: exact p = 2 / 2**6 (only ++++++ and ------ reach |3|);
        # every distance from the mean is 0, so the interval is [-1/2, -1/2].
        entry = self.judge([-0.5] * 6)
        self.assertEqual((entry["p_value"], entry["p_holm"], entry["exact"]), (2 / 64, 2 / 64, True))
        self.assertEqual(entry["interval"], [-0.5, -0.5])
        self.assertEqual(entry["verdict"], "regression")

    def test_small_p_but_interval_reaching_zero_is_not_significant(self):
        # Five falls of 0.01 and one of 0.99 (sum -1.04): only the two patterns with
        # one sign throughout reach |1.04|, so p = 2/64 < 0.05 again.  But the mean,
        # -1.04/6, rests on one query: distances 1.04/6 - 0.01 (five) and
        # 1.04/6 - 0.99.  A resampled mean is mean + (s * 0.8167 + 0.1633 * (t1 +
        # ... + t5)) / 6 for random signs s, t: the largest takes s = +1 and all t
        # +1 (chance 1/64 = 1.6%), the next s = +1 and four t +1 (5/64 more), so
        # the 97.5% point is mean + (0.8167 + 3 * 0.1633) / 6 = +0.044, above 0.
        entry = self.judge([-0.01] * 5 + [-0.99])
        self.assertEqual((entry["p_value"], entry["exact"]), (2 / 64, True))
        self.assertLess(entry["p_holm"], 0.05)
        mean = -1.04 / 6
        self.assertAlmostEqual(entry["interval"][1], mean + ((mean + 0.99) + 3 * (-0.01 - mean)) / 6, places=12)
        self.assertGreater(entry["interval"][1], 0)
        # the interval reaches 0 and its low end is far beyond the tolerance 0: inconclusive
        self.assertEqual(entry["verdict"], "inconclusive")

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


class TestClopperPearsonAtLargeN(unittest.TestCase):
    """Kills: binomial tails that overflow (math.comb(n, i) * p**i as floats) or cost O(n) at large n."""

    def test_defining_property_with_few_successes(self):
        n = 100_000
        for x in (1, 3, 20):
            low, high = rag_eval.clopper_pearson(x, n)
            at_most = lambda m, p: math.fsum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(m + 1))
            with self.subTest(x=x):
                self.assertAlmostEqual(1 - at_most(x - 1, low), 0.025, delta=1e-9)  # P(X >= x | low)
                self.assertAlmostEqual(at_most(x, high), 0.025, delta=1e-9)  # P(X <= x | high)
                # and the mirror image: n - x successes
                mirror = rag_eval.clopper_pearson(n - x, n)
                self.assertAlmostEqual(mirror.low, 1 - high, delta=1e-12)
                self.assertAlmostEqual(mirror.high, 1 - low, delta=1e-12)

    def test_half_of_a_million_is_near_normal_theory(self):
        # x = n/2: symmetric about 1/2, half-width close to 1.96 * sqrt(1/4 / n).
        n = 1_000_000
        low, high = rag_eval.clopper_pearson(n // 2, n)
        self.assertAlmostEqual(low + high, 1.0, delta=1e-12)
        self.assertAlmostEqual(high - 0.5, 1.959964 * math.sqrt(0.25 / n), delta=2e-6)

    def test_confidence_one_is_the_whole_range(self):
        # Kills: a tail evaluated at p = 1 (log1p(-1) raises), which the bisection reaches when
        # confidence 1 leaves a tail of 0 to solve for.
        self.assertEqual(tuple(rag_eval.clopper_pearson(0, 10, 1.0)), (0.0, 1.0))
        low, high = rag_eval.clopper_pearson(3, 10, 1.0)
        self.assertEqual(high, 1.0)
        self.assertLess(low, 1e-15)


class TestEdgeCounts(unittest.TestCase):
    def test_sign_test_without_differing_queries_is_one(self):
        # Kills: a dropped guard, where 1 << -1 raises for a negative count.
        for better, differing in ((0, 0), (0, -1), (2, -3)):
            with self.subTest(better=better, differing=differing):
                self.assertEqual(rag_eval.sign_test(better, differing), 1.0)

    def test_one_common_query_has_no_spread(self):
        # One query: the sign test gives p = 2 of 2 patterns, no spread to estimate, and no outcome
        # of one query could reach alpha.
        comparison = rag_eval.compare_paired("ndcg@5", {"q1": 0.25, "q2": 0.5}, {"q1": 0.75})
        self.assertEqual((comparison.queries, comparison.p_value, comparison.exact, comparison.spread),
                         (1, 1.0, True, None))
        self.assertTrue(comparison.unresolvable)
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
                with self.subTest(width=width, pack=pack), unittest.mock.patch.object(rag_eval, "PACK_WIDTH", pack):
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
                for way in ({"COARSE_SHARE": 1, "LOOKUP_BELOW": 0, "COARSE_FROM": 0},
                            {"COARSE_SHARE": 64, "LOOKUP_BELOW": 0, "COARSE_FROM": 0},
                            {"COARSE_SHARE": 10 ** 30, "LOOKUP_BELOW": 0, "COARSE_FROM": 0},
                            {"_HAS_BIT_COUNT": False}):
                    if "COARSE_SHARE" in way and not rag_eval._HAS_BIT_COUNT:
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
            ways += [{"COARSE_SHARE": share, "LOOKUP_BELOW": 0, "PACK_WIDTH": 0, "COARSE_FROM": 0}
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
                    rag_eval.clopper_pearson(successes, trials)
                self.assertEqual(str(caught.exception),
                                 f"clopper_pearson needs 0 <= successes <= trials >= 1, got {successes}/{trials}")
        # the edges are taken: 0 of 1 and 1 of 1 (low 0 and high 1 are exact there)
        self.assertEqual(rag_eval.clopper_pearson(0, 1).low, 0.0)
        self.assertEqual(rag_eval.clopper_pearson(1, 1).high, 1.0)

    def test_the_default_generator_is_seeded_by_default_seed(self):
        # values that need sampling (17 differing deltas of several sizes), no generator given
        values = [(-1) ** i * (i % 5 + 1) / 8 for i in range(rag_eval.EXACT_SIGN_FLIP_MAX + 1)]
        seeded = random.Random(rag_eval.DEFAULT_SEED)
        self.assertEqual(rag_eval.bootstrap_interval(values, 300), rag_eval.bootstrap_interval(values, 300, seeded))
        seeded = random.Random(rag_eval.DEFAULT_SEED)
        self.assertEqual(rag_eval.sign_flip_test(values, 300), rag_eval.sign_flip_test(values, 300, seeded))
        self.assertFalse(rag_eval.sign_flip_test(values, 300)[1])  # sampled, so the generator was used

    def test_clopper_pearson_to_the_last_bit(self):
        # The bounds are published as floats (JSON, reports): the same bits on every Python, so they are
        # pinned here, beside the defining equation they solve.  Low of 1 in 11 at 99%: P(X >= 1 | p) =
        # 1 - (1 - p)**11 = 0.005, so p = 1 - 0.995**(1/11); the bisection's 64 halvings reach its last bit.
        low, high = rag_eval.clopper_pearson(1, 11, 0.99)
        self.assertAlmostEqual(low / -math.expm1(math.log1p(-0.005) / 11), 1.0, places=12)
        self.assertEqual((low, high), (0.00045558181139859516, 0.5085647296886293))
        self.assertEqual(tuple(rag_eval.clopper_pearson(3, 1363)), (0.0004541349194476241, 0.006418739305654628))


if __name__ == "__main__":
    unittest.main()
