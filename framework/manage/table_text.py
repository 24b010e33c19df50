"""The runs table as aligned text, from plain columns (``{name: [values]}``):
no pandas or numpy, so ``mindexp runs`` answered by the catalog prints its
first line without importing them."""
from __future__ import annotations

import numbers
import os
from typing import Iterable, Iterator

from ..analysis.cells import format_value
from .terminal import has_control, visible

ELLIPSIS = "…"
_NONE = type(None)


def short_paths(paths):
    """``runs.short_path`` of each absolute path, without a ``relpath`` each
    (100,000 of them cost a second); ``HOST:PATH`` of another host as it is."""
    cwd = os.getcwd()
    head = cwd.rstrip(os.sep) + os.sep
    return [p[len(head):] if p.startswith(head) else "." if p == cwd else p for p in paths]


def short_paths_below(head: str, rels: Iterable[str]) -> list[str]:
    """:func:`short_paths` of ``head + rel`` for each of ``rels``: one prefix for
    all when ``head`` (a folder, ending with a separator) is below the working folder."""
    here = os.getcwd().rstrip(os.sep) + os.sep
    if head.startswith(here):
        prefix = head[len(here):]
        return [prefix + rel for rel in rels]
    return short_paths([head + rel for rel in rels])


def fitted_columns(columns, numeric=None, width=100, floats=True):
    """:func:`format_fitted` of ``{column: [values]}``; ``numeric`` says which
    columns are numbers (right-aligned), the others are told from their
    values as pandas would (``floats``: a number column with a missing or
    float value shows every value as a float, as a float64 column does):
    a :class:`TableSpool` of one page."""
    with TableSpool(numeric, floats) as spool:
        spool.add(columns)
        return "".join(spool.lines(width))[:-1]


def _number_column(kinds, numeric, floats):
    """(whether a column of values of these types is a number column, whether its
    values are shown as floats): ``numeric`` as given, else told from the types."""
    if numeric is None:
        numeric = _numbers_only(kinds)
    return numeric, bool(floats and numeric and
                         any(k is _NONE or issubclass(k, float) for k in kinds))


def _fitted_widths(longest, numeric, width):
    """Each column's width: its longest cell or name, the widest text columns
    narrowed one character at a time until the line fits ``width`` (None: no limit)."""
    widths = {c: max(len(str(c)), longest[c]) for c in longest}
    while width and sum(widths.values()) + 2 * (len(widths) - 1) > width:
        column = max((c for c in widths if not numeric[c]), key=lambda c: widths[c],
                     default=None)
        if column is None or widths[column] <= max(8, len(str(column))):
            break
        widths[column] -= 1
    return widths


def _cut_cells(cells, size, keep_end):
    """The cells too wide for ``size`` cut (a path keeps its end, the run id)."""
    return [v if len(v) <= size else _cut(v, size, keep_end) for v in cells]


def _formatted_rows(widths, numeric, rows):
    """Each row of cells as one aligned line (no trailing blanks)."""
    # one format per line: 100,000 lines in a fraction of a second
    line = "  ".join(f"{{:{'>' if numeric[c] else '<'}{widths[c]}}}" for c in widths)
    if widths and numeric[list(widths)[-1]]:   # right-aligned last: no trailing blanks
        return [line.format(*row) for row in rows]
    return [line.format(*row).rstrip() for row in rows]


