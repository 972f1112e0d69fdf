# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Parallelism strategies: the one strategy table and the strategy grammar.

A strategy names how one SGLang server spreads a model over GPUs:

* presets: ``tp8``, ``pp8``, ``ep8`` (tp 8 with ep 8) and ``ep4`` (tp 8 with ep 4);
* the grammar ``tp<N>[-pp<N>][-ep<N>][-dp<N>]``, e.g. ``tp16`` over two hosts or
  ``tp8-pp2``; a leading ``pp<N>`` (tp 1) is accepted as well, as in the ``pp8`` preset.

``dp`` is DP attention: the TP group's attention layers split into ``dp`` data-parallel
groups (the MoE and MLP layers keep the full TP split), on ``tp * pp`` GPUs. The collection
renders it in each release's own spelling (``_sglang_argv``): ``--dp-size N
--enable-dp-attention`` up to 0.5.9, ``--attn-dp-size N`` from 0.5.23 (where the old pair is
deprecated). ``--dp-size N`` alone would mean something else to SGLang: N full replicas of
the ``tp * pp`` group on ``tp * pp * N`` GPUs (0.5.9 ``srt/server_args.py:2109-2125``: DP
attention only with ``enable_dp_attention``; ``data_parallel_controller.py`` places the
replicas on consecutive GPU ids), which is not a strategy here (the capacity planner can
still plan it with ``dp_attention=False``).

SGLang's rules that a layout must obey before any server is touched:

* ``tp * pp`` GPUs per server (:func:`gpus_needed`) equal the GPUs the server's hosts
  have (``gpus_per_node * nnodes``);
* the expert-parallel size divides the tensor-parallel size (SGLang runs EP inside the
  TP group: ``--ep-size`` must divide ``--tp-size``);
