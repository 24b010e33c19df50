"""How the command line is assembled: one module per command group, each adding its
commands with ``register(subparsers)``; ``main`` only assembles and dispatches."""
import argparse
import importlib.metadata
import sys
import types

import pytest

import mindexp
from mindexp.cli import look, manage, mlflow, run, search, use
from mindexp.cli.main import GROUPS, main

# What each group adds (the commands `mindexp --help` listed before the split, and the
# two internal ones msrun and a study's workers call): a command moving, appearing or
# vanishing must be seen here.
GROUP_COMMANDS = {
    run: {"list", "run", "resume", "_worker"},
    look: {"compare", "plot", "report", "serve", "tensorboard"},
    manage: {"runs", "show", "tag", "note", "rm", "gc", "diff", "rerun"},
    use: {"evaluate", "predict", "export"},
    search: {"sweep", "tune", "_search_worker"},
    mlflow: {"mlflow"},
}
ALL_COMMANDS = sorted(set().union(*GROUP_COMMANDS.values()))
PUBLIC = [name for name in ALL_COMMANDS if not name.startswith("_")]


def test_help_lists_exactly_the_public_commands(cli):
    done = cli("--help")  # python -m mindexp --help
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("usage: mindexp ")
    listed = [line.split()[0] for line in done.stdout.splitlines()
              if line.startswith("    ") and not line.startswith("     ")]
    assert sorted(listed) == PUBLIC and len(PUBLIC) == 22 and len(ALL_COMMANDS) == 24


def test_version_is_the_installed_version(cli):
    done = cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"mindexp {importlib.metadata.version('mindexp')}\n"
    assert importlib.metadata.version("mindexp") == mindexp.__version__


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: mindexp {command} ")


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.__name__.rpartition(".")[2])
def test_each_group_registers_its_commands_and_nothing_else(group):
    sub = argparse.ArgumentParser().add_subparsers()
    group.register(sub)
    assert set(sub.choices) == GROUP_COMMANDS[group]
    handlers = {parser.get_default("handler") for parser in sub.choices.values()}
    assert all(callable(h) and h.__module__ == group.__name__ for h in handlers)


def test_the_groups_are_the_commands_main_runs():
    assert set(GROUPS) == set(GROUP_COMMANDS)


def _hello_group():
    """A command group as a newcomer writes one: a module with ``register``."""
    def greet(args):
        print(f"hello {args.who}")
        return 0 if args.who != "nobody" else 1

    def register(subparsers):
        hello = subparsers.add_parser("hello", help="say hello")
        hello.add_argument("who")
        hello.set_defaults(handler=greet)
    greet.__module__ = "hello_group"
    return types.SimpleNamespace(__name__="hello_group", register=register)


def test_a_new_group_in_the_list_is_callable(capsys):
    groups = (*GROUPS, _hello_group())
    assert main(["hello", "you"], groups=groups) == 0
    assert capsys.readouterr().out == "hello you\n"
    assert main(["hello", "nobody"], groups=groups) == 1
    assert main(["helo", "you"], groups=groups) == 2  # bad input: one line, a hint
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Did you mean hello?" in err and "Traceback" not in err
    assert main(["hello", "you"]) == 2  # not in main's own list
    assert "unknown command 'hello'" in capsys.readouterr().err
