"""Commands that train: ``list`` (what can run), ``run``, ``resume`` (and ``_worker``,
what msrun starts in each worker). Imports mindspore only when training."""
import argparse
import os

from ._args import add_config_args, add_mlflow, add_tag_args, add_verbose, mlflow_uri, positive_int
from ._console import EXIT_OK, train_and_report


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add list, run, resume and the internal _worker, each bound to its handler."""
    listing = subparsers.add_parser("list",
                                    help="shipped experiments; list NAME: its config fields")
    listing.add_argument("name", nargs="?", help="an experiment (a shipped name, "
                         "path/file.py:Class or module:Class, as run takes): its fields, types, "
                         "defaults")
    listing.set_defaults(handler=_list_experiments)
    run = subparsers.add_parser("run", help="train an experiment")
    run.add_argument("experiment", help="a shipped name (see `mindexp list`) or path/file.py:Class")
    add_config_args(run)
    run.add_argument("--name", help="label that goes into the run id")
    run.add_argument("--workers", type=positive_int, metavar="N",
                     help="data-parallel workers launched with msrun (config field `workers`)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    add_mlflow(run)
    add_verbose(run)
    add_tag_args(run)
    run.set_defaults(handler=_train_experiment)
    resume = subparsers.add_parser("resume", help="continue a run from its latest checkpoint")
    resume.add_argument("run_dir", help="outputs/<experiment>/<run_id>")
    resume.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="change a config field, e.g. epochs=50 to train longer")
    resume.add_argument("--quiet", action="store_true", help="no progress bar")
    add_mlflow(resume)
    add_verbose(resume)
    resume.set_defaults(handler=_resume_run)
    worker = subparsers.add_parser("_worker")  # what msrun runs in each worker (internal)
    worker.add_argument("run_dir")
    worker.add_argument("--resume", action="store_true")
    worker.set_defaults(handler=_start_worker)


def _list_experiments(args: argparse.Namespace) -> int:
    from ..manage.experiments import experiment_lines, field_lines
    print("\n".join(field_lines(args.name) if args.name else experiment_lines()))
    return EXIT_OK


def _train_experiment(args: argparse.Namespace) -> int:
    mlflow = mlflow_uri(args)  # before anything is built
    sets = list(args.set) + ([f"workers={args.workers}"] if args.workers else [])
    from ..manage.tags import check_tags
    tags = check_tags(args.tag)
    exp, entry = _build_experiment(args.experiment, args.config, sets)
    from ..api import run_request
    from ..train.request import RunRequest
    request = RunRequest(exp, out=os.path.abspath(args.out), label=args.name, tags=tags,
                         note=args.note, entry=entry, quiet=args.quiet, mlflow=mlflow)
    return train_and_report(lambda: run_request(request), args.verbose)


def _build_experiment(spec, toml_path, sets):
    from ..define.catalog import resolve_spec
    from ..define.config import load_toml, parse_assignments
    overrides = parse_assignments(sets)
    file_values = load_toml(toml_path) if toml_path else {}
    cls, entry = resolve_spec(spec)
    return cls({**file_values, **overrides}), entry  # --set wins over the file


def _resume_run(args: argparse.Namespace) -> int:
    from ..api import resume_run
    from ..define.config import parse_assignments
    mlflow = mlflow_uri(args)
    overrides = parse_assignments(args.set)
    return train_and_report(lambda: resume_run(args.run_dir, overrides, quiet=args.quiet,
                                               mlflow=mlflow), args.verbose)


def _start_worker(args: argparse.Namespace) -> int:
    from ..train.launch import run_worker
    run_worker(os.path.abspath(args.run_dir), resume=args.resume)
    return EXIT_OK
