"""Several runs in one call: the comparison with a reference, its p-values
adjusted over the family, the gate of each candidate, provenance (--meta) and
label changes since a baseline.

The adjusted p-values are recomputed here by an independent Holm (a plain
loop over the sorted p-values, written from Holm 1979, not from rag_eval).
Nothing here reads the real git repository: the CI variables are set, or
``subprocess.run`` is mocked.
"""

import json
import os
import random
import tempfile
import unittest
from unittest import mock

import rag_eval
from tests import helpers
from tests.helpers import ERROR_PREFIX, assert_error_line, run_main, three_runs


class TestCompareRunsAgainstTheBest(unittest.TestCase):
    def test_p_against_the_best_is_the_pair_s_own_test_and_holm_adjusts_them(self):
        for seed in range(4):
            with self.subTest(seed=seed):
                qrels, runs = three_runs(seed)
                results = [(name, rag_eval.evaluate(qrels, runs[name], [3, 5], measures=["recall", "mrr", "ndcg"]))
                           for name in ("ref", "x", "y")]
                found = rag_eval.compare_runs(results, resamples=300, seed=1)
                scores = {name: rag_eval._per_query_by_metric(result) for name, result in results}
                by_hand = {}
                for metric, entry in found["metrics"].items():
                    best = entry["best"]
                    for name, run in entry["runs"].items():
                        if name == best:
                            self.assertEqual(run["mark"], "best")
                            continue
                        # a two-sided test: the pair's p is the same whichever side is "before"; a pair with the
                        # reference is the table's own test (its family's draw), the others compare_paired alone
                        if "ref" in (name, best):
                            p = entry["runs"][best if name == "ref" else name]["p_value"]
                        else:
                            p = rag_eval.compare_paired(metric, scores[best][metric], scores[name][metric],
                                                        resamples=300, seed=1).p_value
                        self.assertEqual(run["p_vs_best"], p, (metric, name, best))
                        by_hand[name, metric] = p
                adjusted = holm_by_hand(by_hand)
                for (name, metric), p in adjusted.items():
                    self.assertEqual(found["metrics"][metric]["runs"][name]["p_vs_best_adjusted"], p)
                self.assertEqual(found["adjustment"], "maxt")


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


QRELS = os.path.join(HERE, "fixtures", "qrels.json")


RUN = os.path.join(HERE, "fixtures", "run.json")


BASELINE = os.path.join(HERE, "baseline.json")


# What provenance reads: cleared in every in-process run, so that no test sees the real CI or branch.
CI_VARIABLES = {name: None for name in ("GITHUB_SHA", "GITHUB_REF_NAME", "GITHUB_HEAD_REF", "CI_COMMIT_SHA",
                                         "CI_COMMIT_REF_NAME")}


def holm_by_hand(p_values):
    """Holm (1979): sort ascending; the i-th (from 0) gets max over j <= i of min(1, (m - j) * p_j)."""
    ordered = sorted(p_values.items(), key=lambda item: item[1])
    m, running, adjusted = len(ordered), 0.0, {}
    for j, (key, p) in enumerate(ordered):
        running = max(running, min(1.0, (m - j) * p))
        adjusted[key] = running
    return adjusted


def main(argv, env=None):
    return run_main(argv, env={**CI_VARIABLES, **(env or {})})


class Workload(helpers.TempDirMixin):
    """40 queries, each with 3 relevant documents among 30; runs of varied quality, seeded."""

    QUERIES = 40

    def setUp(self):
        super().setUp()
        rng = random.Random(17)
        self.qrels = {f"q{i}": {f"d{i}-{j}": rng.choice((1, 2)) for j in range(3)} for i in range(self.QUERIES)}
        self.qrels_path = self.write("qrels.json", self.qrels)

    def ranked(self, name, hit_share, seed):
        """A run that puts each query's relevant documents in its top 3 with chance ``hit_share``."""
        rng = random.Random(seed)
        run = {}
        for qid in self.qrels:
            others = [f"x{qid}-{j}" for j in range(10)]
            relevant = [doc for doc in self.qrels[qid] if rng.random() < hit_share]
            run[qid] = relevant + others[:10 - len(relevant)]
        return self.write(f"{name}.json", run)


