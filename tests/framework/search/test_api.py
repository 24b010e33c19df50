"""mindexp.tune and mindexp.sweep as a script calls them: every import path
names the same functions, and a bad argument stops the call before anything
is made, in one ConfigError naming what was received."""
import pytest

import mindexp
from searches import forked_workers  # noqa: F401  (autouse: workers forked, see searches.py)
from mindexp.errors import ConfigError
from mindexp.experiments.linear import Linear

TINY = {"epochs": 1, "samples": 20, "batch_size": 10}


def _from_main():
    """Linear as if defined in the script being run (worker processes cannot import it)."""
    return type("Scripted", (Linear,), {"__module__": "__main__"})


def test_every_import_path_names_the_same_search_functions():
    from mindexp.search import api, study_frame, sweep, tune
    from mindexp.search.results import study_frame as framed
    assert mindexp.tune is tune is api.tune
    assert mindexp.sweep is sweep is api.sweep
    assert mindexp.study_frame is study_frame is framed


@pytest.mark.parametrize("workers", [0, True, "2"])
def test_tune_refuses_a_bad_workers_before_anything_is_made(tmp_path, workers):
    with pytest.raises(ConfigError, match=r"^workers must be an integer >= 1\. "
                                          rf"Received: workers={workers!r}$"):
        mindexp.tune("linear", {"lr": "loguniform:1e-3:1"}, workers=workers, out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_tune_with_workers_refuses_a_class_they_cannot_import(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot import Scripted from __main__; move it into "
                                          r"a module\. Received: workers=2$"):
        mindexp.tune(_from_main(), {"lr": "loguniform:1e-3:1"}, workers=2, out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_sweep_refuses_a_class_its_workers_cannot_import(tmp_path):
    with pytest.raises(ConfigError, match=r"^a sweep trains in worker processes, which cannot "
                                          r"import Scripted from __main__.* "
                                          r"Received: experiment=Scripted$"):
        mindexp.sweep(_from_main(), {"lr": [0.1]}, out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("seeds, received", [(0, "0"), ([3, 3], "3,3"), ((1, -2), "1,-2"),
                                             ("5", "'5'"), (True, "True")])
def test_sweep_checks_seeds_as_the_command_does(tmp_path, seeds, received):
    with pytest.raises(ConfigError, match=rf"^--seeds expects .*Received: --seeds {received}$"):
        mindexp.sweep("linear", {"lr": [0.1]}, seeds=seeds, out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # trains two runs in worker processes
def test_sweep_trains_each_point_with_each_seed(tmp_path):
    runs = mindexp.sweep("linear", {}, seeds=range(3, 5), config=TINY, out=tmp_path / "o")
    table = runs.compare()
    assert sorted(table["seed"]) == [3, 4] and set(table["status"]) == {"completed"}
