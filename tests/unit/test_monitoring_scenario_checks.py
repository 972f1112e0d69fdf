# -*- coding: utf-8 -*-
"""The monitoring scenario's check scripts (extensions/molecule/monitoring/files/): targets.py,
which replaced the Jinja that dug through Prometheus' /api/v1/targets (map, unique, groupby),
and alert_clock.py's bound, which replaced the Jinja that parsed the rules' durations with
``regex_replace('s$', '') | int`` (issue 47).

The targets are shaped as Prometheus 2.42 answers ``/api/v1/targets?state=active`` for the
file_sd groups the monitoring role writes: each target's labels are the group's labels
(plugins/module_utils/monitoring/_monitoring.py server_targets / router_targets, from the
scenario's inventory) plus the ``job`` and ``instance`` Prometheus adds. Each check has a
control: the bad input it exists to catch."""

import argparse
import importlib.util
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.monitoring import _monitoring
from ansible_collections.gpufleet.sglang.tests.paths import ROOT

FILES = os.path.join(ROOT, "extensions", "molecule", "monitoring", "files")


def _load(name):
    spec = importlib.util.spec_from_file_location("monitoring_" + name, os.path.join(FILES, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


targets = _load("targets")
alert_clock = _load("alert_clock")

SERVERS = ["gpufleet-mon-1", "gpufleet-mon-2"]
ROUTER = "gpufleet-mon-r"


def hostvars(strategy="pp8", release="0.5.9"):
    """The scenario's hosts as the monitoring role sees them (site testbed, the record of a
    pp8 deploy of 0.5.9, the router's worker URLs)."""
    out = {}
    for i, host in enumerate(SERVERS):
        out[host] = {"sglang_site": "testbed", "sglang_router_worker_url": "http://10.88.0.%d:30000" % (2 + i),
                     "ansible_local": {"sglang": {"strategy": strategy, "release": release}}}
    out[ROUTER] = {"sglang_site": "testbed", "router_version": "1.13.0", "sglang_node_address": "10.88.0.4",
                   "router_prometheus_host": "0.0.0.0"}
    return out


def active_targets(hv=None, health=("up", "up", "up")):
    """``/api/v1/targets?state=active`` for the role's file_sd groups."""
    hv = hv or hostvars()
    groups = {"sglang_servers": SERVERS, "sglang_routers": [ROUTER]}
    sd = ([("sglang_server", g) for g in _monitoring.server_targets(SERVERS, groups, hv, "sglang_servers")]
          + [("sglang_router", g) for g in _monitoring.router_targets([ROUTER], hv)])
    active = []
    for (job, group), state in zip(sd, health):
        instance = group["targets"][0]
        labels = dict(group["labels"], job=job, instance=instance)
        active.append({
            "discoveredLabels": dict(("__meta_filepath" if k == "job" else k, v) for k, v in labels.items()),
            "labels": labels, "scrapePool": job, "scrapeUrl": "http://%s/metrics" % instance,
            "globalUrl": "http://%s/metrics" % instance, "lastError": "" if state == "up" else "connection refused",
            "lastScrape": "2026-12-08T10:00:00.000Z", "lastScrapeDuration": 0.002, "health": state,
            "scrapeInterval": "2s", "scrapeTimeout": "2s"})
    return {"status": "success", "data": {"activeTargets": active}}


def test_three_targets_up_carry_what_runs_where():
    got = targets.figures(200, active_targets(), 3)
    assert got["ready"] is True and got["count"] == 3 and got["healths"] == ["up"]
    server, router = got["jobs"]["sglang_server"], got["jobs"]["sglang_router"]
    assert server["count"] == 2 and server["labels"]["host"] == SERVERS
    assert server["labels"]["strategy"] == ["pp8"] and server["labels"]["release"] == ["0.5.9"]
    assert server["labels"]["site"] == ["testbed"]
    assert router["count"] == 1 and router["labels"]["host"] == [ROUTER]
    assert router["labels"]["group"] == ["sglang_servers"]
    assert [one["host"] for one in got["labels"]] == SERVERS + [ROUTER]


def test_not_ready_controls_a_target_down_one_missing_no_answer():
    down = targets.figures(200, active_targets(health=("up", "down", "up")), 3)
    assert down["ready"] is False and down["healths"] == ["up", "down"]
    unknown = targets.figures(200, active_targets(health=("unknown", "unknown", "unknown")), 3)
    assert unknown["ready"] is False
    two = active_targets()
    del two["data"]["activeTargets"][1]
    assert targets.figures(200, two, 3)["ready"] is False
    refused = targets.figures(-1, None, 3, "connection refused")
    assert refused["ready"] is False and refused["count"] == 0 and refused["error"] == "connection refused"
    odd = targets.figures(200, {"status": "error", "error": "bad"}, 3)
    assert odd["ready"] is False and "activeTargets" in odd["error"]


def test_labels_controls_another_strategy_a_duplicate_target():
    mixed = hostvars()
    mixed[SERVERS[1]]["ansible_local"]["sglang"]["strategy"] = "tp8"
    got = targets.figures(200, active_targets(mixed), 3)
    assert got["jobs"]["sglang_server"]["labels"]["strategy"] == ["pp8", "tp8"]
    twice = active_targets()
    twice["data"]["activeTargets"][1] = twice["data"]["activeTargets"][0]
    got = targets.figures(200, twice, 3)
    assert got["jobs"]["sglang_server"]["labels"]["host"] == [SERVERS[0]]
    assert got["jobs"]["sglang_server"]["count"] == 2


class _Prometheus(BaseHTTPRequestHandler):
    answer = None

    def do_GET(self):  # noqa: N802 (http.server's name)
        assert self.path == "/api/v1/targets?state=active"
        data = json.dumps(self.answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_the_command_line_reads_prometheus_once(capsys):
    _Prometheus.answer = active_targets()
    server = HTTPServer(("127.0.0.1", 0), _Prometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = "http://127.0.0.1:%d/" % server.server_address[1]
        assert targets.main(["--prometheus", url, "--expect", "3"]) == 0
        assert json.loads(capsys.readouterr().out)["ready"] is True
    finally:
        server.shutdown()
        server.server_close()
    # control: nothing listens any more; still one JSON object, not ready
    assert targets.main(["--prometheus", url, "--expect", "3"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["status"] == -1 and got["ready"] is False


# --- alert_clock: the rules' durations and the bound -------------------------------------------

def test_durations_as_prometheus_writes_them():
    assert alert_clock.duration_s("10s") == 10 and alert_clock.duration_s("2s") == 2
    assert alert_clock.duration_s("1m30s") == 90 and alert_clock.duration_s("500ms") == 0.5
    assert alert_clock.duration_s("0") == 0 and alert_clock.duration_s("1h") == 3600
    # the scenario's inventory (group_vars/sglang_monitoring.yml): for 10s, scrape and evaluation 2s
    assert alert_clock.bounds(10, 2, 2) == {"for_s": 10, "bound_s": 15}
    assert alert_clock.bounds(10) == {"for_s": 10} and alert_clock.bounds(None, 2, 2) == {}


def test_duration_controls_a_minute_is_not_zero_and_a_bare_number_is_refused():
    # the Jinja it replaced: "1m" | regex_replace('s$', '') | int read 0, a bound of 5 s
    assert alert_clock.bounds(alert_clock.duration_s("1m"), 2, 2)["bound_s"] == 65
    for bad in ("10", "s", "1s1m", "-1s", "1.5s", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            alert_clock.duration_s(bad)


def test_the_clock_refuses_a_bad_for_before_it_acts():
    with pytest.raises(SystemExit):
        alert_clock.main(["--prometheus", "http://127.0.0.1:1", "--alert", "A", "--host", "h",
                          "--until", "firing", "--for", "ten", "stop", "gpufleet-mon-1"])
