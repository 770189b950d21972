"""Judged generation scores (issue 34): the neutral JSONL and the readers of each judge tool's export, gated
with the same means, baselines, gate and reports as retrieval metrics.  Expected values are written as the
arithmetic over the scores in the sample files of fixtures/judged/."""

import json
import os
import unittest
import zipfile

import rag_eval
from tests.helpers import REPO, TempDirMixin, assert_error_line, run_main, tagged_lines
from tests.test_action import ActionRun

JUDGED = os.path.join(REPO, "fixtures", "judged")
BASE, NOW, REPEATS = (os.path.join(JUDGED, name) for name in ("neutral_base.jsonl", "neutral_now.jsonl",
                                                              "neutral_repeats.jsonl"))
QRELS, RUN = os.path.join(REPO, "fixtures", "qrels.json"), os.path.join(REPO, "fixtures", "run.json")


def sample(name):
    return os.path.join(JUDGED, name)


def report_of(argv):
    code, out, err = run_main(argv)
    return code, (json.loads(out) if out else None), err


class JudgedTempDir(TempDirMixin):
    def write_rows(self, name, rows):
        path = os.path.join(self.tmp, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
        return path


class NeutralScores(JudgedTempDir, unittest.TestCase):
    """The neutral JSONL: one row per question, metric and repeat; means over the questions scored."""

    def test_means_of_the_base(self):
        code, report, _ = report_of(["--judged", BASE])
        self.assertEqual(code, 0)
        # faithfulness 0.9 0.8 0.7 1.0 0.6 0.5; hallucination (lower is better) 0.1 0.0 0.2 0.0 0.3 0.1, gated negated
        self.assertAlmostEqual(report["mean"]["judge.faithfulness"], (0.9 + 0.8 + 0.7 + 1.0 + 0.6 + 0.5) / 6)
        self.assertAlmostEqual(report["mean"]["judge.-hallucination"], -(0.1 + 0.0 + 0.2 + 0.0 + 0.3 + 0.1) / 6)
        self.assertEqual(report["queries"], 6)
        self.assertEqual(report["judge"]["metrics"]["judge.-hallucination"]["direction"], "lower")

    def test_api_matches_the_command_line(self):
        result = rag_eval.judged_result([rag_eval.read_judged(BASE)])
        code, report, _ = report_of(["--judged", BASE])
        self.assertEqual(result["mean"], report["mean"])

    def test_ids_are_strings_never_positions(self):
        path = self.write_rows("s.jsonl", [{"id": "01", "metric": "faithfulness", "score": 1.0},
                                           {"id": "1", "metric": "faithfulness", "score": 0.0}])
        result = rag_eval.judged_result([rag_eval.read_judged(path)])
        self.assertEqual(result["per_query"], {"01": {"judge.faithfulness": 1.0}, "1": {"judge.faithfulness": 0.0}})

    def test_a_duplicate_key_is_refused(self):
        path = self.write_rows("d.jsonl", [{"id": "q1", "metric": "faithfulness", "score": 1.0},
                                           {"id": "q1", "metric": "faithfulness", "score": 0.5}])
        code, _, err = run_main(["--judged", path])
        self.assertEqual(code, 2)
        assert_error_line(self, err, path, 2, quoted=["q1"], names=["faithfulness"])

    def test_a_missing_id_field_is_refused(self):
        path = self.write_rows("m.jsonl", [{"id": "q1", "metric": "faithfulness", "score": 1.0},
                                           {"metric": "faithfulness", "score": 0.5}])
        code, _, err = run_main(["--judged", path])
        self.assertEqual(code, 2)
        assert_error_line(self, err, path, 2, names=["id"])

    def test_a_score_out_of_its_range_is_refused(self):
        path = self.write_rows("r.jsonl", [{"id": "q1", "metric": "faithfulness", "score": 1.5}])
        code, _, err = run_main(["--judged", path])
        self.assertEqual(code, 2)
        assert_error_line(self, err, path, names=["faithfulness", "1.5", "[0, 1]"])

    def test_an_unknown_shape_is_refused_naming_the_known_ones(self):
        path = self.write_rows("u.jsonl", [{"question": "q1", "value": 1.0}])
        code, _, err = run_main(["--judged", path])
        self.assertEqual(code, 2)
        assert_error_line(self, err, path, names=["neutral JSONL", "DeepEval test run", "Ragas to_pandas()",
                                                  "promptfoo results", "Inspect log", "LangSmith results",
                                                  "TruLens records", "OpenAI evals"])


class Directions(JudgedTempDir, unittest.TestCase):
    """Which way is better is known per metric: from the tool's documentation, else from the user; never guessed."""

    def test_an_undocumented_metric_needs_a_direction(self):
        path = self.write_rows("c.jsonl", [{"id": "q1", "metric": "tone", "score": 3.0},
                                           {"id": "q2", "metric": "tone", "score": 5.0}])
        code, _, err = run_main(["--judged", path])
        self.assertEqual(code, 2)
        assert_error_line(self, err, path, names=["--judged-direction tone=higher"])
        code, report, _ = report_of(["--judged", path, "--judged-direction", "tone=lower"])
        self.assertEqual(code, 0)
        self.assertEqual(report["mean"], {"judge.-tone": -4.0})  # -(3 + 5) / 2; no range: 3 and 5 are accepted

    def test_a_rise_of_a_lower_is_better_metric_fails(self):
        base = os.path.join(self.tmp, "b.json")
        self.assertEqual(run_main(["--judged", BASE, "--save-baseline", base])[0], 0)
        code, report, _ = report_of(["--judged", NOW, "--baseline", base, "--max-judge-missing", "0.2",
                                     "--allow-judge-change"])
        # hallucination rose from 0.7/6 to 1.1/6: the negated mean fell by 0.4/6 = 0.0667 > 0.02
        entry = report["gate"]["metrics"]["judge.-hallucination"]
        self.assertAlmostEqual(entry["delta"], -0.4 / 6)
        self.assertEqual((code, entry["verdict"]), (1, "regression"))


    def test_floors_of_judged_metrics_on_their_own_scale(self):
        # review34: "hallucination at most 0.2" is the floor -0.2 of judge.-hallucination; a tone on a 1-5 scale
        # takes a floor of 4.  Both were refused ("a value from 0 to 1").
        code, report, _ = report_of(["--judged", BASE, "--min", "judge.-hallucination=-0.1"])  # mean 0.7/6 = 0.117
        self.assertEqual((code, report["gate"]["floors"]["judge.-hallucination"]["verdict"]), (1, "below floor"))
        self.assertEqual(report_of(["--judged", BASE, "--min", "judge.-hallucination=-0.12"])[0], 0)
        path = self.write_rows("t.jsonl", [{"id": "q1", "metric": "tone", "score": 3.0},
                                           {"id": "q2", "metric": "tone", "score": 4.0}])
        self.assertEqual(run_main(["--judged", path, "--judged-direction", "tone=higher", "--min", "judge.tone=4"])[0], 1)
        for wrong in ("judge.-hallucination=0.1", "judge.faithfulness=-0.5", "recall@5=1.5"):  # could never fail/pass
            with self.subTest(wrong):
                code, _, err = run_main(["--judged", BASE, "--min", wrong])
                self.assertEqual(code, 2)
                assert_error_line(self, err, names=["--min"])


class JudgeErrors(JudgedTempDir, unittest.TestCase):
    """A judge error, NaN or missing score is missing, never 0; past the documented share, refused."""

    def test_an_error_is_left_out_of_the_mean_and_counted(self):
        code, report, err = report_of(["--judged", NOW, "--max-judge-missing", "0.2"])
        self.assertEqual(code, 0)
        # q6 errored: (0.9 + 0.6 + 0.5 + 1.0 + 0.4) / 5, not / 6
        self.assertAlmostEqual(report["mean"]["judge.faithfulness"], (0.9 + 0.6 + 0.5 + 1.0 + 0.4) / 5)
        entry = report["judge"]["metrics"]["judge.faithfulness"]
        self.assertEqual((entry["missing"], entry["missing_ids"], entry["questions"]), (1, ["q6"], 5))
        (warning,) = tagged_lines(err, "warning")
        self.assertIn("judge.faithfulness", warning)
        self.assertIn("1 of 6", warning)

    def test_a_sample_the_judge_never_scored_is_missing(self):
        # review34: an Inspect sample that errored has no scores, an OpenAI evals sample that failed has its
        # sampling event and no match: both questions vanished (20 questions became 18, none counted missing)
        with open(os.path.join(JUDGED, "inspect_log.json"), encoding="utf-8") as handle:
            log = json.load(handle)
        for item in log["samples"]:
            if item["id"] == "q2":
                item.update(scores=None, error={"message": "RateLimitError", "traceback": ""})
        inspect = os.path.join(self.tmp, "log.json")
        with open(inspect, "w", encoding="utf-8") as handle:
            json.dump(log, handle)
        with open(os.path.join(JUDGED, "openai_evals.jsonl"), encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
        events = self.write_rows("events.jsonl", [row for row in rows if not (
            row.get("type") == "match" and row.get("sample_id") == "rag-qa.dev.0")])
        for path, key, ids in ((inspect, "judge.model_graded_fact", ["q2"]), (events, "judge.match", ["rag-qa.dev.0"])):
            with self.subTest(path):
                code, _, err = run_main(["--judged", path])
                self.assertEqual(code, 2)
                assert_error_line(self, err, path, quoted=ids, names=["--max-judge-missing"])
                result = rag_eval.judged_result([rag_eval.read_judged(path)], max_missing=0.5)
                entry = result["judge"]["metrics"][key]
                self.assertEqual((result["queries"], entry["missing"], entry["missing_ids"]), (3, 1, ids))

    def test_past_the_share_the_input_is_refused(self):
        code, _, err = run_main(["--judged", NOW])  # 1 of 6 = 0.167 > the default 0.1
        self.assertEqual(code, 2)
        assert_error_line(self, err, NOW, quoted=["q6"], names=["faithfulness", "1 of 6", "--max-judge-missing"])

    def test_nan_and_null_are_missing(self):
        path = os.path.join(self.tmp, "n.csv")  # a Ragas CSV: pandas writes NaN as an empty cell, or nan
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("user_input,response,faithfulness\na,x,1.0\nb,y,nan\nc,z,\nd,w,0.5\n")
        result = rag_eval.judged_result([rag_eval.read_judged(path, "user_input")], max_missing=0.5)
        self.assertEqual(result["mean"]["judge.faithfulness"], 0.75)  # (1.0 + 0.5) / 2
        self.assertEqual(result["judge"]["metrics"]["judge.faithfulness"]["missing"], 2)
        path = os.path.join(self.tmp, "n.jsonl")  # Python's json.dumps writes NaN, which JSON lacks: missing too
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"id": "a", "metric": "faithfulness", "score": float("nan")}) + "\n"
                         + json.dumps({"id": "b", "metric": "faithfulness", "score": 0.5}) + "\n")
        result = rag_eval.judged_result([rag_eval.read_judged(path)], max_missing=0.5)
        self.assertEqual((result["mean"]["judge.faithfulness"], result["per_query"].get("a")), (0.5, None))

    def test_a_question_in_a_test_only_when_scored_on_both_sides(self):
        base = os.path.join(self.tmp, "b.json")
        run_main(["--judged", BASE, "--save-baseline", base])
        code, report, _ = report_of(["--judged", NOW, "--baseline", base, "--gate", "significant",
                                     "--max-judge-missing", "0.2"])
        self.assertEqual(report["gate"]["metrics"]["judge.faithfulness"]["queries"], 5)  # q6 errored now


