"""The provenance files of a run directory: the names inside them, and readers
(the run directory's own names come from ``callbacks.schema``)."""
import hashlib
import os

from .. import layout
from ..define.entry import SHIPPED_FOLDER  # noqa: F401  (in source/: a shipped experiment's module)
from ..errors import RunDirError

# -- names ---------------------------------------------------------------------
DIFF_FILE = "uncommitted.diff"              # in layout.SOURCE_DIR: `git diff HEAD` when dirty
RESUME_DIR = "resume-{n}"                   # in layout.SOURCE_DIR: what the n-th resume captured
META_KEY = "provenance"                     # run.json: the captured block
RERUN_KEY = "rerun_of"                      # run.json: which run this one reran
CONFIG_SET_KEY = "config_set"               # in META_KEY: the config fields the user set
DATA_KEY = "data"                           # in META_KEY: {split: fingerprint of its data}
DIFF_CAP_BYTES = 256 * 1024                 # larger uncommitted diffs are cut (and say so)
# Environment variables that change MindSpore's behaviour (names, or prefixes ending in _).
ENV_VARS = ("GLOG_v", "OMP_NUM_THREADS", "MS_")


def sha256_of(path):
    """Hex SHA-256 of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def sha256_bytes(data):
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def provenance_of(meta):
    """run.json's provenance block, or ``{}`` for a run made before provenance."""
    block = (meta or {}).get(META_KEY)
    return block if isinstance(block, dict) else {}


def config_set(meta):
    """The config field names the user set (the others came from the
    experiment's defaults), or None for a run made before they were recorded."""
    names = provenance_of(meta).get(CONFIG_SET_KEY)
    return list(names) if isinstance(names, list) else None


def source_files(run_dir, block):
    """``{relative name: text}`` of the captured source files, checked against
    their recorded SHA-256. Raises RunDirError (one line) naming what is wrong:
    no captured source, a missing file, a file changed since the capture."""
    source = block.get("source") if isinstance(block, dict) else None
    if not isinstance(source, dict) or not isinstance(source.get("files"), dict):
        why = (block or {}).get("source_missing") if isinstance(block, dict) else None
        raise RunDirError(f"{run_dir} has no captured source"
                          + (f" ({why})" if why else " (made before provenance was recorded)"))
    folder = os.path.join(run_dir, source.get("dir") or layout.SOURCE_DIR)
    texts = {}
    for name, digest in source["files"].items():
        path = os.path.join(folder, name)
        shown = f"{run_dir}: the captured source file {os.path.relpath(path, run_dir)}"
        if not os.path.isfile(path):
            raise RunDirError(f"{shown} is missing")
        if sha256_of(path) != digest:
            raise RunDirError(f"{shown} is corrupt (its SHA-256 does not match the one in {layout.RUN_JSON})")
        with open(path, encoding="utf-8", errors="replace") as f:
            texts[name] = f.read()
    return texts


def unlisted_files(run_dir, meta):
    """Files below ``source/`` that no capture of the run wrote (relative paths,
    sorted): a planted ``__pycache__/*.pyc`` or extra module would otherwise be
    imported with the captured code. The captures' manifests list their source
    files, their environment.txt and uncommitted.diff (the first capture's and
    each resume's)."""
    blocks = [provenance_of(meta)] + [provenance_of(r) for r in (meta or {}).get("resumes") or []
                                      if isinstance(r, dict)]
    listed = set()
    for block in blocks:
        listed.update(_recorded_paths(block))
    found = []
    for top, dirs, names in os.walk(os.path.join(run_dir, layout.SOURCE_DIR)):
        links = [d for d in dirs if os.path.islink(os.path.join(top, d))]  # never walked into
        for name in names + links:
            rel = os.path.relpath(os.path.join(top, name), run_dir)
            if os.path.normpath(rel) not in listed:
                found.append(rel)
    return sorted(found)


def _recorded_paths(block):
    """Normalised run-relative paths a capture's block says it wrote."""
    source = block.get("source") if isinstance(block.get("source"), dict) else {}
    folder = source.get("dir") or layout.SOURCE_DIR
    paths = [os.path.join(folder, name) for name in (source.get("files") or {})
             if isinstance(name, str)]
    git = block.get("git") if isinstance(block.get("git"), dict) else {}
    paths += [p for p in (block.get("environment"), git.get("diff")) if isinstance(p, str)]
    return {os.path.normpath(p) for p in paths}


def entry_path(run_dir, block):
    """Absolute path of the captured file that holds the experiment class."""
    source = block["source"]
    return os.path.join(run_dir, source.get("dir") or layout.SOURCE_DIR, source["entry_file"])


def read_environment(path):
    """``{name: version}`` from an environment.txt; ``{}`` when it is absent."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    pairs = (line.split("==", 1) for line in lines if "==" in line)
    return {name.strip(): version.strip() for name, version in pairs}
