"""``mindexp list`` and ``mindexp list NAME``: experiments and their config fields,
read from source with ``ast`` (no MindSpore import).

A field's description is the string under it (an attribute docstring) or
``field(..., metadata={"help": ...})``; the common fields are described once,
in the groups :class:`mindexp.define.config.Config` inherits (each in its
owner's module), and an experiment's own description wins.
"""
import ast
import dataclasses
import inspect
import os
import textwrap

from ..define import config as _config
from ..define.catalog import resolve_spec, shipped, shipped_info
from ..define.entry import EXPERIMENTS_DIR, SHIPPED_PREFIX


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
    """``(header lines, [FieldInfo])`` of experiment ``name``: any form ``mindexp
    run`` accepts (a shipped name is read from source; a file or module entry
    is imported, as ``run`` would)."""
    info = shipped_info(name)
    if info is None:
        return _describe_class(*resolve_spec(name))
    info, fields = _describe_shipped(info)
    return [f"{info.name}: {info.doc}", f"entry: {info.entry}"], fields


def _describe_class(cls, entry):
    doc = (inspect.getdoc(cls) or "").strip().splitlines()
    docs = _dataclass_docs(cls.Config)
    fields = [FieldInfo(n, t, repr(d), _config.choices(n), docs.get(n, ""))
              for n, t, d in _config.field_defaults(cls.Config)]
    return [f"{cls.experiment_name()}: {doc[0] if doc else ''}", f"entry: {entry}"], fields


def _dataclass_docs(config_cls):
    """``{field: description}`` of a Config class and its bases (the common
    fields' groups among them); a subclass's description wins."""
    docs = {}
    for klass in reversed(config_cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_class_docs(klass))
    return docs


def _class_docs(klass):
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
    except (OSError, TypeError, SyntaxError):  # no source to read: no descriptions
        return {}
    return field_docs(node.body) if isinstance(node, ast.ClassDef) else {}


def _describe_shipped(info):
    docs = {**_dataclass_docs(_config.Config),
            **field_docs(config_body(info.module, info.class_name) or [])}
    return info, [FieldInfo(n, t, d, _config.choices(n), docs.get(n, ""))
                  for n, t, d in info.fields]


def field_docs(body):
    """``{field: description}`` of the statements of a dataclass's ``ast.ClassDef``."""
    docs = {}
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


def config_body(module, class_name):
    """The statements of the ``Config`` inside class ``class_name`` of ``module``
    (a shipped module or a ``.py`` file), read from its source without importing
    it: [] when it declares none, None when the source cannot be read."""
    try:
        with open(_source_file(module), encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, TypeError):   # TypeError: no source file at all
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return next((n.body for n in node.body if isinstance(n, ast.ClassDef)
                         and n.name == "Config"), [])
    return []


def _source_file(module):
    if module.endswith(".py"):
        return module if os.path.isfile(module) else None
    for prefix in (SHIPPED_PREFIX, "experiments."):
        if module.startswith(prefix):
            path = os.path.join(EXPERIMENTS_DIR, module[len(prefix):] + ".py")
            return path if os.path.isfile(path) else None
    return None


def field_lines(name):
    """The text of ``mindexp list NAME``: a header, then one line per field."""
    header, fields = describe(name)
    lines = header + [""]
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
