"""A grid sweep's points as trials of an Optuna study: claiming, training, telling.

Each grid point ``i`` is trained by a trial whose user attribute ``point``
is ``i`` and whose parameters are the point's values (categorical, so
Optuna's own tools show them). A worker claims a point by creating its
trial directly in state RUNNING, the point named in the same storage
operation; so every claim is visible whole to every other worker:

* under the claim lock beside a journal file (exact across processes and
  machines sharing the file), one worker at a time looks for an open point;
* on an RDB, two workers may claim one point at the same moment: the trial
  with the lower number keeps it, the other is told FAIL with ``surplus``
  and never trained (as :func:`.study.claim_trial` settles a shared budget).

A point is *done* once a trial ended ``completed`` or ``diverged`` (a run
that diverges would diverge again), *running* while a trial is RUNNING,
*failed* once more than ``retries`` of its trials failed (a trial whose
worker died counts, see :mod:`.liveness`; an interrupted one does not), and
*open* otherwise. A point interrupted by a signal is resumed in its run
folder from its checkpoint. Running the same command again reopens the
failed points (their failed trials are marked ``retired``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import sys
from typing import Any, Callable

from ..rundir.groups import under_root
from .children import output_to
from .disk import FULL_DISK, release_space, reserve_space  # noqa: F401  (sweeps' too)
from .study import LOGS, JsonSpec, claim_lock, import_optuna, namer, open_storage, train_run

POINT = "point"            # the user attribute naming a trial's grid point
FINAL = ("completed", "diverged", "pruned")   # outcomes a continued sweep keeps
SWEEP_STUDY = "sweep"      # the study's name in a sweep's own journal
RETIRED = "mindexp:retired"   # the study's user attribute listing retired trials


@dataclasses.dataclass
class SweepSpec(JsonSpec):
    """Everything a worker needs to train points of a sweep (JSON-ready)."""

    entry: str
    experiment: str
    storage: str
    study: str
    sweep_dir: str
    out: str
    points: list
    labels: list
    base: dict = dataclasses.field(default_factory=dict)
    retries: int = 0
    tags: list = dataclasses.field(default_factory=list)
    note: str | None = None
    runs_per_worker: int | None = None   # 1 for a grid over ``device``
    kind: str = "sweep"
    mlflow: str | None = None            # the tracking URI each run streams to (--mlflow)
    mlflow_parent: str | None = None     # the sweep's parent run there


@dataclasses.dataclass
class Claim:
    """A point this worker holds: its index, its trial and where to resume it."""

    index: int
    trial_id: int
    number: int
    resume: str | None = None


def open_study(spec: SweepSpec, create: bool = False) -> Any:
    """The sweep's study in its storage (made when ``create``)."""
    optuna = import_optuna()
    storage = open_storage(spec.storage)
    if create:
        return optuna.create_study(study_name=spec.study, storage=storage, load_if_exists=True)
    return optuna.load_study(study_name=spec.study, storage=storage)


# -- the state of each point ---------------------------------------------------------

def point_trials(study: Any) -> dict[int, list]:
    """``{point: [trials, oldest first]}`` without surplus claims."""
    found: dict[int, list] = {}
    for trial in study.get_trials(deepcopy=False):
        index = trial.user_attrs.get(POINT)
        if isinstance(index, int) and not trial.user_attrs.get("surplus"):
            found.setdefault(index, []).append(trial)
    for trials in found.values():
        trials.sort(key=lambda t: t.number)
    return found


def outcome(trial: Any) -> str:
    """What became of a trial's run: running, completed, failed, diverged, interrupted."""
    if trial.state.name == "RUNNING":
        return "running"
    if trial.state.name == "COMPLETE":
        return "completed"
    return trial.user_attrs.get("status") or "failed"   # no status: its worker died


def retired(study: Any) -> set[int]:
    """Ids of failed trials a later command reopened (they no longer count).
    Kept in the study (a finished trial cannot be changed)."""
    return set(study.user_attrs.get(RETIRED) or [])


