"""TEST DOUBLE: what ServerArgs derives and checks before any GPU work, per release.

The real release runs, in ``launch_server`` before the engine starts:
0.5.9 ``prepare_server_args`` -> ``ServerArgs.__post_init__`` (``srt/server_args.py:703``)
-> ``check_server_args`` (``:5130``); 0.5.23 ``prepare_server_args`` (``:668``) ->
``resolve_once`` (``:244``, the ``srt/arg_groups`` resolution pipeline) ->
``check_server_args`` (``srt/arg_groups/validation_hook.py``). This module derives the
values the collection's server-args gate reports (``_server_args_gate.KEYS``) the same way,
citing the source line of each rule; ``tests/unit/emulator/test_server_args.py`` compares it
with what the real packages derived (``tests/fixtures/server-args/server-args.json``).

Only what the collection's strategies reach is modelled: memory fraction, chunked prefill,
CUDA-graph batch sizes, attention backend (MLA / MHA on SM 9.0 / 10.x / 12.x), DP attention,
the a2a backends that span EP over TP, pipeline parallelism and its checks.
"""

import json
import os

from sglang._emulator import _vendor
from sglang._emulator.release import version_tuple


# A check_server_args refusal: the real ones are ``assert`` statements, so the error the
# release dies of is a plain AssertionError with the assert's message.
ServerArgsCheckError = AssertionError


def model_facts(model_path):
    """MLA or not, multimodal or not, and the vision tower's size, from config.json."""
    try:
        with open(os.path.join(model_path, "config.json")) as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        config = {}
    text = config.get("text_config") or config
    vision = config.get("vision_config")
    # KimiK25VisionConfig reads num_hidden_layers / hidden_size (defaults 27 / 1152,
    # 0.5.9 srt/configs/kimi_k25.py:45-46); the checkpoint's vt_* keys are not those names
    vit_layers = vit_hidden = None
    if isinstance(vision, dict):
        vit_layers = vision.get("num_hidden_layers", 27 if config.get("model_type") == "kimi_k25" else 24)
        vit_hidden = vision.get("hidden_size", 1152 if config.get("model_type") == "kimi_k25" else 1024)
    return {
        "mla": "kv_lora_rank" in text,
        "multimodal": isinstance(vision, dict),
        "vit_layers": vit_layers,
        "vit_hidden": vit_hidden,
    }


def _bands(gpu_mem, tp):
    """(chunked_prefill_size, cuda_graph_max_bs) by GPU memory in MiB: the bands of 0.5.9
    ``srt/server_args.py:936-1001`` (0.5.23 keeps them, ``srt/arg_groups/memory_hook.py:47``),
    taken from the collection's planner (``_vendor``), which holds the same table; without
    a GPU memory 0.5.9 falls back to 4096 / 160 (:1003-1007)."""
    if gpu_mem is None:
        return 4096, 160
    return _vendor.load()._bands(gpu_mem, tp)  # pylint: disable=protected-access


def cuda_graph_bs(max_bs):
    """0.5.9 ``srt/server_args.py:1076-1105`` (no speculative decoding, padding on)."""
    capture = ([1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16))
               + list(range(512, max_bs + 1, 32)))
    return [bs for bs in capture if bs <= max_bs]


def vlm_factor(vit_layers, vit_hidden):
    """``adjust_mem_fraction_for_vlm``: 0.5.9 ``srt/server_args.py:5483-5521``; 0.5.23
    ``srt/arg_groups/memory_hook.py:417-460`` (same arithmetic, as in the planner)."""
    return _vendor.load().vlm_fraction_factor((vit_layers, vit_hidden))


