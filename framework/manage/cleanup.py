"""``mindexp rm`` and ``mindexp gc``: remove runs (never a live one: a process
holds its lock, see ``rundir.run_lock``), sweep and study folders with their
runs, and the runs' entries in the sweep and study indexes that name them.

A removal takes the run's lock (refused when held) and keeps it while it
first renames the run directory to a hidden name beside it (one
atomic step: listings stop seeing it at once), then drops it from every
index (rewritten atomically under the index folder's lock), then deletes
the files. An interrupted removal leaves a hidden folder, never a half run.
"""
import glob
import os
import shutil

from ..errors import MindexpError, RunDirError
from ..callbacks.direction import UnknownDirectionError, metric_direction
from ..rundir.io import is_run_dir, read_json, write_json
from ..rundir.meta import read_meta
from .runs import short_path
from .show import disk_size, find_run, human_size
from ..rundir.store import run_removed
from ..rundir.record import locked
from ..rundir.run_lock import acquire, holder, lock_trouble, unwritable

from ..rundir import groups
from ..rundir.groups import INDEX_FILES, INDEX_LISTS
from ..rundir.groups import index_name as _index_name, layout_key as _layout_key


class Target:
    """One run to remove (``run_dir``), or a group folder (``folder``) going with its runs."""

    def __init__(self, path, meta=None, group=False):
        self.path, self.meta, self.group = os.path.abspath(path), meta or {}, group
        self.size = disk_size(self.path)

    @property
    def label(self):
        if self.group:
            return f"{short_path(self.path)}  ({_index_name(self.path)} folder)"
        return f"{short_path(self.path)}  ({self.meta.get('status')})"


def plan_rm(specs, root="outputs"):
    """The targets of ``mindexp rm SPEC...``: run directories or run ids, and
    sweep or study folders (with every run their index names).

    Raises MindexpError naming what is not a run or a group folder, and the
    live runs (a process holds their lock); then nothing is removed.
    """
    targets = {}
    for spec in specs:
        if os.path.isdir(spec) and _index_name(spec):
            for run_dir in index_runs(spec):
                targets.setdefault(run_dir, Target(run_dir, read_meta(run_dir)))
            targets.setdefault(os.path.abspath(spec), Target(spec, group=True))
        elif os.path.isdir(spec) and not is_run_dir(spec):
            raise RunDirError(f"{spec} is not a run directory, a sweep folder or a study folder; "
                              "to remove many runs of a folder use mindexp gc FOLDER. "
                              f"Received: {spec!r}")
        else:
            run = find_run(spec, root)
            targets.setdefault(run.dir, Target(run.dir, run.meta))
    refuse_running(targets.values())
    return list(targets.values())


def refuse_running(targets):
    """MindexpError naming the live runs (a process holds their lock) and their
    holders, or the runs whose lock is not a regular file (a link, a FIFO)."""
    troubled = [(t, lock_trouble(t.path)) for t in targets if not t.group]
    troubled = [(t, why) for t, why in troubled if why]
    if troubled:
        raise MindexpError(f"refusing to remove {len(troubled)} run(s) whose lock file is not "
                           f"a regular file: {troubled[0][1]}; remove that file (mindexp makes "
                           "its own). Nothing was removed.")
    fixed = [(t, unwritable(t.path)) for t in targets]
    fixed = [(t, why) for t, why in fixed if why]
    if fixed:
        raise MindexpError(f"refusing to remove {len(fixed)} run(s) or folder(s) that cannot be "
                           f"changed: {fixed[0][1]}. Nothing was removed.")
    alive = [(t, holder(t.path)) for t in targets if not t.group]
    alive = [(t, name) for t, name in alive if name]
    if alive:
        names = ", ".join(f"{t.path} ({name} holds it)" for t, name in alive)
        raise MindexpError(f"refusing to remove {len(alive)} live run(s): {names}; wait for it "
                           f"to finish or stop it first. Nothing was removed.")


