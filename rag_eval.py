"""Score a retrieval run against relevance judgments and gate CI on regressions.

A RAG answer fails in three places: retrieval misses the evidence, ranking
pushes it below the cutoff, or generation misuses it.  This module measures
the first two with arithmetic over labels, cheap enough for every commit.

Public functions
================

===========================  ==================================================
``evaluate(qrels, run, k)``   score every query; means, per-query values, unscored
``regressions(now, was, d)``  metrics that are missing or fell by more than ``d``
``read_qrels(path)``          judgments from JSON, JSONL or TREC (gzip, ``-``)
``read_run(path)``            a run from JSON, JSONL or TREC (gzip, ``-``)
``read_baseline(path)``       a baseline file of means
``recall_at_k`` ...           one function per measure: ``(ranking, grades, k)``
``parse_metric("ndcg@10")``   ``("ndcg", 10)``; ``format_metric`` turns it back
``main(argv=None)``           the command line; returns the exit code
===========================  ==================================================

>>> grades = {"a": 2, "b": 0, "c": 1}
>>> recall_at_k(["b", "a", "x"], grades, k=2)
0.5
>>> reciprocal_rank(["b", "a", "x"], grades, k=2)
0.5
>>> result = evaluate({"q1": grades}, {"q1": ["b", "a", "x"]}, k=2)
>>> result["mean"]["success@2"], result["queries"]
(1.0, 1)

Exit codes of the command line: 0 scored and no regression, 1 at least one
regression, 2 bad usage or bad input, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REGRESSION",
    "MEASURES",
    "Measure",
    "RagEvalError",
    "ap_at_k",
    "evaluate",
    "format_metric",
    "judged_at_k",
    "main",
    "ndcg_at_k",
    "parse_metric",
    "precision_at_k",
    "read_baseline",
    "read_qrels",
    "read_run",
    "recall_at_k",
    "reciprocal_rank",
    "regressions",
    "success_at_k",
]
__version__ = "0.1.0"

import json
import math
import os
import sys
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
LOW_JUDGED = 0.5  # below this share of judged documents, a drop may be an artefact
# Float noise: 0.52 - 0.02 is 0.5000000000000001, and a drop of exactly the
# tolerance must not count as a regression.
DROP_EPSILON = 1e-12
READ_BLOCK = 1 << 22  # bytes per read when streaming line-based files


# === Exception ===


class RagEvalError(ValueError):
    """Bad input or usage: the message says which file (and line) and what is wrong."""

    def __init__(self, message: str, source: Optional[str] = None, line: Optional[int] = None):
        if source is not None:
            message = f"{source}:{line}: {message}" if line else f"{source}: {message}"
        super().__init__(message)


# === Data types ===


class Conventions(NamedTuple):
    """How grades become relevance and gain; recorded with every result."""

    gain: str = "exp"  # "exp": 2**grade - 1; "linear": the grade itself
    min_grade: int = 1  # lowest grade that counts as relevant
    judged_only: bool = False  # drop unjudged documents before the cutoff


class Judged(NamedTuple):
    """One query's ranking after normalisation: all that a measure may read.

    ``relevant``, ``gains`` and ``judged`` follow the ranking (unique ids, best
    first); ``ideal`` holds the gains of every judged document of the query,
    best first, whether retrieved or not.
    """

    relevant: List[bool]
    gains: List[float]
    judged: List[bool]
    ideal: List[float]
    num_relevant: int


# === Reading inputs ===

Qrels = Dict[str, Dict[str, int]]
RunEntry = Union[List[str], Dict[str, float]]
Run = Dict[str, RunEntry]

_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"

# Field names accepted in JSONL rows.  ir_datasets exports use query_id,
# doc_id, relevance and score; BEIR's qrels use query-id, corpus-id, score.
_JSONL_QUERY = ("query_id", "qid", "query-id")
_JSONL_DOC = ("doc_id", "docid", "corpus_id", "corpus-id", "doc-id")
_JSONL_GRADE = ("relevance", "grade", "rel", "score")
_JSONL_SCORE = ("score",)


class _Input(NamedTuple):
    source: str  # the name to put in error messages
    head: bytes  # the first block, already read (format detection needs it)
    rest: object  # a binary stream positioned after ``head``


def _open_input(path: str) -> _Input:
    """Open a file (or ``-`` for standard input), transparently un-gzipped."""
    source = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            raw = sys.stdin.buffer
        elif os.path.isdir(path):
            raise RagEvalError("is a directory, expected a file", source)
        else:
            raw = open(path, "rb")
        magic = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    except FileNotFoundError:
        raise RagEvalError("no such file", source) from None
    except OSError as exc:
        raise RagEvalError(f"cannot read: {exc.strerror or exc}", source) from None
    if magic == _GZIP_MAGIC:
        import gzip  # only gzipped inputs pay for it

        raw = gzip.GzipFile(fileobj=raw, mode="rb")
    head = _read_block(raw, source)
    if head.startswith(_BOM):
        head = head[len(_BOM):]
    return _Input(source, head, raw)


def _read_block(stream, source: str) -> bytes:
    try:
        return stream.read(READ_BLOCK)
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise RagEvalError(f"cannot read (corrupt or truncated gzip?): {exc}", source) from None
    except Exception as exc:  # zlib.error, without importing zlib up front
        raise RagEvalError(f"cannot read: {exc}", source) from None


def _read_all(inp: _Input) -> bytes:
    blocks = [inp.head]
    while True:
        block = _read_block(inp.rest, inp.source)
        if not block:
            return b"".join(blocks)
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
    except ValueError:
        return "json"  # an object spread over several lines
    flat = isinstance(row, dict) and not any(isinstance(v, (dict, list)) for v in row.values())
    return "jsonl" if flat else "json"


def _decode(data: bytes, source: str, first_line: int = 1) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + data.count(b"\n", 0, exc.start)
        raise RagEvalError(f"bytes that are not UTF-8 (byte 0x{data[exc.start]:02x})", source, line) from None


def _lines(inp: _Input) -> Iterator[Tuple[int, List[str]]]:
    """Yield ``(line number, fields)`` for each non-blank line of a text file.

    Reads large blocks and decodes each block at once: decoding and splitting
    in bulk costs a fraction of doing it line by line.
    """
    lineno = 0
    carry = b""
    block = inp.head
    while block:
        nxt = _read_block(inp.rest, inp.source)
        data = carry + block
        if nxt:
            cut = data.rfind(b"\n") + 1
            data, carry = data[:cut], data[cut:]
        else:
            carry = b""
        for line in _decode(data, inp.source, lineno + 1).split("\n"):
            lineno += 1
            fields = line.split()
            if fields:
                yield lineno, fields
        lineno -= 1  # the split left an empty piece after the last newline
        block = nxt
        if not block and carry:
            block, carry = carry, b""


def _parse_json(inp: _Input, what: str):
    data = _read_all(inp)
    if not data.strip():
        raise RagEvalError("file is empty", inp.source)
    text = _decode(data, inp.source)
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise RagEvalError(f"invalid JSON: {exc.msg} (column {exc.colno})", inp.source, exc.lineno) from None
    except RagEvalError as exc:
        raise RagEvalError(str(exc), inp.source) from None
    except RecursionError:
        raise RagEvalError(f"JSON nested too deeply to be a {what}", inp.source) from None


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


def _pick(row: dict, names: Tuple[str, ...], what: str, source: str, lineno: int):
    for name in names:
        if name in row:
            return row[name]
    raise RagEvalError(f"missing {what} field (one of {', '.join(names)})", source, lineno)


def _jsonl_rows(inp: _Input) -> Iterator[Tuple[int, dict]]:
    for lineno, fields in _lines(inp):
        line = " ".join(fields)
        try:
            row = json.loads(line, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
        except json.JSONDecodeError as exc:
            raise RagEvalError(f"invalid JSON: {exc.msg}", inp.source, lineno) from None
        except RagEvalError as exc:
            raise RagEvalError(str(exc), inp.source, lineno) from None
        except RecursionError:
            raise RagEvalError("JSON nested too deeply", inp.source, lineno) from None
        if not isinstance(row, dict):
            raise RagEvalError(f"expected a JSON object per line, got {_kind(row)}", inp.source, lineno)
        yield lineno, row


def _kind(value) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _id(value, what: str, source: str, lineno: Optional[int] = None) -> str:
    if not isinstance(value, str):
        raise RagEvalError(f"{what} must be a string, got {_kind(value)}", source, lineno)
    return value


def _add_judgment(qrels: Qrels, qid: str, docid: str, grade: int, source: str, lineno: int) -> None:
    """Record one line-based judgment.

    A negative grade is trec_eval's mark for a document that is not in the
    judged pool: the query is kept, the document stays unjudged.
    """
    docs = qrels.setdefault(qid, {})
    if grade < 0:
        return
    old = docs.get(docid)
    if old is not None and old != grade:
        raise RagEvalError(f"conflicting judgments for {qid!r}/{docid!r}: {old} and {grade}", source, lineno)
    docs[docid] = grade


def _trec_qrels(inp: _Input) -> Qrels:
    """``qid iter docid grade`` (TREC) or ``qid docid grade`` (BEIR's TSV)."""
    qrels: Qrels = {}
    for lineno, fields in _lines(inp):
        if fields[0].startswith("#"):
            continue
        if len(fields) == 4:
            qid, _, docid, grade_text = fields
        elif len(fields) == 3:
            qid, docid, grade_text = fields
            if lineno == 1 and not _looks_int(grade_text):
                continue  # BEIR's header: query-id corpus-id score
        else:
            raise RagEvalError(f"expected 4 fields (qid iter docid grade), got {len(fields)}", inp.source, lineno)
        if not _looks_int(grade_text):
            raise RagEvalError(f"grade must be an integer, got {grade_text!r}", inp.source, lineno)
        _add_judgment(qrels, qid, docid, int(grade_text), inp.source, lineno)
    return qrels


def _looks_int(text: str) -> bool:
    return text.lstrip("+-").isdigit() and text.isascii()


def _jsonl_qrels(inp: _Input) -> Qrels:
    qrels: Qrels = {}
    for lineno, row in _jsonl_rows(inp):
        qid = _id(_pick(row, _JSONL_QUERY, "query id", inp.source, lineno), "query id", inp.source, lineno)
        docid = _id(_pick(row, _JSONL_DOC, "document id", inp.source, lineno), "document id", inp.source, lineno)
        grade = _pick(row, _JSONL_GRADE, "grade", inp.source, lineno)
        if not _is_int(grade):
            raise RagEvalError(f"grade must be an integer, got {grade!r}", inp.source, lineno)
        _add_judgment(qrels, qid, docid, grade, inp.source, lineno)
    return qrels


def read_qrels(path: str, fmt: str = "auto") -> Qrels:
    """Read judgments ``{qid: {docid: grade}}`` from JSON, JSONL or TREC.

    The format is detected from the content unless ``fmt`` names it; gzip is
    detected from the magic bytes; ``-`` reads standard input.  JSON grades
    must be non-negative integers (SPEC.md); TREC and JSONL may hold negative
    grades, which mark unjudged documents as in trec_eval.
    """
    inp = _open_input(path)
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
    """

    __slots__ = ("depth", "scores")

    def __init__(self, depth: Optional[int]):
        self.depth = depth
        self.scores: Dict[str, float] = {}

    def add(self, docid: str, score: float) -> None:
        old = self.scores.get(docid)
        if old is None or score > old:
            self.scores[docid] = score
            if self.depth is not None and len(self.scores) > 4 * self.depth + 64:
                self.prune()

    def prune(self) -> None:
        if self.depth is not None and len(self.scores) > self.depth:
            best = _order_scored(self.scores)[: self.depth]
            self.scores = {docid: self.scores[docid] for docid in best}


def _score(text: str, source: str, lineno: int) -> float:
    try:
        score = float(text)
    except ValueError:
        raise RagEvalError(f"score must be a number, got {text!r}", source, lineno) from None
    if not math.isfinite(score):
        raise RagEvalError(f"score must be a finite number, got {text!r}", source, lineno)
    return score


def _trec_run(inp: _Input, depth: Optional[int], keep) -> Run:
    """``qid Q0 docid rank score tag``; the rank column is ignored, as in trec_eval."""
    tops: Dict[str, _TopScores] = {}
    for lineno, fields in _lines(inp):
        if len(fields) < 6:
            raise RagEvalError(f"expected 6 fields (qid Q0 docid rank score tag), got {len(fields)}", inp.source, lineno)
        qid, docid = fields[0], fields[2]
        score = _score(fields[4], inp.source, lineno)
        if keep is None or keep(qid, docid):
            top = tops.get(qid)
            if top is None:
                top = tops[qid] = _TopScores(depth)
            top.add(docid, score)
    return _finish_tops(tops)


def _finish_tops(tops: Dict[str, _TopScores]) -> Run:
    for top in tops.values():
        top.prune()
    return {qid: top.scores for qid, top in tops.items()}


def _jsonl_run(inp: _Input, depth: Optional[int], keep) -> Run:
    """Rows ``{"query_id", "doc_id", "score"}``; without scores, file order ranks."""
    tops: Dict[str, _TopScores] = {}
    lists: Dict[str, List[str]] = {}
    for lineno, row in _jsonl_rows(inp):
        qid = _id(_pick(row, _JSONL_QUERY, "query id", inp.source, lineno), "query id", inp.source, lineno)
        docid = _id(_pick(row, _JSONL_DOC, "document id", inp.source, lineno), "document id", inp.source, lineno)
        has_score = "score" in row
        if (tops and not has_score) or (lists and has_score):
            raise RagEvalError("some rows have a score and some do not", inp.source, lineno)
        if not has_score:
            lists.setdefault(qid, []).append(docid)
            continue
        score = row["score"]
        if not _is_number(score) or not math.isfinite(score):
            raise RagEvalError(f"score must be a finite number, got {score!r}", inp.source, lineno)
        if keep is None or keep(qid, docid):
            top = tops.get(qid)
            if top is None:
                top = tops[qid] = _TopScores(depth)
            top.add(docid, float(score))
    return lists or _finish_tops(tops)


def read_run(path: str, fmt: str = "auto", depth: Optional[int] = None, keep=None) -> Run:
    """Read a run: ``{qid: [docid, ...]}`` (ranked) or ``{qid: {docid: score}}``.

    Line-based runs (TREC, JSONL) are streamed: with ``depth`` only the best
    ``depth`` documents of each query are kept, so memory follows queries x
    depth, not the file.  ``keep(qid, docid)``, when given, filters documents
    before that cut (``--judged-only``).
    """
    inp = _open_input(path)
    fmt = _detect_format(inp) if fmt == "auto" else fmt
    if fmt == "json":
        run = _parse_json(inp, "run")
        _check_run(run, inp.source)
    elif fmt == "jsonl":
        run = _jsonl_run(inp, depth, keep)
    else:
        run = _trec_run(inp, depth, keep)
    return run


def read_baseline(path: str) -> Dict[str, float]:
    """Read a baseline: a JSON object of metric name -> finite number."""
    inp = _open_input(path)
    baseline = _parse_json(inp, "baseline")
    if not isinstance(baseline, dict):
        raise RagEvalError(f"expected a JSON object of metric -> number, got {_kind(baseline)}", inp.source)
    for metric, value in baseline.items():
        if not _is_number(value) or not math.isfinite(value):
            raise RagEvalError(f"baseline value of {metric!r} must be a finite number, got {value!r}", inp.source)
    return {metric: float(value) for metric, value in baseline.items()}


# --- Validating in-memory inputs (files and library callers alike) ---


def _check_qrels(qrels, source: str = "qrels") -> None:
    if not isinstance(qrels, Mapping):
        raise RagEvalError(f"expected a JSON object of query -> {{document: grade}}, got {_kind(qrels)}", source)
    for qid, docs in qrels.items():
        _id(qid, "query id", source)
        if not isinstance(docs, Mapping):
            raise RagEvalError(f"query {qid!r}: expected an object of document -> grade, got {_kind(docs)}", source)
        for docid, grade in docs.items():
            _id(docid, "document id", source)
            if not _is_int(grade) or grade < 0:
                raise RagEvalError(
                    f"query {qid!r}, document {docid!r}: grade must be a non-negative integer, got {grade!r}", source
                )


def _check_run(run, source: str = "run") -> None:
    if not isinstance(run, Mapping):
        raise RagEvalError(f"expected a JSON object of query -> ranking, got {_kind(run)}", source)
    for qid, entry in run.items():
        _id(qid, "query id", source)
        if isinstance(entry, list):
            for docid in entry:
                if not isinstance(docid, str):
                    raise RagEvalError(f"query {qid!r}: ranking must be a list of strings, found {_kind(docid)}", source)
        elif isinstance(entry, Mapping):
            for docid, score in entry.items():
                _id(docid, "document id", source)
                if not _is_number(score) or not math.isfinite(score):
                    raise RagEvalError(f"query {qid!r}, document {docid!r}: score must be a finite number, got {score!r}", source)
        else:
            raise RagEvalError(
                f"query {qid!r}: expected a list of document ids or an object of document -> score, got {_kind(entry)}",
                source,
            )


# === Normalising a ranking ===


def _order_scored(scores: Mapping[str, float]) -> List[str]:
    """Score descending, ties broken by docid descending: trec_eval's order."""
    return [docid for docid, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


def _ordered_ids(entry: RunEntry) -> List[str]:
    """The unique ids of a run entry, best first; a repeated id counts at its first place."""
    if isinstance(entry, Mapping):
        return _order_scored(entry)
    return list(dict.fromkeys(entry))


def _gain(grade: int, kind: str) -> float:
    if grade <= 0:
        return 0.0
    return float(grade) if kind == "linear" else 2.0**grade - 1.0


def _normalise(ranking: List[str], grades: Mapping[str, int], depth: int, conv: Conventions) -> Judged:
    """Turn one query's unique ranking into what the measures read, once."""
    if conv.judged_only:
        ranking = [docid for docid in ranking if docid in grades]
    top = [grades.get(docid) for docid in ranking[:depth]]
    judged_grades = [g for g in grades.values() if g >= 0]
    ideal = sorted((_gain(g, conv.gain) for g in judged_grades), reverse=True)
    return Judged(
        relevant=[g is not None and g >= conv.min_grade for g in top],
        gains=[0.0 if g is None else _gain(g, conv.gain) for g in top],
        judged=[g is not None and g >= 0 for g in top],
        ideal=[g for g in ideal[:depth] if g > 0],
        num_relevant=sum(1 for g in judged_grades if g >= conv.min_grade),
    )


def _tied_at(entry: RunEntry, ranking: List[str], cutoffs: Iterable[int]) -> List[int]:
    """The cutoffs at which a scored ranking has equal scores on both sides."""
    if not isinstance(entry, Mapping):
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
    return sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains, 1))


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
    if not sep or name not in _BY_NAME or not cutoff.isdigit() or cutoff != str(int(cutoff)) or int(cutoff) < 1:
        raise RagEvalError(f"unknown metric {text!r} (expected measure@k with a measure from {', '.join(_BY_NAME)})")
    return name, int(cutoff)


