"""``mindexp show RUN``: everything about one run on one screen, as text."""
import ast
import os
import re

from ..callbacks import schema
from .. import layout
from ..errors import RunDirError
from ..analysis.cells import format_value
from ..analysis.reports import eval_name, find_run_dirs
from ..rundir.summary import run_direction
from ..rundir.run import Run
from ..rundir.store import open_store
from ..rundir.run_lock import holder
from .terminal import visible, visible_lines


def find_run(spec, root="outputs"):
    """A Run from a run directory path, or a run id (or a unique part of one) below ``root``."""
    if os.path.isdir(spec):
        return Run(spec)
    if not os.path.isdir(root):
        raise RunDirError(f"{spec} is neither a run directory nor a run id found below {root}. "
                          f"Received: {spec!r}")
    with open_store(root) as store:   # one query, not a walk of the root
        found = store.find(spec, os.path.abspath(root))
    if not found:
        find_run_dirs(root)   # a root holding no runs at all says so
    exact = [d for d in found if os.path.basename(d) == spec]
    if len(exact) == 1 or len(found) == 1:
        return Run((exact or found)[0])
    if not found:
        raise RunDirError(f"no run directory {spec} and no run id containing it below {root}. "
                          f"Received: {spec!r}")
    names = ", ".join(os.path.basename(d) for d in found[:5])
    raise RunDirError(f"{spec!r} matches {len(found)} runs below {root} ({names}"
                      f"{', ...' if len(found) > 5 else ''}); give more of the run id. "
                      f"Received: {spec!r}")


def show_text(run):
    """The lines of ``mindexp show``: status and why, experiment, tags, config (fields
    that differ from the defaults marked ``*``), times, training values, eval metrics,
    parameters vs targets, checkpoints, resumes, error, files."""
    sections = (_head, _config, _data, _times, _training, _system, _eval, _params, _checkpoints,
                _resumes,
                _error, _files)
    lines = []
    for section in sections:
        part = section(run)
        if part:
            lines += part + [""]
    # any other recorded text (an error, a config value) is shown inert too
    return visible_lines("\n".join(lines).rstrip()) + "\n"


def _head(run):
    meta = run.meta
    status = meta.get("status")
    if status == "running":  # live while a process holds its lock (rundir.run_lock)
        live = holder(run.dir)
        status += f" ({live})" if live else \
            " (process gone: no process holds its lock; the run stopped without ending)"
    why = meta.get("stop_reason") or (meta.get("error") if meta.get("status") != "completed"
                                      else None)
    lines = [f"run        {run.run_id}", f"directory  {run.dir}", f"status     {status}"]
    if why:
        lines.append(f"why        {why.splitlines()[0]}")
    lines += [f"experiment {meta.get('experiment')}  ({meta.get('entry')})"]
    if meta.get("tags"):
        lines.append(f"tags       {visible(', '.join(meta['tags']))}")
    if meta.get("note"):
        lines.append(f"note       {visible(meta['note'])}")
    return lines


def _config(run):
    from ..define.entry import is_script_entry
    defaults = experiment_defaults(run.meta.get("entry"))
    head = ("config (* differs from the experiment's default)" if defaults else
            "config (the script's own, given to mindexp.track)"
            if is_script_entry(run.meta.get("entry")) else
            "config (the experiment's defaults are unknown)")
    cells = []
    for name, value in run.config.items():
        mark = "*" if defaults and name in defaults and not _same(defaults[name], value) else " "
        cells.append((mark, name, format_value(value)))
    return [head] + _two_columns(cells)


def _data(run):
    """The fingerprint of the data each split trained on (provenance.data)."""
    from ..provenance import files as F
    from ..provenance.data import summary
    lines = [f"  {name}  {text}" for name, text in
             summary(F.provenance_of(run.meta).get(F.DATA_KEY)).items()]
    return ["data"] + lines if lines else []


def _two_columns(cells, width=100):
    """``mark name value`` cells in two columns when they fit in ``width``, else one."""
    nw = max((len(n) for _, n, _ in cells), default=0)
    texts = [f" {m} {n:<{nw}}  {v}" for m, n, v in cells]
    half = (len(texts) + 1) // 2
    cw = max((len(t) for t in texts[:half]), default=0) + 2
    if cw + max((len(t) for t in texts[half:]), default=0) > width:
        return texts
    return [(left.ljust(cw) + right).rstrip()
            for left, right in zip(texts[:half], texts[half:] + [""])]


