# SPDX-License-Identifier: MIT
"""The driver of the rag_eval GitHub Action (``action.yml``): its inputs in, its outputs out.

The Action's one step runs ``python action.py``.  The inputs arrive as
environment variables, never pasted into a shell script:

==================  ===========================================================
``RAG_EVAL_QRELS``  the judgments file
``RAG_EVAL_RUN``    the run to score
``RAG_EVAL_BASELINE``  the baseline to gate against; empty: score only
``RAG_EVAL_K``      the cutoffs (``5`` or ``1,5,10``)
``RAG_EVAL_ARGS``   more options, split as a POSIX shell splits them (shlex):
                    any number of lines, quotes, paths with spaces
``RAG_EVAL_COMMENT``  ``true``: the summary as one pull-request comment,
                    updated in place on later runs
``RAG_EVAL_TOKEN``  the token that comment is posted with
==================  ===========================================================

It runs ``rag_eval.main()`` in this process, appends the markdown summary to
the step summary, writes the step outputs (``GITHUB_OUTPUT``) and exits with
rag_eval's exit code: 0 pass, 1 regression, 2 error, 3 inconclusive
(``--gate significant`` found too little evidence either way; ``--inconclusive
pass|fail`` in ``args`` maps it to 0 or 1).  The comment never changes the exit code.
Standard library only, like rag_eval.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import sys
import tempfile
import uuid
from typing import Dict, List, Mapping, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # this Action's rag_eval.py, not an installed one
import rag_eval  # noqa: E402

VERDICTS = {rag_eval.EXIT_OK: "pass", rag_eval.EXIT_REGRESSION: "regression", rag_eval.EXIT_ERROR: "error",
            rag_eval.EXIT_INCONCLUSIVE: "inconclusive"}  # any other code is an error
MARKER = "<!-- rag_eval -->"  # first line of the one comment this Action keeps on a pull request
MAX_COMMENT = 65536  # characters GitHub accepts in a comment body
MAX_PAGES = 20  # of 100 comments each, searched for the marker
GITHUB_TOKEN_LOGIN = "github-actions[bot]"  # who a comment posted with the GITHUB_TOKEN is by
TIMEOUT = 20  # seconds per API request


# === Inputs ===


def action_argv(env: Mapping[str, str], report: str) -> List[str]:
    """rag_eval's command line from the inputs; ``report`` is the --output file unless ``args`` names one.

    ``args`` is split by ``shlex``, as a POSIX shell would: newlines separate
    like spaces, quotes group, a backslash escapes (write Windows paths with
    ``/`` or in single quotes).  Options in ``args`` come last, so they win.
    Raises ``ValueError``, its message the error line, for an empty ``qrels`` or
    ``run`` (GitHub does not enforce ``required`` on an action's inputs: a
    misspelt input name arrives empty) and for an unfinished quote.
    """
    judged = env.get("RAG_EVAL_JUDGED", "").strip()
    alone = judged and not env.get("RAG_EVAL_QRELS", "").strip() and not env.get("RAG_EVAL_RUN", "").strip()
    for name, what in () if alone else (("qrels", "judgments"), ("run", "run")):
        if not env.get(f"RAG_EVAL_{name.upper()}", "").strip():
            raise ValueError(f"the {name} input is empty: name the {what} file (with: {name}: ...; GitHub passes an "
                             "input it does not know, or misspelt, as empty)")
    argv = ([] if alone else [env["RAG_EVAL_QRELS"], env["RAG_EVAL_RUN"], "--k", env.get("RAG_EVAL_K") or "5"]) + [
        "--format", "table", "--output", report] + (["--judged", env["RAG_EVAL_JUDGED"]] if judged else [])
    if env.get("RAG_EVAL_BASELINE"):
        argv += ["--baseline", env["RAG_EVAL_BASELINE"]]
    try:
        return argv + shlex.split(env.get("RAG_EVAL_ARGS", ""))
    except ValueError as exc:
        raise ValueError(f"args: {exc} (the args input is split like a POSIX shell command line)") from None


def report_path(argv: List[str]) -> str:
    """The file the full result goes to, as rag_eval's own parser reads ``argv``: the last --output, or
    an abbreviation argparse accepts (``--outp``); "" when the command line does not parse."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # --help and --version print once, from rag_eval
            return rag_eval._build_parser().parse_args(argv).output or ""
    except (rag_eval.RagEvalError, SystemExit):  # rag_eval stopped on it too, and said why
        return ""


