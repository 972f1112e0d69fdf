# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The trial journal: the fingerprint of a trial, and its JSON lines through ``_files``
(append fsynced; a torn last line is skipped on reading); what each trial host served
before the tune (its ``original`` line, closed by a ``stays`` line when the tune ends).
Format in docs/tune.md."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

import json
import time

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files

VERSION = 1
KIND = "trial"
# what a trial host served before the tune: written once, when no tune is open on the host
ORIGINAL = "original"
# what the tune left on the host (it closes the host's original line: the next tune notes
# its own)
STAYS = "stays"

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


def wall_of(wall_s=None, started=None, ended=None):
    """The seconds of a trial: ``ended - started`` when both are given (the trial's own
    time, from the start of its load to the end of its own measurement), else ``wall_s``
    as given. An end before the start is refused."""
    if started is None or ended is None:
        return None if wall_s is None else float(wall_s)
    seconds = float(ended) - float(started)
    if seconds < 0:
        raise ValueError("the trial ended (%r) before it started (%r)" % (ended, started))
    return round(seconds, 3)


def ended_at(ended_ago, clock=time.time):
    """The epoch time (the controller's clock) that lies ``ended_ago`` seconds before now
    (``ended_ago`` measured on the trial host's own clock: no clock of two machines is
    compared); None when ``ended_ago`` is None."""
    if ended_ago is None:
        return None
    ago = float(ended_ago)
    if ago < 0:
        raise ValueError("ended_ago must be seconds before now (0 or more), got %r" % (ended_ago,))
    return clock() - ago


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


# ------------------------------------------------------------------ what ran before the tune

def original_record(host, row, when=None):
    """The ``original`` line of ``host`` from its ``server_status`` row at the tune's start:
    ``deployed`` (a deployment record existed), its ``strategy``, ``release`` and
    ``deployed_at`` (null when nothing was deployed)."""
    row = row if isinstance(row, dict) else {}
    deployed = bool(row.get("deployed"))
    return {"v": VERSION, "kind": ORIGINAL, "host": host, "time": when or now_iso(),
            "deployed": deployed,
            "strategy": (row.get("strategy") or None) if deployed else None,
            "release": (row.get("release") or None) if deployed else None,
            "deployed_at": (row.get("deployed_at") or None) if deployed else None}


def open_originals(lines):
    """``{host: original line}`` of the hosts whose tune is open in ``lines`` (in journal
    order): a host's first ``original`` line after its last ``stays`` line."""
    out = {}
    for line in lines or []:
        if not isinstance(line, dict) or not isinstance(line.get("host"), str):
            continue
        if line.get("kind") == ORIGINAL:
            out.setdefault(line["host"], line)
        elif line.get("kind") == STAYS:
            out.pop(line["host"], None)
    return out


def restore_of(original, inventory_strategy):
    """What ``keep=original`` deploys on the host: the strategy of its original line, or,
    when nothing was deployed before the tune (no deployment record), the inventory's
    strategy (what ``playbooks/deploy.yml`` would deploy there)."""
    original = original or {}
    if original.get("deployed") and original.get("strategy"):
        return {"strategy": original["strategy"], "source": "record",
                "says": "%s (what ran before)" % original["strategy"]}
    return {"strategy": inventory_strategy, "source": "inventory",
            "says": "%s (nothing was deployed before the tune: the inventory's strategy)"
                    % inventory_strategy}


def note_original(path, host, row, inventory_strategy=None, check_mode=False, when=None):
    """Read-or-write the ``original`` line of ``host``: the open one of the journal (a
    resumed tune: what ran before its first run, whatever its trials since wrote in the
    deployment record), else a new one from ``row`` (appended unless ``check_mode``).
    Returns ``{original, restore, appended, changed}``."""
    line = open_originals(_files.read_lines(path) if path else []).get(host)
    appended = False
    if line is None:
        line = original_record(host, row, when)
        if not check_mode:
            _files.append_line(path, line)
            appended = True
    return {"original": line, "restore": restore_of(line, inventory_strategy),
            "appended": appended, "changed": appended}


def stays_record(host, keep, strategy, winner=None, when=None):
    """The ``stays`` line: what the tune left on ``host`` (``keep`` best or original, the
    strategy deployed, the winner's id or null)."""
    return {"v": VERSION, "kind": STAYS, "host": host, "time": when or now_iso(),
            "keep": keep, "strategy": strategy, "winner": winner}


def close_original(path, host, keep, strategy, winner=None, check_mode=False, when=None):
    """Close the open ``original`` line of ``host`` with a ``stays`` line (the tune is over
    there: the next one notes what runs then). Nothing is appended when no tune is open on
    the host. Returns ``{record, appended, changed}``."""
    line = stays_record(host, keep, strategy, winner, when)
    appended = False
    if host in open_originals(_files.read_lines(path) if path else []) and not check_mode:
        _files.append_line(path, line)
        appended = True
    return {"record": line, "appended": appended, "changed": appended}
