"""server_status run in-process: a temporary record, unit and env file, a fake systemctl and
a fake SGLang HTTP server on loopback."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.sglang.plugins.modules import server_status
from ansible_collections.gpufleet.sglang.tests.doubles import QuietHandler, start_http, stop_http

METRICS = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="kimi",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 4.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="kimi",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 1.0
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="kimi",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 260.5
"""

SYSTEMCTL = r"""#!/bin/sh
echo "systemctl $*" >> "$FAKE_STATE/calls"
[ "$1" = show ] || { echo "read-only test: $1" >&2; exit 1; }
cat "$FAKE_STATE/show"
"""


class FakeSGLang:
    """``routes``: path -> (status, body)."""

    def __init__(self, routes):
        self.routes = routes
        self.hits = []
        outer = self

        class Handler(QuietHandler):
            def do_GET(self):
                outer.hits.append(self.path)
                code, body = outer.routes.get(self.path, (404, b""))
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = start_http(Handler)
        self.port = self.httpd.server_address[1]

    def close(self):
        stop_http(self.httpd)


class Host(object):
    def __init__(self, tmp_path, monkeypatch):
        self.tmp = tmp_path
        self.state = tmp_path / "state"
        self.bin = tmp_path / "bin"
        self.unit_dir = tmp_path / "etc" / "systemd" / "system"
        self.config_dir = tmp_path / "etc" / "sglang"
        self.record = tmp_path / "etc" / "ansible" / "facts.d" / "sglang.fact"
        for path in (self.state, self.bin, self.unit_dir, self.config_dir, self.record.parent):
            path.mkdir(parents=True)
        systemctl = self.bin / "systemctl"
        systemctl.write_text(SYSTEMCTL)
        systemctl.chmod(0o755)
        monkeypatch.setenv("PATH", "%s:%s" % (self.bin, os.environ["PATH"]))
        monkeypatch.setenv("FAKE_STATE", str(self.state))
        self.unit = self.unit_dir / "sglang.service"
        self.env = self.config_dir / "sglang.env"
        self.unit.write_text("[Service]\nExecStart=/opt/sglang/0.5.9/bin/python -m sglang.launch_server\n")
        self.env.write_text("HOME=/var/lib/sglang\n")
        self.show(active=True)

    def sha1(self, path):
        return hashlib.sha1(path.read_bytes()).hexdigest()

    def write_record(self, port, release="0.5.9", env=True):
        rec = {"strategy": "ep8", "release": release, "unit_sha1": self.sha1(self.unit), "port": port,
               "service": "sglang", "deployed_at": "2026-12-01T00:50:00Z"}
        if env:
            rec["env_sha1"] = self.sha1(self.env)
        self.record.write_text(json.dumps(rec))

    def show(self, active):
        started = int(__import__("time").monotonic() * 1000000) - 125 * 1000000
        (self.state / "show").write_text(
            "ActiveState=%s\nSubState=%s\nMainPID=%d\nExecMainStartTimestampMonotonic=%d\n"
            "ActiveEnterTimestampMonotonic=%d\n"
            % (("active", "running", 4321, started, started) if active else ("inactive", "dead", 0, 0, 0)))

    def args(self, port, **over):
        args = dict(name="h1", port=port, unit_dir=str(self.unit_dir), config_dir=str(self.config_dir),
                    record_path=str(self.record), request_timeout=2)
        args.update(over)
        return args

    def calls(self):
        path = self.state / "calls"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def host(tmp_path, monkeypatch):
    return Host(tmp_path, monkeypatch)


@pytest.fixture
def ours(monkeypatch):
    """The port's holder is our unit (the real check sees this test process)."""
    monkeypatch.setattr(server_status._port_owner, "inspect",
                        lambda port, service, active, record_port, proc_root="/proc":
                        {"port": port, "owner": "ours", "programs": [], "pids": []})


def test_healthy_host(run_module, host, ours):
    srv = FakeSGLang({"/health": (200, b""), "/metrics": (200, METRICS.encode())})
    try:
        host.write_record(srv.port)
        result, failed = run_module(server_status, host.args(None))  # port from the record
    finally:
        srv.close()
    assert not failed, result
    row = result["row"]
    assert result["changed"] is False
    assert row["ok"] and row["healthy"] and row["problems"] == [] and row["drift"] == []
    assert (row["strategy"], row["release"], row["deployed_at"]) == ("ep8", "0.5.9", "2026-12-01T00:50:00Z")
    assert row["main_pid"] == 4321 and 124 <= row["uptime_s"] <= 130
    assert (row["ready_route"], row["ready"], row["ready_detail"]) == ("/health", True, "200")
    assert (row["running"], row["queued"], row["gen_throughput"], row["metrics"]) == (4, 1, 260.5, "ok")
    assert row["port"] == srv.port and row["line"].startswith("h1 ")
    assert result["header"].startswith("HOST ")
    assert srv.hits == ["/health", "/metrics"]
    assert host.calls() == ["systemctl show sglang.service -p ActiveState -p SubState -p MainPID "
                            "-p ExecMainStartTimestampMonotonic -p ActiveEnterTimestampMonotonic"]


