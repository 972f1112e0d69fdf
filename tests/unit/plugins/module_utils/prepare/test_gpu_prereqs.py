# -*- coding: utf-8 -*-
"""Parsers, probes and rules of the prerequisite doctor, against real outputs.

nvidia-smi / nvcc texts come from tests/fixtures (verbatim captures); the CUDA tests run
the real toolkit on this machine and are skipped only when nvcc is absent.
"""

from __future__ import absolute_import, division, print_function

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _gpu_doctor as doctor
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _gpu_env as env
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _gpu_parse as parse
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _gpu_prereqs as rules
from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _version
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES as _FIXTURES

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = _FIXTURES
SMI = os.path.join(FIX, "nvidia-smi")
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH")


def read(*parts):
    with open(os.path.join(*parts), encoding="utf-8") as handle:
        return handle.read()


def capture_section(capture, title):
    """One section of a nvidia_gpu_exporter capture file (``# <title>`` banner)."""
    text = read(SMI, "captures", capture)
    start = text.index("# " + title + "\n")
    body = text[start:].split("\n", 3)[3]  # skip title, '$ cmd' and closing #### line
    end = body.find("\n################")
    return body if end < 0 else body[:end]


# ------------------------------------------------------------------ nvidia-smi parsers


@pytest.mark.parametrize("name,gpu,cc,mem,driver,bus", [
    ("h100-sxm-x1", "NVIDIA H100 80GB HBM3", "9.0", 81559, "590.48.01", "00000000:00:09.0"),
    ("h200-x1", "NVIDIA H200", "9.0", 143771, "590.48.01", "00000000:83:00.0"),
    ("l40s-x1", "NVIDIA L40S", "8.9", 46068, "595.80", "00000000:01:00.0"),
])
def test_query_gpu_full_capture_with_header(name, gpu, cc, mem, driver, bus):
    gpus = parse.parse_query_gpu(read(SMI, name + "-query-gpu-csv.txt"))
    assert gpus == [{"index": 0, "name": gpu, "memory_mib": mem, "compute_capability": cc,
                     "cc_source": "nvidia-smi", "driver": driver, "pci_bus": bus}]


def test_query_gpu_noheader_nounits():
    text = "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, 12.0, 580.126.09, 00000000:06:00.0\n" \
           "1, NVIDIA RTX PRO 6000 Blackwell Server Edition, 97887, 12.0, 580.126.09, 00000000:07:00.0\n"
    gpus = parse.parse_query_gpu(text)
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[1]["compute_capability"] == "12.0" and gpus[1]["memory_mib"] == 97887


@pytest.mark.parametrize("text", ["", "garbage\n", "0, NVIDIA H200, 143771\n", "x, y, 1, 9.0, 590, b\n",
                                  "0, NVIDIA H200, 143771, nine, 590.48.01, 00:01.0\n"])
def test_query_gpu_rejects_garbage(text):
    with pytest.raises(parse.ParseError):
        parse.parse_query_gpu(text)


def test_query_q_rtx_pro_6000_x8():
    res = parse.parse_query_q(read(SMI, "rtx-pro-6000-server-x8-query-q.txt"))
    assert len(res["gpus"]) == 8
    assert res["driver"] == "595.58.03" and res["cuda"] == "13.2"
    assert set(g["name"] for g in res["gpus"]) == {"NVIDIA RTX PRO 6000 Blackwell Server Edition"}
    assert all(g["memory_mib"] == 97887 and g["compute_capability"] == "12.0" and g["cc_source"] == "name"
               for g in res["gpus"])
    assert res["gpus"][0]["pci_bus"] == "00000000:06:00.0"
    assert res["processes"] == []


def test_query_q_processes_from_capture():
    text = capture_section("linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt", "load :: query (-q)")
    res = parse.parse_query_q(text)
    assert [(p["pid"], p["name"], p["used_mib"]) for p in res["processes"]] == [
        (11327, "/root/tools/memhog", 2566), (11328, "/root/tools/memhog", 1542), (11345, "./gpu_burn", 15690)]
    assert res["gpus"][0]["compute_capability"] == "9.0"


def test_table_h200_x8_and_processes():
    res = parse.parse_table(read(SMI, "h200-x8-table.txt"))
    assert len(res["gpus"]) == 8 and res["driver"] == "570.133.20" and res["cuda"] == "12.8"
    assert all(g["memory_mib"] == 143771 and g["compute_capability"] == "9.0" for g in res["gpus"])
    assert res["gpus"][7]["pci_bus"] == "00000000:B7:00.0"
    assert res["processes"] == []
    res = parse.parse_table(read(SMI, "l40s-x1-with-process-table.txt"))
    assert res["processes"] == [{"pid": 5997, "name": "python", "used_mib": 794,
                                 "gpu_bus": "00000000:8D:00.0", "gpu_index": 0}]


def test_table_r610_kmd_and_mig_truncated_name():
    res = parse.parse_table(read(SMI, "issue-excerpts", "b200-x8-table-r610-partial.txt"))
    assert res["driver"] == "610.43.02" and res["cuda"] == "13.3"
    assert [g["compute_capability"] for g in res["gpus"]] == ["10.0", "10.0"]
    res = parse.parse_table(read(SMI, "rtx-pro-6000-server-x1-mig-table.txt"))
    assert res["gpus"][0]["name"] == "NVIDIA RTX Pro 6000 Blac..."
    assert res["gpus"][0]["compute_capability"] == "12.0" and res["gpus"][0]["memory_mib"] == 98304


def test_compute_apps_csv():
    procs = parse.parse_query_apps(read(SMI, "l40s-x1-compute-apps-csv.txt"))
    assert [(p["pid"], p["name"], p["used_mib"], p["gpu_bus"]) for p in procs] == [
        (20037, "ffmpeg", 538, "00000000:01:00.0"), (20038, "ffmpeg", 681, "00000000:01:00.0")]
    assert parse.parse_query_apps("") == []


@pytest.mark.parametrize("name,kind,pairs", [
    ("rtx-pro-6000-server-x8-topo.txt", "pcie", 28),
    ("h200-x8-topo.txt", "nvlink", 28),
    ("h100-sxm-x1-topo.txt", "single", 0),
    ("l40s-x1-topo.txt", "single", 0),
])
def test_topology(name, kind, pairs):
    topo = parse.parse_topology(read(SMI, name))
    assert topo["kind"] == kind and len(topo["links"]) == pairs


