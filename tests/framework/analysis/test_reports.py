"""compare/history/load_runs on real tiny trainings and on hand-made run dirs."""
import json
import logging
import os
import re

import pandas as pd
import pytest

from mindexp import ConfigError, RunDirError, compare, history, load_run, load_runs
from mindexp.analysis.reports import (config_labels, differing_config, differing_fields,
                                      display_table, list_runs)
from rundirs import OPTIMIZER_RUNS, make_run, trained_runs


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return trained_runs(tmp_path_factory)


# -- real trainings ------------------------------------------------------------

@pytest.mark.slow
def test_compare_gives_one_row_per_real_run_with_config_and_outcomes(trained):
    table = compare(trained)
    assert len(table) == 3
    assert list(table.columns[:3]) == ["experiment", "run_id", "status"]
    assert set(table["status"]) == {"completed"}
    assert sorted(zip(table["optimizer"], table["lr"])) == sorted(OPTIMIZER_RUNS)
    assert (table["samples"] == 100).all() and (table["epochs"] == 5).all()
    assert table["final_loss"].is_monotonic_increasing  # default sort
    for row in table.to_dict("records"):
        loss = pd.read_csv(os.path.join(row["run_dir"], "loss.csv"))
        params = pd.read_csv(os.path.join(row["run_dir"], "params.csv"))
        weight = params[params["param"] == "dense.weight"]["value"].iloc[-1]
        assert row["final_loss"] == pytest.approx(loss["loss"].iloc[-1])
        assert row["min_loss"] == pytest.approx(loss["loss"].min())
        assert row["best_step"] == loss["step"][loss["loss"].idxmin()]
        assert (row["steps"], row["epochs_done"]) == (50, 5)
        assert row["train_time_s"] > 0 and row["steps_per_s"] > 0
        assert row["dense.weight"] == pytest.approx(weight)
    assert table["dense.weight_error"].tolist() == \
        pytest.approx((table["dense.weight"] - 2.0).abs().tolist())
    assert table["dense.bias_error"].tolist() == pytest.approx(table["dense.bias"].abs().tolist())


@pytest.mark.slow
def test_compare_sorts_by_any_column_and_accepts_runs_or_paths(trained):
    runs = load_runs(trained)
    assert compare(runs, sort="lr")["lr"].tolist() == [0.05, 0.1, 0.2]
    assert compare([r.dir for r in runs], sort="-lr")["lr"].tolist() == [0.2, 0.1, 0.05]
    assert compare(runs[0])["run_id"].tolist() == [runs[0].run_id]


@pytest.mark.slow
def test_history_is_long_and_complete_with_the_varying_config(trained):
    runs = load_runs(trained)
    loss = history(runs)
    assert list(loss.columns) == ["run_id", "step", "epoch", "loss", "optimizer", "lr"]
    assert len(loss) == 150
    for run in runs:
        mine = loss[loss["run_id"] == run.run_id]
        assert mine["step"].tolist() == list(range(1, 51))
        assert mine["loss"].tolist() == pytest.approx(run.loss["loss"].tolist())
        assert set(mine["optimizer"]) == {run.config["optimizer"]}
    wide = loss.pivot(index="step", columns="optimizer", values="loss")
    assert sorted(wide.columns) == ["adam", "momentum", "sgd"]


@pytest.mark.slow
def test_history_of_a_parameter_the_grad_norm_and_the_lr(trained):
    weight = history(trained, "dense.weight")
    assert len(weight) == 150 and weight["dense.weight"].notna().all()
    assert len(history(trained, "grad_norm")) == 150
    lr = history(trained, "lr")
    assert lr.groupby("optimizer")["lr"].nunique().eq(1).all()


def test_history_keeps_a_config_field_named_like_the_metric_apart(tmp_path):
    """A sweep over ``loss="mse"|"huber"``: ``history(runs, "loss")`` holds the
    logged losses in ``loss`` and the config field as ``config.loss``, with
    each column's own dtype (the config's lr stays a float)."""
    make_run(tmp_path, "a", config={"loss": "mse", "lr": 0.1}, losses=(1.0, 0.5))
    make_run(tmp_path, "b", config={"loss": "huber", "lr": 0.2}, losses=(2.0, 1.5, 1.25))
    table = history(str(tmp_path / "toy"))
    assert list(table.columns[:4]) == ["run_id", "step", "epoch", "loss"]
    assert sorted(table.columns[4:]) == ["config.loss", "lr"]
    assert table["loss"].tolist() == [1.0, 0.5, 2.0, 1.5, 1.25]
    assert table["config.loss"].tolist() == ["mse"] * 2 + ["huber"] * 3
    assert table["run_id"].tolist() == ["a"] * 2 + ["b"] * 3
    assert table["lr"].dtype == float and table["step"].dtype == "int64"


