"""Peak memory of each side input and mode against what the labels and the run name (measured, never asserted).

    python3 tools/bench/bench_memory.py [--scale 1] [--workdir /tmp/rag_eval_bench_memory]
                                        [--compare OTHER/rag_eval.py]

Each case runs ``rag_eval.main`` in a child process and reports the child's
peak resident set (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) with a
baseline child that only imports rag_eval, so the difference is what the
inputs cost.  Seeded inputs, ``--scale`` times the default sizes:

- corpus: 20 labelled documents and 20,000 x scale unlabelled ones of 2,000
  characters each, one astral character (U+1F600) in each text, so that a
  kept text costs 4 bytes a character; ``--check-labels``;
- chunks: a run ranking 10 chunks of each of 200 queries, a chunk map of
  200,000 x scale rows; scoring with ``--chunks``;
- stdin: a JSON run of 2,000 queries x 500 x scale scored documents, from a
  file and on standard input.

``--compare`` runs another copy of rag_eval.py (the main branch's, say) on
the same inputs, case by case.
"""

import argparse
import gzip
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHILD = ("import resource, sys; sys.path.insert(0, sys.argv[1]); import rag_eval; "
         "code = rag_eval.main(sys.argv[2:]) if len(sys.argv) > 2 else 0; "
         "sys.stderr.write(f'{code} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n')")


def peak(rag_eval_dir: str, argv, stdin=None):
    """(exit code, peak RSS in MB) of rag_eval.main(argv) in a child."""
    with open(stdin or os.devnull, "rb") as data:
        done = subprocess.run([sys.executable, "-c", CHILD, rag_eval_dir] + argv, stdin=data,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    code, kilobytes = done.stderr.decode().splitlines()[-1].split()
    return int(code), int(kilobytes) / 1024  # Linux reports KiB


def write_inputs(folder: str, scale: float) -> dict:
    rng = random.Random(0)
    os.makedirs(folder, exist_ok=True)
    path = lambda name: os.path.join(folder, name)  # noqa: E731
    text = lambda: "".join(rng.choice("abcdefgh ") for _ in range(2000)) + "\U0001F600"  # noqa: E731
    labelled = [f"doc{i}" for i in range(20)]
    with gzip.open(path("corpus.jsonl.gz"), "wt", encoding="utf-8") as out:
        for i in range(int(20000 * scale)):
            out.write(json.dumps({"doc_id": f"doc{i}", "text": text()}, ensure_ascii=False) + "\n")
    with open(path("spans.jsonl"), "w") as out:
        for i, doc in enumerate(labelled):
            out.write(json.dumps({"query_id": f"q{i}", "doc_id": doc, "start": 0, "end": 10, "grade": 1}) + "\n")
    with open(path("run_chunks.jsonl"), "w") as out:
        for q in range(200):
            for r in range(10):
                out.write(json.dumps({"query_id": f"q{q % 20}x{q}", "doc_id": f"c{q * 10 + r}", "score": -r}) + "\n")
    with open(path("spans_chunks.jsonl"), "w") as out:
        for q in range(200):
            out.write(json.dumps({"query_id": f"q{q % 20}x{q}", "doc_id": f"doc{q % 20}", "start": 0, "end": 50,
                                  "grade": 1}) + "\n")
    with gzip.open(path("chunks.jsonl.gz"), "wt") as out:
        for c in range(int(200000 * scale)):
            out.write(json.dumps({"chunk_id": f"c{c}", "doc_id": f"doc{c % 20000}", "start": 100 * (c // 20000),
                                  "end": 100 * (c // 20000) + 100}) + "\n")
    queries, depth = 2000, int(500 * scale)
    with open(path("qrels.json"), "w") as out:
        json.dump({f"q{q}": {f"d{q}-1": 1} for q in range(queries)}, out)
    with open(path("run.json"), "w") as out:
        out.write("{")
        for q in range(queries):
            entry = ", ".join(f'"d{q}-{r}": {1 - r / depth!r}' for r in range(depth))
            out.write(("" if q == 0 else ",\n") + f'"q{q}": {{{entry}}}')
        out.write("}\n")
    return {
        "corpus (--check-labels)": ([path("spans.jsonl"), "--corpus", path("corpus.jsonl.gz"), "--check-labels"], None),
        "chunks (--chunks)": ([path("spans_chunks.jsonl"), path("run_chunks.jsonl"), "--chunks",
                               path("chunks.jsonl.gz"), "--allow-partial-run"], None),
        "JSON run from a file": ([path("qrels.json"), path("run.json")], None),
        "JSON run on standard input": ([path("qrels.json"), "-"], path("run.json")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--workdir", default="/tmp/rag_eval_bench_memory")
    parser.add_argument("--compare", help="another rag_eval.py to measure on the same inputs")
    args = parser.parse_args()
    copies = [("this", REPO)] + ([("other", os.path.dirname(os.path.abspath(args.compare)))] if args.compare else [])
    cases = write_inputs(args.workdir, args.scale)
    for name, where in copies:
        _, idle = peak(where, [])
        print(f"{name}: import alone {idle:.0f} MB")
        for case, (argv, stdin) in cases.items():
            code, megabytes = peak(where, argv, stdin)
            print(f"  {case:30} exit {code}  peak {megabytes:7.0f} MB  (+{megabytes - idle:.0f})")


if __name__ == "__main__":
    main()