class Repeats(unittest.TestCase):
    """Repeats are folded per question (their mean) before any statistic, with the flip rate of pass/fail scores."""

    def test_repeats_fold_into_one_question_each(self):
        result = rag_eval.judged_result([rag_eval.read_judged(REPEATS)])
        # q1 1 1 1, q2 1 0 1, q3 0 0 0, q4 1 1 0: four questions, not twelve
        self.assertEqual(result["queries"], 4)
        self.assertEqual(result["per_query"]["q2"]["judge.correctness"], 2 / 3)
        self.assertAlmostEqual(result["mean"]["judge.correctness"], (1 + 2 / 3 + 0 + 2 / 3) / 4)
        entry = result["judge"]["metrics"]["judge.correctness"]
        self.assertEqual((entry["repeats"], entry["flip_rate"]), (3, 0.5))  # q2 and q4 disagree with themselves

    def test_repeats_do_not_add_pairs_to_the_test(self):
        before = rag_eval.judged_result([rag_eval.read_judged(REPEATS)])
        baseline = rag_eval.Baseline(before["mean"], rag_eval._per_query_by_metric(before))
        settings = rag_eval.GateSettings(rule="significant")
        report = rag_eval.gate(before, baseline, settings)
        self.assertEqual(report["metrics"]["judge.correctness"]["queries"], 4)


