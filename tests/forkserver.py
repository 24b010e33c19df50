"""``python -m mindexp ARGS`` processes forked from a server that imported MindSpore once.

A process that imports MindSpore pays about 2.3 CPU-seconds before it does anything;
the suite starts a few hundred. Each test worker instead starts one server process
(at its first request) that imports mindspore and mindexp, then ``os.fork()``s a child
per command: the child takes the request's stdin/stdout/stderr, cwd, environment and
argv, and runs ``python -m mindexp`` (``runpy``, as ``-m`` does) to its normal exit.
It is a real process of its own (a pid to signal, an exit status, locks of its own),
started in a few milliseconds, and the server never runs MindSpore itself (no
context, no graph, no dataset), so the child starts from a clean runtime.

:func:`popen` and :func:`run` take the arguments of ``subprocess.Popen`` and
``subprocess.run`` and return the same objects (``ForkPopen`` is a ``Popen``: wait,
poll, communicate, send_signal, kill, pid, returncode). They fall back to a real
subprocess where a fork would differ from a new process: another command than
``python -m mindexp``, options a fork cannot honour (preexec_fn, pass_fds, shell, ...),
an environment that changes what a process reads at its start (``MS_*``, ``GLOG_*``,
``PYTHON*``, ...: see ``_STARTUP``), or with ``MINDEXP_TEST_FORK=0``. Under coverage
(``make coverage``) the children fork too: the server is measured from its start
(``patch = subprocess``) and each child writes its own data file (``patch = fork,
_exit``, setup.cfg).

A search driver forked this way (``mindexp sweep``/``tune``) forks its own workers
(:class:`DriverForkPopen`: its children, dying with it, as ``exec`` would leave them)
instead of starting a new interpreter for each; MINDEXP_TEST_FORK_WORKERS=0 keeps
real workers.

``python SCRIPT.py ARGS`` and ``python -c CODE ARGS`` fork the same way (the script by
``runpy.run_path``, the code in a new ``__main__``): for a script or a probe that does not
test what a new interpreter imports at its start.

The children's CPU is counted: the server reports each child's rusage, added to
:func:`cpu_seconds` (tests/conftest.py adds it to a test's CPU), and the server,
waited for at the session's end (:func:`shutdown`), brings its children's CPU into
the worker's RUSAGE_CHILDREN.
"""
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

# Environment variables read when a process starts (by Python, MindSpore, glog, the
# C libraries) or that change what a child imports: a request that sets them to
# other values than the server's gets a real process.
_STARTUP = ("PYTHON", "MS_", "MINDSPORE", "GLOG_", "OMP_", "KMP_", "LD_", "MALLOC",
            "COV", "RANK_", "DEVICE_", "GOMP", "OPENBLAS", "MKL_", "TZ", "LANG", "LC_",
            "MPL")
# Popen options a fork cannot honour (any value but the default: a real process).
_UNSUPPORTED = {"preexec_fn": None, "pass_fds": (), "shell": False, "executable": None,
                "user": None, "group": None, "extra_groups": None, "umask": -1,
                "close_fds": True, "restore_signals": True}
# What the server imports for its children (optuna: sweeps and tunes; matplotlib: the
# plots of runs that draw them, 0.45 CPU-s each; it starts no thread, and a request
# whose MPL* variables differ from the server's gets a real process, _STARTUP). Not
# pandas (its import starts pyarrow's jemalloc thread: the server forks with no thread
# but MindSpore's own one).
_WARM = ("mindspore", "mindspore.dataset", "mindspore.train", "mindspore.nn",
         "mindexp", "mindexp.cli.main", "mindexp.train.session", "mindexp.experiments",
         "mindexp.search.driver", "optuna", "matplotlib", "matplotlib.pyplot")

_lock = threading.Lock()
_server = None       # (Popen of the server, socket path, its startup variables
                     #  as started and after its imports)
_cpu = [0.0]         # CPU-seconds of the forked children that ended


