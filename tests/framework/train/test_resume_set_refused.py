"""`mindexp resume RUN --set ...` whose new config the checkpoint cannot load
into (another optimizer: the checkpoint holds Adam's state, not SGD's) is
refused before anything of the run changes, and the run stays resumable."""
import hashlib
import json
import os

import pytest


def _digests(run_dir):
    found = {}
    for folder, _, names in os.walk(run_dir):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, run_dir)] = hashlib.sha256(f.read()).hexdigest()
    return found


@pytest.mark.slow  # trains twice: seconds
def test_resume_with_another_optimizer_changes_nothing_and_a_plain_resume_completes(
        cli, tmp_path):
    done = cli("run", "linear", "--out", "out", "--set", "optimizer=adam", "--set", "epochs=2",
               "--set", "checkpoint_every=1", "--quiet")
    assert done.returncode == 0, done.stderr
    (run_dir,) = [str(p) for p in (tmp_path / "out" / "linear").iterdir()]
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        meta = json.load(f)
    meta["status"] = "interrupted"  # as if stopped after its last checkpoint
    with open(os.path.join(run_dir, "run.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)
    before = _digests(run_dir)
    refused = cli("resume", run_dir, "--set", "optimizer=sgd", "--set", "epochs=3", "--quiet")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "its checkpoint does not load into the network and optimizer of this config" \
        in refused.stderr and "optimizer=sgd" in refused.stderr
    assert _digests(run_dir) == before  # config.json, run.json, logs: byte for byte
    again = cli("resume", run_dir, "--set", "epochs=3", "--quiet")
    assert again.returncode == 0, again.stderr
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        meta = json.load(f)
    assert meta["status"] == "completed" and meta["epochs"] == 3
