"""Fuzzing in CI: a short, seeded, bounded run of ``tools/fuzz/fuzz.py``, and a
regression test for every bug the fuzzer found.

The contract (the fuzzing issue): whatever the input, ``rag_eval`` returns a
result, or exits 2 with exactly one stderr line ``rag_eval: error: ...`` and
nothing on stdout.  It never lets an exception escape, never hangs, never
writes a file no option asked for, and never exits 0 when it could not
really evaluate.

``TestBoundedFuzz`` runs the standard-library fuzzer with a fixed seed for a
fixed number of cases (``CASES``: 400, or 5,000 with RAG_EVAL_FULL=1), never
for a number of seconds, so it runs the same cases on any machine, and asserts
that it found nothing and really ran.  Longer runs are on demand::

    python3 tools/fuzz/fuzz.py --seconds 300 --seed 1

The other classes are plain regression tests, one per bug the fuzzer found
(all fixed), each with its minimal input written out and the fuzzer's
signature in its docstring; ``TestSavedCrashes`` replays every input saved
under ``tools/fuzz/crashes/``.  Each fails if its bug comes back.

Run with ``python3 -m unittest tests.test_fuzz`` from the repository root; standard
library only (atheris is never needed here).
"""

import glob
import importlib.util
import io
import json
import os
import re
import sys
import unittest
from unittest import mock

import rag_eval
from tests.helpers import ERROR_PREFIX, QRELS, REPO, RUN, run_main, TempDirMixin


def load_fuzz():
    """tools/fuzz/fuzz.py as a module (tools/fuzz/ is a folder of scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("rag_eval_fuzz", os.path.join(REPO, "tools", "fuzz", "fuzz.py"))
    module = importlib.util.module_from_spec(spec)
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no tools/fuzz/__pycache__ in the work tree
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = saved
    return module


def read(path):
    with open(path, "rb") as handle:
        return handle.read()


class ContractMixin(TempDirMixin):
    def assertOneErrorLine(self, argv, env=None):
        """Exit 2, nothing on stdout, exactly one stderr line starting 'rag_eval: error: '."""
        code, out, err = run_main(argv, env)
        self.assertNotIsInstance(code, BaseException, f"main({argv!r}) raised {code!r}")
        self.assertEqual(code, 2, f"main({argv!r}): stderr {err!r}")
        self.assertEqual(out, "")
        lines = err.split("\n")
        self.assertEqual(lines[-1], "", f"stderr does not end with a newline: {err!r}")
        self.assertEqual(len(lines[:-1]), 1, f"expected one stderr line, got {err!r}")
        self.assertTrue(err.startswith(ERROR_PREFIX), err)
        return err

    def assertResultOrOneErrorLine(self, argv, env=None):
        """The issue's rule: exit 0/1 and no error line, or assertOneErrorLine."""
        code, out, err = run_main(argv, env)
        self.assertNotIsInstance(code, BaseException, f"main({argv!r}) raised {code!r}")
        if code == 2:
            return self.assertOneErrorLine(argv, env)
        self.assertIn(code, (0, 1), err)
        self.assertNotIn(ERROR_PREFIX, err)
        return out


class TestBoundedFuzz(unittest.TestCase):
    SEED = 20240611
    FULL = os.environ.get("RAG_EVAL_FULL") == "1"  # CI's full runs fuzz longer
    CASES = 5000 if FULL else 400  # a count, never seconds: the same cases on any machine, loaded or not
    # The fuzzer's per-case hang guard (SIGALRM, and the time measured where there is no SIGALRM).
    # The slowest of 1,500 cases takes about 12 ms on this project's 2-core CI machine; only a case
    # thousands of times slower, that is a hang, can trip it, so a correct run never fails on it.
    HANG_GUARD = 60.0

    def test_bounded_run_finds_nothing(self):
        fuzz = load_fuzz()
        crash_dir = os.environ.get("RAG_EVAL_FUZZ_CRASH_DIR")  # set it to keep the inputs of a failing CI run
        fuzzer = fuzz.Fuzzer(seed=self.SEED, budget=self.HANG_GUARD, crash_dir=crash_dir, minimize=False,
                             log=lambda text: None)
        try:
            summary = fuzzer.run(cases=self.CASES)
        finally:
            fuzzer.close()
        self.assertEqual(fuzzer.harness_errors, [], "fuzz.py itself failed")
        self.assertEqual(summary["cases"], self.CASES, summary)
        # It reached past the parsers: readers returned values, and main scored and gated.
        reader = summary["outcomes"]["reader"]
        cli = summary["outcomes"]["cli"]
        self.assertGreater(sum(n for name, n in reader.items() if name.startswith("ok")), 20, reader)
        self.assertGreater(sum(n for name, n in cli.items() if name.startswith("exit 0")), 20, cli)
        self.assertGreater(sum(n for name, n in cli.items() if name.startswith("exit 1")), 0, cli)
        self.assertGreater(sum(n for name, n in cli.items() if name.startswith("exit 2")), 20, cli)
        report = "\n".join(
            f"{signature} (x{finding.count}, case {finding.case}): {finding.summary}\n    repro: {finding.repro()}"
            for signature, finding in fuzzer.findings.items())
        self.assertEqual(summary["findings"], 0, f"seed {self.SEED}, {summary['cases']} cases:\n{report}")

    def test_same_seed_same_cases(self):
        fuzz = load_fuzz()
        outcomes = []
        for _ in range(2):
            fuzzer = fuzz.Fuzzer(seed=7, crash_dir=None, minimize=False, log=lambda text: None)
            try:
                outcomes.append(fuzzer.run(cases=60)["outcomes"])
            finally:
                fuzzer.close()
        self.assertEqual(outcomes[0], outcomes[1])


