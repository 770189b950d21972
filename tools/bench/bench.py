"""Time rag_eval as a whole process against a floor and the peers that are installed.

    python3 tools/bench/bench.py [--sizes small,1k,100x1000,3000x100] [--formats trec,json,jsonl] [--repeat 3]
                           [--workdir /tmp/rag_eval_bench] [--seed 0] [--k 10]
                           [--python /path/to/venv/bin/python] [--tools rag_eval,floor,...]

Standard library only.  For each workload (queries x documents per query) it
generates, once and cached in ``--workdir``, seeded TREC qrels and the same run
written as TREC, JSON (scored: ``{qid: {docid: score}}``) and JSONL
(``{"query_id", "doc_id", "score"}``), with realistic ids
(``msmarco_passage_12_345678901``, ``wiki/page-48.md#7``) and tied scores.

Every timed command runs in its own process, started by a tiny wrapper that
times it and reads its peak resident memory from the operating system
(``getrusage(RUSAGE_CHILDREN).ru_maxrss``).  Runs of the tools are interleaved
(tool A, tool B, ..., then again), and the table shows the median wall time and
the median peak memory of ``--repeat`` runs, with ratios to the floor measured
in the same invocation:

- floor: plain Python reading the files line by line and splitting each line
  (``for line in open(path, 'rb'): line.split()``), over the qrels and the run;
  the targets are ratios to it;
- floor_text: the same with the lines read as text (``open(path)``), as most
  Python code reads a file: decoding makes it a little slower, so it is shown
  but is not the target's yardstick;
- json: for JSON runs, ``json.load`` of the run alone; for JSONL runs,
  ``json.loads`` of each line alone (the parsing no JSON reader can skip);
- rag_eval: ``python rag_eval.py QRELS RUN --k K --digits 17`` (Python
  compiles a script at every start and never caches it: about 22 ms here);
- rag_eval_module: ``python -m rag_eval ...`` with the bytecode cached, which
  is what the ``rag-eval`` command of an installed package costs;
- peers, each skipped with a note when absent: pytrec_eval (TREC files parsed
  in Python, then ``RelevanceEvaluator``), ir_measures (its Python API: its own
  TREC readers, dicts for JSON), ranx (``Qrels``/``Run`` ``from_file`` or
  ``from_dict``), and a ``trec_eval`` binary on PATH (TREC only).  Peers run
  under ``--python`` (default: this interpreter), so they can live in a venv.

rag_eval's stdout must be byte-identical across repeats, across the ways of
starting it, and across the TREC, JSON and JSONL forms of one workload; the
report says so or fails.  It also reports ``python -X importtime -c "import
rag_eval"`` (the module's cumulative import time, median) and the machine.

Sizes: ``small`` (100 queries x 100 docs, 10,000 lines), ``1k`` (1,000 x 100,
100,000 lines), ``10k`` (10,000 x 1,000, 10,000,000 lines, about 520 MB as
TREC: opt-in, it takes minutes, and as JSON it takes gigabytes), or ``QxD``.
The default adds 100x1000 and 3000x100: two shapes and two sizes of one shape.
A tiny ``start-up`` workload (5 x 12) is always timed first: the fixed cost of
one process, which the scaling table subtracts to give time per line.  Before
any timing, every command runs once untimed on it, so bytecode caches are
filled (under ``--workdir``, never beside rag_eval.py) and files are read once
so that every tool finds them in the page cache.  rag_eval.py is copied at the
start and the copy is timed throughout, as the file may be edited meanwhile.

The machine is shared and virtual: when medians and minimums disagree, rerun
with a larger ``--repeat``.

Targets checked: a 10M-line TREC run in at most 2x the floor's wall time and
300 MB peak; a 100,000-line run in at most 2x the floor; the import under 15 ms;
linear scaling: the time beyond start-up of every run of 100,000 lines or more
fits ``a * lines + b * queries`` within 15% (a per-line and a per-query cost,
fitted by least squares on relative errors; with one shape only, b is 0).
"""

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_RAG_EVAL = os.path.join(os.path.dirname(os.path.dirname(HERE)), "rag_eval.py")
GENERATOR_VERSION = 2  # bump when the generated data changes, so cached files are not reused
SIZES = {"small": (100, 100), "1k": (1_000, 100), "10k": (10_000, 1_000)}
# Two shapes (100 and 1,000 documents per query) and two sizes of one shape: enough to test the linear cost model.
DEFAULT_SIZES = "small,1k,100x1000,3000x100"
FORMATS = ("trec", "json", "jsonl")
TOOLS = ("floor", "floor_text", "json", "rag_eval", "rag_eval_module", "pytrec_eval", "ir_measures",
         "ranx", "trec_eval")
RAG_EVAL_FORMS = ("rag_eval", "rag_eval_module")
PEERS = ("pytrec_eval", "ir_measures", "ranx", "trec_eval")