# === Running rag_eval ===


class _Tee(io.TextIOBase):
    """Writes through to a stream and keeps a copy: the driver reads rag_eval's error line."""

    def __init__(self, stream):
        self.stream, self.parts = stream, []

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def run_rag_eval(argv: List[str], summary: str) -> Tuple[int, str]:
    """rag_eval.main(argv) with its step summary going to ``summary``; the exit code and its stderr."""
    saved_env, saved_err = os.environ.get("GITHUB_STEP_SUMMARY"), sys.stderr
    os.environ["GITHUB_STEP_SUMMARY"] = summary
    sys.stderr = tee = _Tee(saved_err)
    try:
        code = rag_eval.main(argv)
    finally:
        sys.stderr = saved_err
        if saved_env is None:
            os.environ.pop("GITHUB_STEP_SUMMARY", None)
        else:
            os.environ["GITHUB_STEP_SUMMARY"] = saved_env
    return code, "".join(tee.parts)


def error_location(message: str, argv: List[str]) -> Tuple[Optional[str], Optional[int]]:
    """The input file (and line) an error message starts with, for the annotation to point at."""
    files = sorted({arg for arg in argv if arg and not arg.startswith("-") and os.path.isfile(arg)},
                   key=len, reverse=True)
    for path in files:
        if message.startswith(path + ":"):
            line = re.match(r"(\d+):", message[len(path) + 1:])
            return path, int(line.group(1)) if line else None
    return None, None


def report_error(message: str, argv: List[str], summary: str) -> None:
    """Exit 2 on the pull request: one error annotation naming the file and the fix, and a summary section."""
    path, line = error_location(message, argv)
    sys.stderr.write(rag_eval._annotation("error", message, file=path, line=line) + "\n")
    with open(summary, "a", encoding="utf-8", errors="backslashreplace") as out:
        out.write(f"### rag_eval: error (exit {rag_eval.EXIT_ERROR})\n\n"
                  f"{rag_eval._neutralise_workflow_commands(rag_eval._markdown_input(message))}\n\n"
                  "Nothing was gated: fix the file or the option named above, then run again.\n")


# === Outputs ===


def gate_verdict(report: dict) -> Optional[str]:
    """The gate's own verdict in a report: its ``gate``'s, or the worst of its runs' gates, or "ungated" when
    nothing was gated (never a pass); None in a report without one.  ``--inconclusive pass|fail`` changes the
    exit code, never this."""
    return report.get("verdict")


def file_stamp(path: str) -> Optional[Tuple[int, int, int, int]]:
    """What tells one file at ``path`` from another: rag_eval renames a new file into place (a new inode)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size


def outputs_of(code: int, report: str, summary: str) -> Dict[str, str]:
    """The step's outputs: ``passed`` from the exit code (never with nothing gated), ``verdict`` the gate's (from
    the report) unless rag_eval stopped on an error.  ``report`` is the file this run wrote, or ""; after an error
    it is never read."""
    means, verdict, not_gated = {}, None, []
    if code not in (rag_eval.EXIT_OK, rag_eval.EXIT_REGRESSION, rag_eval.EXIT_INCONCLUSIVE):
        report = ""
    if report and os.path.isfile(report):
        try:
            with open(report, encoding="utf-8") as handle:
                full = json.load(handle)
            means = full.get("mean", {})
            verdict = gate_verdict(full)
            gates = [full.get("gate")] + [run.get("gate") for run in full.get("runs", ())]
            not_gated = sorted({key for gate in gates if gate for key in gate.get("not_gated", ())})
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            means = {}
    if code not in (rag_eval.EXIT_OK, rag_eval.EXIT_REGRESSION, rag_eval.EXIT_INCONCLUSIVE) or verdict is None:
        verdict = VERDICTS.get(code, "error")
    return {
        "passed": "true" if code == rag_eval.EXIT_OK and verdict != rag_eval.UNGATED else "false",
        "exit-code": str(code),
        "verdict": verdict,
        "report": report if report and os.path.isfile(report) else "",
        "summary": summary,
        "means": json.dumps(means, sort_keys=True),
        "not-gated": json.dumps(not_gated),
    }


def write_outputs(path: str, outputs: Mapping[str, str]) -> None:
    """GITHUB_OUTPUT's multi-line form, ``name<<DELIMITER``, with a random delimiter no value holds."""
    with open(path, "a", encoding="utf-8") as out:
        for name, value in outputs.items():
            delimiter = "rag_eval_" + uuid.uuid4().hex
            while delimiter in value:
                delimiter = "rag_eval_" + uuid.uuid4().hex
            out.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


