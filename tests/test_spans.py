"""Evidence spans: each measure on cases worked by hand, the identity with the
id-based measures where the definitions meet, an independent brute-force
reference, the readers of span runs, chunk maps and corpora, the label jobs
(--check-labels, --fix-labels, --to-spans) and the fast paths.
"""

import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import tempfile
import unittest
from fractions import Fraction
from rag_eval import Span, SpanQrels
from unittest import mock

import rag_eval
from tests.helpers import ERROR_PREFIX, TempDirMixin, assert_error_line, run_main, tagged_lines


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


FULL = os.environ.get("RAG_EVAL_FULL") == "1"  # CI's full runs (3.9, 3.13) draw twice the random cases


NAMES = ("recall", "success", "mrr", "ndcg", "precision", "iou")


L3 = math.log2(3)


def spans_of(rows):
    """{qid: [(doc, start, end, grade), ...]} -> SpanQrels, as the reader sorts them."""
    return SpanQrels({qid: tuple(sorted(Span(*row) for row in rows)) for qid, rows in rows.items()})


def scores(qrels, run, chunks, k, **options):
    result = rag_eval.evaluate_spans(qrels, run, chunks, k, measures=list(NAMES), **options)
    return rag_eval._per_query_by_metric(result), result


class TestHandWorked(unittest.TestCase):
    """Every measure on small cases worked by hand (min overlap 0.5 unless said)."""

    def check(self, got, expected):
        for metric, value in expected.items():
            with self.subTest(metric=metric):
                self.assertAlmostEqual(got[metric]["q"], value, places=12)

    def test_two_chunks_cover_one_span_and_a_span_across_a_boundary(self):
        # S1 [10, 30) grade 2 (needs 10 chars), S2 [50, 60) grade 1 (needs 5).
        # c1 [0, 15) holds 5 of S1: not enough alone; c2 [25, 55) adds 5 of S1 (union 10: covered at rank 2)
        # and 5 of S2 (covered at rank 2, across c2's end); c3 [100, 140) holds nothing judged.
        qrels = spans_of({"q": [("d", 10, 30, 2), ("d", 50, 60, 1)]})
        chunks = {"c1": ("d", 0, 15), "c2": ("d", 25, 55), "c3": ("d", 100, 140)}
        got, _ = scores(qrels, {"q": ["c1", "c2", "c3"]}, chunks, [1, 2, 3])
        self.check(got, {
            "recall@1": 0, "recall@2": 2 / 2, "success@1": 0, "success@2": 1, "mrr@1": 0, "mrr@3": 1 / 2,
            "ndcg@1": 0,
            "ndcg@2": (3 / L3 + 1 / L3) / (3 + 1 / L3),  # gains 2**2-1 and 2**1-1, both at rank 2
            # characters retrieved 15, 45, 85; relevant ones among them 5, 5+5+5; relevant in all 20+10
            "precision@1": 5 / 15, "precision@2": 15 / 45, "precision@3": 15 / 85,
            "iou@1": 5 / (15 + 30 - 5), "iou@2": 15 / (45 + 30 - 15), "iou@3": 15 / (85 + 30 - 15),
            "doc.recall@1": 1, "doc.ndcg@1": 1, "doc.precision@3": 1 / 3,  # one document, d, holds all
        })

    def test_one_chunk_covers_nested_and_separate_spans(self):
        # S1 [0, 10) grade 2, S2 [2, 6) grade 1 inside S1, S3 [20, 30) grade 2; big [0, 40) covers all at rank 1.
        qrels = spans_of({"q": [("d", 0, 10, 2), ("d", 2, 6, 1), ("d", 20, 30, 2)]})
        chunks = {"big": ("d", 0, 40), "small": ("d", 20, 25)}
        got, _ = scores(qrels, {"q": ["big", "small"]}, chunks, [1, 2])
        self.check(got, {
            "recall@1": 3 / 3, "mrr@1": 1,
            "ndcg@1": 1.0,  # (3 + 1 + 3) / 1 over the ideal 3 / 1: 7/3, capped at 1
            "ndcg@2": 1.0,  # 7 over 3 + 3/log2 3: capped too
            # relevant characters: [0, 10) and [20, 30), the nested span counted once: 20
            "precision@1": 20 / 40, "iou@1": 20 / (40 + 20 - 20),
            "precision@2": 20 / 40, "iou@2": 20 / 40,  # small adds no new character
        })

    def test_several_spans_ranked_apart(self):
        # S1 [0, 10) grade 1, S2 [100, 110) grade 2; a covers S1 at rank 1, b covers 6 of S2's 10 at rank 2.
        qrels = spans_of({"q": [("d", 0, 10, 1), ("d", 100, 110, 2)]})
        chunks = {"a": ("d", 0, 10), "b": ("d", 104, 120)}
        got, _ = scores(qrels, {"q": ["a", "b"]}, chunks, [1, 2])
        self.check(got, {
            "recall@1": 1 / 2, "mrr@1": 1,
            "ndcg@1": 1 / 3,  # gain 2**1-1 at rank 1 over the ideal 2**2-1 at rank 1
            "ndcg@2": (1 + 3 / L3) / (3 + 1 / L3),
            "precision@2": (10 + 6) / (10 + 16), "iou@2": 16 / (26 + 20 - 16),
        })

    def test_min_overlap_ties_and_a_grade_zero_span(self):
        # S1 [0, 100) grade 1; S0 [200, 300) grade 0.  a [0, 30) and b [30, 60) tie at 0.9: b ranks first
        # (chunk id descending); z [200, 300) at 0.5 holds only the rejected span.
        qrels = spans_of({"q": [("d", 0, 100, 1), ("d", 200, 300, 0)]})
        chunks = {"a": ("d", 0, 30), "b": ("d", 30, 60), "z": ("d", 200, 300)}
        run = {"q": {"a": 0.9, "b": 0.9, "z": 0.5}}
        half, result = scores(qrels, run, chunks, [1, 2, 3])
        self.check(half, {"recall@1": 0, "recall@2": 1, "mrr@3": 1 / 2,  # 30 of 100, then 60 >= 50
                          "precision@3": 60 / (30 + 30 + 100), "iou@3": 60 / (160 + 100 - 60)})
        self.assertEqual(result["ties"], {"1": 1, "2": 0, "3": 0})
        strict, _ = scores(qrels, run, chunks, [3], min_overlap=0.7)  # needs 70: 60 is not enough
        self.assertEqual((strict["recall@3"]["q"], strict["mrr@3"]["q"]), (0.0, 0.0))
        exact, _ = scores(qrels, run, chunks, [3], min_overlap=0.6)  # needs exactly 60
        self.assertEqual(exact["recall@3"]["q"], 1.0)

    def test_min_overlap_is_exact_for_decimal_fractions(self):
        # 0.1 of a 10-character span is 1 character (a float's 0.1 is a hair above 1/10).
        qrels = spans_of({"q": [("d", 0, 10, 1)]})
        got, _ = scores(qrels, {"q": ["a"]}, {"a": ("d", 9, 12)}, [1], min_overlap=0.1)
        self.assertEqual(got["recall@1"]["q"], 1.0)

    def test_unscored_skipped_and_doc_level_ranking(self):
        # q2 has only a rejected span: unscored.  q3 retrieved nothing: scores 0 and stays in the mean.
        qrels = spans_of({"q1": [("d", 0, 10, 2), ("e", 0, 10, 1)], "q2": [("d", 0, 10, 0)],
                          "q3": [("d", 0, 5, 1)]})
        chunks = {"e1": ("e", 0, 10), "d1": ("d", 20, 30), "d2": ("d", 0, 10)}
        result = rag_eval.evaluate_spans(qrels, {"q1": ["e1", "d1", "d2"], "q2": ["d2"]}, chunks, 2)
        self.assertEqual((result["unscored"], result["skipped"], result["queries"]), (["q2"], ["q3"], 2))
        # evidence: e's span at rank 1 (gain 1), d's at rank 3 (beyond k); ideal 3 then 1
        self.assertAlmostEqual(result["per_query"]["q1"]["ndcg"], 1 / (3 + 1 / L3))
        # documents: e (grade 1) at rank 1, d (grade 2) at its best chunk's place, rank 2
        self.assertAlmostEqual(result["per_query"]["q1"]["doc.ndcg"], (1 + 3 / L3) / (3 + 1 / L3))
        self.assertEqual(result["mean"]["recall@2"], (1 / 2 + 0) / 2)
        self.assertEqual(result["conventions"]["min_overlap"], 0.5)


def identity_case(rng, equal_length):
    """Chunks that are exactly spans, spans that do not overlap (some unjudged chunks between them)."""
    chunks, span_rows, id_qrels, run = {}, {}, {}, {}
    length = rng.randint(1, 6)
    for qid in (f"q{n}" for n in range(rng.randint(1, 4))):
        span_rows[qid], id_qrels[qid] = [], {}
        for doc in (f"{qid}d{n}" for n in range(rng.randint(1, 3))):
            at = rng.randint(0, 3)
            for _ in range(rng.randint(1, 6)):
                size = length if equal_length else rng.randint(1, 9)
                chunk = f"c{len(chunks)}"
                chunks[chunk] = (doc, at, at + size)
                if rng.random() < 0.75:  # judged; else an unjudged chunk, no span
                    grade = rng.choice([0, 1, 1, 2, 3])
                    span_rows[qid].append((doc, at, at + size, grade))
                    id_qrels[qid][chunk] = grade
                at += size + rng.randint(0, 3)
        if not any(g > 1 for g in id_qrels[qid].values()):  # a relevant span, at min grade 2 too
            chunk = next(iter(c for c, (d, _, _) in chunks.items() if d.startswith(qid + "d")))
            doc, start, end = chunks[chunk]
            span_rows[qid] = [row for row in span_rows[qid] if row[:3] != (doc, start, end)] + [(doc, start, end, 3)]
            id_qrels[qid][chunk] = 3
        mine = [c for c, (d, _, _) in chunks.items() if d.startswith(qid + "d")]
        others = [c for c in chunks if c not in mine]
        picked = rng.sample(mine + others, rng.randint(0, len(mine) + len(others)))
        if rng.random() < 0.5:
            run[qid] = picked + rng.sample(picked, min(2, len(picked)))  # duplicates count once
        else:
            run[qid] = {c: float(rng.randint(0, 3)) for c in picked}  # ties: chunk id descending
    return spans_of(span_rows), id_qrels, run, chunks


