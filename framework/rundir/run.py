"""Run: a finished (or running) run directory, read back."""
from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Union

from ..callbacks import schema
from .. import layout
from ..errors import RunDirError
from .io import is_run_dir, read_json
from .meta import UnreadableRun, read_meta

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    from mindspore import nn

    from ..define.experiment import BaseExperiment


# What the readers of runs accept: a Run, or the path of a run directory (or of a
# folder of runs), alone or in a list.
RunOrPath = Union["Run", str, "os.PathLike[str]"]
RunsOrPaths = Union[RunOrPath, Iterable[RunOrPath]]


class Run:
    """A run directory: ``.config`` and ``.meta`` (dicts), ``.loss``,
    ``.params``, ``.grad_norm``, ``.eval``, ``.system`` (DataFrames, empty when absent),
    ``.system_by_rank`` (every node's or rank's system file), ``.targets``; :meth:`network` rebuilds the trained network."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.dir = os.path.abspath(os.fspath(path))
        if not os.path.exists(self.dir):
            raise RunDirError(f"{path} does not exist")
        if not is_run_dir(self.dir):
            raise RunDirError(f"{path} is not a run directory (it has no {layout.RUN_JSON})")

    @classmethod
    def found(cls, run_dir: str, meta: dict | None = None, config: dict | None = None) -> "Run":
        """A Run of ``run_dir``, an absolute path just seen to hold run.json
        (no second check); ``meta`` and ``config`` when already read."""
        run = cls.__new__(cls)
        run.dir = run_dir
        if meta is not None:
            run.__dict__["meta"], run.__dict__["config"] = meta, config
        return run

    def __repr__(self) -> str:
        return f"Run({self.dir!r}, status={self.status!r})"

    @functools.cached_property
    def meta(self) -> dict[str, Any]:
        """run.json: status, totals, provenance (read once)."""
        return read_meta(self.dir)

    @functools.cached_property
    def config(self) -> dict[str, Any]:
        """config.json: the full resolved config (read once)."""
        return _read_object(os.path.join(self.dir, layout.CONFIG_JSON))

    @property
    def run_id(self) -> str:
        """The run's id (its folder's name when run.json has none)."""
        return self.meta.get("run_id") or os.path.basename(self.dir)

    @property
    def status(self) -> str | None:
        """``running``, ``completed``, ``diverged``, ``failed``, ... (run.json)."""
        return self.meta.get("status")

    @property
    def targets(self) -> dict[str, Any]:
        """The experiment's known true parameter values."""
        return dict(self.meta.get("targets") or {})

    def read(self, name: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """A log of this run as a DataFrame (``"loss"``, ``"params"``, ...);
        ``columns``: only these (those the file lacks are left out), uncached.

        Raises RunDirError naming the file when it is truncated (a last row
        without line end) or malformed. A running run's last row may still
        be in flight: it is dropped instead.
        """
        path = schema.path_of(self.dir, name)
        partial = _ends_mid_row(path)
        if partial and self.status != "running":
            raise RunDirError(f"{path} is truncated: its last row has no line end "
                              "(the file was cut while being written or copied)")
        columns = None if columns is None else list(columns)
        table = _parse_csv(path, columns)
        if partial:  # no rows parsed: even the header is still in flight
            table = table.iloc[:-1] if len(table) else table.iloc[:0, :0]
        log = schema.LOGS.get(name)  # reports rely on a log's required columns
        required = log.required if log else ()
        _check_columns(path, table, [c for c in required if columns is None or c in columns])
        return table

    def read_arrays(self, name: str,
                    columns: Iterable[str] | None = None) -> dict[str, np.ndarray]:
        """``columns`` of a log (every column when None) as numpy arrays by name
        (those the file lacks are left out; text columns as object arrays),
        checked as :meth:`read` checks them, without a DataFrame: what a table
        over many runs takes from each (``history``), and a run's summary at
        its end (pandas' import alone is half a CPU-second)."""
        columns = None if columns is None else list(columns)
        path = schema.path_of(self.dir, name)
        if not _ends_mid_row(path):
            arrays = _parse_arrays(path, columns)
            if arrays is not None and _plainly_valid(arrays, schema.LOGS.get(name), columns):
                return arrays
        # a row in flight, text, an empty field, a missing column: read() decides, naming the line
        table = self.read(name, columns)
        return {str(c): table[c].to_numpy() for c in table.columns}

    @functools.cached_property
    def loss(self) -> pd.DataFrame:
        """loss.csv (read once)."""
        return self.read(schema.LOSS.name)

    @functools.cached_property
    def params(self) -> pd.DataFrame:
        """params.csv (read once)."""
        return self.read(schema.PARAMS.name)

    @functools.cached_property
    def grad_norm(self) -> pd.DataFrame:
        """grad_norm.csv (read once)."""
        return self.read(schema.GRAD_NORM.name)

    @functools.cached_property
    def eval(self) -> pd.DataFrame:
        """eval.csv (read once)."""
        return self.read(schema.EVAL.name)

    @functools.cached_property
    def system(self) -> pd.DataFrame:
        """system.csv: the process's and machine's load during the run (may be empty)."""
        return self.read(schema.SYSTEM.name)

    @functools.cached_property
    def system_by_rank(self) -> dict[int, pd.DataFrame]:
        """system.csv (rank 0) and the ``system.rankN.csv`` of the other nodes'
        first workers (or of every rank, ``log_all_ranks``), by global rank."""
        return {rank: self.system if rank == 0 else self.read(os.path.basename(path))
                for rank, path in schema.rank_files(self.dir, schema.SYSTEM.name).items()}

    def checkpoint(self, best: bool = False) -> str | None:
        """Path of the last checkpoint, or (``best``) of the best one, or None
        when the run has none: what :meth:`checkpoint_path` picks."""
        from .checkpoints import NoCheckpointError
        try:
            return self.checkpoint_path("best" if best else "last")
        except NoCheckpointError:
            return None

    def checkpoint_path(self, checkpoint: str | int = "last") -> str:
        """The file of ``checkpoint``: ``"last"`` (the newest), ``"best"`` (the
        best-ranked by the run's checkpoint_monitor and its direction), a step
        number or a path; one that loads and holds finite weights (see
        :func:`mindexp.rundir.checkpoints.choose_checkpoint`).

        Raises RunDirError (one line, naming what exists) when there is none.
        """
        from .checkpoints import choose_checkpoint
        return choose_checkpoint(self, checkpoint).path

    def network(self, checkpoint: str | int = "last", best: bool = False,
                net: nn.Cell | None = None) -> nn.Cell:
        """Rebuild the experiment's network with a checkpoint loaded into it,
        ready for inference: ``checkpoint`` is ``"last"``, ``"best"``, a step
        number or a path (``best=True`` is the older spelling of ``"best"``).
        ``net``: a network the caller built to load it into instead (a
        script's run records no class to rebuild from); every one of its
        parameters must be in the checkpoint."""
        import mindspore as ms
        from .checkpoints import choose_checkpoint
        chosen = choose_checkpoint(self, "best" if best else checkpoint)
        target = self.experiment().network() if net is None else net
        missing, _ = ms.load_param_into_net(target, chosen.params, strict_load=False)
        if net is not None and missing:
            raise RunDirError(f"checkpoint {chosen.path} does not fit the network given: it "
                              f"lacks {', '.join(missing[:5])}; accepted: a network with the "
                              f"run's parameter names. Received: net={type(net).__name__}")
        return target

    def predictor(self, checkpoint: str | int = "last") -> Callable[[Any], np.ndarray]:
        """A function from raw inputs (an array of samples of the first column) to
        the network's outputs (checkpoint ``checkpoint``), applying the run's fitted
        input transform first, as ``mindexp predict`` does."""
        import mindspore as ms
        import numpy as np
        from ..define.transforms import load_state
        net = self.network(checkpoint)
        net.set_train(False)
        loaded = load_state(self.dir)

        def predict(x: Any) -> np.ndarray:
            x = np.asarray(x)
            x = x.astype(np.float32) if x.dtype == np.float64 else x
            if loaded is not None:
                x = loaded[0].apply(x, loaded[1])
            out = net(ms.Tensor(x))
            while isinstance(out, (tuple, list)):  # the first output is the prediction
                out = out[0]
            return out.asnumpy()
        return predict

    def experiment(self) -> BaseExperiment:
        """The run's experiment, built from its entry and config.json."""
        from ..define.entry import load_experiment
        return load_experiment(read_meta(self.dir, require=("entry",))["entry"])(self.config)


def _read_object(path: str) -> dict[str, Any]:
    """config.json as a dict; :class:`UnreadableRun` (the run is listed
    ``unreadable``, like one whose run.json is damaged) when it cannot be."""
    try:
        data = read_json(path)
    except RunDirError as exc:
        raise UnreadableRun(str(exc), path) from None
    if not isinstance(data, dict):
        raise UnreadableRun(f"{path} must hold a JSON object. Received: {type(data).__name__}",
                            path)
    return data


def _ends_mid_row(path: str) -> bool:
    """True when the file's last byte is not a line end (CsvLog always writes whole rows)."""
    try:
        with schema.open_file(path) as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except FileNotFoundError:
        return False
    except schema.NotAFileError as exc:  # a FIFO, folder or link in the log's place
        raise RunDirError(str(exc)) from None


def _parse_csv(path: str, columns: list[str] | None = None) -> pd.DataFrame:
    from ..callbacks import CsvFormatError
    try:
        return schema.read_csv(path, columns=columns)
    except (CsvFormatError, schema.NotAFileError) as exc:  # each names the file already
        raise RunDirError(str(exc)) from None
    except Exception as exc:  # pandas' parser errors name no file
        raise RunDirError(f"{path} is not a readable CSV ({str(exc).splitlines()[0]})") from None


def _parse_arrays(path: str, columns: list[str] | None) -> dict[str, np.ndarray] | None:
    try:
        return schema.read_arrays(path, columns, text=schema.TEXT_COLUMNS)
    except Exception:  # read() parses it again and says what is wrong
        return None


def _plainly_valid(arrays: dict[str, np.ndarray], log: schema.Log | None,
                   columns: list[str] | None) -> bool:
    """True when nothing needs read()'s checks: numbers throughout (text in the
    text columns), integers in the integer columns, every required column asked
    for present."""
    if not arrays:
        return True   # a missing or empty file: no rows, no columns
    required = log.required if log else ()
    return all(c in arrays for c in required if columns is None or c in columns) and all(
        a.dtype.kind in _KINDS.get(c, "iuf") for c, a in arrays.items())


# the numpy kinds a column may hold without read()'s checks (the others: numbers)
_KINDS = {**{c: "iu" for c in schema.INTEGER_COLUMNS}, **{c: "OU" for c in schema.TEXT_COLUMNS}}


def _check_columns(path: str, table: pd.DataFrame, required: Iterable[str]) -> None:
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


def _check_numbers(path: str, values: pd.Series, integer: bool) -> None:
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
