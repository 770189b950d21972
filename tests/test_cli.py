"""The command line: options and their checks, hints, the entry point as a real process.

Most tests call ``rag_eval.main`` in-process (tests/helpers.py); TestEntryPoint
starts real processes: the README's quick start runs the script itself, the
others ``python -m rag_eval``.  Expected lines are written out; exact error
lines live in fixtures/bad/cases.json (tests/test_bad_inputs.py).
"""

import gzip
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import unittest
from unittest import mock

import rag_eval
from tests.helpers import BASELINE, ERROR_PREFIX, QRELS, REPO, RUN, assert_error_line, child_env, fixture_qrels_variants, fixture_run_variants, run_main, tagged_lines, TempDirMixin, three_runs


@unittest.skipUnless(os.name == "posix", "hard links")
class TestNoOutputIsAnInput(TempDirMixin, unittest.TestCase):
    def test_a_hard_link_of_the_baseline_qrels_is_refused(self):
        old_qrels = self.write("old_qrels.json", self.read(QRELS))
        alias = self.path("alias.json")
        os.link(old_qrels, alias)
        before = self.read(old_qrels)
        line = self.assert_error([QRELS, RUN, "--baseline-run", RUN, "--baseline-qrels", old_qrels, "--output", alias],
                                 [alias])
        self.assertIn("--baseline-qrels", line)
        self.assertEqual(self.read(old_qrels), before)

    def test_a_hard_link_of_a_later_run_is_refused(self):
        second = self.write("second.json", self.read(RUN))
        alias = self.path("alias.json")
        os.link(second, alias)
        line = self.assert_error([QRELS, RUN, second, "--output", alias], [alias])
        self.assertIn("--output", line)

    def test_a_later_run_that_is_a_symbolic_link_is_refused(self):
        link = self.path("link.json")
        os.symlink(RUN, link)
        self.assert_error([QRELS, RUN, link, "--no-symlinks"], [link, "--no-symlinks"])

    def test_standard_input_is_read_once_whichever_run_names_it(self):
        # The second run and --chunks would both read standard input.
        line = self.assert_error([QRELS, RUN, "-", "--chunks", "-"])  # the words: fixtures/bad/cases.json two_stdin_inputs
        self.assertIn(" - ", line)

    def test_the_file_a_later_run_reads_on_standard_input_is_not_overwritten(self):
        # In-process: standard input is the open file, as a shell's < gives it (found by its descriptor).
        target = self.write("run.json", self.read(RUN))
        with open(target, "rb") as stdin, mock.patch("sys.stdin", stdin):
            self.assert_error([QRELS, RUN, "-", "--output", target], [target, "--output"])
        self.assertEqual(self.read(target), self.read(RUN))

    def test_a_baseline_run_on_standard_input_beside_several_runs(self):
        # --baseline-run is the reference among several runs: counted once, it is the one input on stdin.
        with open(RUN, "rb") as data, mock.patch("sys.stdin") as standard_input:
            standard_input.buffer = io.BufferedReader(io.BytesIO(data.read()))
            code, out, err = run_main([QRELS, f"a={RUN}", f"b={RUN}", "--baseline-run", "-"])
        self.assertEqual(code, 0, err)
        self.assertEqual([run["name"] for run in json.loads(out)["runs"]], ["stdin", "a", "b"])

    def test_the_predicate(self):
        first = self.write("a.json", "{}")
        os.link(first, self.path("b.json"))
        self.assertTrue(rag_eval._overwrites(self.path("b.json"), [first]))
        self.assertTrue(rag_eval._overwrites(first, [first]))
        self.assertFalse(rag_eval._overwrites(self.path("new.json"), [first, self.path("missing.json")]))


class TestCommandLineOptions(TempDirMixin, unittest.TestCase):
    def files(self):
        qrels, runs = three_runs(3)
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
        assert_error_line(self, err, names=["argument --max-drop: "], quoted=["=0.1"])  # the words: cases.json
        code, _, err = run_main([qrels, ref, "--max-drop", "recall@5=150"])
        assert_error_line(self, err, names=["argument --max-drop: ", "(did you mean 150%?)"], quoted=["150"])

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


