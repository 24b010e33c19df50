"""Capture, at run start, what produced a run: its code, git state, packages, command.

Everything is small and written with the run directory's atomic writer. git is
optional: no repository, no git binary or a failing git command leave the git
fields ``None``; capturing never fails a run (a failure only warns).
"""
import logging
import os
import platform
import re
import subprocess
import sys

from .. import layout
from ..errors import ConfigError
from ..rundir.io import now_iso, read_json, write_file
from ..secrets import masked_argv, masked_environment
from . import files as F
from . import modules
from .data import fingerprint as data_fingerprint

logger = logging.getLogger(__name__)

SHIPPED_PREFIXES = ("mindexp.experiments.", "mindexp._captured_")
_GIT_TIMEOUT_S = 10


def capture(exp, run_dir, entry, rerun_of=None, config_set=None):
    """Write ``source/`` and ``environment.txt`` into ``run_dir``; return the
    run.json fields to add: ``provenance`` (with ``config_set``, the config
    fields the user set; every field when None) and ``rerun_of`` (the run this
    one reruns, when it does).

    When ``run_dir``'s run.json already holds a provenance block (written by
    the msrun launcher before its workers start), that block is kept.
    """
    existing = _existing_meta(run_dir)
    if F.provenance_of(existing):
        return {F.META_KEY: existing[F.META_KEY], F.RERUN_KEY: existing.get(F.RERUN_KEY)}
    rerun_of = dict(rerun_of) if rerun_of is not None else None
    block = _capture_into(exp, run_dir, layout.SOURCE_DIR, layout.ENVIRONMENT_FILE, rerun_of)
    block[F.CONFIG_SET_KEY] = list(config_set) if config_set is not None else list(vars(exp.config))
    return {F.META_KEY: block, F.RERUN_KEY: rerun_of}


def capture_built(exp, config, plan, record):
    """Once the network, data, loss and optimizer are built: add to the capture of
    ``record``'s run, or of its last resume, the user's modules ``exp`` imported
    (:func:`~mindexp.provenance.modules.capture_modules`) and the fingerprint of
    each split's data (``data``, :func:`~mindexp.provenance.data.fingerprint`; the
    run's ``config`` says how: its ``data_fingerprint``)."""
    meta = record.meta
    resumes = meta.get("resumes") or []
    block = (resumes[-1] if resumes else meta).get(F.META_KEY)
    if not isinstance(block, dict):
        return
    if not is_shipped(type(exp)):  # a shipped one imports only mindexp
        try:
            modules.capture_modules(exp, record.run_dir, block)
        except (OSError, ConfigError) as exc:  # a record, never a reason to fail training
            # (an ignore file made unreadable since check_ignore_file: nothing it might exclude)
            logger.warning("could not capture the modules of %s: %s", record.run_dir, exc)
            block["source_missing"] = f"capture of the modules failed: {exc}"
    block[F.DATA_KEY] = _data_fingerprints(exp, config, plan)


def check_ignore_file(exp):
    """ConfigError (one line) when the ``.mindexpignore`` beside ``exp``'s file
    cannot be read as patterns (not a regular file, not UTF-8): checked before
    the run is created, since the modules it would exclude cannot be told."""
    path = class_file(type(exp))
    if path is not None and not is_shipped(type(exp)):
        modules.read_ignore_file(os.path.join(os.path.dirname(path), modules.IGNORE_FILE))


def _data_fingerprints(exp, config, plan):
    mode = getattr(config, "data_fingerprint", "stat")
    if mode == "off":
        return None
    found = {}
    for split, data in (("train", plan.train), ("eval", plan.eval)):
        try:
            found[split] = data_fingerprint(data, exp.columns, content=mode == "content")
        except Exception as exc:  # a record, never a reason to fail training
            logger.warning("could not fingerprint the %s data: %s", split, exc)
            found[split] = {"kind": "unknown", "error": f"{type(exc).__name__}: {exc}"}
    return {k: v for k, v in found.items() if v is not None}


def capture_resume(exp, run_dir, number):
    """What the ``number``-th resume ran with, in ``source/resume-<number>/``;
    returns the block to append to that resume's run.json entry."""
    folder = os.path.join(layout.SOURCE_DIR, F.RESUME_DIR.format(n=number))
    return _capture_into(exp, run_dir, folder, os.path.join(folder, layout.ENVIRONMENT_FILE), None)


