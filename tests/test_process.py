"""The process: what a pull request's author or a CI configuration can do to the
command line, and what it must do in return.  Exit codes keep their meaning on
closed and full streams, signals and memory; outputs replace only regular
files and never an input; each input is read once; error lines quote little;
--no-symlinks.

Real processes (``python3 -m rag_eval ...``) are used where the interpreter's
own handling of closed or full streams, signals or a second process is what is
tested; every other test calls ``rag_eval.main`` in-process.
"""

import contextlib
import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import unittest
from unittest import mock

import rag_eval
from tests.helpers import BASELINE, ERROR_PREFIX, QRELS, REPO, RUN, TIME_BOX, assert_error_line, child_env, run_main, TempDirMixin


POSIX = os.name == "posix"


# A secret as a pull request could point a symlinked run at: base64, 40 characters.
TOKEN = "Z2hwX3NlY3JldHRva2VuMTIzNDU2Nzg5MGFiY2Rl"


# Children run ``python -m rag_eval`` from the repository root (see tests/helpers.py).
CHILD_ENV = child_env(PYTHONPATH=REPO)


MODULE = ("-m", "rag_eval")


def leaks(line, secret, clip=rag_eval._CLIP):
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
                self.assertIn(TOKEN[:rag_eval._CLIP], line)  # clipped, not hidden: the start still says what it was
                self.assertIn("...", line)

    def test_every_error_line_stays_under_the_limit(self):
        huge = "x" * 1_000_000
        baseline = self.write("baseline.json", {
            "format": "rag_eval-baseline/1", "mean": {"recall@5": 0.5}, "per_query": {"recall@5": {"q1": 0.5}},
            "qrels_sha256": huge, "conventions": {"k": [5], "gain": huge, "min_grade": 1, "judged_only": False,
                                                  "doc_id_sep": None, "ties": huge}})
        line = self.assert_error([QRELS, RUN, "--baseline", baseline])
        self.assertLessEqual(len(line), rag_eval._MAX_ERROR_LINE)
        self.assertNotIn("x" * (rag_eval._CLIP + 1), line)
        long_name = self.path("n" * 200)
        line = self.assert_error([os.path.join(long_name, "m" * 200), RUN])
        self.assertLessEqual(len(line), rag_eval._MAX_ERROR_LINE)
        self.assertTrue(line.endswith("..."))
        # with --update-baseline, what was left alone ends the line whole, and the line still fits
        baseline = self.write("b.json", {"recall@5": 0.5})
        line = self.assert_error([os.path.join(long_name, "m" * 200), RUN, "--baseline", baseline, "--update-baseline"])
        self.assertLessEqual(len(line), rag_eval._MAX_ERROR_LINE)
        self.assertIn(f"... ({baseline} ", line)  # clipped in the middle: the baseline named at the end
        self.assertTrue(line.endswith(")"), line)

    def test_short_values_are_quoted_whole(self):
        line = self.assert_error([QRELS, self.write("run.trec", "q1 Q0 d 1 high tag\n")])
        self.assertTrue(line.endswith(" 'high'"), line)

    def test_a_huge_gzipped_input_gives_one_short_line(self):
        import gzip

        run = self.path("run.json.gz")
        with gzip.open(run, "wb") as out:  # one JSON key of 20 MB: a few KB gzipped
            out.write(b'{"q1": ["a"], "' + b"k" * 20_000_000 + b'": ["b"]}')
        line = self.assert_error([QRELS, run])
        self.assertLessEqual(len(line), rag_eval._MAX_ERROR_LINE)


