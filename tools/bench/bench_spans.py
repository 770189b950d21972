"""Time evidence-span scoring against the id-based path on the same run (measured, never asserted).

    python3 tools/bench/bench_spans.py [--queries 10000] [--depth 100] [--spans 10] [--overlap 0] [--repeat 3]
                                 [--seed 0] [--workdir /tmp/rag_eval_bench_spans] [--compare OTHER/rag_eval.py]

A seeded corpus of 4,000-character documents cut into 200-character chunks
(every 200 characters, or ``--overlap`` characters closer: a chunker with
overlap); per query, ``--spans`` evidence spans in three documents and a
scored run of ``--depth`` chunks (the chunks of those documents first, then
others).  The id-based qrels judge the chunks that hold a span, at the span's
grade.  Two timings, CPU seconds (user + system: on a shared machine wall
time includes waiting for a CPU), each the median of ``--repeat`` runs, the
id-based and the span run interleaved:

- library: ``evaluate_spans(span qrels, run, chunk map)`` against
  ``evaluate(chunk qrels, run)``, inputs in memory, at k = 1, 5, 10, 100;
- command line: ``rag_eval.py QRELS RUN --chunks MAP`` against
  ``rag_eval.py CHUNK_QRELS RUN``, the run in JSONL, each in its own process.

Then, once each, the library calls' peak of memory allocated while they run
(``tracemalloc``: Python's own allocations, the inputs not counted).

``--compare`` times another copy of ``rag_eval.py`` (the main branch's, say)
in the same invocation, interleaved with this one, so that a change is
measured against the code before it under the same load.
"""

import argparse
import importlib.util
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
import rag_eval  # noqa: E402

DOC_LENGTH, CHUNK = 4000, 200


def workload(queries, depth, spans_per_query, seed, overlap=0):
    rng = random.Random(seed)
    documents = max(100, queries // 5)
    step = CHUNK - overlap
    starts = range(0, DOC_LENGTH - overlap, step)
    chunks = {f"doc{d}#{c}": (f"doc{d}", start, min(start + CHUNK, DOC_LENGTH))
              for d in range(documents) for c, start in enumerate(starts)}
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
            for c, chunk_start in enumerate(starts):
                if chunk_start < end and start < chunk_start + CHUNK:
                    chunk = f"{doc}#{c}"
                    judged[chunk] = max(grade, judged.get(chunk, 0))
        near = [f"{doc}#{c}" for doc in (f"doc{d}" for d in docs) for c in range(len(starts))]
        picked = list(dict.fromkeys(near + rng.sample(ids, depth)))[:depth]
        run[qid] = {chunk: round(rng.random(), 4) for chunk in picked}
    return span_qrels, id_qrels, run, chunks


def write_files(workdir, span_qrels, id_qrels, run, chunks):
    os.makedirs(workdir, exist_ok=True)
    paths = {name: os.path.join(workdir, name) for name in ("spans.jsonl", "ids.jsonl", "run.jsonl", "chunks.jsonl")}
    with open(paths["spans.jsonl"], "w") as out:
        out.write(rag_eval._spans_text(span_qrels))
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


def cpu_seconds(action):
    """CPU seconds (user + system) of ``action``, its child processes included."""
    def now():
        mine, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime

    start = now()
    action()
    return now() - start


def medians(actions, repeat):
    """Each action timed ``repeat`` times, interleaved: {name: median CPU seconds}."""
    times = {name: [] for name in actions}
    for _ in range(repeat):
        for name, action in actions.items():
            times[name].append(cpu_seconds(action))
    return {name: statistics.median(found) for name, found in times.items()}


def load(path):
    spec = importlib.util.spec_from_file_location("rag_eval_compared", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--spans", type=int, default=10)
    parser.add_argument("--overlap", type=int, default=0, help="characters shared by consecutive chunks")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default="/tmp/rag_eval_bench_spans")
    parser.add_argument("--compare", metavar="PATH", help="another rag_eval.py to time the same way")
    args = parser.parse_args()
    span_qrels, id_qrels, run, chunks = workload(args.queries, args.depth, args.spans, args.seed, args.overlap)
    cutoffs = [1, 5, 10, 100]
    measures = ["recall", "success", "mrr", "ndcg", "precision"]
    copies = {"this": (rag_eval, os.path.join(os.path.dirname(os.path.dirname(HERE)), "rag_eval.py"))}
    if args.compare:
        compared = load(args.compare)
        other_qrels = compared.SpanQrels({qid: tuple(compared.Span(*s) for s in spans) for qid, spans in span_qrels.items()})
        copies["compared"] = (compared, os.path.abspath(args.compare))
    library = {}
    for label, (module, _) in copies.items():
        qrels = span_qrels if module is rag_eval else other_qrels
        library[f"{label} id-based"] = lambda m=module: m.evaluate(id_qrels, run, cutoffs, measures=measures)
        library[f"{label} spans"] = lambda m=module, q=qrels: m.evaluate_spans(q, run, chunks, cutoffs,
                                                                             measures=measures + ["iou"])
    print(f"{args.queries} queries x {args.depth} chunks, {args.spans} spans per query, chunk overlap "
          f"{args.overlap}, k = 1,5,10,100; CPU seconds, median of {args.repeat}")
    timed = medians(library, args.repeat)
    for label in copies:
        ids, spans = timed[f"{label} id-based"], timed[f"{label} spans"]
        print(f"library       {label:8}  id-based {ids:.2f} s   spans {spans:.2f} s (evidence and document level)   "
              f"ratio {spans / ids:.2f}")
    for name, action in library.items():
        tracemalloc.start()
        action()
        print(f"memory        {name:17} peak {tracemalloc.get_traced_memory()[1] / 1e6:.1f} MB allocated")
        tracemalloc.stop()
    paths = write_files(args.workdir, span_qrels, id_qrels, run, chunks)
    common = ["--k", "1,5,10,100", "--measures", ",".join(measures)]

    def command(script, *argv):
        return lambda: subprocess.run([sys.executable, script, *argv, *common], check=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    line = {}
    for label, (_, script) in copies.items():
        line[f"{label} id-based"] = command(script, paths["ids.jsonl"], paths["run.jsonl"])
        line[f"{label} spans"] = command(script, paths["spans.jsonl"], paths["run.jsonl"], "--chunks", paths["chunks.jsonl"])
    timed = medians(line, args.repeat)
    for label in copies:
        ids, spans = timed[f"{label} id-based"], timed[f"{label} spans"]
        print(f"command line  {label:8}  id-based {ids:.2f} s   spans {spans:.2f} s (reading the chunk map too)   "
              f"ratio {spans / ids:.2f}")


if __name__ == "__main__":
    main()
