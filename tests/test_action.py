"""The GitHub Action (action.yml, action.py) and what CI systems read from it.

* action.yml is read with a small parser (no PyYAML: the standard library only),
  good enough for our own file; its one step's script runs under ``bash`` with
  the environment a runner gives it (GITHUB_OUTPUT, GITHUB_STEP_SUMMARY,
  GITHUB_ACTION_PATH, GITHUB_ACTIONS=true, the inputs mapped by its ``env:``),
  on every bash found (``bash`` on PATH; ``/bin/bash`` too when it differs, as
  macOS's bash 3.2 does).
* A re-implementation of the runner's workflow-command parsing (actions/runner,
  src/Runner.Common/ActionCommand.cs, TryParseV2 then TryParse) reads every
  output path on hostile ids: only rag_eval's own annotations may parse.
* The pull-request comment talks to a fake API on 127.0.0.1.
* --metrics-file is parsed back by a strict OpenMetrics reader.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Tuple
from xml.etree import ElementTree

import rag_eval
from tests.helpers import BASELINE, ERROR_PREFIX, REPO, assert_error_line, child_env, run_main


FIXTURES = os.path.join(REPO, "fixtures")


QRELS = os.path.join(FIXTURES, "qrels.json")


RUN = os.path.join(FIXTURES, "run.json")


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1].replace("''", "'") if text[0] == "'" else json.loads(text)
    return text


def read_yaml(text: str):
    """Mappings, lists of mappings, plain and quoted scalars, ``|`` and ``>-`` blocks, ``#`` comment lines."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]

    def indent(line):
        return len(line) - len(line.lstrip(" "))

    def block(i, base):
        """The node whose lines start at lines[i] with indentation ``base``; (node, next index)."""
        if lines[i].lstrip().startswith("- "):
            items = []
            while i < len(lines) and indent(lines[i]) == base and lines[i].lstrip().startswith("- "):
                # "- key: value" opens a mapping two columns further in
                lines[i] = " " * (base + 2) + lines[i].lstrip()[2:]
                item, i = block(i, base + 2)
                items.append(item)
            return items, i
        mapping = {}
        while i < len(lines) and indent(lines[i]) == base:
            key, _, rest = lines[i].strip().partition(":")
            rest = rest.strip()
            i += 1
            if rest in ("|", ">-", ">"):
                body = []
                while i < len(lines) and indent(lines[i]) > base:
                    body.append(lines[i])
                    i += 1
                cut = min(indent(line) for line in body)
                body = [line[cut:] for line in body]
                mapping[key] = "\n".join(body) + "\n" if rest == "|" else " ".join(body)
            elif rest:
                mapping[key] = _scalar(rest)
            elif i < len(lines) and indent(lines[i]) > base:
                mapping[key], i = block(i, indent(lines[i]))
            else:
                mapping[key] = ""
        return mapping, i

    return block(0, 0)[0]


def read_action():
    with open(os.path.join(REPO, "action.yml"), encoding="utf-8") as handle:
        return read_yaml(handle.read())


# The commands the runner registers (its command extensions, plus stop-commands).
REGISTERED = {"set-env", "set-output", "save-state", "add-mask", "add-path", "add-matcher", "remove-matcher",
              "debug", "warning", "error", "notice", "group", "endgroup", "echo", "stop-commands"}


def runner_commands(text: str):
    """Every line the runner would take for a command: (form, name, properties, data).

    Lines end at \\n, \\r or \\r\\n.  v2 (TryParseV2): after the leading white
    space, "::name props::data".  v1 (TryParse): "##[name props]data" anywhere;
    this reader checks every "##[" of a line, not only the first, to be strict.
    """
    found = []
    for line in re.split(r"\r\n|\r|\n", text):
        stripped = line.lstrip()
        if stripped.startswith("::") and stripped.find("::", 2) >= 0:
            end = stripped.find("::", 2)
            info = stripped[2:end]
            name, _, props = info.partition(" ")
            if name.lower() in REGISTERED:
                properties = dict(p.split("=", 1) for p in props.split(",") if "=" in p)
                found.append(("v2", name.lower(), properties, stripped[end + 2:]))
                continue
        for match in re.finditer(re.escape("##["), line):
            close = line.find("]", match.end())
            if close >= 0:
                name = line[match.end():close].partition(" ")[0]
                if name.lower() in REGISTERED:
                    found.append(("v1", name.lower(), {}, line[close + 1:]))
    return found


def read_github_output(path: str) -> dict:
    """GITHUB_OUTPUT as the runner reads it: name=value, or name<<DELIMITER ... DELIMITER."""
    with open(path, encoding="utf-8", newline="") as handle:
        lines = handle.read().splitlines()
    outputs, i = {}, 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            outputs[name] = "\n".join(lines[i + 1:end])
            i = end + 1
        else:
            name, value = line.split("=", 1)
            outputs[name] = value
            i += 1
    return outputs


def bashes():
    """The bash binaries to run the step with: PATH's, and /bin/bash when it is another one."""
    if os.name == "nt":  # Git Bash, as on GitHub's Windows runners; not WSL's bash.exe
        found = [p for p in (r"C:\Program Files\Git\bin\bash.exe",) if os.path.exists(p)]
    else:
        found = [p for p in (shutil.which("bash"), "/bin/bash") if p and os.path.exists(p)]
    unique = []
    for path in found:
        if not any(os.path.realpath(path) == os.path.realpath(other) for other in unique):
            unique.append(path)
    return unique


