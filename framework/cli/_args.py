"""Arguments that several command groups share, and the types that check them."""
import argparse

from .. import layout


def positive_int(text: str) -> int:
    """``text`` as an integer >= 1 (an argparse ``type``)."""
    return _int_within(text, 1, None, "an integer >= 1")


def non_negative_int(text: str) -> int:
    """``text`` as an integer >= 0 (an argparse ``type``)."""
    return _int_within(text, 0, None, "an integer >= 0")


def port(text: str) -> int:
    """``text`` as a TCP port from 0 to 65535 (an argparse ``type``)."""
    return _int_within(text, 0, 65535, "an integer from 0 to 65535")


def _int_within(text, low, high, accepted):
    """``text`` as an integer from ``low`` to ``high`` (None: no bound), else
    the argparse error saying it must be ``accepted``."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"must be {accepted}. Received: {text!r}")
    return value


def add_verbose(p: argparse.ArgumentParser) -> None:
    """``--verbose``: the full traceback of a failed training on the terminal."""
    p.add_argument("--verbose", action="store_true",
                   help="print the full traceback when it fails "
                        f"(always kept in {layout.ERROR_FILE})")


def add_tag_args(p: argparse.ArgumentParser) -> None:
    """``--tag`` and ``--note`` of the runs a command starts."""
    p.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="tag the run(s) (repeatable); see mindexp tag")
    p.add_argument("--note", metavar="TEXT", help=f"a note kept in {layout.RUN_JSON}")


def add_config_args(p: argparse.ArgumentParser) -> None:
    """``--set``, ``--config`` and ``--out`` of the commands that start runs."""
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="set a config field (repeatable; wins over --config)")
    p.add_argument("--config", metavar="FILE.toml", help="config values from a TOML file")
    p.add_argument("--out", default="outputs", help="output root (default: outputs/)")


def add_mlflow(parser: argparse.ArgumentParser,
               what: str = "stream the run to this MLflow tracking server while it trains") -> None:
    """``--mlflow [URI]``: stream to MLflow while training (read by :func:`mlflow_uri`)."""
    parser.add_argument("--mlflow", nargs="?", const="", default=None, metavar="URI",
                        help=f"{what} (default: MLFLOW_TRACKING_URI; credentials only through "
                        "MLflow's MLFLOW_TRACKING_USERNAME/PASSWORD/TOKEN)")


def mlflow_uri(args: argparse.Namespace) -> str | None:
    """The tracking URI of ``--mlflow`` (None without it); ConfigError (one line)
    when it is given without a URI and MLFLOW_TRACKING_URI is unset."""
    if args.mlflow is None:
        return None
    from ..train.mlflow_stream import tracking_uri
    return tracking_uri(args.mlflow)
