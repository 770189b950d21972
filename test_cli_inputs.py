"""The command line never writes over an input: each output is compared with
every input by path and by (device, inode), the same way for one run, several
runs and --baseline-qrels (rag_eval._overwrites)."""

import io
import json
import os
import unittest
from unittest import mock

import rag_eval
from helpers_for_tests import TempDirMixin, run_main

REPO = os.path.dirname(os.path.abspath(__file__))
QRELS = os.path.join(REPO, "fixtures", "qrels.json")
RUN = os.path.join(REPO, "fixtures", "run.json")


@unittest.skipUnless(os.name == "posix", "hard links")
class TestNoOutputIsAnInput(TempDirMixin, unittest.TestCase):
    def test_a_hard_link_of_the_baseline_qrels_is_refused(self):
        old_qrels = self.write("old_qrels.json", self.read(QRELS))
        alias = self.path("alias.json")
        os.link(old_qrels, alias)
        before = self.read(old_qrels)
        line = self.assert_error([QRELS, RUN, "--baseline-run", RUN, "--baseline-qrels", old_qrels, "--output", alias],
                                 [alias])
        self.assertIn("an output would overwrite an input (--baseline-qrels)", line)
        self.assertEqual(self.read(old_qrels), before)

    def test_a_hard_link_of_a_later_run_is_refused(self):
        second = self.write("second.json", self.read(RUN))
        alias = self.path("alias.json")
        os.link(second, alias)
        line = self.assert_error([QRELS, RUN, second, "--output", alias], [alias])
        self.assertIn("--output would overwrite an input", line)

    def test_a_later_run_that_is_a_symbolic_link_is_refused(self):
        link = self.path("link.json")
        os.symlink(RUN, link)
        self.assert_error([QRELS, RUN, link, "--no-symlinks"], [link, "--no-symlinks"])

    def test_standard_input_is_read_once_whichever_run_names_it(self):
        # The second run and --chunks would both read standard input.
        line = self.assert_error([QRELS, RUN, "-", "--chunks", "-"])
        self.assertIn("only one input can be - (standard input)", line)

    def test_the_file_a_later_run_reads_on_standard_input_is_not_overwritten(self):
        # In-process: standard input is the open file, as a shell's < gives it (found by its descriptor).
        target = self.write("run.json", self.read(RUN))
        with open(target, "rb") as stdin, mock.patch("sys.stdin", stdin):
            self.assert_error([QRELS, RUN, "-", "--output", target], ["--output would overwrite an input"])
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


if __name__ == "__main__":
    unittest.main()