@pytest.mark.slow
def test_unknown_history_metric_lists_the_available_ones(trained):
    with pytest.raises(ConfigError, match=r"available: .*dense\.weight.*grad_norm.*"
                                          r"Received: metric='acc'"):
        history(trained, "acc")


@pytest.mark.slow
def test_labels_name_the_config_fields_that_differ(trained):
    runs = load_runs(trained)
    assert differing_config(runs) == ["optimizer", "lr"]
    labels = config_labels(runs)
    expected = {f"optimizer={o}, lr={lr:g}" for o, lr in OPTIMIZER_RUNS}
    assert set(labels) == expected
    assert all(run.run_id not in label for run, label in zip(runs, labels))


# -- hand-made run directories -------------------------------------------------------

def test_load_runs_finds_runs_recursively_and_skips_other_folders(tmp_path):
    make_run(tmp_path / "a", "r1")
    make_run(tmp_path / "b" / "deeper", "r2")
    (tmp_path / "empty").mkdir()
    (tmp_path / "sweeps" / "s1").mkdir(parents=True)
    (tmp_path / "sweeps" / "s1" / "sweep.json").write_text("{}")
    runs = load_runs(tmp_path)
    assert sorted(r.run_id for r in runs) == ["r1", "r2"] and runs.errors == []
    assert len(load_runs([tmp_path / "a", tmp_path])) == 2  # a run reached twice counts once


def test_a_broken_run_is_named_and_the_others_still_load(tmp_path, caplog):
    make_run(tmp_path, "good")
    broken = make_run(tmp_path, "broken")
    with open(os.path.join(broken, "run.json"), "w") as f:
        f.write('{"status": "compl')
    with caplog.at_level(logging.WARNING, logger="mindexp.analysis.reports"):
        runs = load_runs(tmp_path)
    assert [r.run_id for r in runs] == ["good"]
    assert runs.errors[0][0] == broken and "run.json is not valid JSON" in runs.errors[0][1]
    assert broken in caplog.text
    table = compare(tmp_path)  # the broken record is listed, as unreadable
    assert dict(zip(table["run_id"], table["status"])) == {"good": "completed",
                                                           "broken": "unreadable"}


def test_when_nothing_loads_one_error_names_the_problem(tmp_path):
    for name in ("x", "y"):
        with open(os.path.join(make_run(tmp_path, name), "loss.csv"), "a") as f:
            f.write("garbage,row\n")
    with pytest.raises(RunDirError, match=r"none of the 2 runs could be read; the first: "
                                          r".*x.loss\.csv line 5: expected 5 fields, got 2"):
        load_runs(tmp_path)


