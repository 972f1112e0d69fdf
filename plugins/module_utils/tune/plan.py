# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""``tune_plan mode: next`` and ``tune_record`` as plain functions: verdicts, fingerprints,
the journal and the search put together (the action plugins only pass values)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _topology
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import journal as _journal
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as _metrics
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import search as _search
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import verdict as _verdict


class PlanError(ValueError):
    pass


def units_of(hosts):
    """Trial units: each a list of host names (rank 0 first)."""
    units, seen, problems = [], set(), []
    for entry in hosts or []:
        members = [entry] if isinstance(entry, str) else list(entry or [])
        if not members or not all(isinstance(m, str) and m for m in members):
            problems.append("hosts: %r is neither a host name nor a list of host names" % (entry,))
            continue
        dup = [m for m in members if m in seen]
        if dup:
            problems.append("hosts: %s listed twice" % ", ".join(dup))
            continue
        seen.update(members)
        units.append(members)
    if not units and not problems:
        problems.append("hosts: no trial host given")
    return units, problems


def trial_units(hosts, settings, groups):
    """The trial units of the tune's hosts, for ``tune_plan``'s ``hosts``: a host that is a
    server of its own is a unit of one; the hosts of a multi-node server (``sglang_nnodes``
    > 1, the inventory group ``sglang_server_group``) are one unit, ordered by node rank
    (rank 0, the one that serves HTTP and is measured, first), in the place of its first
    host. ``settings`` maps each host to ``{"nnodes", "group", "rank"}`` (its inventory's
    sglang_nnodes, sglang_server_group, sglang_node_rank); ``groups`` is the inventory's
    groups. Returns ``(units, problems)``: every host of a multi-node server must be a
    trial host, or none of them."""
    hosts = list(hosts or [])
    units, placed, problems = [], set(), []
    for host in hosts:
        if host in placed:
            continue
        own = settings.get(host) or {}
        try:
            nnodes = int(own.get("nnodes") or 1)
        except (TypeError, ValueError):
            problems.append("%s: sglang_nnodes must be a number, got %r" % (host, own.get("nnodes")))
            continue
        if nnodes <= 1:
            units.append([host])
            placed.add(host)
            continue
        try:
            members = _topology.check_group(nnodes, own.get("group"), groups, host)
            rank_of = _topology.ranks(members, dict(
                (m, (settings.get(m) or {}).get("rank")) for m in members))
        except _topology.TopologyError as exc:
            problems.append("%s: %s" % (host, exc))
            continue
        missing = [m for m in members if m not in hosts]
        if missing:
            problems.append("tune_hosts: %s runs one server with %s, which is not a trial host: "
                            "give every host of group %s or none"
                            % (host, ", ".join(missing), own.get("group")))
            placed.update(members)
            continue
        units.append(sorted(members, key=lambda m: rank_of[m]))
        placed.update(members)
    return units, problems


def gate_requests(candidates, checks, base_extra_args=None):
    """The entries of ``server_preflight``'s ``candidates`` for the whole space: each
    candidate with the layout and the strategy that the controller's input check
    (``deploy_check``, one registered loop result per candidate, each with its ``item``)
    resolved for it, or its own strategy when that check refused it (the host's check then
    says why), and the inventory's launch flags under the candidate's own."""
    resolved = _verdict.by_candidate(checks, candidates)
    out = []
    for cand in candidates:
        check = resolved.get(cand["id"]) or {}
        if not check or _verdict.preflight_failed(check):
            check = {}
        layout = check.get("layout")
        extra = dict(base_extra_args or {})
        extra.update(cand.get("extra_args") or {})
        out.append({"id": cand["id"], "strategy": check.get("strategy") or cand["strategy"],
                    "layout": layout if isinstance(layout, dict) else {"name": cand["strategy"]},
                    "extra_args": extra})
    return out


def judge_all(candidates, preflight, release=None, model_commit="", load=None, require_gate=True):
    """Every candidate with its verdict and, when admissible, its fingerprint."""
    results = _verdict.by_candidate(preflight, candidates)
    out = []
    for cand in candidates:
        cand = dict(cand)
        res = results.get(cand["id"])
        verdict = _verdict.judge(cand, res, release, require_gate)
        cand.update(verdict=verdict["verdict"], reason=verdict["reason"], changes=verdict["changes"])
        if isinstance(res, dict) and not _verdict.preflight_failed(res):
            gpus = res.get("gpus") or {}
            layout = res.get("layout") or {}
            version = res.get("version") or release
            # the GPUs of every host of the server (a multi-node layout names its nnodes)
            count = int(gpus.get("count") or 0) * max(int(layout.get("nnodes") or 1), 1)
            used = int(layout.get("gpus") or 0) or count
            cand.update(release=version, model_commit=model_commit or "", argv=res.get("argv") or [],
                        gpus={"name": gpus.get("name"), "count": count, "used": used},
                        load=_journal.load_key(load))
            if cand["verdict"] == _verdict.OK:
                cand["fingerprint"] = _journal.fingerprint(version, model_commit, gpus.get("name"),
                                                           count, cand["argv"], load)
        out.append(cand)
    return out


