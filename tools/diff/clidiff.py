"""clidiff: whole command lines of this rag_eval.py against another copy, on seeded random inputs.

Each case writes small inputs into an empty folder (qrels as JSON, JSONL or TREC; runs as JSON,
JSONL, TREC or BEIR-style TSV, ranked or scored with ties; a flat baseline, an older run, slices;
now and then a spoiled line), draws an option set (cutoffs, measures, conventions, every report
format, the gate with its rules and tolerances, the files --output, --save-baseline, --junit,
--metrics-file and --unjudged write, a step summary, standard input, now and then an option value
that must be refused) and runs ``main`` of each copy in-process on the same bytes, from that folder.
The exit code, stdout, stderr and every file written or changed must be the same.  Prints the
counts and the first differences (with the command line); exits 1 on any difference.

    python3 tools/diff/clidiff.py --reference OLD/rag_eval.py [--cases 300] [--seed 0]
"""

import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
from unittest import mock

from common import Tally, arguments, case_random, outcome

CLEARED = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_SHA", "GITHUB_HEAD_REF", "GITHUB_REF_NAME",
           "CI_COMMIT_SHA", "CI_COMMIT_REF_NAME")


def judgments(rng, queries, docs):
    return {qid: {doc: rng.choice((0, 1, 1, 2, 3)) for doc in rng.sample(docs, rng.randint(1, min(6, len(docs))))}
            for qid in queries}


def ranking(rng, qids, docs, scored):
    run = {}
    for qid in qids:
        if rng.random() < 0.1:
            continue
        chosen = rng.sample(docs, rng.randint(0, len(docs)))
        ties = [rng.choice((0.5, 1.0, 2.0)) for _ in range(2)]
        run[qid] = {doc: rng.choice(ties) if rng.random() < 0.3 else round(rng.random(), 4) for doc in chosen} \
            if scored else chosen
    return run


def qrels_text(rng, qrels):
    form = rng.choice(("json", "jsonl", "trec"))
    if form == "json":
        return json.dumps(qrels)
    rows = [(qid, doc, grade) for qid, grades in qrels.items() for doc, grade in grades.items()]
    if form == "jsonl":
        return "".join(json.dumps({"query_id": q, "doc_id": d, "relevance": g}) + "\n" for q, d, g in rows)
    return "".join(f"{q} 0 {d} {g}\n" for q, d, g in rows)


def run_text(rng, run, scored):
    form = rng.choice(("json", "jsonl", "trec", "tsv"))
    if form == "json":
        return json.dumps(run)
    rows = [(qid, doc, entry[doc] if scored else -rank, rank)
            for qid, entry in run.items() for rank, doc in enumerate(entry, 1)]
    if form == "jsonl":
        return "".join(json.dumps({"query_id": q, "doc_id": d, "score": s}) + "\n" for q, d, s, _ in rows)
    if form == "trec":
        return "".join(f"{q} Q0 {d} {r} {s} tag\n" for q, d, s, r in rows)
    return "qid\tdocno\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s, _ in rows)


