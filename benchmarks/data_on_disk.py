"""Data on disk, printed as ratios of one run of this script.

    python benchmarks/data_on_disk.py            # 0.5 GB vs 2 GB, 2 rounds (~10 min on 2 cores)
    python benchmarks/data_on_disk.py --quick    # tiny sizes: checks the script works

1. **Peak RSS vs on-disk size**: a folder of PNGs (16x16 shapes, each file
   padded to ~1 MB with an uncompressed text chunk) of ``--small-gb`` and
   ``--big-gb`` is written into a temporary folder (removed after), and one
   epoch of the ``image_folder`` experiment trains on each in its own
   process; its peak RSS (``ru_maxrss``) is printed, and big/small.
2. **mindexp vs bare Model.train** over the same ``ImageFolderDataset``
   pipeline (decode, random crop, rescale, HWC2CHW, one channel; batch 32;
   the same network, loss and optimizer): steps/s of each, measured by the
   same ``mindexp.callbacks.Timer`` (first step end to last), each in its
   own process, alternated for ``--rounds``; the median ratio.
3. **In-memory arrays keep the fast path**: steps/s of 20,000 in-memory
   samples as arrays, and the same rows as a lazy source (``Lazy``): ratio.

Every process is a fresh interpreter; the repository is first on sys.path.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")

MB = 1 << 20


def _child(args):
    """Run one measurement in a fresh process; returns its JSON line."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *args],
                          capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode:
        raise SystemExit(f"child {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- children -------------------------------------------------------------------

def child_rss(folder, out):
    from mindexp.experiments.image_folder import ImageFolder
    run = ImageFolder(data_dir=folder, epochs=1, metrics=(), checkpoint_every=0).run(out=out)
    return {"status": run.status, "steps": run.meta["steps"],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _pipeline(folder):
    from mindexp.experiments.image_folder import ImageFolder
    exp = ImageFolder(data_dir=folder)
    return exp, exp.source("train")


def child_mindexp(folder, out, epochs):
    from mindexp.experiments.image_folder import ImageFolder
    run = ImageFolder(data_dir=folder, epochs=epochs, metrics=(), checkpoint_every=0).run(out=out)
    return {"steps_per_s": run.meta["steps_per_s"], "steps": run.meta["steps"]}


def child_bare(folder, epochs):
    """The same pipeline, network, loss and optimizer fed to Model.train by hand."""
    import mindspore as ms
    import mindspore.dataset as ds
    from mindspore import nn
    from mindspore.train import Model
    from mindexp.callbacks import Timer
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    exp, _ = _pipeline(folder)
    data = ds.ImageFolderDataset(os.path.join(folder, "train"), decode=False, shuffle=True)
    data = data.map(exp._transforms(True), input_columns="image", num_parallel_workers=2)
    data = data.map(ds.transforms.TypeCast(ms.int32), input_columns="label")
    data = data.batch(32, drop_remainder=True)
    net = exp.network()
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Adam(net.trainable_params(), learning_rate=0.005))
    timer = Timer()
    model.train(epochs, data, callbacks=[timer], dataset_sink_mode=False)
    return {"steps_per_s": round(timer.steps_per_s, 2)}


def child_memory(kind, out):
    import numpy as np
    from mindexp.experiments.linear import Linear
    from mindexp.define.sources import Lazy

    class Rows:
        def __init__(self, x, y):
            self.x, self.y = x, y

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return self.x[i], self.y[i]

    class Kind(Linear):
        def source(self, split):
            if split != "train":
                return None
            x, y = super().source(split)
            x, y = np.resize(x, (20000,) + x.shape[1:]), np.resize(y, (20000,) + y.shape[1:])
            if kind == "samples":  # MindSpore's pipeline, 2 parallel workers
                import mindspore.dataset as ds
                return ds.GeneratorDataset(Rows(x, y), ["x", "y"], shuffle=False,
                                           num_parallel_workers=2)
            return (x, y) if kind == "arrays" else Lazy(Rows(x, y))

    run = Kind(epochs=3, checkpoint_every=0).run(out=out)
    return {"steps_per_s": run.meta["steps_per_s"], "steps": run.meta["steps"]}


# -- parent ---------------------------------------------------------------------

def write_folder(folder, gigabytes, per_class=None):
    from mindexp.experiments.image_folder import write_shapes
    pad = MB if per_class is None else 0
    per_class = per_class or max(8, int(gigabytes * 1024 / 4))
    write_shapes(folder, per_class=per_class, side=16, seed=0, eval_per_class=0,
                 pad_bytes=pad)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)
    return size / (1 << 30)


