"""The registry of the common config fields: who owns each, and its checks.

Each consumer's module (optimization, logging, checkpoints, early stop,
evaluation, distributed, system, the run itself) declares its fields as a
small dataclass and registers them with :func:`owns`, with the range rule
and the fixed choices of each; :class:`~mindexp.define.config.Config`
inherits them all. A name is registered once (``Config``, ``--set``,
config.json and ``compare`` keep flat, unique names: a contract).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping, TypeVar

Rule = tuple[Callable[[Any], bool], str]   # (check, what is accepted), after type coercion
Check = Callable[[Any], None]              # a check across fields: raises ConfigError
T = TypeVar("T", bound=type)

RULES: dict[str, Rule] = {}
CHOICES: dict[str, tuple[str, ...]] = {}
CHECKS: list[Check] = []
OWNERS: dict[str, str] = {}                # field -> the module that declared it


def owns(rules: Mapping[str, Rule] | None = None,
         choices: Mapping[str, tuple[str, ...]] | None = None,
         checks: Iterable[Check] = ()) -> Callable[[T], T]:
    """Register the decorated dataclass's fields as its module's, with their
    ``rules``, ``choices`` and cross-field ``checks``."""
    def register(cls: T) -> T:
        names = [f.name for f in dataclasses.fields(cls)]
        _refuse_strangers(cls, names, {**(rules or {}), **(choices or {})})
        for name in names:
            _claim(name, cls.__module__)
        RULES.update(rules or {})
        CHOICES.update(choices or {})
        CHECKS.extend(c for c in checks if c not in CHECKS)
        return cls
    return register


def _claim(name: str, module: str) -> None:
    owner = OWNERS.setdefault(name, module)
    if owner != module:
        raise ValueError(f"config field {name!r} is declared twice ({owner} and {module})")


def _refuse_strangers(cls: type, names: list[str], ruled: Mapping[str, Any]) -> None:
    strangers = set(ruled) - set(names)
    if strangers:
        raise ValueError(f"{cls.__qualname__} rules fields it does not declare: "
                         f"{', '.join(sorted(strangers))}")


def is_monitor(value: str, empty_ok: bool = False) -> bool:
    """``loss`` or ``eval_<metric>`` (and ``""`` with ``empty_ok``): a value a run can watch."""
    return (empty_ok and value == "") or value == "loss" or (
        value.startswith("eval_") and len(value) > len("eval_"))


MONITOR_ACCEPTED = "empty (off), loss or eval_<metric> (e.g. eval_accuracy)"
