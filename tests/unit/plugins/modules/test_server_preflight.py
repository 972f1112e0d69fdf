# -*- coding: utf-8 -*-
"""gpufleet.sglang.server_preflight driven through main() with a fake venv python.

The fake answers the release query, prints a real --help fixture, and plays the release's
argparse for ``-m sglang.launch_server <argv> --help`` (refusing a value when told to);
every --help run is logged, so the tests count them.
"""

import json
import os
import shutil
import socket

import pytest

from ansible_collections.gpufleet.sglang.plugins.modules import server_preflight
from ansible_collections.gpufleet.sglang.tests.doubles import install_venv_python
from ansible_collections.gpufleet.sglang.tests.paths import FAKES, FIXTURES
from ansible_collections.gpufleet.sglang.tests.ports import free_port


class Host:
    def __init__(self, tmp_path, version="0.5.9"):
        self.bin = tmp_path / "venv" / "bin"
        self.bin.mkdir(parents=True)
        self.python = self.bin / "python"
        install_venv_python(self.bin)
        self.state = {"version": version,
                      "help_file": os.path.join(FIXTURES, "sglang-help", "sglang-%s.txt" % version)}
        self.save()
        self.model = tmp_path / "model"
        self.model.mkdir()
        shutil.copy(os.path.join(FIXTURES, "models", "moonshotai__Kimi-K2.5", "config.json"),
                    str(self.model / "config.json"))
        self.cache = tmp_path / "cache"
        self.record = tmp_path / "sglang.fact"

    def save(self):
        (self.bin / "state.json").write_text(json.dumps(self.state))

    @property
    def help_calls(self):
        path = self.bin / "help-calls.txt"
        return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []

    def args(self, strategy="ep8", port=None, extra=None, **plan):
        layouts = {"ep8": dict(tp=8, pp=1, ep=8, dp=1), "pp8": dict(tp=1, pp=8, ep=1, dp=1),
                   "tp8": dict(tp=8, pp=1, ep=1, dp=1)}
        layout = dict(layouts[strategy], name=strategy)
        settings = {"gpu_count": 8, "gpu_memory_mib": 97887, "nnodes": 1}
        settings.update(plan)
        return {"host": "gpu-1", "python": str(self.python), "model_path": str(self.model),
                "layout": layout, "server_args": {"--model-path": str(self.model), "--port": 30000},
                "extra_args": extra or {}, "plan": settings, "port": port or free_port(),
                "record_path": str(self.record), "cache_dir": str(self.cache)}


def test_first_run_asks_the_release_twice_a_rerun_never(tmp_path, run_module):
    host = Host(tmp_path)
    first = run_module(server_preflight, host.args())[0]
    assert not first.get("failed"), first
    assert first["version"] == "0.5.9" and first["port_owner"] == "free"
    assert first["cached"] == {"help": False, "argparse": False}
    assert "--ep-size" in first["argv"] and "8" in first["argv"]
    assert first["plan"]["fits"] and first["plan"]["name"] == "ep8"
    # the probe's --help, then the release's argparse over the exact argv
    assert host.help_calls == [[], first["argv"]]
    second = run_module(server_preflight, host.args())[0]
    assert second["cached"] == {"help": True, "argparse": True}
    assert second["argv"] == first["argv"]
    assert len(host.help_calls) == 2, "a re-run must not run --help"


