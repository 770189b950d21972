"""Tests for the lean pass over the gate, reporting and command line (issue 12): what the
suite did not reach before the pass, and what the folded helpers must still produce.

Run with ``python3 -m unittest test_cli_lean`` from the repository root.
"""

import io
import json
import math
import os
import random
import unittest
from unittest import mock

import rag_eval
from helpers_for_tests import ERROR_PREFIX, TempDirMixin, run_main
from test_compare import holm_by_hand


def synthetic(seed, queries=30):
    """qrels and three runs of different quality, so that the best run differs between metrics."""
    rng = random.Random(seed)
    qrels = {f"q{i}": {f"d{j}": rng.choice([0, 1, 2]) for j in rng.sample(range(40), 6)} for i in range(queries)}
    for grades in qrels.values():
        grades[next(iter(grades))] = 2  # every query scored
    runs = {}
    for name, quality in (("ref", 0.4), ("x", 0.5), ("y", 0.45)):
        runs[name] = {qid: sorted(range(40), key=lambda j: -(rng.random() + quality * (f"d{j}" in grades)))[:10]
                      for qid, grades in qrels.items()}
        runs[name] = {qid: [f"d{j}" for j in ranking] for qid, ranking in runs[name].items()}
    return qrels, runs


class TestCompareRunsAgainstTheBest(unittest.TestCase):
    def test_p_against_the_best_is_the_pair_s_own_test_and_holm_adjusts_them(self):
        for seed in range(4):
            with self.subTest(seed=seed):
                qrels, runs = synthetic(seed)
                results = [(name, rag_eval.evaluate(qrels, runs[name], [3, 5], measures=["recall", "mrr", "ndcg"]))
                           for name in ("ref", "x", "y")]
                found = rag_eval.compare_runs(results, resamples=300, seed=1)
                scores = {name: rag_eval.per_query_by_metric(result) for name, result in results}
                by_hand = {}
                for metric, entry in found["metrics"].items():
                    best = entry["best"]
                    for name, run in entry["runs"].items():
                        if name == best:
                            self.assertEqual(run["mark"], "best")
                            continue
                        # a two-sided test: the pair's p is the same whichever side is "before"
                        before, after = (name, best) if name == "ref" else (best, name)
                        p = rag_eval.compare_paired(metric, scores[before][metric], scores[after][metric],
                                                    resamples=300, seed=1).p_value
                        self.assertEqual(run["p_vs_best"], p, (metric, name, best))
                        by_hand[name, metric] = p
                adjusted = holm_by_hand(by_hand)
                for (name, metric), p in adjusted.items():
                    self.assertEqual(found["metrics"][metric]["runs"][name]["p_vs_best_adjusted"], p)
                candidates = {(name, metric): run["p_value"] for metric, entry in found["metrics"].items()
                              for name, run in entry["runs"].items() if name != "ref"}
                for (name, metric), p in holm_by_hand(candidates).items():
                    self.assertEqual(found["metrics"][metric]["runs"][name]["p_adjusted"], p)
                self.assertEqual(found["adjustment"], "holm")


class TestGateEntries(unittest.TestCase):
    def test_a_paired_entry_holds_the_comparison_and_its_verdict(self):
        qrels, runs = synthetic(7)
        before = rag_eval.evaluate(qrels, runs["ref"], 5)
        after = rag_eval.evaluate(qrels, runs["x"], 5)
        baseline = rag_eval.Baseline(before["mean"], rag_eval.per_query_by_metric(before), {"k": [5]}, "x")
        settings = rag_eval.GateSettings(rule="significant", resamples=300)
        entry = rag_eval.gate(after, baseline, settings)["metrics"]["ndcg@5"]
        comparison = rag_eval.compare_paired("ndcg@5", baseline.per_query["ndcg@5"],
                                             rag_eval.per_query_by_metric(after)["ndcg@5"], resamples=300)
        self.assertEqual(sorted(entry), sorted([
            "baseline", "now", "delta", "allowed_drop", "tolerance", "queries", "improved", "worse", "same",
            "mean_delta", "effect_size", "p_value", "p_holm", "p_adjusted", "exact", "unresolvable", "interval",
            "hit_to_miss", "largest_drops", "min_detectable_drop", "queries_needed", "verdict"]))
        self.assertEqual(list(entry)[-1], "verdict")
        self.assertEqual((entry["queries"], entry["improved"], entry["worse"], entry["same"]),
                         (comparison.queries, comparison.improved, comparison.worse, comparison.same))
        self.assertEqual(entry["effect_size"], comparison.mean_delta / comparison.spread)
        self.assertEqual(entry["largest_drops"], [list(drop) for drop in comparison.largest_drops])
        self.assertIsInstance(entry["interval"], list)  # its draws are the family's: not compare_paired's own


