"""The emulator's GPU memory arithmetic (tests/emulator/src/sglang/_emulator/memory.py).

The expected messages below are written out from each release's source. The file and
line of each one are cited in memory.py and tests/emulator/README.md. The expected
numbers come from the collection's own planner, imported the normal way
(``ansible_collections.gpufleet.sglang...``), not through the emulator's vendored copy.
"""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _capacity as planner

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_emulator import (  # noqa: E402  pylint: disable=wrong-import-position
    EMU, MODEL, RELEASES, ROOT, SRC, Emu, run_cli)
from sglang._emulator import _vendor, cli, layout as emu_layout, memory  # noqa: E402

RTX_MIB = 97887
NOT_ENOUGH = "Not enough memory. Please try to increase --mem-fraction-static."


def spec():
    return planner.load_model(MODEL)


def exact_weights(tp=8, pp=1, ep=1, partition=(61,)):
    lay = planner._Layout(spec(), tp, pp, ep, 1, False)  # pylint: disable=protected-access
    return lay.stage_weights(list(partition))


def default_tp8_tokens():
    plan = planner.plan_layout(spec(), {"tp": 8}, 8, RTX_MIB)
    assert plan["fits"] and plan["mem_fraction_static"] == 0.833
    return plan["kv_tokens"]


def plan_for(release, argv, env=None, monkeypatch=None):
    for key, val in (env or {}).items():
        monkeypatch.setenv(key, val)
    args = cli.parse(release, ["--model-path", MODEL] + list(argv))
    lay = emu_layout.resolve(release, args)[0]
    return memory.plan(release, args, lay)


def failed_tp8(tmp_path, release, fraction=None, **extra):
    """stderr of the emulator's launch of the model at tp8 (``fraction``: the
    --mem-fraction-static given, if any), which must exit 1."""
    argv = ["--model-path", MODEL, "--tp", "8"]
    if fraction is not None:
        argv += ["--mem-fraction-static", fraction]
    res = run_cli(tmp_path, argv, release, **extra)
    err = res.stderr.decode()
    assert res.returncode == 1, err
    return err


def fail_line(stderr, exc_name):
    lines = [ln for ln in stderr.splitlines() if ln.startswith(exc_name + ": ")]
    assert lines, stderr
    return lines[-1]


# ------------------------------------------------------------ vendored planner

def test_vendored_planner_is_the_collections_code():
    cap = _vendor.load()
    assert os.path.samefile(cap.__file__, os.path.join(ROOT, "plugins", "module_utils",
                                                       "prepare", "_capacity.py"))
    assert cap.plan_layout(cap.load_model(MODEL), {"tp": 8}, 8, RTX_MIB) == \
        planner.plan_layout(spec(), {"tp": 8}, 8, RTX_MIB)


def test_rewrite_fails_loudly_on_an_unknown_collection_import():
    text = "import ansible_collections.gpufleet.sglang.plugins.module_utils._x as x\n"
    with pytest.raises(ValueError, match="cannot rewrite"):
        _vendor.rewrite_source("_capacity", text)
    text = ("from ansible_collections.gpufleet.sglang.plugins.module_utils._a import b\n"
            "from ansible_collections.gpufleet.sglang.plugins.module_utils._c import (d)\n")
    assert _vendor.rewrite_source("_m", text) == (
        "from sglang._emulator._vendor._a import b\n"
        "from sglang._emulator._vendor._c import (d)\n")
    assert _vendor.dependencies(text) == ["_a", "_c"]


def test_closure_puts_dependencies_first():
    pre = "from ansible_collections.gpufleet.sglang.plugins.module_utils."
    sources = {"_capacity": pre + "_b import x\n" + pre + "_a import y\n",
               "_a": pre + "_b import z\n", "_b": "import re\n"}
    assert _vendor.closure(sources.__getitem__) == ["_b", "_a", "_capacity"]
    sources["_b"] = pre + "_capacity import q\n"
    with pytest.raises(ValueError, match="import cycle"):
        _vendor.closure(sources.__getitem__)


# ------------------------------------------------------------ messages per release