# Targets of the issue.
TARGET_RATIO = 2.0  # rag_eval wall time / floor wall time
TARGET_PEAK_MB = 300.0  # the 10M-line TREC run
TARGET_IMPORT_MS = 15.0
# Linear scaling: time beyond start-up = a * lines + b * queries must fit every run of >= 100,000 lines this well.
LINEAR_TOLERANCE = 0.15
STARTUP = ("start-up", 5, 12)  # a tiny workload, timed first: the fixed cost of a process, subtracted per line

# --------------------------------------------------------------------------- the measuring wrapper

# Runs argv[2:] with stdout to the file argv[1]; prints one JSON line: exit code,
# wall seconds, and the child's peak RSS as the OS counted it.  Started with -S
# so that its own footprint (which the kernel folds into the child's peak at
# exec) stays below any Python child's.
WRAPPER = r"""
import json, subprocess, sys, time
try:
    import resource
except ImportError:
    resource = None
with open(sys.argv[1], "wb") as out:
    start = time.perf_counter()
    rc = subprocess.call(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=out)
    wall = time.perf_counter() - start
peak = None
if resource is not None:
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    peak = peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere
print(json.dumps({"rc": rc, "wall": wall, "peak": peak}))
"""

FLOOR = """import sys
for path in sys.argv[1:]:
    for line in open(path, 'rb'):
        line.split()
"""

# The same in text mode, as most Python code reads a file: decoding costs a little more.
FLOOR_TEXT = """import sys
for path in sys.argv[1:]:
    for line in open(path, encoding='utf-8'):
        line.split()
"""

JSON_LOAD = """import json, sys
with open(sys.argv[1], 'rb') as f:
    json.load(f)
"""

JSONL_LOADS = """import json, sys
for line in open(sys.argv[1], 'rb'):
    json.loads(line)
"""

# Peers: argv = QRELS RUN FORMAT K.  Each prints its means as one JSON line.
PEER_READERS = r"""
import json, sys
QRELS, RUN, FMT, K = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def read_qrels(path):
    qrels = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 4:
                qrels.setdefault(fields[0], {})[fields[2]] = int(fields[3])
    return qrels

def read_run(path, fmt):
    run = {}
    if fmt == "trec":
        with open(path) as f:
            for line in f:
                fields = line.split()
                run.setdefault(fields[0], {})[fields[2]] = float(fields[4])
    elif fmt == "json":
        with open(path, "rb") as f:
            run = json.load(f)
    else:
        with open(path, "rb") as f:
            for line in f:
                row = json.loads(line)
                run.setdefault(row["query_id"], {})[row["doc_id"]] = float(row["score"])
    return run

def report(means):
    print(json.dumps({str(name): value for name, value in means.items()}, sort_keys=True))
"""

PEER_SCRIPTS = {
    "pytrec_eval": PEER_READERS + r"""
import pytrec_eval
evaluator = pytrec_eval.RelevanceEvaluator(read_qrels(QRELS), {f"ndcg_cut.{K}", f"recall.{K}", f"P.{K}", "recip_rank"})
per_query = evaluator.evaluate(read_run(RUN, FMT))
names = [f"ndcg_cut_{K}", f"recall_{K}", f"P_{K}", "recip_rank"]
report({name: sum(q[name] for q in per_query.values()) / len(per_query) for name in names})
""",
    "ir_measures": PEER_READERS + r"""
import ir_measures
from ir_measures import nDCG, R, P, RR
if FMT == "trec":
    qrels, run = ir_measures.read_trec_qrels(QRELS), ir_measures.read_trec_run(RUN)
else:
    qrels, run = read_qrels(QRELS), read_run(RUN, FMT)
report(ir_measures.calc_aggregate([nDCG @ K, R @ K, P @ K, RR @ K], qrels, run))
""",
    "ranx": PEER_READERS + r"""
from ranx import Qrels, Run, evaluate
if FMT == "trec":
    qrels, run = Qrels.from_file(QRELS, kind="trec"), Run.from_file(RUN, kind="trec")
else:
    qrels, run = Qrels.from_dict(read_qrels(QRELS)), Run.from_dict(read_run(RUN, FMT))
# make_comparable: ranx refuses a run that lacks a judged query (the workloads have some) unless told to score it 0.
report(evaluate(qrels, run, [f"ndcg@{K}", f"recall@{K}", f"precision@{K}", f"mrr@{K}"], make_comparable=True))
""",
}

# --------------------------------------------------------------------------- workloads


def parse_size(text):
    """``small``, ``1k``, ``10k`` or ``QxD``: (name, queries, docs per query)."""
    if text in SIZES:
        return (text, *SIZES[text])
    queries, sep, docs = text.lower().partition("x")
    if sep and queries.isdigit() and docs.isdigit() and int(queries) > 0 and int(docs) > 0:
        return (text, int(queries), int(docs))
    raise argparse.ArgumentTypeError(f"unknown size {text!r}: expected one of {', '.join(SIZES)} or QxD (e.g. 500x200)")


