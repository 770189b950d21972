"""Invariant (property) tests of rag_eval, on thousands of seeded generated cases.

Every case comes from ``random.Random(seed)`` (never the global generator), so
a failure names a seed that reproduces it.  What is checked, for every measure
in ``rag_eval.MEASURES``, several cutoffs, gain exp and linear, min grade 1 and
2, judged_only on and off:

* every value lies in [0, 1] and agrees with a plain re-implementation of
  the measures' definitions (``reference_values``: top k = the first k unique
  ids, the ideal nDCG ranking from every judged document); the per-measure
  functions agree with ``evaluate``; ``evaluate`` raises ValueError exactly
  when it must (a run query missing from the qrels; no query with a relevant
  document, so that a gate never passes by accident);
* the order of queries, of qrels entries, of run entries and (for scored runs)
  of TREC / JSONL lines changes nothing, exactly;
* recall@k and success@k never decrease as k grows;
* the ideal ranking (judged documents by grade) scores nDCG 1 at every k;
* documents after rank k of the unique ranking never change an @k value;
* one ranking written as a JSON list, a scored JSON run, a TREC run, JSONL
  (with and without scores) and gzipped copies gives identical ``evaluate``
  results and identical command-line stdout;
* command-line output (json, table, markdown, csv, --per-query, a
  ``--gate significant --ci`` run against an extended baseline) is
  byte-identical across repeated runs, hash seeds, and Python 3.9 and 3.13
  (the last when both interpreters can be found; skipped otherwise).

When ``hypothesis`` is importable, ``HypothesisPropertiesTest`` draws more
cases for the same properties; otherwise it is skipped.  Standard library
only otherwise; run with ``python3 -m unittest tests.test_invariants``.
"""

import contextlib
import glob
import gzip
import io
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest
import warnings
from unittest import mock

import rag_eval
from tests.helpers import REPO, child_env


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # optional: the hypothesis tests are skipped
    HAVE_HYPOTHESIS = False
else:
    HAVE_HYPOTHESIS = True


# The default run checks a sixth of the generated cases and format datasets and leaves out
# the other interpreters; RAG_EVAL_FULL=1 (CI, on the oldest and newest Python) runs them all.
FULL = os.environ.get("RAG_EVAL_FULL") == "1"


MEASURE_NAMES = [m.name for m in rag_eval.MEASURES]


BINARY_MEASURES = {m.name for m in rag_eval.MEASURES if m.binary}


FUNCTIONS = {
    "recall": rag_eval.recall_at_k,
    "success": rag_eval.success_at_k,
    "mrr": rag_eval.reciprocal_rank,
    "ndcg": rag_eval.ndcg_at_k,
    "precision": rag_eval.precision_at_k,
    "ap": rag_eval.ap_at_k,
    "judged": rag_eval.judged_at_k,
}


CONVENTIONS = [dict(gain=gain, min_grade=min_grade, judged_only=judged_only)
               for gain in ("exp", "linear") for min_grade in (1, 2) for judged_only in (False, True)]


FORMATS = tuple(rag_eval.FORMATTERS)  # json, table, markdown, csv


TOLERANCE = 1e-12


# Identifiers: strings, always ("01" and "1" differ), with '#', non-ASCII,
# combining marks, a no-break space and other separators that are not ASCII
# white space (TREC splits at ASCII white space only), JSON keywords and numbers.
# None holds ASCII white space or starts with '#', so every one can be written
# to a TREC file; '' and ids with spaces are added where no file is written.
QUERY_IDS = ["1", "01", "001", "q1", "Q1", "q#1", "\u00e9", "e\u0301", "\u03a97", "\u554f1", "0", "-1",
             "1.0", "NaN", "null", "a\u00a0b", "\U0001F50E", "q\u2028x"]


DOC_IDS = ["1", "01", "001", "doc#3", "doc#03", "Doc#3", "doc", "#3", "\u00e9", "e\u0301", "\u00c9", "\u00df",
           "ss", "\u6587\u66f8#2", "na\u00efve", "a\u00a0b", "\u3000", "null", "true", "1e3", "Q0",
           "\U0001F4C4", "x\x1cy", "a\x85b", "-0", "0"]


EXOTIC_IDS = ["", "a b", "tab\there"]


SCORE_CHOICES = [0, 1, 2, 1.0, 0.5, -0.5, 2.25, 3, -1, 1e-9, 0.1 + 0.2, 0.3]


def make_ids(rng, fixed, prefix, count, exotic=False):
    """``count`` distinct ids: some from ``fixed`` (the awkward ones), some made up."""
    pool = list(fixed) + (EXOTIC_IDS if exotic else [])
    chosen = []
    for _ in range(count):
        if rng.random() < 0.5:
            candidate = rng.choice(pool)
        else:
            candidate = rng.choice(["{}{}", "{}#{}", "{}{:02d}", "{}_{}\u00e9"]).format(prefix, rng.randint(0, 40))
        if candidate not in chosen:
            chosen.append(candidate)
    return chosen


def generate(rng, *, max_queries=8, exotic=False, allow_scored=True, allow_empty=True, long_runs=True,
             anchor_probability=0.9):
    """Random qrels and run: grades 0..3, ties in scores, duplicates in ranked
    lists, unjudged documents, queries the run skips, all-zero queries, and
    (with ``long_runs``) an occasional ranking long enough for the streaming
    reader to prune.  With ``anchor_probability`` one query gets a document
    of grade 3 at rank 1, so that most cases are valid input."""
    qids = make_ids(rng, QUERY_IDS, "q", rng.randint(1, max_queries), exotic)
    qrels, run = {}, {}
    scored_run = allow_scored and rng.random() < 0.4
    for qid in qids:
        judged = make_ids(rng, DOC_IDS, "d", rng.randint(0 if allow_empty else 1, 8), exotic)
        weights = rng.choice([(3, 3, 2, 1), (1, 1, 1, 1), (6, 1, 0, 0), (1, 0, 1, 2)])
        qrels[qid] = {doc: rng.choices(range(4), weights)[0] for doc in judged}
        unjudged = [doc for doc in make_ids(rng, DOC_IDS, "u", rng.randint(0, 10), exotic) if doc not in qrels[qid]]
        candidates = judged + unjudged
        if not candidates or rng.random() < 0.12:
            continue  # the run skips this query
        length = rng.choice([0, 1, 2, 3, 5, 8, 12, 20, 25]) if allow_empty else rng.choice([1, 2, 3, 5, 8, 12, 20, 25])
        if long_runs and rng.random() < 0.04:
            length = rng.randint(120, 200)
            candidates = candidates + [f"long{i}" for i in range(length)]
        ranking = []
        for _ in range(length):
            if ranking and rng.random() < 0.15:
                ranking.append(rng.choice(ranking))  # a duplicate
            else:
                ranking.append(rng.choice(candidates))
        if scored_run:
            run[qid] = {doc: rng.choice(SCORE_CHOICES) if rng.random() < 0.6 else round(rng.uniform(-5, 5), rng.randint(0, 6))
                        for doc in ranking}
        else:
            run[qid] = ranking
    if rng.random() < anchor_probability:
        qid = rng.choice(qids)
        doc = rng.choice(sorted(qrels[qid])) if qrels[qid] else "anchor#1"
        qrels[qid][doc] = 3
        entry = run.get(qid)
        if isinstance(entry, dict):
            entry[doc] = max(list(entry.values()) + [0]) + 1
        else:
            run[qid] = [doc] + (entry or [])
    return qrels, run


