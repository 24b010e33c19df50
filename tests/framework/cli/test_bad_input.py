"""Every bad input a user can give: one line on stderr naming the problem and
what is accepted, exit 2, no traceback, nothing created or changed under the
output root."""
import hashlib
import json

import pytest

GOOD_EXP = '''
from dataclasses import dataclass
import numpy as np
from mindspore import nn
from mindexp import Experiment


class Good(Experiment):
    """A fine experiment."""
    name = "good"

    @dataclass
    class Config(Experiment.Config):
        epochs: int = 1
        batch_size: int = 4

    def source(self, split):
        x = np.ones((8, 1), np.float32)
        return (x, x) if split == "train" else None

    def network(self):
        return nn.Dense(1, 1)


class NotAnExperiment:
    pass


class Ragged(Good):
    def source(self, split):
        return (np.ones((8, 1), np.float32), np.ones((7, 1), np.float32)) if split == "train" else None


class Strings(Good):
    def source(self, split):
        return (np.array([["a"]] * 8), np.ones((8, 1), np.float32)) if split == "train" else None


class ThreeArrays(Good):
    def source(self, split):
        x = np.ones((8, 1), np.float32)
        return (x, x, x) if split == "train" else None


class WrongShape(Good):
    def network(self):
        return nn.Dense(1, 3)


class FlatLabels(Good):
    def source(self, split):
        return (np.ones((8, 1), np.float32), np.ones(8, np.float32)) if split == "train" else None


class SourceRaises(Good):
    def source(self, split):
        raise KeyError("no such file: data.npz")


class Validates(Good):
    def validate(self):
        from mindexp import ConfigError
        if self.config.epochs > 5:
            raise ConfigError(f"Validates runs at most 5 epochs. Received: epochs={self.config.epochs}",
                              field="epochs")
'''

