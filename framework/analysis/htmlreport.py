"""One self-contained HTML comparison: the table, each run's status, and the
overlay plots embedded as PNG data URIs. No script, stylesheet, image or
font is loaded from anywhere: the file opens from disk with no network."""
import base64
import datetime as _dt
import html

from . import plots
from .reports import config_labels, display_table

_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f2f2f2; }
.status { font-weight: bold; }
.completed { color: #1a7f37; } .diverged { color: #b35900; }
.failed { color: #c62828; } .interrupted, .running { color: #666; }
img { max-width: 100%; display: block; margin: 1em 0; }
"""


def render_html(table, runs, title="mindexp comparison", skipped=()):
    """The report as a string; ``table`` comes from :func:`mindexp.compare`.

    ``skipped`` lists ``(run_dir, message)`` of broken runs, shown as such.
    """
    sections = [f"<h1>{html.escape(title)}</h1>",
                f"<p>{len(runs)} runs, generated {_dt.datetime.now():%Y-%m-%d %H:%M}</p>",
                "<h2>Comparison</h2>", _table_html(table),
                "<h2>Runs</h2>", _status_html(runs, skipped),
                "<h2>Plots</h2>", *_plot_images(runs)]
    body = "\n".join(sections)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n"
            f"<body>\n{body}\n</body></html>\n")


def _table_html(table):
    return display_table(table).to_html(index=False, na_rep="-", border=0, escape=True,
                                        float_format=lambda v: f"{v:.6g}")


def _status_html(runs, skipped):
    items = []
    for run, label in zip(runs, config_labels(runs)):
        status = str(run.status)
        error = run.meta.get("error")
        items.append(f"<li><span class=\"status {html.escape(status)}\">{html.escape(status)}"
                     f"</span> {html.escape(label)} <code>{html.escape(run.run_id)}</code>"
                     + (f": {html.escape(str(error))}" if error else "") + "</li>")
    for run_dir, message in skipped:
        items.append(f"<li><span class=\"status failed\">unreadable</span> "
                     f"<code>{html.escape(run_dir)}</code>: {html.escape(message)}</li>")
    return "<ul>\n" + "\n".join(items) + "\n</ul>"


def _plot_images(runs):
    figures = [("loss curves", plots.loss_overlay(runs))]
    if any(len(run.params) for run in runs):
        figures.append(("parameter trajectories", plots.params_overlay(runs)))
    figures.append(("final loss per config", plots.final_loss_bar(runs)))
    return [f"<img alt=\"{alt}\" src=\"data:image/png;base64,"
            f"{base64.b64encode(plots.figure_png(fig)).decode('ascii')}\">"
            for alt, fig in figures]
