"""Evaluation and the library's surface: ``evaluate``, its input checks, the
constants and the exception users see, and the doctests of rag_eval.py (run
with the unit tests through ``load_tests``).

Expected values are written as arithmetic with the grades in a comment, so a
reader can check them by hand (STYLE.md, point 11): gain ``2**grade - 1``
(grade 2 -> 3, grade 1 -> 1), discount ``log2(1 + rank)``.
"""

import copy
import doctest
import json
import math
import os
import tempfile
import unittest

import rag_eval
from tests.helpers import QRELS, REPO, RUN, assert_error_line, assert_value_error, load_fixtures, run_main


def load_tests(loader, tests, pattern):
    """Run the docstring examples of rag_eval with the unit tests."""
    tests.addTests(doctest.DocTestSuite(rag_eval))
    return tests


# The fixtures, worked by hand, k = 5.
# q1 grades: refund-policy#2 = 2, refund-policy#3 = 1
#    run:    shipping#1 (unjudged), refund-policy#2 (2), refund-policy#9 (unjudged),
#            refund-policy#3 (1), returns-faq#1 (unjudged)
# q2 grades: sla-uptime#1 = 2; the run never retrieves it
# q3 grades: sso-setup#4 = 2, sso-setup#5 = 2, okta-guide#1 = 1
#    run:    sso-setup#5 (2), okta-guide#1 (1), sso-setup#1, scim#2, sso-setup#4 (2)
# q4 grades: pricing#3 = 0 only -> unscored
Q1_NDCG5 = (3 / math.log2(3) + 1 / math.log2(5)) / (3 + 1 / math.log2(3))  # grades 2 @2, 1 @4; ideal 2, 1


Q3_NDCG5 = (3 + 1 / math.log2(3) + 3 / math.log2(6)) / (3 + 3 / math.log2(3) + 1 / math.log2(4))  # 2 @1, 1 @2, 2 @5; ideal 2, 2, 1


FIXTURE_PER_QUERY = {
    "q1": {"recall": 2 / 2, "success": 1.0, "mrr": 1 / 2, "ndcg": Q1_NDCG5},
    "q2": {"recall": 0 / 1, "success": 0.0, "mrr": 0.0, "ndcg": 0.0},
    "q3": {"recall": 3 / 3, "success": 1.0, "mrr": 1 / 1, "ndcg": Q3_NDCG5},
}


FIXTURE_MEANS = {
    "recall@5": (1 + 0 + 1) / 3,
    "success@5": (1 + 0 + 1) / 3,
    "mrr@5": (1 / 2 + 0 + 1) / 3,
    "ndcg@5": (Q1_NDCG5 + 0 + Q3_NDCG5) / 3,
}


class TestConstants(unittest.TestCase):
    def test_exit_codes_and_defaults(self):
        self.assertEqual((rag_eval.EXIT_OK, rag_eval.EXIT_REGRESSION, rag_eval.EXIT_ERROR, rag_eval.EXIT_INTERRUPTED),
                         (0, 1, 2, 130))
        self.assertEqual((rag_eval._DEFAULT_K, rag_eval._DEFAULT_MAX_DROP), (5, 0.02))

    def test_all_is_sorted_and_importable(self):
        self.assertEqual(rag_eval.__all__, sorted(rag_eval.__all__))
        for name in rag_eval.__all__:
            self.assertTrue(hasattr(rag_eval, name), name)


class TestException(unittest.TestCase):
    def test_is_a_value_error(self):
        self.assertTrue(issubclass(rag_eval.RagEvalError, ValueError))

    def test_message_is_located(self):
        for args, expected in [
            (("bad grade", "q.trec", 17), "q.trec:17: bad grade"),
            (("no such file", "q.json"), "q.json: no such file"),
            (("k must be a positive integer",), "k must be a positive integer"),
        ]:
            with self.subTest(args=args):
                self.assertEqual(str(rag_eval.RagEvalError(*args)), expected)

    def test_internal_chain_is_hidden(self):
        with self.assertRaises(rag_eval.RagEvalError) as ctx:
            rag_eval.read_qrels(os.path.join(REPO, "fixtures", "no-such-file.json"))
        self.assertTrue(ctx.exception.__suppress_context__)
        self.assertIsNone(ctx.exception.__cause__)