def _query_calls(host):
    path = host.bin / "query-calls.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_candidates_are_checked_in_one_call_each_refusal_its_own(tmp_path, run_module):
    host = Host(tmp_path)
    host.state["refuse"] = "--max-running-requests"
    host.save()
    args = host.args()
    del args["layout"], args["extra_args"]
    layouts = {s: host.args(strategy=s)["layout"] for s in ("ep8", "tp8", "pp8")}
    args["candidates"] = [
        {"id": "c1", "strategy": "ep8", "layout": layouts["ep8"], "extra_args": {}},
        {"id": "c2", "strategy": "tp8", "layout": layouts["tp8"], "extra_args": {"--mem-fraction-static": 0.05}},
        {"id": "c3", "strategy": "pp8", "layout": layouts["pp8"], "extra_args": {"--max-running-requests": 5}},
        {"id": "c4", "strategy": "ep8", "layout": layouts["ep8"], "extra_args": {"--allowed-media-domains": "x"}},
        {"id": "c5", "strategy": "tp8", "layout": layouts["tp8"], "extra_args": {"--cuda-graph-max-bs": 8}},
    ]
    result = run_module(server_preflight, args)[0]
    assert not result.get("failed"), result
    results = result["results"]
    assert [r["item"] for r in results] == [{"id": "c%d" % i} for i in range(1, 6)]
    assert [r["failed"] for r in results] == [False, True, True, True, False]
    # each result is what a single call returns for that candidate
    for pos in (0, 4):
        cand = args["candidates"][pos]
        one = run_module(server_preflight, host.args(strategy=cand["strategy"], port=args["port"],
                                                     extra=cand["extra_args"]))[0]
        assert results[pos]["argv"] == one["argv"] and results[pos]["plan"] == one["plan"]
    assert "strategy tp8 does not fit 8 x 97887 MiB" in results[1]["msg"]
    assert results[2]["msg"].startswith("sglang 0.5.9 refuses the launch flags (server_extra_args")
    assert "--allowed-media-domains does not exist in sglang 0.5.9" in results[3]["msg"]
    assert "--cuda-graph-max-bs" in results[4]["argv"]
    # one release query for the five (a single call makes one each: the two above)
    assert _query_calls(host) == 1 + 2
    # --help once, then argparse for c1, c3 and c5 (c2 and c4 stop before it); the two
    # single calls found both in the cache
    assert len(host.help_calls) == 4


def test_candidates_name_every_bad_entry_at_once(tmp_path, run_module):
    host = Host(tmp_path)
    args = host.args()
    del args["layout"]
    args["candidates"] = [{"id": "", "layout": {"name": "ep8"}}, {"id": "c2", "layout": "ep8"},
                          {"id": "c3", "layout": {"name": "ep8"}, "extra_args": ["--x"]}]
    result = run_module(server_preflight, args)[0]
    assert result["failed"]
    assert result["problems"] == [
        "candidates[0]: id must be a non-empty string (got '')",
        "candidates[1]: layout must be a mapping (got 'ep8')",
        "candidates[2]: extra_args must be a mapping (got ['--x'])"]
    assert _query_calls(host) == 0 and host.help_calls == []


def test_new_flags_are_checked_by_the_release_again(tmp_path, run_module):
    host = Host(tmp_path)
    run_module(server_preflight, host.args())
    result = run_module(server_preflight, host.args(extra={"--max-running-requests": 64}))[0]
    assert result["cached"] == {"help": True, "argparse": False}
    assert len(host.help_calls) == 3


def test_the_releases_argparse_refusal_is_shown_and_not_cached(tmp_path, run_module):
    host = Host(tmp_path)
    host.state["refuse"] = "--max-running-requests"
    host.save()
    args = host.args(extra={"--max-running-requests": 5})
    result = run_module(server_preflight, args)[0]
    assert result["failed"]
    assert result["msg"] == ("sglang 0.5.9 refuses the launch flags (server_extra_args or the server "
                             "settings): launch_server.py: error: argument --max-running-requests: "
                             "invalid int value: 'x'")
    run_module(server_preflight, args)
    assert len(host.help_calls) == 3, "a refusal is asked again, never cached"


def test_unknown_flag_is_refused_naming_the_release(tmp_path, run_module):
    host = Host(tmp_path)
    result = run_module(server_preflight, host.args(extra={"--allowed-media-domains": "example.com"}))[0]
    assert result["failed"]
    assert result["msg"].startswith("server_extra_args or the server settings are not valid for this release:")
    assert "--allowed-media-domains does not exist in sglang 0.5.9" in result["msg"]


def test_missing_interpreter(tmp_path, run_module):
    host = Host(tmp_path)
    args = host.args()
    args["python"] = str(tmp_path / "nope" / "python")
    result = run_module(server_preflight, args)[0]
    assert result["msg"] == "server_python %s: Python interpreter %s does not exist" % (
        args["python"], args["python"])


def test_model_directory_without_config(tmp_path, run_module):
    host = Host(tmp_path)
    os.unlink(str(host.model / "config.json"))
    result = run_module(server_preflight, host.args())[0]
    assert "the model directory %s has no config.json" % host.model in result["msg"]
    assert host.help_calls == [], "nothing asked of the release before the model is there"


