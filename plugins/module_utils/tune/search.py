# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The search: which admissible candidates the next round measures, one per trial unit (a
host or a multi-node group), by the method named in docs/tune.md, and the ranking of what
was measured (ties within the noise go to the candidate with fewer knobs off their base).

Stateless: every call starts from what has been measured (the journal), so a resumed tune
picks up where it stopped and a finished one assigns nothing.

* ``exhaustive``: every admissible candidate in candidate order (within the budget).
* ``coordinate``: strategies first (each strategy's seed, nearest to the base values), then
  a hill-climb over the knobs of the best one or two strategies only (a strategy whose seed
  is clearly worse than the best seed is dropped: ``KEEP_STRATEGIES``, ``KEEP_WITHIN``):
  from each kept strategy's best measured candidate, its step neighbours (one knob moved
  one step along its list of values); the climb moves when a neighbour ranks above the
  centre (beyond the noise) and stops at a centre none of whose step neighbours does.

Why a step hill-climb and not successive halving: a trial is one server load and one fixed
sweep; there is no cheaper, lower-fidelity trial to halve over (the load is the user's), and
the knobs of one strategy are ordered values whose effect is mostly monotone over a
stretch, which a step climb follows with two trials a knob per move.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as _metrics

METHODS = ("auto", "exhaustive", "coordinate")

# The descent climbs from the best KEEP_STRATEGIES strategies (by their seeds) only; a
# strategy whose seed's goodput is below KEEP_WITHIN of the best seed's (or that meets the
# SLO nowhere while the best does, or whose seed failed) is dropped before the descent.
KEEP_STRATEGIES = 2
KEEP_WITHIN = 0.75


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


def off_base(cand):
    """The knobs of a candidate that are off their base (not their first value)."""
    return sorted(k for k, v in (cand.get("index") or {}).items() if v)


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


def steps(centre, admissible, knobs):
    """The step neighbours of ``centre``: admissible candidates of its strategy with one knob
    moved one step along its values (up, then down; a refused value is stepped over to the
    next admissible one in that direction), knob by knob in ``knobs`` order."""
    mine = centre.get("index") or {}
    by_index = {}
    for cand in admissible:
        if cand["strategy"] == centre["strategy"]:
            idx = cand.get("index") or {}
            by_index[tuple(idx.get(k) for k in knobs)] = cand
    found = []
    here = [mine.get(k) for k in knobs]
    for pos, knob in enumerate(knobs):
        if here[pos] is None:
            continue
        for direction in (1, -1):
            value = here[pos] + direction
            while value >= 0:
                key = tuple(here[:pos] + [value] + here[pos + 1:])
                if key in by_index:
                    found.append(by_index[key])
                    break
                if not any(k[pos] is not None and (k[pos] - value) * direction > 0 for k in by_index):
                    break
                value += direction
    return found


def entry(cid, cand, measured_entry, order):
    """What the ranking reads of one measured candidate."""
    score = tuple(measured_entry["score"])
    _value, point = _metrics.goodput(measured_entry.get("points") or [], measured_entry.get("status", "ok"))
    goodput = score[1] if score[0] == 2 else None
    noise = None
    if goodput is not None:
        noise = _metrics.noise(point) if point else goodput * _metrics.NOISE_FLOOR
    return {"id": cid, "score": score, "goodput": goodput, "noise": noise,
            "off_base": off_base(cand), "order": order}


def rank(entries):
    """``(ids best first, tie)``. The candidates whose goodput is within the noise of the
    highest goodput (highest - theirs <= the highest's noise) are tied: among them the one
    with the fewest knobs off their base ranks first (then the higher goodput, then the
    candidate order); every other candidate follows by score. ``tie`` is None when nothing
    ties with the first, else ``{winner, among (ids, highest goodput first), best (the
    highest goodput), noise, margin}``."""
    by_score = sorted(entries, key=lambda e: (tuple(-x for x in e["score"]), e["order"]))
    if not by_score or by_score[0]["goodput"] is None:
        return [e["id"] for e in by_score], None
    top = by_score[0]
    tied = [e for e in by_score if e["goodput"] is not None and top["goodput"] - e["goodput"] <= top["noise"]]
    first = min(tied, key=lambda e: (len(e["off_base"]), -e["goodput"], e["order"]))
    ids = [first["id"]] + [e["id"] for e in by_score if e is not first]
    tie = None
    if len(tied) > 1:
        tie = {"winner": first["id"], "among": [e["id"] for e in tied], "best": top["id"],
               "noise": top["noise"], "margin": top["goodput"] - first["goodput"]}
    return ids, tie


def ranking(measured, by_id):
    """Measured candidate ids, best first (``rank``)."""
    order = dict((c["id"], n) for n, c in enumerate(by_id.values()))
    return rank([entry(cid, by_id[cid], measured[cid], order.get(cid, 0)) for cid in measured])[0]


def kept_strategies(seed_list, measured):
    """``(kept strategies, best first; {dropped strategy: reason})`` once every seed is
    measured (the rule of ``KEEP_STRATEGIES`` and ``KEEP_WITHIN``)."""
    scored = sorted(((tuple(measured[s["id"]]["score"]), n, s) for n, s in enumerate(seed_list)
                     if s["id"] in measured), key=lambda t: (tuple(-x for x in t[0]), t[1]))
    kept, dropped = [], {}
    if not scored:
        return kept, dropped
    top = scored[0][0]
    for score, _n, seed in scored:
        strat = seed["strategy"]
        if score[0] == 0:
            dropped[strat] = "its seed %s failed" % seed["id"]
        elif score[0] < top[0]:
            dropped[strat] = "its seed %s meets the SLO at no concurrency" % seed["id"]
        elif score[1] < KEEP_WITHIN * top[1]:
            dropped[strat] = ("its seed %s reached %.1f, below %d%% of the best seed's %.1f"
                              % (seed["id"], score[1], round(KEEP_WITHIN * 100), top[1]))
        elif len(kept) >= KEEP_STRATEGIES:
            dropped[strat] = ("the descent climbs the best %d strategies only (seed %s, %.1f)"
                              % (KEEP_STRATEGIES, seed["id"], score[1]))
        else:
            kept.append(strat)
    return kept, dropped


def plan(candidates, knobs, measured, units, budget=0, method="auto"):
    """The next round.

    ``candidates``: every candidate with its ``verdict``; ``measured``: ``{id: {"status",
    "points", "score"}}`` of the candidates whose fingerprint is in the journal; ``units``:
    the trial units (each a host name or a list of host names). Returns ``{method, phase,
    picks (one candidate or None per unit), left_out, budget, budget_left, rounds_left,
    best, tie, kept, dropped}``.
    """
    admissible = [c for c in candidates if c.get("verdict") == "ok"]
    by_id = dict((c["id"], c) for c in candidates)
    method = resolve_method(method, len(admissible), budget)
    done_ids = set(cid for cid in measured if cid in by_id)
    spent = len(done_ids)
    left = None if not budget else max(int(budget) - spent, 0)
    slots = len(units) if left is None else min(len(units), left)
    todo = [c for c in admissible if c["id"] not in done_ids]
    order = dict((c["id"], n) for n, c in enumerate(candidates))
    ranked, tie = rank([entry(cid, by_id[cid], measured[cid], order[cid]) for cid in done_ids])
    best = ranked[0] if ranked and measured[ranked[0]]["score"][0] > 0 else None

    kept, dropped = [], {}
    if method == "exhaustive":
        phase = "exhaustive"
        queue = todo
    else:
        queue, phase, kept, dropped = _coordinate_queue(admissible, knobs, done_ids, by_id, measured, order)
    picks = queue[:slots]
    if not picks:
        phase = "done"
    chosen = set(c["id"] for c in picks)
    left_out = []
    if not picks:
        # the search is over: what it did not measure, and why
        for cand in todo:
            if cand["strategy"] in dropped:
                reason = "strategy dropped: %s" % dropped[cand["strategy"]]
            elif left == 0 and queue:
                reason = "budget (%s trials)" % budget
            else:
                reason = "not on the descent path"
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
            reachable = [c for c in todo if c["strategy"] not in dropped]
            rounds = len(reachable) if left is None else min(len(reachable), left)
    out_picks = []
    for n in range(len(units)):
        out_picks.append(picks[n] if n < len(picks) else None)
    return {"method": method, "phase": phase, "picks": out_picks, "left_out": left_out,
            "budget": int(budget or 0), "budget_left": left, "rounds_left": rounds, "measured": spent,
            "best": ({"id": best, "goodput": _metrics_goodput(measured[best])} if best else None),
            "tie": tie, "kept": kept, "dropped": [{"strategy": s, "reason": r} for s, r in sorted(dropped.items())],
            "assigned_ids": sorted(chosen)}


def _metrics_goodput(entry_):
    return _metrics.goodput(entry_["points"], entry_["status"])[0]


def _coordinate_queue(admissible, knobs, done_ids, by_id, measured, order):
    """``(queue, phase, kept strategies, {dropped strategy: reason})``."""
    seed_list = seeds(admissible)
    pending_seeds = [s for s in seed_list if s["id"] not in done_ids]
    if pending_seeds:
        return pending_seeds, "strategies", [], {}
    kept, dropped = kept_strategies(seed_list, measured)
    # the centre of each kept strategy: its best measured candidate (ties: fewer knobs off
    # base), the best strategy's first
    centres = []
    for strat in kept:
        mine = [cid for cid in done_ids if by_id[cid]["strategy"] == strat and measured[cid]["score"][0] > 0]
        ids, _tie = rank([entry(cid, by_id[cid], measured[cid], order[cid]) for cid in mine])
        if ids:
            centres.append(ids[0])
    centres = ranking(dict((c, measured[c]) for c in centres), by_id)
    queue, queued = [], set()
    for cid in centres:
        for cand in steps(by_id[cid], admissible, knobs):
            if cand["id"] in done_ids or cand["id"] in queued:
                continue
            queued.add(cand["id"])
            queue.append(cand)
    return queue, "descent", kept, dropped