class TestCompareRuns(Workload, unittest.TestCase):
    """The inputs live in one folder for the class, so that the default comparison, which
    several tests read, is computed once (``default_stdout``)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.inputs = tempfile.TemporaryDirectory(prefix="rag_eval_compare_")
        cls.addClassCleanup(cls.inputs.cleanup)
        cls.default_stdout = None

    def setUp(self):
        super().setUp()
        own, self.tmp = self.tmp, self.inputs.name  # the same seeded files, at the same paths, for every test
        try:
            self.qrels_path = self.write("qrels.json", self.qrels)
            self.paths = [self.ranked("bm25", 0.5, 1), self.ranked("dense", 0.8, 2), self.ranked("hybrid", 0.82, 3)]
        finally:
            self.tmp = own

    def default(self):
        """stdout of the comparison of the three runs with the default options, run once for the class."""
        if type(self).default_stdout is None:
            code, out, err = main([self.qrels_path, *self.paths])
            self.assertEqual(code, 0, err)
            type(self).default_stdout = out
        return type(self).default_stdout

    def comparison(self, *extra):
        if not extra:
            return json.loads(self.default())
        code, out, err = main([self.qrels_path, *self.paths, *extra])
        self.assertEqual(code, 0, err)
        return json.loads(out)

    def test_the_gate_and_the_comparison_give_one_p(self):
        # Kills: the comparison adjusting otherwise than the gate (Holm over candidates x metrics gave 0.117
        # where the gate gave 0.016).  Each candidate gated against the reference (--baseline-run) reports
        # the p_value and p_adjusted of the comparison's row: MaxT over the pair's metrics, times 2 candidates.
        code, out, err = main([self.qrels_path, *self.paths[1:], "--baseline-run", self.paths[0], "--gate", "significant",
                               "--inconclusive", "pass"])
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        comparison = report["comparison"]
        self.assertEqual((comparison["adjustment"], comparison["family"]), ("maxt", 2 * 4))
        for run in report["runs"][1:]:
            for metric, entry in run["gate"]["metrics"].items():
                with self.subTest(run=run["name"], metric=metric):
                    row = comparison["metrics"][metric]["runs"][run["name"]]
                    self.assertEqual((row["p_value"], row["p_adjusted"]), (entry["p_value"], entry["p_adjusted"]))
                    self.assertEqual(entry["tests"], 2 * 4)
        two = self.comparison("--resamples", "10000")  # the same pair, alone: its family is its 4 metrics
        code, out, err = main([self.qrels_path, self.paths[1], "--baseline-run", self.paths[0]])
        gate = json.loads(out)["gate"]["metrics"]
        code, out, err = main([self.qrels_path, self.paths[0], self.paths[1]])
        pair = json.loads(out)["comparison"]["metrics"]
        for metric, entry in gate.items():
            self.assertEqual(pair[metric]["runs"]["dense"]["p_adjusted"], entry["p_adjusted"])
            self.assertLessEqual(entry["p_adjusted"], two["comparison"]["metrics"][metric]["runs"]["dense"]["p_adjusted"])

    def test_each_candidate_against_the_reference(self):
        report = self.comparison()
        means = {run["name"]: run["mean"] for run in report["runs"]}
        self.assertEqual(report["comparison"]["order"], ["bm25", "dense", "hybrid"])
        self.assertEqual(report["comparison"]["reference"], "bm25")
        self.assertEqual([run["reference"] for run in report["runs"]], [True, False, False])
        for metric, entry in report["comparison"]["metrics"].items():
            for name in ("dense", "hybrid"):
                with self.subTest(run=name, metric=metric):
                    row = entry["runs"][name]
                    self.assertAlmostEqual(row["delta"], means[name][metric] - means["bm25"][metric], places=12)
                    self.assertEqual(row["better"] + row["worse"] + row["same"], self.QUERIES)
                    low, high = row["interval"]
                    self.assertLessEqual(low, row["delta"] + 1e-9)
                    self.assertGreaterEqual(high, row["delta"] - 1e-9)
            self.assertNotIn("p_value", entry["runs"]["bm25"])  # the reference is not compared with itself

    def test_the_best_and_those_not_distinguishable_from_it(self):
        metrics = self.comparison()["comparison"]["metrics"]
        for metric, entry in metrics.items():
            with self.subTest(metric=metric):
                best = max(entry["runs"], key=lambda name: entry["runs"][name]["mean"])
                self.assertEqual(entry["best"], best)
                self.assertEqual(entry["runs"][best]["mark"], "best")
                for name, row in entry["runs"].items():
                    if name != best:
                        self.assertEqual(row["mark"] == "indistinguishable", row["p_vs_best_adjusted"] >= 0.05)
                self.assertEqual(entry["indistinguishable"],
                                 [n for n in ("bm25", "dense", "hybrid") if entry["runs"][n]["mark"] == "indistinguishable"])
        # 0.5 against ~0.8 of relevant documents found, over 40 queries: bm25 is distinguishable from the best.
        self.assertEqual(metrics["recall@5"]["runs"]["bm25"]["mark"], "")
        self.assertEqual(metrics["recall@5"]["runs"]["dense" if metrics["recall@5"]["best"] == "hybrid"
                                                    else "hybrid"]["mark"], "indistinguishable")

    def test_the_p_values_against_the_best_are_holm_over_their_own_family(self):
        metrics = self.comparison()["comparison"]["metrics"]
        raw = {(name, metric): row["p_vs_best"] for metric, entry in metrics.items()
               for name, row in entry["runs"].items() if name != entry["best"]}
        for (name, metric), p in holm_by_hand(raw).items():
            self.assertAlmostEqual(metrics[metric]["runs"][name]["p_vs_best_adjusted"], p, places=15)

    def test_the_same_bytes_every_time_and_seeded(self):
        first = self.default()
        self.assertEqual(main([self.qrels_path, *self.paths])[1], first)
        self.assertNotEqual(main([self.qrels_path, *self.paths, "--seed", "1", "--resamples", "500"])[1], first)

    def test_names_from_file_stems_or_name_equals_path(self):
        report = self.comparison()
        self.assertEqual([run["name"] for run in report["runs"]], ["bm25", "dense", "hybrid"])
        code, out, err = main([self.qrels_path, f"old={self.paths[0]}", f"new={self.paths[1]}"])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["comparison"]["order"], ["old", "new"])
        self.assertEqual(rag_eval._run_name("runs/e5.trec.gz"), ("e5", "runs/e5.trec.gz"))
        self.assertEqual(rag_eval._run_name("-"), ("stdin", "-"))
        # a run suffix goes, in any case; another stays part of the name (two versions are two runs)
        self.assertEqual(rag_eval._run_name("runs/E5.TREC"), ("E5", "runs/E5.TREC"))
        self.assertEqual(rag_eval._run_name("runs/e5.v2"), ("e5.v2", "runs/e5.v2"))
        self.assertEqual(rag_eval._run_name("n" * 64 + "=r.json"), ("n" * 64, "r.json"))  # MAX_RUN_NAME
        for text in ("n" * 65 + "=r.json", "a\tb=r.json"):
            with self.subTest(text=text), self.assertRaisesRegex(rag_eval.RagEvalError, r"\b64\b"):
                rag_eval._run_name(text)

    def test_two_runs_of_one_name_are_refused(self):
        code, out, err = main([self.qrels_path, f"a={self.paths[0]}", f"a={self.paths[1]}"])
        self.assertEqual((code, out), (2, ""))
        assert_error_line(self, err, quoted=["a"], names=["NAME=PATH"])

    def test_every_format_carries_the_comparison(self):
        outputs = {}
        for fmt in ("table", "markdown", "csv"):  # the statistics are checked above: fewer resamples do here
            with self.subTest(format=fmt):
                code, outputs[fmt], err = main([self.qrels_path, *self.paths, "--format", fmt, "--resamples", "1000"])
                self.assertEqual(code, 0, err)
                self.assertIn("hybrid", outputs[fmt])
                self.assertIn("best", outputs[fmt])
                self.assertIn("maxt", outputs[fmt])
        rows = outputs["csv"].splitlines()
        self.assertEqual(rows[0], "metric,run,mean,delta,95% low,95% high,better,worse,same,p,p adjusted (maxt),mark")
        self.assertEqual(len(rows), 1 + 4 * 3)

    def test_one_run_prints_what_it_always_did(self):
        code, out, _ = main([QRELS, RUN])
        self.assertEqual(code, 0)
        self.assertNotIn("comparison", json.loads(out))
        self.assertEqual(set(json.loads(out)), {"abstention", "dropped", "gain", "k", "mean", "queries", "skipped",
                                                "missing", "ties", "unscored", "verdict"})

    def test_options_of_one_run_are_refused(self):
        for option in (["--junit", "j.xml"], ["--save-baseline", "b.json"], ["--per-query"],
                       ["--unjudged", "u.jsonl"], ["--metrics-file", "m.txt"]):
            with self.subTest(option=option[0]):
                code, out, err = main([self.qrels_path, *self.paths, *option])
                self.assertEqual((code, out), (2, ""))
                assert_error_line(self, err, names=[ERROR_PREFIX + option[0] + " "])

    def test_output_holds_every_run(self):
        path = os.path.join(self.tmp, "out", "full.json")
        code, _, err = main([self.qrels_path, *self.paths, "--output", path])
        self.assertEqual(code, 0, err)
        with open(path, encoding="utf-8") as f:
            full = json.load(f)
        self.assertEqual([run["name"] for run in full["inputs"]["runs"]], ["bm25", "dense", "hybrid"])
        self.assertTrue(all(len(run["sha256"]) == 64 for run in full["inputs"]["runs"]))
        self.assertEqual(len(full["runs"][2]["per_query"]), self.QUERIES)

    def test_the_library_function(self):
        results = [(name, rag_eval.evaluate(self.qrels, rag_eval.read_run(path), 5))
                   for name, path in zip(("a", "b"), self.paths)]
        found = rag_eval.compare_runs(results, resamples=200)
        self.assertEqual(found["order"], ["a", "b"])
        self.assertEqual(found["family"], 4)
        with self.assertRaises(rag_eval.RagEvalError):
            rag_eval.compare_runs(results[:1])


class TestCandidatesGate(Workload, unittest.TestCase):
    def test_each_candidate_is_gated_and_the_worst_exit_wins(self):
        code, out, err = main([QRELS, RUN, f"same={RUN}", "--baseline", BASELINE])
        self.assertEqual(code, 1)
        report = json.loads(out)
        self.assertFalse(report["passed"])
        self.assertEqual([run["gate"]["passed"] for run in report["runs"]], [False, False])
        self.assertIn("REGRESSION recall@5: baseline 0.7000, now 0.6667 (run same)", err.splitlines())
        self.assertIn("REGRESSION recall@5: baseline 0.7000, now 0.6667 (run run)", err.splitlines())

    def test_a_passing_gate_exits_0(self):
        baseline = self.write("low.json", {"recall@5": 0.1, "ndcg@5": 0.1})
        code, out, err = main([QRELS, RUN, f"same={RUN}", "--baseline", baseline])
        self.assertEqual(code, 0, err)
        self.assertTrue(json.loads(out)["passed"])

    def test_an_inconclusive_gate_is_not_a_regression(self):
        # 30 queries, one relevant document each.  Losing one query is too little evidence under --gate
        # significant (inconclusive, exit 3 alone); losing twenty is a regression.
        qrels = self.write("one.json", {f"q{i}": {f"d{i}": 1} for i in range(30)})
        run = {f"q{i}": [f"d{i}"] for i in range(30)}
        old = self.write("old.json", run)
        one = self.write("one_lost.json", dict(run, q0=["x"]))
        other = self.write("other_lost.json", dict(run, q1=["x"]))
        ten = self.write("ten_lost.json", dict(run, **{f"q{i}": ["x"] for i in range(20)}))
        common = ["--baseline-run", old, "--gate", "significant", "--resamples", "200", "--format", "table"]
        for runs, extra, code, headline in (
                ([one, other], [], 3, "INCONCLUSIVE (2: one_lost, other_lost), "),
                ([one, other], ["--inconclusive", "pass"], 0, "INCONCLUSIVE (2: one_lost, other_lost), "),
                ([one, other], ["--inconclusive", "fail"], 1, "INCONCLUSIVE (2: one_lost, other_lost), "),
                ([one, ten], [], 1, "FAIL (1: ten_lost), ")):
            with self.subTest(runs=runs, extra=extra):
                got, out, err = main([qrels, *runs, *common, *extra])
                self.assertEqual(got, code, err)
                self.assertTrue(out.startswith(headline), out)
                regressions = [line for line in err.splitlines() if line.startswith("REGRESSION")]
                self.assertEqual(bool(regressions), ten in runs, err)
                self.assertTrue(all(line.endswith("(run ten_lost)") for line in regressions), err)

    def test_every_report_of_several_runs_lists_what_was_not_gated(self):
        # --not-gated with several runs: the table, markdown and csv (which once had no word of it) hold a
        # 'not gated' row per metric and run, the JSON each run's gate.not_gated
        argv = [QRELS, RUN, f"same={RUN}", "--baseline", BASELINE, "--not-gated", "recall@5,mrr@5"]
        code, out, err = main(argv)
        self.assertEqual(code, 0, err)
        self.assertEqual([run["gate"]["not_gated"] for run in json.loads(out)["runs"]], [["recall@5", "mrr@5"]] * 2)
        for fmt in ("table", "markdown", "csv"):
            with self.subTest(format=fmt):
                code, out, err = main(argv + ["--format", fmt])
                self.assertEqual(code, 0, err)
                rows = [line.replace("`", "") for line in out.splitlines() if line.rstrip(" |").endswith("not gated")]
                self.assertEqual([row.replace("|", " ").replace(",", " ").split()[:2] for row in rows],
                                 [["recall@5", "run"], ["recall@5", "same"], ["mrr@5", "run"], ["mrr@5", "same"]])

    def test_no_baseline_no_gate(self):
        bad = self.ranked("poor", 0.1, 5)  # finds little: worse, but nothing to gate against
        code, out, err = main([self.qrels_path, self.ranked("good", 0.9, 4), bad])
        self.assertEqual(code, 0, err)
        self.assertNotIn("passed", json.loads(out))

    def test_against_a_baseline_run_every_positional_run_is_a_candidate(self):
        old, a, b = self.ranked("old", 0.9, 1), self.ranked("a", 0.9, 1), self.ranked("b", 0.3, 2)
        code, out, err = main([self.qrels_path, a, b, "--baseline-run", old])
        self.assertEqual(code, 1)
        report = json.loads(out)
        self.assertEqual(report["comparison"]["reference"], "old")
        self.assertNotIn("gate", report["runs"][0])
        self.assertEqual([run["gate"]["passed"] for run in report["runs"][1:]], [True, False])
        self.assertTrue(all(line.endswith("(run b)") for line in err.splitlines() if line.startswith("REGRESSION")))

    def test_a_bad_run_is_exit_2_in_one_line(self):
        broken = os.path.join(self.tmp, "broken.json")
        with open(broken, "w") as f:
            f.write('{"q1": ["a", ')
        code, out, err = main([QRELS, RUN, broken, "--baseline", BASELINE])
        self.assertEqual((code, out), (2, ""))
        self.assertEqual(len(err.splitlines()), 1)
        self.assertTrue(err.startswith("rag_eval: error: ") and "broken.json" in err, err)

    def test_standard_input_once(self):
        code, _, err = main([QRELS, "-", "-"])
        self.assertEqual(code, 2)
        self.assertIn(" - ", assert_error_line(self, err))  # the words: fixtures/bad/cases.json two_stdin_inputs


GITHUB = {"GITHUB_SHA": "0123abcd" * 5, "GITHUB_REF_NAME": "42/merge", "GITHUB_HEAD_REF": "try-bge-base"}


class TestProvenance(helpers.TempDirMixin, unittest.TestCase):
    def saved(self, *meta, env=GITHUB):
        path = os.path.join(self.tmp, "baseline.json")
        code, _, err = main([QRELS, RUN, "--save-baseline", path, *meta], env=env)
        self.assertEqual(code, 0, err)
        with open(path, encoding="utf-8") as f:
            return path, json.load(f)

    def test_from_github_variables_the_pull_request_branch(self):
        found = rag_eval._provenance_meta({"dataset": "v3"}, GITHUB)
        self.assertEqual(found["git_commit"], GITHUB["GITHUB_SHA"])
        self.assertEqual(found["git_branch"], "try-bge-base")  # GITHUB_HEAD_REF: the branch of the pull request
        self.assertEqual(found["dataset"], "v3")
        self.assertEqual(rag_eval._provenance_meta({}, {"GITHUB_SHA": "f" * 40, "GITHUB_REF_NAME": "main"})["git_branch"], "main")

    def test_from_gitlab_variables(self):
        found = rag_eval._provenance_meta({}, {"CI_COMMIT_SHA": "e" * 40, "CI_COMMIT_REF_NAME": "mr-7"})
        self.assertEqual((found["git_commit"], found["git_branch"]), ("e" * 40, "mr-7"))

    def test_from_git_when_no_ci_variable(self):
        answer = {("rev-parse", "HEAD", "--abbrev-ref", "HEAD"): b"c0ffee\nfeature/x\n"}  # one process for both

        def fake_run(command, **kwargs):
            self.assertEqual(kwargs["timeout"], rag_eval._GIT_TIMEOUT)
            return mock.Mock(returncode=0, stdout=answer[tuple(command[1:])])

        with mock.patch("subprocess.run", fake_run):
            found = rag_eval._provenance_meta({}, {})
        self.assertEqual((found["git_commit"], found["git_branch"]), ("c0ffee", "feature/x"))
        answer[("rev-parse", "HEAD", "--abbrev-ref", "HEAD")] = b"c0ffee\nfeature\x1b[31m\n"  # not printable: left out
        with mock.patch("subprocess.run", fake_run):
            found = rag_eval._provenance_meta({}, {})
        self.assertEqual((found["git_commit"], "git_branch" in found), ("c0ffee", False))

    def test_no_git_no_error(self):
        import subprocess

        for failure in (FileNotFoundError("git"), subprocess.TimeoutExpired("git", 2.0)):
            with self.subTest(failure=type(failure).__name__), mock.patch("subprocess.run", side_effect=failure):
                found = rag_eval._provenance_meta({"k": "v"}, {})
                self.assertEqual(set(found), {"k", "python"})
        with mock.patch("subprocess.run", return_value=mock.Mock(returncode=128, stdout=b"")):
            self.assertNotIn("git_commit", rag_eval._provenance_meta({}, {}))  # not a repository

    def test_the_user_wins_over_the_environment(self):
        self.assertEqual(rag_eval._provenance_meta({"git_commit": "mine"}, GITHUB)["git_commit"], "mine")

    def test_recorded_in_output_and_saved_baselines(self):
        _, record = self.saved("--meta", "embedder=bge-base-en-v1.5", "--meta", "index=2026-11-30")
        self.assertEqual(record["meta"]["embedder"], "bge-base-en-v1.5")
        self.assertEqual(record["meta"]["index"], "2026-11-30")
        self.assertEqual(record["meta"]["git_branch"], "try-bge-base")
        output = os.path.join(self.tmp, "full.json")
        code, _, err = main([QRELS, RUN, "--output", output, "--meta", "dataset=v3"], env=GITHUB)
        self.assertEqual(code, 0, err)
        with open(output, encoding="utf-8") as f:
            meta = json.load(f)["meta"]
        self.assertEqual((meta["dataset"], meta["git_commit"]), ("v3", GITHUB["GITHUB_SHA"]))

    def test_differences_beside_the_verdict(self):
        path, _ = self.saved("--meta", "embedder=bge-small", "--meta", "dataset=v3")
        code, out, err = main([QRELS, RUN, "--baseline", path, "--meta", "embedder=bge-base", "--meta", "dataset=v3",
                               "--meta", "index=2026-11-30"], env={**GITHUB, "GITHUB_SHA": "9" * 40})
        self.assertEqual(code, 0, err)
        # The commit changed too, as it does on every run: recorded, not listed.
        self.assertEqual(json.loads(out)["gate"]["meta_changes"],
                         ["embedder: bge-small -> bge-base", "index: (none) -> 2026-11-30"])
        code, out, _ = main([QRELS, RUN, "--baseline", path, "--meta", "embedder=bge-base", "--format", "table"])
        self.assertEqual(out.splitlines()[1],
                         "provenance changed since the baseline: dataset: v3 -> (none); embedder: bge-small -> bge-base")
        code, out, _ = main([QRELS, RUN, "--baseline", path, "--meta", "embedder=bge-small", "--meta", "dataset=v3"])
        self.assertNotIn("meta_changes", json.loads(out)["gate"])  # the same provenance: the report as before

    def test_older_baselines_without_meta_still_work(self):
        path, record = self.saved()
        del record["meta"]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)
        code, out, err = main([QRELS, RUN, "--baseline", path, "--meta", "embedder=x"])
        self.assertEqual(code, 0, err)
        self.assertNotIn("meta_changes", json.loads(out)["gate"])
        code, out, _ = main([QRELS, RUN, "--baseline", BASELINE])  # flat
        self.assertNotIn("meta_changes", json.loads(out)["gate"])

    def test_a_bad_meta_in_a_baseline(self):
        path, record = self.saved()
        record["meta"] = {"embedder": 3}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)
        code, _, err = main([QRELS, RUN, "--baseline", path])
        self.assertEqual(code, 2)
        assert_error_line(self, err, file=path, names=[" 3 "], quoted=["embedder"])

    def test_bad_meta_options_are_one_clipped_line(self):
        for text, expected in (("noequals", "'noequals'"), ("=v", "'=v'"), ("k\nx=v", "'k\\nx=v'"),
                               ("key=" + "v" * 400, "'key=vvvvvvvvvvvv'...")):
            with self.subTest(text=text[:10]):
                code, out, err = main([QRELS, RUN, "--meta", text])
                self.assertEqual((code, out), (2, ""))
                self.assertEqual(len(err.splitlines()), 1)
                self.assertTrue(err.rstrip("\n").endswith(f"got {expected}"), err)
        code, _, err = main([QRELS, RUN, "--meta", "a=1", "--meta", "a=2"])
        self.assertEqual(code, 2)  # the words: fixtures/bad/cases.json meta_key_twice
        assert_error_line(self, err, names=[ERROR_PREFIX + "--meta "], quoted=["a"])

    def test_in_the_step_summary(self):
        summary = os.path.join(self.tmp, "summary.md")
        env = {**GITHUB, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary}
        code, _, _ = main([QRELS, RUN, "--meta", "embedder=bge-base"], env=env)
        self.assertEqual(code, 0)
        with open(summary, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("<details><summary>Provenance</summary>", text)
        self.assertIn("| `embedder` | `bge-base` |", text)  # from the inputs: code spans
        self.assertIn(f"| `git_commit` | `{GITHUB['GITHUB_SHA']}` |", text)


class TestLabelChanges(helpers.TempDirMixin, unittest.TestCase):
    # The fixtures' judgments, changed: q1 gains refund-policy#9 (grade 1) and loses refund-policy#3;
    # q3 regrades okta-guide#1 from 1 to 2; q5 is new.
    def setUp(self):
        super().setUp()
        with open(QRELS, encoding="utf-8") as f:
            self.old = json.load(f)
        new = json.loads(json.dumps(self.old))
        new["q1"]["refund-policy#9"] = 1
        del new["q1"]["refund-policy#3"]
        new["q3"]["okta-guide#1"] = 2
        new["q5"] = {"x": 1}
        self.new = new
        self.new_path = os.path.join(self.tmp, "new.json")
        with open(self.new_path, "w", encoding="utf-8") as f:
            json.dump(new, f)

    def saved_baseline(self):
        path = os.path.join(self.tmp, "baseline.json")
        code, _, err = main([QRELS, RUN, "--save-baseline", path])
        self.assertEqual(code, 0, err)
        return path

    def test_the_baseline_stores_its_judgments(self):
        with open(self.saved_baseline(), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["judgments"], {"qrels": self.old})

    def test_large_qrels_are_stored_as_digests(self):
        qrels = {f"q{i}": {f"d{j}": 1 for j in range(3)} for i in range(10)}
        with mock.patch.object(rag_eval, "_MAX_STORED_JUDGMENTS", 29):
            stored = rag_eval._stored_judgments(qrels)
        self.assertEqual(set(stored), {"digests"})
        self.assertEqual(stored["digests"]["q0"]["judged"], 3)
        changed = dict(qrels, q0={"d0": 1, "d1": 2, "d2": 1})
        found = rag_eval._label_changes(stored, changed)
        self.assertEqual(found["queries"], {"q0": {"judged": [3, 3]}})
        self.assertEqual(found["counts"]["queries_changed"], 1)

    def test_per_query_differences_from_the_baseline(self):
        code, out, err = main([self.new_path, RUN, "--baseline", self.saved_baseline(), "--allow-qrels-change",
                               "--allow-partial-run"])
        self.assertEqual(code, 1, err)  # the new judgments lower the means: the gate says so, as before
        changes = json.loads(out)["gate"]["label_changes"]
        self.assertEqual(changes["queries"], {
            "q1": {"added": {"refund-policy#9": 1}, "removed": {"refund-policy#3": 1}, "regraded": {}},
            "q3": {"added": {}, "removed": {}, "regraded": {"okta-guide#1": [1, 2]}},
        })
        self.assertEqual(changes["queries_added"], ["q5"])
        self.assertEqual(changes["counts"], {"added": 1, "removed": 1, "regraded": 1, "queries_changed": 2,
                                             "queries_added": 1, "queries_removed": 0})

    def test_the_table_says_it_under_the_verdict(self):
        code, out, _ = main([self.new_path, RUN, "--baseline", self.saved_baseline(), "--allow-qrels-change",
                             "--allow-partial-run", "--format", "table"])
        self.assertEqual(out.splitlines()[1], "labels changed since the baseline: 1 judgment added, 1 removed, "
                                              "1 regraded in 2 queries (q1 +1 -1 ~0, q3 +0 -0 ~1); "
                                              "queries added 1, removed 0")

    def test_older_baselines_without_judgments(self):
        path = self.saved_baseline()
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        del record["judgments"]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)
        code, out, _ = main([self.new_path, RUN, "--baseline", path, "--allow-qrels-change", "--allow-partial-run"])
        self.assertEqual(code, 1)
        self.assertNotIn("label_changes", json.loads(out)["gate"])

    def test_delta_split_into_labels_and_system(self):
        better = dict(rag_eval.read_run(RUN))
        better["q2"] = ["sla-uptime#1"] + better["q2"]  # q2 now finds its one relevant document at rank 1
        better_path = os.path.join(self.tmp, "better.json")
        with open(better_path, "w", encoding="utf-8") as f:
            json.dump(better, f)
        code, out, err = main([self.new_path, better_path, "--baseline-run", RUN, "--baseline-qrels", QRELS,
                               "--allow-partial-run"])
        self.assertEqual(code, 0, err)
        split = json.loads(out)["gate"]["delta_split"]
        # mrr@5 of the old run: old judgments (q1 1/2, q2 0, q3 1) / 3 = 0.5;
        # new judgments (q1 1/2, q2 0, q3 1, q5 0) / 4 = 0.375; the better run adds q2's 1: 1.5 + 1 = 2.5 / 4.
        self.assertAlmostEqual(split["mrr@5"]["labels"], 0.375 - 0.5)
        self.assertAlmostEqual(split["mrr@5"]["system"], 2.5 / 4 - 0.375)
        self.assertAlmostEqual(split["mrr@5"]["total"], 2.5 / 4 - 0.5)
        for metric, part in split.items():
            self.assertAlmostEqual(part["total"], part["labels"] + part["system"], places=12)
        self.assertIn("label_changes", json.loads(out)["gate"])

    def test_comparing_several_runs_says_the_split_and_the_family_in_the_digits_asked(self):
        code, out, err = main([self.new_path, f"a={RUN}", f"b={RUN}", "--baseline-run", RUN, "--baseline-qrels",
                               QRELS, "--allow-partial-run", "--measures", "mrr", "--format", "table", "--digits", "2"])
        self.assertEqual(code, 0, err)
        # mrr@5 moved by the labels alone: 0.375 - 0.5 (test_delta_split_into_labels_and_system)
        self.assertIn("delta = labels + system: mrr@5 -0.12 = -0.12 + +0.00", out.splitlines())
        self.assertIn("p adjusted over 2 comparisons: maxt over the 1 metric of each candidate, times the 2 candidates;",
                      out)
        code, out, err = main([self.new_path, f"a={RUN}", f"b={RUN}", "--allow-partial-run", "--measures", "mrr",
                               "--format", "table"])
        self.assertEqual(code, 0, err)
        self.assertIn("p adjusted over 1 comparison: maxt over the 1 metric of each candidate, times the 1 candidate;", out)

    def test_baseline_qrels_needs_a_baseline_run(self):
        for argv, words in (([self.new_path, RUN, "--baseline-qrels", QRELS], "goes with --baseline-run"),
                            ([self.new_path, RUN, "--baseline-run", "-", "--baseline-qrels", QRELS], "neither can be -")):
            with self.subTest(words=words):
                code, out, err = main(argv)
                self.assertEqual((code, out), (2, ""))
                self.assertIn(words, err)


class TestOneDrawPerMetric(Workload, unittest.TestCase):
    """Kills: sharing one draw changing any number.  Every pair with the reference gets exactly what the
    gate of that run against the reference gives it (its family's draw, seeded rag_eval:SEED:family);
    every other pair against the best what compare_paired gives it alone (seeded by the metric's name)."""

    QUERIES = 60

    def test_every_pair_as_the_gate_or_compare_paired_alone(self):
        paths = [self.ranked(f"r{i}", share, i) for i, share in enumerate((0.5, 0.7, 0.72, 0.3, 0.71))]
        results = [(f"r{i}", rag_eval.evaluate(self.qrels, rag_eval.read_run(path), [3, 5]))
                   for i, path in enumerate(paths)]
        found = rag_eval.compare_runs(results, resamples=300, seed=4)
        scores = {name: rag_eval._per_query_by_metric(result) for name, result in results}
        reference = rag_eval.Baseline(results[0][1]["mean"], scores["r0"])
        settings = rag_eval.GateSettings(rule="significant", resamples=300, seed=4, runs=4)
        gates = {name: rag_eval.gate(result, reference, settings)["metrics"] for name, result in results[1:]}
        sampled = 0
        for metric, table in found["metrics"].items():
            best = table["best"]
            for name, entry in table["runs"].items():
                with self.subTest(metric=metric, run=name):
                    if name != "r0":
                        gated = gates[name][metric]
                        self.assertEqual((entry["p_value"], entry["p_adjusted"], entry["exact"]),
                                         (gated["p_value"], gated["p_adjusted"], gated["exact"]))
                        sampled += not gated["exact"]
                    if name != best and "r0" not in (name, best):
                        alone = rag_eval.compare_paired(metric, scores[best][metric], scores[name][metric],
                                                        resamples=300, seed=4)
                        self.assertEqual(entry["p_vs_best"], alone.p_value)
        self.assertGreater(sampled, 3)  # the shared draw was really used, not only exact tests


class TestTheBestAndTheIndistinguishable(unittest.TestCase):
    """The best run has the highest mean, the first given of equal means; a run is indistinguishable
    from it when its adjusted p is at least alpha: p = alpha counts.

    In test_p_equal_to_alpha, four queries, one relevant document each; the reference finds it at rank 1 every time, the
    candidate misses it on three: success@1 deltas -1, -1, -1, 0, so the exact sign test gives
    p = 2 * (1/2)**3 = 0.25, and Holm over a family of one leaves it 0.25."""

    def test_p_equal_to_alpha(self):
        qrels = {f"q{i}": {"rel": 1} for i in range(4)}
        reference = {q: ["rel"] for q in qrels}
        candidate = {q: (["rel"] if q == "q3" else ["x"]) for q in qrels}
        results = [(name, rag_eval.evaluate(qrels, run, 1, measures=["success"]))
                   for name, run in (("ref", reference), ("cand", candidate))]
        for alpha, mark in ((0.25, "indistinguishable"), (0.3, "")):
            with self.subTest(alpha=alpha):
                entry = rag_eval.compare_runs(results, alpha=alpha)["metrics"]["success@1"]
                self.assertEqual(entry["best"], "ref")
                run = entry["runs"]["cand"]
                self.assertEqual((run["p_vs_best"], run["p_vs_best_adjusted"]), (0.25, 0.25))
                self.assertEqual(run["mark"], mark)


    def test_of_equal_means_the_first_given_is_the_best(self):
        # success@1: ref finds q1's document, other q2's; both means 1/2, and third is ref again
        qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
        runs = (("ref", {"q1": ["a"], "q2": ["x"]}), ("other", {"q1": ["x"], "q2": ["b"]}), ("third", {"q1": ["a"], "q2": ["x"]}))
        results = [(name, rag_eval.evaluate(qrels, run, 1, measures=["success"])) for name, run in runs]
        for given in (results, [results[1], results[0], results[2]]):
            with self.subTest(order=[name for name, _ in given]):
                self.assertEqual(rag_eval.compare_runs(given)["metrics"]["success@1"]["best"], given[0][0])


if __name__ == "__main__":
    unittest.main()
