"""Hostile and malformed inputs: rag_eval must refuse them cleanly, or accept them correctly.

The corpus lives in ``fixtures/bad/``; ``fixtures/bad/cases.json`` lists, for
each case, which input the file is (qrels, run, baseline, slices; ``cli`` for a
bad option; ``accepted`` for inputs that must score), what it is paired with,
the expected exit code and the expected stderr line (exact, or a regex).  Every
case runs through ``rag_eval.main`` in-process; those marked ``subprocess``
also run as a real process (``python -m rag_eval ...`` from the repository
root).  For an error the contract is the tool's: exit 2, nothing on stdout,
exactly one stderr line naming the file (and the line, for line-based
formats), no traceback, no input modified, no file written.

Inputs too large to commit are generated at test time in a temporary folder,
streaming, so the test itself stays small: gzip bombs that inflate to 3 GiB,
a single line of 300 MB, /dev/zero, hundreds of thousands of queries, JSON
nested 100,000 deep.  Each runs in a child process whose peak RSS is measured
(``resource.getrusage(RUSAGE_CHILDREN)`` in a wrapper process) and must stay
under ``MEMORY_BUDGET_MB``.

Cases with a ``fixed_bug`` field guard a defect found while writing this file
(all fixed): the field says what the bug did, and a failure of the case quotes
it.

Environment:
  RAG_EVAL_FULL=1   also run the generated inputs that take seconds each (CI does)
  RAG_EVAL_HUGE=1   generate 2,000,000 queries instead of 200,000

Run with ``python3 -m unittest tests.test_bad_inputs`` from the repository root;
standard library only.
"""

import contextlib
import gzip
import hashlib
import io
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
import unittest
import zlib
from unittest import mock

import rag_eval
from tests.helpers import REPO, child_env, run_process


try:
    import resource
except ImportError:  # Windows
    resource = None


BAD = os.path.join(REPO, "fixtures", "bad")


MANIFEST = os.path.join(BAD, "cases.json")


DEFAULTS = {"qrels": "fixtures/qrels.json", "run": "fixtures/run.json"}


ERROR = "rag_eval: error: "


QUICK = os.environ.get("RAG_EVAL_FULL") != "1"  # the slow generated inputs run only with RAG_EVAL_FULL=1


HUGE = os.environ.get("RAG_EVAL_HUGE") == "1"


MEMORY_BUDGET_MB = 500


# A hang guard, not a speed test: a child still running after TIME_BOX seconds is killed, so a reader
# that never stops (on /dev/zero, say) fails the test instead of blocking the suite.  The slowest child
# here takes about 1 s, so only a runaway can reach it; nothing else in these tests looks at a clock.
TIME_BOX = 120


CORPUS_BUDGET = 200 * 1024  # bytes on disk for fixtures/bad/


GIB = 1 << 30


def load_cases():
    with open(MANIFEST, encoding="utf-8") as handle:
        return json.load(handle)["cases"]


CASES = load_cases()


def case_argv(case):
    """The command line of a case, paths relative to the repository root."""
    if "argv" in case:
        return list(case["argv"])
    inputs = dict(DEFAULTS, **case.get("with", {}))
    role, path = case["role"], case.get("file")
    if role == "qrels":
        argv = [path, inputs["run"]]
    elif role == "run":
        argv = [inputs["qrels"], path]
    else:
        argv = [inputs["qrels"], inputs["run"]]
        if role in ("baseline", "slices"):
            argv += ["--" + role, path]
    return argv + case.get("args", [])


def expected_matcher(case):
    """A function line -> bool, and a description of what was expected."""
    path = case.get("file", "")
    if "stderr" in case:
        line = case["stderr"].replace("{file}", path)
        return (lambda got: got == line), repr(line)
    pattern = case["stderr_re"].replace("{file}", re.escape(path))
    return (lambda got: re.search(pattern, got) is not None), f"/{pattern}/"


@contextlib.contextmanager
def in_repo():
    """Run with the repository root as the working directory (the manifest's paths are relative)."""
    old = os.getcwd()
    os.chdir(REPO)
    try:
        yield
    finally:
        os.chdir(old)


