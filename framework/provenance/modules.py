"""Capture the user's modules an experiment imported (its siblings, its own packages),
once its network, data, loss and optimizer are built, so a rerun runs exactly that tree.

A module is the user's when it is defined in a ``.py`` file outside the standard
library and site-packages and is not mindexp's (by package name: an editable
install of mindexp lives in a user's folder too). Of those, a run captures the
ones the experiment reached: imported by its file (at any depth through the
user's modules) or lying below its file's folder. ``.mindexpignore`` in that
folder excludes modules (gitignore-like patterns); a total size cap keeps a
run folder small.
"""
from __future__ import annotations

import fnmatch
import os
import site
import sys
import sysconfig
from types import ModuleType
from typing import Any, Iterable

from .. import layout
from ..define.entry import USER_PREFIX, is_user_module, remember_user_modules
from ..rundir.io import write_file
from . import files as F

IGNORE_FILE = ".mindexpignore"          # beside the experiment's file: modules never captured
MODULES_CAP_BYTES = 2 * 1024 * 1024     # the captured modules' total size; beyond it, recorded only


def capture_modules(exp: Any, run_dir: str, block: dict[str, Any]) -> None:
    """Copy the user's modules ``exp`` imported into the folder of ``block``'s source
    (``source/`` or ``source/resume-<n>/``), by module name (``pkg/sub.py``), and list
    them in ``block["source"]``: ``files`` (SHA-256, with the experiment's file),
    ``modules`` (``name: {file, origin}``) and ``not_captured`` (``name: {origin, why}``:
    ignored, or over the cap, with its SHA-256 then). Never fails a run."""
    source = block.get("source")
    if not isinstance(source, dict) or not source.get("origin") or "modules" in source:
        return  # no file captured (a class typed in a REPL), or done
    folder = os.path.dirname(source["origin"])
    found = user_modules(sys.modules.get(type(exp).__module__), folder)
    remember_user_modules(found)  # imported afresh by the next experiment file
    entry_file = source["entry_file"]
    patterns = _ignore_patterns(os.path.join(folder, IGNORE_FILE))
    modules: dict[str, Any] = {}
    skipped: dict[str, Any] = {}
    total = 0
    for name, path in sorted(found.items()):
        rel = module_file(name, path)
        why = _ignored_by(rel, patterns)
        if rel == entry_file:
            if os.path.realpath(path) != os.path.realpath(source["origin"]):
                skipped[name] = {"origin": path, "why": f"its name is the experiment file's ({rel})"}
            continue  # the experiment's file itself, imported by its name too
        if why:
            skipped[name] = {"origin": path, "why": f"ignored by {IGNORE_FILE} ({why})"}
            continue
        with open(path, "rb") as f:
            data = f.read()
        if total + len(data) > MODULES_CAP_BYTES:
            skipped[name] = {"origin": path, "bytes": len(data), "sha256": F.sha256_bytes(data),
                             "why": f"over the {MODULES_CAP_BYTES // 1024} KiB cap of captured "
                                    "modules"}
            continue
        total += len(data)
        target = os.path.join(run_dir, source.get("dir") or layout.SOURCE_DIR, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        write_file(target, data)
        source["files"][rel] = F.sha256_bytes(data)
        modules[name] = {"file": rel, "origin": path}
    source["modules"] = modules
    if skipped:
        source["not_captured"] = skipped


def user_modules(entry: ModuleType | None, folder: str) -> dict[str, str]:
    """``{name: file}`` of the user's modules loaded now that the experiment module
    ``entry`` reached: through its globals (a module, or an object's defining module,
    at any depth through user modules) or below ``folder``."""
    skip = _library_folders()
    found: dict[str, str] = {}

    def user_file(module: Any) -> str | None:
        path = getattr(module, "__file__", None)
        name = getattr(module, "__name__", "") or ""
        if not isinstance(module, ModuleType) or not path or name.startswith(USER_PREFIX) \
                or name == "__main__" or not is_user_module(module, os.sep):
            return None
        path = os.path.abspath(path)
        return None if path.startswith(skip) else path

    for name, module in list(sys.modules.items()):
        path = user_file(module)
        if path and path.startswith(os.path.join(folder, "")):
            found[name] = path
    todo = [entry] + [sys.modules[n] for n in found]
    while todo:
        for module in _reached(todo.pop()):
            path = user_file(module)
            if path and module.__name__ not in found:
                found[module.__name__] = path
                todo.append(module)
    return found


def _reached(module: Any) -> Iterable[Any]:
    """The modules ``module``'s globals name: modules, and the modules defining its
    classes and functions (``from helper import Net``)."""
    for value in list(vars(module).values()) if module is not None else ():
        if isinstance(value, ModuleType):
            yield value
        else:
            owner = getattr(value, "__module__", None)
            if isinstance(owner, str) and owner in sys.modules:
                yield sys.modules[owner]


def _library_folders() -> tuple[str, ...]:
    """The standard library's and every site-packages folder (a tuple for startswith)."""
    paths = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(getattr(site, "getsitepackages", lambda: [])())
    paths.add(getattr(site, "getusersitepackages", lambda: None)())
    return tuple(os.path.join(os.path.abspath(p), "") for p in paths if p)


def module_file(name: str, path: str) -> str:
    """Where module ``name`` (defined in ``path``) goes below the source folder:
    ``helper.py``, ``pkg/__init__.py``, ``pkg/sub.py``."""
    parts = name.split(".")
    if os.path.basename(path) == "__init__.py":
        return "/".join(parts + ["__init__.py"])
    return "/".join(parts[:-1] + [parts[-1] + ".py"])


def _ignore_patterns(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _ignored_by(rel: str, patterns: list[str]) -> str | None:
    """The last pattern deciding ``rel`` when it excludes it, else None; gitignore-like:
    ``*``, ``?``, ``[...]``, ``**/``; a pattern without ``/`` matches a name at any
    depth, one with ``/`` the path from the folder; ``dir/`` a folder; ``!`` re-includes."""
    verdict = None
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        if _matches(rel, body):
            verdict = None if negated else pattern
    return verdict


def _matches(rel: str, pattern: str) -> bool:
    folder_only = pattern.endswith("/")
    anchored = "/" in pattern.rstrip("/")  # a leading or middle / : the path from the folder
    pattern = pattern.strip("/")
    parts = rel.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts))]  # its folders
    if not folder_only:
        candidates.append(rel)
    if not anchored:  # a name at any depth
        return any(fnmatch.fnmatchcase(c.rsplit("/", 1)[-1], pattern) for c in candidates)
    pattern = pattern.replace("**/", "*")
    return any(fnmatch.fnmatchcase(c, pattern) for c in candidates)


def changed_modules(block: dict[str, Any]) -> list[str]:
    """The captured or uncaptured modules whose file at its origin differs now from
    the one the run used (or is gone): ``"helper (helper.py): changed"``, sorted."""
    source: dict[str, Any] = block.get("source") or {}
    if not isinstance(source, dict):
        source = {}
    out: list[str] = []
    for name, info in sorted((source.get("modules") or {}).items()):
        digest = (source.get("files") or {}).get(info.get("file"))
        out += _compare(name, info.get("origin"), digest)
    for name, info in sorted((source.get("not_captured") or {}).items()):
        if info.get("sha256"):
            out += _compare(name, info.get("origin"), info["sha256"])
    return out


def _compare(name: str, origin: str | None, digest: str | None) -> list[str]:
    if not origin or not digest:
        return []
    if not os.path.isfile(origin):
        return [f"{name} ({origin}): gone"]
    return [] if F.sha256_of(origin) == digest else [f"{name} ({origin}): changed"]
