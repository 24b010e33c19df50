"""What system.csv costs: W2 trained with the sampler off and on, runs interleaved.

The sampler is a thread for a whole run, so it cannot be switched per chunk
inside one ``Model.train`` (benchmarks/interleave.py): here whole runs
alternate, off/on then on/off (A B B A ...), and the ratio is the median
over rounds of ``steps/s off / steps/s on`` measured in the same round (the
run's Timer: from the end of the first step, compile excluded).
``--every 0.1`` samples 50 times as often as the default, to make the
sampler's own cost visible above the noise.

    .venv/bin/python benchmarks/system_cost.py [--rounds 4] [--every 5] [--quick]
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--every", type=float, default=5.0, help="system_every_s when on")
    parser.add_argument("--quick", action="store_true", help="tiny W2: checks that it runs")
    args = parser.parse_args(argv)
    from benchmarks import ms_side
    from benchmarks.workloads import FULL, QUICK
    w = (QUICK if args.quick else FULL)["W2"]
    rates = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as out:
        for k in range(args.rounds):
            order = ("off", "on") if k % 2 == 0 else ("on", "off")
            for name in order:
                every = 0 if name == "off" else args.every
                run = ms_side.experiment(w, system_every_s=every, checkpoint_every=0,
                                         mode="graph").run(out=out, quiet=True)
                rates[name].append(run.meta["steps_per_s"])
                print(f"round {k + 1} {name:>3}: {run.meta['steps_per_s']:.1f} steps/s",
                      flush=True)
    ratios = [off / on for off, on in zip(rates["off"], rates["on"])]
    print(f"W2 ({w.steps} steps), system_every_s={args.every:g}: off/on steps/s ratio, "
          f"median of {len(ratios)} interleaved rounds: {statistics.median(ratios):.4f} "
          f"(each: {', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
