"""The common experiment config, and turning user values into it."""
import dataclasses
import difflib
import os
import types
import typing
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Tuple, TypeVar

from ..callbacks.direction import MODES as DIRECTIONS, direction_of_name
from ..errors import ConfigError
from .metrics import METRIC_NAMES

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "rmsprop", "adagrad")
LOSSES = ("mse", "mae", "l1", "huber", "cross_entropy", "bce")
MODES = ("graph", "pynative")
DEVICES = ("CPU", "GPU", "Ascend")
AMP_LEVELS = ("O0", "O1", "O2", "O3")
MEMORY_LEVELS = ("O0", "O1")
LR_SCHEDULES = ("constant", "step", "cosine", "exponential")
# a Config dataclass (the common one or an experiment's subclass)
C = TypeVar("C", bound="DataclassInstance")
# Optional[X], Union[X, Y] and the PEP 604 spelling X | None, X | Y
_UNIONS = (typing.Union, types.UnionType)
_NONE_WORDS = ("none", "null", "")


MONITOR_MODES = ("auto", "min", "max")
PARAM_STATS = ("auto", "host", "graph")
DATA_FINGERPRINTS = ("stat", "content", "off")


@dataclass
class Config:
    """Fields every experiment has; subclass it to add your own.

    The string under each field is its one-line description (``mindexp list
    NAME`` shows it); describe your own fields the same way, or with
    ``field(default=..., metadata={"help": "..."})``.
    """

    seed: int = 0
    """seed of MindSpore, NumPy and the data shuffle"""
    epochs: int = 10
    """passes over the training set"""
    batch_size: int = 32
    """samples per step (per worker)"""
    optimizer: str = "sgd"
    """mindspore.nn optimizer"""
    lr: float = 0.01
    """learning rate (the peak of a schedule)"""
    momentum: float = 0.9
    """momentum of the momentum optimizer"""
    weight_decay: float = 0.0
    """L2 penalty passed to the optimizer"""
    loss: str = "mse"
    """loss function (cross_entropy: sparse labels)"""
    mode: str = "graph"
    """MindSpore graph (compiled) or PyNative (eager) mode"""
    device: str = "CPU"
    """MindSpore device target"""
    amp_level: str = "O0"
    """mixed precision level of mindspore.amp (O0: float32)"""
    memory_optimize_level: str = "O0"
    """MindSpore memory optimisation: O0 speed first, O1 memory first (SOMAS reuse, less peak)"""
    loss_scale: float = 1.0
    """fixed loss scale; gradients are unscaled before the update"""
    lr_schedule: str = "constant"
    """learning-rate schedule over the run's steps"""
    warmup_steps: int = 0
    """steps of linear warmup at the start"""
    lr_decay_rate: float = 0.1
    """factor of the step/exponential schedules"""
    lr_decay_epochs: int = 1
    """epochs per decay of the step/exponential schedules"""
    clip_grad_norm: Optional[float] = None
    """clip the global gradient norm to this value (none: off)"""
    grad_accumulation: int = 1
    """batches whose gradients add up to one update"""
    sink: bool = False
    """MindSpore dataset sink mode (on CPU it trains per step anyway)"""
    graph_kernel: bool = False
    """MindSpore graph-kernel fusion (GPU/Ascend, graph mode)"""
    log_every: int = 1
    """log loss, parameters and gradient norm every N steps"""
    track_params: bool = True
    """write params.csv"""
    track_names: Tuple[str, ...] = ()
    """parameters to track, names or globs (empty: all)"""
    max_param_values: int = 16
    """largest parameter tracked element by element (else its stats)"""
    param_log_budget: Optional[float] = 0.05
    """fraction of a step's cost the statistics of large parameters may take, both estimated from sizes (never timed); above it they are logged every k steps (none: every step)"""
    param_stats: str = "auto"
    """where large parameters' statistics are computed: host (numpy), graph (in the train step), auto (graph off the CPU)"""
    data_fingerprint: str = "stat"
    """what run.json records of the data: stat (arrays hashed, files on disk by path, size, time), content (files hashed too), off"""
    checkpoint_every: int = 1
    """save a checkpoint every N epochs (0: only at the end)"""
    checkpoint_interval_s: float = 10.0
    """skip a periodic checkpoint younger than this"""
    keep_checkpoints: int = 3
    """newest regular checkpoints kept"""
    eval_every: int = 1
    """evaluate every N epochs (and after the last)"""
    metrics: Tuple[str, ...] = ()
    """eval metrics (empty: the experiment's choice, or loss)"""
    workers: int = 1
    """data-parallel workers launched with msrun"""
    log_all_ranks: bool = False
    """every rank writes its own logs, not rank 0 alone"""
    early_stop: str = ""
    """value watched to stop early: loss or eval_<metric>; empty = never"""
    patience: int = 5
    """epochs without improvement before an early stop"""
    min_delta: float = 0.0
    """smallest change that counts as an improvement"""
    early_stop_mode: str = "auto"
    """min, max, or auto (from the watched name)"""
    checkpoint_monitor: str = ""
    """value that ranks the best checkpoints (loss or eval_<metric>); empty = none"""
    keep_best: Optional[int] = None
    """how many best checkpoints to keep (1 when checkpoint_monitor is set)"""
    system_every_s: float = 5.0
    """seconds between samples of system.csv (CPU, memory, I/O; needs psutil); 0 = off"""


