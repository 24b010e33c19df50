"""Run directories for report tests: real tiny trainings (made once per
session) and hand-written ones for the edge cases."""
import json
import os

_TRAINED = {}

# The seed's comparison in small: three optimizers, the learning rates that suit them.
OPTIMIZER_RUNS = (("sgd", 0.2), ("momentum", 0.05), ("adam", 0.1))


def exploding_experiment():
    """An experiment whose network raises inside construct (imported lazily:
    this module is loaded by tests that never train)."""
    import numpy as np
    from mindexp import Experiment

    class Exploding(Experiment):
        """Its network raises inside construct."""
        name = "exploding"

        def source(self, split):
            x = np.ones((20, 1), np.float32)
            return (x, x) if split == "train" else None

        def network(self):
            from mindspore import nn

            class Bad(nn.Cell):
                def __init__(self):
                    super().__init__()
                    self.dense = nn.Dense(1, 1)

                def construct(self, x):
                    raise ValueError("boom from the network")
            return Bad()
    return Exploding


def trained_runs(tmp_path_factory):
    """Three real Linear trainings (5 epochs, 50 steps each) in one folder, made once."""
    if "root" not in _TRAINED:
        from mindexp.experiments.linear import Linear
        root = tmp_path_factory.mktemp("trained")
        for optimizer, lr in OPTIMIZER_RUNS:
            Linear(epochs=5, optimizer=optimizer, lr=lr, seed=1).run(out=str(root))
        _TRAINED["root"] = str(root)
    return _TRAINED["root"]


