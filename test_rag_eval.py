"""Unit tests of rag_eval.py, one TestCase per section of the module.

Expected values are written as arithmetic with the grades in a comment, so a
reader can check them by hand (STYLE.md, point 11).  Conventions used below:
gain ``2**grade - 1`` (exp): grade 2 -> 3, grade 1 -> 1; discount
``log2(1 + rank)``: rank 1 -> 1, rank 2 -> log2 3, rank 3 -> 2, rank 4 ->
log2 5, rank 5 -> log2 6.

Run with ``python3 -m unittest`` from the repository root; standard library only.
"""

import copy
import doctest
import gc
import gzip
import io
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import warnings
from unittest import mock

import rag_eval
from helpers_for_tests import ERROR_PREFIX, TempDirMixin, child_env, run_main

REPO = os.path.dirname(os.path.abspath(__file__))
QRELS = os.path.join(REPO, "fixtures", "qrels.json")
RUN = os.path.join(REPO, "fixtures", "run.json")
BASELINE = os.path.join(REPO, "baseline.json")

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
FIXTURE_PER_QUERY = {
    "q1": {"recall": 2 / 2, "success": 1.0, "mrr": 1 / 2, "ndcg": Q1_NDCG5},
    "q2": {"recall": 0 / 1, "success": 0.0, "mrr": 0.0, "ndcg": 0.0},
    "q3": {"recall": 3 / 3, "success": 1.0, "mrr": 1 / 1, "ndcg": Q3_NDCG5},
}
FIXTURE_MEANS = {
    "recall@5": (1 + 0 + 1) / 3,
    "success@5": (1 + 0 + 1) / 3,
    "mrr@5": (1 / 2 + 0 + 1) / 3,
    "ndcg@5": (Q1_NDCG5 + 0 + Q3_NDCG5) / 3,
}


def assert_value_error(test, func, *args, **kwargs):
    """Like ``assertRaises(ValueError)``, but another exception is a failure that names it."""
    try:
        func(*args, **kwargs)
    except ValueError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - reported as the failure
        test.fail(f"raised {type(exc).__name__}: {exc} (expected a ValueError)")
    test.fail("no ValueError raised")


def load_tests(loader, tests, pattern):
    """Run the docstring examples of rag_eval with the unit tests."""
    tests.addTests(doctest.DocTestSuite(rag_eval))
    return tests


def load_fixtures():
    with open(QRELS, encoding="utf-8") as f:
        qrels = json.load(f)
    with open(RUN, encoding="utf-8") as f:
        run = json.load(f)
    return qrels, run


def child(args, **kwargs):
    """Run ``python ARGS`` (``rag_eval.py ...`` or ``-m rag_eval ...``) from the repository root."""
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run([sys.executable, *args], cwd=REPO, env=child_env(), timeout=60, **kwargs)


# === Constants ===


class TestConstants(unittest.TestCase):
    def test_exit_codes_and_defaults(self):
        self.assertEqual((rag_eval.EXIT_OK, rag_eval.EXIT_REGRESSION, rag_eval.EXIT_ERROR, rag_eval.EXIT_INTERRUPTED),
                         (0, 1, 2, 130))
        self.assertEqual((rag_eval.DEFAULT_K, rag_eval.DEFAULT_MAX_DROP), (5, 0.02))

    def test_all_is_sorted_and_importable(self):
        self.assertEqual(rag_eval.__all__, sorted(rag_eval.__all__))
        for name in rag_eval.__all__:
            self.assertTrue(hasattr(rag_eval, name), name)


# === Exception ===


class TestException(unittest.TestCase):
    def test_is_a_value_error(self):
        self.assertTrue(issubclass(rag_eval.RagEvalError, ValueError))

    def test_message_is_located(self):
        for args, expected in [
            (("bad grade", "q.trec", 17), "q.trec:17: bad grade"),
            (("no such file", "q.json"), "q.json: no such file"),
            (("k must be a positive integer",), "k must be a positive integer"),
        ]:
            with self.subTest(args=args):
                self.assertEqual(str(rag_eval.RagEvalError(*args)), expected)

    def test_internal_chain_is_hidden(self):
        with self.assertRaises(rag_eval.RagEvalError) as ctx:
            rag_eval.read_qrels(os.path.join(REPO, "fixtures", "no-such-file.json"))
        self.assertTrue(ctx.exception.__suppress_context__)
        self.assertIsNone(ctx.exception.__cause__)


# === Reading inputs ===

# The fixtures in every supported format; each file name lies about its format
# so that only the content can tell.
FIXTURE_QRELS_LINES = [
    ("q1", "refund-policy#2", 2), ("q1", "refund-policy#3", 1),
    ("q2", "sla-uptime#1", 2),
    ("q3", "sso-setup#4", 2), ("q3", "sso-setup#5", 2), ("q3", "okta-guide#1", 1),
    ("q4", "pricing#3", 0),
]


def fixture_qrels_variants():
    trec = "# TREC qrels: qid iter docid grade\n" + "".join(
        f"{q} 0 {d} {g}\n" + ("# a comment between lines\n" if i == 2 else "")
        for i, (q, d, g) in enumerate(FIXTURE_QRELS_LINES)
    )
    beir = "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in FIXTURE_QRELS_LINES)
    jsonl = "".join(
        json.dumps({"query_id": q, "doc_id": d, "relevance": g}) + "\n" for q, d, g in FIXTURE_QRELS_LINES
    )
    with open(QRELS, "rb") as f:
        as_json = f.read()
    return {
        "json (named .trec)": ("qrels.trec", as_json),
        "trec (named .json)": ("qrels.json", trec.encode()),
        "beir tsv (named .jsonl)": ("qrels.jsonl", beir.encode()),
        "jsonl (named .tsv)": ("qrels.tsv", jsonl.encode()),
    }


