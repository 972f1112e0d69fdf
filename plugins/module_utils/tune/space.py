# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The search space: strategies x knob values, checked all at once against the installed
release's ``--help`` (the flags ``_sglang_help.parse_help`` returns)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

import itertools

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_argv import normalize_flag
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import resolve
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import (
    StrategyError,
    parse_strategy,
    strategy_name,
)

# Flags the strategy sets; a knob may not set them behind its back.
STRATEGY_FLAGS = ("--tp-size", "--tensor-parallel-size", "--tp", "--pp-size",
                  "--pipeline-parallel-size", "--ep-size", "--expert-parallel-size", "--ep",
                  "--dp-size", "--data-parallel-size", "--dp", "--enable-dp-attention",
                  "--attn-dp-size", "--nnodes", "--node-rank", "--dist-init-addr")
# Flags the deploy path sets for every server.
OWNED_FLAGS = ("--model-path", "--host", "--port", "--served-model-name", "--api-key",
               "--admin-api-key")

SPACE_KEYS = ("strategies", "knobs", "fixed")


class SpaceError(ValueError):
    """The space is not valid; ``problems`` lists every problem."""

    def __init__(self, problems):
        super(SpaceError, self).__init__("; ".join(problems))
        self.problems = list(problems)


def _is_scalar(value):
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _check_value(flag, spec, value, release, where):
    """The problem with one value of a flag, or None."""
    takes = bool(spec.get("takes_value", True))
    if value is None:
        return None
    if not takes:
        if isinstance(value, bool):
            return None
        return ("%s %s: the value %r is not a switch value (use true or false); %s takes no "
                "value in sglang %s" % (where, flag, value, flag, release))
    if isinstance(value, bool):
        if value:
            return ("%s %s: the value true does not fit a flag that takes a value in sglang %s"
                    % (where, flag, release))
        return None
    if isinstance(value, (list, tuple)):
        if not spec.get("nargs"):
            return ("%s %s: the value %r is a list, and %s takes one value in sglang %s"
                    % (where, flag, value, flag, release))
        bad = [v for v in value if not _is_scalar(v)]
        if bad:
            return "%s %s: the value %r holds a non-scalar in sglang %s" % (where, flag, value, release)
        return None
    if not _is_scalar(value):
        return ("%s %s: the value %r is not a scalar (string or number) in sglang %s"
                % (where, flag, value, release))
    choices = spec.get("choices")
    if choices and str(value) not in [str(c) for c in choices]:
        return ("%s %s: the value %r is not one of sglang %s's choices %s"
                % (where, flag, value, release, ", ".join(str(c) for c in choices)))
    return None


def _check_flag(flags, name, release, where, problems):
    """(key, spec) of a flag of the release, or None after adding the problem."""
    flag = normalize_flag(name)
    if flag in STRATEGY_FLAGS:
        problems.append("%s %s: the strategy sets %s; list the layout in strategies instead "
                        "(sglang %s)" % (where, name, flag, release))
        return None
    if flag in OWNED_FLAGS:
        problems.append("%s %s: the deploy path sets %s for every server (sglang %s)"
                        % (where, name, flag, release))
        return None
    key = resolve(flags, flag)
    if key is None:
        problems.append("%s %s: sglang %s's launch_server --help has no such flag"
                        % (where, name, release))
        return None
    spec = flags[key]
    if spec.get("deprecated"):
        problems.append("%s %s: the flag is deprecated in sglang %s" % (where, name, release))
        return None
    return flag, spec


def _not_a_knob(checked, values, problems, clash):
    """``checked`` (what :func:`_check_flag` returned) unless its flag is among the knobs in
    ``values`` already: then None after adding the problem ``clash``."""
    if checked is not None and checked[0] in values:
        problems.append(clash)
        return None
    return checked


def shape_problems(space):
    """The problems of the space's shape alone, before the release is known (``tune_plan
    mode: check``): a mapping of strategies (the collection's grammar), knobs (flag to a
    non-empty list of values) and fixed (flag to one value). The flags and their values are
    checked against the release by :func:`expand`."""
    if not isinstance(space, dict):
        return ["tune_space must be a mapping with strategies, knobs and fixed, got %r" % (space,)]
    problems = []
    strategies = _keys_and_strategies(space, problems)
    for strategy in strategies:
        try:
            parse_strategy(strategy)
        except StrategyError as exc:
            problems.append("tune_space.strategies %r: %s" % (strategy, exc))
    knobs = space.get("knobs") or {}
    if not isinstance(knobs, dict):
        problems.append("tune_space.knobs must map a flag to its list of values, got %r" % (knobs,))
        knobs = {}
    for name, vals in knobs.items():
        if not isinstance(vals, list) or not vals:
            problems.append("tune_space.knobs %s: give a list of at least one value, got %r" % (name, vals))
    fixed = space.get("fixed") or {}
    if not isinstance(fixed, dict):
        problems.append("tune_space.fixed must map a flag to one value, got %r" % (fixed,))
    return problems