def format_metric(name: str, k: int) -> str:
    """The one spelling of a metric, used as its key everywhere."""
    return f"{name}@{k}"


def _measure_of_ranking(name: str, ranking: List[str], grades: Mapping[str, int], k: int, **conventions) -> float:
    _check_k(k)
    _check_qrels({"q": grades}, "grades")
    conv = Conventions(**conventions)
    return _BY_NAME[name].compute(_normalise(_ordered_ids(ranking), grades, k, conv), k)


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


def _check_conventions(conv: Conventions) -> None:
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
) -> dict:
    """Score every judged query and average over the scored ones.

    Returns ``{"k", "queries", "unscored", "mean", "per_query", ...}``:

    - ``mean`` maps ``measure@k`` to the arithmetic mean over scored queries;
    - ``per_query[qid]`` maps each measure name (``measure@k`` when ``k`` is a
      list of cutoffs) to its value;
    - ``queries`` is the number of scored queries; ``unscored`` lists the
      queries with no relevant document (not scored); ``skipped`` the scored
      queries the run lacks (they score 0 and stay in the mean);
      ``dropped`` the run's queries that the qrels lack (only with
      ``drop_unknown_queries``; otherwise they are an error);
    - ``ties`` counts, per cutoff, the queries whose scores tie across it;
    - ``judged`` maps ``judged@k`` to its mean, always (for the warning).

    Raises ``RagEvalError`` (a ``ValueError``) on invalid input.
    """
    single = _is_int(k)
    cutoffs = [k] if single else sorted(set(k))
    if not cutoffs:
        raise RagEvalError("no cutoff given")
    for cutoff in cutoffs:
        _check_k(cutoff)
    names = _check_measures(DEFAULT_MEASURES if measures is None else measures)
    if not names:
        raise RagEvalError("no measure chosen")
    conv = Conventions(gain, min_grade, judged_only)
    _check_conventions(conv)
    _check_qrels(qrels)
    _check_run(run)

    unknown = sorted(set(run) - set(qrels))
    if unknown and not drop_unknown_queries:
        raise RagEvalError(
            f"{len(unknown)} run queries are not in the qrels (first: {unknown[0]!r}); "
            "drop them with --drop-unknown-queries"
        )
    depth = cutoffs[-1]
    per_query: Dict[str, Dict[str, float]] = {}
    unscored: List[str] = []
    ties = {cutoff: 0 for cutoff in cutoffs}
    judged_sum = {cutoff: 0.0 for cutoff in cutoffs}
    for qid in sorted(qrels):
        grades = qrels[qid]
        entry = run.get(qid, [])
        ranking = _ordered_ids(entry)
        if conv.judged_only:
            ranking = [docid for docid in ranking if docid in grades]
        q = _normalise(ranking, grades, depth, conv)
        if q.num_relevant == 0:
            unscored.append(qid)
            continue
        for cutoff in _tied_at(entry, ranking, cutoffs):
            ties[cutoff] += 1
        values = {}
        for cutoff in cutoffs:
            judged_sum[cutoff] += _judged(q, cutoff)
            for name in names:
                key = name if single else format_metric(name, cutoff)
                values[key] = _BY_NAME[name].compute(q, cutoff)
        per_query[qid] = values

    if not per_query:
        raise RagEvalError("no query has a relevant document: nothing to score")
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
        "skipped": sorted(qid for qid in per_query if qid not in run),
        "dropped": unknown,
        "mean": mean,
        "per_query": per_query,
        "ties": {str(cutoff): n for cutoff, n in ties.items()},
        "judged": {format_metric("judged", cutoff): s / count for cutoff, s in judged_sum.items()},
        "conventions": conv._asdict(),
    }


