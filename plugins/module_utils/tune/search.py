# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The search: which admissible candidates the next round measures, one per trial unit (a
host or a multi-node group), by the method named in docs/tune.md.

Stateless: every call starts from what has been measured (the journal), so a resumed tune
picks up where it stopped and a finished one assigns nothing.

* ``exhaustive``: every admissible candidate in candidate order (within the budget).
* ``coordinate``: strategies first (each strategy's seed, nearest to the base values), then
  coordinate descent over the knobs around the best measured candidate: its one-knob
  neighbours of the same strategy, then those of each other strategy's best.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as _metrics

METHODS = ("auto", "exhaustive", "coordinate")


class SearchError(ValueError):
    pass


def resolve_method(method, admissible, budget):
    if method not in METHODS:
        raise SearchError("tune_method must be one of %s, got %r" % (", ".join(METHODS), method))
    if method != "auto":
        return method
    return "exhaustive" if not budget or admissible <= budget else "coordinate"


def _distance(cand):
    return sum((cand.get("index") or {}).values())


def seeds(admissible):
    """The seed of each strategy (in strategy order): its candidate nearest to the base."""
    out, order = {}, []
    for cand in admissible:
        strat = cand["strategy"]
        if strat not in out:
            order.append(strat)
            out[strat] = cand
        elif _distance(cand) < _distance(out[strat]):
            out[strat] = cand
    return [out[s] for s in order]


def neighbours(centre, admissible, knobs):
    """Admissible candidates of ``centre``'s strategy differing from it in exactly one knob,
    knob by knob in ``knobs`` order, nearer values first."""
    mine = centre.get("index") or {}
    found = []
    for cand in admissible:
        if cand["strategy"] != centre["strategy"] or cand["id"] == centre["id"]:
            continue
        idx = cand.get("index") or {}
        diff = [k for k in knobs if idx.get(k) != mine.get(k)]
        if len(diff) != 1:
            continue
        knob = diff[0]
        found.append(((knobs.index(knob), abs(idx[knob] - mine[knob]), idx[knob]), cand))
    return [c for _key, c in sorted(found, key=lambda kv: kv[0])]


def ranking(measured, by_id):
    """Measured candidate ids, best first (score, then candidate order)."""
    order = dict((c["id"], n) for n, c in enumerate(by_id.values()))
    return sorted(measured, key=lambda cid: (tuple(-x for x in measured[cid]["score"]), order.get(cid, 0)))


def plan(candidates, knobs, measured, units, budget=0, method="auto"):
    """The next round.

    ``candidates``: every candidate with its ``verdict``; ``measured``: ``{id: {"status",
    "points", "score"}}`` of the candidates whose fingerprint is in the journal; ``units``:
    the trial units (each a host name or a list of host names). Returns ``{method, phase,
    picks (one candidate or None per unit), left_out, budget_left, rounds_left, best}``.
    """
    admissible = [c for c in candidates if c.get("verdict") == "ok"]
    by_id = dict((c["id"], c) for c in candidates)
    method = resolve_method(method, len(admissible), budget)
    done_ids = set(cid for cid in measured if cid in by_id)
    spent = len(done_ids)
    left = None if not budget else max(int(budget) - spent, 0)
    slots = len(units) if left is None else min(len(units), left)
    todo = [c for c in admissible if c["id"] not in done_ids]
    ranked = ranking(dict((k, measured[k]) for k in done_ids), by_id)
    best = ranked[0] if ranked and measured[ranked[0]]["score"][0] > 0 else None

    if method == "exhaustive":
        phase = "exhaustive"
        queue = todo
    else:
        queue, _path, phase = _coordinate_queue(admissible, knobs, done_ids, ranked, by_id, measured)
    picks = queue[:slots]
    if not picks:
        phase = "done"
    chosen = set(c["id"] for c in picks)
    left_out = []
    if not picks:
        # the search is over: what it did not measure, and why
        for cand in todo:
            reason = ("budget (%s trials)" % budget) if left == 0 else "not on the descent path"
            left_out.append({"id": cand["id"], "reason": reason})
    rounds = 0
    if picks:
        if method == "exhaustive":
            # every round but the last is full
            remaining = len(queue) if left is None else min(len(queue), left)
            rounds = -(-remaining // max(len(units), 1))
        else:
            # the descent decides each round from the last one's results, and a round may
            # fill fewer units than there are: the bound is one candidate per round
            rounds = len(todo) if left is None else min(len(todo), left)
    out_picks = []
    for n in range(len(units)):
        out_picks.append(picks[n] if n < len(picks) else None)
    return {"method": method, "phase": phase, "picks": out_picks, "left_out": left_out,
            "budget_left": left, "rounds_left": rounds, "measured": spent,
            "best": ({"id": best, "goodput": _metrics_goodput(measured[best])} if best else None),
            "assigned_ids": sorted(chosen)}


def _metrics_goodput(entry):
    return _metrics.goodput(entry["points"], entry["status"])[0]


def _coordinate_queue(admissible, knobs, done_ids, ranked, by_id, measured):
    seed_list = seeds(admissible)
    pending_seeds = [s for s in seed_list if s["id"] not in done_ids]
    path = set(s["id"] for s in seed_list)
    if pending_seeds:
        return pending_seeds, path, "strategies"
    # the best measured candidate of each strategy, best strategy first
    centres, seen = [], set()
    for cid in ranked:
        cand = by_id[cid]
        if cand["strategy"] in seen or cand.get("verdict") != "ok":
            continue
        if measured[cid]["score"][0] == 0:
            continue  # a failed trial is no centre
        seen.add(cand["strategy"])
        centres.append(cand)
    queue, queued = [], set()
    for centre in centres:
        for cand in neighbours(centre, admissible, knobs):
            path.add(cand["id"])
            if cand["id"] in done_ids or cand["id"] in queued:
                continue
            queued.add(cand["id"])
            queue.append(cand)
    return queue, path, "descent"
