# -*- coding: utf-8 -*-
"""The benchmark filters and the bench_report module (issue 6), in-process."""

import json
import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.sglang.plugins.filter import bench as bench_filters
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_report import png_size
from ansible_collections.gpufleet.sglang.plugins.modules import bench_report

from test_bench import DATA, FIXTURES, RUNS, rebuild_bench_parser


def test_filters_are_exported():
    names = set(bench_filters.FilterModule().filters())
    assert names == {"bench_serving_argv", "aiperf_argv", "bench_parse", "bench_serving_module"}


def test_bench_serving_argv_filter_checks_the_help_text():
    with open(os.path.join(FIXTURES, "sglang-help", "bench", "bench_serving-0.5.23.txt")) as handle:
        help_text = handle.read()
    run = {"python": "/opt/sglang/0.5.23/bin/python", "release": "0.5.23",
           "base_url": "http://127.0.0.1:30000", "tokenizer": "/models/kimi", "concurrency": "16",
           "num_prompts": 64, "input_len": 1024, "output_len": 256, "output_file": "/o.jsonl",
           "seed": 42, "warmup_requests": 1, "extra_args": {}, "model": ""}
    argv = bench_filters.bench_serving_argv_filter(run, help_text)
    ns = rebuild_bench_parser().parse_args(argv[3:])
    assert ns.max_concurrency == 16 and ns.model is None
    with pytest.raises(AnsibleFilterError, match="unknown keys"):
        bench_filters.bench_serving_argv_filter(dict(run, concurency=4))
    with pytest.raises(AnsibleFilterError, match="has no --nope"):
        bench_filters.bench_serving_argv_filter(dict(run, extra_args={"--nope": 1}), help_text)


def test_bench_parse_filter():
    with open(os.path.join(DATA, "aiperf-0.13.0-emulator-ep8-c4.json")) as handle:
        res = bench_filters.bench_parse(handle.read(), "aiperf", strategy="ep8", concurrency=4)
    assert res["strategy"] == "ep8" and res["concurrency"] == 4
    with pytest.raises(AnsibleFilterError, match="bench_serving result of ep8"):
        bench_filters.bench_parse("", "bench_serving", strategy="ep8")


def test_bench_report_module_writes_md_json_png_once(run_module, tmp_path):
    pytest.importorskip("matplotlib")
    dest = str(tmp_path / "reports" / "compare-x")
    args = {"runs": RUNS, "refused": {"tp4": "doctor: 4 GPUs"}, "objective": "throughput",
            "strategies": ["tp8", "pp8", "ep8", "ep4", "tp4"], "dest": dest}
    res, failed = run_module(bench_report, args)
    assert not failed and res["changed"] and res["winner"] == "ep8"
    assert res["files"] == [dest + ".md", dest + ".json", dest + ".png"]
    with open(dest + ".png", "rb") as handle:
        assert png_size(handle.read()) == (800, 500)
    with open(dest + ".json") as handle:
        assert json.load(handle)["refused"] == {"tp4": "doctor: 4 GPUs"}
    assert any("refused: doctor: 4 GPUs" in line for line in res["table"])
    again = run_module(bench_report, args)[0]
    assert not again["changed"]
    latency = run_module(bench_report, dict(args, objective="latency", _ansible_check_mode=True))[0]
    assert latency["winner"] == "ep8" and latency["changed"]  # would rewrite md/json
    with open(dest + ".md") as handle:
        assert "Winner (throughput)" in handle.read()  # check mode wrote nothing
