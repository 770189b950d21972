"""Reading inputs: the readers' lines, blocks and last lines, errors located by
file and line, standard input read as a file, TREC blocks, the reduced path
for deep runs (equal to the whole path value for value, and against
trec_eval's per-query output), limits and hostile runs in bounded memory.
"""

import gc
import gzip
import io
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import unittest
import warnings
from itertools import chain
from unittest import mock

import rag_eval
from tests.helpers import BASELINE, ERROR_PREFIX, QRELS, RUN, assert_error_line, child_env, fixture_qrels_variants, fixture_run_variants, load_fixtures, run_main, TempDirMixin


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


HUGE = os.environ.get("RAG_EVAL_HUGE") == "1"


FULL = os.environ.get("RAG_EVAL_FULL") == "1"  # CI's full runs (3.9, 3.13) compare twice the random runs


MEASURES = [m.name for m in rag_eval.MEASURES]


def random_case(rng, fmt):
    """Qrels (TREC, negative grades included) and a run in ``fmt`` with ties, duplicates and unjudged ids."""
    queries = [f"q{i}" for i in range(rng.randint(1, 6))]
    chunk = rng.random() < 0.5  # ids like d3#1: --doc-id-sep has chunks to roll up
    pool = [f"d{i}#{c}" if chunk else f"d{i}" for i in range(rng.randint(2, 30)) for c in range(rng.choice((1, 3)) if chunk else 1)]
    qrels_lines = []
    for qid in queries:
        for docid in rng.sample(pool, rng.randint(1, min(8, len(pool)))):
            qrels_lines.append(f"{qid} 0 {docid} {rng.choice((-1, 0, 0, 1, 1, 2, 3))}\n")
    run_queries = list(queries)
    if rng.random() < 0.3:
        run_queries.append("unknown-" + str(rng.randint(0, 9)))
    rows = []
    for qid in run_queries:
        if rng.random() < 0.1:
            continue  # a judged query the run skipped
        scores = [rng.choice((1.0, 2.0, 2.0, 3.0)) if rng.random() < 0.5 else round(rng.random(), 2)
                  for _ in range(rng.randint(0, rng.choice((40, 40, 200))))]
        for score in scores:
            rows.append((qid, rng.choice(pool), score))  # repeats of an id are duplicates
    if fmt == "trec":
        text = "".join(f"{qid} Q0 {docid} 1 {score} tag\n" for qid, docid, score in rows)
    elif fmt == "jsonl-scored":
        text = "".join(json.dumps({"query_id": qid, "doc_id": docid, "score": score}) + "\n" for qid, docid, score in rows)
    elif fmt == "jsonl-ranked":
        text = "".join(json.dumps({"query_id": qid, "doc_id": docid}) + "\n" for qid, docid, score in rows)
    elif fmt == "json-scored":
        run = {}
        for qid, docid, score in rows:
            run.setdefault(qid, {})[docid] = max(score, run.get(qid, {}).get(docid, score))
        text = json.dumps(run)
    else:  # json-ranked
        run = {}
        for qid, docid, _ in rows:
            run.setdefault(qid, []).append(docid)
        text = json.dumps(run)
    return "".join(qrels_lines), text, bool(rows) and run_queries[-1].startswith("unknown")


cli = run_main  # main in-process: (exit code, stdout, stderr)


class TestReducedEqualsWhole(unittest.TestCase):
    """The reduced path against the whole path, value for value, on seeded random runs."""

    CASES = 100 if FULL else 50
    FORMATS = ("trec", "jsonl-scored", "jsonl-ranked", "json-scored", "json-ranked")

    def outcomes(self, qrels_path, run_path, cutoffs, options):
        """(whole path, reduced path): each (found any judged, evaluate's result), or ("error", message)."""
        qrels = rag_eval.read_qrels(qrels_path)
        sep = options.get("doc_id_sep")
        judged = rag_eval._documents_qrels(qrels, sep) if sep else qrels
        keep = rag_eval._judged_filter(judged, options.get("min_grade", 1)) if options.get("judged_only") else None
        results, kind = [], "error"
        for reduce in (None, cutoffs):
            try:
                run, found, repeated, _ = rag_eval._read_run(run_path, "auto", max(cutoffs) + 1, keep, sep, judged, reduce)
                kind = type(run).__name__
                result = rag_eval.evaluate(qrels, run, cutoffs, measures=MEASURES, **options)
                results.append((found, result, repeated))  # the documents listed twice: counted alike on both paths
            except rag_eval.RagEvalError as exc:
                results.append(("error", str(exc)))
        return results[0], kind, results[1]

    def compare(self, qrels_path, run_path, cutoffs, options, reduced=True):
        whole, kind, reduced_result = self.outcomes(qrels_path, run_path, cutoffs, options)
        self.assertEqual(whole, reduced_result)
        if whole[0] != "error":
            self.assertEqual(kind, "_ReducedRun" if reduced else "dict")
        return whole

    def random_cases(self, tmp, count):
        rng = random.Random(20240618)
        for case in range(count):
            fmt = self.FORMATS[case % len(self.FORMATS)]
            qrels_text, run_text, unknown = random_case(rng, fmt)
            qrels_path = write(tmp, f"qrels{case}.txt", qrels_text)
            run_path = write(tmp, f"run{case}", run_text)
            cutoffs = sorted(rng.sample((1, 2, 3, 5, 10, 50, 1000), rng.randint(1, 3)))
            options = {"doc_id_sep": rng.choice((None, None, "#")), "judged_only": rng.random() < 0.3,
                       "min_grade": rng.choice((1, 1, 2)), "gain": rng.choice(("exp", "linear")),
                       "drop_unknown_queries": rng.random() < 0.7,
                       "abstain_below": rng.choice((None, None, 1.5)) if "ranked" not in fmt else None}
            yield case, fmt, qrels_path, run_path, cutoffs, options

    def test_random_runs(self):
        seen = set()
        with tempfile.TemporaryDirectory() as tmp:
            for case, fmt, qrels, run, cutoffs, options in self.random_cases(tmp, self.CASES):
                with self.subTest(case=case, fmt=fmt, cutoffs=cutoffs, options=options):
                    outcome = self.compare(qrels, run, cutoffs, options)
                    seen.add(fmt + (" error" if outcome[0] == "error" else " ok"))
        self.assertGreaterEqual(len({name for name in seen if name.endswith(" ok")}), len(self.FORMATS), seen)

    def test_random_runs_in_small_blocks_read_whole(self):
        """Blocks of about 300 bytes, read whole at every depth: queries cross blocks, and some are pruned."""
        saved = rag_eval._READ_BLOCK
        rag_eval._READ_BLOCK = 300
        try:
            with tempfile.TemporaryDirectory() as tmp:
                for case, fmt, qrels, run, cutoffs, options in self.random_cases(tmp, 60):
                    with self.subTest(case=case, fmt=fmt, cutoffs=cutoffs, options=options):
                        self.compare(qrels, run, cutoffs, options)
        finally:
            rag_eval._READ_BLOCK = saved

    def test_a_planted_off_by_one_is_caught(self):
        """The random comparison finds a reduced path that ranks judged documents one place too low."""
        original = rag_eval._Reducer._add

        def shifted(self, qid, length, ranks, tied, best):  # each judged document one place too low
            original(self, qid, length + 1, [(rank + 1, docid) for rank, docid in ranks], tied, best)

        differing = 0
        rag_eval._Reducer._add = shifted
        try:
            with tempfile.TemporaryDirectory() as tmp:
                for case, fmt, qrels, run, cutoffs, options in self.random_cases(tmp, 40):
                    whole, _, reduced = self.outcomes(qrels, run, cutoffs, options)
                    differing += whole != reduced
        finally:
            rag_eval._Reducer._add = original
        self.assertGreater(differing, 10)

    def test_interleaved_queries_are_read_again_whole(self):
        with tempfile.TemporaryDirectory() as tmp:
            qrels = write(tmp, "qrels", "q1 0 a 1\nq2 0 b 1\nq1 0 c 2\n")
            run = write(tmp, "run", "q1 Q0 a 1 1 t\nq2 Q0 b 1 1 t\nq1 Q0 x 1 2 t\nq1 Q0 c 1 1 t\nq2 Q0 a 1 3 t\n")
            found, result, _ = self.compare(qrels, run, [1, 2, 3], {}, reduced=False)
            self.assertEqual(result["per_query"]["q1"]["recall@2"], 0.5)  # x (2), then c before a (1): docid descending

    def test_ties_with_judged_documents_follow_the_docid_rule(self):
        # Every score ties: the docid decides, descending: z, y (judged, 2), b, a (judged, 1).
        with tempfile.TemporaryDirectory() as tmp:
            qrels = write(tmp, "qrels", "q1 0 y 2\nq1 0 a 1\n")
            run = write(tmp, "run", "".join(f"q1 Q0 {d} 1 5 t\n" for d in "abyz"))
            found, result, _ = self.compare(qrels, run, [1, 2, 3, 4], {})
            self.assertEqual(result["per_query"]["q1"]["mrr@2"], 1 / 2)  # y at rank 2
            self.assertEqual(result["per_query"]["q1"]["recall@3"], 1 / 2)  # a at rank 4
            self.assertEqual(result["ties"], {"1": 1, "2": 1, "3": 1, "4": 0})

    def test_command_line_reduced_and_whole_print_the_same(self):
        """--unjudged reads the whole run: stdout is the same as the reduced path's, at k up to 1000."""
        rng = random.Random(7)
        with tempfile.TemporaryDirectory() as tmp:
            qrels_text, run_text, _ = random_case(rng, "trec")
            qrels = write(tmp, "qrels", qrels_text)
            run = write(tmp, "run", run_text)
            argv = [qrels, run, "--k", "1,10,1000", "--measures", ",".join(MEASURES), "--digits", "17",
                    "--per-query", "--drop-unknown-queries"]
            reduced = cli(argv)
            worklist = os.path.join(tmp, "worklist.jsonl")
            code, out, err = cli(argv + ["--unjudged", worklist])
            err = "".join(line for line in err.splitlines(True) if not line.startswith(
                (f"rag_eval: note: wrote {worklist}\n", "rag_eval: note: to label: ")))
            self.assertEqual(reduced, (code, out, err))


CONFORMANCE = os.path.join(os.path.dirname(HERE), "shared", "conformance", "trec_eval")


@unittest.skipUnless(os.path.isdir(CONFORMANCE), "trec_eval's test collection is not beside the repository")
class TestReducedAgainstTrecEval(unittest.TestCase):
    """The command line's reduced path at k = 1000 against trec_eval's own per-query output."""

    NAMES = {"P": "precision", "recall": "recall", "ndcg_cut": "ndcg", "map_cut": "ap"}

    def check(self, out_name, qrels_name, run_name, *options):
        golden = {}
        with open(os.path.join(CONFORMANCE, out_name)) as lines:
            for line in lines:
                measure, qid, value = line.split()
                name, _, cutoff = measure.rpartition("_")
                if name in self.NAMES and cutoff in ("10", "100", "1000") and qid != "all":
                    golden[(qid, f"{self.NAMES[name]}@{cutoff}")] = float(value)
        code, out, err = cli([os.path.join(CONFORMANCE, qrels_name), os.path.join(CONFORMANCE, run_name),
                              "--k", "10,100,1000", "--measures", "recall,ndcg,precision,ap", "--gain", "linear",
                              "--per-query", "--digits", "17", *options])
        self.assertEqual(code, 0, err)
        per_query = json.loads(out)["per_query"]
        compared = 0
        for (qid, metric), expected in sorted(golden.items()):
            if qid in per_query:
                with self.subTest(out_name, qid=qid, metric=metric):
                    self.assertAlmostEqual(per_query[qid][metric], expected, delta=5e-5)  # 4 decimals printed
                    compared += 1
        return compared

    def test_out_test_aq(self):
        self.assertGreater(self.check("out.test.aq", "qrels.test", "results.test"), 20)

    def test_out_test_aql(self):
        self.assertGreater(self.check("out.test.aql", "qrels.rel_level", "results.test", "--min-grade", "2"), 20)


class TestStreamedJson(unittest.TestCase):
    def test_streamed_json_equals_the_whole_document_in_tiny_blocks(self):
        """Blocks of 7 bytes: every query crosses blocks; valid or broken, the result or the error is the same."""
        rng = random.Random(3)
        block = rag_eval._READ_BLOCK
        rag_eval._READ_BLOCK = 7
        streamed = 0
        try:
            with tempfile.TemporaryDirectory() as tmp:
                for case in range(200):
                    run = {f"q{i}": {f"d{j}": rng.choice([1, 2.5, -3e2]) for j in range(rng.randint(0, 6))}
                           if rng.random() < 0.5 else [f"d{j}" for j in range(rng.randint(0, 5))]
                           for i in range(rng.randint(1, 5))}
                    if rng.random() < 0.2:  # a value of the wrong kind
                        run["qz"] = rng.choice([None, 5, "x", True, [1], ["a", None], {"a": "b"}, {"a": None}])
                    text = json.dumps(run, indent=rng.choice([None, 1]))
                    if rng.random() < 0.4:  # break it somewhere
                        at = rng.randrange(len(text))
                        text = text[:at] + rng.choice(["", "}", ",", '"', "x", '{"q0": 1}', " "]) + text[at + 1:]
                    path = write(tmp, "run.json", text)
                    outcomes = []
                    for stream in (False, True):
                        try:
                            outcomes.append(rag_eval._read_run_once(path, "json", rag_eval._ReadOptions(max_bytes=1 << 30),
                                                                    plain=not stream))
                        except rag_eval._ReadAgain:
                            outcomes.append("read again")
                        except rag_eval.RagEvalError as exc:
                            outcomes.append(str(exc))
                    if outcomes[1] != "read again":
                        streamed += 1
                        self.assertEqual(outcomes[0], outcomes[1], text)
        finally:
            rag_eval._READ_BLOCK = block
        self.assertGreater(streamed, 100)

    def test_errors_read_the_document_again_and_say_what_they_always_said(self):
        with tempfile.TemporaryDirectory() as tmp:
            qrels = write(tmp, "qrels", "q1 0 a 1\n")
            for text, message in (('{"q1": ["a"], "q1": ["b"]}', "duplicated key 'q1' in a JSON object"),
                                  ('{"q1": {"a": 1, "a": 2}}', "duplicated key 'a' in a JSON object"),
                                  ('{"q1": ["a"], "q2": 5}', "query 'q2': expected a list of document ids"),
                                  ('{"q1": ["a"]', "invalid JSON: Expecting ',' delimiter"),
                                  ('{"q1": ["a"]} x', "invalid JSON: Extra data")):
                with self.subTest(text):
                    code, out, err = cli([qrels, write(tmp, "run.json", text)])
                    self.assertEqual(code, 2)
                    self.assertIn(message, err)


