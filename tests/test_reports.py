"""Reporting: every output format (json, table, markdown, csv, GitHub, JUnit),
slices, abstention, the document level, the labelling worklist, --explain,
notes and warnings, and ids that must stay on their line.
"""

import csv
import hashlib
import io
import json
import math
import os
import platform
import re
import tempfile
import unittest
from unittest import mock
from xml.etree import ElementTree

import rag_eval
from tests import helpers
from tests.helpers import BASELINE, QRELS, RUN, assert_error_line, run_main, tagged_lines, TempDirMixin


class TestQuiet(unittest.TestCase):
    ARGV = ["fixtures/qrels.json", "fixtures/run.json"]

    def test_a_pass_prints_each_warning_once_and_short(self):
        code, _, err = run_main(self.ARGV + ["--k", "1,3,5,10"])
        self.assertEqual(code, rag_eval.EXIT_OK)
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, err)  # one judged@k warning for the four cutoffs
        self.assertTrue(lines[0].startswith("rag_eval: warning: ") and " (judged@1 0.33, " in lines[0], lines[0])
        self.assertLess(len(lines[0]), 160)

    def test_quiet_keeps_only_regressions(self):
        code, _, err = run_main(self.ARGV + ["--baseline", "baseline.json", "--quiet"])
        self.assertEqual(code, rag_eval.EXIT_REGRESSION)
        self.assertEqual(err.splitlines(), ["REGRESSION mrr@5: baseline 0.5500, now 0.5000",
                                            "REGRESSION recall@5: baseline 0.7000, now 0.6667"])

    def test_quiet_keeps_errors(self):
        code, _, err = run_main(["fixtures/qrels.json", "missing.json", "--quiet"])
        self.assertEqual(code, rag_eval.EXIT_ERROR)
        assert_error_line(self, err, file="missing.json")

    def test_a_rule_not_in_force_is_only_in_the_full_report(self):
        # Under --gate drop the paired bounds decide nothing: a tolerance finer than the comparison resolves is
        # a note in --output only; under --gate significant a warning, the first line on stderr.
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
            self.assertNotIn("finer", err)
            with open(output) as f:
                notes = json.load(f)["notes"]
            self.assertTrue(any(note.startswith("note: the tolerance is finer") for note in notes), notes)
            code, _, err = run_main(["fixtures/qrels.json", run, "--baseline", saved, "--gate", "significant"])
            self.assertTrue(err.startswith("rag_eval: warning: the tolerance is finer than this comparison resolves"),
                            err)

    def test_the_table_says_what_the_rule_reads(self):
        # Kills: p-values and intervals beside a verdict they play no part in, unlabelled (issue 31 item 6).
        import tempfile, os
        with tempfile.TemporaryDirectory() as tmp:
            saved = os.path.join(tmp, "saved.json")
            run_main(self.ARGV + ["--save-baseline", saved])
            for rule, caption in (("drop", "rule 'drop' reads the means alone: delta low/high and p (adj.; against "
                                           "no change, maxt over 4 tests) are information it does not use"),
                                  ("significant", "delta low: the 95% bound a pass reads; delta high: the bound a "
                                                  "regression reads, adjusted over 4 tests; p (adj.; against no "
                                                  "change, maxt over 4 tests) is not read by the rule")):
                for fmt in ("table", "markdown"):
                    with self.subTest(rule=rule, format=fmt):
                        _, out, _ = run_main(self.ARGV + ["--baseline", saved, "--gate", rule, "--format", fmt])
                        self.assertIn("\n\n" + caption + "\n", out)
            _, out, _ = run_main(self.ARGV + ["--format", "table"])
            self.assertNotIn("reads", out)  # no gate, no caption


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
        assert_error_line(self, err, file=run, names=[" 1 ", " 3 ", "--allow-partial-run"], quoted=["q2"])

    def test_allowed_it_is_scored_and_the_count_reported_everywhere(self):
        run = self.write("one.trec", "q1 Q0 refund-policy#2 1 18.1 x\n")
        code, out, err = run_main(["fixtures/qrels.json", run, "--allow-partial-run"])
        self.assertEqual(code, rag_eval.EXIT_OK, err)
        self.assertEqual(json.loads(out)["missing"], ["q2", "q3"])
        (warning,) = [line for line in tagged_lines(err, "warning") if "'q2'" in line]
        self.assertRegex(warning, r" 2 \D* 3 \D*'q2'")
        code, out, err = run_main(["fixtures/qrels.json", run, "--allow-partial-run", "--format", "table"])
        self.assertTrue(out.startswith("UNGATED (no baseline or floor), 3 queries scored (the run has no results for 2)\n"), out)

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


class TestReporting(unittest.TestCase):
    def test_quick_start_json(self):
        code, out, err = run_main([QRELS, RUN])
        self.assertEqual(code, 0, err)
        pairs = []
        report = json.loads(out, object_pairs_hook=lambda p: (pairs.append([k for k, _ in p]), dict(p))[1])
        for keys in pairs:  # every object, nested ones included
            self.assertEqual(keys, sorted(keys))
        self.assertEqual(report["mean"], rag_eval.evaluate(rag_eval.read_qrels(QRELS), rag_eval.read_run(RUN), 5)["mean"])
        self.assertEqual((report["mean"]["recall@5"], report["mean"]["mrr@5"]), (2 / 3, 0.5))
        self.assertEqual(report["unscored"], ["q4"])
        self.assertEqual(report["queries"], 3)
        self.assertEqual(report["k"], 5)
        for line in err.splitlines():
            self.assertTrue(line.startswith(("rag_eval: warning:", "rag_eval: note:")), line)

    def test_quick_start_with_baseline(self):
        code, out, err = run_main([QRELS, RUN, "--baseline", BASELINE])
        self.assertEqual(code, rag_eval.EXIT_REGRESSION)
        self.assertEqual(json.loads(out)["mean"]["mrr@5"], 0.5)
        lines = err.splitlines()
        self.assertEqual([line for line in lines if line.startswith("REGRESSION")], [
            "REGRESSION mrr@5: baseline 0.5500, now 0.5000",
            "REGRESSION recall@5: baseline 0.7000, now 0.6667",
        ])
        for line in lines:
            self.assertTrue(line.startswith(("REGRESSION ", "rag_eval: warning:", "rag_eval: note:")), line)

    def test_missing_metric_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "baseline.json")
            with open(path, "w") as f:
                json.dump({"iou@10": 0.4, "ndcg@5": 0.5}, f)  # iou: a measure of evidence spans only
            code, out, err = run_main([QRELS, RUN, "--baseline", path])
        self.assertEqual(code, 1)
        self.assertIn("REGRESSION iou@10: baseline 0.4000, now missing", err.splitlines())
        self.assertNotIn("ndcg@5", "".join(line for line in err.splitlines() if line.startswith("REGRESSION")))

    def test_max_drop_option(self):
        # mrr fell 0.05 and recall 0.0333: a tolerance of 0.05 lets both pass
        code, out, err = run_main([QRELS, RUN, "--baseline", BASELINE, "--max-drop", "0.05"])
        self.assertEqual(code, 0, err)
        code, out, err = run_main([QRELS, RUN, "--baseline", BASELINE, "--max-drop", "0.04"])
        self.assertEqual(code, 1, err)
        self.assertEqual([line for line in err.splitlines() if line.startswith("REGRESSION")],
                         ["REGRESSION mrr@5: baseline 0.5500, now 0.5000"])

    def test_digits(self):
        code, out, err = run_main([QRELS, RUN, "--digits", "2"])
        self.assertEqual(code, 0, err)
        self.assertAlmostEqual(json.loads(out)["mean"]["ndcg@5"], 0.509469461838203, places=15)  # JSON stays exact
        code, out, err = run_main([QRELS, RUN, "--digits", "2", "--format", "table"])
        self.assertIn("ndcg@5     0.51\n", out)


R = "200"  # resamples for --ci and paired gates: small, so the suite stays fast


TOOLS = ("trec_eval", "ir_measures", "ranx", "BEIR", "MTEB")


# === The fixtures, k = 5, worked by hand ===
# q1 grades: refund-policy#2 = 2 (rank 2), refund-policy#3 = 1 (rank 4)
# q2 grades: sla-uptime#1 = 2, never retrieved
# q3 grades: sso-setup#5 = 2 (rank 1), okta-guide#1 = 1 (rank 2), sso-setup#4 = 2 (rank 5)
# q4 grades: pricing#3 = 0 only -> unscored; the run answers it (5 documents): not abstained
Q1_NDCG5 = (3 / math.log2(3) + 1 / math.log2(5)) / (3 + 1 / math.log2(3))


Q3_NDCG5 = (3 + 1 / math.log2(3) + 3 / math.log2(6)) / (3 + 3 / math.log2(3) + 1 / math.log2(4))


FIXTURE_PER_QUERY = {  # qid -> metric -> value
    "q1": {"mrr@5": 1 / 2, "ndcg@5": Q1_NDCG5, "recall@5": 2 / 2, "success@5": 1.0},
    "q2": {"mrr@5": 0.0, "ndcg@5": 0.0, "recall@5": 0 / 1, "success@5": 0.0},
    "q3": {"mrr@5": 1 / 1, "ndcg@5": Q3_NDCG5, "recall@5": 3 / 3, "success@5": 1.0},
}


METRICS = ("mrr@5", "ndcg@5", "recall@5", "success@5")


SHOWN = ("recall@5", "success@5", "mrr@5", "ndcg@5")  # the human formats list metrics in the measure table's order


FIXTURE_MEANS = {m: sum(FIXTURE_PER_QUERY[q][m] for q in FIXTURE_PER_QUERY) / 3 for m in METRICS}


# The shipped baseline: {"recall@5": 0.70, "success@5": 0.6667, "mrr@5": 0.55, "ndcg@5": 0.52}
SHIPPED = {"recall@5": 0.70, "success@5": 0.6667, "mrr@5": 0.55, "ndcg@5": 0.52}


# Falls: mrr 0.55 - 1/2 = 0.05 and recall 0.70 - 2/3 = 0.0333 exceed 0.02 (regressions);
# ndcg 0.52 - 0.5095 = 0.0105 and success 0.6667 - 2/3 = 0.00003 do not.
FIXTURE_VERDICTS = {"mrr@5": "regression", "ndcg@5": "pass", "recall@5": "regression", "success@5": "pass"}


# judged@5: q1 2 of 5 (refund-policy#2, #3), q2 0 of 5, q3 3 of 5 -> (2 + 0 + 3) / 15 = 0.33 < 0.5: a warning
FIXTURE_JUDGED5 = (2 + 0 + 3) / 15


# === Slices: six queries, binary grades (gain 1) ===
# Tags: p1 pricing; p2 pricing AND billing; g1, g2 general; g3 untagged; u1 pricing but unanswerable.
SLICE_QRELS = {
    "p1": {"a": 1, "b": 1},
    "p2": {"c": 1},
    "g1": {"d": 1},
    "g2": {"e": 1},
    "g3": {"f": 1},
    "u1": {"z": 0},
}


SLICES = {"p1": "pricing", "p2": ["pricing", "billing"], "g1": "general", "g2": ["general"], "u1": "pricing"}


# The old run finds c (p2) and misses f (g3); the new run the opposite: the overall recall stays 4/5,
# the pricing slice falls from (1 + 1)/2 to (1 + 0)/2.
OLD_RUN = {"p1": ["a", "x", "b"], "p2": ["y", "c"], "g1": ["d"], "g2": ["w", "v", "e"], "g3": [], "u1": ["z"]}


NEW_RUN = {"p1": ["a", "x", "b"], "p2": ["y"], "g1": ["d"], "g2": ["w", "v", "e"], "g3": ["f"], "u1": ["z"]}


NEW_PER_QUERY = {
    # p1: a at 1, b at 3 (of a, b); DCG 1 + 1/log2 4, ideal 1 + 1/log2 3
    "p1": {"recall@5": 2 / 2, "success@5": 1.0, "mrr@5": 1 / 1, "ndcg@5": (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))},
    "p2": {"recall@5": 0 / 1, "success@5": 0.0, "mrr@5": 0.0, "ndcg@5": 0.0},  # c not retrieved
    "g1": {"recall@5": 1 / 1, "success@5": 1.0, "mrr@5": 1 / 1, "ndcg@5": 1.0},  # d at 1
    "g2": {"recall@5": 1 / 1, "success@5": 1.0, "mrr@5": 1 / 3, "ndcg@5": (1 / math.log2(4)) / 1},  # e at 3
    "g3": {"recall@5": 1 / 1, "success@5": 1.0, "mrr@5": 1 / 1, "ndcg@5": 1.0},  # f at 1
}


SLICE_MEMBERS = {"billing": ["p2"], "general": ["g1", "g2"], "pricing": ["p1", "p2"]}  # u1 is not scored


# === Abstention: one answerable query and five unanswerable ones (all grades 0) ===
ABSTAIN_QRELS = {"s1": {"a": 1}, "u1": {"z": 0}, "u2": {"z": 0}, "u3": {"z": 0}, "u4": {"z": 0}, "u5": {"z": 0}}


ABSTAIN_RUN = {
    "s1": {"a": 0.9},
    # u1: no entry at all                              -> abstained
    "u2": [],                                          # empty ranking -> abstained
    "u3": {"m": 0.1, "n": 0.2},                        # best 0.2 < 0.5 -> abstained with --abstain-below 0.5
    "u4": {"m": 0.7, "n": 0.1},                        # 0.7 >= 0.5 -> answered
    "u5": {"m": 0.5},                                  # exactly 0.5 is "at or above" -> answered
}


