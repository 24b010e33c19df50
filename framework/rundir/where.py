"""``--where`` as mindexp's own small condition language: parsed with
:mod:`ast`, every node checked against the grammar below, then evaluated over
a table's columns with vectorised pandas operations. The text is never run as
code (no ``DataFrame.query``, no ``eval``), so ``@name``, calls, attributes and
the like cannot reach Python.

Grammar (the safe part of pandas' query syntax, with its meaning)::

    condition   := condition (and | or | & | '|') condition
                 | (not | ~) condition | '(' condition ')'
                 | comparison | column            (a column of true/false values)
    comparison  := value OP value [OP value ...]  (chained: each pair, and-ed)
    OP          := == | != | < | <= | > | >= | in | not in
    value       := column | constant | value (+ | - | * | /) value | -value
                 | '[' constant, ... ']' | '(' constant, ... ')'
    column      := NAME | `any name, also with dots or spaces`
    constant    := number | 'string' | "string" | True | False

``&`` and ``|`` bind like ``and`` and ``or`` (as in pandas). ``==``/``!=``
against a list mean ``in``/``not in``. Arithmetic takes numbers only. A
missing value (NaN) matches only ``!=`` and ``not in``, as in pandas.

One parse, two back ends over the same checked tree: :func:`evaluate` over a
table's columns (every column compare() has, the logs' included) and
:func:`to_sql` for a run catalog (every value a parameter, never the text).
The SQL back end takes comparisons of a column with constants (lists too),
chained or joined by and/or/not; anything else raises :class:`Unsupported`
and the caller evaluates the table instead, with the same answer.
"""
from __future__ import annotations

import ast
import keyword
import operator
import re
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

from ..errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

ACCEPTED = ("only comparisons (==, !=, <, <=, >, >=, in, not in) of run columns with numbers, "
            "quoted strings and lists, joined by and, or, not, &, |, ~ and parentheses; "
            "+ - * / on numbers; `backticks` around a name with dots")
EXAMPLE = "\"lr > 0.01 and optimizer == 'adam'\""
_PLACEHOLDER = "__mindexp_column_{}__"
# A quoted string (kept whole), a `backticked name`, a bare name, or & | @.
_PIECES = re.compile(r"""(?P<string>'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?)"""
                     r"|(?P<tick>`[^`]*`?)|(?P<word>(?<![\w.])[A-Za-z_]\w*)|(?P<op>[&|@])")
_GRAMMAR_WORDS = ("and", "or", "not", "in", "is", "True", "False", "None")
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
            ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: operator.truediv}
_UNARY = {ast.USub: "-", ast.UAdd: "+"}
_REFUSED = {ast.Call: "a function call", ast.Attribute: "an attribute (a name with dots "
            "goes in `backticks`)", ast.Subscript: "a subscript", ast.Lambda: "a lambda",
            ast.BinOp: "an operator other than + - * /", ast.Dict: "a dict", ast.Set: "a set",
            ast.IfExp: "if/else", ast.NamedExpr: ":=", ast.Starred: "*",
            ast.JoinedStr: "an f-string", ast.ListComp: "a comprehension",
            ast.GeneratorExp: "a comprehension", ast.Await: "await"}


class Condition(NamedTuple):
    """A checked ``--where``: its text, its tree, the columns it names (once each)."""
    text: str
    tree: ast.expr
    columns: tuple[str, ...]


class _Outside(Exception):
    """A node outside the grammar; its text names it ("a function call")."""


class Unsupported(Exception):
    """The SQL back end cannot answer this condition: :func:`evaluate` does."""


class UnknownColumn(Exception):
    """The condition names a column the table does not have (``args[0]``)."""


def parse(text: str) -> Condition:
    """The checked :class:`Condition` of ``text``; ConfigError (one line, naming
    what is accepted and what was received) for anything outside the grammar."""
    source, names = _placeholders(str(text))
    try:
        tree = ast.parse(source.strip(), mode="eval").body
        _check(tree, boolean=True)
    except SyntaxError as exc:
        raise _refused(text, f"cannot be read ({exc.msg})") from None
    except _Outside as exc:
        raise _refused(text, f"holds {exc}, which is not accepted") from None
    except (RecursionError, MemoryError):
        raise _refused(text, "is nested too deeply") from None
    columns = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            name = names.get(node.id, node.id)
            node.id = name
            if name not in columns:
                columns.append(name)
    return Condition(str(text), tree, tuple(columns))


