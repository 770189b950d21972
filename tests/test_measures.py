"""The measures: normalising a ranking once, each measure worked by hand, the
per-measure functions, and metric names as people spell them (trec_eval,
ir_measures, ranx, BEIR, MTEB), parsed and printed back in ours.

Conventions in the comments: gain ``2**grade - 1`` (exp): grade 2 -> 3,
grade 1 -> 1; discount ``log2(1 + rank)``: rank 1 -> 1, rank 2 -> log2 3,
rank 3 -> 2, rank 4 -> log2 5, rank 5 -> log2 6.
"""

import json
import math
import os
import re
import tempfile
import unittest

import rag_eval
from tests.helpers import QRELS, RUN, assert_error_line, assert_value_error, load_fixtures, run_main


class TestSpellings(unittest.TestCase):
    def test_every_tool_spelling_of_the_table(self):
        cases = {
            # trec_eval, its -m form, ir_measures, ranx, BEIR, MTEB
            "ndcg": ["ndcg@10", "ndcg_cut_10", "ndcg_cut.10", "nDCG@10", "NDCG@10", "ndcg_at_10", "ndcg_burges@10"],
            "recall": ["recall@10", "recall_10", "recall.10", "R@10", "Recall@10", "recall_at_10"],
            "success": ["success@10", "success_10", "Success@10", "hit_rate@10"],
            "mrr": ["mrr@10", "RR@10", "MRR@10", "mrr_at_10"],
            "precision": ["precision@10", "P_10", "P.10", "P@10", "precision_at_10"],
            "ap": ["ap@10", "map_cut_10", "AP@10", "map@10", "MAP@10", "map_at_10"],
            "judged": ["judged@10", "Judged@10"],
        }
        for measure, spellings in cases.items():
            for spelling in spellings:
                with self.subTest(spelling=spelling):
                    self.assertEqual(rag_eval.parse_metric(spelling), (measure, 10))
                    self.assertEqual(rag_eval._canonical_metric(spelling), f"{measure}@10")

    def test_names_that_are_not_ours(self):
        # recip_rank has no cutoff (another number); a zero or padded cutoff is no cutoff.
        for text in ("recip_rank", "recip_rank@10", "ndcg@0", "ndcg@05", "ndcg", "ndcg_cut_", "foo@10", "ndcg@1x",
                     "ndcg@\u00b9"):
            with self.subTest(text=text), self.assertRaisesRegex(rag_eval.RagEvalError, f"^[^']*{re.escape(repr(text))} "):
                rag_eval.parse_metric(text)

    def test_the_hint_names_every_measure_that_parses(self):
        # iou@5 parses (evidence spans), so the hint after a name that does not must offer iou as well
        names = [m.name for m in rag_eval.MEASURES] + [m.name for m in rag_eval._SPAN_MEASURES if m.name not in
                                                       [m.name for m in rag_eval.MEASURES]]
        self.assertIn("iou", names)
        with self.assertRaises(rag_eval.RagEvalError) as caught:
            rag_eval.parse_metric("iuo@5")
        self.assertTrue(str(caught.exception).endswith(f" {', '.join(names)})"), caught.exception)
        for name in names:
            self.assertEqual(rag_eval.parse_metric(f"{name}@5"), (name, 5))
        # the document level of evidence spans is reported, never asked for: doc.ndcg@5 is refused with the
        # option, before any input is read (a missing file is not the first thing named)
        code, out, err = run_main(["missing.json", "missing_run.json", "--measures", "doc.ndcg@5"])
        self.assertEqual((code, out), (2, ""))
        assert_error_line(self, err, names=["argument --measures: ", f" {', '.join(names)})"], quoted=["doc.ndcg@5"])

    def test_ours_round_trip(self):
        for m in rag_eval.MEASURES:
            for k in (1, 10, 1000):
                name = rag_eval.format_metric(m.name, k)
                self.assertEqual(rag_eval.format_metric(*rag_eval.parse_metric(name)), name)

    def test_slices_keep_their_tag(self):
        self.assertEqual(rag_eval._canonical_metric("pricing:nDCG@5"), "pricing:ndcg@5")

    def test_explain_lists_the_spellings(self):
        text = rag_eval._explain()
        for stem in ("ndcg_cut_k", "hit_rate@k", "r@k", "map_at_k"):
            self.assertIn(stem, text)


