"""The common experiment config, and turning user values into it.

Each group of fields is declared by the module of its consumer, beside this
one (``run``, ``optimization``, ``system``, ``logs``, ``checkpoints``,
``evaluation``, ``distributed``, ``early_stop``), with its checks, through
the registry in ``_fields``; :class:`Config` inherits every group, so the
names stay flat and unique in ``Config``, ``--set``, config.json and
``compare`` (a contract). A new field goes into its owner's group; a new
group is one more base of :class:`Config`.
"""
import dataclasses
import difflib
import os
import types
import typing
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Iterable, Mapping, TypeVar

from ...callbacks.direction import MODES as DIRECTIONS, direction_of_name
from ...errors import ConfigError
from ._fields import CHECKS, CHOICES, RULES
from .checkpoints import BestCheckpointFields, CheckpointFields
from .distributed import DistributedFields
from .early_stop import EarlyStopFields
from .evaluation import EvalFields
from .logs import LoggingFields
from .optimization import OptimizerFields, ScheduleFields
from .run import RunFields
from .system import ContextFields, ExecutionFields, SystemMetricsFields

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# a Config dataclass (the common one or an experiment's subclass)
C = TypeVar("C", bound="DataclassInstance")
# Optional[X], Union[X, Y] and the PEP 604 spelling X | None, X | Y
_UNIONS = (typing.Union, types.UnionType)
_NONE_WORDS = ("none", "null", "")


# A dataclass takes its bases' fields last base first: read the bases bottom-up
# for the order of the fields (config.json, `mindexp list`, compare).
@dataclass
class Config(SystemMetricsFields,
             BestCheckpointFields,
             EarlyStopFields,
             DistributedFields,
             EvalFields,
             CheckpointFields,
             LoggingFields,
             ExecutionFields,
             ScheduleFields,
             ContextFields,
             OptimizerFields,
             RunFields):
    """Fields every experiment has; subclass it to add your own.

    The string under each field is its one-line description (``mindexp list
    NAME`` shows it); describe your own fields the same way, or with
    ``field(default=..., metadata={"help": "..."})``.
    """


def monitor_mode(name: str, mode: str = "auto", metrics: Any = None) -> str | None:
    """``"min"`` or ``"max"`` for a monitored value, or None when unknown
    (callers refuse it in their own words, naming their config field).

    The rule is :mod:`mindexp.callbacks.direction`'s: ``mode`` other than
    auto wins, otherwise the name says it (``loss``, ``eval_mae``: min;
    ``eval_accuracy``: max). ``metrics`` is the experiment's ``metrics()``:
    a dict there maps an eval column to its metric, whose name is read.
    """
    if mode in DIRECTIONS:
        return mode
    metric = name[len("eval_"):] if name.startswith("eval_") else name
    renamed = metrics.get(metric) if isinstance(metrics, dict) else None
    return direction_of_name(renamed if isinstance(renamed, str) else metric)


def resolve(config_cls: type[C], *sources: Mapping[str, Any] | None) -> C:
    """Build ``config_cls`` from mappings applied in order (later wins).

    Values may be strings (from ``--set`` or the command line) or Python
    values (from TOML or keyword arguments). Raises ConfigError naming the
    field for an unknown name, a wrong type or an out-of-range value.
    """
    known = {f.name: f for f in fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    values: dict[str, Any] = {}
    for source in sources:
        for name, raw in (source or {}).items():
            if name not in known:
                raise ConfigError(_unknown_message(name, known), field=name)
            values[name] = coerce(name, raw, hints[name])
    config = config_cls(**values)
    check(config)
    return config


def check(config: Any) -> None:
    """Range and choice checks of the common fields (ConfigError)."""
    hints = typing.get_type_hints(type(config))
    for f in fields(config):
        value = getattr(config, f.name)
        _check_type(f.name, value, hints[f.name])
        if f.name in RULES:
            ok, accepted = RULES[f.name]
            if not ok(value):
                raise ConfigError(f"config field {f.name!r} must be {accepted}. "
                                  f"Received: {f.name}={value!r}", field=f.name)
        if f.name in CHOICES and value not in CHOICES[f.name]:
            raise ConfigError(f"config field {f.name!r} must be one of "
                              f"{', '.join(CHOICES[f.name])}. Received: {f.name}={value!r}",
                              field=f.name)
    for check_across in CHECKS:
        check_across(config)


def coerce(name: str, raw: Any, hint: Any) -> Any:
    """Turn ``raw`` into a value of type ``hint`` or raise ConfigError."""
    try:
        return _coerce(raw, hint)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config field {name!r} expects {_type_name(hint)}{_bits(exc)}. "
                          f"Received: {name}={raw!r}", field=name) from None


