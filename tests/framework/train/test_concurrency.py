"""Eight runs of one experiment started together into one output root."""
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

import forkserver
from conftest import cli_env


@pytest.mark.slow
def test_eight_simultaneous_runs_make_eight_complete_run_dirs(tmp_path):
    cmd = [sys.executable, "-m", "mindexp", "run", "linear", "--set", "epochs=3", "--quiet",
           "--out", str(tmp_path)]
    procs = [forkserver.popen(cmd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(8)]
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err[-500:] for _, err in results]
    run_dirs = sorted(os.listdir(tmp_path / "linear"))
    assert len(run_dirs) == 8
    for run_id in run_dirs:
        d = tmp_path / "linear" / run_id
        meta = json.load(open(d / "run.json"))
        assert meta["status"] == "completed" and meta["run_id"] == run_id
        loss = pd.read_csv(d / "loss.csv")
        assert loss["step"].tolist() == list(range(1, 31))
        params = pd.read_csv(d / "params.csv")
        assert len(params) == 60 and params["value"].notna().all()
        assert len(pd.read_csv(d / "grad_norm.csv")) == 30
