"""What a new user meets on the first day: the names they already type.

Metric names in the spellings of trec_eval, ir_measures, ranx, BEIR and MTEB
are accepted wherever a metric is named, and printed back in ours.
"""

import io
import json
import unittest
from unittest import mock

import rag_eval
from helpers_for_tests import TempDirMixin, run_main

# Fixture means at k = 5, worked by hand: recall 2/3, success 2/3, mrr 0.5, ndcg 0.5095.
FIXTURE_NDCG5 = (0.63991 + 0.0 + 0.88850) / 3


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
                    self.assertEqual(rag_eval.canonical_metric(spelling), f"{measure}@10")

    def test_names_that_are_not_ours(self):
        # recip_rank has no cutoff (another number); a zero or padded cutoff is no cutoff.
        for text in ("recip_rank", "recip_rank@10", "ndcg@0", "ndcg@05", "ndcg", "ndcg_cut_", "foo@10", "ndcg@1x",
                     "ndcg@\u00b9"):
            with self.subTest(text=text), self.assertRaisesRegex(rag_eval.RagEvalError, "unknown metric"):
                rag_eval.parse_metric(text)

    def test_the_hint_names_every_measure_that_parses(self):
        # iou@5 parses (evidence spans), so the hint after a name that does not must offer iou as well
        names = [m.name for m in rag_eval.MEASURES] + [m.name for m in rag_eval.SPAN_MEASURES if m.name not in
                                                       [m.name for m in rag_eval.MEASURES]]
        self.assertIn("iou", names)
        with self.assertRaises(rag_eval.RagEvalError) as caught:
            rag_eval.parse_metric("iuo@5")
        self.assertTrue(str(caught.exception).endswith(f"(expected measure@k with a measure from {', '.join(names)})"),
                        caught.exception)
        for name in names:
            self.assertEqual(rag_eval.parse_metric(f"{name}@5"), (name, 5))
        # the document level of evidence spans is reported, never asked for: doc.ndcg@5 is refused with the
        # option, before any input is read (a missing file is not the first thing named)
        code, out, err = run_main(["missing.json", "missing_run.json", "--measures", "doc.ndcg@5"])
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(err, "rag_eval: error: argument --measures: unknown measure 'doc.ndcg@5' "
                              f"(choose from {', '.join(names)})\n")

    def test_ours_round_trip(self):
        for m in rag_eval.MEASURES:
            for k in (1, 10, 1000):
                name = rag_eval.format_metric(m.name, k)
                self.assertEqual(rag_eval.format_metric(*rag_eval.parse_metric(name)), name)

    def test_slices_keep_their_tag(self):
        self.assertEqual(rag_eval.canonical_metric("pricing:nDCG@5"), "pricing:ndcg@5")

    def test_explain_lists_the_spellings(self):
        text = rag_eval.explain()
        for stem in ("ndcg_cut_k", "hit_rate@k", "r@k", "map_at_k"):
            self.assertIn(stem, text)