def shown(value, digits=4):
    """How a report prints a number: fixed decimals, and never '-0.0000'."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def aligned_rows(block):
    """Parse an aligned plain-text table, checking that every column starts at
    the same offset on every line; return the rows of cells.

    Cells are separated by two spaces or more, so 'allowed drop' is one cell.
    """
    lines = block.split("\n")
    parsed = [[(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", line)] for line in lines]
    columns = len(parsed[0])
    for line, row in zip(lines, parsed):
        if len(row) != columns:
            raise AssertionError(f"{len(row)} cells, header has {columns}: {line!r}")
        offsets = [start for start, _ in row]
        expected = [start for start, _ in parsed[0]]
        if offsets != expected:
            raise AssertionError(f"columns start at {offsets}, header at {expected}: {line!r}")
    return [[cell for _, cell in row] for row in parsed]


def table_blocks(text):
    """The parts of a --format table report, separated by blank lines."""
    return text.rstrip("\n").split("\n\n")


def markdown_tables(text):
    """Every pipe table of a markdown text, as lists of rows of (unescaped) cells, each
    code span shown as its text (ids and other input text are code spans).

    Checks the GitHub-flavoured shape: a header row, a separator row of
    ``---`` cells, the same number of cells on every row.
    """
    tables, current = [], []
    for line in text.split("\n") + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    parsed = []
    for lines in tables:
        if len(lines) < 2:
            raise AssertionError(f"a table without a separator row: {lines}")

        def cells(line):
            if not (line.startswith("|") and line.endswith("|")):
                raise AssertionError(f"not a pipe-table row: {line!r}")
            parts = re.split(r"(?<!\\)\|", line)[1:-1]
            return [re.sub(r"(`+) ?(.*?) ?\1", r"\2", part.strip().replace("\\|", "|")) for part in parts]

        header = cells(lines[0])
        separator = cells(lines[1])
        if not all(re.fullmatch(r":?-{3,}:?", cell) for cell in separator) or len(separator) != len(header):
            raise AssertionError(f"bad separator row {lines[1]!r} under {lines[0]!r}")
        rows = [cells(line) for line in lines[2:]]
        for row in rows:
            if len(row) != len(header):
                raise AssertionError(f"{len(row)} cells, header has {len(header)}: {row}")
        parsed.append([header] + rows)
    return parsed


def by_first_cell(rows):
    """{first cell: {header: cell}} for the data rows of a parsed table."""
    header = rows[0]
    return {row[0]: dict(zip(header, row)) for row in rows[1:]}


class ReportCase(helpers.TempDirMixin):
    def ok(self, argv, expected_code=0, env=None):
        """Run; check the exit code and that stderr holds only notes, warnings and REGRESSION lines."""
        code, out, err = run_main(argv, env)
        self.assertEqual(code, expected_code, err)
        for line in err.splitlines():
            self.assertTrue(line.startswith(("REGRESSION ", "rag_eval: note:", "rag_eval: warning:", "::")), line)
        return out, err

    def trec_run(self, name, run):
        """A TREC run file of a JSON ranked run: scores fall with the rank."""
        lines = [f"{qid} Q0 {docid} {rank} {100 - rank} tag\n"
                 for qid, ranking in run.items() for rank, docid in enumerate(ranking, 1)]
        return self.write(name, "".join(lines))

    def slice_files(self):
        return (self.write("qrels.json", SLICE_QRELS), self.write("old.json", OLD_RUN),
                self.write("new.json", NEW_RUN), self.write("slices.json", SLICES))


class TestJsonFormat(ReportCase, unittest.TestCase):
    def test_default_is_json_with_spec_keys_sorted(self):
        out, _ = self.ok([QRELS, RUN])
        pairs = []
        report = json.loads(out, object_pairs_hook=lambda p: (pairs.append([k for k, _ in p]), dict(p))[1])
        for keys in pairs:  # every object, nested ones included
            self.assertEqual(keys, sorted(keys))
        self.assertEqual(report["mean"].keys(), FIXTURE_MEANS.keys())
        for metric, value in FIXTURE_MEANS.items():
            self.assertAlmostEqual(report["mean"][metric], value, places=4)  # FIXTURE_MEANS has nDCG to 5 decimals
        self.assertEqual(report["mean"]["recall@5"], 2 / 3)  # exact: no rounding in JSON
        self.assertEqual(report["unscored"], ["q4"])
        self.assertNotIn("per_query", report)
        self.assertNotIn("gate", report)
        explicit, _ = self.ok([QRELS, RUN, "--format", "json"])
        self.assertEqual(explicit, out)

    def test_means_equal_evaluate_exactly(self):
        # JSON is the machine format: its means are evaluate()'s floats, whatever --digits says.
        result = rag_eval.evaluate(rag_eval.read_qrels(QRELS), rag_eval.read_run(RUN), 5)
        for digits in ("2", "4", "6"):
            with self.subTest(digits=digits):
                out, _ = self.ok([QRELS, RUN, "--digits", digits])
                self.assertEqual(json.loads(out)["mean"], result["mean"])

    def test_per_query(self):
        out, _ = self.ok([QRELS, RUN, "--per-query"])
        report = json.loads(out)
        self.assertEqual(sorted(report["per_query"]), ["q1", "q2", "q3"])  # q4 is unscored
        for qid, values in FIXTURE_PER_QUERY.items():
            self.assertEqual(sorted(report["per_query"][qid]), sorted(values))
            for metric, value in values.items():
                self.assertAlmostEqual(report["per_query"][qid][metric], value, places=12)

    def test_with_baseline(self):
        out, _ = self.ok([QRELS, RUN, "--baseline", BASELINE], expected_code=1)
        gate = json.loads(out)["gate"]
        self.assertFalse(gate["passed"])
        self.assertEqual({m: e["verdict"] for m, e in gate["metrics"].items()}, FIXTURE_VERDICTS)
        for metric, was in SHIPPED.items():
            entry = gate["metrics"][metric]
            self.assertEqual(entry["baseline"], was)
            self.assertAlmostEqual(entry["now"], FIXTURE_MEANS[metric], places=12)
            self.assertAlmostEqual(entry["delta"], FIXTURE_MEANS[metric] - was, places=12)

    def test_ci_intervals(self):
        out, _ = self.ok([QRELS, RUN, "--ci", "--resamples", R])
        intervals = json.loads(out)["intervals"]
        self.assertEqual(sorted(intervals), list(METRICS))
        # success@5 is 0/1, 2 hits of 3: Clopper-Pearson.  High: P(X <= 2 | p) = 1 - p**3 = 0.025.
        # Low: P(X >= 2 | p) = 3 p**2 (1 - p) + p**3 = 0.025, solved by bisection.
        low, high = 0.0, 1.0
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if 3 * mid**2 - 2 * mid**3 < 0.025 else (low, mid)
        self.assertAlmostEqual(intervals["success@5"][0], low, places=9)  # 0.0943
        self.assertAlmostEqual(intervals["success@5"][1], 0.975 ** (1 / 3), places=9)  # 0.9916
        for metric in METRICS:
            lo, hi = intervals[metric]
            self.assertLessEqual(lo, round(FIXTURE_MEANS[metric], 4))
            self.assertGreaterEqual(hi, round(FIXTURE_MEANS[metric], 4))


class TestTableFormat(ReportCase, unittest.TestCase):
    def test_without_baseline(self):
        out, _ = self.ok([QRELS, RUN, "--format", "table"])
        blocks = table_blocks(out)
        self.assertEqual(blocks[0], "UNGATED (no baseline or floor), 3 queries scored")
        rows = aligned_rows(blocks[1])
        self.assertEqual(rows[0], ["metric", "mean"])
        self.assertEqual(rows[1:], [[m, shown(FIXTURE_MEANS[m])] for m in SHOWN])
        # recall 2/3 -> 0.6667; success 2/3; mrr (1/2 + 0 + 1) / 3 = 0.5; ndcg -> 0.5095
        self.assertEqual([row[1] for row in rows[1:]], ["0.6667", "0.6667", "0.5000", "0.5095"])
        # q4 is the one unanswerable query and the run answered it
        self.assertIn("abstention: 0 of 1 unanswerable queries got no answer (0%)", blocks)

    def test_with_baseline(self):
        out, _ = self.ok([QRELS, RUN, "--baseline", BASELINE, "--format", "table"], expected_code=1)
        blocks = table_blocks(out)
        self.assertEqual(blocks[0], "FAIL (2: recall@5, mrr@5), rule 'drop', 3 queries scored")
        rows = aligned_rows(blocks[1])
        self.assertEqual(rows[0], ["metric", "mean", "baseline", "delta", "allowed drop", "p (adj.)", "verdict"])  # a flat baseline: no paired columns
        table = by_first_cell(rows)
        self.assertEqual(sorted(table), list(METRICS))
        for metric in METRICS:
            with self.subTest(metric=metric):
                self.assertEqual(table[metric]["mean"], shown(FIXTURE_MEANS[metric]))
                self.assertEqual(table[metric]["baseline"], shown(SHIPPED[metric]))
                self.assertEqual(table[metric]["delta"], shown(FIXTURE_MEANS[metric] - SHIPPED[metric]))
                self.assertEqual(table[metric]["allowed drop"], "0.0200")
                self.assertEqual(table[metric]["p (adj.)"], "-")  # a flat baseline: no pairs, no test
                self.assertEqual(table[metric]["verdict"], FIXTURE_VERDICTS[metric])
        self.assertEqual(table["mrr@5"]["delta"], "-0.0500")  # 1/2 - 0.55
        self.assertEqual(table["success@5"]["delta"], "0.0000")  # 2/3 - 0.6667 = -0.00003: no '-0.0000'

    def test_passing_headline(self):
        out, _ = self.ok([QRELS, RUN, "--baseline", BASELINE, "--max-drop", "0.05", "--format", "table"])
        self.assertEqual(table_blocks(out)[0], "PASS, rule 'drop', 3 queries scored")

    def test_per_query(self):
        out, _ = self.ok([QRELS, RUN, "--format", "table", "--per-query"])
        per_query = [aligned_rows(block) for block in table_blocks(out) if block.startswith("query")]
        self.assertEqual(len(per_query), 1, out)
        rows = per_query[0]
        self.assertEqual(rows[0], ["query"] + list(SHOWN))
        self.assertEqual(rows[1:], [[qid] + [shown(FIXTURE_PER_QUERY[qid][m]) for m in SHOWN]
                                    for qid in ("q1", "q2", "q3")])
        self.assertEqual(rows[1][4], "0.6399")  # q1 nDCG (3/log2 3 + 1/log2 5) / (3 + 1/log2 3)

    def test_ci_columns(self):
        out, _ = self.ok([QRELS, RUN, "--baseline", BASELINE, "--format", "table", "--ci", "--resamples", R],
                         expected_code=1)
        rows = aligned_rows(table_blocks(out)[1])
        self.assertEqual(rows[0], ["metric", "mean", "95% low", "95% high", "baseline", "delta", "allowed drop",
                                   "p (adj.)", "verdict"])
        result = rag_eval.evaluate(rag_eval.read_qrels(QRELS), rag_eval.read_run(RUN), 5)
        intervals = rag_eval._mean_intervals(result, int(R), 0)
        table = by_first_cell(rows)
        for metric in METRICS:
            self.assertEqual(table[metric]["95% low"], shown(intervals[metric].low))
            self.assertEqual(table[metric]["95% high"], shown(intervals[metric].high))
        self.assertEqual((table["success@5"]["95% low"], table["success@5"]["95% high"]), ("0.0943", "0.9916"))

    def test_digits(self):
        out, _ = self.ok([QRELS, RUN, "--format", "table", "--digits", "2"])
        rows = aligned_rows(table_blocks(out)[1])
        self.assertEqual([row[1] for row in rows[1:]], ["0.67", "0.67", "0.50", "0.51"])  # recall, success, mrr, ndcg

    def test_headline_names_every_failed_metric(self):
        """A passing floor on a metric never hides that metric's regression from the headline.

        Guards a fixed bug: _verdict_line merged gate["metrics"] and gate["floors"]
        into one dict keyed by metric, so the floor's "pass" overwrote recall@5's
        "regression": rag_eval.py fixtures/qrels.json fixtures/run.json --baseline
        baseline.json --min recall@5=0.5 --format table printed "FAIL (1: mrr@5),
        ..." although recall@5 regressed (the table row said so, and exit 1 was right).
        """
        # recall@5 = 2/3 >= floor 0.5 (passes) but fell 0.0333 > 0.02 below the baseline (regression)
        argv = [QRELS, RUN, "--baseline", BASELINE, "--min", "recall@5=0.5"]
        for fmt, prefix in (("table", ""), ("markdown", "### rag_eval: ")):
            with self.subTest(format=fmt):
                out, _ = self.ok(argv + ["--format", fmt], expected_code=1)
                headline = out.split("\n", 1)[0]
                match = re.fullmatch(re.escape(prefix) + r"FAIL \((\d+): ([^)]*)\), .*", headline)
                self.assertIsNotNone(match, headline)
                self.assertEqual(match.group(2).split(", "), ["recall@5", "mrr@5"], headline)
                self.assertEqual(match.group(1), "2", headline)

    def test_verdict_cell_says_a_failure_first_and_alone(self):
        """A metric with a floor: the cell names what failed (the tolerance or the floor) and only that;
        when nothing failed it says both verdicts."""
        # recall 2/3 fell 0.0333 > 0.02 (regression), floor 0.5 met; ndcg 0.5095 fell 0.0105 (pass), floor 0.6 not
        # met; success 2/3 fell 0.00003 (pass), floor 0.5 met; mrr 1/2 fell 0.05 (regression), no floor
        argv = [QRELS, RUN, "--baseline", BASELINE, "--format", "table",
                "--min", "recall@5=0.5", "--min", "ndcg@5=0.6", "--min", "success@5=0.5"]
        out, _ = self.ok(argv, expected_code=1)
        table = by_first_cell(aligned_rows(table_blocks(out)[1]))
        self.assertEqual({metric: table[metric]["verdict"] for metric in METRICS},
                         {"recall@5": "regression", "ndcg@5": "below floor 0.6", "success@5": "pass; floor met",
                          "mrr@5": "regression"})

    def test_drop_lines_count_hits_turned_to_misses(self):
        qrels = self.write("q.json", {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}})
        baseline = self.path("base.json")
        self.ok([qrels, self.write("old.json", {"q1": ["a"], "q2": ["b"], "q3": ["c"]}), "--save-baseline", baseline,
                 "--measures", "success,mrr"])
        argv = ["--baseline", baseline, "--measures", "success,mrr", "--format", "table"]
        # q1 loses its one relevant document: success and mrr 1 -> 0, a hit turned miss; q3's falls from rank 1 to 2:
        # mrr 1 -> 1/2, still a hit
        out, _ = self.ok([qrels, self.write("new.json", {"q1": ["z"], "q2": ["b"], "q3": ["x", "c"]})] + argv, 1)
        self.assertEqual(table_blocks(out)[3].splitlines(), [
            "success@5: 1 query worse, 0 better; largest drops q1 (-1.0000); hit to miss: 1",
            "mrr@5: 2 queries worse, 0 better; largest drops q1 (-1.0000), q3 (-0.5000); hit to miss: 1"])
        out, _ = self.ok([qrels, self.write("new.json", {"q1": ["a"], "q2": ["b"], "q3": ["x", "c"]})] + argv, 1)
        self.assertEqual(table_blocks(out)[3].splitlines(), ["mrr@5: 1 query worse, 0 better; largest drops q3 (-0.5000)"])


class TestMarkdownFormat(ReportCase, unittest.TestCase):
    def test_without_baseline(self):
        out, _ = self.ok([QRELS, RUN, "--format", "markdown"])
        self.assertEqual(out.split("\n", 1)[0], "### rag_eval: UNGATED (no baseline or floor), 3 queries scored")
        tables = markdown_tables(out)
        self.assertEqual(len(tables), 1)
        self.assertEqual(tables[0], [["metric", "mean"]] + [[m, shown(FIXTURE_MEANS[m])] for m in SHOWN])
        self.assertIn("Abstention: 0 of 1 unanswerable queries got no answer (0%)", out.rstrip("\n").split("\n\n"))

    def test_with_baseline(self):
        out, _ = self.ok([QRELS, RUN, "--baseline", BASELINE, "--format", "markdown"], expected_code=1)
        self.assertEqual(out.split("\n", 1)[0], "### rag_eval: FAIL (2: recall@5, mrr@5), rule 'drop', 3 queries scored")
        (rows,) = markdown_tables(out)
        self.assertEqual(rows[0], ["metric", "mean", "baseline", "delta", "allowed drop", "p (adj.)", "verdict"])  # a flat baseline: no paired columns
        table = by_first_cell(rows)
        for metric in METRICS:
            self.assertEqual(table[metric]["mean"], shown(FIXTURE_MEANS[metric]))
            self.assertEqual(table[metric]["delta"], shown(FIXTURE_MEANS[metric] - SHIPPED[metric]))
            self.assertEqual(table[metric]["verdict"], FIXTURE_VERDICTS[metric])

    def test_per_query_and_ci(self):
        out, _ = self.ok([QRELS, RUN, "--format", "markdown", "--per-query", "--ci", "--resamples", R])
        tables = markdown_tables(out)
        self.assertEqual(len(tables), 2)
        self.assertEqual(tables[0][0], ["metric", "mean", "95% low", "95% high"])
        self.assertEqual(by_first_cell(tables[0])["success@5"]["95% low"], "0.0943")
        self.assertEqual(tables[1], [["query"] + list(SHOWN)] + [
            [qid] + [shown(FIXTURE_PER_QUERY[qid][m]) for m in SHOWN] for qid in ("q1", "q2", "q3")])
        self.assertIn("<details><summary>Per query</summary>", out)
        self.assertIn("</details>", out)

    def test_pipe_in_a_cell_is_escaped(self):
        slices = self.write("slices.json", {"q1": "ops|sre", "q3": "ops|sre"})
        out, _ = self.ok([QRELS, RUN, "--format", "markdown", "--slices", slices])
        tables = markdown_tables(out)  # checks every row has the header's cell count
        self.assertEqual(tables[1][0], ["slice", "queries"] + list(SHOWN))
        # recall of q1 and q3: (1 + 1) / 2
        self.assertEqual(tables[1][1][:2], ["ops|sre", "2"])
        self.assertEqual(by_first_cell(tables[1])["ops|sre"]["recall@5"], "1.0000")


class TestCsvFormat(ReportCase, unittest.TestCase):
    def rows(self, argv, expected_code=0):
        out, _ = self.ok(argv + ["--format", "csv"], expected_code)
        return list(csv.reader(io.StringIO(out)))

    def test_one_row_per_metric(self):
        result = rag_eval.evaluate(rag_eval.read_qrels(QRELS), rag_eval.read_run(RUN), 5)
        rows = self.rows([QRELS, RUN])
        self.assertEqual(rows[0], ["metric", "mean"])
        means = {row[0]: row[1] for row in rows[1:] if row[0] != "abstention"}
        self.assertEqual(means, {m: shown(v) for m, v in result["mean"].items()})
        for metric, text in means.items():
            self.assertAlmostEqual(float(text), result["mean"][metric], delta=0.5e-4)
        self.assertEqual(rows[-1], ["abstention", "0.0000"])  # 0 of 1 unanswerable queries

    def test_with_baseline(self):
        rows = self.rows([QRELS, RUN, "--baseline", BASELINE], expected_code=1)
        self.assertEqual(rows[0], ["metric", "mean", "baseline", "delta", "allowed drop", "p (adj.)", "verdict"])  # a flat baseline: no paired columns
        table = by_first_cell(rows)
        for metric in METRICS:
            self.assertEqual(table[metric]["baseline"], shown(SHIPPED[metric]))
            self.assertEqual(table[metric]["verdict"], FIXTURE_VERDICTS[metric])
            self.assertEqual(table[metric]["p (adj.)"], "")  # missing is empty in csv
        self.assertEqual(rows[-1], ["abstention", "0.0000"] + [""] * 5)  # 5 gate columns (no paired ones), empty
        self.assertEqual({len(row) for row in rows}, {7})  # 2 + 5 gate columns

    def test_per_query_one_row_per_query_and_metric(self):
        result = rag_eval.evaluate(rag_eval.read_qrels(QRELS), rag_eval.read_run(RUN), 5)
        rows = self.rows([QRELS, RUN, "--per-query"])
        self.assertEqual(rows[0], ["query", "metric", "value"])
        scored = {(q, m): v for q, m, v in rows[1:] if m != "abstention"}
        expected = {(q, f"{name}@5"): shown(v) for q, values in result["per_query"].items() for name, v in values.items()}
        self.assertEqual(scored, expected)
        self.assertEqual(len(scored), 3 * 4)  # 3 scored queries x 4 measures
        self.assertEqual([row for row in rows if row[1] == "abstention"], [["q4", "abstention", "0"]])

    def test_ci_columns(self):
        rows = self.rows([QRELS, RUN, "--ci", "--resamples", R])
        self.assertEqual(rows[0], ["metric", "mean", "95% low", "95% high"])
        self.assertEqual(by_first_cell(rows)["success@5"]["95% high"], "0.9916")  # 0.975 ** (1/3)

    def test_slices_are_in_the_csv_report(self):
        """--format csv holds the slices ("every report then adds the means per slice").

        Guards a fixed bug: rag_eval.py QRELS RUN --slices S --format csv printed
        the same rows as without --slices; _format_csv never read report["slices"].
        The test accepts any layout that puts the slice, the metric and the mean in one row.
        """
        slices = self.write("slices.json", {"q1": "billing", "q2": ["billing", "sla"], "q3": "sso"})
        rows = self.rows([QRELS, RUN, "--slices", slices])
        # billing = q1, q2: recall (1 + 0) / 2 = 0.5; sla = q2: 0; sso = q3: mrr 1
        expected = {("billing", "recall@5"): "0.5000", ("sla", "recall@5"): "0.0000", ("sso", "mrr@5"): "1.0000",
                    ("billing", "ndcg@5"): shown(Q1_NDCG5 / 2)}
        for (tag, metric), value in expected.items():
            with self.subTest(slice=tag, metric=metric):
                found = [row for row in rows if value in row
                         and any(cell == tag or cell.startswith(tag + ":") for cell in row)
                         and any(cell == metric or cell.endswith(":" + metric) for cell in row)]
                self.assertTrue(found, f"no row with {tag}, {metric}, {value} in {rows}")


class TestGitHub(ReportCase, unittest.TestCase):
    def test_the_summary_names_no_path_of_the_runner(self):
        # The Action's --output went to the runner's temporary folder, and "wrote /tmp/..." to the summary.
        summary, output = self.write("summary.md", ""), self.path("report.json")
        _, err = self.ok([QRELS, RUN, "--output", output], env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary})
        self.assertIn(f"rag_eval: note: wrote {output}", err.splitlines())  # the log keeps it
        self.assertNotIn(self.path(""), self.read(summary).decode("utf-8"))

    def test_summary_appended_and_annotations(self):
        summary = self.write("summary.md", "")
        env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary}
        markdown, _ = self.ok([QRELS, RUN, "--baseline", BASELINE, "--format", "markdown"], expected_code=1)
        first, err = self.ok([QRELS, RUN, "--baseline", BASELINE], expected_code=1, env=env)
        # the markdown report, what failed right under its verdict line, the notes and warnings last
        heading, _, tables = markdown.partition("\n\n")
        failing = ("- `REGRESSION mrr@5: baseline 0.5500, now 0.5000`\n"  # the log's lines, as code spans
                   "- `REGRESSION recall@5: baseline 0.7000, now 0.6667`")
        written = self.read(summary).decode("utf-8")
        # read in ten seconds (issue 33): a legend, the columns that decide, the gain; every column a click away
        compact = ("| metric | mean | baseline | delta | allowed drop | verdict |\n|---|---|---|---|---|---|\n"
                   "| recall@5 | 0.6667 | 0.7000 | -0.0333 | 0.0200 | regression |\n"
                   "| success@5 | 0.6667 | 0.6667 | 0.0000 | 0.0200 | pass |\n"
                   "| mrr@5 | 0.5000 | 0.5500 | -0.0500 | 0.0200 | regression |\n"
                   "| ndcg@5 | 0.5095 | 0.5200 | -0.0105 | 0.0200 | pass |\n\n")
        self.assertTrue(written.startswith(
            heading + "\n\n" + failing + "\n\n" + rag_eval._SUMMARY_LEGEND + "\n\n" + compact + TestGainIsNamed.EXP
            + "\n\n<details><summary>Every column, the largest drops</summary>\n\n" + tables.rstrip("\n")
            + "\n\n</details>\n\n<details><summary>Notes and warnings (1)</summary>\n\n- `rag_eval: warning: few "
              "documents judged (judged@5"), written)
        self.assertEqual(len(rag_eval._SUMMARY_LEGEND.splitlines()), 1)
        self.assertTrue(written.endswith("\n\n</details>\n\n"), written)
        second, _ = self.ok([QRELS, RUN, "--baseline", BASELINE], expected_code=1, env=env)
        self.assertEqual(self.read(summary).decode("utf-8"), written * 2)  # appended, not replaced
        self.assertEqual(first, second)
        json.loads(first)  # stdout stays the parseable report
        lines = err.splitlines()
        self.assertEqual([line for line in lines if line.startswith("::error")], [
            "::error title=rag_eval::REGRESSION mrr@5: baseline 0.5500, now 0.5000",
            "::error title=rag_eval::REGRESSION recall@5: baseline 0.7000, now 0.6667",
        ])
        # judged@5 = (2 + 0 + 3) / 15 = 0.33 < 0.5
        warned = [line for line in lines if line.startswith("::warning")]
        self.assertEqual(len(warned), 1, err)
        self.assertTrue(warned[0].startswith("::warning title=rag_eval::"), warned[0])
        self.assertIn(f" (judged@5 {FIXTURE_JUDGED5:.2f})", warned[0])
        # the plain lines are still there
        self.assertIn("REGRESSION mrr@5: baseline 0.5500, now 0.5000", lines)

    def test_one_error_per_regression(self):
        # the floor fails too: ndcg@5 = 0.5095 < 0.6
        _, err = self.ok([QRELS, RUN, "--baseline", BASELINE, "--min", "ndcg@5=0.6"], expected_code=1,
                         env={"GITHUB_ACTIONS": "true"})
        errors = [line for line in err.splitlines() if line.startswith("::error")]
        regressions = [line for line in err.splitlines() if line.startswith("REGRESSION")]
        self.assertEqual(errors, ["::error title=rag_eval::" + line for line in regressions])
        self.assertEqual(len(errors), 3)  # mrr@5, recall@5, floor of ndcg@5

    def test_workflow_command_data_is_escaped(self):
        # a slice named "50%": GitHub's toolkit escapes % as %25 in the command data
        slices = self.write("slices.json", {"q2": "50%"})
        baseline = self.write("baseline.json", dict(SHIPPED, **{"50%:recall@5": 1.0}))
        _, err = self.ok([QRELS, RUN, "--baseline", baseline, "--slices", slices, "--max-drop", "50%:recall@5=0"],
                         expected_code=1, env={"GITHUB_ACTIONS": "true"})
        self.assertIn("::error title=rag_eval::REGRESSION 50%25:recall@5: baseline 1.0000, now 0.0000", err.splitlines())

    def test_no_warning_when_judged(self):
        # every one of the top 5 judged: judged@5 = 5/5 (judged@k divides by k, so the ranking must be full)
        qrels = self.write("qrels.json", {"q1": {"a": 1, "b": 0, "c": 0, "d": 0, "e": 0}})
        run = self.write("run.json", {"q1": ["b", "a", "c", "d", "e"]})
        summary = self.write("summary.md", "")
        _, err = self.ok([qrels, run], env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary})
        self.assertEqual(err, "")
        self.assertTrue(self.read(summary).startswith(b"### rag_eval: UNGATED (no baseline or floor), 1 query scored\n"))

    def test_nothing_without_github_actions_true(self):
        for value in (None, "false", "", "1"):
            with self.subTest(GITHUB_ACTIONS=value):
                summary = self.write("summary.md", "")
                env = {"GITHUB_STEP_SUMMARY": summary}
                if value is not None:
                    env["GITHUB_ACTIONS"] = value
                out, err = self.ok([QRELS, RUN, "--baseline", BASELINE], expected_code=1, env=env)
                self.assertEqual(self.read(summary), b"")
                self.assertFalse([line for line in err.splitlines() if line.startswith("::")], err)
                plain, plain_err = self.ok([QRELS, RUN, "--baseline", BASELINE], expected_code=1)
                self.assertEqual((out, err), (plain, plain_err))

    def test_unwritable_summary_is_a_warning(self):
        env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": self.tmp}  # a directory
        out, err = self.ok([QRELS, RUN, "--baseline", BASELINE], expected_code=1, env=env)
        self.assertEqual(len([line for line in tagged_lines(err, "warning") if "GITHUB_STEP_SUMMARY" in line]), 1, err)
        json.loads(out)


class TestJUnit(ReportCase, unittest.TestCase):
    def test_one_case_per_gated_metric_slice_and_floor(self):
        slices = self.write("slices.json", {"q1": "billing", "q2": ["billing", "sla"], "q3": "sso"})
        baseline = self.write("baseline.json", dict(SHIPPED, **{"billing:recall@5": 0.5, "sla:mrr@5": 0.5}))
        junit = self.path("junit.xml")
        self.ok([QRELS, RUN, "--baseline", baseline, "--slices", slices, "--junit", junit,
                 "--max-drop", "billing:recall@5=0",  # billing = q1, q2: (1 + 0) / 2 = 0.5, no fall: pass
                 "--max-drop", "sla:mrr@5=0.1",  # sla = q2: 0, fell 0.5 > 0.1: regression
                 "--min", "ndcg@5=0.6",  # 0.5095 < 0.6: below floor
                 "--min", "sso:success@5=1"],  # sso = q3: 1 >= 1: pass
                expected_code=1)
        root = ElementTree.parse(junit).getroot()
        self.assertEqual(root.tag, "testsuites")
        suites = root.findall("testsuite")
        self.assertEqual(len(suites), 1)
        suite = suites[0]
        cases = suite.findall("testcase")
        names = [case.get("name") for case in cases]
        self.assertEqual(sorted(names), sorted(list(METRICS) + ["billing:recall@5", "sla:mrr@5",
                                                                  "floor ndcg@5", "floor sso:success@5"]))
        failed = {case.get("name"): case.find("failure") for case in cases if case.find("failure") is not None}
        self.assertEqual(sorted(failed), ["floor ndcg@5", "mrr@5", "recall@5", "sla:mrr@5"])
        self.assertEqual({name: f.get("type") for name, f in failed.items()},
                         {"floor ndcg@5": "below floor", "mrr@5": "regression", "recall@5": "regression",
                          "sla:mrr@5": "regression"})
        self.assertIn("baseline 0.5500, now 0.5000", failed["mrr@5"].text)
        for element in (root, suite):
            self.assertEqual(element.get("tests"), "8")  # 4 metrics + 2 slices + 2 floors
            self.assertEqual(element.get("failures"), "4")
        self.assertEqual(suite.get("errors"), "0")

    def test_missing_metric_is_a_failure(self):
        baseline = self.write("baseline.json", {"iou@10": 0.4, "ndcg@5": 0.5})  # iou@10 cannot be computed
        junit = self.path("junit.xml")
        self.ok([QRELS, RUN, "--baseline", baseline, "--junit", junit], expected_code=1)
        cases = {c.get("name"): c for c in ElementTree.parse(junit).getroot().iter("testcase")}
        self.assertEqual(sorted(cases), ["iou@10", "ndcg@5"])
        self.assertEqual(cases["iou@10"].find("failure").get("type"), "missing")
        self.assertIsNone(cases["ndcg@5"].find("failure"))  # 0.5 - 0.5095 < 0: no fall
        self.assertTrue(cases["ndcg@5"].find("system-out").text.startswith("pass: baseline 0.5000, now 0.5095"))

    def test_passing_gate(self):
        junit = self.path("junit.xml")
        self.ok([QRELS, RUN, "--baseline", BASELINE, "--max-drop", "0.05", "--junit", junit])
        suite = ElementTree.parse(junit).getroot().find("testsuite")
        self.assertEqual((suite.get("tests"), suite.get("failures")), ("4", "0"))
        self.assertEqual(suite.findall("testcase/failure"), [])

    def test_inconclusive_is_skipped_or_a_failure_under_inconclusive_fail(self):
        # 30 queries, one falls from 1 to 0: --gate significant cannot tell, every metric is inconclusive; it was a
        # passing case (system-out) even when --inconclusive fail made the run exit 1
        qrels = self.write("q.json", {f"q{i}": {f"d{i}": 1} for i in range(30)})
        before = self.write("before.json", {f"q{i}": [f"d{i}"] for i in range(30)})
        worse = self.write("worse.json", dict({f"q{i}": [f"d{i}"] for i in range(30)}, q0=["x"]))
        junit = self.path("junit.xml")
        for policy, code, element, failures, skipped in (("exit", 3, "skipped", "0", "4"), ("pass", 0, "skipped", "0", "4"),
                                                         ("fail", 1, "failure", "4", "0")):
            with self.subTest(policy=policy):
                self.ok([qrels, worse, "--baseline-run", before, "--gate", "significant", "--resamples", R,
                         "--inconclusive", policy, "--junit", junit], expected_code=code)
                suite = ElementTree.parse(junit).getroot().find("testsuite")
                self.assertEqual((suite.get("tests"), suite.get("failures"), suite.get("skipped")), ("4", failures, skipped))
                for case in suite.findall("testcase"):
                    (found,) = list(case)
                    self.assertEqual(found.tag, element)
                    self.assertEqual(found.get("message"), f"{case.get('name')}: inconclusive")
                    self.assertRegex(found.text, r"^baseline 1\.0000, now 0\.9667, allowed drop 0\.0200; "  # 29 / 30
                                                 r"inconclusive \(~\d+ queries would resolve it\)$")

    def test_no_gate_is_one_passing_case(self):
        # CI systems (Jenkins's junit step) reject a report without test cases.
        junit = self.path("junit.xml")
        self.ok([QRELS, RUN, "--junit", junit])
        suite = ElementTree.parse(junit).getroot().find("testsuite")
        self.assertEqual((suite.get("tests"), suite.get("failures")), ("1", "0"))
        (case,) = suite.findall("testcase")
        self.assertEqual(case.get("name"), "scored")
        self.assertIsNone(case.find("failure"))


class TestFullOutput(ReportCase, unittest.TestCase):
    def test_everything_needed_to_say_how_the_numbers_were_made(self):
        slices = self.write("slices.json", {"q1": "billing", "q3": "sso"})
        os.mkdir(self.path("out"))
        output = self.path("out/full.json")
        argv = [QRELS, RUN, "--baseline", BASELINE, "--slices", slices, "--output", output]
        stdout, _ = self.ok(argv, expected_code=1)  # written although the gate fails
        json.loads(stdout)  # stdout still the report
        self.assertEqual(os.listdir(self.path("out")), ["full.json"])  # no temporary file left
        full = json.loads(self.read(output))
        result = rag_eval.evaluate(rag_eval.read_qrels(QRELS), rag_eval.read_run(RUN), 5)
        self.assertEqual(full["mean"], result["mean"])  # full precision, unlike stdout
        self.assertEqual(sorted(full["per_query"]), ["q1", "q2", "q3"])  # without --per-query too
        for qid, values in FIXTURE_PER_QUERY.items():
            for metric, value in values.items():
                self.assertAlmostEqual(full["per_query"][qid][metric], value, places=12)
        self.assertEqual(full["unscored"], ["q4"])
        self.assertEqual(full["conventions"], {"k": [5], "gain": "exp", "min_grade": 1, "judged_only": False,
                                               "doc_id_sep": None, "ties": rag_eval._TIE_RULE,
                                               "abstain_below": None})
        self.assertEqual(full["tool"], f"rag_eval {rag_eval.__version__}")
        self.assertEqual(full["python"], platform.python_version())
        self.assertEqual(full["command"], ["rag_eval"] + argv)
        self.assertEqual(sorted(full["inputs"]), ["baseline", "qrels", "run", "slices"])
        for role, path in (("qrels", QRELS), ("run", RUN), ("baseline", BASELINE), ("slices", slices)):
            with self.subTest(role=role):
                self.assertEqual(full["inputs"][role]["path"], path)
                self.assertEqual(full["inputs"][role]["sha256"], hashlib.sha256(self.read(path)).hexdigest())
        self.assertEqual(full["inputs"]["qrels"]["judgments_sha256"],
                         rag_eval._qrels_fingerprint(rag_eval.read_qrels(QRELS)))
        self.assertEqual({m: e["verdict"] for m, e in full["gate"]["metrics"].items()}, FIXTURE_VERDICTS)
        self.assertEqual(sorted(full["slices"]), ["billing", "sso"])
        self.assertEqual(full["abstention"], {"queries": 1, "abstained": [], "share": 0.0})

    def test_replaces_an_existing_file(self):
        output = self.write("full.json", "old")
        self.ok([QRELS, RUN, "--output", output])
        self.assertEqual(json.loads(self.read(output))["unscored"], ["q4"])

    def test_unwritable_output_prints_nothing(self):
        self.write("in-the-way", "a file, where the output's folder would be")
        missing = self.path("in-the-way/full.json")
        self.assert_error([QRELS, RUN, "--output", missing], names=[missing, "cannot write"])

    def test_outputs_never_overwrite_an_input(self):
        baseline = self.write("baseline.json", SHIPPED)
        slices = self.write("slices.json", {"q1": "billing"})
        qrels = self.write("qrels.json", self.read(QRELS))
        run = self.write("run.json", self.read(RUN))
        inputs = {"qrels": qrels, "run": run, "baseline": baseline, "slices": slices}
        before = {path: self.read(path) for path in inputs.values()}
        for option in ("--output", "--junit", "--unjudged"):
            for role, path in inputs.items():
                with self.subTest(option=option, input=role):
                    line = self.assert_error([qrels, run, "--baseline", baseline, "--slices", slices, option, path],
                                             names=[option, "overwrite"])
                    self.assertIn(path, line)
                    self.assertEqual({p: self.read(p) for p in inputs.values()}, before)
        self.assert_error([qrels, run, "--output", self.path("x.json"), "--junit", self.path("x.json")],
                          names=["same file"])
        self.assertFalse(os.path.exists(self.path("x.json")))


class TestSlices(ReportCase, unittest.TestCase):
    def expected_slices(self):
        """Means per slice, from NEW_PER_QUERY and the members by hand."""
        return {tag: {"queries": len(qids),
                      "mean": {m: sum(NEW_PER_QUERY[q][m] for q in qids) / len(qids) for m in METRICS}}
                for tag, qids in SLICE_MEMBERS.items()}

    def assert_slices(self, report_slices):
        expected = self.expected_slices()
        self.assertEqual(sorted(report_slices), sorted(expected))
        for tag, entry in expected.items():
            self.assertEqual(report_slices[tag]["queries"], entry["queries"])
            for metric, value in entry["mean"].items():
                self.assertAlmostEqual(report_slices[tag]["mean"][metric], value, places=12, msg=f"{tag} {metric}")

    def test_means_per_slice(self):
        qrels, _, new, slices = self.slice_files()
        out, _ = self.ok([qrels, new, "--slices", slices])
        report = json.loads(out)
        self.assert_slices(report["slices"])
        # pricing = p1, p2 (u1 is unanswerable): recall (1 + 0) / 2, mrr (1 + 0) / 2
        self.assertEqual(report["slices"]["pricing"]["mean"]["recall@5"], 0.5)
        # p2 has two tags and counts in both: billing = p2 alone
        self.assertEqual(report["slices"]["billing"]["mean"]["recall@5"], 0.0)
        # general = g1, g2: mrr (1 + 1/3) / 2
        self.assertAlmostEqual(report["slices"]["general"]["mean"]["mrr@5"], (1 + 1 / 3) / 2, places=12)
        # the overall mean averages the pricing fall away: (1 + 0 + 1 + 1 + 1) / 5
        self.assertEqual(report["mean"]["recall@5"], 0.8)

    def test_jsonl_slices_give_the_same(self):
        qrels, _, new, slices = self.slice_files()
        jsonl = self.write("slices.jsonl", "".join(json.dumps(row) + "\n" for row in [
            {"query_id": "p1", "slices": "pricing"},
            {"query_id": "p2", "tags": ["pricing"]},
            {"query_id": "p2", "tag": "billing"},  # a second row adds a tag
            {"query_id": "g1", "slice": "general"},
            {"query_id": "g2", "slices": ["general"]},
            {"query_id": "u1", "slices": "pricing"},
        ]))
        self.assertEqual(rag_eval.read_slices(jsonl), rag_eval.read_slices(slices))
        self.assertEqual(rag_eval._slice_members(rag_eval.read_slices(jsonl)),
                         {"billing": ["p2"], "general": ["g1", "g2"], "pricing": ["p1", "p2", "u1"]})
        from_json, _ = self.ok([qrels, new, "--slices", slices])
        from_jsonl, _ = self.ok([qrels, new, "--slices", jsonl])
        self.assertEqual(from_jsonl, from_json)

    def test_a_tag_repeated_counts_the_query_once(self):
        # q1 tagged s twice (in its list, and again in a second row): slice s = q1, q2 once each
        for text in ('{"q1": ["s", "s"], "q2": "s"}',
                     '{"query_id": "q1", "slices": ["s", "s"]}\n{"query_id": "q1", "slice": "s"}\n'
                     '{"query_id": "q2", "slice": "s"}\n'):
            with self.subTest(text):
                slices = rag_eval.read_slices(self.write("s.json", text))
                self.assertEqual(rag_eval._slice_members(slices), {"s": ["q1", "q2"]})
                # recall@1: q1 finds its document first (1), q2 does not (0): the slice's mean is (1 + 0) / 2
                result = rag_eval.evaluate({"q1": {"a": 1}, "q2": {"b": 1}}, {"q1": ["a"], "q2": ["x", "b"]}, k=1)
                report = rag_eval.build_report(result, slices=slices)
                self.assertEqual(report["slices"]["s"], {"queries": 2, "mean": {
                    "mrr@1": 0.5, "ndcg@1": 0.5, "recall@1": 0.5, "success@1": 0.5}})

    def test_slices_in_table_and_markdown(self):
        qrels, _, new, slices = self.slice_files()
        expected = self.expected_slices()
        out, _ = self.ok([qrels, new, "--slices", slices, "--format", "table"])
        blocks = [aligned_rows(b) for b in table_blocks(out) if b.startswith("slice")]
        self.assertEqual(len(blocks), 1, out)
        markdown, _ = self.ok([qrels, new, "--slices", slices, "--format", "markdown"])
        md = [t for t in markdown_tables(markdown) if t[0][0] == "slice"]
        self.assertEqual(len(md), 1, markdown)
        for name, rows in (("table", blocks[0]), ("markdown", md[0])):
            with self.subTest(format=name):
                self.assertEqual(rows[0], ["slice", "queries"] + list(SHOWN))
                self.assertEqual(rows[1:], [[tag, str(entry["queries"])] + [shown(entry["mean"][m]) for m in SHOWN]
                                            for tag, entry in sorted(expected.items())])

    def test_slice_rows_in_natural_order(self):
        # s1, s2, s10 as people count, not s1, s10, s2; q1 (s10): recall 2/2, q2 (s2): 0/1, q3 (s1): 3/3
        slices = self.write("s.json", {"q1": "s10", "q2": "s2", "q3": "s1"})
        out, _ = self.ok([QRELS, RUN, "--slices", slices, "--measures", "recall", "--format", "table"])
        self.assertEqual(aligned_rows(table_blocks(out)[-1]), [["slice", "queries", "recall@5"], ["s1", "1", "1.0000"],
                                                                ["s2", "1", "0.0000"], ["s10", "1", "1.0000"]])

    def test_flat_baseline_gates_a_named_slice(self):
        qrels, _, new, slices = self.slice_files()
        # baseline: overall recall 4/5, pricing (1 + 1) / 2 = 1
        baseline = self.write("baseline.json", {"recall@5": 0.8, "pricing:recall@5": 1.0})
        # the baseline holds the slice, so it is gated (at the default tolerance), or left out on purpose
        out, _ = self.ok([qrels, new, "--slices", slices, "--baseline", baseline], expected_code=1)
        self.assertEqual(json.loads(out)["gate"]["metrics"]["pricing:recall@5"]["verdict"], "regression")
        out, _ = self.ok([qrels, new, "--slices", slices, "--baseline", baseline, "--not-gated", "pricing:recall@5"])
        self.assertEqual(sorted(json.loads(out)["gate"]["metrics"]), ["recall@5"])
        self.assertEqual(json.loads(out)["gate"]["not_gated"], ["pricing:recall@5"])
        self.assertEqual(run_main([qrels, new, "--baseline", baseline])[0], rag_eval.EXIT_ERROR)  # no --slices
        out, err = self.ok([qrels, new, "--slices", slices, "--baseline", baseline,
                            "--max-drop", "pricing:recall@5=0"], expected_code=1)
        gate = json.loads(out)["gate"]
        self.assertEqual(gate["metrics"]["recall@5"]["verdict"], "pass")  # 0.8 -> 0.8
        entry = gate["metrics"]["pricing:recall@5"]
        self.assertEqual((entry["baseline"], entry["now"], entry["verdict"]), (1.0, 0.5, "regression"))
        self.assertEqual(entry["allowed_drop"], 0.0)
        self.assertEqual([line for line in err.splitlines() if line.startswith("REGRESSION")],
                         ["REGRESSION pricing:recall@5: baseline 1.0000, now 0.5000"])
        table, _ = self.ok([qrels, new, "--slices", slices, "--baseline", baseline,
                            "--max-drop", "pricing:recall@5=0", "--format", "table"], expected_code=1)
        self.assertEqual(table_blocks(table)[0], "FAIL (1: pricing:recall@5), rule 'drop', 5 queries scored")
        row = by_first_cell(aligned_rows(table_blocks(table)[1]))["pricing:recall@5"]
        self.assertEqual((row["mean"], row["baseline"], row["delta"], row["verdict"]),
                         ("0.5000", "1.0000", "-0.5000", "regression"))

    def test_extended_baseline_gates_a_named_slice(self):
        qrels, old, new, slices = self.slice_files()
        saved = self.path("saved.json")
        self.ok([qrels, old, "--save-baseline", saved])
        # the extended baseline holds the old per-query scores: pricing recall was (1 + 1) / 2
        out, err = self.ok([qrels, new, "--slices", slices, "--baseline", saved, "--resamples", R,
                            "--max-drop", "pricing:recall@5=0"], expected_code=1)
        gate = json.loads(out)["gate"]
        verdicts = {m: e["verdict"] for m, e in gate["metrics"].items()}
        # overall: recall 4/5 -> 4/5, success 4/5 -> 4/5, mrr and ndcg rise (g3 found at 1)
        self.assertEqual(verdicts, {"mrr@5": "pass", "ndcg@5": "pass", "recall@5": "pass", "success@5": "pass",
                                    "pricing:recall@5": "regression"})
        entry = gate["metrics"]["pricing:recall@5"]
        self.assertEqual((entry["baseline"], entry["now"]), ((1 + 1) / 2, (1 + 0) / 2))
        self.assertEqual(entry["queries"], 2)  # paired over p1, p2
        self.assertEqual(entry["largest_drops"], [["p2", -1.0]])
        self.assertEqual([line for line in err.splitlines() if line.startswith("REGRESSION")],
                         ["REGRESSION pricing:recall@5: baseline 1.0000, now 0.5000"])
        # without the tolerance naming it, the same change passes: the fall is averaged away
        self.ok([qrels, new, "--slices", slices, "--baseline", saved, "--resamples", R])

    def test_slice_floor(self):
        qrels, _, new, slices = self.slice_files()
        out, err = self.ok([qrels, new, "--slices", slices, "--min", "pricing:recall@5=0.6"], expected_code=1)
        floor = json.loads(out)["gate"]["floors"]["pricing:recall@5"]
        self.assertEqual((floor["now"], floor["verdict"]), (0.5, "below floor"))  # (1 + 0) / 2 < 0.6
        self.assertIn("REGRESSION pricing:recall@5: floor 0.6000, now 0.5000", err.splitlines())

    def test_slice_floor_shows_its_mean(self):
        """A floor on a slice shows the slice's mean in table, markdown and csv.

        Guards a fixed bug: rag_eval.py QRELS NEW --slices S --min
        pricing:recall@5=0.6 --format table printed "pricing:recall@5  -  ...
        floor 0.6: below floor": _metric_rows took the mean from report["mean"] or
        gate["metrics"], never from gate["floors"][key]["now"] (0.5 here, present
        in the JSON report).
        """
        qrels, _, new, slices = self.slice_files()
        argv = [qrels, new, "--slices", slices, "--min", "pricing:recall@5=0.6"]
        table, _ = self.ok(argv + ["--format", "table"], expected_code=1)
        markdown, _ = self.ok(argv + ["--format", "markdown"], expected_code=1)
        csv_text, _ = self.ok(argv + ["--format", "csv"], expected_code=1)
        for name, rows in (("table", aligned_rows(table_blocks(table)[1])), ("markdown", markdown_tables(markdown)[0]),
                           ("csv", list(csv.reader(io.StringIO(csv_text))))):
            with self.subTest(format=name):
                row = by_first_cell(rows)["pricing:recall@5"]
                self.assertEqual(row["verdict"], "below floor 0.6")
                self.assertEqual(row["mean"], "0.5000")  # (1 + 0) / 2

    def test_slice_without_scored_query(self):
        qrels, _, new, _ = self.slice_files()
        slices = self.write("u1.json", {"u1": "empty", "p1": "pricing"})  # u1 is unanswerable
        out, _ = self.ok([qrels, new, "--slices", slices])
        self.assertEqual(json.loads(out)["slices"]["empty"], {"queries": 0, "mean": {m: None for m in METRICS}})
        out, _ = self.ok([qrels, new, "--slices", slices, "--format", "table"])
        rows = [aligned_rows(b) for b in table_blocks(out) if b.startswith("slice")][0]
        self.assertEqual(by_first_cell(rows)["empty"], dict(zip(rows[0], ["empty", "0", "-", "-", "-", "-"])))

    def test_bad_slice_names(self):
        qrels, _, new, slices = self.slice_files()
        baseline = self.write("baseline.json", {"recall@5": 0.8, "pricing:recall@5": 1.0})
        self.assert_error([qrels, new, "--slices", slices, "--baseline", baseline, "--max-drop", "nosuch:recall@5=0"],
                          names=["--max-drop", "'nosuch'"])
        self.assert_error([qrels, new, "--baseline", baseline, "--max-drop", "pricing:recall@5=0"],
                          names=["'pricing'", "--slices"])
        self.assert_error([qrels, new, "--slices", slices, "--min", "nosuch:recall@5=0.5"], names=["'nosuch'"])
        # a slice whose only query is unanswerable has nothing to gate
        only_u1 = self.write("u1.json", {"u1": "empty", "p1": "pricing"})
        self.assert_error([qrels, new, "--slices", only_u1, "--baseline", baseline, "--max-drop", "empty:recall@5=0"],
                          names=["'empty'", "no scored query"])
        # a flat baseline without the slice's mean cannot gate it
        flat = self.write("flat.json", {"recall@5": 0.8})
        self.assert_error([qrels, new, "--slices", slices, "--baseline", flat, "--max-drop", "pricing:recall@5=0"],
                          names=["pricing:recall@5"])

    def test_bad_slices_file(self):
        qrels, _, new, _ = self.slice_files()
        for name, data in (("list", [1, 2]), ("colon", {"p1": "a:b"}), ("empty", {"p1": ""}), ("number", {"p1": 3})):
            with self.subTest(name):
                path = self.write(f"{name}.json", data)
                self.assert_error([qrels, new, "--slices", path], names=[path])


class TestAbstention(ReportCase, unittest.TestCase):
    def test_evaluate(self):
        cases = (
            # threshold, abstained: u1 (no entry) and u2 (empty list) always; u3 when 0.2 < threshold
            (None, ["u1", "u2"]),
            (0.5, ["u1", "u2", "u3"]),  # u5's 0.5 is at the threshold: answered
            (0.51, ["u1", "u2", "u3", "u5"]),
            (0.8, ["u1", "u2", "u3", "u4", "u5"]),
            (0.0, ["u1", "u2"]),
        )
        for threshold, abstained in cases:
            with self.subTest(abstain_below=threshold):
                result = rag_eval.evaluate(ABSTAIN_QRELS, ABSTAIN_RUN, 5, abstain_below=threshold)
                self.assertEqual(result["unscored"], ["u1", "u2", "u3", "u4", "u5"])
                self.assertEqual(result["abstention"], {"queries": 5, "abstained": abstained,
                                                        "share": len(abstained) / 5})
                self.assertEqual(result["queries"], 1)  # abstention never enters the retrieval means

    def test_empty_mapping_is_an_empty_ranking(self):
        result = rag_eval.evaluate(ABSTAIN_QRELS, dict(ABSTAIN_RUN, u2={}), 5)
        self.assertEqual(result["abstention"]["abstained"], ["u1", "u2"])

    def test_no_unanswerable_query(self):
        result = rag_eval.evaluate({"s1": {"a": 1}}, {"s1": ["a"]}, 5)
        self.assertEqual(result["abstention"], {"queries": 0, "abstained": [], "share": None})

    def test_every_format(self):
        qrels = self.write("qrels.json", ABSTAIN_QRELS)
        run = self.write("run.json", ABSTAIN_RUN)
        argv = [qrels, run, "--abstain-below", "0.5"]
        # 3 of 5: u1 (no entry), u2 (empty), u3 (best 0.2 < 0.5)
        out, _ = self.ok(argv)
        self.assertEqual(json.loads(out)["abstention"], {"queries": 5, "abstained": ["u1", "u2", "u3"], "share": 3 / 5})
        out, _ = self.ok(argv + ["--format", "table"])
        self.assertIn("abstention: 3 of 5 unanswerable queries got no answer (60%)", table_blocks(out))
        out, _ = self.ok(argv + ["--format", "markdown"])
        self.assertIn("Abstention: 3 of 5 unanswerable queries got no answer (60%)", out.rstrip("\n").split("\n\n"))
        out, _ = self.ok(argv + ["--format", "csv"])
        self.assertIn(["abstention", "0.6000"], list(csv.reader(io.StringIO(out))))
        out, _ = self.ok(argv + ["--format", "csv", "--per-query"])
        rows = [row for row in csv.reader(io.StringIO(out)) if row[1] == "abstention"]
        self.assertEqual(rows, [["u1", "abstention", "1"], ["u2", "abstention", "1"], ["u3", "abstention", "1"],
                                ["u4", "abstention", "0"], ["u5", "abstention", "0"]])
        self.assertEqual(sum(int(row[2]) for row in rows) / len(rows), 3 / 5)  # the share, from the rows
        out, _ = self.ok([qrels, run])  # without the threshold only u1 and u2: 2 of 5
        self.assertEqual(json.loads(out)["abstention"]["share"], 2 / 5)

    def test_streamed_trec_run(self):
        # the same run as TREC lines: u1 and u2 have no line at all
        qrels = self.write("qrels.json", ABSTAIN_QRELS)
        trec = self.write("run.trec", "s1 Q0 a 1 0.9 t\n"
                                      "u3 Q0 m 1 0.1 t\nu3 Q0 n 2 0.2 t\n"
                                      "u4 Q0 m 1 0.7 t\nu4 Q0 n 2 0.1 t\n"
                                      "u5 Q0 m 1 0.5 t\n")
        out, _ = self.ok([qrels, trec, "--abstain-below", "0.5"])
        self.assertEqual(json.loads(out)["abstention"], {"queries": 5, "abstained": ["u1", "u2", "u3"], "share": 3 / 5})
        # --judged-only must not empty an unanswerable query's ranking (m, n are unjudged)
        out, _ = self.ok([qrels, trec, "--abstain-below", "0.5", "--judged-only"])
        self.assertEqual(json.loads(out)["abstention"]["abstained"], ["u1", "u2", "u3"])

    def test_bad_threshold(self):
        qrels = self.write("qrels.json", ABSTAIN_QRELS)
        run = self.write("run.json", ABSTAIN_RUN)
        for text in ("nan", "inf", "x", ""):
            with self.subTest(text=text):
                self.assert_error([qrels, run, "--abstain-below", text], names=["--abstain-below"])
        with self.assertRaises(ValueError):
            rag_eval.evaluate(ABSTAIN_QRELS, ABSTAIN_RUN, 5, abstain_below=float("nan"))


# One query, chunk ids "document#chunk".
# Judgments: guide#1 = 1, guide#2 = 2, faq#1 = 1, faq#3 = 0, other#1 = 0
#   per document (best chunk): guide = 2, faq = 1, other = 0
# Run: x#1, guide#1, faq#3, guide#2, y#1
#   per document: x (1), guide (2; guide#2 at rank 4 counts once, at guide#1's rank), faq (3), y (4)
DOC_QRELS = {"q": {"guide#1": 1, "guide#2": 2, "faq#1": 1, "faq#3": 0, "other#1": 0}}


DOC_RUN = {"q": ["x#1", "guide#1", "faq#3", "guide#2", "y#1"]}


DOC_EXPECTED = {
    "recall": 2 / 2,  # guide and faq, of the 2 relevant documents (chunks: guide#1, guide#2 of 3 -> 2/3)
    "success": 1.0,
    "mrr": 1 / 2,  # guide at rank 2
    # DCG: guide (grade 2, from guide#2, not the retrieved guide#1's 1) at 2, faq (grade 1, from faq#1,
    # not the retrieved faq#3's 0) at 3.  Ideal over documents: [guide 3, faq 1]; over chunks it would
    # be [3, 1, 1].
    "ndcg": (3 / math.log2(3) + 1 / math.log2(4)) / (3 / math.log2(2) + 1 / math.log2(3)),
    "precision": 2 / 5,  # 4 documents retrieved, divided by k all the same
    "ap": (1 / 2 + 2 / 3) / 2,  # hits at 2 and 3
    "judged": 2 / 5,  # guide, faq judged; x, y not
}


DOC_CHUNK_EXPECTED = {
    "recall": 2 / 3,  # guide#1 (1) and guide#2 (2) of guide#1, guide#2, faq#1
    "mrr": 1 / 2,
    # gains 2**1-1 = 1 at rank 2, 2**2-1 = 3 at rank 4; ideal [3, 1, 1]
    "ndcg": (1 / math.log2(3) + 3 / math.log2(5)) / (3 + 1 / math.log2(3) + 1 / math.log2(4)),
}


# The fixtures per document ("#"): q1 refund-policy = max(2, 1) = 2 at rank 2 of shipping, refund-policy,
# returns-faq; q2 sla-uptime = 2 at rank 3 of pricing, status-page, sla-uptime, support-hours (a miss per
# chunk, a hit per document: the label survives re-chunking); q3 sso-setup = 2 at 1, okta-guide = 1 at 2.
FIXTURE_DOC_MEANS = {
    "recall@5": (1 + 1 + 1) / 3,
    "success@5": (1 + 1 + 1) / 3,
    "mrr@5": (1 / 2 + 1 / 3 + 1) / 3,
    "ndcg@5": ((3 / math.log2(3)) / 3 + (3 / math.log2(4)) / 3 + 1.0) / 3,
}


class TestDocumentLevel(ReportCase, unittest.TestCase):
    def test_document_of(self):
        for chunk, sep, document in (("refund-policy#2", "#", "refund-policy"), ("guide", "#", "guide"),
                                     ("a#b#c", "#", "a"), ("doc::7", "::", "doc"), ("#3", "#", "#3")):
            with self.subTest(chunk=chunk, sep=sep):
                self.assertEqual(rag_eval._document_of(chunk, sep), document)

    def test_documents_qrels_and_run(self):
        self.assertEqual(rag_eval._documents_qrels(DOC_QRELS, "#"), {"q": {"guide": 2, "faq": 1, "other": 0}})
        self.assertEqual(rag_eval._documents_run(DOC_RUN, "#"), {"q": ["x", "guide", "faq", "y"]})
        # scored: a document takes its best chunk's score
        self.assertEqual(rag_eval._documents_run({"q": {"guide#1": 0.2, "guide#2": 0.9, "faq#1": 0.5}}, "#"),
                         {"q": {"guide": 0.9, "faq": 0.5}})

    def test_hand_worked(self):
        measures = [m.name for m in rag_eval.MEASURES]
        result = rag_eval.evaluate(DOC_QRELS, DOC_RUN, 5, measures=measures, doc_id_sep="#")
        for name, value in DOC_EXPECTED.items():
            with self.subTest(measure=name):
                self.assertAlmostEqual(result["per_query"]["q"][name], value, places=12)
        chunks = rag_eval.evaluate(DOC_QRELS, DOC_RUN, 5)
        for name, value in DOC_CHUNK_EXPECTED.items():
            self.assertAlmostEqual(chunks["per_query"]["q"][name], value, places=12)
        self.assertEqual(result["conventions"]["doc_id_sep"], "#")
        # the measure functions take the same convention
        self.assertAlmostEqual(rag_eval.ndcg_at_k(DOC_RUN["q"], DOC_QRELS["q"], 5, doc_id_sep="#"),
                               DOC_EXPECTED["ndcg"], places=12)

    def test_command_line_json_trec_jsonl_agree(self):
        qrels = self.write("qrels.json", DOC_QRELS)
        run = self.write("run.json", DOC_RUN)
        trec = self.trec_run("run.trec", DOC_RUN)
        jsonl = self.write("run.jsonl", "".join(json.dumps({"query_id": "q", "doc_id": d, "score": 10 - i}) + "\n"
                                                for i, d in enumerate(DOC_RUN["q"])))
        reports = {}
        for name, path in (("json", run), ("trec", trec), ("jsonl", jsonl)):
            out, _ = self.ok([qrels, path, "--doc-id-sep", "#", "--measures", "recall,mrr,ndcg", "--digits", "12",
                              "--per-query", "--output", self.path(f"{name}.out")])
            reports[name] = json.loads(out)
            full = json.loads(self.read(self.path(f"{name}.out")))
            self.assertEqual(full["conventions"]["doc_id_sep"], "#")
            for measure in ("recall", "mrr", "ndcg"):
                self.assertAlmostEqual(full["mean"][f"{measure}@5"], DOC_EXPECTED[measure], places=12)
        self.assertEqual(reports["trec"], reports["json"])
        self.assertEqual(reports["jsonl"], reports["json"])

    def test_fixtures_per_document(self):
        trec = self.trec_run("run.trec", json.loads(self.read(RUN)))
        for path in (RUN, trec):
            with self.subTest(run=os.path.basename(path)):
                out, _ = self.ok([QRELS, path, "--doc-id-sep", "#", "--output", self.path("full.json")])
                self.assertEqual(json.loads(out)["unscored"], ["q4"])
                means = json.loads(self.read(self.path("full.json")))["mean"]
                for metric, value in FIXTURE_DOC_MEANS.items():
                    self.assertAlmostEqual(means[metric], value, places=12)

    def test_trec_best_chunk_is_not_the_first_line(self):
        # guide#1 is listed first with a low score, guide#2 later with the best one:
        # guide ranks by 0.9, above faq's 0.5, so mrr = 1/1
        qrels = self.write("qrels.json", {"q": {"guide#1": 1, "faq#1": 1}})
        trec = self.write("run.trec", "q Q0 guide#1 1 0.1 t\nq Q0 faq#1 2 0.5 t\nq Q0 guide#2 3 0.9 t\n")
        out, _ = self.ok([qrels, trec, "--doc-id-sep", "#", "--per-query"])
        self.assertEqual(json.loads(out)["per_query"]["q"]["mrr@5"], 1.0)

    def test_bad_separator(self):
        self.assert_error([QRELS, RUN, "--doc-id-sep", ""], names=["--doc-id-sep"])
        with self.assertRaises(ValueError):
            rag_eval.evaluate(DOC_QRELS, DOC_RUN, 5, doc_id_sep="")


# Fixtures, k = 5: the unjudged documents of each top 5, by (rank, query, document).
FIXTURE_UNJUDGED = [
    ("q1", "shipping#1", 1), ("q2", "pricing#3", 1),  # q2 judged sla-uptime#1 only
    ("q2", "status-page#1", 2), ("q4", "pricing#1", 2),
    ("q1", "refund-policy#9", 3), ("q2", "sla-uptime#7", 3), ("q3", "sso-setup#1", 3), ("q4", "plans#2", 3),
    ("q2", "support-hours#2", 4), ("q3", "scim#2", 4), ("q4", "billing#4", 4),
    ("q1", "returns-faq#1", 5), ("q2", "sla-uptime#2", 5), ("q4", "invoices#1", 5),
]


# Per document ("#"): q1 shipping (1), refund-policy (2, judged), returns-faq (3); q2 pricing (1),
# status-page (2), sla-uptime (3, judged), support-hours (4); q3 sso-setup, okta-guide judged, scim (3);
# q4 pricing (1, judged 0), plans (2), billing (3), invoices (4).
FIXTURE_UNJUDGED_DOCS = [
    ("q1", "shipping", 1), ("q2", "pricing", 1),
    ("q2", "status-page", 2), ("q4", "plans", 2),
    ("q1", "returns-faq", 3), ("q3", "scim", 3), ("q4", "billing", 3),
    ("q2", "support-hours", 4), ("q4", "invoices", 4),
]


class TestUnjudged(ReportCase, unittest.TestCase):
    def worklist(self, argv):
        path = self.path("todo.jsonl")
        self.ok(argv + ["--unjudged", path])
        return [json.loads(line) for line in self.read(path).decode("utf-8").splitlines()]

    def test_rows_most_consequential_first(self):
        rows = self.worklist([QRELS, RUN])
        self.assertEqual(rows, [{"query_id": q, "doc_id": d, "rank": r, "relevance": -1} for q, d, r in FIXTURE_UNJUDGED])
        self.assertEqual([(r["rank"], r["query_id"], r["doc_id"]) for r in rows],
                         sorted((r["rank"], r["query_id"], r["doc_id"]) for r in rows))
        self.assertEqual(rag_eval._unjudged_documents(rag_eval.read_qrels(QRELS), rag_eval.read_run(RUN), 5),
                         FIXTURE_UNJUDGED)

    def test_cutoff(self):
        rows = self.worklist([QRELS, RUN, "--k", "2"])
        self.assertEqual([(r["query_id"], r["doc_id"], r["rank"]) for r in rows], FIXTURE_UNJUDGED[:4])

    def test_documents(self):
        rows = self.worklist([QRELS, RUN, "--doc-id-sep", "#"])
        self.assertEqual([(r["query_id"], r["doc_id"], r["rank"]) for r in rows], FIXTURE_UNJUDGED_DOCS)

    def test_rows_carry_the_texts_and_say_how_they_join(self):
        # Issue 33: the rows had no query or chunk text (a labeller needed another join), and "append to JSONL
        # qrels" did not apply to TREC qrels.  BEIR's files: queries.jsonl and corpus.jsonl name ids "_id".
        queries = self.write("queries.jsonl", '{"_id": "q1", "text": "how do refunds work?"}\n')
        corpus = self.write("corpus.jsonl", '{"_id": "shipping#1", "title": "", "text": "We ship in 2 days."}\n')
        rows = self.worklist([QRELS, RUN, "--queries", queries, "--corpus", corpus])
        self.assertEqual(rows[0], {"query_id": "q1", "query": "how do refunds work?", "doc_id": "shipping#1",
                                   "text": "We ship in 2 days.", "rank": 1, "relevance": -1})
        self.assertEqual(rows[1], {"query_id": "q2", "doc_id": "pricing#3", "rank": 1, "relevance": -1})
        # with a chunk map, a chunk's text is its document's characters
        chunks = self.write("chunks.jsonl", '{"chunk_id": "shipping#1", "doc_id": "ship", "start": 3, "end": 7}\n')
        corpus = self.write("docs.jsonl", '{"doc_id": "ship", "text": "We ship in 2 days."}\n')
        self.assertEqual(self.worklist([QRELS, RUN, "--corpus", corpus, "--chunks", chunks])[0]["text"], "ship")
        trec = self.write("qrels.trec", "".join(f"{q} 0 {d} {g}\n" for q, docs in rag_eval.read_qrels(QRELS).items()
                                                for d, g in docs.items()))
        for qrels, how in ((QRELS, "add each as [query_id][doc_id] = relevance to"),
                           (trec, "add each as a line 'query_id 0 doc_id relevance' to")):
            with self.subTest(how=how):
                _, err = self.ok([qrels, RUN, "--unjudged", self.path("todo.jsonl")])
                self.assertIn(f"rag_eval: note: to label: set each relevance in {self.path('todo.jsonl')}, then {how} "
                              f"{qrels}", err.splitlines())
        self.assertEqual(run_main([QRELS, RUN, "--queries", queries])[2],
                         "rag_eval: error: --queries goes with --unjudged: it gives the worklist its queries' text\n")

    def test_labels_merge_back_into_jsonl_qrels(self):
        rows = self.worklist([QRELS, RUN])
        fixture = rag_eval.read_qrels(QRELS)
        qrels_lines = [json.dumps({"query_id": q, "doc_id": d, "relevance": g}) + "\n"
                       for q, docs in fixture.items() for d, g in docs.items()]
        # untouched, every row still says -1 (unjudged): appending changes nothing
        untouched = self.write("untouched.jsonl", "".join(qrels_lines) + "".join(json.dumps(r) + "\n" for r in rows))
        self.assertEqual(rag_eval.read_qrels(untouched), fixture)
        # a labeller sets every relevance: refund-policy#9 partially relevant, sla-uptime#7 answers, the rest 0
        labels = {("q1", "refund-policy#9"): 1, ("q2", "sla-uptime#7"): 2}
        for row in rows:
            row["relevance"] = labels.get((row["query_id"], row["doc_id"]), 0)
        merged = self.write("merged.jsonl", "".join(qrels_lines) + "".join(json.dumps(r) + "\n" for r in rows))
        qrels = rag_eval.read_qrels(merged)
        expected = {q: dict(docs) for q, docs in fixture.items()}
        for row in rows:
            expected[row["query_id"]][row["doc_id"]] = row["relevance"]
        self.assertEqual(qrels, expected)
        # now every top 5 is judged: judged@5 = 1, no warning, an empty worklist
        out, err = self.ok([merged, RUN, "--measures", "recall,judged"])
        self.assertEqual(json.loads(out)["mean"]["judged@5"], 1.0)
        self.assertNotIn("warning", err)
        self.assertEqual(self.worklist([merged, RUN]), [])
        # q2 now finds sla-uptime#7 (grade 2) at 3: recall 1/2 (of sla-uptime#1, #7)
        # q1: refund-policy#2, #9, #3 all found: 3/3; q3: 3/3
        self.assertAlmostEqual(json.loads(out)["mean"]["recall@5"], (1 + 1 / 2 + 1) / 3, places=12)

    def test_judged_only_keeps_the_worklist(self):
        """With --judged-only, --unjudged still lists the unjudged documents of a TREC (or JSONL) run.

        Guards a fixed bug: the run lost its unjudged documents before --unjudged
        saw them, so the worklist held only the unanswerable queries: rag_eval.py
        fixtures/qrels.json run.trec --judged-only --unjudged todo.jsonl wrote 4
        rows (q4 only); the same run as JSON wrote all 14.  _run passed read_run's
        keep filter (judged documents only) and then handed the filtered run to
        unjudged_documents.  The warning itself suggests "label them (--unjudged)
        or use --judged-only".
        """
        trec = self.trec_run("run.trec", json.loads(self.read(RUN)))
        for path in (RUN, trec):
            with self.subTest(run=os.path.basename(path)):
                rows = self.worklist([QRELS, path, "--judged-only"])
                self.assertEqual([(r["query_id"], r["doc_id"], r["rank"]) for r in rows], FIXTURE_UNJUDGED)


class TestExplain(ReportCase, unittest.TestCase):
    def test_every_measure_and_tool(self):
        code, out, err = run_main(["--explain"])
        self.assertEqual((code, err), (0, ""))
        for measure in rag_eval.MEASURES:
            with self.subTest(measure=measure.name):
                self.assertIn(f"{measure.name}@k: {measure.summary}", out)
                self.assertIn(measure.definition, out)
                for tool in TOOLS:
                    self.assertRegex(out, rf"\n +{re.escape(tool)} +{re.escape(measure.others[tool])}\n")
        for tool in TOOLS:
            self.assertIn(tool, out)
        self.assertEqual(out, rag_eval._explain())

    def test_generated_from_the_table(self):
        with mock.patch.object(rag_eval, "MEASURES", rag_eval.MEASURES[:1]):
            text = rag_eval._explain()
        self.assertIn("recall@k", text)
        self.assertNotIn("ndcg@k", text)

    def test_with_inputs_it_only_explains(self):
        code, out, err = run_main([QRELS, RUN, "--explain"])
        self.assertEqual((code, out, err), (0, rag_eval._explain(), ""))

    def test_inputs_required_otherwise(self):
        for argv, names in (([], ["QRELS RUN"]), ([QRELS], ["required: RUN (QRELS is "]),
                            (["--format", "table"], ["QRELS RUN"])):
            with self.subTest(argv=argv):
                self.assert_error(argv, names=names)

    def test_unknown_format(self):
        self.assert_error([QRELS, RUN, "--format", "xml"], names=["--format"])


class TestIdsStayOnOneLine(ReportCase, unittest.TestCase):
    """A query id holding a line break can neither split a table row nor open a markdown line of its own."""

    def test_table_and_markdown(self):
        qid = "x|y\n# PASS"
        qrels = self.write("q.json", json.dumps({qid: {"a": 2}, "q2": {"c": 1}}))
        baseline = self.path("base.json")
        self.assertEqual(run_main([qrels, self.write("b.json", json.dumps({qid: ["a"], "q2": ["c"]})), "--k", "2",
                                   "--save-baseline", baseline])[0], 0)
        run = self.write("r.json", json.dumps({qid: ["z", "a"], "q2": ["z"]}))
        for fmt in ("table", "markdown"):
            with self.subTest(fmt=fmt):
                code, out, _ = run_main([qrels, run, "--k", "2", "--baseline", baseline, "--format", fmt, "--per-query"])
                self.assertEqual(code, rag_eval.EXIT_REGRESSION)
                self.assertNotIn("\n# PASS", out.replace("\\n# PASS", ""))  # no raw line break before it
                shown = [line for line in out.splitlines() if "# PASS" in line]
                self.assertEqual(len(shown), 6, out)  # 4 per-query rows and 2 drop lines, each whole
                self.assertTrue(all("y\\n# PASS" in line for line in shown))

    def test_file_names_in_notes(self):
        output = self.path("w\n::error::o.json")
        code, _, err = run_main([QRELS, RUN, "--output", output])
        self.assertEqual(code, rag_eval.EXIT_OK)
        self.assertIn(f"rag_eval: note: wrote {ascii(output)}\n", err)
        self.assertFalse(any(line.startswith("::") for line in err.splitlines()), err)

    def test_openmetrics_label_value(self):
        # OpenMetrics escapes a label value's line break as \n (slice names are printable today: the rule is the
        # format's, so that a sample stays one line whatever a caller names)
        text = rag_eval._openmetrics_text({"mean": {"recall@5": 0.5},
                                           "slices": {"a\nb": {"queries": 1, "mean": {"recall@5": 0.25}}}})
        self.assertIn('\nrag_eval_slice_mean{slice="a\\nb",metric="recall@5"} 0.25\n', text)
        self.assertFalse(any(line.startswith("b") for line in text.splitlines()), text)


class TestComparisonMarks(ReportCase, unittest.TestCase):
    """Four queries, one relevant document each: the reference finds it at rank 1 every time, the candidate misses
    it on three, so success@1's exact sign test gives p = 2 * (1/2)**3 = 0.25 (Holm over one comparison: 0.25).
    With alpha 0.25 the candidate is not distinguishable from the best (~best); with 0.3 it is (no mark)."""

    def test_marks_in_every_human_format(self):
        qrels = {f"q{i}": {"rel": 1} for i in range(4)}
        paths = [self.write("q.json", qrels), self.write("ref.json", {q: ["rel"] for q in qrels}),
                 self.write("cand.json", {q: ["rel"] if q == "q3" else ["x"] for q in qrels})]
        for alpha, table_mark, csv_mark in (("0.25", "~best", "~best"), ("0.3", "-", "")):
            argv = paths + ["--k", "1", "--measures", "success", "--alpha", alpha, "--format"]
            with self.subTest(alpha=alpha):
                rows = aligned_rows(table_blocks(self.ok(argv + ["table"])[0])[1])
                self.assertEqual([(row[1], row[-1]) for row in rows], [("run", "mark"), ("ref", "best"),
                                                                       ("cand", table_mark)])
                rows = [t for t in markdown_tables(self.ok(argv + ["markdown"])[0]) if t[0][0] == "metric"][0]
                self.assertEqual([(row[1], row[-1]) for row in rows[1:]], [("ref", "best"), ("cand", table_mark)])
                rows = list(csv.reader(io.StringIO(self.ok(argv + ["csv"])[0])))
                self.assertEqual([(row[1], row[-1]) for row in rows[1:]], [("ref", "best"), ("cand", csv_mark)])


class TestNotes(ReportCase, unittest.TestCase):
    def test_metrics_not_in_the_baseline_name_five_then_count_the_rest(self):
        baseline = self.path("recall.json")  # an extended baseline of recall@5 alone
        self.ok([QRELS, RUN, "--measures", "recall", "--save-baseline", baseline])
        for measures, listed in (("recall,success,mrr,ndcg,precision,judged", "judged@5, mrr@5, ndcg@5, precision@5, "
                                  "success@5"),  # five new: all named
                                 ("recall,success,mrr,ndcg,precision,judged,ap", "ap@5, judged@5, mrr@5, ndcg@5, "
                                  "precision@5 and 1 more")):  # six: five named
            with self.subTest(measures=measures):
                _, err = self.ok([QRELS, RUN, "--baseline", baseline, "--measures", measures])
                (note,) = [line for line in tagged_lines(err, "note") if "@" in line]
                self.assertTrue(note.endswith(f": {listed}"), note)

    def test_repeated_documents_past_the_budget_are_counted_at_least(self):
        found = {"documents": 2, "queries": 1, "run": "r.trec"}
        for at_least, start in ((False, "2 documents are"), (True, "at least 2 documents are")):
            with self.subTest(at_least=at_least):
                message = rag_eval._repeated_message(dict(found, at_least=at_least))
                self.assertTrue(message.line.startswith(f"{start} "), message.line)
                self.assertRegex(message.line, r" 1 \D* r\.trec;")


class TestGateContextLines(unittest.TestCase):
    def test_label_changes_name_the_first_five_queries_in_natural_order(self):
        before = {qid: {"a": 1} for qid in ("q2", "q10", "q11", "q1", "q3", "q4", "q20")}
        stored = rag_eval._stored_judgments(before)
        every = rag_eval._label_changes(stored, {qid: {"a": 2} for qid in before})  # 7 queries regraded
        self.assertEqual(rag_eval._gate_context_text({"label_changes": every}, 4),
                         "\nlabels changed since the baseline: 0 judgments added, 0 removed, 7 regraded in 7 queries "
                         "(q1 +0 -0 ~1, q2 +0 -0 ~1, q3 +0 -0 ~1, q4 +0 -0 ~1, q10 +0 -0 ~1, ...)")
        two = rag_eval._label_changes(stored, {qid: {"a": 2 if qid in ("q2", "q10") else 1} for qid in before})
        self.assertEqual(rag_eval._gate_context_text({"label_changes": two}, 4),  # all shown: no "..."
                         "\nlabels changed since the baseline: 0 judgments added, 0 removed, 2 regraded in 2 queries "
                         "(q2 +0 -0 ~1, q10 +0 -0 ~1)")

    def test_the_text_table_keeps_an_id_or_a_provenance_value_on_its_line(self):
        # A query id and a baseline's meta value with a line break: in the table they once started lines
        # of their own ("# Forged heading"); the markdown report shows them as code spans.
        stored = rag_eval._stored_judgments({"q1": {"a": 1}, "x\n# Forged": {"b": 1}})
        changes = rag_eval._label_changes(stored, {"q1": {"a": 1}, "x\n# Forged": {"b": 2}})
        gate = {"label_changes": changes, "meta_changes": ["index: v1 -> v2\n# Forged"]}
        text = rag_eval._gate_context_text(gate, 4)
        self.assertEqual(text, "\nprovenance changed since the baseline: index: v1 -> v2\\n# Forged"
                               "\nlabels changed since the baseline: 0 judgments added, 0 removed, 1 regraded in "
                               "1 query (x\\n# Forged +0 -0 ~1)")
        result = rag_eval.evaluate({"q1": {"a": 1}}, {"q1": ["a"]}, 5)
        report = rag_eval.build_report(result, gate_report=dict(rag_eval.gate(
            result, rag_eval.Baseline({"recall@5": 1.0}), rag_eval.GateSettings()), **gate))
        self.assertEqual([line for line in rag_eval.FORMATTERS["table"](report, 4).splitlines()
                          if line.startswith("# Forged")], [])

    def test_an_id_of_thousands_of_digits_is_ordered_without_int(self):
        # int() refuses a run of more than 4300 digits (Python 3.9.14 and later); the order must not need it
        long_one, long_nine = "q" + "0" * 4400 + "1", "q" + "9" * 5000  # the numbers 1 and 10**5000 - 1
        ranked = sorted([long_nine, "q10", long_one, "q2", "q02"], key=rag_eval._natural_order)
        self.assertEqual(ranked, [long_one, "q02", "q2", "q10", long_nine])  # 02 ties 2 as a number, then by text
        with tempfile.TemporaryDirectory() as tmp:
            qrels, run = os.path.join(tmp, "q.json"), os.path.join(tmp, "r.json")
            with open(qrels, "w") as out:
                json.dump({long_one: {"a": 1}, "q2": {"b": 1}}, out)
            with open(run, "w") as out:  # a run's ids stop at 4,096 bytes: the long one is a qrels query it skipped
                json.dump({"q2": ["b"]}, out)
            code, out, err = run_main([qrels, run, "--per-query", "--format", "table"])
        self.assertEqual(code, 0, err[-300:])
        self.assertLess(out.index(long_one), out.index("q2 "))


class TestMarkdownShowsHtmlAsText(helpers.TempDirMixin, unittest.TestCase):
    """Markdown lands in a pull-request comment or a step summary, which render HTML: an id is a code span in cells
    and lines, other text has its <, > and & as entities, and a code span cannot be closed by an id's own backtick.
    Kills: a cell, heading line, summary line or code span that passes an id's HTML through."""

    IDS = ("<script>x</script>", "a&b", "t`<b>`")

    def test_ids_in_cells_lines_and_code_spans(self):
        qrels = self.write("q.json", {qid: {"d": 1} for qid in self.IDS})
        baseline = self.path("base.json")
        self.assertEqual(run_main([qrels, self.write("r.json", {qid: ["d"] for qid in self.IDS}),
                                   "--save-baseline", baseline])[0], 0)
        worse = self.write("w.json", {qid: ["z", "d"] for qid in self.IDS})
        summary = self.path("summary.md")
        code, out, _ = run_main([qrels, worse, f"other={worse}", "--baseline", baseline, "--format", "markdown"],
                                {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary})
        self.assertEqual(code, rag_eval.EXIT_REGRESSION)
        with open(summary, encoding="utf-8") as f:
            written = f.read()
        code, single, _ = run_main([qrels, worse, "--baseline", baseline, "--format", "markdown", "--per-query"])
        for name, text in (("comparison", out), ("summary", written), ("one run", single)):
            with self.subTest(name):
                outside = re.sub(r"(`+) ?(.*?) ?\1", "", text)  # what is not in a code span is rendered
                ours = outside.replace("(adjusted p >= 0.05)", "")  # the method line's own text
                self.assertNotRegex(ours.replace("<details>", "").replace("</details>", "")
                                    .replace("<summary>", "").replace("</summary>", ""), "[<>]|&(?!amp;|lt;|gt;)")
        cells = [line for line in single.splitlines() if line.startswith("| ")]
        self.assertIn("| `<script>x</script>` | ", "\n".join(cells))  # a code span shows HTML as text
        self.assertIn("| `a&b` | ", "\n".join(cells))  # and an entity too: no &amp; in it
        self.assertIn("`` t`<b>` ``", single)  # the code span shows the id as written (GitHub: t`<b>`)
        self.assertIn("`<script>x</script>`", single)

    def test_no_mention_link_or_image_from_the_inputs(self):
        # An id, a slice's or run's name and a --meta value rendered as a mention, an image and a link in the per-query
        # table, the slice table, the heading's context lines and the provenance (the comment is posted by the bot).
        qid = "@octocat ![p](https://evil.example/p.png) [login](https://evil.example) #1 a|b"
        tag = "@team ![s](https//evil.example/s.png) [x](https//evil.example)"  # a slice's name has no ':'
        qrels = {qid: {"a": 2, "b": 1}, "q2": {"c": 1}, "q3": {"d": 1}}
        regraded = self.write("q_new.json", dict(qrels, **{qid: {"a": 2, "b": 2}}))  # the label change names qid
        baseline = self.path("base.json")
        self.assertEqual(run_main([self.write("q.json", qrels), self.write("r.json", {q: sorted(g) for q, g in qrels.items()}),
                                   "--save-baseline", baseline, "--meta", f"embedder={qid}"])[0], 0)
        worse = self.write("w.json", {qid: ["z", "b"], "q2": ["c"], "q3": ["z"]})
        argv = [regraded, worse, "--baseline", baseline, "--allow-qrels-change", "--format", "markdown",
                "--meta", "embedder=x [y](https//evil.example)", "--slices", self.write("s.json", {qid: tag, "q2": tag}),
                "--max-drop", f"{tag}:recall@5=0"]
        summary = self.path("summary.md")
        code, single, _ = run_main(argv + ["--per-query"], {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary})
        self.assertEqual(code, rag_eval.EXIT_REGRESSION)
        with open(summary, encoding="utf-8") as f:
            written = f.read()
        run_name = "@octocat ![p](evil.example) [login](evil.example)"  # a run's name has no path separator
        code, compared, _ = run_main(argv[:2] + [f"{run_name}={worse}"] + argv[2:])
        self.assertEqual(code, rag_eval.EXIT_REGRESSION)
        for name, text in (("one run", single), ("summary", written), ("comparison", compared)):
            with self.subTest(name):
                rendered = re.sub(r"(`+) ?(.*?) ?\1", "", text)  # what is not in a code span renders
                for markup in ("@octocat", "@team", "](", "evil.example", "#1"):
                    self.assertNotIn(markup, rendered)
                markdown_tables(text)  # the | of an id splits no row
        self.assertIn("1 regraded in 1 query (`@octocat ![p](https://evil.example/p.png) [login](https://evil.example) #1 a|b`"
                      " +0 -0 ~1)", single)
        self.assertIn("| `@octocat ![p](https://evil.example/p.png) [login](https://evil.example) #1 a\\|b` | recall@5 |",
                      single)  # in a table, GitHub reads \\| in a code span as |
        self.assertIn("| `@team ![s](https//evil.example/s.png) [x](https//evil.example)`:recall@5 | 0.7500 |", single)
        self.assertIn("| `embedder` | `x [y](https//evil.example)` |", written)

    def test_code_span(self):
        for text, expected in (("q1", "`q1`"), ("a`b", "``a`b``"), ("`x``", "``` `x`` ```"), ("", "``")):
            with self.subTest(text):
                self.assertEqual(rag_eval._code_span(text), expected)