class ReadersOfExports(unittest.TestCase):
    """Each reader on a sample written here in the documented shape of that tool's current release."""

    def read(self, name, id_field=None, missing=0.5):
        return rag_eval.judged_result([rag_eval.read_judged(sample(name), id_field)], max_missing=missing)

    def test_deepeval_test_run(self):
        # Shape: deepeval's TestRun/LLMApiTestCase pydantic models (deepeval/test_run/api.py): testCases[] with
        # name, actualOutput, retrievalContext, metricsData[] of name, threshold, success, score, reason,
        # strictMode, evaluationModel, error, evaluationCost, verboseLogs; keyed by the case name.
        result = self.read("deepeval_test_run.json")
        self.assertAlmostEqual(result["mean"]["judge.answer_relevancy"], (0.9 + 0.5 + 1.0) / 3)
        self.assertEqual(result["mean"]["judge.faithfulness"], (1.0 + 0.75) / 2)  # refund-q3's errored
        self.assertAlmostEqual(result["mean"]["judge.-hallucination"], -(0.1 + 0.2 + 0.3) / 3)
        self.assertEqual(sorted(result["per_query"]), ["refund-q1", "refund-q2", "refund-q3"])
        self.assertEqual(result["judge"]["provenance"], {"tool": "deepeval", "model": "gpt-4o"})
        self.assertEqual(len(result["judge"]["answers"]), 3)  # digests of actualOutput: anchors need no extra work

    def test_deepeval_direction_from_its_own_success_and_threshold(self):
        # "Verbosity [GEval]" is no documented metric: its rows pass below the threshold, so lower is better
        case = lambda name, score, ok: {"name": name, "actualOutput": "a", "metricsData": [
            {"name": "Verbosity [GEval]", "threshold": 0.5, "success": ok, "score": score, "error": None,
             "evaluationModel": "gpt-4o"}]}
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "test_run.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump({"testCases": [case("c1", 0.2, True), case("c2", 0.9, False)]}, handle)
            result = rag_eval.judged_result([rag_eval.read_judged(path)])
        self.assertEqual(result["mean"], {"judge.-verbosity_geval": -(0.2 + 0.9) / 2})

    def test_ragas_csv_and_json_records(self):
        # Shape: ragas EvaluationResult.to_pandas(): the sample's columns (user_input, retrieved_contexts,
        # response, reference) and one column per metric, NaN where the judge failed; no id column, so the
        # user names one (here the question's text).
        for name in ("ragas.csv", "ragas.json"):
            with self.subTest(name):
                result = self.read(name, "user_input")
                self.assertEqual(result["mean"]["judge.faithfulness"], (1.0 + 0.5 + 0.75) / 3)
                self.assertAlmostEqual(result["mean"]["judge.answer_relevancy"], (0.9 + 0.7) / 2)

    def test_ragas_metric_column_all_nan_is_missing_not_absent(self):
        # review34: a documented metric whose every cell is NaN (the judge failed on every row) vanished from the
        # result, so a baseline gate called it "missing" (exit 1) instead of refusing the judge errors (exit 2)
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.csv")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("user_input,response,reference,faithfulness,answer_relevancy\n"
                             + "".join(f"q{i},a,,,0.{i}\n" for i in range(1, 6)))
            with self.assertRaises(rag_eval.RagEvalError) as caught:
                self.read(path, "user_input")
            assert_error_line(self, str(caught.exception), path, prefix="", names=["faithfulness", "5 of 5"])
            result = rag_eval.judged_result([rag_eval.read_judged(path, "user_input")], max_missing=1.0)
        self.assertEqual(sorted(result["mean"]), ["judge.answer_relevancy", "judge.faithfulness"])  # not reference
        self.assertEqual(result["judge"]["metrics"]["judge.faithfulness"]["missing"], 5)

    def test_ragas_without_an_id_field_is_refused(self):
        with self.assertRaises(rag_eval.RagEvalError) as caught:
            rag_eval.read_judged(sample("ragas.csv"))
        assert_error_line(self, str(caught.exception), sample("ragas.csv"), prefix="", names=["--judged-id"])

    def test_promptfoo_results(self):
        # Shape: promptfoo's `eval -o results.json`: {"evalId", "results": EvaluateSummaryV3 {version 3, results:
        # EvaluateResult[] with promptIdx, testIdx, testCase, vars, response, error, success, score, namedScores,
        # gradingResult}} (src/types/index.ts); rows are positions, so a test variable is the id.
        result = self.read("promptfoo_results.json", "qid")
        self.assertEqual(result["mean"]["judge.score"], (1.0 + 0.0 + 0.5) / 3)  # q4 errored
        self.assertAlmostEqual(result["mean"]["judge.faithfulness"], (0.9 + 0.4 + 0.8) / 3)
        self.assertAlmostEqual(result["mean"]["judge.pass"], 1 / 3)

    def test_inspect_json_and_eval_zip(self):
        # Shape: Inspect's EvalLog (inspect_ai/log/_log.py): eval {task, model}, samples[] {id, epoch, output,
        # scores: scorer -> Score {value, answer, explanation}}; the .eval file is a zip of the same JSON, one
        # samples/<id>_epoch_<n>.json per sample (inspect_ai/log/_recorders/eval.py).  C/P/I are 1/0.5/0.
        expected = (1.0 + (0.0 + 1.0) / 2 + 0.5) / 3  # q1 C C, q2 I C, q3 P P: epochs are repeats
        self.assertAlmostEqual(self.read("inspect_log.json")["mean"]["judge.model_graded_fact"], expected)
        with open(sample("inspect_log.json"), encoding="utf-8") as handle:
            log = json.load(handle)
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.eval")
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
                archive.writestr("_journal/start.json", json.dumps({"version": 2, "eval": log["eval"]}))
                for item in log["samples"]:
                    archive.writestr(f"samples/{item['id']}_epoch_{item['epoch']}.json", json.dumps(item))
            result = rag_eval.judged_result([rag_eval.read_judged(path)])
        self.assertAlmostEqual(result["mean"]["judge.model_graded_fact"], expected)
        self.assertEqual(result["judge"]["metrics"]["judge.model_graded_fact"]["repeats"], 2)

    def test_langsmith_test_results(self):
        # Shape: langsmith Client.get_test_results(project_name=...): a DataFrame with inputs.*, outputs.*,
        # reference.*, feedback.<key> (the mean over the runs), execution_time, error, id, example_id.
        self.assertEqual(self.read("langsmith.csv")["mean"]["judge.correctness"], (1.0 + 0.0 + 0.5) / 3)

    def test_trulens_records(self):
        # Shape: TruSession.get_records_and_feedback()[0]: app_id, app_name, app_version, record_id, input, output,
        # ..., one column per feedback beside <feedback>_calls; record_id changes every run: input is the id.
        result = self.read("trulens_records.csv", "input")
        self.assertAlmostEqual(result["mean"]["judge.groundedness"], (1.0 + 0.4) / 2)
        self.assertAlmostEqual(result["mean"]["judge.answer_relevance"], (0.8 + 0.9) / 2)

    def test_openai_evals_record(self):
        # Shape: evals/record.py LocalRecorder: a {"spec"} line, then events {run_id, event_id, sample_id, type,
        # data, created_by, created_at}; a match event's data.correct is the score; a final_report line.
        result = self.read("openai_evals.jsonl")
        self.assertAlmostEqual(result["mean"]["judge.match"], 2 / 3)
        self.assertEqual(result["judge"]["provenance"]["model"], "gpt-4o-mini")


