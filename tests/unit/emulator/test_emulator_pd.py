"""Prefill/decode disaggregation in the emulator (``sglang._emulator.pd``).

Two parts:

* the model (no server): a co-located server against a 1P1D pair on the emulator's own
  scheduler and a link, scored by the tune's own goodput (``tune/metrics.py``): PD wins
  where prefill interference dominates and loses once the link is slow, from the two
  mechanisms (decode stalls during a co-located prefill; KV bytes / link bandwidth), not
  from a setting; then N prefill x M decode servers behind one router (``simulate_pd``):
  its routing, its links (one per server and direction), and which layout wins;
* the HTTP servers: a prefill and a decode emulator talking over their bootstrap server and
  a real socket, with the release's timeouts, error texts, refusals and metrics.
"""

# the emus fixture, as in test_emulator.py
# pylint: disable=redefined-outer-name
import functools
import json
import random
import threading
import time

import pytest

from test_emulator import MODEL, emus, run_cli  # noqa: F401  pylint: disable=unused-import
from sglang._emulator import bench
from sglang._emulator import pd as emu_pd
from sglang._emulator import server_args as emu_sa

from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_tool
from ansible_collections.gpufleet.sglang.plugins.module_utils.status._status import parse_exposition
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as tune_metrics
from ansible_collections.gpufleet.sglang.tests.ports import free_port

EP8 = ["--model-path", MODEL, "--tp-size", "8", "--ep-size", "8"]
PREFILL = EP8 + ["--disaggregation-mode", "prefill"]
DECODE = EP8 + ["--disaggregation-mode", "decode"]
FAST = 50e9     # bytes/s: 400 Gbit/s, an RDMA NIC
SLOW = 1.25e9   # bytes/s: 10 Gbit/s Ethernet
CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64)
SLO = {"ttft_p99_ms": 10000.0, "tpot_p99_ms": 25.0}


# ---------------------------------------------------------------- the model

def _sweep(pair, input_len, output_len, link=None):
    """The tune's points of one candidate over the concurrencies: a co-located ep8 server
    (8 GPUs) or a 1P1D pair of ep8 servers (16 GPUs) behind a link of ``link`` bytes/s."""
    runs = []
    gpus = 8
    for conc in CONCURRENCIES:
        num = max(4 * conc, 16)
        if pair:
            line = emu_pd.measure_pair("0.5.23", PREFILL, DECODE, link, conc, num, input_len,
                                       output_len)
            gpus = line["gpus"]
        else:
            line = bench.run(bench.server_model("0.5.23", EP8)[0], conc, num, input_len, output_len)
        runs.append(_bench_tool.parse_bench_serving(line, concurrency=conc, num_prompts=num))
    return tune_metrics.trial(runs, gpus, SLO)


def _by_conc(points):
    return {p["concurrency"]: p for p in points}


