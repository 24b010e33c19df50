"""The typed public surface: mypy passes on the package, and every public
callable keeps its annotations (parameters and return)."""
import inspect
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, cli_env, require

# The repository's folders as the installed package lays them out (setup.cfg's
# package_dir): mypy cannot follow the editable install's import hook.
PACKAGE_DIRS = {"": "framework", "callbacks": "callbacks", "experiments": "experiments"}
STAGE = os.path.join(ROOT, ".mypy_cache", "package")


def _stage_package():
    """A ``mindexp`` folder of symlinks to the repository's files; a fixed
    path, so mypy's cache (.mypy_cache) makes a second run quick."""
    top = os.path.join(STAGE, "mindexp")
    os.makedirs(top, exist_ok=True)
    for name in os.listdir(top):
        os.unlink(os.path.join(top, name))
    for name in os.listdir(os.path.join(ROOT, "framework")):
        if name != "__pycache__":
            os.symlink(os.path.join(ROOT, "framework", name), os.path.join(top, name))
    for sub, folder in PACKAGE_DIRS.items():
        if sub:
            os.symlink(os.path.join(ROOT, folder), os.path.join(top, sub))
    return top


def _repository_paths(output, top):
    """mypy's messages with the staged paths turned back into the repository's."""
    def real(match):
        return os.path.relpath(os.path.realpath(os.path.join(ROOT, match.group(0))), ROOT)
    staged = "|".join(map(re.escape, (top, os.path.relpath(top, ROOT))))
    return re.sub(rf"(?:{staged})/[^:\s]+", real, output)


@pytest.mark.slow
def test_mypy_passes_on_the_package():
    require("mypy", reason="mypy is in the test extra")
    top = _stage_package()
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "-p", "mindexp", "--config-file", "setup.cfg"],
        cwd=ROOT, env=cli_env(MYPYPATH=STAGE), capture_output=True, text=True, timeout=1200)
    output = _repository_paths(proc.stdout + proc.stderr, top)
    assert proc.returncode == 0, f"mypy found errors:\n{output}"


# -- every public name keeps its annotations ----------------------------------------------

def _public_callables():
    """(qualified name, callable) for mindexp's and mindexp.callbacks' exports,
    the public methods and properties of the exported classes (the Experiment's
    hooks among them) and the schema's functions."""
    import mindexp
    import mindexp.callbacks
    from mindexp.callbacks import schema

    exported = [(f"mindexp.{n}", getattr(mindexp, n)) for n in mindexp.__all__]
    exported += [(f"mindexp.callbacks.{n}", getattr(mindexp.callbacks, n))
                 for n in mindexp.callbacks.__all__]
    exported += [("schema.Log", schema.Log), ("schema.path_of", schema.path_of),
                 ("schema.read_log", schema.read_log)]
    for qualname, obj in exported:
        if not inspect.isclass(obj):
            yield qualname, obj
            continue
        if _defined_by_mindexp(obj, "__init__"):  # not Exception's, not a MindSpore base's
            yield f"{qualname}.__init__", obj.__init__
        for name, member in _own_public_members(obj):
            yield f"{qualname}.{name}", member


def _defined_by_mindexp(cls, name):
    owner = next((k for k in cls.__mro__ if name in vars(k)), object)
    return owner.__module__.startswith("mindexp")


def _own_public_members(cls):
    """The public functions and properties a class (or a mindexp base) defines."""
    seen = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("mindexp"):
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(member, property):
                yield name, member.fget
            elif isinstance(member, (staticmethod, classmethod)):
                yield name, member.__func__
            elif inspect.isfunction(member):
                yield name, member


def _missing_annotations(func):
    sig = inspect.signature(func)
    missing = [p.name for i, p in enumerate(sig.parameters.values())
               if p.annotation is inspect.Parameter.empty
               and not (i == 0 and p.name in ("self", "cls"))]
    if sig.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def test_every_public_callable_is_annotated():
    missing = {name: gaps for name, func in _public_callables()
               if (gaps := _missing_annotations(func))}
    assert not missing, "public names without annotations:\n" + "\n".join(
        f"  {name}: {', '.join(gaps)}" for name, gaps in sorted(missing.items()))


def test_experiment_hooks_are_checked():
    """The hooks users override are among the names checked above."""
    names = {name for name, _ in _public_callables()}
    for hook in ("source", "dataset", "network", "loss_fn", "loss_network", "optimizer",
                 "learning_rate", "metrics", "callbacks", "targets", "validate", "run"):
        assert f"mindexp.Experiment.{hook}" in names, hook


@pytest.mark.parametrize("package, folder", [("mindexp", "framework"),
                                             ("mindexp.callbacks", "callbacks")])
def test_the_stub_types_every_lazy_export(package, folder):
    """A checker reads the names __init__.py imports on first use from its stub:
    each export there, from the module __init__.py takes it from."""
    import ast
    import importlib
    exports = importlib.import_module(package)._EXPORTS
    with open(os.path.join(ROOT, folder, "__init__.pyi"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    stubbed = {alias.asname: node.module for node in tree.body
               if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert stubbed == exports


def test_the_package_ships_py_typed():
    """PEP 561: the marker sits in each installed package and setup.cfg installs it."""
    import configparser
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    package_data = cfg["options.package_data"]
    for package, folder in (("mindexp", "framework"), ("mindexp.callbacks", "callbacks"),
                            ("mindexp.experiments", "experiments")):
        assert os.path.isfile(os.path.join(ROOT, folder, "py.typed")), folder
        assert "py.typed" in package_data.get(package, ""), package
    for package in ("mindexp", "mindexp.callbacks"):   # their stubs (__init__.pyi)
        assert "*.pyi" in package_data.get(package, ""), package
