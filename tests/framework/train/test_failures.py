"""What a failed or stopped run leaves behind: the traceback in the run
directory, one line naming the user's frame on the terminal, MindSpore's
compile dumps inside the run directory, labels rejected before anything is
created, and signals reported by name with the shell's exit status."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import forkserver
from conftest import cli_env
from mindexp import DataError
from mindexp.experiments.linear import Linear

USER_CODE = '''
import numpy as np
from mindspore import nn, ops
from mindspore.train import Callback
from mindexp.experiments.linear import Linear


def lookup(table):
    return table["x"]                                   # line 9


class NetworkFails(Linear):
    def network(self):
        return lookup({})


class SourceFails(Linear):
    def source(self, split):
        return lookup({})


class Boom(Callback):
    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num == 3:
            raise ValueError("boom at step 3")          # line 25


class CallbackFails(Linear):
    def callbacks(self):
        return [Boom()]


class BadShapes(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(1, 1)

    def construct(self, x):
        return ops.matmul(self.dense(x), ops.ones((3, 5)))   # line 39: (b,1) @ (3,5)


class CompileFails(Linear):
    def network(self):
        return BadShapes()


class NoTrainData(Linear):
    def source(self, split):
        return None
'''


def runs_in(root):
    found = []
    for exp in os.listdir(root) if os.path.isdir(root) else []:
        found += [os.path.join(root, exp, r) for r in os.listdir(os.path.join(root, exp))]
    return found


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "user_exp.py"
    path.write_text(USER_CODE)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("cls, line, message", [
    ("NetworkFails", 9, "KeyError: 'x'"),
    ("CallbackFails", 25, "ValueError: boom at step 3"),
])
def test_a_failure_keeps_the_traceback_and_names_the_users_frame(cli, tmp_path, user_file, cls,
                                                                  line, message):
    done = cli("run", f"user_exp.py:{cls}", "--out", "out", "--set", "epochs=1", "--quiet")
    assert done.returncode == 1, done.stderr
    (run_dir,) = runs_in(tmp_path / "out")
    where = f"{user_file}:{line}"
    assert done.stderr.splitlines() == [
        f"mindexp: training failed: {message} (at {where} in {'lookup' if line == 9 else 'on_train_step_end'})",
        f"run directory: {run_dir}",
        f"traceback: {os.path.join(run_dir, 'error.txt')}"]
    with open(os.path.join(run_dir, "error.txt")) as f:
        text = f.read()
    assert text.startswith("Traceback (most recent call last):")
    assert f'File "{user_file}", line {line}' in text and text.rstrip().endswith(message)
    with open(os.path.join(run_dir, "run.json")) as f:
        meta = json.load(f)
    assert meta["status"] == "failed" and where in meta["error"]


@pytest.mark.slow
def test_verbose_prints_the_whole_traceback(cli, user_file):
    done = cli("run", "user_exp.py:NetworkFails", "--out", "out", "--set", "epochs=1", "--quiet",
               "--verbose")
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):")
    assert f'File "{user_file}", line 9, in lookup' in done.stderr
    assert "mindexp: training failed: KeyError: 'x'" in done.stderr


@pytest.mark.slow
def test_a_failing_source_names_the_users_frame_and_creates_nothing(main_cli, tmp_path,
                                                                    user_file):
    # (bad input: the CLI's main() in this process; test_cli checks the process's exit 2)
    done = main_cli("run", "user_exp.py:SourceFails", "--out", "out", "--quiet")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"mindexp: error: SourceFails.source('train') raised KeyError: 'x' "
        f"(at {user_file}:9 in lookup)"]
    assert runs_in(tmp_path / "out") == []
    verbose = main_cli("run", "user_exp.py:SourceFails", "--out", "out", "--quiet", "--verbose")
    assert verbose.returncode == 2 and f'File "{user_file}", line 9' in verbose.stderr


def test_a_source_without_training_data_is_bad_input_and_creates_nothing(main_cli, tmp_path,
                                                                       user_file):
    done = main_cli("run", "user_exp.py:NoTrainData", "--out", "out", "--quiet")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "mindexp: error: NoTrainData.source('train') must give the training data; accepted: "
        "a tuple of arrays, a random-access source (__getitem__/__len__; lazy = True to read it "
        "from disk batch by batch), or an unbatched mindspore.dataset Dataset. Received: None"]
    assert runs_in(tmp_path / "out") == []


@pytest.mark.slow
def test_a_graph_compile_error_keeps_mindspores_files_and_text_in_the_run_dir(cli, tmp_path,
                                                                                user_file):
    env = cli_env()
    env.pop("GLOG_v")  # as a user has it: mindexp's own default applies
    done = forkserver.run([sys.executable, "-m", "mindexp", "run", "user_exp.py:CompileFails",
                           "--out", "out", "--set", "epochs=1", "--set", "mode=graph", "--quiet"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    (run_dir,) = runs_in(tmp_path / "out")
    lines = done.stderr.splitlines()
    assert len(lines) == 3, done.stderr  # one line, the run directory, the traceback file
    assert lines[0].startswith("mindexp: training failed: RuntimeError: For 'MatMulExt'")
    assert lines[0].endswith(f"(at {user_file}:39)")
    assert lines[1] == f"run directory: {run_dir}"
    assert sorted(os.listdir(tmp_path)) == ["out", "user_exp.py"]  # no rank_0/ in the cwd
    assert os.path.isfile(os.path.join(run_dir, "rank_0", "om", "analyze_fail.ir"))
    with open(os.path.join(run_dir, "error.txt")) as f:
        text = f.read()
    assert "The Traceback of Net Construct Code" in text and text.count("\n") > 30


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_mindspore_reads_the_compile_dump_folder_from_ms_om_path(tmp_path, monkeypatch, ms_graph):
    """Contract test of the MindSpore behaviour compile_dumps relies on."""
    import importlib
    from mindexp.train.compile_dumps import kept_in
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user_exp_contract.py").write_text(USER_CODE)  # graph mode compiles files only
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("user_exp_contract")
    ms_graph.set_context(mode=ms_graph.GRAPH_MODE)  # another test may have left PyNative on
    with kept_in(tmp_path / "run"), pytest.raises(RuntimeError):
        module.BadShapes()(ms_graph.Tensor(np.ones((4, 1), np.float32)))
    assert os.path.isfile(tmp_path / "run" / "rank_0" / "om" / "analyze_fail.ir")
    assert not os.path.exists(tmp_path / "rank_0")
    assert "MS_OM_PATH" not in os.environ


# -- labels ---------------------------------------------------------------------------------

class Classes(Linear):
    """Three-class toy data for a sparse cross-entropy; ``bad`` spoils it."""

    bad = None

    def source(self, split):
        rng = np.random.default_rng(0)
        x = rng.random((60, 2)).astype(np.float32)
        y = (x[:, 0] * 3).astype(np.int32)
        if self.bad == "float_labels":
            y = y.astype(np.float32)
        elif self.bad == "nan_x":
            x[17, 1] = np.nan
        elif self.bad == "inf_eval" and split == "eval":
            x[4, 0] = np.inf
        elif self.bad == "too_big":
            y[7] = 3
        elif self.bad == "negative":
            y[9] = -1
        elif self.bad == "regression":  # float targets, one output: a regression
            y = (2 * x[:, :1]).astype(np.float32)
        return x, y

    def network(self):
        from mindspore import nn
        return nn.Dense(2, 1 if self.bad == "regression" else 3)

    def metrics(self):
        return ["accuracy"]


@pytest.mark.parametrize("bad, message", [
    ("float_labels", "column 'y' of source('train') holds float32 values, but loss "
                     "'cross_entropy' is a sparse cross-entropy that needs integer class ids"),
    ("nan_x", "column 'x' of source('train') has 1 NaN or infinite values (first in row 17)"),
    ("inf_eval", "column 'x' of source('eval') has 1 NaN or infinite values (first in row 4)"),
    ("too_big", "column 'y' of source('train') has class ids outside [0, 3) (the network has 3 "
                "outputs); first in row 7. Received: y[7]=3"),
    ("negative", "class ids outside [0, 3) (the network has 3 outputs); first in row 9. "
                 "Received: y[9]=-1"),
    ("regression", "column 'y' of source('train') holds float32 values, but loss "
                   "'cross_entropy' is a sparse cross-entropy that needs integer class ids"),
])
def test_bad_labels_are_rejected_before_anything_is_created(tmp_path, bad, message):
    exp = type("Spoiled", (Classes,), {"bad": bad})(loss="cross_entropy", epochs=1,
                                                    batch_size=10)
    with pytest.raises(DataError) as info:
        exp.run(out=str(tmp_path))
    assert message in str(info.value) and "\n" not in str(info.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_bad_labels_on_the_command_line_exit_2_with_one_line(main_cli, tmp_path):
    (tmp_path / "spoiled.py").write_text(
        "import numpy as np\nfrom mindspore import nn\nfrom mindexp.experiments.linear import Linear\n"
        "class Spoiled(Linear):\n"
        "    def source(self, split):\n"
        "        x = np.ones((40, 2), np.float32)\n"
        "        return (x, np.arange(40) % 7) if split == 'train' else None\n"
        "    def network(self):\n"
        "        return nn.Dense(2, 5)\n")
    done = main_cli("run", "spoiled.py:Spoiled", "--out", "out", "--set", "loss=cross_entropy")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "class ids outside [0, 5)" in done.stderr
    assert not (tmp_path / "out").exists() or runs_in(tmp_path / "out") == []


def test_good_labels_train(tmp_path):
    run = Classes(loss="cross_entropy", epochs=1, batch_size=10).run(out=str(tmp_path))
    assert run.status == "completed"


# -- signals --------------------------------------------------------------------------------

def _start(tmp_path, *args, **env):
    return forkserver.popen([sys.executable, "-m", "mindexp", *args], cwd=tmp_path,
                            env=cli_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_for_file(path, proc, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        if os.path.exists(path):
            return
        time.sleep(0.02)
    raise AssertionError(f"no {path}")


def _wait_for_rows(path, rows, proc, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        if os.path.exists(path):
            with open(path) as f:
                if sum(1 for _ in f) > rows:
                    return
        time.sleep(0.2)
    raise AssertionError(f"{path} did not reach {rows} rows")


PAUSING = '''
import os
import time
from mindexp.experiments.linear import Linear


class Pausing(Linear):
    """The seed's experiment; once the file $PAUSE exists, one step's end writes
    $PAUSE.ready and waits in Python, where the test's signal lands, until the
    test says it sent it ($PAUSE.sent)."""

    def callbacks(self):
        from mindspore.train import Callback
        pause = os.environ["PAUSE"]

        class Pause(Callback):
            def on_train_step_end(self, run_context):
                if os.path.exists(pause) and not os.path.exists(pause + ".ready"):
                    open(pause + ".ready", "w").close()
                    deadline = time.monotonic() + 120
                    while not os.path.exists(pause + ".sent") and time.monotonic() < deadline:
                        time.sleep(0.005)
        return [Pause()]
'''


@pytest.mark.slow
def test_sigint_and_sigterm_are_reported_by_name_with_exit_130_and_143(tmp_path):
    """Ctrl-C of `run` (SIGINT) then SIGTERM of `resume`.

    The SIGINT is sent while the run waits between two steps: MindSpore 2.10's
    own handler, installed while its runtime runs a graph (in graph mode every
    step; in PyNative at least the backward pass), turns a SIGINT into
    ``kill(getpid(), SIGTERM)`` (GraphScheduler's IntHandler), so a Ctrl-C that
    lands inside one is seen as SIGTERM (a known limitation, see README). Sent at
    a random moment of a PyNative step, it was seen as SIGTERM in one full run."""
    (tmp_path / "pausing.py").write_text(PAUSING)
    pause = tmp_path / "pause"
    args = ["--set", "epochs=5000", "--set", "checkpoint_interval_s=0", "--set", "mode=pynative",
            "--out", "out", "--quiet"]
    proc = _start(tmp_path, "run", "pausing.py:Pausing", *args, PAUSE=str(pause))
    run_dir = _wait_for_run_dir(tmp_path / "out" / "linear", proc)
    _wait_for_rows(os.path.join(run_dir, "loss.csv"), 100, proc)
    pause.touch()
    _wait_for_file(tmp_path / "pause.ready", proc)
    proc.send_signal(signal.SIGINT)
    (tmp_path / "pause.sent").touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert "mindexp: warning: SIGINT: stopping after this step" in err
    meta = _meta(run_dir)
    assert meta["status"] == "interrupted" and meta["signal"] == "SIGINT", meta
    assert "interrupted by SIGINT" in out

    steps = meta["steps"]
    proc = _start(tmp_path, "resume", run_dir, "--quiet", PAUSE=str(pause))  # paused once
    _wait_for_rows(os.path.join(run_dir, "loss.csv"), steps + 100, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, out + err
    meta = _meta(run_dir)
    assert meta["status"] == "interrupted" and meta["signal"] == "SIGTERM", meta
    assert [r["previous_status"] for r in meta["resumes"]] == ["interrupted"]


def _wait_for_run_dir(folder, proc, timeout=120):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        if os.path.isdir(folder) and os.listdir(folder):
            return os.path.join(folder, os.listdir(folder)[0])
        time.sleep(0.2)
    raise AssertionError(f"no run directory in {folder}")


def _meta(run_dir):
    with open(os.path.join(run_dir, "run.json")) as f:
        return json.load(f)


# -- a full disk ----------------------------------------------------------------------------

@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_record_counts_only_the_steps_its_loss_log_holds_when_the_disk_fills(tmp_path,
                                                                              monkeypatch):
    """Rows buffered when the disk fills never reach loss.csv: run.json's steps and
    final loss are those of its last row, not of the last step trained."""
    import errno
    from mindexp.callbacks import csv_log, schema
    from mindexp import layout
    flush, flushed = csv_log.CsvLog.flush, []

    def full_after_one_loss_flush(log):
        if log.pending and log.path.endswith(schema.LOSS.filename):
            if flushed:
                raise OSError(errno.ENOSPC, "No space left on device")
            flushed.append(log.pending)
        flush(log)
    monkeypatch.setattr(csv_log.CsvLog, "flush", full_after_one_loss_flush)
    monkeypatch.setattr(csv_log.CsvLog, "flush_if_due", csv_log.CsvLog.flush)  # each epoch
    with pytest.raises(Exception, match="No space left"):
        Linear(epochs=3).run(out=str(tmp_path))
    (run_dir,) = [os.path.join(r, d) for r, ds, _ in os.walk(tmp_path) for d in ds
                  if os.path.exists(os.path.join(r, d, layout.RUN_JSON))]
    with open(os.path.join(run_dir, layout.RUN_JSON)) as f:
        meta = json.load(f)
    loss = schema.read_log(run_dir, "loss")
    assert meta["status"] == "failed" and flushed and len(loss) == flushed[0]
    assert meta["steps"] == int(loss["step"].iloc[-1]) < 3 * flushed[0]
    assert meta["final_loss"] == pytest.approx(float(loss["loss"].iloc[-1]))