def evaluate(condition: Condition, table: pd.DataFrame) -> pd.Series:
    """One boolean per row of ``table``: whether it matches ``condition``.
    UnknownColumn for a column ``table`` lacks; ConfigError when the values
    cannot be compared (text ordered against numbers, arithmetic on text)."""
    missing = [c for c in condition.columns if c not in table.columns]
    if missing:
        raise UnknownColumn(missing[0])
    try:
        return _mask(_value(condition.tree, table), table)
    except (TypeError, ValueError, OverflowError, ZeroDivisionError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _refused(condition.text,
                       f"compares values that cannot be compared ({detail})") from None
    except RecursionError:
        raise _refused(condition.text, "is nested too deeply") from None


def select(table: pd.DataFrame, text: str) -> pd.DataFrame:
    """The rows of ``table`` matching ``--where`` ``text`` (renumbered); ConfigError
    (one line) for a refused condition or a column ``table`` lacks, naming the
    columns it has."""
    checked = parse(text)
    if not len(table):
        return table
    try:
        keep = evaluate(checked, table)
    except UnknownColumn as exc:
        import difflib
        name, valid = exc.args[0], list(map(str, table.columns))
        close = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
        hint = f" Did you mean {close[0]}?" if close else ""
        raise ConfigError(f"--where names an unknown column {name!r}.{hint} Valid columns: "
                          f"{', '.join(valid)}. Received: --where {text!r}",
                          field="where") from None
    return table[keep].reset_index(drop=True)


def _refused(text, why):
    return ConfigError(f"--where {why}; it takes {ACCEPTED}, such as {EXAMPLE}. "
                       f"Received: --where {text!r}", field="where")


# -- reading ---------------------------------------------------------------------

def _placeholders(text):
    """``text`` with each `backticked name`, and each bare name Python reserves
    (a field called ``lambda`` or ``class``), replaced by a placeholder name;
    ``&``/``|`` by ``and``/``or`` (pandas' precedence) outside quoted strings;
    and the placeholders' names. ``@`` (pandas' local variables) is refused."""
    names = {}

    def replaced(match):
        kind, piece = match.lastgroup, match.group()
        if kind == "string":
            return piece
        if kind == "op":
            if piece == "@":
                raise _refused(text, "holds @ (a Python variable), which is not accepted")
            return " and " if piece == "&" else " or "
        if kind == "tick" and (len(piece) < 2 or not piece.endswith("`")):
            raise _refused(text, "holds a backtick that is not closed")
        name = piece[1:-1] if kind == "tick" else piece
        if kind == "word" and (not keyword.iskeyword(name) or name in _GRAMMAR_WORDS):
            return piece
        key = _PLACEHOLDER.format(len(names))
        names[key] = name
        return key
    return _PIECES.sub(replaced, text), names


def _check(node, boolean=False):
    """_Outside naming the first node outside the grammar (``boolean``: the node
    stands where a condition is expected)."""
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(value, boolean=True)
    elif isinstance(node, ast.UnaryOp):
        _check_unary(node, boolean)
    elif isinstance(node, ast.Compare):
        for part in [node.left, *node.comparators]:
            _check(part)
        if not all(type(op) in _COMPARE or isinstance(op, (ast.In, ast.NotIn))
                   for op in node.ops):
            raise _Outside("is / is not")
    elif isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        _check(node.left)
        _check(node.right)
    elif isinstance(node, (ast.List, ast.Tuple)):
        for element in node.elts:
            if not _is_constant(element):
                raise _Outside("a list of something else than numbers and strings")
    elif isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, str)):
            raise _Outside(f"the constant {node.value!r}")
    elif not isinstance(node, ast.Name):
        what = next((why for kind, why in _REFUSED.items() if isinstance(node, kind)),
                    type(node).__name__)
        raise _Outside(what)


def _check_unary(node, boolean):
    if isinstance(node.op, (ast.Not, ast.Invert)):
        _check(node.operand, boolean=True)
    elif isinstance(node.op, (ast.USub, ast.UAdd)) and not boolean:
        _check(node.operand)
    else:
        raise _Outside(f"{_UNARY.get(type(node.op), 'an operator')} before a condition")


def _is_constant(node):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str))


# -- evaluating ------------------------------------------------------------------

