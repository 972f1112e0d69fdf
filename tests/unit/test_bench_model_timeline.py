"""scripts/bench-model's timeline: per file, the first and the last host's time of each
swarm event, on the machine's clock (each host's events are seconds from its own start);
the fan-out's time is read off it."""

import importlib.machinery
import importlib.util
import os

from ansible_collections.gpufleet.sglang.tests.paths import ROOT

_LOADER = importlib.machinery.SourceFileLoader(
    "gpufleet_bench_model", os.path.join(ROOT, "scripts", "bench-model"))
_SPEC = importlib.util.spec_from_loader(_LOADER.name, _LOADER)
bench = importlib.util.module_from_spec(_SPEC)
_LOADER.exec_module(bench)

RUN = {"per_host": {
    "gpufleet-bm-1": {"start_s": 0.0, "events": [[1.0, "verified", "b"], [5.0, "verified", "a"]]},
    "gpufleet-bm-2": {"start_s": 0.5, "events": [[1.0, "record", "b"], [3.0, "held", "b"],
                                                 [6.0, "record", "a"], [8.0, "sliced", "a"],
                                                 [12.0, "held", "a"]]},
    "gpufleet-bm-3": {"start_s": 2.0, "events": [[0.0, "record", "b"], [2.5, "held", "b"],
                                                 [4.0, "record", "a"], [5.0, "sliced", "a"],
                                                 [20.0, "stalled", "a"], [22.0, "held", "a"],
                                                 [30.0, "other", "a"]]},
    "gpufleet-bm-4": {"start_s": 0.2, "events": None}}}


def test_timeline_orders_files_by_their_first_event_and_spans_the_hosts():
    rows = bench.timeline(RUN)
    assert [path for path, _events in rows] == ["b", "a"]
    b, a = rows[0][1], rows[1][1]
    assert b == {"verified": (1.0, 1.0, 1), "record": (1.5, 2.0, 2), "held": (3.5, 4.5, 2)}
    assert a["verified"] == (5.0, 5.0, 1)
    assert a["record"] == (6.0, 6.5, 2)
    assert a["sliced"] == (7.0, 8.5, 2)  # host 3's clock starts 2 s later
    assert a["held"] == (12.5, 24.0, 2)
    assert a["stalled"] == (22.0, 22.0, 1)
    assert "other" not in a


def test_timeline_of_a_run_without_events_is_empty():
    assert bench.timeline({"per_host": {"h": {"start_s": 0.0, "events": None}}}) == []


def test_the_fanout_runs_from_the_first_record_to_the_last_file_held():
    assert bench.fanout_seconds(RUN) == 24.0 - 1.5


def _samples():
    """Counters (sent, received) of a seed and a peer, twice a second from t=100: the seed
    sends 1 MiB/s from 101 to 103, the peer receives what it sends."""
    mib = 1048576
    rows = []
    for i in range(11):
        when = 100.0 + i * 0.5
        sent = int(max(0.0, min(when, 103.0) - 101.0) * mib)
        rows.append((when, {"seed": (sent, 0), "peer": (0, sent)}))
    return rows


def test_link_rates_are_per_second_from_the_first_start():
    rates = bench.link_rates(_samples(), 100.0)
    assert [start for start, _row in rates] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [round(row["seed"][0], 3) for _start, row in rates] == [0.0, 1.0, 1.0, 0.0, 0.0]
    assert [round(row["peer"][1], 3) for _start, row in rates] == [0.0, 1.0, 1.0, 0.0, 0.0]
    assert all(row["seed"][1] == 0 for _start, row in rates)


def test_link_summary_spans_the_busy_seconds_only():
    rates = bench.link_rates(_samples(), 100.0)
    summary = bench.link_summary(rates, "seed", ["peer"], rate_mib=2)
    assert summary["seed_out"] == {"from_s": 1.0, "to_s": 3.0, "mib": 2.0, "busy": 0.5}
    assert summary["peers_in"]["peer"] == summary["seed_out"]
    # a link that never carried more than the threshold has no span
    assert bench.link_summary(rates, "peer", ["seed"], rate_mib=2)["seed_out"] is None
