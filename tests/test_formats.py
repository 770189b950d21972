"""Run and qrels formats as people bring them, and what reading them notes.

Each format is detected from its content and scores exactly as the
equivalent TREC or JSON file; each reading path (reduced while streamed,
plain, read again when a query's lines come apart) is exercised.
"""

import json
import os
import re
import sys
import unittest
from unittest import mock

import rag_eval
from tests.helpers import TempDirMixin, assert_error_line, run_main, tagged_lines


QRELS = "q1 0 a 2\nq1 0 b 1\nq2 0 c 1\nq3 0 e 1\n"


NOTE = "documents are listed more than once"


def note_lines(err):
    return [line for line in err.splitlines() if "listed more than once" in line]


class TestInputsHashed(TempDirMixin, unittest.TestCase):
    """--output's sha256 of each input is of every byte of the file, whatever its format: readers read to the end."""

    def test_every_format_whole_and_in_tiny_blocks(self):
        import gzip
        import hashlib

        rows = [(f"q{i // 20}", f"d{i}", 40 - i) for i in range(40)]  # a few blocks of 64 bytes
        files = {
            "run.trec.gz": gzip.compress("".join(f"{q} Q0 {d} 1 {s} t\n" for q, d, s in rows).encode(), mtime=0),
            "run.json": json.dumps({"q0": {d: s for _, d, s in rows[:20]}, "q1": [d for _, d, _ in rows[20:]]})
            + "\n" * 200,  # white space after the document is read (and hashed) too
            "run.jsonl": "".join(json.dumps({"qid": q, "doc_id": d, "score": s}) + "\n" for q, d, s in rows),
            "run.tsv": "qid\tdocno\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in rows),
            "run.msmarco": "".join(f"{q}\t{d}\t{i % 20 + 1}\n" for i, (q, d, _) in enumerate(rows)),
            "qrels.trec.gz": gzip.compress(QRELS.encode(), mtime=0),
        }
        saved = rag_eval._READ_BLOCK
        try:
            for block in (saved, 64):  # 64: the header line whole in the first block, which detection reads
                rag_eval._READ_BLOCK = block
                for name, data in files.items():
                    path = self.write(name, data)
                    with open(path, "rb") as handle:
                        expected = hashlib.sha256(handle.read()).hexdigest()
                    for read in (rag_eval.read_qrels,) if name.startswith("qrels") else (
                            rag_eval.read_run, lambda path: rag_eval._located_run(path, "auto", None)):
                        digests = {}
                        token = rag_eval._INPUT_SHA256.set(digests)
                        try:
                            read(path)
                        finally:
                            rag_eval._INPUT_SHA256.reset(token)
                        self.assertEqual(digests, {path: expected}, (name, block))
        finally:
            rag_eval._READ_BLOCK = saved

    def test_standard_input_is_hashed_and_left_open(self):
        import hashlib
        import io

        data = b"q1 Q0 a 1 3 t\nq1 Q0 b 2 2 t\n"
        with mock.patch("sys.stdin") as stdin:
            stdin.buffer = io.BufferedReader(io.BytesIO(data))
            digests = {}
            token = rag_eval._INPUT_SHA256.set(digests)
            try:
                self.assertEqual(rag_eval.read_run("-"), {"q1": {"a": 3.0, "b": 2.0}})
            finally:
                rag_eval._INPUT_SHA256.reset(token)
            self.assertFalse(stdin.buffer.closed)  # the caller's: a host process may read it again
        self.assertEqual(digests, {"-": hashlib.sha256(data).hexdigest()})


