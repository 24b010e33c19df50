"""Commands that read runs: ``compare``, ``plot``, ``report``, ``serve``, ``tensorboard``
(the logic is in mindexp.analysis)."""
import argparse
import os
import sys

from ..callbacks import schema
from .. import layout
from ..errors import MindexpError
from ._args import port, positive_int
from ._console import EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add compare, plot, report, serve and tensorboard, each bound to its handler."""
    cmp = subparsers.add_parser("compare", help="compare runs as a table; --csv/--html to save it")
    cmp.add_argument("paths", nargs="+", metavar="PATH", help="run directories or folders of runs")
    cmp.add_argument("--sort", default="final_loss", metavar="COL",
                     help="column to sort by; --sort=-COL for descending (default: final_loss)")
    cmp.add_argument("--csv", metavar="FILE", help="write the full table as CSV")
    cmp.add_argument("--html", metavar="FILE",
                     help="write the interactive offline HTML report (needs mindexp[report])")
    _add_group_args(cmp, "one row per group of runs: n, mean and 95 %% interval of each outcome")
    cmp.add_argument("--against", action="append", default=[], metavar="VALUE",
                     help="the baseline group (FIELD=VALUE, repeatable, when grouping by "
                          "several fields): each group's difference to it, a t-test (paired "
                          "by seed when the seeds match, else Welch's) and Holm's correction")
    cmp.set_defaults(handler=_compare_runs)
    plot = subparsers.add_parser("plot", help="draw the plots of runs (and overlays of several)")
    plot.add_argument("paths", nargs="+", metavar="RUN_OR_FOLDER")
    plot.add_argument("--out", metavar="DIR", help="write here instead of each run's plots/ "
                      "(default for overlays: plots/ in the runs' common folder)")
    _add_group_args(plot, "loss, parameter and eval plots with one mean curve per group and "
                    "its 95 %% interval shaded")
    plot.set_defaults(handler=_plot_runs)
    _add_view_commands(subparsers)


def _add_group_args(parser, what):
    parser.add_argument("--group-by", action="append", metavar="FIELD",
                        help=f"config field(s) whose values make a group, or auto (those that "
                             f"differ, except seed); repeatable or comma-separated: {what}")


def _group_by(args):
    """``--group-by`` as compare()'s ``group_by`` (None without it)."""
    if not args.group_by:
        return None
    names = [n.strip() for item in args.group_by for n in item.split(",") if n.strip()]
    return "auto" if names == ["auto"] else names


def _add_view_commands(sub):
    report = sub.add_parser("report", help="write the interactive offline HTML report of runs")
    report.add_argument("paths", nargs="+", metavar="PATH",
                        help="run directories or folders of runs")
    report.add_argument("--out", metavar="FILE",
                        help="the HTML file (default: report.html in the first folder given)")
    report.set_defaults(handler=_write_report)
    serve = sub.add_parser("serve", help="live local dashboard of runs (read-only)")
    serve.add_argument("paths", nargs="*", default=["outputs"], metavar="DIR",
                       help="folders of runs to serve (default: outputs/)")
    serve.add_argument("--port", type=port, default=8765, help="TCP port; 0 picks a free one "
                       "(default: 8765)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default: 127.0.0.1, this machine only)")
    serve.add_argument("--cache-mb", type=positive_int, default=256, metavar="MB",
                       help="memory for drawn runs kept between polls; the least recently "
                       "drawn go first (default: 256)")
    serve.set_defaults(handler=_serve_dashboard)
    tb = sub.add_parser("tensorboard", help="write TensorBoard event files of runs "
                               "(needs mindexp[tensorboard])")
    tb.add_argument("paths", nargs="+", metavar="PATH", help="run directories or folders of runs")
    tb.add_argument("--out", metavar="DIR", help="write under DIR (default: tensorboard/ in "
                    "each run directory)")
    tb.add_argument("--hparams", metavar="FIELD,...", default="",
                    help="config fields the hparams table shows besides those that differ "
                         "across the runs (one run: those set away from the defaults)")
    tb.set_defaults(handler=_export_tensorboard)


def _compare_runs(args: argparse.Namespace) -> int:
    from ..analysis.reports import compare, display_table, format_table
    if args.against and not args.group_by:
        raise MindexpError(f"--against needs --group-by FIELD: the baseline is one of the "
                           f"groups. Received: --against {args.against[0]}")
    # one folder: through the run store, as compare() in Python (no log read per run)
    runs = args.paths[0] if len(args.paths) == 1 else args.paths
    if args.group_by:
        return _compare_groups(runs, args)
    table = compare(runs, sort=args.sort)
    files = _report_files(table, runs, args)  # all made before any is written
    print(format_table(display_table(table)))
    for path, text in files.items():
        _write_atomically(path, text)
        print(f"wrote {path}")
    return EXIT_OK


def _compare_groups(runs, args):
    """The grouped table, one line per group and outcome (``--csv``: the full table)."""
    from ..analysis.reports import compare
    from ._groups import against_value, group_lines
    group_by = _group_by(args)
    table = compare(runs, group_by=group_by)   # the group fields, for --against
    if args.against:
        table = compare(runs, group_by=group_by,
                        against=against_value(args.against, table.attrs["group_by"]))
    files = _report_files(table, runs, args)
    print("\n".join(group_lines(table)))
    for path, text in files.items():
        _write_atomically(path, text)
        print(f"wrote {path}")
    return EXIT_OK


