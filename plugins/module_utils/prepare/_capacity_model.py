# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Model description for the capacity planner: parameters and bytes per tensor group.

Reads a Hugging Face ``config.json`` (and ``model.safetensors.index.json`` when present)
and turns it into a :class:`ModelSpec`: one :class:`LayerSpec` per decoder layer with its
bytes split by how SGLang shards them (attention heads, KV heads, dense MLP, routed experts,
replicated tensors), plus embedding, ``lm_head`` and vision tower.

Architectures (``model_type``):

* MLA, DeepSeek-V2/V3 family: ``deepseek_v2``, ``deepseek_v3``, ``kimi_k2`` (and the
  ``kimi_k25`` multimodal wrapper whose ``text_config`` is one of them);
* GQA/MHA: ``llama``, ``mistral``, ``qwen2``, ``qwen3`` (dense), ``mixtral``,
  ``qwen2_moe``, ``qwen3_moe`` (MoE).

Checkpoint formats (``quantization_config``):

* none: the checkpoint dtype (``torch_dtype``/``dtype``: bfloat16 or float16, 2 bytes);
* ``fp8`` with ``weight_block_size`` (DeepSeek-V3 style): 1 byte per weight plus one FP32
  ``weight_scale_inv`` per block, every decoder Linear; embedding, ``lm_head``, norms and
  the MoE router stay 16-bit;
* ``compressed-tensors`` ``pack-quantized`` INT4 (K2-Thinking/K2.5): int4 packed into
  int32, one 16-bit scale per group (``group_size``), a 2-element int64 ``weight_shape``
  per Linear, packed zero points when asymmetric; modules in ``ignore`` stay 16-bit;
* ``modelopt`` ``NVFP4`` (K2.6-NVFP4) and ``FP8``: NVFP4 = 4-bit values (2 per byte),
  one FP8-E4M3 scale per 16 values, FP32 ``weight_scale_2`` and ``input_scale`` per
  Linear; FP8 = 1 byte plus FP32 weight and input scales; ``ignore`` /
  ``exclude_modules`` (fnmatch patterns) stay 16-bit.

Anything else raises :class:`CannotPlan` with the reason: the planner never guesses.

Sources: parameter formulas follow the transformers modeling files of each architecture
(``modeling_deepseek_v3.py``, ``modeling_llama.py``, ``modeling_mixtral.py``,
``modeling_qwen3_moe.py``) and the prerequisite notes (shared/reference/prereqs.md §7, §9).
Quantized layouts: DeepSeek-V3 README_WEIGHTS.md (FP8 128x128 ``weight_scale_inv``),
compressed-tensors ``PackedQuantizationCompressor`` (``weight_packed`` int32,
``weight_scale``, ``weight_shape``), NVIDIA ModelOpt NVFP4 checkpoint format
(``weight`` uint8 2xFP4, ``weight_scale`` FP8 per 16, ``weight_scale_2`` and
``input_scale`` FP32).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re

GIB = 1024 ** 3

MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
GQA_DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
GQA_MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe")
WRAPPER_TYPES = ("kimi_k25",)

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "bf16": 2, "fp16": 2}


class CannotPlan(ValueError):
    """The planner cannot size this model: unknown architecture, format or missing data."""


