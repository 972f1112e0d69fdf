"""The load generator (tests/loadgen/loadgen.py) against the emulator and a tiny local
server that fails, cuts streams or answers without a finish reason."""

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from test_emulator import ROOT, emus  # noqa: F401  pylint: disable=unused-import

sys.path.insert(0, os.path.join(ROOT, "tests", "loadgen"))
import loadgen  # noqa: E402  pylint: disable=wrong-import-position


def load_the_emulator(emus, tmp_path, *extra):  # noqa: F811
    """loadgen's command line against a fresh emulator; returns its JSON document."""
    e = emus(["--model-path", "m", "--served-model-name", "kimi"], "0.5.23")
    e.wait_ready()
    out = tmp_path / "load.json"
    assert loadgen.main(["--url", "http://127.0.0.1:%d" % e.port, "--model", "kimi",
                         "--out", str(out)] + list(extra)) == 0
    return json.loads(out.read_text())


def test_all_complete_against_the_emulator(emus, tmp_path):  # noqa: F811
    doc = load_the_emulator(emus, tmp_path, "--requests", "24", "--concurrency", "4",
                            "--max-tokens", "5")
    s = doc["summary"]
    assert (s["requests"], s["ok"], s["failed"], s["truncated"], s["lost"]) == (24, 24, 0, 0, 0)
    assert s["by_route"] == {"/generate plain": 6, "/generate stream": 6,
                             "/v1/chat/completions plain": 6,
                             "/v1/chat/completions stream": 6}
    assert [r["seq"] for r in doc["records"]] == list(range(24))
    streams = [r for r in doc["records"] if r["stream"]]
    assert all(r["chunks"] >= 5 for r in streams)
    assert all(r["latency_s"] > 0 for r in doc["records"])


@pytest.mark.parametrize("workers", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("routes", [loadgen.ROUTES, loadgen.STREAM_ROUTES])
def test_every_round_robin_worker_sees_every_route(workers, routes):
    seen = {w: {loadgen.route_of(seq, routes) for seq in range(w, 400, workers)}
            for w in range(workers)}
    assert all(s == set(routes) for s in seen.values()), seen


def test_a_plain_cycle_would_give_a_round_robin_worker_one_route():
    """The control of the test above: the cycle the load used before (seq % 4) gives each
    of 4 round_robin workers a single route."""
    seen = {w: {loadgen.ROUTES[seq % 4] for seq in range(w, 400, 4)} for w in range(4)}
    assert all(len(s) == 1 for s in seen.values())


def test_each_block_takes_every_route_once():
    for block in range(50):
        assert sorted(loadgen.route_of(block * 4 + i) for i in range(4)) == sorted(
            loadgen.ROUTES)


def test_streams_only_against_the_emulator(emus, tmp_path):  # noqa: F811
    s = load_the_emulator(emus, tmp_path, "--requests", "8", "--concurrency", "2",
                          "--max-tokens", "3", "--streams-only")["summary"]
    assert (s["requests"], s["ok"], s["lost"]) == (8, 8, 0)
    assert s["by_route"] == {"/generate stream": 4, "/v1/chat/completions stream": 4}


def _chunk(path, finish):
    if path == "/generate":
        return {"text": "a", "meta_info": {"finish_reason": finish}}
    return {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": finish}]}


class Faulty(BaseHTTPRequestHandler):
    """Plain requests, in the order they come: a 502, then an answer without a finish
    reason, and so on; streams: one cut mid-answer (no finish reason, no [DONE]), then a
    complete one, and so on. Bodies are shaped for the route asked."""
    protocol_version = "HTTP/1.1"
    count = {False: 0, True: 0}

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass

    def _body(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # pylint: disable=invalid-name
        stream = bool(json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                      .get("stream"))
        n = Faulty.count[stream]
        Faulty.count[stream] += 1
        if not stream:
            if n % 2 == 0:
                return self._body(502, {"error": "bad gateway"})
            return self._body(200, _chunk(self.path, None))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self.wfile.write(b"data: " + json.dumps(_chunk(self.path, None)).encode() + b"\n\n")
        if n % 2 == 1:
            self.wfile.write(b"data: " + json.dumps(_chunk(self.path, "length")).encode()
                             + b"\n\ndata: [DONE]\n\n")
        return None  # n % 2 == 0: cut, no finish reason and no [DONE]


def test_failures_and_truncations_are_recorded():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Faulty)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        Faulty.count = {False: 0, True: 0}
        res = loadgen.run("http://127.0.0.1:%d" % srv.server_address[1], 8, 1)
    finally:
        srv.shutdown()
    s = res["summary"]
    assert (s["requests"], s["ok"], s["failed"], s["truncated"], s["lost"]) == (8, 2, 2, 4, 6)
    plain = [r for r in res["records"] if not r["stream"]]
    streams = [r for r in res["records"] if r["stream"]]
    assert [r["status"] for r in plain] == [502, 200, 502, 200]
    assert all("HTTP 502" in r["error"] for r in plain[0::2])
    assert all(r["truncated"] and "finish reason" in r["error"] for r in plain[1::2])
    assert all(r["truncated"] and "[DONE]" in r["error"] for r in streams[0::2])
    assert all(r["complete"] and r["chunks"] == 2 for r in streams[1::2])


def test_until_file_extends_a_bounded_run(emus, tmp_path):  # noqa: F811
    e = emus(["--model-path", "m"], "0.5.23")
    e.wait_ready()
    stop = tmp_path / "stop"
    timer = threading.Timer(1.0, stop.write_text, args=("",))
    timer.start()
    res = loadgen.run("http://127.0.0.1:%d" % e.port, 4, 2, max_tokens=2,
                      until_file=str(stop), max_requests=100000)
    timer.join()
    assert 4 < res["summary"]["requests"] < 100000
    assert res["summary"]["lost"] == 0


def test_long_clients_send_long_requests_beside_the_short_ones(emus, tmp_path):  # noqa: F811
    doc = load_the_emulator(emus, tmp_path, "--requests", "12", "--concurrency", "3",
                            "--max-tokens", "2", "--long-concurrency", "1",
                            "--long-tokens", "40")
    s = doc["summary"]
    assert s["lost"] == 0 and 1 <= s["long"] < s["requests"]
    longs = [r for r in doc["records"] if r.get("long")]
    shorts = [r for r in doc["records"] if not r.get("long")]
    # 40 tokens take longer than 2 (the emulator decodes at its rate)
    assert min(r["latency_s"] for r in longs) > max(r["latency_s"] for r in shorts)
    assert all(r["chunks"] >= 40 for r in longs if r["stream"])
