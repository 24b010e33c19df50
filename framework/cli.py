"""The ``mindexp`` command line. Imports mindspore only for commands that train."""
import argparse
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
    resume = sub.add_parser("resume", help="continue a run from its latest checkpoint")
    resume.add_argument("run_dir", help="outputs/<experiment>/<run_id>")
    resume.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="change a config field, e.g. epochs=50 to train longer")
    resume.add_argument("--quiet", action="store_true", help="no progress bar")
    worker = sub.add_parser("_worker")  # what msrun runs in each worker (internal)
    worker.add_argument("run_dir")
    worker.add_argument("--resume", action="store_true")
    return parser


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1. Received: {text!r}")
    return value


def _add_config_args(p):
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="set a config field (repeatable; wins over --config)")
    p.add_argument("--config", metavar="FILE.toml", help="config values from a TOML file")
    p.add_argument("--out", default="outputs", help="output root (default: outputs/)")


def main(argv=None):
    """Entry point of the ``mindexp`` console script; returns the exit status."""
    os.environ.setdefault("GLOG_v", "3")  # MindSpore: errors only on stderr
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except MindexpError as exc:
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
    return _report(lambda: resume(args.run_dir, overrides, quiet=args.quiet))


def _train_and_report(exp, args):
    from .runner import train
    out = os.path.abspath(args.out)
    return _report(lambda: train(exp, out=out, label=args.name, quiet=args.quiet,
                                 entry=exp.entry))


def _report(start):
    from .runner import TrainingError
    try:
        run = start()
        if run is None:  # a rank other than 0 under the user's own msrun: nothing to show
            return EXIT_OK
    except TrainingError as exc:
        print(f"mindexp: training failed: {_one_line(exc)}", file=sys.stderr)
        if exc.run is not None:
            print(f"run directory: {exc.run.dir}", file=sys.stderr)
        return EXIT_FAILED
    _print_summary(run)
    return EXIT_OK if run.status == "completed" else EXIT_FAILED


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


COMMANDS = {"list": cmd_list, "run": cmd_run, "resume": cmd_resume, "_worker": cmd_worker}
