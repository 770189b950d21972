"""Conformance of rag_eval with trec_eval, the reference implementation.

Part A (``RandomCrossCheckTest``) draws seeded random qrels and runs and
compares every per-query value with pytrec_eval (package
``pytrec-eval-terrier``, trec_eval's own C code behind a Python API).  It is
skipped when ``import pytrec_eval`` fails, so that ``python3 -m unittest``
passes with the standard library alone.

Part B (``TrecEvalGoldenTest``) needs no package: it reads trec_eval's own
test collection and the outputs trec_eval printed for it
(``tests/trec_eval/`` in the repository, a copy of trec_eval's ``test/``
folder; skipped when the directory is absent) through ``rag_eval.read_qrels`` /
``rag_eval.read_run`` and compares every measure the two tools share.

Name mapping (trec_eval -> rag_eval, nDCG with ``gain="linear"``):
``ndcg_cut_K`` -> ``ndcg@K``, ``recall_K`` -> ``recall@K``, ``P_K`` ->
``precision@K``, ``map_cut_K`` -> ``ap@K``, ``success_K`` -> ``success@K``,
``recip_rank`` (no cutoff) -> ``mrr@K`` where the first relevant document is
within K, ``-l N`` -> ``min_grade=N``, ``-J`` -> ``judged_only=True``,
``-M N`` -> ``read_run(path, depth=N)``.

Semantic differences that are by design, not bugs:

* a query whose qrels hold no relevant document is not scored by rag_eval
  (``result["unscored"]``); trec_eval scores it 0 on every shared measure;
* a judged query the run lacks scores 0 in rag_eval and stays in the mean;
  trec_eval omits it unless ``-c``;
* rag_eval refuses run queries that the qrels lack unless
  ``drop_unknown_queries=True``; trec_eval ignores them;
* pytrec_eval (like trec_eval 9; trec_eval 10 keeps doubles) stores run
  scores as C ``float`` (32 bits), rag_eval as Python floats (64 bits): two
  scores that differ only beyond float32 precision tie in pytrec_eval (and
  the docid decides) but not in rag_eval.  The random cases
  use scores that float32 represents in the same order, and
  ``test_float32_is_the_only_score_difference`` pins the difference down.
"""

import math
import os
import random
import re
import struct
import tempfile
import unittest
from unittest import mock

import rag_eval


try:
    import pytrec_eval
except ImportError:  # the optional reference implementation
    pytrec_eval = None


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


TREC_DIR = os.path.join(HERE, "tests", "trec_eval")


# rag_eval measure -> trec_eval measure with a cutoff (``name_K``).
TREC_NAME = {"ndcg": "ndcg_cut", "recall": "recall", "precision": "P", "ap": "map_cut", "success": "success"}


OURS = {trec: ours for ours, trec in TREC_NAME.items()}


MEASURES = ("recall", "success", "mrr", "ndcg", "precision", "ap")


def float32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def trec_order(scores):
    """Doc ids best first by trec_eval's rule: score descending, then docid descending.

    trec_eval compares the scores as C floats (32 bits), so this does too.
    """
    return [docid for docid, _ in sorted(scores.items(), key=lambda item: (float32(item[1]), item[0]), reverse=True)]


RANDOM_CASES = 2000


CUTOFFS = (1, 5, 10)


TOLERANCE = 1e-9


# Look-alike ids on purpose: "01" and "1" are two documents (and two queries),
# "doc#3" holds a '#', and a few are not ASCII (both tools order by code point).
QUERY_IDS = ("1", "01", "001", "10", "q2", "Q2", "q#5", "topic-7", "\u00fc")


DOC_IDS = ("1", "01", "001", "10", "2", "doc#3", "doc#30", "doc#3#1", "a", "A", "b", "B", "aa",
           "x.y", "d-1", "\u00e9", "\u65e5\u672c", "Z")


def _score(rng, style, previous):
    if previous and rng.random() < 0.3:
        return rng.choice(previous)  # an exact tie with an earlier document
    if style == "ties":
        return float(rng.randint(0, 3))
    if style == "coarse":
        return rng.randint(-8, 8) / 4
    # Distinct 4-decimal values stay distinct (and in order) as float32 below
    # 1000, so trec_eval's float scores and ours agree on the order.
    return round(rng.uniform(-100.0, 100.0), 4)


