"""Every log of a run is registered with it, the user's too: resume cuts each
back by its own step column and warns once about a CSV nothing registered."""
import logging
import os

import pandas as pd
import pytest

from mindexp.api import resume_run
from mindexp.callbacks import list_checkpoints, register_log, registered_logs

from test_eval import LinearEval


def _drop_checkpoints_after(run_dir, step):
    for found, _, path in list_checkpoints(run_dir, "all"):
        if found > step:
            os.remove(path)


@pytest.mark.slow  # trains: seconds
def test_resume_cuts_every_registered_log_and_warns_about_the_others(tmp_path, caplog):
    run = LinearEval(epochs=3, checkpoint_every=1, checkpoint_interval_s=0, metrics=("loss",)).run(out=str(tmp_path))
    mine = os.path.join(run.dir, "mine", "custom.csv")   # another writer's log, by hand
    os.makedirs(os.path.dirname(mine))
    pd.DataFrame({"epoch": [1, 2, 3], "at": [10, 20, 30]}).to_csv(mine, index=False)
    register_log(mine, "at", run_dir=run.dir)
    stray = os.path.join(run.dir, "notes.csv")
    pd.DataFrame({"step": [10, 30]}).to_csv(stray, index=False)
    _drop_checkpoints_after(run.dir, 20)              # resume from step 20: cut 21..30

    with caplog.at_level(logging.WARNING):
        resumed = resume_run(run.dir)
    assert resumed.meta["status"] == "completed" and resumed.meta["resumes"][0]["step"] == 20
    assert pd.read_csv(mine)["at"].tolist() == [10, 20]        # cut, and nobody wrote on
    assert resumed.eval["step"].tolist() == [10, 20, 30]       # cut, then epoch 3 again
    assert resumed.loss["step"].tolist() == list(range(1, 31))
    assert pd.read_csv(stray)["step"].tolist() == [10, 30]     # left alone ...
    warned = [r.getMessage() for r in caplog.records if "notes.csv" in r.getMessage()]
    assert len(warned) == 1 and stray in warned[0]             # ... with one warning naming it
    logs = registered_logs(run.dir)
    assert {"loss.csv", "eval.csv", "params.csv", "checkpoints.csv"} <= set(logs)
    assert logs["mine/custom.csv"] == "at" and logs["eval.csv"] == "step"


def test_register_log_refuses_a_path_outside_any_run(tmp_path):
    with pytest.raises(ValueError, match="inside a run's folder") as err:
        register_log(tmp_path / "elsewhere.csv")
    assert "\n" not in str(err.value)


def test_a_log_registered_from_a_signal_handler_during_a_registry_write_is_kept(tmp_path,
                                                                               monkeypatch):
    """A signal lands while this process writes the run's logs.json and its handler
    closes a log, which registers it: the inner registration joins the outer write
    (a second flock of the run folder from one process waited for ever: the fault
    injection found a sweep worker hung so after a SIGTERM)."""
    import json
    import signal
    import threading
    from mindexp.callbacks import _registry, register_log, registered_logs
    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir)
    write = _registry.atomic_write
    fired = []

    def write_then_signal(path, data):
        write(path, data)
        if not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGUSR1)   # its handler runs before this returns

    handler = lambda *_: register_log(os.path.join(run_dir, "late.csv"), "step", run_dir=run_dir)
    monkeypatch.setattr(_registry, "atomic_write", write_then_signal)
    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        done = threading.Event()
        timer = threading.Timer(30, lambda: done.is_set() or os._exit(3))  # a hang fails
        timer.start()
        register_log(os.path.join(run_dir, "first.csv"), "step", run_dir=run_dir)
        done.set()
        timer.cancel()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert registered_logs(run_dir) == {"first.csv": "step", "late.csv": "step"}
    with open(os.path.join(run_dir, "logs.json")) as f:
        assert set(json.load(f)["logs"]) == {"first.csv", "late.csv"}
