"""One mindexp run in its own process, reporting its peak RSS (goal 6).

    python benchmarks/memrun.py STEPS OUT_DIR

Trains the seed's Dense(1, 1) with every default callback logging every
step (batch 10, 1,000 steps per epoch, STEPS/1,000 epochs; checkpoints
throttled as by default) and prints one JSON line: peak RSS of this process
(``ru_maxrss``), the RSS after the first and the last epoch (from
/proc/self/statm), steps and wall time.
"""
import json
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")

STEPS_PER_EPOCH = 1000
BATCH = 10


def rss_kb():
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") // 1024
    except OSError:
        return None


def main():
    steps, out = int(sys.argv[1]), sys.argv[2]
    from mindspore.train import Callback

    from mindexp.experiments.linear import Linear

    samples = min(steps, STEPS_PER_EPOCH) * BATCH
    epochs = max(1, steps * BATCH // samples)
    rss = []

    class Rss(Callback):
        def on_train_epoch_end(self, run_context):
            rss.append(rss_kb())

    class Mem(Linear):
        def callbacks(self):
            return [Rss()]
    Mem.name = "linear"

    t0 = time.perf_counter()
    run = Mem(samples=samples, batch_size=BATCH, epochs=epochs).run(out=out, quiet=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"steps": run.meta["steps"], "status": run.status, "epochs": epochs,
                      "peak_rss_kb": peak, "rss_first_epoch_kb": rss[0] if rss else None,
                      "rss_last_epoch_kb": rss[-1] if rss else None,
                      "seconds": time.perf_counter() - t0, "run_dir": run.dir}))


if __name__ == "__main__":
    main()