def plan_gc(table, keep_best=None, by="final_loss"):
    """Targets from the selected rows of a runs table (see :mod:`.runs`): live
    runs are left out (each with its lock's holder), and with ``keep_best`` the
    K best of each experiment by ``by`` are kept; so is a run whose lock file is
    not a regular file (taking it would follow a link), and one that cannot be
    changed (a read-only folder). Returns ``(targets, kept)``,
    ``kept`` a list of ``(Target, why)``, ``why`` ending "it is live (... holds it)"
    or naming the lock file that is not a file."""
    rows = table
    if keep_best:
        rows = _drop_best(rows, keep_best, by)
    targets, kept = [], []
    for run_dir in rows["run_dir"]:
        target = Target(run_dir, read_meta(run_dir))
        live, trouble = holder(run_dir), lock_trouble(run_dir)
        fixed = unwritable(run_dir)
        if live:
            kept.append((target, f"it is live ({live} holds it)"))
        elif fixed:
            kept.append((target, fixed))
        elif trouble:
            kept.append((target, f"{trouble}; remove that file (mindexp makes its own)"))
        else:
            targets.append(target)
    return targets, kept


def remove_leftovers(paths, dry_run=False):
    """The temporary files below ``paths`` whose writer is dead (a killed
    checkpoint write, a killed ``report``), outside live runs; removed unless
    ``dry_run``. Returns their paths."""
    from ..rundir.leftovers import remove_dead_temp_files
    found = []
    for path in paths:
        if os.path.isdir(path):
            found += remove_dead_temp_files(path, lambda d: is_run_dir(d) and bool(holder(d)),
                                            dry_run)
    return found


def remove_unstarted_runs(paths, dry_run=False):
    """Run folders below ``paths`` (themselves, their folders and those folders'
    folders: an output root, an experiment, a run) whose start was killed before
    run.json (:func:`mindexp.rundir.leftovers.unstarted_run`) and whose lock no
    process holds: each is removed under its lock, checked again once held (a
    start takes its lock right after ``mkdir``; one that finds its folder taken
    or gone picks another id). Removed unless ``dry_run``; returns their paths."""
    from ..rundir.leftovers import unstarted_run
    found = []
    for run_dir in _folders_below(paths, depth=2):
        if not unstarted_run(run_dir) or holder(run_dir) or lock_trouble(run_dir):
            continue
        if dry_run:
            found.append(run_dir)
        elif _remove_unstarted(run_dir):
            found.append(run_dir)
    return found


