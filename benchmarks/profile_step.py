"""cProfile of one benchmark variant: where does mindexp's per-step time go?

    python benchmarks/profile_step.py W1b [--variant mindexp_on] [--top 25] [--quick]

A warm-up run of the same variant first (graph compile, imports), then the
profiled run; prints the top functions by own time and by cumulative time.
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=("W1b", "W2", "FB", "W3"))
    p.add_argument("--variant", default="mindexp_on")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--dump", help="also save the raw stats to this file (snakeviz, pstats)")
    args = p.parse_args(argv)

    from benchmarks import ms_side
    from benchmarks.workloads import FULL, QUICK
    w = (QUICK if args.quick else FULL)[args.workload]
    ms_side.setup_context()
    out = tempfile.mkdtemp(prefix="mindexp-profile-")
    ms_side.measure(args.variant, w, out)            # warm-up
    prof = cProfile.Profile()
    prof.enable()
    res = ms_side.measure(args.variant, w, out)
    prof.disable()
    print(f"{args.variant} on {w.key}: {res['steps_per_s']:.0f} steps/s under cProfile "
          f"({w.steps} steps)")
    if args.dump:
        prof.dump_stats(args.dump)
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key).print_stats(args.top)
        text = buf.getvalue()
        print(f"--- by {key} ---")
        print(text[text.find("   ncalls"):].rstrip())


if __name__ == "__main__":
    main()
