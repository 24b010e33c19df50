"""A/B of the callbacks package: a git revision against the working tree.

    python benchmarks/ab.py [--rev HEAD] [--workload W1b] [--runs 3] [--quick]

Loads ``callbacks/`` of ``--rev`` under another package name next to the
working tree's and trains the workload with three sets of callbacks
interleaved inside each ``Model.train`` (benchmarks/interleave.py): none,
the four defaults of the revision, those of the working tree (every step;
Checkpoint as the runner sets it: every epoch, at least 10 s apart). Prints
each set's time against none, so that a change inside callbacks/ is judged
by a same-process, same-second comparison.
"""
import argparse
import importlib.util
import os
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("GLOG_v", "3")


def load_revision(rev, dest):
    """``callbacks/`` of git revision ``rev`` as the package ``callbacks_ab``."""
    archive = os.path.join(dest, "cb.tar")
    subprocess.run(["git", "archive", "-o", archive, rev, "callbacks"], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    pkg = os.path.join(dest, "callbacks")
    spec = importlib.util.spec_from_file_location(
        "callbacks_ab", os.path.join(pkg, "__init__.py"), submodule_search_locations=[pkg])
    module = importlib.util.module_from_spec(spec)
    sys.modules["callbacks_ab"] = module
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", default="HEAD", help="git revision of the 'before' callbacks")
    p.add_argument("--workload", default="W1b", choices=("W1b", "W2", "FB"))
    p.add_argument("--runs", type=int, default=3, help="Model.train runs (each interleaved)")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)

    from mindexp import callbacks
    from benchmarks import interleave, ms_side
    from benchmarks.util import median
    from benchmarks.workloads import FULL, QUICK

    w = (QUICK if args.quick else FULL)[args.workload]
    tmp = tempfile.mkdtemp(prefix="mindexp-ab-")
    before = load_revision(args.rev, tmp)
    ms_side.setup_context()
    impls = {"off": None, args.rev: before, "worktree": callbacks}
    runs = []
    for r in range(args.runs):
        res = interleave.measure(w, impls, os.path.join(tmp, f"run{r}"))
        runs.append(res)
        print(f"run {r + 1}: " + ", ".join(f"{k} {v['time_ratio']:.3f}x" for k, v in res.items()),
              file=sys.stderr, flush=True)
    print(f"{w.key}: {w.title}; {args.runs} runs, sets interleaved by "
          f"{'epoch' if interleave.chunking(w, 3)[0] else 'chunks of steps'} inside each")
    print(f"  {'':<10} {'chunks':>6}  {'mean chunk':>10}  {'time/off':>8}  {'median/off':>10}"
          f"  {'train thread CPU/off':>20}")
    for k in impls:
        chunks = runs[0][k]["chunks"]
        mean = median([x[k]["mean_chunk_s"] for x in runs]) * 1e3
        ratio = median([x[k]["time_ratio"] for x in runs])
        mratio = median([x[k]["median_ratio"] for x in runs])
        cratio = median([x[k]["cpu_ratio"] for x in runs])
        print(f"  {k:<10} {chunks:>6}  {mean:7.3f} ms  {ratio:7.3f}x  {mratio:9.3f}x  {cratio:19.3f}x")
    gain = median([x[args.rev]["mean_chunk_s"] / x["worktree"]["mean_chunk_s"] for x in runs])
    over_b = median([x[args.rev]["time_ratio"] - 1 for x in runs])
    over_w = median([x["worktree"]["time_ratio"] - 1 for x in runs])
    print(f"  worktree vs {args.rev}: {gain:.3f}x faster; callback overhead "
          f"{over_b * 100:+.1f}% -> {over_w * 100:+.1f}% of the callback-free time")


if __name__ == "__main__":
    main()
