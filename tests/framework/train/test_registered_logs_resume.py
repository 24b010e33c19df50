"""Resume checks and cuts the logs registered with the run, not a fixed list:
a user's log (text columns and all) is cut back to the checkpoint, a damaged
registered log is named before anything is cut, and a run made by 0.3 (no
registry) resumes by 0.3's logs, each rank's included, and gets a registry.

One run of each kind is trained per module; each test resumes a copy."""
import hashlib
import json
import os
import shutil
import sys

import pandas as pd
import pytest
from mindspore.train import Callback

from mindexp.api import resume_run
from mindexp.callbacks import CsvLog, list_checkpoints, registered_logs
from mindexp.train.resume_checks import DamagedLogError

from test_eval import LinearEval
from test_tracked import SCRIPT

USER_LOG = os.path.join("user", "steps.csv")


class StepLog(Callback):
    """A plain MindSpore callback with a log of its own: the run's step, a text
    column and a number, one row a step."""

    def __init__(self, folder):
        self.log = CsvLog(os.path.join(folder, USER_LOG), ["step", "phase", "value"])

    def on_train_step_end(self, run_context):
        step = run_context.original_args().cur_step_num
        self.log.write([step, "warmup" if step <= 5 else "main", step * 0.5])

    def flush(self):  # the framework flushes it before each checkpoint
        self.log.flush()

    def on_train_end(self, run_context):
        self.log.close()


