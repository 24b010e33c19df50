"""The one atomic write of mindexp (re-exported by :mod:`schema`, which
every writer of a run directory uses)."""
from __future__ import annotations

import os
import platform


def atomic_write(path: str | os.PathLike[str], data: str | bytes, encoding: str = "utf-8") -> str:
    """Replace ``path`` with ``data`` (text or bytes) so that a crash leaves
    either the old file or the new one, never a part.

    Writes a temporary file in the same folder, fsyncs it, renames it over
    ``path`` and fsyncs the folder (so the rename itself survives a power
    cut). The temporary file is removed when anything fails.
    """
    path = os.fspath(path)
    tmp = temp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode(encoding) if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    fsync_folder(os.path.dirname(os.path.abspath(path)))
    return path


def atomic_replace(tmp: str | os.PathLike[str],
                   path: str | os.PathLike[str]) -> str | os.PathLike[str]:
    """Rename a finished temporary file or folder ``tmp`` over ``path`` and
    fsync the folder (for writers that produce the file themselves, e.g.
    ``mindspore.save_checkpoint``)."""
    os.replace(tmp, path)
    fsync_folder(os.path.dirname(os.path.abspath(os.fspath(path))))
    return path


def temp_name(path: str | os.PathLike[str], prefix: bool = False) -> str:
    """A temporary name beside ``path``, unique to this process on this host:
    ``path.tmp-PID@HOST``, or ``.tmp-PID@HOST@name`` in the same folder with
    ``prefix`` (hidden, and kept out of patterns that match the name's
    ending). The host: an output root shared by machines holds writers of
    several hosts, whose pids may be equal and cannot be checked here."""
    path = os.fspath(path)
    writer = f"{os.getpid()}@{platform.node()}"
    if not prefix:
        return f"{path}.tmp-{writer}"
    folder, name = os.path.split(path)
    return os.path.join(folder, f".tmp-{writer}@{name}")


def fsync_folder(folder: str) -> None:
    """fsync a folder, so the renames in it are on disk (best effort: some
    file systems refuse to open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