class TempDir(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="rag_eval_action_")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def write(self, name: str, content) -> str:
        path = os.path.join(self.tmp, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def read(self, path: str) -> str:
        with open(path, encoding="utf-8") as handle:
            return handle.read()


class TestActionYml(unittest.TestCase):
    def test_shape(self):
        action = read_action()
        self.assertEqual(action["runs"]["using"], "composite")
        (step,) = action["runs"]["steps"]
        self.assertEqual(step["shell"], "bash")
        # every input reaches the step as an environment variable, none is pasted into the script
        self.assertNotIn("${{", step["run"])
        mapped = {re.fullmatch(r"\$\{\{ inputs\.([a-z-]+) \}\}", value).group(1) for value in step["env"].values()}
        self.assertEqual(mapped, set(action["inputs"]))
        # every output is the step's output of the same name, and action.py writes each
        for name, output in action["outputs"].items():
            self.assertEqual(output["value"], "${{ steps.%s.outputs.%s }}" % (step["id"], name))
        self.assertEqual(set(action["outputs"]), {"passed", "exit-code", "verdict", "report", "summary", "means",
                                                  "not-gated"})
        self.assertEqual(action["inputs"]["token"]["default"], "${{ github.token }}")

    def test_script_needs_no_arrays(self):
        # bash 3.2 with set -u calls an empty "${array[@]}" unbound: the script has none
        (step,) = read_action()["runs"]["steps"]
        self.assertNotIn("[@]", step["run"])
        self.assertNotIn("read -r", step["run"])


class ActionRun(TempDir):
    """Runs action.yml's script as a runner would."""

    def inputs_env(self, **inputs) -> dict:
        action = read_action()
        (step,) = action["runs"]["steps"]
        values = {name: spec.get("default", "") for name, spec in action["inputs"].items()}
        values["token"] = "test-token"
        values.update({key.replace("_", "-"): value for key, value in inputs.items()})
        env = {}
        for variable, expression in step["env"].items():
            name = re.fullmatch(r"\$\{\{ inputs\.([a-z-]+) \}\}", expression).group(1)
            env[variable] = values[name]
        return env

    def run_step(self, bash: str, env_extra: dict = None, **inputs):
        (step,) = read_action()["runs"]["steps"]
        output = self.write("github_output", "")
        summary = self.write("step_summary.md", "")
        runner_temp = os.path.join(self.tmp, "runner_temp")
        os.makedirs(runner_temp, exist_ok=True)
        env = {key: value for key, value in child_env(PYTHONIOENCODING=None).items()
               if not key.startswith(("RUNNER_", "INPUT_"))}
        env.update(GITHUB_ACTIONS="true", GITHUB_OUTPUT=output, GITHUB_STEP_SUMMARY=summary,
                   GITHUB_ACTION_PATH=REPO, RUNNER_TEMP=runner_temp)
        env.update(self.inputs_env(**inputs))
        if "python" not in inputs:
            env["RAG_EVAL_PYTHON"] = sys.executable  # this test's Python, whatever PATH holds
        env.update(env_extra or {})
        done = subprocess.run([bash, "-c", step["run"]], env=env, cwd=self.tmp, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        out, err = done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")
        return done.returncode, out, err, read_github_output(output), self.read(summary)

    def each_bash(self):
        found = bashes()
        if not found:
            self.skipTest("no bash here")
        for bash in found:
            version = subprocess.run([bash, "-c", "echo $BASH_VERSION"], stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL).stdout.decode().strip()
            with self.subTest(bash=f"{bash} {version}"):
                try:
                    yield bash
                except GeneratorExit:  # a check failed in the caller's loop: it reports the failure
                    return


class TestActionStep(ActionRun):
    def test_fixtures_regress_with_empty_args(self):
        # empty args under set -u (bash 3.2 once called "${extra[@]}" unbound); the shipped baseline fails
        for bash in self.each_bash():
            code, out, err, outputs, summary = self.run_step(bash, qrels=QRELS, run=RUN, baseline=BASELINE)
            self.assertEqual(code, 1, err)
            self.assertNotIn("unbound", err)
            self.assertEqual(outputs["passed"], "false")
            self.assertEqual(outputs["exit-code"], "1")
            self.assertEqual(outputs["verdict"], "regression")
            means = json.loads(outputs["means"])
            self.assertAlmostEqual(means["recall@5"], 2 / 3)  # (1 + 0 + 1) / 3
            with open(outputs["report"], encoding="utf-8") as handle:
                self.assertEqual(json.load(handle)["gate"]["passed"], False)
            self.assertEqual(self.read(outputs["summary"]), summary)
            self.assertIn("- `REGRESSION mrr@5: baseline 0.5500, now 0.5000`", summary)
            self.assertIn("::error title=rag_eval::REGRESSION recall@5", err)
            self.assertIn("FAIL (2: recall@5, mrr@5)", out)  # --format table on the log
            # a regression is no error: no error annotation of the exit code, no error section in the summary
            self.assertEqual([line for line in err.splitlines() if line.startswith("::error")],
                             ["::error title=rag_eval::REGRESSION mrr@5: baseline 0.5500, now 0.5000",
                              "::error title=rag_eval::REGRESSION recall@5: baseline 0.7000, now 0.6667"])
            self.assertNotIn("rag_eval: error", summary)

    def test_its_own_failure_is_never_exit_1(self):
        # GITHUB_OUTPUT in a folder that does not exist: the Action fails, and 1 would read as a regression
        gone = os.path.join(self.tmp, "gone", "github_output")
        for bash in self.each_bash():
            code, _, err, _, _ = self.run_step(bash, {"GITHUB_OUTPUT": gone}, qrels=QRELS, run=RUN, baseline=BASELINE)
            self.assertEqual(code, 2, err)
            self.assertIn("FileNotFoundError", err)

    def test_without_baseline_nothing_passes(self):
        # No gate, no pass: an empty (or misspelt, which GitHub passes as empty) baseline input is 'ungated'
        for bash in self.each_bash():
            code, out, err, outputs, summary = self.run_step(bash, qrels=QRELS, run=RUN, baseline="")
            self.assertEqual(code, 0, err)
            self.assertEqual((outputs["passed"], outputs["exit-code"], outputs["verdict"]), ("false", "0", "ungated"))
            self.assertEqual([line for line in out.splitlines() if line.startswith("::")],
                             [line for line in out.splitlines() if line.startswith("::warning title=rag_eval::nothing "
                                                                                    "was gated")])
            self.assertIn("::warning title=rag_eval::nothing was gated", out)
            self.assertTrue(summary.startswith("### rag_eval: UNGATED"), summary)
        # a floor is a gate: it passes
        for bash in self.each_bash():
            code, out, err, outputs, _ = self.run_step(bash, qrels=QRELS, run=RUN, args="--min recall@5=0.5")
            self.assertEqual((code, outputs["passed"], outputs["verdict"]), (0, "true", "pass"), err)
            self.assertNotIn("nothing was gated", out)

    def test_multi_line_args_each_count(self):
        # the floor on the second line used to be dropped (read -r -a reads one line): ndcg@5 = 0.5095 < 0.99
        args = "--measures ndcg,recall\n--min ndcg@5=0.99\n\n  --digits 3\n"
        for bash in self.each_bash():
            code, out, err, outputs, _ = self.run_step(bash, qrels=QRELS, run=RUN, args=args)
            self.assertEqual(code, 1, err)
            self.assertIn("REGRESSION ndcg@5: floor 0.9900, now 0.5095", err)
            self.assertEqual(sorted(json.loads(outputs["means"])), ["ndcg@5", "recall@5"])

    def test_quoted_path_with_spaces(self):
        slices = self.write("eval/my slices/s.json", {"q1": "billing", "q2": "billing", "q3": "sso"})
        junit = os.path.join(self.tmp, "out dir", "junit report.xml")
        os.makedirs(os.path.dirname(junit))
        args = f"--slices \"{slices}\"\n--junit '{junit}' --min 'billing:recall@5=0.9'"
        for bash in self.each_bash():
            code, out, err, _, _ = self.run_step(bash, qrels=QRELS, run=RUN, baseline=BASELINE, args=args)
            self.assertEqual(code, 1, err)
            self.assertIn("REGRESSION billing:recall@5: floor 0.9000, now 0.5000", err)  # q1, q2: (1 + 0) / 2
            self.assertTrue(os.path.isfile(junit))

    def test_input_error_is_annotated_and_summarised(self):
        missing = os.path.join(self.tmp, "nope.json")
        for bash in self.each_bash():
            code, _, err, outputs, summary = self.run_step(bash, qrels=QRELS, run=missing)
            self.assertEqual(code, 2, err)
            self.assertEqual(outputs["verdict"], "error")
            self.assertEqual(outputs["report"], "")
            self.assertEqual(outputs["means"], "{}")
            errors = [c for c in runner_commands(err) if c[1] == "error"]
            self.assertEqual(len(errors), 1, err)
            self.assertEqual(errors[0][2], {"title": "rag_eval"})
            self.assertIn("nope.json", errors[0][3])
            self.assertIn("### rag_eval: error (exit 2)", summary)
            self.assertIn("nope.json: ", summary)  # the error line, naming the file

    def test_error_annotation_points_at_the_file(self):
        bad = self.write("bad.json", '{"q1": {"a": 2},\n "q1": {"b": 1}}')
        for bash in self.each_bash():
            code, _, err, _, _ = self.run_step(bash, qrels=bad, run=RUN)
            self.assertEqual(code, 2, err)
            (error,) = [c for c in runner_commands(err) if c[1] == "error"]
            self.assertEqual(error[2]["file"], bad.replace(":", "%3A").replace(",", "%2C"))

    def test_unfinished_quote_is_an_input_error(self):
        for bash in self.each_bash():
            code, _, err, outputs, summary = self.run_step(bash, qrels=QRELS, run=RUN, args="--slices 'open")
            self.assertEqual(code, 2, err)
            self.assertIn(ERROR_PREFIX + "args: ", err)
            self.assertEqual(outputs["exit-code"], "2")
            self.assertIn("### rag_eval: error (exit 2)", summary)

    def test_verdict_is_the_gates_whatever_the_exit_code(self):
        # 30 queries, one falls from 1 to 0: --gate significant cannot tell (inconclusive); --inconclusive maps only
        # the exit code (and passed), the verdict stays the gate's (it was mapped from the exit code: regression, pass)
        qrels = self.write("q.json", {f"q{i}": {f"d{i}": 1} for i in range(30)})
        before = self.write("before.json", {f"q{i}": [f"d{i}"] for i in range(30)})
        worse = self.write("worse.json", dict({f"q{i}": [f"d{i}"] for i in range(30)}, q0=["x"]))
        for bash in self.each_bash():
            for policy, code, passed in (("exit", "3", "false"), ("fail", "1", "false"), ("pass", "0", "true")):
                with self.subTest(policy=policy):
                    args = f"--baseline-run {before} --gate significant --resamples 200 --inconclusive {policy}"
                    got, _, err, outputs, _ = self.run_step(bash, qrels=qrels, run=worse, args=args)
                    self.assertEqual(str(got), code, err)
                    self.assertEqual((outputs["exit-code"], outputs["passed"], outputs["verdict"]),
                                     (code, passed, "inconclusive"))

    def test_outputs_list_what_was_not_gated(self):
        import action

        report = os.path.join(self.tmp, "report.json")
        code, _, err = run_main([QRELS, RUN, "--baseline", BASELINE, "--not-gated", "recall@5,mrr@5", "--output", report])
        self.assertEqual(code, 0, err)  # the shipped baseline's two regressions left out on purpose
        outputs = action.outputs_of(code, report, "")
        self.assertEqual((outputs["verdict"], outputs["passed"]), ("pass", "true"))
        self.assertEqual(json.loads(outputs["not-gated"]), ["mrr@5", "recall@5"])
        self.assertEqual(action.outputs_of(2, "", "")["not-gated"], "[]")

    def test_verdict_of_several_runs_is_their_worst_gate(self):
        import action

        worse = self.write("worse.json", {"q1": ["x"], "q2": ["pricing#3"], "q3": ["sso-setup#5"]})
        passing = self.write("passing.json", {"recall@5": 0.6, "mrr@5": 0.5})  # the fixtures: 0.6667, 0.5
        for argv, expected in (([RUN, worse, "--baseline", passing], "regression"),
                               (["a=" + RUN, "b=" + RUN, "--baseline", passing], "pass"), ([RUN, worse], "ungated")):
            with self.subTest(argv=argv):
                code, out, err = run_main([QRELS, *argv])
                self.assertIn(code, (0, 1), err)
                self.assertEqual(action.gate_verdict(json.loads(out)), expected)
        self.assertIsNone(action.gate_verdict({}))  # a report without one: the exit code decides

    def test_abbreviated_output_is_the_report(self):
        # argparse takes --outp for --output: rag_eval writes the file, and the outputs name it (they were empty)
        import action

        report = os.path.join(self.tmp, "my.json")
        for bash in self.each_bash():
            code, _, err, outputs, _ = self.run_step(bash, qrels=QRELS, run=RUN, args=f"--outp {report}")
            self.assertEqual(code, 0, err)
            self.assertEqual(outputs["report"], report)
            self.assertAlmostEqual(json.loads(outputs["means"])["recall@5"], 2 / 3)  # (1 + 0 + 1) / 3
        for argv, expected in (([QRELS, RUN, f"--outp={report}"], report), ([QRELS, RUN, "--output", report], report),
                               ([QRELS, RUN, "--output", "a.json", "--out", report], report),
                               ([QRELS, RUN, "--o", report], report),  # no other option starts --o
                               ([QRELS, RUN, "--k", "x", "--output", report], "")):  # rag_eval stops: no report
            with self.subTest(argv=argv[2:]):
                self.assertEqual(action.report_path(argv), expected)

    def test_empty_qrels_or_run_input_is_named(self):
        # GitHub does not enforce required: on a composite action's inputs: a misspelt one arrives empty
        for bash in self.each_bash():
            for name, inputs in (("qrels", {"qrels": "", "run": RUN}), ("run", {"qrels": QRELS, "run": " "})):
                with self.subTest(name=name):
                    code, _, err, outputs, summary = self.run_step(bash, **inputs)
                    self.assertEqual(code, 2, err)
                    self.assertEqual(outputs["verdict"], "error")
                    line = [ln for ln in err.splitlines() if ln.startswith("rag_eval: error: ")]
                    self.assertEqual(len(line), 1, err)
                    message = assert_error_line(self, line[0], names=[f" {name} ", f"(with: {name}: ...;"])[len(ERROR_PREFIX):]
                    (error,) = [c for c in runner_commands(err) if c[1] == "error"]
                    self.assertEqual(error[3], message)
                    self.assertIn(message.split(":")[0], summary)

    def test_python_found_on_path(self):
        # the python input empty: the script tries python3, then python, running each
        folder = os.path.join(self.tmp, "bin")
        os.makedirs(folder)
        os.symlink(sys.executable, os.path.join(folder, "python")) if os.name != "nt" else self.skipTest("symlink")
        for bash in self.each_bash():
            code, _, err, outputs, _ = self.run_step(
                bash, {"PATH": folder + os.pathsep + "/usr/bin:/bin", "RAG_EVAL_PYTHON": ""},
                qrels=QRELS, run=RUN)
            self.assertEqual(code, 0, err)
            self.assertEqual(outputs["verdict"], "ungated")  # it ran: no baseline, nothing gated


class TestOutputsOfThisRun(TempDir):
    """After an error, ``report`` is empty and ``means`` is ``{}``; a file this run did not write is never read.
    An --output file left by an earlier passing step (means all 1.0) gave both after an exit 2."""

    def action_main(self, args: str, run: str = RUN) -> Tuple[int, dict]:
        import action

        output = self.write("github_output", "")
        env = {"RAG_EVAL_QRELS": QRELS, "RAG_EVAL_RUN": run, "RAG_EVAL_ARGS": args, "GITHUB_OUTPUT": output,
               "RUNNER_TEMP": self.tmp}
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = action.main(env)
        return code, read_github_output(output)

    def test_a_stale_report_is_never_read(self):
        stale = self.write("report.json", {"mean": {"recall@5": 1.0}, "gate": {"verdict": "pass"}})
        empty = self.write("empty.json", "")
        for args, run, code in ((f"--output {stale}", empty, 2),  # an input error
                                (f"--explain --output {stale}", RUN, 0)):  # exit 0, nothing written
            with self.subTest(args=args):
                got, outputs = self.action_main(args, run)
                self.assertEqual((got, outputs["report"], outputs["means"]), (code, "", "{}"))
                self.assertEqual(json.loads(self.read(stale))["mean"], {"recall@5": 1.0})  # left alone
        got, outputs = self.action_main(f"--output {stale}")  # this run writes it: read
        self.assertEqual((got, outputs["report"]), (0, stale))
        self.assertAlmostEqual(json.loads(outputs["means"])["recall@5"], 2 / 3)  # (1 + 0 + 1) / 3


class FakeGitHub:
    """A local stand-in for the issue-comments API: records each request, answers at most ``limit``.

    GET /user answers ``user`` (a user token's login) or 403, as it does to the GITHUB_TOKEN, whose comments are
    by ``github-actions[bot]``; a PATCH answers ``patch_status``; every request ``status`` when it is not 200."""

    def __init__(self, status: int = 200, limit: int = 10, user: str = "", patch_status: int = 200):
        self.requests, self.comments, self.status = [], [], status
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def handle_any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.requests.append((self.command, self.path, self.headers.get("Authorization"), body))
                if fake.status != 200:
                    return self.answer(fake.status, {"message": "Resource not accessible by integration"})
                if self.path == "/user":
                    return self.answer(200, {"login": user}) if user else self.answer(403, {"message": "no"})
                if self.command == "GET":
                    return self.answer(200, fake.comments)
                if self.command == "POST":
                    fake.comments.append({"id": 7 + len(fake.comments), "body": body["body"],
                                          "user": {"login": user or "github-actions[bot]"}})
                    return self.answer(201, fake.comments[-1])
                if patch_status != 200:
                    return self.answer(patch_status, {"message": "Resource not accessible by integration"})
                (comment,) = [c for c in fake.comments if self.path.endswith(f"/comments/{c['id']}")]
                comment["body"] = body["body"]
                return self.answer(200, comment)

            do_GET = do_POST = do_PATCH = handle_any

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.server.timeout = 5  # each wait for a request; the thread ends after `limit` of them

        def serve():
            for _ in range(limit):
                try:
                    self.server.handle_request()
                except (OSError, ValueError):  # closed by close() before all `limit` requests came
                    return

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def close(self):
        self.server.server_close()


class TestComment(ActionRun):
    def comment_env(self, api: FakeGitHub) -> dict:
        event = self.write("event.json", {"pull_request": {"number": 42}})
        return {"GITHUB_API_URL": api.url, "GITHUB_REPOSITORY": "owner/repo", "GITHUB_EVENT_PATH": event}

    def test_created_then_updated(self):
        bash = (bashes() or [None])[0] or self.skipTest("no bash here")
        api = FakeGitHub()
        self.addCleanup(api.close)
        env = self.comment_env(api)
        first = self.run_step(bash, env, qrels=QRELS, run=RUN, baseline=BASELINE, comment="true")
        second = self.run_step(bash, env, qrels=QRELS, run=RUN, baseline=BASELINE, comment="true")
        self.assertEqual((first[0], second[0]), (1, 1))
        methods = [(method, path) for method, path, _, _ in api.requests]
        self.assertEqual(methods, [
            ("GET", "/user"),
            ("GET", "/repos/owner/repo/issues/42/comments?per_page=100&page=1"),
            ("POST", "/repos/owner/repo/issues/42/comments"),
            ("GET", "/user"),
            ("GET", "/repos/owner/repo/issues/42/comments?per_page=100&page=1"),
            ("PATCH", "/repos/owner/repo/issues/comments/7"),
        ])
        self.assertTrue(all(auth == "Bearer test-token" for _, _, auth, _ in api.requests))
        self.assertEqual(len(api.comments), 1)
        body = api.comments[0]["body"]
        self.assertTrue(body.startswith("<!-- rag_eval -->\n### rag_eval: FAIL"), body)
        self.assertIn("- `REGRESSION mrr@5", body)

    def test_forbidden_is_a_notice_and_keeps_the_exit_code(self):
        bash = (bashes() or [None])[0] or self.skipTest("no bash here")
        api = FakeGitHub(status=403, limit=2)
        self.addCleanup(api.close)
        code, out, err, outputs, _ = self.run_step(bash, self.comment_env(api), qrels=QRELS, run=RUN,
                                                   baseline=BASELINE, comment="true")
        self.assertEqual(code, 1, err)
        self.assertEqual(outputs["exit-code"], "1")
        notices = [c for c in runner_commands(out) if c[1] == "notice"]
        self.assertEqual(len(notices), 1, out)
        self.assertIn("HTTP 403", notices[0][3])
        self.assertEqual([path for _, path, _, _ in api.requests], ["/user", "/repos/owner/repo/issues/42/comments"
                                                                   "?per_page=100&page=1"])

    def test_only_its_own_comment_is_updated(self):
        # A pull request's author posts the marker with a forged PASS before the gate runs: it was edited, or,
        # when the edit was refused (HTTP 403), nothing was posted and the forgery stayed the sticky comment.
        import action

        forged = {"id": 3, "body": "<!-- rag_eval -->\n### rag_eval: PASS", "user": {"login": "author"}}
        mine = {"id": 5, "body": "<!-- rag_eval -->\nold", "user": {"login": "github-actions[bot]"}}
        # (token's login, PATCH answer, comments, posted a new one): the step summary says why whenever it posts
        for user, patch_status, comments, posted in (
                ("", 200, [forged], True),  # the GITHUB_TOKEN (GET /user refused): github-actions[bot]'s only
                ("", 200, [mine, forged], True),  # its own, but a forgery came after: a new comment is the last
                ("", 403, [mine], True),  # its own, the edit refused: a new comment
                ("", 200, [forged, mine], False),  # its own is the last marked: updated in place
                ("me", 200, [forged, dict(mine, user={"login": "ME"})], False),  # a user token: GET /user's login
                ("me", 200, [mine], True)):  # a user token does not edit github-actions[bot]'s
            with self.subTest(user=user, patch=patch_status, ids=[c["id"] for c in comments]):
                api = FakeGitHub(user=user, patch_status=patch_status)
                self.addCleanup(api.close)
                api.comments = [dict(c) for c in comments]
                summary = self.write("summary.md", "")
                env = dict(self.comment_env(api), RAG_EVAL_TOKEN="t", GITHUB_STEP_SUMMARY=summary)
                with contextlib.redirect_stdout(io.StringIO()):
                    said = action.post_comment("### rag_eval: FAIL (1: mrr@5)\n", env)
                self.assertEqual((said, len(api.comments)), ("created", len(comments) + 1) if posted
                                 else ("updated", len(comments)))
                self.assertEqual(api.comments[-1]["body"], "<!-- rag_eval -->\n### rag_eval: FAIL (1: mrr@5)\n")
                for before in comments:  # another's comment is left as it was
                    if before["user"]["login"].lower() != (user or "github-actions[bot]").lower():
                        self.assertIn(before, api.comments)
                self.assertEqual("posted as a new comment" in self.read(summary), posted, self.read(summary))

    def test_no_pull_request_no_request(self):
        bash = (bashes() or [None])[0] or self.skipTest("no bash here")
        event = self.write("push.json", {"ref": "refs/heads/main"})
        code, out, _, _, _ = self.run_step(bash, {"GITHUB_API_URL": "http://127.0.0.1:9", "GITHUB_REPOSITORY": "o/r",
                                                  "GITHUB_EVENT_PATH": event}, qrels=QRELS, run=RUN, comment="true")
        self.assertEqual(code, 0)
        self.assertIn("not for a pull request", out)

    def test_long_summary_is_cut_to_a_comment(self):
        import action

        body = action.comment_body("<details><summary>x</summary>\n\n" + "| q | 1 |\n" * 20000)
        self.assertLessEqual(len(body), action.MAX_COMMENT)
        self.assertTrue(body.rstrip().endswith("*Cut to fit a comment; the job's step summary has the rest.*"))
        self.assertIn("</details>", body)


HOSTILE = ["b##[stop-commands]zz", "a##[notice]rag_eval:PASS", "::error::forged", "x\n::warning::nl",
           "c\r::notice::cr", "  ::add-mask::m", "\u2003::set-output name=x::y", "##[group]g", "%0A::error::pct"]


class TestNoForgedCommands(TempDir):
    def setUp(self):
        super().setUp()
        self.qrels = self.write("qrels.json", {q: {"d##[add-mask]m": 2, "e": 1} for q in HOSTILE})
        run = {q: ["e", "d##[add-mask]m"] for q in HOSTILE}
        run["u##[stop-commands]t"] = run[HOSTILE[0]] = ["e"]  # recall 1/2 in the slice that regresses
        self.run_file = self.write("run.json", run)
        self.slices = self.write("slices.json", {HOSTILE[0]: "s##[error]x", HOSTILE[1]: "  ##[notice]sl"})
        self.baseline = self.write("baseline.json", {"recall@5": 0.9, "s##[error]x:recall@5": 1.0})

    def assertOnlyOwnCommands(self, text, where):
        for form, name, properties, data in runner_commands(text):
            self.assertEqual((form, properties.get("title")), ("v2", "rag_eval"), f"{where}: {name} {data!r}")
            self.assertIn(name, ("error", "warning"), where)

    def gated(self, *more):
        return [self.qrels, self.run_file, "--drop-unknown-queries", "--slices", self.slices, "--baseline",
                self.baseline, "--max-drop", "s##[error]x:recall@5=0", "--per-query", *more]

    def test_every_format_and_stderr(self):
        for fmt in rag_eval.FORMATTERS:
            with self.subTest(format=fmt):
                code, out, err = run_main(self.gated("--format", fmt))
                self.assertEqual(code, 1, err)
                self.assertEqual(runner_commands(out), [], out)
                self.assertEqual(runner_commands(err), [], err)

    def test_json_keeps_every_id_exactly(self):
        code, out, _ = run_main(self.gated())
        report = json.loads(out)
        self.assertEqual(sorted(report["per_query"]), sorted(HOSTILE))
        self.assertEqual(report["dropped"], ["u##[stop-commands]t"])
        self.assertEqual(sorted(report["slices"]), ["  ##[notice]sl", "s##[error]x"])
        self.assertIn("s##[error]x:recall@5", report["gate"]["metrics"])
        self.assertNotIn("##[", out)

    def test_annotations_and_step_summary(self):
        summary = self.write("summary.md", "")
        code, out, err = run_main(self.gated(), {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary})
        self.assertEqual(code, 1)
        self.assertOnlyOwnCommands(err, "stderr")
        errors = [c for c in runner_commands(err) if c[1] == "error"]
        self.assertEqual([data for _, _, _, data in errors], ["REGRESSION s##\\[error]x:recall@5: baseline 1.0000, now 0.5000"])
        written = self.read(summary)
        # the summary was written (an empty one would hold no command either), its ids neutralised
        self.assertIn("\n- `REGRESSION s##\\[error]x:recall@5: baseline 1.0000, now 0.5000`\n", written)
        self.assertEqual(runner_commands(written), [])

    def test_error_lines(self):
        for argv in ([self.qrels, self.run_file], [os.path.join(self.tmp, "q##[notice]x.json"), self.run_file],
                     [self.qrels, self.run_file, "--drop-unknown-queries", "--max-drop", "##[stop-commands]x=0.1"]):
            with self.subTest(argv=argv[-1]):
                code, out, err = run_main(argv)
                self.assertEqual(code, 2)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertEqual(runner_commands(err), [], err)

    def test_junit_round_trips_names(self):
        junit = os.path.join(self.tmp, "junit.xml")
        run_main(self.gated("--junit", junit))
        text = self.read(junit)
        self.assertEqual(runner_commands(text), [])
        names = [case.get("name") for case in ElementTree.parse(junit).iter("testcase")]
        self.assertIn("s##[error]x:recall@5", names)

    def test_neutralise_is_idempotent_and_json_safe(self):
        for text in HOSTILE + ["###[", "#[", "::", "\n\n::x::", "\\##[", "::::"]:
            with self.subTest(text=text):
                once = rag_eval._neutralise_workflow_commands(text)
                self.assertEqual(rag_eval._neutralise_workflow_commands(once), once)
                self.assertEqual(runner_commands(once), [])
                encoded = rag_eval._neutralise_workflow_commands(json.dumps({text: [text]}, indent=2), "json")
                self.assertEqual(json.loads(encoded), {text: [text]})
                self.assertNotIn("##[", encoded)

    def test_annotations_capped(self):
        lines = [f"REGRESSION m{i}@5: baseline 1.0000, now 0.0000" for i in range(25)]
        shown = rag_eval._annotations("error", lines)
        self.assertEqual(len(shown), rag_eval._MAX_ANNOTATIONS)
        self.assertTrue(shown[-1].startswith("::error title=rag_eval::16 "), shown[-1])  # 25 - 9
        self.assertEqual(rag_eval._annotations("warning", lines[:10]), [rag_eval.annotation("warning", line)
                                                                       for line in lines[:10]])

    def test_annotation_escapes_data_and_properties(self):
        # data: %, CR and LF (GitHub's toolkit); a property also ':' and ',' (the runner's UnescapeProperty)
        self.assertEqual(rag_eval.annotation("error", "50% a\r\nb", file="d,1:2.json", line=3),
                         "::error title=rag_eval,file=d%2C1%3A2.json,line=3::50%25 a%0D%0Ab")

    def test_step_summary_cut_under_the_limit(self):
        text = "### rag_eval\n\n<details><summary>Per query</summary>\n\n" + "".join(
            f"| q{i} | 1.0000 |\n" for i in range(200000))
        cut = rag_eval._cut_markdown(text, rag_eval._MAX_STEP_SUMMARY)
        self.assertLessEqual(len(cut.encode("utf-8")), rag_eval._MAX_STEP_SUMMARY)
        self.assertTrue(cut.rstrip().endswith("--output writes every query's scores.*"), cut[-200:])
        self.assertIn("\n\n</details>\n\n*Cut here:", cut)
        self.assertEqual(rag_eval._cut_markdown("short\n", 100), "short\n")


# What the other runners docs/ci.md names obey, read independently of rag_eval's table.
OTHER_RUNNERS = re.compile(r"##vso\[|##\[|##teamcity\[|^ *(?:---|\+\+\+|~~~)(?: |$)|^\^\^\^ \+\+\+", re.M)
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]|\r(?!\n)")
OTHER_HOSTILE = ["##vso[task.setvariable variable=RAG_GATE]passed", "p##vso[task.prependpath]/tmp",
                 "##teamcity[buildStatus status='SUCCESS']", "--- group", "+++ open", "~~~ x", "^^^ +++",
                 "e\x1b[2K\x1b[1A", "n\x00u\x07l", "nel\x85::error::x", "ls\u2028::error::y", "bidi\u202eRTL\u2066",
                 "\x1b[0Ksection_start:1:s\r\x1b[0KS", "\x1b[8mha:note"]


class TestPublicNamesOnly(TempDir):
    """action.py is a user of rag_eval's library like any other (issue 30 item 3)."""

    def test_action_py_reaches_into_no_private_name(self):
        import ast

        with open(os.path.join(REPO, "action.py"), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name) and node.value.id == "rag_eval"}
        self.assertIn("parse_args", used)
        self.assertEqual(sorted(name for name in used if name.startswith("_") and not name.startswith("__")), [])
        self.assertEqual(sorted(name for name in used - set(rag_eval.__all__) - {"__version__", "UNGATED"}
                                if not name.startswith("EXIT_")), [])

    def test_the_error_section_shows_the_message_as_is(self):
        import action

        summary = self.write("summary.md", "")
        with contextlib.redirect_stderr(io.StringIO()) as err:
            action.report_error("x.json: 'a <b>@team</b> `[l](u)`'", [], summary)
        self.assertIn("\n\n    x.json: 'a <b>@team</b> `[l](u)`'\n\n", self.read(summary))  # an indented code block
        self.assertTrue(err.getvalue().startswith("::error title=rag_eval::x.json"), err.getvalue())


