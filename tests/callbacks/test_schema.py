"""callbacks/schema.py (the files the callbacks write) and framework/layout.py
(the framework's own) own the run directory's names, one owner each; the schema's
atomic write leaves the old file or the new one, never a part."""
import ast
import functools
import os
import re

import pytest

from mindexp.callbacks import schema
from mindexp import layout

from conftest import ROOT  # noqa: E402  (the repository)
SOURCE_FOLDERS = ("framework", "callbacks", "experiments")
OWNERS = (schema, layout)  # the two modules that may spell a run directory's names
OWNER_FILES = {owner.__file__ for owner in OWNERS}


def _named_files(owner):
    """The file and folder names ``owner`` gives (its upper-case strings)."""
    return {name: value for name, value in vars(owner).items()
            if name.isupper() and isinstance(value, str)}


# Every name the owners give a file or folder of a run directory, and every column of its logs.
FILE_NAMES = {value for owner in OWNERS for value in _named_files(owner).values()} | {
    log.filename for log in schema.LOGS.values()} | {layout.EVALUATIONS.filename}
COLUMNS = {column for log in schema.LOGS.values() for column in log.columns}
# The column groups the schema defines (a log's columns, its required ones, the text
# columns): spelled again as a list or a CSV header, they are a second definition.
# Two-name groups ("epoch", "step") are left out: they are sort keys as often.
COLUMN_GROUPS = {frozenset(group) for group in [schema.TEXT_COLUMNS] + [
    cols for log in schema.LOGS.values() for cols in (log.columns, log.required)]
    if len(group) >= 3}
# Folder names are ordinary words too ("source", "tensorboard" the command): spelled as a
# path (an os.path.join argument, "x/plots", "plots/x") they count, as words they do not.
FOLDER_NAMES = {name for name in FILE_NAMES if "." not in name}
_PATH_CALLS = {"join", "path_of", "glob", "isdir", "isfile", "exists", "listdir", "makedirs",
               "mkdir"}


@functools.lru_cache(maxsize=None)
def _parsed(path):
    """``(lines, tree)`` of a module, parsed once for all the scans."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return text.splitlines(), ast.parse(text, str(path))


def _docstrings(tree):
    """Strings standing alone as statements: docstrings, a field's documentation."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _text_of(node):
    """The literal text of a string constant, an f-string (``{}`` for each formatted
    part) or a ``+`` of those; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text_of(node.left), _text_of(node.right)
        if left is not None or right is not None:
            return (left if left is not None else "{}") + (right if right is not None else "{}")
    return None


def _file_names_in(text, as_path):
    """Schema file names ``text`` spells: a dotted name anywhere as a whole word
    (``{d}/loss.csv``, ``no run.json``), a folder name as the whole text in a path
    call or as a path part (``checkpoints/{name}``)."""
    found = []
    for name in FILE_NAMES:
        if name not in text:  # each way below spells the name itself (a cheap test first)
            continue
        pattern = (rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)" if name not in FOLDER_NAMES
                   else rf"(?:^|/){re.escape(name)}/|/{re.escape(name)}$")
        if re.search(pattern, text) or (text == name and (as_path or name not in FOLDER_NAMES)):
            found.append(name)
    return found


def _column_lists_in(node):
    """A literal list/tuple/set, or a CSV header, that spells a column group of the schema."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        if len(words) == len(node.elts) and frozenset(words) in COLUMN_GROUPS:
            return [",".join(words)]
    text = _text_of(node)
    if text is not None:
        return [m for m in re.findall(r"\w+(?:,\w+)+", text)
                if frozenset(m.split(",")) in COLUMN_GROUPS]
    return []


def _spellings(path):
    """(line, text) of each schema name a module spells (docstrings left out)."""
    tree = _parsed(path)[1]
    skip = _docstrings(tree)
    path_args = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and getattr(node.func, "attr", getattr(node.func, "id", None)) in _PATH_CALLS
                 for arg in node.args}
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)  # read whole, not part by part
        text = _text_of(node)
        if text is not None:
            found += [(node.lineno, name) for name in _file_names_in(text, id(node) in path_args)]
        found += [(node.lineno, cols) for cols in _column_lists_in(node)]
    return sorted(set(found))