@unittest.skipUnless(POSIX, "symbolic links")
class TestNoSymlinks(TempDirMixin, unittest.TestCase):
    """Item 3: --no-symlinks refuses an input that is, or passes through, a symbolic link."""

    def test_a_symlinked_input_is_refused(self):
        link = self.path("run.json")
        os.symlink(RUN, link)
        self.assertEqual(run_main([QRELS, link])[0], rag_eval.EXIT_OK)  # followed by default
        line = self.assert_error([QRELS, link, "--no-symlinks"], [link, "--no-symlinks"])
        assert_error_line(self, line, file=link, names=["(--no-symlinks)"])

    def test_a_symlinked_folder_is_refused(self):
        os.symlink(os.path.dirname(RUN), self.path("fixtures"))
        self.assert_error([QRELS, os.path.join(self.path("fixtures"), "run.json"), "--no-symlinks"], ["symbolic link"])
        baseline = os.path.join(self.path("fixtures"), "..", "fixtures", "qrels.json")
        self.assert_error([QRELS, RUN, "--baseline", baseline, "--no-symlinks"], ["symbolic link"])

    def test_plain_files_pass(self):
        self.assertEqual(run_main([QRELS, RUN, "--no-symlinks", "--baseline", BASELINE])[0], rag_eval.EXIT_REGRESSION)

    def test_the_label_jobs_refuse_them_too(self):
        spans = os.path.join(REPO, "examples", "rechunking")
        corpus = self.path("corpus.jsonl")
        os.symlink(os.path.join(spans, "corpus.jsonl"), corpus)
        qrels = os.path.join(spans, "qrels.spans.jsonl")
        for job in (["--check-labels"], ["--fix-labels", self.path("fixed.jsonl")]):
            with self.subTest(job=job):
                self.assert_error([qrels, "--corpus", corpus, *job, "--no-symlinks"], [corpus, "symbolic link"])
        chunks = self.path("chunks.jsonl")
        os.symlink(os.path.join(spans, "chunks200.jsonl"), chunks)
        self.assert_error([os.path.join(spans, "qrels.chunks200.jsonl"), "--chunks", chunks, "--to-spans",
                           self.path("spans.jsonl"), "--no-symlinks"], [chunks, "symbolic link"])
        self.assertFalse(os.path.exists(self.path("spans.jsonl")))


class TestScoresAndFormulas(TempDirMixin, unittest.TestCase):
    """Item 10: TREC scores as trec_eval reads them, a qrels file given as the run, CSV formulas."""

    def test_a_trec_score_with_an_underscore_is_not_a_number(self):
        for score in ("1_0", "0_5", "1e1_0"):
            with self.subTest(score):
                run = self.write("run.trec", f"q1 Q0 refund-policy#2 1 {score} t\nq1 Q0 shipping#1 2 0.5 t\n")
                line = self.assert_error([QRELS, run], [f"{run}:1:"])
                self.assertTrue(line.endswith(f" {score!r}"), line)
        self.assertEqual(run_main([QRELS, self.write("ok.trec", "q1 Q0 refund-policy#2 1 10 t\n"),
                                   "--allow-partial-run"])[0], 0)

    def test_an_underscore_in_a_document_id_is_fine(self):
        run = self.write("run.trec", "q1 Q0 refund_policy_2 1 1.5 t\nq1 Q0 refund-policy#2 2 0.5 t\n")
        self.assertEqual(run_main([QRELS, run, "--allow-partial-run"])[0], 0)

    def test_the_qrels_given_as_the_run_are_refused(self):
        line = self.assert_error([QRELS, QRELS], [QRELS, "copy of the qrels"])
        copy = self.write("copy.json", self.read(QRELS))  # another file, the same judgments
        self.assert_error([QRELS, copy], ["copy of the qrels"])
        self.assert_error([QRELS, QRELS, "--judged-only", "--baseline", BASELINE], ["copy of the qrels"])
        self.assertIn("was the qrels file given as the run?", line)

    def test_jsonl_qrels_given_as_the_run_are_refused(self):
        qrels = self.write("qrels.jsonl", "".join(json.dumps({"query_id": q, "doc_id": d, "relevance": g}) + "\n"
                                                  for q, d, g in (("q1", "refund-policy#2", 2), ("q3", "sso-setup#4", 2))))
        line = self.assert_error([QRELS, qrels], [qrels + ":1:"])
        self.assertIn("is this a qrels file? the order is QRELS RUN", line)

    def test_float_scores_equal_to_grades_are_a_run(self):
        run = self.write("run.json", {"q1": {"refund-policy#2": 2.0, "refund-policy#3": 1.0}})
        self.assertEqual(run_main([QRELS, run, "--allow-partial-run"])[0], 0)
        one = self.write("one.json", {"q1": {"refund-policy#2": 2}})  # a single document proves nothing
        self.assertEqual(run_main([QRELS, one, "--allow-partial-run"])[0], 0)

    def test_csv_text_cells_cannot_run_as_formulas(self):
        qrels = self.write("qrels.json", {"=HYPERLINK(1)": {"a": 1}, "+cmd": {"a": 1}, "-2+3": {"a": 1},
                                          "@SUM(A1)": {"a": 1}, "\tx": {"a": 1}, "\rx": {"a": 1}, "-7": {"a": 1},
                                          "plain": {"a": 1}})
        run = self.write("run.json", {qid: ["b", "a"] for qid in json.loads(self.read(qrels))})
        code, out, err = run_main([qrels, run, "--format", "csv", "--per-query"])
        self.assertEqual(code, 0, err)
        import csv
        import io

        cells = {row[0] for row in list(csv.reader(io.StringIO(out)))[1:]}
        # a tab or CR is shown escaped (no raw control character in any format), so it starts no formula
        self.assertEqual(cells, {"'=HYPERLINK(1)", "'+cmd", "'-2+3", "'@SUM(A1)", "\\tx", "\\rx", "-7", "plain"})

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