class TestRepeatedDocuments(TempDirMixin, unittest.TestCase):
    """One note: how many documents a run lists more than once, in how many queries; scores unchanged."""

    # q1 lists a three times and x twice, q2 lists c twice: 3 documents in 2 queries.
    TREC = ("q1 Q0 a 1 3 t\nq1 Q0 x 2 2.5 t\nq1 Q0 b 3 2 t\nq1 Q0 a 4 1 t\nq1 Q0 x 5 0.5 t\nq1 Q0 a 6 0.1 t\n"
            "q2 Q0 c 1 9 t\nq2 Q0 d 2 8 t\nq2 Q0 c 3 7 t\nq3 Q0 e 1 1 t\n")
    EXPECTED = "rag_eval: note: 3 documents are listed more than once in 2 queries of {}; each counts once, " \
               "at its best place (trec_eval refuses such a run)"

    def rows(self):
        for line in self.TREC.splitlines():
            qid, _, docid, _, score, _ = line.split()
            yield qid, docid, float(score)

    def scored(self, argv, run):
        code, out, err = run_main([self.write("qrels.txt", QRELS), run, "--k", "1,3,10"] + argv)
        self.assertEqual(code, 0, err)
        return json.loads(out)["mean"], note_lines(err)

    def check(self, run, name, argv=(), path_shown=None):
        """The note names the run; the means are those of the run without its repeats."""
        means, notes = self.scored(list(argv), run)
        self.assertEqual(notes, [self.EXPECTED.format(path_shown or run)], name)
        unique = self.write("unique.trec", "".join(f"{q} Q0 {d} 1 {s} t\n" for q, d, s in self.best()))
        self.assertEqual(means, self.scored(list(argv), unique)[0], name)
        self.assertEqual(self.scored(list(argv), unique)[1], [], name)  # zero repeats: no note

    def best(self):
        kept = {}
        for qid, docid, score in self.rows():
            kept[(qid, docid)] = max(score, kept.get((qid, docid), score))
        return [(qid, docid, score) for (qid, docid), score in kept.items()]

    def test_trec_on_every_path(self):
        run = self.write("run.trec", self.TREC)
        self.check(run, "reduced, line by line")
        self.check(run, "reduced, by block", ["--k", "1,3,1000"])
        self.check(run, "plain (--unjudged reads the whole run)", ["--unjudged", self.path("w.jsonl")])
        with mock.patch("sys.stdin") as stdin:
            stdin.buffer = open(run, "rb")
            self.addCleanup(stdin.buffer.close)
            means, notes = self.scored(["--format", "json"], "-")
        self.assertEqual(notes, [self.EXPECTED.format("<stdin>")])

    def test_trec_in_tiny_blocks_by_block(self):
        saved = rag_eval._READ_BLOCK
        rag_eval._READ_BLOCK = 40
        try:
            self.check(self.write("run.trec", self.TREC), "blocks of 40 bytes")
        finally:
            rag_eval._READ_BLOCK = saved

    def test_interleaved_queries_are_read_again_and_counted_across_their_parts(self):
        lines = self.TREC.splitlines(keepends=True)
        # q2 in the middle of q1: the reduced reader gives up, the plain one reads again.
        run = self.write("run.trec", "".join(lines[:2] + lines[6:9] + lines[2:6] + lines[9:]))
        self.check(run, "interleaved")
        _, _, repeated, _ = rag_eval._read_run(run, depth=4, judged=rag_eval.read_qrels(self.path("qrels.txt")),
                                            cutoffs=[3])
        self.assertEqual(repeated, (3, 2, False))
        # A document repeated only across the two parts of a query counts too.
        parts = self.write("parts.trec", "q1 Q0 a 1 3 t\nq2 Q0 c 1 1 t\nq1 Q0 a 2 2 t\n")
        self.assertEqual(rag_eval._read_run(parts)[2], (1, 1, False))

    def test_jsonl_scored_and_ranked(self):
        scored = "".join(json.dumps({"query_id": q, "doc_id": d, "score": s}) + "\n" for q, d, s in self.rows())
        self.check(self.write("run.jsonl", scored), "jsonl scored")
        self.check(self.write("run.jsonl", scored), "jsonl scored, plain", ["--unjudged", self.path("w.jsonl")])
        ranked = "".join(json.dumps({"query_id": q, "doc_id": d}) + "\n" for q, d, _ in self.rows())
        means, notes = self.scored([], self.write("ranked.jsonl", ranked))
        self.assertEqual(notes, [self.EXPECTED.format(self.path("ranked.jsonl"))])

    def test_json_ranked_streamed_and_parsed_whole(self):
        run = {}
        for qid, docid, _ in self.rows():
            run.setdefault(qid, []).append(docid)
        path = self.write("run.json", run)
        for argv in ([], ["--unjudged", self.path("w.jsonl")], ["--k", "1,3,1000"]):
            self.assertEqual(self.scored(argv, path)[1], [self.EXPECTED.format(path)], argv)
        for stream in (True, False):  # the streamed reader and the whole document (standard input reads so)
            read = rag_eval._read_run_once(path, "json", rag_eval._ReadOptions(max_bytes=1 << 30), stream)
            self.assertEqual(read.repeated, (3, 2, False), stream)
        pairs = self.write("pairs.json", {"q1": [["a", 1], ["b", 2], ["a", 3]], "q2": [["c", 1]]})
        for stream in (True, False):  # [doc, score] pairs: a document listed twice keeps its higher score
            read = rag_eval._read_run_once(pairs, "json", rag_eval._ReadOptions(max_bytes=1 << 30), stream)
            self.assertEqual(read, ({"q1": {"a": 3, "b": 2}, "q2": {"c": 1}}, False, (1, 1, False), {}), stream)
        unique = self.write("unique.json", {qid: list(dict.fromkeys(docs)) for qid, docs in run.items()})
        self.assertEqual(self.scored([], unique), (self.scored([], path)[0], []))

    def test_one_of_each_in_the_singular(self):
        code, _, err = run_main([self.write("qrels.txt", QRELS), self.write("run.trec", "q1 Q0 a 1 1 t\nq1 Q0 a 2 1 t\n"),
                                 "--allow-partial-run"])
        self.assertEqual(code, 0, err)
        self.assertIn("note: 1 document is listed more than once in 1 query of", err)

    def test_quiet_hides_it_and_the_report_keeps_it(self):
        output = self.path("out.json")
        code, _, err = run_main([self.write("qrels.txt", QRELS), self.write("run.trec", self.TREC), "--quiet",
                                 "--output", output])
        self.assertEqual((code, err), (0, ""))
        with open(output) as f:
            notes = json.load(f)["notes"]
        self.assertEqual([note for note in notes if NOTE in note],
                         [self.EXPECTED.format(self.path("run.trec"))[len("rag_eval: "):]])

    def test_ids_as_the_file_spells_them(self):
        """Chunks of one document (--doc-id-sep) are not repeats; a chunk listed twice is."""
        qrels = self.write("qrels.txt", "q1 0 a 1\n")
        run = self.write("run.trec", "q1 Q0 a#1 1 3 t\nq1 Q0 a#2 2 2 t\n")
        code, _, err = run_main([qrels, run, "--doc-id-sep", "#"])
        self.assertEqual((code, note_lines(err)), (0, []), err)
        self.write("run.trec", "q1 Q0 a#1 1 3 t\nq1 Q0 a#1 2 2 t\n")
        code, _, err = run_main([qrels, run, "--doc-id-sep", "#"])
        self.assertEqual(len(note_lines(err)), 1, err)

    def test_a_query_that_outgrows_the_budget_makes_it_at_least(self):
        run = self.write("run.trec", "q1 Q0 a 1 3 t\nq1 Q0 b 1 3 t\nq2 Q0 c 1 1 t\nq1 Q0 a 2 2 t\n")
        with mock.patch.object(rag_eval, "_REPEAT_BUDGET", 1):
            self.assertEqual(rag_eval._read_run(run)[2], (0, 0, True))
        self.assertEqual(rag_eval._read_run(run)[2], (1, 1, False))
        with mock.patch.object(rag_eval, "_REPEAT_BUDGET", 1):
            self.write("run.trec", "q1 Q0 a 1 3 t\nq1 Q0 b 1 3 t\nq1 Q0 a 2 2 t\nq2 Q0 c 1 1 t\n")
            self.assertEqual(rag_eval._read_run(run)[2], (1, 1, False))  # checked as it grew: exact still


def scores_of(code_out_err):
    code, out, err = code_out_err
    return code, (json.loads(out) if code == 0 else err)


