"""Deep cutoffs: rag_eval at k = 10,100,1000 against trec_eval and pytrec_eval, time and peak memory.

    python3 tools/bench/bench_deep.py [--queries 7000] [--docs 1000] [--judged 20] [--formats trec,json,jsonl]
                                [--repeat 3] [--trec-eval /path/to/trec_eval] [--python /venv/bin/python]
                                [--workdir /tmp/rag_eval_bench] [--markdown]

Standard library only.  First-stage retrieval is judged at depth (recall@1000
on MS MARCO dev: about 7,000 queries x 1,000 documents), so this workload is
that shape: seeded TREC qrels with ``--judged`` documents per query (about
half of them retrieved, spread over the ranking; grades 0-3) and the same run
as TREC, JSON (``{qid: {docid: score}}``) and JSONL, with tied scores.

Every tool computes the same six measures at the same three cutoffs:

- rag_eval: ``--k 10,100,1000 --measures recall,success,mrr,ndcg,precision,ap
  --gain linear --digits 17`` (linear gain is trec_eval's ndcg_cut);
- trec_eval (``--trec-eval PATH``; no Debian package has it: build it from
  its source with ``-O2``):
  ``-m recall.10,100,1000 -m success.10,100,1000 -m recip_rank
  -m ndcg_cut.10,100,1000 -m P.10,100,1000 -m map_cut.10,100,1000``
  (recip_rank has no cutoff: ours at k = 1000 equals it when the first
  relevant document is within 1,000, which the comparison checks);
- pytrec_eval (under ``--python``, e.g. a venv with pytrec-eval-terrier): the
  TREC files parsed in Python, then ``RelevanceEvaluator`` with those measures.

Each command runs in its own process under bench.py's measuring wrapper (wall
time, peak RSS from ``getrusage(RUSAGE_CHILDREN)``), interleaved, ``--repeat``
times; the table shows medians and the ratios to the reference measured in
the same invocation (trec_eval when given, else pytrec_eval).  Every mean
rag_eval prints is compared with each peer's: the report says how many are
equal (to trec_eval's 4 printed decimals; to pytrec_eval's within 1e-9, as
the tools sum in different orders) or fails.  With trec_eval, one more
(untimed) run of each with per-query output compares every query's value at
every cutoff (``trec_eval -q`` against ``--per-query``), to its 4 decimals.
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (the measuring wrapper, ids and machine description)

CUTOFFS = (10, 100, 1000)
MEASURES = ("recall", "success", "mrr", "ndcg", "precision", "ap")
GENERATOR_VERSION = 1
# rag_eval's name -> trec_eval's, per cutoff; mrr is recip_rank (no cutoff), compared at k = 1000.
# How close a peer's mean must be: trec_eval prints 4 decimals (so half a unit of the last), pytrec_eval
# returns floats (its C sum over queries and our fsum may differ in the last bits).
PRINTED = {"trec_eval": 0.5e-4 + 1e-12, "pytrec_eval": 1e-9}
TREC_NAMES = {"recall": "recall_{k}", "success": "success_{k}", "ndcg": "ndcg_cut_{k}", "precision": "P_{k}",
              "ap": "map_cut_{k}"}

PYTREC = r"""
import json, sys
import pytrec_eval
qrels_path, run_path = sys.argv[1], sys.argv[2]
qrels, run = {}, {}
with open(qrels_path) as f:
    for line in f:
        q, _, d, g = line.split()
        qrels.setdefault(q, {})[d] = int(g)
with open(run_path) as f:
    for line in f:
        fields = line.split()
        run.setdefault(fields[0], {})[fields[2]] = float(fields[4])
cut = "10,100,1000"
evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"recall." + cut, "success." + cut, "recip_rank",
                                                   "ndcg_cut." + cut, "P." + cut, "map_cut." + cut})
per_query = evaluator.evaluate(run)
names = sorted(next(iter(per_query.values())))
print(json.dumps({name: sum(q[name] for q in per_query.values()) / len(per_query) for name in names}))
"""


# bench.py's wrapper, plus the CPU seconds of the child (user + system): on a shared machine wall time
# includes waiting for a CPU, so both are shown.
WRAPPER = bench.WRAPPER.replace(
    'print(json.dumps({"rc": rc, "wall": wall, "peak": peak}))',
    'usage = resource.getrusage(resource.RUSAGE_CHILDREN) if resource is not None else None\n'
    'cpu = usage.ru_utime + usage.ru_stime if usage is not None else None\n'
    'print(json.dumps({"rc": rc, "wall": wall, "peak": peak, "cpu": cpu}))')
assert "cpu" in WRAPPER


def measure(argv, out_path, env):
    """Run argv under bench.py's wrapper with CPU time added: {"rc", "wall", "cpu", "peak", "stderr"}."""
    return bench.measure(argv, out_path, env, WRAPPER)


