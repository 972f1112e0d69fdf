# -*- coding: utf-8 -*-
"""The host's GPUs and the layout for them (plugins/module_utils/prepare/_preflight.py)."""

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._preflight import (
    PreflightError,
    fit_layout,
    host_gpus,
)

RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def _gpus(count, memory, name):
    return [{"index": i, "name": name, "memory_mib": memory} for i in range(count)]


RTX_X8 = _gpus(8, 97887, RTX)
H200_X8 = _gpus(8, 143771, "NVIDIA H200")


@pytest.mark.parametrize("unset", [None, "", " "])
def test_unset_values_are_read_from_the_host(unset):
    gpus = host_gpus({"gpu_count": unset, "gpu_memory_mib": unset}, RTX_X8, "gpu-1")
    assert gpus == {"count": 8, "memory_mib": 97887, "name": RTX, "source": "detected",
                    "memory_source": "detected", "compute_capability": None}


def test_each_host_reads_its_own_gpus():
    # a mixed fleet from one plain inventory: the same (empty) settings, two answers
    settings = {"gpu_count": None, "gpu_memory_mib": None}
    assert host_gpus(settings, RTX_X8, "rtx-1")["memory_mib"] == 97887
    assert host_gpus(settings, H200_X8, "h200-1")["memory_mib"] == 143771
    assert host_gpus(settings, _gpus(4, 81559, "NVIDIA H100 80GB HBM3"), "h100-1")["count"] == 4


def test_one_compute_capability_is_kept_a_mix_is_not():
    found = [dict(g, compute_capability="12.0") for g in RTX_X8]
    assert host_gpus({}, found, "gpu-1")["compute_capability"] == "12.0"
    found[0]["compute_capability"] = "9.0"
    assert host_gpus({}, found, "gpu-1")["compute_capability"] is None


def test_the_smallest_gpu_gives_the_memory():
    found = _gpus(2, 143771, "NVIDIA H200") + _gpus(1, 81559, "NVIDIA H100 80GB HBM3")
    gpus = host_gpus({}, found, "odd-1")
    assert (gpus["count"], gpus["memory_mib"]) == (3, 81559)
    assert gpus["name"] == "NVIDIA H200, NVIDIA H100 80GB HBM3"


def test_values_that_agree_come_from_the_inventory():
    gpus = host_gpus({"gpu_count": "8", "gpu_memory_mib": 97887}, RTX_X8, "gpu-1")
    assert gpus == {"count": 8, "memory_mib": 97887, "name": RTX, "source": "inventory",
                    "memory_source": "inventory", "compute_capability": None}
    mixed = host_gpus({"gpu_count": 8, "gpu_memory_mib": None}, RTX_X8, "gpu-1")
    assert (mixed["source"], mixed["memory_source"]) == ("inventory", "detected")


def test_a_count_that_disagrees_is_refused_with_both_numbers():
    with pytest.raises(PreflightError) as exc:
        host_gpus({"gpu_count": 4, "gpu_memory_mib": None}, RTX_X8, "gpu-1")
    assert str(exc.value) == "gpu-1: sglang_gpu_count is 4, but gpu-1 has 8 GPUs (%s)" % RTX


def test_a_memory_that_disagrees_is_refused_with_both_numbers():
    with pytest.raises(PreflightError) as exc:
        host_gpus({"gpu_count": None, "gpu_memory_mib": 143771}, RTX_X8, "gpu-1")
    assert str(exc.value) == ("gpu-1: sglang_gpu_memory_mib is 143771, but gpu-1 has 97887 MiB "
                              "per GPU (%s)" % RTX)


def test_both_disagreements_are_named_at_once():
    with pytest.raises(PreflightError) as exc:
        host_gpus({"gpu_count": 8, "gpu_memory_mib": 97887}, _gpus(4, 143771, "NVIDIA H200"), "h-1")
    text = str(exc.value)
    assert text.startswith("h-1: 2 problems with the deploy inputs:\n")
    assert "- sglang_gpu_count is 8, but h-1 has 4 GPUs (NVIDIA H200)" in text
    assert "- sglang_gpu_memory_mib is 97887, but h-1 has 143771 MiB per GPU (NVIDIA H200)" in text


