# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The benchmark's verdict: the summary of a comparison, the pick (objective and tie), the
report in Markdown and strict JSON, and the PNG check of a chart. Input: results in the
schema of ``_bench_tool.RESULT_FIELDS``; nothing here reads a tool's output. Pure Python,
no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

import json
import struct

from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_tool import (
    OBJECTIVES,
    BenchError,
    finite,
    num,
)


def _single_rate(result):
    if not result:
        return None
    rate = num(result.get("request_tok_s"))
    return rate if rate is not None else num(result.get("output_tok_s"))


def summarize(runs, strategies=None, refused=None, objective="throughput", tie=0.01):
    """Report of a comparison.

    ``runs``: normalized results (any order; each names its strategy and concurrency).
    ``strategies``: the order of the table (default: order of first appearance).
    ``refused``: {strategy: reason} for strategies that could not be deployed.
    ``tie``: relative difference under which two strategies tie on the objective.
    """
    if objective not in OBJECTIVES:
        raise BenchError("objective must be one of %s, got %r" % (", ".join(OBJECTIVES), objective))
    refused = dict(refused or {})
    order = list(strategies or [])
    for run in runs or []:
        if run.get("strategy") not in order:
            order.append(run.get("strategy"))
    for name in refused:
        if name not in order:
            order.append(name)
    rows, concurrencies = [], set()
    for name in order:
        if name in refused:
            rows.append({"strategy": name, "status": "refused", "reason": str(refused[name])})
            continue
        mine = [r for r in runs or [] if r.get("strategy") == name and r.get("concurrency")]
        if not mine:
            rows.append({"strategy": name, "status": "refused", "reason": "no benchmark result"})
            continue
        aggregate = {}
        for run in mine:
            tok = num(run.get("output_tok_s"))
            if tok is None:
                continue
            conc = int(run["concurrency"])
            aggregate[conc] = max(tok, aggregate.get(conc, tok))
            concurrencies.add(conc)
        single = min(mine, key=lambda r: (int(r["concurrency"]), -(r.get("num_prompts") or 0)))
        single = single if int(single["concurrency"]) == 1 else None
        peak_conc = max(aggregate, key=lambda c: (aggregate[c], -c)) if aggregate else None
        rows.append({
            "strategy": name, "status": "ok", "tool": mine[0].get("tool"),
            "single_tok_s": _single_rate(single),
            "ttft_ms": num(single.get("mean_ttft_ms")) if single else None,
            "itl_ms": num(single.get("mean_itl_ms")) if single else None,
            "aggregate_tok_s": dict((str(c), aggregate[c]) for c in sorted(aggregate)),
            "peak_tok_s": aggregate.get(peak_conc) if peak_conc else None,
            "peak_concurrency": peak_conc,
        })
    winner = pick(rows, objective, tie)
    return {"objective": objective, "winner": winner,
            "concurrencies": sorted(concurrencies), "strategies": rows,
            "refused": dict((r["strategy"], r["reason"]) for r in rows if r["status"] == "refused"),
            "runs": [finite(r) for r in runs or []]}


def _better(a, b, tie):
    """1 when a is clearly greater than b, -1 when clearly smaller, 0 on a tie."""
    if a is None and b is None:
        return 0
    if b is None:
        return 1
    if a is None:
        return -1
    scale = max(abs(a), abs(b), 1e-12)
    if abs(a - b) / scale <= tie:
        return 0
    return 1 if a > b else -1


def pick(rows, objective="throughput", tie=0.01):
    """Name of the winning strategy among summary rows (None when none ran).

    throughput: highest peak aggregate output tok/s; ties go to the faster single request.
    latency: fastest single request (tok/s); ties go to the lower mean TTFT.
    """
    if objective not in OBJECTIVES:
        raise BenchError("objective must be one of %s, got %r" % (", ".join(OBJECTIVES), objective))
    best = None
    for row in rows:
        if row.get("status") != "ok":
            continue
        if best is None:
            best = row
            continue
        if objective == "throughput":
            order = _better(row.get("peak_tok_s"), best.get("peak_tok_s"), tie) or \
                _better(row.get("single_tok_s"), best.get("single_tok_s"), tie)
        else:
            ttft_a, ttft_b = row.get("ttft_ms"), best.get("ttft_ms")
            order = _better(row.get("single_tok_s"), best.get("single_tok_s"), tie) or \
                _better(-ttft_a if ttft_a is not None else None,
                        -ttft_b if ttft_b is not None else None, 0.0)
        if order > 0:
            best = row
    return best["strategy"] if best else None


# ----------------------------------------------------------------------------- render

def _fmt(value, digits=1):
    val = num(value)
    return "-" if val is None else ("%.*f" % (digits, val))


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(report, title=None):
    """Markdown table: one row per strategy, aggregate tok/s per concurrency, peak."""
    concs = report.get("concurrencies") or []
    head = ["strategy", "single-request tok/s", "TTFT ms", "ITL ms"] + \
        ["c=%d tok/s" % c for c in concs] + ["peak tok/s"]
    lines = []
    if title:
        lines += ["# %s" % title, ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in report.get("strategies") or []:
        name = row["strategy"]
        if name == report.get("winner"):
            name = "**%s**" % name
        if row.get("status") != "ok":
            cells = [_cell(name), _cell("refused: %s" % row.get("reason"))] + [""] * (len(head) - 2)
        else:
            agg = row.get("aggregate_tok_s") or {}
            peak = "-"
            if row.get("peak_tok_s") is not None:
                peak = "%s (c=%d)" % (_fmt(row["peak_tok_s"]), row["peak_concurrency"])
            cells = [_cell(name), _fmt(row.get("single_tok_s")), _fmt(row.get("ttft_ms")),
                     _fmt(row.get("itl_ms"), 2)] + \
                [_fmt(agg.get(str(c))) for c in concs] + [peak]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    winner = report.get("winner")
    objective = report.get("objective")
    if winner:
        row = [r for r in report["strategies"] if r["strategy"] == winner][0]
        if objective == "throughput":
            why = "peak %s tok/s at concurrency %s" % (_fmt(row.get("peak_tok_s")), row.get("peak_concurrency"))
        else:
            why = "%s tok/s for a single request, TTFT %s ms" % (_fmt(row.get("single_tok_s")), _fmt(row.get("ttft_ms")))
        lines.append("Winner (%s): **%s**, %s." % (objective, winner, why))
    else:
        lines.append("Winner (%s): none, no strategy was measured." % objective)
    for row in report.get("strategies") or []:
        if row.get("status") != "ok":
            lines.append("- %s: refused: %s" % (row["strategy"], row.get("reason")))
    return "\n".join(lines) + "\n"


def render_json(report):
    """Strict JSON of a report (non-finite numbers as null)."""
    return json.dumps(finite(report), indent=2, sort_keys=True, allow_nan=False) + "\n"


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data):
    """(width, height) from a PNG's IHDR chunk; BenchError when it is not a PNG."""
    if not isinstance(data, (bytes, bytearray)) or len(data) < 33:
        raise BenchError("too short to be a PNG")
    if bytes(data[:8]) != PNG_SIGNATURE:
        raise BenchError("no PNG signature")
    length, kind = struct.unpack(">I4s", bytes(data[8:16]))
    if kind != b"IHDR" or length != 13:
        raise BenchError("the first PNG chunk is not IHDR")
    width, height = struct.unpack(">II", bytes(data[16:24]))
    return width, height