def _folders_below(paths, depth):
    """``paths`` and the real folders below them to ``depth`` levels, links not followed."""
    level = [os.path.abspath(p) for p in paths]
    for _ in range(depth + 1):
        below = []
        for folder in level:
            yield folder
            try:
                below += [e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
            except OSError:  # gone, unreadable or not a folder: nothing to clean there
                continue
        level = below


def _remove_unstarted(run_dir):
    from ..rundir.leftovers import unstarted_run
    try:
        lock = acquire(run_dir, "remove")
    except (MindexpError, OSError):  # taken meanwhile (a start) or gone: not ours
        return False
    try:
        if not unstarted_run(run_dir):  # its run.json came before the lock was ours
            return False
        _delete(_hide(run_dir))
        return True
    except OSError:  # read-only, or removed meanwhile: left for a later gc
        return False
    finally:
        lock.release()


def _drop_best(table, keep, by):
    if by not in table.columns:
        raise MindexpError(f"--by names an unknown column {by!r}; valid columns: "
                           f"{', '.join(map(str, table.columns))}. Received: --by {by}")
    import pandas as pd
    ascending = _direction_of(by) == "min"
    values = pd.to_numeric(table[by], errors="coerce")
    ranked = table.assign(_value=values).sort_values("_value", ascending=ascending,
                                                     na_position="last", kind="stable")
    best = ranked.groupby("experiment", dropna=False, sort=False).head(keep).index
    return table.drop(index=best)


def _direction_of(by):
    """The rule of :mod:`mindexp.callbacks.direction`; a column it cannot read is refused."""
    try:
        return metric_direction(by)
    except UnknownDirectionError:
        raise MindexpError(f"--by {by}: cannot tell whether a lower or a higher {by} is better; "
                           "accepted: a column whose name says it (final_loss, min_loss, eval_loss, "
                           f"eval_accuracy, best_eval_f1, ...). Received: --by {by}") from None


def describe(targets):
    """Lines listing what will go, then the total."""
    runs = [t for t in targets if not t.group]
    groups = len(targets) - len(runs)
    lines = [f"  {t.label}  {human_size(t.size)}" for t in targets]
    total = human_size(sum(t.size for t in targets if t.group or not _inside_group(t, targets)))
    what = f"{len(runs)} run(s)" + (f" and {groups} sweep/study folder(s)" if groups else "")
    return lines, f"{what}, {total}"


def _inside_group(target, targets):
    return any(t.group and target.path.startswith(t.path + os.sep) for t in targets)


def remove(targets, failed=None):
    """Remove runs first (each under its lock: RunLockedError when a process
    took it since the plan), then the group folders. A target the file
    system refuses to change (read-only, permission) is left and, when
    ``failed`` is a list, ``(path, why)`` is appended to it (else the
    OSError propagates); the others are still removed."""
    removed = []
    for target in sorted(targets, key=lambda t: t.group):
        if not os.path.exists(target.path):
            continue  # inside a group folder removed already, or removed meanwhile
        try:
            if target.group:
                _delete(_hide(target.path))
            else:
                _remove_run(target)
        except (OSError, RunDirError) as exc:
            if failed is None:
                raise
            failed.append((target.path, getattr(exc, "strerror", None) or str(exc)))
            continue
        removed.append(target.path)
    return removed


def _delete(path):
    """Delete a hidden run or group folder; a symlink goes itself, never its target."""
    if os.path.islink(path):
        os.unlink(path)
    else:
        shutil.rmtree(path)


def _remove_run(target):
    if os.path.islink(target.path):  # only the link goes: its target's run is not touched
        drop_from_indexes(target.path, target.meta.get("run_id"))
        run_removed(target.path)
        _delete(_hide(target.path))
        return
    lock = acquire(target.path, "remove")
    try:  # held until the files are gone: no resume can start in it meanwhile
        hidden = _hide(target.path)
        drop_from_indexes(target.path, target.meta.get("run_id"))
        run_removed(target.path)
        _delete(hidden)
    finally:
        lock.release()


def _hide(path):
    from ..rundir.leftovers import removal_name
    hidden = removal_name(path)
    os.rename(path, hidden)
    return hidden


# -- indexes -------------------------------------------------------------------------

def index_runs(folder):
    """The run directories a sweep or study folder's index names, earlier
    attempts included (:func:`mindexp.rundir.groups.index_runs`)."""
    return groups.index_runs(folder, previous=True, refusal="refusing to remove anything")


def drop_from_indexes(run_dir, run_id=None):
    """Remove the run from every sweep/study index under its output root; returns
    the index files rewritten."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(run_dir)))
    rewritten = []
    for name in INDEX_FILES:
        for path in sorted(glob.glob(os.path.join(root, "*", "*", name))):
            if _drop_entry(path, os.path.abspath(run_dir), run_id):
                rewritten.append(path)
    return rewritten


def _drop_entry(path, run_dir, run_id):
    with locked(os.path.dirname(path)):
        try:
            data = read_json(path)
        except RunDirError:
            return False
        changed = False
        for key in INDEX_LISTS:
            entries = data.get(key) if isinstance(data, dict) else None
            if isinstance(entries, list):
                kept = [e for e in entries if not _names(e, run_dir, run_id)]
                changed |= len(kept) != len(entries)
                data[key] = kept
        if changed:
            write_json(path, data)
        return changed


def _names(entry, run_dir, run_id):
    if not isinstance(entry, dict):
        return False
    if entry.get("run_dir"):
        return _layout_key(entry["run_dir"]) == _layout_key(run_dir)
    return run_id is not None and entry.get("run_id") == run_id

