"""Lines of code of mindexp's two halves, per folder and per file, and its long functions.

    .venv/bin/python benchmarks/code_lines.py            # table, totals, functions over 50 lines
    .venv/bin/python benchmarks/code_lines.py --files    # also one line per file
    .venv/bin/python benchmarks/code_lines.py --json out.json
    .venv/bin/python benchmarks/code_lines.py --root /path/to/another/checkout

A line of code is a physical line of a ``.py`` file that holds at least one
token other than a comment or a line break (``tokenize``) and is not part of
a docstring (the first statement of a module, class or function when it is
a string constant, found with ``ast``). Blank lines, comment-only lines and
docstring lines do not count; every non-blank line spanned by any other
multi-line string counts. Other files (``page.js``, ``page.css``) are not
counted.

"Reading half": framework/manage, analysis, rundir, search (the run store's
target is <= 8,000 code lines there). "Training half": framework/train, define,
provenance and callbacks/. "Product": framework/, callbacks/, experiments/.
A function's length is ``end_lineno - lineno + 1`` of its ``def`` (decorators
not included, docstring and comments included); the product's functions over
50 lines are listed. Reads files only: no import of mindexp.

Baseline, main 58aa515 (code lines / physical lines): manage 1,661 / 2,385,
analysis 3,946 / 5,860, rundir 2,172 / 3,291, search 2,120 / 3,198: reading
half 9,899 / 14,734. train 2,036, define 1,497, callbacks 2,943, provenance
537: training half 7,013 / 11,284. Product 19,341 / 29,633. Over 50 lines:
search.tune 68, launch.train 59, reports.compare 57, search.sweep 53.
"""
from __future__ import annotations

import argparse
import ast
import io
import json
import os
import sys
import tokenize
from dataclasses import asdict, dataclass, field

READING = ("framework/manage", "framework/analysis", "framework/rundir", "framework/search")
TRAINING = ("framework/train", "framework/define", "callbacks", "framework/provenance")
PRODUCT = ("framework", "callbacks", "experiments")
LONG = 50
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
             tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING}


@dataclass
class FileCount:
    """One file: its physical lines and its lines of code."""

    path: str
    lines: int
    code: int


@dataclass
class LongFunction:
    """A function (or method) longer than ``LONG`` lines."""

    path: str
    name: str
    line: int
    length: int


@dataclass
class Folder:
    """One folder (recursively): its files and totals."""

    folder: str
    files: list[FileCount] = field(default_factory=list)

    @property
    def lines(self) -> int:
        return sum(f.lines for f in self.files)

    @property
    def code(self) -> int:
        return sum(f.code for f in self.files)


def docstring_lines(tree: ast.Module) -> set[int]:
    """Line numbers covered by the docstrings of the module, its classes and functions."""
    covered: set[int] = set()
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.walk(tree):
        if isinstance(node, kinds) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                covered.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return covered


def code_lines(source: str, tree: ast.Module) -> int:
    """Lines of ``source`` holding a token that is not a comment, outside docstrings."""
    docs = docstring_lines(tree)
    lines = source.splitlines()
    code: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in _NOT_CODE:
            continue
        for number in range(tok.start[0], tok.end[0] + 1):
            if number not in docs and lines[number - 1].strip():
                code.add(number)
    return len(code)


def long_functions(tree: ast.Module, path: str, limit: int = LONG) -> list[LongFunction]:
    """Every function or method of ``tree`` longer than ``limit`` lines (qualified name)."""
    found: list[LongFunction] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    length = (child.end_lineno or child.lineno) - child.lineno + 1
                    if length > limit:
                        found.append(LongFunction(path, name, child.lineno, length))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def count_folder(root: str, folder: str, longs: list[LongFunction]) -> Folder:
    """Count every ``.py`` file under ``root/folder``; append its long functions to ``longs``."""
    result = Folder(folder)
    for here, dirs, names in os.walk(os.path.join(root, folder)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            full = os.path.join(here, name)
            rel = os.path.relpath(full, root)
            with open(full, "rb") as handle:
                source = handle.read().decode("utf-8")
            tree = ast.parse(source, filename=rel)
            result.files.append(FileCount(rel, len(source.splitlines()), code_lines(source, tree)))
            longs.extend(long_functions(tree, rel))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--root", default=here, help="the checkout to measure (default: this one)")
    parser.add_argument("--files", action="store_true", help="one line per file too")
    parser.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    args = parser.parse_args(argv)
    longs: list[LongFunction] = []
    halves = {half: [count_folder(args.root, f, []) for f in folders]
              for half, folders in (("reading", READING), ("training", TRAINING))}
    halves["product"] = [count_folder(args.root, f, longs) for f in PRODUCT]
    print(f"{'folder':<44}{'files':>6}{'lines':>8}{'code':>8}")
    for half, folders in halves.items():
        for folder in folders:
            print(f"{folder.folder:<44}{len(folder.files):>6}{folder.lines:>8,}{folder.code:>8,}")
            if args.files:
                for f in sorted(folder.files, key=lambda f: -f.code):
                    print(f"  {f.path:<42}{'':>6}{f.lines:>8,}{f.code:>8,}")
        label = "= product" if half == "product" else f"= {half} half"
        print(f"{label:<44}{sum(len(f.files) for f in folders):>6}"
              f"{sum(f.lines for f in folders):>8,}{sum(f.code for f in folders):>8,}")
    print(f"\nfunctions over {LONG} lines ({len(longs)}):")
    for fn in sorted(longs, key=lambda fn: -fn.length):
        print(f"  {fn.length:>4}  {fn.path}:{fn.line} {fn.name}")
    if args.json:
        data = {half: [{"folder": f.folder, "lines": f.lines, "code": f.code,
                        "files": [asdict(x) for x in f.files]} for f in folders]
                for half, folders in halves.items()}
        data["long_functions"] = [asdict(fn) for fn in longs]
        with open(args.json, "w") as out:
            json.dump(data, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
