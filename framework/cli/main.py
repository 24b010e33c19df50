"""The ``mindexp`` command line. Imports mindspore only for commands that train."""
import argparse
import os
import sys

from .. import __version__
from ..callbacks import schema
from ..errors import MindexpError
from . import mlflow
from ._console import (EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, fmt_number, log_to_stderr, one_line,
                       print_summary)


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage as one line and exit status 2."""

    def error(self, message):
        raise MindexpError(_unknown_command(message) or f"{self.prog}: {message}")


# What users of other tools type, and the command that does it here.
_SYNONYMS = {"train": "run", "fit": "run", "ls": "runs", "info": "show", "inspect": "show",
             "delete": "rm", "remove": "rm", "clean": "gc", "experiments": "list"}


def _unknown_command(message):
    """argparse's "invalid choice" for the command, without the internal commands, and
    with the closest command (``mindexp rnu`` -> Did you mean run?)."""
    import difflib
    import re
    match = re.match(r"argument COMMAND: invalid choice: '(.*?)'", message)
    if not match:
        return None
    public = [name for name in COMMANDS if not name.startswith("_")]
    close = _SYNONYMS.get(match[1]) or next(iter(
        difflib.get_close_matches(match[1], public, n=1, cutoff=0.5)), None)
    hint = f" Did you mean {close}?" if close else ""
    return (f"unknown command {match[1]!r}.{hint} Commands: {', '.join(public)}. "
            f"Received: {match[1]}")


def build_parser():
    parser = _Parser(prog="mindexp", description="Callback-driven MindSpore experiments.")
    parser.add_argument("--version", action="version", version=f"mindexp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    mlflow.register(sub)  # a command group registers itself (the CLI's layout to come)
    listing = sub.add_parser("list", help="shipped experiments; list NAME: its config fields")
    listing.add_argument("name", nargs="?", help="an experiment (a shipped name, path/file.py:Class "
                         "or module:Class, as run takes): its fields, types, defaults")
    run = sub.add_parser("run", help="train an experiment")
    run.add_argument("experiment", help="a shipped name (see `mindexp list`) or path/file.py:Class")
    _add_config_args(run)
    run.add_argument("--name", help="label that goes into the run id")
    run.add_argument("--workers", type=_positive_int, metavar="N",
                     help="data-parallel workers launched with msrun (config field `workers`)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_verbose(run)
    _add_tag_args(run)
    resume = sub.add_parser("resume", help="continue a run from its latest checkpoint")
    resume.add_argument("run_dir", help="outputs/<experiment>/<run_id>")
    resume.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="change a config field, e.g. epochs=50 to train longer")
    resume.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_verbose(resume)
    rerun = sub.add_parser("rerun", help="a new run with a run's config, from its captured code")
    rerun.add_argument("run_dir", help="outputs/<experiment>/<run_id>")
    rerun.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="change a config field of the rerun")
    rerun.add_argument("--out", help="output root (default: the original run's)")
    rerun.add_argument("--current-code", action="store_true",
                       help="use the experiment's file as it is now, not the captured copy")
    rerun.add_argument("--name", help="label that goes into the run id")
    rerun.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_verbose(rerun)
    diff = sub.add_parser("diff", help="what differs between two runs: config, code, git, "
                          "packages, outcomes")
    diff.add_argument("run_a")
    diff.add_argument("run_b")
    diff.add_argument("--json", action="store_true", help="print JSON for scripts")
    worker = sub.add_parser("_worker")  # what msrun runs in each worker (internal)
    worker.add_argument("run_dir")
    worker.add_argument("--resume", action="store_true")
    _add_report_commands(sub)
    _add_use_commands(sub)
    return parser


def _add_verbose(p):
    p.add_argument("--verbose", action="store_true",
                   help="print the full traceback when it fails "
                        f"(always kept in {schema.ERROR_FILE})")


def _add_use_commands(sub):
    ev = sub.add_parser("evaluate", help="metrics of a run's checkpoint on a split")
    ev.add_argument("run_dir", metavar="RUN")
    ev.add_argument("--checkpoint", default="last", metavar="best|last|STEP")
    ev.add_argument("--split", default="eval", choices=("eval", "train"))
    pr = sub.add_parser("predict", help="the network's outputs for an input file")
    pr.add_argument("run_dir", metavar="RUN")
    pr.add_argument("--input", required=True, metavar="X.npy|X.csv")
    pr.add_argument("--output", metavar="Y.npy", help="save the outputs (default: print as CSV)")
    pr.add_argument("--checkpoint", default="last", metavar="best|last|STEP")
    pr.add_argument("--batch-size", type=_positive_int, metavar="N",
                    help="samples per forward pass (default: the run's batch_size)")
    ex = sub.add_parser("export", help="the network as a MINDIR (or ONNX) file")
    ex.add_argument("run_dir", metavar="RUN")
    ex.add_argument("--format", default="MINDIR", metavar="MINDIR|ONNX")
    ex.add_argument("--checkpoint", default="last", metavar="best|last|STEP")
    ex.add_argument("--output", metavar="FILE", help="default: RUN/exported/<checkpoint>.mindir")
    ex.add_argument("--batch-size", type=_positive_int, metavar="N",
                    help="batch dimension of the exported input (default: the run's batch_size)")


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
                     help="write the interactive offline HTML report (needs mindexp[report])")
    _add_view_commands(sub)
    _add_manage_commands(sub)
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
    sweep.add_argument("--resume", action="store_true",
                       help="continue the unfinished sweep of this same command (which the "
                            "command does by itself when there is one); refuse when there is none")
    _add_tag_args(sweep)
    _add_tune_command(sub)


def _add_tune_command(sub):
    tune = sub.add_parser("tune", help="search config values with Optuna (extra mindexp[tune])")
    tune.add_argument("experiment", nargs="?", help="a shipped name or path/file.py:Class")
    tune.add_argument("--param", action="append", default=[], metavar="FIELD=KIND:...",
                      help="uniform:A:B, loguniform:A:B, int:A:B, int-log:A:B or choice:a,b,c")
    tune.add_argument("--trials", type=_positive_int, default=20, metavar="N",
                      help="trials in the study in total (default: 20)")
    tune.add_argument("--objective", default="final_loss", metavar="COLUMN",
                      help="a column of `mindexp compare` (default: final_loss)")
    tune.add_argument("--direction", choices=("minimize", "maximize"),
                      help="default: from the objective's name (loss, error: minimize; "
                           "accuracy, f1: maximize)")
    tune.add_argument("--pruner", default="median", choices=("median", "hyperband", "none"))
    tune.add_argument("--sampler", default="tpe", choices=("tpe", "random", "grid"))
    tune.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                      help="trials at the same time, each in a worker process (default: 1)")
    tune.add_argument("--timeout", metavar="DURATION", help="no new trial after this (90s, 10m, 2h)")
    tune.add_argument("--study", metavar="NAME", help="study name (default: the experiment's)")
    tune.add_argument("--storage", metavar="URL_OR_FILE",
                      help="RDB URL or journal file (default: <out>/studies/<study>/journal.log)")
    tune.add_argument("--seed", type=int, metavar="N", help="the sampler's seed")
    tune.add_argument("--show", action="store_true", help="print the results of --study and exit")
    _add_config_args(tune)
    sub.add_parser("_tune_worker").add_argument("task", nargs=2)  # internal, see tune.worker


def _add_view_commands(sub):
    report = sub.add_parser("report", help="write the interactive offline HTML report of runs")
    report.add_argument("paths", nargs="+", metavar="PATH", help="run directories or folders of runs")
    report.add_argument("--out", metavar="FILE",
                        help="the HTML file (default: report.html in the first folder given)")
    serve = sub.add_parser("serve", help="live local dashboard of runs (read-only)")
    serve.add_argument("paths", nargs="*", default=["outputs"], metavar="DIR",
                       help="folders of runs to serve (default: outputs/)")
    serve.add_argument("--port", type=_port, default=8765, help="TCP port; 0 picks a free one "
                       "(default: 8765)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default: 127.0.0.1, this machine only)")
    tb = sub.add_parser("tensorboard", help="write TensorBoard event files of runs "
                        "(needs mindexp[tensorboard])")
    tb.add_argument("paths", nargs="+", metavar="PATH", help="run directories or folders of runs")
    tb.add_argument("--out", metavar="DIR", help="write under DIR (default: tensorboard/ in "
                    "each run directory)")


def _port(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 65535. Received: {text!r}")
    return value


def _add_manage_commands(sub):
    runs = sub.add_parser("runs", help="list runs; filter with --status/--tag/--since/--where")
    runs.add_argument("paths", nargs="*", metavar="DIR", help="folders of runs (default: outputs/)")
    _add_filter_args(runs)
    runs.add_argument("--sort", metavar="COL", help="sort by a column; --sort=-COL: descending "
                      "(default: newest first)")
    runs.add_argument("--limit", type=_positive_int, metavar="N", help="show the first N runs")
    runs.add_argument("--wide", action="store_true", help="do not cut wide values; show notes")
    form = runs.add_mutually_exclusive_group()
    form.add_argument("--csv", action="store_true", help="every column as CSV on stdout")
    form.add_argument("--json", action="store_true", help="every column as JSON on stdout")
    show = sub.add_parser("show", help="everything about one run")
    show.add_argument("run", metavar="RUN", help="a run directory, or a run id below --out")
    show.add_argument("--out", default="outputs", help="where run ids are looked up")
    tag = sub.add_parser("tag", help="add (+TAG) and remove (-TAG) tags of a run")
    tag.add_argument("run", metavar="RUN", help="a run directory, or a run id below outputs/")
    # REMAINDER: "-x" is a tag to remove, not an option
    tag.add_argument("changes", nargs=argparse.REMAINDER, metavar="+TAG|-TAG")
    note = sub.add_parser("note", help="set the note of a run (\"\" removes it)")
    note.add_argument("run", metavar="RUN", help="a run directory, or a run id below outputs/")
    note.add_argument("text", help="the note")
    rm = sub.add_parser("rm", help="remove runs, or a sweep/study folder with its runs")
    rm.add_argument("targets", nargs="+", metavar="RUN_OR_FOLDER")
    _add_removal_args(rm)
    gc = sub.add_parser("gc", help="remove the runs that match (default: the unfinished ones)")
    gc.add_argument("paths", nargs="*", metavar="DIR", help="folders of runs (default: outputs/)")
    _add_filter_args(gc, statuses="failed,interrupted,diverged,pruned,running")
    gc.add_argument("--older", metavar="AGE|DATE", help="ended before: 7d, 12h, or a date")
    gc.add_argument("--keep-best", type=_positive_int, metavar="K",
                    help="keep the K best runs of each experiment by --by")
    gc.add_argument("--by", default="final_loss", metavar="COL",
                    help="column --keep-best ranks by (default: final_loss)")
    _add_removal_args(gc)


def _add_filter_args(p, statuses=None):
    p.add_argument("--experiment", metavar="NAME[,NAME]", help="only these experiments")
    p.add_argument("--status", default=statuses, metavar="S[,S]",
                   help="only these statuses" + (f" (default: {statuses})" if statuses else ""))
    p.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="only runs with this tag (repeatable: all of them)")
    p.add_argument("--since", metavar="AGE|DATE", help="started since: 2h, 3d, or a date")
    p.add_argument("--where", metavar="EXPR",
                   help="pandas query over config fields and outcomes, e.g. \"lr > 0.01\"")


def _add_removal_args(p):
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
    p.add_argument("--out", default="outputs", help="where run ids are looked up")


def _add_tag_args(p):
    p.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="tag the run(s) (repeatable); see mindexp tag")
    p.add_argument("--note", metavar="TEXT", help=f"a note kept in {schema.RUN_JSON}")


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
    log_to_stderr()
    args = None
    try:
        args = build_parser().parse_args(argv)
        return (COMMANDS.get(args.command) or args.handler)(args)
    except MindexpError as exc:
        if getattr(args, "verbose", False) and getattr(exc, "details", None):
            print(exc.details, file=sys.stderr, end="")
        print(f"mindexp: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("mindexp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `mindexp list | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def cmd_list(args):
    from ..manage.experiments import experiment_lines, field_lines
    print("\n".join(field_lines(args.name) if args.name else experiment_lines()))
    return EXIT_OK


def cmd_run(args):
    sets = list(args.set) + ([f"workers={args.workers}"] if args.workers else [])
    from ..manage.tags import check_tags
    tags = check_tags(args.tag)
    exp = _build_experiment(args.experiment, args.config, sets)
    exp.run_tags, exp.run_note = tags, args.note  # run.json records them at creation
    return _train_and_report(exp, args)


def cmd_worker(args):
    from ..train.launch import run_worker
    run_worker(os.path.abspath(args.run_dir), resume=args.resume)
    return EXIT_OK


def _build_experiment(spec, toml_path, sets):
    from ..define.catalog import resolve_spec
    from ..define.config import load_toml, parse_assignments
    overrides = parse_assignments(sets)
    file_values = load_toml(toml_path) if toml_path else {}
    cls, entry = resolve_spec(spec)
    exp = cls({**file_values, **overrides})  # --set wins over the file
    exp.entry = entry
    return exp


def cmd_resume(args):
    from ..api import resume_run
    from ..define.config import parse_assignments
    overrides = parse_assignments(args.set)
    return _report(lambda: resume_run(args.run_dir, overrides, quiet=args.quiet), args.verbose)


def cmd_rerun(args):
    from ..define.config import parse_assignments
    from ..manage.rerun import prepare_rerun, train_rerun
    exp, entry = prepare_rerun(args.run_dir, parse_assignments(args.set), args.current_code)
    if args.current_code and exp.rerun_of["config_set_unknown"]:
        print("mindexp: note: the run does not record which config fields were set (made "
              "before mindexp recorded it): every field keeps its value", file=sys.stderr)
    changes = exp.rerun_of["environment_differs"]
    if changes:
        print(f"mindexp: note: the environment differs from the one captured: "
              f"{'; '.join(changes)}", file=sys.stderr)
    out = os.path.abspath(args.out) if args.out else None
    return _report(lambda: train_rerun(exp, entry, out, args.name, args.quiet), args.verbose)


def cmd_diff(args):
    from ..manage.diff import diff, format_diff, to_json
    result = diff(args.run_a, args.run_b)
    print(to_json(result) if args.json else format_diff(result))
    return EXIT_OK


def _train_and_report(exp, args):
    from ..api import run_experiment
    out = os.path.abspath(args.out)
    return _report(lambda: run_experiment(exp, out=out, label=args.name, quiet=args.quiet,
                                          entry=exp.entry), args.verbose)


def _report(start, verbose=False):
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
    return exit_status_of(run.meta)  # 0, 1, or 130/143 when stopped by SIGINT/SIGTERM


def _print_failure(exc, verbose):
    """One line and the run directory; the traceback file's path (its text
    too with ``--verbose``)."""
    error_file = os.path.join(exc.run.dir, schema.ERROR_FILE) if exc.run is not None else None
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


def cmd_compare(args):
    from ..analysis.reports import compare, display_table, format_table, load_runs
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
        from ..analysis.reports import export_table
        files[_writable(args.csv)] = export_table(table).to_csv(index=False)
    if args.html:
        title = "mindexp comparison: " + ", ".join(args.paths)
        files[_writable(args.html)] = _interactive_report(runs, title, args.html)
    return files


def _interactive_report(runs, title, out_path):
    from ..analysis.interactive import MissingExtraError, render_report
    try:
        return render_report(runs, title, skipped=runs.errors, out_path=out_path)
    except MissingExtraError as exc:
        raise MindexpError(str(exc)) from None


def cmd_report(args):
    from ..analysis.reports import load_runs
    runs = load_runs(args.paths)
    out = args.out or os.path.join(_folder_of(args.paths[0]), "report.html")
    text = _interactive_report(runs, "mindexp report: " + ", ".join(args.paths), _writable(out))
    _write_atomically(out, text)
    print(f"wrote {out} ({len(runs)} runs)")
    return EXIT_OK


def _folder_of(path):
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def cmd_serve(args):
    """Serve until Ctrl-C or SIGTERM, then end the process at once: it never
    returns (bad input raises MindexpError before serving)."""
    from ..analysis.dashboard import exposure_warning, make_server, serve_until_stopped, url_of
    server = make_server(args.paths, host=args.host, port=args.port)
    warning = exposure_warning(server)
    if warning:
        print(f"mindexp: {warning}", file=sys.stderr, flush=True)
    serve_until_stopped(server, ready=lambda: print(
        f"mindexp dashboard of {', '.join(args.paths)} at {url_of(server)} (Ctrl-C to stop)",
        flush=True))
    print("mindexp: dashboard stopped", flush=True)
    # The socket is closed. Request threads may still be loading a poll or feeding a
    # slow client, and pyarrow's CSV reader threads can hang the interpreter's exit
    # (apache/arrow#33975): nothing is left to write, so end here.
    sys.stderr.flush()
    os._exit(EXIT_OK)


def cmd_tensorboard(args):
    from ..analysis.tensorboard_export import export
    from ..analysis.reports import load_runs
    runs = load_runs(args.paths)
    for run, folder in export(runs, out=args.out):
        print(f"{run.run_id}: {folder}")
    shown = args.out or " ".join(args.paths)
    print(f"view with: tensorboard --logdir {shown}")
    return EXIT_OK


def _writable(path):
    """``path`` as given, once known to be writable (the message says "the report")."""
    from ..use._model import check_writable
    check_writable(path, what="the report", option=None)
    return path


def _write_atomically(path, text):
    try:
        schema.atomic_write(path, text)
    except OSError as exc:
        raise MindexpError(f"cannot write {path}: {exc.strerror}") from None


def cmd_plot(args):
    from ..analysis.plots import save_overlay_plots, save_run_plots
    from ..analysis.reports import load_runs
    runs = load_runs(args.paths)
    written = []
    try:
        for run in runs:
            found = save_run_plots(run, os.path.join(args.out, run.run_id) if args.out else None)
            if not found:
                print(f"mindexp: warning: {run.dir} has no loss rows yet; no plots", file=sys.stderr)
            written += found
        if len(runs) > 1:
            common = os.path.join(os.path.commonpath([r.dir for r in runs]), schema.PLOTS_DIR)
            written += save_overlay_plots(runs, args.out or common)
    except OSError as exc:
        raise MindexpError(f"cannot write the plots: {exc.strerror}: {exc.filename}") from None
    print("\n".join(written))
    return EXIT_OK


def cmd_sweep(args):
    from ..define.catalog import resolve_spec
    from ..define.config import load_toml, parse_assignments
    from .sweep import Sweep, check_points, parse_grid
    cls, entry = resolve_spec(args.experiment)
    grid, sets = parse_grid(args.grid, cls), parse_assignments(args.set)
    check_points(cls, grid, sets, load_toml(args.config) if args.config else {})
    spec = entry if ":" in args.experiment or args.experiment.endswith(".py") else args.experiment
    sweep = Sweep(spec, grid, sets, args.config, args.out, args.workers, args.name, entry=entry)
    from ..manage.tags import check_tags
    sweep.tags, sweep.note = check_tags(args.tag), args.note
    folder = sweep.start(cls.experiment_name(), resume=True if args.resume else "auto")
    todo = len(sweep.todo())
    if sweep.continued:
        print(f"sweep {sweep.sweep_id}: continuing it, {todo} of {len(sweep.runs)} runs to "
              f"train ({len(sweep.runs) - todo} done), {sweep.workers} at a time; sweep.json in "
              f"{folder}", flush=True)
    else:
        print(f"sweep {sweep.sweep_id}: {len(sweep.runs)} runs of {cls.experiment_name()}, "
              f"{sweep.workers} at a time; sweep.json in {folder}", flush=True)
    status = sweep.run(on_finish=_sweep_progress(todo))
    _sweep_summary(sweep)
    return _sweep_exit(sweep, status)


def _sweep_progress(total):
    done = []

    def report(run):
        done.append(run)
        loss = f"  final loss {fmt_number(run.final_loss)}" if run.final_loss is not None else ""
        print(f"[{len(done)}/{total}] {_values_text(run.values)}: {run.status}{loss}"
              f"  ({run.run_id or 'no run directory'})", flush=True)
    return report


def _values_text(values):
    return ", ".join(f"{k}={v}" for k, v in values.items())


def _sweep_summary(sweep):
    from ..analysis.reports import compare, display_table, format_table, load_runs
    if not sweep.run_dirs():
        return
    try:
        runs = load_runs(sweep.run_dirs())
    except MindexpError as exc:  # every run removed meanwhile (mindexp gc): no table
        print(f"mindexp: warning: no table of the sweep's runs: {exc}", file=sys.stderr)
        return
    print()
    print(format_table(display_table(compare(runs))))
    if sweep.disk_error:   # no room for plots
        return
    try:
        from ..analysis.plots import save_overlay_plots
        plots = save_overlay_plots(runs, sweep.dir)
        print(f"plots: {', '.join(plots)}")
    except Exception as exc:  # the table is the answer; plots are a convenience
        print(f"mindexp: warning: could not draw the sweep's plots: {exc}", file=sys.stderr)


def _sweep_exit(sweep, status):
    failures = sweep.failures()
    if sweep.disk_error:   # one line: listing every run would only repeat the cause
        where = f"sweep.json in {sweep.dir}" if sweep.record_error is None else \
            "sweep.json is not current" if sweep.record_error == sweep.disk_error else \
            f"sweep.json is not current: {sweep.record_error}"
        not_started = sum(r.status == "not started" for r in failures)
        print(f"mindexp: {sweep.disk_error}; {len(failures) - not_started} of "
              f"{len(sweep.runs)} runs did not complete, {not_started} not started ({where}); "
              "free space and run the same command again to continue", file=sys.stderr)
        return EXIT_FAILED
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
        from ..train.failures import exit_status
        return exit_status(sweep.signum or 2)  # 130 for SIGINT, 143 for SIGTERM
    return EXIT_FAILED


def cmd_tune(args):
    from ..search.cli import run_tune
    return run_tune(args)


def cmd_tune_worker(args):
    from ..search.worker import serve
    return serve(args.task[0], int(args.task[1]))


# -- many runs (the logic is in mindexp.manage) -------------------------------------

def cmd_runs(args):
    from ..manage import runs as r
    filters = r.Filters(args.experiment, args.status, args.tag, args.since, where=args.where)
    table = r.order(r.select(r.runs_table(args.paths or ["outputs"]), filters), args.sort,
                    args.limit)
    if args.csv or args.json:
        print(table.to_csv(index=False) if args.csv else
              table.to_json(orient="records", indent=1), end="" if args.csv else "\n")
        return EXIT_OK
    extra = r.named_columns(table, args.where, (args.sort or "").lstrip("-"))
    shown = r.display(table, extra, wide=args.wide)
    print(r.format_fitted(shown, width=None if args.wide else 100) if len(table)
          else "no runs match")
    return EXIT_OK


def cmd_show(args):
    from ..manage.show import find_run, show_text
    print(show_text(find_run(args.run, args.out)), end="")
    return EXIT_OK


def cmd_tag(args):
    from ..manage.show import find_run
    from ..manage.tags import change_tags, parse_changes
    add, remove = parse_changes(args.changes)
    run = find_run(args.run)
    tags = change_tags(run.dir, add, remove)
    print(f"{run.run_id}: tags {', '.join(tags) or '(none)'}")
    return EXIT_OK


def cmd_note(args):
    from ..manage.show import find_run
    from ..manage.tags import set_note
    run = find_run(args.run)
    note = set_note(run.dir, args.text)
    print(f"{run.run_id}: note {note!r}" if note else f"{run.run_id}: note removed")
    return EXIT_OK


def cmd_rm(args):
    from ..manage.cleanup import plan_rm
    return _remove(plan_rm(args.targets, args.out), args)


def cmd_gc(args):
    from ..manage import runs as r
    from ..manage.cleanup import plan_gc, remove_leftovers
    filters = r.Filters(args.experiment, args.status, args.tag, args.since, args.older,
                        args.where)
    table = r.select(r.runs_table(args.paths or ["outputs"]), filters)
    if args.keep_best and args.by not in table.columns:
        table = r.with_log_columns(table)
    targets, kept = plan_gc(table, args.keep_best, args.by)
    for target, holder in kept:
        print(f"kept {target.path}: it is live ({holder} holds it)", file=sys.stderr)
    code = _remove(targets, args)
    left = remove_leftovers(args.paths or ["outputs"], dry_run=args.dry_run)
    if left:
        print(f"{'would remove' if args.dry_run else 'removed'} {len(left)} temporary "
              f"file(s) left by a killed writer")
    return code


def _remove(targets, args):
    from ..manage.cleanup import describe, remove
    if not targets:
        print("nothing to remove")
        return EXIT_OK
    lines, total = describe(targets)
    print("\n".join(lines))
    if args.dry_run:
        print(f"dry run: would remove {total}; nothing removed")
        return EXIT_OK
    if not args.yes and not _confirmed(f"remove {total}?"):
        print("nothing removed")
        return EXIT_OK
    removed = remove(targets)
    print(f"removed {total}" if len(removed) == len(targets) else
          f"removed {len(removed)} of {len(targets)} (the others were gone already)")
    return EXIT_OK


def _confirmed(question):
    if sys.stdin is None or not sys.stdin.isatty():
        raise MindexpError(f"{question[:-1]} needs a confirmation, and standard input is not a "
                           "terminal; pass --yes to remove without asking. Nothing was removed.")
    print(f"{question} [y/N] ", end="", flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_evaluate(args):
    from ..use import evaluate
    row = evaluate(args.run_dir, _checkpoint_arg(args), split=args.split)
    print(f"{row['checkpoint']} (step {row['step']}, epoch {row['epoch']}) on {row['split']}:")
    for name, value in list(row.items())[5:]:
        print(f"  {name} = {value:.6g}")
    print(f"appended to {os.path.join(os.path.abspath(args.run_dir), schema.EVALUATIONS_CSV)}")
    return EXIT_OK


def cmd_predict(args):
    import numpy as np
    from ..use import predict
    from ..use.predict import save_outputs
    from ..use._model import check_writable
    output = check_writable(args.output) if args.output else None
    y = predict(args.run_dir, args.input, _checkpoint_arg(args), batch_size=args.batch_size)
    if output is None:
        np.savetxt(sys.stdout, y.reshape(len(y), -1), delimiter=",", fmt="%.8g")
        return EXIT_OK
    save_outputs(output, y)
    print(f"wrote {output}: outputs of shape {y.shape}")
    return EXIT_OK


def cmd_export(args):
    from ..use import export
    path = export(args.run_dir, args.format, _checkpoint_arg(args), output=args.output,
                  batch_size=args.batch_size)
    print(f"wrote {path}")
    return EXIT_OK


def _checkpoint_arg(args):
    from ..rundir.checkpoints import parse_checkpoint
    return parse_checkpoint(args.checkpoint)


COMMANDS = {"evaluate": cmd_evaluate, "predict": cmd_predict, "export": cmd_export,
            "list": cmd_list, "run": cmd_run, "resume": cmd_resume, "_worker": cmd_worker,
            "compare": cmd_compare, "report": cmd_report, "serve": cmd_serve,
            "tensorboard": cmd_tensorboard, "plot": cmd_plot, "sweep": cmd_sweep,
            "tune": cmd_tune, "_tune_worker": cmd_tune_worker,
            "runs": cmd_runs, "show": cmd_show, "tag": cmd_tag, "note": cmd_note,
            "rm": cmd_rm, "gc": cmd_gc, "rerun": cmd_rerun, "diff": cmd_diff}
