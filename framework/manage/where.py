"""``--where`` as a catalog query: the documented subset of pandas' query
syntax parsed here and answered in SQL with every value a parameter.

The subset: comparisons ``NAME OP LITERAL`` (or ``LITERAL OP NAME``) with
``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``; literals are numbers (``0.001``,
``-3``, ``1e-4``) and quoted strings (``'adam'``, ``"adam"``, no escapes);
joined by ``and``, ``or``, ``not`` and parentheses. NAME is a column of the
runs table: a config field, ``final_loss``, ``steps``, ``train_time_s``,
``steps_per_s``, ``epochs``, ``run_id``, ``experiment``, ``status``, ``tags``,
``note``, ``started_at``, ``ended_at``. ``<``/``<=``/``>``/``>=`` compare
numbers with numbers. A missing value (NaN) matches only ``!=``, as in
pandas.

Anything else (``&``, ``|``, ``in``, chained comparisons, arithmetic, a
column only the logs give such as ``min_loss``, a config field holding
booleans, lists or mixed types, a field named like an outcome) raises
:class:`Unsupported`, and ``mindexp runs`` answers it over the runs' table
in memory with :mod:`.condition` (the whole grammar; never run as code).
"""
from __future__ import annotations

import math
import re
from typing import Any

OPS = ("==", "!=", "<=", ">=", "<", ">")
_SQL_OPS = {"==": "=", "!=": "=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_TOKEN = re.compile(r"""\s*(?:
    (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?![A-Za-z_0-9.])
  | (?P<string>'[^'\\]*'|"[^"\\]*")
  | (?P<op>==|!=|<=|>=|<|>)
  | (?P<paren>[()])
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  )""", re.VERBOSE)
KEYWORDS = ("and", "or", "not")
# The runs table's columns that are flat in the catalog: text ones and number ones.
TEXT_COLUMNS = ("run_id", "experiment", "status", "tags", "note", "started_at", "ended_at")
NUMBER_COLUMNS = ("steps", "epochs", "final_loss", "train_time_s", "steps_per_s")


class Unsupported(Exception):
    """The expression is outside the subset: :mod:`.condition` answers it."""


# -- parsing ---------------------------------------------------------------------

def parse(text: str) -> tuple:
    """The expression as a tree: ``("and"|"or", a, b)``, ``("not", a)``,
    ``("cmp", name, op, value)``; Unsupported for anything else."""
    tokens = _tokens(text)
    tree, rest = _or(tokens)
    if rest:
        raise Unsupported(f"unexpected {rest[0][1]!r}")
    return tree


def _tokens(text):
    out, pos = [], 0
    text = str(text)
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match:
            raise Unsupported(f"cannot read {text[pos:].strip()[:20]!r}")
        kind = match.lastgroup
        value = match.group(kind)
        if kind == "name" and value in KEYWORDS:
            kind = value
        out.append((kind, value))
        pos = match.end()
    return out


def _or(tokens):
    left, tokens = _and(tokens)
    while tokens and tokens[0][0] == "or":
        right, tokens = _and(tokens[1:])
        left = ("or", left, right)
    return left, tokens


def _and(tokens):
    left, tokens = _not(tokens)
    while tokens and tokens[0][0] == "and":
        right, tokens = _not(tokens[1:])
        left = ("and", left, right)
    return left, tokens


def _not(tokens):
    if tokens and tokens[0][0] == "not":
        inner, tokens = _not(tokens[1:])
        return ("not", inner), tokens
    if tokens and tokens[0] == ("paren", "("):
        inner, tokens = _or(tokens[1:])
        if not tokens or tokens[0] != ("paren", ")"):
            raise Unsupported("unbalanced parentheses")
        return inner, tokens[1:]
    return _comparison(tokens)


def _comparison(tokens):
    if len(tokens) < 3 or tokens[1][0] != "op":
        raise Unsupported("not a comparison")
    (k1, v1), (_, op), (k2, v2) = tokens[:3]
    if tokens[3:4] and tokens[3][0] == "op":
        raise Unsupported("chained comparison")
    if k1 == "name" and k2 in ("number", "string"):
        return ("cmp", v1, op, _literal(k2, v2)), tokens[3:]
    if k2 == "name" and k1 in ("number", "string"):
        flipped = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op)
        return ("cmp", v2, flipped, _literal(k1, v1)), tokens[3:]
    raise Unsupported("a comparison needs a column and a literal")


def _literal(kind, text):
    if kind == "string":
        return text[1:-1]
    number = float(text)
    return int(text) if re.fullmatch(r"-?\d+", text) else number


def names(tree: tuple) -> list[str]:
    """The column names a tree compares, in order, once each."""
    if tree[0] == "cmp":
        return [tree[1]]
    out = []
    for part in tree[1:]:
        out += [n for n in names(part) if n not in out]
    return out


# -- SQL -------------------------------------------------------------------------

def to_sql(tree: tuple, kinds: dict[str, tuple[str, str]], db) -> tuple[str, list]:
    """``(sql, params)`` true for the rows matching ``tree``. ``kinds``: each
    name -> ``(where, kind)``: where is ``"flat"`` or ``"config"``, kind
    ``"number"`` or ``"text"``; ``db`` spells the config fields' SQL."""
    if tree[0] in ("and", "or"):
        # the side reading fewer config fields first: SQLite stops at the first
        # side that decides, and a flat column costs no JSON parse (same answer:
        # every side is true or false, never NULL)
        sides = sorted(tree[1:], key=lambda side: _config_reads(side, kinds))
        left, lp = to_sql(sides[0], kinds, db)
        right, rp = to_sql(sides[1], kinds, db)
        return f"({left} {tree[0].upper()} {right})", lp + rp
    if tree[0] == "not":
        inner, params = to_sql(tree[1], kinds, db)
        return f"(NOT {inner})", params
    _, name, op, value = tree
    place, kind = kinds[name]
    literal_kind = "text" if isinstance(value, str) else "number"
    if literal_kind != kind:      # pandas: never equal, always different; order refused
        if op in ("==", "!="):
            return ("(1 = 1)" if op == "!=" else "(1 = 0)"), []
        raise Unsupported(f"{name} compared with a {literal_kind}")
    if kind == "text" and op not in ("==", "!="):
        raise Unsupported("ordering of text")
    if place == "flat":
        column, params = name, []
    else:
        column, params = db.typed_field(kind), [db.key(name)]
    test = f"COALESCE({column} {_SQL_OPS[op]} ?, FALSE)"
    return (f"(NOT {test})" if op == "!=" else f"({test})"), params + [value]


def _config_reads(tree, kinds):
    if tree[0] == "cmp":
        return int(kinds[tree[1]][0] == "config")
    return sum(_config_reads(part, kinds) for part in tree[1:])


# -- the same in Python (for rows whose values the catalog cannot know: running runs)

def matches(tree: tuple, row: dict[str, Any]) -> bool:
    """Whether ``row`` (name -> value) matches ``tree``, with pandas' rules."""
    if tree[0] == "and":
        return matches(tree[1], row) and matches(tree[2], row)
    if tree[0] == "or":
        return matches(tree[1], row) or matches(tree[2], row)
    if tree[0] == "not":
        return not matches(tree[1], row)
    _, name, op, value = tree
    cell = row.get(name)
    if op == "!=":
        return not _compare(cell, "==", value)
    return _compare(cell, op, value)


def _compare(cell, op, value):
    if cell is None or isinstance(cell, bool) or \
            (isinstance(cell, float) and math.isnan(cell)):
        return False
    if isinstance(cell, str) != isinstance(value, str):
        return False
    return {"==": cell == value, "<": cell < value, "<=": cell <= value,
            ">": cell > value, ">=": cell >= value}[op]
