"""Plots of one run and of several, and the plots/ the runner writes."""
import logging
import os

import pytest
from matplotlib.figure import Figure

from mindexp import load_run, load_runs
from mindexp.analysis import plots
from mindexp.analysis.reports import config_labels
from rundirs import make_run, trained_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# Every test here is about plots: runs made in this module draw them (MINDEXP_PLOTS=1).
pytestmark = pytest.mark.usefixtures("plots_drawn")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, plots_drawn):
    return trained_runs(tmp_path_factory)


def _is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG_MAGIC and os.path.getsize(path) > 2000


@pytest.mark.slow
def test_every_real_run_got_its_plots_from_the_runner(trained):
    for run in load_runs(trained):
        folder = os.path.join(run.dir, "plots")
        assert sorted(os.listdir(folder)) == ["grad_norm.png", "loss.png", "params.png"]
        assert all(_is_png(os.path.join(folder, name)) for name in os.listdir(folder))


@pytest.mark.slow
def test_params_plot_draws_each_target_dashed(trained):
    run = load_runs(trained)[0]
    ax = Figure().add_subplot()
    assert plots.params_plot(run, ax=ax) is ax.figure
    solid = {line.get_label(): line for line in ax.lines if line.get_linestyle() == "-"}
    dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert set(solid) == {"dense.weight", "dense.bias"}
    assert sorted(line.get_ydata()[0] for line in dashed) == [0.0, 2.0]
    weight = run.params[run.params["param"] == "dense.weight"]["value"].tolist()
    assert list(solid["dense.weight"].get_ydata()) == pytest.approx(weight)


@pytest.mark.slow
def test_loss_overlay_is_labelled_by_config_not_run_id(trained):
    runs = load_runs(trained)
    fig = plots.loss_overlay(runs)
    ax = fig.axes[0]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]  # below the plot, covering none
    assert legend == config_labels(runs)
    assert any(label.startswith("optimizer=adam, lr=0.1") for label in legend)
    assert not any(run.run_id in label for run in runs for label in legend)
    assert [len(line.get_xdata()) for line in ax.lines] == [50, 50, 50]


@pytest.mark.slow
def test_params_overlay_has_a_panel_per_parameter_or_shares_an_axis(trained):
    runs = load_runs(trained)
    fig = plots.params_overlay(runs)
    assert [ax.get_title() for ax in fig.axes] == ["dense.weight", "dense.bias"]
    assert len([l for l in fig.axes[0].lines if l.get_linestyle() == "-"]) == 3
    ax = Figure().add_subplot()
    plots.params_overlay(runs, ax=ax)
    assert len([l for l in ax.lines if l.get_linestyle() == "-"]) == 6


@pytest.mark.slow
def test_final_loss_bar_orders_configs_best_first(trained):
    runs = load_runs(trained)
    ax = plots.final_loss_bar(runs).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    by_label = dict(zip(config_labels(runs), (r.loss["loss"].iloc[-1] for r in runs)))
    assert labels == sorted(by_label, key=by_label.get)
    assert [p.get_width() for p in ax.patches] == pytest.approx(sorted(by_label.values()))


