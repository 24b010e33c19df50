"""A CSV log damaged in the middle (not only a cut last row) is named with its
file and line by the reader, load_run and the command line."""
import os

import pytest

from mindexp import RunDirError, load_run
from mindexp.callbacks import CsvFormatError, read_csv
from rundirs import make_run


def damage_line(path, line, text):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    lines[line - 1] = text
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(lines))


@pytest.mark.parametrize("text, problem", [
    ("5,3\n", "expected 5 fields, got 2"),
    ("5,3,0.1,0.1,0.5,7\n", "expected 5 fields, got 6"),
    ("\n", "expected 5 fields, got an empty line"),
    ('5,3,"0.1,2",0.1,0.5,7\n', "expected 5 fields, got 6"),  # quoted: the parsing path
])
def test_reader_names_the_file_and_line_of_a_damaged_row_in_the_middle(tmp_path, text, problem):
    run_dir = make_run(tmp_path, losses=[1.0 / i for i in range(1, 81)])
    path = os.path.join(run_dir, "loss.csv")
    damage_line(path, 57, text)
    with pytest.raises(CsvFormatError) as err:
        read_csv(path)
    assert str(err.value) == f"{path} line 57: {problem}"
    assert (err.value.path, err.value.line) == (path, 57)
    with pytest.raises(RunDirError) as err:
        load_run(run_dir).loss
    assert str(err.value) == f"{path} line 57: {problem}"


def test_csv_format_error_is_a_value_error_a_resume_path_can_catch():
    assert issubclass(CsvFormatError, ValueError)


def test_an_undamaged_log_reads_as_before(tmp_path):
    run_dir = make_run(tmp_path, losses=(1.0, 0.5, 0.25))
    assert read_csv(run_dir, "loss.csv").loss.tolist() == [1.0, 0.5, 0.25]


@pytest.mark.parametrize("command", ["compare", "plot"])
def test_compare_and_plot_exit_2_with_one_line(cli, tmp_path, command):
    run_dir = make_run(tmp_path / "outputs", losses=[1.0 / i for i in range(1, 81)])
    damage_line(os.path.join(run_dir, "loss.csv"), 57, "5,3\n")
    proc = cli(command, run_dir)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("loss.csv line 57: expected 5 fields, got 2")
    assert "Traceback" not in proc.stderr
