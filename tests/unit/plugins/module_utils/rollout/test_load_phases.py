import json
import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._load_phases import (
    LoadProgress,
    journal_message,
    journal_time,
)

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "load_logs")


def _journal(release):
    """Journal entries (``journalctl -o json``) of one start, written from the release's own
    format strings: see the file:line table in _load_phases.py."""
    with open(os.path.join(DATA, "%s.jsonl" % release)) as fh:
        return [json.loads(line) for line in fh]


def _fold(entries, upto=None):
    progress = LoadProgress(journal_time(entries[0]) - 1)
    seen = []
    for entry in entries[:upto]:
        progress.feed(journal_time(entry), journal_message(entry))
        if not seen or seen[-1] != progress.phase:
            seen.append(progress.phase)
    return progress, seen


@pytest.mark.parametrize("release", ["0.4.6.post5", "0.5.4.post3", "0.5.9", "0.5.23"])
def test_a_start_goes_through_every_phase_in_order(release):
    entries = _journal(release)
    progress, seen = _fold(entries)
    assert seen == ["starting", "loading", "kv_cache", "cuda_graphs", "warmup", "ready"]
    assert progress.shards == {"done": 4, "total": 4, "percent": 100}
    report = progress.report(journal_time(entries[-1]))
    assert [d["phase"] for d in report["phases"]] == seen
    loading = [d for d in report["phases"] if d["phase"] == "loading"][0]
    assert loading["seconds"] > 0
    assert report["summary"].startswith("ready after ")
    assert "loading weights" in report["summary"] and "capturing CUDA graphs" in report["summary"]


@pytest.mark.parametrize("release, shards", [
    # up to 0.5.9 the bar format ends in a newline: each update is its own journal entry
    ("0.5.9", "1/4 shards (25%)"),
    # 0.5.23 joins the updates with carriage returns; the last one of the entry counts
    ("0.5.23", "2/4 shards (50%)"),
])
def test_shard_progress_while_loading(release, shards):
    entries = _journal(release)
    progress, _seen = _fold(entries, upto=4 if release == "0.5.9" else 3)
    assert progress.phase == "loading"
    line = progress.describe(journal_time(entries[3]) + 5)
    assert line.startswith("loading weights " + shards), line


def test_a_late_load_weight_end_does_not_go_back():
    # 0.5.23 logs "Load weight end. Committed real weights after CUDA graph capture"
    entries = _journal("0.5.23")
    progress, seen = _fold(entries)
    assert seen.count("kv_cache") == 1 and progress.phase == "ready"


def test_lines_users_posted_from_real_starts():
    progress = LoadProgress(0)
    phases = []
    shards = []
    with open(os.path.join(DATA, "issue_excerpts.txt")) as fh:
        for n, line in enumerate(fh):
            if line.startswith("# =="):
                if progress.phase != "starting":
                    phases.append(progress.phase)
                progress = LoadProgress(0)
                continue
            if line.startswith("#"):
                continue
            progress.feed(n, line.rstrip("\n"))
            if progress.shards:
                shards.append((progress.shards["done"], progress.shards["total"]))
    phases.append(progress.phase)
    assert phases == ["loading", "kv_cache", "cuda_graphs"]
    assert (13, 55) in shards and (1, 3) in shards and (14, 14) in shards


def test_capture_lines_of_each_release_open_the_capture_phase():
    for line in ("Capture cuda graph begin. This can take up to several minutes. avail mem=1 GB",
                 "Capture piecewise CUDA graph begin. avail mem=1 GB",
                 "Capture target decode CUDA graph begin. backend=full, avail mem=1 GB",
                 "Capture target prefill CUDA graph begin. backend=x, num_tokens=[1], avail mem=1 GB"):
        progress = LoadProgress(0).feed(1, line)
        assert progress.phase == "cuda_graphs", line
    for line in ("Capture cuda graph bs [1, 2, 4]", "Capture cuda graph failed: boom"):
        assert LoadProgress(0).feed(1, line).phase == "starting", line


def test_journal_message_decodes_byte_lists():
    assert journal_message({"MESSAGE": list(b"\rLoading 1/2\n")}) == "\rLoading 1/2\n"
    assert journal_message({"MESSAGE": "plain"}) == "plain"
    assert journal_message({}) == ""
    assert journal_time({"__REALTIME_TIMESTAMP": "1500000"}) == 1.5
    assert journal_time({}) is None


def test_describe_says_how_long():
    progress = LoadProgress(100)
    assert progress.describe(130) == "starting (port not open yet), 30.0s in this phase, 30.0s since start"
    progress.feed(160, "Load weight begin. avail mem=94.50 GB")
    assert progress.describe(250) == "loading weights, 1m30s in this phase, 2m30s since start"
