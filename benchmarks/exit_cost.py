"""What a mindexp process spends on leaving, interleaved in one run.

    python benchmarks/exit_cost.py [--rounds N]

Each command runs ``--rounds`` times (default 5) both ways, in turn:

- ``plain``: ``sys.exit(main())``, as the console script did before this change;
- ``console``: ``mindexp.cli.main:console``, which freezes the garbage
  collector before exiting, so CPython's last collection skips everything
  MindSpore loaded.

Three commands: ``run linear`` (the seed's 300 steps), ``run mlp_sine`` (a
larger net, more steps) and ``runs`` (no MindSpore: what a light command saves).
Prints the median wall and CPU (user + system of the child) of each, and the
ratio console / plain.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.util import env_for_children, median  # noqa: E402

WAYS = {"plain": "import sys; from mindexp.cli.main import main; sys.exit(main())",
        "console": "from mindexp.cli.main import console; console()"}
COMMANDS = {"run linear": ["run", "linear", "--out", "{out}", "--quiet"],
            "run mlp_sine": ["run", "mlp_sine", "--out", "{out}", "--quiet"],
            "runs": ["runs", "{out}"]}  # last: it lists the runs above


def _timed(code, args, out):
    """(wall s, cpu s) of one child running ``code`` with ``args``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *[a.format(out=out) for a in args]],
                          env=env_for_children(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=900)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed: {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'command':<14}{'plain wall':>11}{'console wall':>14}{'ratio':>7}"
          f"{'plain cpu':>11}{'console cpu':>13}{'ratio':>7}  load")
    with tempfile.TemporaryDirectory() as out:
        for name, argv in COMMANDS.items():
            times = {way: [] for way in WAYS}
            for turn in range(args.rounds):
                order = list(WAYS) if turn % 2 == 0 else list(WAYS)[::-1]
                for way in order:
                    times[way].append(_timed(WAYS[way], argv, out))
            wall = {w: median([t[0] for t in times[w]]) for w in WAYS}
            cpu = {w: median([t[1] for t in times[w]]) for w in WAYS}
            print(f"{name:<14}{wall['plain']:>10.2f}s{wall['console']:>13.2f}s"
                  f"{wall['console'] / wall['plain']:>6.2f}x{cpu['plain']:>10.2f}s"
                  f"{cpu['console']:>12.2f}s{cpu['console'] / cpu['plain']:>6.2f}x"
                  f"  {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