def _report_files(table, runs, args):
    files = {}
    if args.csv:
        from ..analysis.reports import export_table
        files[_check_writable(args.csv)] = export_table(table).to_csv(index=False)
    if args.html:
        from ..analysis.reports import list_runs
        title = "mindexp comparison: " + ", ".join(args.paths)
        files[_check_writable(args.html)] = _render_report(list_runs(runs), title, args.html)
    return files


def _render_report(runs, title, out_path):
    from ..analysis.interactive import MissingExtraError, render_report
    try:
        return render_report(runs, title, skipped=runs.errors, out_path=out_path)
    except MissingExtraError as exc:
        raise MindexpError(str(exc)) from None


def _write_report(args: argparse.Namespace) -> int:
    from ..analysis.reports import list_runs
    runs = list_runs(args.paths)   # logs read for the drawn runs only
    out = args.out or os.path.join(_folder_of(args.paths[0]), "report.html")
    text = _render_report(runs, "mindexp report: " + ", ".join(args.paths), _check_writable(out))
    _write_atomically(out, text)
    print(f"wrote {out} ({len(runs)} runs)")
    return EXIT_OK


def _folder_of(path):
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def _serve_dashboard(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C or SIGTERM, then end the process at once: it never
    returns (bad input raises MindexpError before serving)."""
    from ..analysis.dashboard import exposure_warning, make_server, serve_until_stopped, url_of
    server = make_server(args.paths, host=args.host, port=args.port,
                         cache_bytes=args.cache_mb * 1024 * 1024)
    warning = exposure_warning(server)
    if warning:
        print(f"mindexp: {warning}", file=sys.stderr, flush=True)
    serve_until_stopped(server, ready=lambda: print(
        f"mindexp dashboard of {', '.join(args.paths)} at {url_of(server)} (Ctrl-C to stop)",
        flush=True))
    print("mindexp: dashboard stopped", flush=True)
    # The socket is closed. Request threads may still be loading a poll or feeding a
    # slow client, and pyarrow's CSV reader threads can hang the interpreter's exit
    # (apache/arrow#33975): nothing is left to write, so end here.
    sys.stderr.flush()
    os._exit(EXIT_OK)


def _export_tensorboard(args: argparse.Namespace) -> int:
    from ..analysis.tensorboard_export import export, view_command
    from ..analysis.reports import load_runs
    from ..manage.show import experiment_defaults
    runs = load_runs(args.paths)
    named = [n.strip() for n in args.hparams.split(",") if n.strip()]
    folders = []
    for run, folder in export(runs, out=args.out, hparams=named,
                              defaults_of=lambda r: experiment_defaults(r.meta.get("entry"))):
        print(f"{run.run_id}: {folder}")
        folders.append((run, folder))
    command = view_command(folders, args.out)
    print(f"view with: {command}" if command else "view with: tensorboard --logdir DIR, after "
          "exporting with --out DIR (a run's path holds a comma, which --logdir_spec cannot take)")
    return EXIT_OK


def _check_writable(path):
    """``path`` as given, once known to be writable (the message says "the report")."""
    from ..use._model import check_writable
    check_writable(path, what="the report", option=None)
    return path


def _write_atomically(path, text):
    """Write ``path`` atomically; first remove the temporary files that killed
    writers (a killed report) left in its folder, which may hold no run that a
    resume or ``gc`` would clean."""
    from ..rundir.leftovers import remove_dead_temp_files_here
    remove_dead_temp_files_here(os.path.dirname(os.path.abspath(path)))
    try:
        schema.atomic_write(path, text)
    except OSError as exc:
        raise MindexpError(f"cannot write {path}: {exc.strerror}") from None


def _plot_runs(args: argparse.Namespace) -> int:
    from ..analysis.plots import save_overlay_plots, save_run_plots
    from ..analysis.reports import load_runs
    runs = load_runs(args.paths)
    common = os.path.join(os.path.commonpath([r.dir for r in runs]), layout.PLOTS_DIR)
    written = []
    try:
        if args.group_by:   # the groups' curves only: a plot per run is what --group-by avoids
            from ..analysis.group_plots import save_group_plots
            written = save_group_plots(runs, args.out or common, _group_by(args))
        else:
            written = _plot_each(runs, args, save_run_plots)
            if len(runs) > 1:
                written += save_overlay_plots(runs, args.out or common)
    except OSError as exc:
        raise MindexpError(f"cannot write the plots: {exc.strerror}: {exc.filename}") from None
    print("\n".join(written))
    return EXIT_OK


def _plot_each(runs, args, save_run_plots):
    written = []
    for run in runs:
        found = save_run_plots(run, os.path.join(args.out, run.run_id) if args.out else None)
        if not found:
            print(f"mindexp: warning: {run.dir} has no loss rows yet; no plots", file=sys.stderr)
        written += found
    return written
