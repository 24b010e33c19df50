"""``compare()`` of a folder through the run store, kept as a columnar snapshot
brought up to date with the store's change feed: 100,000 runs in well under a
second after a run was added, rewritten or removed, instead of a read per run.

Cold (no snapshot): the table is made from the store's cells (per finished
run a shape and a JSON array of values, :meth:`~mindexp.rundir.store.RunStore.cells`;
the values of all the runs of one shape parsed in one call) and the files of
the runs without (running, old, unreadable), a column at a time for the runs
of each shape (:func:`~.rows.columnar_frame`: the table the rows would make),
then kept beside the store (``<root>/.mindexp-catalog/compare-<hash>.arrow``, Arrow IPC:
columns, no pickle, nothing executed on reading) with the feed's token and
value it was made at.

Warm: the snapshot is decoded, the runs the feed says were written or dropped
since are taken out, the written ones put back from their cells, and every run
without cells read again from its files (a running run is never served
stale). The result is the cold table exactly (columns, their order, dtypes):
each row's shape (its config fields, eval metrics, columns and the types of
its values) is kept with it, so the table's columns and dtypes are worked out
again from the distinct shapes alone; a change that would alter them (a new
config field, a new type in a column) makes the table cold again. The file is
rewritten only when the runs changed since it was made exceed
:data:`REWRITE_SHARE` of its rows: writing it costs about ten times applying
a few changes, so a read after one change costs decode + a few rows, and the
changes piled up since are never more than that share.

The run folders stay the truth: the snapshot is derived, written only where
the store's SQLite file is, and never trusted from another store (the feed's
token) or another folder.

Cells Arrow cannot hold exactly (object columns: lists shown as tuples,
mixed types) are kept as one JSON text per value and read back as they
were; a table that does not read back equal is not kept.
"""
from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import hashlib
import json
import logging
import os
from typing import TYPE_CHECKING, NamedTuple

from .. import layout
from ..callbacks import schema
from ..rundir.summary import flat_cells
from .rows import (column_order, columnar_frame, file_cells, part_keys, rows_of, shape_runs,
                   table_config, union_keys, unreadable_rows, warn_skipped)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from ..rundir.store import RunStore, StoredCells

logger = logging.getLogger(__name__)

VERSION = 2                       # of the file's layout; another version is not read
_META = b"mindexp.compare"        # the schema metadata key: version, feed, shapes, attrs
_MAX_BYTES = 2 ** 31              # a larger file is not read (something else put it there)
REWRITE_SHARE = 0.01              # of the rows changed since the snapshot: write it again


class Kept(NamedTuple):
    """compare()'s table of a folder (unsorted: runs in folder order, then the
    unreadable ones) and what brings it up to date: each row's shape (an index
    into ``shapes``: ``(unreadable, config fields, eval metrics, columns, type
    names)``), the feed's token and value it is of, and the config columns."""
    table: pd.DataFrame
    codes: np.ndarray
    shapes: list
    token: str
    seq: int
    config: dict


def folder_table(path) -> pd.DataFrame | None:
    """compare()'s table (unsorted) of the runs at or below the folder ``path``
    through the run store; None when ``path`` is no such folder (a run's, a
    sweep's or study's) or no run below it can be read (the caller reads them
    and says why)."""
    from ..rundir.groups import index_name
    from ..rundir.io import is_run_dir
    from ..rundir.store import open_store
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path) or \
            is_run_dir(path) or index_name(os.fspath(path)):
        return None
    folder = os.path.abspath(os.fspath(path))
    with open_store(folder) as store:
        file = _file_of(store, folder)
        kept = _read(file, folder) if file else None
        changed: int | None
        fresh, changed = _updated(kept, store, folder) if kept else (None, 0)
        if fresh is None:
            with _collector_paused():
                fresh, changed = _from_store(store, folder), None
    if fresh is None:
        return None
    if file and (changed is None or changed > REWRITE_SHARE * len(fresh.table)):
        _write(file, fresh, folder)
    return fresh.table


