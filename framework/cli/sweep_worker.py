"""A sweep's worker process: grid points one after another, MindSpore imported once.

Importing MindSpore takes seconds, often longer than a small run; a worker
pays it once for all the runs it is given. :class:`mindexp.cli.sweep.Sweep`
starts it as ``python -m mindexp.cli.sweep_worker`` and writes one task per
line on its stdin, ``{"entry": "module:Class", "config": {...}, "out": dir,
"label": text, "log": path, "resume": run_dir or null}``. The worker points
file descriptors 1 and 2 at the log (so MindSpore's own C++ messages land
there too), trains the experiment through the Python API
(:func:`mindexp.api.run_experiment`, or :func:`mindexp.api.resume_run` for
an interrupted run of a continued sweep) and answers ``{"run_dir": path or
null, "status": ..., "error": ..., "returncode": N, "run_id": ...,
"final_loss": ...}`` on the stdout it started with (``returncode``: what
``mindexp run`` would have exited with). End of input ends the worker.

Every run sets its context and seeds itself (see ``train.session._set_context``),
so a run in a worker logs the same values as the same run in a fresh
process; the tests check it.
"""
import json
import os
import shutil
import sys
import traceback

from ..callbacks import schema
from ..rundir.io import is_run_dir
from ._console import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, log_to_stderr, one_line, print_summary


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
    log_to_stderr()
    for line in tasks:
        task = json.loads(line)
        with open(task["log"], "a", encoding="utf-8") as log:
            _point_output_at(log.fileno(), log.fileno())
            try:
                answer = run_task(task)
            finally:
                _point_output_at(devnull, own_stderr)
        try:
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
        except BrokenPipeError:   # the sweep is gone (killed): nobody to answer
            return 0
    return 0


def run_task(task):
    """Train one grid point in this process; returns the answer for the sweep.

    A task with ``resume`` (an interrupted run of a continued sweep) resumes
    that run in its folder from its latest checkpoint; one without a
    checkpoint is trained anew. Prints what ``mindexp run`` prints (the
    summary, or one ``mindexp:`` line for an error), so a run's log reads
    the same either way.
    """
    from ..errors import MindexpError, TrainingError
    started = {}
    try:
        run = _train(task, started)
    except MindexpError as exc:
        _drop_unrecorded(started.get("exp"))
        return _failed(f"mindexp: error: {one_line(exc)}", EXIT_BAD_INPUT)
    except TrainingError as exc:
        _say(f"mindexp: training failed: {one_line(exc)}")
        meta = exc.run.meta if getattr(exc, "run", None) is not None else {}
        return _answer(exc.run_dir, "failed", one_line(exc), EXIT_FAILED, meta)
    except KeyboardInterrupt:
        return _failed("mindexp: interrupted", 130, status="interrupted")
    except BaseException:  # noqa: BLE001  (the run's log says what it was)
        _say(traceback.format_exc())
        _drop_unrecorded(started.get("exp"))
        return _failed(traceback.format_exc().strip().splitlines()[-1], EXIT_FAILED)
    try:
        print_summary(run)
    except OSError:   # the run folder was removed (mindexp gc) since it ended, or a full disk
        _say(f"run directory: {run.dir} (removed since, or the disk is full)")
    code = EXIT_OK if run.status == "completed" else EXIT_FAILED
    return _answer(run.dir, run.status, run.meta.get("error"), code, run.meta)


def _train(task, started):
    """Resume or train the task's run; ``started["exp"]``: the experiment, for
    the folder it was given (``exp.run_dir``) when training fails."""
    from ..api import resume_run, run_experiment
    from ..callbacks import list_checkpoints
    from ..define.entry import load_experiment
    if task.get("resume") and list_checkpoints(task["resume"], "all"):
        return resume_run(task["resume"], quiet=True)
    exp = started["exp"] = load_experiment(task["entry"])(task["config"])
    exp.run_tags, exp.run_note = task.get("tags") or [], task.get("note")
    return run_experiment(exp, out=task["out"], label=task["label"], quiet=True,
                          entry=task["entry"])


def _drop_unrecorded(exp):
    """Remove the new run folder a failure left without run.json (the disk
    filled while its first files were written): no listing would ever show
    it, and nothing of the run was trained."""
    run_dir = getattr(exp, "run_dir", None)
    if run_dir and os.path.isdir(run_dir) and not is_run_dir(run_dir):
        shutil.rmtree(run_dir, ignore_errors=True)
        _say(f"mindexp: removed {run_dir}: the run failed before its {schema.RUN_JSON} was written")


def _say(text):
    """Print on the run's log; a full disk must not turn the answer into a crash."""
    try:
        print(text.rstrip("\n"), file=sys.stderr, flush=True)
    except OSError:
        pass


def _failed(message, code, status="failed"):
    _say(message)
    return _answer(None, status, message, code)


def _answer(run_dir, status, error, returncode, meta=None):
    """The answer line; ``run_id`` and ``final_loss`` from the run's record
    when there is one, so the sweep need not read the folder again."""
    answer = {"run_dir": run_dir, "status": status, "error": error, "returncode": returncode}
    if run_dir and meta:
        answer.update(run_id=meta.get("run_id"), final_loss=meta.get("final_loss"))
    return answer


def _point_output_at(out_fd, err_fd):
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)


if __name__ == "__main__":
    sys.exit(serve())
