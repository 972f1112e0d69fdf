# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection.
"""The verdicts of a host's preflight that need no release: the host's GPUs (count and
memory, from the inventory or from what the doctor read), the layout that fits them, the
model directory, the memory plan and the memory fraction the server will really get.

Everything returns plain data or raises :class:`PreflightError` with the message a user
sees; the module ``gpufleet.sglang.server_preflight`` only strings them together.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._capacity import (
    misfit_warning,
    plan_model,
    unfit_message,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._capacity_model import (
    CannotPlan,
    load_model,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._inputs import (
    count_problem,
    flag_entries,
    is_unset,
    mem_fraction_flags,
    report,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._weights import quick_check
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import (
    StrategyError,
    resolve,
)

#: The GPU inputs: name in the messages, the key in the plan settings, an example.
_GPU_INPUTS = (("sglang_gpu_count", "gpu_count", "8"), ("sglang_gpu_memory_mib", "gpu_memory_mib", "97887"))


class PreflightError(Exception):
    """A refusal, with the message to show."""


def _names(found):
    names = []
    for gpu in found:
        name = gpu.get("name") or "unknown GPU"
        if name not in names:
            names.append(name)
    return ", ".join(names)


def host_gpus(settings, found, host, detail=None):
    """The GPUs the server plans with: ``{count, memory_mib, name, compute_capability, source,
    memory_source}`` (the compute capability when every GPU read has the same one, else None).

    ``settings`` holds ``gpu_count`` and ``gpu_memory_mib`` as the inventory gives them
    (unset: ``None`` or empty); ``found`` is the GPU list the doctor read on the host
    (``[]`` when it read none; ``detail`` says why). An unset value is taken from the host:
    the number of GPUs, and the memory.total of its smallest GPU in MiB. A set value must
    agree with the host. Raises :class:`PreflightError` naming the variable and both numbers.
    """
    given = {}
    problems = []
    for name, key, example in _GPU_INPUTS:
        value = settings.get(key)
        problem = count_problem(name, value, example)
        if problem:
            problems.append(problem)
        elif not is_unset(value):
            given[key] = int(str(value).strip())
    if problems:
        raise PreflightError(report(problems, host))
    found = list(found or [])
    if not found:
        unset = [name for name, key, _example in _GPU_INPUTS if key not in given]
        if unset:
            raise PreflightError(
                "%s: %s %s not set and no GPUs were read on the host (%s); set %s, or make "
                "nvidia-smi work there" % (host, " and ".join(unset), "is" if len(unset) == 1 else "are",
                                           detail or "nvidia-smi found none", " and ".join(unset)))
        return {"count": given["gpu_count"], "memory_mib": given["gpu_memory_mib"], "name": None,
                "compute_capability": None, "source": "inventory", "memory_source": "inventory"}
    names = _names(found)
    count = len(found)
    memories = [g.get("memory_mib") for g in found]
    memory = min(memories) if memories and None not in memories else None
    if "gpu_count" in given and given["gpu_count"] != count:
        problems.append("sglang_gpu_count is %d, but %s has %d GPUs (%s)"
                        % (given["gpu_count"], host, count, names))
    if "gpu_memory_mib" in given and memory is not None and given["gpu_memory_mib"] != memory:
        problems.append("sglang_gpu_memory_mib is %d, but %s has %d MiB %s (%s)"
                        % (given["gpu_memory_mib"], host, memory,
                           "per GPU" if len(set(memories)) == 1 else "on its smallest GPU", names))
    if "gpu_memory_mib" not in given and memory is None:
        problems.append("sglang_gpu_memory_mib is not set and nvidia-smi on %s does not report the "
                        "memory of every GPU (%s); set sglang_gpu_memory_mib (MiB of one GPU)"
                        % (host, names))
    if problems:
        raise PreflightError(report(problems, host))
    ccs = sorted(set(g.get("compute_capability") for g in found if g.get("compute_capability")))
    return {"count": count, "memory_mib": given.get("gpu_memory_mib", memory), "name": names,
            "compute_capability": ccs[0] if len(ccs) == 1 else None,
            "source": "inventory" if "gpu_count" in given else "detected",
            "memory_source": "inventory" if "gpu_memory_mib" in given else "detected"}


def fit_layout(strategy, layout, gpus_per_node, nnodes, host):
    """The layout resolved for ``gpus_per_node`` x ``nnodes`` GPUs (``_strategy.resolve``).

    ``strategy`` is the strategy as the user gave it (for the same messages as on the
    controller); without one, the sizes of ``layout`` are resolved.
    """
    source = strategy if isinstance(strategy, str) and strategy.strip() else dict(
        (k, layout[k]) for k in ("tp", "pp", "ep", "dp") if k in layout)
    try:
        return resolve(source, int(gpus_per_node), int(nnodes or 1))
    except StrategyError as exc:
        raise PreflightError("%s: %s" % (host, exc))


def check_model_dir(model_path, host, commit=None):
    """Refuse a model directory without config.json (the planner and the server need it).

    With ``commit`` (the model step's resolved commit), also refuse a directory without a
    valid verified marker for that commit (gpufleet.sglang.model): a server never starts
    from weights that were not verified, or changed since.
    """
    if not model_path.startswith("/"):
        raise PreflightError(
            "server_model_path: %s is not a directory on %s; the capacity plan needs the "
            "model's config.json on the host (download the model first)" % (model_path, host))
    config = os.path.join(model_path, "config.json")
    if not os.path.isfile(config):
        raise PreflightError(
            "server_model_path: the model directory %s has no config.json (is the model "
            "downloaded to this path on %s?)" % (model_path, host))
    if commit:
        state = quick_check(model_path, commit)
        if not state["verified"]:
            raise PreflightError(
                "server_model_path: the model directory %s on %s is not verified for commit %s "
                "(server_model_commit): %s; run the model step (gpufleet.sglang.model) first"
                % (model_path, host, commit, "; ".join(state["problems"][:5])))


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


def server_setting(extra_args, flag, planner_value):
    """A launch flag's value from ``server_extra_args`` when given there, else the planner's."""
    for _key, value in flag_entries(extra_args, flag):
        if value not in (None, ""):
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
    context = server_setting(extra_args, "context-length", settings.get("context_length") or 0)
    settings["context_length"] = int(context) if _is_count(context) else int(settings.get("context_length") or 0)
    kv_dtype = server_setting(extra_args, "kv-cache-dtype", settings.get("kv_dtype"))
    settings["kv_dtype"] = kv_dtype if isinstance(kv_dtype, str) else settings.get("kv_dtype")
    try:
        spec = load_model(model_path)
        plans = plan_model(
            spec, [(layout["name"], dict((k, layout[k]) for k in ("tp", "pp", "ep", "dp")))],
            int(settings["gpu_count"]), int(settings["gpu_memory_mib"]),
            mem_fraction_static=fraction,
            context_length=settings.get("context_length") or None,
            kv_dtype=settings.get("kv_dtype") or "auto",
            nnodes=int(settings.get("nnodes") or 1),
            release=settings.get("release") or None)
    except CannotPlan as exc:
        raise PreflightError(str(exc))
    result = plans[0]
    result["fraction_from"] = source
    return result, spec.summary().get("warnings", [])


def judge_plan(plan_, host, allow_unfit):
    """Raise on a plan that cannot run or does not fit; return warnings for an allowed misfit.
    The refusal and the warning are ``_capacity``'s (their numbers rounded for a person)."""
    if plan_.get("error"):
        raise PreflightError("%s: %s" % (host, plan_["error"]))
    if plan_.get("fits"):
        return []
    if not allow_unfit:
        raise PreflightError(unfit_message(plan_, host))
    return [misfit_warning(plan_, host)]
