"""The tune's report: the table sorted by goodput, the frontier, and the chart checked
against the JSON it is written with."""

import json

import pytest

import tune_inprocess as fleet_double

from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_chart
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_report
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import frontier
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import journal as tune_journal
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as tune_metrics
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
    # the winner first, then every other row by goodput
    rest = goodputs[1:]
    scored = [g for g in rest if g is not None]
    assert scored == sorted(scored, reverse=True) and rest[:len(scored)] == scored
    assert rep["winner"]["id"] == rep["rows"][0]["id"] and rep["winner"]["goodput"] == goodputs[0]
    # the winner is the highest goodput, or within its noise with fewer knobs off base
    top = max(rep["rows"], key=lambda r: r["goodput"] or 0)
    tied = [r for r in rep["rows"] if r["goodput"] is not None and top["goodput"] - r["goodput"] <= top["noise"]]
    assert [r["id"] for r in rep["rows"] if r["tied"]] == ([r["id"] for r in rep["rows"] if r in tied]
                                                           if len(tied) > 1 else [])
    assert len(rep["rows"][0]["off_base"]) == min(len(r["off_base"]) for r in tied)
    assert top["noise"] >= tune_metrics.NOISE_FLOOR * top["goodput"]
    assert len(rep["refused"]) == 2 and rep["method"] == "exhaustive"
    text = tune_report.render_markdown(rep, "t")
    table = [ln for ln in text.splitlines() if ln.startswith("| ")][1:]
    assert [ln.split(" | ")[1].strip("*") for ln in table] == [r["id"] for r in rep["rows"]]
    assert "Refused before any load:" in text and "Method: **exhaustive**" in text
    json.loads(_bench_report.render_json(rep))  # strict JSON


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
    assert _bench_report.png_size(data) == (900, 600)
    as_json = json.loads(_bench_report.render_json(rep))
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


