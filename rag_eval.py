"""Score a retrieval run against relevance judgments and gate CI on regressions.

A RAG answer fails in three places: retrieval misses the evidence, ranking
pushes it below the cutoff, or generation misuses it.  This module measures
the first two with arithmetic over labels, cheap enough for every commit.

Public functions
================

=============================  ================================================
``evaluate(qrels, run, k)``     score every query; means, per-query values, unscored
``regressions(now, was, d)``    metrics that are missing or fell by more than ``d``
``gate(result, baseline)``      tolerances, floors, slices, paired statistics
``compare_paired(m, old, new)`` sign-flip test, bootstrap interval, largest drops
``read_qrels(path)``            judgments from JSON, JSONL or TREC (gzip, ``-``)
``read_run(path)``              a run from JSON, JSONL or TREC (gzip, ``-``)
``read_baseline(path)``         a flat baseline of means, or an extended one
``read_slices(path)``           query tags, for means per slice
``build_report(result)``        the report; ``FORMATTERS`` render it
``recall_at_k`` ...             one function per measure: ``(ranking, grades, k)``
``parse_metric("ndcg@10")``     ``("ndcg", 10)``; ``format_metric`` turns it back
``main(argv=None)``             the command line; returns the exit code
=============================  ================================================

>>> grades = {"a": 2, "b": 0, "c": 1}
>>> recall_at_k(["b", "a", "x"], grades, k=2)
0.5
>>> reciprocal_rank(["b", "a", "x"], grades, k=2)
0.5
>>> result = evaluate({"q1": grades}, {"q1": ["b", "a", "x"]}, k=2)
>>> result["mean"]["success@2"], result["queries"]
(1.0, 1)

Exit codes of the command line: 0 scored and no regression, 1 at least one
regression, 2 bad usage or bad input, 130 interrupted (Ctrl-C), 141 standard
output closed early.
"""

from __future__ import annotations

__all__ = [
    "Baseline", "EXIT_BROKEN_PIPE", "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_REGRESSION", "FORMATTERS",
    "GateSettings", "Interval", "MEASURES", "Measure", "PairedComparison", "RagEvalError",
    "Tolerance", "ap_at_k", "bootstrap_interval", "build_report", "clopper_pearson", "compare_paired",
    "detectable_drop", "document_of", "documents_qrels", "documents_run", "evaluate", "explain", "format_metric",
    "gate", "holm", "judged_at_k", "judged_filter", "main", "mean_intervals", "ndcg_at_k", "parse_metric", "per_query_by_metric",
    "precision_at_k", "qrels_fingerprint", "queries_needed", "read_baseline", "read_qrels", "read_run",
    "read_slices", "recall_at_k", "reciprocal_rank", "regressions", "sign_flip_test", "slice_members",
    "slice_report", "success_at_k", "unjudged_documents", "write_atomically",
]
__version__ = "0.1.0"

import json
import math
import os
import sys
from bisect import bisect_left, bisect_right
from collections import abc
from contextlib import contextmanager
from itertools import chain, groupby
from types import MappingProxyType
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Tuple, Union

# === Constants ===

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a closed pipe

DEFAULT_K = 5
DEFAULT_MAX_DROP = 0.02
DEFAULT_DIGITS = 4
GAINS = ("exp", "linear")
FORMATS = ("auto", "json", "jsonl", "trec")
MAX_GRADE = 2**31 - 1  # trec_eval reads grades into a C long; beyond that, a float loses them
MAX_EXP_GRADE = 100  # 2**grade - 1 overflows a float past 1023; far beyond any real label
LOW_JUDGED = 0.5  # below this share of judged documents, a drop may be an artefact
# Float noise: 0.52 - 0.02 is 0.5000000000000001, and a drop of exactly the
# tolerance must not count as a regression.
DROP_EPSILON = 1e-12


# The conventions every measure shares, for --help and --explain.
RULES = """\
Top k means the first k unique ids; a repeated id counts once, at its best place
(with --doc-id-sep, k counts documents).  Unjudged documents count as
non-relevant.  Scored runs are ordered by score descending, ties broken by docid
descending (trec_eval's rule; the TREC rank column is ignored).  A query without
a relevant document is not scored (listed in 'unscored'); a judged query the run
skipped scores 0 and stays in the mean."""


# === Exception ===


class RagEvalError(ValueError):
    """Bad input or usage: the message says which file (and line) and what is wrong."""

    def __init__(self, message: str, source: Optional[str] = None, line: Optional[int] = None):
        self.detail, self.source, self.line = message, source, line
        if source is not None:
            source = source if source.isprintable() else ascii(source)  # a newline in a name stays one line
            message = f"{source}:{line}: {message}" if line else f"{source}: {message}"
        super().__init__(message)


# === Data types ===

Qrels = Dict[str, Dict[str, int]]
RunEntry = Union[List[str], Dict[str, float]]
Run = Dict[str, RunEntry]
Slices = Dict[str, List[str]]  # qid -> tags


class Conventions(NamedTuple):
    """How grades become relevance and gain; recorded with every result."""

    gain: str = "exp"  # "exp": 2**grade - 1; "linear": the grade itself
    min_grade: int = 1  # lowest grade that counts as relevant
    judged_only: bool = False  # drop unjudged documents before the cutoff
    doc_id_sep: Optional[str] = None  # score documents: "guide#3" is chunk 3 of document "guide"


class Judged(NamedTuple):
    """One query's ranking after normalisation: all that a measure may read.

    ``relevant``, ``gains`` and ``judged`` follow the ranking (unique ids, best
    first), at most to the cutoff; they may stop after the last judged
    document, as the rest would be unjudged, non-relevant and of no gain, which
    no measure counts (precision divides by k, not by the length).  ``ideal``
    holds the gains of every judged document of the query, best first,
    whether retrieved or not.
    """

    relevant: List[bool]
    gains: List[float]
    judged: List[bool]
    ideal: List[float]
    num_relevant: int


# === Normalising a ranking ===


def _order_scored(scores: Mapping[str, float]) -> List[str]:
    """Score descending, ties broken by docid descending: trec_eval's order."""
    # (score, docid) pairs compare in C; a key function would cost a Python call per document.
    return [docid for _, docid in sorted(zip(scores.values(), scores), reverse=True)]


def _ranking(entry: RunEntry) -> List[str]:
    """The unique ids of a run entry, best first; a repeated id counts at its first place."""
    return _order_scored(entry) if isinstance(entry, _MAPPINGS) else list(dict.fromkeys(entry))


def judged_filter(qrels: Qrels, min_grade: int = 1) -> Callable[[str, str], bool]:
    """``--judged-only`` (trec_eval's -J) as a test of one document: ``keep(qid, docid)``.

    Unjudged documents are dropped before any cutoff applies, so the top k
    holds k judged ones.  A query without a relevant document is kept whole:
    it is not scored, and its abstention reads its whole ranking.  The
    readers apply it before they cut a ranking to its depth; ``evaluate``
    applies it to rankings it is given whole.
    """
    unscored = {qid for qid, grades in qrels.items() if all(grade < min_grade for grade in grades.values())}

    def keep(qid: str, docid: str) -> bool:
        grades = qrels.get(qid)
        return grades is None or docid in grades or qid in unscored

    return keep


def _gain(grade: int, kind: str) -> float:
    if grade <= 0:
        return 0.0
    return float(grade) if kind == "linear" else 2.0**grade - 1.0


class _Reduced(NamedTuple):
    """One query of a run, reduced while it was read to what the measures read.

    A measure reads only the grades in rank order, and every unjudged
    document has the same one; so a query is its judged documents' ranks
    (rank = 1 + the documents ordered before it, unjudged ones included)
    and how many documents it ranks.  The command line reads deep runs so:
    memory follows the judgments, not the run.
    """

    length: int  # unique documents ranked, at most the reader's depth
    judged: Tuple[Tuple[int, str], ...]  # (rank, docid) of each judged document within that depth
    tied: Tuple[int, ...]  # the cutoffs with equal scores on both sides
    best: Optional[float]  # the highest score; None for a ranked list (no scores)


class _ReducedRun(dict):
    """qid -> ``_Reduced``: a run as ``_read_run`` reduces it, with the run's queries that the qrels lack."""

    def __init__(self, queries: Dict[str, _Reduced], unknown: List[str]):
        super().__init__(queries)
        self.unknown = unknown  # sorted


def _normalise(ranking: List[str], grades: Mapping[str, int], depth: int, conv: Conventions) -> Judged:
    """Turn one query's unique ranking into what the measures read, once."""
    return _normalised([grades.get(docid, -1) for docid in ranking[:depth]], grades, depth, conv)  # -1: unjudged


def _normalised(top: List[int], grades: Mapping[str, int], depth: int, conv: Conventions) -> Judged:
    """``top``: the grades in rank order (-1: unjudged), at most ``depth``.

    Grades are never negative here (the readers drop negative ones), and a
    gain grows with the grade, so the best grades give the ideal gains.
    """
    best = sorted(grades.values(), reverse=True)[:depth]
    return Judged(
        relevant=[g >= conv.min_grade for g in top],
        gains=[_gain(g, conv.gain) if g > 0 else 0.0 for g in top],  # the test first: most documents gain nothing
        judged=[g >= 0 for g in top],
        ideal=[_gain(g, conv.gain) for g in best if g > 0],
        num_relevant=sum(g >= conv.min_grade for g in grades.values()),
    )


def _normalised_reduced(entry: _Reduced, grades: Mapping[str, int], depth: int, conv: Conventions) -> Judged:
    """``_normalised`` of a reduced query: every document unjudged but the few it names.

    The lists stop at its last judged document within ``depth``: a deep
    ranking is mostly unjudged documents after it, and stopping there leaves
    every measure's value as it is (see ``Judged``) while sparing them the
    loops over the rest.  They are made unjudged, then the judged places set.
    """
    placed = [(rank - 1, grades.get(docid, -1)) for rank, docid in entry.judged if rank <= depth]
    placed = [(index, grade) for index, grade in placed if grade >= 0]
    size = placed[-1][0] + 1 if placed else 0
    relevant, gains, judged = [False] * size, [0.0] * size, [False] * size
    for index, grade in placed:
        relevant[index] = grade >= conv.min_grade
        gains[index] = _gain(grade, conv.gain) if grade > 0 else 0.0
        judged[index] = True
    q = _normalised([], grades, depth, conv)
    return q._replace(relevant=relevant, gains=gains, judged=judged)


def _tied_at(entry: RunEntry, ranking: List[str], cutoffs: Iterable[int]) -> List[int]:
    """The cutoffs at which a scored ranking has equal scores on both sides."""
    if not isinstance(entry, _MAPPINGS):
        return []
    return [k for k in cutoffs if k < len(ranking) and entry[ranking[k - 1]] == entry[ranking[k]]]


# === Measures ===
# Each takes one normalised query and a cutoff k; all lie in [0, 1].


def _recall(q: Judged, k: int) -> float:
    return sum(q.relevant[:k]) / q.num_relevant if q.num_relevant else 0.0


def _success(q: Judged, k: int) -> float:
    return 1.0 if any(q.relevant[:k]) else 0.0


def _reciprocal_rank(q: Judged, k: int) -> float:
    for rank, relevant in enumerate(q.relevant[:k], 1):
        if relevant:
            return 1.0 / rank
    return 0.0


def _dcg(gains: Iterable[float]) -> float:
    # fsum, not sum: exactly rounded, so the same bits on every Python (sum() changed in 3.12).
    # Zero gains (most documents) add nothing, so they are skipped.
    return math.fsum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, 1) if gain)


def _ndcg(q: Judged, k: int) -> float:
    ideal = _dcg(q.ideal[:k])
    return _dcg(q.gains[:k]) / ideal if ideal > 0 else 0.0


def _precision(q: Judged, k: int) -> float:
    return sum(q.relevant[:k]) / k


def _average_precision(q: Judged, k: int) -> float:
    hits = 0
    total = 0.0
    for rank, relevant in enumerate(q.relevant[:k], 1):
        if relevant:
            hits += 1
            total += hits / rank
    return total / q.num_relevant if q.num_relevant else 0.0


def _judged(q: Judged, k: int) -> float:
    return sum(q.judged[:k]) / k


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
DEFAULT_MEASURES = tuple(m.name for m in MEASURES if m.default)


def parse_metric(text: str) -> Tuple[str, int]:
    """Split a metric name into (measure, k); the inverse of ``format_metric``.

    >>> parse_metric("ndcg@10")
    ('ndcg', 10)
    >>> format_metric(*parse_metric("ndcg@10"))
    'ndcg@10'
    """
    name, sep, cutoff = text.partition("@")
    k = _whole(cutoff)
    if not sep or name not in _BY_NAME or not k or cutoff != str(k):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise RagEvalError(f"unknown metric {shown!r} (expected measure@k with a measure from {', '.join(_BY_NAME)})")
    return name, k


def format_metric(name: str, k: int) -> str:
    """The one spelling of a metric, used as its key everywhere."""
    return f"{name}@{k}"


def _measure_of_ranking(name: str, ranking: List[str], grades: Mapping[str, int], k: int, **conventions) -> float:
    _check_k(k)
    conv = Conventions(**conventions)
    _check_conventions(conv)
    _check_grades(grades, "grades")
    if not isinstance(ranking, (list, *_MAPPINGS)):
        raise RagEvalError(f"expected a list of document ids or an object of document -> score, got {_kind(ranking)}",
                           "ranking")
    _check_run({"ranking": ranking}, "ranking")
    if conv.doc_id_sep is not None:
        grades = documents_qrels({"q": grades}, conv.doc_id_sep)["q"]
        ranking = documents_run({"q": ranking}, conv.doc_id_sep)["q"]
    _check_gain_range({"q": grades}, conv)
    ranking = _ranking(ranking)
    if conv.judged_only:
        keep = judged_filter({"q": grades}, conv.min_grade)
        ranking = [docid for docid in ranking if keep("q", docid)]
    return _BY_NAME[name].compute(_normalise(ranking, grades, k, conv), k)


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


def _check_k(k) -> None:
    if not _is_int(k) or k < 1:
        raise RagEvalError(f"k must be a positive integer, got {k!r}")


def _check_measures(measures: Iterable[str]) -> List[str]:
    names = list(measures)
    unknown = [name for name in names if name not in _BY_NAME]
    if unknown:
        listed = ", ".join(repr(name) for name in unknown)
        raise RagEvalError(f"unknown measure {listed} (choose from {', '.join(_BY_NAME)})")
    return list(dict.fromkeys(names))


def _check_cutoffs(k) -> List[int]:
    if _is_int(k):
        cutoffs = [k]
    elif isinstance(k, (list, tuple, set, frozenset, range)) and k:
        cutoffs = list(k)
    else:
        raise RagEvalError(f"k must be a positive integer or a non-empty list of them, got {k!r}")
    for cutoff in cutoffs:
        _check_k(cutoff)
    return sorted(set(cutoffs))


def _check_gain_range(qrels: Qrels, conv: Conventions) -> None:
    """2**grade overflows a float past grade 1023; such grades are a labelling error."""
    if conv.gain == "exp":
        top = max((grade for docs in qrels.values() for grade in docs.values()), default=0)
        if top > MAX_EXP_GRADE:
            raise RagEvalError(f"grade {top} is too large for the exponential gain 2**grade - 1 "
                               f"(at most {MAX_EXP_GRADE}; --gain linear takes any)", "qrels")


def _check_conventions(conv: Conventions) -> None:
    if conv.doc_id_sep is not None and (not isinstance(conv.doc_id_sep, str) or not conv.doc_id_sep):
        raise RagEvalError(f"doc_id_sep must be a non-empty string, got {conv.doc_id_sep!r}")
    if conv.judged_only not in (True, False):
        raise RagEvalError(f"judged_only must be true or false, got {conv.judged_only!r}")
    if conv.gain not in GAINS:
        raise RagEvalError(f"gain must be one of {', '.join(GAINS)}, got {conv.gain!r}")
    if not _is_int(conv.min_grade) or conv.min_grade < 1:
        raise RagEvalError(f"min grade must be a positive integer, got {conv.min_grade!r}")


