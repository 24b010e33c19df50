"""A run is one declared thing (RunRequest): every entry builds one and passes it
down; nothing is set on the user's experiment object and its config is never
rewritten, while tags, note, trial fields, the rerun's origin and a trial's
pruning still reach the run."""
import copy
import dataclasses
import json
import os

import pytest

from mindexp.experiments.linear import Linear
from mindexp.train.request import RunRequest

TINY = {"epochs": 2, "samples": 20, "batch_size": 10, "track_params": False}


def _state(exp):
    """What a run could have changed on the object: its attributes and config."""
    return {k: (dataclasses.asdict(v) if dataclasses.is_dataclass(v) else copy.copy(v))
            for k, v in vars(exp).items()}


class Seen(Linear):
    """Records where its hooks were told the run folder is."""
    seen: list = []

    def callbacks(self):
        Seen.seen.append(self.run_dir)
        return []


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_experiment_run_leaves_the_object_as_it_was_and_hooks_read_the_run_folder(tmp_path):
    exp = Seen(TINY)
    before = _state(exp)
    run = exp.run(out=tmp_path / "out", quiet=True)
    assert run.status == "completed"
    assert _state(exp) == before
    assert Seen.seen[-1] == str(run.dir)      # inside the run: its folder
    assert exp.run_dir is None                # outside: none


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_the_request_reaches_run_json_without_touching_the_experiment(tmp_path):
    from mindexp.api import run_request
    exp = Linear(TINY)
    before = _state(exp)
    run = run_request(RunRequest(exp, out=str(tmp_path), label="labelled", tags=("a", "b"),
                                 note="why", fields={"study": "s", "trial": 3}))
    meta = json.load(open(os.path.join(run.dir, "run.json")))
    assert (meta["tags"], meta["note"], meta["study"], meta["trial"]) == (["a", "b"], "why",
                                                                          "s", 3)
    assert "labelled" in os.path.basename(str(run.dir))
    assert _state(exp) == before


def test_a_request_is_frozen_and_a_changed_config_is_a_new_request():
    exp = Linear(TINY)
    request = RunRequest(exp)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.label = "x"
    other = request.with_config(dataclasses.replace(exp.config, log_all_ranks=True))
    assert other.config.log_all_ranks and not request.config.log_all_ranks
    assert exp.config.log_all_ranks is False    # the experiment's own config unchanged
    assert request.entry == "mindexp.experiments.linear:Linear"


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_rerun_builds_a_request_and_records_its_origin(tmp_path):
    from mindexp.manage.rerun import prepare_rerun, train_rerun
    first = Linear(TINY).run(out=tmp_path, quiet=True)
    request = prepare_rerun(str(first.dir), {"epochs": 3})
    assert not {"rerun_of", "entry"} & set(vars(request.experiment))
    assert request.rerun_of["run_dir"] == str(first.dir)
    assert "epochs" in request.config_set
    again = train_rerun(request)
    meta = json.load(open(os.path.join(again.dir, "run.json")))
    assert meta["rerun_of"]["run_id"] == first.meta["run_id"]
    assert meta["provenance"]["config_set"] == list(request.config_set)
    assert again.meta["steps"] == 6


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_trials_pruning_callback_runs_after_the_experiments_own(tmp_path):
    from mindspore.train import Callback
    from mindexp.api import run_request
    order = []

    class Mark(Callback):
        def __init__(self, name):
            self.name = name

        def on_train_end(self, run_context):
            order.append(self.name)

    class Own(Linear):
        def callbacks(self):
            return [Mark("own")]

    exp = Own(TINY)
    run_request(RunRequest(exp, out=str(tmp_path), callbacks=(Mark("added"),)))
    assert order == ["own", "added"]
    assert exp.callbacks.__func__ is Own.callbacks   # the hook was not replaced