class TestCommandLine(TempDirMixin, unittest.TestCase):
    def files(self):
        qrels, runs = synthetic(3)
        return self.write("qrels.json", qrels), self.write("ref.json", runs["ref"]), self.write("x.json", runs["x"])

    def test_markdown_lists_the_calibration_under_its_first_line(self):
        qrels, ref, run = self.files()
        base = self.path("base.json")
        self.assertEqual(run_main([qrels, ref, "--save-baseline", base])[0], 0)
        code, out, err = run_main([qrels, run, "--baseline", base, "--calibrate", "10", "--resamples", "200",
                                   "--format", "markdown"])
        self.assertIn(code, (0, 1, 3), err)
        parts = out.split("\n\n")
        start = next(i for i, part in enumerate(parts) if part.startswith("Calibration: "))
        heading, items = parts[start], parts[start + 1].rstrip("\n").split("\n")  # a blank line between them
        self.assertTrue(heading.endswith(" alpha 0.05:") and "\n" not in heading, heading)
        self.assertEqual([line[:2] for line in items], ["- "] * 3, items)
        self.assertTrue(items[0].startswith("- a/a (false fails = regression): regression "), items)
        code, table, _ = run_main([qrels, run, "--baseline", base, "--calibrate", "10", "--resamples", "200",
                                   "--format", "table"])
        self.assertIn("\n  a/a (false fails = regression): regression ", table)

    def test_tolerance_without_a_metric_before_its_equals_sign(self):
        qrels, ref, _ = self.files()
        code, out, err = run_main([qrels, ref, "--max-drop", "=0.1"])
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(err, f"{ERROR_PREFIX}argument --max-drop: expected METRIC=X or X, got '=0.1'\n")
        code, _, err = run_main([qrels, ref, "--max-drop", "recall@5=150"])
        self.assertEqual(err, f"{ERROR_PREFIX}argument --max-drop: expected a drop of at most 1, since every measure "
                              "lies in [0, 1], got '150' (did you mean 150%?)\n")

    def test_output_of_several_runs_names_each_run_and_no_single_run(self):
        qrels, ref, run = self.files()
        out = self.path("full.json")
        code, _, err = run_main([qrels, ref, run, "--output", out, "--resamples", "200"])
        self.assertEqual(code, 0, err)
        with open(out, encoding="utf-8") as f:
            full = json.load(f)
        self.assertEqual(sorted(full["inputs"]), ["qrels", "runs"])
        self.assertEqual([entry["name"] for entry in full["inputs"]["runs"]], ["ref", "x"])
        self.assertTrue(all(len(entry["sha256"]) == 64 for entry in full["inputs"]["runs"]))
        self.assertTrue(all("per_query" in entry for entry in full["runs"]))
        code, _, err = run_main([qrels, run, "--baseline-run", ref, "--output", out])
        with open(out, encoding="utf-8") as f:
            full = json.load(f)
        self.assertEqual(sorted(full["inputs"]), ["baseline_run", "qrels", "run"])
        self.assertIn("per_query", full)


