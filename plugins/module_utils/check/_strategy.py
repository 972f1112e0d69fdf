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

A **prefill/decode (PD) layout** splits serving into prefill servers and decode servers
(SGLang's ``--disaggregation-mode prefill|decode``), each role with its own one-server
layout and its number of servers. Its grammar (:func:`parse_pd`)::

    pd_layout := role "+" role            one prefill role and one decode role, either order
    role      := ("prefill" | "decode") ":" [count "x"] layout
    count     := a positive integer: the role's servers (1 when left out)
    layout    := one server's strategy, any form above (a preset or tp<N>[-pp<N>][-ep<N>][-dp<N>])

e.g. ``prefill:ep8+decode:2xep8`` (one prefill server on ep8, two decode servers on ep8:
"1P2D"), ``prefill:2xep8+decode:ep8`` (2P1D), ``prefill:tp16+decode:2xep8`` (a prefill
server over two hosts of 8 GPUs, the existing multi-node path). Case and blanks around
the words do not count; the canonical name (:func:`pd_name`) puts prefill first and leaves
a count of 1 out. There is no comma in it, so a comma-separated list of strategies (the
tune's and the planner's ``strategies``) can hold PD layouts. Each role's layout obeys the
rules below for its own servers; which hosts (or which GPUs of a host) serve each role is
``_pd_roles.assign``'s to decide, and the role's flags ``_pd.role_flags``'s.
:func:`parse_strategy` refuses a PD layout (it names one server's layout): a step that
takes one server's layout says so instead of misreading it.

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

#: The roles of a PD layout, in their canonical order.
PD_ROLES = ("prefill", "decode")

#: The PD grammar, for messages.
PD_FORM = ("prefill:[<N>x]<layout>+decode:[<N>x]<layout>, each <layout> one server's strategy "
           "(e.g. prefill:ep8+decode:2xep8: one prefill server on ep8, two decode servers on ep8)")

_PD_ROLE = re.compile(r"^(?P<role>[a-z]+)\s*:\s*(?:(?P<count>[0-9]+)\s*x\s*)?(?P<layout>\S*)$")

#: The most servers one role may have.
_MAX_SERVERS = 1024

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
    if is_pd(text):
        raise StrategyError(
            "strategy %s is a prefill/decode (PD) layout: it names the servers of two roles, "
            "and this step takes one server's layout (%s)" % (_shorten(name), VALID_FORMS))
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


def is_pd(name):
    """Whether ``name`` is written as a PD layout (it has a ``:`` or a ``+``), well formed or
    not: :func:`parse_pd` is then the parser whose message fits."""
    return isinstance(name, str) and (":" in name or "+" in name)


def parse_pd(name):
    """Turn a PD layout into its roles: ``{"prefill": {"count", "layout", "name", "gpus"},
    "decode": {...}}``; ``layout`` is :func:`parse_strategy`'s dict of that role's one
    server, ``name`` its canonical name, ``gpus`` what one server of it needs
    (:func:`gpus_needed`).

    Raises StrategyError naming the input, the role and the PD form.
    """
    if not isinstance(name, str):
        raise StrategyError("a PD layout must be a string, got %s %r; form: %s"
                            % (type(name).__name__, name, PD_FORM))
    label = _shorten(name)
    parts = name.strip().lower().split("+")
    if len(parts) != 2:
        raise StrategyError("PD layout %s must name two roles joined by one '+' (got %d part%s); "
                            "form: %s" % (label, len(parts), "" if len(parts) == 1 else "s", PD_FORM))
    roles = {}
    for part in parts:
        match = _PD_ROLE.match(part.strip())
        if not match:
            raise StrategyError("PD layout %s: %s is not <role>:[<N>x]<layout>; form: %s"
                                % (label, _shorten(part.strip()), PD_FORM))
        role = match.group("role")
        if role not in PD_ROLES:
            raise StrategyError("PD layout %s: unknown role %s; the roles are prefill and decode; "
                                "form: %s" % (label, _shorten(role), PD_FORM))
        if role in roles:
            raise StrategyError("PD layout %s names %s twice; it needs one prefill and one decode "
                                "role; form: %s" % (label, role, PD_FORM))
        count = match.group("count")
        if count is not None and not (count.isdigit() and count[0] != "0"
                                      and 1 <= int(count) <= _MAX_SERVERS):
            raise StrategyError("PD layout %s: the %s count must be between 1 and %d servers, got %s"
                                % (label, role, _MAX_SERVERS, count))
        if not match.group("layout"):
            raise StrategyError("PD layout %s: the %s role has no layout; form: %s"
                                % (label, role, PD_FORM))
        try:
            layout = parse_strategy(match.group("layout"))
        except StrategyError as exc:
            raise StrategyError("PD layout %s, %s role: %s" % (label, role, exc))
        roles[role] = {"count": int(count or 1), "layout": layout, "name": strategy_name(layout),
                       "gpus": gpus_needed(layout)}
    missing = [r for r in PD_ROLES if r not in roles]
    if missing:
        raise StrategyError("PD layout %s has no %s role; form: %s" % (label, missing[0], PD_FORM))
    return roles


def pd_name(roles):
    """The canonical name of a PD layout (:func:`parse_pd`'s roles, or its text): prefill
    first, a count of 1 left out, each layout by :func:`strategy_name`."""
    if isinstance(roles, str):
        roles = parse_pd(roles)
    parts = []
    for role in PD_ROLES:
        spec = roles[role]
        count = int(spec.get("count", 1))
        parts.append("%s:%s%s" % (role, "" if count == 1 else "%dx" % count,
                                  strategy_name(spec["layout"])))
    return "+".join(parts)


def pd_gpus(roles):
    """GPUs of a whole PD layout: every server of both roles."""
    return sum(int(roles[r]["count"]) * gpus_needed(roles[r]["layout"]) for r in PD_ROLES)


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