def test_the_link_turns_the_winner_where_prefill_interference_dominates():
    """Long prompts (8,192 in, 256 out): a co-located server stalls its decoders for every
    prompt it prefills, so its TPOT p99 grows with the concurrency and it meets the TPOT
    target only up to 4 clients; the pair's decode server never prefills (TPOT one decode
    step at every concurrency) and, on a fast link, the tune's goodput per GPU picks it. On
    a 10 Gbit/s link each prompt's 4.6 GB of KV take 3.7 s: its TTFT misses the target from
    4 clients on, its throughput is the link's, and the co-located server wins."""
    co = _sweep(False, 8192, 256)
    fast = _sweep(True, 8192, 256, FAST)
    slow = _sweep(True, 8192, 256, SLOW)
    co_c, fast_c, slow_c = _by_conc(co), _by_conc(fast), _by_conc(slow)
    step_ms = 1000.0 / 65.0  # one decode step of ep8 (the layout's single-request rate)
    # mechanism 1: prefill interference in the co-located server only
    assert co_c[1]["tpot_p99_ms"] == pytest.approx(step_ms, rel=0.01)
    assert co_c[16]["tpot_p99_ms"] > 2.5 * co_c[1]["tpot_p99_ms"]
    for conc in CONCURRENCIES:
        assert fast_c[conc]["tpot_p99_ms"] == pytest.approx(step_ms, rel=0.01), conc
        assert slow_c[conc]["tpot_p99_ms"] == pytest.approx(step_ms, rel=0.01), conc
    # mechanism 2: the transfer, prompt x wire bytes / bandwidth, is in the TTFT
    wire = emu_pd.wire_bytes_per_token(
        bench.server_model("0.5.23", DECODE)[1]["memory"], {"tp_size": 8})
    assert wire == 70272 * 8
    transfer_gap = 8192 * wire * (1 / SLOW - 1 / FAST) * 1000.0
    assert slow_c[1]["ttft_p99_ms"] - fast_c[1]["ttft_p99_ms"] == pytest.approx(transfer_gap, rel=0.02)
    assert slow_c[64]["output_tok_s_per_gpu"] < 0.2 * fast_c[64]["output_tok_s_per_gpu"]
    # the winner, by the tune's own score (goodput per GPU under the SLO)
    co_score, fast_score, slow_score = (tune_metrics.score(x) for x in (co, fast, slow))
    assert fast_score > co_score > slow_score
    assert tune_metrics.goodput(fast)[1]["concurrency"] > tune_metrics.goodput(co)[1]["concurrency"]


def test_without_interference_the_co_located_server_wins_even_on_a_fast_link():
    """Short prompts (512 in, 512 out): the prefills are short, nothing to win back, and a
    pair spends 16 GPUs where the co-located server spends 8."""
    co = _sweep(False, 512, 512)
    fast = _sweep(True, 512, 512, FAST)
    assert tune_metrics.score(co) > tune_metrics.score(fast)


def test_the_decode_kv_pool_gates_the_prefill():
    """A request is prefilled only once the decode server holds KV for it (its prealloc
    queue): a decode server capped at 4 running requests keeps the pair's batch at 4."""
    p_model = bench.server_model("0.5.23", PREFILL)[0]
    d_model = bench.server_model("0.5.23", DECODE + ["--max-running-requests", "4"])[0]
    line = emu_pd.simulate_pair(p_model, d_model, 70272 * 8, FAST, 16, 32, 1024, 64)
    assert line["completed"] == 32 and line["emulator_peak_running"] == 4
    free = emu_pd.simulate_pair(p_model, bench.server_model("0.5.23", DECODE)[0], 70272 * 8,
                                FAST, 16, 32, 1024, 64)
    assert free["emulator_peak_running"] > 4
    assert line["mean_ttft_ms"] > 2 * free["mean_ttft_ms"]


def test_wire_bytes_per_token_per_attention_rank():
    mem = {"kv_bytes_per_token": [1000, 1000]}
    assert emu_pd.wire_bytes_per_token(mem, {"tp_size": 8}) == 16000
    # DP attention: a request's KV lives on one attention-TP group
    assert emu_pd.wire_bytes_per_token(mem, {"tp_size": 8, "enable_dp_attention": True,
                                             "attn_dp_size": 8}) == 2000
    assert emu_pd.wire_bytes_per_token(None, {"tp_size": 1}) == emu_pd.FALLBACK_KV_BYTES_PER_TOKEN


# ---------------------------------------------------------------- N prefill x M decode

PD_CONCURRENCIES = (4, 16)  # the co-located server's best point (4) and the PD load (16)
XFER_S = 8192 * 70272 * 8 / SLOW  # one 8,192-token prompt's KV on 10 Gbit/s: 3.68 s


_SERVER_MODEL = bench.server_model


@functools.lru_cache(maxsize=None)
def _server_model(release, argv):
    return _SERVER_MODEL(release, list(argv))


