"""cProfile of the four default callbacks' hooks only, inside a real Model.train.

    python benchmarks/profile_hooks.py W2 [--rev 4cc66a8] [--top 12] [--quick]

Trains the workload twice (the first run warms up: graph compile, imports)
with LossMonitor, ParameterTracker, GradNormMonitor and Checkpoint as the
runner sets them, and profiles nothing but their hooks in the second run:
the training's own time stays out of the table, so the figure is what the
callbacks cost on the training thread. ``--rev`` profiles the callbacks of
a git revision (loaded as ab.py does) instead of the working tree's.
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")

HOOKS = ("on_train_begin", "on_train_step_end", "on_train_epoch_end", "on_train_end")


def profiled(callbacks, prof):
    """A callback running ``callbacks``' hooks, profiled by ``prof`` (None: not)."""
    from mindspore.train import Callback

    class Profiled(Callback):
        pass

    def hook(name):
        def run(self, run_context):
            if prof is not None:
                prof.enable()
            for cb in callbacks:
                getattr(cb, name)(run_context)
            if prof is not None:
                prof.disable()
        return run

    for name in HOOKS:
        setattr(Profiled, name, hook(name))
    return Profiled()


def train(w, package, prof, out):
    import mindspore as ms
    from mindspore.train import Model

    from benchmarks import interleave, ms_side
    from mindexp import callbacks
    from mindexp.define.data import as_arrays
    from mindexp.train.session import startup_objects_frozen
    exp = ms_side.experiment(w)
    arrays = as_arrays(exp.source("train"), exp.columns, "train")
    ms.set_seed(0)
    net = exp.network()
    opt = exp.optimizer(net.trainable_params(), exp.learning_rate(w.steps_per_epoch))
    cell = callbacks.TrainStep(exp.loss_network(net), opt)
    cbs = interleave.default_sets({"set": package}, out)["set"]
    with startup_objects_frozen():   # as the runner trains
        Model(cell).train(w.epochs, exp.dataset("train", arrays), callbacks=[profiled(cbs, prof)],
                          dataset_sink_mode=False)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=("W1b", "W2", "FB", "W3"))
    p.add_argument("--rev", default=None, help="git revision of the callbacks (default: the working tree)")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)

    from benchmarks import ms_side
    from benchmarks.ab import load_revision
    from benchmarks.workloads import FULL, QUICK
    from mindexp import callbacks
    w = (QUICK if args.quick else FULL)[args.workload]
    tmp = tempfile.mkdtemp(prefix="mindexp-hooks-")
    package = load_revision(args.rev, tmp) if args.rev else callbacks
    ms_side.setup_context()
    train(w, package, None, os.path.join(tmp, "warm-up"))
    prof = cProfile.Profile()
    train(w, package, prof, os.path.join(tmp, "profiled"))
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf).strip_dirs()
    print(f"callbacks of {args.rev or 'the working tree'} on {w.key} ({w.steps} steps): "
          f"{stats.total_tt:.3f} s in the four callbacks' hooks under cProfile")
    stats.sort_stats("tottime").print_stats(args.top)
    text = buf.getvalue()
    print(text[text.find("   ncalls"):].rstrip())


if __name__ == "__main__":
    main()