def run_in_repo(argv):
    """rag_eval.main in-process: (exit code, stdout, stderr, traceback text or None)."""
    out, err = io.StringIO(), io.StringIO()
    env = {key: value for key, value in os.environ.items() if not key.startswith("GITHUB_")}
    code, escaped = None, None
    with in_repo(), mock.patch.dict(os.environ, env, clear=True), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = rag_eval.main(argv)
        except BaseException:  # noqa: B902 - a traceback is exactly what we look for
            escaped = traceback.format_exc()
    return code, out.getvalue(), err.getvalue(), escaped


# The wrapper runs rag_eval in its own child, so that RUSAGE_CHILDREN measures that run alone.
_WRAPPER = r"""
import json, resource, subprocess, sys, time
timeout = float(sys.argv[1])
start = time.monotonic()
try:
    proc = subprocess.run(sys.argv[2:], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    code, out, err = proc.returncode, proc.stdout, proc.stderr
except subprocess.TimeoutExpired as exc:
    code, out, err = "timeout", exc.stdout or b"", exc.stderr or b""
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
peak_mb = peak / (1 << 20) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere
print(json.dumps({"code": code, "peak_mb": peak_mb, "seconds": time.monotonic() - start,
                  "stdout": out[:100000].decode("utf-8", "replace"), "stderr": err[-20000:].decode("utf-8", "replace")}))
"""


def measured(argv, timeout=TIME_BOX):
    """Run rag_eval in a child; return its exit code, peak RSS (MB), wall time, stdout and stderr."""
    proc = subprocess.run([sys.executable, "-c", _WRAPPER, str(timeout), sys.executable, "-m", "rag_eval"] + list(argv),
                          cwd=REPO, env=child_env(PYTHONPATH=REPO), capture_output=True, timeout=timeout + 30)
    if proc.returncode != 0:
        raise AssertionError(f"wrapper failed: {proc.stderr.decode('utf-8', 'replace')}")
    return json.loads(proc.stdout)


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def snapshot(argv):
    """Hashes of the existing files named on a command line, and listings of the folders tests write near."""
    files = {}
    for arg in argv:
        path = os.path.join(REPO, arg)
        if arg != "-" and os.path.isfile(path):
            files[arg] = sha256_of(path)
    folders = {folder: sorted(os.listdir(folder)) for folder in (REPO, os.path.join(REPO, "fixtures"), BAD)}
    return files, folders


