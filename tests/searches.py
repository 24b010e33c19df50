"""Helpers for the search tests: a study in the state a test needs, an experiment
that waits while a file exists, and the (autouse) fixture that forks the workers
of a sweep or tune run in the test's own process."""
import os
import warnings

import pytest

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


# -- workers forked, when the sweep or tune that starts them runs in the test's process --

def _fork_from_server(args, **kwargs):
    """A search worker's Popen forked by the fork server, or None (a real process:
    the test set a variable read at start)."""
    import forkserver
    server_env = forkserver._ensure_server()[2][1]  # (its variables after its imports)
    forked = dict(kwargs, preexec_fn=None)  # die_with_parent: the driver is pytest
    forked["env"] = dict(kwargs["env"], PYTHONPATH=server_env["PYTHONPATH"])
    # What importing MindSpore sets in os.environ (this process's, if it trained
    # here after the server started): the server imported it too, so has them.
    compared = dict(forked["env"])
    for key in _SET_BY_MINDSPORE:
        compared.pop(key, None)
        if key in server_env:
            compared[key] = server_env[key]
    if not forkserver._forkable(args, dict(forked, env=compared)):
        return None
    return forkserver.ForkPopen(args, **forked)


_SET_BY_MINDSPORE = ("LD_LIBRARY_PATH", "KMP_DUPLICATE_LIB_OK")


@pytest.fixture(autouse=True)
def forked_workers(monkeypatch):
    """Autouse where imported (the search tests): the workers that a sweep or tune
    run in the test's own process starts (the ``cli`` fixture, ``mindexp.tune``
    and ``mindexp.sweep`` called by the test) are forked by the fork server
    (tests/forkserver.py), which imported MindSpore once, instead of each paying
    about 2.5 CPU-seconds for its import.

    Each is still a process of its own running ``python -m mindexp _search_worker
    INDEX`` with the driver's environment (its spec in MINDEXP_WORKER_SPEC), stdout
    pipe, stderr log and session; its pid, exit status and signals are its own. Two
    things differ, neither of which such a test can observe: the kernel's SIGTERM
    when the driver dies (``children.die_with_parent``; the driver here is pytest,
    which outlives the test), and PYTHONPATH, the fork server's (the same mindexp)
    instead of the driver's with the package root in front. A driver in a process
    of its own (``cli_proc``, ``forkserver.popen``) forks its workers itself
    (``forkserver.DriverForkPopen``): its children, dying with it as in use; a test
    that reads a worker's /proc command line asks for real workers with
    MINDEXP_TEST_FORK_WORKERS=0. Off where the fork server is (MINDEXP_TEST_FORK=0,
    coverage): real workers everywhere."""
    import forkserver
    if forkserver._enabled() and os.environ.get("MINDEXP_TEST_FORK_WORKERS", "1") != "0":
        from mindexp.search import driver
        monkeypatch.setattr(driver, "subprocess", forkserver.SearchWorkers(_fork_from_server))
    yield
