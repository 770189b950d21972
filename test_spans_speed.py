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
                       "gain": rng.choice(rag_eval.GAINS), "min_grade": rng.choice([1, 2])}
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
        here = os.path.dirname(os.path.abspath(__file__))
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