def capture_script(path, run_dir, config_keys, number=0):
    """Provenance of a script run (``mindexp.track``): the script ``path`` (None
    or not a file: typed into a REPL or a notebook), git, packages, command.
    ``number`` 0 is the run's start (returns the run.json fields to add, like
    :func:`capture`); a resume's number returns the block for its resume entry."""
    if number:
        folder = os.path.join(layout.SOURCE_DIR, F.RESUME_DIR.format(n=number))
        return _capture_file(path, None, run_dir, folder,
                             os.path.join(folder, layout.ENVIRONMENT_FILE), None)
    block = _capture_file(path, None, run_dir, layout.SOURCE_DIR, layout.ENVIRONMENT_FILE, None)
    block[F.CONFIG_SET_KEY] = list(config_keys)
    return {F.META_KEY: block, F.RERUN_KEY: None}


def _capture_into(exp, run_dir, folder, environment_file, rerun_of):
    return _capture_file(class_file(type(exp)), type(exp), run_dir, folder, environment_file,
                         rerun_of)


def _capture_file(path, cls, run_dir, folder, environment_file, rerun_of):
    """Capture into ``folder``: the packages, and the file ``path`` defining
    ``cls`` (an experiment class; None: ``path`` is a script) with its git state."""
    block = {"captured_at": now_iso(), "command": masked_argv(sys.argv), "cwd": os.getcwd(),
             "python_executable": sys.executable, "host": platform.node(),
             "env": mindspore_env(), "environment": None, "source": None, "git": None}
    try:
        os.makedirs(os.path.join(run_dir, folder), exist_ok=True)
        write_file(os.path.join(run_dir, environment_file),
                   "".join(f"{p}\n" for p in installed_packages()))
        block["environment"] = environment_file
        if path is None or not os.path.isfile(path):
            what = cls.__qualname__ if cls is not None else "the script"
            block["source_missing"] = f"{what} is not defined in a file"
            return block
        block["source"] = _copy_source(cls, path, run_dir, folder)
        block["git"] = _git_block(path, run_dir, folder, rerun_of)
    except OSError as exc:  # provenance is a record, never a reason to fail training
        logger.warning("could not capture the provenance of %s: %s", run_dir, exc)
        block["source_missing"] = f"capture failed: {exc}"
    return block


def _existing_meta(run_dir):
    path = os.path.join(run_dir, layout.RUN_JSON)
    if not os.path.isfile(path):
        return {}
    try:
        return read_json(path)
    except Exception:  # a half-made run.json: capture afresh
        return {}


# -- source --------------------------------------------------------------------

def class_file(cls):
    """The file that defines ``cls``, or None (a class typed into a REPL)."""
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    return os.path.abspath(path) if path and os.path.isfile(path) else None


def is_shipped(cls):
    """A class of mindexp.experiments (or a captured copy of one)."""
    return cls.__module__.startswith(SHIPPED_PREFIXES)


def _copy_source(cls, path, run_dir, folder):
    """Copy the experiment's file (a script's when ``cls`` is None) (for a shipped one, also its private sibling
    modules, e.g. ``_nets.py``, which hold the networks)."""
    names = [os.path.basename(path)]
    sub = ""
    if cls is not None and is_shipped(cls):
        sub = F.SHIPPED_FOLDER
        here = os.path.dirname(path)
        names += sorted(n for n in os.listdir(here) if n.startswith("_") and n.endswith(".py")
                        and n != "__init__.py")
    target = os.path.join(run_dir, folder, sub)
    os.makedirs(target, exist_ok=True)
    digests = {}
    for name in names:
        with open(os.path.join(os.path.dirname(path), name), "rb") as f:
            data = f.read()
        write_file(os.path.join(target, name), data)
        digests[os.path.join(sub, name) if sub else name] = F.sha256_of(os.path.join(target, name))
    entry_file = os.path.join(sub, names[0]) if sub else names[0]
    return {"dir": folder, "origin": path, "entry_file": entry_file,
            "class": cls.__qualname__ if cls is not None else None, "files": digests}