def _scenario_module(name):
    """A script of the tune scenario (extensions/molecule/tune/files/<name>.py) as a module."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    import os  # pylint: disable=import-outside-toplevel
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "..", "..", "..", "extensions", "molecule", "tune", "files", name + ".py")
    spec = importlib.util.spec_from_file_location(name, os.path.normpath(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_chart_module():
    return _scenario_module("check_chart")


def test_the_scenarios_router_watch_finds_a_trial_host_routed_during_its_trial():
    """The tune scenario's router watch check: a look inside a trial's window that lists the
    trial's host as routed is reported (with its time and trial); the same host draining, or
    routed after its trial, is not; a look that failed counts apart."""
    watch = _scenario_module("router_watch_check")
    urls = {"h1": "http://a:1", "h2": "http://b:1/"}
    trials = [{"host": "h1", "id": "c01-ep8", "start": 10.0, "end": 20.0}]

    def look(t, *rows):
        return {"t": t, "workers": [{"url": u, "healthy": True, "status": s} for u, s in rows]}
    looks = [look(5, ("http://a:1", "ready"), ("http://b:1", "ready")),
             look(12, ("http://a:1", "draining"), ("http://b:1", "ready")),
             look(15, ("http://b:1", "ready")),
             {"t": 16, "error": "refused"},
             look(25, ("http://a:1", "ready"), ("http://b:1", "ready"))]
    out = watch.check(looks, trials, urls, 1)
    assert out["trial_host_routed"] == [] and out["looks_in_trials"] == 2
    assert out["fewest_routed_in_trials"] == 1 and out["looks_failed"] == 1
    assert out["hosts_seen_routed"] == ["h1", "h2"]
    # the control: the trial host routed in the middle of its trial is found
    looks[2] = look(15, ("http://a:1", "ready"), ("http://b:1", "ready"))
    out = watch.check(looks, trials, urls, 1)
    assert out["trial_host_routed"] == [{"t": 15, "host": "h1", "trial": "c01-ep8"}]


def test_the_scenarios_router_watch_takes_each_trials_window_from_its_start_to_the_millisecond(
        tmp_path, capsys):
    """The window is ``started`` to ``started + wall_s``, not the line's ``time`` (cut to the
    second) back to its wall_s: a look half a second before the trial began, the host still
    routed, is no violation (the second-cut window began up to a second early and reported
    it, once, in a full run); a look inside the trial is one (the control)."""
    watch = _scenario_module("router_watch_check")
    line = {"kind": "trial", "host": "h1", "candidate": {"id": "c01-ep8"},
            "time": "1970-01-01T00:01:50Z", "started": 100.9, "wall_s": 10.0}  # ended 110.9
    journal = tmp_path / "j.jsonl"
    journal.write_text(json.dumps(line) + "\n" + json.dumps(dict(line, started=None)) + "\n")

    def run(*times):
        looks = tmp_path / "router.jsonl"
        looks.write_text("".join(json.dumps({"t": t, "workers": [
            {"url": "http://a:1", "healthy": True, "status": "ready"}]}) + "\n" for t in times))
        watch.main(["--watch", str(looks), "--journals", str(journal), "--urls", "h1=http://a:1"])
        return json.loads(capsys.readouterr().out)

    out = run(100.4, 111.4)
    assert out["trial_host_routed"] == [] and out["trials"] == 1 and out["looks_in_trials"] == 0
    out = run(100.4, 105.0, 111.4)
    assert out["trial_host_routed"] == [{"t": 105.0, "host": "h1", "trial": "c01-ep8"}]


def test_the_scenarios_chart_check_reads_a_point_under_the_winners_star_as_covered(tmp_path, monkeypatch, capsys):
    """Two candidates that run the same (ep8 with and without a knob that changes nothing)
    put their points on one pixel: the winner's star, drawn above, covers the other's marker
    (the tune scenario's CI run of 58d2508 failed on it). The check reads it red, and
    without the rule it reports the covered point missing."""
    check = _check_chart_module()
    metrics = {"a": [(16, 40.0, 600.0), (1, 64.0, 60.0)], "b": [(16, 40.02, 599.7), (1, 63.0, 59.0)],
               "c": [(16, 20.0, 250.0), (1, 26.0, 24.0)]}
    points = [{"id": cid, "concurrency": c, "x": x, "y": y, "meets_slo": True, "failed": 0}
              for cid, rows in metrics.items() for c, x, y in rows]
    front = frontier.pareto(points)
    rep = {"rows": [{"id": cid} for cid in metrics], "points": points,
           "frontier": [{"id": p["id"], "concurrency": p["concurrency"], "x": p["x"], "y": p["y"]} for p in front],
           "winner": {"id": "a", "concurrency": 16}, "frontier_over": "meets_slo",
           "axes": {"x_log": False, "y_log": False, "tpot_limit_x": None,
                    "x_range": _bench_chart.axis_range([p["x"] for p in points])}}
    journal = tmp_path / "journal.jsonl"
    journal.write_text("".join(json.dumps({
        "kind": "trial", "status": "ok", "candidate": {"id": cid},
        "metrics": [{"concurrency": c, "tok_s_per_user": x, "output_tok_s_per_gpu": y} for c, x, y in rows]}) + "\n"
        for cid, rows in metrics.items()))
    (tmp_path / "tune-x.json").write_text(json.dumps(rep))
    (tmp_path / "tune-x.png").write_bytes(tune_report.render_png(rep))
    argv = ["--journal", str(journal), "--report", str(tmp_path / "tune-x.json")]
    assert check.main(argv) == 0
    monkeypatch.setattr(check, "STAR_RADIUS_PX", 0.0)
    assert check.main(argv) == 1
    # a point the star does not cover is still looked for in its own colour
    monkeypatch.setattr(check, "STAR_RADIUS_PX", 10.3)
    rep["points"][4]["y"] = 400.0  # c's c=16 point moved in the JSON only (the axes stay)
    (tmp_path / "tune-x.json").write_text(json.dumps(rep))
    journal.write_text(journal.read_text().replace('"output_tok_s_per_gpu": 250.0', '"output_tok_s_per_gpu": 400.0'))
    assert check.main(argv) == 1
    problems = json.loads(capsys.readouterr().out.splitlines()[-1])["problems"]
    assert problems == ["no blue marker at (144, 239) for c c=16", "a blue marker at (144, 348) is no point of the JSON"]


def _synthetic(tmp_path, rows_, limit):
    """A report, its journal, JSON and PNG from ``{id: [(concurrency, x, y, meets_slo)]}``."""
    points = [{"id": cid, "concurrency": c, "x": x, "y": y, "meets_slo": ok, "failed": 0}
              for cid, rows in rows_.items() for c, x, y, ok in rows]
    xs = [p["x"] for p in points]
    front = frontier.pareto([p for p in points if p["meets_slo"]])
    rep = {"rows": [{"id": cid} for cid in rows_], "points": points, "frontier_over": "meets_slo",
           "frontier": [{"id": p["id"], "concurrency": p["concurrency"], "x": p["x"], "y": p["y"]} for p in front],
           "winner": {"id": front[0]["id"], "concurrency": front[0]["concurrency"]} if front else None,
           "axes": {"x_log": frontier.log_axis(xs), "y_log": False, "tpot_limit_x": limit,
                    "x_range": _bench_chart.axis_range(xs + [limit], frontier.log_axis(xs))}}
    journal = tmp_path / "journal.jsonl"
    journal.write_text("".join(json.dumps({
        "kind": "trial", "status": "ok", "candidate": {"id": cid},
        "metrics": [{"concurrency": c, "tok_s_per_user": x, "output_tok_s_per_gpu": y} for c, x, y, _ok in rows]}) + "\n"
        for cid, rows in rows_.items()))
    return rep, ["--journal", str(journal), "--report", str(tmp_path / "tune-x.json")]


def _write(tmp_path, rep):
    (tmp_path / "tune-x.json").write_text(json.dumps(rep))
    (tmp_path / "tune-x.png").write_bytes(tune_report.render_png(rep))


# the issue's chart: every point right of the target (TPOT 45 ms: 22.2 tok/s per user)
ISSUE_POINTS = {"a": [(1, 60.0, 20.0, True), (16, 40.0, 90.0, True), (64, 30.0, 98.6, False)],
                "b": [(1, 58.0, 19.0, True), (16, 35.0, 70.0, True), (64, 26.0, 80.0, False)]}


def test_the_band_runs_from_the_left_edge_to_the_tpot_target(tmp_path, monkeypatch):
    limit = 1000.0 / 45
    rep, argv = _synthetic(tmp_path, ISSUE_POINTS, limit)
    drawn = {}
    tune_report.render_png(rep, drawn=drawn)
    assert drawn["shaded"] == pytest.approx((drawn["xlim"][0], limit))
    assert drawn["xlim"] == pytest.approx(tuple(rep["axes"]["x_range"]))
    assert drawn["xlim"][0] < limit < min(p["x"] for p in rep["points"])
    _write(tmp_path, rep)
    check = _check_chart_module()
    assert check.main(argv) == 0
    # the control: the band of 3a1f (from 0.8 x the lowest x or the target) leaves the
    # plot's left edge bare, and the chart check sees it
    monkeypatch.setattr(_bench_chart, "shade_below", lambda ax, lim, **style: ax.axvspan(
        min(min(p["x"] for p in rep["points"]), lim) * 0.8 + 4, lim, **style))
    _write(tmp_path, rep)
    assert check.main(argv) == 1
    drawn = {}
    tune_report.render_png(rep, drawn=drawn)
    assert drawn["shaded"][0] > drawn["xlim"][0]


def test_the_frontier_is_over_the_points_meeting_the_slo_and_the_legend_says_so(tmp_path, capsys):
    rep, argv = _synthetic(tmp_path, ISSUE_POINTS, 1000.0 / 45)
    on = [(p["id"], p["concurrency"]) for p in rep["frontier"]]
    missed = [(p["id"], p["concurrency"]) for p in rep["points"] if not p["meets_slo"]]
    assert on == [("a", 16), ("a", 1)] and not set(on) & set(missed)
    # the control: over every point, a's c=64 (missing the SLO) would be on it
    assert ("a", 64) in [(p["id"], p["concurrency"]) for p in frontier.pareto(rep["points"])]
    drawn = {}
    tune_report.render_png(rep, drawn=drawn)
    assert tune_report.FRONTIER_LABEL in drawn["legend"] and "meeting the SLO" in tune_report.FRONTIER_LABEL
    assert drawn["frontier"] == [(40.0, 90.0), (60.0, 20.0)]
    _write(tmp_path, rep)
    check = _check_chart_module()
    assert check.main(argv) == 0
    # a report whose frontier runs over every point fails the scenario's check
    rep["frontier"] = [{"id": p["id"], "concurrency": p["concurrency"], "x": p["x"], "y": p["y"]}
                       for p in frontier.pareto(rep["points"])]
    _write(tmp_path, rep)
    capsys.readouterr()
    assert check.main(argv) == 1
    problems = json.loads(capsys.readouterr().out.splitlines()[-1])["problems"]
    assert any("runs through points missing the SLO" in p for p in problems), problems


def test_the_report_draws_its_frontier_over_the_points_meeting_the_slo(tuned):
    _plan, rep = tuned
    assert rep["frontier_over"] == "meets_slo"
    meeting = [p for p in rep["points"] if p["meets_slo"]]
    assert [(p["id"], p["concurrency"]) for p in rep["frontier"]] == \
        [(p["id"], p["concurrency"]) for p in frontier.pareto(meeting)]
    assert all(p["meets_slo"] for p in meeting) and len(meeting) < len(rep["points"])