def measured_of(candidates, trials, slo):
    """``{id: {status, points, score, trial}}`` of candidates whose fingerprint is journaled."""
    out = {}
    for cand in candidates:
        line = trials.get(cand.get("fingerprint") or "")
        if line is None:
            continue
        gpus = (line.get("gpus") or {}).get("used") or (cand.get("gpus") or {}).get("used")
        points = _metrics.trial(line.get("runs") or [], gpus, slo)
        status = line.get("status") or "failed"
        out[cand["id"]] = {"status": status, "points": points,
                           "score": _metrics.score(points, status), "trial": line}
    return out


def next_round(candidates, knobs, preflight, journal_path, hosts, budget=0, method="auto", slo=None,
               release=None, model_commit="", load=None, require_gate=True):
    """The result of ``tune_plan mode: next`` (see its RETURN)."""
    problems = []
    units, unit_problems = units_of(hosts)
    problems.extend(unit_problems)
    try:
        slo = _metrics.check_slo(slo)
    except _metrics.SloError as exc:
        problems.append(str(exc))
    try:
        budget = int(budget or 0)
        if budget < 0:
            raise ValueError
    except (TypeError, ValueError):
        problems.append("tune_budget must be a number of trials (0 for no limit), got %r" % (budget,))
    if method not in _search.METHODS:
        problems.append("tune_method must be one of %s, got %r" % (", ".join(_search.METHODS), method))
    if not candidates:
        problems.append("candidates: none given (the result of tune_plan mode: expand)")
    if problems:
        raise PlanError("; ".join(problems))
    judged = judge_all(candidates, preflight, release, model_commit, load, require_gate)
    if not knobs:
        knobs = []
        for cand in judged:
            for k in cand.get("index") or {}:
                if k not in knobs:
                    knobs.append(k)
    trials = _journal.read(journal_path)
    measured = measured_of(judged, trials, slo)
    result = _search.plan(judged, knobs, measured, units, budget, method)
    assignment, leads = {}, []
    for unit, pick in zip(units, result["picks"]):
        leads.append(unit[0])
        for host in unit:
            assignment[host] = pick
    left = dict((e["id"], e["reason"]) for e in result["left_out"])
    chosen = set(result["assigned_ids"])
    for cand in judged:
        if cand["verdict"] != _verdict.OK:
            cand["state"] = "refused"
        elif cand["id"] in measured:
            cand["state"] = "measured"
        elif cand["id"] in chosen:
            cand["state"] = "assigned"
        elif cand["id"] in left:
            cand["state"] = "left_out"
        else:
            cand["state"] = "pending"
    refused = [dict((k, c.get(k)) for k in ("id", "strategy", "extra_args", "verdict", "reason"))
               for c in judged if c["verdict"] != _verdict.OK]
    return {
        "candidates": judged, "knobs": list(knobs), "space_size": len(judged),
        "assignment": assignment, "leads": leads, "done": not chosen, "method": result["method"],
        "phase": result["phase"], "left_out": result["left_out"], "refused": refused,
        "measured": result["measured"], "budget_left": result["budget_left"],
        "best": result["best"], "rounds_left": result["rounds_left"], "slo": slo,
        # the search's own account: the budget it ran under, the tie behind its best, the
        # strategies it climbs and those it dropped (docs/tune.md, "Search methods")
        "budget": result["budget"], "tie": result["tie"], "kept": result["kept"],
        "dropped": result["dropped"],
    }


def record(journal_path, candidate, host, runs, status="ok", reason="", wall_s=None, load=None,
           slo=None, check_mode=False, when=None, started=None, ended=None):
    """The result of ``tune_record``: the line, its metrics and goodput; appended unless
    the fingerprint is already journaled (or in check mode). With ``started`` and
    ``ended`` the line's ``wall_s`` is ``ended - started`` (the trial's own time)."""
    if not isinstance(candidate, dict) or not candidate.get("fingerprint"):
        raise PlanError("candidate must be an entry of tune_plan's assignment (with its "
                        "fingerprint), got %r" % (candidate,))
    if status not in ("ok", "failed"):
        raise PlanError("status must be ok or failed, got %r" % (status,))
    try:
        wall_s = _journal.wall_of(wall_s, started, ended)
    except ValueError as exc:
        raise PlanError(str(exc))
    slo = _metrics.check_slo(slo)
    used = (candidate.get("gpus") or {}).get("used")
    points = _metrics.trial(runs, used, slo)
    if status == "ok" and not runs:
        status, reason = "failed", reason or "no benchmark result"
    line = _journal.trial_record(candidate, host, status, reason, runs,
                                 [dict((k, v) for k, v in p.items() if k != "meets_slo") for p in points],
                                 load or candidate.get("load"), wall_s, when, started)
    appended = False
    if not check_mode:
        appended = _journal.append(journal_path, line)
    value, _best = _metrics.goodput(points, status)
    return {"record": line, "metrics": points, "goodput": value, "appended": appended,
            "changed": appended}