class OpenAIEvalsModelGraded(JudgedTempDir, unittest.TestCase):
    def test_the_answer_is_the_first_sampling_event_not_the_graders(self):
        # review34: a model-graded eval (evals/elsuite/modelgraded/classify.py) samples the completion, then the
        # grader, both recorded as sampling events of the sample; the grader's "Y" was taken as the answer, so
        # changed answers the grader passed again looked byte-identical: false drift anchors
        rows = [{"spec": {"completion_fns": ["gpt-4o-mini"]}}]
        for i, answer in enumerate(("Paris", "Lyon")):
            rows += [{"sample_id": f"s.{i}", "type": "sampling", "data": {"prompt": "q", "sampled": [answer]}},
                     {"sample_id": f"s.{i}", "type": "sampling", "data": {"prompt": "grade", "sampled": ["Y"]}},
                     {"sample_id": f"s.{i}", "type": "metrics", "data": {"score": 1.0}}]
        result = rag_eval.judged_result([rag_eval.read_judged(self.write_rows("e.jsonl", rows))],
                                        {"score": "higher"})
        self.assertEqual(len(set(result["judge"]["answers"].values())), 2)


class RetrievalAndJudgedTogether(JudgedTempDir, unittest.TestCase):
    """One call, one verdict: retrieval metrics and judged scores in the same gate."""

    def test_several_files_join_by_id(self):
        first = self.write_rows("a.jsonl", [{"id": "q1", "metric": "faithfulness", "score": 1.0},
                                            {"id": "q2", "metric": "faithfulness", "score": 0.5}])
        second = self.write_rows("b.jsonl", [{"id": "q2", "metric": "correctness", "score": 1.0},
                                             {"id": "q1", "metric": "correctness", "score": 0.0}])
        code, report, _ = report_of(["--judged", first, "--judged", second, "--per-query"])
        self.assertEqual(code, 0)
        self.assertEqual(report["per_query"]["q1"], {"judge.correctness": 0.0, "judge.faithfulness": 1.0})

    def test_one_report_one_verdict(self):
        rows = [{"id": q, "metric": "faithfulness", "score": s} for q, s in (("q1", 0.9), ("q2", 0.5), ("q3", 0.7))]
        judged = self.write_rows("j.jsonl", rows)
        base = os.path.join(self.tmp, "b.json")
        self.assertEqual(run_main([QRELS, RUN, "--judged", judged, "--save-baseline", base])[0], 0)
        fallen = self.write_rows("f.jsonl", [dict(row, score=row["score"] - 0.1) for row in rows])
        code, report, err = report_of([QRELS, RUN, "--judged", fallen, "--baseline", base])
        self.assertEqual(code, 1)
        self.assertEqual(report["gate"]["metrics"]["recall@5"]["verdict"], "pass")
        self.assertEqual(report["gate"]["metrics"]["judge.faithfulness"]["verdict"], "regression")
        self.assertAlmostEqual(report["mean"]["judge.faithfulness"], (0.8 + 0.4 + 0.6) / 3)
        self.assertAlmostEqual(report["mean"]["recall@5"], 2 / 3)
        self.assertIn("REGRESSION judge.faithfulness", err)

    def test_the_baseline_decides_what_is_gated(self):
        # a baseline of retrieval and judged metrics, then judged scores alone: retrieval is missing, unless
        # left out on purpose; no qrels were read, so none are compared
        judged = self.write_rows("j.jsonl", [{"id": q, "metric": "faithfulness", "score": 0.5} for q in ("q1", "q2")])
        base = os.path.join(self.tmp, "b.json")
        run_main([QRELS, RUN, "--judged", judged, "--save-baseline", base])
        code, report, _ = report_of(["--judged", judged, "--baseline", base])
        self.assertEqual((code, report["gate"]["metrics"]["recall@5"]["verdict"]), (1, "missing"))
        code, report, _ = report_of(["--judged", judged, "--baseline", base, "--not-gated",
                                     "recall@5,success@5,mrr@5,ndcg@5"])
        self.assertEqual((code, report["gate"]["metrics"]["judge.faithfulness"]["verdict"]), (0, "pass"))

    def test_tolerance_floor_and_slices_name_judged_metrics(self):
        code, report, _ = report_of(["--judged", BASE, "--min", "judge.faithfulness=0.8",
                                     "--slices", self.write_rows("s.jsonl", [{"query_id": "q1", "slice": "real"},
                                                                             {"query_id": "q2", "slice": "real"}])])
        self.assertEqual(code, 1)  # 0.75 is below the floor 0.8
        self.assertEqual(report["gate"]["floors"]["judge.faithfulness"]["verdict"], "below floor")
        self.assertAlmostEqual(report["slices"]["real"]["mean"]["judge.faithfulness"], (0.9 + 0.8) / 2)

    def test_a_slice_mean_counts_the_questions_each_metric_scored(self):
        # faithfulness scored q1 q2, correctness only q1: the slice's correctness mean is q1's alone, as the
        # gate's slice mean is (it was a KeyError traceback)
        judged = self.write_rows("j.jsonl", [{"id": "q1", "metric": "faithfulness", "score": 0.9},
                                             {"id": "q2", "metric": "faithfulness", "score": 0.5},
                                             {"id": "q1", "metric": "correctness", "score": 0.25}])
        slices = self.write_rows("s.jsonl", [{"query_id": q, "slice": "real"} for q in ("q1", "q2")])
        allow = ["--max-judge-missing", "0.5"]
        code, report, _ = report_of(["--judged", judged, "--slices", slices, *allow])
        self.assertEqual(code, 0)
        self.assertAlmostEqual(report["slices"]["real"]["mean"]["judge.faithfulness"], (0.9 + 0.5) / 2)
        self.assertEqual(report["slices"]["real"]["mean"]["judge.correctness"], 0.25)
        base = os.path.join(self.tmp, "b.json")
        self.assertEqual(run_main(["--judged", judged, "--slices", slices, *allow, "--save-baseline", base])[0], 0)
        code, report, _ = report_of(["--judged", judged, "--slices", slices, *allow, "--baseline", base,
                                     "--max-drop", "real:judge.correctness=0.1"])
        self.assertEqual(report["gate"]["metrics"]["real:judge.correctness"]["now"], 0.25)

    def test_every_format_renders_judged_metrics(self):
        for form in ("table", "markdown", "csv"):
            with self.subTest(form):
                code, out, _ = run_main(["--judged", BASE, "--format", form])
                self.assertEqual(code, 0)
                self.assertIn("judge.faithfulness", out)