def fixture_run_variants():
    _, run = load_fixtures()
    scored = {qid: {doc: float(5 - i) for i, doc in enumerate(docs)} for qid, docs in run.items()}
    # TREC: lines in reverse order, a rank column that lies (it is ignored),
    # extra trailing fields (ignored).
    trec_lines = [
        f"{qid} Q0 {doc} {1 + i} {score} tag extra fields\n"
        for qid, docs in scored.items() for i, (doc, score) in enumerate(sorted(docs.items()))
    ]
    jsonl_lines = [
        json.dumps({"query_id": qid, "doc_id": doc, "score": score}) + "\n"
        for qid, docs in scored.items() for doc, score in docs.items()
    ]
    with open(RUN, "rb") as f:
        as_json = f.read()
    return {
        "json ranked (named .trec)": ("run.trec", as_json),
        "json scored (named .jsonl)": ("run.jsonl", json.dumps(scored, indent=1).encode()),
        "trec (named .json)": ("run.json", "".join(reversed(trec_lines)).encode()),
        "jsonl (named .txt)": ("run.txt", "".join(jsonl_lines).encode()),
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
            with self.subTest(depth=depth), self.assertRaisesRegex(rag_eval.RagEvalError, "depth must be a positive integer"):
                rag_eval.read_run(path, depth=depth)

    def test_line_numbers_survive_block_boundaries(self):
        good = "".join(f"q{i % 3} Q0 d{i} {i} {i / 7:.3f} t\n" for i in range(1, 40))  # lines 1..39
        path = self.write("run.trec", good + "\n" + "q1 Q0 d40 40 high t\n")  # blank 40, bad 41
        clean = self.write("clean.trec", good)
        expected = rag_eval.read_run(clean)
        for block in (1, 2, 7, 64, 1 << 22):
            with self.subTest(block=block), mock.patch.object(rag_eval, "READ_BLOCK", block):
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
        self.assertGreater(len(json.dumps(one_line)), 3 * rag_eval.READ_BLOCK)
        self.assertEqual(rag_eval.read_run(self.write("run.json", json.dumps(one_line))), one_line)

    def test_json_shapes(self):
        for what, reader, data in [
            ("qrels top-level list", rag_eval.read_qrels, [{"q1": {"a": 1}}]),
            ("qrels value a list", rag_eval.read_qrels, {"q1": ["a"]}),
            ("qrels value a string", rag_eval.read_qrels, {"q1": "a"}),
            ("qrels grade a float", rag_eval.read_qrels, {"q1": {"a": 1.0}}),
            ("run top-level list", rag_eval.read_run, [["a", "b"]]),
            ("run ranking a string", rag_eval.read_run, {"q1": "a"}),
            ("run ranking a number", rag_eval.read_run, {"q1": 5}),
            ("run ranking null", rag_eval.read_run, {"q1": None}),
            ("run ranking of numbers", rag_eval.read_run, {"q1": [1, 2]}),
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
            with self.subTest(block=block), mock.patch.object(rag_eval, "READ_BLOCK", block), \
                    self.assertRaisesRegex(rag_eval.RagEvalError, f":{41 + (1 << 17)}: a line ends in a lone carriage"):
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
                with self.subTest(role=role, block=block), mock.patch.object(rag_eval, "READ_BLOCK", block), \
                        self.assertRaisesRegex(rag_eval.RagEvalError, ":41: a line ends in a lone carriage return"):
                    reader(path)

    def test_the_longest_line_wherever_it_starts(self):
        # MAX_LINE bytes are allowed, one more is not, wherever the line falls in a block or part.
        for shift in range(0, 200, 23):
            prefix = "".join(f"q1 Q0 s{n} 1 {n} r\n" for n in range(shift // 10)) + "#" * (shift % 10) + "\n"
            for extra, refused in ((0, False), (1, True)):
                filler = "d" * (500 + extra - len("q1 Q0  1 1.0 r"))
                path = self.write(f"long{shift}-{extra}.trec", prefix + f"q1 Q0 {filler} 1 1.0 r\n" + prefix)
                with self.subTest(shift=shift, extra=extra), mock.patch.object(rag_eval, "MAX_LINE", 500), \
                        mock.patch.object(rag_eval, "READ_BLOCK", 64):
                    if refused:
                        with self.assertRaisesRegex(rag_eval.RagEvalError, "line longer than"):
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
                        mock.patch.object(rag_eval, "MAX_LINE", 200), mock.patch.object(rag_eval, "READ_BLOCK", block), \
                        self.assertRaisesRegex(rag_eval.RagEvalError, f"^{re.escape(path)}:{line}: line longer than \\d+ MiB$"):
                    reader(path)

    def test_an_earlier_line_error_beats_a_later_bad_byte(self):
        # Bytes are checked a block at a time; an error on an earlier line of the same block still comes first.
        good = "".join(f"q1 Q0 d{n} 1 {n} r\n" for n in range(30))
        path = self.write("two.trec", good + "q1 Q0 short\n" + good + "q1 Q0 d 1 2\x00 r\n" + good)
        for block in (1 << 17, 64):
            with self.subTest(block=block), mock.patch.object(rag_eval, "READ_BLOCK", block), \
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
                            mock.patch.object(rag_eval, "MAX_LINE", 100), mock.patch.object(rag_eval, "READ_BLOCK", block), \
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

    BLOCKS = (1, 5, 64, rag_eval.READ_BLOCK)
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
                with self.subTest(form=label, block=block), mock.patch.object(rag_eval, "READ_BLOCK", block):
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
            ("grade 2.0", head + "q1 0 d2 2.0\n", 3, ["grade", "integer"]),
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
            ("doc id a number", "qrels", first + row(query_id="q1", doc_id=7, relevance=1), 2, ["document id"]),
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


# === Normalising a ranking ===


class TestNormalising(unittest.TestCase):
    def test_scored_ties_broken_by_docid_descending(self):
        # a and b tie at 1.0: b (the larger id) comes first, as in trec_eval
        grades = {"a": 1}
        self.assertEqual(rag_eval.reciprocal_rank({"a": 1.0, "b": 1.0}, grades, 2), 1 / 2)
        self.assertEqual(rag_eval.success_at_k({"a": 1.0, "b": 1.0}, grades, 1), 0.0)
        self.assertEqual(rag_eval.reciprocal_rank({"b": 1.0, "a": 1.0}, grades, 2), 1 / 2)  # dict order is irrelevant
        # string order, not numeric: "10" < "9", so "9" ranks first
        self.assertEqual(rag_eval.reciprocal_rank({"10": 0.5, "9": 0.5}, {"10": 1}, 2), 1 / 2)
        # a higher score wins over the id
        self.assertEqual(rag_eval.reciprocal_rank({"a": 1.5, "b": 1.0}, grades, 2), 1 / 1)
        result = rag_eval.evaluate({"q1": grades}, {"q1": {"a": 1.0, "b": 1.0}}, k=2)
        self.assertEqual(result["per_query"]["q1"]["mrr"], 1 / 2)

    def test_ties_straddling_cutoffs_are_counted(self):
        qrels = {"q1": {"a": 1}, "q2": {"y": 1}, "q3": {"m": 1}}
        run = {
            "q1": {"a": 1.0, "b": 1.0, "c": 0.5},  # b, a | c: tie across k=1 only
            "q2": {"x": 2.0, "y": 1.0, "z": 1.0},  # x | z, y: tie across k=2; inside the top 3 at k=3
            "q3": ["m", "n", "o"],  # a ranked list has no scores, so no ties
        }
        result = rag_eval.evaluate(qrels, run, k=[1, 2, 3])
        self.assertEqual(result["ties"], {"1": 1, "2": 1, "3": 0})
        self.assertEqual(result["per_query"]["q1"]["mrr@2"], 1 / 2)  # a behind b
        self.assertEqual(result["per_query"]["q2"]["mrr@3"], 1 / 3)  # y behind x and z
        # a tie entirely inside the top k is not counted
        result = rag_eval.evaluate({"q1": {"a": 1}}, {"q1": {"a": 1.0, "b": 1.0, "c": 0.5}}, k=2)
        self.assertEqual(result["ties"], {"2": 0})
        # three-way tie across k=2 (c, b | a by docid; b is judged, so something was evaluated)
        result = rag_eval.evaluate({"q1": {"a": 1, "b": 0}}, {"q1": {"a": 1.0, "b": 1.0, "c": 1.0}}, k=2)
        self.assertEqual(result["ties"], {"2": 1})

    def test_ties_reported_by_the_command_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            qpath = os.path.join(tmp, "q.json")
            rpath = os.path.join(tmp, "r.trec")
            with open(qpath, "w") as f:
                json.dump({"q1": {"a": 1}}, f)
            with open(rpath, "w") as f:
                f.write("q1 Q0 a 1 1.0 t\nq1 Q0 b 2 1.0 t\nq1 Q0 c 3 0.5 t\n")
            code, out, err = run_main([qpath, rpath, "--k", "1,2"])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["ties"], {"1": 1, "2": 0})
        self.assertTrue(any(line.startswith("rag_eval: note:") and "tie" in line for line in err.splitlines()), err)

    def test_a_tie_across_the_largest_cutoff_survives_streaming(self):
        # The command line streams TREC and JSONL runs keeping one document more than the largest k,
        # so that a tie across that k is still seen: b, a tie at 1.0 (across k = 1); d, e, f tie at
        # 0.5 (across k = 4 and k = 5).  Every form gives what evaluate() gives on the whole run.
        scores = {"a": 1.0, "b": 1.0, "c": 0.7, "d": 0.5, "e": 0.5, "f": 0.5, "g": 0.1}
        qrels = {"q1": {"a": 1, "e": 2}}
        lines = [("q1", doc, score) for doc, score in scores.items()]
        with tempfile.TemporaryDirectory() as tmp:
            qpath = os.path.join(tmp, "q.json")
            with open(qpath, "w") as f:
                json.dump(qrels, f)
            forms = {"json": json.dumps({"q1": scores}),
                     "trec": "".join(f"{q} Q0 {d} 0 {s} t\n" for q, d, s in lines),
                     "jsonl": "".join(json.dumps({"query_id": q, "doc_id": d, "score": s}) + "\n" for q, d, s in lines)}
            for k, ties in (("1", {"1": 1}), ("4", {"4": 1}), ("5", {"5": 1}), ("1,2", {"1": 1, "2": 0})):
                cutoffs = [int(c) for c in k.split(",")]
                whole = rag_eval.evaluate(qrels, {"q1": scores}, cutoffs if len(cutoffs) > 1 else cutoffs[0])
                self.assertEqual(whole["ties"], ties, k)
                for form, text in forms.items():
                    rpath = os.path.join(tmp, f"r.{form}")
                    with open(rpath, "w") as f:
                        f.write(text)
                    with self.subTest(k=k, form=form):
                        code, out, err = run_main([qpath, rpath, "--k", k, "--per-query"])
                        self.assertEqual(code, 0, err)
                        report = json.loads(out)
                        self.assertEqual(report["ties"], ties)
                        self.assertEqual(report["per_query"]["q1"],
                                         rag_eval.build_report(whole, per_query=True)["per_query"]["q1"])

    def test_duplicates_count_once_at_first_position(self):
        # x, a, x, b -> unique x, a, b: b is at rank 3, not 4
        grades = {"a": 1, "b": 1}
        self.assertEqual(rag_eval.recall_at_k(["x", "a", "x", "b"], grades, 3), 2 / 2)
        self.assertEqual(rag_eval.reciprocal_rank(["x", "a", "x", "b"], grades, 3), 1 / 2)
        # a relevant document repeated keeps its first rank: a @2, not @1
        self.assertEqual(rag_eval.reciprocal_rank(["x", "a", "a"], {"a": 1}, 3), 1 / 2)

    def test_duplicates_cannot_push_measures_above_one(self):
        ranking = ["a", "a", "a", "b"]  # grades: a = 2; unique: a, b
        grades = {"a": 2}
        for name, func, expected in [
            ("ndcg", rag_eval.ndcg_at_k, 3 / 3),  # DCG 3/1 over ideal 3/1, not (3 + 3/log2 3 + 3/2) / 3
            ("recall", rag_eval.recall_at_k, 1 / 1),  # not 3/1
            ("precision", rag_eval.precision_at_k, 1 / 3),  # a, b, (nothing): 1 of 3, not 3 of 3
            ("success", rag_eval.success_at_k, 1.0),
            ("mrr", rag_eval.reciprocal_rank, 1 / 1),
            ("ap", rag_eval.ap_at_k, (1 / 1) / 1),
        ]:
            with self.subTest(name):
                self.assertEqual(func(ranking, grades, 3), expected)
        result = rag_eval.evaluate({"q1": grades}, {"q1": ranking}, k=3, measures=["ndcg", "recall", "precision"])
        self.assertEqual(result["per_query"]["q1"], {"ndcg": 1.0, "recall": 1.0, "precision": 1 / 3})


# === Measures ===


class TestMeasures(unittest.TestCase):
    # one query: grades a = 2, b = 1, c = 0 (judged, rejected), d = 2 (never retrieved)
    GRADES = {"a": 2, "b": 1, "c": 0, "d": 2}
    RANKING = ["c", "a", "x", "b"]  # c (0) @1, a (2) @2, x (unjudged) @3, b (1) @4

    def test_hand_worked_values(self):
        r, g = self.RANKING, self.GRADES
        cases = [
            (rag_eval.recall_at_k, 1, 0 / 3),
            (rag_eval.recall_at_k, 2, 1 / 3),  # a of a, b, d
            (rag_eval.recall_at_k, 10, 2 / 3),  # a, b of a, b, d
            (rag_eval.success_at_k, 1, 0.0),
            (rag_eval.success_at_k, 2, 1.0),
            (rag_eval.reciprocal_rank, 1, 0.0),
            (rag_eval.reciprocal_rank, 4, 1 / 2),
            (rag_eval.ndcg_at_k, 1, 0.0),
            # DCG: 3/log2 3 (a @2); ideal: 3/1 + 3/log2 3 (a, d)
            (rag_eval.ndcg_at_k, 2, (3 / math.log2(3)) / (3 + 3 / math.log2(3))),
            # DCG: a @2, b @4; ideal: a, d, b (c has gain 0)
            (rag_eval.ndcg_at_k, 4, (3 / math.log2(3) + 1 / math.log2(5)) / (3 + 3 / math.log2(3) + 1 / 2)),
            (rag_eval.precision_at_k, 4, 2 / 4),  # a, b
            (rag_eval.precision_at_k, 10, 2 / 10),  # k counts even past the end of the ranking
            (rag_eval.ap_at_k, 4, (1 / 2 + 2 / 4) / 3),  # precision at a (@2) and b (@4), over 3 relevant
            (rag_eval.ap_at_k, 2, (1 / 2) / 3),
            (rag_eval.judged_at_k, 4, 3 / 4),  # c, a, b judged; x not
            (rag_eval.judged_at_k, 1, 1 / 1),  # c: grade 0 is judged
            (rag_eval.judged_at_k, 8, 3 / 8),
        ]
        for func, k, expected in cases:
            with self.subTest(func=func.__name__, k=k):
                self.assertAlmostEqual(func(r, g, k), expected, places=15)

    def test_edge_cases(self):
        for label, func, ranking, grades, k, expected in [
            ("empty ranking", rag_eval.ndcg_at_k, [], {"a": 1}, 5, 0.0),
            ("empty ranking recall", rag_eval.recall_at_k, [], {"a": 1}, 5, 0.0),
            ("no relevant document recall", rag_eval.recall_at_k, ["a"], {"a": 0}, 5, 0.0),
            ("no relevant document ndcg", rag_eval.ndcg_at_k, ["a"], {"a": 0}, 5, 0.0),
            ("no relevant document ap", rag_eval.ap_at_k, ["a"], {"a": 0}, 5, 0.0),
            ("no judgments judged", rag_eval.judged_at_k, ["a"], {}, 5, 0.0),
            ("k larger than everything", rag_eval.ndcg_at_k, ["a"], {"a": 1}, 1000, 1.0),
            ("ids are strings: '01' is not '1'", rag_eval.success_at_k, ["01"], {"1": 1}, 5, 0.0),
            ("perfect ranking", rag_eval.ndcg_at_k, ["a", "b"], {"a": 2, "b": 1}, 2, 1.0),
            ("scored dict ranking", rag_eval.reciprocal_rank, {"a": 0.1, "b": 0.9}, {"a": 1}, 2, 1 / 2),
        ]:
            with self.subTest(label):
                self.assertEqual(func(ranking, grades, k), expected)

    def test_invalid_arguments(self):
        for label, kwargs in [
            ("k 0", dict(k=0)),
            ("k -1", dict(k=-1)),
            ("k 1.5", dict(k=1.5)),
            ("k 5.0", dict(k=5.0)),
            ("k True", dict(k=True)),
            ("k '5'", dict(k="5")),
            ("grade -1", dict(grades={"a": -1})),
            ("grade 1.5", dict(grades={"a": 1.5})),
            ("grade True", dict(grades={"a": True})),
            ("grade '2'", dict(grades={"a": "2"})),
            ("unknown gain", dict(gain="cubic")),
            ("min grade 0", dict(min_grade=0)),
            ("ranking a string", dict(ranking="ab")),
            ("ranking of numbers", dict(ranking=[1, 2])),
            ("ranking None", dict(ranking=None)),
        ]:
            with self.subTest(label):
                args = dict(ranking=["a", "b"], grades={"a": 1}, k=2)
                args.update(kwargs)
                assert_value_error(self, rag_eval.ndcg_at_k, **args)

    def test_measure_table(self):
        names = [m.name for m in rag_eval.MEASURES]
        self.assertEqual(names[:4], ["recall", "success", "mrr", "ndcg"])
        self.assertEqual(set(names), {"recall", "success", "mrr", "ndcg", "precision", "ap", "judged"})
        self.assertEqual(len(names), len(set(names)))

    def test_metric_names_round_trip(self):
        for text in ("ndcg@10", "recall@1", "judged@100"):
            with self.subTest(text):
                self.assertEqual(rag_eval.format_metric(*rag_eval.parse_metric(text)), text)
        for text in ("ndcg", "ndcg@", "ndcg@0", "ndcg@05", "ndgc@5", "ndcg@-1", "ndcg@1.5", "@5"):
            with self.subTest(text):
                with self.assertRaises(ValueError):
                    rag_eval.parse_metric(text)

    def test_gain_linear_and_exp(self):
        ranking, grades = ["b", "a"], {"a": 2, "b": 1}  # b (1) @1, a (2) @2
        # exp gains: 1, 3; ideal 3, 1
        self.assertAlmostEqual(rag_eval.ndcg_at_k(ranking, grades, 2),
                               (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)), places=15)
        # linear gains: 1, 2; ideal 2, 1
        self.assertAlmostEqual(rag_eval.ndcg_at_k(ranking, grades, 2, gain="linear"),
                               (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)), places=15)
        # on the fixtures, q1: 2 @2, 1 @4; ideal 2, 1
        qrels, run = load_fixtures()
        lin = rag_eval.evaluate(qrels, run, k=5, gain="linear")
        q1_lin = (2 / math.log2(3) + 1 / math.log2(5)) / (2 + 1 / math.log2(3))
        q3_lin = (2 + 1 / math.log2(3) + 2 / math.log2(6)) / (2 + 2 / math.log2(3) + 1 / 2)  # 2 @1, 1 @2, 2 @5
        self.assertAlmostEqual(lin["per_query"]["q1"]["ndcg"], q1_lin, places=15)
        self.assertAlmostEqual(lin["per_query"]["q3"]["ndcg"], q3_lin, places=15)
        self.assertEqual(lin["per_query"]["q1"]["recall"], 1.0)  # gain touches nDCG only
        code, out, err = run_main([QRELS, RUN, "--gain", "linear"])
        self.assertEqual(code, 0, err)
        self.assertAlmostEqual(json.loads(out)["mean"]["ndcg@5"], (q1_lin + 0 + q3_lin) / 3, places=15)

    def test_min_grade(self):
        ranking, grades = ["b", "a"], {"a": 2, "b": 1}  # b (1) @1, a (2) @2
        for func, k, one, two in [
            (rag_eval.reciprocal_rank, 2, 1 / 1, 1 / 2),  # min grade 2: a @2 is the first relevant
            (rag_eval.success_at_k, 1, 1.0, 0.0),
            (rag_eval.recall_at_k, 1, 1 / 2, 0 / 1),  # relevant: a, b | a only
            (rag_eval.precision_at_k, 2, 2 / 2, 1 / 2),
            (rag_eval.ap_at_k, 2, (1 / 1 + 2 / 2) / 2, (1 / 2) / 1),
            # nDCG gains do not move: (1 + 3/log2 3) / (3 + 1/log2 3) either way
            (rag_eval.ndcg_at_k, 2, (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)),
             (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3))),
        ]:
            with self.subTest(func=func.__name__):
                self.assertAlmostEqual(func(ranking, grades, k), one, places=15)
                self.assertAlmostEqual(func(ranking, grades, k, min_grade=2), two, places=15)
        # on the fixtures, q3 top 2: #5 (2), okta (1); at min grade 2 the relevant set is #4, #5
        qrels, run = load_fixtures()
        result = rag_eval.evaluate(qrels, run, k=2, min_grade=2)
        self.assertEqual(result["per_query"]["q3"]["recall"], 1 / 2)  # #5 of #4, #5 (min grade 1: 2 of 3)
        self.assertAlmostEqual(result["per_query"]["q3"]["ndcg"],
                               (3 + 1 / math.log2(3)) / (3 + 3 / math.log2(3)), places=15)  # 2, 1 over 2, 2
        code, out, err = run_main([QRELS, RUN, "--k", "2", "--min-grade", "2"])
        self.assertEqual(code, 0, err)
        # recall@2: q1 rp#2 @2 of rp#2 -> 1; q2 0; q3 1/2
        self.assertEqual(json.loads(out)["mean"]["recall@2"], round((1 + 0 + 1 / 2) / 3, 4))

    def test_trec_negative_grade(self):
        with tempfile.TemporaryDirectory() as tmp:
            qpath = os.path.join(tmp, "qrels.trec")
            with open(qpath, "w") as f:
                f.write("q1 0 a 2\nq1 0 b -1\nq1 0 c 1\n")
            rpath = os.path.join(tmp, "run.trec")
            with open(rpath, "w") as f:
                f.write("q1 Q0 b 1 3.0 t\nq1 Q0 a 2 2.0 t\nq1 Q0 c 3 1.0 t\n")
            qrels, run = rag_eval.read_qrels(qpath), rag_eval.read_run(rpath)
            names = ["recall", "mrr", "ndcg", "judged"]
            plain = rag_eval.evaluate(qrels, run, k=3, measures=names)["per_query"]["q1"]
            # b (-1) @1: non-relevant, gain 0, not in the ideal, unjudged; a (2) @2, c (1) @3
            self.assertEqual(plain["recall"], 2 / 2)
            self.assertEqual(plain["mrr"], 1 / 2)
            self.assertAlmostEqual(plain["ndcg"], (3 / math.log2(3) + 1 / 2) / (3 + 1 / math.log2(3)), places=15)
            self.assertEqual(plain["judged"], 2 / 3)  # a, c
            # --judged-only drops b: a @1, c @2
            only = rag_eval.evaluate(qrels, run, k=3, measures=names, judged_only=True)["per_query"]["q1"]
            self.assertEqual(only, {"recall": 2 / 2, "mrr": 1 / 1, "ndcg": 1.0, "judged": 2 / 3})
            code, out, err = run_main([qpath, rpath, "--k", "3", "--judged-only", "--measures", "mrr,judged"])
            self.assertEqual(code, 0, err)
            self.assertEqual(json.loads(out)["mean"], {"mrr@3": 1.0, "judged@3": 2 / 3})
            # in JSON qrels a negative grade is an error
            jpath = os.path.join(tmp, "qrels.json")
            with open(jpath, "w") as f:
                json.dump({"q1": {"a": 2, "b": -1}}, f)
            code, out, err = run_main([jpath, rpath])
            self.assertEqual(code, 2)
            self.assertIn(jpath, err)
            self.assertIn("non-negative", err)

    def test_judged_only_drops_unjudged_before_the_cutoff(self):
        qrels, run = load_fixtures()
        plain = rag_eval.evaluate(qrels, run, k=3)
        only = rag_eval.evaluate(qrels, run, k=3, judged_only=True)
        # q1 top 3: shipping#1, rp#2 (2), rp#9 -> judged only: rp#2 (2), rp#3 (1)
        self.assertEqual(plain["per_query"]["q1"]["recall"], 1 / 2)
        self.assertAlmostEqual(plain["per_query"]["q1"]["ndcg"],
                               (3 / math.log2(3)) / (3 + 1 / math.log2(3)), places=15)
        self.assertEqual(only["per_query"]["q1"], {"recall": 2 / 2, "success": 1.0, "mrr": 1 / 1, "ndcg": 1.0})
        # q3 top 3: #5 (2), okta (1), sso-setup#1 -> judged only: #5 (2), okta (1), #4 (2)
        self.assertAlmostEqual(only["per_query"]["q3"]["ndcg"],
                               (3 + 1 / math.log2(3) + 3 / 2) / (3 + 3 / math.log2(3) + 1 / 2), places=15)
        self.assertEqual(only["per_query"]["q3"]["recall"], 3 / 3)
        # q2: nothing of the run is judged for q2
        self.assertEqual(only["per_query"]["q2"]["recall"], 0.0)
        code, out, err = run_main([QRELS, RUN, "--k", "3", "--judged-only"])
        self.assertEqual(code, 0, err)
        self.assertAlmostEqual(json.loads(out)["mean"]["recall@3"], (1 + 0 + 1) / 3, places=15)