def spoil(rng, text):
    """One line of ``text`` broken (a field dropped, a grade or score made a word, bytes that are not UTF-8)."""
    lines = text.splitlines(True) or [""]
    at = rng.randrange(len(lines))
    lines[at] = rng.choice((lines[at].replace(" ", "", 1), lines[at][: len(lines[at]) // 2] + "\n", "x y\n",
                            lines[at].replace("1", "one"), "\udcff\n", "\n"))
    return "".join(lines)


def draw(rng):
    """(files: name -> text, argv, stdin text or None, environment changes)."""
    queries = [f"q{i}" for i in range(rng.randint(1, 15))]
    docs = [f"d{i}" for i in range(rng.randint(1, 10))]
    qrels = judgments(rng, queries, docs)
    scored = rng.random() < 0.6
    extra = ["u1"] if rng.random() < 0.1 else []
    files = {"qrels": qrels_text(rng, qrels), "run": run_text(rng, ranking(rng, queries + extra, docs, scored), scored)}
    if rng.random() < 0.1:
        name = rng.choice(("qrels", "run"))
        files[name] = spoil(rng, files[name])
    argv, env, stdin = ["qrels", "run"], {}, None
    if rng.random() < 0.08:
        argv[1], stdin = "-", files.pop("run")
    option = lambda share: rng.random() < share  # noqa: E731
    several = option(0.1)  # several runs compared: the options of one run only are mostly left out
    if several:
        files["other"] = run_text(rng, ranking(rng, queries, docs, scored), scored)
        argv += ["b=other"] if option(0.5) else ["other"]
    ks, measures = [5], ["recall", "success", "mrr", "ndcg"]
    if option(0.5):
        ks = rng.sample((1, 2, 3, 5, 10), rng.randint(1, 2))
        argv += ["--k", ",".join(map(str, ks))]
    if option(0.2):
        measures = rng.sample(("recall", "success", "mrr", "ndcg", "precision", "ap", "judged"), rng.randint(1, 3))
        argv += ["--measures", ",".join(measures)]
    metrics = [f"{m}@{k}" for m in measures for k in ks]
    alone = 0.05 if several else 1  # how much likelier an option of one run is with one run
    for flag, share in (("--judged-only", 0.15), ("--allow-partial-run", 0.4), ("--drop-unknown-queries", 0.6),
                        ("--per-query", 0.25 * alone), ("--ci", 0.1), ("--quiet", 0.1)):
        if option(share):
            argv.append(flag)
    if option(0.2):
        argv += ["--gain", rng.choice(("exp", "linear"))]
    if option(0.1):
        argv += ["--min-grade", rng.choice(("1", "2"))]
    if option(0.6):
        argv += ["--format", rng.choice(("json", "table", "markdown", "csv"))]
    if option(0.2):
        argv += ["--digits", rng.choice(("2", "6", "17"))]
    if scored and option(0.1):
        argv += ["--abstain-below", rng.choice(("0.5", "1"))]
    gated = option(0.5 * alone)
    if gated:
        if option(0.5):
            files["old"] = run_text(rng, ranking(rng, queries, docs, scored), scored)
            argv += ["--baseline-run", "old"]
            if option(0.3):
                argv += ["--gate", "significant"]
        else:
            named = rng.sample(metrics, min(3, len(metrics))) + ["ndcg@7"] * option(0.05)
            files["baseline.json"] = json.dumps({metric: round(rng.random(), 3) for metric in named})
            argv += ["--baseline", "baseline.json"]
            if option(0.1):
                argv.append("--update-baseline")
        if option(0.4):
            argv += ["--max-drop", rng.choice(("0", "0.05", "10%", f"{rng.choice(metrics)}=0.1"))]
        if option(0.2):
            argv += ["--min", f"{rng.choice(metrics)}={rng.choice(('0.5', '0.9'))}"]
        if option(0.2):
            argv += ["--adjust", rng.choice(("maxt", "holm"))]
        if option(0.2):
            argv += ["--inconclusive", rng.choice(("exit", "pass", "fail"))]
        argv += ["--resamples", str(rng.choice((100, 300))), "--seed", str(rng.randint(0, 5))]
    if option(0.15):
        files["slices.json"] = json.dumps({qid: rng.choice(("a", "b", ["a", "b"])) for qid in queries if option(0.6)})
        argv += ["--slices", "slices.json"]
    for flag, name, share in (("--output", "full.json", 0.15), ("--save-baseline", "saved.json", 0.15),
                              ("--junit", "junit.xml", 0.1 + 0.2 * gated), ("--metrics-file", "metrics.txt", 0.1),
                              ("--unjudged", "unjudged.jsonl", 0.1)):
        if option(share * (alone if flag != "--output" else 1)):
            argv += [flag, name]
    if option(0.1):
        env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": "summary.md"}
    if option(0.05):  # a value that must be refused
        argv += rng.choice((["--k", "0"], ["--measures", "ndgc"], ["--max-drop", "2"], ["--digits", "-1"],
                            ["--format", "yaml"], ["--min", "recall@5"]))
    return files, argv, stdin, env


def read_all(folder):
    found = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as handle:
            found[name] = handle.read()
    return found


def run_in(module, folder, argv, env, stdin=""):
    """``module.main(argv)`` run from ``folder``, the CI variables cleared but ``env``: (exit, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    stdin_stream = io.TextIOWrapper(io.BufferedReader(io.BytesIO((stdin or "").encode("utf-8", "surrogateescape"))),
                                    encoding="utf-8")
    saved = os.getcwd()
    with mock.patch.dict(os.environ, {"SOURCE_DATE_EPOCH": "1700000000"}), \
            mock.patch.object(sys, "stdin", stdin_stream), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for name in CLEARED:
            os.environ.pop(name, None)
        os.environ.update(env)
        os.chdir(folder)
        try:
            code = module.main(list(argv))
        except SystemExit as exc:  # argparse's --help and --version; main itself returns its code
            code = ("SystemExit", exc.code)
        finally:
            os.chdir(saved)
    return code, out.getvalue(), err.getvalue()


def run_command(module, case, folder):
    """Write the case's files into an empty ``folder``, run ``module.main`` there; return what it did."""
    files, argv, stdin, env = case
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for name, text in files.items():
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(text.encode("utf-8", "surrogateescape"))
    before = read_all(folder)
    code, out, err = run_in(module, folder, argv, env, stdin)
    after = read_all(folder)
    written = {name: data for name, data in after.items() if before.get(name) != data}
    return {"exit": code, "stdout": out, "stderr": err, "written": written,
            "removed": sorted(set(before) - set(after))}


def main():
    args, new, reference = arguments(__doc__, 300)
    tally = Tally(args.show)
    with tempfile.TemporaryDirectory(prefix="clidiff_") as tmp:
        folder = os.path.join(tmp, "work")
        for index in range(args.cases):
            case = draw(case_random(args.seed, index))
            files, argv, stdin, env = case
            shown = {"argv": argv, "stdin": stdin is not None, "env": env, "files": files}
            tally.add("command line", index, shown, outcome(lambda: run_command(new, case, folder)),
                      outcome(lambda: run_command(reference, case, folder)))
    return tally.report(args.seed)


if __name__ == "__main__":
    sys.exit(main())
