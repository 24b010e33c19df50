"""mindexp tune: bad spaces, real searches, pruning, shared storage, resume, signals."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import cli_env, require

optuna = require("optuna")

LINEAR_SPACE = ["--param", "lr=loguniform:1e-3:1", "--param", "optimizer=choice:sgd,momentum,adam"]


def _trials(storage, study):
    from mindexp.tune.study import open_storage
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


def test_missing_optuna_names_the_extra(cli, tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "optuna.py").write_text("raise ImportError('No module named optuna')\n")
    env = cli_env()
    env["PYTHONPATH"] = f"{blocker}{os.pathsep}{env['PYTHONPATH']}"
    result = subprocess.run([sys.executable, "-m", "mindexp", "tune", "linear", *LINEAR_SPACE,
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
    for name in ("optimization_history.png", "param_importances.png", "parallel_coordinate.png"):
        assert (folder / name).stat().st_size > 0
    shown = cli("tune", "--show", "--study", "linear", "--out", "out")
    assert shown.returncode == 0 and f"best trial {best.number}:" in shown.stdout
    assert best.user_attrs["run_dir"] in shown.stdout
    from mindexp import compare
    table = compare(str(folder)).set_index("trial")
    assert sorted(table.index) == list(range(12))
    assert table.loc[best.number, "lr"] == pytest.approx(best.params["lr"])
    assert table.loc[best.number, "trial_state"] == "COMPLETE"


def _eval_mse_column():
    from mindexp.experiments.mlp_sine import MlpSine
    from mindexp.tune.objective import resolve_objective
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
    procs = [subprocess.Popen(_tune_cmd("--trials", 6, "--study", "shared", "--storage", journal,
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
def test_sigint_marks_the_trial_interrupted_and_resume_runs_it_again(tmp_path):
    cmd = [sys.executable, "-m", "mindexp", "tune", "linear", *LINEAR_SPACE, "--set",
           "epochs=400", "--pruner", "none", "--trials", "1", "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(cmd, env=cli_env(), cwd=tmp_path, stdout=subprocess.PIPE,
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
