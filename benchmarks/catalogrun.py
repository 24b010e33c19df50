"""The run catalog at 10,000 and 100,000 runs, whole processes.

    python benchmarks/catalogrun.py N OUT [--before PYTHON] [--template RUN]  ->  one JSON line

Builds N runs under OUT/runs/linear/ by copying one real run (trained here
with ``mindexp run linear`` unless ``--template`` names one): run.json and
config.json written per copy (its own id, start time, ``lr`` and final
loss), its logs hard-linked (its folders -- source/, checkpoints/ -- left
out: no listing reads them). Then measures, each in a process of its own,
with this interpreter's mindexp (``after``) and, with ``--before``, an
interpreter that has another mindexp installed (main's, say):

- ``runs_first_s``: ``mindexp runs ROOT``, no catalog (or index) yet;
- ``runs_s``: the same again; ``first_line_s``: until its first line;
- ``where_s``: ``runs ROOT --where "lr < 0.001 and final_loss < 0.01"``;
- ``count_s``: ``runs ROOT --count``; ``count_where_s``: with that ``--where``
  (an interpreter whose mindexp has no ``--count`` gives neither);
- ``compare_s``: ``compare(ROOT)`` inside Python (import excluded), the first
  after the catalog was made; ``compare_again_s``: the next one, in a new
  process (read from compare()'s snapshot when the runs are unchanged);
  ``compare_columns_s``: ``compare(ROOT, columns=[...])`` of six columns;
- ``*_rss_mb``: each process's peak resident memory;
- ``pandas_imported``: whether ``mindexp runs`` imported pandas;
- ``pty_runs_s``, ``pty_runs_rss_mb``, ``pty_runs_lines``, ``pty_runs_cpu_s``: ``mindexp runs ROOT``
  with its output on a terminal (a pseudo-terminal of 50 x 120), as a person
  types it;
- ``serve_*``: ``mindexp serve ROOT`` in a process of its own: the first page
  of the runs table (``/api/runs?limit=100``, asked as soon as the URL is
  printed), then what the page asks next, the 50 runs it draws
  (``/api/runs?limit=50``) and their data (``serve_data_s``, ``_kb``;
  ``serve_page_and_data_s``: the three in a row, ``_kb`` the bytes of the
  table and the data, ``_cpu_s`` the server's CPU until then), the first poll
  (``/api/changes``), a quiet poll (the median of five with that cursor), the
  drawn runs' data again (``serve_data_again_s``), the
  server's resident memory then and at its peak, and its CPU seconds until
  the first page (``serve_table_cpu_s``: its start included, the figure a
  busy machine disturbs least).

``--only dashboard,pty,piped`` measures only those (the runs and their catalog
kept from an earlier call; ``piped``: ``runs_s``, ``where_s`` and the counts).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request

WHERE = "lr < 0.001 and final_loss < 0.01"
COMPARE = ("import sys, time\nfrom mindexp import compare\nimport pandas\n"
           "t, c = time.perf_counter(), time.process_time()\ntable = compare(sys.argv[1])\n"
           "print(time.perf_counter() - t, time.process_time() - c, len(table))")
# compare() again, in a process of its own: what a user's next session pays
COMPARE_AGAIN = COMPARE
COMPARE_COLUMNS = COMPARE.replace(
    "compare(sys.argv[1])", "compare(sys.argv[1], columns=['run_id', 'optimizer', 'lr', "
    "'final_loss', 'min_loss', 'steps'])")


def train_template(out, python):
    """One real run of the shipped linear experiment; returns its folder."""
    env = dict(os.environ, MINDEXP_PLOTS="0", GLOG_v="3")
    subprocess.run([python, "-m", "mindexp", "run", "linear", "--set", "epochs=2", "--out",
                    out, "--quiet"], check=True, env=env, capture_output=True, timeout=600)
    folder = os.path.join(out, "linear")
    return os.path.join(folder, sorted(os.listdir(folder))[0])


LINKS_PER_FILE = 50_000   # ext4 allows 65,000 links to one file: a fresh copy after these


def build(template, root, n):
    """N copies of ``template`` below ``root``/linear/ (a copy already there is kept)."""
    meta = json.load(open(os.path.join(template, "run.json")))
    config = json.load(open(os.path.join(template, "config.json")))
    logs = [f for f in os.listdir(template) if f.endswith(".csv")]
    source = template
    for i in range(n):
        if i % LINKS_PER_FILE == 0:
            source = os.path.join(os.path.dirname(root), f"logs-{i // LINKS_PER_FILE}")
            os.makedirs(source, exist_ok=True)
            for name in logs:
                shutil.copy(os.path.join(template, name), os.path.join(source, name))
        run_id = f"20260101-{i:06d}-linear-{i:06x}"
        run_dir = os.path.join(root, "linear", run_id)
        if os.path.exists(os.path.join(run_dir, "run.json")):
            continue
        os.makedirs(run_dir, exist_ok=True)
        lr = 10 ** (-4 + 3 * _spread(i, 7919))
        loss = 10 ** (-3 + 3 * _spread(i, 104729))
        summary = json.loads(json.dumps(meta.get("summary") or {}))
        if summary.get("loss"):
            summary["loss"].update(final=loss, min=loss)
        started = f"2026-01-{1 + i // 86400 % 28:02d}T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:" \
                  f"{i % 60:02d}+00:00"
        for name in logs:
            target = os.path.join(run_dir, name)
            if not os.path.exists(target):
                os.link(os.path.join(source, name), target)
        _write(run_dir, "config.json", config | {"lr": lr})
        _write(run_dir, "run.json", meta | {"run_id": run_id, "final_loss": loss,
                                            "started_at": started, "summary": summary})


def _spread(i, prime):
    """A number in [0, 1) that looks random and is the same every time."""
    return (i * prime % 1000003) / 1000003


def _write(folder, name, data):
    with open(os.path.join(folder, name), "w") as f:
        json.dump(data, f)


def timed_process(cmd):
    """(seconds, peak RSS in MB, seconds until the first line, stdout's lines, CPU
    seconds: user + system, the figure that a busy machine disturbs least)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, GLOG_v="3"))
    first = proc.stdout.readline()
    first_s = time.perf_counter() - start
    lines = 1 + sum(1 for _ in proc.stdout) if first else 0
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise RuntimeError(f"{cmd} exited with {status}")
    return seconds, usage.ru_maxrss / 1024, first_s, lines, usage.ru_utime + usage.ru_stime


