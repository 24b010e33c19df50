"""One import name: only ``mindexp`` is installed, and a user's own
``callbacks.py``, ``framework.py`` and ``experiments.py`` never shadow it."""
import os
import shutil
import site
import subprocess
import sys
import sysconfig

import pytest

from conftest import ROOT  # noqa: E402  (the repository)

USER_SCRIPT = '''
import numpy as np
from mindspore import nn

import mindexp
from mindexp import Experiment, load_run
from mindexp.callbacks import LossMonitor
from mindexp.experiments.linear import Linear

import callbacks, framework, experiments   # the user's own modules, beside this script
assert callbacks.MINE and framework.MINE and experiments.MINE


class Tiny(Linear):
    name = "tiny"


run = Tiny(epochs=2, samples=20).run(out="outputs")
print("STATUS", run.status, len(load_run(run.dir).loss), LossMonitor.__module__)
print("FILE", mindexp.__file__)
'''


def _site_packages(venv):
    return sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with mindexp installed (not editable) from this checkout.

    Its dependencies come from the test venv through a path entry, so nothing
    is downloaded; the test venv's own editable mindexp is not visible there
    (its finder is a .pth file, which only a site directory runs).
    """
    work = tmp_path_factory.mktemp("install")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".venv*", ".git", "outputs", "build", "*.egg-info", "__pycache__", ".pytest_cache"))
    target = _site_packages(venv)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", target, str(src)],
                   check=True, capture_output=True, text=True, cwd=work)
    deps = [p for p in site.getsitepackages() if "site-packages" in p]
    with open(os.path.join(target, "zz_test_deps.pth"), "w") as f:
        f.write("\n".join(deps) + "\n")
    return venv, target


@pytest.mark.slow
def test_only_mindexp_is_installed_into_site_packages(installed):
    _, target = installed
    names = sorted(n for n in os.listdir(target)
                   if n != "zz_test_deps.pth" and n != "bin" and n != "__pycache__")
    tops = [n for n in names if not n.endswith(".dist-info")]
    assert tops == ["mindexp"], names
    assert {"callbacks", "experiments"} <= set(os.listdir(os.path.join(target, "mindexp")))


@pytest.mark.slow
def test_user_modules_named_like_ours_do_not_shadow_mindexp(installed, tmp_path):
    venv, target = installed
    for name in ("callbacks", "framework", "experiments"):
        (tmp_path / f"{name}.py").write_text("MINE = True\n")
    (tmp_path / "script.py").write_text(USER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(venv / "bin" / "python"), "script.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "STATUS completed 4 mindexp.callbacks.loss_monitor" in done.stdout, done.stdout
    assert done.stdout.split("FILE ")[1].strip().startswith(target)


@pytest.mark.slow
def test_callbacks_folder_copied_alone_into_another_project(tmp_path):
    shutil.copytree(os.path.join(ROOT, "callbacks"), tmp_path / "callbacks",
                    ignore=shutil.ignore_patterns("__pycache__"))
    body = open(os.path.join(ROOT, "examples", "callbacks_only.py"), encoding="utf-8").read()
    body = body.replace("from mindexp.callbacks import", "from callbacks import")
    (tmp_path / "script.py").write_text(
        body + "\nimport sys; assert not [m for m in sys.modules if m.startswith('mindexp')]\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert abs(float(done.stdout.split("weight")[1].split()[0]) - 2) < 0.05
    assert (tmp_path / "logs" / "loss.csv").exists()


def test_entries_of_runs_made_before_the_package_name_still_load():
    from mindexp.define.entry import load_experiment
    from mindexp.experiments.linear import Linear
    assert load_experiment("experiments.linear:Linear") is Linear
    assert load_experiment("mindexp.experiments.linear:Linear") is Linear
