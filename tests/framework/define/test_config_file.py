"""``--config FILE`` that is no TOML text: UTF-16, invalid UTF-8,
nesting 5,000 deep, a FIFO, a directory, a huge file: one line naming the
file, exit 2, nothing created, never a hang."""
import os
import threading

import pytest

from mindexp.cli.main import main


def _utf16(path):
    path.write_bytes("epochs = 1\n".encode("utf-16"))


def _bad_utf8(path):
    path.write_bytes(b'note = "\xff\xfe"\n')


def _deep(path):
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")


def _fifo(path):
    os.mkfifo(path)


def _folder(path):
    path.mkdir()


def _huge(path):
    with open(path, "wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: no disk used


CASES = {"utf16": (_utf16, "UTF-16"), "bad-utf8": (_bad_utf8, "not UTF-8"),
         "deep": (_deep, "nested deeper"), "fifo": (_fifo, "FIFO"),
         "folder": (_folder, "directory"), "huge": (_huge, "bytes, more than")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_config_file_that_is_no_toml_text_is_one_line_and_exit_2(case, tmp_path, capsys):
    make, says = CASES[case]
    path = tmp_path / "cfg.toml"
    make(path)
    result = {}
    thread = threading.Thread(target=lambda: result.update(code=main(
        ["run", "linear", "--config", str(path), "--out", str(tmp_path / "out")])), daemon=True)
    thread.start()
    thread.join(20)
    if thread.is_alive():  # the code before: open() of a FIFO waits for a writer
        os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))
        pytest.fail("mindexp run --config FIFO hung")
    err = capsys.readouterr().err
    assert result.get("code") == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and says in lines[0], err
    assert not (tmp_path / "out").exists()
