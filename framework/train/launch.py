"""Start a run: in this process, under msrun (the launcher and each worker),
or as a rank of the user's own msrun. A resume is the ``resume`` argument
of :func:`train`, not another path."""
from typing import Any, Callable
import contextlib
import dataclasses
import logging
import os

from ..define import config as _config
from .. import layout
from ..callbacks._mindspore import local_rank_id
from ..define.entry import load_experiment
from ..define.experiment import training_in
from ..errors import TrainingError
from ..rundir.io import check_experiment_name
from ..rundir.record import RunRecord
from . import mlflow_stream
from .preflight import prepare
from .request import RunRequest
from .lifecycle import Finish, RunLifecycle, hold_new_run, hold_signals, open_record
from .session import Session

logger = logging.getLogger(__name__)


def train(request: RunRequest, finish: Finish | None = None,
          keep: Callable[[str], None] | None = None) -> str | None:
    """Train what ``request`` declares and return its run directory (None on a
    rank other than 0 under the user's own msrun, and in msrun's scheduler
    process).

    A new run goes to a new directory under ``request.out``, locked from its
    creation to its final record; with ``request.resume`` (a
    :class:`~mindexp.train.resume.Resume` from ``prepare_resume``, whose
    caller holds the run's lock) the run continues in its own directory.
    ``finish(run_dir, status)`` (the plots) runs before run.json is final. From
    before the folder exists until run.json is final, SIGINT/SIGTERM only
    stop the run cleanly (:class:`~mindexp.train.signals.SignalStop`).
    ``keep(run_dir)`` runs once run.json is final, before the run's lock is
    released (also when training failed): what it reads, no ``mindexp gc``
    can have removed meanwhile (gc takes a run only once its lock is free).
    Raises ConfigError/DataError before anything is created, TrainingError
    (after run.json says failed) when training itself fails.
    """
    from . import distributed
    check_experiment_name(request.experiment_name)  # before anything is prepared or created
    if distributed.msrun_scheduler():  # msrun runs the user's command as its scheduler too
        distributed.serve_as_scheduler()
        return None
    resume = request.resume
    if distributed.under_msrun() and resume is None:  # started by the user's own msrun
        return _train_as_worker_of_own_msrun(request, finish)
    if distributed.under_msrun():
        finish = None  # ranks leave the cluster together: no rank 0 drawing alone
    workers = request.config.workers
    plan = prepare(request.experiment, workers=workers)
    _check_before_writing(request, plan)
    with contextlib.ExitStack() as held:
        # msrun's launcher forwards a signal to its workers (distributed.launch):
        # only a run trained here keeps SIGINT/SIGTERM until run.json is final.
        stopper = hold_signals(held) if workers <= 1 else None
        if resume is None:
            run_dir = hold_new_run(held, request.out, request.experiment_name,
                                   request.label)  # released last
            if request.created is not None:
                request.created(run_dir)
            previous = None
        else:
            run_dir, previous = resume.run_dir, resume.meta
            from .resume import truncate_logs
            truncate_logs(run_dir, resume.step)
        try:
            if workers > 1:
                done: str | None = launch_workers(request, run_dir, previous=previous,
                                                  finish=finish)
            else:
                done = _train_in(request, plan, run_dir, previous=previous, stopper=stopper,
                                 finish=finish)
        except TrainingError as exc:
            if keep is not None and exc.run_dir is not None:
                keep(os.fspath(exc.run_dir))
            raise
        if keep is not None and done is not None:
            keep(done)  # before the lock is released (``held``): gc may remove it after
        return done


def _check_before_writing(request: RunRequest, plan: Any) -> None:
    """What is refused before a new run's folder exists, or before a resumed
    run's files change: a ``.mindexpignore`` that cannot be read (what capture
    must leave out is unknown), a checkpoint the config's network and
    optimizer cannot load (another optimizer, another shape)."""
    from ..provenance.capture import check_ignore_file
    check_ignore_file(request.experiment)
    if request.resume is not None:
        from .resume import check_checkpoint_loads
        check_checkpoint_loads(request.experiment, request.resume, plan.steps_per_epoch)


