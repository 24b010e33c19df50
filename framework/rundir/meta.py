"""run.json's fields and their types, and its one validating reader.

The listings, the commands aimed at a run and the run record read it
through :func:`read_meta`: a record that is not a JSON object, or whose field has the wrong type (``"params": [1, 2]``,
``"tags": "abc"``), raises :class:`UnreadableRun` naming the file and the
field, so a hand-damaged run is reported in one line instead of breaking a
listing or a command further on. Fields are optional (older runs lack some)
and unknown fields are accepted; only the type of a present field is checked.
"""
import os

from .. import layout
from ..errors import RunDirError
from .io import read_json

UNREADABLE = "unreadable"  # the status listings give a run whose run.json does not validate

_TEXT, _INT, _NUMBER, _OBJECT, _LIST, _NONE = "text", "integer", "number", "object", "list", "null"
_STRINGS = "strings"  # a list of strings
# Each field and the JSON types it may hold.
FIELDS = {
    "experiment": (_TEXT, _NONE), "run_id": (_TEXT, _NONE), "entry": (_TEXT, _NONE),
    "status": (_TEXT,), "started_at": (_TEXT, _NONE), "ended_at": (_TEXT, _NONE),
    "steps": (_INT, _NONE), "epochs": (_INT, _NONE), "total_steps": (_INT, _NONE),
    "final_loss": (_NUMBER, _NONE), "train_time_s": (_NUMBER, _NONE),
    "steps_per_s": (_NUMBER, _NONE), "device": (_TEXT, _NONE), "mode": (_TEXT, _NONE),
    "workers": (_INT, _NONE), "pid": (_INT, _NONE), "host": (_TEXT, _NONE),
    "versions": (_OBJECT, _NONE), "targets": (_OBJECT, _NONE), "tags": (_STRINGS, _NONE),
    "note": (_TEXT, _NONE), "params": (_OBJECT, _NONE), "error": (_TEXT, _NONE),
    "traceback": (_TEXT, _NONE), "signal": (_TEXT, _NONE), "stop_reason": (_TEXT, _NONE),
    "resumes": (_LIST, _NONE), "summary": (_OBJECT, _NONE), "provenance": (_OBJECT, _NONE),
    "rerun_of": (_OBJECT, _TEXT, _NONE), "study": (_TEXT, _NONE), "trial": (_INT, _NONE),
    "tuned": (_LIST, _OBJECT, _NONE),
}
_TYPE_NAMES = {_TEXT: "a string", _INT: "an integer", _NUMBER: "a number", _OBJECT: "an object",
               _LIST: "a list", _STRINGS: "a list of strings",
               _NONE: "null"}


class UnreadableRun(RunDirError):
    """run.json is missing, not JSON, not an object, or a field has the wrong type.

    ``path`` is the file, ``field`` the offending field (None for the whole file).
    """

    def __init__(self, message, path, field=None):
        super().__init__(message)
        self.path, self.field = path, field


def read_meta(run_dir, require=()):
    """run.json of ``run_dir`` as a dict, checked against :data:`FIELDS`;
    the fields in ``require`` must be present and not null.

    Raises :class:`UnreadableRun` (one line naming the file and the field).
    """
    path = os.path.join(os.fspath(run_dir), layout.RUN_JSON)
    try:
        meta = read_json(path)
    except RunDirError as exc:
        raise UnreadableRun(str(exc), path) from None
    check_meta(meta, path)
    for field in require:
        if meta.get(field) is None:
            raise UnreadableRun(f"{path}: field {field!r} is missing; "
                                f"it must be {_TYPE_NAMES[FIELDS[field][0]]}", path, field)
    return meta


def check_meta(meta, path):
    """Raise :class:`UnreadableRun` when ``meta`` (run.json's content) breaks :data:`FIELDS`."""
    if not isinstance(meta, dict):
        raise UnreadableRun(f"{path} must hold a JSON object. Received: {_shown(meta)}", path)
    for field, kinds in FIELDS.items():
        if field in meta and not any(_is(meta[field], kind) for kind in kinds):
            accepted = " or ".join(_TYPE_NAMES[k] for k in kinds)
            raise UnreadableRun(f"{path}: field {field!r} must be {accepted}. "
                                f"Received: {_shown(meta[field])}", path, field)


def _is(value, kind):
    if kind == _NONE:
        return value is None
    if kind == _TEXT:
        return isinstance(value, str)
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _NUMBER:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == _OBJECT:
        return isinstance(value, dict)
    if kind == _STRINGS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, list)


def _shown(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
