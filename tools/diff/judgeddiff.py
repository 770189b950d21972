"""judgeddiff: the judged tier's command lines (--judged and its options) of this rag_eval.py against another copy.

Each case is a folder of inputs and a few command lines run in it one after another (say --save-baseline, then
--baseline): first every sample export of fixtures/judged/ in every report format and with the options
tests/test_judged.py uses, then seeded random neutral JSONL (repeats, judge errors, NaN, digests, undocumented
metrics, scores out of range, human labels, a changed judge, beside fixtures/qrels.json and run.json or alone).
Exit codes, stdout, stderr and every file written must be the same.  Exits 1 on any difference.

    python3 tools/diff/judgeddiff.py --reference OLD/rag_eval.py [--cases 300] [--seed 0]
"""

import io
import json
import os
import shutil
import sys
import tempfile
import zipfile

from clidiff import read_all, run_in
from common import REPO, Tally, arguments, case_random, outcome

FIXTURES = os.path.join(REPO, "fixtures")
JUDGED = os.path.join(FIXTURES, "judged")
ID_FIELD = {"ragas.csv": "user_input", "ragas.json": "user_input", "trulens_records.csv": "input",
            "promptfoo_results.json": "qid"}
FORMATS = ("json", "table", "markdown", "csv")
SUMMARY = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": "summary.md"}


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts), "rb") as handle:
        return handle.read()


def inspect_zip():
    """Inspect's .eval: the log of fixtures/judged as a zip, a member per sample."""
    log = json.loads(fixture("judged", "inspect_log.json"))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("_journal/start.json", json.dumps({"version": 2, "eval": log["eval"]}))
        for item in log["samples"]:
            archive.writestr(f"samples/{item['id']}_epoch_{item['epoch']}.json", json.dumps(item))
    return out.getvalue()


def fixed_cases():
    """Every sample export, in every format, alone and with the options of tests/test_judged.py."""
    files = {name: fixture("judged", name) for name in sorted(os.listdir(JUDGED))}
    files.update({"run.eval": inspect_zip(), "qrels.json": fixture("qrels.json"), "run.json": fixture("run.json"),
                  "slices.json": fixture("slices.json")})
    cases = []
    for name in sorted(files):
        if name in ("qrels.json", "run.json", "slices.json"):
            continue
        for form in FORMATS:
            argv = ["--judged", name, "--format", form, "--max-judge-missing", "0.5"]
            argv += ["--judged-id", ID_FIELD[name]] if name in ID_FIELD else []
            cases.append((files, [(argv + ["--per-query"], {}), (argv + ["--save-baseline", "b.json"], {}),
                                  (argv + ["--baseline", "b.json", "--junit", "j.xml", "--metrics-file", "m.txt",
                                           "--output", "full.json"], SUMMARY)]))
        cases.append((files, [(["--judged", name], {})]))  # no --judged-id, the default share: maybe refused
    base, now, repeats = "neutral_base.jsonl", "neutral_now.jsonl", "neutral_repeats.jsonl"
    judge = ["--judge", "model=gpt-4o", "--judge", "temperature=0"]
    for form in FORMATS:
        for gate in ([], ["--gate", "significant"]):
            cases += [
                (files, [(["--judged", base, "--save-baseline", "b.json"] + judge, {}),
                         (["--judged", now, "--baseline", "b.json", "--max-judge-missing", "0.2", "--format", form,
                           "--per-query"] + gate, SUMMARY),
                         (["--judged", now, "--baseline", "b.json", "--format", form] + gate, {}),
                         (["--judged", base, "--baseline", "b.json", "--format", form, "--judge", "model=gpt-5",
                           "--allow-judge-change"] + gate, SUMMARY),
                         (["--judged", base, "--baseline", "b.json", "--judge", "model=gpt-5"], {})]),
                (files, [(["qrels.json", "run.json", "--judged", base, "--save-baseline", "b.json"], {}),
                         (["qrels.json", "run.json", "--judged", now, "--baseline", "b.json", "--max-judge-missing",
                           "0.2", "--format", form, "--slices", "slices.json", "--per-query", "--ci"] + gate, SUMMARY),
                         (["--judged", now, "--baseline", "b.json", "--max-judge-missing", "0.2", "--format", form,
                           "--not-gated", "recall@5,success@5,mrr@5,ndcg@5"] + gate, {})]),
                (files, [(["--judged", base, "--min", "judge.-hallucination=-0.1", "--min", "judge.faithfulness=0.8",
                           "--format", form, "--slices", "slices.json"], {}),
                         (["--judged", repeats, "--format", form, "--per-query", "--save-baseline", "r.json"], {}),
                         (["--judged", repeats, "--baseline", "r.json", "--format", form] + gate, SUMMARY),
                         (["--judged", base, "--min", "judge.-hallucination=0.1"], {}),
                         (["--judged", base, "--judged", repeats, "--per-query", "--format", form], {})]),
            ]
    return cases