def _modules():
    for folder in SOURCE_FOLDERS:
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            yield from (os.path.join(dirpath, name) for name in sorted(files)
                        if name.endswith(".py"))


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_no_module_but_the_schema_spells_a_run_directory_name():
    found, scanned = [], 0
    for path in _modules():
        if path not in OWNER_FILES:
            scanned += 1
            found += [(os.path.relpath(path, ROOT), line, text) for line, text in _spellings(path)]
    assert scanned >= 100, f"only {scanned} modules scanned below {ROOT}"
    assert found == []


@pytest.mark.parametrize("source, spelled", [
    ('p = os.path.join(d, "checkpoints", name)', "checkpoints"),
    ('p = f"{run_dir}/loss.csv"', "loss.csv"),
    ('p = run_dir + "/" + "eval" + ".csv"', "eval.csv"),
    ('raise E(f"{d} has no run.json")', "run.json"),
    ('p = f"checkpoints/{name}"', "checkpoints"),
    ('header = "step,epoch,loss,lr,time_s"', "step,epoch,loss,lr,time_s"),
    ('probe = "step,epoch,loss\\n1,1,0.5\\n"', "step,epoch,loss"),
    ('COLUMNS = ("step", "epoch", "param", "value")', "step,epoch,param,value"),
])
def test_the_scan_sees_each_way_of_spelling_a_name(tmp_path, source, spelled):
    module = tmp_path / "m.py"
    module.write_text(f'"""A module: its docstring may name run.json."""\n{source}\n')
    assert [text for _, text in _spellings(module)] == [spelled]


def test_the_scan_leaves_ordinary_words_alone(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('cmd = "tensorboard"\nblock.get("source")\nprint("plots: x")\n'
                      's = ("epoch", "step")\nt = ("step", "epoch", "value")\n'
                      'class C:\n    x: int = 1\n    """written to params.csv"""\n')
    assert _spellings(module) == []


# -- column names: schema.Col, never a literal where a column is meant -----------------------
COLUMN_NAMES = {value for cls in (schema.Col, layout.EvalCol)
                for name, value in vars(cls).items() if name.isupper()}
# Calls whose first argument (or by=/subset=) names a column: a row's or a table's.
_COLUMN_CALLS = {"get", "groupby", "drop_duplicates", "sort_values", "set_index", "pop",
                 "truncate_after", "dropna", "unique"}
# The same words meaning something else than a log's column where they are read:
# (module, word, the code around it) -> what it is.
NOT_COLUMNS = {
    ("framework/train/resume_checks.py", "lr", "old_config"): "a config field of the old run",
    ("framework/cli/search.py", "value", "event"): "a trial's value in a search event",
    ("framework/train/resume_point.py", "step", '"learning_rate"'): "an entry of the .ckpt file",
    ("framework/train/resume_point.py", "epoch", '"learning_rate"'): "an entry of the .ckpt file",
    ("framework/manage/show.py", "step", "r.get('step')"): "a resume event of run.json",
    ("framework/manage/show.py", "checkpoint", "r.get('checkpoint')"): "a resume event of run.json",
    ("framework/manage/cleanup.py", "loss", '"min_loss"'): "a compare table's column",
    ("framework/analysis/reports.py", "loss", 'summary["loss"]'): "a part of summary.json",
    ("framework/analysis/tensorboard_export.py", "loss", 'out["loss"]'): "a TensorBoard hparams tag",
    ("framework/define/experiment.py", "epoch", "inspect.signature"): "a parameter of source()",
    ("framework/analysis/mlflow_model.py", "checkpoint", 'json.load(f)["checkpoint"]'):
        "model.json's entry",
    ("framework/define/entry.py", "file", 'info["file"]'): "a captured module's manifest entry",
    ("framework/define/entry.py", "file", 'info.get("file")'): "a captured module's manifest entry",
    ("framework/manage/diff.py", "file", 'info.get("file")'): "a captured module's manifest entry",
    ("framework/provenance/modules.py", "file", 'info.get("file")'): "a captured module's entry",
    ("framework/define/transforms.py", "kind", 'entry.get("kind")'): "run.json's transform entry",
    ("framework/provenance/data.py", "file", 'out["file"]'): "a data fingerprint's entry",
    ("framework/provenance/data.py", "file", 'column.get("file")'): "a data fingerprint's entry",
    ("framework/provenance/data.py", "file", "column['file']"): "a data fingerprint's entry",
    ("framework/provenance/data.py", "kind", "item.get('kind')"): "a data fingerprint's entry",
    ("framework/train/mlflow_stream.py", "file", '"file", "sqlite"'): "a URI scheme",
    ("framework/analysis/tensorboard_export.py", "epoch", 'frame["epoch"]'): "a figure frame "
                                                                              "of payload.images",
}


def _not_a_column(where, line, name):
    return any((where, name) == key[:2] and key[2] in line for key in NOT_COLUMNS)


def _columns_named(node):
    """Column names a node spells as a literal: the string itself, or a tuple/list/set's."""
    elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [e.value for e in elts if isinstance(e, ast.Constant) and e.value in COLUMN_NAMES]


def _column_literals(path):
    """(line, name) of each column name spelled as a literal where a column is meant:
    a subscript (``row["step"]``, ``t.loc[m, "step"]``), a column call's argument
    (``row.get("loss")``, ``t.groupby("param")``) or an ``in`` test
    (``"loss" in t.columns``, ``c not in ("epoch", "step")``); the NOT_COLUMNS left out."""
    lines, tree = _parsed(path)
    where = os.path.relpath(path, ROOT)
    return [(line, name) for line, name in _column_spots(tree)
            if not _not_a_column(where, lines[line - 1], name)]


def _column_spots(tree):
    found = []
    for node in ast.walk(tree):
        spots = []
        if isinstance(node, ast.Subscript):
            spots = [node.slice]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) in _COLUMN_CALLS:
            spots = node.args[:1] + [k.value for k in node.keywords if k.arg in ("by", "subset")]
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            spots = [node.left, node.comparators[0]]
        found += [(node.lineno, name) for spot in spots for name in _columns_named(spot)]
    return sorted(set(found))


