# -*- coding: utf-8 -*-
"""Benchmark results: argv builders, parsers, picker, report, chart (issue 6).

Ground truth:
* tests/fixtures/sglang-help/bench/bench_serving-0.5.23.actions.json: the argparse actions
  of the real ``sglang.benchmark.serving`` 0.5.23; a parser rebuilt from it must accept
  every argv the role builds.
* tests/unit/plugins/module_utils/data/aiperf-0.13.0-emulator-ep8-*.json: real
  ``profile_export_aiperf.json`` files of aiperf 0.13.0 runs against the SGLang emulator
  (strategy ep8: 65 tok/s per request), captured for this test.
* bench_serving JSONL lines are built from the key lists of the reference (§5.2, §5.3),
  serialized with Python's json.dumps exactly like bench_serving does (bare Infinity).
"""

import argparse
import json
import math
import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_report
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_tool
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_tool import BenchError
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import parse_help
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES as _FIXTURES


HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = _FIXTURES
DATA = os.path.join(HERE, "..", "data")
BENCH = os.path.join(FIXTURES, "sglang-help", "bench")


# ---------------------------------------------------------------- the real CLI, rebuilt

class _Refused(Exception):
    pass


class _StrictParser(argparse.ArgumentParser):
    def error(self, message):
        raise _Refused(message)


_TYPES = {"int": int, "float": float, "str": str, "_finite_positive_float": float}


def rebuild_bench_parser():
    with open(os.path.join(BENCH, "bench_serving-0.5.23.actions.json")) as handle:
        actions = json.load(handle)
    parser = _StrictParser(prog="serving.py", add_help=False)
    for action in actions:
        names = action["option_strings"]
        if names == ["-h", "--help"]:
            continue
        if action["nargs"] == 0:
            parser.add_argument(*names, dest=action["dest"], action="store_true")
            continue
        kwargs = {"dest": action["dest"], "default": action["default"]}
        if action["type"] in _TYPES:
            kwargs["type"] = _TYPES[action["type"]]
        if action["nargs"] is not None:
            kwargs["nargs"] = action["nargs"]
        if action["choices"] is not None:
            kwargs["choices"] = action["choices"]
        parser.add_argument(*names, **kwargs)
    return parser


@pytest.fixture(scope="module")
def bench_parser():
    return rebuild_bench_parser()


@pytest.fixture(scope="module")
def bench_help_flags():
    with open(os.path.join(BENCH, "bench_serving-0.5.23.txt")) as handle:
        return parse_help(handle.read())["flags"]


def test_rebuilt_parser_refuses_unknown_flags(bench_parser):
    # the check below is only worth something if the rebuilt parser can say no
    with pytest.raises(_Refused):
        bench_parser.parse_args(["--max-concurency", "4"])
    with pytest.raises(_Refused):
        bench_parser.parse_args(["--dataset-name", "randomm"])


PARAMS = [
    dict(concurrency=1, num_prompts=8, input_len=1024, output_len=256, seed=42, warmup_requests=1),
    dict(concurrency=16, num_prompts=64, input_len=128, output_len=64, seed=7, warmup_requests=0),
    dict(concurrency=256, num_prompts=1024, input_len=4096, output_len=1024, seed=1, warmup_requests=3,
         model="kimi-k2.5", ready_timeout=600),
    dict(concurrency=64, num_prompts=256, input_len=1, output_len=1, seed=0, warmup_requests=1,
         extra_args={"--flush-cache": True, "extra-request-body": {"temperature": 0}, "--tag": "ep8"}),
]


@pytest.mark.parametrize("params", PARAMS)
@pytest.mark.parametrize("checked", [False, True])
def test_bench_serving_argv_parses_with_the_real_cli(bench_parser, bench_help_flags, params, checked):
    kwargs = dict(params)
    if checked:
        kwargs["available_flags"] = bench_help_flags
    argv = _bench_tool.bench_serving_argv("/opt/sglang/0.5.23/bin/python", "0.5.23",
                                          "http://127.0.0.1:30000/", "/models/kimi-k2.5",
                                          output_file="/var/tmp/b/x.jsonl", **kwargs)
    assert argv[:3] == ["/opt/sglang/0.5.23/bin/python", "-m", "sglang.benchmark.serving"]
    ns = bench_parser.parse_args(argv[3:])
    assert ns.backend == "sglang"
    assert ns.base_url == "http://127.0.0.1:30000"
    assert ns.dataset_name == "random"
    assert ns.tokenizer == "/models/kimi-k2.5"
    assert ns.random_range_ratio == 1.0
    assert ns.random_input_len == params["input_len"]
    assert ns.random_output_len == params["output_len"]
    assert ns.max_concurrency == params["concurrency"]
    assert ns.num_prompts == params["num_prompts"]
    assert ns.output_file == "/var/tmp/b/x.jsonl"
    assert ns.seed == params["seed"]
    assert ns.warmup_requests == params["warmup_requests"]
    assert ns.disable_tqdm is True
    assert ns.model == params.get("model")
    if "extra_args" in params:
        assert ns.flush_cache is True and ns.tag == "ep8"
        assert json.loads(ns.extra_request_body) == {"temperature": 0}


