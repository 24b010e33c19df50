"""Each common config field is declared by its consumer's module (define/config/*)
and registered once; Config inherits them flat, in the order config.json keeps."""
import dataclasses

import pytest

from mindexp.define import config
from mindexp.define.config import Config, _fields

# config.json's order of today's common fields (a contract: compare, `mindexp list`); a new
# field goes into its owner's group, wherever that puts it among them.
ORDER = ("seed epochs batch_size optimizer lr momentum weight_decay loss mode device "
         "amp_level memory_optimize_level loss_scale lr_schedule warmup_steps lr_decay_rate "
         "lr_decay_epochs clip_grad_norm grad_accumulation sink graph_kernel log_every "
         "track_params track_names max_param_values param_log_budget param_stats "
         "data_fingerprint checkpoint_every checkpoint_interval_s keep_checkpoints eval_every "
         "metrics workers log_all_ranks early_stop patience min_delta early_stop_mode "
         "checkpoint_monitor keep_best system_every_s").split()


def test_config_json_keeps_the_fields_in_their_order():
    assert [name for name in config.to_dict(Config()) if name in ORDER] == ORDER


def test_every_common_field_has_one_owner_among_the_consumers_modules():
    owners = {f.name: _fields.OWNERS[f.name] for f in dataclasses.fields(Config)}
    assert set(owners.values()) == {f"mindexp.define.config.{m}" for m in (
        "run", "optimization", "system", "logs", "checkpoints", "evaluation", "distributed",
        "early_stop")}
    assert config.__name__ not in owners.values()  # no field left in the assembling module
    assert set(_fields.RULES) | set(_fields.CHOICES) <= set(owners)
    for base in Config.__mro__[1:-1]:
        assert {f.name for f in dataclasses.fields(base)} <= {
            n for n, m in owners.items() if m == base.__module__}, base


def test_a_field_declared_twice_is_refused_naming_both_modules():
    with pytest.raises(ValueError, match="'lr' is declared twice "
                       r"\(mindexp.define.config.optimization and .*test_config_owners\)"):
        @_fields.owns()
        @dataclasses.dataclass
        class Again:
            lr: float = 0.1
    assert _fields.OWNERS["lr"] == "mindexp.define.config.optimization"


def test_a_rule_for_a_field_the_group_lacks_is_refused():
    with pytest.raises(ValueError, match="rules fields it does not declare: lrr"):
        @_fields.owns(rules={"lrr": (lambda v: v > 0, "a number > 0")})
        @dataclasses.dataclass
        class Typo:
            lr2: float = 0.1
    assert "lr2" not in _fields.OWNERS


@pytest.mark.parametrize("values, message", [
    ({"warmup_steps": "-1"}, "config field 'warmup_steps' must be an integer >= 0. "
                             "Received: warmup_steps=-1"),
    ({"device": "TPU"}, "config field 'device' must be one of CPU, GPU, Ascend. "
                        "Received: device='TPU'"),
    ({"early_stop": "acc"}, "config field 'early_stop' must be empty (off), loss or "
                            "eval_<metric> (e.g. eval_accuracy). Received: early_stop='acc'"),
    ({"keep_best": "2"}, "config field 'keep_best' needs checkpoint_monitor"),
])
def test_each_owners_checks_run_from_the_flat_config(values, message):
    with pytest.raises(config.ConfigError) as err:
        config.resolve(Config, values)
    assert str(err.value).startswith(message)
    assert err.value.field == next(iter(values))