def test_plan_uses_the_servers_own_fraction_and_refuses_a_misfit(tmp_path, run_module):
    host = Host(tmp_path)
    result = run_module(server_preflight, host.args(strategy="tp8", extra={"--mem-fraction-static": 0.05}))[0]
    assert result["failed"]
    assert "strategy tp8 does not fit 8 x 97887 MiB" in result["msg"]
    assert "mem_fraction_static 0.05 (server_extra_args --mem-fraction-static)" in result["msg"]
    assert result["plan"]["mem_fraction_static"] == 0.05
    assert host.help_calls == []


def test_an_allowed_misfit_goes_on_with_a_warning(tmp_path, run_module, monkeypatch):
    host = Host(tmp_path)
    warned = []
    monkeypatch.setattr(server_preflight.AnsibleModule, "warn", lambda self, text: warned.append(text))
    result = run_module(server_preflight, host.args(strategy="tp8", extra={"--mem-fraction-static": 0.05},
                                                    allow_unfit=True))[0]
    assert not result.get("failed"), result
    assert any("strategy tp8 does not fit (KV margin" in w for w in warned), warned
    assert "--mem-fraction-static" in result["argv"]


def test_a_port_held_by_another_process_is_refused(tmp_path, run_module):
    host = Host(tmp_path)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    try:
        port = sock.getsockname()[1]
        result = run_module(server_preflight, host.args(port=port))[0]
    finally:
        sock.close()
    assert result["failed"]
    assert result["msg"].startswith("server_port %d: port %d is already in use on gpu-1 by " % (port, port))
    assert "(pid %d)" % os.getpid() in result["msg"]


def test_the_doctor_runs_first_and_refuses_with_every_failed_check(tmp_path, run_module):
    host = Host(tmp_path)
    args = host.args()
    args["doctor"] = {"python": str(host.python), "nvidia_smi": str(tmp_path / "no-nvidia-smi"),
                      "waive": ["cuda_toolkit", "cuda_headers"], "compile_test": False}
    result = run_module(server_preflight, args)[0]
    assert result["failed"]
    assert result["msg"].startswith("Prerequisite checks failed on gpu-1:\nnvidia_smi: ")
    assert "remedy:" in result["msg"]
    assert result["doctor"]["ok"] is False and "nvidia_smi" in result["doctor"]["failed_checks"]
    assert host.help_calls == [], "nothing asked of the release when the host is not fit"


def test_the_doctor_passes_on_a_replayed_rtx_pro_6000_box(tmp_path, run_module):
    host = Host(tmp_path)
    smi = os.path.join(FAKES, "nvidia-smi")
    sets = os.path.join(FAKES, "nvidia-smi-sets", "rtx-pro-6000-server-x8")
    args = host.args()
    args["doctor"] = {"python": None, "nvidia_smi": smi,
                      "waive": ["cuda_toolkit", "cuda_headers", "compile_test", "driver_toolkit",
                                "toolkit_arch"], "compile_test": False}
    os.environ["FAKE_NVIDIA_SMI_DIR"] = sets
    try:
        result = run_module(server_preflight, args)[0]
    finally:
        os.environ.pop("FAKE_NVIDIA_SMI_DIR", None)
    assert not result.get("failed"), result.get("msg")
    assert result["doctor"]["ok"] is True


def test_the_plan_uses_the_servers_context_length_and_kv_dtype(tmp_path, run_module):
    host = Host(tmp_path)
    extra = {"--context-length": 262144, "--kv-cache-dtype": "fp8_e4m3"}
    result = run_module(server_preflight, host.args(strategy="pp8", extra=extra))[0]
    assert not result.get("failed"), result.get("msg")
    assert result["plan"]["context_length"] == 262144
    assert result["plan"]["kv_dtype"] == "fp8_e4m3"
    plain = run_module(server_preflight, host.args(strategy="pp8"))[0]
    assert plain["plan"]["kv_dtype"] == "auto" and not plain["plan"]["context_length"]
    # fp8 halves the KV bytes per token of the auto (bf16) cache
    assert result["plan"]["kv_bytes_per_token_per_gpu"] * 2 == plain["plan"]["kv_bytes_per_token_per_gpu"]


@pytest.mark.parametrize("extra, expect", [
    ({"--context-length": [4096, 8192]}, "--context-length takes a single value in sglang 0.5.9"),
    ({"--kv-cache-dtype": ["fp8_e4m3"]}, "--kv-cache-dtype takes a single value in sglang 0.5.9"),
])
def test_malformed_server_settings_reach_the_flag_check_not_the_planner(tmp_path, run_module, extra, expect):
    host = Host(tmp_path)
    result = run_module(server_preflight, host.args(strategy="pp8", extra=extra))[0]
    assert result["failed"] and expect in result["msg"], result.get("msg")


