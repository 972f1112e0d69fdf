# -*- coding: utf-8 -*-
"""The router scenario's outcome of a run (extensions/molecule/router/files/run_outcome.py),
which replaced the Jinja and awk that parsed the load clients' files, the deploy's
ROUTER-SWITCH lines and the router's /proc files (issue 47). The inputs are shaped as the
scenario writes them: tests/loadgen's JSON, a deploy's output, ``MainPID`` + stat + status."""

import importlib.util
import json
import os

import pytest

from ansible_collections.gpufleet.sglang.tests.paths import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "run_outcome", os.path.join(ROOT, "extensions", "molecule", "router", "files", "run_outcome.py"))
outcome = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(outcome)

ROUTERS = ["gpufleet-router-r", "gpufleet-router-r2"]


def _client(requests, lost, long=None, incomplete=0):
    summary = {"requests": requests, "ok": requests - lost, "failed": lost, "truncated": 0, "lost": lost,
               "wall_s": 60.0, "concurrency": 4}
    if long is not None:
        summary["long"] = long
    records = [{"route": "/generate", "stream": True, "status": 200, "complete": True, "seq": i}
               for i in range(requests - incomplete)]
    records += [{"route": "/generate", "stream": True, "status": 502, "complete": False, "seq": i}
                for i in range(incomplete)]
    return {"summary": summary, "records": records}


def _write_clients(work, run, docs):
    for router, doc in zip(ROUTERS, docs):
        with open(os.path.join(str(work), "%s-%s.json" % (run, router)), "w", encoding="utf-8") as handle:
            json.dump(doc, handle)


def _proc(pid, utime, stime, hwm, threads, comm="smg::router"):
    stat = "%d (%s) S 1 %d %d 0 -1 4194560 8129 0 2 0 %d %d 0 0 20 0 %d 0 3636843 936144896 14902" % (
        pid, comm, pid, pid, utime, stime, threads)
    status = "Name:\t%s\nState:\tS (sleeping)\nVmHWM:\t  %d kB\nVmRSS:\t   59608 kB\nThreads:\t%d\n" % (
        comm, hwm, threads)
    return "%d\n%s\n%s" % (pid, stat, status)


DEPLOY = """TASK [gpufleet.sglang.server : Report the switch's time in the routers] ***
ok: [gpufleet-router-1] =>
    msg: ROUTER-SWITCH gpufleet-router-1 out=0.093 drain=3.381 switch=9.805 restart=6.952 readd=0.146
        routers=2 busy=3
ok: [gpufleet-router-2] =>
    msg: ROUTER-SWITCH gpufleet-router-2 out=0.061 drain=3.288 switch=6.25 restart=5.391 readd=0.122 routers=2
        held busy=0
PLAY RECAP ***
"""


def test_the_clients_are_summed_and_ten_incomplete_records_kept(tmp_path):
    _write_clients(tmp_path, "drain", [_client(490, 0, long=24), _client(300, 12, incomplete=12)])
    got = outcome.load_outcome(str(tmp_path), "drain", ROUTERS)
    assert got["load"] == {"requests": 790, "failed": 12, "truncated": 0, "lost": 12, "long": 24}
    assert got["by_router"]["gpufleet-router-r"]["requests"] == 490
    assert len(got["records"]) == 10 and not any(r["complete"] for r in got["records"])


def test_a_missing_client_file_or_summary_is_an_error_not_a_zero(tmp_path):
    _write_clients(tmp_path, "drain", [_client(490, 0)])  # the second router's file is missing
    with pytest.raises(outcome.Unreadable, match="drain-gpufleet-router-r2.json"):
        outcome.load_outcome(str(tmp_path), "drain", ROUTERS)
    broken = _client(10, 0)
    del broken["summary"]["lost"]
    _write_clients(tmp_path, "x", [_client(10, 0), broken])
    with pytest.raises(outcome.Unreadable, match="lost"):
        outcome.load_outcome(str(tmp_path), "x", ROUTERS)


def test_the_deploy_s_switch_lines_busy_and_the_router_s_cost():
    got = outcome.deploy_outcome(DEPLOY, 0, _proc(4109, 577, 371, 60000, 11), _proc(4109, 900, 500, 61440, 12))
    assert got["rc"] == 0
    assert got["switch"] == [
        "ROUTER-SWITCH gpufleet-router-1 out=0.093 drain=3.381 switch=9.805 restart=6.952 readd=0.146",
        "ROUTER-SWITCH gpufleet-router-2 out=0.061 drain=3.288 switch=6.25 restart=5.391 readd=0.122"]
    assert got["restart_s"] == [6.952, 5.391]
    assert got["drain_busy"] == [3, 0]
    assert got["router_cpu_s"] == pytest.approx((900 + 500 - 577 - 371) / 100)
    assert got["router_same_process"] is True
    assert got["router_peak_rss_mib"] == 60.0 and got["router_threads"] == 12
    assert "\n" not in got["stdout"] and "routers=2 held busy=0" in got["stdout"]


def test_a_restarted_router_is_another_process_and_a_comm_with_blanks_parses():
    got = outcome.deploy_outcome("", 2, _proc(4109, 10, 10, 1024, 5), _proc(5120, 1, 1, 2048, 5, comm="smg router"))
    assert got["router_same_process"] is False and got["rc"] == 2 and got["switch"] == []
    assert got["router_peak_rss_mib"] == 2.0


def test_a_reading_without_its_status_lines_is_refused():
    with pytest.raises(outcome.Unreadable, match="VmHWM"):
        outcome.process_reading("4109\n4109 (smg::router) S 1 4109 4109 0 -1 4194560 8129 0 2 0 5 5 0 0 20 0 11 0\n")
    with pytest.raises(outcome.Unreadable, match="MainPID"):
        outcome.process_reading("\n")


def test_the_command_line_prints_one_json_object(tmp_path, capsys):
    _write_clients(tmp_path, "nodrain", [_client(100, 3), _client(100, 5)])
    for name, text in (("out.log", DEPLOY), ("before", _proc(1, 1, 1, 1024, 1)), ("after", _proc(1, 2, 2, 1024, 1))):
        (tmp_path / name).write_text(text)
    rc = outcome.main(["deploy", "--work", str(tmp_path), "--run", "nodrain", "--router", ROUTERS[0],
                       "--router", ROUTERS[1], "--output", str(tmp_path / "out.log"), "--rc", "0",
                       "--cpu-before", str(tmp_path / "before"), "--cpu-after", str(tmp_path / "after")])
    got = json.loads(capsys.readouterr().out)
    assert rc == 0 and got["load"]["lost"] == 8 and len(got["switch"]) == 2
    assert outcome.main(["load", "--work", str(tmp_path), "--run", "absent", "--router", ROUTERS[0]]) == 1