class TestEveryRunnersCommands(TempDir):
    """No text from the inputs forms a command of a runner docs/ci.md names, nor carries a raw control or bidi
    character, in any output: Azure's ##vso[ passed intact, and csv wrote ESC, NUL, BEL, NEL and bidi raw."""

    def setUp(self):
        super().setUp()
        self.qrels = self.write("qrels.json", {q: {"d": 1, "e": 1} for q in OTHER_HOSTILE})
        run = {q: ["e", "x"] for q in OTHER_HOSTILE}
        run["##vso[task.setvariable variable=DROPPED]1"] = ["e"]
        self.run_file = self.write("##vso[task.setvariable variable=RUN]x.json", run)
        self.other = self.write("--- other.json", run)
        self.slices = self.write("slices.json", {OTHER_HOSTILE[0]: "s##vso[x]", OTHER_HOSTILE[4]: "--- sl"})
        self.baseline = self.write("baseline.json", {"recall@5": 1.0, "s##vso[x]:recall@5": 1.0})

    def assertClean(self, text, where, line_breaks="\n", commands=True):
        """No raw control character; with ``commands``, no runner's command (rag_eval's own annotations aside)."""
        self.assertEqual(RAW_CONTROL.findall(text.replace(line_breaks, "\n")), [], where)
        if commands:
            self.assertEqual(OTHER_RUNNERS.findall(text), [], f"{where}: {text[:3000]!r}")
            self.assertEqual([c for c in runner_commands(text) if c[2].get("title") != "rag_eval"], [], where)

    def argv(self, *more):
        return [self.qrels, self.run_file, "--drop-unknown-queries", "--slices", self.slices, "--baseline",
                self.baseline, "--max-drop", "s##vso[x]:recall@5=0", "--meta", "k=v##vso[task.setvariable variable=M]x", *more]

    def test_every_format_stderr_and_file(self):
        junit, metrics = os.path.join(self.tmp, "j.xml"), os.path.join(self.tmp, "m.txt")
        summary = self.write("summary.md", "")
        for several in ((), (self.other,)):
            for fmt in rag_eval.FORMATTERS:
                with self.subTest(format=fmt, runs=1 + len(several)):
                    one = () if several else ("--per-query", "--junit", junit, "--metrics-file", metrics)
                    argv = self.argv("--format", fmt, *one)
                    code, out, err = run_main(argv[:2] + list(several) + argv[2:], {"GITHUB_STEP_SUMMARY": summary})
                    self.assertEqual(code, 1, err)
                    self.assertClean(out, "stdout", "\r\n" if fmt == "csv" else "\n")
                    self.assertIn("REGRESSION", err)
                    self.assertClean(err, "stderr")
                    for path in (junit, summary):
                        self.assertClean(self.read(path), path)
                    self.assertClean(self.read(metrics), metrics, commands=False)  # GitLab's parser reads it, no log
                    if fmt == "json":
                        report = json.loads(out)
                        runs = report.get("runs", [report])
                        self.assertIn("##vso[task.setvariable variable=DROPPED]1", runs[0]["dropped"])  # exactly
                        self.assertIn(OTHER_HOSTILE[7], report.get("per_query", [OTHER_HOSTILE[7]]))
        self.assertIn("s##vso[x]:recall@5", [case.get("name") for case in ElementTree.parse(junit).iter("testcase")])

    def test_files_written(self):
        """--output, --save-baseline and --unjudged wrote ##vso[ (and ##[, ##teamcity[) raw: a step that shows
        the report or the baseline ran them.  JSON escapes read back as the same ids."""
        paths = {option: os.path.join(self.tmp, name) for option, name in
                 (("--output", "o.json"), ("--save-baseline", "b.json"), ("--unjudged", "u.jsonl"))}
        code, _, err = run_main([self.qrels, self.run_file, "--drop-unknown-queries", "--slices", self.slices,
                                 "--meta", "k=v##vso[task.setvariable variable=M]x"] + [
            part for option, path in paths.items() for part in (option, path)])
        self.assertEqual(code, 0, err)
        for option, path in paths.items():
            with self.subTest(option):
                text = self.read(path)
                self.assertClean(text, option)
                read = [json.loads(line) for line in text.splitlines()] if option == "--unjudged" else json.loads(text)
                self.assertIn(OTHER_HOSTILE[0], json.dumps(read, ensure_ascii=False))  # the exact id, read back

    def test_annotations_and_error_lines(self):
        summary = self.write("summary.md", "")
        code, _, err = run_main(self.argv(), {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary})
        self.assertEqual(code, 1)
        self.assertClean(err, "annotations")
        for argv in ([self.qrels, os.path.join(self.tmp, "##vso[x]\x1b[2K.json")],
                     [self.qrels, self.run_file, "--max-drop", "##vso[task.setvariable]\x85=0.1"]):
            with self.subTest(argv=argv[-1]):
                code, _, err = run_main(argv)
                self.assertEqual((code, len(err.splitlines())), (2, 1), err)
                self.assertClean(err, "error line")

    def test_neutraliser_of_each_style(self):
        for text in OTHER_HOSTILE + ["\n--- a", "\n  +++ b\n", "a --- b", "\t::x::"]:
            with self.subTest(text=text):
                once = rag_eval._neutralise_workflow_commands(text)
                self.assertEqual(rag_eval._neutralise_workflow_commands(once), once)
                self.assertClean(once, "text")
                encoded = rag_eval._neutralise_workflow_commands(json.dumps({text: [text]}, indent=2), "json")
                self.assertEqual(json.loads(encoded), {text: [text]})
                self.assertClean(encoded, "json")
                xml = rag_eval._neutralise_workflow_commands(ElementTree.tostring(
                    ElementTree.Element("c", name=text), encoding="unicode"), "xml")
                self.assertClean(xml, "xml")
                ElementTree.fromstring(xml)  # still XML


