"""Many runs: runs (filters, fitting, csv/json), show, tag/note (racing), rm/gc, list NAME,
the unknown-command hint. Real runs are trained once per module: tagged ones from the
command line, a sweep's, a resumed one, a failed one; a "running" one is a run.json
naming the pid of a live process this module starts."""
import json
import os
import platform
import re
import shutil
import subprocess
import sys

import pytest

import forkserver
from conftest import cli_env
from mindexp.cli.main import main
from rundirs import exploding_experiment, make_run

WIDTH = 100


def mindexp(capsys, *args):
    """The CLI in this process; returns (exit status, stdout, stderr)."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def cli(*args, cwd=None, stdin=subprocess.DEVNULL):
    return forkserver.run([sys.executable, "-m", "mindexp", *map(str, args)], cwd=cwd,
                          env=cli_env(), capture_output=True, text=True, timeout=300,
                          stdin=stdin)


def one_line_error(code, err, *words):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


class Runs:
    """The module's runs: paths by role."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from mindexp import TrainingError
    from mindexp.experiments.linear import Linear
    from mindexp.api import resume_run as resume
    root = tmp_path_factory.mktemp("many")
    out = root / "outputs"
    r = Runs()
    r.out = str(out)
    done = cli("run", "linear", "--set", "epochs=2", "--tag", "baseline", "--tag", "lr-study",
               "--note", "first try", "--out", out, "--quiet", cwd=root)
    assert done.returncode == 0, done.stderr
    r.tagged = done.stdout.split("run directory: ")[1].splitlines()[0].strip()
    r.adam = Linear(epochs=2, optimizer="adam", lr=0.05).run(out=r.out).dir
    r.resumed = Linear(epochs=1, lr=0.1).run(out=r.out).dir
    resume(r.resumed, {"epochs": "2"})
    with pytest.raises(TrainingError):
        exploding_experiment()(epochs=1, batch_size=5).run(out=r.out)
    r.failed = [os.path.join(out, "exploding", d) for d in os.listdir(out / "exploding")][0]
    done = cli("sweep", "linear", "--grid", "lr=0.1,0.3", "--set", "epochs=1", "--workers", "1",
               "--tag", "swept", "--out", out, cwd=root)
    assert done.returncode == 0, done.stderr
    r.sweep = [os.path.join(out, "sweeps", d) for d in os.listdir(out / "sweeps")][0]
    sweep = json.load(open(os.path.join(r.sweep, "sweep.json")))
    r.swept = [entry["run_dir"] for entry in sweep["runs"]]
    r.root = str(root)
    return r


@pytest.fixture
def copy(runs, tmp_path):
    """A copy of the module's outputs to remove things from (sweep.json keeps the
    original absolute paths: the copy must still find its own runs)."""
    shutil.copytree(runs.out, tmp_path / "outputs")
    return str(tmp_path / "outputs")


def in_copy(copy, path, runs):
    return os.path.join(copy, os.path.relpath(path, runs.out))


def mark_running(run_dir, pid=None):
    """run.json says running (with a pid that says nothing about liveness)."""
    path = os.path.join(run_dir, "run.json")
    meta = json.load(open(path))
    meta.update(status="running", pid=pid or os.getpid(), host=platform.node(), ended_at=None)
    json.dump(meta, open(path, "w"))


# -- tags and notes at creation ---------------------------------------------------

@pytest.mark.slow
def test_run_and_sweep_record_tags_and_note(runs):
    meta = json.load(open(os.path.join(runs.tagged, "run.json")))
    assert meta["tags"] == ["baseline", "lr-study"] and meta["note"] == "first try"
    assert meta["pid"] and meta["host"] == platform.node()
    for run_dir in runs.swept:
        assert json.load(open(os.path.join(run_dir, "run.json")))["tags"] == ["swept"]
    resumed = json.load(open(os.path.join(runs.resumed, "run.json")))
    assert resumed["tags"] == [] and len(resumed["resumes"]) == 1


