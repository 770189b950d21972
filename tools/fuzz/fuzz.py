#!/usr/bin/env python3
"""Fuzzing harness of rag_eval: its parsers and its command line.

The contract under test (the fuzzing issue): whatever the input, the
only acceptable outcomes are a result, or exit 2 with one line on stderr.
The tool must never crash, hang, write where it was not asked, or exit 0 when
it could not really evaluate.

Standard library only.  A seeded mutation fuzzer: it starts from seed inputs
(``tools/fuzz/seeds/``, ``fixtures/``, ``baseline.json`` and their conversions to
every format and to gzip), mutates them byte by byte and by structure, and
feeds them to two targets:

* the readers, ``read_qrels``, ``read_run``, ``read_baseline`` and
  ``read_slices``, on a temporary file (or standard input): each must return
  a well-formed value or raise ``rag_eval.RagEvalError``; any other exception
  (``RecursionError`` and ``MemoryError`` included) is a finding, and so is a
  changed input file;
* ``rag_eval.main([...])`` in-process (stdout, stderr, stdin, cwd and the
  environment variables it reads isolated), with random option combinations
  and now and then a damaged command line or environment: exit 0 or 1 with a
  valid report on stdout and no error line on stderr, or exit 2 with empty
  stdout and exactly one stderr line starting ``rag_eval: error: ``.  An
  exception escaping ``main``, any other exit code, an error line on exit 0
  or 1, exit 1 with nothing gated, a report whose numbers differ from the
  library's on the same files (``read_qrels``, ``read_run``, ``evaluate``), an
  output file (``--output``, ``--junit``, ``--unjudged``, ``--save-baseline``)
  that does not read back, a file written that no option asked for, or a
  changed input are findings.

Every case runs under a time budget (``--budget``, default 5 s), enforced with
``SIGALRM`` where there is one and measured everywhere.  Oddities that break
no stated rule are printed as notes, not findings.

Usage::

    python3 tools/fuzz/fuzz.py --seconds 60 --seed 1        # on demand, any duration
    python3 tools/fuzz/fuzz.py --cases 1500 --seed 0        # a fixed number of cases
    python3 tools/fuzz/fuzz.py --use-atheris --seconds 300  # coverage-guided, if atheris imports

It prints the cases tried and the findings, saves each finding's input under
``tools/fuzz/crashes/`` (``--crash-dir``), and exits 1 when there are findings.  Case
``i`` of seed ``s`` draws from ``random.Random(f"{s}:{i}")`` and the corpus,
which grows only from earlier cases' results: the same seed and number of
cases replays the same run.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import gzip
import hashlib
import io
import json
import math
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import rag_eval  # noqa: E402  (after the path is set)

ROLES = ("qrels", "run", "baseline", "slices")
ERROR_PREFIX = "rag_eval: error: "
# Lines that exit 0 or 1 may print on stderr (REGRESSION lines, and rag_eval's notes, warnings, annotations).
OK_STDERR_PREFIXES = ("rag_eval: note: ", "rag_eval: warning: ", "REGRESSION ", "::warning ", "::error ")
OUTPUT_OPTIONS = ("--output", "--junit", "--unjudged", "--save-baseline")
# What no input may make rag_eval print (docs/ci.md): GitHub's and Azure's "##[", Azure's "##vso[", TeamCity's
# "##teamcity[", Buildkite's group lines, a raw control or bidi character; rag_eval's own "::error" lines aside.
FORGED = re.compile(r"##(?:vso|teamcity)?\[|^ *(?:---|\+\+\+|~~~)(?: |$)|^\s*::(?!(?:error|warning|notice) title=rag_eval)"
                    r"[^\n]*::|[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]", re.M)
DEFAULT_BUDGET = 5.0
MAX_CORPUS = 400  # per role: inputs that showed a new behaviour join the corpus, up to this many
MAX_INPUT = 1 << 20  # mutations never grow an input beyond this (bytes)
BAD_OPTION = 0.04  # chance that an option gets an invalid value


# === Seeds ===

# Used when tools/fuzz/seeds and fixtures/ are absent (a copied harness still runs).
BUILTIN_SEEDS = {
    "qrels": [("builtin_qrels.json", b'{"q1": {"a#1": 2, "b#1": 1}, "q2": {"c#1": 2}, "q3": {"d#1": 0}}\n')],
    "run": [("builtin_run.json", b'{"q1": ["x#1", "a#1", "b#1"], "q2": ["c#2", "c#1"], "q3": ["d#1"]}\n')],
    "baseline": [("builtin_baseline.json", b'{"recall@5": 0.7, "success@5": 0.6667, "mrr@5": 0.55, "ndcg@5": 0.52}\n')],
    "slices": [("builtin_slices.json", b'{"q1": "billing", "q2": ["support", "billing"]}\n')],
}


def _role_of(name: str):
    """The input a file name says it is: a prefix (``run_scored.json``), else a part (``ok_bom_qrels.json``)."""
    return (next((role for role in ROLES if name.startswith(role)), None)
            or next((role for role in ROLES if f"_{role}" in name), None))


def load_hostile() -> dict:
    """``{role: [(name, bytes), ...]}`` from fixtures/bad/, the hostile-input corpus of test_bad_inputs.py."""
    found = {role: [] for role in ROLES}
    folder = os.path.join(REPO, "fixtures", "bad")
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            role = _role_of(name)
            path = os.path.join(folder, name)
            if role and os.path.isfile(path) and os.path.getsize(path) <= MAX_INPUT:
                with open(path, "rb") as handle:
                    found[role].append((f"bad/{name}", handle.read()))
    return found


def load_seeds() -> dict:
    """``{role: [(name, bytes), ...]}`` from tools/fuzz/seeds/, fixtures/ and baseline.json."""
    seeds = {role: [] for role in ROLES}
    for folder in (os.path.join(HERE, "seeds"), os.path.join(REPO, "fixtures")):
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            role = _role_of(name)
            path = os.path.join(folder, name)
            if role and os.path.isfile(path):
                with open(path, "rb") as handle:
                    seeds[role].append((name, handle.read()))
    shipped = os.path.join(REPO, "baseline.json")
    if os.path.isfile(shipped):
        with open(shipped, "rb") as handle:
            seeds["baseline"].append(("baseline.json", handle.read()))
    for role in ROLES:
        if not seeds[role]:
            seeds[role] = list(BUILTIN_SEEDS[role])
    return seeds


# --- Conversions: the same judgments or run in every format the readers take ---

_QUERY_FIELDS = ("query_id", "qid", "query-id")
_DOC_FIELDS = ("doc_id", "docid", "corpus_id", "corpus-id", "doc-id")
_GRADE_FIELDS = ("relevance", "grade", "rel", "score")


def _qrels_forms(qrels: dict, rng: random.Random) -> list:
    rows = [(qid, docid, grade) for qid, docs in qrels.items() for docid, grade in docs.items()]
    trec = "".join(f"{q} 0 {d} {g}\n" for q, d, g in rows)
    beir = "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in rows)
    jsonl = "".join(json.dumps({rng.choice(_QUERY_FIELDS): q, rng.choice(_DOC_FIELDS): d,
                                rng.choice(_GRADE_FIELDS): g}) + "\n" for q, d, g in rows)
    return [("trec", trec), ("beir.tsv", beir), ("jsonl", jsonl), ("json", json.dumps(qrels))]


def _run_forms(run: dict, rng: random.Random) -> list:
    scored = {}
    for qid, entry in run.items():
        if isinstance(entry, dict):
            scored[qid] = dict(entry)
        else:
            scored[qid] = {docid: float(len(entry) - rank) for rank, docid in enumerate(dict.fromkeys(entry))}
    rows = [(q, d, s) for q, docs in scored.items() for d, s in docs.items()]
    trec = "".join(f"{q} Q0 {d} {rank} {s!r} tag\n" for rank, (q, d, s) in enumerate(rows, 1))
    jsonl = "".join(json.dumps({"query_id": q, "doc_id": d, "score": s}) + "\n" for q, d, s in rows)
    ranked = {q: sorted(docs, key=lambda d: (docs[d], d), reverse=True) for q, docs in scored.items()}
    unscored = "".join(json.dumps({"qid": q, "docid": d}) + "\n" for q, ds in ranked.items() for d in ds)
    return [("trec", trec), ("jsonl", jsonl), ("unscored.jsonl", unscored), ("ranked.json", json.dumps(ranked)),
            ("scored.json", json.dumps(scored))]


def build_corpus(seeds: dict, seed: int) -> dict:
    """Seeds, their conversions to the other formats, and gzip forms of a few."""
    rng = random.Random(f"corpus:{seed}")
    corpus = {role: list(items) for role, items in seeds.items()}
    with tempfile.TemporaryDirectory(prefix="rag_eval_fuzz_seed_") as folder:
        path = os.path.join(folder, "seed")
        for role, reader, forms in (("qrels", rag_eval.read_qrels, _qrels_forms), ("run", rag_eval.read_run, _run_forms)):
            for name, data in list(seeds[role]):
                with open(path, "wb") as handle:
                    handle.write(data)
                try:
                    parsed = reader(path)
                except rag_eval.RagEvalError:
                    continue
                for suffix, text in forms(parsed, rng):
                    corpus[role].append((f"{name}>{suffix}", text.encode("utf-8")))
    for role in ROLES:
        for name, data in list(corpus[role]):
            if rng.random() < 0.3 or role in ("baseline", "slices"):
                corpus[role].append((name + ".gz", gzip.compress(data, mtime=0)))
    return corpus


# === Mutations ===

HUGE_INT = b"1" * 4400  # beyond CPython's 4300-digit limit on int <-> str conversion
INTERESTING = [
    b"NaN", b"-NaN", b"Infinity", b"-Infinity", b"inf", b"-inf", b"nan", b"1e309", b"-1e309", b"1e-400", b"-1", b"-0",
    b"0", b"1", b"2", b"1.5", b"2.0", b"1e2", b"0x10", b"1_0", b"+2", b"\xd9\xa3", b"\xc2\xb2", b"2147483647",
    b"2147483648", b"18446744073709551616", b"9" * 40, b"1" * 400, HUGE_INT, b"101", b"1024",
    b"true", b"false", b"null", b'"', b"{", b"}", b"[", b"]", b",", b":", b"\\", b'""', b'"2"', b'"\\ud800"',
    b"\\ud800", b"\\udcff", b"\\u0000", b"\x00", b"\xff", b"\xfe", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf",
    b"\xff\xfe", b"\r\n", b"\r", b"\n", b"\n\n", b"\t", b" ", b"\xc2\xa0", b"\xe2\x80\xa8", b"\xe3\x80\x80", b"\x1c",
    b"\x1f", b"\x0b", b"\x0c", b"#", b"# comment\n", b"Q0", b"q1", b"q9", b"recall@5", b"ndcg@0", b"ap@5",
    b'"query_id"', b'"doc_id"', b'"score"', b'"relevance"', b'"slices"', b'"format"', b'"rag_eval-baseline/1"',
    b'"mean"', b'"per_query"', b'"conventions"', b'"qrels_sha256"', b'{"a": 1, "a": 2}', b"[[[[[[[[",
    b"refund-policy#2", b"refund-policy", b"#2", b"a:b",
]
WEIRD_VALUES = [
    "NaN", "Infinity", "-Infinity", "1e309", "-1e309", "1" * 400, HUGE_INT.decode(), "-0", "0.0", "1.0", "1.5", "-1",
    "-2", "0", "1", "2", "3", "2147483647", "2147483648", "101", "1024", "1e2", "1E-3", "true", "false", "null",
    '"2"', '""', '"\\ud800"', '"\\u0000"', '"a\\nb"', "[]", "{}", '["x"]', '{"x": 1}', '"q1"', '"recall@5"',
    '"refund-policy#2"', '"billing"', '"a:b"', '" "',
]
WEIRD_KEYS = [
    "", " ", "q1", "q2", "q5", "01", "1", "recall@5", "ndcg@5", "success@10", "judged@5", "format", "mean",
    "per_query", "conventions", "qrels_sha256", "query_id", "doc_id", "score", "\\ud800", "a\\nb", "a:b", "#",
    "x#y", "\\u00df", "\\u00a0", "refund-policy#2", "billing:recall@5",
]
# JSON texts of odd identifiers: lone surrogates, control and separator characters, empty, huge.
WEIRD_IDS = [
    '"\\ud800"', '"\\udcff"', '"q\\udfff"', '"a\\nb"', '"a\\rb"', '""', '" "', '"x\\u2028y"', '"a:b"', '"q1"',
    '"\\u0000"', '"\\u001c"', '"%s"' % ("x" * 10000), '"refund-policy#2\\t"', '"\\u00e9"', '"e\\u0301"', '"#"',
    '"::error::x"', '"recall@5"', '"<&>\\""', '"##vso[task.setvariable variable=X]1"', '"##teamcity[x]"',
    '"--- group"', '"a\\n+++ b"', '"\\u001b[2K\\u001b[1A"', '"\\u0007\\u0085\\u202e\\u2066"', '"\\u001b[0Ksection_start:1:s"',
]
SEPARATORS = [" ", "\t", "  ", " \t ", "\x0b", "\x0c", "\r", "\xa0", "\u3000", "\x1c", "\u2028"]


class Raw:
    """A JSON token written as is: NaN, 1e309, a 4400-digit integer, an unquoted key."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