# === Evaluation ===


class TestEvaluation(unittest.TestCase):
    def test_fixture_table(self):
        result = rag_eval.evaluate(*load_fixtures(), k=5)
        self.assertEqual(result["queries"], 3)
        self.assertEqual(result["unscored"], ["q4"])
        self.assertEqual(result["skipped"], [])
        self.assertEqual(result["k"], 5)
        self.assertEqual(sorted(result["per_query"]), ["q1", "q2", "q3"])
        for qid, expected in FIXTURE_PER_QUERY.items():
            self.assertEqual(set(result["per_query"][qid]), {"recall", "success", "mrr", "ndcg"})
            for name, value in expected.items():
                with self.subTest(qid=qid, measure=name):
                    self.assertAlmostEqual(result["per_query"][qid][name], value, places=15)
        self.assertEqual(set(result["mean"]), set(FIXTURE_MEANS))
        for metric, value in FIXTURE_MEANS.items():
            with self.subTest(metric=metric):
                self.assertAlmostEqual(result["mean"][metric], value, places=15)
        # the rounded figures of the worked example (q1 nDCG 0.63991, q3 0.88850; means to 4 places)
        self.assertEqual(round(result["per_query"]["q1"]["ndcg"], 5), 0.63991)
        self.assertEqual(round(result["per_query"]["q3"]["ndcg"], 5), 0.88850)
        self.assertEqual({m: round(v, 4) for m, v in result["mean"].items()},
                         {"recall@5": 0.6667, "success@5": 0.6667, "mrr@5": 0.5, "ndcg@5": 0.5095})

    def test_ideal_comes_from_every_judged_document(self):
        result = rag_eval.evaluate(*load_fixtures(), k=3)
        # q3 top 3: #5 (2), okta (1), sso-setup#1 (unjudged); ideal: 2, 2, 1 from all judged documents
        expected = (3 + 1 / math.log2(3)) / (3 + 3 / math.log2(3) + 1 / 2)
        self.assertAlmostEqual(result["per_query"]["q3"]["ndcg"], expected, places=15)
        self.assertEqual(round(expected, 4), 0.6733)
        # an ideal built from the retrieved documents (2, 1) would give 1.0
        self.assertNotAlmostEqual(result["per_query"]["q3"]["ndcg"], 1.0)

    def test_several_cutoffs(self):
        result = rag_eval.evaluate(*load_fixtures(), k=[3, 1, 3])
        self.assertEqual(result["k"], [1, 3])
        self.assertEqual(set(result["mean"]), {f"{m}@{k}" for m in ("recall", "success", "mrr", "ndcg") for k in (1, 3)})
        self.assertEqual(set(result["per_query"]["q1"]), set(result["mean"]))
        q3, q1 = result["per_query"]["q3"], result["per_query"]["q1"]
        # q3 @1: #5 (2) of #4, #5, okta
        self.assertEqual((q3["recall@1"], q3["success@1"], q3["mrr@1"], q3["ndcg@1"]), (1 / 3, 1.0, 1.0, 3 / 3))
        # q1 @1: shipping#1 unjudged
        self.assertEqual((q1["recall@1"], q1["success@1"], q1["mrr@1"], q1["ndcg@1"]), (0.0, 0.0, 0.0, 0.0))
        # q1 @3: rp#2 (2) @2 of rp#2, rp#3
        self.assertEqual(q1["recall@3"], 1 / 2)
        self.assertAlmostEqual(q1["ndcg@3"], (3 / math.log2(3)) / (3 + 1 / math.log2(3)), places=15)
        self.assertAlmostEqual(result["mean"]["recall@3"], (1 / 2 + 0 + 2 / 3) / 3, places=15)
        self.assertAlmostEqual(result["mean"]["recall@1"], (0 + 0 + 1 / 3) / 3, places=15)
        code, out, err = run_main([QRELS, RUN, "--k", "1,3,5"])
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual(report["k"], [1, 3, 5])
        self.assertEqual(len(report["mean"]), 4 * 3)
        self.assertAlmostEqual(report["mean"]["ndcg@5"], 0.509469461838203, places=15)
        self.assertAlmostEqual(report["mean"]["recall@3"], (1 / 2 + 0 + 2 / 3) / 3, places=15)

    def test_other_measures_on_the_fixtures(self):
        result = rag_eval.evaluate(*load_fixtures(), k=5, measures=["precision", "ap", "judged"])
        self.assertEqual(set(result["mean"]), {"precision@5", "ap@5", "judged@5"})
        expected = {
            # q1: rp#2 @2, rp#3 @4; q2: nothing; q3: #5 @1, okta @2, #4 @5
            "precision@5": (2 / 5 + 0 + 3 / 5) / 3,
            "ap@5": ((1 / 2 + 2 / 4) / 2 + 0 + (1 / 1 + 2 / 2 + 3 / 5) / 3) / 3,
            # judged: q1 rp#2, rp#3; q2 none (pricing#3 is judged for q4 only); q3 three
            "judged@5": (2 / 5 + 0 / 5 + 3 / 5) / 3,
        }
        for metric, value in expected.items():
            with self.subTest(metric):
                self.assertAlmostEqual(result["mean"][metric], value, places=15)
        self.assertAlmostEqual(result["judged"]["judged@5"], expected["judged@5"], places=15)

    def test_unknown_measures_reported_at_once(self):
        with self.assertRaises(ValueError) as ctx:
            rag_eval.evaluate(*load_fixtures(), measures=["ndcg", "ndgc", "foo"])
        message = str(ctx.exception)
        self.assertIn("'ndgc'", message)
        self.assertIn("'foo'", message)
        for m in rag_eval.MEASURES:  # the choices come from the table
            self.assertIn(m.name, message)

    def test_run_queries_against_empty_qrels(self):
        with self.assertRaises(rag_eval.RagEvalError) as ctx:
            rag_eval.evaluate({}, {"q": ["a"]}, 2)
        self.assertEqual(str(ctx.exception), "run: 1 run queries are not in the qrels (first: 'q'; the qrels have none); "
                                             "drop them with --drop-unknown-queries")

    def test_skipped_query_scores_zero_and_stays_in_the_mean(self):
        qrels, run = load_fixtures()
        del run["q3"]
        result = rag_eval.evaluate(qrels, run, k=5)
        self.assertEqual(result["skipped"], ["q3"])
        self.assertEqual(result["queries"], 3)
        self.assertEqual(result["per_query"]["q3"], {"recall": 0.0, "success": 0.0, "mrr": 0.0, "ndcg": 0.0})
        self.assertAlmostEqual(result["mean"]["recall@5"], (1 + 0 + 0) / 3, places=15)
        self.assertAlmostEqual(result["mean"]["ndcg@5"], (Q1_NDCG5 + 0 + 0) / 3, places=15)
        # an unscored query the run skipped stays unscored, not skipped
        del run["q4"]
        result = rag_eval.evaluate(qrels, run, k=5)
        self.assertEqual((result["unscored"], result["skipped"]), (["q4"], ["q3"]))

    def test_run_query_missing_from_the_qrels(self):
        qrels, run = load_fixtures()
        run["q9"] = ["refund-policy#2"]
        with self.assertRaises(ValueError) as ctx:
            rag_eval.evaluate(qrels, run, k=5)
        self.assertIsInstance(ctx.exception, rag_eval.RagEvalError)
        self.assertIn("'q9'", str(ctx.exception))
        result = rag_eval.evaluate(qrels, run, k=5, drop_unknown_queries=True)
        self.assertEqual(result["dropped"], ["q9"])
        self.assertEqual(result["queries"], 3)
        for metric, value in FIXTURE_MEANS.items():
            self.assertAlmostEqual(result["mean"][metric], value, places=15)

    def test_invalid_input_raises_value_error(self):
        qrels, run = load_fixtures()
        for label, args, kwargs in [
            ("k 0", (qrels, run, 0), {}),
            ("k -1", (qrels, run, -1), {}),
            ("k '5'", (qrels, run, "5"), {}),
            ("k []", (qrels, run, []), {}),
            ("k [1, 0]", (qrels, run, [1, 0]), {}),
            ("k 5.0", (qrels, run, 5.0), {}),
            ("k True", (qrels, run, True), {}),
            ("k None", (qrels, run, None), {}),
            ("measures []", (qrels, run, 5), {"measures": []}),
            ("gain", (qrels, run, 5), {"gain": "cubic"}),
            ("min grade 0", (qrels, run, 5), {"min_grade": 0}),
            ("qrels a list", ([], run, 5), {}),
            ("grade True", ({"q1": {"a": True}}, {"q1": ["a"]}, 5), {}),
            ("grade -1", ({"q1": {"a": -1}}, {"q1": ["a"]}, 5), {}),
            ("ranking of numbers", ({"q1": {"a": 1}}, {"q1": [1]}, 5), {}),
            ("ranking a string", ({"q1": {"a": 1}}, {"q1": "a"}, 5), {}),
            ("score NaN", ({"q1": {"a": 1}}, {"q1": {"a": math.nan}}, 5), {}),
            ("nothing to score", ({"q1": {"a": 0}}, {"q1": ["a"]}, 5), {}),
        ]:
            with self.subTest(label):
                assert_value_error(self, rag_eval.evaluate, *args, **kwargs)

    def test_inputs_are_not_modified(self):
        qrels, run = load_fixtures()
        run["q1"] = run["q1"] + ["shipping#1"]  # a duplicate
        run["q9"] = ["x"]
        before = copy.deepcopy((qrels, run))
        rag_eval.evaluate(qrels, run, k=[1, 5], judged_only=True, drop_unknown_queries=True)
        self.assertEqual((qrels, run), before)


