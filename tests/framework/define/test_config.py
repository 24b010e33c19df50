"""Config: coercion of --set strings, and every rejection naming its field."""
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import pytest

from mindexp import ConfigError, Experiment
from mindexp.define.config import Config, load_toml, parse_assignments, resolve


@dataclass
class Extended(Config):
    hidden: Tuple[int, ...] = (8, 8)
    names: List[str] = field(default_factory=list)
    dropout: Optional[float] = None
    verbose: bool = False


@pytest.mark.parametrize("raw, field, expected", [
    ("0.5", "lr", 0.5), ("3", "epochs", 3), ("true", "sink", True), ("off", "sink", False),
    ("adam", "optimizer", "adam"), ("none", "clip_grad_norm", None), ("1.5", "clip_grad_norm", 1.5),
    ("16,32", "hidden", (16, 32)), ("a,b", "names", ["a", "b"]), ("0.1", "dropout", 0.1),
    ("yes", "verbose", True), (4, "lr", 4.0), (2.0, "epochs", 2),
])
def test_strings_and_values_are_coerced_to_the_field_type(raw, field, expected):
    assert getattr(resolve(Extended, {field: raw}), field) == expected


def test_later_sources_win():
    cfg = resolve(Config, {"lr": 0.1, "epochs": 4}, {"lr": "0.5"})
    assert (cfg.lr, cfg.epochs) == (0.5, 4)


@pytest.mark.parametrize("values, field, message", [
    ({"lrr": "0.1"}, "lrr", r"unknown config field 'lrr'\. Did you mean lr"),
    ({"epochs": "ten"}, "epochs", r"'epochs' expects an integer\. Received: epochs='ten'"),
    ({"epochs": "2.5"}, "epochs", r"expects an integer"),
    ({"lr": "fast"}, "lr", r"'lr' expects a number\. Received: lr='fast'"),
    ({"lr": "nan"}, "lr", r"expects a number"),
    ({"sink": "maybe"}, "sink", r"'sink' expects true or false"),
    ({"lr": "0"}, "lr", r"'lr' must be a number > 0\. Received: lr=0\.0"),
    ({"lr": "-1"}, "lr", r"'lr' must be a number > 0"),
    ({"epochs": "0"}, "epochs", r"'epochs' must be an integer >= 1 and < 2\*\*31\. Received: epochs=0"),
    ({"batch_size": "0"}, "batch_size", r"'batch_size' must be an integer >= 1"),
    ({"optimizer": "adamm"}, "optimizer",
     r"'optimizer' must be one of sgd, momentum, adam, adamw, rmsprop, adagrad\. Received: optimizer='adamm'"),
    ({"mode": "eager"}, "mode", r"'mode' must be one of graph, pynative"),
    ({"amp_level": "O5"}, "amp_level", r"one of O0, O1, O2, O3"),
    ({"grad_accumulation": "0"}, "grad_accumulation", r"integer >= 1"),
    ({"clip_grad_norm": "-1"}, "clip_grad_norm", r"a number > 0, or none"),
    ({"momentum": "1.5"}, "momentum", r"in \[0, 1\)"),
    ({"workers": "0"}, "workers", r"integer >= 1"),
    ({"epochs": True}, "epochs", r"expects an integer"),
])
def test_bad_values_are_rejected_naming_the_field(values, field, message):
    with pytest.raises(ConfigError, match=message) as info:
        resolve(Config, values)
    assert info.value.field == field


def test_parse_assignments():
    assert parse_assignments(["lr=0.1", " optimizer = adam "]) == {"lr": "0.1", "optimizer": "adam"}
    with pytest.raises(ConfigError, match=r"--set expects NAME=VALUE\. Received: 'lr'"):
        parse_assignments(["lr"])


def test_toml_values_and_errors(tmp_path):
    good = tmp_path / "my.toml"
    good.write_text('lr = 0.1\noptimizer = "adam"\n')
    assert load_toml(good) == {"lr": 0.1, "optimizer": "adam"}
    bad = tmp_path / "bad.toml"
    bad.write_text("lr = = 1\n")
    with pytest.raises(ConfigError, match=r"is not valid TOML"):
        load_toml(bad)
    with pytest.raises(ConfigError, match=r"config file not found"):
        load_toml(tmp_path / "missing.toml")


class Tiny(Experiment):
    """A subclass adding a field."""
    name = "tiny"

    @dataclass
    class Config(Experiment.Config):
        samples: int = 10

    def validate(self):
        if self.config.samples < 2:
            raise ConfigError(f"samples must be >= 2. Received: samples={self.config.samples}",
                              field="samples")


def test_experiment_subclass_config_and_validate():
    exp = Tiny(lr=0.5, samples="20")
    assert (exp.config.lr, exp.config.samples) == (0.5, 20)
    with pytest.raises(ConfigError, match="samples must be >= 2") as info:
        Tiny(samples=1)
    assert info.value.field == "samples"
    with pytest.raises(ConfigError, match=r"unknown config field 'sample'\. Did you mean samples"):
        Tiny(sample=3)


def test_importing_framework_does_not_import_mindspore():
    import subprocess
    import sys
    from conftest import cli_env
    code = "import sys, mindexp; print('mindspore' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
