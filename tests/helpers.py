"""What the test modules share: calling ``rag_eval.main`` in-process, a
temporary folder per test, and starting a real child process where the process
itself is what is tested.  (Not named test_*.py: it holds no tests.)"""

import contextlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import warnings
from unittest import mock

import rag_eval

ERROR_PREFIX = "rag_eval: error: "
# What rag_eval reads from the environment: removed for every in-process run,
# so that a test means the same on a developer's machine and on a CI runner.
ENVIRONMENT = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "SOURCE_DATE_EPOCH")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
# A hang guard, not a speed test: a child still running after TIME_BOX seconds is killed, so that
# a process that never ends fails its test instead of blocking the suite.
TIME_BOX = 120


def run_main(argv, env=None, cwd=None):
    """Call ``rag_eval.main(argv)`` in-process; return (exit code, stdout, stderr).

    ``env`` is applied after ENVIRONMENT is cleared (a value of None removes a
    variable); the environment and the working folder are restored afterwards.
    An exception escaping ``main`` is returned in place of the exit code, so a
    crash is a test failure that names it.  ResourceWarnings are silenced, as
    they would land in the captured stderr.
    """
    out, err = io.StringIO(), io.StringIO()
    saved_cwd = os.getcwd()
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore", ResourceWarning)
        stack.enter_context(mock.patch.dict(os.environ))
        for name, value in {**dict.fromkeys(ENVIRONMENT), **(env or {})}.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        stack.callback(os.chdir, saved_cwd)
        if cwd:
            os.chdir(cwd)
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            code = rag_eval.main([str(arg) for arg in argv])
        except BaseException as exc:  # noqa: B902 - reported by the caller, not swallowed
            code = exc
    return code, out.getvalue(), err.getvalue()


def assert_error_line(test, err, file=None, line=None, quoted=(), names=(), prefix=ERROR_PREFIX):
    """The contract of an error, not its words: ``err`` (stderr, or ``str()`` of a RagEvalError with
    ``prefix=""``) is one line: the prefix, then ``FILE:LINE: `` (``FILE: `` without a line), holding
    each value of ``quoted`` as the error quotes it (its repr: ``'x'``) and each text of ``names`` (an
    option, a number) as it is.  Exit code and stdout are the caller's to check.  Returns the line.
    The exact words of error lines live in the golden file fixtures/bad/cases.json."""
    text = err[:-1] if err.endswith("\n") else err
    test.assertNotIn("\n", text, f"expected one line: {err!r}")
    test.assertTrue(text.startswith(prefix), f"expected {prefix!r} first: {err!r}")
    if file is not None:
        where = f"{file}:{line}: " if line is not None else f"{file}: "
        test.assertTrue(text[len(prefix):].startswith(where), f"expected {where!r} after {prefix!r}: {err!r}")
    for value in quoted:
        test.assertIn(repr(value), text)
    for name in names:
        test.assertIn(str(name), text)
    return text


def tagged_lines(err, tag):
    """The lines of ``err`` that start ``rag_eval: TAG: `` (``note``, ``warning``, ``error``)."""
    return [line for line in err.splitlines() if line.startswith(f"rag_eval: {tag}: ")]


class TempDirMixin:
    """A temporary folder per test, removed after it."""

    def setUp(self):
        super().setUp()
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.tmp = self._tmp.name

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, data):
        """Write text (UTF-8; lone surrogates kept), bytes, or anything else as JSON; return the path."""
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        elif not isinstance(data, bytes):
            data = json.dumps(data).encode("utf-8")
        path = self.path(name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def assert_error(self, argv, names=(), env=None):
        """Exit 2, nothing on stdout, one ``rag_eval: error:`` line naming ``names``; return the line."""
        code, out, err = run_main(argv, env)
        self.assertEqual(code, rag_eval.EXIT_ERROR, f"exit {code!r}; stderr: {err}")
        self.assertEqual(out, "")
        lines = err.splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith(ERROR_PREFIX), lines[0])
        self.assertNotIn("Traceback", err)
        for name in names:
            self.assertIn(name, lines[0])
        return lines[0]


# === Child processes ===
#
# Most tests call main in-process (run_main).  A real process is started only
# where the process is what is tested: exit codes on signals and on closed or
# full streams, a fresh interpreter's limits, the console encoding, standard
# input, a second process at once, the script itself and the Action's step.

# The children's compiled bytecode, in a temporary folder (never in the work
# tree; PYTHONDONTWRITEBYTECODE may be set, as CI sets it): only the first
# child compiles rag_eval.py (0.1-0.2 s of CPU), the others load it.  A file
# run as a script (``python rag_eval.py``) is compiled every time, by Python's
# design: children that need not be the script run ``python -m rag_eval``
# (with PYTHONPATH set to the repository, so from any working folder).
_BYTECODE = tempfile.TemporaryDirectory(prefix="rag_eval_tests_bytecode_")
# What a developer's shell or a CI runner may hold that would change a child's behaviour.
_NOT_INHERITED = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONDEVMODE", "PYTHONWARNINGS", "PYTHONHASHSEED",
                  "PYTHONDONTWRITEBYTECODE", "SOURCE_DATE_EPOCH")


