"""The tune's pure logic: space, verdicts, fingerprint and journal, metrics, search, frontier."""

import json

import pytest

import tune_inprocess as fleet_double

from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_tool
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import frontier, journal, metrics
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import plan as tune_plan
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import search, space, verdict

FLAGS = fleet_double.release_flags("0.5.9")


# ------------------------------------------------------------------------------ space

def test_expand_is_the_product_in_a_stable_order():
    out = space.expand({"strategies": ["tp8", "ep8"],
                        "knobs": {"--cuda-graph-max-bs": [None, 32], "--enable-mixed-chunk": [False, True]},
                        "fixed": {"--enable-metrics": True}}, FLAGS, "0.5.9")
    cands = out["candidates"]
    assert len(cands) == 8 and out["knobs"] == ["--cuda-graph-max-bs", "--enable-mixed-chunk"]
    assert [c["id"] for c in cands][:3] == ["c01-tp8", "c02-tp8", "c03-tp8"]
    assert cands[0]["extra_args"] == {"--enable-metrics": True}  # null and false: not passed
    assert cands[3]["extra_args"] == {"--enable-metrics": True, "--cuda-graph-max-bs": 32,
                                      "--enable-mixed-chunk": True}
    assert cands[3]["index"] == {"--cuda-graph-max-bs": 1, "--enable-mixed-chunk": 1}
    assert cands[4]["layout"] == {"name": "ep8", "tp": 8, "pp": 1, "ep": 8, "dp": 1}
    assert len(set(c["id"] for c in cands)) == 8


def test_strategies_alone_are_the_comparison_that_compare_yml_made():
    # playbooks/compare.yml's four strategies on one canary: tune_space with no knob
    out = space.expand({"strategies": ["tp8", "pp8", "ep8", "ep4"], "knobs": {}}, FLAGS, "0.5.9")
    assert [c["id"] for c in out["candidates"]] == ["c01-tp8", "c02-pp8", "c03-ep8", "c04-ep4"]
    assert all(c["extra_args"] == {} for c in out["candidates"]) and out["knobs"] == []
    assert search.plan([dict(c, verdict="ok") for c in out["candidates"]], [], {}, [["canary"]],
                       0, "auto")["method"] == "exhaustive"


def test_every_problem_of_the_space_is_named_at_once():
    with pytest.raises(space.SpaceError) as err:
        space.expand({"strategies": ["tp8", "tq9"], "bogus": 1,
                      "knobs": {"--no-such-flag": [1], "--tp-size": [2], "--enable-metrics": [3],
                                "--attention-backend": ["nope"], "--cuda-graph-max-bs": []},
                      "fixed": {"--port": 1}}, FLAGS, "0.5.9")
    text = "\n".join(err.value.problems)
    for needle in ("'tq9'", "unknown keys bogus", "--no-such-flag: sglang 0.5.9's launch_server --help has no such flag",
                   "the strategy sets --tp-size", "--enable-metrics: the value 3", "'nope' is not one of sglang 0.5.9",
                   "--cuda-graph-max-bs: give a list", "the deploy path sets --port"):
        assert needle in text, needle
    assert len(err.value.problems) == 8


def test_an_alias_of_the_release_is_a_knob():
    # the layout flags are the strategy's, even by alias
    with pytest.raises(space.SpaceError):
        space.expand({"strategies": ["tp8"], "knobs": {"--tensor-parallel-size": [8]}}, FLAGS, "0.5.9")
    ok = space.expand({"strategies": ["tp8"], "knobs": {"mem_fraction_static": [0.8]}}, FLAGS, "0.5.9")
    assert ok["knobs"] == ["--mem-fraction-static"]


# ---------------------------------------------------------------------------- verdicts

def _cand(**extra):
    return {"id": "c01-tp8", "strategy": "tp8", "extra_args": extra}


