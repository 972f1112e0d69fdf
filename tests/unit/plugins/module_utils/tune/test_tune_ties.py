"""Ties and noise (issue 42, item 3): candidates within the noise of the best goodput are a
tie, and a tie goes to the candidate with fewer knobs off their base; the same candidates
outside the noise, the faster wins. The report says when the winner was chosen among tied
candidates, and which."""

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_tool
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import report as tune_report
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import search

SLO = {"ttft_p99_ms": 1000, "tpot_p99_ms": 50}


def _run(tok_s, tpot_p50=20.0, tpot_p99=21.0, completed=64):
    res = _bench_tool.empty_result("bench_serving", "ep8", 16)
    res.update(output_tok_s=tok_s * 8, mean_tpot_ms=tpot_p50, median_tpot_ms=tpot_p50, p99_tpot_ms=tpot_p99,
               p99_ttft_ms=200.0, median_ttft_ms=100.0, completed=completed, num_prompts=completed, failed=0)
    return res


def _tune(plain, flagged, plain_run=None, flagged_run=None):
    """A plan result and a journal of two ep8 candidates: c01 at the base knobs, c04 with two
    knobs off their base, at ``plain`` and ``flagged`` output tok/s per GPU."""
    cands = [
        {"id": "c01-ep8", "strategy": "ep8", "extra_args": {}, "knobs": {"--a": None, "--b": False},
         "index": {"--a": 0, "--b": 0}, "verdict": "ok", "fingerprint": "f1", "gpus": {"used": 8}},
        {"id": "c04-ep8", "strategy": "ep8", "extra_args": {"--a": 32, "--b": True},
         "knobs": {"--a": 32, "--b": True}, "index": {"--a": 1, "--b": 1}, "verdict": "ok",
         "fingerprint": "f4", "gpus": {"used": 8}},
    ]
    trials = {
        "f1": {"status": "ok", "host": "h1", "gpus": {"used": 8}, "runs": [plain_run or _run(plain)]},
        "f4": {"status": "ok", "host": "h2", "gpus": {"used": 8}, "runs": [flagged_run or _run(flagged)]},
    }
    return {"candidates": cands, "method": "exhaustive", "slo": SLO}, trials


def _measured(plan, trials):
    from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import plan as tune_plan
    return tune_plan.measured_of(plan["candidates"], trials, metrics.check_slo(SLO))


def test_within_the_noise_the_candidate_with_fewer_knobs_off_base_wins():
    plan, trials = _tune(100.0, 101.0)  # 1 % apart, the floor is 2 %
    rep = tune_report.build(plan, trials, SLO)
    assert rep["winner"]["id"] == "c01-ep8" and rep["winner"]["tied_with"] == ["c04-ep8"]
    assert rep["tie"]["among"] == ["c04-ep8", "c01-ep8"] and rep["tie"]["best"] == "c04-ep8"
    assert rep["tie"]["noise"] == pytest.approx(101.0 * metrics.NOISE_FLOOR)
    assert [r["id"] for r in rep["rows"]] == ["c01-ep8", "c04-ep8"] and all(r["tied"] for r in rep["rows"])
    text = tune_report.render_markdown(rep)
    assert "Chosen among tied candidates: c04-ep8, c01-ep8" in text
    assert "c01-ep8 has none" in text and "(tie)" in text
    # the search ranks by the same rule: its best is the one the report names
    out = search.plan(plan["candidates"], ["--a", "--b"], _measured(plan, trials), [["h1"]], 0, "exhaustive")
    assert out["best"]["id"] == "c01-ep8" and out["tie"]["winner"] == "c01-ep8"


def test_outside_the_noise_the_faster_wins():
    """The control: the same two candidates 5 % apart."""
    plan, trials = _tune(100.0, 105.0)
    rep = tune_report.build(plan, trials, SLO)
    assert rep["winner"]["id"] == "c04-ep8" and rep["winner"]["tied_with"] == [] and rep["tie"] is None
    assert not any(r["tied"] for r in rep["rows"])
    assert "Chosen among tied candidates" not in tune_report.render_markdown(rep)
    out = search.plan(plan["candidates"], ["--a", "--b"], _measured(plan, trials), [["h1"]], 0, "exhaustive")
    assert out["best"]["id"] == "c04-ep8" and out["tie"] is None


def test_a_run_with_a_wide_spread_widens_its_noise_beyond_the_floor():
    """3.5 % apart is outside the 2 % floor; when the faster run's own requests spread
    widely (TPOT p99 twice its median over 4 requests), its noise covers the gap."""
    plan, trials = _tune(100.0, 103.5)
    assert tune_report.build(plan, trials, SLO)["winner"]["id"] == "c04-ep8"
    wide = _run(103.5, tpot_p50=20.0, tpot_p99=40.0, completed=4)
    rel = metrics.spread(wide)
    assert rel == pytest.approx(20.0 / 2.3263 / 20.0 / 2.0)
    plan, trials = _tune(100.0, 103.5, flagged_run=wide)
    rep = tune_report.build(plan, trials, SLO)
    assert rep["winner"]["id"] == "c01-ep8" and rep["tie"]["noise"] == pytest.approx(103.5 * rel)


def test_noise_has_its_floor_and_reads_only_what_the_run_says():
    assert metrics.spread(_run(100.0, 20.0, 20.0)) == 0.0
    assert metrics.spread(dict(_run(100.0), p99_tpot_ms=None)) is None
    assert metrics.spread(dict(_run(100.0), completed=1)) is None
    pt = metrics.point(_run(100.0, 20.0, 20.0), 8)
    assert metrics.noise(pt) == pytest.approx(100.0 * metrics.NOISE_FLOOR)
    assert metrics.noise(dict(pt, output_tok_s_per_gpu=None)) is None
