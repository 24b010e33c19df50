"""Temporary files whose writer died: removed at the next resume and by ``gc``.

Every atomic write of mindexp goes through a temporary name that carries
its writer's pid and host (``schema.temp_name``: ``name.tmp-PID@HOST`` or
``.tmp-PID@HOST@name``; older versions wrote ``name.tmp-PID`` and
``.tmp-PID-name``, taken as this host's). A writer killed before its rename
leaves it behind (a checkpoint can be tens of MB). Such a file is removed
only when it is this host's and no process with that pid exists here (a
file of another host sharing the output root is left alone: its writer
cannot be checked from here): a live writer's file (``mindexp plot``
drawing while a resume starts) is never touched; a reused pid only keeps a
file longer. Callers look only where no live run writes: in a run whose
lock they hold, or whose lock is free.
"""
import os
import platform
import re
import shutil

_TEMP = re.compile(r"(?:^\.tmp-(\d+)(?:@([^@/]+)@|-)(?=.))|(?:\.tmp-(\d+)(?:@([^@/]+))?$)")


def writer_pid(name):
    """The pid a temporary file's ``name`` carries, or None when it is not one."""
    found = _writer(name)
    return found[0] if found else None


def _writer(name):
    """``(pid, host)`` of a temporary file's ``name`` (host None in the older
    names, which carry none), or None when it is not one."""
    match = _TEMP.search(name)
    if not match:
        return None
    return (int(match[1]), match[2]) if match[1] else (int(match[3]), match[4])


def remove_dead_temp_files(folder, skip=lambda path: False, dry_run=False):
    """Remove the temporary files (and folders) below ``folder`` whose writer is
    dead; ``skip(path)`` keeps a sub-folder out (a live run). Returns their
    paths (only those, nothing removed, with ``dry_run``)."""
    removed = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not _remove_if_dead(os.path.join(root, d), removed, dry_run)
                   and not skip(os.path.join(root, d))]
        for name in files:
            _remove_if_dead(os.path.join(root, name), removed, dry_run)
    return removed


def _remove_if_dead(path, removed, dry_run):
    found = _writer(os.path.basename(path))
    if found is None or found[1] not in (None, platform.node()) or _process_exists(found[0]):
        return False
    if dry_run:
        removed.append(path)
        return True
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        return True
    removed.append(path)
    return True


def _process_exists(pid):
    """True when a process ``pid`` exists on this host (another user's counts)."""
    if pid <= 0:
        return True  # not a pid a writer had: keep the file
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, owned by someone else
        return True
    return True