def _same(default, value):
    norm = (lambda v: list(v) if isinstance(v, (list, tuple)) else v)
    return norm(default) == norm(value)


def experiment_defaults(entry):
    """``{field: default}`` of the experiment behind ``entry``, read from its source
    without importing it (no MindSpore); None when the source cannot be found."""
    from ..define.config import Config, field_defaults
    from .experiments import config_body
    module, _, class_name = (entry or "").rpartition(":")
    own = config_body(module, class_name)
    if own is None:
        return None
    return {**{name: default for name, _, default in field_defaults(Config)},
            **dict(_literal_fields(own))}


def _literal_fields(body):
    for item in body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value:
            try:
                yield item.target.id, ast.literal_eval(item.value)
            except ValueError:
                continue  # a field(...) call: its default is not a literal


def _times(run):
    meta = run.meta
    rate = meta.get("steps_per_s")
    lines = [f"started    {meta.get('started_at')}",
             f"ended      {meta.get('ended_at') or '-'}"]
    took = meta.get("train_time_s")
    lines.append(f"steps      {meta.get('steps')} in {meta.get('epochs')} epochs"
                 + (f", {took:.2f} s training" if took else "")
                 + (f", {rate:g} steps/s" if rate else ""))
    return lines


def _training(run):
    lines = []
    for table in (run.loss, run.grad_norm):
        for column in table.columns:
            if column in (schema.Col.STEP, schema.Col.EPOCH, schema.Col.TIME_S):
                continue
            values = table[column].astype(float)
            if values.notna().any():
                low, high = values.idxmin(), values.idxmax()
                lines.append(f"  {column:<12} final {values.iloc[-1]:.6g}  min {values[low]:.6g}"
                             f" (step {table[schema.Col.STEP][low]})  max {values[high]:.6g}"
                             f" (step {table[schema.Col.STEP][high]})")
    return ["training values"] + lines if lines else []


def _system(run):
    """Peak RSS and mean CPU of the process, from system.csv (and, data parallel,
    one line per node's or rank's system.rankN.csv)."""
    from ..rundir.summary import system_summary
    tables = run.system_by_rank
    found = system_summary(*tables.values())
    if not found:
        return []
    samples = sum(len(t) for t in tables.values())
    if len(tables) == 1:
        return [f"system ({samples} samples)", "  " + _system_line(found)]
    return [f"system ({samples} samples, ranks {', '.join(map(str, tables))})",
            "  all " + _system_line(found)] + [
        f"  rank {rank} " + _system_line(system_summary(t)) for rank, t in tables.items()]


def _system_line(found):
    return (f"peak RSS {found.get('peak_rss_mb', float('nan')):.1f} MB"
            + (f"  mean CPU {found['mean_cpu_percent']:.1f} %" if "mean_cpu_percent" in found
               else "")
            + (f"  peak device memory {found['peak_device_memory_mb']:.1f} MB"
               if "peak_device_memory_mb" in found else ""))


def _eval(run):
    lines = eval_lines(run)
    return [f"eval metrics ({len(run.eval)} evaluations)"] + lines if lines else []


def eval_lines(run):
    """One line per eval.csv metric: ``eval_<metric>``, its last and best
    value, each with its epoch (the end of ``mindexp run`` prints them too); no
    best for a metric whose name does not say whether higher is better."""
    import numpy as np
    table = run.read_arrays(schema.EVAL.name)  # (not pandas: the end of every run prints these)
    epochs = table.get(schema.Col.EPOCH)
    lines = []
    for metric, column in table.items():
        if metric in (schema.Col.EPOCH, schema.Col.STEP):
            continue
        values = np.asarray(column, dtype=float)
        if np.isnan(values).all():
            continue
        line = f"  eval_{metric:<12} last {values[-1]:.6g} (epoch {epochs[-1]})"
        direction = run_direction(run.config, eval_name(metric))
        if direction is not None:
            best = np.nanargmin(values) if direction == "min" else np.nanargmax(values)
            line += f"  best {values[best]:.6g} (epoch {epochs[best]})"
        lines.append(line)
    return lines


