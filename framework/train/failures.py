"""Why a run failed: the full traceback kept in the run directory, and one
line for the terminal that names the user's own frame (file:line).

A failing network(), source() or callback surfaces deep inside mindexp and
MindSpore; the frame that helps the user is the innermost one in *their*
code, so the one-line message points there and ``error.txt`` keeps the rest.
"""
from typing import Any
import os
import re
import signal
import sysconfig
import traceback

from .. import layout

# A little disk space set aside when a run starts and given back when it
# fails, so run.json and error.txt can still say why on a full disk.
RESERVE_BYTES = 256 * 1024

# mindexp's own files: the package (framework/ in a checkout) and its callbacks
# (callbacks/ beside it in a checkout, mindexp/callbacks/ when installed).
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE_DIRS = tuple(d + os.sep for d in (_PACKAGE, os.path.join(os.path.dirname(_PACKAGE),
                                                                   "callbacks")))
_LIBRARY_DIRS = tuple({os.path.abspath(p) + os.sep for p in
                       (sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib",
                                                           "platlib")) if p})


# A graph-mode compile error has no Python frame of the user's network: MindSpore
# lists the construct() code it was compiling as "# 7 In file /path/x.py:13, 15~46".
_COMPILED_FRAME = re.compile(r"In file (\S+?):(\d+)")


def user_frame(exc: BaseException) -> Any:
    """``(filename, lineno, function)`` of the innermost frame outside mindexp,
    MindSpore, the standard library and installed packages: from the
    traceback, else from a graph compile error's listing of the network's
    code (function then None); None when every frame is library code."""
    found: tuple[str, int | None, str | None] | None = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if _is_user_file(frame.filename):
            found = (frame.filename, frame.lineno, frame.name)
    if found is None:
        for path, line in _COMPILED_FRAME.findall(str(exc)):
            if _is_user_file(path):
                found = (path, int(line), None)
    return found


def _is_user_file(filename: str) -> bool:
    path = os.path.abspath(filename)
    return not (filename.startswith("<") or path.startswith(_PACKAGE_DIRS)
                or path.startswith(_LIBRARY_DIRS))


def one_line(exc: BaseException, limit: int = 2000) -> str:
    """``KeyError: 'x' (at /path/exp.py:12 in network)``: the exception's first
    meaningful line and, when there is one, the user's own frame."""
    text = str(exc).strip()
    from ..define.sources import describe_pipeline_error
    pipeline = describe_pipeline_error(text)  # names the map operation and the data file
    lines = [pipeline] if pipeline else \
        [ln for ln in text.splitlines() if ln.strip() and not set(ln.strip()) <= set("-=")]
    head = f"{type(exc).__name__}: {lines[0].strip() if lines else ''}".rstrip(": ")
    frame = user_frame(exc)
    where = f" (at {frame[0]}:{frame[1]}{f' in {frame[2]}' if frame[2] else ''})" if frame else ""
    return (head[:limit - len(where)] + where) if len(head) + len(where) > limit else head + where


def user_code_error(what: str, exc: BaseException) -> Any:
    """A MindexpError for an exception of the user's code found before any run
    directory exists: one line with the user's frame; ``details`` holds the
    full traceback (the command line prints it with ``--verbose``)."""
    from ..errors import MindexpError
    err = MindexpError(f"{what} {one_line(exc)}")
    err.details = format_traceback(exc)  # type: ignore[attr-defined]  # read with getattr
    return err


def format_traceback(exc: BaseException) -> str:
    """The full traceback of ``exc`` (with its chained causes) as text."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def save_traceback(run_dir: str, exc: BaseException) -> str | None:
    """Write the full traceback to ``<run_dir>/error.txt``; returns its path
    (None when even that cannot be written: the one-line error in run.json
    is then all there is)."""
    # half the space set aside is for this file; the other half stays set aside
    # until the final run.json is written: another writer on a full disk (a
    # sweep's other point) takes any room freed a moment too soon
    shrink_space(run_dir, RESERVE_BYTES // 2)
    path = os.path.join(run_dir, layout.ERROR_FILE)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(format_traceback(exc))
    except OSError:
        return None
    return path


def reserve_space(run_dir: str) -> OSError | None:
    """Set ``RESERVE_BYTES`` aside in the run directory; returns the
    ``OSError`` when they cannot be had (a disk all but full), with the
    partial file removed, else None."""
    path = os.path.join(run_dir, layout.SPACE_RESERVE)
    try:
        with open(path, "wb") as f:
            f.write(b"\0" * RESERVE_BYTES)
            f.flush()
            os.fsync(f.fileno())  # a full disk shows here, not at a later write-back
    except OSError as exc:
        release_space(run_dir)
        return exc
    return None


def shrink_space(run_dir: str, keep: int) -> None:
    """Give back all but ``keep`` bytes of the space set aside (best effort)."""
    try:
        os.truncate(os.path.join(run_dir, layout.SPACE_RESERVE), keep)
    except OSError:
        pass


def release_space(run_dir: str) -> None:
    """Give the reserved bytes back (before writing run.json at the end)."""
    try:
        os.remove(os.path.join(run_dir, layout.SPACE_RESERVE))
    except OSError:
        pass


def signal_name(signum: int) -> str:
    """``"SIGINT"`` for 2, ``"SIGTERM"`` for 15, ``"signal N"`` otherwise."""
    try:
        return signal.Signals(signum).name
    except (ValueError, TypeError):
        return f"signal {signum}"


def exit_status(signum: int) -> int:
    """The shell's convention for a process stopped by a signal: 128 + N
    (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(signum)


def exit_status_of(meta: dict[str, Any]) -> int:
    """The command line's exit status for a run that ended with ``meta``:
    0 completed, 128 + N when stopped by signal N (status interrupted),
    1 otherwise (failed, diverged)."""
    status = meta.get("status")
    if status == "completed":
        return 0
    if status == "interrupted" and meta.get("signal") in signal.Signals.__members__:
        return exit_status(signal.Signals[meta["signal"]])
    return 1
