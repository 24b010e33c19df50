"""The one rule for "this run is live": a process holds the run's lock.

``fcntl.flock`` on ``<run_dir>/.lock`` (``layout.RESUME_LOCK``) is taken by
``run`` the moment the folder exists and by ``resume`` before it reads the
run for writing, and released only once run.json is final. ``rm``, ``gc``,
``resume`` and ``rerun`` try to take it and refuse (one line naming the
holder) when it is held; listings only probe it (:func:`holder`). The kernel
drops the lock when its process exits in any way (even SIGKILL), so a lock
left by a dead process is simply taken over: a pid in run.json never decides
liveness. The file keeps the holder's pid, host and command only to name it.

It is not ``layout.RUN_LOCK`` (``.run.lock``), the short lock held for each
write of run.json: the holder of this one takes that one many times
meanwhile; one flock taken twice in a process (two descriptors) would wait
for itself.
"""
import contextlib
import fcntl
import os
import platform
import time

from ..callbacks import schema
from .. import layout
from ..errors import MindexpError, RunDirError
from .io import create_run_dir

# A listing's probe holds the lock (shared) for microseconds; an acquirer
# retries this long before calling the lock held, so a probe never refuses it.
PROBE_PATIENCE_S = 0.5
_START_TRIES = 5  # new folders a start tries when gc removes each before its lock


class RunLockedError(MindexpError):
    """Another live process holds the run directory."""


class RunLock:
    """A held run lock; :meth:`release` (or the end of :func:`run_locked`) lets it go."""

    def __init__(self, path, fd):
        self.path, self.fd = path, fd

    def release(self):
        """Remove the lock file (while still holding it: a waiter sees the inode
        change) when it is still ours, and close it, which releases the lock."""
        if self.fd is None:
            return
        if _same_file(self.fd, self.path):
            os.unlink(self.path)
        os.close(self.fd)
        self.fd = None


@contextlib.contextmanager
def run_locked(run_dir, action="resume"):
    """Hold ``run_dir``'s lock for the block; RunLockedError (one line) when
    another process holds it. The lock file is removed on exit, so a refused
    or finished command leaves the directory as it found it."""
    lock = acquire(run_dir, action)
    try:
        yield lock.path
    finally:
        lock.release()


def acquire(run_dir, action):
    """Take ``run_dir``'s lock without waiting for a holder; returns a :class:`RunLock`.

    RunLockedError naming the holder when a live process holds it;
    RunDirError when the folder no longer exists (removed meanwhile)."""
    path = os.path.join(os.fspath(run_dir), layout.RESUME_LOCK)
    while True:
        try:  # non-inheritable: msrun children do not keep it; never through a link
            fd = schema.open_fd(path, os.O_RDWR | os.O_CREAT)
        except FileNotFoundError:
            raise RunDirError(f"cannot {action} {run_dir}: it no longer exists") from None
        except schema.NotAFileError as exc:
            raise RunDirError(f"cannot {action} {run_dir}: its lock {exc}; remove it "
                              "(mindexp creates the lock file itself)") from None
        except OSError as exc:  # a read-only folder (EROFS, EACCES): nothing can change there
            raise RunDirError(f"cannot {action} {run_dir}: its folder cannot be written "
                              f"({exc.strerror}); nothing was changed") from None
        if not take_lock(fd, fcntl.LOCK_EX, PROBE_PATIENCE_S):
            name = _holder_name(fd)
            os.close(fd)
            raise _refusal(run_dir, action, name)
        if _same_file(fd, path):  # not a file its last holder removed meanwhile
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} on {platform.node()} ({action})\n".encode())
            return RunLock(path, fd)
        os.close(fd)


def unwritable(path):
    """Why ``path`` (a run folder) cannot be changed: ``"<folder> is on a
    read-only file system"`` or ``"<folder> is not writable"`` for the folder
    itself or the one holding it (a removal renames it there), or None."""
    path = os.path.abspath(os.fspath(path))
    for folder in (path, os.path.dirname(path)):
        if not os.access(folder, os.W_OK):
            try:
                read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
            except OSError:
                read_only = False
            return f"{folder} is {'on a read-only file system' if read_only else 'not writable'}"
    return None