class TestOptionChecks(TempDirMixin, unittest.TestCase):
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
        self.assertIn("argument --doc-id-sep: ", self.assert_error([qrels, run, "--doc-id-sep", ""]))  # words: cases.json

    def test_a_folder_link_on_the_way_is_refused_and_plain_spellings_pass(self):
        qrels, run = self.inputs()
        os.symlink(self.tmp, self.path("via"))
        linked = os.path.join(self.path("via"), "qrels.json")
        line = self.assert_error([linked, run, "--no-symlinks"])
        assert_error_line(self, line, file=linked, names=["(--no-symlinks)"])
        for spelled in (qrels, "/" + qrels, qrels.replace(os.sep, os.sep * 2)):
            with self.subTest(spelled=spelled):
                code, _, err = run_main([spelled, run, "--no-symlinks"])
                self.assertEqual(code, 0, err)

    def test_label_checks_come_after_the_other_option_checks(self):
        qrels, run = self.inputs()
        # a --meta key twice is named before the --baseline-qrels mistakes
        # (the words of each: fixtures/bad/cases.json, meta_key_twice and baseline_qrels_*)
        line = self.assert_error([qrels, run, "--meta", "a=1", "--meta", "a=2", "--baseline-qrels", qrels])
        assert_error_line(self, line, names=[ERROR_PREFIX + "--meta "], quoted=["a"])
        line = self.assert_error([qrels, run, "--baseline-qrels", qrels])
        assert_error_line(self, line, names=[ERROR_PREFIX + "--baseline-qrels ", "--baseline-run"])
        line = self.assert_error([qrels, run, "--baseline-run", run, "--baseline-qrels", qrels])
        assert_error_line(self, line, names=[ERROR_PREFIX + "--baseline-qrels "])
        self.assertNotIn("--baseline-run", line)
        old = self.write("old.json", {"q1": {"a": 1}, "q2": {"c": 1}})
        for option in ("--output", "--junit", "--metrics-file", "--unjudged", "--save-baseline"):
            with self.subTest(option=option):
                assert_error_line(self, self.assert_error([qrels, run, "--baseline-run", run, "--baseline-qrels", old,
                                                           option, old]), file=old, names=["(--baseline-qrels)"])

    def test_the_qrels_as_the_run_is_refused_and_one_float_score_is_a_run(self):
        qrels, _ = self.inputs()
        assert_error_line(self, self.assert_error([qrels, qrels]), file=qrels,  # words: cases.json qrels_given_as_the_run
                          names=["(was the qrels file given as the run?)"])
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


class TestCommandLineErrorPaths(TempDirMixin, unittest.TestCase):
    """Error paths of the command line that no test reached (found with coverage over child processes too)."""

    EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "rechunking")

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
        assert_error_line(self, line, file="<stdin>", quoted=["q1"], names=["('d', 0, 5)", " 1 and 2"])
        # the chunk map from standard input, lacking a judged chunk
        ids_file = self.path("ids.jsonl")
        with open(ids_file, "wb") as out:
            out.write(b'{"query_id": "q1", "doc_id": "a", "grade": 1}\n{"query_id": "q1", "doc_id": "c9", "grade": 1}\n')
        with open(chunks, "rb") as data, mock.patch("sys.stdin") as standard_input:
            standard_input.buffer = io.BufferedReader(io.BytesIO(data.read()))
            line = self.assert_error([ids_file, "--chunks", "-", "--to-spans", self.path("spans.jsonl")])
        assert_error_line(self, line, file="<stdin>", quoted=["q1", "c9"])

    def test_a_job_on_the_labels_reads_one_input_at_most_from_standard_input(self):
        # the second reader would find the stream empty and blame its content
        # (the words: fixtures/bad/cases.json two_stdin_inputs)
        self.assertIn(" - ", self.assert_error(["-", "--chunks", "-", "--to-spans", self.path("spans.jsonl")]))
        self.assertIn(" - ", self.assert_error(["-", "--corpus", "-", "--check-labels"]))

    def test_a_baseline_and_a_baseline_run_exclude_each_other(self):
        qrels = self.write("qrels.json", {"q1": {"a": 2}})
        run = self.write("run.json", {"q1": {"a": 0.5, "b": 0.4}})
        baseline = self.write("baseline.json", {"ndcg@10": 0.5})
        line = self.assert_error([qrels, run, "--baseline", baseline, "--baseline-run", run])  # words: cases.json
        assert_error_line(self, line, names=[ERROR_PREFIX + "--baseline ", "--baseline-run"])

    def test_baseline_qrels_through_a_link_and_an_old_run_that_fails_on_them(self):
        qrels = self.write("qrels.json", {"q1": {"a": 2}, "q2": {"c": 1}})
        run = self.write("run.json", {"q1": {"a": 0.5, "b": 0.4}, "q2": {"c": 0.7}})
        old = self.write("old.json", {"q1": {"zz": 1}, "q2": {"yy": 1}})
        os.symlink(old, self.path("link.json"))
        assert_error_line(self, self.assert_error([qrels, run, "--baseline-run", run, "--baseline-qrels",
                                                   self.path("link.json"), "--no-symlinks"]),
                          file=self.path("link.json"), names=["(--no-symlinks)"])
        # the old run judged on the old qrels meets none of them: the error says which scoring failed
        assert_error_line(self, self.assert_error([qrels, run, "--baseline-run", run, "--baseline-qrels", old]),
                          file=run, names=["--baseline-qrels)"])

    def test_a_file_that_cannot_be_renamed_into_place_is_an_error_and_leaves_nothing(self):
        qrels = self.write("qrels.json", {"q1": {"a": 2}})
        run = self.write("run.json", {"q1": {"a": 0.5, "b": 0.4}})
        with mock.patch("rag_eval.os.replace", side_effect=PermissionError(13, "Permission denied")):
            code, out, err = run_main([qrels, run, "--output", self.path("full.json")])
        self.assertEqual(code, rag_eval.EXIT_ERROR)
        self.assertTrue(out.startswith("{"), out)  # the report was out: only then are files renamed
        assert_error_line(self, err, file=self.path("full.json"), names=["Permission denied"])
        self.assertEqual(sorted(os.listdir(self.tmp)), ["qrels.json", "run.json"])

    def test_a_failure_of_the_machine_outside_the_readers_is_one_error_line(self):
        with mock.patch("rag_eval._run", side_effect=OSError(28, "No space left on device", "somewhere")):
            code, out, err = run_main(["q", "r"])
        self.assertEqual((code, out), (rag_eval.EXIT_ERROR, ""))
        assert_error_line(self, err, file="somewhere", names=["No space left on device"])

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


