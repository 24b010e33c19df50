"""One lifecycle for every run: ``Experiment.run`` and ``mindexp.track`` end a
run the same way (train.lifecycle.RunLifecycle decides the status for both).

The same callback ends a run of each kind at its third step: ``sys.exit(3)``
fails it with error.txt, ``sys.exit(0)`` completes it, a KeyboardInterrupt no
signal explains interrupts it, each with the same status and error on both.
What leaves the run differs only by contract: ``Experiment.run`` returns an
interrupted run, a tracked block re-raises."""
import json
import os
import sys

import pytest
from mindspore.train import Callback

from mindexp.experiments.linear import Linear

from test_tracked import SCRIPT


class EndAt(Callback):
    """Raise ``exc`` at the end of the run's third step."""

    def __init__(self, exc):
        self.exc, self.seen, self.start = exc, 0, 0

    def on_train_step_end(self, run_context):
        self.seen += 1
        if self.seen == 3:
            raise self.exc


class Ending(Linear):
    """The seed, 4 steps an epoch, with the ending callback."""

    ending = None

    def callbacks(self):
        return [EndAt(self.ending)]


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    folder = tmp_path_factory.mktemp("script")
    (folder / "life_script.py").write_text(SCRIPT)
    sys.path.insert(0, str(folder))
    import life_script
    yield life_script
    sys.path.remove(str(folder))
    sys.modules.pop("life_script", None)


def _experiment_run(tmp_path, exc):
    """An Experiment.run ended by ``exc``: (run.json, what left Experiment.run)."""
    exp = Ending(epochs=2, samples=40, checkpoint_every=1)
    exp.ending = exc
    out = tmp_path / "experiment"
    try:
        left = exp.run(out=str(out))
    except BaseException as raised:  # noqa: B036  what leaves is what is tested
        left = raised
    (run_dir,) = (out / "linear").iterdir()
    return run_dir, left


def _script_run(tmp_path, script, exc):
    """A tracked script's run ended by ``exc``: (its folder, what left the block)."""
    out = tmp_path / "script"
    try:
        left = script.train(out, epochs=2, stop=EndAt(exc))
    except BaseException as raised:  # noqa: B036
        left = raised
    (run_dir,) = (out / "lin").iterdir()
    return run_dir, left


def _meta(run_dir):
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        return json.load(f)


def _error_kind(meta):
    """run.json's error without the frame it names (each kind's file differs)."""
    return (meta.get("error") or "").split(" (at ")[0]


@pytest.mark.slow  # trains two runs: seconds
def test_sys_exit_n_from_a_callback_fails_both_with_error_txt_and_exits_n(tmp_path, script):
    runs = [_experiment_run(tmp_path, SystemExit(3)), _script_run(tmp_path, script, SystemExit(3))]
    for run_dir, left in runs:
        meta = _meta(run_dir)
        assert meta["status"] == "failed", (run_dir, meta["status"])  # was `running` for good
        assert _error_kind(meta) == "SystemExit: 3"
        with open(os.path.join(run_dir, "error.txt"), encoding="utf-8") as f:
            assert "SystemExit: 3" in f.read()
        assert isinstance(left, SystemExit) and left.code == 3  # the exit the user asked for
        assert meta["steps"] == 3


@pytest.mark.slow  # trains two runs: seconds
def test_sys_exit_0_from_a_callback_completes_both(tmp_path, script):
    runs = [_experiment_run(tmp_path, SystemExit(0)), _script_run(tmp_path, script, SystemExit(0))]
    for run_dir, left in runs:
        meta = _meta(run_dir)
        assert (meta["status"], meta["steps"]) == ("completed", 3), run_dir
        assert not os.path.exists(os.path.join(run_dir, "error.txt"))
        assert isinstance(left, SystemExit) and left.code == 0


@pytest.mark.slow  # trains two runs: seconds
def test_a_keyboard_interrupt_no_signal_explains_interrupts_both_with_one_error(tmp_path,
                                                                                 script):
    (exp_dir, exp_left), (script_dir, script_left) = (
        _experiment_run(tmp_path, KeyboardInterrupt()),
        _script_run(tmp_path, script, KeyboardInterrupt()))
    for run_dir in (exp_dir, script_dir):
        meta = _meta(run_dir)
        assert meta["status"] == "interrupted" and not meta.get("signal"), run_dir
        # was "interrupted (second signal)" for an experiment, nothing for a script
        assert meta["error"] == "interrupted by KeyboardInterrupt", run_dir
    assert exp_left.meta["status"] == "interrupted"  # Experiment.run returns the run
    assert isinstance(script_left, KeyboardInterrupt)  # a tracked block re-raises


@pytest.mark.slow  # trains two runs: seconds
def test_an_exception_fails_both_with_the_same_error(tmp_path, script):
    from mindexp.errors import TrainingError
    (exp_dir, exp_left), (script_dir, script_left) = (
        _experiment_run(tmp_path, ValueError("bad batch")),
        _script_run(tmp_path, script, ValueError("bad batch")))
    assert _error_kind(_meta(exp_dir)) == _error_kind(_meta(script_dir)) == "ValueError: bad batch"
    assert isinstance(exp_left, TrainingError) and isinstance(script_left, ValueError)
    assert os.path.exists(os.path.join(exp_dir, "error.txt"))
    assert os.path.exists(os.path.join(script_dir, "error.txt"))


def test_both_kinds_of_run_are_one_lifecycle():
    """The status is decided in one place: a tracked run is a RunLifecycle, and
    the experiment's session records no status of its own."""
    from mindexp.train import launch, session
    from mindexp.train.lifecycle import RunLifecycle
    from mindexp.train.tracked import TrackedRun
    assert issubclass(TrackedRun, RunLifecycle)
    assert "RunLifecycle(" in open(launch.__file__, encoding="utf-8").read()
    source = open(session.__file__, encoding="utf-8").read()
    assert '"status"' not in source and "record_failure" not in source
