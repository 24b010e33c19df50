"""One checkpoint chooser for every command and evaluate's whole eval row.

One tiny run whose best checkpoint is not the newest best file: trained on
y = 2x and evaluated on y = x, its eval loss falls while the weight nears 1
and rises after; with keep_best=2 the epoch after the best is kept too (it
beats the epoch before), so "the newest best file" is the wrong answer.
Its metrics are ``mae`` alone: the loss in eval.csv is there only because
``early_stop`` and ``checkpoint_monitor`` watch ``eval_loss``.
"""
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from mindexp.experiments.linear import Linear


class Crossing(Linear):
    """Train on y = 2x; evaluate on y = x."""

    name = "crossing"

    @dataclass
    class Config(Linear.Config):
        epochs: int = 6
        lr: float = 0.01

    def source(self, split):
        if split == "train":
            return super().source(split)
        x = np.linspace(0.1, 1.0, 20, dtype=np.float32)[:, None]
        return x, x.copy()

    def targets(self):
        return {}


@pytest.fixture(scope="module")
def crossing(tmp_path_factory):
    from mindexp import load_run
    root = tmp_path_factory.mktemp("crossing")
    run = Crossing(metrics=("mae",), early_stop="eval_loss", patience=2,
                   checkpoint_monitor="eval_loss", keep_best=2, checkpoint_every=1,
                   checkpoint_interval_s=0, keep_checkpoints=10).run(out=str(root))
    return load_run(run.dir)


def _best_epoch_file(run):
    """The best file of eval.csv's best epoch, after checking that it is not the newest."""
    from mindexp.callbacks import list_checkpoints
    best_epoch = int(run.eval.loc[run.eval["loss"].idxmin(), "epoch"])
    kept = list_checkpoints(run.dir, "best")
    assert len(kept) == 2 and kept[-1][1] != best_epoch, (run.eval, kept)  # the premise
    return next(path for _, epoch, path in kept if epoch == best_epoch)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_every_reader_picks_the_truly_best_checkpoint(crossing, main_cli):
    import mindspore as ms
    best = _best_epoch_file(crossing)
    assert crossing.checkpoint(best=True) == best
    assert crossing.checkpoint_path("best") == best
    from mindexp.analysis.mlflow_export import model_checkpoint
    assert model_checkpoint(crossing) == best          # what mindexp mlflow uploads
    saved = ms.load_checkpoint(best)
    for net in (crossing.network("best"), crossing.network(best=True)):
        for p in net.trainable_params():
            np.testing.assert_array_equal(p.asnumpy(), saved[p.name].asnumpy())
    done = main_cli("evaluate", crossing.dir, "--checkpoint", "best")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith(os.path.relpath(best, crossing.dir) + " ")


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_evaluate_prints_the_whole_eval_row_with_the_implicit_loss(crossing, main_cli):
    done = main_cli("evaluate", crossing.dir, "--checkpoint", "best")
    assert done.returncode == 0, done.stderr
    printed = dict(line.strip().split(" = ") for line in done.stdout.splitlines()[1:-1])
    best = crossing.eval.loc[crossing.eval["loss"].idxmin()]
    assert list(printed) == [c for c in crossing.eval.columns if c not in ("epoch", "step")]
    for name, text in printed.items():
        assert float(text) == pytest.approx(best[name], rel=1e-5), name
    recorded = pd.read_csv(os.path.join(crossing.dir, "evaluations.csv")).iloc[-1]
    assert recorded["loss"] == pytest.approx(best["loss"], rel=1e-5)


def test_a_checkpoint_spelled_as_its_path_is_that_file(crossing):
    from mindexp.callbacks import list_checkpoints
    step, _, path = list_checkpoints(crossing.dir, "last")[0]
    assert crossing.checkpoint_path(os.path.relpath(path, crossing.dir)) == path
    assert crossing.checkpoint_path(step) == path


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_evaluate_keeps_working_on_an_evaluations_csv_written_before(crossing, main_cli,
                                                                     tmp_path):
    """mindexp 0.3 wrote evaluations.csv without the implicit loss column: evaluate
    still prints the whole row, appends under the file's own header and says which
    column it could not record there."""
    import shutil
    run_dir = str(tmp_path / "copy")
    shutil.copytree(crossing.dir, run_dir)
    path = os.path.join(run_dir, "evaluations.csv")
    old = "evaluated_at,checkpoint,step,epoch,split,mae\n2026-01-01T00:00:00+00:00,x.ckpt,10,1,eval,0.5\n"
    with open(path, "w") as f:
        f.write(old)
    done = main_cli("evaluate", run_dir, "--checkpoint", "best")
    assert done.returncode == 0, done.stderr
    assert "loss = " in done.stdout
    assert "has no column loss" in done.stderr and len(done.stderr.splitlines()) == 1
    table = pd.read_csv(path)
    assert list(table.columns) == ["evaluated_at", "checkpoint", "step", "epoch", "split", "mae"]
    assert len(table) == 2 and open(path).read().startswith(old)
