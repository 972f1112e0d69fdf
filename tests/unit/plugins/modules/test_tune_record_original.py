"""tune_record's modes original and stays, and a trial's own wall time, through
ansible-playbook on localhost: the argument spec, the action plugin's glue, check mode."""

import json
import os
import time

from localhost_play import run_tasks


def _row(strategy):
    return {"deployed": strategy is not None, "strategy": strategy,
            "release": "0.5.9" if strategy else None, "deployed_at": None}


CAND = {"id": "c01-tp8", "strategy": "tp8", "extra_args": {}, "fingerprint": "f1",
        "argv": ["--tp-size", "8"], "gpus": {"name": "RTX", "count": 8, "used": 8}}
RUN = {"concurrency": 4, "output_tok_s": 800, "mean_tpot_ms": 20, "p99_tpot_ms": 30,
       "p99_ttft_ms": 100, "median_ttft_ms": 50, "failed": 0}


def play(tmp_path, check=False):
    journal = str(tmp_path / "j" / "journal.jsonl")
    started = time.time() - 300.0  # five minutes ago

    def original(name, host, strategy):
        return {"name": name, "register": name, "gpufleet.sglang.tune_record": {
            "mode": "original", "journal": journal, "host": host, "row": _row(strategy),
            "strategy": "tp8"}}

    tasks = [
        original("first", "h1", "pp8"),
        original("resumed", "h1", "ep8"),   # the killed run's trial rewrote the record
        original("fresh", "h2", None),      # nothing deployed before the tune
        {"name": "no row", "register": "norow", "ignore_errors": True,
         "gpufleet.sglang.tune_record": {"mode": "original", "journal": journal, "host": "h3"}},
        {"name": "trial", "register": "trial", "gpufleet.sglang.tune_record": {
            "journal": journal, "candidate": CAND, "host": "h1", "runs": [RUN],
            "started": started, "ended_ago": 100.0}},
        {"name": "no candidate", "register": "nocand", "ignore_errors": True,
         "gpufleet.sglang.tune_record": {"journal": journal, "host": "h1"}},
        {"name": "stays", "register": "stays", "gpufleet.sglang.tune_record": {
            "mode": "stays", "journal": journal, "host": "h1", "keep": "original",
            "strategy": "{{ resumed.restore.strategy }}"}},
        original("next_tune", "h1", "tp8"),
        {"name": "out", "ansible.builtin.copy": {
            "dest": str(tmp_path / "out.json"),
            "content": "{{ {'first': first, 'resumed': resumed, 'fresh': fresh, 'norow': norow,"
                       " 'trial': trial, 'nocand': nocand, 'stays': stays, 'next_tune': next_tune}"
                       " | to_json }}"},
         "check_mode": False},
    ]
    return run_tasks(tmp_path, tasks, check), journal, started


def test_original_is_noted_once_per_tune_and_a_trial_gets_its_own_wall_time(tmp_path):
    out, journal, started = play(tmp_path)
    assert out["first"]["changed"] and out["first"]["original"]["strategy"] == "pp8"
    assert not out["resumed"]["changed"] and out["resumed"]["restore"]["strategy"] == "pp8"
    assert out["resumed"]["restore"]["says"] == "pp8 (what ran before)"
    assert out["fresh"]["restore"] == {
        "strategy": "tp8", "source": "inventory",
        "says": "tp8 (nothing was deployed before the tune: the inventory's strategy)"}
    assert out["norow"]["failed"] and "needs row" in out["norow"]["msg"]
    assert out["nocand"]["failed"] and "candidate must be" in out["nocand"]["msg"]
    # started five minutes ago, its measurement ended 100 s before the task: about 200 s
    wall = out["trial"]["record"]["wall_s"]
    assert 199.0 <= wall <= 230.0, wall
    assert out["trial"]["record"]["started"] == round(started, 3)
    assert out["stays"]["changed"] and out["stays"]["record"]["strategy"] == "pp8"
    assert out["next_tune"]["changed"] and out["next_tune"]["restore"]["strategy"] == "tp8"
    with open(journal) as handle:
        kinds = [(json.loads(ln)["kind"], json.loads(ln)["host"]) for ln in handle]
    assert kinds == [("original", "h1"), ("original", "h2"), ("trial", "h1"), ("stays", "h1"),
                     ("original", "h1")]


def test_check_mode_notes_nothing(tmp_path):
    out, journal, _started = play(tmp_path, check=True)
    assert not os.path.exists(journal)
    assert not out["first"]["appended"] and out["resumed"]["restore"]["strategy"] == "ep8"
    assert not out["stays"]["appended"] and not out["trial"]["appended"]