def test_topology_rtx_cells_and_mixed():
    topo = parse.parse_topology(read(SMI, "rtx-pro-6000-server-x8-topo.txt"))
    assert topo["links"]["0-1"] == "PIX" and topo["links"]["0-2"] == "NODE" and topo["links"]["0-4"] == "SYS"
    mixed = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\nGPU0\t X \tNV4\tSYS\t0-7\nGPU1\tNV4\t X \tSYS\t0-7\n" \
            "GPU2\tSYS\tSYS\t X \t0-7\n"
    assert parse.parse_topology(mixed)["kind"] == "mixed"
    with pytest.raises(parse.ParseError):
        parse.parse_topology("GPU0 X\nnonsense")


def test_topology_nics_of_the_h200_host_name_each_nic_by_its_legend():
    topo = parse.parse_topology_nics(read(SMI, "h200-x8-topo.txt"))
    assert topo["gpus"] == list(range(8))
    assert sorted(topo["nics"]) == ["mlx5_%d" % i for i in range(10)]
    # the rows as printed: GPU0 is PIX to NIC3 only, GPU3 to NIC0-2, GPU4 to NIC7
    assert [n for n, links in sorted(topo["nics"].items()) if links[0] == "PIX"] == ["mlx5_3"]
    assert [n for n, links in sorted(topo["nics"].items()) if links[3] == "PIX"] == \
        ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert topo["nics"]["mlx5_7"][4] == "PIX" and topo["nics"]["mlx5_7"][0] == "SYS"


def test_topology_nics_without_nics_legend_or_rows():
    # no NIC column: nothing to map
    assert parse.parse_topology_nics(read(SMI, "rtx-pro-6000-server-x8-topo.txt"))["nics"] == {}
    assert parse.parse_topology_nics(read(SMI, "h100-sxm-x1-topo.txt")) == {"gpus": [0], "nics": {}}
    # NIC columns without the legend (the excerpt is cut before it): named by their column
    excerpt = parse.parse_topology_nics(read(SMI, "issue-excerpts", "a100-sxm4-80gb-x1-check-env-tabs.txt"))
    assert excerpt["nics"]["NIC3"] == {0: "PXB"} and len(excerpt["nics"]) == 5
    # a header whose rows were cut off is an error, not an empty mapping
    with pytest.raises(parse.ParseError, match="NIC0 has links to GPUs"):
        parse.parse_topology_nics(read(SMI, "issue-excerpts", "b200-x8-check-env-cuda13.0.txt"))
    with pytest.raises(parse.ParseError, match="no GPU header"):
        parse.parse_topology_nics("nothing here")
    with pytest.raises(parse.ParseError, match="unknown topo link"):
        parse.parse_topology_nics("\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tNV4\t0-7\n")


def test_list_and_failure_classification():
    assert parse.parse_list(read(SMI, "h200-x1-list.txt")) == [{"index": 0, "name": "NVIDIA H200"}]
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
           "Make sure that the latest NVIDIA driver is installed and running.")
    assert parse.classify_smi_failure(9, msg, "") == "driver"
    assert parse.classify_smi_failure(6, "No devices were found", "") == "no-devices"
    assert parse.classify_smi_failure(0, "ok", "") is None


@pytest.mark.parametrize("name,cc", [
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"), ("NVIDIA RTX PRO 6000 Blac...", "12.0"),
    ("NVIDIA GeForce RTX 5090", "12.0"), ("NVIDIA B200", "10.0"), ("NVIDIA H100 NVL", "9.0"),
    ("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA L40S", "8.9"), ("NVIDIA GB10", "12.1"), ("Mystery GPU", None),
])
def test_cc_from_name(name, cc):
    assert parse.cc_from_name(name) == cc


# ----------------------------------------------------------------------------- nvcc


@pytest.mark.parametrize("name", ["nvcc-12.4.131.txt", "nvcc-12.6.77.txt", "nvcc-12.8.93.txt",
                                  "nvcc-12.9.86.txt", "nvcc-13.0.88.txt"])
def test_nvcc_version_fixtures(name):
    version = re.match(r"nvcc-(\d+\.\d+\.\d+)\.txt", name).group(1)
    got = parse.parse_nvcc_version(read(FIX, "nvcc", name))
    assert got == {"version": version, "release": version.rsplit(".", 1)[0]}


def test_nvcc_garbage():
    with pytest.raises(parse.ParseError):
        parse.parse_nvcc_version("nvcc: command not found")
    with pytest.raises(parse.ParseError):
        parse.parse_gpu_arch_list("")