def test_a_bad_tag_on_run_is_rejected_before_training(capsys, tmp_path):
    code, out, err = mindexp(capsys, "run", "linear", "--tag", "no spaces", "--out", tmp_path)
    one_line_error(code, err, "'no spaces'", "letters, digits")
    assert not os.path.exists(tmp_path / "linear")


# -- runs ----------------------------------------------------------------------------

def table_paths(out):
    return [line.split()[0] for line in out.splitlines()[1:]]


@pytest.mark.slow
def test_runs_lists_every_run_in_100_columns(capsys, runs):
    code, out, err = mindexp(capsys, "runs", runs.out)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["path", "status", "tags", "age", "steps", "final_loss"]
    assert len(lines) == 1 + 6 and all(len(line) <= WIDTH for line in lines)
    assert sorted(line.split()[1] for line in lines[1:]) == ["completed"] * 5 + ["failed"]
    assert "…" in out  # the absolute paths are too wide: cut, keeping the run id
    code, wide, err = mindexp(capsys, "runs", runs.out, "--wide")
    assert runs.tagged in wide and "first try" in wide


@pytest.mark.slow
@pytest.mark.parametrize("args, expected", [
    (["--tag", "baseline"], ["tagged"]),
    (["--tag", "swept"], ["swept0", "swept1"]),
    (["--status", "failed"], ["failed"]),
    (["--experiment", "exploding"], ["failed"]),
    (["--where", "optimizer == 'adam'"], ["adam"]),
    (["--where", "lr > 0.2 and epochs == 1"], ["swept1"]),
    (["--where", "min_loss < 1e9 and optimizer == 'adam'"], ["adam"]),   # a log column
    (["--since", "1h", "--tag", "lr-study"], ["tagged"]),
    (["--since", "2999-01-01"], []),
])
def test_runs_filters(capsys, runs, args, expected):
    code, out, err = mindexp(capsys, "runs", runs.out, "--json", *args)
    assert code == 0, err
    wanted = {"tagged": runs.tagged, "adam": runs.adam, "failed": runs.failed,
              "swept0": runs.swept[0], "swept1": runs.swept[1]}
    assert sorted(r["run_dir"] for r in json.loads(out)) == sorted(wanted[e] for e in expected)


@pytest.mark.slow
def test_runs_sort_limit_csv_and_named_columns_shown(capsys, runs):
    code, out, err = mindexp(capsys, "runs", runs.out, "--experiment", "linear",
                             "--sort=-lr", "--limit", "2", "--csv")
    assert code == 0, err
    import io

    import pandas as pd
    table = pd.read_csv(io.StringIO(out))
    assert table["lr"].tolist() == [0.3, 0.2] and "tags" in table.columns
    code, out, err = mindexp(capsys, "runs", runs.out, "--where", "lr > 0.25")
    assert out.splitlines()[0].split()[-1] == "lr" and out.splitlines()[1].split()[-1] == "0.3"


@pytest.mark.parametrize("args, words", [
    (["--where", "nosuch > 1"], ["unknown column 'nosuch'", "Valid columns:", "lr"]),
    (["--where", "lrate > 1"], ["unknown column 'lrate'. Did you mean lr?"]),
    (["--where", "lr >"], ["--where cannot be read", "it takes only comparisons",
                           "Received: --where 'lr >'"]),
    (["--since", "2x"], ["--since takes a duration", "Received: --since 2x"]),
    (["--status", "done"], ["unknown status 'done'", "completed"]),
    (["--sort", "nosuch"], ["unknown sort column 'nosuch'"]),
])
def test_runs_bad_arguments_get_one_line_and_exit_2(capsys, tmp_path, args, words):
    make_run(tmp_path, "r1")
    code, out, err = mindexp(capsys, "runs", tmp_path, *args)
    one_line_error(code, err, *words)


