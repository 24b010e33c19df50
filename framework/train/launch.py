"""Start a run: in this process, under msrun (the launcher and each worker),
or as a rank of the user's own msrun. A resume is the ``resume`` argument
of :func:`train`, not another path."""
import contextlib
import dataclasses
import logging
import os

from ..define import config as _config
from ..callbacks import schema
from ..callbacks._mindspore import local_rank_id
from ..define.entry import entry_of, load_experiment
from ..errors import TrainingError
from ..rundir.io import check_experiment_name
from ..rundir.record import RunRecord
from .preflight import prepare
from .session import Session
from .tracked import finish_record, hold_new_run, hold_signals, reserve_or_fail

logger = logging.getLogger(__name__)


def train(exp, out="outputs", label=None, quiet=True, entry=None, resume=None, finish=None):
    """Train ``exp`` and return its run directory (None on a rank other than 0
    under the user's own msrun, and in msrun's scheduler process).

    A new run goes to a new directory under ``out``, locked from its
    creation to its final record; with ``resume`` (a
    :class:`~mindexp.train.resume.Resume` from ``prepare_resume``, whose
    caller holds the run's lock) the run continues in its own directory.
    ``finish(run_dir, status)`` (the plots) runs before run.json is final. From
    before the folder exists until run.json is final, SIGINT/SIGTERM only
    stop the run cleanly (:class:`~mindexp.train.signals.SignalStop`).
    Raises ConfigError/DataError before anything is created, TrainingError
    (after run.json says failed) when training itself fails.
    """
    from . import distributed
    check_experiment_name(exp.experiment_name())  # before anything is prepared or created
    entry = entry or (resume.entry if resume else entry_of(exp))
    if distributed.msrun_scheduler():  # msrun runs the user's command as its scheduler too
        distributed.serve_as_scheduler()
        return None
    if distributed.under_msrun() and resume is None:  # started by the user's own msrun
        return _train_as_worker_of_own_msrun(exp, out, label, entry)
    workers = exp.config.workers
    plan = prepare(exp, workers=workers)
    with contextlib.ExitStack() as held:
        # msrun's launcher forwards a signal to its workers (distributed.launch):
        # only a run trained here keeps SIGINT/SIGTERM until run.json is final.
        stopper = hold_signals(held) if workers <= 1 else None
        if resume is None:
            run_dir = hold_new_run(held, out, exp.experiment_name(), label)  # released last
            previous = None
        else:
            run_dir, previous = resume.run_dir, resume.meta
            from .resume import truncate_logs
            truncate_logs(run_dir, resume.step)
        if workers > 1:
            return launch_workers(exp, run_dir, entry, resume=resume is not None,
                                  previous=previous, finish=finish)
        return _train_in(exp, plan, run_dir, quiet, entry, resume=resume, previous=previous,
                         stopper=stopper, finish=finish)


def launch_workers(exp, run_dir, entry, resume=False, previous=None, finish=None):
    """Train with ``config.workers`` msrun workers; the launcher keeps run.json true
    when a worker dies (status failed with that worker's last log lines), and
    runs ``finish(run_dir, status)`` after them."""
    from . import distributed
    record = RunRecord(run_dir, previous) if previous else _new_record(exp, run_dir, entry)
    record.write_config(_config.to_dict(exp.config))
    if previous is None:
        _capture_provenance(exp, record, None)  # the workers keep this block
    record.running(workers=exp.config.workers)
    code = distributed.launch(run_dir, exp.config.workers, resume=resume)
    record = RunRecord.read(run_dir)
    if code != 0 and record.status in ("running", "completed"):
        log, tail = distributed.worker_failure(run_dir)
        record.failed(f"msrun exited with status {code}; last lines of msrun/{log}:\n{tail}")
        record.write()
    if finish is not None:
        finish(run_dir, record.status)
    if record.status == "failed":
        raise TrainingError(record.meta["error"].splitlines()[0], run_dir=run_dir)
    return run_dir


def run_worker(run_dir, resume=False):
    """One msrun worker of a launched run: join the cluster and train; rank 0 writes."""
    from . import distributed
    from ..rundir.io import read_json
    rank, size = distributed.init_data_parallel()
    meta = RunRecord.read(run_dir).meta
    exp = load_experiment(meta["entry"])(read_json(os.path.join(run_dir, schema.CONFIG_JSON)))
    plan = prepare(exp, workers=size, check_network=False)  # the launcher checked it
    point = None
    if resume:
        from .resume import resume_point  # the launcher already checked the run
        point = resume_point(run_dir, meta)
    return _train_in(exp, plan, run_dir, True, meta["entry"], resume=point,
                     previous=meta if resume else None, shard=(size, rank))


def _train_as_worker_of_own_msrun(exp, out, label, entry):
    from . import distributed
    rank, size = distributed.init_data_parallel()
    plan = prepare(exp, workers=size)
    with contextlib.ExitStack() as held:
        if rank == 0:  # rank 0 writes the run, so it holds its lock
            run_dir = _create_shared_run_dir(exp, out, label, held)
        else:
            run_dir = _joined_run_dir(exp, out, rank)
        return _train_in(exp, plan, run_dir, True, entry, shard=(size, rank))