def _emit(node) -> str:
    """JSON text of a tree of lists, [key, value] pair lists (objects, keys may repeat) and Raw tokens."""
    if isinstance(node, Raw):
        return node.text
    if isinstance(node, _Object):
        return "{" + ", ".join(f"{_emit_key(k)}: {_emit(v)}" for k, v in node) + "}"
    if isinstance(node, list):
        return "[" + ", ".join(_emit(v) for v in node) + "]"
    return json.dumps(node)


def _emit_key(key) -> str:
    return key.text if isinstance(key, Raw) else json.dumps(key)


class _Object(list):
    """A JSON object as a list of [key, value] pairs, so that a key can repeat."""


def _tree(value):
    if isinstance(value, dict):
        return _Object([k, _tree(v)] for k, v in value.items())
    if isinstance(value, list):
        return [_tree(v) for v in value]
    return value


def _slots(node, found: list, depth: int = 0) -> list:
    """(container, index) of every value in the tree, the root's children first."""
    if depth > 50:
        return found
    if isinstance(node, _Object):
        for pair in node:
            found.append((pair, 1))
            _slots(pair[1], found, depth + 1)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.append((node, index))
            _slots(value, found, depth + 1)
    return found


def _weird_value(rng: random.Random):
    return Raw(rng.choice(WEIRD_VALUES))


def mutate_json_text(data: bytes, rng: random.Random, odd_id: bool = False):
    """A structure-aware mutation of a JSON document, or None when it does not parse
    (or nests too deeply to walk: byte mutations take those).

    ``odd_id``: only make one identifier odd, so that the document stays valid.
    """
    try:
        return _mutate_json_text(data, rng, odd_id)
    except (ValueError, RecursionError):
        return None


def _mutate_json_text(data: bytes, rng: random.Random, odd_id: bool):
    root = _tree(json.loads(data.decode("utf-8-sig")))
    holder = [root]
    slots = [(holder, 0)] + _slots(root, [])
    for _ in range(1 if odd_id else rng.choice((1, 1, 1, 2, 3))):
        container, index = rng.choice(slots)
        value = container[index]
        choice = 10 if odd_id else rng.randrange(12)
        if choice >= 10:  # an identifier (a key, or a string in a list) becomes odd
            ids = [(pair, 0) for node in [root] + [c[i] for c, i in slots] if isinstance(node, _Object) for pair in node]
            ids += [(c, i) for c, i in slots if isinstance(c[i], str)]
            if ids:
                id_container, id_index = rng.choice(ids)
                id_container[id_index] = Raw(rng.choice(WEIRD_IDS))
        elif choice <= 2:  # a grade, score or id becomes a float, string, bool, huge number...
            if isinstance(value, str) and rng.random() < 0.5:
                container[index] = Raw(rng.choice(WEIRD_IDS))
            else:
                container[index] = _weird_value(rng)
        elif choice == 3 and isinstance(value, _Object) and value:  # drop a field
            value.pop(rng.randrange(len(value)))
        elif choice == 4 and isinstance(value, _Object) and value:  # duplicate a key
            key, old = rng.choice(value)
            value.append([key, rng.choice([old, _weird_value(rng)])])
        elif choice == 5 and isinstance(value, _Object) and value:  # rename a key
            rng.choice(value)[0] = Raw(rng.choice(WEIRD_IDS) if rng.random() < 0.5 else
                                       json.dumps(rng.choice(WEIRD_KEYS)).replace("\\\\", "\\"))
        elif choice == 6:  # wrap it
            container[index] = rng.choice([[value], _Object([["x", value]])])
        elif choice == 7:  # a list becomes an object and back
            if isinstance(value, list) and not isinstance(value, _Object):
                container[index] = _Object([[str(v) if not isinstance(v, (list, Raw)) else "k", 1] for v in value])
            elif isinstance(value, _Object):
                container[index] = [k for k, _ in value]
            else:
                container[index] = [value]
        elif choice == 8:  # nest deeply
            depth = rng.choice((50, 500, 5000, 50_000))
            container[index] = Raw("[" * depth + _emit(value) + "]" * depth)
        else:  # copy another node here (a copy: an ancestor put inside itself would be a cycle)
            other_container, other_index = rng.choice(slots)
            container[index] = copy.deepcopy(other_container[other_index])
    return _emit(holder[0]).encode("utf-8", "surrogatepass")


def mutate_lines(data: bytes, rng: random.Random) -> bytes:
    """Field-level mutations of a line-based file (TREC, BEIR TSV, JSONL)."""
    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    if not lines:
        return data
    index = rng.randrange(len(lines))
    line = lines[index]
    choice = rng.randrange(9)
    if (choice == 0 or rng.random() < 0.5) and line.lstrip().startswith("{"):  # a JSONL row: mutate its structure
        mutated = mutate_json_text(line.encode("utf-8", "surrogateescape"), rng)
        if mutated is not None:
            lines[index] = mutated.decode("utf-8", "surrogateescape")
            return "\n".join(lines).encode("utf-8", "surrogateescape")
    fields = line.split()
    if choice <= 3 and fields:  # replace a field: a grade, score or id
        fields[rng.randrange(len(fields))] = rng.choice(INTERESTING).decode("utf-8", "surrogateescape")
    elif choice == 4 and fields:  # drop a field
        fields.pop(rng.randrange(len(fields)))
    elif choice == 5:  # add a field
        fields.insert(rng.randrange(len(fields) + 1), rng.choice(INTERESTING).decode("utf-8", "surrogateescape"))
    elif choice == 6 and len(fields) > 1:  # swap two fields
        i, j = rng.sample(range(len(fields)), 2)
        fields[i], fields[j] = fields[j], fields[i]
    elif choice == 7:  # the same line again, maybe with another grade or score: a conflict
        copy = list(fields)
        if copy:
            copy[-1 if len(copy) in (3, 4) else min(4, len(copy) - 1)] = rng.choice(["0", "1", "2", "-1", "7.5"])
        lines.insert(index, " ".join(copy))
    if choice != 7:
        lines[index] = rng.choice(SEPARATORS).join(fields) if rng.random() < 0.3 else " ".join(fields)
    return "\n".join(lines).encode("utf-8", "surrogateescape")


# Ids with no white space that a line-based file can hold: they stay valid, and travel to the reports.
ODD_LINE_IDS = ["\u00e9", "e\u0301", "#", "x#y", "::error::x", "<&>", "a:b", "%0A", "q1#", "\u2029", "\x7f",
                "\x01", "&#0;", "'", '"', "`", "x" * 5000]