_SAMPLE = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)')


_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def read_openmetrics(text: str) -> dict:
    """A strict reader of what --metrics-file writes: {(name, labels): value}; raises on anything else."""
    if not text.endswith("# EOF\n"):
        raise ValueError("no # EOF at the end")
    samples, families, current = {}, {}, None
    for line in text[:-len("# EOF\n")].split("\n")[:-1]:
        if line.startswith("# TYPE ") or line.startswith("# HELP "):
            _, kind, name, rest = line.split(" ", 3)
            if kind == "TYPE":
                if name in families or rest != "gauge":
                    raise ValueError(f"family {name} again, or not a gauge: {line!r}")
                families[name] = current = name
            elif name != current:
                raise ValueError(f"HELP outside its family: {line!r}")
            continue
        match = _SAMPLE.fullmatch(line)
        if not match or match.group(1) != current:
            raise ValueError(f"not a sample of {current}: {line!r}")
        labels, body = [], match.group(2) or ""
        position = 0
        while position < len(body):
            label = _LABEL.match(body, position)
            if not label:
                raise ValueError(f"bad labels: {body!r}")
            value = re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), label.group(2))
            labels.append((label.group(1), value))
            position = label.end()
            if position < len(body):
                if body[position] != ",":
                    raise ValueError(f"bad labels: {body!r}")
                position += 1
        samples[(match.group(1), tuple(labels))] = float(match.group(3))
    return samples