def test_bench_serving_argv_drops_optional_flags_an_older_release_lacks(bench_parser, bench_help_flags):
    older = dict((k, v) for k, v in bench_help_flags.items()
                 if k not in ("--warmup-requests", "--ready-check-timeout-sec"))
    argv = _bench_tool.bench_serving_argv("py", "0.4.6.post5", "http://h:1", "/m", 4, 16, 8, 8, "/o",
                                          ready_timeout=60, available_flags=older)
    assert argv[2] == "sglang.bench_serving"
    assert "--warmup-requests" not in argv and "--ready-check-timeout-sec" not in argv
    assert "--max-concurrency" in argv
    bench_parser.parse_args(argv[3:])


def test_bench_serving_argv_refuses_a_required_flag_the_release_lacks(bench_help_flags):
    older = dict((k, v) for k, v in bench_help_flags.items() if k != "--random-range-ratio")
    with pytest.raises(BenchError, match="--random-range-ratio"):
        _bench_tool.bench_serving_argv("py", "0.5.9", "http://h:1", "/m", 4, 16, 8, 8, "/o",
                                       available_flags=older)


@pytest.mark.parametrize("bad", [dict(concurrency=0), dict(num_prompts=-1), dict(output_len="x")])
def test_bench_serving_argv_refuses_bad_numbers(bad):
    kwargs = dict(concurrency=1, num_prompts=1, input_len=1, output_len=1)
    kwargs.update(bad)
    with pytest.raises(BenchError):
        _bench_tool.bench_serving_argv("py", "0.5.23", "http://h:1", "/m", output_file="/o", **kwargs)


@pytest.mark.parametrize("release,module", [
    ("0.4.6.post5", "sglang.bench_serving"),
    ("0.5.4.post3", "sglang.bench_serving"),
    ("0.5.9", "sglang.bench_serving"),
    ("0.5.23", "sglang.benchmark.serving"),
    ("0.5.23.post1", "sglang.benchmark.serving"),
    ("0.6.0", "sglang.benchmark.serving"),
])
def test_bench_serving_module_by_release(release, module):
    assert _bench_tool.bench_serving_module(release) == module


@pytest.mark.parametrize("release", ["latest", "", None])
def test_bench_serving_module_refuses_unreadable_release(release):
    with pytest.raises(BenchError, match="cannot read an SGLang version from"):
        _bench_tool.bench_serving_module(release)


def test_aiperf_argv():
    argv = _bench_tool.aiperf_argv("/v/bin/aiperf", "http://h:30000/", "kimi", "/tok", 16, 64, 128, 64,
                                   "/r/a", seed=3, warmup_requests=2, workers_max=4)
    assert argv[:2] == ["/v/bin/aiperf", "profile"]
    pairs = dict((argv[i], argv[i + 1]) for i in range(2, len(argv) - 1) if argv[i].startswith("--"))
    assert pairs["--url"] == "http://h:30000"
    assert pairs["--concurrency"] == "16" and pairs["--request-count"] == "64"
    assert pairs["--isl"] == "128" and pairs["--osl"] == "64"
    assert pairs["--isl-stddev"] == "0" and pairs["--osl-stddev"] == "0"
    assert pairs["--warmup-request-count"] == "2" and pairs["--workers-max"] == "4"
    assert pairs["--extra-inputs"] == "ignore_eos:true"
    for flag in ("--streaming", "--use-server-token-count", "--use-legacy-max-tokens"):
        assert flag in argv
    chat = _bench_tool.aiperf_argv("a", "u", "m", "t", 1, 1, 1, 1, "d", endpoint_type="chat", warmup_requests=0)
    assert "--use-legacy-max-tokens" not in chat and "--warmup-request-count" not in chat


# ------------------------------------------------------------------ bench_serving JSONL

