"""mindexp tune: bad spaces, real searches, pruning, shared storage, resume, signals."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import forkserver
from conftest import cli_env, require
from searches import lost_trial
from searches import forked_workers  # noqa: F401  (autouse: workers forked, see searches.py)

optuna = require("optuna")

LINEAR_SPACE = ["--param", "lr=loguniform:1e-3:1", "--param", "optimizer=choice:sgd,momentum,adam"]


def _trials(storage, study):
    from mindexp.search.study import open_storage
    return optuna.load_study(study_name=study, storage=open_storage(storage)).get_trials()


def _run_json(run_dir):
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        return json.load(f)


def _one_error_line(result):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("mindexp: error:"), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def main_cli(capsys):
    """``mindexp ARGS`` through the command line's main() in this process
    (MindSpore imported once for all the bad-input cases)."""
    from mindexp.cli.main import main

    def run(*args):
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, captured.out, captured.err)
    return run


@pytest.mark.parametrize("experiment, args, named", [
    ("linear", ["--param", "lrate=loguniform:1e-3:1"], "'lrate' is not a config field"),
    ("linear", ["--param", "lr=loguniform:0:1"], "loguniform needs 0 < LOW"),
    ("mlp_sine", ["--param", "hidden=int:5:1"], "int needs LOW <= HIGH"),
    ("mlp_sine", ["--param", "hidden=choice:16,wide"], "choice value 'wide'"),
    ("linear", ["--param", "optimizer=choice:sgd,nadam"], "must be one of sgd, momentum"),
    ("linear", ["--param", "optimizer=uniform:0:1"], "is a string"),
    ("linear", ["--param", "lr=loguniform:1e-3:1", "--objective", "accuracy"],
     "unknown objective 'accuracy'"),
    ("linear", ["--param", "lr=loguniform:1e-3:1", "--sampler", "grid"], "grid needs choice or int"),
    ("linear", ["--param", "lr=loguniform:1e-3:1", "--set", "lr=0.1"], "both --param and --set"),
    ("linear", ["--param", "lr=loguniform:1e-3:1", "--objective", "train_time_s"],
     "cannot tell whether objective 'train_time_s' should be minimized or maximized"),
])
def test_bad_space_is_one_line_and_creates_nothing(main_cli, tmp_path, experiment, args, named):
    result = main_cli("tune", experiment, *args, "--out", tmp_path / "out")
    assert named in _one_error_line(result)
    assert not (tmp_path / "out").exists()


def test_unknown_objective_lists_the_compare_columns(main_cli, tmp_path):
    line = _one_error_line(main_cli("tune", "linear", *LINEAR_SPACE, "--objective", "weight_err",
                               "--out", tmp_path / "out"))
    for column in ("final_loss", "min_loss", "dense.weight_error"):
        assert column in line


def test_an_eval_objective_without_its_metric_says_how_to_add_it(main_cli, tmp_path):
    """Only numbers are objectives (not tags, note, git_commit or the dirty flag),
    and eval_loss without the loss metric says how to add it."""
    line = _one_error_line(main_cli("tune", "spirals", *LINEAR_SPACE, "--set", "metrics=accuracy",
                                    "--objective", "eval_loss", "--out", tmp_path / "out"))
    assert "unknown objective 'eval_loss'" in line
    listed = line.split("columns: ", 1)[1].split(" (", 1)[0].split(", ")
    assert "final_loss" in listed and "best_eval_accuracy" in listed
    assert not {"tags", "note", "git_commit", "dirty"} & set(listed)
    assert "needs the eval metric 'loss'" in line and "--set metrics=accuracy,loss" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_missing_optuna_names_the_extra(cli, tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "optuna.py").write_text("raise ImportError('No module named optuna')\n")
    env = cli_env()
    env["PYTHONPATH"] = f"{blocker}{os.pathsep}{env['PYTHONPATH']}"
    result = forkserver.run([sys.executable, "-m", "mindexp", "tune", "linear", *LINEAR_SPACE,
                             "--out", str(tmp_path / "out")], env=env, capture_output=True,
                            text=True, timeout=120)
    assert "pip install 'mindexp[tune]'" in _one_error_line(result)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_linear_search_finds_the_slope(cli, tmp_path):
    result = cli("tune", "linear", *LINEAR_SPACE, "--trials", "12", "--objective",
                 "dense.weight_error", "--direction", "minimize", "--seed", "0", "--out", "out")
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "out" / "studies" / "linear"
    trials = _trials(str(folder / "journal.log"), "linear")
    assert sorted(t.number for t in trials) == list(range(12))
    best = min((t for t in trials if t.state.name == "COMPLETE"), key=lambda t: t.value)
    meta = _run_json(best.user_attrs["run_dir"])
    assert abs(meta["params"]["dense.weight"] - 2.0) < 0.01
    assert (meta["study"], meta["trial"], meta["status"]) == ("linear", best.number, "completed")
    assert f"best trial {best.number}: value {best.value:.6g}" in result.stdout
    assert not list(folder.glob("*.png"))   # MINDEXP_PLOTS=0: none (drawn: the test below)
    shown = cli("tune", "--show", "--study", "linear", "--out", "out")
    assert shown.returncode == 0 and f"best trial {best.number}:" in shown.stdout
    assert best.user_attrs["run_dir"] in shown.stdout
    from mindexp import compare
    table = compare(str(folder)).set_index("trial")
    assert sorted(table.index) == list(range(12))
    assert table.loc[best.number, "lr"] == pytest.approx(best.params["lr"])
    assert table.loc[best.number, "trial_state"] == "COMPLETE"


@pytest.mark.slow
def test_a_study_draws_its_plots_at_its_end(cli, tmp_path):
    # two complete trials (no pruner): the fewest param_importances draws from; each
    # trial's run draws its own plots too with MINDEXP_PLOTS=1 (about a CPU-second
    # each: with them the twelve-trial search above took 22 CPU-s instead of 8)
    result = cli("tune", "linear", *LINEAR_SPACE, "--trials", "2", "--objective",
                 "dense.weight_error", "--direction", "minimize", "--seed", "0",
                 "--pruner", "none", "--set", "epochs=2", "--out", "out", MINDEXP_PLOTS="1")
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "out" / "studies" / "linear"
    for name in ("optimization_history.png", "param_importances.png", "parallel_coordinate.png"):
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def _eval_mse_column():
    from mindexp.experiments.mlp_sine import MlpSine
    from mindexp.search.objective import resolve_objective
    from mindexp import ConfigError
    for column in ("eval_mse", "final_mse"):  # compare()'s name for the last eval mse
        try:
            return resolve_objective(MlpSine(), column, "minimize").column
        except ConfigError:
            continue
    raise AssertionError("compare() reports no eval mse column")


@pytest.mark.slow
def test_median_pruner_prunes_mlp_sine(cli, tmp_path):
    objective = _eval_mse_column()
    fixed = ["--set", "epochs=8", "--set", "samples=256", "--set", "hidden=16"]
    result = cli("tune", "mlp_sine", "--param", "lr=loguniform:1e-4:0.1", "--trials", "8",
                 "--objective", objective, "--pruner", "median", "--seed", "3", *fixed,
                 "--out", "out")
    assert result.returncode == 0, result.stderr
    trials = _trials(str(tmp_path / "out/studies/mlp_sine/journal.log"), "mlp_sine")
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert pruned and complete
    full_steps = min(_run_json(t.user_attrs["run_dir"])["steps"] for t in complete)
    for t in pruned:
        meta = _run_json(t.user_attrs["run_dir"])
        assert meta["status"] == "pruned" and meta["steps"] < full_steps
        assert os.path.getsize(os.path.join(t.user_attrs["run_dir"], "loss.csv")) > 0
    best = min(complete, key=lambda t: t.value)
    again = cli("run", "mlp_sine", *fixed, "--set", f"lr={best.params['lr']!r}", "--quiet",
                "--out", "rerun")
    assert again.returncode == 0, again.stderr
    from mindexp import compare
    unpruned = float(compare(str(tmp_path / "rerun"))[objective].iloc[0])
    assert best.value <= 2 * unpruned


def _tune_cmd(*args):
    return [sys.executable, "-m", "mindexp", "tune", "linear", *LINEAR_SPACE, "--set", "epochs=2",
            "--pruner", "none", *map(str, args)]


@pytest.mark.slow
def test_two_processes_share_one_storage(tmp_path):
    journal = tmp_path / "shared" / "study.journal"
    procs = [forkserver.popen(_tune_cmd("--trials", 6, "--study", "shared", "--storage", journal,
                                        "--out", tmp_path / out, *extra),
                              env=cli_env(), cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for out, extra in (("a", ["--workers", "2"]), ("b", []))]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    trials = _trials(str(journal), "shared")
    assert sorted(t.number for t in trials) == list(range(6))
    assert all(t.state.name == "COMPLETE" for t in trials)
    run_dirs = [t.user_attrs["run_dir"] for t in trials]
    assert len(set(run_dirs)) == 6  # one run per trial: none ran twice
    found = [d for out in ("a", "b") for d in (tmp_path / out / "studies/shared/linear").glob("*")
             if (tmp_path / out / "studies/shared/linear").exists()]
    assert sorted(map(str, found)) == sorted(run_dirs)
    assert sorted(_run_json(d)["trial"] for d in run_dirs) == list(range(6))


@pytest.mark.slow
def test_resume_continues_to_the_total_and_the_seed_repeats(cli, tmp_path):
    first = cli(*_tune_cmd("--trials", 2, "--seed", 5, "--out", "out")[3:])
    assert first.returncode == 0, first.stderr
    more = cli(*_tune_cmd("--trials", 4, "--seed", 5, "--out", "out")[3:])
    assert more.returncode == 0, more.stderr
    assert "2 of 4 trials to run" in more.stdout
    done = cli(*_tune_cmd("--trials", 4, "--seed", 5, "--out", "out")[3:])
    assert "0 of 4 trials to run" in done.stdout
    trials = _trials(str(tmp_path / "out/studies/linear/journal.log"), "linear")
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    # The same seed and sampler with one worker: the same parameters, trial by trial.
    again = cli(*_tune_cmd("--trials", 2, "--seed", 5, "--study", "again", "--out", "out")[3:])
    assert again.returncode == 0, again.stderr
    twin = _trials(str(tmp_path / "out/studies/again/journal.log"), "again")
    assert [t.params for t in twin] == [t.params for t in trials[:2]]
    other = cli(*_tune_cmd("--trials", 2, "--seed", 6, "--study", "other", "--out", "out")[3:])
    assert other.returncode == 0, other.stderr
    assert [t.params for t in _trials(str(tmp_path / "out/studies/other/journal.log"),
                                      "other")] != [t.params for t in trials[:2]]


@pytest.mark.slow
def test_sigint_marks_the_trial_interrupted_and_resume_runs_it_again(cli, tmp_path):
    cmd = [sys.executable, "-m", "mindexp", "tune", "linear", *LINEAR_SPACE, "--set",
           "epochs=400", "--pruner", "none", "--trials", "1", "--out", str(tmp_path / "out")]
    proc = forkserver.popen(cmd, env=cli_env(), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    runs = tmp_path / "out/studies/linear/linear"
    deadline = time.monotonic() + 300
    while not any(runs.glob("*/loss.csv")) if runs.exists() else True:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    journal = str(tmp_path / "out/studies/linear/journal.log")
    (trial,) = _trials(journal, "linear")
    assert trial.state.name == "FAIL" and trial.user_attrs["interrupted"]
    assert _run_json(trial.user_attrs["run_dir"])["status"] == "interrupted"
    assert "INTERRUPTED" in out
    # the same command with fewer epochs (in this process: what is tested here is the
    # signal to the first process, and how the study takes its interrupted trial)
    again = cli(*cmd[3:cmd.index("epochs=400")], "epochs=2", *cmd[cmd.index("epochs=400") + 1:])
    assert again.returncode == 0, again.stderr
    assert "1 of 1 trials to run" in again.stdout  # the interrupted trial is not counted
    assert [t.state.name for t in _trials(journal, "linear")] == ["FAIL", "COMPLETE"]


def test_the_objective_direction_follows_its_name_as_early_stopping_does():
    from mindexp.callbacks.direction import direction_of_name
    from mindexp.define.config import monitor_mode
    for name in ("eval_accuracy", "best_eval_accuracy", "eval_auc", "eval_f1", "eval_precision",
                 "eval_recall", "eval_r2", "eval_classification_accuracy"):
        assert direction_of_name(name) == "max" and monitor_mode(name) == "max", name
    for name in ("final_loss", "min_loss", "eval_loss", "eval_mse", "best_eval_mae",
                 "dense.weight_error", "eval_regression_mse", "eval_top5_error"):
        assert direction_of_name(name) == "min" and monitor_mode(name) == "min", name
    for name in ("train_time_s", "steps_per_s", "dense.weight", "eval_custom"):
        assert direction_of_name(name) is None, name


def _tiny_study(tmp_path, experiment="linear", space=None, **kwargs):
    """A real one-trial study trained in this process (MindSpore imported once)."""
    from mindexp.search import tune
    config = {"epochs": 1, **kwargs.pop("config", {})}
    return tune(experiment, space or {"lr": "loguniform:1e-3:1"}, trials=1, config=config,
                pruner="none", out=str(tmp_path / "out"), **kwargs)


@pytest.fixture(scope="module")
def _linear_study(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    _tiny_study(root)
    return root / "out"


@pytest.fixture
def linear_study(_linear_study, tmp_path):
    """``tmp_path/out``: a copy of one real one-trial study of linear over lr=loguniform:1e-3:1."""
    import shutil
    shutil.copytree(_linear_study, tmp_path / "out")
    return tmp_path / "out"


@pytest.mark.slow  # spawns mindexp or trains: seconds
@pytest.mark.parametrize("args, named", [
    (["--param", "lr=uniform:0.5:0.9"], "searches lr=loguniform:0.001:1, but this command gives "
                                        "--param lr=uniform:0.5:0.9"),
    (["--param", "lr=loguniform:1e-3:1", "--param", "momentum=uniform:0.5:0.9"],
     "does not search momentum, but this command gives --param momentum=uniform:0.5:0.9"),
    (["--param", "optimizer=choice:sgd,adam"], "searches lr=loguniform:0.001:1, but this command "
                                               "gives no --param lr"),
])
def test_another_space_on_an_existing_study_is_refused_before_anything_runs(main_cli, tmp_path,
                                                                           linear_study, args,
                                                                           named):
    line = _one_error_line(main_cli("tune", "linear", *args, "--trials", 3,
                                    "--out", tmp_path / "out"))
    assert named in line and "--study NEW_NAME" in line
    (trial,) = _trials(str(tmp_path / "out/studies/linear/journal.log"), "linear")
    assert trial.state.name == "COMPLETE"  # nothing asked, nothing run


def test_another_space_from_python_raises_the_same_line(tmp_path, linear_study):
    from mindexp import ConfigError, MindexpError
    from mindexp.search import tune
    with pytest.raises(ConfigError) as info:
        tune("linear", {"lr": "uniform:0.5:0.9"}, trials=3, out=str(tmp_path / "out"))
    assert isinstance(info.value, MindexpError) and len(str(info.value).splitlines()) == 1
    assert "searches lr=loguniform:0.001:1, but this command gives --param lr=uniform:0.5:0.9" \
        in str(info.value)
    assert len(_trials(str(tmp_path / "out/studies/linear/journal.log"), "linear")) == 1


def test_a_study_made_before_spaces_were_recorded_is_checked_by_its_trials(main_cli, tmp_path):
    from mindexp.search.study import open_storage
    journal = tmp_path / "out/studies/linear/journal.log"
    study = optuna.create_study(study_name="linear", storage=open_storage(str(journal)))
    study.add_trial(optuna.trial.create_trial(
        params={"lr": 0.1}, value=1.0,
        distributions={"lr": optuna.distributions.FloatDistribution(1e-3, 1.0, log=True)}))
    line = _one_error_line(main_cli("tune", "linear", "--param", "lr=uniform:0.5:0.9",
                                    "--out", tmp_path / "out"))
    assert "searches lr=loguniform:0.001:1, but this command gives --param lr=uniform:0.5:0.9" \
        in line


def test_show_and_the_table_take_trials_without_a_run(main_cli, tmp_path, linear_study):
    from mindexp.search.study import open_storage
    journal = str(tmp_path / "out/studies/linear/journal.log")
    study = optuna.load_study(study_name="linear", storage=open_storage(journal))
    study.ask()  # a trial still RUNNING: no run directory yet
    failed = study.ask()
    failed.set_user_attr("run_dir", None)
    study.tell(failed, state=optuna.trial.TrialState.FAIL)  # a FAIL with no run
    result = main_cli("tune", "--show", "--study", "linear", "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    rows = [ln.split() for ln in result.stdout.splitlines() if ln.split()[:1] in (["1"], ["2"])]
    assert [r[1] for r in rows] == ["RUNNING", "FAIL"]
    from mindexp.search import study_frame
    import pandas as pd
    assert pd.isna(study_frame("linear", out=str(tmp_path / "out"))["run_dir"][1:]).all()


@pytest.mark.slow
def test_an_inferred_direction_is_printed_and_made(main_cli, tmp_path):
    fixed = {"epochs": 1, "samples": 64}
    _tiny_study(tmp_path, "spirals", {"lr": "loguniform:1e-3:1"}, objective="eval_accuracy",
                config=fixed)
    from mindexp.search.study import open_storage
    study = optuna.load_study(study_name="spirals", storage=open_storage(
        str(tmp_path / "out/studies/spirals/journal.log")))
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    result = main_cli("tune", "spirals", "--param", "lr=loguniform:1e-3:1", "--trials", 1,
                      "--objective", "eval_accuracy", *sum((["--set", f"{k}={v}"]
                                                           for k, v in fixed.items()), []),
                      "--out", tmp_path / "out")
    assert result.returncode in (0, 1), result.stderr  # 1: no trial with a value (see report)
    assert "study spirals: eval_accuracy (maximize, from its name; --direction to choose)" \
        in result.stdout


FRAGILE = '''
from dataclasses import dataclass

import numpy as np
from mindspore import nn

from mindexp import Experiment


class Fragile(Experiment):
    """A line fit whose network cannot be built with width 0."""
    name = "fragile"

    @dataclass
    class Config(Experiment.Config):
        width: int = 1
        epochs: int = 1

    columns = ("x", "y")

    def source(self, split):
        x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(-1, 1)
        return (x, 2 * x) if split == "train" else None

    def network(self):
        if self.config.width == 0:
            raise ValueError("width 0 leaves no units")
        return nn.Dense(1, 1)
'''


@pytest.mark.slow
def test_a_failed_trial_prints_its_reason_and_its_log_holds_the_traceback(cli, tmp_path):
    (tmp_path / "fragile.py").write_text(FRAGILE)
    result = cli("tune", "fragile.py:Fragile", "--param", "width=choice:0,1", "--sampler", "grid",
                 "--trials", 2, "--out", "out")
    assert result.returncode == 0, result.stderr
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("trial ")]
    assert len(lines) == 2, result.stdout  # the grid's last trial too (its stop() crashed it)
    failed = [ln for ln in lines if "failed" in ln]
    assert len(failed) == 1 and "(width=0): ValueError: width 0 leaves no units" in failed[0]
    number = failed[0].split()[1].rstrip(":")
    log = (tmp_path / f"out/studies/fragile/logs/trial-{number}.log").read_text()
    assert "Traceback (most recent call last)" in log and 'raise ValueError("width 0' in log


def _wait_for(condition, what, timeout=300):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _has_rows(folder):
    return any(len(p.read_text().splitlines()) > 2 for p in folder.glob("*/loss.csv")) \
        if folder.exists() else False


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().split(")")[-1].split()[0] == "Z"  # a zombie has ended
    except FileNotFoundError:
        return True


@pytest.mark.slow
def test_kill_9_of_the_driver_ends_its_worker_and_a_rerun_continues(cli, tmp_path):
    space = ["--param", "lr=loguniform:1e-3:1", "--sampler", "random", "--seed", 7,
             "--pruner", "none", "--out", "out"]
    proc = forkserver.popen([sys.executable, "-m", "mindexp", "tune", "linear", *map(str, space),
                             "--set", "epochs=3000", "--trials", "2"], env=cli_env(),
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: _has_rows(tmp_path / "out/studies/linear/linear"), "a trial's first rows")
    journal = str(tmp_path / "out/studies/linear/journal.log")
    (first,) = _trials(journal, "linear")
    worker = first.user_attrs["pid"]
    assert worker != proc.pid and not _gone(worker)
    proc.kill()
    proc.wait(timeout=60)
    _wait_for(lambda: _gone(worker), "the orphaned worker to exit", timeout=180)
    (first,) = _trials(journal, "linear")
    assert first.state.name == "FAIL" and first.user_attrs["interrupted"]
    assert _run_json(first.user_attrs["run_dir"])["status"] == "interrupted"
    again = cli("tune", "linear", *space, "--set", "epochs=2", "--trials", 2)
    assert again.returncode == 0, again.stderr
    assert "2 of 2 trials to run" in again.stdout  # the interrupted trial is not counted
    trials = _trials(journal, "linear")
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    lrs = [t.params["lr"] for t in trials]
    assert len(set(lrs)) == 3  # the seeded sampler went on instead of starting over
    shown = cli("tune", "--show", "--study", "linear", "--out", "out")
    assert shown.returncode == 0 and "INTERRUPTED" in shown.stdout, shown.stderr


@pytest.mark.slow
def test_a_trial_whose_worker_went_silent_is_failed_by_its_heartbeat(cli, tmp_path):
    import sqlite3
    from mindexp.search.liveness import GRACE_S
    database = tmp_path / "study.db"
    url = f"sqlite:///{database}"
    lost_trial(url)
    with sqlite3.connect(database) as db:
        db.execute("UPDATE trial_heartbeats SET heartbeat = datetime('now', ?)",
                   (f"-{GRACE_S + 60} seconds",))
    result = cli("tune", "linear", "--param", "lr=loguniform:1e-3:1", "--storage", url,
                 "--set", "epochs=2", "--pruner", "none", "--trials", 1, "--out", "out")
    assert result.returncode == 0, result.stderr
    assert "1 of 1 trials to run" in result.stdout
    trials = _trials(url, "linear")
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]


@pytest.mark.slow
def test_a_trial_of_a_killed_process_is_failed_by_its_lock_and_not_counted(cli, tmp_path):
    # lr at most 0.01: a trial whose lr came out near 1 diverged within its first rows
    # and was told FAIL by its own process before the kill (a random 1 in 6 flake)
    script = ("from mindexp.search import tune\n"
              "tune('linear', {'lr': 'loguniform:1e-3:1e-2'}, trials=1, pruner='none',\n"
              "     config={'epochs': 3000}, out='out')\n")
    proc = forkserver.popen([sys.executable, "-c", script], env=cli_env(), cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: _has_rows(tmp_path / "out/studies/linear/linear"), "a trial's first rows")
    proc.kill()  # trials ran in this process: nobody is left to tell the study
    proc.wait(timeout=60)
    journal = str(tmp_path / "out/studies/linear/journal.log")
    assert [t.state.name for t in _trials(journal, "linear")] == ["RUNNING"]
    again = cli("tune", "linear", "--param", "lr=loguniform:1e-3:1e-2", "--set", "epochs=2",
                "--pruner", "none", "--trials", 1, "--out", "out")
    assert again.returncode == 0, again.stderr
    assert "1 of 1 trials to run" in again.stdout
    dead, done = _trials(journal, "linear")
    assert (dead.state.name, done.state.name) == ("FAIL", "COMPLETE")
    assert "worker died" in dead.user_attrs["error"]
    shown = cli("tune", "--show", "--study", "linear", "--out", "out")
    assert shown.returncode == 0, shown.stderr
    assert f"best trial {done.number}:" in shown.stdout


@pytest.mark.slow
def test_a_full_disk_stops_tune_in_one_line_and_the_same_command_continues(cli, small_disk):
    """Before: every trial failed for the disk, each counted, exit 0; the same
    command then said "0 of 6 trials to run" (here 3)."""
    import optuna
    from mindexp.search.study import NO_SPACE, counted, finished_short, open_storage
    # one checkpoint of this MLP (with Adam's moments) is larger than the 512 KiB disk
    args = ["tune", "mlp_sine", "--param", "lr=loguniform:1e-3:0.1", "--pruner", "none",
            "--trials", 3, "--set", "hidden=256", "--set", "samples=64", "--set",
            "checkpoint_interval_s=0", "--out", small_disk]
    full = cli(*args, "--set", "epochs=400")
    assert full.returncode == 1, full.stdout + full.stderr
    assert full.stderr.count("\n") == 1 and "Traceback" not in full.stderr, full.stderr
    assert full.stderr.startswith("mindexp: the disk is full: trial ")
    assert "No space left on device" in full.stderr and "run the same command again" in full.stderr
    journal = str(small_disk / "studies/mlp_sine/journal.log")
    trials = _trials(journal, "mlp_sine")
    lost = [t for t in trials if t.user_attrs.get(NO_SPACE)]
    assert lost and all(t.state.name == "FAIL" and not counted(t) for t in lost)
    assert len(trials) < 3    # no trial started after the disk filled
    assert not (small_disk / "studies/mlp_sine/.space-reserve").exists()
    done = sum(counted(t) for t in trials)
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)  # room
    again = cli(*args, "--set", "epochs=1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{3 - done} of 3 trials to run" in again.stdout
    study = optuna.load_study(study_name="mlp_sine", storage=open_storage(journal))
    assert finished_short(study, 3) == 0