def make_case(seed):
    """One random evaluation problem, reproducible from ``seed`` alone.

    Returns ``(qrels, run, options)``.  ``qrels`` may hold negative grades
    (only when ``options["trec"]``: they go through a TREC qrels file);
    ``run`` maps qid -> {docid: float score}, with no duplicated doc ids.
    """
    rng = random.Random(seed)
    trec = rng.random() < 0.4  # negative grades and the file readers
    pool = list(DOC_IDS) + [f"d{i}" for i in range(rng.randint(0, 15))]
    style = rng.choice(("ties", "coarse", "fine"))
    qrels, run = {}, {}
    for qid in rng.sample(QUERY_IDS, rng.randint(1, 4)):
        grades = {}
        for docid in rng.sample(pool, rng.randint(0 if not trec else 1, 12)):
            r = rng.random()
            if trec and r < 0.2:
                grades[docid] = rng.choice((-1, -2))  # trec_eval: in the pool, not judged
            elif r < 0.5:
                grades[docid] = 0
            else:
                grades[docid] = rng.choice((1, 1, 1, 2, 2, 3, 4))
        qrels[qid] = grades
        if rng.random() < 0.15:
            continue  # a judged query the run lacks
        size = rng.choice((0, 1, 2, 3, 5, 9, 10, 11, rng.randint(0, 25)))  # k beyond the list, at it, past it
        scores = {}
        for docid in rng.sample(pool, min(size, len(pool))):
            scores[docid] = _score(rng, style, list(scores.values()))
        run[qid] = scores
    unknown = rng.random() < 0.1
    if unknown:  # a run query the qrels lack
        run["not-judged"] = {docid: _score(rng, style, []) for docid in rng.sample(pool, 3)}
    variants = [(1, False)]
    if rng.random() < 0.35:
        variants.append((2, False))
    if rng.random() < 0.35:
        variants.append((1, True))
    if rng.random() < 0.15:
        variants.append((2, True))
    return qrels, run, {"trec": trec, "unknown": unknown, "variants": variants}


def write_trec_files(directory, seed, qrels, run):
    qrels_path = os.path.join(directory, f"qrels.{seed}.txt")
    run_path = os.path.join(directory, f"run.{seed}.txt")
    with open(qrels_path, "w", encoding="utf-8", newline="\n") as f:
        for qid, grades in qrels.items():
            for docid, grade in grades.items():
                f.write(f"{qid} 0 {docid} {grade}\n")
    with open(run_path, "w", encoding="utf-8", newline="\n") as f:
        for qid, scores in run.items():
            # The rank column is deliberately wrong: both tools must ignore it.
            for rank, (docid, score) in enumerate(scores.items(), 1):
                f.write(f"{qid}\tQ0\t{docid}\t{rank}\t{score!r}\ttag\n")
    return qrels_path, run_path


def values_names(cutoffs):
    return [f"{name}@{k}" for k in cutoffs for name in MEASURES]


def reference_values(qrels, run, qids, min_grade, judged_only):
    """pytrec_eval's per-query values, keyed like rag_eval's per_query."""
    cut = ",".join(str(k) for k in CUTOFFS)
    ref_qrels = {qid: qrels[qid] for qid in qids}
    ref_run = {qid: run[qid] for qid in qids if qid in run}
    flags = {"relevance_level": min_grade, "judged_docs_only_flag": judged_only}
    evaluator = pytrec_eval.RelevanceEvaluator(ref_qrels, {f"{name}.{cut}" for name in OURS}, **flags)
    got = evaluator.evaluate(ref_run)
    values = {qid: {} for qid in got}
    for qid, row in got.items():
        for k in CUTOFFS:
            for trec, ours in OURS.items():
                values[qid][f"{ours}@{k}"] = row[f"{trec}_{k}"]
    # recip_rank has no cutoff: give it the run truncated to its top k by
    # trec_eval's order (after dropping unjudged documents, as -J does first).
    rr_evaluator = pytrec_eval.RelevanceEvaluator(ref_qrels, {"recip_rank"}, **flags)
    for k in CUTOFFS:
        truncated = {}
        for qid, scores in ref_run.items():
            order = trec_order(scores)
            if judged_only:
                order = [docid for docid in order if qrels[qid].get(docid, -1) >= 0]
            truncated[qid] = {docid: scores[docid] for docid in order[:k]}
        for qid, row in rr_evaluator.evaluate(truncated).items():
            values[qid][f"mrr@{k}"] = row["recip_rank"]
    return values


