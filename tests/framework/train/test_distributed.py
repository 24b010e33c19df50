"""Data parallel through msrun on CPU: two local workers on loopback."""
import json
import os

import pandas as pd
import pytest

DIES = '''
import os
from mindexp.experiments.linear import Linear


class Dies(Linear):
    """Rank 1 dies at step 10."""

    def callbacks(self):
        from mindspore.train import Callback

        class Die(Callback):
            def on_train_step_end(self, run_context):
                if os.environ.get("RANK_ID") == "1" and run_context.original_args().cur_step_num == 10:
                    os._exit(3)
        return [Die()]
'''


def only_run(root, name="linear"):
    (run_id,) = os.listdir(os.path.join(root, name))
    return os.path.join(root, name, run_id)


@pytest.mark.slow
def test_two_workers_train_sharded_with_equal_parameters_on_every_rank(cli, tmp_path):
    done = cli("run", "linear", "--workers", "2", "--set", "epochs=6", "--set", "log_all_ranks=true",
               "--out", "out", "--quiet", timeout=600)
    assert done.returncode == 0, done.stderr
    run_dir = only_run(tmp_path / "out")
    meta = json.load(open(os.path.join(run_dir, "run.json")))
    assert meta["status"] == "completed" and meta["workers"] == 2
    assert meta["steps"] == 30  # 10 batches per epoch, sharded over 2 ranks
    loss = pd.read_csv(os.path.join(run_dir, "loss.csv"))
    assert loss["step"].tolist() == list(range(1, 31))
    rank0 = pd.read_csv(os.path.join(run_dir, "params.csv"))
    rank1 = pd.read_csv(os.path.join(run_dir, "params.rank1.csv"))
    assert rank0[["step", "param", "value"]].equals(rank1[["step", "param", "value"]])
    other = pd.read_csv(os.path.join(run_dir, "loss.rank1.csv"))
    assert not other["loss"].equals(loss["loss"])  # each rank saw its own shard
    assert {"worker_0.log", "worker_1.log"} <= set(os.listdir(os.path.join(run_dir, "msrun")))
    assert not [f for f in os.listdir(run_dir) if f.startswith(".rank")]


@pytest.mark.slow
def test_a_dying_worker_fails_the_run_with_its_logs_instead_of_hanging(cli, tmp_path):
    (tmp_path / "dies.py").write_text(DIES)
    done = cli("run", "dies.py:Dies", "--workers", "2", "--out", "out", "--quiet", timeout=600)
    assert done.returncode == 1
    meta = json.load(open(os.path.join(only_run(tmp_path / "out"), "run.json")))
    assert meta["status"] == "failed"
    assert "msrun exited with status" in meta["error"] and "Error code: 3" in meta["error"]


def test_workers_zero_is_bad_input(main_cli, tmp_path):
    done = main_cli("run", "linear", "--workers", "0")
    assert done.returncode == 2 and "--workers: must be an integer >= 1" in done.stderr
    assert not (tmp_path / "outputs").exists()
