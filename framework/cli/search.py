"""Commands that train many runs: ``sweep`` (a config grid) and ``tune`` (an Optuna
study), and ``_search_worker``, what their worker processes run. The logic is in
mindexp.search; this module parses, calls and prints."""
import argparse
import os
import sys
import time

from ..errors import ConfigError, MindexpError
from ..secrets import has_password, masked
from ._args import (add_config_args, add_mlflow, add_tag_args, mlflow_uri, non_negative_int,
                    positive_int)
from ._console import EXIT_FAILED, EXIT_OK, fmt_number


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add sweep, tune and the internal _search_worker, each bound to its handler."""
    _add_sweep_command(subparsers)
    _add_tune_command(subparsers)


def _add_sweep_command(sub):
    sweep = sub.add_parser("sweep", help="run the cartesian product of a config grid")
    sweep.add_argument("experiment", help="a shipped name or path/file.py:Class")
    sweep.add_argument("--grid", action="append", default=[], metavar="FIELD=V1,V2",
                       help="values of one config field (repeatable; needed unless --seeds)")
    sweep.add_argument("--seeds", metavar="N|S1,S2",
                       help="train every grid point with each seed: N for seeds 0..N-1, or a "
                            "list (3,7,11); recorded as the config field seed")
    add_config_args(sweep)
    sweep.add_argument("--workers", type=positive_int, metavar="N",
                       help="runs at the same time on this machine (default: the number of "
                            "CPU cores)")
    sweep.add_argument("--storage", metavar="URL_OR_FILE",
                       help="RDB URL or journal file shared by every machine running this same "
                            "command (default: a journal file in the sweep's folder)")
    sweep.add_argument("--retries", type=non_negative_int, default=0, metavar="K",
                       help="times a failed point is trained again before it is recorded "
                            "failed (default: 0; the same command again retrains failed points)")
    sweep.add_argument("--name", help="label for the sweep id and its runs' ids")
    sweep.add_argument("--resume", action="store_true",
                       help="continue the unfinished sweep of this same command (which the "
                            "command does by itself when there is one); refuse when there is none")
    add_mlflow(sweep, "each run streams to this MLflow tracking server while it trains, "
               "a child of the sweep's run")
    add_tag_args(sweep)
    sweep.set_defaults(handler=_run_sweep)


def _add_tune_command(sub):
    tune = sub.add_parser("tune", help="search config values with Optuna (extra mindexp[tune])")
    tune.add_argument("experiment", nargs="?", help="a shipped name or path/file.py:Class")
    tune.add_argument("--param", action="append", default=[], metavar="FIELD=KIND:...",
                      help="uniform:A:B, loguniform:A:B, int:A:B, int-log:A:B or choice:a,b,c")
    tune.add_argument("--trials", type=positive_int, default=20, metavar="N",
                      help="trials in the study in total (default: 20)")
    tune.add_argument("--objective", default="final_loss", metavar="COLUMN",
                      help="a column of `mindexp compare` (default: final_loss)")
    tune.add_argument("--direction", choices=("minimize", "maximize"),
                      help="default: from the objective's name (loss, error: minimize; "
                           "accuracy, f1: maximize)")
    tune.add_argument("--pruner", default="median", choices=("median", "hyperband", "none"))
    tune.add_argument("--sampler", default="tpe", choices=("tpe", "random", "grid"))
    tune.add_argument("--workers", type=positive_int, default=1, metavar="N",
                      help="trials at the same time, each in a worker process (default: 1)")
    tune.add_argument("--timeout", metavar="DURATION",
                      help="no new trial after this (90s, 10m, 2h)")
    tune.add_argument("--study", metavar="NAME", help="study name (default: the experiment's)")
    tune.add_argument("--storage", metavar="URL_OR_FILE",
                      help="RDB URL or journal file (default: <out>/studies/<study>/journal.log)")
    tune.add_argument("--seed", type=int, metavar="N", help="the sampler's seed")
    tune.add_argument("--show", action="store_true", help="print the results of --study and exit")
    add_config_args(tune)
    add_mlflow(tune, "each trial's run streams to this MLflow tracking server while it "
               "trains, a child of the study's run")
    tune.set_defaults(handler=_run_tune)
    worker = sub.add_parser("_search_worker")  # internal, see search.worker
    worker.add_argument("index", type=int)
    worker.set_defaults(handler=_serve_worker)


def _warn_typed_password(storage):
    """One line when ``--storage`` holds a password: this command's own command
    line shows it to every local user (nothing mindexp writes or prints does)."""
    if storage and has_password(storage):
        print("mindexp: warning: --storage holds a password, readable by every user of this "
              "machine in ps while the command runs; leave it out of the URL and give it in "
              "this shell's PGPASSWORD or in ~/.pgpass (docs/tune.md)", file=sys.stderr,
              flush=True)


# -- sweep ---------------------------------------------------------------------------

def _run_sweep(args: argparse.Namespace) -> int:
    _warn_typed_password(args.storage)
    mlflow = mlflow_uri(args)  # before anything is built
    from ..define.catalog import resolve_spec
    from ..define.config import load_toml, parse_assignments
    from ..search.sweeps import Sweep, check_points, parse_grid, parse_seeds, with_seeds
    if not args.grid and args.seeds is None:
        raise ConfigError("sweep needs --grid FIELD=V1,V2 (repeatable) or --seeds N, or both. "
                          "Received: neither")
    cls, entry = resolve_spec(args.experiment)
    grid, sets = parse_grid(args.grid, cls), parse_assignments(args.set)
    seeds = None if args.seeds is None else [str(s) for s in parse_seeds(args.seeds)]
    grid = with_seeds(grid, seeds, sets)   # as text, as --grid values are
    check_points(cls, grid, sets, load_toml(args.config) if args.config else {})
    spec = entry if ":" in args.experiment or args.experiment.endswith(".py") else args.experiment
    sweep = Sweep(spec, grid, sets, args.config, args.out, args.workers, args.name, entry=entry,
                  storage=args.storage, retries=args.retries, mlflow=mlflow)
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
    if args.storage:
        print(f"storage: {masked(args.storage)} (shared: the same command elsewhere joins)",
              flush=True)
    status = sweep.run(on_finish=_sweep_progress(todo))
    _print_sweep_summary(sweep)
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


def _print_sweep_summary(sweep):
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
    from ..train.figures import drawing_wanted
    if sweep.disk_error or not drawing_wanted():   # no room for plots; none wanted
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


# -- tune ----------------------------------------------------------------------------

def _run_tune(args: argparse.Namespace) -> int:
    """Run (or continue) a study, or ``--show`` one; returns the exit status."""
    from ..search.results import open_existing, save_plots
    _warn_typed_password(args.storage)
    if args.show:
        _print_study(open_existing(args.study, args.out, args.storage))
        return EXIT_OK
    if not args.experiment:
        raise ConfigError("tune needs an EXPERIMENT (or --show --study NAME). Received: none")
    from ..define.catalog import resolve_spec
    from ..define.config import load_toml, parse_assignments
    from ..search.driver import (close_mlflow_parent, finish, make_spec, open_mlflow_parent,
                                 run_workers, start, to_run)
    from ..search.study import remaining
    mlflow = mlflow_uri(args)  # before anything is built
    cls, entry = resolve_spec(args.experiment)
    base = {**(load_toml(args.config) if args.config else {}), **parse_assignments(args.set)}
    spec = make_spec(cls, entry, args.param, args.objective, args.trials, args.direction,
                     args.sampler, args.pruner, args.seed, args.timeout, args.study,
                     args.storage, base, args.out)
    study = start(spec)
    open_mlflow_parent(spec, study, mlflow)
    left = remaining(study, spec.trials)
    how = f"{spec.direction}, from its name; --direction to choose" \
        if spec.direction_inferred else spec.direction
    print(f"study {spec.study}: {spec.objective} ({how}) of {spec.experiment}, "
          f"{left} of {spec.trials} trials to run, {args.workers} worker(s)\n"
          f"storage: {masked(spec.storage)}\nfolder: {spec.study_dir}", flush=True)
    disk, signum = _DiskWatch(), None
    try:
        signum = run_workers(spec, args.workers, on_line=disk.watching(_print_trial)) \
            if to_run(study, spec) else None
    finally:
        finish(spec)
    close_mlflow_parent(spec, study, signum)
    if not disk.error:  # no room for plots
        save_plots(study, spec.study_dir)
    _print_study(study)
    return _tune_exit(study, spec, signum, disk.error)


def _tune_exit(study, spec, signum, disk_error):
    """The exit status of ``tune``, with one line on stderr when it is not 0."""
    from ..search.results import best
    from ..search.study import finished_short
    short = finished_short(study, spec.trials)
    again = "run the same command again to continue it"
    if disk_error:
        print(f"mindexp: the disk is full: {disk_error}; study {spec.study} has {short} of "
              f"{spec.trials} trials still to run; free space and {again}", file=sys.stderr)
        return EXIT_FAILED
    if signum is not None:
        print(f"mindexp: study {spec.study} interrupted; {again}", file=sys.stderr)
        return 128 + signum
    timed_out = spec.deadline is not None and time.time() >= spec.deadline
    if short and not timed_out:
        print(f"mindexp: study {spec.study} ended with {short} of {spec.trials} trials not "
              f"done (a trial whose worker died does not count); {again}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if best(study) is not None else EXIT_FAILED


class _DiskWatch:
    """Notes the first trial that failed for a full disk among the events."""

    def __init__(self):
        self.error = None

    def watching(self, on_line):
        from ..search.disk import is_full_disk

        def seen(event):
            if self.error is None and is_full_disk(event.get("error")):
                self.error = f"trial {event.get('trial')} failed: {event['error']}"
            on_line(event)
        return seen


def _print_trial(event):
    """One line per finished trial; a failed one with its reason."""
    value = "" if event.get("value") is None else f"  value {event['value']:.6g}"
    params = ", ".join(f"{k}={_fmt(v)}" for k, v in (event.get("params") or {}).items())
    reason = f": {event['error']}" if event.get("state") == "failed" and event.get("error") else ""
    print(f"trial {event['trial']}: {event['state']}{value}  ({params}){reason}", flush=True)


def _print_study(study):
    """The best trial (value, parameters, run directory) and the table of trials."""
    from ..analysis.reports import format_table
    from ..search.results import best, frame
    table = frame(study)
    found = best(study)
    print()
    if found is None:
        print(f"study {study.study_name}: no complete trial yet")
    else:
        params = ", ".join(f"{k}={_fmt(v)}" for k, v in found.params.items())
        print(f"best trial {found.number}: value {found.value:.6g}  ({params})")
        print(f"run directory: {found.user_attrs.get('run_dir')}")
    if len(table):
        shown = table.drop(columns=["run_dir", "error"])
        shown["run_id"] = [os.path.basename(d) if isinstance(d, str) else None
                           for d in table["run_dir"]]  # pandas makes a missing one NaN
        print()
        print(format_table(shown))
    folder = _plots_folder(study)
    if folder:
        print(f"plots: {folder}")


def _plots_folder(study):
    from ..search.results import PLOTS
    folder = (study.user_attrs.get("mindexp") or {}).get("study_dir")
    return folder if folder and os.path.isfile(os.path.join(folder, PLOTS[0])) else None


def _fmt(value):
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _serve_worker(args: argparse.Namespace) -> int:
    from ..search.worker import serve
    return serve(args.index)
