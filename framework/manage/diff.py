"""Diff two runs: config, captured code, git state, packages, environment, outcomes."""
from __future__ import annotations

import difflib
import json
import os
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..errors import RunDirError
from ..provenance import files as F
from ..provenance.data import summary as data_summary

if TYPE_CHECKING:
    import pandas as pd

    from ..rundir.run import Run, RunOrPath

MISSING = "(absent)"  # a field or outcome one run has and the other lacks
SECTIONS = ("config", "data", "modules", "source", "git", "packages", "env", "outcomes")
GIT_FIELDS = ("commit", "branch", "dirty", "diff_bytes")


def diff(run_a: RunOrPath, run_b: RunOrPath) -> dict[str, Any]:
    """What differs between two runs (paths or ``mindexp.Run``).

    Returns a dict: ``a``/``b`` (the run directories); DataFrames with
    columns ``name, a, b``: ``config`` (fields that differ), ``git``
    (commit, branch, dirty, diff size of both), ``packages`` (versions that
    differ), ``env`` (MindSpore environment variables that differ),
    ``outcomes`` (status, final/min loss, steps, steps/s, eval metrics of
    both; ``"(absent)"`` on the side that lacks one), ``modules`` (the user's
    modules whose code differs: the first 12 hex digits of each SHA-256, or
    ``"not captured"``), ``data`` (the fingerprints of the splits' data that
    differ: ``train`` kind and samples, ``train.x`` an array's dtype, shape and
    SHA-256, ``train:/path`` a file's size and time); ``source``: the
    unified diff of the captured code ("" when the same); ``experiment``:
    ``{"a": name, "b": name, "same": bool}``. Values keep their type (an int
    stays an int).
    """
    from ..analysis.reports import as_runs, load_run
    runs = [load_run(r.dir if hasattr(r, "dir") else r) for r in (run_a, run_b)]
    blocks = [F.provenance_of(r.meta) for r in runs]
    git_a, git_b = ((b.get("git") or {}) for b in blocks)
    names = [r.meta.get("experiment") for r in runs]
    return {
        "a": runs[0].dir, "b": runs[1].dir,
        "experiment": {"a": names[0], "b": names[1], "same": names[0] == names[1]},
        "config": _table(_differing(runs[0].config, runs[1].config)),
        "data": _table(_differing(*(data_summary(b.get(F.DATA_KEY)) for b in blocks))),
        "modules": _table(_differing(*(_module_hashes(b) for b in blocks))),
        "source": _source_diff(runs, blocks),
        "git": _table((k, git_a.get(k), git_b.get(k)) for k in GIT_FIELDS),
        "packages": _table(_differing(*(_environment(r, b) for r, b in zip(runs, blocks)))),
        "env": _table(_differing(*((b.get("env") or {}) for b in blocks))),
        "outcomes": _outcomes(as_runs(runs)),
    }


def _table(rows: Iterable[tuple[str, Any, Any]]) -> pd.DataFrame:
    import pandas as pd
    return pd.DataFrame(list(rows), columns=["name", "a", "b"])


def _differing(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    return [(k, first.get(k, MISSING), second.get(k, MISSING))
            for k in dict.fromkeys([*first, *second])
            if json.dumps(first.get(k, MISSING)) != json.dumps(second.get(k, MISSING))]


def _module_hashes(block: Mapping[str, Any]) -> dict[str, str]:
    """``{module name: SHA-256 prefix}`` of a run's captured modules (the experiment's
    own file under its name), ``"not captured"`` for one it did not capture."""
    source: dict[str, Any] = block["source"] if isinstance(block.get("source"), dict) else {}
    files = source.get("files") or {}
    out: dict[str, str] = {str(source.get("entry_file")): str(files.get(source.get("entry_file")))[:12]} \
        if source.get("entry_file") else {}
    out.update({name: str(files.get(info.get("file")))[:12]
                for name, info in (source.get("modules") or {}).items() if isinstance(info, dict)})
    out.update({name: "not captured" for name in source.get("not_captured") or {}})
    return out


def _environment(run: Run, block: Mapping[str, Any]) -> dict[str, str]:
    if not block.get("environment"):
        return {}
    return F.read_environment(os.path.join(run.dir, block["environment"]))


def _source_diff(runs: Sequence[Run], blocks: Sequence[Mapping[str, Any]]) -> str:
    """Unified diff of the captured files: the two entry files with each other,
    the other files (a shipped module's helpers) by name."""
    texts = []
    for run, block in zip(runs, blocks):
        try:
            texts.append((F.source_files(run.dir, block), block["source"]["entry_file"]))
        except RunDirError as exc:
            return f"(cannot compare the code: {exc})"
    (files_a, entry_a), (files_b, entry_b) = texts
    pairs = [(entry_a, entry_b)] + [(n, n) for n in sorted(set(files_a) | set(files_b))
                                    if n not in (entry_a, entry_b)]
    out: list[str] = []
    for name_a, name_b in pairs:
        out += difflib.unified_diff(files_a.get(name_a, "").splitlines(keepends=True),
                                    files_b.get(name_b, "").splitlines(keepends=True),
                                    f"a/{name_a}", f"b/{name_b}")
    return "".join(line if line.endswith("\n") else line + "\n" for line in out)


def _outcomes(runs: Sequence[Run]) -> pd.DataFrame:
    """Each run's outcomes from its own compare() row: one table of both
    would turn an int into a float beside the other run's missing value."""
    first, second = (_outcome_row(run) for run in runs)
    names = dict.fromkeys([*first, *second])
    return _table((n, first.get(n, MISSING), second.get(n, MISSING)) for n in names)


def _outcome_row(run: Run) -> dict[str, Any]:
    from ..analysis.reports import OUTCOMES, compare
    table = compare([run], sort="run_id")
    config = set(table.attrs.get("config_columns", ()))
    names = ["status"] + [c for c in table.columns if c not in config and (
                          c in OUTCOMES or c.startswith(("final_", "best_"))
                          or (c.endswith("_done") and c[:-len("_done")] in OUTCOMES))]
    return {n: _plain(table[n].tolist()[0]) for n in names}


def _plain(value: Any) -> Any:
    """numpy scalars and NaN as JSON-ready Python values."""
    if hasattr(value, "item"):
        value = value.item()
    return None if isinstance(value, float) and value != value else value


def to_json(result: Mapping[str, Any]) -> str:
    """``diff()``'s result as JSON text (tables as lists of ``{name, a, b}``)."""
    return json.dumps({k: v.to_dict("records") if hasattr(v, "to_dict") else v
                       for k, v in result.items()}, indent=2, default=str)


def format_diff(result: Mapping[str, Any]) -> str:
    """``diff()``'s result as text for the terminal."""
    from ..analysis.reports import format_table
    lines = [f"a: {result['a']}", f"b: {result['b']}"]
    experiment = result["experiment"]
    if not experiment["same"]:
        lines.append(f"different experiments: a is {experiment['a']}, b is {experiment['b']}")
    for section in SECTIONS:
        value = result[section]
        if section == "source":
            lines += ["", "source:", value.rstrip("\n") if value else "  (same code)"]
            continue
        if section != "git" and section != "outcomes" and value.empty:
            lines += ["", f"{section}: same"]
            continue
        shown = value.map(_shown)
        lines += ["", f"{section}:", format_table(shown)]
    return "\n".join(lines)


def _shown(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return "-" if value is None else value