class TestHarness(ContractMixin, unittest.TestCase):
    """The harness itself: it must flag what breaks the contract and pass what keeps it."""

    def test_flags_an_exception_escaping_main(self):
        fuzz = load_fuzz()
        fuzzer = fuzz.Fuzzer(seed=0, crash_dir=None, minimize=False, log=lambda text: None)
        self.addCleanup(fuzzer.close)
        case = {"argv": ["qrels.json", "run.json"], "env": {}, "stdin": b"", "stdin_role": None,
                "files": {"qrels.json": read(QRELS), "run.json": read(RUN)}}
        self.assertEqual(fuzzer.check_cli(case)[0], None)
        with mock.patch.object(rag_eval, "evaluate", side_effect=KeyError("boom")):
            self.assertTrue(fuzzer.check_cli(case)[0].startswith("cli:KeyError@"))

    def test_flags_a_two_line_error_and_a_stray_file(self):
        fuzz = load_fuzz()
        fuzzer = fuzz.Fuzzer(seed=0, crash_dir=None, minimize=False, log=lambda text: None)
        self.addCleanup(fuzzer.close)
        files = {"qrels.json": read(QRELS), "run.json": read(RUN)}
        case = {"argv": ["qrels.json", "run.json"], "env": {}, "stdin": b"", "stdin_role": None, "files": files}

        def two_lines(argv=None):
            sys.stderr.write("rag_eval: error: one\ntwo\n")
            return 2

        with mock.patch.object(rag_eval, "main", two_lines):
            self.assertIn("stderr lines", fuzzer.check_cli(case)[0])

        def stray(argv=None):
            with open("stray.txt", "w") as handle:
                handle.write("x")
            sys.stdout.write(json.dumps({"mean": {"recall@5": 1.0}, "unscored": [], "queries": 1, "k": 5}) + "\n")
            return 0

        with mock.patch.object(rag_eval, "main", stray):
            self.assertIn("which no option asked for", fuzzer.check_cli(case)[0])

    @unittest.skipUnless(hasattr(__import__("signal"), "setitimer"), "the hang guard needs SIGALRM")
    def test_flags_a_hang(self):
        import time

        fuzz = load_fuzz()
        fuzzer = fuzz.Fuzzer(seed=0, budget=0.2, crash_dir=None, minimize=False, log=lambda text: None)
        self.addCleanup(fuzzer.close)
        # No clock in the verdict: a reader that sleeps 150 times the budget is a hang however loaded the
        # machine.  Only the alarm gives the signature "hang"; without it check_reader would return
        # after the sleep with a "took N s" signature instead, and this assertion fails.
        with mock.patch.object(rag_eval, "read_qrels", lambda *args, **kwargs: time.sleep(30)):
            self.assertEqual(fuzzer.check_reader("qrels", b"{}", {}, False)[0], "reader:qrels:hang")

    def test_reader_oracle(self):
        fuzz = load_fuzz()
        fuzzer = fuzz.Fuzzer(seed=0, crash_dir=None, minimize=False, log=lambda text: None)
        self.addCleanup(fuzzer.close)
        self.assertEqual(fuzzer.check_reader("qrels", read(QRELS), {}, False)[0], None)
        self.assertEqual(fuzzer.check_reader("qrels", b"{", {}, False)[0], None)  # RagEvalError: fine
        with mock.patch.object(rag_eval, "read_qrels", side_effect=RecursionError("deep")):
            self.assertTrue(fuzzer.check_reader("qrels", b"{}", {}, False)[0].startswith("reader:qrels:RecursionError@"))