# === Statistics ===


class TestStatistics(unittest.TestCase):
    def test_sign_flip_test_exact(self):
        for deltas, expected in [
            ([0.5, 0.5, 0.5], 2 / 2 ** 3),  # only all-plus and all-minus are as extreme as +1.5
            ([0.5, 0.5, 0.5, 0.0], 2 / 2 ** 3),  # a zero difference carries no sign
            ([0.25, -0.25], 4 / 2 ** 2),  # observed sum 0: every pattern is as extreme
            ([0.5, 0.25], 2 / 2 ** 2),  # +0.75: only (+,+) and (-,-) reach |0.75|
            ([], 1.0),
        ]:
            with self.subTest(deltas=deltas):
                self.assertEqual(rag_eval.sign_flip_test(deltas), (expected, True))

    def test_sign_flip_test_sampled_is_never_zero(self):
        # 20 positive differences of two sizes: 2 of 2**20 patterns as extreme; sampled,
        # p = (1 + hits) / (1 + 100) (one size would be the exact sign test)
        deltas = [0.1] * 10 + [0.2] * 10
        p, exact = rag_eval.sign_flip_test(deltas, 100, random.Random(1))
        self.assertFalse(exact)
        self.assertGreaterEqual(p, 1 / 101)
        self.assertEqual(rag_eval.sign_flip_test(deltas, 100, random.Random(1)), (p, exact))

    def test_clopper_pearson(self):
        # no success in n: upper = 1 - (alpha/2) ** (1/n); all successes: lower = (alpha/2) ** (1/n)
        low, high = rag_eval.clopper_pearson(0, 10)
        self.assertEqual(low, 0.0)
        self.assertAlmostEqual(high, 1 - 0.025 ** (1 / 10), places=12)
        low, high = rag_eval.clopper_pearson(10, 10)
        self.assertAlmostEqual(low, 0.025 ** (1 / 10), places=12)
        self.assertEqual(high, 1.0)

    def test_holm(self):
        # sorted: a 0.01 * 3 = 0.03; c 0.03 * 2 = 0.06; b max(0.06, 0.04 * 1) = 0.06
        adjusted = rag_eval.holm({"a": 0.01, "b": 0.04, "c": 0.03})
        self.assertEqual(set(adjusted), {"a", "b", "c"})
        for name, value in {"a": 3 * 0.01, "c": 2 * 0.03, "b": 2 * 0.03}.items():
            self.assertAlmostEqual(adjusted[name], value, places=15)

    def test_bootstrap_interval(self):
        self.assertEqual(tuple(rag_eval.bootstrap_interval([0.25] * 5)), (0.25, 0.25))
        low, high = rag_eval.bootstrap_interval([0.0, 1.0] * 10)
        self.assertLessEqual(low, 0.5)
        self.assertGreaterEqual(high, 0.5)
        self.assertEqual(rag_eval.bootstrap_interval([0.0, 1.0] * 10), (low, high))  # seeded, repeatable


