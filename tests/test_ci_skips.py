"""Tests that need an extra or root skip locally, say why, and fail under CI
(``CI`` set), where the test extra is installed and the tests run as root."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT, cli_env

GUARDED = '''
import sys
sys.path.insert(0, {tests!r})
from conftest import require, skip_unless_ci

def test_needs_a_missing_module():
    require("mindexp_no_such_module", reason="the no-such extra is not installed")

def test_needs_root():
    skip_unless_ci("cannot mount a tmpfs here")
'''


@pytest.mark.parametrize("ci, outcome", [("", "2 skipped"), ("true", "2 failed")])
@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_a_guarded_test_skips_with_its_reason_locally_and_fails_under_ci(tmp_path, ci, outcome):
    (tmp_path / "test_guarded.py").write_text(GUARDED.format(tests=os.path.join(ROOT, "tests")))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, env=cli_env(CI=ci), capture_output=True,
                          text=True, timeout=300)
    assert outcome in done.stdout, done.stdout + done.stderr
    if ci:
        assert "No module named 'mindexp_no_such_module'" in done.stdout
        assert "cannot mount a tmpfs here (CI must run this test)" in done.stdout
    else:  # -ra lists each skip with its reason
        assert "SKIPPED" in done.stdout and "the no-such extra is not installed" in done.stdout
        assert "cannot mount a tmpfs here" in done.stdout


def test_the_makefile_prints_the_skip_list():
    with open(f"{ROOT}/Makefile", encoding="utf-8") as f:
        pytest_line = next(line for line in f if line.startswith("PYTEST :="))
    assert " -ra " in pytest_line
