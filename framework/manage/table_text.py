"""The runs table as aligned text, from plain columns (``{name: [values]}``):
no pandas or numpy, so ``mindexp runs`` answered by the catalog prints its
first line without importing them."""
from __future__ import annotations

import numbers
import os

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


def fitted_columns(columns, numeric=None, width=100, floats=True):
    """:func:`format_fitted` of ``{column: [values]}``; ``numeric`` says which
    columns are numbers (right-aligned), the others are told from their
    values as pandas would (``floats``: a number column with a missing or
    float value shows every value as a float, as a float64 column does)."""
    numeric = dict(numeric or {})
    for c, values in columns.items():
        kinds = set(map(type, values))   # a column's types once: 100,000 rows, few types
        if c not in numeric:
            numeric[c] = _numbers_only(kinds)
        if floats and numeric[c] and any(k is _NONE or issubclass(k, float) for k in kinds):
            columns[c] = [None if v is None else float(v) for v in values]
    cells = {c: _texts(values) for c, values in columns.items()}
    longest = {c: max(map(len, cells[c]), default=0) for c in columns}
    widths = {c: max(len(str(c)), longest[c]) for c in columns}
    while width and sum(widths.values()) + 2 * (len(widths) - 1) > width:
        column = max((c for c in widths if not numeric[c]), key=lambda c: widths[c],
                     default=None)
        if column is None or widths[column] <= max(8, len(str(column))):
            break
        widths[column] -= 1
    for c in columns:   # cut the cells too wide (a path keeps its end, the run id)
        size = widths[c]
        if longest[c] > size:
            cells[c] = [v if len(v) <= size else _cut(v, size, c == "path") for v in cells[c]]
    # one format per line: 100,000 lines in a fraction of a second
    line = "  ".join(f"{{:{'>' if numeric[c] else '<'}{widths[c]}}}" for c in columns)
    rows = zip(*[[str(c)] + cells[c] for c in columns])
    if columns and numeric[list(columns)[-1]]:   # right-aligned last: no trailing blanks
        return "\n".join(line.format(*row) for row in rows)
    return "\n".join(line.format(*row).rstrip() for row in rows)


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
