"""A project of several modules: `run FILE.py:Class` imports the file's siblings
(its folder first on the import path), and a run captures every module of the
user's that the experiment imported."""
import json
import os
import subprocess
import sys

import pytest

from conftest import cli_env

HELPER = "HIDDEN = 16\n"
EXP_MAIN = '''
from dataclasses import dataclass
import numpy as np
from mindspore import nn
from mindexp import Experiment
import helper


class TwoModules(Experiment):
    """A network whose width comes from a sibling module."""
    name = "two_modules"

    @dataclass
    class Config(Experiment.Config):
        epochs: int = 2
        batch_size: int = 16
        lr: float = 0.05
        seed: int = 3

    def source(self, split):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(64, 2)).astype(np.float32)
        y = (np.sin(x[:, :1]) + x[:, 1:] ** 2).astype(np.float32)
        return (x, y) if split == "train" else None

    def network(self):
        return nn.SequentialCell(nn.Dense(2, helper.HIDDEN), nn.Tanh(),
                                 nn.Dense(helper.HIDDEN, 1))
'''


@pytest.fixture
def project(tmp_path):
    """``proj/exp_main.py`` importing its sibling ``proj/helper.py``."""
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "helper.py").write_text(HELPER)
    (folder / "exp_main.py").write_text(EXP_MAIN)
    (tmp_path / "elsewhere").mkdir()
    return folder


def run_dir_of(done):
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("run directory: "), done.stdout
    return first.split(": ", 1)[1]


def meta_of(run_dir):
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.slow
def test_console_script_runs_a_file_importing_its_sibling_from_another_folder(project, tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), "mindexp")
    if not os.path.exists(script):
        pytest.skip("no mindexp console script beside this Python (not an installed venv)")
    done = subprocess.run([script, "run", "../proj/exp_main.py:TwoModules", "--set", "epochs=1",
                           "--out", "out", "--quiet"], cwd=tmp_path / "elsewhere",
                          env=cli_env(), capture_output=True, text=True, timeout=300)
    run = run_dir_of(done)  # before: ModuleNotFoundError: No module named 'helper'
    assert meta_of(run)["status"] == "completed"
    assert os.path.dirname(os.path.dirname(run)) == str(tmp_path / "elsewhere" / "out")


def test_import_file_puts_its_folder_first_and_imports_an_edited_sibling_afresh(
        project, tmp_path, monkeypatch):
    """What every loader of a file entry does (run, msrun and sweep/tune workers, resume)."""
    from mindexp.define.entry import import_file
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    module = import_file(str(project / "exp_main.py"))
    assert sys.path[0] == str(project) and module.helper.HIDDEN == 16
    (project / "helper.py").write_text("HIDDEN = 4\n")
    assert import_file(str(project / "exp_main.py")).helper.HIDDEN == 4