# --- the GPUs from the host: the doctor reads a replayed box -----------------------------
RTX_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
WAIVE = ["cuda_toolkit", "cuda_headers", "compile_test", "driver_toolkit", "toolkit_arch"]


def run_on_box(host, run_module, box="rtx-pro-6000-server-x8", strategy="ep8", given=None, **plan):
    """Run with the doctor against a replayed nvidia-smi set; ``plan`` sets gpu_count/memory."""
    args = host.args(strategy=strategy, **dict({"gpu_count": None, "gpu_memory_mib": None}, **plan))
    if given is not None:
        args["strategy"] = given
    # as in the role: the doctor judges the strategy as well
    args["doctor"] = {"python": None, "nvidia_smi": os.path.join(FAKES, "nvidia-smi"),
                      "strategy": given or strategy, "waive": WAIVE, "compile_test": False}
    os.environ["FAKE_NVIDIA_SMI_DIR"] = os.path.join(FAKES, "nvidia-smi-sets", box)
    try:
        return run_module(server_preflight, args)[0]
    finally:
        os.environ.pop("FAKE_NVIDIA_SMI_DIR", None)


@pytest.mark.parametrize("unset", [None, ""])
def test_unset_gpu_count_and_memory_come_from_the_doctor(tmp_path, run_module, unset):
    host = Host(tmp_path)
    result = run_on_box(host, run_module, gpu_count=unset, gpu_memory_mib=unset)
    assert not result.get("failed"), result.get("msg")
    assert result["gpus"] == {"count": 8, "memory_mib": 97887, "name": RTX_NAME,
                              "source": "detected", "memory_source": "detected",
                              "compute_capability": "12.0"}
    assert result["layout"] == {"name": "ep8", "tp": 8, "pp": 1, "ep": 8, "dp": 1, "nnodes": 1,
                                "gpus": 8}
    # the memory plan ran on what the host has
    assert (result["plan"]["gpus"], result["plan"]["gpu_memory_mib"]) == (8, 97887)


def test_a_mixed_fleet_plans_each_host_with_its_own_gpus(tmp_path, run_module):
    rtx = run_on_box(Host(tmp_path / "rtx"), run_module)
    h200 = run_on_box(Host(tmp_path / "h200"), run_module, box="h200-x8")
    assert not rtx.get("failed") and not h200.get("failed"), (rtx.get("msg"), h200.get("msg"))
    assert (rtx["gpus"]["memory_mib"], h200["gpus"]["memory_mib"]) == (97887, 143771)
    assert h200["gpus"]["name"] == "NVIDIA H200"
    assert rtx["plan"]["gpu_memory_mib"] == 97887 and h200["plan"]["gpu_memory_mib"] == 143771
    assert h200["plan"]["kv_tokens"] > rtx["plan"]["kv_tokens"]


def test_a_gpu_count_that_disagrees_with_the_host_is_refused(tmp_path, run_module):
    host = Host(tmp_path)
    result = run_on_box(host, run_module, gpu_count=4)
    assert result["failed"]
    assert result["msg"] == "gpu-1: sglang_gpu_count is 4, but gpu-1 has 8 GPUs (%s)" % RTX_NAME
    assert result["doctor"]["ok"] is True
    assert host.help_calls == [], "nothing asked of the release when the GPUs disagree"


def test_a_gpu_memory_that_disagrees_with_the_host_is_refused(tmp_path, run_module):
    host = Host(tmp_path)
    result = run_on_box(host, run_module, gpu_memory_mib="143771")
    assert result["failed"]
    assert result["msg"] == ("gpu-1: sglang_gpu_memory_mib is 143771, but gpu-1 has 97887 MiB per "
                             "GPU (%s)" % RTX_NAME)
    assert "plan" not in result and host.help_calls == []


def test_a_count_given_on_the_controller_is_checked_and_kept(tmp_path, run_module):
    host = Host(tmp_path)
    result = run_on_box(host, run_module, gpu_count=8, gpu_memory_mib=97887)
    assert not result.get("failed"), result.get("msg")
    assert result["gpus"] == {"count": 8, "memory_mib": 97887, "name": RTX_NAME,
                              "source": "inventory", "memory_source": "inventory",
                              "compute_capability": "12.0"}
    only_count = run_on_box(host, run_module, gpu_count="8")
    assert (only_count["gpus"]["source"], only_count["gpus"]["memory_source"]) == ("inventory", "detected")