# === The pull-request comment ===


def pull_request_number(event_path: Optional[str]) -> Optional[int]:
    """The pull request of this run, from the event payload; None on a push or a schedule."""
    if not event_path:
        return None
    try:
        with open(event_path, encoding="utf-8") as handle:
            event = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(event, dict):
        return None
    number = (event.get("pull_request") or {}).get("number")
    if number is None and (event.get("issue") or {}).get("pull_request"):
        number = event["issue"].get("number")
    return number if isinstance(number, int) and not isinstance(number, bool) else None


def _api(method: str, url: str, token: str, body: Optional[dict] = None):
    import urllib.request

    request = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Accept": "application/vnd.github+json",
                                              "Authorization": f"Bearer {token}",
                                              "Content-Type": "application/json",
                                              "User-Agent": f"rag_eval/{rag_eval.__version__}",
                                              "X-GitHub-Api-Version": "2022-11-28"})
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        return json.loads(response.read().decode("utf-8") or "null")


def comment_body(summary_text: str) -> str:
    body = MARKER + "\n" + summary_text
    if len(body) > MAX_COMMENT:
        note = "\n\n*Cut to fit a comment; the job's step summary has the rest.*\n"
        body = body[:MAX_COMMENT - len(note) - 20].rpartition("\n")[0]
        if body.count("<details>") > body.count("</details>"):
            body += "\n\n</details>"
        body += note
    return body


def own_login(api: str, token: str) -> str:
    """The login the token writes comments as: GET /user's for a user's token; ``github-actions[bot]`` for the
    GITHUB_TOKEN, which that endpoint refuses (HTTP 403), as it does every app's installation token.  A login
    ending in ``[bot]`` belongs to an app: no person can take it."""
    import urllib.error

    try:
        return str(_api("GET", f"{api}/user", token)["login"])
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403, 404):
            return GITHUB_TOKEN_LOGIN
        raise