class TestMetricPairs(TempDirMixin, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.qrels = "fixtures/qrels.json"
        self.run = "fixtures/run.json"

    def means(self, *argv):
        code, out, err = run_main([self.qrels, self.run, "--digits", "17", *argv])
        self.assertEqual(code, rag_eval.EXIT_OK, err)
        return json.loads(out)["mean"]

    def test_pairs_are_computed_exactly(self):
        # No cross product: nDCG@3 and R@5 are two numbers, not four.
        means = self.means("--measures", "nDCG@3,R@5")
        self.assertEqual(sorted(means), ["ndcg@3", "recall@5"])
        self.assertAlmostEqual(means["recall@5"], 2 / 3, places=12)

    def test_bare_measures_take_every_cutoff_and_pairs_their_own(self):
        means = self.means("--k", "1,5", "--measures", "mrr,ndcg_cut_5")
        self.assertEqual(sorted(means), ["mrr@1", "mrr@5", "ndcg@5"])
        self.assertAlmostEqual(means["ndcg@5"], FIXTURE_NDCG5, places=4)
        self.assertEqual(means["mrr@5"], 0.5)

    def test_the_same_numbers_as_bare_measures(self):
        self.assertEqual(self.means("--measures", "ndcg@5,recall@5,success@5,mrr@5"), self.means())

    def test_library_pairs(self):
        qrels = {"q1": {"a": 2, "b": 1}}
        result = rag_eval.evaluate(qrels, {"q1": ["x", "a", "b"]}, k=5, measures=["RR@1", "recall@2"])
        self.assertEqual(result["mean"], {"mrr@1": 0.0, "recall@2": 0.5})
        self.assertEqual(result["k"], [1, 2])
        self.assertEqual(result["per_query"]["q1"], {"mrr@1": 0.0, "recall@2": 0.5})

    def test_an_unknown_name_is_still_refused(self):
        code, out, err = run_main([self.qrels, self.run, "--measures", "ndcg@5,ndgc@5"])
        self.assertEqual((code, out), (rag_eval.EXIT_ERROR, ""))
        self.assertIn("unknown measure 'ndgc@5'", err)


class TestSpellingsInTheGate(TempDirMixin, unittest.TestCase):
    def test_flat_baseline_in_other_spellings(self):
        # The shipped baseline (recall@5 0.70, success@5 0.6667, mrr@5 0.55, ndcg@5 0.52), spelled by other tools.
        baseline = self.write("b.json", json.dumps({"R@5": 0.70, "success_5": 0.6667, "RR@5": 0.55, "NDCG@5": 0.52}))
        code, out, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--baseline", baseline])
        self.assertEqual(code, rag_eval.EXIT_REGRESSION, err)
        self.assertEqual([line.split(":")[0] for line in err.splitlines() if line.startswith("REGRESSION")],
                         ["REGRESSION mrr@5", "REGRESSION recall@5"])
        self.assertEqual(sorted(json.loads(out)["gate"]["metrics"]), ["mrr@5", "ndcg@5", "recall@5", "success@5"])

    def test_tolerances_and_floors_in_other_spellings(self):
        # mrr@5 fell 0.05: allowed with RR@5=0.1; recall@5 fell 0.0333: allowed with recall_5=0.05.
        code, out, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--baseline", "baseline.json",
                                   "--max-drop", "RR@5=0.1", "--max-drop", "recall_5=0.05", "--min", "nDCG@5=0.6"])
        self.assertEqual(code, rag_eval.EXIT_REGRESSION, err)
        gate = json.loads(out)["gate"]
        self.assertEqual(gate["metrics"]["mrr@5"]["allowed_drop"], 0.1)
        self.assertEqual(gate["metrics"]["recall@5"]["verdict"], "pass")
        self.assertEqual(list(gate["floors"]), ["ndcg@5"])
        self.assertEqual(gate["floors"]["ndcg@5"]["verdict"], "below floor")
        self.assertAlmostEqual(gate["floors"]["ndcg@5"]["now"], FIXTURE_NDCG5, places=4)
        self.assertIn("REGRESSION ndcg@5: floor 0.6000", err)

    def test_one_metric_spelled_twice_is_refused(self):
        baseline = self.write("b.json", json.dumps({"ndcg@5": 0.5, "ndcg_cut_5": 0.5}))
        code, out, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--baseline", baseline])
        self.assertEqual((code, out), (rag_eval.EXIT_ERROR, ""))
        self.assertIn("baseline names ndcg@5 twice", err)


class TestPartOfABaseline(TempDirMixin, unittest.TestCase):
    """An extended baseline is gated at what is asked now; a flat one needs all of its metrics."""

    def setUp(self):
        super().setUp()
        self.saved = self.path("saved.json")
        code, _, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--k", "3,5", "--save-baseline",
                                 self.saved], env={"SOURCE_DATE_EPOCH": "0"})
        self.assertEqual(code, rag_eval.EXIT_OK, err)

    def gate(self, *argv, code=rag_eval.EXIT_OK):
        got, out, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--baseline", self.saved, *argv])
        self.assertEqual(got, code, err)
        return json.loads(out)["gate"], err

    def test_one_cutoff_of_two(self):
        gate, err = self.gate("--k", "5")
        self.assertEqual(sorted(gate["metrics"]), ["mrr@5", "ndcg@5", "recall@5", "success@5"])
        self.assertEqual(gate["new"], [])
        self.assertTrue(all(entry["verdict"] == "pass" for entry in gate["metrics"].values()))

    def test_one_measure(self):
        # not six "missing" regressions for the measures not asked for
        gate, err = self.gate("--measures", "ndcg", "--k", "3,5")
        self.assertEqual(sorted(gate["metrics"]), ["ndcg@3", "ndcg@5"])
        self.assertNotIn("REGRESSION", err)

    def test_what_the_baseline_lacks_is_new_and_not_gated(self):
        gate, err = self.gate("--k", "5,10")
        self.assertEqual(gate["new"], ["mrr@10", "ndcg@10", "recall@10", "success@10"])
        self.assertNotIn("ndcg@10", gate["metrics"])
        self.assertIn("rag_eval: note: not in the baseline, so not gated: mrr@10, ndcg@10, recall@10, success@10", err)

    def test_conventions_still_refuse(self):
        code, out, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--baseline", self.saved,
                                   "--k", "5", "--gain", "linear"])
        self.assertEqual((code, out), (rag_eval.EXIT_ERROR, ""))
        self.assertIn("gain", err)

    def test_a_flat_baseline_needs_all_of_its_metrics(self):
        code, out, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--baseline", "baseline.json",
                                   "--measures", "ndcg,mrr", "--max-drop", "0.1"])
        self.assertEqual(code, rag_eval.EXIT_REGRESSION, err)
        self.assertIn("REGRESSION recall@5: baseline 0.7000, now missing", err)


