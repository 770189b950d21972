"""Hardening, second round (issue 11): what a pull request's author or a CI
configuration can do to the command line, and what it must do in return.

Each TestCase is one item of the issue.  Real processes (``python3 rag_eval.py
...``) are used where the interpreter's own handling of closed or full streams,
signals or a second process is what is tested; every other test calls
``rag_eval.main`` in-process.
"""

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import unittest

import rag_eval
from helpers_for_tests import ERROR_PREFIX, TempDirMixin, run_main

REPO = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(REPO, "rag_eval.py")
QRELS = os.path.join(REPO, "fixtures", "qrels.json")
RUN = os.path.join(REPO, "fixtures", "run.json")
BASELINE = os.path.join(REPO, "baseline.json")
TIME_BOX = 60  # seconds a child process may take before the test fails instead of hanging
POSIX = os.name == "posix"
# A secret as a pull request could point a symlinked run at: base64, 40 characters.
TOKEN = "Z2hwX3NlY3JldHRva2VuMTIzNDU2Nzg5MGFiY2Rl"

CHILD_ENV = {key: value for key, value in os.environ.items()
             if not key.startswith(("GITHUB_", "RAG_EVAL_")) and key not in ("PYTHONPATH", "SOURCE_DATE_EPOCH")}
CHILD_ENV["PYTHONIOENCODING"] = "utf-8"
CHILD_ENV["PYTHONDONTWRITEBYTECODE"] = "1"


def run_process(argv, **options):
    """``python3 rag_eval.py argv`` from the repository root: (exit code, stdout, stderr) as text."""
    options.setdefault("stdout", subprocess.PIPE)
    options.setdefault("stderr", subprocess.PIPE)
    done = subprocess.run([sys.executable, SCRIPT] + [str(arg) for arg in argv], cwd=REPO, env=CHILD_ENV,
                          stdin=subprocess.DEVNULL, timeout=TIME_BOX, **options)
    decode = (lambda data: data.decode("utf-8", "replace") if isinstance(data, bytes) else (data or ""))
    return done.returncode, decode(done.stdout), decode(done.stderr)


def leaks(line, secret, clip=rag_eval.CLIP):
    """Whether ``line`` holds more than ``clip`` consecutive characters of ``secret``."""
    return any(secret[start:start + clip + 1] in line for start in range(len(secret) - clip))


class TestErrorLinesQuoteLittle(TempDirMixin, unittest.TestCase):
    """Item 3: an error line quotes at most CLIP characters of any one input value, and stays short."""

    def test_a_symlinked_run_shows_at_most_16_characters_of_its_target(self):
        shapes = {
            "score": f"q1 Q0 doc 1 {TOKEN} tag\n",  # the score field of a TREC line
            "query": json.dumps({TOKEN: ["doc"]}),  # a query the qrels lack
            "key": '{"q1": ["a"], "%s": 1, "%s": 2}' % (TOKEN, TOKEN),  # a duplicated key
            "grade": f"q1 0 doc {TOKEN}\n",  # as qrels: a grade
            "jsonl": json.dumps({"query_id": "q1", "doc_id": "d", "score": TOKEN}) + "\n",
        }
        for name, content in shapes.items():
            with self.subTest(name):
                secret = self.write(f"secret_{name}", content)
                link = self.path(f"run_{name}.json")
                os.symlink(secret, link)
                argv = [link, RUN] if name == "grade" else [QRELS, link]
                line = self.assert_error(argv)
                self.assertFalse(leaks(line, TOKEN), line)
                self.assertIn(TOKEN[:rag_eval.CLIP], line)  # clipped, not hidden: the start still says what it was
                self.assertIn("...", line)

    def test_every_error_line_stays_under_the_limit(self):
        huge = "x" * 1_000_000
        baseline = self.write("baseline.json", {
            "format": "rag_eval-baseline/1", "mean": {"recall@5": 0.5}, "per_query": {"recall@5": {"q1": 0.5}},
            "qrels_sha256": huge, "conventions": {"k": [5], "gain": huge, "min_grade": 1, "judged_only": False,
                                                  "doc_id_sep": None, "ties": huge}})
        line = self.assert_error([QRELS, RUN, "--baseline", baseline])
        self.assertLessEqual(len(line), rag_eval.MAX_ERROR_LINE)
        self.assertNotIn("x" * (rag_eval.CLIP + 1), line)
        long_name = self.path("n" * 200)
        line = self.assert_error([os.path.join(long_name, "m" * 200), RUN])
        self.assertLessEqual(len(line), rag_eval.MAX_ERROR_LINE)
        self.assertTrue(line.endswith("..."))

    def test_short_values_are_quoted_whole(self):
        line = self.assert_error([QRELS, self.write("run.trec", "q1 Q0 d 1 high tag\n")])
        self.assertTrue(line.endswith("score must be a number, got 'high'"), line)

    def test_a_huge_gzipped_input_gives_one_short_line(self):
        import gzip

        run = self.path("run.json.gz")
        with gzip.open(run, "wb") as out:  # one JSON key of 20 MB: a few KB gzipped
            out.write(b'{"q1": ["a"], "' + b"k" * 20_000_000 + b'": ["b"]}')
        line = self.assert_error([QRELS, run])
        self.assertLessEqual(len(line), rag_eval.MAX_ERROR_LINE)