def sha256_of(path):
    import hashlib

    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def shell(command, timeout=TIME_BOX):
    """Run a POSIX shell command from the repository root: (exit code, stdout, stderr) as text."""
    done = subprocess.run(["sh", "-c", command], cwd=REPO, env=CHILD_ENV, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


def quoted(*words):
    import shlex

    return " ".join(shlex.quote(str(word)) for word in words)


class TestOptionEdges(TempDirMixin, unittest.TestCase):
    """Edges of the options that no other test reaches: an empty output name, the last --max-drop of every metric,
    and the words of a run that --judged-only left empty."""

    def test_an_output_needs_a_file_name(self):
        for option in ("--output", "--junit"):
            for path, hint in (("", ""), ("-", " (standard output carries the report: see --format)")):
                with self.subTest(option=option, path=path):
                    line = self.assert_error([QRELS, RUN, option, path])
                    assert_error_line(self, line, names=[f"{ERROR_PREFIX}{option}: "] + (["--format"] if hint else []),
                                      quoted=[path])

    def test_the_last_max_drop_for_every_metric_counts(self):
        # the fixtures fall at most 0.05 (mrr@5 0.55 -> 0.5) below baseline.json: 0.5 tolerates it, 0.01 does not
        for first, last, code in (("0.01", "0.5", 0), ("0.5", "0.01", 1)):
            with self.subTest(first=first, last=last):
                argv = [QRELS, RUN, "--baseline", BASELINE, "--max-drop", first, "--max-drop", last]
                self.assertEqual(run_main(argv)[0], code)

    def test_a_run_that_judged_only_left_empty(self):
        qrels = self.write("q.json", {"q1": {"a": 1}, "q2": {"b": 1}})
        run = self.write("r.json", {"q1": ["x"], "q2": ["y", "z"]})  # no document judged
        assert_error_line(self, self.assert_error([qrels, run, "--judged-only"]), file=run, names=["(--judged-only)"])


@unittest.skipUnless(POSIX, "devices, FIFOs and symbolic links")
class TestOutputsReplaceOnlyRegularFiles(TempDirMixin, unittest.TestCase):
    """Item 1: an output never replaces a device, FIFO, socket or symbolic link; a link is written through."""

    def test_a_device_is_refused_and_kept(self):
        for option in ("--junit", "--output", "--save-baseline", "--unjudged"):
            with self.subTest(option):
                self.assert_error([QRELS, RUN, option, os.devnull], [os.devnull, "not a regular file"])
                self.assertTrue(stat.S_ISCHR(os.stat(os.devnull).st_mode))

    def test_a_fifo_is_refused_without_opening_it(self):
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        self.assert_error([QRELS, RUN, "--output", fifo], [fifo, "not a regular file"])  # opening it would block
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))

    def test_a_symlink_to_a_device_is_refused_and_kept(self):
        link = self.path("out.json")
        os.symlink(os.devnull, link)
        self.assert_error([QRELS, RUN, "--output", link], ["not a regular file"])
        self.assertTrue(os.path.islink(link))
        self.assertEqual(os.readlink(link), os.devnull)

    def test_a_symlink_to_a_regular_file_is_written_through(self):
        target = self.write("real.xml", "old")
        link = self.path("report.xml")
        os.symlink(target, link)
        code, out, err = run_main([QRELS, RUN, "--junit", link])
        self.assertEqual(code, 0, err)
        self.assertTrue(os.path.islink(link))
        self.assertIn(b"<testsuites", self.read(target))
        self.assertEqual(sorted(os.listdir(self.tmp)), ["real.xml", "report.xml"])

    def test_a_symlinked_baseline_is_updated_at_its_target(self):
        os.mkdir(self.path("store"))
        target = os.path.join(self.path("store"), "baseline.json")
        with open(target, "wb") as out:
            out.write(self.read(BASELINE))
        link = self.path("baseline.json")
        os.symlink(target, link)
        code, out, err = run_main([QRELS, RUN, "--baseline", link, "--update-baseline", "--max-drop", "0.5"])
        self.assertEqual(code, 0, err)
        self.assertTrue(os.path.islink(link))
        self.assertEqual(rag_eval.read_baseline(target).qrels_sha256, rag_eval._qrels_fingerprint(rag_eval.read_qrels(QRELS)))
        self.assertEqual(os.listdir(self.path("store")), ["baseline.json"])  # no temporary, no lock file left

    def test_a_baseline_that_is_a_device_is_not_updated(self):
        self.assert_error([QRELS, RUN, "--baseline", os.devnull, "--update-baseline"], ["not a regular file"])


