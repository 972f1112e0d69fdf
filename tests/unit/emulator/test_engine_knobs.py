"""The emulator answers each searched knob through the mechanism the real server has
(engine.py's docstring cites SGLang's source of each), on one model for the HTTP server and
the in-process bench; each test has its control (the same load without the knob)."""

import json
import threading
import time

import pytest

from test_emulator import MODEL, emus  # noqa: F401  pylint: disable=unused-import
from sglang._emulator import bench
from sglang._emulator import engine as emu_engine

EP8 = ["--model-path", MODEL, "--tp-size", "8", "--ep-size", "8"]


def model(*extra, release="0.5.9", ttft_ms=50.0):
    return bench.server_model(release, EP8 + list(extra), ttft_ms=ttft_ms)


def test_the_kv_pool_left_by_the_memory_fraction_bounds_the_running_requests():
    per_request = 2048 + 256
    for fraction in ("0.80", "0.88"):
        mdl, info = model("--mem-fraction-static", fraction)
        kv = info["memory"]["max_total_num_tokens"]
        assert mdl.kv_tokens == kv
        line = bench.run(mdl, 128, 128, 2048, 256)
        assert line["emulator_peak_kv_tokens"] <= kv
        assert line["emulator_peak_running"] == min(kv // per_request, 128), (fraction, kv)
    small = bench.run(model("--mem-fraction-static", "0.80")[0], 64, 64, 2048, 256)
    large = bench.run(model("--mem-fraction-static", "0.88")[0], 64, 64, 2048, 256)
    # fewer requests fit: the rest queue, so the time to the first token grows
    assert small["emulator_peak_running"] < large["emulator_peak_running"] == 64
    assert small["p99_ttft_ms"] > 2 * large["p99_ttft_ms"]


def test_max_running_requests_caps_the_batch():
    capped = bench.run(model("--max-running-requests", "12")[0], 32, 64, 128, 64)
    free = bench.run(model()[0], 32, 64, 128, 64)
    assert capped["emulator_peak_running"] == 12 and free["emulator_peak_running"] == 32
    assert capped["output_throughput"] < 0.6 * free["output_throughput"]
    assert capped["mean_tpot_ms"] < free["mean_tpot_ms"]  # a smaller batch decodes faster


def test_above_cuda_graph_max_bs_a_decode_step_runs_eager():
    mdl = model("--cuda-graph-max-bs", "16")[0]
    assert mdl.graphed(16) and not mdl.graphed(17)
    assert mdl.decode_s(17) == pytest.approx(max(1 / 65.0, 17 / 1531.0) + emu_engine.EAGER_STEP_FACTOR / 65.0)
    assert mdl.decode_s(16) == pytest.approx(max(1 / 65.0, 16 / 1531.0))
    eager = bench.run(mdl, 32, 64, 64, 128)
    graphs = bench.run(model()[0], 32, 64, 64, 128)   # the release's default max bs: 512
    assert model()[0].cuda_graph_max_bs == 512
    assert eager["mean_tpot_ms"] > 1.2 * graphs["mean_tpot_ms"]
    below = bench.run(mdl, 8, 32, 64, 128)
    assert below["mean_tpot_ms"] == pytest.approx(bench.run(model()[0], 8, 32, 64, 128)["mean_tpot_ms"])
    off = model("--disable-cuda-graph")[0]
    assert not off.graphed(1)


def test_chunked_prefill_trades_ttft_against_decode_stalls():
    """With the decoders riding in the prefill forwards (mixed chunk), a forward is a decode
    stall: small chunks stall briefly but pay the fixed cost of a forward more often."""
    small = bench.run(model("--chunked-prefill-size", "512", "--enable-mixed-chunk")[0], 16, 64, 4096, 32)
    large = bench.run(model("--chunked-prefill-size", "8192", "--enable-mixed-chunk")[0], 16, 64, 4096, 32)
    assert small["mean_ttft_ms"] > large["mean_ttft_ms"]      # more forwards per prompt
    assert small["p99_itl_ms"] < large["p99_itl_ms"] / 2      # shorter stalls of the decoders
    # without mixed chunk the prefill runs first (get_next_batch_to_run): all its forwards
    # back to back, so the decoders wait for the whole prompt whatever the chunk size
    plain = bench.run(model("--chunked-prefill-size", "512")[0], 16, 64, 4096, 32)
    assert plain["p99_itl_ms"] > small["p99_itl_ms"]


def test_mixed_chunk_lets_the_decoders_ride_along():
    """Long prompts: without mixed chunk the decoders get no token while prompts are
    prefilled back to back; with it they get one per prefill forward."""
    mixed = bench.run(model("--enable-mixed-chunk")[0], 16, 64, 4096, 64)
    plain = bench.run(model()[0], 16, 64, 4096, 64)
    assert mixed["p99_itl_ms"] < plain["p99_itl_ms"] / 2
    assert mixed["mean_ttft_ms"] < plain["mean_ttft_ms"]
    assert mixed["output_throughput"] >= plain["output_throughput"]


def test_the_layout_sets_the_per_step_costs_as_before():
    """single / ceiling per layout are unchanged: one request at ``single``, a full batch at
    the ``ceiling`` (the emulator's rates table)."""
    for argv, single, ceiling in ((["--tp-size", "8"], 26.0, 700.0), (["--tp-size", "8", "--ep-size", "8"], 65.0, 1531.0)):
        mdl, _info = bench.server_model("0.5.9", ["--model-path", MODEL] + argv)
        assert mdl.rate(1) == pytest.approx(single)
        assert 64 * mdl.rate(64) == pytest.approx(ceiling)


def _closed_loop(port, concurrency, total, prompt_words, max_tokens):
    import http.client  # pylint: disable=import-outside-toplevel
    lock = threading.Lock()
    left = [total]
    records = []

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                if left[0] <= 0:
                    break
                left[0] -= 1
            body = json.dumps({"model": "m", "prompt": " ".join(["w"] * prompt_words), "stream": True,
                               "max_tokens": max_tokens})
            start = time.monotonic()
            conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            times = []
            while True:
                line = resp.readline()
                if not line:
                    break
                if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                    times.append(time.monotonic())
                if line.strip() == b"data: [DONE]":
                    resp.read()
                    break
            with lock:
                records.append((start, times))
        conn.close()

    threads = [threading.Thread(target=client) for _n in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first = min(s for s, _t in records)
    last = max(t[-1] for _s, t in records)
    tokens = sum(len(t) for _s, t in records)
    ttft = sum((t[0] - s) * 1000 for s, t in records) / len(records)
    tpot = sum((t[-1] - t[0]) * 1000 / (len(t) - 1) for _s, t in records) / len(records)
    return {"output_throughput": tokens / (last - first), "mean_ttft_ms": ttft, "mean_tpot_ms": tpot,
            "completed": len(records), "tokens": tokens}


def test_the_http_server_and_the_in_process_bench_agree(emus):  # noqa: F811
    """The same candidate, measured over HTTP (the fleet's way) and in-process."""
    argv = EP8 + ["--cuda-graph-max-bs", "4", "--chunked-prefill-size", "256"]
    server = emus(argv, "0.5.9", SGLANG_EMULATOR_TTFT_MS="20")
    server.wait_ready("/health_generate")
    conc, total, words, out = 8, 24, 512, 40
    fleet = _closed_loop(server.port, conc, total, words, out)
    mdl, _info = bench.server_model("0.5.9", argv, ttft_ms=20.0)
    local = bench.run(mdl, conc, total, words, out)
    assert fleet["completed"] == local["completed"] == total and fleet["tokens"] == total * out
    ratios = dict((k, fleet[k] / local[k]) for k in ("output_throughput", "mean_tpot_ms", "mean_ttft_ms"))
    print("fleet/in-process:", json.dumps(ratios, sort_keys=True))
    assert abs(ratios["output_throughput"] - 1) < 0.10, ratios
    assert abs(ratios["mean_tpot_ms"] - 1) < 0.10, ratios
    assert abs(ratios["mean_ttft_ms"] - 1) < 0.25, ratios


# ------------------------------------------------- each release's names (0.5.23: per phase)

def test_on_0_5_23_cuda_graph_max_bs_decode_slows_decode_above_it():
    capped = model("--cuda-graph-max-bs-decode", "8", release="0.5.23")[0]
    free = model(release="0.5.23")[0]
    assert capped.cuda_graph_max_bs == 8 and free.cuda_graph_max_bs == 512
    assert capped.graphed(8) and not capped.graphed(9) and free.graphed(9)
    above = bench.run(capped, 16, 32, 64, 128)
    above_control = bench.run(free, 16, 32, 64, 128)
    assert above["mean_tpot_ms"] > 1.2 * above_control["mean_tpot_ms"]
    assert above["output_throughput"] < above_control["output_throughput"] / 1.2
    below = bench.run(capped, 8, 32, 64, 128)
    assert below["mean_tpot_ms"] == pytest.approx(bench.run(free, 8, 32, 64, 128)["mean_tpot_ms"])
    # 0.5.9's spelling does not exist in 0.5.23 (argparse refuses it), nor 0.5.23's in 0.5.9
    with pytest.raises(bench.StartFailure, match="argparse exit 2"):
        model("--cuda-graph-max-bs", "8", release="0.5.23")
    with pytest.raises(bench.StartFailure, match="argparse exit 2"):
        model("--cuda-graph-max-bs-decode", "8", release="0.5.9")


def _winner(candidates, concurrency, release):
    results = dict((name, bench.run(model(*argv, release=release)[0], concurrency, 3 * concurrency, 64, 128))
                   for name, argv in candidates.items())
    return max(results, key=lambda name: results[name]["output_throughput"]), results


@pytest.mark.parametrize("release,flag", [("0.5.23", "--cuda-graph-max-bs-decode"),
                                          ("0.5.9", "--cuda-graph-max-bs")])
def test_the_decode_graph_limit_changes_which_candidate_wins(release, flag):
    """At 24 in flight, a batch of 24 in CUDA graphs beats a batch capped at 20; the same
    batch of 24 run eager (its graphs end at 8) loses to it."""
    for limit, expected in (("512", "batch-24"), ("8", "capped-20")):
        candidates = {"batch-24": [flag, limit], "capped-20": ["--max-running-requests", "20"]}
        winner, results = _winner(candidates, 24, release)
        assert winner == expected, (limit, dict((k, v["output_throughput"]) for k, v in results.items()))


def test_0_5_23_turns_the_decode_graph_off_under_each_of_its_names():
    control = model(release="0.5.23")[0]
    assert control.graphed(1)
    for argv in (["--cuda-graph-backend-decode", "disabled"], ["--disable-decode-cuda-graph"],
                 ["--cuda-graph-config", '{"decode": {"backend": "disabled"}}'],
                 ["--disable-cuda-graph"]):  # deprecated there, still honoured (cuda_graph_hook.py:55-57)
        assert not model(*argv, release="0.5.23")[0].graphed(1), argv
    # the prefill phase's switch leaves decode graphed
    assert model("--disable-prefill-cuda-graph", release="0.5.23")[0].graphed(1)
    # the JSON wins over the per-phase flag (explicit JSON > convenience)
    mixed = model("--cuda-graph-max-bs-decode", "64", "--cuda-graph-config", '{"decode": {"max_bs": 8}}',
                  release="0.5.23")[0]
    assert mixed.cuda_graph_max_bs == 8


@pytest.mark.parametrize("release,bs_flag", [("0.5.9", "--cuda-graph-bs"), ("0.5.23", "--cuda-graph-bs-decode")])
def test_an_explicit_capture_list_sets_the_limit_and_padding_decides_between(release, bs_flag):
    listed = model(bs_flag, "8", "16", release=release)[0]
    assert listed.cuda_graph_max_bs == 16 and listed.graphed(12) and not listed.graphed(17)
    exact = model(bs_flag, "8", "16", "--disable-cuda-graph-padding", release=release)[0]
    assert exact.graphed(8) and exact.graphed(16) and not exact.graphed(12)
    padded = bench.run(listed, 12, 24, 64, 128)
    unpadded = bench.run(exact, 12, 24, 64, 128)
    assert unpadded["mean_tpot_ms"] > 1.2 * padded["mean_tpot_ms"]


def test_the_largest_captured_size_is_the_limit_per_release():
    """0.5.9 captures the steps up to --cuda-graph-max-bs (20 -> ..., 12, 16) and its runner's
    max_bs is the largest of them; 0.5.23 appends the max itself."""
    old = model("--cuda-graph-max-bs", "20")[0]
    new = model("--cuda-graph-max-bs-decode", "20", release="0.5.23")[0]
    assert old.cuda_graph_max_bs == 16 and not old.graphed(17)
    assert new.cuda_graph_max_bs == 20 and new.graphed(20) and not new.graphed(21)


def test_0_5_23_cuts_a_default_decode_limit_to_max_running_requests():
    """memory_hook.py:182-188 (0.5.23 only): a default decode max bs above
    --max-running-requests becomes it; an explicit one stays."""
    assert model("--max-running-requests", "12", release="0.5.23")[0].cuda_graph_max_bs == 12
    assert model("--max-running-requests", "12")[0].cuda_graph_max_bs == 512
    assert model("--max-running-requests", "12", "--cuda-graph-max-bs-decode", "64",
                 release="0.5.23")[0].cuda_graph_max_bs == 64


# the engine's knobs in each release's spelling: the flag, its value, what it sets
KNOBS = {
    "0.5.9": [("--cuda-graph-max-bs", "8"), ("--cuda-graph-bs", "8", "16"), ("--disable-cuda-graph",),
              ("--disable-cuda-graph-padding",)],
    "0.5.23": [("--cuda-graph-max-bs-decode", "8"), ("--cuda-graph-bs-decode", "8", "16"),
               ("--cuda-graph-backend-decode", "disabled"), ("--disable-decode-cuda-graph",),
               ("--cuda-graph-config", '{"decode": {"max_bs": 8}}'), ("--disable-cuda-graph-padding",)],
}
COMMON = [("--max-running-requests", "12"), ("--chunked-prefill-size", "1024"), ("--enable-mixed-chunk",),
          ("--mem-fraction-static", "0.80"), ("--max-total-tokens", "100000")]


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_every_engine_knob_changes_the_model_under_the_release_s_name(release):
    control = model(release=release)[0].describe()
    for argv in KNOBS[release] + COMMON:
        if argv[0] == "--disable-cuda-graph-padding":
            base = model("--cuda-graph-max-bs" if release == "0.5.9" else "--cuda-graph-max-bs-decode",
                         "16", release=release)[0]
            changed = model(*argv, release=release)[0]
            assert (base.cuda_graph_bs, base.cuda_graph_padding) != (changed.cuda_graph_bs, changed.cuda_graph_padding)
            continue
        assert model(*argv, release=release)[0].describe() != control, argv
