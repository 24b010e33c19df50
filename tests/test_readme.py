"""Every Python snippet of README.md runs, in README order, as a new user would.

Conventions (keep README.md writable by hand):
- All ```python blocks run cumulatively in ONE interpreter session (a fresh
  process), in README order, in a fresh empty directory: a later snippet may
  use names an earlier one defined (``Linear``), like a user pasting them
  into one notebook.
- ``outputs/<experiment>/<run_id>`` and ``outputs/<experiment>/<other_run_id>``
  stand for real runs: the test replaces them with the newest and the second
  newest run directory under ``outputs/<experiment>/`` at the moment the
  snippet runs.
- The ```console commands the snippets rely on (``CONSOLE``) run at their
  place in the README: the sweep (so that, with the run of "Run it", two
  runs share an optimizer) and the early-stopped spirals run that "Use the
  model" loads (a command may continue on the next line after a backslash).
"""
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, cli_env

SWEEP = "mindexp sweep linear --grid optimizer=sgd,momentum,adam"
SPIRALS = ("mindexp run spirals --set epochs=100 --set early_stop=eval_accuracy --set patience=3 "
           "--set checkpoint_monitor=eval_accuracy --set keep_best=2")
CONSOLE = (SWEEP, SPIRALS)

DRIVER = r'''
import json, os, re, subprocess, sys
steps = json.load(open(sys.argv[1]))
namespace = sys.modules["__main__"].__dict__  # as in a user's own script or REPL
for i, (kind, text) in enumerate(steps):
    if kind == "console":
        subprocess.run([sys.executable, "-m", "mindexp"] + text.split()[1:], check=True,
                       stdout=subprocess.DEVNULL)
        continue
    for name in set(re.findall(r"outputs/(\w+)/<(?:other_)?run_id>", text)):
        where = os.path.join("outputs", name)
        if not os.path.isdir(where):  # (before its first run, only comments name it)
            continue
        runs = sorted((r for r in os.listdir(where) if os.path.isfile(
                          os.path.join(where, r, "run.json"))),
                      key=lambda r: os.path.getmtime(os.path.join(where, r)))
        text = text.replace(f"outputs/{name}/<run_id>", f"outputs/{name}/{runs[-1]}")
        if len(runs) > 1:
            text = text.replace(f"outputs/{name}/<other_run_id>", f"outputs/{name}/{runs[-2]}")
    print(f"--- snippet {i + 1}", flush=True)
    exec(compile(text, f"README.md snippet {i + 1}", "exec"), namespace)
print("--- all snippets ran", flush=True)
'''


def readme_steps():
    """``[("python", code) | ("console", command)]`` in README order."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    steps = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
        if lang == "python":
            steps.append(("python", body))
        elif lang == "console":
            flat = " ".join(body.replace("\\\n", " ").split())
            steps.extend(("console", command) for command in CONSOLE if command in flat)
    return steps


def test_the_readme_has_the_snippets_this_test_expects():
    steps = readme_steps()
    assert [k for k, _ in steps].count("python") >= 5
    assert [step for step in steps if step[0] == "console"] == [("console", SWEEP),
                                                                 ("console", SPIRALS)]


@pytest.mark.slow
def test_every_python_snippet_of_the_readme_runs_in_order(tmp_path):
    steps_file = tmp_path / "steps.json"
    steps_file.write_text(json.dumps(readme_steps()))
    (tmp_path / "driver.py").write_text(DRIVER)
    work = tmp_path / "fresh"
    work.mkdir()
    done = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(steps_file)],
                          cwd=work, env=cli_env(MPLBACKEND="Agg"), capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "--- all snippets ran" in done.stdout


def test_the_documented_optimizer_params_override_trains(tmp_path):
    """README: ``optimizer(params)``; the runner used to call it with two arguments."""
    from mindspore import nn
    from mindexp.experiments.linear import Linear

    class OwnAdam(Linear):
        def optimizer(self, params):
            return nn.Adam(params, learning_rate=self.config.lr)

    class WithSchedule(Linear):
        seen = []

        def optimizer(self, params, learning_rate):
            type(self).seen.append(learning_rate)
            return nn.SGD(params, learning_rate=learning_rate)

    run = OwnAdam(epochs=2, lr=0.05).run(out=str(tmp_path))
    assert run.status == "completed" and run.loss["lr"].tolist() == pytest.approx([0.05] * 20)
    run = WithSchedule(epochs=2, lr=0.1, warmup_steps=4).run(out=str(tmp_path))
    assert run.status == "completed"
    assert WithSchedule.seen[-1][:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])
