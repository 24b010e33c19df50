"""Commands over many runs: ``runs``, ``show``, ``tag``, ``note``, ``rm``, ``gc``,
``diff``, ``rerun`` (the logic is in mindexp.manage)."""
import argparse
import os
import sys

from .. import layout
from ..errors import MindexpError
from ._args import add_verbose, positive_int
from ._console import EXIT_FAILED, EXIT_OK, train_and_report


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add runs, show, tag, note, rm, gc, diff and rerun, each bound to its handler."""
    _add_listing_commands(subparsers)
    _add_labelling_commands(subparsers)
    _add_removal_commands(subparsers)
    _add_comparison_commands(subparsers)


def _add_listing_commands(sub):
    runs = sub.add_parser("runs", help="list runs; filter with --status/--tag/--since/--where")
    runs.add_argument("paths", nargs="*", metavar="DIR", help="folders of runs (default: outputs/)")
    _add_filter_args(runs)
    runs.add_argument("--sort", metavar="COL", help="sort by a column; --sort=-COL: descending "
                      "(default: newest first)")
    runs.add_argument("--limit", type=positive_int, metavar="N", help="show the first N runs")
    runs.add_argument("--all", action="store_true",
                      help="every run, also on a terminal (where one screen is shown by "
                           "default; a pipe always gets every run)")
    runs.add_argument("--wide", action="store_true", help="do not cut wide values; show notes")
    runs.add_argument("--rebuild", action="store_true",
                      help="scan the runs again into the run catalog (it is kept current "
                           "by itself; for a run record edited by hand)")
    runs.add_argument("--catalog", metavar="URL",
                      help="a PostgreSQL catalog shared by several machines "
                           "(default: $MINDEXP_CATALOG, else SQLite in the output root)")
    form = runs.add_mutually_exclusive_group()
    form.add_argument("--csv", action="store_true", help="every column as CSV on stdout")
    form.add_argument("--json", action="store_true", help="every column as JSON on stdout")
    form.add_argument("--count", action="store_true",
                      help="how many runs of each status would be listed (unreadable "
                           "folders on a line of their own)")
    runs.set_defaults(handler=_list_runs)
    show = sub.add_parser("show", help="everything about one run")
    show.add_argument("run", metavar="RUN", help="a run directory, or a run id below --out")
    show.add_argument("--out", default="outputs", help="where run ids are looked up")
    show.set_defaults(handler=_show_run)


def _add_labelling_commands(sub):
    tag = sub.add_parser("tag", help="add (+TAG) and remove (-TAG) tags of a run")
    tag.add_argument("run", metavar="RUN", help="a run directory, or a run id below outputs/")
    # REMAINDER: "-x" is a tag to remove, not an option
    tag.add_argument("changes", nargs=argparse.REMAINDER, metavar="+TAG|-TAG")
    tag.set_defaults(handler=_tag_run)
    note = sub.add_parser("note", help="set the note of a run (\"\" removes it)")
    note.add_argument("run", metavar="RUN", help="a run directory, or a run id below outputs/")
    note.add_argument("text", help="the note")
    note.set_defaults(handler=_note_run)


def _add_removal_commands(sub):
    rm = sub.add_parser("rm", help="remove runs, or a sweep/study folder with its runs")
    rm.add_argument("targets", nargs="+", metavar="RUN_OR_FOLDER")
    _add_removal_args(rm)
    rm.set_defaults(handler=_remove_targets)
    gc = sub.add_parser("gc", help="remove the runs that match (default: the unfinished ones)")
    gc.add_argument("paths", nargs="*", metavar="DIR", help="folders of runs (default: outputs/)")
    _add_filter_args(gc, statuses="failed,interrupted,diverged,pruned,running")
    gc.add_argument("--older", metavar="AGE|DATE", help="ended before: 7d, 12h, or a date")
    gc.add_argument("--keep-best", type=positive_int, metavar="K",
                    help="keep the K best runs of each experiment by --by")
    gc.add_argument("--by", default="final_loss", metavar="COL",
                    help="column --keep-best ranks by (default: final_loss)")
    _add_removal_args(gc)
    gc.set_defaults(handler=_collect_garbage)


def _add_comparison_commands(sub):
    diff = sub.add_parser("diff", help="what differs between two runs: config, code, git, "
                                 "packages, outcomes")
    diff.add_argument("run_a")
    diff.add_argument("run_b")
    diff.add_argument("--json", action="store_true", help="print JSON for scripts")
    diff.set_defaults(handler=_diff_runs)
    rerun = sub.add_parser("rerun", help="a new run with a run's config, from its captured "
                                  "code")
    rerun.add_argument("run_dir", help="outputs/<experiment>/<run_id>")
    rerun.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                       help="change a config field of the rerun")
    rerun.add_argument("--out", help="output root (default: the original run's)")
    rerun.add_argument("--current-code", action="store_true",
                       help="use the experiment's file as it is now, not the captured copy")
    rerun.add_argument("--name", help="label that goes into the run id")
    rerun.add_argument("--quiet", action="store_true", help="no progress bar")
    add_verbose(rerun)
    rerun.set_defaults(handler=_rerun_run)


def _add_filter_args(p, statuses=None):
    p.add_argument("--experiment", metavar="NAME[,NAME]", help="only these experiments")
    p.add_argument("--status", default=statuses, metavar="S[,S]",
                   help="only these statuses" + (f" (default: {statuses})" if statuses else ""))
    p.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="only runs with this tag (repeatable: all of them)")
    p.add_argument("--since", metavar="AGE|DATE", help="started since: 2h, 3d, or a date")
    p.add_argument("--where", metavar="EXPR",
                   help="condition over config fields and outcomes, e.g. \"lr > 0.01 and "
                        "optimizer == 'adam'\" (never run as code: see docs/many-runs.md)")


def _add_removal_args(p):
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
    p.add_argument("--out", default="outputs", help="where run ids are looked up")
    p.add_argument("--catalog", metavar="URL",
                   help="a PostgreSQL catalog shared by several machines (default: "
                        "$MINDEXP_CATALOG): says on which host a run of another machine lives")


def _list_runs(args: argparse.Namespace) -> int:
    from ..manage.filters import Filters
    filters = Filters(args.experiment, args.status, args.tag, args.since, where=args.where)
    paths = args.paths or ["outputs"]
    if args.count:
        return _count_runs(paths, filters, args)
    screen = None if args.limit or args.all or args.csv or args.json else _screen_rows()
    if not (args.csv or args.json) and len(paths) == 1:
        from ..manage.queried import listed
        blocks = listed(paths[0], filters, args.sort, args.limit, args.wide, args.catalog,
                        args.rebuild, screen=screen)
        if blocks is not None:
            for block in blocks:   # a piped listing comes a page at a time
                sys.stdout.write(block)
            return EXIT_OK
    elif args.rebuild:
        from ..rundir.store import open_store
        for path in paths:
            if os.path.isdir(path):
                open_store(path, url=args.catalog, rebuild=True).close()
    from ..manage import runs as r
    table = r.order(r.select(r.runs_table(args.paths or ["outputs"]), filters), args.sort,
                    args.limit)
    if args.csv or args.json:
        text = table.to_csv(index=False) if args.csv else table.to_json(orient="records",
                                                                        indent=1) + "\n"
        print(_csv_safe(text) if args.csv else _for_stdout(text), end="")
        return EXIT_OK
    more = len(table) - screen if screen and len(table) > screen else 0
    table = table.head(len(table) - more)
    extra = r.named_columns(table, args.where, (args.sort or "").lstrip("-"))
    shown = r.display(table, extra, wide=args.wide)
    print(r.format_fitted(shown, width=None if args.wide else 100) if len(table)
          else "no runs match")
    if more:
        from ..manage.table_text import more_line
        print(more_line(more))
    return EXIT_OK


def _count_runs(paths, filters, args):
    """Print the runs of each status the listing would show, then the total."""
    from ..errors import ConfigError
    from ..manage.count import counts
    for option in ("sort", "limit"):
        if getattr(args, option):
            raise ConfigError(f"--count counts every matching run: it takes --experiment, "
                              f"--status, --tag, --since and --where, not --{option}. "
                              f"Received: --{option} {getattr(args, option)}", field=option)
    found = counts(paths, filters, args.catalog, args.rebuild)
    width = max(len(status) for status in [*found, "total"])
    for status, number in found.items():
        print(f"{status:<{width}}  {number:>7}")
    print(f"{'total':<{width}}  {sum(found.values()):>7}")
    return EXIT_OK


def _screen_rows():
    """How many runs fit on the terminal standard output is (one screen, the
    table's header and the "more" line aside), or None when it is not a
    terminal: a pipe or a file gets every run."""
    isatty = getattr(sys.stdout, "isatty", None)
    if not (isatty and isatty()):
        return None
    import shutil
    return max(10, shutil.get_terminal_size().lines - 3)


def _for_stdout(text):
    """``text`` exact into a pipe or a file; its control characters escaped on a
    terminal, where a note's ESC or BEL would act (see :mod:`..manage.terminal`)."""
    from ..manage.terminal import visible_lines
    isatty = getattr(sys.stdout, "isatty", None)
    return visible_lines(text) if isatty and isatty() else text


def _csv_safe(text):
    """CSV text with its control characters escaped (``\\x1b``) wherever it goes:
    a file or a pipe is read on a terminal later (``cat``, ``less -r``); tabs
    and line ends stay (a cell's line end is quoted, as CSV has it)."""
    from ..manage.terminal import visible_lines
    return visible_lines(text)


def _show_run(args: argparse.Namespace) -> int:
    from ..manage.show import find_run, show_text
    print(show_text(find_run(args.run, args.out)), end="")
    return EXIT_OK


def _tag_run(args: argparse.Namespace) -> int:
    from ..manage.show import find_run
    from ..manage.tags import change_tags, parse_changes
    add, remove = parse_changes(args.changes)
    run = find_run(args.run)
    tags = change_tags(run.dir, add, remove)
    print(f"{run.run_id}: tags {', '.join(tags) or '(none)'}")
    return EXIT_OK


def _note_run(args: argparse.Namespace) -> int:
    from ..manage.show import find_run
    from ..manage.tags import set_note
    run = find_run(args.run)
    note = set_note(run.dir, args.text)
    print(f"{run.run_id}: note {note!r}" if note else f"{run.run_id}: note removed")
    return EXIT_OK


def _remove_targets(args: argparse.Namespace) -> int:
    from ..errors import RunDirError
    from ..manage.cleanup import plan_rm
    from ..rundir.leftovers import remove_dead_removals
    try:
        targets = plan_rm(args.targets, args.out)
    except RunDirError:
        _refuse_remote(args.targets, args.catalog)
        raise
    code = _remove(targets, args)
    left = remove_dead_removals([os.path.dirname(t.path) for t in targets], args.dry_run)
    _say_leftovers(left, args.dry_run)
    return code


def _say_unstarted(found, dry_run):
    for path in found:
        print(f"{'would remove' if dry_run else 'removed'} {path}: a run killed while it "
              f"started (no {layout.RUN_JSON}, no process holds it)")


def _say_leftovers(left, dry_run):
    if left:
        print(f"{'would remove' if dry_run else 'removed'} {len(left)} temporary file(s) or "
              "folder(s) left by a killed writer or removal")


def _refuse_remote(specs, url):
    """MindexpError saying where a run lives when a shared catalog has it on another host."""
    from ..rundir.store import elsewhere
    from ..secrets import masked
    for spec in specs:
        if os.path.exists(spec):
            continue
        found = elsewhere(spec, url)
        if found:
            places = "; ".join(f"on host {host} at {masked(path)}" for host, path in found)
            raise MindexpError(f"run {spec} lives {places}: its files are there, not on this "
                               f"machine; remove it there (mindexp rm on that host). Nothing "
                               f"was removed.")


def _collect_garbage(args: argparse.Namespace) -> int:
    from ..manage import runs as r
    from ..manage.cleanup import plan_gc, remove_leftovers, remove_unstarted_runs
    from ..manage.filters import Filters
    filters = Filters(args.experiment, args.status, args.tag, args.since, args.older,
                      args.where)
    table = r.select(r.runs_table(args.paths or ["outputs"]), filters)
    if args.keep_best and args.by not in table.columns:
        table = r.with_column(table, args.by, args.paths or ["outputs"])
    targets, kept = plan_gc(table, args.keep_best, args.by)
    for target, why in kept:
        print(f"kept {target.path}: {why}", file=sys.stderr)
    code = _remove(targets, args)
    left = remove_leftovers(args.paths or ["outputs"], dry_run=args.dry_run)
    _say_leftovers(left, args.dry_run)
    _say_unstarted(remove_unstarted_runs(args.paths or ["outputs"], dry_run=args.dry_run),
                   args.dry_run)
    return code


def _remove(targets, args):
    from ..manage.cleanup import describe, remove
    if not targets:
        print("nothing to remove")
        return EXIT_OK
    lines, total = describe(targets)
    print("\n".join(lines))
    if args.dry_run:
        print(f"dry run: would remove {total}; nothing removed")
        return EXIT_OK
    if not args.yes and not _confirmed(f"remove {total}?"):
        print("nothing removed")
        return EXIT_OK
    failed = []
    removed = remove(targets, failed)
    for path, why in failed:
        print(f"mindexp: error: could not remove {path}: {why}", file=sys.stderr)
    if failed:
        print(f"removed {len(removed)} of {len(targets)}")
        return EXIT_FAILED
    print(f"removed {total}" if len(removed) == len(targets) else
          f"removed {len(removed)} of {len(targets)} (the others were gone already)")
    return EXIT_OK


def _confirmed(question):
    if sys.stdin is None or not sys.stdin.isatty():
        raise MindexpError(f"{question[:-1]} needs a confirmation, and standard input is not a "
                           "terminal; pass --yes to remove without asking. Nothing was removed.")
    print(f"{question} [y/N] ", end="", flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _diff_runs(args: argparse.Namespace) -> int:
    from ..manage.diff import diff, format_diff, to_json
    result = diff(args.run_a, args.run_b)
    print(to_json(result) if args.json else format_diff(result))
    return EXIT_OK


def _rerun_run(args: argparse.Namespace) -> int:
    from ..define.config import parse_assignments
    from ..manage.rerun import prepare_rerun, train_rerun
    request = prepare_rerun(args.run_dir, parse_assignments(args.set), args.current_code)
    if args.current_code and request.rerun_of["config_set_unknown"]:
        print("mindexp: note: the run does not record which config fields were set (made "
              "before mindexp recorded it): every field keeps its value", file=sys.stderr)
    changes = request.rerun_of["environment_differs"]
    if changes:
        print(f"mindexp: note: the environment differs from the one captured: "
              f"{'; '.join(changes)}", file=sys.stderr)
    changed = request.rerun_of["modules_changed"]
    if changed:
        what = ("the current code of these modules differs from the code the run captured"
                if args.current_code else "these modules were not captured (see the run "
                "record's provenance) and load from their current code, which differs from the "
                "run's")
        print(f"mindexp: note: {what}: {'; '.join(changed)}", file=sys.stderr)
    out = os.path.abspath(args.out) if args.out else None
    return train_and_report(lambda: train_rerun(request, out, args.name, args.quiet),
                            args.verbose)
