"""track(resume=) as a script writes it: a log the script registers with its own
step column is cut back by that column, and a resume whose network or optimizer
the checkpoint does not fit changes nothing in the run (it stays resumable)."""
import csv
import hashlib
import json
import os
import shutil
import sys
import textwrap

import pytest

from mindexp.callbacks import list_checkpoints

# Dense(1, 1) learns y = 2x, 4 steps an epoch, with a log of the script's own
# keyed by "global_step"; ``optimizer`` chooses the one the script builds.
SCRIPT = textwrap.dedent("""
    import os
    import numpy as np
    import mindspore as ms
    from mindspore import nn
    from mindspore.dataset import GeneratorDataset
    from mindspore.train import Callback, Model
    import mindexp

    class GlobalStepLog(Callback):
        def __init__(self, path):
            self.path = path
        def on_train_step_end(self, run_context):
            args = run_context.original_args()  # 4 steps an epoch; the epoch is absolute
            step = (args.cur_epoch_num - 1) * 4 + (args.cur_step_num - 1) % 4 + 1
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(f"{step},{step * 0.5}\\n")

    def dataset():
        x = np.random.default_rng(0).random((40, 1), dtype=np.float32)
        return GeneratorDataset(list(zip(x, 2 * x)), ["x", "y"], shuffle=False).batch(10)

    def train(out, epochs=3, resume=None, optimizer="adam"):
        ms.set_seed(0)
        net = nn.Dense(1, 1)
        make = nn.Adam if optimizer == "adam" else nn.SGD
        model = Model(net, nn.MSELoss(), make(net.trainable_params(), 0.1))
        with mindexp.track(out, "lin", config={"optimizer": optimizer}, resume=resume) as run:
            path = os.path.join(run.dir, "mine.csv")
            if not os.path.exists(path):
                with open(path, "w", encoding="utf-8") as f:
                    f.write("global_step,value\\n")
            run.register_log(path, "global_step")
            run.load(model)
            start, _ = run.position(4)
            model.train(epochs, dataset(), dataset_sink_mode=False, initial_epoch=start,
                        callbacks=run.callbacks(model, GlobalStepLog(path)))
        return run
""")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The script (a module) and its completed 3-epoch Adam run (checkpoints at 4, 8, 12)."""
    folder = tmp_path_factory.mktemp("tracked_resume")
    (folder / "gs_script.py").write_text(SCRIPT)
    sys.path.insert(0, str(folder))
    try:
        import gs_script
        run = gs_script.train(folder / "out")
        yield gs_script, run.dir
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("gs_script", None)


def _back_to_step_8(run_dir, tmp_path):
    """A copy of the run whose checkpoint at step 12 is gone: it resumes at step 8."""
    copy = str(tmp_path / "out" / "lin" / os.path.basename(run_dir))
    shutil.copytree(run_dir, copy)
    for step, _, path in list_checkpoints(copy, "all"):
        if step > 8:
            os.remove(path)
    return copy


def _digests(run_dir):
    found = {}
    for folder, _, names in os.walk(run_dir):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, run_dir)] = hashlib.sha256(f.read()).hexdigest()
    return found


def _steps(path):
    with open(path, encoding="utf-8") as f:
        return [int(row["global_step"]) for row in csv.DictReader(f)]


@pytest.mark.slow  # trains: seconds
def test_a_log_registered_with_its_own_step_column_is_cut_back_at_resume(trained, tmp_path):
    script, trained_dir = trained
    assert _steps(os.path.join(trained_dir, "mine.csv")) == list(range(1, 13))
    run_dir = _back_to_step_8(trained_dir, tmp_path)
    script.train(tmp_path / "out", resume=run_dir)
    assert _steps(os.path.join(run_dir, "mine.csv")) == list(range(1, 13))  # 9-12 once


@pytest.mark.slow  # trains: seconds
def test_a_resume_the_checkpoint_does_not_fit_changes_nothing_and_a_plain_one_completes(
        trained, tmp_path):
    """The script now builds SGD where the run trained Adam: run.load fails (the
    checkpoint holds no SGD state) and leaves every file as it was."""
    from mindexp.errors import MindexpError
    script, trained_dir = trained
    run_dir = _back_to_step_8(trained_dir, tmp_path)
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        meta = json.load(f)
    meta["status"] = "interrupted"  # as a run stopped at step 8 says
    with open(os.path.join(run_dir, "run.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f)
    before = _digests(run_dir)
    with pytest.raises(MindexpError, match="does not match the network"):
        script.train(tmp_path / "out", resume=run_dir, optimizer="sgd")
    assert _digests(run_dir) == before
    script.train(tmp_path / "out", resume=run_dir)
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        done = json.load(f)
    assert done["status"] == "completed" and done["steps"] == 12
    assert _steps(os.path.join(run_dir, "mine.csv")) == list(range(1, 13))
