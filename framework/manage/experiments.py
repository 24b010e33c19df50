"""``mindexp list`` and ``mindexp list NAME``: experiments and their config fields,
read from source with ``ast`` (no MindSpore import).

A field's description is the string under it (an attribute docstring) or
``field(..., metadata={"help": ...})``; the common fields are described once,
in :class:`mindexp.config.Config`, and an experiment's own description wins.
"""
import ast
import difflib
import inspect
import os

from .. import config as _config
from ..catalog import shipped
from ..entry import EXPERIMENTS_DIR, SHIPPED_PREFIX
from ..errors import MindexpError


class FieldInfo:
    """One config field as ``mindexp list NAME`` shows it."""

    def __init__(self, name, type_, default, choices, help_):
        self.name, self.type, self.default = name, type_, default
        self.choices, self.help = choices, help_


def experiment_lines():
    """One line per shipped experiment: name and the first line of its docstring."""
    infos = shipped()
    width = max((len(i.name) for i in infos), default=0)
    return [f"{info.name:<{width}}  {info.doc}" for info in infos]


def describe(name):
    """The :class:`FieldInfo` of every config field of shipped experiment ``name``."""
    info = _find(name)
    with open(_module_file(info.module), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    own = _config_node(tree, info.class_name)
    docs = {**field_docs(_common_node()), **(field_docs(own) if own else {})}
    return info, [FieldInfo(n, t, d, _config.choices(n), docs.get(n, ""))
                  for n, t, d in info.fields]


def field_docs(class_node):
    """``{field: description}`` of a dataclass's ``ast.ClassDef``."""
    docs, body = {}, class_node.body
    for i, item in enumerate(body):
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        text = _metadata_help(item.value)
        nxt = body[i + 1] if i + 1 < len(body) else None
        if text is None and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) \
                and isinstance(nxt.value.value, str):
            text = nxt.value.value
        if text:
            docs[item.target.id] = " ".join(text.split())
    return docs


def _metadata_help(value):
    if not (isinstance(value, ast.Call) and getattr(value.func, "id", getattr(
            value.func, "attr", None)) == "field"):
        return None
    for keyword in value.keywords:
        if keyword.arg == "metadata":
            try:
                return ast.literal_eval(keyword.value).get("help")
            except (ValueError, AttributeError):
                return None
    return None


def _common_node():
    tree = ast.parse(inspect.getsource(_config))
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Config")


def _config_node(tree, class_name):
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return next((n for n in node.body if isinstance(n, ast.ClassDef)
                         and n.name == "Config"), None)
    return None


def _find(name):
    infos = shipped()
    for info in infos:
        if info.name == name:
            return info
    names = [i.name for i in infos]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" Did you mean {close[0]}?" if close else ""
    raise MindexpError(f"unknown experiment {name!r}.{hint} Shipped experiments: "
                       f"{', '.join(names)}. Received: {name}")


def _module_file(module):
    return os.path.join(EXPERIMENTS_DIR, module[len(SHIPPED_PREFIX):] + ".py")


def field_lines(name):
    """The text of ``mindexp list NAME``: a header, then one line per field."""
    info, fields = describe(name)
    lines = [f"{info.name}: {info.doc}", f"entry: {info.entry}", ""]
    nw = max(len(f.name) for f in fields)
    tw = max(len(f.type) for f in fields)
    dw = min(14, max(len(f.default) for f in fields))
    lines.append(f"  {'field':<{nw}}  {'type':<{tw}}  {'default':<{dw}}  description [choices]")
    for f in fields:
        text = f"  {f.name:<{nw}}  {f.type:<{tw}}  {f.default:<{dw}}  {f.help}"
        if f.choices:
            text += f" [{'|'.join(f.choices)}]"
        lines.append(text)
    return lines
