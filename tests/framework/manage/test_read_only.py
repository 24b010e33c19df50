"""A read-only run folder (a copy on a read-only mount, a colleague's runs):
resume, rm and gc answer in one line without a traceback; evaluate, which
only reads the run, still prints its metrics and warns that it recorded
nothing."""
import os
import subprocess

import pytest

from conftest import skip_unless_ci


@pytest.fixture
def read_only():
    """``read_only(folder)``: the folder made read-only until the test ends (a
    read-only bind mount as root, whom permissions do not stop; chmod otherwise)."""
    undo = []

    def make(folder):
        folder = str(folder)
        if os.geteuid() != 0:
            subprocess.run(["chmod", "-R", "a-w", folder], check=True)
            undo.append(["chmod", "-R", "u+w", folder])
            return
        for cmd in (["mount", "--bind", folder, folder],
                    ["mount", "-o", "remount,bind,ro", folder]):
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                subprocess.run(["umount", folder], capture_output=True)
                skip_unless_ci(f"cannot mount a read-only folder here: {done.stderr.strip()}")
        undo.append(["umount", "-l", folder])
    yield make
    for cmd in reversed(undo):
        subprocess.run(cmd, check=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny real run (2 epochs of Linear), made once; copied by each test."""
    from mindexp.experiments.linear import Linear
    root = tmp_path_factory.mktemp("ro-source")
    Linear(epochs=2, seed=1).run(out=str(root))
    return root


@pytest.fixture
def run(trained, tmp_path):
    import shutil
    shutil.copytree(trained, tmp_path / "out", symlinks=True)
    (run_id,) = os.listdir(tmp_path / "out" / "linear")
    return str(tmp_path / "out" / "linear" / run_id)


def _one_line(text):
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


@pytest.mark.parametrize("argv, code", [
    (["resume", "{run}", "--set", "epochs=3"], 2),
    (["rm", "--yes", "{run}"], 2),
])
@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_resume_and_rm_of_a_read_only_run_refuse_in_one_line(argv, code, run, cli, read_only,
                                                             tmp_path):
    before = sorted(os.listdir(run))
    read_only(tmp_path / "out")
    done = cli(*[a.format(run=run) for a in argv])
    assert done.returncode == code, (done.stdout, done.stderr)
    line = _one_line(done.stderr)
    assert "read-only file system" in line.lower() or "not writable" in line, line
    assert run in line or os.path.dirname(run) in line
    assert sorted(os.listdir(run)) == before


def test_gc_keeps_a_read_only_run_and_says_why(run, cli, read_only, tmp_path):
    read_only(tmp_path / "out")
    done = cli("gc", "--yes", "--status", "completed", tmp_path / "out")
    assert done.returncode == 0, (done.stdout, done.stderr)
    line = _one_line(done.stderr)
    assert line.startswith(f"kept {run}:") and "read-only" in line, line
    assert os.path.isdir(run) and "nothing to remove" in done.stdout


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_evaluate_of_a_read_only_run_prints_its_metrics_and_warns_it_recorded_nothing(
        run, cli, read_only, tmp_path):
    read_only(tmp_path / "out")
    done = cli("evaluate", run, "--split", "train")
    assert done.returncode == 0, done.stderr
    assert "  loss = " in done.stdout and "appended" not in done.stdout
    line = _one_line(done.stderr)
    assert line.startswith("mindexp: warning: not recorded in") and "evaluations.csv" in line
    assert not os.path.exists(os.path.join(run, "evaluations.csv"))


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_evaluate_never_appends_through_a_linked_evaluations_csv(run, cli, tmp_path):
    outside = tmp_path / "outside.csv"
    outside.write_text("keep\n")
    os.symlink(outside, os.path.join(run, "evaluations.csv"))
    done = cli("evaluate", run, "--split", "train")
    assert done.returncode == 0 and "  loss = " in done.stdout, done.stderr
    assert "is a link" in _one_line(done.stderr) and outside.read_text() == "keep\n"
