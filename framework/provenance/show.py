"""The provenance block of a run as text lines (for ``mindexp show``)."""
import os

from ..rundir.meta import read_meta
from . import files as F


def provenance_lines(run_dir):
    """Lines describing what produced ``run_dir``: code, git, command, host,
    packages, environment variables, and the run it reran (if any)."""
    meta = read_meta(run_dir)
    block = F.provenance_of(meta)
    if not block:
        return ["provenance: not recorded (run made before provenance capture)"]
    source, git = block.get("source") or {}, block.get("git") or {}
    lines = ["provenance:"]
    if source:
        lines.append(f"  code:     {source.get('dir')}/{source.get('entry_file')} "
                     f"(class {source.get('class')}; copied from {source.get('origin')})")
    else:
        lines.append(f"  code:     not captured ({block.get('source_missing') or 'unknown'})")
    lines.append("  git:      " + _git_text(git))
    lines.append(f"  command:  {' '.join(block.get('command') or [])}  (in {block.get('cwd')})")
    lines.append(f"  host:     {block.get('host')}")
    env = block.get("env") or {}
    lines.append("  env:      " + (", ".join(f"{k}={v}" for k, v in env.items()) or "(none set)"))
    count = len(F.read_environment(os.path.join(os.fspath(run_dir), block["environment"]))) \
        if block.get("environment") else 0
    lines.append(f"  packages: {count} in {block.get('environment')}")
    rerun_of = meta.get(F.RERUN_KEY)
    if rerun_of:
        lines.append(f"  rerun of: {rerun_of.get('run_id')} ({rerun_of.get('code')} code)")
    for number, resume in enumerate(meta.get("resumes") or [], 1):
        again = resume.get(F.META_KEY) or {}
        lines.append(f"  resume {number}: git {_git_text(again.get('git') or {})}")
    return lines


def _git_text(git):
    if not git.get("root") and not git.get("commit"):
        return "not a git repository (or no git)"
    dirty = {True: "dirty", False: "clean", None: "state unknown"}[git.get("dirty")]
    diff = f", uncommitted diff in {git['diff']}" if git.get("diff") else ""
    cut = " (truncated)" if git.get("diff_truncated") else ""
    return f"{git.get('commit') or '(no commit)'} on {git.get('branch') or '(detached)'}, " \
           f"{dirty}{diff}{cut}"