class TestLimits(unittest.TestCase):
    def test_long_ids_are_an_error_naming_the_line(self):
        long = "d" * (rag_eval._MAX_ID + 1)
        with tempfile.TemporaryDirectory() as tmp:
            qrels = write(tmp, "qrels", "q1 0 a 1\n")
            for name, text, line in (
                    ("trec", f"q1 Q0 a 1 1 t\nq1 Q0 {long} 2 0.5 t\n", 2),
                    ("trec-qid", f"q1 Q0 a 1 1 t\n{long} Q0 a 2 0.5 t\n", 2),
                    ("jsonl", json.dumps({"query_id": "q1", "doc_id": long, "score": 1}) + "\n", 1)):
                with self.subTest(name):
                    run = write(tmp, name, text)
                    code, out, err = cli([qrels, run])
                    self.assertEqual(code, 2)
                    assert_error_line(self, err, file=run, line=line, names=[f" {rag_eval._MAX_ID} "])

    def test_an_earlier_bad_line_is_reported_first(self):
        long = "d" * (rag_eval._MAX_ID + 1)
        with tempfile.TemporaryDirectory() as tmp:
            qrels = write(tmp, "qrels", "q1 0 a 1\n")
            code, out, err = cli([qrels, write(tmp, "run", f"q1 Q0 a 1 x t\nq1 Q0 {long} 2 0.5 t\n")])
            assert_error_line(self, err, file=os.path.join(tmp, "run"), line=1, quoted=["x"])

    def test_input_larger_than_the_cap_is_an_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            qrels = write(tmp, "qrels", "q1 0 a 1\n")
            run = os.path.join(tmp, "run.gz")
            with gzip.open(run, "wt") as out:
                out.write("q1 Q0 a 1 1 t\n" * 10_000)  # 140,000 bytes after gunzip
            code, out, err = cli([qrels, run, "--max-input-bytes", "100000"])
            self.assertEqual(code, 2)
            assert_error_line(self, err, file=run, names=[" 100000 ", "--max-input-bytes"])
            self.assertEqual(cli([qrels, run, "--max-input-bytes", "2000000"])[0], 0)

    def test_unknown_queries_are_counted_not_kept(self):
        with tempfile.TemporaryDirectory() as tmp:
            qrels = write(tmp, "qrels", "q1 0 a 1\n")
            run = write(tmp, "run", "q1 Q0 a 1 1 t\n" + "".join(f"u{i} Q0 a 1 1 t\n" for i in range(30)))
            code, out, err = cli([qrels, run])
            self.assertEqual(code, 2)
            assert_error_line(self, err, file=run, names=[" 30 "], quoted=["u0", "q1"])
            code, out, err = cli([qrels, run, "--drop-unknown-queries"])
            self.assertEqual(code, 0)
            self.assertEqual(len([line for line in err.splitlines() if " 30 " in line and line.startswith("rag_eval: ")]),
                             1, err)
            self.assertEqual(json.loads(out)["dropped"], sorted(f"u{i}" for i in range(30)))

    def test_too_many_unknown_queries_end_the_read(self):
        for prefix, quoted in (("u", "'u10'"), ("S" * 40, "'SSSSSSSSSSSSSSSS'...")):  # a long id is clipped
            with self.subTest(quoted), tempfile.TemporaryDirectory() as tmp:
                qrels = write(tmp, "qrels", "q1 0 a 1\n")
                run = write(tmp, "run", "q1 Q0 a 1 1 t\n" + "".join(f"{prefix}{i} Q0 a 1 1 t\n" for i in range(40)))
                limit = rag_eval._MAX_UNKNOWN_QUERIES
                rag_eval._MAX_UNKNOWN_QUERIES = 10
                try:
                    code, out, err = cli([qrels, run, "--drop-unknown-queries"])
                finally:
                    rag_eval._MAX_UNKNOWN_QUERIES = limit
                self.assertEqual(code, 2)
                assert_error_line(self, err, file=run, names=[" 10 ", quoted])


# Runs rag_eval's main() in a child of its own and prints the child's exit code and peak RSS (MiB) as JSON.
PEAK = r"""
import json, resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1 << 10)
print(json.dumps({"rc": proc.returncode, "peak": peak, "stderr": proc.stderr.decode(errors="replace")}))
"""


MAIN = "import sys, rag_eval; rag_eval._MAX_UNKNOWN_QUERIES = int(sys.argv[1]); sys.exit(rag_eval.main(sys.argv[2:]))"


