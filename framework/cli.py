"""The ``mindexp`` command line. Imports mindspore only for commands that train."""
import argparse
import logging
import os
import sys

from .errors import MindexpError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage as one line and exit status 2."""

    def error(self, message):
        raise MindexpError(f"{self.prog}: {message}")


def build_parser():
    parser = _Parser(prog="mindexp", description="Callback-driven MindSpore experiments.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    sub.add_parser("list", help="shipped experiments and their config fields")
    run = sub.add_parser("run", help="train an experiment")
    run.add_argument("experiment", help="a shipped name (see `mindexp list`) or path/file.py:Class")
    _add_config_args(run)
    run.add_argument("--name", help="label that goes into the run id")
    run.add_argument("--workers", type=_positive_int, metavar="N",
                     help="data-parallel workers launched with msrun (config field `workers`)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_verbose(run)
    resume = sub.add_parser("resume", help="continue a run from its latest checkpoint")
    resume.add_argument("run_dir", help="outputs/<experiment>/<run_id>")
    resume.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="change a config field, e.g. epochs=50 to train longer")
    resume.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_verbose(resume)
    worker = sub.add_parser("_worker")  # what msrun runs in each worker (internal)
    worker.add_argument("run_dir")
    worker.add_argument("--resume", action="store_true")
    sub.add_parser("_sweep_worker")  # a sweep's worker process (internal, see sweep_worker)
    _add_report_commands(sub)
    return parser


def _add_verbose(p):
    p.add_argument("--verbose", action="store_true",
                   help="print the full traceback when it fails (always kept in error.txt)")


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1. Received: {text!r}")
    return value


def _add_report_commands(sub):
    cmp = sub.add_parser("compare", help="compare runs as a table; --csv/--html to save it")
    cmp.add_argument("paths", nargs="+", metavar="PATH", help="run directories or folders of runs")
    cmp.add_argument("--sort", default="final_loss", metavar="COL",
                     help="column to sort by; --sort=-COL for descending (default: final_loss)")
    cmp.add_argument("--csv", metavar="FILE", help="write the full table as CSV")
    cmp.add_argument("--html", metavar="FILE",
                     help="write one self-contained HTML report (table, statuses, plots)")
    runs = sub.add_parser("runs", help="list runs: status, age, steps, final loss")
    runs.add_argument("path", nargs="?", default="outputs", help="folder of runs (default: outputs/)")
    plot = sub.add_parser("plot", help="draw the plots of runs (and overlays of several)")
    plot.add_argument("paths", nargs="+", metavar="RUN_OR_FOLDER")
    plot.add_argument("--out", metavar="DIR", help="write here instead of each run's plots/ "
                      "(default for overlays: plots/ in the runs' common folder)")
    sweep = sub.add_parser("sweep", help="run the cartesian product of a config grid")
    sweep.add_argument("experiment", help="a shipped name or path/file.py:Class")
    sweep.add_argument("--grid", action="append", required=True, metavar="FIELD=V1,V2",
                       help="values of one config field (repeatable)")
    _add_config_args(sweep)
    sweep.add_argument("--workers", type=_positive_int, metavar="N",
                       help="runs at the same time (default: the number of CPU cores)")
    sweep.add_argument("--name", help="label for the sweep id and its runs' ids")


def _add_config_args(p):
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="set a config field (repeatable; wins over --config)")
    p.add_argument("--config", metavar="FILE.toml", help="config values from a TOML file")
    p.add_argument("--out", default="outputs", help="output root (default: outputs/)")


def main(argv=None):
    """Entry point of the ``mindexp`` console script; returns the exit status."""
    # MindSpore's C++ log: nothing on stderr. Its errors reach us as exceptions,
    # whose full text goes to the run's error.txt; the terminal gets one line.
    os.environ.setdefault("GLOG_v", "4")
    _log_to_stderr()
    args = None
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except MindexpError as exc:
        if getattr(args, "verbose", False) and getattr(exc, "details", None):
            print(exc.details, file=sys.stderr, end="")
        print(f"mindexp: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("mindexp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `mindexp list | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _one_line(exc):
    return " ".join(str(exc).split())


class _StderrHandler(logging.Handler):
    """``mindexp: warning: ...`` on whatever sys.stderr is at the time."""

    def emit(self, record):
        try:
            print(f"mindexp: {record.levelname.lower()}: {_one_line(record.getMessage())}",
                  file=sys.stderr)
        except Exception:
            self.handleError(record)


def _log_to_stderr():
    """Library warnings (a skipped broken run, a plot not drawn) go to stderr as one line."""
    logger = logging.getLogger("mindexp")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())


def cmd_list(args):
    from .catalog import shipped
    from .config import choices
    for info in shipped():
        print(f"{info.name}: {info.doc}")
        for name, type_, default in info.fields:
            options = f"  ({', '.join(choices(name))})" if choices(name) else ""
            print(f"    {name:<22} {type_:<16} = {default}{options}")
        print()
    return EXIT_OK


def cmd_run(args):
    sets = list(args.set) + ([f"workers={args.workers}"] if args.workers else [])
    exp = _build_experiment(args.experiment, args.config, sets)
    return _train_and_report(exp, args)


def cmd_worker(args):
    from .runner import run_worker
    run_worker(os.path.abspath(args.run_dir), resume=args.resume)
    return EXIT_OK


def _build_experiment(spec, toml_path, sets):
    from .catalog import resolve_spec
    from .config import load_toml, parse_assignments
    overrides = parse_assignments(sets)
    file_values = load_toml(toml_path) if toml_path else {}
    cls, entry = resolve_spec(spec)
    exp = cls({**file_values, **overrides})  # --set wins over the file
    exp.entry = entry
    return exp


def cmd_resume(args):
    from .config import parse_assignments
    from .resume import resume
    overrides = parse_assignments(args.set)
    return _report(lambda: resume(args.run_dir, overrides, quiet=args.quiet), args.verbose)


def _train_and_report(exp, args):
    from .runner import train
    out = os.path.abspath(args.out)
    return _report(lambda: train(exp, out=out, label=args.name, quiet=args.quiet,
                                 entry=exp.entry), args.verbose)


def _report(start, verbose=False):
    from .failures import exit_status_of
    from .runner import TrainingError
    try:
        run = start()
        if run is None:  # a rank other than 0 under the user's own msrun: nothing to show
            return EXIT_OK
    except TrainingError as exc:
        _print_failure(exc, verbose)
        return EXIT_FAILED
    _print_summary(run)
    return exit_status_of(run.meta)


def _print_failure(exc, verbose):
    from .failures import ERROR_FILE
    error_file = os.path.join(exc.run.dir, ERROR_FILE) if exc.run is not None else None
    if verbose and error_file and os.path.isfile(error_file):
        with open(error_file, encoding="utf-8") as f:
            print(f.read(), file=sys.stderr, end="")
    print(f"mindexp: training failed: {_one_line(exc)}", file=sys.stderr)
    if exc.run is not None:
        print(f"run directory: {exc.run.dir}", file=sys.stderr)
        if error_file and os.path.isfile(error_file):
            print(f"traceback: {error_file}", file=sys.stderr)


def _print_summary(run):
    meta = run.meta
    print(f"run directory: {run.dir}")
    print(f"status: {meta['status']}  steps: {meta['steps']}  final loss: {_fmt(meta['final_loss'])}"
          f"  ({meta.get('steps_per_s') or 0:.0f} steps/s)")
    targets = meta.get("targets") or {}
    for name, value in (meta.get("params") or {}).items():
        target = f"  (target {targets[name]:g})" if name in targets else ""
        print(f"  {name} = {value:.6f}{target}")
    if meta.get("error"):
        print(f"  {meta['error']}")
    print(f"logs: {', '.join(sorted(f for f in os.listdir(run.dir) if f.endswith('.csv')))}")
    plots = os.path.join(run.dir, "plots")
    if os.path.isdir(plots):
        print(f"plots: {plots}")


def _fmt(value):
    return "n/a" if value is None else f"{value:.6g}"


def cmd_compare(args):
    from .reports import compare, display_table, format_table, load_runs
    runs = load_runs(args.paths)
    table = compare(runs, sort=args.sort)
    files = _report_files(table, runs, args)  # all made before any is written
    print(format_table(display_table(table)))
    for path, text in files.items():
        _write_atomically(path, text)
        print(f"wrote {path}")
    return EXIT_OK


def _report_files(table, runs, args):
    files = {}
    if args.csv:
        from .reports import export_table
        files[_writable(args.csv)] = export_table(table).to_csv(index=False)
    if args.html:
        from .htmlreport import render_html
        title = "mindexp comparison: " + ", ".join(args.paths)
        files[_writable(args.html)] = render_html(table, runs, title, skipped=runs.errors)
    return files


def _writable(path):
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        why = "it is a folder" if os.path.isdir(path) else f"{folder} is not a writable folder"
        raise MindexpError(f"cannot write the report to {path}: {why}. Received: {path!r}")
    return path


def _write_atomically(path, text):
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise MindexpError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def cmd_runs(args):
    import pandas as pd
    from .reports import format_age, format_table, list_runs
    table = list_runs(args.path)
    shown = pd.DataFrame({"run_id": table["run_id"], "experiment": table["experiment"],
                          "status": table["status"], "age": table["age_s"].map(format_age),
                          "steps": table["steps"],
                          "final_loss": pd.to_numeric(table["final_loss"], errors="coerce")})
    print(format_table(shown))
    return EXIT_OK


def cmd_plot(args):
    from .plots import save_overlay_plots, save_run_plots
    from .reports import load_runs
    runs = load_runs(args.paths)
    written = []
    try:
        for run in runs:
            found = save_run_plots(run, os.path.join(args.out, run.run_id) if args.out else None)
            if not found:
                print(f"mindexp: warning: {run.dir} has no loss rows yet; no plots", file=sys.stderr)
            written += found
        if len(runs) > 1:
            common = os.path.join(os.path.commonpath([r.dir for r in runs]), "plots")
            written += save_overlay_plots(runs, args.out or common)
    except OSError as exc:
        raise MindexpError(f"cannot write the plots: {exc.strerror}: {exc.filename}") from None
    print("\n".join(written))
    return EXIT_OK


def cmd_sweep(args):
    from .catalog import resolve_spec
    from .config import load_toml, parse_assignments
    from .sweep import Sweep, check_points, parse_grid
    cls, entry = resolve_spec(args.experiment)
    grid, sets = parse_grid(args.grid, cls), parse_assignments(args.set)
    check_points(cls, grid, sets, load_toml(args.config) if args.config else {})
    spec = entry if ":" in args.experiment or args.experiment.endswith(".py") else args.experiment
    sweep = Sweep(spec, grid, sets, args.config, args.out, args.workers, args.name)
    folder = sweep.start(cls.experiment_name())
    print(f"sweep {sweep.sweep_id}: {len(sweep.runs)} runs of {cls.experiment_name()}, "
          f"{sweep.workers} at a time; sweep.json in {folder}", flush=True)
    status = sweep.run(on_finish=_sweep_progress(len(sweep.runs)))
    _sweep_summary(sweep)
    return _sweep_exit(sweep, status)


def _sweep_progress(total):
    done = []

    def report(run):
        done.append(run)
        loss = f"  final loss {_fmt(run.final_loss)}" if run.final_loss is not None else ""
        print(f"[{len(done)}/{total}] {_values_text(run.values)}: {run.status}{loss}"
              f"  ({run.run_id or 'no run directory'})", flush=True)
    return report


def _values_text(values):
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _sweep_summary(sweep):
    from .reports import compare, display_table, format_table, load_runs
    if not sweep.run_dirs():
        return
    runs = load_runs(sweep.run_dirs())
    print()
    print(format_table(display_table(compare(runs))))
    try:
        from .plots import save_overlay_plots
        plots = save_overlay_plots(runs, sweep.dir)
        print(f"plots: {', '.join(plots)}")
    except Exception as exc:  # the table is the answer; plots are a convenience
        print(f"mindexp: warning: could not draw the sweep's plots: {exc}", file=sys.stderr)


def _sweep_exit(sweep, status):
    failures = sweep.failures()
    if not failures:
        return EXIT_OK
    what = "sweep interrupted; " if status == "interrupted" else ""
    print(f"mindexp: {what}{len(failures)} of {len(sweep.runs)} runs did not complete:",
          file=sys.stderr)
    for run in failures:
        where = f"run directory: {run.run_dir}" if run.run_dir else f"log: {run.log_path}"
        print(f"  {_values_text(run.values)}: {run.status}: {run.error}"
              + (f" ({where})" if run.log_path else ""), file=sys.stderr)
    if status == "interrupted":
        from .failures import exit_status
        return exit_status(sweep.signum or 2)  # 130 for SIGINT, 143 for SIGTERM
    return EXIT_FAILED


def cmd_sweep_worker(args):
    from .sweep_worker import serve
    return serve()


COMMANDS = {"list": cmd_list, "run": cmd_run, "resume": cmd_resume, "_worker": cmd_worker,
            "_sweep_worker": cmd_sweep_worker,
            "compare": cmd_compare, "runs": cmd_runs, "plot": cmd_plot, "sweep": cmd_sweep}
