"""Shared fixtures: a CLI runner, tiny experiments, a hand-built RunContext."""
import importlib
import os
import subprocess
import sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("GLOG_v", "3")
# Runs in tests draw no plots/ or figures/ (1-2 s of CPU each); the tests about plots
# and figures ask for them (the ``plots_drawn`` fixture, or MINDEXP_PLOTS=1 in a
# subprocess's environment). Set here, so every subprocess inherits it.
os.environ["MINDEXP_PLOTS"] = "0"


def _cache_bytecode():
    """Compiled modules are cached for the suite's processes, as Python does by default.

    With PYTHONDONTWRITEBYTECODE set (as on our machines) every process compiled
    mindexp's sources (1 MB) and each worker rewrote and compiled every test file
    (collection: 10.5 CPU-s a worker instead of 6). The caches go where Python puts
    them (``__pycache__`` beside the sources, ignored by git): a prefix folder
    (PYTHONPYCACHEPREFIX) would ignore site-packages' own caches and compile them
    all again once. The environment set here reaches every subprocess the tests start."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


_cache_bytecode()


def in_ci():
    """True under CI (``CI`` set, as ``.ci/run`` runs): the test extra is installed and
    the tests run as root, so a test that would skip locally must run there."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(module, reason=None):
    """``module`` imported: a skip (with ``reason``) where it is missing, a failure under CI."""
    if in_ci():
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=reason)


def skip_unless_ci(reason):
    """Skip the test with ``reason``; under CI, where it must run, fail it instead."""
    if in_ci():
        pytest.fail(f"{reason} (CI must run this test)", pytrace=False)
    pytest.skip(reason)


def cli_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("GLOG_v", "3")
    env.update(extra)
    return env


MAIN_PY = os.path.join(ROOT, "framework", "__main__.py")  # sys.argv[0] of `python -m mindexp`


@pytest.fixture
def cli_proc(tmp_path):
    """Run ``mindexp ARGS`` in a process of its own (cwd: tmp_path); returns
    CompletedProcess. For what needs a process of its own: exit by a signal, a
    process that kills itself, environment variables read at a process's start,
    msrun. Forked from a server that imported MindSpore once (tests/forkserver.py;
    a real subprocess where the environment changes what a process reads at its start)."""
    import forkserver

    def run(*args, cwd=None, timeout=300, **env):
        return forkserver.run([sys.executable, "-m", "mindexp", *map(str, args)],
                              cwd=cwd or tmp_path, env=cli_env(**env), capture_output=True,
                              text=True, timeout=timeout)
    return run


@pytest.fixture
def cli(cli_proc, tmp_path, monkeypatch, capsys):
    """Run ``mindexp ARGS`` (cwd: tmp_path); returns CompletedProcess.

    Through the CLI's main() in this process, as ``python -m mindexp`` would (its
    argv, its cwd): MindSpore is imported once per test worker instead of once per
    command (about 2 s of CPU each). A call that sets environment variables runs in
    a subprocess (``cli_proc``): a process reads some at its start, and the tests'
    own experiments use them to signal their process."""
    from mindexp.cli.main import main

    def run(*args, cwd=None, timeout=300, **env):
        if env:
            return cli_proc(*args, cwd=cwd, timeout=timeout, **env)
        argv = [str(a) for a in args]
        with monkeypatch.context() as patch:
            patch.chdir(cwd or tmp_path)
            patch.setattr(sys, "argv", [MAIN_PY, *argv])
            capsys.readouterr()
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's --help and --version
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            out, err = capsys.readouterr()
        return subprocess.CompletedProcess([sys.executable, "-m", "mindexp", *argv], code, out, err)
    return run



@pytest.fixture
def main_cli(tmp_path, monkeypatch, capsys):
    """Run ``mindexp ARGS`` through the CLI's main() in this process (cwd: tmp_path);
    returns CompletedProcess. For bad input that a built-in experiment refuses: a
    subprocess would spend seconds importing MindSpore only to print one line.
    (tests/framework/cli/test_cli.py checks the process itself: exit 2, no traceback.)"""
    from mindexp.cli.main import main
    monkeypatch.chdir(tmp_path)

    def run(*args):
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, captured.out, captured.err)
    return run

@pytest.fixture(scope="module")
def plots_drawn():
    """Runs made while this (module-scoped) fixture is up draw plots/ and figures/."""
    os.environ["MINDEXP_PLOTS"] = "1"
    yield
    os.environ["MINDEXP_PLOTS"] = "0"