def launch_workers(request: RunRequest, run_dir: str, previous: dict[str, Any] | None = None,
                   finish: Finish | None = None) -> str:
    """Train with ``config.workers`` msrun workers; the launcher keeps run.json true
    when a worker dies (status failed with that worker's last log lines), and
    runs ``finish(run_dir, status)`` after them."""
    from . import distributed
    workers = request.config.workers
    record = RunRecord(run_dir, previous) if previous else _new_record(request, run_dir)
    record.write_config(_config.to_dict(request.config))
    if previous is None:
        _capture_provenance(request, record, None)  # the workers keep this block
    if request.mlflow:
        mlflow_stream.note_uri(record.meta, request.mlflow)
    record.running(workers=workers)
    if request.mlflow:
        mlflow_stream.start_sender(run_dir, request.mlflow, request.mlflow_parent)
    code = distributed.launch(run_dir, workers, resume=request.resume is not None)
    record = RunRecord.read(run_dir)
    if code != 0 and record.status in ("running", "completed"):
        log, tail = distributed.worker_failure(run_dir)
        record.failed(f"msrun exited with status {code}; last lines of msrun/{log}:\n{tail}")
        record.write()
    mlflow_stream.run_ended(run_dir)  # a sender still waiting: the end-of-run sync
    if finish is not None:
        finish(run_dir, record.status)
    if record.status == "failed":
        raise TrainingError(record.meta["error"].splitlines()[0], run_dir=run_dir)
    return run_dir


def run_worker(run_dir: str, resume: bool = False) -> str | None:
    """One msrun worker of a launched run: join the cluster and train; rank 0 writes."""
    from . import distributed
    from ..rundir.io import read_json
    rank, size = distributed.init_data_parallel()
    meta = RunRecord.read(run_dir).meta
    exp = load_experiment(meta["entry"])(read_json(os.path.join(run_dir, layout.CONFIG_JSON)))
    plan = prepare(exp, workers=size, check_network=False)  # the launcher checked it
    point = None
    if resume:
        from .resume import resume_point  # the launcher already checked the run
        point = resume_point(run_dir, meta)
    request = RunRequest(exp, out=os.path.dirname(os.path.dirname(run_dir)),
                         entry=meta["entry"], resume=point)
    return _train_in(request, plan, run_dir, previous=meta if resume else None,
                     shard=(size, rank))


def _train_as_worker_of_own_msrun(request: RunRequest, finish: Finish | None = None) -> str | None:
    """One rank of the user's own msrun (one node or several). Rank 0 runs
    ``finish`` (the plots) and the others wait for it at a barrier: a rank 0
    still working after the others left the cluster is declared timed out."""
    from . import distributed
    rank, size = distributed.init_data_parallel()
    plan = prepare(request.experiment, workers=size)
    with contextlib.ExitStack() as held:
        if rank == 0:  # rank 0 writes the run, so it holds its lock
            run_dir = _create_shared_run_dir(request, held)
        else:
            run_dir, request = _joined_run_dir(request, rank)
        done = _train_in(request, plan, run_dir, shard=(size, rank),
                         finish=finish if rank == 0 else None)
    distributed.barrier()
    return done


def _create_shared_run_dir(request: RunRequest, held: contextlib.ExitStack) -> str:
    """Rank 0: create the locked run folder and send its id to every rank."""
    from . import distributed
    return distributed.create_shared_run_dir(held, request.out, request.experiment_name,
                                             request.label)


def _joined_run_dir(request: RunRequest, rank: int) -> tuple[str, RunRequest]:
    """A rank other than 0: rank 0's run folder (see
    :func:`~mindexp.train.distributed.joined_run_dir`) and the request this rank
    trains (one that writes no rank files where the folder is not visible)."""
    from . import distributed
    run_dir = distributed.joined_run_dir(request.out, request.experiment_name)
    if distributed.visible(run_dir):
        return run_dir, request
    _warn_unrecorded(request.config, run_dir, rank)
    # rank files would go into a folder of their own on this node: none at all
    unlogged = request.with_config(dataclasses.replace(request.config, log_all_ranks=False))
    return distributed.unseen_rank_dir(request.out, request.experiment_name, rank), unlogged