class WithStepLog(LinearEval):
    def callbacks(self):
        return [StepLog(self.run_dir)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 3-epoch run (10 steps an epoch) with a user log, checkpoints at 10, 20, 30."""
    out = tmp_path_factory.mktemp("trained")
    run = WithStepLog(epochs=3, checkpoint_every=1, checkpoint_interval_s=0,
                      metrics=("loss",)).run(out=str(out))
    assert run.meta["status"] == "completed"
    return run.dir


def _copy(run_dir, tmp_path, back_to=20):
    """A copy of the run whose checkpoints after ``back_to`` are gone: its resume
    starts there and must cut every log back to it."""
    copy = str(tmp_path / "out" / "linear_eval" / os.path.basename(run_dir))
    shutil.copytree(run_dir, copy)
    for found, _, path in list_checkpoints(copy, "all"):
        if found > back_to:
            os.remove(path)
    return copy


def _damage(path, line, text):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    lines[line - 1] = text
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def _digests(run_dir):
    found = {}
    for folder, _, files in os.walk(run_dir):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                found[os.path.relpath(os.path.join(folder, name), run_dir)] = \
                    hashlib.sha256(f.read()).hexdigest()
    return found


@pytest.mark.slow  # trains: seconds
def test_a_user_log_with_text_columns_is_cut_back_and_holds_each_step_once(trained, tmp_path):
    run_dir = _copy(trained, tmp_path)
    assert registered_logs(run_dir)[USER_LOG.replace(os.sep, "/")] == "step"
    resumed = resume_run(run_dir)
    assert resumed.meta["status"] == "completed" and resumed.meta["resumes"][0]["step"] == 20
    mine = pd.read_csv(os.path.join(run_dir, USER_LOG))
    assert mine["step"].tolist() == list(range(1, 31))          # each step once, 21..30 again
    assert mine["phase"].tolist() == ["warmup"] * 5 + ["main"] * 25   # its text is no damage
    assert resumed.loss["step"].tolist() == list(range(1, 31))


@pytest.mark.slow  # trains: seconds
@pytest.mark.parametrize("line, text, why", [
    (7, "6,main", "expected 3 fields, got 2"),
    (9, "8x,main,4.0", "step='8x' is not a number"),
])
def test_a_damaged_registered_log_is_named_and_nothing_is_cut(trained, tmp_path, line, text,
                                                               why):
    run_dir = _copy(trained, tmp_path)
    _damage(os.path.join(run_dir, USER_LOG), line, text)
    before = _digests(run_dir)
    with pytest.raises(DamagedLogError) as err:
        resume_run(run_dir)
    assert f"user/steps.csv line {line} is damaged ({why})" in str(err.value)
    assert "\n" not in str(err.value)
    assert _digests(run_dir) == before   # no log cut, run.json untouched


@pytest.mark.slow  # trains: seconds
def test_a_run_made_by_0_3_resumes_by_its_logs_and_gets_a_registry(trained, tmp_path):
    run_dir = _copy(trained, tmp_path)
    os.remove(os.path.join(run_dir, "logs.json"))             # 0.3 wrote none
    resumed = resume_run(run_dir)
    assert resumed.meta["status"] == "completed" and resumed.meta["resumes"][0]["step"] == 20
    assert resumed.loss["step"].tolist() == list(range(1, 31))
    assert resumed.eval["step"].tolist() == [10, 20, 30]
    logs = registered_logs(run_dir)
    assert {"loss.csv", "eval.csv", "params.csv", "checkpoints.csv"} <= set(logs)
    assert logs["loss.csv"] == "step" and logs["evaluations.csv"] is None


@pytest.mark.slow  # trains: seconds
def test_a_damaged_rank_log_of_a_0_3_run_is_named_and_nothing_is_cut(trained, tmp_path):
    """0.3's logs are each rank's files too: resume cuts loss.rank1.csv, so it
    checks it first (the fixed list named rank 0's files only)."""
    run_dir = _copy(trained, tmp_path)
    os.remove(os.path.join(run_dir, "logs.json"))
    rank1 = os.path.join(run_dir, "loss.rank1.csv")
    shutil.copy(os.path.join(run_dir, "loss.csv"), rank1)
    _damage(rank1, 4, "3,1,zero,0.1,0.2")
    before = _digests(run_dir)
    with pytest.raises(DamagedLogError, match=r"loss\.rank1\.csv line 4 is damaged "
                                              r"\(loss='zero' is not a number\)"):
        resume_run(run_dir)
    assert _digests(run_dir) == before and not os.path.exists(os.path.join(run_dir, "logs.json"))


@pytest.fixture(scope="module")
def script_run(tmp_path_factory):
    """A script run (mindexp.track) of 3 epochs of 4 steps with a registered log
    of its own writer, and the script module that resumes it."""
    folder = tmp_path_factory.mktemp("script")
    (folder / "reg_script.py").write_text(SCRIPT)
    sys.path.insert(0, str(folder))
    try:
        import reg_script
        run = reg_script.train(folder / "out", epochs=3)
    finally:
        sys.path.remove(str(folder))
    mine = os.path.join(run.dir, "mine.csv")
    pd.DataFrame({"at": range(1, 13), "note": ["x"] * 12}).to_csv(mine, index=False)
    from mindexp.callbacks import register_log
    register_log(mine, "at", run_dir=run.dir)
    yield reg_script, run.dir
    sys.modules.pop("reg_script", None)


@pytest.mark.slow  # trains: seconds
def test_a_script_run_resumed_with_a_damaged_registered_log_is_refused_naming_it(
        script_run, tmp_path):
    """track(resume=) checks the registered logs as `mindexp resume` does (it
    checked none, and resumed on a log with a row of three fields under two)."""
    script, trained_dir = script_run
    run_dir = str(tmp_path / "out" / "lin" / os.path.basename(trained_dir))
    shutil.copytree(trained_dir, run_dir)
    for found, _, path in list_checkpoints(run_dir, "all"):
        if found > 8:
            os.remove(path)
    _damage(os.path.join(run_dir, "mine.csv"), 3, "2,x,3")
    before = _digests(run_dir)
    with pytest.raises(DamagedLogError, match=r"mine\.csv line 3 is damaged"):
        script.train(tmp_path / "out", epochs=3, resume=run_dir)
    assert _digests(run_dir) == before
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        assert json.load(f)["status"] == "completed"
