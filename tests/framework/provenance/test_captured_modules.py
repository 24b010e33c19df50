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


def loss_rows(run_dir):
    """loss.csv without its timing column."""
    with open(os.path.join(run_dir, "loss.csv"), encoding="utf-8") as f:
        rows = [line.split(",") for line in f.read().splitlines()]
    keep = [i for i, name in enumerate(rows[0]) if name != "time_s"]
    return [[row[i] for i in keep] for row in rows]


@pytest.mark.slow
def test_rerun_runs_the_captured_sibling_and_diff_names_it(cli, project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    original = run_dir_of(cli("run", "../proj/exp_main.py:TwoModules", "--quiet", cwd=elsewhere))
    source = meta_of(original)["provenance"]["source"]
    assert sorted(os.listdir(os.path.join(original, "source"))) == ["exp_main.py", "helper.py"]
    assert source["modules"] == {"helper": {"file": "helper.py",
                                            "origin": str(project / "helper.py")}}
    import hashlib
    assert source["files"]["helper.py"] == hashlib.sha256(HELPER.encode()).hexdigest()
    (project / "helper.py").write_text("HIDDEN = 4\n")
    again = run_dir_of(cli("rerun", original, "--quiet", cwd=elsewhere))
    assert loss_rows(again) == loss_rows(original)  # the 16-wide network, step for step
    assert meta_of(again)["final_loss"] == meta_of(original)["final_loss"]
    today = cli("rerun", original, "--current-code", "--quiet", cwd=elsewhere)
    assert f"helper ({project / 'helper.py'}): changed" in today.stderr
    current = run_dir_of(today)
    assert meta_of(current)["final_loss"] != meta_of(original)["final_loss"]
    shown = cli("diff", original, current)
    assert shown.returncode == 0
    assert "modules:\n" in shown.stdout and "\nhelper " in shown.stdout
    assert "-HIDDEN = 16\n+HIDDEN = 4" in shown.stdout and "+++ b/helper.py" in shown.stdout
    assert "modules: same" in cli("diff", original, again).stdout
    with open(os.path.join(original, "source", "helper.py"), "a", encoding="utf-8") as f:
        f.write("HIDDEN = 2\n")  # tampered with after the run
    refused = cli("rerun", original, "--quiet", cwd=elsewhere)
    assert refused.returncode == 2 and "source/helper.py is corrupt" in refused.stderr


def test_capture_takes_packages_and_outside_modules_honours_the_ignore_file_and_the_cap(
        tmp_path, monkeypatch):
    from mindexp.define.entry import import_file
    from mindexp.provenance import modules as M
    proj, other = tmp_path / "proj", tmp_path / "other"
    (proj / "pkg").mkdir(parents=True)
    other.mkdir()
    (proj / "pkg" / "__init__.py").write_text("")
    (proj / "pkg" / "net.py").write_text("WIDTH = 8\n")
    (proj / "secret_keys.py").write_text("TOKEN = 'x'\n")
    (proj / "big.py").write_text("DATA = '" + "a" * 4000 + "'\n")
    (other / "shared_lib.py").write_text("def scale(v):\n    return 2 * v\n")
    (proj / "exp_main.py").write_text(
        "from pkg.net import WIDTH\nimport secret_keys, big\nfrom shared_lib import scale\n")
    (proj / ".mindexpignore").write_text("# keys stay home\nsecret*.py\n")
    monkeypatch.syspath_prepend(str(other))
    monkeypatch.setattr(M, "MODULES_CAP_BYTES", 1000)
    module = import_file(str(proj / "exp_main.py"))
    exp = type("Exp", (), {"__module__": module.__name__})()  # only its class's module is read
    block = {"source": {"dir": "source", "origin": str(proj / "exp_main.py"),
                        "entry_file": "exp_main.py", "files": {}}}
    M.capture_modules(exp, str(tmp_path / "run"), block)
    source = block["source"]
    assert sorted(source["modules"]) == ["pkg", "pkg.net", "shared_lib"]
    assert source["modules"]["pkg.net"]["file"] == "pkg/net.py"
    assert (tmp_path / "run" / "source" / "pkg" / "net.py").read_text() == "WIDTH = 8\n"
    assert (tmp_path / "run" / "source" / "shared_lib.py").exists()  # outside the folder
    assert source["not_captured"]["secret_keys"]["why"] == \
        "ignored by .mindexpignore (secret*.py)"
    assert "sha256" not in source["not_captured"]["secret_keys"]
    assert "cap" in source["not_captured"]["big"]["why"]
    assert not (tmp_path / "run" / "source" / "secret_keys.py").exists()
    assert not (tmp_path / "run" / "source" / "big.py").exists()
    assert sorted(source["files"]) == ["pkg/__init__.py", "pkg/net.py", "shared_lib.py"]


@pytest.mark.parametrize("rel, patterns, ignored", [
    ("helper.py", ["*.py", "!helper.py"], None),
    ("pkg/net.py", ["pkg/"], "pkg/"),
    ("pkg/net.py", ["/net.py"], None),
    ("pkg/deep/keys.py", ["**/keys.py"], "**/keys.py"),
    ("pkg/keys.py", ["keys.py"], "keys.py"),
    # .gitignore's meaning: ** is any folders, not a prefix of a name; * stays in one folder
    ("mysecrets.py", ["**/secret*.py"], None),
    ("pkg/secret_a.py", ["**/secret*.py"], "**/secret*.py"),
    ("pkg/sub/deep.py", ["pkg/*.py"], None),
    ("pkg/top.py", ["pkg/*.py"], "pkg/*.py"),
])
def test_ignore_patterns_read_like_gitignore(tmp_path, rel, patterns, ignored):
    from mindexp.provenance.modules import ignore_rules
    (tmp_path / ".mindexpignore").write_text("# comment\n\n" + "\n".join(patterns) + "\n")
    assert ignore_rules(str(tmp_path))(rel) == ignored
