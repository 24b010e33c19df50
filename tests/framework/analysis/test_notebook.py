"""mindexp in Jupyter: rich HTML, inline figures, and examples/tour.ipynb run by a real kernel."""
import os
import shutil

import pandas as pd
import pytest

from conftest import ROOT

import mindexp

pytestmark = pytest.mark.slow  # every test here trains runs

TOUR = os.path.join(ROOT, "examples", "tour.ipynb")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    from mindexp.experiments.pinn_ode import PinnOde
    out = tmp_path_factory.mktemp("runs")
    return [PinnOde(epochs=1, lr=lr, checkpoint_interval_s=0).run(out=str(out))
            for lr in (0.01, 0.02)]


def test_run_renders_status_final_values_components_and_a_loss_curve(two_runs):
    run = two_runs[0]
    page = run._repr_html_()
    assert "completed" in page and run.run_id in page and "<svg" in page
    assert "final_residual=" in page and "final_boundary=" in page and "lr=0.01" in page


def test_compare_is_a_dataframe_that_renders_a_curve_per_run(two_runs):
    table = mindexp.compare(two_runs)
    assert isinstance(table, pd.DataFrame) and len(table) == 2
    page = table._repr_html_()
    assert page.count("<svg") == 2 and "final_residual" in page
    assert isinstance(table.sort_values("lr"), type(table))  # stays rich after pandas ops
    assert "<svg" not in table[["run_id", "lr"]]._repr_html_()  # a column slice: plain pandas


def test_runs_of_a_sweep_render_as_their_table(two_runs):
    runs = mindexp.load_runs(os.path.dirname(two_runs[0].dir))
    assert isinstance(runs, list) and len(runs) == 2
    assert "2 runs" in runs._repr_html_() and runs._repr_html_().count("<svg") == 2


def test_plots_return_matplotlib_figures(two_runs):
    from matplotlib.figure import Figure
    fig = mindexp.plot(two_runs, "boundary")
    assert isinstance(fig, Figure) and len(fig.axes[0].get_lines()) == 2
    assert isinstance(two_runs[0].plot("grad_norm"), Figure)
    with pytest.raises(mindexp.ConfigError, match="accepted: loss, eval, params, grad_norm"):
        two_runs[0].plot("nope")


def test_tour_is_stored_without_outputs():
    import nbformat
    notebook = nbformat.read(TOUR, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)
    imports = [ln for c in code for ln in c.source.splitlines() if "import" in ln]
    assert imports and not [ln for ln in imports if "._" in ln]  # public names only


@pytest.mark.slow
def test_tour_notebook_executes_in_a_real_kernel(tmp_path, monkeypatch):
    import nbformat
    monkeypatch.setenv("GLOG_v", "2")  # MindSpore's warnings on, as in a user's Jupyter
    from nbclient import NotebookClient
    shutil.copy(TOUR, tmp_path / "tour.ipynb")
    notebook = nbformat.read(tmp_path / "tour.ipynb", as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on any error cell
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    streams = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "FusedSparse" not in streams, streams[:2000]
    kinds = [k for o in outputs for k in o.get("data", {})]
    assert kinds.count("image/png") == 3  # run.plot(), plot(runs), pinn.plot()
    assert "application/vnd.jupyter.widget-view+json" in kinds  # tqdm's notebook bar
    html = "".join(o["data"].get("text/html", "") for o in outputs if "data" in o)
    assert "mindexp-run" in html and "3 runs" in html and html.count("<svg") >= 7
    assert (tmp_path / "outputs" / "sweep").is_dir()
