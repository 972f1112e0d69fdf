import json
import os
import socket
import stat
import time

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _net
from ansible_collections.gpufleet.sglang.plugins.modules import server_health
from ansible_collections.gpufleet.sglang.tests.doubles import QuietHandler, start_http, stop_http
from ansible_collections.gpufleet.sglang.tests.ports import connected_to_itself, free_port


class FakeServer:
    """Answers 503 on the readiness route until ``ready_after`` seconds, then 200."""

    def __init__(self, ready_after, route="/health"):
        self.ready_at = time.monotonic() + ready_after
        self.hits = []
        outer = self

        class Handler(QuietHandler):
            def do_GET(self):
                outer.hits.append(self.path)
                if self.path != route:
                    code = 404
                else:
                    code = 200 if time.monotonic() >= outer.ready_at else 503
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = start_http(Handler)
        self.port = self.httpd.server_address[1]

    def close(self):
        stop_http(self.httpd)


def test_waits_for_readiness_not_liveness(run_module):
    srv = FakeServer(ready_after=1.0, route="/health")
    try:
        result, failed = run_module(server_health, {
            "url": "http://127.0.0.1:%d" % srv.port, "release": "0.5.9",
            "timeout": 20, "interval": 0.1})
    finally:
        srv.close()
    assert not failed, result
    assert result["path"] == "/health"
    assert result["last_status"] == 200
    assert 0.9 <= result["elapsed"] < 5
    assert result["polls"] >= 3  # 503s were seen before the 200
    assert set(srv.hits) == {"/health"}
    assert result["changed"] is False


def test_route_follows_release(run_module):
    srv = FakeServer(ready_after=0, route="/ready")
    try:
        result, failed = run_module(server_health, {
            "url": "http://127.0.0.1:%d" % srv.port, "release": "0.5.23", "timeout": 5, "interval": 0.1})
    finally:
        srv.close()
    assert not failed and result["path"] == "/ready"


def test_times_out_when_the_port_never_opens(run_module):
    port = free_port()
    start = time.monotonic()
    result, failed = run_module(server_health, {
        "url": "http://127.0.0.1:%d" % port, "release": "0.5.9", "timeout": 1, "interval": 0.2})
    assert failed
    assert "port %d never opened" % port in result["msg"]
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("itself", [True, False])
def test_a_probe_connected_to_itself_is_no_open_port(run_module, monkeypatch, itself):
    port = free_port()
    probes = []
    real_create_connection = socket.create_connection
    listeners = []

    def create_connection(address, timeout=None):
        probes.append(address)
        if itself:
            return connected_to_itself(port)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # a real listener
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listeners.append(listener)
        return real_create_connection(listener.getsockname(), timeout=timeout)

    monkeypatch.setattr(_net.socket, "create_connection", create_connection)  # the probe
    try:
        result, failed = run_module(server_health, {
            "url": "http://127.0.0.1:%d" % port, "release": "0.5.9", "timeout": 1, "interval": 0.2})
    finally:
        for listener in listeners:
            listener.close()
    assert failed and probes and probes[0] == ("127.0.0.1", port)
    if itself:  # no HTTP request is made to a port that is not open
        assert "port %d never opened" % port in result["msg"], result["msg"]
        assert result["polls"] == 0
    else:  # the same fake with a listener on the other end counts as open
        assert "port %d never opened" % port not in result["msg"], result["msg"]
        assert result["polls"] > 0