KEYS_0_5_23 = (
    "tag backend dataset_name request_rate max_concurrency sharegpt_output_len random_input_len "
    "random_output_len random_range_ratio server_info duration completed total_input_tokens "
    "total_input_text_tokens total_input_vision_tokens total_output_tokens "
    "total_output_tokens_retokenized request_throughput input_throughput output_throughput "
    "total_throughput mean_e2e_latency_ms median_e2e_latency_ms std_e2e_latency_ms "
    "p90_e2e_latency_ms p95_e2e_latency_ms p99_e2e_latency_ms mean_ttft_ms median_ttft_ms "
    "std_ttft_ms p90_ttft_ms p95_ttft_ms p99_ttft_ms mean_tpot_ms median_tpot_ms std_tpot_ms "
    "p90_tpot_ms p95_tpot_ms p99_tpot_ms mean_itl_ms median_itl_ms std_itl_ms p90_itl_ms "
    "p95_itl_ms p99_itl_ms concurrency accept_length max_output_tokens_per_s "
    "max_concurrent_requests"
).split()
# 0.4.6.post5: no tag, server_info, total_input_text/vision_tokens, total_throughput; only
# p99 for e2e / ttft / tpot, p95 + p99 for itl; no 0.5.9 additions.
KEYS_0_4_6 = [k for k in KEYS_0_5_23 if k not in (
    "tag", "server_info", "total_input_text_tokens", "total_input_vision_tokens",
    "total_throughput", "p90_e2e_latency_ms", "p95_e2e_latency_ms", "p90_ttft_ms",
    "p95_ttft_ms", "p90_tpot_ms", "p95_tpot_ms", "p90_itl_ms", "max_output_tokens_per_s",
    "max_concurrent_requests")]


def bench_line(keys, **values):
    """One JSONL line as bench_serving writes it: json.dumps, so inf -> bare Infinity."""
    base = dict((k, 1.5) for k in keys)
    base.update(backend="sglang", dataset_name="random", request_rate=float("inf"),
                max_concurrency=16, random_input_len=1024, random_output_len=256,
                random_range_ratio=1.0, completed=64, duration=12.5, output_throughput=1310.7,
                request_throughput=5.12, mean_ttft_ms=120.0, median_ttft_ms=110.0,
                p99_ttft_ms=300.0, mean_itl_ms=12.0, mean_tpot_ms=12.5, accept_length=None)
    if "server_info" in keys:
        base["server_info"] = {"tp_size": 8, "ep_size": 8}
    base.update(values)
    return json.dumps(dict((k, base[k]) for k in keys if k in base) if keys is not None else base)


def test_bench_line_really_has_bare_infinity():
    line = bench_line(KEYS_0_5_23)
    assert '"request_rate": Infinity' in line

    def strict(name):
        raise ValueError(name)

    with pytest.raises(ValueError):
        json.loads(line, parse_constant=strict)


@pytest.mark.parametrize("keys", [KEYS_0_5_23, KEYS_0_4_6], ids=["0.5.23", "0.4.6.post5"])
def test_parse_bench_serving_per_release(keys):
    res = _bench_tool.parse_bench_serving(bench_line(keys) + "\n", strategy="ep8")
    assert set(res) == set(_bench_tool.RESULT_FIELDS)
    assert res["tool"] == "bench_serving" and res["strategy"] == "ep8"
    assert res["concurrency"] == 16 and res["num_prompts"] == 64 and res["completed"] == 64
    assert res["input_len"] == 1024 and res["output_len"] == 256
    assert res["output_tok_s"] == pytest.approx(1310.7)
    assert res["request_tok_s"] == pytest.approx(1000.0 / 12.5)
    assert res["mean_ttft_ms"] == 120.0 and res["median_ttft_ms"] == 110.0 and res["p99_ttft_ms"] == 300.0
    assert res["mean_itl_ms"] == 12.0 and res["mean_tpot_ms"] == 12.5 and res["duration_s"] == 12.5


def test_parse_bench_serving_reads_the_last_appended_run():
    text = "\n".join([
        bench_line(KEYS_0_5_23, output_throughput=100.0, max_concurrency=1),
        bench_line(KEYS_0_5_23, output_throughput=200.0, max_concurrency=4),
        bench_line(KEYS_0_5_23, output_throughput=300.0, max_concurrency=16, mean_ttft_ms=float("nan")),
    ]) + "\n\n"
    res = _bench_tool.parse_bench_serving(text)
    assert res["output_tok_s"] == 300.0 and res["concurrency"] == 16
    assert res["mean_ttft_ms"] is None  # NaN -> None
    # parameters given by the caller win over the file
    assert _bench_tool.parse_bench_serving(text, concurrency=32, num_prompts=99)["concurrency"] == 32


