"""Tags and notes in run.json, updated atomically under a lock.

Two ``mindexp tag`` commands racing on one run both land: each takes an
exclusive ``flock`` on the run's ``.run.lock``, reads run.json, changes it
and replaces it atomically before letting the other in. The runner takes the
same lock for its final write of run.json, so a tag added while a run trains
survives the run's end.
"""
import re

from ..errors import ConfigError
from ..rundir.record import update_meta

_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:=-]{0,63}$")
TAG_RULE = ("1-64 characters of letters, digits, '.', '_', ':', '=', '-', "
            "starting with a letter or digit")


def check_tag(tag):
    """``tag`` if it is a valid tag name, else ConfigError saying what is accepted."""
    if not isinstance(tag, str) or not _TAG.match(tag):
        raise ConfigError(f"a tag must be {TAG_RULE}. Received: {tag!r}", field="tag")
    return tag


def check_tags(tags):
    """The tags in order, each checked, duplicates dropped (``--tag`` on run/sweep/tune)."""
    return list(dict.fromkeys(check_tag(t) for t in tags or ()))


def parse_changes(items):
    """``["+x", "-y"]`` -> ``(add, remove)``; ConfigError for anything else."""
    add, remove = [], []
    if not items:
        raise ConfigError("mindexp tag RUN expects at least one +TAG (add) or -TAG (remove). "
                          "Received: nothing", field="tag")
    for item in items:
        sign, name = item[:1], item[1:]
        if sign not in "+-" or not sign or not _TAG.match(name):
            raise ConfigError(f"tag changes are +TAG to add or -TAG to remove, a TAG being "
                              f"{TAG_RULE}. Received: {item!r}", field="tag")
        (add if sign == "+" else remove).append(name)
    return add, remove


def change_tags(run_dir, add=(), remove=()):
    """Add and remove tags of a run; returns its tags afterwards."""
    def change(meta):
        tags = [t for t in (meta.get("tags") or []) if t not in remove]
        meta["tags"] = tags + [t for t in add if t not in tags]
    return update_meta(run_dir, change)["tags"]


def set_note(run_dir, note):
    """Replace a run's note (an empty text removes it)."""
    def change(meta):
        meta["note"] = note or None
    return update_meta(run_dir, change)["note"]