def _schema_aliases(path):
    """(line, text) of each schema or layout name a module gives another name:
    ``import X as Y`` from either, or a module/class-level ``Y = schema.X``
    (``layout.X``; also wrapped in ``set``/``tuple``/``frozenset``/``list``)."""
    tree = _parsed(path)[1]
    found = [(node.lineno, f"{a.name} as {a.asname}") for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom)
             and (node.module or "").endswith(("schema", "layout"))
             for a in node.names if a.asname and a.asname != a.name]
    scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    for stmt in (s for scope in scopes for s in scope.body):
        value = getattr(stmt, "value", None) if isinstance(stmt, (ast.Assign, ast.AnnAssign)) \
            else None
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) in (
                "set", "tuple", "frozenset", "list") and len(value.args) == 1:
            value = value.args[0]
        if _is_schema_name(value):
            found.append((stmt.lineno, ast.unparse(stmt)))
    return found


def _is_schema_name(node):
    while isinstance(node, ast.Attribute):
        node = node.value
        if isinstance(node, ast.Name) and node.id in ("schema", "layout"):
            return True
    return False


def test_no_framework_module_spells_a_column_name_where_a_column_is_meant():
    found, scanned = [], 0
    for path in _modules():
        where = os.path.relpath(path, ROOT)
        if where.startswith("framework" + os.sep):
            scanned += 1
            found += [(where, line, name) for line, name in _column_literals(path)]
    assert scanned >= 50, f"only {scanned} modules scanned below {ROOT}/framework"
    assert found == []


def test_no_module_gives_a_schema_name_another_name():
    found = []
    for path in _modules():
        if path not in OWNER_FILES:
            found += [(os.path.relpath(path, ROOT), line, text)
                      for line, text in _schema_aliases(path)]
    assert found == []


@pytest.mark.parametrize("source, spelled", [
    ('x = loss["step"]', ["step"]),
    ('x = table.loc[mask, "epoch"]', ["epoch"]),
    ('x = row.get("loss")', ["loss"]),
    ('x = params.groupby("param", sort=False)', ["param"]),
    ('x = t.sort_values(by="time_s")', ["time_s"]),
    ('x = "grad_norm" in table.columns', ["grad_norm"]),
    ('x = [c for c in t if c not in ("epoch", "step")]', ["epoch", "step"]),
    ('x = t[schema.Col.STEP] if name == "loss" else {"value": 1}', []),
])
def test_the_column_scan_sees_a_literal_where_a_column_is_meant(tmp_path, source, spelled):
    module = tmp_path / "m.py"
    module.write_text(source + "\n")
    assert [name for _, name in _column_literals(module)] == spelled