class TestNormalising(unittest.TestCase):
    def test_scored_ties_broken_by_docid_descending(self):
        # a and b tie at 1.0: b (the larger id) comes first, as in trec_eval
        grades = {"a": 1}
        self.assertEqual(rag_eval.reciprocal_rank({"a": 1.0, "b": 1.0}, grades, 2), 1 / 2)
        self.assertEqual(rag_eval.success_at_k({"a": 1.0, "b": 1.0}, grades, 1), 0.0)
        self.assertEqual(rag_eval.reciprocal_rank({"b": 1.0, "a": 1.0}, grades, 2), 1 / 2)  # dict order is irrelevant
        # string order, not numeric: "10" < "9", so "9" ranks first
        self.assertEqual(rag_eval.reciprocal_rank({"10": 0.5, "9": 0.5}, {"10": 1}, 2), 1 / 2)
        # a higher score wins over the id
        self.assertEqual(rag_eval.reciprocal_rank({"a": 1.5, "b": 1.0}, grades, 2), 1 / 1)
        result = rag_eval.evaluate({"q1": grades}, {"q1": {"a": 1.0, "b": 1.0}}, k=2)
        self.assertEqual(result["per_query"]["q1"]["mrr"], 1 / 2)

    def test_ties_straddling_cutoffs_are_counted(self):
        qrels = {"q1": {"a": 1}, "q2": {"y": 1}, "q3": {"m": 1}}
        run = {
            "q1": {"a": 1.0, "b": 1.0, "c": 0.5},  # b, a | c: tie across k=1 only
            "q2": {"x": 2.0, "y": 1.0, "z": 1.0},  # x | z, y: tie across k=2; inside the top 3 at k=3
            "q3": ["m", "n", "o"],  # a ranked list has no scores, so no ties
        }
        result = rag_eval.evaluate(qrels, run, k=[1, 2, 3])
        self.assertEqual(result["ties"], {"1": 1, "2": 1, "3": 0})
        self.assertEqual(result["per_query"]["q1"]["mrr@2"], 1 / 2)  # a behind b
        self.assertEqual(result["per_query"]["q2"]["mrr@3"], 1 / 3)  # y behind x and z
        # a tie entirely inside the top k is not counted
        result = rag_eval.evaluate({"q1": {"a": 1}}, {"q1": {"a": 1.0, "b": 1.0, "c": 0.5}}, k=2)
        self.assertEqual(result["ties"], {"2": 0})
        # three-way tie across k=2 (c, b | a by docid; b is judged, so something was evaluated)
        result = rag_eval.evaluate({"q1": {"a": 1, "b": 0}}, {"q1": {"a": 1.0, "b": 1.0, "c": 1.0}}, k=2)
        self.assertEqual(result["ties"], {"2": 1})

    def test_ties_reported_by_the_command_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            qpath = os.path.join(tmp, "q.json")
            rpath = os.path.join(tmp, "r.trec")
            with open(qpath, "w") as f:
                json.dump({"q1": {"a": 1}}, f)
            with open(rpath, "w") as f:
                f.write("q1 Q0 a 1 1.0 t\nq1 Q0 b 2 1.0 t\nq1 Q0 c 3 0.5 t\n")
            code, out, err = run_main([qpath, rpath, "--k", "1,2"])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["ties"], {"1": 1, "2": 0})
        self.assertTrue(any(line.startswith("rag_eval: note:") and "tie" in line for line in err.splitlines()), err)

    def test_a_tie_across_the_largest_cutoff_survives_streaming(self):
        # The command line streams TREC and JSONL runs keeping one document more than the largest k,
        # so that a tie across that k is still seen: b, a tie at 1.0 (across k = 1); d, e, f tie at
        # 0.5 (across k = 4 and k = 5).  Every form gives what evaluate() gives on the whole run.
        scores = {"a": 1.0, "b": 1.0, "c": 0.7, "d": 0.5, "e": 0.5, "f": 0.5, "g": 0.1}
        qrels = {"q1": {"a": 1, "e": 2}}
        lines = [("q1", doc, score) for doc, score in scores.items()]
        with tempfile.TemporaryDirectory() as tmp:
            qpath = os.path.join(tmp, "q.json")
            with open(qpath, "w") as f:
                json.dump(qrels, f)
            forms = {"json": json.dumps({"q1": scores}),
                     "trec": "".join(f"{q} Q0 {d} 0 {s} t\n" for q, d, s in lines),
                     "jsonl": "".join(json.dumps({"query_id": q, "doc_id": d, "score": s}) + "\n" for q, d, s in lines)}
            for k, ties in (("1", {"1": 1}), ("4", {"4": 1}), ("5", {"5": 1}), ("1,2", {"1": 1, "2": 0})):
                cutoffs = [int(c) for c in k.split(",")]
                whole = rag_eval.evaluate(qrels, {"q1": scores}, cutoffs if len(cutoffs) > 1 else cutoffs[0])
                self.assertEqual(whole["ties"], ties, k)
                for form, text in forms.items():
                    rpath = os.path.join(tmp, f"r.{form}")
                    with open(rpath, "w") as f:
                        f.write(text)
                    with self.subTest(k=k, form=form):
                        code, out, err = run_main([qpath, rpath, "--k", k, "--per-query"])
                        self.assertEqual(code, 0, err)
                        report = json.loads(out)
                        self.assertEqual(report["ties"], ties)
                        self.assertEqual(report["per_query"]["q1"],
                                         rag_eval.build_report(whole, per_query=True)["per_query"]["q1"])

    def test_duplicates_count_once_at_first_position(self):
        # x, a, x, b -> unique x, a, b: b is at rank 3, not 4
        grades = {"a": 1, "b": 1}
        self.assertEqual(rag_eval.recall_at_k(["x", "a", "x", "b"], grades, 3), 2 / 2)
        self.assertEqual(rag_eval.reciprocal_rank(["x", "a", "x", "b"], grades, 3), 1 / 2)
        # a relevant document repeated keeps its first rank: a @2, not @1
        self.assertEqual(rag_eval.reciprocal_rank(["x", "a", "a"], {"a": 1}, 3), 1 / 2)

    def test_duplicates_cannot_push_measures_above_one(self):
        ranking = ["a", "a", "a", "b"]  # grades: a = 2; unique: a, b
        grades = {"a": 2}
        for name, func, expected in [
            ("ndcg", rag_eval.ndcg_at_k, 3 / 3),  # DCG 3/1 over ideal 3/1, not (3 + 3/log2 3 + 3/2) / 3
            ("recall", rag_eval.recall_at_k, 1 / 1),  # not 3/1
            ("precision", rag_eval.precision_at_k, 1 / 3),  # a, b, (nothing): 1 of 3, not 3 of 3
            ("success", rag_eval.success_at_k, 1.0),
            ("mrr", rag_eval.reciprocal_rank, 1 / 1),
            ("ap", rag_eval.ap_at_k, (1 / 1) / 1),
        ]:
            with self.subTest(name):
                self.assertEqual(func(ranking, grades, 3), expected)
        result = rag_eval.evaluate({"q1": grades}, {"q1": ranking}, k=3, measures=["ndcg", "recall", "precision"])
        self.assertEqual(result["per_query"]["q1"], {"ndcg": 1.0, "recall": 1.0, "precision": 1 / 3})