def test_verdicts():
    assert verdict.judge(_cand(), None)["verdict"] == "refused"
    refused = verdict.judge(_cand(), {"failed": True, "msg": "trial-1: strategy tp8 does not fit\n 8 x"})
    assert refused == {"verdict": "refused", "reason": "trial-1: strategy tp8 does not fit 8 x", "changes": []}
    # registered with failed_when: false, the refusal says failed: false and keeps its msg
    masked = verdict.judge(_cand(), {"failed": False, "failed_when_result": False, "msg": "does not fit"})
    assert masked["verdict"] == "refused" and masked["reason"] == "does not fit"
    ok = {"version": "0.5.9", "server_args": {"verdict": "ok", "derived": {"chunked_prefill_size": 512},
                                              "changes": []}}
    assert verdict.judge(_cand(), ok)["verdict"] == "ok"
    rewritten = verdict.judge(_cand(**{"--chunked-prefill-size": 4096}), ok)
    assert rewritten["verdict"] == "rewritten"
    assert "chunked_prefill_size = 512 where --chunked-prefill-size 4096" in rewritten["reason"]
    assert verdict.judge(_cand(**{"--chunked-prefill-size": 512}), ok)["verdict"] == "ok"
    explicit = dict(ok, server_args=dict(ok["server_args"], changes=[
        {"what": "DP attention", "asked": "on (8 groups)", "derived": "off", "explicit": True},
        {"what": "overlap schedule", "asked": "on", "derived": "off", "explicit": False}]))
    out = verdict.judge(_cand(), explicit)
    assert out["verdict"] == "rewritten" and len(out["changes"]) == 1 and "DP attention" in out["reason"]
    skipped = {"server_args": {"verdict": "skipped", "reason": "GPU model not read"}}
    assert verdict.judge(_cand(), skipped)["verdict"] == "refused"
    assert verdict.judge(_cand(), skipped, require_gate=False)["verdict"] == "ok"


def test_preflight_results_of_a_registered_loop():
    cands = [{"id": "a"}, {"id": "b"}]
    loop = {"results": [{"item": {"id": "b"}, "failed": True}, {"item": {"id": "a"}, "version": "x"}]}
    out = verdict.by_candidate(loop, cands)
    assert out["a"]["version"] == "x" and out["b"]["failed"]


def test_gate_requests_take_the_controllers_layout_and_the_inventorys_flags_under_each_candidates():
    cands = [{"id": "c01-ep8", "strategy": "ep8", "extra_args": {"--cuda-graph-max-bs": 8}},
             {"id": "c02-pp8", "strategy": "pp8", "extra_args": {}},
             {"id": "c03-tp4", "strategy": "tp4", "extra_args": {"--log-level": "debug"}}]
    checks = [{"item": cands[1], "strategy": "pp8", "layout": {"name": "pp8", "pp": 8}},
              {"item": cands[0], "strategy": "ep8", "layout": {"name": "ep8", "tp": 8, "ep": 8}},
              {"item": cands[2], "failed": False, "msg": "strategy tp4 uses 4 of 8 GPUs"}]
    base = {"--log-level": "info", "--cuda-graph-max-bs": 16}
    reqs = tune_plan.gate_requests(cands, checks, base)
    assert [r["id"] for r in reqs] == ["c01-ep8", "c02-pp8", "c03-tp4"]
    assert reqs[0] == {"id": "c01-ep8", "strategy": "ep8", "layout": {"name": "ep8", "tp": 8, "ep": 8},
                       "extra_args": {"--log-level": "info", "--cuda-graph-max-bs": 8}}
    assert reqs[1]["layout"] == {"name": "pp8", "pp": 8}
    # refused by the controller: the host's preflight gets the candidate's own strategy and
    # says why in its own words
    assert reqs[2]["strategy"] == "tp4" and reqs[2]["layout"] == {"name": "tp4"}
    assert reqs[2]["extra_args"] == {"--log-level": "debug", "--cuda-graph-max-bs": 16}
    assert base == {"--log-level": "info", "--cuda-graph-max-bs": 16}, "the inventory's flags are not changed"


# ------------------------------------------------------------------ fingerprint, journal

ARGV = ["--model-path", "/m", "--host", "0.0.0.0", "--port", "30000", "--tp-size", "8",
        "--api-key", "secret", "--dist-init-addr=10.0.0.1:5000"]
LOAD = {"input_len": 1024, "output_len": 256, "concurrencies": [32, 8], "num_prompts": 64}


def test_fingerprint_keys_what_is_measured_and_nothing_else():
    base = journal.fingerprint("0.5.9", "abc", "RTX", 8, ARGV, LOAD)
    assert journal.strip_argv(ARGV) == ["--model-path", "/m", "--tp-size", "8"]
    # the host's own address, port and the secret do not change what is measured
    other_host = [a.replace("0.0.0.0", "10.0.0.9").replace("30000", "31000") for a in ARGV]
    assert journal.fingerprint("0.5.9", "abc", "RTX", 8, other_host, dict(LOAD, concurrencies=[8, 32])) == base
    for changed in (("0.5.23", "abc", "RTX", 8, ARGV, LOAD), ("0.5.9", "abd", "RTX", 8, ARGV, LOAD),
                    ("0.5.9", "abc", "H200", 8, ARGV, LOAD), ("0.5.9", "abc", "RTX", 16, ARGV, LOAD),
                    ("0.5.9", "abc", "RTX", 8, ARGV + ["--cuda-graph-max-bs", "32"], LOAD),
                    ("0.5.9", "abc", "RTX", 8, ARGV, dict(LOAD, output_len=512))):
        assert journal.fingerprint(*changed) != base, changed


