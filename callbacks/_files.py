"""The one atomic write of mindexp and its one careful open (both
re-exported by :mod:`schema`, which every writer and reader of a run
directory uses)."""
from __future__ import annotations

import errno
import os
import platform
import stat
from typing import IO, Any

# A run folder may sit in a shared output folder: any of its files may be
# a link out of it, a FIFO (whose open blocks until a writer comes) or a
# directory. Every record, log and lock is opened without following a last
# link and without blocking, and only a regular file is used.
_CAREFUL = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_KINDS = ((stat.S_ISLNK, "link"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISDIR, "directory"),
          (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "device"), (stat.S_ISBLK, "device"))


class NotAFileError(OSError):
    """A path that should be a regular file is a link, a FIFO, a directory, a
    socket or a device; its message is ``<path> is a <kind>, not a regular file``."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(errno.EINVAL, f"{path} is a {kind}, not a regular file")
        self.path, self.kind = path, kind

    def __str__(self) -> str:
        return str(self.strerror)


def open_fd(path: str | os.PathLike[str], flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of the regular file ``path`` (``os.open`` ``flags``, e.g.
    ``O_RDWR | O_CREAT`` for a lock), opened without following a last symlink
    and without blocking (the descriptor is blocking again once checked);
    :class:`NotAFileError` when it is anything but a regular file."""
    path = os.fspath(path)
    try:
        fd = os.open(path, flags | _CAREFUL, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise NotAFileError(path, _kind_of(path)) from None
        raise
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise NotAFileError(path, kind)
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_file(path: str | os.PathLike[str], mode: str = "rb", **kwargs: Any) -> IO[Any]:
    """The regular file ``path`` opened for reading as :func:`open` would
    (``mode`` ``"rb"`` or ``"r"``, ``encoding=`` ...), through :func:`open_fd`."""
    return os.fdopen(open_fd(path), mode, **kwargs)


def _kind(st_mode: int) -> str | None:
    for test, name in _KINDS:
        if test(st_mode):
            return name
    return None


def _kind_of(path: str) -> str:
    try:
        return _kind(os.lstat(path).st_mode) or "file of another kind"
    except OSError:
        return "link"  # ELOOP on a path that is gone now: a link was there


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