class TestCodeSpanPadding(unittest.TestCase):
    """Found by a planted bug (mutants3): a code span is padded when the text starts with a backtick."""

    def test_a_code_span_is_padded_when_it_starts_with_a_backtick(self):
        # CommonMark strips one space on each side: `` `a `` shows `a, where ```a`` would open a longer fence.
        for text, expected in (("`a", "`` `a ``"), ("a`", "`` a` ``"), ("`", "`` ` ``")):
            with self.subTest(text=text):
                self.assertEqual(rag_eval._code_span(text), expected)


class TestReportText(ReportCase, unittest.TestCase):
    """Report text that planted bugs (mutants3, round 2) changed unseen; each expected text written out."""

    def test_junit_cases_say_the_numbers_with_four_digits(self):
        # The fixtures against the shipped baseline: mrr@5 0.55 -> 0.5 and recall@5 0.7 -> 0.6667 fell more than 0.02.
        junit = self.path("junit.xml")
        self.ok([QRELS, RUN, "--baseline", BASELINE, "--junit", junit], expected_code=1)
        texts = {case.get("name"): (case.find("failure") if case.find("failure") is not None
                                    else case.find("system-out")).text
                 for case in ElementTree.parse(junit).getroot().iter("testcase")}
        self.assertEqual(texts, {"mrr@5": "baseline 0.5500, now 0.5000, allowed drop 0.0200",
                                 "ndcg@5": "pass: baseline 0.5200, now 0.5095, allowed drop 0.0200",
                                 "recall@5": "baseline 0.7000, now 0.6667, allowed drop 0.0200",
                                 "success@5": "pass: baseline 0.6667, now 0.6667, allowed drop 0.0200"})

    def test_a_cut_summary_closes_only_a_details_left_open(self):
        # limit 1000: the first 600 bytes are kept up to their last line end: the 21-byte first line and 114 of
        # the 5-byte lines, plus "line" (600 = 21 + 115 * 5 + 4); 1001 - 115 = 886 lines cut.  <details> was closed.
        text = "<details>x</details>\n" + "line\n" * 1000
        self.assertEqual(rag_eval._cut_markdown(text, 1000),
                         "<details>x</details>\n" + "line\n" * 114 + "line\n\n*Cut here: 886 more lines would pass "
                         "GitHub's 1 MiB limit; --output writes every query's scores.*\n")

    def test_a_cut_summary_is_not_fooled_by_an_id_that_closes_details(self):
        # The query id "</details>" shows as a code span in a cell: the tool's own <details> is still open.
        text = "<details><summary>Per query</summary>\n\n" + "| `</details>` | 0.5000 |\n" * 300 + "\n</details>\n"
        cut = rag_eval._cut_markdown(text, 1000)
        self.assertIn("| 0.5000 |\n\n</details>\n\n*Cut here: ", cut)

    def test_explain_says_which_measures_are_reported_by_default(self):
        code, out, _ = run_main(["--explain"])
        self.assertEqual(code, 0)
        roles = re.findall(r"^  \((reported [^;]*);", out, re.M)
        self.assertEqual(roles[:6], ["reported by default"] * 4 + ["reported with --measures precision",
                                                                    "reported with --measures ap"])


