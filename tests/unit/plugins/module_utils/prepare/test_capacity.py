# -*- coding: utf-8 -*-
"""Capacity planner over the real config.json fixtures.

Expected figures come from shared/reference/prereqs.md §7, §9 (computed by an independent
estimator) and from the models' published parameter counts; they are checked within 3 %.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import os
import re
import shutil
import time

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _capacity as cap
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._capacity import (
    GIB,
    CannotPlan,
    default_mem_fraction_static,
    default_pp_partition,
    load_model,
    plan_layout,
    spec_from_config,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import (
    StrategyError,
    check_fits,
)
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES as _FIXTURES

FIXTURES = _FIXTURES
MODELS = os.path.join(FIXTURES, "models")
RTX_PRO_6000_MIB = 97887  # nvidia-smi, RTX PRO 6000 Blackwell Workstation (prereqs.md §2)


def model_dir(name):
    return os.path.join(MODELS, name)


def config(name):
    with open(os.path.join(model_dir(name), "config.json")) as handle:
        return json.load(handle)


def h200_mib():
    """Total memory of an H200 as nvidia-smi prints it (fixture, not a constant)."""
    with open(os.path.join(FIXTURES, "nvidia-smi", "h200-x8-table.txt")) as handle:
        totals = set(int(m) for m in re.findall(r"\d+MiB\s*/\s*(\d+)MiB", handle.read()))
    assert len(totals) == 1
    return totals.pop()


def near(value, target, tol=0.03):
    return abs(value - target) <= tol * abs(target)


@pytest.fixture(scope="module")
def k25():
    return load_model(model_dir("moonshotai__Kimi-K2.5"))


@pytest.fixture(scope="module")
def k2_fp8():
    return load_model(model_dir("moonshotai__Kimi-K2-Instruct"))


# ---- model side ------------------------------------------------------------------------

def test_k25_total_weights(k25):
    assert k25.model_type == "kimi_k25" and k25.text_model_type == "kimi_k2"
    assert k25.attention == "mla" and k25.quantization == "int4-group32"
    assert near(k25.total_bytes() / GIB, 553.0)
    # the text part alone is the K2-Thinking INT4 figure; the vision tower is ~0.4B params
    assert near(k25.text_bytes() / GIB, 553.0, 0.005)
    assert 0.3e9 < k25.vision_params < 0.6e9
    assert near(k25.params / 1e9, 1026.4, 0.001)


def test_deepseek_v3_parameters():
    spec = load_model(model_dir("deepseek-ai__DeepSeek-V3"))
    assert near(spec.params / 1e9, 671.0, 0.01)
    assert spec.mtp_layers == 1  # present in the checkpoint, not loaded without NextN
    assert [layer.moe for layer in spec.layers[:4]] == [False, False, False, True]


def test_qwen3_30b_a3b_parameters():
    spec = load_model(model_dir("Qwen__Qwen3-30B-A3B"))
    assert spec.attention == "gqa" and spec.quantization == "bf16"
    assert near(spec.params / 1e9, 30.5, 0.01)
    assert all(layer.moe for layer in spec.layers)
    assert near(spec.total_bytes(), spec.params * 2, 0.001)


def test_mixtral_parameters():
    spec = load_model(model_dir("mistralai__Mixtral-8x7B-v0.1"))
    assert near(spec.params / 1e9, 46.7, 0.01)
    assert spec.layers[0].n_experts == 8


def test_k26_nvfp4_is_sized_like_int4_experts():
    spec = load_model(model_dir("nvidia__Kimi-K2.6-NVFP4"))
    assert spec.quantization == "nvfp4-g16"
    # NVFP4: 0.5 B + one FP8 scale per 16 = 0.5625 B, the same as INT4 g32 + BF16 scale
    assert near(spec.total_bytes() / GIB, 553.0)
    # layer 0 (dense) is excluded from quantization in the ignore list: 16-bit
    dense = spec.layers[0]
    assert dense.mlp_split == 3 * 7168 * 18432 * 2


def test_int4_ignore_list_is_honoured():
    cfg = config("moonshotai__Kimi-K2.5")
    base = spec_from_config(cfg).total_bytes()
    cfg2 = copy.deepcopy(cfg)
    cfg2["text_config"]["quantization_config"]["ignore"] = ["lm_head"]
    assert spec_from_config(cfg2).total_bytes() < base - 10 * GIB  # attention + dense go INT4


def test_index_total_size_is_read_and_cross_checked(tmp_path):
    shutil.copy(os.path.join(model_dir("moonshotai__Kimi-K2.5"), "config.json"), str(tmp_path))
    index = {"metadata": {"total_size": int(554.3 * GIB)}, "weight_map": {}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    spec = load_model(str(tmp_path))
    assert spec.checkpoint_bytes == index["metadata"]["total_size"] and not spec.warnings
    index["metadata"]["total_size"] = int(900 * GIB)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "differs" in load_model(str(tmp_path)).warnings[0]


def test_tied_embeddings_counted_once_but_loaded_on_last_pp_stage():
    cfg = config("Qwen__Qwen3-30B-A3B")
    cfg["tie_word_embeddings"] = True
    tied = spec_from_config(cfg)
    untied = load_model(model_dir("Qwen__Qwen3-30B-A3B"))
    assert untied.params - tied.params == cfg["vocab_size"] * cfg["hidden_size"]
    one = plan_layout(tied, {"tp": 2}, 2, 81559)
    two = plan_layout(tied, {"tp": 1, "pp": 2}, 2, 81559)
    assert sum(two["weights_per_gpu_gib"]) > 2 * one["weights_per_gpu_max_gib"] + 0.5


# ---- refusals ----------------------------------------------------------------------------

def test_unknown_model_type_refused():
    cfg = config("mistralai__Mixtral-8x7B-v0.1")
    cfg["model_type"] = "gpt_oss"
    with pytest.raises(CannotPlan, match="unknown model_type 'gpt_oss'"):
        spec_from_config(cfg)


@pytest.mark.parametrize("qcfg, reason", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "quantization 'awq'"),
    ({"quant_method": "gptq", "bits": 4}, "quantization 'gptq'"),
    ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "W4A8_AWQ"),
])
def test_unknown_quantization_refused(qcfg, reason):
    cfg = config("deepseek-ai__DeepSeek-V3")
    cfg["quantization_config"] = qcfg
    with pytest.raises(CannotPlan, match=re.escape(reason)):
        spec_from_config(cfg)


def test_compressed_tensors_other_format_refused():
    cfg = config("moonshotai__Kimi-K2.5")
    cfg["text_config"]["quantization_config"]["format"] = "float-quantized"
    with pytest.raises(CannotPlan, match="float-quantized"):
        spec_from_config(cfg)


def test_missing_config_refused(tmp_path):
    with pytest.raises(CannotPlan, match="no config.json"):
        load_model(str(tmp_path))


def test_unknown_kv_dtype_refused(k25):
    with pytest.raises(CannotPlan, match="kv dtype"):
        plan_layout(k25, {"tp": 8}, 8, RTX_PRO_6000_MIB, kv_dtype="int2")


def test_layout_gpu_mismatch_refused(k25):
    with pytest.raises(cap.LayoutError, match="needs 16 GPUs"):
        plan_layout(k25, {"tp": 16}, 8, RTX_PRO_6000_MIB)
    # two nodes of 8 make tp16 valid
    assert plan_layout(k25, {"tp": 16}, 8, RTX_PRO_6000_MIB, nnodes=2)["gpus"] == 16


def test_tp4_dp2_is_dp_attention_on_four_gpus_replicas_on_eight(k25):
    """A strategy's dp is DP attention (what the collection renders): dp splits the tp group."""
    plan = plan_layout(k25, {"tp": 4, "dp": 2}, 4, RTX_PRO_6000_MIB)
    assert plan["gpus"] == 4 and plan["layout"]["dp_attention"]
    with pytest.raises(cap.LayoutError, match="needs 4 GPUs, the server has 8"):
        plan_layout(k25, {"tp": 4, "dp": 2}, 8, RTX_PRO_6000_MIB)
    # plain --dp-size replicas (dp_attention=False) replicate the tp group: 8 GPUs
    replicas = plan_layout(k25, {"tp": 4, "dp": 2}, 8, RTX_PRO_6000_MIB, dp_attention=False)
    assert replicas["gpus"] == 8 and not replicas["layout"]["dp_attention"]
    tp4 = plan_layout(k25, {"tp": 4}, 4, RTX_PRO_6000_MIB)
    # every replica holds what a lone tp4 server holds
    assert replicas["weights_per_gpu_gib"] == tp4["weights_per_gpu_gib"] * 2
    assert replicas["kv_tokens"] == tp4["kv_tokens"]
    with pytest.raises(cap.LayoutError, match="needs 8 GPUs, the server has 4"):
        plan_layout(k25, {"tp": 4, "dp": 2}, 4, RTX_PRO_6000_MIB, dp_attention=False)


