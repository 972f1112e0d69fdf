# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""A candidate's verdict from its ``server_preflight`` result: ok, refused (planner,
argparse or the release's gate said no) or rewritten (the release changed a value the
candidate asked for). Only ``ok`` candidates are ever assigned."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

OK = "ok"
REFUSED = "refused"
REWRITTEN = "rewritten"


def dest_of(flag):
    """``--chunked-prefill-size`` -> ``chunked_prefill_size`` (argparse's dest)."""
    return str(flag).lstrip("-").replace("-", "_")


def _same(asked, derived):
    if isinstance(asked, bool) or isinstance(derived, bool):
        return bool(asked) == bool(derived)
    try:
        return abs(float(asked) - float(derived)) <= 1e-9 * max(1.0, abs(float(asked)))
    except (TypeError, ValueError):
        return str(asked) == str(derived)


def _one_line(text, limit=400):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def preflight_failed(result):
    """True when the preflight refused. A loop registered with ``failed_when: false`` keeps
    the module's ``msg`` but reports ``failed: false``; a successful preflight always
    returns ``server_args``."""
    if result.get("failed") or result.get("unreachable"):
        return True
    return "server_args" not in result and bool(result.get("msg"))


def judge(candidate, result, release=None, require_gate=True):
    """``{"verdict", "reason", "changes"}`` of one candidate.

    ``result`` is the registered ``server_preflight`` result (``failed`` and ``msg`` on a
    refusal; ``server_args`` with ``verdict``, ``derived`` and ``changes`` on success).
    """
    if not isinstance(result, dict) or not result:
        return {"verdict": REFUSED, "reason": "no preflight result", "changes": []}
    version = result.get("version") or release or "(unknown release)"
    if preflight_failed(result):
        return {"verdict": REFUSED, "changes": [],
                "reason": _one_line(result.get("msg") or "the preflight failed")}
    gate = result.get("server_args") or {}
    if gate.get("verdict") != "ok":
        if gate.get("verdict") == "skipped" and not require_gate:
            return {"verdict": OK, "changes": [],
                    "reason": "the release's gate was skipped: %s" % gate.get("reason")}
        return {"verdict": REFUSED, "changes": [],
                "reason": _one_line("the release's server-args gate did not pass (%s): %s"
                                    % (gate.get("verdict") or "no verdict",
                                       gate.get("reason") or gate.get("error") or "no answer"))}
    changes = []
    for change in gate.get("changes") or []:
        if change.get("explicit"):
            changes.append("sglang %s changes %s from %s (asked) to %s" % (
                version, change.get("what"), change.get("asked"), change.get("derived")))
    derived = gate.get("derived") or {}
    for flag, value in sorted((candidate.get("extra_args") or {}).items()):
        key = dest_of(flag)
        if key in derived and value is not True and not _same(value, derived[key]):
            changes.append("sglang %s derives %s = %s where %s %s was asked" % (
                version, key, derived[key], flag, value))
    if changes:
        return {"verdict": REWRITTEN, "changes": changes, "reason": "; ".join(changes)}
    return {"verdict": OK, "changes": [], "reason": ""}


def by_candidate(preflight, candidates):
    """``{id: result}`` from a registered loop's ``results`` (each with ``item``) or a dict."""
    if isinstance(preflight, dict) and "results" in preflight and isinstance(preflight["results"], list):
        preflight = preflight["results"]
    out = {}
    if isinstance(preflight, dict):
        return dict(preflight)
    ids = [c["id"] for c in candidates]
    for pos, result in enumerate(preflight or []):
        if not isinstance(result, dict):
            continue
        item = result.get("item")
        cid = None
        if isinstance(item, dict):
            cid = item.get("id")
        elif isinstance(item, str):
            cid = item
        if cid is None and pos < len(ids):
            cid = ids[pos]
        out[cid] = result
    return out
