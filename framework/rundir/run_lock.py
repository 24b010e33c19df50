"""One process at a time in a run directory: an advisory lock file.

Two ``mindexp resume`` of one run would both cut the CSVs back and append
the same steps twice. ``fcntl.flock`` on ``<run_dir>/.lock`` lets only one
hold the directory; the kernel drops the lock when its process exits in any
way (even SIGKILL), so a lock left by a dead process is simply taken over.
The file keeps the holder's pid and host only to name it in the message.

It is not ``record.LOCK_FILE`` (``.run.lock``), the short lock held for each
write of run.json: the resume holds this one for the whole run and takes
that one many times meanwhile; one flock taken twice in a process (two
descriptors) would wait for itself.
"""
import contextlib
import fcntl
import os
import platform

from ..callbacks import schema
from ..errors import MindexpError

LOCK_FILE = schema.RESUME_LOCK


class RunLockedError(MindexpError):
    """Another live process holds the run directory."""


@contextlib.contextmanager
def run_locked(run_dir, action="resume"):
    """Hold ``run_dir``'s lock for the block; RunLockedError (one line) when
    another process holds it. The lock file is removed on a clean exit, so a
    refused or finished command leaves the directory as it found it."""
    path = os.path.join(os.fspath(run_dir), LOCK_FILE)
    fd = _acquire(path, run_dir, action)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {platform.node()}\n".encode())
        yield path
    finally:
        os.unlink(path)  # while still holding it: a waiter sees the inode change
        os.close(fd)     # closing the descriptor releases the lock


def _acquire(path, run_dir, action):
    """Open and lock ``path``; retried when the holder removed the file between
    our open and our lock (we would hold a lock on a deleted inode)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # non-inheritable: msrun children
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RunLockedError(f"cannot {action} {run_dir}: {holder} is resuming or running "
                                 f"it (lock file {LOCK_FILE}); wait for it to finish or stop "
                                 f"it first") from None
        if _same_file(fd, path):
            return fd
        os.close(fd)


def _same_file(fd, path):
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
