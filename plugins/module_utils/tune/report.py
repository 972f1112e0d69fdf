# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The tune's report: rows sorted by goodput, every (tok/s per user, output tok/s per GPU)
point, the Pareto frontier, the winner; markdown, strict JSON and the PNG chart (the chart
draws exactly the ``points`` of the JSON)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

import io

from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_tool import finite
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_report import (
    png_size,
    render_json,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import frontier as _frontier
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as _metrics
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import plan as _plan

__all__ = ["build", "render_markdown", "render_json", "render_png"]


def build(plan_result, trials, slo=None):
    """The report of a tune from the last ``tune_plan`` result and the journal's trials
    (``{fingerprint: line}``)."""
    slo = _metrics.check_slo(slo if slo is not None else plan_result.get("slo"))
    candidates = plan_result.get("candidates") or []
    measured = _plan.measured_of(candidates, trials, slo)
    by_id = dict((c["id"], c) for c in candidates)
    rows, points = [], []
    for cid, entry in measured.items():
        cand = by_id[cid]
        value, best = _metrics.goodput(entry["points"], entry["status"])
        line = entry["trial"]
        rows.append({
            "id": cid, "strategy": cand["strategy"], "extra_args": cand.get("extra_args") or {},
            "knobs": cand.get("knobs") or {}, "status": entry["status"],
            "reason": line.get("reason") or "", "host": line.get("host"),
            "wall_s": line.get("wall_s"), "goodput": value,
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
    order = dict((c["id"], n) for n, c in enumerate(candidates))
    rows.sort(key=lambda r: (tuple(-x for x in r["score"]), order.get(r["id"], 0)))
    winner = None
    if rows and rows[0]["goodput"] is not None:
        top = rows[0]
        winner = {"id": top["id"], "strategy": top["strategy"], "extra_args": top["extra_args"],
                  "knobs": top["knobs"], "argv": by_id[top["id"]].get("argv") or [],
                  "goodput": top["goodput"], "concurrency": top["goodput_concurrency"]}
    front = _frontier.pareto(points)
    tpot = slo.get("tpot_p99_ms")
    axes = {"x_log": _frontier.log_axis([p["x"] for p in points]),
            "y_log": _frontier.log_axis([p["y"] for p in points]),
            "tpot_limit_x": (1000.0 / tpot) if tpot else None,
            "x": "tok/s per user (1000 / mean TPOT)", "y": "output tok/s per GPU"}
    points.sort(key=lambda p: (order.get(p["id"], 0), p["concurrency"] or 0))
    return finite({
        "method": plan_result.get("method"), "slo": slo, "winner": winner, "rows": rows,
        "points": points, "axes": axes,
        "frontier": [{"id": p["id"], "concurrency": p["concurrency"], "x": p["x"], "y": p["y"]}
                     for p in front],
        "refused": plan_result.get("refused") or [],
        "left_out": plan_result.get("left_out") or [],
        "space_size": len(candidates), "measured": len(rows),
        "budget_left": plan_result.get("budget_left"),
    })


def _fmt(value, digits=1):
    return "-" if value is None else "%.*f" % (digits, value)


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _args_text(extra):
    return " ".join(k if v is True else "%s %s" % (k, v) for k, v in sorted(extra.items())) or "(defaults)"


def render_markdown(report, title=None):
    slo = report.get("slo") or {}
    lines = ["# %s" % (title or "Tune report"), ""]
    lines.append("Method: **%s**; %d of %d candidates measured; SLO: TTFT p99 <= %s ms, TPOT p99 <= %s ms."
                 % (report.get("method"), report.get("measured", 0), report.get("space_size", 0),
                    _fmt(slo.get("ttft_p99_ms"), 0) if slo.get("ttft_p99_ms") else "any",
                    _fmt(slo.get("tpot_p99_ms"), 0) if slo.get("tpot_p99_ms") else "any"))
    lines.append("")
    head = ["rank", "candidate", "strategy", "flags", "goodput tok/s/GPU", "at c", "peak tok/s/GPU",
            "failed", "status"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    winner = (report.get("winner") or {}).get("id")
    for n, row in enumerate(report.get("rows") or [], 1):
        name = "**%s**" % row["id"] if row["id"] == winner else row["id"]
        status = row["status"] if not row.get("reason") else "%s: %s" % (row["status"], row["reason"])
        lines.append("| " + " | ".join(_cell(c) for c in (
            n, name, row["strategy"], _args_text(row["extra_args"]), _fmt(row["goodput"]),
            row["goodput_concurrency"] if row["goodput_concurrency"] is not None else "-",
            _fmt(row["peak_tok_s_per_gpu"]), "-" if row["failed"] is None else row["failed"],
            status)) + " |")
    lines.append("")
    if winner:
        win = report["winner"]
        lines.append("Winner: **%s** (%s %s), goodput %s output tok/s per GPU at concurrency %s."
                     % (win["id"], win["strategy"], _args_text(win["extra_args"]),
                        _fmt(win["goodput"]), win["concurrency"]))
    else:
        lines.append("Winner: none, no trial met the SLO without failed requests.")
    if report.get("refused"):
        lines += ["", "Refused before any load:"]
        for ref in report["refused"]:
            lines.append("- %s (%s %s): %s: %s" % (
                ref["id"], ref["strategy"], _args_text(ref.get("extra_args") or {}), ref["verdict"],
                ref["reason"]))
    if report.get("left_out"):
        lines += ["", "Left out by the search:"]
        for item in report["left_out"]:
            lines.append("- %s: %s" % (item["id"], item["reason"]))
    lines += ["", "Frontier (tok/s per user, output tok/s per GPU): " + ", ".join(
        "%s c=%s (%s, %s)" % (p["id"], p["concurrency"], _fmt(p["x"]), _fmt(p["y"]))
        for p in report.get("frontier") or []) or "none"]
    return "\n".join(lines) + "\n"


def render_png(report, title=None, width_in=9.0, height_in=6.0, dpi=100, drawn=None):
    """PNG bytes: every point of ``report["points"]``, the frontier, the winner, the region
    outside the SLO shaded. ``drawn`` (a dict) receives what the figure's artists hold
    (``points``, ``frontier``, ``winner``, ``xscale``, ``yscale``, ``shaded``), read back from
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
                label="Pareto frontier", zorder=2)
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
    if points and limit:
        lo = min(min(p["x"] for p in points), limit) * 0.8
        ax.axvspan(lo, limit, color="tab:red", alpha=0.08, label="outside the TPOT p99 target")
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
    lines = [ln for ln in ax.get_lines() if ln.get_label() == "Pareto frontier"]
    shaded = None
    for patch in ax.patches:
        if patch.get_label() == "outside the TPOT p99 target":
            if hasattr(patch, "get_width"):  # a Rectangle (matplotlib >= 3.9)
                shaded = (float(patch.get_x()), float(patch.get_x() + patch.get_width()))
            else:
                xs = [float(v[0]) for v in patch.get_xy()]
                shaded = (min(xs), max(xs))
    drawn.update(points=points, winner=winner, xscale=ax.get_xscale(), yscale=ax.get_yscale(),
                 shaded=shaded,
                 frontier=[(float(x), float(y)) for x, y in zip(*lines[0].get_data())] if lines else [])
