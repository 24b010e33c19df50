"""Data on disk end to end through the command line: exact resume after
SIGKILL mid-epoch for each source kind, the dataset(split) override, a bad
file in the middle of an epoch, the shipped image-folder experiment, and
two msrun ranks reading disjoint, complete shards."""
import json
import os

import numpy as np
import pandas as pd
import pytest

import mindspore as ms

from msrun_launcher import cli_msrun  # noqa: F401 (a fixture: msrun's launcher forked)

# Files of 1-d samples on disk (one .npy per sample) and one experiment per
# source kind over them; READ_LOG (when set) gets "rank file" per read.
KINDS = '''
import os, signal
import numpy as np
from dataclasses import dataclass
from mindexp import Experiment
from mindexp.define.sources import Lazy


TRAINING = []  # set once training begins: preflight reads are not logged


class Files:
    """Samples as files: item i reads DATA/<i>.npy (x, y)."""

    def __init__(self, folder):
        self.folder = folder
        self.names = sorted(os.listdir(folder), key=lambda f: int(f.split(".")[0]))

    def __len__(self):
        return len(self.names)

    def __getitem__(self, i):
        path = os.path.join(self.folder, self.names[i])
        log = os.environ.get("READ_LOG")
        if log and TRAINING:
            with open(f"{log}.{os.environ.get('RANK_ID', '0')}", "a") as f:
                f.write(self.names[i] + "\\n")
        try:
            row = np.load(path)
        except ValueError as exc:  # a source names what it could not read
            raise ValueError(f"cannot read {path}: {exc}") from None
        return row[:1].astype(np.float32), row[1:].astype(np.float32)


class Killing(Experiment):
    columns = ("x", "y")

    @dataclass
    class Config(Experiment.Config):
        kind: str = "samples"
        epochs: int = 4
        batch_size: int = 8
        optimizer: str = "adam"
        lr: float = 0.05
        checkpoint_interval_s: float = 0.0
        checkpoint_every: int = 1

    def source(self, split):
        if split != "train":
            return None
        files = Files(os.environ["DATA"])
        if self.config.kind == "lazy":
            return Lazy(files)
        if self.config.kind == "memmap":
            return tuple(np.load(os.path.join(os.environ["DATA"], "..", f"{c}.npy"), mmap_mode="r")
                         for c in "xy")
        import mindspore.dataset as ds
        return ds.GeneratorDataset(files, ["x", "y"], shuffle=False, num_parallel_workers=2,
                                   python_multiprocessing=False)

    def network(self):
        from mindspore import nn
        return nn.Dense(1, 1)

    def callbacks(self):
        from mindspore.train import Callback
        at = int(os.environ.get("KILL_AT", "0"))

        class Kill(Callback):
            def on_train_begin(self, run_context):
                TRAINING.append(True)

            def on_train_step_end(self, run_context):
                p = run_context.original_args()
                step = (p.cur_epoch_num - 1) * p.batch_num + (p.cur_step_num - 1) % p.batch_num + 1
                if at and step == at:
                    os.kill(os.getpid(), getattr(signal, os.environ.get("KILL_SIG", "SIGKILL")))

            def on_train_epoch_end(self, run_context):
                damage = os.environ.get("DAMAGE")  # a file goes bad after epoch 1
                if damage and run_context.original_args().cur_epoch_num == 1:
                    with open(damage, "wb") as f:
                        f.write(b"not a readable file")
        return [Kill()]


class Finished(Killing):
    """The simpler override: a finished dataset, no resume arguments."""

    def dataset(self, split):
        if split != "train":
            return None
        import mindspore.dataset as ds
        ds.config.set_seed(self.config.seed)
        data = ds.GeneratorDataset(Files(os.environ["DATA"]), ["x", "y"], shuffle=True)
        return data.batch(self.config.batch_size, drop_remainder=True)
'''


