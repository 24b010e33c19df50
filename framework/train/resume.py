"""Resume a run exactly from its latest good checkpoint."""
from typing import Any, Mapping
import logging
import os

from ..define import config as _config
from ..callbacks import schema
from .. import layout
from ..define.entry import load_experiment, refuse_script_run
from ..errors import MindexpError, RunDirError
from ..rundir.io import read_json
from ..rundir.meta import read_meta
from . import resume_checks
from .resume_point import Resume

logger = logging.getLogger(__name__)


def prepare_resume(run_dir: str, overrides: Mapping[str, Any] | None = None) -> tuple[Any, Resume]:
    """Check a run can resume; returns ``(experiment, Resume)``.

    Changes nothing on disk. Raises MindexpError (one line) for a completed
    run, a run without a usable checkpoint, or a path that is not a run.
    """
    run_dir = check_run_dir(run_dir)
    resume_checks.check_own_folders(run_dir)
    resume_checks.check_logs_readable(run_dir, run_logs(run_dir))
    meta = read_meta(run_dir, require=("entry",))
    refuse_script_run(run_dir, meta["entry"], "resume")  # its script resumes it (track)
    config = read_json(os.path.join(run_dir, layout.CONFIG_JSON))
    cls = load_experiment(meta["entry"])
    exp = cls({**config, **(overrides or {})})
    resume_checks.check_not_diverged_again(run_dir, meta, _config.to_dict(cls(config).config),
                                           _config.to_dict(exp.config))
    resume = resume_point(run_dir, meta)
    _check_not_done(meta, exp, resume, run_dir)
    _check_early_stop_asked(meta, overrides, run_dir)
    if overrides:  # only a changed config can change the network's shapes
        _check_checkpoint_fits(exp, resume, overrides)
    return exp, resume


def resume_point(run_dir: str, meta: dict[str, Any] | None = None) -> Resume:
    """The :class:`Resume` of ``run_dir`` (``meta``: its run.json, read when not
    given): its latest good checkpoint and what the run had reached there.

    Raises MindexpError (one line) when no checkpoint is usable.
    """
    meta = read_meta(run_dir) if meta is None else meta
    path, params, step, epoch = _latest_good_checkpoint(run_dir)
    time_offset, loss = _logged_at(run_dir, step)
    return Resume(path=path, params=params, step=step, epoch=epoch,
                  time_offset=time_offset, loss=loss,
                  early_stopped=bool(meta.get("stop_reason")),
                  run_dir=run_dir, meta=meta, entry=str(meta.get("entry") or ""))


def check_run_dir(run_dir: str | os.PathLike[str]) -> str:
    """The absolute path of ``run_dir``; RunDirError when it holds no run.json."""
    run_dir = os.path.abspath(os.fspath(run_dir))
    if not os.path.lexists(os.path.join(run_dir, layout.RUN_JSON)):
        raise RunDirError(f"cannot resume {run_dir}: not a run directory (no {layout.RUN_JSON})")
    return run_dir


def _check_not_done(meta: dict[str, Any], exp: Any, resume: Resume, run_dir: str) -> None:
    # Whether it still runs is the caller's lock's business (rundir.run_lock).
    if exp.config.epochs < resume.epoch:
        raise MindexpError(f"cannot resume {run_dir}: it trained {resume.epoch} epochs already "
                           f"(its latest checkpoint), more than epochs={exp.config.epochs}; "
                           f"pass --set epochs=N with N >= {resume.epoch}")
    if meta.get("status") == "completed" and resume.epoch >= exp.config.epochs:
        raise MindexpError(f"cannot resume {run_dir}: it is completed ({resume.epoch} of "
                           f"{exp.config.epochs} epochs); to train longer pass "
                           f"--set epochs=N with N > {resume.epoch}")