def _file_of(store: RunStore, folder: str) -> str | None:
    """The snapshot file of ``folder``: only beside a writable SQLite store."""
    if store.journal not in ("wal", "delete"):
        return None
    name = hashlib.sha256(store.rel_of(folder).encode()).hexdigest()[:16]
    return os.path.join(store.root, layout.CATALOG, layout.COMPARE_SNAPSHOT.format(name))


# -- cold: from the store's cells ---------------------------------------------------

def _from_store(store: RunStore, folder: str) -> Kept | None:
    """The table made from every run's cells, a column at a time for the runs of
    each shape (the runs without cells: from their files)."""
    token, seq = store.feed()   # first: a write racing this read is applied next time
    gathered, errors = _gathered(store, store.cells(folder))
    if not gathered:
        return None
    warn_skipped(errors)
    config = table_config(runs.shape for runs in gathered)
    groups = [shape_runs(runs.positions, runs.shape, runs.parsed(), runs.dirs, config)
              for runs in gathered]
    extra = unreadable_rows(errors, tags="", note="")
    shapes, codes = _group_shapes(gathered, groups, extra)
    # the distinct shapes in order of first appearance name what every row does
    table = columnar_frame(groups, extra, config, union_keys(s[2] for s in shapes if not s[0]),
                           column_order([dict.fromkeys(s[3]) for s in shapes], config))
    return Kept(table, codes, shapes, token, seq, config)


class _Gathered:
    """The runs of one shape, as the store lists them: their rows' positions,
    folders and values (a JSON text each until :meth:`parsed`)."""

    def __init__(self, shape):
        self.shape, self.positions, self.dirs, self.values = shape, [], [], []

    def parsed(self):
        """Each run's values, the JSON texts parsed in one call."""
        texts = [v for v in self.values if isinstance(v, str)]
        parsed = json.loads("[" + ",".join(texts) + "]")
        if len(texts) == len(self.values):
            return parsed
        rest = iter(parsed)
        return [next(rest) if isinstance(v, str) else v for v in self.values]

    def entries(self):
        """``[(run_dir, shape, values)]`` (:meth:`parsed`)."""
        return [(run_dir, self.shape, v) for run_dir, v in zip(self.dirs, self.parsed())]


def _gathered(store: RunStore, stored: StoredCells) -> tuple[list[_Gathered], list]:
    """``(runs by shape in order of their first row, errors)`` of the store's cells
    (the runs without: their cells read from their files)."""
    by_shape: dict[tuple, _Gathered] = {}
    by_id: dict[str, _Gathered] = {}
    errors, position = [], 0
    for rel, shape_id, text in stored.rows:
        run_dir, runs, values = _folder(store, rel), None, text
        if shape_id is not None and shape_id in stored.shapes:
            runs = by_id.get(shape_id)
            if runs is None:
                shape = tuple(map(tuple, json.loads(stored.shapes[shape_id])))
                runs = by_id[shape_id] = by_shape.setdefault(shape, _Gathered(shape))
        if runs is None:   # no cells (or a shape the store lost): the run's files
            cells, skipped = file_cells(run_dir)
            if cells is None:
                errors += [skipped] if skipped is not None else []
                continue
            shape, values = flat_cells(cells)
            runs = by_shape.setdefault(shape, _Gathered(shape))
        runs.positions.append(position)
        runs.dirs.append(run_dir)
        runs.values.append(values)
        position += 1
    return list(by_shape.values()), errors


def _group_shapes(gathered, groups, extra):
    """``(shapes, codes)`` of the rows of ``groups`` then ``extra``, as
    :func:`_shapes_of` gives them row by row: a group's rows share a shape
    but where a column made from the cells holds several types."""
    import numpy as np
    found: dict[tuple, list] = {}   # shape: [its first row, its rows]
    for runs, group in zip(gathered, groups):
        head = (False, tuple(part_keys(runs.shape, "config")),
                tuple(part_keys(runs.shape, "eval")), tuple(group.columns))
        varied = [name for name, types in group.types.items() if len(types) > 1]
        one = {name: next(iter(types)).__name__ for name, types in group.types.items()}
        rows_of_kind = _split(group, varied) if varied else {(): group.positions}
        for kind, positions in rows_of_kind.items():
            named = one | dict(zip(varied, kind))
            key = head + (tuple(named[name] for name in group.columns),)
            first = found.setdefault(key, [positions[0], []])
            first[0] = min(first[0], positions[0])
            first[1].extend(positions)
    shapes = sorted(found, key=lambda key: found[key][0])
    codes = np.empty(sum(len(g.positions) for g in groups) + len(extra), dtype=np.int32)
    for code, key in enumerate(shapes):
        codes[found[key][1]] = code
    shapes, extra_codes = _shapes_of(extra, [None] * len(extra), shapes)
    codes[len(codes) - len(extra):] = extra_codes
    return shapes, codes