class TableSpool:
    """:func:`fitted_columns` of a table given a page at a time, in the memory of
    one page: each page's cells go to a temporary file as text (the widths and
    types of every column kept), then come back fitted, a page at a time.

    A page is spooled a column to a line: a cell never holds a control
    character (:func:`_text` escapes them), so one separates the cells. An
    integer of seven digits or more is marked: its text as a float (``1e+06``)
    is known only once the whole column has been seen (a missing value makes a
    number column floats)."""

    def __init__(self, numeric: dict[str, bool] | None = None, floats: bool = True):
        self.numeric, self.floats, self.rows, self._pages = dict(numeric or {}), floats, 0, 0
        self._kinds: dict[str, set[type]] = {}      # each column's cell types so far
        self._longest: dict[str, int] = {}          # each column's widest cell
        self._longest_float: dict[str, int] = {}    # ... were its numbers shown as floats
        self._marked: set[str] = set()              # columns holding a marked integer
        self._file = _spool_file()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()

    def add(self, columns: dict[str, list]) -> None:
        """One page, ``{column: [values]}`` (the same columns, in the same order, each page)."""
        rows = len(next(iter(columns.values()), ()))
        for c, values in columns.items():
            kinds = set(map(type, values))   # a column's types once: 100,000 rows, few types
            self._kinds[c] = self._kinds.get(c, set()) | kinds
            if rows:
                self._file.write(_SEPARATOR.join(self._cells(c, values, kinds)) + "\n")
        self.rows += rows
        self._pages += bool(rows)

    def _cells(self, column, values, kinds):
        texts = _texts(values)
        longest = max(map(len, texts), default=0)
        longest_float = longest
        if int in kinds and _has_big_int(values, kinds):
            texts, longest, longest_float = _marked_ints(values, texts)
            self._marked.add(column)
        self._longest[column] = max(self._longest.get(column, 0), longest)
        self._longest_float[column] = max(self._longest_float.get(column, 0), longest_float)
        return texts

    def lines(self, width: int | None = 100) -> Iterator[str]:
        """The fitted table, header first, a block of lines (each ending with a
        line end) for each page added."""
        names = list(self._kinds)
        numeric, as_floats = {}, {}
        for c in names:
            numeric[c], as_floats[c] = _number_column(self._kinds[c], self.numeric.get(c),
                                                      self.floats)
        longest = {c: (self._longest_float if as_floats[c] else self._longest).get(c, 0)
                   for c in names}
        widths = _fitted_widths(longest, numeric, width)
        yield _formatted_rows(widths, numeric, [names])[0] + "\n"
        self._file.seek(0)
        for _ in range(self._pages):
            columns = [self._file.readline()[:-1].split(_SEPARATOR) for _ in names]
            for i, c in enumerate(names):
                if c in self._marked:
                    columns[i] = _unmarked(columns[i], as_floats[c])
                if longest[c] > widths[c]:
                    columns[i] = _cut_cells(columns[i], widths[c], c == "path")
            yield "\n".join(_formatted_rows(widths, numeric, zip(*columns))) + "\n"


_SEPARATOR = "\x1f"     # between a spooled row's cells
_MARK = "\x1e"          # before an integer whose text as a float differs
_BIG_INT = 1000000      # below it, in size, an integer's float text (.6g) is its own


def _spool_file():
    """A temporary file for the spooled rows (in memory where none can be made)."""
    import io
    import tempfile
    try:
        return tempfile.TemporaryFile("w+", encoding="utf-8", errors="surrogatepass",
                                      newline="\n")
    except OSError:
        return io.StringIO(newline="\n")


def _has_big_int(values, kinds):
    """Whether an integer of ``values`` reads otherwise as a float (``1e+06``)."""
    if kinds == {int}:
        return min(values) <= -_BIG_INT or max(values) >= _BIG_INT
    return any(type(v) is int and not -_BIG_INT < v < _BIG_INT for v in values)  # noqa: E721


def _marked_ints(values, texts):
    """``texts`` with each large integer's marked, and the longest cell as it is
    and were the integers floats."""
    marked, longest, longest_float = [], 0, 0
    for v, text in zip(values, texts):
        big = type(v) is int and not -_BIG_INT < v < _BIG_INT  # noqa: E721 - a bool is no integer
        longest = max(longest, len(text))
        longest_float = max(longest_float, len(_text(float(v))) if big else len(text))
        marked.append(_MARK + text if big else text)
    return marked, longest, longest_float


def _unmarked(cells, as_floats):
    """Spooled cells with each marked integer shown as itself or as a float."""
    return [(_text(float(v[1:])) if as_floats else v[1:]) if v[:1] == _MARK else v
            for v in cells]


def _numbers_only(kinds):
    """Whether pandas would make a column of values of these types a numeric
    column (numbers and missing values, at least one number, no booleans)."""
    kinds = kinds - {_NONE}
    return bool(kinds) and all(issubclass(k, numbers.Number) and not issubclass(k, bool)
                               for k in kinds)


def _cut(text, width, keep_end=False):
    if len(text) <= width:
        return text
    return ELLIPSIS + text[-(width - 1):] if keep_end else text[:width - 1] + ELLIPSIS


def _texts(values):
    """:func:`_text` of each value; a column of plain text or of floats in one pass."""
    kinds = set(map(type, values))
    if kinds == {str}:
        # one search over the column: a control character is rare
        return [visible(v) for v in values] if has_control("".join(values)) else values
    if kinds == {int}:
        return [str(v) for v in values]
    if kinds <= {float, type(None)}:
        return ["-" if v is None or v != v else f"{v:.6g}" for v in values]
    return [_text(v) for v in values]


def _text(value):
    if value is None or (isinstance(value, numbers.Number) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return visible(format_value(value))  # a cell is one line, never a terminal command


def more_line(count):
    """The line under a listing cut to one screen: how many runs were left out."""
    return (f"... {count:,} more run{'s' if count != 1 else ''} (--limit N or --all lists "
            f"them; piped, every run is listed)")
