"""callbacks/schema.py is the one owner of the run directory's names, and its
atomic write leaves the old file or the new one, never a part."""
import ast
import os

import pytest

from mindexp.callbacks import schema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE_NAMES = {schema.CONFIG_JSON, schema.RUN_JSON, schema.RUN_LOCK, schema.ERROR_FILE,
              schema.EVALUATIONS_CSV, schema.ENVIRONMENT_FILE} | {
    log.filename for log in schema.LOGS.values()}


def _spelled_names(path):
    """String constants of a module (docstrings left out) that are run-dir file names."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                       ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and node.value in FILE_NAMES]


def test_no_module_but_the_schema_spells_a_run_directory_file_name():
    found = []
    for folder in ("framework", "callbacks"):
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                path = os.path.join(dirpath, name)
                if name.endswith(".py") and path != schema.__file__:
                    found += [(os.path.relpath(path, ROOT), line, text)
                              for line, text in _spelled_names(path)]
    assert found == []


def test_every_log_names_its_file_and_columns():
    assert schema.LOSS.columns == ("step", "epoch", "loss", "lr", "time_s")
    assert schema.path_of("/r", "loss") == os.path.join("/r", "loss.csv")
    assert schema.path_of("/r", schema.RUN_JSON) == os.path.join("/r", "run.json")
    for log in schema.LOGS.values():
        assert set(log.required) <= set(log.columns), log


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
