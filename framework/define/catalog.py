"""Find experiments: shipped ones by name, user ones by ``file.py:Class``.

Listing reads the shipped modules' source with ``ast`` instead of importing
them, so ``mindexp list`` never imports mindspore.
"""
from typing import Any, Iterator
import ast
import os

from .config import Config, field_defaults
from .entry import EXPERIMENTS_DIR, SHIPPED_PREFIX, experiment_class, import_file, load_experiment
from ..errors import MindexpError


class ExperimentInfo:
    """What ``mindexp list`` shows of one experiment."""

    def __init__(self, name: str, module: str, class_name: str, doc: str,
                 fields: list[tuple[str, str, str]]) -> None:
        self.name, self.module, self.class_name = name, module, class_name
        self.doc, self.fields = doc, fields

    @property
    def entry(self) -> str:
        return f"{self.module}:{self.class_name}"


def shipped() -> list[ExperimentInfo]:
    """The experiments in ``experiments/``, sorted by name."""
    found: list[ExperimentInfo] = []
    for filename in sorted(os.listdir(EXPERIMENTS_DIR)):
        if filename.endswith(".py") and not filename.startswith("_"):
            with open(os.path.join(EXPERIMENTS_DIR, filename), encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename)
            found.extend(_infos(tree, SHIPPED_PREFIX + filename[:-3]))
    return sorted(found, key=lambda i: i.name)


def _infos(tree: ast.Module, module: str) -> Iterator[ExperimentInfo]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            name = _class_attr(node, "name")
            if isinstance(name, str):
                doc = (ast.get_docstring(node) or "").strip().splitlines()
                yield ExperimentInfo(name, module, node.name, doc[0] if doc else "",
                                     _fields(node))


def _class_attr(node: ast.ClassDef, attr: str) -> Any:
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr
                                                for t in stmt.targets):
            try:
                return ast.literal_eval(stmt.value)
            except ValueError:
                return None
    return None


def _fields(node: ast.ClassDef) -> list[tuple[str, str, str]]:
    """Common fields with this experiment's overrides, then its own fields."""
    common = {name: (type_, repr(default)) for name, type_, default in field_defaults(Config)}
    own = {}
    for stmt in node.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == "Config":
            for item in stmt.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    value = ast.unparse(item.value) if item.value is not None else ""
                    own[item.target.id] = (ast.unparse(item.annotation), value)
    merged = {k: own.get(k, v) for k, v in common.items()}
    merged.update({k: v for k, v in own.items() if k not in common})
    return [(k, t, d) for k, (t, d) in merged.items()]


def resolve_spec(spec: str) -> tuple[type[Any], str]:
    """``"linear"``, ``"path/file.py:Class"`` or ``"package.module:Class"`` ->
    ``(Experiment subclass, entry)``: what ``run``, ``list``, ``sweep`` and
    ``tune`` accept."""
    info = shipped_info(spec)
    if info is not None:
        return load_experiment(info.entry), info.entry
    if spec.endswith(".py") or spec.rpartition(":")[0].endswith(".py"):
        return _from_file(spec)
    return _from_module(spec)


def shipped_info(spec: str) -> ExperimentInfo | None:
    """The :class:`ExperimentInfo` of a shipped name; None for a file or
    module entry (``x.py:Class``, ``pkg.mod:Class``). Raises MindexpError for
    an unknown bare name."""
    if ":" in spec or spec.endswith(".py"):
        return None
    infos = shipped()
    for info in infos:
        if info.name == spec:
            return info
    from .config import did_you_mean
    names = [i.name for i in infos]
    raise MindexpError(f"unknown experiment {spec!r}; shipped experiments: {', '.join(names)}, "
                       f"or give path/to/file.py:ClassName or package.module:ClassName."
                       f"{did_you_mean(spec, names)}")


def _from_module(spec: str) -> tuple[type[Any], str]:
    module, _, class_name = spec.rpartition(":")
    expected = "expected path/to/file.py:ClassName or an importable package.module:ClassName"
    if not (module and class_name and all(p.isidentifier() for p in module.split("."))):
        raise MindexpError(f"{expected}. Received: {spec!r}")
    try:
        cls = load_experiment(spec)
    except MindexpError:
        raise
    except Exception as exc:  # the user's module failed to import: one line, no traceback
        raise MindexpError(f"{expected}; importing {module!r} failed ({type(exc).__name__}: "
                           f"{exc}). Received: {spec!r}") from None
    return cls, f"{cls.__module__}:{cls.__qualname__}"


def _from_file(spec: str) -> tuple[type[Any], str]:
    path, sep, class_name = spec.rpartition(":")
    if not sep:
        path, class_name = spec, ""
    if not path.endswith(".py"):
        raise MindexpError(f"expected path/to/file.py:ClassName. Received: {spec!r}")
    path = os.path.abspath(path)
    module = import_file(path)
    cls = experiment_class(module, class_name, path)
    return cls, f"{path}:{cls.__name__}"