class JudgeProvenance(JudgedTempDir, unittest.TestCase):
    """The judge's configuration is stored in the baseline and compared like the qrels' sha256."""

    def setUp(self):
        super().setUp()
        self.base = os.path.join(self.tmp, "b.json")
        run_main(["--judged", BASE, "--judge", "model=gpt-4o", "--judge", "temperature=0", "--save-baseline", self.base])

    def test_the_baseline_stores_the_judge(self):
        with open(self.base, encoding="utf-8") as handle:
            stored = json.load(handle)["judge"]
        self.assertEqual(stored["provenance"], {"model": "gpt-4o", "temperature": "0"})
        self.assertEqual(len(stored["answers"]), 6)
        self.assertEqual(rag_eval.read_baseline(self.base).judge["provenance"]["model"], "gpt-4o")

    def test_a_changed_judge_is_refused(self):
        code, _, err = run_main(["--judged", BASE, "--judge", "model=gpt-5", "--judge", "temperature=0",
                                 "--baseline", self.base])
        self.assertEqual(code, 2)
        assert_error_line(self, err, self.base, quoted=["gpt-4o", "gpt-5"], names=["model", "--allow-judge-change"])

    def test_an_accepted_change_is_listed_beside_the_verdict(self):
        code, report, err = report_of(["--judged", BASE, "--judge", "model=gpt-5", "--judge", "temperature=0",
                                       "--baseline", self.base, "--allow-judge-change"])
        self.assertEqual(code, 0)
        self.assertEqual(report["gate"]["judge_changes"], ["model: baseline 'gpt-4o', now 'gpt-5'"])
        out = run_main(["--judged", BASE, "--judge", "model=gpt-5", "--judge", "temperature=0", "--baseline",
                        self.base, "--allow-judge-change", "--format", "table"])[1]
        self.assertIn("judge changed since the baseline: model: baseline 'gpt-4o', now 'gpt-5'", out)
        self.assertTrue(any("gpt-5" in line for line in tagged_lines(err, "warning")), err)

    def test_the_same_judge_passes(self):
        code, report, _ = report_of(["--judged", BASE, "--judge", "model=gpt-4o", "--judge", "temperature=0",
                                     "--baseline", self.base])
        self.assertEqual((code, "judge_changes" in report["gate"]), (0, False))