def generate(queries, docs, judged_per_query, seed, paths):
    """The qrels and the run in each format of ``paths``; scores in thousandths, ties about 1 in 6."""
    rng = random.Random(seed)
    files = {what: open(path + ".tmp", "w", encoding="utf-8", newline="\n", buffering=1 << 20)
             for what, path in paths.items()}
    try:
        qids = [str(q) for q in rng.sample(range(100_000, 10_000_000), queries)]
        if "json" in files:
            files["json"].write("{")
        for number, qid in enumerate(qids):
            seen, ranking = set(), []
            while len(ranking) < docs:
                docid = bench.doc_id(rng)
                if docid not in seen:
                    seen.add(docid)
                    ranking.append(docid)
            milli = rng.randrange(20_000, 40_000) + 20 * docs
            scores = []
            for _ in range(docs):
                scores.append(f"{milli // 1000}.{milli % 1000:03d}")
                milli = max(milli - rng.choice(bench.SCORE_STEPS), 0)
            judged = {}
            while len(judged) < judged_per_query:  # about half retrieved, anywhere in the ranking; half not
                docid = ranking[rng.randrange(docs)] if rng.random() < 0.5 else bench.doc_id(rng)
                judged[docid] = rng.choices((0, 1, 2, 3), weights=(4, 3, 2, 1))[0]
            if not any(judged.values()):
                judged[next(iter(judged))] = 1
            if "qrels" in files:
                files["qrels"].write("".join(f"{qid} 0 {docid} {grade}\n" for docid, grade in judged.items()))
            if "trec" in files:
                files["trec"].write("".join(f"{qid} Q0 {docid} {rank} {score} deep\n"
                                            for rank, (docid, score) in enumerate(zip(ranking, scores), 1)))
            if "jsonl" in files:
                files["jsonl"].write("".join(
                    f'{{"query_id": {json.dumps(qid)}, "doc_id": {json.dumps(docid)}, "score": {score}}}\n'
                    for docid, score in zip(ranking, scores)))
            if "json" in files:
                files["json"].write(("\n" if number == 0 else ",\n") + json.dumps(qid) + ": {" + ", ".join(
                    f"{json.dumps(docid)}: {score}" for docid, score in zip(ranking, scores)) + "}")
            if number % 1000 == 999:
                bench.progress(f"  generated {number + 1:,} of {queries:,} queries")
        if "json" in files:
            files["json"].write("\n}\n")
    finally:
        for f in files.values():
            f.close()
    for path in paths.values():
        os.replace(path + ".tmp", path)


def workload(args):
    stem = os.path.join(args.workdir, f"deep_{args.queries}x{args.docs}_j{args.judged}_seed{args.seed}_v{GENERATOR_VERSION}")
    paths = {"qrels": stem + ".qrels", **{fmt: f"{stem}.run.{fmt}" for fmt in args.formats}}
    missing = {what: path for what, path in paths.items() if not os.path.exists(path)}
    if missing:
        bench.progress(f"generating {args.queries:,} x {args.docs:,} ({', '.join(sorted(missing))})")
        generate(args.queries, args.docs, args.judged, args.seed, missing)
    return paths