def _split(group, varied):
    """``{type names of the ``varied`` columns: the rows of the group that have them}``."""
    kinds = zip(*([type(v).__name__ for v in group.columns[name]] for name in varied))
    out: dict[tuple, list] = {}
    for position, kind in zip(group.positions, kinds):
        out.setdefault(kind, []).append(position)
    return out


@contextlib.contextmanager
def _collector_paused():
    """Python's cycle collector off for the block, as it was after. A cold table
    of 100,000 runs parses millions of dicts and lists and makes their rows, none
    in a cycle: the collector would walk them again and again (a fifth of the time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _folder(store, rel):
    """The folder of this host's run ``rel`` (as the store lists it)."""
    return store.location(store.host, store.key_root, rel)


def _row_parts(entries, rows):
    """``[(config fields, eval metrics) or None]`` per row of :func:`~.rows.rows_of`
    (None: unreadable)."""
    return [(tuple(part_keys(shape, "config")), tuple(part_keys(shape, "eval")))
            for _, shape, _ in entries] + [None] * (len(rows) - len(entries))


def _shapes_of(rows: list[dict], parts: list, shapes: list | None = None):
    """``(shapes, codes)``: each row's shape (``(unreadable, config fields, eval
    metrics, columns, type names of its values)``) as an index into ``shapes``,
    new shapes added at its end; ``parts``: each row's config fields and eval
    metrics, None when unreadable. Runs of one experiment share a few shapes."""
    import numpy as np
    shapes = list(shapes or [])
    index = {_key(shape): k for k, shape in enumerate(shapes)}
    codes = np.empty(len(rows), dtype=np.int32)
    for i, (row, own) in enumerate(zip(rows, parts)):
        key = (own is None, own[0] if own else (), own[1] if own else (), tuple(row),
               tuple(map(type, row.values())))
        code = index.get(key)
        if code is None:
            code = index[key] = len(shapes)
            shapes.append(key[:4] + (tuple(t.__name__ for t in key[4]),))
        codes[i] = code
    return shapes, codes


def _key(shape):
    """A stored shape as :func:`_shapes_of` looks it up (type names back to types)."""
    return shape[:4] + (tuple(_TYPES.get(name, name) for name in shape[4]),)


_TYPES = {t.__name__: t for t in (int, float, bool, str, tuple, type(None))}


# -- warm: the snapshot and the feed's changes ------------------------------------------

def _updated(kept: Kept, store: RunStore, folder: str) -> tuple[Kept | None, int]:
    """``(kept brought up to date, the runs changed since it was made)``; None
    when it cannot be (another feed, a rebuild, a change of columns or dtypes)."""
    token, seq = store.feed()   # first: a write racing this read is applied next time
    if token != kept.token:
        return None, 0
    changes = store.changes(folder, kept.seq)
    if changes.dropped is None:
        return None, 0
    redo = sorted(set(changes.changed) | set(store.uncelled(folder)))
    gone = {_folder(store, rel) for rel in redo + changes.dropped}
    if not gone:   # nothing changed, nothing running: the snapshot as it is
        return kept._replace(seq=seq), 0
    keep = ~kept.table["run_dir"].isin(gone).to_numpy()
    entries, errors = _entries(store, redo)
    rows = rows_of(entries, errors, kept.config)
    shapes, codes = _shapes_of(rows, _row_parts(entries, rows), kept.shapes)
    table = _spliced(kept, keep, rows, codes, shapes)
    if table is None:
        return None, 0
    warn_skipped(errors)
    merged = Kept(table[0], table[1], shapes, kept.token, seq, kept.config)
    return merged, len(changes.changed) + len(changes.dropped)


