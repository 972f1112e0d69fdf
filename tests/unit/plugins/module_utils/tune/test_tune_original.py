"""What each trial host served before the tune (the journal's ``original`` line, closed by
a ``stays`` line), and each trial's own wall time (issue 42, items 5 and 8)."""

import json

import pytest

import tune_inprocess as fleet_double

from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import journal
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import plan as tune_plan
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import report as tune_report


def _row(strategy, deployed=True, release="0.5.9"):
    """server_status's row as the playbook registers it (tune_before.row)."""
    if not deployed:
        return {"host": "x", "deployed": False, "strategy": None, "release": None,
                "deployed_at": None}
    return {"host": "x", "deployed": True, "strategy": strategy, "release": release,
            "deployed_at": "2026-01-01T00:00:00Z"}


def _kinds(path):
    with open(path) as handle:
        return [(json.loads(ln)["kind"], json.loads(ln)["host"]) for ln in handle if ln.strip()]


# ------------------------------------------------------------------ keep=original after kills

def test_a_resumed_tune_restores_what_ran_before_its_first_run_not_what_the_record_says_now(tmp_path):
    """The bug of issue 42: both hosts served pp8; the killed run's trials rewrote their
    records (h1 tp8, h2 ep8). Every resume reads the record again; the journal's line keeps
    pp8. The control (what the record says at each resume) is what was restored before."""
    path = str(tmp_path / "j.jsonl")
    first = dict((h, journal.note_original(path, h, _row("pp8"))) for h in ("h1", "h2"))
    assert all(r["appended"] for r in first.values())
    records = {"h1": "tp8", "h2": "ep8"}  # what the killed run's trials left in the records
    for _resume in range(3):
        for host, now_runs in records.items():
            out = journal.note_original(path, host, _row(now_runs))
            assert not out["appended"] and not out["changed"]
            assert out["restore"] == {"strategy": "pp8", "source": "record",
                                      "says": "pp8 (what ran before)"}
            # the control: the record read at this run's start names the killed trial's
            assert _row(now_runs)["strategy"] != out["restore"]["strategy"]
        records = {"h1": "ep8", "h2": "tp8"}
    assert _kinds(path) == [("original", "h1"), ("original", "h2")]


def test_a_host_first_seen_in_a_later_run_gets_its_own_line_then(tmp_path):
    path = str(tmp_path / "j.jsonl")
    journal.note_original(path, "h1", _row("pp8"))
    # the resumed run also tunes h3 (its record says tp8 at that run's start)
    assert journal.note_original(path, "h1", _row("ep8"))["restore"]["strategy"] == "pp8"
    h3 = journal.note_original(path, "h3", _row("tp8"))
    assert h3["appended"] and h3["restore"]["strategy"] == "tp8"
    assert journal.note_original(path, "h3", _row("ep8"))["restore"]["strategy"] == "tp8"
    assert _kinds(path) == [("original", "h1"), ("original", "h3")]


def test_the_stays_line_closes_the_tune_and_the_next_tune_notes_what_runs_then(tmp_path):
    """A journal outlives a tune (the default path is one per reports directory): once a
    tune left its server on a host, the next tune's keep=original restores what runs when
    that tune starts, not what ran before the first one."""
    path = str(tmp_path / "j.jsonl")
    journal.note_original(path, "h1", _row("pp8"))
    journal.note_original(path, "h2", _row("pp8"))
    closed = journal.close_original(path, "h1", "best", "ep8", "c03-ep8", when="T")
    assert closed["appended"] and closed["record"] == {
        "v": 1, "kind": "stays", "host": "h1", "time": "T", "keep": "best", "strategy": "ep8",
        "winner": "c03-ep8"}
    # closing twice (a re-run of the last task) appends nothing
    assert not journal.close_original(path, "h1", "best", "ep8", "c03-ep8")["appended"]
    # the next tune: h1 runs the winner now, h2 (never closed: its tune is still open) pp8
    assert journal.note_original(path, "h1", _row("ep8"))["restore"]["strategy"] == "ep8"
    assert journal.note_original(path, "h2", _row("tp8"))["restore"]["strategy"] == "pp8"
    assert _kinds(path) == [("original", "h1"), ("original", "h2"), ("stays", "h1"),
                            ("original", "h1")]
    # without the stays line the first tune's pp8 would come back for h1 (the control)
    lines = [json.loads(ln) for ln in open(path) if ln.strip()]
    assert journal.open_originals([ln for ln in lines if ln["kind"] != "stays"])["h1"]["strategy"] == "pp8"


def test_nothing_deployed_before_the_tune_restores_the_inventorys_strategy(tmp_path):
    path = str(tmp_path / "j.jsonl")
    out = journal.note_original(path, "h1", _row(None, deployed=False), inventory_strategy="tp8")
    assert out["original"]["deployed"] is False and out["original"]["strategy"] is None
    assert out["restore"]["strategy"] == "tp8" and out["restore"]["source"] == "inventory"
    assert "nothing was deployed" in out["restore"]["says"]
    # resumed: the trial's record now says ep8; still nothing was deployed before the tune
    again = journal.note_original(path, "h1", _row("ep8"), inventory_strategy="tp8")
    assert not again["appended"] and again["restore"]["source"] == "inventory"
    assert again["restore"]["strategy"] == "tp8"


