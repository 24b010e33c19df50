"""An experiment's entry: the text ``module:Class`` or ``/path/file.py:Class``
that names its class, stored in run.json so a run can be rebuilt (resume,
msrun workers, sweep workers, ``Run.network``)."""
import importlib
import importlib.machinery
import importlib.util
import os
import sys

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


# The entry of a run made by ``mindexp.track`` in a user's script: ``script:/path/x.py``.
# No class rebuilds such a run; the script itself does (``track(..., resume=RUN)``).
SCRIPT_PREFIX = "script:"


def script_entry(path):
    """The entry of a script run whose script is ``path``."""
    return SCRIPT_PREFIX + path


def is_script_entry(entry):
    """True for the entry of a run made by ``mindexp.track`` in a script."""
    return isinstance(entry, str) and entry.startswith(SCRIPT_PREFIX)


def refuse_script_run(run_dir, entry, action):
    """MindexpError (one line) when ``entry`` is a script run's: ``action``
    (resume, rerun) needs an experiment class, and a script run has none."""
    if is_script_entry(entry):
        raise MindexpError(f"cannot {action} {run_dir}: it is a script run (made by "
                           f"mindexp.track in {entry[len(SCRIPT_PREFIX):]}), which has no "
                           "experiment class to rebuild it; re-run the script with "
                           f"track(..., resume=RUN_DIR). Received: entry={entry!r}")


def load_experiment(entry):
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


def import_file(path):
    """Import a user's experiment file as a module of its own."""
    if not os.path.isfile(path):
        raise MindexpError(f"experiment file not found: {path}")
    name = "mindexp_user_" + os.path.splitext(os.path.basename(path))[0]
    if os.path.basename(os.path.dirname(path)) == SHIPPED_FOLDER:
        name = _captured_package(os.path.dirname(path)) + "." + name[len("mindexp_user_"):]
    spec = importlib.util.spec_from_file_location(name, path, loader=SourceOnlyLoader(name, path))
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

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


def experiment_class(module, class_name, where):
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