# === Baseline and gate ===


def regressions(
    current_means: Mapping[str, float], baseline_means: Mapping[str, float], max_drop: float = DEFAULT_MAX_DROP
) -> Dict[str, Tuple[float, Optional[float]]]:
    """``{metric: (was, now)}`` for every baseline metric missing now (``now`` is None)
    or that fell by more than ``max_drop``.

    >>> regressions({"recall@5": 0.6}, {"recall@5": 0.7, "mrr@5": 0.5}, 0.02)
    {'mrr@5': (0.5, None), 'recall@5': (0.7, 0.6)}
    """
    if not _is_number(max_drop) or not math.isfinite(max_drop) or max_drop < 0:
        raise RagEvalError(f"max drop must be a non-negative number, got {max_drop!r}")
    found = {}
    for metric in sorted(baseline_means):
        was = baseline_means[metric]
        now = current_means.get(metric)
        if now is None or was - now > max_drop + DROP_EPSILON:
            found[metric] = (was, now)
    return found


# === Reporting ===


def _json_report(result: dict, digits: int) -> str:
    report = {
        "dropped": result["dropped"],
        "k": result["k"],
        "mean": {metric: round(value, digits) for metric, value in result["mean"].items()},
        "queries": result["queries"],
        "skipped": result["skipped"],
        "ties": result["ties"],
        "unscored": result["unscored"],
    }
    return json.dumps(report, sort_keys=True, indent=2) + "\n"


