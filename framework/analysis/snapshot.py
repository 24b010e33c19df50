"""``compare()`` of a folder as a columnar snapshot: 100,000 runs in a fraction
of a second instead of a row per run.

compare() of one folder is kept beside the run catalog
(``<root>/.mindexp-catalog/compare-<hash>.arrow``, Arrow IPC: columns, no
pickle, nothing executed on reading) with the catalog's fingerprint of the
runs it holds (:meth:`~mindexp.rundir.store.RunStore.fingerprint`: every
run's folder, run.json and config.json). It is used only while that
fingerprint is the same; a run added, removed, rewritten, still running or
unreadable makes compare() read the runs again (and write a new snapshot
when it can). The run folders stay the truth: the snapshot is derived,
written only where the catalog file is, and never trusted without the
fingerprint matching.

Cells Arrow cannot hold exactly (object columns: lists shown as tuples,
mixed types) are kept as one JSON text per value and read back as they
were; a table that does not read back equal is not kept.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os

from .. import layout
from ..callbacks import schema

logger = logging.getLogger(__name__)

VERSION = 1                       # of the file's layout; another version is not read
_META = b"mindexp.compare"        # the schema metadata key: version, fingerprint, attrs
_MAX_BYTES = 2 ** 31              # a larger file is not read (something else put it there)


def lookup(path):
    """``(file, fingerprint, table)`` for compare() of the folder ``path``:
    ``table`` is the snapshot's DataFrame when current, else None; ``file`` is
    None when no snapshot can be kept for ``path`` (a run's folder, a sweep's
    or study's, a catalog that is not a writable SQLite file, runs that must
    be read)."""
    from ..rundir.store import open_store
    from ..rundir.groups import index_name
    from ..rundir.io import is_run_dir
    if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path) or \
            is_run_dir(path) or index_name(os.fspath(path)):
        return None, None, None
    folder = os.path.abspath(os.fspath(path))
    with open_store(folder) as catalog:
        if catalog.journal not in ("wal", "delete"):
            return None, None, None
        fingerprint = catalog.fingerprint(folder)
        name = hashlib.sha256(catalog.rel_of(folder).encode()).hexdigest()[:16]
        file = os.path.join(catalog.root, layout.CATALOG, layout.COMPARE_SNAPSHOT.format(name))
    if fingerprint is None:
        return None, None, None
    return file, fingerprint, _read(file, fingerprint)


def store(file, fingerprint, table):
    """Keep ``table`` (compare()'s, unsorted) as ``file``'s snapshot of ``fingerprint``;
    nothing when it would not read back equal or cannot be written."""
    try:
        data = _encoded(table, fingerprint)
        back = _decoded(data, fingerprint)
        if back is None or not _same(table, back):
            logger.debug("compare() snapshot not kept: it would not read back equal")
            return
        schema.atomic_write(file, data)
    except (OSError, TypeError, ValueError, ImportError) as exc:
        logger.debug("compare() snapshot not kept: %s", exc)
    except Exception as exc:  # noqa: BLE001 - pyarrow's own errors: a snapshot is optional
        logger.debug("compare() snapshot not kept: %s", exc)


def _read(file, fingerprint):
    try:
        with schema.open_file(file) as f:
            if os.fstat(f.fileno()).st_size > _MAX_BYTES:
                return None
            data = f.read()
    except OSError:   # none yet, or a link, FIFO or folder put there: not read
        return None
    try:
        return _decoded(data, fingerprint)
    except Exception as exc:  # noqa: BLE001 - a damaged snapshot: compare() reads the runs
        logger.debug("compare() snapshot %s not used: %s", file, exc)
        return None


def _encoded(table, fingerprint):
    import pyarrow as pa
    as_json = [name for name in table.columns if table[name].dtype == object]
    # pandas' own metadata kept: its dtypes (text, nullable) come back as they were
    arrow = pa.Table.from_pandas(table.drop(columns=as_json), preserve_index=False)
    for name in as_json:
        arrow = arrow.append_column(name, pa.array(
            [json.dumps(_plain(v), allow_nan=True) for v in table[name]], pa.string()))
    meta = {"version": VERSION, "fingerprint": fingerprint, "json": as_json,
            "columns": list(table.columns), "attrs": table.attrs}
    arrow = arrow.replace_schema_metadata({**(arrow.schema.metadata or {}),
                                           _META: json.dumps(meta).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, arrow.schema) as writer:
        writer.write_table(arrow)
    return sink.getvalue().to_pybytes()


def _decoded(data, fingerprint):
    """The DataFrame of a snapshot's bytes when it is of ``fingerprint``, else None."""
    import numpy as np
    import pyarrow as pa
    arrow = pa.ipc.open_file(pa.py_buffer(data)).read_all()
    meta = json.loads((arrow.schema.metadata or {}).get(_META, b"{}"))
    if meta.get("version") != VERSION or meta.get("fingerprint") != fingerprint:
        return None
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