HUGE = "1" * 4400  # CPython refuses int <-> str conversions beyond 4300 digits (ValueError)


BIG = "1" * 400  # an integer that no float can hold (OverflowError in math.isfinite and float())


class TestHugeIntegers(ContractMixin, unittest.TestCase):
    """reader:*:ValueError@_parse_json, @_jsonl_rows, @_trec_qrels; cli:ValueError@_parse_json, @_trec_qrels.

    Guards a fixed bug: a number of more than 4300 digits anywhere in a JSON
    or JSONL input, or as a TREC grade, makes CPython raise a plain ValueError
    (not a JSONDecodeError), which escaped every reader and main with a
    traceback.
    """

    CASES = {
        "qrels.json": ("qrels", '{"q1": {"d1": %s}}' % HUGE),
        "qrels.jsonl": ("qrels", '{"query_id": "q1", "doc_id": "d1", "relevance": %s}\n' % HUGE),
        "qrels.trec": ("qrels", "q1 0 d1 %s\n" % HUGE),
        "run.json": ("run", '{"q1": {"d1": %s}}' % HUGE),
        "run.jsonl": ("run", '{"query_id": "q1", "doc_id": "d1", "score": %s}\n' % HUGE),
        "baseline.json": ("baseline", '{"recall@5": %s}' % HUGE),
        "slices.json": ("slices", '{"q1": "a", "x": %s}' % HUGE),
        "slices.jsonl": ("slices", '{"query_id": "q1", "slices": "a", "n": %s}\n' % HUGE),
    }

    def test_readers_raise_rag_eval_error(self):
        for name, (role, text) in self.CASES.items():
            with self.subTest(name):
                path = self.write(name, text)
                with self.assertRaises(rag_eval.RagEvalError):
                    getattr(rag_eval, f"read_{role}")(path)

    def test_command_line_exits_2_with_one_line(self):
        for name, (role, text) in self.CASES.items():
            with self.subTest(name):
                path = self.write(name, text)
                argv = {"qrels": [path, RUN], "run": [QRELS, path], "baseline": [QRELS, RUN, "--baseline", path],
                        "slices": [QRELS, RUN, "--slices", path]}[role]
                self.assertOneErrorLine(argv)


class TestIntegersBeyondFloat(ContractMixin, unittest.TestCase):
    """reader:run:OverflowError@_check_run, reader:baseline:OverflowError@_check_means,
    cli:OverflowError@_check_means.

    Guards a fixed bug: a 400-digit integer is valid JSON but no float;
    ``math.isfinite`` raises OverflowError (an ArithmeticError, not a
    ValueError) on such a run score or baseline value, and it escaped main.
    """

    def test_run_score(self):
        for name, text in (("run.json", '{"q1": {"refund-policy#2": %s}}' % BIG),
                           ("run.jsonl", '{"query_id": "q1", "doc_id": "refund-policy#2", "score": %s}\n' % BIG)):
            with self.subTest(name):
                path = self.write(name, text)
                with self.assertRaises(rag_eval.RagEvalError):
                    rag_eval.read_run(path)
                self.assertOneErrorLine([QRELS, path])

    def test_scores_that_cancel_out(self):
        # Found while speeding up the validation: a check of the sum alone let
        # 10**400 and -10**400 through, as their sum is 0.
        path = self.write("run.json", '{"q1": {"d1": %s, "d2": -%s, "d3": 0.5}}' % (BIG, BIG))
        with self.assertRaisesRegex(rag_eval.RagEvalError, "^" + re.escape(path) + ": .*'q1'"):
            rag_eval.read_run(path)
        with self.assertRaisesRegex(ValueError, "^run: .*'q1'"):
            rag_eval.evaluate({"q1": {"d1": 1}}, {"q1": {"d1": int(BIG), "d2": -int(BIG)}}, 5)
        self.assertOneErrorLine([QRELS, path])

    def test_baseline_value(self):
        path = self.write("baseline.json", '{"recall@5": %s}' % BIG)
        with self.assertRaises(rag_eval.RagEvalError):
            rag_eval.read_baseline(path)
        self.assertOneErrorLine([QRELS, RUN, "--baseline", path])

    def test_evaluate_raises_value_error(self):
        # The library's contract: evaluate() raises ValueError on invalid input, nothing else.
        with self.assertRaises(ValueError):
            rag_eval.evaluate({"q1": {"d1": 1}}, {"q1": {"d1": int(BIG)}}, 5)