@unittest.skipUnless(POSIX, "hard and symbolic links")
class TestOutputEqualToAnInputByIdentity(TempDirMixin, unittest.TestCase):
    """Item 2: an output is compared with every input by (device, inode), not only by path."""

    def setUp(self):
        super().setUp()
        self.qrels = self.write("qrels.json", self.read(QRELS))

    def test_a_hard_link_of_an_input_is_refused(self):
        alias = self.path("alias.json")
        os.link(self.qrels, alias)
        before = self.read(self.qrels)
        for option in ("--save-baseline", "--output", "--junit", "--unjudged"):
            with self.subTest(option):
                self.assert_error([self.qrels, RUN, option, alias], [alias, "would overwrite an input"])
        self.assertEqual(self.read(self.qrels), before)

    def test_a_folder_reached_another_way_is_refused(self):
        os.symlink(self.tmp, self.path("alias"))
        through = os.path.join(self.path("alias"), "qrels.json")
        self.assert_error([self.qrels, RUN, "--save-baseline", through], ["would overwrite an input"])

    def test_two_outputs_that_are_one_file_are_refused(self):
        first = self.write("a.json", "{}")
        os.link(first, self.path("b.json"))
        self.assert_error([QRELS, RUN, "--output", first, "--junit", self.path("b.json")], ["two outputs"])

    def test_a_new_file_is_fine(self):
        code, out, err = run_main([self.qrels, RUN, "--save-baseline", self.path("new.json")])
        self.assertEqual(code, 0, err)