def _params(run):
    finals = dict(run.meta.get("params") or {})
    targets = run.targets
    if not finals and not targets:
        return []
    lines = ["parameters (final value, target, |error|)"]
    for name in dict.fromkeys(list(finals) + list(targets)):
        value, target = finals.get(name), targets.get(name)
        text = f"  {name:<16} {value:.6g}" if isinstance(value, (int, float)) else f"  {name:<16} -"
        if isinstance(target, (int, float)):
            text += f"  target {target:g}"
            if isinstance(value, (int, float)):
                text += f"  error {abs(value - target):.3g}"
        lines.append(text)
    return lines


def _checkpoints(run):
    try:
        table = run.read("checkpoints")
    except RunDirError:
        return [f"checkpoints: {schema.CHECKPOINTS.filename} is unreadable"]
    if not len(table):
        return []
    monitor = run.config.get("checkpoint_monitor") or "score"
    lines = [f"checkpoints ({len(table)} saved; files on disk marked +; loss: the training "
             f"loss at the step; {monitor}: the value a best checkpoint was kept for)"
             if (table.get(schema.Col.KIND) == "best").any() else
             f"checkpoints ({len(table)} saved; files on disk marked +; loss: the training "
             "loss at the step)"]
    for _, row in table.iterrows():
        lines.append(_checkpoint_line(run, row, monitor))
    return lines


def _checkpoint_line(run, row, monitor):
    """One checkpoint: kind, step, epoch, its training loss, and for a best one
    the monitored value it was kept for (two columns: one meaning each)."""
    kind = row.get(schema.Col.KIND) if isinstance(row.get(schema.Col.KIND), str) else "last"
    name = os.path.basename(str(row[schema.Col.FILE]))
    there = "+" if os.path.isfile(os.path.join(run.dir, schema.CHECKPOINT_DIR, name)) else " "
    step, epoch = row[schema.Col.STEP], row[schema.Col.EPOCH]
    text = f" {there} {kind:<5} step {step:<7} epoch {epoch:<4} loss {_num(row.get(schema.Col.LOSS))}"
    score = row.get(schema.Col.SCORE)
    if kind == "best" and score is not None and score == score:
        text += f"  {monitor} {_num(score)}"
    return f"{text}  {name}"


def _resumes(run):
    resumes = run.meta.get("resumes") or []
    return [f"resumed {len(resumes)} time(s)"] + [
        f"  at {r.get('at')} from step {r.get('step')} ({r.get('checkpoint')}), "
        f"was {r.get('previous_status')}" for r in resumes] if resumes else []


def _error(run):
    error = run.meta.get("error")
    if not error:
        return []
    lines = ["error", f"  {error.splitlines()[0]}"]
    where = _traceback_location(run.dir)
    if where:
        lines.append(f"  at {where}")
    return lines


def _traceback_location(run_dir):
    """The innermost ``File "...", line N, in f`` of error.txt, when the run wrote one."""
    try:
        with schema.open_file(os.path.join(run_dir, layout.ERROR_FILE), "r", encoding="utf-8",
                              errors="replace") as f:
            frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', f.read())
    except OSError:
        return None
    if not frames:
        return None
    path, line, func = frames[-1]
    return f"{path}:{line} in {func}"


def _files(run):
    lines = ["files"]
    for name in sorted(os.listdir(run.dir)):
        path = os.path.join(run.dir, name)
        if name.startswith("."):
            continue
        if os.path.islink(path):  # never followed: it may point anywhere, or nowhere
            lines.append(f"  {name + ' (a link)':<22} -")
            continue
        size = disk_size(path)
        lines.append(f"  {name + ('/' if os.path.isdir(path) else ''):<22} {human_size(size)}")
    return lines


def disk_size(path):
    """Bytes of a file, or of the files below a folder (links below count as
    themselves); 0 for a link (removing it frees nothing of its target)."""
    if os.path.islink(path):
        return 0
    if not os.path.isdir(path):
        return _lsize(path)
    return sum(_lsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def _lsize(path):
    try:
        return os.lstat(path).st_size
    except OSError:  # removed meanwhile
        return 0


def human_size(size):
    """``512 B``, ``12.3 KB``, ``4.5 MB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _num(value):
    try:
        return f"{float(value):.6g}"
    except (TypeError, ValueError):
        return "-"

