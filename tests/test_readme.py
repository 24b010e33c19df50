"""README.md is the front door: short, the two quick-start commands, links that lead somewhere.

Its code blocks run with the docs pages' (tests/test_docs.py, README first).
"""
import os
import re

import pytest

from conftest import ROOT


def _readme():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def test_the_readme_is_a_short_front_door():
    text = _readme()
    assert len(text.splitlines()) < 300
    quick = text.split("## Quick start", 1)[1]
    first_block = re.search(r"^```\n(.*?)^```", quick, flags=re.S | re.M).group(1)
    assert first_block.split("\n")[:-1] == ["make run", "make test"]
    assert "make docs" in text and "CHANGELOG.md" in text


def test_every_link_of_the_readme_leads_to_a_file():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", _readme())
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert len(local) >= 15  # the manual's pages, CHANGELOG, LICENSE
    missing = [t for t in local if not os.path.isfile(os.path.join(ROOT, t))]
    assert missing == []


@pytest.mark.slow  # spawns mindexp or trains: seconds
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