def doc_id(rng):
    """An id of one of the two realistic patterns: MS MARCO v2 passages, or chunks of wiki pages."""
    if rng.random() < 0.5:
        return f"msmarco_passage_{rng.randrange(100):02d}_{rng.randrange(10**9):09d}"
    return f"wiki/page-{rng.randrange(1, 100_000)}.md#{rng.randrange(40)}"


# Steps between consecutive scores, in thousandths: a zero step is a tie (about 1 in 6).
SCORE_STEPS = (0, 0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 1)


def generate(queries, docs, seed, paths):
    """Write the qrels and the run in every format of ``paths`` (format -> path; "qrels" too).

    The random stream does not depend on which files are written, so any subset
    regenerated later is the same data.  Scores are integers in thousandths,
    written as decimal text, so every format carries exactly the same floats.
    """
    rng = random.Random(seed)
    tmp = {what: path + ".tmp" for what, path in paths.items()}
    files = {what: open(path, "w", encoding="utf-8", newline="\n", buffering=1 << 20) for what, path in tmp.items()}
    try:
        qids = [str(q) for q in rng.sample(range(100_000, 10_000_000), queries)]
        skipped = {qid for qid in qids if rng.random() < 0.02}  # judged, absent from the run
        first_json = True
        if "json" in files:
            files["json"].write("{")
        for number, qid in enumerate(qids):
            seen = set()
            ranking = []
            while len(ranking) < docs:
                docid = doc_id(rng)
                if docid not in seen:
                    seen.add(docid)
                    ranking.append(docid)
            milli = rng.randrange(20_000, 40_000) + 20 * docs  # steps average 12: scores stay positive
            scores = []
            for _ in range(docs):
                scores.append(f"{milli // 1000}.{milli % 1000:03d}")
                milli = max(milli - rng.choice(SCORE_STEPS), 0)
            # Judgments: some retrieved (mostly near the top), some never retrieved; grades 0-3.
            judged = {}
            for _ in range(rng.randint(1, 6)):
                if rng.random() < 0.7:
                    docid = ranking[min(int(rng.expovariate(1 / 8)), docs - 1)]
                else:
                    docid = doc_id(rng)
                judged[docid] = rng.choices((0, 1, 2, 3), weights=(4, 3, 2, 1))[0]
            if "qrels" in files:
                files["qrels"].write("".join(f"{qid} 0 {docid} {grade}\n" for docid, grade in judged.items()))
            if qid in skipped:
                continue
            if "trec" in files:
                files["trec"].write("".join(
                    f"{qid} Q0 {docid} {rank} {score} bench\n"
                    for rank, (docid, score) in enumerate(zip(ranking, scores), 1)))
            if "jsonl" in files:
                files["jsonl"].write("".join(
                    f'{{"query_id": {json.dumps(qid)}, "doc_id": {json.dumps(docid)}, "score": {score}}}\n'
                    for docid, score in zip(ranking, scores)))
            if "json" in files:
                files["json"].write(("\n" if first_json else ",\n") + json.dumps(qid) + ": {" + ", ".join(
                    f"{json.dumps(docid)}: {score}" for docid, score in zip(ranking, scores)) + "}")
                first_json = False
            if number % 1000 == 999:
                progress(f"  generated {number + 1:,} of {queries:,} queries")
        if "json" in files:
            files["json"].write("\n}\n")
    finally:
        for f in files.values():
            f.close()
    for what, path in paths.items():
        os.replace(tmp[what], path)


def workload_files(workdir, name, queries, docs, seed, formats):
    """Paths of the qrels and of the run in each format; generate what is missing."""
    stem = os.path.join(workdir, f"{name}_{queries}x{docs}_seed{seed}_v{GENERATOR_VERSION}")
    paths = {"qrels": stem + ".qrels"}
    paths.update({fmt: f"{stem}.run.{fmt}" for fmt in formats})
    missing = {what: path for what, path in paths.items() if not os.path.exists(path)}
    if missing:
        progress(f"generating {name} ({queries:,} x {docs:,}): {', '.join(sorted(missing))}")
        start = time.perf_counter()
        generate(queries, docs, seed, missing)
        progress(f"  done in {time.perf_counter() - start:.1f} s")
    return paths


