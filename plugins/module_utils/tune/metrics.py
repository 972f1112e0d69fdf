# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Metrics of a trial per concurrency, the SLO test and the goodput (docs/tune.md).

Input: the collection's benchmark results (``_bench_tool.RESULT_FIELDS``, one per concurrency);
nothing here parses a tool's output a second time.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name


from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_tool

SLO_KEYS = ("ttft_p99_ms", "tpot_p99_ms")


class SloError(ValueError):
    pass


# the bench parser's one reading of a number (None for missing or non-finite)
_num = _bench_tool.num  # pylint: disable=protected-access


def check_slo(slo):
    """The SLO with numbers (None = no limit); SloError names a bad key or value."""
    slo = slo or {}
    if not isinstance(slo, dict):
        raise SloError("tune_slo must be a mapping with ttft_p99_ms and tpot_p99_ms, got %r" % (slo,))
    problems = []
    unknown = sorted(set(slo) - set(SLO_KEYS))
    if unknown:
        problems.append("tune_slo: unknown keys %s (known: %s)" % (", ".join(unknown), ", ".join(SLO_KEYS)))
    out = {}
    for key in SLO_KEYS:
        raw = slo.get(key)
        if raw is None or raw == "":
            out[key] = None
            continue
        val = _num(raw)
        if val is None or val <= 0:
            problems.append("tune_slo.%s must be a positive number of milliseconds, got %r" % (key, raw))
        out[key] = val
    if problems:
        raise SloError("; ".join(problems))
    return out


def point(run, gpus_used):
    """The metrics of one benchmark result (one concurrency)."""
    gpus = max(int(gpus_used or 1), 1)
    out_tok = _num(run.get("output_tok_s"))
    tpot = _num(run.get("mean_tpot_ms"))
    ttft_p99 = _num(run.get("p99_ttft_ms"))
    tpot_p99 = _num(run.get("p99_tpot_ms"))
    approximate = []
    if tpot_p99 is None and tpot is not None:
        tpot_p99 = tpot
        approximate.append("tpot_p99_ms")
    failed = run.get("failed")
    return {
        "concurrency": run.get("concurrency"),
        "output_tok_s": out_tok,
        "output_tok_s_per_gpu": (out_tok / gpus) if out_tok is not None else None,
        "tok_s_per_user": (1000.0 / tpot) if tpot else None,
        "ttft_p50_ms": _num(run.get("median_ttft_ms")),
        "ttft_p99_ms": ttft_p99,
        "tpot_p50_ms": _num(run.get("median_tpot_ms")),
        "tpot_p99_ms": tpot_p99,
        "itl_p50_ms": _num(run.get("median_itl_ms")),
        "itl_p99_ms": _num(run.get("p99_itl_ms")),
        "failed": None if failed is None else int(failed),
        "approximate": approximate,
    }


def meets(pt, slo):
    """True when a point has no failed request (known) and meets each limit of the SLO."""
    if pt.get("failed") is None or pt["failed"] > 0:
        return False
    if pt.get("output_tok_s_per_gpu") is None:
        return False
    for key in SLO_KEYS:
        limit = slo.get(key)
        if limit is None:
            continue
        value = pt.get(key)
        if value is None or value > limit:
            return False
    return True


def trial(runs, gpus_used, slo):
    """Points of a trial (sorted by concurrency), each with ``meets_slo``."""
    pts = [point(r, gpus_used) for r in runs or []]
    for pt in pts:
        pt["meets_slo"] = meets(pt, slo)
    return sorted(pts, key=lambda p: (p["concurrency"] is None, p["concurrency"] or 0))


def failed_requests(points):
    """Failed requests over the trial (None when a point does not know)."""
    total = 0
    for pt in points:
        if pt.get("failed") is None:
            return None
        total += pt["failed"]
    return total


def goodput(points, status="ok"):
    """``(goodput, point)``: the best output tok/s per GPU among the points meeting the SLO;
    ``(None, None)`` for a failed trial or one with any failed request."""
    if status != "ok" or not points or failed_requests(points) != 0:
        return None, None
    ok = [p for p in points if p.get("meets_slo")]
    if not ok:
        return None, None
    best = max(ok, key=lambda p: (p["output_tok_s_per_gpu"], p.get("tok_s_per_user") or 0.0))
    return best["output_tok_s_per_gpu"], best


def score(points, status="ok"):
    """Sort key of a trial, higher is better: goodput first; a trial meeting no SLO point
    ranks below every one that does, by its best clean throughput; failed trials last."""
    value, best = goodput(points, status)
    if value is not None:
        return (2, value, best.get("tok_s_per_user") or 0.0)
    if status == "ok" and points and failed_requests(points) == 0:
        clean = [p["output_tok_s_per_gpu"] for p in points if p.get("output_tok_s_per_gpu") is not None]
        return (1, max(clean) if clean else 0.0, 0.0)
    return (0, 0.0, 0.0)
