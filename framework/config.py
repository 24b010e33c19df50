"""The common experiment config, and turning user values into it."""
import dataclasses
import difflib
import typing
from dataclasses import dataclass, fields
from typing import Optional, Tuple

from .errors import ConfigError
from .metrics import METRIC_NAMES

OPTIMIZERS = ("sgd", "momentum", "adam", "adamw", "rmsprop", "adagrad")
LOSSES = ("mse", "mae", "l1", "huber", "cross_entropy", "bce")
MODES = ("graph", "pynative")
DEVICES = ("CPU", "GPU", "Ascend")
AMP_LEVELS = ("O0", "O1", "O2", "O3")
LR_SCHEDULES = ("constant", "step", "cosine", "exponential")


@dataclass
class Config:
    """Fields every experiment has; subclass it to add your own."""

    seed: int = 0
    epochs: int = 10
    batch_size: int = 32
    optimizer: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 0.0
    loss: str = "mse"
    mode: str = "graph"
    device: str = "CPU"
    amp_level: str = "O0"
    loss_scale: float = 1.0
    lr_schedule: str = "constant"
    warmup_steps: int = 0
    lr_decay_rate: float = 0.1
    lr_decay_epochs: int = 1
    clip_grad_norm: Optional[float] = None
    grad_accumulation: int = 1
    sink: bool = False
    graph_kernel: bool = False
    log_every: int = 1
    track_params: bool = True
    track_names: Tuple[str, ...] = ()
    max_param_values: int = 16
    checkpoint_every: int = 1
    checkpoint_interval_s: float = 10.0
    keep_checkpoints: int = 3
    eval_every: int = 1
    metrics: Tuple[str, ...] = ()
    workers: int = 1
    log_all_ranks: bool = False


# field -> (check, what is accepted); checked after type coercion
_RULES = {
    "epochs": (lambda v: v >= 1, "an integer >= 1"),
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
    "checkpoint_every": (lambda v: v >= 0, "an integer >= 0 (0: only at the end)"),
    "checkpoint_interval_s": (lambda v: v >= 0, "a number >= 0"),
    "keep_checkpoints": (lambda v: v >= 1, "an integer >= 1"),
    "eval_every": (lambda v: v >= 1, "an integer >= 1"),
    "metrics": (lambda v: set(v) <= set(METRIC_NAMES),
                f"a comma-separated list of {', '.join(METRIC_NAMES)} (empty: the experiment's "
                "choice, or loss)"),
    "workers": (lambda v: v >= 1, "an integer >= 1"),
    "seed": (lambda v: 0 <= v < 2 ** 32, "an integer in [0, 2**32)"),
}
_CHOICES = {"optimizer": OPTIMIZERS, "loss": LOSSES, "mode": MODES, "device": DEVICES,
            "amp_level": AMP_LEVELS, "lr_schedule": LR_SCHEDULES}


def resolve(config_cls, *sources):
    """Build ``config_cls`` from mappings applied in order (later wins).

    Values may be strings (from ``--set`` or the command line) or Python
    values (from TOML or keyword arguments). Raises ConfigError naming the
    field for an unknown name, a wrong type or an out-of-range value.
    """
    known = {f.name: f for f in fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    values = {}
    for source in sources:
        for name, raw in (source or {}).items():
            if name not in known:
                raise ConfigError(_unknown_message(name, known), field=name)
            values[name] = coerce(name, raw, hints[name])
    config = config_cls(**values)
    check(config)
    return config


def check(config):
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


def coerce(name, raw, hint):
    """Turn ``raw`` into a value of type ``hint`` or raise ConfigError."""
    try:
        return _coerce(raw, hint)
    except (TypeError, ValueError):
        raise ConfigError(f"config field {name!r} expects {_type_name(hint)}. "
                          f"Received: {name}={raw!r}", field=name) from None


def _coerce(raw, hint):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("none", "null", "")):
            return None
        return _coerce(raw, inner[0])
    if origin in (tuple, list):
        items = [s.strip() for s in raw.split(",") if s.strip()] if isinstance(raw, str) else raw
        if not isinstance(items, (list, tuple)):
            raise TypeError("")
        item_hint = args[0] if args else str
        coerced = [_coerce(item, item_hint) for item in items]
        return tuple(coerced) if origin is tuple else coerced
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
    return raw


def _to_bool(raw):
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(raw, str) and raw.strip().lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError("")


def _to_int(raw):
    if isinstance(raw, bool):
        raise TypeError("")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    if isinstance(raw, str):
        return int(raw.strip())
    raise TypeError("")


def _to_float(raw):
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


def _check_type(name, value, hint):
    try:
        _coerce(value, hint)
    except (TypeError, ValueError):
        raise ConfigError(f"config field {name!r} expects {_type_name(hint)}. "
                          f"Received: {name}={value!r}", field=name) from None


def _type_name(hint):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return f"{_type_name(inner[0])} or none"
    if origin in (tuple, list):
        return f"a comma-separated list of {_type_name(args[0]) if args else 'str'}"
    return {int: "an integer", float: "a number", bool: "true or false",
            str: "a string"}.get(hint, getattr(hint, "__name__", str(hint)))


def did_you_mean(name, known):
    """`` Did you mean a, b?`` naming the closest of ``known``, or "" when none is close."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.6)
    return f" Did you mean {', '.join(close)}?" if close else ""


def _unknown_message(name, known):
    return (f"unknown config field {name!r}.{did_you_mean(name, known)} Valid fields: "
            f"{', '.join(known)}. Received: {name}")


def parse_assignments(pairs):
    """``["lr=0.1", "optimizer=adam"]`` -> dict of strings (ConfigError if malformed)."""
    out = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set expects NAME=VALUE. Received: {pair!r}")
        out[name.strip()] = value.strip()
    return out


def load_toml(path):
    """Read a TOML config file into a dict (ConfigError if unreadable/malformed)."""
    import tomllib
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    # A [config] table is accepted too, so one file can hold other sections.
    return data.get("config", data) if isinstance(data.get("config"), dict) else data


def to_dict(config):
    """The config as a JSON-ready dict (tuples become lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}


def field_defaults(config_cls):
    """``[(name, short type, default)]`` for listing."""
    hints = typing.get_type_hints(config_cls)
    return [(f.name, short_type(hints[f.name]), f.default if f.default is not dataclasses.MISSING
             else f.default_factory()) for f in fields(config_cls)]


def short_type(hint):
    """``int``, ``float | None``, ``tuple[str, ...]``: as a user would write it."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        return " | ".join(short_type(a) for a in args).replace("NoneType", "None")
    if origin in (tuple, list):
        inner = ", ".join("..." if a is Ellipsis else short_type(a) for a in args)
        return f"{origin.__name__}[{inner}]"
    return getattr(hint, "__name__", str(hint))


def choices(name):
    """The accepted values of a common field with a fixed set, else ()."""
    return _CHOICES.get(name, ())
