"""An output root shared by machines: temporary files name their writer's host."""
import os
import platform
import subprocess
import sys

from mindexp.callbacks import schema
from mindexp.rundir.leftovers import remove_dead_temp_files


def _dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_only_this_hosts_temporary_files_of_dead_writers_are_removed(tmp_path):
    dead = _dead_pid()
    mine = schema.temp_name(tmp_path / "run.json")
    assert platform.node() in os.path.basename(mine)  # the host is in the name
    mine_dead = str(tmp_path / f"run.json.tmp-{dead}@{platform.node()}")
    prefixed_dead = str(tmp_path / f".tmp-{dead}@{platform.node()}@epoch0001-step0000002.ckpt")
    # Another machine's writer, at work on the shared root: its pid means nothing here.
    other_host = str(tmp_path / f".tmp-{dead}@another-host.example@epoch0001-step0000002.ckpt")
    other_suffix = str(tmp_path / f"loss.csv.tmp-{dead}@another-host")
    for path in (mine, mine_dead, prefixed_dead, other_host, other_suffix):
        with open(path, "w") as f:
            f.write("half")
    removed = remove_dead_temp_files(str(tmp_path))
    assert sorted(removed) == sorted([mine_dead, prefixed_dead])  # this live process's stays
    assert all(os.path.exists(p) for p in (mine, other_host, other_suffix))