def attempts(trials: list, gone: set[int] | frozenset = frozenset()) -> list:
    """The failed trials that count against ``retries`` (not interrupted, not retired)."""
    return [t for t in trials if outcome(t) == "failed" and t._trial_id not in gone
            and not t.user_attrs.get("retired")]


def point_state(trials: list, retries: int, gone: set[int] | frozenset = frozenset()) -> str:
    """``open``, ``running``, ``done`` or ``failed`` (see the module's docstring);
    ``gone``: the retired trials (:func:`retired`)."""
    states = [outcome(t) for t in trials]
    if "running" in states:
        return "running"
    if any(s in FINAL for s in states):
        return "done"
    return "failed" if len(attempts(trials, gone)) > retries else "open"


def reopen_failed(study: Any, spec: SweepSpec) -> int:
    """Retire the failed trials of points failed for good (the same command
    again trains them anew); returns how many points were reopened."""
    gone = retired(study)
    failed = [trials for trials in point_trials(study).values()
              if point_state(trials, spec.retries, gone) == "failed"]
    if failed:
        study.set_user_attr(RETIRED, sorted(gone | {t._trial_id for trials in failed
                                                    for t in attempts(trials, gone)}))
    return len(failed)


# -- claiming ----------------------------------------------------------------------------

def claim_point(study: Any, spec: SweepSpec, lock: str | None = None) -> Claim | None:
    """An open point, now held by a new RUNNING trial of this worker, or None."""
    from .liveness import fail_dead_trials
    with claim_lock(spec.storage):
        fail_dead_trials(study)
        trials, gone = point_trials(study), retired(study)
        for index in range(len(spec.points)):
            if point_state(trials.get(index, []), spec.retries, gone) != "open":
                continue
            claim = _claim(study, spec, index, lock)
            if claim is not None:
                claim.resume = _resumable(trials.get(index, []))
                return claim
    return None


def _claim(study, spec, index, lock):
    """A RUNNING trial for point ``index``; None when another worker's trial
    with a lower number holds it (ours is told FAIL as surplus)."""
    optuna = import_optuna()
    from .liveness import host
    trial_id = add_trial(study, spec, index, {"host": host(), "pid": os.getpid(),
                                              **({"lock": lock} if lock else {})})
    number = study._storage.get_trial_number_from_id(trial_id)
    held = [t for t in point_trials(study).get(index, [])
            if t.number < number and (outcome(t) == "running" or outcome(t) in FINAL)]
    if held:
        study._storage.set_trial_user_attr(trial_id, "surplus", True)
        study._storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL)
        return None
    return Claim(index, trial_id, number)


def add_trial(study: Any, spec: SweepSpec, index: int, attrs: dict,
              state: str = "RUNNING", value: float | None = None) -> int:
    """Create point ``index``'s trial in one storage operation (its point,
    label, values and ``attrs`` with it); returns its id."""
    optuna = import_optuna()
    values = spec.points[index]
    choices = {k: sorted({str(p[k]) for p in spec.points}) for k in values}
    now = datetime.datetime.now()
    template = optuna.trial.FrozenTrial(
        number=-1, state=optuna.trial.TrialState[state], value=value,
        datetime_start=now, datetime_complete=None if state == "RUNNING" else now,
        params={k: str(v) for k, v in values.items()},
        distributions={k: optuna.distributions.CategoricalDistribution(c)
                       for k, c in choices.items()},
        user_attrs={POINT: index, "label": spec.labels[index], **attrs}, system_attrs={},
        intermediate_values={}, trial_id=-1)
    return study._storage.create_new_trial(study._study_id, template_trial=template)


def _resumable(trials):
    """The run folder of the point's last trial when it was interrupted."""
    if not trials or outcome(trials[-1]) != "interrupted":
        return None
    run_dir = trials[-1].user_attrs.get("run_dir")
    return run_dir if isinstance(run_dir, str) and run_dir else None


