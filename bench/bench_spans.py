"""Time evidence-span scoring against the id-based path on the same run (measured, never asserted).

    python3 bench/bench_spans.py [--queries 10000] [--depth 100] [--spans 10] [--repeat 3] [--seed 0]
                                 [--workdir /tmp/rag_eval_bench_spans]

A seeded corpus of 4,000-character documents chunked every 200 characters; per
query, ``--spans`` evidence spans in three documents and a scored run of
``--depth`` chunks (the chunks of those documents first, then others).  The
id-based qrels judge the chunks that hold a span, at the span's grade.  Two
timings, each the median of ``--repeat`` runs:

- library: ``evaluate_spans(span qrels, run, chunk map)`` against
  ``evaluate(chunk qrels, run)``, inputs in memory, at k = 1, 5, 10, 100;
- command line: ``rag_eval.py QRELS RUN --chunks MAP`` against
  ``rag_eval.py CHUNK_QRELS RUN``, the run in JSONL, each in its own process.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import rag_eval  # noqa: E402

DOC_LENGTH, CHUNK = 4000, 200


def workload(queries, depth, spans_per_query, seed):
    rng = random.Random(seed)
    documents = max(100, queries // 5)
    chunks = {f"doc{d}#{c}": (f"doc{d}", c * CHUNK, (c + 1) * CHUNK)
              for d in range(documents) for c in range(DOC_LENGTH // CHUNK)}
    ids = sorted(chunks)
    span_qrels, id_qrels, run = rag_eval.SpanQrels(), {}, {}
    for q in range(queries):
        qid = f"q{q}"
        docs = rng.sample(range(documents), 3)
        rows = {}
        for _ in range(spans_per_query):
            start = rng.randrange(DOC_LENGTH - 300)
            rows[(f"doc{rng.choice(docs)}", start, start + rng.randint(20, 300))] = rng.choice([0, 1, 2, 2])
        span_qrels[qid] = tuple(sorted(rag_eval.Span(*where, grade) for where, grade in rows.items()))
        judged = id_qrels[qid] = {}
        for (doc, start, end), grade in rows.items():
            for c in range(start // CHUNK, (end - 1) // CHUNK + 1):
                chunk = f"{doc}#{c}"
                judged[chunk] = max(grade, judged.get(chunk, 0))
        near = [f"doc{d}#{c}" for d in docs for c in range(DOC_LENGTH // CHUNK)]
        picked = list(dict.fromkeys(near + rng.sample(ids, depth)))[:depth]
        run[qid] = {chunk: round(rng.random(), 4) for chunk in picked}
    return span_qrels, id_qrels, run, chunks


def write_files(workdir, span_qrels, id_qrels, run, chunks):
    os.makedirs(workdir, exist_ok=True)
    paths = {name: os.path.join(workdir, name) for name in ("spans.jsonl", "ids.jsonl", "run.jsonl", "chunks.jsonl")}
    with open(paths["spans.jsonl"], "w") as out:
        out.write(rag_eval.spans_text(span_qrels))
    with open(paths["ids.jsonl"], "w") as out:
        out.writelines(json.dumps({"query_id": q, "doc_id": c, "grade": g}) + "\n"
                       for q, docs in id_qrels.items() for c, g in docs.items())
    with open(paths["run.jsonl"], "w") as out:
        out.writelines(json.dumps({"query_id": q, "doc_id": c, "score": s}) + "\n"
                       for q, entry in run.items() for c, s in entry.items())
    with open(paths["chunks.jsonl"], "w") as out:
        out.writelines(json.dumps({"chunk_id": c, "doc_id": d, "start": s, "end": e}) + "\n"
                       for c, (d, s, e) in chunks.items())
    return paths


def median_seconds(action, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--spans", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default="/tmp/rag_eval_bench_spans")
    args = parser.parse_args()
    span_qrels, id_qrels, run, chunks = workload(args.queries, args.depth, args.spans, args.seed)
    cutoffs = [1, 5, 10, 100]
    measures = ["recall", "success", "mrr", "ndcg", "precision"]
    ids = median_seconds(lambda: rag_eval.evaluate(id_qrels, run, cutoffs, measures=measures), args.repeat)
    spans = median_seconds(lambda: rag_eval.evaluate_spans(span_qrels, run, chunks, cutoffs, measures=measures + ["iou"]),
                           args.repeat)
    print(f"{args.queries} queries x {args.depth} chunks, {args.spans} spans per query, k = 1,5,10,100")
    print(f"library       id-based {ids:.2f} s   spans {spans:.2f} s (evidence and document level)   "
          f"ratio {spans / ids:.2f}")
    paths = write_files(args.workdir, span_qrels, id_qrels, run, chunks)
    script = os.path.join(os.path.dirname(HERE), "rag_eval.py")
    common = ["--k", "1,5,10,100", "--measures", ",".join(measures)]

    def command(*argv):
        return lambda: subprocess.run([sys.executable, script, *argv, *common], check=True, stdout=subprocess.DEVNULL)

    ids = median_seconds(command(paths["ids.jsonl"], paths["run.jsonl"]), args.repeat)
    spans = median_seconds(command(paths["spans.jsonl"], paths["run.jsonl"], "--chunks", paths["chunks.jsonl"]),
                           args.repeat)
    print(f"command line  id-based {ids:.2f} s   spans {spans:.2f} s (reading the chunk map too)   ratio {spans / ids:.2f}")


if __name__ == "__main__":
    main()
