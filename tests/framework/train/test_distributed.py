"""Data parallel through msrun on CPU: two local workers on loopback."""
import json
import os

import pandas as pd
import pytest

import msrun_launcher
from msrun_launcher import cli_msrun  # noqa: F401 (a fixture)

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


# MindSpore's heartbeat timeout (MS_NODE_TIMEOUT, 30 s by default) decides how long
# the cluster waits for a dead process before it fails the rest: 10 s here, so each
# test of a dying worker or node waits 10 s for it instead of 30-70 s.
NODE_TIMEOUT = {"MS_NODE_TIMEOUT": "10"}


def only_run(root, name="linear"):
    (run_id,) = os.listdir(os.path.join(root, name))
    return os.path.join(root, name, run_id)


@pytest.fixture(scope="module")
def one_node(tmp_path_factory):
    """``mindexp run linear --workers 2`` (2 epochs, every rank logging), run once for
    the module in this process (as the ``cli`` fixture runs it, msrun's launcher
    forked): (its exit status, its stderr, its run folder). The test of two workers
    reads it; the test of two msrun nodes compares its own run with it. Neither
    changes it."""
    import contextlib
    import io
    import sys
    from conftest import MAIN_PY
    from mindexp.cli.main import main
    root = tmp_path_factory.mktemp("one_node")
    argv = ["run", "linear", "--workers", "2", "--set", "epochs=2", "--set", "log_all_ranks=true",
            "--out", "out", "--quiet"]
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        msrun_launcher.fork_launches(patch)
        patch.chdir(root)
        patch.setattr(sys, "argv", [MAIN_PY, *argv])
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(argv)
    return code, err.getvalue(), only_run(root / "out") if code == 0 else None


@pytest.mark.slow
def test_two_workers_train_sharded_with_equal_parameters_on_every_rank(one_node):
    code, stderr, run_dir = one_node
    assert code == 0, stderr
    meta = json.load(open(os.path.join(run_dir, "run.json")))
    assert meta["status"] == "completed" and meta["workers"] == 2
    assert meta["steps"] == 10  # 10 batches per epoch, sharded over 2 ranks: 5 a rank
    loss = pd.read_csv(os.path.join(run_dir, "loss.csv"))
    assert loss["step"].tolist() == list(range(1, 11))
    rank0 = pd.read_csv(os.path.join(run_dir, "params.csv"))
    rank1 = pd.read_csv(os.path.join(run_dir, "params.rank1.csv"))
    assert rank0[["step", "param", "value"]].equals(rank1[["step", "param", "value"]])
    other = pd.read_csv(os.path.join(run_dir, "loss.rank1.csv"))
    assert not other["loss"].equals(loss["loss"])  # each rank saw its own shard
    from mindexp.callbacks import schema  # log_all_ranks: each rank's system samples
    assert list(schema.rank_files(run_dir, "system")) == [0, 1]
    assert pd.read_csv(schema.rank_files(run_dir, "system")[1])["step"].iloc[-1] == 10
    assert {"worker_0.log", "worker_1.log"} <= set(os.listdir(os.path.join(run_dir, "msrun")))
    assert not [f for f in os.listdir(run_dir) if f.startswith(".rank")]


@pytest.mark.slow
def test_a_dying_worker_fails_the_run_with_its_logs_instead_of_hanging(cli_msrun, tmp_path):
    (tmp_path / "dies.py").write_text(DIES)
    done = cli_msrun("run", "dies.py:Dies", "--workers", "2", "--out", "out", "--quiet", timeout=600,
               **NODE_TIMEOUT)
    assert done.returncode == 1
    meta = json.load(open(os.path.join(only_run(tmp_path / "out"), "run.json")))
    assert meta["status"] == "failed"
    assert "msrun exited with status" in meta["error"] and "Error code: 3" in meta["error"]


def test_workers_zero_is_bad_input(main_cli, tmp_path):
    done = main_cli("run", "linear", "--workers", "0")
    assert done.returncode == 2 and "--workers: must be an integer >= 1" in done.stderr
    assert not (tmp_path / "outputs").exists()