def evaluate(
    qrels: Qrels,
    run: Run,
    k: Union[int, Iterable[int]] = DEFAULT_K,
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

    Returns ``{"k", "queries", "unscored", "mean", "per_query", ...}``:

    - ``mean`` maps ``measure@k`` to the arithmetic mean over scored queries;
    - ``per_query[qid]`` maps each measure name (``measure@k`` when ``k`` is a
      list of cutoffs) to its value;
    - ``queries`` is the number of scored queries; ``unscored`` lists the
      queries with no relevant document (not scored); ``skipped`` the scored
      queries the run returned nothing for (with ``judged_only``: nothing
      judged); they score 0 and stay in the mean;
      ``dropped`` the run's queries that the qrels lack (only with
      ``drop_unknown_queries``; otherwise they are an error);
    - ``ties`` counts, per cutoff, the queries whose scores tie across it;
    - ``judged`` maps ``judged@k`` to its mean, always (for the warning);
    - ``abstention``: of the unscored queries, those for which the run
      returned nothing (no entry, an empty ranking, or no score at or above
      ``abstain_below``): the right answer to an unanswerable question.

    With ``doc_id_sep``, chunk ids become document ids first (see
    ``document_of``): a document is judged by its best chunk, ranked at its
    best chunk's place, and counts once.

    Raises ``RagEvalError`` (a ``ValueError``) on invalid input.
    """
    single = _is_int(k)
    cutoffs = _check_cutoffs(k)
    names = _check_measures(DEFAULT_MEASURES if measures is None else measures)
    if not names:
        raise RagEvalError("no measure chosen")
    conv = Conventions(gain, min_grade, judged_only, doc_id_sep)
    _check_conventions(conv)
    _check_qrels(qrels)
    reduced = isinstance(run, _ReducedRun)  # checked, and mapped to documents, as it was read
    if not reduced:
        _check_run(run)
    if doc_id_sep is not None:
        qrels = documents_qrels(qrels, doc_id_sep)
        run = run if reduced else documents_run(run, doc_id_sep)
    _check_gain_range(qrels, conv)
    if abstain_below is not None and not _is_finite(abstain_below):
        raise RagEvalError(f"abstain_below must be a finite number, got {abstain_below!r}")

    unknown = run.unknown if reduced else sorted(set(run) - set(qrels))
    if unknown and not drop_unknown_queries:
        raise RagEvalError(
            f"{len(unknown)} run queries are not in the qrels (first: {unknown[0]!r}); "
            "drop them with --drop-unknown-queries",
            "run",
        )
    depth = cutoffs[-1]
    # (per-query key, measure, cutoff) for every value of a query, in output order
    columns = [(name if single else format_metric(name, cutoff), _BY_NAME[name].compute, cutoff)
               for cutoff in cutoffs for name in names]
    per_query: Dict[str, Dict[str, float]] = {}
    unscored: List[str] = []
    skipped: List[str] = []
    ties = {cutoff: 0 for cutoff in cutoffs}
    judged_sum = {cutoff: 0.0 for cutoff in cutoffs}
    keep = judged_filter(qrels, min_grade) if judged_only else None
    for qid in sorted(qrels):
        grades = qrels[qid]
        entry = run.get(qid, [])
        if type(entry) is _Reduced:  # the reader cut, filtered and ranked it already
            q, length, tied = _normalised_reduced(entry, grades, depth, conv), entry.length, entry.tied
        else:
            ranking = _ranking(entry)
            if keep is not None:
                ranking = [docid for docid in ranking if keep(qid, docid)]
            q = _normalise(ranking, grades, depth, conv)
            length, tied = len(ranking), _tied_at(entry, ranking, cutoffs)
        if q.num_relevant == 0:
            unscored.append(qid)
            continue
        if not length:  # nothing returned (or, with judged_only, nothing judged): every measure is 0
            skipped.append(qid)
        for cutoff in tied:
            ties[cutoff] += 1
        for cutoff in cutoffs:
            judged_sum[cutoff] += _judged(q, cutoff)
        per_query[qid] = {key: compute(q, cutoff) for key, compute, cutoff in columns}

    if not per_query:
        raise RagEvalError("no query has a relevant document: nothing to score", "qrels")
    count = len(per_query)
    mean = {}
    for cutoff in cutoffs:
        for name in names:
            key = name if single else format_metric(name, cutoff)
            mean[format_metric(name, cutoff)] = math.fsum(values[key] for values in per_query.values()) / count
    return {
        "k": k if single else cutoffs,
        "queries": count,
        "unscored": unscored,
        "skipped": skipped,
        "dropped": unknown,
        "mean": mean,
        "per_query": per_query,
        "ties": {str(cutoff): n for cutoff, n in ties.items()},
        "judged": {format_metric("judged", cutoff): s / count for cutoff, s in judged_sum.items()},
        "abstention": _abstention(unscored, run, abstain_below),
        "conventions": conv._asdict(),
    }


def _abstention(unscored: List[str], run: Run, abstain_below: Optional[float]) -> dict:
    """How many unanswerable queries the run left unanswered, as it should."""
    def abstained(qid: str) -> bool:
        entry = run.get(qid)
        if not entry or (type(entry) is _Reduced and not entry.length):
            return True
        if abstain_below is None:
            return False
        best = entry.best if type(entry) is _Reduced else max(entry.values()) if isinstance(entry, _MAPPINGS) else None
        if best is None:
            raise RagEvalError(f"query {_brief(qid)}: --abstain-below needs scores, and this ranking has none", "run")
        return best < abstain_below

    quiet = [qid for qid in unscored if abstained(qid)]
    return {"queries": len(unscored), "abstained": quiet, "share": len(quiet) / len(unscored) if unscored else None}


def document_of(docid: str, sep: str) -> str:
    """The document a chunk id belongs to: the part before the first ``sep``.

    >>> document_of("refund-policy#2", "#"), document_of("msmarco_v2.1_doc_00_8800#4_1633", "#")
    ('refund-policy', 'msmarco_v2.1_doc_00_8800')
    """
    return docid.split(sep, 1)[0] or docid


def documents_qrels(qrels: Qrels, sep: str) -> Qrels:
    """Judgments per document: the best grade among the document's chunks."""
    mapped: Qrels = {}
    for qid, docs in qrels.items():
        best = mapped[qid] = {}
        for docid, grade in docs.items():
            document = document_of(docid, sep)
            best[document] = max(grade, best.get(document, grade))
    return mapped


def documents_run(run: Run, sep: str) -> Run:
    """A run of documents: each ranked at its best chunk's place (a score: the best chunk's)."""
    mapped: Run = {}
    for qid, entry in run.items():
        if isinstance(entry, _MAPPINGS):
            best: Dict[str, float] = {}
            for docid, score in entry.items():
                document = document_of(docid, sep)
                best[document] = max(score, best.get(document, score))
            mapped[qid] = best
        else:
            mapped[qid] = list(dict.fromkeys(document_of(docid, sep) for docid in entry))
    return mapped


def unjudged_documents(qrels: Qrels, run: Run, k: int, doc_id_sep: Optional[str] = None) -> List[Tuple[str, str, int]]:
    """``(qid, docid, rank)`` for every unjudged document in a judged query's top k.

    The most consequential first: by rank (an unjudged document at rank 1
    moves every measure; one at rank k barely moves nDCG), then by query.
    """
    if doc_id_sep is not None:
        qrels, run = documents_qrels(qrels, doc_id_sep), documents_run(run, doc_id_sep)
    found = []
    for qid in sorted(qrels):
        ranking = _ranking(run.get(qid, []))
        found.extend((qid, docid, rank) for rank, docid in enumerate(ranking[:k], 1) if docid not in qrels[qid])
    return sorted(found, key=lambda row: (row[2], row[0], row[1]))


# --- Validating in-memory inputs (files and library callers alike) ---


def _check_qrels(qrels, source: str = "qrels") -> None:
    if not isinstance(qrels, _MAPPINGS):
        raise RagEvalError(f"expected a JSON object of query -> {{document: grade}}, got {_kind(qrels)}", source)
    judgments = list(qrels.values())
    if _all_of(qrels, str) and _all_of(judgments, dict) and _all_of(chain.from_iterable(judgments), str):
        grades = list(chain.from_iterable(map(dict.values, judgments)))
        if _all_of(grades, int) and 0 <= min(grades, default=0) and max(grades, default=0) <= MAX_GRADE:
            return  # the common case, checked in C for all queries at once; the loop below says what is wrong
    for qid, docs in qrels.items():
        _string_id(qid, "query id", source)
        _check_grades(docs, source, qid)


def _check_grades(docs, source: str, qid: Optional[str] = None) -> None:
    """One query's judgments: an object of document id -> grade."""
    query = "" if qid is None else f"query {_brief(qid)}"
    if not isinstance(docs, _MAPPINGS):
        raise RagEvalError(f"{query}{': ' if query else ''}expected an object of document -> grade, got {_kind(docs)}",
                           source)
    if _all_of(docs, str) and _all_of(docs.values(), int) and 0 <= min(docs.values(), default=0) \
            and max(docs.values(), default=0) <= MAX_GRADE:
        return  # the common case, checked in C; the loop below finds what is wrong otherwise
    for docid, grade in docs.items():
        _string_id(docid, "document id", source)
        if not _is_int(grade) or not 0 <= grade <= MAX_GRADE:
            raise RagEvalError(f"{query}{', ' if query else ''}document {_brief(docid)}: grade must be a non-negative integer "
                               f"(at most {MAX_GRADE}), got {_brief(grade)}", source)


def _all_of(values: Iterable, *types: type) -> bool:
    """Every value is exactly of one of ``types`` (so not a bool where an int is wanted)."""
    return set(map(type, values)) <= set(types)


def _check_run(run, source: str = "run") -> None:
    if not isinstance(run, _MAPPINGS):
        raise RagEvalError(f"expected a JSON object of query -> ranking, got {_kind(run)}", source)
    entries = list(run.values())
    if _all_of(run, str) and (_all_of(entries, list) or _all_of(entries, dict)) \
            and _all_of(chain.from_iterable(entries), str):  # the ids of lists, or the keys of dicts
        scores = list(chain.from_iterable(map(dict.values, entries))) if entries and type(entries[0]) is dict else []
        if _all_of(scores, float, int) and _all_finite(scores):
            return  # the common case, checked in C for all queries at once; the loop below says what is wrong
    for qid, entry in run.items():
        _string_id(qid, "query id", source)
        if isinstance(entry, list):
            if _all_of(entry, str):
                continue  # the common case, checked in C
            for docid in entry:
                if not isinstance(docid, str):
                    raise RagEvalError(f"query {qid!r}: ranking must be a list of strings, found {_kind(docid)}", source)
        elif isinstance(entry, _MAPPINGS):
            if _all_of(entry, str) and _all_of(entry.values(), float, int) and _all_finite(entry.values()):
                continue  # the common case, checked in C
            for docid, score in entry.items():
                _string_id(docid, "document id", source)
                if not _is_finite(score):
                    raise RagEvalError(f"query {qid!r}, document {docid!r}: score must be a finite number, got {_brief(score)}", source)
        else:
            raise RagEvalError(
                f"query {qid!r}: expected a list of document ids or an object of document -> score, got {_kind(entry)}",
                source,
            )


# === Statistics ===
# Paired comparisons and intervals.  Randomness comes only from a seeded
# random.Random, so the same inputs give the same bytes out on every Python.

DEFAULT_RESAMPLES = 10_000
DEFAULT_ALPHA = 0.05
DEFAULT_SEED = 0
CONFIDENCE = 0.95
POWER = 0.80
EXACT_SIGN_FLIP_MAX = 16  # up to this many differing queries, enumerate all 2**n sign patterns
ORDINARY_BOOTSTRAP_MAX = 250  # above this many queries, the double-or-nothing bootstrap
# Resampled values are summed as whole multiples of 2**-30.  Sums of up to
# 2**22 of them stay below 2**53, where floats hold integers exactly, so the
# results do not depend on the float summation order (which changed in Python
# 3.12).  Values such as 1/3 land between grid points: a sum of n of them may
# be off by n/2 units, and comparisons allow for that.
FIXED_ONE = 1 << 30


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
    unresolvable: bool  # no outcome of so few differing queries could reach alpha
    interval: Interval  # bootstrap CONFIDENCE interval of mean_delta
    hit_to_miss: List[str]  # queries that scored above 0 before and 0 after
    largest_drops: List[Tuple[str, float]]  # (qid, delta), the worst first
    spread: Optional[float]  # standard deviation of the deltas (None below 2 queries)


def _fixed(value: float) -> int:
    return round(value * FIXED_ONE)


def _random_halves(values: List[int], resamples: int, rng) -> Iterator[Tuple[float, bytearray]]:
    """For each resample, keep each value with probability 1/2: yield (sum kept, choice bits).

    ``values`` must not be empty: an empty table has no byte to choose with.

    Eight values share a table of their 256 subset sums, so a resample costs
    one lookup per eight values, with one random byte choosing each subset.
    The tables are arrays of floats holding whole numbers (see FIXED_ONE):
    compact, so lookups stay in the processor's cache, and exact.
    """
    from array import array
    from operator import getitem

    tables = []
    for start in range(0, len(values), 8):
        table = [0]
        for value in values[start:start + 8]:
            table += [subtotal + value for subtotal in table]
        tables.append(array("d", table))
    last_bits = (1 << (len(values) % 8 or 8)) - 1  # the last block may hold fewer than eight
    for _ in range(resamples):
        chosen = bytearray(rng.randbytes(len(tables)))
        chosen[-1] &= last_bits
        yield sum(map(getitem, tables, chosen)), chosen


_POPCOUNT = bytes(bin(byte).count("1") for byte in range(256))


def _heads(coins: int, rng) -> int:
    """How many of ``coins`` fair coin flips come up heads: a Binomial(coins, 1/2) draw."""
    whole, extra = divmod(coins, 8)
    heads = sum(rng.randbytes(whole).translate(_POPCOUNT))
    return heads + (_POPCOUNT[rng.getrandbits(extra)] if extra else 0)


def sign_flip_test(deltas: Iterable[float], resamples: int = DEFAULT_RESAMPLES, rng=None) -> Tuple[float, bool]:
    """Two-sided paired randomization test of mean(deltas) = 0; returns (p, exact).

    Under the null hypothesis each query's difference is as likely to have the
    other sign (Fisher's randomization test; Smucker, Allan & Carterette 2007
    recommend it for IR).  With few differing queries every sign pattern is
    enumerated and p is exact; otherwise ``resamples`` random patterns give
    p = (1 + as extreme) / (1 + resamples), never 0.

    >>> sign_flip_test([0.5, 0.5, 0.5])  # 2 of the 8 patterns are as extreme
    (0.25, True)
    """
    import random

    nonzero = [q for q in map(_fixed, deltas) if q]
    if not nonzero:
        return 1.0, True
    total = sum(nonzero)
    # As extreme as observed, up to the grid's rounding: 1/3 + 1/3 ties 2/3 here as it does in arithmetic.
    threshold = abs(total) - len(nonzero)
    if len(nonzero) <= EXACT_SIGN_FLIP_MAX:
        subtotals = [0]
        for value in nonzero:
            subtotals += [subtotal + value for subtotal in subtotals]
        # Flipping the signs of a subset S turns the sum into total - 2 * sum(S).
        extreme = sum(1 for subtotal in subtotals if abs(total - 2 * subtotal) >= threshold)
        return extreme / len(subtotals), True
    rng = rng or random.Random(DEFAULT_SEED)
    extreme = sum(1 for flipped, _ in _random_halves(nonzero, resamples, rng) if abs(total - 2 * flipped) >= threshold)
    return (1 + extreme) / (1 + resamples), False


def bootstrap_interval(
    values: Iterable[float], resamples: int = DEFAULT_RESAMPLES, rng=None, confidence: float = CONFIDENCE
) -> Interval:
    """Percentile bootstrap interval of the mean (Efron & Tibshirani 1993).

    Up to ORDINARY_BOOTSTRAP_MAX values each resample draws n values with
    replacement.  Above it, the double-or-nothing bootstrap (Owen & Eckles
    2012) weights each value 0 or 2 with probability 1/2, the same mean and
    variance of weights at an eighth of the cost.

    >>> bootstrap_interval([0.25, 0.25, 0.25])
    Interval(low=0.25, high=0.25)
    """
    import random

    values = list(values)
    n = len(values)
    if n == 0:
        raise RagEvalError("no values to bootstrap")
    # Resample the distances from the first value, then add it back: constant
    # values give exactly [value, value], and the grid only rounds the spread.
    origin = values[0]
    fixed = [_fixed(value - origin) for value in values]
    rng = rng or random.Random(DEFAULT_SEED)
    if not any(fixed):
        return Interval(origin, origin)
    if n <= ORDINARY_BOOTSTRAP_MAX:
        means = [sum(rng.choices(fixed, k=n)) / n for _ in range(resamples)]
    else:
        nonzero = [q for q in fixed if q]
        means = [mean for _, mean in _double_or_nothing(nonzero, n - len(nonzero), resamples, rng)]
    low, high = _percentiles(means, confidence)
    return Interval(origin + low, origin + high)


def _double_or_nothing(nonzero: List[int], zeros: int, resamples: int, rng) -> Iterator[Tuple[float, float]]:
    """Random halves of the values (the zeros only flip coins): yield (sum kept, mean kept) in grid units."""
    for kept_sum, chosen in _random_halves(nonzero, resamples, rng):
        kept = sum(chosen.translate(_POPCOUNT)) + _heads(zeros, rng)
        if kept:  # an empty half (chance 2**-n) has no mean
            yield kept_sum, kept_sum / kept


def _percentiles(means: List[float], confidence: float) -> Tuple[float, float]:
    """The percentile interval of resampled means given in grid units, as values."""
    means.sort()
    tail = (1 - confidence) / 2
    low = means[max(0, math.ceil(tail * len(means)) - 1)]
    high = means[min(len(means) - 1, math.ceil((1 - tail) * len(means)) - 1)]
    return low / FIXED_ONE, high / FIXED_ONE


def _paired_resampling(deltas: List[float], resamples: int, rng) -> Tuple[float, bool, Interval]:
    """The sign-flip p-value (and whether exact) and the bootstrap interval of one metric's deltas.

    With many queries, both resample random halves: a half S of the changed
    queries gives the flipped statistic total - 2 * sum(S) and, with a coin
    flipped for each unchanged query, the double-or-nothing mean.  One pass
    then serves both, at half the cost; each uses every resample just as it
    would alone.
    """
    fixed = [_fixed(delta) for delta in deltas]
    nonzero = [q for q in fixed if q]
    if len(nonzero) <= EXACT_SIGN_FLIP_MAX or len(fixed) <= ORDINARY_BOOTSTRAP_MAX:
        p_value, exact = sign_flip_test(deltas, resamples, rng)
        return p_value, exact, bootstrap_interval(deltas, resamples, rng)
    total = sum(nonzero)
    threshold = abs(total) - len(nonzero)  # as in sign_flip_test: ties up to the grid's rounding
    extreme = 0
    means = []
    for kept_sum, mean in _double_or_nothing(nonzero, len(fixed) - len(nonzero), resamples, rng):
        extreme += abs(total - 2 * kept_sum) >= threshold
        means.append(mean)
    return (1 + extreme) / (1 + resamples), False, Interval(*_percentiles(means, CONFIDENCE))


def _regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), by the continued fraction evaluated with Lentz's method."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast only on this side
        return 1.0 - _regularized_beta(1.0 - x, b, a)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * fraction / a