class TestFoldedCommandLineChecks(TempDirMixin, unittest.TestCase):
    """The option parsers from one builder, the checks folded into _check_options, the one DCG helper."""

    def inputs(self):
        qrels = self.write("qrels.json", {"q1": {"a": 2, "b": 1}, "q2": {"c": 1}})
        run = self.write("run.json", {"q1": {"x": 0.9, "a": 0.5}, "q2": {"c": 0.7}})
        return qrels, run

    def test_each_option_parser_says_what_it_expected(self):
        qrels, run = self.inputs()
        for option, text, expected in (
                ("--calibrate", "5", "an integer from 10 to 100000"), ("--resamples", "99", "an integer >= 100"),
                ("--min-grade", "0", "a positive integer"), ("--seed", "-1", "an integer >= 0"),
                ("--digits", "18", "an integer from 1 to 17"), ("--alpha", "1", "a number between 0 and 1 (1e-15 at least)"),
                ("--abstain-below", "nan", "a finite number"),
                ("--max-input-bytes", "0", "a positive number of bytes"),
                ("--max-input-bytes", "1" * 20, "a positive number of bytes"),
                ("--min-overlap", "0", "a fraction in (0, 1], such as 0.5"),
                ("--lock-timeout", "1.5", "an integer >= 0"),
                # float() reads Arabic-Indic digits; the options read ASCII, as --digits and the readers do
                ("--max-drop", "\u0660.\u0661", "a finite number >= 0 (or a percentage such as 5%)"),
                ("--max-drop", "\u0665%", "a finite number >= 0 (or a percentage such as 5%)"),
                ("--abstain-below", "\u0660.\u0661", "a finite number")):
            with self.subTest(option=option, text=text):
                line = self.assert_error([qrels, run, option, text])
                got = rag_eval._clipped_repr(text)
                self.assertEqual(line, f"{ERROR_PREFIX}argument {option}: expected {expected}, got {got}")
        for option, text in (("--digits", "17"), ("--alpha", "0.999"), ("--largest-drops", "0")):
            with self.subTest(option=option, text=text):  # the bounds themselves are taken
                self.assertEqual(run_main([qrels, run, option, text])[0], 0)
        self.assertEqual(self.assert_error([qrels, run, "--doc-id-sep", ""]),
                         f"{ERROR_PREFIX}argument --doc-id-sep: expected a non-empty separator such as '#'")

    def test_a_folder_link_on_the_way_is_refused_and_plain_spellings_pass(self):
        qrels, run = self.inputs()
        os.symlink(self.tmp, self.path("via"))
        linked = os.path.join(self.path("via"), "qrels.json")
        line = self.assert_error([linked, run, "--no-symlinks"])
        self.assertTrue(line.endswith(": is or passes through a symbolic link (--no-symlinks)"), line)
        for spelled in (qrels, "/" + qrels, qrels.replace(os.sep, os.sep * 2)):
            with self.subTest(spelled=spelled):
                code, _, err = run_main([spelled, run, "--no-symlinks"])
                self.assertEqual(code, 0, err)

    def test_label_checks_come_after_the_other_option_checks(self):
        qrels, run = self.inputs()
        # a --meta key twice is named before the --baseline-qrels mistakes
        self.assertEqual(self.assert_error([qrels, run, "--meta", "a=1", "--meta", "a=2", "--baseline-qrels", qrels]),
                         f"{ERROR_PREFIX}--meta names 'a' twice")
        self.assertEqual(self.assert_error([qrels, run, "--baseline-qrels", qrels]),
                         f"{ERROR_PREFIX}--baseline-qrels goes with --baseline-run: the old run is scored on both "
                         "judgments")
        self.assertEqual(self.assert_error([qrels, run, "--baseline-run", run, "--baseline-qrels", qrels]),
                         f"{ERROR_PREFIX}--baseline-qrels names the qrels themselves: nothing changed to explain")
        old = self.write("old.json", {"q1": {"a": 1}, "q2": {"c": 1}})
        for option in ("--output", "--junit", "--metrics-file", "--unjudged", "--save-baseline"):
            with self.subTest(option=option):
                self.assertEqual(self.assert_error([qrels, run, "--baseline-run", run, "--baseline-qrels", old,
                                                    option, old]),
                                 f"{ERROR_PREFIX}{old}: an output would overwrite an input (--baseline-qrels)")

    def test_the_qrels_as_the_run_is_refused_and_one_float_score_is_a_run(self):
        qrels, _ = self.inputs()
        self.assertEqual(self.assert_error([qrels, qrels]),
                         f"{ERROR_PREFIX}{qrels}: the run is a copy of the qrels: every document is judged and every "
                         "score is its grade (was the qrels file given as the run?)")
        run = self.write("almost.json", {"q1": {"a": 2, "b": 1.0}, "q2": {"c": 1}})
        code, out, err = run_main([qrels, run])
        self.assertEqual(code, 0, err)
        single = self.write("single.json", {"q2": {"c": 1}})  # one document alone is no copy
        self.assertEqual(run_main([qrels, single, "--allow-partial-run"])[0], 0)

    def test_ndcg_cuts_the_ideal_at_k_and_counts_gains_only_within_k(self):
        grades = {"a": 2, "b": 1, "c": 3}
        # k = 2, ranking b, x, c: DCG (2**1 - 1)/log2 2 = 1 (c is at rank 3, beyond k);
        # the ideal c, a: 7/log2 2 + 3/log2 3
        self.assertEqual(rag_eval.ndcg_at_k(["b", "x", "c"], grades, 2), 1 / (7 + 3 / math.log2(3)))
        # linear gain, k = 3: (1 + 3/log2 4) / (3 + 2/log2 3 + 1/log2 4)
        self.assertAlmostEqual(rag_eval.ndcg_at_k(["b", "x", "c"], grades, 3, gain="linear"),
                               (1 + 3 / 2) / (3 + 2 / math.log2(3) + 1 / 2), places=15)


