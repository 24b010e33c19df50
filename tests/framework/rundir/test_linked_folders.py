"""A run's checkpoints/, plots/ or figures/ linked out of the run folder:
resume's checkpoint retention and the plots never delete or
write through the link; resume refuses in one line naming it."""
import os
import shutil

import pytest

from rundirs import make_run


def _snapshot(folder):
    return {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)}


def _run_dir(root):
    (run_id,) = os.listdir(os.path.join(root, "linear"))
    return os.path.join(root, "linear", run_id)


@pytest.mark.parametrize("folder", ["checkpoints", "plots", "figures"])
@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_resume_refuses_a_run_whose_own_folder_links_out(folder, cli, tmp_path):
    done = cli("run", "linear", "--set", "epochs=2", "--out", "out", "--quiet")
    assert done.returncode == 0, done.stderr
    run = _run_dir(tmp_path / "out")
    outside = tmp_path / "elsewhere"
    if os.path.isdir(os.path.join(run, folder)):
        shutil.move(os.path.join(run, folder), outside)
    else:
        outside.mkdir()
    (outside / "epoch0001-step0000001.ckpt").write_bytes(b"someone else's")  # retention's prey
    os.symlink(outside, os.path.join(run, folder))
    before = _snapshot(outside)
    done = cli("resume", run, "--set", "epochs=6", "--set", "keep_checkpoints=1", "--quiet")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and os.path.join(run, folder) in lines[0] and "link" in lines[0]
    assert _snapshot(outside) == before


def test_plots_are_never_written_through_a_linked_plots_folder(cli, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    run = make_run(tmp_path / "out", "r1")
    os.symlink(outside, os.path.join(run, "plots"))
    done = cli("plot", run)
    assert done.returncode == 2 and os.listdir(outside) == [], done
    assert len(done.stderr.strip().splitlines()) == 1
    assert os.path.join(run, "plots") in done.stderr and "link" in done.stderr
    done = cli("plot", run, "--out", tmp_path / "mine")  # a folder given: drawn there
    assert done.returncode == 0 and os.listdir(tmp_path / "mine" / "r1"), done.stderr