CASES = {
    # what is run: (args, text that must be on the one stderr line)
    "unknown experiment": (["run", "nosuch"], "unknown experiment 'nosuch'; shipped experiments: "),
    "missing file": (["run", "missing.py:Good"], "experiment file not found"),
    "syntax error": (["run", "broken.py:Good"], "has a syntax error at line 1"),
    "import raises": (["run", "raises.py:X"], "importing"),
    "no such class": (["run", "exp.py:Nope"], "has no class 'Nope'; Experiment classes there: Good"),
    "not an Experiment": (["run", "exp.py:NotAnExperiment"], "is not a subclass of mindexp.Experiment"),
    "ambiguous file": (["run", "exp.py"], "name the class as file.py:ClassName"),
    "not a .py": (["run", "exp.txt:Good"], "expected path/to/file.py:ClassName or an importable "
                  "package.module:ClassName; importing 'exp.txt' failed"),
    "unknown field": (["run", "linear", "--set", "lrr=0.1"], "unknown config field 'lrr'. Did you mean lr"),
    "set without =": (["run", "linear", "--set", "lr"], "--set expects NAME=VALUE"),
    "set empty name": (["run", "linear", "--set", "=3"], "--set expects NAME=VALUE"),
    "int ill-typed": (["run", "linear", "--set", "epochs=many"], "'epochs' expects an integer"),
    "int given float": (["run", "linear", "--set", "epochs=2.5"], "'epochs' expects an integer"),
    "float ill-typed": (["run", "linear", "--set", "lr=fast"], "'lr' expects a number"),
    "float inf": (["run", "linear", "--set", "lr=inf"], "'lr' expects a number"),
    "bool ill-typed": (["run", "linear", "--set", "sink=perhaps"], "'sink' expects true or false"),
    "lr zero": (["run", "linear", "--set", "lr=0"], "'lr' must be a number > 0"),
    "lr negative": (["run", "linear", "--set", "lr=-0.1"], "'lr' must be a number > 0"),
    "epochs zero": (["run", "linear", "--set", "epochs=0"], "'epochs' must be an integer >= 1"),
    "epochs beyond 64 bits": (["run", "linear", "--set", "epochs=99999999999999999999"],
                              "'epochs' expects an integer of 64 bits (-2**63 to 2**63-1). "
                              "Received: epochs='99999999999999999999'"),
    "epochs beyond 32 bits": (["run", "linear", "--set", "epochs=4294967296"],
                              "'epochs' must be an integer >= 1 and < 2**31"),
    "seed beyond 64 bits": (["run", "linear", "--set", "seed=-99999999999999999999"],
                            "'seed' expects an integer of 64 bits"),
    "batch zero": (["run", "linear", "--set", "batch_size=0"], "'batch_size' must be an integer >= 1"),
    "batch too big": (["run", "linear", "--set", "batch_size=500"], "at most the training set size 100"),
    "accumulation too big": (["run", "linear", "--set", "grad_accumulation=20"],
                             "batch_size x grad_accumulation (10 x 20)"),
    "accumulation zero": (["run", "linear", "--set", "grad_accumulation=0"], "'grad_accumulation' must be"),
    "unknown optimizer": (["run", "linear", "--set", "optimizer=adamm"],
                          "must be one of sgd, momentum, adam, adamw, rmsprop, adagrad"),
    "unknown mode": (["run", "linear", "--set", "mode=eager"], "must be one of graph, pynative"),
    "unknown loss": (["run", "linear", "--set", "loss=hinge"], "'loss' must be one of"),
    "unknown amp": (["run", "linear", "--set", "amp_level=O9"], "one of O0, O1, O2, O3"),
    "unknown schedule": (["run", "linear", "--set", "lr_schedule=linear"], "'lr_schedule' must be one of"),
    "momentum range": (["run", "linear", "--set", "momentum=1"], "'momentum' must be a number in [0, 1)"),
    "clip negative": (["run", "linear", "--set", "clip_grad_norm=-2"], "'clip_grad_norm' must be"),
    "warmup too long": (["run", "linear", "--set", "warmup_steps=100000"], "at most the run's 300 steps"),
    "seed negative": (["run", "linear", "--set", "seed=-1"], "'seed' must be an integer in"),
    "log_every zero": (["run", "linear", "--set", "log_every=0"], "'log_every' must be an integer >= 1"),
    "experiment validate": (["run", "exp.py:Validates", "--set", "epochs=9"], "at most 5 epochs"),
    "toml malformed": (["run", "linear", "--config", "bad.toml"], "is not valid TOML"),
    "toml unknown key": (["run", "linear", "--config", "unknown.toml"], "unknown config field 'learning_rate'"),
    "toml ill-typed": (["run", "linear", "--config", "typed.toml"], "'epochs' expects an integer"),
    "toml missing": (["run", "linear", "--config", "nope.toml"], "config file not found"),
    "out not writable": (["run", "linear", "--out", "afile/sub"], "cannot create the output folder"),
    "name with slash": (["run", "linear", "--name", "a/b"], "--name must be 1-64 characters"),
    "name with dotdot": (["run", "linear", "--name", "..x"], "(no '/', '..' or control characters)"),
    "name with control": (["run", "linear", "--name", "a\x01b"], "--name must be"),
    "name too long": (["run", "linear", "--name", "n" * 80], "--name must be 1-64 characters"),
    "workers zero": (["run", "linear", "--workers", "0"], "--workers: must be an integer >= 1"),
    "workers text": (["run", "linear", "--workers", "two"], "--workers: must be an integer >= 1"),
    "workers in config": (["run", "linear", "--set", "workers=0"], "'workers' must be an integer >= 1"),
    "ragged arrays": (["run", "exp.py:Ragged"], "different lengths: x has 8, y has 7"),
    "string dtype": (["run", "exp.py:Strings"], "column 'x' of source('train') has dtype <U1"),
    "three arrays": (["run", "exp.py:ThreeArrays"], "returned 3 arrays but the experiment declares 2"),
    "output shape": (["run", "exp.py:WrongShape"], "output shape (4, 3) does not match the labels' shape (4, 1)"),
    "flat labels": (["run", "exp.py:FlatLabels"], "output shape (4, 1) does not match the labels' shape (4,)"),
    "source raises": (["run", "exp.py:SourceRaises"], "SourceRaises.source('train') raised KeyError"),
    "resume not a run": (["resume", "somedir"], "not a run directory"),
    "resume missing": (["resume", "does/not/exist"], "not a run directory"),
    "resume bad set": (["resume", "outputs/linear/r1", "--set", "epochs=x"], "'epochs' expects an integer"),
    "unknown command": (["train", "linear"], "unknown command 'train'. Did you mean run?"),
    "missing experiment": (["run"], "the following arguments are required: experiment"),
    "unknown option": (["run", "linear", "--fast"], "unrecognized arguments: --fast"),
}


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "exp.py").write_text(GOOD_EXP)
    (tmp_path / "exp.txt").write_text(GOOD_EXP)
    (tmp_path / "broken.py").write_text("class Good(\n  def x\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('no GPU here')\n")
    (tmp_path / "bad.toml").write_text("lr = = 0.1\n")
    (tmp_path / "unknown.toml").write_text("learning_rate = 0.1\n")
    (tmp_path / "typed.toml").write_text('epochs = "ten"\n')
    (tmp_path / "afile").write_text("a file where a folder is needed\n")
    (tmp_path / "somedir").mkdir()
    run = tmp_path / "outputs" / "linear" / "r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": "failed", "entry": "experiments.linear:Linear"}))
    (run / "config.json").write_text(json.dumps({"epochs": 3}))
    return tmp_path


def snapshot(root):
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_bad_input(workdir, monkeypatch, capsys, case):
    """In-process through the CLI's main() (the process-level behaviour, exit
    status and no traceback, is covered in test_cli.py)."""
    from mindexp.cli.main import main
    args, expected = CASES[case]
    monkeypatch.chdir(workdir)
    before = snapshot(workdir)
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 2, (code, out[-500:], err[-2000:])
    assert err.startswith("mindexp: ") and err.count("\n") == 1, err
    assert expected in err, err
    assert out == ""
    assert snapshot(workdir) == before  # nothing created or changed


def test_corpus_is_large():
    assert len(CASES) >= 40