def _create_shared_run_dir(exp, out, label, held):
    """Rank 0: create the locked run folder and send its id to every rank."""
    from . import distributed
    try:
        run_dir = hold_new_run(held, out, exp.experiment_name(), label)
    except Exception:
        distributed.share_run_id(None)  # the other ranks wait for an id: none
        raise
    distributed.share_run_id(os.path.basename(run_dir))
    return run_dir


def _joined_run_dir(exp, out, rank):
    """A rank other than 0: rank 0's run folder when this node sees it (a shared
    output root), where this rank writes only its per-rank files; else a path
    never created, and this rank writes nothing (one warning when it would have)."""
    from . import distributed
    run_id = distributed.share_run_id(None)
    if not run_id:
        raise TrainingError("rank 0 created no run folder (rank 0's log says why)")
    run_dir = os.path.join(os.fspath(out), exp.experiment_name(), run_id)
    if _visible(run_dir):
        return run_dir
    _warn_unrecorded(exp.config, run_dir, rank)
    # rank files would go into a folder of their own on this node: none at all
    exp.config = dataclasses.replace(exp.config, log_all_ranks=False)
    return os.path.join(os.fspath(out), exp.experiment_name(), f".rank{rank}")


def _visible(run_dir):
    """True when ``run_dir`` exists from here; a listing of its parent first
    refreshes a network file system's cached lookup of a folder just made."""
    if os.path.isdir(run_dir):
        return True
    with contextlib.suppress(OSError):
        os.listdir(os.path.dirname(run_dir))
    return os.path.isdir(run_dir)


def _warn_unrecorded(cfg, run_dir, rank):
    """One warning line when this rank would have written files of its own."""
    system = bool(cfg.system_every_s) and (cfg.log_all_ranks or local_rank_id() == 0)
    if not (system or cfg.log_all_ranks):
        return
    what = " and rank %d's logs" % rank if cfg.log_all_ranks else ""
    logger.warning("this node's system metrics%s are not recorded: the run folder %s is not "
                   "visible on this node (share the output root: --out on a shared file "
                   "system)", what, run_dir)


def _train_in(exp, plan, run_dir, quiet, entry, resume=None, previous=None, shard=(1, 0),
              stopper=None, finish=None):
    """Train in this process (one rank of ``shard``); returns ``run_dir`` (None
    on a rank that does not write). ``finish(run_dir, status)`` runs on rank 0 once
    training ended, with the run's final status, before the final write of run.json."""
    exp.run_dir = run_dir
    writer = shard[1] == 0  # rank 0 alone writes the run directory
    record = _new_record(exp, run_dir, entry, writer)
    record.meta["workers"] = shard[0]
    record.meta["total_steps"] = plan.steps_per_epoch * exp.config.epochs  # progress, ETA
    if previous is not None:
        record.resumed_from(previous, resume.step, resume.path)
    if writer:
        _capture_provenance(exp, record, previous)
    record.write_config(_config.to_dict(exp.config))
    record.write()
    if writer:  # so run.json can still say why on a full disk
        reserve_or_fail(record)
    from ..callbacks._registry import run_declared
    with run_declared(run_dir):  # every log opened inside the run folder registers with it
        built = (lambda: _capture_built(exp, plan, record)) if writer else None
        Session(exp, plan, run_dir, quiet, shard, stopper, built).execute(record, resume)
    finish_record(record, finish)  # the same last writes as a tracked script's run
    if record.status == "failed":
        raise TrainingError(record.meta.get("error") or "training failed",
                            run_dir=run_dir if writer else None)
    return run_dir if writer else None


def _capture_built(exp, plan, record):
    """The user's modules the experiment imported and its data's fingerprint, into
    the capture of this run (or of this resume), once they are loaded."""
    from ..provenance import capture
    capture.capture_built(exp, plan, record)
    if plan.input_state is not None:  # what predict, evaluate and export apply
        from ..define.transforms import META_KEY, save_state
        record.meta[META_KEY] = save_state(record.run_dir, exp, plan.input_state)
    record.write()


def _new_record(exp, run_dir, entry, writer=True):
    # run_tags / run_note / run_fields: set by the command line, sweeps and tuning
    return RunRecord.new(run_dir, exp.experiment_name(), entry or entry_of(exp), exp.config,
                         exp.targets(), writer, tags=getattr(exp, "run_tags", None),
                         note=getattr(exp, "run_note", None),
                         fields=getattr(exp, "run_fields", None))


def _capture_provenance(exp, record, previous):
    """Source, git, packages and command into the run directory and its record;
    a resume keeps the original block and appends its own to its resume entry."""
    from ..provenance import capture
    meta = record.meta
    if previous is None:
        meta.update(capture.capture(exp, record.run_dir, meta["entry"]))
        return
    meta.update({k: previous.get(k) for k in (capture.F.META_KEY, capture.F.RERUN_KEY)})
    meta["resumes"][-1][capture.F.META_KEY] = capture.capture_resume(exp, record.run_dir,
                                                                     len(meta["resumes"]))