def _regression_line(metric: str, was: float, now: Optional[float]) -> str:
    shown = "missing" if now is None else f"{now:.4f}"
    return f"REGRESSION {metric}: baseline {was:.4f}, now {shown}"


# === Command line ===


def _positive_int_list(text: str) -> List[int]:
    parts = text.split(",")
    if not all(part.strip().isdigit() and int(part) >= 1 for part in parts):
        raise RagEvalError(f"--k: expected positive integers such as 5 or 1,3,10, got {text!r}")
    return sorted({int(part) for part in parts})


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise RagEvalError(f"--max-drop: expected a finite number >= 0, got {text!r}")
    return value


def _grade_arg(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise RagEvalError(f"--min-grade: expected a positive integer, got {text!r}")
    return int(text)


def _digits_arg(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 17:
        raise RagEvalError(f"--digits: expected an integer from 1 to 17, got {text!r}")
    return int(text)


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
            "Top k means the first k unique ids; a repeated id counts once, at its best place.",
            "Scored runs are ordered by score descending, ties broken by docid descending",
            "(trec_eval's rule; the TREC rank column is ignored).  A query without a relevant",
            "document is not scored (listed in 'unscored'); a judged query the run skipped",
            "scores 0 and stays in the mean.",
            "",
            "exit codes:",
            f"  {EXIT_OK}    scored, no regression",
            f"  {EXIT_REGRESSION}    at least one regression (lines 'REGRESSION <metric>: ...' on stderr)",
            f"  {EXIT_ERROR}    bad usage or bad input (one line 'rag_eval: error: ...' on stderr)",
            f"  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)",
        ]
    )