class TestCommandLinePathsOnceUnreached(TempDirMixin, unittest.TestCase):
    """Error paths of the command line that no test reached (found with coverage over child processes too)."""

    EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples", "rechunking")

    def example(self, name):
        return os.path.join(self.EXAMPLE, name)

    def test_a_job_on_the_labels_says_what_it_lacks(self):
        spans, chunk_ids = self.example("qrels.spans.jsonl"), self.example("qrels.chunks200.jsonl")
        chunks, corpus = self.example("chunks200.jsonl"), self.example("corpus.jsonl")
        out = self.path("out.jsonl")
        for argv, expected in (
                ([spans, self.example("run200.jsonl"), "--check-labels", "--corpus", corpus],
                 "--check-labels, --fix-labels and --to-spans take QRELS alone, no RUN"),
                ([chunk_ids, "--to-spans", out],
                 "--to-spans needs --chunks FILE (the chunk map the labels were made with), and is a job of its own"),
                ([chunk_ids, "--to-spans", out, "--chunks", chunks, "--check-labels"],
                 "--to-spans needs --chunks FILE (the chunk map the labels were made with), and is a job of its own"),
                ([spans, "--check-labels"],
                 "--check-labels and --fix-labels need --corpus FILE (JSONL rows doc_id, text)"),
                ([spans, "--to-spans", out, "--chunks", chunks],
                 f"{spans}: already evidence spans (rows with start and end)"),
                ([chunk_ids, "--check-labels", "--corpus", corpus],
                 f"{chunk_ids}: expected evidence judgments (JSONL rows with start and end)")):
            with self.subTest(argv=argv[1:]):
                self.assertEqual(self.assert_error(argv), ERROR_PREFIX + expected)
        self.assertFalse(os.path.exists(out))

    def test_to_spans_names_standard_input_as_every_reader_does(self):
        # two chunks at the same offsets judged 1 and 2: the conflict is the qrels', read from standard input
        chunks = self.path("chunks.jsonl")
        with open(chunks, "w") as out:
            out.write('{"chunk_id": "a", "doc_id": "d", "start": 0, "end": 5}\n'
                      '{"chunk_id": "b", "doc_id": "d", "start": 0, "end": 5}\n')
        ids = b'{"query_id": "q1", "doc_id": "a", "grade": 1}\n{"query_id": "q1", "doc_id": "b", "grade": 2}\n'
        with mock.patch("sys.stdin") as standard_input:
            standard_input.buffer = io.BufferedReader(io.BytesIO(ids))
            line = self.assert_error(["-", "--chunks", chunks, "--to-spans", self.path("spans.jsonl")])
        self.assertEqual(line, f"{ERROR_PREFIX}<stdin>: query 'q1': chunks at ('d', 0, 5) are judged 1 and 2")
        # the chunk map from standard input, lacking a judged chunk
        ids_file = self.path("ids.jsonl")
        with open(ids_file, "wb") as out:
            out.write(b'{"query_id": "q1", "doc_id": "a", "grade": 1}\n{"query_id": "q1", "doc_id": "c9", "grade": 1}\n')
        with open(chunks, "rb") as data, mock.patch("sys.stdin") as standard_input:
            standard_input.buffer = io.BufferedReader(io.BytesIO(data.read()))
            line = self.assert_error([ids_file, "--chunks", "-", "--to-spans", self.path("spans.jsonl")])
        self.assertEqual(line, f"{ERROR_PREFIX}<stdin>: query 'q1': judged chunk 'c9' is not in the chunk map")

    def test_a_job_on_the_labels_reads_one_input_at_most_from_standard_input(self):
        # the second reader would find the stream empty and blame its content
        self.assertEqual(self.assert_error(["-", "--chunks", "-", "--to-spans", self.path("spans.jsonl")]),
                         f"{ERROR_PREFIX}only one input can be - (standard input)")
        self.assertEqual(self.assert_error(["-", "--corpus", "-", "--check-labels"]),
                         f"{ERROR_PREFIX}only one input can be - (standard input)")

    def test_a_baseline_and_a_baseline_run_exclude_each_other(self):
        qrels = self.write("qrels.json", {"q1": {"a": 2}})
        run = self.write("run.json", {"q1": {"a": 0.5, "b": 0.4}})
        baseline = self.write("baseline.json", {"ndcg@10": 0.5})
        self.assertEqual(self.assert_error([qrels, run, "--baseline", baseline, "--baseline-run", run]),
                         f"{ERROR_PREFIX}--baseline and --baseline-run exclude each other: choose one")

    def test_baseline_qrels_through_a_link_and_an_old_run_that_fails_on_them(self):
        qrels = self.write("qrels.json", {"q1": {"a": 2}, "q2": {"c": 1}})
        run = self.write("run.json", {"q1": {"a": 0.5, "b": 0.4}, "q2": {"c": 0.7}})
        old = self.write("old.json", {"q1": {"zz": 1}, "q2": {"yy": 1}})
        os.symlink(old, self.path("link.json"))
        self.assertEqual(self.assert_error([qrels, run, "--baseline-run", run, "--baseline-qrels",
                                            self.path("link.json"), "--no-symlinks"]),
                         f"{ERROR_PREFIX}{self.path('link.json')}: is or passes through a symbolic link (--no-symlinks)")
        # the old run judged on the old qrels meets none of them: the error says which scoring failed
        self.assertEqual(self.assert_error([qrels, run, "--baseline-run", run, "--baseline-qrels", old]),
                         f"{ERROR_PREFIX}{run}: no document of the run is judged in the qrels, so nothing was "
                         "evaluated (are they about the same documents?) (scoring the old run on --baseline-qrels)")

    def test_a_file_that_cannot_be_renamed_into_place_is_an_error_and_leaves_nothing(self):
        qrels = self.write("qrels.json", {"q1": {"a": 2}})
        run = self.write("run.json", {"q1": {"a": 0.5, "b": 0.4}})
        with mock.patch("rag_eval.os.replace", side_effect=PermissionError(13, "Permission denied")):
            code, out, err = run_main([qrels, run, "--output", self.path("full.json")])
        self.assertEqual(code, rag_eval.EXIT_ERROR)
        self.assertTrue(out.startswith("{"), out)  # the report was out: only then are files renamed
        self.assertEqual(err, f"{ERROR_PREFIX}{self.path('full.json')}: cannot write: Permission denied\n")
        self.assertEqual(sorted(os.listdir(self.tmp)), ["qrels.json", "run.json"])

    def test_a_failure_of_the_machine_outside_the_readers_is_one_error_line(self):
        with mock.patch("rag_eval._run", side_effect=OSError(28, "No space left on device", "somewhere")):
            code, out, err = run_main(["q", "r"])
        self.assertEqual((code, out, err), (rag_eval.EXIT_ERROR, "", f"{ERROR_PREFIX}somewhere: No space left on device\n"))

    def test_a_closed_stderr_swallows_a_note_and_a_bug_still_exits_2(self):
        closed = io.StringIO()
        closed.close()
        with mock.patch("sys.stderr", closed):
            rag_eval._warn("rag_eval: note: nowhere to go")  # no exception: the exit code still tells
        # A bug: its traceback, then exit 2; a stderr that fails while printing it is silenced, not raised.
        with mock.patch("rag_eval.main", side_effect=RuntimeError("a bug")), \
                mock.patch("traceback.print_exc", side_effect=OSError(5, "Input/output error")), \
                mock.patch("sys.stdout", io.StringIO()), mock.patch("sys.stderr", io.StringIO()), \
                self.assertRaises(SystemExit) as ended:
            rag_eval.console_main()
        self.assertEqual(ended.exception.code, rag_eval.EXIT_ERROR)



