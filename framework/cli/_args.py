"""Arguments that several command groups share, and the types that check them."""
import argparse

from ..callbacks import schema


def positive_int(text: str) -> int:
    """``text`` as an integer >= 1 (an argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1. Received: {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """``text`` as an integer >= 0 (an argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0. Received: {text!r}")
    return value


def port(text: str) -> int:
    """``text`` as a TCP port from 0 to 65535 (an argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 65535. Received: {text!r}")
    return value


def add_verbose(p: argparse.ArgumentParser) -> None:
    """``--verbose``: the full traceback of a failed training on the terminal."""
    p.add_argument("--verbose", action="store_true",
                   help="print the full traceback when it fails "
                        f"(always kept in {schema.ERROR_FILE})")


def add_tag_args(p: argparse.ArgumentParser) -> None:
    """``--tag`` and ``--note`` of the runs a command starts."""
    p.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="tag the run(s) (repeatable); see mindexp tag")
    p.add_argument("--note", metavar="TEXT", help=f"a note kept in {schema.RUN_JSON}")


def add_config_args(p: argparse.ArgumentParser) -> None:
    """``--set``, ``--config`` and ``--out`` of the commands that start runs."""
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="set a config field (repeatable; wins over --config)")
    p.add_argument("--config", metavar="FILE.toml", help="config values from a TOML file")
    p.add_argument("--out", default="outputs", help="output root (default: outputs/)")