def _coerce(raw: Any, hint: Any) -> Any:
    """``raw`` as a value of ``hint``; TypeError/ValueError when it is not one.

    Every annotation ``mindexp list`` can show is handled the same way:
    ``X | None``/``Optional[X]`` and other unions (first member that takes
    the value), ``Literal[...]``, ``list[X]``, ``tuple[X, ...]``, fixed
    ``tuple[X, Y]``, bool/int/float/str, and any other class (the value
    itself when an instance, else ``cls(raw)``, e.g. an Enum or a Path).
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in _UNIONS:
        return _coerce_union(raw, args)
    if origin is typing.Literal:
        return _coerce_literal(raw, args)
    if origin in (tuple, list) or hint in (tuple, list):
        return _coerce_sequence(raw, origin or hint, args)
    if hint is bool:
        return _to_bool(raw)
    if hint is int:
        return _to_int(raw)
    if hint is float:
        return _to_float(raw)
    if hint is str:
        if not isinstance(raw, str):
            raise TypeError("")
        return raw
    if hint is typing.Any or not isinstance(hint, type):
        return raw
    return raw if isinstance(raw, hint) else hint(raw)


def _coerce_union(raw: Any, args: tuple[Any, ...]) -> Any:
    members = [a for a in args if a is not type(None)]
    if len(members) < len(args) and (
            raw is None or (isinstance(raw, str) and raw.strip().lower() in _NONE_WORDS)):
        return None
    for member in members:
        try:
            return _coerce(raw, member)
        except (TypeError, ValueError):
            continue
    raise ValueError("")


def _coerce_literal(raw: Any, choices: tuple[Any, ...]) -> Any:
    for choice in choices:
        try:
            if _coerce(raw, type(choice)) == choice:
                return choice
        except (TypeError, ValueError):
            continue
    raise ValueError("")


def _coerce_sequence(raw: Any, kind: Any, args: tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
    items = [s.strip() for s in raw.split(",") if s.strip()] if isinstance(raw, str) else raw
    if not isinstance(items, (list, tuple)):
        raise TypeError("")
    if kind is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(items) != len(args):  # tuple[int, float]: exactly these items
            raise ValueError("")
        return tuple(_coerce(item, h) for item, h in zip(items, args))
    item_hint = args[0] if args else str
    coerced = [_coerce(item, item_hint) for item in items]
    return tuple(coerced) if kind is tuple else coerced


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(raw, str) and raw.strip().lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError("")


def _to_int(raw: Any) -> int:
    """``raw`` as an int that fits in 64 bits (numpy's and MindSpore's integers:
    a larger one would fail inside training, after the run folder exists)."""
    if isinstance(raw, bool):
        raise TypeError("")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str):
        value = int(raw.strip())
    else:
        raise TypeError("")
    if not -2 ** 63 <= value < 2 ** 63:
        raise _TooLarge(" of 64 bits (-2**63 to 2**63-1)")
    return value


class _TooLarge(ValueError):
    """An integer beyond 64 bits; its text completes "expects an integer"."""


def _to_float(raw: Any) -> float:
    if isinstance(raw, bool):
        raise TypeError("")
    if isinstance(raw, (int, float)):
        value = float(raw)
    elif isinstance(raw, str):
        value = float(raw.strip())
    else:
        raise TypeError("")
    if value != value or value in (float("inf"), float("-inf")):
        raise _NotFinite(" that is finite (NaN and Infinity cannot be compared, grouped or "
                         "searched)")
    return value


class _NotFinite(ValueError):
    """NaN or an infinity; its text completes "expects a number"."""


def _check_type(name: str, value: Any, hint: Any) -> None:
    try:
        _coerce(value, hint)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config field {name!r} expects {_type_name(hint)}{_bits(exc)}. "
                          f"Received: {name}={value!r}", field=name) from None


def _bits(exc: Exception) -> str:
    return str(exc) if isinstance(exc, (_TooLarge, _NotFinite)) else ""


def _type_name(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in _UNIONS:
        members = [_type_name(a) for a in args if a is not type(None)]
        none = " or none" if len(members) < len(args) else ""
        return " or ".join(members) + none
    if origin is typing.Literal:
        return f"one of {', '.join(map(str, args))}"
    if origin in (tuple, list) or hint in (tuple, list):
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            return f"a comma-separated list of {len(args)} items ({', '.join(map(_type_name, args))})"
        return f"a comma-separated list of {_type_name(args[0]) if args else 'a string'}"
    return {int: "an integer", float: "a number", bool: "true or false",
            str: "a string"}.get(hint, getattr(hint, "__name__", str(hint)))


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` Did you mean a, b?`` naming the closest of ``known``, or "" when none is close."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f" Did you mean {', '.join(close)}?" if close else ""


def _unknown_message(name: str, known: Iterable[str]) -> str:
    return (f"unknown config field {name!r}.{did_you_mean(name, known)} Valid fields: "
            f"{', '.join(known)}. Received: {name}")


def parse_assignments(pairs: Iterable[str] | None) -> dict[str, str]:
    """``["lr=0.1", "optimizer=adam"]`` -> dict of strings (ConfigError if malformed)."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set expects NAME=VALUE. Received: {pair!r}")
        out[name.strip()] = value.strip()
    return out


