"""The documentation stays true to the code: README.md and docs/*.md.

* docs/measures.md holds the measure tables generated from
  ``rag_eval.MEASURES`` (names, summaries, definitions, names in other tools)
  by ``tools/make_measures_table.py``: regenerated here and compared, so a
  measure changed in the code and not in the docs fails;
* every measure name appears in the README's brief list, with its summary;
* README.md stays a front door: at most 16 KiB;
* every relative link in README.md and docs/*.md points at a file that exists
  (and, for ``file.md#part``, at one of its headings);
* the README keeps its two set-up commands verbatim (``.ci/run`` and CI run the
  test command it names).

Standard library only; run with ``python3 -m unittest tests.test_docs``.
"""

import ast
import glob
import importlib.util
import os
import re
import unittest

import rag_eval


HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


README = os.path.join(HERE, "README.md")


DOCS = os.path.join(HERE, "docs")


README_MAX_BYTES = 16 * 1024


# [text](target) and [text]: target, outside code; images too.
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)


FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


CODE_SPAN = re.compile(r"`[^`\n]*`")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def load_generator():
    spec = importlib.util.spec_from_file_location("make_measures_table", os.path.join(HERE, "tools", "make_measures_table.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def relative_links(text):
    """The link targets of markdown ``text`` that name a file of this repository."""
    prose = CODE_SPAN.sub("", FENCE.sub("", text))
    targets = INLINE_LINK.findall(prose) + REFERENCE_LINK.findall(prose)
    return [t for t in targets if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|#|//", t)]


def anchors(text):
    """The anchors GitHub gives the headings of markdown ``text``: lower case, punctuation dropped, spaces to -."""
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", FENCE.sub("", text), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def markdown_files():
    return [README] + sorted(glob.glob(os.path.join(DOCS, "*.md")))


class MeasureTableTest(unittest.TestCase):
    def test_measures_md_holds_the_generated_tables(self):
        generator = load_generator()
        wanted = generator.section(rag_eval.MEASURES)
        have = generator.current_section(read(generator.MEASURES_MD))
        self.assertEqual(have, wanted, "docs/measures.md is out of date: run python3 tools/make_measures_table.py --write")

    def test_every_measure_row_carries_its_definition(self):
        # The comparison above is only as good as the generator: each row must
        # really show the name, the summary, the definition and every other name.
        generator = load_generator()
        rows = generator.section(rag_eval.MEASURES).splitlines()
        for m in rag_eval.MEASURES:
            with self.subTest(measure=m.name):
                row = next(line for line in rows if line.startswith(f"| `{m.name}@k` | {generator._cell(m.summary)}"))
                self.assertIn(generator._cell(m.definition), row)
                names = next(line for line in rows if line.startswith(f"| `{m.name}@k` | ") and line != row)
                for other in m.others.values():
                    self.assertIn(other.partition(" (")[0], names)

    def test_readme_lists_every_measure(self):
        brief = read(README).split("## Measures", 1)[1].split("\n## ", 1)[0]
        for m in rag_eval.MEASURES:
            with self.subTest(measure=m.name):
                line = next((line for line in brief.splitlines() if line.startswith(f"- `{m.name}@k`: ")), None)
                self.assertIsNotNone(line, f"README.md's Measures list lacks `{m.name}@k`")
                self.assertIn(m.summary, line)  # the README may add to it, never reword it

    def test_generator_check_mode_agrees(self):
        self.assertEqual(load_generator().main(["--check"]), 0)


class PublicNamesTest(unittest.TestCase):
    """Issue 30: ``__all__`` is what a notebook user calls; the module docstring's table is that list; every
    other name defined in rag_eval.py is private but for the exit codes and the types the API takes or returns."""

    NOT_IN_ALL = {"EXIT_OK", "EXIT_REGRESSION", "EXIT_ERROR", "EXIT_INCONCLUSIVE", "EXIT_INTERRUPTED",
                  "EXIT_BROKEN_PIPE", "EXIT_TERMINATED", "UNGATED", "console_main", "Interval", "PairedComparison",
                  "Measure", "Span", "SpanQrels", "Location", "Qrels", "Run", "RunEntry", "Slices", "Judged",
                  "JudgedRead", "JudgedScore"}

    def test_the_docstring_table_is_all(self):
        rule = re.compile(r"^=+  =+$", re.MULTILINE)
        rules = [m.end() for m in rule.finditer(rag_eval.__doc__)]
        self.assertEqual(len(rules), 2, "one table in the module docstring")
        table = rag_eval.__doc__[rules[0]:rules[1]]
        listed = re.findall(r"^``(\w+)", table, re.MULTILINE)
        self.assertEqual(len(listed), len(set(listed)), "a name listed twice")
        self.assertEqual(set(listed), set(rag_eval.__all__))

    def test_all_is_defined_and_public(self):
        for name in rag_eval.__all__:
            with self.subTest(name=name):
                self.assertFalse(name.startswith("_"))
                self.assertTrue(hasattr(rag_eval, name))

    def test_every_other_name_is_private(self):
        tree = ast.parse(read(os.path.join(HERE, "rag_eval.py")))
        defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        defined |= {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                    for target in getattr(node, "targets", [getattr(node, "target", None)])
                    if isinstance(target, ast.Name)}
        public = {name for name in defined if not name.startswith("_")}
        self.assertEqual(public - set(rag_eval.__all__), self.NOT_IN_ALL)


class ReadmeTest(unittest.TestCase):
    def test_readme_is_at_most_16_kib(self):
        size = os.path.getsize(README)
        self.assertLessEqual(size, README_MAX_BYTES, f"README.md is {size} bytes; move reference material to docs/")

    def test_states_the_size_of_rag_eval_py(self):
        # Issue 30: the size of the file users copy, in bytes (within 1%, so that a small fix need not edit it).
        stated = int(re.search(r"`rag_eval.py` \(([\d,]+) bytes\)", read(README)).group(1).replace(",", ""))
        size = os.path.getsize(os.path.join(HERE, "rag_eval.py"))
        self.assertLessEqual(abs(stated - size), size / 100, f"README.md says {stated} bytes, rag_eval.py has {size}")

    def test_set_up_commands_are_verbatim(self):
        # Copy-pasted on a fresh machine, these must work; .ci/run and CI rely on the test command.
        blocks = re.findall(r"^```sh\n(.*?)^```", read(README), re.MULTILINE | re.DOTALL)
        commands = {line.strip() for block in blocks for line in block.splitlines()}
        self.assertIn("python3 rag_eval.py fixtures/qrels.json fixtures/run.json", commands)
        self.assertIn("python3 -m unittest", commands)


class LinksTest(unittest.TestCase):
    def test_relative_links_point_at_files_that_exist(self):
        for path in markdown_files():
            folder = os.path.dirname(path)
            for target in relative_links(read(path)):
                with self.subTest(file=os.path.relpath(path, HERE), link=target):
                    file_part, _, anchor = target.partition("#")
                    linked = os.path.join(folder, file_part)
                    self.assertTrue(os.path.exists(linked),
                                    f"{os.path.relpath(path, HERE)} links to {target}, which does not exist")
                    if anchor and linked.endswith(".md"):
                        self.assertIn(anchor, anchors(read(linked)), f"{target}: no such heading")

    def test_links_are_found(self):
        # A link pattern that matched nothing would make the test above pass vacuously.
        self.assertIn("docs/measures.md", relative_links(read(README)))
        self.assertEqual(relative_links("see `[a](nowhere.md)` and [b](https://example.org) and [c](#top)"), [])
        self.assertEqual(relative_links("[a](x.md#part) and\n[ref]: ../y.md\n"), ["x.md#part", "../y.md"])
        self.assertEqual(anchors("# Top\n## Differences from trec_eval, and others\n```\n# not a heading\n```\n"),
                         {"top", "differences-from-trec_eval-and-others"})


if __name__ == "__main__":
    unittest.main()
