"""Find experiments: shipped ones by name, user ones by ``file.py:Class``.

Listing reads the shipped modules' source with ``ast`` instead of importing
them, so ``mindexp list`` never imports mindspore.
"""
import ast
import importlib
import importlib.util
import os
import sys

from .config import Config, field_defaults
from .errors import MindexpError
from .provenance.files import SHIPPED_FOLDER

from . import experiments as _shipped_package

EXPERIMENTS_DIR = os.path.dirname(os.path.abspath(_shipped_package.__file__))
SHIPPED_PREFIX = _shipped_package.__name__ + "."  # mindexp.experiments.


class ExperimentInfo:
    """What ``mindexp list`` shows of one experiment."""

    def __init__(self, name, module, class_name, doc, fields):
        self.name, self.module, self.class_name = name, module, class_name
        self.doc, self.fields = doc, fields

    @property
    def entry(self):
        return f"{self.module}:{self.class_name}"


def shipped():
    """The experiments in ``experiments/``, sorted by name."""
    found = []
    for filename in sorted(os.listdir(EXPERIMENTS_DIR)):
        if filename.endswith(".py") and not filename.startswith("_"):
            with open(os.path.join(EXPERIMENTS_DIR, filename), encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename)
            found.extend(_infos(tree, SHIPPED_PREFIX + filename[:-3]))
    return sorted(found, key=lambda i: i.name)


def _infos(tree, module):
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            name = _class_attr(node, "name")
            if isinstance(name, str):
                doc = (ast.get_docstring(node) or "").strip().splitlines()
                yield ExperimentInfo(name, module, node.name, doc[0] if doc else "",
                                     _fields(node))


def _class_attr(node, attr):
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr
                                                for t in stmt.targets):
            try:
                return ast.literal_eval(stmt.value)
            except ValueError:
                return None
    return None


def _fields(node):
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


def resolve_spec(spec):
    """``"linear"`` or ``"path/file.py:Class"`` -> ``(Experiment subclass, entry)``."""
    if ":" in spec or spec.endswith(".py"):
        return _from_file(spec)
    for info in shipped():
        if info.name == spec:
            return load_experiment(info.entry), info.entry
    names = ", ".join(i.name for i in shipped())
    raise MindexpError(f"unknown experiment {spec!r}; shipped experiments: {names}, "
                       "or give path/to/file.py:ClassName")


def load_experiment(entry):
    """Import ``module:Class`` or ``/path/file.py:Class`` and check it."""
    target, _, class_name = entry.rpartition(":")
    if target.startswith("experiments."):  # runs made before the one package name
        target = SHIPPED_PREFIX + target[len("experiments."):]
    if target.endswith(".py"):
        module = _import_file(target)
    else:
        module = importlib.import_module(target)
    return _experiment_class(module, class_name, target)


def _from_file(spec):
    path, sep, class_name = spec.rpartition(":")
    if not sep:
        path, class_name = spec, ""
    if not path.endswith(".py"):
        raise MindexpError(f"expected path/to/file.py:ClassName. Received: {spec!r}")
    path = os.path.abspath(path)
    module = _import_file(path)
    cls = _experiment_class(module, class_name, path)
    return cls, f"{path}:{cls.__name__}"


def _import_file(path):
    if not os.path.isfile(path):
        raise MindexpError(f"experiment file not found: {path}")
    name = "mindexp_user_" + os.path.splitext(os.path.basename(path))[0]
    if os.path.basename(os.path.dirname(path)) == SHIPPED_FOLDER:
        name = _captured_package(os.path.dirname(path)) + "." + name[len("mindexp_user_"):]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[name]
        raise MindexpError(f"{path} has a syntax error at line {exc.lineno}: {exc.msg}") from None
    except Exception as exc:
        del sys.modules[name]
        raise MindexpError(f"importing {path} failed: {type(exc).__name__}: {exc}") from None
    return module


def _captured_package(folder):
    """A package ``mindexp._captured_<hash>`` over a run's captured copy of a shipped
    module (source/mindexp.experiments/), so its relative imports resolve: ``..`` to
    mindexp, ``._nets`` to the captured sibling."""
    import hashlib
    name = "mindexp._captured_" + hashlib.sha256(folder.encode()).hexdigest()[:12]
    if name not in sys.modules:
        spec = importlib.util.spec_from_loader(name, None, is_package=True)
        package = importlib.util.module_from_spec(spec)
        package.__path__ = [folder]
        sys.modules[name] = package
    return name


def _experiment_class(module, class_name, where):
    from .experiment import Experiment
    candidates = [v for v in vars(module).values() if isinstance(v, type)
                  and issubclass(v, Experiment) and v is not Experiment
                  and v.__module__ == module.__name__]
    if not class_name:
        if len(candidates) == 1:
            return candidates[0]
        raise MindexpError(f"{where}: name the class as file.py:ClassName; Experiment classes "
                           f"there: {', '.join(c.__name__ for c in candidates) or 'none'}")
    cls = getattr(module, class_name, None)
    if cls is None:
        raise MindexpError(f"{where} has no class {class_name!r}; Experiment classes there: "
                           f"{', '.join(c.__name__ for c in candidates) or 'none'}")
    if not (isinstance(cls, type) and issubclass(cls, Experiment)):
        raise MindexpError(f"{where}:{class_name} is not a subclass of mindexp.Experiment")
    return cls