class TestQuiet(unittest.TestCase):
    ARGV = ["fixtures/qrels.json", "fixtures/run.json"]

    def test_a_pass_prints_each_warning_once_and_short(self):
        code, _, err = run_main(self.ARGV + ["--k", "1,3,5,10"])
        self.assertEqual(code, rag_eval.EXIT_OK)
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, err)  # one judged@k warning for the four cutoffs
        self.assertTrue(lines[0].startswith("rag_eval: warning: few documents judged (judged@1 0.33, "), lines[0])
        self.assertLess(len(lines[0]), 160)

    def test_quiet_keeps_only_regressions(self):
        code, _, err = run_main(self.ARGV + ["--baseline", "baseline.json", "--quiet"])
        self.assertEqual(code, rag_eval.EXIT_REGRESSION)
        self.assertEqual(err.splitlines(), ["REGRESSION mrr@5: baseline 0.5500, now 0.5000",
                                            "REGRESSION recall@5: baseline 0.7000, now 0.6667"])

    def test_quiet_keeps_errors(self):
        code, _, err = run_main(["fixtures/qrels.json", "missing.json", "--quiet"])
        self.assertEqual(code, rag_eval.EXIT_ERROR)
        self.assertEqual(err, "rag_eval: error: missing.json: no such file\n")

    def test_a_rule_not_in_force_is_only_in_the_full_report(self):
        # Under --gate drop, the paired test decides nothing: its "unresolvable" is a note in --output only.
        import tempfile, os
        with tempfile.TemporaryDirectory() as tmp:
            saved, output = os.path.join(tmp, "saved.json"), os.path.join(tmp, "out.json")
            run_main(self.ARGV + ["--save-baseline", saved])
            run = os.path.join(tmp, "worse.json")
            with open("fixtures/run.json") as f:
                worse = json.load(f)
            worse["q1"] = ["shipping#1"]  # q1 drops from a hit to a miss: one query differs
            with open(run, "w") as f:
                json.dump(worse, f)
            code, _, err = run_main(["fixtures/qrels.json", run, "--baseline", saved, "--output", output])
            self.assertEqual(code, rag_eval.EXIT_REGRESSION)
            self.assertNotIn("unresolvable", err)
            with open(output) as f:
                notes = json.load(f)["notes"]
            self.assertTrue(any(note.startswith("note: ") and "unresolvable" in note for note in notes), notes)
            code, _, err = run_main(["fixtures/qrels.json", run, "--baseline", saved, "--gate", "significant"])
            self.assertIn("rag_eval: warning: ", err)
            self.assertIn("unresolvable", err)