def _keys_and_strategies(space, problems):
    """The space's strategies as a list (a comma-separated string split), appending to
    ``problems`` its unknown keys and a missing or empty strategy list."""
    unknown = sorted(set(space) - set(SPACE_KEYS), key=str)
    if unknown:
        problems.append("tune_space: unknown keys %s (known: %s)"
                        % (", ".join(str(k) for k in unknown), ", ".join(SPACE_KEYS)))
    strategies = space.get("strategies")
    if isinstance(strategies, str):
        strategies = [s.strip() for s in strategies.split(",") if s.strip()]
    if not isinstance(strategies, list) or not strategies:
        problems.append("tune_space.strategies must list at least one strategy, got %r" % (strategies,))
        strategies = []
    return strategies


def expand(space, flags, release):
    """``{"candidates": [...], "knobs": [flag...], "strategies": [...]}`` of a space.

    Raises :class:`SpaceError` listing every problem at once.
    """
    release = release or "(unknown release)"
    problems = []
    if not isinstance(space, dict):
        raise SpaceError(["tune_space must be a mapping with strategies, knobs and fixed, got %r"
                          % (space,)])
    if not isinstance(flags, dict) or not flags:
        problems.append("the flags of sglang %s's --help are missing (server_flags with "
                        "return_flags: true)" % release)
        flags = {}
    strategies = _keys_and_strategies(space, problems)
    seen = set()
    names = []
    layouts = {}
    for strategy in strategies:
        try:
            layout = parse_strategy(strategy)
        except StrategyError as exc:
            problems.append("tune_space.strategies %r: %s" % (strategy, exc))
            continue
        name = str(strategy).strip().lower()
        if name in seen:
            problems.append("tune_space.strategies %r: listed twice" % (strategy,))
            continue
        seen.add(name)
        names.append(name)
        layouts[name] = dict(layout, name=strategy_name(layout))

    knobs = space.get("knobs") or {}
    fixed = space.get("fixed") or {}
    if not isinstance(knobs, dict):
        problems.append("tune_space.knobs must map a flag to its list of values, got %r" % (knobs,))
        knobs = {}
    if not isinstance(fixed, dict):
        problems.append("tune_space.fixed must map a flag to one value, got %r" % (fixed,))
        fixed = {}
    knob_order, values = [], {}
    for name, vals in knobs.items():
        checked = _check_flag(flags, name, release, "tune_space.knobs", problems)
        if not isinstance(vals, list) or not vals:
            problems.append("tune_space.knobs %s: give a list of at least one value, got %r"
                            % (name, vals))
            continue
        checked = _not_a_knob(checked, values, problems,
                              "tune_space.knobs %s: the same flag is listed twice" % name)
        if checked is None:
            continue
        flag, spec = checked
        bad = [p for p in (_check_value(flag, spec, v, release, "tune_space.knobs") for v in vals) if p]
        problems.extend(bad)
        dupes = [v for i, v in enumerate(vals) if v in vals[:i]]
        if dupes:
            problems.append("tune_space.knobs %s: values listed twice: %r" % (name, dupes))
        if not bad and not dupes:
            knob_order.append(flag)
            values[flag] = list(vals)
    fixed_args = {}
    for name, val in fixed.items():
        checked = _check_flag(flags, name, release, "tune_space.fixed", problems)
        checked = _not_a_knob(checked, values, problems,
                              "tune_space.fixed %s: the flag is a knob too" % name)
        if checked is None:
            continue
        flag, spec = checked
        problem = _check_value(flag, spec, val, release, "tune_space.fixed")
        if problem:
            problems.append(problem)
            continue
        if val is not None and val is not False:
            fixed_args[flag] = val
    if problems:
        raise SpaceError(problems)
    candidates = []
    axes = [list(enumerate(values[k])) for k in knob_order]
    width = max(2, len(str(len(names) * max(1, _product(len(values[k]) for k in knob_order)))))
    for strategy in names:
        for combo in itertools.product(*axes) if axes else [()]:
            extra = dict(fixed_args)
            chosen, index = {}, {}
            for flag, (pos, val) in zip(knob_order, combo):
                chosen[flag] = val
                index[flag] = pos
                if val is not None and val is not False:
                    extra[flag] = val
            number = len(candidates) + 1
            candidates.append({
                "id": "c%0*d-%s" % (width, number, strategy),
                "strategy": strategy,
                "layout": dict(layouts[strategy]),
                "extra_args": extra,
                "knobs": chosen,
                "index": index,
            })
    return {"candidates": candidates, "knobs": knob_order, "strategies": names}


def _product(numbers):
    out = 1
    for n in numbers:
        out *= n
    return out