def _value(node, table):
    """A column (Series), a constant, a list, or a boolean Series for a condition."""
    if isinstance(node, ast.Name):
        return table[node.id]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(element, table) for element in node.elts]
    if isinstance(node, ast.BoolOp):
        masks = [_mask(_value(value, table), table) for value in node.values]
        combine = operator.and_ if isinstance(node.op, ast.And) else operator.or_
        result = masks[0]
        for mask in masks[1:]:
            result = combine(result, mask)
        return result
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return ~_mask(_value(node.operand, table), table)
        value = _number(_value(node.operand, table))
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _number(_value(node.left, table)), _number(_value(node.right, table))
        return _ARITHMETIC[type(node.op)](left, right)
    return _compared(node, table)


def _compared(node, table):
    result, left = None, _value(node.left, table)
    for op, right_node in zip(node.ops, node.comparators):
        right = _value(right_node, table)
        mask = _mask(_pair(left, op, right), table)
        result = mask if result is None else result & mask
        left = right
    return result


def _pair(left, op, right):
    import pandas as pd
    if isinstance(right, list) and isinstance(op, (ast.Eq, ast.NotEq)):
        op = ast.In() if isinstance(op, ast.Eq) else ast.NotIn()
    if isinstance(op, (ast.In, ast.NotIn)):
        if isinstance(right, pd.Series):
            raise TypeError("the right of in and not in is a list, not a column")
        values = right if isinstance(right, list) else [right]
        found = left.isin(values) if isinstance(left, pd.Series) else left in values
        return ~found if isinstance(op, ast.NotIn) else found
    if isinstance(left, list) or isinstance(right, list):
        raise TypeError("a list goes on the right of in, not in, == or !=")
    return _COMPARE[type(op)](left, right)


def _number(value):
    """``value`` when it is a number or a numeric column (arithmetic on text
    could repeat a string without bound)."""
    import pandas as pd
    if isinstance(value, pd.Series):
        if pd.api.types.is_numeric_dtype(value) and not pd.api.types.is_bool_dtype(value):
            return value
        raise TypeError(f"column {value.name!r} does not hold numbers")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise TypeError(f"{value!r} is not a number")


def _mask(value, table):
    """``value`` as one boolean per row: a condition's result, a column of
    true/false values (a missing one false), or a constant True/False."""
    import pandas as pd
    if isinstance(value, bool):
        return pd.Series(value, index=table.index, dtype=bool)
    if isinstance(value, pd.Series):
        if pd.api.types.is_bool_dtype(value):
            return value.astype(bool)
        if all(isinstance(v, bool) or v is None or v != v for v in value):
            return value.map(lambda v: v is True).astype(bool)
    raise TypeError("it is not true or false for each run")


def matches(condition: Condition, row: dict) -> bool:
    """Whether one row (column -> value) matches ``condition``, by :func:`evaluate`."""
    import pandas as pd
    return bool(evaluate(condition, pd.DataFrame([row])).iloc[0])


# -- SQL -------------------------------------------------------------------------

_SQL_OPS = {ast.Eq: "=", ast.NotEq: "=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
            ast.GtE: ">="}
_FLIPPED = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}


class Column(NamedTuple):
    """How a catalog holds one column: ``sql`` (its SQL, with ``params`` before
    the compared value's) and ``kind`` (``number`` or ``text``)."""
    sql: str
    params: tuple
    kind: str


# The runs table's columns a run catalog holds as columns of its own: text ones
# and number ones (every other name is a config field, read from its JSON).
TEXT_COLUMNS = ("run_id", "experiment", "status", "tags", "note", "started_at", "ended_at")
NUMBER_COLUMNS = ("steps", "epochs", "final_loss", "train_time_s", "steps_per_s")


def catalog_kind(catalog, scope: str, params: Sequence, name: str) -> tuple[str, str]:
    """``(flat|config, number|text)``: where and how ``catalog`` holds column
    ``name`` for the runs of ``scope``; Unsupported for a name the catalog cannot
    answer as the runs table would (a column only the logs give, a config field
    of booleans, lists or mixed kinds, one named like a column, a NaN in a config)."""
    if catalog.has_nan_config():
        raise Unsupported("a config holds NaN")
    kinds = catalog.field_kinds(scope, params, name)
    if kinds:
        if name in NUMBER_COLUMNS + TEXT_COLUMNS or len(kinds) > 1 or \
                kinds[0] not in ("number", "text"):
            raise Unsupported(f"config field {name}: {kinds}")
        return "config", kinds[0]
    if name in NUMBER_COLUMNS:
        return "flat", "number"
    if name in TEXT_COLUMNS:
        return "flat", "text"
    raise Unsupported(f"unknown column {name}")


