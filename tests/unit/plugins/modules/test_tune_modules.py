"""tune_plan, tune_record and tune_report through ansible-playbook on localhost: the
argument specs, the action plugins' glue, check mode and the files written."""

import os
import sys

from localhost_play import run_tasks

from ansible_collections.gpufleet.sglang.tests.paths import ROOT, SGLANG_HELP

HELP = os.path.join(SGLANG_HELP, "sglang-0.5.9.txt")

OK_PREFLIGHT = {"version": "0.5.9", "argv": ["--tp-size", "8"], "gpus": {"count": 8, "name": "RTX"},
                "layout": {"gpus": 8, "nnodes": 1},
                "server_args": {"verdict": "ok", "derived": {"cuda_graph_max_bs": 32}, "changes": []}}
RUN = {"concurrency": 4, "output_tok_s": 800, "mean_tpot_ms": 20, "p99_tpot_ms": 30,
       "p99_ttft_ms": 100, "median_ttft_ms": 50, "failed": 0}


def play(tmp_path, check=False):
    sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))
    from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import parse_help  # pylint: disable=import-outside-toplevel
    with open(HELP) as handle:
        flags = parse_help(handle.read())["flags"]
    journal = str(tmp_path / "j" / "journal.jsonl")
    nxt = {"mode": "next", "candidates": "{{ space.candidates }}", "journal": journal,
           "hosts": ["h1", "h2"], "slo": {"tpot_p99_ms": 50},
           "load": {"input_len": 8, "output_len": 8, "concurrencies": [4]},
           "preflight": {"c01-tp8": OK_PREFLIGHT, "c02-tp8": OK_PREFLIGHT,
                         "c03-ep8": dict(OK_PREFLIGHT, argv=["--ep", "8"]),
                         "c04-ep8": {"failed": False, "failed_when_result": False, "msg": "does not fit"}}}
    tasks = [
        {"name": "expand", "register": "space", "gpufleet.sglang.tune_plan": {
            "mode": "expand", "release": "0.5.9", "flags": flags,
            "space": {"strategies": ["tp8", "ep8"], "knobs": {"--cuda-graph-max-bs": [32, 64]}}}},
        {"name": "bad space", "register": "bad", "ignore_errors": True, "gpufleet.sglang.tune_plan": {
            "mode": "expand", "release": "0.5.9", "flags": flags,
            "space": {"strategies": ["tq8"], "knobs": {"--nope": [1]}}}},
        {"name": "round 1", "register": "r1", "gpufleet.sglang.tune_plan": nxt},
        {"name": "record", "register": "rec", "loop": ["h1", "h2"], "gpufleet.sglang.tune_record": {
            "journal": journal, "candidate": "{{ r1.assignment[item] }}", "host": "{{ item }}",
            "runs": [RUN], "slo": {"tpot_p99_ms": 50}}},
        {"name": "round 2", "register": "r2", "gpufleet.sglang.tune_plan": nxt},
        {"name": "report", "register": "rep", "gpufleet.sglang.tune_report": {
            "journal": journal, "plan": "{{ r2 }}", "slo": {"tpot_p99_ms": 50},
            "dest": str(tmp_path / "reports" / "tune-x")}},
        {"name": "out", "ansible.builtin.copy": {
            "dest": str(tmp_path / "out.json"),
            "content": "{{ {'space': space, 'bad': bad, 'r1': r1, 'rec': rec, 'r2': r2, 'rep': rep} | to_json }}"},
         "check_mode": False},
    ]
    return run_tasks(tmp_path, tasks, check), journal


def test_a_tune_through_the_action_plugins(tmp_path):
    out, journal = play(tmp_path)
    assert out["space"]["space_size"] == 4 and out["space"]["knobs"] == ["--cuda-graph-max-bs"]
    assert out["bad"]["failed"] and "'tq8'" in out["bad"]["msg"] and "--nope" in out["bad"]["msg"]
    r1 = out["r1"]
    assert r1["method"] == "exhaustive" and not r1["done"]
    assert sorted(c["id"] for c in r1["assignment"].values()) == ["c01-tp8", "c03-ep8"]
    refused = dict((r["id"], r["reason"]) for r in r1["refused"])
    assert "rewritten" in [r["verdict"] for r in r1["refused"]] and refused["c04-ep8"] == "does not fit"
    assert [r["goodput"] for r in out["rec"]["results"]] == [100.0, 100.0]
    assert all(r["changed"] for r in out["rec"]["results"])
    assert out["r2"]["done"] and out["r2"]["measured"] == 2
    rep = out["rep"]
    assert rep["winner"]["id"] == "c01-tp8" and len(rep["files"]) == 3
    for name in rep["files"]:
        assert os.path.getsize(name) > 0
    with open(journal) as handle:
        assert len(handle.read().splitlines()) == 2


def test_check_mode_writes_nothing(tmp_path):
    out, journal = play(tmp_path, check=True)
    assert not os.path.exists(journal)
    assert [r["appended"] for r in out["rec"]["results"]] == [False, False]
    assert not os.path.exists(str(tmp_path / "reports"))
    assert len(out["rep"]["files"]) == 3