def _warn_unrecorded(cfg: Any, run_dir: str, rank: int) -> None:
    """One warning line when this rank would have written files of its own."""
    system = bool(cfg.system_every_s) and (cfg.log_all_ranks or local_rank_id() == 0)
    if not (system or cfg.log_all_ranks):
        return
    what = " and rank %d's logs" % rank if cfg.log_all_ranks else ""
    logger.warning("this node's system metrics%s are not recorded: the run folder %s is not "
                   "visible on this node (share the output root: --out on a shared file "
                   "system)", what, run_dir)


def _train_in(request: RunRequest, plan: Any, run_dir: str, previous: dict[str, Any] | None = None,
              shard: tuple[int, int] = (1, 0), stopper: Any = None,
              finish: Finish | None = None) -> str | None:
    """Train in this process (one rank of ``shard``); returns ``run_dir`` (None
    on a rank that does not write). ``finish(run_dir, status)`` runs on rank 0 once
    training ended, with the run's final status, before the final write of run.json."""
    writer = shard[1] == 0  # rank 0 alone writes the run directory
    record = _new_record(request, run_dir, writer)
    record.meta["workers"] = shard[0]
    record.meta["total_steps"] = plan.steps_per_epoch * request.config.epochs  # progress, ETA
    resume = request.resume
    if previous is not None:
        assert resume is not None, "a previous record is a resume's"
        record.resumed_from(previous, resume.step, resume.path)
    if writer:
        _capture_provenance(request, record, previous)
    # (an msrun worker does not write: its launcher streams to MLflow)
    open_record(record, _config.to_dict(request.config), request.mlflow, request.mlflow_parent)
    from ..callbacks._registry import run_declared
    built = (lambda: _capture_built(request, plan, record)) if writer else None
    session = Session(request, plan, run_dir, shard, stopper, built)
    # the same lifecycle as a tracked script's run: it decides the status, writes
    # error.txt and the final record (finish: the plots first), raises TrainingError
    life = RunLifecycle(record, session.stopper, stopped=session.stopped,
                        totals=lambda meta, elapsed: session.summarize(meta, elapsed, resume),
                        finish=finish)
    # every log opened inside the run folder registers with it; the experiment's
    # hooks read the folder as ``self.run_dir``
    with run_declared(run_dir), training_in(request.experiment, run_dir), life:
        session.execute(resume)
    return run_dir if writer else None


def _capture_built(request: RunRequest, plan: Any, record: RunRecord) -> None:
    """The user's modules the experiment imported and its data's fingerprint, into
    the capture of this run (or of this resume), once they are loaded."""
    from ..provenance import capture
    exp = request.experiment
    capture.capture_built(exp, request.config, plan, record)
    if plan.input_state is not None:  # what predict, evaluate and export apply
        from ..define.transforms import META_KEY, save_state
        record.meta[META_KEY] = save_state(record.run_dir, exp, plan.input_state)
    record.write()


def _new_record(request: RunRequest, run_dir: str, writer: bool = True) -> RunRecord:
    return RunRecord.new(run_dir, request.experiment_name, request.entry, request.config,
                         request.experiment.targets(), writer, tags=list(request.tags),
                         note=request.note, fields=dict(request.fields) or None)


def _capture_provenance(request: RunRequest, record: RunRecord,
                        previous: dict[str, Any] | None) -> None:
    """Source, git, packages and command into the run directory and its record;
    a resume keeps the original block and appends its own to its resume entry."""
    from ..provenance import capture
    meta = record.meta
    exp = request.experiment
    if previous is None:
        meta.update(capture.capture(exp, record.run_dir, meta["entry"],
                                    rerun_of=request.rerun_of, config_set=request.user_set()))
        return
    meta.update({k: previous.get(k) for k in (capture.F.META_KEY, capture.F.RERUN_KEY)})
    meta["resumes"][-1][capture.F.META_KEY] = capture.capture_resume(exp, record.run_dir,
                                                                     len(meta["resumes"]))
