"""``.mindexpignore`` as users save it (a BOM, CRLF, a wrong kind of file,
bytes that are not UTF-8), and capture of a module two imports away."""
import os

import pytest

from test_captured_modules import EXP_MAIN, HELPER, meta_of, run_dir_of


@pytest.fixture
def project(tmp_path):
    """``proj/exp_main.py`` importing ``helper`` and ``mysecrets`` (its API key)."""
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "helper.py").write_text(HELPER)
    (folder / "mysecrets.py").write_text("API_KEY = 'sk-123'\n")
    (folder / "exp_main.py").write_text(EXP_MAIN.replace("import helper\n",
                                                         "import helper\nimport mysecrets\n"))
    return folder


def test_an_ignore_file_with_a_bom_and_crlf_keeps_the_secret_out_of_the_run(cli, project, tmp_path):
    # Notepad's "UTF-8 with BOM" and Windows line ends: the first line is a pattern too
    (project / ".mindexpignore").write_bytes(b"\xef\xbb\xbfmysecrets.py\r\n# helpers stay\r\n")
    run = run_dir_of(cli("run", f"{project}/exp_main.py:TwoModules", "--set", "epochs=1",
                         "--out", tmp_path / "out", "--quiet"))
    source = meta_of(run)["provenance"]["source"]
    assert not os.path.exists(os.path.join(run, "source", "mysecrets.py"))
    assert source["not_captured"]["mysecrets"]["why"] == \
        "ignored by .mindexpignore (mysecrets.py)"
    assert "helper" in source["modules"]


def _fifo(path):
    os.mkfifo(path)


def _folder(path):
    os.mkdir(path)


def _latin1(path):
    with open(path, "wb") as f:
        f.write(b"secret\xff.py\n")


@pytest.mark.parametrize("plant, said", [
    (_fifo, "must be a regular text file of patterns (like .gitignore); it was not read. "
            "Received: a FIFO"),
    (_folder, "Received: a directory"),
    (_latin1, "is not UTF-8 text (byte 0xff at offset 6)"),
])
def test_an_ignore_file_that_cannot_be_read_refuses_the_run_before_it_exists(
        cli, project, tmp_path, plant, said):
    plant(str(project / ".mindexpignore"))
    # a FIFO opened blocking would hang: a process of its own, with a timeout
    env = {"PYTHONUNBUFFERED": "1"} if plant is _fifo else {}
    done = cli("run", f"{project}/exp_main.py:TwoModules", "--set", "epochs=1",
               "--out", tmp_path / "out", "--quiet", timeout=60, **env)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and str(project / ".mindexpignore") in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("run.json"))


def test_capture_follows_imports_of_imported_modules_outside_the_folder(tmp_path, monkeypatch):
    """exp_main -> near (another folder) -> far (a third folder): a rerun needs far too."""
    from mindexp.define.entry import import_file
    from mindexp.provenance import modules as M
    proj, near, far = tmp_path / "proj", tmp_path / "near", tmp_path / "far"
    for folder in (proj, near, far):
        folder.mkdir()
    (far / "far_lib.py").write_text("SCALE = 3\n")
    (near / "near_lib.py").write_text("import far_lib\n\ndef width():\n    return far_lib.SCALE\n")
    (proj / "exp_main.py").write_text("from near_lib import width\n")
    monkeypatch.syspath_prepend(str(far))
    monkeypatch.syspath_prepend(str(near))
    module = import_file(str(proj / "exp_main.py"))
    exp = type("Exp", (), {"__module__": module.__name__})()
    block = {"source": {"dir": "source", "origin": str(proj / "exp_main.py"),
                        "entry_file": "exp_main.py", "files": {}}}
    M.capture_modules(exp, str(tmp_path / "run"), block)
    assert sorted(block["source"]["modules"]) == ["far_lib", "near_lib"]
    assert (tmp_path / "run" / "source" / "far_lib.py").read_text() == "SCALE = 3\n"