class TestCommandLineDetails(TempDirMixin, unittest.TestCase):
    """What planted bugs in the command line showed untested (mutants3); each expected line written out."""

    def test_a_significant_gate_names_three_undecided_metrics_and_a_coarse_tolerance(self):
        # three_runs(3): "x" is the baseline, "ref" the worse run.  With a 0.2 tolerance all four metrics are
        # undecided: the warning names the first three and says there are more; 30 queries resolve none of
        # the four at 0.2, which stderr says before anything else (its detail, in the report's notes, names them).
        qrels, runs = three_runs(3)
        qrels, ref, better = self.write("q.json", qrels), self.write("ref.json", runs["ref"]), self.write("x.json", runs["x"])
        base = self.path("base.json")
        code, _, err = run_main([qrels, better, "--save-baseline", base])
        self.assertEqual(code, 0, err)
        (resolved,) = [line for line in tagged_lines(err, "note") if "tolerance" in line]
        self.assertRegex(resolved, r" 30 .*\b4 tests.*: recall@5=0\.4516, success@5=0\.4050, mrr@5=0\.4573, ndcg@5=0\.4545 ")
        code, _, err = run_main([qrels, ref, "--baseline", base, "--gate", "significant", "--max-drop", "0.2",
                                 "--resamples", "200"])
        self.assertEqual(code, rag_eval.EXIT_INCONCLUSIVE, err)
        warnings = tagged_lines(err, "warning")
        self.assertRegex(err.splitlines()[0], r"^rag_eval: warning: .*\b80% .* 4 metrics$")  # said first
        (undecided,) = [line for line in warnings if "(~" in line]
        self.assertRegex(undecided, r"\bmrr@5 \(~127 .*\bndcg@5 \(~110 .*\brecall@5 \(~108 [^@]* more$")
        self.assertNotIn("success@5", undecided)

    def test_a_meta_value_may_hold_256_characters_not_257(self):
        qrels = self.write("q.json", {"q1": {"a": 1}})
        run = self.write("r.json", {"q1": ["a"]})
        output = self.path("full.json")
        code, _, err = run_main([qrels, run, "--meta", "index=" + "v" * 256, "--output", output])
        self.assertEqual(code, 0, err)
        with open(output, encoding="utf-8") as f:
            self.assertEqual(json.load(f)["meta"]["index"], "v" * 256)
        line = self.assert_error([qrels, run, "--meta", "index=" + "v" * 257])  # words: cases.json meta_value_257_characters
        assert_error_line(self, line, names=["argument --meta: ", " 256", "'index=vvvvvvvvvv'..."])

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
        self.assertRegex(notes[0], r"^warning: \D* 21 \D* 50 \D*'q01'")
        self.assertTrue(notes[0].endswith(f" {', '.join(ids[:20])})"), notes[0])

    def test_an_output_that_is_no_regular_file_is_refused_before_any_input_is_read(self):
        qrels = self.write("q.json", {"q1": {"a": 1}})
        # (the words: fixtures/bad/cases.json output_not_a_regular_file)
        assert_error_line(self, self.assert_error([qrels, self.path("missing.json"), "--output", os.devnull]), file=os.devnull)

    def test_a_named_tolerance_without_a_baseline_is_refused(self):
        qrels = self.write("q.json", {"q1": {"a": 1}})
        run = self.write("r.json", {"q1": ["a"]})
        line = self.assert_error([qrels, run, "--max-drop", "ndcg@5=0.1"])  # words: cases.json max_drop_named_without_baseline
        assert_error_line(self, line, names=[ERROR_PREFIX + "--max-drop: ndcg@5 ", "--baseline"])

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
        line = self.assert_error([qrels, run, "--max-drop", "1.5"])  # words: cases.json max_drop_1.5_did_you_mean_percent
        assert_error_line(self, line, names=["argument --max-drop: ", "(did you mean 1.5%?)"], quoted=["1.5"])

    def test_an_error_with_no_stderr_still_exits_2(self):
        # Started with stderr closed (2>&-): sys.stderr is None, the line goes nowhere, the exit code still tells.
        with mock.patch("sys.stderr", None):
            self.assertEqual(rag_eval.main([self.path("missing.json"), self.path("missing.json")]), rag_eval.EXIT_ERROR)

    def test_out_of_memory_is_one_error_line_and_exit_2(self):
        with mock.patch("rag_eval._run", side_effect=MemoryError()):
            self.assertEqual(run_main(["q", "r"]), (rag_eval.EXIT_ERROR, "", f"{ERROR_PREFIX}out of memory\n"))


