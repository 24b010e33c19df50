"""Temporary files whose writer died: removed at the next resume and by ``gc``;
folders a killed ``rm``/``gc`` left (``.<name>.removing-PID@HOST``): removed by
the next ``rm``, ``gc`` and ``runs``; run folders whose start was killed before
run.json (:func:`unstarted_run`): removed by ``gc`` when their lock is free.

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
import stat

from .. import layout

_TEMP = re.compile(r"(?:^\.tmp-(\d+)(?:@([^@/]+)@|-)(?=.))|(?:\.tmp-(\d+)(?:@([^@/]+))?$)")
# A folder ``rm``/``gc`` renamed away before deleting it (``.<name>.removing-PID@HOST``;
# older versions: ``.<name>.removing-PID``): an interrupted removal leaves it.
_REMOVING = re.compile(r"^\..+\.removing-(\d+)(?:@([^@/]+))?$")


# A run id (``io.create_run_dir``): ``YYYYmmdd-HHMMSS[-label]-xxxxxx``.
_RUN_ID = re.compile(r"^\d{8}-\d{6}(?:-.+)?-[0-9a-f]{6}$")
# What a run's start writes before run.json (the lock first, then config.json and,
# for an experiment, its provenance); a folder holding anything more is left alone.
_START_FILES = frozenset({layout.RESUME_LOCK, layout.RUN_LOCK, layout.CONFIG_JSON,
                          layout.ENVIRONMENT_FILE})
_START_DIRS = frozenset({layout.SOURCE_DIR})


def unstarted_run(path):
    """True when ``path`` is a run folder whose start was killed before its
    run.json: named like a run id, holding its lock file and nothing but what a
    start writes first (config.json, provenance, temporary files), no run.json.
    Says nothing of liveness: a starting run looks the same until run.json
    exists, so a caller removes it only under its lock (``gc``)."""
    if not _RUN_ID.match(os.path.basename(os.path.normpath(os.fspath(path)))):
        return False
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        entries = list(os.scandir(path))
    except OSError:
        return False
    names = {e.name for e in entries}
    return layout.RESUME_LOCK in names and layout.RUN_JSON not in names and all(
        _start_entry(e) for e in entries)


def _start_entry(entry):
    if _TEMP.search(entry.name):
        return not entry.is_symlink()
    if entry.name in _START_DIRS:
        return entry.is_dir(follow_symlinks=False)
    return entry.name in _START_FILES and entry.is_file(follow_symlinks=False)


def removal_name(path):
    """The hidden name ``rm``/``gc`` give ``path`` while deleting it: beside it,
    carrying this process's pid and host, so that the next ``rm``, ``gc`` or
    ``runs`` removes what a killed removal left (:func:`remove_dead_removals`)."""
    folder, name = os.path.split(os.path.normpath(os.fspath(path)))
    return os.path.join(folder, f".{name}.removing-{os.getpid()}@{platform.node()}")


def writer_pid(name):
    """The pid a temporary file's ``name`` carries, or None when it is not one."""
    found = _writer(name)
    return found[0] if found else None


def _writer(name):
    """``(pid, host)`` of a temporary file's ``name`` (host None in the older
    names, which carry none), or None when it is not one."""
    match = _TEMP.search(name)
    if not match:
        removing = _REMOVING.match(name)
        return (int(removing[1]), removing[2]) if removing else None
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


def remove_dead_removals(folders, dry_run=False):
    """Remove what killed removals left in ``folders`` themselves (not below
    them): the hidden ``.<name>.removing-PID@HOST`` folders whose remover is
    dead. Returns their paths (only those, nothing removed, with ``dry_run``)."""
    return [path for folder in dict.fromkeys(os.path.abspath(f) for f in folders)
            for path in _remove_dead_entries(folder, lambda name: bool(_REMOVING.match(name)),
                                             dry_run)]


def remove_dead_temp_files_here(folder, dry_run=False):
    """Remove the dead writers' temporary files in ``folder`` itself (not below
    it): a killed ``report`` into a folder without runs leaves one that no
    run's resume or ``gc`` looks at. Returns their paths."""
    return _remove_dead_entries(folder, lambda name: bool(_TEMP.search(name)), dry_run)


def _remove_dead_entries(folder, wanted, dry_run):
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:  # gone, or not a folder: nothing of ours to clean
        return removed
    for name in names:
        if wanted(name):
            _remove_if_dead(os.path.join(folder, name), removed, dry_run)
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
    except OSError:  # read-only, or another cleaner meanwhile: left for a later one
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