def shuffled_dict(rng, mapping, deep=True):
    """The same mapping with its keys (and, with ``deep``, the keys of inner mappings) in another order."""
    keys = list(mapping)
    rng.shuffle(keys)
    return {key: (shuffled_dict(rng, mapping[key], False) if deep and isinstance(mapping[key], dict) else mapping[key])
            for key in keys}


def random_cutoffs(rng):
    """An int (a single cutoff) or a list of 2..5 cutoffs from 1..20, maybe unsorted, maybe repeated."""
    if rng.random() < 0.25:
        return rng.randint(1, 20)
    cutoffs = [rng.randint(1, 20) for _ in range(rng.randint(2, 5))]
    return cutoffs


def metric_key(result, name, cutoff):
    return name if isinstance(result["k"], int) else rag_eval.format_metric(name, cutoff)


def cutoff_list(k):
    return [k] if isinstance(k, int) else sorted(set(k))


def unique_ranking(entry, grades, judged_only):
    if isinstance(entry, dict):
        ranking = sorted(entry, key=lambda doc: (entry[doc], doc), reverse=True)  # score, then docid, descending
    else:
        ranking = []
        for doc in entry:
            if doc not in ranking:
                ranking.append(doc)
    if judged_only:
        ranking = [doc for doc in ranking if doc in grades]
    return ranking


def reference_values(entry, grades, k, gain, min_grade, judged_only):
    """Every measure of one query at cutoff k, straight from the definitions (the measures' docstrings)."""
    top = unique_ranking(entry, grades, judged_only)[:k]

    def gain_of(grade):
        if grade <= 0:
            return 0.0
        return float(grade) if gain == "linear" else 2.0 ** grade - 1

    relevant = [grades.get(doc, -1) >= min_grade for doc in top]
    num_relevant = sum(1 for grade in grades.values() if grade >= min_grade)
    dcg = math.fsum(gain_of(grades.get(doc, 0)) / math.log2(rank + 1) for rank, doc in enumerate(top, 1))
    ideal = sorted((gain_of(grade) for grade in grades.values()), reverse=True)[:k]
    ideal_dcg = math.fsum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, 1))
    first = next((rank for rank, rel in enumerate(relevant, 1) if rel), None)
    precisions = [sum(relevant[:rank]) / rank for rank, rel in enumerate(relevant, 1) if rel]
    return {
        "recall": sum(relevant) / num_relevant,
        "success": 1.0 if any(relevant) else 0.0,
        "mrr": 1.0 / first if first else 0.0,
        "ndcg": dcg / ideal_dcg if ideal_dcg > 0 else 0.0,
        "precision": sum(relevant) / k,
        "ap": math.fsum(precisions) / num_relevant,
        "judged": sum(1 for doc in top if doc in grades) / k,
    }


def expected_error(qrels, run, min_grade, k, judged_only, drop_unknown_queries=False):
    """Why ``evaluate`` must refuse this input (None when it must not)."""
    if set(run) - set(qrels) and not drop_unknown_queries:
        return "run query not in the qrels"
    scored = [qid for qid, grades in qrels.items() if any(g >= min_grade for g in grades.values())]
    if not scored:
        return "no query has a relevant document"
    # A run that retrieved nothing, or nothing judged within k, scores 0 in evaluate();
    # the command line refuses it (see nothing_evaluated and the format tests).
    return None


def nothing_evaluated(qrels, run, min_grade, k, judged_only):
    """Why the command line must refuse a run that evaluate() scores 0 (None when it must not)."""
    scored = [qid for qid, grades in qrels.items() if any(g >= min_grade for g in grades.values())]
    rankings = {qid: unique_ranking(run.get(qid, ()), qrels[qid], judged_only) for qid in scored}
    if not any(rankings.values()):
        return "the run retrieved nothing for any judged query"
    if not any(doc in qrels.get(qid, {}) for qid, entry in run.items() for doc in entry):
        return "no document of the run is judged"
    return None


def evaluate_or_error(qrels, run, k, **options):
    """(result, None) or (None, the ValueError's message)."""
    try:
        return rag_eval.evaluate(qrels, run, k, measures=MEASURE_NAMES, **options), None
    except ValueError as exc:
        return None, str(exc)


def canonical(result):
    """The whole result, order included, as text: two results are equal when their texts are."""
    return json.dumps(result, ensure_ascii=False)


@contextlib.contextmanager
def quiet_environment():
    """No GitHub Actions side effects, a pinned clock for saved baselines."""
    with mock.patch.dict(os.environ, {"SOURCE_DATE_EPOCH": "0"}):
        os.environ.pop("GITHUB_ACTIONS", None)
        os.environ.pop("GITHUB_STEP_SUMMARY", None)
        yield


def run_with_pinned_clock(argv):
    """``rag_eval.main(argv)`` in-process: (exit code, stdout, stderr); an escaping exception is the code."""
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(), quiet_environment():
        warnings.simplefilter("ignore", ResourceWarning)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = rag_eval.main([str(arg) for arg in argv])
            except BaseException as exc:  # noqa: B902 - reported by the caller
                code = repr(exc)
    return code, out.getvalue(), err.getvalue()


def write_bytes(path, data):
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def write_text(path, text, gzipped=False):
    data = text.encode("utf-8")
    return write_bytes(path, gzip.compress(data, mtime=0) if gzipped else data)


def json_text(rng, value):
    return json.dumps(value, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))


def trec_qrels_text(rng, qrels):
    lines = [f"{qid}{rng.choice([' ', '	', '  '])}0 {doc} {grade}" for qid, docs in qrels.items() for doc, grade in docs.items()]
    rng.shuffle(lines)
    return "\n".join(lines) + "\n"


def score_text(score):
    """A score as TREC text that reads back as the same number: repr of a float, digits of an int."""
    return repr(score) if isinstance(score, float) else str(score)


def trec_run_lines(qid, scored):
    """TREC lines of a scored entry given as ``[(doc, score), ...]`` (a document may repeat)."""
    return [f"{qid} Q0 {doc} {rank} {score_text(score)} tag" for rank, (doc, score) in enumerate(scored, 1)]


def jsonl_text(rng, rows):
    return "".join(json.dumps(row, ensure_ascii=rng.random() < 0.5) + "\n" for row in rows)


def ranked_forms(rng, run):
    """A run of ranked lists (duplicates allowed, none empty) written every way the readers take.

    Scores fall strictly with each position of the raw list, so a duplicate
    line carries a lower score than the document's first place: every form
    ranks the same unique documents in the same order.
    """
    scored_json, trec_lines, jsonl_lists, jsonl_scored = {}, [], [], []
    for qid, ranking in run.items():
        start, step = rng.choice([(len(ranking), 1), (rng.uniform(-3, 3), rng.choice([0.5, 1e-3, 0.1]))])
        scores = [start - step * position for position in range(len(ranking))]
        if all(float(s).is_integer() for s in scores) and rng.random() < 0.5:
            scores = [int(s) for s in scores]
        pairs = list(zip(ranking, scores))
        first = {}
        for doc, score in pairs:
            first.setdefault(doc, score)
        scored_json[qid] = first
        trec_lines += trec_run_lines(qid, pairs)
        jsonl_lists += [{"query_id": qid, "doc_id": doc} for doc in ranking]
        jsonl_scored += [{"query_id": qid, "doc_id": doc, "score": score} for doc, score in pairs]
    rng.shuffle(trec_lines)
    rng.shuffle(jsonl_scored)
    return scored_json, "\n".join(trec_lines) + "\n", jsonl_lists, jsonl_scored


