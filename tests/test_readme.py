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
- Every shell line of the README that starts with ``mindexp`` (or ``$ mindexp``,
  ``python -c``, ``msrun``, ``hostA$ mindexp``) runs too, at its place, in the
  same folder, with the same run-id placeholders, and must exit 0, except the
  ones in ``EXIT_2`` (the README shows their one-line error) and the ones in
  ``SKIP``, each with the reason it cannot run here. ``FILES`` are the files a
  user would have made first (``my.toml``, ``points.npy``).
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

# Shell lines (by their start) that cannot run in a test, and why.
SKIP = {
    "mindexp run path/to/file.py:MyExperiment": "a placeholder for the reader's own file "
                                                "(tests/framework/cli/test_cli.py runs a user's file)",
    "mindexp serve": "serves until stopped (tests/framework/analysis/test_dashboard.py starts and stops it)",
    "mindexp tune EXPERIMENT": "a synopsis with placeholders",
    "mindexp tune --show --study NAME": "a synopsis with placeholders",
    "hostA$": "needs two machines sharing a file system, or a PostgreSQL server",
    "hostB$": "needs two machines sharing a file system",
    "msrun": "needs two machines (tests/framework/train/test_distributed.py runs two launchers on loopback)",
    "mindexp show 49b912": "a run id from the sample output above it",
    "mindexp rm outputs/linear/20261130-125415-df8017": "a run of the sample output above it",
    "mindexp resume outputs/linear/<run_id> #": "needs an interrupted run "
                                               "(tests/framework/train/test_resume.py interrupts and resumes)",
    "mindexp rerun outputs/tripler/": "tripler is the Provenance section's example file, "
                                      "not in the README (tests/framework/provenance/test_provenance.py)",
    "mindexp diff RUN_A RUN_B": "placeholders (tests/framework/provenance/test_provenance.py diffs real runs)",
}
# Lines whose one-line error the README shows: they must exit 2.
EXIT_2 = ("mindexp predict outputs/spirals/<run_id> --input bad.npy",
          "mindexp evaluate outputs/spirals/<run_id> --checkpoint 5")
FILES = {"my.toml": 'optimizer = "momentum"\nepochs = 5\n',
         "points.npy": [[0.1, 0.2], [-0.5, 0.3], [0.9, -0.9]],
         "bad.npy": [[0.0, 0.0, 0.0]] * 3}
COMMAND_STARTS = ("mindexp ", "python -c ", "msrun ", "hostA$ ", "hostB$ ")

DRIVER = r'''
import json, os, re, shlex, subprocess, sys
import numpy as np
steps, files = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for name, content in files.items():
    if name.endswith(".npy"):
        np.save(name, np.array(content, np.float32))
    else:
        open(name, "w").write(content)
namespace = sys.modules["__main__"].__dict__  # as in a user's own script or REPL


def with_runs(text):
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
    return text


for i, (kind, text, code) in enumerate(steps):
    if kind == "console":
        args = shlex.split(with_runs(text), comments=True)
        args = [sys.executable] + (["-m", "mindexp"] + args[1:] if args[0] == "mindexp"
                                   else args[1:])
        print(f"--- shell: {text}", flush=True)
        done = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
        if done.returncode != code:
            sys.exit(f"README shell line {text!r} exited {done.returncode}, not {code}: "
                     f"{done.stderr[-3000:]}")
        continue
    text = with_runs(text)
    print(f"--- snippet {i + 1}", flush=True)
    exec(compile(text, f"README.md snippet {i + 1}", "exec"), namespace)
print("--- all snippets ran", flush=True)
'''


def shell_lines(body):
    # (the console blocks' other lines are outputs; a command may continue after a backslash)
    for line in body.replace("\\\n", " ").splitlines():
        line = " ".join(line.split())
        line = line[2:] if line.startswith("$ ") else line
        if line.startswith(COMMAND_STARTS):
            yield line


def skipped(line):
    return next((reason for start, reason in SKIP.items() if line.startswith(start)), None)


def readme_steps():
    """``[("python", code, 0) | ("console", command, exit status)]`` in README order."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    steps = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
        if lang == "python":
            steps.append(("python", body, 0))
        elif lang in ("", "console", "bash", "sh", "shell"):
            steps.extend(("console", line, 2 if line in EXIT_2 else 0)
                         for line in shell_lines(body) if not skipped(line))
    return steps


def test_the_readme_has_the_snippets_this_test_expects():
    steps = readme_steps()
    assert [k for k, _, _ in steps].count("python") >= 5
    commands = [text for kind, text, _ in steps if kind == "console"]
    assert SWEEP in commands and any(c.startswith(SPIRALS) for c in commands)
    assert "mindexp run image_folder --set data_dir=shapes" in commands
    assert set(EXIT_2) <= set(commands)
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        lines = [ln for _, body in re.findall(r"^```(\w*)\n(.*?)^```", f.read(),
                                              flags=re.S | re.M) for ln in shell_lines(body)]
    for start in SKIP:  # every skip names a line the README still has
        assert any(ln.startswith(start) for ln in lines), start


@pytest.mark.slow
@pytest.mark.timeout(2400)  # every shell line too: trainings, a 12-trial study, msrun
def test_every_python_snippet_of_the_readme_runs_in_order(tmp_path):
    steps_file, files_file = tmp_path / "steps.json", tmp_path / "files.json"
    steps_file.write_text(json.dumps(readme_steps()))
    files_file.write_text(json.dumps(FILES))
    (tmp_path / "driver.py").write_text(DRIVER)
    work = tmp_path / "fresh"
    work.mkdir()
    done = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(steps_file),
                           str(files_file)], cwd=work, env=cli_env(MPLBACKEND="Agg"),
                          capture_output=True, text=True, timeout=2400)
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