class TestWordsThatCannotBeMisread(TempDirMixin, unittest.TestCase):
    def test_metrics_in_table_order_and_by_cutoff_number(self):
        code, out, _ = run_main(["fixtures/qrels.json", "fixtures/run.json", "--k", "10,5", "--format", "table"])
        names = [line.split()[0] for line in out.split("\n\n")[1].splitlines()[1:]]
        self.assertEqual(names, ["recall@5", "recall@10", "success@5", "success@10", "mrr@5", "mrr@10",
                                 "ndcg@5", "ndcg@10"])

    def test_query_ids_in_natural_order(self):
        qrels = self.write("q.json", json.dumps({f"q{n}": {"d": 1} for n in (1, 2, 10, 100)}))
        run = self.write("r.json", json.dumps({f"q{n}": ["d"] for n in (1, 2, 10, 100)}))
        for fmt in ("table", "csv"):
            code, out, err = run_main([qrels, run, "--per-query", "--format", fmt, "--measures", "mrr"])
            self.assertEqual(code, 0, err)
            ids = [line.split(",")[0].split()[0] for line in out.splitlines() if line[:2] in ("q1", "q2")]
            self.assertEqual(ids, ["q1", "q2", "q10", "q100"], fmt)
        code, out, _ = run_main([qrels, run, "--per-query"])
        self.assertEqual(list(json.loads(out)["per_query"]), ["q1", "q10", "q100", "q2"])  # JSON keeps sorted keys

    def test_a_missed_floor_reads_as_a_failure(self):
        for fmt in ("table", "markdown", "csv"):
            code, out, _ = run_main(["fixtures/qrels.json", "fixtures/run.json", "--min", "ndcg@5=0.9",
                                     "--format", fmt])
            self.assertEqual(code, rag_eval.EXIT_REGRESSION)
            self.assertIn("below floor 0.9", out, fmt)
            self.assertNotIn("pass", out.split("ndcg@5", 2)[-1].splitlines()[0], fmt)

    def test_the_table_shows_what_regressed(self):
        saved = self.path("saved.json")
        run_main(["fixtures/qrels.json", "fixtures/run.json", "--save-baseline", saved])
        with open("fixtures/run.json") as f:
            worse = json.load(f)
        worse["q3"] = ["scim#2"] + worse["q3"]  # q3's first relevant chunk moves from rank 1 to 2
        run = self.write("worse.json", json.dumps(worse))
        code, out, err = run_main(["fixtures/qrels.json", run, "--baseline", saved, "--format", "table",
                                   "--per-query"])
        self.assertEqual(code, rag_eval.EXIT_REGRESSION, err)
        self.assertIn("mrr@5: 1 query worse, 0 better; largest drops q3 (-0.5000)", out)
        rows = [line.split() for line in out.splitlines() if line.startswith("q3 ")]
        self.assertIn(["q3", "mrr@5", "1.0000", "0.5000", "-0.5000"], rows)


class TestCoverage(TempDirMixin, unittest.TestCase):
    """A run with results for few of the scored queries (q1, q2, q3) looks truncated."""

    def test_a_truncated_run_is_refused(self):
        run = self.write("one.trec", "q1 Q0 refund-policy#2 1 18.1 x\n")
        code, out, err = run_main(["fixtures/qrels.json", run, "--format", "table"])
        self.assertEqual((code, out), (rag_eval.EXIT_ERROR, ""))
        self.assertIn("the run has results for only 1 of 3 scored queries (first missing: 'q2')", err)
        self.assertIn("--allow-partial-run", err)

    def test_allowed_it_is_scored_and_the_count_reported_everywhere(self):
        run = self.write("one.trec", "q1 Q0 refund-policy#2 1 18.1 x\n")
        code, out, err = run_main(["fixtures/qrels.json", run, "--allow-partial-run"])
        self.assertEqual(code, rag_eval.EXIT_OK, err)
        self.assertEqual(json.loads(out)["missing"], ["q2", "q3"])
        self.assertIn("rag_eval: warning: the run has no results for 2 of 3 scored queries (first: 'q2'); they score 0",
                      err)
        code, out, err = run_main(["fixtures/qrels.json", run, "--allow-partial-run", "--format", "table"])
        self.assertTrue(out.startswith("scored 3 queries (the run has no results for 2)\n"), out)

    def test_half_is_enough(self):
        # two of three scored queries answered: above the threshold, scored with a warning
        run = self.write("two.trec", "q1 Q0 refund-policy#2 1 18.1 x\nq3 Q0 sso-setup#5 1 1 x\n")
        code, out, err = run_main(["fixtures/qrels.json", run])
        self.assertEqual(code, rag_eval.EXIT_OK, err)
        self.assertEqual(json.loads(out)["missing"], ["q2"])

    def test_the_library_reports_and_does_not_refuse(self):
        result = rag_eval.evaluate({"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}, {"q1": ["a"]}, 5)
        self.assertEqual(result["missing"], ["q2", "q3"])
        self.assertEqual(result["mean"]["recall@5"], 1 / 3)


class TestFilesNamed(TempDirMixin, unittest.TestCase):
    def test_folders_are_made_and_files_named(self):
        junit, metrics = self.path("reports/ci/junit.xml"), self.path("reports/metrics.txt")
        code, _, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--junit", junit,
                                 "--metrics-file", metrics])
        self.assertEqual(code, rag_eval.EXIT_OK, err)
        self.assertIn(f"rag_eval: note: wrote {junit}, {metrics}", err)
        with open(junit) as f:
            self.assertIn("<testsuites", f.read())
        code, _, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--junit", junit, "--quiet"])
        self.assertEqual(err, "")

    def test_a_failed_update_says_the_baseline_was_left_alone(self):
        baseline = self.write("b.json", self.read("baseline.json"))
        code, _, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--baseline", baseline,
                                 "--update-baseline"])
        self.assertEqual(code, rag_eval.EXIT_REGRESSION)
        self.assertIn(f"rag_eval: note: the gate failed, so {baseline} was not changed", err)
        with open(baseline) as f, open("baseline.json") as g:
            self.assertEqual(f.read(), g.read())
        code, _, err = run_main(["fixtures/qrels.json", "missing.json", "--baseline", baseline, "--update-baseline"])
        self.assertEqual(err, f"rag_eval: error: missing.json: no such file ({baseline} was not changed)\n")


