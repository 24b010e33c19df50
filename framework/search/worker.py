"""A worker process of ``tune`` and ``sweep``: work from the storage, one item
after another, MindSpore imported once.

Started by :class:`mindexp.search.driver.Crew` as ``python -m mindexp
_search_worker INDEX``, the spec (JSON) in the environment variable
``MINDEXP_WORKER_SPEC``: it holds the storage URL, which may carry a password
that must not be on a command line. The spec is a :class:`.study.TuneSpec` (trials
of a study) or a :class:`.grid.SweepSpec` (points of a grid sweep, ``kind``
``sweep``). Each trial's or point's stdout and stderr (file descriptors 1
and 2, so MindSpore's C++ messages too) go to its log in the study's or
sweep's ``logs/``; one JSON line per event goes to the driver on the
original stdout. SIGINT/SIGTERM: the running run stops after its step
(status interrupted), nothing new is claimed, the worker exits 128 + signal.
"""
import contextlib
import json
import os

from .children import output_to
from .signals import StopFlag, handlers


def serve(index):
    """Run trials or points until none is left, or a signal; returns the exit status."""
    from .driver import SPEC_VARIABLE
    spec_json = os.environ.pop(SPEC_VARIABLE)  # not inherited by what the runs start
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # only the logs and the answer pipe get output
    stop = StopFlag()

    def report(event):
        with contextlib.suppress(BrokenPipeError):  # the driver is gone (killed): nobody to tell
            answers.write(json.dumps(event) + "\n")
            answers.flush()

    from .grid import SweepSpec, run_points
    try:
        sweep = SweepSpec.from_json(spec_json)
    except TypeError:  # a TuneSpec's fields
        sweep = None
    with handlers(stop.handler):
        if sweep is not None:
            run_points(sweep, stop, report)
        else:
            _serve_trials(spec_json, stop, report)
    return 0 if stop.signum is None else 128 + stop.signum


def _serve_trials(spec_json, stop, report):
    from ..define.entry import load_experiment
    from .study import TuneSpec, run_trials, trial_log
    spec = TuneSpec.from_json(spec_json)
    exp_cls = load_experiment(spec.entry)

    def on_trial(number, state, value, params, error):
        report({"trial": number, "state": state, "value": value, "params": params,
                "error": error})

    run_trials(spec, exp_cls, stop, on_trial=on_trial,
               log_for=lambda n: output_to(trial_log(spec, n)))
