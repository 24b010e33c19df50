"""Property: whatever a shared output folder holds beside good runs, every
reader of a run folder and every command that lists, shows or deletes
answers.

Random file kinds (garbage, directory, symlink into and out of the root,
dangling symlink, FIFO, empty, truncated, huge, JSON nested 100,000 deep,
wrong types, invalid UTF-8) at random places of a run folder, its
experiment folder and the root, beside two good runs. The invariant, for
``runs``, ``show``, ``compare``, ``gc --dry-run``, ``rm --dry-run`` and the
dashboard's ``/api/data``: an answer within ``DEADLINE_S``, the good runs
listed, no traceback and every message one line (naming the bad file when
the command fails), and nothing outside the root written.

``make test`` runs it derandomised (hypothesis' ``derandomize``: the same
examples every time); ``make test-hostile`` runs many more with a random
seed, which it prints (``--hypothesis-seed=N`` repeats a run).
"""
import contextlib
import io
import json
import os
import shutil
import stat
import tempfile
import threading

import pytest

from conftest import require
from rundirs import make_run

hypothesis = require("hypothesis")
from hypothesis import HealthCheck, example, given, settings, strategies as st  # noqa: E402

DEADLINE_S = 10
MAX_LINE = 500   # a message is one line naming a file, not a dump of it
HOSTILE = os.environ.get("MINDEXP_HOSTILE", "") not in ("", "0")

