"""The emulator derives and checks server args as the real releases do.

The reference is ``tests/fixtures/server-args/server-args.json``: what the real sglang
0.5.9 and 0.5.23 packages derived from the collection's argv for every case (see its
README). The emulator's ``derive`` is fed the same argparse values the real release parsed
(``asked``) and must reach the same values, refuse the same cases with the same message,
and log the same override warnings. Then the collection's own gate code runs against the
emulator's ``sglang.srt.server_args`` and reports the same changes as against the real
release.
"""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _server_args_gate as gate
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_emulator import ROOT, SRC  # noqa: E402  pylint: disable=wrong-import-position
from sglang._emulator import server_args as emu  # noqa: E402  pylint: disable=wrong-import-position

with open(os.path.join(FIXTURES, "server-args", "server-args.json")) as _handle:
    FIXTURE = json.load(_handle)

GPU = FIXTURE["gpu"]
CASES = [(release, model, case) for release, models in sorted(FIXTURE["releases"].items())
         for model, cases in sorted(models.items()) for case in sorted(cases)]
COMPARED = ("tp_size", "pp_size", "ep_size", "dp_size", "attn_dp_size", "enable_dp_attention",
            "chunked_prefill_size", "cuda_graph_max_bs", "attention_backend",
            "disable_overlap_schedule", "moe_a2a_backend", "disable_cuda_graph", "enable_mixed_chunk")
# the messages of the real release's warnings the emulator must log as well
OVERRIDES = ("expert parallel size is adjusted", "overlap schedule", "DP attention is enabled",
             "Cuda graph is disabled")


def test_the_fixture_covers_the_issues_cases():
    wanted = {"tp8", "pp8", "ep8", "ep4", "tp8-dp8", "tp16-2nodes", "tp8-pp2-2nodes",
              "pp8-dp-attention", "ep4-deepep", "pp8-mixed-chunk"}
    for release in ("0.5.9", "0.5.23"):
        for model in ("kimi-k2.5", "deepseek-v3"):
            assert wanted <= set(FIXTURE["releases"][release][model]), (release, model)
            assert all(e["verdict"] in ("ok", "refused")
                       for e in FIXTURE["releases"][release][model].values()), "a capture failed"


def _model(model):
    return emu.model_facts(os.path.join(ROOT, FIXTURE["model_dirs"][model]))


@pytest.mark.parametrize("release, model, case", CASES)
def test_the_emulator_derives_what_the_release_derives(release, model, case):
    real = FIXTURE["releases"][release][model][case]
    asked = dict(real["asked"], model_path=os.path.join(ROOT, FIXTURE["model_dirs"][model]))
    try:
        derived, warnings = emu.derive(release, asked, GPU["memory_mib"], GPU["cc"], _model(model))
        emu.check(release, derived)
    except emu.ServerArgsCheckError as exc:
        assert real["verdict"] == "refused", (real.get("derived"), str(exc))
        assert real["error"] == "AssertionError: %s" % exc
        return
    assert real["verdict"] == "ok", "the release refused: %s" % real.get("error")
    for key in COMPARED:
        if key in real["derived"]:
            assert derived.get(key) == real["derived"][key], (key, derived.get(key), real["derived"][key])
    assert derived["mem_fraction_static"] == pytest.approx(real["derived"]["mem_fraction_static"], abs=1e-9)
    if "cuda_graph_bs" in real["derived"] and release == "0.5.9":
        assert derived["cuda_graph_bs"] == real["derived"]["cuda_graph_bs"]
    real_overrides = sorted(w["msg"] for w in real["warnings"] if any(o in w["msg"] for o in OVERRIDES))
    assert sorted(w for w in warnings if any(o in w for o in OVERRIDES)) == real_overrides


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
@pytest.mark.parametrize("case", ["pp8-dp-attention", "ep4-deepep", "pp8-mixed-chunk", "tp8-dp8"])
def test_the_gate_reports_the_same_against_the_emulator_as_against_the_release(release, case):
    """The collection's gate code, run in a Python that imports the emulator's sglang."""
    real = FIXTURE["releases"][release]["kimi-k2.5"][case]
    argv = [os.path.join(ROOT, a) if a == FIXTURE["model_dirs"]["kimi-k2.5"] else a
            for a in real["argv"]]
    env = dict(os.environ, PYTHONPATH=SRC, SGLANG_EMULATOR_RELEASE=release)
    proc = subprocess.run([sys.executable, "-c", gate.GATE_CODE, gate.request(argv, GPU)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    answer = gate.parse_output(proc.stdout)
    answer["argv"] = real["argv"]
    assert answer["verdict"] == real["verdict"], (answer.get("error"), real.get("error"))
    assert answer.get("error") == real.get("error")
    assert gate.changes(answer) == gate.changes(real)
    if real["verdict"] == "ok":
        assert answer["derived"]["mem_fraction_static"] == pytest.approx(
            real["derived"]["mem_fraction_static"], abs=1e-9)


@pytest.mark.parametrize("release", ["0.5.9"])  # 0.5.23 accepts pp with mixed chunk
def test_the_emulated_server_dies_where_check_server_args_does(release):
    """A start the release refuses before any GPU work: no layout, no load, exit 1."""
    model = os.path.join(ROOT, FIXTURE["model_dirs"]["kimi-k2.5"])
    env = dict(os.environ, PYTHONPATH=SRC, SGLANG_EMULATOR_RELEASE=release,
               SGLANG_EMULATOR_STATE_DIR=os.path.join(os.environ.get("TMPDIR", "/tmp"), "emu-sa-%s" % release))
    proc = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--model-path", model,
                           "--pp-size", "8", "--enable-mixed-chunk", "--port", "1"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    real = FIXTURE["releases"][release]["kimi-k2.5"]["pp8-mixed-chunk"]
    assert proc.returncode == 1
    assert real["error"] in proc.stdout + proc.stderr
    assert "starting: layout" not in proc.stdout + proc.stderr
