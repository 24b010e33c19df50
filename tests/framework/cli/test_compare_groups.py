"""mindexp compare / plot --group-by: the grouped table, the baseline test and
the group bands, through the command line as typed."""
import os

import numpy as np
import pytest

from rundirs import make_run

# 8 steps: momentum's first two losses equal plain SGD's
SMALL = ("--set", "epochs=2", "--set", "samples=40", "--set", "batch_size=10")


@pytest.fixture
def three_groups(tmp_path):
    rng = np.random.default_rng(3)
    for optimizer, centre in (("sgd", 0.3), ("momentum", 0.2), ("adam", 0.1)):
        for seed in range(3):
            make_run(tmp_path, run_id=f"{optimizer}-{seed}",
                     config={"optimizer": optimizer, "seed": seed, "lr": 0.1},
                     losses=tuple(1 / (i + 1) + centre + 0.02 * rng.random() for i in range(6)),
                     params={"w": list(np.linspace(0, 2, 6) + centre)},
                     eval_rows=[{"epoch": e, "step": 2 * e, "loss": centre + e * 0.01}
                                for e in (1, 2, 3)])
    make_run(tmp_path, run_id="rmsprop-0", config={"optimizer": "rmsprop", "seed": 0, "lr": 0.1})
    return tmp_path / "toy"


def _rows(stdout):
    lines = stdout.splitlines()
    header = lines[0].split()
    return header, [dict(zip(header, line.split())) for line in lines[1:]
                    if not line.startswith("note:")]


def test_compare_group_by_prints_each_groups_n_mean_interval_and_test(main_cli, three_groups):
    done = main_cli("compare", three_groups, "--group-by", "optimizer", "--against", "sgd")
    assert done.returncode == 0, done.stderr
    header, rows = _rows(done.stdout)
    assert header == ["optimizer", "n", "outcome", "mean", "ci_low", "ci_high", "test", "diff",
                      "diff_ci_low", "diff_ci_high", "p", "p_holm"]
    by = {(r["optimizer"], r["outcome"]): r for r in rows}
    assert {o for o, _ in by} == {"adam", "momentum", "rmsprop", "sgd"}
    assert {m for _, m in by} == {"final_loss", "min_loss", "eval_loss"}
    assert by["momentum", "final_loss"]["n"] == "3" and by["momentum", "final_loss"]["test"] \
        == "paired"
    assert by["sgd", "min_loss"]["test"] == "baseline" and by["sgd", "min_loss"]["p"] == "-"
    assert float(by["adam", "final_loss"]["p_holm"]) >= float(by["adam", "final_loss"]["p"])
    assert by["rmsprop", "final_loss"]["test"] == "none"
    assert done.stdout.splitlines()[-1] == \
        "note: optimizer=rmsprop has 1 run: no interval and no test"


def test_against_a_number_is_read_as_set_reads_it(main_cli, tmp_path):
    for k, (lr, loss) in enumerate([(0.1, 0.3), (0.1, 0.4), (0.01, 0.2), (0.01, 0.25)]):
        make_run(tmp_path, run_id=f"r{k}", config={"lr": lr, "seed": k % 2}, losses=(1.0, loss))
    done = main_cli("compare", tmp_path / "toy", "--group-by", "lr", "--against", "0.10")
    assert done.returncode == 0, done.stderr
    _, rows = _rows(done.stdout)
    assert {r["lr"]: r["test"] for r in rows} == {"0.01": "paired", "0.1": "baseline"}


@pytest.mark.parametrize("args, says", [
    (("--group-by", "optimiser"), "cannot group by 'optimiser': not a config field of these "
                                   "runs; accepted: 'auto' or config fields of the runs: seed, "
                                   "epochs, optimizer, lr"),
    (("--group-by", "optimizer", "--against", "nadam"), "no group has optimizer = nadam"),
    (("--against", "sgd"), "--against needs --group-by FIELD"),
])
def test_bad_grouping_input_is_one_line_and_exit_2(main_cli, three_groups, args, says):
    done = main_cli("compare", three_groups, *args)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Received:" in lines[0], done.stderr


def test_plot_group_by_draws_a_band_per_group_in_each_plot(main_cli, three_groups):
    done = main_cli("plot", three_groups, "--group-by", "optimizer")
    assert done.returncode == 0, done.stderr
    plots = three_groups / "plots"
    assert sorted(os.listdir(plots)) == ["eval_groups.png", "loss_groups.png",
                                         "params_groups.png"]
    assert not (three_groups / "sgd-0" / "plots").exists()   # no plot per run


def test_the_group_figure_holds_one_filled_band_per_group(three_groups):
    from matplotlib.collections import PolyCollection
    from mindexp.analysis.group_plots import group_curves
    from mindexp.analysis.reports import load_runs
    runs = [r for r in load_runs(str(three_groups)) if r.run_id != "rmsprop-0"]
    for metric in ("loss", "w", "eval_loss"):
        fig = group_curves(runs, metric, "optimizer")
        bands = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
        assert len(bands) == 3, metric
        assert len(fig.axes[0].get_lines()) == 3


@pytest.mark.slow
def test_sweep_with_seeds_then_compare_by_optimizer_against_sgd(cli, tmp_path):
    done = cli("sweep", "linear", "--grid", "optimizer=sgd,momentum,adam", "--seeds", "5",
               *SMALL, "--out", "outputs")
    assert done.returncode == 0, done.stdout + done.stderr
    done = cli("compare", "outputs/linear", "--group-by", "optimizer", "--against", "sgd")
    assert done.returncode == 0, done.stderr
    _, rows = _rows(done.stdout)
    by = {(r["optimizer"], r["outcome"]): r for r in rows}
    for optimizer in ("sgd", "momentum", "adam"):
        for outcome in ("final_loss", "min_loss"):
            row = by[optimizer, outcome]
            assert row["n"] == "5"
            assert float(row["ci_low"]) <= float(row["mean"]) <= float(row["ci_high"])
    for optimizer in ("momentum", "adam"):
        row = by[optimizer, "final_loss"]
        assert row["test"] == "paired" and 0 <= float(row["p"]) <= float(row["p_holm"]) <= 1
    done = cli("plot", "outputs/linear", "--group-by", "optimizer")
    assert done.returncode == 0 and "loss_groups.png" in done.stdout, done.stderr


def test_plot_refuses_a_bad_group_field_in_one_line_and_writes_nothing(main_cli, three_groups):
    done = main_cli("plot", three_groups, "--group-by", "optimiser")
    assert done.returncode == 2 and "cannot group by 'optimiser'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (three_groups / "plots").exists()


def test_group_by_auto_groups_by_what_differs_but_the_seed(main_cli, three_groups):
    done = main_cli("compare", three_groups, "--group-by", "auto")
    assert done.returncode == 0, done.stderr
    header, rows = _rows(done.stdout)
    assert header[:3] == ["optimizer", "n", "outcome"]   # seed differs too, lr does not
    assert {r["optimizer"] for r in rows} == {"adam", "momentum", "rmsprop", "sgd"}
