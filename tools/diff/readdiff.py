"""readdiff: the readers of this rag_eval.py against another copy, on the fuzzer's inputs.

Each case takes an input from the fuzzer's corpus (tools/fuzz: the seeds, their conversions to every
format, gzip forms, the hostile fixtures of fixtures/bad/) or a generated run of up to a few hundred KB
(TREC, JSONL, JSON scored, ranked or as rows, MS MARCO, TSV with a header; its queries shuffled or apart
now and then), mutated half the time by the fuzzer's mutations, and reads it with both copies:
``read_qrels``, ``read_slices`` or ``_read_run`` (a random depth, keep filter, --doc-id-sep, judged
documents, cutoffs to reduce to, --max-input-bytes, evidence rows, format), from a file or from standard
input, its bytes hashed or not (as --output does).  Now and then the reading constants are made tiny in
both copies alike (block, line, JSON-run and id sizes, the repeat and rank budgets), so that blocks,
lines, budgets and the JSON stream's text cross their boundaries within small inputs.  The value
returned (every float to the last bit, every dict in its order) or the error raised, and the inputs'
sha256, must be the same.  Prints the counts and the first differences; exits 1 on any.

    python3 tools/diff/readdiff.py --reference OLD/rag_eval.py [--cases 2000] [--seed 0]
"""

import io
import json
import os
import random
import sys
import tempfile
from unittest import mock

from common import REPO, Tally, arguments, case_random, outcome

sys.path.insert(0, os.path.join(REPO, "tools", "fuzz"))
import fuzz  # noqa: E402  (the corpus and the mutations)


def generated_run(rng):
    """A run of 1 to 40 queries of 1 to 2,000 documents, ties and repeats now and then, in one format."""
    rows = []
    for qid in (f"q{i}" for i in range(rng.randint(1, 40))):
        size = rng.choice((1, 5, 50, 300, 2000))
        for rank in range(size):
            doc = f"d{rng.randrange(size * 2) if rng.random() < 0.05 else rank}"
            score = round(1000 - rank * 0.5, 3) if rng.random() < 0.5 else \
                rng.choice((1.0, 2.0)) if rng.random() < 0.2 else round(rng.random(), 5)
            rows.append((qid, doc, rank + 1, score))
    if rng.random() < 0.3:
        rng.shuffle(rows)
    elif rng.random() < 0.3:  # a query's lines apart
        cut = rng.randrange(len(rows) + 1)
        rows = rows[cut:] + rows[:cut]
    form = rng.choice(("trec", "jsonl", "json", "ranked", "rows", "msmarco", "tsv", "tsv rank"))
    if form == "trec":
        return "".join(f"{q} Q0 {d} {r} {s} tag\n" for q, d, r, s in rows)
    if form == "jsonl":
        return "".join(json.dumps({"query_id": q, "doc_id": d, "score": s}) + "\n" for q, d, r, s in rows)
    if form == "msmarco":
        return "".join(f"{q}\t{d}\t{r}\n" for q, d, r, s in rows)
    if form == "tsv":
        return "qid\tdocno\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, r, s in rows)
    if form == "tsv rank":
        return "qid\tdocno\trank\n" + "".join(f"{q}\t{d}\t{r - 1}\n" for q, d, r, s in rows)
    if form == "rows":
        return json.dumps([{"query_id": q, "doc_id": d, "score": s} for q, d, r, s in rows])
    run = {}
    for q, d, r, s in rows:  # ranked: now and then an integer id
        if form == "json":
            run.setdefault(q, {})[d] = s
        else:
            run.setdefault(q, []).append(d if rng.random() < 0.95 else r)
    return json.dumps(run, indent=rng.choice((None, 1)))


def judged_for(rng, data):
    """Qrels judging some of the ids the input's text holds, and some of the generated runs' ids."""
    ids = []
    for line in data[:200_000].split(b"\n"):
        fields = line.replace(b'"', b" ").replace(b",", b" ").replace(b":", b" ").split()
        ids.extend(field.decode("utf-8", "replace") for field in fields[:6])
    ids = ids or ["q1", "d1"]
    judged = {}
    for _ in range(rng.randint(1, 30)):
        judged.setdefault(rng.choice(ids), {})[rng.choice(ids)] = rng.choice((0, 1, 2))
    for qid in (f"q{i}" for i in range(40)):
        if rng.random() < 0.5:
            judged.setdefault(qid, {}).update({f"d{rng.randrange(60)}": rng.choice((0, 1, 3)) for _ in range(4)})
    return judged


