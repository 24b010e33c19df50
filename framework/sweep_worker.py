"""A sweep's worker process: grid points one after another, MindSpore imported once.

Importing MindSpore takes seconds, often longer than a small run; a worker
pays it once for all the runs it is given. :class:`mindexp.sweep.Sweep`
writes one task per line on the worker's stdin, ``{"argv": [...], "log":
path}``: the arguments of ``mindexp`` (a ``run`` command) and the file its
output goes to. The worker points file descriptors 1 and 2 at that file
(so MindSpore's own C++ messages land there too), runs the command line
in-process and answers ``{"returncode": N}`` on the stdout it started with.
End of input ends the worker.

Every run sets its context and seeds itself (see ``runner._set_context``),
so a run in a worker logs the same values as the same run in a fresh
process; the tests check it.
"""
import json
import os
import sys
import traceback


def serve():
    """Answer tasks from stdin until it closes; returns the exit status."""
    tasks = os.fdopen(os.dup(0), "r", encoding="utf-8")
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    own_stderr = os.dup(2)
    devnull = os.open(os.devnull, os.O_RDWR)
    # Between tasks nothing may write on the answer pipe or read the task
    # pipe, and msrun children of a run must not inherit either.
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    for line in tasks:
        task = json.loads(line)
        code = _run_task(task["argv"], task["log"], devnull, own_stderr)
        answers.write(json.dumps({"returncode": code}) + "\n")
        answers.flush()
    return 0


def _run_task(argv, log_path, devnull, own_stderr):
    """``mindexp argv`` in this process, its output in ``log_path``."""
    from .cli import main
    with open(log_path, "a", encoding="utf-8") as log:
        _point_output_at(log.fileno(), log.fileno())
        try:
            return main(argv)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001  (the run's log says what it was)
            traceback.print_exc()
            return 1
        finally:
            _point_output_at(devnull, own_stderr)


def _point_output_at(out_fd, err_fd):
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