class TestEvaluation(unittest.TestCase):
    def test_fixture_table(self):
        result = rag_eval.evaluate(*load_fixtures(), k=5)
        self.assertEqual(result["queries"], 3)
        self.assertEqual(result["unscored"], ["q4"])
        self.assertEqual(result["skipped"], [])
        self.assertEqual(result["k"], 5)
        self.assertEqual(sorted(result["per_query"]), ["q1", "q2", "q3"])
        for qid, expected in FIXTURE_PER_QUERY.items():
            self.assertEqual(set(result["per_query"][qid]), {"recall", "success", "mrr", "ndcg"})
            for name, value in expected.items():
                with self.subTest(qid=qid, measure=name):
                    self.assertAlmostEqual(result["per_query"][qid][name], value, places=15)
        self.assertEqual(set(result["mean"]), set(FIXTURE_MEANS))
        for metric, value in FIXTURE_MEANS.items():
            with self.subTest(metric=metric):
                self.assertAlmostEqual(result["mean"][metric], value, places=15)
        # the rounded figures of the worked example (q1 nDCG 0.63991, q3 0.88850; means to 4 places)
        self.assertEqual(round(result["per_query"]["q1"]["ndcg"], 5), 0.63991)
        self.assertEqual(round(result["per_query"]["q3"]["ndcg"], 5), 0.88850)
        self.assertEqual({m: round(v, 4) for m, v in result["mean"].items()},
                         {"recall@5": 0.6667, "success@5": 0.6667, "mrr@5": 0.5, "ndcg@5": 0.5095})

    def test_ideal_comes_from_every_judged_document(self):
        result = rag_eval.evaluate(*load_fixtures(), k=3)
        # q3 top 3: #5 (2), okta (1), sso-setup#1 (unjudged); ideal: 2, 2, 1 from all judged documents
        expected = (3 + 1 / math.log2(3)) / (3 + 3 / math.log2(3) + 1 / 2)
        self.assertAlmostEqual(result["per_query"]["q3"]["ndcg"], expected, places=15)
        self.assertEqual(round(expected, 4), 0.6733)
        # an ideal built from the retrieved documents (2, 1) would give 1.0
        self.assertNotAlmostEqual(result["per_query"]["q3"]["ndcg"], 1.0)

    def test_several_cutoffs(self):
        result = rag_eval.evaluate(*load_fixtures(), k=[3, 1, 3])
        self.assertEqual(result["k"], [1, 3])
        self.assertEqual(set(result["mean"]), {f"{m}@{k}" for m in ("recall", "success", "mrr", "ndcg") for k in (1, 3)})
        self.assertEqual(set(result["per_query"]["q1"]), set(result["mean"]))
        q3, q1 = result["per_query"]["q3"], result["per_query"]["q1"]
        # q3 @1: #5 (2) of #4, #5, okta
        self.assertEqual((q3["recall@1"], q3["success@1"], q3["mrr@1"], q3["ndcg@1"]), (1 / 3, 1.0, 1.0, 3 / 3))
        # q1 @1: shipping#1 unjudged
        self.assertEqual((q1["recall@1"], q1["success@1"], q1["mrr@1"], q1["ndcg@1"]), (0.0, 0.0, 0.0, 0.0))
        # q1 @3: rp#2 (2) @2 of rp#2, rp#3
        self.assertEqual(q1["recall@3"], 1 / 2)
        self.assertAlmostEqual(q1["ndcg@3"], (3 / math.log2(3)) / (3 + 1 / math.log2(3)), places=15)
        self.assertAlmostEqual(result["mean"]["recall@3"], (1 / 2 + 0 + 2 / 3) / 3, places=15)
        self.assertAlmostEqual(result["mean"]["recall@1"], (0 + 0 + 1 / 3) / 3, places=15)
        code, out, err = run_main([QRELS, RUN, "--k", "1,3,5"])
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual(report["k"], [1, 3, 5])
        self.assertEqual(len(report["mean"]), 4 * 3)
        self.assertAlmostEqual(report["mean"]["ndcg@5"], 0.509469461838203, places=15)
        self.assertAlmostEqual(report["mean"]["recall@3"], (1 / 2 + 0 + 2 / 3) / 3, places=15)

    def test_other_measures_on_the_fixtures(self):
        result = rag_eval.evaluate(*load_fixtures(), k=5, measures=["precision", "ap", "judged"])
        self.assertEqual(set(result["mean"]), {"precision@5", "ap@5", "judged@5"})
        expected = {
            # q1: rp#2 @2, rp#3 @4; q2: nothing; q3: #5 @1, okta @2, #4 @5
            "precision@5": (2 / 5 + 0 + 3 / 5) / 3,
            "ap@5": ((1 / 2 + 2 / 4) / 2 + 0 + (1 / 1 + 2 / 2 + 3 / 5) / 3) / 3,
            # judged: q1 rp#2, rp#3; q2 none (pricing#3 is judged for q4 only); q3 three
            "judged@5": (2 / 5 + 0 / 5 + 3 / 5) / 3,
        }
        for metric, value in expected.items():
            with self.subTest(metric):
                self.assertAlmostEqual(result["mean"][metric], value, places=15)
        self.assertAlmostEqual(result["judged"]["judged@5"], expected["judged@5"], places=15)

    def test_unknown_measures_reported_at_once(self):
        with self.assertRaises(ValueError) as ctx:
            rag_eval.evaluate(*load_fixtures(), measures=["ndcg", "ndgc", "foo"])
        message = str(ctx.exception)
        self.assertIn("'ndgc'", message)
        self.assertIn("'foo'", message)
        for m in rag_eval.MEASURES:  # the choices come from the table
            self.assertIn(m.name, message)

    def test_run_queries_against_empty_qrels(self):
        with self.assertRaises(rag_eval.RagEvalError) as ctx:
            rag_eval.evaluate({}, {"q": ["a"]}, 2)
        assert_error_line(self, str(ctx.exception), file="run", quoted=["q"], names=[" 1 ", "--drop-unknown-queries"],
                          prefix="")

    def test_skipped_query_scores_zero_and_stays_in_the_mean(self):
        qrels, run = load_fixtures()
        del run["q3"]
        result = rag_eval.evaluate(qrels, run, k=5)
        self.assertEqual(result["skipped"], ["q3"])
        self.assertEqual(result["queries"], 3)
        self.assertEqual(result["per_query"]["q3"], {"recall": 0.0, "success": 0.0, "mrr": 0.0, "ndcg": 0.0})
        self.assertAlmostEqual(result["mean"]["recall@5"], (1 + 0 + 0) / 3, places=15)
        self.assertAlmostEqual(result["mean"]["ndcg@5"], (Q1_NDCG5 + 0 + 0) / 3, places=15)
        # an unscored query the run skipped stays unscored, not skipped
        del run["q4"]
        result = rag_eval.evaluate(qrels, run, k=5)
        self.assertEqual((result["unscored"], result["skipped"]), (["q4"], ["q3"]))

    def test_run_query_missing_from_the_qrels(self):
        qrels, run = load_fixtures()
        run["q9"] = ["refund-policy#2"]
        with self.assertRaises(ValueError) as ctx:
            rag_eval.evaluate(qrels, run, k=5)
        self.assertIsInstance(ctx.exception, rag_eval.RagEvalError)
        self.assertIn("'q9'", str(ctx.exception))
        result = rag_eval.evaluate(qrels, run, k=5, drop_unknown_queries=True)
        self.assertEqual(result["dropped"], ["q9"])
        self.assertEqual(result["queries"], 3)
        for metric, value in FIXTURE_MEANS.items():
            self.assertAlmostEqual(result["mean"][metric], value, places=15)

    def test_invalid_input_raises_value_error(self):
        qrels, run = load_fixtures()
        for label, args, kwargs in [
            ("k 0", (qrels, run, 0), {}),
            ("k -1", (qrels, run, -1), {}),
            ("k '5'", (qrels, run, "5"), {}),
            ("k []", (qrels, run, []), {}),
            ("k [1, 0]", (qrels, run, [1, 0]), {}),
            ("k 5.0", (qrels, run, 5.0), {}),
            ("k True", (qrels, run, True), {}),
            ("k None", (qrels, run, None), {}),
            ("measures []", (qrels, run, 5), {"measures": []}),
            ("gain", (qrels, run, 5), {"gain": "cubic"}),
            ("min grade 0", (qrels, run, 5), {"min_grade": 0}),
            ("qrels a list", ([], run, 5), {}),
            ("grade True", ({"q1": {"a": True}}, {"q1": ["a"]}, 5), {}),
            ("grade -1", ({"q1": {"a": -1}}, {"q1": ["a"]}, 5), {}),
            ("ranking of numbers", ({"q1": {"a": 1}}, {"q1": [1]}, 5), {}),
            ("ranking a string", ({"q1": {"a": 1}}, {"q1": "a"}, 5), {}),
            ("score NaN", ({"q1": {"a": 1}}, {"q1": {"a": math.nan}}, 5), {}),
            ("nothing to score", ({"q1": {"a": 0}}, {"q1": ["a"]}, 5), {}),
        ]:
            with self.subTest(label):
                assert_value_error(self, rag_eval.evaluate, *args, **kwargs)

    def test_inputs_are_not_modified(self):
        qrels, run = load_fixtures()
        run["q1"] = run["q1"] + ["shipping#1"]  # a duplicate
        run["q9"] = ["x"]
        before = copy.deepcopy((qrels, run))
        rag_eval.evaluate(qrels, run, k=[1, 5], judged_only=True, drop_unknown_queries=True)
        self.assertEqual((qrels, run), before)