@pytest.fixture
def files(tmp_path):
    """60 samples of y = 2x + 1 as files, and as two .npy columns beside them."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(60, 1))
    y = 2 * x + 1
    folder = tmp_path / "data" / "rows"
    folder.mkdir(parents=True)
    for i in range(60):
        np.save(folder / f"{i}.npy", np.concatenate([x[i], y[i]]))
    np.save(tmp_path / "data" / "x.npy", x)
    np.save(tmp_path / "data" / "y.npy", y)
    (tmp_path / "kinds.py").write_text(KINDS)
    return str(folder)


def only_run(root):
    (name,) = os.listdir(root)
    (run_id,) = os.listdir(os.path.join(root, name))
    return os.path.join(root, name, run_id)


def weights(run_dir):
    from mindexp.callbacks import latest_checkpoint
    params = ms.load_checkpoint(latest_checkpoint(run_dir)[2])
    return {k: v.asnumpy() for k, v in params.items() if k not in ("step", "epoch")}


def meta(run_dir):
    return json.load(open(os.path.join(run_dir, "run.json")))


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """``reference(cli, files, entry, kind)``: the run folder of the uninterrupted run
    of ``entry`` on source ``kind``, trained once for the module (the kill cases of
    one kind differ only in their signal; the files are the same seeded samples)."""
    root, made = tmp_path_factory.mktemp("references"), {}

    def reference(cli, files, entry, kind):
        if (entry, kind) not in made:
            out = root / f"{entry}-{kind}"
            done = cli("run", f"kinds.py:{entry}", "--set", f"kind={kind}", "--quiet",
                       "--out", out, DATA=files)
            assert done.returncode == 0, done.stderr
            made[entry, kind] = only_run(out)
        return made[entry, kind]
    return reference


@pytest.mark.slow
@pytest.mark.parametrize("entry, kind, sig", [
    ("Killing", "samples", "SIGKILL"), ("Killing", "lazy", "SIGKILL"),
    ("Killing", "memmap", "SIGKILL"), ("Finished", "samples", "SIGKILL"),
    # SIGTERM checkpoints mid-epoch: the resume starts inside epoch 3
    ("Killing", "samples", "SIGTERM"), ("Finished", "samples", "SIGTERM")])
def test_sigkill_mid_epoch_resumes_to_bitwise_equal_weights(cli, tmp_path, files, references,
                                                            entry, kind, sig):
    args = ("run", f"kinds.py:{entry}", "--set", f"kind={kind}", "--quiet")
    ref_dir = references(cli, files, entry, kind)
    killed = cli(*args, "--out", "out", DATA=files, KILL_AT="17", KILL_SIG=sig)  # 7 steps/epoch
    run_dir = only_run(tmp_path / "out")
    assert meta(run_dir)["status"] == ("running" if sig == "SIGKILL" else "interrupted"), \
        killed.stderr
    resumed = cli("resume", run_dir, "--quiet", DATA=files)
    assert resumed.returncode == 0, resumed.stderr
    done = meta(run_dir)
    assert done["status"] == "completed" and done["steps"] == 28
    assert done["resumes"][0]["step"] == (14 if sig == "SIGKILL" else 17)
    loss = pd.read_csv(os.path.join(run_dir, "loss.csv"))
    ref_loss = pd.read_csv(os.path.join(ref_dir, "loss.csv"))
    assert loss["step"].tolist() == list(range(1, 29))
    assert np.array_equal(loss["loss"].values, ref_loss["loss"].values)
    ours, theirs = weights(run_dir), weights(ref_dir)
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert np.array_equal(ours[key], theirs[key]), key  # bitwise


@pytest.mark.slow
def test_the_finished_override_under_two_workers_warns_once(cli_msrun, tmp_path, files):
    done = cli_msrun("run", "kinds.py:Finished", "--workers", "2", "--set", "epochs=2", "--quiet",
               "--out", "out", DATA=files, timeout=600)
    assert done.returncode == 0, done.stderr
    log = open(os.path.join(only_run(tmp_path / "out"), "msrun", "worker_0.log")).read()
    assert log.count("the order is yours") == 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["samples", "lazy"])
def test_a_damaged_file_mid_epoch_fails_naming_it_and_resumes_once_fixed(cli, tmp_path, files,
                                                                          kind):
    bad = os.path.join(files, "33.npy")
    good = open(bad, "rb").read()
    # 30 epochs: more than MindSpore's pipeline reads ahead, so the bad file is read
    failed = cli("run", "kinds.py:Killing", "--set", f"kind={kind}", "--quiet", "--out", "out",
                 "--set", "epochs=30", DATA=files, DAMAGE=bad)
    assert failed.returncode == 1
    run_dir = only_run(tmp_path / "out")
    record = meta(run_dir)
    assert record["status"] == "failed" and bad in record["error"], record["error"]
    assert "Traceback" not in failed.stderr and bad in failed.stderr
    assert 7 <= record["steps"] < 210  # it failed after epoch 1
    open(bad, "wb").write(good)
    resumed = cli("resume", run_dir, "--quiet", DATA=files)
    assert resumed.returncode == 0, resumed.stderr
    assert meta(run_dir)["status"] == "completed" and meta(run_dir)["steps"] == 210


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["samples", "lazy"])
def test_two_ranks_read_disjoint_complete_shards(cli_msrun, tmp_path, files, kind):
    log = str(tmp_path / "reads")
    done = cli_msrun("run", "kinds.py:Killing", "--set", f"kind={kind}", "--set", "epochs=1",
               "--workers", "2", "--quiet", "--out", "out", DATA=files, READ_LOG=log, timeout=600)
    assert done.returncode == 0, done.stderr
    assert meta(only_run(tmp_path / "out"))["steps"] == 3  # 7 batches of 8: 3 per rank
    reads = [open(f"{log}.{r}").read().split() for r in (0, 1)]
    assert len(reads[0]) == len(reads[1]) == 24  # 3 batches of 8 each, each file once
    shards = [set(r) for r in reads]
    assert len(shards[0]) == len(shards[1]) == 24
    assert not shards[0] & shards[1]
    assert len(shards[0] | shards[1]) == 48  # 6 of the 7 batches of 8 (the 7th dropped)


@pytest.mark.slow
def test_the_image_folder_experiment_learns_shapes_and_a_bad_png_is_named(cli, tmp_path):
    from mindexp.experiments.image_folder import write_shapes
    write_shapes(str(tmp_path / "shapes"), per_class=300, eval_per_class=60, seed=1)
    done = cli("run", "image_folder", "--set", f"data_dir={tmp_path / 'shapes'}", "--quiet",
               "--out", "out", timeout=900)
    assert done.returncode == 0, done.stderr
    run_dir = only_run(tmp_path / "out")
    accuracy = pd.read_csv(os.path.join(run_dir, "eval.csv"))["accuracy"].iloc[-1]
    assert accuracy >= 0.85, accuracy

    bad = tmp_path / "shapes" / "train" / "2_cross" / "00123.png"
    good = bad.read_bytes()
    (tmp_path / "damaging.py").write_text(DAMAGING)
    failed = cli("run", "damaging.py:Damaging", "--set", f"data_dir={tmp_path / 'shapes'}",
                 "--quiet", "--set", "epochs=4", "--out", "bad", timeout=900,
                 DAMAGE=str(bad))  # 4 epochs: more than the pipeline reads ahead
    assert failed.returncode == 1
    run_dir = only_run(tmp_path / "bad")
    assert meta(run_dir)["status"] == "failed" and str(bad) in meta(run_dir)["error"]
    assert str(bad) in failed.stderr and "Traceback" not in failed.stderr
    bad.write_bytes(good)
    resumed = cli("resume", run_dir, "--quiet", timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert meta(run_dir)["status"] == "completed" and meta(run_dir)["steps"] == 4 * 37


DAMAGING = '''
import os
from mindexp.experiments.image_folder import ImageFolder


class Damaging(ImageFolder):
    """A PNG goes bad after epoch 1."""

    def callbacks(self):
        from mindspore.train import Callback

        class Damage(Callback):
            def on_train_epoch_end(self, run_context):
                if run_context.original_args().cur_epoch_num == 1:
                    with open(os.environ["DAMAGE"], "wb") as f:
                        f.write(b"not a png")
        return [Damage()]
'''


BAD = '''
import os
import mindspore.dataset as ds
import numpy as np
from mindexp import Experiment


class Bad(Experiment):
    columns = ("x", "y")

    def source(self, split):
        if split != "train":
            return None
        case = os.environ["CASE"]
        if case == "empty":
            return ds.ImageFolderDataset(os.environ["EMPTY"])
        data = ds.NumpySlicesDataset({"x": np.zeros((40, 1), np.float32),
                                      "y": np.zeros((40, 1), np.float32)}, shuffle=False)
        return data.batch(8) if case == "batched" else data.rename(["y"], ["label"])

    def network(self):
        from mindspore import nn
        return nn.Dense(1, 1)
'''


@pytest.mark.slow  # spawns mindexp or trains: seconds
@pytest.mark.parametrize("case, message", [
    ("batched", "source('train') returned a dataset that is already batched (batch size 8); "
                "return it unbatched"),
    ("columns", "source('train') returned a dataset with columns ['x', 'label'] but the "
                "experiment declares columns ('x', 'y')"),
    ("empty", "source('train') returned a dataset with no sample (folder "),
])
def test_bad_sources_exit_2_with_one_line_and_no_run(main_cli, tmp_path, monkeypatch, case,
                                                     message):
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "empty" / "class_a").mkdir(parents=True)
    monkeypatch.setenv("CASE", case)
    monkeypatch.setenv("EMPTY", str(tmp_path / "empty"))
    # (in this process: bad input would import MindSpore in a new one only to print a line)
    done = main_cli("run", "bad.py:Bad", "--out", "out", "--quiet")
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and "WARNING" not in ln
             and not ln.startswith("[")]
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_readme_image_folder_recipe_has_an_eval_split_and_eval_is_optional(cli, tmp_path):
    from mindexp.experiments.image_folder import write_shapes
    write_shapes(str(tmp_path / "shapes"), per_class=16)  # as the README, smaller
    assert sorted(os.listdir(tmp_path / "shapes")) == ["eval", "train"]
    done = cli("run", "image_folder", "--set", "data_dir=shapes", "--set", "epochs=1",
               "--set", "batch_size=8", "--quiet", "--out", "out", timeout=900)
    assert done.returncode == 0, done.stderr
    assert os.path.isfile(os.path.join(only_run(tmp_path / "out"), "eval.csv"))
    write_shapes(str(tmp_path / "no_eval"), per_class=16, eval_per_class=0)
    done = cli("run", "image_folder", "--set", "data_dir=no_eval", "--set", "epochs=1",
               "--set", "batch_size=8", "--quiet", "--out", "plain", timeout=900)
    assert done.returncode == 0, done.stderr
    run_dir = only_run(tmp_path / "plain")
    assert not os.path.exists(os.path.join(run_dir, "eval.csv"))
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as f:
        assert json.load(f)["metrics"] == []
