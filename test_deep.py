"""Deep runs: the reduced reading path gives the numbers of the whole path, and memory stays bounded.

The command line reduces each query of a run while reading it (``_Reduced``:
the judged documents' ranks and the number of documents), so that k = 1000
costs memory per judgment, not per line.  The first tests prove, on many
seeded random runs, that every value (means, per-query values, ties,
skipped, dropped, abstention) equals the whole path's.  The last ones feed
scaled-down attack inputs to a subprocess and check its peak memory
(``RAG_EVAL_HUGE=1`` runs them at full size: minutes and gigabytes of disk).
"""

import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest
from itertools import chain

import rag_eval
from helpers_for_tests import child_env, run_main

HERE = os.path.dirname(os.path.abspath(__file__))
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


def write(directory, name, text):
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
    return path


cli = run_main  # main in-process: (exit code, stdout, stderr)


class TestReducedEqualsWhole(unittest.TestCase):
    """The reduced path against the whole path, value for value, on seeded random runs."""

    CASES = 100 if FULL else 50
    FORMATS = ("trec", "jsonl-scored", "jsonl-ranked", "json-scored", "json-ranked")

    def outcomes(self, qrels_path, run_path, cutoffs, options):
        """(whole path, reduced path): each (found any judged, evaluate's result), or ("error", message)."""
        qrels = rag_eval.read_qrels(qrels_path)
        sep = options.get("doc_id_sep")
        judged = rag_eval.documents_qrels(qrels, sep) if sep else qrels
        keep = rag_eval.judged_filter(judged, options.get("min_grade", 1)) if options.get("judged_only") else None
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
        saved = rag_eval.READ_BLOCK
        rag_eval.READ_BLOCK = 300
        try:
            with tempfile.TemporaryDirectory() as tmp:
                for case, fmt, qrels, run, cutoffs, options in self.random_cases(tmp, 60):
                    with self.subTest(case=case, fmt=fmt, cutoffs=cutoffs, options=options):
                        self.compare(qrels, run, cutoffs, options)
        finally:
            rag_eval.READ_BLOCK = saved

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
            self.assertEqual(reduced, (code, out, err.replace(f"rag_eval: note: wrote {worklist}\n", "")))


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


class TestBenchDeep(unittest.TestCase):
    """bench/bench_deep.py's workload and its reading of trec_eval's output (its timings are never asserted)."""

    def test_every_format_of_the_workload_scores_the_same(self):
        sys.path.insert(0, os.path.join(HERE, "bench"))
        import bench_deep

        with tempfile.TemporaryDirectory() as tmp:
            paths = {what: os.path.join(tmp, what) for what in ("qrels", "trec", "json", "jsonl")}
            bench_deep.generate(12, 40, 5, 0, paths)
            outputs = {cli([paths["qrels"], paths[fmt], "--k", "10,100,1000", "--digits", "17",
                            "--measures", ",".join(bench_deep.MEASURES)])[1] for fmt in ("trec", "json", "jsonl")}
            self.assertEqual(len(outputs), 1)

    def test_trec_eval_output_names_our_metrics(self):
        sys.path.insert(0, os.path.join(HERE, "bench"))
        import bench_deep

        text = "recall_10\tall\t0.5\nrecall_10\tq1\t1.0\nrecip_rank\tall\t0.25\nmap_cut_1000\tall\t0.125\n"
        self.assertEqual(bench_deep.reference_means("trec_eval", text),
                         {"recall@10": 0.5, "mrr@1000": 0.25, "ap@1000": 0.125})


