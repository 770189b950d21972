"""The TREC run reader's block path (``_trec_columns``) against its line-by-line path (``_trec_lines``).

Every block is cut into columns in C when its lines are plain, and read
line by line otherwise; both must give the same run, the same repeated
documents and the same errors.  Each test reads the same file with blocks
so small that every line boundary falls somewhere, and with the whole file
in one block, reduced (the command line's way) and whole.
"""

import os
import random
import tempfile
import unittest

import rag_eval

QRELS = "q1 0 a 1\nq1 0 b 2\nq1 0 c 1\nq2 0 x 1\nq2 0 y 0\n"


class TestTrecBlocks(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.qrels = rag_eval.read_qrels(self.write("qrels", QRELS))
        saved = rag_eval.READ_BLOCK
        self.addCleanup(setattr, rag_eval, "READ_BLOCK", saved)

    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        return path

    def read(self, text, block, depth=4, cutoffs=(1, 2, 3)):
        """(run as plain dicts, any judged, repeated) or the error, with blocks of ``block`` bytes."""
        rag_eval.READ_BLOCK = block
        try:
            got = rag_eval._read_run(self.write("run", text), "trec", depth, judged=self.qrels,
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
        long = "d" * (rag_eval.MAX_ID + 1)
        for text, line, what in ((f"q1 Q0 a 1 1 t\nq1 Q0 {long} 2 1 t\n", 2, "document id"),
                                 (f"q1 Q0 a 1 1 t\n{'q' * (rag_eval.MAX_ID + 1)} Q0 a 2 1 t\n", 2, "query id"),
                                 (f"q1 Q0 a 1 1 t\n{'q' * rag_eval.MAX_ID} Q0 {long} 2 1 t\n", 2, "document id"),
                                 (f"q1 Q0 a 1 1 t\nq1 Q0 b 2 x t\nq1 Q0 {long} 2 1 t\n", 2, "score")):
            with self.subTest(what=what):
                kind, message = self.same_in_every_block_size(text)
                self.assertEqual(kind, "error")
                self.assertIn(f":{line}:", message)
                self.assertIn(what if what != "score" else "score must be a number", message)
        ok = "q1 Q0 " + "d" * rag_eval.MAX_ID + " 1 1 t\n"  # exactly MAX_ID bytes: fine, in a long line
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
        for name in ("READ_BLOCK", "REPEAT_BUDGET", "MAX_RANKS"):
            self.addCleanup(setattr, rag_eval, name, getattr(rag_eval, name))

    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        return path

    def error(self, path, **options):
        with self.assertRaises(rag_eval.RagEvalError) as caught:
            rag_eval._read_run(path, "auto", 11, **options)
        return str(caught.exception)

    def test_an_error_after_many_plain_blocks_names_its_line(self):
        # Plain blocks (counted by _trec_columns), blank blocks and a comment block before the bad line.
        lines = [f"q{i // 50} Q0 d{i} {i} {1000 - i} t" for i in range(2000)]
        lines[700:700] = [""] * 30 + ["# a comment"]
        lines.append("q99 Q0 dx 1 1_0 t")
        path = self.write("run", "\n".join(lines) + "\n")
        bad = len(lines)
        for block in (7, 64, 300, 4096, 1 << 17):
            rag_eval.READ_BLOCK = block
            for judged in (None, {"q0": {"d1": 1}}):
                with self.subTest(block=block, reduced=judged is not None):
                    message = self.error(path, judged=judged, cutoffs=[10] if judged else None)
                    self.assertIn(f"run:{bad}: score must be a number, got '1_0'", message)

    def test_an_msmarco_row_error_names_its_line_in_any_blocks(self):
        rows = [f"{q}\tp{i}\t{i + 1}" for q in (1, 2, 3) for i in range(40)]
        for bad, expected in (("2\tpx\t7", "rank 7 appears twice in query '2'"),
                              ("2\tpx\t0", "rank must be a positive integer, got '0'"),
                              ("2\tpx\t1234567890", "rank must be an integer of at most 9 digits"),
                              ("2\tpx", "expected 3 fields (qid docid rank, as MS MARCO's runs), got 2")):
            path = self.write("run", "\n".join(rows[:60] + ["# a comment", "", bad] + rows[60:]) + "\n")
            for block in (64, 300, 1 << 17):  # (the head must hold a few lines: MS MARCO's layout is detected there)
                rag_eval.READ_BLOCK = block
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
            path = self.write(name, text)
            outcomes = set()
            for budget in (1, 2, 1 << 16):
                rag_eval.REPEAT_BUDGET = budget
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
        rag_eval.REPEAT_BUDGET = 1 << 16
        reduced = rag_eval._read_run(self.write("run.tsv", msmarco.replace("1\tz\t4\n1\tc\t5\n", "")),
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
