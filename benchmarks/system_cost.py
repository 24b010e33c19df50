"""What system.csv costs: W2 trained with the sampler off and on, runs interleaved.

The sampler is a thread for a whole run, so it cannot be switched per chunk
inside one ``Model.train`` (benchmarks/interleave.py): here whole runs
alternate, off/on then on/off (A B B A ...), and the ratio is the median
over rounds of ``steps/s off / steps/s on`` measured in the same round (the
run's Timer: from the end of the first step, compile excluded). The same
ratio of CPU seconds per run (this process's, which a loaded machine
inflates far less than wall time) is printed beside it, and the sampler's
own cost: CPU microseconds of one sample (psutil's reads and the CSV row),
which is what the training process pays every ``system_every_s`` seconds
(the step hook only counts). ``--every 0.1`` samples 50 times as often as
the default, to make the sampler's cost visible above the noise.

    .venv/bin/python benchmarks/system_cost.py [--rounds 4] [--every 5] [--quick]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sample_cost_us(folder, samples=200):
    """CPU microseconds of one SystemMonitor sample (median of ``samples``)."""
    from mindexp.callbacks import SystemMonitor
    monitor = SystemMonitor(folder, every_s=3600)
    monitor.on_train_begin(None)
    costs = []
    for _ in range(samples):
        start = time.thread_time()
        monitor._sample()
        costs.append(time.thread_time() - start)
    monitor.close()
    return 1e6 * statistics.median(costs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--every", type=float, default=5.0, help="system_every_s when on")
    parser.add_argument("--quick", action="store_true", help="tiny W2: checks that it runs")
    args = parser.parse_args(argv)
    from benchmarks import ms_side
    from benchmarks.workloads import FULL, QUICK
    w = (QUICK if args.quick else FULL)["W2"]
    rates, cpu = {"off": [], "on": []}, {"off": [], "on": []}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as out:
        for k in range(args.rounds):
            order = ("off", "on") if k % 2 == 0 else ("on", "off")
            for name in order:
                every = 0 if name == "off" else args.every
                start = time.process_time()
                run = ms_side.experiment(w, system_every_s=every, checkpoint_every=0,
                                         mode="graph").run(out=out, quiet=True)
                cpu[name].append(time.process_time() - start)
                rates[name].append(run.meta["steps_per_s"])
                print(f"round {k + 1} {name:>3}: {run.meta['steps_per_s']:.1f} steps/s, "
                      f"{cpu[name][-1]:.2f} CPU s", flush=True)
        one_sample = sample_cost_us(out)
    ratios = [off / on for off, on in zip(rates["off"], rates["on"])]
    cpu_ratios = [on / off for off, on in zip(cpu["off"], cpu["on"])]
    print(f"load average (1, 5, 15 min) before: {' '.join(f'{v:.2f}' for v in load_before)}, "
          f"after: {' '.join(f'{v:.2f}' for v in os.getloadavg())} ({os.cpu_count()} cores)")
    print(f"W2 ({w.steps} steps), system_every_s={args.every:g}: off/on steps/s ratio, "
          f"median of {len(ratios)} interleaved rounds: {statistics.median(ratios):.4f} "
          f"(each: {', '.join(f'{r:.3f}' for r in ratios)})")
    print(f"  CPU seconds of a run, on/off: {statistics.median(cpu_ratios):.4f} "
          f"(each: {', '.join(f'{r:.3f}' for r in cpu_ratios)})")
    train_s = statistics.median(w.steps / r for r in rates["on"])
    share = one_sample * 1e-6 * (2 + train_s / args.every) / train_s
    print(f"  one sample: {one_sample:.0f} CPU us; a {train_s:.1f} s run takes "
          f"{2 + int(train_s / args.every)} samples = {100 * share:.4f} % of its time")


if __name__ == "__main__":
    main()