class TestMeasures(unittest.TestCase):
    # one query: grades a = 2, b = 1, c = 0 (judged, rejected), d = 2 (never retrieved)
    GRADES = {"a": 2, "b": 1, "c": 0, "d": 2}
    RANKING = ["c", "a", "x", "b"]  # c (0) @1, a (2) @2, x (unjudged) @3, b (1) @4

    def test_hand_worked_values(self):
        r, g = self.RANKING, self.GRADES
        cases = [
            (rag_eval.recall_at_k, 1, 0 / 3),
            (rag_eval.recall_at_k, 2, 1 / 3),  # a of a, b, d
            (rag_eval.recall_at_k, 10, 2 / 3),  # a, b of a, b, d
            (rag_eval.success_at_k, 1, 0.0),
            (rag_eval.success_at_k, 2, 1.0),
            (rag_eval.reciprocal_rank, 1, 0.0),
            (rag_eval.reciprocal_rank, 4, 1 / 2),
            (rag_eval.ndcg_at_k, 1, 0.0),
            # DCG: 3/log2 3 (a @2); ideal: 3/1 + 3/log2 3 (a, d)
            (rag_eval.ndcg_at_k, 2, (3 / math.log2(3)) / (3 + 3 / math.log2(3))),
            # DCG: a @2, b @4; ideal: a, d, b (c has gain 0)
            (rag_eval.ndcg_at_k, 4, (3 / math.log2(3) + 1 / math.log2(5)) / (3 + 3 / math.log2(3) + 1 / 2)),
            (rag_eval.precision_at_k, 4, 2 / 4),  # a, b
            (rag_eval.precision_at_k, 10, 2 / 10),  # k counts even past the end of the ranking
            (rag_eval.ap_at_k, 4, (1 / 2 + 2 / 4) / 3),  # precision at a (@2) and b (@4), over 3 relevant
            (rag_eval.ap_at_k, 2, (1 / 2) / 3),
            (rag_eval.judged_at_k, 4, 3 / 4),  # c, a, b judged; x not
            (rag_eval.judged_at_k, 1, 1 / 1),  # c: grade 0 is judged
            (rag_eval.judged_at_k, 8, 3 / 8),
        ]
        for func, k, expected in cases:
            with self.subTest(func=func.__name__, k=k):
                self.assertAlmostEqual(func(r, g, k), expected, places=15)

    def test_edge_cases(self):
        for label, func, ranking, grades, k, expected in [
            ("empty ranking", rag_eval.ndcg_at_k, [], {"a": 1}, 5, 0.0),
            ("empty ranking recall", rag_eval.recall_at_k, [], {"a": 1}, 5, 0.0),
            ("no relevant document recall", rag_eval.recall_at_k, ["a"], {"a": 0}, 5, 0.0),
            ("no relevant document ndcg", rag_eval.ndcg_at_k, ["a"], {"a": 0}, 5, 0.0),
            ("no relevant document ap", rag_eval.ap_at_k, ["a"], {"a": 0}, 5, 0.0),
            ("no judgments judged", rag_eval.judged_at_k, ["a"], {}, 5, 0.0),
            ("k larger than everything", rag_eval.ndcg_at_k, ["a"], {"a": 1}, 1000, 1.0),
            ("ids are strings: '01' is not '1'", rag_eval.success_at_k, ["01"], {"1": 1}, 5, 0.0),
            ("perfect ranking", rag_eval.ndcg_at_k, ["a", "b"], {"a": 2, "b": 1}, 2, 1.0),
            ("scored dict ranking", rag_eval.reciprocal_rank, {"a": 0.1, "b": 0.9}, {"a": 1}, 2, 1 / 2),
        ]:
            with self.subTest(label):
                self.assertEqual(func(ranking, grades, k), expected)

    def test_invalid_arguments(self):
        for label, kwargs in [
            ("k 0", dict(k=0)),
            ("k -1", dict(k=-1)),
            ("k 1.5", dict(k=1.5)),
            ("k 5.0", dict(k=5.0)),
            ("k True", dict(k=True)),
            ("k '5'", dict(k="5")),
            ("grade -1", dict(grades={"a": -1})),
            ("grade 1.5", dict(grades={"a": 1.5})),
            ("grade True", dict(grades={"a": True})),
            ("grade '2'", dict(grades={"a": "2"})),
            ("unknown gain", dict(gain="cubic")),
            ("min grade 0", dict(min_grade=0)),
            ("ranking a string", dict(ranking="ab")),
            ("ranking of numbers", dict(ranking=[1, 2])),
            ("ranking None", dict(ranking=None)),
        ]:
            with self.subTest(label):
                args = dict(ranking=["a", "b"], grades={"a": 1}, k=2)
                args.update(kwargs)
                assert_value_error(self, rag_eval.ndcg_at_k, **args)

    def test_measure_table(self):
        names = [m.name for m in rag_eval.MEASURES]
        self.assertEqual(names[:4], ["recall", "success", "mrr", "ndcg"])
        self.assertEqual(set(names), {"recall", "success", "mrr", "ndcg", "precision", "ap", "judged"})
        self.assertEqual(len(names), len(set(names)))

    def test_metric_names_round_trip(self):
        for text in ("ndcg@10", "recall@1", "judged@100"):
            with self.subTest(text):
                self.assertEqual(rag_eval.format_metric(*rag_eval.parse_metric(text)), text)
        for text in ("ndcg", "ndcg@", "ndcg@0", "ndcg@05", "ndgc@5", "ndcg@-1", "ndcg@1.5", "@5"):
            with self.subTest(text):
                with self.assertRaises(ValueError):
                    rag_eval.parse_metric(text)

    def test_gain_linear_and_exp(self):
        ranking, grades = ["b", "a"], {"a": 2, "b": 1}  # b (1) @1, a (2) @2
        # exp gains: 1, 3; ideal 3, 1
        self.assertAlmostEqual(rag_eval.ndcg_at_k(ranking, grades, 2),
                               (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)), places=15)
        # linear gains: 1, 2; ideal 2, 1
        self.assertAlmostEqual(rag_eval.ndcg_at_k(ranking, grades, 2, gain="linear"),
                               (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)), places=15)
        # on the fixtures, q1: 2 @2, 1 @4; ideal 2, 1
        qrels, run = load_fixtures()
        lin = rag_eval.evaluate(qrels, run, k=5, gain="linear")
        q1_lin = (2 / math.log2(3) + 1 / math.log2(5)) / (2 + 1 / math.log2(3))
        q3_lin = (2 + 1 / math.log2(3) + 2 / math.log2(6)) / (2 + 2 / math.log2(3) + 1 / 2)  # 2 @1, 1 @2, 2 @5
        self.assertAlmostEqual(lin["per_query"]["q1"]["ndcg"], q1_lin, places=15)
        self.assertAlmostEqual(lin["per_query"]["q3"]["ndcg"], q3_lin, places=15)
        self.assertEqual(lin["per_query"]["q1"]["recall"], 1.0)  # gain touches nDCG only
        code, out, err = run_main([QRELS, RUN, "--gain", "linear"])
        self.assertEqual(code, 0, err)
        self.assertAlmostEqual(json.loads(out)["mean"]["ndcg@5"], (q1_lin + 0 + q3_lin) / 3, places=15)

    def test_min_grade(self):
        ranking, grades = ["b", "a"], {"a": 2, "b": 1}  # b (1) @1, a (2) @2
        for func, k, one, two in [
            (rag_eval.reciprocal_rank, 2, 1 / 1, 1 / 2),  # min grade 2: a @2 is the first relevant
            (rag_eval.success_at_k, 1, 1.0, 0.0),
            (rag_eval.recall_at_k, 1, 1 / 2, 0 / 1),  # relevant: a, b | a only
            (rag_eval.precision_at_k, 2, 2 / 2, 1 / 2),
            (rag_eval.ap_at_k, 2, (1 / 1 + 2 / 2) / 2, (1 / 2) / 1),
            # nDCG gains do not move: (1 + 3/log2 3) / (3 + 1/log2 3) either way
            (rag_eval.ndcg_at_k, 2, (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)),
             (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3))),
        ]:
            with self.subTest(func=func.__name__):
                self.assertAlmostEqual(func(ranking, grades, k), one, places=15)
                self.assertAlmostEqual(func(ranking, grades, k, min_grade=2), two, places=15)
        # on the fixtures, q3 top 2: #5 (2), okta (1); at min grade 2 the relevant set is #4, #5
        qrels, run = load_fixtures()
        result = rag_eval.evaluate(qrels, run, k=2, min_grade=2)
        self.assertEqual(result["per_query"]["q3"]["recall"], 1 / 2)  # #5 of #4, #5 (min grade 1: 2 of 3)
        self.assertAlmostEqual(result["per_query"]["q3"]["ndcg"],
                               (3 + 1 / math.log2(3)) / (3 + 3 / math.log2(3)), places=15)  # 2, 1 over 2, 2
        code, out, err = run_main([QRELS, RUN, "--k", "2", "--min-grade", "2"])
        self.assertEqual(code, 0, err)
        # recall@2: q1 rp#2 @2 of rp#2 -> 1; q2 0; q3 1/2
        self.assertEqual(json.loads(out)["mean"]["recall@2"], round((1 + 0 + 1 / 2) / 3, 4))

    def test_trec_negative_grade(self):
        with tempfile.TemporaryDirectory() as tmp:
            qpath = os.path.join(tmp, "qrels.trec")
            with open(qpath, "w") as f:
                f.write("q1 0 a 2\nq1 0 b -1\nq1 0 c 1\n")
            rpath = os.path.join(tmp, "run.trec")
            with open(rpath, "w") as f:
                f.write("q1 Q0 b 1 3.0 t\nq1 Q0 a 2 2.0 t\nq1 Q0 c 3 1.0 t\n")
            qrels, run = rag_eval.read_qrels(qpath), rag_eval.read_run(rpath)
            names = ["recall", "mrr", "ndcg", "judged"]
            plain = rag_eval.evaluate(qrels, run, k=3, measures=names)["per_query"]["q1"]
            # b (-1) @1: non-relevant, gain 0, not in the ideal, unjudged; a (2) @2, c (1) @3
            self.assertEqual(plain["recall"], 2 / 2)
            self.assertEqual(plain["mrr"], 1 / 2)
            self.assertAlmostEqual(plain["ndcg"], (3 / math.log2(3) + 1 / 2) / (3 + 1 / math.log2(3)), places=15)
            self.assertEqual(plain["judged"], 2 / 3)  # a, c
            # --judged-only drops b: a @1, c @2
            only = rag_eval.evaluate(qrels, run, k=3, measures=names, judged_only=True)["per_query"]["q1"]
            self.assertEqual(only, {"recall": 2 / 2, "mrr": 1 / 1, "ndcg": 1.0, "judged": 2 / 3})
            code, out, err = run_main([qpath, rpath, "--k", "3", "--judged-only", "--measures", "mrr,judged"])
            self.assertEqual(code, 0, err)
            self.assertEqual(json.loads(out)["mean"], {"mrr@3": 1.0, "judged@3": 2 / 3})
            # in JSON qrels a negative grade is an error
            jpath = os.path.join(tmp, "qrels.json")
            with open(jpath, "w") as f:
                json.dump({"q1": {"a": 2, "b": -1}}, f)
            code, out, err = run_main([jpath, rpath])
            self.assertEqual(code, 2)
            self.assertIn(jpath, err)
            self.assertIn("non-negative", err)

    def test_judged_only_drops_unjudged_before_the_cutoff(self):
        qrels, run = load_fixtures()
        plain = rag_eval.evaluate(qrels, run, k=3)
        only = rag_eval.evaluate(qrels, run, k=3, judged_only=True)
        # q1 top 3: shipping#1, rp#2 (2), rp#9 -> judged only: rp#2 (2), rp#3 (1)
        self.assertEqual(plain["per_query"]["q1"]["recall"], 1 / 2)
        self.assertAlmostEqual(plain["per_query"]["q1"]["ndcg"],
                               (3 / math.log2(3)) / (3 + 1 / math.log2(3)), places=15)
        self.assertEqual(only["per_query"]["q1"], {"recall": 2 / 2, "success": 1.0, "mrr": 1 / 1, "ndcg": 1.0})
        # q3 top 3: #5 (2), okta (1), sso-setup#1 -> judged only: #5 (2), okta (1), #4 (2)
        self.assertAlmostEqual(only["per_query"]["q3"]["ndcg"],
                               (3 + 1 / math.log2(3) + 3 / 2) / (3 + 3 / math.log2(3) + 1 / 2), places=15)
        self.assertEqual(only["per_query"]["q3"]["recall"], 3 / 3)
        # q2: nothing of the run is judged for q2
        self.assertEqual(only["per_query"]["q2"]["recall"], 0.0)
        code, out, err = run_main([QRELS, RUN, "--k", "3", "--judged-only"])
        self.assertEqual(code, 0, err)
        self.assertAlmostEqual(json.loads(out)["mean"]["recall@3"], (1 + 0 + 1) / 3, places=15)