@pytest.fixture
def models_once(monkeypatch):
    """``bench.server_model`` once per argv (``measure_pd`` builds both roles' models at
    each call; a model is read, never changed, by the schedulers)."""

    def server_model(release, argv, **kwargs):
        if kwargs:
            return _SERVER_MODEL(release, argv, **kwargs)
        return _server_model(release, tuple(argv))

    monkeypatch.setattr(bench, "server_model", server_model)


@functools.lru_cache(maxsize=None)
def _pd_run(layout, input_len, output_len, conc, link=None):
    """``(bench line, parsed result, GPUs)`` of one load, 4 x ``conc`` requests: ``layout``
    "co" (a co-located ep8 server) or ``(n_prefill, n_decode)`` ep8 servers (cached: the
    tests below share runs; nobody changes what it returns)."""
    num = 4 * conc
    if layout == "co":
        line = bench.run(bench.server_model("0.5.23", EP8)[0], conc, num, input_len, output_len)
        gpus = 8
    else:
        line = emu_pd.measure_pd("0.5.23", PREFILL, DECODE, link, conc, num, input_len,
                                 output_len, n_prefill=layout[0], n_decode=layout[1])
        gpus = line["gpus"]
    return line, _bench_tool.parse_bench_serving(line, concurrency=conc, num_prompts=num), gpus


def _pd_trial(layout, input_len, output_len, link=None, concs=PD_CONCURRENCIES):
    runs = [_pd_run(layout, input_len, output_len, conc, link) for conc in concs]
    return tune_metrics.trial([r[1] for r in runs], runs[0][2], SLO)


def _tok_s(layout, link, conc=16, input_len=8192, output_len=256):
    return _pd_run(layout, input_len, output_len, conc, link)[0]["output_throughput"]


@pytest.mark.usefixtures("models_once")
def test_simulate_pair_is_the_1x1_case_and_gpus_add_up():
    p_model = bench.server_model("0.5.23", PREFILL)[0]
    d_model = bench.server_model("0.5.23", DECODE)[0]
    pair = emu_pd.simulate_pair(p_model, d_model, 70272 * 8, SLOW, 4, 8, 2048, 32)
    assert pair == emu_pd.simulate_pd([p_model], [d_model], 70272 * 8, SLOW, 4, 8, 2048, 32)
    assert pair["emulator_pd_layout"] == "1P1D"
    assert emu_pd.measure_pair("0.5.23", PREFILL, DECODE, FAST, 4, 8, 2048, 32) == \
        emu_pd.measure_pd("0.5.23", PREFILL, DECODE, FAST, 4, 8, 2048, 32)
    for layout, gpus in (((1, 1), 16), ((1, 2), 24), ((2, 1), 24), ((2, 2), 32)):
        line = _pd_run(layout, 8192, 256, 16, FAST)[0]
        assert line["gpus"] == gpus and line["emulator_pd_layout"] == "%dP%dD" % layout
        assert line["completed"] == 64
    with pytest.raises(ValueError):
        emu_pd.measure_pd("0.5.23", PREFILL, DECODE, FAST, 4, 8, 2048, 32, n_decode=0)


@pytest.mark.usefixtures("models_once")
def test_the_router_splits_prefills_round_robin_and_decodes_by_fewest_requests():
    """Round robin over the prefill servers whatever their load; the decode server holding
    the fewest requests, ties to the lowest index: 16 clients keep both decode servers
    equally busy, one client finds both empty at each arrival and always gets decode 0."""
    line = _pd_run((1, 2), 8192, 256, 16, FAST)[0]
    assert line["emulator_prefill_requests"] == [64]
    assert line["emulator_decode_requests"] == [32, 32]
    peak = line["emulator_decode_peak_running"]
    assert peak[0] == peak[1] > 0
    line = _pd_run((2, 1), 8192, 256, 16, FAST)[0]
    assert line["emulator_prefill_requests"] == [32, 32] and line["emulator_decode_requests"] == [64]
    line = _pd_run((2, 2), 8192, 256, 1, FAST)[0]
    assert line["emulator_prefill_requests"] == [2, 2]
    assert line["emulator_decode_requests"] == [4, 0]