def neutral(rng, ids, metrics, shift=0.0, answers=None):
    """Neutral JSONL rows; ``answers``: id -> the answer's digest number (anchors share theirs)."""
    rows = []
    for qid in ids:
        for metric, binary in metrics:
            for repeat in range(rng.choice((1, 1, 1, 2, 3))):
                row = {"id": qid, "metric": metric}
                if binary:
                    row["score"] = rng.choice((0, 1, 1, 1.0, "C", "I", "P"))
                else:
                    row["score"] = round(min(1.0, max(0.0, rng.random() * 0.8 + 0.1 + shift)), 3)
                if rng.random() < 0.04:
                    row["score"] = rng.choice((None, float("nan"), "nan", ""))
                if rng.random() < 0.03:
                    row["error"] = "RateLimitError"
                if repeat or rng.random() < 0.1:
                    row["repeat"] = repeat + 1 if rng.random() < 0.9 else str(repeat + 1)
                if answers is not None and qid in answers:
                    row["answer_sha256"] = "%064x" % answers[qid]
                    if rng.random() < 0.3:
                        row["contexts_sha256"] = "%064x" % (answers[qid] + 7)
                rows.append(row)
    if rng.random() < 0.03:
        rows[rng.randrange(len(rows))]["score"] = rng.choice((1.5, -0.2, "high", True))
    if rng.random() < 0.02:
        rows.append(dict(rows[0]))  # scored twice
    return rows


def jsonl(rows):
    return "".join(json.dumps(row) + "\n" for row in rows)