@unittest.skipIf(sys.platform == "win32", "resource is POSIX only")
class TestHostileRuns(unittest.TestCase):
    """The inputs of issue 18's attack table end in a result or one error line, in bounded memory.

    By default at a small scale (a few seconds in all); RAG_EVAL_HUGE=1 runs
    them at the table's sizes (gigabytes inflated, minutes), where the old
    readers took 4 to 6 GB or ran out of memory.
    """

    SCALE = 1 if HUGE else 1 / 512
    LIMIT_MB = 1024 if HUGE else 200

    def run_peak(self, argv, unknown_cap=rag_eval._MAX_UNKNOWN_QUERIES):
        command = [sys.executable, "-c", MAIN, str(unknown_cap), *argv]
        out = subprocess.run([sys.executable, "-c", PEAK, *command], cwd=HERE, env=child_env(), capture_output=True,
                             text=True)
        result = json.loads(out.stdout)
        if HUGE:  # the figures for the record
            print(f"\n{self.id()}: exit {result['rc']}, peak {result['peak']:.0f} MiB, {result['stderr'].strip()[:160]}")
        self.assertLess(result["peak"], self.LIMIT_MB, result)
        if result["rc"] == 2:
            self.assertEqual(len(result["stderr"].splitlines()), 1, result["stderr"])
        return result

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.qrels = write(self.tmp, "qrels", "q1 0 d1 1\n")

    def tearDown(self):
        import shutil
        shutil.rmtree(self.tmp)

    def gzipped(self, name, chunks):
        path = os.path.join(self.tmp, name)
        with gzip.open(path, "wb", compresslevel=1) as out:
            for chunk in chunks:
                out.write(chunk)
        return path

    def test_a_ranked_json_run_of_one_query(self):
        count = int(256 * 2**20 * self.SCALE / 16)
        ids = (f'"d{n:012d}", ' for n in range(count))
        path = self.gzipped("run.json.gz", chain([b'{"q1": ["d1", '], (i.encode() for i in ids), [b'"d2"]}']))
        result = self.run_peak([self.qrels, path, "--k", "10"])
        self.assertEqual(result["rc"], 0, result)

    def test_long_document_ids(self):
        size = 60 * 2**20 if HUGE else 64 * 2**10
        path = self.gzipped("run.gz", [b"q1 Q0 d1 1 2 t\n"] + [b"q1 Q0 " + bytes([97 + n % 26]) * size + b" 1 1 t\n"
                                                                for n in range(70)])
        result = self.run_peak([self.qrels, path])
        self.assertEqual(result["rc"], 2)
        assert_error_line(self, result["stderr"], file=path, line=2, names=[" 4096 "])

    def test_many_queries_the_qrels_lack(self):
        count = 10_000_000 if HUGE else 20_000
        lines = (f"u{n} Q0 d1 1 1 t\n".encode() for n in range(count))
        path = self.gzipped("run.gz", chain([b"q1 Q0 d1 1 1 t\n"], lines))
        result = self.run_peak([self.qrels, path, "--drop-unknown-queries"], unknown_cap=200_000 if HUGE else 1000)
        self.assertEqual(result["rc"], 2)
        assert_error_line(self, result["stderr"], file=path, names=[" 200000 " if HUGE else " 1000 "])

    def test_a_jsonl_run_without_scores_of_one_query(self):
        count = 10_000_000 if HUGE else 20_000
        rows = (f'{{"query_id": "q1", "doc_id": "d{n}"}}\n'.encode() for n in range(count))
        path = self.gzipped("run.jsonl.gz", rows)
        result = self.run_peak([self.qrels, path, "--k", "10"])
        self.assertEqual(result["rc"], 0, result)

    def test_a_gzip_bomb_of_one_valid_line(self):
        size = 2**30 if HUGE else 4 * 2**20
        line = b"q1 Q0 d1 1 1 t\n"
        block = line * (2**20 // len(line))
        path = self.gzipped("run.gz", (block for _ in range(size // len(block))))
        result = self.run_peak([self.qrels, path, "--max-input-bytes", str(size // 4)])
        self.assertEqual(result["rc"], 2)
        assert_error_line(self, result["stderr"], file=path, names=[f" {size // 4} ", "--max-input-bytes"])


# The fixtures, worked by hand, k = 5.
# q1 grades: refund-policy#2 = 2, refund-policy#3 = 1
#    run:    shipping#1 (unjudged), refund-policy#2 (2), refund-policy#9 (unjudged),
#            refund-policy#3 (1), returns-faq#1 (unjudged)
# q2 grades: sla-uptime#1 = 2; the run never retrieves it
# q3 grades: sso-setup#4 = 2, sso-setup#5 = 2, okta-guide#1 = 1
#    run:    sso-setup#5 (2), okta-guide#1 (1), sso-setup#1, scim#2, sso-setup#4 (2)
# q4 grades: pricing#3 = 0 only -> unscored
Q1_NDCG5 = (3 / math.log2(3) + 1 / math.log2(5)) / (3 + 1 / math.log2(3))  # grades 2 @2, 1 @4; ideal 2, 1


Q3_NDCG5 = (3 + 1 / math.log2(3) + 3 / math.log2(6)) / (3 + 3 / math.log2(3) + 1 / math.log2(4))  # 2 @1, 1 @2, 2 @5; ideal 2, 2, 1


FIXTURE_MEANS = {
    "recall@5": (1 + 0 + 1) / 3,
    "success@5": (1 + 0 + 1) / 3,
    "mrr@5": (1 / 2 + 0 + 1) / 3,
    "ndcg@5": (Q1_NDCG5 + 0 + Q3_NDCG5) / 3,
}


class TestReadingInputs(TempDirMixin, unittest.TestCase):
    def fixture_result(self):
        return rag_eval.evaluate(*load_fixtures(), k=5)

    def test_formats_detected_from_content(self):
        expected = self.fixture_result()
        qrels_variants = fixture_qrels_variants()
        run_variants = fixture_run_variants()
        for qlabel, (qname, qdata) in qrels_variants.items():
            for rlabel, (rname, rdata) in run_variants.items():
                for gz in (False, True):
                    with self.subTest(qrels=qlabel, run=rlabel, gzip=gz):
                        comp = gzip.compress if gz else bytes
                        qpath = self.write(qname, comp(qdata))
                        rpath = self.write(rname, comp(rdata))
                        qrels = rag_eval.read_qrels(qpath)
                        self.assertEqual(qrels, load_fixtures()[0])
                        result = rag_eval.evaluate(qrels, rag_eval.read_run(rpath), k=5)
                        for key in ("queries", "unscored", "skipped", "dropped", "per_query"):
                            self.assertEqual(result[key], expected[key], key)
                        for metric, value in FIXTURE_MEANS.items():
                            self.assertAlmostEqual(result["mean"][metric], value, places=12)

    def test_scored_line_runs_read_as_scores(self):
        run_variants = fixture_run_variants()
        _, rdata = run_variants["trec (named .json)"]
        run = rag_eval.read_run(self.write("r", rdata))
        # q1 ranked shipping#1, refund-policy#2, ... -> scores 5, 4, 3, 2, 1
        self.assertEqual(run["q1"], {"shipping#1": 5.0, "refund-policy#2": 4.0, "refund-policy#9": 3.0,
                                     "refund-policy#3": 2.0, "returns-faq#1": 1.0})

    def test_format_override(self):
        # A JSONL run whose rows carry a nested field: the override reads it as JSONL.
        rows = "".join(
            json.dumps({"query_id": "q1", "doc_id": d, "score": s, "meta": {"page": [1, 2]}}) + "\n"
            for d, s in [("refund-policy#2", 2.0), ("shipping#1", 1.0)]
        )
        qpath = self.write("q.json", json.dumps({"q1": {"refund-policy#2": 1}}))
        rpath = self.write("r.json", rows)
        self.assertEqual(rag_eval.read_run(rpath, "jsonl"), {"q1": {"refund-policy#2": 2.0, "shipping#1": 1.0}})
        code, out, err = run_main([qpath, rpath, "--run-format", "jsonl"])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["mean"]["mrr@5"], 1 / 1)  # grade 1 at rank 1
        # TREC qrels forced to be read as JSON: the override is obeyed, so it is invalid JSON.
        tpath = self.write("q.trec", "q1 0 refund-policy#2 1\n")
        code, out, err = run_main([tpath, rpath, "--qrels-format", "json", "--run-format", "jsonl"])
        self.assertEqual(code, 2)
        self.assertIn(tpath, err)
        self.assertIn("JSON", err)
        # and forcing trec on a TREC file is the same as detecting it
        self.assertEqual(rag_eval.read_qrels(tpath, "trec"), rag_eval.read_qrels(tpath))

    def test_ids_are_kept_verbatim(self):
        """Identifiers are strings, always: no whitespace inside one is touched."""
        for label, doc in [("two spaces", "a  b"), ("no-break space", "a\u00a0b"), ("line separator", "a\u2028b")]:
            with self.subTest(label):
                row = {"query_id": "q1", "doc_id": doc, "relevance": 1}
                path = self.write("q.jsonl", json.dumps(row, ensure_ascii=False) + "\n")
                self.assertEqual(rag_eval.read_qrels(path), {"q1": {doc: 1}})
                row = {"query_id": "q1", "doc_id": doc, "score": 1.0}
                path = self.write("r.jsonl", json.dumps(row, ensure_ascii=False) + "\n")
                self.assertEqual(rag_eval.read_run(path), {"q1": {doc: 1.0}})
        # TREC separates fields with ASCII blanks and tabs; a no-break space is part of the id.
        # (Split on every Unicode space, "a\u00a0b 1 1.0 t" reads as doc "a" with score 1.)
        path = self.write("r.trec", "q1 Q0 a\u00a0b 1 1.0 t\n")
        self.assertEqual(rag_eval.read_run(path), {"q1": {"a\u00a0b": 1.0}})

    def test_empty_json_run(self):
        """A run with no query is the same on one line as over two."""
        for text in ("{\n}\n", "{}", "{}\n"):
            with self.subTest(text=text):
                try:
                    run = rag_eval.read_run(self.write("r.json", text))
                except rag_eval.RagEvalError as exc:
                    self.fail(f"rejected: {exc}")
                self.assertEqual(run, {})

    def test_bom_is_skipped(self):
        qpath = self.write("q.json", b"\xef\xbb\xbf" + json.dumps({"q1": {"a": 1}}).encode())
        self.assertEqual(rag_eval.read_qrels(qpath), {"q1": {"a": 1}})

    def test_trec_run_duplicate_counts_once_with_best_score(self):
        path = self.write("r.trec", (
            "q1 Q0 x 1 3.0 t\n"
            "q1 Q0 a 2 2.0 t\n"
            "q1 Q0 x 3 1.0 t\n"  # x again, lower: x keeps 3.0
            "q1 Q0 a 4 5.0 t\n"  # a again, higher: a takes 5.0
        ))
        run = rag_eval.read_run(path)
        self.assertEqual(run, {"q1": {"x": 3.0, "a": 5.0}})
        # a (grade 1) ranks first by its best score: RR = 1/1, not 1/2
        result = rag_eval.evaluate({"q1": {"a": 1}}, run, k=2)
        self.assertEqual(result["per_query"]["q1"]["mrr"], 1 / 1)

    def test_streamed_trec_run_with_depth(self):
        rnd = random.Random(20240611)
        lines, qrels = [], {}
        for q in range(12):
            qid = f"q{q}"
            docs = [f"d{n:03d}" for n in range(300)]  # enough to make the reader prune
            qrels[qid] = {d: rnd.choice([0, 1, 2]) for d in rnd.sample(docs, 40)}
            qrels[qid][rnd.choice(docs)] = 2  # every query has a relevant document
            for d in docs:
                # one decimal: many ties, which the docid (descending) breaks
                lines.append(f"{qid} Q0 {d} 0 {rnd.randint(0, 30) / 10} run\n")
                if rnd.random() < 0.05:  # a few duplicates, with a lower score
                    lines.append(f"{qid} Q0 {d} 0 -1.0 run\n")
        rnd.shuffle(lines)
        path = self.write("run.trec", "".join(lines))
        full = rag_eval.read_run(path)
        shallow = rag_eval.read_run(path, depth=3)
        self.assertEqual(sorted(shallow), sorted(full))  # every query, so the loop below checks all 12
        self.assertEqual(len(full), 12)
        for qid, scores in shallow.items():
            with self.subTest(qid=qid):
                self.assertEqual(len(scores), 3)
                best3 = sorted(full[qid].items(), key=lambda item: (item[1], item[0]), reverse=True)[:3]
                self.assertEqual(scores, dict(best3))
        for k in ([1, 2], [1, 2, 3]):
            with self.subTest(k=k):
                a = rag_eval.evaluate(qrels, full, k=k, measures=[m.name for m in rag_eval.MEASURES])
                b = rag_eval.evaluate(qrels, shallow, k=k, measures=[m.name for m in rag_eval.MEASURES])
                self.assertEqual(a["mean"], b["mean"])
                self.assertEqual(a["per_query"], b["per_query"])

    def test_depth_must_be_a_positive_integer(self):
        # depth=0 once ended in an IndexError from the pruning, and -1 silently dropped documents.
        path = self.write("run.trec", "q1 Q0 a 1 2.0 t\nq1 Q0 b 2 1.0 t\n")
        self.assertEqual(rag_eval.read_run(path, depth=1), {"q1": {"a": 2.0}})
        for depth in (0, -1, 2.0, True, "3"):
            with self.subTest(depth=depth), self.assertRaisesRegex(rag_eval.RagEvalError, f" {re.escape(repr(depth))}$"):
                rag_eval.read_run(path, depth=depth)

    def test_line_numbers_survive_block_boundaries(self):
        good = "".join(f"q{i % 3} Q0 d{i} {i} {i / 7:.3f} t\n" for i in range(1, 40))  # lines 1..39
        path = self.write("run.trec", good + "\n" + "q1 Q0 d40 40 high t\n")  # blank 40, bad 41
        clean = self.write("clean.trec", good)
        expected = rag_eval.read_run(clean)
        for block in (1, 2, 7, 64, 1 << 22):
            with self.subTest(block=block), mock.patch.object(rag_eval, "_READ_BLOCK", block):
                self.assertEqual(rag_eval.read_run(clean), expected)
                with self.assertRaises(rag_eval.RagEvalError) as ctx:
                    rag_eval.read_run(path)
                self.assertTrue(str(ctx.exception).startswith(f"{path}:41: "), str(ctx.exception))

    def test_jsonl_detected_when_its_first_row_ends_after_the_first_block(self):
        # Detection parses the first line; it once saw only the first block's share of it.
        rows = [{"query_id": "q1", "doc_id": f"d{n}", "score": 1.0 / (n + 1)} for n in range(3)]
        text = "".join(json.dumps(row) + "\n" for row in rows)
        expected = {"q1": {"d0": 1.0, "d1": 0.5, "d2": 1 / 3}}
        # Long for another field than an id: ids are at most MAX_ID bytes.
        long_row = json.dumps({"query_id": "q1", "doc_id": "x", "text": "x" * 200_000, "score": 0.1}) + "\n"
        for name, content in (("blank lines first", "\n" * ((1 << 17) - 5) + text), ("a long first row", long_row + text)):
            for packed in (False, True):
                with self.subTest(name, gzipped=packed):
                    path = self.path("run.jsonl.gz" if packed else "run.jsonl")
                    with (gzip.open(path, "wt", encoding="utf-8") if packed else open(path, "w", encoding="utf-8")) as out:
                        out.write(content)
                    run = rag_eval.read_run(path)
                    self.assertEqual({docid: run["q1"][docid] for docid in expected["q1"]}, expected["q1"])
        one_line = {"q1": {f"d{n}": n / 7 for n in range(20_000)}}  # a JSON document on one line of 400 KB
        self.assertGreater(len(json.dumps(one_line)), 3 * rag_eval._READ_BLOCK)
        self.assertEqual(rag_eval.read_run(self.write("run.json", json.dumps(one_line))), one_line)

    def test_json_shapes(self):
        for what, reader, data in [
            ("qrels top-level list", rag_eval.read_qrels, [{"q1": {"a": 1}}]),
            ("qrels value a list", rag_eval.read_qrels, {"q1": ["a"]}),
            ("qrels value a string", rag_eval.read_qrels, {"q1": "a"}),
            ("qrels grade a fraction", rag_eval.read_qrels, {"q1": {"a": 1.5}}),
            ("run top-level list", rag_eval.read_run, [["a", "b"]]),
            ("run ranking a string", rag_eval.read_run, {"q1": "a"}),
            ("run ranking a number", rag_eval.read_run, {"q1": 5}),
            ("run ranking null", rag_eval.read_run, {"q1": None}),
            ("run ranking of fractions", rag_eval.read_run, {"q1": [1.5, 2]}),
            ("run ranking with null", rag_eval.read_run, {"q1": ["a", None]}),
            ("run score a string", rag_eval.read_run, {"q1": {"a": "1.0"}}),
            ("run score a boolean", rag_eval.read_run, {"q1": {"a": True}}),
        ]:
            for indent in (None, 1):  # on one line and spread over lines
                with self.subTest(what=what, indent=indent):
                    path = self.write("in.json", json.dumps(data, indent=indent))
                    with self.assertRaises(rag_eval.RagEvalError) as ctx:
                        reader(path)
                    self.assertIn(path, str(ctx.exception))

    def test_input_files_are_closed(self):
        """Every file the readers open is closed again (no ResourceWarning)."""
        for reader, path in [(rag_eval.read_qrels, QRELS), (rag_eval.read_run, RUN),
                             (rag_eval.read_baseline, BASELINE)]:
            with self.subTest(reader=reader.__name__):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    reader(path)
                    gc.collect()
                leaks = [w for w in caught if issubclass(w.category, ResourceWarning)]
                self.assertEqual(leaks, [], [str(w.message) for w in leaks])


class TestLineBlocks(TempDirMixin, unittest.TestCase):
    """Line-based files are read in blocks; where the blocks fall never changes what is read or reported."""

    def test_a_lone_cr_in_a_blank_block(self):
        # A blank block was once counted and skipped unchecked, so a lone CR
        # in one passed or failed depending on where the blocks fell.
        good = "".join(f"q{n % 4} Q0 d{n} 1 {n} r\n" for n in range(40))
        blank = "\n" * (1 << 17)  # a block's worth of blank lines before and after: the CR's block is all blank
        path = self.write("cr.trec", good + blank + "   \r   \n" + blank + good)
        for block in (64, 1 << 17):
            with self.subTest(block=block), mock.patch.object(rag_eval, "_READ_BLOCK", block), \
                    self.assertRaisesRegex(rag_eval.RagEvalError, f"^{re.escape(path)}:{41 + (1 << 17)}: "):
                rag_eval.read_run(path)

    def test_a_lone_cr_wherever_the_block_ends(self):
        # A block is checked after the readline that completes its last line: a lone CR in that
        # completed part is found as surely as one in the block proper.
        good = "".join(f"q{n % 4} Q0 d{n} 1 {n} r\n" for n in range(40))
        for role, reader, bad in (("run", rag_eval.read_run, "q1 Q0 d41 41 1.0 tag\rmore\n"),
                                  ("qrels", rag_eval.read_qrels, "q1 0 d41\r 1\n"),
                                  ("jsonl", rag_eval.read_qrels, '{"query_id": "q1", "doc_id": "d\r", "relevance": 1}\n')):
            if role == "qrels":
                lines = "".join(f"q{n % 4} 0 d{n} 1\n" for n in range(40))
            elif role == "jsonl":
                lines = "".join(json.dumps({"query_id": f"q{n % 4}", "doc_id": f"d{n}", "relevance": 1}) + "\n"
                                for n in range(40))
            else:
                lines = good
            path = self.write(f"cr-{role}.txt", lines + bad + lines)
            for block in (1, 5, 64, 1 << 17):
                with self.subTest(role=role, block=block), mock.patch.object(rag_eval, "_READ_BLOCK", block), \
                        self.assertRaisesRegex(rag_eval.RagEvalError, f"^{re.escape(path)}:41: "):
                    reader(path)

    def test_the_longest_line_wherever_it_starts(self):
        # MAX_LINE bytes are allowed, one more is not, wherever the line falls in a block or part.
        for shift in range(0, 200, 23):
            prefix = "".join(f"q1 Q0 s{n} 1 {n} r\n" for n in range(shift // 10)) + "#" * (shift % 10) + "\n"
            for extra, refused in ((0, False), (1, True)):
                filler = "d" * (500 + extra - len("q1 Q0  1 1.0 r"))
                path = self.write(f"long{shift}-{extra}.trec", prefix + f"q1 Q0 {filler} 1 1.0 r\n" + prefix)
                with self.subTest(shift=shift, extra=extra), mock.patch.object(rag_eval, "_MAX_LINE", 500), \
                        mock.patch.object(rag_eval, "_READ_BLOCK", 64):
                    if refused:
                        with self.assertRaisesRegex(rag_eval.RagEvalError, f"^{re.escape(path)}:\\d+: .* MiB$"):
                            rag_eval.read_run(path)
                    else:
                        self.assertIn(filler, rag_eval.read_run(path)["q1"])

    def test_a_line_too_long_is_named_by_its_number(self):
        # In-process, with a small MAX_LINE, what test_bad_inputs.HugeInputs checks with 300 MB lines
        # (RAG_EVAL_FULL=1): the lines before are read, the long one is refused by its own number,
        # whether a line end follows it or not.
        trec = "q1 Q0 refund-policy#2 1 2.0 t\nq1 Q0 shipping#1 2 1.0 t\n" + "x" * 300
        jsonl = ('{"query_id": "q1", "doc_id": "refund-policy#2", "relevance": 2}\n{"query_id": "q1", "doc_id": "'
                 + "x" * 300 + '", "relevance": 1}\n')
        for reader, text, line in ((rag_eval.read_run, trec, 3), (rag_eval.read_qrels, jsonl, 2),
                                   (rag_eval.read_run, trec + "\n" + trec, 3)):
            path = self.write("long.txt", text)
            for block in (1, 7, 64, 150):  # blocks below MAX_LINE, as in rag_eval
                with self.subTest(reader=reader.__name__, line=line, block=block), \
                        mock.patch.object(rag_eval, "_MAX_LINE", 200), mock.patch.object(rag_eval, "_READ_BLOCK", block), \
                        self.assertRaisesRegex(rag_eval.RagEvalError, f"^{re.escape(path)}:{line}: .* \\d+ MiB$"):
                    reader(path)

    def test_an_earlier_line_error_beats_a_later_bad_byte(self):
        # Bytes are checked a block at a time; an error on an earlier line of the same block still comes first.
        good = "".join(f"q1 Q0 d{n} 1 {n} r\n" for n in range(30))
        path = self.write("two.trec", good + "q1 Q0 short\n" + good + "q1 Q0 d 1 2\x00 r\n" + good)
        for block in (1 << 17, 64):
            with self.subTest(block=block), mock.patch.object(rag_eval, "_READ_BLOCK", block), \
                    self.assertRaisesRegex(rag_eval.RagEvalError, ":31: expected 6 fields"):
                rag_eval.read_run(path)

    def test_an_earlier_error_beats_a_line_too_long(self):
        good = "".join(f"q1 Q0 d{n} 1 {n} r\n" for n in range(5))
        long_line = "q1 Q0 " + "d" * 300 + " 1 1.0 r\n"
        for sixth, words in (("q1 Q0 short\n", ":6: expected 6 fields"), ("q1 Q0 d 1 2\x00 r\n", ":6: NUL byte"),
                             ("q1 Q0 d 1 2 r\n", ":7: line longer than")):
            for lines_after in (0, 3, 40):
                path = self.write("long.trec", good + sixth + long_line + good * lines_after)
                for block in (1, 7, 64, 97):  # blocks below MAX_LINE, as in rag_eval
                    with self.subTest(sixth=sixth, after=lines_after, block=block), \
                            mock.patch.object(rag_eval, "_MAX_LINE", 100), mock.patch.object(rag_eval, "_READ_BLOCK", block), \
                            self.assertRaisesRegex(rag_eval.RagEvalError, words):
                        rag_eval.read_run(path)


class TestTheLastLine(TempDirMixin, unittest.TestCase):
    """The last line of a line-based file counts, whether or not a line end follows it.

    Each file below ends in a line that holds a query of its own (a reader
    that dropped the last line would lose the query) and, in the second form,
    one more document of a query seen before (it would lose a document).
    Every form is read with LF and with CRLF line ends, with the last line
    terminated or not, gzipped or not, and with read blocks from 1 byte (the
    lines then come from the readline that completes each block) to the
    default: a line is the same wherever the blocks fall.
    """

    BLOCKS = (1, 5, 64, rag_eval._READ_BLOCK)
    # (query, document, grade or score); the last row is the one a careless reader drops
    ROWS = [("q1", "refund-policy#2", 2), ("q1", "refund-policy#3", 1), ("q2", "sla-uptime#1", 2)]
    LAST_ROWS = {"a query of its own": ("q9", "last#doc", 1), "a query seen before": ("q1", "last#doc", 1)}

    @staticmethod
    def qrels_lines(rows, layout):
        if layout == "trec":
            return [f"{q} 0 {d} {g}" for q, d, g in rows]
        if layout == "beir":
            return ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{g}" for q, d, g in rows]
        if layout == "beir, no header":
            return [f"{q}\t{d}\t{g}" for q, d, g in rows]
        return [json.dumps({"query_id": q, "doc_id": d, "relevance": g}) for q, d, g in rows]

    @staticmethod
    def run_lines(rows, layout):
        if layout == "trec":
            return [f"{q} Q0 {d} {n} {10 - n} tag" for n, (q, d, _) in enumerate(rows, 1)]
        if layout == "jsonl scored":
            return [json.dumps({"query_id": q, "doc_id": d, "score": 10 - n}) for n, (q, d, _) in enumerate(rows, 1)]
        return [json.dumps({"query_id": q, "doc_id": d}) for q, d, _ in rows]  # jsonl, file order ranks

    @staticmethod
    def expected_qrels(rows):
        qrels = {}
        for q, d, g in rows:
            qrels.setdefault(q, {})[d] = g
        return qrels

    @staticmethod
    def expected_run(rows, layout):
        run = {}
        for n, (q, d, _) in enumerate(rows, 1):
            if layout == "jsonl":
                run.setdefault(q, []).append(d)
            else:
                run.setdefault(q, {})[d] = float(10 - n)
        return run

    def forms(self, lines):
        """(label, bytes): LF or CRLF, the last line terminated or not, plain or gzipped."""
        for eol in ("\n", "\r\n"):
            for terminated in (True, False):
                text = eol.join(lines) + (eol if terminated else "")
                data = text.encode("utf-8")
                for gz in (False, True):
                    label = f"{'CRLF' if eol == chr(13) + chr(10) else 'LF'}, last line " \
                            f"{'terminated' if terminated else 'unterminated'}{', gzipped' if gz else ''}"
                    yield label, gzip.compress(data, mtime=0) if gz else data

    files = 0

    def check(self, reader, lines, expected, **options):
        for label, data in self.forms(lines):
            self.files += 1
            path = self.write(f"input{self.files}", data)  # a new name: truncating a file costs more than a new one
            for block in self.BLOCKS:
                with self.subTest(form=label, block=block), mock.patch.object(rag_eval, "_READ_BLOCK", block):
                    self.assertEqual(reader(path, **options), expected)

    def test_qrels(self):
        for layout in ("trec", "beir", "beir, no header", "jsonl"):
            for where, last in self.LAST_ROWS.items():
                rows = self.ROWS + [last]
                with self.subTest(layout=layout, last=where):
                    self.check(rag_eval.read_qrels, self.qrels_lines(rows, layout), self.expected_qrels(rows))

    def test_runs(self):
        for layout in ("trec", "jsonl scored", "jsonl"):
            for where, last in self.LAST_ROWS.items():
                rows = self.ROWS + [last]
                with self.subTest(layout=layout, last=where):
                    self.check(rag_eval.read_run, self.run_lines(rows, layout), self.expected_run(rows, layout))
                    # streamed with a depth, as the command line reads runs
                    self.check(rag_eval.read_run, self.run_lines(rows, layout), self.expected_run(rows, layout),
                               depth=5)

    def test_a_file_of_one_unterminated_line(self):
        row = [("q1", "only#1", 2)]
        for layout in ("trec", "beir, no header", "jsonl"):
            with self.subTest(qrels=layout):
                self.check(rag_eval.read_qrels, self.qrels_lines(row, layout), self.expected_qrels(row))
        for layout in ("trec", "jsonl scored", "jsonl"):
            with self.subTest(run=layout):
                self.check(rag_eval.read_run, self.run_lines(row, layout), self.expected_run(row, layout))

    def test_a_last_line_of_blanks_or_a_comment_adds_nothing(self):
        rows = self.ROWS
        for tail in ("   ", "\t", "# a comment, unterminated"):
            for layout in ("trec", "beir"):
                with self.subTest(qrels=layout, tail=tail):
                    self.check(rag_eval.read_qrels, self.qrels_lines(rows, layout) + [tail], self.expected_qrels(rows))
            with self.subTest(run="trec", tail=tail):
                self.check(rag_eval.read_run, self.run_lines(rows, "trec") + [tail], self.expected_run(rows, "trec"))

    def test_the_command_line_scores_the_last_line(self):
        # q2's only judgment and its only retrieved document are both on an unterminated last line:
        # q1 finds its document at rank 2, q2 at rank 1, so mrr@5 = (1/2 + 1) / 2 and recall@5 = 1.
        qrels = {"trec": "q1 0 a 1\r\nq2 0 b 1", "beir": "query-id\tcorpus-id\tscore\nq1\ta\t1\nq2\tb\t1",
                 "jsonl": '{"query_id": "q1", "doc_id": "a", "relevance": 1}\n'
                          '{"query_id": "q2", "doc_id": "b", "relevance": 1}'}
        runs = {"trec": "q1 Q0 x 1 2 t\nq1 Q0 a 2 1 t\r\nq2 Q0 b 1 1 t",
                "jsonl": '{"query_id": "q1", "doc_id": "x"}\n{"query_id": "q1", "doc_id": "a"}\r\n'
                         '{"query_id": "q2", "doc_id": "b"}'}
        for qrels_layout, qrels_text in qrels.items():
            for run_layout, run_text in runs.items():
                with self.subTest(qrels=qrels_layout, run=run_layout):
                    code, out, err = run_main([self.write("q.txt", qrels_text), self.write("r.txt", run_text)])
                    self.assertEqual(code, 0, err)
                    report = json.loads(out)
                    self.assertEqual(report["queries"], 2, out)
                    self.assertEqual(report["mean"]["mrr@5"], (1 / 2 + 1) / 2, out)
                    self.assertEqual(report["mean"]["recall@5"], 1.0, out)


class TestLineFormatErrors(TempDirMixin, unittest.TestCase):
    """Errors in line-based files name the file and the line: ``path:line: what``."""

    RUN_LINE = "q1 Q0 d1 1 1.0 t\n"
    QRELS_LINE = "q1 0 d1 1\n"

    def check(self, role, content, line, words):
        path = self.write("input.txt", content)
        qrels = path if role == "qrels" else self.write("q.trec", self.QRELS_LINE)
        run = path if role == "run" else self.write("r.trec", self.RUN_LINE)
        code, out, err = run_main([qrels, run])
        self.assertEqual(code, 2, err)
        self.assertEqual(out, "")
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith(f"{ERROR_PREFIX}{path}:{line}: "), lines[0])
        for word in words:
            self.assertIn(word, lines[0])

    def test_a_byte_order_mark_inside_a_jsonl_file(self):
        # Two files joined with cat: the second one's BOM starts a line.
        row = '{"query_id": "q1", "doc_id": "d1", "score": 1.0}\n'
        self.check("run", row + "\ufeff" + row, 2, ["byte order mark", "joined"])

    def test_trec_run(self):
        sixteen = "".join(f"q1 Q0 d{i} {i} {1 / i} t\n" for i in range(1, 17))
        for label, content, line, words in [
            ("5 fields at line 17", sixteen + "q1 Q0 d17 17 0.01\n", 17,
             ["expected 6 fields (qid Q0 docid rank score tag), got 5"]),
            ("3 fields", "q1 Q0 d1\n", 1, ["got 3"]),
            ("score not a number", self.RUN_LINE + "q1 Q0 d2 2 high t\n", 2, ["score", "'high'"]),
            ("score inf", self.RUN_LINE * 2 + "q1 Q0 d2 2 inf t\n", 3, ["score", "finite"]),
            ("score -Infinity", self.RUN_LINE * 2 + "q1 Q0 d2 2 -Infinity t\n", 3, ["score", "finite"]),
            ("score nan", self.RUN_LINE * 2 + "q1 Q0 d2 2 nan t\n", 3, ["score", "finite"]),
            ("score 1e999 overflows", self.RUN_LINE * 2 + "q1 Q0 d2 2 1e999 t\n", 3, ["score", "finite"]),
            ("blank lines are counted", self.RUN_LINE + "\n\n" + "q1 Q0 d2 2 x t\n", 4, ["score"]),
            ("CRLF line ends", self.RUN_LINE.replace("\n", "\r\n") * 2 + "q1 Q0 d2 2 x t\r\n", 3, ["score"]),
            ("not UTF-8", self.RUN_LINE * 2 + "q1 Q0 d\xff 2 1.0 t\n", 3, ["UTF-8"]),
        ]:
            with self.subTest(label):
                if label == "not UTF-8":
                    content = content.encode("latin-1")
                self.check("run", content, line, words)

    def test_trec_qrels(self):
        head = "# qid iter docid grade\n" + self.QRELS_LINE  # lines 1 and 2
        for label, content, line, words in [
            ("grade 1.5", head + "q1 0 d2 1.5\n", 3, ["grade", "integer", "'1.5'"]),
            ("grade x", head + "q1 0 d2 x\n", 3, ["grade", "integer"]),
            ("grade true", head + "q1 0 d2 true\n", 3, ["grade", "integer"]),
            ("grade --1", head + "q1 0 d2 --1\n", 3, ["grade", "integer"]),
            ("grade +-1", head + "q1 0 d2 +-1\n", 3, ["grade", "integer"]),
            ("5 fields", head + "q1 0 d2 1 extra\n", 3, ["expected 4 fields"]),
            ("2 fields", head + "q1 d2\n", 3, ["expected 4 fields"]),
            ("conflicting grades", head + "q1 0 d1 2\n", 3, ["conflicting", "'d1'"]),
            ("beir grade 1.5", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t1.5\n", 3, ["grade"]),
            # BEIR's header is a header on the first line only: further down it is a judgment that lost a
            # field (TREC), or two files joined (BEIR), never a line to skip.
            ("beir header in a trec file", head + "query-id\tcorpus-id\tscore\nq1 0 d2 1\n", 3,
             ["expected 4 fields", "got 3"]),
            ("beir header again", "query-id\tcorpus-id\tscore\nq1\td1\t1\nquery-id\tcorpus-id\tscore\nq1\td2\t1\n", 3,
             ["grade must be an integer", "'score'"]),
            ("not UTF-8", head + "q1 0 d\xff 1\n", 3, ["UTF-8"]),
        ]:
            with self.subTest(label):
                if label == "not UTF-8":
                    content = content.encode("latin-1")
                self.check("qrels", content, line, words)

    def test_jsonl(self):
        def row(**fields):
            return json.dumps(fields) + "\n"

        first = row(query_id="q1", doc_id="d1", relevance=1)
        first_run = row(query_id="q1", doc_id="d1", score=1.0)
        for label, role, content, line, words in [
            ("grade 1.5", "qrels", first + row(query_id="q1", doc_id="d2", relevance=1.5), 2, ["grade", "integer"]),
            ("grade '2'", "qrels", first + row(query_id="q1", doc_id="d2", relevance="2"), 2, ["grade", "integer"]),
            ("grade true", "qrels", first + row(query_id="q1", doc_id="d2", relevance=True), 2, ["grade", "integer"]),
            ("grade null", "qrels", first + row(query_id="q1", doc_id="d2", relevance=None), 2, ["grade", "integer"]),
            ("no doc id", "qrels", first + row(query_id="q1", relevance=1), 2, ["document id"]),
            ("doc id a fraction", "qrels", first + row(query_id="q1", doc_id=7.5, relevance=1), 2, ["document id"]),
            ("invalid JSON", "qrels", first + '{"query_id": "q1",\n', 2, ["invalid JSON"]),
            ("a list per line", "qrels", first + '["q1", "d2", 1]\n', 2, ["JSON object"]),
            ("duplicated key", "qrels", first + '{"query_id": "q1", "doc_id": "a", "doc_id": "b", "relevance": 1}\n',
             2, ["duplicated key", "'doc_id'"]),
            ("NaN grade", "qrels", first + '{"query_id": "q1", "doc_id": "d2", "relevance": NaN}\n', 2, ["NaN"]),
            ("score a string", "run", first_run + row(query_id="q1", doc_id="d2", score="high"), 2, ["score"]),
            ("score a boolean", "run", first_run + row(query_id="q1", doc_id="d2", score=True), 2, ["score"]),
            ("score Infinity", "run", first_run + '{"query_id": "q1", "doc_id": "d2", "score": Infinity}\n',
             2, ["Infinity"]),
            ("score 1e999", "run", first_run + '{"query_id": "q1", "doc_id": "d2", "score": 1e999}\n',
             2, ["score", "finite"]),
            ("some rows without score", "run", first_run + row(query_id="q1", doc_id="d2"), 2, ["score"]),
        ]:
            with self.subTest(label):
                self.check(role, content, line, words)


class TestTheLastLineInEveryReader(TempDirMixin, unittest.TestCase):
    """An unterminated last line counts in every reader the command line can reach.

    TestTheLastLine covers the library's readers; here each run layout (TREC,
    JSONL scored and ranked, MS MARCO, a header TSV scored or ranked, a CSV) and
    each qrels layout is given to ``main`` from a file (the run reduced as it
    is read), gzipped, from standard input (read plainly, once), and with
    --unjudged (read plainly, to a depth).  In every file q2's only judgment,
    or its only retrieved document, is the last line, unterminated: q1 finds
    its document at rank 2, q2 at rank 1, so mrr@5 = (1/2 + 1) / 2; a reader
    that dropped the run's last line would give (1/2 + 0) / 2, and one that
    dropped the qrels' last line would refuse q2 as a query the qrels lack.
    """

    # (query, document): q1 ranks x then a; q2 ranks b
    RUN_ROWS = [("q1", "x"), ("q1", "a"), ("q2", "b")]
    QRELS_ROWS = [("q1", "a"), ("q2", "b")]

    def run_layouts(self):
        rows = list(enumerate(self.RUN_ROWS))  # (place, (query, document)), the score 9 - place
        return {
            "trec": [f"{q} Q0 {d} {n + 1} {9 - n} t" for n, (q, d) in rows],
            "jsonl scored": [json.dumps({"query_id": q, "doc_id": d, "score": 9 - n}) for n, (q, d) in rows],
            "jsonl ranked": [json.dumps({"query_id": q, "doc_id": d}) for _, (q, d) in rows],
            "ms marco": ["q1\tx\t1", "q1\ta\t2", "q2\tb\t1"],
            "header tsv, scored": ["qid\tdocno\tscore"] + [f"{q}\t{d}\t{9 - n}" for n, (q, d) in rows],
            "header tsv, ranked": ["qid\tdocno\trank", "q1\tx\t0", "q1\ta\t1", "q2\tb\t0"],
            "header csv": ["query_id,doc_id,score"] + [f"{q},{d},{9 - n}" for n, (q, d) in rows],
        }

    def qrels_layouts(self):
        rows = self.QRELS_ROWS
        return {
            "trec": [f"{q} 0 {d} 1" for q, d in rows],
            "beir": ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t1" for q, d in rows],
            "jsonl": [json.dumps({"query_id": q, "doc_id": d, "relevance": 1}) for q, d in rows],
            "header tsv": ["qid\tdocno\tlabel"] + [f"{q}\t{d}\t1" for q, d in rows],
        }

    def score(self, qrels, run, stdin=None, options=()):
        if stdin is None:
            return run_main([qrels, run, *options])
        with mock.patch("sys.stdin") as fake:
            fake.buffer = io.BufferedReader(io.BytesIO(stdin))
            return run_main([qrels, run, *options])

    def check(self, code, out, err):
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual(report["queries"], 2, out)
        self.assertEqual(report["mean"]["mrr@5"], (1 / 2 + 1) / 2, out)

    def deliveries(self, lines, name):
        """(label, path or '-', bytes for standard input or None, options) of one unterminated file."""
        for eol in ("\n", "\r\n"):
            data = eol.join(lines).encode("utf-8")  # no line end after the last line
            label = "CRLF" if eol == "\r\n" else "LF"
            yield label, self.write(f"{name}-{len(eol)}", data), None, ()
            yield f"{label}, gzipped", self.write(f"{name}-{len(eol)}.gz", gzip.compress(data, mtime=0)), None, ()
            yield f"{label}, standard input", "-", data, ()
            worklist = ("--unjudged", self.path(f"unjudged-{name}-{len(eol)}.jsonl"))
            yield f"{label}, --unjudged", self.write(f"{name}-{len(eol)}-u", data), None, worklist

    def test_every_run_layout(self):
        qrels = self.write("qrels.trec", "q1 0 a 1\nq2 0 b 1\n")
        for layout, lines in self.run_layouts().items():
            for label, run, stdin, options in self.deliveries(lines, "run"):
                with self.subTest(run=layout, delivery=label):
                    self.check(*self.score(qrels, run, stdin, options))

    def test_every_qrels_layout(self):
        run = self.write("run.trec", "q1 Q0 x 1 9 t\nq1 Q0 a 2 8 t\nq2 Q0 b 1 7 t\n")
        for layout, lines in self.qrels_layouts().items():
            for label, qrels, stdin, _ in self.deliveries(lines, "qrels"):
                with self.subTest(qrels=layout, delivery=label):
                    self.check(*self.score(qrels, run, stdin))

    def test_read_run_at_every_depth(self):
        """The library's read_run: the unterminated file reads as the terminated one, at any depth."""
        for layout, lines in self.run_layouts().items():
            ended = self.write(f"ended-{layout}", "\n".join(lines) + "\n")
            unended = self.write(f"unended-{layout}", "\n".join(lines))
            for depth in (None, 1, 2, 1000):
                with self.subTest(run=layout, depth=depth):
                    run = rag_eval.read_run(unended, depth=depth)
                    self.assertEqual(run, rag_eval.read_run(ended, depth=depth))
                    self.assertEqual(list(run["q2"]), ["b"])  # the last line's query, whole


class TestHeaderFileRows(TempDirMixin, unittest.TestCase):
    """A file under a header line (PyTerrier's ``qid docno label``): each row has exactly as many
    values as the header names, one delimiter ending the line being allowed; a grade that is not an
    integer is named as such, and suggests a swapped run only under a ``score`` column."""

    def error(self, qrels_text):
        qrels = self.write("qrels.tsv", qrels_text)
        code, out, err = run_main([qrels, self.write("run.trec", "q1 Q0 d1 1 1 t\n")])
        self.assertEqual((code, out), (2, ""), err)
        return err.strip().replace(qrels, "QRELS")

    def test_a_delimiter_may_end_a_row(self):
        qrels = rag_eval.read_qrels(self.write("qrels.tsv", "qid\tdocno\tlabel\nq1\td1\t1\t\nq1\td2\t2\n"))
        self.assertEqual(qrels, {"q1": {"d1": 1, "d2": 2}})

    def test_a_value_more_is_an_error_even_if_the_header_ends_in_a_delimiter(self):
        for header in ("qid\tdocno\tlabel", "qid\tdocno\tlabel\t"):
            with self.subTest(header=header):
                assert_error_line(self, self.error(f"{header}\nq1\td1\t1\t9\n"), file="QRELS", line=2, names=[" 3 ", " 4"])

    def test_only_a_csv_row_with_an_open_quote_hints_at_a_line_break(self):
        assert_error_line(self, self.error('qid,docno,label\nq1,"d\n1",1\n'), file="QRELS", line=2,
                          names=[" 3 ", " 2; a quoted value that holds a line break?"])
        for text in ('qid\tdocno\tlabel\nq1\td"1\t1\t9\n',  # a quote in a TSV value is a character like any other
                     'qid,docno,label\nq1,"d1",1,9\n'):  # its quotes closed: no line break in it
            line = assert_error_line(self, self.error(text), file="QRELS", line=2, names=[" 3 ", " 4"])
            self.assertNotIn(";", line)  # no hint

    def test_an_empty_grade_is_a_bad_grade_not_a_missing_field(self):
        assert_error_line(self, self.error("qid\tdocno\tlabel\nq1\td1\t\n"), file="QRELS", line=2, quoted=[""])

    def test_only_a_score_column_suggests_a_run(self):
        line = assert_error_line(self, self.error("qid\tdocno\tlabel\nq1\td1\t0.5\n"), file="QRELS", line=2, quoted=["0.5"])
        self.assertNotIn(";", line)  # no hint
        assert_error_line(self, self.error("qid\tdocno\tscore\nq1\td1\t0.5\n"), file="QRELS", line=2, quoted=["0.5"],
                          names=["; is this a run? the order is QRELS RUN"])


def write(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return path


def read(path, *args):
    """``_read_run``, with a reduced run turned into plain data; an error as its message."""
    try:
        got = rag_eval._read_run(path, *args)
    except rag_eval.RagEvalError as exc:
        return str(exc)
    run = {qid: entry if isinstance(entry, list) else dict(entry) for qid, entry in got.run.items()}
    return run, getattr(got.run, "unknown", None), got.any_judged, tuple(got.repeated)


def from_stdin(path, *args):
    """``read`` of the file given as standard input."""
    with open(path, "rb") as data, mock.patch("sys.stdin") as stdin:
        stdin.buffer = data
        return read("-", *args)


def random_rows(rng, queries=4, apart=False):
    """(qid, docid, score) rows: repeated documents, tied scores, and with ``apart`` a query's rows apart."""
    rows = [(f"q{q}", f"d{rng.randint(0, 30)}#{rng.randint(0, 2)}", rng.choice([1.0, 2.5, 3.0, 0.5]))
            for q in range(queries) for _ in range(rng.randint(0, 40))]
    if apart:
        rng.shuffle(rows)
    return rows


class TestStandardInputJsonIsReadAsAFile(unittest.TestCase):
    """A JSON run on standard input is parsed whole (it cannot be read twice), then read by the same code as a
    streamed file: cut to the depth, filtered, mapped to documents, and its ids' length checked the same."""

    def test_the_same_run_from_a_file_and_from_standard_input(self):
        rng = random.Random(7)
        qrels = {f"q{q}": {f"d{d}": rng.randint(0, 2) for d in range(5)} for q in range(4)}
        keep = rag_eval._judged_filter(qrels, 1)
        with tempfile.TemporaryDirectory() as tmp:
            for case in range(60):
                rows = random_rows(rng)
                shape = case % 3
                run = {}
                for qid, docid, score in rows:
                    if shape == 0:
                        run.setdefault(qid, []).append(docid)  # ranked, documents listed twice
                    elif shape == 1:
                        run.setdefault(qid, {})[docid] = score
                    else:
                        run.setdefault(qid, []).append([docid, score])  # [doc, score] pairs
                path = write(tmp, "run.json", json.dumps(run))
                for depth, sep, keep_it in ((None, None, None), (3, None, None), (5, "#", keep), (2, "#", None)):
                    args = ("auto", depth, keep_it, sep, qrels)
                    with self.subTest(case=case, depth=depth, sep=sep, keep=keep_it is not None):
                        self.assertEqual(from_stdin(path, *args), read(path, *args))

    def test_an_id_too_long_is_refused_there_too(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = write(tmp, "run.json", json.dumps({"q1": {"a" * (rag_eval._MAX_ID + 1): 1.0}}))
            for got in (read(path), from_stdin(path)):
                self.assertRegex(got, r"query 'q1': an id longer than 4096 bytes$")
            # Exactly MAX_ID bytes is fine, however many characters (2 bytes each here).
            fine = {"q1": {"a" * rag_eval._MAX_ID: 1.0, "\u00e9" * (rag_eval._MAX_ID // 2): 2.0}}
            path = write(tmp, "run.json", json.dumps(fine))
            self.assertEqual(read(path), from_stdin(path))
            self.assertEqual(rag_eval.read_run(path), fine)

    def test_numbers_cut_by_a_block_are_read_whole_while_streaming(self):
        """A value cut by a block is incomplete, not invalid: the stream reads on, not the file again."""
        run = {"q1": {"a": 12345.678, "b": -5e-4, "c": 100}, "q2": [["d", 98765], ["e", 1.25]]}
        expected = {"q1": run["q1"], "q2": {"d": 98765, "e": 1.25}}
        saved = rag_eval._READ_BLOCK
        with tempfile.TemporaryDirectory() as tmp:
            path = write(tmp, "run.json", json.dumps(run))
            try:
                for block in range(1, 16):
                    rag_eval._READ_BLOCK = block
                    streamed = rag_eval._read_run_once(path, "json", rag_eval._ReadOptions(max_bytes=1 << 30), True)
                    self.assertEqual(streamed.run, expected, block)
            finally:
                rag_eval._READ_BLOCK = saved

    def test_grades_up_to_max_grade(self):
        with tempfile.TemporaryDirectory() as tmp:
            for grade, expected in ((rag_eval._MAX_GRADE, {"q1": {"a": rag_eval._MAX_GRADE}}),
                                    (rag_eval._MAX_GRADE + 1, f"grade must be at most {rag_eval._MAX_GRADE}, got ")):
                path = write(tmp, "qrels.trec", f"q1 0 a {grade}\n")
                try:
                    got = rag_eval.read_qrels(path)
                except rag_eval.RagEvalError as exc:
                    got = str(exc)[len(path) + len(":1: "):-len(str(grade))]
                self.assertEqual(got, expected)

    def test_a_document_cut_inside_a_character_is_refused(self):
        """The streamed decoder is told where the file ends: a UTF-8 sequence cut there is no character."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.json")
            with open(path, "wb") as handle:
                handle.write(b'{"q1": ["a"]}\n\xc3')
            self.assertEqual(read(path), f"{path}:2: bytes that are not UTF-8 (byte 0xc3)")
            self.assertEqual(from_stdin(path), "<stdin>:2: bytes that are not UTF-8 (byte 0xc3)")

    def test_errors_are_the_whole_documents(self):
        """Checked whole before it is read query by query: the first wrong entry in the file is the one named."""
        with tempfile.TemporaryDirectory() as tmp:
            for text, message in (('{"q1": 5, "q2": [["a", 1], "b"]}', "query 'q2': expected [document id, score] pairs"),
                                  ('{"q1": ["a"], "q2": {"b": null}}', "query 'q2', document 'b': score must be a finite"),
                                  ('[1, 2]', "expected a JSON object of query -> ranking, got a list"),
                                  ('{"q1": ["a"], "q1": ["b"]}', "duplicated key 'q1' in a JSON object")):
                path = write(tmp, "run.json", text)
                with self.subTest(text):
                    self.assertIn(message, from_stdin(path))
                    self.assertIn(message, read(path))


class TestOneRowReader(unittest.TestCase):
    """JSONL (with and without scores), MS MARCO's ``qid pid rank``, header files and JSON row objects all go
    through ``_rows_run``: read plainly or reduced, contiguous or apart, each gives what TREC gives."""

    def formats(self, tmp, rows):
        """The same ranking in every row format, ranked ones in score order (trec_eval's: ties by docid, descending)."""
        trec = "".join(f"{q} Q0 {d} 0 {s} t\n" for q, d, s in rows)
        order = {}
        for q, d, s in rows:
            order.setdefault(q, {})
            order[q][d] = max(s, order[q].get(d, s))
        ranked = [(q, d, rank) for q, scores in order.items()
                  for rank, d in enumerate(rag_eval._order_scored(scores), 1)]
        return {
            "trec": (write(tmp, "run.trec", trec), True),
            "jsonl": (write(tmp, "run.jsonl", "".join(json.dumps({"query_id": q, "doc_id": d, "score": s}) + "\n"
                                                      for q, d, s in rows)), True),
            "json rows": (write(tmp, "rows.json", json.dumps([{"qid": q, "docno": d, "score": s} for q, d, s in rows])),
                          True),
            "header score": (write(tmp, "run.tsv", "qid\tdocno\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in rows)),
                             True),
            "jsonl ranked": (write(tmp, "ranked.jsonl", "".join(json.dumps({"query_id": q, "doc_id": d}) + "\n"
                                                                for q, d, _ in ranked)), False),
            "msmarco": (write(tmp, "run.msmarco", "".join(f"{q}\t{d}\t{r}\n" for q, d, r in ranked)), False),
            "header rank": (write(tmp, "run.csv", "qid,docno,rank\n" + "".join(f"{q},{d},{r - 1}\n" for q, d, r in ranked)),
                            False),
        }

    def test_every_row_format_scores_as_trec(self):
        rng = random.Random(11)
        with tempfile.TemporaryDirectory() as tmp:
            for case in range(10):  # 25 cases caught no planted bug (mutants3) that 10 and the other tests miss
                rows = random_rows(rng)
                qrels = {f"q{q}": {f"d{d}#0": rng.randint(0, 2) for d in range(0, 30, 3)} for q in range(5)}
                qrels["q0"]["d1#0"] = 2  # a relevant document everywhere
                expected = None
                for name, (path, scored) in self.formats(tmp, rows).items():
                    for cutoffs in (None, [1, 3, 10]):
                        with self.subTest(case=case, format=name, reduced=cutoffs is not None):
                            got = rag_eval._read_run(path, "auto", 11, None, None, qrels, cutoffs)
                            result = rag_eval.evaluate(qrels, got.run, [1, 3, 10], drop_unknown_queries=True)
                            # Ranked formats have no scores to tie, so only the means are compared with TREC's.
                            means = result["mean"]
                            if expected is None:
                                expected = means
                            self.assertEqual(means, expected)
                            self.assertEqual(got.any_judged, True)

    def test_rows_apart_read_plainly_equal_rows_together(self):
        """A query whose rows come apart is read again plainly; the plain read merges its stretches."""
        rng = random.Random(5)
        with tempfile.TemporaryDirectory() as tmp:
            for case in range(80 if FULL else 6):  # 12 cases caught no planted bug (mutants3) that 6 and the others miss
                rows = random_rows(rng, apart=True)
                together = sorted(rows, key=lambda row: row[0])  # stable: each query's rows in their order
                qrels = {f"q{q}": {f"d{d}#1": 1 for d in range(10)} for q in range(3)}
                for depth in (None, 1, 4):
                    for reduced in (False, True):
                        cutoffs = [1, depth] if reduced and depth else None
                        for name, make in (("jsonl", lambda rs: "".join(json.dumps({"query_id": q, "doc_id": d, "score": s})
                                                                         + "\n" for q, d, s in rs)),
                                           ("jsonl ranked", lambda rs: "".join(json.dumps({"query_id": q, "doc_id": d})
                                                                                + "\n" for q, d, _ in rs))):
                            with self.subTest(case=case, format=name, depth=depth, reduced=reduced):
                                apart = read(write(tmp, "apart.jsonl", make(rows)), "auto", depth, None, "#", qrels,
                                             cutoffs)
                                joined = read(write(tmp, "joined.jsonl", make(together)), "auto", depth, None, "#",
                                              qrels, cutoffs if not reduced else None)
                                if isinstance(apart, str):
                                    self.assertEqual(apart, joined)
                                    continue
                                # Read again plainly when apart: the run is the plain one; repeats may differ only
                                # in what "at least" admits, never in what was found.
                                self.assertEqual(apart[0], joined[0])
                                self.assertEqual(apart[2], joined[2])
                                self.assertEqual(apart[3][:2], joined[3][:2])

    def test_a_ranked_query_keeps_its_first_unique_documents_in_file_order(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = write(tmp, "ranked.jsonl", "".join(json.dumps({"query_id": "q1", "doc_id": d}) + "\n"
                                                      for d in ["c", "a", "c", "b", "a", "e", "d"]))
            self.assertEqual(rag_eval.read_run(path), {"q1": ["c", "a", "b", "e", "d"]})
            self.assertEqual(rag_eval.read_run(path, depth=3), {"q1": ["c", "a", "b"]})
            path = write(tmp, "run.msmarco", "q1\tc\t1\nq1\ta\t2\nq2\tx\t1\nq2\ty\t2\nq1\tb\t4\nq1\td\t3\n")
            self.assertEqual(rag_eval.read_run(path), {"q1": ["c", "a", "d", "b"], "q2": ["x", "y"]})
            self.assertEqual(rag_eval.read_run(path, depth=3), {"q1": ["c", "a", "d"], "q2": ["x", "y"]})


class TestStreamedJsonInTinyBlocks(unittest.TestCase):
    """The JSON walker (``_JsonStream.items``) reads objects, ranked lists and row objects the same in blocks
    of a few bytes as whole; escapes and white space between every token included."""

    def test_tiny_blocks(self):
        rng = random.Random(2)
        with tempfile.TemporaryDirectory() as tmp:
            for case in range(40):
                run = {f"q{q}\u00e9": [f"d{rng.randint(0, 9)}" + rng.choice(["", "\\", "\"", "\u2028", "é"])
                                       for _ in range(rng.randint(0, 12))] for q in range(rng.randint(1, 4))}
                if case % 4 == 0:
                    run = [{"query_id": qid, "doc_id": docid} for qid, docs in run.items() for docid in docs] or [{}]
                text = json.dumps(run, indent=rng.choice([None, 0, 2]), ensure_ascii=case % 2 == 0)
                path = write(tmp, "run.json", text)
                whole = read(path, "auto", 5)
                for block in (1, 3, 8):
                    with self.subTest(case=case, block=block), mock.patch.object(rag_eval, "_READ_BLOCK", block):
                        self.assertEqual(read(path, "auto", 5), whole)
                        self.assertEqual(from_stdin(path, "auto", 5), whole)


class TestCopyOfTheQrelsOnStandardInput(unittest.TestCase):
    """The "copy of the qrels" refusal reads the whole run: a run that looks like one only once cut to the
    cutoff or filtered by --judged-only is scored, from a file and from standard input alike."""

    QRELS = {"q1": {"a": 1, "b": 2, "c": 0}, "q2": {"d": 1, "e": 0}}
    CASES = [  # (run, options): the top k + 1 (or the judged documents) are scored by their grades
        ({"q1": {"b": 2, "a": 1, "x": -1}, "q2": {"d": 1, "e": 0, "z": -1}}, ["--k", "1"]),
        ({"q1": {"x": 3, "b": 2, "a": 1}, "q2": {"z": 3, "d": 1, "e": 0}}, ["--k", "5", "--judged-only"]),
    ]

    def main(self, argv, stdin=None):
        from tests.helpers import run_main
        if stdin is None:
            return run_main(argv)
        with open(stdin, "rb") as data, mock.patch("sys.stdin") as standard_input:
            standard_input.buffer = data
            return run_main(argv)

    def test_a_run_that_is_no_copy_is_scored_on_both(self):
        with tempfile.TemporaryDirectory() as folder:
            qrels = write(folder, "qrels.json", json.dumps(self.QRELS))
            for index, (run, options) in enumerate(self.CASES):
                path = write(folder, f"run{index}.json", json.dumps(run))
                with self.subTest(options=options):
                    from_file = self.main([qrels, path] + options)
                    self.assertEqual(from_file[0], 0, from_file[2])
                    from_stdin_ = self.main([qrels, "-"] + options, stdin=path)
                    self.assertEqual(from_stdin_[0], 0, from_stdin_[2])
                    self.assertEqual(from_stdin_[1], from_file[1])

    def test_the_qrels_given_as_the_run_are_still_refused(self):
        with tempfile.TemporaryDirectory() as folder:
            qrels = write(folder, "qrels.json", json.dumps(self.QRELS))
            for argv, stdin in (([qrels, qrels, "--k", "5"], None), ([qrels, "-", "--k", "5"], qrels)):
                code, out, err = self.main(argv, stdin)
                self.assertEqual((code, out), (2, ""))
                assert_error_line(self, err, file=qrels if stdin is None else "<stdin>",
                                  names=["(was the qrels file given as the run?)"])


class TestJsonRunOnStandardInputIsStreamed(unittest.TestCase):
    """A JSON run on standard input is read as from a file, one query at a time: it was parsed whole (1.74 GB
    for a run that takes 94 MB from a file; tools/bench/bench_memory.py).  Its bytes are kept in a temporary
    file as they are read, so what the streamed reader leaves to the plain one still gets the plain one's
    error and line."""

    def test_streamed_and_read_again(self):
        main = TestCopyOfTheQrelsOnStandardInput.main
        with tempfile.TemporaryDirectory() as folder:
            qrels = write(folder, "qrels.trec", "q1 0 a 1\nq2 0 b 1\n")  # TREC: only the run could be parsed whole
            run = write(folder, "run.json", json.dumps({"q1": {"a": 2, "x": 1}, "q2": {"x": 2, "b": 1}}))
            with mock.patch.object(rag_eval, "_parse_json", side_effect=AssertionError("parsed whole")):
                from_stdin = main(None, [qrels, "-", "--format", "json"], stdin=run)
            self.assertEqual(from_stdin, main(None, [qrels, run, "--format", "json"]))
            twice = write(folder, "twice.json", '{"q1": {"a": 2},\n "q1": {"a": 1}}')  # the plain reader's error
            self.assertEqual(main(None, [qrels, "-"], stdin=twice)[2].replace("<stdin>", twice),
                             main(None, [qrels, twice])[2])


class TestMappedAndFilteredOnce(unittest.TestCase):
    """--doc-id-sep and --judged-only apply once to a run: while it is read (reduced from a file, or read whole
    from standard input), or, for --unjudged with --judged-only (which needs the unjudged ids), in evaluate."""

    def test_every_way_of_reading_scores_the_same(self):
        qrels = {"q1": {"a#1": 2, "b#2": 1, "c#1": 0}, "q2": {"d#1": 1}}
        run = {"q1": {"x#1": 5, "a#3": 4, "y#1": 3, "b#1": 2}, "q2": {"z#1": 3, "d#2": 2}}
        main = TestCopyOfTheQrelsOnStandardInput.main
        with tempfile.TemporaryDirectory() as folder:
            qrels_path, run_path = write(folder, "qrels.json", json.dumps(qrels)), write(folder, "run.json", json.dumps(run))
            options = ["--doc-id-sep", "#", "--k", "1", "--measures", "recall,mrr", "--format", "json"]
            for judged_only, expected in ((False, {"recall@1": 0.0, "mrr@1": 0.0}),  # x, z (unjudged) come first
                                          # q1: a (grade 2) of a, b: recall 1/2, mrr 1; q2: d: 1, 1
                                          (True, {"recall@1": (1 / 2 + 1) / 2, "mrr@1": 1.0})):
                for stdin in (False, True):
                    for unjudged in (False, True):
                        argv = [qrels_path, "-" if stdin else run_path] + options + ["--judged-only"] * judged_only
                        argv += ["--unjudged", os.path.join(folder, "u.jsonl")] if unjudged else []
                        with self.subTest(judged_only=judged_only, stdin=stdin, unjudged=unjudged):
                            code, out, err = main(self, argv, stdin=run_path if stdin else None)
                            self.assertEqual(code, 0, err)
                            self.assertEqual(json.loads(out)["mean"], expected)


class TestReaderEdges(unittest.TestCase):
    """Edge cases the lean pass of the input helpers must keep (issue 12): each pins an error message, or
    the step at which a reader gives up."""

    QRELS = "q1 0 a 1\n"

    def main(self, *argv):
        from tests.helpers import run_main
        return run_main(list(argv))

    def test_a_streamed_key_or_id_that_is_not_a_string_is_refused_before_reading_on(self):
        # The stream stops at the first token that cannot be a string, so a tight --max-input-bytes is never
        # reached: the error is the plain reader's, not "more than N bytes".
        padding = ", ".join(f'"d{n}"' for n in range(200))
        cases = [('{"q1": ["a"], \x00"q2": [%s]}' % padding, ":1: "), ('{"q1": ["a", 5.5, %s]}' % padding, ": query 'q1': ")]
        with tempfile.TemporaryDirectory() as folder:
            qrels = write(folder, "qrels.trec", self.QRELS)
            for text, message in cases:
                run = write(folder, "run.json", text)
                with self.subTest(text=text[:20]):
                    code, out, err = self.main(qrels, run, "--max-input-bytes", "300")
                    self.assertEqual((code, out), (2, ""))
                    assert_error_line(self, err, names=[ERROR_PREFIX + run + message])
                    self.assertNotIn("--max-input-bytes", err)  # not the size's error

    def test_the_first_duplicated_key_is_named(self):
        with tempfile.TemporaryDirectory() as folder:
            path = write(folder, "qrels.json", '{"q1": {"a": 1, "b": 2, "b": 1, "a": 2}}')
            with self.assertRaisesRegex(rag_eval.RagEvalError, f"^{re.escape(path)}: [^']*'b'[^']*$"):
                rag_eval.read_qrels(path)

    def test_headers_of_qrels(self):
        cases = [  # (text, judgments or the error's end)
            ("query-id corpus-id score\nq1 d1 1\nq1 d2 0\n", {"q1": {"d1": 1, "d2": 0}}),
            ("QUERY-ID\tCORPUS-ID\tSCORE\nq1\td1\t2\n", {"q1": {"d1": 2}}),
            ("query-id,corpus-id,score\nq1,d1,1\n", {"q1": {"d1": 1}}),  # CSV: the header reader
            ("qid\tdocno\tlabel\nq1\td1\t1\n", {"q1": {"d1": 1}}),
            ("qid\tdocno\tother\nq1\td1\t1\n",
             ":1: the header on line 1 names no grade column (one of label, relevance, grade, rel, score)"),
            ("qid docno\nq1 d1\n", ":1: the header on line 1 names no grade column (one of label, relevance, "
                                   "grade, rel, score)"),
            ("q1 0 d1 1\nq1 d2 1\n", ":2: expected 4 fields (qid iter docid grade), got 3"),
            ("q1 d1 1\nq1 0 d2 1\n", ":2: expected 3 fields (qid docid grade, as BEIR's TSV), got 4"),
            ("q1 Q0 d1 1 2.5 tag\n", ":1: expected 4 fields (qid iter docid grade), got 6; is this a run? the "
                                     "order is QRELS RUN"),
            ("q1 0 d1 1 x\n", ":1: expected 4 fields (qid iter docid grade), got 5"),
        ]
        with tempfile.TemporaryDirectory() as folder:
            for text, expected in cases:
                path = write(folder, "qrels.txt", text)
                with self.subTest(text=text):
                    try:
                        got = rag_eval.read_qrels(path)
                    except rag_eval.RagEvalError as exc:
                        got = str(exc)[len(path):]
                    self.assertEqual(got, expected)

    def test_header_runs_read_the_named_columns(self):
        with tempfile.TemporaryDirectory() as folder:
            scored = write(folder, "run.csv", ",qid,docno,score,docid\n0,q1,b,1.0,7\n1,q1,a,2.0,8\n")
            self.assertEqual(rag_eval.read_run(scored), {"q1": {"b": 1.0, "a": 2.0}})
            ranked = write(folder, "run.tsv", "rank\tdocno\tqid\n2\tb\tq1\n1\ta\tq1\n")
            self.assertEqual(rag_eval.read_run(ranked), {"q1": ["a", "b"]})
            beir = write(folder, "qrels.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\n")
            with self.assertRaisesRegex(rag_eval.RagEvalError, f"^{re.escape(beir)}:1: .*\\(query-id corpus-id score\\)"):
                rag_eval.read_run(beir)


class TestReaderErrorPaths(unittest.TestCase):
    """Paths of the readers that no other test ran (coverage): each pins its error message or its count."""

    def read(self, reader, folder, name, text, *args):
        path = write(folder, name, text)
        try:
            return reader(path, *args)
        except rag_eval.RagEvalError as exc:
            return str(exc)[len(path):]

    def test_errors(self):
        long_id = "x" * (rag_eval._MAX_ID + 1)
        cases = [  # (reader, file name, text, the error after the path)
            (rag_eval._read_chunks, "chunks.jsonl", '{"chunk_id": "c", "doc_id": "d", "start": 0, "end": 5}\n'
             '{"chunk_id": "c", "doc_id": "d", "start": 0, "end": 6}\n', ":2: chunk 'c' is located twice, differently"),
            (rag_eval.read_run, "run.jsonl", '{"qid": "q1", "docid": "a", "relevance": 1}\n',
             ":1: a row with a grade and no score: is this a qrels file? the order is QRELS RUN"),
            (rag_eval.read_run, "run.jsonl", '{"qid": "q1", "docid": "a", "score": 2, "relevance": 1}\n', {"q1": {"a": 2}}),
            (rag_eval._read_corpus, "corpus.jsonl", '{"doc_id": "d", "text": ["a"]}\n', ":1: text must be a string, got a list"),
            (rag_eval._read_corpus, "corpus.jsonl", '{"doc_id": "d", "text": "ab"}\n{"doc_id": "d", "text": "ab"}\n',
             ":2: document 'd' appears twice"),  # even with the same text
            (rag_eval._read_corpus, "corpus.jsonl", '{"doc_id": "d", "text": "a"}\n{"doc_id": "d", "text": "a"}\n',
             ":2: document 'd' appears twice"),  # a one-character text too (Python shares those strings)
            (rag_eval._read_corpus, "corpus.jsonl", '{"doc_id": "d", "text": ""}\n{"doc_id": "d", "text": "b"}\n',
             ":2: document 'd' appears twice"),
            (rag_eval.read_qrels, "qrels.trec", "q1 0 a 1\r\nq1 0 b 1\rq1 0 c 1\n",  # a CRLF before the lone CR
             ":2: a line ends in a lone carriage return (CR); use LF or CRLF line ends"),
            (rag_eval.read_qrels, "qrels.csv", 'qid,"%s"\nq1,d1,1\n' % ("x" * 140_000),  # not a header: too long for csv
             ":1: expected 4 fields (qid iter docid grade), got 1"),
            (rag_eval.read_qrels, "qrels.tsv", "qid\tdocno\tlabel\nq1\td1\tx\n", ":2: grade must be an integer, got 'x'"),
            (rag_eval.read_run, "run.tsv", "1\tp1\t1\n1\tp2\t2\n1\t%s\t3\n" % long_id,
             ":3: document id longer than 4096 bytes"),
            (rag_eval.read_run, "run.json", '{"q1": ["a", "%s"]}' % long_id, ": query 'q1': an id longer than 4096 bytes"),
            (rag_eval.read_run, "run.json", '{"%s": ["a"]}' % long_id,  # a ranked run's query id too, as a scored one's
             ": query 'xxxxxxxxxxxxxxxx'...: an id longer than 4096 bytes"),
        ]
        with tempfile.TemporaryDirectory() as folder:
            for reader, name, text, expected in cases:
                with self.subTest(name=name, text=text[:30]):
                    self.assertEqual(self.read(reader, folder, name, text), expected)
            # JSON that the streamed reader leaves to the plain one: its error, for an evidence run too.
            self.assertEqual(self.read(rag_eval._located_run, folder, "run.json", "[1]", "auto", None),
                             ": expected a JSON object of query -> ranking, got a list")
            with self.assertRaisesRegex(rag_eval.RagEvalError, "/file/x: .*Not a directory$"):
                rag_eval.read_run(os.path.join(write(folder, "file", "x"), "x"))

    def test_the_qrels_are_asked_about_a_query_of_rows_as_it_starts(self):
        """Past MAX_UNKNOWN_QUERIES the run is refused at the first row of the query too many, before its bad row."""
        runs = {"run.tsv": "1\tp1\t1\n7\tp1\t1\n8\tp1\t1\n8\tp2\tx\n",
                "run.jsonl": "".join(json.dumps({"qid": q, "docid": "a", "score": s}) + "\n"
                                     for q, s in (("1", 1), ("7", 1), ("8", 1), ("8", "x")))}
        with tempfile.TemporaryDirectory() as folder, mock.patch.object(rag_eval, "_MAX_UNKNOWN_QUERIES", 1):
            qrels = rag_eval.read_qrels(write(folder, "qrels", "1 0 p1 1\n"))
            for name, text in runs.items():
                with self.subTest(name):
                    self.assertEqual(self.read(rag_eval._read_run, folder, name, text, "auto", 10, None, None, qrels, [1]),
                                     ": more than 1 run queries are not in the qrels (one: '8'); is this a run of these "
                                     "qrels?")

    def test_a_size_cap_reached_in_a_streamed_row_names_the_row_before(self):
        # The stream reads on within a row longer than a block; the error names the last row read, if any.
        row = '{"query_id": "q1", "doc_id": "%s", "score": 1}' % ("d" * 300_000)
        for text, named in (("[%s]" % row, ""), ('[{"query_id": "q1", "doc_id": "d", "score": 1}, %s]' % row, "row 1: ")):
            with tempfile.TemporaryDirectory() as folder, self.subTest(named=named):
                path = write(folder, "run.json", text)
                with self.assertRaises(rag_eval.RagEvalError) as caught:
                    rag_eval._read_run(path, max_bytes=200_000)
                assert_error_line(self, str(caught.exception), file=path, prefix="",
                                  names=[f"{path}: {named}", " 200000 ", "--max-input-bytes"])

    def test_a_json_document_may_be_exactly_its_limit(self):
        text = '{\n"q1": "tag"\n}'  # read in blocks of 4 bytes: the limit is counted as they come
        with tempfile.TemporaryDirectory() as folder, mock.patch.object(rag_eval, "_MAX_SMALL_JSON", len(text)), \
                mock.patch.object(rag_eval, "_READ_BLOCK", 4):
            self.assertEqual(self.read(rag_eval.read_slices, folder, "slices.json", text), {"q1": ["tag"]})
            self.assertEqual(self.read(rag_eval.read_slices, folder, "slices.json", text + " "),
                             f": JSON larger than {len(text) >> 20} MiB")

    def test_no_standard_input(self):
        with mock.patch("sys.stdin", None):
            with self.assertRaisesRegex(rag_eval.RagEvalError, "^<stdin>: there is no standard input to read$"):
                rag_eval.read_run("-")

    def test_json_size_caps(self):
        with tempfile.TemporaryDirectory() as folder:
            with mock.patch.object(rag_eval, "_MAX_JSON_RUN", 1000):
                ranked = '{"q1": [%s]}' % ", ".join(f'"d{n}"' for n in range(1000))
                self.assertEqual(self.read(rag_eval.read_run, folder, "run.json", ranked),
                                 ": JSON larger than 0 MiB; for larger runs use TREC (read up to --max-input-bytes)")
            slices = '{\n%s}' % ",\n".join(f'"q{n}": "tag"' for n in range(rag_eval._READ_BLOCK // 10))
            with mock.patch.object(rag_eval, "_MAX_SMALL_JSON", rag_eval._READ_BLOCK):  # a line per query: not read whole
                self.assertEqual(self.read(rag_eval.read_slices, folder, "slices.json", slices),
                                 ": JSON larger than 0 MiB")

    def test_repeats_of_a_streamed_ranking_longer_than_the_budget(self):
        # q1's lists go to _Repeats in stretches of 3 ids: its repeats across stretches are let go ("at least").
        text = '{"q1": ["a", "b", "c", "a", "d", "b"], "q2": ["a", "a"]}'
        with tempfile.TemporaryDirectory() as folder:
            path = write(folder, "run.json", text)
            self.assertEqual(tuple(rag_eval._read_run(path).repeated), (3, 2, False))
            with mock.patch.object(rag_eval, "_REPEAT_BUDGET", 2):
                read = rag_eval._read_run(path)
            self.assertEqual((read.run, tuple(read.repeated)), ({"q1": ["a", "b", "c", "d"], "q2": ["a"]}, (1, 1, True)))


TREC_QRELS = "q1 0 a 1\nq1 0 b 2\nq1 0 c 1\nq2 0 x 1\nq2 0 y 0\n"


class TestTrecBlocks(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.qrels = rag_eval.read_qrels(write(self.tmp.name, "qrels", TREC_QRELS))
        saved = rag_eval._READ_BLOCK
        self.addCleanup(setattr, rag_eval, "_READ_BLOCK", saved)

    def read(self, text, block, depth=4, cutoffs=(1, 2, 3)):
        """(run as plain dicts, any judged, repeated) or the error, with blocks of ``block`` bytes."""
        rag_eval._READ_BLOCK = block
        try:
            got = rag_eval._read_run(write(self.tmp.name, "run", text), "trec", depth, judged=self.qrels,
                                     cutoffs=None if cutoffs is None else list(cutoffs))
        except rag_eval.RagEvalError as exc:
            return "error", str(exc)
        run = {qid: dict(entry) if isinstance(entry, dict) else entry for qid, entry in got.run.items()}
        self.assertFalse([qid for qid in list(got.run) + getattr(got.run, "unknown", []) if qid.startswith("#")])
        return run, got.any_judged, tuple(got.repeated)

    def same_in_every_block_size(self, text, **options):
        """The outcome, checked equal for blocks of 1 byte (every line alone) up to the whole file."""
        outcomes = {block: self.read(text, block, **options) for block in (1, 7, 40, 100, 1 << 17)}
        first = outcomes[1 << 17]
        for block, outcome in outcomes.items():
            self.assertEqual(outcome, first, f"blocks of {block} bytes")
        return first

    def reduced(self, text):
        run, found, repeated = self.same_in_every_block_size(text)
        return run, found, repeated

    def test_ties_with_judged_documents_follow_the_docid_rule(self):
        # All score 5: docid descending, so c (judged) is 1st, b (judged) 2nd, a0 3rd, a (judged) 4th.
        run, _, _ = self.reduced("".join(f"q1 Q0 {d} 1 5 t\n" for d in ("a", "a0", "b", "c")))
        self.assertEqual(run["q1"].judged, ((1, "c"), (2, "b"), (4, "a")))
        self.assertEqual(run["q1"].length, 4)
        self.assertEqual(run["q1"].tied, (1, 2, 3))

    def test_duplicates_keep_the_higher_score_and_are_counted(self):
        text = "q1 Q0 a 1 1 t\nq1 Q0 b 2 3 t\nq1 Q0 a 3 4 t\nq1 Q0 c 4 2 t\nq1 Q0 b 5 0.5 t\n"
        run, found, repeated = self.reduced(text)
        self.assertEqual(run["q1"].judged, ((1, "a"), (2, "b"), (3, "c")))  # a 4, b 3, c 2
        self.assertEqual(repeated, (2, 1, False))  # a and b listed twice, in one query
        whole = self.same_in_every_block_size(text, cutoffs=None)
        self.assertEqual(whole[0], {"q1": {"a": 4.0, "b": 3.0, "c": 2.0}})

    def test_the_last_line_without_a_newline_counts(self):
        for end in ("\n", "\r\n"):
            with self.subTest(end=repr(end)):
                text = f"q1 Q0 z 1 9 t{end}q1 Q0 a 2 8 t"  # no line end after the last
                run, _, _ = self.reduced(text)
                self.assertEqual(run["q1"].judged, ((2, "a"),))
                self.assertEqual(run["q1"].length, 2)

    def test_interleaved_queries_are_read_again_whole(self):
        text = "q1 Q0 a 1 3 t\nq2 Q0 x 1 3 t\nq1 Q0 b 2 2 t\nq2 Q0 x 2 1 t\n"
        for block in (1, 40, 1 << 17):
            with self.subTest(block=block):
                run, found, repeated = self.read(text, block)
                self.assertEqual(run, {"q1": {"a": 3.0, "b": 2.0}, "q2": {"x": 3.0}})  # the plain reading
                self.assertEqual(repeated, (1, 1, False))  # x twice in q2, across its two stretches

    def test_comments_blank_lines_and_more_fields_are_read_line_by_line(self):
        text = ("# a comment\n\nq1 Q0 z 1 9 t\n   \n# q1 Q0 a 2 8 t\nq1\tQ0\tb 2 8 t extra fields\n"
                "  q1 Q0 c 3 7 t\n#q1 Q0 a 4 6 t\nq2 Q0 x 1 1 t\n# six words as a run line has\n")
        run, found, repeated = self.reduced(text)
        self.assertEqual(run["q1"].judged, ((2, "b"), (3, "c")))
        self.assertEqual(run["q2"].judged, ((1, "x"),))
        self.assertTrue(found)

    def test_long_ids_are_an_error_naming_their_line(self):
        long = "d" * (rag_eval._MAX_ID + 1)
        for text, line, what in ((f"q1 Q0 a 1 1 t\nq1 Q0 {long} 2 1 t\n", 2, "document id"),
                                 (f"q1 Q0 a 1 1 t\n{'q' * (rag_eval._MAX_ID + 1)} Q0 a 2 1 t\n", 2, "query id"),
                                 (f"q1 Q0 a 1 1 t\n{'q' * rag_eval._MAX_ID} Q0 {long} 2 1 t\n", 2, "document id"),
                                 (f"q1 Q0 a 1 1 t\nq1 Q0 b 2 x t\nq1 Q0 {long} 2 1 t\n", 2, "score")):
            with self.subTest(what=what):
                kind, message = self.same_in_every_block_size(text)
                self.assertEqual(kind, "error")
                self.assertIn(f":{line}:", message)
                self.assertIn(what if what != "score" else "'x'", message)
        ok = "q1 Q0 " + "d" * rag_eval._MAX_ID + " 1 1 t\n"  # exactly MAX_ID bytes: fine, in a long line
        self.assertEqual(self.reduced(ok)[0]["q1"].length, 1)

    def test_bad_scores_are_errors_on_every_line_at_every_depth(self):
        for score in ("1_0", "inf", "nan", "-inf", "0x10", "abc"):
            for depth in (2, 1001):
                with self.subTest(score=score, depth=depth):
                    # Scored below the others: a reader that skipped lines below its floor would pass it over.
                    text = f"q1 Q0 a 1 9 t\nq1 Q0 b 2 8 t\nq1 Q0 c 3 {score} t\n"
                    kind, message = self.same_in_every_block_size(text, depth=depth, cutoffs=(1,))
                    self.assertEqual(kind, "error")
                    self.assertIn(":3:", message)

    def test_a_query_that_crosses_blocks_is_one_query(self):
        lines = [f"q1 Q0 d{i:03d} {i} {100 - i / 8:.3f} t\n" for i in range(300)] + ["q1 Q0 a 300 1 t\n"]
        text = "".join(lines) + "q2 Q0 x 1 1 t\n"
        run, _, _ = self.same_in_every_block_size(text, depth=1001, cutoffs=(10, 100, 1000))
        self.assertEqual(run["q1"].judged, ((301, "a"),))
        self.assertEqual(run["q1"].length, 301)

    def test_random_runs_read_alike_in_any_blocks(self):
        rng = random.Random(18)
        for case in range(20):  # 60 cases caught no planted bug (mutants3) that 20 and the other tests miss
            lines = []
            for q in rng.sample(["q1", "q2", "q3"], rng.randint(1, 3)):
                score = 10.0
                for _ in range(rng.randint(1, 40)):
                    score -= rng.choice((0, 0, 0.5))
                    lines.append(f"{q} Q0 {rng.choice('abcxyzmn')} 1 {score} t")
            if rng.random() < 0.3:
                lines.insert(rng.randrange(len(lines)), rng.choice(("# note", "", "q1 Q0 a 1 2 t more")))
            text = "\n".join(lines) + ("\n" if rng.random() < 0.7 else "")
            depth = rng.choice((2, 5, 1001))
            with self.subTest(case=case, depth=depth):
                for cutoffs in ((1, depth - 1), None):
                    self.same_in_every_block_size(text, depth=depth, cutoffs=cutoffs)


class TestLineNumbersAndRankedRows(unittest.TestCase):
    """Line numbers counted by the block path (``_trec_columns`` sends them back), and MS MARCO's and
    JSONL's rows handed over a stretch at a time, against the same files read whole."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        for name in ("_READ_BLOCK", "_REPEAT_BUDGET", "_MAX_RANKS"):
            self.addCleanup(setattr, rag_eval, name, getattr(rag_eval, name))

    def error(self, path, **options):
        with self.assertRaises(rag_eval.RagEvalError) as caught:
            rag_eval._read_run(path, "auto", 11, **options)
        return str(caught.exception)

    def test_an_error_after_many_plain_blocks_names_its_line(self):
        # Plain blocks (counted by _trec_columns), blank blocks and a comment block before the bad line.
        lines = [f"q{i // 50} Q0 d{i} {i} {1000 - i} t" for i in range(2000)]
        lines[700:700] = [""] * 30 + ["# a comment"]
        lines.append("q99 Q0 dx 1 1_0 t")
        path = write(self.tmp.name, "run", "\n".join(lines) + "\n")
        bad = len(lines)
        for block in (7, 64, 300, 4096, 1 << 17):
            rag_eval._READ_BLOCK = block
            for judged in (None, {"q0": {"d1": 1}}):
                with self.subTest(block=block, reduced=judged is not None):
                    message = self.error(path, judged=judged, cutoffs=[10] if judged else None)
                    self.assertIn(f"run:{bad}: ", message)
                    self.assertIn("'1_0'", message)

    def test_an_msmarco_row_error_names_its_line_in_any_blocks(self):
        rows = [f"{q}\tp{i}\t{i + 1}" for q in (1, 2, 3) for i in range(40)]
        for bad, expected in (("2\tpx\t7", "rank 7 appears twice in query '2'"),
                              ("2\tpx\t0", "rank must be a positive integer, got '0'"),
                              ("2\tpx\t1234567890", "rank must be an integer of at most 9 digits"),
                              ("2\tpx", "expected 3 fields (qid docid rank, as MS MARCO's runs), got 2")):
            path = write(self.tmp.name, "run", "\n".join(rows[:60] + ["# a comment", "", bad] + rows[60:]) + "\n")
            for block in (64, 300, 1 << 17):  # (the head must hold a few lines: MS MARCO's layout is detected there)
                rag_eval._READ_BLOCK = block
                with self.subTest(bad=bad, block=block):
                    self.assertIn(f"run:63: {expected}", self.error(path))

    def test_ranked_rows_in_stretches_read_as_whole(self):
        # MS MARCO (ids as bytes while read) and JSONL without scores (text), one query coming back, a document
        # listed twice: the same run, repeats and reduced queries however small the stretches handed over.
        msmarco = "".join(f"{q}\t{d}\t{rank}\n" for q, d, rank in
                          [("1", "a", 1), ("1", "b", 2), ("1", "a", 3), ("2", "x", 1), ("2", "c", 2),
                           ("1", "z", 4), ("1", "c", 5)])
        jsonl = "".join(f'{{"query_id": "{q}", "doc_id": "{d}"}}\n' for q, d, _ in
                        [line.split("\t") for line in msmarco.splitlines()])
        qrels = {"1": {"c": 2, "b": 1}, "2": {"c": 1}}
        for name, text in (("run.tsv", msmarco), ("run.jsonl", jsonl)):
            path = write(self.tmp.name, name, text)
            outcomes = set()
            for budget in (1, 2, 1 << 16):
                rag_eval._REPEAT_BUDGET = budget
                with self.subTest(name=name, budget=budget):
                    plain = rag_eval._read_run(path, "auto", 3, judged=qrels)
                    self.assertEqual(plain.run, {"1": ["a", "b", "z"], "2": ["x", "c"]})
                    self.assertTrue(plain.any_judged)
                    # a, twice in query 1; a budget too small to hold query 1's ids counts "at least"
                    self.assertTrue(plain.repeated.documents == 1 or plain.repeated.at_least and budget < 3)
                    outcomes.add(plain.repeated)
                    with self.assertRaises(rag_eval._ReadAgain):  # query 1 comes back: read again, plainly
                        rag_eval._read_run_once(path, "auto", rag_eval._ReadOptions(3, judged=qrels, cutoffs=[2]),
                                                True)
            self.assertIn(rag_eval._Repeated(1, 1, False), outcomes)
        rag_eval._REPEAT_BUDGET = 1 << 16
        reduced = rag_eval._read_run(write(self.tmp.name, "run.tsv", msmarco.replace("1\tz\t4\n1\tc\t5\n", "")),
                                     "auto", 3, judged=qrels, cutoffs=[2])
        self.assertEqual(dict(reduced.run), {"1": rag_eval._Reduced(2, ((2, "b"),), (), None),
                                             "2": rag_eval._Reduced(2, ((2, "c"),), (), None)})


class TestUnknownQueryComingBack(unittest.TestCase):
    def test_its_repeats_are_counted_when_reduced_as_when_read_plainly(self):
        """A query the qrels lack whose lines come apart: a document it lists again is a repeat either way."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "run.trec")
            with open(path, "w") as f:
                f.write("q9 Q0 d1 1 1.0 t\nq1 Q0 d1 1 1.0 t\nq9 Q0 d1 1 1.0 t\n")
            judged = {"q1": {"d1": 1}}
            reduced = rag_eval._read_run(path, "auto", 11, None, None, judged, [10])
            plain = rag_eval._read_run(path, "auto", 11, None, None, judged, None)
        self.assertEqual(plain.repeated.documents, 1)
        self.assertEqual(reduced.repeated, plain.repeated)


if __name__ == "__main__":
    unittest.main()


class TestShapesPeopleBring(TempDirMixin, unittest.TestCase):
    """Issue 33: what pandas and a RAG pipeline write is read when it is unambiguous: an integer id as its
    decimal string, a whole grade written 1.0 as 1, a run's ids in a chunk_id field.  Each was refused."""

    def test_integer_ids_and_whole_grades(self):
        rows = [("1", "10", 2), ("1", "11", 1), ("2", "20", 1)]
        qrels = {"1": {"10": 2, "11": 1}, "2": {"20": 1}}
        text = "".join(json.dumps({"query_id": int(q), "doc_id": int(d), "relevance": float(g)}) + "\n"
                       for q, d, g in rows)
        self.assertEqual(rag_eval.read_qrels(self.write("q.jsonl", text)), qrels)
        self.assertEqual(rag_eval.read_qrels(self.write("q.json", '{"1": {"10": 2.0, "11": 1.0}, "2": {"20": 1}}')),
                         qrels)
        self.assertEqual(rag_eval.read_qrels(self.write("q.trec", "1 0 10 2.0\n1 0 11 1.00\n2 0 20 1\n")), qrels)
        run = {"1": {"11": 0.9, "10": 0.5}, "2": {"20": 0.4}}
        text = "".join(json.dumps({"query_id": int(q), "chunk_id": int(d), "score": s}) + "\n"
                       for q, docs in run.items() for d, s in docs.items())
        self.assertEqual(rag_eval.read_run(self.write("r.jsonl", text)), run)
        self.assertEqual(rag_eval.read_run(self.write("r.json", '{"1": [11, 10], "2": [20]}')),
                         {"1": ["11", "10"], "2": ["20"]})
        self.assertEqual(rag_eval.read_run(self.write("p.json", '{"1": [[11, 0.9], [10, 0.5]], "2": [[20, 0.4]]}')),
                         run)
        # streamed from a file, a ranking of integers is read as it is, in bounded memory: no second, whole read
        big = self.write("big.json", '{"1": [%s]}' % ", ".join(map(str, range(1, 20_000))))
        with mock.patch.object(rag_eval, "_check_run", side_effect=AssertionError("read whole")):
            self.assertEqual(len(rag_eval.read_run(big, depth=5)["1"]), 5)

    def test_a_row_with_doc_id_and_chunk_id_is_the_documents(self):
        path = self.write("r.jsonl", '{"query_id": "q", "doc_id": "guide", "chunk_id": "guide#3", "score": 1}\n')
        self.assertEqual(rag_eval.read_run(path), {"q": {"guide": 1}})

    def test_what_stays_refused_says_what_to_write(self):
        for name, text, words in (
                ("q.jsonl", '{"query_id": "q", "doc_id": "d", "relevance": 1.5}\n',
                 "grade must be an integer, got 1.5; is this a run? the order is QRELS RUN"),
                ("q.trec", "q 0 d 1.5\n", "grade must be an integer, got '1.5'"),
                ("q.jsonl", '{"query_id": "q", "doc_id": "d", "relevance": "2"}\n',
                 "grade must be an integer, got '2' (write 2, a number, without quotes)"),
                ("q.jsonl", '{"query_id": 1.5, "doc_id": "d", "relevance": 1}\n', "query id must be a string, got a number")):
            with self.subTest(text=text):
                with self.assertRaises(rag_eval.RagEvalError) as caught:
                    rag_eval.read_qrels(self.write(name, text))
                self.assertEqual(caught.exception.detail, words)