class TestDeltaSplit(unittest.TestCase):
    """delta_split: total = labels + system, for the metrics that all three means have."""

    def test_only_metrics_in_all_three(self):
        now = {"recall@5": 0.5, "mrr@5": 0.25, "ndcg@5": 0.75}
        old_on_new = {"recall@5": 0.75, "mrr@5": 0.5}  # no ndcg@5
        old_on_old = {"recall@5": 1.0, "ndcg@5": 0.5}  # no mrr@5
        self.assertEqual(rag_eval._delta_split(now, old_on_new, old_on_old),
                         {"recall@5": {"total": 0.5 - 1.0, "labels": 0.75 - 1.0, "system": 0.5 - 0.75}})


class TestEvaluationChecksAndChunks(unittest.TestCase):
    """Evaluation's input checks say what is wrong and where; chunk ids become documents; unjudged
    documents and abstention are counted as documented (each test kills a planted mutant that lived)."""

    def assert_error(self, message, func, *args, **kwargs):
        error = assert_value_error(self, func, *args, **kwargs)
        self.assertIsInstance(error, rag_eval.RagEvalError)
        self.assertEqual(str(error), message)

    def test_a_ranking_that_is_neither_list_nor_object(self):
        for ranking, kind in (("ab", "a string"), (None, "null"), (3, "a number")):
            with self.subTest(ranking=ranking):
                self.assert_error(f"ranking: expected a list of document ids or an object of document -> score, "
                                  f"got {kind}", rag_eval.ndcg_at_k, ranking, {"a": 1}, 1)

    def test_ids_must_be_strings(self):
        # An integer id says what to write instead (issue 33); the files read it as that string.
        self.assert_error("run: query id must be a string, got a number (write '1')", rag_eval.evaluate,
                          {"q": {"a": 1}}, {1: ["a"]})
        self.assert_error("qrels: document id must be a string, got a number (write '1')",
                          rag_eval.evaluate, {"q": {1: 1}}, {"q": ["a"]})
        self.assert_error("qrels: query id must be a string, got a number (write '1')", rag_eval.evaluate,
                          {1: {"a": 1}}, {"q": ["a"]})
        self.assert_error("qrels: query id must be a string, got a number", rag_eval.evaluate, {1.5: {"a": 1}},
                          {"q": ["a"]})
        # a bad ranking after a good one (lists and scores mixed, so the check goes query by query)
        self.assert_error("run: query 'c': ranking must be a list of strings, found a number (write '1')",
                          rag_eval.evaluate, {"a": {"x": 1}}, {"a": ["x"], "b": {"x": 1.0}, "c": [1]},
                          drop_unknown_queries=True)

    def test_a_bad_grade_names_its_query_when_there_is_one(self):
        self.assert_error("qrels: query 'q', document 'a': grade must be a non-negative integer (at most "
                          f"{rag_eval._MAX_GRADE}), got -1", rag_eval.evaluate, {"q": {"a": -1}}, {"q": ["a"]})
        self.assert_error(f"grades: document 'a': grade must be a non-negative integer (at most {rag_eval._MAX_GRADE}), "
                          "got -1", rag_eval.ndcg_at_k, ["a"], {"a": -1}, 1)

    def test_unknown_queries_name_the_first_in_sorted_order(self):
        # run queries zz and za are not judged: sorted, za comes first; the qrels' first query is named
        self.assert_error("run: 2 run queries are not in the qrels (first: 'za'; the qrels have 'q'); drop them with "
                          "--drop-unknown-queries", rag_eval.evaluate, {"r": {"a": 1}, "q": {"a": 1}},
                          {"zz": ["a"], "za": ["a"], "q": ["a"]})

    def test_abstain_below_must_be_finite(self):
        for bad in (float("nan"), float("inf")):
            with self.subTest(bad=bad):
                self.assert_error(f"abstain_below must be a finite number, got {bad!r}", rag_eval.evaluate,
                                  {"q": {"a": 1}}, {"q": {"a": 1.0}}, abstain_below=bad)

    def test_abstention_by_best_score(self):
        # q2 and q3 have no relevant document (unscored); their best scores are 0.3 and 0.6:
        # below 0.5 only q2 abstains, below 0.7 both, below 0.3 neither (0.3 is not below 0.3)
        qrels = {"q1": {"a": 1}, "q2": {"b": 0}, "q3": {"c": 0}}
        run = {"q1": {"a": 0.9}, "q2": {"c": 0.3, "e": 0.1}, "q3": {"d": 0.6}}
        for threshold, abstained in ((0.5, ["q2"]), (0.7, ["q2", "q3"]), (0.3, [])):
            with self.subTest(threshold=threshold):
                result = rag_eval.evaluate(qrels, run, 1, abstain_below=threshold)
                self.assertEqual(result["abstention"], {"queries": 2, "abstained": abstained, "share": len(abstained) / 2})

    def test_documents_run_keeps_each_documents_best_chunk(self):
        # scored: d's best chunk is d#2 (0.9); a list: each document at its first (best) chunk's place
        self.assertEqual(rag_eval._documents_run({"q": {"d#1": 0.5, "e#1": 0.7, "d#2": 0.9}}, "#"), {"q": {"d": 0.9, "e": 0.7}})
        self.assertEqual(rag_eval._documents_run({"q": ["d#2", "e#1", "d#1"]}, "#"), {"q": ["d", "e"]})
        self.assertEqual(rag_eval._documents_qrels({"q": {"d#1": 1, "d#2": 2, "e#3": 0}}, "#"), {"q": {"d": 2, "e": 0}})

    def test_evaluate_with_doc_id_sep_on_a_scored_run(self):
        # chunks -> documents: d (best 0.9) at rank 1, e (0.7) at rank 2; d judged 2 by its best chunk, e unjudged
        # nDCG@2 = (3 / 1) / (3 / 1) = 1; precision@2 = 1 / 2
        run = {"q": {"d#1": 0.5, "e#1": 0.7, "d#2": 0.9}}
        result = rag_eval.evaluate({"q": {"d#1": 1, "d#2": 2}}, run, 2, measures=["ndcg", "precision"], doc_id_sep="#")
        self.assertEqual(result["per_query"]["q"], {"ndcg": 1.0, "precision": 1 / 2})
        self.assertEqual(rag_eval.ndcg_at_k({"d#1": 0.5, "e#1": 0.7, "d#2": 0.9}, {"d#1": 1, "d#2": 2}, 2, doc_id_sep="#"), 1.0)

    def test_documents_whose_scores_tie_go_by_document_id(self):
        # d1_3 and d12_1 both score 7.5: as chunks, trec_eval puts d1_3 first ("_" sorts above "2"); as
        # documents (the MaxP run), d12 and d1 tie at 7.5 and d12 goes first ("2" sorts above the end of
        # "d1"). The document rule holds in the library and in every reader: d1 at rank 2, mrr 1/2.
        qrels, run = {"q1": {"d1": 1}}, {"q1": {"d1_3": 7.5, "d12_1": 7.5}}
        self.assertEqual(rag_eval._documents_run(run, "_"), {"q1": {"d1": 7.5, "d12": 7.5}})
        self.assertEqual(rag_eval.evaluate(qrels, run, 5, measures=["mrr"], doc_id_sep="_")["mean"]["mrr@5"], 0.5)
        self.assertEqual(rag_eval.evaluate({"q1": {"d1_3": 1}}, run, 5, measures=["mrr"])["mean"]["mrr@5"], 1.0)
        with tempfile.TemporaryDirectory() as tmp:
            paths = [os.path.join(tmp, name) for name in ("q.json", "r.trec")]
            with open(paths[0], "w") as out:
                json.dump(qrels, out)
            with open(paths[1], "w") as out:
                out.write("q1 Q0 d1_3 1 7.5 t\nq1 Q0 d12_1 2 7.5 t\n")
            code, out, err = run_main([*paths, "--doc-id-sep", "_", "--measures", "mrr"])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["mean"]["mrr@5"], 0.5)

    def test_unjudged_documents_by_rank_then_query(self):
        # q1: x (unjudged) @1, a @2, b @3, y (unjudged) @4; q2 by score: z (unjudged, 0.9) @1, c @2;
        # q3 is not judged, so not listed
        qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 2}}
        run = {"q1": ["x", "a", "b", "y"], "q2": {"c": 0.5, "z": 0.9}, "q3": ["w"]}
        self.assertEqual(rag_eval._unjudged_documents(qrels, run, 4), [("q1", "x", 1), ("q2", "z", 1), ("q1", "y", 4)])
        self.assertEqual(rag_eval._unjudged_documents(qrels, run, 3), [("q1", "x", 1), ("q2", "z", 1)])
        # with a separator, chunks of a judged document are judged
        self.assertEqual(rag_eval._unjudged_documents({"q": {"a": 1}}, {"q": ["a#1", "b#1", "a#2"]}, 3, doc_id_sep="#"),
                         [("q", "b", 2)])

    def test_abstention_of_queries_the_run_left_empty(self):
        # q2, q3, q4 have no relevant document; the run has no entry for q2, an empty ranking for q3,
        # and a document for q4: q2 and q3 abstained, with or without a threshold (no scores needed for them)
        qrels = {"q1": {"a": 1}, "q2": {"b": 0}, "q3": {"b": 0}, "q4": {"b": 0}}
        for run, threshold in (({"q1": ["a"], "q3": [], "q4": ["c"]}, None),
                               ({"q1": {"a": 1.0}, "q3": {}, "q4": {"c": 0.9}}, 0.5)):
            with self.subTest(threshold=threshold):
                abstention = rag_eval.evaluate(qrels, run, 1, abstain_below=threshold)["abstention"]
                self.assertEqual(abstention, {"queries": 3, "abstained": ["q2", "q3"], "share": 2 / 3})

    def test_conventions_are_checked(self):
        for options, message in (({"judged_only": "yes"}, "judged_only must be true or false, got 'yes'"),
                                 ({"gain": "log"}, "gain must be one of exp, linear, got 'log'"),
                                 ({"min_grade": 0}, "min grade must be a positive integer, got 0"),
                                 ({"doc_id_sep": ""}, "doc_id_sep must be a non-empty string, got ''")):
            with self.subTest(options=options):
                self.assert_error(message, rag_eval.evaluate, {"q": {"a": 1}}, {"q": ["a"]}, **options)

    def test_a_metric_asked_at_its_own_cutoff(self):
        # ndcg@2 at cutoff 2 only, recall at every cutoff (1 and 3); a ranks 1st, b (grade 1) 2nd
        result = rag_eval.evaluate({"q": {"a": 0, "b": 1}}, {"q": ["a", "b"]}, [1, 3], measures=["nDCG@2", "recall"])
        self.assertEqual(result["mean"], {"recall@1": 0.0, "ndcg@2": (1 / math.log2(3)) / 1, "recall@3": 1.0})

    def test_judged_filter_keeps_by_grade_1_by_default(self):
        keep = rag_eval._judged_filter({"q": {"a": 1}, "u": {"b": 0}})
        # q has a relevant document (grade 1): its unjudged x goes; u has none: kept whole
        self.assertEqual((keep("q", "a"), keep("q", "x"), keep("u", "x"), keep("other", "x")), (True, False, True, True))
        self.assertTrue(rag_eval._judged_filter({"q": {"a": 1}}, min_grade=2)("q", "x"))  # no grade 2: kept whole