class JudgeDrift(JudgedTempDir, unittest.TestCase):
    """Anchors (answers byte-identical with the baseline's) that the judge now scores otherwise make the verdict
    inconclusive, reason judge drift."""

    def rows(self, shift_anchors, shift_changed, n=30):
        rows = []
        for i in range(n):
            anchor = i < n // 2
            score = 0.5 + 0.01 * (i % 7) + (shift_anchors if anchor else shift_changed)
            rows.append({"id": f"q{i}", "metric": "faithfulness", "score": round(score, 4),
                         "answer_sha256": "%064x" % (i if anchor else i + 1000 * (shift_changed != 0))})
        return rows

    def test_planted_drift_makes_the_verdict_inconclusive(self):
        base = os.path.join(self.tmp, "b.json")
        run_main(["--judged", self.write_rows("b.jsonl", self.rows(0, 0)), "--save-baseline", base])
        now = self.write_rows("n.jsonl", self.rows(0.05, 0.05))  # the judge is kinder to unchanged answers too
        code, report, err = report_of(["--judged", now, "--baseline", base])
        self.assertEqual(code, 3)
        entry = report["gate"]["metrics"]["judge.faithfulness"]
        self.assertEqual((entry["verdict"], entry["reason"]), ("inconclusive", "judge drift"))
        drift = report["gate"]["judge_drift"]["judge.faithfulness"]
        self.assertEqual(drift["anchors"], 15)
        self.assertAlmostEqual(drift["shift"], 0.05)
        self.assertAlmostEqual(drift["share_of_delta"], 1.0)  # the anchors' shift is all of the headline delta
        self.assertTrue(any("judge.faithfulness" in line for line in tagged_lines(err, "warning")), err)
        code, out, _ = run_main(["--judged", now, "--baseline", base, "--format", "table"])
        self.assertIn("judge drift: judge.faithfulness moved +0.0500 on 15 unchanged answers", out)

    def test_the_library_gate_says_what_the_command_line_says(self):
        base = os.path.join(self.tmp, "b.json")
        run_main(["--judged", self.write_rows("b.jsonl", self.rows(0, 0)), "--save-baseline", base])
        now = self.write_rows("n.jsonl", self.rows(0.05, 0.05))
        _, report, _ = report_of(["--judged", now, "--baseline", base])
        library = rag_eval.gate(rag_eval.judged_result([rag_eval.read_judged(now)]), rag_eval.read_baseline(base))
        for part in ("metrics", "judge_drift", "contexts_changed", "verdict"):
            self.assertEqual(json.loads(json.dumps(library[part])), report["gate"][part], part)

    def test_a_steady_judge_leaves_the_verdict_alone(self):
        base = os.path.join(self.tmp, "b.json")
        run_main(["--judged", self.write_rows("b.jsonl", self.rows(0, 0)), "--save-baseline", base])
        now = self.write_rows("n.jsonl", self.rows(0, -0.1))  # changed answers got worse, anchors the same
        code, report, _ = report_of(["--judged", now, "--baseline", base])
        self.assertEqual(code, 1)
        self.assertFalse(report["gate"]["judge_drift"]["judge.faithfulness"]["drifted"])
        self.assertEqual(report["gate"]["metrics"]["judge.faithfulness"]["verdict"], "regression")

    def test_contexts_digests_on_one_side_only_keep_the_anchors(self):
        # review34: the docs compare contexts "where both sides give their digests"; a baseline saved without them
        # and a run with them had no anchor at all, so a drifted judge read as a regression (exit 1), not exit 3
        base = os.path.join(self.tmp, "b.json")
        run_main(["--judged", self.write_rows("b.jsonl", self.rows(0, 0)), "--save-baseline", base])
        now = self.write_rows("n.jsonl", [dict(row, contexts_sha256="c" * 64) for row in self.rows(-0.05, -0.05)])
        code, report, _ = report_of(["--judged", now, "--baseline", base])
        self.assertEqual((code, report["gate"]["judge_drift"]["judge.faithfulness"]["anchors"]), (3, 15))

    def test_changed_contexts_are_reported(self):
        rows = [{"id": "q1", "metric": "faithfulness", "score": 0.5, "answer_sha256": "a" * 64,
                 "contexts_sha256": "b" * 64}]
        base = os.path.join(self.tmp, "b.json")
        run_main(["--judged", self.write_rows("b.jsonl", rows), "--save-baseline", base])
        now = self.write_rows("n.jsonl", [dict(rows[0], contexts_sha256="c" * 64)])
        code, report, err = report_of(["--judged", now, "--baseline", base])
        self.assertEqual(report["gate"]["contexts_changed"], ["q1"])
        self.assertEqual(report["gate"]["judge_drift"], {})  # other contexts: no anchor
        self.assertEqual(len(tagged_lines(err, "note")), 1, err)  # the note that the contexts differ