def random_case(rng):
    ids = [f"q{i}" for i in range(1, rng.choice((rng.randint(2, 40), rng.randint(60, 150))))]
    metrics = rng.sample((("faithfulness", False), ("hallucination", False), ("tone", False), ("correctness", True),
                          ("answer_relevancy", False), ("pass", True)), rng.randint(1, 3))
    answers = {qid: i for i, qid in enumerate(ids) if rng.random() < 0.8}
    changed = {qid: value + (1000 if rng.random() < 0.5 else 0) for qid, value in answers.items()}
    now = neutral(rng, rng.sample(ids, len(ids) - (rng.random() < 0.2)), metrics, rng.choice((0.0, -0.1, 0.05)), changed)
    files = {"base.jsonl": jsonl(neutral(rng, ids, metrics, 0.0, answers)), "now.jsonl": jsonl(now),
             "qrels.json": fixture("qrels.json"), "run.json": fixture("run.json")}
    common = ["--max-judge-missing", rng.choice(("0.1", "0.3", "0.9", "0.9"))]
    if any(name == "tone" for name, _ in metrics) and rng.random() < 0.9:
        common += ["--judged-direction", f"tone={rng.choice(('higher', 'lower'))}"]
    if rng.random() < 0.2:
        common += ["--judged-direction", f"Faithfulness={rng.choice(('higher', 'lower'))}"]
    retrieval = ["qrels.json", "run.json"] if rng.random() < 0.3 else []
    save = retrieval + ["--judged", "base.jsonl", "--save-baseline", "b.json"] + common
    if rng.random() < 0.5:
        save += ["--judge", "model=a"]
    argv = (retrieval if rng.random() < 0.8 else []) + ["--judged", "now.jsonl", "--baseline", "b.json"] + common
    argv += ["--format", rng.choice(FORMATS), "--resamples", str(rng.choice((200, 500))), "--seed", str(rng.randint(0, 3))]
    if rng.random() < 0.5:
        argv += ["--gate", "significant"]
    if rng.random() < 0.4:
        argv += ["--judge", f"model={rng.choice('ab')}"]
    if rng.random() < 0.8:
        argv.append("--allow-judge-change")
    if rng.random() < 0.3:
        argv += ["--max-drop", rng.choice(("0", "0.05", "0.5"))]
    if rng.random() < 0.3:
        argv.append("--per-query")
    if rng.random() < 0.2:
        files["slices.json"] = json.dumps({qid: rng.choice(("a", "b", ["a", "b"])) for qid in ids if rng.random() < 0.6})
        argv += ["--slices", "slices.json"]
    if rng.random() < 0.2:
        argv.append("--ci")
    if rng.random() < 0.2:
        argv += ["--inconclusive", rng.choice(("exit", "pass", "fail"))]
    if rng.random() < 0.3:  # labels near the judge's scores (PPI++), or anywhere (the labels alone)
        noise, labels, seen = rng.choice((0.05, 0.2, 1.0)), [], set()
        for row in now:
            if (row["id"], row["metric"]) in seen or rng.random() < 0.3 or not isinstance(row.get("score"), float) or row["score"] != row["score"]:
                continue
            seen.add((row["id"], row["metric"]))
            label = {"id": row["id"], "metric": row["metric"], "label": round(row["score"] + rng.gauss(0, noise), 3)}
            if rng.random() < 0.7:
                label["baseline_label"] = round(label["label"] + rng.gauss(0, noise), 3)
            labels.append(label)
        files["h.jsonl"] = jsonl(labels or [{"id": "q1", "metric": metrics[0][0], "label": 1}])
        argv += ["--human-labels", "h.jsonl"]
    for flag, name, share in (("--output", "full.json", 0.2), ("--junit", "j.xml", 0.2),
                              ("--metrics-file", "m.txt", 0.2)):
        if rng.random() < share:
            argv += [flag, name]
    return files, [(save, {}), (argv, SUMMARY if rng.random() < 0.3 else {})]


def run_case(module, case, folder):
    """Each command line of the case in turn, in one folder; what each did, and the files at the end."""
    files, commands = case
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for name, data in files.items():
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    found = []
    for argv, env in commands:
        code, out, err = run_in(module, folder, argv, env)
        found.append({"exit": code, "stdout": out, "stderr": err})
    return {"commands": found, "files": read_all(folder)}


def main():
    args, new, reference = arguments(__doc__, 300)
    tally = Tally(args.show)
    fixed = fixed_cases()
    with tempfile.TemporaryDirectory(prefix="judgeddiff_") as tmp:
        folder = os.path.join(tmp, "work")
        for index, case in enumerate(fixed):
            shown = {"argv": [argv for argv, _ in case[1]]}
            tally.add("fixtures", index, shown, outcome(lambda: run_case(new, case, folder)),
                      outcome(lambda: run_case(reference, case, folder)))
        for index in range(args.cases):
            case = random_case(case_random(args.seed, index))
            shown = {"argv": [argv for argv, _ in case[1]], "files": case[0]}
            tally.add("random", index, shown, outcome(lambda: run_case(new, case, folder)),
                      outcome(lambda: run_case(reference, case, folder)))
    return tally.report(args.seed)


if __name__ == "__main__":
    sys.exit(main())
