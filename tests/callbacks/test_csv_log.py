"""CsvLog: header once, header check, buffering, crash safety, truncation, reader."""
import csv
import json

import pytest

from mindexp.callbacks import CsvLog, read_csv


def rows_of(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_header_written_once_across_appends(tmp_path):
    path = tmp_path / "loss.csv"
    with CsvLog(path, ["step", "loss"]) as log:
        log.write((1, 0.5))
    with CsvLog(path, ["step", "loss"]) as log:
        log.write((2, 0.25))
    assert rows_of(path) == [["step", "loss"], ["1", "0.5"], ["2", "0.25"]]


def test_header_written_when_file_exists_but_empty(tmp_path):
    path = tmp_path / "loss.csv"
    path.write_text("")
    with CsvLog(path, ["step", "loss"]) as log:
        log.write((1, 0.5))
    assert rows_of(path)[0] == ["step", "loss"]


def test_header_mismatch_is_a_clear_error(tmp_path):
    path = tmp_path / "loss.csv"
    path.write_text("step,epoch\n1,1\n")
    with pytest.raises(ValueError, match=r"has columns \['step', 'epoch'\], expected \['step', 'loss'\]"):
        CsvLog(path, ["step", "loss"]).open()
    assert path.read_text() == "step,epoch\n1,1\n"  # untouched


def test_rows_are_buffered_until_flush_rows(tmp_path):
    path = tmp_path / "x.csv"
    log = CsvLog(path, ["step"], flush_rows=3, flush_seconds=3600).open()
    log.write((1,))
    log.write((2,))
    assert len(rows_of(path)) == 1  # header only
    log.write((3,))
    assert len(rows_of(path)) == 4
    log.close()


def test_flush_seconds_bounds_buffer_age(tmp_path):
    path = tmp_path / "x.csv"
    log = CsvLog(path, ["step"], flush_rows=10_000, flush_seconds=0.0).open()
    log.write((1,))
    assert rows_of(path)[-1] == ["1"]
    log.close()


def test_exit_flushes_when_the_block_raises(tmp_path):
    path = tmp_path / "x.csv"
    with pytest.raises(RuntimeError):
        with CsvLog(path, ["step"], flush_rows=10_000, flush_seconds=3600) as log:
            log.write((1,))
            log.write((2,))
            raise RuntimeError("training blew up")
    assert rows_of(path) == [["step"], ["1"], ["2"]]


def test_half_row_left_by_a_killed_writer_is_cut_on_open(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("step,loss\n1,0.5\n2,0.2")  # no newline: the writer died mid-row
    with CsvLog(path, ["step", "loss"]) as log:
        log.write((2, 0.25))
    assert rows_of(path) == [["step", "loss"], ["1", "0.5"], ["2", "0.25"]]


def test_truncate_after_drops_later_steps(tmp_path):
    path = tmp_path / "x.csv"
    with CsvLog(path, ["step", "v"]) as log:
        for step in range(1, 11):
            log.write((step, step * 10))
    dropped = CsvLog(path, ["step", "v"]).truncate_after(6)
    assert dropped == 4
    assert [r[0] for r in rows_of(path)] == ["step", "1", "2", "3", "4", "5", "6"]
    assert not list(tmp_path.glob("*.tmp-*"))


def test_truncate_then_append_keeps_each_step_once(tmp_path):
    path = tmp_path / "x.csv"
    log = CsvLog(path, ["step", "v"]).open()
    for step in range(1, 6):
        log.write((step, 0))
    log.truncate_after(3)
    for step in range(4, 6):
        log.write((step, 1))
    log.close()
    assert [r[0] for r in rows_of(path)[1:]] == ["1", "2", "3", "4", "5"]


def test_dict_rows_follow_the_column_order(tmp_path):
    path = tmp_path / "x.csv"
    with CsvLog(path, ["step", "loss", "lr"]) as log:
        log.write({"loss": 0.5, "step": 1})
    assert rows_of(path)[1] == ["1", "0.5", ""]


def test_read_csv_returns_dataframe_and_empty_for_missing(tmp_path):
    with CsvLog(tmp_path / "loss.csv", ["step", "loss"]) as log:
        log.write((1, 0.5))
    frame = read_csv(tmp_path, "loss.csv")
    assert list(frame.columns) == ["step", "loss"] and frame["loss"].tolist() == [0.5]
    assert read_csv(tmp_path, "missing.csv").empty


@pytest.mark.parametrize("kwargs, field", [({"fieldnames": []}, "fieldnames"),
                                          ({"fieldnames": ["a"], "flush_rows": 0}, "flush_rows")])
def test_bad_arguments_name_the_argument(tmp_path, kwargs, field):
    with pytest.raises(ValueError, match=f"Received: {field}="):
        CsvLog(tmp_path / "x.csv", **kwargs)


def test_write_rows_buffers_like_write_and_flushes_at_flush_rows(tmp_path):
    log = CsvLog(tmp_path / "m.csv", ["step", "value"], flush_rows=4).open()
    log.write_rows([(1, 0.5), (2, 0.25)])
    assert _lines(tmp_path / "m.csv") == ["step,value"]
    log.write_rows([(3, 0.125), (4, 1e-9)])
    assert _lines(tmp_path / "m.csv") == ["step,value", "1,0.5", "2,0.25", "3,0.125", "4,1e-09"]
    log.close()


def _lines(path):
    with open(path, newline="") as f:
        return f.read().splitlines()


@pytest.mark.parametrize("tail", ["", "4,1,0.0"])   # pyarrow's path; pandas' (a row in flight)
def test_reader_reads_only_the_columns_asked_for(tmp_path, tail):
    from mindexp.callbacks.csv_log import read_arrays
    path = tmp_path / "loss.csv"
    path.write_text("step,epoch,loss,note\n1,1,0.5,a\n2,1,0.25,b\n3,1,0.125,c\n" + tail)
    table = read_csv(path, columns=["loss", "step", "absent"])
    assert list(table.columns) == ["step", "loss"]   # the file's order; absent left out
    assert table["loss"].tolist()[:3] == [0.5, 0.25, 0.125]
    arrays = read_arrays(path, ["loss", "step"])
    assert list(arrays) == ["step", "loss"] and arrays["step"].tolist()[:3] == [1, 2, 3]
    assert read_arrays(tmp_path / "missing.csv", ["step"]) == {}


@pytest.mark.parametrize("moment", ["in the write", "after the write"])
def test_a_second_signal_in_a_flush_leaves_each_row_once(tmp_path, moment):
    """A KeyboardInterrupt (the second Ctrl-C/SIGTERM) while a flush writes: the
    rows stay buffered and the file whole, and close() writes each row once (the
    fault injection saw an interrupted sweep point's rows twice)."""
    path = tmp_path / "x.csv"
    log = CsvLog(path, ["step"], flush_rows=100, flush_seconds=3600).open()
    log.write((1,))
    log.flush()
    log.write((2,))
    log.write((3,))
    real_flush = log._file.flush

    def interrupted():
        log._file.flush = real_flush   # one signal
        if moment == "after the write":
            real_flush()   # the rows reached the file: the signal comes right after
        raise KeyboardInterrupt

    log._file.flush = interrupted
    with pytest.raises(KeyboardInterrupt):
        log.flush()
    assert rows_of(path) == [["step"], ["1"]]   # back to the last whole flush
    log.close()
    assert rows_of(path) == [["step"], ["1"], ["2"], ["3"]]


def test_read_arrays_gives_empty_float_fields_as_nan_text_as_objects_and_no_pandas(tmp_path):
    """The reader a run's end uses (its summary): empty fields of a number column are
    NaN as pandas reads them, text columns named as text are object arrays, and an
    empty line or an empty integer field still takes the careful path, which names it."""
    import subprocess
    import sys
    path = tmp_path / "system.csv"
    path.write_text("time_s,step,process_cpu_percent,rss_mb\n0.0,0,,417.5\n1.9,60,42.3,444.7\n")
    params = tmp_path / "params.csv"
    params.write_text("step,epoch,param,value\n1,1,w,0.5\n1,1,b,0.25\n2,1,w,0.75\n")
    code = ("import sys, json; from mindexp.callbacks.csv_log import read_arrays as r; "
            f"a = r({str(path)!r}); p = r({str(params)!r}, text=('param',)); "
            "print(json.dumps([a['process_cpu_percent'].tolist(), a['step'].dtype.kind, "
            "p['param'].tolist(), p['param'].dtype.kind, p['value'].tolist(), "
            "'pandas' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    cpu, step_kind, names, name_kind, values, pandas = json.loads(out.stdout)
    assert cpu[0] != cpu[0] and cpu[1] == 42.3  # NaN, then the value
    assert (step_kind, names, name_kind, values) == ("i", ["w", "b", "w"], "O", [0.5, 0.25, 0.75])
    assert pandas is False
    from mindexp.callbacks import CsvFormatError
    from mindexp.callbacks.csv_log import read_arrays
    path.write_text("time_s,step,rss_mb\n0.0,0,1.0\n\n1.0,1,2.0\n")
    with pytest.raises(CsvFormatError, match="line 3: expected 3 fields, got an empty line"):
        read_arrays(path)
    path.write_text("time_s,step,rss_mb\n0.0,,1.0\n1.0,1,2.0\n")  # pandas reads it: a float step
    assert read_arrays(path)["step"].dtype.kind == "f"        # (which Run.read_arrays refuses)
