# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection.
"""The verdicts of a host's preflight that need no release: the model directory, the
memory plan and the memory fraction the server will really get.

Everything returns plain data or raises :class:`PreflightError` with the message a user
sees; the module ``gpufleet.sglang.server_preflight`` only strings them together.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.sglang.plugins.module_utils._capacity import plan_model
from ansible_collections.gpufleet.sglang.plugins.module_utils._capacity_model import (
    CannotPlan,
    load_model,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils._inputs import mem_fraction_flags


class PreflightError(Exception):
    """A refusal, with the message to show."""


def check_model_dir(model_path, host):
    """Refuse a model directory without config.json (the planner and the server need it)."""
    if not model_path.startswith("/"):
        raise PreflightError(
            "server_model_path: %s is not a directory on %s; the capacity plan needs the "
            "model's config.json on the host (download the model first)" % (model_path, host))
    config = os.path.join(model_path, "config.json")
    if not os.path.isfile(config):
        raise PreflightError(
            "server_model_path: the model directory %s has no config.json (is the model "
            "downloaded to this path on %s?)" % (model_path, host))


def planned_fraction(planner_fraction, extra_args):
    """The static memory fraction to plan with: the server's own flag wins.

    A ``--mem-fraction-static`` in ``server_extra_args`` is what the server gets, so the
    plan uses it; else the planner's setting (0 or None: SGLang's default for the layout).
    """
    flags = mem_fraction_flags(extra_args)
    if flags:
        return float(flags[-1][1]), "server_extra_args %s" % flags[-1][0]
    if planner_fraction:
        return float(planner_fraction), "capacity_mem_fraction_static"
    return None, "SGLang's default"


def _is_count(value):
    return not isinstance(value, bool) and str(value).strip().isdigit()


def server_setting(extra_args, names, planner_value):
    """A launch flag's value from ``server_extra_args`` when given there, else the planner's."""
    for key, value in sorted((extra_args or {}).items(), key=lambda kv: str(kv[0])):
        if isinstance(key, str) and key.lstrip("-").replace("_", "-") in names and value not in (None, ""):
            return value
    return planner_value


def plan(model_path, layout, settings, extra_args):
    """Plan the layout's GPU memory on this host; the plan dict (with ``fraction_from``).

    What the server gets wins: ``--mem-fraction-static``, ``--context-length`` (the pool
    must hold one request of that length) and ``--kv-cache-dtype`` from ``server_extra_args``
    are planned with when they are set there.
    """
    fraction, source = planned_fraction(settings.get("mem_fraction_static"), extra_args)
    settings = dict(settings)
    # a malformed value is left to the release's flag check, which names it
    context = server_setting(extra_args, ("context-length",), settings.get("context_length") or 0)
    settings["context_length"] = int(context) if _is_count(context) else int(settings.get("context_length") or 0)
    kv_dtype = server_setting(extra_args, ("kv-cache-dtype",), settings.get("kv_dtype"))
    settings["kv_dtype"] = kv_dtype if isinstance(kv_dtype, str) else settings.get("kv_dtype")
    try:
        spec = load_model(model_path)
        plans = plan_model(
            spec, [(layout["name"], dict((k, layout[k]) for k in ("tp", "pp", "ep", "dp")))],
            int(settings["gpu_count"]), int(settings["gpu_memory_mib"]),
            mem_fraction_static=fraction,
            context_length=settings.get("context_length") or None,
            kv_dtype=settings.get("kv_dtype") or "auto",
            nnodes=int(settings.get("nnodes") or 1))
    except CannotPlan as exc:
        raise PreflightError(str(exc))
    result = plans[0]
    result["fraction_from"] = source
    return result, spec.summary().get("warnings", [])


def unfit_message(plan_, host):
    """Why a plan does not fit, with the numbers."""
    need = (" (need %d)" % plan_["context_length"]) if plan_.get("context_length") else ""
    return (
        "%s: strategy %s does not fit %s x %s MiB: weights %s-%s GiB per GPU, budget %s GiB at "
        "mem_fraction_static %s (%s), KV margin %s GiB, %s KV tokens%s; recommended "
        "mem_fraction_static: %s. Set capacity_allow_unfit=true to deploy anyway."
        % (host, plan_["name"], plan_["gpus"], plan_["gpu_memory_mib"],
           plan_["weights_per_gpu_min_gib"], plan_["weights_per_gpu_max_gib"], plan_["budget_gib"],
           plan_["mem_fraction_static"], plan_.get("fraction_from", "planned"), plan_["margin_gib"],
           plan_["kv_tokens"], need, plan_.get("recommended_mem_fraction_static") or "none fits"))


def judge_plan(plan_, host, allow_unfit):
    """Raise on a plan that cannot run or does not fit; return warnings for an allowed misfit."""
    if plan_.get("error"):
        raise PreflightError("%s: %s" % (host, plan_["error"]))
    if plan_.get("fits"):
        return []
    if not allow_unfit:
        raise PreflightError(unfit_message(plan_, host))
    return ["%s: strategy %s does not fit (KV margin %s GiB); going on because "
            "capacity_allow_unfit is set" % (host, plan_["name"], plan_["margin_gib"])]
