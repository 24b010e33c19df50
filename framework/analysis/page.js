/* mindexp report page: the runs table and Plotly figures, drawn from the
   JSON in #mindexp-data. The offline report embeds the data; the live
   dashboard embeds {"live": {...}} and this script polls its JSON API.
   No library but Plotly (inlined or served locally); no network. */
(function () {
  "use strict";
  var HEALTHY = ["completed", "running", "interrupted", "pruned"];
  // the faint raw curve behind a smoothed one doubles the drawing: only for a few runs
  var FAINT_RAW_MAX_RUNS = 12;
  var LEGEND_CHARS = 56;       // a legend line's length for many runs (the full label on hover)
  var COMMON_SHARE = 0.75;     // a value more runs share than this is left out of labels
  var MODEBAR_CLEARANCE = 32;  // top margin: Plotly's toolbar sits there, above the legend
  var MAX_PLOT_HEIGHT = 720;
  var boot = JSON.parse(document.getElementById("mindexp-data").textContent);
  var state = {data: null, hidden: {}, filter: "", sortKey: null, sortDir: 1, labels: [],
               smooth: 0.6, logy: {}, version: null, inflight: false, plots: {},
               imageAt: {}, imagesShown: null, groupBy: ""};

  // -- small helpers ---------------------------------------------------------------
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "class") node.className = attrs[k]; else node.setAttribute(k, attrs[k]);
    });
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function trunc(text, n) { text = String(text); return text.length > n ? text.slice(0, n - 1) + "\u2026" : text; }
  function esc(text) {
    return String(text).replace(/[&<>"]/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;"}[c];
    });
  }
  function fmt(v) {
    if (v === null || v === undefined || v === "") return "-";
    if (typeof v === "number") {
      if (Number.isInteger(v) && Math.abs(v) < 1e9) return String(v);
      var a = Math.abs(v);
      return (a !== 0 && (a < 1e-3 || a >= 1e5)) ? v.toExponential(3) : String(Number(v.toPrecision(4)));
    }
    return String(v);
  }
  function fmtDuration(s) {
    if (s === null || s === undefined) return "-";
    if (s < 60) return Math.round(s) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.round(s % 60)).padStart(2, "0") + "s";
    return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  }
  function healthy(run) { return HEALTHY.indexOf(run.status) >= 0; }
  function runText(run) { return [run.id, run.short, run.label, run.status, run.error || ""].join(" "); }
  function matches(run, rowText) {
    var terms = state.filter.toLowerCase().split(/\s+/).filter(Boolean);
    var text = (runText(run) + " " + (rowText || "")).toLowerCase();
    return terms.every(function (t) { return text.indexOf(t) >= 0; });
  }
  function rowTextOf(index) {
    var rows = state.data.table.rows.filter(function (r) { return r.run === index; });
    return rows.length ? rows[0].cells.map(fmt).join(" ") : "";
  }
  function shown(run, index) { return !state.hidden[run.id] && matches(run, rowTextOf(index)); }
  // Legend labels, one per run: the config fields whose values differ between
  // the listed runs (those the filter lets through; a run hidden by a click
  // stays in the legend, greyed, so it still counts and labels do not change
  // under the pointer). Left out: empty values (none, ""), and a value that
  // more than COMMON_SHARE of the listed runs share (epochs=12 in 24 runs of
  // 25: only the odd one says epochs=6). The experiment's name leads when the
  // runs come from several. A run with nothing left, or whose label another
  // run has too, is (also) named by its short id.
  function legendLabels(runs, listed) {
    var names = [], experiments = {}, total = 0;
    runs.forEach(function (r, i) {
      if (!listed[i]) return;
      total += 1;
      experiments[r.experiment] = true;
      Object.keys(r.fields || {}).forEach(function (k) { if (names.indexOf(k) < 0) names.push(k); });
    });
    var differing = [], common = {};
    names.forEach(function (k) {
      var counts = {};
      runs.forEach(function (r, i) {
        if (listed[i]) { var v = fieldOf(r, k); counts[v] = (counts[v] || 0) + 1; }
      });
      var values = Object.keys(counts);
      if (values.length < 2) return;
      differing.push(k);
      values.forEach(function (v) { if (counts[v] > COMMON_SHARE * total) common[k] = v; });
    });
    var several = Object.keys(experiments).length > 1;
    var labels = runs.map(function (r) {
      var parts = differing.filter(function (k) { return fieldOf(r, k) !== "" && fieldOf(r, k) !== common[k]; })
        .map(function (k) { return k + "=" + fieldOf(r, k); });
      if (several) parts.unshift(String(r.experiment));
      return parts.join(", ");
    });
    var count = {};
    labels.forEach(function (l, i) { if (listed[i]) count[l] = (count[l] || 0) + 1; });
    return labels.map(function (l, i) { return !l || count[l] > 1 ? (l ? l + ", " : "") + runs[i].short : l; });
  }
  function fieldOf(run, name) {  // "" for an empty or absent value
    var v = (run.fields || {})[name];
    return v === null || v === undefined ? "" : String(v);
  }
  // A run's legend entry: its label wrapped at commas (a few runs: short lines,
  // three at most; many: long lines, two at most); the full label is its hover text.
  function legendName(run, index) {
    var many = state.data.runs.length > FAINT_RAW_MAX_RUNS;
    var width = many ? LEGEND_CHARS : 30, most = many ? 2 : 3, lines = [""];
    state.labels[index].split(", ").forEach(function (p) {
      var cur = lines[lines.length - 1];
      if (cur && (cur + ", " + p).length > width) lines.push(p); else lines[lines.length - 1] = cur ? cur + ", " + p : p;
    });
    if (lines.length > most) lines = lines.slice(0, most - 1).concat([trunc(lines.slice(most - 1).join(", "), width)]);
    return lines.map(function (l) { return esc(trunc(l, width + 4)); }).join("<br>") +
      (healthy(run) ? "" : " <b>[" + run.status + "]</b>");
  }
  function fullLabel(run) {
    return run.id + " (" + run.status + ")" + (run.label !== run.id ? "\n" + run.label : "");
  }
  // Plotly draws no tooltip on legend entries: an SVG <title> per entry gives one.
  function titleLegend(plot) {
    Array.prototype.forEach.call(plot.querySelectorAll(".legend .traces"), function (g) {
      var d = g.__data__, trace = d && d[0] && d[0].trace;
      var run = trace && state.data.runs.filter(function (r) { return r.id === trace.meta; })[0];
      if (!run) return;
      var title = g.querySelector("title");
      if (!title) title = g.insertBefore(document.createElementNS("http://www.w3.org/2000/svg", "title"), g.firstChild);
      title.textContent = fullLabel(run);
    });
  }
  // The full label in a curve's hover box, a few fields per line.
  function hoverLabel(run) {
    var lines = [""];
    run.label.split(", ").forEach(function (p) {
      var cur = lines[lines.length - 1];
      if (cur && (cur + ", " + p).length > 60) lines.push(p); else lines[lines.length - 1] = cur ? cur + ", " + p : p;
    });
    return lines.map(esc).join("<br>");
  }
  function listedRuns() {
    return state.data.runs.map(function (run, i) { return matches(run, rowTextOf(i)); });
  }
  // TensorBoard's smoothing: an exponential moving average, debiased so the
  // first points are not pulled towards zero.
  function ema(values, weight) {
    var last = 0, n = 0, out = new Array(values.length);
    for (var i = 0; i < values.length; i++) {
      last = last * weight + (1 - weight) * values[i];
      n += 1;
      out[i] = weight === 1 ? values[i] : last / (1 - Math.pow(weight, n));
    }
    return out;
  }

  // -- header, summary -------------------------------------------------------------
  function renderSummary() {
    var d = state.data, counts = {};
    d.runs.forEach(function (r) { counts[r.status] = (counts[r.status] || 0) + 1; });
    var parts = Object.keys(counts).sort().map(function (k) { return counts[k] + " " + k; });
    var text = d.runs.length + (live.runs ? " drawn" : " runs") + (parts.length ? ": " + parts.join(", ") : "");
    if (d.differing && d.differing.length) text += " \u00b7 differing: " + d.differing.join(", ");
    if (d.note) text += " \u00b7 " + d.note;
    document.getElementById("summary").textContent = text;
    document.title = d.title;
    document.getElementById("title").textContent = d.title;
    var skipped = document.getElementById("skipped");
    skipped.innerHTML = "";
    (d.skipped || []).forEach(function (s) {
      var li = el("li");
      li.appendChild(el("span", {"class": "status status-failed"}, "unreadable "));
      li.appendChild(el("code", {}, s.dir));
      li.appendChild(document.createTextNode(": " + s.error));
      skipped.appendChild(li);
    });
    renderDetail();
  }

  function renderDetail() {
    var box = document.getElementById("detail");
    box.innerHTML = "";
    var det = state.data.detail;
    if (!det) return;
    [["config", det.config], ["run.json", det.meta]].forEach(function (pair) {
      var t = el("table", {"class": "kv"});
      t.appendChild(el("caption", {}, pair[0]));
      Object.keys(pair[1] || {}).forEach(function (k) {
        var v = pair[1][k], tr = el("tr");
        tr.appendChild(el("th", {}, k));
        tr.appendChild(el("td", {}, typeof v === "object" && v !== null ? JSON.stringify(v) : fmt(v)));
        t.appendChild(tr);
      });
      box.appendChild(t);
    });
  }

  // -- the table --------------------------------------------------------------------
  function tableColumns() {
    var cols = [{key: "#run", label: "run", kind: "text"}, {key: "#status", label: "status", kind: "text"}];
    if (boot.live) {
      cols.push({key: "#progress", label: "progress", kind: "num"},
                {key: "#rate", label: "steps/s", kind: "num"},
                {key: "#eta", label: "ETA", kind: "num"});
    }
    state.data.table.columns.forEach(function (c, i) {
      if (c.key !== "status" && (state.allColumns || !c.extra)) {
        cols.push({key: c.key, label: c.key, kind: c.kind, index: i});
      }
    });
    cols.push({key: "#error", label: "error", kind: "text"}, {key: "#folder", label: "folder", kind: "text"});
    return cols;
  }

  function cellValue(col, row, run) {
    if (col.key === "#run") return run.short;
    if (col.key === "#status") return run.status;
    if (col.key === "#error") return run.error || "";
    if (col.key === "#folder") return run.dir;
    var p = run.progress || {};
    if (col.key === "#progress") return p.total ? p.step / p.total : p.step;
    if (col.key === "#rate") return p.steps_per_s;
    if (col.key === "#eta") return p.eta_s;
    return row.cells[col.index];
  }

  function compareValues(a, b) {
    var na = a === null || a === undefined || a === "", nb = b === null || b === undefined || b === "";
    if (na || nb) return na === nb ? 0 : (na ? 1 : -1) * state.sortDir;  // empty cells last
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a).localeCompare(String(b), undefined, {numeric: true});
  }

  function renderTable() {
    var d = state.data, cols = tableColumns();
    var table = el("table", {"id": "runs"}), head = el("tr");
    cols.forEach(function (c) {
      var arrow = state.sortKey === c.key ? (state.sortDir > 0 ? " \u25b2" : " \u25bc") : "";
      var th = el("th", {"class": c.kind === "num" ? "num" : "text", "title": "sort by " + c.label},
                  trunc(c.label, 22) + arrow);
      th.addEventListener("click", function () {
        state.sortDir = state.sortKey === c.key ? -state.sortDir : 1;
        state.sortKey = c.key;
        renderTable();
      });
      head.appendChild(th);
    });
    table.appendChild(el("thead")).appendChild(head);
    var rows = d.table.rows.slice();
    if (state.sortKey) {
      var col = cols.filter(function (c) { return c.key === state.sortKey; })[0];
      if (col) rows.sort(function (a, b) {
        return state.sortDir * compareValues(cellValue(col, a, d.runs[a.run]), cellValue(col, b, d.runs[b.run]));
      });
    }
    var body = el("tbody"), visible = 0;
    rows.forEach(function (row) {
      var run = d.runs[row.run];
      if (!matches(run, row.cells.map(fmt).join(" "))) return;
      visible += 1;
      var tr = el("tr", {"class": state.hidden[run.id] ? "hidden-run" : ""});
      cols.forEach(function (c) { tr.appendChild(renderCell(c, row, run)); });
      body.appendChild(tr);
    });
    table.appendChild(body);
    var wrap = document.getElementById("table");
    wrap.innerHTML = "";
    wrap.appendChild(table);
    document.getElementById("shown").textContent = visible + " of " + d.table.rows.length + " shown";
  }

  function renderCell(c, row, run) {
    var v = cellValue(c, row, run), td;
    if (c.key === "#run") {
      td = el("td", {"class": "text run", "title": run.id + "\n" + run.label + "\n(click the swatch to hide it in the plots)"});
      var sw = el("span", {"class": "swatch", "style": "background:" + run.color});
      sw.addEventListener("click", function () { toggleRun(run.id); });
      td.appendChild(sw);
      td.appendChild(run.page ? el("a", {"href": run.page}, run.short) : el("span", {}, run.short));
      return td;
    }
    if (c.key === "#status") return el("td", {"class": "text status status-" + run.status}, run.status);
    if (c.key === "#folder") {
      td = el("td", {"class": "text"});
      td.appendChild(el("a", {"href": run.href, "title": run.dir}, "folder"));
      return td;
    }
    if (c.key === "#error") return el("td", {"class": "text ellip error", "title": v}, v);
    if (c.key === "#progress") {
      var p = run.progress || {};
      var note = p.stop ? (run.stop_reason || p.stop) + (p.planned ? " (planned: " + p.planned + " steps)" : "")
        : (p.total ? Math.round(100 * p.step / p.total) + "%" : "");
      td = el("td", {"class": "num progress", "title": note},
              p.step + " / " + (p.total || "?") + (p.stop ? " \u00b7 " + p.stop : ""));
      if (p.total) td.appendChild(el("div", {"class": "bar", "style": "width:" + Math.min(100, 100 * p.step / p.total) + "%"}));
      return td;
    }
    if (c.key === "#eta") return el("td", {"class": "num"}, run.status === "running" ? fmtDuration(v) : "-");
    var text = fmt(v);
    return el("td", {"class": (c.kind === "num" ? "num" : "text ellip"), "title": c.label + " = " + String(v)}, text);
  }

  function toggleRun(id) {
    if (state.hidden[id]) delete state.hidden[id]; else state.hidden[id] = true;
    renderRuns();
    renderPlots();
  }

  // -- figures ------------------------------------------------------------------------
  function card(fig) {
    var existing = state.plots[fig.id];
    if (existing) return existing;
    var box = el("div", {"class": "card", "data-figure": fig.id});
    var head = el("h3");
    head.appendChild(el("span", {}, fig.title));
    var label = el("label", {"class": "logy"});
    var check = el("input", {"type": "checkbox"});
    check.addEventListener("change", function () { state.logy[fig.id] = check.checked; renderPlots(); });
    label.appendChild(check);
    label.appendChild(document.createTextNode(" log " + (fig.kind === "final" ? "x" : "y")));
    head.appendChild(label);
    box.appendChild(head);
    var plot = el("div", {"class": "plot"});
    box.appendChild(plot);
    document.getElementById("plots").appendChild(box);
    existing = state.plots[fig.id] = {box: box, plot: plot, check: check, bound: false};
    return existing;
  }

  function fitRange(sets, extra, log) {
    var use = sets.filter(function (s) { return s.healthy; });
    if (!use.length) use = sets;
    var lo = Infinity, hi = -Infinity;
    function take(y) {
      if (isFinite(y) && (!log || y > 0)) { if (y < lo) lo = y; if (y > hi) hi = y; }
    }
    use.forEach(function (s) { s.y.forEach(take); });
    extra.forEach(take);
    if (lo > hi) return null;
    if (log) {
      lo = Math.log10(lo); hi = Math.log10(hi);
      var lp = (hi - lo) * 0.05 || 0.5;
      return [lo - lp, hi + lp];
    }
    var pad = (hi - lo) * 0.05 || Math.abs(hi) * 0.1 || 1;
    return [lo - pad, hi + pad];
  }

  // A diverged or failed run's points far outside the healthy range become
  // gaps: no vertical streaks across the plot (the x marker shows where it went).
  function cutOutliers(traces, range, log) {
    var span = range[1] - range[0], lo = range[0] - span, hi = range[1] + span;
    traces.forEach(function (t) {
      var run = state.data.runs.filter(function (r) { return r.id === t.meta; })[0];
      if (!run || healthy(run)) return;
      t.y = t.y.map(function (y) {
        var v = log ? (y > 0 ? Math.log10(y) : -Infinity) : y;
        return v < lo || v > hi ? null : y;
      });
    });
  }

  function clamp(y, range, log) {
    if (!range) return y;
    var v = log ? Math.log10(Math.max(y, 1e-300)) : y;
    var inner = range[0] + 0.97 * (range[1] - range[0]);
    v = Math.min(Math.max(v, range[0]), inner);
    return log ? Math.pow(10, v) : v;
  }

  function lineTraces(fig, log) {
    var d = state.data, traces = [], sets = [], inLegend = {}, ends = [];
    fig.traces.forEach(function (t) {
      var run = d.runs[t.run], vis = shown(run, t.run);
      var smooth = t.smooth && state.smooth > 0;
      var y = smooth ? ema(t.y, state.smooth) : t.y;
      if (vis) sets.push({y: y, healthy: healthy(run)});
      var common = {x: t.x, type: "scatter", legendgroup: run.id, meta: run.id,
                    visible: vis ? true : "legendonly"};
      if (smooth && d.runs.length <= FAINT_RAW_MAX_RUNS) {
        traces.push(Object.assign({}, common, {y: t.y, mode: "lines", showlegend: false, hoverinfo: "skip",
                                               opacity: 0.25, line: {color: run.color, width: 1}}));
      }
      // a run the filter leaves out leaves the legend too (one hidden by a click stays, greyed)
      var first = t.legend && !inLegend[run.id] && state.listed[t.run];
      if (first) inLegend[run.id] = true;
      traces.push(Object.assign({}, common, {
        y: y, mode: t.kind === "eval" ? "lines+markers" : "lines", name: legendName(run, t.run),
        showlegend: first,
        line: {color: run.color, width: 1.6, dash: t.kind === "eval" ? "dot" : "solid"},
        marker: {size: 5},
        hovertemplate: "<b>" + esc(run.short) + "</b> " + hoverLabel(run) + "<br>" + esc(t.name) +
          (smooth ? " (smoothed)" : "") + " = %{y:.5g}<br>step %{x}<extra></extra>"}));
      var stop = run.diverged_at || (run.status === "failed" && t.x.length ? t.x[t.x.length - 1] : null);
      if (stop !== null && stop !== undefined && t.legend && t.kind !== "eval" && t.x.length) {
        var i = t.x.length - 1;
        while (i > 0 && t.x[i] > stop) i--;
        ends.push({run: run, x: stop, y: y[i], vis: vis});
      }
    });
    var range = fitRange(sets, (fig.targets || []).map(function (g) { return g.y; }), log);
    if (range) cutOutliers(traces, range, log);
    ends.forEach(function (e) {
      traces.push({x: [e.x], y: [clamp(e.y, range, log)], type: "scatter", mode: "markers", showlegend: false,
                   legendgroup: e.run.id, meta: e.run.id, visible: e.vis ? true : "legendonly",
                   marker: {symbol: "x", size: 12, color: e.run.color, line: {width: 1, color: "#000"}},
                   hovertemplate: esc(e.run.short) + " " + e.run.status + " at step " + e.x + "<extra></extra>"});
    });
    return {traces: traces, range: range};
  }

  // -- groups: runs sharing the values of config fields, drawn as one mean curve
  // per group with its 95 % t-interval shaded (as mindexp.history(group_by=...)
  // and `mindexp plot --group-by`): per step, the runs of the group that reached
  // it (a run's value between two of its logged steps is interpolated, so
  // downsampled curves still line up); no band where fewer than two runs count.
  var GROUP_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                      "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  var T975 = [12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.306, 2.2622, 2.2281,
              2.201, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.093, 2.086,
              2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423];
  function tQuantile(df) {  // t(0.975, df): the table, then Cornish-Fisher (error < 1e-5)
    if (df <= T975.length) return T975[df - 1];
    var z = 1.959963984540054, z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;
    return z + (z3 + z) / (4 * df) + (5 * z5 + 16 * z3 + 3 * z) / (96 * df * df) +
      (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * df * df * df);
  }
  function groupFields() {
    var fields = (state.data.differing || []).filter(function (f) { return f !== "seed"; });
    if (!state.groupBy) return null;
    return state.groupBy === "auto" ? fields : [state.groupBy];
  }
  function groupKey(run, fields) {
    return fields.map(function (f) { return f + "=" + fieldOf(run, f); }).join(", ") || "all runs";
  }
  function compareKeys(a, b) { return a.localeCompare(b, undefined, {numeric: true}); }
  function valueAt(t, x) {  // the run's value at step x; null outside its logged steps
    var lo = 0, hi = t.x.length - 1;
    if (hi < 0 || x < t.x[0] || x > t.x[hi]) return null;
    while (hi - lo > 1) { var mid = (lo + hi) >> 1; if (t.x[mid] <= x) lo = mid; else hi = mid; }
    var i = t.x[hi] === x ? hi : lo;
    if (t.x[i] === x) return t.y[i];
    var a = t.y[lo], b = t.y[hi];
    if (a === null || b === null) return null;
    return a + (b - a) * (x - t.x[lo]) / (t.x[hi] - t.x[lo]);
  }
  function groupStats(members) {
    var seen = {}, xs = [];
    members.forEach(function (t) { t.x.forEach(function (x) { if (!seen[x]) { seen[x] = true; xs.push(x); } }); });
    xs.sort(function (a, b) { return a - b; });
    var out = {x: xs, mean: [], lo: [], hi: [], n: []};
    xs.forEach(function (x) {
      var v = [];
      members.forEach(function (t) { var y = valueAt(t, x); if (y !== null && isFinite(y)) v.push(y); });
      var n = v.length, mean = n ? v.reduce(function (s, y) { return s + y; }, 0) / n : null, half = null;
      var same = n >= 1 && v.every(function (y) { return y === v[0]; });
      if (same) { mean = v[0]; half = n >= 2 ? 0 : null; }  // no band of rounding noise
      else if (n >= 2) {
        var ss = v.reduce(function (s, y) { return s + (y - mean) * (y - mean); }, 0);
        half = tQuantile(n - 1) * Math.sqrt(ss / (n - 1)) / Math.sqrt(n);
      }
      out.mean.push(mean); out.n.push(n);
      out.lo.push(half === null ? null : mean - half); out.hi.push(half === null ? null : mean + half);
    });
    return out;
  }
  function groupOrder(fields) {
    var keys = {};
    state.data.runs.forEach(function (run) { keys[groupKey(run, fields)] = true; });
    return Object.keys(keys).sort(compareKeys);
  }
  function rgba(hex, alpha) {
    var v = parseInt(hex.slice(1), 16);
    return "rgba(" + (v >> 16) + "," + ((v >> 8) & 255) + "," + (v & 255) + "," + alpha + ")";
  }
  function groupTraces(fig, log) {
    var d = state.data, fields = groupFields(), order = groupOrder(fields), series = {}, names = [];
    fig.traces.forEach(function (t) {
      var run = d.runs[t.run];
      if (!shown(run, t.run) || !t.x.length) return;
      var id = t.kind + "\u0000" + t.name, key = groupKey(run, fields);
      if (!series[id]) { series[id] = {kind: t.kind, name: t.name, groups: {}}; names.push(id); }
      (series[id].groups[key] = series[id].groups[key] || []).push(t);
    });
    var traces = [], sets = [], inLegend = {};
    names.forEach(function (id) {
      var s = series[id];
      order.forEach(function (key, k) {
        if (!s.groups[key]) return;
        var g = groupStats(s.groups[key]), color = GROUP_COLORS[k % GROUP_COLORS.length];
        var vis = state.hidden["group:" + key] ? "legendonly" : true, most = Math.max.apply(null, g.n);
        if (vis === true) {
          sets.push({y: g.lo.concat(g.hi, g.mean).filter(function (y) { return y !== null; }), healthy: true});
        }
        var common = {x: g.x, type: "scatter", legendgroup: "group:" + key, meta: "group:" + key,
                      visible: vis, hoverinfo: "skip", showlegend: false};
        traces.push(Object.assign({}, common, {y: g.lo, mode: "lines", line: {width: 0, color: color}}));
        traces.push(Object.assign({}, common, {y: g.hi, mode: "lines", fill: "tonexty",
                                               fillcolor: rgba(color, 0.22), line: {width: 0, color: color}}));
        traces.push(Object.assign({}, common, {
          y: g.mean, customdata: g.n, name: esc(key) + " (n=" + most + ")", showlegend: !inLegend[key],
          mode: s.kind === "eval" ? "lines+markers" : "lines", hoverinfo: undefined,
          line: {color: color, width: 2, dash: s.kind === "eval" ? "dot" : "solid"}, marker: {size: 5},
          hovertemplate: "<b>" + esc(key) + "</b><br>" + esc(s.name) + " mean = %{y:.5g} (n=%{customdata})" +
            "<br>step %{x}<extra></extra>"}));
        inLegend[key] = true;
      });
    });
    return {traces: traces, range: fitRange(sets, [], log)};
  }
  function renderGroupOptions() {
    var select = document.getElementById("group-by");
    if (!select) return;
    var fields = (state.data.differing || []).filter(function (f) { return f !== "seed"; });
    var options = [["", "none (a curve per run)"]].concat(fields.map(function (f) { return [f, f]; }));
    if (fields.length > 1) options.push(["auto", "auto (" + fields.join(", ") + ")"]);
    if (state.groupBy && options.every(function (o) { return o[0] !== state.groupBy; })) state.groupBy = "";
    var text = JSON.stringify(options);
    if (select.dataset.options !== text) {
      select.innerHTML = "";
      options.forEach(function (o) { select.appendChild(el("option", {value: o[0]}, o[1])); });
      select.dataset.options = text;
    }
    select.value = state.groupBy;
    select.parentNode.style.display = fields.length ? "" : "none";
  }

  // A log axis by default when the healthy runs' values are all positive and
  // span more than two decades (a diverged run does not decide it).
  function autoLog(fig) {
    var d = state.data, lo = Infinity, hi = -Infinity, seen = false;
    fig.traces.forEach(function (t) {
      if (!healthy(d.runs[t.run])) return;
      t.y.forEach(function (y) { seen = true; if (y < lo) lo = y; if (y > hi) hi = y; });
    });
    return seen && lo > 0 && hi / lo > 100;
  }

  function drawLines(c, fig) {
    var log = fig.id in state.logy ? state.logy[fig.id] : (fig.log === null ? autoLog(fig) : fig.log);
    c.check.checked = log;
    var built = groupFields() ? groupTraces(fig, log) : lineTraces(fig, log);
    var shapes = [], notes = [];
    (fig.targets || []).forEach(function (g) {
      shapes.push({type: "line", xref: "paper", x0: 0, x1: 1, y0: g.y, y1: g.y,
                   line: {dash: "dash", color: "#333", width: 1.2}});
      notes.push({xref: "paper", x: 1, y: log ? Math.log10(Math.max(g.y, 1e-300)) : g.y, text: esc(g.name),
                  showarrow: false, xanchor: "right", yanchor: "bottom", font: {size: 11, color: "#333"}});
    });
    var yaxis = {title: {text: fig.ytitle}, type: log ? "log" : "linear", exponentformat: "power"};
    if (built.range) { yaxis.range = built.range; yaxis.autorange = false; }
    var lines = built.traces.filter(function (t) { return t.showlegend !== false; })
      .map(function (t) { return t.name.split("<br>").length; });
    var layout = {height: plotHeight(lines), margin: {l: 64, r: 8, t: MODEBAR_CLEARANCE, b: 40},
                  xaxis: {title: {text: fig.xtitle || "step"}},
                  yaxis: yaxis, shapes: shapes, annotations: notes, hovermode: "closest",
                  legend: {font: {size: 11}, itemclick: "toggle", itemdoubleclick: false,
                           tracegroupgap: 2},
                  uirevision: fig.id + (log ? ":log" : ":lin") + ":" + state.smooth + ":" + state.groupBy};
    Plotly.react(c.plot, built.traces, layout, {displaylogo: false, responsive: true})
      .then(function () { titleLegend(c.plot); });
  }

  // Tall enough for the whole legend (lines: the line count of each entry);
  // past MAX_PLOT_HEIGHT the legend scrolls.
  function plotHeight(lines) {
    var need = lines.reduce(function (sum, n) { return sum + 6 + 15 * n; }, 0);
    return Math.max(340, Math.min(MAX_PLOT_HEIGHT, MODEBAR_CLEARANCE + 48 + need));
  }

  function drawFinal(c, fig) {
    var d = state.data;
    var log = fig.id in state.logy ? state.logy[fig.id] : fig.log;
    c.check.checked = log;
    var points = fig.points.slice().sort(function (a, b) { return a.value - b.value; });
    var names = points.map(function (p) {
      var r = d.runs[p.run], label = state.labels[p.run];
      return r.short + (label === r.short ? "" : "  " + trunc(label, LEGEND_CHARS));
    });
    var traces = points.map(function (p, i) {
      var run = d.runs[p.run], vis = shown(run, p.run);
      return {x: [p.value], y: [names[i]], type: "scatter", mode: "markers", name: legendName(run, p.run),
              legendgroup: run.id, meta: run.id, showlegend: false, visible: vis ? true : "legendonly",
              marker: {size: 11, color: run.color, symbol: healthy(run) ? "circle" : "x"},
              hovertemplate: "<b>" + esc(run.short) + "</b> " + hoverLabel(run) + "<br>final loss %{x:.6g} (" +
                run.status + ")<extra></extra>"};
    });
    var layout = {height: Math.max(160, 60 + 24 * points.length),
                  margin: {l: 8, r: 16, t: MODEBAR_CLEARANCE, b: 40},
                  xaxis: {title: {text: "final loss"}, type: log ? "log" : "linear", exponentformat: "power"},
                  yaxis: {automargin: true, autorange: "reversed", type: "category",
                          categoryorder: "array", categoryarray: names},
                  hovermode: "closest", uirevision: fig.id + log};
    Plotly.react(c.plot, traces, layout, {displaylogo: false, responsive: true});
  }

  function renderPlots() {
    if (!window.Plotly) {  // the dashboard: Plotly is asked for after the table is painted
      if (!state.awaitingPlotly) {
        state.awaitingPlotly = true;
        var tag = el("script", {src: boot.live.plotly});
        tag.addEventListener("load", function () { renderPlots(); });
        document.head.appendChild(tag);
      }
      return;
    }
    var d = state.data, wanted = {};
    renderGroupOptions();
    state.listed = listedRuns();
    state.labels = legendLabels(d.runs, state.listed);
    d.figures.forEach(function (fig) {
      wanted[fig.id] = true;
      var c = card(fig);
      if (fig.kind === "final") drawFinal(c, fig); else drawLines(c, fig);
      if (!c.bound) {
        // one run hidden everywhere: a legend click toggles the run in every figure
        c.plot.on("plotly_legendclick", function (ev) { toggleRun(ev.data[ev.curveNumber].meta); return false; });
        c.plot.on("plotly_legenddoubleclick", function () { return false; });
        c.plot.on("plotly_afterplot", function () { titleLegend(c.plot); });
        c.bound = true;
      }
    });
    Object.keys(state.plots).forEach(function (id) {
      if (!wanted[id]) { Plotly.purge(state.plots[id].plot); state.plots[id].box.remove(); delete state.plots[id]; }
    });
    document.getElementById("noplots").style.display = d.figures.length ? "none" : "";
  }

  // -- the experiment's pictures (figures/), one card per run and name, an epoch slider --
  function renderImages() {
    var box = document.getElementById("images");
    if (!box) {
      box = el("div", {id: "images", "class": "figure-grid"});
      document.getElementById("detail").before(box);
    }
    var groups = state.data.images || [], shownNow = JSON.stringify(groups);
    if (shownNow === state.imagesShown) return;  // a poll without new pictures: keep the cards
    state.imagesShown = shownNow;
    box.innerHTML = "";
    if (groups.length) box.before(document.getElementById("images-head") || el("h2", {id: "images-head"}, "Figures"));
    groups.forEach(function (g) {
      var run = state.data.runs[g.run], key = run.id + "/" + g.name;
      var last = g.frames.length - 1, at = state.imageAt[key];
      var index = at === undefined || at > last ? last : at;  // follows the newest until moved
      var card = el("div", {"class": "figure-card"});  // not a .card: those hold Plotly figures
      card.appendChild(el("h3", {}, g.name + (state.data.runs.length > 1 ? " \u00b7 " + run.short : "")));
      var img = el("img", {src: g.frames[index].src, alt: g.name, "class": "run-figure"});
      var label = el("span", {"class": "hint"}, "epoch " + g.frames[index].epoch);
      var slider = el("input", {type: "range", min: "0", max: String(last), step: "1", value: String(index),
                                "aria-label": "epoch of " + g.name});
      slider.addEventListener("input", function () {
        var i = Number(slider.value);
        state.imageAt[key] = i === last ? undefined : i;
        img.src = g.frames[i].src;
        label.textContent = "epoch " + g.frames[i].epoch;
      });
      card.appendChild(img);
      var row = el("div", {"class": "slider-row"});
      row.appendChild(slider);
      row.appendChild(label);
      card.appendChild(row);
      box.appendChild(card);
    });
  }

  // the live dashboard's table is paged by the server (renderListing); the report's is all here
  function renderRuns() { if (live.runs) renderListing(); else renderTable(); }

  function renderAll() {
    renderSummary();
    renderRuns();
    renderPlots();
    renderImages();
  }

  // -- controls, live updates ----------------------------------------------------------
  function bindControls() {
    var slider = document.getElementById("smooth"), out = document.getElementById("smooth-value");
    slider.value = state.smooth;
    out.textContent = state.smooth.toFixed(2);
    slider.addEventListener("input", function () {
      state.smooth = Number(slider.value);
      out.textContent = state.smooth.toFixed(2);
      renderPlots();
    });
    var filter = document.getElementById("filter"), timer = null;
    if (live.runs) filter.value = listing.q;
    filter.addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        if (live.runs) {  // filtered by the server, over every run
          listing.q = filter.value;
          listing.offset = 0;
          loadTable();
          return;
        }
        state.filter = filter.value; renderTable(); renderPlots();
      }, 150);
    });
    var group = document.getElementById("group-by");
    group.addEventListener("change", function () { state.groupBy = group.value; renderPlots(); });
    var all = document.getElementById("all-columns");
    all.addEventListener("change", function () { state.allColumns = all.checked; renderRuns(); });
    document.getElementById("show-all").addEventListener("click", function () {
      state.hidden = {}; renderRuns(); renderPlots();
    });
  }

  // -- live: the change feed, the server-paged runs table, the drawn runs ------------
  // The page never refetches everything on a timer: it polls /api/changes with its
  // cursor (a few bytes when nothing changed) and asks again only for what a change
  // touches: the table's page (new, gone or changed runs), the drawn runs' data (one
  // of them changed status), or nothing (rows appended to a drawn run's curves here).
  var live = boot.live || {};
  var listing = {offset: 0, limit: live.page_rows || 100, q: live.q || "", sort: "-started",
                 answer: null};

  function getJson(url) {
    return fetch(url, {cache: "no-store"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    });
  }
  function setLive(ok, text) {
    var box = document.getElementById("live");
    box.textContent = ok ? "live \u00b7 updated " + new Date().toLocaleTimeString() : text;
    box.className = "live " + (ok ? "ok" : "down");
  }
  function runsUrl(offset, limit, sort, q) {
    return live.runs + "?offset=" + offset + "&limit=" + limit + "&sort=" + encodeURIComponent(sort) +
      "&q=" + encodeURIComponent(q);
  }

  function loadTable() {
    return getJson(runsUrl(listing.offset, listing.limit, listing.sort, listing.q)).then(function (a) {
      listing.answer = a;
      if (state.cursor === undefined) state.cursor = a.cursor;  // the state this table shows
      renderListing();
    });
  }
  // By default the most recent runs are drawn (at most max_drawn); a pick in the table's
  // first column replaces the default for good.
  function loadDrawn() {
    if (!live.runs) {   // a run's own page: its data, asked again when it changed
      return getJson(live.api).then(function (d) { state.data = d; renderAll(); });
    }
    var keys = state.userPicked ? Promise.resolve(state.drawn) :
      getJson(runsUrl(0, live.max_drawn, "-started", "")).then(function (a) {
        return a.rows.map(function (r) { return r.key; });
      });
    return keys.then(function (k) {
      state.drawn = k;
      return getJson(live.api + "?runs=" + k.map(encodeURIComponent).join(","));
    }).then(function (d) {
      state.data = d;
      state.keyIndex = {};
      d.runs.forEach(function (r, i) { state.keyIndex[r.key] = i; });
      renderSummary();
      renderPlots();
      renderImages();
      renderListing();
    });
  }

  var LISTING_COLUMNS = [
    {key: "run", label: "run"}, {key: "status", label: "status"},
    {key: "progress", label: "progress", num: true}, {key: "steps_per_s", label: "steps/s", num: true},
    {key: "eta", label: "ETA", num: true, fixed: true}, {key: "final_loss", label: "final_loss", num: true},
    {key: "min_loss", label: "min_loss", num: true}, {key: "steps", label: "steps", num: true}];

  function listingColumns() {
    var cols = LISTING_COLUMNS.slice();
    (listing.answer.columns || []).forEach(function (name) {
      cols.push({key: "config." + name, label: name, config: name});
    });
    return cols.concat([{key: "started", label: "started"}, {key: "error", label: "error", fixed: true},
                        {key: "folder", label: "folder", fixed: true}]);
  }

  function listingCell(c, row) {
    var drawn = state.keyIndex && state.keyIndex[row.key] !== undefined ? state.data.runs[state.keyIndex[row.key]] : null;
    if (c.key === "run") {
      var td = el("td", {"class": "text run", "title": row.id});
      if (drawn) {
        var sw = el("span", {"class": "swatch", "style": "background:" + drawn.color});
        sw.addEventListener("click", function () { toggleRun(drawn.id); });
        td.appendChild(sw);
      }
      td.appendChild(el("a", {"href": row.page}, row.short));
      return td;
    }
    if (c.key === "status") return el("td", {"class": "text status status-" + row.status}, row.status);
    if (c.key === "progress") return renderCell({key: "#progress"}, null, row);
    if (c.key === "steps_per_s") return el("td", {"class": "num"}, fmt((row.progress || {}).steps_per_s));
    if (c.key === "eta") return renderCell({key: "#eta"}, null, {status: row.status, progress: row.progress || {}});
    if (c.key === "error") return el("td", {"class": "text ellip error", "title": row.error || ""}, row.error || "");
    if (c.key === "folder") {
      var f = el("td", {"class": "text"});
      f.appendChild(el("a", {"href": row.href, "title": row.dir}, "folder"));
      return f;
    }
    var v = c.config ? row.config[c.config] : row[c.key];
    return el("td", {"class": c.num ? "num" : "text ellip", "title": c.label + " = " + String(v)}, fmt(v));
  }

  function renderListing() {
    var a = listing.answer;
    if (!a) return;
    var cols = listingColumns(), table = el("table", {"id": "runs"}), head = el("tr");
    head.appendChild(el("th", {"class": "text pick", "title": "drawn in the curves (at most " + live.max_drawn + ")"}, "draw"));
    cols.forEach(function (c) {
      var arrow = listing.sort === c.key ? " \u25b2" : listing.sort === "-" + c.key ? " \u25bc" : "";
      var th = el("th", {"class": c.num ? "num" : "text", "title": c.fixed ? c.label : "sort by " + c.label},
                  trunc(c.label, 22) + arrow);
      if (!c.fixed) th.addEventListener("click", function () {
        listing.sort = listing.sort === c.key ? "-" + c.key : c.key;
        listing.offset = 0;
        loadTable();
      });
      head.appendChild(th);
    });
    table.appendChild(el("thead")).appendChild(head);
    var body = el("tbody");
    a.rows.forEach(function (row) {
      var tr = el("tr", {"data-key": row.key}), pick = el("td", {"class": "pick"});
      var box = el("input", {"type": "checkbox", "aria-label": "draw " + row.short});
      box.checked = (state.drawn || []).indexOf(row.key) >= 0;
      box.addEventListener("change", function () { pickRun(row.key, box.checked); });
      pick.appendChild(box);
      tr.appendChild(pick);
      cols.forEach(function (c) { tr.appendChild(listingCell(c, row)); });
      body.appendChild(tr);
    });
    table.appendChild(body);
    var wrap = document.getElementById("table");
    wrap.innerHTML = "";
    wrap.appendChild(table);
    renderPager(a);
  }

  function renderPager(a) {
    var last = Math.min(a.offset + a.rows.length, a.matched);
    document.getElementById("shown").textContent = (a.matched ? (a.offset + 1) + "\u2013" + last : "0") +
      " of " + a.matched + (a.matched < a.total ? " matching (" + a.total + " runs)" : " runs") +
      " \u00b7 " + (state.drawn || []).length + " drawn";
    var pager = document.getElementById("pager");
    if (!pager) {
      pager = el("div", {id: "pager", "class": "pager"});
      document.getElementById("table").after(pager);
    }
    pager.innerHTML = "";
    [["\u2190 previous", a.offset - listing.limit, a.offset > 0],
     ["next \u2192", a.offset + listing.limit, last < a.matched]].forEach(function (b) {
      var button = el("button", {type: "button"}, b[0]);
      button.disabled = !b[2];
      button.addEventListener("click", function () { listing.offset = Math.max(0, b[1]); loadTable(); });
      pager.appendChild(button);
    });
  }

  function pickRun(key, on) {
    var keys = (state.drawn || []).filter(function (k) { return k !== key; });
    if (on) keys.push(key);
    state.drawn = keys.slice(-live.max_drawn);
    state.userPicked = true;
    loadDrawn();
  }

  // Rows appended to a drawn run's logs go onto its curves here; what cannot be
  // placed (a log or figure the data did not have yet) asks for the data once.
  function appendRows(index, logs) {
    var run = state.data.runs[index], again = false;
    Object.keys(logs).forEach(function (name) {
      var rows = logs[name].slice(), header = (run.logs || {})[name];
      if (rows.length && (!header || rows[0].join(",") === header.join(","))) header = rows.shift();
      var placed = false;
      state.data.figures.forEach(function (fig) {
        (fig.traces || []).forEach(function (t) {
          if (t.run !== index || !t.src || t.src.log !== name) return;
          placed = true;
          var xi = header.indexOf(t.src.x), yi = header.indexOf(t.src.col), pi = header.indexOf("param");
          rows.forEach(function (row) {
            if (t.src.param !== undefined && row[pi] !== t.src.param) return;
            var x = Number(row[xi]), y = Number(row[yi]);
            if (row[yi] !== "" && isFinite(y) && isFinite(x)) { t.x.push(x); t.y.push(y); }
          });
          if (t.x.length > 2 * (live.max_points || 1000)) again = true;  // downsampled again
        });
      });
      if (rows.length && !placed) again = true;
    });
    return again;
  }

  function applyChanges(c) {
    var onPage = {}, drawn = {}, work = [], again = false, drawnChanged = false;
    (listing.answer ? listing.answer.rows : []).forEach(function (r) { onPage[r.key] = true; });
    (state.drawn || []).forEach(function (k) { drawn[k] = true; });
    if (!live.runs) {
      var mine = c.status.concat(c.new).some(function (s) { return s.key === live.key; }) ||
        c.rows[live.key] || c.removed.indexOf(live.key) >= 0;
      return mine ? loadDrawn() : null;
    }
    var touched = c.new.length || c.removed.length || c.status.length ||
      Object.keys(c.rows).some(function (k) { return onPage[k]; });
    if (live.runs && touched) work.push(loadTable());
    c.status.concat(c.removed.map(function (k) { return {key: k}; })).forEach(function (s) {
      if (drawn[s.key]) again = true;
    });
    if (c.new.length && !state.userPicked) again = true;  // the most recent runs changed
    Object.keys(c.rows).forEach(function (k) {
      var i = state.keyIndex ? state.keyIndex[k] : undefined;
      if (i === undefined) return;
      drawnChanged = true;
      if (appendRows(i, c.rows[k])) again = true;
    });
    if (again) work.push(loadDrawn());
    else if (drawnChanged) renderPlots();
    return Promise.all(work);
  }

  function poll() {
    if (state.inflight) return;
    state.inflight = true;
    var first = state.cursor === undefined;
    // the overview starts from its table (whose answer holds the cursor), then draws;
    // a run's page from its data, with the cursor of the moment before it
    var start = !first ? null : live.runs ? loadTable().then(loadDrawn) :
      getJson(live.changes).then(function (c) { state.cursor = c.cursor; return loadDrawn(); });
    (start || getJson(live.changes + "?cursor=" + state.cursor).then(function (c) {
      state.cursor = c.cursor;
      if (c.reset) return live.runs ? loadTable().then(loadDrawn) : loadDrawn();
      return applyChanges(c);
    })).then(function () {
      setLive(true);
    }).catch(function (e) {
      setLive(false, "server unreachable (" + e.message + "); retrying");
    }).then(function () { state.inflight = false; });
  }

  // the pure helpers, for the browser tests
  window.mindexpPage = {legendLabels: legendLabels};

  bindControls();
  if (boot.live) {
    poll();
    setInterval(poll, boot.live.every_ms || 1000);
  } else {
    state.data = boot;
    renderAll();
  }
})();
