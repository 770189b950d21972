"""Run and qrels formats as people bring them, and what reading them notes (issue 14, items 10 and 11).

Each format is detected from its content and scores exactly as the
equivalent TREC or JSON file; each reading path (reduced while streamed,
plain, read again when a query's lines come apart) is exercised.
"""

import json
import unittest
from unittest import mock

import rag_eval
from helpers_for_tests import TempDirMixin, run_main

QRELS = "q1 0 a 2\nq1 0 b 1\nq2 0 c 1\nq3 0 e 1\n"
NOTE = "documents are listed more than once"


def note_lines(err):
    return [line for line in err.splitlines() if "listed more than once" in line]


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
        saved = rag_eval.READ_BLOCK, rag_eval.BY_BLOCK_DEPTH
        rag_eval.READ_BLOCK, rag_eval.BY_BLOCK_DEPTH = 40, 0
        try:
            self.check(self.write("run.trec", self.TREC), "blocks of 40 bytes")
        finally:
            rag_eval.READ_BLOCK, rag_eval.BY_BLOCK_DEPTH = saved

    def test_interleaved_queries_are_read_again_and_counted_across_their_parts(self):
        lines = self.TREC.splitlines(keepends=True)
        # q2 in the middle of q1: the reduced reader gives up, the plain one reads again.
        run = self.write("run.trec", "".join(lines[:2] + lines[6:9] + lines[2:6] + lines[9:]))
        self.check(run, "interleaved")
        _, _, repeated = rag_eval._read_run(run, depth=4, judged=rag_eval.read_qrels(self.path("qrels.txt")),
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
            read = rag_eval._read_run_once(path, "json", None, None, None, None, None, 1 << 30, stream)
            self.assertEqual(read.repeated, (3, 2, False), stream)
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
        with mock.patch.object(rag_eval, "REPEAT_BUDGET", 1):
            self.assertEqual(rag_eval._read_run(run)[2], (0, 0, True))
        self.assertEqual(rag_eval._read_run(run)[2], (1, 1, False))
        with mock.patch.object(rag_eval, "REPEAT_BUDGET", 1):
            self.write("run.trec", "q1 Q0 a 1 3 t\nq1 Q0 b 1 3 t\nq1 Q0 a 2 2 t\nq2 Q0 c 1 1 t\n")
            self.assertEqual(rag_eval._read_run(run)[2], (1, 1, False))  # checked as it grew: exact still


if __name__ == "__main__":
    unittest.main()