def cpu_seconds() -> float:
    """User+system CPU of the children forked for this process so far (those that ended)."""
    return _cpu[0]


def _enabled() -> bool:
    return os.environ.get("MINDEXP_TEST_FORK", "1").strip() not in ("0", "no", "false")


def _startup_env(env) -> dict:
    return {k: v for k, v in env.items() if k.startswith(_STARTUP)}


def _program(args):
    """What ``args`` runs: ("module", "mindexp"), ("script", PATH), ("code", CODE) or None
    (another program, or Python with options)."""
    if not isinstance(args, (list, tuple)) or len(args) < 2:
        return None
    argv = [os.fspath(a) if isinstance(a, os.PathLike) else a for a in args]
    if not all(isinstance(a, str) for a in argv) or argv[0] != sys.executable:
        return None
    if argv[1:3] == ["-m", "mindexp"]:
        return "module", "mindexp"
    if argv[1] == "-c" and len(argv) > 2:
        return "code", argv[2]
    if argv[1].endswith(".py") and not argv[1].startswith("-"):
        return "script", os.path.abspath(argv[1])
    return None


def _forkable(args, kwargs) -> bool:
    """``args`` is ``python -m mindexp ...``, ``python SCRIPT.py ...`` or ``python -c
    CODE ...``, and nothing asks for a new process."""
    if not _enabled() or _program(args) is None:
        return False
    if any(kwargs.get(k, v) != v for k, v in _UNSUPPORTED.items()):
        return False
    env = _startup_env(os.environ if kwargs.get("env") is None else kwargs["env"])
    # the server's environment as started, or as its imports left it (MindSpore's sets
    # LD_LIBRARY_PATH and KMP_DUPLICATE_LIB_OK: a test process that imported it has them)
    return env in _ensure_server()[2]


def _ensure_server():
    global _server
    with _lock:
        if _server is None or _server[0].poll() is not None:
            from conftest import cli_env  # PYTHONPATH as every test's subprocess has it
            env = cli_env()
            folder = tempfile.mkdtemp(prefix="mindexp-forkserver-")
            path = os.path.join(folder, "socket")
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), path],
                                    env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE)
            ready = proc.stdout.readline()
            if not ready.startswith(b"ready "):
                raise RuntimeError(f"the fork server did not start (exit {proc.wait()})")
            _server = (proc, path, (_startup_env(env), json.loads(ready[6:])))
        return _server


def shutdown() -> None:
    """Stop the server and wait for it (its children's CPU joins RUSAGE_CHILDREN)."""
    global _server
    with _lock:
        if _server is not None:
            proc = _server[0]
            proc.terminate()
            proc.wait()
            proc.stdout.close()
            shutil.rmtree(os.path.dirname(_server[1]), ignore_errors=True)
            _server = None