def test_check_mode_notes_nothing_and_a_torn_last_line_is_skipped(tmp_path):
    path = str(tmp_path / "j.jsonl")
    out = journal.note_original(path, "h1", _row("pp8"), check_mode=True)
    assert not out["appended"] and out["restore"]["strategy"] == "pp8"
    assert not (tmp_path / "j.jsonl").exists()
    assert not journal.close_original(path, "h1", "best", "pp8")["appended"]
    journal.note_original(path, "h1", _row("pp8"))
    with open(path, "a") as handle:  # a kill mid-append of h2's line
        handle.write('{"kind": "original", "host": "h2", "strat')
    assert journal.note_original(path, "h2", _row("ep8"))["appended"]
    assert journal.note_original(path, "h2", _row("tp8"))["restore"]["strategy"] == "ep8"
    assert journal.note_original(path, "h1", _row("tp8"))["restore"]["strategy"] == "pp8"


# ------------------------------------------------------------ the journal's other readers

SPACE = {"strategies": ["tp8", "ep8"], "knobs": {"--cuda-graph-max-bs": [8, None]}}
LOAD = {"input_len": 64, "output_len": 16, "concurrencies": [1, 4], "num_prompts": 8}
SLO = {"tpot_p99_ms": 60}


def test_the_plan_and_the_report_ignore_the_original_and_stays_lines(tmp_path):
    plain, mixed = str(tmp_path / "plain.jsonl"), str(tmp_path / "mixed.jsonl")
    fleet = fleet_double.Fleet("0.5.9")
    plan_plain, _r, trials = fleet_double.run_tune(fleet, SPACE, LOAD, SLO, ["h1", "h2"], plain)
    assert trials > 0
    journal.note_original(mixed, "h1", _row("pp8"))
    journal.note_original(mixed, "h2", _row(None, deployed=False))
    with open(plain) as handle:
        for line in handle:
            with open(mixed, "a") as out:
                out.write(line)
            journal.note_original(mixed, "h1", _row("tp8"))  # a resume: nothing appended
    journal.close_original(mixed, "h1", "best", "ep8")
    journal.close_original(mixed, "h2", "best", "ep8")
    assert [k for k, _h in _kinds(mixed)].count("trial") == trials
    assert journal.read(mixed) == journal.read(plain)
    plan_mixed, _r, again = fleet_double.run_tune(fleet_double.Fleet("0.5.9"), SPACE, LOAD, SLO,
                                                  ["h1", "h2"], mixed)
    assert again == 0 and plan_mixed["measured"] == plan_plain["measured"] == trials
    rep_plain = tune_report.build(plan_plain, journal.read(plain), SLO)
    rep_mixed = tune_report.build(plan_mixed, journal.read(mixed), SLO)
    assert rep_mixed["rows"] == rep_plain["rows"] and rep_mixed["winner"] == rep_plain["winner"]


# ------------------------------------------------------------------ wall_s of each trial

CAND = {"id": "c01-tp8", "strategy": "tp8", "extra_args": {}, "fingerprint": "f1",
        "argv": ["--tp-size", "8"], "gpus": {"name": "RTX", "count": 8, "used": 8}}
RUN = {"concurrency": 4, "output_tok_s": 800, "mean_tpot_ms": 20, "p99_tpot_ms": 30,
       "p99_ttft_ms": 100, "median_ttft_ms": 50, "failed": 0}


def test_two_trials_of_one_round_each_get_their_own_wall_time(tmp_path):
    """Both trials start together; h1's measurement ends 60 s later, h2's 95 s later; both
    are journaled at 100 s (the round's end). Before, both got the round's 100 s."""
    path = str(tmp_path / "j.jsonl")
    start, journaled_at = 1000.0, 1100.0

    def clock():
        return journaled_at

    lines = {}
    for host, fp, ago in (("h1", "f1", 40.0), ("h2", "f2", 5.0)):
        ended = journal.ended_at(ago, clock)
        lines[host] = tune_plan.record(path, dict(CAND, fingerprint=fp), host, [RUN],
                                       started=start, ended=ended)["record"]
    assert lines["h1"]["wall_s"] == 60.0 and lines["h2"]["wall_s"] == 95.0
    assert lines["h1"]["started"] == lines["h2"]["started"] == start
    # the control: the round's length, what both lines said before
    assert journaled_at - start == 100.0 != lines["h1"]["wall_s"]
    assert [t["wall_s"] for t in journal.read(path).values()] == [60.0, 95.0]


def test_wall_s_as_given_without_an_end_and_an_end_before_the_start_is_refused(tmp_path):
    path = str(tmp_path / "j.jsonl")
    assert journal.wall_of(12.5) == 12.5 and journal.wall_of() is None
    assert journal.wall_of(99.0, started=10.0, ended=20.25) == 10.25
    assert tune_plan.record(path, CAND, "h1", [RUN], wall_s=7.0, started=10.0,
                            check_mode=True)["record"]["wall_s"] == 7.0
    with pytest.raises(tune_plan.PlanError, match="before it started"):
        tune_plan.record(path, CAND, "h1", [RUN], started=10.0, ended=9.0)
    assert journal.ended_at(None) is None
    assert journal.ended_at(0, lambda: 50.0) == 50.0
    with pytest.raises(ValueError, match="0 or more"):
        journal.ended_at(-1.0, lambda: 50.0)