# === Baseline and gate ===


class TestBaselineAndGate(TempDirMixin, unittest.TestCase):
    def test_fixture_gate(self):
        means = rag_eval.evaluate(*load_fixtures(), k=5)["mean"]
        with open(BASELINE, encoding="utf-8") as f:
            baseline = json.load(f)
        self.assertEqual(baseline, {"recall@5": 0.70, "success@5": 0.6667, "mrr@5": 0.55, "ndcg@5": 0.52})
        found = rag_eval.regressions(means, baseline, 0.02)
        # mrr: 0.55 - 0.5 = 0.05 > 0.02; recall: 0.70 - 2/3 = 0.0333 > 0.02;
        # ndcg: 0.52 - 0.5095 = 0.0105; success: 0.6667 - 2/3 = 0.00003
        self.assertEqual(sorted(found), ["mrr@5", "recall@5"])
        self.assertEqual(found["mrr@5"], (0.55, 0.5))
        self.assertEqual(found["recall@5"][0], 0.70)
        self.assertAlmostEqual(found["recall@5"][1], 2 / 3, places=15)

    def test_missing_metric_is_a_regression(self):
        self.assertEqual(rag_eval.regressions({"recall@5": 0.9}, {"recall@5": 0.5, "ndcg@10": 0.4}, 0.02),
                         {"ndcg@10": (0.4, None)})

    def test_drop_at_the_threshold(self):
        for was, now, max_drop, flagged in [
            (0.52, 0.50, 0.02, False),  # exactly 0.02 (0.52 - 0.50 is 0.020000000000000018 in floats)
            (0.70, 0.68, 0.02, False),
            (0.30, 0.20, 0.10, False),
            (1.00, 0.90, 0.10, False),
            (0.5, 0.5, 0.0, False),
            (0.52, 0.4999, 0.02, True),  # 0.0201
            (0.5, 0.4999, 0.0, True),
            (0.5, 0.9, 0.02, False),  # a rise
        ]:
            with self.subTest(was=was, now=now, max_drop=max_drop):
                found = rag_eval.regressions({"m@5": now}, {"m@5": was}, max_drop)
                self.assertEqual(found, {"m@5": (was, now)} if flagged else {})

    def test_default_max_drop(self):
        self.assertEqual(rag_eval.regressions({"m@5": 0.48}, {"m@5": 0.5}), {})  # 0.02
        self.assertEqual(rag_eval.regressions({"m@5": 0.47}, {"m@5": 0.5}), {"m@5": (0.5, 0.47)})

    def test_invalid_max_drop(self):
        for max_drop in (-1, -0.01, math.nan, math.inf, True, "0.02", None):
            with self.subTest(max_drop=max_drop):
                with self.assertRaises(ValueError):
                    rag_eval.regressions({"m@5": 0.5}, {"m@5": 0.5}, max_drop)

    def test_read_baseline_rejects(self):
        for label, text in [
            ("string", '{"recall@5": "0.5"}'),
            ("boolean", '{"recall@5": true}'),
            ("null", '{"recall@5": null}'),
            ("1e999", '{"recall@5": 1e999}'),
            ("NaN", '{"recall@5": NaN}'),
            ("-Infinity", '{"recall@5": -Infinity}'),
            ("a list value", '{"recall@5": [0.5]}'),
            ("a list", "[0.5]"),
            ("duplicated key", '{"recall@5": 0.5, "recall@5": 0.6}'),
            ("empty", ""),
            ("invalid JSON", '{"recall@5": 0.5'),
        ]:
            with self.subTest(label):
                path = self.write("baseline.json", text)
                with self.assertRaises(rag_eval.RagEvalError) as ctx:
                    rag_eval.read_baseline(path)
                self.assertIn(path, str(ctx.exception))