def warm(path):
    """Read a file once, so every tool finds it in the page cache."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


# --------------------------------------------------------------------------- running


def progress(message):
    print(message, file=sys.stderr, flush=True)


def measure(argv, out_path, env, wrapper=None):
    """Run argv under the wrapper (``WRAPPER`` unless given), in the folder of ``out_path``:
    {"rc", "wall", "peak", "stderr"} and whatever else the wrapper prints."""
    proc = subprocess.run([sys.executable, "-S", "-c", wrapper or WRAPPER, out_path, *argv], cwd=os.path.dirname(out_path),
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"measuring wrapper failed: {proc.stderr.decode(errors='replace')}")
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    result["stderr"] = proc.stderr.decode(errors="replace")
    return result


def available_peers(python, env, wanted):
    """{peer: None if usable else the reason it is skipped}."""
    found = {}
    for peer in wanted:
        if peer == "trec_eval":
            found[peer] = None if shutil.which("trec_eval") else "no trec_eval binary on PATH"
            continue
        proc = subprocess.run([python, "-c", f"import {peer}"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        found[peer] = None if proc.returncode == 0 else f"not importable by {python}"
    return found


def commands(tool, paths, fmt, args):
    """argv of one tool on one workload and format, or None when it does not apply."""
    qrels, run = paths["qrels"], paths[fmt]
    if tool == "floor":
        return [sys.executable, "-c", FLOOR, qrels, run]
    if tool == "floor_text":
        return [sys.executable, "-c", FLOOR_TEXT, qrels, run]
    if tool == "json":
        if fmt == "json":
            return [sys.executable, "-c", JSON_LOAD, run]
        if fmt == "jsonl":
            return [sys.executable, "-c", JSONL_LOADS, run]
        return None
    options = ["--k", str(args.k), "--digits", "17"]
    if tool == "rag_eval":
        return [sys.executable, args.snapshot, qrels, run, *options]
    if tool == "rag_eval_module":  # run in the snapshot's folder, so -m finds it there
        return [sys.executable, "-m", "rag_eval", qrels, run, *options]
    if tool == "trec_eval":
        if fmt != "trec":
            return None
        k = args.k
        return [shutil.which("trec_eval"), "-m", f"ndcg_cut.{k}", "-m", f"recall.{k}", "-m", f"P.{k}",
                "-m", "recip_rank", qrels, run]
    return [args.python, "-c", PEER_SCRIPTS[tool], qrels, run, fmt, str(args.k)]


TOOL_LABELS = {"floor": "floor (line split)", "floor_text": "floor, text mode", "rag_eval": "rag_eval (script)",
               "rag_eval_module": "rag_eval (-m)"}


def tool_label(tool, fmt):
    if tool == "json":
        return "json.load" if fmt == "json" else "json.loads per line"
    return TOOL_LABELS.get(tool, tool)


def import_time(args, env, runs):
    """Median and minimum of rag_eval's cumulative import time (microseconds), from -X importtime."""
    directory, module = os.path.split(args.snapshot)
    module = os.path.splitext(module)[0]
    values = []
    for attempt in range(runs + 1):  # the first one may compile the bytecode: not counted
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], cwd=directory,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        cumulative = None
        for line in proc.stderr.decode(errors="replace").splitlines():
            parts = line.split("|")
            if line.startswith("import time:") and len(parts) == 3 and parts[2].strip() == module:
                cumulative = int(parts[1])
        if proc.returncode != 0 or cumulative is None:
            raise RuntimeError(f"cannot read the import time of {module}: {proc.stderr.decode(errors='replace')[-500:]}")
        if attempt:
            values.append(cumulative)
    return statistics.median(values), min(values)


# --------------------------------------------------------------------------- report


def machine():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        model = platform.processor() or "unknown"
    memory = ""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    memory = f", {int(line.split()[1]) / 2**20:.1f} GiB memory"
    except OSError:
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{cpus} CPUs usable ({os.cpu_count()} online), {model}{memory}; "
            f"{platform.system()} {platform.release()}; Python {platform.python_version()} ({sys.executable})")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def provenance(path, snapshot):
    text = f"{path}, sha256 {sha256(snapshot)[:12]}"
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=os.path.dirname(path), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", os.path.basename(path)], cwd=os.path.dirname(path),
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True).stdout.strip()
        text += f", git {head}{' + uncommitted changes' if dirty else ''}"
    except (OSError, subprocess.CalledProcessError):
        pass
    return text


def fmt_seconds(value):
    return f"{value:.3f}" if value < 100 else f"{value:.1f}"


def fmt_ratio(value):
    return "-" if value is None else f"{value:.2f}x"


def fmt_mb(value):
    return "-" if value is None else f"{value / 1e6:.1f}"


def median_of(rows, key):
    values = [row[key] for row in rows if row[key] is not None]
    return statistics.median(values) if values else None


