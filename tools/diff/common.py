"""What the differential harnesses share: loading two copies of rag_eval.py side by side, turning
whatever a call gives (a result or the exception it raised) into plain data that compares exactly,
and counting and showing the differences.

Not a tool of its own: libdiff.py, clidiff.py and measdiff.py import it.  Standard library only.
"""

import argparse
import importlib.util
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def load(path, name):
    """rag_eval.py at ``path`` as a module named ``name``, so that two copies live side by side."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise SystemExit(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # NamedTuples and dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def api(module, name):
    """``module.name``, or ``module._name`` in a copy where that name is private (issue 30's ``__all__``)."""
    return getattr(module, name) if hasattr(module, name) else getattr(module, "_" + name)


def arguments(doc, cases):
    """The command line every harness takes; returns (args, new module, reference module)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, help="the other copy: OLD/rag_eval.py")
    parser.add_argument("--new", default=os.path.join(REPO, "rag_eval.py"), help="default: this repository's rag_eval.py")
    parser.add_argument("--cases", type=int, default=cases, help=f"how many seeded cases (default {cases})")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0); case i uses seed:i")
    parser.add_argument("--show", type=int, default=3, help="differences shown in full (default 3)")
    args = parser.parse_args()
    return args, load(args.new, "rag_eval_new"), load(args.reference, "rag_eval_reference")


def case_random(seed, index):
    """The generator of case ``index``: one case can be rerun alone, whatever the others do."""
    return random.Random(f"{seed}:{index}")


def plain(value):
    """``value`` as nested tuples of builtins that compare exactly: floats by repr (NaN equals NaN,
    -0.0 differs from 0.0), dicts in their order (the order of a report is output too), named tuples
    and other objects with their type's name (not their module's).  A container becomes
    (``"<TypeName>"``, entries); a dict's entries are (``"="``, key, item)."""
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, (str, int, bool, type(None), bytes)):
        return value
    tag = f"<{type(value).__name__}>"
    if isinstance(value, dict):
        return (tag, tuple(("=", plain(key), plain(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return (tag, tuple(plain(item) for item in value))
    if isinstance(value, (set, frozenset)):
        return (tag, tuple(sorted((plain(item) for item in value), key=repr)))
    if hasattr(value, "__dict__"):
        return (tag, plain(vars(value)))
    return (tag, repr(value))


def outcome(call):
    """What ``call()`` gives as plain data: ("returned", value) or ("raised", type name, message)."""
    try:
        return ("returned", plain(call()))
    except Exception as exc:  # noqa: B902 - a crash of one copy is a difference like any other
        return ("raised", type(exc).__name__, str(exc))


def _container(value):
    return type(value) is tuple and len(value) == 2 and type(value[1]) is tuple and isinstance(value[0], str) \
        and value[0].startswith("<")


def first_difference(a, b, where=""):
    """The path to the first place two plain values differ, and what each holds there."""
    if a[:1] == b[:1] == ("returned",):
        return first_difference(a[1], b[1])
    if _container(a) and _container(b) and a[0] == b[0]:
        for index, (x, y) in enumerate(zip(a[1], b[1])):
            if x == y:
                continue
            if type(x) is tuple and type(y) is tuple and len(x) == len(y) == 3 and x[0] == y[0] == "=" and x[1] == y[1]:
                return first_difference(x[2], y[2], f"{where}[{x[1]!r}]")
            return first_difference(x, y, f"{where}[{index}]")
        if len(a[1]) != len(b[1]):
            return f"{where} (length {len(a[1])} vs {len(b[1])})", a[1][len(b[1]):][:3], b[1][len(a[1]):][:3]
    if isinstance(a, (str, bytes)) and isinstance(b, (str, bytes)) and type(a) is type(b):
        ours, theirs = a.splitlines(), b.splitlines()
        for number, (x, y) in enumerate(zip(ours, theirs), 1):
            if x != y:
                return f"{where} line {number}", x, y
        if len(ours) != len(theirs):
            return f"{where} (lines {len(ours)} vs {len(theirs)})", ours[len(theirs):][:3], theirs[len(ours):][:3]
    return where or "(whole)", a, b


def clipped(value, width=300):
    text = repr(value)
    return text if len(text) <= width else text[:width] + "..."


class Tally:
    """Counts identical and different cases per kind, keeps the first differences, prints them."""

    def __init__(self, show):
        self.show, self.counts, self.shown = show, {}, []

    def add(self, kind, index, inputs, new, reference):
        same = new == reference
        counts = self.counts.setdefault(kind, {"identical": 0, "different": 0, "raised": 0})
        counts["identical" if same else "different"] += 1
        counts["raised"] += same and new[0] == "raised"
        if not same and len(self.shown) < self.show:
            self.shown.append((kind, index, inputs, new, reference))
        return same

    def report(self, seed):
        """Print the counts and the first differences; return the exit code (1 on any difference)."""
        different = 0
        for kind, counts in self.counts.items():
            different += counts["different"]
            print(f"{kind}: {counts['identical']} identical ({counts['raised']} of them an identical error), "
                  f"{counts['different']} different")
        for kind, index, inputs, new, reference in self.shown:
            where, x, y = first_difference(new, reference)
            print(f"\n--- {kind}, case {index} (seed {seed}:{index}) differs at {where}")
            print(f"inputs:    {clipped(inputs, 600)}")
            print(f"new:       {clipped(x)}")
            print(f"reference: {clipped(y)}")
        print("\nno differences" if not different else f"\n{different} different cases")
        return 1 if different else 0