def _beta_quantile(p: float, a: float, b: float) -> float:
    """The x with I_x(a, b) = p, by bisection (I is increasing in x)."""
    low, high = 0.0, 1.0
    for _ in range(100):
        middle = (low + high) / 2
        if _regularized_beta(middle, a, b) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def clopper_pearson(successes: int, trials: int, confidence: float = CONFIDENCE) -> Interval:
    """Exact binomial interval for a share of 0/1 outcomes (Clopper & Pearson 1934).

    >>> [round(x, 4) for x in clopper_pearson(5, 10)]
    [0.1871, 0.8129]
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise RagEvalError(f"clopper_pearson needs 0 <= successes <= trials >= 1, got {successes}/{trials}")
    tail = (1 - confidence) / 2
    low = 0.0 if successes == 0 else _beta_quantile(tail, successes, trials - successes + 1)
    high = 1.0 if successes == trials else _beta_quantile(1 - tail, successes + 1, trials - successes)
    return Interval(low, high)


def holm(p_values: Mapping[str, float]) -> Dict[str, float]:
    """Holm-Bonferroni adjusted p-values: the family-wise error stays at alpha (Holm 1979).

    >>> holm({"a": 0.01, "b": 0.04, "c": 0.03})
    {'a': 0.03, 'c': 0.06, 'b': 0.06}
    """
    ordered = sorted(p_values.items(), key=lambda item: (item[1], item[0]))
    adjusted: Dict[str, float] = {}
    running = 0.0
    for rank, (name, p) in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p))
        adjusted[name] = running
    return adjusted


def _standard_deviation(values: List[float]) -> Optional[float]:
    """Sample standard deviation with exactly rounded sums: the same bits on
    every Python (statistics.stdev changed its arithmetic in 3.11)."""
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1))


def _z(probability: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(probability)


def detectable_drop(spread: Optional[float], queries: int, alpha: float = DEFAULT_ALPHA, power: float = POWER) -> Optional[float]:
    """The mean drop a paired test on ``queries`` detects with ``power``.

    Normal approximation: (z(1 - alpha/2) + z(power)) * spread / sqrt(n),
    with ``spread`` the standard deviation of the per-query deltas; None when
    there is no spread to estimate from.

    >>> round(detectable_drop(0.2, 100), 4)  # (1.96 + 0.8416) * 0.2 / 10
    0.056
    """
    if not spread or queries < 2:
        return None
    return (_z(1 - alpha / 2) + _z(power)) * spread / math.sqrt(queries)


def queries_needed(spread: Optional[float], drop: float, alpha: float = DEFAULT_ALPHA, power: float = POWER) -> Optional[int]:
    """Queries a paired test needs to detect a mean drop of ``drop`` with ``power``.

    >>> queries_needed(0.2, 0.056)  # the inverse of the example above
    101
    """
    if not spread or drop <= 0:
        return None
    needed = ((_z(1 - alpha / 2) + _z(power)) * spread / drop) ** 2
    return math.ceil(needed * (1 - 1e-12))  # 100.00000000000001 queries are 100


def _smallest_p(differing: int, resamples: int) -> float:
    """The smallest p-value the sign-flip test can give: 2 of the 2**n patterns,
    or one sampled pattern in resamples + 1."""
    if differing <= EXACT_SIGN_FLIP_MAX:
        return 2.0 ** (1 - differing) if differing else 1.0
    return 1 / (1 + resamples)


def compare_paired(
    metric: str,
    before: Mapping[str, float],
    after: Mapping[str, float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    alpha: float = DEFAULT_ALPHA,
    show: int = 5,
) -> PairedComparison:
    """Compare one metric's per-query scores on the queries scored on both sides."""
    import random

    common = sorted(set(before) & set(after))
    if not common:
        raise RagEvalError(f"{metric}: no query is scored on both sides")
    deltas = [after[qid] - before[qid] for qid in common]
    signs = [_fixed(delta) for delta in deltas]
    differing = sum(1 for q in signs if q)
    # One generator per metric, seeded by its name: adding a metric changes no other's numbers.
    rng = random.Random(f"rag_eval:{seed}:{metric}")
    p_value, exact, interval = _paired_resampling(deltas, resamples, rng)
    drops = sorted((delta, qid) for qid, delta, q in zip(common, deltas, signs) if q < 0)
    return PairedComparison(
        metric=metric,
        queries=len(common),
        mean_delta=math.fsum(deltas) / len(common),
        improved=sum(1 for q in signs if q > 0),
        worse=sum(1 for q in signs if q < 0),
        same=len(common) - differing,
        p_value=p_value,
        exact=exact,
        unresolvable=_smallest_p(differing, resamples) > alpha,
        interval=interval,
        hit_to_miss=[qid for qid in common if before[qid] > 0 and after[qid] == 0],
        largest_drops=[(qid, delta) for delta, qid in drops[:show]],
        spread=_standard_deviation(deltas),
    )


def mean_intervals(result: dict, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> Dict[str, Interval]:
    """A CONFIDENCE interval for every mean: Clopper-Pearson for 0/1 measures, a bootstrap otherwise."""
    import random

    intervals = {}
    for metric, scores in sorted(per_query_by_metric(result).items()):
        values = [scores[qid] for qid in sorted(scores)]
        if _BY_NAME[parse_metric(metric)[0]].binary:
            intervals[metric] = clopper_pearson(sum(1 for v in values if v == 1.0), len(values))
        else:
            intervals[metric] = bootstrap_interval(values, resamples, random.Random(f"rag_eval:{seed}:ci:{metric}"))
    return intervals


# === Baseline and gate ===

BASELINE_FORMAT = "rag_eval-baseline/1"
TIE_RULE = "score descending, then docid descending"
GATE_RULES = ("drop", "significant")


class Baseline(NamedTuple):
    """A baseline file: flat means (metric -> mean), or an extended one with provenance."""

    means: Dict[str, float]
    per_query: Optional[Dict[str, Dict[str, float]]] = None  # metric -> qid -> value
    conventions: Optional[dict] = None
    qrels_sha256: Optional[str] = None


class Tolerance(NamedTuple):
    """How far a mean may fall below its baseline: absolute, or a share of the baseline."""

    amount: float
    relative: bool = False

    def allowed(self, was: float) -> float:
        return self.amount * abs(was) if self.relative else self.amount

    def __str__(self) -> str:
        return f"{self.amount * 100:g}%" if self.relative else f"{self.amount:g}"


def read_baseline(path: str) -> Baseline:
    """Read a baseline: a flat JSON object of metric -> mean, or an extended baseline.

    An extended baseline (written by ``--save-baseline``) also holds the
    per-query scores, the conventions and the sha256 of the qrels.
    """
    with _opened(path) as inp:
        data = _parse_json(inp, "baseline", MAX_SMALL_JSON)
    path = inp.source
    if not isinstance(data, dict):
        raise RagEvalError(f"expected a JSON object of metric -> number, got {_kind(data)}", path)
    if "format" not in data:
        return Baseline(_check_means(data, path, metrics=True))
    return _extended_baseline(data, path)


def _extended_baseline(data: dict, path: str) -> Baseline:
    """An extended baseline's record, checked part by part."""
    if data["format"] != BASELINE_FORMAT:
        raise RagEvalError(f"unknown baseline format {data['format']!r} (expected {BASELINE_FORMAT!r})", path)
    missing = [key for key in ("mean", "per_query", "conventions", "qrels_sha256") if key not in data]
    if missing:
        raise RagEvalError(f"extended baseline lacks {', '.join(missing)}", path)
    per_query = data["per_query"]
    if not isinstance(per_query, dict) or not all(isinstance(v, dict) for v in per_query.values()):
        raise RagEvalError("per_query must map metric -> {query: value}", path)
    if not isinstance(data["conventions"], dict) or not isinstance(data["qrels_sha256"], str):
        raise RagEvalError("conventions must be an object and qrels_sha256 a string", path)
    _check_means(per_query, path, metrics=True, values=False)
    means = _check_means(data["mean"], path, metrics=True)
    scores = {metric: _check_means(values, path, metric) for metric, values in per_query.items()}
    cutoffs = data["conventions"].get("k")
    if not isinstance(cutoffs, list) or not cutoffs or not all(_is_int(k) and k > 0 for k in cutoffs):
        raise RagEvalError(f"conventions.k must be a list of positive integers, got {_brief(cutoffs)}", path)
    return Baseline(means, scores, data["conventions"], data["qrels_sha256"])


def _check_means(table, path: str, where: str = "", metrics: bool = False, values: bool = True) -> Dict[str, float]:
    """Check a baseline's object of name -> number; with ``metrics``, every name
    must be a metric (``ndcg@10``) or a slice's metric (``pricing:ndcg@10``)."""
    if not isinstance(table, dict):
        raise RagEvalError(f"expected an object of name -> number, got {_kind(table)}", path)
    prefix = f"{where}: " if where else ""
    for name, value in table.items():
        if metrics and not _is_metric_key(name):
            raise RagEvalError(f"{prefix}baseline names {_brief(name)}, which is not a metric "
                               "(measure@k, or slice:measure@k)", path)
        if values and not _is_finite(value):
            raise RagEvalError(f"{prefix}baseline value of {_brief(name)} must be a finite number, got {_brief(value)}",
                               path)
    return {name: float(value) for name, value in table.items()} if values else {}


def _is_metric_key(key: str) -> bool:
    tag, _, metric = key.rpartition(":")
    try:
        parse_metric(metric)
    except RagEvalError:
        return False
    return tag.isprintable()


def qrels_fingerprint(qrels: Qrels) -> str:
    """sha256 of the judgments in a canonical form: reformatting or gzipping the
    file does not change it, changing a judgment does."""
    import hashlib

    # JSON with sorted keys: canonical, and no id can pass for two (a tab inside an id stays escaped).
    canonical = json.dumps(qrels, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _conventions_record(result: dict) -> dict:
    conv = result["conventions"]
    cutoffs = result["k"] if isinstance(result["k"], list) else [result["k"]]
    return {"k": cutoffs, "gain": conv["gain"], "min_grade": conv["min_grade"],
            "judged_only": conv["judged_only"], "doc_id_sep": conv["doc_id_sep"], "ties": TIE_RULE}


def _differences(baseline: Baseline, result: dict, qrels_sha256: str) -> List[str]:
    """What differs between how an extended baseline and this result were made."""
    if baseline.conventions is None:
        return []
    now = _conventions_record(result)
    found = [f"{key}: baseline {baseline.conventions.get(key)!r}, now {value!r}"
             for key, value in now.items() if key != "k" and baseline.conventions.get(key) != value]
    # More cutoffs than the baseline's are fine; one it has and this run lacks is not.
    lacking = sorted(set(baseline.conventions.get("k") or []) - set(now["k"]))
    if lacking:
        found.append(f"k: baseline {baseline.conventions.get('k')!r}, now {now['k']!r}")
    if baseline.qrels_sha256 != qrels_sha256:
        found.append(f"qrels: baseline sha256 {baseline.qrels_sha256[:12]}..., now {qrels_sha256[:12]}...")
    return found


def _baseline_record(result: dict, qrels_sha256: str, keep_from: Optional[Baseline] = None) -> dict:
    """The extended baseline of a result.

    With ``keep_from`` (``--ratchet``), each metric whose mean was better in
    that older baseline keeps the older mean with the older per-query scores
    (none, from a flat baseline), so that a mean always matches its own
    per-query scores.
    """
    import time

    means, per_query = dict(result["mean"]), per_query_by_metric(result)
    if keep_from is not None:
        for metric, old in keep_from.means.items():
            if metric in means and old > means[metric]:
                means[metric] = old
                if metric in (keep_from.per_query or {}):
                    per_query[metric] = keep_from.per_query[metric]
                else:  # a flat baseline has no per-query scores to go with its mean: keep none
                    del per_query[metric]
    # SOURCE_DATE_EPOCH, the reproducible-builds convention, pins the time for byte-identical files.
    pinned = _whole(os.environ.get("SOURCE_DATE_EPOCH", ""), digits=11)  # malformed: ignored, as the convention says
    stamp = time.time() if pinned is None else pinned
    return {
        "format": BASELINE_FORMAT,
        "tool": f"rag_eval {__version__}",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp)),
        "qrels_sha256": qrels_sha256,
        "conventions": _conventions_record(result),
        "mean": means,
        "per_query": per_query,
        "unscored": result["unscored"],
    }


def _baseline_text(result: dict, fingerprint: str, keep_from: Optional[Baseline] = None) -> str:
    return json.dumps(_baseline_record(result, fingerprint, keep_from), sort_keys=True, indent=2) + "\n"