# -- environment ---------------------------------------------------------------

def installed_packages():
    """Sorted ``name==version`` of every installed distribution (importlib.metadata)."""
    from importlib import metadata
    found = {}
    for dist in metadata.distributions():
        name, version = _name_version(dist)
        if name:
            found.setdefault(re.sub(r"[-_.]+", "-", name).lower(), version)
    return [f"{name}=={version}" for name, version in sorted(found.items())]


def _name_version(dist):
    """Name and Version from the metadata's header lines: ``dist.metadata`` parses
    every long description as e-mail (~0.75 s for 30 packages, at each run start)."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    fields = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the header ends at the first blank line
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version"):
            fields.setdefault(key, value.strip())
    return fields.get("Name"), fields.get("Version")


def mindspore_env():
    """The environment variables that change MindSpore's behaviour, sorted, with
    credentials masked (:func:`..secrets.masked_environment`)."""
    return masked_environment({k: v for k, v in sorted(os.environ.items())
                               if k in F.ENV_VARS or
                               any(k.startswith(p) for p in F.ENV_VARS if p.endswith("_"))})


# -- git -----------------------------------------------------------------------

def git_state(path):
    """``commit, branch, dirty, root, file_tracked`` of the repository holding
    ``path`` and its uncommitted diff (bytes or None). Every field is None when
    there is no repository or no git."""
    state = dict.fromkeys(("commit", "branch", "dirty", "root", "file_tracked"))
    folder = os.path.dirname(path)
    root = _git(folder, "rev-parse", "--show-toplevel")
    if root is None:
        return state, None
    state["root"] = root.decode().strip()
    commit = _git(folder, "rev-parse", "--verify", "-q", "HEAD")
    state["commit"] = commit.decode().strip() if commit else None
    branch = _git(folder, "symbolic-ref", "--short", "-q", "HEAD")
    state["branch"] = branch.decode().strip() if branch else None  # None when detached
    tracked = _git(folder, "ls-files", "--error-unmatch", "--", path)
    state["file_tracked"] = tracked is not None
    changes = _git(folder, "status", "--porcelain", "--untracked-files=no")
    if changes is None:
        return state, None
    # Dirty: tracked files changed (staged or not), or the experiment file itself untracked.
    state["dirty"] = bool(changes.strip()) or not state["file_tracked"]
    diff = _git(folder, "diff", "HEAD", "--no-color", "--no-ext-diff") \
        if changes.strip() and state["commit"] else None
    return state, diff


def _git(folder, *args):
    """stdout of ``git -C folder args`` as bytes; None when git is missing or fails."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")  # never take the index lock
    try:
        done = subprocess.run(["git", "-C", folder, *args], capture_output=True, env=env,
                              timeout=_GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _git_block(path, run_dir, folder, rerun_of):
    if rerun_of and rerun_of.get("code") == "captured":
        return _git_of_original(rerun_of["run_dir"], run_dir, folder)
    state, diff = git_state(path)
    state.update(diff=None, diff_bytes=None, diff_truncated=False)
    if diff:
        state["diff_bytes"] = len(diff)
        if len(diff) > F.DIFF_CAP_BYTES:
            cut = diff[:F.DIFF_CAP_BYTES]
            diff = cut[:cut.rfind(b"\n") + 1] + (
                f"# mindexp: diff truncated at {F.DIFF_CAP_BYTES} bytes "
                f"(full size {len(diff)} bytes)\n").encode()
            state["diff_truncated"] = True
        state["diff"] = os.path.join(folder, F.DIFF_FILE)
        write_file(os.path.join(run_dir, state["diff"]), diff)
    return state


def _git_of_original(original_dir, run_dir, folder):
    """A rerun of captured code: the code came from the original run's git state."""
    original = F.provenance_of(_existing_meta(original_dir)).get("git") or {}
    state = dict(original, from_run=os.path.basename(original_dir))
    if original.get("diff"):
        with open(os.path.join(original_dir, original["diff"]), "rb") as f:
            data = f.read()
        state["diff"] = os.path.join(folder, F.DIFF_FILE)
        write_file(os.path.join(run_dir, state["diff"]), data)
    return state
