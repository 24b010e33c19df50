"""``mindexp runs ROOT --count``: how many runs of each status the listing would
show, by the same filters and ``--where``. One folder with a run catalog is
answered by one grouped query (and, when some runs are running, one more that
matches them on their live loss, as the listing does); anything else by the
runs table the listing falls back to.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .. import layout
from ..rundir.store import open_store
from ..rundir.meta import UNREADABLE
from . import queried
from .filters import STATUSES

if TYPE_CHECKING:
    from .filters import Filters


def counts(paths: list[str], filters: Filters, url: str | None = None,
           rebuild: bool = False) -> dict[str, int]:
    """``{status: runs}`` of the runs ``mindexp runs PATHS`` would list with
    ``filters``, statuses in their usual order, ``unreadable`` always there."""
    found = _catalog_counts(paths[0], filters, url, rebuild) if len(paths) == 1 else None
    if found is None:
        from . import runs
        table = runs.select(runs.runs_table(paths), filters)
        found = {str(k): int(v) for k, v in table["status"].value_counts().items()} \
            if len(table) else {}
    order = {status: i for i, status in enumerate(STATUSES)}
    ordered = dict(sorted(found.items(), key=lambda item: (order.get(item[0], len(order)),
                                                           item[0])))
    ordered.pop(UNREADABLE, None)
    return ordered | {UNREADABLE: found.get(UNREADABLE, 0)}


def _catalog_counts(path, filters, url, rebuild):
    """The counts from the catalog of ``path``, or None when it cannot answer."""
    if not os.path.isdir(path) or os.path.lexists(os.path.join(path, layout.RUN_JSON)):
        return None
    catalog = open_store(path, url=url, rebuild=rebuild)
    try:
        plan = queried.plan(catalog, os.path.abspath(path), filters)
        if plan is None:
            return None
        return queried.counts(catalog, plan)
    finally:
        catalog.close()