class TestStreamedJson(unittest.TestCase):
    def test_streamed_json_equals_the_whole_document_in_tiny_blocks(self):
        """Blocks of 7 bytes: every query crosses blocks; valid or broken, the result or the error is the same."""
        rng = random.Random(3)
        block = rag_eval.READ_BLOCK
        rag_eval.READ_BLOCK = 7
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
                                                                    stream))
                        except rag_eval._ReadAgain:
                            outcomes.append("read again")
                        except rag_eval.RagEvalError as exc:
                            outcomes.append(str(exc))
                    if outcomes[1] != "read again":
                        streamed += 1
                        self.assertEqual(outcomes[0], outcomes[1], text)
        finally:
            rag_eval.READ_BLOCK = block
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
        long = "d" * (rag_eval.MAX_ID + 1)
        with tempfile.TemporaryDirectory() as tmp:
            qrels = write(tmp, "qrels", "q1 0 a 1\n")
            for name, text, line in (
                    ("trec", f"q1 Q0 a 1 1 t\nq1 Q0 {long} 2 0.5 t\n", 2),
                    ("trec-qid", f"q1 Q0 a 1 1 t\n{long} Q0 a 2 0.5 t\n", 2),
                    ("jsonl", json.dumps({"query_id": "q1", "doc_id": long, "score": 1}) + "\n", 1)):
                with self.subTest(name):
                    code, out, err = cli([qrels, write(tmp, name, text)])
                    self.assertEqual(code, 2)
                    self.assertIn(f":{line}: ", err)
                    self.assertIn(f"id longer than {rag_eval.MAX_ID} bytes", err)

    def test_an_earlier_bad_line_is_reported_first(self):
        long = "d" * (rag_eval.MAX_ID + 1)
        with tempfile.TemporaryDirectory() as tmp:
            qrels = write(tmp, "qrels", "q1 0 a 1\n")
            code, out, err = cli([qrels, write(tmp, "run", f"q1 Q0 a 1 x t\nq1 Q0 {long} 2 0.5 t\n")])
            self.assertIn("run:1: score must be a number", err)

    def test_input_larger_than_the_cap_is_an_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            qrels = write(tmp, "qrels", "q1 0 a 1\n")
            run = os.path.join(tmp, "run.gz")
            with gzip.open(run, "wt") as out:
                out.write("q1 Q0 a 1 1 t\n" * 10_000)  # 140,000 bytes after gunzip
            code, out, err = cli([qrels, run, "--max-input-bytes", "100000"])
            self.assertEqual(code, 2)
            self.assertIn("more than 100000 bytes (after gunzip); raise the limit with --max-input-bytes", err)
            self.assertEqual(cli([qrels, run, "--max-input-bytes", "2000000"])[0], 0)

    def test_unknown_queries_are_counted_not_kept(self):
        with tempfile.TemporaryDirectory() as tmp:
            qrels = write(tmp, "qrels", "q1 0 a 1\n")
            run = write(tmp, "run", "q1 Q0 a 1 1 t\n" + "".join(f"u{i} Q0 a 1 1 t\n" for i in range(30)))
            code, out, err = cli([qrels, run])
            self.assertEqual(code, 2)
            self.assertIn("30 run queries are not in the qrels (first: 'u0'; the qrels have 'q1')", err)
            code, out, err = cli([qrels, run, "--drop-unknown-queries"])
            self.assertEqual(code, 0)
            self.assertIn("dropped 30 run queries", err)
            self.assertEqual(json.loads(out)["dropped"], sorted(f"u{i}" for i in range(30)))

    def test_too_many_unknown_queries_end_the_read(self):
        for prefix, quoted in (("u", "'u10'"), ("S" * 40, "'SSSSSSSSSSSSSSSS'...")):  # a long id is clipped
            with self.subTest(quoted), tempfile.TemporaryDirectory() as tmp:
                qrels = write(tmp, "qrels", "q1 0 a 1\n")
                run = write(tmp, "run", "q1 Q0 a 1 1 t\n" + "".join(f"{prefix}{i} Q0 a 1 1 t\n" for i in range(40)))
                limit = rag_eval.MAX_UNKNOWN_QUERIES
                rag_eval.MAX_UNKNOWN_QUERIES = 10
                try:
                    code, out, err = cli([qrels, run, "--drop-unknown-queries"])
                finally:
                    rag_eval.MAX_UNKNOWN_QUERIES = limit
                self.assertEqual(code, 2)
                self.assertIn(f"more than 10 run queries are not in the qrels (one: {quoted})", err)


# Runs rag_eval's main() in a child of its own and prints the child's exit code and peak RSS (MiB) as JSON.
PEAK = r"""
import json, resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1 << 10)
print(json.dumps({"rc": proc.returncode, "peak": peak, "stderr": proc.stderr.decode(errors="replace")}))
"""
MAIN = "import sys, rag_eval; rag_eval.MAX_UNKNOWN_QUERIES = int(sys.argv[1]); sys.exit(rag_eval.main(sys.argv[2:]))"


@unittest.skipIf(sys.platform == "win32", "resource is POSIX only")
class TestAttacks(unittest.TestCase):
    """The inputs of issue 18's attack table end in a result or one error line, in bounded memory.

    By default at a small scale (a few seconds in all); RAG_EVAL_HUGE=1 runs
    them at the table's sizes (gigabytes inflated, minutes), where the old
    readers took 4 to 6 GB or ran out of memory.
    """

    SCALE = 1 if HUGE else 1 / 512
    LIMIT_MB = 1024 if HUGE else 200

    def run_peak(self, argv, unknown_cap=rag_eval.MAX_UNKNOWN_QUERIES):
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
        self.assertIn(":2: document id longer than 4096 bytes", result["stderr"])

    def test_many_queries_the_qrels_lack(self):
        count = 10_000_000 if HUGE else 20_000
        lines = (f"u{n} Q0 d1 1 1 t\n".encode() for n in range(count))
        path = self.gzipped("run.gz", chain([b"q1 Q0 d1 1 1 t\n"], lines))
        result = self.run_peak([self.qrels, path, "--drop-unknown-queries"], unknown_cap=200_000 if HUGE else 1000)
        self.assertEqual(result["rc"], 2)
        self.assertIn("run queries are not in the qrels", result["stderr"])

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
        self.assertIn("raise the limit with --max-input-bytes", result["stderr"])


if __name__ == "__main__":
    unittest.main()
