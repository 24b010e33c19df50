"""One way to start a run, chosen once from the request and msrun's
environment (train/launch.py): each way is a strategy with one ``start``."""
import types

import pytest

from mindexp.experiments.linear import Linear
from mindexp.train import distributed, launch
from mindexp.train.request import RunRequest


def _plots(run_dir, status):
    """A stand-in for the caller's finish (the plots)."""


def _kept(run_dir):
    """A stand-in for the caller's keep."""


@pytest.fixture
def msrun(monkeypatch):
    """Set what msrun's environment says: ``msrun("scheduler")``, ``msrun("worker")``
    or ``msrun(None)`` (no msrun)."""
    def be(role):
        monkeypatch.setattr(distributed, "msrun_scheduler", lambda: role == "scheduler")
        monkeypatch.setattr(distributed, "under_msrun", lambda: role == "worker")
    return be


def _request(workers=1, resumed=False):
    point = types.SimpleNamespace(entry="linear") if resumed else None  # read only for its entry
    return RunRequest(Linear(epochs=1, workers=workers), resume=point)


@pytest.mark.parametrize("role, workers, resumed, chosen", [
    (None, 1, False, launch.InProcess),
    (None, 1, True, launch.InProcess),          # a resume is the request's, not another way
    (None, 2, False, launch.Launcher),
    ("worker", 1, False, launch.OwnMsrunRank),  # a rank of the user's own msrun
    ("scheduler", 1, False, launch.OwnMsrunScheduler),
])
def test_the_way_to_start_is_chosen_once_from_the_request_and_msruns_environment(
        msrun, role, workers, resumed, chosen):
    msrun(role)
    start = launch.choose_start(_request(workers, resumed), finish=_plots, keep=_kept)
    assert type(start) is chosen
    if chosen in (launch.InProcess, launch.Launcher):
        assert (start.finish, start.keep) == (_plots, _kept)


def test_a_resume_under_msrun_trains_here_without_rank_0_drawing_alone(msrun):
    msrun("worker")
    start = launch.choose_start(_request(resumed=True), finish=_plots, keep=_kept)
    assert type(start) is launch.InProcess and start.finish is None and start.keep is _kept


def test_a_scheduler_serves_msruns_cluster_and_trains_nothing(msrun, monkeypatch, tmp_path):
    msrun("scheduler")
    served = []
    monkeypatch.setattr(distributed, "serve_as_scheduler", lambda: served.append(True))
    request = RunRequest(Linear(epochs=1), out=str(tmp_path))
    assert launch.train(request) is None and served == [True]
    assert list(tmp_path.iterdir()) == []  # no run folder


def test_every_way_to_start_has_the_one_interface():
    for way in (launch.InProcess(), launch.Launcher(), launch.OwnMsrunRank(),
                launch.OwnMsrunScheduler(), launch.MsrunWorker("run", (2, 0))):
        assert isinstance(way, launch.Start)