@pytest.mark.parametrize("path, message", [
    ("missing", "does not exist"),
    ("empty", "holds no runs"),
    ("file.txt", "neither a run directory nor a folder"),
])
def test_paths_that_hold_no_runs(tmp_path, path, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(RunDirError, match=message):
        load_runs(tmp_path / path)
    with pytest.raises(RunDirError, match=message if path == "missing" else "not a run directory"):
        load_run(tmp_path / path)


def _spoil(run_dir, filename, text, mode="w"):
    with open(os.path.join(run_dir, filename), mode) as f:
        f.write(text)


@pytest.mark.parametrize("filename, text, mode, message", [
    ("loss.csv", "3,2,0.1,0.1,0.3", "a", r"loss\.csv is truncated"),
    ("loss.csv", "3,2,abc,0.1,0.3\n", "a", r"column 'loss' must hold numbers. Received: 'abc' on line 4"),
    ("loss.csv", "x,2,0.1,0.1,0.3\n", "a", r"column 'step' must hold integers. Received: 'x' on line 4"),
    ("loss.csv", "3\n", "a", r"loss\.csv line 4: expected 5 fields, got 1$"),
    ("loss.csv", "3,2,0.1,0.1,0.3,9,9\n", "a", r"loss\.csv line 4: expected 5 fields, got 7$"),
    ("loss.csv", "step,loss\n1,0.5\n", "w", r"lacks the column\(s\) epoch"),
    ("params.csv", "step,epoch,param,value\n1,1,w,oops\n", "w", "column 'value' must hold numbers"),
    ("eval.csv", "epoch,step,accuracy\n1,2,0.5\n2,4,", "w", r"eval\.csv is truncated"),
    ("run.json", "{not json", "w", r"run\.json is not valid JSON"),
    ("run.json", "[1, 2]", "w", r"run\.json must hold a JSON object"),
    ("config.json", "", "w", r"config\.json is not valid JSON"),
])
def test_malformed_files_are_named(tmp_path, filename, text, mode, message):
    run_dir = make_run(tmp_path, losses=(1.0, 0.5))
    _spoil(run_dir, filename, text, mode)
    with pytest.raises(RunDirError, match=message) as info:
        load_run(run_dir)
    assert os.path.join(run_dir, filename) in str(info.value)
    assert "\n" not in str(info.value)


def test_a_running_run_may_have_a_row_in_flight(tmp_path):
    run_dir = make_run(tmp_path, status="running", losses=(1.0, 0.5))
    _spoil(run_dir, "loss.csv", "3,2,0.2", "a")
    assert load_run(run_dir).loss["step"].tolist() == [1, 2]


@pytest.mark.parametrize("status, text, message", [
    ("completed", "3,2,0.1,0.1,0.3", r"loss\.csv is truncated"),
    ("completed", "3\n", r"loss\.csv line 4: expected 5 fields, got 1"),
    ("completed", "\n3,2,0.1,0.1,0.3\n", r"loss\.csv line 4: expected 5 fields, got an empty line"),
    ("completed", "3,2,abc,0.1,0.3\n", r"column 'loss' must hold numbers. Received: 'abc' on line 4"),
    ("completed", "x,2,0.1,0.1,0.3\n", r"column 'step' must hold integers. Received: 'x' on line 4"),
    ("running", "3,2,0.", None),   # a row in flight: dropped, the run kept
])
def test_history_reads_only_its_columns_yet_names_damage_and_skips_only_that_run(
        tmp_path, caplog, status, text, message):
    make_run(tmp_path, "good", losses=(1.0, 0.5))
    _spoil(make_run(tmp_path, "other", status=status, losses=(2.0, 1.0)), "loss.csv", text, "a")
    with caplog.at_level(logging.WARNING, logger="mindexp.analysis.reports"):
        table = history(str(tmp_path), "loss")
    expected = {"good": [1.0, 0.5]} if message else {"good": [1.0, 0.5], "other": [2.0, 1.0]}
    assert {r: list(t["loss"]) for r, t in table.groupby("run_id", observed=True)} == expected
    if message:
        assert re.search(r"skipped a broken run: \S*[/\\]other[/\\].*" + message, caplog.text)


def test_history_takes_the_metric_from_logs_with_more_or_fewer_columns_and_keeps_none(tmp_path):
    """An old loss.csv without lr and time_s and one with a loss component: the
    loss of both, the component of the one; the runs do not keep the logs read."""
    make_run(tmp_path, "five", losses=(1.0, 0.5))
    with open(os.path.join(make_run(tmp_path, "old"), "loss.csv"), "w") as f:
        f.write("step,epoch,loss,mse\n1,1,3.0,2.5\n2,1,2.0,1.5\n")
    runs = list_runs(str(tmp_path))
    loss = history(runs, "loss")
    assert loss["run_id"].tolist() == ["five", "five", "old", "old"]
    assert loss["loss"].tolist() == [1.0, 0.5, 3.0, 2.0] and loss["epoch"].tolist() == [1, 1, 1, 1]
    assert history(runs, "mse")["mse"].tolist() == [2.5, 1.5]
    assert history(runs, "lr")["run_id"].tolist() == ["five", "five"]
    assert not any("loss" in vars(run) for run in runs)   # 100,000-step tables are not kept


def test_final_and_best_eval_metrics_follow_the_metric_direction(tmp_path):
    rows = [{"epoch": 1, "step": 2, "accuracy": 0.5, "mae": 0.4},
            {"epoch": 2, "step": 4, "accuracy": 0.9, "mae": 0.1},
            {"epoch": 3, "step": 6, "accuracy": 0.8, "mae": 0.3}]
    make_run(tmp_path, losses=(1, 0.5, 0.4, 0.3, 0.2, 0.3), eval_rows=rows)
    row = compare(tmp_path).iloc[0]
    assert (row["eval_accuracy"], row["best_eval_accuracy"]) == (0.8, 0.9)
    assert (row["eval_mae"], row["best_eval_mae"]) == (0.3, 0.1)
    assert (row["min_loss"], row["best_step"], row["final_loss"]) == (0.2, 5, 0.3)
    assert history(tmp_path, "eval_accuracy")["eval_accuracy"].tolist() == [0.5, 0.9, 0.8]


def test_config_fields_named_eval_are_config_not_metrics(tmp_path):
    from mindexp.analysis.notebook import run_html
    rows = [{"epoch": 1, "step": 2, "loss": 0.7, "accuracy": 0.5}]
    run_dir = make_run(tmp_path, eval_rows=rows,
                       config={"eval_fraction": 0.2, "eval_every": 1, "eval_loss": "sum"})
    table = compare(tmp_path)
    assert {"eval_fraction", "eval_every", "config.eval_loss"} <= set(table.attrs["config_columns"])
    assert table.attrs["eval_columns"] == ["eval_loss", "best_eval_loss", "eval_accuracy",
                                           "best_eval_accuracy"]
    row = table.iloc[0]
    assert (row["eval_loss"], row["config.eval_loss"], row["eval_fraction"]) == (0.7, "sum", 0.2)
    card = run_html(load_run(run_dir)).split("<details>")[0]  # the values, not the config
    assert "eval_accuracy" in card and "eval_fraction" not in card and "eval_every" not in card
    with pytest.raises(ConfigError, match="'eval_fraction' is a config field, not a logged metric"):
        history(tmp_path, "eval_fraction")


def test_an_eval_metric_named_loss_never_becomes_the_training_loss(tmp_path):
    # spirals' metrics include "loss": eval.csv has a column "loss" (the eval loss)
    rows = [{"epoch": 1, "step": 3, "loss": 9.0}, {"epoch": 2, "step": 6, "loss": 0.01}]
    make_run(tmp_path, losses=(1, 0.5, 0.4, 0.3, 0.2, 0.3), eval_rows=rows)
    row = compare(tmp_path).iloc[0]
    assert (row["final_loss"], row["min_loss"], row["best_step"]) == (0.3, 0.2, 5)
    assert (row["eval_loss"], row["best_eval_loss"]) == (0.01, 0.01)
    assert history(tmp_path, "loss")["loss"].tolist() == [1, 0.5, 0.4, 0.3, 0.2, 0.3]
    assert history(tmp_path, "eval_loss")["eval_loss"].tolist() == [9.0, 0.01]
    with pytest.raises(ConfigError, match="eval_accuracy|eval_loss"):
        history(tmp_path, "accuracy")


def test_only_scalar_parameters_get_columns_and_errors_to_targets(tmp_path):
    params = {"w": [1.0, 1.5, 1.9], "v[0]": [0, 0, 0], "big:norm": [3, 3, 3]}
    make_run(tmp_path, params=params, targets={"w": 2.0, "b": 0.0},
             meta={"params": {"w": 1.9, "b": 0.25}})
    row = compare(tmp_path).iloc[0]
    assert row["w"] == 1.9 and row["w_error"] == pytest.approx(0.1)
    assert row["b"] == 0.25 and row["b_error"] == 0.25  # untracked: from run.json
    assert "v[0]" not in row and "big:norm" not in row
    assert history(tmp_path, "big:norm")["big:norm"].tolist() == [3, 3, 3]


def test_a_parameter_named_like_a_config_field_does_not_hide_it(tmp_path):
    make_run(tmp_path, params={"lr": [0.5, 0.6, 0.7]}, targets={"lr": 1.0})
    row = compare(tmp_path).iloc[0]
    assert row["lr"] == 0.1  # the config field
    assert row["param.lr"] == 0.7 and row["param.lr_error"] == pytest.approx(0.3)


def test_unknown_sort_column_lists_the_valid_ones(tmp_path):
    make_run(tmp_path)
    with pytest.raises(ConfigError, match=r"unknown sort column 'speed'; valid columns: "
                                          r"experiment, run_id, status, .*final_loss.*"
                                          r"Received: sort='speed'"):
        compare(tmp_path, sort="speed")


def test_runs_without_a_finite_loss_sort_last(tmp_path):
    make_run(tmp_path, "diverged", status="diverged", losses=(1.0, float("nan")))
    make_run(tmp_path, "worse", losses=(1.0, 0.9))
    make_run(tmp_path, "better", losses=(1.0, 0.1))
    table = compare(tmp_path)
    assert table["run_id"].tolist() == ["better", "worse", "diverged"]
    assert table["min_loss"].tolist() == [0.1, 0.9, 1.0]


def test_display_table_keeps_differing_config_and_outcomes(tmp_path):
    make_run(tmp_path, "a", config={"optimizer": "adam"})
    make_run(tmp_path, "b", config={"optimizer": "sgd"})
    shown = display_table(compare(tmp_path))
    assert list(shown.columns[:3]) == ["run_id", "status", "optimizer"]
    assert "lr" not in shown.columns and "final_loss" in shown.columns
    assert "run_dir" not in shown.columns


def test_differing_fields_counts_a_missing_field_and_compares_lists_by_value():
    configs = [{"lr": 0.1, "layers": [8, 8], "seed": 0},
               {"lr": 0.1, "layers": [8, 8], "seed": 1, "extra": True},
               {"lr": 0.2, "layers": [8, 8], "seed": 1}]
    assert differing_fields(configs) == ["lr", "seed", "extra"]


def test_equal_configs_get_distinct_labels(tmp_path):
    make_run(tmp_path, "a", config={"optimizer": "adam", "lr": 0.1})
    make_run(tmp_path, "b", config={"optimizer": "adam", "lr": 0.1, "seed": 3})
    make_run(tmp_path, "c", config={"optimizer": "adam", "lr": 0.1, "seed": 3})
    assert config_labels(load_runs(tmp_path)) == ["seed=0", "seed=3", "seed=3 #2"]
    assert config_labels(load_runs(tmp_path / "toy" / "a")) == ["a"]


def test_run_json_shapes_survive_a_round_trip(tmp_path):
    run_dir = make_run(tmp_path, config={"track_names": ["a", "b"]})
    table = compare(run_dir)
    assert table["track_names"].iloc[0] == ("a", "b")
    assert json.loads(open(os.path.join(run_dir, "config.json")).read())["track_names"] == ["a", "b"]


def test_history_holds_each_run_id_once_as_a_category_and_pivots_as_text(tmp_path):
    for name, optimizer in (("a", "sgd"), ("b", "adam")):
        make_run(tmp_path, name, config={"optimizer": optimizer}, losses=(1.0, 0.5, 0.25))
    table = history(str(tmp_path), "loss")
    assert str(table["run_id"].dtype) == "category" and str(table["optimizer"].dtype) == "category"
    assert list(table.pivot(index="step", columns="run_id", values="loss").columns) == ["a", "b"]
    assert table.loc[table["run_id"] == "b", "optimizer"].tolist() == ["adam"] * 3


def test_history_puts_a_list_config_value_whole_on_each_row(tmp_path):
    make_run(tmp_path, "a", config={"layers": [1, 2]}, losses=(1.0, 0.5, 0.25))
    make_run(tmp_path, "b", config={"layers": [3]}, losses=(2.0, 1.5))
    assert history(str(tmp_path))["layers"].tolist() == [(1, 2)] * 3 + [(3,)] * 2


def test_load_runs_of_a_sweep_folder_takes_the_runs_its_sweep_json_names(tmp_path):
    """docs/jupyter.md: load_runs(folder) takes a sweep's or a study's runs. The
    sweep folder (<out>/sweeps/<id>) holds only sweep.json; its runs are beside it,
    under <out>/<experiment>/. An earlier failed attempt at a point is not one of them."""
    import mindexp
    kept = [make_run(tmp_path, f"s{i}", config={"lr": lr}) for i, lr in enumerate((0.1, 0.2))]
    earlier = make_run(tmp_path, "s9", status="failed")
    make_run(tmp_path, "other")  # same experiment, not in the sweep
    sweep = tmp_path / "sweeps" / "sw1"
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"runs": [
        {"index": 0, "run_dir": "/elsewhere/toy/s0", "previous_runs": [earlier]},
        {"index": 1, "run_dir": kept[1]},
        {"index": 2, "run_dir": None, "status": "pending"}]}))
    runs = mindexp.load_runs(str(sweep))
    assert sorted(run.dir for run in runs) == sorted(kept)
    assert sorted(compare(str(sweep))["lr"]) == [0.1, 0.2]
    (sweep / "sweep.json").write_text(json.dumps({"runs": [{"index": 0, "run_dir": None}]}))
    with pytest.raises(RunDirError, match="sweep.json names no run that exists"):
        load_runs(str(sweep))
