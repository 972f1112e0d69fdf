# -*- coding: utf-8 -*-
"""The gate's reading of what the real releases derived (tests/fixtures/server-args)."""

import json
import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _server_args_gate as gate
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES

with open(os.path.join(FIXTURES, "server-args", "server-args.json")) as _h:
    FIXTURE = json.load(_h)


def changes(release, case, model="kimi-k2.5"):
    return [(c["what"], c["asked"], c["derived"], c["explicit"])
            for c in gate.changes(FIXTURE["releases"][release][model][case])]


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
@pytest.mark.parametrize("model", ["kimi-k2.5", "deepseek-v3"])
def test_what_each_release_changes(release, model):
    # the strategies as the collection renders them: nothing asked is changed ...
    for case in ("tp8", "ep8", "ep4", "tp16-2nodes"):
        assert changes(release, case, model) == [], case
    # ... DP attention (tp8-dp8) is kept, in either release's spelling ...
    assert changes(release, "tp8-dp8", model) == []
    derived = FIXTURE["releases"][release][model]["tp8-dp8"]["derived"]
    assert gate.effective(derived)["DP attention"] == "on (8 groups)"
    assert derived["chunked_prefill_size"] == 1024
    # ... the plain --dp-size of old (8 replicas of tp8: 64 GPUs) stays replicas
    replicas = FIXTURE["releases"][release][model]["tp8-dp8-replicas"]
    assert gate.effective(replicas["derived"])["dp replicas"] == 8 and replicas["verdict"] == "ok"
    # pp turns the overlap schedule off: the release's own default, reported, not asked
    overlap = ("overlap schedule", "on", "off", False)
    assert changes(release, "pp8", model) == [overlap]
    assert changes(release, "tp8-pp2-2nodes", model) == [overlap]
    # --enable-dp-attention at dp 1 is dropped silently by the release: asked, so explicit
    assert changes(release, "pp8-dp-attention", model) == [
        ("DP attention", "on (1 groups)", "off", True), overlap]
    # --moe-a2a-backend deepep spans EP over TP: ep 4 asked, 8 run
    assert changes(release, "ep4-deepep", model) == [("ep", 4, 8, True)]


@pytest.mark.parametrize("model", ["kimi-k2.5", "deepseek-v3"])
def test_pp_with_mixed_chunk_is_refused_by_0_5_9_only(model):
    old = FIXTURE["releases"]["0.5.9"][model]["pp8-mixed-chunk"]
    assert old["verdict"] == "refused" and old["stage"] == "check"
    assert old["error"].startswith("AssertionError: Pipeline parallelism is not compatible")
    assert old["where"].startswith("sglang/srt/server_args.py:")
    assert FIXTURE["releases"]["0.5.23"][model]["pp8-mixed-chunk"]["verdict"] == "ok"


def test_summary_and_cache_key():
    answer = FIXTURE["releases"]["0.5.9"]["kimi-k2.5"]["ep4-deepep"]
    summary = gate.summary(answer, "0.5.9")
    assert summary["strict_refuses"] == [
        "sglang 0.5.9 changes ep from 4 (asked by the launch flags) to 8"]
    assert any("expert parallel size is adjusted" in w for w in summary["warnings"])
    gpu = dict(FIXTURE["gpu"])
    one = gate.cache_path("/c", "f" * 64, answer["argv"], gpu)
    assert one == gate.cache_path("/c", "f" * 64, list(answer["argv"]), dict(gpu))
    for other in (dict(gpu, name="NVIDIA H200"), dict(gpu, memory_mib=143771), dict(gpu, cc=[9, 0]),
                  dict(gpu, count=4)):
        assert gate.cache_path("/c", "f" * 64, answer["argv"], other) != one
    assert gate.cache_path("/c", "e" * 64, answer["argv"], gpu) != one
    assert gate.cache_path("/c", "f" * 64, answer["argv"] + ["--x"], gpu) != one
    assert gate.gpu_of({"count": 8, "memory_mib": 97887, "name": "RTX", "compute_capability": "12.0"}) == {
        "count": 8, "cc": [12, 0], "memory_mib": 97887, "name": "RTX"}
    assert gate.gpu_of({"count": 8, "memory_mib": 97887, "name": None, "compute_capability": None}) is None


def test_the_gate_program_is_its_file_and_reads_from_a_payload_zip(tmp_path):
    """GATE_CODE is the source of _server_args_gate_program.py; on a host the module_utils
    come from the module's zip payload, and the source is read from there the same way."""
    import importlib
    import zipfile
    from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import (
        _server_args_gate as gate_mod,
        _server_args_gate_program as program)
    with open(program.__file__, encoding="utf-8") as handle:
        text = handle.read()
    assert gate_mod.GATE_CODE == text
    payload = tmp_path / "payload.zip"
    with zipfile.ZipFile(str(payload), "w") as zf:
        zf.writestr("gatepayload/__init__.py", "")
        zf.writestr("gatepayload/prog.py", text)
    import sys
    sys.path.insert(0, str(payload))
    try:
        zipped = importlib.import_module("gatepayload.prog")
        assert "zip" in type(zipped.__loader__).__name__.lower()
        assert gate_mod._program_source(zipped) == text
    finally:
        sys.path.remove(str(payload))
        for name in ("gatepayload.prog", "gatepayload"):
            sys.modules.pop(name, None)
