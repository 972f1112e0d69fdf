"""The tune's inputs, checked at once before anything is loaded (tune/request.py), the knob
values against the release's argparse, and the outcome of a tune that measured nothing."""

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import request as _request

HOSTS = ["gpu-1", "gpu-2", "gpu-3"]
GROUPS = {"all": HOSTS, "ungrouped": [], "sglang_servers": HOSTS, "trial": ["gpu-1", "gpu-2"],
          "sglang_routers": []}
SPACE = {"strategies": ["tp8", "ep8"], "knobs": {"--cuda-graph-max-bs": [None, 32]}}


def _check(**changes):
    req = {"tune_space": SPACE}
    req.update(changes)
    return _request.check(req, HOSTS, GROUPS)


def _problems(**changes):
    with pytest.raises(_request.RequestError) as exc:
        _check(**changes)
    return exc.value.problems, str(exc.value)


def test_good_inputs_give_the_defaults_and_the_selected_hosts():
    out = _check(tune_hosts="trial", tune_load={"concurrencies": ["4", 16]}, tune_budget="8")
    assert out["hosts"] == ["gpu-1", "gpu-2"]
    assert out["load"] == {"tool": "bench_serving", "input_len": 1024, "output_len": 256,
                           "concurrencies": [4, 16], "num_prompts": 32}
    assert (out["keep"], out["budget"], out["method"]) == ("best", 8, "auto")
    assert _check()["hosts"] == HOSTS  # unset: sglang_servers


@pytest.mark.parametrize("load, expect", [
    ({"concurrencies": [0]}, "tune_load.concurrencies must be a non-empty list of positive integers, got [0]"),
    ({"concurrencies": []}, "tune_load.concurrencies must be a non-empty list of positive integers, got []"),
    ({"concurrencies": "8"}, 'tune_load.concurrencies must be a non-empty list of positive integers, got "8"'),
    ({"concurrencies": [8, 8]}, "tune_load.concurrencies lists 8 twice"),
    ({"tool": "locust"}, 'tune_load.tool must be bench_serving or aiperf, got "locust"'),
    ({"num_prompts": 0}, "tune_load.num_prompts must be a positive integer, got 0"),
    ({"input_len": "x"}, 'tune_load.input_len must be a positive integer, got "x"'),
    ({"concurrency": [4]}, 'tune_load: unknown key "concurrency"; did you mean concurrencies?'),
    ("big", 'tune_load must be a mapping'),
])
def test_a_bad_load_is_named(load, expect):
    problems, _msg = _problems(tune_load=load)
    assert any(expect in p for p in problems), problems


def test_every_problem_at_once_one_a_line():
    problems, msg = _problems(tune_space="tp8", tune_load={"concurrencies": [0]}, tune_slo={"ttft": 1},
                              keep="worst", tune_budget="abc", tune_method="random", tune_hosts="gpu-9")
    assert len(problems) == 7, problems
    assert msg.startswith("7 problems with the tune's inputs:\n- ")
    for text in ("tune_space must be a mapping", "tune_load.concurrencies", "tune_slo: unknown keys ttft",
                 'keep must be best or original, got "worst"', 'tune_budget must be a number of trials (0 for no limit), got "abc"',
                 'tune_method must be one of auto, exhaustive, coordinate, got "random"',
                 'tune_hosts "gpu-9": "gpu-9" is neither a host nor a group of the inventory'):
        assert text in msg, (text, msg)


def test_the_space_shape_and_strategy_grammar_are_checked_up_front():
    problems, _msg = _problems(tune_space={"strategies": ["tp7x"], "knobs": {"--x": 3}, "extra": 1})
    assert any("unknown keys extra" in p for p in problems)
    assert any("'tp7x'" in p and "unknown strategy" in p for p in problems)
    assert any("tune_space.knobs --x: give a list" in p for p in problems)
    problems, _msg = _problems(tune_space=None)
    assert problems[0].startswith("tune_space is not set")


@pytest.mark.parametrize("budget", [-1, "-1", True, 1.5])
def test_a_bad_budget_is_named(budget):
    problems, _msg = _problems(tune_budget=budget)
    assert [p for p in problems if p.startswith("tune_budget must be a number of trials")], problems


@pytest.mark.parametrize("pattern, selected", [
    ("gpu-1", ["gpu-1"]), ("gpu-1:gpu-3", ["gpu-1", "gpu-3"]), ("gpu-3,gpu-1", ["gpu-3", "gpu-1"]),
    ("sglang_servers:!gpu-2", ["gpu-1", "gpu-3"]), ("sglang_servers:&trial", ["gpu-1", "gpu-2"]),
    ("gpu-*", HOSTS), ("!trial", ["gpu-3"]), ("~gpu-[12]", ["gpu-1", "gpu-2"]),
    ("sglang_servers[0]", ["gpu-1"]), ("sglang_servers[1:2]", ["gpu-2", "gpu-3"]),
    ("all", HOSTS),
])
def test_host_patterns(pattern, selected):
    assert _request.select_hosts(pattern, HOSTS, GROUPS) == (selected, [])


