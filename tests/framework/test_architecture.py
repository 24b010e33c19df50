"""The import graph of framework/ and callbacks/, read with ``ast`` (imports
inside functions count): no circles, callbacks/ stands alone, and arrows
only go down the floors cli -> {manage, search} -> api -> {analysis, train, use}
-> {rundir, provenance} -> define -> {errors, secrets, _mindspore, layout} -> callbacks."""
import ast
import os

import pytest

from conftest import ROOT  # noqa: E402  (the repository)
FOLDERS = {"framework": "mindexp", "callbacks": "mindexp.callbacks"}
# floor of each part of the package; a module's part is its first name below mindexp
# Every room of framework/ has a floor (a new room must be given one here).
FLOORS = {"cli": 7, "__main__": 7, "manage": 6, "search": 6, "api": 5,
          "analysis": 4, "train": 4, "use": 4, "rundir": 3, "provenance": 3,
          "define": 2, "errors": 1, "secrets": 1, "_mindspore": 1, "layout": 1, "callbacks": 0}


def _modules():
    found = {}
    for folder, package in FOLDERS.items():
        base = os.path.join(ROOT, folder)
        for dirpath, dirs, files in os.walk(base):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    rel = os.path.relpath(path, base)[:-3].split(os.sep)
                    if rel[-1] == "__init__":
                        rel = rel[:-1]
                    found[".".join([package] + rel)] = path
    return found


def _imports(module, path, known):
    """The known modules ``module`` imports (relative ones resolved)."""
    is_package = path.endswith("__init__.py")
    package = module if is_package else module.rpartition(".")[0]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
                break
    return targets


def _graph():
    known = _modules()
    return {m: _imports(m, p, known) for m, p in known.items()}


def _floor(module):
    return FLOORS[_part(module) or "api"]


def _part(module):
    return module.split(".")[1] if module.count(".") else ""


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_there_are_no_import_circles():
    graph = _graph()
    state, stack, circles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                circles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert circles == []


def test_every_room_of_the_framework_has_a_floor():
    rooms = {_part(m) for m in _modules() if m.count(".")}
    assert rooms - set(FLOORS) == set()


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_callbacks_import_nothing_of_the_framework():
    graph = _graph()
    wrong = {(a, b) for a, targets in graph.items() if a.startswith("mindexp.callbacks")
             for b in targets if not b.startswith("mindexp.callbacks")}
    assert wrong == set()


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_arrows_only_go_down_the_floors():
    graph = _graph()
    up = sorted((a, b) for a, targets in graph.items() for b in targets
                if _floor(b) > _floor(a))
    assert up == []


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_running_and_reading_runs_do_not_import_each_other():
    graph = _graph()
    sideways = sorted((a, b) for a, targets in graph.items() for b in targets
                      if {_part(a), _part(b)} == {"analysis", "train"})
    assert sideways == []


@pytest.mark.parametrize("edge", [("mindexp.cli.run", "mindexp.api"),
                                  ("mindexp.analysis.reports", "mindexp.rundir.run"),
                                  ("mindexp.train.session", "mindexp.callbacks")])
@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_the_graph_sees_imports_inside_functions_too(edge):
    assert edge[1] in _graph()[edge[0]]