@unittest.skipUnless(pytrec_eval is not None, "pytrec_eval (pip install pytrec-eval-terrier) is not installed")
class RandomCrossCheckTest(unittest.TestCase):
    """rag_eval == pytrec_eval, per query, on seeded random cases."""

    def evaluate_case(self, seed, directory):
        """Score one case both ways; return the number of values compared."""
        qrels, run, options = make_case(seed)
        if options["trec"]:
            qrels_path, run_path = write_trec_files(directory, seed, qrels, run)
            ours_qrels = rag_eval.read_qrels(qrels_path)
            # An empty run file is an input error; an empty run is not.
            ours_run = rag_eval.read_run(run_path) if any(run.values()) else {}
            with self.subTest(seed=seed, readers=True):
                # Negative grades are dropped (the query stays); scores round-trip.
                self.assertEqual(ours_qrels, {q: {d: g for d, g in gs.items() if g >= 0} for q, gs in qrels.items()})
                self.assertEqual(ours_run, {q: s for q, s in run.items() if s})
        else:
            ours_qrels, ours_run = qrels, run
        compared = 0
        for min_grade, judged_only in options["variants"]:
            with self.subTest(seed=seed, min_grade=min_grade, judged_only=judged_only, trec=options["trec"]):
                scored = sorted(q for q, gs in qrels.items() if any(g >= min_grade for g in gs.values()))
                kwargs = dict(measures=MEASURES, gain="linear", min_grade=min_grade, judged_only=judged_only,
                              drop_unknown_queries=options["unknown"])
                if not scored:  # nothing to score: rag_eval refuses
                    with self.assertRaises(ValueError):
                        rag_eval.evaluate(ours_qrels, ours_run, list(CUTOFFS), **kwargs)
                    continue
                result = rag_eval.evaluate(ours_qrels, ours_run, list(CUTOFFS), **kwargs)
                # The semantic differences, checked on our side.
                self.assertEqual(sorted(result["per_query"]), scored)
                self.assertEqual(result["unscored"], sorted(set(qrels) - set(scored)))
                for qid in scored:
                    if qid not in ours_run:  # skipped: 0 on every measure, kept in the mean
                        self.assertEqual(set(result["per_query"][qid].values()), {0.0})
                expected = reference_values(qrels, ours_run, scored, min_grade, judged_only)
                # pytrec_eval scores exactly the scored queries that the run holds.
                self.assertEqual(sorted(expected), sorted(q for q in scored if q in ours_run))
                for qid, values in expected.items():
                    ours = result["per_query"][qid]
                    self.assertEqual(set(ours), set(values))
                    for metric, value in values.items():
                        if abs(ours[metric] - value) > TOLERANCE:
                            self.fail(f"seed {seed}, query {qid!r}, {metric}: rag_eval {ours[metric]!r}, "
                                      f"pytrec_eval {value!r}\nqrels={qrels!r}\nrun={run!r}\noptions={options!r}")
                        compared += 1
                # Means: over every scored query, a skipped one counting 0.
                for metric in values_names(CUTOFFS):
                    expected_mean = math.fsum(values[metric] for values in expected.values()) / len(scored)
                    self.assertAlmostEqual(result["mean"][metric], expected_mean, delta=TOLERANCE,
                                           msg=f"seed {seed}, mean {metric}")
                    compared += 1
        return compared

    def test_random_cases(self):
        compared = 0
        with tempfile.TemporaryDirectory() as directory:
            for seed in range(RANDOM_CASES):
                compared += self.evaluate_case(seed, directory)
        self.assertGreater(compared, RANDOM_CASES * 10)  # the comparison really happened

    def test_float32_is_the_only_score_difference(self):
        # pytrec_eval stores run scores as 32-bit floats: 1.0 and 1.0 + 1e-12 tie
        # there, and the docid decides; rag_eval compares the Python floats.
        # Minimal repro of the difference (by design, not a bug):
        #   qrels {"q": {"b": 1, "a": 0}}, run {"q": {"b": 1.0, "a": 1.0 + 1e-12}}
        #   pytrec_eval recip_rank 1.0 ("b" > "a" breaks the tie); rag_eval mrr 0.5.
        # Rounding the scores to float32 first makes the two agree everywhere.
        rng = random.Random(20240521)
        differed = 0
        for case in range(200):
            qrels = {"q": {docid: rng.choice((0, 1, 2)) for docid in rng.sample(DOC_IDS, 8)}}
            qrels["q"][DOC_IDS[0]] = 1  # at least one relevant document
            base = rng.uniform(0.5, 2.0)
            scores = {docid: base + rng.randint(0, 3) * 1e-12 for docid in rng.sample(DOC_IDS, 10)}
            rounded = {"q": {docid: float32(score) for docid, score in scores.items()}}
            expected = reference_values(qrels, {"q": scores}, ["q"], 1, False)["q"]
            ours = rag_eval.evaluate(qrels, rounded, list(CUTOFFS), measures=MEASURES, gain="linear")
            for metric, value in expected.items():
                self.assertAlmostEqual(ours["per_query"]["q"][metric], value, delta=TOLERANCE,
                                       msg=f"case {case}, {metric}")
            unrounded = rag_eval.evaluate(qrels, {"q": scores}, list(CUTOFFS), measures=MEASURES, gain="linear")
            differed += unrounded["per_query"]["q"] != ours["per_query"]["q"]
        self.assertGreater(differed, 0)  # the sub-float32 differences did matter

    def test_cases_cover_the_edges(self):
        # The generator really produces what the cross-check claims to cover.
        seen = {"negative": 0, "zero": 0, "tie": 0, "unjudged": 0, "short": 0, "missing": 0, "unknown": 0,
                "min_grade": 0, "judged_only": 0, "lookalike": 0, "unscored": 0}
        for seed in range(RANDOM_CASES):
            qrels, run, options = make_case(seed)
            grades = [g for gs in qrels.values() for g in gs.values()]
            seen["negative"] += any(g < 0 for g in grades)
            seen["zero"] += 0 in grades
            seen["unknown"] += options["unknown"]
            seen["missing"] += any(q not in run for q in qrels)
            seen["unscored"] += any(all(g < 1 for g in gs.values()) for gs in qrels.values())
            seen["min_grade"] += (2, False) in options["variants"]
            seen["judged_only"] += any(j for _, j in options["variants"])
            for qid, scores in run.items():
                values = list(scores.values())
                seen["tie"] += len(set(values)) < len(values)
                seen["short"] += len(values) < max(CUTOFFS)
                seen["unjudged"] += any(d not in qrels.get(qid, {}) for d in scores)
                seen["lookalike"] += "1" in scores and "01" in scores
        for what, count in seen.items():
            self.assertGreater(count, 20, what)