class TestConstantsAsDocumented(unittest.TestCase):
    """The numbers users see, written out here (a test that compares with rag_eval's own constant cannot fail)."""

    def test_exit_codes_as_the_readme_and_help_list_them(self):
        codes = (rag_eval.EXIT_OK, rag_eval.EXIT_REGRESSION, rag_eval.EXIT_ERROR, rag_eval.EXIT_INCONCLUSIVE,
                 rag_eval.EXIT_INTERRUPTED, rag_eval.EXIT_BROKEN_PIPE, rag_eval.EXIT_TERMINATED)
        self.assertEqual(codes, (0, 1, 2, 3, 130, 141, 143))  # 128 + SIGPIPE (13), 128 + SIGTERM (15)
        code, out, _ = run_main(["--help"])
        self.assertEqual(code, 0)
        self.assertIn("\n  143  terminated (SIGTERM); no file was left half-written\n", out)

    def test_an_error_line_is_at_most_300_characters(self):
        code, out, err = run_main([os.path.join("no-such-folder", "q" * 400 + ".json"), "run.json"])
        self.assertEqual((code, out, len(err)), (rag_eval.EXIT_ERROR, "", 301))  # 300 and the line end
        self.assertTrue(err.startswith("rag_eval: error: no-such-folder") and err.endswith("qqq...\n"), err)


