"""The one CSV writer every mindexp callback shares, and its reader."""
from __future__ import annotations

import csv
import io
import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any, Collection, Iterable, Literal, Sequence

from ._files import atomic_write, open_file
from ._runs import note_log, register_if_in_run

__all__ = ["CsvLog", "CsvFormatError", "read_arrays", "read_csv", "read_header", "read_rows",
           "release_memory"]

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

_STEP = "step"  # schema.Col.STEP (schema imports this module, not the reverse)

# one row: values in column order, or a dict keyed by column name
Row = Sequence[Any] | dict[str, Any]


class CsvFormatError(ValueError):
    """A CSV log damaged inside (not only a cut last row): names the file and
    line, e.g. ``loss.csv line 57: expected 5 fields, got 2``."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        super().__init__(f"{path} line {line}: {problem}")
        self.path, self.line, self.problem = path, line, problem


class CsvLog:
    """Append rows to a CSV file, crash-safe and buffered.

    The header is written only when the file is new or empty; an existing
    header must equal ``fieldnames``. Rows are buffered and written whole,
    every ``flush_rows`` rows or ``flush_seconds`` seconds, and on
    ``flush``/``close``, so a crash loses at most the buffer and never
    leaves half a row. A half row left by a killed process is cut off when
    the file is opened again.

    A file opened inside the folder of an active run (a mindexp run, see
    ``_registry.run_declared``) registers itself with that run, so the
    run's resume cuts it back to the checkpoint's step by ``step_column``.

    Args:
        path: file to write.
        fieldnames: column names, in order.
        flush_rows: rows buffered before a write.
        flush_seconds: longest time a row stays buffered (checked on write).
        step_column: the column holding the global step, by which a resume
            cuts the log back; by default ``"step"`` when it is a column, else
            None (a resume leaves the log as it is).
    """

    def __init__(self, path: str | os.PathLike[str], fieldnames: Sequence[str],
                 flush_rows: int = 256, flush_seconds: float = 2.0,
                 step_column: str | None = _STEP) -> None:
        if not fieldnames:
            raise ValueError(f"CsvLog needs at least one column. Received: fieldnames={fieldnames!r}")
        if flush_rows < 1:
            raise ValueError(f"flush_rows must be >= 1. Received: flush_rows={flush_rows!r}")
        if step_column is not None and step_column not in fieldnames and step_column != _STEP:
            raise ValueError(f"step_column must be one of the columns {list(fieldnames)} or None. "
                             f"Received: step_column={step_column!r}")
        self.path = os.fspath(path)
        self.fieldnames = list(fieldnames)
        self.step_column = step_column if step_column in self.fieldnames else None
        self.flush_rows = int(flush_rows)
        self.flush_seconds = float(flush_seconds)
        self._rows: list[Sequence[Any]] = []
        self._text: list[str] = []  # rows already formatted (write_text), before self._rows
        self._text_rows = 0
        self._file: IO[str] | None = None
        self._writer: Any = None
        self._last_flush = time.monotonic()
        note_log(self)  # inside an active run: flushed with its logs before a loop's checkpoint

    # -- writing -----------------------------------------------------------
    def check(self) -> CsvLog:
        """Check an existing file's header, creating nothing; returns self.

        Callbacks call this at train begin and let the first ``flush``
        open the file, so a run rejected by any callback there leaves no
        file behind.
        """
        header = self._read_header()
        if header is not None and header != self.fieldnames:
            raise ValueError(
                f"{self.path} has columns {header}, expected {self.fieldnames}; "
                "write to another directory or remove the file")
        return self

    def holds_rows(self) -> bool:
        """True when the file holds a row below its header (flushed rows only)."""
        try:
            with open(self.path, "rb") as f:
                f.readline()
                return bool(f.read(1))
        except FileNotFoundError:
            return False

    def open(self) -> CsvLog:
        """Open for appending, checking or writing the header. Idempotent."""
        if self._file is not None:
            return self
        # before the file exists: a kill right after its first row leaves it registered
        register_if_in_run(self.path, self.step_column)
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        header = self.check()._read_header()
        self._cut_partial_row()
        self._file = file = open(self.path, "a", newline="", encoding="utf-8")
        self._writer = csv.writer(file)
        if header is None:
            self._writer.writerow(self.fieldnames)
            file.flush()
        self._last_flush = time.monotonic()
        return self

    def write(self, row: Row) -> None:
        """Buffer one row (a sequence in column order or a dict)."""
        if isinstance(row, dict):  # not Mapping: an ABC check costs more, every step
            row = [row.get(name, "") for name in self.fieldnames]
        rows = self._rows
        rows.append(row)
        # _flush_when_full_or_due inline: every logged step of every log calls this
        if len(rows) + self._text_rows >= self.flush_rows or \
                time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def write_rows(self, rows: Iterable[Sequence[Any]]) -> None:
        """Buffer several rows (sequences in column order) with one check."""
        self._rows.extend(rows)
        self._flush_when_full_or_due()

    def write_text(self, text: str, rows: int) -> None:
        """Buffer ``rows`` rows already formatted as CSV text (each ending in
        ``\\r\\n``, as csv.writer ends them): a writer that formats many rows
        at once (ParameterTracker) hands them over here, in order with the rest."""
        if self._rows:
            self._text.append(_format_rows(self._rows))
            self._text_rows += len(self._rows)
            self._rows = []
        self._text.append(text)
        self._text_rows += rows
        self._flush_when_full_or_due()

    @property
    def pending(self) -> int:
        """Rows taken but not yet written (a flush that failed keeps them)."""
        return len(self._rows) + self._text_rows

    def _flush_when_full_or_due(self) -> None:
        if len(self._rows) + self._text_rows >= self.flush_rows:
            self.flush()
        else:
            self.flush_if_due()

    def flush_if_due(self) -> None:
        """Flush when the oldest buffered row has waited ``flush_seconds``."""
        if (self._rows or self._text) and time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows whole and hand them to the OS."""
        if not self._rows and not self._text:
            return
        file = self._file if self._file is not None else self.open()._file
        assert file is not None  # open() opened it
        # One write() call for the whole buffer: a kill can only cut at a
        # row boundary or leave a partial tail, which open() repairs.
        data = "".join(self._text) + _format_rows(self._rows)
        size = os.fstat(file.fileno()).st_size
        taken = self._rows, self._text, self._text_rows
        try:
            file.write(data)
            file.flush()
            self._rows, self._text, self._text_rows = [], [], 0
        except BaseException:
            # A full disk, or a second Ctrl-C/SIGTERM (KeyboardInterrupt) at any
            # bytecode in here: the file goes back to its last whole flush and the
            # rows stay buffered, so close() writes them once (a KeyboardInterrupt
            # after the write used to leave them in the file and in the buffer).
            self._cut_back_to(size)
            self._rows, self._text, self._text_rows = taken
            raise
        self._last_flush = time.monotonic()

    def _cut_back_to(self, size: int) -> None:
        """After a failed write (a full disk): drop whatever part of it reached
        the file or still sits in Python's buffer, so the file ends with a whole
        row and nothing is written twice when the write is retried."""
        try:
            if self._file is not None:
                self._file.close()  # its flush may fail again; the file is closed anyway
        except OSError:
            pass
        self._file = None
        self._writer = None
        with open(self.path, "r+b") as f:  # shrinking needs no free space
            f.truncate(size)

    def close(self) -> None:
        """Flush and close; safe to call twice."""
        self.flush()
        if self._file is None:
            return
        self._file.close()
        self._file = None
        self._writer = None

    def __enter__(self) -> CsvLog:
        return self.open()

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    # -- resume ------------------------------------------------------------
    def truncate_after(self, step: int, column: str = "step") -> int:
        """Drop every row whose ``column`` is greater than ``step``.

        Rewrites the file atomically (``schema.atomic_write``) so a crash
        during truncation leaves either the old or the new file.
        """
        self.flush()
        if not os.path.exists(self.path):
            return 0
        kept, dropped = _rows_up_to(self.path, column, step)
        was_open = self._file is not None
        if self._file is not None:
            self._file.close()
            self._file = None
        _atomic_write_rows(self.path, kept)
        if was_open:
            self.open()
        return dropped

    # -- helpers -------------------------------------------------------------
    def _read_header(self) -> list[str] | None:
        return read_header(self.path)

    def _cut_partial_row(self) -> None:
        """Cut a trailing row that has no newline (left by a killed writer)."""
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb+") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size == 0:
                return
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
            f.truncate(data.rfind(b"\n") + 1)


