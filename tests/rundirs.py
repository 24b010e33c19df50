"""Run directories for report tests: real tiny trainings (made once per
session) and hand-written ones for the edge cases."""
import json
import os

_TRAINED = {}

# The seed's comparison in small: three optimizers, the learning rates that suit them.
OPTIMIZER_RUNS = (("sgd", 0.2), ("momentum", 0.05), ("adam", 0.1))


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
