"""The load generator (tests/loadgen/loadgen.py) against the emulator and a tiny local
server that fails, cuts streams or answers without a finish reason."""

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from test_emulator import ROOT, emus  # noqa: F401  pylint: disable=unused-import

sys.path.insert(0, os.path.join(ROOT, "tests", "loadgen"))
import loadgen  # noqa: E402  pylint: disable=wrong-import-position


def test_all_complete_against_the_emulator(emus, tmp_path):  # noqa: F811
    e = emus(["--model-path", "m", "--served-model-name", "kimi"], "0.5.23")
    e.wait_ready()
    out = tmp_path / "load.json"
    assert loadgen.main(["--url", "http://127.0.0.1:%d" % e.port, "--requests", "24",
                         "--concurrency", "4", "--max-tokens", "5", "--model", "kimi",
                         "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    s = doc["summary"]
    assert (s["requests"], s["ok"], s["failed"], s["truncated"], s["lost"]) == (24, 24, 0, 0, 0)
    assert s["by_route"] == {"/generate plain": 6, "/generate stream": 6,
                             "/v1/chat/completions plain": 6,
                             "/v1/chat/completions stream": 6}
    assert [r["seq"] for r in doc["records"]] == list(range(24))
    streams = [r for r in doc["records"] if r["stream"]]
    assert all(r["chunks"] >= 5 for r in streams)
    assert all(r["latency_s"] > 0 for r in doc["records"])


def _chunk(path, finish):
    if path == "/generate":
        return {"text": "a", "meta_info": {"finish_reason": finish}}
    return {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": finish}]}


class Faulty(BaseHTTPRequestHandler):
    """Request n (one client thread, so n is the sequence number): n % 4 == 0 -> 502;
    == 1 -> a stream cut mid-answer; == 2 -> a plain answer without a finish reason;
    == 3 -> a complete stream. Bodies are shaped for the route asked."""
    protocol_version = "HTTP/1.1"
    count = 0

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass

    def _body(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # pylint: disable=invalid-name
        self.rfile.read(int(self.headers["Content-Length"]))
        n = Faulty.count
        Faulty.count += 1
        if n % 4 == 0:
            return self._body(502, {"error": "bad gateway"})
        if n % 4 == 2:
            return self._body(200, _chunk(self.path, None))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self.wfile.write(b"data: " + json.dumps(_chunk(self.path, None)).encode() + b"\n\n")
        if n % 4 == 3:
            self.wfile.write(b"data: " + json.dumps(_chunk(self.path, "length")).encode()
                             + b"\n\ndata: [DONE]\n\n")
        return None  # n % 4 == 1: cut, no finish reason and no [DONE]


def test_failures_and_truncations_are_recorded():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Faulty)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        Faulty.count = 0
        res = loadgen.run("http://127.0.0.1:%d" % srv.server_address[1], 8, 1)
    finally:
        srv.shutdown()
    s = res["summary"]
    assert (s["requests"], s["ok"], s["failed"], s["truncated"], s["lost"]) == (8, 2, 2, 4, 6)
    by_seq = {r["seq"] % 4: r for r in res["records"]}
    assert by_seq[0]["status"] == 502 and "HTTP 502" in by_seq[0]["error"]
    assert by_seq[1]["truncated"] and "[DONE]" in by_seq[1]["error"]
    assert by_seq[2]["truncated"] and "finish reason" in by_seq[2]["error"]
    assert by_seq[3]["complete"] and by_seq[3]["chunks"] == 2


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
