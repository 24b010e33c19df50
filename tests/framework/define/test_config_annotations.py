"""Every annotation form a config field may have (and `mindexp list` prints)
converts and validates like Optional[float]: PEP 604 unions, builtin
generics, fixed tuples, Literal."""
import enum
from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest

from mindexp import ConfigError, Experiment
from mindexp.define.config import field_defaults, resolve


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Forms(Experiment.Config):
    dropout: float | None = None
    old_dropout: Optional[float] = None
    width: int | None = None
    sizes: list[int] = field(default_factory=lambda: [8])
    names: tuple[str, ...] = ()
    pair: tuple[int, float] = (1, 0.5)
    kind: Literal["mlp", "cnn"] = "mlp"
    level: Literal[1, 2, 3] = 1
    either: int | str = 0
    color: Color = Color.RED


@pytest.mark.parametrize("name, raw, expected", [
    ("dropout", "0.25", 0.25), ("dropout", "none", None), ("dropout", 0.5, 0.5),
    ("old_dropout", "0.25", 0.25), ("width", "7", 7), ("width", "", None),
    ("sizes", "1,2,3", [1, 2, 3]), ("sizes", [4, 5], [4, 5]),
    ("names", "a, b", ("a", "b")), ("pair", "2,1.5", (2, 1.5)),
    ("kind", "cnn", "cnn"), ("level", "2", 2), ("either", "4", 4), ("either", "x", "x"),
    ("color", "blue", Color.BLUE),
])
def test_each_form_converts_strings_from_set(name, raw, expected):
    assert getattr(resolve(Forms, {name: raw}), name) == expected


@pytest.mark.parametrize("name, raw, accepted", [
    ("dropout", "abc", "a number or none"), ("old_dropout", "abc", "a number or none"),
    ("width", "1.5", "an integer or none"), ("sizes", "1,x", "a comma-separated list of an integer"),
    ("pair", "1", "2 items"), ("pair", "1,2,3", "2 items"),
    ("kind", "rnn", "one of mlp, cnn"), ("level", "4", "one of 1, 2, 3"),
    ("color", "green", "Color"), ("dropout", True, "a number or none"),
])
def test_each_form_rejects_a_bad_value_naming_the_field(name, raw, accepted):
    with pytest.raises(ConfigError) as err:
        resolve(Forms, {name: raw})
    assert err.value.field == name
    assert accepted in str(err.value) and f"Received: {name}=" in str(err.value)


def test_values_set_directly_are_checked_too():
    config = resolve(Forms, {})
    config.dropout = "abc"
    from mindexp.define.config import check
    with pytest.raises(ConfigError, match="'dropout'"):
        check(config)


def test_listing_prints_the_forms_as_written():
    types = {name: t for name, t, _ in field_defaults(Forms)}
    assert types["dropout"] == "float | None" and types["sizes"] == "list[int]"
    assert types["pair"] == "tuple[int, float]" and types["kind"] == "Literal['mlp', 'cnn']"


class WithDropout(Experiment):
    name = "with_dropout"

    @dataclass
    class Config(Experiment.Config):
        dropout: float | None = None


def test_cli_set_rejects_a_pep604_field_with_one_line(main_cli, tmp_path):
    src = tmp_path / "exp.py"
    src.write_text("from dataclasses import dataclass\nfrom mindexp import Experiment\n\n"
                   "class E(Experiment):\n    name = 'e'\n\n    @dataclass\n"
                   "    class Config(Experiment.Config):\n        dropout: float | None = None\n\n"
                   "    def source(self, split):\n        return None\n")
    proc = main_cli("run", f"{src}:E", "--set", "dropout=abc")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'dropout'" in lines[0] and "dropout='abc'" in lines[0]
    assert not (tmp_path / "outputs").exists()


def test_experiment_with_pep604_field_converts():
    assert WithDropout(dropout="0.1").config.dropout == 0.1
    with pytest.raises(ConfigError, match="'dropout'"):
        WithDropout(dropout="abc")