def _ceil_div(a, b):
    return -(-a // b)


# --------------------------------------------------------------------------------------
# Checkpoint formats
# --------------------------------------------------------------------------------------

class Scheme(object):
    """How many bytes one Linear weight (with its scales) takes in the checkpoint."""

    name = "bf16"

    def __init__(self, dense_bytes=2):
        self.dense_bytes = dense_bytes

    def linear(self, name, out_f, in_f):
        """Bytes of Linear ``name`` (out_f x in_f, no bias)."""
        return out_f * in_f * self.dense_bytes

    def dense(self, numel):
        """Bytes of a tensor that is never quantized (norms, embeddings, router)."""
        return numel * self.dense_bytes


class Fp8BlockScheme(Scheme):
    """quant_method fp8 (DeepSeek-V3/Kimi K2): e4m3 weight + FP32 scale per block."""

    def __init__(self, block, ignore, dense_bytes=2):
        Scheme.__init__(self, dense_bytes)
        self.block = block
        self.ignore = ignore
        self.name = "fp8-block%dx%d" % tuple(block) if block else "fp8"

    def linear(self, name, out_f, in_f):
        if name.endswith("lm_head") or _matches_any(name, self.ignore):
            return out_f * in_f * self.dense_bytes
        if self.block:
            scales = _ceil_div(out_f, self.block[0]) * _ceil_div(in_f, self.block[1])
        else:
            scales = 1  # per-tensor weight_scale
        return out_f * in_f + 4 * scales


class CompressedTensorsInt4Scheme(Scheme):
    """compressed-tensors pack-quantized: int4 packed 8 per int32, 16-bit group scales."""

    def __init__(self, weights, ignore, targets, dense_bytes=2):
        Scheme.__init__(self, dense_bytes)
        self.num_bits = weights["num_bits"]
        self.strategy = weights.get("strategy") or "group"
        self.group = weights.get("group_size")
        self.symmetric = weights.get("symmetric", True)
        self.ignore = ignore
        self.targets = targets
        self.name = "int%d-%s%s" % (
            self.num_bits, self.strategy, self.group if self.strategy == "group" else "")

    def linear(self, name, out_f, in_f):
        if name.endswith("lm_head") or _ct_ignored(name, self.ignore):
            return out_f * in_f * self.dense_bytes
        per_int32 = 32 // self.num_bits
        packed = out_f * _ceil_div(in_f, per_int32) * 4
        if self.strategy == "group":
            groups = _ceil_div(in_f, self.group)
        elif self.strategy == "channel":
            groups = 1
        else:  # tensor
            groups = 0
        scale_count = out_f * groups if groups else 1
        zero = 0
        if not self.symmetric:
            # zero points packed along the output dim (int32)
            zero = _ceil_div(out_f, per_int32) * max(groups, 1) * 4
        shape = 2 * 8  # weight_shape: int64 tensor [out, in]
        return packed + scale_count * self.dense_bytes + zero + shape


class ModelOptScheme(Scheme):
    """NVIDIA ModelOpt NVFP4 / FP8 checkpoints."""

    def __init__(self, algo, group, ignore, dense_bytes=2):
        Scheme.__init__(self, dense_bytes)
        self.algo = algo
        self.group = group
        self.ignore = ignore
        self.name = "nvfp4-g%d" % group if algo == "NVFP4" else "modelopt-fp8"

    def linear(self, name, out_f, in_f):
        if _fn_ignored(name, self.ignore):
            return out_f * in_f * self.dense_bytes
        if self.algo == "NVFP4":
            # uint8 holding 2 FP4 values, FP8 scale per group, FP32 weight_scale_2 + input_scale
            return _ceil_div(out_f * in_f, 2) + out_f * _ceil_div(in_f, self.group) + 8
        return out_f * in_f + 8  # FP8 + FP32 weight_scale + input_scale


def _matches_any(name, patterns):
    for pat in patterns or ():
        if pat.startswith("re:"):
            if re.match(pat[3:], name):
                return True
        elif name == pat or name.endswith("." + pat) or fnmatch.fnmatchcase(name, pat):
            return True
    return False


def _ct_ignored(name, patterns):
    # compressed-tensors matching: "re:<regex>" is re.match on the module name, anything
    # else is an exact module name (or a class name, which no ignore list here uses).
    for pat in patterns or ():
        if pat.startswith("re:"):
            if re.match(pat[3:], name):
                return True
        elif name == pat:
            return True
    return False


def _fn_ignored(name, patterns):
    # ModelOpt exclude lists are fnmatch patterns on module names.
    for pat in patterns or ():
        if fnmatch.fnmatchcase(name, pat) or name == pat:
            return True
    return False


def _dense_bytes(cfg, top):
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or top.get("torch_dtype") or top.get("dtype")
    if dtype is None:
        return 2
    if str(dtype).lower() not in _DTYPE_BYTES:
        raise CannotPlan(
            "cannot plan: checkpoint dtype %r is not supported (bfloat16/float16 only)" % dtype)
    return _DTYPE_BYTES[str(dtype).lower()]


def make_scheme(qcfg, dense_bytes=2):
    """Build the byte-counting scheme for a ``quantization_config`` (None: unquantized)."""
    if not qcfg:
        return Scheme(dense_bytes)
    method = str(qcfg.get("quant_method", "")).lower()
    if method == "fp8":
        block = qcfg.get("weight_block_size")
        if block is not None and (len(block) != 2 or not all(isinstance(b, int) and b > 0 for b in block)):
            raise CannotPlan("cannot plan: fp8 weight_block_size %r is not two positive ints" % (block,))
        ignore = list(qcfg.get("ignored_layers") or []) + list(qcfg.get("modules_to_not_convert") or [])
        return Fp8BlockScheme(block, ignore, dense_bytes)
    if method == "compressed-tensors":
        fmt = qcfg.get("format")
        groups = qcfg.get("config_groups") or {}
        if fmt != "pack-quantized" or len(groups) != 1:
            raise CannotPlan(
                "cannot plan: compressed-tensors format %r with %d config group(s) is not "
                "supported (only one pack-quantized group)" % (fmt, len(groups)))
        group = list(groups.values())[0]
        weights = group.get("weights") or {}
        targets = group.get("targets") or []
        if (weights.get("type") != "int" or weights.get("num_bits") not in (4, 8)
                or targets != ["Linear"]
                or (weights.get("strategy") or "group") not in ("group", "channel", "tensor")
                or ((weights.get("strategy") or "group") == "group"
                    and not isinstance(weights.get("group_size"), int))):
            raise CannotPlan(
                "cannot plan: compressed-tensors weights %r targeting %r are not supported "
                "(int4/int8 pack-quantized on Linear only)" % (weights, targets))
        if group.get("input_activations"):
            raise CannotPlan("cannot plan: compressed-tensors activation quantization is not supported")
        return CompressedTensorsInt4Scheme(weights, qcfg.get("ignore") or [], targets, dense_bytes)
    if method == "modelopt":
        algo = qcfg.get("quant_algo")
        if algo is None and isinstance(qcfg.get("quantization"), dict):
            algo = qcfg["quantization"].get("quant_algo")
        ignore = list(qcfg.get("ignore") or []) + list(qcfg.get("exclude_modules") or [])
        if algo == "NVFP4":
            group = 16
            for grp in (qcfg.get("config_groups") or {}).values():
                group = (grp.get("weights") or {}).get("group_size", group)
            return ModelOptScheme("NVFP4", group, ignore, dense_bytes)
        if algo == "FP8":
            return ModelOptScheme("FP8", 0, ignore, dense_bytes)
        raise CannotPlan("cannot plan: modelopt quant_algo %r is not supported (NVFP4, FP8)" % algo)
    raise CannotPlan(
        "cannot plan: quantization %r is not supported (known: fp8, compressed-tensors "
        "pack-quantized, modelopt NVFP4/FP8, or none)" % (qcfg.get("quant_method"),))


# --------------------------------------------------------------------------------------
# Model structure
# --------------------------------------------------------------------------------------

class LayerSpec(object):
    """Bytes of one decoder layer, grouped by how SGLang shards them across GPUs.

    attn_split    split by the attention TP size (heads)
    attn_kv       k/v projections split by KV heads (GQA; replicated when TP > KV heads)
    replicated    every rank holds a full copy (norms, MLA a-projections, MoE router)
    mlp_split     dense MLP / shared experts, split by the full TP size
    expert_bytes  one routed expert; n_experts of them, split by EP then by TP/EP
    """

    __slots__ = ("index", "moe", "attn_split", "attn_kv", "replicated", "mlp_split",
                 "expert_bytes", "n_experts", "params", "attn_bytes")

    def __init__(self, index, moe):
        self.index = index
        self.moe = moe
        # bytes of each group, routed experts and parameters: summed as the layer is built
        self.attn_split = self.attn_kv = self.replicated = self.mlp_split = 0
        self.expert_bytes = self.n_experts = self.params = self.attn_bytes = 0

    def total_bytes(self):
        return (self.attn_split + self.attn_kv + self.replicated + self.mlp_split
                + self.expert_bytes * self.n_experts)


class ModelSpec(object):
    """Everything the planner needs from a model directory."""

    def __init__(self):
        self.model_type = None
        self.text_model_type = None
        self.architecture = None
        self.attention = None  # "mla" or "gqa"
        self.quantization = None
        self.layers = []
        self.hidden_size = 0
        self.vocab_size = 0
        self.num_heads = 0
        self.num_kv_heads = 0
        self.head_dim = 0
        self.kv_lora_rank = 0
        self.qk_rope_head_dim = 0
        self.embed_bytes = 0
        self.lm_head_bytes = 0
        self.final_norm_bytes = 0
        self.tied_embeddings = False
        self.vision_bytes = 0
        self.vision_params = 0
        # the vision tower's (layers, hidden size) as SGLang's config class reads them, for
        # its multimodal memory adjustment (None: text-only)
        self.sglang_vit = None
        self.params = 0
        self.max_context = None
        self.dense_bytes = 2
        self.mtp_layers = 0
        self.mtp_bytes = 0
        self.checkpoint_bytes = None
        self.warnings = []

    @property
    def num_layers(self):
        return len(self.layers)

    def text_bytes(self):
        head = 0 if self.tied_embeddings else self.lm_head_bytes
        return (sum(layer.total_bytes() for layer in self.layers) + self.embed_bytes + head
                + self.final_norm_bytes)

    def total_bytes(self):
        return self.text_bytes() + self.vision_bytes

    def summary(self):
        total = self.total_bytes()
        return {
            "model_type": self.model_type,
            "architecture": self.architecture,
            "attention": self.attention,
            "quantization": self.quantization,
            "num_layers": self.num_layers,
            "parameters": self.params,
            "parameters_b": round(self.params / 1e9, 2),
            "vision_parameters": self.vision_params,
            "total_weight_bytes": total,
            "total_weight_gib": round(total / GIB, 2),
            "text_weight_gib": round(self.text_bytes() / GIB, 2),
            "vision_weight_gib": round(self.vision_bytes / GIB, 2),
            "mtp_layers_not_loaded": self.mtp_layers,
            "checkpoint_bytes": self.checkpoint_bytes,
            "max_context": self.max_context,
            "warnings": list(self.warnings),
        }


def _need(cfg, *keys):
    values = []
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CannotPlan(
                "cannot plan: config.json field %r is missing or not a non-negative integer (%r)"
                % (key, value))
        values.append(value)
    return values if len(values) > 1 else values[0]


def _mlp(scheme, prefix, inter, hidden, names=("gate_proj", "up_proj", "down_proj")):
    """Bytes and params of a SwiGLU MLP (gate, up: inter x hidden; down: hidden x inter)."""
    gate, up, down = names
    size = (scheme.linear(prefix + gate, inter, hidden) + scheme.linear(prefix + up, inter, hidden)
            + scheme.linear(prefix + down, hidden, inter))
    return size, 3 * inter * hidden


def _expert_bytes(scheme, layer_prefix, expert_path, inter, hidden, n_experts, names):
    """Bytes of one routed expert; checks that the first and last expert are stored alike."""
    first, params = _mlp(scheme, "%s%s.0." % (layer_prefix, expert_path), inter, hidden, names)
    last = _mlp(scheme, "%s%s.%d." % (layer_prefix, expert_path, n_experts - 1), inter, hidden, names)[0]
    if first != last:
        raise CannotPlan(
            "cannot plan: routed experts of %s are stored in different formats (ignore list "
            "names single experts)" % layer_prefix.rstrip("."))
    return first, params


def _build_mla(cfg, scheme, spec, prefix):
    hidden, n_layers, heads, vocab = _need(
        cfg, "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    kv_lora, nope, rope, v_dim = _need(
        cfg, "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    q_lora = cfg.get("q_lora_rank")
    inter = _need(cfg, "intermediate_size")
    n_routed = cfg.get("n_routed_experts") or 0
    n_shared = cfg.get("n_shared_experts") or 0
    moe_inter = cfg.get("moe_intermediate_size") or 0
    first_dense = cfg.get("first_k_dense_replace") or 0
    freq = cfg.get("moe_layer_freq") or 1
    if n_routed and not moe_inter:
        raise CannotPlan("cannot plan: n_routed_experts set but moe_intermediate_size missing")
    dense = scheme.dense_bytes
    spec.attention = "mla"
    spec.hidden_size, spec.vocab_size, spec.num_heads = hidden, vocab, heads
    spec.num_kv_heads = 1
    spec.kv_lora_rank, spec.qk_rope_head_dim = kv_lora, rope
    for i in range(n_layers):
        # transformers DeepseekV3: MoE when n_routed_experts and i >= first_k_dense_replace
        # and i % moe_layer_freq == 0
        moe = bool(n_routed) and i >= first_dense and i % freq == 0
        layer = LayerSpec(i, moe)
        lp = "%smodel.layers.%d." % (prefix, i)
        ap = lp + "self_attn."
        params = 0
        # MLA: q_a_proj + kv_a_proj_with_mqa are one replicated (fused) Linear in SGLang
        if q_lora:
            layer.replicated += scheme.linear(ap + "q_a_proj", q_lora, hidden) + scheme.dense(q_lora)
            layer.attn_split += scheme.linear(ap + "q_b_proj", heads * (nope + rope), q_lora)
            params += q_lora * hidden + q_lora + heads * (nope + rope) * q_lora
        else:
            layer.attn_split += scheme.linear(ap + "q_proj", heads * (nope + rope), hidden)
            params += heads * (nope + rope) * hidden
        layer.replicated += (scheme.linear(ap + "kv_a_proj_with_mqa", kv_lora + rope, hidden)
                             + scheme.dense(kv_lora))
        layer.attn_split += scheme.linear(ap + "kv_b_proj", heads * (nope + v_dim), kv_lora)
        layer.attn_split += scheme.linear(ap + "o_proj", hidden, heads * v_dim)
        params += ((kv_lora + rope) * hidden + kv_lora + heads * (nope + v_dim) * kv_lora
                   + hidden * heads * v_dim)
        layer.attn_bytes = layer.attn_split + layer.replicated
        # input_layernorm + post_attention_layernorm
        layer.replicated += scheme.dense(2 * hidden)
        params += 2 * hidden
        mp = lp + "mlp."
        if moe:
            size, p = _mlp(scheme, mp + "shared_experts.", moe_inter * n_shared, hidden) if n_shared else (0, 0)
            layer.mlp_split += size
            params += p
            layer.expert_bytes, p = _expert_bytes(
                scheme, mp, "experts", moe_inter, hidden, n_routed, ("gate_proj", "up_proj", "down_proj"))
            layer.n_experts = n_routed
            params += p * n_routed
            # router: MoEGate.weight (not an nn.Linear, never quantized) + FP32
            # e_score_correction_bias for noaux_tc routing; replicated on every rank
            layer.replicated += n_routed * hidden * dense
            params += n_routed * hidden
            if cfg.get("topk_method") == "noaux_tc":
                layer.replicated += 4 * n_routed
                params += n_routed
        else:
            size, p = _mlp(scheme, mp, inter, hidden)
            layer.mlp_split += size
            params += p
        layer.params = params
        spec.layers.append(layer)
    spec.mtp_layers = cfg.get("num_nextn_predict_layers") or 0
    if spec.mtp_layers and spec.layers:
        # DeepSeek-V3 README_WEIGHTS: each MTP module = one MoE decoder layer + enorm, hnorm,
        # eh_proj (2H -> H), and its own copies of embed_tokens and shared_head (norm + head).
        moe_layer = [layer for layer in spec.layers if layer.moe] or spec.layers
        one = (moe_layer[-1].total_bytes() + scheme.linear("model.layers.mtp.eh_proj", hidden, 2 * hidden)
               + scheme.dense(3 * hidden) + 2 * scheme.dense(vocab * hidden))
        spec.mtp_bytes = one * spec.mtp_layers


def _build_gqa(cfg, scheme, spec, prefix, model_type):
    hidden, n_layers, heads, vocab = _need(
        cfg, "hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    if not cfg.get("head_dim") and hidden % heads:
        raise CannotPlan("cannot plan: hidden_size %d not divisible by %d heads" % (hidden, heads))
    inter = cfg.get("intermediate_size") or 0
    spec.attention = "gqa"
    spec.hidden_size, spec.vocab_size, spec.num_heads = hidden, vocab, heads
    spec.num_kv_heads, spec.head_dim = kv_heads, head_dim
    # q/k/v biases: Qwen2 always has them; Llama-style configs say attention_bias
    qkv_bias = model_type in ("qwen2", "qwen2_moe") or bool(cfg.get("attention_bias"))
    o_bias = bool(cfg.get("attention_bias")) and model_type not in ("qwen2", "qwen2_moe")
    qk_norm = model_type in ("qwen3", "qwen3_moe")
    if model_type == "mixtral":
        n_experts = _need(cfg, "num_local_experts")
        moe_inter = inter
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        n_experts = cfg.get("num_experts") or 0
        moe_inter = cfg.get("moe_intermediate_size") or 0
        if n_experts and not moe_inter:
            raise CannotPlan("cannot plan: num_experts set but moe_intermediate_size missing")
    else:
        n_experts, moe_inter = 0, 0
    sparse_step = cfg.get("decoder_sparse_step") or 1
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    for i in range(n_layers):
        if model_type == "mixtral":
            moe = True
        elif model_type in ("qwen2_moe", "qwen3_moe"):
            # transformers Qwen3MoeDecoderLayer: MoE unless in mlp_only_layers, and
            # num_experts > 0 and (i + 1) % decoder_sparse_step == 0
            moe = i not in mlp_only and n_experts > 0 and (i + 1) % sparse_step == 0
        else:
            moe = False
        layer = LayerSpec(i, moe)
        lp = "%smodel.layers.%d." % (prefix, i)
        ap = lp + "self_attn."
        q_out, kv_out = heads * head_dim, kv_heads * head_dim
        layer.attn_split += (scheme.linear(ap + "q_proj", q_out, hidden)
                             + scheme.linear(ap + "o_proj", hidden, q_out))
        layer.attn_kv += scheme.linear(ap + "k_proj", kv_out, hidden) + scheme.linear(ap + "v_proj", kv_out, hidden)
        params = 2 * q_out * hidden + 2 * kv_out * hidden
        if qkv_bias:
            layer.attn_split += scheme.dense(q_out)
            layer.attn_kv += scheme.dense(2 * kv_out)
            params += q_out + 2 * kv_out
        if o_bias:
            layer.replicated += scheme.dense(hidden)
            params += hidden
        if qk_norm:
            layer.replicated += scheme.dense(2 * head_dim)
            params += 2 * head_dim
        layer.attn_bytes = layer.attn_split + layer.attn_kv + layer.replicated
        layer.replicated += scheme.dense(2 * hidden)
        params += 2 * hidden
        if moe:
            if model_type == "mixtral":
                mp, path, names = lp + "block_sparse_moe.", "experts", ("w1", "w3", "w2")
            else:
                mp, path, names = lp + "mlp.", "experts", ("gate_proj", "up_proj", "down_proj")
            layer.expert_bytes, p = _expert_bytes(scheme, mp, path, moe_inter, hidden, n_experts, names)
            layer.n_experts = n_experts
            params += p * n_experts
            # router: nn.Linear(hidden, E) in transformers, ReplicatedLinear in SGLang
            layer.replicated += scheme.linear(mp + "gate", n_experts, hidden)
            params += n_experts * hidden
            shared_inter = cfg.get("shared_expert_intermediate_size") or 0
            if model_type == "qwen2_moe" and shared_inter:
                size, p = _mlp(scheme, mp + "shared_expert.", shared_inter, hidden)
                layer.mlp_split += size
                layer.replicated += scheme.linear(mp + "shared_expert_gate", 1, hidden)
                params += p + hidden
        else:
            if not inter:
                raise CannotPlan("cannot plan: intermediate_size missing for a dense layer")
            size, p = _mlp(scheme, lp + "mlp.", inter, hidden)
            layer.mlp_split += size
            params += p
        layer.params = params
        spec.layers.append(layer)


def _moonvit(vcfg, dense):
    """MoonViT vision tower + patch-merger projector of Kimi-VL/K2.5 (16-bit, not quantized).

    Follows Kimi-VL's ``modeling_kimi_vl.py`` (MoonVitPretrainedModel: patch embedding conv,
    learnable 2D position embedding, pre-norm ViT blocks with fused qkv + out projection and
    a 2-layer GELU MLP, final LayerNorm) and ``KimiVLMultiModalProjector`` (LayerNorm,
    Linear(h*k, h*k), GELU, Linear(h*k, text_hidden) with k = merge kernel area). The time
    position embedding of K2.5 (init_pos_emb_time x hidden) is added when given.
    """
    keys = ("vt_hidden_size", "vt_intermediate_size", "vt_num_hidden_layers", "patch_size",
            "init_pos_emb_height", "init_pos_emb_width", "text_hidden_size", "merge_kernel_size")
    missing = [k for k in keys if vcfg.get(k) in (None, 0)]
    if missing:
        raise CannotPlan("cannot plan: vision_config lacks %s (unknown vision tower)" % ", ".join(missing))
    h, inter, n = vcfg["vt_hidden_size"], vcfg["vt_intermediate_size"], vcfg["vt_num_hidden_layers"]
    patch = vcfg["patch_size"]
    params = 3 * patch * patch * h + h  # patch conv + bias
    params += vcfg["init_pos_emb_height"] * vcfg["init_pos_emb_width"] * h
    params += (vcfg.get("init_pos_emb_time") or 0) * h
    block = (3 * h * h + 3 * h) + (h * h + h) + (2 * h * inter + inter + h) + 4 * h
    params += n * block + 2 * h  # blocks + final LayerNorm
    k = 1
    for dim in vcfg["merge_kernel_size"]:
        k *= dim
    mm = vcfg.get("mm_hidden_size") or h
    params += 2 * mm + (mm * k) * (mm * k) + mm * k + (mm * k) * vcfg["text_hidden_size"] + vcfg["text_hidden_size"]
    return params, params * dense


def spec_from_config(config, index=None):
    """Build a :class:`ModelSpec` from a parsed config.json (and optional index.json)."""
    if not isinstance(config, dict):
        raise CannotPlan("cannot plan: config.json is not a JSON object")
    spec = ModelSpec()
    top = config
    spec.model_type = top.get("model_type")
    archs = top.get("architectures") or []
    spec.architecture = archs[0] if archs else None
    cfg, prefix = top, ""
    if spec.model_type in WRAPPER_TYPES:
        cfg = top.get("text_config")
        if not isinstance(cfg, dict):
            raise CannotPlan("cannot plan: %s config has no text_config" % spec.model_type)
        prefix = "language_model."
    elif "text_config" in top and spec.model_type not in MLA_TYPES + GQA_DENSE_TYPES + GQA_MOE_TYPES:
        raise CannotPlan(
            "cannot plan: unknown multimodal model_type %r (text_config wrapper not known)"
            % spec.model_type)
    text_type = cfg.get("model_type")
    spec.text_model_type = text_type
    qcfg = top.get("quantization_config") or cfg.get("quantization_config")
    spec.dense_bytes = _dense_bytes(cfg, top)
    scheme = make_scheme(qcfg, spec.dense_bytes)
    spec.quantization = scheme.name
    if text_type in MLA_TYPES:
        _build_mla(cfg, scheme, spec, prefix)
    elif text_type in GQA_DENSE_TYPES + GQA_MOE_TYPES:
        _build_gqa(cfg, scheme, spec, prefix, text_type)
    else:
        raise CannotPlan(
            "cannot plan: unknown model_type %r (known: %s)"
            % (text_type, ", ".join(MLA_TYPES + GQA_DENSE_TYPES + GQA_MOE_TYPES + WRAPPER_TYPES)))
    if not spec.layers:
        raise CannotPlan("cannot plan: model has no decoder layers")
    hidden, vocab = spec.hidden_size, spec.vocab_size
    spec.embed_bytes = scheme.dense(vocab * hidden)
    spec.tied_embeddings = bool(cfg.get("tie_word_embeddings", top.get("tie_word_embeddings", False)))
    spec.lm_head_bytes = scheme.linear(prefix + "lm_head", vocab, hidden)
    spec.final_norm_bytes = scheme.dense(hidden)
    spec.params = sum(layer.params for layer in spec.layers) + vocab * hidden + hidden
    if not spec.tied_embeddings:
        spec.params += vocab * hidden
    vcfg = top.get("vision_config")
    if spec.model_type in WRAPPER_TYPES and isinstance(vcfg, dict):
        spec.vision_params, spec.vision_bytes = _moonvit(vcfg, spec.dense_bytes)
        # SGLang's KimiK25VisionConfig reads num_hidden_layers / hidden_size, defaults 27 /
        # 1152 (0.5.9 srt/configs/kimi_k25.py:45-46); the checkpoint names them vt_*
        spec.sglang_vit = (vcfg.get("num_hidden_layers", 27), vcfg.get("hidden_size", 1152))
    elif isinstance(vcfg, dict):
        raise CannotPlan("cannot plan: vision tower of %r is not known" % spec.model_type)
    spec.max_context = cfg.get("max_position_embeddings")
    if index is not None:
        total = (index.get("metadata") or {}).get("total_size") if isinstance(index, dict) else None
        if isinstance(total, int) and total > 0:
            spec.checkpoint_bytes = total
            expected = spec.total_bytes() + spec.mtp_bytes
            delta = (total - expected) / float(expected)
            if abs(delta) > 0.05:
                spec.warnings.append(
                    "checkpoint total_size %.1f GiB differs from the computed %.1f GiB by %+.1f%%; "
                    "the config may not describe the stored weights"
                    % (total / GIB, expected / GIB, 100 * delta))
    return spec


def load_model(path):
    """Read ``config.json`` (required) and ``model.safetensors.index.json`` from a directory."""
    # imported here: the rest of this file is standard library only, because the Hub double
    # loads it alone by path (tests/hub_double/hub_double.py config_total_size)
    from ansible_collections.gpufleet.sglang.plugins.module_utils.common._files import load_json  # pylint: disable=import-outside-toplevel

    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise CannotPlan("cannot plan: %s has no config.json" % path)
    try:
        config = load_json(cfg_path)
    except (OSError, IOError, ValueError) as exc:
        raise CannotPlan("cannot plan: cannot read %s: %s" % (cfg_path, exc))
    index = None
    idx_path = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(idx_path):
        try:
            index = load_json(idx_path)
        except (OSError, IOError, ValueError) as exc:
            raise CannotPlan("cannot plan: cannot read %s: %s" % (idx_path, exc))
    return spec_from_config(config, index)
