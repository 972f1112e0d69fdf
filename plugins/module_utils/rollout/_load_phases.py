# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""What a starting SGLang server is doing, read from its own log lines.

The phases of one start, in order, and the line that opens each one. The strings are
SGLang's own (read from the release wheels on PyPI; file:line per release):

``Load weight begin. avail mem=...`` (python/sglang/srt/model_executor/model_runner.py)
    0.4.6.post5 l.502, 0.5.4.post3 l.686, 0.5.9 l.899, 0.5.23 l.1274.
``Loading safetensors checkpoint shards: 50% Completed | 32/64 [...]`` (tqdm with
``desc="Loading safetensors checkpoint shards"``, python/sglang/srt/model_loader/weight_utils.py)
    0.4.6.post5 l.438, 0.5.4.post3 l.632, 0.5.9 l.723, 0.5.23 l.1166. The bar format is
    ``"{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [...]"``: up to 0.5.9 it
    ends in a newline (weight_utils.py l.354 in 0.4.6.post5, l.547 in 0.5.4.post3,
    utils/common.py l.129 in 0.5.9), so each update is its own journal line (after a
    carriage return). 0.5.23 dropped the newline (utils/common.py l.1414): its updates are
    joined by carriage returns, and journald keeps them until the bar ends or its line
    buffer fills, so shard counts may show late on 0.5.23.
``Load weight end. type=...`` (model_runner.py)
    0.4.6.post5 l.575, 0.5.4.post3 l.799, 0.5.9 l.1041, 0.5.23 l.1373. The KV cache pool
    is allocated next ("KV Cache is allocated", "Memory pool end").
``Capture cuda graph begin. This can take up to several minutes.`` (model_runner.py)
    0.4.6.post5 l.1096, 0.5.4.post3 l.1986, 0.5.9 l.2147 (also "Capture piecewise CUDA graph
    begin", l.2228). 0.5.23 names the graph: "Capture target decode CUDA graph begin"
    (model_runner_components/cuda_graph_setup.py l.759; prefill: l.685).
``Uvicorn running on ...``
    uvicorn's own line when the HTTP server listens; the warmup request runs next
    (http_server.py ``_wait_and_warmup``: 0.4.6.post5 l.790, 0.5.4.post3 l.1551, 0.5.9
    l.1820, 0.5.23 l.2572). An open port means the same.
``The server is fired up and ready to roll!`` (python/sglang/srt/entrypoints/http_server.py)
    0.4.6.post5 l.898, 0.5.4.post3 l.1567, 0.5.9 l.1836, 0.5.23 l.2600.

Phases only move forward: 0.5.23 also logs "Load weight end. Committed real weights after
CUDA graph capture" (startup_weight_load.py l.538) after the capture, which must not take
the phase back.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# (key, what the operator reads, the line that opens it)
PHASES = (
    ("starting", "starting (port not open yet)", None),
    ("loading", "loading weights", re.compile(r"Load weight begin\.")),
    ("kv_cache", "allocating the KV cache", re.compile(r"Load weight end\.")),
    ("cuda_graphs", "capturing CUDA graphs", re.compile(r"Capture (?:[\w ]+ )?(?:cuda|CUDA) graph begin")),
    ("warmup", "warming up (port open)", re.compile(r"Uvicorn running on ")),
    ("ready", "ready", re.compile(r"The server is fired up and ready to roll!")),
)
KEYS = [p[0] for p in PHASES]
NAMES = dict((p[0], p[1]) for p in PHASES)

SHARDS = re.compile(
    r"Loading safetensors checkpoint shards:\s*(\d+)% Completed \| (\d+)/(\d+)")


def _segments(message):
    """One journal message may hold several tqdm updates joined by carriage returns."""
    return [s for s in message.replace("\r\n", "\n").split("\r") if s.strip()]


class LoadProgress(object):
    """Fold journal entries ``(epoch seconds, message)`` of one start into phases."""

    def __init__(self, started_at):
        self.started_at = float(started_at)
        self.phase = "starting"
        self.entered = {"starting": self.started_at}
        self.shards = None

    def enter(self, key, at):
        """Move to phase ``key`` at ``at`` unless the start is already past it."""
        if KEYS.index(key) > KEYS.index(self.phase):
            self.phase = key
            self.entered[key] = float(at)

    def feed(self, at, message):
        for segment in _segments(message):
            match = SHARDS.search(segment)
            if match:
                self.enter("loading", at)
                self.shards = {"percent": int(match.group(1)), "done": int(match.group(2)),
                               "total": int(match.group(3))}
                continue
            for key, _name, pattern in PHASES[1:]:
                if pattern.search(segment):
                    self.enter(key, at)
                    break
        return self

    def durations(self, now):
        """Seconds spent in each phase reached so far, in order (the last one until ``now``)."""
        reached = [k for k in KEYS if k in self.entered]
        out = []
        for i, key in enumerate(reached):
            end = self.entered[reached[i + 1]] if i + 1 < len(reached) else now
            out.append({"phase": key, "name": NAMES[key],
                        "seconds": round(max(end - self.entered[key], 0.0), 1)})
        return out

    def report(self, now):
        """A dict for module results: the phase, shard counts, durations and one line."""
        return {
            "phase": self.phase,
            "phase_name": NAMES[self.phase],
            "shards": self.shards,
            "phases": self.durations(now),
            "summary": self.describe(now),
        }

    def describe(self, now):
        """One line: the phase, shard progress while loading, and how long it has taken."""
        text = NAMES[self.phase]
        if self.phase == "loading" and self.shards:
            shards = self.shards
            text += " %d/%d shards (%d%%)" % (shards["done"], shards["total"], shards["percent"])
        if self.phase == "ready":
            steps = ["%s %s" % (d["name"].split(" (")[0], _duration(d["seconds"]))
                     for d in self.durations(now) if d["phase"] != "ready"]
            return "ready after %s: %s" % (_duration(self.entered["ready"] - self.started_at),
                                           ", ".join(steps))
        return "%s, %s in this phase, %s since start" % (
            text, _duration(now - self.entered[self.phase]), _duration(now - self.started_at))


def _duration(seconds):
    seconds = max(float(seconds), 0.0)
    if seconds < 60:
        return "%.1fs" % seconds
    minutes, rest = divmod(int(round(seconds)), 60)
    return "%dm%02ds" % (minutes, rest)


def journal_message(entry):
    """MESSAGE of one ``journalctl -o json`` entry; journald stores text with control
    characters (tqdm's carriage returns) as a list of byte values."""
    message = entry.get("MESSAGE")
    if isinstance(message, list):
        try:
            return bytes(bytearray(message)).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return ""
    return message if isinstance(message, str) else ""


def journal_time(entry):
    """Epoch seconds of one ``journalctl -o json`` entry (None when absent)."""
    try:
        return int(entry["__REALTIME_TIMESTAMP"]) / 1e6
    except (KeyError, TypeError, ValueError):
        return None