# === Reporting ===


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
                json.dump({"ndcg@10": 0.4, "ndcg@5": 0.5}, f)
            code, out, err = run_main([QRELS, RUN, "--baseline", path])
        self.assertEqual(code, 1)
        self.assertIn("REGRESSION ndcg@10: baseline 0.4000, now missing", err.splitlines())
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


# === Command line ===


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
            ("grade 1.0", "qrels", b'{"q1": {"a": 1.0}}'),
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
        self.assertEqual(err, f"{ERROR_PREFIX}{path}: grade 1024 is too large for the exponential gain 2**grade - 1 "
                              f"(at most {rag_eval.MAX_EXP_GRADE}; --gain linear takes any)\n")
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


# === Entry point ===


class TestEntryPoint(TempDirMixin, unittest.TestCase):
    """Real processes: the README's quick start runs the script itself; the others run
    ``python -m rag_eval``, whose bytecode the children share (helpers_for_tests)."""

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
                self.assertEqual(self.error(f"{header}\nq1\td1\t1\t9\n"), ERROR_PREFIX + "QRELS:2: expected 3 fields, "
                                 "as the header on line 1 names, got 4")

    def test_only_a_csv_row_with_an_open_quote_hints_at_a_line_break(self):
        self.assertEqual(self.error('qid,docno,label\nq1,"d\n1",1\n'), ERROR_PREFIX + "QRELS:2: expected 3 fields, as "
                         "the header on line 1 names, got 2; a quoted value that holds a line break? each row must be one line")
        self.assertEqual(self.error('qid\tdocno\tlabel\nq1\td"1\t1\t9\n'), ERROR_PREFIX + "QRELS:2: expected 3 fields, "
                         "as the header on line 1 names, got 4")  # a quote in a TSV value is a character like any other
        self.assertEqual(self.error('qid,docno,label\nq1,"d1",1,9\n'), ERROR_PREFIX + "QRELS:2: expected 3 fields, "
                         "as the header on line 1 names, got 4")  # its quotes closed: no line break in it

    def test_an_empty_grade_is_a_bad_grade_not_a_missing_field(self):
        self.assertEqual(self.error("qid\tdocno\tlabel\nq1\td1\t\n"),
                         ERROR_PREFIX + "QRELS:2: grade must be an integer, got ''")

    def test_only_a_score_column_suggests_a_run(self):
        self.assertEqual(self.error("qid\tdocno\tlabel\nq1\td1\t0.5\n"),
                         ERROR_PREFIX + "QRELS:2: grade must be an integer, got '0.5'")
        self.assertEqual(self.error("qid\tdocno\tscore\nq1\td1\t0.5\n"),
                         ERROR_PREFIX + "QRELS:2: grade must be an integer, got '0.5'; is this a run? "
                                        "the order is QRELS RUN")


