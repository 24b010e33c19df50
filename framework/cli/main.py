"""The ``mindexp`` command line: assembles the command groups, dispatches, and maps
errors to exit statuses. Each group module (run, look, manage, use, search) adds its
commands with ``register(subparsers)``, binding each to a handler that returns the
exit status; a new group is one module and one line in ``GROUPS``. Imports
mindspore only for commands that train."""
import argparse
import difflib
import gc
import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn, Protocol

from .. import __version__
from ..errors import MindexpError
from . import look, manage, mlflow, run, search, use
from ._console import EXIT_BAD_INPUT, EXIT_OK, log_to_stderr, one_line


class CommandGroup(Protocol):
    """A module of commands: ``register`` adds their parsers to ``subparsers``, each
    with ``set_defaults(handler=f)``, ``f(args) -> exit status``."""

    def register(self, subparsers: argparse._SubParsersAction) -> None: ...


# The command groups, in the order `mindexp --help` lists their commands.
GROUPS: tuple[CommandGroup, ...] = (run, look, manage, use, search, mlflow)

# What users of other tools type, and the command that does it here.
_SYNONYMS = {"train": "run", "fit": "run", "ls": "runs", "info": "show", "inspect": "show",
             "delete": "rm", "remove": "rm", "clean": "gc", "experiments": "list"}


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad usage as one line and exit status 2."""

    commands: Sequence[str] = ()  # the top parser's commands, for "Did you mean"

    def error(self, message):
        raise MindexpError(_unknown_command(message, self.commands)
                           or f"{self.prog}: {message}")


def _unknown_command(message, commands):
    """argparse's "invalid choice" for the command, without the internal commands, and
    with the closest command (``mindexp rnu`` -> Did you mean run?)."""
    match = re.match(r"argument COMMAND: invalid choice: '(.*?)'", message)
    if not match:
        return None
    public = [name for name in commands if not name.startswith("_")]
    close = _SYNONYMS.get(match[1]) or next(iter(
        difflib.get_close_matches(match[1], public, n=1, cutoff=0.5)), None)
    hint = f" Did you mean {close}?" if close else ""
    return (f"unknown command {match[1]!r}.{hint} Commands: {', '.join(public)}. "
            f"Received: {match[1]}")


def build_parser(groups: Sequence[CommandGroup] = GROUPS) -> argparse.ArgumentParser:
    """The top parser with the commands of ``groups``; each command's parser has a
    ``handler`` default (the function that runs it)."""
    parser = _Parser(prog="mindexp", description="Callback-driven MindSpore experiments.")
    parser.add_argument("--version", action="version", version=f"mindexp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for group in groups:
        group.register(sub)
    parser.commands = list(sub.choices)
    return parser


def console() -> NoReturn:
    """The ``mindexp`` console script, ``python -m mindexp`` and msrun's worker
    script: :func:`main` on ``sys.argv``, then exit with its status."""
    code = main()
    # At exit CPython's last garbage collection walks every object still alive:
    # after `mindexp run linear` the process took 0.7-0.9 s from main()'s return
    # to its end, and freezing saves 0.5 s of it (1.7 s after mlp_sine;
    # benchmarks/exit_cost.py), as train.session freezes the startup objects
    # during training. Nothing of mindexp's waits on that collection: our files
    # are flushed and closed explicitly, objects freed by reference counting
    # still are, MindSpore's exit hooks still run, and the kernel drops the
    # locks. (A file that user code leaves open inside a reference cycle is not
    # flushed; the CHANGELOG says so.)
    gc.freeze()
    sys.exit(code)


def main(argv: Sequence[str] | None = None,
         groups: Sequence[CommandGroup] = GROUPS) -> int:
    """Run the command line ``argv`` and return its exit status: 0 ok, 1 failed,
    2 bad input, 130/143 stopped by SIGINT/SIGTERM (the console script's entry
    is :func:`console`, which exits with it)."""
    # MindSpore's C++ log: nothing on stderr. Its errors reach us as exceptions,
    # whose full text goes to the run's error.txt; the terminal gets one line.
    os.environ.setdefault("GLOG_v", "4")
    log_to_stderr()
    args = None
    try:
        args = build_parser(groups).parse_args(argv)
        return args.handler(args)
    except MindexpError as exc:
        details = getattr(exc, "details", None)  # user code's traceback (train.failures)
        if getattr(args, "verbose", False) and details:
            print(details, file=sys.stderr, end="")
        print(f"mindexp: error: {one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("mindexp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `mindexp list | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
