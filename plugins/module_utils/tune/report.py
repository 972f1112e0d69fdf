# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The tune's report: rows in the search's ranking (goodput, ties within the noise to fewer
knobs off base), every (tok/s per user, output tok/s per GPU) point, the Pareto frontier of
the points meeting the SLO, the winner and the candidates it tied with; markdown, strict
JSON and the PNG chart (the chart draws exactly the ``points`` of the JSON)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

import io

from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_chart
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_tool import finite
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_report import (
    png_size,
    render_json,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import frontier as _frontier
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as _metrics
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import plan as _plan
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import search as _search

__all__ = ["build", "render_markdown", "render_json", "render_png"]

# The frontier is drawn over the points that meet the SLO (what can run under the target);
# the JSON says so in ``frontier_over`` and the chart's legend in FRONTIER_LABEL.
FRONTIER_OVER = "meets_slo"
FRONTIER_LABEL = "Pareto frontier (points meeting the SLO)"
BAND_LABEL = "outside the TPOT p99 target"


def build(plan_result, trials, slo=None):
    """The report of a tune from the last ``tune_plan`` result and the journal's trials
    (``{fingerprint: line}``)."""
    slo = _metrics.check_slo(slo if slo is not None else plan_result.get("slo"))
    candidates = plan_result.get("candidates") or []
    measured = _plan.measured_of(candidates, trials, slo)
    by_id = dict((c["id"], c) for c in candidates)
    order = dict((c["id"], n) for n, c in enumerate(candidates))
    entries = dict((cid, _search.entry(cid, by_id[cid], measured[cid], order.get(cid, 0))) for cid in measured)
    ranked, tie = _search.rank(list(entries.values()))
    tied = set((tie or {}).get("among") or [])
    rows, points = [], []
    for cid in ranked:
        entry = measured[cid]
        cand = by_id[cid]
        value, best = _metrics.goodput(entry["points"], entry["status"])
        line = entry["trial"]
        rows.append({
            "id": cid, "strategy": cand["strategy"], "extra_args": cand.get("extra_args") or {},
            "knobs": cand.get("knobs") or {}, "off_base": entries[cid]["off_base"],
            "status": entry["status"],
            "reason": line.get("reason") or "", "host": line.get("host"),
            "wall_s": line.get("wall_s"), "goodput": value, "noise": entries[cid]["noise"],
            "tied": cid in tied,
            "goodput_concurrency": best["concurrency"] if best else None,
            "failed": _metrics.failed_requests(entry["points"]),
            "peak_tok_s_per_gpu": max([p["output_tok_s_per_gpu"] for p in entry["points"]
                                       if p["output_tok_s_per_gpu"] is not None] or [None],
                                      key=lambda v: -1 if v is None else v),
            "score": list(entry["score"]),
            "points": entry["points"],
        })
        for pt in entry["points"]:
            if pt.get("tok_s_per_user") is None or pt.get("output_tok_s_per_gpu") is None:
                continue
            points.append({"id": cid, "concurrency": pt["concurrency"], "x": pt["tok_s_per_user"],
                           "y": pt["output_tok_s_per_gpu"], "meets_slo": pt["meets_slo"],
                           "failed": pt["failed"]})
    winner = None
    if rows and rows[0]["goodput"] is not None:
        top = rows[0]
        winner = {"id": top["id"], "strategy": top["strategy"], "extra_args": top["extra_args"],
                  "knobs": top["knobs"], "argv": by_id[top["id"]].get("argv") or [],
                  "goodput": top["goodput"], "concurrency": top["goodput_concurrency"],
                  "noise": top["noise"], "tied_with": [i for i in (tie or {}).get("among") or [] if i != top["id"]]}
    points.sort(key=lambda p: (order.get(p["id"], 0), p["concurrency"] or 0))
    # the frontier of what can run under the target: the points meeting the SLO only
    front = _frontier.pareto([p for p in points if p["meets_slo"]])
    tpot = slo.get("tpot_p99_ms")
    limit = (1000.0 / tpot) if tpot else None
    x_log = _frontier.log_axis([p["x"] for p in points])
    axes = {"x_log": x_log,
            "y_log": _frontier.log_axis([p["y"] for p in points]),
            "tpot_limit_x": limit,
            "x_range": _bench_chart.axis_range([p["x"] for p in points] + ([limit] if limit else []), x_log),
            "x": "tok/s per user (1000 / mean TPOT)", "y": "output tok/s per GPU"}
    return finite({
        "method": plan_result.get("method"), "slo": slo, "winner": winner, "rows": rows,
        "tie": tie, "noise_floor": _metrics.NOISE_FLOOR,
        "points": points, "axes": axes, "frontier_over": FRONTIER_OVER,
        "frontier": [{"id": p["id"], "concurrency": p["concurrency"], "x": p["x"], "y": p["y"]}
                     for p in front],
        "refused": plan_result.get("refused") or [],
        "left_out": plan_result.get("left_out") or [],
        "budget": plan_result.get("budget"), "kept": plan_result.get("kept") or [],
        "dropped": plan_result.get("dropped") or [],
        "space_size": len(candidates), "measured": len(rows),
        "budget_left": plan_result.get("budget_left"),
    })


def _fmt(value, digits=1):
    return "-" if value is None else "%.*f" % (digits, value)


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _args_text(extra):
    return " ".join(k if v is True else "%s %s" % (k, v) for k, v in sorted(extra.items())) or "(defaults)"


def _noise_text(noise):
    return "-" if noise is None else "+-%.2f" % noise


def _knobs_text(knobs):
    return "%d (%s)" % (len(knobs), ", ".join(knobs)) if knobs else "none"


def _goodput_of(report, cid):
    return next((r["goodput"] for r in report.get("rows") or [] if r["id"] == cid), None)


def _off_base_of(report, cid):
    return next((r.get("off_base") or [] for r in report.get("rows") or [] if r["id"] == cid), [])


def render_markdown(report, title=None):
    slo = report.get("slo") or {}
    lines = ["# %s" % (title or "Tune report"), ""]
    lines.append("Method: **%s**; %d of %d candidates measured; SLO: TTFT p99 <= %s ms, TPOT p99 <= %s ms."
                 % (report.get("method"), report.get("measured", 0), report.get("space_size", 0),
                    _fmt(slo.get("ttft_p99_ms"), 0) if slo.get("ttft_p99_ms") else "any",
                    _fmt(slo.get("tpot_p99_ms"), 0) if slo.get("tpot_p99_ms") else "any"))
    lines.append("")
    head = ["rank", "candidate", "strategy", "flags", "goodput tok/s/GPU", "noise", "at c", "peak tok/s/GPU",
            "failed", "status"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    winner = (report.get("winner") or {}).get("id")
    for n, row in enumerate(report.get("rows") or [], 1):
        name = "**%s**" % row["id"] if row["id"] == winner else row["id"]
        status = row["status"] if not row.get("reason") else "%s: %s" % (row["status"], row["reason"])
        lines.append("| " + " | ".join(_cell(c) for c in (
            n, name, row["strategy"], _args_text(row["extra_args"]),
            _fmt(row["goodput"]) + (" (tie)" if row.get("tied") else ""), _noise_text(row.get("noise")),
            row["goodput_concurrency"] if row["goodput_concurrency"] is not None else "-",
            _fmt(row["peak_tok_s_per_gpu"]), "-" if row["failed"] is None else row["failed"],
            status)) + " |")
    lines.append("")
    if winner:
        win = report["winner"]
        lines.append("Winner: **%s** (%s %s), goodput %s output tok/s per GPU at concurrency %s."
                     % (win["id"], win["strategy"], _args_text(win["extra_args"]),
                        _fmt(win["goodput"]), win["concurrency"]))
        tie = report.get("tie")
        if tie:
            lines.append("")
            lines.append("Chosen among tied candidates: %s are within the noise of the highest goodput "
                         "(%s at %s, noise %s output tok/s per GPU, the floor %d%%); the tie goes to the fewest "
                         "knobs off their base: %s has %s."
                         % (", ".join(tie["among"]), tie["best"], _fmt(_goodput_of(report, tie["best"]), 2),
                            _fmt(tie["noise"], 2), round(100 * (report.get("noise_floor") or 0)), win["id"],
                            _knobs_text(_off_base_of(report, win["id"]))))
    else:
        lines.append("Winner: none, no trial met the SLO without failed requests.")
    if report.get("refused"):
        lines += ["", "Refused before any load:"]
        for ref in report["refused"]:
            lines.append("- %s (%s %s): %s: %s" % (
                ref["id"], ref["strategy"], _args_text(ref.get("extra_args") or {}), ref["verdict"],
                ref["reason"]))
    if report.get("method") == "coordinate":
        lines += ["", "Search: budget %s; climbed %s; dropped %s." % (
            report.get("budget") or "none (0)", ", ".join(report.get("kept") or []) or "none",
            "; ".join("%s (%s)" % (d["strategy"], d["reason"]) for d in report.get("dropped") or []) or "none")]
    if report.get("left_out"):
        lines += ["", "Left out by the search:"]
        for item in report["left_out"]:
            lines.append("- %s: %s" % (item["id"], item["reason"]))
    lines += ["", "Frontier of the points meeting the SLO (tok/s per user, output tok/s per GPU): " + ", ".join(
        "%s c=%s (%s, %s)" % (p["id"], p["concurrency"], _fmt(p["x"]), _fmt(p["y"]))
        for p in report.get("frontier") or []) or "none"]
    return "\n".join(lines) + "\n"


def render_png(report, title=None, width_in=9.0, height_in=6.0, dpi=100, drawn=None):
    """PNG bytes: every point of ``report["points"]``, the frontier of those meeting the SLO,
    the winner, the region outside the TPOT target shaded from the left edge to the target. ``drawn`` (a dict) receives what the figure's artists hold
    (``points``, ``frontier``, ``winner``, ``xscale``, ``yscale``, ``shaded``, ``xlim``,
    ``legend``), read back from
    matplotlib after drawing, so a test checks the chart, not the input."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel

    fig = Figure(figsize=(width_in, height_in), dpi=dpi)
    ax = fig.add_subplot(1, 1, 1)
    points = report.get("points") or []
    axes = report.get("axes") or {}
    ok = [p for p in points if p["meets_slo"]]
    bad = [p for p in points if not p["meets_slo"]]
    if ok:
        ax.scatter([p["x"] for p in ok], [p["y"] for p in ok], s=22, c="tab:blue", label="trial point (meets SLO)", zorder=3)
    if bad:
        ax.scatter([p["x"] for p in bad], [p["y"] for p in bad], s=22, c="tab:gray", marker="x", label="trial point (misses SLO)", zorder=3)
    front = report.get("frontier") or []
    if front:
        ax.plot([p["x"] for p in front], [p["y"] for p in front], c="tab:orange", lw=2,
                label=FRONTIER_LABEL, zorder=2)
    win = report.get("winner")
    if win:
        mark = [p for p in points if p["id"] == win["id"] and p["concurrency"] == win["concurrency"]]
        if mark:
            ax.scatter([mark[0]["x"]], [mark[0]["y"]], s=220, marker="*", c="tab:red", zorder=4,
                       label="winner %s (c=%s)" % (win["id"], win["concurrency"]))
    if axes.get("x_log"):
        ax.set_xscale("log")
    if axes.get("y_log"):
        ax.set_yscale("log")
    limit = axes.get("tpot_limit_x")
    x_range = axes.get("x_range")
    if points and x_range:
        # the x range is the report's (the points and the target, 5 % margins): the band
        # below runs from the plot's left edge to the target
        ax.set_xlim(x_range[0], x_range[1])
    if points and limit and x_range:
        _bench_chart.shade_below(ax, limit, color="tab:red", alpha=0.08, label=BAND_LABEL)
    ax.set_xlabel(axes.get("x") or "tok/s per user")
    ax.set_ylabel(axes.get("y") or "output tok/s per GPU")
    ax.set_title(title or "Tune: output tok/s per GPU vs tok/s per user (%s)" % report.get("method"))
    ax.grid(True, alpha=0.3, which="both")
    if points:
        ax.legend(loc="best", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no trial measured", ha="center", va="center", transform=ax.transAxes)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = buf.getvalue()
    png_size(data)
    if drawn is not None:
        _read_back(ax, drawn)
    return data


def _read_back(ax, drawn):
    """The data of the chart's artists: scatter offsets, the frontier line, the shading."""
    points, winner = [], None
    for coll in ax.collections:
        offsets = [tuple(float(v) for v in row) for row in coll.get_offsets()]
        if str(coll.get_label()).startswith("winner"):
            winner = offsets[0] if offsets else None
        elif str(coll.get_label()).startswith("trial point"):
            points.extend(offsets)
    lines = [ln for ln in ax.get_lines() if ln.get_label() == FRONTIER_LABEL]
    shaded = None
    for patch in ax.patches:
        if patch.get_label() == BAND_LABEL:
            if hasattr(patch, "get_width"):  # a Rectangle (matplotlib >= 3.9)
                shaded = (float(patch.get_x()), float(patch.get_x() + patch.get_width()))
            else:
                xs = [float(v[0]) for v in patch.get_xy()]
                shaded = (min(xs), max(xs))
    legend = ax.get_legend()
    drawn.update(points=points, winner=winner, xscale=ax.get_xscale(), yscale=ax.get_yscale(),
                 shaded=shaded, xlim=tuple(float(v) for v in ax.get_xlim()),
                 legend=[t.get_text() for t in legend.get_texts()] if legend else [],
                 frontier=[(float(x), float(y)) for x, y in zip(*lines[0].get_data())] if lines else [])