class ForkPopen(subprocess.Popen):
    """A ``Popen`` whose child the fork server forked (see the module's docstring)."""

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread,
                       c2pwrite, errread, errwrite, restore_signals, gid, gids, uid, umask,
                       start_new_session, process_group):
        kind, what = _program(args)
        request = {"kind": kind, "what": what,
                   "argv": [os.fspath(a) for a in args[2 if kind == "script" else 3:]],
                   "cwd": os.path.abspath(os.fspath(cwd)) if cwd is not None else os.getcwd(),
                   "env": dict(os.environ if env is None else env),
                   "session": bool(start_new_session),
                   "group": -1 if process_group is None else process_group}
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
               errwrite if errwrite != -1 else 2]
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(_ensure_server()[1])
            socket.send_fds(conn, [json.dumps(request).encode()], fds)
            self._status = b""
            self._conn = conn
            self.pid = int(self._read_line(None))
            self._child_created = True
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _read_line(self, timeout):
        """The server's next line; ``timeout`` 0: None unless it is there."""
        self._conn.settimeout(timeout)
        while b"\n" not in self._status:
            try:
                part = self._conn.recv(4096)
            except (BlockingIOError, TimeoutError, socket.timeout):
                return None
            if not part:
                raise RuntimeError("the fork server left without the child's status")
            self._status += part
        line, self._status = self._status.split(b"\n", 1)
        return line.decode()

    def _take_status(self, timeout):
        line = self._read_line(timeout)
        if line is None:
            return False
        status, cpu = line.split()
        _cpu[0] += float(cpu)
        self.returncode = os.waitstatus_to_exitcode(int(status))
        self._conn.close()
        return True

    def _internal_poll(self, _deadstate=None, **_):
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    self._take_status(0)
            except (OSError, RuntimeError):
                if _deadstate is not None:
                    self.returncode = _deadstate
            finally:
                self._waitpid_lock.release()
        return self.returncode

    def _wait(self, timeout):
        with self._waitpid_lock:
            if self.returncode is None and not self._take_status(timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


def popen(args, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args, **kwargs)``; forked for ``python -m mindexp ...``."""
    if _forkable(args, kwargs):
        return ForkPopen(args, **kwargs)
    return subprocess.Popen(args, **kwargs)


def run(args, *, input=None, capture_output=False, timeout=None, check=False, **kwargs):
    """``subprocess.run(args, ...)``; forked for ``python -m mindexp ...``."""
    if not _forkable(args, kwargs):
        return subprocess.run(args, input=input, capture_output=capture_output,
                              timeout=timeout, check=check, **kwargs)
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with ForkPopen(args, **kwargs) as proc:
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            exc.stdout, exc.stderr = proc.communicate()
            raise
        except BaseException:
            proc.kill()
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


# -- the server ------------------------------------------------------------------------

def _serve(path):
    """Accept requests and fork; returns (request, fds) in a child, never in the server."""
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: gone with the worker
    if os.getppid() == 1:
        sys.exit(1)
    import importlib
    for name in _WARM:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional extra: the children import what they need
            pass
    import gc
    gc.collect()
    gc.freeze()  # the children's collections skip what the server imported
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    sys.stdout.buffer.write(b"ready " + json.dumps(_startup_env(os.environ)).encode() + b"\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.data is None:
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, 1 << 22, 3)
                pid = os.fork()
                if pid == 0:
                    _close_server_fds(selector, conn)
                    return json.loads(message), fds
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                selector.register(os.pidfd_open(pid), selectors.EVENT_READ, (pid, conn))
            else:
                pid, conn = key.data
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status, usage = os.wait4(pid, 0)
                try:
                    conn.sendall(f"{status} {usage.ru_utime + usage.ru_stime}\n".encode())
                except OSError:
                    pass  # the client is gone
                conn.close()


def _close_server_fds(selector, conn):
    """In a child: none of the server's sockets and pidfds stay open."""
    for key in list(selector.get_map().values()):
        if key.data is None:
            key.fileobj.close()
        else:
            os.close(key.fd)
            key.data[1].close()
    selector.close()
    conn.close()


def _become(request, fds):
    """In the child: the request's stdio, cwd, environment, session and argv."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    if request["session"]:
        os.setsid()
    elif request["group"] != -1:
        os.setpgid(0, request["group"])
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # sys.path[0] and sys.argv as `python -m`, `python SCRIPT` and `python -c` have them
    if request["kind"] == "module":
        sys.path[0], sys.argv = request["cwd"], ["-m", *request["argv"]]
    elif request["kind"] == "script":
        sys.path[0], sys.argv = os.path.dirname(request["what"]), [request["what"], *request["argv"]]
    else:
        sys.path[0], sys.argv = "", ["-c", *request["argv"]]
    return request["kind"], request["what"]


def _run(kind, what):
    """In the child: the program, as the interpreter runs it (its SystemExit ends us)."""
    import runpy
    if kind == "module":
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    elif kind == "script":
        runpy.run_path(what, run_name="__main__")
    else:
        import types
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(what, "<string>", "exec"), main.__dict__)


# -- a search driver's workers, forked by the driver itself ---------------------------

class DriverForkPopen(subprocess.Popen):
    """A ``Popen`` of ``python -m mindexp _search_worker INDEX`` that forks the driver
    (a child of the server: MindSpore imported, never run) instead of starting a new
    interpreter, then becomes the worker as ``exec`` would leave it: the request's
    stdio, cwd, environment and session, the driver's ``preexec_fn`` (the worker still
    dies with its driver), no other descriptor, default signal handlers, no exit
    handler of the driver's; it exits with ``os._exit`` and never returns into the
    driver's stack. It is the driver's own child: ``Popen`` waits for it as usual."""

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread,
                       c2pwrite, errread, errwrite, restore_signals, gid, gids, uid, umask,
                       start_new_session, process_group):
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
               errwrite if errwrite != -1 else 2]
        sys.stdout.flush()
        sys.stderr.flush()  # nothing of the driver's buffered output written twice
        pid = os.fork()
        if pid == 0:
            _become_worker(args, fds, cwd, env, start_new_session, preexec_fn)
        self.pid = pid
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)


def _become_worker(args, fds, cwd, env, session, preexec_fn):
    """In the forked worker, in the order a ``Popen`` child takes its steps before
    ``exec``: never returns."""
    code = 1
    try:
        _become({"kind": "module", "what": "mindexp",
                 "argv": [os.fspath(a) for a in args[3:]], "cwd": os.path.abspath(cwd or "."),
                 "env": dict(os.environ if env is None else env),
                 "session": session, "group": -1}, fds)
        if preexec_fn is not None:
            preexec_fn()
        os.closerange(3, min(os.sysconf("SC_OPEN_MAX"), 1 << 16))  # close_fds
        for sig in signal.valid_signals():  # the handlers a new interpreter starts with
            try:
                if callable(signal.getsignal(sig)):
                    signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import atexit
        atexit._clear()
        try:
            _run("module", "mindexp")
            code = 0
        except SystemExit as exc:  # as the interpreter ends on it
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class SearchWorkers:
    """``subprocess`` as ``mindexp.search.driver`` sees it: a Popen of a search worker
    (``python -m mindexp _search_worker INDEX``) goes to ``route(args, **kwargs)``,
    which returns a forked worker's Popen, or None for a real process."""

    def __init__(self, route):
        self._route = route

    def __getattr__(self, name):
        return getattr(subprocess, name)

    def Popen(self, args, **kwargs):  # noqa: N802  (subprocess.Popen's name)
        from mindexp.search.driver import WORKER_COMMAND
        if list(args[1:4]) == ["-m", "mindexp", WORKER_COMMAND]:
            proc = self._route(args, **kwargs)
            if proc is not None:
                return proc
        return subprocess.Popen(args, **kwargs)


def _but_path(env) -> dict:
    """The startup variables of ``env`` but PYTHONPATH (a driver puts its package root
    in front of it for its workers; a forked worker has the driver's modules)."""
    return _startup_env({k: v for k, v in env.items() if k != "PYTHONPATH"})


def patch_search_driver():
    """In a forked ``python -m mindexp`` child: a search driver's workers fork from it
    (:class:`DriverForkPopen`) where a new interpreter would read the same startup
    variables; off with MINDEXP_TEST_FORK_WORKERS=0 (a test that reads a worker's
    /proc command line)."""
    if os.environ.get("MINDEXP_TEST_FORK_WORKERS", "1") == "0":
        return
    from mindexp.search import driver
    here = _but_path(os.environ)

    def fork_here(args, **kwargs):
        env = kwargs.get("env")
        return DriverForkPopen(args, **kwargs) if _but_path(env or os.environ) == here else None
    driver.subprocess = SearchWorkers(fork_here)


if __name__ == "__main__":
    _kind, _what = _become(*_serve(sys.argv[1]))
    if _kind == "module" and _what == "mindexp":
        patch_search_driver()
    _run(_kind, _what)