class TestIdentity(unittest.TestCase):
    """When every chunk is exactly one span and spans do not overlap, recall, success, mrr and
    ndcg equal the id-based measures on the chunk ids, value for value; precision and iou too
    when every span has the same length (precision: when k chunks were retrieved)."""

    CASES = 300 if FULL else 150

    def test_identity_on_random_cases(self):
        rng = random.Random(16)
        checked = {"iou": 0, "precision": 0}  # the checks that only some cases reach, counted
        for case in range(self.CASES):
            equal = case % 2 == 0
            qrels, id_qrels, run, chunks = identity_case(rng, equal)
            cutoffs = sorted(rng.sample(range(1, 12), 3))
            got = rag_eval.evaluate_spans(qrels, run, chunks, cutoffs, measures=list(NAMES),
                                          gain=rng.choice(rag_eval._GAINS), min_grade=rng.choice([1, 1, 2]))
            conv = got["conventions"]
            ids = rag_eval.evaluate(id_qrels, run, cutoffs, measures=list(NAMES[:5]), gain=conv["gain"],
                                    min_grade=conv["min_grade"])
            self.assertEqual((got["unscored"], got["skipped"]), (ids["unscored"], ids["skipped"]), case)
            for qid, values in ids["per_query"].items():
                ranking = rag_eval._ranking(run.get(qid, []))
                relevant = {c for c, g in id_qrels[qid].items() if g >= conv["min_grade"]}
                for k in cutoffs:
                    where = f"case {case}, {qid}, k={k}"
                    for name in ("recall", "success", "mrr", "ndcg"):
                        self.assertEqual(got["per_query"][qid][f"{name}@{k}"], values[f"{name}@{k}"], where)
                    if equal:
                        hits = len(relevant & set(ranking[:k]))
                        iou = hits / (len(ranking[:k]) + len(relevant) - hits)
                        self.assertEqual(got["per_query"][qid][f"iou@{k}"], iou, where)
                        checked["iou"] += 1
                        if len(ranking) >= k:
                            self.assertEqual(got["per_query"][qid][f"precision@{k}"], values[f"precision@{k}"], where)
                            checked["precision"] += 1
        self.assertGreater(min(checked.values()), self.CASES, checked)


def reference(spans, located, k, min_overlap=0.5, gain="exp", min_grade=1):
    """Brute force over characters: sets of (document, position), every rank recomputed."""
    need = Fraction(str(min_overlap))
    chars = [set()]
    for doc, start, end in located:
        chars.append(chars[-1] | {(doc, i) for i in range(start, end)})
    covered = {}
    for span in spans:
        own = {(span.doc_id, i) for i in range(span.start, span.end)}
        covered[span] = next((r for r in range(1, len(chars)) if len(chars[r] & own) >= need * len(own)), None)
    rel = [s for s in spans if s.grade >= min_grade]
    within = [s for s in rel if covered[s] is not None and covered[s] <= k]

    def g(grade):
        return 0.0 if grade <= 0 else (float(grade) if gain == "linear" else 2.0 ** grade - 1)

    dcg = math.fsum(g(s.grade) / math.log2(covered[s] + 1) for s in spans
                    if g(s.grade) and covered[s] is not None and covered[s] <= k)
    ideal = math.fsum(x / math.log2(r + 1) for r, x in enumerate(sorted((g(s.grade) for s in spans), reverse=True)[:k], 1))
    top = chars[min(k, len(chars) - 1)]
    relevant_chars = {(s.doc_id, i) for s in rel for i in range(s.start, s.end)}
    hits = len(top & relevant_chars)
    first = min((covered[s] for s in rel if covered[s] is not None), default=None)
    return {
        "recall": len(within) / len(rel), "success": 1.0 if within else 0.0,
        "mrr": 1 / first if first is not None and first <= k else 0.0,
        "ndcg": min(1.0, dcg / ideal) if ideal else 0.0,
        "precision": hits / len(top) if top else 0.0,
        "iou": hits / len(top | relevant_chars),
    }


class TestReference(unittest.TestCase):
    """Overlapping chunks, nested and overlapping spans: the fast walk equals the brute force."""

    CASES = 400 if FULL else 200

    def test_against_brute_force(self):
        rng = random.Random(1616)
        for case in range(self.CASES):
            docs = ["a", "b"][: rng.randint(1, 2)]
            spans = {}
            for _ in range(rng.randint(1, 5)):
                start = rng.randint(0, 40)
                spans[(rng.choice(docs), start, start + rng.randint(1, 15))] = rng.choice([0, 1, 2, 3])
            if not any(spans.values()):
                spans[next(iter(spans))] = 1
            qrels = spans_of({"q": [(*where, grade) for where, grade in spans.items()]})
            chunks = {}
            for n in range(rng.randint(1, 8)):
                start = rng.randint(0, 50)
                chunks[f"c{n}"] = (rng.choice(docs + ["other"]), start, start + rng.randint(1, 20))
            ranking = rng.sample(sorted(chunks), rng.randint(0, len(chunks)))
            k = rng.randint(1, 9)
            options = {"min_overlap": rng.choice([0.5, 0.25, 1.0, 0.3]), "gain": rng.choice(rag_eval._GAINS),
                       "min_grade": rng.choice([1, 2])}
            if not any(s.grade >= options["min_grade"] for s in qrels["q"]):
                continue
            got = rag_eval.evaluate_spans(qrels, {"q": ranking}, chunks, k, measures=list(NAMES), **options)
            expected = reference(qrels["q"], [chunks[c] for c in ranking], k, **options)
            for name in NAMES:
                self.assertAlmostEqual(got["per_query"]["q"][name], expected[name], places=12,
                                       msg=f"case {case} {name}: {qrels['q']} {ranking} {chunks} k={k} {options}")


class TestNames(unittest.TestCase):
    def test_levels_parse_and_print_back(self):
        for text, pair in (("doc.ndcg@10", ("doc.ndcg", 10)), ("DOC.nDCG@10", ("doc.ndcg", 10)),
                           ("iou@3", ("iou", 3)), ("doc.R@5", ("doc.recall", 5))):
            with self.subTest(text=text):
                self.assertEqual(rag_eval.parse_metric(text), pair)
                self.assertEqual(rag_eval.parse_metric(rag_eval.format_metric(*pair)), pair)
        self.assertEqual(rag_eval._canonical_metric("pricing:doc.P_5"), "pricing:doc.precision@5")
        for bad in ("doc.iou@3", "doc.@3", "docs.ndcg@3", "doc.ndcg"):
            with self.subTest(bad=bad), self.assertRaises(rag_eval.RagEvalError):
                rag_eval.parse_metric(bad)

    def test_explain_and_help_come_from_the_tables(self):
        text = rag_eval._explain()
        for m in rag_eval._SPAN_MEASURES:
            self.assertIn(m.definition, text)
        code, out, _ = run_main(["--help"])
        self.assertEqual(code, 0)
        self.assertIn("iou", out)

    def test_iou_is_refused_without_spans(self):
        with self.assertRaises(rag_eval.RagEvalError) as caught:
            rag_eval.evaluate({"q": {"a": 1}}, {"q": ["a"]}, 1, measures=["iou"])
        self.assertIn("'iou'", str(caught.exception))


class CommandLineCase(TempDirMixin, unittest.TestCase):
    QRELS = [{"query_id": "q1", "doc_id": "d", "start": 0, "end": 10, "grade": 2, "text": "0123456789"},
             {"query_id": "q1", "doc_id": "e", "start": 5, "end": 9, "grade": 1},
             {"query_id": "q2", "doc_id": "d", "start": 20, "end": 30, "grade": 1}]
    CHUNKS = [{"chunk_id": "d#1", "doc_id": "d", "start": 0, "end": 15},
              {"chunk_id": "d#2", "doc_id": "d", "start": 15, "end": 40},
              {"chunk_id": "e#1", "doc_id": "e", "start": 0, "end": 12}]
    RUN = [{"query_id": "q1", "doc_id": "d#1", "score": 0.9}, {"query_id": "q1", "doc_id": "e#1", "score": 0.5},
           {"query_id": "q2", "doc_id": "d#2", "score": 0.7}]

    def jsonl(self, name, rows):
        return self.write(name, "".join(json.dumps(row) + "\n" for row in rows))

    def files(self, qrels=None, chunks=None, run=None):
        return (self.jsonl("qrels.jsonl", qrels or self.QRELS), self.jsonl("run.jsonl", run or self.RUN),
                self.jsonl("chunks.jsonl", chunks or self.CHUNKS))

    def error(self, argv):
        code, out, err = run_main(argv)
        self.assertEqual((code, out), (2, ""), err)
        self.assertTrue(err.startswith(ERROR_PREFIX) and err.count("\n") == 1, err)
        return err