# Fixture means at k = 5, worked by hand: recall 2/3, success 2/3, mrr 0.5, ndcg 0.5095.
FIXTURE_NDCG5 = (0.63991 + 0.0 + 0.88850) / 3


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

    def test_the_run_is_read_as_deep_as_the_deepest_cutoff_named(self):
        # --k 5 --measures recall,ndcg@20: the relevant document at rank 15 counts in ndcg@20, in every format
        # that is cut while read (the reader keeps one more than the deepest cutoff)
        qrels = self.write("deep-q.json", json.dumps({"q1": {"d15": 1}, "q2": {"e1": 1}}))
        ranked = {"q1": [f"d{i}" for i in range(1, 31)], "q2": ["e1"] + [f"e{i}" for i in range(2, 31)]}
        expected = rag_eval.evaluate(rag_eval.read_qrels(qrels), ranked, 5, measures=["recall", "ndcg@20"])["mean"]
        self.assertAlmostEqual(expected["ndcg@20"], (1 / math.log2(16) + 1) / 2, places=12)
        files = {"run.json": json.dumps(ranked),
                 "run.trec": "".join(f"{q} Q0 {d} {i} {100 - i} t\n" for q, ds in ranked.items() for i, d in enumerate(ds, 1)),
                 "run.jsonl": "".join(json.dumps({"query_id": q, "doc_id": d, "score": 100 - i}) + "\n"
                                      for q, ds in ranked.items() for i, d in enumerate(ds, 1))}
        for name, text in files.items():
            with self.subTest(run=name):
                code, out, err = run_main([qrels, self.write(name, text), "--k", "5", "--measures", "recall,ndcg@20"])
                self.assertEqual(code, rag_eval.EXIT_OK, err)
                self.assertEqual(json.loads(out)["mean"], expected)

    def test_an_unknown_name_is_still_refused(self):
        code, out, err = run_main([self.qrels, self.run, "--measures", "ndcg@5,ndgc@5"])
        self.assertEqual((code, out), (rag_eval.EXIT_ERROR, ""))
        assert_error_line(self, err, names=["argument --measures: "], quoted=["ndgc@5"])


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
        self.assertEqual(len([line for line in tagged_lines(err, "note") if baseline in line]), 1, err)
        with open(baseline) as f, open("baseline.json") as g:
            self.assertEqual(f.read(), g.read())
        code, _, err = run_main(["fixtures/qrels.json", "missing.json", "--baseline", baseline, "--update-baseline"])
        assert_error_line(self, err, file="missing.json", names=[f"({baseline} "])


class TestHints(TempDirMixin, unittest.TestCase):
    def test_swapped_arguments(self):
        qrels = self.write("qrels.txt", "q1 0 d1 1\n")
        run = self.write("run.trec", "q1 Q0 d1 1 2.0 r\n")
        code, _, err = run_main([run, qrels])
        self.assertEqual(code, rag_eval.EXIT_ERROR)
        assert_error_line(self, err, file=run, line=1, names=[" 6; is this a run? the order is QRELS RUN"])
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

    def test_no_separator_hint_that_collapses_the_run(self):
        # Qrels 'kb-0263#1', run 'kb-0263_1': '-' makes them meet only as 'kb', every id one document (every
        # score 1.0); 'handbook.pdf#3' against 'handbook.pdf:3' meet at '.' only as 'handbook'.  Neither is
        # offered: the error shows an id of each side and where they part.
        for qrels, run, ours, theirs, alike, tails in (
                ({"q1": {"kb-0263#1": 1, "kb-0264#2": 1}, "q2": {"kb-0512#1": 2}},
                 {"q1": ["kb-0263_1", "kb-0100_2", "kb-0264_2"], "q2": ["kb-0512_1", "kb-0007_3"]},
                 "kb-0263_1", "kb-0263#1", 7, ("'_1'", "'#1'")),
                ({"q1": {"handbook.pdf#3": 1, "handbook.pdf#4": 1}, "q2": {"handbook.pdf#9": 2}},
                 {"q1": ["handbook.pdf:3", "handbook.pdf:5"], "q2": ["handbook.pdf:1", "handbook.pdf:9"]},
                 "handbook.pdf:3", "handbook.pdf#3", 12, ("':3'", "'#3'"))):
            with self.subTest(run=ours):
                qrels_file, run_file = self.write("q.json", json.dumps(qrels)), self.write("r.json", json.dumps(run))
                code, _, err = run_main([qrels_file, run_file])
                self.assertEqual(code, rag_eval.EXIT_ERROR)
                self.assertNotIn("--doc-id-sep", err)
                self.assertIn(f"(the run's {ours!r} and the qrels' {theirs!r} part after {alike} characters: "
                              f"{tails[0]} against {tails[1]})", err)
                # the separator once suggested ('-', '.') gives every query a perfect score: meaningless
                wrong = "-" if ours.startswith("kb") else "."
                code, out, err = run_main([qrels_file, run_file, "--doc-id-sep", wrong])
                self.assertEqual(json.loads(out)["mean"]["mrr@5"], 1.0)
        # chunk ids of several documents against document ids: '#' keeps them apart, and is offered
        run = self.write("chunks.json", json.dumps({"q1": ["refund-policy#2", "returns-faq#1"], "q2": ["sla-uptime#1"]}))
        qrels = self.write("docs.json", json.dumps({"q1": {"refund-policy": 2}, "q2": {"sla-uptime": 1}}))
        self.assertIn("--doc-id-sep '#' would make them meet", run_main([qrels, run])[2])

    def test_no_separator_hint_between_two_kinds_of_chunk_id(self):
        # 'kb-0263.pdf#1' against 'kb-0263.pdf:1', queries retrieving several documents: '.' once was offered,
        # and applied scored documents, not chunks (every score 1.0 here).  A separator is offered only where
        # one side is left whole by it (it names documents, or chunk ids with a suffix)
        qrels = self.write("q.json", json.dumps({"q1": {"kb-0263.pdf#1": 1, "kb-0264.pdf#2": 1},
                                                 "q2": {"kb-0512.pdf#1": 2}}))
        run = self.write("r.json", json.dumps({"q1": ["kb-0263.pdf:2", "kb-0100.pdf:2", "kb-0264.pdf:1"],
                                               "q2": ["kb-0512.pdf:3", "kb-0007.pdf:3"]}))
        code, _, err = run_main([qrels, run])
        self.assertEqual(code, rag_eval.EXIT_ERROR)
        self.assertNotIn("--doc-id-sep", err)
        assert_error_line(self, err, file=run, quoted=["kb-0263.pdf:2", "kb-0263.pdf#1", ":2", "#1"])
        self.assertEqual(json.loads(run_main([qrels, run, "--doc-id-sep", "."])[1])["mean"]["mrr@5"], 1.0)
        # the run's chunk ids with a suffix: '.' leaves the qrels' whole and makes the ids meet, chunk for chunk
        suffixed = self.write("s.json", json.dumps({"q1": ["kb-0100#2.pdf", "kb-0263#1.pdf"], "q2": ["kb-0512#1.pdf"]}))
        chunks = self.write("c.json", json.dumps({"q1": {"kb-0263#1": 1, "kb-0264#2": 1}, "q2": {"kb-0512#1": 2}}))
        self.assertIn("--doc-id-sep '.' would make them meet", run_main([chunks, suffixed])[2])
        code, out, _ = run_main([chunks, suffixed, "--doc-id-sep", "."])
        self.assertEqual(json.loads(out)["mean"]["mrr@5"], (1 / 2 + 1) / 2)

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
        assert_error_line(self, err, file="<stdin>", quoted=["q1"])

    def test_query_ids_that_differ_by_a_prefix(self):
        run = self.write("run.json", json.dumps({"query-q1": ["refund-policy#2"]}))
        code, _, err = run_main(["fixtures/qrels.json", run])
        self.assertIn("(first: 'query-q1'; the qrels have 'q1')", err)