@pytest.mark.parametrize("release", RELEASES)
def test_too_small_fraction_fails_during_load(tmp_path, release):
    """K2.5 tp8 at --mem-fraction-static 0.05 on 8 x 97887 MiB: the KV pool gets nothing."""
    err = failed_tp8(tmp_path, release, "0.05")
    assert "Load weight begin. avail mem=95.59 GB" in err
    assert "Load weight end." in err and "mem usage=71.83 GB." in err
    assert "Uvicorn running" not in err and "max_total_num_tokens=" not in err
    assert err.index("Load weight end.") < err.index("Scheduler hit an exception")
    if release == "0.5.23":
        pre = RTX_MIB / 1024.0
        minimum = 1 - (pre - exact_weights()[0] / 2 ** 30) / pre
        assert abs(minimum - 0.7514) < 1e-4  # 71.83 GiB of 95.59 GiB
        assert fail_line(err, "ValueError") == (
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            "--mem-fraction-static=0.05. Raise --mem-fraction-static above 0.752 "
            "(minimum viable = 1 - available/pre = 0.7514). If using speculative "
            "decoding, draft weights are now counted.")
        assert "RuntimeError" not in err
    elif release == "0.4.6.post5":
        assert fail_line(err, "RuntimeError") == "RuntimeError: " + NOT_ENOUGH
    else:
        assert fail_line(err, "RuntimeError") == (
            "RuntimeError: " + NOT_ENOUGH
            + " Current value: self.server_args.mem_fraction_static=0.05")


def test_0523_less_than_one_token_left_is_the_pool_config_error(tmp_path):
    """0.5.23: a positive remainder below one token raises MemoryPoolConfig's RuntimeError."""
    weights = exact_weights()[0]
    cell = 61 * 1152  # MLA (512 + 64) x bf16 x 61 layers, not divided by TP
    fraction = repr((weights + cell / 2.0) / (RTX_MIB * 2 ** 20))
    err = failed_tp8(tmp_path, "0.5.23", fraction)
    assert fail_line(err, "RuntimeError") == "RuntimeError: " + NOT_ENOUGH
    assert "ValueError" not in err


@pytest.mark.parametrize("release", RELEASES)
def test_default_fraction_fits_and_reports_the_kv_pool(tmp_path, release):
    tokens = default_tp8_tokens()
    assert tokens > 100000
    e = Emu(tmp_path, ["--model-path", MODEL, "--tp", "8"], release,
            SGLANG_EMULATOR_LOAD_SECONDS="0.1", SGLANG_EMULATOR_WARMUP_SECONDS="0.1")
    try:
        e.wait_ready()
        info = e.json("/get_server_info")
        assert info["max_total_num_tokens"] == tokens
        assert info["emulator_memory"]["mem_fraction_static"] == 0.833
        assert info["emulator_memory"]["weights_per_gpu_gib"] == [71.83]
        if release not in ("0.4.6.post5", "0.5.4.post3"):
            assert e.json("/server_info")["max_total_num_tokens"] == tokens
        err = e.stderr()
        line = [ln for ln in err.splitlines() if "max_total_num_tokens=" in ln]
        assert len(line) == 1, err
        head = ("max_total_num_tokens=%d, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                "max_running_requests=2048, context_len=262144" % tokens)
        text = line[0].split("] ", 1)[1]
        if release == "0.4.6.post5":
            assert text == head
        else:
            assert text.startswith(head + ", available_gpu_mem=") and text.endswith(" GB")
        assert err.index("max_total_num_tokens=") < err.index("Uvicorn running")
        if release == "0.5.23":
            assert "KV Cache is allocated" not in err
        else:
            assert "KV Cache is allocated. #tokens: %d, KV size: " % tokens in err
    finally:
        assert e.stop() == 0


@pytest.mark.parametrize("release", RELEASES)
def test_fraction_without_activation_room_fails_in_graph_capture(tmp_path, release):
    err = failed_tp8(tmp_path, release, "0.99")
    word = "CUDA" if release == "0.4.6.post5" else "cuda"
    assert ("Exception: Capture %s graph failed: CUDA out of memory. Tried to allocate "
            % word) in err
    assert "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n" in err
    if release == "0.5.23":
        assert "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n" in err
        assert ("3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
                "(Not recommended. Huge performance loss)\n") in err
        assert "Memory pool end." in err
    else:
        assert "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n" in err
        assert ("4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge "
                "performance loss)\n") in err
        assert "KV Cache is allocated." in err
    # 0.5.23 names the graph (model_runner_components/cuda_graph_setup.py l.759)
    begin = ("Capture target decode CUDA graph begin." if release == "0.5.23"
             else "Capture cuda graph begin.")
    assert err.index("Memory pool end.") < err.index(begin) \
        < err.index("Scheduler hit an exception")
    assert "max_total_num_tokens=" not in err and "Uvicorn running" not in err


def test_activation_room_threshold_is_the_planners(monkeypatch):
    gpu = RTX_MIB
    below = (gpu - planner.MIN_RESERVED_MIB) / float(gpu) - 0.001
    above = (gpu - planner.MIN_RESERVED_MIB) / float(gpu) + 0.001
    assert plan_for("0.5.9", ["--tp", "8", "--mem-fraction-static", str(below)])[
        "failure"] is None
    assert plan_for("0.5.9", ["--tp", "8", "--mem-fraction-static", str(above)])[
        "failure"]["phase"] == "capture"
    # no CUDA graph, no capture: the emulator loads (README, Limits)
    assert plan_for("0.5.9", ["--tp", "8", "--mem-fraction-static", "0.99",
                              "--disable-cuda-graph"])["failure"] is None
    assert plan_for("0.5.23", ["--tp", "8", "--mem-fraction-static", "0.99",
                               "--cuda-graph-backend-decode", "disabled"])["failure"] is None


def test_weights_larger_than_the_gpu_are_a_torch_oom_while_loading(tmp_path):
    err = failed_tp8(tmp_path, "0.5.9", SGLANG_EMULATOR_GPU_MEMORY_MIB="40960")
    assert "Load weight begin. avail mem=40.00 GB" in err
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate " in err
    assert "GPU 0 has a total capacity of 40.00 GiB" in err
    assert "Load weight end." not in err and "Not enough memory" not in err


# ------------------------------------------------------------ layouts that must load

@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("argv", [
    ["--pp-size", "8"], ["--tp", "8"], ["--tp", "8", "--ep-size", "8"],
    ["--tp", "8", "--ep-size", "4"], ["--tp", "16", "--nnodes", "2", "--node-rank", "1"],
    ["--tp", "8", "--pp-size", "2", "--nnodes", "2"]])
def test_molecule_layouts_fit_at_the_default_fraction(release, argv):
    mem = plan_for(release, argv)
    assert mem["failure"] is None and mem["max_total_num_tokens"] > 100000


def test_pp_uses_sglangs_split_or_the_env_partition(monkeypatch):
    monkeypatch.delenv("SGLANG_PP_LAYER_PARTITION", raising=False)
    mem = plan_for("0.5.9", ["--pp-size", "8"])
    assert mem["pp_stage_layers"] == [7, 7, 7, 8, 8, 8, 8, 8]
    default = mem["max_total_num_tokens"]
    assert default == planner.plan_layout(
        spec(), {"pp": 8}, 8, RTX_MIB, pp_partition="7,7,7,8,8,8,8,8")["kv_tokens"]
    mem = plan_for("0.5.9", ["--pp-size", "8"],
                   {"SGLANG_PP_LAYER_PARTITION": "8,8,8,8,8,7,7,7"}, monkeypatch)
    assert mem["pp_stage_layers"] == [8, 8, 8, 8, 8, 7, 7, 7]
    assert mem["max_total_num_tokens"] > default


def test_no_config_or_unknown_model_keeps_the_old_behaviour(tmp_path):
    assert plan_for("0.5.9", ["--tp", "8"]) is not None
    args = cli.parse("0.5.9", ["--model-path", str(tmp_path)])
    assert memory.plan("0.5.9", args, emu_layout.resolve("0.5.9", args)[0]) is None
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "nope"}))
    with pytest.raises(memory.Skip, match="unknown model_type"):
        memory.plan("0.5.9", args, emu_layout.resolve("0.5.9", args)[0])