class TestReading(CommandLineCase):
    def test_bad_rows_name_file_and_line(self):
        good = self.QRELS[0]
        cases = [
            ([good, {"query_id": "q1", "doc_id": "d", "grade": 1}], ":2: this row has no start and end"),
            ([{"query_id": "q1", "doc_id": "d", "grade": 1}, good], ":2: this row has start and end, and the rows "),
            ([dict(good, start=True)], ":1: start and end must be integers"),
            ([dict(good, start=10, end=10)], ":1: start and end must be integers with 0 <= start < end"),
            ([dict(good, start=-1)], ":1: start and end"),
            ([dict(good, end=2.5)], ":1: start and end"),
            ([dict(good, grade=-1)], ":1: grade must be a non-negative integer"),
            ([dict(good, text="")], ":1: text must be the quoted evidence"),
            ([good, dict(good, grade=1)], ":2: conflicting judgments for 'q1'/'d' [0, 10): 2 and 1"),
        ]
        for rows, expected in cases:
            with self.subTest(expected=expected):
                qrels, run, chunks = self.files(qrels=rows)
                self.assertIn(f"qrels.jsonl{expected}", self.error([qrels, run, "--chunks", chunks]))

    def test_the_full_report_names_the_chunk_map_and_the_corpus_it_read(self):
        qrels, run, chunks = self.files()
        corpus = self.jsonl("corpus.jsonl", [{"doc_id": "d", "text": "0123456789" * 4}, {"doc_id": "e", "text": "x" * 12}])
        output = self.path("full.json")
        code, _, err = run_main([qrels, run, "--chunks", chunks, "--corpus", corpus, "--output", output])
        self.assertEqual(code, 0, err)
        with open(output, encoding="utf-8") as f:
            inputs = json.load(f)["inputs"]
        for role, path in (("chunks", chunks), ("corpus", corpus), ("run", run)):
            with open(path, "rb") as f:
                self.assertEqual(inputs[role], {"path": path, "sha256": hashlib.sha256(f.read()).hexdigest()}, role)

    def test_chunks_located_by_the_map_or_the_run(self):
        qrels, run, chunks = self.files()
        code, mapped, _ = run_main([qrels, run, "--chunks", chunks, "--k", "2"])
        self.assertEqual(code, 0)
        located = [dict(row, chunk_id=row["doc_id"], **{key: c[key] for key in ("doc_id", "start", "end")})
                   for row in self.RUN for c in self.CHUNKS if c["chunk_id"] == row["doc_id"]]
        code, itself, _ = run_main([qrels, self.jsonl("located.jsonl", located), "--k", "2"])
        self.assertEqual((code, itself), (0, mapped))
        report = json.loads(mapped)["mean"]
        self.assertEqual(report["recall@2"], (2 / 2 + 1) / 2)  # q1: d's span and e's; q2: d#2 holds [20, 30)
        self.assertEqual(report["precision@2"], ((10 + 4) / (15 + 12) + 10 / 25) / 2)

    def test_unlocated_or_disagreeing_chunks_are_errors(self):
        qrels, run, chunks = self.files(chunks=self.CHUNKS[:2])
        assert_error_line(self, self.error([qrels, run, "--chunks", chunks]), file=run, quoted=["q1", "e#1"])
        assert_error_line(self, self.error([qrels, run]), file=run, names=["--chunks"])  # the hint names the option
        moved = [dict(self.RUN[0], chunk_id="d#1", doc_id="d", start=0, end=14)] + self.RUN[1:]
        qrels, run, chunks = self.files(run=moved)
        assert_error_line(self, self.error([qrels, run, "--chunks", chunks]), file=chunks, quoted=["d#1"])

    def test_options_that_do_not_apply(self):
        qrels, run, chunks = self.files()
        assert_error_line(self, self.error([qrels, run, "--chunks", chunks, "--doc-id-sep", "#"]),
                          names=[ERROR_PREFIX + "--doc-id-sep "])
        id_qrels = self.jsonl("ids.jsonl", [{"query_id": "q1", "doc_id": "d#1", "grade": 1}])
        assert_error_line(self, self.error([id_qrels, run, "--chunks", chunks]), file=id_qrels, names=["--chunks"])
        self.assertIn("argument --min-overlap", self.error([qrels, run, "--min-overlap", "0"]))


class TestGate(CommandLineCase):
    def test_baseline_records_min_overlap_and_refuses_another(self):
        qrels, run, chunks = self.files()
        base = self.path("base.json")
        self.assertEqual(run_main([qrels, run, "--chunks", chunks, "--save-baseline", base])[0], 0)
        self.assertEqual(json.loads(self.read(base))["conventions"]["min_overlap"], 0.5)
        self.assertEqual(run_main([qrels, run, "--chunks", chunks, "--baseline", base])[0], 0)
        err = self.error([qrels, run, "--chunks", chunks, "--baseline", base, "--min-overlap", "0.8"])
        self.assertIn("min_overlap: baseline 0.5, now 0.8", err)
        # Evidence numbers are no chunk-id numbers of the same name: --allow-qrels-change accepts new labels,
        # not another measure (this direction once passed).
        ids = self.jsonl("ids.jsonl", [{"query_id": "q1", "doc_id": "d#1", "grade": 2},
                                       {"query_id": "q2", "doc_id": "d#2", "grade": 1}])
        err = self.error([ids, run, "--baseline", base, "--allow-qrels-change", "--measures", "recall,mrr"])
        self.assertIn("min_overlap: baseline 0.5, now None", err)

    def test_baseline_qrels_of_spans_explain_the_label_change(self):
        # q2's span regraded 1 -> 2 between the old and the new judgments: once a traceback (the old spans
        # were not named doc[start:end] as the new ones were).
        qrels, run, chunks = self.files()
        old = self.jsonl("old.jsonl", self.QRELS[:2] + [dict(self.QRELS[2], grade=2)])
        code, out, err = run_main([qrels, run, "--chunks", chunks, "--baseline-run", run, "--baseline-qrels", old])
        self.assertEqual(code, 0, err)
        changes = json.loads(out)["gate"]["label_changes"]
        self.assertEqual(changes["queries"], {"q2": {"added": {}, "removed": {}, "regraded": {"d[20:30]": [2, 1]}}})
        ids = self.jsonl("ids.jsonl", [{"query_id": "q1", "doc_id": "d#1", "grade": 2}])
        err = self.error([qrels, run, "--chunks", chunks, "--baseline-run", run, "--baseline-qrels", ids])
        assert_error_line(self, err, names=["--baseline-qrels", "QRELS"])

    def test_tolerances_and_floors_address_each_level(self):
        qrels, run, chunks = self.files()
        base = self.write("flat.json", {"doc.ndcg@5": 1.0, "precision@5": 0.9})
        code, out, err = run_main([qrels, run, "--chunks", chunks, "--baseline", base, "--max-drop", "doc.ndcg@5=0.5",
                                   "--max-drop", "precision@5=0.5", "--min", "doc.recall@5=1"])
        self.assertEqual(code, 0, err)
        gate = json.loads(out)["gate"]
        self.assertEqual(gate["metrics"]["doc.ndcg@5"]["verdict"], "pass")
        self.assertEqual(gate["floors"]["doc.recall@5"]["verdict"], "pass")
        code, _, err = run_main([qrels, run, "--chunks", chunks, "--baseline", base])
        self.assertEqual(code, 1)
        self.assertIn("precision@5", err)


class TestLabelSearch(unittest.TestCase):
    """--check-labels looks each quoted text up once per document: 6,000 labels on a 4 MB document cost 8-18x
    the CPU of 200, a search of the whole document per label.  The answers are a brute-force search's."""

    def test_one_search_per_document_with_the_brute_force_answers(self):
        rng = random.Random(7)
        corpus = {doc: "".join(rng.choice("ab c") for _ in range(3000)) for doc in ("d", "e")}
        qrels = {}
        for i in range(400):  # quotes of 1 to 40 characters, most moved, some missing or ambiguous
            doc = rng.choice("de")
            start = rng.randrange(2900)
            quote = corpus[doc][start:start + rng.randrange(1, 41)] + ("z" if i % 50 == 0 else "")
            qrels[f"q{i}"] = (Span(doc, max(0, start - 3), max(0, start - 3) + len(quote), 1, quote),)
        with mock.patch.object(rag_eval, "_find_all", wraps=rag_eval._find_all) as spy:
            check = rag_eval._check_labels(qrels, corpus)
        self.assertEqual(sorted(call.args[0] is corpus["d"] for call in spy.call_args_list), [False, True])
        for qid, span, status, _ in check.rows:
            text = corpus[span.doc_id]
            places = [at for at in range(len(text)) if text.startswith(span.text, at)]
            expected = ("valid" if text[span.start:span.end] == span.text else "moved" if len(places) == 1
                        else "orphaned")
            self.assertEqual(status, expected, (qid, span))
            if status == "moved":
                self.assertEqual(check.fixed[qid][0].start, places[0])


