"""Metrics of one checkpoint of a run on one split, appended to evaluations.csv."""
import csv
import io
import logging
import os

from ..callbacks import schema
from .. import layout
from ..define.transforms import apply_saved
from ..errors import MindexpError, RunDirError
from ._model import load_model, open_run

logger = logging.getLogger(__name__)

SPLITS = ("eval", "train")


def evaluate(run_dir, checkpoint="last", split="eval", record=True):
    """Evaluate checkpoint ``checkpoint`` of the run at ``run_dir`` on ``split``.

    The metrics are the experiment's ``metrics()`` computed as during
    training (``Model.eval`` on ``dataset("eval", ...)``: unshuffled, every
    sample), so a checkpoint saved at an epoch's end gives that epoch's
    eval.csv row, every column of it in its names (the loss too when the run
    added it because it watched ``eval_loss``). Returns a dict: ``evaluated_at,
    checkpoint, step, epoch, split`` and one value per metric; with ``record`` the row is appended to the run's
    evaluations.csv (:func:`record_row`). Bad input raises MindexpError before
    anything is written.
    """
    if split not in SPLITS:
        raise MindexpError(f"--split must be one of {', '.join(SPLITS)}. Received: {split!r}")
    run = open_run(run_dir)
    model = load_model(run, checkpoint)
    arrays = _split_arrays(model.exp, split)
    arrays = (apply_saved(run.dir, arrays[0]),) + tuple(arrays[1:])  # as the network was trained
    spec = _metrics_of_run(model.exp)
    if not spec:
        raise MindexpError(f"{model.exp.experiment_name()}.metrics() names no metric to evaluate")
    results = _run_eval(model, arrays, spec)
    from ..rundir.io import now_iso
    fixed = (now_iso(), model.checkpoint_file, model.step, model.epoch, split)
    row = {**dict(zip(layout.EVALUATIONS.columns, fixed)), **results}
    if record:
        record_row(run.dir, row)
    return row


def record_row(run_dir, row):
    """Append an evaluation's ``row`` to the run's evaluations.csv; RunDirError
    (one line naming the file) when the run's folder cannot be written (a
    read-only copy of a run: evaluating only reads it, the CLI still prints
    the metrics)."""
    path = os.path.join(run_dir, layout.EVALUATIONS_CSV)
    try:
        append_row(path, row)
        _register_evaluations(run_dir)
    except schema.NotAFileError as exc:
        raise RunDirError(f"not recorded: {exc}") from None
    except OSError as exc:
        raise RunDirError(f"not recorded in {path}: {exc.strerror}") from None


def _metrics_of_run(exp):
    """The metrics the run evaluated with: the experiment's, plus the loss the
    run added because early_stop or checkpoint_monitor watched ``eval_loss``."""
    from ..define.metrics import with_eval_loss
    cfg = exp.config
    return with_eval_loss(exp.metrics(), (cfg.early_stop, cfg.checkpoint_monitor))

def _register_evaluations(run_dir):
    """evaluations.csv is a log of the run a resume leaves as it is (no step to
    cut by); a run made before the registry gets none here (its resume writes one)."""
    from ..callbacks._registry import register_log, registered_logs
    if registered_logs(run_dir) is not None:
        register_log(os.path.join(run_dir, layout.EVALUATIONS_CSV), None, run_dir=run_dir)


def _split_arrays(exp, split):
    from ..define.data import as_arrays
    source = exp.source(split)
    if source is None:
        other = [s for s in SPLITS if s != split]
        raise MindexpError(f"{exp.experiment_name()} has no {split} split "
                           f"(source({split!r}) is None); accepted: --split {other[0]}. "
                           f"Received: --split {split}")
    return as_arrays(source, exp.columns, split)


def _run_eval(model, arrays, spec):
    from mindspore.train import Model
    from ..define.metrics import build_metrics, eval_network
    metrics = build_metrics(spec)
    # The eval network and indexes the runner evaluates with during training.
    eval_net = eval_network(model.net, model.exp.loss_fn())
    ms_model = Model(model.net, eval_network=eval_net, metrics=metrics, eval_indexes=[0, 1, 2])
    # "eval" batches without shuffling or dropping: also right for the train split's arrays.
    dataset = model.exp.dataset("eval", arrays)
    results = ms_model.eval(dataset, dataset_sink_mode=False)
    return {name: float(results[name]) for name in metrics}


def append_row(path, row):
    """Append one whole row to a CSV shared by concurrent commands.

    The header is written with the first row; an exclusive lock around the
    check and the single write keeps two evaluations from interleaving. A file
    written before (mindexp 0.3's evaluations.csv, without the loss a run
    added for ``eval_loss``) keeps its header: the row goes in under it, a
    column it lacks left out with one warning; a file of another command's
    columns is refused before anything is written.
    """
    import fcntl
    fd = schema.open_fd(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)  # never through a link
    with os.fdopen(fd, "a+", newline="", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.seek(0)
            header = next(csv.reader(f), None)
            values = _under_header(path, header, row)
            text = io.StringIO()
            writer = csv.writer(text, lineterminator="\n")
            if header is None:
                writer.writerow(list(row))
            writer.writerow(values)
            f.write(text.getvalue())
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _under_header(path, header, row):
    """The row's values in the order of the file's ``header`` (None: a new file)."""
    if header is None or header == list(row):
        return list(row.values())
    fixed = list(layout.EVALUATIONS.columns)
    if header[:len(fixed)] != fixed or not set(header) <= set(row):
        raise RunDirError(f"{path} has columns {','.join(header)}; this evaluation has "
                          f"{','.join(row)}; move the file away to start a new one")
    left_out = [c for c in row if c not in header]
    logger.warning("%s was written before and has no column %s: this evaluation's %s is "
                   "printed but not recorded there (move the file away to record every column)",
                   path, ", ".join(left_out), ", ".join(left_out))
    return [row[c] for c in header]
