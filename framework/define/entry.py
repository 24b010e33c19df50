"""An experiment's entry: the text ``module:Class`` or ``/path/file.py:Class``
that names its class, stored in run.json so a run can be rebuilt (resume,
msrun workers, sweep workers, ``Run.network``)."""
from typing import Any, Iterable, Mapping
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import types

from ..callbacks import schema
from .. import layout
from ..errors import MindexpError
from .experiment import BaseExperiment

# The shipped experiments' package, found without importing it: experiments
# import the framework, never the other way round.
SHIPPED_PREFIX = __name__.split(".")[0] + ".experiments."  # mindexp.experiments.
# A run's copy of a shipped experiment sits in a folder of this name (provenance).
SHIPPED_FOLDER = SHIPPED_PREFIX[:-1]


def _experiments_dir() -> str:
    spec = importlib.util.find_spec(SHIPPED_FOLDER)
    if spec is None or spec.origin is None:  # mindexp installed without its experiments
        raise ImportError(f"{SHIPPED_FOLDER} is not installed")
    return os.path.dirname(os.path.abspath(spec.origin))


EXPERIMENTS_DIR = _experiments_dir()


# A user's experiment file is imported as the module USER_PREFIX + its file's stem.
USER_PREFIX = "mindexp_user_"

# The entry of a run made by ``mindexp.track`` in a user's script: ``script:/path/x.py``.
# No class rebuilds such a run; the script itself does (``track(..., resume=RUN)``).
SCRIPT_PREFIX = "script:"


def script_entry(path: str) -> str:
    """The entry of a script run whose script is ``path``."""
    return SCRIPT_PREFIX + path


def is_script_entry(entry: str | None) -> bool:
    """True for the entry of a run made by ``mindexp.track`` in a script."""
    return isinstance(entry, str) and entry.startswith(SCRIPT_PREFIX)


def refuse_script_run(run_dir: str, entry: str, action: str) -> None:
    """MindexpError (one line) when ``entry`` is a script run's: ``action``
    (resume, rerun) needs an experiment class, and a script run has none."""
    if is_script_entry(entry):
        raise MindexpError(f"cannot {action} {run_dir}: it is a script run (made by "
                           f"mindexp.track in {entry[len(SCRIPT_PREFIX):]}), which has no "
                           "experiment class to rebuild it; re-run the script with "
                           f"track(..., resume=RUN_DIR). Received: entry={entry!r}")


def load_experiment(entry: str) -> type[BaseExperiment]:
    """Import ``module:Class`` or ``/path/file.py:Class`` and check it."""
    refuse_script_run("this run", entry, "rebuild the experiment of")
    target, _, class_name = entry.rpartition(":")
    if target.startswith("experiments."):  # runs made before the one package name
        target = SHIPPED_PREFIX + target[len("experiments."):]
    if target.endswith(".py"):
        module = import_file(target)
    else:
        module = importlib.import_module(target)
    return experiment_class(module, class_name, target)


def import_file(path: str) -> types.ModuleType:
    """Import a user's experiment file as a module of its own, its folder first
    on the import path (as Python does for a script), so it imports its siblings;
    the siblings an earlier file imported are imported afresh."""
    if not os.path.isfile(path):
        raise MindexpError(f"experiment file not found: {path}")
    path = os.path.abspath(path)
    name = USER_PREFIX + os.path.splitext(os.path.basename(path))[0]
    _forget_user_modules()
    tree = captured_tree(path)
    _serve_captured(tree)  # None: serve no earlier run's modules either
    if os.path.basename(os.path.dirname(path)) == SHIPPED_FOLDER:
        name = _captured_package(os.path.dirname(path)) + "." + name[len(USER_PREFIX):]
    elif tree is None:  # a run's captured file imports its captured modules, never a folder's
        _put_first_on_path(os.path.dirname(path))
    before = set(sys.modules)
    spec = importlib.util.spec_from_file_location(name, path, loader=SourceOnlyLoader(name, path))
    assert spec is not None and spec.loader is not None  # a .py path and our loader
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
    finally:
        # the experiment modules themselves stay: a class's file is looked up by its module
        remember_user_modules(n for n in set(sys.modules) - before
                              if not n.startswith(USER_PREFIX)
                              and is_user_module(sys.modules.get(n), os.path.dirname(path)))
    return module


# Modules a user's experiment file brought in (its siblings): a later import of an
# experiment file imports them afresh, so an edited sibling (or another folder's
# module of the same name) is never served from the cache of an earlier import.
_USER_MODULES: set = set()
_PACKAGE = __name__.split(".")[0]  # mindexp: never a user's module, wherever it is installed


def _put_first_on_path(folder: str) -> None:
    """``folder`` first on ``sys.path``, as ``python file.py`` puts the script's folder."""
    if sys.path and sys.path[0] == folder:
        return
    if folder in sys.path:
        sys.path.remove(folder)
    sys.path.insert(0, folder)
    importlib.invalidate_caches()  # a sibling written since the folder was last listed


def is_user_module(module: Any, folder: str) -> bool:
    """True for a module defined in a .py file below ``folder`` that is not mindexp's
    (by package name: an editable install of mindexp lives in a user's folder too)."""
    path = getattr(module, "__file__", None)
    name = getattr(module, "__name__", "")
    if not path or name == _PACKAGE or name.startswith(_PACKAGE + "."):
        return False
    path = os.path.abspath(path)
    return path.endswith(".py") and path.startswith(os.path.join(folder, ""))


