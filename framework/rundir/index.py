"""Finding runs on disk: every run folder below a folder, with the signature of
its run.json and config.json (one ``lstat`` each), for the dashboard's change
feed. The table of runs that listings query is the catalog
(:mod:`.catalog`), which replaced the JSON summary index kept here before.
"""
import os
import stat

from .. import layout


def found_runs(root: str) -> list[tuple[str, list[int]]]:
    """``(run_dir, signature)`` of every run below ``root``, in sorted order, as
    reports find them (a folder with run.json; hidden folders skipped; a run's
    own subfolders not searched): one stat per folder instead of a listing."""
    found, stack = [], [root]
    while stack:
        folder = stack.pop()
        signature = _signature(folder)
        if signature is not None:
            found.append((folder, signature))
            continue
        try:
            with os.scandir(folder) as entries:
                stack.extend(e.path for e in entries
                             if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))
        except OSError:
            continue
    return sorted(found)


def _signature(folder):
    """``[size, mtime_ns, inode]`` of run.json and config.json, or None when
    ``folder`` holds no run.json (config.json may be missing: ``[]``).

    Not followed (``lstat``): a link, FIFO or folder named run.json still
    makes a run, which its reader reports as unreadable."""
    out = []
    for name in (layout.RUN_JSON, layout.CONFIG_JSON):
        try:
            st = os.lstat(os.path.join(folder, name))
        except OSError:
            if name == layout.RUN_JSON:
                return None
            continue
        out += [st.st_size, st.st_mtime_ns, st.st_ino, stat.S_IFMT(st.st_mode)]
    return out