@pytest.mark.parametrize("dp_attention", [False, True])
def test_planner_and_strategy_count_gpus_alike(k25, dp_attention):
    """plan_layout accepts a GPU count exactly when _strategy.check_fits does."""
    for layout in ({"tp": 4, "dp": 2}, {"tp": 8}, {"tp": 2, "pp": 2, "dp": 2}, {"tp": 4, "pp": 2},
                   {"tp": 8, "dp": 8}, {"tp": 2, "dp": 4}):
        full = dict({"pp": 1, "ep": 1, "dp": 1}, **layout)
        for gpus in (2, 4, 8, 16):
            try:
                check_fits(full, gpus, dp_attention=dp_attention)
                fits = True
            except StrategyError:
                fits = False
            try:
                plan_layout(k25, layout, gpus, RTX_PRO_6000_MIB, dp_attention=dp_attention)
                planned = True
            except cap.LayoutError as exc:
                assert "GPUs" in str(exc) or "divide" in str(exc), str(exc)
                planned = False
            assert planned == fits, (layout, gpus, dp_attention)


# ---- SGLang rules ------------------------------------------------------------------------

def test_default_pp_partition():
    assert default_pp_partition(61, 8) == [7, 7, 7, 8, 8, 8, 8, 8]
    assert default_pp_partition(61, 2) == [30, 31]
    assert default_pp_partition(48, 4) == [12, 12, 12, 12]