def per_query_by_metric(result: dict) -> Dict[str, Dict[str, float]]:
    """``{metric: {qid: value}}`` with full metric names, whatever the form of ``k``."""
    single = not isinstance(result["k"], list)
    table: Dict[str, Dict[str, float]] = {}
    for qid, values in result["per_query"].items():
        for key, value in values.items():
            metric = format_metric(key, result["k"]) if single else key
            table.setdefault(metric, {})[qid] = value
    return table


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``.

    A reader sees the old file or the new one, never a partial one, even if
    the process is killed mid-write.
    """
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise RagEvalError(f"cannot write: {exc.strerror or exc}", path) from None
    try:
        os.chmod(temporary, _file_mode(path))  # mkstemp makes it private (0600)
        # backslashreplace: a lone surrogate from a JSON "\\udfff" escape cannot crash the write.
        with os.fdopen(handle, "w", encoding="utf-8", errors="backslashreplace", newline="\n") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException as exc:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise RagEvalError(f"cannot write: {exc.strerror or exc}", path) from None
        raise


def _file_mode(path: str) -> int:
    """The permissions the file has, or a new file would get under the umask."""
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def regressions(
    current_means: Mapping[str, float], baseline_means: Mapping[str, float], max_drop: float = DEFAULT_MAX_DROP
) -> Dict[str, Tuple[float, Optional[float]]]:
    """``{metric: (was, now)}`` for every baseline metric missing now (``now`` is None)
    or that fell by more than ``max_drop``.

    >>> regressions({"recall@5": 0.6}, {"recall@5": 0.7, "mrr@5": 0.5}, 0.02)
    {'mrr@5': (0.5, None), 'recall@5': (0.7, 0.6)}
    """
    if not _is_finite(max_drop) or max_drop < 0:
        raise RagEvalError(f"max drop must be a non-negative number, got {max_drop!r}")
    found = {}
    for metric in sorted(baseline_means):
        was, now = baseline_means[metric], current_means.get(metric)
        if not _is_finite(was) or not (now is None or _is_finite(now)):
            raise RagEvalError(f"{metric}: means must be finite numbers, got baseline {_brief(was)}, now {_brief(now)}")
        if now is None or _fell(was, now, max_drop):
            found[metric] = (was, now)
    return found


def _fell(was: float, now: float, allowed: float) -> bool:
    """A fall beyond the allowed drop; exactly the allowed drop is no fall (see DROP_EPSILON)."""
    return was - now > allowed + DROP_EPSILON


class GateSettings(NamedTuple):
    """How ``gate`` judges: the rule, the tolerances and floors, and the resampling."""

    rule: str = "drop"
    default: Tolerance = Tolerance(DEFAULT_MAX_DROP)
    tolerances: Mapping[str, Tolerance] = MappingProxyType({})  # read-only: a default shared by every instance
    floors: Mapping[str, float] = MappingProxyType({})
    alpha: float = DEFAULT_ALPHA
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    show: int = 5


def _mean(values: Iterable[float]) -> Optional[float]:
    values = list(values)
    return math.fsum(values) / len(values) if values else None


def _restrict(scores: Mapping[str, float], queries: Optional[List[str]]) -> Dict[str, float]:
    if queries is None:
        return dict(scores)
    return {qid: scores[qid] for qid in queries if qid in scores}


class _Target(NamedTuple):
    """One number the gate judges: a metric, or a metric on a slice (``pricing:recall@5``)."""

    key: str
    was: Optional[float]
    now: Optional[float]
    before: Optional[Dict[str, float]]  # per-query scores, when both sides have them
    after: Optional[Dict[str, float]]


def _targets(result: dict, baseline: Optional[Baseline], keys: Iterable[str], slices: Optional[Slices]) -> List[_Target]:
    now_scores = per_query_by_metric(result)
    members = slice_members(slices or {})
    targets = []
    for key in keys:
        tag, _, metric = key.rpartition(":")
        queries = members.get(tag) if tag else None
        after = _restrict(now_scores.get(metric, {}), queries)
        now = result["mean"].get(key) if not tag else _mean(after.values())
        before = None
        if baseline is not None and baseline.per_query is not None and metric in baseline.per_query:
            before = _restrict(baseline.per_query[metric], queries)
        was = baseline.means.get(key) if baseline is not None else None
        if was is None and tag and before:
            was = _mean(before.values())
        paired = before is not None and bool(after)
        targets.append(_Target(key, was, now, before if paired else None, after if paired else None))
    return targets


def gate(result: dict, baseline: Optional[Baseline], settings: GateSettings = GateSettings(),
         slices: Optional[Slices] = None) -> dict:
    """Judge a result against a baseline and floors; the report of ``--baseline``.

    Every metric of the baseline is gated, and every slice that a tolerance
    names (``pricing:recall@5``).  Rule ``drop`` (the default): a metric missing
    now, or fallen by more than its tolerance, fails.  Rule ``significant``:
    a fall fails only when it also is significant, its Holm-corrected p below
    alpha and its interval below 0.  A floor fails whatever the baseline says.
    """
    keys = [key for key in sorted(baseline.means) if ":" not in key] if baseline else []
    keys += sorted(key for key in settings.tolerances if ":" in key)
    targets = _targets(result, baseline, keys, slices) if baseline is not None else []
    for target in targets:
        if target.was is None:
            raise RagEvalError(f"cannot gate {target.key}: the baseline has neither that mean nor per-query scores")
    paired = {
        t.key: compare_paired(t.key, t.before, t.after, resamples=settings.resamples, seed=settings.seed,
                              alpha=settings.alpha, show=settings.show)
        for t in targets if t.before is not None and set(t.before) & set(t.after)
    }
    if settings.rule == "significant" and baseline is not None and not paired:
        raise RagEvalError("--gate significant needs per-query scores on both sides: "
                           "an extended baseline (--save-baseline) or --baseline-run")
    corrected = holm({key: comparison.p_value for key, comparison in paired.items()})
    report = {"rule": settings.rule, "alpha": settings.alpha, "metrics": {}, "floors": {}}
    for target in targets:
        comparison = paired.get(target.key)
        report["metrics"][target.key] = _gated_metric(target, settings, comparison,
                                                      None if comparison is None else corrected[target.key])
    for target in _targets(result, None, sorted(settings.floors), slices):
        floor = settings.floors[target.key]
        passed = target.now is not None and target.now >= floor - DROP_EPSILON  # 0.19999999999999998 meets 0.2
        report["floors"][target.key] = {"min": floor, "now": target.now, "verdict": "pass" if passed else "below floor"}
    report["passed"] = not any(
        entry["verdict"] in ("missing", "regression") for entry in report["metrics"].values()
    ) and all(entry["verdict"] == "pass" for entry in report["floors"].values())
    return report


def _gated_metric(target: _Target, settings: GateSettings, comparison: Optional[PairedComparison],
                  p_holm: Optional[float]) -> dict:
    """One metric's entry in the gate's report, its verdict last."""
    tolerance = settings.tolerances.get(target.key, settings.default)
    allowed = tolerance.allowed(target.was)
    entry = {"baseline": target.was, "now": target.now,
             "delta": None if target.now is None else target.now - target.was,
             "allowed_drop": allowed, "tolerance": str(tolerance)}
    if comparison is not None:
        entry.update(_paired_entry(comparison, p_holm, allowed, settings.alpha))
    if target.now is None:
        verdict = "missing"
    elif not _fell(target.was, target.now, allowed):
        verdict = "pass"
    elif settings.rule == "drop" or comparison is None:  # no pairs, no test: a fall fails
        verdict = "regression"
    else:
        significant = p_holm < settings.alpha and comparison.interval.high < 0
        verdict = "regression" if significant else "not significant"
    entry["verdict"] = verdict
    return entry


def _paired_entry(comparison: PairedComparison, p_holm: float, allowed: float, alpha: float) -> dict:
    return {
        "queries": comparison.queries,
        "improved": comparison.improved,
        "worse": comparison.worse,
        "same": comparison.same,
        "mean_delta": comparison.mean_delta,
        "p_value": comparison.p_value,
        "p_holm": p_holm,
        "exact": comparison.exact,
        "unresolvable": comparison.unresolvable,
        "interval": list(comparison.interval),
        "hit_to_miss": comparison.hit_to_miss,
        "largest_drops": [[qid, delta] for qid, delta in comparison.largest_drops],
        "min_detectable_drop": detectable_drop(comparison.spread, comparison.queries, alpha),
        "queries_needed": queries_needed(comparison.spread, allowed, alpha),
    }


# === Reading inputs ===

# Bytes per read when streaming line-based files: small enough that a block
# stays in the CPU's cache while it is checked and split (4 MiB was 20% slower).
READ_BLOCK = 1 << 17
# A longer line is an error, not a reason to run out of memory.  READ_BLOCK
# must stay far below it: a line that fits in one block is never measured.
MAX_LINE = 1 << 26
MAX_JSON = 1 << 30  # JSON is parsed whole; parsing takes several times its size in memory
MAX_ID = 1 << 12  # bytes of a query or document id in a run; trec_eval's own limits are far below
# Run queries the qrels lack, kept by name for the error or the note; beyond, the run is refused.
MAX_UNKNOWN_QUERIES = 200_000
BY_BLOCK_DEPTH = 100  # the reduced TREC reader takes whole blocks at once beyond this depth
MAX_RUN_BYTES = 1 << 32  # inflated bytes of a run (--max-input-bytes): a gzip bomb ends here
MAX_DETECT_LINE = 1 << 20  # a longer first line that opens an object is taken for JSON, not a JSONL row
MAX_SMALL_JSON = 1 << 26  # baselines and slices: far beyond a real one, far below a gzip bomb
# dict first: isinstance() stops at the common case before the slower abstract-class check.
_MAPPINGS = (dict, abc.Mapping)
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"

# Field names accepted in JSONL rows.  ir_datasets exports use query_id,
# doc_id, relevance and score; BEIR's qrels use query-id, corpus-id, score.
_JSONL_QUERY = ("query_id", "qid", "query-id")
_JSONL_DOC = ("doc_id", "docid", "corpus_id", "corpus-id", "doc-id")
_JSONL_GRADE = ("relevance", "grade", "rel", "score")


class _Input(NamedTuple):
    source: str  # the name to put in error messages
    head: bytes  # the first block with something in it, its first line whole if it opens an object (for detection)
    rest: object  # a binary stream positioned after ``head``
    first_line: int  # the number of the line ``head`` starts in


@contextmanager
def _opened(path: str) -> Iterator[_Input]:
    """Open a file (or ``-`` for standard input), transparently un-gzipped; close it after."""
    source = "<stdin>" if path == "-" else path
    raw = _open_binary(path, source)
    stream = raw
    try:
        if _read_magic(raw, source) == _GZIP_MAGIC:
            import gzip  # only gzipped inputs pay for it

            stream = gzip.GzipFile(fileobj=raw, mode="rb")
        yield _first_content(stream, source)
    finally:
        if path != "-":
            stream.close()
            raw.close()


def _open_binary(path: str, source: str):
    try:
        if path == "-":
            if sys.stdin is None:
                raise RagEvalError("there is no standard input to read", source)
            return sys.stdin.buffer
        if os.path.isdir(path):
            raise RagEvalError("is a directory, expected a file", source)
        return open(path, "rb")
    except FileNotFoundError:
        raise RagEvalError("no such file", source) from None
    except OSError as exc:
        raise RagEvalError(f"cannot read: {exc.strerror or exc}", source) from None


def _first_content(stream, source: str) -> _Input:
    """The stream with its first block that holds more than white space, for format detection."""
    head = _read_block(stream, source)
    if head.startswith(_BOM):
        head = head[len(_BOM):]
    first_line = 1
    while head.isspace():  # blank blocks say nothing of the format: skip them, counting lines
        first_line += head.count(b"\n")
        head = _read_block(stream, source)
    content = head.lstrip()
    if content[:1] == b"{" and b"\n" not in content:
        # The first line tells a JSONL row from a JSON document: read it whole, within reason.
        head += _read_block(stream, source, line_limit=MAX_DETECT_LINE)
    return _Input(source, head, stream, first_line)


def _read_magic(raw, source: str) -> bytes:
    try:
        return raw.peek(2)[:2]
    except OSError as exc:
        raise RagEvalError(f"cannot read: {exc.strerror or exc}", source) from None


def _read_block(stream, source: str, line_limit: Optional[int] = None) -> bytes:
    """The next READ_BLOCK bytes; with ``line_limit``, up to the next newline, at most that many bytes."""
    try:
        return stream.read(READ_BLOCK) if line_limit is None else stream.readline(line_limit)
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise RagEvalError(f"cannot read (corrupt or truncated gzip?): {exc}", source) from None
    except Exception as exc:  # zlib.error, without importing zlib up front
        raise RagEvalError(f"cannot read: {exc}", source) from None


def _read_all(inp: _Input, limit: int) -> bytes:
    """The whole (un-gzipped) file, up to ``limit`` bytes: a gzip bomb stops here, not in the kernel's OOM killer."""
    blocks = [inp.head]
    size = len(inp.head)
    while True:
        block = _read_block(inp.rest, inp.source)
        if not block:
            return b"".join(blocks)
        size += len(block)
        if size > limit:
            advice = "; for large runs use TREC or JSONL, which are streamed" if limit == MAX_JSON else ""
            raise RagEvalError(f"JSON larger than {limit >> 20} MiB{advice}", inp.source)
        blocks.append(block)


def _detect_format(inp: _Input) -> str:
    """Guess json, jsonl or trec from the first bytes, not the file name."""
    text = inp.head.lstrip()
    if not text:
        raise RagEvalError("file is empty", inp.source)
    if text[:1] == b"[":
        return "json"
    if text[:1] != b"{":
        return "trec"
    first_line = text.split(b"\n", 1)[0]
    try:
        row = json.loads(first_line)
    except (ValueError, RecursionError):
        return "json"  # an object spread over several lines, or broken: the JSON parser will say
    # A JSONL row names its query in a field; a JSON document maps query ids to objects or lists.
    is_row = isinstance(row, dict) and any(
        name in row and not isinstance(row[name], (dict, list)) for name in _JSONL_QUERY)
    return "jsonl" if is_row else "json"


def _decode(data: bytes, source: str, first_line: int = 1) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + data.count(b"\n", 0, exc.start)
        raise RagEvalError(f"bytes that are not UTF-8 (byte 0x{data[exc.start]:02x})", source, line) from None


def _line_blocks(inp: _Input, split: Optional[Callable[[bytes], list]],
                 max_bytes: Optional[int] = None) -> Iterator[Tuple[int, Union[list, bytes]]]:
    """Yield ``(number of the first line, lines)`` for successive blocks of a text file.

    Reads blocks of READ_BLOCK bytes, each completed to the end of its last
    line by one readline (one copy; cutting blocks at their last newline and
    carrying the rest over copied every block twice), and checks each block
    at once (UTF-8, no NUL, no lone CR): in bulk that costs a fraction of
    doing it line by line.  ``split`` cuts a checked block into
    its lines (``_byte_lines`` or ``_text_lines``), whose number gives the
    next block's first line; without ``split``, the block itself is yielded
    (whole lines, checked).  Blank blocks are checked, counted and skipped.
    More than ``max_bytes`` in all (after gunzip) is an error: a gzip bomb
    ends after a bounded time.
    """
    first = inp.first_line
    data = inp.head
    read = 0
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
                yield first, data[:start] if split is None else _lines_of(data[:start], split)
            raise error
        if data.isspace():  # isspace, not strip: no copy of the block
            first += data.count(b"\n")
        elif split is None:
            yield first, data
            first += data.count(b"\n") + (not data.endswith(b"\n"))
        else:
            lines = _lines_of(data, split)
            yield first, lines
            first += len(lines)
        data = _read_block(inp.rest, inp.source)


def _too_large(source: str, max_bytes: int) -> RagEvalError:
    return RagEvalError(f"more than {max_bytes} bytes (after gunzip); raise the limit with --max-input-bytes", source)


def _whole_lines(stream, source: str, data: bytes, first: int) -> Tuple[bytes, Optional[RagEvalError]]:
    """``data`` and the rest of its last line from ``stream``: blocks never cut a line.

    A line may be MAX_LINE bytes long (its line end included) wherever it
    starts, so the limit of the readline counts what ``data`` holds of the
    line already.  For a longer line: the lines before it, and the error to
    raise once they are read.
    """
    if not data or data.endswith(b"\n"):
        return data, None
    start = data.rfind(b"\n") + 1
    limit = max(MAX_LINE + 1 - (len(data) - start), 1)
    rest = _read_block(stream, source, line_limit=limit)
    if len(rest) == limit and not rest.endswith(b"\n"):
        return data[:start], RagEvalError(f"line longer than {MAX_LINE >> 20} MiB", source, first + data.count(b"\n"))
    return data + rest, None


def _lines_of(data: bytes, split: Callable[[bytes], list]) -> list:
    lines = split(data)
    if not lines[-1]:
        lines.pop()  # the empty piece after the final newline
    return lines


def _byte_lines(data: bytes) -> List[bytes]:
    return data.split(b"\n")


def _text_lines(data: bytes) -> List[str]:
    return data.decode("utf-8").split("\n")


def _block_problem(data: bytes, source: str, first: int) -> Optional[Tuple[int, RagEvalError]]:
    """The first line of a block that no text line may hold: (where it starts, the error), or None.

    Bytes that are not UTF-8, a NUL byte, and a carriage return that ends a
    line on its own (classic Mac line ends would read as one line) are each
    looked for in C over the whole block.  Of several, the earliest line is
    reported; on one line, in that order (a binary file is "not UTF-8" before
    it is "NUL").
    """
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


def _parse_json(inp: _Input, what: str, limit: int = MAX_JSON):
    data = _read_all(inp, limit)
    if not data.strip():
        raise RagEvalError("file is empty", inp.source)
    return _decode_json(_decode(data, inp.source, inp.first_line), inp.source, inp.first_line, what)


def _decode_json(text: str, source: str, first_line: int, what: Optional[str] = None):
    """Decode a JSON document (``what`` names it: "qrels", "run", ...) or, without ``what``, one JSONL row.

    Every failure is one error line: a document's names the line and column
    of the fault, a row's its line.
    """
    row_line = None if what else first_line  # a document's own faults have no line but the parser's
    try:
        return _JSON.decode(text)
    except json.JSONDecodeError as exc:
        column = f" (column {exc.colno})" if what else ""
        raise RagEvalError(f"invalid JSON: {exc.msg}{column}", source, first_line + exc.lineno - 1) from None
    except RagEvalError as exc:  # a duplicated key or a constant such as NaN, from the decoder's hooks
        raise RagEvalError(str(exc), source, row_line) from None
    except RecursionError:
        raise RagEvalError("JSON nested too deeply" + (f" to be a {what}" if what else ""), source, row_line) from None
    except ValueError as exc:  # an integer of thousands of digits (Python 3.11's conversion limit)
        raise RagEvalError(f"a number {'in the JSON ' if what else ''}is too long ({exc})", source, row_line) from None


def _unique_keys(pairs):
    result = dict(pairs)
    if len(result) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise RagEvalError(f"duplicated key {key!r} in a JSON object")
            seen.add(key)
    return result


def _reject_constant(name):
    raise RagEvalError(f"{name} is not a number that JSON allows")


# One decoder for every input: json.loads with options builds a new one per
# call, which doubled the cost of a JSONL line.
_JSON = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
_JSON_SPACE = json.decoder.WHITESPACE  # JSON's own white space: a regular expression


def _row_field(row: dict, names: Tuple[str, ...], what: str, source: str, lineno: int):
    """The value of the first of ``names`` that a JSONL row has."""
    for name in names:
        if name in row:
            return row[name]
    raise RagEvalError(f"missing {what} field (one of {', '.join(names)})", source, lineno)


def _row_id(row: dict, names: Tuple[str, ...], what: str, source: str, lineno: int) -> str:
    """An id field of a JSONL row: present, and a string."""
    return _string_id(_row_field(row, names, what, source, lineno), what, source, lineno)


def _jsonl_rows(inp: _Input, max_bytes: Optional[int] = None) -> Iterator[Tuple[int, dict]]:
    for lineno, line in _raw_lines(inp, max_bytes):
        if line.startswith("\ufeff"):  # json.loads would say so; the decoder used here does not
            raise RagEvalError("a byte order mark (BOM) starts this line: were files joined?", inp.source, lineno)
        row = _decode_json(line, inp.source, lineno)
        if not isinstance(row, dict):
            raise RagEvalError(f"expected a JSON object per line, got {_kind(row)}", inp.source, lineno)
        yield lineno, row


def _raw_lines(inp: _Input, max_bytes: Optional[int] = None) -> Iterator[Tuple[int, str]]:
    """Yield ``(line number, line)`` for each non-blank line, its text untouched."""
    for first, lines in _line_blocks(inp, _text_lines, max_bytes):
        for lineno, line in enumerate(lines, first):
            if line.strip():
                yield lineno, line


def _kind(value) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _whole(text: str, digits: int = 9) -> Optional[int]:
    """A whole number of at most ``digits`` ASCII digits, else None.

    int() alone would take '²', '1_0' and ' 5', and refuses 5,000 digits with
    a ValueError of its own (Python 3.11's limit on long conversions).
    """
    return int(text) if text.isascii() and text.isdigit() and len(text) <= digits else None


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite(value) -> bool:
    """A number that is not NaN or infinite, and that a float can hold (JSON allows 400-digit integers)."""
    try:
        return _is_number(value) and math.isfinite(value)
    except OverflowError:
        return False


def _all_finite(numbers: Iterable[float]) -> bool:
    """True when every number is finite, in C: a NaN or an infinity makes the
    sum so, and fsum turns each number into a float on its own, so a huge
    integer overflows instead of cancelling out.  False may be a false alarm
    (a sum beyond a float's range): callers then check one by one."""
    try:
        return math.isfinite(math.fsum(numbers))
    except (OverflowError, ValueError):  # ValueError: inf - inf
        return False


def _brief(value) -> str:
    """repr() of a value, cut short: an error line stays one readable line."""
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _string_id(value, what: str, source: str, lineno: Optional[int] = None) -> str:
    if not isinstance(value, str):
        raise RagEvalError(f"{what} must be a string, got {_kind(value)}", source, lineno)
    return value


def _add_judgment(qrels: Qrels, qid: str, docid: str, grade: int, source: str, lineno: int) -> None:
    """Record one line-based judgment; the same document judged twice must agree."""
    docs = qrels.setdefault(qid, {})
    if docs.setdefault(docid, grade) != grade:
        raise RagEvalError(f"conflicting judgments for {qid!r}/{docid!r}: {docs[docid]} and {grade}", source, lineno)


def _without_negative(qrels: Qrels) -> Qrels:
    """A negative grade is trec_eval's mark for a document outside the judged
    pool: the query is kept, the document stays unjudged."""
    if all(min(docs.values(), default=0) >= 0 for docs in qrels.values()):
        return qrels  # the common case, checked without copying
    return {qid: {docid: grade for docid, grade in docs.items() if grade >= 0} for qid, docs in qrels.items()}


def _trec_qrels(inp: _Input) -> Qrels:
    """``qid iter docid grade`` (TREC) or ``qid docid grade`` (BEIR's TSV).

    The first judgment decides which; every other line must have as many
    fields, so a line that lost one is an error, not a judgment of another
    document.  Like the TREC run reader, it splits bytes (at C's white space,
    as trec_eval does) and decodes a query's id once for its run of lines.
    """
    qrels: Qrels = {}
    width = None
    qid = query = None
    for first, lines in _line_blocks(inp, _byte_lines):
        for lineno, line in enumerate(lines, first):
            fields = line.split()
            if not fields or fields[0][:1] == b"#":
                continue  # blank, or a comment
            if len(fields) != width:  # the first judgment, the BEIR header, or an error
                width = _qrels_width(fields, width, inp.source, lineno)
                if width is None:
                    continue  # BEIR's header
            if fields[0] != qid:
                qid = fields[0]
                query = qid.decode("utf-8")
            grade_text = fields[-1]
            # isdigit on bytes is ASCII digits only; _grade takes signs and says what is wrong.
            if grade_text.isdigit() and len(grade_text) <= 9:
                grade = int(grade_text)
            else:
                grade = _grade(grade_text.decode("utf-8"), inp.source, lineno)
            _add_judgment(qrels, query, fields[-2].decode("utf-8"), grade, inp.source, lineno)
    return _without_negative(qrels)


