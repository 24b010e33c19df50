"""A table cell as text, for people: config values and ages. No pandas or
numpy here: ``mindexp runs`` prints its table through these without them."""
from __future__ import annotations

import math
from typing import Any


def format_value(value: Any) -> str:
    """A config value as a user would type it (``0.1``, ``true``, ``none``, ``a,b``)."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(map(format_value, value))
    return str(value)


def format_age(seconds: float | None) -> str:
    """``45s``, ``12m``, ``5h``, ``3d`` (``-`` when unknown)."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
