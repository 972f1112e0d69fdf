# -*- coding: utf-8 -*-
"""The gpu_prereqs module end to end: the fake nvidia-smi replaying every fixture set,
the real CUDA toolkit of this machine (skipped only when nvcc is absent), a real venv."""

from __future__ import absolute_import, division, print_function

import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _gpu_parse as parse
from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _version
from ansible_collections.gpufleet.sglang.plugins.modules import gpu_prereqs
from ansible_collections.gpufleet.sglang.tests.paths import FAKES
SETS = os.path.join(FAKES, "nvidia-smi-sets")
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH")


def toolkit_root():
    """The toolkit the nvcc on PATH really belongs to (it may be a wrapper script)."""
    if not NVCC:
        return None
    out = subprocess.run(check=False, args=[NVCC, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                         capture_output=True, text=True)
    return parse.parse_nvcc_root(out.stderr + out.stdout)


ROOT = toolkit_root()


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
    """One compile-test cache for this file's tests: the real nvcc compiles each arch once
    (about 2 s a compile on 2 cores), not once per call. The test of the cache itself
    (test_real_toolkit_compile_is_cached) starts from an empty one of its own."""
    return str(tmp_path_factory.mktemp("prereqs-cache"))


@pytest.fixture
def machine(monkeypatch, compile_cache, run_module):
    """Run the module against a fake machine; returns a runner ``(set, **args) -> result``."""
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("FLASHINFER_NVCC", raising=False)
    monkeypatch.setenv("PATH", FAKES + os.pathsep + os.environ.get("PATH", ""))

    def run(smi_set, **args):
        if smi_set is None:
            monkeypatch.delenv("FAKE_NVIDIA_SMI_DIR", raising=False)
        else:
            monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", os.path.join(SETS, smi_set))
        args.setdefault("cache_dir", compile_cache)
        if ROOT:
            args.setdefault("cuda_home", ROOT)
        result, failed = run_module(gpu_prereqs, args)
        result["failed"] = failed
        return result

    return run


def checks(result):
    return dict((c["name"], c) for c in result["checks"])


def test_every_set_has_a_readable_fake():
    for name in os.listdir(SETS):
        for entry in os.listdir(os.path.join(SETS, name)):
            path = os.path.join(SETS, name, entry)
            assert os.path.exists(path), "dangling link %s" % path


def test_rtx_pro_6000_x8_pcie_refuses_deepep_and_fa3(machine):
    res = machine("rtx-pro-6000-server-x8", strategy="pp8",
                  extra_args={"attention-backend": "fa3", "moe-a2a-backend": "deepep"})
    got = checks(res)
    assert len(res["gpus"]) == 8 and {g["compute_capability"] for g in res["gpus"]} == {"12.0"}
    assert res["nvidia_smi"]["source"] == "q"  # no CSV capture exists for this box: -q is parsed
    assert res["topology"] == "pcie" and res["processes"] == []
    assert res["driver"] == {"version": "595.58.03", "cuda": "13.2"}
    assert not got["deepep_topology"]["ok"] and "PCIe" in got["deepep_topology"]["detail"]
    assert not got["attention_backend"]["ok"] and "SM120" in got["attention_backend"]["detail"]
    assert got["strategy"]["ok"]
    assert not res["ok"]
    assert {"deepep_topology", "attention_backend"} <= set(res["failed_checks"])
    good = machine("rtx-pro-6000-server-x8", strategy="pp8",
                   extra_args={"attention-backend": "triton", "moe-a2a-backend": "none"})
    assert "deepep_topology" not in checks(good) and checks(good)["attention_backend"]["ok"]


def test_h200_x8_nvlink_table_only(machine):
    res = machine("h200-x8", extra_args={"moe-a2a-backend": "deepep", "attention-backend": "fa3"})
    got = checks(res)
    assert res["nvidia_smi"]["source"] == "table" and res["topology"] == "nvlink"
    assert [g["memory_mib"] for g in res["gpus"]] == [143771] * 8
    assert got["deepep_topology"]["ok"] and got["attention_backend"]["ok"]
    # 570.133.20 is an R570 driver: too old for a CUDA 13 toolkit (docs/prereqs.md §3)
    if ROOT:
        assert got["driver_toolkit"]["ok"] is (not _version.at_least(res["cuda"]["release"], "12.9"))


@pytest.mark.parametrize("smi_set,name,driver", [("h200-x1", "NVIDIA H200", "590.48.01"),
                                                 ("h100-sxm-x1", "NVIDIA H100 80GB HBM3", "590.48.01")])
def test_hopper_single_gpu(machine, smi_set, name, driver):
    res = machine(smi_set)
    got = checks(res)
    assert res["nvidia_smi"]["source"] == "query-gpu"
    assert res["gpus"][0]["name"] == name and res["gpus"][0]["compute_capability"] == "9.0"
    assert res["gpus"][0]["cc_source"] == "nvidia-smi" and res["driver"]["version"] == driver
    assert res["topology"] == "single" and res["processes"] == []  # idle table: no processes
    assert got["foreign_processes"]["ok"]
    if ROOT:
        assert got["toolkit_arch"]["ok"] and got["driver_toolkit"]["ok"]
        assert res["compile"]["results"][0]["arch"] == "sm_90a" and got["compile_test"]["ok"]


@pytest.mark.parametrize("smi_set,pids", [("l40s-x1", [20037, 20038]), ("l40s-x1-python", [5997])])
def test_l40s_foreign_process(machine, smi_set, pids):
    res = machine(smi_set)
    got = checks(res)
    assert [p["pid"] for p in res["processes"]] == pids
    assert all(p["gpu_index"] == 0 for p in res["processes"])
    assert not got["foreign_processes"]["ok"] and "foreign_processes" in res["failed_checks"]
    assert res["gpus"][0]["compute_capability"] == "8.9"
    waived = machine(smi_set, waive=["foreign_processes", "cuda_headers"])
    assert checks(waived)["foreign_processes"]["waived"] is True
    assert "foreign_processes" not in waived["failed_checks"]


@pytest.mark.parametrize("smi_set,status,text", [
    ("no-driver", "driver", "couldn't communicate with the NVIDIA driver"),
    ("garbled", "garbled", "not readable"),
    ("does-not-exist", "driver", "couldn't communicate"),
])
def test_broken_nvidia_smi_is_a_failed_check(machine, smi_set, status, text):
    res = machine(smi_set, extra_args={"attention-backend": "fa3"})
    got = checks(res)
    assert res["nvidia_smi"]["status"] == status
    assert not got["nvidia_smi"]["ok"] and text in got["nvidia_smi"]["detail"] and got["nvidia_smi"]["remedy"]
    assert not res["ok"] and res["gpus"] == [] and res["topology"] == "unknown"
    assert res["commands"] and all("rc" in c and "cmd" in c for c in res["commands"])


def test_missing_nvidia_smi_binary(machine, monkeypatch, tmp_path):
    res = machine("h200-x1", nvidia_smi=str(tmp_path / "nope" / "nvidia-smi"))
    assert res["nvidia_smi"]["status"] == "missing"
    assert not checks(res)["nvidia_smi"]["ok"] and "not found" in checks(res)["nvidia_smi"]["detail"]
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # no nvidia-smi here
    res = machine(None)
    assert res["nvidia_smi"]["status"] == "missing" and not res["ok"]


def test_fail_on_error(machine):
    res = machine("l40s-x1", fail_on_error=True)
    assert res["failed"] is True and "foreign_processes" in res["msg"]


@needs_nvcc
def test_real_toolkit_compile_is_cached(machine, tmp_path):
    fresh = str(tmp_path / "cache")
    first = machine("rtx-pro-6000-server-x8", cache_dir=fresh)
    assert first["cuda"]["found"] and "compute_120" in first["cuda"]["arches"]
    assert first["compile"]["results"] == [dict(first["compile"]["results"][0], arch="sm_120a", ok=True,
                                                cached=False)]
    assert os.path.isfile(first["compile"]["results"][0]["marker"])
    second = machine("rtx-pro-6000-server-x8", cache_dir=fresh)
    assert second["compile"]["results"][0]["cached"] is True
    assert not any("-arch=sm_120a" in c["cmd"] for c in second["commands"])
    off = machine("rtx-pro-6000-server-x8", compile_test=False, cache_dir=fresh)
    assert off["compile"]["status"] == "skipped"


@needs_nvcc
def test_real_toolkit_curand_headers(machine):
    res = machine("rtx-pro-6000-server-x8")
    got = checks(res)["cuda_headers"]
    absent = [h for h in ("curand.h", "curand_kernel.h", "curand_philox4x32_x.h")
              if not os.path.exists(os.path.join(ROOT, "include", h))]
    assert got["ok"] is (not absent)
    if absent:
        assert all(h in got["detail"] for h in absent)
        assert "libcurand-dev-%s" % res["cuda"]["release"].replace(".", "-") in got["remedy"]


@needs_nvcc
def test_this_machine_flashinfer_search_order(machine, monkeypatch):
    """Without cuda_home the doctor uses FlashInfer's order; a wrapper nvcc on PATH
    makes FlashInfer pick dirname(dirname(nvcc)) as CUDA home."""
    res = machine("rtx-pro-6000-server-x8", cuda_home=None)
    expected = os.path.dirname(os.path.dirname(NVCC))
    assert res["cuda"]["home"] == expected and res["cuda"]["home_source"].startswith("nvcc on PATH")
    has_runtime = os.path.isfile(os.path.join(expected, "include", "cuda_runtime.h"))
    assert res["cuda"]["headers"]["cuda_runtime.h"]["where"] == ("include" if has_runtime else None)
    if not has_runtime and ROOT != expected:
        assert ROOT in checks(res)["cuda_headers"]["remedy"]
    monkeypatch.setenv("CUDA_HOME", ROOT)
    res = machine("rtx-pro-6000-server-x8", cuda_home=None)
    assert res["cuda"]["home"] == ROOT and res["cuda"]["home_source"] == "$CUDA_HOME"


def test_venv_packages(machine, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for name, version in (("sglang", "0.5.10"), ("sglang_kernel", "0.4.1"), ("flashinfer_python", "0.6.7.post2"),
                          ("flashinfer_cubin", "0.6.7"), ("torch", "2.9.1+cu128")):
        dist = os.path.join(site, "%s-%s.dist-info" % (name, version))
        os.makedirs(dist)
        with open(os.path.join(dist, "METADATA"), "w") as handle:
            handle.write("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name.replace("_", "-"), version))
    res = machine("rtx-pro-6000-server-x8", python=str(venv / "bin" / "python"))
    got = checks(res)
    assert res["packages"]["versions"]["flashinfer-python"] == "0.6.7.post2"
    assert res["packages"]["torch_cuda"] == "12.8"
    assert not got["flashinfer_packages"]["ok"]
    assert got["sgl_kernel_arch"]["ok"] and got["torch_cuda"]["ok"] and got["driver_torch"]["ok"]
    if ROOT:
        assert got["flashinfer_nvcc"]["ok"] is _version.at_least(res["cuda"]["release"], "12.9")
    missing = machine("rtx-pro-6000-server-x8", python=str(tmp_path / "nope" / "python"))
    assert not checks(missing)["python_env"]["ok"]