def draw(rng, corpus, hostile):
    """(role, name, bytes, constants made tiny, options, from standard input, hashed, seed of the qrels)."""
    role = rng.choice(("qrels", "run", "run", "run", "run", "slices"))
    if role == "run" and rng.random() < 0.25:
        name, data = "generated", generated_run(rng).encode()
    else:
        name, data = rng.choice(corpus[role] + hostile.get(role, []))
    if rng.random() < 0.5:
        data, name = fuzz.mutate(data, rng, corpus[role], gentle=rng.random() < 0.5), name + "~"
    tiny = {}
    if rng.random() < 0.3:
        block = rng.choice((8, 16, 64, 300, 4096))
        tiny = {"_READ_BLOCK": block, "_MAX_LINE": rng.choice((block * 64, 1 << 26)),
                "_MAX_DETECT_LINE": rng.choice((block * 8, 1 << 20))}
    if rng.random() < 0.2:
        tiny.update({"_REPEAT_BUDGET": rng.choice((2, 8, 100)), "_MAX_RANKS": rng.choice((3, 50, 1 << 20)),
                     "_MAX_UNKNOWN_QUERIES": rng.choice((1, 5, 200_000)), "_MAX_ID": rng.choice((12, 4096)),
                     "_MAX_JSON_RUN": rng.choice((500, 100_000, 1 << 29))})
    options = {"fmt": rng.choice(("auto",) * 5 + ("json", "jsonl", "trec"))}
    if role == "run":
        options.update(depth=rng.choice((None, None, 1, 2, 6, 11, 100)),
                       keep=rng.choice((None, None, "even", "judged")),
                       doc_id_sep=rng.choice((None, None, None, "#", "-", "1")), judged=rng.random() < 0.6,
                       cutoffs=rng.choice((None, [1, 5], [5, 10], [1, 3, 10], [2])),
                       max_bytes=rng.choice((None,) * 6 + (100, 5000, 200_000)), evidence=rng.random() < 0.08)
    return role, name, data, tiny, options, rng.random() < 0.25, rng.random() < 0.3, rng.random()


def read(module, case, folder):
    """What ``module``'s reader gives for the case: (value, the sha256 of the input when hashed)."""
    role, name, data, tiny, options, stdin, hashed, judged_seed = case
    saved = {key: getattr(module, key) for key in tiny}
    for key, value in tiny.items():
        setattr(module, key, value)
    path = os.path.join(folder, "input")
    with open(path, "wb") as handle:
        handle.write(data)
    digests = {} if hashed else None
    token = module._INPUT_SHA256.set(digests)
    stdin_stream = io.TextIOWrapper(io.BufferedReader(io.BytesIO(data if stdin else b"")), encoding="utf-8")
    target = "-" if stdin else path
    try:
        with mock.patch.object(sys, "stdin", stdin_stream):
            if role == "qrels":
                return module.read_qrels(target, options["fmt"]), digests
            if role == "slices":
                return module.read_slices(target), digests
            judged = judged_for(random.Random(judged_seed), data) if options["judged"] else None
            keep = {"even": lambda qid, docid: len(docid) % 2 == 0,
                    "judged": judged and (lambda qid, docid: docid in judged.get(qid, ()))}.get(options["keep"])
            max_bytes = options["max_bytes"] or module._MAX_RUN_BYTES
            return module._read_run(target, options["fmt"], options["depth"], keep, options["doc_id_sep"], judged,
                                    options["cutoffs"], max_bytes, options["evidence"]), digests
    finally:
        module._INPUT_SHA256.reset(token)
        for key, value in saved.items():
            setattr(module, key, value)


def main():
    args, new, reference = arguments(__doc__, 2000)
    corpus, hostile = fuzz.build_corpus(fuzz.load_seeds(), args.seed), fuzz.load_hostile()
    tally = Tally(args.show)
    with tempfile.TemporaryDirectory(prefix="readdiff_") as folder:
        for index in range(args.cases):
            case = draw(case_random(args.seed, index), corpus, hostile)
            role, name, data, tiny, options, stdin, hashed, _ = case
            shown = {"input": name, "bytes": data[:300], "tiny": tiny, "options": options, "stdin": stdin,
                     "hashed": hashed}
            tally.add(role, index, shown, outcome(lambda: read(new, case, folder)),
                      outcome(lambda: read(reference, case, folder)))
    return tally.report(args.seed)


if __name__ == "__main__":
    sys.exit(main())
