"""Search quality on the in-process emulator fleet (issue 21, "Done when: search quality").

The space (4 strategies x 4 knobs = 96 candidates) holds candidates the planner refuses
(tp8-dp8 at --mem-fraction-static 0.80 / 0.84: the DP-attention weights do not fit), that
the release's gate refuses (pp8 with --enable-mixed-chunk: 0.5.9's check_server_args) and
that it rewrites (tp8-dp8: 0.5.9 divides the chunked prefill size by the DP width). Every
candidate goes through the collection's preflight logic; the admitted ones are measured by
the emulator's in-process bench, over the same scheduler model the HTTP server paces by.
"""


import pytest

import tune_inprocess as fleet_double

from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import journal as tune_journal
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as tune_metrics
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import report as tune_report

SPACE = {
    "strategies": ["tp8", "ep8", "pp8", "tp8-dp8"],
    "knobs": {
        "--mem-fraction-static": [0.80, 0.84, 0.88],
        "--cuda-graph-max-bs": [8, None],
        "--enable-mixed-chunk": [False, True],
        "--chunked-prefill-size": [4096, 1024],
    },
}
LOAD = {"input_len": 1024, "output_len": 256, "concurrencies": [8, 16, 32, 48], "num_prompts": 48}
SLO = {"ttft_p99_ms": 8000, "tpot_p99_ms": 40}
HOSTS = ["trial-1", "trial-2", "trial-3"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One exhaustive and one budgeted tune of the same space on one fleet double."""
    tmp = tmp_path_factory.mktemp("tune")
    fleet = fleet_double.Fleet("0.5.9")
    full = {}
    full["plan"], full["rounds"], full["trials"] = fleet_double.run_tune(
        fleet, SPACE, LOAD, SLO, HOSTS, str(tmp / "exhaustive.jsonl"), method="exhaustive")
    full["loads"] = list(fleet.loads)
    full["rounds_left"] = list(fleet.rounds_left)
    full["report"] = tune_report.build(full["plan"], tune_journal.read(str(tmp / "exhaustive.jsonl")), SLO)
    admissible = [c for c in full["plan"]["candidates"] if c["verdict"] == "ok"]
    budget = len(admissible) // 3
    fleet.loads[:] = []
    fleet.rounds_left[:] = []
    search = {"budget": budget}
    search["plan"], search["rounds"], search["trials"] = fleet_double.run_tune(
        fleet, SPACE, LOAD, SLO, HOSTS, str(tmp / "search.jsonl"), budget=budget, method="auto")
    search["loads"] = list(fleet.loads)
    search["rounds_left"] = list(fleet.rounds_left)
    search["report"] = tune_report.build(search["plan"], tune_journal.read(str(tmp / "search.jsonl")), SLO)
    return full, search


def test_the_space_has_refused_and_rewritten_candidates(runs):
    full, _search = runs
    cands = full["plan"]["candidates"]
    assert len(cands) >= 24
    reasons = dict((c["id"], c["reason"]) for c in cands if c["verdict"] != "ok")
    planner = [i for i, r in reasons.items() if "does not fit" in r]
    gate = [i for i, r in reasons.items() if "refuses the launch flags once it derives" in r]
    rewritten = [c["id"] for c in cands if c["verdict"] == "rewritten"]
    assert planner and gate and rewritten, (planner, gate, rewritten)
    assert all(c["strategy"] == "pp8" and c["knobs"]["--enable-mixed-chunk"]
               for c in cands if c["id"] in gate)
    assert all("chunked_prefill_size" in c["reason"] for c in cands if c["id"] in rewritten)


def test_refused_candidates_are_never_loaded(runs):
    for run in runs:
        refused = set(c["id"] for c in run["plan"]["candidates"] if c["verdict"] != "ok")
        assert refused and not refused & set(run["loads"])
        assert len(run["loads"]) == len(set(run["loads"])), "a candidate was loaded twice"


def test_the_budgeted_search_is_within_5_percent_of_the_exhaustive_best_with_a_third_of_the_trials(runs):
    full, search = runs
    admissible = [c for c in full["plan"]["candidates"] if c["verdict"] == "ok"]
    assert full["trials"] == len(admissible) == len(full["loads"])
    assert search["plan"]["method"] == "coordinate"
    assert search["trials"] <= full["trials"] / 3.0
    best = full["report"]["winner"]["goodput"]
    found = search["report"]["winner"]["goodput"]
    assert found >= 0.95 * best, (search["report"]["winner"], full["report"]["winner"])
    # what it left out is named, and is everything admissible it did not measure
    left = set(e["id"] for e in search["plan"]["left_out"])
    assert left == set(c["id"] for c in admissible) - set(search["loads"])
    # rounds ran the trial hosts in parallel: at most ceil(trials / hosts) + 1 rounds
    assert search["rounds"] <= -(-search["trials"] // len(HOSTS)) + 1


def test_rounds_left_bounds_the_rounds_that_follow(runs):
    """A playbook loops over range(rounds_left) of its first plan: that must be enough."""
    for run in runs:
        left = run["rounds_left"]
        assert left[-1] == 0
        for n, bound in enumerate(left):
            assert bound >= len(left) - 1 - n, (n, left)
    assert runs[0]["rounds_left"][0] == runs[0]["rounds"]  # exhaustive: exact


def test_a_search_of_the_strategies_alone_would_fail_the_same_bar(runs):
    """The control: each strategy at its base knobs (what 'strategies first' measures in its
    first phase, and all that a strategies-only search would) is more than 5% short."""
    full, _search = runs
    rows = dict((r["id"], r) for r in full["report"]["rows"])
    seeds = {}
    for cand in full["plan"]["candidates"]:
        if cand["verdict"] == "ok" and cand["strategy"] not in seeds:
            seeds[cand["strategy"]] = cand["id"]
    strategies_only = max(rows[i]["goodput"] or 0 for i in seeds.values())
    assert strategies_only < 0.95 * full["report"]["winner"]["goodput"], (strategies_only, seeds)


def test_resume_measures_nothing_twice_and_a_rerun_measures_nothing(tmp_path):
    fleet = fleet_double.Fleet("0.5.9")
    path = str(tmp_path / "journal.jsonl")
    small = dict(SPACE, strategies=["ep8", "pp8"], knobs=dict(SPACE["knobs"]))
    _plan, _rounds, first = fleet_double.run_tune(fleet, small, LOAD, SLO, HOSTS, path, budget=9,
                                                  stop_after=4)
    assert first == 4
    # the controller died while appending the next line: a torn last line
    with open(path, "a") as handle:
        handle.write('{"v": 1, "kind": "trial", "fingerprint": "ab')
    before = list(fleet.loads)
    final, _rounds, second = fleet_double.run_tune(fleet, small, LOAD, SLO, HOSTS, path, budget=9)
    resumed = fleet.loads[len(before):]
    assert not set(resumed) & set(before), "a measured trial was measured again"
    # the search is adaptive: the resumed one climbs from what the journal holds (the lost
    # part of the interrupted round is not there), so it may take another path than an
    # uninterrupted run; it keeps the budget and accounts for every admissible candidate
    journaled = set(line["candidate"]["id"] for line in tune_journal.read(path).values())
    assert first + second == len(journaled) <= 9 and set(fleet.loads) == journaled and final["done"]
    admissible = set(c["id"] for c in final["candidates"] if c["verdict"] == "ok")
    assert set(e["id"] for e in final["left_out"]) == admissible - journaled
    again = list(fleet.loads)
    final2, rounds, third = fleet_double.run_tune(fleet, small, LOAD, SLO, HOSTS, path, budget=9)
    assert third == 0 and rounds == 0 and fleet.loads == again and final2["done"]


def test_a_failed_trial_never_wins(tmp_path):
    """A candidate whose requests fail looks fast to a harness that drops failures."""
    fleet = fleet_double.Fleet("0.5.9")
    real_trial = fleet.trial

    def lossy(cand, load):
        status, reason, runs_ = real_trial(cand, load)
        if cand["strategy"] == "ep8":
            runs_ = [dict(r, completed=r["completed"] - 1, failed=1) for r in runs_]
        return status, reason, runs_

    fleet.trial = lossy
    slo = {"ttft_p99_ms": 8000, "tpot_p99_ms": 50}
    path = str(tmp_path / "journal.jsonl")
    small = {"strategies": ["tp8", "ep8"], "knobs": {"--cuda-graph-max-bs": [None]}}
    plan, _r, _t = fleet_double.run_tune(fleet, small, LOAD, slo, HOSTS, path)
    rep = tune_report.build(plan, tune_journal.read(path), slo)
    rows = dict((r["strategy"], r) for r in rep["rows"])
    assert rows["ep8"]["goodput"] is None and rows["ep8"]["failed"] == len(LOAD["concurrencies"])
    assert rep["winner"]["strategy"] == "tp8"
    # the control: without its failures ep8 would have won
    lines = [v for v in tune_journal.read(path).values() if v["candidate"]["strategy"] == "ep8"]
    clean = tune_metrics.trial([dict(r, failed=0) for r in lines[0]["runs"]], 8, tune_metrics.check_slo(slo))
    assert tune_metrics.goodput(clean)[0] > rep["winner"]["goodput"]