def test_a_strategy_that_does_not_fit_the_detected_gpus_is_refused_as_on_the_controller(tmp_path, run_module):
    host = Host(tmp_path)
    result = run_on_box(host, run_module, strategy="tp8", given="tp4")
    assert result["failed"]
    assert result["msg"] == ("gpu-1: strategy 'tp4' needs tp*pp = 4*1 = 4 GPUs, but the server has 8 "
                             "(1 node(s) x 8 GPUs); tp*pp must equal the GPU count")
    assert result["gpus"]["source"] == "detected" and "layout" not in result
    assert host.help_calls == []


def test_a_strategy_the_doctor_refuses_too_is_named_first(tmp_path, run_module):
    host = Host(tmp_path)
    result = run_on_box(host, run_module, strategy="tp8", given="tp12")
    assert result["failed"]
    first, rest = result["msg"].split("\n", 1)
    assert first.startswith("gpu-1: strategy 'tp12' needs tp*pp = 12*1 = 12 GPUs, but the server has 8")
    assert rest.startswith("Prerequisite checks failed on gpu-1:\nstrategy: ")


def test_the_layout_is_resolved_on_the_host_from_the_strategy_as_given(tmp_path, run_module):
    host = Host(tmp_path)
    result = run_on_box(host, run_module, strategy="ep8", given="tp8-ep8")
    assert not result.get("failed"), result.get("msg")
    assert result["layout"]["name"] == "ep8" and "--ep-size" in result["argv"]


def test_without_gpus_the_doctors_own_refusal_stands(tmp_path, run_module):
    host = Host(tmp_path)
    result = run_on_box(host, run_module, box="no-driver")
    assert result["failed"]
    assert result["msg"].startswith("Prerequisite checks failed on gpu-1:\nnvidia_smi: ")
    assert "sglang_gpu_count" not in result["msg"] and "gpus" not in result


def test_without_the_doctor_an_unset_count_is_read_with_nvidia_smi(tmp_path, run_module, monkeypatch):
    host = Host(tmp_path)
    bindir = tmp_path / "smi-bin"
    bindir.mkdir()
    os.symlink(os.path.abspath(os.path.join(FAKES, "nvidia-smi")), str(bindir / "nvidia-smi"))
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", os.path.join(FAKES, "nvidia-smi-sets", "rtx-pro-6000-server-x8"))
    result = run_module(server_preflight, host.args(gpu_count=None, gpu_memory_mib=None))[0]
    assert not result.get("failed"), result.get("msg")
    assert result["gpus"]["count"] == 8 and result["gpus"]["source"] == "detected"
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", os.path.join(FAKES, "nvidia-smi-sets", "no-driver"))
    refused = run_module(server_preflight, host.args(gpu_count=None, gpu_memory_mib=None))[0]
    assert refused["msg"].startswith("gpu-1: sglang_gpu_count and sglang_gpu_memory_mib are not set "
                                     "and no GPUs were read on the host (nvidia-smi cannot talk to "
                                     "the NVIDIA driver")


# --- the semantic gate: the release's own derivation over the exact argv ----------------

SERVER_ARGS = os.path.join(FIXTURES, "server-args", "server-args.json")


def real_answer(release, case, model="kimi-k2.5"):
    """What the real release answered for a case (tests/fixtures/server-args)."""
    with open(SERVER_ARGS) as handle:
        return json.load(handle)["releases"][release][model][case]


def gate_calls(host):
    path = host.bin / "gate-calls.txt"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def test_the_gate_asks_with_the_gpus_the_doctor_read_and_caches_an_acceptance(tmp_path, run_module):
    host = Host(tmp_path)
    host.state["gate"] = real_answer("0.5.9", "ep8")
    host.save()
    first = run_on_box(host, run_module)
    assert not first.get("failed"), first.get("msg")
    (call,) = gate_calls(host)
    assert call["argv"] == first["argv"]
    assert call["gpu"] == {"count": 8, "cc": [12, 0], "memory_mib": 97887, "name": RTX_NAME}
    assert first["server_args"]["verdict"] == "ok" and first["cached"]["server_args"] is False
    assert first["server_args"]["derived"]["mem_fraction_static"] == pytest.approx(0.7715, abs=1e-4)
    # the plan takes the release's own fraction instead of the planner's estimate
    assert first["plan"]["mem_fraction_static"] == pytest.approx(0.7715, abs=1e-3)
    assert first["plan"]["fraction_from"] == "sglang 0.5.9's own default (server-args check)"
    assert first["plan"]["planner_estimate_mem_fraction_static"] != first["plan"]["mem_fraction_static"]
    second = run_on_box(host, run_module)
    assert second["cached"]["server_args"] is True and len(gate_calls(host)) == 1