def _entries(store, rels):
    """``(entries, errors)`` of the runs ``rels``: from their cells, else their files."""
    gathered, errors = _gathered(store, store.cells_of(rels))
    entries = sorted((entry for runs in gathered for entry in runs.entries()),
                     key=lambda entry: entry[0])
    return entries, errors


def _spliced(kept, keep, rows, codes, shapes):
    """``(table, codes)``: ``kept``'s rows of ``keep`` (a mask) and ``rows`` (with
    their shape ``codes``) in the cold table's order; None when the columns or
    their dtypes would not be the cold table's."""
    import numpy as np
    import pandas as pd
    kept_at = np.flatnonzero(keep)   # the rows kept, as positions in the old table
    dirs = kept.table["run_dir"].to_numpy()[kept_at].tolist()
    readable = sum(1 for c in kept.codes[kept_at].tolist() if not shapes[c][0])   # then the rest
    new = sorted(range(len(rows)), key=lambda i: (shapes[codes[i]][0], rows[i]["run_dir"]))
    at = [bisect.bisect_left(dirs, rows[i]["run_dir"], *((readable, len(dirs)) if
                                                          shapes[codes[i]][0] else (0, readable)))
          for i in new]
    # positions in old table + new rows, in the cold table's order: one copy of the frame
    order = np.insert(kept_at, at, len(kept.table) + np.arange(len(new)))
    all_codes = np.concatenate([kept.codes, codes[new]]).astype(np.int32)[order]
    if not _same_columns(pd.unique(all_codes), shapes, kept):
        return None
    added = pd.DataFrame([rows[i] for i in new], columns=kept.table.columns,
                         dtype=object).astype(kept.table.dtypes.to_dict())
    merged = pd.concat([kept.table, added], ignore_index=True).take(order).reset_index(drop=True)
    merged.attrs = dict(kept.table.attrs)
    return merged, all_codes


def _same_columns(distinct, shapes, kept):
    """Whether rows of the ``distinct`` shapes (in order of first appearance)
    make a table of ``kept``'s config fields, eval metrics, columns and dtypes."""
    table, used = kept.table, [shapes[c] for c in distinct]
    readable = [shape for shape in used if not shape[0]]
    if union_keys(s[1] for s in readable) != list(kept.config) or \
            union_keys(s[2] for s in readable) != table.attrs.get("eval_columns"):
        return False
    columns = column_order([dict.fromkeys(s[3]) for s in used], kept.config)
    if columns != list(table.columns):
        return False
    types = {c: set() for c in columns}
    for shape in used:
        named = dict(zip(shape[3], shape[4]))
        for column in columns:
            types[column].add(named.get(column, "missing"))
    return all(_dtype_of(frozenset(types[c])) == table.dtypes[c] for c in columns)


_SAMPLES = {"int": 1, "float": 0.5, "bool": True, "str": "a", "tuple": ("a",), "NoneType": None}


@functools.lru_cache(maxsize=256)
def _dtype_of(types):
    """The dtype pandas gives a column of values of these types (``missing``: a
    row without the column), as it does for compare()'s rows; None for a type
    not sampled here."""
    import pandas as pd
    if not types <= set(_SAMPLES) | {"missing"}:
        return None
    rows = [{"c": _SAMPLES[t]} if t != "missing" else {} for t in sorted(types)]
    return pd.DataFrame(rows, columns=["c"]).dtypes["c"]


# -- the file ---------------------------------------------------------------------------

def _write(file, kept, folder):
    """Keep ``kept`` as ``file``; nothing when it would not read back equal or
    cannot be written."""
    try:
        data = _encoded(kept, folder)
        back = _decoded(data, folder)
        if back is None or not _same(kept.table, back.table):
            logger.debug("compare() snapshot not kept: it would not read back equal")
            return
        schema.atomic_write(file, data)
    except (OSError, TypeError, ValueError, ImportError) as exc:
        logger.debug("compare() snapshot not kept: %s", exc)
    except Exception as exc:  # noqa: BLE001 - pyarrow's own errors: a snapshot is optional
        logger.debug("compare() snapshot not kept: %s", exc)