class TestDeltaSplit(unittest.TestCase):
    """delta_split: total = labels + system, for the metrics that all three means have."""

    def test_only_metrics_in_all_three(self):
        now = {"recall@5": 0.5, "mrr@5": 0.25, "ndcg@5": 0.75}
        old_on_new = {"recall@5": 0.75, "mrr@5": 0.5}  # no ndcg@5
        old_on_old = {"recall@5": 1.0, "ndcg@5": 0.5}  # no mrr@5
        self.assertEqual(rag_eval.delta_split(now, old_on_new, old_on_old),
                         {"recall@5": {"total": 0.5 - 1.0, "labels": 0.75 - 1.0, "system": 0.5 - 0.75}})



class TestMeasureFunctionsCheckTheGainRange(unittest.TestCase):
    """The per-measure functions refuse a grade too large for the exponential gain, as evaluate does
    (2**grade - 1 overflows a float past 1023; the limit is far below), and take any with gain linear."""

    def test_every_measure_function(self):
        top = rag_eval.MAX_EXP_GRADE
        for function in (rag_eval.recall_at_k, rag_eval.success_at_k, rag_eval.reciprocal_rank, rag_eval.ndcg_at_k,
                         rag_eval.precision_at_k, rag_eval.ap_at_k, rag_eval.judged_at_k):
            with self.subTest(function=function.__name__):
                error = assert_value_error(self, function, ["a", "b"], {"a": top + 1}, 2)
                self.assertIn(f"grade {top + 1} is too large for the exponential gain", str(error))
                # a only, at rank 1: every measure gives the same for any positive grade (nDCG 1, not the gain)
                self.assertEqual(function(["a", "b"], {"a": top}, 2), function(["a", "b"], {"a": top + 1}, 2, gain="linear"))