@pytest.fixture
def holder():
    """``holder(run_dir, action="resume")``: another process holding the run's
    lock (as a run or a resume does) until the test ends; returns its Popen."""
    procs = []

    def hold(run_dir, action="resume"):
        code = ("import signal, sys; from mindexp.rundir.run_lock import run_locked\n"
                "with run_locked(sys.argv[1], sys.argv[2]):\n"
                "    print('held', flush=True); signal.pause()  # until the test kills it\n")
        proc = subprocess.Popen([sys.executable, "-c", code, str(run_dir), action],
                                env=cli_env(), stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline() == "held\n"
        return proc
    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


class CbParams(dict):
    """The attribute-style dict MindSpore passes as ``original_args()``."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key, value):
        self[key] = value


@pytest.fixture
def run_context():
    """Factory: ``run_context(batch_num=10, ...)`` -> a real
    ``mindspore.train.RunContext`` over hand-built params."""
    from mindspore.train import RunContext

    def make(**params):
        params.setdefault("batch_num", 10)
        params.setdefault("cur_epoch_num", 1)
        params.setdefault("cur_step_num", 0)
        return RunContext(CbParams(params))
    return make


@pytest.fixture(scope="session")
def ms_graph():
    """MindSpore in graph mode on CPU (imported once per session)."""
    import mindspore as ms
    ms.set_context(mode=ms.GRAPH_MODE)
    if ms.get_context("device_target") != "CPU":  # refused once the runtime has started
        ms.set_device("CPU")
    return ms


# -- a full disk (train/test_resume_faults.py, search/test_sweep_lifecycle.py) --------

@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs at tmp_path/small (root only); skipped where mounting is not allowed."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        skip_unless_ci(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


DISK_ARGS = ["--set", "epochs=400", "--set", "checkpoint_interval_s=0", "--set",
             "optimizer=adam", "--set", "lr=0.05", "--quiet"]


# -- the order files are handed to the xdist workers ----------------------------------

def _file_cost(items):
    """How long a test file is expected to take, from its own marks: the largest
    ``timeout`` it declares (long tests declare one), then its count of slow tests."""
    timeouts = [mark.args[0] for item in items for mark in item.iter_markers("timeout")
                if mark.args]
    slow = sum(1 for item in items if item.get_closest_marker("slow"))
    return max(timeouts, default=0), slow


def pytest_collection_modifyitems(session, config, items):
    """Costliest files first (with ``--dist loadfile --no-loadscope-reorder``), so that
    the 10-minute fault injection starts at once instead of being the last file of one
    worker while the other idles: longest-first is what keeps two workers busy."""
    by_file = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::")[0], []).append(item)
    ordered = sorted(by_file.values(), key=_file_cost, reverse=True)  # stable: ties keep order
    items[:] = [item for group in ordered for item in group]


# -- what the suite cost: wall time and CPU of every process, printed at the end ------

def _cpu_seconds(who):
    """User+system CPU of this process (RUSAGE_SELF) or of the children it has waited for
    (RUSAGE_CHILDREN: theirs and their own waited-for children's)."""
    import resource
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def pytest_sessionstart(session):
    import time
    session.config._suite_started = time.monotonic()
    session.config._worker_cpu = 0.0
    session.config._machine_busy = _machine_busy_seconds()


def _machine_busy_seconds():
    """CPU-seconds the whole machine has been busy (/proc/stat: user, nice, system, irq,
    softirq): what the suite cost, servers and daemons included, on a quiet machine."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:8]
        return sum(int(fields[i]) for i in (0, 1, 2, 5, 6)) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def pytest_sessionfinish(session):
    import forkserver
    forkserver.shutdown()  # waited for: its forked children's CPU joins RUSAGE_CHILDREN
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: report its CPU to the controller
        import resource
        workeroutput["cpu_s"] = sum(map(_cpu_seconds, (resource.RUSAGE_SELF,
                                                      resource.RUSAGE_CHILDREN)))


def pytest_testnodedown(node, error):
    output = getattr(node, "workeroutput", None) or {}
    node.config._worker_cpu += output.get("cpu_s", 0.0)


def pytest_terminal_summary(terminalreporter, config):
    import time
    if getattr(config, "workeroutput", None) is not None:
        return
    import resource
    wall = time.monotonic() - config._suite_started
    # the workers' own count, or the controller's count of its reaped children (the
    # workers, once they exited, and all they waited for), whichever saw more
    children = max(_cpu_seconds(resource.RUSAGE_CHILDREN), config._worker_cpu)
    cpu = _cpu_seconds(resource.RUSAGE_SELF) + children
    terminalreporter.write_line(f"suite: {wall:.0f} s wall ({wall // 60:.0f} min {wall % 60:.0f} s), "
                                f"{cpu:.0f} CPU-seconds (user+sys, every process the tests "
                                f"started and waited for), {cpu / wall:.2f} cores busy on average")
    busy, start = _machine_busy_seconds(), config._machine_busy
    if busy is not None and start is not None:  # servers, daemons, orphans: all counted here
        terminalreporter.write_line(
            f"machine: {busy - start:.0f} CPU-seconds busy while the suite ran, "
            f"{(busy - start) / wall:.2f} of {os.cpu_count()} cores (a neighbour's included)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With MINDEXP_TEST_CPU_LOG=FILE: each test's CPU-seconds (setup, call, teardown,
    and the processes it waited for) appended to FILE, to see where the suite's CPU goes;
    then its wall seconds, its worker and when it started (seconds since the epoch), to
    see where the workers' time goes."""
    path = os.environ.get("MINDEXP_TEST_CPU_LOG")
    if not path:
        yield
        return
    import resource
    import time
    import forkserver

    def cpu():  # the fork server's children are not ours: it reports their CPU
        return (_cpu_seconds(resource.RUSAGE_SELF) + _cpu_seconds(resource.RUSAGE_CHILDREN)
                + forkserver.cpu_seconds())
    # the start on the epoch's clock (one timeline for every worker), the wall on a steady one
    started, clock, before = time.time(), time.monotonic(), cpu()
    yield
    spent, wall = cpu() - before, time.monotonic() - clock
    worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{spent:.2f}\t{item.nodeid}\t{wall:.2f}\t{worker}\t{started:.2f}\n")