def _qrels_width(fields: List[bytes], width: Optional[int], source: str, lineno: int) -> Optional[int]:
    """The number of fields of every judgment, set by the first: 4 (TREC) or 3
    (BEIR's TSV); None for BEIR's header line, which may come first."""
    if width is None and len(fields) == 3 and [f.lower() for f in fields] == [b"query-id", b"corpus-id", b"score"]:
        return None
    if width is None and len(fields) in (3, 4):
        return len(fields)
    layout = "qid iter docid grade" if width != 3 else "qid docid grade, as BEIR's TSV"
    raise RagEvalError(f"expected {width or 4} fields ({layout}), got {len(fields)}", source, lineno)


def _grade(text: str, source: str, lineno: int) -> int:
    """A TREC grade: an integer, negative allowed (unjudged), at most MAX_GRADE."""
    sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
    if not (digits.isascii() and digits.isdigit()):
        raise RagEvalError(f"grade must be an integer, got {text[:40]!r}", source, lineno)
    value = _whole(digits, digits=10)
    if value is None or value > MAX_GRADE:
        raise RagEvalError(f"grade must be at most {MAX_GRADE}, got {text[:40]}", source, lineno)
    return sign * value


def _jsonl_qrels(inp: _Input) -> Qrels:
    qrels: Qrels = {}
    for lineno, row in _jsonl_rows(inp):
        qid = _row_id(row, _JSONL_QUERY, "query id", inp.source, lineno)
        docid = _row_id(row, _JSONL_DOC, "document id", inp.source, lineno)
        grade = _row_field(row, _JSONL_GRADE, "grade", inp.source, lineno)
        if not _is_int(grade):
            raise RagEvalError(f"grade must be an integer, got {grade!r}", inp.source, lineno)
        _add_judgment(qrels, qid, docid, grade, inp.source, lineno)
    return _without_negative(qrels)


def read_qrels(path: str, fmt: str = "auto") -> Qrels:
    """Read judgments ``{qid: {docid: grade}}`` from JSON, JSONL or TREC.

    The format is detected from the content unless ``fmt`` names it; gzip is
    detected from the magic bytes; ``-`` reads standard input.  JSON grades
    must be non-negative integers; TREC and JSONL may hold negative
    grades, which mark unjudged documents as in trec_eval.
    """
    with _opened(path) as inp:
        fmt = _detect_format(inp) if fmt == "auto" else fmt
        if fmt == "json":
            qrels = _parse_json(inp, "qrels")
            _check_qrels(qrels, inp.source)
        elif fmt == "jsonl":
            qrels = _jsonl_qrels(inp)
        else:
            qrels = _trec_qrels(inp)
        if not qrels:
            raise RagEvalError("no judgments found", inp.source)
    return qrels


class _TopScores:
    """The best ``depth`` documents of one query, kept while streaming a run.

    A document listed twice keeps its higher score.  Pruning is exact: a
    document pushed out ranks below ``depth`` others, and those only improve.
    So ``floor`` only rises: the lowest score once ``depth`` documents are
    held, then the score of the last one kept at each prune.  A document
    scored below it can be passed over unread.
    """

    __slots__ = ("depth", "scores", "floor", "mark")

    def __init__(self, depth: Optional[int]):
        self.depth = depth
        self.scores: Dict[Union[str, bytes], float] = {}
        self.floor = -math.inf
        self.mark = math.inf if depth is None else depth  # the size at which ``grown`` is due

    def grown(self) -> float:
        """For a caller that adds to ``scores`` itself: call when it holds ``mark`` documents; returns the floor."""
        if len(self.scores) == self.depth:
            self.floor = min(self.scores.values())
        else:
            self.prune()
        self.mark = 2 * self.depth + 65
        return self.floor

    def add(self, docid: Union[str, bytes], score: float) -> float:
        """Offer one document; return the floor, for the caller's next comparison."""
        scores = self.scores
        old = scores.get(docid)
        if old is None or score > old:
            scores[docid] = score
            held = len(scores)
            if held == self.depth and old is None:
                self.floor = min(scores.values())
            elif self.depth is not None and held > 2 * self.depth + 64:
                self.prune()
        return self.floor

    def prune(self) -> None:
        if self.depth is not None and len(self.scores) > self.depth:
            best = _order_scored(self.scores)[: self.depth]
            self.scores = {docid: self.scores[docid] for docid in best}
            self.floor = self.scores[best[-1]]


class _ReadAgain(Exception):
    """The streamed reading cannot go on (a query's lines apart, or JSON the plain reader must judge): read again."""


class _Reducer:
    """Reduces each query of a run to a ``_Reduced`` as soon as its documents end.

    The readers ask whether the qrels know each query as it starts
    (``knows``), and hand over its kept documents when the next one starts
    or the file ends (``scored``, ``scored_lists``, ``ranked``).  Queries the
    qrels lack are counted, never kept: up to MAX_UNKNOWN_QUERIES of them
    by name.  With ``as_bytes``, document ids are the TREC reader's bytes.
    """

    def __init__(self, judged: Qrels, cutoffs: Iterable[int], depth: int, as_bytes: bool, source: str):
        self.judged, self.cutoffs, self.depth, self.as_bytes, self.source = judged, sorted(cutoffs), depth, as_bytes, source
        self.queries: Dict[str, _Reduced] = {}
        self.unknown: set = set()

    def knows(self, qid: str) -> bool:
        """Whether the qrels judge ``qid``; a query seen before and reduced already cannot resume."""
        if qid in self.queries:
            raise _ReadAgain(qid)
        if qid in self.judged:
            return True
        if qid not in self.unknown:
            self.unknown.add(qid)
            if len(self.unknown) > MAX_UNKNOWN_QUERIES:
                raise RagEvalError(f"more than {MAX_UNKNOWN_QUERIES} run queries are not in the qrels (one: {qid!r}); "
                                   "is this a run of these qrels?", self.source)
        return False

    def scored(self, qid: str, scores: Mapping) -> None:
        """A query's unique documents and their scores (at least its best ``depth``, maybe more).

        rank = 1 + the documents ordered before: those scored higher, and
        those scored the same with a larger docid (trec_eval's order), so no
        (score, docid) pair is sorted: the scores alone are, in C, for the
        counts and the ties across cutoffs.  Only the judged documents'
        tied partners are looked for, when there are any.
        """
        self.scored_lists(qid, list(scores), list(scores.values()))

    def scored_lists(self, qid: str, docids: List, values: List[float], places: Optional[dict] = None) -> None:
        """``scored`` with the documents and their scores as two lists; each document once.

        ``places``, when given, maps each document to its index in the lists.
        """
        ascending = sorted(values)
        count = len(ascending)
        length = min(count, self.depth)
        # Scored the same on both sides of a cutoff k: the k-th and the (k+1)-th best.
        tied = tuple(k for k in self.cutoffs if k < length and ascending[count - k] == ascending[count - k - 1])
        found = []  # (rank counting only higher scores, docid, its score, how many share it)
        if places is None:
            places = dict(zip(docids, range(len(docids))))
        for docid in self._judged_ids(qid).keys() & places.keys():
            score = values[places[docid]]
            above = bisect_right(ascending, score)
            found.append((count - above + 1, docid, score, above - bisect_left(ascending, score)))
        partners: Dict[float, list] = {}
        for _, _, score, same in found:
            if same > 1 and score not in partners:  # the documents scored the same: index() finds them in C
                partners[score] = tied_with = []
                where = -1
                for _ in range(same):
                    where = values.index(score, where + 1)
                    tied_with.append(docids[where])
        ranks = []
        for rank, docid, score, same in found:
            if same > 1:
                rank += sum(other > docid for other in partners[score])
            if rank <= self.depth:
                ranks.append((rank, docid))
        self._add(qid, length, ranks, tied, ascending[-1] if ascending else None)

    def ranked(self, qid: str, ranking: List) -> None:
        """A query's unique documents in rank order, without scores."""
        ranking = ranking[: self.depth]
        # The judged documents are few: find them with a set operation and their ranks with index(), both in C.
        ranks = [(ranking.index(docid) + 1, docid) for docid in self._judged_ids(qid).keys() & set(ranking)]
        self._add(qid, len(ranking), ranks, (), None)

    def _judged_ids(self, qid: str) -> Dict:
        """The query's judged ids as the reader holds them (bytes or text) -> as text."""
        grades = self.judged[qid]
        return {docid.encode("utf-8"): docid for docid in grades} if self.as_bytes else dict(zip(grades, grades))

    def _add(self, qid: str, length: int, ranks: List[Tuple[int, Union[str, bytes]]], tied: Tuple[int, ...],
             best: Optional[float]) -> None:
        names = self._judged_ids(qid) if self.as_bytes else None
        judged = sorted((rank, names[docid] if names else docid) for rank, docid in ranks)
        self.queries[qid] = _Reduced(length, tuple(judged), tied, best)

    def run(self) -> _ReducedRun:
        return _ReducedRun(self.queries, sorted(self.unknown))


class _TopsByQuery(dict):
    """query id -> its ``_TopScores``, made on first sight of the query."""

    def __init__(self, depth: Optional[int]):
        super().__init__()
        self.depth = depth

    def __missing__(self, qid) -> _TopScores:
        top = self[qid] = _TopScores(self.depth)
        return top

    def finished(self) -> dict:
        """{qid: {docid: score}}, each query cut to its depth; ids as the reader kept them (bytes or text)."""
        for top in self.values():
            top.prune()
        return {qid: top.scores for qid, top in self.items()}


def _score(text: str, source: str, lineno: int) -> float:
    try:
        score = float(text)
    except ValueError:
        raise RagEvalError(f"score must be a number, got {text!r}", source, lineno) from None
    if not math.isfinite(score):
        raise RagEvalError(f"score must be a finite number, got {text!r}", source, lineno)
    return score


def _trec_run(inp: _Input, depth: Optional[int], keep, doc_id_sep: Optional[str],
              judged: Optional[Qrels], cutoffs: Optional[List[int]] = None,
              max_bytes: int = MAX_RUN_BYTES) -> Tuple[Run, bool]:
    """``qid Q0 docid rank score tag``; the rank column is ignored, as in trec_eval.

    Returns the run and whether any line names a document judged for its
    query in ``judged`` (always False without it).  With ``cutoffs`` (and
    ``judged``), each query is reduced when its lines end (see ``_Reducer``):
    its lines must come together, or ``_Interleaved`` is raised.  This loop
    runs once per line of files with millions of lines, so it does the
    least it can.  It splits bytes, not text: bytes.split cuts at C's white
    space exactly, the block was checked as UTF-8 already, and only the ids
    kept are decoded.  Lines of one query come together, so the query's
    state stays in locals, and a line scored below the query's floor is
    dropped after one comparison.  Errors cost a search for the line's number.
    """
    tops = _TopsByQuery(depth)
    as_text = keep is not None or doc_id_sep is not None  # then ids are decoded at once (both need text)
    reducer = None if cutoffs is None else _Reducer(judged, cutoffs, depth, not as_text, inp.source)
    # Deep and reduced: blocks are read whole (_trec_columns); shallow, the floor passes most lines over faster.
    by_block = reducer is not None and not as_text and depth > BY_BLOCK_DEPTH
    qid = top = query = None
    held_ids: List[bytes] = []  # reading by block: the current query's documents and scores, besides ``top``
    held_scores: List[float] = []
    floor = lowest = -math.inf
    looking = judged is not None  # for a judged document, before any cut; one test per line after that
    for first, lines in _line_blocks(inp, None if by_block else _byte_lines, max_bytes):
        columns = None
        if by_block:  # ``lines`` is the block itself
            columns = _trec_columns(lines)
            lines = _lines_of(lines, _byte_lines) if columns is None else None
        long_id = None
        if lines is not None and max(map(len, lines)) > MAX_ID:  # in C: only a long line can hold a long id
            long_id = _long_id(lines, inp.source, first)
            if long_id is not None:
                lines = lines[:long_id[0]]  # the lines before it first: an error on one of them comes first
        if columns is not None:  # the whole block at once, in C; the loop below does the same line by line
            for segment_qid, docids, values in columns:
                if segment_qid != qid:
                    qid = segment_qid
                    _reduce_query(reducer, query, top, held_ids, held_scores)
                    held_ids, held_scores = [], []
                    query = qid.decode("utf-8")
                    top = _TopScores(depth)
                    if not reducer.knows(query):
                        top.floor = math.inf
                if top.floor == math.inf:
                    continue
                if looking:
                    looking = {docid.encode("utf-8") for docid in judged.get(query, ())}.isdisjoint(docids)
                # Two lists, not a dict: a third of the cost; duplicates are resolved when the query ends.
                held_ids += docids
                held_scores += values
                if len(held_ids) > 2 * depth + 64:
                    _hold(top, held_ids, held_scores)
                    top.prune()
                    held_ids, held_scores = [], []
            continue
        if held_ids:  # lines come one by one again: what the blocks held goes where the loop below keeps it
            _hold(top, held_ids, held_scores)
            held_ids, held_scores = [], []
        if top is not None:
            floor, scores, mark = top.floor, top.scores, top.mark
            setdefault = scores.setdefault
        for line in lines:
            fields = line.split()
            if len(fields) < 6:
                if not fields or fields[0][:1] == b"#":
                    continue  # blank, or a comment, as trec_eval reads them
                # The first line equal to this one is this one, or it would have failed first.
                raise RagEvalError(f"expected 6 fields (qid Q0 docid rank score tag), got {len(fields)}",
                                   inp.source, first + lines.index(line))
            if fields[0] != qid:
                if fields[0][:1] == b"#":
                    continue  # a comment of six words or more
                qid = fields[0]
                if reducer is None:
                    top = tops[qid]
                    query = qid.decode("utf-8")
                else:
                    _reduce_query(reducer, query, top, held_ids, held_scores)
                    query = qid.decode("utf-8")
                    top = _TopScores(depth)
                    if not reducer.knows(query):
                        top.floor = math.inf  # lines of a query the qrels lack are checked, not kept
                floor, scores, mark = top.floor, top.scores, top.mark
                setdefault = scores.setdefault
            if looking:
                looking = _id_text(fields[2], doc_id_sep) not in judged.get(query, ())
            try:
                score = float(fields[4])
            except ValueError:  # as above: the first such line is this one
                _score(fields[4].decode("utf-8"), inp.source, first + lines.index(line))
            # Chained, so that -inf (and nan, which fails every comparison) is not passed over unchecked.
            if floor > score > lowest:
                continue
            if not math.isfinite(score):
                _score(fields[4].decode("utf-8"), inp.source, first + lines.index(line))
            docid = fields[2]
            if as_text:
                docid = _id_text(docid, doc_id_sep)
                if keep is not None and not keep(query, docid):
                    continue
            # _TopScores.add, inlined (a method call cost a third of the loop at k = 1000).  setdefault returns
            # this line's own float only when it stored it: a float stored before is another object.
            old = setdefault(docid, score)
            if old is not score:
                if score > old:
                    scores[docid] = score  # a document listed again keeps its higher score
            elif len(scores) >= mark:
                floor = top.grown()
                scores, mark = top.scores, top.mark
                setdefault = scores.setdefault
        if long_id is not None:
            raise long_id[1]
    found = judged is not None and not looking
    if reducer is not None:
        _reduce_query(reducer, query, top, held_ids, held_scores)
        return reducer.run(), found
    run = {qid.decode("utf-8"): scores if as_text else {docid.decode("utf-8"): score for docid, score in scores.items()}
           for qid, scores in tops.finished().items()}
    return run, found


def _hold(top: _TopScores, docids: List, values: List[float]) -> None:
    """Add documents to ``top``, a document listed twice keeping its higher score."""
    scores = top.scores
    for docid, score in zip(docids, values):
        if scores.get(docid, score) <= score:
            scores[docid] = score


def _reduce_query(reducer: _Reducer, query: Optional[str], top: Optional[_TopScores], held_ids: List,
                  held_scores: List[float]) -> None:
    """The lines of ``query`` ended: reduce it, unless it is none or the qrels lack it."""
    if query is None or top.floor == math.inf:
        return
    places = dict(zip(held_ids, range(len(held_ids))))
    if not top.scores and len(places) == len(held_ids):  # the common case: each document once
        reducer.scored_lists(query, held_ids, held_scores, places)
        return
    _hold(top, held_ids, held_scores)
    reducer.scored(query, top.scores)


def _trec_columns(data: bytes) -> Optional[List[Tuple[bytes, List[bytes], List[float]]]]:
    """A block of plain TREC run lines as ``(qid, docids, scores)`` per query, in file order, or None.

    Plain: six fields on every line, no blank or comment line, no id longer
    than MAX_ID, every score a finite number, each query's lines together.
    Anything else is None, and the caller reads the block line by line,
    which says what is wrong where.  Every step is one call into C: one
    split of the whole block (a NUL, which no checked line holds, marks the
    line ends), slices for the columns, one float() per score.
    """
    count = data.count(b"\n") + (not data.endswith(b"\n"))
    fields = data.replace(b"\n", b" \0 ").split()
    # The marks are the block's only NULs: when every seventh field is one, every line has six fields.
    if len(fields) != 7 * count - (not data.endswith(b"\n")) or fields[6::7].count(b"\0") != len(fields) // 7:
        return None
    qids = fields[0::7]
    if b"#" in b"".join(qids):
        return None  # a comment line, or a # inside an id: the line-by-line loop knows which
    try:
        values = list(map(float, fields[4::7]))
    except ValueError:
        return None
    if not math.isfinite(sum(values)):
        return None  # inf or nan somewhere (or a sum beyond a float's range: the loop sorts it out)
    docids = fields[2::7]
    queries = [qid for qid, _ in groupby(qids)]  # one per run of equal ids; groupby compares in C
    if max(map(len, docids)) > MAX_ID or max(map(len, queries)) > MAX_ID:
        return None
    if len(queries) == 1:
        return [(qids[0], docids, values)]
    if len(set(queries)) < len(queries):
        return None  # a query's lines apart: the reducer's own checks, line by line
    starts = [qids.index(qid) for qid in queries]  # each id's one run starts at its first line
    ends = starts[1:] + [count]
    return [(qid, docids[start:end], values[start:end]) for qid, start, end in zip(queries, starts, ends)]