@pytest.mark.parametrize("settings, expect", [
    ({"gpu_count": "eight"}, 'sglang_gpu_count must be a positive integer (got "eight"), e.g. 8'),
    ({"gpu_count": 0}, "sglang_gpu_count must be a positive integer (got 0), e.g. 8"),
    ({"gpu_memory_mib": "lots"}, 'sglang_gpu_memory_mib must be a positive integer (got "lots")'),
])
def test_a_malformed_value_is_refused_before_the_hardware_is_compared(settings, expect):
    with pytest.raises(PreflightError) as exc:
        host_gpus(settings, RTX_X8, "gpu-1")
    assert expect in str(exc.value)


def test_without_gpus_read_the_inventory_must_say():
    gpus = host_gpus({"gpu_count": 8, "gpu_memory_mib": 97887}, [], "gpu-1", "no doctor")
    assert gpus == {"count": 8, "memory_mib": 97887, "name": None, "source": "inventory",
                    "memory_source": "inventory", "compute_capability": None}
    with pytest.raises(PreflightError) as exc:
        host_gpus({"gpu_count": 8}, [], "gpu-1", "nvidia-smi cannot talk to the NVIDIA driver")
    assert str(exc.value) == (
        "gpu-1: sglang_gpu_memory_mib is not set and no GPUs were read on the host (nvidia-smi "
        "cannot talk to the NVIDIA driver); set sglang_gpu_memory_mib, or make nvidia-smi work there")


def test_a_gpu_without_memory_needs_the_inventorys_memory():
    found = _gpus(2, 97887, RTX)
    found[1]["memory_mib"] = None
    with pytest.raises(PreflightError) as exc:
        host_gpus({}, found, "gpu-1")
    assert "sglang_gpu_memory_mib is not set and nvidia-smi on gpu-1 does not report" in str(exc.value)
    assert host_gpus({"gpu_memory_mib": 90000}, found, "gpu-1")["memory_mib"] == 90000


@pytest.mark.parametrize("strategy, count, nnodes, expect", [
    ("tp4", 8, 1, "gpu-1: strategy 'tp4' needs tp*pp = 4*1 = 4 GPUs, but the server has 8 "
                  "(1 node(s) x 8 GPUs); tp*pp must equal the GPU count"),
    ("tp16", 8, 1, "gpu-1: strategy 'tp16' needs tp*pp = 16*1 = 16 GPUs, but the server has 8"),
    ("ep8", 4, 1, "gpu-1: strategy 'ep8' needs tp*pp = 8*1 = 8 GPUs, but the server has 4"),
])
def test_a_layout_that_does_not_fit_the_hosts_gpus_is_refused(strategy, count, nnodes, expect):
    with pytest.raises(PreflightError) as exc:
        fit_layout(strategy, {}, count, nnodes, "gpu-1")
    assert str(exc.value).startswith(expect)


def test_the_layout_is_resolved_for_the_hosts_gpus_times_the_nodes():
    assert fit_layout("tp16", {}, 8, 2, "gpu-1") == {
        "name": "tp16", "tp": 16, "pp": 1, "ep": 1, "dp": 1, "nnodes": 2, "gpus": 16}
    # without the strategy as given, the layout's sizes are resolved (the same rule)
    layout = {"name": "ep8", "tp": 8, "pp": 1, "ep": 8, "dp": 1, "nnodes": 1, "gpus": 8}
    assert fit_layout(None, layout, 8, 1, "gpu-1") == layout
    with pytest.raises(PreflightError) as exc:
        fit_layout("", layout, 4, 1, "gpu-1")
    assert "strategy 'ep8' needs tp*pp = 8*1 = 8 GPUs, but the server has 4" in str(exc.value)