def mutate_ids(data: bytes, rng: random.Random):
    """Make one identifier odd but keep the file valid: the odd id then reaches scoring and reports."""
    mutated = mutate_json_text(data, rng, odd_id=True)
    if mutated is not None:
        return mutated
    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    index = rng.randrange(len(lines))
    if lines[index].lstrip().startswith("{"):
        mutated = mutate_json_text(lines[index].encode("utf-8", "surrogateescape"), rng, odd_id=True)
        if mutated is not None:
            lines[index] = mutated.decode("utf-8", "surrogateescape")
    else:
        fields = lines[index].split()
        if fields:
            fields[rng.choice([i for i in (0, 1, 2) if i < len(fields)])] = rng.choice(ODD_LINE_IDS)
            lines[index] = " ".join(fields)
    return "\n".join(lines).encode("utf-8", "surrogateescape")


def _span(rng: random.Random, size: int):
    start = rng.randrange(size + 1)
    return start, min(size, start + rng.choice((1, 1, 2, 4, 8, 16, 64, 512)))


def mutate_bytes(data: bytes, rng: random.Random, corpus_role: list) -> bytes:
    """One byte-level mutation."""
    size = len(data)
    choice = rng.randrange(20)
    if choice == 0 and size:  # flip a bit
        i = rng.randrange(size)
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
    if choice == 1 and size:  # set a byte
        i = rng.randrange(size)
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
    if choice in (2, 3, 4):  # insert an interesting token
        i = rng.randrange(size + 1)
        return data[:i] + rng.choice(INTERESTING) + data[i:]
    if choice in (5, 6):  # replace a number or a word with an interesting token
        matches = list(re.finditer(rb"-?\d+(\.\d+)?([eE][-+]?\d+)?|[A-Za-z_#@:-]+", data))
        if matches:
            m = rng.choice(matches)
            return data[:m.start()] + rng.choice(INTERESTING) + data[m.end():]
    if choice == 7:  # delete a span
        start, end = _span(rng, size)
        return data[:start] + data[end:]
    if choice == 8:  # duplicate a span
        start, end = _span(rng, size)
        return data[:end] + data[start:end] + data[end:]
    if choice == 9:  # duplicate or shuffle lines
        lines = data.split(b"\n")
        if rng.random() < 0.5:
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
        else:
            rng.shuffle(lines)
        return b"\n".join(lines)
    if choice == 10:  # truncate
        return data[: rng.randrange(size + 1)]
    if choice == 11:  # line endings and byte-order marks
        return rng.choice([data.replace(b"\n", b"\r\n"), data.replace(b"\n", b"\r"), b"\xef\xbb\xbf" + data,
                           b"\xef\xbb\xbf\xef\xbb\xbf" + data, data.rstrip(b"\n"), data + b"\n\n\n", b"\n" * 3 + data,
                           b"  \t" + data])
    if choice == 12:  # other encodings
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data + b"\xff"
        return text.encode(rng.choice(["utf-16", "utf-16-le", "utf-32", "latin-1"]), "replace")
    if choice == 13:  # deep nesting
        depth = rng.choice((100, 1000, 10_000, 100_000))
        opener, closer = rng.choice([(b"[", b"]"), (b'{"a": ', b"}"), (b'{"q1": [', b"]}")])
        i = rng.randrange(size + 1)
        return data[:i] + opener * depth + (closer * depth if rng.random() < 0.5 else b"") + data[i:]
    if choice == 14:  # many copies: a bigger file, still bounded
        return data * rng.choice((2, 10, 100)) if size * 100 < MAX_INPUT else data + data
    if choice == 15:  # gzip it
        return gzip.compress(data, mtime=0)
    if choice == 16:  # gzip magic with garbage, or a truncated or corrupted gzip stream
        packed = gzip.compress(data, mtime=0)
        return rng.choice([
            b"\x1f\x8b" + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))),
            b"\x1f\x8b\x08\x00" + data,
            packed[: rng.randrange(len(packed))],
            packed[:10] + bytes([packed[10] ^ 0xFF]) + packed[11:],
            packed[:-8] + b"\x00" * 8,  # a wrong CRC and size
            packed + b"trailing garbage",
            packed + packed,  # two members
            b"\x1f",
        ])
    if choice == 17 and corpus_role:  # splice with another input
        _, other = rng.choice(corpus_role)
        return data[: rng.randrange(size + 1)] + other[rng.randrange(len(other) + 1):]
    if choice == 18:  # a file of only white space, or empty
        return rng.choice([b"", b" ", b"\n", b"\t\r\n", b"\xef\xbb\xbf", b"\xef\xbb\xbf\n", b"{}", b"[]", b"null"])
    # Replace a span with a run of an interesting token.
    start, end = _span(rng, size)
    return data[:start] + rng.choice(INTERESTING) * rng.choice((1, 2, 3, 50)) + data[end:]


def _gunzipped(data: bytes):
    """The content of a whole, valid gzip stream, else None."""
    if not data.startswith(b"\x1f\x8b"):
        return None
    try:
        return gzip.decompress(data)
    except Exception:  # noqa: BLE001  (OSError, EOFError, zlib.error)
        return None


def mutate(data: bytes, rng: random.Random, corpus_role: list, gentle: bool = False) -> bytes:
    """One to four stacked mutations; structure-aware ones on parseable inputs.

    ``gentle``: one mutation, mostly structure-aware, so that more inputs get
    past the parsers to the scoring, the gate and the reports.
    """
    for _ in range(1 if gentle else rng.choice((1, 1, 1, 2, 2, 3, 4))):
        inner = _gunzipped(data)
        if inner is not None and rng.random() < 0.7:  # mutate inside the gzip, then pack it again
            return gzip.compress(mutate(inner, rng, corpus_role, gentle), mtime=0)
        choice = rng.random() * (0.6 if gentle else 1.0)
        mutated = None
        if gentle and rng.random() < 0.4:
            mutated = mutate_ids(data, rng)
        elif choice < 0.3:
            mutated = mutate_json_text(data, rng)
        if mutated is None and choice < 0.55:
            mutated = mutate_lines(data, rng)
        data = mutated if mutated is not None else mutate_bytes(data, rng, corpus_role)
        if len(data) > MAX_INPUT:
            data = data[:MAX_INPUT]
    return data


# === Running one input, with a time budget ===


class Hang(BaseException):
    """Raised by the alarm when a case overruns its budget (a BaseException, so no handler swallows it)."""


@contextlib.contextmanager
def time_budget(seconds: float):
    """Interrupt the block after ``seconds`` where SIGALRM exists and this is the main thread."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def expire(signum, frame):
        raise Hang()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_ENV_NAMES = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "SOURCE_DATE_EPOCH")


@contextlib.contextmanager
def isolated(cwd: str, env: dict, stdin: bytes):
    """cwd, the few environment variables rag_eval reads, and stdin for one call; restored after.

    GITHUB_ACTIONS is always unset unless the case sets it: under a real CI
    runner, a fuzz case must not append to the real step summary.
    """
    saved_env = {name: os.environ.get(name) for name in _ENV_NAMES}
    saved_cwd = os.getcwd()
    saved_stdin = sys.stdin
    try:
        for name in _ENV_NAMES:
            os.environ.pop(name, None)
        os.environ.update(env)
        os.chdir(cwd)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.BytesIO(stdin)), encoding="utf-8")  # .buffer as a real stdin's
        yield
    finally:
        sys.stdin = saved_stdin
        os.chdir(saved_cwd)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _snapshot(folder: str) -> dict:
    """name -> sha256 of every file under ``folder`` (relative names)."""
    found = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, folder)] = hashlib.sha256(handle.read()).hexdigest()
    return found


def _portable(name: str) -> bool:
    """A relative file name that any checkout can hold."""
    return (name.isprintable() and name.isascii() and not os.path.isabs(name) and ".." not in name.split("/")
            and not any(c in name for c in '<>:"|?*\\'))


def _input_kind(data: bytes) -> str:
    """A coarse class of an input's bytes: gzip, BOM, first character, line endings, ASCII or not."""
    inner = _gunzipped(data)
    text = inner if inner is not None else data
    parts = ["gz" if inner is not None else "", "bom" if text.startswith(b"\xef\xbb\xbf") else "",
             text.lstrip(b"\xef\xbb\xbf \t\r\n")[:1].decode("latin-1"), "crlf" if b"\r" in text else "",
             "" if text.isascii() else "utf8"]
    return "/".join(parts)


def _value_kind(value) -> str:
    """A coarse class of what a reader returned: how many entries, of what types."""
    if isinstance(value, dict):
        kinds = sorted({type(v).__name__ + (str(min(len(v), 3)) if hasattr(v, "__len__") else "")
                        for v in value.values()})
        return f"{min(len(value), 4)}x{'|'.join(kinds)}"
    means = getattr(value, "means", None)
    return f"baseline:{min(len(means), 5) if means else 0}:{'extended' if value.per_query is not None else 'flat'}"