def _build_parser():
    import argparse  # the command line only; importers of the API skip it

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # one line, our exit code, no usage dump
            raise RagEvalError(message)

    parser = Parser(
        prog="rag_eval",
        description="Score a retrieval run against relevance judgments (qrels) and gate CI on regressions.",
        epilog=_help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("qrels", metavar="QRELS", help="judgments: JSON, JSONL or TREC qrels, maybe gzipped; - for stdin")
    parser.add_argument("run", metavar="RUN", help="the run: JSON (ranked or scored), JSONL or TREC, maybe gzipped; - for stdin")
    parser.add_argument("--k", type=_positive_int_list, default=[DEFAULT_K], metavar="K[,K...]",
                        help=f"cutoffs: the number of chunks passed to the model (default {DEFAULT_K})")
    parser.add_argument("--measures", type=_measures_arg, default=list(DEFAULT_MEASURES), metavar="NAME[,NAME...]",
                        help="measures to report: " + ", ".join(_BY_NAME))
    parser.add_argument("--baseline", metavar="FILE", help="JSON of metric -> mean to gate against")
    parser.add_argument("--max-drop", type=_non_negative_float, default=DEFAULT_MAX_DROP, metavar="X",
                        help=f"largest tolerated fall of a mean below the baseline (default {DEFAULT_MAX_DROP})")
    parser.add_argument("--gain", choices=GAINS, default="exp",
                        help="nDCG gain: exp = 2**grade - 1 (default), linear = the grade (trec_eval's ndcg_cut)")
    parser.add_argument("--min-grade", type=_grade_arg, default=1, metavar="N",
                        help="lowest grade that counts as relevant (default 1; trec_eval -l)")
    parser.add_argument("--judged-only", action="store_true",
                        help="drop unjudged documents from each ranking before the cutoff (trec_eval -J)")
    parser.add_argument("--drop-unknown-queries", action="store_true",
                        help="drop run queries that the qrels lack (default: an input error)")
    parser.add_argument("--qrels-format", choices=FORMATS, default="auto", help="default: detected from the content")
    parser.add_argument("--run-format", choices=FORMATS, default="auto", help="default: detected from the content")
    parser.add_argument("--digits", type=_digits_arg, default=DEFAULT_DIGITS, metavar="N",
                        help=f"decimals of the means printed (default {DEFAULT_DIGITS})")
    parser.add_argument("--version", action="version", version=f"rag_eval {__version__}")
    return parser


def _warn(message: str) -> None:
    sys.stderr.write(message + "\n")


def _run(args) -> int:
    if args.qrels == "-" and args.run == "-":
        raise RagEvalError("only one of QRELS and RUN can be - (standard input)")
    baseline = read_baseline(args.baseline) if args.baseline else None
    qrels = read_qrels(args.qrels, args.qrels_format)
    keep = None
    if args.judged_only:
        def keep(qid, docid):
            return docid in qrels.get(qid, ())
    # One more than the largest cutoff: enough to see a tie across it.
    run = read_run(args.run, args.run_format, depth=max(args.k) + 1, keep=keep)
    cutoffs = args.k[0] if len(args.k) == 1 else args.k
    result = evaluate(
        qrels, run, cutoffs, measures=args.measures, gain=args.gain, min_grade=args.min_grade,
        judged_only=args.judged_only, drop_unknown_queries=args.drop_unknown_queries,
    )
    if result["dropped"]:
        _warn(f"rag_eval: note: dropped {len(result['dropped'])} run queries that the qrels lack")
    tied = {k: n for k, n in result["ties"].items() if n}
    if tied:
        counts = ", ".join(f"{n} at k={k}" for k, n in tied.items())
        _warn(f"rag_eval: note: tied scores straddle a cutoff ({counts} queries); "
              "ties are broken by docid, descending, as trec_eval does")
    for metric, value in result["judged"].items():
        if value < LOW_JUDGED:
            _warn(f"rag_eval: warning: {metric} is {value:.2f}: unjudged documents count as non-relevant, "
                  "so a real improvement can look like a regression; label them or use --judged-only")
    sys.stdout.write(_json_report(result, args.digits))
    sys.stdout.flush()
    if baseline is None:
        return EXIT_OK
    found = regressions(result["mean"], baseline, args.max_drop)
    for metric, (was, now) in found.items():
        _warn(_regression_line(metric, was, now))
    return EXIT_REGRESSION if found else EXIT_OK


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    try:
        args = _build_parser().parse_args(argv)
        return _run(args)
    except RagEvalError as exc:
        _warn(f"rag_eval: error: {exc}")
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
    """Entry point of the ``rag-eval`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    console_main()
