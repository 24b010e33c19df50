"""Provenance: capture (source, git, packages, command), rerun byte for byte, diff."""
import csv
import io
import json
import os
import subprocess

import pytest

import forkserver

USER_FILE = '''
from dataclasses import dataclass
import numpy as np
from mindspore import nn
from mindexp import Experiment


class Tripler(Experiment):
    """Learns y = 3x from a user's own file."""
    name = "tripler"

    @dataclass
    class Config(Experiment.Config):
        epochs: int = 2
        batch_size: int = 8
        lr: float = 0.1
        seed: int = 3

    def source(self, split):
        x = np.linspace(0, 1, 64, dtype=np.float32).reshape(-1, 1)
        return (x, 3 * x) if split == "train" else None

    def network(self):
        return nn.Dense(1, 1)
'''
EDITED = USER_FILE.replace("(x, 3 * x)", "(x, 5 * x)")
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(repo, *args):
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True, env={**os.environ, **GIT_ENV})
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A git repository holding the user's file, committed."""
    path = tmp_path / "proj"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "mine.py").write_text(USER_FILE)
    git(path, "add", "mine.py")
    git(path, "commit", "-q", "-m", "first")
    return path


def with_env(cli, monkeypatch, env, *args, **kwargs):
    """``cli(*args, **kwargs)`` in this process with ``env`` set in os.environ for the
    call: what provenance reads of the environment is os.environ when the command runs
    (a process of its own would only add the seconds of one more MindSpore runtime)."""
    with monkeypatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        return cli(*args, **kwargs)


def run_dir_of(done):
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("run directory: "), done.stdout
    return first.split(": ", 1)[1]


def meta_of(run_dir):
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        return json.load(f)


