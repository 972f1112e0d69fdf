# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection.
"""The semantic gate: the installed release's own argument preparation and checks.

``launch_server`` does, before any GPU work (0.5.9 ``launch_server.py:32`` ->
``srt/server_args.py:5568`` ``prepare_server_args`` -> ``ServerArgs.__post_init__``
(``:703``), then ``Engine`` calls ``check_server_args`` (``:5130``); 0.5.23
``launch_server.py`` ``prepare_server_args`` (``srt/server_args.py:668``) ->
``resolve_once`` (``:244``) -> ``check_server_args`` (``:508``, from
``srt/entrypoints/engine.py:1165``)):

1. parse the argv with the release's own argparse;
2. derive defaults and adjust what was asked (the ``_handle_*`` steps / the resolution
   pipeline): memory fraction, chunked prefill, CUDA-graph batch sizes, attention backend,
   DP attention, expert parallel size, overlap schedule;
3. refuse impossible combinations (``check_server_args``).

:data:`GATE_CODE` runs exactly those three steps in the deploy venv's Python, with the GPU
queries answered from what the doctor read on the host (count, compute capability,
memory, name), so no CUDA context is created, no GPU memory is allocated and no engine is
started. It prints one JSON object: the verdict, the values asked, the values derived, and
the warnings the release logged while deriving. Every release the collection knows has
both functions: 0.4.6.post5 (``srt/server_args.py:1469`` / ``:1434``) and 0.5.4.post3
(``:3950`` / ``:3649``) derive in ``__post_init__`` as 0.5.9 does; only 0.5.23 moved the
derivation out of construction into ``resolve_once``, which the gate calls when present.
(0.4.6.post5 does not clear ``--enable-dp-attention`` at dp 1.) A release without
``check_server_args`` would report ``checks: "none"``.

The answer is cached per release fingerprint, exact argv and GPU model
(:func:`cache_path`), as the argparse verdict is (``_sglang_probe``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _server_args_gate_program
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._command import run
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_probe import (
    help_env,
    read_json,
    write_json,
)


def _program_source(module):
    """The source text of ``module``, from its loader (a file, or the zip of a module's
    payload on a host)."""
    loader = getattr(module, "__loader__", None)
    text = loader.get_source(module.__name__) if loader is not None else None
    if text is None:
        with open(module.__file__, encoding="utf-8") as handle:
            text = handle.read()
    if isinstance(text, bytes):  # ansible-core's collection loader answers bytes
        text = text.decode("utf-8")
    return text


#: The values the gate reports, asked vs derived. Names are ``ServerArgs`` fields; a
#: release that lacks one leaves it out.
KEYS = (
    "tp_size", "pp_size", "ep_size", "dp_size", "attn_dp_size", "moe_dp_size",
    "enable_dp_attention", "mem_fraction_static", "chunked_prefill_size",
    "cuda_graph_max_bs", "cuda_graph_bs", "cuda_graph_max_bs_decode",
    "cuda_graph_bs_decode", "disable_cuda_graph", "disable_decode_cuda_graph", "cuda_graph_backend_decode",
    "attention_backend", "prefill_attention_backend", "decode_attention_backend",
    "disable_overlap_schedule", "moe_a2a_backend", "deepep_mode", "moe_runner_backend",
    "enable_mixed_chunk", "max_running_requests", "page_size", "kv_cache_dtype",
    "device", "nnodes", "node_rank", "enable_dp_lm_head", "speculative_algorithm",
)

# Runs in the release's Python: python -c GATE_CODE '<json request>'. The program is the
# source of _server_args_gate_program (a real .py file), shipped in the module's payload.
GATE_CODE = _program_source(_server_args_gate_program)

MARKER = "GPUFLEET-GATE "


def request(argv, gpu, keys=KEYS, stub_modules=()):
    """The JSON request GATE_CODE reads: argv and the GPU answers (count, cc, memory, name)."""
    return json.dumps({"argv": list(argv), "keys": list(keys), "stub_modules": list(stub_modules), "gpu": {
        "count": int(gpu["count"]), "cc": [int(x) for x in gpu["cc"]],
        "memory_mib": int(gpu["memory_mib"]), "name": str(gpu.get("name") or "unknown GPU")}})


def parse_output(stdout):
    """The gate's JSON answer from its stdout; ValueError when there is none."""
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    raise ValueError("the server-args gate printed no answer")


def cache_path(cache_dir, fp, argv, gpu):
    """Per release fingerprint, exact argv and GPU model (name, count, cc, memory)."""
    seed = json.dumps([fp, list(argv), gpu.get("name"), int(gpu["count"]),
                       [int(x) for x in gpu["cc"]], int(gpu["memory_mib"])])
    return os.path.join(cache_dir, "server-args-%s.json" % _files.digest_bytes(seed, "sha1"))


class GateError(Exception):
    """The gate could not run (not a refusal by the release); carries the command result."""

    def __init__(self, msg, result=None):
        super(GateError, self).__init__(msg)
        self.result = result


def gpu_of(gpus):
    """The GPU answers from the preflight's ``gpus`` (count, memory, name, compute capability).

    None when the host's compute capability or name was not read (an inventory-only plan):
    the release's derivations depend on them, so the gate does not guess.
    """
    cc = gpus.get("compute_capability")
    if not cc or not gpus.get("name") or not gpus.get("count") or not gpus.get("memory_mib"):
        return None
    major, _dot, minor = str(cc).partition(".")
    return {"count": int(gpus["count"]), "cc": [int(major), int(minor or 0)],
            "memory_mib": int(gpus["memory_mib"]), "name": gpus["name"]}


