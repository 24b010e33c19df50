"""The data a run trained on is identified: a fingerprint of what source() returned,
recorded in run.json and shown by show and diff."""
import hashlib
import json
import os

import numpy as np
import pytest

FROM_FILE = '''
from dataclasses import dataclass
import numpy as np
from mindspore import nn
from mindexp import Experiment


class FromFile(Experiment):
    """y = 2x, read from points.npy beside this file."""
    name = "from_file"

    @dataclass
    class Config(Experiment.Config):
        epochs: int = 1
        batch_size: int = 8

    def source(self, split):
        import os
        points = np.load(os.path.join(os.path.dirname(__file__), "points.npy"))
        return (points[:, :1], points[:, 1:]) if split == "train" else None

    def network(self):
        return nn.Dense(1, 1)
'''


def _points(slope):
    x = np.linspace(0, 1, 32, dtype=np.float32).reshape(-1, 1)
    return np.hstack([x, slope * x]).astype(np.float32)


def run_dir_of(done):
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[0].split(": ", 1)[1]


@pytest.mark.slow
def test_a_run_whose_data_changed_shows_it_in_show_and_diff(cli, tmp_path):
    (tmp_path / "mine.py").write_text(FROM_FILE)
    np.save(tmp_path / "points.npy", _points(2.0))
    first = run_dir_of(cli("run", "mine.py:FromFile", "--quiet"))
    np.save(tmp_path / "points.npy", _points(3.0))  # same shapes, other values
    second = run_dir_of(cli("run", "mine.py:FromFile", "--quiet"))
    with open(os.path.join(first, "run.json"), encoding="utf-8") as f:
        data = json.load(f)["provenance"]["data"]
    y = np.ascontiguousarray(_points(2.0)[:, 1:])
    assert data["train"]["kind"] == "arrays" and data["train"]["samples"] == 32
    assert data["train"]["columns"][1] == {"name": "y", "shape": [32, 1], "dtype": "float32",
                                           "sha256": hashlib.sha256(y.tobytes()).hexdigest()}
    shown = cli("show", first).stdout
    assert f"train.y  float32 (32, 1) sha256:{hashlib.sha256(y.tobytes()).hexdigest()[:12]}" \
        in shown
    diff = cli("diff", first, second).stdout
    section = diff.split("\ndata:\n", 1)[1].split("\n\n", 1)[0]
    assert "train.y" in section and "train.x" not in section  # x is the same
    assert "config: same" in diff and "modules: same" in diff


def test_files_behind_lazy_and_memory_mapped_sources_by_path_size_and_time(tmp_path):
    from mindexp.define.data import as_arrays
    from mindexp.define.sources import Lazy, LazyRows
    from mindexp.provenance.data import fingerprint, summary

    class Rows:
        lazy = True

        def __init__(self, path):
            self.path = str(path)
            self.points = np.load(self.path, mmap_mode="r")

        def __len__(self):
            return len(self.points)

        def __getitem__(self, i):
            return self.points[i, :1], self.points[i, 1:]

    np.save(tmp_path / "points.npy", _points(2.0))
    size = os.path.getsize(tmp_path / "points.npy")
    lazy = fingerprint(LazyRows(Rows(tmp_path / "points.npy"), ("x", "y"), "train"), ("x", "y"))
    assert lazy["kind"] == "lazy" and lazy["samples"] == 32
    (file,) = lazy["files"]
    assert file["path"] == str(tmp_path / "points.npy") and file["bytes"] == size
    assert "sha256" not in file  # content hashing is opt-in
    hashed = fingerprint(LazyRows(Lazy(Rows(tmp_path / "points.npy")), ("x", "y"), "train"),
                         ("x", "y"), content=True)
    with open(tmp_path / "points.npy", "rb") as f:
        assert hashed["files"][0]["sha256"] == hashlib.sha256(f.read()).hexdigest()
    np.save(tmp_path / "x.npy", _points(2.0)[:, :1])
    np.save(tmp_path / "y.npy", _points(2.0)[:, 1:])
    arrays = as_arrays(tuple(np.load(tmp_path / f"{c}.npy", mmap_mode="r") for c in "xy"),
                       ("x", "y"), "train")
    column = fingerprint(arrays, ("x", "y"))["columns"][0]  # kept memory-mapped: its file
    assert column["file"]["path"] == str(tmp_path / "x.npy") and "sha256" not in column
    assert column["file"]["bytes"] == os.path.getsize(tmp_path / "x.npy")
    text = summary({"train": lazy})
    assert text["train"].startswith("lazy, 32 samples")
    assert text[f"train:{tmp_path / 'points.npy'}"].startswith(f"{size} bytes, modified ")


def test_an_image_folder_dataset_is_fingerprinted_by_its_folder(tmp_path):
    from mindexp.define.sources import SampleSource
    from mindexp.provenance.data import fingerprint
    import mindspore.dataset as ds
    for label in ("a", "b"):
        (tmp_path / "img" / label).mkdir(parents=True)
        (tmp_path / "img" / label / "1.bin").write_bytes(b"12345")
    make = lambda: ds.ImageFolderDataset(str(tmp_path / "img"), decode=False)  # noqa: E731
    found = fingerprint(SampleSource(make, ("image", "label"), "train"), ("image", "label"))
    assert found["kind"] == "mindspore dataset" and found["samples"] == 2
    (folder,) = found["files"]
    assert folder["path"] == str(tmp_path / "img") + os.sep
    assert folder["files"] == 2 and folder["bytes"] == 10