def bench_rss(tmp, small_gb, big_gb):
    rows = []
    for gb in (small_gb, big_gb):
        folder = os.path.join(tmp, f"rss_{gb}")
        size = write_folder(folder, gb)
        got = _child(["rss", folder, os.path.join(tmp, "out")])
        shutil.rmtree(folder)
        rows.append((size, got))
        print(f"  on disk {size:5.2f} GB: peak RSS {got['peak_rss_mb']:7.1f} MB "
              f"({got['steps']} steps, {got['status']})", flush=True)
    ratio = rows[1][1]["peak_rss_mb"] / rows[0][1]["peak_rss_mb"]
    print(f"  peak RSS {rows[1][0]:.2f} GB / {rows[0][0]:.2f} GB: x{ratio:.3f} "
          f"(data x{rows[1][0] / rows[0][0]:.1f})", flush=True)
    return rows, ratio


def bench_speed(tmp, rounds, per_class, epochs):
    folder = os.path.join(tmp, "shapes")
    write_folder(folder, 0, per_class=per_class)
    ours, bare = [], []
    for _ in range(rounds):
        ours.append(_child(["mindexp", folder, os.path.join(tmp, "out"), str(epochs)])["steps_per_s"])
        bare.append(_child(["bare", folder, str(epochs)])["steps_per_s"])
    ratio = statistics.median(o / b for o, b in zip(ours, bare))
    print(f"  ImageFolderDataset pipeline: mindexp {statistics.median(ours):.1f} steps/s, "
          f"bare Model.train {statistics.median(bare):.1f} steps/s: x{ratio:.3f}", flush=True)
    return ratio


def bench_memory(tmp, rounds):
    rates = {"arrays": [], "lazy": [], "samples": []}
    for _ in range(rounds):
        for kind, got in rates.items():
            got.append(_child(["memory", kind, os.path.join(tmp, "out")])["steps_per_s"])
    arrays = statistics.median(rates["arrays"])
    lazy, samples = statistics.median(rates["lazy"]), statistics.median(rates["samples"])
    print(f"  in memory: arrays {arrays:.0f} steps/s; the same rows as a Lazy source "
          f"{lazy:.0f} steps/s (x{lazy / arrays:.3f}); as a GeneratorDataset of samples with 2 "
          f"workers {samples:.0f} steps/s (x{samples / arrays:.3f})", flush=True)
    return lazy / arrays


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        what, args = sys.argv[2], sys.argv[3:]
        result = {"rss": lambda: child_rss(*args),
                  "mindexp": lambda: child_mindexp(args[0], args[1], int(args[2])),
                  "bare": lambda: child_bare(args[0], int(args[1])),
                  "memory": lambda: child_memory(*args)}[what]()
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--small-gb", type=float, default=0.5)
    parser.add_argument("--big-gb", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="rss,speed,memory",
                        help="comma-separated parts: rss, speed, memory")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    if args.quick:
        args.small_gb, args.big_gb, args.rounds = 0.02, 0.05, 1
    tmp = tempfile.mkdtemp(prefix="mindexp-data-bench-")
    try:
        if "rss" in parts:
            print("1. peak RSS vs on-disk size (one epoch of image_folder)", flush=True)
            bench_rss(tmp, args.small_gb, args.big_gb)
        if "speed" in parts:
            print("2. steps/s over an ImageFolderDataset pipeline", flush=True)
            bench_speed(tmp, args.rounds, 50 if args.quick else 500, 1 if args.quick else 3)
        if "memory" in parts:
            print("3. in-memory arrays vs a lazy source of the same rows", flush=True)
            bench_memory(tmp, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