# -- show ----------------------------------------------------------------------------

@pytest.mark.slow
def test_show_a_resumed_run(capsys, runs):
    code, out, err = mindexp(capsys, "show", runs.resumed)
    assert code == 0, err
    assert "status     completed" in out and "linear  (mindexp.experiments.linear:Linear)" in out
    assert " * epochs" in out and " * lr" in out and "   optimizer" in out  # defaults: 30, 0.2
    assert "steps      20 in 2 epochs" in out
    assert "resumed 1 time(s)" in out and "from step 10" in out
    assert "dense.weight" in out and "target 2" in out
    ckpt = [ln for ln in out.splitlines() if " step " in ln and " loss " in ln]
    assert ckpt and all(".ckpt" in ln for ln in ckpt)
    assert any("last  step 20" in ln for ln in ckpt)
    assert "loss.csv" in out and "checkpoints/" in out


@pytest.mark.slow
def test_show_a_failed_run_by_its_run_id_says_why(capsys, runs):
    run_id = os.path.basename(runs.failed)
    code, out, err = mindexp(capsys, "show", run_id, "--out", runs.out)
    assert code == 0, err
    assert "status     failed" in out and "boom from the network" in out
    assert "config (the experiment's defaults are unknown)" in out  # defined in a test


@pytest.mark.slow
def test_show_a_tagged_run_and_a_missing_one(capsys, runs):
    code, out, err = mindexp(capsys, "show", runs.tagged)
    assert "tags       baseline, lr-study" in out and "note       first try" in out
    code, out, err = mindexp(capsys, "show", "nosuchrun", "--out", runs.out)
    one_line_error(code, err, "nosuchrun")


# -- tag and note ----------------------------------------------------------------------

def test_tag_and_note_change_run_json(capsys, tmp_path):
    run_dir = make_run(tmp_path, "r1", meta={"tags": ["a", "b"]})
    code, out, err = mindexp(capsys, "tag", run_dir, "+c", "-a", "+b")
    assert code == 0, err
    assert json.load(open(os.path.join(run_dir, "run.json")))["tags"] == ["b", "c"]
    assert mindexp(capsys, "note", run_dir, "looks good")[0] == 0
    meta = json.load(open(os.path.join(run_dir, "run.json")))
    assert meta["note"] == "looks good" and meta["status"] == "completed"