def test_loss_gets_a_log_axis_only_when_it_spans_decades(tmp_path):
    wide = load_run(make_run(tmp_path, "wide", losses=(10.0, 1.0, 0.01, 0.001)))
    narrow = load_run(make_run(tmp_path, "narrow", losses=(1.0, 0.5, 0.2)))
    assert plots.loss_plot(wide).axes[0].get_yscale() == "log"
    assert plots.loss_plot(narrow).axes[0].get_yscale() == "linear"
    assert plots.loss_overlay([wide, narrow]).axes[0].get_yscale() == "log"


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_log_axes_are_labelled_in_plain_text_without_mathtext(tmp_path, monkeypatch):
    """A log axis's labels read 10⁻³ (and 2×10⁻⁴ between decades) as matplotlib's
    would, but never go through its mathtext parser (0.35 s of every run's plots)."""
    from matplotlib import _mathtext
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    parsed = []
    monkeypatch.setattr(_mathtext.Parser, "parse", lambda self, s, *a, **k: parsed.append(s))
    wide = load_run(make_run(tmp_path, "wide", losses=(10.0, 1.0, 0.01, 0.001)))
    fig = plots.loss_plot(wide)
    FigureCanvasAgg(fig).draw()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_visible()]
    assert {"10⁻³", "10⁻²", "10⁻¹", "10⁰", "10¹"} <= set(labels), labels
    make_run(tmp_path, "a", losses=(1.0, 1.05e-4))
    make_run(tmp_path, "b", losses=(1.0, 1.07e-4))
    bars = plots.final_loss_bar(tmp_path)
    FigureCanvasAgg(bars).draw()
    assert "10⁻⁴" in [t.get_text() for t in bars.axes[0].get_xticklabels()]
    assert parsed == []
    assert plots._plain_log_label(r"$\mathdefault{2\times10^{-4}}$") == "2×10⁻⁴"
    assert plots._plain_log_label(r"$\mathdefault{10^{12}}$") == "10¹²"
    assert plots._plain_log_label("0.5") == "0.5"


def test_save_run_plots_writes_whole_files_and_skips_empty_plots(tmp_path):
    run_dir = make_run(tmp_path, params={"w": [0.5, 1.0, 1.5]}, targets={"w": 2.0})
    written = plots.save_run_plots(run_dir)
    assert [os.path.basename(p) for p in written] == ["loss.png", "params.png"]  # no grad_norm.csv
    assert all(_is_png(p) for p in written)
    assert sorted(os.listdir(os.path.join(run_dir, "plots"))) == ["loss.png", "params.png"]


def test_params_png_is_drawn_for_parameters_logged_only_element_by_element(tmp_path):
    run_dir = make_run(tmp_path, params={"w[0]": [0.5, 1.0, 1.5], "w[1]": [0.1, 0.2, 0.3]})
    written = plots.save_run_plots(run_dir)
    assert [os.path.basename(p) for p in written] == ["loss.png", "params.png"]


def test_a_run_without_loss_rows_gets_no_plots(tmp_path):
    run_dir = make_run(tmp_path, losses=())
    assert plots.save_run_plots(run_dir) == []
    assert not os.path.exists(os.path.join(run_dir, "plots"))


def test_a_failed_save_leaves_neither_a_half_file_nor_a_temp_file(tmp_path, monkeypatch):
    run_dir = make_run(tmp_path)
    plots.save_run_plots(run_dir)
    before = open(os.path.join(run_dir, "plots", "loss.png"), "rb").read()

    def disk_full(fig, dpi=100):
        raise OSError("disk full")
    monkeypatch.setattr(plots, "figure_png", disk_full)
    with pytest.raises(OSError):
        plots.save_run_plots(run_dir)
    assert os.listdir(os.path.join(run_dir, "plots")) == ["loss.png"]
    assert open(os.path.join(run_dir, "plots", "loss.png"), "rb").read() == before


def test_grad_norm_plot_shows_the_clipping_threshold(tmp_path):
    run_dir = make_run(tmp_path, config={"clip_grad_norm": 1.5})
    with open(os.path.join(run_dir, "grad_norm.csv"), "w") as f:
        f.write("step,epoch,grad_norm\n1,1,3.0\n2,1,2.0\n3,2,1.0\n")
    ax = plots.grad_norm_plot(run_dir).axes[0]
    assert [line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == ":"] == [1.5]


def test_overlays_of_a_failed_run_still_draw(tmp_path):
    make_run(tmp_path, "ok", config={"lr": 0.1})
    make_run(tmp_path, "bad", status="diverged", config={"lr": 9.0}, losses=(1.0, float("nan")))
    written = plots.save_overlay_plots(tmp_path, tmp_path / "out")
    assert [os.path.basename(p) for p in written] == ["loss_overlay.png", "final_loss.png"]
    texts = [t.get_text() for t in plots.final_loss_bar(tmp_path).axes[0].texts]
    assert texts[-1].endswith("(diverged)")


