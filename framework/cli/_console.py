"""What the command line and a sweep's workers print: exit codes, one-line
errors and warnings, a finished run's summary."""
import logging
import os
import sys

from ..callbacks import schema

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
    plots = os.path.join(run.dir, schema.PLOTS_DIR)
    if os.path.isdir(plots):
        print(f"plots: {plots}")


def _eval_lines(run):
    from ..manage.show import eval_lines
    try:
        return eval_lines(run)
    except Exception as exc:  # a damaged eval.csv: the summary still ends
        logging.getLogger("mindexp").warning("no eval summary: %s", one_line(exc))
        return []
