# -*- coding: utf-8 -*-
"""Unit tests of gpufleet.sglang.capacity_plan, driven through main() with a tmp model dir."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil

import pytest


from ansible_collections.gpufleet.sglang.plugins.modules import capacity_plan
from ansible_collections.gpufleet.sglang.tests.paths import FAKES, FIXTURES

MODELS = os.path.join(FIXTURES, "models")
RTX = 97887


@pytest.fixture
def k25_dir(tmp_path, fixtures_dir):
    shutil.copy(os.path.join(fixtures_dir, "models", "moonshotai__Kimi-K2.5", "config.json"), str(tmp_path))
    return str(tmp_path)


@pytest.fixture
def k2_fp8_dir(tmp_path):
    shutil.copy(os.path.join(MODELS, "moonshotai__Kimi-K2-Instruct", "config.json"), str(tmp_path))
    return str(tmp_path)


def test_presets_and_table(k25_dir, run_module):
    result, failed = run_module(capacity_plan, {
        "model_path": k25_dir, "gpu_count": 8, "gpu_memory_mib": RTX,
        "strategies": ["tp8", "pp8", "ep8", "ep4"],
    })
    assert not failed and result["changed"] is False
    names = [plan["name"] for plan in result["plans"]]
    assert names == ["tp8", "pp8", "ep8", "ep4"]
    by_name = dict((plan["name"], plan) for plan in result["plans"])
    assert by_name["pp8"]["layout"] == {"tp": 1, "pp": 8, "ep": 1, "dp": 1, "dp_attention": False}
    assert by_name["pp8"]["pp_layer_partition"] == "8,8,8,8,8,7,7,7"
    assert by_name["pp8"]["default_pp_partition"] == "7,7,7,8,8,8,8,8"
    assert by_name["ep4"]["layout"]["ep"] == 4 and by_name["ep4"]["layout"]["tp"] == 8
    assert by_name["tp8"]["pp_layer_partition"] is None
    assert all(plan["fits"] for plan in result["plans"])
    assert len(by_name["tp8"]["weights_per_gpu_gib"]) == 8
    model = result["model"]
    assert model["architecture"] == "KimiK25ForConditionalGeneration"
    assert model["quantization"] == "int4-group32"
    assert 540 < model["total_weight_gib"] < 570
    assert model["total_weight_bytes"] > 500 * 2 ** 30
    assert 1.0e12 < model["parameters"] < 1.05e12
    table = result["table"]
    assert len(table) == 3 + 4
    assert any(line.startswith("pp8") and "8,8,8,8,8,7,7,7" in line for line in table)


def test_grammar_and_dict_strategies(k25_dir, run_module):
    result, failed = run_module(capacity_plan, {
        "model_path": k25_dir, "gpu_count": 8, "gpu_memory_mib": RTX,
        "strategies": ["tp2-pp4", {"tp": 1, "pp": 8, "name": "pp8-default",
                                   "pp_layer_partition": "7,7,7,8,8,8,8,8"}],
        "mem_fraction_static": 0.85, "kv_dtype": "fp8_e4m3",
    })
    assert not failed
    tp2pp4, pp8 = result["plans"]
    assert tp2pp4["layout"]["tp"] == 2 and tp2pp4["layout"]["pp"] == 4
    assert len(tp2pp4["weights_per_gpu_gib"]) == 8
    assert pp8["name"] == "pp8-default" and pp8["pp_stage_layers"] == [7, 7, 7, 8, 8, 8, 8, 8]
    assert pp8["pp_layer_partition"] is None
    assert pp8["mem_fraction_static"] == 0.85
    assert pp8["kv_bytes_per_token_per_gpu"] == 576 * 1 * 8


def test_layout_for_other_gpu_count_is_a_plan_error(k25_dir, run_module):
    result, failed = run_module(capacity_plan, {
        "model_path": k25_dir, "gpu_count": 8, "gpu_memory_mib": RTX, "strategies": ["tp16", "tp8"],
    })
    assert not failed
    assert "needs 16 GPUs" in result["plans"][0]["error"] and not result["plans"][0]["fits"]
    assert result["plans"][1]["fits"]
    result, failed = run_module(capacity_plan, {
        "model_path": k25_dir, "gpu_count": 8, "nnodes": 2, "gpu_memory_mib": RTX, "strategies": ["tp16"],
    })
    assert not failed and result["plans"][0]["gpus"] == 16


def test_fp8_refused_on_96gb_fits_on_h200(k2_fp8_dir, run_module):
    result, failed = run_module(capacity_plan, {
        "model_path": k2_fp8_dir, "gpu_count": 8, "gpu_memory_mib": RTX, "strategies": ["tp8"],
    })
    assert not failed and not result["plans"][0]["fits"]
    result, failed = run_module(capacity_plan, {
        "model_path": k2_fp8_dir, "gpu_count": 8, "gpu_memory_mib": 143771, "strategies": ["tp8"],
        "context_length": 32768,
    })
    assert not failed and result["plans"][0]["fits"]


def test_bad_strategy_fails(k25_dir, run_module):
    result, failed = run_module(capacity_plan, {
        "model_path": k25_dir, "gpu_count": 8, "gpu_memory_mib": RTX, "strategies": ["tp8x"],
    })
    assert failed and "invalid strategy" in result["msg"]


def test_missing_config_fails(tmp_path, run_module):
    result, failed = run_module(capacity_plan, {
        "model_path": str(tmp_path), "gpu_count": 8, "gpu_memory_mib": RTX, "strategies": ["tp8"],
    })
    assert failed and "no config.json" in result["msg"]


def test_unknown_model_fails(tmp_path, run_module):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba", "hidden_size": 8}))
    result, failed = run_module(capacity_plan, {
        "model_path": str(tmp_path), "gpu_count": 1, "gpu_memory_mib": RTX, "strategies": ["tp1"],
    })
    assert failed and "cannot plan" in result["msg"] and "mamba" in result["msg"]


def test_check_mode_runs(k25_dir, run_module):
    result, failed = run_module(capacity_plan, {
        "model_path": k25_dir, "gpu_count": 8, "gpu_memory_mib": RTX, "strategies": ["tp8"],
        "_ansible_check_mode": True,
    })
    assert not failed and result["plans"][0]["fits"]


FAKE_SMI = os.path.join(FAKES, "nvidia-smi")
SETS = os.path.join(FAKES, "nvidia-smi-sets")


@pytest.fixture
def h200_host(monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", os.path.join(SETS, "h200-x8"))
    return os.path.abspath(FAKE_SMI)


def test_gpus_from_the_host_when_not_given(k25_dir, h200_host, run_module):
    result, failed = run_module(capacity_plan, {"model_path": k25_dir, "strategies": ["tp8"], "host": "gpu-1",
                                                "nvidia_smi": h200_host})
    assert not failed, result
    assert result["gpus"]["count"] == 8 and result["gpus"]["source"] == "detected"
    assert result["gpus"]["memory_mib"] == 143771 and "H200" in result["gpus"]["name"]
    assert result["plans"][0]["gpus"] == 8


def test_given_gpus_are_a_what_if_with_a_warning(k25_dir, h200_host, run_module, monkeypatch):
    from ansible.module_utils import basic
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, msg: warned.append(msg))
    result, failed = run_module(capacity_plan, {"model_path": k25_dir, "strategies": ["tp8"], "host": "gpu-1",
                                                "gpu_count": 8, "gpu_memory_mib": RTX, "nvidia_smi": h200_host})
    assert not failed, result
    assert result["gpus"]["memory_mib"] == RTX and result["gpus"]["source"] == "inventory"
    assert any("sglang_gpu_memory_mib is 97887, but gpu-1 has 143771 MiB" in w for w in warned)


def test_no_gpus_and_no_variables_says_what_to_give(k25_dir, tmp_path, run_module):
    result, failed = run_module(capacity_plan, {"model_path": k25_dir, "strategies": ["tp8"], "host": "laptop",
                                                "nvidia_smi": str(tmp_path / "no-nvidia-smi")})
    assert failed
    assert result["msg"].startswith("laptop: sglang_gpu_count and sglang_gpu_memory_mib are not set "
                                    "and no GPUs were read on the host"), result["msg"]