GOLDEN_TOLERANCE = 5e-5 + 1e-12  # trec_eval prints 4 decimals


_CUT_MEASURE = re.compile(r"^(ndcg_cut|recall|P|map_cut|success)_(\d+)$")


_EXTRA_MEASURES = MEASURES + ("judged",)


def read_trec_eval_output(path):
    """``{measure: {qid: value}}`` from trec_eval's ``measure<TAB>qid<TAB>value`` lines."""
    table = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            measure, qid, value = line.rstrip("\n").split("\t")
            measure = measure.strip()
            try:
                number = float(value)
            except ValueError:  # runid, relstring_N: text, not numbers
                continue
            table.setdefault(measure, {})[qid.strip()] = number
    return table


@unittest.skipUnless(os.path.isdir(TREC_DIR), f"trec_eval's test collection is absent ({TREC_DIR})")
class TrecEvalGoldenTest(unittest.TestCase):
    """rag_eval reproduces what trec_eval printed for its own test collection."""

    def path(self, name):
        return os.path.join(TREC_DIR, name)

    def check(self, out_name, qrels_name, run_name, *, min_grade=1, complete=False, max_docs=None,
              drop_unknown=False):
        """Compare every shared measure of ``out_name``; return the number of values compared.

        ``complete``: trec_eval ran with ``-c`` (queries in the qrels that the
        run lacks count, with 0).  ``max_docs``: ``-M``; trec_eval keeps the
        first ``max_docs`` documents per query *after* sorting by score and
        docid (form_res_rels.c), which is exactly ``read_run``'s ``depth``.
        """
        golden = read_trec_eval_output(self.path(out_name))
        qrels = rag_eval.read_qrels(self.path(qrels_name))
        run = rag_eval.read_run(self.path(run_name), depth=max_docs)
        longest = max(len(scores) for scores in run.values())
        cutoffs = {int(m.group(2)) for m in map(_CUT_MEASURE.match, golden) if m}
        # A cutoff beyond every ranking: there mrr@K is recip_rank, recall@K
        # gives num_rel_ret and judged@K gives the judged documents retrieved.
        whole = max(1000, longest)
        cutoffs.add(whole)
        result = rag_eval.evaluate(qrels, run, sorted(cutoffs), measures=_EXTRA_MEASURES, gain="linear",
                                   min_grade=min_grade, drop_unknown_queries=drop_unknown)
        per_query = result["per_query"]
        unscored = set(result["unscored"])
        # The queries trec_eval averaged over: the run's judged queries, or
        # every judged query with -c.
        evaluated = set(qrels) if complete else set(run) & set(qrels)
        num_rel = {qid: sum(1 for g in qrels[qid].values() if g >= min_grade) for qid in qrels}

        def ours(measure, qid):
            """Our value for trec_eval's ``measure`` on ``qid``, or None if we have no counterpart."""
            values = per_query[qid]
            m = _CUT_MEASURE.match(measure)
            if m:
                return values[f"{OURS[m.group(1)]}@{m.group(2)}"]
            if measure == "recip_rank":
                return values[f"mrr@{whole}"]
            if measure == "num_rel":
                return num_rel[qid]
            if measure == "num_ret":
                return len(run.get(qid, ()))
            if measure == "num_rel_ret":
                return round(values[f"recall@{whole}"] * num_rel[qid])
            if measure == "num_nonrel_judged_ret":
                return round(values[f"judged@{whole}"] * whole) - round(values[f"recall@{whole}"] * num_rel[qid])
            return None

        compared = 0
        if "num_q" in golden:
            self.assertEqual(golden["num_q"]["all"], len(evaluated))
        for measure in sorted(golden):
            for qid, expected in sorted(golden[measure].items()):
                if qid == "all":
                    continue
                self.assertIn(qid, evaluated)
                if qid in unscored:
                    # trec_eval scores a query without a relevant document; we do not.
                    continue
                got = ours(measure, qid)
                if got is None:
                    continue
                with self.subTest(out=out_name, measure=measure, qid=qid):
                    self.assertAlmostEqual(got, expected, delta=GOLDEN_TOLERANCE)
                    compared += 1
                if measure == "recip_rank":
                    compared += self.check_mrr_cutoffs(per_query[qid], expected, cutoffs)

        # Means.  trec_eval averages over ``evaluated``; rag_eval over the judged
        # queries with a relevant document.  Where the two sets coincide the
        # means must agree.  Where trec_eval's set only adds queries without a
        # relevant document (which score 0 on every shared measure there), the
        # sums must agree instead: trec mean * num_q == our mean * our queries.
        # Otherwise (a judged query with relevant documents that the run lacks,
        # without -c) the means are not comparable and are skipped.
        scored = set(per_query)
        if scored == evaluated:
            scale = None
        elif scored < evaluated and not (evaluated - scored) - unscored:
            scale = len(evaluated)
        else:
            scale = False
        for measure, rows in sorted(golden.items()):
            if "all" not in rows or measure in ("num_q",) or scale is False:
                continue
            expected = rows["all"]
            if measure.startswith("num_"):
                # Sums over ``evaluated``, not means.  For a query we do not
                # score, num_rel and num_rel_ret are 0 and num_ret is the run's
                # length; num_nonrel_judged_ret is not derivable from our output.
                unscored_part = {"num_rel": lambda qid: 0, "num_rel_ret": lambda qid: 0,
                                 "num_ret": lambda qid: len(run.get(qid, ()))}.get(measure)
                if unscored_part is None and evaluated - scored:
                    continue
                got = sum(ours(measure, qid) if qid in per_query else unscored_part(qid) for qid in evaluated)
                with self.subTest(out=out_name, measure=measure, qid="all"):
                    self.assertEqual(got, expected)
                    compared += 1
                continue
            m = _CUT_MEASURE.match(measure)
            if m:
                metric = f"{OURS[m.group(1)]}@{m.group(2)}"
            elif measure == "recip_rank":
                metric = f"mrr@{whole}"
            else:
                continue
            got = result["mean"][metric]
            with self.subTest(out=out_name, measure=measure, qid="all"):
                if scale is None:
                    self.assertAlmostEqual(got, expected, delta=GOLDEN_TOLERANCE)
                else:
                    self.assertAlmostEqual(got * len(scored), expected * scale, delta=GOLDEN_TOLERANCE * scale)
                compared += 1
        self.assertGreater(compared, 0)
        return compared

    def check_mrr_cutoffs(self, values, recip_rank, cutoffs):
        """mrr@k is recip_rank when the first relevant document is within k, else 0."""
        compared = 0
        for k in sorted(cutoffs):
            got = values[f"mrr@{k}"]
            with self.subTest(mrr=k, recip_rank=recip_rank):
                if got > 0:  # the first relevant document is within k
                    self.assertAlmostEqual(got, recip_rank, delta=GOLDEN_TOLERANCE)
                    self.assertGreaterEqual(recip_rank, 1.0 / k - GOLDEN_TOLERANCE)
                else:  # the first relevant document is at rank k + 1 or later (or nowhere)
                    self.assertLessEqual(recip_rank, 1.0 / (k + 1) + GOLDEN_TOLERANCE)
                compared += 1
        return compared

    def test_out_test(self):
        # trec_eval qrels.test results.test (means only)
        self.assertGreater(self.check("out.test", "qrels.test", "results.test"), 10)

    def test_out_test_with_comment_lines(self):
        # trec_eval qrels.test.with-comments results.test: '#' lines are comments;
        # a '#' inside a docno ("CR#93E-1860") is part of the id.
        qrels = rag_eval.read_qrels(self.path("qrels.test.with-comments"))
        self.assertFalse([qid for qid in qrels if qid.startswith("#")])
        self.assertIn("CR#93E-1860", qrels["301"])
        self.assertGreater(self.check("out.test", "qrels.test.with-comments", "results.test"), 10)

    def test_out_comment_test(self):
        # trec_eval qrels.comment.test results.comment.test: MS MARCO v2.1
        # segment ids with '#'; the run has 301 topics, 31 of them judged (one
        # without a relevant document, so means are compared as sums).
        result = self.check("out.comment.test", "qrels.comment.test", "results.comment.test", drop_unknown=True)
        self.assertGreater(result, 10)
        with self.assertRaises(ValueError):  # without the flag, unknown run queries are an input error
            rag_eval.evaluate(rag_eval.read_qrels(self.path("qrels.comment.test")),
                              rag_eval.read_run(self.path("results.comment.test")), 5)

    def test_out_test_aq(self):
        # trec_eval -m all_trec -q qrels.test results.test
        self.assertGreater(self.check("out.test.aq", "qrels.test", "results.test"), 100)

    def test_out_test_aqc(self):
        # trec_eval -m all_trec -q -c qrels.test results.trunc: topic 302 has no
        # results and scores 0 (kept in the mean, as rag_eval does).
        self.assertGreater(self.check("out.test.aqc", "qrels.test", "results.trunc", complete=True), 100)

    def test_out_test_aqcM(self):
        # trec_eval -m all_trec -q -c -M100 qrels.test results.trunc
        self.assertGreater(self.check("out.test.aqcM", "qrels.test", "results.trunc", complete=True,
                                      max_docs=100), 100)

    def test_out_test_aql(self):
        # trec_eval -m all_trec -mrelstring.20 -q -l2 qrels.rel_level results.test
        # (grades -1..4; -1 is unjudged; nDCG gains use every grade, -l only
        # moves the relevance threshold, as in rag_eval).
        self.assertGreater(self.check("out.test.aql", "qrels.rel_level", "results.test", min_grade=2), 100)

    def test_out_test_meas_params(self):
        # trec_eval -q -m P.5,7,3 -m recall.20,2000 -mndcg_cut.10,20,23.4 -msuccess.2,5,20 ...
        # (cutoffs beyond the 500-document rankings included).
        self.assertGreater(self.check("out.test.meas_params", "qrels.test", "results.test"), 30)

    def test_small_read_blocks(self):
        # The TREC readers stream the files in blocks of READ_BLOCK bytes; with
        # tiny blocks every line boundary case is crossed, and nothing changes.
        if not hasattr(rag_eval, "_READ_BLOCK"):
            self.skipTest("rag_eval no longer has READ_BLOCK")
        for size in (1, 97, 4096):
            with self.subTest(read_block=size), mock.patch.object(rag_eval, "_READ_BLOCK", size):
                self.check("out.test.aqcM", "qrels.test", "results.trunc", complete=True, max_docs=100)
                self.check("out.test.aql", "qrels.rel_level", "results.test", min_grade=2)
                if size > 1:  # 2.8 MB a byte at a time is too slow for a unit test
                    self.check("out.comment.test", "qrels.comment.test", "results.comment.test", drop_unknown=True)