@pytest.mark.parametrize("mib, tp, pp, expected", [
    (RTX_PRO_6000_MIB, 1, 8, 0.838),
    (RTX_PRO_6000_MIB, 8, 1, 0.833),
    (81559, 8, 1, 0.799),
    (143771, 8, 1, 0.886),
])
def test_default_mem_fraction_static(mib, tp, pp, expected):
    assert default_mem_fraction_static(mib, tp, pp)[0] == expected


# ---- plans: Kimi K2.5 INT4 on 8x RTX PRO 6000 --------------------------------------------

def test_k25_tp8(k25):
    plan = plan_layout(k25, {"tp": 8}, 8, RTX_PRO_6000_MIB)
    assert len(plan["weights_per_gpu_gib"]) == 8
    assert near(plan["weights_per_gpu_max_gib"], 70.7)
    assert plan["weights_per_gpu_min_gib"] == plan["weights_per_gpu_max_gib"]
    assert plan["kv_bytes_per_token_per_gpu"] == (512 + 64) * 2 * 61  # MLA: not divided by TP
    assert plan["mem_fraction_static"] == 0.833 and plan["fits"]
    assert plan["pp_layer_partition"] is None
    budget = RTX_PRO_6000_MIB * 2 ** 20 * 0.833
    expected_tokens = (budget - plan["weights_per_gpu_max_gib"] * GIB) / plan["kv_bytes_per_token_per_gpu"]
    assert near(plan["kv_tokens"], expected_tokens, 0.01)


