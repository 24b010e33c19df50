"""Every shipped experiment draws its pictures: figures(network, split) on an
untrained network (PyNative: no graph to compile) gives named matplotlib
figures that render to PNG."""
import io

import pytest

from conftest import require

# experiment -> (config overrides, the figure names the issue lists)
HOOKS = {
    "linear": ({}, {"fit"}),
    "mlp_sine": ({}, {"fit"}),
    "spirals": ({}, {"boundary"}),
    "digits": ({}, {"confusion", "misclassified"}),
    "image_folder": ({}, {"confusion", "misclassified"}),
    "pinn_ode": ({}, {"solution", "residual"}),
    "multitask": ({}, {"regression", "classification"}),
    "transformer": ({"eval_samples": 64}, {"accuracy_by_length"}),
}


@pytest.fixture(scope="module")
def pynative():
    import mindspore as ms
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    yield
    ms.set_context(mode=mode)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOOKS))
def test_each_shipped_experiment_draws_its_figures(name, pynative, tmp_path):
    from matplotlib.figure import Figure
    from mindexp.define.catalog import resolve_spec
    from mindexp.train.figures import as_named
    overrides, expected = HOOKS[name]
    if name == "digits":
        require("sklearn", "digits needs scikit-learn (the digits extra)")
    if name == "image_folder":
        from mindexp.experiments.image_folder import write_shapes
        overrides = {"data_dir": str(write_shapes(tmp_path / "shapes", per_class=4, side=16))}
    exp = resolve_spec(name)[0](**overrides)
    split = "eval" if exp.source("eval") is not None else "train"
    figures = as_named(exp.figures(exp.network(), split))
    assert set(figures) == expected
    for fig in figures.values():
        assert isinstance(fig, Figure)
        png = io.BytesIO()
        fig.savefig(png, format="png")
        assert png.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = fig.get_size_inches() * fig.get_dpi()
        assert width <= 400 and height <= 400  # small: drawn after every evaluation