@needs_nvcc
def test_real_nvcc_version_and_arches():
    out = subprocess.run([NVCC, "--version"], capture_output=True, text=True, check=True).stdout
    info = parse.parse_nvcc_version(out)
    assert info["release"] in out
    arches = parse.parse_gpu_arch_list(
        subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True, check=True).stdout)
    if _version.at_least(info["release"], "12.8"):
        assert "compute_120" in arches and "compute_90" in arches
    dryrun = subprocess.run([NVCC, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                            capture_output=True, text=True, check=False)
    root = parse.parse_nvcc_root(dryrun.stderr)
    assert root and os.path.isfile(os.path.join(root, "bin", "nvcc"))


# --------------------------------------------------------------------------- env probes


def test_find_cuda_home_order(tmp_path):
    which = {"nvcc": "/opt/cuda-x/bin/nvcc"}.get
    assert env.find_cuda_home("/explicit", {"CUDA_HOME": "/a"}, which)[0] == "/explicit"
    assert env.find_cuda_home(None, {"CUDA_HOME": "/a", "CUDA_PATH": "/b"}, which) == ("/a", "$CUDA_HOME")
    assert env.find_cuda_home(None, {"CUDA_PATH": "/b"}, which) == ("/b", "$CUDA_PATH")
    assert env.find_cuda_home(None, {}, which)[0] == "/opt/cuda-x"
    assert env.find_cuda_home(None, {}, lambda n: None, exists=lambda p: True)[0] == "/usr/local/cuda"
    assert env.find_cuda_home(None, {}, lambda n: None, exists=lambda p: False)[0] is None


def test_scan_headers_include_targets_missing(tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_runtime.h").write_text("")
    (tmp_path / "targets" / "x86_64-linux" / "include").mkdir(parents=True)
    (tmp_path / "targets" / "x86_64-linux" / "include" / "curand.h").write_text("")
    got = env.scan_headers(str(tmp_path))
    assert got["cuda_runtime.h"]["where"] == "include"
    assert got["curand.h"]["where"] == "targets"
    assert got["curand_kernel.h"] == {"path": None, "where": None}


def make_site(tmp_path, packages, torch_version_py=None):
    site = tmp_path / "site-packages"
    site.mkdir(exist_ok=True)
    for name, version in packages.items():
        dist = site / ("%s-%s.dist-info" % (name.replace("-", "_"), version))
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n\nbody\n" % (name, version))
    if torch_version_py is not None:
        (site / "torch").mkdir()
        (site / "torch" / "version.py").write_text(torch_version_py)
    return str(site)


def test_read_packages_and_torch_cuda(tmp_path):
    site = make_site(tmp_path, {"sglang": "0.5.10", "sglang-kernel": "0.4.1", "flashinfer_python": "0.6.7.post2",
                                "torch": "2.9.1", "requests": "2.0"},
                     torch_version_py="__version__ = '2.9.1'\ncuda: Optional[str] = '12.8'\n")
    got = env.read_packages([site])
    assert got == {"sglang": "0.5.10", "sglang-kernel": "0.4.1", "flashinfer-python": "0.6.7.post2",
                   "torch": "2.9.1"}
    assert env.torch_cuda("2.9.1", [site]) == ("12.8", "torch/version.py")
    assert env.torch_cuda("2.8.0+cu128")[0] == "12.8"
    assert env.torch_cuda("2.11.0+cu130")[0] == "13.0"
    assert env.torch_cuda("2.7.1")[0] == "12.6"
    assert env.torch_cuda("2.8.0+cpu")[0] is None


def test_arch_target_and_cache_key(tmp_path):
    assert env.arch_target("12.0") == "sm_120a" and env.arch_target("9.0") == "sm_90a"
    assert env.arch_target("8.9") == "sm_89"
    one = env.compile_cache_path(str(tmp_path), "/usr/bin/true", "13.0.88", "sm_120a")
    assert one == env.compile_cache_path(str(tmp_path), "/usr/bin/true", "13.0.88", "sm_120a")
    assert one != env.compile_cache_path(str(tmp_path), "/usr/bin/true", "12.9.86", "sm_120a")
    assert one != env.compile_cache_path(str(tmp_path), "/usr/bin/true", "13.0.88", "sm_90a")


@needs_nvcc
def test_real_toolkit_headers_and_remedy():
    out = subprocess.run(check=False, args=[NVCC, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                         capture_output=True, text=True)
    root = parse.parse_nvcc_root(out.stderr)
    release = parse.parse_nvcc_version(subprocess.run(check=False, args=[NVCC, "--version"], capture_output=True,
                                                      text=True).stdout)["release"]
    headers = env.scan_headers(root)
    absent = sorted(h for h in env.REQUIRED_HEADERS
                    if not os.path.exists(os.path.join(root, "include", h)))
    assert sorted(h for h, e in headers.items() if e["where"] != "include") == absent
    verdict = rules.evaluate({"cuda": {"home": root, "found": True, "release": release, "headers": headers,
                                       "root": root}})
    check = [c for c in verdict["checks"] if c["name"] == "cuda_headers"][0]
    assert check["ok"] is (not absent)
    if any(h.startswith("curand") for h in absent):
        dash = release.replace(".", "-")
        assert "libcurand-dev-%s" % dash in check["remedy"]
        assert "cuda-curand-dev" not in check["remedy"]  # that package does not exist (docs/prereqs.md §5.2)


# ------------------------------------------------------------------------------ rules


def gpu(cc, name="GPU", index=0):
    return {"index": index, "name": name, "memory_mib": 1, "compute_capability": cc, "cc_source": "x",
            "driver": "590.48.01", "pci_bus": "0000:%02d:00.0" % index}


def base_facts(cc="12.0", n=8, topo="pcie", release="13.0", driver="595.58.03", versions=None, tcuda=None):
    return {
        "smi": {"status": "ok", "source": "q"},
        "gpus": [gpu(cc, index=i) for i in range(n)],
        "driver": {"version": driver},
        "topology": {"kind": topo, "links": {}},
        "processes": [],
        "cuda": {"home": "/c", "found": True, "release": release, "version": release + ".1",
                 "arches": ["compute_90", "compute_120"],
                 "headers": dict((h, {"where": "include"}) for h in env.REQUIRED_HEADERS)},
        "packages": {"site_packages": ["/s"], "versions": versions or {}, "torch_cuda": tcuda},
        "compile": {"status": "ok", "results": [{"arch": "sm_120a", "ok": True}]},
    }


def by_name(verdict):
    return dict((c["name"], c) for c in verdict["checks"])


def test_clean_sm120_host_passes():
    verdict = rules.evaluate(base_facts(versions={"flashinfer-python": "0.7.2", "flashinfer-cubin": "0.7.2",
                                                  "sglang-kernel": "0.4.10", "torch": "2.14.1+cu130"},
                                        tcuda="13.0"), strategy="pp8",
                             extra_args={"attention-backend": "triton"})
    assert verdict["ok"], verdict["failed"]
    assert set(c["severity"] for c in verdict["checks"]) <= {"info", "warning"}


@pytest.mark.parametrize("fi,nvcc,ok", [("0.6.7.post2", "12.8", False), ("0.7.0", "12.8", False),
                                        ("0.6.18", "12.9", True), ("0.7.1", "12.8", True),
                                        ("0.6.5", "12.8", True), ("0.7.4", "12.6", False)])
def test_flashinfer_sm12x_gate(fi, nvcc, ok):
    facts = base_facts(release=nvcc, versions={"flashinfer-python": fi})
    assert by_name(rules.evaluate(facts))["flashinfer_nvcc"]["ok"] is ok


def test_flashinfer_gate_only_on_sm12x():
    facts = base_facts(cc="9.0", release="12.8", versions={"flashinfer-python": "0.6.7.post2"})
    assert by_name(rules.evaluate(facts))["flashinfer_nvcc"]["detail"].startswith("skipped")


def test_flashinfer_package_lock():
    facts = base_facts(versions={"flashinfer-python": "0.6.7.post2", "flashinfer-cubin": "0.6.7",
                                 "flashinfer-jit-cache": "0.6.7.post2+cu129"})
    check = by_name(rules.evaluate(facts))["flashinfer_packages"]
    assert not check["ok"] and "flashinfer-cubin 0.6.7" in check["detail"] and "jit-cache" not in check["detail"]
    facts["packages"]["versions"]["flashinfer-cubin"] = "0.6.7.post2"
    assert by_name(rules.evaluate(facts))["flashinfer_packages"]["ok"]


@pytest.mark.parametrize("versions,ok", [({"sgl-kernel": "0.3.8"}, False), ({"sgl-kernel": "0.3.9"}, True),
                                         ({"sgl-kernel": "0.1.9"}, False), ({"sglang-kernel": "0.4.1"}, True)])
def test_sgl_kernel_sm120(versions, ok):
    assert by_name(rules.evaluate(base_facts(versions=versions)))["sgl_kernel_arch"]["ok"] is ok


@pytest.mark.parametrize("cc,args,ok", [
    ("12.0", {"attention-backend": "fa3"}, False), ("9.0", {"attention-backend": "fa3"}, True),
    ("10.0", {"--attention_backend": "fa3"}, False), ("12.0", {"attention-backend": "trtllm_mla"}, False),
    ("10.0", {"attention-backend": "trtllm_mla"}, True), ("12.0", {"decode-attention-backend": "trtllm_mla"}, True),
    ("12.0", {"prefill-attention-backend": "flashmla"}, False), ("12.0", {"attention-backend": "flashinfer"}, True),
])
def test_attention_backends(cc, args, ok):
    assert by_name(rules.evaluate(base_facts(cc=cc), extra_args=args))["attention_backend"]["ok"] is ok


@pytest.mark.parametrize("topo,ok,severity", [("pcie", False, "error"), ("mixed", False, "error"),
                                              ("nvlink", True, "info"), ("unknown", True, "warning")])
def test_deepep_topology(topo, ok, severity):
    check = by_name(rules.evaluate(base_facts(topo=topo), extra_args={"moe-a2a-backend": "deepep"}))
    assert (check["deepep_topology"]["ok"], check["deepep_topology"]["severity"]) == (ok, severity)
    assert "deepep_topology" not in by_name(rules.evaluate(base_facts(topo=topo)))


@pytest.mark.parametrize("release,driver,ok", [("13.0", "575.57.08", False), ("13.0", "580.65.06", True),
                                               ("12.8", "570.26", True), ("12.9", "570.133.20", False),
                                               ("13.2", "580.95.05", True)])
def test_driver_minimum_for_toolkit(release, driver, ok):
    assert by_name(rules.evaluate(base_facts(release=release, driver=driver)))["driver_toolkit"]["ok"] is ok


def test_driver_minimum_for_torch_and_torch_cuda():
    facts = base_facts(driver="570.133.20", release="12.8", versions={"torch": "2.11.0+cu130"}, tcuda="13.0")
    got = by_name(rules.evaluate(facts))
    assert not got["driver_torch"]["ok"] and "580.65.06" in got["driver_torch"]["detail"]
    assert got["driver_toolkit"]["ok"]
    facts = base_facts(versions={"torch": "2.7.1"}, tcuda="12.6")
    assert not by_name(rules.evaluate(facts))["torch_cuda"]["ok"]


def test_foreign_processes_and_waivers():
    facts = base_facts()
    facts["processes"] = [{"pid": 1, "name": "sglang::scheduler_DP0_TP0_EP0", "used_mib": 100},
                          {"pid": 2, "name": "./gpu_burn", "used_mib": 15690, "gpu_index": 0}]
    verdict = rules.evaluate(facts)
    assert not verdict["ok"] and verdict["failed"] == ["foreign_processes"]
    assert "gpu_burn" in by_name(verdict)["foreign_processes"]["detail"]
    verdict = rules.evaluate(facts, waive=["foreign_processes", "no_such_check"])
    assert verdict["ok"]
    got = by_name(verdict)
    assert got["foreign_processes"]["waived"] is True and got["foreign_processes"]["ok"] is False
    assert got["waivers"]["severity"] == "warning" and "no_such_check" in got["waivers"]["detail"]
    assert "WAIVED" in "\n".join(rules.format_table(verdict["checks"]))


def test_no_nvidia_smi_gives_failed_check_not_exception():
    verdict = rules.evaluate({"smi": {"status": "missing", "detail": "nvidia-smi not found"}, "processes": None},
                             extra_args={"attention-backend": "fa3"})
    got = by_name(verdict)
    assert not verdict["ok"] and got["nvidia_smi"]["severity"] == "error" and got["nvidia_smi"]["remedy"]
    assert not got["cuda_toolkit"]["ok"]


def test_strategy_rules():
    assert by_name(rules.evaluate(base_facts(), strategy="tp8"))["strategy"]["ok"]
    assert not by_name(rules.evaluate(base_facts(), strategy="tp12"))["strategy"]["ok"]
    assert not by_name(rules.evaluate(base_facts(), strategy="bogus"))["strategy"]["ok"]
    assert by_name(rules.evaluate(base_facts(), strategy={"tp": 4}))["strategy"]["severity"] == "warning"
    # dp is DP attention: tp8-dp8 splits the tp8 group, 8 GPUs (the same rule as check_fits)
    facts = base_facts()
    assert len(facts["gpus"]) == 8
    tp8_dp8 = by_name(rules.evaluate(facts, strategy="tp8-dp8"))["strategy"]
    assert tp8_dp8["ok"] and tp8_dp8["severity"] == "info" and "8 GPU(s) per host" in tp8_dp8["detail"]
    tp4_dp2 = by_name(rules.evaluate(facts, strategy="tp4-dp2"))["strategy"]
    assert tp4_dp2["ok"] and tp4_dp2["severity"] == "warning" and "uses 4 of the 8" in tp4_dp2["detail"]
    tp4_dp3 = by_name(rules.evaluate(facts, strategy="tp4-dp3"))["strategy"]
    assert not tp4_dp3["ok"] and "dp 3 does not divide tp 4" in tp4_dp3["detail"]


def test_version_order_and_driver_minimum():
    order = ["0.6.5", "0.6.7", "0.6.7.post2", "0.6.18", "0.7.0rc1", "0.7.0", "0.7.0.post1", "0.7.1"]
    assert sorted(reversed(order), key=_version.parse) == order
    assert rules.driver_minimum("12.8") == "570.26" and rules.driver_minimum("13.1") == "580.65.06"
    assert rules.driver_minimum("11.8") is None


def test_remedies_cite_sections_of_the_shipped_docs():
    """The doctor cites docs/prereqs.md (in the collection), and only sections that exist."""
    root = os.path.join(HERE, "..", "..", "..", "..", "..")
    with open(os.path.join(root, "docs", "prereqs.md"), encoding="utf-8") as handle:
        doc = handle.read()
    sections = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", doc, re.MULTILINE))
    assert {"1", "3", "5.3", "8"} <= sections
    cited = set()
    for module in (rules, env, parse):
        with open(module.__file__.replace(".pyc", ".py"), encoding="utf-8") as handle:
            source = handle.read()
        assert "shared/" not in source and "reference/" not in source, module.__name__
        # every mention of prereqs.md is a docs/prereqs.md section
        assert not re.findall(r"(?<!docs/)prereqs\.md", source), module.__name__
        cited.update(re.findall(r"docs/prereqs\.md §(\d+(?:\.\d+)?)", source))
    assert cited and cited <= sections, sorted(cited - sections)
    # the remedies a user sees carry the citation too
    facts = base_facts()
    facts["cuda"] = {"found": False, "home": "/usr/local/cuda"}
    remedy = by_name(rules.evaluate(facts))["cuda_toolkit"]["remedy"]
    assert "docs/prereqs.md §5.1" in remedy


# ------------------------------------------------------------- PD: the transport facts

def port(state, link_layer="InfiniBand"):
    return {"state": state, "link_layer": link_layer}


@pytest.mark.parametrize("entries, expect", [
    # one InfiniBand port, ACTIVE as the kernel prints it (number, name, newline)
    ({"mlx5_0": {"1": port("4: ACTIVE\n", "InfiniBand\n")}},
     [{"name": "mlx5_0", "state": "ACTIVE", "link_layers": ["InfiniBand"],
       "ports": [{"port": 1, "state": "ACTIVE", "link_layer": "InfiniBand", "rdma": "InfiniBand"}]}]),
    # an Ethernet link layer is RoCE
    ({"mlx5_bond_0": {"1": port("4: ACTIVE", "Ethernet")}},
     [{"name": "mlx5_bond_0", "state": "ACTIVE", "link_layers": ["Ethernet"],
       "ports": [{"port": 1, "state": "ACTIVE", "link_layer": "Ethernet", "rdma": "RoCE"}]}]),
    # DOWN, INIT, ARMED, ACTIVE_DEFER and an unreadable state are no active port: no device
    ({"mlx5_0": {"1": port("1: DOWN")}, "mlx5_1": {"1": port("2: INIT")}, "mlx5_2": {"1": port("3: ARMED")},
      "mlx5_3": {"1": port("5: ACTIVE_DEFER")}, "mlx5_4": {"1": port(None)}, "mlx5_5": {}}, []),
    # several ports: only the active ones, by number (10 after 2); the state's name alone is read too
    ({"mlx4_0": {"10": port("ACTIVE", "Ethernet"), "1": port("1: DOWN"), "2": port("4: ACTIVE")}},
     [{"name": "mlx4_0", "state": "ACTIVE", "link_layers": ["Ethernet", "InfiniBand"],
       "ports": [{"port": 2, "state": "ACTIVE", "link_layer": "InfiniBand", "rdma": "InfiniBand"},
                 {"port": 10, "state": "ACTIVE", "link_layer": "Ethernet", "rdma": "RoCE"}]}]),
    # no link_layer file: kept, kind unknown
    ({"qib0": {"1": {"state": "4: ACTIVE"}}},
     [{"name": "qib0", "state": "ACTIVE", "link_layers": [],
       "ports": [{"port": 1, "state": "ACTIVE", "link_layer": None, "rdma": None}]}]),
    ({}, []), (None, []), ("mlx5_0", []), ({"mlx5_0": "4: ACTIVE"}, []),
])
def test_parse_ib_sysfs(entries, expect):
    assert parse.parse_ib_sysfs(entries) == expect


def test_parse_ib_sysfs_is_what_host_transport_takes():
    devices = parse.parse_ib_sysfs({"mlx5_10": {"1": port("4: ACTIVE")}, "mlx5_2": {"1": port("4: ACTIVE", "Ethernet")},
                                    "mlx5_3": {"1": port("1: DOWN")}})
    got = _pd.host_transport({"ib_devices": devices, "peermem": True})
    assert got == {"rdma": ["mlx5_2", "mlx5_10"], "gpudirect": True, "missing": []}
    # the control: every port down is no RDMA device
    down = _pd.host_transport({"ib_devices": parse.parse_ib_sysfs({"mlx5_0": {"1": port("1: DOWN")}}),
                               "peermem": True})
    assert down["rdma"] == [] and down["missing"][0].startswith("no RDMA device")


def make_sysfs(root, entries, link=None):
    """A /sys/class/infiniband tree under ``root``: ``entries`` as parse_ib_sysfs takes them
    (None: no file); the devices named in ``link`` are symlinks, as in sysfs."""
    for dev, ports in entries.items():
        where = root / dev
        if link and dev in link:
            where = root.parent / "devices" / dev
            root.mkdir(parents=True, exist_ok=True)
        for number, files in ports.items():
            directory = where / "ports" / number
            directory.mkdir(parents=True)
            for name, text in files.items():
                if text is not None:
                    (directory / name).write_text(text + "\n")
        if link and dev in link:
            os.symlink(str(where), str(root / dev))
    return str(root)


def engine_line(imports, packages=None, error=None):
    return "\n" + doctor._ENGINE_MARK + json.dumps({"imports": imports, "packages": packages or {}, "error": error}) + "\n"


class FakeModule(object):
    """What the Prober needs of an AnsibleModule: the collection's runner calls run_command,
    answered by ``answer(argv) -> (rc, stdout, stderr)``; every argv is kept."""

    def __init__(self, answer, bins=None):
        self.answer, self.bins, self.calls = answer, bins or {}, []

    def get_bin_path(self, name):
        return self.bins.get(name)

    def run_command(self, cmd, environ_update=None, cwd=None, data=None, binary_data=False):
        self.calls.append(list(cmd))
        return self.answer(list(cmd))


H200_SYSFS = dict(("mlx5_%d" % i, {"1": port("4: ACTIVE")}) for i in range(9))
H200_SYSFS["mlx5_9"] = {"1": port("1: DOWN")}


def h200_answers(engines):
    """nvidia-smi of the H200 x8 host (its real topo -m), and the venv's interpreter answering
    the engine probe from ``engines`` (module -> stdout, or (rc, stdout, stderr))."""
    query = "".join("%d, NVIDIA H200, 143771 MiB, 9.0, 570.133.20, 00000000:%02X:00.0\n" % (i, 0x18 + i)
                    for i in range(8))

    def answer(argv):
        if argv[-2:] == ["topo", "-m"]:
            return 0, read(SMI, "h200-x8-topo.txt"), ""
        if argv[1].startswith("--query-gpu="):
            return 0, query, ""
        if argv[1].startswith("--query-compute-apps="):
            return 0, "", ""
        if argv[1:3] == ["-I", "-c"] and argv[3] == doctor._ENGINE_SNIPPET:
            got = engines.get(argv[4], engine_line(False, error="ModuleNotFoundError: No module named 'x'"))
            return got if isinstance(got, tuple) else (0, got, "")
        return 127, "", "unexpected %r" % argv

    return answer


def test_prober_transport_of_an_h200_host(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("")
    root = make_sysfs(tmp_path / "class" / "infiniband", H200_SYSFS, link=["mlx5_0"])
    (tmp_path / "module" / "nvidia_peermem").mkdir(parents=True)
    module = FakeModule(h200_answers({
        "mooncake.engine": "INFO transfer engine banner\n" + engine_line(
            True, {"mooncake-transfer-engine": "0.3.13.post1"}),
        "nixl._api": engine_line(False, error="ModuleNotFoundError: No module named 'nixl'")}))
    prober = doctor.Prober(module)
    gpus = prober.gpus(str(smi))
    assert len(gpus["gpus"]) == 8 and gpus["topology"]["kind"] == "nvlink"
    got = prober.transport(sys.executable, root, str(tmp_path / "module" / "nvidia_peermem"), str(smi))
    # topo -m ran once: transport() parses the text gpus() read
    assert sum(1 for c in module.calls if c[-2:] == ["topo", "-m"]) == 1
    assert [d["name"] for d in got["ib_devices"]] == ["mlx5_%d" % i for i in range(9)]
    assert got["peermem"] is True and sorted(got["topology"]["nics"]) == ["mlx5_%d" % i for i in range(10)]
    assert got["engines"] == {
        "mooncake": {"module": "mooncake.engine", "imports": True, "error": None,
                     "packages": {"mooncake-transfer-engine": "0.3.13.post1"}},
        "nixl": {"module": "nixl._api", "imports": False, "packages": {},
                 "error": "ModuleNotFoundError: No module named 'nixl'"}}
    # the venv's interpreter, isolated, asked for the module and every build of its family
    probe = [c for c in module.calls if c[1:3] == ["-I", "-c"]]
    assert [c[0] for c in probe] == [sys.executable] * 2
    assert probe[0][4:] == ["mooncake.engine", "mooncake-transfer-engine", "mooncake-transfer-engine-cuda13",
                            "mooncake-transfer-engine-non-cuda"]
    assert probe[1][4:] == ["nixl._api", "nixl-cu12", "nixl-cu13"]
    # what check/_pd makes of it: mooncake, and GPU5's nearest device (mlx5_9, down) left out
    chosen, problems = _pd.choose_backend("0.5.23", _pd.release_facts("0.5.23"), {"h": got})
    assert problems == [] and chosen["backend"] == "mooncake"
    value = _pd.ib_device_value(_pd.release_facts("0.5.23"), _pd.host_transport(got)["rdma"], range(8),
                                got["topology"])
    assert json.loads(value)["5"] == "mlx5_6,mlx5_7,mlx5_8" and json.loads(value)["0"] == "mlx5_3"


def test_prober_transport_of_a_host_without_rdma(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("")
    module = FakeModule(h200_answers({}))
    got = doctor.Prober(module).transport(None, str(tmp_path / "no-such-root"), str(tmp_path / "no-peermem"),
                                          str(smi))
    # topo -m read here, gpus() having not run; no python: no engine probe
    assert module.calls == [[str(smi), "topo", "-m"]]
    assert got["ib_devices"] == [] and got["peermem"] is False and got["engines"] is None
    assert got["topology"]["gpus"] == list(range(8))
    assert _pd.host_transport(got)["missing"] == [
        "no RDMA device (/sys/class/infiniband is empty or has no active port)",
        "GPUDirect RDMA: the nvidia_peermem module is not loaded"]
    # without nvidia-smi the topology is None and says why
    prober = doctor.Prober(FakeModule(h200_answers({})))
    got = prober.transport(None, str(tmp_path), str(tmp_path), str(tmp_path / "nope"))
    assert got["topology"] is None and "nvidia-smi not found" in got["topology_detail"]
    assert got["peermem"] is True and got["ib_devices"] == []  # tmp_path exists; no device has ports


def test_prober_engine_probe_failures(tmp_path):
    answers = {"mooncake.engine": (-11, "", "Fatal Python error: Segmentation fault\n"),
               "nixl._api": (124, "", "")}
    module = FakeModule(h200_answers(answers), bins={"timeout": "/usr/bin/timeout"})
    # the timeout wrapper comes first: answer what follows it
    inner = h200_answers(answers)
    module.answer = lambda argv: inner(argv[3:] if argv[0] == "/usr/bin/timeout" else argv)
    got = doctor.Prober(module).engines(sys.executable)
    assert got["mooncake"]["imports"] is False
    assert got["mooncake"]["error"] == "the interpreter exited rc=-11: Fatal Python error: Segmentation fault"
    assert got["nixl"]["error"] == "timed out after %d s" % doctor.ENGINE_PROBE_TIMEOUT
    assert module.calls[0][:3] == ["/usr/bin/timeout", "--kill-after=10", str(doctor.ENGINE_PROBE_TIMEOUT)]
    missing = doctor.Prober(FakeModule(h200_answers({}))).engines(str(tmp_path / "nope" / "python"))
    assert missing["mooncake"]["error"] == "python %s does not exist" % (tmp_path / "nope" / "python")


def test_the_engine_probe_runs_in_a_real_interpreter(tmp_path):
    """The snippet itself, with this interpreter: a module that prints while imported, its
    distribution's version, and a module that is not there."""
    site = tmp_path / "site"
    (site / "mooncake").mkdir(parents=True)
    (site / "mooncake" / "__init__.py").write_text("")
    (site / "mooncake" / "engine.py").write_text("print('engine banner, no newline at the end', end='')\n")
    dist = site / "mooncake_transfer_engine_non_cuda-0.3.13.post1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mooncake-transfer-engine-non-cuda\n"
                                   "Version: 0.3.13.post1\n")
    env_ = dict(os.environ, PYTHONPATH=str(site))
    for module_name, imports in (("mooncake.engine", True), ("nixl._api", False)):
        # without -I, so that PYTHONPATH gives the interpreter the fake site
        out = subprocess.run([sys.executable, "-c", doctor._ENGINE_SNIPPET, module_name,
                              "mooncake-transfer-engine-non-cuda", "mooncake-transfer-engine"],
                             capture_output=True, text=True, env=env_, check=True).stdout
        got = doctor._engine_answer(0, out, "", 120)
        assert got["imports"] is imports
        assert got["packages"] == {"mooncake-transfer-engine-non-cuda": "0.3.13.post1"}
    assert got["error"] == "ModuleNotFoundError: No module named 'nixl'"


# the rule: one engine imports, in torch's CUDA build

def transport_facts(engines, python="/opt/sglang/venvs/0.5.23/bin/python"):
    return {"ib_devices": [], "peermem": False, "topology": None, "python": python, "engines": engines}


def mooncake(packages, imports=True, error=None):
    return {"mooncake": {"module": "mooncake.engine", "imports": imports, "error": error, "packages": packages},
            "nixl": {"module": "nixl._api", "imports": False, "packages": {},
                     "error": "ModuleNotFoundError: No module named 'nixl'"}}


def engine_check(engines, torch="2.9.1+cu128", tcuda="12.8", waive=()):
    facts = base_facts(cc="9.0", versions={"torch": torch} if torch else {}, tcuda=tcuda)
    facts["transport"] = transport_facts(engines)
    verdict = rules.evaluate(facts, waive=waive)
    return verdict, by_name(verdict)["transfer_engine"]


def test_transfer_engine_of_torch_cuda_build_passes():
    verdict, check = engine_check(mooncake({"mooncake-transfer-engine": "0.3.13.post1"}))
    assert verdict["ok"] and check["ok"] and check["severity"] == "info"
    assert check["detail"] == ("mooncake-transfer-engine 0.3.13.post1: import mooncake.engine works with "
                               "/opt/sglang/venvs/0.5.23/bin/python (torch 2.9.1+cu128 is built for CUDA 12.8)")
    _found, check = engine_check(mooncake({"mooncake-transfer-engine-cuda13": "0.3.14"}), "2.11.0+cu130", "13.0")
    assert check["ok"]
    # the test bed: the non-CUDA build beside a CPU torch
    _found, check = engine_check(mooncake({"mooncake-transfer-engine-non-cuda": "0.3.13.post1"}), "2.9.1+cpu", None)
    assert check["ok"] and "torch 2.9.1+cpu has no CUDA build" in check["detail"]


def test_a_build_unlike_torchs_cuda_fails_naming_package_venv_and_what_to_install():
    verdict, check = engine_check(mooncake({"mooncake-transfer-engine-cuda13": "0.3.14"}))
    assert not verdict["ok"] and verdict["failed"] == ["transfer_engine"]
    assert check["detail"] == ("mooncake-transfer-engine-cuda13 0.3.14 in /opt/sglang/venvs/0.5.23 is the CUDA 13 "
                               "build of the mooncake transfer engine, and torch 2.9.1+cu128 is built for CUDA 12.8")
    assert check["remedy"] == ("replace it with the CUDA 12 build: /opt/sglang/venvs/0.5.23/bin/python -m pip "
                               "uninstall -y mooncake-transfer-engine-cuda13, then /opt/sglang/venvs/0.5.23/bin/python "
                               "-m pip install mooncake-transfer-engine==0.3.13.post1")
    _found, check = engine_check(mooncake({"mooncake-transfer-engine": "0.3.13.post1"}), "2.11.0+cu130", "13.0")
    assert not check["ok"] and "mooncake-transfer-engine-cuda13==0.3.14" in check["remedy"]
    _found, check = engine_check(mooncake({"mooncake-transfer-engine-non-cuda": "0.3.13.post1"}))
    assert not check["ok"] and "is the non-CUDA build" in check["detail"]
    _found, check = engine_check(mooncake({"mooncake-transfer-engine": "0.3.13.post1"}), "2.9.1+cpu", None)
    assert not check["ok"] and "torch 2.9.1+cpu has no CUDA build" in check["detail"]
    assert "mooncake-transfer-engine-non-cuda==0.3.13.post1" in check["remedy"]
    nixl = {"nixl": {"module": "nixl._api", "imports": True, "error": None, "packages": {"nixl-cu13": "1.5.1"}}}
    _found, check = engine_check(nixl)
    assert not check["ok"] and check["detail"].startswith("nixl-cu13 1.5.1 in /opt/sglang/venvs/0.5.23 is the CUDA 13")
    assert check["remedy"].endswith("-m pip install nixl-cu12==1.5.1")
    _found, check = engine_check(nixl, "2.9.1+cpu", None)
    assert "nixl has no non-CUDA build (nixl-cu12==1.5.1, nixl-cu13==1.5.1)" in check["remedy"]
    # a torch for a CUDA no build is for: every build differs
    _found, check = engine_check(mooncake({"mooncake-transfer-engine": "0.3.13.post1"}), "2.4.0+cu118", "11.8")
    assert not check["ok"] and "torch 2.4.0+cu118 is built for CUDA 11.8" in check["detail"]
    assert check["remedy"].startswith("mooncake has no CUDA 11 build (mooncake-transfer-engine-cuda13==0.3.14, ")
    # waivable like every check
    assert engine_check(mooncake({"mooncake-transfer-engine-cuda13": "0.3.14"}), waive=["transfer_engine"])[0]["ok"]


def test_no_engine_that_imports_fails_saying_why():
    error = "ImportError: libibverbs.so.1: cannot open shared object file: No such file or directory"
    _found, check = engine_check(mooncake({"mooncake-transfer-engine": "0.3.13.post1"}, imports=False, error=error))
    assert not check["ok"]
    assert check["detail"] == (
        "no KV transfer engine imports with /opt/sglang/venvs/0.5.23/bin/python (import mooncake.engine: %s; "
        "import nixl._api: ModuleNotFoundError: No module named 'nixl'); installed: mooncake-transfer-engine "
        "0.3.13.post1; a PD layout's servers need one" % error)
    assert check["remedy"] == ("install the host libraries the engine links (the error names the one missing): "
                               "apt-get install libibverbs1 libnuma1")
    _found, check = engine_check(mooncake({}, imports=False, error="ModuleNotFoundError: No module named 'mooncake'"))
    assert "none of mooncake-transfer-engine, mooncake-transfer-engine-cuda13" in check["detail"]
    assert check["remedy"] == ("install the engine into /opt/sglang/venvs/0.5.23: /opt/sglang/venvs/0.5.23/bin/python "
                               "-m pip install mooncake-transfer-engine==0.3.13.post1 (the build of torch's CUDA major)")
    _found, check = engine_check(mooncake({"mooncake-transfer-engine": "0.3.13.post1"}, imports=False,
                                          error="AttributeError: boom"))
    assert check["remedy"].startswith("reinstall the engine in /opt/sglang/venvs/0.5.23")


def test_the_engine_rule_runs_only_when_transport_facts_were_asked_for():
    facts = base_facts(cc="9.0", versions={"torch": "2.9.1+cu128"}, tcuda="12.8")
    assert "transfer_engine" not in by_name(rules.evaluate(facts))  # not asked: a co-located deploy
    facts["transport"] = transport_facts(None, python=None)
    check = by_name(rules.evaluate(facts))["transfer_engine"]
    assert check["ok"] and check["detail"] == "skipped: no python (venv interpreter) given"
    # no torch in the venv: the build is not compared, said as a warning
    _found, check = engine_check(mooncake({"mooncake-transfer-engine-cuda13": "0.3.14"}), torch=None, tcuda=None)
    assert check["ok"] and check["severity"] == "warning" and "torch is not in the venv" in check["detail"]


def test_the_module_gathers_transport_only_when_asked(run_module, monkeypatch, tmp_path):
    """gpu_prereqs end to end: the fake nvidia-smi of the H200 x8 host, a sysfs tree and
    nvidia_peermem under tmp_path, a real venv whose mooncake.engine imports."""
    from ansible_collections.gpufleet.sglang.plugins.modules import gpu_prereqs
    from ansible_collections.gpufleet.sglang.tests.paths import FAKES
    monkeypatch.setenv("PATH", FAKES + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", os.path.join(FAKES, "nvidia-smi-sets", "h200-x8"))
    monkeypatch.setattr(doctor, "IB_ROOT", make_sysfs(tmp_path / "infiniband", H200_SYSFS))
    monkeypatch.setattr(doctor, "PEERMEM_PATH", str(tmp_path / "no-peermem"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    os.makedirs(os.path.join(site, "mooncake"))
    for name in ("__init__.py", "engine.py"):
        open(os.path.join(site, "mooncake", name), "w").close()
    os.makedirs(os.path.join(site, "mooncake_transfer_engine_non_cuda-0.3.13.post1.dist-info"))
    with open(os.path.join(site, "mooncake_transfer_engine_non_cuda-0.3.13.post1.dist-info", "METADATA"), "w") as h:
        h.write("Metadata-Version: 2.1\nName: mooncake-transfer-engine-non-cuda\nVersion: 0.3.13.post1\n")
    args = {"python": str(venv / "bin" / "python"), "compile_test": False, "cache_dir": str(tmp_path / "cache")}
    plain, failed = run_module(gpu_prereqs, dict(args))
    assert not failed and "transport" not in plain and "transfer_engine" not in [c["name"] for c in plain["checks"]]
    res, failed = run_module(gpu_prereqs, dict(args, transport=True))
    assert not failed
    got = res["transport"]
    assert [d["name"] for d in got["ib_devices"]] == ["mlx5_%d" % i for i in range(9)]
    assert got["peermem"] is False and got["topology"]["nics"]["mlx5_3"][0] == "PIX"
    assert got["engines"]["mooncake"] == {"module": "mooncake.engine", "imports": True, "error": None,
                                          "packages": {"mooncake-transfer-engine-non-cuda": "0.3.13.post1"}}
    assert got["engines"]["nixl"]["imports"] is False
    check = dict((c["name"], c) for c in res["checks"])["transfer_engine"]
    # no torch in this venv: the engine imports, its build is not compared
    assert check["ok"] and check["severity"] == "warning"
    assert check["detail"].startswith("mooncake-transfer-engine-non-cuda 0.3.13.post1: import mooncake.engine works")
    # the choice check/_pd makes from these facts: no GPUDirect here, so not mooncake
    chosen, problems = _pd.choose_backend("0.5.23", _pd.release_facts("0.5.23"), {"h": got})
    assert chosen["backend"] == "mooncake_tcp" and "nvidia_peermem module is not loaded" in chosen["reason"]