FILES = (os.environ.get("RAG_EVAL_CONFORMANCE_QRELS"), os.environ.get("RAG_EVAL_CONFORMANCE_RUN"))


def parse_trec_qrels(path):
    """``{qid: {docid: grade}}`` from ``qid iter docid grade`` lines: this test's own reader, not rag_eval's."""
    qrels = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) == 4:
                qrels.setdefault(fields[0], {})[fields[2]] = int(fields[3])
    return qrels


def parse_trec_run(path):
    """``{qid: {docid: score}}``; a document listed twice keeps its higher score, as in rag_eval."""
    run = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) == 6:
                scores = run.setdefault(fields[0], {})
                scores[fields[2]] = max(float(fields[4]), scores.get(fields[2], -math.inf))
    return run


@unittest.skipUnless(pytrec_eval is not None and all(FILES),
                     "set RAG_EVAL_CONFORMANCE_QRELS and RAG_EVAL_CONFORMANCE_RUN to TREC files (and install pytrec_eval)")
class FilesCrossCheckTest(unittest.TestCase):
    """rag_eval == pytrec_eval, per query, on the files you name.

        RAG_EVAL_CONFORMANCE_QRELS=qrels.txt RAG_EVAL_CONFORMANCE_RUN=run.txt \\
            python -m unittest -v test_conformance.FilesCrossCheckTest

    rag_eval reads the files as its command line does (streamed, the best
    max(CUTOFFS) + 1 documents of each query kept); pytrec_eval gets the
    whole run, read by this test's own parser.  Queries whose scores differ only beyond
    float32 precision are left out (trec_eval ties them; see the module's
    docstring), and so are the conventions of "Semantic differences".
    """

    def test_per_query_values(self):
        qrels_path, run_path = FILES
        qrels = rag_eval.read_qrels(qrels_path)
        run = rag_eval.read_run(run_path, depth=max(CUTOFFS) + 1)  # as the CLI does
        result = rag_eval.evaluate(qrels, run, list(CUTOFFS), measures=MEASURES, gain="linear",
                                   drop_unknown_queries=True)
        full_run = parse_trec_run(run_path)
        raw_qrels = parse_trec_qrels(qrels_path)
        collide = {qid for qid, scores in full_run.items()
                   if len(set(map(float32, scores.values()))) < len(set(scores.values()))}
        queries = [qid for qid in result["per_query"] if qid in full_run and qid not in collide]
        self.assertTrue(queries, "no query to compare")
        expected = reference_values(raw_qrels, full_run, queries, 1, False)
        compared = 0
        for qid in queries:
            for metric, value in expected[qid].items():
                ours = result["per_query"][qid][metric]
                if abs(ours - value) > TOLERANCE:
                    self.fail(f"query {qid!r}, {metric}: rag_eval {ours!r}, pytrec_eval {value!r}")
                compared += 1
        self.assertEqual(compared, len(queries) * len(values_names(CUTOFFS)))


if __name__ == "__main__":
    unittest.main()
