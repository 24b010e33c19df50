"""A fingerprint of the data a run trained on: what each split's ``source()`` returned.

- arrays in memory: each column's shape, dtype and the SHA-256 of its bytes;
- memory-mapped arrays (``np.load(path, mmap_mode="r")``), lazy sources and
  MindSpore datasets of samples: the files on disk they name (path, size,
  modification time; a folder: its files' count and total size, its newest
  time), the number of samples and the source's type; the files' content
  hashed only when the config asks (``data_fingerprint = "content"``: a data
  set on disk may be large).

Each value a run records is a small JSON dict; :func:`summary` flattens one
into ``{name: text}`` lines for ``show`` and ``diff``.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import os
from typing import Any, Iterable

import numpy as np

MODES = ("stat", "content", "off")   # config field data_fingerprint
_READ = 1 << 20
_MAX_PATHS = 64   # paths recorded per split; a folder counts as one


def fingerprint(data: Any, columns: Iterable[str], content: bool = False) -> dict[str, Any] | None:
    """The fingerprint of one split as preflight loaded it (arrays, ``LazyRows``,
    ``SampleSource`` or ``Finished``); None for no split."""
    from ..define.sources import Finished, LazyRows, SampleSource
    if data is None:
        return None
    if isinstance(data, tuple):
        return {"kind": "arrays", "samples": len(data[0]) if data else 0,
                "columns": [_array(name, a, content) for name, a in zip(columns, data)]}
    if isinstance(data, LazyRows):
        return _on_disk("lazy", data.source, len(data), content)
    if isinstance(data, SampleSource):  # a fresh dataset, as each fit makes one
        return _on_disk("mindspore dataset", data.make(), len(data), content)
    if isinstance(data, Finished):
        return _on_disk("the experiment's dataset()", data.exp.dataset(data.split), None, content)
    return {"kind": type(data).__name__, "samples": None}


def _array(name: str, array: Any, content: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "shape": list(np.shape(array)),
                           "dtype": str(getattr(array, "dtype", type(array).__name__))}
    path = getattr(array, "filename", None)
    if isinstance(array, np.memmap) and path:  # on disk: its file, hashed when asked
        out["file"] = _file(os.fspath(path), content)
        if not content:
            return out
    out["sha256"] = _array_hash(array)
    return out


def _array_hash(array: Any) -> str:
    digest = hashlib.sha256()
    flat = np.ascontiguousarray(array).reshape(-1)
    step = max(1, _READ // max(flat.itemsize, 1))
    for start in range(0, flat.size, step):  # a memory-mapped array page by page
        digest.update(np.ascontiguousarray(flat[start:start + step]).tobytes())
    return digest.hexdigest()


def _on_disk(kind: str, source: Any, samples: int | None, content: bool) -> dict[str, Any]:
    paths = sorted(set(_paths(source)))[:_MAX_PATHS]
    out: dict[str, Any] = {"kind": kind, "type": _type_name(source), "samples": samples,
                           "files": [_file(p, content) for p in paths]}
    if not paths:
        out["note"] = "names no file on disk (no path attribute found)"
    return out


def _type_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _paths(obj: Any, depth: int = 0, seen: set[int] | None = None) -> Iterable[str]:
    """Existing files and folders an object names in its attributes (strings,
    ``PathLike``s, lists of them), and in those of the objects it wraps: a
    ``Lazy``'s source, a dataset's children (two levels of objects)."""
    seen = set() if seen is None else seen
    if obj is None or id(obj) in seen or depth > 3:
        return
    seen.add(id(obj))
    try:
        values = list(vars(obj).values())
    except TypeError:  # no __dict__
        return
    for value in values:
        if isinstance(value, (str, os.PathLike)):
            yield from _existing([value])
        elif isinstance(value, (list, tuple)) and value and len(value) <= 10_000:
            if all(isinstance(v, (str, os.PathLike)) for v in value):
                yield from _existing(value)
            elif depth < 3:
                for item in value[:16]:
                    if hasattr(item, "__dict__"):
                        yield from _paths(item, depth + 1, seen)
        elif hasattr(value, "__dict__") and not isinstance(value, type) and depth < 3 \
                and not callable(value) and not isinstance(value, np.ndarray):
            yield from _paths(value, depth + 1, seen)


def _existing(values: Iterable[Any]) -> Iterable[str]:
    for value in values:
        text = os.fspath(value)
        # a path, not a word that happens to name something here ("train", a column)
        pathlike = os.sep in text or "." in os.path.basename(text)
        if pathlike and len(text) < 4096 and text not in (".", os.sep) and os.path.exists(text):
            yield os.path.abspath(text)


def _file(path: str, content: bool) -> dict[str, Any]:
    """A file's path, size, modification time (and SHA-256 when ``content``); a
    folder's number of files, total size, newest time (and a hash of its files'
    names and contents)."""
    if not os.path.isdir(path):
        try:
            stat = os.stat(path)
        except OSError as exc:
            return {"path": path, "error": str(exc)}
        out = {"path": path, "bytes": stat.st_size, "modified": _iso(stat.st_mtime)}
        if content:
            out["sha256"] = _file_hash([path], os.path.dirname(path))
        return out
    files = sorted(os.path.join(top, n) for top, _dirs, names in os.walk(path) for n in names)
    stats = [os.stat(f) for f in files if os.path.isfile(f)]
    out = {"path": path + os.sep, "files": len(files), "bytes": sum(s.st_size for s in stats),
           "modified": _iso(max((s.st_mtime for s in stats), default=0.0))}
    if content:
        out["sha256"] = _file_hash(files, path)
    return out


def _file_hash(paths: list[str], root: str) -> str:
    digest = hashlib.sha256()
    for path in paths:
        if len(paths) > 1:
            digest.update(os.path.relpath(path, root).encode() + b"\0")
        with open(path, "rb") as f:
            while True:
                block = f.read(_READ)
                if not block:
                    break
                digest.update(block)
    return digest.hexdigest()


def _iso(seconds: float) -> str:
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).isoformat(timespec="seconds")


def summary(record: Any) -> dict[str, str]:
    """``{name: text}`` of a run's data fingerprints (``{split: fingerprint}``):
    ``train`` (kind and samples), ``train.x`` (an array column), ``train:/path``
    (a file); ``{}`` for a run that recorded none."""
    out: dict[str, str] = {}
    for split, item in (record or {}).items() if isinstance(record, dict) else ():
        if not isinstance(item, dict):
            continue
        out[split] = f"{item.get('kind')}, {item.get('samples')} samples" + \
            (f" ({item['type']})" if item.get("type") else "")
        for column in item.get("columns") or []:
            text = f"{column.get('dtype')} {tuple(column.get('shape') or ())}"
            if column.get("sha256"):
                text += f" sha256:{column['sha256'][:12]}"
            if column.get("file"):
                text += f" {_file_text(column['file'])}"
            out[f"{split}.{column.get('name')}"] = text
        for file in item.get("files") or []:
            out[f"{split}:{file.get('path')}"] = _file_text(file, with_path=False)
    return out


def _file_text(file: dict[str, Any], with_path: bool = True) -> str:
    if file.get("error"):
        return f"{file.get('path') if with_path else ''} ({file['error']})".strip()
    parts = [file.get("path")] if with_path else []
    if "files" in file:
        parts.append(f"{file['files']} files")
    parts += [f"{file.get('bytes')} bytes", f"modified {file.get('modified')}"]
    if file.get("sha256"):
        parts.append(f"sha256:{file['sha256'][:12]}")
    return ", ".join(str(p) for p in parts)