def _long_id(lines: List[bytes], source: str, first: int) -> Optional[Tuple[int, RagEvalError]]:
    """The first run line with an id longer than MAX_ID: (its index, the error), or None.

    Such an id is an error, not kept: memory must follow what is kept, and
    trec_eval's own limits are far below.
    """
    for index, line in enumerate(lines):
        if len(line) > MAX_ID:
            fields = line.split()
            if len(fields) < 6 or fields[0][:1] == b"#":
                continue  # a comment, or a line the reader refuses for its fields
            for field, what in ((0, "query id"), (2, "document id")):
                if len(fields[field]) > MAX_ID:
                    return index, RagEvalError(f"{what} longer than {MAX_ID} bytes", source, first + index)
    return None


def _id_text(docid: bytes, doc_id_sep: Optional[str]) -> str:
    text = docid.decode("utf-8")
    return text if doc_id_sep is None else document_of(text, doc_id_sep)


def _jsonl_run(inp: _Input, depth: Optional[int], keep, doc_id_sep: Optional[str],
               judged: Optional[Qrels], cutoffs: Optional[List[int]] = None,
               max_bytes: int = MAX_RUN_BYTES) -> Tuple[Run, bool]:
    """Rows ``{"query_id", "doc_id", "score"}``; without scores, file order ranks.  Returns as ``_trec_run``.

    Without scores, a query keeps its first ``depth`` unique documents (after
    ``keep``): the rest can never reach a cutoff.
    """
    tops = _TopsByQuery(depth)
    lists: Dict[str, Dict[str, None]] = {}
    reducer = None if cutoffs is None else _Reducer(judged, cutoffs, depth, False, inp.source)
    current = None  # with a reducer: the query whose rows are being read, None for one the qrels lack
    open_qid = None
    scored_rows = ranked_rows = False  # rows with a score seen, rows without one seen
    looking = judged is not None
    for lineno, row in _jsonl_rows(inp, max_bytes):
        qid = _row_id(row, _JSONL_QUERY, "query id", inp.source, lineno)
        docid = _row_id(row, _JSONL_DOC, "document id", inp.source, lineno)
        for value, what in ((qid, "query id"), (docid, "document id")):
            if len(value) > MAX_ID // 4 and len(value.encode("utf-8")) > MAX_ID:
                raise RagEvalError(f"{what} longer than {MAX_ID} bytes", inp.source, lineno)
        if doc_id_sep is not None:
            docid = document_of(docid, doc_id_sep)
        if looking:
            looking = docid not in judged.get(qid, ())
        has_score = "score" in row
        if (scored_rows and not has_score) or (ranked_rows and has_score):
            raise RagEvalError("some rows have a score and some do not", inp.source, lineno)
        if reducer is not None and qid != open_qid:
            _close_jsonl_query(reducer, open_qid, current, tops, lists)
            open_qid, current = qid, qid if reducer.knows(qid) else None
        if has_score:
            score = row["score"]
            if not _is_finite(score):
                raise RagEvalError(f"score must be a finite number, got {_brief(score)}", inp.source, lineno)
            scored_rows = True
            if reducer is not None and current is None:
                continue
            top = tops[qid]
            if keep is None or keep(qid, docid):
                top.add(docid, float(score))
        else:
            ranked_rows = True
            if reducer is not None and current is None:
                continue
            ranking = lists.setdefault(qid, {})
            if (depth is None or len(ranking) < depth) and (keep is None or keep(qid, docid)):
                ranking[docid] = None
    found = judged is not None and not looking
    if reducer is not None:
        _close_jsonl_query(reducer, open_qid, current, tops, lists)
        return reducer.run(), found
    return {qid: list(ranking) for qid, ranking in lists.items()} or tops.finished(), found


def _close_jsonl_query(reducer: "_Reducer", qid: Optional[str], current: Optional[str], tops: "_TopsByQuery",
                       lists: Dict[str, Dict[str, None]]) -> None:
    """The rows of ``qid`` ended: reduce it (when the qrels know it) and forget its documents."""
    if qid is None or current is None:
        return
    if qid in lists:
        reducer.ranked(qid, list(lists.pop(qid)))
    else:
        top = tops.pop(qid, None) or _TopScores(reducer.depth)
        top.prune()
        reducer.scored(qid, top.scores)


class _JsonStream:
    """The text of a JSON document, decoded as it is read; ``text[pos:]`` is what is left to parse."""

    def __init__(self, inp: _Input, max_bytes: int):
        import codecs

        self.inp, self.max_bytes, self.read = inp, max_bytes, len(inp.head)
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text, self.pos, self.ended = self._decoded(inp.head), 0, False

    def _decoded(self, data: bytes, final: bool = False) -> str:
        try:
            return self.decoder.decode(data, final)
        except UnicodeDecodeError:
            raise _ReadAgain() from None  # the plain reader names the line

    def more(self, at_least: int) -> bool:
        """Read on, at least ``at_least`` bytes (or to the end): False at the end."""
        if self.ended:
            return False
        blocks = []
        size = 0
        while size < at_least:
            block = _read_block(self.inp.rest, self.inp.source)
            if not block:
                self.ended = True
                break
            blocks.append(block)
            size += len(block)
        self.read += size
        if self.read > self.max_bytes:
            raise _too_large(self.inp.source, self.max_bytes)
        self.text += self._decoded(b"".join(blocks), self.ended)  # positions in the text stay valid
        return bool(blocks)

    def forget(self) -> None:
        """Drop the text parsed already (between members, where no position is held)."""
        if self.pos > READ_BLOCK and self.pos * 2 > len(self.text):
            self.text, self.pos = self.text[self.pos:], 0

    def skip_space(self) -> str:
        """The next character that is not white space, "" at the end of the document."""
        while True:
            match = _JSON_SPACE.match(self.text, self.pos)
            self.pos = match.end()
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more(READ_BLOCK):
                return ""


_STREAMED = object()  # the value of a member whose list was handed over one string at a time


def _json_members(stream: _JsonStream, ranked: Callable[[str], Callable[[str], None]]) -> Iterator[Tuple[str, object]]:
    """The ``(key, value)`` pairs of a top-level JSON object, one at a time.

    Only what the plain decoder would accept, and each value by that decoder
    (``raw_decode``), so numbers, strings and duplicated keys inside a value
    are read as ever; a list, though, is read one string at a time, each
    handed to ``ranked(key)`` (its value is then ``_STREAMED``), so that a ranking of
    millions of ids is never held.  Whatever is not plainly valid raises
    ``_ReadAgain``: the plain reader then reports it, in the same words as always.
    """
    if stream.skip_space() != "{":
        raise _ReadAgain()
    stream.pos += 1
    first = True
    while True:
        stream.forget()
        char = stream.skip_space()
        if char == "}":
            stream.pos += 1
            if stream.skip_space():
                raise _ReadAgain()  # more after the document
            return
        if not first:
            if char != ",":
                raise _ReadAgain()
            stream.pos += 1
            char = stream.skip_space()
        if char != '"':
            raise _ReadAgain()
        key = _json_parsed(stream, lambda text, at: json.decoder.scanstring(text, at + 1))
        if stream.skip_space() != ":":
            raise _ReadAgain()
        stream.pos += 1
        if stream.skip_space() == "[":
            _json_strings(stream, ranked(key))
            value = _STREAMED
        else:
            value = _json_parsed(stream, _JSON.raw_decode)
        first = False
        yield key, value


def _json_parsed(stream: _JsonStream, parse: Callable[[str, int], Tuple[object, int]]):
    """``parse(text, pos)`` at the stream's position, reading on while the text runs out first."""
    start = stream.pos
    while True:
        try:
            value, end = parse(stream.text, start)
        except (ValueError, IndexError):  # incomplete here, or invalid
            if not stream.more(max(len(stream.text) - start, READ_BLOCK)):
                raise _ReadAgain() from None
            continue
        except (RagEvalError, RecursionError):
            raise _ReadAgain() from None
        if end == len(stream.text) and stream.more(READ_BLOCK):
            continue  # a number may go on in the text not read yet: parse it again with more
        stream.pos = end
        return value


def _json_strings(stream: _JsonStream, take: Callable[[str], None]) -> None:
    """A JSON list of strings at the stream's position, each handed to ``take``; anything else: ``_ReadAgain``."""
    stream.pos += 1
    first = True
    while True:
        stream.forget()
        char = stream.skip_space()
        if char == "]":
            stream.pos += 1
            return
        if not first:
            if char != ",":
                raise _ReadAgain()
            stream.pos += 1
            char = stream.skip_space()
        if char != '"':
            raise _ReadAgain()  # not a string (or nothing after a comma): the plain reader says which
        take(_json_parsed(stream, lambda text, at: json.decoder.scanstring(text, at + 1)))
        first = False


def _json_run(inp: _Input, depth: Optional[int], keep, doc_id_sep: Optional[str], judged: Optional[Qrels],
              cutoffs: Optional[List[int]], max_bytes: int) -> Tuple[Run, bool]:
    """A JSON run parsed one query at a time: memory follows a query (cut to ``depth``), not the document.

    Returns as ``_trec_run``; the numbers are those of the whole document
    parsed at once, and so are the errors: anything unusual is left to the
    plain reader (``_ReadAgain``).
    """
    reducer = None if cutoffs is None else _Reducer(judged, cutoffs, depth, False, inp.source)
    run: Run = {}
    seen = set()
    found = False
    ranking: Dict[str, None] = {}  # a ranked list's first ``depth`` unique documents, as it is read
    ranked_judged = [False]  # whether a ranked list names a judged document

    def ranked(qid: str) -> Callable[[str], None]:
        grades = judged.get(qid, {}) if judged is not None else {}
        ranking.clear()
        ranked_judged[0] = False

        def take(docid: str) -> None:
            if len(docid) > MAX_ID // 4 and len(docid.encode("utf-8")) > MAX_ID:
                raise RagEvalError(f"query {_brief(qid)}: an id longer than {MAX_ID} bytes", inp.source)
            if doc_id_sep is not None:
                docid = document_of(docid, doc_id_sep)
            if docid in grades:
                ranked_judged[0] = True
            if (depth is None or len(ranking) < depth) and (keep is None or keep(qid, docid)):
                ranking[docid] = None  # a repeated id stays at its first place

        return take

    for qid, entry in _json_members(_JsonStream(inp, max_bytes), ranked):
        if qid in seen:
            raise _ReadAgain()  # a duplicated key: the plain reader says so, or what comes first
        seen.add(qid)
        if entry is _STREAMED:  # a ranked list, read already: checked, mapped, filtered and cut
            found = found or ranked_judged[0]
            if reducer is None:
                run[qid] = list(ranking)
            elif reducer.knows(qid):
                reducer.ranked(qid, list(ranking))
            continue
        try:
            _check_run({qid: entry}, inp.source)
        except RagEvalError:
            raise _ReadAgain() from None
        if len(qid) > MAX_ID // 4 and len(qid.encode("utf-8")) > MAX_ID or max(map(len, entry), default=0) > MAX_ID // 4 \
                and max(len(docid.encode("utf-8")) for docid in entry) > MAX_ID:
            raise RagEvalError(f"query {_brief(qid)}: an id longer than {MAX_ID} bytes", inp.source)
        if doc_id_sep is not None:
            entry = documents_run({qid: entry}, doc_id_sep)[qid]
        if judged is not None and not found:
            found = not judged.get(qid, {}).keys().isdisjoint(entry)
        if reducer is not None and not reducer.knows(qid):
            continue
        scored = isinstance(entry, _MAPPINGS)
        if keep is not None:
            entry = {docid: score for docid, score in entry.items() if keep(qid, docid)} if scored \
                else [docid for docid in entry if keep(qid, docid)]
        if reducer is not None:
            reducer.scored(qid, entry) if scored else reducer.ranked(qid, list(dict.fromkeys(entry)))
        elif depth is not None:
            run[qid] = {docid: entry[docid] for docid in _order_scored(entry)[:depth]} if scored \
                else list(dict.fromkeys(entry))[:depth]
        else:
            run[qid] = entry
    return (run if reducer is None else reducer.run()), found


def read_run(path: str, fmt: str = "auto", depth: Optional[int] = None, keep=None,
             doc_id_sep: Optional[str] = None) -> Run:
    """Read a run: ``{qid: [docid, ...]}`` (ranked) or ``{qid: {docid: score}}``.

    Runs are streamed (JSON one query at a time, unless read from standard
    input): with ``depth`` only the best ``depth`` documents of each query
    are kept (without scores, its first ``depth`` unique ones), so memory
    follows queries x depth, not the file.  An id longer than MAX_ID bytes
    is an error, and so is a run larger than MAX_RUN_BYTES after gunzip.  ``keep(qid, docid)``, when given, filters documents
    before that cut (``--judged-only``, see ``judged_filter``); with
    ``doc_id_sep`` chunk ids become document ids before it
    (``--doc-id-sep``), since k counts documents then.  The documents of a
    query come in no set order.
    """
    return _read_run(path, fmt, depth, keep, doc_id_sep)[0]


def _read_run(path: str, fmt: str = "auto", depth: Optional[int] = None, keep=None, doc_id_sep: Optional[str] = None,
              judged: Optional[Qrels] = None, cutoffs: Optional[List[int]] = None,
              max_bytes: int = MAX_RUN_BYTES) -> Tuple[Run, bool]:
    """``read_run``, and whether any document read (before any cut) is judged for its query in ``judged``.

    A run that shares no judged document with the qrels was never evaluated:
    the command line refuses it.  With ``cutoffs`` (and ``judged`` and
    ``depth``, more than the largest cutoff), each query is reduced as it is
    read to what ``evaluate`` needs at those cutoffs (a ``_ReducedRun``), so
    memory follows the judgments, not the run.  A run whose queries'
    lines do not come together is read again whole (a file) or not
    reduced at all (standard input, which cannot be read twice).
    """
    if depth is not None and (not _is_int(depth) or depth < 1):  # 0 or less would keep nothing, or break the pruning
        raise RagEvalError(f"depth must be a positive integer, got {depth!r}")
    if cutoffs is not None and (judged is None or depth is None or path == "-"):
        cutoffs = None
    try:
        return _read_run_once(path, fmt, depth, keep, doc_id_sep, judged, cutoffs, max_bytes, path != "-")
    except _ReadAgain:
        return _read_run_once(path, fmt, depth, keep, doc_id_sep, judged, None, max_bytes, False)


def _read_run_once(path: str, fmt: str, depth: Optional[int], keep, doc_id_sep: Optional[str],
                   judged: Optional[Qrels], cutoffs: Optional[List[int]], max_bytes: int,
                   stream_json: bool) -> Tuple[Run, bool]:
    with _opened(path) as inp:
        fmt = _detect_format(inp) if fmt == "auto" else fmt
        if fmt == "jsonl":
            return _jsonl_run(inp, depth, keep, doc_id_sep, judged, cutoffs, max_bytes)
        if fmt == "trec":
            return _trec_run(inp, depth, keep, doc_id_sep, judged, cutoffs, max_bytes)
        if stream_json:
            return _json_run(inp, depth, keep, doc_id_sep, judged, cutoffs, max_bytes)
        run = _parse_json(inp, "run")
        _check_run(run, inp.source)
    named = documents_run(run, doc_id_sep) if doc_id_sep and judged is not None else run
    found = judged is not None and any(docid in judged.get(qid, ()) for qid, entry in named.items() for docid in entry)
    return run, found


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
            data = _parse_json(inp, "slices", MAX_SMALL_JSON)
            if not isinstance(data, dict):
                raise RagEvalError(f"expected a JSON object of query -> tag or [tags], got {_kind(data)}", inp.source)
            pairs = [(qid, tags, None) for qid, tags in data.items()]
    slices: Slices = {}
    for qid, tags, lineno in pairs:
        tags = [tags] if isinstance(tags, str) else tags
        if not isinstance(tags, list) or not all(
                isinstance(tag, str) and tag.isprintable() and tag and ":" not in tag for tag in tags):
            raise RagEvalError(f"query {_brief(qid)}: a slice is a non-empty printable name without ':', "
                               "or a list of them", path, lineno)
        slices.setdefault(qid, [])
        slices[qid] += [tag for tag in tags if tag not in slices[qid]]
    return slices


def slice_members(slices: Slices) -> Dict[str, List[str]]:
    """tag -> its queries, sorted."""
    members: Dict[str, List[str]] = {}
    for qid in sorted(slices):
        for tag in slices[qid]:
            members.setdefault(tag, []).append(qid)
    return dict(sorted(members.items()))


# === Reporting ===
# One report (a dict, the JSON format itself) is built once; each format in
# FORMATTERS renders it.


def build_report(result: dict, *, gate_report: Optional[dict] = None, intervals: Optional[dict] = None,
                 slices: Optional[Slices] = None, per_query: bool = False) -> dict:
    """The report of a run: mean, unscored and the counts, plus what the options asked for."""
    report = {
        "abstention": result["abstention"],
        "dropped": result["dropped"],
        "k": result["k"],
        "mean": dict(result["mean"]),
        "queries": result["queries"],
        "skipped": result["skipped"],
        "ties": result["ties"],
        "unscored": result["unscored"],
    }
    if per_query:
        report["per_query"] = _per_query_full_names(result)
    if gate_report is not None:
        report["gate"] = gate_report
    if intervals is not None:
        report["intervals"] = {metric: list(pair) for metric, pair in intervals.items()}
    if slices is not None:
        report["slices"] = slice_report(result, slices)
    return report


def _per_query_full_names(result: dict) -> Dict[str, Dict[str, float]]:
    table: Dict[str, Dict[str, float]] = {}
    for metric, scores in per_query_by_metric(result).items():
        for qid, value in scores.items():
            table.setdefault(qid, {})[metric] = value
    return {qid: dict(sorted(values.items())) for qid, values in sorted(table.items())}