def post_comment(summary_text: str, env: Mapping[str, str]) -> str:
    """Create or update this Action's one comment on the pull request; what happened, in a few words.

    Only a comment that starts with MARKER and was written by the token's own login (own_login) is updated,
    and only when no one else's marked comment came after it: otherwise a new comment is posted, so a
    verdict forged in another's comment is never the last word; a refused edit also posts a new one.
    Either is said in the step summary.  A 403 or 404 (a fork's read-only token, no ``pull-requests:
    write``) is a notice; any other failure a warning.  Neither changes the exit code.
    """
    import urllib.error

    number = pull_request_number(env.get("GITHUB_EVENT_PATH"))
    api, repo, token = env.get("GITHUB_API_URL", ""), env.get("GITHUB_REPOSITORY", ""), env.get("RAG_EVAL_TOKEN", "")
    if number is None:
        return notice("no comment: this run is not for a pull request")
    if not (api and repo and token):
        return notice("no comment: GITHUB_API_URL, GITHUB_REPOSITORY or the token input is empty")
    api = api.rstrip("/")
    base = f"{api}/repos/{repo}"
    body = {"body": comment_body(summary_text)}
    notes: List[str] = []  # for the step summary: why a new comment, or why none
    try:
        me, marked = own_login(api, token).lower(), []
        for page in range(1, MAX_PAGES + 1):
            comments = _api("GET", f"{base}/issues/{number}/comments?per_page=100&page={page}", token)
            if not isinstance(comments, list):
                break
            marked += [c for c in comments if isinstance(c, dict) and str(c.get("body", "")).startswith(MARKER)]
            if len(comments) < 100:
                break
        logins = [str((c.get("user") or {}).get("login", "")) for c in marked]
        own = max((i for i, login in enumerate(logins) if login.lower() == me), default=None)
        others = sorted({login for login in logins[own or 0:] if login.lower() != me})
        if others:
            notes.append(f"A comment opening with `{MARKER}` by {', '.join(map(rag_eval._markdown_input, others))} "
                         "is not this Action's and was left alone.")
        if own is not None and not others:
            try:
                _api("PATCH", f"{base}/issues/comments/{marked[own]['id']}", token, body)
                return "updated"
            except urllib.error.HTTPError as exc:
                if exc.code not in (403, 404):
                    raise
                notes.append(f"Editing this Action's comment was refused (HTTP {exc.code}).")
        _api("POST", f"{base}/issues/{number}/comments", token, body)
        notes += ["This verdict was posted as a new comment."] if notes else []
        return "created"
    except urllib.error.HTTPError as exc:
        notes += [f"No comment could be posted (HTTP {exc.code}): this step summary has the verdict."] if notes else []
        if exc.code in (403, 404):
            return notice(f"no comment (HTTP {exc.code}): a pull request from a fork, or a job without "
                          "'permissions: pull-requests: write'; the step summary has the report")
        return warning(f"no comment: the API answered HTTP {exc.code}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return warning(f"no comment: {exc}")
    finally:
        if notes and env.get("GITHUB_STEP_SUMMARY"):
            with contextlib.suppress(OSError), open(env["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as out:
                out.write("\n" + rag_eval._neutralise_workflow_commands(" ".join(notes)) + "\n")


def notice(message: str) -> str:
    sys.stdout.write(rag_eval._annotation("notice", message) + "\n")
    return message


def warning(message: str) -> str:
    sys.stdout.write(rag_eval._annotation("warning", message) + "\n")
    return message


# === Entry point ===


def main(env: Optional[Mapping[str, str]] = None) -> int:
    """The Action: run rag_eval on the inputs, publish the summary and outputs; rag_eval's exit code."""
    env = os.environ if env is None else env
    folder = tempfile.mkdtemp(prefix="rag_eval-", dir=env.get("RUNNER_TEMP") or None)
    summary = os.path.join(folder, "summary.md")
    open(summary, "w").close()
    try:
        argv = action_argv(env, os.path.join(folder, "report.json"))
    except ValueError as exc:
        argv, message, code, report = [], str(exc), rag_eval.EXIT_ERROR, ""
        sys.stderr.write(f"rag_eval: error: {message}\n")
    else:
        report = report_path(argv)
        before = file_stamp(report) if report else None  # an earlier step's file, or none
        code, err = run_rag_eval(argv, summary)
        errors = [line[len("rag_eval: error: "):] for line in err.splitlines() if line.startswith("rag_eval: error: ")]
        message = errors[-1] if errors else f"rag_eval exited {code}"
    if code not in (rag_eval.EXIT_OK, rag_eval.EXIT_REGRESSION, rag_eval.EXIT_INCONCLUSIVE):
        report_error(message, argv, summary)
    with open(summary, encoding="utf-8", errors="replace") as handle:
        summary_text = handle.read()
    if env.get("GITHUB_STEP_SUMMARY"):
        try:
            with open(env["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as out:
                out.write(summary_text)
        except OSError as exc:
            warning(f"cannot append to GITHUB_STEP_SUMMARY ({exc.strerror or exc})")
    written = report if report and file_stamp(report) not in (None, before) else ""  # a file this run wrote
    outputs = outputs_of(code, written, summary)
    if outputs["verdict"] == rag_eval.UNGATED:  # an empty or misspelt baseline input must not look like a pass
        warning("nothing was gated, so nothing passed (verdict 'ungated'): the baseline input is empty (GitHub passes "
                "a misspelt input as empty) and args name no --baseline-run or --min")
    if env.get("GITHUB_OUTPUT"):
        write_outputs(env["GITHUB_OUTPUT"], outputs)
    if env.get("RAG_EVAL_COMMENT", "").strip().lower() == "true":
        post_comment(summary_text, env)
    return code


if __name__ == "__main__":
    for stream in (sys.stdout, sys.stderr):  # an id a Windows console cannot encode is shown escaped
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        exit_code = main()
    except Exception:  # a bug, or the runner's files unwritable: its traceback, then exit 2, never 1 (a regression)
        import traceback

        sys.stderr.write(rag_eval._neutralise_workflow_commands(traceback.format_exc()))  # the log obeys no line of it
        exit_code = rag_eval.EXIT_ERROR
    sys.exit(exit_code)