* the DP-attention size divides the tensor-parallel size (0.5.9
  ``srt/server_args.py:2116`` ``assert self.tp_size % self.dp_size == 0``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

#: The one strategy table: preset name -> layout. Everything else derives from it.
PRESETS = {
    "tp8": {"tp": 8, "pp": 1, "ep": 1, "dp": 1},
    "pp8": {"tp": 1, "pp": 8, "ep": 1, "dp": 1},
    "ep8": {"tp": 8, "pp": 1, "ep": 8, "dp": 1},
    "ep4": {"tp": 8, "pp": 1, "ep": 4, "dp": 1},
}

VALID_FORMS = (
    "presets " + ", ".join(sorted(PRESETS))
    + "; or tp<N>[-pp<N>][-ep<N>][-dp<N>] (e.g. tp8, tp8-ep8, tp8-pp2, tp16, tp8-dp8), "
    "or pp<N>[-ep<N>]"
)

_GRAMMAR = re.compile(
    r"^(?:tp(?P<tp>[1-9][0-9]*)(?:-pp(?P<pp>[1-9][0-9]*))?|pp(?P<pp_only>[1-9][0-9]*))"
    r"(?:-ep(?P<ep>[1-9][0-9]*))?(?:-dp(?P<dp>[1-9][0-9]*))?$"
)

_MAX_SIZE = 4096


class StrategyError(ValueError):
    """A strategy name or layout that SGLang cannot run."""


def parse_strategy(name):
    """Turn a strategy name into a layout dict ``{tp, pp, ep, dp}``.

    Raises StrategyError naming the input and the valid forms.
    """
    if isinstance(name, dict):
        return normalize_layout(name)
    if not isinstance(name, str):
        raise StrategyError(
            "strategy must be a string, got %s %r; valid forms: %s"
            % (type(name).__name__, name, VALID_FORMS)
        )
    text = name.strip().lower()
    if text in PRESETS:
        return dict(PRESETS[text])
    match = _GRAMMAR.match(text)
    if not match:
        raise StrategyError(
            "unknown strategy %s; valid forms: %s" % (_shorten(name), VALID_FORMS)
        )
    groups = match.groupdict()
    layout = {
        "tp": int(groups["tp"] or 1),
        "pp": int(groups["pp"] or groups["pp_only"] or 1),
        "ep": int(groups["ep"] or 1),
        "dp": int(groups["dp"] or 1),
    }
    return normalize_layout(layout, source=name)


def normalize_layout(layout, source=None):
    """Check a layout dict's sizes (positive integers) and fill missing ones with 1."""
    label = _shorten(source if source is not None else layout)
    if not isinstance(layout, dict):
        raise StrategyError("layout %s must be a mapping of tp/pp/ep/dp sizes" % label)
    unknown = sorted(set(layout) - {"tp", "pp", "ep", "dp"})
    if unknown:
        raise StrategyError(
            "layout %s has unknown keys %s; allowed: tp, pp, ep, dp" % (label, ", ".join(unknown))
        )
    result = {}
    for key in ("tp", "pp", "ep", "dp"):
        value = layout.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and value.strip().isdigit():
                value = int(value.strip())
            else:
                raise StrategyError(
                    "%s size in %s must be a positive integer, got %r" % (key, label, value)
                )
        if value < 1 or value > _MAX_SIZE:
            raise StrategyError(
                "%s size in %s must be between 1 and %d, got %d" % (key, label, _MAX_SIZE, value)
            )
        result[key] = value
    if result["tp"] % result["ep"]:
        raise StrategyError(
            "strategy %s: ep %d does not divide tp %d (SGLang runs expert parallelism "
            "inside the tensor-parallel group)" % (label, result["ep"], result["tp"])
        )
    if result["tp"] % result["dp"]:
        raise StrategyError(
            "strategy %s: dp %d does not divide tp %d (dp is DP attention, which splits the "
            "tensor-parallel group)" % (label, result["dp"], result["tp"])
        )
    return result


def strategy_name(layout):
    """The canonical name of a layout: a preset name where one matches, else the grammar."""
    layout = normalize_layout(layout)
    for name, preset in sorted(PRESETS.items()):
        if preset == layout:
            return name
    parts = ["tp%d" % layout["tp"]]
    for key in ("pp", "ep", "dp"):
        if layout[key] > 1:
            parts.append("%s%d" % (key, layout[key]))
    return "-".join(parts)


def gpus_needed(layout, dp_attention=True):
    """GPUs one server of ``layout`` runs on: the collection's one GPU-count rule.

    ``tp * pp``: a strategy's dp is DP attention, which splits the TP group; then dp must
    divide tp (StrategyError otherwise). ``dp_attention=False`` counts plain ``--dp-size N``
    replicas instead: ``tp * pp * dp`` (the capacity planner's replica mode).
    """
    tp, pp, dp = (int(layout.get(key, 1)) for key in ("tp", "pp", "dp"))
    if dp_attention:
        if tp % dp:
            raise StrategyError(
                "dp %d does not divide tp %d (DP attention splits the tensor-parallel group)"
                % (dp, tp))
        return tp * pp
    return tp * pp * dp


def gpu_formula(layout, dp_attention=True):
    """How :func:`gpus_needed` counted, for messages: ``'tp*pp*dp = 4*1*2 = 8'``."""
    if dp_attention or int(layout.get("dp", 1)) == 1:
        return "tp*pp = %d*%d = %d" % (layout["tp"], layout["pp"], gpus_needed(layout, dp_attention))
    return "tp*pp*dp = %d*%d*%d = %d" % (layout["tp"], layout["pp"], layout["dp"],
                                         gpus_needed(layout, dp_attention=False))


def check_fits(layout, gpus_per_node, nnodes=1, source=None, dp_attention=True):
    """Raise StrategyError unless :func:`gpus_needed` equals the GPUs of the server's hosts."""
    if source is None:
        try:
            source = strategy_name(layout)
        except StrategyError:  # a replica layout (dp_attention=False) that is no strategy
            source = layout
    label = _shorten(source)
    for what, value in (("GPU count", gpus_per_node), ("node count", nnodes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StrategyError(
                "%s must be a positive integer for strategy %s, got %r" % (what, label, value)
            )
    try:
        need = gpus_needed(layout, dp_attention)
    except StrategyError as exc:
        raise StrategyError("strategy %s: %s" % (label, exc))
    have = gpus_per_node * nnodes
    if need != have:
        counted = gpu_formula(layout, dp_attention)
        raise StrategyError(
            "strategy %s needs %s GPUs, but the server has %d "
            "(%d node(s) x %d GPUs); %s must equal the GPU count"
            % (label, counted, have, nnodes, gpus_per_node, counted.split(" = ")[0])
        )


def resolve(strategy, gpus_per_node, nnodes=1):
    """Parse and check a strategy for a server of ``nnodes`` hosts; return the full plan."""
    layout = parse_strategy(strategy)
    check_fits(layout, gpus_per_node, nnodes, source=strategy if isinstance(strategy, str) else None)
    plan = dict(layout)
    plan["name"] = strategy_name(layout)
    plan["nnodes"] = nnodes
    plan["gpus"] = gpus_needed(layout)
    return plan


def _shorten(value, limit=80):
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    return repr(text[:limit] + ("..." if len(text) > limit else ""))