def _fake_bin(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_fails_fast_with_the_journal_when_the_unit_fails(run_module, tmp_path, monkeypatch):
    # the unit is active at first, then fails (the second `systemctl show`)
    _fake_bin(tmp_path, "systemctl", """
count_file=%s/count
n=$(cat "$count_file" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$count_file"
if [ $n -le 1 ]; then
  printf 'ActiveState=activating\\nSubState=start\\nResult=success\\nNRestarts=0\\nMainPID=42\\n'
else
  printf 'ActiveState=failed\\nSubState=failed\\nResult=exit-code\\nNRestarts=0\\nMainPID=0\\n'
fi
""" % tmp_path)
    _fake_bin(tmp_path, "journalctl", "echo 'RuntimeError: CUDA out of memory'\n")
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    start = time.monotonic()
    result, failed = run_module(server_health, {
        "url": "http://127.0.0.1:9", "release": "0.5.9", "timeout": 600,
        "interval": 0.1, "unit": "sglang.service"})
    assert failed
    assert "failed state" in result["msg"]
    assert "CUDA out of memory" in result["msg"]
    assert result["journal"] == ["RuntimeError: CUDA out of memory"]
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("args, msg", [
    ({"release": "0.5.9", "timeout": -1}, "timeout must be greater than 0"),
    ({"release": "0.5.9", "url": "localhost:30000"}, "url must start with http"),
    ({"release": "nightly"}, "cannot read an SGLang version"),
    ({"release": "0.5.9", "progress_every": -1}, "progress_every must be 0"),
    ({"path": "health"}, "path must start with '/'"),
])
def test_bad_input(run_module, args, msg):
    result, failed = run_module(server_health, args)
    assert failed and msg in result["msg"]


STARTED = int(time.time()) - 10  # the unit's ExecMainStartTimestamp in these tests


def _journal_bin(tmp_path, messages):
    """A journalctl that answers this start's entries as ``-o json`` (and checks the match)."""
    lines = "\n".join(json.dumps({"__REALTIME_TIMESTAMP": str(int((STARTED + 1 + i) * 1e6)),
                                  "MESSAGE": m}) for i, m in enumerate(messages))
    (tmp_path / "journal.json").write_text(lines + "\n")
    _fake_bin(tmp_path, "journalctl", """
case "$*" in
  *_SYSTEMD_INVOCATION_ID=abc123*-o\\ json*) cat %s/journal.json ;;
  *) echo 'last plain line' ;;
esac
""" % tmp_path)


def _running_unit(tmp_path, then_failed=False):
    _fake_bin(tmp_path, "systemctl", """
count_file=%s/count
n=$(cat "$count_file" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$count_file"
if [ %d = 1 ] && [ $n -ge 3 ]; then
  printf 'ActiveState=failed\\nSubState=failed\\nResult=exit-code\\nNRestarts=0\\nMainPID=0\\n'
else
  printf 'ActiveState=active\\nSubState=running\\nResult=success\\nNRestarts=0\\nMainPID=42\\n'
fi
printf 'InvocationID=abc123\\nExecMainStartTimestamp=@%d\\n'
""" % (tmp_path, 1 if then_failed else 0, STARTED))


def test_returns_the_load_phase_every_progress_interval(run_module, tmp_path, monkeypatch):
    _running_unit(tmp_path)
    _journal_bin(tmp_path, ["[TP0] Load weight begin. avail mem=94.50 GB",
                            [13] + list(b"Loading safetensors checkpoint shards:  25% Completed"
                                        b" | 16/64 [00:01<?, ?it/s]\n")])
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    start = time.monotonic()
    result, failed = run_module(server_health, {
        "url": "http://127.0.0.1:9", "release": "0.5.9", "timeout": 600, "interval": 0.2,
        "unit": "sglang.service", "progress_every": 1})
    assert not failed, result
    assert time.monotonic() - start < 5
    assert result["ready"] is False
    assert result["phase"] == "loading"
    assert result["shards"] == {"done": 16, "total": 64, "percent": 25}
    assert result["summary"].startswith("loading weights 16/64 shards (25%)")
    assert [p["phase"] for p in result["phases"]] == ["starting", "loading"]
    assert result["phases"][0]["seconds"] == 1.0  # unit start to the first line, 1 s later


def test_a_crash_names_the_phase(run_module, tmp_path, monkeypatch):
    _running_unit(tmp_path, then_failed=True)
    _journal_bin(tmp_path, ["[TP0] Load weight begin. avail mem=94.50 GB",
                            "[TP0] Load weight end. type=X, avail mem=1 GB",
                            "[TP0] Capture cuda graph begin. This can take up to several minutes."])
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    result, failed = run_module(server_health, {
        "url": "http://127.0.0.1:9", "release": "0.5.9", "timeout": 600, "interval": 0.1,
        "unit": "sglang.service"})
    assert failed
    assert "failed state" in result["msg"]
    assert "it was capturing CUDA graphs" in result["msg"]
    assert result["phase"] == "cuda_graphs"


def test_a_timeout_names_the_phase(run_module, tmp_path, monkeypatch):
    _running_unit(tmp_path)
    _journal_bin(tmp_path, ["[TP0] Load weight begin. avail mem=94.50 GB"])
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    result, failed = run_module(server_health, {
        "url": "http://127.0.0.1:9", "release": "0.5.9", "timeout": 1, "interval": 0.2,
        "unit": "sglang.service", "progress_every": 30})
    assert failed
    # the wait spans several calls: it counts from the unit's start, 10 s before
    assert "s: port 9 never opened; it was loading weights" in result["msg"]
    assert int(result["msg"].split("not ready after ")[1].split(" s")[0]) >= 10


def test_ready_reports_each_phase(run_module):
    srv = FakeServer(ready_after=0.5, route="/health")
    try:
        result, failed = run_module(server_health, {
            "url": "http://127.0.0.1:%d" % srv.port, "release": "0.5.9", "timeout": 20,
            "interval": 0.1})
    finally:
        srv.close()
    assert not failed and result["ready"] is True
    # without a unit there is no journal: the port and the readiness route tell the phase
    assert [p["phase"] for p in result["phases"]] == ["starting", "warmup", "ready"]
    assert result["summary"].startswith("ready after ")


def test_returns_as_soon_as_the_phase_changes(run_module, tmp_path, monkeypatch):
    _running_unit(tmp_path)
    _journal_bin(tmp_path, ["[TP0] Load weight begin. avail mem=94.50 GB"])
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    args = {"url": "http://127.0.0.1:9", "release": "0.5.9", "timeout": 600, "interval": 0.2,
            "unit": "sglang.service", "progress_every": 30}
    start = time.monotonic()
    result, failed = run_module(server_health, dict(args, last_phase="starting"))
    assert not failed and result["phase"] == "loading"
    assert time.monotonic() - start < 5  # not the 30 s of progress_every
    start = time.monotonic()
    result, failed = run_module(server_health, dict(args, last_phase="loading", progress_every=2))
    assert not failed and result["phase"] == "loading"
    assert time.monotonic() - start >= 2  # same phase: the full step
