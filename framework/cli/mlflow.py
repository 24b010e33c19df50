"""``mindexp mlflow RUNS --tracking-uri URI``: copy runs into an MLflow tracking server."""
import argparse
import os

from ._console import EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``mlflow`` command, bound to its handler."""
    p = subparsers.add_parser("mlflow", help="copy runs into an MLflow tracking server "
                              "(needs mindexp[mlflow]); again: only what is new")
    p.add_argument("paths", nargs="+", metavar="RUNS", help="run directories or folders of runs")
    p.add_argument("--tracking-uri", required=True, metavar="URI",
                   help="the MLflow tracking server, e.g. http://127.0.0.1:5000")
    p.add_argument("--experiment", metavar="NAME",
                   help="the MLflow experiment (default: each run's experiment name)")
    p.add_argument("--params", default="summary", metavar="WHICH",
                   help="the parameter log's points: none, summary (each parameter's norm, mean, std; "
                   "the default) or all (every row)")
    p.add_argument("--register", metavar="NAME",
                   help="register each finished run's model (its best checkpoint) in the "
                   "Model Registry as NAME")
    p.set_defaults(handler=copy_runs)


def copy_runs(args: argparse.Namespace) -> int:
    """Copy the runs and print one line per run: its MLflow run id and the points sent."""
    from ..analysis.mlflow_api import QUIET_SWITCHES
    from ..analysis.mlflow_export import to_mlflow
    # the command's own process: MLflow's switches for what it prints itself, and its
    # loggers at WARNING (a new database's "creating tables", read when mlflow is imported)
    for name, value in {**QUIET_SWITCHES, "MLFLOW_LOGGING_LEVEL": "WARNING"}.items():
        os.environ.setdefault(name, value)
    for done in to_mlflow(args.paths, args.tracking_uri, experiment=args.experiment,
                          params=args.params, register=args.register):
        print(f"{done['run_dir']} -> MLflow run {done['mlflow_run_id']} "
              f"({done['points']} new metric points)")
    return EXIT_OK