@unittest.skipUnless(POSIX, "symbolic links")
class TestNoSymlinks(TempDirMixin, unittest.TestCase):
    """Item 3: --no-symlinks refuses an input that is, or passes through, a symbolic link."""

    def test_a_symlinked_input_is_refused(self):
        link = self.path("run.json")
        os.symlink(RUN, link)
        self.assertEqual(run_main([QRELS, link])[0], rag_eval.EXIT_OK)  # followed by default
        line = self.assert_error([QRELS, link, "--no-symlinks"], [link, "--no-symlinks"])
        self.assertIn("symbolic link", line)

    def test_a_symlinked_folder_is_refused(self):
        os.symlink(os.path.dirname(RUN), self.path("fixtures"))
        self.assert_error([QRELS, os.path.join(self.path("fixtures"), "run.json"), "--no-symlinks"], ["symbolic link"])
        baseline = os.path.join(self.path("fixtures"), "..", "fixtures", "qrels.json")
        self.assert_error([QRELS, RUN, "--baseline", baseline, "--no-symlinks"], ["symbolic link"])

    def test_plain_files_pass(self):
        self.assertEqual(run_main([QRELS, RUN, "--no-symlinks", "--baseline", BASELINE])[0], rag_eval.EXIT_REGRESSION)


class TestSmallThings(TempDirMixin, unittest.TestCase):
    """Item 10: TREC scores as trec_eval reads them, a qrels file given as the run, CSV formulas."""

    def test_a_trec_score_with_an_underscore_is_not_a_number(self):
        for score in ("1_0", "0_5", "1e1_0"):
            with self.subTest(score):
                run = self.write("run.trec", f"q1 Q0 refund-policy#2 1 {score} t\nq1 Q0 shipping#1 2 0.5 t\n")
                line = self.assert_error([QRELS, run], [f"{run}:1:"])
                self.assertTrue(line.endswith(f"score must be a number, got {score!r}"), line)
        self.assertEqual(run_main([QRELS, self.write("ok.trec", "q1 Q0 refund-policy#2 1 10 t\n")])[0], 0)

    def test_an_underscore_in_a_document_id_is_fine(self):
        run = self.write("run.trec", "q1 Q0 refund_policy_2 1 1.5 t\nq1 Q0 refund-policy#2 2 0.5 t\n")
        self.assertEqual(run_main([QRELS, run])[0], 0)

    def test_the_qrels_given_as_the_run_are_refused(self):
        line = self.assert_error([QRELS, QRELS], [QRELS, "copy of the qrels"])
        copy = self.write("copy.json", self.read(QRELS))  # another file, the same judgments
        self.assert_error([QRELS, copy], ["copy of the qrels"])
        self.assert_error([QRELS, QRELS, "--judged-only", "--baseline", BASELINE], ["copy of the qrels"])
        self.assertIn("was the qrels file given as the run?", line)

    def test_float_scores_equal_to_grades_are_a_run(self):
        run = self.write("run.json", {"q1": {"refund-policy#2": 2.0, "refund-policy#3": 1.0}})
        self.assertEqual(run_main([QRELS, run])[0], 0)
        one = self.write("one.json", {"q1": {"refund-policy#2": 2}})  # a single document proves nothing
        self.assertEqual(run_main([QRELS, one])[0], 0)

    def test_csv_text_cells_cannot_run_as_formulas(self):
        qrels = self.write("qrels.json", {"=HYPERLINK(1)": {"a": 1}, "+cmd": {"a": 1}, "-2+3": {"a": 1},
                                          "@SUM(A1)": {"a": 1}, "\tx": {"a": 1}, "\rx": {"a": 1}, "-7": {"a": 1},
                                          "plain": {"a": 1}})
        run = self.write("run.json", {qid: ["b", "a"] for qid in json.load(open(qrels))})
        code, out, err = run_main([qrels, run, "--format", "csv", "--per-query"])
        self.assertEqual(code, 0, err)
        import csv
        import io

        cells = {row[0] for row in list(csv.reader(io.StringIO(out)))[1:]}
        self.assertEqual(cells, {"'=HYPERLINK(1)", "'+cmd", "'-2+3", "'@SUM(A1)", "'\tx", "'\rx", "-7", "plain"})

    def test_csv_negative_numbers_stay_numbers(self):
        baseline = self.write("baseline.json", {"recall@5": 0.9, "mrr@5": 0.4})
        code, out, err = run_main([QRELS, RUN, "--format", "csv", "--baseline", baseline, "--max-drop", "0.5"])
        self.assertEqual(code, 0, err)
        import csv
        import io

        rows = {row[0]: row for row in csv.reader(io.StringIO(out))}
        self.assertEqual(rows["recall@5"][3], "-0.2333")  # 2/3 - 0.9: a number, unprefixed
        self.assertNotIn("'", out)

    def test_slice_names_are_neutralised_too(self):
        slices = self.write("slices.json", {"q1": "=evil", "q2": "=evil", "q3": "ok"})
        code, out, err = run_main([QRELS, RUN, "--format", "csv", "--slices", slices])
        self.assertEqual(code, 0, err)
        self.assertIn("'=evil:recall@5", out)


if __name__ == "__main__":
    unittest.main()