class JudgedInTheAction(ActionRun):
    """The Action's judged input: alone (qrels and run empty) or beside the run, one verdict either way."""

    def test_judged_alone_and_beside_the_run(self):
        bash = next(self.each_bash())
        base = os.path.join(self.tmp, "b.json")
        run_main(["--judged", BASE, "--save-baseline", base])
        code, _, err, outputs, summary = self.run_step(bash, judged=NOW, baseline=base, qrels="", run="",
                                                       args="--max-judge-missing 0.2")
        self.assertEqual((code, outputs["verdict"]), (1, "regression"), err)
        self.assertAlmostEqual(json.loads(outputs["means"])["judge.faithfulness"], 3.4 / 5)
        self.assertIn("judge.faithfulness", summary)
        code, _, err, outputs, _ = self.run_step(bash, judged=BASE, qrels=QRELS, run=RUN)
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(json.loads(outputs["means"]))[:2], ["judge.-hallucination", "judge.faithfulness"])


def reference_ppi(human, judge_labelled, judge_others, df_quantile):
    """PPI++ of a mean written out from the paper (Angelopoulos, Duchi & Zrnic 2023, eq. for the mean, with the
    power-tuning weight lambda = cov(Y, f) / ((1 + n/N) var(f)) clipped to [0, 1]), independently of rag_eval."""
    n, big_n = len(human), len(judge_others)
    mean_y, mean_f = sum(human) / n, sum(judge_labelled) / n
    cov = sum((y - mean_y) * (f - mean_f) for y, f in zip(human, judge_labelled)) / (n - 1)
    pooled = judge_labelled + judge_others
    mean_pooled = sum(pooled) / len(pooled)
    var_pooled = sum((f - mean_pooled) ** 2 for f in pooled) / (len(pooled) - 1)
    lam = min(1.0, max(0.0, cov / ((1 + n / big_n) * var_pooled)))
    mean_others = sum(judge_others) / big_n
    rectifier = [y - lam * f for y, f in zip(human, judge_labelled)]
    mean_rect = sum(rectifier) / n
    estimate = lam * mean_others + mean_rect
    variance = (lam ** 2 * sum((f - mean_others) ** 2 for f in judge_others) / (big_n - 1) / big_n
                + sum((r - mean_rect) ** 2 for r in rectifier) / (n - 1) / n)
    half = df_quantile * variance ** 0.5
    return estimate, lam, (estimate - half, estimate + half), sum((y - mean_y) ** 2 for y in human) / (n - 1) / variance


