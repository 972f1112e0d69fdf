# -*- coding: utf-8 -*-
"""Parsers, probes and rules of the prerequisite doctor, against real outputs.

nvidia-smi / nvcc texts come from tests/fixtures (verbatim captures); the CUDA tests run
the real toolkit on this machine and are skipped only when nvcc is absent.
"""

from __future__ import absolute_import, division, print_function

import os
import re
import shutil
import subprocess

import pytest

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
    root = os.path.join(HERE, "..", "..", "..", "..")
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
