"""Capture the user's modules an experiment imported (its siblings, its own packages),
once its network, data, loss and optimizer are built, so a rerun runs exactly that tree.

A module is the user's when it is defined in a ``.py`` file outside the standard
library and site-packages and is not mindexp's (by package name: an editable
install of mindexp lives in a user's folder too). Of those, a run captures the
ones the experiment reached: imported by its file (at any depth through the
user's modules) or lying below its file's folder. ``.mindexpignore`` in that
folder excludes modules (``.gitignore``'s patterns and meaning, matched by
pathspec); a total size cap keeps a run folder small.
"""
from __future__ import annotations

import codecs
import os
import stat
import site
import sys
import sysconfig
from types import ModuleType
from typing import Any, Callable, Iterable

from .. import layout
from ..errors import ConfigError
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
    ignored_by = ignore_rules(folder)
    modules: dict[str, Any] = {}
    skipped: dict[str, Any] = {}
    total = 0
    for name, path in sorted(found.items()):
        rel = module_file(name, path)
        why = ignored_by(rel)
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


def ignore_rules(folder: str) -> Callable[[str], str | None]:
    """What ``folder``'s ``.mindexpignore`` says of a path below the source folder
    (``pkg/sub.py``): the pattern that excludes it, or None. ``.gitignore``'s
    meaning (pathspec's GitIgnoreSpec): a pattern without a ``/`` but at its end
    matches a name at any depth, one with a ``/`` the path from the folder,
    ``*`` never crosses a ``/``, ``**`` does, ``!`` takes a path back.

    Raises ConfigError (one line) when the file is not a regular file (read
    never: a FIFO would block) or not UTF-8 text: what it would exclude is
    unknown, so nothing may be captured. A UTF-8 BOM and CRLF line ends are
    fine; no file excludes nothing."""
    from pathspec import GitIgnoreSpec
    lines = read_ignore_file(os.path.join(folder, IGNORE_FILE))
    if not lines:
        return lambda rel: None
    spec = GitIgnoreSpec.from_lines(lines)

    def ignored_by(rel: str) -> str | None:
        found = spec.check_file(rel)
        if not found.include or found.index is None:
            return None
        return str(getattr(spec.patterns[found.index], "pattern", "")).strip()
    return ignored_by


def read_ignore_file(path: str) -> list[str]:
    """The lines of the ignore file ``path`` (``[]`` when there is none); see
    :func:`ignore_rules` for what is refused."""
    try:
        kind = _file_kind(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return []
    if kind is None:  # checked again on the open descriptor: it may be swapped meanwhile
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO put there never blocks
            with os.fdopen(fd, "rb") as f:
                kind = _file_kind(os.fstat(fd).st_mode)
                data = f.read() if kind is None else b""
        except OSError as exc:
            raise ConfigError(f"{path} cannot be read ({exc.strerror}), so what it excludes is "
                              f"unknown. Received: {type(exc).__name__} {exc.errno}",
                              field=IGNORE_FILE) from None
    if kind is not None:
        raise ConfigError(f"{path} must be a regular text file of patterns (like .gitignore); "
                          f"it was not read. Received: a {kind}", field=IGNORE_FILE)
    try:
        return data.removeprefix(codecs.BOM_UTF8).decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte {data[exc.start]:#04x} at offset "
                          f"{exc.start}), so what it excludes is unknown; save it as UTF-8 "
                          f"(a BOM is fine). Received: {data[max(0, exc.start - 20):exc.start + 20]!r}",
                          field=IGNORE_FILE) from None


def _file_kind(mode: int) -> str | None:
    """None for a regular file, else what it is (for the message)."""
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
             (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"))
    return next((name for test, name in kinds if test(mode)), "special file")


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
