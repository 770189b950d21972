"""The fast paths of evidence scoring against plain definitions, on seeded random cases bounded by a count.

``evaluate_spans`` scores the document level from the chunk locations as a
reduced run, and finds the chunks of each span and of each stretch of relevant
characters by bisection; here both meet what they replace: ``evaluate`` on the
documents' own ranking, and the brute force over characters of test_spans.
"""

import random
import unittest

import rag_eval
from rag_eval import Span, SpanQrels
from test_spans import NAMES, reference


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
            options = {"gain": rng.choice(rag_eval.GAINS), "min_grade": rng.choice([1, 2])}
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
                    self.assertEqual(got["per_query"][qid][rag_eval.DOC_LEVEL + metric], value, f"case {case} {qid} {metric}")

    def test_evidence_equals_the_brute_force(self):
        rng = random.Random(1619)
        for case in range(self.CASES):
            qrels, run, chunks = random_case(rng)
            k = rng.randint(1, 9)
            options = {"min_overlap": rng.choice([0.5, 0.25, 1.0, 0.3]), "gain": rng.choice(rag_eval.GAINS),
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


if __name__ == "__main__":
    unittest.main()