class TestMetricsFile(TempDir):
    def test_fixtures_with_the_baseline(self):
        path = os.path.join(self.tmp, "metrics.txt")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = rag_eval.main([QRELS, RUN, "--baseline", BASELINE, "--metrics-file", path])
        self.assertEqual(code, 1)
        samples = read_openmetrics(self.read(path))
        # ndcg@5 = (0.63991 + 0 + 0.88850) / 3; the shipped baseline says 0.52
        self.assertAlmostEqual(samples[("rag_eval_mean", (("metric", "ndcg@5"),))], 0.5095, places=4)
        self.assertAlmostEqual(samples[("rag_eval_delta", (("metric", "mrr@5"),))], 0.5 - 0.55)
        self.assertEqual(samples[("rag_eval_passed", ())], 0.0)

    def test_an_inconclusive_gate_did_not_pass(self):
        # 3 queries: q3 loses its first document, a fall no test on 3 queries can show or rule out: inconclusive
        worse = self.write("worse.json", {"q1": ["shipping#1", "refund-policy#2", "refund-policy#9", "refund-policy#3"],
                                          "q2": ["pricing#3"], "q3": ["scim#2", "okta-guide#1", "sso-setup#1"]})
        path = os.path.join(self.tmp, "metrics.txt")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = rag_eval.main([QRELS, worse, "--baseline-run", RUN, "--gate", "significant", "--resamples", "200",
                                  "--metrics-file", path])
        self.assertEqual(code, rag_eval.EXIT_INCONCLUSIVE)
        self.assertEqual(read_openmetrics(self.read(path))[("rag_eval_passed", ())], 0.0)

    def test_label_values_escaped(self):
        tag = 'a "b"\\c\nd'
        qrels = self.write("q.json", {"q1": {"x": 1}, "q2": {"y": 1}})
        run = self.write("r.json", {"q1": ["x"], "q2": ["z"]})
        slices = self.write("s.jsonl", json.dumps({"query_id": "q1", "slice": tag}) + "\n")
        path = os.path.join(self.tmp, "metrics.txt")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            code = rag_eval.main([qrels, run, "--slices", slices, "--metrics-file", path])
        if code == 2:  # slice names are printable only: escape the other two
            self.assertIn("slice", err.getvalue())
            tag = 'a "b"\\c'
            self.write("s.jsonl", json.dumps({"query_id": "q1", "slice": tag}) + "\n")
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                code = rag_eval.main([qrels, run, "--slices", slices, "--metrics-file", path])
        self.assertEqual(code, 0)
        samples = read_openmetrics(self.read(path))
        self.assertEqual(samples[("rag_eval_slice_mean", (("slice", tag), ("metric", "recall@5")))], 1.0)

    def test_never_over_an_input(self):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            code = rag_eval.main([QRELS, RUN, "--metrics-file", RUN])
        self.assertEqual(code, 2)
        assert_error_line(self, err.getvalue(), file=RUN, names=["--metrics-file"])


class TestAdoption(unittest.TestCase):
    def test_pep_723_header(self):
        # PEP 723's reference regex; the block must be TOML, the module docstring right after it
        with open(os.path.join(REPO, "rag_eval.py"), encoding="utf-8") as handle:
            source = handle.read()
        block = re.search(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$", source)
        self.assertEqual(block.group("type"), "script")
        content = "".join(line[2:] if line.startswith("# ") else line[1:]
                          for line in block.group("content").splitlines(keepends=True))
        try:
            import tomllib
        except ImportError:  # Python < 3.11
            self.assertEqual(content, 'requires-python = ">=3.9"\ndependencies = []\n')
        else:
            self.assertEqual(tomllib.loads(content), {"requires-python": ">=3.9", "dependencies": []})
        self.assertTrue(source.startswith("# SPDX-License-Identifier: MIT\n"))
        self.assertTrue(rag_eval.__doc__.startswith("Score a retrieval run"))

    def test_license_is_consistent(self):
        with open(os.path.join(REPO, "LICENSE"), encoding="utf-8") as handle:
            self.assertTrue(handle.read().startswith("MIT License"))
        with open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8") as handle:
            self.assertIn('license = "MIT"', handle.read())


if __name__ == "__main__":
    unittest.main()