def test_journal_keeps_the_first_line_of_a_fingerprint_and_skips_torn_and_foreign_lines(tmp_path):
    path = str(tmp_path / "j.jsonl")
    cand = {"id": "c1", "strategy": "tp8", "extra_args": {}, "fingerprint": "f1", "argv": ARGV,
            "gpus": {"name": "RTX", "count": 8, "used": 8}}
    line = journal.trial_record(cand, "h1", "ok", "", [], [], LOAD, when="2026-01-01T00:00:00Z")
    assert "secret" not in json.dumps(line)
    assert journal.append(path, line) is True
    assert journal.append(path, dict(line, host="h2")) is False
    with open(path, "a") as handle:
        handle.write(json.dumps({"kind": "other", "fingerprint": "f2"}) + "\n" + '{"kind": "trial", "finger')
    trials = journal.read(path)
    assert list(trials) == ["f1"] and trials["f1"]["host"] == "h1"
    # when the trial began, to the millisecond, when given (the time is cut to the second)
    assert "started" not in line
    assert journal.trial_record(cand, "h1", "ok", "", [], [], LOAD,
                                started=1796315479.18549)["started"] == 1796315479.185


# ------------------------------------------------------------------------------ metrics

def _run(conc, tok, tpot_p99, ttft_p99, failed=0, tpot=None):
    res = _bench_tool.empty_result("bench_serving", "tp8", conc)
    res.update(output_tok_s=tok, mean_tpot_ms=tpot or tpot_p99 * 0.9, p99_tpot_ms=tpot_p99,
               p99_ttft_ms=ttft_p99, median_ttft_ms=ttft_p99 / 2, median_tpot_ms=tpot_p99 * 0.8,
               median_itl_ms=1.0, p99_itl_ms=2.0, failed=failed, completed=10 - failed, num_prompts=10)
    return res


def test_goodput_is_the_best_throughput_meeting_the_slo():
    slo = metrics.check_slo({"ttft_p99_ms": 1000, "tpot_p99_ms": 50})
    pts = metrics.trial([_run(64, 1600, 80, 900), _run(8, 400, 20, 100), _run(32, 1200, 45, 800)], 8, slo)
    assert [p["concurrency"] for p in pts] == [8, 32, 64]
    assert [p["meets_slo"] for p in pts] == [True, True, False]
    assert pts[1]["output_tok_s_per_gpu"] == 150 and pts[1]["tok_s_per_user"] == pytest.approx(1000 / 40.5)
    value, best = metrics.goodput(pts)
    assert value == 150 and best["concurrency"] == 32
    # no limit: the best throughput
    assert metrics.goodput(metrics.trial([_run(64, 1600, 80, 900)], 8, metrics.check_slo({})))[0] == 200


def test_a_failed_request_anywhere_means_no_goodput():
    slo = metrics.check_slo({"tpot_p99_ms": 50})
    pts = metrics.trial([_run(8, 400, 20, 100), _run(32, 1200, 45, 800, failed=1)], 8, slo)
    assert metrics.goodput(pts) == (None, None)
    assert metrics.score(pts)[0] == 0
    unknown = metrics.trial([dict(_run(8, 400, 20, 100), failed=None)], 8, slo)
    assert metrics.goodput(unknown) == (None, None)  # unknown failures are not a pass
    assert metrics.goodput(metrics.trial([_run(8, 400, 20, 100)], 8, slo), status="failed") == (None, None)


def test_bench_serving_p99_and_failures_are_parsed():
    line = {"output_throughput": 900.0, "request_throughput": 1.0, "mean_ttft_ms": 10.0,
            "median_ttft_ms": 9.0, "p99_ttft_ms": 30.0, "mean_tpot_ms": 20.0, "median_tpot_ms": 19.0,
            "p99_tpot_ms": 40.0, "mean_itl_ms": 20.0, "median_itl_ms": 18.0, "p99_itl_ms": 60.0,
            "completed": 60, "duration": 10.0, "max_concurrency": 16}
    res = _bench_tool.parse_bench_serving(line, num_prompts=64)
    assert res["failed"] == 4 and res["p99_tpot_ms"] == 40.0 and res["p99_itl_ms"] == 60.0
    assert _bench_tool.parse_bench_serving(line)["failed"] is None  # prompts sent unknown