def tell(study: Any, trial_id: int, answer: dict) -> None:
    """Record a point's answer in its trial: COMPLETE (value: the final loss)
    for a completed run, FAIL with the run's status otherwise. A trial
    another process failed meanwhile (taken for dead) keeps that."""
    optuna = import_optuna()
    storage = study._storage
    with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
        for key in ("run_dir", "run_id", "status", "error", "returncode", "final_loss"):
            if answer.get(key) is not None:
                storage.set_trial_user_attr(trial_id, key, answer[key])
        if answer.get("status") == "completed":
            loss = answer.get("final_loss")
            value = float(loss) if isinstance(loss, (int, float)) else 0.0
            storage.set_trial_state_values(trial_id, optuna.trial.TrialState.COMPLETE,
                                           values=[value if value == value else 0.0])
        else:
            storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL)


# -- a worker's loop ----------------------------------------------------------------------

def run_points(spec: SweepSpec, stop: Any, on_event: Callable[[dict], None]) -> int:
    """Claim and train points until none is open, a signal arrives, or the disk
    is full; returns how many this worker trained. ``on_event`` gets a
    ``start`` event as a point is claimed and an ``end`` event with its answer."""
    from .liveness import heartbeat, worker_lock
    study = open_study(spec)
    done = 0
    with worker_lock(spec.sweep_dir) as lock:
        while stop.signum is None and (spec.runs_per_worker is None
                                       or done < spec.runs_per_worker):
            claim = claim_point(study, spec, lock)
            if claim is None:
                break
            on_event({"event": "start", "point": claim.index, "trial": claim.number,
                      "trial_id": claim.trial_id, "pid": os.getpid(), "resume": claim.resume})
            with heartbeat(study, claim.trial_id), output_to(point_log(spec, claim.index)):
                answer = train_point(spec, claim, stop, named=namer(study, claim.trial_id))
            if answer.get("error") and FULL_DISK in answer["error"]:
                release_space(spec.sweep_dir)   # room for the storage's and the record's writes
            tell(study, claim.trial_id, answer)
            on_event({"event": "end", "point": claim.index, **answer})
            done += 1
            if answer["status"] == "interrupted" or FULL_DISK in (answer.get("error") or ""):
                break
    return done


def point_log(spec: SweepSpec, index: int) -> str:
    """The log of point ``index``: every attempt's output, one after another."""
    return os.path.join(spec.sweep_dir, LOGS, f"{spec.labels[index]}.log")


def train_point(spec: SweepSpec, claim: Claim, stop: Any,
                named: Callable[[str], None] | None = None) -> dict:
    """Train (or resume) one point in this process; returns its answer
    (:func:`.study.train_run`). ``named(run_dir)`` as the run's folder is known."""
    return train_run(lambda created: _train(spec, claim, created), stop, _say, named)


def _train(spec, claim, created):
    """Resume the point's interrupted run (when it has a checkpoint here) or train anew."""
    from ..api import resume_run, run_request
    from ..callbacks import list_checkpoints
    from ..define.entry import load_experiment
    from ..train.request import RunRequest
    resume = under_root(spec.out, claim.resume)
    if resume and os.path.isdir(resume) and list_checkpoints(resume, "all"):
        created(resume)
        return resume_run(resume, quiet=True, mlflow=spec.mlflow)
    values = spec.points[claim.index]
    exp = load_experiment(spec.entry)({**spec.base, **values})
    return run_request(RunRequest(exp, out=spec.out, label=spec.labels[claim.index],
                                  tags=tuple(spec.tags or ()), note=spec.note, entry=spec.entry,
                                  created=created, mlflow=spec.mlflow,
                                  mlflow_parent=spec.mlflow_parent))


def _say(text):
    """Print on the point's log; a full disk must not turn the answer into a crash."""
    with contextlib.suppress(OSError):
        sys.stderr.write(text.rstrip("\n") + "\n")
        sys.stderr.flush()