@pytest.mark.usefixtures("models_once")
def test_long_prompts_at_16_clients_pd_wins_on_a_fast_link_and_loses_on_a_slow_one():
    """8,192 in / 256 out at 16 clients, by the tune's own score: the co-located ep8 server
    stalls its decoders for every prefill (TPOT p99 45 ms > 25 ms), 1P1D and 1P2D decode
    at one step (15.4 ms) and win on 400 Gbit/s; on 10 Gbit/s each prompt's KV takes
    3.7 s on the link, their TTFT p99 is 57 s, no point meets the SLO and they lose.

    With the co-located server's own best load in the sweep (4 clients, 20.4 tok/s per
    GPU), 1P1D still wins (24.7) but 1P2D does not (16.5): its one prefill server is the
    bottleneck, so the second decode server adds 8 GPUs and no tokens."""
    at16 = functools.partial(_pd_trial, input_len=8192, output_len=256, concs=(16,))
    co16 = at16("co")
    assert not co16[0]["meets_slo"] and co16[0]["tpot_p99_ms"] > SLO["tpot_p99_ms"]
    for layout in ((1, 1), (1, 2)):
        fast, slow = at16(layout, link=FAST), at16(layout, link=SLOW)
        assert fast[0]["meets_slo"] and fast[0]["tpot_p99_ms"] == pytest.approx(1000.0 / 65.0, rel=0.01)
        assert not slow[0]["meets_slo"] and slow[0]["ttft_p99_ms"] > SLO["ttft_p99_ms"]
        assert tune_metrics.score(fast) > tune_metrics.score(co16) > tune_metrics.score(slow), layout
    # the co-located server at its best concurrency: the second decode server does not pay
    co = _pd_trial("co", 8192, 256)
    one_one, one_two = _pd_trial((1, 1), 8192, 256, FAST), _pd_trial((1, 2), 8192, 256, FAST)
    assert tune_metrics.goodput(co)[1]["concurrency"] == 4
    assert tune_metrics.score(one_one) > tune_metrics.score(co) > tune_metrics.score(one_two)
    assert _tok_s((1, 2), FAST) == pytest.approx(_tok_s((1, 1), FAST), rel=0.01)
    # control: the second prefill server is what pays (the prefill is the bottleneck)
    two_one = _pd_trial((2, 1), 8192, 256, FAST)
    assert tune_metrics.score(two_one) > tune_metrics.score(one_one)
    for layout in ((1, 1), (1, 2), (2, 1), (2, 2)):
        assert tune_metrics.score(co) > tune_metrics.score(_pd_trial(layout, 8192, 256, SLOW)), layout


@pytest.mark.usefixtures("models_once")
def test_short_prompts_no_pd_layout_wins_on_either_link():
    """512 in / 512 out: a prefill is one short forward, nothing to win back, and every PD
    layout spends 16 to 32 GPUs where the co-located server spends 8 (co-located 120.5
    tok/s per GPU at 16 clients, the best PD layout 60.4). Control: the input alone flips
    it, 1P1D on the fast link wins with 8,192-token prompts."""
    co = tune_metrics.score(_pd_trial("co", 512, 512))
    for layout in ((1, 1), (1, 2), (2, 1), (2, 2)):
        for link in (FAST, SLOW):
            assert co > tune_metrics.score(_pd_trial(layout, 512, 512, link)), (layout, link)
    long_co = tune_metrics.score(_pd_trial("co", 8192, 256))
    assert tune_metrics.score(_pd_trial((1, 1), 8192, 256, FAST)) > long_co