def test_parse_bench_serving_errors():
    with pytest.raises(BenchError, match="empty"):
        _bench_tool.parse_bench_serving("\n \n")
    with pytest.raises(BenchError, match="line 2"):
        _bench_tool.parse_bench_serving(bench_line(KEYS_0_5_23) + "\n{\"truncated\": ")
    broken = json.loads(bench_line(KEYS_0_5_23))
    del broken["output_throughput"]
    with pytest.raises(BenchError, match="output_throughput"):
        _bench_tool.parse_bench_serving(json.dumps(broken))
    with pytest.raises(BenchError):
        _bench_tool.parse_bench_serving("[1, 2]")


# ----------------------------------------------------------------------------- aiperf

def load_aiperf(name):
    with open(os.path.join(DATA, name)) as handle:
        return handle.read()


@pytest.mark.parametrize("name,conc,requests", [
    ("aiperf-0.13.0-emulator-ep8-c1.json", 1, 4),
    ("aiperf-0.13.0-emulator-ep8-c4.json", 4, 8),
])
def test_parse_aiperf_real_export(name, conc, requests):
    text = load_aiperf(name)
    raw = json.loads(text)
    res = _bench_tool.parse_aiperf(text, strategy="ep8")
    assert set(res) == set(_bench_tool.RESULT_FIELDS)
    assert res["tool"] == "aiperf"
    assert res["concurrency"] == conc and res["num_prompts"] == requests
    assert res["completed"] == requests
    assert res["input_len"] == 32 and res["output_len"] == 64
    # aggregate output tok/s is the output tokens over the benchmark's duration
    assert res["output_tok_s"] == pytest.approx(
        raw["total_output_tokens"]["avg"] / raw["benchmark_duration"]["avg"], rel=0.02)
    assert res["duration_s"] == pytest.approx(raw["benchmark_duration"]["avg"])
    # the emulator paces ep8 at 65 tok/s per request (1531 tok/s ceiling: not reached)
    assert res["request_tok_s"] == pytest.approx(65.0, rel=0.05)
    assert res["mean_tpot_ms"] == pytest.approx(1000.0 / 65.0, rel=0.05)
    assert res["mean_itl_ms"] == pytest.approx(raw["inter_chunk_latency"]["avg"])
    assert res["median_ttft_ms"] == pytest.approx(raw["time_to_first_token"]["p50"])
    assert 0 < res["mean_ttft_ms"] <= res["p99_ttft_ms"]
    assert res["request_throughput"] == pytest.approx(res["completed"] / res["duration_s"], rel=0.05)


def test_parse_aiperf_records_layout_and_errors():
    raw = json.loads(load_aiperf("aiperf-0.13.0-emulator-ep8-c4.json"))
    config = raw.pop("input_config")
    wrapped = {"records": raw, "input_config": config}
    assert _bench_tool.parse_aiperf(wrapped) == _bench_tool.parse_aiperf(load_aiperf("aiperf-0.13.0-emulator-ep8-c4.json"))
    with pytest.raises(BenchError, match="not JSON"):
        _bench_tool.parse_aiperf("{")
    with pytest.raises(BenchError, match="no throughput"):
        _bench_tool.parse_aiperf({"error_summary": [{"code": 500}]})
    with pytest.raises(BenchError, match="unknown benchmark tool"):
        _bench_tool.parse_result("{}", "locust")


# ------------------------------------------------------------------- picker and report

def run(strategy, conc, tok, single=None, ttft=100.0, itl=10.0):
    res = _bench_tool.empty_result("aiperf", strategy, conc)
    res.update(output_tok_s=tok, request_tok_s=single, mean_ttft_ms=ttft, mean_itl_ms=itl,
               num_prompts=conc * 4)
    return res


def sweep(strategy, single, ceiling, ttft=100.0, concs=(1, 16, 64)):
    return [run(strategy, c, min(single * c, ceiling), single if c == 1 else single * 0.9, ttft)
            for c in concs]


RUNS = sweep("tp8", 26, 700) + sweep("pp8", 30, 900) + sweep("ep8", 65, 1531) + sweep("ep4", 45, 1150)


