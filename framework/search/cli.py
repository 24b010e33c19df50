"""``mindexp tune``: the command line's side of a study (all its printing is here)."""
import os

from ..errors import ConfigError
from .results import best, frame, open_existing, save_plots

EXIT_OK, EXIT_FAILED = 0, 1


def run_tune(args):
    """Run (or continue) a study, or ``--show`` one; returns the exit status."""
    if args.show:
        study = open_existing(args.study, args.out, args.storage)
        print_results(study)
        return EXIT_OK
    if not args.experiment:
        raise ConfigError("tune needs an EXPERIMENT (or --show --study NAME). Received: none")
    from ..define.catalog import resolve_spec
    from ..define.config import load_toml, parse_assignments
    from .driver import make_spec, run_workers, start
    cls, entry = resolve_spec(args.experiment)
    base = {**(load_toml(args.config) if args.config else {}), **parse_assignments(args.set)}
    spec = make_spec(cls, entry, args.param, args.objective, args.trials, args.direction,
                     args.sampler, args.pruner, args.seed, args.timeout, args.study,
                     args.storage, base, args.out)
    study = start(spec)
    left = _left(study, spec.trials)
    how = f"{spec.direction}, from its name; --direction to choose" \
        if spec.direction_inferred else spec.direction
    print(f"study {spec.study}: {spec.objective} ({how}) of {spec.experiment}, "
          f"{left} of {spec.trials} trials to run, {args.workers} worker(s)\n"
          f"storage: {spec.storage}\nfolder: {spec.study_dir}", flush=True)
    signum = run_workers(spec, args.workers, on_line=_progress) if left else None
    save_plots(study, spec.study_dir)
    print_results(study)
    if signum is not None:
        print(f"mindexp: study {spec.study} interrupted; run the same command again to "
              "continue it", file=__import__("sys").stderr)
        return 128 + signum
    return EXIT_OK if best(study) is not None else EXIT_FAILED


def _left(study, trials):
    from .study import remaining
    return remaining(study, trials)


def _progress(event):
    """One line per finished trial; a failed one with its reason."""
    value = "" if event.get("value") is None else f"  value {event['value']:.6g}"
    params = ", ".join(f"{k}={_fmt(v)}" for k, v in (event.get("params") or {}).items())
    reason = f": {event['error']}" if event.get("state") == "failed" and event.get("error") else ""
    print(f"trial {event['trial']}: {event['state']}{value}  ({params}){reason}", flush=True)


def print_results(study):
    """The best trial (value, parameters, run directory) and the table of trials."""
    from ..analysis.reports import format_table
    table = frame(study)
    found = best(study)
    print()
    if found is None:
        print(f"study {study.study_name}: no complete trial yet")
    else:
        params = ", ".join(f"{k}={_fmt(v)}" for k, v in found.params.items())
        print(f"best trial {found.number}: value {found.value:.6g}  ({params})")
        print(f"run directory: {found.user_attrs.get('run_dir')}")
    if len(table):
        shown = table.drop(columns=["run_dir", "error"])
        shown["run_id"] = [os.path.basename(d) if isinstance(d, str) else None
                           for d in table["run_dir"]]  # pandas makes a missing one NaN
        print()
        print(format_table(shown))
    folder = _plots_folder(study)
    if folder:
        print(f"plots: {folder}")


def _plots_folder(study):
    folder = (study.user_attrs.get("mindexp") or {}).get("study_dir")
    return folder if folder and os.path.isfile(os.path.join(folder, "optimization_history.png")) \
        else None


def _fmt(value):
    return f"{value:.4g}" if isinstance(value, float) else str(value)