def make_run(root, run_id="r1", status="completed", config=None, losses=(1.0, 0.5, 0.25),
             params=None, targets=None, eval_rows=None, experiment="toy", steps_per_epoch=2,
             meta=None):
    """Write a run directory by hand: run.json, config.json, loss.csv and,
    when given, params.csv (``{"w": [values per step]}``) and eval.csv
    (``[{"epoch": 1, "step": 2, "accuracy": 0.5}, ...]``). Returns its path."""
    run_dir = os.path.join(str(root), experiment, run_id)
    os.makedirs(run_dir, exist_ok=True)
    steps = len(losses)
    _write_json(os.path.join(run_dir, "config.json"),
                {"seed": 0, "epochs": 3, "optimizer": "sgd", "lr": 0.1, **(config or {})})
    _write_json(os.path.join(run_dir, "run.json"), {
        "experiment": experiment, "run_id": run_id, "status": status,
        "started_at": "2026-01-01T00:00:00+00:00", "ended_at": "2026-01-01T00:01:00+00:00",
        "steps": steps, "epochs": -(-steps // steps_per_epoch),
        "final_loss": losses[-1] if losses else None, "train_time_s": 2.0,
        "steps_per_s": steps / 2.0, "targets": targets or {}, "params": {}, "error": None,
        **(meta or {})})
    _write_rows(os.path.join(run_dir, "loss.csv"), "step,epoch,loss,lr,time_s",
                [f"{i + 1},{i // steps_per_epoch + 1},{loss},0.1,{i * 0.1:.1f}"
                 for i, loss in enumerate(losses)])
    if params:
        _write_rows(os.path.join(run_dir, "params.csv"), "step,epoch,param,value",
                    [f"{i + 1},{i // steps_per_epoch + 1},{name},{values[i]}"
                     for i in range(steps) for name, values in params.items()])
    if eval_rows:
        columns = list(eval_rows[0])
        _write_rows(os.path.join(run_dir, "eval.csv"), ",".join(columns),
                    [",".join(str(row[c]) for c in columns) for row in eval_rows])
    return run_dir


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def _write_rows(path, header, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join([header, *rows]) + "\n")


# The issue-13 case: five real runs of a Linear with an eval split and long
# config labels; one diverges (lr=50), one fails mid-training.
DEMO_SOURCE = '''
from dataclasses import dataclass

import numpy as np
from mindspore.train import Callback
from mindexp.experiments.linear import Linear


class FailAt(Callback):
    """Raises at a step, as a broken data pipeline would."""

    def __init__(self, step):
        self.step = step

    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num >= self.step:
            raise RuntimeError(f"simulated data error at step {self.step}")


class Demo(Linear):
    """Linear with an eval split."""
    name = "demo"

    @dataclass
    class Config(Linear.Config):
        epochs: int = 8
        fail_at_step: int = 0
        description_of_the_setting: str = "baseline"

    def source(self, split):
        if split == "train":
            return super().source(split)
        rng = np.random.default_rng(7)
        x = rng.random((20, 1), dtype=np.float32)
        return x, (self.config.slope * x).astype(np.float32)

    def metrics(self):
        return ["loss", "mae"]

    def callbacks(self):
        return [FailAt(self.config.fail_at_step)] if self.config.fail_at_step else []
'''

FIVE_RUNS = (
    ("sgd-base", ["optimizer=sgd", "lr=0.2"]),
    ("momentum", ["optimizer=momentum", "lr=0.05",
                  "description_of_the_setting=momentum_with_a_rather_long_description"]),
    ("adam", ["optimizer=adam", "lr=0.1", "description_of_the_setting=adam_default_betas"]),
    ("diverge", ["optimizer=sgd", "lr=50"]),
    ("fails", ["optimizer=sgd", "lr=0.1", "fail_at_step=45"]),
)


def five_runs(root, cli_run):
    """Train FIVE_RUNS with ``cli_run(*args)`` (a CLI runner) into ``root``; returns the folder."""
    source = os.path.join(str(root), "demo_exp.py")
    with open(source, "w", encoding="utf-8") as f:
        f.write(DEMO_SOURCE)
    for label, sets in FIVE_RUNS:
        args = ["run", f"{source}:Demo", "--out", str(root), "--name", label, "--quiet"]
        for item in sets:
            args += ["--set", item]
        cli_run(*args)
    return os.path.join(str(root), "demo")


# Looking at many runs: 25 hand-written runs of one experiment, the defaults
# that every run repeats (empty early_stop, keep_best none, ...), one run
# with an odd epochs and one early-stopped at step 10 of 24.
MANY_OPTIMIZERS = ("sgd", "momentum", "adam")
EARLY_STOPPED = 7   # the index of the early-stopped run
ODD_EPOCHS = 11     # the index of the run with epochs=6


def many_runs(root, count=25):
    """Write ``count`` runs into ``root/many/``; returns that folder."""
    for i in range(count):
        optimizer, lr = MANY_OPTIMIZERS[i % 3], round(0.01 * (1 + i), 2)
        config = {"epochs": 12, "optimizer": optimizer, "lr": lr, "early_stop": "",
                  "patience": 5, "checkpoint_monitor": "", "keep_best": None}
        steps, meta = 24, {"total_steps": 24}
        if i == EARLY_STOPPED:
            steps = 10
            config.update(early_stop="eval_loss", patience=2)
            meta["stop_reason"] = "early stop at epoch 5: eval_loss did not improve on 0.1 for 2 epochs"
        if i == ODD_EPOCHS:
            config["epochs"], steps, meta["total_steps"] = 6, 12, 12
        if i % 8 == 3:
            config.update(checkpoint_monitor="eval_loss", keep_best=2)
        rate = 0.8 + 0.15 * (i % 7) / 7
        losses = [round(rate ** s * (1 + 0.01 * i), 6) for s in range(1, steps + 1)]
        make_run(root, f"20260101-0000{i:02d}-{optimizer}-{i:06x}", experiment="many",
                 config=config, losses=losses, meta=meta,
                 params={"dense.weight": [2 - 1.5 * l for l in losses]},
                 eval_rows=[{"epoch": e, "step": 2 * e, "loss": losses[2 * e - 1] * 1.1,
                             "mae": losses[2 * e - 1] ** 0.5} for e in range(1, steps // 2 + 1)])
    return os.path.join(str(root), "many")