def test_pick_throughput_and_latency():
    rep = _bench_report.summarize(RUNS, objective="throughput")
    assert rep["winner"] == "ep8"
    rows = dict((r["strategy"], r) for r in rep["strategies"])
    assert rows["ep8"]["peak_tok_s"] == 1531 and rows["ep8"]["peak_concurrency"] == 64
    assert rows["tp8"]["single_tok_s"] == 26
    assert rep["concurrencies"] == [1, 16, 64]
    # latency: the fastest single request wins
    runs = sweep("a", 80, 1000) + sweep("b", 60, 3000)
    assert _bench_report.summarize(runs, objective="throughput")["winner"] == "b"
    assert _bench_report.summarize(runs, objective="latency")["winner"] == "a"


def test_pick_tie_breaks():
    # latency tie on tok/s (within 1 %): the lower TTFT wins
    runs = sweep("slow-ttft", 50.0, 900, ttft=300.0) + sweep("fast-ttft", 50.2, 800, ttft=80.0)
    assert _bench_report.summarize(runs, objective="latency")["winner"] == "fast-ttft"
    assert _bench_report.summarize(runs, objective="latency", tie=0.0)["winner"] == "fast-ttft"
    runs = sweep("x", 50.0, 900, ttft=80.0) + sweep("y", 50.2, 800, ttft=300.0)
    assert _bench_report.summarize(runs, objective="latency", tie=0.0)["winner"] == "y"
    # throughput tie on the peak: the faster single request wins
    runs = sweep("p", 40, 1000) + sweep("q", 60, 1004)
    assert _bench_report.summarize(runs, objective="throughput")["winner"] == "q"
    with pytest.raises(BenchError):
        _bench_report.summarize(runs, objective="cost")


def test_refused_strategies_never_win_and_are_listed():
    refused = {"tp8": "planner: does not fit 8 x 97887 MiB | KV margin -3 GiB"}
    rep = _bench_report.summarize(sweep("pp8", 30, 900) + sweep("tp8", 99, 9999), ["tp8", "pp8", "ep4"],
                                  refused, "throughput")
    assert rep["winner"] == "pp8"
    assert [r["strategy"] for r in rep["strategies"]] == ["tp8", "pp8", "ep4"]
    assert rep["refused"] == {"tp8": refused["tp8"], "ep4": "no benchmark result"}
    md = _bench_report.render_markdown(rep)
    assert "- tp8: refused: planner: does not fit" in md
    assert "| tp8 | refused: planner: does not fit 8 x 97887 MiB \\| KV margin -3 GiB |" in md
    assert _bench_report.summarize([], ["a"], {"a": "doctor"})["winner"] is None


def test_markdown_table():
    rep = _bench_report.summarize(RUNS, ["tp8", "pp8", "ep8", "ep4"], {}, "throughput")
    md = _bench_report.render_markdown(rep, title="compare")
    lines = md.splitlines()
    assert lines[0] == "# compare"
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    assert header == ["strategy", "single-request tok/s", "TTFT ms", "ITL ms", "c=1 tok/s",
                      "c=16 tok/s", "c=64 tok/s", "peak tok/s"]
    rows = dict((cells[0], cells) for cells in (
        [c.strip() for c in line.strip("|").split("|")] for line in lines[4:8]))
    assert rows["**ep8**"][1] == "65.0"
    assert rows["**ep8**"][-1] == "1531.0 (c=64)"
    assert rows["tp8"][5] == "416.0"  # 26 x 16
    assert "Winner (throughput): **ep8**, peak 1531.0 tok/s at concurrency 64." in md


def test_json_report_is_strict():
    runs = RUNS + [run("tp8", 256, float("inf"))]
    text = _bench_report.render_json(_bench_report.summarize(runs))
    assert "Infinity" not in text and "NaN" not in text
    data = json.loads(text)
    assert data["winner"] == "ep8"
    assert not any(isinstance(v, float) and not math.isfinite(v) for r in data["runs"] for v in r.values())


# ------------------------------------------------------------------------------ chart

def test_chart_is_a_real_png():
    pytest.importorskip("matplotlib")
    from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_chart import render_png
    rep = _bench_report.summarize(RUNS, ["tp8", "pp8", "ep8", "ep4", "tp4"], {"tp4": "doctor: 4 GPUs"})
    data = render_png(rep, width_in=8, height_in=5, dpi=100)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    assert _bench_report.png_size(data) == (800, 500)
    assert data.endswith(b"IEND\xaeB`\x82")
    assert len(data) > 10000  # lines, legend and labels, not an empty canvas


def test_png_size_refuses_other_data():
    with pytest.raises(BenchError):
        _bench_report.png_size(b"GIF89a" + b"\x00" * 40)
    with pytest.raises(BenchError):
        _bench_report.png_size(b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIDAT" + b"\x00" * 30)