class TestMeasureFunctionsCheckTheGainRange(unittest.TestCase):
    """The per-measure functions refuse a grade too large for the exponential gain, as evaluate does
    (2**grade - 1 overflows a float past 1023; the limit is far below), and take any with gain linear."""

    def test_every_measure_function(self):
        top = rag_eval._MAX_EXP_GRADE
        for function in (rag_eval.recall_at_k, rag_eval.success_at_k, rag_eval.reciprocal_rank, rag_eval.ndcg_at_k,
                         rag_eval.precision_at_k, rag_eval.ap_at_k, rag_eval.judged_at_k):
            with self.subTest(function=function.__name__):
                error = assert_value_error(self, function, ["a", "b"], {"a": top + 1}, 2)
                self.assertIn(f" {top + 1} ", str(error))
                # a only, at rank 1: every measure gives the same for any positive grade (nDCG 1, not the gain)
                self.assertEqual(function(["a", "b"], {"a": top}, 2), function(["a", "b"], {"a": top + 1}, 2, gain="linear"))


class TestTrecEvalSpellings(unittest.TestCase):
    """trec_eval's -m form (``ndcg_cut.10``) is a spelling of its own measure names only."""

    def test_dot_forms(self):
        for text, pair in (("ndcg_cut.10", ("ndcg", 10)), ("P.5", ("precision", 5)), ("recall.20", ("recall", 20)),
                           ("success.2", ("success", 2)), ("map_cut.100", ("ap", 100)), ("NDCG_CUT.3", ("ndcg", 3))):
            with self.subTest(text=text):
                self.assertEqual(rag_eval.parse_metric(text), pair)
        # evidence measures, and the document level of the id measures
        self.assertEqual([rag_eval.parse_metric(text) for text in ("iou@5", "doc.recall@5", "DOC.nDCG@3")],
                         [("iou", 5), ("doc.recall", 5), ("doc.ndcg", 3)])
        for text in ("ndcg_at.10", "recall_at.5", "hit_rate.5", "ndcg.10", "doc.iou@5"):  # no such spelling
            with self.subTest(text=text):
                with self.assertRaisesRegex(rag_eval.RagEvalError, f"^[^']*{re.escape(repr(text))} "):
                    rag_eval.parse_metric(text)


if __name__ == "__main__":
    unittest.main()