@pytest.mark.slow
def test_a_plotting_failure_only_warns(tmp_path, monkeypatch, caplog):
    from mindexp.experiments.linear import Linear

    def broken(run_dir, out_dir=None):
        raise RuntimeError("no fonts today")
    monkeypatch.setattr(plots, "save_run_plots", broken)
    with caplog.at_level(logging.WARNING, logger="mindexp.api"):
        run = Linear(epochs=1, seed=2).run(out=str(tmp_path))
    assert run.status == "completed"
    assert "could not draw the plots" in caplog.text and "no fonts today" in caplog.text
    assert not os.path.exists(os.path.join(run.dir, "plots"))


def test_eval_png_is_written_with_eval_named_metrics(tmp_path):
    run_dir = make_run(tmp_path, eval_rows=[{"epoch": 1, "step": 2, "mae": 0.5},
                                            {"epoch": 2, "step": 3, "mae": 0.25}])
    written = plots.save_run_plots(run_dir)
    assert [os.path.basename(p) for p in written] == ["loss.png", "eval.png"]
    fig = plots.eval_plot(run_dir)
    assert [ax.get_ylabel() for ax in fig.axes] == ["eval_mae"]
    assert list(fig.axes[0].lines[0].get_ydata()) == [0.5, 0.25]


def test_a_diverged_run_does_not_flatten_the_others_and_is_marked(tmp_path):
    make_run(tmp_path, "ok", config={"lr": 0.1}, losses=(1.0, 0.5, 0.25, 0.2),
             params={"w": [1.0, 1.5, 1.8, 1.9]}, targets={"w": 2.0})
    make_run(tmp_path, "bad", status="diverged", config={"lr": 50.0},
             losses=(1.0, 1e13, 1e26, float("inf")), params={"w": [1.0, -1e12, 1e25, 1e30]},
             targets={"w": 2.0})
    runs = load_runs(tmp_path)
    loss_ax = plots.loss_overlay(runs).axes[0]
    assert loss_ax.get_ylim()[1] < 10  # fit to the healthy run's 0.2..1.0
    stop = [line for line in loss_ax.lines if line.get_marker() == "x"]
    assert len(stop) == 1 and list(stop[0].get_xdata()) == [4]  # the first non-finite step
    param_ax = plots.params_overlay(runs).axes[0]
    low, high = param_ax.get_ylim()
    assert low > 0.5 and 2.0 < high < 3  # the target 2 is in view, 1e25 is not
    for line in param_ax.lines:  # the diverged run's far points are gaps, not streaks
        assert all(abs(y) < 100 for y in line.get_ydata() if y == y)


def test_final_loss_uses_a_log_axis_and_keeps_long_labels_readable(tmp_path):
    long = "a_rather_long_setting_name_that_goes_on=" + "x" * 60
    make_run(tmp_path, "a", config={"note": long + "1"}, losses=(1.0, 1.05e-4))
    make_run(tmp_path, "b", config={"note": long + "2"}, losses=(1.0, 1.07e-4))
    ax = plots.final_loss_bar(tmp_path).axes[0]
    assert ax.get_xscale() == "log"
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert all(max(len(line) for line in label.split("\n")) <= plots.LABEL_WIDTH
               for label in labels)
    assert [t.get_text().strip() for t in ax.texts] == ["0.000105", "0.000107"]


