"""Start a run, one of four ways, chosen once from the request
(:func:`choose_start`): in this process (:class:`InProcess`), as msrun's
launcher of its own workers (:class:`Launcher`), as one of those workers
(:class:`MsrunWorker`, :func:`run_worker`), or as one rank of the user's own
msrun (:class:`OwnMsrunRank`). Each is a :class:`Start`: ``start(request)``
returns the run directory. A resume is the request's ``resume``, not
another way."""
from typing import Any, Callable, ClassVar, Protocol, runtime_checkable
import contextlib
import dataclasses
import functools
import logging
import os

from ..define import config as _config
from .. import layout
from ..callbacks._mindspore import local_rank_id
from ..define.config import Config
from ..define.entry import load_experiment
from ..define.experiment import training_in
from ..errors import TrainingError
from ..rundir.io import check_experiment_name
from ..rundir.record import RunRecord
from . import distributed, mlflow_stream
from .preflight import Plan, prepare
from .request import RunRequest
from .lifecycle import Finish, RunLifecycle, hold_new_run, hold_signals, open_record
from .session import Session
from .signals import SignalStop

logger = logging.getLogger(__name__)

Keep = Callable[[str], None]  # keep(run_dir): told the final run, its lock still held


def train(request: RunRequest, finish: Finish | None = None, keep: Keep | None = None) -> str | None:
    """Train what ``request`` declares and return its run directory (None on a
    rank other than 0 under the user's own msrun, and in msrun's scheduler
    process).

    A new run goes to a new directory under ``request.out``, locked from its
    creation to its final record; with ``request.resume`` (a
    :class:`~mindexp.train.resume_point.Resume` from ``prepare_resume``, whose
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
    check_experiment_name(request.experiment_name)  # before anything is prepared or created
    return choose_start(request, finish, keep).start(request)


@runtime_checkable
class Start(Protocol):
    """One way to start a run."""

    def start(self, request: RunRequest) -> str | None:
        """Train ``request``; its run directory (None where this process writes none)."""


def choose_start(request: RunRequest, finish: Finish | None = None,
                 keep: Keep | None = None) -> Start:
    """How this process starts ``request``, read once from msrun's environment
    and the request (its resume, its config's ``workers``)."""
    if distributed.msrun_scheduler():  # msrun runs the user's command as its scheduler too
        return OwnMsrunScheduler()
    if distributed.under_msrun():
        if request.resume is None:  # started by the user's own msrun
            return OwnMsrunRank(finish)
        finish = None  # ranks leave the cluster together: no rank 0 drawing alone
    if request.config.workers > 1:
        return Launcher(finish, keep)
    return InProcess(finish, keep)


class OwnMsrunScheduler:
    """msrun's scheduler process of the user's own msrun: serves the cluster, trains nothing."""

    def start(self, request: RunRequest) -> None:
        """Serve msrun's cluster until its workers are done."""
        distributed.serve_as_scheduler()


@dataclasses.dataclass(frozen=True)
class InProcess:
    """A run trained in this process (a new run or a resume): its folder locked,
    SIGINT/SIGTERM held from before the folder exists until run.json is final.
    ``finish``, ``keep``: see :func:`train`."""

    finish: Finish | None = None
    keep: Keep | None = None
    holds_signals: ClassVar[bool] = True  # SIGINT/SIGTERM only stop the run cleanly

    def start(self, request: RunRequest) -> str | None:
        """Prepare, hold the run's folder and train it (see :func:`train`)."""
        plan = prepare(request.experiment, workers=request.config.workers)
        _check_before_writing(request, plan)
        with contextlib.ExitStack() as held:
            stopper = hold_signals(held) if self.holds_signals else None
            run_dir, previous = _hold_run_dir(request, held)  # released last
            try:
                done = self._train(request, plan, run_dir, previous, stopper)
            except TrainingError as exc:
                if self.keep is not None and exc.run_dir is not None:
                    self.keep(os.fspath(exc.run_dir))
                raise
            if self.keep is not None and done is not None:
                self.keep(done)  # before the lock is released (``held``): gc may remove it after
            return done

    def _train(self, request: RunRequest, plan: Plan, run_dir: str,
               previous: dict[str, Any] | None, stopper: SignalStop | None) -> str | None:
        return _train_here(request, plan, run_dir, previous=previous, stopper=stopper,
                           finish=self.finish)


class Launcher(InProcess):
    """A run of ``config.workers`` msrun workers launched from here: this
    process holds the run's folder and keeps its record true (see
    :func:`launch_workers`)."""

    # msrun's launcher forwards a signal to its workers (distributed.launch):
    # only a run trained here keeps SIGINT/SIGTERM until run.json is final.
    holds_signals: ClassVar[bool] = False

    def _train(self, request: RunRequest, plan: Plan, run_dir: str,
               previous: dict[str, Any] | None, stopper: SignalStop | None) -> str | None:
        return launch_workers(request, run_dir, previous=previous, finish=self.finish)


@dataclasses.dataclass(frozen=True)
class MsrunWorker:
    """One worker of a run :class:`Launcher` started (``shard``: the number of
    workers, this one's rank): trains its shard in the launcher's folder;
    rank 0 writes. ``previous``: the run's record when resuming."""

    run_dir: str
    shard: tuple[int, int]
    previous: dict[str, Any] | None = None

    def start(self, request: RunRequest) -> str | None:
        """Train this worker's shard of ``request``."""
        plan = prepare(request.experiment, workers=self.shard[0],
                       check_network=False)  # the launcher checked it
        return _train_here(request, plan, self.run_dir, previous=self.previous, shard=self.shard)


@dataclasses.dataclass(frozen=True)
class OwnMsrunRank:
    """One rank of the user's own msrun (one node or several). Rank 0 creates
    and locks the run's folder and runs ``finish`` (the plots); the others wait
    for it at a barrier: a rank 0 still working after the others left the
    cluster is declared timed out."""

    finish: Finish | None = None

    def start(self, request: RunRequest) -> str | None:
        """Join msrun's cluster and train this rank's shard."""
        rank, size = distributed.init_data_parallel()
        plan = prepare(request.experiment, workers=size)
        with contextlib.ExitStack() as held:
            if rank == 0:  # rank 0 writes the run, so it holds its lock
                run_dir = distributed.create_shared_run_dir(
                    held, request.out, request.experiment_name, request.label)
            else:
                run_dir, request = _joined_run_dir(request, rank)
            done = _train_here(request, plan, run_dir, shard=(size, rank),
                               finish=self.finish if rank == 0 else None)
        distributed.barrier()
        return done


def _hold_run_dir(request: RunRequest,
                  held: contextlib.ExitStack) -> tuple[str, dict[str, Any] | None]:
    """``(run_dir, previous record)``: a new locked folder (its lock released
    when ``held`` closes; ``request.created`` told), or the resumed run's own
    with its logs cut back to the resume's step."""
    resume = request.resume
    if resume is None:
        run_dir = hold_new_run(held, request.out, request.experiment_name, request.label)
        if request.created is not None:
            request.created(run_dir)
        return run_dir, None
    from .resume import truncate_logs
    truncate_logs(resume.run_dir, resume.step)
    return resume.run_dir, resume.meta


def _check_before_writing(request: RunRequest, plan: Plan) -> None:
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
    from ..rundir.io import read_json
    rank, size = distributed.init_data_parallel()
    meta = RunRecord.read(run_dir).meta
    exp = load_experiment(meta["entry"])(read_json(os.path.join(run_dir, layout.CONFIG_JSON)))
    point = None
    if resume:
        from .resume import resume_point  # the launcher already checked the run
        point = resume_point(run_dir, meta)
    request = RunRequest(exp, out=os.path.dirname(os.path.dirname(run_dir)),
                         entry=meta["entry"], resume=point)
    worker = MsrunWorker(run_dir, (size, rank), previous=meta if resume else None)
    return worker.start(request)


def _joined_run_dir(request: RunRequest, rank: int) -> tuple[str, RunRequest]:
    """A rank other than 0: rank 0's run folder (see
    :func:`~mindexp.train.distributed.joined_run_dir`) and the request this rank
    trains (one that writes no rank files where the folder is not visible)."""
    run_dir = distributed.joined_run_dir(request.out, request.experiment_name)
    if distributed.visible(run_dir):
        return run_dir, request
    _warn_unrecorded(request.config, run_dir, rank)
    # rank files would go into a folder of their own on this node: none at all
    unlogged = request.with_config(dataclasses.replace(request.config, log_all_ranks=False))
    return distributed.unseen_rank_dir(request.out, request.experiment_name, rank), unlogged


def _warn_unrecorded(cfg: Config, run_dir: str, rank: int) -> None:
    """One warning line when this rank would have written files of its own."""
    system = bool(cfg.system_every_s) and (cfg.log_all_ranks or local_rank_id() == 0)
    if not (system or cfg.log_all_ranks):
        return
    what = " and rank %d's logs" % rank if cfg.log_all_ranks else ""
    logger.warning("this node's system metrics%s are not recorded: the run folder %s is not "
                   "visible on this node (share the output root: --out on a shared file "
                   "system)", what, run_dir)


def _train_here(request: RunRequest, plan: Plan, run_dir: str,
                previous: dict[str, Any] | None = None, shard: tuple[int, int] = (1, 0),
                stopper: SignalStop | None = None, finish: Finish | None = None) -> str | None:
    """Train in this process (one rank of ``shard``); returns ``run_dir`` (None
    on a rank that does not write). ``finish(run_dir, status)`` runs on rank 0 once
    training ended, with the run's final status, before the final write of run.json."""
    from ..callbacks._registry import run_declared
    writer = shard[1] == 0  # rank 0 alone writes the run directory
    record = _session_record(request, plan, run_dir, previous, shard)
    # (an msrun worker does not write: its launcher streams to MLflow)
    open_record(record, _config.to_dict(request.config), request.mlflow, request.mlflow_parent)
    built = functools.partial(_capture_built, request, plan, record) if writer else None
    session = Session(request, plan, run_dir, shard, stopper, built)
    # the same lifecycle as a tracked script's run: it decides the status, writes
    # error.txt and the final record (finish: the plots first), raises TrainingError
    life = RunLifecycle(record, session.stopper, stopped=session.stopped,
                        totals=functools.partial(session.summarize, resume=request.resume),
                        finish=finish)
    # every log opened inside the run folder registers with it; the experiment's
    # hooks read the folder as ``self.run_dir``
    with run_declared(run_dir), training_in(request.experiment, run_dir), life:
        session.execute(request.resume)
    return run_dir if writer else None


def _session_record(request: RunRequest, plan: Plan, run_dir: str,
                    previous: dict[str, Any] | None, shard: tuple[int, int]) -> RunRecord:
    """The record this rank keeps (rank 0 writes it, its provenance captured)."""
    writer = shard[1] == 0
    record = _new_record(request, run_dir, writer)
    record.meta["workers"] = shard[0]
    record.meta["total_steps"] = plan.steps_per_epoch * request.config.epochs  # progress, ETA
    resume = request.resume
    if previous is not None:
        assert resume is not None, "a previous record is a resume's"
        record.resumed_from(previous, resume.step, resume.path)
    if writer:
        _capture_provenance(request, record, previous)
    return record


def _capture_built(request: RunRequest, plan: Plan, record: RunRecord) -> None:
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
