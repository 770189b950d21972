"""What the test modules share: calling ``rag_eval.main`` in-process, and a
temporary folder per test.  (Not named test_*.py: it holds no tests.)"""

import contextlib
import io
import json
import os
import tempfile
import warnings
from unittest import mock

import rag_eval

ERROR_PREFIX = "rag_eval: error: "
# What rag_eval reads from the environment: removed for every in-process run,
# so that a test means the same on a developer's machine and on a CI runner.
ENVIRONMENT = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "SOURCE_DATE_EPOCH")


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