if __name__ == "__main__":
    unittest.main()


class TestGainIsNamed(ReportCase, unittest.TestCase):
    """Issue 33: nDCG's default gain (exp) differs from BEIR's, MTEB's, ir_measures' and ranx's (linear): every
    human report names it under the metric table, and the JSON report has it."""

    EXP = "nDCG gain: exp, 2**grade - 1 (BEIR, MTEB, ir_measures and ranx report linear: --gain linear)"

    def test_every_human_report_names_it(self):
        for fmt in ("table", "markdown"):
            with self.subTest(fmt=fmt):
                self.assertIn(self.EXP, self.ok([QRELS, RUN, "--format", fmt])[0].splitlines())
                linear = self.ok([QRELS, RUN, "--format", fmt, "--gain", "linear"])[0].splitlines()
                self.assertIn("nDCG gain: linear, the grade (as BEIR, MTEB, ir_measures, ranx)", linear)
                compared = self.ok([QRELS, f"a={RUN}", f"b={RUN}", "--format", fmt])[0]
                self.assertIn(self.EXP, compared.splitlines())
                self.assertNotIn("nDCG gain", self.ok([QRELS, RUN, "--format", fmt, "--measures", "recall"])[0])
        self.assertEqual(json.loads(self.ok([QRELS, RUN])[0])["gain"], "exp")
        self.assertEqual(json.loads(self.ok([QRELS, RUN, "--gain", "linear"])[0])["gain"], "linear")
