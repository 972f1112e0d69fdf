# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""PNG chart of a benchmark comparison: aggregate output tok/s against concurrency, one
line per measured strategy; and the axis range and the shaded band the tune's frontier
chart (``tune/report.py``) uses. Needs matplotlib (Agg backend, no display) on the
controller. No Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

import io

from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_report import png_size
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_tool import BenchError


def matplotlib_error():
    """None when matplotlib can be imported, else the reason."""
    try:
        import matplotlib  # pylint: disable=unused-import,import-outside-toplevel # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def axis_range(values, log=False, margin=0.05):
    """``[low, high]`` of an axis over ``values`` with matplotlib's default margins (5 % of
    the span on each side, of the span of the logarithms on a log axis); None without a
    usable value. A chart that sets this range explicitly knows its left edge, so a band
    can start there."""
    import math  # pylint: disable=import-outside-toplevel
    vals = [float(v) for v in values if v is not None and (v > 0 or not log)]
    if not vals:
        return None
    if log:
        lo, hi = math.log10(min(vals)), math.log10(max(vals))
    else:
        lo, hi = min(vals), max(vals)
    pad = margin * (hi - lo)
    if pad == 0:  # one value: +-10 % of it (a tenth of a decade on a log axis), or +-1 at 0
        pad = 0.1 if log else (0.1 * abs(lo) or 1.0)
    lo, hi = lo - pad, hi + pad
    return [10 ** lo, 10 ** hi] if log else [lo, hi]


def shade_below(ax, limit, **style):
    """Shade the x range from the axes' left edge to ``limit`` (the axes' x range is kept)."""
    left, right = ax.get_xlim()
    patch = ax.axvspan(left, min(limit, right), **style)
    ax.set_xlim(left, right)
    return patch


def render_png(report, title=None, width_in=8.0, height_in=5.0, dpi=100):
    """PNG bytes of the chart of a report made by ``_bench.summarize``."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel

    fig = Figure(figsize=(width_in, height_in), dpi=dpi)
    ax = fig.add_subplot(1, 1, 1)
    drawn = 0
    concs = set()
    for row in report.get("strategies") or []:
        points = sorted((int(c), v) for c, v in (row.get("aggregate_tok_s") or {}).items()
                        if v is not None)
        if row.get("status") != "ok" or not points:
            continue
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        concs.update(xs)
        label = row["strategy"] + (" (winner)" if row["strategy"] == report.get("winner") else "")
        ax.plot(xs, ys, marker="o", linewidth=2.5 if "(winner)" in label else 1.5, label=label)
        drawn += 1
    if concs and max(concs) / max(min(concs), 1) >= 8:
        ax.set_xscale("log", base=2)
    if concs:
        ax.set_xticks(sorted(concs))
        ax.set_xticklabels([str(c) for c in sorted(concs)])
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("aggregate output tokens/s")
    ax.set_title(title or "Throughput vs concurrency (objective: %s)" % report.get("objective"))
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.legend(loc="best")
    else:
        ax.text(0.5, 0.5, "no strategy measured", ha="center", va="center", transform=ax.transAxes)
    refused = report.get("refused") or {}
    if refused:
        fig.text(0.01, 0.01, "refused: " + "; ".join("%s (%s)" % (k, str(v)[:60]) for k, v in sorted(refused.items())),
                 fontsize=7, alpha=0.8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = buf.getvalue()
    png_size(data)  # raises BenchError when matplotlib wrote something else
    return data


__all__ = ["BenchError", "axis_range", "matplotlib_error", "render_png", "shade_below"]
