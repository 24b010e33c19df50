"""A tuning worker process: trials of one study, one after another, MindSpore imported once.

Started by :func:`mindexp.search.driver.run_workers` as ``python -m mindexp
_tune_worker SPEC_JSON INDEX``. Each trial's stdout and stderr (file
descriptors 1 and 2, so MindSpore's C++ messages too) go to
``<study>/logs/trial-<n>.log``; a JSON line per finished trial goes to the
driver on the original stdout.
"""
import contextlib
import json
import os
import signal
import sys

from .study import StopFlag, TuneSpec, run_trials, trial_log


def serve(spec_json, index):
    """Run trials until the study's budget, its deadline or a signal; exit status."""
    from ..define.entry import load_experiment
    spec = TuneSpec.from_json(spec_json)
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # only trial logs and the answer pipe get output
    stop = StopFlag()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop.handler)
    exp_cls = load_experiment(spec.entry)

    def report(number, state, value, params, error):
        answers.write(json.dumps({"trial": number, "state": state, "value": value,
                                  "params": params, "error": error}) + "\n")
        answers.flush()

    run_trials(spec, exp_cls, stop, on_trial=report,
               log_for=lambda n: _output_to(trial_log(spec, n)))
    return 0 if stop.signum is None else 128 + stop.signum


@contextlib.contextmanager
def _output_to(path):
    saved = os.dup(1), os.dup(2)
    with open(path, "a", encoding="utf-8") as log:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