def commands(args, paths):
    """(label, format, argv) of every timed command."""
    k = ",".join(map(str, CUTOFFS))
    options = ["--k", k, "--measures", ",".join(MEASURES), "--gain", "linear", "--digits", "17"]
    rows = [("floor (line split)", "trec", [sys.executable, "-c", bench.FLOOR, paths["qrels"], paths["trec"]])]
    rows += [(f"rag_eval {fmt}", fmt, [sys.executable, args.snapshot, paths["qrels"], paths[fmt], *options])
             for fmt in args.formats]
    if args.trec_eval:
        measures = [f"recall.{k}", f"success.{k}", "recip_rank", f"ndcg_cut.{k}", f"P.{k}", f"map_cut.{k}"]
        rows.append(("trec_eval", "trec", [args.trec_eval, *[x for m in measures for x in ("-m", m)],
                                           paths["qrels"], paths["trec"]]))
    if args.python and subprocess.run([args.python, "-c", "import pytrec_eval"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL).returncode == 0:
        rows.append(("pytrec_eval", "trec", [args.python, "-c", PYTREC, paths["qrels"], paths["trec"]]))
    else:
        bench.progress("pytrec_eval: not importable by --python, skipped")
    return rows


def reference_means(label, text):
    """{rag_eval metric name: mean} from trec_eval's or pytrec_eval's output."""
    if label == "trec_eval":
        values = {}
        for line in text.splitlines():
            name, query, value = line.split()
            if query == "all":
                values[name] = float(value)
    else:
        values = json.loads(text)
    means = {}
    for name in MEASURES:
        for k in CUTOFFS:
            key = "recip_rank" if name == "mrr" else TREC_NAMES[name].format(k=k)
            if key in values and (name != "mrr" or k == max(CUTOFFS)):
                means[f"{name}@{k}"] = values[key]
    return means


def per_query_agreement(args, paths, env):
    """Every query's value, rag_eval (TREC run) against ``trec_eval -q``: a line for the report."""
    k = ",".join(map(str, CUTOFFS))
    measures = [f"recall.{k}", f"success.{k}", "recip_rank", f"ndcg_cut.{k}", f"P.{k}", f"map_cut.{k}"]
    trec = subprocess.run([args.trec_eval, "-q", *[x for m in measures for x in ("-m", m)], paths["qrels"],
                           paths["trec"]], stdout=subprocess.PIPE, check=True, env=env).stdout.decode()
    ours = subprocess.run([sys.executable, args.snapshot, paths["qrels"], paths["trec"], "--k", k, "--measures",
                           ",".join(MEASURES), "--gain", "linear", "--digits", "17", "--per-query"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True, env=env).stdout
    per_query = json.loads(ours)["per_query"]
    names = {TREC_NAMES[name].format(k=cutoff): f"{name}@{cutoff}" for name in TREC_NAMES for cutoff in CUTOFFS}
    names["recip_rank"] = f"mrr@{max(CUTOFFS)}"
    compared, wrong = 0, []
    for line in trec.splitlines():
        name, qid, value = line.split()
        if qid == "all" or name not in names:
            continue
        compared += 1
        if qid not in per_query or abs(per_query[qid][names[name]] - float(value)) > PRINTED["trec_eval"]:
            wrong.append(f"{qid} {name}")
    if wrong:
        raise SystemExit(f"per query: rag_eval differs from trec_eval -q on {len(wrong)} values (first: {wrong[0]})")
    return f"per query: all {compared:,} values of trec_eval -q equal rag_eval's (to its 4 decimals)"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=7000)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--judged", type=int, default=20, help="judged documents per query (default 20)")
    parser.add_argument("--formats", type=lambda text: text.split(","), default=["trec", "json", "jsonl"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "rag_eval_bench"))
    parser.add_argument("--trec-eval", metavar="PATH", help="a trec_eval binary (the reference when given)")
    parser.add_argument("--python", default=sys.executable, help="interpreter that can import pytrec_eval")
    parser.add_argument("--rag-eval", default=bench.DEFAULT_RAG_EVAL)
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = parser.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    args.snapshot = os.path.join(args.workdir, "rag_eval_deep_snapshot.py")
    shutil.copyfile(args.rag_eval, args.snapshot)  # the file may be edited while this runs
    paths = workload(args)
    rows = commands(args, paths)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    results = {label: [] for label, _, _ in rows}
    outputs = {}
    for path in paths.values():
        bench.warm(path)
    for attempt in range(args.repeat):
        for label, fmt, command in rows:
            out = os.path.join(args.workdir, f"deep_out_{label.replace(' ', '_')}.txt")
            result = measure(command, out, env)
            if result["rc"] != 0:
                raise SystemExit(f"{label} failed (exit {result['rc']}): {result['stderr'][-2000:]}")
            with open(out) as f:
                text = f.read()
            if outputs.setdefault(label, text) != text:
                raise SystemExit(f"{label}: output differs between repeats")
            results[label].append(result)
            bench.progress(f"  {label}: {result['wall']:.2f} s wall, {result['cpu']:.2f} s CPU, "
                           f"{result['peak'] / 2**20:.0f} MB")
    reference = "trec_eval" if "trec_eval" in results else "pytrec_eval" if "pytrec_eval" in results else None
    checked = []
    for peer in ("trec_eval", "pytrec_eval"):
        if peer not in outputs:
            continue
        expected = reference_means(peer, outputs[peer])
        tolerance = PRINTED[peer]
        for fmt in args.formats:
            means = json.loads(outputs[f"rag_eval {fmt}"])["mean"]
            wrong = [name for name, value in expected.items() if abs(means[name] - value) > tolerance]
            if wrong:
                raise SystemExit(f"rag_eval {fmt} differs from {peer} on {', '.join(wrong)}")
            checked.append(f"rag_eval {fmt}: {len(expected)} means equal to {peer}'s (within {tolerance:g})")
    if args.trec_eval and "trec" in args.formats:
        checked.append(per_query_agreement(args, paths, env))
    walls = {label: statistics.median(r["wall"] for r in runs) for label, runs in results.items()}
    cpus = {label: statistics.median(r["cpu"] for r in runs) for label, runs in results.items()}
    peaks = {label: statistics.median(r["peak"] for r in runs) / 2**20 for label, runs in results.items()}
    lines = [f"{args.queries:,} queries x {args.docs:,} documents ({args.queries * args.docs:,} lines), "
             f"{args.judged} judged per query; k = 10,100,1000; six measures; median of {args.repeat}; {bench.machine()}",
             ""]
    header = ["tool", "input", "wall s", "CPU s", "peak MB"] + (
        [f"wall / {reference}", f"CPU / {reference}", f"peak / {reference}"] if reference else [])
    table = [header]
    for label, fmt, _ in rows:
        row = [label, fmt, f"{walls[label]:.2f}", f"{cpus[label]:.2f}", f"{peaks[label]:.0f}"]
        if reference:
            row += [f"{walls[label] / walls[reference]:.2f}", f"{cpus[label] / cpus[reference]:.2f}",
                    f"{peaks[label] / peaks[reference]:.2f}"]
        table.append(row)
    if args.markdown:
        lines += ["| " + " | ".join(row) + " |" for row in table[:1]] + ["|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in table[1:]]
    else:
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in table]
    print("\n".join(lines + [""] + checked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
