"""The developer tools keep working (tools/bench): their arithmetic, and (with
RAG_EVAL_FULL=1) a tiny run of each; the differential harnesses (tools/diff) on
a few cases.  Their timings are never asserted
(machines are noisy); what is checked is that the scripts run, that their fits
recover known costs, and that they report rag_eval's output identically.
"""

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

from tests.helpers import run_main


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


sys.path.insert(0, os.path.join(HERE, "tools", "bench"))
import bench  # noqa: E402  (tools/bench is a folder of scripts, not a package)
import bench_stats  # noqa: E402


QUICK = os.environ.get("RAG_EVAL_FULL") != "1"


class TestCostModel(unittest.TestCase):
    def test_recovers_a_per_line_and_a_per_query_cost(self):
        a, b = 0.25e-6, 15e-6
        points = [(lines, queries, a * lines + b * queries)
                  for lines, queries in ((100_000, 1_000), (100_000, 100), (300_000, 3_000), (10_000_000, 10_000))]
        fitted_a, fitted_b, misfit = bench.cost_model(points)
        self.assertAlmostEqual(fitted_a / a, 1.0, places=9)
        self.assertAlmostEqual(fitted_b / b, 1.0, places=9)
        self.assertLess(misfit, 1e-9)

    def test_one_shape_gives_a_per_line_cost_only(self):
        points = [(100_000, 1_000, 0.05), (300_000, 3_000, 0.15)]
        a, b, misfit = bench.cost_model(points)
        self.assertAlmostEqual(a, 0.5e-6, places=15)
        self.assertEqual(b, 0.0)

    def test_a_cost_that_grows_faster_than_the_lines_does_not_fit(self):
        # Quadratic in lines: no a * lines + b * queries fits all four within 15%.
        points = [(lines, lines // 100, 1e-12 * lines ** 2) for lines in (100_000, 300_000, 1_000_000, 3_000_000)]
        *_, misfit = bench.cost_model(points)
        self.assertGreater(misfit, bench.LINEAR_TOLERANCE)

    def test_the_verdict_line(self):
        results = [{"workload": name, "format": "trec", "tool": "rag_eval", "lines": q * d, "min_wall": wall}
                   for name, q, d, wall in (("start-up", 5, 12, 0.030), ("a", 1_000, 100, 0.030 + 0.040),
                                           ("b", 100, 1_000, 0.030 + 0.0265), ("c", 3_000, 100, 0.030 + 0.120))]
        sizes = [("start-up", 5, 12), ("a", 1_000, 100), ("b", 100, 1_000), ("c", 3_000, 100)]
        line = bench.cost_model_line(results, sizes, "trec", "rag_eval")
        self.assertIn("(linear)", line)
        self.assertIn("0.250 us per line + 15.0 us per query", line)


class TestStatisticsFit(unittest.TestCase):
    def test_fixed_plus_per_unit(self):
        costs = {1.0: [(200, 8e6, 0.5), (1_000, 4e7, 0.05 + 4e7 * 3.5e-9), (10_000, 4e8, 0.05 + 4e8 * 3.5e-9)]}
        (line,) = bench_stats.scaling_lines(costs)
        self.assertIn("time = 50 ms + 3.50 ns", line)
        self.assertIn("over 2 sizes", line)  # 200 queries use the other bootstrap: not fitted
        self.assertTrue(line.endswith(": linear"), line)


@unittest.skipIf(QUICK, "runs the benchmarks for a few seconds: set RAG_EVAL_FULL=1")
class TestBenchmarksRun(unittest.TestCase):
    def run_script(self, *argv):
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=HERE)
        self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
        return proc.stdout

    def test_bench(self):
        with tempfile.TemporaryDirectory() as workdir:
            out = self.run_script("tools/bench/bench.py", "--sizes", "20x10,40x10", "--formats", "trec,json,jsonl",
                                  "--repeat", "1", "--import-runs", "1", "--workdir", workdir,
                                  "--tools", "floor,floor_text,json,rag_eval,rag_eval_module")
        self.assertIn("rag_eval's stdout is byte-identical across repeats and across formats", out)
        self.assertNotIn("FAILED", out)
        for label in ("rag_eval (script)", "rag_eval (-m)", "floor, text mode", "json.load", "json.loads per line"):
            self.assertIn(f"| {label} |", out)

    def test_bench_stats(self):
        with tempfile.TemporaryDirectory() as workdir:
            out = self.run_script("tools/bench/bench_stats.py", "--queries", "300,600", "--resamples", "200",
                                  "--changed", "1.0", "--repeat", "1", "--workdir", workdir)
        self.assertIn("| 600 | 100% |", out)
        self.assertIn("| rag_eval --baseline-run OLD | 100% |", out)
        self.assertIn("per changed query x metric x resample over 2 sizes", out)

    def test_ppi_coverage(self):
        out = self.run_script("tools/bench/ppi_coverage.py", "--simulations", "20", "--questions", "120",
                              "--truth-draws", "20000")
        self.assertIn("50 labels of 120 questions, 20 simulations", out)  # MIN_HUMAN_LABELS, the default
        self.assertEqual(out.count("\n| "), 6)  # the header and five scenarios

    def test_audit_gate(self):
        out = self.run_script("tools/bench/audit_gate.py", "--only", "lattice,cli", "--sizes", "50", "--simulations", "10")
        self.assertIn("10 of 10 exit codes equal", out)  # the command line gives the library's verdicts
        worst = float(out.split("\n| 50 | ")[1].split("%")[0])  # the exact false pass at a drop of the tolerance
        self.assertLessEqual(worst, 5.0)

    def test_drift_false_rate(self):
        out = self.run_script("tools/bench/drift_false_rate.py", "--simulations", "5", "--questions", "20",
                              "--changed", "5")
        self.assertEqual(out.count("\n| "), 4)  # graded and pass/fail, each unchanged and shifted

    def test_bench_rows(self):
        with tempfile.TemporaryDirectory() as workdir:
            out = self.run_script("tools/bench/bench_rows.py", "--reference", "rag_eval.py", "--queries", "30", "--docs",
                                  "10", "--k", "10", "--repeat", "1", "--workdir", workdir)
        self.assertIn("| msmarco | 10 |", out)
        self.assertIn("| jsonl | 10 |", out)
        self.assertIn("outputs byte-identical between the two copies", out)


cli = run_main  # main in-process: (exit code, stdout, stderr)


class TestBenchDeep(unittest.TestCase):
    """tools/bench/bench_deep.py's workload and its reading of trec_eval's output (its timings are never asserted)."""

    def test_every_format_of_the_workload_scores_the_same(self):
        sys.path.insert(0, os.path.join(HERE, "tools", "bench"))
        import bench_deep

        with tempfile.TemporaryDirectory() as tmp:
            paths = {what: os.path.join(tmp, what) for what in ("qrels", "trec", "json", "jsonl")}
            bench_deep.generate(12, 40, 5, 0, paths)
            outputs = {cli([paths["qrels"], paths[fmt], "--k", "10,100,1000", "--digits", "17",
                            "--measures", ",".join(bench_deep.MEASURES)])[1] for fmt in ("trec", "json", "jsonl")}
            self.assertEqual(len(outputs), 1)

    def test_trec_eval_output_names_our_metrics(self):
        sys.path.insert(0, os.path.join(HERE, "tools", "bench"))
        import bench_deep

        text = "recall_10\tall\t0.5\nrecall_10\tq1\t1.0\nrecip_rank\tall\t0.25\nmap_cut_1000\tall\t0.125\n"
        self.assertEqual(bench_deep.reference_means("trec_eval", text),
                         {"recall@10": 0.5, "mrr@1000": 0.25, "ap@1000": 0.125})


class TestDifferentialHarnesses(unittest.TestCase):
    """tools/diff: libdiff, measdiff, clidiff and readdiff find no difference between a copy and itself, and
    find the one planted in another copy (recall counting one rank fewer; for readdiff, a reader's), exiting 1."""

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.join(HERE, "tools", "diff"))
        cls._tmp = tempfile.TemporaryDirectory()
        with open(os.path.join(HERE, "rag_eval.py"), encoding="utf-8") as handle:
            source = handle.read()
        line = "bisect_right(q.relevant, k) / q.num_relevant"
        if source.count(line) != 1:
            raise AssertionError(f"the planted change needs {line!r} once in rag_eval.py's recall: update this test")
        cls.planted = os.path.join(cls._tmp.name, "rag_eval.py")
        with open(cls.planted, "w", encoding="utf-8") as handle:
            handle.write(source.replace(line, "bisect_right(q.relevant, k - 1) / q.num_relevant"))
        import common  # tools/diff/common.py: each copy is loaded once for all the tests here (0.2 s a load)
        loaded = {}
        cls._load = mock.patch.object(common, "load", lambda path, name: loaded.get(path) or loaded.setdefault(
            path, cls._original_load(path, f"rag_eval_copy_{len(loaded)}")))
        cls._original_load = common.load
        cls._load.start()

    @classmethod
    def tearDownClass(cls):
        cls._load.stop()
        cls._tmp.cleanup()

    def harness(self, name, reference, cases):
        """Run tools/diff/NAME.py's main in-process: (exit code, stdout)."""
        module = __import__(name)
        out = io.StringIO()
        argv = [name, "--reference", reference, "--cases", str(cases), "--seed", "3", "--show", "1"]
        with mock.patch.object(sys, "argv", argv), contextlib.redirect_stdout(out):
            code = module.main()
        return code, out.getvalue()

    def check(self, name, cases):
        code, out = self.harness(name, os.path.join(HERE, "rag_eval.py"), cases)
        self.assertEqual(code, 0, out)
        self.assertTrue(out.endswith("no differences\n"), out)
        self.assertNotIn(" 0 identical", out)  # every kind of case ran
        code, out = self.harness(name, self.planted, cases)
        self.assertEqual(code, 1, out)
        self.assertRegex(out, r"\n\d+ different cases\n$")
        self.assertRegex(out, r"\n--- .*case \d+ \(seed 3:\d+\) differs at ")

    def test_libdiff(self):
        self.check("libdiff", 8)

    def test_measdiff(self):
        self.check("measdiff", 40)

    def test_clidiff(self):
        self.check("clidiff", 8)

    def test_readdiff(self):
        """readdiff calls the readers only: its planted change is a reader's (ids of more than 8 bytes refused)."""
        code, out = self.harness("readdiff", os.path.join(HERE, "rag_eval.py"), 40)
        self.assertEqual(code, 0, out)
        self.assertTrue(out.endswith("no differences\n"), out)
        self.assertNotIn(" 0 identical", out)  # runs, qrels and slices were read
        with open(os.path.join(HERE, "rag_eval.py"), encoding="utf-8") as handle:
            source = handle.read()
        line = "_MAX_ID = 1 << 12"
        self.assertEqual(source.count(line), 1, f"the planted change needs {line!r} once in rag_eval.py")
        os.makedirs(os.path.join(self._tmp.name, "reader"))
        planted = os.path.join(self._tmp.name, "reader", "rag_eval.py")
        with open(planted, "w", encoding="utf-8") as handle:
            handle.write(source.replace(line, "_MAX_ID = 1 << 3"))
        code, out = self.harness("readdiff", planted, 40)
        self.assertEqual(code, 1, out)
        self.assertRegex(out, r"\n\d+ different cases\n$")


if __name__ == "__main__":
    unittest.main()