@unittest.skipUnless(POSIX, "sh, /dev/full")
class TestExitCodesKeepTheirMeaning(TempDirMixin, unittest.TestCase):
    """Item 4: a closed or full stream, memory, a vanished input: never exit 1, never a traceback."""

    def setUp(self):
        super().setUp()
        self.baseline = self.write("baseline.json", self.read(BASELINE))

    def update(self, *extra):
        return quoted(*MODULE, QRELS, RUN, "--baseline", self.baseline, "--update-baseline", "--max-drop", "0.5",
                      "--junit", self.path("junit.xml"), *extra)

    def assert_nothing_written(self):
        self.assertEqual(self.read(self.baseline), self.read(BASELINE))
        self.assertEqual(os.listdir(self.tmp), ["baseline.json"])

    def test_closed_stdout(self):
        code, out, err = shell(f"{quoted(sys.executable)} {self.update()} >&-")
        self.assertEqual(code, rag_eval.EXIT_ERROR, err)
        assert_error_line(self, err, names=["standard output", f"({self.path('baseline.json')} "])
        self.assert_nothing_written()

    def test_closed_stdout_for_every_job(self):
        # --explain, several runs and the label jobs write through the same delivery: never a traceback;
        # one run or several, a closed stdout is refused before any input is read (so a missing run is not named)
        spans = os.path.join(REPO, "examples", "rechunking")
        jobs = (["--explain"], [QRELS, RUN, f"b={RUN}"], [QRELS, "missing.json"], [QRELS, RUN, "missing.json"],
                ["missing.jsonl", "--corpus", os.path.join(spans, "corpus.jsonl"), "--check-labels"],
                [os.path.join(spans, "qrels.spans.jsonl"), "--corpus", os.path.join(spans, "corpus.jsonl"),
                 "--check-labels"])
        for argv in jobs:
            with self.subTest(argv=argv), mock.patch("sys.stdout", None), \
                    contextlib.redirect_stderr(io.StringIO()) as err:
                self.assertEqual(rag_eval.main(argv), rag_eval.EXIT_ERROR)
                assert_error_line(self, err.getvalue(), names=["standard output"])

    def test_a_reader_gone_before_the_report(self):
        # '| head' that closed first: exit 141 (128 + SIGPIPE) without a word, and no file and no baseline changed
        class ClosedPipe(io.StringIO):
            def write(self, text):
                raise BrokenPipeError(32, "Broken pipe")

        argv = [QRELS, RUN, "--baseline", self.baseline, "--update-baseline", "--max-drop", "0.5",
                "--junit", self.path("junit.xml")]
        with mock.patch("sys.stdout", ClosedPipe()), contextlib.redirect_stderr(io.StringIO()) as err:
            self.assertEqual(rag_eval.main(argv), rag_eval.EXIT_BROKEN_PIPE)
        self.assertEqual(err.getvalue(), "")
        self.assert_nothing_written()

    @unittest.skipUnless(os.path.exists("/dev/full"), "needs /dev/full")
    def test_stdout_on_a_full_disk(self):
        code, out, err = shell(f"{quoted(sys.executable)} {self.update()} >/dev/full")
        self.assertEqual(code, rag_eval.EXIT_ERROR, err)
        assert_error_line(self, err, names=["standard output", "No space left on device", f"({self.path('baseline.json')} "])
        self.assert_nothing_written()

    def test_closed_stderr(self):
        for extra, expected in ((("--max-drop", "0.5"), 0), ((), 1)):
            with self.subTest(expected=expected):
                command = quoted(sys.executable, *MODULE, QRELS, RUN, "--baseline", BASELINE, *extra)
                code, out, err = shell(f"{command} 2>&-")
                self.assertEqual(code, expected)
                self.assertEqual(json.loads(out)["queries"], 3)

    @unittest.skipUnless(os.path.exists("/dev/full"), "needs /dev/full")
    def test_stderr_on_a_full_disk(self):
        for extra, expected in ((("--max-drop", "0.5"), 0), ((), 1)):
            with self.subTest(expected=expected):
                command = quoted(sys.executable, *MODULE, QRELS, RUN, "--baseline", BASELINE, *extra)
                code, out, err = shell(f"{command} 2>/dev/full")
                self.assertEqual(code, expected)
                self.assertEqual(json.loads(out)["queries"], 3)

    def test_closed_stderr_with_an_error_is_exit_2(self):
        code, out, err = shell(f"{quoted(sys.executable, *MODULE, QRELS, self.path('none.json'))} 2>&-")
        self.assertEqual((code, out), (rag_eval.EXIT_ERROR, ""))

    def test_the_update_still_happens_with_stderr_closed(self):
        code, out, err = shell(f"{quoted(sys.executable)} {self.update()} 2>&-")
        self.assertEqual(code, 0)
        self.assertNotEqual(self.read(self.baseline), self.read(BASELINE))

    def test_out_of_memory(self):
        from unittest import mock

        with mock.patch.object(rag_eval, "build_report", side_effect=MemoryError):
            line = self.assert_error([QRELS, RUN, "--baseline", self.baseline, "--update-baseline",
                                      "--junit", self.path("junit.xml")])
        self.assertEqual(line, "rag_eval: error: out of memory")
        self.assert_nothing_written()

    def test_an_input_deleted_after_reading_is_still_hashed(self):
        from unittest import mock

        run = self.write("run.json", self.read(RUN))
        expected = sha256_of(run)
        fingerprint = rag_eval._qrels_fingerprint

        def delete_then_fingerprint(qrels):  # called once every input is read
            os.unlink(run)
            return fingerprint(qrels)

        with mock.patch.object(rag_eval, "_qrels_fingerprint", side_effect=delete_then_fingerprint):
            code, out, err = run_main([QRELS, run, "--output", self.path("full.json")])
        self.assertEqual(code, 0, err)
        with open(self.path("full.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle)["inputs"]["run"]["sha256"], expected)

    def test_a_bug_is_exit_2_with_its_traceback(self):
        child = ("import sys; sys.path.insert(0, sys.argv[1]); import rag_eval\n"
                 "rag_eval.build_report = lambda *a, **k: 1 / 0\n"
                 "sys.argv = ['rag_eval', sys.argv[2], sys.argv[3]]; rag_eval.console_main()\n")
        done = subprocess.run([sys.executable, "-c", child, REPO, QRELS, RUN], env=CHILD_ENV, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=TIME_BOX)
        self.assertEqual(done.returncode, rag_eval.EXIT_ERROR)
        self.assertIn(b"ZeroDivisionError", done.stderr)


class TestAllOrNothing(TempDirMixin, unittest.TestCase):
    """Item 5: a run that fails leaves none of its files behind, and no JUnit report that passes."""

    def test_a_failing_output_leaves_no_junit(self):
        junit, unjudged = self.path("junit.xml"), self.path("unjudged.jsonl")
        self.write("in-the-way", "a file, where the output's folder would be")
        missing = self.path("in-the-way/full.json")
        self.assert_error([QRELS, RUN, "--junit", junit, "--unjudged", unjudged, "--output", missing], [missing])
        self.assertEqual(os.listdir(self.tmp), ["in-the-way"])

    def test_a_failure_while_staging_leaves_nothing(self):
        from unittest import mock

        real = rag_eval._write_atomically
        calls = []

        def second_fails(path, text, commit=True):
            calls.append(path)
            if len(calls) == 2:
                raise KeyboardInterrupt
            return real(path, text, commit)

        with mock.patch.object(rag_eval, "_write_atomically", side_effect=second_fails):
            code, out, err = run_main([QRELS, RUN, "--junit", self.path("junit.xml"), "--output", self.path("full.json"),
                                       "--save-baseline", self.path("saved.json")])
        self.assertEqual(code, rag_eval.EXIT_INTERRUPTED)
        self.assertEqual(out, "")
        self.assertEqual(os.listdir(self.tmp), [])

    def test_a_report_that_cannot_be_delivered_writes_nothing(self):
        from unittest import mock
        import errno

        failing = mock.Mock()
        failing.write.side_effect = OSError(errno.ENOSPC, "No space left on device")
        err = io.StringIO()
        with mock.patch.object(sys, "stdout", failing), contextlib.redirect_stderr(err):
            code = rag_eval.main([QRELS, RUN, "--junit", self.path("junit.xml"), "--output", self.path("o.json")])
        self.assertEqual(code, rag_eval.EXIT_ERROR)
        assert_error_line(self, err.getvalue(), names=["standard output", "No space left on device"])
        self.assertEqual(os.listdir(self.tmp), [])

    def test_every_file_is_written_when_all_goes_well(self):
        names = {"--junit": "junit.xml", "--output": "full.json", "--save-baseline": "saved.json",
                 "--unjudged": "unjudged.jsonl"}
        argv = [QRELS, RUN] + [part for option, name in names.items() for part in (option, self.path(name))]
        code, out, err = run_main(argv)
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(os.listdir(self.tmp)), sorted(names.values()))


@unittest.skipUnless(POSIX, "FIFOs")
class TestEachInputReadOnce(TempDirMixin, unittest.TestCase):
    """Item 6: a FIFO (or <(...)) is read once; --output records the sha256 of the bytes read."""

    def feed(self, fifo, data):
        def write():
            with open(fifo, "wb") as out:
                out.write(data)

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        return thread

    def run_fifo(self, data, *options):
        fifo = self.path("run.fifo")
        os.mkfifo(fifo)
        thread = self.feed(fifo, data)
        try:
            result = run_main([QRELS, fifo, *options])
        finally:
            if thread.is_alive():  # the child never opened it: open the reading end so the writer ends
                with open(fifo, "rb") as drain:
                    drain.read()
            thread.join()
        os.unlink(fifo)
        return result

    def test_output_hashes_a_fifo_as_read(self):
        import hashlib

        data = self.read(RUN)
        code, out, err = self.run_fifo(data, "--output", self.path("full.json"))
        self.assertEqual(code, 0, err)
        with open(self.path("full.json"), encoding="utf-8") as handle:
            inputs = json.load(handle)["inputs"]
        self.assertEqual(inputs["run"]["sha256"], hashlib.sha256(data).hexdigest())
        self.assertEqual(inputs["qrels"]["sha256"], sha256_of(QRELS))

    def test_unjudged_with_judged_only_reads_a_fifo_once(self):
        code, out, err = run_main([QRELS, RUN, "--judged-only", "--unjudged", self.path("expected.jsonl")])
        self.assertEqual(code, 0, err)
        code, out, err = self.run_fifo(self.read(RUN), "--judged-only", "--unjudged", self.path("got.jsonl"))
        self.assertEqual(code, 0, err)
        self.assertEqual(self.read(self.path("got.jsonl")), self.read(self.path("expected.jsonl")))
        self.assertTrue(self.read(self.path("got.jsonl")))

    def through_a_pipe(self, data, argv):
        """run_main on argv with PIPE replaced by /dev/fd/N of a pipe holding data (a second read finds it empty)."""
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, data)  # small: the pipe's buffer holds it
            os.close(write_end)
            return run_main([f"/dev/fd/{read_end}" if arg == "PIPE" else arg for arg in argv])
        finally:
            os.close(read_end)

    @unittest.skipUnless(os.path.exists("/dev/fd"), "/dev/fd")
    def test_a_pipe_is_read_once_where_a_file_may_be_read_twice(self):
        # A file may be read twice: a reranked pool (each query ranks exactly its judged documents) is read
        # again to tell it from a copy of the qrels, q1's lines apart are read again plainly, and a JSON run
        # is streamed and read again whole to name its error.  Through a pipe, each was once "file is empty".
        rerank = b"".join(f"{qid} Q0 {doc} 0 {score} r\n".encode() for qid, grades in self.qrels().items()
                          for doc, score in zip(grades, (0.3, 0.9, 0.5)))
        apart = b"q1 Q0 refund-policy#2 1 3 r\nq2 Q0 sla-uptime#1 1 3 r\nq1 Q0 refund-policy#3 2 2 r\n"
        for data in (rerank, apart):
            run = self.path("run.trec")
            with open(run, "wb") as out:
                out.write(data)
            with self.subTest(data=data[:30]):
                expected = run_main([QRELS, run, "--format", "csv"])
                self.assertEqual(expected[0], 0, expected[2])
                self.assertEqual(self.through_a_pipe(data, [QRELS, "PIPE", "--format", "csv"])[:2], expected[:2])
        code, out, err = self.through_a_pipe(b'{"q1": ["a"], "q1": ["b"]}', [QRELS, "PIPE"])
        self.assertEqual((code, out), (2, ""))
        assert_error_line(self, err, quoted=["q1"])
        code, out, err = self.through_a_pipe(self.read(RUN), [QRELS, RUN, "--baseline-run", "PIPE",
                                                              "--baseline-qrels", QRELS])
        self.assertEqual((code, out), (2, ""))
        assert_error_line(self, err, names=[": --baseline-qrels "])  # the pipe named first

    def qrels(self):
        with open(QRELS, encoding="utf-8") as handle:
            return json.load(handle)

    def test_a_gzipped_input_is_hashed_as_its_file(self):
        import gzip

        run = self.path("run.json.gz")
        with gzip.open(run, "wb") as out:
            out.write(self.read(RUN))
        code, out, err = run_main([QRELS, run, "--output", self.path("full.json")])
        self.assertEqual(code, 0, err)
        with open(self.path("full.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle)["inputs"]["run"]["sha256"], sha256_of(run))

    def test_unjudged_with_judged_only_lists_what_the_filter_drops(self):
        # q1's top 5: shipping#1 (unjudged), refund-policy#2, refund-policy#9 (unjudged), refund-policy#3, returns-faq#1
        code, out, err = run_main([QRELS, RUN, "--judged-only", "--unjudged", self.path("w.jsonl")])
        self.assertEqual(code, 0, err)
        with open(self.path("w.jsonl"), encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle]
        self.assertIn({"query_id": "q1", "doc_id": "shipping#1", "rank": 1, "relevance": -1}, rows)


@unittest.skipUnless(POSIX, "signals")
class TestSignalsAndNames(TempDirMixin, unittest.TestCase):
    """Item 8: no temporary file after SIGTERM or Ctrl-C mid-write; 250-byte names; no handler left installed."""

    CHILD = ("import os, sys, time\n"
             "sys.path.insert(0, sys.argv[1])\n"
             "import rag_eval\n"
             "def stall(fd):\n"
             "    sys.stderr.write('writing\\n'); sys.stderr.flush(); time.sleep(60)\n"
             "os.fsync = stall\n"
             "sys.argv = ['rag_eval'] + sys.argv[2:]\n"
             "rag_eval.console_main()\n")

    def interrupt(self, signum):
        target = self.write("baseline.json", self.read(BASELINE))
        # The child starts with SIGINT at its default, so that Python turns it into KeyboardInterrupt:
        # a shell running the tests in the background hands its children SIGINT ignored.
        child = subprocess.Popen([sys.executable, "-c", self.CHILD, REPO, QRELS, RUN, "--baseline", target,
                                  "--update-baseline", "--max-drop", "0.5"], env=CHILD_ENV, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            self.assertEqual(child.stderr.readline(), b"writing\n")
            child.send_signal(signum)
            out, err = child.communicate(timeout=TIME_BOX)
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
        self.assertEqual(self.read(target), self.read(BASELINE))
        self.assertEqual(os.listdir(self.tmp), ["baseline.json"])  # no .baseline.json.XXXX.tmp, no lock file
        self.assertEqual(out, b"")
        return child.returncode, err.decode()

    def test_sigterm_mid_write(self):
        code, err = self.interrupt(signal.SIGTERM)
        self.assertEqual((code, err), (rag_eval.EXIT_TERMINATED, "rag_eval: terminated\n"))

    def test_ctrl_c_mid_write(self):
        code, err = self.interrupt(signal.SIGINT)
        self.assertEqual((code, err), (rag_eval.EXIT_INTERRUPTED, "rag_eval: interrupted\n"))

    def test_a_250_byte_output_name(self):
        name = self.path("o" * 245 + ".json")
        code, out, err = run_main([QRELS, RUN, "--output", name])
        self.assertEqual(code, 0, err)
        self.assertEqual(os.listdir(self.tmp), [os.path.basename(name)])

    def test_a_254_byte_baseline_name_is_updated_under_its_lock(self):
        # 83 CJK characters are 249 bytes of UTF-8: the lock file's name must be cut as the temporary file's is
        name = self.path("\u57fa" * 83 + ".json")
        with open(name, "w", encoding="utf-8") as out:
            json.dump({"recall@5": 0.1}, out)
        code, out, err = run_main([QRELS, RUN, "--baseline", name, "--update-baseline"])
        self.assertEqual(code, 0, err)
        self.assertEqual(os.listdir(self.tmp), [os.path.basename(name)])  # no lock or temporary file left
        self.assertAlmostEqual(rag_eval.read_baseline(name).means["recall@5"], 2 / 3, places=12)

    def test_the_library_installs_no_handler(self):
        before = signal.getsignal(signal.SIGTERM)
        self.assertEqual(run_main([QRELS, RUN])[0], 0)
        self.assertIs(signal.getsignal(signal.SIGTERM), before)
        from unittest import mock

        import contextlib
        import io

        with mock.patch.object(sys, "argv", ["rag_eval", "--version"]), self.assertRaises(SystemExit), \
                contextlib.redirect_stdout(io.StringIO()):
            rag_eval.console_main()
        self.assertIs(signal.getsignal(signal.SIGTERM), before)  # the entry point restores it


class TestHelpAndVersionOnAFailedStdout(unittest.TestCase):
    """--help and --version print through the report's own delivery: a closed or full stdout is exit 2 with
    the one error line, as the epilog promises (argparse alone swallows the error and exits 0)."""

    CLOSED = "rag_eval: error: standard output is closed: the report would go nowhere"
    FULL = "rag_eval: error: cannot write the report to standard output: No space left on device"

    def test_in_process(self):
        class Full(io.StringIO):
            def write(self, text):
                raise OSError(28, "No space left on device")

        for option in ("--help", "--version"):
            for stdout, line in ((None, self.CLOSED), (Full(), self.FULL)):
                with self.subTest(option=option, line=line), mock.patch("sys.stdout", stdout), \
                        contextlib.redirect_stderr(io.StringIO()) as err:
                    self.assertEqual(rag_eval.main([option]), rag_eval.EXIT_ERROR)
                    self.assertEqual(err.getvalue(), line + "\n")
        code, out, err = run_main(["--version"])
        self.assertEqual((code, out, err), (rag_eval.EXIT_OK, f"rag_eval {rag_eval.__version__}\n", ""))

    @unittest.skipUnless(POSIX and os.path.exists("/dev/full"), "sh, /dev/full")
    def test_in_a_child_process(self):
        module = quoted(sys.executable, *MODULE)
        code, out, err = shell(f"{module} --help >&-; echo $?; {module} --version >/dev/full; echo $?")
        self.assertEqual((out, err), ("2\n2\n", f"{self.CLOSED}\n{self.FULL}\n"))


class TestStandardOutputIsNoReportFile(unittest.TestCase):
    """``-`` for a file that a report option writes: stdout carries the report, so it is refused as no file
    name (it was "would overwrite an input", which it is not)."""

    def test_each_file_option(self):
        for option in ("--output", "--junit", "--metrics-file", "--unjudged", "--save-baseline"):
            with self.subTest(option):
                code, out, err = run_main([QRELS, RUN, option, "-"])
                self.assertEqual((code, out), (rag_eval.EXIT_ERROR, ""))
                assert_error_line(self, err, names=[f"{ERROR_PREFIX}{option}: ", "--format"], quoted=["-"])


if __name__ == "__main__":
    unittest.main()