class TestLabels(CommandLineCase):
    CORPUS = [{"doc_id": "d", "text": "xx0123456789" + "y" * 30}, {"doc_id": "e", "text": "short text"}]

    def test_check_fix_and_gate(self):
        qrels, run, chunks = self.files()
        corpus = self.jsonl("corpus.jsonl", self.CORPUS)
        code, out, err = run_main([qrels, "--corpus", corpus, "--check-labels"])
        self.assertEqual((code, err), (rag_eval.EXIT_INCONCLUSIVE, ""))  # not every label could be checked
        self.assertIn("moved q1 d [0, 10): now [2, 12)", out)
        self.assertEqual(out.splitlines()[0].split(), ["query", "valid", "moved", "unchecked", "orphaned"])
        self.assertEqual(out.splitlines()[1].split(), ["q1", "0", "1", "1", "0"])  # e's span has no text: unchecked
        self.assertIn("unchecked q1 e [5, 9): no quoted text", out)
        fixed = self.path("fixed.jsonl")
        self.assertEqual(run_main([qrels, "--corpus", corpus, "--fix-labels", fixed])[0], 0)
        self.assertEqual(json.loads(self.read(fixed).decode().splitlines()[0])[ "start"], 2)
        code, _, err = run_main([qrels, run, "--chunks", chunks, "--corpus", corpus])
        self.assertEqual(code, 0)
        (note,) = tagged_lines(err, "note")
        self.assertRegex(note, r"^rag_eval: note: 1 \D*--check-labels\D*--fix-labels")
        (warning,) = [line for line in tagged_lines(err, "warning") if "--corpus" in line]
        self.assertRegex(warning, r"^rag_eval: warning: 2 \D*--corpus")
        orphan = self.jsonl("orphan.jsonl", self.QRELS + [
            {"query_id": "q2", "doc_id": "e", "start": 0, "end": 3, "grade": 1, "text": "t"}])  # "t" twice
        code, out, _ = run_main([orphan, "--corpus", corpus, "--check-labels"])
        self.assertEqual(code, 1)
        self.assertIn("orphaned q2 e [0, 3): quoted text found more than once", out)
        assert_error_line(self, self.error([orphan, run, "--chunks", chunks, "--corpus", corpus]), file=orphan,
                          names=[" 1 ", "'q2', 'e' [0, 3)", "--check-labels"])
        assert_error_line(self, self.error([qrels, "--corpus", corpus, "--fix-labels", qrels]), file=qrels)

    def test_check_labels_honours_format(self):
        # Issue 33: --check-labels --format json printed the text table.  d [0, 10) moved to [2, 12); e's span
        # and q2's quote no text: unchecked (exit 3).
        qrels, _, _ = self.files()
        corpus = self.jsonl("corpus.jsonl", self.CORPUS)
        argv = [qrels, "--corpus", corpus, "--check-labels", "--format"]
        code, out, err = run_main(argv + ["json"])
        self.assertEqual((code, err), (3, ""))
        report = json.loads(out)
        self.assertEqual(report["queries"], {"q1": {"valid": 0, "moved": 1, "unchecked": 1, "orphaned": 0},
                                             "q2": {"valid": 0, "moved": 0, "unchecked": 1, "orphaned": 0}})
        self.assertEqual(report["spans"][0], {"query_id": "q1", "doc_id": "d", "start": 0, "end": 10,
                                              "status": "moved", "found": "now [2, 12)"})
        self.assertEqual(len(report["spans"]), 3)
        out = run_main(argv + ["csv"])[1]
        self.assertEqual(out.splitlines()[:2], ["query_id,doc_id,start,end,status,found",
                                                'q1,d,0,10,moved,"now [2, 12)"'])
        out = run_main(argv + ["markdown"])[1]
        self.assertIn("| `q1` | 0 | 1 | 1 | 0 |", out.splitlines())
        self.assertIn("| moved | `q1` | `d` | [0, 10) | now [2, 12) |", out.splitlines())
        self.assertEqual(run_main(argv + ["table"])[1], run_main(argv[:-1])[1])  # the table stays the default

    def test_to_spans(self):
        _, _, chunks = self.files()
        ids = self.jsonl("ids.jsonl", [{"query_id": "q1", "doc_id": "d#1", "grade": 2},
                                       {"query_id": "q1", "doc_id": "e#1", "grade": 0}])
        out = self.path("spans.jsonl")
        code, _, err = run_main([ids, "--chunks", chunks, "--to-spans", out])
        self.assertEqual(code, 0, err)
        rows = [json.loads(line) for line in self.read(out).decode().splitlines()]
        self.assertEqual(rows, [{"query_id": "q1", "doc_id": "d", "start": 0, "end": 15, "grade": 2},
                                {"query_id": "q1", "doc_id": "e", "start": 0, "end": 12, "grade": 0}])
        missing = self.jsonl("missing.jsonl", [{"query_id": "q1", "doc_id": "zz", "grade": 1}])
        assert_error_line(self, self.error([missing, "--chunks", chunks, "--to-spans", out]), file=chunks,
                          quoted=["q1", "zz"])


class TestSpanGateDefaults(TempDirMixin, unittest.TestCase):
    """Span mode gates what id mode gates by default: recall, success, mrr and ndcg (both levels); precision
    and iou are reported, and gated when --measures names them (the baseline then holds them)."""

    def test_rechunking_that_costs_precision_passes_by_default(self):
        example = os.path.join(HERE, "examples", "rechunking")
        qrels = os.path.join(example, "qrels.spans.jsonl")
        old = [os.path.join(example, "run200.jsonl"), "--chunks", os.path.join(example, "chunks200.jsonl")]
        new = [os.path.join(example, "run400.jsonl"), "--chunks", os.path.join(example, "chunks400.jsonl"), "--k", "1,3"]
        saved, strict = self.path("saved.json"), self.path("strict.json")
        self.assertEqual(run_main([qrels, *old, "--k", "1,3", "--save-baseline", saved])[0], 0)
        means = rag_eval.read_baseline(saved).means
        self.assertEqual({metric.rpartition("@")[0] for metric in means},
                         {"recall", "success", "mrr", "ndcg", "doc.recall", "doc.success", "doc.mrr", "doc.ndcg"})
        code, out, err = run_main([qrels, *new, "--baseline", saved])
        self.assertEqual(code, rag_eval.EXIT_OK, err)  # precision@3 fell 0.2133 -> 0.1325: reported, not gated
        report = json.loads(out)
        self.assertLess(report["mean"]["precision@3"], 0.14)
        self.assertEqual(sorted(report["gate"]["metrics"]), sorted(means))
        self.assertEqual(report["gate"]["new"], [])  # reported only is no news
        # asked for, precision is saved and gated
        self.assertEqual(run_main([qrels, *old, "--k", "1,3", "--measures", "recall,precision",
                                   "--save-baseline", strict])[0], 0)
        code, out, err = run_main([qrels, *new, "--baseline", strict])
        self.assertEqual(code, rag_eval.EXIT_REGRESSION, err)
        self.assertEqual([line.split(":")[0] for line in err.splitlines() if line.startswith("REGRESSION")],
                         ["REGRESSION precision@1", "REGRESSION precision@3"])


