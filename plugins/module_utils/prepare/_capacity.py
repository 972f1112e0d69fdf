# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Capacity planner: weights per GPU, KV pool and fit for an SGLang parallel layout.

Pure Python, no Ansible imports. The model side (parameters and bytes per tensor group)
lives in ``_capacity_model``; this file applies a layout ``{tp, pp, ep, dp}`` to it.

Rules used (shared/reference/prereqs.md §9, read against SGLang's source there):

* TP splits attention heads, the dense MLP, shared experts, the vocabulary of the
  embedding and ``lm_head``; MLA's ``q_a_proj`` + ``kv_a_proj_with_mqa`` (one fused
  ReplicatedLinear), norms and the MoE router are replicated on every rank.
* GQA k/v projections are split by KV heads and replicated once TP exceeds the KV heads
  (SGLang ``QKVParallelLinear``: ``max(1, kv_heads // tp)`` heads per rank).
* EP runs inside the TP group (ep divides tp): a rank holds ``ceil(E / ep)`` experts, each
  split ``tp / ep`` ways, so EP with the same GPUs moves the same bytes as TP.
* ``dp`` is DP attention (``dp_attention=True``, the default, as strategies render it):
  it splits the TP group into ``dp`` attention replicas on ``tp * pp`` GPUs
  (``_strategy.gpus_needed``, the collection's one GPU-count rule): attention
  weights are split only ``tp / dp`` ways and the input embedding is replicated
  (SGLang ``DeepseekV2Model``: ``VocabParallelEmbedding(enable_tp=not
  is_dp_attention_enabled())``); MLP and experts keep the full TP split.
  ``dp_attention=False`` plans plain ``--dp-size`` replicas instead, ``dp`` copies of the
  ``tp * pp`` group on ``tp * pp * dp`` GPUs, each planned like a lone server.
* PP: SGLang's ``get_pp_indices`` gives every stage ``L // pp`` layers and the last
  ``L % pp`` stages one more, unless ``SGLANG_PP_LAYER_PARTITION`` lists the sizes.
  Stage 0 holds the embedding (and the vision tower), the last stage ``lm_head``.
* KV per token per GPU: MLA ``(kv_lora_rank + qk_rope_head_dim) * dtype * layers`` on the
  rank, not divided by TP; GQA ``2 * kv_heads_per_rank * head_dim * dtype * layers``.
* SGLang's pool (``model_runner_kv_cache_mixin``): ``rest = avail_after_load -
  avail_before_load * (1 - mem_fraction_static)``, ``tokens = rest / cell_size``, minimum
  over ranks (PP ranks all-reduce MIN). ``avail_before_load`` is taken as the GPU's total
  memory, so ``rest = memory * fraction - weights``.
* Default ``mem_fraction_static``: SGLang 0.5.10 ``_handle_gpu_memory_settings`` as given
  in prereqs.md §9.3 step 6.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._capacity_model import (
    GIB,
    CannotPlan,
    ModelSpec,
    load_model,
    spec_from_config,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import gpus_needed
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._version import release as release_numbers

__all__ = [
    "CannotPlan", "ModelSpec", "load_model", "spec_from_config", "GIB", "MIB",
    "default_mem_fraction_static", "default_pp_partition", "kv_dtype_bytes",
    "plan_layout", "plan_model", "format_table",
    "fraction_text", "recommended_text", "gib_text", "tokens_text", "unfit_message",
    "misfit_warning",
]

MIB = 1024 ** 2

#: Planner policy, not SGLang: the highest fraction ever recommended leaves this much
#: (MiB) per GPU outside the static pool for activations, NCCL and the CUDA context.
MIN_RESERVED_MIB = 4096
#: Planner policy: when no context length is given, a recommendation must leave room
#: for at least this many KV tokens.
DEFAULT_MIN_KV_TOKENS = 8192

_KV_DTYPES = {
    "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}


class LayoutError(CannotPlan):
    """The layout cannot run this model on these GPUs."""


def kv_dtype_bytes(kv_dtype, spec):
    """Bytes of one KV element for SGLang's ``--kv-cache-dtype``; ``auto`` = model dtype."""
    key = str(kv_dtype or "auto").lower()
    if key == "auto":
        return spec.dense_bytes
    if key not in _KV_DTYPES:
        raise CannotPlan(
            "cannot plan: kv dtype %r is not supported (auto, bf16, fp16, fp8_e4m3, fp8_e5m2)"
            % kv_dtype)
    return _KV_DTYPES[key]


def _bands(gpu, tp):
    """(chunked prefill, CUDA-graph max batch) by GPU memory (MiB): 0.5.9
    ``srt/server_args.py:936-1001``, the same in 0.5.10 and 0.5.23 (``memory_hook.py``)."""
    if gpu < 20 * 1024:
        return 2048, 8
    if gpu < 35 * 1024:
        return 2048, (24 if tp < 4 else 80)
    if gpu < 60 * 1024:
        return 4096, (32 if tp < 4 else 160)
    if gpu < 160 * 1024:
        return 8192, (256 if tp < 4 else 512)
    return 16384, 512


def vlm_fraction_factor(vit):
    """``adjust_mem_fraction_for_vlm`` (0.5.9 ``srt/server_args.py:5483-5521``, 0.5.23
    ``srt/arg_groups/memory_hook.py:417-460``): 0.95 times a factor of the vision tower's
    size against ViT-L/14 (24 layers x 1024), clamped to [0.8, 1.05]."""
    layers, hidden = vit
    ratio = (layers * hidden ** 2) / float(24 * 1024 ** 2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def default_mem_fraction_static(gpu_memory_mib, tp=1, pp=1, mla=True, release=None,
                                dp_attention=1, vit=None, a2a="none"):
    """SGLang's default ``mem_fraction_static`` for ``release``: ``(fraction, reserved_mib)``.

    No speculative decoding. ``dp_attention`` is the DP-attention width (1: off), ``vit``
    the vision tower as SGLang reads it (``ModelSpec.sglang_vit``; None: text-only).

    * ``release`` 0.5.9 or older (checked against the real 0.5.9,
      ``tests/fixtures/server-args``): ``srt/server_args.py:1030-1062``, reserved = 512 +
      1.5 * max(chunk, 2048) + 2 * max_bs + tp*pp/8 * 1024 (+ DP attention: 3 * max_bs * dp,
      + 1.5 * max_bs * dp above max_bs 300), at least 10240 MiB above 60 GiB; no MLA term.
    * 0.5.23 or newer (checked against the real 0.5.23): ``srt/arg_groups/memory_hook.py:
      309-317`` with ``reserve_for_graph_mb`` (:357-399): the same plus, while the prefill
      CUDA graph is on (pp 1; ``cuda_graph_hook.py:150-160`` turns it off for pp > 1), 1536
      for MLA and 1024 for DeepEP (before the 10240 floor), and 2048 for DeepEP after it
      (:402-414).
    * otherwise (``None``, 0.5.10-0.5.22): 0.5.10's, prereqs.md §9.3 step 6 (the 0.5.23
      form without DP attention and DeepEP).

    Fraction = (gpu - reserved) / gpu, 3 decimals; then, for a multimodal model, times
    :func:`vlm_fraction_factor` (not rounded again).
    """
    gpu = float(gpu_memory_mib)
    chunk, max_bs = _bands(gpu, tp)
    version = _release_numbers(release)
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * max_bs + tp * pp / 8.0 * 1024
    if version is not None and int(dp_attention) > 1:
        reserved += max_bs * int(dp_attention) * 3
        if max_bs > 300:
            reserved += max_bs * int(dp_attention) * 1.5
    new = version is not None and version >= (0, 5, 23)
    # 0.5.23 turns the (breakable) prefill CUDA graph off under pp > 1 by default
    # (srt/arg_groups/cuda_graph_hook.py:150-160), and with it its reserve
    prefill_graph = not new or pp == 1
    if mla and (version is None or version >= (0, 5, 10)) and prefill_graph:
        reserved += 1536
    if new and a2a == "deepep" and prefill_graph:
        reserved += 1024  # breakable prefill graph with DeepEP (memory_hook.py:391-397)
    if gpu > 60 * 1024:
        reserved = max(reserved, 10240)
    if new and a2a == "deepep":
        reserved += 2048
    fraction = round((gpu - reserved) / gpu, 3)
    if vit and version is not None:
        fraction *= vlm_fraction_factor(vit)
    return fraction, reserved


def _release_numbers(release):
    """The release numbers of ``release`` as ``_version.release`` reads them (``0.5.3rc0`` is a
    pre-release of 0.5.3: ``(0, 5, 3)``); None when no release is named. Text that is no
    version is refused, naming it."""
    if not release:
        return None
    try:
        return release_numbers(release)
    except ValueError:
        raise CannotPlan("cannot plan for sglang_release=%r: it is not a release number "
                         "(e.g. 0.5.9)" % (release,))


def default_pp_partition(num_layers, pp):
    """SGLang ``get_pp_indices``: L // pp layers each, the last L % pp stages one more."""
    if pp < 1 or num_layers < pp:
        raise LayoutError("cannot plan: %d layers cannot be split into %d PP stages" % (num_layers, pp))
    base, extra = divmod(num_layers, pp)
    return [base + (1 if stage >= pp - extra else 0) for stage in range(pp)]


def _parse_partition(value, num_layers, pp):
    if isinstance(value, str):
        try:
            parts = [int(p) for p in value.split(",") if p.strip()]
        except ValueError:
            raise LayoutError("cannot plan: PP layer partition %r is not a list of integers" % value)
    else:
        parts = [int(p) for p in value]
    if len(parts) != pp or sum(parts) != num_layers or min(parts) < 1:
        raise LayoutError(
            "cannot plan: PP layer partition %r must list %d positive sizes summing to %d"
            % (value, pp, num_layers))
    return parts


class _Layout(object):
    """Per-rank byte arithmetic for one layout."""

    def __init__(self, spec, tp, pp, ep, dp, dp_attention):
        self.spec = spec
        self.tp, self.pp, self.ep, self.dp = tp, pp, ep, dp
        self.dp_attention = dp_attention
        self.attn_tp = tp // dp if dp_attention else tp
        if spec.num_heads % self.attn_tp:
            raise LayoutError(
                "cannot plan: %d attention heads do not split over attention TP %d"
                % (spec.num_heads, self.attn_tp))
        kv = spec.num_kv_heads
        if spec.attention == "gqa":
            if (kv >= self.attn_tp and kv % self.attn_tp) or (kv < self.attn_tp and self.attn_tp % kv):
                raise LayoutError(
                    "cannot plan: %d KV heads do not split over attention TP %d" % (kv, self.attn_tp))
            self.kv_heads_rank = max(1, kv // self.attn_tp)
        else:
            self.kv_heads_rank = 1
        experts = [layer.n_experts for layer in spec.layers if layer.n_experts]
        if experts and experts[0] % ep:
            raise LayoutError("cannot plan: %d routed experts do not split over EP %d" % (experts[0], ep))
        self.layer_bytes = [self._layer(layer) for layer in spec.layers]
        # stage extras (bytes per GPU)
        embed = spec.embed_bytes / (1 if dp_attention else tp)
        self.first_extra = embed + spec.vision_bytes
        head = 0.0
        if not (spec.tied_embeddings and pp == 1):
            head = spec.lm_head_bytes / float(tp)
        self.last_extra = head + spec.final_norm_bytes

    def _layer(self, layer):
        size = layer.attn_split / float(self.attn_tp) + layer.replicated + layer.mlp_split / float(self.tp)
        if layer.attn_kv:
            size += layer.attn_kv * self.kv_heads_rank / float(self.spec.num_kv_heads)
        if layer.n_experts:
            per_rank = -(-layer.n_experts // self.ep)
            size += per_rank * layer.expert_bytes / float(self.tp // self.ep)
        return size

    def kv_cell_per_layer(self, dtype_bytes):
        spec = self.spec
        if spec.attention == "mla":
            return (spec.kv_lora_rank + spec.qk_rope_head_dim) * dtype_bytes
        return 2 * self.kv_heads_rank * spec.head_dim * dtype_bytes

    def stage_weights(self, partition):
        out, start = [], 0
        for stage, size in enumerate(partition):
            total = sum(self.layer_bytes[start:start + size])
            if stage == 0:
                total += self.first_extra
            if stage == len(partition) - 1:
                total += self.last_extra
            out.append(total)
            start += size
        return out


def _best_partition(layout, budget, cell):
    """Layer split maximising the smallest stage's KV capacity (the pool SGLang uses).

    Capacity of a stage = (budget - weights) / (cell * layers). Ties: fewest stages at the
    minimum, then the split that puts more layers on earlier stages. Dynamic programming
    over (stage, first layer), O(pp * L^2).
    """
    n, pp = len(layout.layer_bytes), layout.pp
    prefix = [0.0]
    for size in layout.layer_bytes:
        prefix.append(prefix[-1] + size)

    def cap(stage, start, end):
        weight = prefix[end] - prefix[start]
        if stage == 0:
            weight += layout.first_extra
        if stage == pp - 1:
            weight += layout.last_extra
        return (budget - weight) / float(cell * (end - start))

    neg = float("-inf")
    best = [[neg] * (n + 1) for _stage in range(pp + 1)]
    best[pp][n] = float("inf")
    for stage in range(pp - 1, -1, -1):
        for start in range(n - (pp - stage) + 1):
            for end in range(start + 1, n - (pp - stage - 1) + 1):
                tail = best[stage + 1][end]
                if tail == neg:
                    continue
                value = min(cap(stage, start, end), tail)
                if value > best[stage][start]:
                    best[stage][start] = value
    target = best[0][0]
    tol = 1e-9 * max(1.0, abs(target))
    big = pp + 1
    count = [[big] * (n + 1) for _stage in range(pp + 1)]
    count[pp][n] = 0
    for stage in range(pp - 1, -1, -1):
        for start in range(n - (pp - stage) + 1):
            for end in range(start + 1, n - (pp - stage - 1) + 1):
                value = cap(stage, start, end)
                if value < target - tol or count[stage + 1][end] >= big:
                    continue
                here = (1 if value <= target + tol else 0) + count[stage + 1][end]
                if here < count[stage][start]:
                    count[stage][start] = here
    parts, start = [], 0
    for stage in range(pp):
        for end in range(n - (pp - stage - 1), start, -1):
            value = cap(stage, start, end)
            if value < target - tol or count[stage + 1][end] >= big:
                continue
            if (1 if value <= target + tol else 0) + count[stage + 1][end] == count[stage][start]:
                parts.append(end - start)
                start = end
                break
    return parts


def _stage_view(layout, partition, budget, cell, required_tokens):
    weights = layout.stage_weights(partition)
    stages = []
    for size, weight in zip(partition, weights):
        kv_token = cell * size
        rest = budget - weight
        tokens = int(rest // kv_token) if rest > 0 else 0
        stages.append({
            "layers": size,
            "weights_bytes": weight,
            "kv_bytes_per_token": kv_token,
            "kv_room_bytes": rest,
            "kv_tokens": tokens,
            "margin_bytes": rest - required_tokens * kv_token,
            "needed_bytes": weight + max(required_tokens, 1) * kv_token,
        })
    return stages


def _check_layout(layout, gpu_count, nnodes, dp_attention):
    """Sizes of ``layout`` checked against SGLang's rules and the GPU count.

    Returns ``(tp, pp, ep, dp, dp_attention, total_gpus)``; the GPU count is
    :func:`_strategy.gpus_needed`, the collection's one rule.
    """
    tp, pp = int(layout.get("tp", 1)), int(layout.get("pp", 1))
    ep, dp = int(layout.get("ep", 1)), int(layout.get("dp", 1))
    if min(tp, pp, ep, dp) < 1:
        raise LayoutError("cannot plan: layout sizes must be positive, got %r" % (layout,))
    if tp % ep:
        raise LayoutError("cannot plan: ep %d does not divide tp %d" % (ep, tp))
    dp_attention = bool(dp_attention) and dp > 1
    if dp_attention and tp % dp:
        raise LayoutError("cannot plan: dp %d does not divide tp %d for DP attention" % (dp, tp))
    total_gpus = int(gpu_count) * int(nnodes)
    need = gpus_needed({"tp": tp, "pp": pp, "dp": dp}, dp_attention)
    if need != total_gpus:
        raise LayoutError(
            "cannot plan: layout tp%d-pp%d-ep%d-dp%d%s needs %d GPUs, the server has %d "
            "(%d node(s) x %d)" % (tp, pp, ep, dp, " (DP attention)" if dp_attention else "",
                                   need, total_gpus, nnodes, gpu_count))
    return tp, pp, ep, dp, dp_attention, total_gpus


def _memory_fraction(spec, tp, pp, gpu_memory_mib, mem_fraction_static, release=None,
                     dp_attention=1):
    """``(fraction, default_fraction, reserved_mib)``: the static pool's share of a GPU."""
    default_fraction, reserved = default_mem_fraction_static(
        gpu_memory_mib, tp, pp, mla=spec.attention == "mla", release=release,
        dp_attention=dp_attention, vit=spec.sglang_vit)
    fraction = default_fraction if mem_fraction_static is None else float(mem_fraction_static)
    if not 0.0 < fraction < 1.0:
        raise CannotPlan("cannot plan: mem_fraction_static must be between 0 and 1, got %r" % fraction)
    return fraction, default_fraction, reserved


def _default_split_view(lay, split, stages, default_split, budget, cell, required):
    """Weights and KV tokens of SGLang's default PP split (``None`` without PP)."""
    if lay.pp == 1:
        return None
    default_stages = stages if split == default_split else _stage_view(
        lay, default_split, budget, cell, required)
    return {
        "weights_per_gpu_min_gib": round(min(s["weights_bytes"] for s in default_stages) / GIB, 2),
        "weights_per_gpu_max_gib": round(max(s["weights_bytes"] for s in default_stages) / GIB, 2),
        "kv_tokens": min(s["kv_tokens"] for s in default_stages),
    }


def _better_split(lay, split, stages, budget, cell, required):
    """The searched PP split and its stages when it holds more KV than ``split``, else ``None``."""
    candidate = _best_partition(lay, budget, cell)
    cand_stages = _stage_view(lay, candidate, budget, cell, required)
    current_cap = min(s["kv_room_bytes"] / s["kv_bytes_per_token"] for s in stages)
    cand_cap = min(s["kv_room_bytes"] / s["kv_bytes_per_token"] for s in cand_stages)
    if candidate != split and cand_cap > current_cap + 1.0:
        return candidate, cand_stages
    return None


def _needed_fraction(stages, gpu_memory_mib, required):
    """The smallest fraction that holds the weights plus the required KV tokens
    (``required``, else DEFAULT_MIN_KV_TOKENS) on every stage's GPUs; above 1 when the GPU
    cannot hold them at all."""
    gpu_bytes = float(gpu_memory_mib) * MIB
    target_tokens = required or DEFAULT_MIN_KV_TOKENS
    return max(
        (s["weights_bytes"] + target_tokens * s["kv_bytes_per_token"]) / gpu_bytes for s in stages)


def _recommended_fraction(need_frac, gpu_memory_mib, default_fraction):
    """SGLang's own default when the plan fits with it (``need_frac``, the
    :func:`_needed_fraction`, is not above it), otherwise the smallest fraction that holds the
    weights plus the required KV, if that still leaves MIN_RESERVED_MIB outside the pool;
    ``None`` when nothing fits."""
    if need_frac <= default_fraction:
        return default_fraction
    if need_frac <= _max_fraction(gpu_memory_mib):
        return math.ceil(need_frac * 1000) / 1000.0
    return None


def _max_fraction(gpu_memory_mib):
    """The highest fraction that leaves MIN_RESERVED_MIB per GPU outside the pool."""
    return (float(gpu_memory_mib) - MIN_RESERVED_MIB) / float(gpu_memory_mib)


def _plan_notes(lay, spec, mem_fraction_static, fraction, gpu_memory_mib):
    notes = []
    if lay.dp_attention:
        notes.append("DP attention: attention split %d ways, embedding replicated; SGLang's "
                     "extra DP-attention reserve is not in the default fraction" % lay.attn_tp)
    if spec.vision_bytes:
        notes.append("vision tower (%s GiB) counted unsplit on every stage-0 GPU"
                     % gib_text(spec.vision_bytes / GIB))
    if mem_fraction_static is not None and fraction > _max_fraction(gpu_memory_mib):
        notes.append("mem_fraction_static %s leaves under %d MiB for activations"
                     % (fraction_text(fraction), MIN_RESERVED_MIB))
    return notes


def plan_layout(spec, layout, gpu_count, gpu_memory_mib, mem_fraction_static=None,
                context_length=None, kv_dtype="auto", nnodes=1, dp_attention=True,
                name=None, pp_partition=None, release=None):
    """Plan one layout ``{tp, pp, ep, dp}`` of ``spec`` on ``gpu_count`` GPUs per node.

    ``dp`` is DP attention, as the collection renders it (dp splits the TP group);
    ``dp_attention=False`` plans plain ``--dp-size`` replicas of the ``tp * pp`` group.
    ``release`` picks that SGLang release's default ``mem_fraction_static``
    (:func:`default_mem_fraction_static`). Returns a dict of plain values (see the module's RETURN). Raises
    :class:`CannotPlan` (or its subclass :class:`LayoutError`) with the reason when no
    number can be given.
    """
    tp, pp, ep, dp, dp_attention, total_gpus = _check_layout(layout, gpu_count, nnodes, dp_attention)
    if gpu_memory_mib is None or gpu_memory_mib <= 0:
        raise CannotPlan("cannot plan: GPU memory (MiB) must be positive, got %r" % (gpu_memory_mib,))
    if spec.num_layers < pp:
        raise LayoutError("cannot plan: %d layers cannot fill %d PP stages" % (spec.num_layers, pp))
    lay = _Layout(spec, tp, pp, ep, dp, dp_attention)
    fraction, default_fraction, reserved = _memory_fraction(
        spec, tp, pp, gpu_memory_mib, mem_fraction_static, release=release,
        dp_attention=dp if dp_attention else 1)
    budget = float(gpu_memory_mib) * MIB * fraction
    cell = lay.kv_cell_per_layer(kv_dtype_bytes(kv_dtype, spec))
    required = int(context_length) if context_length else 0

    default_split = default_pp_partition(spec.num_layers, pp)
    split = _parse_partition(pp_partition, spec.num_layers, pp) if pp_partition else default_split
    stages = _stage_view(lay, split, budget, cell, required)
    default_view = _default_split_view(lay, split, stages, default_split, budget, cell, required)
    best_string = None
    if pp > 1 and not pp_partition:
        better = _better_split(lay, split, stages, budget, cell, required)
        if better:
            split, stages = better
            best_string = ",".join(str(x) for x in split)

    per_rank = []
    for stage in stages:
        per_rank.extend([stage["weights_bytes"]] * (total_gpus // pp))
    weights_gib = [round(b / GIB, 2) for b in per_rank]
    kv_tokens = min(s["kv_tokens"] for s in stages)
    margin = min(s["margin_bytes"] for s in stages)
    need_frac = _needed_fraction(stages, gpu_memory_mib, required)
    return {
        "name": name or _name(tp, pp, ep, dp),
        "layout": {"tp": tp, "pp": pp, "ep": ep, "dp": dp, "dp_attention": dp_attention},
        "gpus": total_gpus,
        "gpu_memory_mib": int(gpu_memory_mib),
        "mem_fraction_static": round(fraction, 3),
        "default_mem_fraction_static": default_fraction,
        "default_reserved_mib": round(reserved, 1),
        "budget_gib": round(budget / GIB, 2),
        "weights_per_gpu_gib": weights_gib,
        "weights_per_gpu_min_gib": min(weights_gib),
        "weights_per_gpu_max_gib": max(weights_gib),
        "kv_dtype": kv_dtype or "auto",
        "kv_bytes_per_token_per_gpu": int(max(s["kv_bytes_per_token"] for s in stages)),
        "kv_bytes_per_token_per_stage": [int(s["kv_bytes_per_token"]) for s in stages],
        "kv_room_gib_per_stage": [round(s["kv_room_bytes"] / GIB, 2) for s in stages],
        "kv_tokens": kv_tokens,
        "kv_tokens_per_stage": [s["kv_tokens"] for s in stages],
        "context_length": required or None,
        "fits": bool(margin > 0 and kv_tokens >= max(required, 1)),
        "margin_gib": round(margin / GIB, 2),
        "recommended_mem_fraction_static": _recommended_fraction(
            need_frac, gpu_memory_mib, default_fraction),
        "needed_mem_fraction_static": need_frac,
        "pp_stage_layers": list(split),
        "pp_layer_partition": best_string,
        "default_pp_partition": ",".join(str(x) for x in default_split),
        "default_pp_split": default_view,
        "notes": _plan_notes(lay, spec, mem_fraction_static, fraction, gpu_memory_mib),
    }


def _name(tp, pp, ep, dp):
    parts = ["tp%d" % tp]
    for key, value in (("pp", pp), ("ep", ep), ("dp", dp)):
        if value > 1:
            parts.append("%s%d" % (key, value))
    return "-".join(parts)


def plan_model(spec, strategies, gpu_count, gpu_memory_mib, **kwargs):
    """Plan several ``(name, layout)`` pairs; a layout that cannot run gets an ``error``."""
    plans = []
    for name, layout in strategies:
        try:
            plans.append(plan_layout(spec, layout, gpu_count, gpu_memory_mib, name=name, **kwargs))
        except LayoutError as exc:
            plans.append({"name": name, "layout": dict(layout), "fits": False, "error": str(exc),
                          "pp_layer_partition": None})
    return plans


# ---- numbers for a person ------------------------------------------------------------
# Messages (refusals, warnings, notes, the table) round what they print; the plan's data
# keeps its full precision.

def fraction_text(value):
    """A memory fraction for a person: 3 decimals at most, trailing zeros dropped
    (``0.85``, ``0.776``)."""
    text = "%.3f" % float(value)
    return text.rstrip("0").rstrip(".") if "." in text else text


def _floor_to(value, places):
    scale = 10 ** places
    # a tolerance below the printed precision, so that 0.778 (0.77800000000000002) stays 0.778
    return math.floor(float(value) * scale + 1e-6) / float(scale)


def recommended_text(plan_):
    """The plan's recommended ``mem_fraction_static`` for a person.

    Rounded DOWN, never up: a fraction above the recommendation leaves less than the
    planner (or SGLang's own default) keeps outside the static pool. 3 decimals, more only
    when 3 would drop below the plan's ``needed_mem_fraction_static`` (the weights and the
    required KV tokens would no longer fit). A rounded value says so. ``none fits`` when no
    fraction fits."""
    value = plan_.get("recommended_mem_fraction_static")
    if value is None:
        return "none fits"
    need = plan_.get("needed_mem_fraction_static")
    for places in (3, 4, 5, 6):
        shown = _floor_to(value, places)
        if need is None or shown >= need:
            break
    else:
        return repr(float(value))
    text = ("%%.%df" % places) % shown
    if shown >= float(value) - 1e-9:
        return text.rstrip("0").rstrip(".") if places == 3 else text
    if need is None:  # a plan of another version: what it needs is not known
        return "%s (rounded down)" % text
    return "%s (rounded down, so that it still fits)" % text


def gib_text(value):
    """GiB for a person: 1 decimal; 2 significant digits for an amount that 1 decimal
    would print as zero (a margin of -0.04 GiB is no ``-0.0``)."""
    value = float(value)
    if value and round(value, 1) == 0:
        return "%.2g" % value
    return "%.1f" % value


def tokens_text(value):
    """Tokens for a person: an integer."""
    return "%d" % int(value)


def unfit_message(plan_, host):
    """Why a plan does not fit, with the numbers rounded for a person (the refusal of the
    deploy's preflight, the model step and the capacity role)."""
    need = (" (need %s)" % tokens_text(plan_["context_length"])) if plan_.get("context_length") else ""
    source = (" (%s)" % plan_["fraction_from"]) if plan_.get("fraction_from") else ""
    return (
        "%s: strategy %s does not fit %s x %s MiB: weights %s-%s GiB per GPU, budget %s GiB at "
        "mem_fraction_static %s%s, KV margin %s GiB, %s KV tokens%s; recommended "
        "mem_fraction_static: %s. Set capacity_allow_unfit=true to deploy anyway."
        % (host, plan_["name"], plan_["gpus"], plan_["gpu_memory_mib"],
           gib_text(plan_["weights_per_gpu_min_gib"]), gib_text(plan_["weights_per_gpu_max_gib"]),
           gib_text(plan_["budget_gib"]), fraction_text(plan_["mem_fraction_static"]), source,
           gib_text(plan_["margin_gib"]), tokens_text(plan_["kv_tokens"]), need,
           recommended_text(plan_)))


def misfit_warning(plan_, host):
    """The warning for a plan that does not fit and is deployed anyway."""
    return ("%s: strategy %s does not fit (KV margin %s GiB); going on because "
            "capacity_allow_unfit is set" % (host, plan_["name"], gib_text(plan_["margin_gib"])))


def format_table(spec, plans):
    """Text lines: one header, one row per plan."""
    lines = [
        "model: %s (%s, %s), %.1fB params, %.1f GiB weights"
        % (spec.text_model_type if spec.text_model_type == spec.model_type
           else "%s/%s" % (spec.model_type, spec.text_model_type),
           spec.attention.upper(), spec.quantization, spec.params / 1e9, spec.total_bytes() / GIB),
    ]
    header = "%-10s %-15s %6s %17s %10s %10s %8s %5s  %s" % (
        "strategy", "layout", "mfs", "weights/GPU GiB", "KV B/tok", "KV tokens", "margin", "fits",
        "PP-split")
    lines.append(header)
    lines.append("-" * len(header))
    for plan in plans:
        if "error" in plan:
            lines.append("%-10s %s" % (plan["name"], plan["error"]))
            continue
        lay = plan["layout"]
        layout = "tp%d pp%d ep%d dp%d" % (lay["tp"], lay["pp"], lay["ep"], lay["dp"])
        part = plan["pp_layer_partition"] or (
            "default %s" % plan["default_pp_partition"] if lay["pp"] > 1 else "-")
        lines.append("%-10s %-15s %6.3f %17s %10d %10d %8s %5s  %s" % (
            plan["name"], layout, plan["mem_fraction_static"],
            "%.1f-%.1f" % (plan["weights_per_gpu_min_gib"], plan["weights_per_gpu_max_gib"]),
            plan["kv_bytes_per_token_per_gpu"], plan["kv_tokens"], gib_text(plan["margin_gib"]),
            "yes" if plan["fits"] else "NO", part))
    return lines