class TestSourceDateEpoch(ContractMixin, unittest.TestCase):
    """cli:ValueError@baseline_record, cli:OverflowError@baseline_record.

    Guards a fixed bug: --save-baseline (and --update-baseline) read
    SOURCE_DATE_EPOCH with a bare float() and time.gmtime(), so a malformed
    value in the CI environment ended in a traceback.  Either an error naming
    the variable or ignoring it is fine.
    """

    def test_malformed_values(self):
        for value in ("abc", "", "nan", "1e300", "inf"):
            with self.subTest(value=value):
                saved = os.path.join(self.tmp, f"saved-{len(value)}.json")
                self.assertResultOrOneErrorLine([QRELS, RUN, "--save-baseline", saved], {"SOURCE_DATE_EPOCH": value})


class TestOneLineErrors(ContractMixin, unittest.TestCase):
    """cli:exit _ with _ stderr lines, expected one.

    Guards a fixed bug: a file name or argument holding a newline was echoed
    raw into the error line, which then spanned two lines (ids were shown with
    repr(); paths and argparse's 'unrecognized arguments' were not).
    """

    def test_file_name_with_a_newline(self):
        self.assertOneErrorLine([os.path.join(self.tmp, "no\nsuch.json"), RUN])
        path = self.write("bad\nname.json", "{")
        self.assertOneErrorLine([path, RUN])

    def test_unrecognized_argument_with_a_newline(self):
        self.assertOneErrorLine([QRELS, RUN, "a\nb"])


class TestOddMetricNames(ContractMixin, unittest.TestCase):
    """cli:--junit wrote a file that does not read back, cli:UnicodeEncodeError@write_atomically,
    cli:UnicodeEncodeError@_github.

    Guards two fixed bugs.  A baseline's metric names were not checked, and
    an odd one went raw into the reports: a control character (U+001C) into
    the JUnit XML, which XML forbids, and a lone surrogate (the JSON escape
    "\\udfff"), which cannot be encoded as UTF-8, into the JUnit file and the
    GitHub step summary (UnicodeEncodeError out of main).  Now a baseline may
    name metrics only, so such a name is an input error; the same characters
    can still reach the reports in a query id, which the reports must carry
    as well-formed XML and UTF-8 markdown.
    """

    NAMES = ("\\u001c", "q\\udfff")  # as written in the JSON files: U+001C, a lone surrogate

    def inputs(self, name):
        """Two queries, one whose id holds ``name``; baseline means that all four metrics fall below."""
        qrels = self.write("qrels.json", '{"q%s1": {"d1": 2}, "q2": {"d2": 1}}' % name)
        # the odd query finds its document at rank 2: recall 1, mrr 1/2, ndcg 1/log2(3); q2 finds nothing
        run = self.write("run.json", '{"q%s1": ["x", "d1"], "q2": ["x", "y", "z", "w", "v", "d2"]}' % name)
        baseline = self.write("baseline.json", {"recall@5": 0.7, "success@5": 0.6667, "mrr@5": 0.55, "ndcg@5": 0.52})
        return qrels, run, baseline

    def test_a_baseline_naming_no_metric_is_refused(self):
        for name in self.NAMES:
            with self.subTest(name=name):
                baseline = self.write("odd.json", '{"recall@5": 0.5, "%s": 0.5}' % name)
                junit = os.path.join(self.tmp, "junit.xml")
                summary = self.write("summary.md", "")
                err = self.assertOneErrorLine([QRELS, RUN, "--baseline", baseline, "--junit", junit],
                                              {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary})
                self.assertIn(baseline, err)
                self.assertIn("which is not a metric", err)
                self.assertFalse(os.path.exists(junit), "a JUnit report written for input that was refused")
                self.assertEqual(read(summary), b"", "a step summary written for input that was refused")

    def test_junit_is_well_formed_xml(self):
        from xml.etree import ElementTree

        for name in self.NAMES:
            with self.subTest(name=name):
                qrels, run, baseline = self.inputs(name)
                junit = os.path.join(self.tmp, "junit.xml")
                code, _, err = run_main([qrels, run, "--baseline", baseline, "--junit", junit, "--per-query"])
                self.assertEqual(code, 1, err)
                self.assertTrue(os.path.exists(junit), "--junit wrote no file")
                root = ElementTree.parse(junit).getroot()  # raises on a character XML forbids
                cases = {case.get("name"): case for case in root.iter("testcase")}
                self.assertEqual(sorted(cases), ["mrr@5", "ndcg@5", "recall@5", "success@5"])
                for metric, case in cases.items():
                    self.assertIsNotNone(case.find("failure"), f"{metric} regressed but its test case passed")

    def test_github_step_summary(self):
        for name in self.NAMES:
            with self.subTest(name=name):
                qrels, run, baseline = self.inputs(name)
                summary = self.write("summary.md", "")
                code, _, err = run_main([qrels, run, "--baseline", baseline, "--per-query"],
                                        {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary})
                self.assertEqual(code, 1, err)
                self.assertNotIn(ERROR_PREFIX, err)
                markdown = read(summary).decode("utf-8")  # strict: it must be UTF-8
                self.assertTrue(markdown.startswith("### rag_eval: FAIL (4: recall@5, success@5, mrr@5, ndcg@5)"),
                                markdown)
                # metric | mean | baseline: recall (1 + 0) / 2, mrr (1/2 + 0) / 2, ndcg (1/log2(3) + 0) / 2
                for row in ("| recall@5 | 0.5000 | 0.7000 |", "| success@5 | 0.5000 | 0.6667 |",
                            "| mrr@5 | 0.2500 | 0.5500 |", "| ndcg@5 | 0.3155 | 0.5200 |"):
                    self.assertIn(row, markdown)
                self.assertEqual(markdown.count("| regression |"), 8, markdown)  # the table read first, and in full
                self.assertIn("| `q2` | 0.0000 | 0.0000 | 0.0000 | 0.0000 |", markdown)  # an id is a code span
                # split at "\n" only: str.splitlines() would also split at U+001C
                odd = [line for line in markdown.split("\n") if line.startswith("| `q") and "1` | 1.0000 | 1.0000 | 0.5000" in line]
                self.assertEqual(len(odd), 1, f"no per-query row for the query whose id holds {name}: {markdown}")