def _check_checkpoint_fits(exp: Any, resume: Resume, overrides: Mapping[str, Any]) -> None:
    """MindexpError (one line) when the network of the new config cannot load
    the checkpoint (``--set hidden=64`` on a run of 8): refused here, before
    config.json or the run's status change, not when training starts."""
    shapes = {name: tuple(p.shape) for name, p in exp.network().parameters_and_names()}
    for key, value in resume.params.items():
        name = _network_name(key, shapes)
        if name is None or not hasattr(value, "shape") or tuple(value.shape) == shapes[name]:
            continue
        given = " ".join(f"--set {k}={v}" for k, v in overrides.items())
        raise MindexpError(f"cannot resume {resume.run_dir}: its checkpoint does not fit the "
                           f"network of the new config ({name} is {tuple(value.shape)} in "
                           f"{os.path.basename(resume.path)}, {shapes[name]} in the network); "
                           f"keep the values that shape the network, or start a new run. "
                           f"Received: {given}")


def check_checkpoint_loads(exp: Any, resume: Resume, steps_per_epoch: int) -> None:
    """MindexpError (one line) when the checkpoint does not load into the train
    step the config builds (another optimizer, whose state it lacks; another
    network): loaded in memory, into a network and optimizer of its own, before
    any file of the run changes (a failed resume leaves the run resumable)."""
    from .session import train_cell
    cell, _ = train_cell(exp, exp.network(), steps_per_epoch)
    try:
        resume.load(cell)
    except (MindexpError, RuntimeError, ValueError, TypeError) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        given = " ".join(f"{k}={v}" for k, v in _changed_config(resume.run_dir, exp).items())
        raise MindexpError(f"cannot resume {resume.run_dir}: its checkpoint does not load into "
                           f"the network and optimizer of this config ({why}); keep the values "
                           f"that shape them (optimizer, network), or start a new run. Nothing "
                           f"was changed. Received: {given or 'its own config'}") from None


def _changed_config(run_dir: str, exp: Any) -> dict[str, Any]:
    """The config values of ``exp`` that differ from the run's config.json."""
    old = read_json(os.path.join(run_dir, layout.CONFIG_JSON))
    new = _config.to_dict(exp.config)
    return {k: v for k, v in new.items() if not isinstance(old, dict) or old.get(k) != v}


def _network_name(key: str, names: Any) -> str | None:
    """The network parameter a checkpoint entry is (``body.0.weight``) or holds
    optimizer state of (``moment1.body.0.weight``): the longest matching name."""
    if key in names:
        return key
    return max((n for n in names if key.endswith("." + n)), key=len, default=None)


# Overrides that say "train on" after an early stop.
CONTINUE_FIELDS = ("patience", "epochs", "early_stop", "min_delta")


def _check_early_stop_asked(meta: dict[str, Any], overrides: Mapping[str, Any] | None,
                            run_dir: str) -> None:
    """An early-stopped run continues only when asked (a new patience or epochs)."""
    if meta.get("status") != "completed" or not meta.get("stop_reason"):
        return
    if any(name in (overrides or {}) for name in CONTINUE_FIELDS):
        return
    raise MindexpError(f"cannot resume {run_dir}: it stopped early ({meta['stop_reason']}); "
                       "to train on pass --set patience=N or --set epochs=N (or change "
                       "early_stop or min_delta)")


def _latest_good_checkpoint(run_dir: str) -> tuple[str, dict[str, Any], int, int]:
    """``(path, params, step, epoch)`` of the newest checkpoint that loads and
    holds finite weights (the chooser's ``last``; a corrupt or non-finite newer
    one is skipped with a warning)."""
    from ..rundir.checkpoints import NoCheckpointError, choose_checkpoint
    from ..rundir.run import Run
    try:
        chosen = choose_checkpoint(Run(run_dir), "last")
    except NoCheckpointError as exc:
        what = f"no usable checkpoint ({exc.unusable} corrupt or not finite)" if exc.unusable \
            else "no checkpoint"
        raise MindexpError(f"cannot resume {run_dir}: it has {what} in checkpoints/") from None
    assert chosen.step is not None and chosen.epoch is not None  # a run's checkpoints say both
    return chosen.path, chosen.params, chosen.step, chosen.epoch