def write_gzip_bomb(path, unit, total, prefix=b"", suffix=b"", block_bytes=16 << 20):
    """A valid gzip file of ``prefix + unit * n + suffix`` (about ``total`` bytes inflated), written
    streaming: one block of ``block_bytes`` (16 MiB) is deflated once, ended by a full flush so that its bytes can be
    repeated verbatim; the CRC of the repetitions is computed without reading them (``crc32_of_repeats``).
    3 GiB of zeros take 3 MB on disk."""
    block = unit * max(1, block_bytes // len(unit))
    repeats = max(1, total // len(block))
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    with open(path, "wb") as out:
        out.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")  # magic, deflate, no flags, mtime 0, max compression, unknown OS
        out.write(deflate.compress(prefix) + deflate.flush(zlib.Z_FULL_FLUSH))
        body = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
        for _ in range(repeats):
            out.write(body)
        out.write(deflate.compress(suffix) + deflate.flush(zlib.Z_FINISH))
        crc = zlib.crc32(suffix, crc32_of_repeats(block, repeats, zlib.crc32(prefix)))
        size = len(prefix) + len(block) * repeats + len(suffix)
        out.write(struct.pack("<II", crc, size & 0xFFFFFFFF))
    return size


def _gf2_times(columns, vector):
    """The 32 x 32 bit matrix ``columns`` (column i: the image of bit i) times ``vector``, over GF(2)."""
    result = bit = 0
    while vector:
        if vector & 1:
            result ^= columns[bit]
        vector >>= 1
        bit += 1
    return result


def crc32_of_repeats(block, repeats, crc=0):
    """``zlib.crc32(block * repeats, crc)`` in time that does not grow with ``repeats`` times the block.

    CRC-32 is linear over GF(2): feeding n zero bytes moves the register by a
    32 x 32 bit matrix Z**n (Z for one zero byte), and the CRC of A + B is
    Z**len(B) applied to crc(A), xor crc(B).  Z**len(block) is built by
    squaring; then each repetition costs one matrix product, not 16 MiB of
    reading (which was most of a bomb test's time).
    """
    mask = 0xFFFFFFFF
    # zlib.crc32(b"\0", c) is the complement of Z applied to the complement of c
    power = [~zlib.crc32(b"\0", ~(1 << bit) & mask) & mask for bit in range(32)]  # Z
    shift = [1 << bit for bit in range(32)]  # the identity; becomes Z**len(block)
    n = len(block)
    while n:
        if n & 1:
            shift = [_gf2_times(power, column) for column in shift]
        power = [_gf2_times(power, column) for column in power]
        n >>= 1
    block_crc = zlib.crc32(block)
    for _ in range(repeats):
        crc = _gf2_times(shift, crc) ^ block_crc
    return crc


class CorpusCase(unittest.TestCase):
    """Every case of fixtures/bad/cases.json, run in-process (and, where marked, as a process)."""

    maxDiff = None

    def describe(self, case):
        note = f"case {case['id']}: {case.get('why', '')}"
        if "fixed_bug" in case:
            note += f"\nthis case guards a fixed bug, which gave {case['fixed_bug']}"
        return note

    def run_case(self, case, argv):
        """Run main on ``argv``: (stdout, stderr, note), once no exception escaped, no input
        changed and no file was written, and the exit code is the case's."""
        before = snapshot(argv)
        code, out, err, escaped = run_in_repo(argv)
        note = self.describe(case)
        if escaped is not None:
            self.fail(f"{note}\nan exception escaped main():\n{escaped}")
        self.assertEqual(snapshot(argv), before, f"{note}\nan input was modified or a file was written")
        self.assertEqual(code, case["exit"], f"{note}\nstderr: {err!r}")
        return out, err, note

    def check_error(self, case):
        argv = case_argv(case)
        out, err, note = self.run_case(case, argv)
        self.assertEqual(out, "", f"{note}\nnothing may be printed on stdout for an error")
        self.assertTrue(err.endswith("\n") and err.count("\n") == 1, f"{note}\nexpected one stderr line, got {err!r}")
        line = err[:-1]
        self.assertTrue(line.startswith(ERROR), f"{note}\n{line!r}")
        matches, wanted = expected_matcher(case)
        self.assertTrue(matches(line), f"{note}\nexpected {wanted}\n     got {line!r}")
        if case.get("subprocess"):
            code, out, err = run_process(argv)
            self.assertNotIn("Traceback", err, f"{note}\n{err}")
            self.assertEqual((code, out), (case["exit"], ""), f"{note}\nstderr: {err!r}")
            self.assertEqual(err.count("\n"), 1, f"{note}\n{err!r}")
            self.assertEqual(err[:-1], line, note)

    def check_accepted(self, case):
        out, err, note = self.run_case(case, case_argv(case) + ["--digits", "12", "--per-query"])
        for line in err.splitlines():
            self.assertTrue(line.startswith(("rag_eval: note:", "rag_eval: warning:")), f"{note}\n{line!r}")
        # no CI runner's command (##[, ##vso[, ##teamcity[) nor raw control character, whatever the ids hold
        self.assertNotRegex(out + err, r"##(vso|teamcity)?\[|[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e]", note)
        report = json.loads(out)
        self.assertEqual(report["queries"], case["queries"], note)
        self.assertEqual(report["unscored"], case["unscored"], note)
        self.assertEqual(sorted(report["mean"]), sorted(case["mean"]), note)
        for metric, value in case["mean"].items():
            self.assertAlmostEqual(report["mean"][metric], value, delta=1e-6, msg=f"{note}\n{metric}")
        for qid, values in case.get("per_query", {}).items():
            self.assertIn(qid, report["per_query"], f"{note}\nquery {qid!r} missing: ids must stay distinct")
            for metric, value in values.items():
                self.assertAlmostEqual(report["per_query"][qid][metric], value, delta=1e-9, msg=f"{note}\n{qid} {metric}")
        if "per_query" in case:
            self.assertEqual(sorted(report["per_query"]), sorted(case["per_query"]), note)


def _add_case_tests():
    seen = set()
    for case in CASES:
        name = "test_" + re.sub(r"\W", "_", case["id"])
        assert name not in seen, f"duplicate case id {case['id']}"
        seen.add(name)
        check = CorpusCase.check_accepted if case["role"] == "accepted" else CorpusCase.check_error

        def test(self, case=case, check=check):
            check(self, case)

        test.__name__ = name
        test.__doc__ = f"{case['role']}: {case['id']}"
        setattr(CorpusCase, name, test)


_add_case_tests()


class CorpusHygiene(unittest.TestCase):
    """The corpus is what the issue asks for, and stays small enough to commit."""

    def test_at_least_50_error_cases_with_a_file(self):
        with_file = [case for case in CASES if case["role"] in ("qrels", "run", "baseline", "slices")]
        self.assertGreaterEqual(len(with_file), 50)
        for case in CASES:
            self.assertEqual(case["exit"], 0 if case["role"] == "accepted" else 2, case["id"])
            self.assertTrue("mean" in case if case["role"] == "accepted" else ("stderr" in case) != ("stderr_re" in case),
                            case["id"])

    def test_every_file_is_used_and_every_case_file_exists(self):
        named = set()
        for case in CASES:
            argv = case_argv(case)
            for arg in argv:
                if arg.startswith("fixtures/bad/"):
                    named.add(os.path.relpath(os.path.join(REPO, arg), BAD))
        named |= {"cases.json", "make_corpus.py", "cr_only_qrels.trec", "run_trec_cr_only.trec"}  # the last two: CarriageReturnOnly
        on_disk = set(os.listdir(BAD))
        self.assertEqual(sorted(on_disk - named), [], "files in fixtures/bad/ that no case uses")
        missing = sorted(name for name in named if name != "." and not name.startswith(("no_such", "no\n"))
                         and name not in on_disk)
        self.assertEqual(missing, [], "cases naming files that do not exist")

    def test_folder_is_small(self):
        size = sum(os.path.getsize(os.path.join(BAD, name)) for name in os.listdir(BAD))
        self.assertLess(size, CORPUS_BUDGET)

    def test_manifest_regexes_compile(self):
        patterns = [case["stderr_re"].replace("{file}", re.escape(case.get("file", ""))) for case in CASES
                    if "stderr_re" in case]
        self.assertGreater(len(patterns), 10, "the manifest lost its regex cases")
        for pattern in patterns:
            with self.subTest(pattern=pattern):
                re.compile(pattern)  # raises re.error on a bad one


class CarriageReturnOnly(unittest.TestCase):
    """Classic Mac line ends: three TREC lines separated by CR alone.

    Either they are three lines (recall@5 = 1.0), or the file is refused with a
    located error (what rag_eval does now).  Guards a fixed bug: the lines were
    read as one, "fields after the sixth" ignored, so one document of three
    was scored and the run exited 0, a wrong number that passed.
    """

    def test_cr_only_trec_run_is_not_silently_truncated(self):
        code, out, err, escaped = run_in_repo(["fixtures/bad/cr_only_qrels.trec", "fixtures/bad/run_trec_cr_only.trec",
                                            "--digits", "12"])
        if escaped is not None:
            self.fail(f"an exception escaped main():\n{escaped}")
        if code == 0:
            mean = json.loads(out)["mean"]
            # refund-policy#3 (grade 1), refund-policy#2 (grade 2), shipping#1 (unjudged)
            self.assertEqual(mean["recall@5"], 1.0,
                             "the fixed bug is back: CR-only lines read as one line, fields after the sixth "
                             f"ignored, so only the first document counts (exit 0): {mean}")
            self.assertAlmostEqual(mean["ndcg@5"], (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)), places=9)
        else:
            self.assertEqual(code, 2, err)
            self.assertEqual(out, "")
            self.assertRegex(err, r"^rag_eval: error: fixtures/bad/run_trec_cr_only\.trec:1: .+\n\Z")


class DeepNesting(unittest.TestCase):
    """JSON nested 100,000 deep in every JSON input: a clear error, no RecursionError, no crash."""

    DEPTH = 100000

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="rag_eval_deep_")
        cls.lists = os.path.join(cls.tmp.name, "deep_lists.json")
        cls.objects = os.path.join(cls.tmp.name, "deep_objects.json")
        cls.jsonl = os.path.join(cls.tmp.name, "deep_row.jsonl")
        with open(cls.lists, "w") as out:
            out.write("[" * cls.DEPTH + "]" * cls.DEPTH)
        with open(cls.objects, "w") as out:
            out.write('{"a": ' * cls.DEPTH + "1" + "}" * cls.DEPTH)
        with open(cls.jsonl, "w") as out:  # first line a valid row, so the file is detected as JSONL
            out.write('{"query_id": "q1", "slices": ["billing"]}\n')
            out.write('{"query_id": "q2", "slices": ' + "[" * cls.DEPTH + "]" * cls.DEPTH + "}\n")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, argv, path, pattern):
        code, out, err, escaped = run_in_repo(argv)
        if escaped is not None:
            self.fail(f"an exception escaped main():\n{escaped}")
        self.assertEqual((code, out), (2, ""), err)
        self.assertRegex(err, "^" + re.escape(ERROR + path) + pattern + r"\n\Z")

    def test_baseline(self):
        for path in (self.lists, self.objects):
            with self.subTest(path=path):
                self.check(["fixtures/qrels.json", "fixtures/run.json", "--baseline", path], path,
                           ": JSON nested too deeply to be a baseline")

    def test_slices(self):
        for path in (self.lists, self.objects):
            with self.subTest(path=path):
                self.check(["fixtures/qrels.json", "fixtures/run.json", "--slices", path], path,
                           ": JSON nested too deeply.*")
        self.check(["fixtures/qrels.json", "fixtures/run.json", "--slices", self.jsonl], self.jsonl,
                   ":2: JSON nested too deeply")

    def test_qrels_and_run_in_a_fresh_process(self):
        """A fresh interpreter has its full recursion budget; the C parser must still stop cleanly."""
        for argv, path in (([self.objects, "fixtures/run.json"], self.objects),
                           (["fixtures/qrels.json", self.lists], self.lists)):
            with self.subTest(path=path):
                code, out, err = run_process(argv)
                self.assertNotIn("Traceback", err)
                self.assertEqual((code, out), (2, ""), err)
                self.assertRegex(err, "^" + re.escape(ERROR + path) + r": [^\n]* (qrels|run)\n\Z")


