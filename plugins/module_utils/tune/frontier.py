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
    """The frontier's points in ascending x (a sweep: by x descending, keep rising y)."""
    usable = [p for p in points if p.get("x") is not None and p.get("y") is not None]
    ordered = sorted(usable, key=lambda p: (-p["x"], -p["y"]))
    front, best_y = [], None
    for pt in ordered:
        if best_y is None or pt["y"] > best_y:
            front.append(pt)
            best_y = pt["y"]
    return list(reversed(front))


def log_axis(values, span=8.0):
    """True when positive ``values`` span ``span`` times or more."""
    vals = [v for v in values if v is not None and v > 0]
    return bool(vals) and max(vals) / min(vals) >= span
