"""The share of bare ``Any`` among the parameter and return annotations of
the training core (framework/train, framework/define by default).

An annotation counts when it is exactly ``Any`` (``typing.Any``, or the
string ``"Any"``); ``dict[str, Any]`` does not. Annotations that name only
MindSpore classes (``nn.Cell``, ``Callback``, ...) are counted apart: they
read as real classes but are ``Any`` to mypy, MindSpore shipping no types.

    python benchmarks/bare_any.py [FOLDER ...]
"""
import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("framework/train", "framework/define")
MINDSPORE = {"Cell", "nn", "Callback", "Metric", "Model", "Dataset", "GeneratorDataset",
             "Optimizer", "Parameter", "Tensor"}
CONTAINERS = {"None", "list", "tuple", "dict", "Sequence"}


def annotations(tree: ast.AST) -> list[ast.expr]:
    """Every parameter and return annotation of the functions in ``tree``."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = a.posonlyargs + a.args + a.kwonlyargs + [p for p in (a.vararg, a.kwarg) if p]
            found += [p.annotation for p in params if p.annotation is not None]
            found += [node.returns] if node.returns is not None else []
    return found


def _parsed(node: ast.expr) -> ast.expr:
    """A string annotation's expression (the node itself otherwise)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return node
    return node


def is_bare_any(node: ast.expr) -> bool:
    node = _parsed(node)
    return (isinstance(node, ast.Name) and node.id == "Any") or (
        isinstance(node, ast.Attribute) and node.attr == "Any")


def names_only_mindspore(node: ast.expr) -> bool:
    names = {n.id for n in ast.walk(_parsed(node)) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(_parsed(node)) if isinstance(n, ast.Attribute)}
    names -= CONTAINERS
    return bool(names) and names <= MINDSPORE


def count(folder: str) -> tuple[int, int, int]:
    """``(annotations, bare Any, MindSpore-only)`` of the .py files under ``folder``."""
    total = bare = mindspore = 0
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in sorted(f for f in files if f.endswith(".py")):
            with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                found = annotations(ast.parse(f.read()))
            total += len(found)
            bare += sum(map(is_bare_any, found))
            mindspore += sum(map(names_only_mindspore, found))
    return total, bare, mindspore


def main(folders: list[str]) -> None:
    for folder in folders:
        total, bare, mindspore = count(folder)
        print(f"{folder}: {bare} bare Any of {total} annotations ({100 * bare / total:.1f} %); "
              f"{mindspore} name only MindSpore classes")


if __name__ == "__main__":
    main(sys.argv[1:] or list(FOLDERS))
