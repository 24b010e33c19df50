"""The interactive report: one self-contained HTML file that works from disk.

Plotly (the ``report`` extra) draws the figures: it is a well-kept library
whose Python package bundles its JavaScript (``plotly.min.js``, ~4.6 MB),
so the file can carry it inline and needs no network, no CDN and no build
step; hover values, zoom, legend clicks and log axes come with it. The
page's own script (``page.js``: sortable, filterable table, smoothing,
log-y toggles, one legend click hides a run in every figure) and stylesheet
are inlined too. Curves are downsampled for drawing only (see
:func:`mindexp.analysis.payload.downsample`); the table keeps every value.
"""
import datetime as _dt
import html
import json
import os

from . import payload

_HERE = os.path.dirname(os.path.abspath(__file__))
EXTRA_HINT = "pip install 'mindexp[report]'"
MAX_DRAWN = 50   # runs whose curves a report draws (every run is in its table)


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra."""


def plotly_js():
    """The bundled plotly.min.js text; MissingExtraError naming the extra when absent."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise MissingExtraError(f"the interactive report needs plotly: {EXTRA_HINT}") from None
    return get_plotlyjs()


def render_report(runs, title="mindexp report", skipped=(), out_path=None, max_drawn=MAX_DRAWN):
    """The report of ``runs`` as one HTML string.

    ``skipped``: ``(run_dir, message, status)`` of runs that could not be read.
    ``out_path``: where the file will be written; folder links are made
    relative to it, so the report and the runs can move together.
    Every run is in the table; the curves are those of the ``max_drawn`` runs
    with the lowest final loss (the page says so): only their logs are read,
    and a run whose logs are broken is listed among the skipped.
    """
    from .reports import Skipped, load_run, skip_status
    from ..errors import RunDirError
    script = plotly_js()  # first: a missing extra fails before any work
    link = _relative_link(out_path) if out_path else None
    runs, skipped = list(runs), list(skipped)
    drawn = payload.best_runs(runs, max_drawn)
    broken = set()
    for i in drawn:
        try:
            load_run(runs[i])
        except RunDirError as exc:
            skipped.append(Skipped(runs[i].dir, str(exc), skip_status(exc)))
            broken.add(i)
    keep = [i for i in range(len(runs)) if i not in broken]
    drawn = [keep.index(i) for i in drawn if i not in broken]
    data = payload.build([runs[i] for i in keep], title, skipped=skipped, link=link, drawn=drawn)
    if len(drawn) < len(keep):
        data["note"] = (f"curves of the {len(drawn)} runs with the lowest final loss of "
                        f"{len(keep)}; every run is in the table")
    data["generated"] = f"{_dt.datetime.now():%Y-%m-%d %H:%M}"
    return page(title, data, plotly_inline=script)


def page(title, data, plotly_inline=None, plotly_src=None):
    """The page shell: Plotly (inline text, or a same-origin URL page.js loads
    when it first draws), the data, the script."""
    # served (the dashboard): page.js loads it once the runs table is painted, so 4.6 MB
    # of script never hold up the table
    plotly_tag = f"<script>{_script_text(plotly_inline)}</script>" if plotly_inline is not None \
        else ""
    if plotly_src is not None:
        data = data | {"live": data.get("live", {}) | {"plotly": plotly_src}}
    live = '<span id="live" class="live"></span>' if data.get("live") else '<span id="live"></span>'
    generated = f' <span class="hint">generated {html.escape(data["generated"])}</span>' \
        if data.get("generated") else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{html.escape(title)}</title>
<style>{_asset("page.css")}</style>
{plotly_tag}
</head><body>
<header>
<h1 id="title">{html.escape(title)}</h1>
<span id="summary"></span>{generated} {live}
<label>filter <input id="filter" type="search" placeholder="status, config value, id..."></label>
<label>smoothing <input id="smooth" type="range" min="0" max="0.99" step="0.01">
<span id="smooth-value"></span></label>
<label title="one mean curve per group of runs sharing these config values, its 95 % interval shaded">group by <select id="group-by"></select></label>
<button id="show-all" type="button" title="show every hidden run again">show all runs</button>
<span class="hint">click a header to sort; a legend entry or a swatch hides a run</span>
</header>
<ul id="skipped"></ul>
<h2>Runs <span id="shown" class="hint"></span>
<label class="hint"><input id="all-columns" type="checkbox"> all columns</label></h2>
<div class="tablewrap" id="table"></div>
<h2>Curves</h2>
<p id="noplots" class="hint" style="display:none">no logged values yet</p>
<div class="grid" id="plots"></div>
<div id="detail"></div>
<script id="mindexp-data" type="application/json">{_json_in_script(data)}</script>
<script>{_script_text(_asset("page.js"))}</script>
</body></html>
"""


def _asset(name):
    with open(os.path.join(_HERE, name), encoding="utf-8") as f:
        return f.read()


def _json_in_script(data):
    # "</" would end the script element; "<!--" would open a comment state.
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _script_text(text):
    return text.replace("</script", "<\\/script")


def _relative_link(out_path):
    folder = os.path.dirname(os.path.abspath(out_path))

    def link(run):
        from urllib.parse import quote
        return quote(os.path.relpath(run.dir, folder).replace(os.sep, "/")) + "/"
    return link