def holder(run_dir):
    """Who holds ``run_dir``'s lock (``"pid 12 on host (resume)"``), or None when
    no live process does. Creates nothing and never keeps the lock."""
    with _probed(os.path.join(os.fspath(run_dir), layout.RESUME_LOCK)) as fd:
        return None if fd is None else _holder_name(fd)


def lock_trouble(run_dir):
    """Why ``run_dir``'s lock files cannot be taken (``"<path> is a link, not a
    regular file"``), or None when each is a regular file or absent: a command
    that would take them says so before it changes anything."""
    for name in (layout.RESUME_LOCK, layout.RUN_LOCK):
        path = os.path.join(os.fspath(run_dir), name)
        try:
            os.close(schema.open_fd(path))
        except schema.NotAFileError as exc:
            return str(exc)
        except OSError:  # absent (made when taken), or unreadable: taking it says why
            continue
    return None


def lock_held(path):
    """True while a live process holds an flock on the file ``path`` (a run's
    lock, a search worker's lock); False when none does or the file is gone.
    Creates nothing and never keeps the lock."""
    with _probed(path) as fd:
        return fd is not None


@contextlib.contextmanager
def _probed(path):
    """The open lock file while a live process holds it, else None (the probe
    takes a shared lock for an instant: any holder's exclusive one refuses it)."""
    try:
        fd = schema.open_fd(path)
    except OSError:  # no lock file (nobody ever held it, or its holder ended cleanly),
        # or a link, FIFO or folder in its place, which no mindexp process can hold
        yield None
        return
    try:
        yield None if take_lock(fd, fcntl.LOCK_SH, 0) else fd
    finally:
        os.close(fd)  # releases the probe's shared lock


def refuse_if_held(run_dir, action):
    """RunLockedError (one line naming the holder) when a live process holds
    ``run_dir``'s lock; for a command that only reads the run, so it need not take it."""
    name = holder(run_dir)
    if name:
        raise _refusal(run_dir, action, name)


def _refusal(run_dir, action, name):
    return RunLockedError(f"cannot {action} {run_dir}: {name} holds it (lock file "
                          f"{layout.RESUME_LOCK}); wait for it to finish or stop it first")


def is_live(run_dir):
    """True while a process holds ``run_dir``'s lock (the one liveness rule)."""
    return holder(run_dir) is not None


def take_lock(fd, kind, patience):
    """Take an ``flock`` of ``kind`` on ``fd``, trying for ``patience`` seconds;
    False when another process held it all that time."""
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def _holder_name(fd):
    return os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"


def _same_file(fd, path):
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def create_locked(root, experiment, label=None):
    """A new run folder (``io.create_run_dir``: ``os.mkdir`` of a fresh id,
    retried on a clash) with its lock taken before anything is written in
    it; returns ``(run_dir, RunLock)``. Until run.json exists no command
    treats the folder as a run, and from then on the lock says it is live."""
    for _ in range(_START_TRIES):
        run_dir = create_run_dir(root, experiment, label)
        try:
            return run_dir, acquire(run_dir, "run")
        except (RunLockedError, RunDirError):
            # `gc` took it between the mkdir and our lock, as a start killed
            # there (lock free, no run.json): the folder goes; take another id
            continue
    raise RunDirError(f"could not start a run in {os.path.join(os.fspath(root), experiment)}: "
                      f"each of {_START_TRIES} new folders was taken away before its lock")


GONE = "running (process gone)"  # a run marked running whose lock no process holds


def shown_status(run_dir, status):
    """The status a listing shows: ``status``, except :data:`GONE` for a run
    marked ``running`` whose lock is free (it stopped without ending; resume
    continues it)."""
    if status == "running" and not is_live(run_dir):
        return GONE
    return status