def measure_pty(python, root, rows=50, columns=120):
    """``mindexp runs ROOT`` writing to a pseudo-terminal: (seconds, peak RSS in
    MB, lines printed)."""
    import fcntl
    import pty
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    start = time.perf_counter()
    proc = subprocess.Popen([python, "-m", "mindexp", "runs", root], stdout=slave,
                            stderr=subprocess.DEVNULL, env=dict(os.environ, GLOG_v="3"))
    os.close(slave)
    lines = 0
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:   # EIO: the child closed its end
            break
        if not chunk:
            break
        lines += chunk.count(b"\n")
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    os.close(master)
    if status != 0:
        raise RuntimeError(f"mindexp runs on a pty exited with {status}")
    return seconds, usage.ru_maxrss / 1024, lines, usage.ru_utime + usage.ru_stime


def measure_dashboard(python, root):
    """``mindexp serve ROOT``: the first page of its table, polls, the drawn
    runs' data, its memory (see the module's docstring)."""
    server = subprocess.Popen([python, "-m", "mindexp", "serve", root, "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=dict(os.environ, GLOG_v="3"))
    try:
        base = re.search(r"http://\S+/", server.stdout.readline()).group(0).rstrip("/")

        def get(path):
            start = time.perf_counter()
            with urllib.request.urlopen(base + path, timeout=3600) as r:
                body = r.read()
            return time.perf_counter() - start, body
        res = {}
        res["serve_table_s"], body = get("/api/runs?limit=100")
        res["serve_table_cpu_s"] = _cpu_seconds(server.pid)   # its start included
        res["serve_table_kb"] = len(body) / 1024
        # then what the page asks next: the runs it draws, and their data
        top_s, body = get("/api/runs?limit=50&offset=0&sort=-started&q=")
        keys = [row["key"] for row in json.loads(body)["rows"]]
        res["serve_data_s"], body = get("/api/data?runs=" + ",".join(keys))
        res["serve_page_and_data_s"] = res["serve_table_s"] + top_s + res["serve_data_s"]
        res["serve_data_kb"] = len(body) / 1024
        res["serve_page_and_data_kb"] = res["serve_table_kb"] + res["serve_data_kb"]
        res["serve_page_and_data_cpu_s"] = _cpu_seconds(server.pid)
        res["serve_first_poll_s"], body = get("/api/changes")
        cursor = json.loads(body)["cursor"]
        quiet = [get(f"/api/changes?cursor={cursor}")[0] for _ in range(5)]
        res["serve_quiet_poll_s"] = statistics.median(quiet)
        res["serve_table_again_s"], _ = get("/api/runs?limit=100&offset=500&sort=final_loss")
        res["serve_data_again_s"], _ = get("/api/data?runs=" + ",".join(keys))
        status = open(f"/proc/{server.pid}/status").read()
        res["serve_rss_mb"] = int(re.search(r"VmRSS:\s+(\d+)", status)[1]) / 1024
        res["serve_peak_rss_mb"] = int(re.search(r"VmHWM:\s+(\d+)", status)[1]) / 1024
        return res
    finally:
        server.terminate()
        server.wait(timeout=120)


def _cpu_seconds(pid):
    """User + system CPU seconds of a running process, its threads included."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_listing(runs):
    """`runs ROOT` (the catalog kept) and its --where, piped: time, memory, first
    line, CPU and rows of each."""
    res = {}
    res["runs_s"], res["runs_rss_mb"], res["first_line_s"], lines, res["runs_cpu_s"] = \
        timed_process(runs)
    res["rows"] = lines - 1
    res["where_s"], res["where_rss_mb"], _, lines, res["where_cpu_s"] = \
        timed_process(runs + ["--where", WHERE])
    res["where_rows"] = max(0, lines - 1)
    try:
        res["count_s"], res["count_rss_mb"], _, _, res["count_cpu_s"] = \
            timed_process(runs + ["--count"])
        res["count_where_s"], _, _, _, res["count_where_cpu_s"] = \
            timed_process(runs + ["--count", "--where", WHERE])
    except RuntimeError:   # an older mindexp: no --count
        pass
    return res


def measure(python, root, label, only=None):
    """Each figure for one interpreter's mindexp; catalogs and indexes removed first
    (``only``: the parts to measure, the catalog made once when missing)."""
    if only:
        res = {}
        if not os.path.isdir(os.path.join(root, ".mindexp-catalog")):
            timed_process([python, "-m", "mindexp", "runs", root, "--limit", "1"])
        if "piped" in only:   # the catalog kept: `runs ROOT` again and --where, piped
            res.update(measure_listing([python, "-m", "mindexp", "runs", root]))
        if "pty" in only:
            res["pty_runs_s"], res["pty_runs_rss_mb"], res["pty_runs_lines"], \
                res["pty_runs_cpu_s"] = measure_pty(python, root)
        if "dashboard" in only:
            res.update(measure_dashboard(python, root))
        return {f"{label}_{k}": v for k, v in res.items()}
    for hidden in (".mindexp-catalog", ".mindexp-index.json"):
        path = os.path.join(root, hidden)
        shutil.rmtree(path) if os.path.isdir(path) else os.path.exists(path) and os.remove(path)
    runs = [python, "-m", "mindexp", "runs", root]
    res = {}
    res["runs_first_s"], res["runs_first_rss_mb"], _, lines, res["runs_first_cpu_s"] = \
        timed_process(runs)
    res.update(measure_listing(runs))
    out = subprocess.run([python, "-c", COMPARE, root], capture_output=True, text=True,
                         check=True, timeout=3600)
    res["compare_s"], res["compare_cpu_s"] = map(float, out.stdout.split()[:2])
    out = subprocess.run([python, "-c", COMPARE_AGAIN, root], capture_output=True, text=True,
                         check=True, timeout=3600)
    res["compare_again_s"], res["compare_again_cpu_s"] = map(float, out.stdout.split()[:2])
    probe = subprocess.run([python, "-X", "importtime", "-m", "mindexp", "runs", root,
                            "--limit", "1"], capture_output=True, text=True, timeout=3600)
    res["pandas_imported"] = " pandas" in probe.stderr
    out = subprocess.run([python, "-c", COMPARE_COLUMNS, root], capture_output=True, text=True,
                         timeout=3600)
    if out.returncode == 0:   # an older compare() takes no columns
        res["compare_columns_s"], res["compare_columns_cpu_s"] = map(float,
                                                                     out.stdout.split()[:2])
    res["pty_runs_s"], res["pty_runs_rss_mb"], res["pty_runs_lines"], res["pty_runs_cpu_s"] = \
        measure_pty(python, root)
    res.update(measure_dashboard(python, root))
    return {f"{label}_{k}": v for k, v in res.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", type=int)
    p.add_argument("out")
    p.add_argument("--before", help="an interpreter with the mindexp to compare against")
    p.add_argument("--template", help="a run folder to copy (default: train one)")
    p.add_argument("--only", help="measure only these parts: pty, dashboard, piped "
                   "(comma-separated)")
    args = p.parse_args(argv)
    root = os.path.join(args.out, "runs")
    res = {"runs": args.n}
    done = os.path.join(args.out, "built")
    if not os.path.exists(done):   # a build cut short goes on where it stopped
        trained = os.path.join(args.out, "template")
        template = args.template or (os.path.join(trained, "linear", os.listdir(
            os.path.join(trained, "linear"))[0]) if os.path.isdir(trained)
            else train_template(trained, sys.executable))
        start = time.perf_counter()
        build(template, root, args.n)
        res["build_s"] = time.perf_counter() - start
        open(done, "w").close()
    only = set(args.only.split(",")) if args.only else None
    if args.before:
        res.update(measure(args.before, root, "before", only))
    res.update(measure(sys.executable, root, "after", only))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