def test_params_png_shows_elements_of_small_and_norms_of_large_tensors(tmp_path):
    run_dir = make_run(tmp_path, params={"out.bias": [0.1, 0.2, 0.3],
                                         "hidden.bias[0]": [0.0, 0.1, 0.2],
                                         "hidden.bias[1]": [0.0, -0.1, -0.2],
                                         "hidden.weight:norm": [1.0, 1.1, 1.2],
                                         "hidden.weight:mean": [0.0, 0.0, 0.0]},
                       targets={"out.bias": 0.5})
    fig = plots.params_plot(run_dir)
    titles = [ax.get_title().splitlines()[-1] for ax in fig.axes]
    assert titles == ["out.bias", "hidden.bias", "hidden.weight"]
    by_panel = [[line.get_label() for line in ax.lines] for ax in fig.axes]
    assert by_panel == [["out.bias", "out.bias target 0.5"],
                        ["hidden.bias[0]", "hidden.bias[1]"], ["hidden.weight:norm"]]
    assert fig.axes[0].lines[1].get_linestyle() == "--"


def _drawn_titles(fig):
    """``(canvas, titles)``: ``fig`` drawn by Agg, and its suptitle and axes titles."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas, [t for t in [fig._suptitle] + [ax.title for ax in fig.axes]
                    if t is not None and t.get_text()]


def _assert_inside(fig, canvas, texts, what):
    """Every one of ``texts`` lies inside the figure."""
    for text in texts:
        box = text.get_window_extent(canvas.get_renderer())
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width, (what, text.get_text())
        assert 0 <= box.y0 and box.y1 <= fig.bbox.height, (what, text.get_text())


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_run_plot_titles_fit_in_the_figure_with_a_long_run_id(tmp_path):
    run_dir = make_run(tmp_path, "20261201-101500-momentum-small-lr-with-warmup-1a2b3c",
                       experiment="classification_mlp", status="interrupted",
                       params={"dense.weight": [1, 2, 3], "dense.bias": [0, 1, 2]},
                       eval_rows=[{"epoch": 1, "step": 2, "accuracy": 0.5}])
    for draw in (plots.params_plot, plots.loss_plot, plots.eval_plot):
        fig = draw(run_dir)
        canvas, titles = _drawn_titles(fig)
        text = "\n".join(t.get_text() for t in titles)
        assert "(interrupted!)" in text and "momentum-small-lr-with-warmup-1a2b3c" in \
            text.replace("\n", "")  # a word longer than a line is split, not lost
        _assert_inside(fig, canvas, titles, draw.__name__)


@pytest.mark.slow  # > 0.5 CPU-s: not in the fast tier
def test_the_runners_plots_are_titled_with_the_final_status_and_keep_their_titles_in_view(
        tmp_path, monkeypatch):
    """The runner draws plots/ before run.json is final (it still says running): the
    titles must say the status the run ends with, and the fixed margins of the run-end
    plots must keep every title inside the picture."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine
    from mindexp.experiments.linear import Linear
    drawn = {}

    def keep(fig, path, dpi=100):
        drawn[os.path.basename(path)] = fig
        return path
    monkeypatch.setattr(plots, "save_figure", keep)
    Linear(epochs=2, samples=16).run(out=str(tmp_path), quiet=True)
    assert sorted(drawn) == ["grad_norm.png", "loss.png", "params.png"]
    for name, fig in drawn.items():
        # built without a layout engine: even a placeholder one makes savefig draw twice
        assert fig.get_layout_engine() is None, (name, fig.get_layout_engine())
        canvas, titles = _drawn_titles(fig)
        assert titles and "(completed)" in titles[0].get_text(), (name, titles[0].get_text())
        assert "running" not in "".join(t.get_text() for t in titles)
        boxes = [t.get_window_extent(canvas.get_renderer()) for t in titles]
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), name
        _assert_inside(fig, canvas, titles + [ax.xaxis.label for ax in fig.axes]
                       + [ax.yaxis.label for ax in fig.axes], name)
    # the plot functions users call keep constrained layout
    (run_dir,) = [d for d in (tmp_path / "linear").iterdir()]
    assert isinstance(plots.loss_plot(str(run_dir)).get_layout_engine(), ConstrainedLayoutEngine)