class TestCommandLineDetailsPlantedBugsFound(TempDirMixin, unittest.TestCase):
    """What planted bugs in the command line showed untested (mutants3); each expected line written out."""

    def test_a_significant_gate_names_three_undecided_metrics_and_a_coarse_tolerance(self):
        # synthetic(3): "x" is the baseline, "ref" the worse run.  With a 0.2 tolerance all four metrics are
        # undecided: the warning names the first three and says there are more; one metric resolves less
        # finely than 0.2 with 80% power (its detail, in the report's notes, names it).
        qrels, runs = synthetic(3)
        qrels, ref, better = self.write("q.json", qrels), self.write("ref.json", runs["ref"]), self.write("x.json", runs["x"])
        base = self.path("base.json")
        self.assertEqual(run_main([qrels, better, "--save-baseline", base])[0], 0)
        code, _, err = run_main([qrels, ref, "--baseline", base, "--gate", "significant", "--max-drop", "0.2",
                                 "--resamples", "200"])
        self.assertEqual(code, rag_eval.EXIT_INCONCLUSIVE, err)
        lines = err.splitlines()
        self.assertIn("rag_eval: warning: inconclusive: neither a drop beyond the tolerance nor one within it is "
                      "shown for mrr@5 (~35 queries would resolve it), ndcg@5 (~21 queries would resolve it), "
                      "recall@5 (~19 queries would resolve it) and more", lines)
        self.assertIn("rag_eval: warning: the tolerance is finer than this test set resolves with 80% power for 1 "
                      "metric; the gate mostly measures noise there", lines)

    def test_a_meta_value_may_hold_256_characters_not_257(self):
        qrels = self.write("q.json", {"q1": {"a": 1}})
        run = self.write("r.json", {"q1": ["a"]})
        output = self.path("full.json")
        code, _, err = run_main([qrels, run, "--meta", "index=" + "v" * 256, "--output", output])
        self.assertEqual(code, 0, err)
        with open(output, encoding="utf-8") as f:
            self.assertEqual(json.load(f)["meta"]["index"], "v" * 256)
        self.assertEqual(self.assert_error([qrels, run, "--meta", "index=" + "v" * 257]),
                         f"{ERROR_PREFIX}argument --meta: expected KEY=VALUE, a printable key without '=' of at most "
                         "64 characters and a printable value of at most 256, got 'index=vvvvvvvvvv'...")

    def test_the_report_names_the_first_20_queries_the_run_missed(self):
        # 50 queries judged, the run answers q22 .. q50: 21 missing, the report's note names q01 .. q20.
        ids = [f"q{i:02d}" for i in range(1, 51)]
        qrels = self.write("q.json", {qid: {"a": 1} for qid in ids})
        run = self.write("r.json", {qid: ["a"] for qid in ids[21:]})
        output = self.path("full.json")
        code, _, err = run_main([qrels, run, "--output", output])
        self.assertEqual(code, 0, err)
        with open(output, encoding="utf-8") as f:
            notes = json.load(f)["notes"]
        self.assertEqual(notes[0], "warning: the run has no results for 21 of 50 scored queries (first: 'q01'); they "
                                   f"score 0 (missing: {', '.join(ids[:20])})")

    def test_an_output_that_is_no_regular_file_is_refused_before_any_input_is_read(self):
        qrels = self.write("q.json", {"q1": {"a": 1}})
        self.assertEqual(self.assert_error([qrels, self.path("missing.json"), "--output", os.devnull]),
                         f"{ERROR_PREFIX}{os.devnull}: not a regular file (a device, FIFO, socket or folder): only "
                         "regular files are written, never replaced")

    def test_a_named_tolerance_without_a_baseline_is_refused(self):
        qrels = self.write("q.json", {"q1": {"a": 1}})
        run = self.write("r.json", {"q1": ["a"]})
        self.assertEqual(self.assert_error([qrels, run, "--max-drop", "ndcg@5=0.1"]),
                         f"{ERROR_PREFIX}--max-drop: ndcg@5 has no baseline to be compared with (see --baseline)")

    def test_help_lists_the_measures_two_spaces_after_the_longest_name(self):
        code, out, _ = run_main(["--help"])
        self.assertEqual(code, 0)
        longest = max(len(f"{m.name}@k") for m in rag_eval.MEASURES)  # precision@k, 11 characters, today
        for m in rag_eval.MEASURES:
            with self.subTest(measure=m.name):
                self.assertIn(f"\n  {(m.name + '@k').ljust(longest + 2)}{m.summary}\n", out)
        self.assertIn("\n  precision@k  relevant documents in the top k / k", out)

    def test_a_drop_of_1_is_the_largest_a_tolerance_may_allow(self):
        qrels = self.write("q.json", {"q1": {"a": 1}})
        run = self.write("r.json", {"q1": ["a"]})
        self.assertEqual(run_main([qrels, run, "--save-baseline", self.path("base.json")])[0], 0)
        self.assertEqual(run_main([qrels, run, "--baseline", self.path("base.json"), "--max-drop", "1"])[0], 0)
        self.assertEqual(self.assert_error([qrels, run, "--max-drop", "1.5"]),
                         f"{ERROR_PREFIX}argument --max-drop: expected a drop of at most 1, since every measure lies in "
                         "[0, 1], got '1.5' (did you mean 1.5%?)")

    def test_an_error_with_no_stderr_still_exits_2(self):
        # Started with stderr closed (2>&-): sys.stderr is None, the line goes nowhere, the exit code still tells.
        with mock.patch("sys.stderr", None):
            self.assertEqual(rag_eval.main([self.path("missing.json"), self.path("missing.json")]), rag_eval.EXIT_ERROR)

    def test_out_of_memory_is_one_error_line_and_exit_2(self):
        with mock.patch("rag_eval._run", side_effect=MemoryError()):
            self.assertEqual(run_main(["q", "r"]), (rag_eval.EXIT_ERROR, "", f"{ERROR_PREFIX}out of memory\n"))


if __name__ == "__main__":
    unittest.main()