def child_env(**changes):
    """The environment for a child process: this one's without ``GITHUB_*``,
    ``RAG_EVAL_*`` and _NOT_INHERITED, streams in UTF-8, bytecode in _BYTECODE;
    then ``changes`` (a value of None removes a variable)."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("GITHUB_", "RAG_EVAL_")) and key not in _NOT_INHERITED}
    env.update(PYTHONIOENCODING="utf-8", PYTHONPYCACHEPREFIX=_BYTECODE.name)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_process(argv, env=None, **options):
    """``python -m rag_eval ARGV`` in a child, from the repository root, stdin empty:
    (exit code, stdout, stderr), as text decoded from UTF-8 (``replace``).

    ``env`` holds changes to child_env(); ``options`` go to ``subprocess.run``
    (``input=``, ``cwd=`` ...)."""
    options.setdefault("stdout", subprocess.PIPE)
    options.setdefault("stderr", subprocess.PIPE)
    if "input" not in options:
        options.setdefault("stdin", subprocess.DEVNULL)
    options.setdefault("cwd", REPO)
    options.setdefault("timeout", TIME_BOX)
    done = subprocess.run([sys.executable, "-m", "rag_eval"] + [str(arg) for arg in argv],
                          env=child_env(**{"PYTHONPATH": REPO, **(env or {})}), **options)
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


def scores_by_metric(saved):
    """A saved baseline's ``per_query`` (one line per query: query -> {metric: value}) as the gate reads
    it, metric -> {query: value}."""
    found = {}
    for qid, values in saved["per_query"].items():
        for metric, value in values.items():
            found.setdefault(metric, {})[qid] = value
    return found


# === The fixtures ===
#
# Paths and readers of the shipped fixtures, and their copies in every format, shared by the modules.


QRELS = os.path.join(REPO, "fixtures", "qrels.json")


RUN = os.path.join(REPO, "fixtures", "run.json")


BASELINE = os.path.join(REPO, "baseline.json")


def load_fixtures():
    with open(QRELS, encoding="utf-8") as f:
        qrels = json.load(f)
    with open(RUN, encoding="utf-8") as f:
        run = json.load(f)
    return qrels, run


def assert_value_error(test, func, *args, **kwargs):
    """Like ``assertRaises(ValueError)``, but another exception is a failure that names it."""
    try:
        func(*args, **kwargs)
    except ValueError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - reported as the failure
        test.fail(f"raised {type(exc).__name__}: {exc} (expected a ValueError)")
    test.fail("no ValueError raised")


FIXTURE_QRELS_LINES = [
    ("q1", "refund-policy#2", 2), ("q1", "refund-policy#3", 1),
    ("q2", "sla-uptime#1", 2),
    ("q3", "sso-setup#4", 2), ("q3", "sso-setup#5", 2), ("q3", "okta-guide#1", 1),
    ("q4", "pricing#3", 0),
]


def fixture_qrels_variants():
    trec = "# TREC qrels: qid iter docid grade\n" + "".join(
        f"{q} 0 {d} {g}\n" + ("# a comment between lines\n" if i == 2 else "")
        for i, (q, d, g) in enumerate(FIXTURE_QRELS_LINES)
    )
    beir = "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in FIXTURE_QRELS_LINES)
    jsonl = "".join(
        json.dumps({"query_id": q, "doc_id": d, "relevance": g}) + "\n" for q, d, g in FIXTURE_QRELS_LINES
    )
    with open(QRELS, "rb") as f:
        as_json = f.read()
    return {
        "json (named .trec)": ("qrels.trec", as_json),
        "trec (named .json)": ("qrels.json", trec.encode()),
        "beir tsv (named .jsonl)": ("qrels.jsonl", beir.encode()),
        "jsonl (named .tsv)": ("qrels.tsv", jsonl.encode()),
    }


def fixture_run_variants():
    _, run = load_fixtures()
    scored = {qid: {doc: float(5 - i) for i, doc in enumerate(docs)} for qid, docs in run.items()}
    # TREC: lines in reverse order, a rank column that lies (it is ignored),
    # extra trailing fields (ignored).
    trec_lines = [
        f"{qid} Q0 {doc} {1 + i} {score} tag extra fields\n"
        for qid, docs in scored.items() for i, (doc, score) in enumerate(sorted(docs.items()))
    ]
    jsonl_lines = [
        json.dumps({"query_id": qid, "doc_id": doc, "score": score}) + "\n"
        for qid, docs in scored.items() for doc, score in docs.items()
    ]
    with open(RUN, "rb") as f:
        as_json = f.read()
    return {
        "json ranked (named .trec)": ("run.trec", as_json),
        "json scored (named .jsonl)": ("run.jsonl", json.dumps(scored, indent=1).encode()),
        "trec (named .json)": ("run.json", "".join(reversed(trec_lines)).encode()),
        "jsonl (named .txt)": ("run.txt", "".join(jsonl_lines).encode()),
    }


def three_runs(seed, queries=30):
    """qrels and three runs of different quality, so that the best run differs between metrics."""
    rng = random.Random(seed)
    qrels = {f"q{i}": {f"d{j}": rng.choice([0, 1, 2]) for j in rng.sample(range(40), 6)} for i in range(queries)}
    for grades in qrels.values():
        grades[next(iter(grades))] = 2  # every query scored
    runs = {}
    for name, quality in (("ref", 0.4), ("x", 0.5), ("y", 0.45)):
        runs[name] = {qid: sorted(range(40), key=lambda j: -(rng.random() + quality * (f"d{j}" in grades)))[:10]
                      for qid, grades in qrels.items()}
        runs[name] = {qid: [f"d{j}" for j in ranking] for qid, ranking in runs[name].items()}
    return qrels, runs