def values(run_dir, name):
    """A log's rows without its timing column (time_s differs between runs)."""
    with open(os.path.join(run_dir, name), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows, f"{name} is empty"
    out = io.StringIO()
    for row in rows:
        out.write(",".join(v for k, v in row.items() if k != "time_s") + "\n")
    return out.getvalue()


@pytest.mark.slow
def test_capture_records_commit_dirty_flag_diff_packages_and_command(cli, repo, monkeypatch):
    (repo / "mine.py").write_text(EDITED)  # committed, then edited: dirty
    run = run_dir_of(with_env(cli, monkeypatch, {"MS_DEV_EXAMPLE": "1"}, "run",
                              "mine.py:Tripler", "--out", repo / "outputs", cwd=repo))
    block = meta_of(run)["provenance"]
    assert block["git"]["commit"] == git(repo, "rev-parse", "HEAD")
    assert block["git"]["branch"] == "main" and block["git"]["dirty"] is True
    with open(os.path.join(run, "source", "uncommitted.diff"), encoding="utf-8") as f:
        diff = f.read()
    assert "-        return (x, 3 * x)" in diff and "+        return (x, 5 * x)" in diff
    with open(os.path.join(run, "source", "mine.py"), encoding="utf-8") as f:
        assert f.read() == EDITED  # the code that ran, not the committed one
    with open(os.path.join(run, "environment.txt"), encoding="utf-8") as f:
        packages = f.read().splitlines()
    names = [p.split("==")[0] for p in packages]
    assert names == sorted(set(names)) and any(p.startswith("mindspore==") for p in packages)
    assert block["env"]["MS_DEV_EXAMPLE"] == "1" and block["env"]["GLOG_v"] == "3"
    assert "PATH" not in block["env"]
    assert block["command"][1:3] == ["run", "mine.py:Tripler"]
    from mindexp import compare
    table = compare(run)
    assert table.loc[0, "git_commit"] == block["git"]["commit"] and table.loc[0, "dirty"]


@pytest.mark.slow
def test_rerun_trains_the_captured_code_byte_for_byte(cli, repo):
    original = run_dir_of(cli("run", "mine.py:Tripler", "--out", repo / "outputs", cwd=repo))
    assert meta_of(original)["provenance"]["git"]["dirty"] is False
    assert not os.path.exists(os.path.join(original, "source", "uncommitted.diff"))
    (repo / "mine.py").write_text(EDITED)  # edited after the run
    again = run_dir_of(cli("rerun", original, "--quiet", cwd=repo))
    meta = meta_of(again)
    assert meta["rerun_of"]["run_id"] == os.path.basename(original)
    assert meta["rerun_of"]["code"] == "captured"
    assert meta["provenance"]["git"]["commit"] == git(repo, "rev-parse", "HEAD")
    assert os.path.dirname(again) == os.path.dirname(original)
    for log in ("loss.csv", "params.csv"):
        assert values(again, log) == values(original, log)
    today = run_dir_of(cli("rerun", original, "--current-code", "--quiet", cwd=repo))
    assert values(today, "loss.csv") != values(original, "loss.csv")  # the edit shows
    assert meta_of(today)["rerun_of"]["code"] == "current"


def lr_column(run_dir):
    with open(os.path.join(run_dir, "loss.csv"), newline="", encoding="utf-8") as f:
        return {float(row["lr"]) for row in csv.DictReader(f)}


@pytest.mark.slow
def test_rerun_current_code_takes_the_current_defaults_of_fields_not_set(cli, tmp_path):
    (tmp_path / "mine.py").write_text(USER_FILE)
    original = run_dir_of(cli("run", "mine.py:Tripler", "--set", "epochs=1", "--quiet"))
    assert meta_of(original)["provenance"]["config_set"] == ["epochs"]
    (tmp_path / "mine.py").write_text(USER_FILE.replace("lr: float = 0.1", "lr: float = 0.05")
                                      .replace("epochs: int = 2", "epochs: int = 3"))
    done = cli("rerun", original, "--current-code", "--quiet")
    today = run_dir_of(done)
    assert "does not record which config fields" not in done.stderr
    with open(os.path.join(today, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert (config["lr"], config["epochs"]) == (0.05, 1)  # the new default; the user's value
    assert lr_column(today) == {0.05} and lr_column(original) == {0.1}
    assert meta_of(today)["provenance"]["config_set"] == ["epochs"]
    from mindexp.manage.diff import diff
    assert diff(original, today)["config"].values.tolist() == [["lr", 0.1, 0.05]]
    # a run made before the user-set fields were recorded: every field stays as it was
    meta = meta_of(original)
    del meta["provenance"]["config_set"]
    with open(os.path.join(original, "run.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)
    done = cli("rerun", original, "--current-code", "--quiet")
    old = run_dir_of(done)
    note = [ln for ln in done.stderr.splitlines() if "does not record which config fields" in ln]
    assert len(note) == 1 and "every field keeps its value" in note[0]
    assert lr_column(old) == {0.1}


@pytest.mark.slow
def test_rerun_of_a_shipped_experiment_uses_its_captured_module(cli, tmp_path):
    original = run_dir_of(cli("run", "linear", "--set", "epochs=2", "--quiet"))
    source = os.path.join(original, "source", "mindexp.experiments")
    assert {"_nets.py", "linear.py"} <= set(os.listdir(source))
    again = run_dir_of(cli("rerun", original, "--quiet"))
    assert meta_of(again)["entry"].startswith(source)
    for log in ("loss.csv", "params.csv"):
        assert values(again, log) == values(original, log)


@pytest.mark.slow
def test_rerun_says_when_the_environment_differs(cli, repo, monkeypatch):
    original = run_dir_of(cli("run", "mine.py:Tripler", "--set", "epochs=1", cwd=repo))
    path = os.path.join(original, "environment.txt")
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    with open(path, "w", encoding="utf-8") as f:  # as if captured with another numpy
        f.write("\n".join("numpy==0.0.1" if ln.startswith("numpy==") else ln for ln in lines))
    done = with_env(cli, monkeypatch, {"OMP_NUM_THREADS": "1"}, "rerun", original, "--quiet",
                    cwd=repo)
    assert done.returncode == 0, done.stderr
    note = [ln for ln in done.stderr.splitlines() if "environment differs" in ln]
    assert len(note) == 1 and "numpy: 0.0.1 -> " in note[0]
    assert "$OMP_NUM_THREADS: unset -> 1" in note[0]


@pytest.mark.slow
@pytest.mark.parametrize("damage, message", [
    ("remove", "source/mine.py is missing"),
    ("edit", "source/mine.py is corrupt"),
])
def test_rerun_refuses_a_missing_or_corrupt_source(cli, main_cli, tmp_path, damage, message):
    (tmp_path / "mine.py").write_text(USER_FILE)
    original = run_dir_of(cli("run", "mine.py:Tripler", "--set", "epochs=1", "--quiet"))
    source = os.path.join(original, "source")
    if damage == "remove":
        os.remove(os.path.join(source, "mine.py"))
    else:
        with open(os.path.join(source, "mine.py"), "a", encoding="utf-8") as f:
            f.write("raise SystemExit('not the captured code')\n")
    before = sorted(os.listdir(os.path.dirname(original)))
    done = main_cli("rerun", original)  # (refused before any import: this process will do)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert sorted(os.listdir(os.path.dirname(original))) == before  # no new run


def test_rerun_of_a_run_without_provenance_is_refused(main_cli, tmp_path):
    from rundirs import make_run
    run = make_run(tmp_path, meta={"entry": "mindexp.experiments.linear:Linear"})
    done = main_cli("rerun", run)
    assert done.returncode == 2 and "has no captured source" in done.stderr
    assert "--current-code" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.slow
def test_without_git_and_outside_any_repository(cli, tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(USER_FILE)
    empty = tmp_path / "nobin"
    empty.mkdir()
    for env in ({"PATH": str(empty)}, {}):  # no git binary; git but no repository
        run = run_dir_of(with_env(cli, monkeypatch, env, "run", "mine.py:Tripler", "--set",
                                  "epochs=1", "--quiet"))
        git_block = meta_of(run)["provenance"]["git"]
        assert git_block["commit"] is None and git_block["dirty"] is None
        assert git_block["branch"] is None and git_block["diff"] is None
        assert os.path.isfile(os.path.join(run, "source", "mine.py"))
    again = run_dir_of(with_env(cli, monkeypatch, {"PATH": str(empty)}, "rerun", run, "--quiet"))
    assert values(again, "loss.csv") == values(run, "loss.csv")


def test_git_state_is_none_without_git(monkeypatch, tmp_path):
    from mindexp.provenance.capture import git_state
    monkeypatch.setenv("PATH", str(tmp_path))
    state, diff = git_state(str(tmp_path / "x.py"))
    assert set(state.values()) == {None} and diff is None


def test_diff_cap_cuts_a_large_uncommitted_diff(repo, monkeypatch):
    from mindexp.provenance import capture, files
    monkeypatch.setattr(files, "DIFF_CAP_BYTES", 200)
    (repo / "mine.py").write_text(USER_FILE + "# more\n" * 100)
    run_dir = repo / "run"
    (run_dir / "source").mkdir(parents=True)
    state = capture._git_block(str(repo / "mine.py"), str(run_dir), "source", None)
    assert state["diff_truncated"] is True and state["diff_bytes"] > 200
    text = (run_dir / "source" / "uncommitted.diff").read_text()
    assert len(text.encode()) < 300
    assert text.endswith(f"(full size {state['diff_bytes']} bytes)\n")


@pytest.mark.slow
def test_diff_shows_exactly_one_config_field_and_one_code_line(cli, tmp_path):
    (tmp_path / "mine.py").write_text(USER_FILE)
    run_a = run_dir_of(cli("run", "mine.py:Tripler", "--quiet"))
    (tmp_path / "mine.py").write_text(EDITED)
    run_b = run_dir_of(cli("run", "mine.py:Tripler", "--set", "lr=0.05", "--quiet"))
    from mindexp.manage.diff import diff
    result = diff(run_a, run_b)
    assert result["config"].values.tolist() == [["lr", 0.1, 0.05]]
    changed = [ln for ln in result["source"].splitlines()
               if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert changed == ["-        return (x, 3 * x) if split == \"train\" else None",
                       "+        return (x, 5 * x) if split == \"train\" else None"]
    assert result["packages"].empty and result["env"].empty
    outcomes = result["outcomes"].set_index("name")
    assert outcomes.loc["final_loss", "a"] != outcomes.loc["final_loss", "b"]
    assert {"min_loss", "steps_per_s", "status"} <= set(outcomes.index)
    assert not {"lr", "epochs"} & set(outcomes.index)  # config fields are in "config" only
    done = cli("diff", run_a, run_b, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["config"] == [{"name": "lr", "a": 0.1, "b": 0.05}]
    assert data["source"] == result["source"]
    text = cli("diff", run_a, run_b).stdout
    assert "packages: same" in text and "+        return (x, 5 * x)" in text


def test_diff_of_a_path_that_is_not_a_run_exits_2(cli, tmp_path):
    done = cli("diff", tmp_path, tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1


@pytest.mark.slow
def test_resume_appends_its_own_capture_and_keeps_the_original(cli, repo):
    original = run_dir_of(cli("run", "mine.py:Tripler", "--set", "epochs=1", "--quiet", cwd=repo))
    first = meta_of(original)["provenance"]
    (repo / "mine.py").write_text(EDITED)
    done = cli("resume", original, "--set", "epochs=2", "--quiet", cwd=repo)
    assert done.returncode == 0, done.stderr
    meta = meta_of(original)
    assert meta["provenance"] == first and first["git"]["dirty"] is False
    again = meta["resumes"][0]["provenance"]
    assert again["source"]["dir"] == os.path.join("source", "resume-1")
    assert again["git"]["dirty"] is True and again["git"]["diff"]
    with open(os.path.join(original, "source", "resume-1", "mine.py"), encoding="utf-8") as f:
        assert f.read() == EDITED
    with open(os.path.join(original, "source", "mine.py"), encoding="utf-8") as f:
        assert f.read() == USER_FILE


def test_diff_keeps_ints_names_different_experiments_and_marks_a_missing_outcome(cli, tmp_path):
    from rundirs import make_run
    run_a = make_run(tmp_path, "a", config={"epochs": 2},
                     eval_rows=[{"epoch": 1, "step": 2, "mae": 0.5}])
    run_b = make_run(tmp_path, "b", losses=(), status="failed", experiment="other",
                     config={"epochs": 4}, meta={"epochs": None, "steps": None})
    done = cli("diff", run_a, run_b, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["config"] == [{"name": "epochs", "a": 2, "b": 4}]
    outcomes = {row["name"]: (row["a"], row["b"]) for row in data["outcomes"]}
    assert outcomes["best_step"] == (3, None) and isinstance(outcomes["best_step"][0], int)
    assert outcomes["best_eval_mae"] == (0.5, "(absent)")
    assert data["experiment"] == {"a": "toy", "b": "other", "same": False}
    text = cli("diff", run_a, run_b).stdout
    assert "different experiments: a is toy, b is other" in text
    assert "different experiments" not in cli("diff", run_a, run_a).stdout


def _plant_pyc(module_py, marker):
    """A ``__pycache__`` entry for ``module_py`` whose code writes ``marker``,
    unchecked-hash: the standard loader runs it without looking at the source."""
    import importlib.util
    import py_compile
    evil = os.path.join(os.path.dirname(module_py), "evil_source.tmp")
    with open(evil, "w", encoding="utf-8") as f:
        f.write(f"open({str(marker)!r}, 'w').write('planted code ran')\nVALUE = 'planted'\n")
    cache = importlib.util.cache_from_source(module_py)   # beside it (python_defaults)
    py_compile.compile(evil, cfile=cache, doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    os.remove(evil)
    return cache


@pytest.fixture
def python_defaults(monkeypatch):
    """Python's default bytecode caching, as users have it: caches written and read in
    ``__pycache__`` beside the sources (the suite keeps its own under a prefix,
    tests/conftest.py, where no planted file would be looked for)."""
    import sys
    for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(sys, "pycache_prefix", None)


@pytest.mark.parametrize("folder", ["plain", "mindexp.experiments"])
def test_captured_code_is_imported_from_source_never_from_a_planted_pyc(tmp_path, folder,
                                                                         python_defaults):
    """Even past the manifest check, a planted .pyc never runs and none is written:
    the entry file and a captured shipped module's sibling (``._helper``)."""
    from mindexp.define.entry import import_file
    code = tmp_path / f"run-{folder}" / "source" / folder
    code.mkdir(parents=True)
    relative = folder != "plain"
    (code / "_helper.py").write_text("VALUE = 'checked source'\n")
    (code / "entry_mod.py").write_text(
        ("from ._helper import VALUE as HELPER\n" if relative else "HELPER = None\n")
        + "VALUE = 'checked source'\n")
    marker = tmp_path / "marker.txt"
    planted = [_plant_pyc(str(code / "entry_mod.py"), marker),
               _plant_pyc(str(code / "_helper.py"), marker)]
    module = import_file(str(code / "entry_mod.py"))
    assert module.VALUE == "checked source" and not marker.exists()
    assert module.HELPER == ("checked source" if relative else None)
    assert sorted(os.listdir(code / "__pycache__")) == sorted(map(os.path.basename, planted))


@pytest.mark.slow
def test_rerun_refuses_a_file_not_in_the_manifest_and_writes_no_bytecode(cli, tmp_path,
                                                                          python_defaults):
    import sys
    from conftest import cli_env
    original = run_dir_of(cli("run", "linear", "--set", "epochs=1", "--quiet"))
    source = os.path.join(original, "source", "mindexp.experiments")
    run_dir_of(cli("rerun", original, "--quiet"))   # Python's default: imports write caches
    assert not os.path.exists(os.path.join(source, "__pycache__"))  # nothing written there
    marker = tmp_path / "marker.txt"
    cache = _plant_pyc(os.path.join(source, "_nets.py"), marker)
    before = sorted(os.listdir(os.path.dirname(original)))
    # a process that has not imported the captured modules yet (this one has, above)
    done = forkserver.run([sys.executable, "-m", "mindexp", "rerun", original], cwd=tmp_path,
                          env=cli_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert os.path.relpath(cache, original) in done.stderr and "not in the captured" in done.stderr
    assert not marker.exists() and sorted(os.listdir(os.path.dirname(original))) == before