# A config file holds a few dozen values: anything bigger is not one (a log, a
# device file), and is refused before it is read into memory.
MAX_CONFIG_BYTES = 1024 * 1024


def load_toml(path: str) -> dict[str, Any]:
    """Read a TOML config file into a dict; ConfigError (one line naming the
    file) when it is missing, not a regular file (a FIFO, a directory, a
    device: opened without blocking, never waited on), over
    :data:`MAX_CONFIG_BYTES`, not UTF-8 (UTF-16 too), nested deeper than the
    parser allows, or not valid TOML."""
    import tomllib
    try:
        data = tomllib.loads(_config_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} is not valid TOML: nested deeper than the "
                          "parser allows") from None
    # A [config] table is accepted too, so one file can hold other sections.
    return data.get("config", data) if isinstance(data.get("config"), dict) else data


def _config_text(path: str) -> str:
    """The text of the config file ``path`` (see :func:`load_toml` for what is refused)."""
    import stat
    try:  # O_NONBLOCK: a FIFO's open never waits for a writer (it follows a link:
        # a config file is the user's own, named on the command line)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # checked before fdopen, which refuses a directory
        os.close(fd)
        raise ConfigError(f"config file {path} is not a regular file (a "
                          f"{_kind_of(info.st_mode)}); accepted: a TOML file")
    with os.fdopen(fd, "rb") as f:
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {path} is {info.st_size} bytes, more than a config "
                              f"file holds (at most {MAX_CONFIG_BYTES}); accepted: a TOML file")
        os.set_blocking(fd, True)
        try:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"cannot read the config file {path}: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        utf16 = " (it is UTF-16: save it as UTF-8)" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start}){utf16}; "
                          "accepted: a TOML file in UTF-8") from None


def _kind_of(mode: int) -> str:
    import stat
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "device"),
                       (stat.S_ISBLK, "device")):
        if test(mode):
            return name
    return "file of another kind"


def to_dict(config: Any) -> dict[str, Any]:
    """The config as a JSON-ready dict (tuples become lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}


def field_defaults(config_cls: type) -> list[tuple[str, str, Any]]:
    """``[(name, short type, default)]`` for listing."""
    hints = typing.get_type_hints(config_cls)
    return [(f.name, short_type(hints[f.name]), _default_of(f)) for f in fields(config_cls)]


def _default_of(f: dataclasses.Field[Any]) -> Any:
    """A field's default (made by its factory), or None for a field without one."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def short_type(hint: Any) -> str:
    """``int``, ``float | None``, ``tuple[str, ...]``: as a user would write it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in _UNIONS:
        return " | ".join(short_type(a) for a in args).replace("NoneType", "None")
    if origin is typing.Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    if origin in (tuple, list):
        inner = ", ".join("..." if a is Ellipsis else short_type(a) for a in args)
        return f"{origin.__name__}[{inner}]"
    return getattr(hint, "__name__", str(hint))


def choices(name: str) -> tuple[str, ...]:
    """The accepted values of a common field with a fixed set, else ()."""
    return CHOICES.get(name, ())