def test_slo_errors_name_the_key():
    with pytest.raises(metrics.SloError) as err:
        metrics.check_slo({"ttft_p99_ms": -1, "tpot": 3})
    assert "tune_slo.ttft_p99_ms" in str(err.value) and "unknown keys tpot" in str(err.value)


# ------------------------------------------------------------------------------- search

def _space(strategies=("tp8", "ep8"), knobs=None):
    return space.expand({"strategies": list(strategies),
                         "knobs": knobs or {"--cuda-graph-max-bs": [8, 32, None],
                                            "--enable-mixed-chunk": [False, True]}}, FLAGS, "0.5.9")


def _judged(cands, refuse=()):
    return [dict(c, verdict="refused" if c["id"] in refuse else "ok") for c in cands]


def _measured(ids, good):
    return dict((i, {"status": "ok", "points": [], "score": (2, good(i), 0.0)}) for i in ids)


def test_exhaustive_rounds_assign_different_candidates_and_skip_refused_and_measured():
    exp = _space()
    cands = _judged(exp["candidates"], refuse={"c02-tp8"})
    units = [["h1"], ["h2"], ["h3", "h4"]]
    out = search.plan(cands, exp["knobs"], _measured(["c01-tp8"], lambda i: 1.0), units, 0, "auto")
    assert out["method"] == "exhaustive"
    ids = [p["id"] for p in out["picks"]]
    assert ids == ["c03-tp8", "c04-tp8", "c05-tp8"]
    # with a budget smaller than the admissible candidates, auto is the coordinate descent
    assert search.plan(cands, exp["knobs"], {}, units, 4, "auto")["method"] == "coordinate"
    # exhaustive within a budget: the rest is left out, named
    done = _measured([c["id"] for c in cands if c["verdict"] == "ok"][:4], lambda i: 1.0)
    out = search.plan(cands, exp["knobs"], done, units, 4, "exhaustive")
    assert out["picks"] == [None, None, None] and out["phase"] == "done"
    assert all(e["reason"].startswith("budget") for e in out["left_out"]) and len(out["left_out"]) == 7


def test_coordinate_starts_with_one_seed_per_strategy_then_walks_the_best_ones_neighbours():
    exp = _space()
    cands = _judged(exp["candidates"], refuse={"c07-ep8"})
    out = search.plan(cands, exp["knobs"], {}, [["h1"], ["h2"], ["h3"]], 6, "coordinate")
    assert out["phase"] == "strategies"
    # ep8's base (c07) is refused: its seed is the nearest admissible one
    assert [p and p["id"] for p in out["picks"]] == ["c01-tp8", "c08-ep8", None]
    seeds = _measured(["c01-tp8", "c08-ep8"], lambda i: {"c01-tp8": 1.0, "c08-ep8": 2.0}[i])
    out = search.plan(cands, exp["knobs"], seeds, [["h1"], ["h2"], ["h3"]], 6, "coordinate")
    assert out["phase"] == "descent"
    # c08 = (8, True): its step neighbours are (32, True) c10 and (8, False) c07, refused;
    # (None, True) c12 is two steps away. tp8's seed (1.0) is below 75 % of ep8's (2.0):
    # tp8 is dropped, and the third unit has nothing to do
    assert [p and p["id"] for p in out["picks"]] == ["c10-ep8", None, None]
    assert out["kept"] == ["ep8"] and [d["strategy"] for d in out["dropped"]] == ["tp8"]
    assert out["budget_left"] == 4 and out["budget"] == 6
    # the control: tp8's seed within 75 % of ep8's, tp8 is climbed too
    close = _measured(["c01-tp8", "c08-ep8"], lambda i: {"c01-tp8": 1.6, "c08-ep8": 2.0}[i])
    out = search.plan(cands, exp["knobs"], close, [["h1"], ["h2"], ["h3"]], 6, "coordinate")
    assert [p["id"] for p in out["picks"]] == ["c10-ep8", "c03-tp8", "c02-tp8"]
    assert out["kept"] == ["ep8", "tp8"] and out["dropped"] == []


