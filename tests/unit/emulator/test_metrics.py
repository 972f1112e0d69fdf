"""The emulator's /metrics: SGLang's metric names, help texts, labels and plausible values."""

import re
import threading
import time

import pytest

from test_emulator import emus  # noqa: F401  pylint: disable=unused-import

from ansible_collections.gpufleet.sglang.plugins.module_utils.status._status import (
    parse_exposition,
    scheduler_metrics,
)

GAUGES = {
    "sglang:num_running_reqs": "The number of running requests.",
    "sglang:num_queue_reqs": "The number of requests in the waiting queue.",
    "sglang:gen_throughput": "The generation throughput (token/s).",
    "sglang:token_usage": "The token usage.",
}
COUNTERS = {
    "sglang:prompt_tokens_total": "Number of prefill tokens processed.",
    "sglang:generation_tokens_total": "Number of generation tokens processed.",
    "sglang:num_requests_total": "Number of requests processed.",
}
# TokenizerMetricsCollector's histograms (srt/metrics/collector.py); the inter-token one is
# named time_per_output_token_seconds before 0.5
TTFT = "sglang:time_to_first_token_seconds"


def itl_name(release):
    return ("sglang:time_per_output_token_seconds" if release.startswith("0.4")
            else "sglang:inter_token_latency_seconds")


def histogram_samples(name):
    return {name + "_bucket", name + "_count", name + "_sum"}


def metrics(e):
    status, body = e.get("/metrics")
    assert status == 200, (status, body)
    return body.decode()


def samples(text):
    return {name: (labels, value) for name, labels, value in parse_exposition(text)}


@pytest.mark.parametrize("release,labels", [
    ("0.4.6.post5", {"engine_type": "unified"}),
    ("0.5.4.post3", {"engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}),
    ("0.5.9", {"engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}),
    ("0.5.23", {"engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}),
])
def test_exposition_format_and_labels(emus, release, labels):  # noqa: F811
    e = emus(["--model-path", "m", "--served-model-name", "kimi", "--enable-metrics"], release,
             SGLANG_EMULATOR_LOAD_SECONDS="0.2", SGLANG_EMULATOR_WARMUP_SECONDS="0.2")
    e.wait_ready()
    text = metrics(e)
    for name, help_text in list(GAUGES.items()) + list(COUNTERS.items()):
        kind = "gauge" if name in GAUGES else "counter"
        assert "# HELP %s %s\n# TYPE %s %s\n" % (name, help_text, name, kind) in text, text
    for name in (TTFT, itl_name(release)):
        assert "# TYPE %s histogram\n" % name in text, text
    found = samples(text)
    assert set(found) == (set(GAUGES) | set(COUNTERS) | histogram_samples(TTFT)
                          | histogram_samples(itl_name(release)))
    assert found[TTFT + "_count"] == ({"model_name": "kimi"}, 0.0)
    for name in GAUGES:
        assert found[name][0] == dict(labels, model_name="kimi"), name
    for name in COUNTERS:
        assert found[name][0] == {"model_name": "kimi"}, name
    # label names sorted, values printed as floats (prometheus_client's format)
    line = [ln for ln in text.splitlines() if ln.startswith("sglang:num_running_reqs{")][0]
    names = re.findall(r'(\w+)="', line)
    assert names == sorted(names) and line.endswith(" 0.0")
    assert scheduler_metrics(text) == {"running": 0, "queued": 0, "gen_throughput": 0.0}


def test_metrics_only_with_enable_metrics(emus):  # noqa: F811
    e = emus(["--model-path", "m"], "0.5.9", SGLANG_EMULATOR_LOAD_SECONDS="0.2",
             SGLANG_EMULATOR_WARMUP_SECONDS="0.2")
    e.wait_ready()
    assert e.get("/metrics")[0] == 404


def test_running_and_throughput_follow_the_load(emus):  # noqa: F811
    e = emus(["--model-path", "m", "--tp", "8", "--ep", "8", "--enable-metrics"], "0.5.9",
             SGLANG_EMULATOR_LOAD_SECONDS="0.2", SGLANG_EMULATOR_WARMUP_SECONDS="0.2",
             SGLANG_EMULATOR_TTFT_MS="10")
    e.wait_ready()
    n, tokens = 3, 200  # 3 requests at 65 tok/s each: about 3 s
    threads = [threading.Thread(target=e.json, args=(
        "/generate", {"text": "a b", "sampling_params": {"max_new_tokens": tokens}}))
        for dummy in range(n)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    busy_text = metrics(e)
    busy = scheduler_metrics(busy_text)
    # the requests in flight hold KV tokens (prompt and generated so far) of the pool
    assert 0 < samples(busy_text)["sglang:token_usage"][1] < 1
    assert busy["running"] == n and busy["queued"] == 0
    # 1.5 s of 3 x 65 tok/s over the 5 s window: about 58 tok/s, and growing
    assert 30 < busy["gen_throughput"] < 3 * 65, busy
    for t in threads:
        t.join()
    done = samples(metrics(e))
    assert done["sglang:num_running_reqs"][1] == 0
    assert done["sglang:generation_tokens_total"][1] == n * tokens
    assert done["sglang:prompt_tokens_total"][1] == n * 2
    assert done["sglang:num_requests_total"][1] == n
    assert done["sglang:token_usage"][1] == 0  # nothing in flight holds the cache
    # one first token per request (after the 10 ms TTFT), every later token's gap
    assert done["sglang:time_to_first_token_seconds_count"][1] == n
    assert 0.01 <= done["sglang:time_to_first_token_seconds_sum"][1] / n < 0.5
    assert done["sglang:inter_token_latency_seconds_count"][1] == n * (tokens - 1)
    buckets = [(float(lab["le"]), v) for name, lab, v in parse_exposition(metrics(e))
               if name == "sglang:inter_token_latency_seconds_bucket"]
    assert buckets[-1] == (float("inf"), n * (tokens - 1))
    assert [v for dummy, v in buckets] == sorted(v for dummy, v in buckets)  # cumulative
    # at 65 tok/s a gap is about 15 ms (the pacing catches up after a late wake-up, so a
    # few gaps are shorter): most gaps lie between 10 and 25 ms
    gaps = n * (tokens - 1)
    assert dict(buckets)[0.01] < 0.1 * gaps and dict(buckets)[0.025] > 0.9 * gaps, buckets
    # the window forgets: idle 5 s later the throughput is 0


def test_gen_throughput_window():
    from sglang._emulator import engine as emu_engine
    eng = emu_engine.Engine(single=2000, ceiling=2000, ttft_s=0)
    assert eng.gen_throughput() == 0
    assert len(list(eng.generate(100))) == 100  # about 50 ms
    assert eng.gen_throughput() == 100 / emu_engine.THROUGHPUT_WINDOW_S
    later = time.monotonic() + emu_engine.THROUGHPUT_WINDOW_S + 0.1
    assert eng.gen_throughput(now=later) == 0
    assert eng.generation_tokens_total == 100