if __name__ == "__main__":
    unittest.main()


class TestShapesTheLibraryTakes(unittest.TestCase):
    """What a notebook passes (issue 33): (id, score) pairs and tuples, a tuple ranking, one measure's name.
    Before, a tuple pair was "found a number", [["doc", 0.9]] "found a list", measures="ndcg" the measures
    'n', 'd', 'c', 'g'."""

    def test_pairs_and_tuples_are_the_scored_run(self):
        qrels = {"q": {"a": 2, "b": 1}}
        scored = rag_eval.evaluate(qrels, {"q": {"a": 0.2, "b": 0.9}}, 2)
        for run in ({"q": [("a", 0.2), ("b", 0.9)]}, {"q": [["a", 0.2], ["b", 0.9]]}, {"q": (("b", 0.9), ("a", 0.2))}):
            with self.subTest(run=run):
                self.assertEqual(rag_eval.evaluate(qrels, run, 2), scored)
        self.assertEqual(rag_eval.evaluate(qrels, {"q": ("b", "a")}, 2), rag_eval.evaluate(qrels, {"q": ["b", "a"]}, 2))
        with self.assertRaisesRegex(rag_eval.RagEvalError, r"^run: query 'q': expected \[document id, score\] pairs"):
            rag_eval.evaluate(qrels, {"q": [("a",)]}, 2)

    def test_what_the_files_take(self):
        """measures="ndcg,recall" (as --measures) was "unknown measure 'ndcg,recall'"; a grade 1.0 (pandas), read
        from a file as 1, was refused in memory as "is this a run?"; a set or generator ranking was "a number", a
        path "a string"."""
        qrels, run = load_fixtures()
        self.assertEqual(rag_eval.evaluate(qrels, run, 5, measures="ndcg@5,recall"),
                         rag_eval.evaluate(qrels, run, 5, measures=["ndcg@5", "recall"]))
        floats = {qid: {doc: float(grade) for doc, grade in docs.items()} for qid, docs in qrels.items()}
        self.assertEqual(rag_eval.evaluate(floats, run, 5), rag_eval.evaluate(qrels, run, 5))
        self.assertEqual(floats["q1"], {doc: float(grade) for doc, grade in qrels["q1"].items()})  # not changed
        with self.assertRaisesRegex(rag_eval.RagEvalError, r"grade must be .*, got 1\.5"):
            rag_eval.evaluate({"q": {"a": 1.5}}, {"q": ["a"]}, 5)
        for ranking, kind in (({"a"}, "a set"), ((d for d in "a"), "a generator")):
            with self.subTest(kind), self.assertRaisesRegex(rag_eval.RagEvalError, f"score, got {kind}$"):
                rag_eval.evaluate({"q": {"a": 1}}, {"q": ranking}, 5)
        with self.assertRaisesRegex(rag_eval.RagEvalError, r"got a string \(a path\? read_qrels\(path\)\)$"):
            rag_eval.evaluate("qrels.json", run, 5)
        with self.assertRaisesRegex(rag_eval.RagEvalError, r"got a string \(a path\? read_run\(path\)\)$"):
            rag_eval.evaluate(qrels, "run.json", 5)

    def test_main_takes_a_list(self):
        """main("qrels.json run.json") read a character at a time: "two runs are named 'r'", exit 2."""
        with self.assertRaisesRegex(TypeError, r"^main\(\) takes a list of arguments: main\(\['q.json', 'r.json'\]\)$"):
            rag_eval.main("q.json r.json")

    def test_one_measure_by_name_and_the_key_rule(self):
        qrels, run = load_fixtures()
        self.assertEqual(rag_eval.evaluate(qrels, run, 5, measures="ndcg"),
                         rag_eval.evaluate(qrels, run, 5, measures=["ndcg"]))
        # per_query keys: bare for one integer k, measure@k for a list, even of one cutoff
        self.assertEqual(set(rag_eval.evaluate(qrels, run, 5, measures="ndcg")["per_query"]["q1"]), {"ndcg"})
        self.assertEqual(set(rag_eval.evaluate(qrels, run, [5], measures="ndcg")["per_query"]["q1"]), {"ndcg@5"})
        self.assertIn("``per_query[qid][\"ndcg@5\"]`` when ``k`` is a list", rag_eval.evaluate.__doc__)
