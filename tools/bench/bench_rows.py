"""Ranked runs read row by row (MS MARCO's ``qid pid rank``, JSONL without scores): this code against another.

    python3 tools/bench/bench_rows.py --reference OLD/rag_eval.py [--queries 10000] [--docs 100] [--k 10,1000]
                                [--formats msmarco,jsonl] [--repeat 3] [--workdir /tmp/rag_eval_bench]
                                [--files QRELS,RUN] [--stdin] [--options "MORE OPTIONS"]

Standard library only.  Generates, once and cached in ``--workdir``, seeded TREC
qrels (1-6 judged documents per query, most of them retrieved near the top)
and the same ranked run as MS MARCO lines (tab-separated, numeric passage
ids, as MS MARCO's own runs) and as JSONL rows without scores.  Each copy of
rag_eval (this one, and ``--reference``) runs as ``python3 -m rag_eval QRELS
RUN --k K --digits 17`` in its own process under bench.py's measuring wrapper
with the CPU time added (bench_deep's), the copies interleaved, ``--repeat``
times.  Prints median CPU seconds (user + system: steadier than wall time on
a shared machine), median wall seconds, and this copy's CPU time over the
reference's; the two copies' outputs must be byte-identical, or it fails.
``--files QRELS,RUN`` times those files instead (bench.py's 10k TREC run, say),
with bench.py's floor (the two files' lines read and split) in the same rounds.
``--stdin`` pipes the run on standard input (read once, so not reduced while
read: the path of ``--unjudged`` too); ``--options`` adds rag_eval options.
"""

import argparse
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (ids, progress, warm, the measuring wrapper)
import bench_deep  # noqa: E402  (the wrapper with CPU time)

GENERATOR_VERSION = 1


def generate(queries, docs, seed, paths):
    rng = random.Random(seed)
    with open(paths["qrels"], "w") as qrels, open(paths["msmarco"], "w") as msmarco, \
            open(paths["jsonl"], "w") as jsonl:
        for qid in rng.sample(range(1, 10**7), queries):
            ranking = [str(pid) for pid in rng.sample(range(10**7), docs)]
            judged = {ranking[min(int(rng.expovariate(1 / 8)), docs - 1)] if rng.random() < 0.7
                      else str(rng.randrange(10**7)) for _ in range(rng.randint(1, 6))}
            qrels.write("".join(f"{qid} 0 {docid} {rng.choice((0, 1, 1, 2, 3))}\n" for docid in sorted(judged)))
            msmarco.write("".join(f"{qid}\t{pid}\t{rank}\n" for rank, pid in enumerate(ranking, 1)))
            jsonl.write("".join(f'{{"query_id": "{qid}", "doc_id": "{pid}"}}\n' for pid in ranking))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", required=True, help="another rag_eval.py to compare with")
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--k", default="10,1000", help="comma-separated: one workload per value")
    parser.add_argument("--formats", type=lambda text: text.split(","), default=["msmarco", "jsonl"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "rag_eval_bench"))
    parser.add_argument("--rag-eval", default=bench.DEFAULT_RAG_EVAL)
    parser.add_argument("--files", help="QRELS,RUN: time these instead of the generated runs, beside the floor")
    parser.add_argument("--stdin", action="store_true", help="pipe the run on standard input")
    parser.add_argument("--options", default="", help="more rag_eval options, one string (\"--doc-id-sep '#'\")")
    args = parser.parse_args(argv)
    stem = os.path.join(args.workdir, f"rows_{args.queries}x{args.docs}_seed{args.seed}_v{GENERATOR_VERSION}")
    paths = {"qrels": stem + ".qrels", "msmarco": stem + ".run.tsv", "jsonl": stem + ".run.jsonl"}
    os.makedirs(args.workdir, exist_ok=True)
    if args.files:
        paths = dict(zip(("qrels", "given"), args.files.split(",")))
        args.formats = ["given"]
    elif not all(map(os.path.exists, paths.values())):
        bench.progress(f"generating {args.queries:,} x {args.docs:,}")
        generate(args.queries, args.docs, args.seed, paths)
    copies = {"floor": None} if args.files else {}
    for label, source in (("this", args.rag_eval), ("reference", args.reference)):
        folder = os.path.join(args.workdir, f"rows_{label}")
        os.makedirs(folder, exist_ok=True)
        shutil.copyfile(source, os.path.join(folder, "rag_eval.py"))  # the file may be edited while this runs
        copies[label] = folder
    env = dict(os.environ, PYTHONPYCACHEPREFIX=os.path.join(args.workdir, "pycache"))
    for path in paths.values():
        bench.warm(path)
    cases = [(fmt, k) for fmt in args.formats for k in args.k.split(",")]
    results = {(case, label): [] for case in cases for label in copies}
    outputs = {}
    for attempt in range(args.repeat + 1):  # the first round is untimed: bytecode caches, page cache
        for (fmt, k) in cases:
            for label, folder in copies.items():
                out = os.path.join(args.workdir, f"rows_out_{label}.txt")
                command = [sys.executable, "-m", "rag_eval", paths["qrels"], "-" if args.stdin else paths[fmt],
                           "--k", k, "--digits", "17", *shlex.split(args.options)]
                if args.stdin:  # the shell execs Python: the CPU time is rag_eval's alone
                    command = ["sh", "-c", f'exec "$@" < {shlex.quote(paths[fmt])}', "sh", *command]
                if folder is None:
                    command = [sys.executable, "-c", bench.FLOOR, paths["qrels"], paths[fmt]]
                result = bench.measure(command, out, dict(env, PYTHONPATH=folder or ""), bench_deep.WRAPPER)
                if result["rc"] not in (0, 1):
                    raise SystemExit(f"{label} {fmt} k={k} failed (exit {result['rc']}): {result['stderr'][-2000:]}")
                with open(out, "rb") as f:
                    text = f.read()
                if folder is not None and outputs.setdefault((fmt, k), text) != text:
                    raise SystemExit(f"{label} {fmt} k={k}: output differs from the other copy's or an earlier run's")
                if attempt:
                    results[(fmt, k), label].append(result)
    shape = args.files if args.files else f"{args.queries:,} queries x {args.docs:,} documents"
    print(f"{shape}, medians of {args.repeat}; {bench.machine()}")
    floor = " | floor CPU s | this / floor | reference / floor" if args.files else ""
    print(f"| run | k | this CPU s | reference CPU s | ratio | this wall s | reference wall s{floor} |")
    print("|---|---|---|---|---|---|---|" + "---|" * floor.count("|"))
    for fmt, k in cases:
        cpu = {label: statistics.median(r["cpu"] for r in results[(fmt, k), label]) for label in copies}
        wall = {label: statistics.median(r["wall"] for r in results[(fmt, k), label]) for label in copies}
        row = (f"| {fmt} | {k} | {cpu['this']:.2f} | {cpu['reference']:.2f} | {cpu['this'] / cpu['reference']:.2f} | "
               f"{wall['this']:.2f} | {wall['reference']:.2f}")
        if args.files:
            row += f" | {cpu['floor']:.2f} | {cpu['this'] / cpu['floor']:.2f} | {cpu['reference'] / cpu['floor']:.2f}"
        print(row + " |")
    print("outputs byte-identical between the two copies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