@pytest.mark.parametrize("changes, words", [
    (["x"], ["+TAG to add or -TAG to remove", "Received: 'x'"]),
    (["+bad/tag"], ["Received: '+bad/tag'"]),
    ([], ["at least one +TAG"]),
])
def test_tag_syntax_errors(capsys, tmp_path, changes, words):
    run_dir = make_run(tmp_path, "r1")
    before = open(os.path.join(run_dir, "run.json")).read()
    one_line_error(*mindexp(capsys, "tag", run_dir, *changes)[::2], *words)
    assert open(os.path.join(run_dir, "run.json")).read() == before


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_racing_tag_commands_lose_no_update(tmp_path):
    run_dir = make_run(tmp_path, "r1")
    loop = ("import sys; from mindexp.manage.tags import change_tags\n"
            "for i in range(25): change_tags(sys.argv[1], [f'p{sys.argv[2]}-{i}'])")
    procs = [subprocess.Popen([sys.executable, "-c", loop, run_dir, str(n)], env=cli_env())
             for n in range(4)]
    procs += [forkserver.popen([sys.executable, "-m", "mindexp", "tag", run_dir, f"+cli{n}"],
                               env=cli_env(), stdout=subprocess.DEVNULL) for n in range(6)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 10
    tags = json.load(open(os.path.join(run_dir, "run.json")))["tags"]
    assert sorted(tags) == sorted([f"p{n}-{i}" for n in range(4) for i in range(25)]
                                  + [f"cli{n}" for n in range(6)])


def test_the_runners_last_write_keeps_tags_added_meanwhile(tmp_path):
    from mindexp.manage.tags import change_tags
    from mindexp.rundir.record import write_keeping_user_fields
    run_dir = make_run(tmp_path, "r1", status="running", meta={"tags": ["start"]})
    stale = json.load(open(os.path.join(run_dir, "run.json")))
    change_tags(run_dir, ["added-while-running"])
    stale["status"] = "completed"
    write_keeping_user_fields(run_dir, stale)
    meta = json.load(open(os.path.join(run_dir, "run.json")))
    assert meta["status"] == "completed" and meta["tags"] == ["start", "added-while-running"]


# -- rm ------------------------------------------------------------------------------

@pytest.mark.slow
def test_rm_a_sweep_run_removes_it_from_sweep_json(capsys, runs, copy):
    target = in_copy(copy, runs.swept[0], runs)
    code, out, err = mindexp(capsys, "rm", target, "--yes")
    assert code == 0, err
    assert not os.path.exists(target) and "removed 1 run(s)" in out
    sweep = json.load(open(in_copy(copy, os.path.join(runs.sweep, "sweep.json"), runs)))
    assert [os.path.basename(e["run_dir"]) for e in sweep["runs"]] == \
        [os.path.basename(runs.swept[1])]
    assert os.path.isdir(in_copy(copy, runs.swept[1], runs)) and os.path.isdir(runs.swept[0])
    assert not [d for d in os.listdir(os.path.dirname(target)) if d.startswith(".")]


@pytest.mark.slow
def test_rm_a_sweep_folder_removes_its_runs_too(capsys, runs, copy):
    folder = in_copy(copy, runs.sweep, runs)
    code, out, err = mindexp(capsys, "rm", folder, "--yes")
    assert code == 0, err
    assert not os.path.exists(folder)
    assert not any(os.path.exists(in_copy(copy, d, runs)) for d in runs.swept)
    assert os.path.isdir(in_copy(copy, runs.adam, runs))
    assert all(os.path.isdir(d) for d in runs.swept)  # the originals: not touched


@pytest.mark.slow
def test_rm_asks_and_refuses_without_a_terminal_and_dry_run_removes_nothing(runs, copy):
    target = in_copy(copy, runs.failed, runs)
    done = cli("rm", target)      # stdin is /dev/null: not a terminal
    one_line_error(done.returncode, done.stderr, "pass --yes", "Nothing was removed")
    assert target in done.stdout and os.path.isdir(target)
    done = cli("rm", target, "--dry-run")
    assert done.returncode == 0 and "nothing removed" in done.stdout and os.path.isdir(target)


@pytest.mark.slow
def test_rm_never_removes_a_run_whose_lock_is_held(capsys, runs, copy, holder):
    target = in_copy(copy, runs.adam, runs)
    mark_running(target)  # the pid of this live test process: says nothing
    proc = holder(target)
    code, out, err = mindexp(capsys, "rm", target, "--yes")
    one_line_error(code, err, "refusing to remove 1 live run(s)", f"pid {proc.pid} on",
                   "(resume) holds it")
    assert os.path.isdir(target)
    proc.kill()
    proc.wait()
    code, out, err = mindexp(capsys, "rm", target, "--yes")
    assert code == 0 and not os.path.exists(target)


def test_rm_of_a_plain_folder_is_refused(capsys, tmp_path):
    make_run(tmp_path, "r1")
    code, out, err = mindexp(capsys, "rm", tmp_path / "toy", "--yes")
    one_line_error(code, err, "not a run directory, a sweep folder or a study folder")
    assert os.path.isdir(tmp_path / "toy" / "r1")


def test_rm_of_a_symlinked_run_removes_the_link_and_never_its_target(capsys, tmp_path):
    target = make_run(tmp_path / "elsewhere", "r1")
    os.makedirs(tmp_path / "out" / "toy")
    link = tmp_path / "out" / "toy" / "r1"
    os.symlink(target, link)
    code, out, err = mindexp(capsys, "rm", link, "--yes")
    assert code == 0 and "removed 1 run(s)" in out, err
    assert not os.path.lexists(link) and os.listdir(tmp_path / "out" / "toy") == []
    assert sorted(os.listdir(target)) == ["config.json", "loss.csv", "run.json"]


# -- gc ------------------------------------------------------------------------------

def dirs_left(copy):
    return sorted(os.path.relpath(os.path.join(root), copy) for root, _, files in os.walk(copy)
                  if "run.json" in files)


@pytest.mark.slow
def test_gc_removes_the_failed_and_never_a_live_one(capsys, runs, copy, holder):
    running = in_copy(copy, runs.adam, runs)
    mark_running(running)
    proc = holder(running)
    code, out, err = mindexp(capsys, "gc", copy, "--yes")   # default: the unfinished ones
    assert code == 0, err
    assert not os.path.exists(in_copy(copy, runs.failed, runs))
    assert os.path.isdir(running) and f"it is live (pid {proc.pid} on" in err
    assert len(dirs_left(copy)) == 5


@pytest.mark.slow
def test_gc_never_lists_a_run_whose_lock_is_held_whatever_its_status(capsys, runs, copy,
                                                                     holder):
    """A resume holds a run that run.json still calls failed: gc asks the lock, not
    the status, so even its dry run leaves that run out and says who holds it."""
    failed = in_copy(copy, runs.failed, runs)
    proc = holder(failed, "resume")
    code, out, err = mindexp(capsys, "gc", copy, "--dry-run")
    assert code == 0, err
    assert os.path.basename(failed) not in out, out
    assert f"it is live (pid {proc.pid} on" in err and os.path.basename(failed) in err
    assert os.path.isdir(failed)


@pytest.mark.slow
def test_runs_shows_a_running_runs_last_logged_step_and_loss(capsys, runs, copy, holder):
    """run.json is final only at the end: for a live run, runs reads loss.csv's last row."""
    import csv
    import io
    running = in_copy(copy, runs.adam, runs)
    mark_running(running)
    holder(running, "run")
    with open(os.path.join(running, "loss.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["loss"] != rows[-1]["loss"]
    code, out, err = mindexp(capsys, "runs", copy, "--csv")
    assert code == 0, err
    row = next(r for r in csv.DictReader(io.StringIO(out))
               if r["run_id"] == os.path.basename(running))
    assert row["status"] == "running"
    assert int(row["steps"]) == int(rows[-1]["step"])
    assert float(row["final_loss"]) == pytest.approx(float(rows[-1]["loss"]), rel=1e-6)


@pytest.mark.slow
def test_gc_keep_best_keeps_the_best_of_each_experiment(capsys, runs, copy):
    code, out, err = mindexp(capsys, "gc", copy, "--status", "completed", "--keep-best", "1",
                             "--by", "final_loss", "--yes")
    assert code == 0, err
    from mindexp.manage.runs import runs_table
    table = runs_table(runs.out)
    best = table[table["experiment"] == "linear"].sort_values("final_loss").iloc[0]["run_dir"]
    left = dirs_left(copy)
    assert os.path.relpath(best, runs.out) in left and len(left) == 2   # + the failed run


@pytest.mark.slow
def test_gc_older_than_now_finds_nothing_and_bad_age_is_refused(capsys, runs, copy):
    code, out, err = mindexp(capsys, "gc", copy, "--status", "completed", "--older", "7d",
                             "--yes")
    assert code == 0 and out.strip() == "nothing to remove" and len(dirs_left(copy)) == 6
    one_line_error(*mindexp(capsys, "gc", copy, "--older", "7 days")[::2], "--older takes")


# -- list and the command line itself ------------------------------------------------------

def test_list_prints_one_line_per_experiment(capsys):
    code, out, err = mindexp(capsys, "list")
    lines = out.splitlines()
    assert code == 0 and [ln.split()[0] for ln in lines] == [
        "digits", "image_folder", "linear", "mlp_sine", "multitask", "pinn_ode", "spirals",
        "spirals_curriculum",
        "transformer"]
    assert "Learn y = 2x" in lines[2]


def test_list_name_prints_fields_with_types_defaults_choices_and_descriptions(capsys):
    code, out, err = mindexp(capsys, "list", "linear")
    assert code == 0, err
    fields = {ln.split()[0]: ln for ln in out.splitlines()[4:]}
    assert fields["lr"].split()[1:3] == ["float", "0.2"] and "learning rate" in fields["lr"]
    assert "[sgd|momentum|adam|adamw|rmsprop|adagrad]" in fields["optimizer"]
    assert fields["samples"].split()[1:3] == ["int", "100"]
    assert "training points" in fields["samples"]
    from mindexp.define.config import Config
    import dataclasses
    common = [f.name for f in dataclasses.fields(Config)]
    assert all(len(fields[name].split()) > 3 for name in common)  # every one described
    one_line_error(*mindexp(capsys, "list", "linaer")[::2], "Did you mean linear?")


def test_unknown_command_gets_a_hint_and_internal_commands_stay_hidden(capsys):
    line = one_line_error(*mindexp(capsys, "rnu")[::2], "unknown command 'rnu'",
                          "Did you mean run?")
    assert "_worker" not in line and "_sweep_worker" not in line
    done = cli("--help")
    assert done.returncode == 0 and "_worker" not in done.stdout and "runs" in done.stdout


@pytest.mark.slow
def test_compare_has_tags_and_note_and_shows_tags_when_any(capsys, runs):
    from mindexp import compare
    table = compare(runs.out).set_index("run_dir")
    assert table.loc[runs.tagged, "tags"] == "baseline,lr-study"
    assert table.loc[runs.tagged, "note"] == "first try" and table.loc[runs.adam, "tags"] == ""
    code, out, err = mindexp(capsys, "compare", runs.out)
    assert out.splitlines()[0].split()[:4] == ["experiment", "run_id", "status", "tags"]


def test_show_names_the_innermost_traceback_frame_of_error_txt(capsys, tmp_path):
    run_dir = make_run(tmp_path, "r1", status="failed",
                       meta={"error": "ValueError: boom", "entry": "nowhere:Toy"})
    with open(os.path.join(run_dir, "error.txt"), "w") as f:
        f.write('Traceback (most recent call last):\n  File "/a/runner.py", line 10, in train\n'
                '  File "/u/exp.py", line 42, in construct\nValueError: boom\n')
    code, out, err = mindexp(capsys, "show", run_dir)
    assert code == 0, err
    assert "why        ValueError: boom" in out and "at /u/exp.py:42 in construct" in out
    assert "config (the experiment's defaults are unknown)" in out and "error.txt" in out


@pytest.mark.parametrize("by, message, ending", [
    ("nosuch", "--by names an unknown column 'nosuch'", None),
    # train_time_s says nothing about better: refused, never taken as maximised
    ("train_time_s", "--by train_time_s: cannot tell whether a lower or a higher",
     "Received: --by train_time_s"),
])
def test_gc_keep_best_by_a_column_it_cannot_rank_is_refused(capsys, tmp_path, by, message,
                                                            ending):
    make_run(tmp_path, "r1")
    make_run(tmp_path, "r2", losses=(1.0, 0.1))
    line = one_line_error(*mindexp(capsys, "gc", tmp_path, "--status", "completed",
                                   "--keep-best", "1", "--by", by, "--yes")[::2], message)
    assert os.path.isdir(tmp_path / "toy" / "r1") and os.path.isdir(tmp_path / "toy" / "r2")
    if ending is None:
        assert "final_loss" in line   # the columns it can rank by are named
    else:
        assert line.endswith(ending)
    assert os.path.isdir(tmp_path / "toy" / "r1") and os.path.isdir(tmp_path / "toy" / "r2")


def test_show_names_each_checkpoint_value_by_what_it_is(capsys, tmp_path):
    """A last checkpoint's training loss and a best one's monitored eval value were
    one 'score' column; now the loss is 'loss' for every checkpoint and a best
    checkpoint's value carries the monitor's name."""
    run_dir = make_run(tmp_path, "r1", config={"checkpoint_monitor": "eval_accuracy"})
    os.makedirs(os.path.join(run_dir, "checkpoints"))
    with open(os.path.join(run_dir, "checkpoints.csv"), "w") as f:
        f.write("step,epoch,loss,file,kind,score\n"
                "2,1,0.75,best-epoch0001-step0000002.ckpt,best,0.875\n"
                "4,2,0.25,epoch0002-step0000004.ckpt,last,\n")
    assert main(["show", run_dir]) == 0
    lines = capsys.readouterr().out.splitlines()
    [best] = [ln for ln in lines if "best-epoch0001" in ln]
    [last] = [ln for ln in lines if "epoch0002-step" in ln]
    assert "loss 0.75  eval_accuracy 0.875" in best and "score" not in best
    assert "loss 0.25  epoch0002" in last and "eval_accuracy" not in last
    assert any("eval_accuracy: the value a best checkpoint was kept for" in ln for ln in lines)


def _on_a_terminal(monkeypatch, lines):
    """Standard output as a terminal of ``lines`` lines (captured all the same)."""
    import shutil as _shutil
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(_shutil, "get_terminal_size",
                        lambda *a, **k: os.terminal_size((100, lines)))


@pytest.mark.parametrize("two_folders", [False, True])   # the catalog's path, pandas'
def test_runs_on_a_terminal_shows_one_screen_and_says_how_many_more(capsys, monkeypatch,
                                                                      tmp_path, two_folders):
    for i in range(25):
        make_run(tmp_path / ("a" if two_folders and i % 2 else "b"),
                 f"20260101-{i:06d}-sgd-{i:06x}")
    folders = [tmp_path / "a", tmp_path / "b"] if two_folders else [tmp_path / "b"]
    code, piped, err = mindexp(capsys, "runs", *folders)
    assert code == 0 and len(piped.splitlines()) == 1 + 25     # a pipe: every run
    _on_a_terminal(monkeypatch, 20)
    code, out, err = mindexp(capsys, "runs", *folders)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 1 + 17 + 1, out           # 20 lines less 3
    assert lines[-1].startswith("... 8 more runs (--limit N or --all")
    assert lines[1:18] == piped.splitlines()[1:18]              # the newest first, as piped
    code, every, err = mindexp(capsys, "runs", *folders, "--all")
    assert every == piped
    code, some, err = mindexp(capsys, "runs", *folders, "--limit", "30")
    assert some == piped


def test_runs_where_on_a_terminal_counts_the_matching_runs_running_ones_on_their_config(
        capsys, monkeypatch, tmp_path):
    for i in range(20):
        make_run(tmp_path, f"20260101-{i:06d}-sgd-{i:06x}", config={"lr": 0.01 * (i + 1)})
    for i, lr in enumerate((0.05, 0.5)):   # running: matched in Python, not in SQL
        make_run(tmp_path, f"20260102-{i:06d}-sgd-{i:06x}", status="running", config={"lr": lr})
    _on_a_terminal(monkeypatch, 10)
    code, out, err = mindexp(capsys, "runs", tmp_path, "--where", "lr < 0.155")
    lines = out.splitlines()
    more = re.match(r"\.\.\. (\d+) more runs \(", lines[-1])
    assert code == 0 and more, out
    assert len(lines) - 2 + int(more.group(1)) == 15 + 1, out   # 15 completed + 1 running
