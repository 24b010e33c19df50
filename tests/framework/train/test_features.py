"""Features contribute their callbacks (train/features.py): the run's list is
every registered feature's, in order, and one registration wires a new log
into every run."""
import csv
import os

import pytest
from mindspore.train import Callback

from mindexp.callbacks import CsvLog
from mindexp.experiments.linear import Linear
from mindexp.train import features


# Today's features in their order; a new one registers wherever its order puts it
# among them (its module plus one registration: this list need not change).
ORDER = ["steps", "signals_head", "timer", "loss", "params", "grad_norm", "eval", "system",
         "figures", "progress", "experiment", "early_stop", "checkpoint", "signals"]


def test_the_features_run_in_their_order():
    names = [f.name for f in features.features()]
    assert [name for name in names if name in ORDER] == ORDER
    assert names[0] == "steps" and names[-1] == "signals"  # the step first, the stop last


def test_a_feature_registered_twice_is_refused_naming_both_places(monkeypatch):
    monkeypatch.setattr(features, "_FEATURES", dict(features._FEATURES))
    with pytest.raises(ValueError, match=r"feature 'loss' is registered twice \(mindexp.train.logs and"):
        features.feature("loss", order=1)(lambda run, before: None)


class StepRows(Callback):
    """A new CSV log: step and loss of every step, read from the step's record."""

    def __init__(self, folder):
        self.log = CsvLog(os.path.join(folder, "steps_seen.csv"), ["step", "loss"])

    def on_train_step_record(self, record, run_context):
        self.log.write([record.step, record.loss])

    def flush(self):          # the checkpoint flushes it first, as the run's own logs
        self.log.flush()

    def on_train_end(self, run_context):
        self.log.close()


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_one_registration_wires_a_new_log_into_every_run(tmp_path, monkeypatch):
    monkeypatch.setattr(features, "_FEATURES", dict(features._FEATURES))
    features.feature("steps_seen", order=65)(lambda run, before: StepRows(run.run_dir))
    run = Linear(epochs=2, batch_size=25).run(out=str(tmp_path))
    with open(os.path.join(run.dir, "steps_seen.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == list(range(1, 9))
    assert [float(r["loss"]) for r in rows] == run.loss["loss"].tolist()


def _built(tmp_path, **config):
    from mindexp.train.signals import SignalStop
    exp = Linear(epochs=1, system_every_s=0, **config)
    stopper = SignalStop()
    run = features.Build(exp=exp, cfg=exp.config, run_dir=str(tmp_path), steps_per_epoch=4,
                         resume=None, metrics={}, quiet=True, shard_id=0, stopper=stopper,
                         net=exp.network())
    return features.build_callbacks(run), stopper


def test_a_builder_is_the_key_to_the_callbacks_it_built(tmp_path, monkeypatch):
    from mindexp.callbacks import LossMonitor, ParameterTracker
    from mindexp.train import logs, monitors, steps
    monkeypatch.setattr(features, "_FEATURES", dict(features._FEATURES))
    seen = StepRows(str(tmp_path))

    def steps_seen(run, before):
        return seen
    features.feature("steps_seen", order=65)(steps_seen)
    built, stopper = _built(tmp_path, track_params=True)
    assert isinstance(built.the(logs.loss_log), LossMonitor)
    assert isinstance(built.one(logs.params_log), ParameterTracker)
    assert built.one(monitors.early_stop_callback) is None  # early_stop off
    assert built.the(steps.run_steps) is built.all[0] and built.all[-1] is stopper
    assert built.of(steps_seen) == [seen] and built.one(steps_seen) is seen
    assert built.one(logs.params_log) in built.all
    assert _built(tmp_path, track_params=False)[0].one(logs.params_log) is None