class BombWriter(unittest.TestCase):
    """The generator of the gzip bombs below writes valid gzip: the right bytes, CRC and size."""

    def test_crc32_of_repeats_is_zlibs(self):
        rng = random.Random(20240611)
        for _ in range(200):
            block = bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
            repeats, start = rng.randint(0, 30), rng.randrange(1 << 32)
            with self.subTest(block=block, repeats=repeats, start=start):
                self.assertEqual(crc32_of_repeats(block, repeats, start), zlib.crc32(block * repeats, start))

    def test_a_small_bomb_inflates_to_what_it_says(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "bomb.gz")
            size = write_gzip_bomb(path, b"ab\n", 40 << 10, prefix=b"head\n", suffix=b"tail", block_bytes=16 << 10)
            with open(path, "rb") as handle:
                data = gzip.decompress(handle.read())  # checks the CRC and the size in the trailer
        block = b"ab\n" * ((16 << 10) // 3)
        self.assertEqual(size, len(data))
        self.assertEqual(data, b"head\n" + block * 2 + b"tail")


@unittest.skipIf(resource is None, "needs the resource module (POSIX) to measure peak memory")
class HugeInputs(unittest.TestCase):
    """Inputs far larger than memory should allow: each refused with a clear line, or streamed,
    within MEMORY_BUDGET_MB of peak RSS (and never a hang: see TIME_BOX)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="rag_eval_huge_")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def assert_refused(self, result, pattern, budget_mb=MEMORY_BUDGET_MB):
        note = f"peak {result['peak_mb']:.0f} MB, {result['seconds']:.1f} s, stderr {result['stderr'][-500:]!r}"
        self.assertNotEqual(result["code"], "timeout", note)
        self.assertNotIn("Traceback", result["stderr"], note)
        self.assertEqual((result["code"], result["stdout"]), (2, ""), note)
        self.assertEqual(result["stderr"].count("\n"), 1, note)
        self.assertRegex(result["stderr"], "^" + pattern + r"\n\Z", note)
        self.assertLess(result["peak_mb"], budget_mb, note)

    def test_gzip_bomb_of_zeros_as_run(self):
        """3 GiB of NUL bytes (3 MB on disk): no newline, so refused as an over-long line."""
        bomb = self.path("zeros.trec.gz")
        write_gzip_bomb(bomb, b"\0", 3 * GIB)
        self.assertLess(os.path.getsize(bomb), 4 << 20)
        result = measured(["fixtures/qrels.json", bomb])
        self.assert_refused(result, re.escape(ERROR + bomb) + r":1: line longer than \d+ MiB")

    def test_gzip_bomb_of_text_as_qrels(self):
        bomb = self.path("letters.trec.gz")
        write_gzip_bomb(bomb, b"a", 3 * GIB, prefix=b"q1 0 refund-policy#2 2\n")
        result = measured([bomb, "fixtures/run.json"])
        self.assert_refused(result, re.escape(ERROR + bomb) + r":2: line longer than \d+ MiB")

    @unittest.skipIf(QUICK, "several seconds: set RAG_EVAL_FULL=1")
    def test_gzip_bomb_of_blank_lines(self):
        """3 GiB of blank lines: nothing to read; refused (or streamed) without running out of time or memory."""
        bomb = self.path("blank.trec.gz")
        write_gzip_bomb(bomb, b"\n", 3 * GIB)
        result = measured(["fixtures/qrels.json", bomb])
        self.assert_refused(result, re.escape(ERROR + bomb) + r": .*(empty|no document|nothing).*")

    @unittest.skipIf(QUICK, "several seconds: set RAG_EVAL_FULL=1")
    def test_gzip_bomb_json_run(self):
        """A JSON run inflating to 3 GiB: JSON is parsed whole, so it is refused once it passes
        rag_eval._MAX_JSON (1 GiB, so that large JSON runs still work), in memory bounded by that cap:
        the README documents the bound.  Baselines and slices have a far smaller cap (see below).
        """
        bomb = self.path("run.json.gz")
        write_gzip_bomb(bomb, b'"refund-policy#2", ', 3 * GIB, prefix=b'{"q1": [')
        result = measured(["fixtures/qrels.json", bomb])
        cap_mb = rag_eval._MAX_JSON >> 20
        self.assert_refused(result, re.escape(ERROR + bomb) + r": JSON larger than .*", budget_mb=cap_mb + 400)

    @unittest.skipIf(QUICK, "several seconds: set RAG_EVAL_FULL=1")
    def test_gzip_bomb_json_baseline(self):
        """A baseline is a few hundred bytes; one that inflates to 3 GiB must not cost a gigabyte
        (baselines and slices stop at rag_eval._MAX_SMALL_JSON)."""
        bomb = self.path("baseline.json.gz")
        write_gzip_bomb(bomb, b" ", 3 * GIB, prefix=b'{"recall@5": 0.5,', suffix=b"}")
        result = measured(["fixtures/qrels.json", "fixtures/run.json", "--baseline", bomb])
        self.assert_refused(result, re.escape(ERROR + bomb) + r": .*")

    @unittest.skipIf(QUICK, "several seconds: set RAG_EVAL_FULL=1")
    def test_gzip_bomb_of_valid_trec_lines_streams(self):
        """256 MiB of real TREC lines (8 million, one query, the same 3 documents over and over):
        streamed in bounded memory, scored right."""
        bomb = self.path("lines.trec.gz")
        unit = b"q1 Q0 refund-policy#2 1 2.0 t\nq1 Q0 shipping#1 2 3.0 t\nq1 Q0 refund-policy#3 3 1.0 t\n"
        write_gzip_bomb(bomb, unit, 256 << 20)
        qrels = self.path("q1.trec")
        with open(qrels, "w") as out:
            out.write("q1 0 refund-policy#2 2\nq1 0 refund-policy#3 1\n")
        result = measured([qrels, bomb, "--digits", "12"])
        note = f"peak {result['peak_mb']:.0f} MB, {result['seconds']:.1f} s, stderr {result['stderr'][-500:]!r}"
        self.assertEqual(result["code"], 0, note)
        mean = json.loads(result["stdout"])["mean"]
        # ranking by score: shipping#1 (unjudged), refund-policy#2 (2), refund-policy#3 (1)
        self.assertEqual(mean["mrr@5"], 0.5, note)
        self.assertEqual(mean["recall@5"], 1.0, note)
        self.assertLess(result["peak_mb"], MEMORY_BUDGET_MB, note)

    @unittest.skipIf(QUICK, "writes 300 MB: set RAG_EVAL_FULL=1 (test_rag_eval.TestLineBlocks checks the same "
                            "with a small MAX_LINE, in-process)")
    def test_single_line_of_300_mb(self):
        """Two good lines, then 300 MB without a newline: refused at line 3, reading at most the line cap.

        Also guards a fixed bug: the error named line 1, the first line of the pending block, not the
        line that is too long.
        """
        path = self.path("long_line.trec")
        block = b"x" * (1 << 20)
        with open(path, "wb") as out:
            out.write(b"q1 Q0 refund-policy#2 1 2.0 t\nq1 Q0 shipping#1 2 1.0 t\n")
            for _ in range(300):
                out.write(block)
        result = measured(["fixtures/qrels.json", path])
        self.assert_refused(result, re.escape(ERROR + path) + r":3: line longer than \d+ MiB")

    @unittest.skipIf(QUICK, "writes 300 MB: set RAG_EVAL_FULL=1 (test_rag_eval.TestLineBlocks checks the same "
                            "with a small MAX_LINE, in-process)")
    def test_single_jsonl_line_of_300_mb(self):
        path = self.path("long_line.jsonl")
        block = b"x" * (1 << 20)
        with open(path, "wb") as out:
            out.write(b'{"query_id": "q1", "doc_id": "refund-policy#2", "relevance": 2}\n{"query_id": "q1", "doc_id": "')
            for _ in range(300):
                out.write(block)
            out.write(b'", "relevance": 1}\n')
        result = measured([path, "fixtures/run.json"])
        self.assert_refused(result, re.escape(ERROR + path) + r":2: line longer than \d+ MiB")

    def test_many_comment_lines_in_a_trec_run_take_linear_time(self):
        """60,000 distinct comment lines (1 MB) before a good run: read, and no line is searched for.

        Guards a fixed bug: _trec_run evaluated ``first + lines.index(line)`` for every comment or
        blank line, a scan from the start of the read block, so such a file took quadratic time
        (40,000 lines took 6 s; a block of 300,000 took minutes).  The number of a line is now looked
        up only for the error it is reported in.  Counted, not timed: every list the reader splits a
        block into counts the searches made in it, and a good file must need none.
        """
        path = self.path("comments.trec")
        with open(path, "w") as out:
            out.write("".join(f"# retrieved by model v{i}\n" for i in range(60000)))
            with open(os.path.join(BAD, "good_run.trec")) as good:
                out.write(good.read())
        searches = []

        class Lines(list):
            def index(self, *args):
                searches.append(args)
                return super().index(*args)

        split = rag_eval._lines_of
        with mock.patch.object(rag_eval, "_lines_of", lambda data, kind: Lines(split(data, kind))):
            run = rag_eval.read_run(path)
        self.assertEqual(run, rag_eval.read_run(os.path.join(BAD, "good_run.trec")))
        self.assertEqual(len(searches), 0, "the reader searched its block for lines it did not report")
        code, out, err, escaped = run_in_repo(["fixtures/qrels.json", path])
        self.assertIsNone(escaped, escaped)
        self.assertEqual(code, 0, err)

    @unittest.skipIf(QUICK, "writes and reads some 500 MB: set RAG_EVAL_FULL=1")
    def test_side_inputs_far_larger_than_the_labels_name(self):
        """A corpus of unlabelled texts with astral characters (4 bytes a character once kept: 367 KB of gzip
        peaked at 1.75 GB) and a chunk map of millions of rows the run never ranks (20 MB of gzip: 908 MB):
        only what the labels and the run name is kept."""
        spans = self.path("spans.jsonl")
        with open(spans, "w") as out:
            out.write('{"query_id": "q1", "doc_id": "d0", "start": 0, "end": 4, "grade": 1}\n')
        corpus = self.path("corpus.jsonl.gz")
        text = json.dumps("\U0001F600" * 10000, ensure_ascii=False)
        with gzip.open(corpus, "wt", encoding="utf-8", compresslevel=1) as out:
            out.writelines(f'{{"doc_id": "d{i}", "text": {text}}}\n' for i in range(15000))
        chunks, run = self.path("chunks.jsonl.gz"), self.path("run.jsonl")
        with gzip.open(chunks, "wt", compresslevel=1) as out:
            out.writelines(f'{{"chunk_id": "c{i}", "doc_id": "d{i % 1000}", "start": 0, "end": 4}}\n'
                           for i in range(3_000_000))
        with open(run, "w") as out:
            out.write('{"query_id": "q1", "doc_id": "c0", "score": 1}\n')
        for argv in ([spans, "--corpus", corpus, "--check-labels"], [spans, run, "--chunks", chunks]):
            with self.subTest(argv=argv[-2:]):
                result = measured(argv)
                note = f"peak {result['peak_mb']:.0f} MB, {result['seconds']:.1f} s, stderr {result['stderr'][-500:]!r}"
                self.assertIn(result["code"], (0, 3), note)  # 3: --check-labels found a span without quoted text
                self.assertLess(result["peak_mb"], MEMORY_BUDGET_MB, note)

    @unittest.skipIf(QUICK, "writes and reads some 100 MB: set RAG_EVAL_FULL=1")
    def test_json_run_on_a_pipe_costs_what_a_file_costs(self):
        """A JSON run read once (standard input, a FIFO) was parsed whole: 1.74 GB for a run that takes 94 MB
        from a file.  Here 1,500 queries x 5,000 scored documents through a FIFO."""
        run, fifo, qrels = self.path("big.json"), self.path("run.fifo"), self.path("q.trec")
        with open(run, "w") as out:
            out.write("{" + ",\n".join(f'"q{q}": {{' + ", ".join(f'"d{d}": {d}' for d in range(5000)) + "}"
                                        for q in range(1500)) + "}\n")
        with open(qrels, "w") as out:
            out.writelines(f"q{q} 0 d4999 1\n" for q in range(1500))
        os.mkfifo(fifo)
        def feed():
            with open(run, "rb") as source, open(fifo, "wb") as sink:
                shutil.copyfileobj(source, sink)

        feeder = threading.Thread(target=feed)
        feeder.start()
        result = measured([qrels, fifo])
        feeder.join()
        note = f"peak {result['peak_mb']:.0f} MB, {result['seconds']:.1f} s, stderr {result['stderr'][-500:]!r}"
        self.assertEqual(result["code"], 0, note)
        self.assertEqual(json.loads(result["stdout"])["mean"]["mrr@5"], 1.0, note)  # d4999 scores highest
        self.assertLess(result["peak_mb"], MEMORY_BUDGET_MB, note)

    @unittest.skipUnless(os.path.exists("/dev/zero"), "no /dev/zero")
    def test_dev_zero_as_run(self):
        """An endless stream: refused, never a hang."""
        result = measured(["fixtures/qrels.json", "/dev/zero"])
        self.assert_refused(result, re.escape(ERROR + "/dev/zero") + r":1: line longer than \d+ MiB")

    def test_many_queries(self):
        """Hundreds of thousands of queries (2 million with RAG_EVAL_HUGE=1), TREC qrels and run:
        every query scored, means exact.  Even queries find their relevant document at rank 1, odd
        ones at rank 2 (an unjudged document first)."""
        count = 2_000_000 if HUGE else (10_000 if QUICK else 200_000)
        qrels, run = self.path("many.qrels"), self.path("many.run")
        with open(qrels, "w") as out:
            for start in range(0, count, 10000):
                out.write("".join(f"q{i} 0 d{i} 1\nq{i} 0 n{i} 0\n" for i in range(start, min(count, start + 10000))))
        with open(run, "w") as out:
            for start in range(0, count, 10000):
                out.write("".join(f"q{i} Q0 x{i} 1 2.0 t\nq{i} Q0 d{i} 2 1.0 t\n" if i % 2 else f"q{i} Q0 d{i} 1 2.0 t\n"
                                  for i in range(start, min(count, start + 10000))))
        result = measured([qrels, run, "--digits", "12"])
        note = f"{count} queries: peak {result['peak_mb']:.0f} MB, {result['seconds']:.1f} s, stderr {result['stderr'][-500:]!r}"
        self.assertEqual(result["code"], 0, note)
        report = json.loads(result["stdout"])
        self.assertEqual(report["queries"], count, note)
        self.assertEqual(report["mean"]["recall@5"], 1.0, note)
        self.assertAlmostEqual(report["mean"]["mrr@5"], 0.75, places=9, msg=note)
        self.assertAlmostEqual(report["mean"]["ndcg@5"], (1 + 1 / math.log2(3)) / 2, places=9, msg=note)
        if not HUGE:
            self.assertLess(result["peak_mb"], MEMORY_BUDGET_MB, note)


if __name__ == "__main__":
    unittest.main()