def ask(module, python, info, argv, gpu, cache_dir, timeout):
    """The release's own verdict on ``argv`` for ``gpu``: ``(answer, cached)``.

    Only an acceptance is cached (a refusal is asked again after the user's fix).
    Raises :class:`GateError` when the gate itself could not run.
    """
    path = cache_path(cache_dir, info["fingerprint"], argv, gpu)
    cached = read_json(path)
    if isinstance(cached, dict) and cached.get("argv") == list(argv) and cached.get("verdict") == "ok":
        return cached, True
    result = run(module, [python, "-c", GATE_CODE, request(argv, gpu)], timeout=timeout,
                 env=help_env(200))
    try:
        answer = parse_output(result.stdout)
    except ValueError:
        if result.timed_out:
            raise GateError("the server-args check timed out after %ss" % timeout, result)
        raise GateError("the server-args check of sglang %s failed (rc=%s)"
                        % (info["version"], result.rc), result)
    answer["gate_seconds"] = round(result.elapsed, 2)
    if answer.get("verdict") == "ok" and not module.check_mode:
        error = write_json(path, answer)
        if error:
            module.warn(error)
    return answer, False


def _int(value, default=1):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


#: The launch flags that ask for each effective setting (any alias, any release).
ASKED_BY = {
    "tp": ("--tp-size", "--tensor-parallel-size"),
    "pp": ("--pp-size", "--pipeline-parallel-size"),
    "ep": ("--ep-size", "--expert-parallel-size", "--ep"),
    "dp replicas": ("--dp-size", "--data-parallel-size"),
    "DP attention": ("--enable-dp-attention", "--attn-dp-size", "--attention-data-parallel-size"),
    "overlap schedule": ("--disable-overlap-schedule",),
    "MoE all-to-all backend": ("--moe-a2a-backend",),
    "mixed chunked prefill": ("--enable-mixed-chunk",),
    "CUDA graphs": ("--disable-cuda-graph", "--cuda-graph-backend-decode"),
}


def effective(values):
    """What a set of ServerArgs values means, the same way for every release.

    0.5.9 counts attention-DP groups in ``dp_size`` next to ``enable_dp_attention``
    (0.5.9 ``srt/server_args.py:2109-2125``); 0.5.23 moves that width to ``attn_dp_size``
    and keeps ``dp_size`` for replicas (0.5.23 ``srt/arg_groups/parallel_hook.py:39-61``).
    """
    attn = _int(values.get("attn_dp_size"))
    dp_attention = bool(values.get("enable_dp_attention")) or attn > 1
    if attn <= 1 and values.get("enable_dp_attention"):
        attn = _int(values.get("dp_size"))
    return {
        "tp": _int(values.get("tp_size")),
        "pp": _int(values.get("pp_size")),
        "ep": _int(values.get("ep_size")),
        "dp replicas": 1 if dp_attention else _int(values.get("dp_size")),
        "DP attention": ("on (%d groups)" % attn) if dp_attention else "off",
        "overlap schedule": "off" if values.get("disable_overlap_schedule") else "on",
        "MoE all-to-all backend": values.get("moe_a2a_backend") or "none",
        "mixed chunked prefill": "on" if values.get("enable_mixed_chunk") else "off",
        "CUDA graphs": "off" if (values.get("disable_cuda_graph")
                                 or values.get("cuda_graph_backend_decode") == "disabled") else "on",
    }


def _flags_in(argv):
    return set(a.split("=", 1)[0] for a in argv or () if a.startswith("--"))


def changes(answer):
    """What the release changed against what was asked: ``[{what, asked, derived, explicit}]``.

    ``explicit`` is true when the launch flags asked for the value (a flag in the argv), false
    when the release changed its own default (e.g. the overlap schedule under pp > 1).
    """
    asked = effective(answer.get("asked") or {})
    derived = effective(answer.get("derived") or {})
    given = _flags_in(answer.get("argv"))
    return [{"what": key, "asked": asked[key], "derived": derived[key],
             "explicit": bool(given.intersection(ASKED_BY[key]))}
            for key in asked if asked[key] != derived[key]]


def change_text(change, version):
    if change["explicit"]:
        return "sglang %s changes %s from %s (asked by the launch flags) to %s" % (
            version, change["what"], change["asked"], change["derived"])
    return "sglang %s changes %s from its default %s to %s" % (
        version, change["what"], change["asked"], change["derived"])


def refusals(answer):
    """The changes ``sglang_strict`` refuses: those of values the launch flags asked for."""
    return [c for c in changes(answer) if c["explicit"]]


def summary(answer, version):
    """The record of the gate for the deploy output and the deployment record."""
    derived = answer.get("derived") or {}
    keys = ("mem_fraction_static", "chunked_prefill_size", "cuda_graph_max_bs",
            "attention_backend", "disable_overlap_schedule", "moe_a2a_backend",
            "tp_size", "pp_size", "ep_size", "dp_size", "attn_dp_size", "enable_dp_attention")
    found = changes(answer)
    return {
        "verdict": answer.get("verdict"),
        "checks": answer.get("checks"),
        "error": answer.get("error"),
        "where": answer.get("where"),
        "derived": dict((k, derived[k]) for k in keys if k in derived),
        "changes": found,
        "messages": [change_text(c, version) for c in found],
        "strict_refuses": [change_text(c, version) for c in found if c["explicit"]],
        "warnings": ["%s (%s)" % (w.get("msg"), w.get("where")) for w in answer.get("warnings") or []],
    }