class TestHints(TempDirMixin, unittest.TestCase):
    def test_swapped_arguments(self):
        qrels = self.write("qrels.txt", "q1 0 d1 1\n")
        run = self.write("run.trec", "q1 Q0 d1 1 2.0 r\n")
        code, _, err = run_main([run, qrels])
        self.assertEqual(code, rag_eval.EXIT_ERROR)
        self.assertEqual(err, f"rag_eval: error: {run}:1: expected 4 fields (qid iter docid grade), got 6; "
                              "is this a run? the order is QRELS RUN\n")
        code, _, err = run_main([qrels, qrels])
        self.assertIn("got 4; is this a qrels file? the order is QRELS RUN", err)

    def test_chunk_ids_against_document_ids(self):
        run = self.write("docs.json", json.dumps({"q1": ["refund-policy"], "q2": ["sla-uptime"], "q3": ["sso-setup"]}))
        code, _, err = run_main(["fixtures/qrels.json", run])
        self.assertEqual(code, rag_eval.EXIT_ERROR)
        self.assertIn("--doc-id-sep '#' would make them meet", err)
        code, out, err = run_main(["fixtures/qrels.json", run, "--doc-id-sep", "#"])
        self.assertEqual(code, rag_eval.EXIT_OK, err)
        self.assertEqual(json.loads(out)["mean"]["success@5"], 1.0)

    def test_ids_that_share_nothing_get_no_hint(self):
        run = self.write("other.json", json.dumps({"q1": ["zzz"], "q2": ["yyy"], "q3": ["xxx"]}))
        code, _, err = run_main(["fixtures/qrels.json", run])
        self.assertIn("(are they about the same documents?)", err)

    def test_max_drop_as_a_percentage(self):
        code, _, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--baseline", "baseline.json",
                                 "--max-drop", "5"])
        self.assertEqual(code, rag_eval.EXIT_ERROR)
        self.assertIn("(did you mean 5%?)", err)

    def test_repeated_k_adds_up(self):
        code, out, _ = run_main(["fixtures/qrels.json", "fixtures/run.json", "--k", "3", "--k", "1,5"])
        self.assertEqual(json.loads(out)["k"], [1, 3, 5])

    def test_slices_from_stdin_are_named_stdin(self):
        # in-process: the line is what is tested (test_rag_eval.TestEntryPoint.test_stdin reads a real one)
        with mock.patch("sys.stdin") as stdin:
            stdin.buffer = io.BufferedReader(io.BytesIO(b'{"q1": 5}'))  # as a real stdin.buffer is
            code, _, err = run_main(["fixtures/qrels.json", "fixtures/run.json", "--slices", "-"])
        self.assertEqual(code, rag_eval.EXIT_ERROR)
        self.assertTrue(err.startswith("rag_eval: error: <stdin>: query 'q1': a slice is"), err)

    def test_query_ids_that_differ_by_a_prefix(self):
        run = self.write("run.json", json.dumps({"query-q1": ["refund-policy#2"]}))
        code, _, err = run_main(["fixtures/qrels.json", run])
        self.assertIn("(first: 'query-q1'; the qrels have 'q1')", err)


if __name__ == "__main__":
    unittest.main()
