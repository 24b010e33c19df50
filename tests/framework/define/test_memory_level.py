"""memory_optimize_level: a config field passed to MindSpore, validated, listed."""
import pytest


@pytest.mark.slow  # spawns mindexp or trains: seconds
def test_o1_reaches_mindspore_context_and_o0_sets_it_back(tmp_path):
    import mindspore as ms
    from mindexp.experiments.linear import Linear
    run = Linear(epochs=1, memory_optimize_level="O1", checkpoint_interval_s=0).run(out=str(tmp_path))
    assert run.status == "completed" and run.config["memory_optimize_level"] == "O1"
    assert ms.get_context("memory_optimize_level") == 1
    Linear(epochs=1, checkpoint_interval_s=0).run(out=str(tmp_path))
    assert ms.get_context("memory_optimize_level") == 0


def test_o3_is_rejected_naming_the_field_and_the_choices(main_cli, tmp_path):
    done = main_cli("run", "linear", "--set", "memory_optimize_level=O3", "--out", "out")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "mindexp: error: config field 'memory_optimize_level' must be one of O0, O1. "
        "Received: memory_optimize_level='O3'"]
    assert not (tmp_path / "out").exists()


def test_list_describes_the_field(cli):
    done = cli("list", "linear")
    assert done.returncode == 0
    line = next(ln for ln in done.stdout.splitlines() if "memory_optimize_level" in ln)
    assert "O0" in line and "O1 memory first" in line