def test_a_refusal_by_the_release_names_it_and_is_not_cached(tmp_path, run_module):
    host = Host(tmp_path)
    host.state["gate"] = real_answer("0.5.9", "pp8-mixed-chunk")
    host.save()
    result = run_on_box(host, run_module, strategy="pp8")
    assert result["failed"]
    assert result["msg"].startswith("sglang 0.5.9 refuses the launch flags once it derives its "
                                    "settings for 8 x %s: AssertionError: Pipeline parallelism is "
                                    "not compatible" % RTX_NAME)
    assert "sglang/srt/server_args.py:" in result["msg"]
    run_on_box(host, run_module, strategy="pp8")
    assert len(gate_calls(host)) == 2, "a refusal is asked again"


def run_on_box_with(host, run_module, strategy, extra, strict=False):
    args = host.args(strategy=strategy, extra=extra, gpu_count=None, gpu_memory_mib=None)
    args["strict"] = strict
    args["doctor"] = {"python": None, "nvidia_smi": os.path.join(FAKES, "nvidia-smi"),
                      "strategy": strategy, "waive": WAIVE, "compile_test": False}
    os.environ["FAKE_NVIDIA_SMI_DIR"] = os.path.join(FAKES, "nvidia-smi-sets", "rtx-pro-6000-server-x8")
    try:
        return run_module(server_preflight, args)[0]
    finally:
        os.environ.pop("FAKE_NVIDIA_SMI_DIR", None)


@pytest.fixture
def warned(monkeypatch):
    """Every module.warn text (Ansible de-duplicates warnings per process in its result)."""
    from ansible.module_utils import basic
    texts = []
    real = basic.AnsibleModule.warn

    def recording(self, warning):
        texts.append(warning)
        return real(self, warning)
    monkeypatch.setattr(basic.AnsibleModule, "warn", recording)
    return texts


def test_dp_attention_dropped_is_reported_and_strict_refuses(tmp_path, run_module, warned):
    host = Host(tmp_path)
    host.state["gate"] = real_answer("0.5.9", "pp8-dp-attention")
    host.save()
    extra = {"--enable-dp-attention": True}
    result = run_on_box_with(host, run_module, "pp8", extra)
    assert not result.get("failed"), result.get("msg")
    assert "--enable-dp-attention" in result["argv"]
    messages = result["server_args"]["messages"]
    assert messages == [
        "sglang 0.5.9 changes DP attention from on (1 groups) (asked by the launch flags) to off",
        "sglang 0.5.9 changes overlap schedule from its default on to off"]
    # warned: the change of what the flags asked for; not the release's own default
    assert messages[0] in warned and messages[1] not in warned
    strict = run_on_box_with(host, run_module, "pp8", extra, strict=True)
    assert strict["failed"]
    assert strict["msg"] == ("sglang 0.5.9 changes DP attention from on (1 groups) (asked by the "
                             "launch flags) to off; refused because sglang_strict is true (nothing "
                             "was changed on the host)")


def test_strict_does_not_refuse_a_change_of_the_releases_own_default(tmp_path, run_module):
    host = Host(tmp_path)
    host.state["gate"] = real_answer("0.5.9", "pp8")
    host.save()
    result = run_on_box_with(host, run_module, "pp8", {}, strict=True)
    assert not result.get("failed"), result.get("msg")
    assert result["server_args"]["messages"] == [
        "sglang 0.5.9 changes overlap schedule from its default on to off"]
    assert result["server_args"]["strict_refuses"] == []


def test_without_the_gpu_model_the_gate_is_skipped_with_a_warning(tmp_path, run_module, warned):
    host = Host(tmp_path)
    result = run_module(server_preflight, host.args())[0]
    assert not result.get("failed"), result.get("msg")
    assert result["server_args"]["verdict"] == "skipped"
    assert gate_calls(host) == []
    assert any("server-args check was skipped" in w for w in warned)
