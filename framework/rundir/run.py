"""Run: a finished (or running) run directory, read back."""
import functools
import os

from ..callbacks import schema
from ..errors import RunDirError
from .io import is_run_dir, read_json
from .meta import read_meta


class Run:
    """A run directory: ``.config`` and ``.meta`` (dicts), ``.loss``,
    ``.params``, ``.grad_norm``, ``.eval`` (DataFrames, empty when absent),
    ``.targets``; :meth:`network` rebuilds the trained network."""

    def __init__(self, path):
        self.dir = os.path.abspath(os.fspath(path))
        if not os.path.exists(self.dir):
            raise RunDirError(f"{path} does not exist")
        if not is_run_dir(self.dir):
            raise RunDirError(f"{path} is not a run directory (it has no {schema.RUN_JSON})")

    def __repr__(self):
        return f"Run({self.dir!r}, status={self.status!r})"

    @functools.cached_property
    def meta(self):
        return read_meta(self.dir)

    @functools.cached_property
    def config(self):
        return _read_object(os.path.join(self.dir, schema.CONFIG_JSON))

    @property
    def run_id(self):
        return self.meta.get("run_id") or os.path.basename(self.dir)

    @property
    def status(self):
        return self.meta.get("status")

    @property
    def targets(self):
        return dict(self.meta.get("targets") or {})

    def read(self, name):
        """A log of this run as a DataFrame (``"loss"``, ``"params"``, ...).

        Raises RunDirError naming the file when it is truncated (a last row
        without line end) or malformed. A running run's last row may still
        be in flight: it is dropped instead.
        """
        path = schema.path_of(self.dir, name)
        partial = _ends_mid_row(path)
        if partial and self.status != "running":
            raise RunDirError(f"{path} is truncated: its last row has no line end "
                              "(the file was cut while being written or copied)")
        table = _parse_csv(path)
        if partial:  # no rows parsed: even the header is still in flight
            table = table.iloc[:-1] if len(table) else table.iloc[:0, :0]
        log = schema.LOGS.get(name)  # reports rely on a log's required columns
        _check_columns(path, table, log.required if log else ())
        return table

    @functools.cached_property
    def loss(self):
        return self.read(schema.LOSS.name)

    @functools.cached_property
    def params(self):
        return self.read(schema.PARAMS.name)

    @functools.cached_property
    def grad_norm(self):
        return self.read(schema.GRAD_NORM.name)

    @functools.cached_property
    def eval(self):
        return self.read(schema.EVAL.name)

    def checkpoint(self, best=False):
        """Path of the latest checkpoint, or of the newest best one, or None."""
        from ..callbacks import list_checkpoints
        found = list_checkpoints(self.dir, "best" if best else "last")
        return found[-1][2] if found else None

    def checkpoint_path(self, checkpoint="last"):
        """The file of ``checkpoint``: ``"last"`` (the newest regular one),
        ``"best"`` (the best by the run's checkpoint_monitor) or a step number.

        Raises RunDirError (one line, naming what exists) when there is none.
        """
        from .checkpoints import find_checkpoint
        return find_checkpoint(self, checkpoint)

    def network(self, checkpoint="last", best=False):
        """Rebuild the experiment's network with a checkpoint loaded into it,
        ready for inference: ``checkpoint`` is ``"last"``, ``"best"`` or a step
        number (``best=True`` is the older spelling of ``"best"``)."""
        import mindspore as ms
        path = self.checkpoint_path("best" if best else checkpoint)
        net = self.experiment().network()
        ms.load_param_into_net(net, ms.load_checkpoint(path), strict_load=False)
        return net

    def experiment(self):
        """The run's experiment, built from its entry and config.json."""
        from ..define.entry import load_experiment
        return load_experiment(read_meta(self.dir, require=("entry",))["entry"])(self.config)


def _read_object(path):
    data = read_json(path)
    if not isinstance(data, dict):
        raise RunDirError(f"{path} must hold a JSON object. Received: {type(data).__name__}")
    return data


def _ends_mid_row(path):
    """True when the file's last byte is not a line end (CsvLog always writes whole rows)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except FileNotFoundError:
        return False


def _parse_csv(path):
    from ..callbacks import CsvFormatError
    try:
        return schema.read_csv(path)
    except CsvFormatError as exc:  # names the file and line already
        raise RunDirError(str(exc)) from None
    except Exception as exc:  # pandas' parser errors name no file
        raise RunDirError(f"{path} is not a readable CSV ({str(exc).splitlines()[0]})") from None


def _check_columns(path, table, required):
    import pandas as pd
    if table.empty and not len(table.columns):
        return
    if not isinstance(table.index, pd.RangeIndex):
        raise RunDirError(f"{path} is malformed: its rows have more fields than its header")
    missing = [c for c in required if c not in table.columns]
    if missing:
        raise RunDirError(f"{path} is malformed: it lacks the column(s) {', '.join(missing)}. "
                          f"Received columns: {', '.join(map(str, table.columns))}")
    for column in table.columns:
        if column not in schema.TEXT_COLUMNS:
            _check_numbers(path, table[column], integer=column in schema.INTEGER_COLUMNS)


def _check_numbers(path, values, integer):
    import pandas as pd
    fine = pd.api.types.is_integer_dtype if integer else pd.api.types.is_numeric_dtype
    if fine(values):
        return
    numbers = pd.to_numeric(values, errors="coerce")
    bad = numbers.isna() & values.notna()  # text where a number belongs
    if integer:
        bad |= numbers.isna() | (numbers % 1 != 0)
    if not bad.any():
        return
    first = bad.idxmax()
    what = "integers" if integer else "numbers"
    shown = "an empty field" if pd.isna(values[first]) else repr(str(values[first]))
    raise RunDirError(f"{path} is malformed: column {values.name!r} must hold {what}. "
                      f"Received: {shown} on line {first + 2}")  # line 1: the header