class TestWalkThrough(unittest.TestCase):
    """docs/spans.md: every console block's command, run in a copy of the example, prints what the page shows."""

    def test_docs_commands(self):
        with open(os.path.join(HERE, "docs", "spans.md"), encoding="utf-8") as f:
            blocks = re.findall(r"```console\n(.*?)```", f.read(), re.S)
        self.assertGreaterEqual(len(blocks), 3)
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(os.path.join(HERE, "rag_eval.py"), tmp)
            shutil.copytree(os.path.join(HERE, "examples"), os.path.join(tmp, "examples"))
            env = {key: value for key, value in os.environ.items() if not key.startswith("GITHUB_")}
            env["SOURCE_DATE_EPOCH"] = "0"
            for block in blocks:
                command, _, expected = block.partition("\n")
                self.assertTrue(command.startswith("$ "), block)
                done = subprocess.run(["bash", "-c", command[2:]], cwd=tmp, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
                self.assertEqual(done.stdout, expected, command)


class TestLibraryLocations(unittest.TestCase):
    """evaluate_spans checks the chunk locations a library caller gives, as the readers check a chunk map."""

    def test_bad_locations_refused(self):
        spans = rag_eval.SpanQrels({"q": (rag_eval.Span("d", 0, 10, 1),)})
        for bad in (("d", 8, 2), ("d", -1, 3), ("d", 1.0, 3), ("d", True, 3), (1, 0, 3), ("d", 0), None, ("d", 4, 4),
                    (["d"], 0, 3)):
            with self.subTest(bad=bad), self.assertRaises(rag_eval.RagEvalError) as caught:
                rag_eval.evaluate_spans(spans, {"q": ["b", "a"]}, {"a": bad, "b": ("d", 0, 8)}, 2)
            self.assertIn(" 'a': ", str(caught.exception))
        good = rag_eval.evaluate_spans(spans, {"q": ["b", "a"]}, {"a": ("d", 8, 12), "b": ("d", 0, 8)}, 2)
        self.assertEqual(good["mean"]["recall@2"], 1.0)  # the one span, 10 characters, covered by both chunks

    def test_unlocated_chunk_named_first_in_ranking_order(self):
        # Two maps: one no larger than the run (numbered whole, the lookup fails mid-run) and one larger
        # (only the ranked chunks are numbered).  Either way the first unlocated chunk by rank is named:
        # q1's ranking by score is b, x, a, y; the run lists x and y, neither located.
        spans = rag_eval.SpanQrels({"q1": (rag_eval.Span("d", 0, 10, 1),), "q2": (rag_eval.Span("d", 0, 5, 1),)})
        run = {"q2": {"a": 0.5}, "q1": {"y": 0.1, "a": 0.3, "x": 0.7, "b": 0.9}}
        small = {"a": ("d", 0, 8), "b": ("d", 8, 12)}
        large = dict(small, **{f"other{i}": ("e", i, i + 1) for i in range(10)})
        for chunks in (small, large):
            with self.subTest(chunks=len(chunks)), self.assertRaises(rag_eval.RagEvalError) as caught:
                rag_eval.evaluate_spans(spans, run, chunks, 2)
            assert_error_line(self, str(caught.exception), file="chunks", quoted=["x"], prefix="")

    def test_a_chunk_map_and_abstain_below_checked_as_evaluate_checks(self):
        spans, run = rag_eval.SpanQrels({"q": (rag_eval.Span("d", 0, 10, 1),)}), {"q": {"a": 0.5}}
        for chunks, kind in ((None, "null"), ([("d", 0, 8)], "a list"), ("a", "a string")):
            with self.subTest(chunks=chunks), self.assertRaises(rag_eval.RagEvalError) as caught:
                rag_eval.evaluate_spans(spans, run, chunks, 2)
            assert_error_line(self, str(caught.exception), file="chunks", prefix="")
            self.assertTrue(str(caught.exception).endswith(f" {kind}"), str(caught.exception))
        for bad in (float("nan"), float("inf"), "x"):
            with self.subTest(abstain_below=bad), self.assertRaises(rag_eval.RagEvalError) as caught:
                rag_eval.evaluate_spans(spans, run, {"a": ("d", 0, 8)}, 2, abstain_below=bad)
            self.assertRegex(str(caught.exception), f"^abstain_below .* {re.escape(repr(bad))}$")

    def test_bad_judgments_and_min_overlap_refused(self):
        span, run, chunks = rag_eval.Span("d", 0, 10, 1), {"q": ["a"]}, {"a": ("d", 0, 8)}
        for qrels, message in (({"q": [span]}.items(), "expected evidence judgments: query -> list of Span"),
                               ({"q": None}, "expected evidence judgments: query -> list of Span"),
                               ({"q": (("d", 0, 10, 1),)}, "query 'q': expected a Span(doc_id, start, end, grade)"),
                               ({"q": (span._replace(end=0),)}, "with 0 <= start < end, got Span(doc_id='d',")):
            with self.subTest(qrels=qrels), self.assertRaises(rag_eval.RagEvalError) as caught:
                rag_eval.evaluate_spans(qrels, run, chunks, 2)
            self.assertIn(message, str(caught.exception))
        for bad in (0, 1.5, -0.5, float("nan"), "0.5"):
            with self.subTest(min_overlap=bad), self.assertRaises(rag_eval.RagEvalError) as caught:
                rag_eval.evaluate_spans({"q": (span,)}, run, chunks, 2, min_overlap=bad)
            self.assertRegex(str(caught.exception), f" \\(0, 1\\].* {re.escape(repr(bad))}$")


class TestDisjointChunks(unittest.TestCase):
    """One chunking (chunks that do not overlap), the path found by bisection: equal to the brute force,
    with spans across chunk boundaries, chunks not retrieved, and documents of both kinds in one query."""

    CASES = 300 if FULL else 150

    def test_one_chunking_against_brute_force(self):
        rng = random.Random(1617)
        for case in range(self.CASES):
            chunks, at = {}, {"a": 0, "b": 0, "c": 0}
            for n in range(rng.randint(1, 12)):
                doc = rng.choice("abc")
                at[doc] += rng.randint(0, 3)  # gaps between chunks, or none
                size = rng.randint(1, 12)
                chunks[f"{doc}{n}"] = (doc, at[doc], at[doc] + size)
                at[doc] += size
            if rng.random() < 0.3:  # a document whose chunks overlap, beside the others
                chunks["o1"], chunks["o2"] = ("c", 0, 10), ("c", 5, 15)
            spans = {}
            for _ in range(rng.randint(1, 6)):
                start = rng.randint(0, 40)
                spans[(rng.choice("abc"), start, start + rng.randint(1, 20))] = rng.choice([0, 1, 2, 3])
            spans[next(iter(spans))] = 2
            qrels = spans_of({"q": [(*where, grade) for where, grade in spans.items()]})
            ranking = rng.sample(sorted(chunks), rng.randint(0, len(chunks)))
            k = rng.randint(1, 9)
            options = {"min_overlap": rng.choice([0.5, 0.25, 1.0, 0.3]), "gain": rng.choice(rag_eval._GAINS)}
            got = rag_eval.evaluate_spans(qrels, {"q": ranking}, chunks, k, measures=list(NAMES), **options)
            expected = reference(qrels["q"], [chunks[c] for c in ranking], k, **options)
            for name in NAMES:
                self.assertAlmostEqual(got["per_query"]["q"][name], expected[name], places=12,
                                       msg=f"case {case} {name}: {qrels['q']} {ranking} {chunks} k={k} {options}")

    def test_spans_in_any_order(self):
        # A library caller's spans need not come sorted: the numbers are those of the sorted spans.
        rows = [("d", 50, 70, 1), ("e", 0, 10, 2), ("d", 0, 30, 2), ("d", 20, 60, 3)]
        chunks = {"d1": ("d", 0, 25), "d2": ("d", 25, 55), "e1": ("e", 0, 8), "d3": ("d", 55, 80)}
        run = {"q": ["d2", "e1", "d3", "d1"]}
        expected = rag_eval.evaluate_spans(spans_of({"q": rows}), run, chunks, [1, 2, 4], measures=list(NAMES))
        for order in (rows[::-1], rows[1:] + rows[:1]):
            with self.subTest(order=order):
                got = rag_eval.evaluate_spans(SpanQrels({"q": tuple(Span(*row) for row in order)}), run, chunks,
                                              [1, 2, 4], measures=list(NAMES))
                self.assertEqual(got["per_query"], expected["per_query"])


class TestReadingLimits(CommandLineCase):
    """Span runs, chunk maps and corpora obey --max-input-bytes and the 4 KiB id cap, as runs do."""

    LONG = "x" * (rag_eval._MAX_ID + 1)

    def test_ids_longer_than_max_id(self):
        located = [dict(self.RUN[0], chunk_id="d#1", doc_id="d", start=0, end=15)]
        cases = [
            ("run", [located[0], dict(located[0], chunk_id=self.LONG)], "run.jsonl:2: chunk id longer than 4096 bytes"),
            ("run", [dict(located[0], query_id=self.LONG)], "run.jsonl:1: query id longer than 4096 bytes"),
            ("run", [dict(self.RUN[0], doc_id=self.LONG)], "run.jsonl:1: chunk id longer than 4096 bytes"),
            ("run", [dict(located[0], doc_id=self.LONG)], "run.jsonl:1: document id longer than 4096 bytes"),
            ("chunks", self.CHUNKS + [dict(self.CHUNKS[0], chunk_id=self.LONG)],
             "chunks.jsonl:4: chunk id longer than 4096 bytes"),
            ("chunks", [dict(self.CHUNKS[0], doc_id=self.LONG)], "chunks.jsonl:1: document id longer than 4096 bytes"),
        ]
        for which, rows, expected in cases:
            with self.subTest(expected=expected):
                qrels, run, chunks = self.files(**{which: rows})
                self.assertIn(expected, self.error([qrels, run, "--chunks", chunks]))
        qrels, _, _ = self.files()
        corpus = self.jsonl("corpus.jsonl", [{"doc_id": "d", "text": "t"}, {"doc_id": "é" * 2049, "text": "t"}])
        assert_error_line(self, self.error([qrels, "--corpus", corpus, "--check-labels"]), file=corpus, line=2,
                          names=[" 4096 "])  # 2,049 characters, 4,098 bytes
        ids = self.jsonl("ids.jsonl", [{"query_id": "q1", "doc_id": "d#1", "grade": 1}])
        _, _, chunks = self.files(chunks=[dict(self.CHUNKS[0], doc_id=self.LONG)])
        assert_error_line(self, self.error([ids, "--chunks", chunks, "--to-spans", self.path("out.jsonl")]), file=chunks,
                          line=1, names=[" 4096 "])

    def test_max_input_bytes(self):
        qrels, run, chunks = self.files()
        corpus = self.jsonl("corpus.jsonl", TestLabels.CORPUS)
        trec = self.write("run.trec", "".join(f"{row['query_id']} Q0 {row['doc_id']} 1 {row['score']} a-run-tag\n" for row in self.RUN))
        scored = self.write("run.json", json.dumps({"q1": {"d#1": 0.9, "e#1": 0.5}, "q2": {"d#2": 0.7}}, indent=2))
        limit = ["--max-input-bytes", "60"]
        for argv, name in (([qrels, run, "--chunks", chunks], "run.jsonl"), ([qrels, trec, "--chunks", chunks], "run.trec"),
                           ([qrels, scored, "--chunks", chunks], "run.json"),
                           ([qrels, self.jsonl("small.jsonl", self.RUN[:1]), "--chunks", chunks], "chunks.jsonl"),
                           ([qrels, "--corpus", corpus, "--check-labels"], "corpus.jsonl"),
                           ([qrels, "--corpus", corpus, "--fix-labels", self.path("fixed.jsonl")], "corpus.jsonl")):
            with self.subTest(argv=argv):
                err = self.error(argv + limit)
                assert_error_line(self, err, file=self.path(name), names=[" 60 ", "--max-input-bytes"])
                code, _, err = run_main(argv + ["--max-input-bytes", "100000"])
                self.assertIn(code, (0, 1, rag_eval.EXIT_INCONCLUSIVE), err)


class TestSideInputsKeepWhatIsNamed(CommandLineCase):
    """--corpus keeps the texts of the documents the labels name, --chunks the chunks the run ranks (or, for
    --to-spans, the judged ones): 367 KB of gzipped corpus (astral characters: 4 bytes a character) peaked at
    1.75 GB, 20 MB of chunk map at 908 MB.  tools/bench/bench_memory.py measures the memory."""

    UNNAMED = [{"doc_id": f"z{i}", "text": "\U0001F600" * 50} for i in range(30)]
    MORE_CHUNKS = [{"chunk_id": f"z#{i}", "doc_id": f"z{i}", "start": 0, "end": 9} for i in range(30)]

    def kept(self, function: str, argv) -> list:
        """What each call of ``function`` returned, the command's exit code checked."""
        returned = []
        real = getattr(rag_eval, function)

        def spy(*args, **kwargs):
            returned.append(real(*args, **kwargs))
            return returned[-1]

        with mock.patch.object(rag_eval, function, spy):
            code, _, err = run_main(argv)
        self.assertIn(code, (0, 1, 3), err)  # 3: --check-labels found spans without quoted text
        return returned

    def test_corpus_and_chunk_map(self):
        qrels, run, chunks = self.files(chunks=self.CHUNKS + self.MORE_CHUNKS)
        corpus = self.jsonl("corpus.jsonl", TestLabels.CORPUS + self.UNNAMED)
        for argv in ([qrels, "--corpus", corpus, "--check-labels"], [qrels, run, "--corpus", corpus, "--chunks", chunks]):
            with self.subTest(argv=argv[2:]):
                (kept,) = self.kept("_read_corpus", argv)
                self.assertEqual(sorted(kept), ["d", "e"])
        (kept,) = self.kept("_read_chunks", [qrels, run, "--chunks", chunks])
        self.assertEqual(sorted(kept), ["d#1", "d#2", "e#1"])
        self.assertEqual(len(rag_eval._read_chunks(chunks)), 33)  # the library reads the whole map unless told
        chunk_qrels = self.jsonl("chunk_qrels.jsonl", [{"query_id": "q1", "doc_id": "d#2", "relevance": 1}])
        (kept,) = self.kept("_read_chunks", [chunk_qrels, "--chunks", chunks, "--to-spans", self.path("s.jsonl")])
        self.assertEqual(list(kept), ["d#2"])


class TestLabelJobs(CommandLineCase):
    CORPUS = TestLabels.CORPUS

    def test_a_missing_input_is_missing_not_overwritten(self):
        qrels, _, chunks = self.files()
        corpus = self.jsonl("corpus.jsonl", self.CORPUS)
        out, gone = self.path("out.jsonl"), self.path("gone.jsonl")
        ids = self.jsonl("ids.jsonl", [{"query_id": "q1", "doc_id": "d#1", "grade": 2}])
        for argv, missing in (([gone, "--corpus", corpus, "--fix-labels", out], gone),
                              ([qrels, "--corpus", gone, "--fix-labels", out], gone),
                              ([qrels, "--corpus", gone, "--fix-labels", gone], gone),
                              ([gone, "--chunks", chunks, "--to-spans", out], gone),
                              ([ids, "--chunks", gone, "--to-spans", out], gone)):
            with self.subTest(argv=argv):
                assert_error_line(self, self.error(argv), file=missing)
        assert_error_line(self, self.error([qrels, "--corpus", corpus, "--fix-labels", corpus]), file=corpus)

    def test_migrated_labels_quote_their_text_so_a_changed_corpus_is_caught(self):
        # The documented migration, then an intro added to the document: labels without text cannot be
        # checked (they once all read "valid", exit 0, every offset wrong); with --corpus they quote their
        # text, and the check finds them moved, and --fix-labels re-anchors them.
        ids = self.jsonl("ids.jsonl", [{"query_id": "q1", "doc_id": "c2", "grade": 2},
                                       {"query_id": "q2", "doc_id": "c1", "grade": 1}])
        chunks = self.jsonl("chunks.jsonl", [{"chunk_id": "c1", "doc_id": "d", "start": 0, "end": 10},
                                             {"chunk_id": "c2", "doc_id": "d", "start": 10, "end": 20}])
        corpus = self.jsonl("corpus.jsonl", [{"doc_id": "d", "text": "0123456789abcdefghij"}])
        later = self.jsonl("later.jsonl", [{"doc_id": "d", "text": "Intro. 0123456789abcdefghij"}])
        bare, quoted = self.path("bare.jsonl"), self.path("quoted.jsonl")
        self.assertEqual(run_main([ids, "--chunks", chunks, "--to-spans", bare])[0], 0)
        self.assertEqual(run_main([ids, "--chunks", chunks, "--corpus", corpus, "--to-spans", quoted])[0], 0)
        self.assertEqual([json.loads(line).get("text") for line in self.read(quoted).decode().splitlines()],
                         ["abcdefghij", "0123456789"])
        code, out, _ = run_main([bare, "--corpus", later, "--check-labels"])
        self.assertEqual(code, rag_eval.EXIT_INCONCLUSIVE)
        self.assertEqual(out.splitlines()[-3].split(), ["all", "0", "0", "2", "0"])  # none valid: unchecked
        code, out, _ = run_main([quoted, "--corpus", later, "--check-labels"])
        self.assertEqual(code, 0)
        self.assertEqual(out.splitlines()[3].split(), ["all", "0", "2", "0", "0"])
        fixed = self.path("fixed.jsonl")
        self.assertEqual(run_main([quoted, "--corpus", later, "--fix-labels", fixed])[0], 0)
        self.assertEqual([(row["start"], row["end"]) for row in map(json.loads, self.read(fixed).decode().splitlines())],
                         [(17, 27), (7, 17)])
        self.assertEqual(run_main([fixed, "--corpus", later, "--check-labels"])[0], 0)
        # a chunk outside its document's text cannot quote it
        short = self.jsonl("short.jsonl", [{"doc_id": "d", "text": "0123456789abc"}])
        self.assertEqual(run_main([ids, "--chunks", chunks, "--corpus", short, "--to-spans", self.path("x.jsonl")])[:2],
                         (2, ""))

    def test_fix_labels_keeps_every_field(self):
        qrels = self.write("qrels.jsonl", "".join(json.dumps(row) + "\n" for row in [
            {"qid": "q1", "doc_id": "d", "start": 0, "end": 10, "relevance": 2, "text": "0123456789",
             "annotator": "ann", "note": {"why": ["moved"]}},
            {"query_id": "q1", "doc_id": "e", "start": 5, "end": 9, "grade": 1, "annotator": "bob"},
            {"query_id": "q0", "doc_id": "d", "start": 4, "end": 6, "grade": 1, "text": "23", "é": "ü"},
        ]))
        corpus = self.jsonl("corpus.jsonl", self.CORPUS)
        fixed = self.path("fixed.jsonl")
        code, out, err = run_main([qrels, "--corpus", corpus, "--fix-labels", fixed])
        self.assertEqual((code, err), (0, ""))  # fixing is no check: it exits 0
        rows = [json.loads(line) for line in self.read(fixed).decode().splitlines()]
        self.assertEqual(rows, [  # file order, field order, field names and values kept; only offsets moved
            {"qid": "q1", "doc_id": "d", "start": 2, "end": 12, "relevance": 2, "text": "0123456789",
             "annotator": "ann", "note": {"why": ["moved"]}},
            {"query_id": "q1", "doc_id": "e", "start": 5, "end": 9, "grade": 1, "annotator": "bob"},
            {"query_id": "q0", "doc_id": "d", "start": 4, "end": 6, "grade": 1, "text": "23", "é": "ü"},
        ])
        self.assertEqual([list(row) for row in rows][0][:5], ["qid", "doc_id", "start", "end", "relevance"])
        self.assertIn('"é": "ü"', self.read(fixed).decode())
        # valid or moved now, but bob's row quotes no text: unchecked, so not every label was checked
        self.assertEqual(run_main([fixed, "--corpus", corpus, "--check-labels"])[0], rag_eval.EXIT_INCONCLUSIVE)

    def test_check_labels_prints_no_workflow_command(self):
        # Ids are input: on stdout, in a CI log, they could stop the runner's commands or forge an error.
        qrels = self.jsonl("qrels.jsonl", [
            {"query_id": "q##[stop-commands]tok", "doc_id": "d\n::error title=x::forged", "start": 0, "end": 5,
             "grade": 2},
            {"query_id": "q2", "doc_id": "::warning::w", "start": 0, "end": 5, "grade": 2, "text": "hello"}])
        corpus = self.jsonl("corpus.jsonl", [{"doc_id": "::warning::w", "text": "xxxhello"}])
        code, out, err = run_main([qrels, "--corpus", corpus, "--check-labels"])
        self.assertEqual((code, err), (1, ""))
        self.assertIn("orphaned q##\\[stop-commands]tok d\\n::error title=x::forged [0, 5): document not in the corpus",
                      out)
        self.assertIn("moved q2 ::warning::w [0, 5): now [3, 8)", out)
        for line in out.splitlines():
            self.assertFalse(line.lstrip().startswith("::") or "##[" in line, line)

    def test_a_span_that_would_move_onto_another_grade_is_orphaned(self):
        # The first span's text moved to [2, 12), where the second span already is, judged otherwise: no
        # place for it, so it is orphaned (checking exits 1, scoring refuses, fixing leaves it where it was).
        # It was once reported as moved, dropped without a word when scoring, and refused by --fix-labels
        # in the name of the file it was to write.
        rows = [{"query_id": "q1", "doc_id": "d", "start": 0, "end": 10, "grade": 2, "text": "0123456789"},
                {"query_id": "q1", "doc_id": "d", "start": 2, "end": 12, "grade": 1}]
        qrels, corpus = self.jsonl("qrels.jsonl", rows), self.jsonl("corpus.jsonl", self.CORPUS)
        code, out, err = run_main([qrels, "--corpus", corpus, "--check-labels"])
        self.assertEqual((code, err), (1, ""))
        self.assertIn("orphaned q1 d [0, 10): would move onto [2, 12), judged otherwise there", out)
        self.assertEqual(out.splitlines()[1].split(), ["q1", "0", "0", "1", "1"])
        fixed = self.path("fixed.jsonl")
        self.assertEqual(run_main([qrels, "--corpus", corpus, "--fix-labels", fixed])[:2], (0, out))
        self.assertEqual([json.loads(line) for line in self.read(fixed).decode().splitlines()], rows)
        run = self.jsonl("run.jsonl", [{"query_id": "q1", "chunk_id": "c", "doc_id": "d", "start": 0, "end": 12}])
        assert_error_line(self, self.error([qrels, run, "--corpus", corpus]), file=qrels, names=[" 1 ", "--check-labels"])
        # Moved onto a place judged with the same grade, it is moved, and the two are one judgment.
        rows[1]["grade"] = 2
        same = self.jsonl("same.jsonl", rows)
        code, out, _ = run_main([same, "--corpus", corpus, "--check-labels"])
        self.assertEqual(code, rag_eval.EXIT_INCONCLUSIVE)  # moved; the second quotes no text: unchecked
        self.assertIn("moved q1 d [0, 10): now [2, 12)", out)


class TestRepeatedChunks(CommandLineCase):
    """A span run that lists a chunk twice in a query gets the same note as an id run, in every run format."""

    NOTE = "rag_eval: note: 1 document is listed more than once in 1 query of {}; each counts once, " \
           "at its best place (trec_eval refuses such a run)"

    def notes(self, argv, stdin=None):
        if stdin is None:
            code, out, err = run_main(argv)
        else:
            with open(stdin, "rb") as data, mock.patch("sys.stdin") as standard_input:
                standard_input.buffer = data
                code, out, err = run_main(argv)
        self.assertEqual(code, 0, err)
        return json.loads(out)["mean"], [line for line in err.splitlines() if "listed more than once" in line]

    def test_every_format_notes_the_repeat_and_scores_as_without_it(self):
        qrels, run, chunks = self.files()
        unique, none = self.notes([qrels, run, "--chunks", chunks, "--k", "2"])
        self.assertEqual(none, [])  # no repeat, no note
        twice = self.RUN[:2] + [dict(self.RUN[0], score=0.1)] + self.RUN[2:]  # q1 lists d#1 again, lower
        trec = "".join(f"{row['query_id']} Q0 {row['doc_id']} {rank} {row['score']} t\n"
                       for rank, row in enumerate(twice, 1))
        as_json = {}
        for row in twice:
            as_json.setdefault(row["query_id"], []).append(row["doc_id"])
        unlisted = [{key: row[key] for key in ("query_id", "doc_id")} for row in twice]  # ranked by file order
        for name, path in (("jsonl", self.jsonl("twice.jsonl", twice)), ("trec", self.write("twice.trec", trec)),
                           ("json", self.write("twice.json", json.dumps(as_json))),
                           ("jsonl without scores", self.jsonl("unscored.jsonl", unlisted))):
            with self.subTest(name):
                means, notes = self.notes([qrels, path, "--chunks", chunks, "--k", "2"])
                self.assertEqual(notes, [self.NOTE.format(path)])
                self.assertEqual(means, unique)
        means, notes = self.notes([qrels, "-", "--chunks", chunks, "--k", "2"], stdin=self.path("twice.json"))
        self.assertEqual((means, notes), (unique, [self.NOTE.format("<stdin>")]))


class TestSpanInputChecks(CommandLineCase):
    """What the span readers and evaluate_spans take and refuse, row by row."""

    def test_a_row_with_one_offset_is_a_bad_offset_not_a_missing_pair(self):
        good = self.QRELS[0]
        for row, got in (({"query_id": "q1", "doc_id": "d", "start": 3, "grade": 1}, "3 and None"),
                         ({"query_id": "q1", "doc_id": "d", "end": 3, "grade": 1}, "None and 3")):
            with self.subTest(row=row):
                qrels, run, chunks = self.files(qrels=[good, row])
                line = assert_error_line(self, self.error([qrels, run, "--chunks", chunks]), file=qrels, line=2)
                self.assertTrue(line.endswith(f" {got}"), line)

    def test_a_span_of_grade_0_is_judged_not_relevant(self):
        # e [0, 10) is judged, grade 0: read, kept, and no relevant span of q1
        qrels, _, _ = self.files(qrels=[self.QRELS[0], dict(self.QRELS[0], doc_id="e", grade=0, text=None)])
        self.assertEqual(rag_eval.read_qrels(qrels),
                         {"q1": (Span("d", 0, 10, 2, "0123456789"), Span("e", 0, 10, 0))})

    def test_evaluate_spans_checks_its_judgments(self):
        chunks = {"d#1": ("d", 0, 15)}
        run = {"q1": ["d#1"]}
        for qrels, message in (({"q1": (Span("d", 0, 10, -1),)}, "qrels: query 'q1': expected a Span(doc_id, start, "
                                                                  "end, grade) with 0 <= start < end, got Span("),
                               ({"q1": (Span("d", 0, 10, rag_eval._MAX_GRADE + 1),)}, "qrels: query 'q1': expected a Span("),
                               ({1: (Span("d", 0, 10, 1),)}, "qrels: query id must be a string, got a number")):
            with self.subTest(qrels=qrels):
                with self.assertRaises(rag_eval.RagEvalError) as caught:
                    rag_eval.evaluate_spans(qrels, run, chunks, 1)
                self.assertTrue(str(caught.exception).startswith(message), str(caught.exception))
        # the judgments are checked first, before the run (here not even a mapping)
        with self.assertRaisesRegex(rag_eval.RagEvalError, "^qrels: .* a number \\(write '1'\\)$"):
            rag_eval.evaluate_spans({1: (Span("d", 0, 10, 1),)}, None, chunks, 1)
        # grade 0 is a judgment (not relevant): d [0, 10) relevant at rank 1, d [10, 12) not
        result = rag_eval.evaluate_spans({"q1": (Span("d", 0, 10, 1), Span("d", 10, 12, 0))}, run, chunks, 1,
                                         measures=["recall"])
        self.assertEqual(result["mean"]["recall@1"], 1.0)

    def test_a_span_moved_onto_another_grade_stays_and_is_orphaned(self):
        # "xyz" is quoted at [0, 3) but lies at [10, 13), where another span is judged grade 1: the fixed
        # judgments cannot hold two grades for one place, and dropping either loses a judgment (this once
        # kept the moved one alone), so the moved one stays where it was, orphaned.
        qrels = {"q": (Span("d", 0, 3, 2, "xyz"), Span("d", 10, 13, 1))}
        check = rag_eval._check_labels(qrels, {"d": "abcdefghijxyz"})
        self.assertEqual(check.fixed, {"q": (Span("d", 0, 3, 2, "xyz"), Span("d", 10, 13, 1))})
        self.assertEqual([row[2:] for row in check.rows], [
            ("orphaned", "would move onto [10, 13), judged otherwise there"), ("unchecked", "no quoted text")])
        self.assertEqual(check.moved, {})
        # the same grade there: one judgment, at the new place
        check = rag_eval._check_labels({"q": (Span("d", 0, 3, 1, "xyz"), Span("d", 10, 13, 1))}, {"d": "abcdefghijxyz"})
        self.assertEqual(check.fixed, {"q": (Span("d", 10, 13, 1, "xyz"),)})
        self.assertEqual([row[2] for row in check.rows], ["moved", "unchecked"])

    def test_a_move_kept_back_is_checked_again_and_a_move_of_the_same_grade_joins(self):
        # B (grade 1) moves onto C's place [15, 20) (grade 2): kept back at [5, 10); D (grade 2) then would
        # move onto B's place, judged 1: kept back too (once it moved there and B's or D's grade was lost).
        corpus = {"d": "zzzzzDDDDDzzzzzBBBBBzzzzzzzzzz"}
        spans = (Span("d", 5, 10, 1, "BBBBB"), Span("d", 15, 20, 2, "BBBBB"), Span("d", 25, 30, 2, "DDDDD"))
        check = rag_eval._check_labels({"q": spans}, corpus)
        self.assertEqual([row[2] for row in check.rows], ["orphaned", "valid", "orphaned"])
        self.assertEqual((check.fixed, check.moved), ({"q": spans}, {}))
        # A stays at [5, 10), graded 2; B (2) moves onto it and joins it; C (1) would, and stays where it was.
        spans = (Span("d", 0, 5, 2, "AAAAA"), Span("d", 5, 10, 2), Span("d", 10, 15, 1, "AAAAA"))
        check = rag_eval._check_labels({"q": spans}, {"d": "xxxxxAAAAAyyyyy"})
        self.assertEqual([row[2] for row in check.rows], ["moved", "unchecked", "orphaned"])
        self.assertEqual(check.fixed, {"q": (Span("d", 5, 10, 2, "AAAAA"), Span("d", 10, 15, 1, "AAAAA"))})

    def test_every_label_status_and_the_fixed_rows_of_judgments_made_in_memory(self):
        corpus = {"d": "abcabcxyz", "e": "0123"}  # "abc" twice in d, "xyz" once, at [6, 9)
        qrels = SpanQrels({"q": (Span("d", 0, 3, 1, "abc"), Span("d", 1, 3, 1, "abc"), Span("d", 2, 5, 2, "xyz"),
                                 Span("d", 4, 6, 1, "nope"), Span("e", 0, 4, 1), Span("e", 2, 5, 1),
                                 Span("f", 0, 1, 1))})
        check = rag_eval._check_labels(qrels, corpus)
        self.assertEqual([(span[:3], status, found) for _, span, status, found in check.rows], [
            (("d", 0, 3), "valid", ""),  # d[0:3] is "abc"
            (("d", 1, 3), "orphaned", "quoted text found more than once"),  # "abc" at 0 and at 3
            (("d", 2, 5), "moved", "now [6, 9)"),
            (("d", 4, 6), "orphaned", "quoted text not found"),
            (("e", 0, 4), "unchecked", "no quoted text"),  # no text: inside e's 4 characters, never valid
            (("e", 2, 5), "orphaned", "past the end (4 characters)"),
            (("f", 0, 1), "orphaned", "document not in the corpus"),
        ])
        # made in memory (no rows as read): the fixed spans, written as the reader reads them
        text = rag_eval._fixed_labels_text(qrels, check)
        self.assertEqual(text, rag_eval._spans_text(check.fixed))
        rows = [json.loads(line) for line in text.splitlines()]
        self.assertEqual(rows[3], {"query_id": "q", "doc_id": "d", "start": 6, "end": 9, "grade": 2, "text": "xyz"})  # by start
        self.assertEqual(rows[4], {"query_id": "q", "doc_id": "e", "start": 0, "end": 4, "grade": 1})

    def test_intervals_of_both_levels(self):
        # q1's span is covered at rank 1, q2's document never retrieved: success 1 and 0 at both levels,
        # a 0/1 measure, so Clopper-Pearson's interval of 1 in 2 at each
        qrels = SpanQrels({"q1": (Span("d", 0, 10, 1),), "q2": (Span("e", 0, 5, 1),)})
        result = rag_eval.evaluate_spans(qrels, {"q1": ["d#1"], "q2": ["x#1"]}, {"d#1": ("d", 0, 10), "x#1": ("x", 0, 3)},
                                         1, measures=["success"])
        both = rag_eval._clopper_pearson(1, 2)
        self.assertEqual(rag_eval._mean_intervals(result, 50), {"doc.success@1": both, "success@1": both})


class TestOneCutoffIsANumber(CommandLineCase):
    """Found by a planted bug (mutants3): the report's k is a number for one cutoff, a list for several, as for ids."""

    def test_k_as_given(self):
        qrels, run, chunks = self.files()
        for given, shown in (("2", 2), ("1,2", [1, 2])):
            code, out, err = run_main([qrels, run, "--chunks", chunks, "--k", given])
            self.assertEqual((code, json.loads(out)["k"]), (0, shown), err)


def random_case(rng):
    """Chunks in up to three documents (some chunkings overlap), spans that overlap, nest, repeat and
    come in any order, and rankings that may run past the deepest cutoff."""
    docs = ["a", "b", "c"][: rng.randint(1, 3)]
    chunks = {}
    for doc in docs:
        at, overlap = 0, rng.random() < 0.4
        for n in range(rng.randint(1, 8)):
            size = rng.randint(1, 15)
            chunks[f"{doc}{n}"] = (doc, at, at + size)
            at = max(0, at + size + rng.randint(0, 3) - (rng.randint(0, size) if overlap else 0))
    qrels, run = {}, {}
    for q in range(rng.randint(1, 4)):
        spans = []
        for _ in range(rng.randint(1, 6)):
            start = rng.randint(0, 40)
            spans.append(Span(rng.choice(docs + ["unretrieved"]), start, start + rng.randint(1, 20), rng.choice([0, 1, 2, 3])))
        spans += spans[:rng.randint(0, 1)]  # a span judged twice counts twice, as the reference counts it
        rng.shuffle(spans)
        qrels[f"q{q}"] = tuple(spans)
        picked = rng.sample(sorted(chunks), rng.randint(0, len(chunks)))
        run[f"q{q}"] = {c: float(rng.randint(0, 3)) for c in picked} if rng.random() < 0.5 else picked
    return SpanQrels(qrels), run, chunks


class TestFastPaths(unittest.TestCase):
    CASES = 400

    def test_document_level_equals_evaluate_on_the_documents(self):
        rng = random.Random(1618)
        for case in range(self.CASES):
            qrels, run, chunks = random_case(rng)
            documents = {qid: {} for qid in qrels}
            for qid, spans in qrels.items():
                for span in spans:
                    documents[qid][span.doc_id] = max(span.grade, documents[qid].get(span.doc_id, 0))
            doc_run = {qid: list(dict.fromkeys(chunks[c][0] for c in rag_eval._ranking(entry))) for qid, entry in run.items()}
            k = sorted(rng.sample(range(1, 9), 2))
            options = {"gain": rng.choice(rag_eval._GAINS), "min_grade": rng.choice([1, 2])}
            try:
                expected = rag_eval.evaluate(documents, doc_run, k, measures=["recall", "ndcg", "ap", "precision"], **options)
            except rag_eval.RagEvalError as exc:
                with self.assertRaises(rag_eval.RagEvalError) as caught:
                    rag_eval.evaluate_spans(qrels, run, chunks, k, measures=["recall", "ndcg", "ap", "precision"], **options)
                self.assertEqual(str(caught.exception), str(exc))
                continue
            got = rag_eval.evaluate_spans(qrels, run, chunks, k, measures=["recall", "ndcg", "ap", "precision"], **options)
            for key in ("unscored", "skipped", "missing", "queries"):
                self.assertEqual(got[key], expected[key], f"case {case} {key}")
            for qid, values in expected["per_query"].items():
                for metric, value in values.items():
                    self.assertEqual(got["per_query"][qid][rag_eval._DOC_LEVEL + metric], value, f"case {case} {qid} {metric}")

    def test_evidence_equals_the_brute_force(self):
        rng = random.Random(1619)
        for case in range(self.CASES):
            qrels, run, chunks = random_case(rng)
            k = rng.randint(1, 9)
            options = {"min_overlap": rng.choice([0.5, 0.25, 1.0, 0.3]), "gain": rng.choice(rag_eval._GAINS),
                       "min_grade": rng.choice([1, 2])}
            try:
                got = rag_eval.evaluate_spans(qrels, run, chunks, k, measures=list(NAMES), **options)
            except rag_eval.RagEvalError:
                continue  # no query with a relevant span
            for qid, values in got["per_query"].items():
                ranking = rag_eval._ranking(run.get(qid, []))
                expected = reference(qrels[qid], [chunks[c] for c in ranking], k, **options)
                for name in NAMES:
                    self.assertAlmostEqual(values[name], expected[name], places=12,
                                           msg=f"case {case} {qid} {name}: {qrels[qid]} {ranking} {chunks} k={k} {options}")


class TestNumberedChunks(unittest.TestCase):
    """The chunks are numbered once for all queries: every chunk of the map (unranked ones too, so a
    document's chunks may overlap only among chunks no query ranks), or, when a location is bad or
    a chunk missing, only the ranked ones.  Shapes drawn on purpose, against the brute force."""

    CASES = 300

    def shaped_case(self, rng):
        length = rng.randint(20, 60)
        cut = sorted(rng.sample(range(1, length), rng.randint(1, 6)))
        chunks = {f"a{n}": ("a", start, end) for n, (start, end) in enumerate(zip([0] + cut, cut + [length]))}
        if rng.random() < 0.5:  # a second chunking of the same document that no query, or some, rank
            chunks.update((f"w{n}", ("a", start, min(start + 15, length))) for n, start in enumerate(range(0, length, 10)))
        starts, ends = [0] + cut, cut + [length]
        spans = []
        for _ in range(rng.randint(1, 5)):
            shape = rng.choice(["inside", "across", "two chunks", "nested", "exact", "partial"])
            j = rng.randrange(len(starts))
            if shape == "inside":
                start = rng.randint(starts[j], ends[j] - 1)
                end = rng.randint(start + 1, ends[j])
            elif shape in ("across", "two chunks") and j + 1 < len(starts):
                start, end = rng.randint(starts[j], ends[j] - 1), rng.randint(starts[j + 1] + 1, ends[j + 1])
                if shape == "two chunks":
                    start, end = starts[j], ends[j + 1]
            elif shape == "nested" and spans:
                outer = rng.choice(spans)
                start = rng.randint(outer.start, outer.end - 1)
                end = rng.randint(start + 1, outer.end)
            elif shape == "exact":
                start, end = starts[j], ends[j]
            else:
                start = rng.randint(0, length - 1)
                end = rng.randint(start + 1, length + 5)
            spans.append(Span("a", start, end, rng.choice([0, 1, 2, 3])))
        pool = sorted(chunks) if rng.random() < 0.5 else sorted(c for c in chunks if c.startswith("a"))
        ranking = rng.sample(pool, rng.randint(1, len(pool)))
        return SpanQrels({"q": tuple(spans)}), {"q": ranking}, chunks

    def test_shapes_against_the_brute_force(self):
        rng = random.Random(2718)
        for case in range(self.CASES):
            qrels, run, chunks = self.shaped_case(rng)
            k = rng.randint(1, 8)
            options = {"min_overlap": rng.choice([1e-9, 0.1, 0.5, 0.5000001, 0.999, 1.0]),
                       "gain": rng.choice(rag_eval._GAINS), "min_grade": rng.choice([1, 2])}
            try:
                got = rag_eval.evaluate_spans(qrels, run, chunks, k, measures=list(NAMES), **options)
            except rag_eval.RagEvalError:
                continue  # no relevant span
            expected = reference(qrels["q"], [chunks[c] for c in run["q"]], k, **options)
            for name in NAMES:
                self.assertAlmostEqual(got["per_query"]["q"][name], expected[name], places=12,
                                       msg=f"case {case} {name}: {qrels['q']} {run['q']} {chunks} k={k} {options}")

    def test_unranked_chunks_of_the_map_change_nothing(self):
        rng = random.Random(2719)
        for case in range(self.CASES // 3):
            qrels, run, chunks = random_case(rng)
            k = rng.randint(1, 6)
            try:
                alone = rag_eval.evaluate_spans(qrels, run, chunks, k, measures=list(NAMES))
            except rag_eval.RagEvalError:
                continue
            more = dict(chunks, x1=("a", 0, 100), x2=("a", 3, 5), x3=("zz", 1, 2))  # overlapping, never ranked
            self.assertEqual(rag_eval.evaluate_spans(qrels, run, more, k, measures=list(NAMES)), alone, f"case {case}")
            broken = dict(more, x4=("a", 5, 5), x5=None)  # badly located, never ranked: not checked
            self.assertEqual(rag_eval.evaluate_spans(qrels, run, broken, k, measures=list(NAMES)), alone, f"case {case}")

    def test_the_first_bad_or_missing_ranked_chunk_is_named(self):
        spans = SpanQrels({"q": (Span("d", 0, 10, 1),), "r": (Span("d", 0, 10, 1),)})
        chunks = {"a": ("d", 0, 5), "b": ("d", 5, 9), "c": ("d", 9, 12), "u": None}
        cases = [({"q": ["a", "b"], "r": ["zz", "yy"]}, chunks, "chunk 'zz' is not located"),
                 ({"q": ["a", "c"], "r": ["b", "zz"]}, dict(chunks, b=("d", 3, 3), c=("d", -1, 2)),
                  "chunk 'zz' is not located"),  # missing before badly located, as the readers check
                 ({"q": ["a", "c"], "r": ["b"]}, dict(chunks, b=("d", 3, 3), c=("d", -1, 2)), "chunk 'c': a location"),
                 ({"q": ["a"], "r": ["b"]}, dict(chunks, b=["d", 1.5, 3]), "chunk 'b': a location")]
        for run, located, message in cases:
            with self.subTest(message=message), self.assertRaises(rag_eval.RagEvalError) as caught:
                rag_eval.evaluate_spans(spans, run, located, 2)
            self.assertIn(message, str(caught.exception))


class TestSpanRunFormats(unittest.TestCase):
    """A span run is read as read_run reads runs: MS MARCO and header files as well as TREC and JSON."""

    def test_every_format_scores_as_the_jsonl_run(self):
        import contextlib
        import io
        import json
        import os
        import tempfile
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        example = os.path.join(here, "examples", "rechunking")
        with open(os.path.join(example, "run200.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        scored = {}
        for row in rows:
            scored.setdefault(row["query_id"], {})[row["doc_id"]] = row["score"]
        ranked = {qid: rag_eval._ranking(docs) for qid, docs in scored.items()}  # ties as a scored run breaks them
        forms = {
            "trec": "".join(f"{r['query_id']} Q0 {r['doc_id']} 1 {r['score']} t\n" for r in rows),
            "msmarco": "".join(f"{q}\t{d}\t{rank}\n" for q, ds in ranked.items() for rank, d in enumerate(ds, 1)),
            "tsv": "qid\tdocno\tscore\n" + "".join(f"{r['query_id']}\t{r['doc_id']}\t{r['score']}\n" for r in rows),
        }

        def score(run):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                code = rag_eval.main([os.path.join(example, "qrels.spans.jsonl"), run, "--chunks",
                                      os.path.join(example, "chunks200.jsonl"), "--k", "1,3", "--digits", "17"])
            return code, json.loads(out.getvalue())["mean"]

        expected = score(os.path.join(example, "run200.jsonl"))
        self.assertEqual(expected[0], 0)
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in forms.items():
                path = os.path.join(tmp, f"run.{name}")
                with open(path, "w") as f:
                    f.write(text)
                with self.subTest(format=name):
                    self.assertEqual(score(path), expected)


if __name__ == "__main__":
    unittest.main()