def remember_user_modules(names: Iterable[str]) -> None:
    """Note ``names`` as modules of a user's experiment (imported afresh next time)."""
    _USER_MODULES.update(names)


def _forget_user_modules() -> None:
    for name in _USER_MODULES:
        sys.modules.pop(name, None)
    _USER_MODULES.clear()


def captured_tree(path: str) -> dict[str, str] | None:
    """``{module name: file}`` a run captured with its experiment file ``path``
    (``<run>/source/x.py``, or a resume's ``<run>/source/resume-<n>/x.py``): the
    captured copies, and the origin of a module not captured (ignored, over the
    cap); None when ``path`` is not a run's captured experiment file."""
    folder = os.path.dirname(path)
    for run_dir in (os.path.dirname(folder), os.path.dirname(os.path.dirname(folder))):
        meta = _run_json(run_dir)
        if meta is None:
            continue
        blocks = [meta.get("provenance")] + [r.get("provenance") for r in meta.get("resumes") or []
                                             if isinstance(r, dict)]
        for block in blocks:
            source = block.get("source") if isinstance(block, dict) else None
            if isinstance(source, dict) and os.path.normpath(os.path.join(
                    run_dir, source.get("dir") or layout.SOURCE_DIR)) == folder:
                return _tree_of(folder, source)
    return None


def _tree_of(folder: str, source: Mapping[str, Any]) -> dict[str, str]:
    tree = {name: info["origin"] for name, info in (source.get("not_captured") or {}).items()
            if isinstance(info, dict) and isinstance(info.get("origin"), str)}
    tree.update({name: os.path.join(folder, info["file"])
                 for name, info in (source.get("modules") or {}).items()
                 if isinstance(info, dict) and isinstance(info.get("file"), str)})
    return tree


def _run_json(run_dir: str) -> dict[str, Any] | None:
    """run.json of ``run_dir`` (read without following a link), or None."""
    path = os.path.join(run_dir, layout.RUN_JSON)
    if not os.path.isfile(path):
        return None
    try:
        with schema.open_file(path, "rb") as f:
            meta = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


class _CapturedModules(importlib.abc.MetaPathFinder):
    """Serves a run's captured modules by name, ahead of ``sys.path``, as source only."""

    def __init__(self, tree: dict[str, str]) -> None:
        self.tree = tree

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        file = self.tree.get(name)
        if file is None:
            if not any(n.startswith(name + ".") for n in self.tree):
                return None
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = []  # a folder of captured modules, no __init__
            return spec
        package = os.path.basename(file) == "__init__.py"
        return importlib.util.spec_from_file_location(
            name, file, loader=SourceOnlyLoader(name, file),
            submodule_search_locations=[] if package else None)  # submodules: by name, here


def _serve_captured(tree: dict[str, str] | None) -> None:
    """Serve ``tree``'s modules instead of any earlier run's (None: none); a module of
    the same name imported before is imported afresh from the tree."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _CapturedModules)]
    if tree is None:
        return
    for name in tree:
        sys.modules.pop(name, None)
    sys.meta_path.insert(0, _CapturedModules(tree))
    remember_user_modules(tree)


def _captured_package(folder: str) -> str:
    """A package ``mindexp._captured_<hash>`` over a run's captured copy of a shipped
    module (source/mindexp.experiments/), so its relative imports resolve: ``..`` to
    mindexp, ``._nets`` to the captured sibling."""
    import hashlib
    name = "mindexp._captured_" + hashlib.sha256(folder.encode()).hexdigest()[:12]
    if name not in sys.modules:
        spec = importlib.util.spec_from_loader(name, None, is_package=True)
        assert spec is not None  # a name and no loader always make a spec
        package = importlib.util.module_from_spec(spec)
        package.__path__ = [folder]
        # its modules (``._nets``) from .py files only: no .pyc, .so or cache there is used
        sys.path_importer_cache[folder] = importlib.machinery.FileFinder(
            folder, (SourceOnlyLoader, importlib.machinery.SOURCE_SUFFIXES))
        sys.modules[name] = package
    return name


class SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles the .py file on every import: a bytecode cache beside it is never
    read (a run's captured code could hold a planted ``__pycache__/*.pyc``, which
    the standard loader would run instead of the checked source) nor written
    (a run directory is a record)."""

    def get_code(self, fullname: str) -> Any:
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


def experiment_class(module: types.ModuleType, class_name: str,
                     where: str) -> type[BaseExperiment]:
    """The Experiment subclass ``class_name`` of ``module`` (the only one when no name)."""
    candidates = [v for v in vars(module).values() if isinstance(v, type)
                  and issubclass(v, BaseExperiment) and v.__module__ == module.__name__]
    if not class_name:
        if len(candidates) == 1:
            return candidates[0]
        raise MindexpError(f"{where}: name the class as file.py:ClassName; Experiment classes "
                           f"there: {', '.join(c.__name__ for c in candidates) or 'none'}")
    cls = getattr(module, class_name, None)
    if cls is None:
        raise MindexpError(f"{where} has no class {class_name!r}; Experiment classes there: "
                           f"{', '.join(c.__name__ for c in candidates) or 'none'}")
    if not (isinstance(cls, type) and issubclass(cls, BaseExperiment)):
        raise MindexpError(f"{where}:{class_name} is not a subclass of mindexp.Experiment")
    return cls

