"""The dashboard's memory while runs are drawn, removed, and one huge run drawn.

    python benchmarks/dashboard_memory.py [--runs 300] [--steps 6000] [--cache-mb 256]
                                           [--huge-mb 129] [--json FILE]

Trains one real run of the seed's Dense(1, 1) (``--steps`` steps, every
callback logging every step), copies it ``--runs`` times (each copy its own
run id), starts ``mindexp serve`` on them (its own process, 127.0.0.1, port
0) and draws every run once through the page's own request
(``/api/data?run=<key>``), reading the server's resident memory
(``/proc/PID/status`` VmRSS) as it goes; then removes the runs and polls
(``/api/data``); then draws one run whose loss.csv is ``--huge-mb`` MB.
An unbounded cache measured 32 -> 505 MB over 300 runs of 6,000
steps, kept after the runs were deleted, and 564 MB for good after one
129 MB loss.csv. The server's cache is bounded by ``--cache-mb``.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable


def rss_mb(pid):
    """Resident memory of ``pid`` in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def train_one(out, steps):
    """One real linear run of ``steps`` steps (10 a epoch); its folder."""
    epochs = max(1, steps // 100)
    subprocess.run([PYTHON, "-m", "mindexp", "run", "linear", "--out", out, "--quiet",
                    "--set", "samples=1000", "--set", f"epochs={epochs}"],
                   check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, MINDEXP_PLOTS="0"))
    exp = os.path.join(out, "linear")
    return os.path.join(exp, sorted(os.listdir(exp))[0])


def copy_runs(source, root, count):
    """``count`` copies of ``source`` below ``root/linear``, each its own run id."""
    dirs = []
    for i in range(count):
        name = f"copy-{i:05d}"
        dst = os.path.join(root, "linear", name)
        shutil.copytree(source, dst, ignore=shutil.ignore_patterns("checkpoints", "plots"))
        with open(os.path.join(dst, "run.json")) as f:
            meta = json.load(f)
        meta["run_id"] = name
        with open(os.path.join(dst, "run.json"), "w") as f:
            json.dump(meta, f)
        dirs.append(dst)
    return dirs


def make_huge(source, root, mb):
    """One copy whose loss.csv holds about ``mb`` MB of rows."""
    dst = copy_runs(source, root, 1)[0]
    with open(os.path.join(dst, "loss.csv")) as f:
        header = f.readline()
        row = f.readline().rstrip("\n").split(",")
    with open(os.path.join(dst, "loss.csv"), "w") as f:
        f.write(header)
        step = 0
        while f.tell() < mb * 1024 * 1024:
            step += 1
            row[0] = str(step)
            f.write(",".join(row) + "\n")
    return dst


class Server:
    """``mindexp serve ROOT`` in its own process."""

    def __init__(self, root, cache_mb):
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "mindexp", "serve", root, "--port", "0", "--cache-mb", str(cache_mb)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        self.url = line.split(" at ")[1].split()[0].rstrip("/")

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=600) as r:
            return r.read()

    def rss(self):
        return rss_mb(self.proc.pid)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--cache-mb", type=int, default=256)
    p.add_argument("--huge-mb", type=int, default=129)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="mindexp-dmem-")
    try:
        source = train_one(os.path.join(work, "train"), args.steps)
        root = os.path.join(work, "served")
        dirs = copy_runs(source, root, args.runs)
        server = Server(root, args.cache_mb)
        result = {"runs": args.runs, "steps": args.steps, "cache_mb": args.cache_mb,
                  "rss_mb": {"start": round(server.rss(), 1)}}
        try:
            server.get("/api/data")
            for i, d in enumerate(dirs, 1):
                server.get(f"/api/data?run=0/linear/{os.path.basename(d)}")
                if i % max(1, args.runs // 6) == 0 or i == len(dirs):
                    result["rss_mb"][f"after {i} drawn"] = round(server.rss(), 1)
            for d in dirs:
                shutil.rmtree(d)
            server.get("/api/data")
            result["rss_mb"]["after they were removed"] = round(server.rss(), 1)
            huge = make_huge(source, root, args.huge_mb)
            server.get(f"/api/data?run=0/linear/{os.path.basename(huge)}")
            result["rss_mb"][f"after a {args.huge_mb} MB loss.csv drawn"] = round(server.rss(), 1)
            shutil.rmtree(huge)
            server.get("/api/data")
            result["rss_mb"]["after it was removed"] = round(server.rss(), 1)
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for what, mb in result["rss_mb"].items():
        print(f"{what:>32}: {mb:7.1f} MB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
