"""The tune's report: the table sorted by goodput, the frontier, and the chart checked
against the JSON it is written with."""

import json

import pytest

import tune_inprocess as fleet_double

from ansible_collections.gpufleet.sglang.plugins.module_utils import _bench
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import frontier
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import journal as tune_journal
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import report as tune_report

pytest.importorskip("matplotlib")

SPACE = {"strategies": ["tp8", "ep8", "pp8"],
         "knobs": {"--cuda-graph-max-bs": [8, None], "--enable-mixed-chunk": [False, True]}}
LOAD = {"input_len": 256, "output_len": 64, "concurrencies": [1, 4, 16, 64], "num_prompts": 32}
SLO = {"ttft_p99_ms": 4000, "tpot_p99_ms": 40}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("rep") / "j.jsonl")
    plan, _r, _t = fleet_double.run_tune(fleet_double.Fleet("0.5.9"), SPACE, LOAD, SLO,
                                         ["h1", "h2"], path)
    return plan, tune_report.build(plan, tune_journal.read(path), SLO)


def test_rows_are_sorted_by_goodput_and_the_winner_is_the_first(tuned):
    _plan, rep = tuned
    goodputs = [r["goodput"] for r in rep["rows"]]
    assert len(rep["rows"]) == 10  # 12 candidates, pp8 with mixed chunk refused by 0.5.9
    scored = [g for g in goodputs if g is not None]
    assert scored == sorted(scored, reverse=True) and goodputs[:len(scored)] == scored
    assert rep["winner"]["id"] == rep["rows"][0]["id"] and rep["winner"]["goodput"] == goodputs[0]
    assert len(rep["refused"]) == 2 and rep["method"] == "exhaustive"
    text = tune_report.render_markdown(rep, "t")
    table = [ln for ln in text.splitlines() if ln.startswith("| ")][1:]
    assert [ln.split(" | ")[1].strip("*") for ln in table] == [r["id"] for r in rep["rows"]]
    assert "Refused before any load:" in text and "Method: **exhaustive**" in text
    json.loads(_bench.render_json(rep))  # strict JSON


def test_the_frontier_is_the_undominated_points(tuned):
    _plan, rep = tuned
    pts = rep["points"]
    assert len(pts) == 10 * len(LOAD["concurrencies"])  # every trial and concurrency
    front = set((p["id"], p["concurrency"]) for p in rep["frontier"])
    for pt in pts:
        beaten = any(frontier.dominated(pt, q) for q in pts)
        assert beaten == ((pt["id"], pt["concurrency"]) not in front), pt


def test_the_chart_draws_the_points_of_the_json(tuned):
    _plan, rep = tuned
    drawn = {}
    data = tune_report.render_png(rep, drawn=drawn)
    assert _bench.png_size(data) == (900, 600)
    as_json = json.loads(_bench.render_json(rep))
    want = sorted((round(p["x"], 6), round(p["y"], 6)) for p in as_json["points"])
    assert sorted((round(x, 6), round(y, 6)) for x, y in drawn["points"]) == want
    assert [(round(x, 6), round(y, 6)) for x, y in drawn["frontier"]] == \
        [(round(p["x"], 6), round(p["y"], 6)) for p in as_json["frontier"]]
    win = [p for p in as_json["points"] if p["id"] == as_json["winner"]["id"]
           and p["concurrency"] == as_json["winner"]["concurrency"]][0]
    assert drawn["winner"] == pytest.approx((win["x"], win["y"]))
    xs = [p["x"] for p in as_json["points"]]
    assert as_json["axes"]["x_log"] == (max(xs) / min(xs) >= 8)
    assert drawn["xscale"] == ("log" if as_json["axes"]["x_log"] else "linear")
    assert drawn["yscale"] == ("log" if as_json["axes"]["y_log"] else "linear")
    # the region outside the TPOT target: left of 1000 / tpot_p99_ms tok/s per user
    assert drawn["shaded"][1] == pytest.approx(1000.0 / SLO["tpot_p99_ms"])
    assert as_json["axes"]["tpot_limit_x"] == pytest.approx(1000.0 / SLO["tpot_p99_ms"])
    missed = [p for p in as_json["points"] if not p["meets_slo"]]
    assert missed and all(p["meets_slo"] is False for p in missed)