@pytest.mark.parametrize("pattern, expect", [
    ("gpu-9", '"gpu-9" is neither a host nor a group of the inventory'),
    ("trial:!gpux", '"gpux" is neither a host nor a group'),
    ("tpu-*", '"tpu-*" is neither a host nor a group'),
    ("trial:!trial", 'tune_hosts "trial:!trial" selects no host of the inventory'),
    ("sglang_routers", 'tune_hosts "sglang_routers" selects no host of the inventory'),
    ("", "tune_hosts must be a host pattern"),
])
def test_a_pattern_that_selects_nothing_is_refused(pattern, expect):
    selected, problems = _request.select_hosts(pattern, HOSTS, GROUPS)
    assert selected == [] and len(problems) == 1 and expect in problems[0], problems


def test_value_probes_repeat_the_flag_for_every_value():
    probes = _request.value_probes({"strategies": ["tp8"], "knobs": {
        "max_running_requests": [None, "abc", 8], "--enable-mixed-chunk": [False, True],
        "--chunked-prefill-size": [None]}, "fixed": {"--enable-metrics": True, "--mem-fraction-static": 0.8}})
    assert probes == [
        {"where": "tune_space.knobs", "flag": "max_running_requests", "values": [None, "abc", 8],
         "argv": ["--max-running-requests", "abc", "--max-running-requests", "8"]},
        {"where": "tune_space.knobs", "flag": "--enable-mixed-chunk", "values": [False, True],
         "argv": ["--enable-mixed-chunk"]},
        {"where": "tune_space.fixed", "flag": "--enable-metrics, --mem-fraction-static",
         "values": [{"--enable-metrics": True, "--mem-fraction-static": 0.8}],
         "argv": ["--enable-metrics", "--mem-fraction-static", "0.8"]},
    ]


def test_argparse_refusals_name_the_knob_the_value_and_the_release():
    probe = {"where": "tune_space.knobs", "flag": "--max-running-requests", "values": [None, "abc"],
             "argv": ["--max-running-requests", "abc"]}
    ok = {"item": dict(probe, flag="--cuda-graph-max-bs"), "rc": 0, "stderr": ""}
    bad = {"item": probe, "rc": 2, "stderr": "usage: launch_server.py [-h]\nlaunch_server.py: error: "
           "argument --max-running-requests: invalid int value: 'abc'\n"}
    choice = {"item": dict(probe, flag="--attention-backend", values=["x"]), "rc": 2,
              "stderr": "launch_server.py: error: argument --attention-backend: invalid choice: 'x' "
                        "(choose from 'fa3', 'triton')"}
    problems = _request.argparse_problems([ok, bad, choice], "0.5.9")
    assert problems == [
        "tune_space.knobs --max-running-requests: sglang 0.5.9 refuses the value \"abc\" "
        "(argument --max-running-requests: invalid int value: 'abc')",
        "tune_space.knobs --attention-backend: sglang 0.5.9 refuses the value \"x\" "
        "(argument --attention-backend: invalid choice: 'x' (choose from 'fa3', 'triton'))",
    ]
    assert _request.argparse_problems([ok], "0.5.9") == []


def test_every_candidate_refused_is_a_failure():
    cands = [{"id": "c1-tp7", "verdict": "refused", "reason": "strategy 'tp7' needs 7 GPUs"},
             {"id": "c2-tp7", "verdict": "rewritten", "reason": "chunked prefill divided"}]
    msg = _request.nothing_admissible(cands, "0.5.9")
    assert msg.startswith("every candidate of tune_space is refused before any load (sglang 0.5.9)")
    assert "- c1-tp7 (refused): strategy 'tp7' needs 7 GPUs" in msg
    assert _request.nothing_admissible(cands + [{"id": "c3", "verdict": "ok"}], "0.5.9") is None


def test_nothing_measured_is_a_failure_with_the_trials_reasons():
    plan = {"candidates": [{"id": "c1", "verdict": "ok", "fingerprint": "a"},
                           {"id": "c2", "verdict": "ok", "fingerprint": "b"},
                           {"id": "c3", "verdict": "refused", "reason": "no"}]}
    failed = {"a": {"status": "failed", "host": "gpu-1", "reason": "Measure it: 'sglang_model_path' is undefined"},
              "b": {"status": "failed", "host": "gpu-2", "reason": "Load: health timeout"}}
    msg = _request.nothing_measured(plan, failed)
    assert msg.startswith("no candidate could be measured: every trial failed (2)")
    assert "- c1 on gpu-1: Measure it: 'sglang_model_path' is undefined" in msg
    assert "- c2 on gpu-2: Load: health timeout" in msg
    assert _request.nothing_measured(plan, dict(failed, b={"status": "ok"})) is None
    assert _request.nothing_measured(plan, {}).startswith("no candidate could be measured: no trial ran")