@pytest.mark.usefixtures("models_once")
def test_each_server_has_its_own_link():
    """On 10 Gbit/s an 8,192-token prompt's KV holds its prefill's egress and its decode's
    ingress for 3.68 s, so the output is link-bound at (number of links that can run at
    once) x 256 tokens / 3.68 s. 1P2D: every transfer leaves by the one prefill's egress,
    so it gets no more than 1P1D (ingress half used each); 2P1D: every transfer enters by
    the one decode's ingress, no more either; 2P2D: two of each, twice 1P1D.

    Control: on 400 Gbit/s the prefill is the bottleneck instead, and the second prefill
    server (2P1D) is what pays, while on 10 Gbit/s it takes the second decode as well
    (2P2D); by the tune's score the link flips the winner between 2P1D and 2P2D."""
    bound = 256 / XFER_S
    one = _tok_s((1, 1), SLOW)
    assert one == pytest.approx(bound, rel=0.03)  # 68.2 against 69.5: the first prefill and the last decode are off the link
    line = _pd_run((1, 2), 8192, 256, 16, SLOW)[0]
    assert line["output_throughput"] == pytest.approx(one, rel=0.01)
    assert line["emulator_egress_utilization"][0] > 0.95
    assert all(0.4 < u < 0.55 for u in line["emulator_ingress_utilization"])
    line = _pd_run((2, 1), 8192, 256, 16, SLOW)[0]
    assert line["output_throughput"] == pytest.approx(one, rel=0.01)
    assert line["emulator_ingress_utilization"][0] > 0.95
    assert all(0.4 < u < 0.55 for u in line["emulator_egress_utilization"])
    line = _pd_run((2, 2), 8192, 256, 16, SLOW)[0]
    assert line["output_throughput"] == pytest.approx(2 * one, rel=0.05)
    assert all(u > 0.9 for u in line["emulator_egress_utilization"] + line["emulator_ingress_utilization"])
    # control: fast link, prefill-bound
    assert _tok_s((2, 1), FAST) > 1.5 * _tok_s((1, 1), FAST)
    assert _tok_s((1, 2), FAST) == pytest.approx(_tok_s((1, 1), FAST), rel=0.01)
    score = {(layout, link): tune_metrics.score(_pd_trial(layout, 8192, 256, link))
             for layout in ((2, 1), (2, 2)) for link in (FAST, SLOW)}
    assert score[(2, 1), FAST] > score[(2, 2), FAST]
    assert score[(2, 2), SLOW] > score[(2, 1), SLOW]


# ---------------------------------------------------------------- ServerArgs, start

def _derive(release, argv):
    from sglang._emulator import cli  # pylint: disable=import-outside-toplevel
    args = cli.parse(release, argv)
    return emu_sa.derive(release, args, 97887, (12, 0), emu_sa.model_facts(MODEL))


def test_server_args_resolution_per_release(monkeypatch, tmp_path):
    monkeypatch.setenv(emu_pd.IB_SYSFS_ENV, str(tmp_path / "none"))
    d, warnings = _derive("0.5.23", DECODE + ["--disaggregation-transfer-backend", "mooncake_tcp"])
    assert d["disaggregation_transfer_backend"] == "mooncake" and d["disable_radix_cache"]
    assert "Radix cache is disabled for decode server" in warnings
    assert "No IB devices specified for Mooncake backend, falling back to auto discovery." in warnings
    _d, warnings = _derive("0.5.9", DECODE)
    assert "KV cache is forced as chunk cache for decode server" in warnings
    d, warnings = _derive("0.5.9", PREFILL)
    assert d["disable_cuda_graph"] and ("Cuda graph is disabled for prefill server when "
                                        "piecewise cuda graph is not enabled.") in warnings
    with pytest.raises(RuntimeError, match="InfiniBand sysfs path not found: /sys/class/infiniband"):
        _derive("0.5.23", PREFILL + ["--disaggregation-ib-device", "mlx5_0"])
    (tmp_path / "ib" / "mlx5_0").mkdir(parents=True)
    monkeypatch.setenv(emu_pd.IB_SYSFS_ENV, str(tmp_path / "ib"))
    d, _w = _derive("0.5.23", PREFILL + ["--disaggregation-ib-device", "mlx5_0"])
    assert d["disaggregation_ib_device"] == "mlx5_0"
    with pytest.raises(ValueError, match=r"Invalid IB devices specified for all GPUs: \['mlx5_9'\]"):
        _derive("0.5.23", PREFILL + ["--disaggregation-ib-device", "mlx5_9"])
    with pytest.raises(AssertionError, match="does not support 'fake'"):
        _derive("0.5.23", PREFILL + ["--disaggregation-transfer-backend", "fake"])