def test_k25_ep_moves_the_same_bytes_as_tp(k25):
    tp8 = plan_layout(k25, {"tp": 8}, 8, RTX_PRO_6000_MIB)
    for ep in (4, 8):
        plan = plan_layout(k25, {"tp": 8, "ep": ep}, 8, RTX_PRO_6000_MIB)
        assert plan["weights_per_gpu_max_gib"] == tp8["weights_per_gpu_max_gib"]


def test_k25_pp8_default_split(k25):
    plan = plan_layout(k25, {"tp": 1, "pp": 8}, 8, RTX_PRO_6000_MIB, pp_partition="7,7,7,8,8,8,8,8")
    assert plan["pp_stage_layers"] == [7, 7, 7, 8, 8, 8, 8, 8]
    assert near(plan["weights_per_gpu_min_gib"], 57.9)
    assert near(plan["weights_per_gpu_max_gib"], 75.3)
    assert plan["weights_per_gpu_gib"][0] == plan["weights_per_gpu_min_gib"]
    assert plan["weights_per_gpu_gib"][-1] == plan["weights_per_gpu_max_gib"]
    assert near(plan["kv_tokens"], 564e3, 0.05)


def test_k25_pp8_balanced_split(k25):
    plan = plan_layout(k25, {"tp": 1, "pp": 8}, 8, RTX_PRO_6000_MIB)
    assert plan["default_pp_partition"] == "7,7,7,8,8,8,8,8"
    assert plan["pp_layer_partition"] == "8,8,8,8,8,7,7,7"
    assert near(plan["weights_per_gpu_min_gib"], 63.9)
    assert near(plan["weights_per_gpu_max_gib"], 73.1)
    default = plan_layout(k25, {"tp": 1, "pp": 8}, 8, RTX_PRO_6000_MIB, pp_partition=plan["default_pp_partition"])
    assert plan["kv_tokens"] > default["kv_tokens"]
    assert near(plan["kv_tokens"], 819e3, 0.03)
    assert plan["kv_bytes_per_token_per_gpu"] == 576 * 2 * 8
    assert plan["default_pp_split"] == {
        "weights_per_gpu_min_gib": default["weights_per_gpu_min_gib"],
        "weights_per_gpu_max_gib": default["weights_per_gpu_max_gib"],
        "kv_tokens": default["kv_tokens"],
    }


def test_k25_dp_attention_replicates_attention(k25):
    tp8 = plan_layout(k25, {"tp": 8}, 8, RTX_PRO_6000_MIB)
    dp8 = plan_layout(k25, {"tp": 8, "dp": 8}, 8, RTX_PRO_6000_MIB, dp_attention=True)
    assert dp8["layout"]["dp_attention"]
    attention = sum(layer.attn_bytes for layer in k25.layers)
    # attention no longer split 8 ways (+7/8 of the split part), embedding replicated
    assert dp8["weights_per_gpu_max_gib"] - tp8["weights_per_gpu_max_gib"] > 0.8 * attention * 7 / 8 / GIB
    assert not dp8["fits"]


def test_fp8_kv_halves_kv_per_token(k25):
    bf16 = plan_layout(k25, {"tp": 8}, 8, RTX_PRO_6000_MIB)
    fp8 = plan_layout(k25, {"tp": 8}, 8, RTX_PRO_6000_MIB, kv_dtype="fp8_e4m3")
    assert fp8["kv_bytes_per_token_per_gpu"] * 2 == bf16["kv_bytes_per_token_per_gpu"]
    assert near(fp8["kv_tokens"], 2 * bf16["kv_tokens"], 0.001)