class Counter:
    def __init__(self):
        self.cases = 0  # evaluate results checked
        self.errors = 0  # inputs that evaluate had to (and did) refuse
        self.reasons = {}  # why, with how many of each
        self.skipped = 0  # property not applicable to the case (counted, asserted small)


class GeneratedPropertiesTest(unittest.TestCase):
    """Thousands of seeded random cases, each checked against every property that applies."""

    SEED = 20260101
    DATASETS = 600 if FULL else 75  # the 70th is the first that evaluate() must refuse (once per convention)

    def setUp(self):
        self.maxDiff = 4000

    def check_result(self, label, qrels, run, k, options, result):
        """Bounds, keys, reference values, measure functions, monotonicity in k."""
        cutoffs = cutoff_list(k)
        self.assertEqual(sorted(result["per_query"]) + result["unscored"],
                         sorted(qid for qid in qrels if any(g >= options["min_grade"] for g in qrels[qid].values()))
                         + sorted(qid for qid in qrels if not any(g >= options["min_grade"] for g in qrels[qid].values())),
                         label)
        self.assertEqual(result["queries"], len(result["per_query"]), label)
        expected_keys = {metric_key(result, name, c) for name in MEASURE_NAMES for c in cutoffs}
        expected_means = {rag_eval.format_metric(name, c) for name in MEASURE_NAMES for c in cutoffs}
        self.assertEqual(set(result["mean"]), expected_means, label)
        for metric, value in list(result["mean"].items()) + list(result["judged"].items()):
            self.assertIsInstance(value, float, f"{label}: {metric}")
            self.assertTrue(0.0 <= value <= 1.0, f"{label}: mean {metric} = {value!r} outside [0, 1]")
        keys = {(name, c): metric_key(result, name, c) for name in MEASURE_NAMES for c in cutoffs}
        for qid, values in result["per_query"].items():
            self.assertEqual(set(values), expected_keys, f"{label}: {qid!r}")
            grades, entry = qrels[qid], run.get(qid, [])
            for cutoff in cutoffs:
                reference = reference_values(entry, grades, cutoff, **options)
                for name in MEASURE_NAMES:
                    value = values[keys[name, cutoff]]
                    # Hundreds of thousands of values: checked plainly first; the assertions below
                    # (the same checks, with their messages) run only for a value that fails them.
                    if (isinstance(value, float) and 0.0 <= value <= 1.0
                            and (name not in BINARY_MEASURES or value in (0.0, 1.0))
                            and (name not in reference or abs(value - reference[name]) <= TOLERANCE)):
                        continue
                    where = f"{label}: query {qid!r} {name}@{cutoff}"
                    self.assertIsInstance(value, float, where)
                    self.assertTrue(0.0 <= value <= 1.0, f"{where} = {value!r} outside [0, 1]")
                    if name in BINARY_MEASURES:
                        self.assertIn(value, (0.0, 1.0), where)
                    if name in reference:
                        self.assertAlmostEqual(value, reference[name], delta=TOLERANCE, msg=where)
            for name in ("recall", "success"):
                series = [values[keys[name, c]] for c in cutoffs]
                self.assertEqual(series, sorted(series), f"{label}: query {qid!r} {name} falls as k grows: {series}")
        for cutoff in cutoffs:
            for name in MEASURE_NAMES:
                metric = rag_eval.format_metric(name, cutoff)
                values = [v[keys[name, cutoff]] for v in result["per_query"].values()]
                self.assertAlmostEqual(result["mean"][metric], math.fsum(values) / len(values), delta=TOLERANCE,
                                       msg=f"{label}: mean {metric}")

    def check_functions(self, label, rng, qrels, run, k, options, result):
        """The one-query functions (``recall_at_k`` ...) give what ``evaluate`` gave."""
        qid = rng.choice(sorted(result["per_query"]))
        for cutoff in cutoff_list(k):
            for name, function in FUNCTIONS.items():
                if name not in MEASURE_NAMES:
                    continue
                value = function(run.get(qid, []), qrels[qid], cutoff, **options)
                self.assertEqual(value, result["per_query"][qid][metric_key(result, name, cutoff)],
                                 f"{label}: {function.__name__}(query {qid!r}, k={cutoff})")

    def check_permutations(self, label, rng, qrels, run, k, options, result):
        """Query order, qrels order and run order (inner and outer) change nothing."""
        for _ in range(2):
            again, error = evaluate_or_error(shuffled_dict(rng, qrels), shuffled_dict(rng, run), k, **options)
            self.assertIsNone(error, label)
            self.assertEqual(canonical(again), canonical(result), f"{label}: reordered input, other result")
        self.counter.cases += 2

    def tail_replaced(self, rng, qrels, run, k, judged_only, remove):
        """The run with everything after rank k of each unique ranking replaced (or removed)."""
        changed = {}
        for qid, entry in run.items():
            grades = qrels.get(qid, {})
            effective = unique_ranking(entry, grades, judged_only)
            if len(effective) < k:
                changed[qid] = entry  # nothing after rank k: any addition would enter the top k
                continue
            kth = effective[k - 1]
            pool = list(grades) + make_ids(rng, DOC_IDS, "new", 6)
            if isinstance(entry, dict):
                order = unique_ranking(entry, grades, False)
                head = order[: order.index(kth) + 1]
                new = {doc: entry[doc] for doc in head}
                floor = min(new.values())
                if not remove:
                    for doc in rng.sample(pool, min(len(pool), rng.randint(0, 8))):
                        if doc not in new:
                            new[doc] = floor - rng.choice([1, 0.5, 100, 1e-6])
                changed[qid] = shuffled_dict(rng, new)
            else:
                head = entry[: entry.index(kth) + 1]
                tail = [] if remove else [rng.choice(pool + head) for _ in range(rng.randint(0, 10))]
                changed[qid] = head + tail
        return changed

    def check_cutoff(self, label, rng, qrels, run, k, options, result):
        """Documents after rank k never change a value at k (or below)."""
        cutoff = rng.choice(cutoff_list(k))
        below = [c for c in cutoff_list(k) if c <= cutoff]
        before, error = evaluate_or_error(qrels, run, below, **options)
        self.assertIsNone(error, label)
        for remove in (False, True):
            changed = self.tail_replaced(rng, qrels, run, cutoff, options["judged_only"], remove)
            after, error = evaluate_or_error(qrels, changed, below, **options)
            if error is not None:  # the only judged documents were after the cutoff: refused by design
                self.assertIsNotNone(expected_error(qrels, changed, options["min_grade"], below, options["judged_only"]),
                                     f"{label}: {error}")
                self.counter.skipped += 1
                continue
            self.counter.cases += 1
            self.assertEqual(after["per_query"], before["per_query"],
                             f"{label}: documents after rank {cutoff} changed a value (remove={remove})")
            self.assertEqual(after["mean"], before["mean"], label)

    def check_ideal(self, label, rng, qrels, run, k, options):
        """Judged documents ranked by grade score nDCG 1 at every k."""
        ideal_run = dict(run)
        targets = []
        for qid, grades in qrels.items():
            if not any(g >= options["min_grade"] for g in grades.values()):
                continue
            docs = list(grades)
            rng.shuffle(docs)
            docs.sort(key=lambda doc: grades[doc], reverse=True)  # ties in grade: any order
            tail = [doc for doc in make_ids(rng, DOC_IDS, "u", rng.randint(0, 4)) if doc not in grades]
            ranking = docs + tail
            ranking += [rng.choice(ranking) for _ in range(rng.randint(0, 3))]  # duplicates change nothing
            if rng.random() < 0.5:
                ideal_run[qid] = ranking
            else:
                ideal_run[qid] = {doc: len(ranking) - i for i, doc in enumerate(dict.fromkeys(ranking))}
            targets.append(qid)
        result, error = evaluate_or_error(qrels, ideal_run, k, **options)
        self.assertIsNone(error, label)
        self.counter.cases += 1
        for qid in targets:
            for cutoff in cutoff_list(k):
                value = result["per_query"][qid][metric_key(result, "ndcg", cutoff)]
                self.assertAlmostEqual(value, 1.0, delta=TOLERANCE,
                                       msg=f"{label}: ideal ranking of {qid!r} scores nDCG@{cutoff} = {value!r}")

    def test_generated_cases(self):
        self.counter = Counter()
        rng = random.Random(self.SEED)
        for index in range(self.DATASETS):
            seed = rng.randrange(2**32)
            case_rng = random.Random(seed)
            exotic = case_rng.random() < 0.3
            qrels, run = generate(case_rng, exotic=exotic)
            if case_rng.random() < 0.08:
                run["not-in-qrels\u00e9"] = ["x"]
            drop = "not-in-qrels\u00e9" in run
            if drop:
                with self.assertRaises(ValueError, msg=f"seed {seed}: unknown run query"):
                    rag_eval.evaluate(qrels, run, 5)
            k = random_cutoffs(case_rng)
            # Every convention for the cheap checks; a random few for the dearer ones.
            for number, options in enumerate(CONVENTIONS):
                label = f"seed {seed}, k={k}, {options}"
                result, error = evaluate_or_error(qrels, run, k, drop_unknown_queries=drop, **options)
                why = expected_error(qrels, run, options["min_grade"], k, options["judged_only"], drop)
                if why is not None:
                    self.assertIsNotNone(error, f"{label}: evaluate accepted input that must be refused ({why})")
                    self.counter.errors += 1
                    self.counter.reasons[why] = self.counter.reasons.get(why, 0) + 1
                    continue
                self.assertIsNone(error, f"{label}: evaluate refused valid input")
                self.counter.cases += 1
                run_ = run
                if drop:  # the unknown query is dropped and changes nothing else
                    self.assertEqual(result["dropped"], ["not-in-qrels\u00e9"], label)
                    run_ = {qid: entry for qid, entry in run.items() if qid in qrels}
                    without, error = evaluate_or_error(qrels, run_, k, **options)
                    self.assertIsNone(error, label)
                    self.assertEqual(canonical(dict(result, dropped=[])), canonical(without), label)
                    result = without
                self.check_result(label, qrels, run_, k, options, result)
                if case_rng.random() < 0.3:
                    self.check_functions(label, case_rng, qrels, run_, k, options, result)
                if case_rng.random() < 0.3:
                    self.check_permutations(label, case_rng, qrels, run_, k, options, result)
                if case_rng.random() < 0.3:
                    self.check_cutoff(label, case_rng, qrels, run_, k, options, result)
                if case_rng.random() < 0.3:
                    self.check_ideal(label, case_rng, qrels, run_, k, options)
        counter = self.counter
        # The generator must really exercise the properties, and mostly on valid input.
        self.assertGreaterEqual(counter.cases, self.DATASETS * 40 // 3, vars(counter))  # 8,000 for 600
        # every reason evaluate() refuses these cases for, seen (unknown run queries are dropped or checked above)
        self.assertEqual(set(counter.reasons), {"no query has a relevant document"}, vars(counter))
        self.assertGreaterEqual(min(counter.reasons.values()), 5, vars(counter))
        self.assertLess(counter.errors, counter.cases / 4, vars(counter))
        GENERATED["evaluate"] = counter.cases
        GENERATED["refused"] = counter.errors

    def test_single_query_functions(self):
        """The one-query functions on their own: bounds and the reference, thousands of rankings."""
        rng = random.Random(self.SEED + 1)
        count = 0
        for _ in range(600 if FULL else 300):
            seed = rng.randrange(2**32)
            case_rng = random.Random(seed)
            qrels, run = generate(case_rng, max_queries=1, exotic=True, anchor_probability=0.5)
            (qid, grades), = qrels.items()
            entry = run.get(qid, [])
            options = case_rng.choice(CONVENTIONS)
            cutoff = case_rng.randint(1, 20)
            relevant = any(g >= options["min_grade"] for g in grades.values())
            for name, function in FUNCTIONS.items():
                value = function(entry, grades, cutoff, **options)
                where = f"seed {seed}: {function.__name__}(k={cutoff}, {options})"
                self.assertTrue(0.0 <= value <= 1.0, f"{where} = {value!r}")
                if relevant:
                    self.assertAlmostEqual(value, reference_values(entry, grades, cutoff, **options)[name],
                                           delta=TOLERANCE, msg=where)
                elif name in ("recall", "ap", "ndcg", "mrr", "success", "precision"):
                    # No relevant document: nothing can be found.  (nDCG can still
                    # see grade-1 gains under min grade 2; it is checked by bounds only.)
                    if name != "ndcg":
                        self.assertEqual(value, 0.0, where)
                count += 1
        self.assertGreaterEqual(count, 4000 if FULL else 2000)  # 7 functions a ranking
        GENERATED["functions"] = count


GENERATED = {}


class FormatEquivalenceTest(unittest.TestCase):
    """A ranking as a JSON list, a scored JSON run, TREC, JSONL, gzipped: the same numbers and bytes."""

    SEED = 777
    DATASETS = 60 if FULL else 6

    def setUp(self):
        self.directory = tempfile.mkdtemp(prefix="rag_eval_invariants_")
        self.addCleanup(shutil.rmtree, self.directory)

    def path(self, name):
        return os.path.join(self.directory, name)

    def write_forms(self, rng, qrels, run, tag):
        """Every form of the qrels and of the run, as files; returns (qrels paths, run paths)."""
        scored_json, trec, jsonl_lists, jsonl_scored = ranked_forms(rng, run)
        qrels_paths = [
            write_text(self.path(f"{tag}-qrels.json"), json_text(rng, qrels)),
            write_text(self.path(f"{tag}-qrels.shuffled.json"), json_text(rng, shuffled_dict(rng, qrels))),
            write_text(self.path(f"{tag}-qrels.trec"), trec_qrels_text(rng, qrels)),
            write_text(self.path(f"{tag}-qrels.trec.gz"), trec_qrels_text(rng, qrels), gzipped=True),
            write_text(self.path(f"{tag}-qrels.json.gz"), json_text(rng, qrels), gzipped=True),
        ]
        run_paths = {
            "list": write_text(self.path(f"{tag}-run.json"), json_text(rng, run)),
            "list.gz": write_text(self.path(f"{tag}-run.json.gz"), json_text(rng, run), gzipped=True),
            "scored": write_text(self.path(f"{tag}-run.scored.json"), json_text(rng, shuffled_dict(rng, scored_json))),
            "scored.gz": write_text(self.path(f"{tag}-run.scored.json.gz"), json_text(rng, scored_json), gzipped=True),
            "trec": write_text(self.path(f"{tag}-run.trec"), trec),
            "trec.gz": write_text(self.path(f"{tag}-run.trec.gz"), trec, gzipped=True),
            "jsonl": write_text(self.path(f"{tag}-run.jsonl"), jsonl_text(rng, jsonl_lists)),
            "jsonl-scored.gz": write_text(self.path(f"{tag}-run.scored.jsonl.gz"), jsonl_text(rng, jsonl_scored),
                                          gzipped=True),
        }
        return qrels_paths, run_paths, scored_json

    def test_every_form_gives_the_same_result_and_stdout(self):
        rng = random.Random(self.SEED)
        results = cli_calls = 0
        for index in range(self.DATASETS):
            seed = rng.randrange(2**32)
            case_rng = random.Random(seed)
            qrels, run = generate(case_rng, allow_scored=False, allow_empty=False, anchor_probability=1.0)
            run = {qid: ranking for qid, ranking in run.items() if ranking}  # TREC cannot say "nothing"
            qrels_paths, run_paths, scored_json = self.write_forms(case_rng, qrels, run, index)
            k = random_cutoffs(case_rng)
            options = case_rng.choice(CONVENTIONS)
            label = f"seed {seed}, k={k}, {options}"
            expected, error = evaluate_or_error(qrels, run, k, **options)
            self.assertIsNone(error, label)
            self.assertEqual(canonical(evaluate_or_error(qrels, scored_json, k, **options)[0]), canonical(expected),
                             f"{label}: scored JSON run in memory")
            for path in qrels_paths:
                self.assertEqual(rag_eval.read_qrels(path), qrels, f"{label}: {path}")
            for form, path in run_paths.items():
                got, error = evaluate_or_error(qrels, rag_eval.read_run(path), k, **options)
                self.assertIsNone(error, f"{label}: {form}")
                self.assertEqual(canonical(got), canonical(expected), f"{label}: run as {form}")
                results += 1
            # The command line: every run form, with the qrels in JSON and in a random other form.
            fmt = case_rng.choice(FORMATS)
            digits = case_rng.choice([4, 6, 17])
            flags = ["--k", ",".join(map(str, cutoff_list(k))), "--measures", ",".join(MEASURE_NAMES),
                     "--gain", options["gain"], "--min-grade", str(options["min_grade"]), "--format", fmt,
                     "--per-query", "--digits", str(digits)]
            if options["judged_only"]:
                flags.append("--judged-only")
            cutoffs = k if isinstance(k, int) else cutoff_list(k)
            report = rag_eval.build_report(rag_eval.evaluate(qrels, run, cutoffs, measures=MEASURE_NAMES,
                                                             **options), per_query=True)
            want = rag_eval.FORMATTERS[fmt](report, digits)
            for number, (form, path) in enumerate(run_paths.items()):
                qrels_path = qrels_paths[number % len(qrels_paths)]  # every qrels form, with several run forms
                code, out, err = run_with_pinned_clock([qrels_path, path] + flags)
                self.assertEqual(code, 0, f"{label}: {form} {qrels_path}: {err}")
                self.assertEqual(out, want, f"{label}: stdout of {form} with {os.path.basename(qrels_path)}")
                cli_calls += 1
        self.assertEqual(results, 8 * self.DATASETS)  # every run form of every dataset, read and on the command line
        self.assertEqual(cli_calls, 8 * self.DATASETS)
        GENERATED["format results"] = results
        GENERATED["format cli"] = cli_calls

    def test_scored_line_order_changes_nothing(self):
        """Scored runs with ties and repeated documents: any TREC / JSONL / dict order, the same result;
        and reading them streamed (``depth``, as the command line does) gives what the whole run gives."""
        rng = random.Random(self.SEED + 1)
        count = 0
        refused_when_streamed = []  # (label, path): see test_a_judged_document_below_the_cut_counts_in_every_format
        for index in range(self.DATASETS):
            seed = rng.randrange(2**32)
            case_rng = random.Random(seed)
            qrels, _ = generate(case_rng, allow_empty=False, anchor_probability=1.0)
            # Scores with many ties, and each document maybe listed twice (the higher score counts).
            lines, best = [], {}
            for qid, grades in qrels.items():
                docs = list(grades) + make_ids(case_rng, DOC_IDS, "u", case_rng.randint(0, 6))
                choices = SCORE_CHOICES
                if case_rng.random() < 0.3:
                    # Long enough for the streaming reader to prune (past 2 * depth + 64 documents),
                    # with few distinct scores, so that ties straddle its floor.
                    docs += [f"long{case_rng.randrange(10**6)}" for i in range(case_rng.randint(110, 200))]
                    choices = case_rng.choice([[1, 2], [0, 1, 2, 3], [2, 3, 3.0]])
                    case_rng.shuffle(docs)
                for doc in docs:
                    for _ in range(case_rng.choice([1, 1, 1, 2])):
                        score = case_rng.choice(choices)
                        lines.append((qid, doc, score))
                        best[qid] = best.get(qid, {})
                        best[qid][doc] = max(score, best[qid].get(doc, score))
            k = random_cutoffs(case_rng)
            options = case_rng.choice(CONVENTIONS)
            label = f"seed {seed}, k={k}, {options}"
            expected, error = evaluate_or_error(qrels, best, k, **options)
            if error is not None:  # nothing judged in any top k: refused in every format (see the test below)
                self.assertIsNotNone(expected_error(qrels, best, options["min_grade"], k, options["judged_only"]),
                                     f"{label}: {error}")
                continue
            expected = canonical(expected)
            depth = max(cutoff_list(k)) + 1
            keep = None
            if options["judged_only"]:  # as the command line does: unjudged documents go before the depth cut
                def keep(qid, doc, qrels=qrels, min_grade=options["min_grade"]):
                    grades = qrels.get(qid, {})
                    return doc in grades or all(g < min_grade for g in grades.values())
            json_path = write_text(self.path(f"{index}-best.json"), json_text(case_rng, shuffled_dict(case_rng, best)))
            flags = ["--k", ",".join(map(str, cutoff_list(k))), "--per-query", "--measures", ",".join(MEASURE_NAMES),
                     "--gain", options["gain"], "--min-grade", str(options["min_grade"])]
            flags += ["--judged-only"] if options["judged_only"] else []
            outputs = set()
            for attempt in range(3):
                case_rng.shuffle(lines)
                trec = "".join(f"{qid} Q0 {doc} 0 {score_text(score)} t\n" for qid, doc, score in lines)
                jsonl = jsonl_text(case_rng, [{"query_id": q, "doc_id": d, "score": s} for q, d, s in lines])
                qrels_path = write_text(self.path(f"{index}-{attempt}.qrels"), trec_qrels_text(case_rng, qrels))
                for name, text in ((f"{index}-{attempt}.trec", trec), (f"{index}-{attempt}.jsonl", jsonl)):
                    path = write_text(self.path(name), text)
                    for depth_ in (None, depth):
                        got, error = evaluate_or_error(qrels, rag_eval.read_run(path, depth=depth_, keep=keep), k,
                                                       **options)
                        count += 1
                        if error is not None and depth_ is not None:
                            refused_when_streamed.append((label, name, error))
                            continue
                        self.assertIsNone(error, f"{label}: {name}, depth {depth_}")
                        self.assertEqual(canonical(got), expected, f"{label}: {name}, depth {depth_}")
                    outputs.add(run_with_pinned_clock([qrels_path, path] + flags)[:2])
            json_output = run_with_pinned_clock([qrels_path, json_path] + flags)[:2]
            refused = nothing_evaluated(qrels, best, options["min_grade"], k, options["judged_only"])
            self.assertEqual(json_output[0], 2 if refused else 0, f"{label}: {refused}")
            if outputs != {json_output}:
                refused_when_streamed.append((label, "command line", sorted(outputs)[0][0]))
            self.assertEqual(len(outputs), 1, f"{label}: line order changed the command line's exit code or stdout")
        # 12 reads per dataset; a few cases judge nothing in any top k, and are refused (650 of 720 for 60)
        self.assertGreaterEqual(count, 650 * self.DATASETS // 60)
        GENERATED["line-order results"] = count
        # A judged document pushed below the depth kept while streaming must not
        # turn an accepted run into a refused one (see the test below).
        self.assertEqual(len(refused_when_streamed), 0, f"streamed reads refused a run that evaluate() accepts "
                                                        f"whole; the first: {refused_when_streamed[:2]}")

    def test_a_judged_document_below_the_cut_counts_in_every_format(self):
        """Regression: the check for a run that shares nothing with the qrels
        once looked at every document of a JSON run but only at the part of a
        streamed TREC / JSONL run that was kept, so one run got two answers.
        Readers now report every document before any cut: the judged "a" at
        rank 3 (k = 1) makes the run evaluated, in every format."""
        qrels = write_text(self.path("q.json"), '{"q1": {"a": 1}}')
        trec = write_text(self.path("run.trec"), "q1 Q0 x 1 3 t\nq1 Q0 y 2 2 t\nq1 Q0 a 3 1 t\n")
        jsonl = write_text(self.path("run.jsonl"), "".join(
            json.dumps({"query_id": "q1", "doc_id": d, "score": s}) + "\n" for d, s in (("x", 3), ("y", 2), ("a", 1))))
        scored = write_text(self.path("run.json"), '{"q1": {"x": 3, "y": 2, "a": 1}}')
        ranked = write_text(self.path("ranked.json"), '{"q1": ["x", "y", "a"]}')
        answers = {os.path.basename(path): run_with_pinned_clock([qrels, path, "--k", "1"])[:2]
                   for path in (ranked, scored, trec, jsonl)}
        self.assertEqual(answers["run.json"][0], 0)
        codes = {name: code for name, (code, _) in answers.items()}
        self.assertEqual(len(set(codes.values())), 1, f"exit codes of rag_eval q.json RUN --k 1: {codes}")
        self.assertEqual(len(set(answers.values())), 1, answers)


DRIVER = r"""
import contextlib, io, json, os, sys, warnings
sys.path.insert(0, sys.argv[1])
import rag_eval
calls = json.load(open(sys.argv[2], encoding="utf-8"))
results = []
for argv in calls:
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            code = rag_eval.main(argv)
        except BaseException as exc:
            code = repr(exc)
    results.append([code, out.getvalue(), err.getvalue()])
sys.stdout.write(json.dumps({"version": list(sys.version_info[:3]), "results": results}))
"""


def find_interpreter(minor):
    """A python ``minor`` ("3.9") executable: pyenv's versions first, then PATH; None if none runs."""
    candidates = []
    pyenv = shutil.which("pyenv")
    if pyenv:
        try:
            root = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            root = ""
        if root:
            candidates += sorted(glob.glob(os.path.join(root, "versions", f"{minor}.*", "bin", f"python{minor}")),
                                 reverse=True)
    found = shutil.which(f"python{minor}")
    if found:
        candidates.append(found)
    for candidate in candidates:
        try:
            probe = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                   capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0 and probe.stdout.strip() == minor:
            return candidate
    return None


def stop(process):
    """Kill ``process`` if it still runs, and reap it."""
    if process.poll() is None:
        process.kill()
    process.wait()


class ByteIdenticalOutputTest(unittest.TestCase):
    """The same inputs, the same bytes: twice in-process, under other hash seeds, on Python 3.9 and 3.13."""

    SEED = 4242

    @classmethod
    def setUpClass(cls):
        cls.directory = tempfile.mkdtemp(prefix="rag_eval_bytes_")
        cls.addClassCleanup(shutil.rmtree, cls.directory)
        cls.calls = cls.build_calls(random.Random(cls.SEED), cls.directory)
        cls.calls_path = write_text(os.path.join(cls.directory, "calls.json"), json.dumps(cls.calls))
        # The child under another hash seed (test_other_hash_seed) works on the other core meanwhile.
        cls.other_seed = cls.start_driver(sys.executable, 12345)
        cls.addClassCleanup(stop, cls.other_seed[0])  # before the folder goes; even if what follows fails
        cls.first = [list(run_with_pinned_clock(argv)) for argv in cls.calls]

    @staticmethod
    def build_calls(rng, directory):
        """The command lines compared: every format with --per-query on random data, and gates."""
        calls = []
        measures = ",".join(MEASURE_NAMES)
        # (queries, resamples, formats of the gate run): 45 and 300 queries take the sampled sign-flip
        # test (more than 16 differ), 300 the double-or-nothing bootstrap (more than 250 queries).
        # The default run draws fewer resamples (the same code, fewer repetitions of it); RAG_EVAL_FULL=1 all.
        plan = [(12, 1000 if FULL else 200, ("json", "markdown")), (45, 500 if FULL else 100, FORMATS),
                (300, 200 if FULL else 100, ("json",))]
        for index, (queries, resamples, gate_formats) in enumerate(plan):
            qrels, run, old = {}, {}, {}
            for number in range(queries):
                q, r = generate(rng, max_queries=1, allow_empty=False, anchor_probability=0.8)
                (qid, grades), = q.items()
                qid = f"{qid}-{number}"
                qrels[qid] = grades
                ranking = list(r.values())[0] if r else []
                if ranking:
                    if isinstance(ranking, dict):
                        ranking = unique_ranking(ranking, {}, False)
                    run[qid] = ranking
                    # The older run: the same, with a few documents moved.
                    older = list(ranking)
                    if rng.random() < 0.5:
                        rng.shuffle(older)
                    old[qid] = older
            qrels_path = write_text(os.path.join(directory, f"{index}-qrels.json"), json.dumps(qrels))
            run_path = write_text(os.path.join(directory, f"{index}-run.json"), json.dumps(run))
            old_path = write_text(os.path.join(directory, f"{index}-old.json"), json.dumps(old))
            baseline = os.path.join(directory, f"{index}-baseline.json")
            common = ["--k", "1,3,5,10", "--measures", measures]
            code, out, err = run_with_pinned_clock([qrels_path, old_path] + common + ["--save-baseline", baseline])
            assert code == 0 and os.path.exists(baseline), (code, err)
            for fmt in FORMATS:
                calls.append([qrels_path, run_path, "--format", fmt, "--per-query"] + common)
                calls.append([qrels_path, run_path, "--format", fmt, "--per-query", "--gain", "linear",
                              "--min-grade", "2", "--judged-only", "--k", "2,20"])
                if fmt in gate_formats:
                    calls.append([qrels_path, run_path, "--format", fmt, "--per-query", "--baseline", baseline,
                                  "--gate", "significant", "--ci", "--resamples", str(resamples),
                                  "--max-drop", "0.001"] + common)
            calls.append([qrels_path, run_path, "--baseline-run", old_path, "--gate", "significant", "--ci",
                          "--resamples", str(resamples), "--seed", "7"] + common)
        return calls

    def assert_same_outputs(self, got, want, what):
        for argv, a, b in zip(self.calls, got, want):
            if a != b:
                for stream, x, y in (("exit code", a[0], b[0]), ("stdout", a[1], b[1]), ("stderr", a[2], b[2])):
                    if x == y:
                        continue
                    if isinstance(x, str) and isinstance(y, str):
                        lines = [(n, p, q) for n, (p, q) in enumerate(zip(x.splitlines(), y.splitlines()), 1) if p != q]
                        first = lines[0] if lines else ("length", len(x), len(y))
                        self.fail(f"{what}: {stream} differs for rag_eval {' '.join(argv[2:])}; "
                                  f"{len(lines)} lines differ, first (line, {what}, expected): {first!r}")
                    self.fail(f"{what}: {stream} differs for {argv}: {x!r} != {y!r}")
        self.assertEqual(len(got), len(want))

    def test_calls_cover_every_format_and_the_gate(self):
        self.assertGreaterEqual(len(self.calls), 28)
        codes = {code for code, _, _ in self.first}
        # 3: inconclusive, the third outcome of --gate significant
        self.assertTrue(codes <= {0, 1, 3}, [(argv, code, err) for argv, (code, _, err) in zip(self.calls, self.first)
                                             if code not in (0, 1, 3)])
        self.assertTrue(any('"p_holm"' in out for _, out, _ in self.first), "no paired statistics were reported")
        self.assertTrue(any('"intervals"' in out for _, out, _ in self.first), "no --ci intervals were reported")

    def test_repeated_in_process(self):
        second = [list(run_with_pinned_clock(argv)) for argv in self.calls]
        self.assert_same_outputs(second, self.first, "second in-process run")

    @classmethod
    def start_driver(cls, executable, hash_seed):
        """Start DRIVER on the calls under ``executable`` with PYTHONHASHSEED ``hash_seed``:
        (process, its stdout file, its stderr file); files, so that no pipe fills while it runs."""
        env = child_env(PYTHONHASHSEED=str(hash_seed), SOURCE_DATE_EPOCH="0", PYENV_VERSION=None)
        out, err = (os.path.join(cls.directory, f"driver-{hash_seed}.{name}") for name in ("out", "err"))
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            process = subprocess.Popen([executable, "-c", DRIVER, REPO, cls.calls_path], stdin=subprocess.DEVNULL,
                                       stdout=stdout, stderr=stderr, env=env)
        return process, out, err

    def driver_results(self, started):
        """(Python version, results) of a driver started by start_driver, once it ends."""
        process, out, err = started
        try:
            process.wait(timeout=300)  # a hang guard
        finally:
            stop(process)
        with open(err, "rb") as handle:
            self.assertEqual(process.returncode, 0, handle.read().decode("utf-8", "replace")[-2000:])
        with open(out, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
        return data["version"], data["results"]

    def run_driver(self, executable, hash_seed):
        return self.driver_results(self.start_driver(executable, hash_seed))

    def test_other_hash_seed(self):
        _, results = self.driver_results(self.other_seed)
        self.assert_same_outputs(results, self.first, f"python {sys.executable} with PYTHONHASHSEED=12345")

    def interpreters(self):
        interpreters = {minor: find_interpreter(minor) for minor in ("3.9", "3.13")}
        missing = [minor for minor, path in interpreters.items() if path is None]
        if missing:
            self.skipTest(f"no Python {' or '.join(missing)} found (pyenv or PATH)")
        return interpreters

    def test_ndcg_is_the_same_number_on_39_and_313(self):
        """The smallest case found: one query, four documents.  DCG is a plain
        ``sum()`` of floats, and Python 3.12 made ``sum()`` compensated, so
        3.9 and 3.13 print different last digits (and --per-query JSON,
        gate deltas and intervals follow)."""
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import rag_eval; "
                "print(repr(rag_eval.ndcg_at_k(['b', 'a', 'c', 'd'], {'a': 1, 'b': 0, 'c': 2, 'd': 2}, 4)))")
        values = {}
        for minor, path in sorted(self.interpreters().items()):
            # One child per interpreter: nothing to share, so no bytecode cache (whose first user
            # compiles every module it imports, the standard library's too).
            done = subprocess.run([path, "-c", code, REPO], capture_output=True, text=True, timeout=120,
                                  env=child_env(PYENV_VERSION=None, PYTHONPYCACHEPREFIX=None,
                                                PYTHONDONTWRITEBYTECODE="1"))
            self.assertEqual(done.returncode, 0, done.stderr)
            values[minor] = done.stdout.strip()
        self.assertEqual(values["3.9"], values["3.13"], f"ndcg_at_k differs across Pythons: {values}")

    @unittest.skipUnless(FULL, "runs the whole set on two more interpreters (5 s): set RAG_EVAL_FULL=1")
    def test_python_39_and_313_agree(self):
        interpreters = self.interpreters()
        outputs = {}
        for seed, (minor, path) in enumerate(sorted(interpreters.items()), 1):
            version, outputs[minor] = self.run_driver(path, seed)
            self.assertEqual("%d.%d" % tuple(version[:2]), minor)
        self.assert_same_outputs(outputs["3.13"], outputs["3.9"], "Python 3.13 (vs 3.9)")
        self.assert_same_outputs(outputs["3.9"], self.first, f"Python 3.9 (vs this Python, {sys.version.split()[0]})")


if HAVE_HYPOTHESIS:
    # deadline=None: hypothesis would otherwise fail an example that runs long on a loaded machine.
    HYPOTHESIS_SETTINGS = settings(max_examples=60 if FULL else 15, deadline=None, derandomize=True, database=None,
                                   suppress_health_check=list(HealthCheck))

    IDS = st.sampled_from(DOC_IDS + EXOTIC_IDS + ["d1", "d2", "d3", "d4"])

    @st.composite
    def cases(draw):
        """qrels and a run, each query's run a list (duplicates) or a scored dict (ties), some skipped."""
        qids = draw(st.lists(st.sampled_from(QUERY_IDS + EXOTIC_IDS), min_size=1, max_size=5, unique=True))
        qrels, run = {}, {}
        for qid in qids:
            qrels[qid] = draw(st.dictionaries(IDS, st.integers(0, 3), max_size=6))
            pool = list(qrels[qid]) + ["u1", "u2", "\u00fc3"]
            kind = draw(st.sampled_from(["skip", "list", "scored"]))
            if kind == "list":
                run[qid] = draw(st.lists(st.sampled_from(pool), max_size=12))
            elif kind == "scored":
                run[qid] = draw(st.dictionaries(st.sampled_from(pool),
                                                st.sampled_from(SCORE_CHOICES) | st.integers(-3, 3), max_size=12))
        k = draw(st.lists(st.integers(1, 20), min_size=1, max_size=4))
        options = draw(st.sampled_from(CONVENTIONS))
        return qrels, run, k, options

    @unittest.skipUnless(HAVE_HYPOTHESIS, "hypothesis is not installed")
    class HypothesisPropertiesTest(unittest.TestCase):
        """The same properties, on cases that hypothesis draws (and shrinks on failure)."""

        def evaluate(self, case):
            qrels, run, k, options = case
            result, error = evaluate_or_error(qrels, run, k, **options)
            why = expected_error(qrels, run, options["min_grade"], k, options["judged_only"])
            self.assertEqual(error is None, why is None, f"expected error: {why}; got: {error}")
            return result

        @HYPOTHESIS_SETTINGS
        @given(cases())
        def test_bounds_reference_and_monotone(self, case):
            result = self.evaluate(case)
            if result is not None:
                GeneratedPropertiesTest.check_result(self, "hypothesis", case[0], case[1], case[2], case[3], result)

        @HYPOTHESIS_SETTINGS
        @given(cases(), st.randoms(use_true_random=False))
        def test_order_changes_nothing(self, case, rnd):
            qrels, run, k, options = case
            result = self.evaluate(case)
            if result is not None:
                again = rag_eval.evaluate(shuffled_dict(rnd, qrels), shuffled_dict(rnd, run), k,
                                          measures=MEASURE_NAMES, **options)
                self.assertEqual(canonical(again), canonical(result))

        @HYPOTHESIS_SETTINGS
        @given(cases(), st.randoms(use_true_random=False), st.booleans())
        def test_documents_after_the_cutoff_never_matter(self, case, rnd, remove):
            qrels, run, k, options = case
            if self.evaluate(case) is None:
                return
            cutoff = max(k)
            before = rag_eval.evaluate(qrels, run, k, measures=MEASURE_NAMES, **options)
            changed = GeneratedPropertiesTest.tail_replaced(self, rnd, qrels, run, cutoff, options["judged_only"],
                                                            remove)
            after, error = evaluate_or_error(qrels, changed, k, **options)
            if error is None:
                self.assertEqual(after["per_query"], before["per_query"])

        @HYPOTHESIS_SETTINGS
        @given(cases(), st.randoms(use_true_random=False))
        def test_ideal_ranking_scores_ndcg_one(self, case, rnd):
            qrels, run, k, options = case
            self.counter = Counter()
            if any(any(g >= options["min_grade"] for g in grades.values()) for grades in qrels.values()):
                GeneratedPropertiesTest.check_ideal(self, "hypothesis", rnd, qrels, run, k, options)

        @HYPOTHESIS_SETTINGS
        @given(st.lists(st.sampled_from(DOC_IDS[:12] + ["u1", "u2"]), min_size=1, max_size=15),
               st.dictionaries(st.sampled_from(DOC_IDS[:12]), st.integers(0, 3), min_size=1, max_size=6),
               st.sampled_from(CONVENTIONS))
        def test_recall_and_success_never_fall_as_k_grows(self, ranking, grades, options):
            for function in (rag_eval.recall_at_k, rag_eval.success_at_k):
                series = [function(ranking, grades, k, **options) for k in range(1, 21)]
                self.assertEqual(series, sorted(series), function.__name__)
else:
    @unittest.skipUnless(HAVE_HYPOTHESIS, "hypothesis is not installed")
    class HypothesisPropertiesTest(unittest.TestCase):
        def test_hypothesis_properties(self):
            """Skipped: hypothesis is not installed."""


class TestBootstrapPercentileRanks(unittest.TestCase):
    """The percentile interval's ends are the ceil(tail R)-th and ceil((1 - tail) R)-th smallest of
    R resampled means, tail = (1 - confidence) / 2, whatever the resampling draws.  Kills: either
    rank (or the index it is read at) off by one, in the exact path and in the one that sums bounds
    first (2,500 values, from COARSE_FROM on).

    With R odd and the confidence near 0 both ranks are the median's, (R + 1) / 2: the interval is
    one point.  A rank one off reads the next mean, which differs from the median for continuous
    values (and with R = 1 there is no next one).  Confidences that share a rank on the same draws
    share that end of the interval.
    """

    def values(self, n, seed):
        rng = random.Random(seed)
        return [rng.random() for _ in range(n)]

    def interval(self, values, resamples, seed, confidence):
        return rag_eval.bootstrap_interval(values, resamples, random.Random(seed), confidence=confidence)

    def test_near_zero_confidence_is_the_median(self):
        for n in (30, 2_500):
            for resamples in (1, 3, 101):
                for seed in range(3):
                    with self.subTest(n=n, resamples=resamples, seed=seed):
                        low, high = self.interval(self.values(n, seed), resamples, seed, 1e-9)
                        self.assertEqual(low, high)

    def test_ranks_against_each_other(self):
        """R = 40 means: 95% reads ranks 1 and 39 (ceil(0.025 * 40), ceil(0.975 * 40)), 94% ranks 2 and 39
        (ceil(1.2), ceil(38.8)), 99% ranks 1 and 40 (ceil(0.2), ceil(39.8)); the same draws, so a shared
        rank gives the same end."""
        for seed in range(4):
            values = self.values(30, seed)
            with self.subTest(seed=seed):
                at_95 = self.interval(values, 40, seed, 0.95)  # ranks 1, 39
                at_94 = self.interval(values, 40, seed, 0.94)  # ranks 2, 39
                at_99 = self.interval(values, 40, seed, 0.99)  # ranks 1, 40
                self.assertEqual(at_95.high, at_94.high)
                self.assertEqual(at_95.low, at_99.low)
                self.assertLess(at_95.low, at_94.low)  # rank 1 below rank 2: continuous values
                self.assertLess(at_95.high, at_99.high)  # rank 39 below rank 40


class TestWideStatisticsAcrossPythons(unittest.TestCase):
    """Resampled statistics of many queries give the same bits on Python 3.9 as on 3.13.

    Python 3.9 has no int.bit_count, so there every random half is summed by lookup tables; on 3.10
    and later a wide column (from LOOKUP_BELOW positions, and from COARSE_FROM with coarse bounds
    first) is summed bit plane by bit plane.  Both ways must be exact, so any difference is a bug in
    one of them (a bit plane left out of both the bounds and the rest, say).  Skipped when either
    interpreter is missing."""

    CODE = """if 1:
        import random, sys
        sys.path.insert(0, sys.argv[1])
        import rag_eval
        rng = random.Random(7)
        for n in (600, 2500):
            deltas = [rng.random() - 0.5 for _ in range(n)]
            print(repr(rag_eval.sign_flip_test(deltas, 300, random.Random(1))))
            print(repr(tuple(rag_eval.bootstrap_interval(deltas, 300, random.Random(1)))))
            before = {f"q{i:04d}": rng.random() for i in range(n)}
            after = {q: min(1.0, max(0.0, v + rng.random() * 0.2 - 0.11)) for q, v in before.items()}
            compared = rag_eval.compare_paired("ndcg@10", before, after, resamples=300)
            print(repr((compared.p_value, tuple(compared.interval))))
            print(repr(rag_eval.maxt({"a": {q: after[q] - before[q] for q in before},
                                      "b": {q: (after[q] - before[q]) * 0.5 for q in list(before)[::3]}}, 300)))
    """

    def test_the_same_bits(self):
        interpreters = {minor: find_interpreter(minor) for minor in ("3.9", "3.13")}
        if None in interpreters.values():
            self.skipTest("Python 3.9 or 3.13 not found (pyenv or PATH)")
        printed = {}
        for minor, executable in interpreters.items():
            done = subprocess.run([executable, "-c", self.CODE, REPO], capture_output=True, text=True, timeout=300,
                                  env=child_env(PYENV_VERSION=None, PYTHONPYCACHEPREFIX=None,
                                                PYTHONDONTWRITEBYTECODE="1"))
            self.assertEqual(done.returncode, 0, done.stderr)
            printed[minor] = done.stdout
        self.assertEqual(len(printed["3.9"].splitlines()), 8, printed)
        self.assertEqual(printed["3.9"], printed["3.13"])


def tearDownModule():
    if GENERATED and os.environ.get("RAG_EVAL_INVARIANTS_VERBOSE"):
        sys.stderr.write(f"\ngenerated cases: {GENERATED}\n")


if __name__ == "__main__":
    unittest.main()