def catalog_column(db, name: str, place: str, kind: str) -> Column:
    """The :class:`Column` of ``name`` held as ``place`` (:func:`catalog_kind`)."""
    if place == "flat":
        return Column(name, (), kind)
    return Column(db.typed_field(kind), (db.key(name),), kind)


def catalog_sql(catalog, scope: str, params: Sequence, condition: Condition
                ) -> tuple[str, list]:
    """:func:`to_sql` of ``condition`` over ``catalog``'s runs of ``scope``."""
    columns = {}
    for name in condition.columns:
        columns[name] = catalog_column(catalog.db, name, *catalog_kind(catalog, scope,
                                                                         params, name))
    return to_sql(condition, columns)


def to_sql(condition: Condition, columns: dict[str, Column]) -> tuple[str, list]:
    """``(sql, params)`` true exactly for the rows :func:`evaluate` keeps (never
    NULL), given each column's :class:`Column`; Unsupported for a form only the
    table evaluation answers (arithmetic, a column against a column, a column of
    true/false values, True/False)."""
    return _sql(condition.tree, columns)


def _sql(node, columns):
    if isinstance(node, ast.BoolOp):
        # the sides reading fewer config fields first: SQLite stops at the first
        # side that decides, and a flat column costs no JSON parse
        parts = sorted((_sql(value, columns) for value in node.values),
                       key=lambda part: part[0].count("config"))
        joiner = " AND " if isinstance(node.op, ast.And) else " OR "
        return "(" + joiner.join(p[0] for p in parts) + ")", [v for p in parts for v in p[1]]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert)):
        inner, params = _sql(node.operand, columns)
        return f"(NOT {inner})", params
    if isinstance(node, ast.Compare):
        parts, left = [], node.left
        for op, right in zip(node.ops, node.comparators):
            parts.append(_sql_pair(left, op, right, columns))
            left = right
        return "(" + " AND ".join(p[0] for p in parts) + ")", [v for p in parts for v in p[1]]
    raise Unsupported(type(node).__name__)


def _sql_pair(left, op, right, columns):
    """One comparison of a column with a constant (or a list) in SQL."""
    if not isinstance(left, ast.Name) and isinstance(right, ast.Name) and type(op) in _SQL_OPS:
        left, op, right = right, _FLIPPED.get(type(op), type(op))(), left
    if not isinstance(left, ast.Name) or left.id not in columns:
        raise Unsupported("not a column compared with a constant")
    column, value = columns[left.id], _sql_constant(right)
    if isinstance(value, list) and isinstance(op, (ast.Eq, ast.NotEq)):
        op = ast.In() if isinstance(op, ast.Eq) else ast.NotIn()
    if isinstance(op, (ast.In, ast.NotIn)):
        return _sql_in(column, value if isinstance(value, list) else [value],
                       isinstance(op, ast.NotIn))
    if isinstance(value, list):
        raise Unsupported("a list compared by order")
    if _kind(value) != column.kind:   # as pandas: never equal; ordered: refused there
        if isinstance(op, (ast.Eq, ast.NotEq)):
            return ("(1 = 1)" if isinstance(op, ast.NotEq) else "(1 = 0)"), []
        raise Unsupported("text ordered against a number")
    if column.kind == "text" and not isinstance(op, (ast.Eq, ast.NotEq)):
        raise Unsupported("ordering of text")
    test = f"COALESCE({column.sql} {_SQL_OPS[type(op)]} ?, FALSE)"
    return (f"(NOT {test})" if isinstance(op, ast.NotEq) else f"({test})",
            [*column.params, value])


def _sql_in(column, values, negated):
    same = [v for v in values if _kind(v) == column.kind]
    if not same:
        return ("(1 = 1)" if negated else "(1 = 0)"), []
    test = (f"COALESCE({column.sql} IN ({', '.join('?' for _ in same)}), FALSE)")
    return (f"(NOT {test})" if negated else f"({test})"), [*column.params, *same]


def _sql_constant(node):
    """The value of a constant (or a list of them); Unsupported for anything else."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_sql_constant(element) for element in node.elts]
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign, node = (-1 if isinstance(node.op, ast.USub) else 1), node.operand
        if not (isinstance(node, ast.Constant) and _kind(node.value) == "number"):
            raise Unsupported("a sign before something else than a number")
    if not isinstance(node, ast.Constant) or _kind(node.value) is None:
        raise Unsupported("not a constant")
    return node.value * sign if sign == -1 else node.value


def _kind(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return "number"
    return "text" if isinstance(value, str) else None