# --------------------------------------------------------------------------- main


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].strip(),
        epilog="Sizes: small = 100 x 100 docs (10k lines), 1k = 1,000 x 100 (100k lines), "
               "10k = 10,000 x 1,000 (10M lines, ~600 MB as TREC; opt-in, minutes), or QxD. "
               "Peers are skipped with a note when --python cannot import them.")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"comma-separated workloads (default {DEFAULT_SIZES})")
    parser.add_argument("--formats", default="trec,json,jsonl", help="comma-separated run formats (default trec,json,jsonl)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command; medians are reported (default 3)")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "rag_eval_bench"),
                        help="where generated files (cached) and outputs go (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated workloads (default 0)")
    parser.add_argument("--k", type=int, default=10, help="cutoff for every tool (default 10)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter for the peers, e.g. a venv with pytrec-eval-terrier (default: this one)")
    parser.add_argument("--rag-eval", default=DEFAULT_RAG_EVAL, help="the rag_eval.py to time (default %(default)s)")
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated subset of {','.join(TOOLS)}")
    parser.add_argument("--import-runs", type=int, default=9, help="runs of the import-time measure (default 9)")
    parser.add_argument("--json-out", metavar="FILE", help="also write every measurement as JSON to FILE")
    args = parser.parse_args(argv)

    try:
        sizes = [parse_size(s.strip()) for s in args.sizes.split(",") if s.strip()]
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    for what, chosen, known in (("format", formats, FORMATS), ("tool", tools, TOOLS)):
        bad = [c for c in chosen if c not in known]
        if bad or not chosen:
            parser.error(f"unknown {what} {', '.join(bad) or '(none)'}: choose from {', '.join(known)}")
    if args.repeat < 1 or args.k < 1 or args.import_runs < 1:
        parser.error("--repeat, --k and --import-runs must be positive")
    args.rag_eval = os.path.abspath(args.rag_eval)
    args.workdir = os.path.abspath(args.workdir)  # commands run in another folder
    if not os.path.isfile(args.rag_eval):
        parser.error(f"no such file: {args.rag_eval}")
    if shutil.which(args.python) is None and not os.path.isfile(args.python):
        parser.error(f"no such interpreter: {args.python}")

    began = time.perf_counter()
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    os.makedirs(args.workdir, exist_ok=True)
    outdir = tempfile.mkdtemp(prefix="out-", dir=args.workdir)
    # The file may be edited while this runs: time one copy, taken now, throughout.
    args.snapshot = os.path.join(outdir, "rag_eval.py")
    shutil.copyfile(args.rag_eval, args.snapshot)
    args.provenance = provenance(args.rag_eval, args.snapshot)
    env = dict(os.environ)
    # Bytecode is cached (as after an install), but under the workdir, never in the repository.
    env["PYTHONPYCACHEPREFIX"] = os.path.join(args.workdir, "pycache")
    for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONPROFILEIMPORTTIME"):
        env.pop(name, None)
    warm_up = subprocess.run([sys.executable, "-c", "import json, argparse, typing, contextlib, hashlib, gzip"],
                             stdin=subprocess.DEVNULL, env=env)  # fills the bytecode cache before any timing
    if warm_up.returncode != 0:
        parser.error(f"{sys.executable} cannot start")

    notes = []
    status = available_peers(args.python, env, [t for t in tools if t in PEERS])
    for peer, reason in status.items():
        if reason:
            notes.append(f"{peer} skipped: {reason}")
    tools = [t for t in tools if status.get(t) is None]

    # Start-up figures.
    import_median = import_min = None
    if "rag_eval" in tools:
        progress("measuring the import time")
        import_median, import_min = import_time(args, env, args.import_runs)
    bare = [measure([sys.executable, "-c", "pass"], os.path.join(outdir, "bare.out"), env) for _ in range(args.repeat)]

    # One untimed run of every command on the tiny workload: caches (bytecode, JIT) filled before timing.
    tiny = workload_files(args.workdir, *STARTUP, args.seed, formats)
    for fmt in formats:
        for tool in tools:
            argv = commands(tool, tiny, fmt, args)
            if argv is not None:
                measure(argv, os.path.join(outdir, "warmup.out"), env)

    # The timed runs.
    results = []  # one dict per (workload, format, tool)
    outputs = {}  # (workload, format) -> rag_eval stdout of the first run
    failures = []
    generation = 0.0
    sizes = [STARTUP] + [size for size in sizes if size[0] != STARTUP[0]]
    for name, queries, docs in sizes:
        start = time.perf_counter()
        paths = workload_files(args.workdir, name, queries, docs, args.seed, formats)
        generation += time.perf_counter() - start
        for fmt in formats:
            warm(paths["qrels"])
            warm(paths[fmt])
            plan = [(tool, commands(tool, paths, fmt, args)) for tool in tools]
            plan = [(tool, argv) for tool, argv in plan if argv is not None]
            runs = {tool: [] for tool, _ in plan}
            stdouts = {tool: [] for tool, _ in plan}
            for attempt in range(args.repeat):
                for tool, argv in plan:
                    progress(f"{name} {fmt} {tool} run {attempt + 1}/{args.repeat}")
                    out_path = os.path.join(outdir, f"{name}.{fmt}.{tool}.{attempt}.out")
                    run = measure(argv, out_path, env)
                    with open(out_path, "rb") as f:
                        stdouts[tool].append(f.read())
                    if run["rc"] != 0:
                        failures.append(f"{name} {fmt} {tool}: exit {run['rc']}: {run['stderr'].strip()[-400:]}")
                    runs[tool].append(run)
            for tool, _ in plan:
                if len(set(stdouts[tool])) != 1 and tool in (*RAG_EVAL_FORMS, *PEERS):
                    failures.append(f"{name} {fmt} {tool}: stdout differs between repeats")
                results.append({
                    "workload": name, "queries": queries, "docs": docs, "format": fmt, "lines": queries * docs,
                    "tool": tool, "label": tool_label(tool, fmt),
                    "wall": median_of(runs[tool], "wall"), "peak": median_of(runs[tool], "peak"),
                    "min_wall": min(r["wall"] for r in runs[tool]),
                    "walls": [r["wall"] for r in runs[tool]], "peaks": [r["peak"] for r in runs[tool]],
                    "ok": all(r["rc"] == 0 for r in runs[tool]),
                    "stdout": stdouts[tool][0].decode(errors="replace").strip(),
                })
            forms = [tool for tool in RAG_EVAL_FORMS if tool in stdouts]
            if forms:
                outputs[(name, fmt)] = stdouts[forms[0]][0]
            if len({stdouts[tool][0] for tool in forms}) > 1:
                failures.append(f"{name} {fmt}: rag_eval's output differs between the ways of starting it")

    # Ratios, measured in this invocation.
    for row in results:
        same = [r for r in results if r["workload"] == row["workload"] and r["format"] == row["format"]]
        floor = next((r["wall"] for r in same if r["tool"] == "floor"), None)
        text_floor = next((r["wall"] for r in same if r["tool"] == "floor_text"), None)
        parse = next((r["wall"] for r in same if r["tool"] == "json"), None)
        row["x_floor"] = row["wall"] / floor if floor else None
        row["x_text_floor"] = row["wall"] / text_floor if text_floor else None
        row["x_json"] = row["wall"] / parse if parse and row["format"] != "trec" else None

    # Identical numbers across formats.
    for name, _, _ in sizes:
        forms = {fmt: outputs[(name, fmt)] for fmt in formats if (name, fmt) in outputs}
        if len(set(forms.values())) > 1:
            failures.append(f"{name}: rag_eval's output differs between formats: "
                            + "; ".join(f"{fmt}: {out.decode(errors='replace')[:300]!r}" for fmt, out in forms.items()))

    if load_before is not None:
        load_after = os.getloadavg()[0]
        cpus = os.cpu_count() or 1
        if max(load_before, load_after) > max(cpus - 1, 1) + 0.5:
            notes.append(f"the machine was busy (1-minute load {load_before:.1f} at the start, {load_after:.1f} at "
                         f"the end, {cpus} CPUs): other processes competed, so times are noisy; compare the "
                         "min column, or rerun with a larger --repeat")
        else:
            notes.append(f"1-minute load average {load_before:.1f} at the start, {load_after:.1f} at the end ({cpus} CPUs)")
    if sha256(args.rag_eval) != sha256(args.snapshot):
        notes.append(f"{args.rag_eval} changed while this ran: the copy taken at the start was timed throughout")
    total = time.perf_counter() - began
    report(args, sizes, formats, results, outputs, notes, failures, import_median, import_min, bare, generation, total)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"machine": machine(), "rag_eval": args.provenance, "import_us": import_median,
                       "results": results, "failures": failures, "notes": notes, "seconds": total}, f, indent=1)
    shutil.rmtree(outdir, ignore_errors=True)
    return 1 if failures else 0