def _format_rows(rows: Sequence[Sequence[Any]]) -> str:
    if not rows:
        return ""
    buf = io.StringIO()
    csv.writer(buf).writerows(rows)
    return buf.getvalue()


def read_header(path: str | os.PathLike[str]) -> list[str] | None:
    """The column names of a CSV log, or None when it is missing or empty."""
    try:
        with open_file(path, "r", newline="", encoding="utf-8") as f:
            first = f.readline()
    except FileNotFoundError:
        return None
    return next(csv.reader([first]), None) or None


def _rows_up_to(path: str, column: str, step: int) -> tuple[list[list[str]], int]:
    with open_file(path, "r", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows:
        return [], 0
    header = rows[0]
    if column not in header:
        raise ValueError(f"{path} has no column {column!r}. Columns: {header}")
    idx = header.index(column)
    kept = [header] + [r for r in rows[1:] if len(r) > idx and int(float(r[idx])) <= step]
    return kept, len(rows) - len(kept)


def _atomic_write_rows(path: str, rows: Sequence[Sequence[str]]) -> None:
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(rows)
    atomic_write(path, buf.getvalue())


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The rows of a CSV log as dicts keyed by its header, without pandas
    (``[]`` when the file is missing). The one reader for code that needs a
    few values of a log while training or resuming."""
    try:
        with open_file(path, "r", newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []


def read_csv(path: str | os.PathLike[str], name: str | None = None,
             columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Read a log the way ``CsvLog`` wrote it, as a pandas DataFrame.

    ``path`` is the file, or a directory together with ``name`` (the file
    name inside it, e.g. ``"loss.csv"``). ``columns``: read only these, in
    the file's order (those the file lacks are left out); every column when
    None. A missing or empty file gives an empty DataFrame. Every complete
    line must have as many fields as the header, else ``CsvFormatError``
    names the file and the first bad line (a last row without line end,
    left by a writer that was killed, is the caller's to judge). pandas is
    imported here, lazily, so that the callbacks stay importable without it.
    """
    import pandas as pd  # lazy: callbacks/ must not need pandas to train

    file = os.path.join(os.fspath(path), name) if name else os.fspath(path)
    data = _read_bytes(file)
    if data is None:
        return pd.DataFrame()
    wanted = None if columns is None else set(columns)
    table = _parse_numbers(data, wanted)
    return table.to_pandas() if table is not None else _read_checked(file, data, wanted)


def read_arrays(path: str | os.PathLike[str], columns: Sequence[str] | None = None,
                text: Collection[str] = ()) -> dict[str, np.ndarray]:
    """``read_csv`` as numpy arrays by column name, without a DataFrame: for
    code that takes a few columns of many logs (``history``) or a run's end
    (its summary, without importing pandas). The same parse and checks; the
    arrays may be read-only. ``text``: columns that hold text (object arrays),
    the others numbers. ``{}`` for a missing or empty file."""
    file = os.fspath(path)
    data = _read_bytes(file)
    if data is None:
        return {}
    wanted = None if columns is None else set(columns)
    table = _parse_numbers(data, wanted, text)
    if table is not None:
        return {name: _column_array(column) for name, column in zip(table.column_names,
                                                                     table.columns)}
    frame = _read_checked(file, data, wanted)
    return {str(name): frame[name].to_numpy() for name in frame.columns}


def _column_array(column: Any) -> np.ndarray:
    """A parsed column (a ChunkedArray without nulls) as numpy: numbers as a
    read-only view of pyarrow's buffer, text as an object array. Not pyarrow's
    ``to_numpy()``: it imports pandas (half a CPU-second, at the end of every run)."""
    import numpy as np
    import pyarrow as pa
    if pa.types.is_string(column.type):
        return np.array(column.to_pylist(), dtype=object)
    array = column.combine_chunks()   # (one chunk, as parsed: no copy)
    name = _NUMPY_TYPES.get(str(array.type))
    if name is None:   # a type the CSV reader does not infer today
        return array.to_numpy()
    dtype = np.dtype(name)
    if not len(array):
        return np.empty(0, dtype=dtype)
    validity, values = array.buffers()[:2]
    out = np.frombuffer(values, dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)
    if array.null_count:   # empty fields (floats only, _parse_numbers): NaN
        valid = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
        out = np.where(valid[array.offset:array.offset + len(array)].astype(bool), out, np.nan)
    return out


# pyarrow's number types a CSV parse gives, as numpy's
_NUMPY_TYPES = {"int64": "int64", "double": "float64", "int32": "int32", "float": "float32"}


def release_memory() -> None:
    """Give the memory of parsed columns no longer used back to the system.

    pyarrow's allocator keeps freed memory for its next parse: a caller that
    copies many logs' arrays into one table, letting each go, calls this now
    and then so the peak stays near the table's size (200 logs of 100,000
    rows: 0.76 GB instead of 1.1 GB)."""
    pa = sys.modules.get("pyarrow")   # nothing was parsed by pyarrow when it is not loaded
    if pa is not None:
        pa.default_memory_pool().release_unused()


def _read_bytes(file: str) -> bytes | None:
    try:
        with open_file(file) as f:
            return f.read() or None
    except FileNotFoundError:
        return None


def _read_checked(file: str, data: bytes, wanted: set[str] | None) -> pd.DataFrame:
    """Every line's field count checked (the bad one named), then pandas' parser."""
    import pandas as pd
    check_fields(file, data)
    # pyarrow refuses a short last row (a writer killed mid-row): pandas' own parser reads it
    engine = _fastest_engine() if data.endswith(b"\n") else "c"
    usecols = None if wanted is None else (
        [c for c in _header_of(data) if c in wanted] if engine == "pyarrow" else wanted.__contains__)
    return pd.read_csv(io.BytesIO(data), engine=engine, usecols=usecols)


_THREADED_BYTES = 16 << 20   # a log this large is parsed by pyarrow's threads


def _parse_numbers(data: bytes, wanted: set[str] | None,
                   text: Collection[str] = ()) -> pa.Table | None:
    """The table when pyarrow parses every line with the header's field count
    and the columns read hold numbers (text in ``text``), none missing; None otherwise (no
    pyarrow, a cut last row, a damaged line, text, an empty field): the
    careful path then checks each line and names the bad one. The common
    case costs one parse and no line-by-line check."""
    try:
        import pyarrow as pa
        from pyarrow import csv as pa_csv
    except ImportError:
        return None
    header = _header_of(data)
    # pandas renames repeated names and skips a one-column file's empty lines: let it
    if not data.endswith(b"\n") or len(header) < 2 or len(set(header)) != len(header):
        return None
    # one block (one chunk a column, which to_numpy() takes without a copy),
    # cut into blocks for pyarrow's threads only when a log is large
    threads = len(data) > _THREADED_BYTES
    try:
        table = pa_csv.read_csv(
            pa.BufferReader(data), read_options=pa_csv.ReadOptions(
                use_threads=threads, block_size=(1 << 20) if threads else len(data) + 1),
            parse_options=pa_csv.ParseOptions(ignore_empty_lines=False),
            convert_options=pa_csv.ConvertOptions(
                include_columns=header if wanted is None else [c for c in header if c in wanted]))
    except (pa.ArrowInvalid, pa.ArrowKeyError):
        return None
    if not all(_plain_column(name, column, text)
               for name, column in zip(table.column_names, table.columns)):
        return None
    # an empty line reads as a row of nulls here: a null only in a number column
    # (an empty field: NaN, as pandas reads it) beside a column without any
    if any(column.null_count for column in table.columns) and \
            all(column.null_count or pa.types.is_floating(column.type) for column in table.columns):
        return None
    return table


def _plain_column(name: str, column: Any, text: Collection[str]) -> bool:
    """A column the fast path takes: integers or text (``text``) without an empty
    field, or floating-point numbers."""
    import pyarrow as pa
    if pa.types.is_floating(column.type):
        return True
    return not column.null_count and (pa.types.is_integer(column.type) or (
        name in text and pa.types.is_string(column.type)))


def _header_of(data: bytes) -> list[str]:
    first = data[:data.find(b"\n") + 1].decode("utf-8", errors="replace")
    return next(csv.reader([first.rstrip("\r\n")]), [])


def check_fields(path: str, data: bytes) -> None:
    """Raise ``CsvFormatError`` at the first complete line of ``data``
    (a CSV file's bytes) whose field count differs from the header's."""
    if b'"' in data:  # quoted fields may hold commas or line ends: parse them
        _check_fields_parsed(path, data)
        return
    import numpy as np  # one vectorized pass: logs reach millions of rows
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == ord("\n"))
    commas_per_line = np.diff(np.searchsorted(np.flatnonzero(buf == ord(",")), ends), prepend=0)
    bad = np.flatnonzero(commas_per_line != commas_per_line[0]) if len(ends) else np.empty(0, int)
    if len(bad):
        i = int(bad[0])
        start = int(ends[i - 1]) + 1 if i else 0
        empty = not data[start:int(ends[i])].strip()
        raise CsvFormatError(path, i + 1, _fields_problem(int(commas_per_line[0]) + 1,
                                                          None if empty else int(commas_per_line[i]) + 1))


def _check_fields_parsed(path: str, data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    complete = text[:text.rfind("\n") + 1]
    reader = csv.reader(io.StringIO(complete, newline=""))
    expected: int | None = None
    for row in reader:
        if expected is None:
            expected = len(row)
        elif len(row) != expected:
            raise CsvFormatError(path, reader.line_num, _fields_problem(expected, len(row) or None))


def _fields_problem(expected: int, got: int | None) -> str:
    return f"expected {expected} fields, got " + ("an empty line" if got is None else str(got))


def _fastest_engine() -> str:
    try:
        import pyarrow  # noqa: F401  (optional extra)
        return "pyarrow"
    except ImportError:
        return "c"
