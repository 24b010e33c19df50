"""Groups of runs: compare(group_by=...) statistics against scipy computed
here, the paired/Welch choice by seed, Holm's correction, grouped history."""
import math

import numpy as np
import pytest
from scipy import stats

from mindexp import compare, history
from mindexp.analysis.groups import holm
from mindexp.errors import ConfigError
from rundirs import make_run

SEEDS = {"sgd": [0, 1, 2, 3, 4], "momentum": [0, 1, 2, 3, 4], "adam": [0, 1, 2, 3]}  # adam: 4 lost
CENTRE = {"sgd": 0.30, "momentum": 0.20, "adam": 0.10}


def _values():
    """``{(optimizer, seed): (final_loss, min_loss, eval_accuracy)}``: known spread."""
    rng = np.random.default_rng(60)
    values = {}
    for optimizer, seeds in SEEDS.items():
        for seed in seeds:
            final = CENTRE[optimizer] + 0.05 * rng.standard_normal() + 0.02 * seed
            values[optimizer, seed] = (final, final - 0.01 * rng.random(), rng.random())
    return values


@pytest.fixture(scope="module")
def grouped_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("groups")
    values = _values()
    order = np.random.default_rng(1).permutation(len(values))   # folders in shuffled order
    for k, ((optimizer, seed), (final, low, accuracy)) in zip(order, values.items()):
        make_run(root, run_id=f"r{k:02d}", config={"optimizer": optimizer, "seed": seed},
                 losses=(1.0, low, final),
                 eval_rows=[{"epoch": 2, "step": 3, "accuracy": accuracy}])
    return str(root / "toy"), values


def _by_seed(values, optimizer, column):
    return np.array([values[optimizer, s][column] for s in SEEDS[optimizer]])


def test_each_group_has_its_n_mean_std_and_t_interval(grouped_root):
    root, values = grouped_root
    table = compare(root, group_by="optimizer").set_index("optimizer")
    assert sorted(table.index) == ["adam", "momentum", "sgd"]
    for optimizer, seeds in SEEDS.items():
        row = table.loc[optimizer]
        assert row["n"] == len(seeds)
        for column, name in enumerate(("final_loss", "min_loss", "eval_accuracy")):
            x = _by_seed(values, optimizer, column)
            low, high = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
            assert row[f"{name}_mean"] == pytest.approx(x.mean())
            assert row[f"{name}_std"] == pytest.approx(x.std(ddof=1))
            assert (row[f"{name}_ci_low"], row[f"{name}_ci_high"]) == \
                (pytest.approx(low), pytest.approx(high))
    assert "seed_mean" not in table.columns and "lr_mean" not in table.columns  # config fields
    assert table.loc["sgd", "steps_mean"] == 3


def test_auto_groups_by_the_fields_that_differ_except_seed(grouped_root):
    root, _ = grouped_root
    auto = compare(root, group_by="auto")
    assert list(auto.columns[:2]) == ["optimizer", "n"]
    assert len(compare(root)) == 14   # without group_by: one row per run, as before


def test_same_seeds_are_paired_by_seed_and_a_missing_seed_gives_welch(grouped_root):
    root, values = grouped_root
    table = compare(root, group_by=["optimizer"], against="sgd").set_index("optimizer")
    sgd = _by_seed(values, "sgd", 0)
    assert table.loc["sgd", "test"] == "baseline" and math.isnan(table.loc["sgd", "final_loss_p"])
    momentum = _by_seed(values, "momentum", 0)
    paired = stats.ttest_rel(momentum, sgd)
    row = table.loc["momentum"]
    assert row["test"] == "paired"
    assert row["final_loss_p"] == pytest.approx(paired.pvalue)
    assert row["final_loss_diff"] == pytest.approx(momentum.mean() - sgd.mean())
    low, high = paired.confidence_interval(0.95)
    assert (row["final_loss_diff_ci_low"], row["final_loss_diff_ci_high"]) == \
        (pytest.approx(low), pytest.approx(high))
    adam = _by_seed(values, "adam", 0)
    welch = stats.ttest_ind(adam, sgd, equal_var=False)
    row = table.loc["adam"]
    assert row["test"] == "welch"
    assert row["final_loss_p"] == pytest.approx(welch.pvalue)
    low, high = welch.confidence_interval(0.95)
    assert (row["final_loss_diff_ci_low"], row["final_loss_diff_ci_high"]) == \
        (pytest.approx(low), pytest.approx(high))
    ranked = sorted([paired.pvalue, welch.pvalue])
    holm_expected = {p: min(1, max(2 * ranked[0], 1 * ranked[1]) if p == ranked[1]
                            else 2 * ranked[0]) for p in ranked}
    assert table.loc["momentum", "final_loss_p_holm"] == \
        pytest.approx(holm_expected[paired.pvalue])
    assert table.loc["adam", "final_loss_p_holm"] == pytest.approx(holm_expected[welch.pvalue])


def test_pairing_follows_the_seed_not_the_order_of_the_runs(grouped_root):
    root, values = grouped_root
    table = compare(root, group_by="optimizer", against="sgd").set_index("optimizer")
    momentum, sgd = _by_seed(values, "momentum", 1), _by_seed(values, "sgd", 1)
    by_order = stats.ttest_rel(np.sort(momentum), np.sort(sgd)).pvalue   # matched by rank
    assert table.loc["momentum", "min_loss_p"] == pytest.approx(
        stats.ttest_rel(momentum, sgd).pvalue)
    assert table.loc["momentum", "min_loss_p"] != pytest.approx(by_order)


