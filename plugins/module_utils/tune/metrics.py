# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Metrics of a trial per concurrency, the SLO test, the goodput and its noise (docs/tune.md).

Input: the collection's benchmark results (``_bench_tool.RESULT_FIELDS``, one per concurrency);
nothing here parses a tool's output a second time.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name


from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_tool

SLO_KEYS = ("ttft_p99_ms", "tpot_p99_ms")

# The noise of a goodput, relative to it, is never taken below this floor. What one run
# shows of its own spread (``spread``) is the sampling error of its requests; it does not
# see what moves between two runs of the same server (warm-up, clocks, the host's other
# load), which a single trial cannot measure. 2 %: two trials closer than that are not told
# apart (docs/tune.md, "Ties and noise").
NOISE_FLOOR = 0.02
# p99 - p50 of a normal distribution, in standard deviations (the 0.99 quantile of N(0, 1))
_P99_SIGMAS = 2.3263


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
        "spread": spread(run),
    }


def spread(run):
    """The relative standard error of a run's output tok/s that its own requests show, or
    None when the run does not say enough.

    A closed-loop run's throughput is concurrency x tokens / mean request time, so its
    relative error is that of the mean decode time per token: sigma(TPOT) / mean(TPOT) /
    sqrt(completed). sigma is read from the percentiles every tool reports (bench_serving
    and aiperf alike): (p99 - p50) / 2.326, the normal distribution's ratio; a TPOT with a
    long tail gives a larger sigma than its standard deviation, so the estimate errs wide,
    towards more ties."""
    mean = _num(run.get("mean_tpot_ms"))
    p50 = _num(run.get("median_tpot_ms"))
    p99 = _num(run.get("p99_tpot_ms"))
    done = _num(run.get("completed"))
    if mean is None or p50 is None or p99 is None or done is None or mean <= 0 or done < 2:
        return None
    return max(p99 - p50, 0.0) / _P99_SIGMAS / mean / done ** 0.5


def noise(pt, floor=NOISE_FLOOR):
    """The noise of a point's output tok/s per GPU, in tok/s per GPU: its own spread
    (``spread``), never below ``floor`` of the value; None without a value."""
    value = (pt or {}).get("output_tok_s_per_gpu")
    if value is None:
        return None
    rel = (pt or {}).get("spread")
    return value * max(floor, rel if rel is not None else 0.0)


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
