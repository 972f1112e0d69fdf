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
from sglang._emulator import pd as _pd
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


def cuda_graph_bs(max_bs, with_max=False):
    """0.5.9 ``srt/server_args.py:1076-1105`` (no speculative decoding, padding on): the
    steps up to max_bs, so the largest captured size can be below it (``--cuda-graph-max-bs
    20`` captures up to 16). 0.5.23 ``srt/arg_groups/cuda_graph_hook.py:500-532`` appends
    max_bs itself when the steps miss it (``with_max``)."""
    capture = ([1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16))
               + list(range(512, max_bs + 1, 32)))
    capture = [bs for bs in capture if bs <= max_bs]
    if with_max and max_bs not in capture:
        capture.append(max_bs)
    return capture


def cuda_graph_bs_no_padding(max_bs):
    """``--disable-cuda-graph-padding``: every batch size up to max_bs is captured (0.5.9
    ``srt/server_args.py:1085-1086``; 0.5.23 ``srt/arg_groups/cuda_graph_hook.py:506-508``)."""
    return list(range(1, max_bs + 1))


def decode_graph_asked(args):
    """What the argv asks of the decode CUDA graph: ``{"backend", "max_bs", "bs"}`` (None:
    not asked), in the precedence of 0.5.23 ``parse_cuda_graph_config``
    (``srt/arg_groups/cuda_graph_hook.py:32-101``): the explicit ``--cuda-graph-config`` JSON
    over the per-phase flags (``--cuda-graph-backend-decode``, ``--cuda-graph-max-bs-decode``,
    ``--cuda-graph-bs-decode``) over the off-switch ``--disable-decode-cuda-graph`` over the
    legacy ``--disable-cuda-graph``. Older releases have only ``--disable-cuda-graph``,
    ``--cuda-graph-max-bs`` and ``--cuda-graph-bs`` (0.5.9 ``srt/server_args.py:580-581``),
    whose dests this reads as well; a release never has both spellings."""
    asked = {"backend": None, "max_bs": args.get("cuda_graph_max_bs"), "bs": args.get("cuda_graph_bs")}
    if args.get("disable_cuda_graph"):
        asked["backend"] = "disabled"
    if args.get("disable_decode_cuda_graph"):
        asked["backend"] = "disabled"
    if args.get("cuda_graph_backend_decode") is not None:
        asked["backend"] = str(args["cuda_graph_backend_decode"]).strip().lower()
    if args.get("cuda_graph_max_bs_decode") is not None:
        asked["max_bs"] = args["cuda_graph_max_bs_decode"]
    if args.get("cuda_graph_bs_decode") is not None:
        asked["bs"] = args["cuda_graph_bs_decode"]
    config = args.get("cuda_graph_config")
    decode = config.get("decode") if isinstance(config, dict) else None
    if isinstance(decode, dict):
        for key in ("backend", "max_bs", "bs"):
            if key in decode:
                asked[key] = decode[key]
    if isinstance(asked["bs"], int):
        asked["bs"] = [asked["bs"]]
    return asked


def decode_graph_disabled(args):
    """The decode phase runs without CUDA graphs (any release's spelling)."""
    return str(decode_graph_asked(args)["backend"] or "").lower() == "disabled"


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

    chunk, band_bs = _bands(gpu_mem, tp)
    if d.get("chunked_prefill_size") is None:
        d["chunked_prefill_size"] = chunk
    # The decode CUDA graph's batch sizes. ``cuda_graph_max_bs`` / ``cuda_graph_bs`` hold the
    # decode phase's values in every release (0.5.23 keeps them in
    # ``cuda_graph_config.decode``, which the collection's gate reports under these names).
    graph = decode_graph_asked(d)
    padding = not d.get("disable_cuda_graph_padding")
    max_bs = graph["max_bs"]
    if max_bs is None:
        max_bs = band_bs
        mrr = d.get("max_running_requests")
        if new and mrr is not None and max_bs > int(mrr):
            # 0.5.23 srt/arg_groups/memory_hook.py:182-188: a default decode max bs is cut
            # to --max-running-requests (0.5.9 has no such cap)
            max_bs = int(mrr)
    if graph["bs"]:
        # an explicit list sets the max: 0.5.9 srt/server_args.py:1001-1004, 0.5.23
        # srt/arg_groups/memory_hook.py:202-207
        d["cuda_graph_bs"] = sorted(int(b) for b in graph["bs"])
        max_bs = max(d["cuda_graph_bs"])
    else:
        d["cuda_graph_bs"] = (cuda_graph_bs(max_bs, with_max=new) if padding
                              else cuda_graph_bs_no_padding(max_bs))
    d["cuda_graph_max_bs"] = max_bs
    if new:
        d["cuda_graph_max_bs_decode"] = graph["max_bs"]
        d["decode_cuda_graph_backend"] = graph["backend"] or "full"

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
    # --disaggregation-mode prefill|decode: the release's PD resolution (pd.resolve; it
    # raises what the release raises, e.g. for --disaggregation-ib-device without RDMA)
    _pd.resolve(release, d, warnings)
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
    except (ServerArgsCheckError, ValueError, RuntimeError) as exc:
        return exc  # the PD resolution raises ValueError / RuntimeError (pd.resolve)
    return None