settings.register_profile("mindexp-ci", derandomize=True, max_examples=40, deadline=None,
                          database=None, print_blob=True,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("mindexp-hostile", max_examples=int(os.environ.get(
    "MINDEXP_HOSTILE_EXAMPLES", "150")), deadline=None, database=None, print_blob=True,
    suppress_health_check=list(HealthCheck))
PROFILE = "mindexp-hostile" if HOSTILE else "mindexp-ci"

# Where something may be planted: below the bad run, beside the runs, in the root.
RUN_PLACES = ("run.json", "config.json", "loss.csv", "params.csv", "eval.csv", "grad_norm.csv",
              "system.csv", "checkpoints.csv", "logs.json", "error.txt", ".lock", ".run.lock",
              "checkpoints", "plots", "figures", "checkpoints/epoch0001-step0000002.ckpt",
              "figures/f/epoch-1.png")
OUTER_PLACES = ("../stray", "../.hidden", "../../.mindexp-index.json", "../../stray.csv")
KINDS = ("garbage", "directory", "link-in", "link-out", "link-dangling", "fifo", "empty",
         "truncated", "huge", "nested", "wrong-types", "bad-utf8")
HUGE_BYTES = 8 * 1024 * 1024  # sparse: no disk; a reader must not choke on it


def _plant(path, kind, root, outside):
    """Put a ``kind`` at ``path`` (whatever was there removed)."""
    original = b""
    if os.path.isfile(path) and not os.path.islink(path):
        with open(path, "rb") as f:
            original = f.read()
    if os.path.islink(path) or os.path.isfile(path) or stat.S_ISFIFO(_mode(path)):
        os.remove(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if kind == "directory":
        os.makedirs(os.path.join(path, "inner"))
    elif kind == "link-in":
        os.symlink(os.path.join(root, "toy", "good1", "run.json"), path)
    elif kind == "link-out":
        os.symlink(os.path.join(outside, "outside.csv"), path)
    elif kind == "link-dangling":
        os.symlink(os.path.join(outside, "never-made"), path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.write(original[:200])
            f.truncate(HUGE_BYTES)
    else:
        with open(path, "wb") as f:
            f.write(_content(kind, original))


def _content(kind, original):
    if kind == "garbage":
        return b"\x00\x01garbage,,,\n\"unterminated\n" * 3
    if kind == "empty":
        return b""
    if kind == "truncated":
        return original[:max(1, len(original) // 2)]
    if kind == "nested":
        return b"[" * 100_000 + b"]" * 100_000
    if kind == "wrong-types":
        return json.dumps({"status": 5, "steps": "many", "tags": {"a": 1}, "note": ["x"],
                           "final_loss": "low", "epochs": None, "lr": [1],
                           "run_id": 7}).encode() if original.lstrip().startswith(b"{") \
            else b"step,epoch,loss\nx,y,z\n1,2\n"
    return b"\xff\xfe\xc3(" + original[4:]  # bad-utf8


def _mode(path):
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _snapshot(folder):
    """Every entry below ``folder`` with its kind and bytes (never following a link)."""
    seen = {}
    for base, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(base, name)
            mode = os.lstat(path).st_mode
            data = None
            if stat.S_ISREG(mode):
                with open(path, "rb") as f:
                    data = f.read()
            seen[os.path.relpath(path, folder)] = (stat.S_IFMT(mode), data)
    return seen


def _answer(call):
    """``call()`` on a thread with stdout and stderr captured: ``(result, out, err)``;
    fails when it does not answer within DEADLINE_S."""
    out, err, result = io.StringIO(), io.StringIO(), {}

    def run():
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: BLE001  reported below
            result["error"] = exc
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(DEADLINE_S)
    assert not thread.is_alive(), "no answer within the deadline"
    assert "error" not in result, f"raised {result['error']!r}\n{err.getvalue()}"
    return result["value"], out.getvalue(), err.getvalue()


def _release_fifos(folder):
    """Open each FIFO for writing: a reader still blocked on one (a failing
    example) ends instead of keeping its thread."""
    for base, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(base, name)
            if stat.S_ISFIFO(_mode(path)):
                with contextlib.suppress(OSError):
                    os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))


def _check_cli(argv, bad_paths, good=("good1", "good2"), lists_good=False):
    from mindexp.cli.main import main
    code, out, err = _answer(lambda: main(argv))
    what = f"mindexp {' '.join(argv)}"
    assert code in (0, 1, 2), (what, code, err)
    assert "Traceback" not in out + err, (what, err)
    long = [line for line in err.splitlines() if len(line) > MAX_LINE]
    assert not long, (what, long[0][:200])
    if lists_good:
        assert all(name in out for name in good), (what, out, err)
    if code != 0:  # a refusal names what it refuses: the bad run or the planted file
        assert any(p in err for p in bad_paths), (what, err)
    return out, err


def _check_dashboard(root, good=("good1", "good2")):
    import http.client
    from mindexp.analysis.dashboard import make_server
    server = make_server([root], port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        for path in ("/api/data", "/api/data?run=0/toy/bad", "/api/runs"):
            conn = http.client.HTTPConnection(*server.server_address[:2], timeout=DEADLINE_S)
            conn.request("GET", path)
            answer = conn.getresponse()
            body = answer.read()
            conn.close()
            assert answer.status in (200, 403, 404), (path, answer.status, body[:300])
            assert b"4242.5" not in body, path  # the outside file's value is never served
            if path != "/api/data?run=0/toy/bad":
                assert answer.status == 200 and all(g.encode() in body for g in good), path
    finally:
        server.shutdown()
        server.server_close()


plants = st.lists(st.tuples(st.sampled_from(RUN_PLACES + OUTER_PLACES), st.sampled_from(KINDS)),
                  min_size=1, max_size=3, unique_by=lambda p: p[0])


@pytest.mark.timeout(1200 if HOSTILE else 300)
@settings(settings.get_profile(PROFILE))
@given(planted=plants)
# found by this suite (seed 12345), kept as fixed examples: `show` raised on a dangling
# link (its size), the dashboard answered 500 beside a bad grad_norm.csv (read late)
@example(planted=[("params.csv", "link-dangling")])
@example(planted=[("grad_norm.csv", "fifo")])
@example(planted=[("grad_norm.csv", "truncated")])
@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_every_reader_answers_beside_hostile_files_and_writes_nothing_outside(planted):
    base = tempfile.mkdtemp(prefix="mindexp-hostile-")
    try:
        _check_example(base, planted)
    finally:
        _release_fifos(base)
        shutil.rmtree(base, ignore_errors=True)


def _check_example(base, planted):
    root, outside = os.path.join(base, "out"), os.path.join(base, "outside")
    os.makedirs(outside)
    with open(os.path.join(outside, "outside.csv"), "w") as f:
        f.write("step,epoch,loss,lr,time_s\n1,1,4242.5,0.1,0.0\n")
    make_run(root, "good1")
    make_run(root, "good2", losses=(2.0, 1.0))
    bad = make_run(root, "bad")
    # placed deepest first: a file below a folder that becomes something else is gone anyway
    targets = []
    for place, kind in sorted(planted, key=lambda p: -p[0].count("/")):
        target = os.path.normpath(os.path.join(bad, place))
        _plant(target, kind, root, outside)
        targets.append(target)
    before = _snapshot(outside)
    named = [bad, *targets]
    _check_cli(["runs", root], named, lists_good=True)
    _check_cli(["runs", "--wide", root], named, lists_good=True)
    _check_cli(["compare", root], named, lists_good=True)
    _check_cli(["gc", "--dry-run", "--status", "completed", root], named, lists_good=True)
    if os.path.isdir(bad):
        _check_cli(["show", bad], named)
        _check_cli(["rm", "--dry-run", bad], named)
    _check_dashboard(root)
    assert _snapshot(outside) == before, "something outside the root was written"
