"""Shared fixtures: a CLI runner, tiny experiments, a hand-built RunContext."""
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("GLOG_v", "3")


def cli_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("GLOG_v", "3")
    env.update(extra)
    return env


@pytest.fixture
def cli(tmp_path):
    """Run ``mindexp ARGS`` in a subprocess (cwd: tmp_path); returns CompletedProcess."""
    def run(*args, cwd=None, timeout=300, **env):
        return subprocess.run([sys.executable, "-m", "framework", *map(str, args)],
                              cwd=cwd or tmp_path, env=cli_env(**env), capture_output=True,
                              text=True, timeout=timeout)
    return run


class FakeRunContext:
    """A RunContext stand-in over plain attributes, for unit-testing callbacks
    without a network: ``original_args()`` returns the params object."""

    def __init__(self, **params):
        self.params = _CbParams(**params)
        self.stop_requested = False

    def original_args(self):
        return self.params

    def request_stop(self):
        self.stop_requested = True

    def get_stop_requested(self):
        return self.stop_requested


class _CbParams(SimpleNamespace):
    def get(self, key, default=None):
        return getattr(self, key, default)

    def __contains__(self, key):
        return hasattr(self, key)


@pytest.fixture
def run_context():
    """Factory: ``run_context(batch_num=10, ...)`` -> FakeRunContext."""
    def make(**params):
        params.setdefault("batch_num", 10)
        params.setdefault("cur_epoch_num", 1)
        params.setdefault("cur_step_num", 0)
        return FakeRunContext(**params)
    return make


@pytest.fixture(scope="session")
def ms_graph():
    """MindSpore in graph mode on CPU (imported once per session)."""
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    return ms