def test_holm_against_a_worked_table():
    # p: 0.01, 0.04, 0.03, 0.005 -> ranked 0.005 (x4 = 0.02), 0.01 (x3 = 0.03),
    # 0.03 (x2 = 0.06), 0.04 (x1 = 0.04, raised to the 0.06 before it)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.4]) == pytest.approx([0.8, 0.8])
    assert holm([0.9, 0.6]) == pytest.approx([1.0, 1.0])   # capped at 1
    out = holm([0.02, math.nan, 0.04])   # a group without a test does not count
    assert out[0] == pytest.approx(0.04) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)


def test_a_group_of_one_run_has_no_interval_and_no_test(tmp_path):
    for k, (optimizer, loss) in enumerate([("sgd", 0.3), ("sgd", 0.4), ("adam", 0.2)]):
        make_run(tmp_path, run_id=f"r{k}", config={"optimizer": optimizer, "seed": k},
                 losses=(1.0, loss))
    table = compare(str(tmp_path), group_by="optimizer", against="sgd").set_index("optimizer")
    assert table.loc["adam", "n"] == 1 and table.loc["adam", "final_loss_mean"] == 0.2
    assert math.isnan(table.loc["adam", "final_loss_ci_low"])
    assert math.isnan(table.loc["adam", "final_loss_p"]) and table.loc["adam", "test"] == ""
    assert table.loc["adam", "final_loss_diff"] == pytest.approx(0.2 - 0.35)


def test_against_matches_a_number_and_names_the_groups_when_it_matches_none(tmp_path):
    for k, (lr, loss) in enumerate([(0.1, 0.3), (0.1, 0.4), (0.01, 0.2), (0.01, 0.25)]):
        make_run(tmp_path, run_id=f"r{k}", config={"lr": lr, "seed": k % 2}, losses=(1.0, loss))
    table = compare(str(tmp_path), group_by="lr", against=0.1).set_index("lr")
    assert table.loc[0.01, "test"] == "paired"
    with pytest.raises(ConfigError, match=r"no group has lr = 0.5; the groups: 0.01; 0.1\. "
                                          r"Received: against=0.5"):
        compare(str(tmp_path), group_by="lr", against=0.5)


def test_an_unknown_group_field_is_refused_naming_the_accepted_ones(grouped_root):
    root, _ = grouped_root
    with pytest.raises(ConfigError, match=r"cannot group by 'optimiser'.*accepted: 'auto' or "
                                          r"config fields of the runs: seed, epochs, optimizer"):
        compare(root, group_by="optimiser")
    with pytest.raises(ConfigError, match="cannot group by 'final_loss'"):
        history(root, "loss", group_by="final_loss")


def test_grouped_history_counts_the_runs_that_reached_each_step(tmp_path):
    curves = {("sgd", 0): (1.0, 0.5, 0.2), ("sgd", 1): (2.0, 0.7, 0.4), ("sgd", 2): (3.0, 0.9),
              ("adam", 0): (1.0, 0.1, 0.05)}
    for k, ((optimizer, seed), losses) in enumerate(curves.items()):
        make_run(tmp_path, run_id=f"r{k}", config={"optimizer": optimizer, "seed": seed},
                 losses=losses)
    table = history(str(tmp_path), "loss", group_by="auto")
    assert list(table.columns) == ["optimizer", "step", "n", "loss_mean", "loss_std",
                                   "loss_ci_low", "loss_ci_high"]
    sgd = table[table["optimizer"] == "sgd"].set_index("step")
    assert list(sgd["n"]) == [3, 3, 2]   # the third run stopped after step 2
    assert sgd.loc[2, "loss_mean"] == pytest.approx(0.7)
    low, high = stats.t.interval(0.95, 1, loc=0.3, scale=stats.sem([0.2, 0.4]))
    assert (sgd.loc[3, "loss_ci_low"], sgd.loc[3, "loss_ci_high"]) == \
        (pytest.approx(low), pytest.approx(high))
    adam = table[table["optimizer"] == "adam"]
    assert list(adam["n"]) == [1, 1, 1] and adam["loss_ci_low"].isna().all()


def test_a_missing_value_leaves_out_its_pair_in_that_outcome_only(tmp_path):
    accuracy = {("sgd", 0): 0.5, ("sgd", 1): 0.6, ("sgd", 2): 0.55, ("sgd", 3): 0.52,
                ("adam", 0): 0.7, ("adam", 1): None, ("adam", 2): 0.75, ("adam", 3): 0.71}
    losses = {key: 0.1 * (k + 1) ** 1.5 for k, key in enumerate(accuracy)}
    for k, (optimizer, seed) in enumerate(accuracy):
        value = accuracy[optimizer, seed]
        make_run(tmp_path, run_id=f"r{k}", config={"optimizer": optimizer, "seed": seed},
                 losses=(1.0, losses[optimizer, seed]),
                 eval_rows=[{"epoch": 1, "step": 2, "accuracy": value}] if value else None)
    table = compare(str(tmp_path / "toy"), group_by="optimizer",
                    against="sgd").set_index("optimizer")
    row = table.loc["adam"]
    assert row["test"] == "paired" and row["n"] == 4
    seeds = [0, 2, 3]   # seed 1 has no adam accuracy: that pair is left out
    a = [accuracy["adam", s] for s in seeds]
    b = [accuracy["sgd", s] for s in seeds]
    assert row["eval_accuracy_p"] == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert row["eval_accuracy_mean"] == pytest.approx(np.mean(a))
    final_a = [losses["adam", s] for s in range(4)]
    final_b = [losses["sgd", s] for s in range(4)]
    assert row["final_loss_p"] == pytest.approx(stats.ttest_rel(final_a, final_b).pvalue)
