"""``mindexp compare --group-by``: the baseline of ``--against`` and the grouped
table as text, one line per group and outcome."""
from __future__ import annotations

from typing import Any

from ..errors import MindexpError

SHOWN = ("final_loss", "min_loss")   # and every eval_<metric>: what a comparison asks
STATS = ("mean", "ci_low", "ci_high")
TESTS = ("diff", "diff_ci_low", "diff_ci_high", "p", "p_holm")


def against_value(items: list[str], columns: list[str]) -> Any:
    """``--against`` as compare()'s ``against``: one VALUE (or FIELD=VALUE) for
    one group field, FIELD=VALUE for each when grouping by several; values
    read as ``--set`` reads them (``0.1`` a number, ``true`` a bool)."""
    pairs = [item.partition("=") for item in items]
    if len(columns) == 1 and len(items) == 1:
        field, sep, text = pairs[0]
        return scalar(text if sep and field.strip() == columns[0] else items[0])
    given = {field.strip(): scalar(text) for field, sep, text in pairs if sep}
    if len(given) != len(items) or sorted(given) != sorted(columns):
        raise MindexpError(f"--against expects FIELD=VALUE for each group field "
                           f"({', '.join(columns)}). Received: --against {' '.join(items)}")
    return given


def scalar(text: str) -> Any:
    """A value as ``--set`` gives it: a bool, None, an int, a float or the text."""
    word = text.strip()
    if word.lower() in ("true", "false"):
        return word.lower() == "true"
    if word.lower() in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return word


def group_lines(table: Any) -> list[str]:
    """The grouped table as aligned text (one row per group and outcome), then
    one line per group too small for an interval or a test."""
    import pandas as pd
    from ..analysis.reports import format_table
    fields = list(table.attrs["group_by"]) or ["group"]
    outcomes = [m for m in table.attrs["outcomes"]
                if m in SHOWN or m.startswith("eval_")]
    tested = "test" in table.columns
    rows = []
    for _, group in table.iterrows():
        for m in outcomes:
            row = {f: group[f] for f in fields}
            row.update(n=group["n"], outcome=m, **{s: group[f"{m}_{s}"] for s in STATS})
            if tested:
                row.update(test=group["test"] or "none",
                           **{t: group[f"{m}_{t}"] for t in TESTS})
            rows.append(row)
    lines = format_table(pd.DataFrame(rows)).splitlines()
    for _, group in table[table["n"] < 2].iterrows():
        name = ", ".join(f"{f}={group[f]}" for f in fields)
        lines.append(f"note: {name} has {group['n']} run: no interval"
                     + (" and no test" if tested else ""))
    return lines
