"""The run readers after the lean-core merge (issue 12): one row reader for JSONL, MS MARCO, header files
and JSON row objects, and one JSON reader for a streamed file and a document parsed whole (standard input).

Each test compares two ways of reading the same run: what must not differ is the run, the "was anything
judged?" flag and the repeated-documents count.  Random cases are bounded by a count and a seed."""

import json
import os
import random
import tempfile
import unittest
from unittest import mock

import rag_eval

FULL = os.environ.get("RAG_EVAL_FULL") == "1"  # CI's full runs (3.9, 3.13) read more random runs


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
        keep = rag_eval.judged_filter(qrels, 1)
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
            path = write(tmp, "run.json", json.dumps({"q1": {"a" * (rag_eval.MAX_ID + 1): 1.0}}))
            for got in (read(path), from_stdin(path)):
                self.assertRegex(got, r"query 'q1': an id longer than 4096 bytes$")
            # Exactly MAX_ID bytes is fine, however many characters (2 bytes each here).
            fine = {"q1": {"a" * rag_eval.MAX_ID: 1.0, "\u00e9" * (rag_eval.MAX_ID // 2): 2.0}}
            path = write(tmp, "run.json", json.dumps(fine))
            self.assertEqual(read(path), from_stdin(path))
            self.assertEqual(rag_eval.read_run(path), fine)

    def test_numbers_cut_by_a_block_are_read_whole_while_streaming(self):
        """A value cut by a block is incomplete, not invalid: the stream reads on, not the file again."""
        run = {"q1": {"a": 12345.678, "b": -5e-4, "c": 100}, "q2": [["d", 98765], ["e", 1.25]]}
        expected = {"q1": run["q1"], "q2": {"d": 98765, "e": 1.25}}
        saved = rag_eval.READ_BLOCK
        with tempfile.TemporaryDirectory() as tmp:
            path = write(tmp, "run.json", json.dumps(run))
            try:
                for block in range(1, 16):
                    rag_eval.READ_BLOCK = block
                    streamed = rag_eval._read_run_once(path, "json", rag_eval._ReadOptions(max_bytes=1 << 30), True)
                    self.assertEqual(streamed.run, expected, block)
            finally:
                rag_eval.READ_BLOCK = saved

    def test_grades_up_to_max_grade(self):
        with tempfile.TemporaryDirectory() as tmp:
            for grade, expected in ((rag_eval.MAX_GRADE, {"q1": {"a": rag_eval.MAX_GRADE}}),
                                    (rag_eval.MAX_GRADE + 1, f"grade must be at most {rag_eval.MAX_GRADE}, got ")):
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
                    with self.subTest(case=case, block=block), mock.patch.object(rag_eval, "READ_BLOCK", block):
                        self.assertEqual(read(path, "auto", 5), whole)
                        self.assertEqual(from_stdin(path, "auto", 5), whole)


if __name__ == "__main__":
    unittest.main()


class TestCopyOfTheQrelsOnStandardInput(unittest.TestCase):
    """The "copy of the qrels" refusal reads the whole run: a run that looks like one only once cut to the
    cutoff or filtered by --judged-only is scored, from a file and from standard input alike."""

    QRELS = {"q1": {"a": 1, "b": 2, "c": 0}, "q2": {"d": 1, "e": 0}}
    CASES = [  # (run, options): the top k + 1 (or the judged documents) are scored by their grades
        ({"q1": {"b": 2, "a": 1, "x": -1}, "q2": {"d": 1, "e": 0, "z": -1}}, ["--k", "1"]),
        ({"q1": {"x": 3, "b": 2, "a": 1}, "q2": {"z": 3, "d": 1, "e": 0}}, ["--k", "5", "--judged-only"]),
    ]

    def main(self, argv, stdin=None):
        from helpers_for_tests import run_main
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
                self.assertIn("the run is a copy of the qrels", err)


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


class TestReadersAfterTheLeanPass(unittest.TestCase):
    """Edge cases the lean pass of the input helpers must keep (issue 12): each pins an error message, or
    the step at which a reader gives up."""

    QRELS = "q1 0 a 1\n"

    def main(self, *argv):
        from helpers_for_tests import run_main
        return run_main(list(argv))

    def test_a_streamed_key_or_id_that_is_not_a_string_is_refused_before_reading_on(self):
        # The stream stops at the first token that cannot be a string, so a tight --max-input-bytes is never
        # reached: the error is the plain reader's, not "more than N bytes".
        padding = ", ".join(f'"d{n}"' for n in range(200))
        cases = [('{"q1": ["a"], \x00"q2": [%s]}' % padding, ":1: invalid JSON: Expecting property name"),
                 ('{"q1": ["a", 5, %s]}' % padding, "query 'q1': ranking must be a list of strings, found a number")]
        with tempfile.TemporaryDirectory() as folder:
            qrels = write(folder, "qrels.trec", self.QRELS)
            for text, message in cases:
                run = write(folder, "run.json", text)
                with self.subTest(text=text[:20]):
                    code, out, err = self.main(qrels, run, "--max-input-bytes", "300")
                    self.assertEqual((code, out), (2, ""))
                    self.assertIn(message, err)
                    self.assertNotIn("more than 300 bytes", err)

    def test_the_first_duplicated_key_is_named(self):
        with tempfile.TemporaryDirectory() as folder:
            path = write(folder, "qrels.json", '{"q1": {"a": 1, "b": 2, "b": 1, "a": 2}}')
            with self.assertRaisesRegex(rag_eval.RagEvalError, "duplicated key 'b' in a JSON object"):
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
            with self.assertRaisesRegex(rag_eval.RagEvalError, ":1: the header on line 1 is BEIR's qrels header"):
                rag_eval.read_run(beir)


class TestReaderPathsCoverageFound(unittest.TestCase):
    """Paths of the readers that no other test ran (coverage): each pins its error message or its count."""

    def read(self, reader, folder, name, text, *args):
        path = write(folder, name, text)
        try:
            return reader(path, *args)
        except rag_eval.RagEvalError as exc:
            return str(exc)[len(path):]

    def test_errors(self):
        long_id = "x" * (rag_eval.MAX_ID + 1)
        cases = [  # (reader, file name, text, the error after the path)
            (rag_eval.read_chunks, "chunks.jsonl", '{"chunk_id": "c", "doc_id": "d", "start": 0, "end": 5}\n'
             '{"chunk_id": "c", "doc_id": "d", "start": 0, "end": 6}\n', ":2: chunk 'c' is located twice, differently"),
            (rag_eval.read_run, "run.jsonl", '{"qid": "q1", "docid": "a", "relevance": 1}\n',
             ":1: a row with a grade and no score: is this a qrels file? the order is QRELS RUN"),
            (rag_eval.read_run, "run.jsonl", '{"qid": "q1", "docid": "a", "score": 2, "relevance": 1}\n', {"q1": {"a": 2}}),
            (rag_eval.read_corpus, "corpus.jsonl", '{"doc_id": "d", "text": ["a"]}\n', ":1: text must be a string, got a list"),
            (rag_eval.read_corpus, "corpus.jsonl", '{"doc_id": "d", "text": "ab"}\n{"doc_id": "d", "text": "ab"}\n',
             ":2: document 'd' appears twice"),  # even with the same text
            (rag_eval.read_corpus, "corpus.jsonl", '{"doc_id": "d", "text": "a"}\n{"doc_id": "d", "text": "a"}\n',
             ":2: document 'd' appears twice"),  # a one-character text too (Python shares those strings)
            (rag_eval.read_corpus, "corpus.jsonl", '{"doc_id": "d", "text": ""}\n{"doc_id": "d", "text": "b"}\n',
             ":2: document 'd' appears twice"),
            (rag_eval.read_qrels, "qrels.trec", "q1 0 a 1\r\nq1 0 b 1\rq1 0 c 1\n",  # a CRLF before the lone CR
             ":2: a line ends in a lone carriage return (CR); use LF or CRLF line ends"),
            (rag_eval.read_qrels, "qrels.csv", 'qid,"%s"\nq1,d1,1\n' % ("x" * 140_000),  # not a header: too long for csv
             ":1: expected 4 fields (qid iter docid grade), got 1"),
            (rag_eval.read_qrels, "qrels.tsv", "qid\tdocno\tlabel\nq1\td1\tx\n", ":2: grade must be an integer, got 'x'"),
            (rag_eval.read_run, "run.tsv", "1\tp1\t1\n1\tp2\t2\n1\t%s\t3\n" % long_id,
             ":3: document id longer than 4096 bytes"),
            (rag_eval.read_run, "run.json", '{"q1": ["a", "%s"]}' % long_id, ": query 'q1': an id longer than 4096 bytes"),
        ]
        with tempfile.TemporaryDirectory() as folder:
            for reader, name, text, expected in cases:
                with self.subTest(name=name, text=text[:30]):
                    self.assertEqual(self.read(reader, folder, name, text), expected)
            # JSON that the streamed reader leaves to the plain one: its error, for an evidence run too.
            self.assertEqual(self.read(rag_eval._located_run, folder, "run.json", "[1]", "auto", None),
                             ": expected a JSON object of query -> ranking, got a list")
            with self.assertRaisesRegex(rag_eval.RagEvalError, "/file/x: cannot read: Not a directory$"):
                rag_eval.read_run(os.path.join(write(folder, "file", "x"), "x"))

    def test_the_qrels_are_asked_about_a_query_of_rows_as_it_starts(self):
        """Past MAX_UNKNOWN_QUERIES the run is refused at the first row of the query too many, before its bad row."""
        runs = {"run.tsv": "1\tp1\t1\n7\tp1\t1\n8\tp1\t1\n8\tp2\tx\n",
                "run.jsonl": "".join(json.dumps({"qid": q, "docid": "a", "score": s}) + "\n"
                                     for q, s in (("1", 1), ("7", 1), ("8", 1), ("8", "x")))}
        with tempfile.TemporaryDirectory() as folder, mock.patch.object(rag_eval, "MAX_UNKNOWN_QUERIES", 1):
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
                self.assertEqual(str(caught.exception), f"{path}: {named}more than 200000 bytes (after gunzip); raise "
                                                        "the limit with --max-input-bytes")

    def test_a_json_document_may_be_exactly_its_limit(self):
        text = '{\n"q1": "tag"\n}'  # read in blocks of 4 bytes: the limit is counted as they come
        with tempfile.TemporaryDirectory() as folder, mock.patch.object(rag_eval, "MAX_SMALL_JSON", len(text)), \
                mock.patch.object(rag_eval, "READ_BLOCK", 4):
            self.assertEqual(self.read(rag_eval.read_slices, folder, "slices.json", text), {"q1": ["tag"]})
            self.assertEqual(self.read(rag_eval.read_slices, folder, "slices.json", text + " "),
                             f": JSON larger than {len(text) >> 20} MiB")

    def test_no_standard_input(self):
        with mock.patch("sys.stdin", None):
            with self.assertRaisesRegex(rag_eval.RagEvalError, "^<stdin>: there is no standard input to read$"):
                rag_eval.read_run("-")

    def test_json_size_caps(self):
        with tempfile.TemporaryDirectory() as folder:
            with mock.patch.object(rag_eval, "MAX_JSON_RUN", 1000):
                ranked = '{"q1": [%s]}' % ", ".join(f'"d{n}"' for n in range(1000))
                self.assertEqual(self.read(rag_eval.read_run, folder, "run.json", ranked),
                                 ": JSON larger than 0 MiB; for larger runs use TREC (read up to --max-input-bytes)")
            slices = '{\n%s}' % ",\n".join(f'"q{n}": "tag"' for n in range(rag_eval.READ_BLOCK // 10))
            with mock.patch.object(rag_eval, "MAX_SMALL_JSON", rag_eval.READ_BLOCK):  # a line per query: not read whole
                self.assertEqual(self.read(rag_eval.read_slices, folder, "slices.json", slices),
                                 ": JSON larger than 0 MiB")

    def test_repeats_of_a_streamed_ranking_longer_than_the_budget(self):
        # q1's lists go to _Repeats in stretches of 3 ids: its repeats across stretches are let go ("at least").
        text = '{"q1": ["a", "b", "c", "a", "d", "b"], "q2": ["a", "a"]}'
        with tempfile.TemporaryDirectory() as folder:
            path = write(folder, "run.json", text)
            self.assertEqual(tuple(rag_eval._read_run(path).repeated), (3, 2, False))
            with mock.patch.object(rag_eval, "REPEAT_BUDGET", 2):
                read = rag_eval._read_run(path)
            self.assertEqual((read.run, tuple(read.repeated)), ({"q1": ["a", "b", "c", "d"], "q2": ["a"]}, (1, 1, True)))