class TestCsvOutput(ContractMixin, unittest.TestCase):
    """cli:stdout is not CSV.

    Guards a fixed bug: with rows ended by "\\n" only, csv before Python 3.13
    quotes a field holding "\\n" but not one holding "\\r", so a query id with a
    carriage return split its row for every CSV reader.  A cell now shows it escaped.
    """

    def test_an_id_with_a_carriage_return_stays_on_its_row(self):
        import csv

        qrels = self.write("qrels.json", '{"q\\r1": {"d1": 1}, "q2": {"d2": 1}}')
        run = self.write("run.json", '{"q\\r1": ["d1"], "q2": ["x", "d2"]}')
        out = self.assertResultOrOneErrorLine([qrels, run, "--format", "csv", "--per-query"])
        rows = list(csv.reader(io.StringIO(out, newline="")))
        self.assertIn("q\\r1", [row[0] for row in rows[1:]], rows)  # as the table shows it: no raw CR in any format
        self.assertEqual({len(row) for row in rows}, {3})
        self.assertNotIn("\r", out.replace("\r\n", ""))


class TestRegressionLines(ContractMixin, unittest.TestCase):
    """note: stderr line outside the contract on exit 0/1.

    Guards a fixed bug: stderr holds one line per regression, but a baseline
    name with a newline (not a metric, then gated as "missing") was printed
    raw, so its REGRESSION line split in two, the second being whatever the
    name said after the newline.  Such a name is now refused as input: one
    error line, the name escaped.
    """

    def test_one_line_per_regression(self):
        baseline = self.write("baseline.json", '{"recall@5": 0.5, "recall@5\\nanything": 0.5}')
        err = self.assertOneErrorLine([QRELS, RUN, "--baseline", baseline])
        self.assertIn(" 'recall@5\\nanythin'..., ", err)  # clipped to 16 characters


class TestSavedCrashes(unittest.TestCase):
    """Every input the fuzzer saved under tools/fuzz/crashes/ keeps the contract."""

    def test_each_saved_crash(self):
        folders = sorted(glob.glob(os.path.join(REPO, "tools", "fuzz", "crashes", "*", "finding.json")))
        self.assertGreaterEqual(len(folders), 11, "the saved crashes are gone: nothing would be replayed")
        fuzz = load_fuzz()
        fuzzer = fuzz.Fuzzer(seed=0, crash_dir=None, minimize=False, log=lambda text: None)
        self.addCleanup(fuzzer.close)
        for path in folders:
            folder = os.path.dirname(path)
            with self.subTest(crash=os.path.basename(folder)):
                signature, summary = fuzzer.replay(folder)
                self.assertIsNone(signature, f"{summary}\n(see {os.path.join(folder, 'detail.txt')})")


if __name__ == "__main__":
    unittest.main()