def report(args, sizes, formats, results, outputs, notes, failures, import_median, import_min, bare, generation, total):
    p = print
    p("# rag_eval benchmark\n")
    p(f"- machine: {machine()}")
    if args.python != sys.executable:
        version = subprocess.run([args.python, "-c", "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True).stdout.strip()
        p(f"- peers run under: {args.python} (Python {version})")
    p(f"- rag_eval: {args.provenance} (a copy taken at the start is what was timed)")
    p(f"- workloads: seed {args.seed}, k {args.k}, median of {args.repeat} runs per command, tools interleaved; "
      f"files in {args.workdir}")
    bare_wall = statistics.median(r["wall"] for r in bare)
    bare_peak = median_of(bare, "peak")
    p(f"- interpreter start-up (`python -c pass`, same wrapper): {bare_wall * 1000:.1f} ms, {fmt_mb(bare_peak)} MB peak")
    if import_median is not None:
        verdict = "meets" if import_median / 1000 < TARGET_IMPORT_MS else "MISSES"
        p(f"- `python -X importtime -c \"import rag_eval\"`: cumulative {import_median / 1000:.1f} ms "
          f"(median of {args.import_runs}, min {import_min / 1000:.1f} ms) - {verdict} the < {TARGET_IMPORT_MS:.0f} ms target")
    for note in notes:
        p(f"- {note}")
    p("")
    p("| workload | format | run lines | tool | median wall s | min wall s | x floor | x text floor | x json parse "
      "| peak MB |")
    p("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in results:
        flag = "" if row["ok"] else " (FAILED)"
        p(f"| {row['workload']} ({row['queries']:,} x {row['docs']:,}) | {row['format']} | {row['lines']:,} | "
          f"{row['label']}{flag} | {fmt_seconds(row['wall'])} | {fmt_seconds(row['min_wall'])} | "
          f"{fmt_ratio(row['x_floor'])} | {fmt_ratio(row['x_text_floor'])} | {fmt_ratio(row['x_json'])} | "
          f"{fmt_mb(row['peak'])} |")
    p("")
    p("x floor, x text floor and x json parse divide median wall times measured in this invocation; the floor "
      "splits lines read as bytes, the text floor lines read as text; json parse is json.load (JSON) or "
      f"json.loads per line (JSONL) of the run alone.  rag_eval (script) is `python rag_eval.py`, compiled at every "
      "start as Python does for any script; rag_eval (-m) is `python -m rag_eval` with its bytecode cached, as "
      "after `pip install`.  "
      f"{STARTUP[0]} is a {STARTUP[1]} x {STARTUP[2]} workload: the fixed cost of one process.\n")

    # Scaling: time per line beyond the fixed start-up cost, and memory, rag_eval and the floor, per format.
    first_form = next((tool for tool in reversed(RAG_EVAL_FORMS) if find_tool(results, tool)), None)
    p(f"Scaling: microseconds per run line beyond the {STARTUP[0]} workload's time (the fixed cost of a "
      f"process; minimum wall times), {tool_label(first_form, '')}, and its peak above the bare interpreter's:\n")
    p("| format | workload | run lines | queries | rag_eval us/line | floor us/line | ratio | rag_eval peak - bare MB |")
    p("|---|---|---:|---:|---:|---:|---:|---:|")
    for fmt in formats:
        for name, queries, docs in sizes:
            rag = find(results, name, fmt, first_form)
            floor = find(results, name, fmt, "floor")
            if not rag or name == STARTUP[0]:
                continue
            extra = None if rag["peak"] is None or bare_peak is None else rag["peak"] - bare_peak
            rag_rate, floor_rate = net_rate(results, rag), net_rate(results, floor)
            ratio = rag_rate / floor_rate if rag_rate is not None and floor_rate else None
            p(f"| {fmt} | {name} | {queries * docs:,} | {queries:,} | {fmt_rate(rag_rate)} | {fmt_rate(floor_rate)} | "
              f"{fmt_ratio(ratio)} | {fmt_mb(extra)} |")
    p("")
    floor_start = find(results, STARTUP[0], formats[0], "floor")
    for tool in RAG_EVAL_FORMS:
        start = find(results, STARTUP[0], formats[0], tool)
        if start and floor_start:
            p(f"Fixed cost of one process ({STARTUP[0]}, {formats[0]}, minimum): {tool_label(tool, '')} "
              f"{start['min_wall'] * 1000:.1f} ms, floor {floor_start['min_wall'] * 1000:.1f} ms, "
              f"bare interpreter {min(r['wall'] for r in bare) * 1000:.1f} ms.")
    p("")

    # Targets.
    p("Targets:\n")
    for tool in RAG_EVAL_FORMS:
        for name, queries, docs in sizes:
            rag = find(results, name, "trec", tool)
            if not rag or rag["x_floor"] is None or name == STARTUP[0]:
                continue
            lines = queries * docs
            floor = find(results, name, "trec", "floor")
            by_min = rag["min_wall"] / floor["min_wall"]
            ratios = f"{rag['x_floor']:.2f}x the floor by medians, {by_min:.2f}x by minimums"
            if rag["x_text_floor"] is not None:
                ratios += f", {rag['x_text_floor']:.2f}x the text floor"
            what = f"- {tool_label(tool, 'trec')}, {lines:,}-line TREC run ({queries:,} x {docs:,})"
            if lines < 100_000:
                p(f"{what}: {ratios} (start-up dominated; no target)")
                continue
            if max(rag["x_floor"], by_min) <= TARGET_RATIO:
                verdict = "met"
            elif min(rag["x_floor"], by_min) > TARGET_RATIO:
                verdict = "MISSED"
            else:
                verdict = "unclear: medians and minimums disagree, the machine was noisy"
            text = f"{what}: {ratios} (target <= {TARGET_RATIO:g}x the floor: {verdict})"
            if lines >= 10_000_000:
                peak_ok = rag["peak"] is not None and rag["peak"] / 1e6 <= TARGET_PEAK_MB
                text += f", peak {fmt_mb(rag['peak'])} MB (target <= {TARGET_PEAK_MB:g} MB: {'met' if peak_ok else 'MISSED'})"
            p(text)
    for fmt in formats:
        p(cost_model_line(results, sizes, fmt, first_form))
    for fmt in ("json", "jsonl"):
        for name, _, _ in sizes[1:]:
            rag = find(results, name, fmt, first_form)
            if rag and rag["x_json"] is not None:
                p(f"- {name} {fmt}: rag_eval takes {rag['x_json']:.2f}x {tool_label('json', fmt)} alone on the same file")
    p("")

    # Numbers.
    p("Output checks and numbers:\n")
    if not failures:
        p("- rag_eval's stdout is byte-identical across repeats" + (" and across formats" if len(formats) > 1 else ""))
    for failure in failures:
        p(f"- FAILED: {failure}")
    for name, _, _ in sizes[1:]:
        out = outputs.get((name, formats[0]))
        if out:
            try:
                data = json.loads(out)
                brief = {key: data[key] for key in ("mean", "queries", "ties") if key in data}
                brief.update({f"{key} (count)": len(data[key]) for key in ("unscored", "skipped") if key in data})
                p(f"- {name}, rag_eval: {json.dumps(brief, sort_keys=True)}")
            except ValueError:
                pass
        for peer in PEERS:
            row = find(results, name, formats[0], peer)
            if row and row["ok"]:
                p(f"- {name}, {peer} ({formats[0]}): {row['stdout'][:400]}")
    p("")
    p(f"Generation {generation:.1f} s (0 when cached); whole benchmark {total:.1f} s.")


def net_rate(results, row):
    """Microseconds per run line beyond the fixed cost of a process (the same tool on the start-up workload)."""
    if not row or row["workload"] == STARTUP[0]:
        return None
    start = find(results, STARTUP[0], row["format"], row["tool"])
    if not start or row["lines"] <= start["lines"]:
        return None
    # Minimum times: a difference of two medians is at the mercy of one noisy run.
    extra = row["min_wall"] - start["min_wall"]
    return extra / (row["lines"] - start["lines"]) * 1e6 if extra > 0 else None


def cost_model(points):
    """Fit time = a * lines + b * queries to (lines, queries, seconds) points.

    Least squares on relative errors (each point weighted by 1 / seconds), so
    the largest run does not decide alone.  Returns (a, b, largest relative
    misfit), or None; b is 0 when every point has the same documents per query
    (then lines and queries cannot be told apart).
    """
    rows = [(lines / t, queries / t) for lines, queries, t in points]  # each row of the system, divided by t
    sll = sum(x * x for x, _ in rows)
    slq = sum(x * y for x, y in rows)
    sqq = sum(y * y for _, y in rows)
    sl, sq = sum(x for x, _ in rows), sum(y for _, y in rows)  # right-hand side: t / t = 1 for every row
    det = sll * sqq - slq * slq
    if det > 1e-9 * sll * sqq:
        a, b = (sl * sqq - sq * slq) / det, (sq * sll - sl * slq) / det
    elif sll:
        a, b = sl / sll, 0.0
    else:
        return None
    misfit = max(abs(a * lines + b * queries - t) / t for lines, queries, t in points)
    return a, b, misfit


def cost_model_line(results, sizes, fmt, tool):
    """One line of the targets: the linear cost model of ``tool`` on ``fmt``, and whether it fits."""
    start = find(results, STARTUP[0], fmt, tool)
    points = []
    for name, queries, docs in sizes:
        row = find(results, name, fmt, tool)
        if start and row and queries * docs >= 100_000 and row["min_wall"] > start["min_wall"]:
            points.append((queries * docs, queries, row["min_wall"] - start["min_wall"]))
    fit = cost_model(points) if len(points) >= 2 else None
    if fit is None:
        return f"- linear scaling, {fmt}: needs two workloads of >= 100,000 lines (e.g. --sizes {DEFAULT_SIZES})"
    a, b, misfit = fit
    per_query = f" + {b * 1e6:.1f} us per query" if b else " (one shape of run: no separate cost per query)"
    text = (f"- linear scaling, {fmt}: time beyond start-up = {a * 1e6:.3f} us per line{per_query} "
            f"over {len(points)} workloads of >= 100,000 lines; largest misfit {misfit:.0%}")
    if len(points) == 2 and b:
        return text + " (two workloads fit exactly: a third one tests it)"
    return text + (" (linear)" if misfit <= LINEAR_TOLERANCE else f" (NOT linear: tolerance {LINEAR_TOLERANCE:.0%})")


def fmt_rate(value):
    return "-" if value is None else f"{value:.2f}"


def find_tool(results, tool):
    return next((r for r in results if r["tool"] == tool), None)


def find(results, name, fmt, tool):
    return next((r for r in results if r["workload"] == name and r["format"] == fmt and r["tool"] == tool), None)


if __name__ == "__main__":
    sys.exit(main())