def test_readiness_route_follows_the_recorded_release(run_module, host, ours):
    srv = FakeSGLang({"/ready": (503, b""), "/health": (200, b"")})
    try:
        host.write_record(srv.port, release="0.5.23")
        result, failed = run_module(server_status, host.args(srv.port, metrics=False))
    finally:
        srv.close()
    assert not failed
    row = result["row"]
    assert row["ready_route"] == "/ready" and row["ready"] is False
    assert row["problems"] == ["not ready (/ready: 503 Service Unavailable)"]
    assert row["metrics"] == "not read" and srv.hits == ["/ready"]


def test_drift_of_unit_and_env(run_module, host, ours):
    srv = FakeSGLang({"/health": (200, b"")})
    try:
        host.write_record(srv.port)
        with host.unit.open("a") as fh:
            fh.write("# a local edit\n")
        result, dummy = run_module(server_status, host.args(srv.port))
        assert result["row"]["drift"] == ["unit file differs from the deployment record"]
        assert result["row"]["healthy"] and not result["row"]["ok"]
        host.write_record(srv.port)
        host.env.write_text("HOME=/elsewhere\n")
        result, dummy = run_module(server_status, host.args(srv.port))
        assert result["row"]["drift"] == ["environment file differs from the deployment record"]
        host.env.unlink()
        result, dummy = run_module(server_status, host.args(srv.port))
        assert result["row"]["drift"] == ["environment file is missing"]
    finally:
        srv.close()
    # metrics off is reported, not a problem
    assert result["row"]["metrics"].startswith("off (404")


def test_port_held_by_another_process(run_module, host):
    """The real port check: the fake server is held by this test process, not by sglang.service."""
    srv = FakeSGLang({"/health": (200, b"")})
    try:
        host.write_record(srv.port)
        result, failed = run_module(server_status, host.args(srv.port))
    finally:
        srv.close()
    assert not failed
    row = result["row"]
    assert result["row"]["port_owner"]["owner"] == "other"
    assert len(row["drift"]) == 1 and row["drift"][0].startswith("port %d is held by " % srv.port)
    assert str(os.getpid()) in row["drift"][0] and not row["ok"]


def test_stopped_server_is_reported_not_failed(run_module, host, ours):
    host.write_record(1)  # nothing listens on port 1
    host.show(active=False)
    result, failed = run_module(server_status, host.args(None, request_timeout=1))
    assert not failed
    row = result["row"]
    assert row["active_state"] == "inactive" and row["main_pid"] is None and row["uptime_s"] is None
    assert row["problems"] == ["unit sglang.service is inactive", "not ready (/health: connection refused)"]
    assert row["metrics"].startswith("unavailable (connection refused")


def test_no_record(run_module, host, ours):
    result, failed = run_module(server_status, host.args(1))
    assert not failed
    row = result["row"]
    assert not row["deployed"] and row["release"] is None and row["ready_route"] is None
    assert row["problems"][0] == "no deployment record (%s)" % host.record
    assert row["drift"] == []


def test_check_mode_reads_the_same(run_module, host, ours):
    host.write_record(1)
    result, failed = run_module(server_status, dict(host.args(1), _ansible_check_mode=True))
    assert not failed and result["changed"] is False and result["row"]["strategy"] == "ep8"


@pytest.mark.parametrize("over,needle", [
    ({"port": 0}, "port must be between 1 and 65535"),
    ({"port": 70000}, "port must be between 1 and 65535"),
    ({"request_timeout": 0}, "request_timeout must be greater than 0"),
    ({"release": "not-a-release"}, "cannot read an SGLang version"),
    ({"service": "a/b"}, "service must be a unit name"),
])
def test_bad_arguments_fail(run_module, host, over, needle):
    result, failed = run_module(server_status, dict(host.args(30000), **over))
    assert failed and needle in result["msg"]


@pytest.fixture
def pd_process():
    """A process whose command line is a PD server's (it only sleeps): /proc/<pid>/cmdline is
    what the module reads."""
    started = []

    def start(*flags):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m",
                                 "sglang.launch_server", "--model-path", "/m"] + list(flags))
        started.append(proc)
        return proc.pid

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_the_pd_role_is_read_from_what_runs(run_module, host, ours, pd_process):
    """The record says decode; the main process runs prefill on bootstrap port 9001: the row
    says prefill (from the process) and names the drift. Control: the process as recorded."""
    pid = pd_process("--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "9001")
    host.write_record(1)
    rec = json.loads(host.record.read_text())
    rec["argv"] = ["--model-path", "/m", "--disaggregation-mode", "decode"]
    host.record.write_text(json.dumps(rec))
    show = (host.state / "show").read_text().replace("MainPID=4321", "MainPID=%d" % pid)
    (host.state / "show").write_text(show)
    result, failed = run_module(server_status, host.args(1, request_timeout=1, metrics=False))
    assert not failed
    row = result["row"]
    assert (row["pd_role"], row["pd_source"], row["pd_bootstrap_port"]) == ("prefill", "process", 9001)
    assert row["drift"] == ["the process runs as prefill (--disaggregation-mode prefill), the "
                            "deployment record says decode"]
    rec["argv"] = ["--model-path", "/m", "--disaggregation-mode", "prefill"]
    host.record.write_text(json.dumps(rec))
    result, failed = run_module(server_status, host.args(1, request_timeout=1, metrics=False))
    assert result["row"]["drift"] == [] and result["row"]["pd_role"] == "prefill"
    # the unit stopped: no process, the record's role
    host.show(active=False)
    result, failed = run_module(server_status, host.args(1, request_timeout=1, metrics=False))
    assert (result["row"]["pd_role"], result["row"]["pd_source"]) == ("prefill", "record")
