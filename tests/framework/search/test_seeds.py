"""mindexp sweep --seeds: every grid point trained with the same seeds, each
recorded as the run's config field ``seed``."""
import json
import os

import pytest

from searches import forked_workers  # noqa: F401  (autouse: workers forked, see searches.py)
from mindexp.errors import ConfigError
from mindexp.search.sweeps import grid_points, parse_seeds, with_seeds

TINY = ("--set", "epochs=1", "--set", "samples=20", "--set", "batch_size=10")


def test_a_count_means_seeds_from_zero_and_a_list_means_those_seeds():
    assert parse_seeds("5") == [0, 1, 2, 3, 4]
    assert parse_seeds("3, 7,11") == [3, 7, 11]


@pytest.mark.parametrize("text", ["0", "-1", "a", "3,3", "1.5", "2,", str(2 ** 32) + ",1"])
def test_a_bad_seeds_value_is_refused_naming_what_is_accepted(text):
    with pytest.raises(ConfigError, match=r"--seeds expects a count N .*Received: --seeds"):
        parse_seeds(text)


def test_seeds_are_the_last_axis_so_every_point_gets_the_same_seeds():
    points = grid_points(with_seeds({"optimizer": ["sgd", "adam"]}, [3, 7]))
    assert points == [{"optimizer": "sgd", "seed": 3}, {"optimizer": "sgd", "seed": 7},
                      {"optimizer": "adam", "seed": 3}, {"optimizer": "adam", "seed": 7}]
    assert with_seeds({"lr": [1]}, None) == {"lr": [1]}


@pytest.mark.parametrize("given", [("--grid", "seed=1,2"), ("--set", "seed=4")])
def test_seeds_with_a_seed_given_otherwise_is_refused_in_one_line(main_cli, tmp_path, given):
    done = main_cli("sweep", "linear", "--grid", "optimizer=sgd,adam", *given, "--seeds", "3",
                    "--out", "out")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--seeds" in lines[0] and "Received:" in lines[0], done.stderr
    assert not (tmp_path / "out").exists()   # nothing started


def test_a_sweep_needs_a_grid_or_seeds(main_cli):
    done = main_cli("sweep", "linear", "--out", "out")
    assert done.returncode == 2 and "--grid" in done.stderr and "--seeds" in done.stderr


@pytest.mark.slow
def test_every_point_runs_with_each_seed_recorded_in_its_config(cli, tmp_path):
    done = cli("sweep", "linear", "--grid", "optimizer=sgd,adam", "--seeds", "3,7", *TINY,
               "--workers", "2", "--out", "out")
    assert done.returncode == 0, done.stdout + done.stderr
    root = tmp_path / "out" / "linear"
    configs = []
    for run_id in os.listdir(root):
        with open(root / run_id / "config.json") as f:
            configs.append(json.load(f))
    assert sorted((c["optimizer"], c["seed"]) for c in configs) == \
        [("adam", 3), ("adam", 7), ("sgd", 3), ("sgd", 7)]