def run_logs(run_dir: str) -> dict[str, str | None]:
    """``{name in the run folder: step column or None}`` of every log of the
    run: its registry (``logs.json``), or for a run made before registries
    (mindexp 0.3) the logs 0.3 wrote (:func:`_legacy_logs`). Writes nothing."""
    from ..callbacks._registry import registered_logs
    logs = registered_logs(run_dir)
    return _legacy_logs(run_dir) if logs is None else logs


def truncate_logs(run_dir: str, step: int) -> None:
    """Cut every log registered with the run back to ``step``, each by its own
    step column, so the resumed run writes each step once. A CSV in the run
    folder that nothing registered is left as it is, with one warning naming it.
    A run made before registries gets one now, of the logs 0.3 wrote."""
    from ..callbacks._registry import register_log, registered_logs
    logs = registered_logs(run_dir)
    if logs is None:  # a run made before the registry (0.3): written at its first resume
        logs = _legacy_logs(run_dir)
        for name, column in logs.items():
            register_log(os.path.join(run_dir, name), column, run_dir=run_dir)
    for name, column in sorted(logs.items()):
        if column is not None:
            _cut_log(os.path.join(run_dir, name), column, step)
    for path in _unregistered_csvs(run_dir, logs):
        logger.warning("%s: a CSV no writer registered with the run, left as it is: resume cuts "
                       "back only registered logs (a CsvLog inside the run folder, or "
                       "register_log)", path)


def _cut_log(path: str, column: str | None, step: int) -> None:
    from ..callbacks.csv_log import CsvLog, read_header
    header = read_header(path)
    if not header:
        return
    if column not in header:
        logger.warning("%s: registered with step column %r, which it lacks (columns %s); "
                       "left as it is", path, column, ",".join(header))
        return
    CsvLog(path, header).truncate_after(step, column)


def _legacy_logs(run_dir: str) -> dict[str, str | None]:
    """The logs of a run made before registries: mindexp 0.3's logs (each rank's
    file too) by their step column, and evaluations.csv, which no resume cuts.
    Only here does ``schema.STEP_LOGS`` decide which logs a resume cuts."""
    logs: dict[str, str | None] = {}
    for name in schema.STEP_LOGS:
        for path in schema.rank_files(run_dir, name).values():
            filename = os.path.basename(path)
            log = schema.log_of_file(filename)
            assert log is not None  # one of the schema's own logs
            logs[filename] = log.step_column
    logs[layout.EVALUATIONS_CSV] = None
    return logs


# Folders of a run that hold no logs of it (copies of the user's code, msrun's own files).
_NOT_LOGS = (layout.SOURCE_DIR, layout.MSRUN_DIR, schema.CHECKPOINT_DIR)


def _unregistered_csvs(run_dir: str, logs: Any) -> list[str]:
    """The CSV files under ``run_dir`` that are not in ``logs``, sorted."""
    found = []
    for folder, dirs, files in os.walk(run_dir):
        if folder == run_dir:
            dirs[:] = [d for d in dirs if d not in _NOT_LOGS]
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), run_dir).replace(os.sep, "/")
            if name.endswith(".csv") and rel not in logs:
                found.append(os.path.join(folder, name))
    return sorted(found)


def _logged_at(run_dir: str, step: int) -> tuple[float, float | None]:
    """``(time_s, loss)`` of loss.csv at ``step``: each the last one logged up to it."""
    logged: dict[str, float | None] = {schema.Col.TIME_S: 0.0, schema.Col.LOSS: None}
    for row in schema.read_rows(schema.path_of(run_dir, schema.LOSS.name)):
        if (row.get(schema.Col.STEP) or "").isdigit() and int(row[schema.Col.STEP]) <= step:
            logged.update({k: float(row[k]) for k in logged if row.get(k)})
    return logged[schema.Col.TIME_S] or 0.0, logged[schema.Col.LOSS]
