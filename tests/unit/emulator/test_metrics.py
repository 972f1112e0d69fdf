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
    # 0.5.9 keeps its last decode report (every 40 steps: the 3, or fewer in the last
    # steps of a request admitted first) until it has been idle for 30 s after it
    # (engine.MetricsReporter); 0.5.23 reports 0 at once (test_gauges_per_release_over_http)
    assert 0 < done["sglang:num_running_reqs"][1] <= n
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


# ---------------------------------------------------------------- when the gauges move

def _forward(kind, report):
    from sglang._emulator import engine as emu_engine
    return emu_engine.Forward(kind, [], [], 0.01, report)


@pytest.mark.parametrize("release,before", [
    ("0.4.6.post5", True), ("0.5.4.post3", True), ("0.5.9", False), ("0.5.23", False)])
def test_prefill_reports_before_or_after_its_forward(release, before):
    """0.4.6.post5 and 0.5.4.post3 report a prefill batch when it is formed, 0.5.9 and
    0.5.23 after its forward; either way with the running count of before the batch."""
    from sglang._emulator import engine as emu_engine
    from sglang._emulator.release import version_tuple
    rep = emu_engine.MetricsReporter(version_tuple(release), 40, now=0.0)
    fwd = _forward("prefill", (2, 1))
    rep.before_forward(fwd, 1.0)
    assert (rep.running, rep.queued) == ((2, 1) if before else (0, 0))
    rep.after_forward(fwd, 1.5)
    assert (rep.running, rep.queued, rep.last_log_time) == (2, 1, 1.0 if before else 1.5)


def test_decode_reports_every_decode_log_interval_steps():
    from sglang._emulator import engine as emu_engine
    rep = emu_engine.MetricsReporter((0, 5, 23), 4, now=0.0)
    seen = []
    for step in range(1, 10):
        rep.after_forward(_forward("decode", (step, 0)), float(step))
        seen.append(rep.running)
    # steps 4 and 8 report; a prefill forward does not count as a decode step
    assert seen == [0, 0, 0, 4, 4, 4, 4, 8, 8]
    rep.after_forward(_forward("prefill", (1, 0)), 10.0)
    for step in (10, 11):
        rep.after_forward(_forward("decode", (step, 0)), float(step))
    assert rep.running == 1  # decode steps 10 and 11: no report
    rep.after_forward(_forward("decode", (12, 0)), 12.0)
    assert rep.running == 12


@pytest.mark.parametrize("release,at_once", [("0.5.9", False), ("0.5.23", True)])
def test_idle_report(release, at_once):
    """Idle: 0.5.23 corrects a stale running gauge at once, 0.5.9 (and older) only 30 s
    after its last report."""
    from sglang._emulator import engine as emu_engine
    from sglang._emulator.release import version_tuple
    rep = emu_engine.MetricsReporter(version_tuple(release), 40, now=0.0)
    rep.after_forward(_forward("prefill", (3, 2)), 100.0)
    rep.on_idle(0, 0, 100.5)
    assert (rep.running, rep.queued) == ((0, 0) if at_once else (3, 2))
    if not at_once:
        assert rep.idle_wait(100.5) == pytest.approx(29.51)
        rep.on_idle(0, 0, 130.0)
        assert rep.running == 3  # not over 30 s yet
        rep.on_idle(0, 0, 130.1)
    assert (rep.running, rep.queued) == (0, 0)
    assert rep.idle_wait(131.0) is None
    # 0.5.23 too: a stale queue alone waits for the 30 s (gauge_stale compares running)
    rep.after_forward(_forward("prefill", (0, 2)), 200.0)
    rep.on_idle(0, 0, 200.1)
    assert (rep.running, rep.queued) == (0, 2)
    rep.on_idle(0, 0, 230.1)
    assert (rep.running, rep.queued) == (0, 0)


def test_plan_reports_the_decoding_requests_not_the_admitted_ones():
    from sglang._emulator import engine as emu_engine
    model = emu_engine.StepModel(40, 400, 0.05, max_running_requests=2)
    sched = emu_engine.Scheduler(model)
    for rid in range(3):
        sched.submit(emu_engine.Req(rid, 4, 3))
    first = sched.plan()
    # two admitted (the cap), one waits; nothing decoded before this batch
    assert first.kind == "prefill" and first.report == (0, 1)
    sched.apply(first)
    step = sched.plan()
    assert step.kind == "decode" and step.report == (2, 1)