def child(args, **kwargs):
    """Run ``python ARGS`` (``rag_eval.py ...`` or ``-m rag_eval ...``) from the repository root."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run([sys.executable, *args], cwd=REPO, env=child_env(), timeout=60, **kwargs)


class TestCommandLine(TempDirMixin, unittest.TestCase):
    def setUp(self):
        super().setUp()
        with open(QRELS, "rb") as f:
            self.qrels = self.write("qrels.json", f.read())
        with open(RUN, "rb") as f:
            self.run_path = self.write("run.json", f.read())
        with open(BASELINE, "rb") as f:
            self.baseline = self.write("baseline.json", f.read())

    def bad_file_cases(self):
        deep_list = "[" * 100000
        deep_object = '{"a":' * 100000
        return [
            # (label, role, content bytes)
            ("empty", "qrels", b""),
            ("empty", "run", b""),
            ("only whitespace", "run", b"  \n\n"),
            ("not UTF-8", "qrels", b'{"q1": {"\xff": 1}}'),
            ("not UTF-8", "run", b'{"q1": ["\xfe"]}'),
            ("invalid JSON", "qrels", b'{"q1": {"a": 1}'),
            ("invalid JSON", "run", b'{"q1": ["a",]}'),
            ("invalid JSON", "baseline", b'{"recall@5": }'),
            ("qrels top-level list", "qrels", b'[{"q1": {"a": 1}}]'),
            ("run top-level list", "run", b'[["a", "b"]]'),
            ("qrels query value a list", "qrels", b'{"q1": ["a"]}'),
            ("qrels query value a list, on lines", "qrels", b'{\n"q1": ["a"]\n}'),
            ("run ranking a string", "run", b'{"q1": "refund-policy#2"}'),
            ("run ranking a string, on lines", "run", b'{\n"q1": "refund-policy#2"\n}'),
            ("run ranking a number", "run", b'{\n"q1": 5\n}'),
            ("run ranking null", "run", b'{\n"q1": null\n}'),
            ("run ranking true", "run", b'{\n"q1": true\n}'),
            ("duplicated top-level key", "qrels", b'{"q1": {"a": 1},\n "q1": {"b": 1}}'),
            ("duplicated nested key", "qrels", b'{"q1": {"a": 1, "a": 1}}'),
            ("duplicated top-level key", "run", b'{"q1": ["a"],\n "q1": ["b"]}'),
            ("duplicated nested key", "run", b'{"q1": {"a": 1.0, "a": 2.0}}'),
            ("duplicated key", "baseline", b'{"mrr@5": 0.5, "mrr@5": 0.5}'),
            ("NaN grade", "qrels", b'{"q1": {"a": NaN}}'),
            ("Infinity score", "run", b'{"q1": {"a": Infinity}}'),
            ("-Infinity score", "run", b'{"q1": {"a": -Infinity}}'),
            ("grade true", "qrels", b'{"q1": {"a": true}}'),
            ("grade 1.5", "qrels", b'{"q1": {"a": 1.5}}'),
            ("grade 0.5", "qrels", b'{"q1": {"a": 0.5}}'),  # 1.0 reads as 1 (issue 33)
            ('grade "2"', "qrels", b'{"q1": {"a": "2"}}'),
            ("grade -1", "qrels", b'{"q1": {"a": -1}}'),
            ("grade null", "qrels", b'{"q1": {"a": null}}'),
            ("ranking [1, 2]", "run", b'{"q1": [1, 2]}'),
            ('ranking ["a", null]', "run", b'{"q1": ["a", null]}'),
            ("baseline value a string", "baseline", b'{"mrr@5": "0.5"}'),
            ("baseline value true", "baseline", b'{"mrr@5": true}'),
            ("baseline value null", "baseline", b'{"mrr@5": null}'),
            ("baseline value 1e999", "baseline", b'{"mrr@5": 1e999}'),
            ("baseline value NaN", "baseline", b'{"mrr@5": NaN}'),
            ("baseline a list", "baseline", b"[0.5]"),
            ("deeply nested list", "qrels", deep_list.encode()),
            ("deeply nested list", "run", deep_list.encode()),
            ("deeply nested list", "baseline", deep_list.encode()),
            ("deeply nested object", "qrels", deep_object.encode()),
            ("deeply nested object", "run", deep_object.encode()),
            ("deeply nested object", "baseline", deep_object.encode()),
            ("gzip that is truncated", "qrels", gzip.compress(b'{"q1": {"a": 1}}')[:-12]),
        ]

    def argv_with(self, role, path):
        qrels = path if role == "qrels" else self.qrels
        run = path if role == "run" else self.run_path
        return [qrels, run, "--baseline", path if role == "baseline" else self.baseline]

    def test_bad_files(self):
        for label, role, content in self.bad_file_cases():
            with self.subTest(label, role=role):
                path = self.write(f"bad-{role}.json", content)
                self.assert_error(self.argv_with(role, path), [path])

    def test_missing_file_and_directory(self):
        missing = os.path.join(self.tmp, "no-such-file.json")
        for role in ("qrels", "run", "baseline"):
            with self.subTest("missing", role=role):
                self.assert_error(self.argv_with(role, missing), [missing])
            with self.subTest("directory", role=role):
                self.assert_error(self.argv_with(role, self.tmp), [self.tmp])

    def test_huge_grade_does_not_crash(self):
        # 2.0 ** 1024 overflows a float
        path = self.write("qrels.json", '{"q1": {"refund-policy#2": 1024}}')
        run = self.write("r.json", '{"q1": ["refund-policy#2"]}')
        code, out, err = run_main([path, run])
        self.assertEqual((code, out), (2, ""), f"main returned {code!r}")
        assert_error_line(self, err, file=path, names=[" 1024 ", f" {rag_eval._MAX_EXP_GRADE}; ", "--gain linear"])
        code, out, err = run_main([path, run, "--gain", "linear"])  # a gain of 1024: nDCG 1 at rank 1
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["mean"], {"recall@5": 1.0, "success@5": 1.0, "mrr@5": 1.0, "ndcg@5": 1.0})

    def test_bad_options(self):
        for argv, names in [
            (["--k", "0"], ["--k"]),
            (["--k", "-1"], ["--k"]),
            (["--k", "abc"], ["--k"]),
            (["--k", ""], ["--k"]),
            (["--k", "1.5"], ["--k"]),
            (["--k", "1,0"], ["--k"]),
            (["--max-drop", "-1"], ["--max-drop"]),
            (["--max-drop", "nan"], ["--max-drop"]),
            (["--max-drop", "inf"], ["--max-drop"]),
            (["--max-drop", "abc"], ["--max-drop"]),
            (["--min-grade", "0"], ["--min-grade"]),
            (["--gain", "cubic"], ["--gain"]),
            (["--measures", "ndgc,foo"], ["ndgc", "foo"]),
            (["--measures", ","], []),
            (["--qrels-format", "xml"], ["--qrels-format"]),
            (["--digits", "0"], ["--digits"]),
            (["--frobnicate"], ["--frobnicate"]),
        ]:
            with self.subTest(argv=argv):
                self.assert_error([self.qrels, self.run_path, *argv], names)
        for argv in ([], [self.qrels], ["-", "-"]):
            with self.subTest(argv=argv):
                self.assert_error(argv)

    def test_option_errors_say_what_is_expected(self):
        """The module's own messages reach the user, not argparse's 'invalid <function> value'."""
        for argv, words in [
            (["--k", "0"], ["positive integer"]),
            (["--max-drop", "nan"], ["finite"]),
            (["--min-grade", "0"], ["positive integer"]),
            (["--measures", "ndgc,foo"], ["unknown measure", "'ndgc'", "'foo'", "choose from"]),
        ]:
            with self.subTest(argv=argv):
                line = self.assert_error([self.qrels, self.run_path, *argv])
                self.assertNotIn("invalid _", line)
                for word in words:
                    self.assertIn(word, line)

    def test_unknown_run_query(self):
        run = self.write("run9.json", '{"q1": ["refund-policy#2"],\n "q9": ["x"]}')
        self.assert_error([self.qrels, run], ["'q9'"])
        code, out, err = run_main([self.qrels, run, "--drop-unknown-queries", "--allow-partial-run"])
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual(report["dropped"], ["q9"])
        self.assertEqual(report["skipped"], ["q2", "q3"])
        self.assertTrue(any(line.startswith("rag_eval: note:") for line in err.splitlines()), err)

    def test_evaluation_errors_name_the_file(self):
        """Bad input exits 2 with no traceback and one stderr line that names the file."""
        run9 = self.write("run9.json", '{"q1": ["refund-policy#2"],\n "q9": ["x"]}')
        zero = self.write("zero.json", '{"q1": {"refund-policy#2": 0}}')
        for label, argv, name in [
            ("run query not in the qrels", [self.qrels, run9], run9),
            ("no relevant document anywhere", [zero, self.run_path, "--drop-unknown-queries"], zero),
        ]:
            with self.subTest(label):
                self.assert_error(argv, [name])

    def test_unknown_run_query_hidden_by_judged_only(self):
        """--judged-only must not turn a run query the qrels lack into a silent drop."""
        qrels = self.write("q.trec", "q1 0 a 1\n")
        run = self.write("r.trec", "q1 Q0 a 1 1.0 t\nq9 Q0 a 1 1.0 t\n")
        self.assert_error([qrels, run], ["'q9'"])
        self.assert_error([qrels, run, "--judged-only"], ["'q9'"])

    def test_inputs_are_never_modified(self):
        trec = self.write("run.trec", "q1 Q0 refund-policy#2 1 2.0 t\nq2 Q0 sla-uptime#1 1 1.0 t\n")
        with open(QRELS, "rb") as f:
            gz = self.write("qrels.gz", gzip.compress(f.read()))
        old = time.time() - 3600  # an mtime that any write would move
        for path in (self.qrels, self.run_path, self.baseline, trec, gz):
            os.utime(path, (old, old))

        def snapshot():
            state = {}
            for name in sorted(os.listdir(self.tmp)):
                path = os.path.join(self.tmp, name)
                with open(path, "rb") as f:
                    state[name] = (f.read(), os.stat(path).st_mtime_ns)
            return state

        before = snapshot()
        for argv in ([self.qrels, self.run_path, "--baseline", self.baseline],
                     [gz, trec, "--baseline", self.baseline, "--judged-only", "--k", "1,5"],
                     [self.qrels, os.path.join(self.tmp, "bad"), "--baseline", self.baseline]):
            with self.subTest(argv=argv):
                run_main(argv)
                self.assertEqual(snapshot(), before)


class TestEntryPoint(TempDirMixin, unittest.TestCase):
    """Real processes: the README's quick start runs the script itself; the others run
    ``python -m rag_eval``, whose bytecode the children share (tests/helpers.py)."""

    def test_quick_start(self):
        proc = child(["rag_eval.py", "fixtures/qrels.json", "fixtures/run.json", "--baseline", "baseline.json"])
        self.assertEqual(proc.returncode, 1, proc.stderr)
        err = proc.stderr.decode()
        self.assertEqual([line for line in err.splitlines() if line.startswith("REGRESSION")], [
            "REGRESSION mrr@5: baseline 0.5500, now 0.5000",
            "REGRESSION recall@5: baseline 0.7000, now 0.6667",
        ])
        self.assertAlmostEqual(json.loads(proc.stdout)["mean"]["ndcg@5"], 0.509469461838203, places=15)  # exact in JSON

    def test_a_console_that_cannot_encode_an_id(self):
        # A Windows console in cp1252 cannot show the Greek or CJK ids: they come out escaped,
        # the run does not crash, and the numbers are the same as with UTF-8.
        qrels = self.write("q.json", json.dumps({"q-\u03b1": {"\u6587\u66f8-1": 2, "doc-\u03b2": 0}}))
        run = self.write("r.json", json.dumps({"q-\u03b1": ["doc-\u03b2", "\u6587\u66f8-1"]}))
        for output in ("table", "markdown", "csv"):
            with self.subTest(output=output):
                proc = subprocess.run([sys.executable, "-m", "rag_eval", qrels, run, "--format", output, "--per-query"],
                                      cwd=REPO, env=child_env(PYTHONIOENCODING="cp1252"), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, timeout=60)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertNotIn(b"Traceback", proc.stderr)
                text = proc.stdout.decode("cp1252")
                self.assertIn("q-\\u03b1", text)  # escaped, not lost
                self.assertIn("0.5000", text)  # mrr@5 = 1/2: the relevant id is second (0 + 1/2)

    def test_bad_input(self):
        proc = child(["-m", "rag_eval", "fixtures/no-such-file.json", "fixtures/run.json"])
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stdout, b"")
        err = proc.stderr.decode()
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertTrue(err.startswith(ERROR_PREFIX + "fixtures/no-such-file.json"), err)
        self.assertNotIn("Traceback", err)

    def test_stdin(self):
        run = fixture_run_variants()["trec (named .json)"][1]
        qrels = fixture_qrels_variants()["trec (named .json)"][1]
        code, expected, err = run_main([QRELS, RUN])
        self.assertEqual(code, 0, err)
        for label, args, data in [
            ("run on stdin", ["fixtures/qrels.json", "-"], run),
            ("gzipped qrels on stdin", ["-", "fixtures/run.json"], gzip.compress(qrels)),
        ]:
            with self.subTest(label):
                proc = child(["-m", "rag_eval", *args], stdin=None, input=data)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual(proc.stdout.decode("utf-8"), expected)

    def test_closed_pipe(self):
        args = [sys.executable, "-m", "rag_eval", "fixtures/qrels.json", "fixtures/run.json", "--k", "1,2,3,4,5"]
        for label in ("read one byte, then close", "close before any output"):
            with self.subTest(label):
                proc = subprocess.Popen(args, cwd=REPO, env=child_env(), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                if label.startswith("read"):
                    proc.stdout.read(1)
                proc.stdout.close()
                err = proc.stderr.read().decode()
                proc.stderr.close()
                code = proc.wait(timeout=60)
                self.assertNotIn("Traceback", err)
                self.assertNotIn("Exception ignored", err)
                self.assertIn(code, (0, 141), err)  # 141 = 128 + SIGPIPE, what a shell shows

    @unittest.skipIf(os.name == "nt", "SIGINT cannot be sent to a child process on Windows")
    def test_ctrl_c(self):
        # The child must start with SIGINT at its default: a shell running the
        # tests in the background hands its children SIGINT ignored.
        proc = subprocess.Popen(
            [sys.executable, "-m", "rag_eval", "fixtures/qrels.json", "-"], cwd=REPO, env=child_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            if not wait_until_reading_stdin(proc):
                self.skipTest("cannot see the child block reading its standard input (needs Linux's /proc)")
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)  # a hang guard: the child exits at once on SIGINT
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        self.assertEqual(proc.returncode, rag_eval.EXIT_INTERRUPTED, err)
        self.assertNotIn(b"Traceback", err)
        self.assertEqual(out, b"")

    def test_module_help(self):
        proc = child(["-m", "rag_eval", "--help"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        text = proc.stdout.decode()
        for m in rag_eval.MEASURES:
            with self.subTest(measure=m.name):
                self.assertIn(m.name, text)
        self.assertIn("exit codes", text)
        for code, words in [(0, "no regression"), (1, "regression"), (2, "bad"), (130, "interrupted")]:
            with self.subTest(exit_code=code):
                self.assertTrue(any(line.split()[:1] == [str(code)] and words in line
                                    for line in text.splitlines()), text)

    def test_version(self):
        proc = child(["-m", "rag_eval", "--version"])
        self.assertEqual(proc.returncode, 0)
        self.assertIn(rag_eval.__version__, proc.stdout.decode())


def wait_until_reading_stdin(proc):
    """Wait until the process blocks reading its standard input (or ends); return False if that cannot be seen.

    Linux shows a process's current system call in /proc/PID/syscall: the
    number (read is 0 on x86-64, 63 on arm64 and riscv, 3 on i386 and arm)
    and then its arguments, the first being the file descriptor.  There is no
    deadline to meet: a loaded machine only makes the wait longer.  A child that
    ends first gives True: the caller's assertions then judge how it ended.
    Elsewhere (no /proc) the answer is False.  A hang guard alone bounds the
    wait: a child not seen reading after 10 minutes is reported as unseen (the
    caller skips), never as a failure.
    """
    reads = {"0", "63", "3"}
    seen = 0
    for _ in range(30000):  # 30,000 polls of 20 ms: the hang guard
        if proc.poll() is not None:
            return True
        try:
            with open(f"/proc/{proc.pid}/syscall") as f:
                fields = f.read().split()
        except OSError:
            return False
        seen = seen + 1 if fields[:2] in ([r, "0x0"] for r in reads) else 0
        if seen >= 3:  # the same blocking read, three polls in a row
            return True
        time.sleep(0.02)
    return False


if __name__ == "__main__":
    unittest.main()


class TestHelpLeadsWithAFirstGate(unittest.TestCase):
    """Issue 33: --help led with 50 options, --save-baseline after --calibrate and --seed.  The five a first
    gate needs come first, in the usage line and as the first group; the rest are grouped by job."""

    def test_the_first_five(self):
        code, out, err = run_main(["--help"])
        self.assertEqual((code, err), (0, ""))
        first = ["--k", "--baseline", "--save-baseline", "--max-drop", "--format"]
        usage = out.split("\n\n", 1)[0]
        self.assertEqual(re.findall(r"\[(--[a-z-]+)", usage), first)
        groups = re.findall(r"^([a-z][a-z ,()./;]+):\n((?:  .*\n)+)", out, re.M)
        names = [name for name, _ in groups]
        self.assertEqual(names[2:6], ["a first gate (more in docs/gate.md)", "gate", "scoring", "reports"])
        self.assertEqual(re.findall(r"^  (--[a-z-]+)", groups[2][1], re.M), first)