def slice_report(result: dict, slices: Slices) -> Dict[str, dict]:
    """Per slice: how many of its queries were scored, and their means."""
    scores = per_query_by_metric(result)
    report = {}
    for tag, queries in slice_members(slices).items():
        scored = [qid for qid in queries if qid in result["per_query"]]
        report[tag] = {"queries": len(scored),
                       "mean": {metric: _mean(values[qid] for qid in scored) for metric, values in scores.items()}}
    return report


def _format_json(report: dict, digits: int) -> str:
    """The report as one JSON object, keys sorted.  The means (and their
    intervals) are rounded to ``digits`` for reading; everything else keeps
    full precision for the scripts that read it."""
    shown = dict(report)
    shown["mean"] = {metric: round(value, digits) + 0.0 for metric, value in report["mean"].items()}
    if "intervals" in report:
        shown["intervals"] = {m: [round(bound, digits) + 0.0 for bound in pair] for m, pair in report["intervals"].items()}
    return json.dumps(shown, sort_keys=True, indent=2) + "\n"


def _shown(value, digits: int, missing: str = "-") -> str:
    if value is None:
        return missing
    if isinstance(value, float):
        return f"{round(value, digits) + 0.0:.{digits}f}"  # + 0.0 turns -0.0 into 0.0
    return str(value)


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


def _metric_rows(report: dict, digits: int, missing: str = "-") -> List[List[str]]:
    """Header and one row per metric (and gated slice): the table, markdown and csv summaries."""
    gate_entries = report.get("gate", {}).get("metrics", {})
    floors = report.get("gate", {}).get("floors", {})
    intervals = report.get("intervals")
    header = ["metric", "mean"]
    if intervals is not None:
        header += ["95% low", "95% high"]
    if gate_entries or floors:
        header += ["baseline", "delta", "allowed drop", "p (Holm)", "verdict"]
    rows = [header]
    for metric in sorted(set(report["mean"]) | set(gate_entries) | set(floors)):
        mean = report["mean"].get(metric, gate_entries.get(metric, floors.get(metric, {})).get("now"))
        row = [metric, _shown(mean, digits, missing)]
        if intervals is not None:
            low, high = intervals.get(metric, (None, None))
            row += [_shown(low, digits, missing), _shown(high, digits, missing)]
        if gate_entries or floors:
            entry = gate_entries.get(metric, {})
            verdicts = [entry.get("verdict")] + ([f"floor {floors[metric]['min']:g}: {floors[metric]['verdict']}"]
                                                 if metric in floors else [])
            row += [_shown(entry.get("baseline"), digits, missing), _shown(entry.get("delta"), digits, missing),
                    _shown(entry.get("allowed_drop"), digits, missing), _shown(entry.get("p_holm"), digits, missing),
                    "; ".join(v for v in verdicts if v) or missing]
        rows.append(row)
    return rows


def _abstention_line(report: dict) -> Optional[str]:
    abstention = report["abstention"]
    if not abstention["queries"]:
        return None
    return (f"abstention: {len(abstention['abstained'])} of {abstention['queries']} unanswerable queries "
            f"got no answer ({abstention['share']:.0%})")


def _slice_rows(report: dict, digits: int) -> List[List[str]]:
    slices = report.get("slices") or {}
    metrics = sorted(report["mean"])
    rows = [["slice", "queries"] + metrics]
    for tag, entry in slices.items():
        rows.append([tag, str(entry["queries"])] + [_shown(entry["mean"].get(m), digits) for m in metrics])
    return rows


def _per_query_rows(report: dict, digits: int) -> List[List[str]]:
    table = report.get("per_query") or {}
    metrics = sorted(report["mean"])
    return [["query"] + metrics] + [[qid] + [_shown(values.get(m), digits) for m in metrics]
                                     for qid, values in table.items()]


def _aligned(rows: List[List[str]]) -> str:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _verdict_line(report: dict) -> str:
    gate_report = report.get("gate")
    if gate_report is None:
        return f"scored {report['queries']} queries"
    failed = sorted({key for part in ("metrics", "floors") for key, entry in gate_report[part].items()
                     if entry["verdict"] in ("missing", "regression", "below floor")})
    verdict = "PASS" if gate_report["passed"] else f"FAIL ({len(failed)}: {', '.join(failed)})"
    return f"{verdict}, rule '{gate_report['rule']}', {report['queries']} queries scored"


def _format_table(report: dict, digits: int) -> str:
    parts = [_verdict_line(report), _aligned(_metric_rows(report, digits))]
    line = _abstention_line(report)
    if line:
        parts.append(line)
    if report.get("slices"):
        parts.append(_aligned(_slice_rows(report, digits)))
    if "per_query" in report:
        parts.append(_aligned(_per_query_rows(report, digits)))
    return "\n\n".join(parts) + "\n"


def _markdown_table(rows: List[List[str]]) -> str:
    def cells(row):
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"

    return "\n".join([cells(rows[0]), "|" + "---|" * len(rows[0])] + [cells(row) for row in rows[1:]])


def _format_markdown(report: dict, digits: int) -> str:
    """Ready to paste into a pull-request comment or a GitHub step summary."""
    parts = [f"### rag_eval: {_verdict_line(report)}", _markdown_table(_metric_rows(report, digits))]
    for metric, entry in report.get("gate", {}).get("metrics", {}).items():
        if entry["verdict"] != "pass" and entry.get("largest_drops"):
            drops = ", ".join(f"`{qid}` ({delta:+.{digits}f})" for qid, delta in entry["largest_drops"])
            parts.append(f"**{metric}**: {_count(entry['worse'], 'query', 'queries')} worse, {entry['improved']} better; "
                         f"largest drops {drops}" + (f"; hit to miss: {len(entry['hit_to_miss'])}"
                                                       if entry["hit_to_miss"] else ""))
    line = _abstention_line(report)
    if line:
        parts.append(line[0].upper() + line[1:])
    if report.get("slices"):
        parts.append(_markdown_table(_slice_rows(report, digits)))
    if "per_query" in report:
        parts.append("<details><summary>Per query</summary>\n\n" + _markdown_table(_per_query_rows(report, digits))
                     + "\n\n</details>")
    return "\n\n".join(parts) + "\n"


def _format_csv(report: dict, digits: int) -> str:
    """One row per metric; with per-query scores, one row per (query, metric)."""
    import csv
    import io

    out = io.StringIO()
    # RFC 4180's CRLF: a field holding a CR or LF is then quoted on every Python (3.9's csv left a lone CR bare).
    writer = csv.writer(out, lineterminator="\r\n")
    if "per_query" in report:
        writer.writerow(["query", "metric", "value"])
        for qid, values in report["per_query"].items():
            writer.writerows([qid, metric, _shown(value, digits)] for metric, value in values.items())
        abstained = set(report["abstention"]["abstained"])
        writer.writerows([qid, "abstention", "1" if qid in abstained else "0"] for qid in report["unscored"])
    else:
        rows = _metric_rows(report, digits, missing="")
        writer.writerows(rows)
        shown = {row[0] for row in rows}
        for tag, entry in (report.get("slices") or {}).items():  # a slice's means, named as tolerances name them
            writer.writerows([f"{tag}:{metric}", _shown(value, digits, "")] + [""] * (len(rows[0]) - 2)
                             for metric, value in entry["mean"].items() if f"{tag}:{metric}" not in shown)
        share = report["abstention"]["share"]
        if share is not None:
            writer.writerow(["abstention", _shown(share, digits)] + [""] * (len(rows[0]) - 2))
    return out.getvalue()


FORMATTERS: Dict[str, Callable[[dict, int], str]] = {
    "json": _format_json,
    "table": _format_table,
    "markdown": _format_markdown,
    "csv": _format_csv,
}


def _gate_lines(gate_report: dict) -> List[str]:
    """The ``REGRESSION <metric>: baseline <was>, now <now>`` lines, one per failed metric or floor."""
    lines = []
    for metric, entry in gate_report["metrics"].items():
        if entry["verdict"] in ("missing", "regression"):
            now = "missing" if entry["now"] is None else f"{entry['now']:.4f}"
            lines.append(f"REGRESSION {metric}: baseline {entry['baseline']:.4f}, now {now}")
    for metric, entry in gate_report["floors"].items():
        if entry["verdict"] != "pass":
            now = "missing" if entry["now"] is None else f"{entry['now']:.4f}"
            lines.append(f"REGRESSION {metric}: floor {entry['min']:.4f}, now {now}")
    return lines