# ------------------------------------------------------------ wheel

def test_wheel_vendors_the_planner_and_fails_like_the_source_tree(tmp_path):
    build = [sys.executable, os.path.join(EMU, "build_wheel.py"), "--release", "0.5.9",
             "--out", str(tmp_path / "dist")]
    wheel = subprocess.run(build, capture_output=True, text=True, check=True).stdout.strip()
    import zipfile  # pylint: disable=import-outside-toplevel

    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        for name in _vendor.closure(_vendor.read_repo):
            arc = "sglang/_emulator/_vendor/%s.py" % name
            assert arc in names
            assert zf.read(arc).decode("utf-8") == _vendor.rewrite_source(
                name, _vendor.read_repo(name))
            assert "ansible_collections" not in "\n".join(
                ln for ln in zf.read(arc).decode().splitlines()
                if ln.startswith(("from ", "import ")))
    assert {"_capacity", "_capacity_model"} <= set(_vendor.closure(_vendor.read_repo))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    env = {"PATH": os.environ.get("PATH", ""), "SGLANG_EMULATOR_STATE_DIR": str(tmp_path / "st"),
           "SGLANG_EMULATOR_LOAD_SECONDS": "0.1"}
    res = subprocess.run([str(venv / "bin" / "python"), "-m", "sglang.launch_server",
                          "--model-path", MODEL, "--tp", "8", "--mem-fraction-static", "0.05"],
                         env=env, capture_output=True, text=True, cwd=str(tmp_path),
                         timeout=60, check=False)
    assert res.returncode == 1, res.stderr
    assert fail_line(res.stderr, "RuntimeError") == (
        "RuntimeError: " + NOT_ENOUGH + " Current value: self.server_args.mem_fraction_static=0.05")
    assert SRC not in res.stderr and os.path.join(ROOT, "plugins") not in res.stderr
