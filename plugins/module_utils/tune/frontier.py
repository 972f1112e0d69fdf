# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The Pareto frontier of (tok/s per user, output tok/s per GPU): the points no other point
beats on both axes (higher is better on each)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name


def dominated(a, b):
    """True when point ``b`` is at least as good as ``a`` on both axes and better on one."""
    return (b["x"] >= a["x"] and b["y"] >= a["y"]) and (b["x"] > a["x"] or b["y"] > a["y"])


def pareto(points):
    """The points no other point dominates (equal points are all kept), in ascending x
    (then descending y). Quadratic: a tune has hundreds of points, not millions."""
    usable = [p for p in points if p.get("x") is not None and p.get("y") is not None]
    front = [p for p in usable if not any(dominated(p, q) for q in usable)]
    return sorted(front, key=lambda p: (p["x"], -p["y"]))


def log_axis(values, span=8.0):
    """True when positive ``values`` span ``span`` times or more."""
    vals = [v for v in values if v is not None and v > 0]
    return bool(vals) and max(vals) / min(vals) >= span
