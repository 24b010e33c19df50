"""msrun's launcher forked from the fork server (tests/forkserver.py) instead of
started as a new interpreter.

``msrun`` (the console script beside ``sys.executable``) is a Python program that
imports all of MindSpore (about 2.3 CPU-seconds) to start a scheduler and workers,
which are new interpreters of their own. Forked, its launcher runs the same
``mindspore.parallel.cluster.run.main`` with the same argv, environment, cwd, stdio
and session, in a real process of its own; only its import is saved. The scheduler
and the workers it starts are still new interpreters with exactly the environment
given (msrun reads its environment with ``os.getenv`` when it runs, not at import).

The fork server forks only when a process's startup environment equals its own;
for the launcher two more differences are allowed, since it reads neither itself:
``PYTHONPATH`` (the product's ``_worker_env()`` puts its repository first, for the
workers) and ``MS_NODE_TIMEOUT`` (the cluster's heartbeat timeout, read by the
scheduler and the workers). Anything else gets the real console script.
"""
import os
import subprocess
import sys

import pytest

import forkserver

MSRUN = os.path.join(os.path.dirname(sys.executable), "msrun")
# what the console script runs (its argv[0] suffix trim is for .exe)
CODE = ("import sys\n"
        "from mindspore.parallel.cluster.run import main\n"
        "sys.exit(main())\n")
_LAUNCHER_IGNORES = ("PYTHONPATH", "MS_NODE_TIMEOUT")


def _forkable(kwargs) -> bool:
    if not forkserver._enabled():
        return False
    if any(kwargs.get(k, v) != v for k, v in forkserver._UNSUPPORTED.items()):
        return False
    env = kwargs.get("env")

    def startup(values):
        return {k: v for k, v in forkserver._startup_env(values).items()
                if k not in _LAUNCHER_IGNORES}
    return startup(os.environ if env is None else env) in map(startup,
                                                              forkserver._ensure_server()[2])


def popen(args, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)`` for ``args`` = [MSRUN, *msrun's arguments]."""
    args = [os.fspath(a) for a in args]
    assert args[0] == MSRUN and os.path.exists(MSRUN), args[0]  # the console script is there
    if not _forkable(kwargs):
        return subprocess.Popen(args, **kwargs)
    return forkserver.ForkPopen([sys.executable, "-c", CODE, *args[1:]], **kwargs)


def run(args, *, timeout=None, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(args, capture_output=True, text=True, ...)`` through :func:`popen`."""
    with popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
               **kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            proc.kill()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class _Subprocess:
    """The ``subprocess`` module as mindexp.train.distributed sees it, its Popen of
    msrun forked (:func:`popen`); all else is the module's own."""

    def __getattr__(self, name):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args, **kwargs):  # noqa: N802 (subprocess's name)
        if isinstance(args, (list, tuple)) and args and os.fspath(args[0]) == MSRUN:
            return popen(args, **kwargs)
        return subprocess.Popen(args, **kwargs)


def fork_launches(monkeypatch) -> None:
    """``mindexp run --workers N`` in this process (the ``cli`` fixture) forks msrun's
    launcher: mindexp.train.distributed.launch builds and waits for the same command."""
    from mindexp.train import distributed
    monkeypatch.setattr(distributed, "subprocess", _Subprocess())


@pytest.fixture
def cli_msrun(cli, monkeypatch):
    """The ``cli`` fixture in this process, msrun's launcher forked (:func:`fork_launches`):
    ``cli_msrun(*args, **env)`` sets ``env`` in this process's environment for the
    command (the one msrun's scheduler and workers inherit) instead of running it in
    a process of its own, which would start msrun's launcher as a new interpreter."""
    fork_launches(monkeypatch)

    def run(*args, timeout=300, **env):
        with monkeypatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, str(value))
            return cli(*args, timeout=timeout)
    return run