class TestEvaluationChecksAndChunks(unittest.TestCase):
    """Evaluation's input checks say what is wrong and where; chunk ids become documents; unjudged
    documents and abstention are counted as documented (each test kills a planted mutant that lived)."""

    def assert_error(self, message, func, *args, **kwargs):
        error = assert_value_error(self, func, *args, **kwargs)
        self.assertIsInstance(error, rag_eval.RagEvalError)
        self.assertEqual(str(error), message)

    def test_a_ranking_that_is_neither_list_nor_object(self):
        for ranking, kind in (("ab", "a string"), (None, "null"), (3, "a number")):
            with self.subTest(ranking=ranking):
                self.assert_error(f"ranking: expected a list of document ids or an object of document -> score, "
                                  f"got {kind}", rag_eval.ndcg_at_k, ranking, {"a": 1}, 1)

    def test_ids_must_be_strings(self):
        self.assert_error("run: query id must be a string, got a number", rag_eval.evaluate, {"q": {"a": 1}}, {1: ["a"]})
        self.assert_error("qrels: document id must be a string, got a number",
                          rag_eval.evaluate, {"q": {1: 1}}, {"q": ["a"]})
        self.assert_error("qrels: query id must be a string, got a number", rag_eval.evaluate, {1: {"a": 1}}, {"q": ["a"]})
        # a bad ranking after a good one (lists and scores mixed, so the check goes query by query)
        self.assert_error("run: query 'c': ranking must be a list of strings, found a number", rag_eval.evaluate,
                          {"a": {"x": 1}}, {"a": ["x"], "b": {"x": 1.0}, "c": [1]}, drop_unknown_queries=True)

    def test_a_bad_grade_names_its_query_when_there_is_one(self):
        self.assert_error("qrels: query 'q', document 'a': grade must be a non-negative integer (at most "
                          f"{rag_eval.MAX_GRADE}), got -1", rag_eval.evaluate, {"q": {"a": -1}}, {"q": ["a"]})
        self.assert_error(f"grades: document 'a': grade must be a non-negative integer (at most {rag_eval.MAX_GRADE}), "
                          "got -1", rag_eval.ndcg_at_k, ["a"], {"a": -1}, 1)

    def test_unknown_queries_name_the_first_in_sorted_order(self):
        # run queries zz and za are not judged: sorted, za comes first; the qrels' first query is named
        self.assert_error("run: 2 run queries are not in the qrels (first: 'za'; the qrels have 'q'); drop them with "
                          "--drop-unknown-queries", rag_eval.evaluate, {"r": {"a": 1}, "q": {"a": 1}},
                          {"zz": ["a"], "za": ["a"], "q": ["a"]})

    def test_abstain_below_must_be_finite(self):
        for bad in (float("nan"), float("inf")):
            with self.subTest(bad=bad):
                self.assert_error(f"abstain_below must be a finite number, got {bad!r}", rag_eval.evaluate,
                                  {"q": {"a": 1}}, {"q": {"a": 1.0}}, abstain_below=bad)

    def test_abstention_by_best_score(self):
        # q2 and q3 have no relevant document (unscored); their best scores are 0.3 and 0.6:
        # below 0.5 only q2 abstains, below 0.7 both, below 0.3 neither (0.3 is not below 0.3)
        qrels = {"q1": {"a": 1}, "q2": {"b": 0}, "q3": {"c": 0}}
        run = {"q1": {"a": 0.9}, "q2": {"c": 0.3, "e": 0.1}, "q3": {"d": 0.6}}
        for threshold, abstained in ((0.5, ["q2"]), (0.7, ["q2", "q3"]), (0.3, [])):
            with self.subTest(threshold=threshold):
                result = rag_eval.evaluate(qrels, run, 1, abstain_below=threshold)
                self.assertEqual(result["abstention"], {"queries": 2, "abstained": abstained, "share": len(abstained) / 2})

    def test_documents_run_keeps_each_documents_best_chunk(self):
        # scored: d's best chunk is d#2 (0.9); a list: each document at its first (best) chunk's place
        self.assertEqual(rag_eval.documents_run({"q": {"d#1": 0.5, "e#1": 0.7, "d#2": 0.9}}, "#"), {"q": {"d": 0.9, "e": 0.7}})
        self.assertEqual(rag_eval.documents_run({"q": ["d#2", "e#1", "d#1"]}, "#"), {"q": ["d", "e"]})
        self.assertEqual(rag_eval.documents_qrels({"q": {"d#1": 1, "d#2": 2, "e#3": 0}}, "#"), {"q": {"d": 2, "e": 0}})

    def test_evaluate_with_doc_id_sep_on_a_scored_run(self):
        # chunks -> documents: d (best 0.9) at rank 1, e (0.7) at rank 2; d judged 2 by its best chunk, e unjudged
        # nDCG@2 = (3 / 1) / (3 / 1) = 1; precision@2 = 1 / 2
        run = {"q": {"d#1": 0.5, "e#1": 0.7, "d#2": 0.9}}
        result = rag_eval.evaluate({"q": {"d#1": 1, "d#2": 2}}, run, 2, measures=["ndcg", "precision"], doc_id_sep="#")
        self.assertEqual(result["per_query"]["q"], {"ndcg": 1.0, "precision": 1 / 2})
        self.assertEqual(rag_eval.ndcg_at_k({"d#1": 0.5, "e#1": 0.7, "d#2": 0.9}, {"d#1": 1, "d#2": 2}, 2, doc_id_sep="#"), 1.0)

    def test_documents_whose_scores_tie_go_by_document_id(self):
        # d1_3 and d12_1 both score 7.5: as chunks, trec_eval puts d1_3 first ("_" sorts above "2"); as
        # documents (the MaxP run), d12 and d1 tie at 7.5 and d12 goes first ("2" sorts above the end of
        # "d1"). The document rule holds in the library and in every reader: d1 at rank 2, mrr 1/2.
        qrels, run = {"q1": {"d1": 1}}, {"q1": {"d1_3": 7.5, "d12_1": 7.5}}
        self.assertEqual(rag_eval.documents_run(run, "_"), {"q1": {"d1": 7.5, "d12": 7.5}})
        self.assertEqual(rag_eval.evaluate(qrels, run, 5, measures=["mrr"], doc_id_sep="_")["mean"]["mrr@5"], 0.5)
        self.assertEqual(rag_eval.evaluate({"q1": {"d1_3": 1}}, run, 5, measures=["mrr"])["mean"]["mrr@5"], 1.0)
        with tempfile.TemporaryDirectory() as tmp:
            paths = [os.path.join(tmp, name) for name in ("q.json", "r.trec")]
            with open(paths[0], "w") as out:
                json.dump(qrels, out)
            with open(paths[1], "w") as out:
                out.write("q1 Q0 d1_3 1 7.5 t\nq1 Q0 d12_1 2 7.5 t\n")
            code, out, err = run_main([*paths, "--doc-id-sep", "_", "--measures", "mrr"])
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["mean"]["mrr@5"], 0.5)

    def test_unjudged_documents_by_rank_then_query(self):
        # q1: x (unjudged) @1, a @2, b @3, y (unjudged) @4; q2 by score: z (unjudged, 0.9) @1, c @2;
        # q3 is not judged, so not listed
        qrels = {"q1": {"a": 1, "b": 0}, "q2": {"c": 2}}
        run = {"q1": ["x", "a", "b", "y"], "q2": {"c": 0.5, "z": 0.9}, "q3": ["w"]}
        self.assertEqual(rag_eval.unjudged_documents(qrels, run, 4), [("q1", "x", 1), ("q2", "z", 1), ("q1", "y", 4)])
        self.assertEqual(rag_eval.unjudged_documents(qrels, run, 3), [("q1", "x", 1), ("q2", "z", 1)])
        # with a separator, chunks of a judged document are judged
        self.assertEqual(rag_eval.unjudged_documents({"q": {"a": 1}}, {"q": ["a#1", "b#1", "a#2"]}, 3, doc_id_sep="#"),
                         [("q", "b", 2)])

    def test_abstention_of_queries_the_run_left_empty(self):
        # q2, q3, q4 have no relevant document; the run has no entry for q2, an empty ranking for q3,
        # and a document for q4: q2 and q3 abstained, with or without a threshold (no scores needed for them)
        qrels = {"q1": {"a": 1}, "q2": {"b": 0}, "q3": {"b": 0}, "q4": {"b": 0}}
        for run, threshold in (({"q1": ["a"], "q3": [], "q4": ["c"]}, None),
                               ({"q1": {"a": 1.0}, "q3": {}, "q4": {"c": 0.9}}, 0.5)):
            with self.subTest(threshold=threshold):
                abstention = rag_eval.evaluate(qrels, run, 1, abstain_below=threshold)["abstention"]
                self.assertEqual(abstention, {"queries": 3, "abstained": ["q2", "q3"], "share": 2 / 3})

    def test_conventions_are_checked(self):
        for options, message in (({"judged_only": "yes"}, "judged_only must be true or false, got 'yes'"),
                                 ({"gain": "log"}, "gain must be one of exp, linear, got 'log'"),
                                 ({"min_grade": 0}, "min grade must be a positive integer, got 0"),
                                 ({"doc_id_sep": ""}, "doc_id_sep must be a non-empty string, got ''")):
            with self.subTest(options=options):
                self.assert_error(message, rag_eval.evaluate, {"q": {"a": 1}}, {"q": ["a"]}, **options)

    def test_a_metric_asked_at_its_own_cutoff(self):
        # ndcg@2 at cutoff 2 only, recall at every cutoff (1 and 3); a ranks 1st, b (grade 1) 2nd
        result = rag_eval.evaluate({"q": {"a": 0, "b": 1}}, {"q": ["a", "b"]}, [1, 3], measures=["nDCG@2", "recall"])
        self.assertEqual(result["mean"], {"recall@1": 0.0, "ndcg@2": (1 / math.log2(3)) / 1, "recall@3": 1.0})

    def test_judged_filter_keeps_by_grade_1_by_default(self):
        keep = rag_eval.judged_filter({"q": {"a": 1}, "u": {"b": 0}})
        # q has a relevant document (grade 1): its unjudged x goes; u has none: kept whole
        self.assertEqual((keep("q", "a"), keep("q", "x"), keep("u", "x"), keep("other", "x")), (True, False, True, True))
        self.assertTrue(rag_eval.judged_filter({"q": {"a": 1}}, min_grade=2)("q", "x"))  # no grade 2: kept whole


class TestTrecEvalSpellings(unittest.TestCase):
    """trec_eval's -m form (``ndcg_cut.10``) is a spelling of its own measure names only."""

    def test_dot_forms(self):
        for text, pair in (("ndcg_cut.10", ("ndcg", 10)), ("P.5", ("precision", 5)), ("recall.20", ("recall", 20)),
                           ("success.2", ("success", 2)), ("map_cut.100", ("ap", 100)), ("NDCG_CUT.3", ("ndcg", 3))):
            with self.subTest(text=text):
                self.assertEqual(rag_eval.parse_metric(text), pair)
        # evidence measures, and the document level of the id measures
        self.assertEqual([rag_eval.parse_metric(text) for text in ("iou@5", "doc.recall@5", "DOC.nDCG@3")],
                         [("iou", 5), ("doc.recall", 5), ("doc.ndcg", 3)])
        for text in ("ndcg_at.10", "recall_at.5", "hit_rate.5", "ndcg.10", "doc.iou@5"):  # no such spelling
            with self.subTest(text=text):
                with self.assertRaisesRegex(rag_eval.RagEvalError, f"^unknown metric '{re.escape(text)}' "):
                    rag_eval.parse_metric(text)


class TestConstantsAsDocumented(unittest.TestCase):
    """The numbers users see, written out here (a test that compares with rag_eval's own constant cannot fail)."""

    def test_exit_codes_as_the_readme_and_help_list_them(self):
        codes = (rag_eval.EXIT_OK, rag_eval.EXIT_REGRESSION, rag_eval.EXIT_ERROR, rag_eval.EXIT_INCONCLUSIVE,
                 rag_eval.EXIT_INTERRUPTED, rag_eval.EXIT_BROKEN_PIPE, rag_eval.EXIT_TERMINATED)
        self.assertEqual(codes, (0, 1, 2, 3, 130, 141, 143))  # 128 + SIGPIPE (13), 128 + SIGTERM (15)
        code, out, _ = run_main(["--help"])
        self.assertEqual(code, 0)
        self.assertIn("\n  143  terminated (SIGTERM); no file was left half-written\n", out)

    def test_an_error_line_is_at_most_300_characters(self):
        code, out, err = run_main([os.path.join("no-such-folder", "q" * 400 + ".json"), "run.json"])
        self.assertEqual((code, out, len(err)), (rag_eval.EXIT_ERROR, "", 301))  # 300 and the line end
        self.assertTrue(err.startswith("rag_eval: error: no-such-folder") and err.endswith("qqq...\n"), err)


if __name__ == "__main__":
    unittest.main()