def test_next_round_puts_it_together(tmp_path):
    fleet = fleet_double.Fleet("0.5.9")
    exp = _space(knobs={"--cuda-graph-max-bs": [8, None]})
    pre = dict((c["id"], fleet.preflight(c)) for c in exp["candidates"])
    out = tune_plan.next_round(exp["candidates"], exp["knobs"], pre, str(tmp_path / "j"),
                               ["h1", ["h2", "h3"]], 0, "auto", {"tpot_p99_ms": 50}, "0.5.9", "abc",
                               {"input_len": 8, "output_len": 8, "concurrencies": [1]})
    assert out["method"] == "exhaustive" and not out["done"] and out["rounds_left"] == 2
    a = out["assignment"]
    assert a["h1"]["id"] == "c01-tp8" and a["h2"]["id"] == a["h3"]["id"] == "c02-tp8"
    assert a["h1"]["fingerprint"] != a["h2"]["fingerprint"]
    assert a["h1"]["gpus"] == {"name": fleet.gpu["name"], "count": 8, "used": 8}
    # each unit is measured and journaled on its first host (a multi-node server's rank 0)
    assert out["leads"] == ["h1", "h2"]
    with pytest.raises(tune_plan.PlanError) as err:
        tune_plan.next_round(exp["candidates"], None, pre, None, ["h1", "h1"], -1, "best", {"x": 1})
    for needle in ("h1 listed twice", "tune_budget", "tune_method", "unknown keys x"):
        assert needle in str(err.value)


# ------------------------------------------------------------------------- trial units

GROUPS = {"tp16": ["m1", "m2"], "tp16b": ["n1", "n2"], "all": ["a", "m1", "m2", "n1", "n2", "b"]}


def _settings(**ranks):
    out = {"a": {}, "b": {"nnodes": 1}}
    for host, group in (("m1", "tp16"), ("m2", "tp16"), ("n1", "tp16b"), ("n2", "tp16b")):
        out[host] = {"nnodes": 2, "group": group, "rank": ranks.get(host)}
    return out


def test_a_multi_node_server_is_one_trial_unit_rank_0_first():
    units, problems = tune_plan.trial_units(["a", "m1", "m2", "b"], _settings(), GROUPS)
    assert problems == [] and units == [["a"], ["m1", "m2"], ["b"]]
    # declared ranks order the unit, whatever the play's order
    units, problems = tune_plan.trial_units(["m1", "m2", "a"], _settings(m1=1, m2=0), GROUPS)
    assert problems == [] and units == [["m2", "m1"], ["a"]]
    # the control: single-host servers only, every host a unit of its own
    units, problems = tune_plan.trial_units(["a", "b"], _settings(), GROUPS)
    assert problems == [] and units == [["a"], ["b"]]


def test_a_multi_node_server_only_partly_on_trial_is_refused_naming_it():
    units, problems = tune_plan.trial_units(["a", "m1", "n1", "n2"], _settings(), GROUPS)
    assert units == [["a"], ["n1", "n2"]]
    assert len(problems) == 1 and "m1 runs one server with m2" in problems[0]
    assert "group tp16" in problems[0]
    bad = dict(_settings(), m1={"nnodes": 2, "group": "nogroup"})
    _units, problems = tune_plan.trial_units(["m1"], bad, GROUPS)
    assert problems and "needs server_node_group" in problems[0]


def test_the_tune_units_filter_reads_the_inventory():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpufleet.sglang.plugins.filter import tune as tune_filter
    hostvars = {"a": {}, "m1": {"sglang_nnodes": 2, "sglang_server_group": "tp16"},
                "m2": {"sglang_nnodes": 2, "sglang_server_group": "tp16", "sglang_node_rank": None}}
    assert tune_filter.tune_units(["m1", "a", "m2"], hostvars, GROUPS) == [["m1", "m2"], "a"]
    assert tune_filter.tune_units(["a"], hostvars, GROUPS) == ["a"]
    with pytest.raises(AnsibleFilterError) as err:
        tune_filter.tune_units(["m2", "a"], hostvars, GROUPS)
    assert "m2 runs one server with m1" in str(err.value)


# ----------------------------------------------------------------------------- frontier

def test_pareto_frontier():
    pts = [{"x": 10, "y": 100}, {"x": 20, "y": 90}, {"x": 15, "y": 80}, {"x": 30, "y": 10},
           {"x": 20, "y": 50}, {"x": 5, "y": 100}]
    front = frontier.pareto(pts)
    assert [(p["x"], p["y"]) for p in front] == [(10, 100), (20, 90), (30, 10)]
    for pt in pts:
        beaten = any(frontier.dominated(pt, q) for q in pts)
        assert beaten == (pt not in front)
    assert frontier.log_axis([1, 8]) and not frontier.log_axis([1, 7.9])
