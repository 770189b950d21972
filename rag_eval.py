# SPDX-License-Identifier: MIT
# /// script
# requires-python = ">=3.9"
# dependencies = []
# ///
"""Score a retrieval run against relevance judgments and gate CI on regressions.

A RAG answer fails in three places: retrieval misses the evidence, ranking
pushes it below the cutoff, or generation misuses it.  This module measures
the first two with arithmetic over labels, cheap enough for every commit.

Public names (``__all__``)
==========================

======================  ==========================================================
``evaluate``            score every query: means, per-query values, unscored
``evaluate_spans``      the same over evidence spans (docs/spans.md)
``regressions``         metrics that are missing or fell by more than a tolerance
``gate``                tolerances, floors, slices, paired statistics: the verdict
``GateSettings``        the gate's rule and its settings
``Tolerance``           one metric's allowed drop
``Baseline``            what ``read_baseline`` returns and ``gate`` takes
``notes``               the notes and warnings the command line prints
``compare_paired``      sign-flip test, bootstrap interval, largest drops
``compare_runs``        several runs against a reference, one adjusted family
``read_qrels``          judgments from JSON, JSONL or TREC (gzip, ``-``)
``read_run``            a run from JSON, JSONL or TREC (gzip, ``-``)
``read_baseline``       a flat baseline of means, or an extended one
``read_slices``         query tags, for means per slice
``read_judged``         an LLM judge's scores (Ragas, DeepEval, promptfoo, ...)
``judged_result``       those scores as a result ``gate`` takes
``build_report``        the report of a result
``FORMATTERS``          its renderings: json, table, markdown, csv
``MEASURES``            the table of measures
``parse_metric``        ``"ndcg@10"`` to ``("ndcg", 10)``
``format_metric``       and back
``recall_at_k``         one function per measure: ``(ranking, grades, k)``
``success_at_k``
``reciprocal_rank``
``ndcg_at_k``
``precision_at_k``
``ap_at_k``
``judged_at_k``
``sign_flip_test``      the paired test, usable alone
``bootstrap_interval``  the paired interval, usable alone
``maxt``                step-down MaxT adjusted p-values of a family of tests
``calibrate``           the gate's false-fail rate and power on its own data
``RagEvalError``        the one exception: bad input, located
``main``                the command line; returns the exit code
``parse_args``          its options, as ``main`` reads them
``annotation``          a CI workflow command, escaped (action.py's)
======================  ==========================================================

>>> grades = {"a": 2, "b": 0, "c": 1}
>>> recall_at_k(["b", "a", "x"], grades, k=2)
0.5
>>> reciprocal_rank(["b", "a", "x"], grades, k=2)
0.5
>>> result = evaluate({"q1": grades}, {"q1": ["b", "a", "x"]}, k=2)
>>> result["mean"]["success@2"], result["queries"]
(1.0, 1)

Exit codes of the command line: 0 scored and no regression, 1 at least one
regression, 2 bad usage, bad input or a failure to deliver (a full disk, a
stdout closed from the start or full, memory), 3 inconclusive (``--gate
significant`` found too little evidence either way; ``--inconclusive
pass|fail`` maps it to 0 or 1), 130 interrupted (Ctrl-C), 141 the reader of
stdout went away (``| head``), 143 terminated (SIGTERM).
"""

from __future__ import annotations

__all__ = [
    "Baseline", "FORMATTERS", "GateSettings", "MEASURES", "RagEvalError", "Tolerance", "annotation",
    "ap_at_k", "bootstrap_interval", "build_report", "calibrate", "compare_paired", "compare_runs",
    "evaluate", "evaluate_spans", "format_metric", "gate", "judged_at_k", "judged_result", "main", "maxt",
    "ndcg_at_k", "notes", "parse_args", "parse_metric", "precision_at_k", "read_baseline", "read_judged",
    "read_qrels", "read_run", "read_slices", "recall_at_k", "reciprocal_rank", "regressions",
    "sign_flip_test", "success_at_k",
]
__version__ = "0.1.0"

import io
import json
import math
import os
import re
import stat
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter, abc
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from functools import lru_cache
from itertools import accumulate, chain, groupby, islice, repeat
from operator import getitem, itemgetter, lt, mul, truediv
from types import MappingProxyType
from typing import Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple, Union

# === Constants ===

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2
EXIT_INCONCLUSIVE = 3  # --gate significant found too little evidence either way
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a closed pipe
EXIT_TERMINATED = 143  # 128 + SIGTERM

_DEFAULT_K = 5
_DEFAULT_MAX_DROP = 0.02
_DEFAULT_DIGITS = 4
_GAINS = ("exp", "linear")
_FORMATS = ("auto", "json", "jsonl", "trec")
_MAX_GRADE = 2**31 - 1  # trec_eval reads grades into a C long; beyond that, a float loses them
_MAX_EXP_GRADE = 100  # 2**grade - 1 overflows a float past 1023; far beyond any real label
_LOW_JUDGED = 0.5  # below this share of judged documents, a drop may be an artefact
# A run with results for fewer of the scored queries looks truncated (--allow-partial-run): a real run
# skips a few, not most.
_MIN_COVERAGE = 0.5
# Float noise: 0.52 - 0.02 is 0.5000000000000001, and a drop of exactly the
# tolerance must not count as a regression.
_DROP_EPSILON = 1e-12
_CLIP = 16  # characters of any one input value that an error message quotes
_MAX_ERROR_LINE = 300  # characters of an error line, whatever it quotes
# With evidence judgments, "doc.ndcg@10" is ndcg@10 of the documents the spans lie in (see evaluate_spans).
_DOC_LEVEL = "doc."
# What counts as a JSON object; dict first: isinstance() stops at the common case before the abstract-class check.
_MAPPINGS = (dict, abc.Mapping)


# The conventions every measure shares, for --help and --explain.
_RULES = """\
Top k means the first k unique ids; a repeated id counts once, at its best place
(with --doc-id-sep, k counts documents).  Unjudged documents count as
non-relevant.  Scored runs are ordered by score descending, ties broken by docid
descending (trec_eval's rule; the TREC rank column is ignored).  A query without
a relevant document is not scored (listed in 'unscored'); a judged query the run
skipped scores 0 and stays in the mean."""


# === Exception ===


def _file_name(path):
    """A file name as a message shows it: a newline or other control character in it stays one line."""
    return path if path.isprintable() else ascii(path)


class RagEvalError(ValueError):
    """Bad input or usage: the message says which file (and line) and what is wrong."""

    def __init__(self, message: str, source: Optional[str] = None, line: Optional[int] = None):
        self.detail, self.source, self.line = message, source, line
        if source is not None:
            source = _file_name(source)
            message = f"{source}:{line}: {message}" if line else f"{source}: {message}"
        super().__init__(message)


# === Data types ===

Qrels = Dict[str, Dict[str, int]]
RunEntry = Union[List[str], Dict[str, float]]
Run = Dict[str, RunEntry]
Slices = Dict[str, List[str]]  # qid -> tags


class _Conventions(NamedTuple):
    """How grades become relevance and gain; recorded with every result."""

    gain: str = "exp"  # "exp": 2**grade - 1; "linear": the grade itself
    min_grade: int = 1  # lowest grade that counts as relevant
    judged_only: bool = False  # drop unjudged documents before the cutoff
    doc_id_sep: Optional[str] = None  # score documents: "guide#3" is chunk 3 of document "guide"


class Judged(NamedTuple):
    """One query's ranking after normalisation: all that a measure may read.

    Every unjudged document is alike (not relevant, no gain), so a query is the ranks (1 = best,
    unique ids, ascending, within the deepest cutoff) of its judged documents, and ``ideal`` the
    gains of every judged document, best first, retrieved or not: a ranking of 1,000 documents
    with 20 judged is 20 places, and a measure costs what the judgments cost, not the run.
    """

    relevant: List[int]  # ranks of the relevant documents (grade >= min grade)
    gains: List[Tuple[int, float]]  # (rank, gain) of each document whose gain is not 0
    judged: List[int]  # ranks of the judged documents (any grade >= 0)
    ideal: List[float]
    num_relevant: int


# === Normalising a ranking ===


def _order_scored(scores):
    """Score descending, ties broken by docid descending: trec_eval's order."""
    # (score, docid) pairs compare in C; a key function would cost a Python call per document.
    return [docid for _, docid in sorted(zip(scores.values(), scores), reverse=True)]


def _ranking(entry):
    """The unique ids of a run entry, best first; a repeated id counts at its first place."""
    return _order_scored(entry) if isinstance(entry, _MAPPINGS) else list(dict.fromkeys(entry))


def _judged_filter(qrels, min_grade=1):
    """``--judged-only`` (trec_eval's -J) as a test of one document: ``keep(qid, docid)``."""
    unscored = {qid for qid, grades in qrels.items() if all(grade < min_grade for grade in grades.values())}

    def keep(qid, docid):
        grades = qrels.get(qid)
        return grades is None or docid in grades or qid in unscored

    return keep


def _gain(grade, kind):  # of a positive grade (a grade of 0 gains nothing either way)
    return float(grade) if kind == "linear" else 2.0**grade - 1.0


class _Reduced(NamedTuple):
    """One query of a run, reduced while it was read to what the measures read (see ``Judged``):
    its judged documents' ranks (1 + the documents before it, unjudged ones included) and how many
    it ranks.  The command line reads deep runs so: memory follows the judgments, not the run."""

    length: int  # unique documents ranked, at most the reader's depth
    judged: Tuple[Tuple[int, str], ...]  # (rank, docid) of each judged document within that depth
    tied: Tuple[int, ...]  # the cutoffs with equal scores on both sides
    best: Optional[float]  # the highest score; None for a ranked list (no scores)


class _ReducedRun(dict):
    """qid -> ``_Reduced``: a run as ``_read_run`` reduces it (checked, mapped to documents and filtered as
    it was read), with the run's queries that the qrels lack.  The one other kind of run ``evaluate`` takes:
    deep runs' memory (tools/bench/bench_deep.py: 63 MB against trec_eval's 705 MB at 7,000 x 1,000)."""

    def __init__(self, queries, unknown):
        super().__init__(queries)
        self.unknown = unknown  # sorted


def _judged_from_ranking(ranking, grades, depth, conv):
    """Turn one query's unique ranking into what the measures read, once."""
    placed = [(rank, grades[docid]) for rank, docid in enumerate(ranking[:depth], 1) if docid in grades]
    return _judged_from_places(placed, grades, depth, conv)


def _judged_from_places(placed, grades, depth, conv):
    """``placed``: (rank, grade) of each judged document within ``depth``, by rank."""
    best = sorted(grades.values(), reverse=True)[:depth]
    return Judged(
        relevant=[rank for rank, grade in placed if grade >= conv.min_grade],
        gains=[(rank, _gain(grade, conv.gain)) for rank, grade in placed if grade > 0],
        judged=[rank for rank, _ in placed],
        ideal=[_gain(grade, conv.gain) for grade in best if grade > 0],
        num_relevant=sum(grade >= conv.min_grade for grade in grades.values()),
    )


def _judged_from_reduced(entry, grades, depth, conv):
    """``_judged_from_places`` of a reduced query: every document unjudged but the few it names."""
    placed = sorted((rank, grades.get(docid, -1)) for rank, docid in entry.judged if rank <= depth)  # -1: unjudged
    return _judged_from_places([(rank, grade) for rank, grade in placed if grade >= 0], grades, depth, conv)


def _judged_query(qid, entry, grades, depth, conv, keep, cutoffs):
    """One query of a run as the measures read it, how many documents it ranks, and the cutoffs its scores
    tie across; ``keep`` (``_judged_filter``) drops documents first."""
    if type(entry) is _Reduced:  # the reader cut, filtered and ranked it already
        return _judged_from_reduced(entry, grades, depth, conv), entry.length, entry.tied
    ranking = _ranking(entry)
    if keep is not None:
        ranking = [docid for docid in ranking if keep(qid, docid)]
    return _judged_from_ranking(ranking, grades, depth, conv), len(ranking), _tied_at(entry, ranking, cutoffs)


def _tied_at(entry, ranking, cutoffs):
    """The cutoffs at which a scored ranking has equal scores on both sides."""
    if not isinstance(entry, _MAPPINGS):
        return []
    return [k for k in cutoffs if k < len(ranking) and entry[ranking[k - 1]] == entry[ranking[k]]]


# === Measures ===
# Each takes one normalised query and a cutoff k; all lie in [0, 1].  They read the
# ranks in ``Judged`` up to k (bisect counts those within it), never the whole ranking.


def _recall(q, k):
    """Relevant documents in the top k / all relevant documents of the query."""
    return bisect_right(q.relevant, k) / q.num_relevant if q.num_relevant else 0.0


def _success(q, k):
    """1 if a relevant document is in the top k, else 0."""
    return 1.0 if q.relevant and q.relevant[0] <= k else 0.0


def _reciprocal_rank(q, k):
    """1 / rank of the first relevant document, if it is within the top k; else 0."""
    return 1.0 / q.relevant[0] if q.relevant and q.relevant[0] <= k else 0.0


def _dcg(placed, k):
    """(rank, gain) pairs: the sum of gain / log2(1 + rank) over ranks up to k, by fsum (see Statistics)."""
    return math.fsum(gain / math.log2(rank + 1) for rank, gain in placed if rank <= k and gain)


def _ndcg(q, k):
    """DCG of the top k / DCG of the ideal ranking of every judged document (0 if that is 0)."""
    ideal = _dcg(enumerate(q.ideal[:k], 1), k)
    return _dcg(q.gains, k) / ideal if ideal > 0 else 0.0


def _precision(q, k):
    """Relevant documents in the top k / k."""
    return bisect_right(q.relevant, k) / k


def _average_precision(q, k):
    """Sum of precision@rank at each relevant document within the top k / all relevant documents."""
    total = 0.0
    for hits, rank in enumerate(q.relevant[:bisect_right(q.relevant, k)], 1):
        total += hits / rank  # in rank order, as trec_eval adds them
    return total / q.num_relevant if q.num_relevant else 0.0


def _judged(q, k):
    """Judged documents (any grade) in the top k / k."""
    return bisect_right(q.judged, k) / k


class Measure(NamedTuple):
    """One row of the measure table: the single source of truth for names and help."""

    name: str
    compute: Callable[[Judged, int], float]
    summary: str  # one line, for --help and error messages
    definition: str  # the spec, edge cases included
    binary: bool  # every per-query value is 0 or 1
    default: bool  # reported when --measures is not given
    gate: bool  # recommended as a CI gate
    others: Dict[str, str]  # the same number's name in other tools ("-": none)


MEASURES: Tuple[Measure, ...] = (
    Measure(
        "recall", _recall, "share of the relevant documents found in the top k",
        "relevant documents in the top k / all relevant documents of the query (grade >= min grade).",
        False, True, True,
        {"trec_eval": "recall_k", "ir_measures": "R@k", "ranx": "recall@k", "BEIR": "Recall@k", "MTEB": "recall_at_k"},
    ),
    Measure(
        "success", _success, "1 if any relevant document is in the top k, else 0",
        "1 if at least one relevant document is in the top k, else 0.  Some tools call this "
        "'recall@k' or 'hit rate'; it is not recall.",
        True, True, True,
        {"trec_eval": "success_k", "ir_measures": "Success@k", "ranx": "hit_rate@k", "BEIR": "-", "MTEB": "-"},
    ),
    Measure(
        "mrr", _reciprocal_rank, "1 / rank of the first relevant document within the top k",
        "1 / rank of the first relevant document within the top k, 0 if there is none.  trec_eval's "
        "recip_rank has no cutoff; it equals ours when the first relevant document is within k.",
        False, True, True,
        {"trec_eval": "recip_rank (no cutoff)", "ir_measures": "RR@k", "ranx": "mrr@k", "BEIR": "MRR@k", "MTEB": "mrr_at_k"},
    ),
    Measure(
        "ndcg", _ndcg, "DCG of the top k / DCG of the ideal ranking of every judged document",
        "sum over the top k of gain / log2(1 + rank), gain 2**grade - 1 (--gain linear: the grade), "
        "divided by the same sum for the ideal ranking of every judged document of the query, "
        "retrieved or not.  Linear gain equals trec_eval's ndcg_cut_k.",
        False, True, True,
        {"trec_eval": "ndcg_cut_k (linear gain)", "ir_measures": "nDCG@k (linear gain)", "ranx": "ndcg_burges@k (exp gain)",
         "BEIR": "NDCG@k (linear gain)", "MTEB": "ndcg_at_k (linear gain)"},
    ),
    Measure(
        "precision", _precision, "relevant documents in the top k / k (reported; a poor gate)",
        "relevant documents in the top k / k, even when fewer than k were retrieved (trec_eval's P_k).  "
        "It moves with the number of relevant documents a query has, so gate on recall instead.",
        False, False, False,
        {"trec_eval": "P_k", "ir_measures": "P@k", "ranx": "precision@k", "BEIR": "P@k", "MTEB": "precision_at_k"},
    ),
    Measure(
        "ap", _average_precision, "average precision of the top k, over all relevant documents",
        "sum of precision@rank at each relevant document within the top k / all relevant documents "
        "of the query (trec_eval's map_cut_k).",
        False, False, False,
        {"trec_eval": "map_cut_k", "ir_measures": "AP@k", "ranx": "map@k", "BEIR": "MAP@k", "MTEB": "map_at_k"},
    ),
    Measure(
        "judged", _judged, "share of the top k that has a judgment",
        "documents in the top k that have a judgment (any grade >= 0) / k.  When it is low, unjudged "
        "documents count as non-relevant and a real improvement can look like a regression.",
        False, False, False,
        {"trec_eval": "-", "ir_measures": "Judged@k", "ranx": "-", "BEIR": "-", "MTEB": "-"},
    ),
)
_BY_NAME: Dict[str, Measure] = {m.name: m for m in MEASURES}
_DEFAULT_MEASURES = tuple(m.name for m in MEASURES if m.default)


def _spellings():
    """Lower-cased spelling before the cutoff -> measure: ours (``ndcg@``), each tool's from the table's
    ``others`` (``ndcg_cut_``, ``nDCG@``, ``hit_rate@``...) and trec_eval's ``-m`` form (``ndcg_cut.``).
    A name without a cutoff (trec_eval's recip_rank) is another number, not a spelling."""
    found = {}
    for m in MEASURES:
        found[f"{m.name}@"] = m.name
        for tool, other in m.others.items():
            other = other.split(" (")[0]
            if other[-2:] in ("@k", "_k"):
                found[other[:-1].lower()] = m.name
                if tool == "trec_eval" and other.endswith("_k"):
                    found[other[:-2].lower() + "."] = m.name
    return found


_SPELLINGS = _spellings()


def parse_metric(text: str) -> Tuple[str, int]:
    """Split a metric name into (measure, k); the inverse of ``format_metric``.

    Other tools' spellings of the same number are accepted (``nDCG@10``,
    ``ndcg_cut_10``, ``hit_rate@10``, ``RR@10``...; see ``_explain()``); the
    name printed back is always ours.

    >>> parse_metric("ndcg@10"), parse_metric("ndcg_cut_10"), parse_metric("R@100")
    (('ndcg', 10), ('ndcg', 10), ('recall', 100))
    >>> format_metric(*parse_metric("nDCG@10"))
    'ndcg@10'
    """
    stem = text.rstrip("0123456789")
    cutoff = text[len(stem):]
    level = _DOC_LEVEL if stem.lower().startswith(_DOC_LEVEL) else ""
    name = _SPELLINGS.get(stem[len(level):].lower())
    name = None if level and name not in _BY_NAME else name  # a measure of spans only has no document level
    k = _ascii_int(cutoff)
    if name is None or not k or cutoff != str(k):
        raise RagEvalError(f"unknown metric {_clipped_repr(text)} {_metric_hint(text)}")
    return level + name, k


def _measure_named(name):
    """The row of a measure name, with or without its level (``doc.ndcg``): from MEASURES, else
    from SPAN_MEASURES (a measure of evidence spans only, such as iou)."""
    name = name[len(_DOC_LEVEL):] if name.startswith(_DOC_LEVEL) else name
    return _BY_NAME.get(name) or _SPAN_BY_NAME[name]


def _measure_place(name):
    """Where a measure comes in reports: the table's order, then the evidence-only measures."""
    row = _measure_named(name)
    return MEASURES.index(row) if row in MEASURES else len(MEASURES) + _SPAN_MEASURES.index(row)


def _metric_hint(text=""):  # every measure: those of the table below and those of evidence spans (iou)
    return f"({_did_you_mean(text, _ALL_MEASURES, '@k')}expected measure@k with a measure from {', '.join(_ALL_MEASURES)})"


def _did_you_mean(text, names, cutoff=None):
    """``"did you mean 'ndcg@10'? "`` for ``ndgc@10`` (difflib's closest of ``names``, keeping the cutoff), or ""."""
    import difflib  # errors only

    text = str(text)
    stem = text.rstrip("0123456789")
    close = difflib.get_close_matches(stem.rstrip("@_.").lower(), list(names), n=1)
    number = f"@{text[len(stem):]}" if _ascii_int(text[len(stem):]) else cutoff or ""
    return f"did you mean {close[0] + number!r}? " if close else ""


def _canonical_metric(text):
    """A metric (or ``slice:metric``) in any spelling ``parse_metric`` takes, spelled ours.

    >>> _canonical_metric("NDCG@10"), _canonical_metric("pricing:P_5")
    ('ndcg@10', 'pricing:precision@5')
    """
    tag, sep, metric = text.rpartition(":")
    return text if _is_judged_metric(metric) else tag + sep + format_metric(*parse_metric(metric))


def format_metric(name: str, k: int) -> str:
    """The one spelling of a metric, used as its key everywhere."""
    return f"{name}@{k}"


def _measure_of_ranking(name, ranking, grades, k, **conventions):
    _check_k(k)
    conv = _Conventions(**conventions)
    _check_conventions(conv)
    _check_grades(grades, "grades")
    if not isinstance(ranking, (list, *_MAPPINGS)):
        raise RagEvalError(f"expected a list of document ids or an object of document -> score, got {_json_kind(ranking)}",
                           "ranking")
    _check_run({"ranking": ranking}, "ranking")
    if conv.doc_id_sep is not None:
        grades = _documents_qrels({"q": grades}, conv.doc_id_sep)["q"]
        ranking = _documents_run({"q": ranking}, conv.doc_id_sep)["q"]
    _check_gain_range({"q": grades}, conv)
    keep = _judged_filter({"q": grades}, conv.min_grade) if conv.judged_only else None
    return _BY_NAME[name].compute(_judged_query("q", ranking, grades, k, conv, keep, ())[0], k)


def recall_at_k(ranking, grades, k, **conventions) -> float:
    """Relevant documents in the top k / all relevant documents.

    ``ranking`` is a list of ids best first (or a dict of id -> score);
    ``grades`` maps judged ids to grades; a grade >= 1 is relevant.

    >>> recall_at_k(["a", "x", "b"], {"a": 1, "b": 2, "c": 0}, 2)  # 1 of a, b
    0.5
    """
    return _measure_of_ranking("recall", ranking, grades, k, **conventions)


def success_at_k(ranking, grades, k, **conventions) -> float:
    """1.0 if any relevant document is in the top k, else 0.0 (not recall).

    >>> success_at_k(["x", "a"], {"a": 1}, 1), success_at_k(["x", "a"], {"a": 1}, 2)
    (0.0, 1.0)
    """
    return _measure_of_ranking("success", ranking, grades, k, **conventions)


def reciprocal_rank(ranking, grades, k, **conventions) -> float:
    """1 / rank of the first relevant document within the top k, else 0.0.

    >>> reciprocal_rank(["x", "x", "a"], {"a": 1}, 2)  # the duplicate counts once
    0.5
    """
    return _measure_of_ranking("mrr", ranking, grades, k, **conventions)


def ndcg_at_k(ranking, grades, k, **conventions) -> float:
    """DCG of the top k over the DCG of the ideal ranking of every judged document.

    Gain ``2**grade - 1`` (``gain="linear"``: the grade), discount ``log2(1 + rank)``.

    >>> round(ndcg_at_k(["b", "a"], {"a": 2, "b": 1}, 2), 4)  # (1 + 3/log2 3) / (3 + 1/log2 3)
    0.7967
    """
    return _measure_of_ranking("ndcg", ranking, grades, k, **conventions)


def precision_at_k(ranking, grades, k, **conventions) -> float:
    """Relevant documents in the top k / k.

    >>> precision_at_k(["a"], {"a": 1}, 4)
    0.25
    """
    return _measure_of_ranking("precision", ranking, grades, k, **conventions)


def ap_at_k(ranking, grades, k, **conventions) -> float:
    """Average precision within the top k, divided by all relevant documents.

    >>> ap_at_k(["a", "x", "b"], {"a": 1, "b": 1}, 3)  # (1/1 + 2/3) / 2
    0.8333333333333333
    """
    return _measure_of_ranking("ap", ranking, grades, k, **conventions)


def judged_at_k(ranking, grades, k, **conventions) -> float:
    """Share of the top k that has a judgment (grade 0 included).

    >>> judged_at_k(["a", "x"], {"a": 0}, 2)
    0.5
    """
    return _measure_of_ranking("judged", ranking, grades, k, **conventions)


# === Evaluation ===


def _check_k(k):
    if not _is_int(k) or k < 1:
        raise RagEvalError(f"k must be a positive integer, got {_clipped_repr(k)}")


def _check_measures(measures, cutoffs, table=_BY_NAME):
    """The (measure, k) pairs asked for: a bare measure at every cutoff, ``measure@k`` (in any
    spelling ``parse_metric`` takes) at its own cutoff only.  In cutoff order, then as given."""
    pairs, unknown = [], []
    for text in measures:
        if text in table:
            pairs += [(text, cutoff) for cutoff in cutoffs]
            continue
        try:
            pair = parse_metric(text)
        except RagEvalError:
            pair = ("", 0)
        if pair[0] in table:  # a level ("doc.") is not asked for: evidence judgments report both
            pairs.append(pair)
        else:
            unknown.append(text)
    if unknown:
        listed = ", ".join(_clipped_repr(name) for name in unknown)
        close = next(filter(None, (_did_you_mean(name, table) for name in unknown)), "")
        raise RagEvalError(f"unknown measure {listed} ({close}choose from {', '.join(table)})")
    order = {name: place for place, (name, _) in reversed(list(enumerate(pairs)))}
    return sorted(dict.fromkeys(pairs), key=lambda pair: (pair[1], order[pair[0]]))


def _check_cutoffs(k):
    if _is_int(k):
        cutoffs = [k]
    elif isinstance(k, (list, tuple, set, frozenset, range)) and k:
        cutoffs = list(k)
    else:
        raise RagEvalError(f"k must be a positive integer or a non-empty list of them, got {_clipped_repr(k)}")
    for cutoff in cutoffs:
        _check_k(cutoff)
    return sorted(set(cutoffs))


def _check_gain_range(qrels, conv):
    """2**grade overflows a float past grade 1023; such grades are a labelling error."""
    if conv.gain == "exp":
        top = max((grade for docs in qrels.values() for grade in docs.values()), default=0)
        if top > _MAX_EXP_GRADE:
            raise RagEvalError(f"grade {top} is too large for the exponential gain 2**grade - 1 "
                               f"(at most {_MAX_EXP_GRADE}; --gain linear takes any)", "qrels")


def _check_conventions(conv):
    if conv.doc_id_sep is not None and (not isinstance(conv.doc_id_sep, str) or not conv.doc_id_sep):
        raise RagEvalError(f"doc_id_sep must be a non-empty string, got {_clipped_repr(conv.doc_id_sep)}")
    if conv.judged_only not in (True, False):
        raise RagEvalError(f"judged_only must be true or false, got {_clipped_repr(conv.judged_only)}")
    if conv.gain not in _GAINS:
        raise RagEvalError(f"gain must be one of {', '.join(_GAINS)}, got {_clipped_repr(conv.gain)}")
    if not _is_int(conv.min_grade) or conv.min_grade < 1:
        raise RagEvalError(f"min grade must be a positive integer, got {_clipped_repr(conv.min_grade)}")


def _columns(pairs, single, table):
    """(per-query key, metric, measure, cutoff) of every value of a query, in output order; bare keys if ``single``."""
    return [(name if single else format_metric(name, cutoff), format_metric(name, cutoff), table[name].compute, cutoff)
            for name, cutoff in pairs]


def _means(per_query, columns):
    """metric -> its arithmetic mean over the scored queries: the sum exactly rounded (math.fsum), then divided."""
    return {metric: math.fsum(values[key] for values in per_query.values()) / len(per_query)
            for key, metric, _, _ in columns}


def evaluate(
    qrels: Qrels,
    run: Run,
    k: Union[int, Iterable[int]] = _DEFAULT_K,
    *,
    measures: Optional[Iterable[str]] = None,
    gain: str = "exp",
    min_grade: int = 1,
    judged_only: bool = False,
    drop_unknown_queries: bool = False,
    doc_id_sep: Optional[str] = None,
    abstain_below: Optional[float] = None,
) -> dict:
    """Score every judged query and average over the scored ones.

    Keys: ``mean["ndcg@5"]`` always; ``per_query[qid]["ndcg"]`` when ``k`` is one integer (``k=5``), but
    ``per_query[qid]["ndcg@5"]`` when ``k`` is a list (``k=[5]``, ``k=[5, 10]``) or a measure names its own
    cutoff (``measures=["ndcg@10"]``).  ``measures`` is a name (``"ndcg"``) or a list of names.

    Returns ``{"k", "queries", "unscored", "mean", "per_query", ...}``, each key as docs/reports.md's table
    says; with ``doc_id_sep`` a document is scored at its best chunk (trec_eval on the MaxP document run).
    Raises ``RagEvalError`` (a ``ValueError``) on invalid input.
    """
    asked = _measures_asked(measures, _DEFAULT_MEASURES)
    single = _is_int(k) and all(name in _BY_NAME for name in asked)  # then per-query keys are bare names
    pairs = _check_measures(asked, _check_cutoffs(k))
    if not pairs:
        raise RagEvalError("no measure chosen")
    cutoffs = sorted({cutoff for _, cutoff in pairs})
    conv = _Conventions(gain, min_grade, judged_only, doc_id_sep)
    _check_conventions(conv)
    qrels = _check_qrels(qrels)
    reduced = isinstance(run, _ReducedRun)
    if not reduced:
        run = _library_run(run)
        _check_run(run)
    if doc_id_sep is not None:
        qrels = _documents_qrels(qrels, doc_id_sep)
        run = run if reduced else _documents_run(run, doc_id_sep)
    _check_gain_range(qrels, conv)
    _check_abstain_below(abstain_below)

    unknown = run.unknown if reduced else sorted(set(run) - set(qrels))
    if unknown and not drop_unknown_queries:
        theirs = _clipped_repr(min(qrels)) if qrels else "none"
        raise RagEvalError(f"{len(unknown)} run queries are not in the qrels (first: {_clipped_repr(unknown[0])}; "
                           f"the qrels have {theirs}); drop them with --drop-unknown-queries", "run")
    depth = cutoffs[-1]
    columns = _columns(pairs, single, _BY_NAME)
    per_query, unscored, skipped = {}, [], []
    ties, judged_sum = dict.fromkeys(cutoffs, 0), dict.fromkeys(cutoffs, 0.0)
    keep = _judged_filter(qrels, min_grade) if judged_only and not reduced else None
    for qid in sorted(qrels):
        q, length, tied = _judged_query(qid, run.get(qid, []), qrels[qid], depth, conv, keep, cutoffs)
        if q.num_relevant == 0:
            unscored.append(qid)
            continue
        if not length:  # nothing returned (or, with judged_only, nothing judged): every measure is 0
            skipped.append(qid)
        for cutoff in tied:
            ties[cutoff] += 1
        for cutoff in cutoffs:
            judged_sum[cutoff] += _judged(q, cutoff)
        per_query[qid] = {key: compute(q, cutoff) for key, _, compute, cutoff in columns}

    if not per_query:
        raise RagEvalError("no query has a relevant document: nothing to score", "qrels")
    return {
        "k": k if single else cutoffs,
        "queries": len(per_query),
        "unscored": unscored,
        "skipped": skipped,
        "missing": [qid for qid in per_query if qid not in run],  # scored queries the run has no entry for
        "dropped": unknown,
        "mean": _means(per_query, columns),
        "per_query": per_query,
        "ties": {str(cutoff): n for cutoff, n in ties.items()},
        "judged": {format_metric("judged", cutoff): s / len(per_query) for cutoff, s in judged_sum.items()},
        "abstention": _abstention(unscored, run, abstain_below),
        "conventions": conv._asdict(),
    }


def _measures_asked(measures, default):
    return measures.split(",") if isinstance(measures, str) else list(default if measures is None else measures)


def _check_abstain_below(abstain_below):
    if abstain_below is not None and not _is_finite(abstain_below):
        raise RagEvalError(f"abstain_below must be a finite number, got {_clipped_repr(abstain_below)}")


def _abstention(unscored, run, abstain_below):
    """How many unanswerable queries the run left unanswered, as it should."""
    def abstained(qid):
        entry = run.get(qid)
        if not entry or (type(entry) is _Reduced and not entry.length):
            return True
        if abstain_below is None:
            return False
        best = entry.best if type(entry) is _Reduced else max(entry.values()) if isinstance(entry, _MAPPINGS) else None
        if best is None:
            raise RagEvalError(f"query {_clipped_repr(qid)}: abstain_below (--abstain-below) needs scores, and this "
                               "ranking has none", "run")
        return best < abstain_below

    quiet = [qid for qid in unscored if abstained(qid)]
    return {"queries": len(unscored), "abstained": quiet, "share": len(quiet) / len(unscored) if unscored else None}


def _document_of(docid, sep):
    """The document a chunk id belongs to: the part before the first ``sep``.

    >>> _document_of("refund-policy#2", "#"), _document_of("msmarco_v2.1_doc_00_8800#4_1633", "#")
    ('refund-policy', 'msmarco_v2.1_doc_00_8800')
    """
    return docid.split(sep, 1)[0] or docid


def _documents_qrels(qrels, sep):
    """Judgments per document: the best grade among the document's chunks."""
    return {qid: _best_by_document(docs, sep) for qid, docs in qrels.items()}


def _documents_run(run, sep):
    """A run of documents: each at its best chunk's place (a score: the best chunk's; ties by document id)."""
    return {qid: (dict(entry) if isinstance(entry, _MAPPINGS) else list(dict.fromkeys(entry)))
            if sep not in "\0".join(entry)  # no chunk id (a run read with doc_id_sep is mapped already): checked in C
            else _best_by_document(entry, sep) if isinstance(entry, _MAPPINGS)
            else list(dict.fromkeys(_document_of(docid, sep) for docid in entry)) for qid, entry in run.items()}


def _best_by_document(values, sep):
    """chunk id -> value (a grade, a score) as document id -> the best value of its chunks."""
    best = {}
    for docid, value in values.items():
        document = _document_of(docid, sep)
        best[document] = max(value, best.get(document, value))
    return best


def _unjudged_documents(qrels, run, k, doc_id_sep=None):
    """``(qid, docid, rank)`` for every unjudged document in a judged query's top k."""
    if doc_id_sep is not None:
        qrels, run = _documents_qrels(qrels, doc_id_sep), _documents_run(run, doc_id_sep)
    found = []
    for qid in sorted(qrels):
        found.extend((qid, docid, rank) for rank, docid in enumerate(_ranking(run.get(qid, []))[:k], 1)
                     if docid not in qrels[qid])
    return sorted(found, key=lambda row: (row[2], row[0], row[1]))


# --- Validating in-memory inputs (files and library callers alike) ---


def _check_qrels(qrels, source="qrels"):
    """``qrels`` checked, a grade ``1.0`` as 1 (see _whole)."""
    if not isinstance(qrels, _MAPPINGS):
        raise RagEvalError(f"expected a JSON object of query -> {{document: grade}}, got {_json_kind(qrels)}"
                           f"{' (a path? read_qrels(path))' * isinstance(qrels, str)}", source)
    judgments = list(qrels.values())
    if _all_of(qrels, str) and _all_of(judgments, dict) and _all_of(chain.from_iterable(judgments), str):
        grades = list(chain.from_iterable(map(dict.values, judgments)))
        if _all_of(grades, int) and 0 <= min(grades, default=0) and max(grades, default=0) <= _MAX_GRADE:
            return qrels  # the common case, checked in C for all queries at once
    qrels = {qid: {d: _whole(g) for d, g in docs.items()} if isinstance(docs, _MAPPINGS) else docs for qid, docs in qrels.items()}
    for qid, docs in qrels.items():
        _string_id(qid, "query id", source)
        _check_grades(docs, source, qid)
    return qrels


def _check_grades(docs, source, qid=None):
    """One query's judgments: an object of document id -> grade."""
    query = "" if qid is None else f"query {_clipped_repr(qid)}"
    if not isinstance(docs, _MAPPINGS):
        swapped = "; is this a run? the order is QRELS RUN" if isinstance(docs, list) else ""
        raise RagEvalError(f"{query}{': ' if query else ''}expected an object of document -> grade, got {_json_kind(docs)}"
                           f"{swapped}", source)
    if _all_of(docs, str) and _all_of(docs.values(), int) and 0 <= min(docs.values(), default=0) \
            and max(docs.values(), default=0) <= _MAX_GRADE:
        return  # the common case, checked in C
    for docid, grade in docs.items():
        _string_id(docid, "document id", source)
        if not _is_int(grade) or not 0 <= grade <= _MAX_GRADE:
            raise RagEvalError(f"{query}{', ' if query else ''}document {_clipped_repr(docid)}: grade must be a non-negative integer "
                               f"(at most {_MAX_GRADE}), got {_clipped_repr(grade)}{_instead(grade, True)}", source)


def _instead(value, grade=False):
    """What to write instead: an integer id as a string, a number without quotes; a fraction for a ``grade``
    (a score) says the files were swapped."""
    if _is_int(value) and not grade:
        return f" (write {str(value)!r})"
    number = _finite_number(value.strip()) if isinstance(value, str) else None
    return f" (write {_whole(number)}, a number, without quotes)" if number is not None else \
        "; is this a run? the order is QRELS RUN" if grade and _is_finite(value) and not _is_int(value) else ""


def _all_of(values, *types):
    """Every value is exactly of one of ``types`` (so not a bool where an int is wanted)."""
    return set(map(type, values)) <= set(types)


def _library_run(run):
    """A run's ``(id, score)`` pairs (lists or tuples) as ``{id: score}``, a tuple ranking as a list."""
    if not isinstance(run, _MAPPINGS) or all(type(entry) in (list, dict) and not (
            entry and type(entry) is list and type(entry[0]) is not str) for entry in run.values()):
        return run  # the common case
    return {qid: _scored_pairs(qid, entry, "run") if isinstance(entry, (list, tuple)) and entry
            and isinstance(entry[0], (list, tuple)) else list(entry) if isinstance(entry, tuple) else entry
            for qid, entry in run.items()}


def _check_run(run, source="run"):
    if not isinstance(run, _MAPPINGS):
        raise RagEvalError(f"expected a JSON object of query -> ranking, got {_json_kind(run)}"
                           f"{' (a path? read_run(path))' * isinstance(run, str)}", source)
    entries = list(run.values())
    if _all_of(run, str) and (_all_of(entries, list) or _all_of(entries, dict)) \
            and _all_of(chain.from_iterable(entries), str):  # the ids of lists, or the keys of dicts
        scores = list(chain.from_iterable(map(dict.values, entries))) if entries and type(entries[0]) is dict else []
        if _all_of(scores, float, int) and _all_finite(scores):
            return  # the common case, checked in C for all queries at once
    for qid, entry in run.items():
        _string_id(qid, "query id", source)
        if isinstance(entry, list):
            if _all_of(entry, str):
                continue  # the common case, checked in C (a run that mixes lists and dicts, say)
            for docid in entry:
                if not isinstance(docid, str):
                    raise RagEvalError(f"query {_clipped_repr(qid)}: ranking must be a list of strings, found "
                                       f"{_json_kind(docid)}{_instead(docid)}", source)
        elif isinstance(entry, _MAPPINGS):
            if _all_of(entry, str) and _all_of(entry.values(), float, int) and _all_finite(entry.values()):
                continue  # the common case, checked in C (a defaultdict, say)
            for docid, score in entry.items():
                _string_id(docid, "document id", source)
                if not _is_finite(score):
                    raise RagEvalError(f"query {_clipped_repr(qid)}, document {_clipped_repr(docid)}: score must be a "
                                       f"finite number, got {_clipped_repr(score)}{_instead(score)}", source)
        else:
            raise RagEvalError(
                f"query {_clipped_repr(qid)}: expected a list of document ids or an object of document -> score, got {_json_kind(entry)}",
                source,
            )


# === Evidence spans ===
# Judgments on a document's characters (docs/spans.md).

_DEFAULT_MIN_OVERLAP = 0.5
Location = Tuple[str, int, int]  # (doc_id, start, end) of a chunk


class Span(NamedTuple):
    """One evidence judgment: ``doc_id``'s characters ``[start, end)``, a grade, maybe the quoted text."""

    doc_id: str
    start: int
    end: int
    grade: int
    text: Optional[str] = None


class SpanQrels(dict):
    """Evidence judgments: query id -> its spans, a tuple of ``Span`` sorted by document, start, end.
    From ``read_qrels``, ``rows`` keeps each row as read, ``(query id, (doc_id, start, end), row)``,
    so that --fix-labels rewrites them with every field kept."""

    rows: Optional[List[Tuple[str, Location, dict]]] = None


_LABEL_STATUSES = ("valid", "moved", "unchecked", "orphaned")  # of a span checked against its document


class _LabelCheck(NamedTuple):
    """The spans checked against a corpus: ``fixed`` holds the qrels with moved spans re-anchored."""

    fixed: SpanQrels
    rows: List[Tuple[str, Span, str, str]]  # (qid, span as judged, one of LABEL_STATUSES, what was found)
    moved: Dict[Tuple[str, Location], Tuple[int, int]]  # (qid, where a moved span was judged) -> its offsets now


def _offsets(row, source, lineno):
    start, end = row.get("start"), row.get("end")
    if not (_is_int(start) and _is_int(end) and 0 <= start < end):
        raise RagEvalError(f"start and end must be integers with 0 <= start < end, got {_clipped_repr(start)} and "
                           f"{_clipped_repr(end)}", source, lineno)
    return start, end


def _span_qrels(rows, source):
    """JSONL rows ``query_id, doc_id, start, end, grade[, text]``, every row with offsets."""
    found = {}
    kept = []
    for lineno, row in rows:
        if "start" not in row and "end" not in row:
            raise RagEvalError("this row has no start and end, and the rows before it do: evidence judgments "
                               "need them on every row", source, lineno)
        qid = _row_id(row, _JSONL_QUERY, "query id", source, lineno)
        doc = _row_id(row, _JSONL_DOC, "document id", source, lineno)
        start, end = _offsets(row, source, lineno)
        grade = _row_field(row, _JSONL_GRADE, "grade", source, lineno)
        if not _is_int(grade) or not 0 <= grade <= _MAX_GRADE:
            raise RagEvalError(f"grade must be a non-negative integer, got {_clipped_repr(grade)}", source, lineno)
        text = row.get("text")
        if text is not None and (not isinstance(text, str) or not text):
            raise RagEvalError(f"text must be the quoted evidence, a non-empty string, got {_clipped_repr(text)}",
                               source, lineno)
        span = Span(doc, start, end, grade, text)
        old = found.setdefault(qid, {}).setdefault(span[:3], span)
        if old.grade != span.grade:
            raise RagEvalError(f"conflicting judgments for {_clipped_repr(qid)}/{_clipped_repr(span.doc_id)} "
                               f"[{span.start}, {span.end}): {old.grade} and {span.grade}", source, lineno)
        kept.append((qid, span[:3], row))
    qrels = SpanQrels({qid: tuple(sorted(spans.values())) for qid, spans in found.items()})
    qrels.rows = kept
    return qrels


def _read_chunks(path, max_bytes=None, keep=None):
    """A chunk map: JSONL rows ``chunk_id, doc_id, start, end``; chunk id -> (doc_id, start, end), of those in
    ``keep`` when given (a run's: memory follows the run, not the map)."""
    chunks = {}
    with _opened(path) as inp:
        for lineno, row in _jsonl_rows(inp, _MAX_RUN_BYTES if max_bytes is None else max_bytes):
            chunk = _locate_chunk(row, chunks, inp.source, lineno)
            if keep is not None and chunk not in keep:
                del chunks[chunk]
    return chunks


def _short_id(row, names, what, source, lineno):
    value = _row_id(row, names, what, source, lineno)
    if _too_long_id(value):
        raise RagEvalError(f"{what} longer than {_MAX_ID} bytes", source, lineno)
    return value


def _locate_chunk(row, chunks, source, lineno):
    chunk = _short_id(row, ("chunk_id",), "chunk id", source, lineno)
    where = (_short_id(row, _JSONL_DOC, "document id", source, lineno), *_offsets(row, source, lineno))
    if chunks.setdefault(chunk, where) != where:
        raise RagEvalError(f"chunk {_clipped_repr(chunk)} is located twice, differently", source, lineno)
    return chunk


def _located_run(path, fmt, max_bytes):
    """A run, where the run itself locates its chunks (``located``), and the chunks it lists more than once."""
    return _read_run(path, fmt, max_bytes=_MAX_RUN_BYTES if max_bytes is None else max_bytes, evidence=True)


def _chunk_locations(run, in_run, chunk_map, source, map_source):
    """Where every chunk of the run lies: the run's own location or the chunk map's (they must agree)."""
    chunk_map = chunk_map or {}
    found = {}
    for qid, entry in run.items():
        for chunk in entry:
            if chunk in found:
                continue
            mine, mapped = in_run.get(chunk), chunk_map.get(chunk)
            if mine is None and mapped is None:
                hint = "" if chunk_map else " (give a chunk map with --chunks, or locate chunks in the run's rows)"
                raise RagEvalError(f"query {_clipped_repr(qid)}: chunk {_clipped_repr(chunk)} is not in the chunk map{hint}", source)
            if mine is not None and mapped is not None and mine != mapped:
                raise RagEvalError(f"chunk {_clipped_repr(chunk)}: the run locates it at {_clipped_repr(mine)}, the chunk map "
                                   f"at {_clipped_repr(mapped)}", map_source)
            found[chunk] = mine or mapped
    return found


# --- Normalising one query: spans against ranked chunks ---


class _Evidence(NamedTuple):
    """One query's spans against its ranked chunks: all that an evidence measure may read."""

    relevant: List[int]  # the rank at which each relevant span became covered (within the depth), sorted
    covered: List[int]  # the same for every span of positive grade
    discounted: List[float]  # their gains / log2(1 + rank), in that order
    ideal: List[float]  # the discounted gains of the ideal ranking of the spans
    num_relevant: int
    retrieved: List[int]  # [r - 1]: the characters of the union of the top r chunks
    hits: List[int]  # [r - 1]: those of them inside a relevant span
    relevant_chars: int


class _ChunkIndex(NamedTuple):
    """Chunks numbered once for all queries, by document and start; the lists are by number."""

    number: Dict[str, int]  # chunk id -> number
    document: List[str]
    starts: List[int]
    ends: List[int]
    length: List[int]
    # doc -> (first, past, longest, overlapping): its chunks are numbers first .. past - 1; one that shares
    # characters with [start, end) starts less than longest before start, so bisection finds it; overlapping:
    # two of them share characters (a chunker with overlap, two chunkings mixed), as do the documents of:
    by_document: Dict[str, Tuple[int, int, int, bool]]
    overlapping: set


def _bad_location(chunk, location):
    return RagEvalError(f"chunk {_clipped_repr(chunk)}: a location is (doc_id, start, end) with integers "
                        f"0 <= start < end, got {_clipped_repr(location)}", "chunks")


def _chunk_index(run, chunks):
    """The chunks numbered: the whole map when it is no larger than the run (the command line's holds
    the run's chunks only), else, or when a location in it is bad, the ranked chunks only.  Their
    locations are checked as the readers check them; the first bad one in ranking order is named."""
    if len(chunks) <= sum(map(len, run.values())):
        try:
            return _numbered(chunks, chunks)
        except RagEvalError:
            pass
    ranked = dict.fromkeys(chain.from_iterable(map(_ranking, run.values())))
    if not ranked.keys() <= chunks.keys():
        raise _unlocated(run, chunks)
    return _numbered(ranked, chunks)


def _unlocated(run, chunks):
    """The error for the run's first chunk, in ranking order, that ``chunks`` lacks."""
    missing = next(chunk for entry in run.values() for chunk in _ranking(entry) if chunk not in chunks)
    return RagEvalError(f"chunk {_clipped_repr(missing)} is not located (chunk id -> (doc_id, start, end))", "chunks")


def _numbered(ids, chunks):
    rows = {}
    for chunk in ids:
        try:
            doc, start, end = chunks[chunk]
            rows.setdefault(doc, []).append((start, end, chunk))
        except (TypeError, ValueError):  # not three values, or a document id that is not even hashable
            raise _bad_location(chunk, chunks[chunk]) from None
    index = _ChunkIndex({}, [], [], [], [], {}, set())
    for doc, held in rows.items():
        starts, ends = [row[0] for row in held], [row[1] for row in held]
        # In C over the document's chunks (a test per chunk in Python would cost as much as the scoring).
        if not (isinstance(doc, str) and set(map(type, starts)) | set(map(type, ends)) <= {int}
                and min(starts) >= 0 and all(map(lt, starts, ends))):
            bad = next(row for row in held if not (isinstance(doc, str) and type(row[0]) is type(row[1]) is int
                                                    and 0 <= row[0] < row[1]))
            raise _bad_location(bad[2], chunks[bad[2]])
        held.sort()
        first, lengths = len(index.starts), [end - start for start, end, _ in held]
        starts, ends, ids = zip(*held)
        index.number.update(zip(ids, range(first, first + len(held))))
        index.document.extend([doc] * len(held))
        index.starts.extend(starts)
        index.ends.extend(ends)
        index.length.extend(lengths)
        overlapping = any(map(lt, index.starts[first + 1:], index.ends[first:]))  # one starts before the last ends
        index.by_document[doc] = (first, len(index.starts), max(lengths), overlapping)
        if overlapping:
            index.overlapping.add(doc)
    return index


def _evidence(spans, top, chunks, conv, min_overlap):
    """What a query's ranked chunks (``top``, unique numbers) retrieve of its spans, rank by rank.

    A span is covered at the rank where the characters it shares with the union of the chunks so far
    reach its share.  Its chunks are found by bisection (``_shares``): the cost follows the spans, not
    the chunks.  The relevant characters are the relevant spans' union: by start, each adds what lies
    past the ones before it.  Only where a document's chunks overlap are the retrieved ones walked.
    """
    numerator, denominator = min_overlap
    rank_of = dict(zip(top, range(1, len(top) + 1)))
    covered = []  # (rank, gain, relevant)
    ideal = []
    found = [0] * len(top)  # the characters inside a relevant span that each chunk adds to the union
    num_relevant = relevant_chars = reach = 0
    reach_doc = None  # the relevant characters of reach_doc so far end at reach
    for doc, start, end, grade, _ in sorted(spans, key=itemgetter(0, 1, 2)):
        if grade <= 0:
            continue
        gain = _gain(grade, conv.gain)
        ideal.append(gain)
        where = chunks.by_document.get(doc)
        shares = _shares(chunks, where, rank_of, start, end) if where else []
        need, got = -(-numerator * (end - start) // denominator), 0  # ceil, in integers
        for rank, new in shares:
            got += new
            if got >= need:
                covered.append((rank, gain, grade >= conv.min_grade))
                break
        if grade < conv.min_grade:
            continue
        num_relevant += 1
        reach = reach if doc == reach_doc else 0
        if end > reach:
            relevant_chars += end - max(start, reach)
            if start < reach and shares:
                shares = _shares(chunks, where, rank_of, reach, end)
            for rank, new in shares:
                found[rank - 1] += new
            reach_doc, reach = doc, end
    added = list(map(chunks.length.__getitem__, top))  # the characters each chunk adds to the union
    if chunks.overlapping and not chunks.overlapping.isdisjoint(map(chunks.document.__getitem__, top)):
        joined = {}  # document -> the union of its chunks so far
        for rank, chunk in enumerate(top, 1):
            if chunks.document[chunk] in chunks.overlapping:
                added[rank - 1] = _add_interval(*joined.setdefault(chunks.document[chunk], ([], [])),
                                                chunks.starts[chunk], chunks.ends[chunk])
    covered.sort()
    ideal.sort(reverse=True)
    return _Evidence([rank for rank, _, is_relevant in covered if is_relevant], [rank for rank, _, _ in covered],
                    [gain / math.log2(rank + 1) for rank, gain, _ in covered],
                    [gain / math.log2(rank + 1) for rank, gain in enumerate(ideal, 1)], num_relevant,
                    list(accumulate(added)), list(accumulate(found)), relevant_chars)


def _shares(chunks, where, rank_of, start, end):
    """(rank, characters of ``[start, end)`` that the retrieved chunk at that rank holds and no better one did),
    by rank, for the chunks of one document (``where``: its entry in ``by_document``)."""
    first, past, longest, overlapping = where
    starts, ends = chunks.starts, chunks.ends
    if overlapping:
        joined = ([], [])
        return [(rank, _add_interval(*joined, low, high)) for rank, low, high in sorted(
            (rank_of[j], max(start, starts[j]), min(end, ends[j]))
            for j in range(bisect_right(starts, start - longest, first, past), bisect_left(starts, end, first, past))
            if ends[j] > start and j in rank_of)]
    shares = []
    first = bisect_right(ends, start, first, past)  # the first chunk that ends after the span starts
    for j in range(first, bisect_left(starts, end, first, past)):  # the chunks that share characters with the span
        rank = rank_of.get(j)
        if rank:  # (a loop, not a comprehension, and no min() and max(): this runs for every span)
            low, high = starts[j], ends[j]
            shares.append((rank, (end if end < high else high) - (start if start > low else low)))
    if len(shares) > 1:
        shares.sort()
    return shares


def _add_interval(starts, ends, start, end):
    """Add ``[start, end)`` to disjoint intervals sorted by start; return how many of its characters were not in them."""
    first = bisect_right(ends, start)  # the first interval that ends after start
    last = bisect_left(starts, end, first)  # the intervals first .. last - 1 overlap [start, end)
    low, high = starts[first:last], ends[first:last]
    new = end - start - sum(min(end, e) - max(start, s) for s, e in zip(low, high))
    starts[first:last], ends[first:last] = [min([start, *low])], [max([end, *high])]
    return new


# --- Evidence measures: each takes one Evidence and a cutoff k; all lie in [0, 1] ---
# recall, success and mrr are the document measures' own: they read only ``relevant`` and ``num_relevant``.


def _span_ndcg(q, k):
    ideal = math.fsum(q.ideal[:k])
    if ideal <= 0:
        return 0.0
    found = math.fsum(q.discounted[:bisect_right(q.covered, k)])
    return min(1.0, found / ideal)  # one chunk covering several spans can earn more than the ideal's one per rank


def _characters_at(q, k):
    depth = min(k, len(q.retrieved))
    return (q.retrieved[depth - 1], q.hits[depth - 1]) if depth else (0, 0)


def _span_precision(q, k):
    chars, hits = _characters_at(q, k)
    return hits / chars if chars else 0.0


def _span_iou(q, k):
    chars, hits = _characters_at(q, k)
    together = chars + q.relevant_chars - hits
    return hits / together if together else 0.0


class _SpanMeasure(NamedTuple):
    """A measure of ``MEASURES`` on spans (the same number when every chunk is one span), or of spans only."""

    name: str
    compute: Callable[[_Evidence, int], float]
    definition: str
    binary: bool = False  # every per-query value is 0 or 1
    gate: bool = True  # else reported, gated when --measures names it


_SPAN_MEASURES: Tuple[_SpanMeasure, ...] = (
    _SpanMeasure("recall", _recall, "relevant spans covered by the union of the top k chunks / relevant spans "
                "of the query.  A span is covered when the characters it shares with the union reach "
                "--min-overlap of its length (default 0.5), however many chunks hold them."),
    _SpanMeasure("success", _success, "1 if the union of the top k chunks covers a relevant span, else 0.", True),
    _SpanMeasure("mrr", _reciprocal_rank, "1 / the first rank r at which the union of the top r chunks covers a "
                "relevant span, 0 if none within k."),
    _SpanMeasure("ndcg", _span_ndcg, "each span's gain counts once, discounted at the rank where it became covered; "
                "the ideal ranks every judged span once, best grades first.  Capped at 1: one large chunk covering "
                "several spans at rank 1 can exceed the ideal."),
    _SpanMeasure("precision", _span_precision, "characters of the union of the top k chunks inside a relevant span / "
                "characters of that union (0 if nothing was retrieved): what large chunks cost.", gate=False),
    _SpanMeasure("iou", _span_iou, "characters retrieved and relevant / characters retrieved or relevant, over the "
                "top k chunks' union and the relevant spans' union.", gate=False),
)
_SPAN_BY_NAME: Dict[str, _SpanMeasure] = {m.name: m for m in _SPAN_MEASURES}
_ALL_MEASURES = dict.fromkeys([*_BY_NAME, *_SPAN_BY_NAME])  # what --measures takes
_SPELLINGS.update((f"{m.name}@", m.name) for m in _SPAN_MEASURES if m.name not in _BY_NAME)  # iou@k parses
_DEFAULT_SPAN_MEASURES = tuple(m.name for m in _SPAN_MEASURES)
_SPAN_RULES = f"""\
Evidence judgments (JSONL qrels rows with start and end) score the characters
the top k chunks retrieve; the same metrics of their documents are reported as
{_DOC_LEVEL}MEASURE@k (a document judged by its best span, ranked at its best
chunk's place).  When every chunk is exactly one span and spans do not overlap,
recall, success, mrr and ndcg equal the id-based numbers; precision and iou do
when every span has the same length (precision: and k chunks were retrieved)."""


def _min_overlap_ratio(min_overlap):
    """``min_overlap`` as an exact fraction of its decimal spelling (0.1 is 1/10, not a float's 0.1000...0555)."""
    from fractions import Fraction

    if not _is_finite(min_overlap) or not 0 < min_overlap <= 1:
        raise RagEvalError(f"min overlap must be a fraction in (0, 1], got {_clipped_repr(min_overlap)}")
    ratio = Fraction(repr(float(min_overlap)))
    return ratio.numerator, ratio.denominator


def _ranked_documents(numbers, document, grades):
    """A query's documents ranked at their best chunk's place, as a reduced query: the judged ones' ranks."""
    ranked = dict.fromkeys(map(document.__getitem__, numbers))  # each document once, at its best chunk, in C
    ranks = dict(zip(ranked, range(1, len(ranked) + 1)))
    return _Reduced(len(ranks), tuple((ranks[doc], doc) for doc in grades if doc in ranks), (), None)


def _check_span_qrels(qrels):
    if not isinstance(qrels, _MAPPINGS) or not all(isinstance(spans, (tuple, list)) for spans in qrels.values()):
        raise RagEvalError("expected evidence judgments: query -> list of Span", "qrels")
    for qid, spans in qrels.items():
        _string_id(qid, "query id", "qrels")
        for span in spans:
            if not isinstance(span, Span) or not isinstance(span.doc_id, str) \
                    or not (_is_int(span.start) and _is_int(span.end) and 0 <= span.start < span.end) \
                    or not (_is_int(span.grade) and 0 <= span.grade <= _MAX_GRADE):
                raise RagEvalError(f"query {_clipped_repr(qid)}: expected a Span(doc_id, start, end, grade) with "
                                   f"0 <= start < end, got {_clipped_repr(span)}", "qrels")


def evaluate_spans(
    qrels: Mapping[str, Tuple[Span, ...]],
    run: Run,
    chunks: Mapping[str, Location],
    k: Union[int, Iterable[int]] = _DEFAULT_K,
    *,
    measures: Optional[Iterable[str]] = None,
    gain: str = "exp",
    min_grade: int = 1,
    min_overlap: float = _DEFAULT_MIN_OVERLAP,
    drop_unknown_queries: bool = False,
    abstain_below: Optional[float] = None,
) -> dict:
    """Score a run of chunks against evidence spans, and the same run's documents.

    ``chunks`` locates every chunk of the run: chunk id -> (doc_id, start, end).  Returns what
    ``evaluate`` returns, the evidence metrics (``recall@5``) beside the document ones (``doc.recall@5``):
    docs/spans.md.

    >>> spans = SpanQrels({"q": (Span("d", 0, 10, 2),)})
    >>> located = {"c1": ("d", 0, 6), "c2": ("d", 6, 20)}
    >>> result = evaluate_spans(spans, {"q": ["c2", "c1"]}, located, k=1, measures=["recall", "precision"])
    >>> result["mean"]["recall@1"], result["mean"]["precision@1"], result["mean"]["doc.recall@1"]  # 4 of 10; 4 of 14
    (0.0, 0.2857142857142857, 1.0)
    """
    asked = _measures_asked(measures, _DEFAULT_SPAN_MEASURES)
    cutoffs = _check_cutoffs(k)
    pairs = _check_measures(asked, cutoffs, _ALL_MEASURES)
    single = _is_int(k) and all(name in _ALL_MEASURES for name in asked)
    # the measures (ndcg) and metrics (ndcg@10, ndcg_cut_10) asked that documents have too: not iou
    on_documents = [text for text in asked if (text if text in _ALL_MEASURES else parse_metric(text)[0]) in _BY_NAME]
    _check_span_qrels(qrels)
    _check_run(run)
    ratio = _min_overlap_ratio(min_overlap)
    if not isinstance(chunks, _MAPPINGS):
        raise RagEvalError(f"expected a chunk map, chunk id -> (doc_id, start, end), got {_json_kind(chunks)}", "chunks")
    index = _chunk_index(run, chunks)
    # What evaluate checks, checked before the spans are scored: the conventions and abstain_below.
    conv = _Conventions(gain, min_grade)
    _check_conventions(conv)
    documents = {}
    for qid, spans in qrels.items():
        grades = documents[qid] = {}
        for span in spans:
            grades[span.doc_id] = max(span.grade, grades.get(span.doc_id, 0))
    _check_gain_range(documents, conv)
    _check_abstain_below(abstain_below)
    columns = _columns([(name, cutoff) for name, cutoff in pairs if name in _SPAN_BY_NAME], single, _SPAN_BY_NAME)
    depth = max(cutoffs)

    def evidence_values(qid, numbers):
        q = _evidence(qrels[qid], numbers[:depth], index, conv, ratio)
        return {key: compute(q, cutoff) for key, _, compute, cutoff in columns}

    # One pass over the run: each query's chunks are ranked and numbered, for both levels, and let go.
    per_query, doc_run, tied = {}, {}, {}
    for qid, entry in run.items():
        ranking = _ranking(entry)
        try:
            numbers = list(map(index.number.__getitem__, ranking))
        except KeyError:  # the map, numbered whole, lacks a ranked chunk
            raise _unlocated(run, chunks) from None
        if qid in qrels:
            doc_run[qid] = _ranked_documents(numbers, index.document, documents[qid])
            per_query[qid] = evidence_values(qid, numbers)
            tied[qid] = _tied_at(entry, ranking, cutoffs)
    # The document level: it checks the queries, as evaluate does, and says which are scored.
    # (Asked for iou alone, it scores success too, to check; and drops it.)
    docs = evaluate(documents, _ReducedRun(doc_run, sorted(set(run) - set(qrels))), k,
                    measures=on_documents or ["success"], gain=gain, min_grade=min_grade,
                    drop_unknown_queries=drop_unknown_queries)
    doc_keys = [_DOC_LEVEL + key for key in next(iter(docs["per_query"].values()))] if on_documents else []
    scored = {}
    for qid, doc_values in docs["per_query"].items():
        values = scored[qid] = per_query[qid] if qid in per_query else evidence_values(qid, [])  # else not in the run
        values.update(zip(doc_keys, doc_values.values()))
    ties = Counter(chain.from_iterable(tied.get(qid, ()) for qid in scored))
    mean = _means(scored, columns)
    mean.update((_DOC_LEVEL + metric, value) for metric, value in docs["mean"].items() if on_documents)
    return dict(docs, k=k if single else cutoffs, mean=mean, per_query=scored, ties={str(c): ties[c] for c in cutoffs},
                judged={}, abstention=_abstention(docs["unscored"], run, abstain_below),
                conventions=dict(conv._asdict(), min_overlap=float(min_overlap)))


# --- Labels against the corpus, and migrating chunk labels ---


def _read_corpus(path, max_bytes=None, what="document", keep=None):
    """The documents' (or queries') text by id, of those in ``keep`` when given (memory follows the labels)."""
    corpus = {}
    seen = set()
    ids = (_JSONL_DOC if what == "document" else _JSONL_QUERY) + ("_id",)
    with _opened(path) as inp:
        for lineno, row in _jsonl_rows(inp, _MAX_RUN_BYTES if max_bytes is None else max_bytes):
            doc = _short_id(row, ids, f"{what} id", inp.source, lineno)
            text = _row_field(row, ("text", "query"), "text", inp.source, lineno)
            if not isinstance(text, str):
                raise RagEvalError(f"text must be a string, got {_json_kind(text)}", inp.source, lineno)
            if doc in seen:
                raise RagEvalError(f"{what} {_clipped_repr(doc)} appears twice", inp.source, lineno)
            seen.add(doc)
            if keep is None or doc in keep:
                corpus[doc] = text
    return corpus


def _check_labels(qrels, corpus):
    """Check every span against its document's text."""
    rows, fixed, moved, wanted = [], SpanQrels(), {}, {}
    for span in chain.from_iterable(qrels.values()):  # the quoted texts not at their place, by document
        text = corpus.get(span.doc_id)
        if text is not None and span.text is not None and text[span.start:span.end] != span.text:
            wanted.setdefault(span.doc_id, set()).add(span.text)
    places = {(doc, quote): where for doc, quotes in wanted.items() for quote, where in _find_all(corpus[doc], quotes)}
    for qid in sorted(qrels):
        checked = [(span, *_label_status(span, corpus.get(span.doc_id), places)) for span in qrels[qid]]
        clashed = _clashing_moves([(span, span_now) for span, _, _, span_now in checked])
        kept = {}
        for index, (span, status, found, span_now) in enumerate(checked):
            if index in clashed:
                status, found, span_now = "orphaned", (f"would move onto [{span_now.start}, {span_now.end}), "
                                                       "judged otherwise there"), span
            rows.append((qid, span, status, found))
            kept.setdefault(span_now[:3], span_now)
            if status == "moved":
                moved[qid, span[:3]] = (span_now.start, span_now.end)
        fixed[qid] = tuple(sorted(kept.values()))
    return _LabelCheck(fixed, rows, moved)


def _clashing_moves(places):
    """Of one query's (span, where it would be now) pairs, the moves that stay where they were judged: a move
    onto a place judged with another grade by a span that stays there, or shared by moves of two grades.  A
    move kept back stays too, so the others are checked again, until none clashes."""
    back = set()
    while True:
        now = [span if index in back else place for index, (span, place) in enumerate(places)]
        staying = {span[:3]: span.grade for (span, _), place in zip(places, now) if place is span}
        grades = {}
        for place in now:
            grades.setdefault(place[:3], set()).add(place.grade)
        clash = set()
        for index, ((span, _), place) in enumerate(zip(places, now)):
            holder = staying.get(place[:3])  # the grade of a span that stays at the place, if one does
            if place is not span and (holder != place.grade if holder is not None else len(grades[place[:3]]) > 1):
                clash.add(index)
        if not clash:
            return back
        back |= clash


def _find_all(text, quotes):
    """(quote, (its first offset in ``text`` or -1, how often it is there, up to 2)) for each of ``quotes``.
    Quotes of 16 characters or more in one pass, whatever their number: a window read every ``step``
    characters lies in each occurrence at one of its quote's first ``step`` offsets."""
    scanned = {quote for quote in quotes if len(quote) >= 16}
    for quote in quotes - scanned:
        first = text.find(quote)
        yield quote, (first, 0 if first < 0 else 1 + (text.find(quote, first + 1) >= 0))
    shortest = min(map(len, scanned), default=16)
    width = min(32, (shortest + 1) // 2)  # half a quote: a window common in the text is rare among the quotes
    step = min(64, shortest - width + 1)
    windows = {}
    for quote in scanned:
        for offset in range(step):
            windows.setdefault(quote[offset:offset + width], []).append((quote, offset))
    where = {quote: set() for quote in scanned}
    for at in range(0, len(text) - width + 1, step) if scanned else ():
        for quote, offset in windows.get(text[at:at + width], ()):
            if len(where[quote]) < 2 and at >= offset and text.startswith(quote, at - offset):
                where[quote].add(at - offset)
    for quote, places in where.items():
        yield quote, (min(places, default=-1), len(places))


def _label_status(span, text, places):
    if text is None:
        return "orphaned", "document not in the corpus", span
    if span.text is None:
        if span.end <= len(text):
            return "unchecked", "no quoted text", span
        return "orphaned", f"past the end ({len(text)} characters)", span
    if text[span.start:span.end] == span.text:
        return "valid", "", span
    first, count = places[span.doc_id, span.text]
    if count != 1:
        return "orphaned", "quoted text not found" if count == 0 else "quoted text found more than once", span
    moved = span._replace(start=first, end=first + len(span.text))
    return "moved", f"now [{moved.start}, {moved.end})", moved


def _labels_table(check, fmt):
    """Spans per query and status, then each span that is not valid, as ``fmt`` (a name of FORMATTERS; JSON
    and CSV list every span); ids on one line each, nothing a CI runner would take for a workflow command."""
    counts = {}
    for qid, _, status, _ in check.rows:
        counts.setdefault(qid, dict.fromkeys(_LABEL_STATUSES, 0))[status] += 1
    spans = [[qid, span.doc_id, span.start, span.end, status, found] for qid, span, status, found in check.rows]
    fields = ["query_id", "doc_id", "start", "end", "status", "found"]
    if fmt == "json":
        return _format_json({"queries": counts, "spans": [dict(zip(fields, row)) for row in spans]}, _DEFAULT_DIGITS)
    if fmt == "csv":
        return _csv_text([fields] + [list(map(str, row)) for row in spans])
    rows = [["query", *_LABEL_STATUSES]]
    rows += [[qid, *map(str, c.values())] for qid, c in sorted(counts.items(), key=lambda item: _natural_order(item[0]))]
    rows.append(["all", *(str(sum(c[s] for c in counts.values())) for s in _LABEL_STATUSES)])
    shown = [[status, qid, doc, f"[{start}, {end})", found] for qid, doc, start, end, status, found in spans
             if status != "valid"]
    if fmt == "markdown":
        return _markdown_table(rows, {0: _markdown_input}) + "\n" + ("\n" + _markdown_table(
            [["status", "query", "document", "span", "found"]] + shown, {1: _markdown_input, 2: _markdown_input}) + "\n"
                                                                  if shown else "")
    return _neutralise_workflow_commands(_aligned(rows) + "\n" + "".join(
        f"{status} {_one_line(qid)} {_one_line(doc)} {span}: {found}\n" for status, qid, doc, span, found in shown))


def _spans_text(qrels):
    """Evidence qrels as JSONL rows, by query then document and start; no ``text`` where a span has none."""
    lines = []
    for qid in sorted(qrels):
        for span in qrels[qid]:
            row = {"query_id": qid, "doc_id": span.doc_id, "start": span.start, "end": span.end, "grade": span.grade}
            if span.text is not None:
                row["text"] = span.text
            lines.append(json.dumps(row, ensure_ascii=False) + "\n")
    return "".join(lines)


def _fixed_labels_text(qrels, check, source="qrels"):
    """The qrels rows as read, every field kept, with moved spans at their new offsets (qrels made in memory:
    ``_spans_text`` of the fixed ones).  Rows that then judge one place differently are an error."""
    rows = getattr(qrels, "rows", None)
    if rows is None:
        return _spans_text(check.fixed)
    lines = []
    for qid, where, row in rows:
        now = check.moved.get((qid, where))
        lines.append(dict(row, start=now[0], end=now[1]) if now else row)
    if check.moved:
        _span_qrels(enumerate(lines, 1), source)
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in lines)


def _to_spans(qrels, chunks, corpus):
    """Chunk-id judgments become evidence spans: each judged chunk at its offsets in the chunk map,
    with its grade and, with ``corpus``, its text (a chunk the map lacks is an error; two at one place must agree)."""
    spans = SpanQrels()
    for qid in sorted(qrels):
        kept = {}
        for chunk, grade in sorted(qrels[qid].items()):
            if chunk not in chunks:
                raise RagEvalError(f"query {_clipped_repr(qid)}: judged chunk {_clipped_repr(chunk)} is not in the chunk map", "chunks")
            doc, start, end = chunks[chunk]
            text = None if corpus is None else corpus.get(doc, "")[start:end]
            if text is not None and len(text) != end - start:
                raise RagEvalError(f"chunk {_clipped_repr(chunk)} lies outside its document's text", "corpus")
            span = kept.setdefault(chunks[chunk], Span(doc, start, end, grade, text))
            if span.grade != grade:
                raise RagEvalError(f"query {_clipped_repr(qid)}: chunks at {_clipped_repr(chunks[chunk])} are judged "
                                   f"{span.grade} and {grade}", "qrels")
        spans[qid] = tuple(sorted(kept.values()))
    return spans


# === Statistics ===
# Paired comparisons and intervals, the same bytes on every Python (docs/gate.md): randomness only from a
# seeded random.Random; floats summed by math.fsum, one addition at a time, or as integers on a grid
# (``_on_grid``), never otherwise by sum(), compensated since 3.12.  The ways of summing random halves
# (masks, lookups, bounds) give the same bits: docs/performance.md, "The paired statistics".

_DEFAULT_RESAMPLES = 10_000
_DEFAULT_ALPHA = 0.05
_DEFAULT_SEED = 0
_CONFIDENCE = 0.95
_POWER = 0.80
_DEFAULT_SIMULATIONS = 100  # --calibrate: simulated gates per scenario
_MIN_PAIRED = 6  # queries: below, --gate significant decides nothing (inconclusive)
_EXACT_SIGN_FLIP_MAX = 16  # up to this many differing queries, enumerate all 2**n sign patterns
# A flipped sum within this share of sum(|deltas|) of the observed one ties it, and a tie counts as
# extreme: 1 - 2/3 and 2/3 - 1/3 are one third, two floats.  Rounding errors are some 1e-16 of that scale.
_TIE_TOLERANCE = 1e-9
# Work bounded up front (docs/reliability.md): seconds a resampling may take, at the ns per value resampled
# measured by tools/bench/bench_budget.py.
_WORK_BUDGET, _NS_PER_VALUE = 300, 6


def _within_budget(what, values, option, count):
    """Refuse ``what`` before it starts when its ``values`` resampled would take over WORK_BUDGET s."""
    seconds = values * _NS_PER_VALUE / 1e9
    if seconds > _WORK_BUDGET:
        raise RagEvalError(f"{what} would take about {seconds:,.0f} s ({values:.2g} values resampled), over the "
                           f"budget of {_WORK_BUDGET} s: {option} {int(count * _WORK_BUDGET / seconds)} fits, or fewer "
                           "metrics or queries")


def _random(seed):
    """A seeded ``random.Random``, the only source of randomness (imported only when a resampling runs)."""
    import random

    return random.Random(seed)


class Interval(NamedTuple):
    low: float
    high: float


class PairedComparison(NamedTuple):
    """Per-query scores of one metric, before and after, compared pairwise."""

    metric: str
    queries: int  # queries scored on both sides
    mean_delta: float  # mean of after - before
    improved: int
    worse: int
    same: int
    p_value: float  # two-sided paired randomization (sign-flip) test
    exact: bool  # p_value enumerated every sign pattern (else sampled)
    interval: Interval  # bootstrap CONFIDENCE interval of mean_delta
    hit_to_miss: List[str]  # queries that scored above 0 before and 0 after
    largest_drops: List[Tuple[str, float]]  # (qid, delta), the worst first
    spread: Optional[float]  # standard deviation of the deltas (None below 2 queries)


def _subset_sums(values):
    """The sum of every subset of ``values``: entry s sums the values whose bit is set in s."""
    sums = [0]
    for value in values:
        sums += [subtotal + value for subtotal in sums]
    return sums


class _Halves(NamedTuple):
    """One column's random halves, one per resample: each half's sum lies in [low[r], high[r]] (cheap)
    and is exactly ``exact(r)`` (dear, asked for only where a bound leaves a decision open)."""

    low: List[float]
    high: List[float]
    sizes: List[int]  # how many of the column's positions each half holds
    exact: Callable[[int], float]


def _exact_halves(sums, sizes):
    return _Halves(sums, sums, sizes, sums.__getitem__)


def _shared_halves(value_lists, resamples, rng):
    """Per list (all of length n), per resample a random half: bit i of one ``rng.getrandbits(n)`` is
    a list's i-th nonzero value, then come its zeros; each list gets the halves it would draw alone."""
    draws = [rng.getrandbits(len(value_lists[0])) for _ in range(resamples)]
    layouts = [[value for value in values if value] + [0.0] * values.count(0) for values in value_lists]
    return _halves_of(layouts, [None] * len(layouts), draws)


def _joint_halves(columns, width, resamples, rng):
    """Random halves shared by several tests (a family), one per column."""
    differing = set().union(*({p for p, value in column.items() if value} for column in columns))
    order = sorted(differing) + [p for p in range(width) if p not in differing]
    draws = [rng.getrandbits(width) for _ in range(resamples)]
    # None: the column covers every position, so its half holds every set bit
    covers = [None if len(column) == width else int("".join("1" if p in column else "0" for p in reversed(order)), 2)
              for column in columns]
    return _halves_of([[column.get(p, 0.0) for p in order] for column in columns], covers, draws)


_HAS_BIT_COUNT = hasattr(int, "bit_count")  # Python 3.10+; 3.9 counts bits by bytes, and sums by lookups
_BITS_SET = bytes(bin(byte).count("1") for byte in range(256))  # how many bits of each byte are 1
_LOOKUP_BELOW = 512  # positions: below, lookups cost less than masks at any number of draws
_PACK_WIDTH = 2_047  # positions: up to this, packed lookups beat masks; from COARSE_FROM masks with bounds win
_PACK_DRAWS = 1_000  # draws: fewer do not pay for the tables of lookups beyond LOOKUP_BELOW positions
_FEW_MASKS = 8  # masks: a column of so few (a 0/1 measure has 2) takes masks, dearer lookups or not
_COARSE_FROM = 2_048  # positions: below, the bounds' bookkeeping costs more than the low bits they spare
# A half's coarse sum (the values' top bits) is off by at most ``slack`` < width * 2**shift; the shift
# keeps that below 1/COARSE_SHARE of sum(|values|) / sqrt(width), at most 1/32 of the halves' standard
# deviation (that is sqrt(sum(values**2)) / 2, by Cauchy-Schwarz at least sum(|values|) / (2 sqrt(width))).
_COARSE_SHARE = 64


def _popcount(bits):
    if _HAS_BIT_COUNT:
        return bits.bit_count()
    return sum(bits.to_bytes((bits.bit_length() + 7) // 8, "little").translate(_BITS_SET))


def _halves_of(layouts, covers, draws):
    """Per column (values of one width), the halves of ``draws``: value i is in a draw's half when its
    bit i is set; a half's size counts the positions of the column's cover (a bit mask; None: all)."""
    everyone = [_popcount(draw) for draw in draws] if None in covers else None
    sizes = [everyone if cover is None else [_popcount(draw & cover) for draw in draws] for cover in covers]
    grids = [_on_grid(values) for values in layouts]
    width = len(layouts[0])
    halves = {}
    if _HAS_BIT_COUNT and width >= _LOOKUP_BELOW:
        lookups_pay = len(draws) >= _PACK_DRAWS and width < _COARSE_FROM
        for index, (scale, whole) in enumerate(grids):
            terms = _mask_terms(whole)
            if not lookups_pay or len(terms) <= _FEW_MASKS:
                halves[index] = _mask_halves(scale, whole, terms, sizes[index], draws)
    rest = [index for index in range(len(layouts)) if index not in halves]
    for index, column_sums in zip(rest, _lookup_sums([grids[index][1] for index in rest], draws)):
        halves[index] = _exact_halves([math.ldexp(total, grids[index][0]) for total in column_sums], sizes[index])
    return [halves[index] for index in range(len(layouts))]


def _on_grid(values):
    """(e, integers): each value rounded to a whole multiple of 2**e, e chosen so that sum(|integers|)
    stays below 2**53.  Every sum of them is then exact (in integers, or in floats that hold them
    exactly), the same bits on every Python and in any order.  The rounding moves a value by at most
    half a unit, sum(|values|) * 2**-53 (2**-52 on the coarser grid): far inside TIE_TOLERANCE."""
    scale = math.frexp(math.fsum(map(abs, values)) or 1.0)[1] - 53
    whole = list(map(round, map(math.ldexp, values, repeat(-scale))))
    if sum(map(abs, whole)) >= 2 ** 53:  # rounded up past 2**53 (a value in 2**53 is that close): one step coarser
        scale += 1
        whole = list(map(round, map(math.ldexp, values, repeat(-scale))))
    return scale, whole


def _mask_terms(whole):
    """(weight, mask) pairs with sum(whole[i] for bits i of d) = sum(weight * popcount(d & mask)): bit b of
    every integer (|integer| < 2**53) in two's complement, the sign bit weighing -2**(bits - 1)."""
    bits = max(map(abs, whole), default=0).bit_length() + 1
    lanes = array("q", whole)  # 64-bit lanes in two's complement, read below as one integer, the last first
    if sys.byteorder == "big":
        lanes.byteswap()
    digits = format(int.from_bytes(lanes.tobytes(), "little"), f"0{64 * len(whole)}b")  # every 64th: one bit of all
    planes = [(-1 << (bits - 1), digits[0::64])] + [(1 << bit, digits[63 - bit::64]) for bit in range(bits - 1)]
    return [(weight, int(plane, 2)) for weight, plane in planes if "1" in plane]


def _mask_halves(scale, whole, terms, sizes, draws):
    """Halves summed by masks (Python 3.10+): the top bits (weights from 2**shift up, and the sign;
    COARSE_SHARE) give the bounds, the low bits, added only where ``exact`` is asked, the rest."""
    width = len(whole)
    shift = 0 if width < _COARSE_FROM else \
        max(0, (sum(map(abs, whole)) // (_COARSE_SHARE * width * math.isqrt(width) + 1)).bit_length() - 1)
    top = [(weight, mask) for weight, mask in terms if weight < 0 or weight >> shift]
    low = [(weight, mask) for weight, mask in terms if 0 < weight < 1 << shift]
    coarse = [sum([weight * (draw & mask).bit_count() for weight, mask in top]) for draw in draws]
    if not low:
        return _exact_halves([math.ldexp(total, scale) for total in coarse], sizes)
    slack = sum(weight * mask.bit_count() for weight, mask in low)  # the low bits of every value: 0 <= rest <= slack

    def exact(resample):
        draw = draws[resample]
        return math.ldexp(coarse[resample] + sum([weight * (draw & mask).bit_count() for weight, mask in low]), scale)

    return _Halves([math.ldexp(total, scale) for total in coarse],
                   [math.ldexp(total + slack, scale) for total in coarse], sizes, exact)


def _lookup_sums(columns, draws):
    """Per column, per draw, the sum of the integers whose bit is set: eight positions share a table of
    their 256 subset sums, and one byte of the draw picks a subset.  Several columns up to PACK_WIDTH
    positions are packed in 64-bit lanes of one integer (|sum| < 2**53 fits), so one lookup serves them
    all; else one column at a time keeps its tables (of floats) in the processor's cache."""
    if not columns:
        return []
    width = len(columns[0])
    chosen_bytes = [draw.to_bytes((width + 7) // 8, "little") for draw in draws]
    if len(columns) == 1 or width > _PACK_WIDTH:  # floats: sum() adds them in C without allocating, exact below 2**53
        tables = [[array("d", _subset_sums(values[start:start + 8])) for start in range(0, width, 8)]
                  for values in columns]
        return [[sum(map(getitem, column, chosen)) for chosen in chosen_bytes] for column in tables]
    packed = [sum(value << (64 * lane) for lane, value in enumerate(position)) for position in zip(*columns)]
    tables = [_subset_sums(packed[start:start + 8]) for start in range(0, width, 8)]
    # each lane raised by 2**63 is a whole 64-bit number: the packed sums' bytes are the lanes
    bias = sum(1 << (64 * lane + 63) for lane in range(len(columns)))
    lanes = array("Q", b"".join((sum(map(getitem, tables, chosen)) + bias).to_bytes(8 * len(columns), "little")
                                for chosen in chosen_bytes))
    if sys.byteorder == "big":
        lanes.byteswap()
    return [[total - (1 << 63) for total in lanes[lane::len(columns)]] for lane in range(len(columns))]


def _flipped_sizes(total, halves, scale, thresholds):
    """Per resample, |total - 2 * half| / scale: the size of the flipped sum, exact where it could fall
    on either side of a threshold, else a bound on the side it falls (so every comparison with a
    threshold is that of the exact value)."""
    if halves.low is halves.high:
        return [abs(total - 2 * half) / scale for half in halves.low]
    found = []
    for resample, (low, high) in enumerate(zip(halves.low, halves.high)):
        top, bottom = total - 2 * low, total - 2 * high  # the flipped sum lies in [bottom, top]
        least = (bottom if bottom >= 0 else -top if top <= 0 else 0.0) / scale
        if any(least < threshold <= max(top, -bottom) / scale for threshold in thresholds):
            least = abs(total - 2 * halves.exact(resample)) / scale
        found.append(least)
    return found


def _as_extreme(deltas, halves):
    """How many halves flip the deltas to a sum as extreme as the observed one:
    |total - 2 * half| >= |total|, ties (within TIE_TOLERANCE) included."""
    total = math.fsum(deltas)
    extreme = abs(total) - _TIE_TOLERANCE * math.fsum(map(abs, deltas))
    return sum(1 for size in _flipped_sizes(total, halves, 1.0, [extreme]) if size >= extreme)


def sign_flip_test(deltas: Iterable[float], resamples: int = _DEFAULT_RESAMPLES, rng=None) -> Tuple[float, bool]:
    """Two-sided paired randomization test of mean(deltas) = 0; returns (p, exact).

    Under the null hypothesis each query's difference is as likely to have the other sign (Fisher's
    randomization test; Smucker, Allan & Carterette 2007 recommend it for IR).  Deltas of one size
    (a 0/1 measure) make it the sign test, exact at any count.  Otherwise up to EXACT_SIGN_FLIP_MAX
    differing queries enumerate every sign pattern (exact); beyond, ``resamples`` random patterns give
    p = (1 + as extreme) / (1 + resamples), never 0.  A tie within TIE_TOLERANCE counts as extreme.

    >>> sign_flip_test([0.5, 0.5, 0.5])  # 2 of the 8 patterns are as extreme
    (0.25, True)
    """
    deltas = _finite_values(deltas, "deltas")
    nonzero = [delta for delta in deltas if delta]
    if not nonzero:
        return 1.0, True
    if _one_size(nonzero):
        return _sign_test(sum(1 for delta in nonzero if delta > 0), len(nonzero)), True
    if len(nonzero) <= _EXACT_SIGN_FLIP_MAX:
        return _as_extreme(nonzero, _exact_halves(_subset_sums(nonzero), [])) / 2 ** len(nonzero), True
    halves = _shared_halves([deltas], resamples, rng or _random(_DEFAULT_SEED))[0]
    return (1 + _as_extreme(deltas, halves)) / (1 + len(halves.sizes)), False


def _finite_values(values, what):
    """``values`` as a list, refused if one is NaN or infinite (a p of 0 or NaN, an interval of NaN)."""
    values = list(values)
    if not _all_finite(values) and not all(map(_is_finite, values)):
        raise RagEvalError(f"{what} must be finite numbers")
    return values


def _percentile_interval(means, confidence):
    """The ceil(tail R)-th and ceil((1 - tail) R)-th smallest of R means, tail = (1 - confidence) / 2."""
    means, tail = sorted(means), (1 - confidence) / 2

    def rank(share):  # 1e-9: (1 - 0.95) / 2 * 10_000 is 250.00000000000023 in floats, and rank 250
        return min(len(means), max(1, math.ceil(share * len(means) - 1e-9)))

    return Interval(means[rank(tail) - 1], means[rank(1 - tail) - 1])


def _bootstrap_from_halves(values, halves, confidence):
    """The percentile interval of mean + sum(signs * (values - mean)) / n, a random half of the signs flipped."""
    n, total = len(values), math.fsum(values)
    mean = total / n
    if not halves.sizes:
        return Interval(mean, mean)

    def resampled(half, size):  # sum(signs * values) = total - 2 * half, sum(signs) = n - 2 * size
        return mean + ((total - 2 * half) - mean * (n - 2 * size)) / n

    if halves.low is halves.high:
        return _percentile_interval(list(map(resampled, halves.low, halves.sizes)), confidence)
    # A mean falls as its half grows.  The k-th smallest mean lies between the k-th smallest of the
    # bounds; a resample whose bounds miss both such windows keeps a bound, on the same side.
    lows, highs = list(map(resampled, halves.high, halves.sizes)), list(map(resampled, halves.low, halves.sizes))
    windows = list(zip(_percentile_interval(lows, confidence), _percentile_interval(highs, confidence)))
    means = [resampled(halves.exact(resample), size) if any(low <= top and high >= bottom for bottom, top in windows)
             else low for resample, (low, high, size) in enumerate(zip(lows, highs, halves.sizes))]
    return _percentile_interval(means, confidence)


def bootstrap_interval(values: Iterable[float], resamples: int = _DEFAULT_RESAMPLES, rng=None,
                       confidence: float = _CONFIDENCE) -> Interval:
    """Percentile interval of the mean by the wild (sign-flip) bootstrap (Efron & Tibshirani 1993, ch. 13).

    Each resample gives every value's distance from the mean a random sign: the wild bootstrap with
    Rademacher weights (Liu 1988; Mammen 1993), Owen & Eckles' (2012) double-or-nothing weights on
    the distances.  The resampled means vary exactly as the ordinary bootstrap's, by
    sum((value - mean)**2) / n**2, at every n; the interval is symmetric where the ordinary one
    follows the skew.  One random bit per value: the sign-flip test's resampling.

    >>> bootstrap_interval([0.25, 0.25, 0.25])
    Interval(low=0.25, high=0.25)
    """
    values = _finite_values(values, "values")
    if not values:
        raise RagEvalError("no values to bootstrap")
    if values.count(values[0]) == len(values):  # constant: exactly [value, value], whatever the rounding
        return Interval(values[0], values[0])
    halves = _shared_halves([values], resamples, rng or _random(_DEFAULT_SEED))[0]
    return _bootstrap_from_halves(values, halves, confidence)


def _binomial_at_most(successes, trials, p):
    """P(X <= successes) for X ~ Binomial(trials, p), as a sum of pmf terms.

    Summed over the tail below the mean (the other one by X -> trials - X), where the terms fall the
    faster the farther they are: those beyond 12 standard deviations (below 1e-30 of the largest) are
    left out, and the first term, taken in logs, does not overflow at any size.
    """
    if p >= 1.0:  # 1 - p of a p below 2**-54, or a bisection at confidence 1 (0 <= successes < trials always)
        return 0.0
    if successes >= trials * p:
        return 1.0 - _binomial_at_most(trials - successes - 1, trials, 1.0 - p)
    first = math.exp(math.lgamma(trials + 1) - math.lgamma(successes + 1) - math.lgamma(trials - successes + 1)
                     + successes * math.log(p) + (trials - successes) * math.log1p(-p))
    # pmf(i - 1) = pmf(i) * i / (trials - i + 1) * (1 - p) / p, from i = successes down
    ratios = map(mul, map(truediv, range(successes, 0, -1), range(trials - successes + 1, trials + 1)),
                 repeat((1.0 - p) / p))
    # + 30 for small spreads, where 12 deviations are few terms (the first term left out is below 1e-32 of the first)
    terms = int(12 * math.sqrt(trials * p * (1.0 - p))) + 30
    return math.fsum(accumulate(islice(ratios, terms), mul, initial=first))


def _clopper_pearson(successes, trials, confidence=_CONFIDENCE):
    """Exact binomial interval for a share of 0/1 outcomes (Clopper & Pearson 1934).

    >>> [round(x, 4) for x in _clopper_pearson(5, 10)]
    [0.1871, 0.8129]
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise RagEvalError(f"clopper_pearson needs 0 <= successes <= trials >= 1, got {successes}/{trials}")

    def solve(at_most, probability):  # the p with P(X <= at_most | p) = probability
        low, high = 0.0, 1.0
        for _ in range(64):
            middle = (low + high) / 2
            if _binomial_at_most(at_most, trials, middle) > probability:
                low = middle
            else:
                high = middle
        return (low + high) / 2

    tail = (1 - confidence) / 2
    return Interval(0.0 if successes == 0 else solve(successes - 1, 1 - tail),
                    1.0 if successes == trials else solve(successes, tail))


def _holm(p_values):
    """Holm-Bonferroni adjusted p-values: the family-wise error stays at alpha (Holm 1979).

    >>> _holm({"a": 0.01, "b": 0.04, "c": 0.03})
    {'a': 0.03, 'c': 0.06, 'b': 0.06}
    """
    ordered = sorted(p_values.items(), key=lambda item: (item[1], item[0]))
    adjusted, running = {}, 0.0
    for rank, (name, p) in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p))
        adjusted[name] = running
    return adjusted


def _one_size(nonzero):
    """Whether every value has the same size (+-c): then the sign-flip test is the sign test."""
    return len(set(map(abs, nonzero))) == 1


def _sign_test(better, differing):
    """Exact two-sided sign test: P(|B - n/2| >= |better - n/2|), B ~ Binomial(n, 1/2), n = ``differing``.

    >>> _sign_test(0, 6)  # six worse, none better: 2 of the 64 patterns
    0.03125
    >>> _sign_test(0, 17) == 2 / 2 ** 17
    True
    """
    if differing <= 0:
        return 1.0
    fewer = min(better, differing - better)
    if 2 * fewer >= differing:  # the observed sum is 0 (or the count is odd and as balanced as it gets)
        return 1.0
    tail, term = 0, 1
    for i in range(fewer + 1):  # comb(n, i), one step at a time
        tail += term
        term = term * (differing - i) // (i + 1)
    return max(2 * tail / (1 << differing), 5e-324)


class _Family(NamedTuple):
    """The tests of one family on shared sign flips: per test, its deltas by position, and the resampling."""

    keys: List[str]
    columns: List[Dict[int, float]]  # test -> position -> delta (the test's own queries only)
    width: int  # positions: the union of every test's queries
    halves: Optional[List[_Halves]]  # None: enumerated exactly


def _family(deltas, resamples, seed):
    """Line up the tests on the union of their queries and draw one shared resampling (or none: exact)."""
    keys = sorted(deltas)
    queries = sorted(set().union(*(deltas[key] for key in keys)))
    position = {qid: i for i, qid in enumerate(queries)}
    columns = [{position[qid]: value for qid, value in deltas[key].items()} for key in keys]
    differing = len(set().union(*({p for p, value in column.items() if value} for column in columns)))
    halves = None if differing <= _EXACT_SIGN_FLIP_MAX else \
        _joint_halves(columns, len(queries), resamples, _random(f"rag_eval:{seed}:family"))
    return _Family(keys, columns, len(queries), halves)


def maxt(deltas: Mapping[str, Mapping[str, float]], resamples: int = _DEFAULT_RESAMPLES, seed: int = _DEFAULT_SEED,
         p_values: Optional[Mapping[str, float]] = None) -> Dict[str, float]:
    """Step-down MaxT adjusted p-values of a family of paired tests (Westfall & Young 1993, alg. 2.8).

    ``deltas`` maps each test (a metric, a cutoff, a slice) to its per-query deltas.  A test's
    statistic T = |sum(deltas)| / sqrt(sum(deltas**2)) is unchanged by sign flips, so 0/1 and graded
    measures compare.  A sign pattern flips all tests of a query together, so metrics that move on
    the same queries share their null distribution, where Holm pays for each (Boytsov, Belova &
    Westfall 2013 for IR).  From the largest T down, a test's adjusted p is the share of patterns whose
    largest T among it and the tests after it reaches its T, never below the adjusted p before it nor
    its own p (``p_values``; its sign-flip p by default).  Patterns are enumerated up to
    EXACT_SIGN_FLIP_MAX differing queries, else ``resamples`` seeded ones give
    (1 + reached) / (1 + resamples), never 0.

    >>> maxt({"a": {"q1": -1.0, "q2": -1.0}, "b": {"q1": -0.5, "q2": -0.5}})
    {'a': 0.5, 'b': 0.5}
    """
    for key, values in deltas.items():
        _finite_values(values.values(), f"the deltas of {_clipped_repr(key)}")
    family = _family(deltas, resamples, seed)
    if p_values is None:
        p_values = {key: sign_flip_test(deltas[key].values(), resamples)[0] for key in family.keys}
    return _maxt_of(family, p_values)


def _maxt_of(family, p_values):
    if family.halves is None:  # every pattern of the positions where any test differs
        active = [p for p in range(family.width) if any(c.get(p) for c in family.columns)]
        halves = [_exact_halves(_subset_sums([c.get(p, 0.0) for p in active]), []) for c in family.columns]
        patterns = 2 ** len(active)
    else:
        halves, patterns = family.halves, len(family.halves[0].sizes)
    sums, observed, thresholds = [], [], []
    for column in family.columns:
        values = list(column.values())
        total, scale = math.fsum(values), math.sqrt(math.fsum(v * v for v in values))
        sums.append((total, scale))
        observed.append(abs(total) / scale if scale else 0.0)
        # a pattern within TIE_TOLERANCE of the observed sum ties it, as in the single test
        thresholds.append((abs(total) - _TIE_TOLERANCE * math.fsum(map(abs, values))) / scale if scale else -1.0)
    # per test, |sum(signs * deltas)| / sqrt(sum(deltas**2)) of every pattern, exact about every threshold
    statistics = [_flipped_sizes(total, column_halves, scale, thresholds) if scale else None
                  for (total, scale), column_halves in zip(sums, halves)]
    order = sorted(range(len(family.keys)), key=lambda i: (-observed[i], family.keys[i]))
    reached = [0] * len(order)
    rows = [statistics[i] for i in order]
    for pattern in range(patterns):
        running = 0.0
        for rank in range(len(order) - 1, -1, -1):
            row = rows[rank]
            if row is not None and row[pattern] > running:
                running = row[pattern]
            if running >= thresholds[order[rank]]:
                reached[rank] += 1
    adjusted, floor = {}, 0.0
    for rank, index in enumerate(order):  # patterns >= 1: an exact family of no differing query has one
        share = reached[rank] / patterns if family.halves is None else (1 + reached[rank]) / (1 + patterns)
        floor = max(floor, share, p_values[family.keys[index]])
        adjusted[family.keys[index]] = min(1.0, floor)
    return {key: adjusted[key] for key in family.keys}


def _standard_deviation(values):
    """Sample standard deviation with exact sums (statistics.stdev changed its arithmetic in 3.11)."""
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1))


@lru_cache(maxsize=64)
def _normal_quantile(p):
    from statistics import NormalDist

    if not 0 < p < 1:  # 1 - alpha / tests rounds to 1 below about 1e-16
        raise RagEvalError(f"alpha / tests must lie in [1e-16, 1), got {_clipped_repr(1 - p)}")
    return NormalDist().inv_cdf(p)


def _quantile(p, df):
    """Student's t quantile (the normal one at ``df`` 0) by Abramowitz & Stegun 26.7.5, within 0.1% from 5 df."""
    z = _normal_quantile(p)
    terms = ((z ** 3 + z) / 4, (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96,
             (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384,
             (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160)
    return z + sum(term / df ** order for order, term in enumerate(terms, 1)) if df else z


def _bound_width(spread, queries, quantile, reach=1.0):
    """How far a one-sided bound of a mean delta lies from the mean (docs/gate.md, "The rule").

    >>> round(_bound_width(0.0, 100, 1.75), 4)  # no query changed: q**2 / n
    0.0306
    """
    a = quantile * quantile * reach / (2 * queries)
    return a + math.sqrt(a * a + (quantile * (spread or 0.0)) ** 2 / queries)


def _sizing(spread, queries, alpha, power, tests, reach, tolerance=0.0):
    """(resolution, detectable drop at ``tolerance``) of _gated_metric's rule over ``tests``: normal
    approximations, a fall D made of lost queries adding D (reach - D) to the deltas' variance."""
    if not (1e-15 <= alpha < 1 and 0 < power < 1):
        raise RagEvalError(f"alpha must lie in [1e-15, 1) and power in (0, 1), got {_clipped_repr(alpha)} and "
                           f"{_clipped_repr(power)}")
    df, variance = queries - 1, (spread or 0.0) ** 2
    q = _quantile(1 - alpha / tests, df)
    z = _normal_quantile(power)
    c, g = (z + q) ** 2 / queries, q * q * reach / queries
    b = g + c * reach  # bounds first, a fall D adding D reach: (t - g)**2 >= c (variance + 2 t reach)
    found = b + math.sqrt(b * b - g * g + c * variance)
    e = tolerance + g  # D = e + u, u**2 = c (variance + D reach)
    beyond = e + (c * reach + math.sqrt((c * reach) ** 2 + 4 * c * (variance + e * reach))) / 2
    passing = (_quantile(1 - (1 - power) / tests, 0) * math.sqrt(variance / queries)
               + _bound_width(spread, queries, _quantile(1 - alpha, df), reach) + reach / (2 * queries))
    for _ in range(4):  # then down towards the fixed points with w itself and D (reach - D) (up to reach / 2)
        spreads = [math.sqrt(variance + min(fall, reach / 2) * (reach - min(fall, reach / 2)))
                   for fall in (2 * found, beyond)]
        found, beyond = (z * spread / math.sqrt(queries) + _bound_width(spread, queries, q, reach) + extra
                         for spread, extra in zip(spreads, (0.0, tolerance)))
    return max(passing, found), beyond


def _resolution(spread, queries, alpha=_DEFAULT_ALPHA, power=_POWER, tests=1, reach=1.0):
    """The smallest tolerance a gate of ``tests`` resolves: two equal runs pass with ``power`` (each test with
    1 - (1 - power) / tests) and a run worse by twice it fails with ``power``; None below 2 queries.

    >>> round(_resolution(0.3, 200, tests=8), 3)
    0.147
    """
    return _sizing(spread, queries, alpha, power, tests, reach)[0] if queries >= 2 else None


def _detectable_drop(spread, queries, alpha=_DEFAULT_ALPHA, power=_POWER, tolerance=0.0, tests=1, reach=1.0):
    """The true mean drop a gate of ``tests`` flags with ``power``; None below 2 queries.

    >>> round(_detectable_drop(0.2, 100, tolerance=0.02), 4)
    0.1341
    """
    return _sizing(spread, queries, alpha, power, tests, reach, tolerance)[1] if queries >= 2 else None


def _queries_needed(spread, tolerance, alpha=_DEFAULT_ALPHA, power=_POWER, tests=1, reach=1.0):
    """The fewest queries whose resolution is within ``tolerance`` (None: none below 2**62 is).

    >>> _queries_needed(0.3, 0.147, tests=8)  # the inverse of resolution's example
    200
    """
    fits = lambda n: _sizing(spread, n, alpha, power, tests, reach)[0] <= tolerance  # noqa: E731
    low, high = 1, 2
    while not fits(high):
        if high > 2 ** 62 or tolerance <= 0:
            return None
        low, high = high, high * 2
    while high - low > 1:  # fits(high), not fits(low): the resolution falls as n grows
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high


def _resolved_tolerances(per_query, alpha=_DEFAULT_ALPHA):
    """Per metric, the recommended --max-drop: the resolution of a family of every metric for a rerun that may
    change every query (deltas spread by sqrt(2) x the scores' deviation)."""
    return {metric: _resolution((_standard_deviation(list(values.values())) or 0.0) * math.sqrt(2), len(values), alpha,
                               _POWER, len(per_query), max(1.0, max(values.values()) - min(values.values())))
            for metric, values in per_query.items()}


def compare_paired(metric: str, before: Mapping[str, float], after: Mapping[str, float], *,
                   resamples: int = _DEFAULT_RESAMPLES, seed: int = _DEFAULT_SEED, show: int = 5,
                   halves: Optional[_Halves] = None) -> PairedComparison:
    """Compare one metric's per-query scores on the queries scored on both sides.

    ``halves``: the deltas' resampling in query order, drawn already (the gate draws one for its
    family, ``_joint_halves``); by default one generator per metric, seeded by its name.
    """
    common = sorted(before.keys() & after.keys())
    if not common:
        raise RagEvalError(f"{metric}: no query is scored on both sides")
    deltas = _finite_values((after[qid] - before[qid] for qid in common), f"{metric}: scores")
    nonzero = [delta for delta in deltas if delta]
    differing = len(nonzero)
    # One pass of random halves serves the test (unless exact) and the interval.
    if not differing:
        halves = _exact_halves([], [])
    elif halves is None:
        halves = _shared_halves([deltas], resamples, _random(f"rag_eval:{seed}:{metric}"))[0]
    exact = differing <= _EXACT_SIGN_FLIP_MAX or _one_size(nonzero)
    drawn = len(halves.sizes)  # halves drawn already bring their own count
    p_value = sign_flip_test(deltas)[0] if exact else (1 + _as_extreme(deltas, halves)) / (1 + drawn)
    drops = sorted((delta, qid) for qid, delta in zip(common, deltas) if delta < 0)
    return PairedComparison(
        metric=metric, queries=len(common), mean_delta=math.fsum(deltas) / len(common),
        improved=sum(1 for delta in nonzero if delta > 0), worse=len(drops), same=len(common) - differing,
        p_value=p_value, exact=exact,
        interval=_bootstrap_from_halves(deltas, halves, _CONFIDENCE),
        hit_to_miss=[qid for qid in common if before[qid] > 0 and after[qid] == 0],
        largest_drops=[(qid, delta) for delta, qid in drops[:show]],
        spread=_standard_deviation(deltas),
    )


def _mean_intervals(result, resamples=_DEFAULT_RESAMPLES, seed=_DEFAULT_SEED):
    """A CONFIDENCE interval for every mean: Clopper-Pearson for 0/1 measures, a bootstrap otherwise, cut to
    [0, 1], where every measure lies (the wild bootstrap is symmetric: 1, 0, 1 would reach 1.11)."""
    intervals, table = {}, _per_query_by_metric(result)
    _within_budget(f"--ci with --resamples {resamples}", resamples * sum(map(len, table.values())), "--resamples",
                   resamples)
    for metric, scores in sorted(table.items()):
        values = [scores[qid] for qid in sorted(scores)]
        judged = result.get("judge", {}).get("metrics", {}).get(metric)
        if judged is None and _measure_named(parse_metric(metric)[0]).binary:
            intervals[metric] = _clopper_pearson(sum(1 for v in values if v == 1.0), len(values))
        else:  # a judged metric's own range (negated when lower is better), if its tool documents one
            low, high = bootstrap_interval(values, resamples, _random(f"rag_eval:{seed}:ci:{metric}"))
            sign = -1 if metric.startswith(_JUDGE + "-") else 1
            span = sorted(sign * x for x in (judged or {}).get("range") or (0.0, 1.0)) \
                if judged is None or judged["range"] else (low, high)
            intervals[metric] = Interval(max(low, span[0]), min(high, span[1]))
    return intervals


# === Baseline and gate ===

_BASELINE_FORMAT = "rag_eval-baseline/2"  # /1 (still read) kept per_query as metric -> {query: value}
_TIE_RULE = "score descending, then docid descending"
_GATE_RULES = ("drop", "significant")
_ADJUSTMENTS = ("maxt", "holm")
_ACKNOWLEDGEABLE = ("few-judged",)  # warnings that repeat on every run until the data change: --acknowledge
_INCONCLUSIVE_AS = ("exit", "pass", "fail")  # --inconclusive: exit 3 (default), or map it to 0 or 1
_FAILED = ("missing", "regression", "below floor")  # the gate's verdicts that fail it (of a metric, of a floor)
UNGATED = "ungated"  # nothing to gate against (no baseline, no floor): never a pass


class Baseline(NamedTuple):
    """A baseline file: flat means (metric -> mean), or an extended one with provenance."""

    means: Dict[str, float]
    per_query: Optional[Dict[str, Dict[str, float]]] = None  # metric -> qid -> value
    conventions: Optional[dict] = None
    qrels_sha256: Optional[str] = None
    meta: Optional[Dict[str, str]] = None  # provenance (--meta and the environment); None in older baselines
    judgments: Optional[dict] = None  # _stored_judgments() of its qrels; None in older baselines
    acknowledged: Tuple[str, ...] = ()  # warnings the team acknowledged (ACKNOWLEDGEABLE): notes from then on
    judge: Optional[dict] = None  # judged scores: the judge's configuration and the answers' digests (judged_result)


class Tolerance(NamedTuple):
    """How far a mean may fall below its baseline: absolute, or a share of the baseline."""

    amount: float
    relative: bool = False

    def allowed(self, was: float) -> float:
        return self.amount * abs(was) if self.relative else self.amount

    def __str__(self) -> str:
        return f"{self.amount * 100:g}%" if self.relative else f"{self.amount:g}"


_NOT_A_BASELINE = "this is not a baseline (metric -> mean) but a run or qrels; write one with --save-baseline FILE"


def read_baseline(path: str) -> Baseline:
    """Read a baseline: a flat JSON object of metric -> mean, or the extended one of ``--save-baseline``."""
    with _opened(path) as inp:
        if _detect_format(inp) != "json":  # JSONL rows or TREC lines
            raise RagEvalError(_NOT_A_BASELINE, inp.source)
        data = _parse_json(inp, "baseline", _MAX_SMALL_JSON)
    if not isinstance(data, dict):
        raise RagEvalError(f"expected a JSON object of metric -> number, got {_json_kind(data)}", inp.source)
    if "format" in data:
        return _extended_baseline(data, inp.source)
    if any(isinstance(value, (dict, list)) for value in data.values()):
        raise RagEvalError(_NOT_A_BASELINE, inp.source)
    return Baseline(_check_means(data, inp.source, metrics=True))


def _extended_baseline(data, path):
    """An extended baseline (per-query scores, conventions, the qrels' sha256, meta, judgments), checked."""
    if data["format"] not in (_BASELINE_FORMAT, "rag_eval-baseline/1"):
        raise RagEvalError(f"unknown baseline format {_clipped_repr(data['format'])} (expected {_BASELINE_FORMAT!r})", path)
    missing = [key for key in ("mean", "per_query", "conventions", "qrels_sha256") if key not in data]
    if missing:
        raise RagEvalError(f"extended baseline lacks {', '.join(missing)}", path)
    per_query, by_query = data["per_query"], data["format"] == _BASELINE_FORMAT
    if not isinstance(per_query, dict) or not all(isinstance(v, dict) for v in per_query.values()):
        raise RagEvalError("per_query must map " + ("query -> {metric: value}" if by_query else
                                                    "metric -> {query: value}"), path)
    if by_query:  # one line per query in the file; metric -> {query: value} from here on
        per_query = {metric: {qid: values[metric] for qid, values in per_query.items() if metric in values}
                     for metric in dict.fromkeys(chain.from_iterable(per_query.values()))}
    if not isinstance(data["conventions"], dict) or not isinstance(data["qrels_sha256"], str):
        raise RagEvalError("conventions must be an object and qrels_sha256 a string", path)
    names = _check_means(dict.fromkeys(per_query, 0.0), path, metrics=True)  # its names, checked
    means = _check_means(data["mean"], path, metrics=True)
    scores = {name: _check_means(values, path, metric) for name, (metric, values) in zip(names, per_query.items())}
    cutoffs = data["conventions"].get("k")
    if not isinstance(cutoffs, list) or not (cutoffs or all(map(_is_judged_metric, means))) or not all(
            _is_int(k) and k > 0 for k in cutoffs):
        raise RagEvalError(f"conventions.k must be a list of positive integers, got {_clipped_repr(cutoffs)}", path)
    for metric, values in scores.items():  # within float noise (1e-9, relative)
        if metric in means and not (values and math.isclose(math.fsum(values.values()) / len(values), means[metric],
                                                             rel_tol=1e-9, abs_tol=1e-12)):
            raise RagEvalError(f"corrupt: the per-query scores of {_clipped_repr(metric)} do not average to its mean "
                               f"{means[metric]!r}", path)
    acknowledged = data.get("acknowledged", [])
    if not isinstance(acknowledged, list) or not set(acknowledged) <= set(_ACKNOWLEDGEABLE):
        raise RagEvalError(f"acknowledged must be a list of {', '.join(_ACKNOWLEDGEABLE)}", path)
    return Baseline(means, scores, data["conventions"], data["qrels_sha256"],
                    _check_meta(data["meta"], path) if "meta" in data else None,
                    _check_stored_judgments(data["judgments"], path) if "judgments" in data else None,
                    tuple(acknowledged), _check_judge_record(data["judge"], path) if "judge" in data else None)


def _check_judge_record(record, path):
    """A baseline's ``judge``: the configuration (name -> text) and the answers' and contexts' digests (id -> text)."""
    if not isinstance(record, dict) or not all(
            isinstance(record.get(key), dict) and all(isinstance(v, str) for v in record[key].values())
            for key in ("provenance", "answers", "contexts")):
        raise RagEvalError("judge must hold provenance, answers and contexts, objects of strings", path)
    return record


def _check_means(table, path, where="", metrics=False):
    """A baseline's object of name -> finite number, checked; with ``metrics`` every name is a metric
    (``ndcg@10``) or a slice's (``pricing:ndcg@10``), and the names come back in our spelling."""
    if not isinstance(table, dict):
        raise RagEvalError(f"expected an object of name -> number, got {_json_kind(table)}", path)
    prefix = f"{where}: " if where else ""
    for name, value in table.items():
        if metrics and not _is_metric_key(name):
            raise RagEvalError(f"{prefix}baseline names {_clipped_repr(name)}, which is not a metric "
                               "(measure@k, or slice:measure@k)", path)
        if not _is_finite(value):
            raise RagEvalError(f"{prefix}baseline value of {_clipped_repr(name)} must be a finite number, got {_clipped_repr(value)}",
                               path)
        if not -_DROP_EPSILON <= value <= 1 + _DROP_EPSILON and not _is_judged_metric((where or name).rpartition(":")[2]):
            # every measure lies in [0, 1]: -1 could never fail (a judged score's range is its reader's to check)
            raise RagEvalError(f"{prefix}baseline value of {_clipped_repr(name)} must lie in [0, 1], as every measure "
                               f"does, got {_clipped_repr(value)}", path)
    if metrics:  # other tools' spellings are ours from here on; two spellings of one metric are one too many
        names = [_canonical_metric(name) for name in table]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise RagEvalError(f"{prefix}baseline names {twice[0]} twice (in two spellings)", path)
        table = dict(zip(names, table.values()))
    return {name: float(value) for name, value in table.items()}


def _is_metric_key(key):
    tag, _, metric = key.rpartition(":")
    try:
        _is_judged_metric(metric) or parse_metric(metric)
    except RagEvalError:
        return False
    return tag.isprintable()


def _qrels_fingerprint(qrels):
    """sha256 of the judgments in a canonical form: reformatting or gzipping the
    file does not change it, changing a judgment does."""
    import hashlib

    # JSON with sorted keys: canonical, and no id can pass for two (a tab inside an id stays escaped).
    canonical = json.dumps(qrels, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _conventions_record(result):
    conv = result["conventions"]
    spans = {"min_overlap": conv["min_overlap"]} if "min_overlap" in conv else {}  # evidence judgments
    return {"k": result["k"] if isinstance(result["k"], list) else [result["k"]],
            **{key: conv[key] for key in _Conventions._fields}, "ties": _TIE_RULE, **spans}


def _differences(baseline, result, qrels_sha256):
    """What differs between how an extended baseline and this result were made."""
    if baseline.conventions is None:
        return []
    now = _conventions_record(result)
    keys = [*now] + ([] if "min_overlap" in now else ["min_overlap"])  # evidence spans, either side
    found = [f"{key}: baseline {_clipped_repr(was)}, now {_clipped_repr(now.get(key))}" + (
        f" (use --{key.replace('_', '-')}{'' if was is True else ' ' + _clip(str(was))})" if was not in (None, False) else "")
        for key in keys if key != "k" and (was := baseline.conventions.get(key)) != now.get(key)]
    # Cutoffs are not conventions: the call scores the baseline's own too (see _baseline_needs).
    if baseline.qrels_sha256 != qrels_sha256:
        found.append(f"qrels: baseline sha256 {baseline.qrels_sha256[:12]}..., now {qrels_sha256[:12]}...")
    return found


def _baseline_text(result, qrels_sha256, keep_from=None, raised=None, extra=None):
    """The extended baseline of a result as a file, ``extra`` records (``meta``, ``judgments``) beside the rest:
    the means, how they were made, then a line per query, so that a pull request's diff shows the queries that
    changed; nothing changes when nothing changed (no time, no Python version, keys in a fixed order).

    With ``keep_from`` (``--update-baseline``) a metric this result did not score or gate stays as it was.
    With ``raised`` (``--ratchet``) a metric rises only by the rise shown, its scores moved that share of the
    way to the new ones, else keeps its mean and scores; a flat older baseline keeps the better mean.
    ``reported_only`` metrics (span precision and iou) are left out.
    """
    means, per_query = dict(result["mean"]), _per_query_by_metric(result)
    for metric in set(result.get("reported_only", ())) - set(keep_from.means if keep_from else ()):
        del means[metric], per_query[metric]
    for metric, old in (keep_from.means.items() if keep_from is not None else ()):
        scores = (keep_from.per_query or {}).get(metric)
        if metric not in means or metric in result.get("not_gated", ()) or (
                raised is not None and scores is not None and metric not in raised):
            means[metric] = old
            per_query.pop(metric, None)
            if scores is not None:
                per_query[metric] = scores
        elif raised is not None and scores is not None:
            per_query[metric] = _raised_scores(scores, per_query[metric], raised[metric])
            means[metric] = _mean(per_query[metric].values())
        elif raised is not None and scores is None and old > means[metric]:
            means[metric] = old
            del per_query[metric]
    by_query = {}
    for metric, scores in sorted(per_query.items()):
        for qid, value in scores.items():
            by_query.setdefault(qid, {})[metric] = value
    extra = dict(extra or {})
    if "meta" in extra:  # the Python version changes with the machine, not the system: --output records it
        extra["meta"] = {key: value for key, value in extra["meta"].items() if key != "python"}
    record = {"mean": means, "format": _BASELINE_FORMAT, "tool": f"rag_eval {__version__}",
              "qrels_sha256": qrels_sha256, "conventions": _conventions_record(result), "unscored": result["unscored"],
              **{key: value for key, value in extra.items() if key != "judgments"}, "per_query": by_query,
              **{key: value for key, value in extra.items() if key == "judgments"}}
    return _format_json(record, 0, _expanded(record, {"per_query": 1, "judgments": 2}))


def _expanded(value, depths, levels=2, indent=""):
    """JSON, a member per line to ``levels`` deep (``depths``: per key), deeper ones on their key's line."""
    if not levels or not isinstance(value, (dict, list)) or not value:
        return json.dumps(value, sort_keys=True)
    inner = indent + "  "
    items = value.items() if isinstance(value, dict) else None
    lines = [f"{json.dumps(key)}: {_expanded(item, {}, depths.get(key, levels - 1), inner)}" for key, item in
             (sorted(items) if indent else items)] if items is not None else [_expanded(item, {}, levels - 1, inner)
                                                                             for item in value]
    brackets = "{}" if items is not None else "[]"
    return brackets[0] + "\n" + ",\n".join(inner + line for line in lines) + "\n" + indent + brackets[1]


def _raised_scores(old, new, rise):
    """The old scores, each moved the same share of the way to its new one, averaging to the old mean + rise."""
    gain = _mean(new[qid] for qid in old) - _mean(old.values())
    share = min(1.0, rise / gain) if gain > 0 else 0.0
    return {qid: was + share * (new[qid] - was) for qid, was in old.items()}


def _significant_gains(gate_report):
    """What ``--ratchet`` raises: metric (not slice) -> the rise shown, the adjusted low bound when above 0."""
    if not gate_report:
        return {}
    return {key: entry["gain_shown"] for key, entry in sorted(gate_report["metrics"].items())
            if ":" not in key and entry.get("gain_shown")}


def _per_query_by_metric(result):
    """``{metric: {qid: value}}`` with full metric names, whatever the form of ``k``."""
    single = not isinstance(result["k"], list)
    table = {}
    for qid, values in result["per_query"].items():
        for key, value in values.items():
            full = format_metric(key, result["k"]) if single and not key.startswith(_JUDGE) else key
            table.setdefault(full, {})[qid] = value
    return table


# --- Writing files: the old file or the new one, never part of one; one baseline update at a time ---

_NAME_KEPT = 60  # characters of a name kept in its temporary and lock files' names: 240 bytes at most, within NAME_MAX


def _kept_name(name):
    """A file's name in its temporary and lock files' names: a long one cut, 12 hex digits of its sha256 in place
    of the end, so that two long names keep two locks."""
    import hashlib

    if len(name) <= _NAME_KEPT:
        return name
    return name[:_NAME_KEPT - 13] + "~" + hashlib.sha256(os.fsencode(name)).hexdigest()[:12]


def _write_atomically(path, text, commit=True):
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``.

    A reader sees the old file or the new one, never a partial one, even if the process is killed
    mid-write.  Only a regular file is replaced: a symbolic link's target is rewritten (the link stays);
    a device, FIFO, socket or folder is refused.  With ``commit=False`` the complete temporary file stays
    and ``(temporary, target)`` is returned, for a caller writing several files to rename or remove.
    """
    import tempfile

    target = _output_target(path)
    folder, name = os.path.split(target)
    temporary = None
    try:
        os.makedirs(folder, exist_ok=True)  # --junit reports/junit.xml makes reports/
        handle, temporary = tempfile.mkstemp(prefix=f".{_kept_name(name)}.", suffix=".tmp", dir=folder)
        os.chmod(temporary, _file_mode(target))  # mkstemp makes it private (0600)
        # backslashreplace: a lone surrogate from a JSON "\\udfff" escape cannot crash the write.
        with os.fdopen(handle, "w", encoding="utf-8", errors="backslashreplace", newline="\n") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if not commit:
            return temporary, target
        os.replace(temporary, target)
    except BaseException as exc:  # a signal or Ctrl-C too: no temporary file stays behind
        if temporary is not None:
            _remove(temporary)
        if isinstance(exc, OSError):
            raise RagEvalError(f"cannot write: {exc.strerror or exc}", path) from None
        raise
    return None


def _output_target(path):
    """The file that writing ``path`` replaces, its symbolic links resolved: a regular file, or none yet
    (replacing ``/dev/null`` or a FIFO with a regular file would break whatever else uses it)."""
    target = os.path.realpath(path)
    try:
        regular = stat.S_ISREG(os.stat(target).st_mode)
    except OSError:
        regular = True  # a new file (its folder is made if missing)
    if not regular:
        raise RagEvalError("not a regular file (a device, FIFO, socket or folder): only regular files are "
                           "written, never replaced", path)
    return target


def _remove(path):
    with suppress(OSError):
        os.unlink(path)


def _file_mode(path):
    """The permissions the file has, or a new file would get under the umask."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextmanager
def _locked(path, timeout):
    """Hold an advisory lock on ``.NAME.lock`` beside the file ``path`` names (none for None).

    Two ``--update-baseline`` runs on one baseline take turns, each reading the baseline under the lock,
    so a ratchet never loses the other's update.  The holder removes the lock file before it lets go; a
    waiter that then holds the lock of a removed file tries again.  POSIX only (``fcntl.flock``).
    """
    try:
        import fcntl
    except ImportError:  # Windows: updates are not serialised
        fcntl = None
    if path is None or fcntl is None:
        yield
        return
    import time

    folder, name = os.path.split(os.path.realpath(path))
    lock_path = os.path.join(folder, f".{_kept_name(name)}.lock")
    deadline = time.monotonic() + timeout
    while True:
        try:
            # Not through a link, and a regular file: a lock the repository planted (a symlink, a FIFO) is refused.
            handle = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                             _file_mode(os.path.join(folder, name)))
        except OSError as exc:
            raise RagEvalError(f"cannot lock: {exc.strerror or exc}", lock_path) from None
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            os.close(handle)
            raise RagEvalError("cannot lock: not a regular file", lock_path)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _identity(lock_path) == _identity(handle):
                break  # locked, and still the file at that name
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(handle)
                raise RagEvalError(f"another rag_eval is updating this baseline: its lock {lock_path} was "
                                   f"still held after {timeout:g} s (see --lock-timeout)", path) from None
        except OSError as exc:
            os.close(handle)
            raise RagEvalError(f"cannot lock: {exc.strerror or exc}", lock_path) from None
        os.close(handle)
        time.sleep(0.05)
    try:
        yield
    finally:
        _remove(lock_path)  # before the lock goes, so that no one locks a file about to vanish
        os.close(handle)  # closing releases the lock


# --- The gate: each metric against the baseline, floors, slices, the paired tests ---

def regressions(
    current_means: Mapping[str, float], baseline_means: Mapping[str, float], max_drop: float = _DEFAULT_MAX_DROP
) -> Dict[str, Tuple[float, Optional[float]]]:
    """``{metric: (was, now)}`` for every baseline metric missing now (``now`` is None)
    or that fell by more than ``max_drop``.

    >>> regressions({"recall@5": 0.6}, {"recall@5": 0.7, "mrr@5": 0.5}, 0.02)
    {'mrr@5': (0.5, None), 'recall@5': (0.7, 0.6)}
    """
    if not _is_finite(max_drop) or max_drop < 0:
        raise RagEvalError(f"max drop must be a non-negative number, got {_clipped_repr(max_drop)}")
    found = {}
    for metric in sorted(baseline_means):
        was, now = baseline_means[metric], current_means.get(metric)
        if not _is_finite(was) or not (now is None or _is_finite(now)):
            raise RagEvalError(f"{metric}: means must be finite numbers, got baseline {_clipped_repr(was)}, now {_clipped_repr(now)}")
        if now is None or _fell(was, now, max_drop):
            found[metric] = (was, now)
    return found


def _fell(was, now, allowed):
    """A fall beyond the allowed drop; exactly the allowed drop is no fall (see _DROP_EPSILON)."""
    return was - now > allowed + _DROP_EPSILON


class GateSettings(NamedTuple):
    """How ``gate`` judges: the rule, the tolerances and floors, and the resampling."""

    rule: str = "drop"
    default: Tolerance = Tolerance(_DEFAULT_MAX_DROP)
    tolerances: Mapping[str, Tolerance] = MappingProxyType({})  # read-only: a default shared by every instance
    floors: Mapping[str, float] = MappingProxyType({})
    alpha: float = _DEFAULT_ALPHA
    resamples: int = _DEFAULT_RESAMPLES
    seed: int = _DEFAULT_SEED
    show: int = 5
    adjust: str = "maxt"  # how the family's p-values are adjusted: "maxt" (joint) or "holm"
    not_gated: frozenset = frozenset()  # baseline metrics left out of the gate on purpose (--not-gated)
    runs: int = 1  # runs gated with one baseline (their tests share alpha)


def _mean(values):
    values = list(values)
    return math.fsum(values) / len(values) if values else None


def _restrict(scores, queries):
    return dict(scores) if queries is None else {qid: scores[qid] for qid in queries if qid in scores}


class _Target(NamedTuple):
    """One number the gate judges: a metric, or a metric on a slice (``pricing:recall@5``)."""

    key: str
    was: Optional[float]
    now: Optional[float]
    before: Optional[Dict[str, float]]  # per-query scores, when both sides have them
    after: Optional[Dict[str, float]]


def _targets(result, baseline, keys, slices):
    now_scores, members = _per_query_by_metric(result), _slice_members(slices or {})
    old_scores = getattr(baseline, "per_query", None) or {}
    targets = []
    for key in keys:
        tag, _, metric = key.rpartition(":")
        queries = members.get(tag) if tag else None
        after = _restrict(now_scores.get(metric, {}), queries)
        before = _restrict(old_scores[metric], queries) if metric in old_scores else None
        was = baseline and baseline.means.get(key)
        if was is None and tag and before:
            was = _mean(before.values())
        paired = before is not None and bool(after)
        targets.append(_Target(key, was, result["mean"].get(key) if not tag else _mean(after.values()),
                               before if paired else None, after if paired else None))
    return targets


def _baseline_targets(result, baseline, settings, slices):
    """What a baseline gates: every metric it holds (one this run lacks is missing, a regression) but
    ``settings.not_gated``, and every slice that a tolerance names."""
    keys = sorted(key for key in baseline.means if key not in settings.not_gated)
    for tag in {key.rpartition(":")[0] for key in keys} - {""} - set(_slice_members(slices or {})):
        raise RagEvalError(f"the baseline gates slice {_clipped_repr(tag)}: name it in --slices, or see --not-gated")
    targets = _targets(result, baseline, keys + sorted(key for key in settings.tolerances if ":" in key and key not in keys),
                       slices)
    for target in targets:
        if target.was is None:
            raise RagEvalError(f"cannot gate {target.key}: the baseline has neither that mean nor per-query scores")
    return targets


def gate(result: dict, baseline: Optional[Baseline], settings: GateSettings = GateSettings(),
         slices: Optional[Slices] = None, *, qrels: Optional[Qrels] = None, baseline_qrels: Optional[Qrels] = None,
         old_on_old: Optional[Mapping[str, float]] = None, meta: Optional[Mapping[str, str]] = None,
         simulations: int = 0, **fields) -> dict:
    """Judge a result against a baseline and floors; the report of ``--baseline``.

    ``gate(result, {"ndcg@5": 0.52}, rule="significant", max_drop=0.01)``; the arguments and the rules:
    docs/gate.md.
    """
    if isinstance(baseline, _MAPPINGS):
        baseline = Baseline(_check_means(dict(baseline), "baseline", metrics=True))
    if isinstance(settings, str):
        settings, fields = GateSettings(), dict(fields, rule=settings)
    fields = {"default" if name == "max_drop" else name: value for name, value in fields.items()}
    unknown = sorted(set(fields) - set(GateSettings._fields))
    if not isinstance(settings, GateSettings) or unknown:
        raise TypeError("gate() takes settings=GateSettings(...), a rule name, or these by name: max_drop, "
                        f"{', '.join(GateSettings._fields)}; got {', '.join(unknown) or type(settings).__name__}")
    settings = settings._replace(**fields)
    settings = settings._replace(default=_as_tolerance(settings.default), tolerances={
        metric: _as_tolerance(value) for metric, value in settings.tolerances.items()})
    if settings.rule not in _GATE_RULES:
        raise RagEvalError(f"unknown rule {_clipped_repr(settings.rule)} ({_did_you_mean(settings.rule, _GATE_RULES)}"
                           f"choose from {', '.join(_GATE_RULES)})")
    if settings.rule == "significant" and baseline is not None:
        _check_same_queries(baseline, result)
    targets = _baseline_targets(result, baseline, settings, slices) if baseline is not None else []
    paired, p_holm, p_adjusted = _paired_family(targets, settings)
    if settings.rule == "significant" and baseline is not None and not paired:
        raise RagEvalError("--gate significant needs per-query scores on both sides: "
                           "an extended baseline (--save-baseline) or --baseline-run")
    metrics = {t.key: _gated_metric(t, settings, paired.get(t.key), p_holm.get(t.key), p_adjusted.get(t.key),
                                    len(paired)) for t in targets}
    report = {"rule": settings.rule, "alpha": settings.alpha, "adjust": settings.adjust, "metrics": metrics,
              "floors": {}}
    for target in _targets(result, None, sorted(settings.floors), slices):
        floor = settings.floors[target.key]
        passed = target.now is not None and target.now >= floor - _DROP_EPSILON  # 0.19999999999999998 meets 0.2
        report["floors"][target.key] = {"min": floor, "now": target.now, "verdict": "pass" if passed else "below floor"}
    if baseline is not None:
        report["not_gated"] = sorted(settings.not_gated, key=_metric_order)
        if baseline.conventions is not None:  # reported only (span precision and iou) is no news
            report["new"] = sorted(set(result["mean"]) - set(baseline.means) - set(result.get("reported_only", ())))
        if "judge" in result:
            _judge_check(report, result, baseline, settings)
    report["verdict"] = _overall_verdict(entry["verdict"] for part in ("metrics", "floors")
                                         for entry in report[part].values()) if metrics or report["floors"] else UNGATED
    report["passed"] = report["verdict"] == "pass"
    retrieval = qrels is not None and getattr(baseline, "conventions", None) is not None and not all(
        _is_judged_metric(key.rpartition(":")[2]) for key in baseline.means)  # judged alone: no qrels to compare
    report["qrels_changed"] = retrieval and baseline.qrels_sha256 != _qrels_fingerprint(qrels)
    changed = _meta_changes(baseline.meta, meta) if meta is not None and getattr(baseline, "meta", None) is not None \
        else []
    if changed:  # the same provenance (or an older baseline that records none) adds nothing
        report["meta_changes"] = changed
    earlier = {"qrels": baseline_qrels} if baseline_qrels is not None else baseline and baseline.judgments
    if earlier and (report["qrels_changed"] or old_on_old is not None):
        report["label_changes"] = _label_changes(earlier, qrels)
    if old_on_old is not None:
        report["delta_split"] = _delta_split(result["mean"], baseline.means, old_on_old)
    if simulations and report["verdict"] != UNGATED:
        report["calibration"] = calibrate(baseline, settings, simulations, metrics, _per_query_by_metric(result))
    return report


def _overall_verdict(verdicts):
    """The gate's verdict of its metrics' and floors': any failure fails it, else any inconclusive one."""
    verdicts = set(verdicts)
    return "regression" if verdicts & set(_FAILED) else "inconclusive" if "inconclusive" in verdicts else "pass"


def _paired_family(targets, settings):
    """Every paired test of the gate (metrics x cutoffs x slices) as one family on one resampling:
    the comparisons, their Holm p-values and their p-values adjusted as ``settings.adjust`` says."""
    tests = {t.key: t for t in targets if t.before is not None and set(t.before) & set(t.after)}
    deltas = {key: {qid: t.after[qid] - t.before[qid] for qid in set(t.before) & set(t.after)}
              for key, t in tests.items()}
    _within_budget(f"--resamples {settings.resamples} on {len(deltas)} paired tests",
                   settings.resamples * sum(map(len, deltas.values())), "--resamples", settings.resamples)
    family = _family(deltas, settings.resamples, settings.seed)
    paired = {}
    for index, key in enumerate(family.keys):
        t = tests[key]
        halves = None if family.halves is None else family.halves[index]  # exact: the interval draws its own
        paired[key] = compare_paired(key, t.before, t.after, resamples=settings.resamples, seed=settings.seed,
                                     show=settings.show, halves=halves)
    p_values = {key: comparison.p_value for key, comparison in paired.items()}
    p_holm = _holm(p_values)
    return paired, p_holm, (_maxt_of(family, p_values) if settings.adjust == "maxt" else p_holm)


def _gated_metric(target, settings, comparison, p_holm, p_adjusted, tests=1):
    """One metric's entry in the gate's report, its verdict last."""
    tolerance = settings.tolerances.get(target.key, settings.default)
    allowed = tolerance.allowed(target.was)
    entry = {"baseline": target.was, "now": target.now,
             "delta": None if target.now is None else target.now - target.was,
             "allowed_drop": allowed, "tolerance": str(tolerance)}
    if comparison is not None:
        n, spread, alpha, mean = comparison.queries, comparison.spread, settings.alpha, comparison.mean_delta
        scores = list(target.before.values()) + list(target.after.values())
        reach = max(1.0, max(scores) - min(scores))  # the most one query can change: 1 for measures in [0, 1]
        tests = tests * settings.runs
        wide = _bound_width(spread, n, _quantile(1 - alpha / tests, n - 1), reach) if n >= 2 else None
        # the pass bound a half step lower, a continuity correction (docs/gate.md, "The rule")
        low = mean - _bound_width(spread, n, _quantile(1 - alpha, n - 1), reach) - reach / (2 * n) if n >= 2 else None
        as_is = ("queries", "improved", "worse", "same", "mean_delta", "p_value", "exact", "hit_to_miss")
        entry.update({name: getattr(comparison, name) for name in as_is}, p_holm=p_holm,
                     p_adjusted=min(1.0, p_adjusted * settings.runs),  # as compare_runs adjusts it
                     effect_size=mean / spread if spread else None, tests=tests,
                     interval=[low and max(low, -reach), wide and min(mean + wide, reach)],
                     gain_shown=max(0.0, mean - (wide or math.inf)),
                     largest_drops=[list(drop) for drop in comparison.largest_drops],
                     resolution=_resolution(spread, n, alpha, _POWER, tests, reach),
                     min_detectable_drop=_detectable_drop(spread, n, alpha, _POWER, allowed, tests, reach),
                     queries_needed=_queries_needed(spread, allowed, alpha, _POWER, tests, reach))
    fell = target.now is not None and _fell(target.was, target.now, allowed)
    if target.now is None:
        verdict = "missing"
    elif settings.rule == "drop" or comparison is None:  # no pairs, no test: a fall fails
        verdict = "regression" if fell else "pass"
    elif comparison.queries < _MIN_PAIRED:
        verdict = "inconclusive"
    elif fell and _fell(0.0, entry["interval"][1], allowed):  # the whole bound beyond the tolerance
        verdict = "regression"
    elif not _fell(0.0, entry["interval"][0], allowed):  # the low bound within the tolerance
        verdict = "pass"
    else:
        verdict = "inconclusive"
    entry["verdict"] = verdict
    return entry


# --- Comparing several runs (docs/compare.md) ---

def compare_runs(results: List[Tuple[str, dict]], *, resamples: int = _DEFAULT_RESAMPLES, seed: int = _DEFAULT_SEED,
                 alpha: float = _DEFAULT_ALPHA, show: int = 5) -> dict:
    """Compare every run with the first, the reference, on every metric of the reference.

    ``results`` are ``(name, evaluate(...))`` pairs scored on the same judgments, the reference first; the
    report: docs/compare.md.
    """
    if len(results) < 2:
        raise RagEvalError("compare_runs needs a reference and at least one candidate")
    names = [name for name, _ in results]
    if len(set(names)) < len(names):
        raise RagEvalError(f"two runs are named {_clipped_repr(next(n for n in names if names.count(n) > 1))}")
    metrics = sorted(results[0][1]["mean"], key=_metric_order)
    scores = {}
    for name, result in results:
        table = _per_query_by_metric(result)
        lacking = [metric for metric in metrics if metric not in table]
        if lacking:
            raise RagEvalError(f"run {_clipped_repr(name)} has no scores for {lacking[0]}")
        scores[name] = {metric: table[metric] for metric in metrics}
    reference, candidates = names[0], names[1:]
    _within_budget(f"--resamples {resamples} on {len(candidates)} candidate runs", 2 * resamples * len(candidates) *
                   sum(map(len, scores[reference].values())), "--resamples", resamples)
    means = {name: dict(result["mean"]) for name, result in results}
    best = {metric: max(names, key=lambda name: (means[name][metric], -names.index(name))) for metric in metrics}
    with_reference, adjusted, against_best = {}, {}, {}
    for name in candidates:  # the pair's family, as the gate has it
        paired, _, p_family = _paired_family([_Target(m, means[reference][m], means[name][m], scores[reference][m],
                                                      scores[name][m]) for m in metrics],
                                             GateSettings(resamples=resamples, seed=seed, show=show))
        for metric in metrics:
            with_reference[name, metric] = paired[metric]
            adjusted[name, metric] = min(1.0, p_family[metric] * len(candidates))
    for metric in metrics:  # each run against the best: of a pair with the reference, the table's own p
        top = best[metric]
        for name in names:
            if name != top:
                against_best[name, metric] = (with_reference[top if name == reference else name, metric]
                                              if reference in (name, top) else compare_paired(
                    metric, scores[top][metric], scores[name][metric], resamples=resamples, seed=seed)).p_value
    best_adjusted = _holm(against_best)
    table = {}
    for metric in metrics:
        entries = {}
        for name in names:
            entry = {"mean": means[name][metric]}
            if name != reference:
                paired = with_reference[name, metric]
                entry.update(delta=paired.mean_delta, interval=list(paired.interval), queries=paired.queries,
                             better=paired.improved, worse=paired.worse, same=paired.same, p_value=paired.p_value,
                             p_adjusted=adjusted[name, metric], exact=paired.exact)
            if name == best[metric]:
                entry["mark"] = "best"
            else:
                p_best = best_adjusted[name, metric]
                entry.update(p_vs_best=against_best[name, metric], p_vs_best_adjusted=p_best,
                             mark="indistinguishable" if p_best >= alpha else "")
            entries[name] = entry
        table[metric] = {"best": best[metric], "runs": entries,
                         "indistinguishable": [name for name in names if entries[name]["mark"] == "indistinguishable"]}
    return {"reference": reference, "order": names, "adjustment": "maxt", "alpha": alpha,
            "family": len(with_reference), "resamples": resamples, "seed": seed, "metrics": table}


# --- Provenance: what a user adds (--meta) and what the environment tells (docs/compare.md) ---

_ENVIRONMENT_META = ("git_branch", "git_commit", "python")  # change on every run by design: recorded, never "changes"
_MAX_META_KEY = 64
_MAX_META_VALUE = 256
_GIT_TIMEOUT = 2.0  # seconds; a hung git (a network file system) must not hang the CI step


def _provenance_meta(user, environ=None):
    """The ``meta`` record: the user's keys, then ``git_commit``, ``git_branch`` and ``python`` unless given."""
    import platform

    environ = os.environ if environ is None else environ
    found = dict(user)
    commit = environ.get("GITHUB_SHA") or environ.get("CI_COMMIT_SHA")
    branch = environ.get("GITHUB_HEAD_REF") or environ.get("GITHUB_REF_NAME") or environ.get("CI_COMMIT_REF_NAME")
    if not commit and not branch:
        commit, branch = (_git("rev-parse", "HEAD", "--abbrev-ref", "HEAD") + [None, None])[:2]  # one process
    for key, value in (("git_commit", commit), ("git_branch", branch), ("python", platform.python_version())):
        if value and key not in found:
            found[key] = value[:_MAX_META_VALUE]
    return dict(sorted(found.items()))


def _git(*arguments):
    """The lines that ``git`` prints, each None if not printable; none: no git, not a repository, too slow."""
    import subprocess

    try:
        done = subprocess.run(["git", *arguments], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=_GIT_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    lines = done.stdout.decode("utf-8", "replace").strip().split("\n") if done.returncode == 0 else []
    return [line if line and line.isprintable() else None for line in lines]


def _check_meta(table, path):
    """A baseline's ``meta``: an object of printable string keys (no '=') and string values."""
    if not isinstance(table, dict):
        raise RagEvalError(f"meta must be an object of key -> string, got {_json_kind(table)}", path)
    for key, value in table.items():
        if not _meta_key_ok(key) or not isinstance(value, str):
            raise RagEvalError(f"meta: {_clipped_repr(key)} -> {_clipped_repr(value)} is not a key (printable, no '=') "
                               "and a string", path)
    return dict(table)


def _meta_key_ok(key):
    return isinstance(key, str) and 0 < len(key) <= _MAX_META_KEY and key.isprintable() and "=" not in key


def _meta_changes(before, now):
    """``key: was -> now`` for every key that differs, ``(none)`` for a key one side lacks; the keys
    of ENVIRONMENT_META are left out (a commit changes with every run).

    >>> _meta_changes({"embedder": "bge-small", "git_commit": "a1"}, {"embedder": "bge-base", "index": "v2"})
    ['embedder: bge-small -> bge-base', 'index: (none) -> v2']
    """
    keys = sorted((set(before) | set(now)) - set(_ENVIRONMENT_META))
    return [f"{key}: {before.get(key, '(none)')} -> {now.get(key, '(none)')}"
            for key in keys if before.get(key) != now.get(key)]


# --- Label changes: what the judgments changed since the baseline (docs/compare.md) ---

_MAX_STORED_JUDGMENTS = 20_000  # about 0.6 MB of JSON at typical id lengths
_QUERY_DIGEST_CHARS = 16  # 64 bits of sha256: a chance collision among a million queries is below 1e-7


def _judgment_table(qrels):
    """Judgments as ``{qid: {unit: grade}}``: a document, or an evidence span named ``doc[start:end]``."""
    if not isinstance(qrels, SpanQrels):
        return qrels
    return {qid: {f"{span.doc_id}[{span.start}:{span.end}]": span.grade for span in spans}
            for qid, spans in qrels.items()}


def _stored_judgments(qrels):
    """What an extended baseline keeps of its judgments: ``{"qrels": ...}`` when small, else
    ``{"digests": {qid: {"judged": n, "sha256": ...}}}``.  Spans are named ``doc[start:end]``."""
    qrels = _judgment_table(qrels)
    if sum(map(len, qrels.values())) <= _MAX_STORED_JUDGMENTS:
        return {"qrels": {qid: dict(sorted(docs.items())) for qid, docs in sorted(qrels.items())}}
    return {"digests": {qid: {"judged": len(docs), "sha256": _query_digest(docs)} for qid, docs in sorted(qrels.items())}}


def _query_digest(docs):
    return _qrels_fingerprint(docs)[:_QUERY_DIGEST_CHARS]  # the canonical form of the whole qrels, for one query's


def _check_stored_judgments(stored, path):
    """A baseline's ``judgments`` record, checked."""
    if isinstance(stored, dict) and set(stored) == {"qrels"}:
        return {"qrels": _check_qrels(stored["qrels"], path)}
    if isinstance(stored, dict) and set(stored) == {"digests"} and isinstance(stored["digests"], dict) and all(
            isinstance(entry, dict) and _is_int(entry.get("judged")) and isinstance(entry.get("sha256"), str)
            for entry in stored["digests"].values()):
        return stored
    raise RagEvalError("judgments must be {\"qrels\": {query: {document: grade}}} or "
                       "{\"digests\": {query: {\"judged\": n, \"sha256\": ...}}}", path)


def _label_changes(before, qrels):
    """What changed from stored judgments (``_stored_judgments``) to ``qrels``, per query.

    >>> _label_changes({"qrels": {"q1": {"a": 1, "b": 2}}}, {"q1": {"a": 2, "c": 1}, "q2": {"x": 1}})["counts"]
    {'added': 1, 'queries_added': 1, 'queries_changed': 1, 'queries_removed': 0, 'regraded': 1, 'removed': 1}
    """
    qrels = _judgment_table(qrels)
    whole = "qrels" in before
    old = _judgment_table(before["qrels"]) if whole else before["digests"]
    queries = {}
    for qid in sorted(set(old) & set(qrels)):
        docs, was = qrels[qid], old[qid]
        if whole:
            change = {"added": {d: docs[d] for d in sorted(set(docs) - set(was))},
                      "removed": {d: was[d] for d in sorted(set(was) - set(docs))},
                      "regraded": {d: [was[d], docs[d]] for d in sorted(set(was) & set(docs))
                                   if was[d] != docs[d]}}
        else:
            change = {"judged": [was["judged"], len(docs)]} if _query_digest(docs) != was["sha256"] else {}
        if any(change.values()):
            queries[qid] = change
    added, removed = sorted(set(qrels) - set(old)), sorted(set(old) - set(qrels))
    counts = {"queries_added": len(added), "queries_changed": len(queries), "queries_removed": len(removed)}
    if whole:  # digests do not say how a query changed
        counts.update({key: sum(len(change[key]) for change in queries.values())
                       for key in ("added", "removed", "regraded")})
    return {"stored": "judgments" if whole else "digests", "counts": dict(sorted(counts.items())),
            "queries": queries, "queries_added": added, "queries_removed": removed}


def _delta_split(now, old_on_new, old_on_old):
    """Each metric's change from the old run on the old judgments to this run on the new ones,
    split in two: ``labels`` (the old run, new judgments minus old) and ``system`` (this run
    minus the old one, both on the new judgments).  ``total`` = ``labels`` + ``system``.

    >>> _delta_split({"m": 0.5}, {"m": 0.6}, {"m": 0.7})["m"]["labels"]
    -0.09999999999999998
    """
    return {metric: {"total": now[metric] - old_on_old[metric], "labels": old_on_new[metric] - old_on_old[metric],
                     "system": now[metric] - old_on_new[metric]}
            for metric in sorted(now, key=_metric_order) if metric in old_on_new and metric in old_on_old}


# --- Calibration: the gate measured on the baseline's own scores ---

_CALIBRATION_RESAMPLES = 200  # resamples per simulated gate: enough for alpha 0.05 (p >= 1/201), cheap
_PLANTED_DROPS = (1.0, 2.0)  # in tolerances


def calibrate(baseline: Baseline, settings: GateSettings = GateSettings(), simulations: int = _DEFAULT_SIMULATIONS,
              keys: Optional[Iterable[str]] = None, now: Optional[Mapping[str, Mapping[str, float]]] = None) -> dict:
    """How often this gate is wrong on these per-query scores: A/A false fails and power at planted drops.

    A/A pairs each query's baseline scores with its scores ``now`` (metric -> qid -> value), or without ``now``
    with a random query's; planted drops set a share of "after" to 0 (docs/gate.md).
    """
    scores = {key: values for key, values in (baseline.per_query or {}).items()
              if ":" not in key and (keys is None or key in keys) and (now is None or key in now)}
    if not scores:
        raise RagEvalError("--calibrate needs per-query scores: an extended baseline (--save-baseline) or --baseline-run")
    queries = sorted(set.intersection(*map(set, [*scores.values(), *(now[key] for key in scores if now is not None)])))
    if len(queries) < 2:
        raise RagEvalError("--calibrate needs at least 2 queries scored on every metric")
    metrics = sorted(scores, key=_metric_order)
    rows = [[scores[m][qid] for m in metrics] for qid in queries]
    rerun = [[now[m][qid] for m in metrics] for qid in queries] if now is not None else None
    quick = settings._replace(resamples=min(settings.resamples, _CALIBRATION_RESAMPLES))
    paired_rule = quick.rule != "drop"  # rule drop judges the means alone: no paired statistics to compute
    _within_budget(f"--calibrate {simulations} on {len(queries)} queries x {len(metrics)} metrics", simulations *
                   (1 + len(_PLANTED_DROPS)) * len(rows) * len(metrics) * (2 * quick.resamples if paired_rule else 50),
                   "--calibrate", simulations)
    scenarios = {}
    for factor in (0.0,) + _PLANTED_DROPS:
        rng = _random(f"rag_eval:{settings.seed}:calibrate:{factor}")
        counts = {"regression": 0, "inconclusive": 0, "pass": 0}
        for _ in range(simulations):
            pairs = []
            for index, row in enumerate(rows):
                other = rerun[index] if rerun else rows[rng.randrange(len(rows))]
                pairs.append((row, other) if rng.random() < 0.5 else (other, row))
            before = list(zip(*(first for first, _ in pairs)))  # per metric, per query
            after = [list(column) for column in zip(*(second for _, second in pairs))]
            if factor:
                drops = [factor * settings.tolerances.get(m, settings.default).allowed(_mean(column))
                         for m, column in zip(metrics, before)]
                shares = [min(1.0, drop / mean) if mean > 0 else 0.0 for drop, mean in zip(drops, map(_mean, after))]
                for query in range(len(queries)):
                    lost = rng.random()
                    for column, share in zip(after, shares):
                        if lost < share:
                            column[query] = 0.0
            targets = [_Target(metric, _mean(was), _mean(now), dict(zip(queries, was)) if paired_rule else None,
                               dict(zip(queries, now)) if paired_rule else None)
                       for metric, was, now in zip(metrics, before, after)]
            paired, p_holm, p_adjusted = _paired_family(targets, quick) if paired_rule else ({}, {}, {})
            counts[_overall_verdict(_gated_metric(t, quick, paired.get(t.key), p_holm.get(t.key),
                                                  p_adjusted.get(t.key), len(paired))["verdict"] for t in targets)] += 1
        scenarios["a/a" if not factor else f"drop {factor:g}x tolerance"] = {"planted_drop": factor, **{
            outcome: {"rate": count / simulations, "se": math.sqrt(count * (simulations - count) / simulations) / simulations}
            for outcome, count in counts.items()}}
    return {"simulations": simulations, "resamples": quick.resamples, "queries": len(queries), "metrics": metrics,
            "pairs": "rerun" if rerun else "random", "rule": settings.rule, "adjust": settings.adjust,
            "alpha": settings.alpha, "scenarios": scenarios}


# === Reading inputs ===

# Bytes per read when streaming line-based files: small enough that a block
# stays in the CPU's cache while it is checked and split (4 MiB was 20% slower).
_READ_BLOCK = 1 << 17
# A longer line is an error, not a reason to run out of memory.  READ_BLOCK
# must stay far below it: a line that fits in one block is never measured.
_MAX_LINE = 1 << 26
_MAX_JSON = 1 << 30  # JSON read whole (qrels, a run read again): parsing takes several times its size in memory
# A JSON run streamed from a file: past this, refused (docs/performance.md: about a minute of parsing).
_MAX_JSON_RUN = 1 << 29
_MAX_ID = 1 << 12  # bytes of a query or document id (memory follows what is kept); trec_eval's limits are far below
# Run queries the qrels lack, kept by name for the error or the note; beyond, the run is refused.
_MAX_UNKNOWN_QUERIES = 200_000
# Ids kept to find a document listed again when a query's lines come apart (or run long): about 6 MB.
_REPEAT_BUDGET = 1 << 16
_MAX_RANKS = 1 << 20  # ranks of one query of a MS MARCO run checked for repeats: about 60 MB
_MAX_RUN_BYTES = 1 << 32  # inflated bytes of a run (--max-input-bytes): a gzip bomb ends here
_MAX_DETECT_LINE = 1 << 20  # a longer first line that opens an object is taken for JSON, not a JSONL row
_MAX_SMALL_JSON = 1 << 26  # baselines and slices: far beyond a real one, far below a gzip bomb
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"

# Field names accepted in JSONL rows (docs/reports.md: ir_datasets', BEIR's).
_JSONL_QUERY = ("query_id", "qid", "query-id")
_JSONL_DOC = ("doc_id", "docid", "corpus_id", "corpus-id", "doc-id")
_JSONL_GRADE = ("relevance", "grade", "rel", "score")
# A header line of a text file may use these, and PyTerrier's docno and label (and MS MARCO's pid), first
# found first: PyTerrier's docid is its index's number for the docno, which comes first.
_ROW_DOC = ("docno",) + _JSONL_DOC + ("chunk_id",)  # chunk_id last: a row that also names its doc_id is that document's
_HEADER_DOC = _ROW_DOC + ("pid",)
_HEADER_GRADE = ("label",) + _JSONL_GRADE  # label: PyTerrier's
_QRELS_HEADERS = "qid docno label (PyTerrier), query-id corpus-id score (BEIR), query_id doc_id relevance"
_RUN_HEADERS = "qid docno score rank (PyTerrier), query_id doc_id score, qid pid rank"


class _Input(NamedTuple):
    source: str  # the name to put in error messages
    head: bytes  # the first block with something in it, its first line whole if it opens an object (for detection)
    rest: object  # a binary stream positioned after ``head``
    first_line: int  # the number of the line ``head`` starts in


# While the command line writes --output: path -> sha256 of each input's bytes,
# hashed as they are read (a FIFO or <(...) cannot be read twice).  Unset, reading costs nothing more.
_INPUT_SHA256 = ContextVar("rag_eval_input_sha256", default=None)


def _source_name(path):
    return "<stdin>" if path == "-" else path


def _read_once(path):
    """Whether an input can be read only once: standard input (also as /dev/stdin or /dev/fd/N, where even
    a regular file, reopened, may share its offset, as on macOS), a FIFO or ``<(...)``, a device, anything
    but a regular file (a missing one is not: reading it says so)."""
    if path == "-" or path.startswith(("/dev/stdin", "/dev/fd/")):
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


@contextmanager
def _opened(path):
    """Open a file (or ``-`` for standard input), transparently un-gzipped; close it after."""
    source = _source_name(path)
    digests = _INPUT_SHA256.get()
    if digests is not None:
        import hashlib

        digest = hashlib.sha256()
    raw = stream = _open_binary(path, source, None if digests is None else digest.update)
    try:
        try:
            magic = raw.peek(2)[:2]
        except OSError as exc:
            raise RagEvalError(f"cannot read: {exc.strerror or exc}", source) from None
        if magic == _GZIP_MAGIC:
            import gzip  # only gzipped inputs pay for it

            stream = gzip.GzipFile(fileobj=raw, mode="rb")
        yield _first_content(stream, source)
        if digests is not None:  # readers read to the end (gzip's trailer too), or fail, or read again
            digests[path] = digest.hexdigest()
    finally:
        if path != "-":
            stream.close()
            raw.close()


_TEES = {}  # an input read once -> (its stream, the file its bytes are kept in)


@contextmanager
def _teed(path):
    """A run read only once (standard input, a FIFO) keeps its bytes in a temporary file as they are read: it is
    streamed as a file is, and can be read again (by the plain JSON reader)."""
    import tempfile

    stream = _open_binary(path, _source_name(path))
    with tempfile.TemporaryFile(prefix="rag_eval-") as kept:
        _TEES[path] = (stream, kept)
        try:
            yield
        finally:
            del _TEES[path]
            if path != "-":
                stream.close()


class _Tapped(io.RawIOBase):
    """A raw stream that hands every byte it reads to ``tap`` too (a sha256's update); with ``kept``, an input
    read once, from its start: the bytes kept so far, then the stream's, which ``tap`` (``kept.write``) keeps."""

    def __init__(self, stream, tap, kept=None):
        super().__init__()
        self.stream, self.tap, self.kept = stream, tap, kept
        if kept:
            kept.seek(0)

    def readable(self):
        return True

    def readinto(self, buffer):
        count = self.kept.readinto(buffer) if self.kept else 0
        if not count:
            count = self.stream.readinto(buffer)
            self.tap(memoryview(buffer)[:count])
        return count

    def close(self):
        if not self.kept and self.stream is not getattr(sys.stdin, "buffer", None):
            self.stream.close()
        super().close()


def _open_binary(path, source, tap=None):
    try:
        if path in _TEES:
            stream, kept = _TEES[path]
            stream = io.BufferedReader(_Tapped(stream, kept.write, kept), _READ_BLOCK)
        elif path == "-":
            if sys.stdin is None:
                raise RagEvalError("there is no standard input to read", source)
            stream = sys.stdin.buffer
        else:
            if os.path.isdir(path):
                raise RagEvalError("is a directory, expected a file", source)
            stream = open(path, "rb", buffering=0 if tap else -1)
        return io.BufferedReader(_Tapped(stream, tap), _READ_BLOCK) if tap else stream
    except FileNotFoundError:
        raise RagEvalError("no such file", source) from None
    except OSError as exc:
        raise RagEvalError(f"cannot read: {exc.strerror or exc}", source) from None


def _first_content(stream, source):
    """The stream with its first block that holds more than white space, for format detection."""
    head = _read_block(stream, source).removeprefix(_BOM)
    first_line = 1
    while head.isspace():  # blank blocks say nothing of the format: skip them, counting lines
        first_line += head.count(b"\n")
        head = _read_block(stream, source)
    content = head.lstrip()
    if content[:1] == b"{" and b"\n" not in content:
        # The first line tells a JSONL row from a JSON document: read it whole, within reason.
        head += _read_block(stream, source, line_limit=_MAX_DETECT_LINE)
    return _Input(source, head, stream, first_line)


def _read_block(stream, source, line_limit=None, size=0):
    try:
        return stream.read(size or _READ_BLOCK) if line_limit is None else stream.readline(line_limit)
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise RagEvalError(f"cannot read (corrupt or truncated gzip?): {exc}", source) from None
    except Exception as exc:  # zlib.error, without importing zlib up front
        raise RagEvalError(f"cannot read: {exc}", source) from None


def _detect_format(inp):
    """Guess json, jsonl or trec from the first bytes, not the file name."""
    text = inp.head.lstrip()
    if not text:
        raise RagEvalError("file is empty", inp.source)
    if text[:1] == b"[":
        return "json"
    if text[:1] != b"{":
        return "trec"
    try:
        row = json.loads(text.split(b"\n", 1)[0])
    except (ValueError, RecursionError):
        return "json"  # an object spread over several lines, or broken: the JSON parser will say
    # A JSONL row names its query in a field; a JSON document maps query ids to objects or lists.
    return "jsonl" if isinstance(row, dict) and any(
        name in row and not isinstance(row[name], (dict, list)) for name in _JSONL_QUERY) else "json"


def _line_blocks(inp, kind, max_bytes=None):
    """Yield ``(number of the first line, lines)`` for successive blocks of a text file."""
    first, data, read = inp.first_line, inp.head, 0
    while data:
        data, too_long = _whole_lines(inp.rest, inp.source, data, first)
        read += len(data)
        if max_bytes is not None and read > max_bytes:
            raise _too_large(inp.source, max_bytes)
        problem = _block_problem(data, inp.source, first)
        if problem is None and too_long is not None:
            problem = (len(data), too_long)  # after every line before it
        if problem:
            start, error = problem
            if start:  # the lines before go to the reader first: an error on an earlier line is the one to report
                yield first, data[:start] if kind is None else _lines_of(data[:start], kind)
            raise error
        if data.isspace():  # isspace, not strip: no copy of the block
            first += data.count(b"\n")
        elif kind is None:
            lines = yield first, data
            first += data.count(b"\n") + (not data.endswith(b"\n")) if lines is None else lines
        else:
            lines = _lines_of(data, kind)
            yield first, lines
            first += len(lines)
        data = _read_block(inp.rest, inp.source)


def _too_large(source, max_bytes):
    return RagEvalError(f"more than {max_bytes} bytes (after gunzip); raise the limit with --max-input-bytes", source)


def _whole_lines(stream, source, data, first):
    """``data`` and the rest of its last line from ``stream``: blocks never cut a line.  A line may be
    MAX_LINE bytes long (line end included) wherever it starts, so the readline's limit counts what ``data``
    holds of it; for a longer line: the lines before it, and the error to raise once they are read."""
    if data.endswith(b"\n"):
        return data, None
    start = data.rfind(b"\n") + 1
    limit = max(_MAX_LINE + 1 - (len(data) - start), 1)
    rest = _read_block(stream, source, line_limit=limit)
    if len(rest) == limit and not rest.endswith(b"\n"):
        return data[:start], RagEvalError(f"line longer than {_MAX_LINE >> 20} MiB", source, first + data.count(b"\n"))
    return data + rest, None


def _lines_of(data, kind):
    lines = data.split(b"\n") if kind is bytes else data.decode("utf-8").split("\n")
    if not lines[-1]:
        lines.pop()  # the empty piece after the final newline
    return lines


def _block_problem(data, source, first):
    """The first line of a block that no text line may hold: (where it starts, the error), or None.  Bytes
    that are not UTF-8, a NUL byte and a lone CR ending a line (classic Mac line ends would read as one
    line) are each looked for in C over the whole block; of several, the earliest line wins, and on one
    line that order (a binary file is "not UTF-8" before it is "NUL")."""
    found = []
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            found.append((exc.start, f"bytes that are not UTF-8 (byte 0x{data[exc.start]:02x})"))
    if b"\x00" in data:
        found.append((data.index(b"\x00"), "NUL byte in a text line"))
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):  # C-speed counts; the loop runs only on error
        where = data.find(b"\r")
        while data[where + 1:where + 2] == b"\n":
            where = data.find(b"\r", where + 1)
        found.append((where, "a line ends in a lone carriage return (CR); use LF or CRLF line ends"))
    if not found:
        return None
    where, message = min(found, key=lambda problem: data.rfind(b"\n", 0, problem[0]))  # the first of equals wins
    return data.rfind(b"\n", 0, where) + 1, RagEvalError(message, source, first + data.count(b"\n", 0, where))


def _parse_json(inp, what, limit=_MAX_JSON):
    """The whole JSON document, read up to ``limit`` bytes: a gzip bomb stops here, not in the OOM killer."""
    blocks, size = [inp.head], len(inp.head)
    for block in iter(lambda: _read_block(inp.rest, inp.source), b""):
        size += len(block)
        if size > limit:
            advice = "; for large runs use TREC or JSONL, which are streamed" if limit == _MAX_JSON else ""
            raise RagEvalError(f"JSON larger than {limit >> 20} MiB{advice}", inp.source)
        blocks.append(block)
    data = b"".join(blocks)
    if not data.strip():
        raise RagEvalError("file is empty", inp.source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = inp.first_line + data.count(b"\n", 0, exc.start)
        raise RagEvalError(f"bytes that are not UTF-8 (byte 0x{data[exc.start]:02x})", inp.source, line) from None
    return _decode_json(text, inp.source, inp.first_line, what)


def _decode_json(text, source, first_line, what=None, decoder=None):
    """Decode a JSON document (``what`` names it: "qrels", "run", ...) or, without ``what``, one JSONL row;
    every failure is one error line, naming a document's line and column of the fault, or a row's line."""
    row_line = None if what else first_line  # a document's own faults have no line but the parser's
    try:
        return (decoder or _JSON).decode(text)
    except json.JSONDecodeError as exc:
        column = f" (column {exc.colno})" if what else ""
        raise RagEvalError(f"invalid JSON: {exc.msg}{column}", source, first_line + exc.lineno - 1) from None
    except RagEvalError as exc:  # a duplicated key or a constant such as NaN, from the decoder's hooks
        raise RagEvalError(str(exc), source, row_line) from None
    except RecursionError:
        raise RagEvalError("JSON nested too deeply" + (f" to be a {what}" if what else ""), source, row_line) from None
    except ValueError:  # an integer of thousands of digits: Python's conversion limit (words differ by version)
        limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
        raise RagEvalError(f"a number {'in the JSON ' if what else ''}is too long (over {limit} digits)",
                           source, row_line) from None


def _unique_keys(pairs):
    result = dict(pairs)
    if len(result) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise RagEvalError(f"duplicated key {_clipped_repr(key)} in a JSON object")
            seen.add(key)
    return result


def _reject_constant(name):
    raise RagEvalError(f"{name} is not a number that JSON allows")


# One decoder for every input: json.loads with options builds a new one per
# call, which doubled the cost of a JSONL line.
_JSON = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
_JSON_SPACE = json.decoder.WHITESPACE  # JSON's own white space: a regular expression


def _row_field(row, names, what, source, lineno):
    for name in names:
        if name in row:
            return row[name]
    raise RagEvalError(f"missing {what} field (one of {', '.join(names)})", source, lineno)


def _row_id(row, names, what, source, lineno):
    value = _row_field(row, names, what, source, lineno)
    return str(value) if _is_int(value) else _string_id(value, what, source, lineno)


def _jsonl_rows(inp, max_bytes=None):
    """Yield ``(line number, row)`` for each non-blank line: a JSON object."""
    for first, lines in _line_blocks(inp, str, max_bytes):
        for lineno, line in enumerate(lines, first):
            if not line.strip():
                continue
            if line.startswith("\ufeff"):  # json.loads would say so; the decoder used here does not
                raise RagEvalError("a byte order mark (BOM) starts this line: were files joined?", inp.source, lineno)
            row = _decode_json(line, inp.source, lineno)
            if not isinstance(row, dict):
                raise RagEvalError(f"expected a JSON object per line, got {_json_kind(row)}", inp.source, lineno)
            yield lineno, row


def _json_kind(value):
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value)) or ("a number" if isinstance(value, (int, float)) else f"a {type(value).__name__}")


def _ascii_int(text, digits=9):
    """A whole number of at most ``digits`` ASCII digits, else None: int() alone would take '²', '1_0' and
    ' 5', and refuses 5,000 digits with a ValueError of its own (Python 3.11's limit on long conversions)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= digits else None


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value):
    """A number that is not NaN or infinite, and that a float can hold (JSON allows 400-digit integers)."""
    try:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:
        return False


def _all_finite(numbers):
    """Every number is finite, in C: a NaN or an infinity makes the sum so, and fsum turns each number into a
    float, so a huge integer overflows rather than cancel out.  False may be a false alarm (a sum beyond a
    float's range): callers then check one by one."""
    try:
        return math.isfinite(math.fsum(numbers))
    except (OverflowError, ValueError):  # ValueError: inf - inf
        return False


def _clip(text):
    return text if len(text) <= _CLIP else text[:_CLIP] + "..."


def _clipped_repr(value):
    """repr() of at most CLIP characters of a value: an error line stays short, and a file read by mistake (a
    symlinked run) shows no more than that of its content."""
    if isinstance(value, str):
        return repr(value) if len(value) <= _CLIP else repr(value[:_CLIP]) + "..."
    return _clip(repr(value))


def _string_id(value, what, source, lineno=None):
    if not isinstance(value, str):
        raise RagEvalError(f"{what} must be a string, got {_json_kind(value)}{_instead(value)}", source, lineno)
    return value


def _add_judgment(qrels, qid, docid, grade, source, lineno):
    docs = qrels.setdefault(qid, {})
    if docs.setdefault(docid, grade) != grade:
        raise RagEvalError(f"conflicting judgments for {_clipped_repr(qid)}/{_clipped_repr(docid)}: {docs[docid]} and {grade}", source, lineno)


def _without_negative(qrels):
    """A negative grade is trec_eval's mark for a document outside the judged
    pool: the query is kept, the document stays unjudged."""
    if all(min(docs.values(), default=0) >= 0 for docs in qrels.values()):
        return qrels  # the common case, checked without copying
    return {qid: {docid: grade for docid, grade in docs.items() if grade >= 0} for qid, docs in qrels.items()}


class _Header(NamedTuple):
    """The header line of a text file: its column names (lower case) and how its lines split."""

    names: List[str]
    delimiter: Optional[str]  # "\t", "," (CSV, quotes allowed) or None (white space)
    lineno: int
    query: int  # the columns of the query and document ids
    doc: int


def _first_column(names, wanted):
    return next((names.index(name) for name in wanted if name in names), None)


_ASCII_SPACE = " \t\n\r\x0b\x0c"  # C's isspace(), at which bytes.split cuts TREC lines; str.split() cuts at more
_ASCII_SPACES = re.compile(f"[{_ASCII_SPACE}]+")


def _split_row(text, delimiter):
    """The values of one line, stripped of ASCII white space only (a no-break space stays in an id, as in a
    TREC file); ValueError for a CSV line that the csv module refuses (a field over 128 KiB)."""
    if delimiter == ",":
        import csv  # only CSV files pay for it

        try:
            return [value.strip(_ASCII_SPACE) for value in next(csv.reader([text]), [])]
        except csv.Error as exc:
            raise ValueError(str(exc)) from None
    if delimiter:
        return [value.strip(_ASCII_SPACE) for value in text.split(delimiter)]
    text = text.strip(_ASCII_SPACE)
    return _ASCII_SPACES.split(text) if text else []


def _header(inp):
    """The header of a TSV or CSV file written from a DataFrame (PyTerrier, pandas): one that names a query
    column and a document column; else None.  A first empty name (pandas' index) is a column; a delimiter
    that ends the line names none."""
    for lineno, first in enumerate(inp.head.split(b"\n"), inp.first_line):
        if first.strip():
            break
    else:
        return None  # nothing but white space
    line = first.decode("utf-8", "replace")
    text = line.strip(_ASCII_SPACE)
    if text.startswith("#") or "\0" in text:
        return None  # a comment, as TREC files may start with; or a NUL, which the reader names
    delimiter = "\t" if "\t" in text else "," if "," in text else None
    if delimiter is None and _first_column(text.lower().split(";"), _JSONL_QUERY) is not None:
        raise RagEvalError("fields separated by ';' (a CSV saved by Excel in a European locale?): save it with "
                           "commas or tabs as the separator", inp.source, lineno)
    try:
        names = [name.lower() for name in _split_row(line.rstrip("\r") if delimiter else text, delimiter)]
    except ValueError:
        return None
    if delimiter and len(names) > 1 and not names[-1]:
        names.pop()
    query, doc = _first_column(names, _JSONL_QUERY), _first_column(names, _HEADER_DOC)
    return None if query is None or doc is None else _Header(names, delimiter, lineno, query, doc)


def _header_rows(inp, header, columns, max_bytes=None):
    """``(line number, the values in columns)`` of each line after the header that is not blank; each line
    has as many values as the header names."""
    for first, lines in _line_blocks(inp, str, max_bytes):
        for lineno, line in enumerate(lines, first):
            if lineno <= header.lineno or not line.strip(_ASCII_SPACE):
                continue
            try:
                values = _split_row(line.rstrip("\r"), header.delimiter)
            except ValueError as exc:
                raise RagEvalError(f"not a CSV line ({exc})", inp.source, lineno) from None
            if len(values) == len(header.names) + 1 and not values[-1] and header.delimiter:
                values.pop()  # a delimiter that ends the line, as it may end the header's
            if len(values) != len(header.names):
                # Rows are read line by line: a quoted value that holds a line break leaves a quote unclosed.
                quoted = "; a quoted value that holds a line break? each row must be one line" \
                    if header.delimiter == "," and line.count('"') % 2 else ""
                raise RagEvalError(f"expected {len(header.names)} fields, as the header on line {header.lineno} "
                                   f"names, got {len(values)}{quoted}", inp.source, lineno)
            yield lineno, [values[column] for column in columns]


def _header_error(fields, source, lineno, what, recognised):
    """Raise "looks like a header" for a first line without a digit: names, not values."""
    if not any(char.isdigit() for field in fields for char in field.decode("utf-8", "replace")):
        names = ", ".join(_clip(name) if name.isprintable() else _clipped_repr(name)  # no escape sequence, no line end
                          for name in (field.decode("utf-8", "replace") for field in fields[:6]))
        raise RagEvalError(f"this line looks like a header ({names}), not {what}; recognised headers: {recognised}",
                           source, lineno)


def _header_qrels(inp, header):
    """Judgments under a header line (PyTerrier's ``qid docno label``, ...), columns found by name."""
    if "rank" in header.names:
        raise RagEvalError(f"the header on line {header.lineno} names a rank column: is this a run? the order is "
                           "QRELS RUN", inp.source, header.lineno)
    grade = _first_column(header.names, _HEADER_GRADE)
    if grade is None:
        raise RagEvalError(f"the header on line {header.lineno} names no grade column "
                           f"(one of {', '.join(_HEADER_GRADE)})", inp.source, header.lineno)
    qrels = {}
    for lineno, (qid, docid, text) in _header_rows(inp, header, (header.query, header.doc, grade)):
        try:
            value = _grade(text, inp.source, lineno)
        except RagEvalError as exc:
            if header.names[grade] != "score" or "integer" not in exc.detail:
                raise
            raise RagEvalError(f"{exc.detail}; is this a run? the order is QRELS RUN", inp.source, lineno) from None
        _add_judgment(qrels, qid, docid, value, inp.source, lineno)
    return _without_negative(qrels)


def _header_run(inp, header, options):
    """A run under a header line (PyTerrier's ``qid docno score rank``, ...): scored when it has a score column,
    else ranked by its rank column (as MS MARCO's runs); other columns (``query``, ``docid``) are ignored."""
    score = _first_column(header.names, ("score",))
    if header.names == ["query-id", "corpus-id", "score"]:  # BEIR's score column holds the grade
        raise RagEvalError(f"the header on line {header.lineno} is BEIR's qrels header (query-id corpus-id score); "
                           "is this a qrels file? the order is QRELS RUN", inp.source, header.lineno)
    if score is None and "rank" not in header.names:
        qrels = "; is this a qrels file? the order is QRELS RUN" if set(_HEADER_GRADE) & set(header.names) else ""
        raise RagEvalError(f"the header on line {header.lineno} names no score or rank column{qrels}", inp.source,
                           header.lineno)
    column = header.names.index("rank") if score is None else score
    rows = _header_rows(inp, header, (header.query, header.doc, column), options.max_bytes)
    if score is None:
        return _msmarco_run(inp, options, rows, first_rank=0)
    rows = ((lineno, {"query_id": qid, "doc_id": docid, "score": _score(text, inp.source, lineno)})
            for lineno, (qid, docid, text) in rows)
    return _jsonl_run(inp, options, rows)


def _trec_qrels(inp):
    """``qid iter docid grade`` (TREC) or ``qid docid grade`` (BEIR's TSV), as the first judgment has: a line
    that lost a field is an error, not a judgment of another document.  Like the TREC run reader, it splits
    bytes (at C's white space, as trec_eval does) and decodes a query's id once for its run of lines."""
    qrels = {}
    width = first_row = None
    qid = query = None
    for first, lines in _line_blocks(inp, bytes):
        for lineno, line in enumerate(lines, first):
            fields = line.split()
            if not fields or fields[0][:1] == b"#":
                continue
            if len(fields) != width:  # the first judgment, BEIR's header (which may come first), or an error
                if width is None and b" ".join(fields).lower() == b"query-id corpus-id score":
                    continue
                if width is not None or len(fields) not in (3, 4):  # 4 (TREC) or 3 (BEIR's TSV), as the first
                    layout = "qid iter docid grade" if width != 3 else "qid docid grade, as BEIR's TSV"
                    a_run = "; is this a run? the order is QRELS RUN" if (width, len(fields)) == (None, 6) else ""
                    raise RagEvalError(f"expected {width or 4} fields ({layout}), got {len(fields)}{a_run}",
                                       inp.source, lineno)
                width, first_row = len(fields), lineno
            if fields[0] != qid:
                qid = fields[0]
                query = qid.decode("utf-8")
            grade_text = fields[-1]
            # isdigit on bytes is ASCII digits only; _grade takes signs and says what is wrong.
            if grade_text.isdigit() and len(grade_text) <= 9:
                grade = int(grade_text)
            else:
                if lineno == first_row:
                    _header_error(fields, inp.source, lineno, "a judgment", _QRELS_HEADERS)
                grade = _grade(grade_text.decode("utf-8"), inp.source, lineno)
            _add_judgment(qrels, query, fields[-2].decode("utf-8"), grade, inp.source, lineno)
    if width == 3 and _grades_look_like_ranks(qrels):
        raise RagEvalError("every query's grades are 1, 2, 3, ... once each, as a MS MARCO run's ranks; is this a "
                           "run? the order is QRELS RUN", inp.source)
    return _without_negative(qrels)


def _grades_look_like_ranks(qrels):
    """Whether each query's grades are 1..n, each once, n at least 5 for one of them: no judgments are so
    (one document per grade, five grades or more), a ranking is.  The first query of real judgments ends it."""
    longest = 0
    for docs in qrels.values():
        grades = set(docs.values())
        if len(grades) != len(docs) or min(grades) != 1 or max(grades) != len(docs):
            return False
        longest = max(longest, len(docs))
    return longest >= 5


def _whole(grade):
    """A float grade that is whole (``1.0``: pandas writes an integer column with a gap so) as that integer."""
    return int(grade) if type(grade) is float and grade.is_integer() else grade


def _grade(text, source, lineno):
    """A TREC grade: an integer, negative allowed (unjudged), at most MAX_GRADE; ``1.0`` is 1 (see _whole)."""
    sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
    whole, dot, zeros = digits.partition(".")
    digits = whole if dot and zeros and not zeros.strip("0") else digits
    if not (digits.isascii() and digits.isdigit()):
        raise RagEvalError(f"grade must be an integer, got {_clipped_repr(text)}", source, lineno)
    value = _ascii_int(digits, digits=10)
    if value is None or value > _MAX_GRADE:
        raise RagEvalError(f"grade must be at most {_MAX_GRADE}, got {_clip(text)}", source, lineno)
    return sign * value


def _jsonl_qrels(inp, rows=None):
    """JSONL rows of judgments (or evidence spans); ``rows``, when given, come from a JSON list of row objects."""
    qrels = {}
    rows = _jsonl_rows(inp) if rows is None else rows
    for lineno, row in rows:
        if "start" in row or "end" in row:  # evidence judgments (see _span_qrels), or a file that mixes them in
            if qrels:
                raise RagEvalError("this row has start and end, and the rows before it do not: a file holds "
                                   "evidence spans or document judgments, not both", inp.source, lineno)
            return _span_qrels(chain([(lineno, row)], rows), inp.source)
        qid = _row_id(row, _JSONL_QUERY, "query id", inp.source, lineno)
        docid = _row_id(row, _ROW_DOC, "document id", inp.source, lineno)
        grade = _whole(_row_field(row, _HEADER_GRADE, "grade", inp.source, lineno))
        if not _is_int(grade):
            raise RagEvalError(f"grade must be an integer, got {_clipped_repr(grade)}{_instead(grade, True)}",
                               inp.source, lineno)
        _add_judgment(qrels, qid, docid, grade, inp.source, lineno)
    return _without_negative(qrels)


def read_qrels(path: str, fmt: str = "auto") -> Qrels:
    """Read judgments ``{qid: {docid: grade}}`` from JSON, JSONL or TREC.

    The format is detected from the content unless ``fmt`` names it; formats and grades: docs/reports.md.
    """
    with _opened(path) as inp:
        fmt = _detect_format(inp) if fmt == "auto" else fmt
        if fmt == "json":
            qrels = _parse_json(inp, "qrels")
            if _first_item_is(qrels, dict):  # as pandas' to_json(orient="records") writes them: the JSONL rules
                qrels = _read_rows(inp.source, qrels, lambda rows: _jsonl_qrels(inp, rows))
            else:
                qrels = _check_qrels(qrels, inp.source)
        elif fmt == "jsonl":
            qrels = _jsonl_qrels(inp)
        else:
            header = _header(inp)
            beir = header and header.delimiter != "," and header.names == ["query-id", "corpus-id", "score"]
            qrels = _header_qrels(inp, header) if header and not beir else _trec_qrels(inp)
        if not qrels:
            raise RagEvalError("no judgments found", inp.source)
    return qrels


class _TopScores:
    """The best ``depth`` documents of one query, kept while streaming a run."""

    __slots__ = ("depth", "scores", "floor", "mark")

    def __init__(self, depth):
        self.depth, self.scores, self.floor = depth, {}, -math.inf
        self.mark = math.inf if depth is None else depth  # the size at which ``grown`` is due

    def grown(self):
        """Call when ``scores`` holds ``mark`` documents or more: raise the floor, or prune."""
        if len(self.scores) == self.depth:
            self.floor = min(self.scores.values())
        else:
            self.prune()
        self.mark = 2 * self.depth + 65

    def add(self, docid, score):
        old = self.scores.get(docid)
        if old is None or score > old:
            self.scores[docid] = score
            if old is None and len(self.scores) >= self.mark:
                self.grown()

    def add_lists(self, docids, values):
        """``add`` the documents of two lists, without pruning, passing over those below the floor (they
        cannot rank within the depth); True when each was listed once into an empty top."""
        if not self.scores:
            fresh = dict(zip(docids, values))  # the common case, in C
            if len(fresh) == len(docids):
                self.scores = fresh
                return True
        scores, floor = self.scores, self.floor
        for docid, score in zip(docids, values):
            if score >= floor and scores.get(docid, score) <= score:  # below the floor, a document cannot rank
                scores[docid] = score
        return False

    def prune(self):
        if self.depth is not None and len(self.scores) > self.depth:
            # Only the documents scored at least the depth-th best score can stay.
            cut = sorted(self.scores.values(), reverse=True)[self.depth - 1]
            near = {docid: score for docid, score in self.scores.items() if score >= cut}
            best = _order_scored(near)[: self.depth]
            self.scores = {docid: near[docid] for docid in best}
            self.floor = self.scores[best[-1]]


class _Repeated(NamedTuple):
    """Documents listed more than once in one query of a run (each counted once, however often it repeats)."""

    documents: int  # (query, document) pairs listed twice or more
    queries: int  # queries that list one
    at_least: bool  # a long or interleaved query outgrew what is kept to check it: there may be more


class _Repeats:
    """Counts the documents a run lists more than once in a query, from the ids as the file spells them."""

    def __init__(self):
        self.found = {}  # query -> its repeated documents
        self.kept = {}  # query -> the ids of its stretches read so far
        self.size = 0  # ids in ``kept``
        self.forgotten = set()
        self.at_least = False

    def add(self, qid, ids, more=True, unique=False):
        """One stretch of ``qid``'s lines; ``more``: the query may come again (else its ids are let go);
        ``unique``: the reader knows that ``ids`` holds each id once."""
        if not more and (not ids or unique) and qid not in self.kept and qid not in self.forgotten:
            return
        distinct = set(ids)
        earlier = self.kept.pop(qid, None)
        if earlier is not None:
            self.size -= len(earlier)
        elif qid in self.forgotten:
            self.at_least = True
        if len(distinct) < len(ids) or earlier is not None and not earlier.isdisjoint(distinct):
            # Counted in C: a stretch can be a whole budget of ids.
            repeated = {docid for docid, count in Counter(ids).items() if count > 1}
            if earlier is not None:
                repeated |= distinct & earlier
            self.found.setdefault(qid, set()).update(repeated)
        if not more:
            return
        if earlier is not None:
            distinct |= earlier
        if self.size + len(distinct) <= _REPEAT_BUDGET:
            self.kept[qid] = distinct
            self.size += len(distinct)
        else:
            self.forgotten.add(qid)

    def counted(self):
        return _Repeated(sum(map(len, self.found.values())), len(self.found), self.at_least)


class _RunRead(NamedTuple):
    run: Run
    any_judged: bool  # whether a line names a document judged for its query (False without qrels)
    repeated: _Repeated
    # chunk id -> (doc_id, start, end), as an evidence run's rows locate them; none (read-only) in other runs
    located: Mapping[str, Location] = MappingProxyType({})


class _ReadOptions(NamedTuple):
    """How ``_read_run`` reads a run (see there), handed to the reader of its format."""

    depth: Optional[int] = None
    keep: Optional[Callable[[str, str], bool]] = None
    doc_id_sep: Optional[str] = None
    judged: Optional[Qrels] = None
    cutoffs: Optional[List[int]] = None  # reduce each query as it is read (see ``_Reducer``)
    max_bytes: int = _MAX_RUN_BYTES


class _ReadAgain(Exception):
    """The streamed reading cannot go on (a query's lines apart, or JSON the plain reader must judge): read again."""


class _Reducer:
    """Reduces each query of a run to a ``_Reduced`` as soon as its documents end."""

    def __init__(self, options, as_bytes, source):
        self.judged, self.cutoffs, self.depth = options.judged, sorted(options.cutoffs), options.depth
        self.as_bytes, self.source = as_bytes, source
        self.queries = {}
        self.unknown = set()

    def knows(self, qid):
        """Whether the qrels judge ``qid``; a query seen before and reduced already cannot resume."""
        if qid in self.queries:
            raise _ReadAgain(qid)
        if qid in self.judged:
            return True
        if qid not in self.unknown:
            self.unknown.add(qid)
            if len(self.unknown) > _MAX_UNKNOWN_QUERIES:
                raise RagEvalError(f"more than {_MAX_UNKNOWN_QUERIES} run queries are not in the qrels "
                                   f"(one: {_clipped_repr(qid)}); is this a run of these qrels?", self.source)
        return False

    def scored(self, qid, scores, docids=None, values=None):
        """A query's unique documents and their scores (at least its best ``depth``, maybe more); ``docids``
        and ``values``: the same as two lists, when the reader has them.

        rank = 1 + the documents ordered before: those scored higher, and
        those scored the same with a larger docid (trec_eval's order), so no
        (score, docid) pair is sorted: the scores alone are, in C, for the
        counts and the ties across cutoffs.  Only the judged documents'
        tied partners are looked for, when there are any.
        """
        if docids is None:
            docids, values = list(scores), list(scores.values())
        ascending = sorted(values, reverse=True)  # one pass when the scores come best first, as runs list them
        ascending.reverse()
        count = len(ascending)
        length = min(count, self.depth)
        # Scored the same on both sides of a cutoff k: the k-th and the (k+1)-th best.
        tied = tuple(k for k in self.cutoffs if k < length and ascending[count - k] == ascending[count - k - 1])
        found = []  # (rank counting only higher scores, docid, its score, how many share it)
        for docid in self._judged_ids(qid).keys() & scores.keys():
            score = scores[docid]
            above = bisect_right(ascending, score)
            found.append((count - above + 1, docid, score, above - bisect_left(ascending, score)))
        partners = {}
        for rank, _, score, same in found:
            if same > 1 and score not in partners:
                start = rank - 1  # where they are when listed best first, as runs list them
                if values[start:start + same].count(score) == same:
                    partners[score] = docids[start:start + same]
                    continue
                partners[score] = tied_with = []
                where = -1
                for _ in range(same):  # index() finds them in C
                    where = values.index(score, where + 1)
                    tied_with.append(docids[where])
        ranks = []
        for rank, docid, score, same in found:
            if same > 1:
                rank += sum(other > docid for other in partners[score])
            if rank <= self.depth:
                ranks.append((rank, docid))
        self._add(qid, length, ranks, tied, ascending[-1] if ascending else None)

    def ranked(self, qid, ranking):
        """A query's unique documents in rank order, without scores, at most ``depth`` (the readers cut them)."""
        # The judged documents are few: find them with a set operation and their ranks with index(), both in C.
        ranks = [(ranking.index(docid) + 1, docid) for docid in self._judged_ids(qid).keys() & set(ranking)]
        self._add(qid, len(ranking), ranks, (), None)

    def _judged_ids(self, qid):
        """The query's judged ids as the reader holds them (bytes or text) -> as text."""
        grades = self.judged[qid]
        # surrogatepass: an id a JSON escape made invalid ("\udcff") matches no UTF-8 line, but must not crash
        return ({docid.encode("utf-8", "surrogatepass"): docid for docid in grades} if self.as_bytes
                else dict(zip(grades, grades)))

    def _add(self, qid, length, ranks, tied, best):
        names = self._judged_ids(qid) if self.as_bytes else None  # text ids are the judged ones already
        judged = sorted((rank, names[docid] if names else docid) for rank, docid in ranks)
        self.queries[qid] = _Reduced(length, tuple(judged), tied, best)

    def run(self):
        return _ReducedRun(self.queries, sorted(self.unknown))


def _score(text, source, lineno):
    """A TREC score: a finite number as C's strtod reads it (float() alone would take '1_0' for 10, and
    digits and spaces of any script: '\uff13' for 3)."""
    try:
        if "_" in text or not text.isascii():
            raise ValueError(text)
        score = float(text)
    except ValueError:
        raise RagEvalError(f"score must be a number, got {_clipped_repr(text)}", source, lineno) from None
    if not math.isfinite(score):
        raise RagEvalError(f"score must be a finite number, got {_clipped_repr(text)}", source, lineno)
    return score


def _trec_run(inp, options):
    """``qid Q0 docid rank score tag``; the rank column is ignored, as in trec_eval."""
    queries = _Queries(inp.source, options, as_bytes=True)
    blocks = _line_blocks(inp, None, options.max_bytes)
    lines = None  # sent back: the lines of a block in columns (counted for free), which _line_blocks need not count
    while True:
        try:
            first, data = blocks.send(lines)
        except StopIteration:
            return queries.finished()
        segments = _trec_columns(data)
        lines = segments and sum(len(docids) for _, docids, _ in segments)
        queries.take(segments or _trec_lines(data, first, queries.qid, inp.source))


class _Queries:
    """A run's queries as the readers hand them over: for each stretch of one query's lines, its document ids
    as the file spells them (bytes from TREC lines, text from rows) and their values (scores; in a ranked
    run the places negated, so that higher is better).  A query's documents are held as two lists until its
    lines end; then one dict of them (``_TopScores.add_lists``) finds repeated ids and serves the reducer's
    look-up of the judged ones.
    """

    def __init__(self, source, options, as_bytes):
        self.depth, self.keep, self.judged, self.as_bytes = options.depth, options.keep, options.judged, as_bytes
        self.doc_id_sep = options.doc_id_sep
        self.mapped = self.keep is not None or self.doc_id_sep is not None
        self.reducer = None if options.cutoffs is None else _Reducer(options, as_bytes and not self.mapped, source)
        self.tops = {}  # without a reducer: every query's
        self.repeats = _Repeats()
        self.looking = self.judged is not None  # for a line that names a judged document of its query
        self.ranked = False  # ranked (not scored) rows: queries are ranked lists, with no ties to note
        self.qid = None  # the current query as the file spells it, None before the first line
        self.query = None  # ... as text
        self.top = None  # ... its best documents; None when the reducer's qrels lack it
        self.ids = []  # its document ids since the last hand-over, for _Repeats
        self.values = []  # their values, when ``top`` takes ``ids`` as they are (not mapped)

    def take(self, segments):
        """Stretches ``(qid, docids, values)`` of one query's lines each, in file order."""
        if len(self.ids) > _REPEAT_BUDGET:  # a long query: its documents so far go on, checked and within bounds
            self._hand_over(more=True)
        for qid, docids, values in segments:
            if qid != self.qid:
                self.start(qid)
            self.ids += docids
            if self.looking:
                self.looking = not self._names_judged(docids)
            if self.top is None:
                continue  # a query the qrels lack: its lines are checked, not kept
            if self.mapped:
                self._add_mapped(docids, values)
            else:
                self.values += values

    def rows_end(self, qid, ids, values, next_qid):
        """A reader of rows hands over ``ids`` and ``values`` (maybe none) of ``qid``'s latest rows, at most
        REPEAT_BUDGET + 1; ``next_qid`` starts if it is another query.  Returns new lists for the next rows."""
        if ids:
            self.take(((qid, ids, values),))
        if next_qid != qid:
            self.start(next_qid)
        return [], []

    def start(self, qid):
        """The lines of ``qid`` start (the qrels are asked about it here, before its later lines are read)."""
        self._end()
        self.qid, self.query = qid, qid.decode("utf-8") if self.as_bytes else qid
        if self.reducer is None:
            self.top = self.tops.get(qid) or self.tops.setdefault(qid, _TopScores(self.depth))
        else:
            self.top = _TopScores(self.depth) if self.reducer.knows(self.query) else None

    def finished(self):
        self._end()
        found = self.judged is not None and not self.looking
        if self.reducer is not None:
            return _RunRead(self.reducer.run(), found, self.repeats.counted())
        run = {}
        for qid, top in self.tops.items():
            top.prune()
            scores = top.scores if self.mapped or not self.as_bytes else {
                docid.decode("utf-8"): score for docid, score in top.scores.items()}
            run[qid.decode("utf-8") if self.as_bytes else qid] = _order_scored(scores) if self.ranked else scores
        return _RunRead(run, found, self.repeats.counted())

    def _end(self):
        """The current query's lines end here (without a reducer, its lines may come again)."""
        if self.qid is None:
            return
        ids, values, top, reducer = self.ids, self.values, self.top, self.reducer
        if reducer is not None and top is not None and not self.ranked and not top.scores and len(values) > top.depth \
                and sorted(values, reverse=True) == values and len(set(ids)) == len(ids):
            # Shallow, the common case: the whole query in two lists, best first, each id once (no repeats to
            # count).  Only documents scored at least the depth-th best can rank within the depth: no dict of them all.
            count = values.index(values[top.depth - 1]) + values.count(values[top.depth - 1])
            self.ids, self.values = [], []
            reducer.scored(self.query, dict(zip(ids[:count], values[:count])), ids[:count], values[:count])
            return
        unique = self._hand_over(more=reducer is None or top is None)  # an unknown query's lines may come again
        if reducer is None or top is None:
            return
        if self.ranked:
            top.prune()
            reducer.ranked(self.query, _order_scored(top.scores))
        else:  # unique, the common case: with the lists that the dict was made of
            reducer.scored(self.query, top.scores, *((ids, values) if unique else ()))

    def _hand_over(self, more):
        """The documents held go to the query's top, their ids to ``_Repeats`` (``more``: lines may follow);
        True when each was listed once and the top held none before."""
        unique = bool(self.values) and self.top.add_lists(self.ids, self.values)
        self.repeats.add(self.qid, self.ids, more, unique)  # unique: add_lists' dict found each id once
        self.ids, self.values = [], []
        if more and self.top is not None and len(self.top.scores) >= self.top.mark:
            self.top.grown()  # about twice its depth at most, while its lines go on
        return unique

    def _text(self, docid):
        text = docid.decode("utf-8") if self.as_bytes else docid
        return text if self.doc_id_sep is None else _document_of(text, self.doc_id_sep)

    def _add_mapped(self, docids, values):
        top, keep, query = self.top, self.keep, self.query
        for docid, score in zip(docids, values):
            if score >= top.floor:  # below it, a document cannot be among the best: not even mapped
                text = self._text(docid)
                if keep is None or keep(query, text):
                    top.add(text, score)

    def _names_judged(self, docids):
        grades = self.judged.get(self.query, {})
        if self.doc_id_sep is not None:
            return any(self._text(docid) in grades for docid in docids)
        if self.as_bytes:
            return not {docid.encode("utf-8", "surrogatepass") for docid in grades}.isdisjoint(docids)
        return not grades.keys().isdisjoint(docids)


def _trec_columns(data):
    """A block of plain TREC run lines as ``_Queries.take`` takes them, or None.

    Plain: six fields on every line, no blank or comment line, no line
    longer than MAX_ID bytes, every score a finite number.  Anything else
    is None, and the block is read line by line (``_trec_lines``).  Every
    step is a call into C: one split of the whole block (a NUL, which no
    checked line holds, marks the line ends), slices for the columns, one
    float() per score.
    """
    marked = data.replace(b"\n", b" \0 ")
    fields = marked.split()
    ends = (len(marked) - len(data)) // 2  # line ends: each added two bytes
    # The marks are the block's only NULs: when every seventh field is one, every line has six fields.
    if len(fields) != 7 * ends + (0 if data.endswith(b"\n") else 6) or fields[6::7].count(b"\0") != ends:
        return None
    scores = fields[4::7]
    try:
        values = list(map(float, scores))
    except ValueError:
        return None
    # float() takes inf, nan (the sum is then not finite) and '1_0', which trec_eval's strtod reads as 1.
    if not math.isfinite(sum(values)) or b"_" in data and b"_" in b"".join(scores) or _has_long_line(data):
        return None
    qids, docids = fields[0::7], fields[2::7]
    segments = []
    start = 0
    while start < len(qids):  # a stretch of lines of one query: its end found by halving, then checked in C
        qid = qids[start]
        low, high = start + 1, len(qids)
        while low < high:
            middle = (low + high) // 2
            if qids[middle] == qid:
                low = middle + 1
            else:
                high = middle
        if qid[:1] == b"#" or qids[start:low].count(qid) != low - start:
            return None  # a comment line, or a query's lines apart
        segments.append((qid, docids[start:low], values[start:low]))
        start = low
    return segments


def _has_long_line(data):
    """Whether a line of ``data`` is longer than MAX_ID bytes (only such a line can hold a longer id): each
    step looks for the last line end within MAX_ID + 1 bytes of a line's start, about 30 steps a block."""
    start = 0
    while len(data) - start > _MAX_ID:
        end = data.rfind(b"\n", start, start + _MAX_ID + 1)
        if end < 0:
            return True
        start = end + 1
    return False


def _trec_lines(data, first, qid, source):
    """``_trec_columns`` line by line (``first``: the first line's number; ``qid``: the query of the line
    before, None before any).  Blank and comment lines are skipped and extra fields ignored, as trec_eval
    does.  At a bad line the segments before it come out first (its query's start included: the qrels are
    asked about it before its score is checked), then its error.
    """
    docids, values = [], []
    for lineno, line in enumerate(_lines_of(data, bytes), first):
        fields = line.split()
        if len(fields) < 6 or fields[0][:1] == b"#":
            if not fields or fields[0][:1] == b"#":
                continue  # blank, or a comment, as trec_eval reads them
            if qid is None:
                _header_error(fields, source, lineno, "a run line", _RUN_HEADERS)
            swapped = "; is this a qrels file? the order is QRELS RUN" if qid is None and len(fields) in (3, 4) \
                and fields[-1].isdigit() and len(fields[-1]) == 1 else ""  # its last field a grade
            error = RagEvalError(f"expected 6 fields (qid Q0 docid rank score tag), got {len(fields)}{swapped}",
                                 source, lineno)
        elif len(line) > _MAX_ID and max(len(fields[0]), len(fields[2])) > _MAX_ID:
            what = "query id" if len(fields[0]) > _MAX_ID else "document id"
            error = RagEvalError(f"{what} longer than {_MAX_ID} bytes", source, lineno)
        else:
            if fields[0] != qid:
                if docids:
                    yield qid, docids, values
                qid, docids, values = fields[0], [], []
            try:
                score = float(fields[4])
            except ValueError:
                score = math.nan
            if math.isfinite(score) and b"_" not in fields[4]:
                docids.append(fields[2])
                values.append(score)
                continue
            error = None
        if qid is not None:
            yield qid, docids, values
        if error is None:  # the score: _score says what is wrong with it
            _score(fields[4].decode("utf-8"), source, lineno)
        raise error
    if docids:
        yield qid, docids, values


def _too_long_id(text):
    """More than MAX_ID bytes in UTF-8; encoded only when its characters could be (at most 4 bytes each)."""
    if len(text) <= _MAX_ID // 4:
        return False
    return len(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text) > _MAX_ID


def _as_text(text):
    return text.decode("utf-8") if isinstance(text, bytes) else text


def _msmarco_layout(inp):
    """Whether a text run is MS MARCO's ``qid pid rank``, in any line order (its evaluation places each line by
    its rank): three fields, the first query's ranks positive, and a query's lines that break off and come back
    (no qrels file is so ordered), or else the first query's ranks distinct, with 1, 1 to n if it ended, and a
    query of several lines (one per query, rank 1, is a qrels file too).  A qrels file has grades: 0, 1 twice."""
    head = inp.head[:inp.head.rfind(b"\n") + 1] or inp.head  # whole lines only, unless one line is all there is
    rows = []  # (query, pid, rank) of each line
    for line in head.split(b"\n"):
        fields = line.split()
        if not fields or fields[0][:1] == b"#":
            continue
        if len(fields) != 3:
            break
        rows.append(fields)
    stretches = [[rank for _, _, rank in lines] for _, lines in groupby(rows, itemgetter(0))]  # a query's run of lines
    ranks = [int(rank) if rank.isdigit() and len(rank) <= 9 else 0 for rank in (stretches or [[b""]])[0]]
    if 0 in ranks:
        return False
    if len({row[0] for row in rows}) < len(stretches):
        return True
    return len(set(ranks)) == len(ranks) and 1 in ranks and len(rows) > len(stretches) and (
        len(stretches) == 1 or max(ranks) == len(ranks))


def _msmarco_run(inp, options, rows=None, first_rank=1):
    """MS MARCO's ``qid pid rank`` (tab-separated): a run ordered by its rank column (trec_eval, which reads
    only scores, has no such format).  Returns as ``_trec_run``; ids stay bytes while read from the file."""
    queries = _Queries(inp.source, options, as_bytes=rows is None)
    queries.ranked = True
    if rows is None:  # (line number, fields) of every line, split in C
        rows = chain.from_iterable(enumerate(map(bytes.split, lines), first)
                                   for first, lines in _line_blocks(inp, bytes, options.max_bytes))
    qid, ids, values = None, [], []
    ranks = set()  # the query's ranks: this stretch of its lines, and those before (``earlier``)
    earlier = {}  # a query's ranks when its lines broke off
    budget = _MAX_RANKS  # ranks kept in sets for ``earlier``, over all queries (a range costs nothing)
    for lineno, fields in rows:
        try:
            query, docid, text = fields
        except ValueError:
            if fields and fields[0][:1] != b"#":
                raise RagEvalError(f"expected 3 fields (qid docid rank, as MS MARCO's runs), got {len(fields)}",
                                   inp.source, lineno) from None
            continue  # blank, or a comment, as TREC lines
        if query[:1] == b"#":  # (a header file's rows are text: never b"#")
            continue
        if len(query) > _MAX_ID // 4 and _too_long_id(query) or len(docid) > _MAX_ID // 4 and _too_long_id(docid):
            raise RagEvalError(f"{'query' if _too_long_id(query) else 'document'} id longer than {_MAX_ID} bytes",
                               inp.source, lineno)
        rank = int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None  # as _ascii_int
        if rank is None or rank < first_rank:
            text = _as_text(text)
            wanted = "an integer of at most 9 digits" if rank is None and text.isascii() and text.isdigit() else \
                "a positive integer" if first_rank else "a non-negative integer"
            raise RagEvalError(f"rank must be {wanted}, got {_clipped_repr(text)}", inp.source, lineno)
        if query != qid:
            if qid is not None:
                earlier[qid], budget = _ranks_so_far(ranks, budget)
            ranks = set(earlier.get(query) or ())  # a query whose lines come back: a rank of before is a repeat too
        if len(ranks) < _MAX_RANKS:
            if rank in ranks:
                grades = " (is this a qrels file? the order is QRELS RUN)" if max(ranks) < 5 else ""  # grades are small
                raise RagEvalError(f"rank {rank} appears twice in query {_clipped_repr(_as_text(query))}{grades}",
                                   inp.source, lineno)
            ranks.add(rank)
        if query != qid or len(ids) > _REPEAT_BUDGET:
            ids, values = queries.rows_end(qid, ids, values, query)
            qid = query
        ids.append(docid)
        values.append(-rank)
    queries.rows_end(qid, ids, values, qid)
    return queries.finished()


def _ranks_so_far(ranks, budget):
    """A query's ranks when its lines break off, as compactly as they allow (a range: 1, 2, 3, ... as a run
    has them), and the ``budget`` of ranks left for sets; None once it is spent (later repeats go unseen)."""
    if max(ranks) - min(ranks) + 1 == len(ranks):
        return range(min(ranks), max(ranks) + 1), budget
    if len(ranks) > budget:
        return None, 0
    return frozenset(ranks), budget - len(ranks)


def _jsonl_run(inp, options, rows=None, evidence=False):
    """Rows ``{"query_id", "doc_id", "score"}``; without scores, file order ranks.  Returns as ``_trec_run``.
    ``rows``, when given, are ``(line number, row)`` of a JSON list of row objects or of a header file.
    With ``evidence``, rows are an evidence run's (see ``_located_run``): the result holds their locations."""
    located = {}
    queries = _Queries(inp.source, options, as_bytes=False)
    scored = None  # whether the rows have scores, as the first row says
    qid, ids, values = None, [], []
    for place, (lineno, row) in enumerate(_jsonl_rows(inp, options.max_bytes) if rows is None else rows):
        if not evidence:
            query = _row_id(row, _JSONL_QUERY, "query id", inp.source, lineno)
            docid = _row_id(row, _ROW_DOC, "document id", inp.source, lineno)
            for value, what in ((query, "query id"), (docid, "document id")):
                if len(value) > _MAX_ID // 4 and _too_long_id(value):  # the length test inline: this runs once per row
                    raise RagEvalError(f"{what} longer than {_MAX_ID} bytes", inp.source, lineno)
        else:  # the row's chunk: located by the row, or named in doc_id and left to a chunk map
            query = _short_id(row, _JSONL_QUERY, "query id", inp.source, lineno)
            docid = _locate_chunk(row, located, inp.source, lineno) if "chunk_id" in row else \
                _short_id(row, _JSONL_DOC, "chunk id", inp.source, lineno)
        if scored is None:
            scored = "score" in row
            queries.ranked = not scored
            if not scored and not evidence and any(name in row for name in ("relevance", "grade", "rel")):
                raise RagEvalError("a row with a grade and no score: is this a qrels file? the order is QRELS RUN",
                                   inp.source, lineno)
        elif scored != ("score" in row):
            raise RagEvalError("some rows have a score and some do not", inp.source, lineno)
        if scored and not _is_finite(row["score"]):
            raise RagEvalError(f"score must be a finite number, got {_clipped_repr(row['score'])}"
                               f"{_instead(row['score'])}", inp.source, lineno)
        if query != qid or len(ids) > _REPEAT_BUDGET:
            ids, values = queries.rows_end(qid, ids, values, query)
            qid = query
        ids.append(docid)
        values.append(float(row["score"]) if scored else -place)
    queries.rows_end(qid, ids, values, qid)
    return queries.finished()._replace(located=located)


def _first_item_is(data, kind):
    """A JSON list whose first item is a ``kind``: ``dict`` for row objects, ``list`` for [doc, score] pairs."""
    return isinstance(data, list) and bool(data) and isinstance(data[0], kind)


def _read_rows(source, items, read):
    """``read`` the items of a JSON list of row objects as JSONL rows; an error names the row (a JSON
    document has no line numbers to give)."""
    at = 0

    def rows():
        nonlocal at
        for at, item in enumerate(items, 1):
            if not isinstance(item, dict):
                raise RagEvalError(f"expected a JSON object per row, got {_json_kind(item)}", source)
            yield None, item

    try:
        return read(rows())
    except RagEvalError as exc:
        if exc.source != source or exc.line is not None or not at:
            raise
        raise RagEvalError(f"row {at}: {exc.detail}", source) from None


def _scored_pairs(qid, entry, source):
    """``[[doc, score], ...]`` as ``{doc: score}``; a document listed twice keeps its higher score."""
    scores = {}
    for pair in entry:
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and _is_int(pair[0]):
            pair = (str(pair[0]), pair[1])  # an integer id, as its decimal string
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str) and _is_finite(pair[1])):
            raise RagEvalError(f"query {_clipped_repr(qid)}: expected [document id, score] pairs, got "
                               f"{_clipped_repr(pair)}", source)
        if scores.get(pair[0], pair[1]) <= pair[1]:
            scores[pair[0]] = pair[1]
    return scores


class _JsonStream:
    """The text of a JSON document, decoded as it is read; ``text[pos:]`` is what is left to parse.  Each
    value is read by the plain decoder (``raw_decode``), so numbers, strings and duplicated keys read as ever;
    whatever is not plainly valid raises ``_ReadAgain``, and the plain reader reports it in its own words."""

    def __init__(self, inp, max_bytes):
        import codecs

        self.inp, self.max_bytes, self.read = inp, max_bytes, len(inp.head)
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text, self.pos, self.ended = self._decoded(inp.head), 0, False

    def _decoded(self, data, final=False):
        try:
            return self.decoder.decode(data, final)
        except UnicodeDecodeError:
            raise _ReadAgain() from None  # the plain reader names the line

    def more(self, at_least):
        """Read on, at least ``at_least`` bytes (or to the end): False at the end."""
        if self.ended:
            return False
        data = _read_block(self.inp.rest, self.inp.source, size=at_least)
        self.ended = len(data) < at_least
        self.read += len(data)
        if self.read > min(self.max_bytes, _MAX_JSON_RUN):
            if self.max_bytes > _MAX_JSON_RUN:  # JSON's own cap: parsing costs far more per byte than TREC
                raise RagEvalError(f"JSON larger than {_MAX_JSON_RUN >> 20} MiB; for larger runs use TREC "
                                   "(read up to --max-input-bytes)", self.inp.source)
            raise _too_large(self.inp.source, self.max_bytes)
        self.text += self._decoded(data, self.ended)  # positions in the text stay valid
        return bool(data)

    def skip_space(self):
        """The next character that is not white space, "" at the end of the document."""
        while True:
            self.pos = _JSON_SPACE.match(self.text, self.pos).end()
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more(_READ_BLOCK):
                return ""

    def first_item_opens(self):
        """The character that opens the first item of the list at ``pos`` ("" at the end); ``pos`` stays."""
        at = self.pos
        self.pos += 1
        char = self.skip_space()
        self.pos = at
        return char

    def items(self, closing, last=False):
        """Step through the list (or object) that opens at ``pos`` and that ``closing`` ends: at each item (or
        member), past any comma, yield; ``last``: the document ends there."""
        self.pos += 1
        first = True
        while True:
            if self.pos > _READ_BLOCK and self.pos * 2 > len(self.text):  # between items, no position is held
                self.text, self.pos = self.text[self.pos:], 0
            char = self.skip_space()
            if char == closing:
                break
            if not first:
                if char != ",":
                    raise _ReadAgain()
                self.pos += 1
                self.skip_space()
            first = False
            yield
        self.pos += 1
        if last and self.skip_space():
            raise _ReadAgain()  # more after the document

    def parse(self, string=False):
        """The JSON value (with ``string``, a string) at ``pos``, reading on while the text runs out first."""
        if string and self.text[self.pos:self.pos + 1] != '"':
            raise _ReadAgain()  # not a string (or nothing after a comma): the plain reader says which
        start = self.pos
        while True:
            try:
                value, end = _JSON.raw_decode(self.text, start)
            except (ValueError, IndexError):  # incomplete here, or invalid
                if not self.more(max(len(self.text) - start, _READ_BLOCK)):
                    raise _ReadAgain() from None
                continue
            except (RagEvalError, RecursionError):
                raise _ReadAgain() from None
            if end == len(self.text) and self.more(_READ_BLOCK):
                continue  # a number may go on in the text not read yet: parse it again with more
            self.pos = end
            return value


def _json_members(stream):
    """The ``(key, value)`` pairs of a top-level JSON object, one at a time; a list that is not of pairs comes
    as an iterator of its strings (``_json_strings``): a ranking of millions of ids is never held."""
    if stream.skip_space() != "{":
        raise _ReadAgain()
    for _ in stream.items("}", last=True):
        key = stream.parse(string=True)
        if stream.skip_space() != ":":
            raise _ReadAgain()
        stream.pos += 1
        if stream.skip_space() == "[" and stream.first_item_opens() != "[":
            yield key, _json_strings(stream)  # read to its end before the next member
        else:
            yield key, stream.parse()


# Items of a JSON list that are plain strings (no escape, no control character: the text is the value).
_JSON_PLAIN_ITEMS = re.compile(r'(?:[ \t\n\r]*,[ \t\n\r]*"[^"\\\x00-\x1f]*")+')
_JSON_PLAIN_STRING = re.compile(r'"([^"\\\x00-\x1f]*)"')


def _json_strings(stream):
    """The ids of the JSON list at the stream's position, one at a time (an integer as its decimal string);
    anything else: ``_ReadAgain``."""
    for _ in stream.items("]"):
        value = stream.parse(string=stream.text[stream.pos:stream.pos + 1] not in "-0123456789")
        if not (isinstance(value, str) or _is_int(value)):
            raise _ReadAgain()  # a fraction: the plain reader says what is wrong
        yield value if isinstance(value, str) else str(value)
        # The common case found in C: the plain strings that follow, as far as the text is read.
        plain = _JSON_PLAIN_ITEMS.match(stream.text, stream.pos)
        if plain:
            yield from _JSON_PLAIN_STRING.findall(stream.text, stream.pos, plain.end())
            stream.pos = plain.end()


def _json_run(inp, options, document=None):
    """A JSON run read one query at a time: memory follows a query (cut to ``depth``), not the document.
    Returns as ``_trec_run``.  Anything unusual in the stream is left to the plain reader (``_ReadAgain``),
    which passes the ``document`` parsed whole: the numbers and the errors are its own."""
    depth, keep, doc_id_sep, judged = options.depth, options.keep, options.doc_id_sep, options.judged
    repeats = _Repeats()

    def too_long(qid):  # the query's id, or one of its documents'
        return RagEvalError(f"query {_clipped_repr(qid)}: an id longer than {_MAX_ID} bytes", inp.source)

    def scores_of(qid, pairs):  # [[doc, score], ...] as {doc: score}, the ids counted
        scores = _scored_pairs(qid, pairs, inp.source)
        repeats.add(qid, [pair[0] for pair in pairs], False)
        return scores

    if document is None:
        stream = _JsonStream(inp, options.max_bytes)
        rows = stream.skip_space() == "[" and stream.first_item_opens() == "{"
        members = (stream.parse() for _ in stream.items("]", last=True)) if rows else _json_members(stream)
    else:
        rows = _first_item_is(document, dict)
        if not rows:  # checked whole first, [[doc, score], ...] pairs as {doc: score}: the first error is its first
            if isinstance(document, dict):  # integer ids read as their decimal strings
                document = {qid: scores_of(qid, entry) if _first_item_is(entry, list) else
                            [str(doc) if _is_int(doc) else doc for doc in entry] if isinstance(entry, list)
                            else entry for qid, entry in document.items()}
            _check_run(document, inp.source)
        members = document if rows else ((qid, iter(entry) if isinstance(entry, list) else entry)
                                         for qid, entry in document.items())
    if rows:  # row objects, as pandas' to_json(orient="records") writes them
        return _read_rows(inp.source, members, lambda rows: _jsonl_run(inp, options, rows))
    reducer = None if options.cutoffs is None else _Reducer(options, False, inp.source)
    run, seen, found = {}, set(), False
    for qid, entry in members:
        grades = (judged or {}).get(qid, {})
        ranked = isinstance(entry, abc.Iterator)
        if ranked:  # checked, mapped, filtered and cut as it is read
            ranking = {}  # its first ``depth`` unique documents
            ids = []  # for _Repeats, in stretches of REPEAT_BUDGET + 1
            if _too_long_id(qid):
                raise too_long(qid)
            for docid in entry:
                if _too_long_id(docid):
                    raise too_long(qid)
                ids.append(docid)
                if len(ids) > _REPEAT_BUDGET:
                    repeats.add(qid, ids, True)
                    ids = []
                if doc_id_sep is not None:
                    docid = _document_of(docid, doc_id_sep)
                found = found or docid in grades
                if (depth is None or len(ranking) < depth) and (keep is None or keep(qid, docid)):
                    ranking[docid] = None  # a repeated id stays at its first place
            repeats.add(qid, ids, False)
            entry = list(ranking)
        if qid in seen:
            raise _ReadAgain()  # a duplicated key: the plain reader says so, or what comes first
        seen.add(qid)
        if not ranked:
            if document is None:  # streamed: checked query by query (a document was checked whole)
                try:
                    if isinstance(entry, list):  # [[doc, score], ...] pairs
                        entry = scores_of(qid, entry)
                    _check_run({qid: entry}, inp.source)
                except RagEvalError:
                    raise _ReadAgain() from None  # the plain reader says so, or what comes first
            # map(len) in C first: only a long id can be too long.
            if _too_long_id(qid) or max(map(len, entry), default=0) > _MAX_ID // 4 and any(map(_too_long_id, entry)):
                raise too_long(qid)
            if doc_id_sep is not None:
                entry = _best_by_document(entry, doc_id_sep)
            found = found or not grades.keys().isdisjoint(entry)
            if keep is not None:
                entry = {docid: score for docid, score in entry.items() if keep(qid, docid)}
            if depth is not None and reducer is None:
                entry = {docid: entry[docid] for docid in _order_scored(entry)[:depth]}
        if reducer is None:
            run[qid] = entry
        elif reducer.knows(qid):
            reducer.ranked(qid, entry) if ranked else reducer.scored(qid, entry)
    return _RunRead(run if reducer is None else reducer.run(), found, repeats.counted())


def read_run(path: str, fmt: str = "auto", depth: Optional[int] = None, keep=None,
             doc_id_sep: Optional[str] = None) -> Run:
    """Read a run: ``{qid: [docid, ...]}`` (ranked) or ``{qid: {docid: score}}``.

    Formats (docs/reports.md) are detected from the content.  With ``depth`` only the best ``depth``
    documents of each query are kept (without scores, its first ``depth`` unique ones); memory follows
    queries x depth, not the file.  ``keep(qid, docid)``, when given, filters documents before
    that cut (``--judged-only``, see ``_judged_filter``); with ``doc_id_sep`` chunk ids become document ids
    before it (``--doc-id-sep``), since k counts documents then.  A query's documents come in no set order.
    """
    return _read_run(path, fmt, depth, keep, doc_id_sep)[0]


def _read_run(path, fmt="auto", depth=None, keep=None, doc_id_sep=None, judged=None, cutoffs=None,
              max_bytes=_MAX_RUN_BYTES, evidence=False):
    """``read_run``, whether any document read (before any cut) is judged for its query in ``judged`` (the
    command line refuses a run that shares none), and the documents listed more than once in a query;
    with ``evidence``, JSONL rows are an evidence run's (see ``_located_run``)."""
    if depth is not None and (not _is_int(depth) or depth < 1):  # 0 or less would keep nothing, or break the pruning
        raise RagEvalError(f"depth must be a positive integer, got {_clipped_repr(depth)}")
    once = _read_once(path)
    if cutoffs is not None and (judged is None or depth is None or once):
        cutoffs = None
    options = _ReadOptions(depth, keep, doc_id_sep, judged, cutoffs, max_bytes)
    with _teed(path) if once else suppress():
        try:
            return _read_run_once(path, fmt, options, evidence)
        except _ReadAgain:
            return _read_run_once(path, fmt, options._replace(cutoffs=None), evidence, plain=True)


def _read_run_once(path, fmt, options, evidence=False, plain=False):
    """The run a file holds, in ``fmt`` (auto; jsonl, trec: also MS MARCO and header files, or json)."""
    with _opened(path) as inp:
        fmt = _detect_format(inp) if fmt == "auto" else fmt
        if fmt == "jsonl":
            return _jsonl_run(inp, options, evidence=evidence)
        if fmt == "trec":
            if _msmarco_layout(inp):
                return _msmarco_run(inp, options)
            header = _header(inp)
            return _header_run(inp, header, options) if header else _trec_run(inp, options)
        return _json_run(inp, options, _parse_json(inp, "run") if plain else None)


_JSONL_TAGS = ("slices", "slice", "tags", "tag")


def read_slices(path: str) -> Slices:
    """Read query tags: a JSON object ``{qid: tag or [tags]}``, or JSONL rows
    ``{"query_id": ..., "slices": tag or [tags]}`` (also ``slice``, ``tags``, ``tag``)."""
    with _opened(path) as inp:
        if _detect_format(inp) == "jsonl":
            pairs = [(_row_id(row, _JSONL_QUERY, "query id", inp.source, lineno),
                      _row_field(row, _JSONL_TAGS, "slice", inp.source, lineno), lineno)
                     for lineno, row in _jsonl_rows(inp)]
        else:
            data = _parse_json(inp, "slices", _MAX_SMALL_JSON)
            if not isinstance(data, dict):
                raise RagEvalError(f"expected a JSON object of query -> tag or [tags], got {_json_kind(data)}", inp.source)
            pairs = [(qid, tags, None) for qid, tags in data.items()]
    slices = {}  # qid -> its tags as dict keys: a tag given twice counts once, in linear time
    for qid, tags, lineno in pairs:
        tags = [tags] if isinstance(tags, str) else tags
        if not isinstance(tags, list) or not all(
                isinstance(tag, str) and tag.isprintable() and tag and ":" not in tag for tag in tags):
            raise RagEvalError(f"query {_clipped_repr(qid)}: a slice is a non-empty printable name without ':', "
                               "or a list of them", inp.source, lineno)
        slices.setdefault(qid, {}).update(dict.fromkeys(tags))
    return {qid: list(tags) for qid, tags in slices.items()}


def _slice_members(slices):
    """tag -> its queries, sorted."""
    members = {}
    for qid in sorted(slices):
        for tag in slices[qid]:
            members.setdefault(tag, []).append(qid)
    return dict(sorted(members.items()))


# === Judged generation scores ===
# An LLM judge's per-question scores become per-query columns ``judge.<metric>`` (docs/judged.md).

_JUDGE = "judge."  # a judged metric's key: judge.faithfulness; judge.-hallucination when lower is better
_MAX_JUDGE_MISSING = 0.1  # share of a metric's questions without a score (errors, NaN, no row) past which it is refused
_MIN_HUMAN_LABELS = 50  # human labels below this: the labels alone (at 50, PPI++ covers >= 93%: docs/judged.md)
_MIN_JUDGE_CORRELATION = 0.2  # judge-human correlation below this: the labels alone
# Scores in [0, 1] whose direction their tools document (docs/judged.md); any other needs --judged-direction.
_JUDGE_LOWER = frozenset("hallucination bias toxicity noise_sensitivity harmfulness maliciousness insensitivity "
                         "controversiality misogyny criminality".split())
_JUDGE_HIGHER = frozenset(
    "faithfulness answer_relevancy response_relevancy answer_relevance context_precision context_recall "
    "context_entity_recall context_relevance context_relevancy contextual_precision contextual_recall "
    "contextual_relevancy answer_correctness answer_similarity semantic_similarity factual_correctness "
    "response_groundedness groundedness answer_accuracy llm_context_precision_with_reference "
    "llm_context_precision_without_reference llm_context_recall non_llm_context_recall summarization "
    "correctness model_graded_fact model_graded_qa match includes exact f1 pass".split())


class JudgedScore(NamedTuple):
    """One judge's score of one question on one metric; ``score`` None when the judge failed."""

    id: str
    metric: str
    score: Optional[float]
    repeat: Optional[str] = None
    answer_sha256: Optional[str] = None
    contexts_sha256: Optional[str] = None
    line: Optional[int] = None


class JudgedRead(NamedTuple):
    """A reader's find: the scores, the judge's configuration the export records, and metric -> (direction or
    None, range or None) for what the tool documents."""

    scores: List[JudgedScore]
    judge: Dict[str, str]
    known: Dict[str, Tuple[Optional[str], Optional[Tuple[float, float]]]]
    source: str


def _judge_name(raw):
    """A metric's name in its key: lower case, other runs of characters one ``_`` ("Answer Relevancy" is
    answer_relevancy)."""
    name = re.sub(r"[^a-z0-9_.]+", "_", str(raw).lower()).strip("_.")
    if not name:
        raise RagEvalError(f"metric name {_clipped_repr(raw)} has no letter or digit")
    return name


def _digest(value):
    """sha256 of an answer or contexts as an export holds them (text as UTF-8, else canonical JSON)."""
    import hashlib

    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _score_value(value, what, source, line=None):
    """A score as a float; None (missing) for null, NaN or an empty cell; Inspect's C/P/I/N are 1/0.5/0/0."""
    if isinstance(value, str):
        value = value.strip()
        if value.lower() in ("", "nan", "none", "null"):
            return None
        number = {"C": 1.0, "P": 0.5, "I": 0.0, "N": 0.0}.get(value, _finite_number(value))
        if number is None:
            raise RagEvalError(f"{what}: score {_clipped_repr(value)} is not a number", source, line)
        return number
    if value is None or isinstance(value, float) and math.isnan(value):
        return None
    if not _is_finite(value) and not isinstance(value, bool):
        raise RagEvalError(f"{what}: score {_clipped_repr(value)} is not a finite number", source, line)
    return float(value)


def _judged_key(row, field, source, line=None, why=""):
    """A row's question id, from the documented field or --judged-id (a dotted path)."""
    if field is None:
        raise RagEvalError(f"this export has no question id ({why}): name the field that holds one with "
                           "--judged-id FIELD", source)
    value = row
    for part in ([field] if field in row else field.split(".")):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None or isinstance(value, (dict, list, bool)):
        raise RagEvalError(f"no id in field {_clipped_repr(field)}", source, line)
    return str(value)


def _neutral_rows(rows, source, field):
    """The neutral JSONL (docs/judged.md)."""
    found = []
    for line, row in rows:
        qid, metric = (_row_id(row, (name,), name, source, line) for name in ("id", "metric"))
        repeat = row.get("repeat")
        if repeat is not None and type(repeat) not in (int, str):  # JSON's types: a bool is not a repeat
            raise RagEvalError(f"repeat must be an integer or a string, got {_json_kind(repeat)}", source, line)
        digests = [row.get(name) for name in ("answer_sha256", "contexts_sha256")]
        if not all(d is None or isinstance(d, str) and re.fullmatch("[0-9a-f]{64}", d) for d in digests):
            raise RagEvalError("answer_sha256 and contexts_sha256 must be 64 lower-case hex digits", source, line)
        score = None if row.get("error") else _score_value(row.get("score"), metric, source, line)
        found.append(JudgedScore(qid, metric, score, None if repeat is None else str(repeat), *digests, line))
    return found, {}, {}


def _deepeval_rows(data, source, field):
    """DeepEval's ``test_run_*.json``, by case ``name``; the direction from its success and threshold."""
    found, models, sides = [], set(), {}
    for case in data["testCases"]:
        qid = _judged_key(case, field or "name", source)
        answer, contexts = _digest(case.get("actualOutput")), _digest(case.get("retrievalContext"))
        for metric in case.get("metricsData") or []:
            name = str(metric["name"])
            models.add(str(metric.get("evaluationModel")))
            score = None if metric.get("error") else _score_value(metric.get("score"), name, source)
            threshold = metric.get("threshold")
            if score is not None and _is_finite(threshold) and score != threshold and "success" in metric:
                way = "higher" if metric["success"] == (score > threshold) else "lower"
                sides.setdefault(_judge_name(name), set()).add(way)
            found.append(JudgedScore(qid, name, score, None, answer, contexts))
    known = {name: ("lower" if name in _JUDGE_LOWER else "higher", (0.0, 1.0))
             for name in (_judge_name(s.metric) for s in found)}
    known.update((name, (way.pop(), (0.0, 1.0))) for name, way in sides.items() if len(way) == 1)
    return found, {"tool": "deepeval", "model": ", ".join(sorted(models))}, known


def _table_rows(rows, source, field, tool, metrics, why="", texts=((), ()), rename=lambda name: name):
    """Rows of one column per metric; ``texts``: the answer's and the contexts' columns."""
    found = []
    for line, row in rows:
        qid = _judged_key(row, field, source, line, why)
        sha = [_digest(next((row[name] for name in names if name in row), None)) for names in texts]
        found += [JudgedScore(qid, rename(name), _score_value(row.get(name), name, source, line), None, *sha, line)
                  for name in metrics]
    return found, {"tool": tool}, {}


def _ragas_rows(rows, source, field):
    """Ragas' ``to_pandas()`` (CSV or records): its numeric columns are the metrics; no id of its own."""
    def number(value):  # a metric's cell: True a number, None empty (NaN, null), False text
        text = value.strip() if isinstance(value, str) else value
        if text is None or isinstance(text, str) and text.lower() in ("", "nan", "none", "null"):
            return None
        return _finite_number(text) is not None if isinstance(text, str) else type(text) in (int, float)

    cells = {name: [number(row.get(name)) for _, row in rows] for name in rows[0][1] if name != field}
    names = [name for name, kinds in cells.items()
             if False not in kinds and (True in kinds or name in _JUDGE_HIGHER | _JUDGE_LOWER)]  # all NaN: missing
    return _table_rows(rows, source, field, "ragas", names, "Ragas writes none",
                       (("response", "answer"), ("retrieved_contexts", "contexts")))


def _langsmith_rows(rows, source, field):
    """LangSmith's ``get_test_results()``: ``feedback.<key>`` columns, by ``example_id``."""
    columns = rows[0][1]
    outputs = tuple(name for name in columns if name.startswith("outputs."))
    return _table_rows(rows, source, field or "example_id", "langsmith", [n for n in columns if n[:9] == "feedback."],
                       texts=(outputs, ()), rename=lambda name: name[9:])


def _trulens_rows(rows, source, field):
    """TruLens' records: a feedback column (in [0, 1]) beside each ``<name>_calls``; no stable id."""
    names = [name for name in rows[0][1] if f"{name}_calls" in rows[0][1]]
    found, judge, _ = _table_rows(rows, source, field, "trulens", names, "its record_id changes every run",
                                  (("output",), ()))
    return found, judge, {_judge_name(name): (None, (0.0, 1.0)) for name in names}


def _promptfoo_rows(data, source, field):
    """promptfoo's ``results.json``: score, success and namedScores per row; a variable is the id."""
    rows = data["results"]["results"] if isinstance(data["results"], dict) else data["results"]
    if len({row.get("promptIdx") for row in rows}) > 1:
        raise RagEvalError("holds several prompts or providers: gate one per file", source)
    found = []
    for row in rows:
        qid = _judged_key(row.get("vars") or row["testCase"].get("vars") or {}, field, source, why="rows are positions")
        scores = {"score": row.get("score"), "pass": row.get("success"), **(row.get("namedScores") or {})}
        found += [JudgedScore(qid, name, None if row.get("error") else _score_value(value, name, source), None,
                              _digest((row.get("response") or {}).get("output"))) for name, value in scores.items()]
    return found, {"tool": "promptfoo"}, {"score": ("higher", None)}


def _inspect_rows(samples, source, field, header):
    """Inspect's samples: each scorer's value (an object: a metric per key), by ``id``, epochs repeats."""
    found = []
    for sample in samples:
        qid = _judged_key(sample, field or "id", source)
        answer = _digest((sample.get("output") or {}).get("completion"))
        for scorer, score in (sample.get("scores") or {None: None}).items():  # None: missing
            values = score.get("value") if isinstance(score, dict) else None
            values = values if isinstance(values, dict) else {scorer: values}
            found += [JudgedScore(qid, name, None if sample.get("error") else _score_value(v, name, source),
                                  str(sample.get("epoch", 1)), answer) for name, v in values.items()]
    spec = header.get("eval") or {}
    return found, {"tool": "inspect", "task": str(spec.get("task")), "model": str(spec.get("model"))}, {}


def _openai_evals_rows(rows, source, field):
    """OpenAI evals' record: ``match``, ``metrics`` events by ``sample_id``; the answer: its first ``sampling``."""
    found, spec, answers = [], {}, {}
    for line, row in rows:
        spec, data, kind = row.get("spec", spec), row.get("data"), row.get("type")
        if kind == "sampling" and isinstance(data, dict):
            answers.setdefault(_judged_key(row, field or "sample_id", source, line), _digest(data.get("sampled")))
        scores = {"match": data.get("correct")} if kind == "match" else data if kind == "metrics" else {
            None: None} if kind == "sampling" else {}  # None: missing until scored
        found += [JudgedScore(_judged_key(row, field or "sample_id", source, line), name,
                              _score_value(value, name, source, line), line=line) for name, value in scores.items()]
    found = [s._replace(answer_sha256=answers.get(s.id)) for s in found]
    return found, {"tool": "openai-evals", "model": ", ".join(map(str, spec.get("completion_fns") or []))}, {}


def _first_keys(content):
    return set(content[0][1]) if isinstance(content, list) and content else set()


def _is_object(content, *keys):
    return isinstance(content, dict) and all(key in content for key in keys)


# Every export this tier reads (join keys: each reader's docstring, docs/judged.md), detected from its content (its
# kind: JSONL rows, a JSON document, "rows" of a CSV or of JSON records, or a zip's JSON members); the first that
# fits reads the file, returning JudgedRead's scores, judge and known.
_JUDGE_FORMATS = (
    ("neutral JSONL", "jsonl", lambda c: {"id", "metric"} <= _first_keys(c), _neutral_rows),
    ("OpenAI evals", "jsonl", lambda c: bool({"spec", "sample_id"} & _first_keys(c)), _openai_evals_rows),
    ("DeepEval test run", "json", lambda c: _is_object(c, "testCases"), _deepeval_rows),
    ("promptfoo results", "json", lambda c: _is_object(c, "evalId", "results"), _promptfoo_rows),
    ("Inspect log", "json", lambda c: _is_object(c, "eval", "samples"),
     lambda c, s, f: _inspect_rows(c["samples"], s, f, c)),
    ("Inspect .eval", "zip", lambda c: any(name.startswith("samples/") for name in c),
     lambda c, s, f: _inspect_rows([v for k, v in sorted(c.items()) if k.startswith("samples/")], s, f,
                                   c.get("header.json") or c.get("_journal/start.json") or c.get("start.json") or {})),
    ("LangSmith results", "rows", lambda c: "example_id" in _first_keys(c), _langsmith_rows),
    ("TruLens records", "rows", lambda c: "record_id" in _first_keys(c), _trulens_rows),
    ("Ragas to_pandas()", "rows", lambda c: bool({"user_input", "question"} & _first_keys(c)), _ragas_rows),
)


_NAN_JSON = json.JSONDecoder(object_pairs_hook=_unique_keys)  # a judge's NaN (Python writes it) is a missing score


def _judged_content(path):
    """(source, kind, content): a zip's JSON members, JSONL rows, a JSON document, or rows (records, CSV)."""
    with _opened(path) as inp:
        data = inp.head + b"".join(iter(lambda: _read_block(inp.rest, inp.source), b""))
        source = inp.source
    if len(data) > _MAX_JSON:
        raise _too_large(source, _MAX_JSON)
    if data[:4] == b"PK\x03\x04":  # Inspect's .eval
        import zipfile

        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                names = [name for name in archive.namelist() if name.endswith(".json")]
                if sum(archive.getinfo(name).file_size for name in names) > _MAX_JSON:
                    raise _too_large(source, _MAX_JSON)
                return source, "zip", {name: _decode_json(archive.read(name).decode("utf-8"), source, 1, name,
                                                          _NAN_JSON) for name in names}
        except (zipfile.BadZipFile, UnicodeDecodeError, OSError, EOFError) as exc:
            raise RagEvalError(f"cannot read the zip: {_clip(str(exc))}", source) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RagEvalError(f"bytes that are not UTF-8 (byte 0x{data[exc.start]:02x})", source,
                           1 + data.count(b"\n", 0, exc.start)) from None
    filled = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not filled:
        raise RagEvalError("file is empty", source)
    first = filled[0][1].strip()
    if first[0] == "{" and first[-1] == "}":  # a JSONL row, or a one-line document
        rows = [(number, _decode_json(line, source, number, None, _NAN_JSON)) for number, line in filled]
        if all(isinstance(row, dict) for _, row in rows) and (len(rows) > 1 or "metric" in rows[0][1]):
            return source, "jsonl", rows
    if first[0] in "{[":
        document = _decode_json(text, source, 1, "judged scores", _NAN_JSON)
        if isinstance(document, list) and document and all(isinstance(row, dict) for row in document):
            return source, "rows", [(None, row) for row in document]
        return source, "json", document
    import csv

    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    if len(set(header)) < len(header):
        raise RagEvalError("a column name is repeated in the header", source, 1)
    return source, "rows", [(reader.line_num, dict(zip(header, row))) for row in reader if row]


def read_judged(path: str, id_field: Optional[str] = None) -> JudgedRead:
    """An LLM judge's per-question scores from a file of any shape of _JUDGE_FORMATS, detected from its content.

    ``id_field`` names the field that holds a question's stable id where the format has none (Ragas, TruLens,
    promptfoo's variables), or replaces the documented one.  An unknown shape is refused, naming the known.
    """
    source, kind, content = _judged_content(path)
    for name, kinds, fits, read in _JUDGE_FORMATS:
        if kinds == kind and fits(content):
            try:
                found = JudgedRead(*read(content, source, id_field), source)
            except (AttributeError, KeyError, TypeError, IndexError) as exc:
                raise RagEvalError(f"not the shape of a {name} ({type(exc).__name__} {_clip(str(exc))})", source) \
                    from None
            if not any(s.metric for s in found.scores):
                raise RagEvalError(f"a {name} with no score in it", source)
            return found
    known = ", ".join(name for name, *_ in _JUDGE_FORMATS)
    raise RagEvalError(f"not a judged-scores file this tool knows (expected {known}; see docs/judged.md)", source)


def judged_result(reads: Iterable[JudgedRead], directions: Optional[Mapping[str, str]] = None,
                  max_missing: float = _MAX_JUDGE_MISSING) -> dict:
    """Judged scores as evaluate() returns retrieval scores: ``mean`` and ``per_query`` under ``judge.<metric>``
    (``judge.-<metric>`` when lower is better: the gate sees its negative, so that a rise fails), and ``judge``:
    per metric its direction, range, questions, missing ones and flip rate; the answers' and contexts' digests;
    the judge's configuration (``provenance``).  Repeats, missing scores and what is refused: docs/judged.md."""
    directions = {_judge_name(name): way for name, way in (directions or {}).items()}
    cells: Dict[str, Dict[str, Dict[Optional[str], Optional[float]]]] = {}
    digests = {"answers": {}, "contexts": {}}
    known, judge, questions, sources = {}, {}, set(), []
    for read in reads:
        sources.append(read.source)
        known.update(read.known)
        judge.update(read.judge)
        for s in read.scores:  # metric None: a question scored on nothing (an error), missing
            slot = {} if s.metric is None else cells.setdefault(_judge_name(s.metric), {}).setdefault(s.id, {})
            if s.repeat in slot:
                raise RagEvalError(f"question {_clipped_repr(s.id)} scored twice on {_judge_name(s.metric)}" + (
                    f" in repeat {_clipped_repr(s.repeat)}" if s.repeat else " (repeats need a repeat number)"),
                    read.source, s.line)
            slot[s.repeat] = s.score
            questions.add(s.id)
            for kind, value in (("answers", s.answer_sha256), ("contexts", s.contexts_sha256)):
                if value is not None and digests[kind].setdefault(s.id, value) != value:
                    raise RagEvalError(f"question {_clipped_repr(s.id)} has two {kind[:-1]} digests", read.source,
                                       s.line)
    source, per_query, metrics = ", ".join(sources), {}, {}
    for metric, by_question in sorted(cells.items()):
        way, span = known.get(metric, (None, None))
        if metric in _JUDGE_HIGHER | _JUDGE_LOWER:
            way, span = way or ("lower" if metric in _JUDGE_LOWER else "higher"), span or (0.0, 1.0)
        way = directions.get(metric, way)
        if way is None:
            raise RagEvalError(f"which way is better for judged metric {metric} is not known: say "
                               f"--judged-direction {metric}=higher (or =lower)", source)
        values = [v for slot in by_question.values() for v in slot.values() if v is not None]
        for value in values if span else ():
            if not span[0] <= value <= span[1]:
                raise RagEvalError(f"{metric}: score {value!r} outside its range [{span[0]:g}, {span[1]:g}]", source)
        scored = {qid: [v for v in slot.values() if v is not None] for qid, slot in by_question.items()}
        scored = {qid: repeats for qid, repeats in scored.items() if repeats}
        lost = sorted(questions - set(scored), key=_natural_order)
        if len(lost) > max_missing * len(questions):
            raise RagEvalError(f"{metric} has no score for {len(lost)} of {len(questions)} questions (judge errors, "
                               f"NaN or no row; first: {_clipped_repr(lost[0])}), past the share of {max_missing:g} "
                               "allowed (--max-judge-missing)", source)
        key, sign = (_JUDGE + "-" + metric, -1.0) if way == "lower" else (_JUDGE + metric, 1.0)
        for qid, repeats in scored.items():
            per_query.setdefault(qid, {})[key] = sign * math.fsum(repeats) / len(repeats) + 0.0  # + 0.0: no -0.0
        binary, several = all(v in (0.0, 1.0) for v in values), [vs for vs in scored.values() if len(vs) > 1]
        metrics[key] = {"direction": way, "range": list(span) if span else None, "questions": len(scored),
                        "missing": len(lost), "missing_ids": lost[:20], "repeats": max(map(len, by_question.values())),
                        "judge_errors": sum(v is None for slot in by_question.values() for v in slot.values()),
                        "flip_rate": sum(len(set(vs)) > 1 for vs in several) / len(several) if binary and several
                        else None}
    means = {key: _mean(values[key] for values in per_query.values() if key in values) for key in metrics}
    return {"k": [], "queries": len(questions), "unscored": [], "skipped": [], "missing": [], "dropped": [],
            "mean": means, "per_query": per_query, "ties": {}, "judged": {},
            "abstention": {"queries": 0, "abstained": [], "share": None}, "conventions": _Conventions()._asdict(),
            "judge": {"metrics": metrics, **digests, "provenance": judge}}


def _with_judged(result, judged):
    """A retrieval result with judged scores added as more per-query columns: one result, one gate, one verdict."""
    merged = dict(result, mean={**result["mean"], **judged["mean"]}, judge=judged["judge"],
                  per_query={qid: dict(values) for qid, values in result["per_query"].items()})
    for qid, values in judged["per_query"].items():
        merged["per_query"].setdefault(qid, {}).update(values)
    return merged


def _judge_changes(baseline, result):
    """How the judge's configuration differs from the baseline's (none when the baseline records no judge)."""
    before, after = (baseline.judge or {}).get("provenance"), result["judge"]["provenance"]
    if before is None:
        return []
    return [f"{key}: baseline {_clipped_repr(before.get(key))}, now {_clipped_repr(after.get(key))}"
            for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]


def _judge_check(gate_report, result, baseline, settings):
    """The judge's changes, the questions whose contexts changed (their deltas mix in retrieval changes) and the
    drift test of the anchors into the gate's report (docs/judged.md, "Judge drift inside the verdict")."""
    old, now = baseline.judge or {}, result["judge"]
    changes = _judge_changes(baseline, result)
    if changes:
        gate_report["judge_changes"] = changes
    answers, contexts = old.get("answers", {}), old.get("contexts", {})
    anchors = {qid for qid, sha in now["answers"].items() if answers.get(qid) == sha
               and len({contexts.get(qid), now["contexts"].get(qid)} - {None}) < 2}  # contexts where both give them
    changed = (qid for qid, sha in now["contexts"].items() if contexts.get(qid, sha) != sha)
    gate_report["contexts_changed"] = sorted(changed, key=_natural_order)
    tests, scores = {}, _per_query_by_metric(result)
    for key, entry in gate_report["metrics"].items():
        was, is_now = (baseline.per_query or {}).get(key) or {}, scores.get(key, {})
        deltas = [is_now[qid] - was[qid] for qid in sorted(anchors & set(was) & set(is_now))]
        if _is_judged_metric(key) and deltas:
            p, _ = sign_flip_test(deltas, settings.resamples, _random(f"rag_eval:{settings.seed}:drift:{key}"))
            shift = math.fsum(deltas) / len(deltas)
            tests[key] = {"anchors": len(deltas), "shift": shift, "p_value": p,
                          "share_of_delta": shift / entry["delta"] if entry.get("delta") else None}
    for key, p in _holm({key: test["p_value"] for key, test in tests.items()}).items():
        tests[key].update(p_holm=p, drifted=p < settings.alpha)
        if p < settings.alpha and gate_report["metrics"][key]["verdict"] != "missing":
            gate_report["metrics"][key].update(verdict="inconclusive", reason="judge drift")
    gate_report["judge_drift"] = tests


def _read_human_labels(path):
    """Human labels, JSONL ``{"id", "metric", "label", "baseline_label"?}``, on the judge's scale: a random
    subset of the questions, labelled on the answer scored now (and on the baseline's, for the delta)."""
    found, seen = [], set()
    with _opened(path) as inp:
        for line, row in _jsonl_rows(inp):
            qid, metric = (_row_id(row, (name,), name, inp.source, line) for name in ("id", "metric"))
            label, old = (_score_value(row.get(name), metric, inp.source, line) for name in ("label", "baseline_label"))
            if label is None or (qid, _judge_name(metric)) in seen:
                raise RagEvalError(f"question {_clipped_repr(qid)}: " + ("a second label" if label is not None else
                                   "a label must be a number"), inp.source, line)
            seen.add((qid, _judge_name(metric)))
            found.append((qid, metric, label, old))
    return found


def _covariance(a, b):
    mean_a, mean_b = _mean(a), _mean(b)
    return math.fsum((x - mean_a) * (y - mean_b) for x, y in zip(a, b)) / (len(a) - 1)


def _ppi_mean(labels, judged):
    """The prediction-powered mean (PPI++, Angelopoulos, Duchi & Zrnic 2023) of what people would say: human
    ``labels`` of a random subset of the questions, and the judge's scores of all of them (``judged``).  The
    estimator, its power-tuning weight lambda in [0, 1] and when the labels alone are used: docs/judged.md."""
    ids = sorted(qid for qid in labels if qid in judged)
    y, f = [labels[qid] for qid in ids], [judged[qid] for qid in ids]
    rest = [value for qid, value in judged.items() if qid not in labels]
    n, others, spreads = len(y), len(rest), [_standard_deviation(y), _standard_deviation(f)]
    covariance = _covariance(y, f) if all(spreads) else None
    correlation = covariance / (spreads[0] * spreads[1]) if all(spreads) else None
    entry = {"labels": n, "questions": len(judged), "correlation": correlation, "method": "ppi++", "lambda": 0.0,
             "estimate": _mean(y), "interval": None, "effective_labels": None}
    why = (f"fewer than {_MIN_HUMAN_LABELS} labels" if n < _MIN_HUMAN_LABELS else "the judge is too weakly correlated"
           if correlation is None or correlation < _MIN_JUDGE_CORRELATION else "every question is labelled"
           if others < 2 else "")
    if why:
        entry["method"] = f"labels alone ({why})"
    else:
        entry["lambda"] = min(max(covariance / ((1 + n / others) * _standard_deviation(f + rest) ** 2), 0.0), 1.0)
    if n < 2:
        return entry
    weight = entry["lambda"]
    residual = [a - weight * b for a, b in zip(y, f)]
    entry["estimate"] = (weight * _mean(rest) if weight else 0.0) + _mean(residual)
    var = (weight ** 2 * _standard_deviation(rest) ** 2 / others if weight else 0.0) + \
        (_standard_deviation(residual) ** 2) / n
    z, df = _normal_quantile((1 + _CONFIDENCE) / 2), n - 1
    half = (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)) * math.sqrt(var)
    entry["interval"] = list(_clopper_pearson(int(sum(y)), n)) if not weight and set(y) <= {0.0, 1.0} \
        else [entry["estimate"] - half, entry["estimate"] + half]  # labels alone, pass/fail: exact, never [1, 1]
    entry["effective_labels"] = spreads[0] ** 2 / var if var else None
    return entry


def _human_report(labels, result, baseline):
    """Per judged metric with human labels: the prediction-powered mean now and, with the baseline's scores and
    labels of its answers (``baseline_label``), the paired prediction-powered delta (see _ppi_mean)."""
    keys = {key[len(_JUDGE):].lstrip("-"): key for key in result["judge"]["metrics"]}
    scores, found = _per_query_by_metric(result), {}
    for qid, metric, label, old in labels:
        key = keys.get(_judge_name(metric))
        if key is None:
            raise RagEvalError(f"names metric {_clipped_repr(metric)}, which no judged score has", "labels")
        sign = -1.0 if key.startswith(_JUDGE + "-") else 1.0
        now, delta = found.setdefault(key, ({}, {}))
        now[qid] = sign * label
        if old is not None:
            delta[qid] = sign * (label - old)
    report = {}
    for key, (now, delta) in sorted(found.items()):
        report[key] = {"mean": _ppi_mean(now, scores.get(key, {}))}
        before = (baseline.per_query or {}).get(key) if baseline is not None else None
        if before and delta:
            deltas = {qid: value - before[qid] for qid, value in scores[key].items() if qid in before}
            report[key]["delta"] = _ppi_mean(delta, deltas)
    return report


def _is_judged_metric(key):
    return key.startswith(_JUDGE) and len(key) > len(_JUDGE) and key.isprintable() and ":" not in key


# === Reporting ===
# One report (a dict, the JSON format itself) is built once; each format in
# FORMATTERS renders it.


def build_report(result: dict, *, gate_report: Optional[dict] = None, intervals: Optional[dict] = None,
                 slices: Optional[Slices] = None, per_query: bool = False,
                 baseline_per_query: Optional[Dict[str, Dict[str, float]]] = None) -> dict:
    """The report of a run: mean, unscored and the counts, the verdict (UNGATED without a gate), and what
    the options asked for."""
    report = {key: result[key] for key in "abstention dropped k queries skipped missing ties unscored".split()}
    report["verdict"] = UNGATED if gate_report is None else gate_report["verdict"]
    report["mean"] = dict(result["mean"])
    if "conventions" in result:
        report["gain"] = result["conventions"]["gain"]
    if per_query:
        report["per_query"] = _per_query_full_names(result)
        if baseline_per_query:  # metric -> qid -> value, for the metrics of this report
            report["per_query_baseline"] = {metric: dict(sorted(scores.items())) for metric, scores in
                                            sorted(baseline_per_query.items()) if metric in result["mean"]}
    if gate_report is not None:
        report["gate"] = gate_report
    if intervals is not None:
        report["intervals"] = {metric: list(pair) for metric, pair in intervals.items()}
    if slices is not None:
        report["slices"] = _slice_report(result, slices)
    if "judge" in result:
        report["judge"] = {key: result["judge"][key] for key in ("metrics", "provenance")}
    return report


def _per_query_full_names(result):
    k = result["k"]
    return {qid: dict(sorted((key if isinstance(k, list) or key.startswith(_JUDGE) else format_metric(key, k), value)
                             for key, value in values.items()))
            for qid, values in sorted(result["per_query"].items()) if values}


def _slice_report(result, slices):
    """Per slice: how many of its queries were scored, and their means."""
    scores = _per_query_by_metric(result)
    report = {}
    for tag, queries in _slice_members(slices).items():
        scored = [qid for qid in queries if qid in result["per_query"]]
        report[tag] = {"queries": len(scored),
                       "mean": {metric: _mean(values[qid] for qid in scored if qid in values)
                                for metric, values in scores.items()}}
    return report


def _format_json(report, digits, text=""):
    """The report as one JSON object (or its ``text``), keys sorted, every number exact (the shortest repr):
    scripts compare them, so ``digits`` is for the formats people read."""
    return _neutralise_workflow_commands(text or json.dumps(report, sort_keys=True, indent=2), "json") + "\n"


def _format_number(value, digits, missing="-"):
    if value is None:
        return missing
    if isinstance(value, float):
        return f"{round(value, digits) + 0.0:.{digits}f}"  # + 0.0 turns -0.0 into 0.0
    return str(value)


def _plural(number, one, many):
    return f"{number} {one if number == 1 else many}"


def _metric_order(key):
    """Metrics in the measure table's order, then by cutoff as a number (mrr@5 before mrr@10); slices after."""
    tag, _, metric = key.rpartition(":")
    try:
        name, k = parse_metric(metric)
    except RagEvalError:
        return (tag, 1, len(MEASURES), 0, metric)
    level = name.startswith(_DOC_LEVEL)  # evidence first, then its documents
    return (tag, level, _measure_place(name), k, "")


def _natural_order(text):
    """Ids as people read them: q2 before q10 (runs of ASCII digits compare as numbers, ties by the text).
    A number is compared by its length, then its digits, once its leading zeros go: no int() of any length."""
    return (tuple((0, len(run.lstrip("0")), run.lstrip("0")) if "0" <= run[0] <= "9" else (1, 0, run)
                  for run in re.findall("[0-9]+|[^0-9]", text + "\0")), text)


def _verdict_cell(entry, floor):
    """What the gate said of one metric; a failure (of the tolerance or the floor) is what it says first."""
    verdicts = [entry.get("verdict")] if entry else []
    if entry and entry.get("verdict") == "inconclusive" and (entry.get("reason") or entry.get("queries_needed")):
        verdicts = [f"inconclusive ({entry.get('reason') or '~%d queries would resolve it' % entry['queries_needed']})"]
    if floor is not None:
        verdicts.append("floor met" if floor["verdict"] == "pass" else f"below floor {floor['min']:g}")
    failing = [v for v in verdicts if v in ("missing", "regression") or (v or "").startswith("below floor")]
    return "; ".join(failing or [v for v in verdicts if v])


def _metric_rows(report, digits, missing="-"):
    """Header and one row per metric (and gated slice): the table, markdown and csv summaries."""
    gate = report.get("gate", {})
    gate_entries, floors, not_gated = gate.get("metrics", {}), gate.get("floors", {}), gate.get("not_gated", ())
    intervals = report.get("intervals")
    gated = bool(gate_entries or floors)
    paired = any("improved" in entry for entry in gate_entries.values())
    header = ["metric", "mean"] + (["95% low", "95% high"] if intervals is not None else [])
    if gated:
        header += ["baseline", "delta"]
        header += ["delta low", "delta high", "effect", "better/worse/same"] if paired else []
        header += ["allowed drop", "p (adj.)", "verdict"]
    rows = [header]
    for metric in sorted(set(report["mean"]) | set(gate_entries) | set(floors) | set(not_gated), key=_metric_order):
        entry = gate_entries.get(metric) or ({"verdict": "not gated"} if metric in not_gated else {})
        cells = [report["mean"].get(metric, gate_entries.get(metric, floors.get(metric, {})).get("now"))]
        cells += list(intervals.get(metric, (None, None))) if intervals is not None else []
        if gated:
            cells += [entry.get("baseline"), entry.get("delta")]
            if paired:
                cells += list(entry.get("interval") or (None, None)) + [entry.get("effect_size"), (
                    f"{entry['improved']}/{entry['worse']}/{entry['same']}" if "improved" in entry else None)]
            cells += [entry.get("allowed_drop"), entry.get("p_adjusted"),
                      _verdict_cell(entry, floors.get(metric)) or None]
        rows.append([metric] + [_format_number(cell, digits, missing) for cell in cells])
    return rows


def _slice_rows(report, digits):
    metrics = sorted(report["mean"], key=_metric_order)
    rows = [["slice", "queries"] + metrics]
    for tag, entry in sorted(report["slices"].items(), key=lambda item: _natural_order(item[0])):
        rows.append([tag, str(entry["queries"])] + [_format_number(entry["mean"].get(m), digits) for m in metrics])
    return rows


def _per_query_rows(report, digits):
    """One row per query; with a baseline's per-query scores, one row per (query, metric)."""
    table = report["per_query"]
    metrics = sorted(report["mean"], key=_metric_order)
    queries = sorted(table, key=_natural_order)
    before = report.get("per_query_baseline")
    if not before:
        return [["query"] + metrics] + [[qid] + [_format_number(table[qid].get(m), digits) for m in metrics]
                                        for qid in queries]
    rows = [["query", "metric", "baseline", "now", "delta"]]
    for qid in queries:
        for metric in metrics:
            was, now = before.get(metric, {}).get(qid), table[qid].get(metric)
            delta = None if was is None or now is None else now - was
            rows.append([qid, metric] + [_format_number(number, digits) for number in (was, now, delta)])
    return rows


def _one_line(text):
    """An id as the human formats show it: a line break or other control character escaped, so that an id
    can neither split a table row nor start a markdown line of its own."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _drop_lines(report, digits, quoted):
    """Per failing metric: how many queries got worse and the largest drops."""
    lines, entries = [], report.get("gate", {}).get("metrics", {})
    for metric in sorted(entries, key=_metric_order):
        entry = entries[metric]
        if entry["verdict"] != "pass" and entry.get("largest_drops"):
            drops = ", ".join(f"{quoted(qid)} ({delta:+.{digits}f})" for qid, delta in entry["largest_drops"])
            hits = f"; hit to miss: {len(entry['hit_to_miss'])}" if entry["hit_to_miss"] else ""
            lines.append(f"{_metric_name(metric, quoted)}: {_plural(entry['worse'], 'query', 'queries')} worse, "
                         f"{entry['improved']} better; largest drops {drops}{hits}")
    return lines


def _aligned(rows):
    rows = [[_one_line(cell) for cell in row] for row in rows]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _verdict_word(failed, undecided):
    """FAIL and what failed, else INCONCLUSIVE and what is undecided, else PASS."""
    if failed:
        return f"FAIL ({len(failed)}: {', '.join(failed)})"
    return f"INCONCLUSIVE ({len(undecided)}: {', '.join(undecided)})" if undecided else "PASS"


def _verdict_line(report, quoted):
    """What the gate said, or how many queries were scored; ``quoted`` shows a slice's name."""
    gate_report = report.get("gate")
    missing = len(report.get("missing", ()))
    scored = _plural(report["queries"], "query", "queries") + " scored" + (
        f" (the run has no results for {missing})" if missing else "")
    if gate_report is None:
        return f"UNGATED (no baseline or floor), {scored}"
    failed = sorted({key for part in ("metrics", "floors") for key, entry in gate_report[part].items()
                     if entry["verdict"] in _FAILED}, key=_metric_order)
    undecided = sorted((key for key, entry in gate_report["metrics"].items() if entry["verdict"] == "inconclusive"),
                       key=_metric_order)
    named = ([_metric_name(key, quoted) for key in keys] for keys in (failed, undecided))
    drift = ", judge drift" if any(t["drifted"] for t in gate_report.get("judge_drift", {}).values()) else ""
    return f"{_verdict_word(*named)}{drift}, rule '{gate_report['rule']}', {scored}"


def _gate_caption(gate_report):
    """What the paired columns are, and whether the rule reads them."""
    paired = [entry for entry in ((gate_report or {}).get("metrics") or {}).values() if "tests" in entry]
    if not paired:
        return ""
    p_family = f"p (adj.; against no change, {gate_report['adjust']} over {_plural(len(paired), 'test', 'tests')})"
    if gate_report["rule"] == "drop":
        return f"rule 'drop' reads the means alone: delta low/high and {p_family} are information it does not use"
    return (f"delta low: the {1 - gate_report['alpha']:.0%} bound a pass reads; delta high: the bound a regression "
            f"reads, adjusted over {_plural(paired[0]['tests'], 'test', 'tests')}; {p_family} is not read by the rule")


def _calibration_text(report, markdown):
    """--calibrate: a line per scenario, each rate with its Monte Carlo standard error; a list in markdown."""
    found = (report.get("gate") or {}).get("calibration")
    if not found:
        return ""
    paired = "its score now, as a rerun" if found["pairs"] == "rerun" else "a random query"
    what = (f"{found['simulations']} simulations per scenario on {found['queries']} queries, each paired with "
            f"{paired}, rule '{found['rule']}', alpha {found['alpha']:g}")
    lines, roles = [], {0.0: "false fails = regression", 1.0: "regression and pass both wrong"}
    for name, outcome in found["scenarios"].items():
        shown = ", ".join(f"{kind} {outcome[kind]['rate']:.1%} (se {outcome[kind]['se']:.1%})"
                          for kind in ("regression", "inconclusive", "pass"))
        lines.append(f"{name} ({roles.get(outcome['planted_drop'], 'power = regression')}): {shown}")
    if markdown:
        return "\n".join([f"Calibration: {what}:", ""] + [f"- {line}" for line in lines])
    return "\n".join([f"calibration: {what}"] + [f"  {line}" for line in lines])


def _gain_line(report):
    """Which nDCG a report shows, when it shows one: other tools' default differs from ours."""
    if not any(key.rpartition(":")[2].split("@")[0] in ("ndcg", "doc.ndcg") for key in report["mean"]):
        return ""
    return ("nDCG gain: exp, 2**grade - 1 (BEIR, MTEB, ir_measures and ranx report linear: --gain linear)"
            if report.get("gain", "exp") == "exp" else "nDCG gain: linear, the grade (as BEIR, MTEB, ir_measures, ranx)")


def _format_table(report, digits, markdown=False):
    """The report for people; with ``markdown``, ready to paste into a pull-request comment or a step summary."""
    def table(rows, inputs):
        return _markdown_table(rows, inputs) if markdown else _aligned(rows)

    quoted = _markdown_input if markdown else _one_line
    heading = _verdict_line(report, quoted) + _gate_context_text(report.get("gate"), digits, quoted)
    parts = ["### rag_eval: " + heading if markdown else heading,
             table(_metric_rows(report, digits), {0: _markdown_metric}), _gate_caption(report.get("gate")),
             _gain_line(report)]
    drops = _drop_lines(report, digits, quoted)
    if markdown:
        parts += [f"**{metric}**: {rest}" for metric, _, rest in (line.partition(": ") for line in drops)]
    else:
        parts.append("\n".join(drops))
    parts.append(_calibration_text(report, markdown))
    abstention = report["abstention"]
    if abstention["queries"]:
        parts.append(("Abstention" if markdown else "abstention") + f": {len(abstention['abstained'])} of "
                     f"{abstention['queries']} unanswerable queries got no answer ({abstention['share']:.0%})")
    if report.get("slices"):
        parts.append(table(_slice_rows(report, digits), {0: _markdown_input}))
    if "per_query" in report:
        rows = table(_per_query_rows(report, digits), {0: _markdown_input})
        parts.append(f"<details><summary>Per query</summary>\n\n{rows}\n\n</details>" if markdown else rows)
    return _neutralise_workflow_commands("\n\n".join(filter(None, parts))) + "\n"


def _markdown_text(text):
    """Text that markdown shows as written: a pull-request comment or a step summary renders HTML,
    so ``<``, ``>`` and ``&`` (in an id: ``<script>``) become entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _markdown_input(text):
    """Text from the inputs (a query id, a slice's or run's name, a --meta value) as markdown shows it: a code span,
    in which neither HTML nor markdown renders (no link, image, @mention or #reference), on one line."""
    return _code_span(_one_line(text))


def _metric_name(key, quoted):
    """A metric as a report names it, a slice's name (``billing`` of ``billing:recall@5``) shown by ``quoted``."""
    tag, colon, metric = key.rpartition(":")
    return quoted(tag) + colon + metric if colon else key


def _markdown_metric(key):
    return _metric_name(key, _markdown_input)


def _code_span(text):
    """``text`` as a markdown code span, where HTML shows as text: fenced by more backticks than it holds in a row
    (an id's own backtick cannot end the span), padded when it starts or ends with one."""
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text[:1] == "`" or text[-1:] == "`" else ""
    return fence + pad + text + pad + fence


def _markdown_table(rows, inputs):
    """A pipe table; the data cells of a column in ``inputs`` hold text from the inputs, shown by its function, the
    rest as text.  A ``|`` is escaped everywhere, in a code span too (GitHub's tables read ``\\|`` there as ``|``)."""
    def cells(row, inputs):
        shown = (inputs[column](cell) if column in inputs else _markdown_text(_one_line(cell))
                 for column, cell in enumerate(row))
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in shown) + " |"

    return "\n".join([cells(rows[0], {}), "|" + "---|" * len(rows[0])] + [cells(row, inputs) for row in rows[1:]])


def _format_csv(report, digits):
    """One row per metric; with per-query scores, one row per (query, metric)."""
    if "per_query" in report:
        rows = [["query", "metric", "value"]]
        for qid in sorted(report["per_query"], key=_natural_order):
            values = report["per_query"][qid]
            rows += [[qid, metric, _format_number(values[metric], digits)]
                     for metric in sorted(values, key=_metric_order)]
        abstained = set(report["abstention"]["abstained"])
        rows += [[qid, "abstention", "1" if qid in abstained else "0"] for qid in report["unscored"]]
        return _csv_text(rows)
    rows = _metric_rows(report, digits, missing="")
    shown = {row[0] for row in rows}
    blank = [""] * (len(rows[0]) - 2)
    for tag, entry in (report.get("slices") or {}).items():  # a slice's means, named as tolerances name them
        rows += [[f"{tag}:{metric}", _format_number(value, digits, "")] + blank
                 for metric, value in entry["mean"].items() if f"{tag}:{metric}" not in shown]
    share = report["abstention"]["share"]
    if share is not None:
        rows.append(["abstention", _format_number(share, digits)] + blank)
    return _csv_text(rows)


# A cell that a spreadsheet would run as a formula (OWASP's list); numbers such as -0.0123 stay numbers.
_FORMULA_START = ("=", "+", "-", "@")  # a tab or CR is escaped first (_one_line)


def _csv_text(rows):
    """CSV where a text cell that opens like a formula is prefixed with ', so that a spreadsheet shows it as text;
    cells as the table shows them, CRLF line ends (RFC 4180)."""
    import csv

    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(
        ["'" + cell if cell.startswith(_FORMULA_START) and _finite_number(cell) is None else cell
         for cell in map(_one_line, row)] for row in rows)
    return _neutralise_workflow_commands(out.getvalue()).replace("\n", "\r\n")


FORMATTERS: Dict[str, Callable[[dict, int], str]] = {
    "json": _format_json,
    "table": _format_table,
    "markdown": lambda report, digits: _format_table(report, digits, markdown=True),
    "csv": _format_csv,
}


def _regression_lines(gate_report):
    """The ``REGRESSION <metric>: baseline <was>, now <now>`` lines, one per failed metric or floor."""
    lines = []
    for part, against, key in (("metrics", "baseline", "baseline"), ("floors", "floor", "min")):
        for metric, entry in gate_report[part].items():
            if entry["verdict"] in _FAILED:
                now = "missing" if entry["now"] is None else f"{entry['now']:.4f}"
                lines.append(f"REGRESSION {metric}: {against} {entry[key]:.4f}, now {now}")
    return lines


def _junit_xml(report, inconclusive_fails=False):
    """JUnit XML, one test case per gated metric, slice and floor: GitLab, Jenkins and the rest read it.
    An inconclusive metric is ``<skipped>`` (neither passed nor failed), a ``<failure>`` when
    ``inconclusive_fails`` (``--inconclusive fail``, which exits 1 on it)."""
    from xml.etree.ElementTree import Element, SubElement, tostring

    gate_report = report.get("gate") or {"metrics": {}, "floors": {}}
    cases = [(key, entry["verdict"], f"baseline {_format_number(entry['baseline'], 4)}, now "
              f"{_format_number(entry['now'], 4)}, allowed drop {_format_number(entry['allowed_drop'], 4)}"
              + (f"; {_verdict_cell(entry, None)}" if entry["verdict"] == "inconclusive" else ""))
             for key, entry in gate_report["metrics"].items()]
    cases += [(f"floor {key}", entry["verdict"], f"floor {entry['min']:.4f}, now {_format_number(entry['now'], 4)}")
              for key, entry in gate_report["floors"].items()]
    cases += [(key, "not gated", "left out on purpose (--not-gated)") for key in gate_report.get("not_gated", ())]
    if not cases:  # nothing gated: one skipped case (never a pass), since CI systems reject an empty report
        scored = _plural(report["queries"], "query", "queries")
        cases = [("scored", UNGATED, f"{scored} scored, no baseline or floor to gate")]
    failing = _FAILED + (("inconclusive",) if inconclusive_fails else ())
    suites = Element("testsuites", name="rag_eval")
    suite = SubElement(suites, "testsuite", name="rag_eval")
    for key, verdict, detail in cases:
        case = SubElement(suite, "testcase", classname="rag_eval.gate", name=key)
        if verdict in failing:
            SubElement(case, "failure", message=f"{key}: {verdict}", type=verdict).text = detail
        elif verdict in ("inconclusive", UNGATED, "not gated"):
            SubElement(case, "skipped", message=f"{key}: {verdict}").text = detail
        else:
            SubElement(case, "system-out").text = f"{verdict}: {detail}"
    counts = {"tests": str(len(cases)), "failures": str(len(suite.findall("*/failure")))}
    suites.attrib.update(counts)
    suite.attrib.update(counts, errors="0", skipped=str(len(suite.findall("*/skipped"))))
    text = tostring(suites, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + _neutralise_workflow_commands(text, "xml") + "\n"


# --- Workflow commands: what a CI runner must not obey, and what it should ---
# What each runner docs/ci.md names obeys in a line a step prints (docs/ci.md cites the sources), as a pattern
# whose LAST character is escaped.  With control characters escaped, a line opens only after the tool's "\n".
_RUNNER_COMMANDS = (
    ("GitHub Actions", r"#\[|\n[^\S\x00-\x1f\x7f-\x9f\u2028\u2029]*:(?=:)"),  # "##[" anywhere; "::" opening a line
    ("Azure Pipelines", r"##vso\["),  # anywhere; its "##[group]" ... as GitHub's
    ("TeamCity", r"##teamcity\["),
    ("Buildkite", r"\n *(?:-(?=--(?: |$))|\+(?=\+\+(?: |$))|~(?=~~(?: |$))|\^(?=\^\^ \+\+\+))"),  # group lines
    # any log: control characters (GitLab's ESC[0K sections, Jenkins's ESC[8m notes, erasing lines), bidi controls
    ("any log", r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"),
)
# Two passes: the regex engine skips fast only to a pattern whose every branch opens with a literal.
_COMMAND, _CONTROL = (re.compile("|".join(pattern for _, pattern in _RUNNER_COMMANDS[:-1]), re.M),
                      re.compile(_RUNNER_COMMANDS[-1][1]))
_ESCAPES = {  # output style: a character escaped
    "text": lambda c: "\\" + c if c.isprintable() else _one_line(c),
    "json": lambda c: f"\\u{ord(c):04x}",
    "xml": lambda c: f"&#{ord(c)};" if ord(c) > 31 else _ESCAPES["text"](c),  # XML 1.0 holds no C0 control
}
_MAX_ANNOTATIONS = 10  # of each kind per step: GitHub shows no more than 10 errors and 10 warnings
_MAX_STEP_SUMMARY = 1000 * 1024  # bytes; GitHub refuses a step summary over 1 MiB


def _neutralise_workflow_commands(text, style="text"):
    r"""``text`` with no command of _RUNNER_COMMANDS and no raw control character, escaped in ``style``: ``json``
    and ``xml`` decode to the same text (but XML's C0 controls); ``text`` puts a backslash before the character
    or writes a control character as Python does (``\x1b``).

    >>> print(_neutralise_workflow_commands("b##[stop-commands]zz ##vso[task.setvariable]x"))
    b##\[stop-commands]zz ##vso\[task.setvariable]x
    >>> print(_neutralise_workflow_commands("ok\n  ::error::forged\n--- group\x1b[2K"))
    ok
      \::error::forged
    \--- group\x1b[2K
    >>> print(_neutralise_workflow_commands('{"id": "a##[notice]x"}', "json"))
    {"id": "a##\u005bnotice]x"}
    """
    def escaped(match):
        return match.group()[:-1] + _ESCAPES[style](match.group()[-1])

    return _CONTROL.sub(escaped, _COMMAND.sub(escaped, "\n" + text)[1:])


def annotation(kind: str, message: str, **properties) -> str:
    """One workflow command of rag_eval's own, ``::error title=rag_eval::message``, the message
    neutralised.  The data escapes %, CR and LF (GitHub's toolkit); a property also ':' and ','
    (the runner's UnescapeProperty); both are then neutralised, on one line."""
    def escaped(text):
        return _neutralise_workflow_commands(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))

    fields = [("title", "rag_eval")] + [(key, value) for key, value in properties.items() if value is not None]
    shown = ",".join(f"{key}=" + escaped(str(value)).replace(":", "%3A").replace(",", "%2C") for key, value in fields)
    return f"::{kind} {shown}::" + escaped(message)


def _annotations(kind, messages):
    """At most MAX_ANNOTATIONS of a kind; past that, the last one says how many more the step summary lists."""
    if len(messages) > _MAX_ANNOTATIONS:
        more = len(messages) - (_MAX_ANNOTATIONS - 1)
        messages = messages[:_MAX_ANNOTATIONS - 1] + [f"{more} more {kind}s: see the step summary"]
    return [annotation(kind, message) for message in messages]


_SUMMARY_LEGEND = ("delta = mean - baseline; a metric fails when it falls by more than its allowed drop "
                  "(--gate significant: when the fall is shown to; inconclusive: too few queries to tell)")


def _step_summary(report, digits, warnings, failures, markdown, meta):
    """The markdown report for a step summary or a pull-request comment, cut to fit GitHub's limit.  The failing
    lines, notes and warnings are the log's lines, each a code span: they name slices, runs, files and ids."""
    def listed(lines):
        return "\n".join("- " + _neutralise_workflow_commands(_markdown_input(line)) for line in lines)

    heading, _, rest = markdown(report, digits).partition("\n\n")
    parts = [heading, listed(failures), rest.rstrip("\n")]
    if "gate" in report:  # one run gated: the columns read first, a legend, the rest a click away
        rows = _metric_rows(report, digits)
        keep = [place for place, name in enumerate(rows[0])
                if name in ("metric", "mean", "baseline", "delta", "allowed drop", "verdict")]
        parts[2:] = [_SUMMARY_LEGEND, _neutralise_workflow_commands(_markdown_table(
                         [[row[place] for place in keep] for row in rows], {0: _markdown_metric})), _gain_line(report),
                     f"<details><summary>Every column, the largest drops</summary>\n\n{parts[2]}\n\n</details>"]
    if warnings:
        parts.append(f"<details><summary>Notes and warnings ({len(warnings)})</summary>\n\n"
                     f"{listed(warnings)}\n\n</details>")
    if meta:
        rows = [["key", "value"]] + [[key, value] for key, value in sorted(meta.items())]
        table = _markdown_table(rows, {0: _markdown_input, 1: _markdown_input})
        parts.append(_neutralise_workflow_commands(f"<details><summary>Provenance</summary>\n\n{table}\n\n</details>"))
    return _cut_markdown("\n\n".join(filter(None, parts)) + "\n", _MAX_STEP_SUMMARY)


def _cut_markdown(text, limit):
    """``text`` if its UTF-8 fits in ``limit`` bytes; else cut at a line, an open <details> closed, with a note."""
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return text
    kept = data[:limit - 400].decode("utf-8", "ignore").rpartition("\n")[0]
    # The tool's own tags open a line and close one; an id's (in a code span, in a table cell) does neither.
    opened = len(re.findall(r"^<details>", kept, re.M)) > len(re.findall(r"</details>$", kept, re.M))
    cut = text.count("\n") - kept.count("\n")
    return (kept + ("\n\n</details>" if opened else "") + f"\n\n*Cut here: {cut} more lines would pass GitHub's 1 MiB "
            "limit; --output writes every query's scores.*\n")


def _openmetrics_text(report):
    """--metrics-file: the means, and against a baseline the deltas, in OpenMetrics text format."""
    def family(name, what, samples):  # samples: (labels, value); a family of none is left out
        lines = [f"# TYPE {name} gauge", f"# HELP {name} {what}"] if samples else []
        for labels, value in samples:
            shown = ",".join(key + '="' + _CONTROL.sub(lambda match: _ESCAPES["text"](match.group()), text).replace(
                "\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"' for key, text in labels)
            lines.append(f"{name}{{{shown}}} {float(value)!r}" if labels else f"{name} {float(value)!r}")
        return lines

    def labels(key):
        tag, _, metric = key.rpartition(":")
        return [("metric", metric)] + ([("slice", tag)] if tag else [])

    lines = family("rag_eval_mean", "Mean of the measure over the scored queries.",
                   [([("metric", m)], v) for m, v in sorted(report["mean"].items())])
    lines += family("rag_eval_slice_mean", "Mean of the measure over the scored queries of a slice.",
                    [([("slice", tag), ("metric", m)], v) for tag, entry in sorted((report.get("slices") or {}).items())
                     for m, v in sorted(entry["mean"].items()) if v is not None])
    gate_report = report.get("gate")
    if gate_report is not None:
        entries = sorted(gate_report["metrics"].items())
        lines += family("rag_eval_baseline", "The baseline's mean of the measure.",
                        [(labels(key), e["baseline"]) for key, e in entries])
        lines += family("rag_eval_delta", "Mean now minus the baseline's mean.",
                        [(labels(key), e["delta"]) for key, e in entries if e["delta"] is not None])
        lines += family("rag_eval_passed", "1 when the gate passed, 0 when it did not (a regression, or inconclusive).",
                        [([], 1 if gate_report["passed"] else 0)])
    return "\n".join(lines + ["# EOF"]) + "\n"


def _gate_context_text(gate_report, digits, quoted=_one_line):
    """The lines under the verdict (each after a newline), or ""; ``quoted`` shows what comes from the inputs
    (meta keys and values, query ids, slices' names)."""
    gate_report = gate_report or {}
    lines = [f"not gated (--not-gated): {', '.join(gate_report['not_gated'])}"] if gate_report.get("not_gated") else []
    lines += [f"{what} changed since the baseline: " + "; ".join(map(quoted, gate_report[key]))
              for key, what in (("meta_changes", "provenance"), ("judge_changes", "judge")) if gate_report.get(key)]
    lines += [f"judge drift: {_metric_name(key, quoted)} moved {t['shift']:+.{digits}f} on {t['anchors']} unchanged "
              f"answers (p {t['p_holm']:.2g})" for key, t in gate_report.get("judge_drift", {}).items() if t["drifted"]]
    if gate_report.get("label_changes"):
        lines.append("labels changed since the baseline: " + _label_summary(gate_report["label_changes"], quoted))
    if gate_report.get("delta_split"):
        lines.append("delta = labels + system: " + "; ".join(
            f"{_metric_name(metric, quoted)} {e['total']:+.{digits}f} = {e['labels']:+.{digits}f} + "
            f"{e['system']:+.{digits}f}"
            for metric, e in gate_report["delta_split"].items()))
    return "".join("\n" + line for line in lines)


def _label_summary(changes, quoted, shown=5):
    """``label_changes`` in one line: the counts, then the first few changed queries (their ids shown by ``quoted``)."""
    counts, queries = changes["counts"], changes["queries"]
    if changes["stored"] == "judgments":
        text = (f"{_plural(counts['added'], 'judgment', 'judgments')} added, {counts['removed']} removed, "
                f"{counts['regraded']} regraded in {_plural(counts['queries_changed'], 'query', 'queries')}")
        each = [(qid, f"+{len(q['added'])} -{len(q['removed'])} ~{len(q['regraded'])}") for qid, q in queries.items()]
    else:
        text = f"{_plural(counts['queries_changed'], 'query', 'queries')} changed (stored as digests)"
        each = [(qid, f"{q['judged'][0]} -> {q['judged'][1]} judged") for qid, q in queries.items()]
    ordered = [f"{quoted(qid)} {change}"
               for qid, change in sorted(each, key=lambda pair: _natural_order(" ".join(pair)))]  # as the plain text sorts
    if ordered:
        text += " (" + ", ".join(ordered[:shown]) + (", ..." if len(ordered) > shown else "") + ")"
    if counts["queries_added"] or counts["queries_removed"]:
        text += f"; queries added {counts['queries_added']}, removed {counts['queries_removed']}"
    return text


# --- Reports of several runs: "comparison" and "runs" (docs/compare.md), in every format of FORMATTERS ---

_MARKS = {"best": "best", "indistinguishable": "~best", "": ""}  # ~best: not distinguishable from the best


def _format_comparison(report, digits, markdown=False):
    """The comparison for people; with ``markdown``, as _format_table does."""
    comparison, runs = report["comparison"], report["runs"]
    quoted = _markdown_input if markdown else _one_line
    scored = _plural(runs[0]["queries"], "query", "queries")
    verdict = f"{len(runs)} runs compared with {quoted(comparison['reference'])}, {scored} scored"
    gated = next((run["gate"] for run in runs if "gate" in run), None)  # one baseline and --meta for all
    if "passed" in report:
        failed, undecided = ([quoted(run["name"]) for run in runs if "gate" in run and run["gate"]["verdict"] == word]
                             for word in ("regression", "inconclusive"))
        verdict = f"{_verdict_word(failed, undecided)}, rule '{gated['rule']}', {verdict}"
    else:
        verdict = f"UNGATED (no baseline or floor), {verdict}"
    context = _gate_context_text(gated, digits, quoted).lstrip("\n")
    method = (context + ("\n" if context else "")
              + f"p adjusted over {_plural(comparison['family'], 'comparison', 'comparisons')}: maxt over the "
              f"{_plural(len(comparison['metrics']), 'metric', 'metrics')} of each candidate, times the "
              f"{_plural(len(comparison['order']) - 1, 'candidate', 'candidates')}; intervals 95%, not adjusted; "
              f"best: highest mean; ~best: p against the best (Holm over every run and metric) at least "
              f"{comparison['alpha']:g}")
    notes = []
    for run in runs:
        if "gate" in run and not run["gate"]["passed"]:
            notes.append(f"{quoted(run['name'])}: {_verdict_line(run, quoted)}")
            notes += [f"{quoted(run['name'])} {line}" for line in _drop_lines(run, digits, quoted)]
    rows = _comparison_rows(report, digits)
    if markdown:
        parts = ["### rag_eval: " + verdict, method, _markdown_table(rows, {0: _markdown_metric, 1: _markdown_input}),
                 _gain_line(runs[0]), "\n".join(f"- {line}" for line in notes)]
    else:
        parts = [verdict + "\n" + method, _aligned(rows), _gain_line(runs[0]), "\n".join(notes)]
    return _neutralise_workflow_commands("\n\n".join(filter(None, parts))) + "\n"


def _comparison_rows(report, digits, missing="-", raw=False):
    """Header and one row per (metric, run): the comparison in table, markdown and csv (``raw``)."""
    comparison = report["comparison"]
    gates = {run["name"]: run["gate"] for run in report["runs"] if "gate" in run}
    header = ["metric", "run", "mean", "delta", "95% low", "95% high", "better", "worse", "same"]
    header += ["p", f"p adjusted ({comparison['adjustment']})"] if raw else [f"p ({comparison['adjustment']})"]
    rows = [header + ["mark"] + (["verdict"] if gates else [])]
    for metric in sorted(comparison["metrics"], key=_metric_order):
        for name in comparison["order"]:
            entry, gated = comparison["metrics"][metric]["runs"][name], gates.get(name)
            numbers = [entry["mean"], entry.get("delta")] + list(entry.get("interval", (None, None)))
            numbers += [entry.get(key) for key in ("better", "worse", "same")]
            numbers += [entry.get(key) for key in (("p_value", "p_adjusted") if raw else ("p_adjusted",))]
            row = [metric, name] + [_format_number(number, digits, missing) for number in numbers]
            row.append(_MARKS[entry["mark"]] or ("" if raw else missing))
            if gates:
                row.append(gated and _verdict_cell(gated["metrics"].get(metric, {}), gated["floors"].get(metric))
                           or missing)
            rows.append(row)
    for metric in next((gate.get("not_gated", ()) for gate in gates.values()), ()):  # one baseline for all
        rows += [[metric, name] + [missing] * (len(rows[0]) - 3) + ["not gated"] for name in gates]
    return rows


_COMPARISON_FORMATTERS = {  # as FORMATTERS
    "json": _format_json,
    "table": _format_comparison,
    "markdown": lambda report, digits: _format_comparison(report, digits, markdown=True),
    "csv": lambda report, digits: _csv_text(_comparison_rows(report, digits, missing="", raw=True)),
}


def _explain():
    """Every measure's definition and its names in other tools, from the measure table."""
    tools = list(MEASURES[0].others)
    parts = []
    for m in MEASURES:
        names = "\n".join(f"    {tool:<12}{m.others[tool]}" for tool in tools)
        role = "reported by default" if m.default else f"reported with --measures {m.name}"
        spellings = ", ".join(f"{stem}k" for stem, name in _SPELLINGS.items() if name == m.name)
        spans = _SPAN_BY_NAME[m.name].definition if m.name in _SPAN_BY_NAME else f"documents only ({_DOC_LEVEL}{m.name}@k)"
        parts.append(f"{m.name}@k: {m.summary}\n  {m.definition}\n  ({role}; "
                     f"{'a good gate' if m.gate else 'not recommended as a gate'})\n  same number elsewhere:\n{names}"
                     f"\n  accepted spellings (any case): {spellings}\n  on evidence spans: {spans}")
    parts += [f"{m.name}@k (evidence spans only): {m.definition}" for m in _SPAN_MEASURES if m.name not in _BY_NAME]
    return "\n\n".join(parts + [_RULES, _SPAN_RULES]) + "\n"


# === Command line ===


# Option parsers: each turns one option's text into a value or raises
# RagEvalError saying what was expected; the parser adds the option's name.


def _finite_number(text):
    """A finite number in ASCII digits, else None (float() would take '0_02', 'nan', 'inf' and '٠.١')."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if text.isascii() and "_" not in text and math.isfinite(value) else None


def _cutoffs_arg(text):
    parts = [_ascii_int(part.strip()) for part in text.split(",")]
    if not all(parts):  # None, or 0
        raise RagEvalError(f"expected positive integers such as 5 or 1,3,10, got {_clipped_repr(text)}")
    return parts  # _run sorts the cutoffs of every --k together, each once


def _tolerance_arg(text):
    """``0.02``, ``5%`` (every metric) or ``ndcg@10=0.01``, ``recall@5=5%`` (one metric)."""
    metric, sep, amount = text.rpartition("=")
    if sep and not metric:
        raise RagEvalError(f"expected METRIC=X or X, got {_clipped_repr(text)}")
    relative = amount.endswith("%")
    value = _finite_number(amount.removesuffix("%"))
    if value is None or value < 0:
        raise RagEvalError(f"expected a finite number >= 0 (or a percentage such as 5%), got {_clipped_repr(amount)}")
    if value > (100 if relative else 1):
        meant = "" if relative else f" (did you mean {_clip(amount)}%?)"
        raise RagEvalError(f"expected a drop of at most {'100%' if relative else 1}, since every measure lies in "
                           f"[0, 1], got {_clipped_repr(amount)}{meant}")
    return metric, Tolerance(value / 100 if relative else value, relative)


def _as_tolerance(value):
    """A Tolerance, or a number or text as --max-drop reads it (``"5%"``)."""
    return value if isinstance(value, Tolerance) else _tolerance_arg(str(value))[1]


def _floor_arg(text):
    """``recall@5=0.8``; a judged metric's floor is on its own scale, negative for ``judge.-<metric>``."""
    metric, sep, amount = text.partition("=")
    value, key = _finite_number(amount), metric.rpartition(":")[2]
    if not sep or not metric or value is None or not 0 <= (-value if key[:7] == _JUDGE + "-" else value) <= (
            math.inf if _is_judged_metric(key) else 1):
        raise RagEvalError(f"expected metric=value with a value from 0 to 1 (a judged metric's on its scale, at most "
                           f"0 for judge.-NAME), such as recall@5=0.8, got {_clipped_repr(text)}")
    return metric, value


def _checked_arg(read, accepted, expected):
    """A parser of what ``read`` reads (None: nothing) and ``accepted`` takes; ``expected`` says which."""
    def parse(text):
        value = read(text)
        if value is None or not accepted(value):
            raise RagEvalError(f"expected {expected}, got {_clipped_repr(text)}")
        return value

    return parse


def _integer_arg(low, high=None):
    expected = (f"an integer from {low} to {high}" if high is not None
                else "a positive integer" if low == 1 else f"an integer >= {low}")
    return _checked_arg(_ascii_int, lambda value: low <= value and (high is None or value <= high), expected)


_alpha_arg = _checked_arg(_finite_number, lambda value: 1e-15 <= value < 1, "a number between 0 and 1 (1e-15 at least)")
_score_arg = _checked_arg(_finite_number, lambda value: True, "a finite number")
_min_overlap_arg = _checked_arg(_finite_number, lambda value: 0 < value <= 1, "a fraction in (0, 1], such as 0.5")
_input_bytes_arg = _checked_arg(lambda text: _ascii_int(text, 19), bool, "a positive number of bytes")


def _direction_arg(text):
    metric, _, way = text.rpartition("=")
    if way not in ("higher", "lower") or not metric:
        raise RagEvalError(f"expected METRIC=higher or METRIC=lower, got {_clipped_repr(text)}")
    return _judge_name(metric.removeprefix(_JUDGE)), way


_fraction_arg = _checked_arg(_finite_number, lambda value: 0 <= value < 1, "a share from 0 to below 1, such as 0.1")


def _separator_arg(text):
    if not text:
        raise RagEvalError("expected a non-empty separator such as '#'")
    return text


def _meta_arg(text):
    key, sep, value = text.partition("=")
    if not sep or not _meta_key_ok(key) or not value.isprintable() or len(value) > _MAX_META_VALUE:
        raise RagEvalError(f"expected KEY=VALUE, a printable key without '=' of at most {_MAX_META_KEY} characters "
                           f"and a printable value of at most {_MAX_META_VALUE}, got {_clipped_repr(text)}")
    return key, value


def _measures_arg(text):
    """Measures (every cutoff of --k) and metrics (``ndcg@10``: that cutoff only), spelled ours."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    _check_measures(names, [1], _ALL_MEASURES)  # which apply to the judgments is evaluate's to say
    return list(dict.fromkeys(name if name in _ALL_MEASURES else _canonical_metric(name) for name in names))


def _metrics_arg(text):
    return [_canonical_metric(name.strip()) for name in text.split(",") if name.strip()]


def _help_epilog():
    width = max(len(m.name) for m in MEASURES) + 4
    rows = "\n".join(f"  {m.name + '@k':<{width}}{m.summary}" for m in MEASURES)
    return f"""measures (default: {', '.join(_DEFAULT_MEASURES)}):
{rows}

{_RULES}

{_SPAN_RULES}

exit codes:
  {EXIT_OK}    scored, no regression
  {EXIT_REGRESSION}    at least one regression (lines 'REGRESSION <metric>: ...' on stderr); \
with --check-labels: an orphaned label
  {EXIT_ERROR}    bad usage or bad input (one line 'rag_eval: error: ...' on stderr)
  {EXIT_INCONCLUSIVE}    inconclusive: --gate significant found too little evidence either way
       (a line 'warning: inconclusive: ...' on stderr; --inconclusive pass|fail maps it to 0 or 1);
       with --check-labels: a label quoting no text, unchecked
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)
  {EXIT_BROKEN_PIPE}  the reader of standard output went away (as in '| head')
  {EXIT_TERMINATED}  terminated (SIGTERM); no file was left half-written

Exit 1 means a regression and nothing else; files are written all or nothing
(docs/reliability.md)."""


@lru_cache(maxsize=None)  # argparse makes a formatter for each option it adds: about 1 ms a parser
def _build_parser():
    """The command line's parser, built on first use; parsing changes nothing in it, so every main() shares it."""
    import argparse  # the command line only; importers of the API skip it

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # one line, our exit code, no usage dump
            raise RagEvalError(message)

        def _print_message(self, message, file=None):  # --help, --version: argparse would exit 0 on a failed stdout
            _deliver(message)

        def _check_value(self, action, value):  # argparse's own check of choices, with a did-you-mean
            if action.choices is not None and value not in action.choices:
                raise argparse.ArgumentError(action, f"invalid choice: {_clipped_repr(value)} ("
                                             f"{_did_you_mean(value, action.choices)}choose from {', '.join(action.choices)})")

        def _get_value(self, action, text):  # argparse's, with an option parser's own words after the option's name
            if action.type is None:
                return text
            try:
                return action.type(text)
            except RagEvalError as exc:
                raise argparse.ArgumentError(action, str(exc)) from None

        def parse_args(self, args=None, namespace=None):  # argparse's, naming the option a misspelt one means
            args, extras = self.parse_known_args(args, namespace)
            if extras:
                options = [option for option in self._option_string_actions if option.startswith("--")]
                close = _did_you_mean(extras[0].partition("=")[0], options) if extras[0].startswith("-") else ""
                self.error(f"unrecognized arguments: {' '.join(extras)}" + (f" ({close.rstrip()})" if close else ""))
            return args

    parser = Parser(prog="rag_eval", epilog=_help_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter,
                    usage="%(prog)s QRELS RUN [RUN ...] [--k K] [--baseline FILE] [--save-baseline FILE]\n"
                          "                [--max-drop X] [--format FORMAT] [option ...]",
                    description="Score a retrieval run against relevance judgments (qrels) and gate CI on regressions.")
    parser.add_argument("qrels", metavar="QRELS", nargs="?",
                        help="judgments: JSON, JSONL, TREC, BEIR's TSV or a TSV/CSV with a header (PyTerrier)")
    parser.add_argument("run", metavar="RUN", nargs="*",
                        help="the run: JSON (ranked or scored), JSONL, TREC, MS MARCO's qid pid rank or a TSV/CSV "
                             "with a header (PyTerrier); several are compared (docs/compare.md)")
    # Each group in turn: its options, in the order --help lists them.
    option = parser.add_argument_group("a first gate (more in docs/gate.md)").add_argument
    option("--k", type=_cutoffs_arg, action="append", metavar="K[,K...]", help="cutoffs: the number of chunks "
           f"passed to the model (default {_DEFAULT_K}); repeated, the cutoffs add up")
    option("--baseline", metavar="FILE", help="baseline to gate against: JSON of metric -> mean, or an extended one")
    option("--save-baseline", metavar="FILE",
           help="write an extended baseline (means, per-query scores, conventions, qrels sha256)")
    option("--max-drop", type=_tolerance_arg, action="append", default=[], metavar="[METRIC=]X[%]",
           help=f"largest tolerated fall below the baseline: for every metric (default {_DEFAULT_MAX_DROP}) or one "
           "(ndcg@10=0.01); X%% is relative to the baseline; repeatable")
    option("--format", choices=tuple(FORMATTERS), help="stdout's format (default json; --check-labels: table)")
    option = parser.add_argument_group("gate").add_argument
    option("--baseline-run", metavar="RUN",
           help="gate against this older run, scored here with the same qrels and conventions")
    option("--not-gated", type=_metrics_arg, action="append", default=[], metavar="METRIC[,...]",
           help="baseline metrics left out of the gate on purpose")
    option("--min", type=_floor_arg, action="append", default=[], metavar="METRIC=X",
           help="floor: fail when the metric is below X, whatever the baseline; repeatable")
    option("--gate", choices=_GATE_RULES, default="drop",
           help="drop: any fall beyond the tolerance fails (default); significant: a non-inferiority test")
    option("--adjust", choices=_ADJUSTMENTS, default="maxt", help="multiple-test adjustment of the gated family "
           "(default maxt)")
    option("--acknowledge", choices=_ACKNOWLEDGEABLE, action="append", default=[],
           help="make a repeating warning a note, saved in the baseline")
    option("--inconclusive", choices=_INCONCLUSIVE_AS, default="exit", help="what an inconclusive verdict exits with")
    option("--calibrate", type=_integer_arg(10, 100_000), nargs="?", const=_DEFAULT_SIMULATIONS, metavar="N",
           help="measure the gate's false-fail rate and power, N simulations each (default %(const)s)")
    option("--alpha", type=_alpha_arg, default=_DEFAULT_ALPHA, help="significance level (default %(default)s)")
    option("--resamples", type=_integer_arg(100), default=_DEFAULT_RESAMPLES, metavar="N",
           help="randomization and bootstrap resamples (default %(default)s)")
    option("--seed", type=_integer_arg(0), default=_DEFAULT_SEED, metavar="N",
           help="seed of the resampling (default %(default)s); same inputs and seed, same output")
    option("--largest-drops", type=_integer_arg(0), default=5, metavar="N",
           help="queries listed per metric among the largest drops (default 5)")
    option("--ci", action="store_true", help="add a 95%% interval to every mean (docs/gate.md)")
    option("--allow-qrels-change", action="store_true",
           help="compare with an extended baseline made on other qrels (reported)")
    option("--baseline-qrels", metavar="QRELS", help="with --baseline-run: the old run's judgments (docs/compare.md)")
    option("--update-baseline", action="store_true", help="rewrite --baseline with this run's numbers on a pass")
    option("--ratchet", action="store_true", help="with --update-baseline: raise a mean only by a significant rise")
    option("--lock-timeout", type=_integer_arg(0), default=60, metavar="SECONDS",
           help="with --update-baseline: how long to wait for another run updating the same baseline (default 60)")
    option = parser.add_argument_group("scoring").add_argument
    option("--measures", type=_measures_arg, default=list(_DEFAULT_MEASURES), metavar="NAME[,NAME...]",
           help="measures to report: " + ", ".join(_ALL_MEASURES))
    option("--gain", choices=_GAINS, default="exp",
           help="nDCG gain: exp = 2**grade - 1 (default), linear = the grade (trec_eval's ndcg_cut)")
    option("--min-grade", type=_integer_arg(1), default=1, metavar="N",
           help="lowest grade that counts as relevant (default 1; trec_eval -l)")
    option("--judged-only", action="store_true", help="drop unjudged documents before the cutoff (trec_eval -J)")
    option("--allow-partial-run", action="store_true",
           help=f"score a run with results for fewer than {round(_MIN_COVERAGE * 100)}%% of the queries")
    option("--drop-unknown-queries", action="store_true", help="drop run queries that the qrels lack (else an error)")
    for name in ("--qrels-format", "--run-format"):
        option(name, choices=_FORMATS, default="auto", help="default: detected from the content")
    option("--doc-id-sep", metavar="SEP", type=_separator_arg,
           help="score documents, not chunks: 'guide#3' is chunk 3 of document 'guide' with SEP '#'")
    option("--max-input-bytes", type=_input_bytes_arg, default=_MAX_RUN_BYTES, metavar="N",
           help="largest run, chunk map or corpus read, in bytes after gunzip (default %(default)s: 4 GiB)")
    option("--abstain-below", type=_score_arg, metavar="SCORE",
           help="an unanswerable query counts as abstained when no score reaches SCORE")
    option("--no-symlinks", action="store_true", help="refuse an input whose path passes through a symbolic link")
    option = parser.add_argument_group("reports").add_argument
    option("--per-query", action="store_true", help="add every query's scores to the report")
    option("--digits", type=_integer_arg(1, 17), default=_DEFAULT_DIGITS, metavar="N",
           help="decimals of the numbers printed (default %(default)s)")
    option("--slices", metavar="FILE", help="query tags: means per slice, gated as SLICE:METRIC (docs/gate.md)")
    option("--output", metavar="FILE", help="write the full result: per-query scores, provenance (docs/reports.md)")
    option("--junit", metavar="FILE", help="write JUnit XML, one test case per gated metric")
    option("--metrics-file", metavar="FILE", help="write the means (and deltas) in OpenMetrics text format")
    option("--unjudged", metavar="FILE", help="write the unjudged documents of each top k as JSONL to label")
    option("--queries", metavar="FILE", help="with --unjudged: the queries' text (docs/reports.md)")
    option("--quiet", action="store_true",
           help="no notes or warnings on stderr (they stay in the report); errors and REGRESSION lines stay")
    option("--meta", type=_meta_arg, action="append", default=[], metavar="KEY=VALUE",
           help="provenance to record (dataset=v3); repeatable")
    option("--explain", action="store_true",
           help="print every measure's definition and its names in other tools, then exit")
    option("--version", action="version", version=f"rag_eval {__version__}")
    option = parser.add_argument_group("evidence spans (qrels rows with start and end; see docs/spans.md)").add_argument
    option("--chunks", metavar="FILE", help="chunk map, JSONL rows chunk_id, doc_id, start, end")
    option("--min-overlap", type=_min_overlap_arg, metavar="X",
           help=f"a chunk covers a span when they share X of the span's characters (default {_DEFAULT_MIN_OVERLAP})")
    option("--corpus", metavar="FILE", help="documents, JSONL rows doc_id, text: each span is checked against it")
    option("--check-labels", action="store_true", help="with --corpus: print each span's status, then exit")
    option("--fix-labels", metavar="OUT", help="with --corpus: write the qrels with moved spans re-anchored, then exit")
    option("--to-spans", metavar="OUT", help="with --chunks: write chunk-id qrels as evidence spans, then exit")
    option = parser.add_argument_group("judged generation scores (docs/judged.md)").add_argument
    option("--judged", metavar="FILE", action="append", default=[],
           help="an LLM judge's scores, beside QRELS RUN or alone; repeatable")
    option("--judged-id", metavar="FIELD", help="the field of a question's id where the export has none")
    option("--judged-direction", type=_direction_arg, action="append", default=[], metavar="METRIC=higher|lower",
           help="which way is better, where the tool does not say")
    option("--max-judge-missing", type=_fraction_arg, default=_MAX_JUDGE_MISSING, metavar="X",
           help="largest share of a metric's questions without a score (default %(default)s)")
    option("--judge", type=_meta_arg, action="append", default=[], metavar="KEY=VALUE",
           help="the judge's configuration (model=..., temperature=...), kept in the baseline")
    option("--allow-judge-change", action="store_true", help="compare with a baseline of another judge")
    option("--human-labels", metavar="FILE", help="human labels of a random subset: PPI++ estimates")
    return parser


def _warn(message, command=False):
    """One line on stderr, neutralised (no workflow command hides in it) unless it is one of the tool's own
    ``command``s; dropped when stderr is closed or full (the exit code still tells)."""
    if sys.stderr is None:  # started with stderr closed (2>&-)
        return
    try:
        sys.stderr.write((message if command else _neutralise_workflow_commands(message)) + "\n")
        sys.stderr.flush()
    except OSError:  # a full disk (2>/dev/full), or gone: nowhere left to say it
        _silence(sys.stderr)
    except ValueError:  # closed by the embedding program
        pass


def _check_options(args):
    """Refuse options that contradict each other, repeat a --meta key or would overwrite an input."""
    if args.qrels is None and args.judged and not args.run:
        if args.baseline_run or args.unjudged or args.chunks or args.corpus:
            raise RagEvalError("--baseline-run, --unjudged, --chunks and --corpus need QRELS RUN")
    elif args.qrels is None or args.run is None:
        raise RagEvalError(f"the following argument is required: RUN (QRELS is {_file_name(args.qrels)})"
                           if args.qrels else "the following arguments are required: QRELS RUN (or --judged FILE, "
                           "or --explain)")
    runs = [path for _, path in args.runs] or [args.run]  # every run; several: the reference first, --baseline-run too
    inputs = [path for path in (args.qrels, *runs, args.baseline, None if args.runs else args.baseline_run, args.slices,
                                args.chunks, args.corpus, args.queries, *args.judged, args.human_labels) if path]
    _check_inputs(args, inputs)
    if args.baseline and args.baseline_run:
        raise RagEvalError("--baseline and --baseline-run exclude each other: choose one")
    if args.update_baseline and (not args.baseline or args.baseline == "-"):
        raise RagEvalError("--update-baseline needs --baseline FILE (a file it can rewrite)")
    if args.ratchet and not args.update_baseline:
        raise RagEvalError("--ratchet goes with --update-baseline")
    if args.queries and not args.unjudged:
        raise RagEvalError("--queries goes with --unjudged: it gives the worklist its queries' text")
    if args.calibrate and not (args.baseline or args.baseline_run):
        raise RagEvalError("--calibrate needs per-query scores to resample: --baseline FILE (extended) or --baseline-run")
    outputs = [(option, path) for option, path in (("--save-baseline", args.save_baseline), ("--output", args.output),
               ("--junit", args.junit), ("--unjudged", args.unjudged), ("--metrics-file", args.metrics_file))
               if path is not None]
    for option, path in outputs:
        if path in ("", "-"):
            raise RagEvalError(f"{option}: expected a file name, got {path!r}"
                               + (" (standard output carries the report: see --format)" if path else ""))
    for option, path in outputs:
        if _overwrites(path, inputs):
            raise RagEvalError(f"{option} would overwrite an input" + (
                "; use --update-baseline to rewrite the baseline" if option == "--save-baseline" else ""), path)
        _output_target(path)  # a device, FIFO or socket is refused before anything is read
    if args.update_baseline:
        _output_target(args.baseline)
    made = [found for found in (_identity(path) for _, path in outputs) if found is not None]
    if len({os.path.realpath(path) for _, path in outputs}) < len(outputs) or len(set(made)) < len(made):
        raise RagEvalError("two outputs name the same file")
    twice = _first_repeated([key for key, _ in args.meta])  # a key given twice is an error, not an overwrite
    if twice is not None:
        raise RagEvalError(f"--meta names {_clipped_repr(twice)} twice")
    if args.baseline_qrels is None:
        return
    if not args.baseline_run:
        raise RagEvalError("--baseline-qrels goes with --baseline-run: the old run is scored on both judgments")
    if args.baseline_run == "-" or args.baseline_qrels == "-":
        raise RagEvalError("--baseline-qrels reads the old run a second time: neither can be - (standard input)")
    if _read_once(args.baseline_run):
        raise RagEvalError("--baseline-qrels reads the old run a second time: it must be a regular file, not a pipe "
                           "or FIFO", args.baseline_run)
    if os.path.realpath(args.baseline_qrels) == os.path.realpath(args.qrels) and args.qrels != "-":
        raise RagEvalError("--baseline-qrels names the qrels themselves: nothing changed to explain")
    _check_inputs(args, [args.baseline_qrels])
    for _, path in outputs:
        if _overwrites(path, [args.baseline_qrels]):
            raise RagEvalError("an output would overwrite an input (--baseline-qrels)", path)


def _overwrites(output, inputs):
    """Whether writing ``output`` replaces an input: by path (for files not made yet) and by identity
    (a hard link, a folder reached two ways, or the file standard input reads for -)."""
    made, path = _identity(output), os.path.realpath(output)
    return any((source != "-" and os.path.realpath(source) == path)
               or (made is not None and made == _identity(source)) for source in inputs)


def _identity(path):
    """(device, inode) of an existing file (standard input's for -, or an open descriptor's), else None."""
    try:
        found = os.fstat(sys.stdin.fileno()) if path == "-" else os.stat(path)
    except (OSError, AttributeError, ValueError):  # no such file; no stdin, or one without a descriptor
        return None
    return found.st_dev, found.st_ino


def _check_inputs(args, paths):
    """At most one input is - (standard input); with --no-symlinks, an input that, as written, is a symbolic link
    or has one among its folders is an error."""
    if paths.count("-") > 1:
        raise RagEvalError("only one input can be - (standard input)")
    for path in paths if args.no_symlinks else ():
        part, below = ("" if path == "-" else path), None
        while part and part != below and part not in (os.sep, os.curdir, os.pardir):
            if os.path.islink(part):
                raise RagEvalError("is or passes through a symbolic link (--no-symlinks)", path)
            part, below = os.path.dirname(part), part


def _gate_settings(args, result, slices, baseline):
    """Tolerances and floors from the command line, every name checked at once; the last of a name counts."""
    def ours(key):  # as given when it is no metric: _name_problem says why
        try:
            return _canonical_metric(key) if key else key
        except RagEvalError:
            return key

    max_drop = [(ours(key), tolerance) for key, tolerance in args.max_drop]
    minimum = [(ours(key), value) for key, value in args.min]
    problems = [_name_problem(key, option, result, slices, baseline)
                for option, given in (("--max-drop", max_drop), ("--min", minimum)) for key, _ in given if key]
    problems += [f"--not-gated: {key} is not in the baseline"
                 for key in sorted(args.not_gated) if baseline is None or key not in baseline.means]
    problems = [problem for problem in problems if problem]
    if problems:
        unknown = [key.rpartition(":")[2] for key, _ in max_drop + minimum if key and not _is_metric_key(key)]
        hint = f" {_metric_hint(unknown[0])}" if unknown else ""
        raise RagEvalError("; ".join(problems) + hint)
    default = next((tolerance for key, tolerance in reversed(max_drop) if not key), Tolerance(_DEFAULT_MAX_DROP))
    return GateSettings(args.gate, default, {key: tolerance for key, tolerance in max_drop if key}, dict(minimum),
                        args.alpha, args.resamples, args.seed, args.largest_drops, args.adjust, args.not_gated)


def _name_problem(key, option, result, slices, baseline):
    """What is wrong with a metric (or slice:metric) that a tolerance or floor names, or None."""
    tag, _, metric = key.rpartition(":")
    try:
        _is_judged_metric(metric) or parse_metric(metric)
    except RagEvalError:
        return f"{option}: unknown metric {_clipped_repr(metric)}"  # the hint, once for all, follows the list
    members = _slice_members(slices or {})
    if metric not in result["mean"]:
        return f"{option}: {metric} is not computed by this run (see --measures and --k)"
    if tag and tag not in members:
        return f"{option}: no slice named {_clipped_repr(tag)}" + ("" if slices else " (see --slices)")
    if tag and not any(qid in result["per_query"] for qid in members[tag]):
        return f"{option}: slice {_clipped_repr(tag)} has no scored query"
    if option == "--max-drop" and not tag and baseline is not None and key not in baseline.means:
        return f"--max-drop: {key} is not in the baseline, so nothing would be gated"
    if option == "--max-drop" and baseline is None:
        return f"--max-drop: {key} has no baseline to be compared with (see --baseline)"
    return None


def _comparable_baseline(args, baseline, result, fingerprint):
    """Refuse a baseline made otherwise; True when only the qrels changed and that is allowed."""
    if not set(baseline.means) & set(result["mean"]):
        raise RagEvalError("the baseline names no metric this run computes (baseline: "
                           f"{', '.join(sorted(baseline.means)) or 'nothing'})", args.baseline)
    retrieval = args.qrels and not all(_is_judged_metric(key.rpartition(":")[2]) for key in baseline.means)
    differences = _differences(baseline, result, fingerprint) if retrieval else []  # judged alone: no qrels to compare
    qrels_changed = any(d.startswith("qrels:") for d in differences)
    if qrels_changed and args.allow_qrels_change:
        differences = [d for d in differences if not d.startswith("qrels:")]
    if differences:
        refused = qrels_changed and not args.allow_qrels_change
        allow = ", or accept new judgments with --allow-qrels-change" if refused else ""
        raise RagEvalError("not comparable, made with other conventions or judgments: " + "; ".join(differences)
                           + f" (save a new baseline in the change that earns it{allow})", args.baseline)
    return qrels_changed


def _full_output(args, argv, full, result, fingerprint, digests, messages, runs=None):
    """--output: the report with every query's scores (``full``), every note in full, and how the numbers were made."""
    import platform

    roles = ("qrels", "run", "baseline", "baseline_run", "slices", "baseline_qrels", "chunks", "corpus", "human_labels")
    paths = {role: getattr(args, role) for role in roles if not runs or role not in ("run", "baseline_run")}
    full.update(notes=[str(message) for message in messages], tool=f"rag_eval {__version__}",
                conventions=dict(_conventions_record(result), abstain_below=args.abstain_below),
                python=platform.python_version(), command=["rag_eval"] + list(argv), meta=_provenance(args),
                inputs={role: {"path": path, "sha256": digests.get(path)} for role, path in paths.items() if path})
    if args.qrels:
        full["inputs"]["qrels"]["judgments_sha256"] = fingerprint
    if args.judged:
        full["inputs"]["judged"] = [{"path": path, "sha256": digests.get(path)} for path in args.judged]
    if runs:
        full["inputs"]["runs"] = [{"name": s.name, "path": s.path, "sha256": digests.get(s.path)} for s in runs]
    return _format_json(full, 0)


def _run(args, argv):
    """The command line's job: --explain, a job on the labels, several runs compared, or one run."""
    if args.explain:
        _deliver(_explain())
        return EXIT_OK
    _split_runs(args)
    if args.check_labels or args.fix_labels or args.to_spans:
        return _label_job(args)
    args.format = args.format or "json"
    _check_options(args)
    args.k = sorted(set(chain.from_iterable(args.k))) if args.k else [_DEFAULT_K]  # --k 5 --k 10 is --k 5,10
    args.not_gated = frozenset(chain.from_iterable(args.not_gated))
    args.meta, args.judge = dict(args.meta), dict(args.judge)
    _refuse_closed_stdout()  # before anything is read
    return _run_candidates(args, argv) if args.runs else _run_one(args, argv)


def _run_one(args, argv):
    # Updates of one baseline take turns, and each reads the baseline under the lock.
    with _locked(args.baseline if args.update_baseline else None, args.lock_timeout):
        with _hashing_inputs(bool(args.output)) as digests:
            baseline, slices, qrels = _read_judgments(args)
            args.needed = _baseline_needs(args, baseline, qrels) if args.run else []
            result, run = _score_file(args, qrels, args.run, whole=bool(args.judged_only and args.unjudged)) \
                if args.run else (None, {})
            result = _judged_scores(args, result)
            fingerprint = _fingerprint(args, qrels)
            reference = _score_file(args, qrels, args.baseline_run)[0] if args.baseline_run else {}
            if args.baseline_run:
                baseline = _baseline_from_run(reference, fingerprint)
            earlier = _earlier_labels(args, qrels)
        gate_report = _gate_result(args, result, baseline, slices, fingerprint, qrels, earlier)
        intervals = _mean_intervals(result, args.resamples, args.seed) if args.ci else None
        report = build_report(result, gate_report=gate_report, intervals=intervals, slices=slices,
                              per_query=args.per_query, baseline_per_query=baseline.per_query if baseline else None)
        if args.human_labels:  # beside the verdict, never in it: a check of the judge against people
            with _naming_files(labels=args.human_labels):
                report["human"] = _human_report(_read_human_labels(args.human_labels), result, baseline)
        messages = notes(result, gate_report, _acknowledged(args, baseline), reference, report.get("human"))
        code = _exit_code(args, gate_report)
        passed = code == EXIT_OK
        _publish(FORMATTERS[args.format](report, args.digits),
                 _output_files(args, argv, report, result, run, qrels, fingerprint, baseline, passed, digests, messages))
    written = [path for path in (args.output, args.junit, args.metrics_file, args.unjudged, args.save_baseline) if path]
    if written:
        messages.append(_Message("note", f"wrote {', '.join(map(_file_name, written))}"))
    if args.save_baseline:
        saved = {m: v for m, v in _per_query_by_metric(result).items() if m not in result.get("reported_only", ())}
        resolved = _resolved_tolerances(saved, args.alpha)
        shown = [f"{m}={v:.4f}" for m, v in sorted(resolved.items(), key=lambda i: _metric_order(i[0])) if v and v < 1]
        messages.append(_Message("note", f"the smallest tolerance these {result['queries']} queries resolve ("
                                 f"{len(resolved)} tests, a rerun that may change every query; docs/gate.md): "
                                 + (", ".join(shown) + " (--max-drop METRIC=VALUE)" if shown else "none below 1")))
    if args.unjudged:
        messages.append(_Message("note", f"to label: set each relevance in {_file_name(args.unjudged)}, then "
                                         f"{_appending(args)} {_file_name(args.qrels)}"))
    if args.update_baseline:
        baseline_name = _file_name(args.baseline)
        kept = sorted(args.not_gated, key=_metric_order)
        messages.append(_Message("note", f"updated {baseline_name}" + (" (ratchet)" if args.ratchet else "")
                                 + (f"; kept as they were (not gated): {', '.join(kept)}" if kept else "")
                                 if passed else f"the gate failed, so {baseline_name} was not changed"))
    _print_messages(args, report, messages)
    return code


@contextmanager
def _hashing_inputs(wanted):
    """``{path: sha256}`` of the inputs read inside, for --output (empty unless ``wanted``)."""
    digests = {}
    hashing = _INPUT_SHA256.set(digests if wanted else None)
    try:
        yield digests
    finally:
        _INPUT_SHA256.reset(hashing)


def _read_judgments(args):
    """What every run is judged against: the baseline, the slices and the qrels, read in that order."""
    baseline = read_baseline(args.baseline) if args.baseline else None
    slices = read_slices(args.slices) if args.slices else None
    return baseline, slices, read_qrels(args.qrels, args.qrels_format) if args.qrels else {}


def _judged_scores(args, result):
    """--judged: the judged scores, beside the retrieval result or alone."""
    if not args.judged:
        return result
    judged = judged_result([read_judged(path, args.judged_id) for path in args.judged], dict(args.judged_direction),
                           args.max_judge_missing)
    judged["judge"]["provenance"].update(args.judge)
    return judged if result is None else _with_judged(result, judged)


def _fingerprint(args, qrels):
    """``_qrels_fingerprint`` once the runs are read, or "" when no baseline or output needs it
    (hashlib costs an import and a pass over the qrels)."""
    needed = args.baseline or args.baseline_run or args.save_baseline or args.output
    return _qrels_fingerprint(qrels) if needed else ""


def _baseline_from_run(old, fingerprint):
    """--baseline-run: the older run's scores, as the extended baseline it would have saved."""
    means = {metric: value for metric, value in old["mean"].items() if metric not in old.get("reported_only", ())}
    return Baseline(means, _per_query_by_metric(old), _conventions_record(old), fingerprint)


def _acknowledged(args, baseline):
    return sorted(set(args.acknowledge) | set(baseline.acknowledged if baseline else ()))


def _exit_code(args, gate_report):
    verdict = "pass" if gate_report is None else gate_report["verdict"]
    if verdict == "inconclusive" and args.inconclusive != "exit":
        verdict = "pass" if args.inconclusive == "pass" else "regression"
    return {"pass": EXIT_OK, "regression": EXIT_REGRESSION, "inconclusive": EXIT_INCONCLUSIVE}[verdict]


def _refuse_closed_stdout():
    if sys.stdout is None:  # started with stdout closed (>&-)
        raise RagEvalError("standard output is closed: the report would go nowhere")


def _deliver(text):
    """The report on stdout, flushed: a full disk or a closed stream is an error (exit 2) before any file is written."""
    _refuse_closed_stdout()
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        _silence(sys.stdout)  # or the interpreter's own flush at exit fails again (exit 120)
        raise RagEvalError(f"cannot write the report to standard output: {exc.strerror or exc}") from None


def _publish(text, files):
    """Each file written to its temporary, the report delivered, then the files renamed into place: all or nothing."""
    staged = []  # (temporary, target), taken off once renamed
    try:
        for path, content in files:
            staged.append(_write_atomically(path, content, commit=False))
        _deliver(text)
        while staged:
            temporary, target = staged[0]
            try:
                os.replace(temporary, target)
            except OSError as exc:
                raise RagEvalError(f"cannot write: {exc.strerror or exc}", target) from None
            staged.pop(0)
    finally:
        for temporary, _ in staged:  # not renamed: the run failed, or was interrupted (a signal too)
            _remove(temporary)


def _silence(stream):
    """Point a standard stream that failed at the null device: what it still buffers goes nowhere, quietly."""
    try:
        descriptor = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, AttributeError, ValueError):  # not a real file (a test's StringIO), or already gone
        return
    with suppress(OSError, TypeError):
        os.dup2(devnull, descriptor)
    os.close(devnull)


# The sample of a run that the separator hint reads (queries, documents each), and the depth to which the
# qrels-copy check reads a reduced run again: enough to see ids meet or a copy, cheap on any run.
_SAMPLE_QUERIES, _SAMPLE_DOCUMENTS = 200, 50


def _asked_measures(args, qrels):
    """--measures; by default on spans, also the character-level ones that show what large chunks cost."""
    spans = isinstance(qrels, SpanQrels) and args.measures == list(_DEFAULT_MEASURES)
    return list(_DEFAULT_SPAN_MEASURES) if spans else args.measures


def _baseline_needs(args, baseline, qrels):
    """The baseline's metrics (but --not-gated) that --k and --measures leave out: the baseline decides what
    is gated, so the call scores them too."""
    table = _ALL_MEASURES if isinstance(qrels, SpanQrels) else _BY_NAME
    scored = {format_metric(*pair) for pair in _check_measures(_asked_measures(args, qrels), args.k, table)}
    needs = []
    for key in baseline.means if baseline is not None else ():
        if _is_judged_metric(key.rpartition(":")[2]):  # read from --judged, not scored
            continue
        name, k = parse_metric(key.rpartition(":")[2])
        metric = format_metric(name.removeprefix(_DOC_LEVEL), k)  # spans: both levels
        if metric not in scored | set(needs) and key not in args.not_gated and parse_metric(metric)[0] in table:
            needs.append(metric)
    return needs


def _score_file(args, qrels, path, whole=False):
    """Read one run as the options say and score it; refuse a run that nothing was evaluated on."""
    if isinstance(qrels, SpanQrels) or (args.chunks or args.corpus) and not args.unjudged \
            or args.min_overlap is not None:  # with --unjudged, chunk-id qrels take them as the worklist's texts
        return _score_spans_file(args, qrels, path)
    sep = args.doc_id_sep
    judged = _documents_qrels(qrels, sep) if sep else qrels
    keep = _judged_filter(judged, args.min_grade) if args.judged_only and not whole else None
    measures = args.measures + args.needed  # the run read as deep as the baseline's metrics need
    used = sorted({cutoff for _, cutoff in _check_measures(measures, args.k)}) or [1]
    # Reduced while read, except for --unjudged: its worklist needs the unjudged ids.
    cutoffs = None if args.unjudged else used
    depth = None if whole else used[-1] + 1  # one more than the largest cutoff: enough to see a tie across it
    run, any_judged, repeated, _ = _read_run(path, args.run_format, depth, keep, sep, judged, cutoffs,
                                             args.max_input_bytes)
    with _naming_files(qrels=args.qrels, run=path):
        result = evaluate(qrels, run, args.k[0] if len(args.k) == 1 else args.k, measures=measures,
                          gain=args.gain, min_grade=args.min_grade, judged_only=args.judged_only,
                          drop_unknown_queries=args.drop_unknown_queries, doc_id_sep=sep,
                          abstain_below=args.abstain_below)
        # A reduced run keeps judged documents only: what these two checks read is read again (rarely needed).
        reduced = isinstance(run, _ReducedRun)
        read_again = lambda: read_run(path, args.run_format, depth=_SAMPLE_DOCUMENTS, doc_id_sep=sep)
        _check_evaluated(result, path, any_judged, args.allow_partial_run,
                         "" if any_judged or sep else _separator_hint(read_again() if reduced else run, judged))
        # A copy of the qrels?  What was kept is one only if the run is, but it may be one alone when it was
        # reduced, cut or filtered: then the run read again decides; an input read once (a pipe) passes.
        copied = all(entry.length == len(entry.judged) == len(judged.get(qid, ())) for qid, entry in run.items()) \
            if reduced else _copies_qrels(run, judged)  # reduced: each query ranks its judged documents, no other
        partial = copied and (reduced or keep is not None
                              or depth is not None and any(len(entry) >= depth for entry in run.values()))
        if copied and (not partial or not _read_once(path) and _copies_qrels(read_again(), judged)):
            raise RagEvalError(_COPIED, _source_name(path))
    if repeated.documents or repeated.at_least:
        result["repeated"] = dict(repeated._asdict(), run=_source_name(path))
    return result, run


@contextmanager
def _naming_files(**files):
    """Name the files that the library could only call "qrels", "run" or "chunks" in its errors."""
    try:
        yield
    except RagEvalError as exc:
        if exc.source not in files:
            raise
        raise RagEvalError(exc.detail, _source_name(files[exc.source])) from None


def _gate_result(args, result, baseline, slices, fingerprint, qrels, earlier, runs=1):
    """gate()'s report, or None when there is nothing to gate (no baseline, no floor); ``runs`` share alpha."""
    qrels_changed = baseline is not None and _comparable_baseline(args, baseline, result, fingerprint)
    if qrels_changed and args.ratchet:
        raise RagEvalError("--ratchet would keep means measured on other judgments; update without it", args.baseline)
    changes = _judge_changes(baseline, result) if baseline is not None and "judge" in result else []
    if changes and not args.allow_judge_change:
        raise RagEvalError("not comparable, graded by another judge: " + "; ".join(changes)
                           + " (save a new baseline, or accept the change with --allow-judge-change)", args.baseline)
    settings = _gate_settings(args, result, slices, baseline)._replace(runs=runs)
    if baseline is None and not settings.floors:
        return None
    gate_report = gate(result, baseline, settings, slices, qrels=qrels if args.qrels else None,
                       baseline_qrels=earlier[0], old_on_old=earlier[1], meta=args.meta, simulations=args.calibrate)
    if gate_report["verdict"] == UNGATED:
        raise RagEvalError("--not-gated names every metric of the baseline, so nothing would be gated")
    return gate_report


def _output_files(args, argv, report, result, run, qrels, fingerprint, baseline, passed, digests, messages):
    """``(path, text)`` of every file the options ask for, made before anything is written."""
    files = []
    if args.output:
        full = dict(report, per_query=_per_query_full_names(result))
        files.append((args.output, _full_output(args, argv, full, result, fingerprint, digests, messages)))
    if args.junit:
        files.append((args.junit, _junit_xml(report, inconclusive_fails=args.inconclusive == "fail")))
    if args.metrics_file:
        files.append((args.metrics_file, _openmetrics_text(report)))
    if args.unjudged:
        # With --judged-only the run was kept whole (see _score_file): its top k holds what the filter drops.
        rows = _unjudged_documents(qrels, run, max(_conventions_record(result)["k"]), args.doc_id_sep)
        files.append((args.unjudged, _worklist(args, rows)))
    extra = {"meta": _provenance(args), "judgments": _stored_judgments(qrels)} \
        if args.save_baseline or args.update_baseline else {}
    if extra and _acknowledged(args, baseline):
        extra["acknowledged"] = _acknowledged(args, baseline)
    if extra and "judge" in result:
        extra["judge"] = {key: result["judge"][key] for key in ("provenance", "answers", "contexts")}
    if args.save_baseline:
        files.append((args.save_baseline, _baseline_text(result, fingerprint, extra=extra)))
    if args.update_baseline and passed:
        kept = dict(result, not_gated=args.not_gated)
        files.append((args.baseline, _baseline_text(kept, fingerprint, baseline, _significant_gains(report.get("gate"))
                                                     if args.ratchet else None, extra)))
    return files


def _appending(args):
    fmt = args.qrels_format
    if fmt == "auto" and not _read_once(args.qrels):
        with _opened(args.qrels) as inp:
            fmt = "header" if _detect_format(inp) == "trec" and _header(inp) else _detect_format(inp)
    return {"jsonl": "append its rows to", "json": "add each as [query_id][doc_id] = relevance to",
            "trec": "add each as a line 'query_id 0 doc_id relevance' to"}.get(fmt, "add each as a row (query, document, relevance) to")


def _worklist(args, rows):
    """--unjudged: JSONL rows to label (relevance -1 until set), with the texts the inputs have."""
    listed = {docid for _, docid, _ in rows}  # what is kept of the side inputs: what the rows name
    queries = _read_corpus(args.queries, args.max_input_bytes, "query", {qid for qid, _, _ in rows}) if args.queries else {}
    chunks = _read_chunks(args.chunks, args.max_input_bytes, listed) if args.chunks else {}
    corpus = _read_corpus(args.corpus, args.max_input_bytes, keep=listed | {where[0] for where in chunks.values()}) \
        if args.corpus else {}

    def text(docid):
        doc, start, end = chunks.get(docid, (docid, None, None))
        return corpus[doc][start:end] if doc in corpus else None

    return _format_json({}, 0, "\n".join(json.dumps({key: value for key, value in (
        ("query_id", qid), ("query", queries.get(qid)), ("doc_id", docid), ("text", text(docid)), ("rank", rank),
        ("relevance", -1)) if value is not None}) for qid, docid, rank in rows)) if rows else ""


def _check_same_queries(baseline, result):
    """Rule significant tests the drop only when both sides hold the same queries (a mean of 30 queries tested
    on the 5 shared once passed a drop of 0.83 as "not significant")."""
    scores = _per_query_by_metric(result)
    for metric, before in sorted((baseline.per_query or {}).items()):  # a judged metric's errors may differ by side
        now = set(scores.get(metric, ()))
        if metric in baseline.means and metric in result["mean"] and set(before) != now and not _is_judged_metric(
                metric):
            shared = len(now & set(before))
            raise RagEvalError(f"--gate significant cannot test {metric}: the baseline scored {len(before)} queries "
                               f"and this run {len(now)}, {shared} of them shared, so a paired test would not test the "
                               "drop of the means; use --gate drop, or save a baseline on these judgments")


def _print_messages(args, report, messages, failures=None,
                    markdown=FORMATTERS["markdown"]):
    """Notes, warnings and REGRESSION lines (``failures``, by default the report's gate's) on stderr, once
    the report is out.  Under GitHub Actions also the markdown report in the step summary, and annotations:
    the runner reads workflow commands from both output streams, and stderr keeps stdout parseable."""
    printed = [] if args.quiet else [m for m in messages if m.printed]
    shown = [f"rag_eval: {m.kind}: {m.line}" for m in printed]
    if failures is None:
        failures = _regression_lines(report["gate"]) if "gate" in report else []
    for line in shown + failures:
        _warn(line)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            text = _step_summary(report, args.digits, [line for line in shown if not line.startswith(
                "rag_eval: note: wrote ")], failures, markdown, _provenance(args))
            try:
                with open(summary, "a", encoding="utf-8", errors="backslashreplace") as out:
                    out.write(text + "\n")
            except OSError as exc:
                _warn(f"rag_eval: warning: cannot append to GITHUB_STEP_SUMMARY ({exc.strerror or exc})")
        warnings = [m.line for m in printed if m.kind == "warning"]
        for line in _annotations("warning", warnings) + _annotations("error", failures):
            _warn(line, command=True)  # the commands the runner must obey


# A run that was not really evaluated: the command line's errors, the library's warnings (notes(), qrels= and run=).
_NOTHING_JUDGED = "no document of the run is judged in the qrels, so nothing was evaluated ({})"
_COPIED = "the run is a copy of the qrels: every document is judged and every score is its grade (was the qrels " \
    "file given as the run?)"


def _unevaluated(result, qrels, run):
    """The line that says a scored run was not really evaluated (it retrieved nothing, none of its documents is
    judged, it is a copy of the qrels), as the command line's error says it; else None."""
    if "conventions" not in result or not all(isinstance(grades, _MAPPINGS) for grades in qrels.values()):
        return None  # judged scores alone, or evidence spans (whose check needs the chunks: the command line's)
    nothing = _retrieved_nothing(result)
    if nothing:
        return nothing
    sep, run = result["conventions"]["doc_id_sep"], _library_run(run)
    if sep:
        run, qrels = _documents_run(run, sep), _documents_qrels(qrels, sep)
    if all(qrels.get(qid, {}).keys().isdisjoint(entry) for qid, entry in run.items()):
        hint = "" if sep else _separator_hint({qid: _ranking(entry) for qid, entry in run.items()}, qrels)
        return _NOTHING_JUDGED.format(hint or "are they about the same documents?")
    return _COPIED if _copies_qrels(run, qrels) else None


def _retrieved_nothing(result):
    if len(result["skipped"]) == result["queries"]:
        left = "no judged document (--judged-only)" if result["conventions"]["judged_only"] else "no document"
        return f"the run retrieved {left} for any judged query: nothing was evaluated"
    return None


def _check_evaluated(result, path, any_judged, allow_partial, id_hint=""):
    """A gate must not pass on a run that was never really evaluated: evaluate() scores such a run 0
    everywhere, as a library should; a CI step that compared nothing must fail."""
    source, nothing = _source_name(path), _retrieved_nothing(result)
    if nothing:
        raise RagEvalError(nothing, source)
    if not any_judged:
        raise RagEvalError(_NOTHING_JUDGED.format(id_hint or "are they about the same documents?"), source)
    answered = result["queries"] - len(result["missing"])
    if answered < result["queries"] * _MIN_COVERAGE and not allow_partial:
        raise RagEvalError(f"the run has results for only {answered} of {result['queries']} scored queries "
                           f"(first missing: {_clipped_repr(result['missing'][0])}): a truncated run? "
                           "--allow-partial-run scores it anyway, the missing ones as 0", source)


# Separators of chunk ids seen in the wild, as in "guide#3", "guide::3" or "guide_3".
_SEPARATORS = ("#", "::", "_", "-", ":", "/", "|", ".")


def _separator_hint(run, qrels):
    """Why no run id is judged: the --doc-id-sep that makes them meet and leaves one side whole, documents ('kb-0263_1'
    and 'kb-0263#1' meet at '-' as 'kb', every score 1), else an id of each side."""
    sample = [(qid, list(entry)[:_SAMPLE_DOCUMENTS]) for qid, entry in islice(run.items(), _SAMPLE_QUERIES)
              if qid in qrels]
    sides = ({d for qid, _ in sample for d in qrels[qid]}, {d for _, ids in sample for d in ids})
    for sep in _SEPARATORS:
        if any(all(_document_of(d, sep) == d for d in side) for side in sides) and any(
                _document_of(docid, sep) in {_document_of(d, sep) for d in qrels[qid]} for qid, ids in sample for docid in ids):
            return f"chunk ids and document ids? --doc-id-sep {sep!r} would make them meet"
    pairs = [(docid, judged) for qid, ids in sample for docid in ids[:10] for judged in list(qrels[qid])[:10]]
    ours, theirs = max(pairs, key=lambda pair: len(os.path.commonprefix(pair)), default=("", ""))
    alike = len(os.path.commonprefix([ours, theirs]))
    return f"the run's {_clipped_repr(ours)} and the qrels' {_clipped_repr(theirs)} part after {alike} characters: " \
        f"{_clipped_repr(ours[alike:])} against {_clipped_repr(theirs[alike:])}" if alike else ""


def _copies_qrels(run, qrels):
    """Whether a run is a copy of the judgments: every document judged, every score its integer grade.
    Such a run scores near 1.0 and passes any gate: a JSON qrels file given as the run.  (JSONL qrels rows have
    a grade and no score, which the run reader refuses; it reads every JSONL score as a float, so rows that
    name their grade "score" are not caught here.)"""
    for qid, entry in run.items():
        grades = qrels.get(qid)
        if grades is None or not isinstance(entry, _MAPPINGS) or any(  # a real run's scores are floats
                type(score) is not int or grades.get(docid) != score for docid, score in entry.items()):
            return False
    return sum(map(len, run.values())) > 1


class _Message(NamedTuple):
    """A note or warning: one short line on stderr (unless --quiet), its details in the report's ``notes``."""

    kind: str  # "note" or "warning"
    line: str  # at most about 160 characters
    detail: str = ""  # the rest, for the report
    printed: bool = True  # False: only in the report (a rule that is not in force, a fact that needs no action)

    def __str__(self):
        return f"{self.kind}: {self.line}" + (f" ({self.detail})" if self.detail else "")


def _repeated_message(repeated):
    """The note on documents a run lists more than once (``_Repeated``, and the run's path)."""
    run = _file_name(repeated["run"])
    if not repeated["documents"]:  # none found, but not every id was checked
        return _Message("note", f"{run} may list documents more than once: not checked past {_REPEAT_BUDGET} ids "
                        "of its long or interleaved queries")
    return _Message("note", f"{'at least ' if repeated['at_least'] else ''}"
                    f"{_plural(repeated['documents'], 'document is', 'documents are')} listed more than once "
                    f"in {_plural(repeated['queries'], 'query', 'queries')} of {run}; "
                    "each counts once, at its best place (trec_eval refuses such a run)")


def notes(result: dict, gate_report: Optional[dict] = None, acknowledged: Iterable[str] = (),
          reference: Optional[dict] = None, human: Optional[Dict[str, dict]] = None, *,
          qrels: Optional[Qrels] = None, run: Optional[Run] = None) -> List[_Message]:
    """What the command line prints beside the numbers (and of a --baseline-run's ``reference``), most consequential
    first, ``acknowledged`` ones as notes: (kind, line, detail, printed) each.  ``result["repeated"]`` (documents a
    run file repeats) is set by the command line's reader only.  Given the ``qrels`` and ``run`` scored, a warning
    when the run retrieved nothing, none of its documents is judged (with the --doc-id-sep that would fix it) or
    it is a copy of the qrels: the command line's errors, as a notebook may score a copy on purpose (an ideal run)."""
    found, labels, gate_report = [], result.get("labels", {}), gate_report or {}
    unevaluated = None if qrels is None or run is None else _unevaluated(result, qrels, run)
    if unevaluated:
        found.append(_Message("warning", unevaluated))
    if result["missing"]:
        found.append(_Message("warning", f"the run has no results for {len(result['missing'])} of {result['queries']} "
                              f"scored queries (first: {_clipped_repr(result['missing'][0])}); they score 0",
                              "missing: " + ", ".join(result["missing"][:20])))
    if labels.get("moved"):
        found.append(_Message("note", f"{labels['moved']} evidence spans moved in the corpus, scored where "
                              "their text is now (--check-labels lists them, --fix-labels corrects them)"))
    if labels.get("unchecked"):
        found.append(_Message("warning", f"{labels['unchecked']} evidence spans quote no text, so --corpus "
                              "could not check where they are (--to-spans with --corpus writes it)"))
    if result["dropped"]:
        found.append(_Message("note", f"dropped {len(result['dropped'])} run queries that the qrels lack"))
    if result.get("repeated"):
        found.append(_repeated_message(result["repeated"]))
    for key, entry in result.get("judge", {}).get("metrics", {}).items():
        if entry["missing"]:
            found.append(_Message("warning", f"{key}: no score for {entry['missing']} of {result['queries']} questions "
                                  "(judge errors, NaN or no row), left out of its mean and test",
                                  "first: " + ", ".join(map(_one_line, entry["missing_ids"]))))
        if entry["flip_rate"]:
            found.append(_Message("note", f"{key}: the judge's repeats disagree on {entry['flip_rate']:.0%} of the "
                                  "questions judged more than once; each question counts once, as its repeats' mean"))
    for key, test in gate_report.get("judge_drift", {}).items():
        if test["drifted"]:
            share = "" if test["share_of_delta"] is None else f", {test['share_of_delta']:.0%} of its delta"
            found.append(_Message("warning", f"judge drift: {key} moved {test['shift']:+.4f} on {test['anchors']} "
                                  f"unchanged answers (p {test['p_holm']:.2g}{share}); its verdict is inconclusive"))
    if gate_report.get("judge_changes"):
        found.append(_Message("warning", "graded by another judge (--allow-judge-change): "
                              + "; ".join(map(_one_line, gate_report["judge_changes"]))))
    if gate_report.get("contexts_changed"):
        changed = gate_report["contexts_changed"]
        found.append(_Message("note", f"the contexts of {_plural(len(changed), 'question', 'questions')} differ from "
                              "the baseline's: their judged deltas mix in retrieval changes",
                              "first: " + ", ".join(map(_one_line, changed[:20]))))
    if gate_report.get("qrels_changed"):
        found.append(_Message("note", "the qrels differ from the baseline's (--allow-qrels-change)"))
    if gate_report.get("not_gated"):
        found.append(_Message("note", f"not gated, on purpose (--not-gated): {', '.join(gate_report['not_gated'])}"))
    new = gate_report.get("new", [])
    if new:
        found.append(_Message("note", f"not in the baseline, so not gated: {', '.join(new[:5])}"
                              + (f" and {len(new) - 5} more" if len(new) > 5 else "")))
    low = {metric: value for metric, value in result["judged"].items() if value < _LOW_JUDGED}
    if low and not result["conventions"]["judged_only"]:
        shares = ", ".join(f"{metric} {value:.2f}" for metric, value in list(low.items())[:2])
        seen = "few-judged" in acknowledged
        found.append(_Message("note" if seen else "warning", f"few documents judged ({shares}"
                              f"{', ...' if len(low) > 2 else ''})" + (", acknowledged" if seen else
                              ": gains can look like losses (--unjudged, --judged-only, --acknowledge few-judged)"),
                              "unjudged documents count as non-relevant; "
                              + ", ".join(f"{metric} {value:.4f}" for metric, value in low.items())))
    tied = {k: n for k, n in result["ties"].items() if n}
    if tied:
        counts = ", ".join(f"k={k}: {_plural(n, 'query', 'queries')}" for k, n in tied.items())
        found.append(_Message("note", f"tied scores straddle a cutoff ({counts}); "
                              "ties are broken by docid, descending, as trec_eval does"))
    if gate_report:  # a tolerance the test set cannot resolve, first of all
        first, rest = _gate_warnings(gate_report)
        found = first + found + rest
    if (reference or {}).get("repeated"):
        found.append(_repeated_message(reference["repeated"]))
    for key, entry in (human or {}).items():
        parts = []
        for what, e in (("mean", entry["mean"]), ("delta", entry.get("delta"))):
            if e and e["interval"]:
                low, high = e["interval"]
                r = "-" if e["correlation"] is None else f"{e['correlation']:.2f}"
                effective = "" if e["effective_labels"] is None else f", worth {e['effective_labels']:.0f} labels"
                parts.append(f"{what} {e['estimate']:.4f} [{low:.4f}, {high:.4f}] by {e['method']}, {e['labels']} "
                             f"labels, judge-human r {r}{effective}")
        found.append(_Message("note", f"human labels, {key}: " + ("; ".join(parts) or "fewer than 2 labels")))
    return found


def _gate_warnings(gate_report):
    """(A tolerance finer than the comparison resolves, what is undecided): warnings under significant."""
    in_force = gate_report["rule"] == "significant"
    entries = gate_report["metrics"].items()
    coarse = [f"{metric} resolves {entry['resolution']:.4f}"
              + (f" (~{entry['queries_needed']} queries would resolve {entry['allowed_drop']:.4f})"
                 if entry["queries_needed"] else "")
              for metric, entry in entries if entry.get("resolution") is not None
              and entry["allowed_drop"] < entry["resolution"]]
    undecided = [metric + (f" (~{entry['queries_needed']} queries would resolve it)"
                           if entry.get("queries_needed") else "")
                 for metric, entry in entries if entry["verdict"] == "inconclusive" and not entry.get("reason")]
    first, found = [], []
    if coarse:
        first.append(_Message("warning" if in_force else "note", "the tolerance is finer than this comparison "
                              f"resolves ({_POWER:.0%} power: two equal runs pass, a fall of twice it fails) for "
                              f"{_plural(len(coarse), 'metric', 'metrics')}", "; ".join(coarse), printed=in_force))
    if undecided:
        found.append(_Message("warning", f"inconclusive: neither a drop beyond the tolerance nor one within it is "
                              f"shown for {', '.join(undecided[:3])}" + (" and more" if len(undecided) > 3 else ""),
                              "; ".join(undecided)))
    return first, found


# --- Evidence spans on the command line ---


def _score_spans_file(args, qrels, path):
    """``_score_file`` for evidence judgments: locate the run's chunks, check the labels against --corpus
    (refusing orphaned ones: a gate cannot pass on labels that no longer point at the evidence), score."""
    if not isinstance(qrels, SpanQrels):
        raise RagEvalError("--chunks, --corpus and --min-overlap apply to evidence judgments (JSONL qrels rows "
                           "with start and end)", args.qrels)
    for option in ("--doc-id-sep", "--judged-only", "--unjudged"):
        if getattr(args, option[2:].replace("-", "_")):
            raise RagEvalError(f"{option} does not apply to evidence judgments (the {_DOC_LEVEL}* metrics score "
                               "their documents)")
    labels = None
    if args.corpus:
        check = _check_labels(qrels, _labelled_corpus(args, qrels))
        orphaned = [row for row in check.rows if row[2] == "orphaned"]
        if orphaned:
            qid, span, _, found = orphaned[0]
            raise RagEvalError(f"{len(orphaned)} evidence labels are orphaned (first: query {_clipped_repr(qid)}, "
                               f"{_clipped_repr(span.doc_id)} [{span.start}, {span.end}): {found}); see --check-labels",
                               args.qrels)
        qrels, labels = check.fixed, dict(Counter(row[2] for row in check.rows), spans=len(check.rows))
    run, _, repeated, in_run = _located_run(path, args.run_format, args.max_input_bytes)
    source = _source_name(path)
    chunk_map = _read_chunks(args.chunks, args.max_input_bytes, set(chain.from_iterable(run.values()))) if args.chunks \
        else None
    located = _chunk_locations(run, in_run, chunk_map, source, args.chunks)
    with _naming_files(qrels=args.qrels, run=path):
        result = evaluate_spans(qrels, run, located, args.k[0] if len(args.k) == 1 else args.k,
                                measures=_asked_measures(args, qrels) + args.needed,
                                gain=args.gain, min_grade=args.min_grade,
                                min_overlap=_DEFAULT_MIN_OVERLAP if args.min_overlap is None else args.min_overlap,
                                drop_unknown_queries=args.drop_unknown_queries, abstain_below=args.abstain_below)
    judged = {(qid, span.doc_id) for qid, spans in qrels.items() for span in spans}
    any_judged = any((qid, located[chunk][0]) in judged for qid, entry in run.items() for chunk in entry)
    _check_evaluated(result, path, any_judged, args.allow_partial_run, "do the run's chunks lie in the judged documents?")
    if args.measures == list(_DEFAULT_MEASURES):  # precision and iou: reported, gated when asked
        result["reported_only"] = [m for m in result["mean"] if not _measure_named(parse_metric(m)[0]).gate]
    if labels is not None:
        result["labels"] = labels
    if repeated.documents or repeated.at_least:
        result["repeated"] = dict(repeated._asdict(), run=source)
    return result, run


def _labelled_corpus(args, qrels):
    return _read_corpus(args.corpus, args.max_input_bytes, keep={span.doc_id for span in chain.from_iterable(qrels.values())})


def _label_job(args):
    """--check-labels, --fix-labels and --to-spans: jobs on the labels, not scores."""
    if args.qrels is None or args.run is not None:
        raise RagEvalError("--check-labels, --fix-labels and --to-spans take QRELS alone, no RUN")
    sources = [source for source in (args.qrels, args.chunks, args.corpus) if source]
    _check_inputs(args, sources)
    inputs = [source for source in sources if _identity(source)]  # a missing one is left to its reader to name
    for path in (args.to_spans, args.fix_labels):
        if path is not None and (not path or path == "-" or _overwrites(path, inputs)):
            raise RagEvalError("the output would overwrite an input, or is not a file name", path or "''")
    if args.to_spans and (args.check_labels or args.fix_labels or not args.chunks):
        raise RagEvalError("--to-spans needs --chunks FILE (the chunk map the labels were made with), "
                           "and is a job of its own")
    if not args.to_spans and not args.corpus:
        raise RagEvalError("--check-labels and --fix-labels need --corpus FILE (JSONL rows doc_id, text)")
    _refuse_closed_stdout()  # before anything is read
    qrels = read_qrels(args.qrels, args.qrels_format)
    if isinstance(qrels, SpanQrels) == bool(args.to_spans):
        raise RagEvalError("already evidence spans (rows with start and end)" if args.to_spans
                           else "expected evidence judgments (JSONL rows with start and end)", args.qrels)
    if args.to_spans:
        chunks = _read_chunks(args.chunks, args.max_input_bytes, set(chain.from_iterable(qrels.values())))
        corpus = _read_corpus(args.corpus, args.max_input_bytes, keep={where[0] for where in chunks.values()}) \
            if args.corpus else None
        with _naming_files(qrels=args.qrels, chunks=args.chunks, corpus=args.corpus or ""):
            spans = _to_spans(qrels, chunks, corpus)
        _write_atomically(args.to_spans, _spans_text(spans))
        if not args.quiet:
            written = _plural(sum(map(len, spans.values())), "span", "spans")
            _warn(f"rag_eval: note: wrote {written} of {_plural(len(spans), 'query', 'queries')} to {args.to_spans}")
        return EXIT_OK
    check = _check_labels(qrels, _labelled_corpus(args, qrels))
    fixed = []
    if args.fix_labels:
        _output_target(args.fix_labels)
        fixed.append((args.fix_labels, _fixed_labels_text(qrels, check, args.fix_labels)))
    _publish(_labels_table(check, args.format or "table"), fixed)
    statuses = {status for _, _, status, _ in check.rows} if args.check_labels else ()
    return EXIT_REGRESSION if "orphaned" in statuses else EXIT_INCONCLUSIVE if "unchecked" in statuses else EXIT_OK


# --- Several runs on the command line: rag_eval QRELS RUN RUN [RUN ...] (docs/compare.md) ---

_RUN_SUFFIXES = (".json", ".jsonl", ".trec", ".txt", ".tsv", ".run", ".res")
_MAX_RUN_NAME = 64
# What a report of several runs cannot hold (one run's files), and what to do instead.
_ONE_RUN_OPTIONS = ("--unjudged", "--save-baseline", "--update-baseline", "--junit", "--metrics-file", "--per-query",
                    "--judged")


class _Scored(NamedTuple):
    """One run of several (the run itself is not kept)."""

    name: str
    path: str
    result: dict


def _run_name(text):
    """``(name, path)`` of a run given as ``NAME=PATH`` or ``PATH`` (named by its file's stem).

    >>> _run_name("runs/bm25.trec.gz"), _run_name("dense=runs/e5.jsonl")
    (('bm25', 'runs/bm25.trec.gz'), ('dense', 'runs/e5.jsonl'))
    """
    name, sep, path = text.partition("=")
    if not (sep and name and path and "/" not in name and os.sep not in name and not os.path.exists(text)):
        name, path = _file_stem(text), text
    if not name.isprintable() or len(name) > _MAX_RUN_NAME:
        raise RagEvalError(f"run name {_clipped_repr(name)} must be printable and at most {_MAX_RUN_NAME} characters "
                           "(name it with NAME=PATH)")
    return name, path


def _file_stem(path):
    if path == "-":
        return "stdin"
    name = (os.path.basename(path.rstrip("/" + os.sep)) or path).removesuffix(".gz")
    root, ext = os.path.splitext(name)
    return root if root and ext.lower() in _RUN_SUFFIXES else name


def _split_runs(args):
    """``args.run``: the one run's path (or None); ``args.runs``: (name, path) of every run, the reference first."""
    given = args.run or []
    if len(given) <= 1:
        args.run, args.runs = (given[0] if given else None), []
        return
    texts = ([args.baseline_run] if args.baseline_run else []) + given
    if texts.count("-") + [args.qrels, args.baseline, args.slices].count("-") > 1:
        raise RagEvalError("only one input can be - (standard input)")
    runs = [_run_name(text) for text in texts]
    twice = _first_repeated([name for name, _ in runs])
    if twice is not None:
        raise RagEvalError(f"two runs are named {_clipped_repr(twice)}: name them NAME=PATH")
    args.run, args.runs = runs[0][1], runs


def _run_candidates(args, argv):
    """Several runs: score each in turn, gate each as one run would be, compare all with the reference."""
    for option in _ONE_RUN_OPTIONS:
        if getattr(args, option[2:].replace("-", "_")):
            raise RagEvalError(f"{option} takes one run, not several: compare first, then use it on the run you chose")
    with _hashing_inputs(bool(args.output)) as digests:
        baseline, slices, qrels = _read_judgments(args)
        args.needed = _baseline_needs(args, baseline, qrels)
        scored = [_Scored(name, path, _score_file(args, qrels, path)[0]) for name, path in args.runs]
        fingerprint = _fingerprint(args, qrels)
        if args.baseline_run:
            baseline = _baseline_from_run(scored[0].result, fingerprint)
        earlier = _earlier_labels(args, qrels)
    gated = scored[1:] if args.baseline_run else scored
    gates = {s.name: _gate_result(args, s.result, baseline, slices, fingerprint, qrels, earlier, len(gated))
             for s in gated}
    comparison = compare_runs([(s.name, s.result) for s in scored], resamples=args.resamples, seed=args.seed,
                              alpha=args.alpha, show=args.largest_drops)
    runs = [dict(build_report(s.result, gate_report=gates.get(s.name), slices=slices,
                              intervals=_mean_intervals(s.result, args.resamples, args.seed) if args.ci else None),
                 name=s.name, path=s.path, reference=s is scored[0]) for s in scored]
    verdicts = [g["verdict"] for g in gates.values() if g is not None]
    report = {"comparison": comparison, "runs": runs, "verdict": _overall_verdict(verdicts) if verdicts else UNGATED}
    if verdicts:
        report["passed"] = report["verdict"] == "pass"
    # Each message once, naming its runs; the judged share is the test set's: the lowest of any run.
    judged = {key: min(s.result["judged"][key] for s in scored) for key in scored[0].result["judged"]}
    by_line = {}
    for s in scored:
        for m in notes(dict(s.result, judged=judged), gates.get(s.name), _acknowledged(args, baseline)):
            by_line.setdefault(m, []).append(s.name)
    messages = [m._replace(line=f"{', '.join(names) if len(names) < len(scored) else 'every run'}: {m.line}")
                for m, names in by_line.items()]
    text = _COMPARISON_FORMATTERS[args.format](report, args.digits)
    files = []
    if args.output:
        full = dict(report, runs=[dict(run, per_query=_per_query_full_names(s.result))
                                  for run, s in zip(report["runs"], scored)])
        files.append((args.output, _full_output(args, argv, full, scored[0].result, fingerprint, digests, messages,
                                                scored)))
    _publish(text, files)
    if args.output:
        messages.append(_Message("note", f"wrote {_file_name(args.output)}"))
    failures = [f"{line} (run {run['name']})" for run in report["runs"] if "gate" in run
                for line in _regression_lines(run["gate"])]
    _print_messages(args, report, messages, failures, _COMPARISON_FORMATTERS["markdown"])
    codes = {_exit_code(args, gate_report) for gate_report in gates.values()}  # the worst: 1, then 3, then 0
    return next((code for code in (EXIT_REGRESSION, EXIT_INCONCLUSIVE) if code in codes), EXIT_OK)


# --- Provenance on the command line ---


def _first_repeated(items):
    return next((item for item in items if items.count(item) > 1), None)


def _provenance(args):
    """This run's ``meta`` record, learned once (git runs only when a record is written)."""
    if getattr(args, "provenance", None) is None:
        args.provenance = _provenance_meta(args.meta)
    return args.provenance


# --- Label changes on the command line ---


def _earlier_labels(args, qrels):
    """--baseline-qrels and the old run's means on them, or (None, None): gate() reads the baseline's own."""
    if args.baseline_qrels is None:
        return None, None
    old_qrels = read_qrels(args.baseline_qrels, args.qrels_format)
    if isinstance(old_qrels, SpanQrels) != isinstance(qrels, SpanQrels):  # the old run would be scored another way
        raise RagEvalError("--baseline-qrels and QRELS must be judgments of one kind (both evidence spans, or "
                           "neither): migrate the old ones with --to-spans first", args.baseline_qrels)
    path = args.runs[0][1] if args.runs else args.baseline_run
    try:
        old_on_old, _ = _score_file(args, old_qrels, path)
    except RagEvalError as exc:  # _score_file names the qrels it was given as the current ones
        raise RagEvalError(f"{exc} (scoring the old run on --baseline-qrels)") from None
    return old_qrels, old_on_old["mean"]


# === Entry point ===


class _Terminated(BaseException):
    """SIGTERM, raised where the process runs, so that its cleanup (temporary files) runs too."""


def _terminate(signum, frame):
    raise _Terminated()


def _error_line(exc, after=""):
    """The one ``rag_eval: error:`` line: control characters escaped, at most MAX_ERROR_LINE
    characters, ``after`` (what was left alone) kept whole at its end."""
    line = "rag_eval: error: " + str(exc).replace("\r", "\\r").replace("\n", "\\n")  # one line, whatever the input held
    tail = f" ({after})" if after else ""
    room = _MAX_ERROR_LINE - len(tail)
    return (line if len(line) <= room else line[:room - 3] + "...") + tail


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    if isinstance(argv, str):  # it would be read a character at a time
        raise TypeError(f"main() takes a list of arguments: main({argv.split()!r})")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = None
    try:
        args = parse_args(argv)
        return _run(args, argv)
    except SystemExit as exc:  # --help and --version end the parse with an exit code
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except RagEvalError as exc:
        left_alone = (f"{_file_name(args.baseline)} was not changed"
                      if args is not None and args.update_baseline and args.baseline else "")
        _warn(_error_line(exc, left_alone))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _warn("rag_eval: interrupted")
        return EXIT_INTERRUPTED
    except _Terminated:
        _warn("rag_eval: terminated")
        return EXIT_TERMINATED
    except BrokenPipeError:
        # The reader went away (``| head``): silence the final flush at exit.
        _silence(sys.stdout)
        return EXIT_BROKEN_PIPE
    except MemoryError:
        _warn("rag_eval: error: out of memory")
        return EXIT_ERROR
    except OSError as exc:  # a failure of the machine (a stream, a disk) met outside the readers and writers
        _warn(_error_line(RagEvalError(f"{exc.strerror or exc}", exc.filename)))
        return EXIT_ERROR


def parse_args(argv: List[str]):
    """The options as ``main`` reads ``argv``; bad usage raises RagEvalError."""
    return _build_parser().parse_args(argv)


def console_main() -> None:
    """Entry point of the ``rag-eval`` console script and ``python3 rag_eval.py``."""
    # An id a console cannot encode (cp1252 on Windows) is shown escaped rather than crashing the run.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    import signal

    # The entry point alone handles SIGTERM (a CI cancelling the job): importers' handlers are theirs.
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        code = main()
    except Exception:  # a bug: its traceback, then exit 2, never 1 (which means "regression")
        if sys.stderr is not None:
            import traceback

            try:
                traceback.print_exc()
            except OSError:
                _silence(sys.stderr)
        code = EXIT_ERROR
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.exit(code)


if __name__ == "__main__":
    console_main()
