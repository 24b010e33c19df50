"""The mindexp command line: list, run (shipped, user file, TOML, --set, --name, --out)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import cli_env

USER_FILE = '''
from dataclasses import dataclass
import numpy as np
from mindspore import nn
from mindexp import Experiment


class Doubler(Experiment):
    """Learns y = 3x from a user's own file."""
    name = "doubler"

    @dataclass
    class Config(Experiment.Config):
        epochs: int = 2
        batch_size: int = 8
        lr: float = 0.1

    def source(self, split):
        x = np.linspace(0, 1, 64, dtype=np.float32).reshape(-1, 1)
        return (x, 3 * x) if split == "train" else None

    def network(self):
        return nn.Dense(1, 1)
'''


def run_dir_of(stdout):
    first = stdout.splitlines()[0]
    assert first.startswith("run directory: "), stdout
    return first.split(": ", 1)[1]


def test_list_shows_experiments_and_fields_without_importing_mindspore():
    code = ("import sys; from mindexp.cli.main import main; rc = main(['list']); "
            "rc += main(['list', 'linear']); "
            "print('IMPORTED' if 'mindspore' in sys.modules else 'CLEAN', rc)")
    done = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.strip().endswith("CLEAN 0"), done.stdout + done.stderr
    assert "linear" in done.stdout and "Learn y = 2x" in done.stdout
    assert "samples" in done.stdout and "optimizer" in done.stdout and "'sgd'" in done.stdout


# Each way a process enters mindexp: `python -m mindexp` (sweep and tune workers),
# msrun's worker script, and the console script (its target, as installed).
_ENTRIES = {"-m": "import runpy; runpy.run_module('mindexp', run_name='__main__')",
            "msrun": "import runpy; from mindexp.train.distributed import ENTRY_SCRIPT; "
                     "runpy.run_path(ENTRY_SCRIPT, run_name='__main__')",
            "script": "from importlib.metadata import entry_points; "
                      "(script,) = entry_points(group='console_scripts', name='mindexp'); "
                      "script.load()()"}


@pytest.mark.parametrize("entry", sorted(_ENTRIES))
def test_every_entry_exits_with_mains_status_without_the_last_garbage_collection(entry):
    """gc.freeze() before exit: CPython's last collection of everything MindSpore
    loaded took 0.5 s of the end of `mindexp run linear`, 1.7 s of mlp_sine's
    (benchmarks/exit_cost.py). Frozen after main() returns, never before: training
    unfreezes what it froze."""
    code = ("import atexit, gc, sys\n"
            "import mindexp.cli.main as cli\n"
            "def main(argv=None):\n"
            "    print('main', sys.argv[1:], gc.get_freeze_count() == 0)\n"
            "    return 3\n"
            "cli.main = main\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
            + _ENTRIES[entry])
    done = subprocess.run([sys.executable, "-c", code, "runs", "--out", "nowhere"],
                          env=cli_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ["main ['runs', '--out', 'nowhere'] True",
                                        "frozen True"]


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_list_takes_every_form_run_takes(cli, tmp_path):
    (tmp_path / "mine.py").write_text(USER_FILE.replace(
        "        lr: float = 0.1\n",
        "        lr: float = 0.1\n        slope: float = 3.0\n        \"\"\"the slope to learn\"\"\"\n"))
    done = cli("list", "mine.py:Doubler")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "doubler: Learns y = 3x from a user's own file."
    assert lines[1] == f"entry: {tmp_path / 'mine.py'}:Doubler"
    fields = {ln.split()[0]: ln.split(None, 3) for ln in lines[4:]}
    assert fields["slope"] == ["slope", "float", "3.0", "the slope to learn"]
    assert fields["epochs"][1:3] == ["int", "2"] and "passes over" in fields["epochs"][3]
    module = cli("list", "mindexp.experiments.linear:Linear")
    assert module.returncode == 0, module.stderr
    assert module.stdout.splitlines()[1] == "entry: mindexp.experiments.linear:Linear"
    assert "samples" in module.stdout
    missing = cli("list", "nosuch.py:Doubler")
    assert missing.returncode == 2 and "experiment file not found" in missing.stderr


@pytest.mark.slow
def test_run_with_set_config_name_and_out(cli, tmp_path):
    (tmp_path / "my.toml").write_text('lr = 0.05\noptimizer = "momentum"\nepochs = 9\n')
    done = cli("run", "linear", "--config", "my.toml", "--set", "epochs=3", "--set",
               "optimizer=adam", "--name", "try-1", "--out", "results", "--quiet")
    assert done.returncode == 0, done.stderr
    d = run_dir_of(done.stdout)
    assert d.startswith(str(tmp_path / "results" / "linear")) and "-try-1-" in os.path.basename(d)
    config = json.load(open(os.path.join(d, "config.json")))
    assert (config["lr"], config["optimizer"], config["epochs"]) == (0.05, "adam", 3)
    assert "dense.weight = " in done.stdout and "(target 2)" in done.stdout
    assert done.stderr == ""


@pytest.mark.slow
def test_run_a_users_own_file(cli, tmp_path):
    (tmp_path / "mine.py").write_text(USER_FILE)
    done = cli("run", "mine.py:Doubler", "--set", "epochs=3", "--quiet")
    assert done.returncode == 0, done.stderr
    d = run_dir_of(done.stdout)
    assert os.path.dirname(d) == str(tmp_path / "outputs" / "doubler")
    meta = json.load(open(os.path.join(d, "run.json")))
    assert meta["status"] == "completed" and meta["steps"] == 24
    assert meta["entry"] == f"{tmp_path / 'mine.py'}:Doubler"


@pytest.mark.slow  # spawns mindexp or trains: seconds
@pytest.mark.parametrize("args, message", [
    (["run", "nosuch"], "unknown experiment 'nosuch'; shipped experiments: digits, image_folder, linear"),
    (["run", "linear", "--set", "lrr=1"], "unknown config field 'lrr'. Did you mean lr"),
    (["run", "linear", "--set", "lr=-1"], "'lr' must be a number > 0"),
    (["frobnicate"], "unknown command 'frobnicate'"),
])
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, args, message):
    done = cli(*args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "outputs").exists()