def test_context_length_and_explicit_fraction(k25):
    plan = plan_layout(k25, {"tp": 8}, 8, RTX_PRO_6000_MIB, context_length=262144)
    assert not plan["fits"] and plan["margin_gib"] < 0
    assert plan["recommended_mem_fraction_static"] > plan["default_mem_fraction_static"]
    plan = plan_layout(k25, {"tp": 8}, 8, RTX_PRO_6000_MIB, mem_fraction_static=0.90)
    assert plan["mem_fraction_static"] == 0.9 and plan["kv_tokens"] > 200e3


# ---- Kimi K2-Instruct FP8 ---------------------------------------------------------------

def test_k2_fp8_refused_on_96gb(k2_fp8):
    assert near(k2_fp8.total_bytes() / GIB, 959.0)
    plan = plan_layout(k2_fp8, {"tp": 8}, 8, RTX_PRO_6000_MIB)
    assert not plan["fits"] and plan["kv_tokens"] == 0 and plan["margin_gib"] < -30
    assert plan["recommended_mem_fraction_static"] is None
    for layout in ({"tp": 1, "pp": 8}, {"tp": 8, "ep": 8}, {"tp": 2, "pp": 4}):
        assert not plan_layout(k2_fp8, layout, 8, RTX_PRO_6000_MIB)["fits"]


def test_k2_fp8_fits_tp8_on_h200(k2_fp8):
    mib = h200_mib()
    assert mib == 143771
    plan = plan_layout(k2_fp8, {"tp": 8}, 8, mib)
    assert plan["fits"] and plan["mem_fraction_static"] == 0.886
    assert near(plan["weights_per_gpu_max_gib"], 120.6)
    assert 30e3 < plan["kv_tokens"] < 80e3  # prereqs §9.2: "only ~59k tokens"


def test_deepseek_v3_fp8_pp8_does_not_fit_rtx():
    spec = load_model(model_dir("deepseek-ai__DeepSeek-V3"))
    plan = plan_layout(spec, {"tp": 1, "pp": 8}, 8, RTX_PRO_6000_MIB, pp_partition="7,7,7,8,8,8,8,8")
    assert near(plan["weights_per_gpu_min_gib"], 46.2) and near(plan["weights_per_gpu_max_gib"], 87.5)
    assert not plan["fits"]


# ---- GQA MoE ------------------------------------------------------------------------------

def test_qwen3_moe_gqa_kv_replicated_over_tp():
    spec = load_model(model_dir("Qwen__Qwen3-30B-A3B"))
    tp4 = plan_layout(spec, {"tp": 4}, 4, 81559)
    tp8 = plan_layout(spec, {"tp": 8}, 8, 81559)
    # 4 KV heads: one per rank at TP4, still one (replicated) at TP8
    assert tp4["kv_bytes_per_token_per_gpu"] == 2 * 1 * 128 * 2 * 48
    assert tp8["kv_bytes_per_token_per_gpu"] == tp4["kv_bytes_per_token_per_gpu"]
    assert near(tp4["weights_per_gpu_max_gib"], spec.total_bytes() / GIB / 4, 0.05)
    assert tp4["fits"] and tp4["kv_tokens"] > 1e6


def test_mixtral_tp2():
    spec = load_model(model_dir("mistralai__Mixtral-8x7B-v0.1"))
    plan = plan_layout(spec, {"tp": 2}, 2, 81559)
    assert near(plan["weights_per_gpu_max_gib"], 46.7e9 * 2 / 2 / GIB, 0.02)
    assert plan["kv_bytes_per_token_per_gpu"] == 2 * 4 * 128 * 2 * 32
    assert plan["fits"]
    assert not plan_layout(spec, {"tp": 1}, 1, 81559)["fits"]  # 87 GiB on one 80 GB card


def test_plan_is_fast(k25):
    start = time.perf_counter()
    for _round in range(5):
        plan_layout(k25, {"tp": 1, "pp": 8}, 8, RTX_PRO_6000_MIB)
    assert (time.perf_counter() - start) / 5 < 1.0
