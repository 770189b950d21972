"""libdiff: the library's results of this rag_eval.py against another copy, on seeded random inputs.

Each case draws small qrels and runs (ranked lists and scored ones with ties, chunk ids, missing and
unknown queries, now and then an invalid value) and conventions, and calls, on both copies, one of
``evaluate``, ``evaluate_spans``, ``gate`` (on a baseline made from a second run, with tolerances,
floors, slices, both rules) and ``compare_runs``.  What each returns (every key, every float to the
last bit, in order) or raises (type and message) must be the same.  Prints the counts of identical and
different cases per function and the first differences; exits 1 on any difference.

    python3 tools/diff/libdiff.py --reference OLD/rag_eval.py [--cases 400] [--seed 0]

Use it when a change must keep every result (a faster path, a refactoring): run it against the copy
before the change (``git show main:rag_eval.py > /tmp/old/rag_eval.py``).
"""

import copy
import sys

from common import Tally, api, arguments, case_random, outcome

KS = (1, 2, 3, 5, 10, 20)


def draw_k(rng):
    return rng.choice(KS) if rng.random() < 0.6 else sorted(rng.sample(KS, rng.randint(1, 3)))


def draw_measures(rng, names):
    if rng.random() < 0.3:
        return None
    chosen = rng.sample(names, rng.randint(1, len(names)))
    if rng.random() < 0.2:  # a metric with its own cutoff, in our spelling or another tool's
        chosen.append(rng.choice(["ndcg@3", "recall@10", "ndcg_cut_5", "P@2", "RR@4", "hit_rate@3"]))
    return chosen


def draw_qrels(rng, queries, docs, sep=None):
    qrels = {}
    for qid in queries:
        if rng.random() < 0.03:
            continue
        judged = rng.sample(docs, rng.randint(0, min(len(docs), 8)))
        qrels[qid] = {doc + (f"{sep}{rng.randint(0, 2)}" if sep and rng.random() < 0.5 else ""):
                      rng.choice((0, 0, 1, 1, 1, 2, 3)) for doc in judged}
    return qrels


def draw_run(rng, queries, docs, sep=None, scored=None):
    """Lists or score dicts (scores from a few values, so that ties happen), some queries missing."""
    scored = rng.random() < 0.5 if scored is None else scored
    run = {}
    for qid in queries:
        if rng.random() < 0.1:
            continue
        ranking = [doc + (f"{sep}{rng.randint(0, 3)}" if sep and rng.random() < 0.6 else "")
                   for doc in rng.sample(docs, rng.randint(0, len(docs)))]
        ranking = list(dict.fromkeys(ranking))
        if scored:
            values = [rng.choice((0.1, 0.5, 0.5, 1.0, 2.25, -1.0)) for _ in range(3)]
            run[qid] = {doc: rng.choice(values) if rng.random() < 0.4 else rng.random() for doc in ranking}
        else:
            run[qid] = ranking
    return run


def spoil(rng, qrels, run):
    """Now and then one invalid value, so that the errors are compared too."""
    if rng.random() < 0.06 and run:
        qid = rng.choice(sorted(run))
        run[qid] = rng.choice([None, 3, {"d1": float("nan")}, {"d1": "x"}, [1, 2], ["d1", "d1"]])
    if rng.random() < 0.04 and qrels:
        qid = rng.choice(sorted(qrels))
        qrels[qid] = rng.choice([{"d1": 1.5}, {"d1": -1}, {"d1": True}, [], {"": 1}])


def conventions(rng, sep, scored):
    options = {"gain": rng.choice(("exp", "linear")), "min_grade": rng.choice((1, 1, 1, 2)),
               "judged_only": rng.random() < 0.25, "drop_unknown_queries": rng.random() < 0.5}
    if sep:
        options["doc_id_sep"] = sep
    if scored and rng.random() < 0.3:  # (a ranked list has no score to abstain below: an error)
        options["abstain_below"] = rng.choice((0.0, 0.5, 1.0))
    return options


def evaluate_case(rng, names):
    queries = [f"q{i}" for i in range(rng.randint(1, 12))]
    docs = [f"d{i}" for i in range(rng.randint(1, 15))]
    sep = "#" if rng.random() < 0.2 else None
    scored = rng.random() < 0.5
    qrels, run = draw_qrels(rng, queries, docs, sep), draw_run(rng, queries + ["u1"] * (rng.random() < 0.1), docs, sep, scored)
    spoil(rng, qrels, run)
    return {"qrels": qrels, "run": run, "k": draw_k(rng), "measures": draw_measures(rng, names), **conventions(rng, sep, scored)}


def evaluate_call(module, case):
    case = copy.deepcopy(case)
    return module.evaluate(case.pop("qrels"), case.pop("run"), case.pop("k"), **case)


def spans_case(rng, names):
    queries = [f"q{i}" for i in range(rng.randint(1, 8))]
    docs = [f"d{i}" for i in range(rng.randint(1, 5))]
    chunks = {}
    for doc in docs:
        start = 0
        for part in range(rng.randint(1, 5)):
            end = start + rng.randint(1, 40)
            chunks[f"{doc}#{part}"] = [doc, max(0, start - rng.choice((0, 0, 5))), end]
            start = end
    qrels = {}
    for qid in queries:
        spans = []
        for _ in range(rng.randint(0, 4)):
            doc = rng.choice(docs)
            start = rng.randint(0, 120)
            spans.append([doc, start, start + rng.randint(1, 50), rng.choice((0, 1, 1, 2, 3))])
        qrels[qid] = sorted(spans)
    scored = rng.random() < 0.5
    run = draw_run(rng, queries, list(chunks) + ["nowhere#0"] * (rng.random() < 0.03), scored=scored)
    options = {"gain": rng.choice(("exp", "linear")), "min_grade": rng.choice((1, 1, 2)),
               "min_overlap": rng.choice((0.25, 0.5, 0.5, 1.0)), "drop_unknown_queries": rng.random() < 0.5}
    if scored and rng.random() < 0.3:
        options["abstain_below"] = rng.choice((0.0, 0.5))
    return {"qrels": qrels, "run": run, "chunks": chunks, "k": draw_k(rng),
            "measures": draw_measures(rng, names), **options}