@pytest.mark.parametrize("extra,env,rc,needle", [
    # the ServerArgs refusals (before anything starts)
    (["--disaggregation-mode", "prefill", "--disaggregation-ib-device", "mlx5_0"], {}, 1,
     "RuntimeError: InfiniBand sysfs path not found: /sys/class/infiniband. Please ensure "
     "InfiniBand drivers are installed."),
    (["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "fake"], {}, 1,
     "AssertionError: Prefill server does not support 'fake' as the transfer backend"),
    # mooncake without an RDMA device, when Mooncake is told to insist on one
    (["--disaggregation-mode", "decode"], {"MC_FORCE_HCA": "1"}, 1,
     "RuntimeError: Mooncake Transfer Engine initialization failed."),
])
def test_start_refusals(tmp_path, extra, env, rc, needle):
    env = dict(env, **{emu_pd.IB_SYSFS_ENV: str(tmp_path / "none")})
    res = run_cli(tmp_path, EP8 + extra, **env)
    assert res.returncode == rc, res.stderr.decode()
    assert needle in res.stderr.decode()


def test_mooncake_tcp_is_a_choice_of_0_5_23_only(tmp_path):
    res = run_cli(tmp_path, PREFILL + ["--disaggregation-transfer-backend", "mooncake_tcp"],
                  release="0.5.9")
    assert res.returncode == 2
    assert "invalid choice: 'mooncake_tcp'" in res.stderr.decode()


# ---------------------------------------------------------------- the HTTP servers

FAST_START = {"SGLANG_EMULATOR_CAPTURE_SECONDS": "0.1"}


def _pair(emus, backend="mooncake_tcp", **env):  # noqa: F811
    port = free_port()
    env = dict(FAST_START, **env)
    env.setdefault(emu_pd.IB_SYSFS_ENV, "/nonexistent-infiniband")
    flags = ["--enable-metrics", "--disaggregation-transfer-backend", backend]
    prefill = emus(PREFILL + flags + ["--disaggregation-bootstrap-port", str(port)], **env)
    decode = emus(DECODE + flags, **env)
    prefill.wait_ready()
    decode.wait_ready()
    return prefill, decode, port


def _both(prefill, decode, path, body):
    """What smg does: the same body to both servers at once; each answer."""
    out = {}

    def send(name, emu):
        out[name] = emu.request("POST", path, body)

    threads = [threading.Thread(target=send, args=("prefill", prefill)),
               threading.Thread(target=send, args=("decode", decode))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out["prefill"], out["decode"]


def _samples(emu):
    status, body = emu.get("/metrics")
    assert status == 200
    return {(name, labels.get("le")): (labels, value) for name, labels, value in parse_exposition(body.decode())}


def test_a_pair_serves_a_request_over_its_bootstrap_server_and_socket(emus):  # noqa: F811
    prefill, decode, port = _pair(emus)
    assert "CommonKVBootstrapServer started successfully on 127.0.0.1:%d" % port in prefill.stderr()
    assert "TcpTransport: listen on port" in prefill.stderr()
    # the bootstrap server's routes (0.5.23 CommonKVBootstrapServer)
    status, body = emu_pd._http_get("127.0.0.1:%d" % port, "/health")  # pylint: disable=protected-access
    assert (status, body) == (200, b"OK")
    status, body = emu_pd._http_get(  # pylint: disable=protected-access
        "127.0.0.1:%d" % port, "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1")
    info = json.loads(body)
    assert status == 200 and info["attn_tp_size"] == 8 and info["dp_size"] == 1
    assert emu_pd._http_get("127.0.0.1:%d" % port, "/route")[0] == 400  # pylint: disable=protected-access

    room = random.randint(0, 2 ** 63 - 1)
    body = {"text": "word " * 1000, "sampling_params": {"max_new_tokens": 16},
            "bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": room}
    (p_status, p_body), (d_status, d_body) = _both(prefill, decode, "/generate", body)
    assert p_status == 200 and json.loads(p_body)["meta_info"]["completion_tokens"] == 1
    assert d_status == 200 and json.loads(d_body)["meta_info"]["completion_tokens"] == 16
    # a streamed OpenAI request, through both
    body = {"prompt": "word " * 200, "max_tokens": 8, "stream": True,
            "bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": room + 1}
    thread = threading.Thread(target=prefill.request, args=("POST", "/v1/completions", body))
    thread.start()
    events, done = decode.stream("/v1/completions", body)
    thread.join()
    assert done and len(events) == 8
    # the transfer sizes: prompt x wire bytes per token / KV_TRANSFER_SCALE on the wire,
    # reported by the prefill as the real size
    p = _samples(prefill)
    labels, count = p[("sglang:kv_transfer_total_mb_count", None)]
    assert labels["engine_type"] == "prefill" and count == 2.0
    wire = 70272 * 8
    want = (1000 + 200) * wire / (1024.0 * 1024.0)
    assert p[("sglang:kv_transfer_total_mb_sum", None)][1] == pytest.approx(want, rel=0.001)
    assert p[("sglang:kv_transfer_latency_ms_count", None)][1] == 2.0
    assert ("sglang:num_decode_prealloc_queue_reqs", None) not in p
    d = _samples(decode)
    assert d[("sglang:num_running_reqs", None)][0]["engine_type"] == "decode"
    assert d[("sglang:kv_transfer_bootstrap_ms_count", None)][1] == 2.0
    assert d[("sglang:num_decode_transfer_queue_reqs", None)][1] == 0.0
    assert d[("sglang:num_transfer_failed_reqs_total", None)][1] == 0.0
    # a request without its room
    status, body = decode.request("POST", "/generate", {"text": "hi"})
    assert status == 400
    assert json.loads(body)["error"]["message"].startswith(
        "Invalid request: Disaggregated request received without bootstrap room id.")


def test_the_transfer_is_in_the_ttft(emus):  # noqa: F811
    """The decode's first token waits for the bytes, which cross a real socket: at scale 1
    a 400-token prompt is 225 MB on the wire, a 20-token one 11 MB; the decode's TTFT grows
    with the prefill's measured transfer time."""
    prefill, decode, port = _pair(emus, SGLANG_EMULATOR_KV_TRANSFER_SCALE="1")

    def one(room, words):
        body = {"prompt": "word " * words, "max_tokens": 2, "stream": True,
                "bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": room}
        thread = threading.Thread(target=prefill.request, args=("POST", "/v1/completions", body))
        start = time.monotonic()
        thread.start()
        events, _done = decode.stream("/v1/completions", body)
        thread.join()
        latency = _samples(prefill)[("sglang:kv_transfer_latency_ms_sum", None)][1] / 1000.0
        return events[0][0] - start, latency

    _ttft, before = one(1, 20)  # the first one also fetches the prefill's bootstrap info
    small, after_small = one(2, 20)
    large, after_large = one(3, 400)
    small_s, large_s = after_small - before, after_large - after_small
    assert large_s > 5 * small_s
    assert large - small > 0.5 * large_s
    assert large_s > 400 / 15310.0  # longer than the extra prefill (ep8: 15,310 tok/s)


def test_kv_that_never_comes_fails_as_the_release_does(emus):  # noqa: F811
    prefill, decode, port = _pair(emus, SGLANG_DISAGGREGATION_WAITING_TIMEOUT="1",
                                  SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT="1")
    body = {"text": "word " * 50, "sampling_params": {"max_new_tokens": 4},
            "bootstrap_host": "127.0.0.1", "bootstrap_port": port}
    # sent to the decode server only: its KV never comes
    start = time.monotonic()
    status, answer = decode.request("POST", "/generate", dict(body, bootstrap_room=11))
    assert status == 500 and 1.0 <= time.monotonic() - start < 5.0
    detail = json.loads(answer)["detail"]
    assert detail.startswith("Decode transfer failed for request rank=0 decode_req.req.rid='")
    assert detail.endswith("decode_req.req.bootstrap_room=11 with exception "
                           "KVTransferError(bootstrap_room=11): Request 11 timed out after 1.0s "
                           "in KVPoll.WaitingForInput")
    assert ("Some requests fail to receive KV Cache transfer done signal after bootstrapping. "
            "If a greater mean TTFT is acceptable, you can 'export "
            "SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' (10 minutes)") in decode.stderr()
    # sent to the prefill server only: the decode's indices never come
    status, answer = prefill.request("POST", "/generate", dict(body, bootstrap_room=12))
    assert status == 500
    assert json.loads(answer)["detail"].endswith(
        "req.bootstrap_room=12 with exception KVTransferError(bootstrap_room=12): Request 12 "
        "timed out after 1.0s in KVPoll.Bootstrapping")
    assert "Some requests timed out when bootstrapping" in prefill.stderr()
    # a stream ends with the abort (0.5.23 /generate: the output with finish_reason abort)
    events, done = decode.stream("/generate", dict(body, bootstrap_room=13, stream=True))
    reason = events[-1][1]["meta_info"]["finish_reason"]
    assert done and reason["type"] == "abort" and reason["status_code"] == 500
    d, p = _samples(decode), _samples(prefill)
    assert d[("sglang:num_transfer_failed_reqs_total", None)][1] == 2.0
    assert p[("sglang:num_bootstrap_failed_reqs_total", None)][1] == 1.0


def test_a_dead_prefill_is_found_by_the_heartbeat(emus):  # noqa: F811
    prefill, decode, port = _pair(emus, SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL="1",
                                  SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE="1")
    body = {"text": "word " * 50, "sampling_params": {"max_new_tokens": 4},
            "bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 21}
    answer = {}
    thread = threading.Thread(target=lambda: answer.setdefault(
        "decode", decode.request("POST", "/generate", body)))
    thread.start()
    time.sleep(0.5)
    prefill.proc.kill()
    thread.join(20)
    status, detail = answer["decode"]
    assert status == 500
    assert json.loads(detail)["detail"].endswith(
        "KVTransferError(bootstrap_room=21): Lost connection with prefill instance "
        "(bootstrap_addr: 127.0.0.1:%d)" % port)


def test_handshake_gives_up_after_the_release_s_tries(monkeypatch):
    """No bootstrap server: 15 tries a second apart (here shortened), then the abort."""
    monkeypatch.setattr(emu_pd, "ENSURE_RETRIES", 2)
    monkeypatch.setattr(emu_pd, "ENSURE_RETRY_INTERVAL_S", 0.01)
    service = emu_pd.PDService("0.5.23", {"disaggregation_mode": "decode"}, {"tp_size": 1}, None)
    assert service._ensure_prefill("127.0.0.1:%d" % free_port()) is None  # pylint: disable=protected-access


def test_metric_names_per_release():
    names = {r: [s[0] for s in emu_pd.metric_specs(r)] for r in ("0.5.4.post3", "0.5.9", "0.5.23")}
    assert "sglang:num_prefill_bootstrap_queue_reqs" in names["0.5.23"]
    assert "sglang:num_prefill_prealloc_queue_reqs" in names["0.5.9"]
    assert "sglang:kv_transfer_total_mb" not in names["0.5.4.post3"]
    kinds = {s[0]: s[1] for s in emu_pd.metric_specs("0.5.23")}
    assert kinds["sglang:kv_transfer_latency_ms"] == "histogram"
    assert {s[0]: s[1] for s in emu_pd.metric_specs("0.5.9")}["sglang:kv_transfer_latency_ms"] == "gauge"
    assert emu_pd.metric_specs("0.4.6.post5") == []
