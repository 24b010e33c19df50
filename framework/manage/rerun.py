"""Rerun: a new run with a finished run's config, from the code it captured."""
import os

from .. import layout
from ..errors import RunDirError
from ..rundir.io import is_run_dir, read_json
from ..rundir.meta import read_meta
from ..rundir.run_lock import refuse_if_held
from ..provenance import files as F
from ..provenance.capture import installed_packages, mindspore_env
from ..provenance.modules import changed_modules


def prepare_rerun(run_dir, overrides=None, current_code=False):
    """Check ``run_dir`` can be rerun and build the experiment; returns the
    :class:`~mindexp.train.request.RunRequest` of the new run (its
    ``rerun_of`` names the original). Changes nothing on disk.

    With ``current_code``, a config field the user did not set takes the
    current code's default (an edited default shows); runs made before the
    user-set fields were recorded keep every value
    (``request.rerun_of["config_set_unknown"]``).

    Raises MindexpError (one line) when ``run_dir`` is not a run, or its
    captured source is missing or corrupt (unless ``current_code``).
    """
    from ..define.entry import load_experiment, refuse_script_run
    run_dir = os.path.abspath(os.fspath(run_dir))
    if not is_run_dir(run_dir):
        raise RunDirError(f"cannot rerun {run_dir}: not a run directory (no {layout.RUN_JSON})")
    refuse_if_held(run_dir, "rerun")  # a live run may still change
    meta = read_meta(run_dir, require=("entry",))
    refuse_script_run(run_dir, meta["entry"], "rerun")  # its script reruns it
    config = read_json(os.path.join(run_dir, layout.CONFIG_JSON))
    if current_code:
        entry = meta["entry"]
    else:
        block = F.provenance_of(meta)
        try:
            F.source_files(run_dir, block)
            _refuse_unlisted(run_dir, meta)
        except RunDirError as exc:
            raise RunDirError(f"cannot rerun from the captured code: {exc}; "
                              "--current-code reruns with the experiment's file as it is now") \
                from None
        entry = f"{F.entry_path(run_dir, block)}:{block['source']['class']}"
    user_set = F.config_set(meta)  # None: a run made before they were recorded
    exp = load_experiment(entry)({**_base_config(config, user_set, current_code),
                                  **(overrides or {})})
    from ..train.request import RunRequest
    return RunRequest(
        exp, out=os.path.dirname(os.path.dirname(run_dir)), entry=entry,
        config_set=tuple(n for n in vars(exp.config)
                         if n in (overrides or {}) or user_set is None or n in user_set),
        rerun_of={"run_id": meta.get("run_id") or os.path.basename(run_dir),
                  "run_dir": run_dir, "code": "current" if current_code else "captured",
                  "overrides": dict(overrides or {}),
                  "environment_differs": environment_changes(run_dir),
                  "modules_changed": _modules_changed(meta, current_code),
                  "config_set_unknown": user_set is None})


def _modules_changed(meta, current_code):
    """The user's modules whose current file differs from the run's: with
    ``current_code`` every one; else those the run did not capture (ignored, over
    the cap), which load from their current file."""
    block = F.provenance_of(meta)
    if not current_code:
        source = block.get("source") if isinstance(block.get("source"), dict) else {}
        block = {"source": {"not_captured": source.get("not_captured")}}
    return changed_modules(block)


def _base_config(config, user_set, current_code):
    """The original's config values a rerun starts from: all of them from the
    captured code; from the current code only the fields the user set (the
    others take the current defaults), or all when the run does not say which."""
    if not current_code or user_set is None:
        return config
    return {k: v for k, v in config.items() if k in user_set}


def _refuse_unlisted(run_dir, meta):
    unlisted = F.unlisted_files(run_dir, meta)
    if unlisted:
        more = f" (and {len(unlisted) - 1} more)" if len(unlisted) > 1 else ""
        raise RunDirError(f"{run_dir}: {unlisted[0]}{more} is not in the captured source's "
                          f"manifest ({layout.RUN_JSON}); only the files captured with the run are "
                          "accepted, remove it")


def rerun(run_dir, overrides=None, out=None, current_code=False, name=None, quiet=True):
    """Train a new run with ``run_dir``'s config (changed by ``overrides``) from
    its captured code (``current_code``: the experiment's file as it is now).

    The new run goes under ``out`` (default: the original's output root) and
    its run.json says ``rerun_of``. Returns its :class:`mindexp.Run`.
    """
    return train_rerun(prepare_rerun(run_dir, overrides, current_code), out, name, quiet)


def train_rerun(request, out=None, name=None, quiet=True):
    """Train what :func:`prepare_rerun` built (under ``out``, default the
    original's output root); returns the new :class:`mindexp.Run`."""
    import dataclasses
    from ..api import run_request
    return run_request(dataclasses.replace(request, out=out or request.out, label=name,
                                           quiet=quiet))


def environment_changes(run_dir):
    """How this process's environment differs from the one ``run_dir`` captured:
    a list of ``"what: captured -> now"`` strings (packages, Python, MindSpore
    environment variables); empty when nothing differs or nothing was captured."""
    import platform
    meta = read_meta(run_dir)
    block = F.provenance_of(meta)
    if not block.get("environment"):
        return []
    then = F.read_environment(os.path.join(run_dir, block["environment"]))
    now = dict(p.split("==", 1) for p in installed_packages())
    python = (meta.get("versions") or {}).get("python")
    changes = [f"python: {python} -> {platform.python_version()}"] \
        if python and python != platform.python_version() else []
    return changes + _changed(then, now, "", "absent") \
        + _changed(block.get("env") or {}, mindspore_env(), "$", "unset")


def _changed(then, now, sign, missing):
    """``"<sign>name: then -> now"`` of each name whose value differs (``missing``: none)."""
    return [f"{sign}{name}: {then.get(name, missing)} -> {now.get(name, missing)}"
            for name in sorted(set(then) | set(now)) if then.get(name) != now.get(name)]