def test_a_short_request_never_shows_in_the_gauges(emus):  # noqa: F811
    """Fewer decode steps than --decode-log-interval: the request runs from a prefill
    report of 0 running (the batch's own request is left out) to its end, and 0.5.23's
    idle report is 0 again: a drain reading only the gauges sees nothing to wait for."""
    e = emus(["--model-path", "m", "--enable-metrics"], "0.5.23",
             SGLANG_EMULATOR_LOAD_SECONDS="0.2", SGLANG_EMULATOR_WARMUP_SECONDS="0.2",
             SGLANG_EMULATOR_RATES='{"default": {"single": 20, "ceiling": 200}}')
    e.wait_ready()
    worker = threading.Thread(target=e.json, args=(
        "/generate", {"text": "a b", "sampling_params": {"max_new_tokens": 30}}))
    worker.start()  # 30 tokens at 20 tok/s: 1.5 s
    seen = []
    while worker.is_alive():
        m = scheduler_metrics(metrics(e))
        seen.append((m["running"], m["queued"]))
        time.sleep(0.05)
    worker.join()
    assert len(seen) > 10 and set(seen) == {(0, 0)}, seen
    # the counters move meanwhile (what the router's drain also reads)
    assert samples(metrics(e))["sglang:inter_token_latency_seconds_count"][1] == 29


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_gauges_per_release_over_http(emus, release):  # noqa: F811
    """50 tokens: the 40th decode step reports the request; after it 0.5.23 reports 0 at
    once, 0.5.9 keeps 1 (until 30 s after its last report)."""
    e = emus(["--model-path", "m", "--enable-metrics"], release,
             SGLANG_EMULATOR_LOAD_SECONDS="0.2", SGLANG_EMULATOR_WARMUP_SECONDS="0.2",
             SGLANG_EMULATOR_RATES='{"default": {"single": 50, "ceiling": 500}}')
    e.wait_ready()
    worker = threading.Thread(target=e.json, args=(
        "/generate", {"text": "a", "sampling_params": {"max_new_tokens": 50}}))
    worker.start()  # 1 s; the report at the 40th decode step (0.8 s)
    seen = set()
    while worker.is_alive():
        seen.add(scheduler_metrics(metrics(e))["running"])
        time.sleep(0.02)
    worker.join()
    assert seen == {0, 1}, seen
    time.sleep(0.1)
    after = scheduler_metrics(metrics(e))["running"]
    assert after == (0 if release == "0.5.23" else 1)


@pytest.mark.parametrize("release", ["0.5.4.post3", "0.5.9", "0.5.23"])
def test_realtime_tokens_move_at_each_forward_and_drain_a_stale_gauge(emus, release):  # noqa: F811
    """sglang:realtime_tokens_total (0.5.9 and later): named before the first forward, a
    sample per mode after it; the drain takes it as the proof that no forward runs, so a
    0.5.9 server whose gauge is still stale drains in the quiet time."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router
    e = emus(["--model-path", "m", "--served-model-name", "kimi", "--enable-metrics"], release,
             SGLANG_EMULATOR_LOAD_SECONDS="0.2", SGLANG_EMULATOR_WARMUP_SECONDS="0.2")
    e.wait_ready()
    before = metrics(e)
    assert ("sglang:realtime_tokens_total" in before) == (release != "0.5.4.post3")
    assert not [s for s in parse_exposition(before) if s[0] == "sglang:realtime_tokens_total"]
    # 60 tokens: more than 40 decode steps, so a decode report shows the request running
    e.json("/generate", {"text": "hello there", "sampling_params": {"max_new_tokens": 60}})
    after = dict((labels.get("mode"), value) for name, labels, value in parse_exposition(metrics(e))
                 if name == "sglang:realtime_tokens_total")
    if release == "0.5.4.post3":
        assert after == {}
        return
    assert after["prefill_compute"] > 0 and after["decode"] >= 59, after
    # 0.5.9 still reports the finished request as running (its idle report comes 30 s
    # later), 0.5.23 reports 0 at once
    assert scheduler_metrics(metrics(e))["running"] == (1 if release == "0.5.9" else 0)
    res = _router.drain(lambda: metrics(e), 20, 0.5, quiet=1.5)
    assert res["drained"] and res["elapsed_s"] < 5, res