def derive(release, asked, gpu_mem, cc, model):
    """``(derived, warnings)`` for the argparse values ``asked`` (dest -> value).

    Raises :class:`ServerArgsCheckError` with the real message where check_server_args
    (or an assert of the derivation) refuses.
    """
    v = version_tuple(release)
    d = dict(asked)
    warnings = []
    tp, pp = int(d.get("tp_size") or 1), int(d.get("pp_size") or 1)
    new = v >= (0, 5, 23)

    if new and d.get("enable_dp_attention"):
        # 0.5.23 srt/arg_groups/parallel_hook.py:39-61: --dp-size N --enable-dp-attention
        # becomes --attn-dp-size N, before any handler reads the layout
        if int(d.get("attn_dp_size") or 1) == 1:
            d["attn_dp_size"], d["dp_size"] = int(d.get("dp_size") or 1), 1
        d["enable_dp_attention"] = False
    attn_dp = int(d.get("attn_dp_size") or 1) if new else None
    # 0.5.9 reads enable_dp_attention/dp_size as given in the memory settings (:1040) and
    # clears DP attention with dp 1 only later (:2110-2112)
    dp_attention_for_memory = (attn_dp > 1) if new else bool(d.get("enable_dp_attention"))
    dp_width = attn_dp if new else int(d.get("dp_size") or 1)

    chunk, max_bs = _bands(gpu_mem, tp)
    if d.get("chunked_prefill_size") is None:
        d["chunked_prefill_size"] = chunk
    if d.get("cuda_graph_max_bs") is None:
        d["cuda_graph_max_bs"] = max_bs
    d["cuda_graph_bs"] = cuda_graph_bs(d["cuda_graph_max_bs"])
    max_bs = d["cuda_graph_max_bs"]

    a2a = d.get("moe_a2a_backend") or "none"
    if d.get("mem_fraction_static") is None:
        reserved = 512 + max(d["chunked_prefill_size"], 2048) * 1.5 + tp * pp / 8 * 1024
        if not new:
            # 0.5.9 srt/server_args.py:1030-1062
            reserved += max_bs * 2
            if dp_attention_for_memory:
                reserved += max_bs * dp_width * 3
                if max_bs > 300:
                    reserved += max_bs * dp_width * 1.5
        else:
            # 0.5.23 srt/arg_groups/memory_hook.py:309-317, reserve_for_graph_mb :357-399
            reserved += max_bs * 2
            if dp_attention_for_memory:
                reserved += max_bs * dp_width * 3
                if max_bs > 300:
                    reserved += max_bs * dp_width * 1.5
            # the prefill CUDA graph is off under pp > 1 unless asked for
            # (srt/arg_groups/cuda_graph_hook.py:150-160)
            if pp == 1 and model["mla"]:
                reserved += 1.5 * 1024  # prefill CUDA graph, MLA backend (:388-389)
            if pp == 1 and a2a == "deepep":
                reserved += 1 * 1024  # breakable prefill graph with DeepEP (:391-397)
        if gpu_mem is not None and gpu_mem > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if new and a2a == "deepep":
            reserved += 2 * 1024  # reserve_for_deepep_a2a_mb (:402-414)
        fraction = round((gpu_mem - reserved) / gpu_mem, 3) if gpu_mem else (0.95 if new else 0.88)
        if model["multimodal"]:
            fraction *= vlm_factor(model["vit_layers"], model["vit_hidden"])
        d["mem_fraction_static"] = fraction

    if d.get("attention_backend") is None:
        # 0.5.9 srt/server_args.py:1781-1828: MLA -> fa3 on Hopper, flashinfer on SM100,
        # else triton; MHA -> fa3 / trtllm_mha / flashinfer
        major = int(cc[0]) if cc else 0
        if model["mla"]:
            d["attention_backend"] = "fa3" if major == 9 else ("flashinfer" if major == 10 else "triton")
        else:
            d["attention_backend"] = "fa3" if major == 9 else ("trtllm_mha" if major == 10 else "flashinfer")

    if not new:
        if int(d.get("dp_size") or 1) == 1:
            # 0.5.9 srt/server_args.py:2110-2112
            d["enable_dp_attention"] = False
            d["enable_dp_lm_head"] = False
        if d.get("enable_dp_attention"):
            # (:2116 asserts that dp divides tp; the emulator's layout check names it)
            d["chunked_prefill_size"] //= int(d["dp_size"])
            warnings.append("DP attention is enabled. The chunked prefill size is adjusted to %d "
                            "to avoid MoE kernel issues. " % d["chunked_prefill_size"])
    elif attn_dp > 1:
        original = d["chunked_prefill_size"]
        d["chunked_prefill_size"] = original // attn_dp
        warnings.append("DP attention is enabled. chunked prefill size is adjusted from %d to %d."
                        % (original, d["chunked_prefill_size"]))
        d["enable_dp_attention"] = True  # resolved_dict reports the width as the old flag

    spanning = ("deepep", "mooncake", "ascend_fuseep", "flashinfer", "mori")
    if new:
        spanning += ("deepep_v2", "megamoe", "nixl", "pplx", "flashinfer_megamoe")
    if a2a in spanning:
        # 0.5.9 srt/server_args.py:2177-2229; 0.5.23 srt/arg_groups/overrides.py:1600-1613
        if a2a == "deepep" and d.get("deepep_mode") == "normal":
            d["disable_cuda_graph"] = True
            warnings.append("Cuda graph is disabled because deepep_mode=`normal`")
        if not new:  # 0.5.23 logs it at INFO only (srt/arg_groups/overrides.py:1610-1617)
            warnings.append("DeepEP MoE is enabled. The expert parallel size is adjusted to be "
                            "the same as the tensor parallel size[%d]." % tp)
        d["ep_size"] = tp

    if pp > 1:
        # 0.5.9 srt/server_args.py:2271-2276; 0.5.23 srt/arg_groups/overrides.py:1622-1627
        d["disable_overlap_schedule"] = True
        warnings.append("Pipeline parallelism is incompatible with overlap schedule.")
    return d, warnings


def check(release, d):
    """check_server_args, the parts the collection's layouts reach."""
    tp, pp = int(d.get("tp_size") or 1), int(d.get("pp_size") or 1)
    nnodes = int(d.get("nnodes") or 1)
    new = version_tuple(release) >= (0, 5, 23)
    if (tp * pp) % nnodes:
        # 0.5.9 srt/server_args.py:5132-5134
        raise ServerArgsCheckError("tp_size must be divisible by number of nodes")
    if pp > 1:
        if new:
            # 0.5.23 srt/arg_groups/validation_hook.py:120-123
            if not d.get("disable_overlap_schedule"):
                raise ServerArgsCheckError("Pipeline parallelism is not compatible with overlap schedule")
        elif not d.get("disable_overlap_schedule") or d.get("speculative_algorithm") or d.get("enable_mixed_chunk"):
            # 0.5.9 srt/server_args.py:5136-5141
            raise ServerArgsCheckError(
                "Pipeline parallelism is not compatible with overlap schedule, speculative "
                "decoding, mixed chunked prefill.")
    if (not new and int(d.get("dp_size") or 1) > 1 and nnodes != 1
            and not d.get("enable_dp_attention")):
        # 0.5.9 srt/server_args.py:5143-5145
        raise ServerArgsCheckError("multi-node data parallel is not supported unless dp attention!")


def refusal(release, args):
    """What ``launch_server`` dies of before any GPU work, or None: the derivation's asserts
    and ``check_server_args`` (the checks do not depend on the GPUs' memory)."""
    try:
        derived, _warnings = derive(release, args, None, None, model_facts(args.get("model_path") or ""))
        check(release, derived)
    except ServerArgsCheckError as exc:
        return exc
    return None