def _where(exc: BaseException) -> str:
    """The innermost frame of rag_eval (else the innermost frame) that raised ``exc``."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if os.path.basename(f.filename) == "rag_eval.py"]
    frame = (ours or frames or [None])[-1]
    return f"{frame.name}" if frame else "?"


def _shape(message: str) -> str:
    """An error message with its particulars removed: a behaviour's name, for the corpus and signatures."""
    message = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", message.split(" (column")[0])
    return message[:60]


class Finding:
    """One contract violation and everything needed to replay it."""

    def __init__(self, signature: str, summary: str, detail: str, case: int, files: dict, argv=None,
                 env=None, stdin_for=None, target: str = "cli", call: str = "", reader=None):
        self.signature, self.summary, self.detail, self.case = signature, summary, detail, case
        self.files, self.argv, self.env, self.stdin_for = files, argv, env or {}, stdin_for
        self.target, self.call = target, call
        self.reader = reader  # (role, options, from stdin) of a reader finding
        self.count = 1

    def repro(self) -> str:
        """Shell lines that replay the finding from the folder its files are saved in."""
        if self.target != "cli":
            return f'python3 -c "import rag_eval; rag_eval.{self.call}"'
        env = " ".join(f"{name}={shell_quote(value)}" for name, value in sorted(self.env.items()))
        args = " ".join(shell_quote(a) for a in self.argv)
        stdin = f" < {shell_quote(self.stdin_for)}" if self.stdin_for else ""
        return (env + " " if env else "") + f"python3 rag_eval.py {args}{stdin}"


def shell_quote(text: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./#-]+", text):
        return text
    if text.isprintable() and "'" not in text:
        return "'" + text + "'"
    def escape(c: str) -> str:
        if c.isprintable() and c not in "'\\":
            return c
        if 0xDC80 <= ord(c) <= 0xDCFF:  # a byte that was not UTF-8, as Python decodes argv
            return f"\\x{ord(c) - 0xDC00:02x}"
        return f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"

    return "$'" + "".join(escape(c) for c in text) + "'"


# === The oracles ===


def check_reader_value(role: str, value) -> str:
    """'' if a reader's return value is well-formed, else what is wrong."""
    is_int = rag_eval._is_int if hasattr(rag_eval, "_is_int") else (lambda v: isinstance(v, int) and not isinstance(v, bool))

    def finite(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if role == "qrels":
        if not isinstance(value, dict) or not value:
            return "read_qrels returned no judgments"
        for qid, docs in value.items():
            if not isinstance(qid, str) or not isinstance(docs, dict):
                return f"read_qrels: query {qid!r} maps to {type(docs).__name__}"
            for docid, grade in docs.items():
                if not isinstance(docid, str) or not is_int(grade) or grade < 0:
                    return f"read_qrels: {qid!r}/{docid!r} has grade {grade!r}"
    elif role == "run":
        if not isinstance(value, dict):
            return f"read_run returned {type(value).__name__}"
        for qid, entry in value.items():
            if not isinstance(qid, str):
                return f"read_run: query id {qid!r}"
            if isinstance(entry, list):
                if not all(isinstance(d, str) for d in entry):
                    return f"read_run: query {qid!r} ranks a non-string"
            elif isinstance(entry, dict):
                if not all(isinstance(d, str) and finite(s) for d, s in entry.items()):
                    return f"read_run: query {qid!r} has a bad score"
            else:
                return f"read_run: query {qid!r} maps to {type(entry).__name__}"
    elif role == "baseline":
        means = getattr(value, "means", None)
        if not isinstance(means, dict) or not all(isinstance(m, str) and finite(v) for m, v in means.items()):
            return "read_baseline: means are not metric -> finite number"
        per_query = value.per_query
        if per_query is not None and not all(
                isinstance(scores, dict) and all(finite(v) for v in scores.values()) for scores in per_query.values()):
            return "read_baseline: per-query scores are not finite numbers"
    elif role == "slices":
        if not isinstance(value, dict):
            return f"read_slices returned {type(value).__name__}"
        for qid, tags in value.items():
            if not isinstance(tags, list) or not all(isinstance(t, str) and t and ":" not in t for t in tags):
                return f"read_slices: query {qid!r} has tags {tags!r}"
    return ""


def check_report(fmt: str, stdout: str, spec: dict) -> str:
    """'' if stdout is a report in the format asked for, else what is wrong."""
    if not stdout.endswith("\n"):
        return "stdout is not a complete report (no final newline)"
    if fmt == "json":
        try:
            report = json.loads(stdout)
        except ValueError as exc:
            return f"stdout is not JSON: {exc}"
        if not isinstance(report, dict):
            return "the JSON report is not an object"
        for key in ("mean", "unscored", "queries", "k"):
            if key not in report:
                return f"the JSON report lacks {key!r}"
        mean = report["mean"]
        if not isinstance(mean, dict) or not mean:
            return "the report has no means"
        for metric, value in mean.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
                return f"mean {metric} is {value!r}, not a number in [0, 1]"
        if not isinstance(report["queries"], int) or report["queries"] < 1:
            return f"exit {spec['rc']} with {report['queries']!r} queries scored: nothing was evaluated"
        if not isinstance(report["unscored"], list):
            return "unscored is not a list"
        if spec.get("per_query") and "per_query" not in report:
            return "--per-query but no per_query in the report"
        if spec.get("ci") and "intervals" not in report:
            return "--ci but no intervals in the report"
        return ""
    if fmt == "table":
        first = stdout.split("\n", 1)[0]
        return "" if first.startswith(("UNGATED ", "PASS", "FAIL", "INCONCLUSIVE")) else f"table report starts {first[:40]!r}"
    if fmt == "markdown":
        return "" if stdout.startswith("### rag_eval: ") else f"markdown report starts {stdout[:40]!r}"
    if fmt == "csv":
        try:  # without NULs, which csv refused before Python 3.11 (an id may hold one)
            rows = list(csv.reader(io.StringIO(stdout.replace("\0", ""))))
        except csv.Error as exc:
            return f"stdout is not CSV: {exc}"
        return "" if rows and rows[0] and rows[0][0] in ("metric", "query") else f"CSV report starts {stdout[:40]!r}"
    return ""


# What a command line asks for, read as argparse reads the command lines this
# harness makes: the oracles follow the final argv, not the generator's plan,
# so a shrunk or damaged command line is judged by what it really says.
FLAGS = ("--per-query", "--judged-only", "--drop-unknown-queries", "--ci", "--allow-qrels-change",
         "--update-baseline", "--ratchet", "--explain")
VALUED = ("--k", "--format", "--measures", "--gain", "--min-grade", "--doc-id-sep", "--qrels-format",
          "--run-format", "--digits", "--abstain-below", "--slices", "--baseline", "--baseline-run", "--max-drop",
          "--min", "--gate", "--resamples", "--seed", "--alpha", "--largest-drops") + OUTPUT_OPTIONS
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse takes these as values, not options


def parse_argv(argv: list):
    """``{"positional", "values": {option: [values]}, "flags"}``, or None when unsure."""
    positional, values, flags = [], {}, set()
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("--") and len(token) > 2:
            name, eq, value = token.partition("=")
            if name in FLAGS and not eq:
                flags.add(name)
            elif name in VALUED:
                if not eq:
                    if i + 1 >= len(argv):
                        return None
                    i += 1
                    value = argv[i]
                    if value.startswith("-") and value != "-" and not _NEGATIVE_NUMBER.match(value):
                        return None
                values.setdefault(name, []).append(value)
            else:
                return None
        elif token.startswith("-") and token != "-":
            return None
        else:
            positional.append(token)
        i += 1
    return {"positional": positional, "values": values, "flags": flags} if len(positional) == 2 else None


def evaluation_settings(options: dict):
    """The keyword arguments of ``evaluate`` (and the formats and digits) that a parsed
    command line stands for; None when a value is not one this harness can read."""
    values = {name: found[-1] for name, found in options["values"].items()}
    try:
        parts = [p.strip() for p in values.get("--k", "5").split(",")]
        if not all(p.isascii() and p.isdigit() and int(p) > 0 for p in parts):
            return None
        cutoffs = sorted({int(p) for p in parts})
        measures = None
        if "--measures" in values:
            measures = [n.strip() for n in values["--measures"].split(",") if n.strip()]
        min_grade = values.get("--min-grade", "1")
        digits = values.get("--digits", str(rag_eval._DEFAULT_DIGITS))
        if not (min_grade.isascii() and min_grade.isdigit() and digits.isascii() and digits.isdigit()):
            return None
        return {"k": cutoffs[0] if len(cutoffs) == 1 else cutoffs, "measures": measures,
                "gain": values.get("--gain", "exp"), "min_grade": int(min_grade),
                "judged_only": "--judged-only" in options["flags"],
                "drop_unknown_queries": "--drop-unknown-queries" in options["flags"],
                "doc_id_sep": values.get("--doc-id-sep"), "qrels_format": values.get("--qrels-format", "auto"),
                "run_format": values.get("--run-format", "auto"), "digits": int(digits)}
    except ValueError:
        return None


# === The fuzzer ===


class Fuzzer:
    def __init__(self, seed: int = 0, budget: float = DEFAULT_BUDGET, crash_dir=None, verbose: bool = False,
                 minimize: bool = True, log=None):
        self.seed = seed
        self.budget = budget
        self.crash_dir = crash_dir
        self.verbose = verbose
        self.minimize = minimize
        self.log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        self.corpus = build_corpus(load_seeds(), seed)
        self.hostile = load_hostile()  # mutated now and then, never used as they are
        self.behaviours = set()
        self.findings = {}  # signature -> Finding
        self.notes = {}  # signature -> (count, example): oddities that break no stated rule
        self.cases = 0
        self.outcomes = {"reader": {}, "cli": {}}
        self.slowest = (0.0, None)
        self._took = None
        self.harness_errors = []  # (case, traceback): bugs of this file, reported apart from findings
        self.root = tempfile.mkdtemp(prefix="rag_eval_fuzz_")

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # --- bookkeeping ---

    def _count(self, target: str, outcome: str) -> None:
        self.outcomes[target][outcome] = self.outcomes[target].get(outcome, 0) + 1

    def _learn(self, role: str, name: str, data: bytes, behaviour: str) -> None:
        """Keep an input that did something new, so later cases mutate it further."""
        key = (role, behaviour)
        if key not in self.behaviours:
            self.behaviours.add(key)
            if len(self.corpus[role]) < MAX_CORPUS and len(data) <= 1 << 16:
                self.corpus[role].append((f"learned:{name}", data))

    def _found(self, finding: Finding) -> None:
        old = self.findings.get(finding.signature)
        if old is not None:
            old.count += 1
            return
        self.findings[finding.signature] = finding
        self.log(f"FINDING #{len(self.findings)} (case {finding.case}): {finding.signature}\n  {finding.summary}")
        if self.crash_dir:
            self.save(finding)

    def _note(self, signature: str, example: str) -> None:
        count, first = self.notes.get(signature, (0, example))
        self.notes[signature] = (count + 1, first)

    def save(self, finding: Finding) -> str:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", finding.signature)[:80].strip("-")
        folder = os.path.join(self.crash_dir, f"{slug}-{hashlib.sha256(finding.signature.encode()).hexdigest()[:8]}")
        os.makedirs(folder, exist_ok=True)
        named = set(finding.argv or [])
        named |= {token.split("=", 1)[1] for token in finding.argv or [] if token.startswith("--") and "=" in token}
        for name, data in finding.files.items():
            # Only the files the command line names; none whose name a checkout could not hold
            # (a newline, a byte that is not UTF-8): replayed without it, such a case still fails.
            if name not in named | {"input", "stdin"} or not _portable(name):
                continue
            path = os.path.join(folder, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(data)
        record = {"signature": finding.signature, "summary": finding.summary, "target": finding.target,
                  "case": finding.case, "seed": self.seed, "argv": finding.argv, "env": finding.env,
                  "stdin": finding.stdin_for, "call": finding.call, "repro": finding.repro(),
                  "python": sys.version.split()[0]}
        if finding.reader:
            record["role"], record["options"], record["from_stdin"] = finding.reader
        with open(os.path.join(folder, "finding.json"), "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=2, sort_keys=True)
            handle.write("\n")
        with open(os.path.join(folder, "detail.txt"), "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(f"{finding.summary}\n\nrepro, from this folder (under tools/fuzz/crashes/, rag_eval.py is "
                         f"../../../rag_eval.py; for -c, PYTHONPATH=../../..):\n  {finding.repro()}\n\n"
                         f"{finding.detail}\n")
        return folder

    def replay(self, folder: str):
        """Run a saved finding again: (signature or None, summary).  None: the contract holds now."""
        with open(os.path.join(folder, "finding.json"), encoding="utf-8") as handle:
            record = json.load(handle)
        if record["target"] == "reader":
            with open(os.path.join(folder, "input"), "rb") as handle:
                data = handle.read()
            signature, _ = self.check_reader(record["role"], data, record["options"], record.get("from_stdin", False))
            return signature, self._last[1]
        files = {}
        for parent, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(parent, name)
                relative = os.path.relpath(path, folder)
                if relative not in ("finding.json", "detail.txt"):
                    with open(path, "rb") as handle:
                        files[relative] = handle.read()
        stdin = files.pop("stdin", b"")
        case = {"argv": record["argv"], "files": files, "env": record["env"], "stdin": stdin,
                "stdin_role": "stdin" if record.get("stdin") else None}
        signature, _ = self.check_cli(case)
        return signature, self._last[1]

    # --- the loop ---

    def run(self, seconds=None, cases=None) -> dict:
        """Fuzz until ``seconds`` have passed or ``cases`` cases ran, whichever first."""
        start = time.monotonic()
        index = 0
        while (cases is None or index < cases) and (seconds is None or time.monotonic() - start < seconds):
            self.one(index)
            index += 1
            if self.verbose and index % 1000 == 0:
                self.log(f"  {index} cases, {len(self.findings)} findings, {time.monotonic() - start:.0f} s")
        return self.summary(time.monotonic() - start)

    def summary(self, elapsed: float) -> dict:
        return {"seed": self.seed, "cases": self.cases, "seconds": round(elapsed, 1),
                "findings": len(self.findings), "signatures": sorted(self.findings),
                "harness_errors": len(self.harness_errors),
                "notes": {sig: count for sig, (count, _) in sorted(self.notes.items())},
                "outcomes": self.outcomes, "corpus": {role: len(items) for role, items in self.corpus.items()},
                "slowest_case": {"seconds": round(self.slowest[0], 3), "case": self.slowest[1]},
                "python": sys.version.split()[0]}

    def one(self, index: int) -> None:
        rng = random.Random(f"{self.seed}:{index}")
        self._took = None  # the first call's time: shrinking a finding does not count
        try:
            if rng.random() < 0.45:
                self.reader_case(rng, index)
            else:
                self.cli_case(rng, index)
        except Exception:  # noqa: BLE001  -- a bug of the harness, not of rag_eval: keep fuzzing, report it
            text = traceback.format_exc()
            self.harness_errors.append((index, text))
            self.log(f"HARNESS ERROR (case {index}):\n{text}")
        if self._took is not None and self._took > self.slowest[0]:
            self.slowest = (self._took, index)
        self.cases += 1

    def _timed(self, began: float) -> float:
        took = time.monotonic() - began
        if self._took is None:
            self._took = took
        return took

    def pick(self, rng: random.Random, role: str, mutate_it: bool, gentle: bool = False):
        pool = self.hostile[role] if mutate_it and self.hostile[role] and rng.random() < 0.2 else self.corpus[role]
        name, data = rng.choice(pool)
        if mutate_it:
            data = mutate(data, rng, self.corpus[role], gentle)
        return name, data

    # --- target 1: the readers ---

    def reader_case(self, rng: random.Random, index: int) -> None:
        role = rng.choice(("qrels", "qrels", "run", "run", "baseline", "slices"))
        name, data = self.pick(rng, role, rng.random() < 0.97)
        options = {}
        if role in ("qrels", "run") and rng.random() < 0.3:
            options["fmt"] = rng.choice(rag_eval._FORMATS)
        if role == "run":
            if rng.random() < 0.5:
                options["depth"] = rng.choice((1, 2, 6, 11, 100))
            if rng.random() < 0.2:
                options["doc_id_sep"] = rng.choice(("#", "-", "p"))
            if rng.random() < 0.2:
                options["keep"] = "docid[-1:] in '13579#'"
        signature, outcome = self.check_reader(role, data, options, rng.random() < 0.05)
        self._count("reader", outcome)
        if signature is None:
            if outcome.startswith("ok"):  # only accepted inputs: broken ones would crowd out the seeds
                self._learn(role, name, data, f"reader:{outcome}:{_input_kind(data)}")
            return
        if self.minimize:
            data = self.shrink(data, lambda blob: self.check_reader(role, blob, options, False)[0] == signature)
        _, summary, detail = self._last
        call = self._call_text(role, options)
        self._found(Finding(signature, summary, detail, index, {"input": data}, target="reader",
                            call=call.replace("PATH", "'input'"), reader=(role, options, False)))

    @staticmethod
    def _call_text(role: str, options: dict) -> str:
        args = ["PATH"] + [f"{k}={v!r}" if k != "keep" else f"keep=lambda qid, docid: {v}" for k, v in options.items()]
        return f"read_{role}({', '.join(args)})"

    def check_reader(self, role: str, data: bytes, options: dict, from_stdin: bool):
        """(signature or None, outcome); the finding's summary and detail go to self._last."""
        folder = tempfile.mkdtemp(dir=self.root)
        path = os.path.join(folder, "input")
        with open(path, "wb") as handle:
            handle.write(data)
        reader = getattr(rag_eval, f"read_{role}")
        kwargs = dict(options)
        if "keep" in kwargs:
            rule = kwargs["keep"]
            kwargs["keep"] = lambda qid, docid: eval(rule, {}, {"qid": qid, "docid": docid})  # noqa: S307 (ours)
        began = time.monotonic()
        self._last = (None, "", "")
        try:
            with isolated(folder, {}, data if from_stdin else b""), time_budget(self.budget):
                value = reader("-" if from_stdin else path, **kwargs)
        except rag_eval.RagEvalError as exc:
            outcome, problem = "error:" + _shape(getattr(exc, "detail", str(exc))), ""
            if "\n" in str(exc):
                problem = f"read_{role}: RagEvalError message spans lines: {str(exc)[:200]!r}"
        except Hang:
            outcome, problem = "hang", f"read_{role} ran past the {self.budget:g} s budget"
            self._last = (None, problem, "")
            shutil.rmtree(folder, ignore_errors=True)
            return f"reader:{role}:hang", outcome
        except BaseException as exc:  # noqa: BLE001  -- any other exception is the finding
            if isinstance(exc, KeyboardInterrupt):
                raise
            shutil.rmtree(folder, ignore_errors=True)
            summary = f"read_{role} raised {type(exc).__name__}: {str(exc)[:300]}"
            self._last = (None, summary, "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            return f"reader:{role}:{type(exc).__name__}@{_where(exc)}", "crash"
        else:
            outcome = "ok:" + _value_kind(value)
            problem = check_reader_value(role, value)
        took = self._timed(began)
        with open(path, "rb") as handle:
            if handle.read() != data:
                problem = f"read_{role} modified its input file"
        shutil.rmtree(folder, ignore_errors=True)
        if not problem and took > self.budget:
            problem = f"read_{role} took {took:.1f} s (budget {self.budget:g} s)"
        if problem:
            self._last = (None, problem, "")
            return f"reader:{role}:{_shape(problem.split(': ')[0])}", outcome
        return None, outcome

    # --- target 2: the command line ---

    def cli_case(self, rng: random.Random, index: int) -> None:
        case = self.make_cli_case(rng)
        signature, outcome = self.check_cli(case)
        self._count("cli", outcome)
        mutated = case["mutated"]
        if signature is None:
            if len(mutated) == 1 and not case["argv_mutated"] and outcome.startswith(("exit 0", "exit 1")):
                role = mutated[0]
                data = case["files"][case["paths"][role]]
                self._learn(role, case["names"][role], data, f"cli:{outcome}:{_input_kind(data)}")
            return
        if self.minimize and len(mutated) == 1:
            path = case["paths"][mutated[0]]

            from_stdin = case["stdin_role"] == mutated[0]

            def same(blob):
                trial = dict(case, files=dict(case["files"], **{path: blob}), stdin=blob if from_stdin else case["stdin"])
                return self.check_cli(trial)[0] == signature

            case["files"][path] = self.shrink(case["files"][path], same)
            if from_stdin:
                case["stdin"] = case["files"][path]
            self.check_cli(case)  # refresh the summary for the shrunk input
        if self.minimize:
            case = self.shrink_argv(case, signature)
        _, summary, detail = self._last
        files = dict(case["files"])
        if case["stdin_role"]:
            files["stdin"] = case["stdin"]
        self._found(Finding(signature, summary, detail, index, files, argv=case["argv"], env=case["env"],
                            stdin_for="stdin" if case["stdin_role"] else None))

    def make_cli_case(self, rng: random.Random) -> dict:
        """Input files (one or two mutated, or none), an option combination and an environment."""
        roll = rng.random()
        if roll < 0.3:
            mutated = []
        elif roll < 0.9:
            mutated = [rng.choice(("qrels", "qrels", "run", "run", "baseline", "slices"))]
        else:
            mutated = rng.sample(ROLES, 2)
        spec = {"k": [5], "format": "json", "per_query": False, "ci": False, "judged_only": False, "doc_id_sep": None,
                "measures": None, "gain": "exp", "min_grade": 1, "drop_unknown": False, "qrels_format": "auto",
                "run_format": "auto", "digits": rag_eval._DEFAULT_DIGITS, "gated": False, "known": True}
        names, data = {}, {}
        for role in ROLES:
            names[role], data[role] = self.pick(rng, role, role in mutated, gentle=rng.random() < 0.6)
        paths = {"qrels": "qrels.json", "run": "run.json", "baseline": "baseline.json", "slices": "slices.json"}
        if rng.random() < 0.05:  # unusual file names
            role = rng.choice(ROLES)
            paths[role] = rng.choice(["with space.json", "ünï.json", "-dash.json", "sub/dir/q.json", "a\nb.json",
                                      "a\rb.json", "'\".json", "\udcff.json"])
        argv = [paths["qrels"], paths["run"]]
        opts = []

        def add(*tokens):
            opts.append(list(tokens))

        def choose(good, bad):
            """A valid value, or now and then an invalid one (then the oracle cannot predict the numbers)."""
            if bad and rng.random() < BAD_OPTION:
                spec["known"] = False
                return rng.choice(bad)
            return rng.choice(good)

        if rng.random() < 0.5:
            text = choose(["1", "3", "5", "10", "1,5", "3,5,10", "5,5", "2", " 4", "10,1", "05"],
                          ["0", "-1", "abc", "1e3", "\u00b2", "1_0", "9" * 30, "", "5,,3", "1.5", HUGE_INT.decode()])
            if spec["known"]:
                spec["k"] = sorted({int(p) for p in text.split(",")})
            add("--k", text)
        if rng.random() < 0.5:
            spec["format"] = choose(["json", "json", "table", "markdown", "csv"], ["xml", "JSON", ""])
            add("--format", spec["format"])
        if rng.random() < 0.3:
            spec["per_query"] = True
            add("--per-query")
        if rng.random() < 0.2:
            text = choose(["recall,precision,ap,judged", "ndcg", "mrr,success", "recall, ndcg", "judged"],
                          ["foo", "", ",", "recall@5"])
            spec["measures"] = [n.strip() for n in text.split(",") if n.strip()] or None
            add("--measures", text)
        if rng.random() < 0.15:
            spec["gain"] = choose(["linear", "exp"], ["log", ""])
            add("--gain", spec["gain"])
        if rng.random() < 0.1:
            text = choose(["2", "3", "1"], ["0", "-1", "1.0"])
            spec["min_grade"] = int(text) if spec["known"] else 1
            add("--min-grade", text)
        if rng.random() < 0.2:
            spec["judged_only"] = True
            add("--judged-only")
        if rng.random() < 0.15:
            spec["drop_unknown"] = True
            add("--drop-unknown-queries")
        if rng.random() < 0.2:
            spec["doc_id_sep"] = choose(["#", "#", "-", "p", "\n", "policy"], [""])
            add("--doc-id-sep", spec["doc_id_sep"])
        for role in ("qrels", "run"):
            if rng.random() < 0.1:
                spec[f"{role}_format"] = choose(rag_eval._FORMATS, ["tsv", "beir"])
                add(f"--{role}-format", spec[f"{role}_format"])
        if rng.random() < 0.1:
            text = choose(["0", "1", "2", "17"], ["18", "-1", "x"])
            spec["digits"] = int(text) if spec["known"] else 0
            add("--digits", text)
        if rng.random() < 0.1:
            add("--abstain-below", choose(["0.5", "-1", "0", "1e300"], ["nan", "1e309", "inf", "x"]))
        uses = {"qrels", "run"}
        if rng.random() < 0.25:
            uses.add("slices")
            add("--slices", paths["slices"])
        if rng.random() < 0.35:
            spec["gated"] = True
            uses.add("baseline")
            add("--baseline", paths["baseline"])
        elif rng.random() < 0.08:
            spec["gated"] = True
            add("--baseline-run", paths["run"] if rng.random() < 0.5 else "run2.json")
        # Metric names mostly at a cutoff this run computes, so the gate gets past its name checks.
        at = rng.choice(spec["k"]) if rng.random() < 0.8 else 5
        measure = rng.choice(spec["measures"] or ["recall", "success", "mrr", "ndcg"])
        for _ in range(rng.choice((0, 0, 0, 1, 2))):
            add("--max-drop", choose(["0.02", "5%", "0", f"{measure}@{at}=0.01", f"billing:{measure}@{at}=0.1",
                                      f"sso:{measure}@{at}=50%", f"support:{measure}@{at}=0", f"{measure}@{at}=1e-12",
                                      "1", "100%"],
                                     ["nan", "-1", "recall@7=0.1", "nope:recall@5=0.1", "=0.1", "1e309", "x%"]))
        if rng.random() < 0.15:
            spec["gated"] = True
            add("--min", choose([f"{measure}@{at}=0.5", f"{measure}@{at}=1", f"{measure}@{at}=0",
                                 f"billing:{measure}@{at}=0.9", f"{measure}@{at}=0.1"],
                                ["ndcg@5=1.5", "ap@5=0.1", "x=1", "recall@5", "recall@5=nan"]))
        if rng.random() < 0.15:
            add("--gate", choose(["significant", "drop"], ["strict"]))
        if rng.random() < 0.15:
            spec["ci"] = True
            add("--ci")
        # Small resample counts keep each case fast: the default is 10 000.
        add("--resamples", choose(["100", "100", "150", "300"], ["99", "abc", "1e3"] if rng.random() < 0.3 else []))
        if rng.random() < 0.05:
            add("--seed", choose(["0", "7", "18446744073709551616"], ["-1", "x"]))
        if rng.random() < 0.05:
            add("--alpha", choose(["0.1", "0.5", "1e-9"], ["1", "0", "nan"]))
        if rng.random() < 0.05:
            add("--largest-drops", choose(["0", "2"], ["-3"]))
        if rng.random() < 0.05:
            add("--allow-qrels-change")
        for option in OUTPUT_OPTIONS:
            if rng.random() < 0.1:
                add(option, choose([option.strip("-") + ".out", "other.out", "summary.md"],
                                   ["out/x.out", paths["qrels"], ".", ""]))
        if spec["gated"] and "--baseline" in [o[0] for o in opts] and rng.random() < 0.15:
            add("--update-baseline")
            if rng.random() < 0.5:
                add("--ratchet")
        if rng.random() < 0.01:
            add("--explain")
        rng.shuffle(opts)
        for tokens in opts:
            if len(tokens) == 2 and rng.random() < 0.1:
                tokens[:] = [f"{tokens[0]}={tokens[1]}"]
            argv += tokens
        if rng.random() < 0.15:  # options before the positional arguments
            argv = argv[2:] + argv[:2]
        stdin_role = None
        if rng.random() < 0.06:
            stdin_role = rng.choice(("qrels", "run", "baseline", "slices"))
            if stdin_role in uses:
                argv = ["-" if a == paths[stdin_role] else a for a in argv]
            else:
                stdin_role = None
        argv_mutated = False
        if rng.random() < 0.08:  # a damaged command line
            argv_mutated = True
            spec["known"] = False
            choice = rng.randrange(3)
            if choice == 0 and argv:
                argv.pop(rng.randrange(len(argv)))
            elif choice == 1 and argv:
                i = rng.randrange(len(argv))
                argv.insert(i, argv[i])
            else:
                argv.insert(rng.randrange(len(argv) + 1),
                            rng.choice(["--", "-", "--k", "--nonsense", "extra.json", "x\ny", "--format=json",
                                        "--k=3", "\udcff", "", " ", "-k", "--k=", "--per-query=1", "-"]))
        env = {}
        if rng.random() < 0.12:
            env["GITHUB_ACTIONS"] = "true"
            env["GITHUB_STEP_SUMMARY"] = rng.choice(["summary.md", "summary.md", "out/summary.md", "."])
        if rng.random() < 0.05 or ("--save-baseline" in " ".join(argv) and rng.random() < 0.3):
            env["SOURCE_DATE_EPOCH"] = rng.choice(["0", "1700000000", "abc", "1e300", "-1", "nan", " 12 ", "", "1_000"])
        files = {paths[role]: data[role] for role in ROLES}
        if "run2.json" in argv:
            files["run2.json"] = self.pick(rng, "run", False)[1]
        return {"argv": argv, "files": files, "paths": paths, "names": names, "mutated": mutated,
                "spec": spec, "env": env, "stdin_role": stdin_role,
                "stdin": data[stdin_role] if stdin_role else b"", "argv_mutated": argv_mutated}

    def check_cli(self, case: dict):
        """(signature or None, outcome); the finding's summary and detail go to self._last."""
        folder = tempfile.mkdtemp(dir=self.root)
        try:
            return self._check_cli(case, folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _check_cli(self, case: dict, folder: str):
        argv, env = case["argv"], case["env"]
        for name, data in case["files"].items():
            path = os.path.join(folder, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(data)
        before = _snapshot(folder)
        out, err = io.StringIO(), io.StringIO()
        self._last = (None, "", "")
        began = time.monotonic()
        rc = None
        try:
            with isolated(folder, env, case["stdin"]), time_budget(self.budget), \
                    contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = rag_eval.main(list(argv))
        except Hang:
            self._last = (None, f"main ran past the {self.budget:g} s budget", "")
            return "cli:hang", "hang"
        except BaseException as exc:  # noqa: BLE001  -- an exception escaping main is the finding
            if isinstance(exc, KeyboardInterrupt):
                raise
            summary = f"main raised {type(exc).__name__}: {str(exc)[:300]}"
            detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self._last = (None, summary, detail)
            return f"cli:{type(exc).__name__}@{_where(exc)}", "crash"
        took = self._timed(began)
        stdout, stderr = out.getvalue(), err.getvalue()
        lines = stderr.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        outcome = f"exit {rc}"
        if rc == 2 and len(lines) == 1:
            outcome += ":" + _shape(lines[0])
        elif rc in (0, 1):
            outcome += ":" + ",".join(sorted({_shape(line)[:30] for line in lines}))
        problem = self._judge(rc, stdout, lines, argv)
        if not problem:
            problem = self._judge_files(folder, before, case, rc)
        if not problem:
            problem = self._judge_outputs(folder, case, rc)
        if not problem and rc in (0, 1) and _format_in(argv) == "json" and "--explain" not in argv:
            problem = self._differential(folder, case, stdout)
        if not problem and took > self.budget:
            problem = f"main took {took:.1f} s (budget {self.budget:g} s)"
        if problem:
            self._last = (None, problem, f"argv: {argv!r}\nexit: {rc!r}\nstdout:\n{stdout[:2000]}\nstderr:\n{stderr[:2000]}")
            return f"cli:{_shape(problem.split(': ')[0])}", outcome
        # Lines that break no stated rule but are odd: recorded as notes, not findings.
        if rc in (0, 1):
            for line in lines:
                if not line.startswith(OK_STDERR_PREFIXES):
                    self._note("stderr line outside the contract on exit 0/1", f"{argv!r}: {line[:200]!r}")
        return None, outcome

    def _judge(self, rc, stdout: str, lines: list, argv: list) -> str:
        """The issue's rule: a result, or exit 2 with one line; no runner's command nor raw control character
        (issue 32) on stdout or stderr."""
        if rc not in (0, 1, 2, 3):  # 3: --gate significant found too little evidence (inconclusive)
            return f"exit code {rc!r}, expected 0, 1, 2 or 3"
        for where, text in (("stdout", stdout.replace("\r\n", "\n")), ("stderr", "\n".join(lines))):
            forged = FORGED.search(text)
            if forged:
                return f"{where} holds {forged.group()!r}: a CI runner's command or a raw control character"
        if rc == 2:
            if stdout:
                return f"exit 2 with output on stdout: {stdout[:80]!r}"
            if len(lines) != 1:
                return f"exit 2 with {len(lines)} stderr lines, expected one: {lines[:3]!r}"
            if not lines[0].startswith(ERROR_PREFIX):
                return f"exit 2 whose stderr line does not start {ERROR_PREFIX!r}: {lines[0][:120]!r}"
            return ""
        errors = [line for line in lines if line.startswith(ERROR_PREFIX) or "Traceback" in line]
        if errors:
            return f"exit {rc} with an error on stderr: {errors[0][:160]!r}"
        if any(a == "--explain" or a.startswith("--explain=") for a in argv):
            return "" if rc == 0 and stdout == rag_eval._explain() else "--explain printed something else"
        regressions = [line for line in lines if line.startswith("REGRESSION ")]
        if rc == 1 and not regressions:
            return "exit 1 without a REGRESSION line"
        if rc == 0 and regressions:
            return f"exit 0 with a REGRESSION line: {regressions[0][:120]!r}"
        options = parse_argv(argv)
        if options is None:  # a damaged command line: only the format can be told
            return check_report(_format_in(argv), stdout, {"rc": rc})
        gated = any(name in options["values"] for name in ("--baseline", "--baseline-run", "--min"))
        if rc == 1 and not gated:
            return "exit 1 though nothing was gated"
        return check_report(options["values"].get("--format", ["json"])[-1], stdout,
                            {"rc": rc, "per_query": "--per-query" in options["flags"], "ci": "--ci" in options["flags"]})

    def _judge_files(self, folder: str, before: dict, case: dict, rc) -> str:
        """Nothing written that no option asked for; no input changed (but a baseline asked to be updated)."""
        after = _snapshot(folder)
        argv = case["argv"]
        asked = set()
        for i, token in enumerate(argv):
            for option in OUTPUT_OPTIONS:
                if token == option and i + 1 < len(argv):
                    asked.add(os.path.normpath(argv[i + 1]))
                elif token.startswith(option + "="):
                    asked.add(os.path.normpath(token[len(option) + 1:]))
        if case["env"].get("GITHUB_ACTIONS") == "true" and case["env"].get("GITHUB_STEP_SUMMARY"):
            asked.add(os.path.normpath(case["env"]["GITHUB_STEP_SUMMARY"]))
        updating = "--update-baseline" in argv
        if updating:
            for i, token in enumerate(argv):
                if token == "--baseline" and i + 1 < len(argv):
                    asked.add(os.path.normpath(argv[i + 1]))
                elif token.startswith("--baseline="):
                    asked.add(os.path.normpath(token[len("--baseline="):]))
        for name, digest in after.items():
            if name in asked:
                continue
            if name not in before:
                return f"wrote {name!r}, which no option asked for (exit {rc})"
            if before[name] != digest:
                return f"modified the input {name!r} (exit {rc})"
        for name in before:
            if name not in after and name not in asked:
                return f"deleted {name!r} (exit {rc})"
        return ""

    def _judge_outputs(self, folder: str, case: dict, rc) -> str:
        """Files written on exit 0/1 must be readable: JSON, JUnit XML, JSONL, a baseline rag_eval reads back."""
        options = parse_argv(case["argv"])
        if rc not in (0, 1) or options is None or "--explain" in options["flags"]:
            return ""
        summary = case["env"].get("GITHUB_STEP_SUMMARY") if case["env"].get("GITHUB_ACTIONS") == "true" else None
        written = {option: values[-1] for option, values in options["values"].items() if option in OUTPUT_OPTIONS}
        if "--update-baseline" in options["flags"] and "--baseline" in options["values"]:
            written["--update-baseline"] = options["values"]["--baseline"][-1]
        for option, name in written.items():
            path = os.path.join(folder, name)
            if summary and os.path.normpath(name) == os.path.normpath(summary):
                continue  # the step summary is appended to it: the user's own doing
            if name == "":
                self._note(f"{option} '' (an empty file name) is ignored without a word", repr(case["argv"]))
                continue
            if not os.path.isfile(path):
                return f"exit {rc} but {option} {name!r} was not written"
            with open(path, "rb") as handle:
                data = handle.read()
            try:
                if option == "--output":
                    if "mean" not in json.loads(data.decode("utf-8")):
                        return f"{option} file has no means"
                elif option == "--junit":
                    from xml.etree import ElementTree

                    ElementTree.fromstring(data)
                elif option == "--unjudged":
                    for line in data.decode("utf-8").splitlines():
                        json.loads(line)
                else:
                    rag_eval.read_baseline(path)
            except Exception as exc:  # noqa: BLE001
                return f"{option} wrote a file that does not read back: {type(exc).__name__}: {str(exc)[:160]}"
        return ""

    def _differential(self, folder: str, case: dict, stdout: str) -> str:
        """Exit 0/1 must mean the inputs really were evaluated: the library, on the whole
        files, must agree with the report's means."""
        options = parse_argv(case["argv"])
        settings = options and evaluation_settings(options)
        if not settings:
            return ""
        positional = options["positional"]
        if "-" in positional:
            with open(os.path.join(folder, ".stdin.fuzz"), "wb") as handle:
                handle.write(case["stdin"])
        qrels_path, run_path = (os.path.join(folder, ".stdin.fuzz" if p == "-" else p) for p in positional)
        try:
            report = json.loads(stdout)
            qrels = rag_eval.read_qrels(qrels_path, settings.pop("qrels_format"))
            run = rag_eval.read_run(run_path, settings.pop("run_format"))
            settings.pop("digits")  # the human formats' rounding: JSON numbers are exact
            result = rag_eval.evaluate(qrels, run, **settings)
        except rag_eval.RagEvalError as exc:
            return f"main exited 0/1 on inputs the library rejects: {str(exc)[:160]}"
        except Exception as exc:  # noqa: BLE001
            return f"the library raised {type(exc).__name__} on inputs main accepted: {str(exc)[:160]}"
        expected = result["mean"]
        # beyond --k and --measures, the baseline's own metrics are scored too (the baseline decides what is gated)
        extra = set(report["mean"]) - set(expected)
        baseline = options["values"].get("--baseline", [None])[-1] if extra else None
        held = {key.rpartition(":")[2] for key in rag_eval.read_baseline(os.path.join(folder, baseline)).means} \
            if baseline else set()
        if {m: report["mean"].get(m) for m in expected} != expected or extra - held:
            return f"report means {report['mean']} differ from the library's {expected}"
        if report["queries"] != result["queries"] or report["unscored"] != result["unscored"]:
            return "report queries/unscored differ from the library's"
        return ""

    # --- shrinking a finding's input ---

    def shrink(self, data: bytes, still_fails, seconds: float = 3.0, tries: int = 400) -> bytes:
        """Delta debugging, bounded: drop chunks while the same finding persists."""
        deadline = time.monotonic() + seconds
        last = self._last
        chunk = max(1, len(data) // 2)
        while chunk >= 1 and tries > 0 and time.monotonic() < deadline:
            i = 0
            progressed = False
            while i < len(data) and tries > 0 and time.monotonic() < deadline:
                candidate = data[:i] + data[i + chunk:]
                tries -= 1
                if candidate != data and still_fails(candidate):
                    data = candidate
                    last = self._last
                    progressed = True
                else:
                    i += chunk
            if not progressed:
                chunk //= 2
        self._last = last
        return data

    def shrink_argv(self, case: dict, signature: str) -> dict:
        """Drop the options and environment variables that the finding does not need."""
        last = self._last
        i = 0
        while i < len(case["argv"]):
            argv = case["argv"]
            widths = (2, 1) if argv[i].startswith("--") and "=" not in argv[i] else (1,)
            for width in widths:
                trial = dict(case, argv=argv[:i] + argv[i + width:])
                if self.check_cli(trial)[0] == signature:
                    case = trial
                    last = self._last
                    break
            else:
                i += 1
        for name in sorted(case["env"]):
            trial = dict(case, env={k: v for k, v in case["env"].items() if k != name})
            if self.check_cli(trial)[0] == signature:
                case = trial
                last = self._last
        self._last = last
        return case


def _format_in(argv: list) -> str:
    """The --format that argparse would pick from a damaged command line (the last one wins)."""
    fmt = "json"
    for i, token in enumerate(argv):
        if token == "--format" and i + 1 < len(argv):
            fmt = argv[i + 1]
        elif token.startswith("--format="):
            fmt = token.split("=", 1)[1]
    return fmt


# === atheris (optional, coverage-guided) ===


def atheris_main(seconds: float, seed: int, budget: float, crash_dir: str, extra: list) -> int:
    """Run the atheris fuzzer in a child process (libFuzzer ends it with _exit, so no
    summary could be printed from inside), then report its cases and findings."""
    import subprocess

    work = tempfile.mkdtemp(prefix="rag_eval_atheris_")  # the child's TMPDIR: removed here, since it cannot
    stats_path = os.path.join(work, "stats.json")
    command = [sys.executable, os.path.abspath(__file__), "--atheris-child", stats_path, "--seconds", str(seconds),
               "--seed", str(seed), "--budget", str(budget), "--crash-dir", crash_dir, *extra]
    child = subprocess.run(command, stdin=subprocess.DEVNULL, env=dict(os.environ, TMPDIR=work))
    try:
        with open(stats_path, encoding="utf-8") as handle:
            stats = json.load(handle)
    except (OSError, ValueError):
        print(f"fuzz.py: the atheris run ended (exit {child.returncode}) without statistics", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"rag_eval fuzz (atheris): Python {stats['python']}, seed {seed}: {stats['cases']} cases in "
          f"{stats['seconds']} s, {len(stats['findings'])} findings; libFuzzer exit {child.returncode}")
    for signature, finding in sorted(stats["findings"].items()):
        print(f"FINDING {signature} (x{finding['count']})\n  {finding['summary']}\n  repro: {finding['repro']}")
    return 1 if stats["findings"] or child.returncode not in (0,) else 0


def atheris_child(stats_path: str, seconds: float, seed: int, budget: float, crash_dir: str, extra: list) -> int:
    """Drive the same targets and oracles from atheris/libFuzzer, coverage-guided.

    Byte 0 of an input picks the role (and, with its high bit, the reader
    target), the next 8 seed the option choices, the rest is the file.  A
    finding is saved and counted once, and fuzzing goes on (libFuzzer would
    stop at the first); statistics go to ``stats_path`` as it runs.
    """
    import atheris  # ImportError is the caller's business

    atheris.instrument_all()
    fuzzer = Fuzzer(seed=seed, budget=budget, crash_dir=crash_dir, minimize=False)
    started = time.monotonic()

    def dump() -> None:
        stats = {"python": sys.version.split()[0], "cases": fuzzer.cases,
                 "seconds": round(time.monotonic() - started), "outcomes": fuzzer.outcomes,
                 "findings": {sig: {"count": f.count, "summary": f.summary, "repro": f.repro()}
                              for sig, f in fuzzer.findings.items()}}
        with open(stats_path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(stats, handle)
        os.replace(stats_path + ".tmp", stats_path)

    def one_input(data: bytes) -> None:
        if len(data) < 9:
            return
        role = ROLES[data[0] % len(ROLES)]
        blob = data[9:]
        fuzzer.cases += 1
        before = len(fuzzer.findings)
        try:
            check(role, data, blob)
        finally:
            if fuzzer.cases % 100 == 0 or len(fuzzer.findings) != before:
                dump()

    def check(role: str, data: bytes, blob: bytes) -> None:
        if data[0] & 0x80:
            signature, outcome = fuzzer.check_reader(role, blob, {}, False)
            fuzzer._count("reader", outcome)
            if signature is not None:
                fuzzer._found(Finding(signature, fuzzer._last[1], fuzzer._last[2], fuzzer.cases, {"input": blob},
                                      target="reader", call=f"read_{role}('input')", reader=(role, {}, False)))
            return
        case = fuzzer.make_cli_case(random.Random(data[1:9]))
        case["files"][case["paths"][role]] = blob
        if case["stdin_role"] == role:
            case["stdin"] = blob
        signature, outcome = fuzzer.check_cli(case)
        fuzzer._count("cli", outcome)
        if signature is not None:
            files = dict(case["files"], **({"stdin": case["stdin"]} if case["stdin_role"] else {}))
            fuzzer._found(Finding(signature, fuzzer._last[1], fuzzer._last[2], fuzzer.cases, files,
                                  argv=case["argv"], env=case["env"],
                                  stdin_for="stdin" if case["stdin_role"] else None))

    dump()
    corpus_dir = tempfile.mkdtemp(prefix="rag_eval_atheris_corpus_")
    for number, role in enumerate(ROLES):
        for index, (_, data) in enumerate(fuzzer.corpus[role]):
            for head in (number, number | 0x80):
                with open(os.path.join(corpus_dir, f"{role}-{index}-{head}"), "wb") as handle:
                    handle.write(bytes([head]) + seed.to_bytes(8, "little") + data)
    os.makedirs(crash_dir, exist_ok=True)
    args = [sys.argv[0], f"-max_total_time={int(seconds)}", f"-seed={seed + 1}", f"-timeout={int(budget) + 1}",
            f"-artifact_prefix={os.path.join(crash_dir, 'atheris-')}", "-rss_limit_mb=4096", *extra, corpus_dir]
    atheris.Setup(args, one_input)
    atheris.Fuzz()  # does not return: libFuzzer ends the process
    return 0


# === Command line ===


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="fuzz.py", description="Fuzz rag_eval's readers and command line.")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to fuzz (default 60)")
    parser.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0); same seed and cases, same run")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET,
                        help=f"seconds one case may take (default {DEFAULT_BUDGET:g})")
    parser.add_argument("--crash-dir", default=os.path.join(HERE, "crashes"),
                        help="where findings' inputs are saved (default tools/fuzz/crashes); '' to save nothing")
    parser.add_argument("--no-minimize", action="store_true", help="save findings' inputs as found, unshrunk")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--verbose", action="store_true", help="progress every 1000 cases")
    parser.add_argument("--use-atheris", action="store_true", help="coverage-guided with atheris, if it imports")
    parser.add_argument("--atheris-child", metavar="STATS", help=argparse.SUPPRESS)
    args, extra = parser.parse_known_args(argv)
    if args.atheris_child:
        return atheris_child(args.atheris_child, args.seconds, args.seed, args.budget, args.crash_dir, extra)
    if args.use_atheris:
        try:
            import atheris  # noqa: F401
        except ImportError:
            print("fuzz.py: atheris does not import here; pip install atheris, or run without --use-atheris",
                  file=sys.stderr)
            return 2
        return atheris_main(args.seconds, args.seed, args.budget,
                            os.path.abspath(args.crash_dir or tempfile.mkdtemp(prefix="rag_eval_fuzz_crashes_")), extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    fuzzer = Fuzzer(seed=args.seed, budget=args.budget, crash_dir=args.crash_dir or None,
                    verbose=args.verbose, minimize=not args.no_minimize)
    try:
        summary = fuzzer.run(seconds=args.seconds, cases=args.cases)
    finally:
        fuzzer.close()
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(f"rag_eval fuzz: Python {summary['python']}, seed {summary['seed']}: {summary['cases']} cases in "
              f"{summary['seconds']} s ({summary['seconds'] / 60:.1f} min, "
              f"{summary['cases'] / max(summary['seconds'], 1e-9):.0f}/s), {summary['findings']} findings; "
              f"slowest case {summary['slowest_case']['seconds']} s (case {summary['slowest_case']['case']}, "
              f"budget {args.budget:g} s)")
        for target, outcomes in summary["outcomes"].items():
            kinds = {}
            for name, count in outcomes.items():
                kind = name.split(":")[0]
                kinds[kind] = kinds.get(kind, 0) + count
            print(f"  {target}: " + ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items())))
        for signature, finding in fuzzer.findings.items():
            print(f"FINDING {signature} (x{finding.count}, first at case {finding.case})\n  {finding.summary}\n"
                  f"  repro: {finding.repro()}")
        if fuzzer.findings and args.crash_dir:
            print(f"inputs saved under {args.crash_dir}/ (finding.json, detail.txt); "
                  "test_fuzz.TestSavedCrashes replays those under tools/fuzz/crashes/")
        for signature, (count, example) in sorted(fuzzer.notes.items()):
            print(f"note: {signature} (x{count}), e.g. {example}")
    if fuzzer.harness_errors:
        print(f"HARNESS ERRORS: {len(fuzzer.harness_errors)} cases failed inside fuzz.py itself "
              f"(first: case {fuzzer.harness_errors[0][0]}):\n{fuzzer.harness_errors[0][1]}")
    return 1 if fuzzer.findings or fuzzer.harness_errors else 0


if __name__ == "__main__":
    sys.exit(main())