class TestFormatsPeopleBring(TempDirMixin, unittest.TestCase):
    """Each format is detected from its content and scores exactly as the equivalent TREC or JSON file."""

    ARGV = ["--k", "1,3,10", "--measures", "recall,success,mrr,ndcg,precision,ap", "--digits", "17", "--per-query"]

    def setUp(self):
        super().setUp()
        import random

        rng = random.Random(14)
        self.qrels_rows = []
        self.rows = []  # (qid, docid, score), each query's lines together, best first
        for q in range(1, 8):
            qid = f"q{q}"
            pool = [f"d{i}" for i in range(30)]
            for docid in rng.sample(pool, 6):
                self.qrels_rows.append((qid, docid, rng.choice((0, 1, 2))))
            scores = sorted((round(rng.random() * 10, 3) for _ in range(rng.randint(5, 25))), reverse=True)
            self.rows += [(qid, docid, score) for docid, score in zip(rng.sample(pool, len(scores)), scores)]
        self.qrels = self.write("qrels.trec", "".join(f"{q} 0 {d} {g}\n" for q, d, g in self.qrels_rows))
        self.trec = self.write("run.trec", "".join(f"{q} Q0 {d} {i} {s} t\n" for i, (q, d, s) in enumerate(self.rows)))

    def ranked(self):
        ranking = {}
        for qid, docid, _ in self.rows:
            ranking.setdefault(qid, []).append(docid)
        return ranking

    def scored(self, run, qrels=None, argv=()):
        return scores_of(run_main([qrels or self.qrels, run] + self.ARGV + list(argv)))

    def same_everywhere(self, path, reference, qrels=None):
        """``path`` scores as ``reference`` on the reduced path, the plain one (--unjudged) and standard input."""
        expected = self.scored(reference, qrels)
        self.assertEqual(expected[0], 0, expected)
        self.assertEqual(self.scored(path, qrels), expected, "reduced")
        self.assertEqual(self.scored(path, qrels, ["--unjudged", self.path("w.jsonl")]), expected, "plain")
        with open(path, "rb") as data, mock.patch("sys.stdin") as stdin:
            stdin.buffer = data
            self.assertEqual(self.scored("-", qrels), expected, "standard input")
        saved = rag_eval._READ_BLOCK
        rag_eval._READ_BLOCK = 64  # queries cross blocks, and are pruned
        try:
            self.assertEqual(self.scored(path, qrels, ["--k", "1,2"]), self.scored(reference, qrels, ["--k", "1,2"]))
        finally:
            rag_eval._READ_BLOCK = saved

    # MS MARCO: qid<TAB>pid<TAB>rank, the rank column the order.

    def msmarco(self, shuffle=True):
        import random

        rng = random.Random(3)
        lines = []
        for qid, docs in self.ranked().items():
            rows = [f"{qid}\t{docid}\t{rank}\n" for rank, docid in enumerate(docs, 1)]
            if shuffle and qid != "q1":  # file order is not the order; the first query shows the layout
                rng.shuffle(rows)
            lines += rows
        return "".join(lines)

    def test_msmarco_run_orders_by_rank(self):
        path = self.write("run.tsv", self.msmarco())
        self.same_everywhere(path, self.write("run.json", self.ranked()))
        self.same_everywhere(path, self.trec)  # the same order as the scores give
        with mock.patch.object(rag_eval, "_trec_run", side_effect=AssertionError("read as TREC")):
            self.assertEqual(self.scored(path)[0], 0)

    def test_msmarco_run_in_any_line_order(self):
        # MS MARCO's own evaluation places each line by its rank: the first query's lines sorted by pid, or
        # shuffled, are still a run (distinct ranks 1..n), read as the ranked run it is
        import random

        ranked = self.write("run.json", self.ranked())
        rows = {qid: [f"{qid}\t{docid}\t{rank}\n" for rank, docid in enumerate(docs, 1)]
                for qid, docs in self.ranked().items()}
        for order in ("pid", "shuffled", "reversed"):
            with self.subTest(order=order):
                lines = []
                for qid, query_rows in rows.items():
                    query_rows = sorted(query_rows, key=lambda line: line.split("\t")[1]) if order == "pid" \
                        else query_rows[::-1] if order == "reversed" else random.Random(7).sample(query_rows, len(query_rows))
                    lines += query_rows
                self.assertNotEqual(lines[:2], rows["q1"][:2])  # the first query is out of rank order
                self.same_everywhere(self.write("run.tsv", "".join(lines)), ranked)
        # a rank repeated among ranks up to 9 looks like no grade: no hint that blames the order
        code, err = self.scored(self.write("twice.tsv", "q1\ta\t2\nq1\tb\t1\n"
                                           + "".join(f"q2\td{i}\t{i}\n" for i in range(1, 10)) + "q2\tx\t8\n"))
        self.assertTrue(err.endswith(":12: rank 8 appears twice in query 'q2'\n"), err)
        # ranks that skip one (1, 3) are not 1..n: no run, and a line whose last field is a grade gets the hint
        code, err = self.scored(self.write("gap.tsv", "q1\ta\t3\nq1\tb\t1\nq2\tc\t1\n"))
        assert_error_line(self, err, file=self.path("gap.tsv"), line=1, names=[" 3; is this a qrels file? the order is QRELS RUN"])
        # a three-field line whose last field is no integer looks like no qrels: no hint that blames the order
        code, err = self.scored(self.write("scores.tsv", "q1\ta\t0.5\nq1\tb\t0.25\n"))
        self.assertEqual(code, 2)
        line = assert_error_line(self, err, file=self.path("scores.tsv"), line=1, names=[" 3"])
        self.assertNotIn(";", line)  # no hint

    def test_msmarco_run_in_any_line_order_across_queries(self):
        # The whole file sorted by pid (as 'sort -k2' leaves it) or shuffled: queries' lines
        # interleave, the first query's rank 1 may be far off, and it was refused as a TREC run with the hint
        # that blames the argument order.  A query whose lines break off and come back is no qrels file.
        import random

        ranked = self.write("run.json", self.ranked())
        lines = [f"{qid}\t{docid}\t{rank}\n" for qid, docs in self.ranked().items() for rank, docid in enumerate(docs, 1)]
        for order, key in (("pid", lambda line: line.split("\t")[1]), ("shuffled", None)):
            with self.subTest(order=order):
                text = "".join(sorted(lines, key=key) if key else random.Random(5).sample(lines, len(lines)))
                self.same_everywhere(self.write("run.tsv", text), ranked)

    def test_no_qrels_hint_where_the_last_field_is_no_grade(self):
        # 'qid docid 12': an integer score or a rank, not a grade (grades are one digit): the error names the
        # line, and blames no argument order
        code, err = self.scored(self.write("int.tsv", "q1\ta\t12\nq1\tb\t11\nq2\tc\t15\n"))
        self.assertEqual(code, 2)
        line = assert_error_line(self, err, file=self.path("int.tsv"), line=1, names=[" 3"])
        self.assertNotIn("QRELS RUN", line)

    def test_msmarco_run_is_reduced_as_it_streams(self):
        qrels = rag_eval.read_qrels(self.qrels)
        read = rag_eval._read_run(self.write("run.tsv", self.msmarco()), depth=4, judged=qrels, cutoffs=[3])
        self.assertIsInstance(read.run, rag_eval._ReducedRun)
        self.assertTrue(read.any_judged)
        self.assertEqual(read.run, rag_eval._read_run(self.write("run.json", self.ranked()), depth=4, judged=qrels,
                                                      cutoffs=[3]).run)

    def test_msmarco_run_errors_name_the_line(self):
        cases = {"q1\ta\t1\nq1\tb\t2\nq2\tc\t1\nq2\td\t1\n": ":4: rank 1 appears twice in query 'q2'",
                 "q1\ta\t1\nq1\tb\t2\nq2\tc\tx\n": ":3: rank must be a positive integer, got 'x'",
                 "q1\ta\t1\nq1\tb\t2\nq2\tc\t0\n": ":3: rank must be a positive integer, got '0'",
                 "q1\ta\t1\nq1\tb\t2\nq2\tc\t1\t5\n": ":3: expected 3 fields (qid docid rank, as MS MARCO's runs), got 4"}
        for text, wanted in cases.items():
            code, err = self.scored(self.write("run.tsv", text))
            self.assertEqual(code, 2, text)
            self.assertIn(wanted, err, text)

    def test_qrels_given_as_the_run_still_get_the_hint(self):
        hint = "is this a qrels file? the order is QRELS RUN"
        for text in ("q1\td1\t1\nq1\td2\t1\n",  # BEIR's TSV: grade 1 twice, where a ranking goes on with 2
                     "q1\td1\t0\nq1\td2\t2\n",  # a grade 0 first
                     "q1 0 d1 1\nq1 0 d2 1\n",  # TREC's (and MS MARCO's qid 0 pid 1) four fields
                     "q1\td1\t2\nq1\td2\t3\n"):
            code, err = self.scored(self.write("qrels-as-run.txt", text))
            self.assertEqual(code, 2, text)
            assert_error_line(self, err, file=self.path("qrels-as-run.txt"), line=1)
            self.assertIn(hint, err, text)

    # JSON lists of row objects, as pandas' to_json(orient="records") writes them.

    def test_json_rows_run_scored_and_ranked(self):
        rows = [{"query_id": q, "doc_id": d, "score": s} for q, d, s in self.rows]
        self.same_everywhere(self.write("rows.json", rows), self.trec)
        jsonl = self.write("run.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
        self.same_everywhere(self.write("rows.json", rows), jsonl)
        ranked = [{"qid": q, "docid": d} for q, d, _ in self.rows]
        self.same_everywhere(self.write("ranked.json", ranked), self.write("run.json", self.ranked()))

    def test_json_rows_qrels(self):
        rows = [{"query_id": q, "doc_id": d, "relevance": g} for q, d, g in self.qrels_rows]
        path = self.write("qrels.json", rows)
        self.assertEqual(rag_eval.read_qrels(path), rag_eval.read_qrels(self.qrels))
        self.assertEqual(self.scored(self.trec, path), self.scored(self.trec))

    def test_json_rows_errors_name_the_row(self):
        for rows, wanted in (([{"query_id": "q1", "doc_id": "a", "score": 1}, 3], "row 2: expected a JSON object per row"),
                             ([{"query_id": "q1", "doc_id": "a", "score": 1}, {"query_id": "q1", "score": 2}],
                              "row 2: missing document id field")):
            for path in (self.write("rows.json", rows), "-"):
                with open(self.path("rows.json"), "rb") as data, mock.patch("sys.stdin") as stdin:
                    stdin.buffer = data
                    code, err = self.scored(path)
                self.assertEqual(code, 2)
                self.assertIn(wanted, err)
        code, err = self.scored(self.trec, self.write("q.json", [{"query_id": "q1", "doc_id": "a", "relevance": 1.5}]))
        self.assertEqual(code, 2)
        assert_error_line(self, err, file=self.path("q.json"), names=[": row 1: ", "1.5"])

    # [[doc, score], ...] pairs: scored.

    def test_pairs_are_a_scored_run(self):
        pairs = {}
        for qid, docid, score in self.rows:
            pairs.setdefault(qid, []).append([docid, score])
        self.same_everywhere(self.write("pairs.json", pairs), self.trec)
        scored = {qid: dict(map(tuple, entry)) for qid, entry in pairs.items()}
        self.same_everywhere(self.write("pairs.json", pairs), self.write("scored.json", scored))

    def test_pairs_errors(self):
        for path in (self.write("pairs.json", {"q1": [["a", 1], ["b"]]}), "-"):
            with open(self.path("pairs.json"), "rb") as data, mock.patch("sys.stdin") as stdin:
                stdin.buffer = data
                code, err = self.scored(path)
            self.assertEqual(code, 2)
            assert_error_line(self, err, file=self.path("pairs.json") if path != "-" else "<stdin>", quoted=["q1"],
                              names=["['b']"])

    # PyTerrier (and pandas) DataFrames written as TSV or CSV, with a header.

    def test_pyterrier_tsv_and_csv_runs(self):
        rank = {}
        tsv = ["qid\tdocid\tdocno\trank\tscore\tquery\n"]
        csv = [",qid,docno,score,rank,query\n"]  # to_csv() writes the index, a first column without a name
        for index, (qid, docid, score) in enumerate(self.rows):
            rank[qid] = rank.get(qid, -1) + 1
            tsv.append(f"{qid}\t{index}\t{docid}\t{rank[qid]}\t{score}\twhat is {qid}, really\n")
            csv.append(f'{index},{qid},{docid},{score},{rank[qid]},"what is ""{qid}"", really"\n')
        self.same_everywhere(self.write("run.tsv", "".join(tsv)), self.trec)
        self.same_everywhere(self.write("run.csv", "".join(csv)), self.trec)
        no_query = "".join(line.rsplit("\t", 1)[0] + "\n" for line in tsv)
        self.same_everywhere(self.write("run.tsv", no_query), self.trec)

    def test_a_header_with_a_rank_and_no_score_ranks_by_it(self):
        lines = ["qid\tpid\trank\n"] + self.msmarco().splitlines(keepends=True)
        self.same_everywhere(self.write("run.tsv", "".join(lines)), self.write("run.json", self.ranked()))

    def test_pyterrier_and_beir_qrels_headers(self):
        expected = rag_eval.read_qrels(self.qrels)
        for header, sep in (("qid\tdocno\tlabel", "\t"), ("query-id\tcorpus-id\tscore", "\t"),
                            ("qid,docno,label", ","), ("query_id doc_id relevance", " ")):
            text = header + "\n" + "".join(f"{q}{sep}{d}{sep}{g}\n" for q, d, g in self.qrels_rows)
            self.assertEqual(rag_eval.read_qrels(self.write("qrels.tsv", text)), expected, header)
        self.assertEqual(self.scored(self.trec, self.path("qrels.tsv")), self.scored(self.trec))

    def test_an_unrecognised_header_is_named(self):
        code, err = self.scored(self.trec, self.write("qrels.tsv", "query doc rel\nq1 d1 1\n"))
        self.assertEqual(code, 2)
        assert_error_line(self, err, file=self.path("qrels.tsv"), line=1, names=["(query, doc, rel)", rag_eval._QRELS_HEADERS])
        code, err = self.scored(self.write("run.tsv", "query doc score\nq1 d1 1\n"))
        assert_error_line(self, err, file=self.path("run.tsv"), line=1, names=["(query, doc, score)", rag_eval._RUN_HEADERS])
        code, err = self.scored(self.trec, self.write("qrels.tsv", "q1 d1 rel\n"))
        assert_error_line(self, err, file=self.path("qrels.tsv"), line=1, quoted=["rel"])  # a digit on the line: a judgment gone wrong

    def test_csv_lines_the_csv_module_refuses(self):
        code, err = self.scored(self.write("run.csv", ",qid,docno,score\n0,q1,a," + "x" * 200_000 + "\n"))
        self.assertEqual(code, 2)
        assert_error_line(self, err, file=self.path("run.csv"), line=2)
        code, err = self.scored(self.write("run.csv", "qid,docno\0,score\nq1,a,1\n"))  # csv in 3.9 refuses a NUL
        assert_error_line(self, err, file=self.path("run.csv"), line=1)
        # A header line the csv module refuses (a CR inside) is no header: the reader names what is wrong with it.
        code, err = self.scored(self.write("run.csv", "qid,docno\r,score\nq1,a,1\n"))
        assert_error_line(self, err, file=self.path("run.csv"), line=1)

    @unittest.skipUnless(os.path.exists("/proc/self/mem"), "needs Linux's /proc/self/mem")
    def test_a_file_that_opens_but_cannot_be_read(self):
        for read in (rag_eval.read_run, rag_eval.read_qrels):  # its first read (for the gzip magic) fails with EIO
            with self.subTest(read=read.__name__), self.assertRaises(rag_eval.RagEvalError) as caught:
                read("/proc/self/mem")
            assert_error_line(self, str(caught.exception), file="/proc/self/mem", names=["Input/output error"], prefix="")

    def test_header_files_given_the_wrong_way_round(self):
        qrels = self.write("qrels.tsv", "qid\tdocno\tlabel\nq1\td1\t1\n")
        run = self.write("run.tsv", "qid\tdocno\tscore\trank\nq1\td1\t2.5\t0\n")
        code, err = scores_of(run_main([run, qrels]))
        assert_error_line(self, err, file=run, line=1, names=["is this a run? the order is QRELS RUN"])
        code, err = scores_of(run_main([qrels, qrels]))
        assert_error_line(self, err, file=qrels, line=1, names=["is this a qrels file? the order is QRELS RUN"])

    def test_json_rows_qrels_follow_the_jsonl_rules(self):
        rows = [{"query_id": "q1", "doc_id": "a", "relevance": -1}, {"query_id": "q1", "doc_id": "b", "relevance": 2}]
        jsonl = self.write("qrels.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
        self.assertEqual(rag_eval.read_qrels(self.write("qrels.json", rows)), rag_eval.read_qrels(jsonl))
        self.assertEqual(rag_eval.read_qrels(self.path("qrels.json")), {"q1": {"b": 2}})  # -1: unjudged, as in TREC


class TestHostileFormats(TempDirMixin, unittest.TestCase):
    """What an attacker found in the new input formats (/tmp/attack_report.md): each refused cleanly or read right."""

    QRELS = "q1 0 a 2\nq1 0 b 1\nq2 0 c 1\nq2 0 d 0\n"
    RUN = "q1 Q0 a 1 3 t\nq1 Q0 b 2 2 t\nq2 Q0 c 1 1 t\n"

    def run_of(self, qrels, run, *argv):
        return scores_of(run_main([qrels, run, "--k", "5"] + list(argv)))

    def test_a_score_in_digits_or_spaces_of_another_script_is_refused(self):
        qrels = self.write("q.trec", self.QRELS)
        for name, score in (("fullwidth", "\uff13"), ("arabic-indic", "\u0663"), ("no-break space", "3\u00a0")):
            with self.subTest(name):
                run = self.write("s.trec", f"q1 Q0 a 1 {score} t\nq2 Q0 c 1 1 t\n")
                code, err = self.run_of(qrels, run)
                self.assertEqual(code, 2)
                assert_error_line(self, err, file=run, line=1, quoted=[score])
                tsv = self.write("s.tsv", f"qid\tdocno\tscore\nq1\ta\t{score}\n")
                code, err = self.run_of(qrels, tsv)
                self.assertEqual(code, 2)
                assert_error_line(self, err, file=tsv, line=2, quoted=[score])
                csv = self.write("s.csv", f"qid,docno,score\nq1,a,{score}\n")
                self.assertEqual(self.run_of(qrels, csv)[0], 2)

    def test_a_file_name_or_header_field_that_is_not_printable_is_escaped(self):
        qrels = self.write("q.trec", self.QRELS)
        run = self.write("x\n::error::pwned.trec", "q1 Q0 a 1 3 t\nq1 Q0 a 2 2 t\nq2 Q0 c 1 1 t\n")
        code, out, err = run_main([qrels, run, "--k", "5"])
        self.assertEqual(code, 0, err)
        (note,) = tagged_lines(err, "note")
        self.assertRegex(note, r"^rag_eval: note: 1 \D* 1 \D*" + re.escape(ascii(run)) + ";")
        self.assertNotIn("\n::error::", err)
        for name in ("doc\x1bc", "doc\x1cc", "doc\x85c", "doc\u2028c"):
            with self.subTest(repr(name)):
                bad = self.write("esc.tsv", f"topic\t{name}\trel\nq1\ta\t1\n")
                code, err = self.run_of(bad, run)
                self.assertEqual(code, 2)
                assert_error_line(self, err, file=bad, line=1, quoted=[name])

    def test_a_rank_repeated_when_a_ms_marco_query_comes_back_is_refused(self):
        qrels = self.write("q.trec", "q1 0 a 2\nq1 0 b 0\nq2 0 c 1\n")
        for order in ("q1\ta\t1\nq2\tc\t1\nq1\tb\t1\n", "q1\tb\t1\nq2\tc\t1\nq1\ta\t1\n"):
            run = self.write("r.tsv", order)
            for argv in ((), ("--unjudged", self.path("w.jsonl"))):  # reduced (read again), and plain
                code, err = self.run_of(qrels, run, *argv)
                self.assertEqual(code, 2)
                assert_error_line(self, err, file=run, line=3, quoted=["q1"])
        # A query the qrels lack is checked too; ranks out of order, and those that go on, are not repeats.
        code, err = self.run_of(qrels, self.write("r.tsv", "q1\ta\t1\nq9\tx\t3\nq1\tb\t2\nq9\ty\t1\nq9\tz\t3\n"))
        assert_error_line(self, err, file=self.path("r.tsv"), line=5, quoted=["q9"])
        code, out = self.run_of(qrels, self.write("r.tsv", "q1\ta\t1\nq2\tc\t1\nq1\tb\t2\nq2\tx\t2\n"))
        self.assertEqual((code, out["mean"]["mrr@5"]), (0, 1.0))
        saved = rag_eval._MAX_RANKS
        rag_eval._MAX_RANKS = 2  # the sets' budget spent: a later stretch is checked alone
        try:
            code, out = self.run_of(qrels, self.write("r.tsv", "q1\ta\t1\nq2\tc\t1\nq8\tx\t7\nq8\ty\t4\nq9\tx\t5\n"
                                                               "q9\ty\t3\nq1\tb\t2\nq9\tw\t5\n"), "--drop-unknown-queries")
            self.assertEqual(code, 0, out)
        finally:
            rag_eval._MAX_RANKS = saved

    def test_ranks_are_checked_for_repeats_among_a_querys_first_max_ranks_lines(self):
        with mock.patch.object(rag_eval, "_MAX_RANKS", 3):
            # q2's first three lines are checked for a repeated rank; its fourth is not.
            head = "q1\ta\t1\nq1\tb\t2\nq2\tx\t1\nq2\ty\t2\n"
            with self.assertRaisesRegex(rag_eval.RagEvalError, r"r\.tsv:5: .*'q2'"):
                rag_eval.read_run(self.write("r.tsv", head + "q2\tz\t1\n"))
            run = rag_eval.read_run(self.write("r.tsv", head + "q2\tz\t3\nq2\tw\t2\n"))
            self.assertEqual(run["q2"], ["x", "y", "w", "z"])  # ranks 1, 2, 2, 3: the tie by document id, descending

    def test_header_files_split_as_trec_files_do(self):
        qrels = self.write("q.trec", self.QRELS)
        expected = self.run_of(qrels, self.write("r.trec", self.RUN))
        self.assertEqual(expected[0], 0)
        rows = [("q1", "a", 3), ("q1", "b", 2), ("q2", "c", 1)]
        # pandas' to_csv(sep="\t") writes its index as a first column without a name.
        pandas = "\tqid\tdocno\tscore\n" + "".join(f"{i}\t{q}\t{d}\t{s}\n" for i, (q, d, s) in enumerate(rows))
        self.assertEqual(self.run_of(qrels, self.write("r.tsv", pandas)), expected)
        trailing = "qid\tdocno\tscore\t\n" + "".join(f"{q}\t{d}\t{s}\t\n" for q, d, s in rows)  # a tab ends each line
        self.assertEqual(self.run_of(qrels, self.write("r.tsv", trailing)), expected)
        # Only ASCII white space is stripped: a no-break space stays in the id, as TREC's bytes.split keeps it.
        for sep in ("\t", ",", " "):
            with self.subTest(repr(sep)):
                nbsp = self.write("nb.trec", "q1 Q0 a\u00a0 1 3 t\nq1 Q0 b 2 2 t\nq2 Q0 c 1 1 t\n")
                header = sep.join(("qid", "docno", "score")) + "\n"
                tsv = self.write("nb.tsv", header + f"q1{sep}a\u00a0{sep}3\nq1{sep} b {sep}2\nq2{sep}c{sep}1\n")
                self.assertEqual(self.run_of(qrels, tsv), self.run_of(qrels, nbsp))
                self.assertNotEqual(self.run_of(qrels, tsv), expected)

    def test_json_rows_and_jsonl_know_pyterrier_docno_and_label(self):
        qrels = self.write("q.trec", self.QRELS)
        expected = self.run_of(qrels, self.write("r.trec", self.RUN))
        rows = [{"qid": q, "docid": i, "docno": d, "rank": r, "score": s, "query": "x"}
                for i, (q, d, r, s) in enumerate((("q1", "a", 0, 3.0), ("q1", "b", 1, 2.0), ("q2", "c", 0, 1.0)))]
        jsonl = "".join(json.dumps(row) + "\n" for row in rows)
        self.assertEqual(self.run_of(qrels, self.write("r.json", rows)), expected)
        self.assertEqual(self.run_of(qrels, self.write("r.jsonl", jsonl)), expected)
        as_text = [dict(row, docid=str(row["docid"])) for row in rows]  # docno wins over a docid of text too
        self.assertEqual(self.run_of(qrels, self.write("r.json", as_text)), expected)
        judgments = [{"qid": q, "docno": d, "label": g} for q, d, g in (("q1", "a", 2), ("q1", "b", 1), ("q2", "c", 1),
                                                                       ("q2", "d", 0))]
        self.assertEqual(rag_eval.read_qrels(self.write("q.json", judgments)), rag_eval.read_qrels(qrels))
        self.assertEqual(rag_eval.read_qrels(self.write("q.jsonl", "".join(json.dumps(j) + "\n" for j in judgments))),
                         rag_eval.read_qrels(qrels))

    def test_more_files_given_the_wrong_way_round_get_the_hint(self):
        qrels, run = self.write("q.trec", self.QRELS), self.write("r.trec", self.RUN)
        beir = self.write("beir.tsv", "query-id\tcorpus-id\tscore\nq1\ta\t2\nq2\tc\t1\n")
        code, err = self.run_of(qrels, beir)
        self.assertEqual(code, 2)
        assert_error_line(self, err, file=beir, line=1, names=["is this a qrels file? the order is QRELS RUN"])
        scored = self.write("run.tsv", "qid\tdocno\tscore\nq1\ta\t12.5\n")
        code, err = self.run_of(scored, run)
        self.assertEqual(code, 2)
        assert_error_line(self, err, file=scored, line=2, quoted=["12.5"], names=["is this a run? the order is QRELS RUN"])
        msmarco = self.write("run.tsv", "".join(f"q{q}\td{q}{i}\t{i}\n" for q in (1, 2) for i in range(1, 7)))
        code, err = self.run_of(msmarco, run)
        self.assertEqual(code, 2)
        assert_error_line(self, err, file=msmarco, names=["is this a run? the order is QRELS RUN"])
        graded = self.write("q.tsv", "q1\ta\t1\nq1\tb\t2\nq1\tc\t3\nq1\td\t4\nq2\tc\t1\n")  # 1..4: judgments still
        self.assertEqual(len(rag_eval.read_qrels(graded)["q1"]), 4)
        # One judgment per query, grade 1, is no ranking: some query of a MS MARCO run lists more than one document.
        one = self.write("one.tsv", "q1\ta\t1\nq2\tc\t1\n")
        code, err = self.run_of(qrels, one)
        self.assertEqual(code, 2)
        assert_error_line(self, err, file=one, line=1, names=["is this a qrels file? the order is QRELS RUN"])
        code, out = self.run_of(qrels, self.write("r.tsv", "q1\ta\t1\nq2\tc\t1\nq2\td\t2\n"))
        self.assertEqual((code, out["mean"]["success@5"]), (0, 1.0))

    def test_a_repeat_check_that_was_incomplete_says_so_and_the_baseline_run_gets_its_note(self):
        qrels = self.write("q.trec", self.QRELS)
        run = self.write("run.trec", "q1 Q0 a 1 3 t\nq1 Q0 b 1 3 t\nq2 Q0 c 1 1 t\nq1 Q0 a 2 2 t\n")
        with mock.patch.object(rag_eval, "_REPEAT_BUDGET", 1):  # none found, and not all checked
            code, out, err = run_main([qrels, run, "--k", "5"])
        self.assertEqual(code, 0, err)
        (note,) = [line for line in tagged_lines(err, "note") if run in line]
        self.assertRegex(note, "^rag_eval: note: " + re.escape(run) + r" \D* 1 \D*$")
        code, out, err = run_main([qrels, self.write("r.trec", self.RUN), "--k", "5", "--baseline-run", run])
        self.assertEqual(code, 0, err)
        (note,) = tagged_lines(err, "note")
        self.assertRegex(note, r"^rag_eval: note: 1 \D* 1 \D*" + re.escape(run) + ";")

    def test_ranks_pyterrier_starts_at_0_and_the_rank_limit_is_named(self):
        qrels = self.write("q.trec", self.QRELS)
        expected = self.run_of(qrels, self.write("r.trec", self.RUN))
        zero = self.write("r.tsv", "qid\tdocno\trank\nq1\tb\t1\nq1\ta\t0\nq2\tc\t0\n")  # PyTerrier's FIRST_RANK is 0
        self.assertEqual(self.run_of(qrels, zero), expected)
        code, err = self.run_of(qrels, self.write("r.tsv", "qid\tdocno\trank\nq1\tb\t-1\n"))
        assert_error_line(self, err, file=self.path("r.tsv"), line=2, quoted=["-1"])
        code, err = self.run_of(qrels, self.write("m.tsv", "q1\ta\t1\nq1\tb\t2\nq2\tc\t1000000000\n"))
        assert_error_line(self, err, file=self.path("m.tsv"), line=3, quoted=["1000000000"], names=["9"])
        code, err = self.run_of(qrels, self.write("m.tsv", "q1\ta\t1\nq1\tb\t2\nq2\tc\t0\n"))
        assert_error_line(self, err, file=self.path("m.tsv"), line=3, quoted=["0"])

    def test_help_names_the_formats_read(self):
        code, out, err = run_main(["--help"])
        text = " ".join(out.split())
        self.assertIn("judgments: JSON, JSONL, TREC, BEIR's TSV or a TSV/CSV with a header (PyTerrier)", text)
        self.assertIn("the run: JSON (ranked or scored), JSONL, TREC, MS MARCO's qid pid rank or a TSV/CSV with a "
                      "header (PyTerrier)", text)

    def test_a_csv_value_holding_a_line_break_is_named(self):
        qrels = self.write("q.trec", self.QRELS)
        csv = self.write("r.csv", ',qid,docno,score,query\n0,q1,a,3,"what\nis it"\n1,q2,c,1,x\n')
        code, err = self.run_of(qrels, csv)
        self.assertEqual(code, 2)
        assert_error_line(self, err, file=csv, line=3, names=["a quoted value that holds a line break?"])


@unittest.skipUnless(0 < getattr(sys, "get_int_max_str_digits", lambda: 0)() < 5000, "no digit limit below 5000")
class TestNumbersTooLong(TempDirMixin, unittest.TestCase):
    def test_the_same_words_on_every_python(self):
        # Python's own message for its digit limit differs by version ("limit (4300)" on 3.9, "limit (4300
        # digits)" later) and advises a call a command-line user cannot make: the error says the limit only.
        path = self.path("q.json")
        with open(path, "w") as out:
            out.write('{"q1": {"a": 1' + "0" * 5000 + "}}")
        code, _, err = run_main([path, path])
        self.assertEqual((code, err), (2, f"rag_eval: error: {path}: a number in the JSON is too long "
                                          f"(over {sys.get_int_max_str_digits()} digits)\n"))

    def test_a_jsonl_row_names_its_line(self):
        path = self.path("q.jsonl")
        with open(path, "w") as out:
            out.write('{"query_id": "q1", "doc_id": "a", "grade": 1}\n{"query_id": "q1", "doc_id": "b", "grade": 1'
                      + "0" * 5000 + "}\n")
        code, _, err = run_main([path, path])
        self.assertEqual((code, err), (2, f"rag_eval: error: {path}:2: a number is too long "
                                          f"(over {sys.get_int_max_str_digits()} digits)\n"))


class TestReadingDetails(TempDirMixin, unittest.TestCase):
    """Details of the readers that planted bugs showed untested (mutants3): each expected value is written out."""

    def test_a_first_comment_line_that_names_columns_stays_a_comment(self):
        # "# qid docno score" splits into names that hold qid and docno, but a comment is no header: TREC lines.
        for text in ("# qid docno score\nq1 Q0 a 1 2.5 t\n", "#\tqid\tdocno\tscore\nq1 Q0 a 1 2.5 t\n"):
            with self.subTest(text=text):
                self.assertEqual(rag_eval.read_run(self.write("run.trec", text)), {"q1": {"a": 2.5}})

    def test_a_first_line_with_a_nul_is_named_not_taken_for_a_header(self):
        run = self.write("run.trec", "qid\tdocno\tscore\0\nq1 Q0 a 1 2.5 t\n")
        with self.assertRaises(rag_eval.RagEvalError) as caught:
            rag_eval.read_run(run)
        assert_error_line(self, str(caught.exception), file=run, line=1, prefix="")

    def test_a_ms_marco_rank_may_have_nine_digits_not_ten(self):
        # The first query's ranks 1, 2 make the layout; the second query's rank is the one under test.
        run = self.write("run.tsv", "q1\ta\t1\nq1\tb\t2\nq2\tc\t123456789\n")
        self.assertEqual(rag_eval.read_run(run), {"q1": ["a", "b"], "q2": ["c"]})
        run = self.write("run.tsv", "q1\ta\t1\nq1\tb\t2\nq2\tc\t1234567890\n")
        with self.assertRaises(rag_eval.RagEvalError) as caught:
            rag_eval.read_run(run)
        assert_error_line(self, str(caught.exception), file=run, line=3, quoted=["1234567890"], prefix="")

    def test_a_ms_marco_rank_repeated_when_a_query_comes_back(self):
        # q2's ranks 1, 3 are no range (kept as a set), 1, 2 are (kept as a range): either way, rank 3 (or 2)
        # given again on line 6, after q3, is a repeat.
        for ranks in ((1, 3), (1, 2)):
            run = self.write("run.tsv", "q1\ta\t1\nq1\tb\t2\nq2\tc\t%d\nq2\td\t%d\nq3\te\t1\nq2\tf\t%d\n"
                             % (ranks[0], ranks[1], ranks[1]))
            with self.subTest(ranks=ranks), self.assertRaises(rag_eval.RagEvalError) as caught:
                rag_eval.read_run(run)
            assert_error_line(self, str(caught.exception), file=run, line=6, quoted=["q2"], names=[f" {ranks[1]} "], prefix="")

    def test_a_trec_grade_may_carry_a_sign(self):
        # "+2" is 2; "-1" is trec_eval's mark for a document outside the pool: not judged.
        qrels = self.write("qrels.trec", "q1 0 a +2\nq1 0 b -1\nq1 0 c 1\n")
        self.assertEqual(rag_eval.read_qrels(qrels), {"q1": {"a": 2, "c": 1}})

    def test_conflicting_negative_grades_are_quoted_as_written(self):
        for text, grades in (("q1 0 a -1\nq1 0 a 1\n", "-1 and 1"), ("q1 0 a -3\nq1 0 a -1\n", "-3 and -1")):
            qrels = self.write("qrels.trec", text)
            with self.subTest(text=text), self.assertRaises(rag_eval.RagEvalError) as caught:
                rag_eval.read_qrels(qrels)
            assert_error_line(self, str(caught.exception), file=qrels, line=2, names=["'q1'/'a'", grades], prefix="")

    def test_line_numbers_count_the_blank_blocks_before_the_first_content(self):
        # Blocks of 4 bytes: the first ones hold only line ends and white space, skipped and counted.
        with mock.patch.object(rag_eval, "_READ_BLOCK", 4):
            for text, line in (("\n" * 10 + "q1 0 a x\n", 11), (" \n\t\n  \n\n\nq1 0 a 1\nq1 0 b x\n", 7)):
                qrels = self.write("qrels.trec", text)
                with self.subTest(line=line), self.assertRaises(rag_eval.RagEvalError) as caught:
                    rag_eval.read_qrels(qrels)
                assert_error_line(self, str(caught.exception), file=qrels, line=line, quoted=["x"], prefix="")

    def test_no_document_judged_is_refused_in_every_run_format(self):
        # q1 judges a only; each run names x only: nothing to evaluate, whatever the format.  With a, exit 0.
        qrels = self.write("qrels.trec", "q1 0 a 1\n")
        formats = {
            "run.trec": lambda ids: "".join(f"q1 Q0 {d} {i} {9 - i} t\n" for i, d in enumerate(ids, 1)),
            "run.jsonl": lambda ids: "".join(json.dumps({"query_id": "q1", "doc_id": d, "score": 9 - i}) + "\n"
                                             for i, d in enumerate(ids, 1)),
            "run.json": lambda ids: json.dumps({"q1": {d: 9 - i for i, d in enumerate(ids, 1)}}),
            "ranked.json": lambda ids: json.dumps({"q1": list(ids)}),
            "rows.json": lambda ids: json.dumps([{"query_id": "q1", "doc_id": d, "score": 9 - i}
                                                 for i, d in enumerate(ids, 1)]),
            "run.tsv": lambda ids: "qid\tdocno\tscore\n" + "".join(f"q1\t{d}\t{9 - i}\n" for i, d in enumerate(ids, 1)),
            "run.msmarco": lambda ids: "".join(f"q1\t{d}\t{i}\n" for i, d in enumerate(ids, 1)),
        }
        for name, text in formats.items():
            with self.subTest(name=name):
                run = self.write(name, text(["x", "y"]))
                code, out, err = run_main([qrels, run])
                self.assertEqual((code, out), (2, ""))
                assert_error_line(self, err, file=run)
                run = self.write(name, text(["x", "a"]))
                code, out, _ = run_main([qrels, run])
                self.assertEqual((code, json.loads(out)["mean"]["mrr@5"]), (0, 0.5))  # a at rank 2: 1/2

    def test_the_repeat_budget_counts_a_returning_query_once(self):
        # Budget 4 ids: q1 {a b} (2 kept), q2 {c} (3), q1 again {a b d} (its 2 counted once: 4, within), q2 again
        # {c e} (5: let go, but q2 never comes back), q1 a third time: "a" found repeated, the count exact.
        qrels = self.write("qrels.trec", "q1 0 a 1\nq2 0 c 1\n")
        run = self.write("run.trec", "q1 Q0 a 1 3 t\nq1 Q0 b 2 2 t\nq2 Q0 c 1 1 t\nq1 Q0 d 3 1 t\nq2 Q0 e 2 0 t\n"
                                     "q1 Q0 a 4 0 t\n")
        with mock.patch.object(rag_eval, "_REPEAT_BUDGET", 4):
            code, _, err = run_main([qrels, run])
        self.assertEqual(code, 0)
        (note,) = tagged_lines(err, "note")
        self.assertRegex(note, r"^rag_eval: note: 1 \D* 1 \D*" + re.escape(run) + ";")

    def test_repeats_are_checked_up_to_65536_ids(self):
        # q1 lists 65,537 ids, then comes back after q2 with d0 again: its ids were let go (the budget is
        # 65,536 ids, about 6 MB), so the repeat goes unseen and the note says what was not checked.
        qrels = self.write("qrels.trec", "q1 0 d0 1\nq2 0 x 1\n")
        run = self.write("run.trec", "".join(f"q1 Q0 d{i} 1 1 t\n" for i in range(65537)) + "q2 Q0 x 1 1 t\n"
                                     "q1 Q0 d0 2 0 t\n")
        code, _, err = run_main([qrels, run])
        self.assertEqual((code, note_lines(err)), (0, []), err)
        (note,) = [line for line in tagged_lines(err, "note") if run in line]
        self.assertRegex(note, "^rag_eval: note: " + re.escape(run) + r" \D* 65536 \D*$")

    def test_the_qrels_are_asked_about_a_query_before_its_first_line_is_checked(self):
        # At most 1 unknown query (patched): q3 is the second, so that is the error, not q3's score "x".
        qrels = self.write("qrels.trec", "q1 0 a 1\n")
        run = self.write("run.trec", "q1 Q0 a 1 1 t\nq2 Q0 b 1 1 t\nq3 Q0 c 1 x t\n")
        with mock.patch.object(rag_eval, "_MAX_UNKNOWN_QUERIES", 1):
            code, out, err = run_main([qrels, run])
            self.assertEqual((code, out), (2, ""))
            assert_error_line(self, err, file=run, quoted=["q3"], names=[" 1 "])

    def test_a_judged_document_tied_in_a_shallow_reduced_query(self):
        # --k 4 reads 5 places deep; q1's 6 lines come best first, ids once each (the shallow path).  a and b
        # tie at 2: docid descending puts b 2nd and a 3rd, so mrr@4 = 1/3 (z, scored lower, must not count).
        qrels = self.write("qrels.trec", "q1 0 a 1\n")
        run = self.write("run.trec", "".join(f"q1 Q0 {docid} {rank} {score} t\n" for rank, (docid, score) in enumerate(
            (("x", 3), ("b", 2), ("a", 2), ("z", 1), ("y", 0.5), ("w", 0.25)), 1)))
        code, out, err = run_main([qrels, run, "--k", "4", "--measures", "mrr"])
        self.assertEqual((code, json.loads(out)["mean"]), (0, {"mrr@4": 1 / 3}), err)

    def test_a_text_run_of_exactly_max_input_bytes_is_read(self):
        qrels = self.write("qrels.trec", "q1 0 a 1\n")
        run = self.write("run.trec", "q1 Q0 a 1 1 t\nq1 Q0 b 2 0.5 t\n")  # 30 bytes
        self.assertEqual(run_main([qrels, run, "--max-input-bytes", "30"])[0], 0)
        code, out, err = run_main([qrels, run, "--max-input-bytes", "29"])
        self.assertEqual((code, out), (2, ""))
        assert_error_line(self, err, file=run, names=[" 29 ", "--max-input-bytes"])

    def test_of_several_bad_lines_in_a_block_the_first_is_named(self):
        # A NUL on line 2, a lone CR ending line 4 (and bytes that are not UTF-8 on line 5): line 2 is named.
        qrels = self.write("qrels.trec", b"q1 0 a 1\nq1 0 b\x00 1\nq1 0 c 1\nq1 0 d\r 1\nq1 0 \xff 1\n")
        with self.assertRaises(rag_eval.RagEvalError) as caught:
            rag_eval.read_qrels(qrels)
        assert_error_line(self, str(caught.exception), file=qrels, line=2, prefix="")

    def test_past_max_ranks_a_returning_query_is_not_checked_for_repeated_ranks(self):
        # At most 3 ranks held (patched): q2's ranks 1, 3 leave room for 1; q3's 1, 3 are let go when q4 starts,
        # so q3's rank 3 again on line 8 goes unseen (memory stays bounded): g and h both rank 3, h first by docid.
        run = self.write("run.tsv", "q1\ta\t1\nq1\tb\t2\nq2\tc\t1\nq2\td\t3\nq3\te\t1\nq3\tg\t3\nq4\tf\t1\nq3\th\t3\n")
        with mock.patch.object(rag_eval, "_MAX_RANKS", 3):
            self.assertEqual(rag_eval.read_run(run), {"q1": ["a", "b"], "q2": ["c", "d"], "q3": ["e", "h", "g"],
                                                      "q4": ["f"]})

    def test_a_first_jsonl_row_of_900_kb_is_still_a_row(self):
        # A first line that opens an object is read whole, up to 1 MiB, to tell a JSONL row from a JSON document.
        run = self.write("run.jsonl", json.dumps({"query_id": "q1", "doc_id": "a", "score": 1, "text": "x" * 900_000})
                         + "\n" + json.dumps({"query_id": "q1", "doc_id": "b", "score": 0.5}) + "\n")
        self.assertEqual(rag_eval.read_run(run), {"q1": {"a": 1.0, "b": 0.5}})


@unittest.skipUnless(hasattr(sys, "set_int_max_str_digits"), "no digit limit in this Python (3.9.14, 3.10.7, 3.11 have it)")
class TestNumbersTooLongUnderAnotherLimit(TempDirMixin, unittest.TestCase):
    def test_the_error_says_the_limit_in_force(self):
        # PYTHONINTMAXSTRDIGITS or a host program may set another limit than 4300: the error names that one.
        path = self.write("q.json", '{"q1": {"a": 1' + "0" * 1500 + "}}")
        saved = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(1000)
        try:
            code, _, err = run_main([path, path])
        finally:
            sys.set_int_max_str_digits(saved)
        self.assertEqual(code, 2)
        assert_error_line(self, err, file=path, names=[" 1000 "])


if __name__ == "__main__":
    unittest.main()