# field -> (check, what is accepted); checked after type coercion
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    # MindSpore counts epochs and steps in 32/64-bit integers: more is no run, but a crash
    "epochs": (lambda v: 1 <= v < 2 ** 31, "an integer >= 1 and < 2**31"),
    "batch_size": (lambda v: v >= 1, "an integer >= 1"),
    "lr": (lambda v: v > 0, "a number > 0"),
    "momentum": (lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "weight_decay": (lambda v: v >= 0, "a number >= 0"),
    "loss_scale": (lambda v: v > 0, "a number > 0"),
    "warmup_steps": (lambda v: v >= 0, "an integer >= 0"),
    "lr_decay_rate": (lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "lr_decay_epochs": (lambda v: v >= 1, "an integer >= 1"),
    "clip_grad_norm": (lambda v: v is None or v > 0, "a number > 0, or none"),
    "grad_accumulation": (lambda v: v >= 1, "an integer >= 1"),
    "log_every": (lambda v: v >= 1, "an integer >= 1"),
    "max_param_values": (lambda v: v >= 1, "an integer >= 1"),
    "param_log_budget": (lambda v: v is None or 0 < v <= 1, "a fraction in (0, 1], or none"),
    "checkpoint_every": (lambda v: v >= 0, "an integer >= 0 (0: only at the end)"),
    "checkpoint_interval_s": (lambda v: v >= 0, "a number >= 0"),
    "system_every_s": (lambda v: v >= 0, "a number >= 0 (0: off)"),
    "keep_checkpoints": (lambda v: v >= 1, "an integer >= 1"),
    "eval_every": (lambda v: v >= 1, "an integer >= 1"),
    "metrics": (lambda v: set(v) <= set(METRIC_NAMES),
                f"a comma-separated list of {', '.join(METRIC_NAMES)} (empty: the experiment's "
                "choice, or loss)"),
    "workers": (lambda v: v >= 1, "an integer >= 1"),
    "seed": (lambda v: 0 <= v < 2 ** 32, "an integer in [0, 2**32)"),
    "early_stop": (lambda v: _is_monitor(v, empty_ok=True),
                   "empty (off), loss or eval_<metric> (e.g. eval_accuracy)"),
    "patience": (lambda v: v >= 1, "an integer >= 1"),
    "min_delta": (lambda v: v >= 0, "a number >= 0"),
    "checkpoint_monitor": (lambda v: _is_monitor(v, empty_ok=True),
                           "empty (off), loss or eval_<metric> (e.g. eval_accuracy)"),
    "keep_best": (lambda v: v is None or v >= 1, "an integer >= 1, or none"),
}
_CHOICES = {"optimizer": OPTIMIZERS, "loss": LOSSES, "mode": MODES, "device": DEVICES,
            "amp_level": AMP_LEVELS, "memory_optimize_level": MEMORY_LEVELS,
            "lr_schedule": LR_SCHEDULES,
            "early_stop_mode": MONITOR_MODES, "param_stats": PARAM_STATS,
            "data_fingerprint": DATA_FINGERPRINTS}


def _is_monitor(value: str, empty_ok: bool = False) -> bool:
    return (empty_ok and value == "") or value == "loss" or (
        value.startswith("eval_") and len(value) > len("eval_"))


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
        if f.name in _RULES:
            ok, accepted = _RULES[f.name]
            if not ok(value):
                raise ConfigError(f"config field {f.name!r} must be {accepted}. "
                                  f"Received: {f.name}={value!r}", field=f.name)
        if f.name in _CHOICES and value not in _CHOICES[f.name]:
            raise ConfigError(f"config field {f.name!r} must be one of "
                              f"{', '.join(_CHOICES[f.name])}. Received: {f.name}={value!r}",
                              field=f.name)
    _check_keep_best(config)


def _check_keep_best(config: Any) -> None:
    if getattr(config, "keep_best", None) is not None and not getattr(config, "checkpoint_monitor", ""):
        raise ConfigError("config field 'keep_best' needs checkpoint_monitor (the value the best "
                          "checkpoints are ranked by, e.g. eval_accuracy or loss). "
                          f"Received: keep_best={config.keep_best!r}, checkpoint_monitor=''",
                          field="keep_best")


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
        raise ValueError("not a finite number")
    return value


def _check_type(name: str, value: Any, hint: Any) -> None:
    try:
        _coerce(value, hint)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config field {name!r} expects {_type_name(hint)}{_bits(exc)}. "
                          f"Received: {name}={value!r}", field=name) from None


def _bits(exc: Exception) -> str:
    return str(exc) if isinstance(exc, _TooLarge) else ""


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
    return _CHOICES.get(name, ())
