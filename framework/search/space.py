"""The search space of ``mindexp tune``: ``--param`` text parsed and checked.

Everything here runs before a study or a folder exists, so a bad space is
one line and exit status 2 with nothing created. Optuna is not needed.
"""
import dataclasses
import math
import re
import typing

from ..define.config import coerce, did_you_mean, short_type
from ..errors import ConfigError

KINDS = ("uniform", "loguniform", "int", "int-log", "choice")
_ACCEPTED = ("uniform:LOW:HIGH, loguniform:LOW:HIGH (0 < LOW), int:LOW:HIGH, "
             "int-log:LOW:HIGH (1 <= LOW), choice:A,B,...")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


@dataclasses.dataclass(frozen=True)
class Param:
    """One searched config field: its distribution kind and bounds or choices."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    choices: tuple = ()

    def text(self):
        """The ``--param`` text this was parsed from (normalised)."""
        if self.kind == "choice":
            return f"{self.name}=choice:{','.join(map(str, self.choices))}"
        return f"{self.name}={self.kind}:{self.low:g}:{self.high:g}"


def parse_space(items, exp_cls, base=None):
    """``["lr=loguniform:1e-4:1", ...]`` or ``{"lr": "loguniform:1e-4:1"}`` ->
    ``{name: Param}``, each name a config field of ``exp_cls`` and each
    bound or choice a valid value of that field on top of the fixed config
    values ``base`` (ConfigError otherwise)."""
    pairs = list(items.items()) if isinstance(items, dict) else [_split_item(i) for i in items]
    if not pairs:
        raise ConfigError(f"tune needs at least one --param NAME=KIND:...; accepted kinds: "
                          f"{_ACCEPTED}. Received: no --param")
    hints = typing.get_type_hints(exp_cls.Config)
    space = {}
    for name, spec in pairs:
        check_field(name, hints, exp_cls, space)
        space[name] = _parse_one(name, spec, hints[name])
    _check_values(space, exp_cls, dict(base or {}))
    return space


def check_count(value, least, option, why="", sep=" "):
    """``value`` when it is an integer >= ``least``, else ConfigError naming
    ``option`` (``why``: what the number counts; ``sep``: ``=`` for a keyword)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{option} must be an integer >= {least}{why}. "
                          f"Received: {option}{sep}{value!r}", field=option.lstrip("-"))
    return value


def _split_item(item):
    name, sep, spec = str(item).partition("=")
    if not sep or not name.strip():
        raise ConfigError(f"--param expects NAME=KIND:...; accepted kinds: {_ACCEPTED}. "
                          f"Received: {item!r}")
    return name.strip(), spec.strip()


def check_field(name, known, exp_cls, given, option="--param", again="keep one"):
    """ConfigError when ``name`` is in ``given`` already (``again``: what to do
    instead) or is not one of the config fields ``known`` of ``exp_cls``."""
    if name in given:
        raise ConfigError(f"{option} {name} is given twice; {again}. Received: {name}",
                          field=name)
    if name not in known:
        raise ConfigError(f"{option} {name!r} is not a config field of "
                          f"{exp_cls.experiment_name()}.{did_you_mean(name, known)} Valid fields: "
                          f"{', '.join(known)}. Received: {name}", field=name)


def _parse_one(name, spec, hint):
    if isinstance(spec, (list, tuple)):  # the Python API: a list is a choice
        return Param(name, "choice", choices=tuple(coerce(name, v, hint) for v in spec))
    kind, sep, rest = str(spec).partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS or not sep:
        raise ConfigError(f"--param {name}: unknown distribution {kind!r}; accepted: "
                          f"{_ACCEPTED}. Received: {name}={spec}", field=name)
    if kind == "choice":
        return _parse_choice(name, spec, rest, hint)
    return _parse_range(name, spec, kind, rest, hint)


def _parse_choice(name, spec, rest, hint):
    values = [v.strip() for v in rest.split(",")]
    if "" in values:
        raise ConfigError(f"--param {name}: choice needs non-empty values A,B,... "
                          f"Received: {name}={spec}", field=name)
    if len(set(values)) != len(values):
        raise ConfigError(f"--param {name}: a choice value is listed twice. "
                          f"Received: {name}={spec}", field=name)
    return Param(name, "choice", choices=tuple(_field_value(name, v, hint, spec) for v in values))


def _parse_range(name, spec, kind, rest, hint):
    parts = rest.split(":")
    base = _base_type(hint)
    integer = kind.startswith("int")
    if len(parts) != 2:
        raise ConfigError(f"--param {name}: {kind} needs {kind}:LOW:HIGH. "
                          f"Received: {name}={spec}", field=name)
    if base not in ((int,) if integer else (int, float)):
        what = "an integer" if base is float else {bool: "true or false", str: "a string"}.get(
            base, getattr(base, "__name__", str(base)))
        raise ConfigError(f"--param {name}: {kind} draws {'integers' if integer else 'numbers'}, "
                          f"but config field {name!r} is {what}; use choice:A,B,... or "
                          f"{'uniform/loguniform' if integer else 'int/int-log'}. "
                          f"Received: {name}={spec}", field=name)
    if not integer and base is int:
        raise ConfigError(f"--param {name}: config field {name!r} is an integer; use "
                          f"int:LOW:HIGH or int-log:LOW:HIGH. Received: {name}={spec}", field=name)
    low, high = (_number(name, p, spec, integer) for p in parts)
    _check_bounds(name, spec, kind, low, high)
    return Param(name, kind, low=low, high=high)


def _number(name, text, spec, integer):
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = None
    if value is None or (not integer and not math.isfinite(value)):
        raise ConfigError(f"--param {name}: {text!r} is not {'an integer' if integer else 'a finite number'}. "
                          f"Received: {name}={spec}", field=name)
    return value


def _check_bounds(name, spec, kind, low, high):
    if low >= high if kind in ("uniform", "loguniform") else low > high:
        raise ConfigError(f"--param {name}: {kind} needs LOW {'<' if 'uniform' in kind else '<='} "
                          f"HIGH. Received: {name}={spec}", field=name)
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"--param {name}: loguniform needs 0 < LOW < HIGH (a log scale has no "
                          f"0). Received: {name}={spec}", field=name)
    if kind == "int-log" and low < 1:
        raise ConfigError(f"--param {name}: int-log needs 1 <= LOW <= HIGH. "
                          f"Received: {name}={spec}", field=name)


def _field_value(name, text, hint, spec):
    try:
        return coerce(name, text, hint)
    except ConfigError:
        raise ConfigError(f"--param {name}: choice value {text!r} is not a valid value of config "
                          f"field {name!r}, which expects {short_type(hint)}. "
                          f"Received: {name}={spec}", field=name) from None


def _check_values(space, exp_cls, base):
    """Each bound and choice must make a valid experiment (ranges, choices, validate())."""
    for param in space.values():
        for value in param.choices or (param.low, param.high):
            try:
                exp_cls({**base, param.name: value})
            except ConfigError as exc:
                raise ConfigError(f"--param {param.name}: the value {value!r} is not accepted: "
                                  f"{' '.join(str(exc).split())}", field=param.name) from None


def _base_type(hint):
    if typing.get_origin(hint) is typing.Union:
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return inner[0] if inner else hint
    return hint


def parse_duration(text):
    """``"10m"``, ``"90s"``, ``"1.5h"``, ``"2d"`` or a number of seconds -> seconds (None: no limit)."""
    if text is None:
        return None
    match = _DURATION.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"--timeout must be a positive duration such as 90s, 10m, 2h or a number "
                          f"of seconds. Received: --timeout {text}", field="timeout")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