def _msrun_node(rank, port, folder, *args, **env):
    """One msrun launcher of a two-node cluster on loopback, running
    ``mindexp run ARGS`` in ``folder`` (``env``: more environment variables)."""
    import subprocess
    import sys
    from conftest import cli_env
    bin_dir = os.path.dirname(sys.executable)
    os.makedirs(folder)
    return msrun_launcher.popen(  # its launcher forked; its scheduler and worker are new
        [os.path.join(bin_dir, "msrun"), "--worker_num=2", "--local_worker_num=1",
         f"--node_rank={rank}", "--master_addr=127.0.0.1", f"--master_port={port}",
         "--join=True", "--log_dir=logs", os.path.join(bin_dir, "mindexp"), "run", *args],
        cwd=folder, env=cli_env(PATH=bin_dir + os.pathsep + os.environ["PATH"], **env),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_two_msrun_nodes_on_loopback_train_one_run_equal_to_two_workers_on_one_node(
        cli, tmp_path, one_node):
    import sys
    from mindexp import Run
    from mindexp.train.distributed import free_port
    if not os.path.exists(os.path.join(os.path.dirname(sys.executable), "mindexp")):
        pytest.skip("no mindexp console script beside this Python (not an installed venv)")
    args = ("--set", "epochs=2", "--quiet")
    port, shared = free_port(), tmp_path / "shared"  # one output root both nodes see
    nodes = [_msrun_node(rank, port, tmp_path / f"node{rank}", "linear", "--out", shared, *args,
                         MINDEXP_PLOTS="1")  # rank 0 draws them while rank 1 waits
             for rank in (0, 1)]
    codes = [node.wait(timeout=600) for node in nodes]
    assert codes == [0, 0]
    run_dir = only_run(shared)
    two_nodes = json.load(open(os.path.join(run_dir, "run.json")))
    assert two_nodes["status"] == "completed" and two_nodes["workers"] == 2
    assert two_nodes["steps"] == 10  # sharded: 5 batches per epoch on each node
    # node 1's first worker (rank 1) found rank 0's run folder and wrote its system samples
    assert sorted(Run(run_dir).system_by_rank) == [0, 1]
    assert {"loss.png", "params.png"} <= set(os.listdir(os.path.join(run_dir, "plots")))
    assert Run(run_dir).system_by_rank[1]["step"].iloc[-1] == 10
    assert os.listdir(tmp_path / "node1") == ["logs"]  # nothing else on node 1
    shown = cli("show", run_dir)
    assert shown.returncode == 0 and "rank 1" in shown.stdout, shown.stdout
    # the module's one run of `linear --workers 2` with these epochs (its log_all_ranks
    # changes what is logged, not what is trained)
    code, stderr, one_node_dir = one_node
    assert code == 0, stderr
    one_node = json.load(open(os.path.join(one_node_dir, "run.json")))
    assert one_node["steps"] == two_nodes["steps"]  # the same training: 2 epochs
    assert two_nodes["params"] == pytest.approx(one_node["params"], rel=1e-6)


@pytest.mark.slow
def test_a_dying_node_fails_the_run_on_the_other_instead_of_hanging(tmp_path):
    import sys
    from mindexp.train.distributed import free_port
    if not os.path.exists(os.path.join(os.path.dirname(sys.executable), "mindexp")):
        pytest.skip("no mindexp console script beside this Python (not an installed venv)")
    (tmp_path / "dies.py").write_text(DIES)  # rank 1, on node 1, dies at step 10
    port = free_port()
    nodes = [_msrun_node(rank, port, tmp_path / f"node{rank}", f"{tmp_path / 'dies.py'}:Dies",
                         "--set", "epochs=4", "--out", "out", "--quiet", **NODE_TIMEOUT)
             for rank in (0, 1)]
    assert [node.wait(timeout=600) for node in nodes] == [1, 1]  # msrun's error on both
    meta = json.load(open(os.path.join(only_run(tmp_path / "node0" / "out"), "run.json")))
    # MindSpore's message varies with the moment the node died (a cluster error, or the
    # kernel error of a collective whose peer is gone): the run records it as failed
    assert meta["status"] == "failed" and meta["error"], meta


RANK0_RUN_ID = "20261201-120000-abc123"


@pytest.fixture
def rank1_of_two_nodes(monkeypatch):
    """This process as rank 1 of the user's own msrun, the first worker of node 1:
    msrun's environment and rank, and a cluster whose rank 0 created RANK0_RUN_ID
    (the all-reduce adds rank 0's bytes to this rank's zeros)."""
    import numpy as np
    import mindspore.communication
    from mindexp.train import distributed
    for name, value in {"MS_ROLE": "MS_WORKER", "MS_WORKER_NUM": "2", "RANK_ID": "1",
                        "DEVICE_ID": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(mindspore.communication, "get_rank", lambda *a: 1)
    monkeypatch.setattr(distributed, "init_data_parallel", lambda: (1, 2))
    sent = np.frombuffer(RANK0_RUN_ID.encode(), dtype=np.uint8).astype(np.float32)
    # (the run id's all-reduce; the barrier after training sums one zero)
    monkeypatch.setattr(distributed, "all_reduce_sum",
                        lambda mine: mine + np.pad(sent, (0, len(mine) - len(sent)))
                        if len(mine) >= len(sent) else mine, raising=False)


@pytest.mark.slow
@pytest.mark.parametrize("shared", [True, False])
def test_a_node_writes_its_rank_files_into_rank_0s_run_folder_only_when_it_sees_it(
        main_cli, tmp_path, rank1_of_two_nodes, shared):
    run_dir = tmp_path / "out" / "linear" / RANK0_RUN_ID
    if shared:  # rank 0 made it on the output root both nodes see
        run_dir.mkdir(parents=True)
    done = main_cli("run", "linear", "--set", "epochs=1", "--set", "log_all_ranks=true",
                    "--out", "out", "--quiet")
    assert done.returncode == 0, done.stderr
    if shared:  # this rank's logs and system samples, and nothing of rank 0's
        from mindexp.callbacks import schema
        assert list(schema.rank_files(run_dir, "system")) == [1]
        assert list(schema.rank_files(run_dir, "loss")) == [1]
        # (and the run's registry of logs, which every rank's logs join: resume cuts them)
        assert all(name.endswith(".rank1.csv") or name == schema.LOG_REGISTRY
                   for name in os.listdir(run_dir))
        assert "not visible" not in done.stderr
    else:  # nothing at all, and one line saying why
        assert not (tmp_path / "out").exists()
        warned = [ln for ln in done.stderr.splitlines() if "not visible on this node" in ln]
        assert len(warned) == 1 and str(os.path.join("out", "linear", RANK0_RUN_ID)) in warned[0]


def test_the_other_ranks_stop_when_rank_0_could_not_create_the_run_folder(
        main_cli, tmp_path, rank1_of_two_nodes, monkeypatch):
    from mindexp.train import distributed
    monkeypatch.setattr(distributed, "all_reduce_sum", lambda mine: mine)  # rank 0 sent no id
    done = main_cli("run", "linear", "--set", "epochs=1", "--out", "out", "--quiet")
    assert done.returncode == 1 and "rank 0 created no run folder" in done.stderr
    assert not (tmp_path / "out").exists()


def test_track_on_rank_1_joins_rank_0s_run_and_records_nothing(tmp_path, rank1_of_two_nodes):
    import mindexp
    run_dir = tmp_path / "out" / "script" / RANK0_RUN_ID
    run_dir.mkdir(parents=True)  # rank 0 made it on the output root both nodes see
    with mindexp.track(tmp_path / "out", "script", config={"lr": 0.1}) as run:
        assert run.dir == str(run_dir) and run.run_id == RANK0_RUN_ID
        assert os.listdir(run_dir) == []  # no record, config or lock of this rank's
    assert os.listdir(tmp_path / "out" / "script") == [RANK0_RUN_ID]


def test_track_on_rank_0_creates_the_run_and_sends_its_id(tmp_path, rank1_of_two_nodes,
                                                          monkeypatch):
    import numpy as np
    import mindspore.communication
    import mindexp
    from mindexp.train import distributed
    monkeypatch.setattr(mindspore.communication, "get_rank", lambda *a: 0)
    sent = []
    monkeypatch.setattr(distributed, "all_reduce_sum", lambda mine: sent.append(mine) or mine)
    with mindexp.track(tmp_path / "out", "script", config={"lr": 0.1}) as run:
        pass
    assert bytes(sent[0].astype(np.uint8)).rstrip(b"\0").decode() == run.run_id
    with open(os.path.join(run.dir, "run.json")) as f:
        assert json.load(f)["status"] == "completed"


def test_run_batches_on_rank_1_of_two_takes_every_second_batch_of_the_seeds_order(
        tmp_path, rank1_of_two_nodes):
    """A hand-written loop under msrun: rank 1 of 2 gets the batches 1, 3, 5, ...
    of the order one process trains on (the same permutation of the seed and the
    epoch as a Model run), and each epoch its own order."""
    import numpy as np
    import mindexp
    from mindexp.define.data import BatchSource
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    y = np.arange(20, dtype=np.float32)
    (tmp_path / "out" / "script" / RANK0_RUN_ID).mkdir(parents=True)
    seen = []
    with mindexp.track(tmp_path / "out", "script", config={"lr": 0.1}, seed=3) as run:
        for _ in run.epochs(2):
            seen.append([batch[1].asnumpy().tolist() for batch in run.batches((x, y),
                                                                               batch_size=2)])
    for epoch, batches in enumerate(seen):
        alone = BatchSource((x, y), 2, True, 3, epoch)
        expected = [alone[i][1].tolist() for i in range(len(alone))][1::2]
        assert batches == expected and len(batches) == 5
    assert seen[0] != seen[1]