def _read(file, folder):
    try:
        with schema.open_file(file) as f:
            if os.fstat(f.fileno()).st_size > _MAX_BYTES:
                return None
            data = f.read()
    except OSError:   # none yet, or a link, FIFO or folder put there: not read
        return None
    try:
        return _decoded(data, folder)
    except Exception as exc:  # noqa: BLE001 - a damaged snapshot: compare() reads the store
        logger.debug("compare() snapshot %s not used: %s", file, exc)
        return None


_CODES = "\0shape"   # the column of each row's shape code (no column of compare()'s)


def _encoded(kept, folder):
    import pyarrow as pa
    table = kept.table
    as_json = [name for name in table.columns if table[name].dtype == object]
    # pandas' own metadata kept: its dtypes (text, nullable) come back as they were
    arrow = pa.Table.from_pandas(table.drop(columns=as_json), preserve_index=False)
    for name in as_json:   # few distinct values: each written once
        codes, values = _distinct(table[name].tolist())
        texts = pa.array([json.dumps(_plain(v), allow_nan=True) for v in values], pa.string())
        arrow = arrow.append_column(name, pa.DictionaryArray.from_arrays(
            pa.array(codes, pa.int32()), texts).cast(pa.string()))
    arrow = arrow.append_column(_CODES, pa.array(kept.codes, pa.int32()))
    meta = {"version": VERSION, "folder": folder, "token": kept.token, "seq": kept.seq,
            "shapes": kept.shapes, "config": kept.config, "json": as_json,
            "columns": list(table.columns), "attrs": table.attrs}
    arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}),
                                           _META: json.dumps(meta).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, arrow.schema) as writer:
        writer.write_table(arrow)
    return sink.getvalue().to_pybytes()


def _distinct(values):
    """``(code per value, distinct values)``; None, NaN and each type kept apart
    (``True`` is not ``1``; pandas' factorize takes None for NaN)."""
    index, distinct = {}, []
    codes = []
    for value in values:
        key = (type(value), value if value == value else "NaN")
        code = index.get(key)
        if code is None:
            code = index[key] = len(distinct)
            distinct.append(value)
        codes.append(code)
    return codes, distinct


def _decoded(data, folder):
    """The :class:`Kept` of a snapshot's bytes when it is of ``folder``, else None."""
    import pyarrow as pa
    arrow = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    meta = json.loads((arrow.schema.metadata or {}).get(_META, b"{}"))
    if meta.get("version") != VERSION or meta.get("folder") != folder:
        return None
    codes = arrow.column(_CODES).to_numpy()
    table = _table_of(arrow.drop_columns([_CODES]), meta)
    shapes = [(bool(s[0]),) + tuple(tuple(part) for part in s[1:]) for s in meta["shapes"]]
    return Kept(table, codes, shapes, meta["token"], meta["seq"], meta["config"])


def _table_of(arrow, meta):
    import numpy as np
    as_json = set(meta["json"])
    columns = {}
    for name in meta["columns"]:
        column = arrow.column(name)
        if name in as_json:   # few distinct values: each read once
            coded = column.combine_chunks().dictionary_encode()
            values = np.empty(len(coded.dictionary), dtype=object)
            values[:] = [_tuples(json.loads(t)) for t in coded.dictionary.to_pylist()]
            columns[name] = values[coded.indices.to_numpy(zero_copy_only=False)]
    plain = arrow.drop_columns(list(as_json)).to_pandas()
    for name, values in columns.items():
        plain[name] = values
    table = plain[meta["columns"]]
    table.attrs.update(meta["attrs"])
    return table


def _plain(value):
    """A cell as JSON can hold it (tuples as lists: read back as tuples)."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise TypeError(f"a cell of type {type(value).__name__}")


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _same(table, back):
    return list(table.columns) == list(back.columns) and \
        list(table.dtypes) == list(back.dtypes) and table.equals(back) and \
        table.attrs == back.attrs
