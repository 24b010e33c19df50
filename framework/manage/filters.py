"""What ``mindexp runs`` and ``gc`` select (experiments, statuses, tags, times,
``--where``), each argument checked up front. No pandas: the catalog answers
most listings without it."""
import datetime as _dt
import re

from ..errors import ConfigError
from ..rundir import where as condition

STATUSES = ("running", "completed", "failed", "interrupted", "diverged", "pruned")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class Filters:
    """What ``mindexp runs`` / ``gc`` select: each argument checked up front."""

    def __init__(self, experiments=None, statuses=None, tags=(), since=None, older=None,
                 where=None):
        self.experiments = _split(experiments)
        self.statuses = check_statuses(statuses)
        self.tags = list(tags or ())
        self.since = parse_time(since, "--since") if since else None
        self.older = parse_time(older, "--older") if older else None
        self.where = where
        if where:
            condition.parse(where)   # refused here, before any run or catalog is read


def check_statuses(text):
    """``"failed,interrupted"`` -> list, ConfigError naming an unknown status."""
    statuses = _split(text)
    for status in statuses:
        if status not in STATUSES:
            raise ConfigError(f"unknown status {status!r}; accepted: {', '.join(STATUSES)}. "
                              f"Received: --status {text}", field="status")
    return statuses


def parse_time(text, option):
    """``2h``, ``3d``, ``30m``, ``1w`` (that long ago) or a date/time
    (``2026-11-30``, ``2026-11-30T14:00``) -> a POSIX timestamp."""
    match = _DURATION.match(str(text).strip())
    if match:
        seconds = float(match[1]) * _SECONDS[match[2]]
        return _dt.datetime.now().timestamp() - seconds
    try:
        return _dt.datetime.fromisoformat(str(text).strip()).timestamp()
    except ValueError:
        raise ConfigError(f"{option} takes a duration (30m, 2h, 3d, 1w; units s, m, h, d, w) "
                          f"or a date (2026-11-30, 2026-11-30T14:00). Received: {option} {text}",
                          field=option.lstrip("-")) from None


def mentioned(*texts):
    """The names ``--where``/``--sort`` texts mention, bare or in backticks."""
    return {a or b for text in texts if text
            for a, b in re.findall(r"`([^`]+)`|([A-Za-z_][A-Za-z0-9_.]*)", text)}


def _split(text):
    if not text:
        return []
    items = text if isinstance(text, (list, tuple)) else [text]
    return [s.strip() for item in items for s in str(item).split(",") if s.strip()]
