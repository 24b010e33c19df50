"""Run directories: race-free creation, atomic run.json, status."""
import datetime as _dt
import json
import os
import re
import secrets

from ..callbacks import schema
from .. import layout
from ..errors import ConfigError, RunDirError

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]{0,63}$")
# Lists and dicts nested deeper than this in a run's JSON files (or a config) are
# refused: no config needs them, and every reader that walks a value would
# otherwise meet Python's recursion limit (about 1,000) at a depth JSON accepts.
MAX_JSON_DEPTH = 100


def check_label(label, what="--name", field="name"):
    """A run label is safe in a file name and can never escape the root;
    ``what`` names it in the error (``--name``, ``track()'s name``, ``--study``)."""
    if label is None:
        return None
    if not isinstance(label, str) or not _LABEL.match(label) or ".." in label:
        raise ConfigError(f"{what} must be 1-64 characters of letters, digits, '.', '_', "
                          f"'-', '+', '=' (no '/', '..' or control characters). Received: {label!r}",
                          field=field)
    return label


def check_experiment_name(name):
    """An experiment's ``name`` names the folder of its runs: the rule of
    :func:`check_label` (no ``/``, ``..``, leading ``.``, control characters
    or ``$(``), so that it can neither leave ``--out`` nor hide its runs."""
    if not isinstance(name, str) or not _LABEL.match(name) or ".." in name:
        raise ConfigError("an experiment's name must be 1-64 characters of letters, digits, "
                          "'.', '_', '-', '+', '=', starting with a letter or digit (it names "
                          f"the folder of its runs). Received: name = {name!r}", field="name")
    return name


def now_iso():
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


def create_run_dir(root, experiment, label=None):
    """Make ``root/experiment/<run_id>`` with ``os.mkdir`` and return it.

    The run id is ``YYYYmmdd-HHMMSS[-label]-xxxxxx``; the random suffix and
    the retry on ``FileExistsError`` keep it unique when parallel processes
    start in the same second.
    """
    label = check_label(label)
    parent = os.path.join(os.fspath(root), check_experiment_name(experiment))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the output folder {parent}: {exc.strerror}",
                          field="out") from None
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for _ in range(100):
        run_id = "-".join(p for p in (stamp, label, secrets.token_hex(3)) if p)
        path = os.path.join(parent, run_id)
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(f"cannot create a run folder in {parent}: {exc.strerror}",
                              field="out") from None
    raise RunDirError(f"could not find a free run id in {parent}")


def write_json(path, data):
    """Write JSON atomically (:func:`schema.atomic_write`)."""
    text = json.dumps(data, indent=2, sort_keys=False, default=_jsonable) + "\n"
    schema.atomic_write(path, text)


def write_file(path, data):
    """Write text or bytes atomically (:func:`schema.atomic_write`)."""
    schema.atomic_write(path, data)


def read_json(path):
    """Read a JSON file, raising RunDirError naming it when missing, malformed,
    nested too deep for the parser, or not a regular file (a link, a FIFO, a
    directory: :func:`schema.open_file`, which never follows nor blocks)."""
    try:
        with schema.open_file(path, "r", encoding="utf-8") as f:
            text = f.read()
        data = json.loads(text)
    except FileNotFoundError:
        raise RunDirError(f"{path} does not exist") from None
    except schema.NotAFileError as exc:
        raise RunDirError(str(exc)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunDirError(f"{path} is not valid JSON ({exc})") from None
    except RecursionError:  # [[[[...]]]] 100,000 deep: damaged like any other
        raise RunDirError(f"{path} is not valid JSON (nested deeper than the parser "
                          "allows)") from None
    # (no value nests deeper than its text has brackets: most files need no walk)
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and too_deep(data):
        raise RunDirError(f"{path} nests lists or objects deeper than {MAX_JSON_DEPTH} "
                          "levels")
    return data


def too_deep(value, limit=MAX_JSON_DEPTH):
    """Whether ``value`` nests lists, tuples or dicts more than ``limit`` levels
    deep (walked without recursion: it is what the deep value would break)."""
    level = [value]
    for depth in range(1, limit + 2):
        level = [item for item in level if isinstance(item, (list, tuple, dict))]
        if not level:
            return False
        if depth > limit:
            return True
        level = [child for item in level
                 for child in (item.values() if isinstance(item, dict) else item)]
    return True


def is_run_dir(path):
    """True when ``path`` holds a run.json (a regular file, or something else
    in its place, which the readers then report as unreadable)."""
    return os.path.lexists(os.path.join(path, layout.RUN_JSON))


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


# The folders a run's own commands write into or delete from (resume's
# checkpoint retention, the plots drawn after a run, the experiment's figures).
WRITTEN_FOLDERS = (schema.CHECKPOINT_DIR, layout.PLOTS_DIR, layout.FIGURES_DIR)


def linked_out(run_dir, names=WRITTEN_FOLDERS):
    """Why a folder of ``run_dir`` that mindexp writes into or deletes from is
    not its own: ``"<path> is a link out of the run folder (to <target>)"``
    for the first of ``names`` that is a symbolic link whose target lies
    outside ``run_dir``, or None. A run folder may sit in a shared output
    folder: nothing of mindexp writes or deletes through such a link."""
    for name in names:
        path = os.path.join(os.fspath(run_dir), name)
        if os.path.islink(path) and not inside(run_dir, path):
            return f"{path} is a link out of the run folder (to {os.readlink(path)})"
    return None


def inside(root, path):
    """True when ``path``, resolved (symlinks, ``..``), lies strictly inside
    ``root`` (resolved too). Compares whole path components: a sibling
    ``runs-private`` is not inside ``runs``."""
    root, path = os.path.realpath(root), os.path.realpath(path)
    try:
        return path != root and os.path.commonpath([root, path]) == root
    except ValueError:  # different drives (Windows)
        return False