@pytest.mark.parametrize("source, aliased", [
    ("from ..callbacks.schema import LOG_REGISTRY as REGISTRY", True),
    ("from ..layout import RUN_JSON as RUN_FILE", True),
    ("LOCK_FILE = layout.RESUME_LOCK", True),
    ("STEP = schema.Col.STEP", True),
    ("_TEXT = set(schema.TEXT_COLUMNS)", True),
    ("class C:\n    COLUMNS = schema.LOSS.columns", True),
    ("from ..callbacks.schema import Col", False),
    ("def f():\n    cols = schema.LOSS.columns", False),
    ("LOGS = tuple(schema.LOGS[n].filename for n in ('loss', 'eval'))", False),
])
def test_the_alias_scan_sees_a_schema_name_renamed(tmp_path, source, aliased):
    module = tmp_path / "m.py"
    module.write_text(source + "\n")
    assert bool(_schema_aliases(module)) is aliased


def _names_used_in(path):
    """Every name a module reads: ``x.NAME``, a bare ``NAME`` or ``from m import NAME``."""
    tree = _parsed(path)[1]
    return ({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
            | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            | {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names})


def test_the_schema_names_only_files_the_callbacks_use():
    """A file the framework alone writes is named in layout.py, never in the schema: each
    file name and log of the schema is read by a callbacks module, and each column of
    schema.Col is a column of one of its logs."""
    callbacks = os.path.join(ROOT, "callbacks")
    used = set().union(*(_names_used_in(os.path.join(callbacks, name))
                         for name in os.listdir(callbacks)
                         if name.endswith(".py") and name != "schema.py"))
    logs = {name for name, value in vars(schema).items() if isinstance(value, schema.Log)}
    assert sorted((set(_named_files(schema)) | logs) - used) == []
    columns = {column for log in schema.LOGS.values() for column in log.columns}
    assert {value for name, value in vars(schema.Col).items() if name.isupper()} <= columns


def test_no_name_of_the_run_directory_has_two_owners():
    assert set(_named_files(schema)) & set(_named_files(layout)) == set()
    assert set(_named_files(schema).values()) & set(_named_files(layout).values()) == set()
    assert {log.filename for log in schema.LOGS.values()} & set(
        _named_files(layout).values()) == set()
    assert layout.EVALUATIONS.name not in schema.LOGS


def test_every_log_names_its_file_and_columns():
    assert schema.LOSS.columns == ("step", "epoch", "loss", "lr", "time_s")
    assert schema.path_of("/r", "loss") == os.path.join("/r", "loss.csv")
    assert schema.path_of("/r", layout.RUN_JSON) == os.path.join("/r", "run.json")
    for log in schema.LOGS.values():
        assert set(log.required) <= set(log.columns), log


def test_log_of_file_knows_each_log_and_its_step_column_a_ranks_file_too():
    assert schema.log_of_file("loss.csv") is schema.LOSS
    assert schema.log_of_file("grad_norm.rank3.csv") is schema.GRAD_NORM
    assert schema.log_of_file("eval.csv").step_column == "step"
    assert schema.log_of_file("user/steps.csv") is None          # a user's own log
    assert schema.log_of_file("loss.rank0.csv") is None          # rank 0 writes loss.csv
    assert all(log.step_column == "step" for log in schema.LOGS.values())


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("old")
    schema.atomic_write(path, "new")
    schema.atomic_write(tmp_path / "bytes.bin", b"\x00\x01")
    assert path.read_text() == "new" and (tmp_path / "bytes.bin").read_bytes() == b"\x00\x01"
    assert sorted(os.listdir(tmp_path)) == ["bytes.bin", "run.json"]


def test_a_failed_atomic_write_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    path.write_text("old")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        schema.atomic_write(path, "new")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["run.json"]


def test_read_rows_reads_a_log_as_dicts_and_a_missing_one_as_nothing(tmp_path):
    (tmp_path / "loss.csv").write_text("step,epoch,loss\n1,1,0.5\n2,1,0.25\n")
    assert schema.read_rows(schema.path_of(tmp_path, "loss")) == [
        {"step": "1", "epoch": "1", "loss": "0.5"}, {"step": "2", "epoch": "1", "loss": "0.25"}]
    assert schema.read_rows(schema.path_of(tmp_path, "eval")) == []
