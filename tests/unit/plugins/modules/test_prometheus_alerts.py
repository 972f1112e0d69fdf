"""prometheus_alerts against a local HTTP server answering as Prometheus' /api/v1/alerts."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.monitoring import _monitoring as m
from ansible_collections.gpufleet.sglang.plugins.modules import prometheus_alerts

DOC = {"status": "success", "data": {"alerts": [
    {"labels": {"alertname": "SGLangServerNotReady", "host": "gpu-2", "severity": "critical"},
     "annotations": {"summary": "SGLang server gpu-2 is not ready"}, "state": "firing",
     "activeAt": "2026-12-01T15:00:00Z", "value": "0e+00"},
    {"labels": {"alertname": "SGLangKVCacheNearlyFull", "host": "gpu-1", "severity": "warning"},
     "annotations": {"summary": "KV cache of gpu-1 is nearly full"}, "state": "pending",
     "activeAt": "2026-12-01T15:01:00Z"},
    {"labels": {"alertname": "SGLangRouterMissingWorkers", "host": "rt-1", "severity": "warning"},
     "annotations": {"summary": "Router rt-1 routes to fewer servers than are up"},
     "state": "firing", "activeAt": "2026-12-01T15:02:00Z"},
    {"labels": {"alertname": "Watchdog", "severity": "none"}, "annotations": {},
     "state": "firing", "activeAt": "2026-12-01T14:00:00Z"},
]}}


@pytest.fixture
def prometheus():
    answers = {"/api/v1/alerts": (200, DOC)}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            status, body = answers.get(self.path, (404, {"error": "not found"}))
            data = json.dumps(body).encode() if not isinstance(body, bytes) else body
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d" % srv.server_address[1], answers
    srv.shutdown()


def test_firing_only_sorted_and_filtered():
    rows = m.firing_alerts(DOC)
    assert [(r["host"], r["alertname"]) for r in rows] == [
        ("", "Watchdog"), ("gpu-2", "SGLangServerNotReady"), ("rt-1", "SGLangRouterMissingWorkers")]
    assert rows[1]["since"] == "2026-12-01T15:00:00Z" and "gpu-2 is not ready" in rows[1]["line"]
    # hosts of the play: others' alerts go, host-less ones stay
    assert [r["alertname"] for r in m.firing_alerts(DOC, ["gpu-1", "gpu-2"])] == [
        "Watchdog", "SGLangServerNotReady"]
    with pytest.raises(m.MonitoringError, match="http://p:9090/api/v1/alerts did not answer"):
        m.firing_alerts({"status": "error"}, prometheus_url="http://p:9090/")


def test_module_reads_a_prometheus(run_module, prometheus):
    url, answers = prometheus
    result, failed = run_module(prometheus_alerts, {"url": url + "/", "hosts": ["gpu-2", "rt-1"]})
    assert not failed and not result["changed"]
    assert result["count"] == 3
    assert [r["alertname"] for r in result["alerts"]] == [
        "Watchdog", "SGLangServerNotReady", "SGLangRouterMissingWorkers"]
    answers["/api/v1/alerts"] = (503, {"status": "error"})
    result, failed = run_module(prometheus_alerts, {"url": url})
    assert failed and "answered 503" in result["msg"] and url in result["msg"]
    answers["/api/v1/alerts"] = (200, b"not json")
    result, failed = run_module(prometheus_alerts, {"url": url})
    assert failed and "cannot read /api/v1/alerts" in result["msg"]


def test_module_names_an_unreachable_prometheus(run_module):
    result, failed = run_module(prometheus_alerts, {"url": "http://127.0.0.1:9", "timeout": 2})
    assert failed and "status_prometheus_url=http://127.0.0.1:9" in result["msg"]