def spans_call(module, case):
    case = copy.deepcopy(case)
    qrels = module.SpanQrels({qid: tuple(sorted(module.Span(*span) for span in spans))
                              for qid, spans in case.pop("qrels").items()})
    chunks = {cid: tuple(where) for cid, where in case.pop("chunks").items()}
    return module.evaluate_spans(qrels, case.pop("run"), chunks, case.pop("k"), **case)


def gate_case(rng, names):
    queries = [f"q{i}" for i in range(rng.randint(2, 30))]
    docs = [f"d{i}" for i in range(rng.randint(2, 12))]
    qrels = draw_qrels(rng, queries, docs)
    k = draw_k(rng)
    scored = rng.random() < 0.5
    options = {**conventions(rng, None, scored), "drop_unknown_queries": True}
    metrics = [f"{name}@{cutoff}" for name in ("recall", "mrr", "ndcg") for cutoff in ([k] if isinstance(k, int) else k)]
    paired = rng.random() < 0.7  # a flat baseline: rule significant refuses it (rarely drawn, to compare the error)
    settings = {"rule": rng.choice(("drop", "significant")) if paired or rng.random() < 0.1 else "drop",
                "default": [rng.choice((0.0, 0.02, 0.1)), rng.random() < 0.3],
                "tolerances": {rng.choice(metrics): [rng.choice((0.0, 0.05)), False]} if rng.random() < 0.3 else {},
                "floors": {rng.choice(metrics): rng.choice((0.1, 0.5, 0.9))} if rng.random() < 0.3 else {},
                "alpha": rng.choice((0.05, 0.1)), "resamples": rng.choice((50, 200)), "seed": rng.randint(0, 9),
                "show": rng.randint(0, 5), "adjust": rng.choice(("maxt", "holm"))}
    slices = {qid: rng.sample(["a", "b"], rng.randint(1, 2)) for qid in queries if rng.random() < 0.5}
    if slices and paired and rng.random() < 0.5:
        settings["tolerances"][f"{rng.choice(['a', 'b'])}:{rng.choice(metrics)}"] = [0.05, False]
    return {"qrels": qrels, "now": draw_run(rng, queries, docs, scored=scored), "before": draw_run(rng, queries, docs, scored=scored),
            "k": k, "measures": ["recall", "mrr", "ndcg"], "options": options, "paired": paired,
            "baseline": rng.random() < 0.9, "settings": settings, "slices": slices if rng.random() < 0.4 else None}


def gate_call(module, case):
    case = copy.deepcopy(case)
    score = lambda run: module.evaluate(case["qrels"], run, case["k"], measures=case["measures"], **case["options"])  # noqa: E731
    baseline = None
    if case["baseline"]:
        before = score(case["before"])
        baseline = module.Baseline(dict(before["mean"]), api(module, "per_query_by_metric")(before) if case["paired"] else None)
    settings = dict(case["settings"])
    settings["default"] = module.Tolerance(*settings["default"])
    settings["tolerances"] = {key: module.Tolerance(*value) for key, value in settings["tolerances"].items()}
    return module.gate(score(case["now"]), baseline, module.GateSettings(**settings), case["slices"])


def compare_case(rng, names):
    queries = [f"q{i}" for i in range(rng.randint(1, 25))]
    docs = [f"d{i}" for i in range(rng.randint(2, 12))]
    scored = rng.random() < 0.5
    runs = [draw_run(rng, queries, docs, scored=scored) for _ in range(rng.randint(2, 4))]
    return {"qrels": draw_qrels(rng, queries, docs), "runs": runs, "k": draw_k(rng), "measures": draw_measures(rng, names),
            "options": {**conventions(rng, None, scored), "drop_unknown_queries": True},
            "resamples": rng.choice((50, 200)), "seed": rng.randint(0, 9), "alpha": rng.choice((0.05, 0.2)), "show": rng.randint(0, 5)}


def compare_call(module, case):
    case = copy.deepcopy(case)
    results = [(f"r{i}", module.evaluate(case["qrels"], run, case["k"], measures=case["measures"], **case["options"]))
               for i, run in enumerate(case["runs"])]
    return module.compare_runs(results, resamples=case["resamples"], seed=case["seed"], alpha=case["alpha"], show=case["show"])


KINDS = (("evaluate", evaluate_case, evaluate_call), ("evaluate_spans", spans_case, spans_call),
         ("gate", gate_case, gate_call), ("compare_runs", compare_case, compare_call))


def main():
    args, new, reference = arguments(__doc__, 400)
    names = [measure.name for measure in reference.MEASURES]
    span_names = names + [measure.name for measure in getattr(reference, "SPAN_MEASURES", None) or getattr(reference, "_SPAN_MEASURES", ())]
    tally = Tally(args.show)
    for index in range(args.cases):
        rng = case_random(args.seed, index)
        kind, draw, call = KINDS[index % len(KINDS)]
        case = draw(rng, span_names if kind == "evaluate_spans" else names)
        tally.add(kind, index, case, outcome(lambda: call(new, case)), outcome(lambda: call(reference, case)))
    return tally.report(args.seed)


if __name__ == "__main__":
    sys.exit(main())
