"""Helpers for the search tests: a study in the state a test needs, an experiment
that waits while a file exists."""
import warnings

HELD = '''
import os, time
from dataclasses import dataclass
from mindspore.train import Callback
from mindexp.experiments.linear import Linear


class Held(Linear):
    """Linear; each step waits a little while the file `hold` exists, and the
    network refuses to build while the file `boom` exists."""
    name = "held"

    @dataclass
    class Config(Linear.Config):
        hold: str = ""
        boom: str = ""

    def network(self):
        if self.config.boom and os.path.exists(self.config.boom):
            raise RuntimeError("the boom file is there")
        return super().network()

    def callbacks(self):
        hold = self.config.hold

        class Hold(Callback):
            def on_train_step_end(self, run_context):
                if hold and os.path.exists(hold):
                    time.sleep(0.2)
        return [Hold()]
'''


def lost_trial(url):
    """A study ``linear`` in the RDB storage ``url`` with one RUNNING trial whose
    worker is on another host (its lock out of reach), its heartbeat recorded
    now: the test then moves that heartbeat into the past."""
    import optuna
    from mindexp.search.study import open_storage
    study = optuna.create_study(study_name="linear", storage=open_storage(url))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna: heartbeats are meant for optimize()
        lost = study.ask()
    lost.set_user_attr("host", "another-machine")
    study._storage.record_heartbeat(lost._trial_id)
    return study


def wait_for(condition, what, timeout=240):
    """Poll ``condition()`` until it returns something true; returns that."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout} s")
