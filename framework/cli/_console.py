"""What the command line and a sweep's workers print: exit codes, one-line
errors and warnings, a finished run's summary."""
import logging
import os
import sys
from typing import Any, Callable

from .. import layout

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def one_line(exc):
    """An error message on one line."""
    return " ".join(str(exc).split())


def fmt_number(value):
    return "n/a" if value is None else f"{value:.6g}"


class _StderrHandler(logging.Handler):
    """``mindexp: warning: ...`` on whatever sys.stderr is at the time."""

    def emit(self, record):
        try:
            print(f"mindexp: {record.levelname.lower()}: {one_line(record.getMessage())}",
                  file=sys.stderr)
        except Exception:
            self.handleError(record)


def log_to_stderr():
    """Library warnings (a skipped broken run, a plot not drawn) go to stderr as one line."""
    logger = logging.getLogger("mindexp")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())


def print_summary(run):
    """Where a finished run is, its status and final loss, why it stopped
    early, each eval metric (last and best, with their epochs) and the
    parameters the experiment declares targets for."""
    meta = run.meta
    print(f"run directory: {run.dir}")
    print(f"status: {meta['status']}  steps: {meta['steps']}  "
          f"final loss: {fmt_number(meta['final_loss'])}"
          f"  ({meta.get('steps_per_s') or 0:.0f} steps/s)")
    if meta.get("stop_reason"):
        print(f"  {meta['stop_reason']}")
    for line in _eval_lines(run):
        print(line)
    params, targets = meta.get("params") or {}, meta.get("targets") or {}
    for name, target in targets.items():
        if isinstance(params.get(name), (int, float)):
            print(f"  {name} = {params[name]:.6f}  (target {target:g})")
    if meta.get("error"):
        print(f"  {meta['error']}")
    print(f"logs: {', '.join(sorted(f for f in os.listdir(run.dir) if f.endswith('.csv')))}")
    plots = os.path.join(run.dir, layout.PLOTS_DIR)
    if os.path.isdir(plots):
        print(f"plots: {plots}")


def _eval_lines(run):
    from ..manage.show import eval_lines
    try:
        return eval_lines(run)
    except Exception as exc:  # a damaged eval.csv: the summary still ends
        logging.getLogger("mindexp").warning("no eval summary: %s", one_line(exc))
        return []


def train_and_report(start: Callable[[], Any], verbose: bool = False) -> int:
    """Train with ``start()`` and print the run's summary, or its failure as one
    line; the exit status (0, 1, or 130/143 when stopped by SIGINT/SIGTERM)."""
    from ..errors import TrainingError
    from ..train.failures import exit_status_of
    try:
        run = start()
        if run is None:  # a rank other than 0 under the user's own msrun: nothing to show
            return EXIT_OK
    except TrainingError as exc:
        _print_failure(exc, verbose)
        return EXIT_FAILED
    print_summary(run)
    return exit_status_of(run.meta)


def _print_failure(exc, verbose):
    """One line and the run directory; the traceback file's path (its text
    too with ``--verbose``)."""
    error_file = os.path.join(exc.run.dir, layout.ERROR_FILE) if exc.run is not None else None
    if not (error_file and os.path.isfile(error_file)):
        error_file = None
    if verbose and error_file:
        with open(error_file, encoding="utf-8") as f:
            print(f.read(), file=sys.stderr, end="")
    print(f"mindexp: training failed: {one_line(exc)}", file=sys.stderr)
    if exc.run is not None:
        print(f"run directory: {exc.run.dir}", file=sys.stderr)
    if error_file:
        print(f"traceback: {error_file}", file=sys.stderr)