class HumanLabels(JudgedTempDir, unittest.TestCase):
    """Prediction-powered means and deltas from a random labelled subset (PPI++), against a reference."""

    T_49 = 2.0096  # Student's t, 0.975 quantile, 49 degrees of freedom (tables: 2.010)

    def data(self, n=50, others=150, seed=3):
        import random

        rng = random.Random(seed)
        human = [rng.random() for _ in range(n)]
        judge = [min(1.0, max(0.0, y + rng.gauss(0.05, 0.1))) for y in human]
        rest = [rng.random() for _ in range(others)]
        return human, judge, rest

    def test_matches_the_reference(self):
        human, judge, rest = self.data()
        labels = {f"l{i}": y for i, y in enumerate(human)}
        judged = {**{f"l{i}": f for i, f in enumerate(judge)}, **{f"u{i}": f for i, f in enumerate(rest)}}
        got = rag_eval._ppi_mean(labels, judged)
        estimate, lam, (low, high), effective = reference_ppi(human, judge, rest, self.T_49)
        self.assertEqual((got["method"], got["labels"], got["questions"]), ("ppi++", 50, 200))
        self.assertAlmostEqual(got["estimate"], estimate, places=12)
        self.assertAlmostEqual(got["lambda"], lam, places=12)
        self.assertAlmostEqual(got["interval"][0], low, places=4)  # the t quantile: Cornish-Fisher vs the table
        self.assertAlmostEqual(got["interval"][1], high, places=4)
        self.assertAlmostEqual(got["effective_labels"], effective, delta=0.01 * effective)
        self.assertGreater(got["effective_labels"], 50)  # a good judge is worth more labels than were given
        mean_y, mean_f = sum(human) / 50, sum(judge) / 50
        r = (sum((y - mean_y) * (f - mean_f) for y, f in zip(human, judge))
             / (sum((y - mean_y) ** 2 for y in human) * sum((f - mean_f) ** 2 for f in judge)) ** 0.5)
        self.assertAlmostEqual(got["correlation"], r, places=12)

    def test_under_the_minimum_the_labels_alone(self):
        human, judge, rest = self.data(n=10)
        labels = {f"l{i}": y for i, y in enumerate(human)}
        judged = {**{f"l{i}": f for i, f in enumerate(judge)}, **{f"u{i}": f for i, f in enumerate(rest)}}
        got = rag_eval._ppi_mean(labels, judged)
        self.assertTrue(got["method"].startswith("labels alone (fewer than 50 labels"))
        self.assertEqual(got["lambda"], 0.0)
        self.assertAlmostEqual(got["estimate"], sum(human) / 10)
        self.assertAlmostEqual(got["effective_labels"], 10)

    def test_labels_alone_of_pass_fail_never_a_zero_width_interval(self):
        # review34: 50 passes of 50 gave the 95% interval [1, 1]; where 3% of all answers fail, it covered the
        # truth in 66% of seeded sets (labels alone: Clopper-Pearson, exact for 0/1, as --ci's pass/fail means)
        labels = {f"q{i}": 1.0 for i in range(50)}
        judged = {f"q{i}": 1.0 if i % 7 else 0.0 for i in range(300)}
        got = rag_eval._ppi_mean(labels, judged)
        self.assertTrue(got["method"].startswith("labels alone"))
        self.assertEqual(got["interval"], list(rag_eval._clopper_pearson(50, 50)))
        self.assertLess(got["interval"][0], 0.93)

    def test_a_weak_judge_the_labels_alone(self):
        human, _, rest = self.data()
        labels = {f"l{i}": y for i, y in enumerate(human)}
        judged = {**{f"l{i}": 0.5 + 0.001 * ((-1) ** i) for i in range(50)}, **{f"u{i}": f for i, f in enumerate(rest)}}
        got = rag_eval._ppi_mean(labels, judged)
        self.assertIn("weakly correlated", got["method"])
        self.assertAlmostEqual(got["estimate"], sum(human) / 50)

    def test_every_report_says_labels_correlation_and_effective_size(self):
        base = os.path.join(self.tmp, "b.json")
        human, judge, rest = self.data()
        rows = [{"id": f"l{i}", "metric": "faithfulness", "score": f} for i, f in enumerate(judge)]
        rows += [{"id": f"u{i}", "metric": "faithfulness", "score": f} for i, f in enumerate(rest)]
        run_main(["--judged", self.write_rows("b.jsonl", [dict(row, score=min(1.0, row["score"] + 0.1)) for row in rows]),
                  "--save-baseline", base])
        labels = self.write_rows("h.jsonl", [{"id": f"l{i}", "metric": "faithfulness", "label": y,
                                              "baseline_label": min(1.0, y + 0.1)} for i, y in enumerate(human)])
        code, report, err = report_of(["--judged", self.write_rows("n.jsonl", rows), "--baseline", base,
                                       "--human-labels", labels, "--max-drop", "0.5"])
        self.assertEqual(code, 0)
        for part in ("mean", "delta"):
            entry = report["human"]["judge.faithfulness"][part]
            self.assertEqual(entry["labels"], 50)
            self.assertIsNotNone(entry["correlation"])
            self.assertIsNotNone(entry["effective_labels"])
        delta = report["human"]["judge.faithfulness"]["delta"]
        self.assertLess(delta["interval"][0], delta["estimate"])
        self.assertTrue(any("judge.faithfulness" in line for line in tagged_lines(err, "note")), err)

    def test_labels_of_an_unknown_metric_are_refused(self):
        labels = self.write_rows("h.jsonl", [{"id": "q1", "metric": "tone", "label": 1.0}])
        code, _, err = run_main(["--judged", BASE, "--human-labels", labels])
        self.assertEqual(code, 2)
        assert_error_line(self, err, labels, quoted=["tone"])


if __name__ == "__main__":
    unittest.main()
