"""mindexp.track: a plain Model.train script as a run."""
import csv
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import forkserver
from conftest import cli_env

# A plain MindSpore script: Dense(1, 1) learns y = 2x (4 steps an epoch), tracked.
SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import mindspore as ms
    from mindspore import nn
    from mindspore.dataset import GeneratorDataset
    from mindspore.train import Callback, Model
    import mindexp

    class StopAt(Callback):
        '''At global step ``step``: raise, or send this process ``signum``.'''
        def __init__(self, step, signum=None):
            self.step, self.signum, self.seen = step, signum, 0
        def on_train_step_end(self, run_context):
            self.seen += 1
            if self.seen + self.start == self.step:
                if self.signum:
                    os.kill(os.getpid(), self.signum)
                else:
                    raise RuntimeError(f"boom at step {self.step}")

    def dataset():
        x = np.random.default_rng(0).random((40, 1), dtype=np.float32)
        return GeneratorDataset(list(zip(x, 2 * x)), ["x", "y"], shuffle=False).batch(10)

    def train(out, epochs=3, stop=None, resume=None, name="lin", config={"lr": 0.1}):
        ms.set_seed(0)
        net = nn.Dense(1, 1)
        model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1))
        with mindexp.track(out, name, config=config, resume=resume) as run:
            run.load(model)
            start, _ = run.position(4)
            extra = [stop] if stop is not None else []
            for cb in extra:
                cb.start = start * 4
            model.train(epochs, dataset(), callbacks=run.callbacks(model, *extra),
                        dataset_sink_mode=False, initial_epoch=start)
        return run

    if __name__ == "__main__":
        print(train(sys.argv[1], stop=StopAt(int(sys.argv[2]), signal.SIGTERM)).dir)
""")


@pytest.fixture
def script(tmp_path):
    """The script as a module of its own (imported here, run as a file in a subprocess)."""
    path = tmp_path / "lin_script.py"
    path.write_text(SCRIPT)
    sys.path.insert(0, str(tmp_path))
    import importlib
    module = importlib.import_module("lin_script")
    yield module
    sys.path.remove(str(tmp_path))
    sys.modules.pop("lin_script", None)


def _meta(run_dir):
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        return json.load(f)


def _loss_rows(run_dir):
    with open(os.path.join(run_dir, "loss.csv"), encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _cli(capsys, *args):
    from mindexp.cli.main import main
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_script_run_completes_with_the_last_row_of_loss_csv(script, tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    run = script.train(tmp_path / "out")
    meta, rows = _meta(run.dir), _loss_rows(run.dir)
    assert meta["status"] == "completed" and meta["entry"] == f"script:{script.__file__}"
    assert meta["steps"] == int(rows[-1]["step"]) == 12
    assert meta["final_loss"] == pytest.approx(float(rows[-1]["loss"]), rel=1e-9)
    assert meta["experiment"] == "lin" and os.path.isfile(os.path.join(run.dir, "config.json"))
    assert signal.getsignal(signal.SIGTERM) is before  # restored on exit
    assert not os.path.exists(os.path.join(run.dir, ".lock"))  # released once final


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_script_run_shows_in_runs_show_and_compare(script, tmp_path, capsys):
    out = tmp_path / "out"
    first, second = script.train(out).dir, script.train(out).dir
    assert first != second  # two runs of the script: two runs
    code, text, _ = _cli(capsys, "runs", out)
    assert code == 0 and os.path.basename(first) in text and os.path.basename(second) in text
    code, text, _ = _cli(capsys, "show", first)
    assert code == 0 and "completed" in text and "script:" in text and "lr" in text
    code, text, _ = _cli(capsys, "compare", out / "lin", "--csv", tmp_path / "c.csv")
    assert code == 0
    with open(tmp_path / "c.csv", encoding="utf-8") as f:
        table = {r["run_id"]: r for r in csv.DictReader(f)}
    row = table[os.path.basename(first)]
    assert row["status"] == "completed"
    assert float(row["final_loss"]) == pytest.approx(_meta(first)["final_loss"], rel=1e-6)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_an_exception_in_the_block_fails_the_run_and_propagates(script, tmp_path):
    with pytest.raises(RuntimeError, match="boom at step 6"):
        script.train(tmp_path / "out", stop=script.StopAt(6))
    (run_dir,) = (tmp_path / "out" / "lin").iterdir()
    meta = _meta(run_dir)
    assert meta["status"] == "failed" and "boom at step 6" in meta["error"]
    assert "RuntimeError: boom at step 6" in (run_dir / "error.txt").read_text()


@pytest.mark.parametrize("name, config, field", [
    ("../escape", {}, "name"), ("lin", {"lr": 0.1, "net": object()}, "net")])
def test_a_bad_name_or_config_is_refused_before_any_folder(script, tmp_path, name, config, field):
    import mindexp
    with pytest.raises(mindexp.ConfigError) as err:
        script.train(tmp_path / "out", name=name, config=config)
    assert "\n" not in str(err.value) and "Received" in str(err.value) and field in str(err.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_resume_continues_the_run_with_each_step_once(script, tmp_path):
    with pytest.raises(RuntimeError):
        script.train(tmp_path / "out", epochs=5, stop=script.StopAt(10))  # in epoch 3
    (run_dir,) = (tmp_path / "out" / "lin").iterdir()
    run = script.train(tmp_path / "out", epochs=5, resume=run_dir)
    assert run.dir == str(run_dir)
    meta = _meta(run_dir)
    assert meta["status"] == "completed" and meta["steps"] == 20
    assert [r["step"] for r in _loss_rows(run_dir)] == [str(s) for s in range(1, 21)]
    assert meta["resumes"][0]["step"] == 8 and meta["resumes"][0]["previous_status"] == "failed"


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_mindexp_resume_and_rerun_of_a_script_run_refuse_in_one_line(script, tmp_path, capsys):
    run = script.train(tmp_path / "out", epochs=1)
    for command in ("resume", "rerun"):
        code, _, err = _cli(capsys, command, run.dir)
        assert code == 2 and err.count("\n") == 1
        assert "script run" in err and "track(..., resume=" in err


def test_sigterm_ends_a_script_run_interrupted_with_status_143(tmp_path):
    path = tmp_path / "lin_script.py"
    path.write_text(SCRIPT)
    done = forkserver.run([sys.executable, str(path), str(tmp_path / "out"), "6"],
                          env=cli_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 143, done.stderr[-2000:]
    (run_dir,) = (tmp_path / "out" / "lin").iterdir()
    meta = _meta(run_dir)
    assert meta["status"] == "interrupted" and meta["signal"] == "SIGTERM"
    assert meta["steps"] == 6 == int(_loss_rows(run_dir)[-1]["step"])
