# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The trial journal: the fingerprint of a trial, and its JSON lines through ``_files``
(append fsynced; a torn last line is skipped on reading). Format in docs/tune.md."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

import json
import time

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files

VERSION = 1
KIND = "trial"

# Host-specific or secret flags: not part of what is measured, never written.
HOST_FLAGS = ("--host", "--port", "--dist-init-addr", "--node-rank", "--api-key",
              "--admin-api-key")


def strip_argv(argv):
    """``argv`` without the host-specific and secret flags (and their values)."""
    out, skip = [], False
    for item in argv or []:
        item = str(item)
        if skip:
            skip = False
            if not item.startswith("--"):
                continue
        flag = item.split("=", 1)[0]
        if flag in HOST_FLAGS:
            skip = "=" not in item
            continue
        out.append(item)
    return out


def load_key(load):
    """The load shape as the fingerprint sees it."""
    load = load or {}
    concs = load.get("concurrencies") or []
    if not isinstance(concs, (list, tuple)):
        concs = [concs]
    prompts = load.get("num_prompts")
    if isinstance(prompts, dict):
        prompts = dict((str(k), int(v)) for k, v in sorted(prompts.items(), key=lambda kv: int(kv[0])))
    return {
        "input_len": _int(load.get("input_len")),
        "output_len": _int(load.get("output_len")),
        "concurrencies": sorted(int(c) for c in concs),
        "num_prompts": prompts if isinstance(prompts, dict) else _int(prompts),
        "dataset": load.get("dataset"),
        "tool": load.get("tool") or "bench_serving",
    }


def _int(value):
    if value is None or value == "":
        return None
    return int(value)


def fingerprint(release, model_commit, gpu_model, gpu_count, argv, load):
    """sha256 over the release, model commit, GPU model and count, argv and load shape."""
    material = {"v": VERSION, "release": str(release or ""), "model_commit": str(model_commit or ""),
                "gpu_model": str(gpu_model or ""), "gpu_count": int(gpu_count or 0),
                "argv": strip_argv(argv), "load": load_key(load)}
    return _files.digest_bytes(json.dumps(material, sort_keys=True, separators=(",", ":")))


def now_iso(clock=time.time):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock()))


def trial_record(candidate, host, status, reason, runs, metrics, load, wall_s=None, when=None,
                 started=None):
    """One journal line; ``started`` (epoch seconds, when the trial began) is kept to the
    millisecond when given (``time`` is cut to the second)."""
    gpus = candidate.get("gpus") or {}
    line = {
        "v": VERSION, "kind": KIND,
        "fingerprint": candidate["fingerprint"],
        "time": when or now_iso(),
        "host": host,
        "status": status,
        "reason": reason or "",
        "candidate": dict((k, candidate.get(k)) for k in ("id", "strategy", "extra_args", "knobs")),
        "release": candidate.get("release"),
        "model_commit": candidate.get("model_commit") or "",
        "gpus": {"name": gpus.get("name"), "count": gpus.get("count"), "used": gpus.get("used")},
        "argv": strip_argv(candidate.get("argv")),
        "load": load_key(load) if load else candidate.get("load") or {},
        "wall_s": wall_s,
        "runs": list(runs or []),
        "metrics": list(metrics or []),
    }
    if started is not None:
        line["started"] = round(float(started), 3)
    return line


def read(path):
    """``{fingerprint: line}`` of the trial lines of a journal (the first line of a
    fingerprint wins; torn and foreign lines are skipped)."""
    out = {}
    if not path:
        return out
    for line in _files.read_lines(path):
        if not isinstance(line, dict) or line.get("kind") != KIND or not line.get("fingerprint"):
            continue
        out.setdefault(line["fingerprint"], line)
    return out


def append(path, record):
    """Append ``record`` unless its fingerprint is there; True when appended."""
    if record["fingerprint"] in read(path):
        return False
    _files.append_line(path, record)
    return True