def _junit_xml(report: dict) -> str:
    """JUnit XML, one test case per gated metric, slice and floor: GitLab, Jenkins and the rest read it."""
    from xml.etree import ElementTree

    gate_report = report.get("gate") or {"metrics": {}, "floors": {}}
    cases = [(key, entry, f"baseline {_shown(entry['baseline'], 4)}, now {_shown(entry['now'], 4)}, "
                          f"allowed drop {_shown(entry['allowed_drop'], 4)}")
             for key, entry in gate_report["metrics"].items()]
    cases += [(f"floor {key}", entry, f"floor {entry['min']:.4f}, now {_shown(entry['now'], 4)}")
              for key, entry in gate_report["floors"].items()]
    if not cases:  # nothing gated: one passing case, since CI systems reject an empty report
        cases = [("scored", {"verdict": "pass"}, f"{report['queries']} queries scored, no baseline or floor to gate")]
    failed = [case for case in cases if case[1]["verdict"] in ("missing", "regression", "below floor")]
    suite = ElementTree.Element("testsuite", name="rag_eval", tests=str(len(cases)), failures=str(len(failed)),
                                errors="0", skipped="0")
    for key, entry, detail in cases:
        case = ElementTree.SubElement(suite, "testcase", classname="rag_eval.gate", name=key)
        if (key, entry, detail) in failed:
            ElementTree.SubElement(case, "failure", message=f"{key}: {entry['verdict']}", type=entry["verdict"]).text = detail
        else:
            ElementTree.SubElement(case, "system-out").text = f"{entry['verdict']}: {detail}"
    suites = ElementTree.Element("testsuites", name="rag_eval", tests=str(len(cases)), failures=str(len(failed)))
    suites.append(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(suites, encoding="unicode") + "\n"


def _github_escape(text: str) -> str:
    """Workflow command data escapes (GitHub's toolkit): %, CR and LF."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gate_warnings(gate_report: dict) -> List[str]:
    """Say when a paired comparison cannot tell a drop from noise."""
    lines = []
    coarse = []
    for metric, entry in gate_report["metrics"].items():
        if entry.get("unresolvable") and entry["now"] is not None and entry["now"] < entry["baseline"]:
            differing = entry["worse"] + entry["improved"]
            which = {0: "no query differs", 1: "only one query differs"}.get(differing, f"only {differing} queries differ")
            lines.append(f"rag_eval: warning: {metric} fell, but {which}: "
                         f"no outcome could reach p < {gate_report['alpha']:g} (unresolvable)")
        detectable = entry.get("min_detectable_drop")
        if detectable is not None and entry["allowed_drop"] < detectable:
            needed = entry["queries_needed"]
            coarse.append(f"{metric} resolves {detectable:.4f}" + (f" (~{needed} queries would resolve {entry['allowed_drop']:.4f})" if needed else ""))
    if coarse:
        lines.append(f"rag_eval: warning: tolerance finer than this test set resolves with {POWER:.0%} power, "
                     "so the gate mostly measures noise: " + "; ".join(coarse))
    return lines


def explain() -> str:
    """Every measure's definition and its names in other tools, from the measure table."""
    tools = list(MEASURES[0].others)
    parts = []
    for m in MEASURES:
        names = "\n".join(f"    {tool:<12}{m.others[tool]}" for tool in tools)
        role = "reported by default" if m.default else f"reported with --measures {m.name}"
        parts.append(f"{m.name}@k: {m.summary}\n  {m.definition}\n  ({role}; "
                     f"{'a good gate' if m.gate else 'not recommended as a gate'})\n  same number elsewhere:\n{names}")
    return "\n\n".join(parts + [RULES]) + "\n"


# === Command line ===


# Option parsers: each turns one option's text into a value or raises
# RagEvalError saying what was expected; the parser adds the option's name.


def _number(text: str) -> Optional[float]:
    """A finite number, else None (float() would take '0_02', 'nan' and 'inf')."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if "_" not in text and math.isfinite(value) else None


def _cutoffs_arg(text: str) -> List[int]:
    parts = [_whole(part.strip()) for part in text.split(",")]
    if not all(parts):  # None, or 0
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise RagEvalError(f"expected positive integers such as 5 or 1,3,10, got {shown!r}")
    return sorted(set(parts))


def _amount(text: str) -> Tolerance:
    relative = text.endswith("%")
    value = _number(text[:-1] if relative else text)
    if value is None or value < 0:
        raise RagEvalError(f"expected a finite number >= 0 (or a percentage such as 5%), got {text!r}")
    return Tolerance(value / 100 if relative else value, relative)


def _tolerance_arg(text: str) -> Tuple[str, Tolerance]:
    """``0.02``, ``5%`` (every metric) or ``ndcg@10=0.01``, ``recall@5=5%`` (one metric)."""
    metric, sep, amount = text.rpartition("=")
    if sep and not metric:
        raise RagEvalError(f"expected METRIC=X or X, got {text!r}")
    return metric, _amount(amount)


def _floor_arg(text: str) -> Tuple[str, float]:
    metric, sep, amount = text.partition("=")
    value = _number(amount)
    if not sep or not metric or value is None or not 0 <= value <= 1:
        raise RagEvalError(f"expected metric=value with a value from 0 to 1, such as recall@5=0.8, got {text!r}")
    return metric, value


def _whole_arg(low: int, high: Optional[int] = None):
    def parse(text: str) -> int:
        value = _whole(text)
        if value is None or value < low or (high is not None and value > high):
            span = f"an integer from {low} to {high}" if high is not None else (
                "a positive integer" if low == 1 else f"an integer >= {low}")
            raise RagEvalError(f"expected {span}, got {text!r}")
        return value

    return parse


def _alpha_arg(text: str) -> float:
    value = _number(text)
    if value is None or not 0 < value < 1:
        raise RagEvalError(f"expected a number between 0 and 1, got {text!r}")
    return value


def _separator_arg(text: str) -> str:
    if not text:
        raise RagEvalError("expected a non-empty separator such as '#'")
    return text


def _score_arg(text: str) -> float:
    value = _number(text)
    if value is None:
        raise RagEvalError(f"expected a finite number, got {text!r}")
    return value


def _measures_arg(text: str) -> List[str]:
    return _check_measures(name.strip() for name in text.split(",") if name.strip())


def _help_epilog() -> str:
    width = max(len(m.name) for m in MEASURES) + 2
    rows = [f"  {m.name + '@k':<{width + 2}}{m.summary}" for m in MEASURES]
    return "\n".join(
        [
            "measures (default: " + ", ".join(DEFAULT_MEASURES) + "):",
            *rows,
            "",
            RULES,
            "",
            "exit codes:",
            f"  {EXIT_OK}    scored, no regression",
            f"  {EXIT_REGRESSION}    at least one regression (lines 'REGRESSION <metric>: ...' on stderr)",
            f"  {EXIT_ERROR}    bad usage or bad input (one line 'rag_eval: error: ...' on stderr)",
            f"  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)",
            f"  {EXIT_BROKEN_PIPE}  standard output closed early (as in '| head')",
        ]
    )


def _build_parser():
    import argparse  # the command line only; importers of the API skip it

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # one line, our exit code, no usage dump
            raise RagEvalError(message)

    def typed(parse):
        """argparse shows an ArgumentTypeError's own words after the option's name."""
        def convert(text):
            try:
                return parse(text)
            except RagEvalError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None

        convert.__name__ = parse.__name__
        return convert

    parser = Parser(
        prog="rag_eval",
        description="Score a retrieval run against relevance judgments (qrels) and gate CI on regressions.",
        epilog=_help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("qrels", metavar="QRELS", nargs="?",
                        help="judgments: JSON, JSONL or TREC qrels, maybe gzipped; - for stdin")
    parser.add_argument("run", metavar="RUN", nargs="?",
                        help="the run: JSON (ranked or scored), JSONL or TREC, maybe gzipped; - for stdin")
    parser.add_argument("--k", type=typed(_cutoffs_arg), default=[DEFAULT_K], metavar="K[,K...]",
                        help=f"cutoffs: the number of chunks passed to the model (default {DEFAULT_K})")
    parser.add_argument("--measures", type=typed(_measures_arg), default=list(DEFAULT_MEASURES), metavar="NAME[,NAME...]",
                        help="measures to report: " + ", ".join(_BY_NAME))
    gating = parser.add_argument_group("gate")
    gating.add_argument("--baseline", metavar="FILE",
                        help="baseline to gate against: JSON of metric -> mean, or an extended baseline")
    gating.add_argument("--baseline-run", metavar="RUN",
                        help="gate against this older run, scored here with the same qrels and conventions")
    gating.add_argument("--max-drop", type=typed(_tolerance_arg), action="append", default=[], metavar="[METRIC=]X[%]",
                        help=f"largest tolerated fall below the baseline: for every metric (default {DEFAULT_MAX_DROP}) "
                             "or one (ndcg@10=0.01); X%% is relative to the baseline; repeatable")
    gating.add_argument("--min", type=typed(_floor_arg), action="append", default=[], metavar="METRIC=X",
                        help="floor: fail when the metric is below X, whatever the baseline; repeatable")
    gating.add_argument("--gate", choices=GATE_RULES, default="drop",
                        help="drop: any fall beyond the tolerance fails (default); significant: it must also "
                             "be significant (Holm-corrected p < alpha, interval below 0)")
    gating.add_argument("--alpha", type=typed(_alpha_arg), default=DEFAULT_ALPHA, help=f"significance level (default {DEFAULT_ALPHA})")
    gating.add_argument("--resamples", type=typed(_whole_arg(100)), default=DEFAULT_RESAMPLES, metavar="N",
                        help=f"randomization and bootstrap resamples (default {DEFAULT_RESAMPLES})")
    gating.add_argument("--seed", type=typed(_whole_arg(0)), default=DEFAULT_SEED, metavar="N",
                        help=f"seed of the resampling (default {DEFAULT_SEED}); same inputs and seed, same output")
    gating.add_argument("--largest-drops", type=typed(_whole_arg(0)), default=5, metavar="N",
                        help="queries listed per metric among the largest drops (default 5)")
    gating.add_argument("--ci", action="store_true",
                        help="add a 95%% interval to every mean (Clopper-Pearson for 0/1 measures, else bootstrap)")
    gating.add_argument("--allow-qrels-change", action="store_true",
                        help="compare with an extended baseline made on other qrels (reported)")
    gating.add_argument("--save-baseline", metavar="FILE",
                        help="write an extended baseline (means, per-query scores, conventions, qrels sha256)")
    gating.add_argument("--update-baseline", action="store_true",
                        help="with --baseline: rewrite it with this run's numbers when the gate passes")
    gating.add_argument("--ratchet", action="store_true",
                        help="with --update-baseline: keep the better of the old and new mean of each metric")
    parser.add_argument("--gain", choices=GAINS, default="exp",
                        help="nDCG gain: exp = 2**grade - 1 (default), linear = the grade (trec_eval's ndcg_cut)")
    parser.add_argument("--min-grade", type=typed(_whole_arg(1)), default=1, metavar="N",
                        help="lowest grade that counts as relevant (default 1; trec_eval -l)")
    parser.add_argument("--judged-only", action="store_true",
                        help="drop unjudged documents from each ranking before the cutoff (trec_eval -J)")
    parser.add_argument("--drop-unknown-queries", action="store_true",
                        help="drop run queries that the qrels lack (default: an input error)")
    parser.add_argument("--qrels-format", choices=FORMATS, default="auto", help="default: detected from the content")
    parser.add_argument("--run-format", choices=FORMATS, default="auto", help="default: detected from the content")
    parser.add_argument("--doc-id-sep", metavar="SEP", type=typed(_separator_arg),
                        help="score documents, not chunks: 'guide#3' is chunk 3 of document 'guide' with SEP '#'")
    def input_bytes(text: str) -> int:
        value = _whole(text, 19)
        if not value:
            raise RagEvalError(f"expected a positive number of bytes, got {text!r}")
        return value

    parser.add_argument("--max-input-bytes", type=typed(input_bytes), default=MAX_RUN_BYTES, metavar="N",
                        help=f"largest run read, in bytes after gunzip (default {MAX_RUN_BYTES}: 4 GiB)")
    parser.add_argument("--abstain-below", type=typed(_score_arg), metavar="SCORE",
                        help="an unanswerable query counts as abstained when no score reaches SCORE")
    reports = parser.add_argument_group("reports")
    reports.add_argument("--format", choices=tuple(FORMATTERS), default="json",
                         help="stdout: json (default), table, markdown or csv")
    reports.add_argument("--per-query", action="store_true", help="add every query's scores to the report")
    reports.add_argument("--digits", type=typed(_whole_arg(1, 17)), default=DEFAULT_DIGITS, metavar="N",
                         help=f"decimals of the numbers printed (default {DEFAULT_DIGITS})")
    reports.add_argument("--slices", metavar="FILE",
                         help="query tags (JSON {qid: tag or [tags]} or JSONL): means per slice; "
                              "--max-drop SLICE:METRIC=X gates one")
    reports.add_argument("--output", metavar="FILE",
                         help="write the full result (per-query scores, conventions, versions, input sha256s)")
    reports.add_argument("--junit", metavar="FILE", help="write JUnit XML, one test case per gated metric")
    reports.add_argument("--unjudged", metavar="FILE",
                         help="write the unjudged documents of each top k as JSONL to label (most consequential first)")
    reports.add_argument("--explain", action="store_true",
                         help="print every measure's definition and its names in other tools, then exit")
    parser.add_argument("--version", action="version", version=f"rag_eval {__version__}")
    return parser


def _warn(message: str) -> None:
    sys.stderr.write(message + "\n")


def _check_options(args) -> None:
    if args.qrels is None or args.run is None:
        raise RagEvalError("the following arguments are required: QRELS RUN (or --explain)")
    inputs = [path for path in (args.qrels, args.run, args.baseline, args.baseline_run, args.slices) if path]
    if inputs.count("-") > 1:
        raise RagEvalError("only one input can be - (standard input)")
    if args.baseline and args.baseline_run:
        raise RagEvalError("--baseline and --baseline-run exclude each other: choose one")
    if args.run == "-" and args.judged_only and args.unjudged:
        raise RagEvalError("--unjudged with --judged-only reads the run twice; standard input cannot be read again")
    if args.update_baseline and (not args.baseline or args.baseline == "-"):
        raise RagEvalError("--update-baseline needs --baseline FILE (a file it can rewrite)")
    if args.ratchet and not args.update_baseline:
        raise RagEvalError("--ratchet goes with --update-baseline")
    outputs = [(option, path) for option, path in (("--save-baseline", args.save_baseline), ("--output", args.output),
               ("--junit", args.junit), ("--unjudged", args.unjudged)) if path is not None]
    for option, path in outputs:
        if not path:
            raise RagEvalError(f"{option}: expected a file name, got ''")
    for option, path in outputs:
        if path == "-" or any(_same_file(path, source) for source in inputs if source != "-"):
            raise RagEvalError(f"{option} would overwrite an input" + (
                "; use --update-baseline to rewrite the baseline" if option == "--save-baseline" else ""), path)
    if len({os.path.realpath(path) for _, path in outputs}) < len(outputs):
        raise RagEvalError("two outputs name the same file")


def _same_file(first: str, second: str) -> bool:
    return os.path.realpath(first) == os.path.realpath(second)


def _gate_settings(args, result: dict, slices: Optional[Slices], baseline: Optional[Baseline]) -> GateSettings:
    """Tolerances and floors from the command line, every name checked at once."""
    default = Tolerance(DEFAULT_MAX_DROP)
    tolerances = {}
    for key, tolerance in args.max_drop:
        if key:
            tolerances[key] = tolerance
        else:
            default = tolerance
    floors = {key: value for key, value in args.min}
    problems = [_name_problem(key, "--max-drop", result, slices, baseline) for key, _ in args.max_drop if key]
    problems += [_name_problem(key, "--min", result, slices, baseline) for key, _ in args.min]
    problems = [problem for problem in problems if problem]
    if problems:
        raise RagEvalError("; ".join(problems))
    return GateSettings(args.gate, default, tolerances, floors, args.alpha, args.resamples, args.seed,
                        args.largest_drops)


def _name_problem(key: str, option: str, result: dict, slices: Optional[Slices],
                  baseline: Optional[Baseline]) -> Optional[str]:
    """What is wrong with a metric (or slice:metric) that a tolerance or floor names, or None."""
    tag, _, metric = key.rpartition(":")
    try:
        parse_metric(metric)
    except RagEvalError as exc:
        return f"{option}: {exc}"
    members = slice_members(slices or {})
    if metric not in result["mean"]:
        return f"{option}: {metric} is not computed by this run (see --measures and --k)"
    if tag and tag not in members:
        return f"{option}: no slice named {tag!r}" + ("" if slices else " (see --slices)")
    if tag and not any(qid in result["per_query"] for qid in members[tag]):
        return f"{option}: slice {tag!r} has no scored query"
    if option == "--max-drop" and not tag and baseline is not None and key not in baseline.means:
        return f"--max-drop: {key} is not in the baseline, so nothing would be gated"
    if option == "--max-drop" and baseline is None:
        return f"--max-drop: {key} has no baseline to be compared with (see --baseline)"
    return None


def _comparable_baseline(args, baseline: Baseline, result: dict, fingerprint: str) -> bool:
    """Refuse a baseline made otherwise; True when only the qrels changed and that is allowed."""
    if not set(baseline.means) & set(result["mean"]):
        raise RagEvalError("the baseline names no metric this run computes (baseline: "
                           f"{', '.join(sorted(baseline.means)) or 'nothing'})", args.baseline)
    differences = _differences(baseline, result, fingerprint)
    qrels_changed = any(d.startswith("qrels:") for d in differences)
    if qrels_changed and args.allow_qrels_change:
        differences = [d for d in differences if not d.startswith("qrels:")]
    if differences:
        advice = " (save a new baseline in the change that earns it" + (
            ", or accept new judgments with --allow-qrels-change)" if qrels_changed and not args.allow_qrels_change
            else ")")
        raise RagEvalError("not comparable, made with other conventions or judgments: " + "; ".join(differences)
                           + advice, args.baseline)
    return qrels_changed


def _file_sha256(path: str) -> Optional[str]:
    """sha256 of a file as it lies on disk; None for standard input, which cannot be read twice."""
    import hashlib

    if path == "-":
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(READ_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _full_output(args, argv: List[str], report: dict, result: dict, fingerprint: str) -> str:
    """--output: everything needed to say how the numbers were made."""
    import platform

    full = dict(report)
    full["per_query"] = _per_query_full_names(result)
    full["conventions"] = dict(_conventions_record(result), abstain_below=args.abstain_below)
    full["tool"] = f"rag_eval {__version__}"
    full["python"] = platform.python_version()
    full["command"] = ["rag_eval"] + list(argv)
    full["inputs"] = {role: {"path": path, "sha256": _file_sha256(path)}
                      for role, path in (("qrels", args.qrels), ("run", args.run), ("baseline", args.baseline),
                                         ("baseline_run", args.baseline_run), ("slices", args.slices)) if path}
    full["inputs"]["qrels"]["judgments_sha256"] = fingerprint
    return json.dumps(full, sort_keys=True, indent=2) + "\n"


def _unjudged_text(rows: List[Tuple[str, str, int]]) -> str:
    """JSONL worklist: set each relevance (-1 means unjudged) and append the rows to JSONL qrels."""
    return "".join(json.dumps({"query_id": qid, "doc_id": docid, "rank": rank, "relevance": -1}) + "\n"
                   for qid, docid, rank in rows)


def _run(args, argv: List[str]) -> int:
    """The command line's job, step by step: read, score, gate, write the files, print."""
    if args.explain:
        sys.stdout.write(explain())
        return EXIT_OK
    _check_options(args)
    baseline = read_baseline(args.baseline) if args.baseline else None
    slices = read_slices(args.slices) if args.slices else None
    qrels = read_qrels(args.qrels, args.qrels_format)
    result, run = _score_file(args, qrels, args.run)
    # hashlib costs an import and a pass over the qrels: only when a baseline or the output needs it.
    needs_fingerprint = args.baseline or args.baseline_run or args.save_baseline or args.output
    fingerprint = qrels_fingerprint(qrels) if needs_fingerprint else ""
    if args.baseline_run:
        old, _ = _score_file(args, qrels, args.baseline_run)
        baseline = Baseline(old["mean"], per_query_by_metric(old), _conventions_record(old), fingerprint)
    gate_report = _gate_result(args, result, baseline, slices, fingerprint)
    intervals = mean_intervals(result, args.resamples, args.seed) if args.ci else None
    report = build_report(result, gate_report=gate_report, intervals=intervals, slices=slices,
                          per_query=args.per_query)
    passed = gate_report is None or gate_report["passed"]
    _write_files(args, argv, report, result, run, qrels, fingerprint, baseline, passed)
    _print_report(args, report, result, passed)
    return EXIT_OK if passed else EXIT_REGRESSION


def _score_file(args, qrels: Qrels, path: str) -> Tuple[dict, Run]:
    """Read one run as the options say and score it; refuse a run that nothing was evaluated on."""
    sep = args.doc_id_sep
    judged = documents_qrels(qrels, sep) if sep else qrels
    keep = judged_filter(judged, args.min_grade) if args.judged_only else None
    # One more than the largest cutoff: enough to see a tie across it.
    # Reduced while read, except for --unjudged: its worklist needs the unjudged ids.
    cutoffs = None if args.unjudged else args.k
    run, any_judged = _read_run(path, args.run_format, max(args.k) + 1, keep, sep, judged, cutoffs,
                                args.max_input_bytes)
    try:
        result = evaluate(qrels, run, args.k[0] if len(args.k) == 1 else args.k, measures=args.measures,
                          gain=args.gain, min_grade=args.min_grade, judged_only=args.judged_only,
                          drop_unknown_queries=args.drop_unknown_queries, doc_id_sep=sep,
                          abstain_below=args.abstain_below)
        _check_evaluated(result, path, any_judged)
    except RagEvalError as exc:  # name the file that evaluate() could only call "qrels" or "run"
        files = {"qrels": args.qrels, "run": path}
        if exc.source in files:
            raise RagEvalError(exc.detail, "<stdin>" if files[exc.source] == "-" else files[exc.source]) from None
        raise
    return result, run


def _gate_result(args, result: dict, baseline: Optional[Baseline], slices: Optional[Slices],
                 fingerprint: str) -> Optional[dict]:
    """The gate's report, or None when there is nothing to gate (no baseline, no floor)."""
    qrels_changed = baseline is not None and _comparable_baseline(args, baseline, result, fingerprint)
    if qrels_changed and args.ratchet:
        raise RagEvalError("--ratchet would keep means measured on other judgments; update without it", args.baseline)
    settings = _gate_settings(args, result, slices, baseline)
    if baseline is None and not settings.floors:
        return None
    gate_report = gate(result, baseline, settings, slices)
    gate_report["qrels_changed"] = qrels_changed
    return gate_report


def _write_files(args, argv: List[str], report: dict, result: dict, run: Run, qrels: Qrels, fingerprint: str,
                 baseline: Optional[Baseline], passed: bool) -> None:
    """Every file the options ask for; before anything is printed, so that a write that fails fails the run."""
    if args.output:
        write_atomically(args.output, _full_output(args, argv, report, result, fingerprint))
    if args.junit:
        write_atomically(args.junit, _junit_xml(report))
    if args.unjudged:
        # --judged-only filtered the run while reading it; the worklist needs what it filtered out.
        sep = args.doc_id_sep
        listed = read_run(args.run, args.run_format, depth=max(args.k), doc_id_sep=sep) if args.judged_only else run
        write_atomically(args.unjudged, _unjudged_text(unjudged_documents(qrels, listed, max(args.k), sep)))
    if args.save_baseline:
        write_atomically(args.save_baseline, _baseline_text(result, fingerprint))
    if args.update_baseline and passed:
        write_atomically(args.baseline, _baseline_text(result, fingerprint, baseline if args.ratchet else None))


def _print_report(args, report: dict, result: dict, passed: bool) -> None:
    """The report on stdout; notes, warnings and REGRESSION lines on stderr (and GitHub's annotations)."""
    sys.stdout.write(FORMATTERS[args.format](report, args.digits))
    sys.stdout.flush()
    gate_report = report.get("gate")
    warnings, failures = _messages(result, gate_report, bool(gate_report and gate_report["qrels_changed"]))
    if args.update_baseline and passed:
        warnings.append(f"rag_eval: note: updated {args.baseline}" + (" (ratchet)" if args.ratchet else ""))
    for line in warnings + failures:
        _warn(line)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        _github(report, args.digits, warnings, failures)


def _check_evaluated(result: dict, path: str, any_judged: bool) -> None:
    """A gate must not pass on a run that was never really evaluated.

    evaluate() scores such a run 0 everywhere, as a library should; the
    command line refuses it, since a CI step that compared nothing must fail.
    """
    source = "<stdin>" if path == "-" else path
    if len(result["skipped"]) == result["queries"]:
        left = "no judged document (--judged-only)" if result["conventions"]["judged_only"] else "no document"
        raise RagEvalError(f"the run retrieved {left} for any judged query: nothing was evaluated", source)
    if not any_judged:
        raise RagEvalError("no document of the run is judged in the qrels, so nothing was evaluated "
                           "(are they about the same documents?)", source)


def _messages(result: dict, gate_report: Optional[dict], qrels_changed: bool) -> Tuple[List[str], List[str]]:
    """The stderr lines: notes and warnings, then the REGRESSION lines."""
    lines = []
    if result["dropped"]:
        lines.append(f"rag_eval: note: dropped {len(result['dropped'])} run queries that the qrels lack")
    if qrels_changed:
        lines.append("rag_eval: note: the qrels differ from the baseline's (--allow-qrels-change)")
    tied = {k: n for k, n in result["ties"].items() if n}
    if tied:
        counts = ", ".join(f"k={k}: {_count(n, 'query', 'queries')}" for k, n in tied.items())
        lines.append(f"rag_eval: note: tied scores straddle a cutoff ({counts}); "
                     "ties are broken by docid, descending, as trec_eval does")
    for metric, value in result["judged"].items():
        if value < LOW_JUDGED and not result["conventions"]["judged_only"]:
            lines.append(f"rag_eval: warning: {metric} is {value:.2f}: unjudged documents count as non-relevant, "
                         "so a real improvement can look like a regression; label them (--unjudged) or use --judged-only")
    if gate_report is None:
        return lines, []
    return lines + _gate_warnings(gate_report), _gate_lines(gate_report)


def _github(report: dict, digits: int, warnings: List[str], failures: List[str]) -> None:
    """Under GitHub Actions: the markdown report in the step summary, and annotations.

    The runner reads workflow commands from both output streams; stderr keeps
    stdout parseable.
    """
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with open(summary, "a", encoding="utf-8", errors="backslashreplace") as out:
                out.write(_format_markdown(report, digits) + "\n")
        except OSError as exc:
            _warn(f"rag_eval: warning: cannot append to GITHUB_STEP_SUMMARY ({exc.strerror or exc})")
    for line in warnings:
        if "warning:" in line:
            _warn("::warning title=rag_eval::" + _github_escape(line.split("warning: ", 1)[1]))
    for line in failures:
        _warn("::error title=rag_eval::" + _github_escape(line))


# === Entry point ===


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = _build_parser().parse_args(argv)
        return _run(args, argv)
    except SystemExit as exc:  # --help and --version end the parse with an exit code
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except RagEvalError as exc:
        message = str(exc).replace("\r", "\\r").replace("\n", "\\n")  # one line, whatever the input held
        _warn(f"rag_eval: error: {message}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        _warn("rag_eval: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``| head``): silence the final flush at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def console_main() -> None:
    """Entry point of the ``rag-eval`` console script and ``python3 rag_eval.py``."""
    # An id that the console cannot encode (a cp1252 Windows console) is
    # shown escaped rather than crashing the run.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    sys.exit(main())


if __name__ == "__main__":
    console_main()
