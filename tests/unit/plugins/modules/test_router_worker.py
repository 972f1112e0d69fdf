"""router_worker over HTTP against a small stand-in of smg's worker API and a server's
/metrics (the logic itself is tested in module_utils/router/test_router.py; the real smg and
sglang-router binaries in the molecule scenario ``router``)."""
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ansible_collections.gpufleet.sglang.plugins.modules import router_worker

METRICS = ('sglang:num_running_reqs{model_name="m",pp_rank="0",tp_rank="0"} %d.0\n'
           'sglang:num_queue_reqs{model_name="m",pp_rank="0",tp_rank="0"} 0.0\n')


class _Handler(BaseHTTPRequestHandler):
    """What both stand-ins' handlers share: a JSON (or text) answer, no request log."""

    def _send(self, code, obj):
        body = (obj if isinstance(obj, str) else json.dumps(obj)).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


class _Served:
    """A stand-in served on a free loopback port (``url``) until :meth:`close`."""

    def _serve(self, handler):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Fake(_Served):
    """smg's /workers (DELETE drops at once) plus /metrics with a running count that
    counts down by one per read."""

    def __init__(self, urls, running=0):
        self.workers = dict((str(uuid.uuid4()), u) for u in urls)
        self.running = running
        self.calls = []
        self.keys = {}
        outer = self

        class Handler(_Handler):

            def do_GET(self):  # noqa: N802
                outer.calls.append(("GET", self.path))
                if self.path == "/metrics":
                    text = METRICS % outer.running
                    outer.running = max(outer.running - 1, 0)
                    return self._send(200, text)
                return self._send(200, {"workers": [
                    {"id": i, "url": u, "is_healthy": True, "status": "ready"}
                    for i, u in outer.workers.items()]})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls.append(("POST", body["url"]))
                outer.keys[body["url"]] = body.get("api_key")
                outer.workers[str(uuid.uuid4())] = body["url"]
                return self._send(202, {"status": "accepted"})

            def do_DELETE(self):  # noqa: N802
                outer.calls.append(("DELETE", self.path))
                outer.workers.pop(self.path.rsplit("/", 1)[1], None)
                return self._send(202, {"status": "accepted"})

        self._serve(Handler)


def test_out_drain_back(run_module):
    fake = Fake(["http://a:1", "http://b:1"], running=3)
    try:
        res, failed = run_module(router_worker, {"router_url": fake.url, "urls": ["http://a:1"],
                                                 "state": "absent", "interval": 0.05})
        assert not failed and res["changed"] and res["removed"] == ["http://a:1"]
        assert res["api"] == "workers"
        assert [w["url"] for w in res["workers_after"]] == ["http://b:1"]
        res, failed = run_module(router_worker, {"state": "drained", "interval": 0.05,
                                                 "metrics_url": fake.url + "/metrics"})
        assert not failed and res["drained"] and res["running"] == 0
        res, failed = run_module(router_worker, {"router_url": fake.url, "urls": ["http://a:1"],
                                                 "state": "present", "interval": 0.05})
        assert not failed and res["changed"] and res["added"] == ["http://a:1"]
        res, failed = run_module(router_worker, {"router_url": fake.url, "urls": ["http://a:1"],
                                                 "state": "present", "interval": 0.05})
        assert not failed and not res["changed"] and res["added"] == []
    finally:
        fake.close()


def test_refusal_changes_nothing(run_module):
    fake = Fake(["http://a:1"])
    try:
        res, failed = run_module(router_worker, {"router_url": fake.url, "urls": ["http://a:1"],
                                                 "state": "absent"})
        assert failed and "refusing this batch" in res["msg"]
        assert "sglang_router_min_serving=1" in res["msg"]
        assert [c[0] for c in fake.calls] == ["GET", "GET"]  # API detection, then the list
    finally:
        fake.close()


def test_drain_timeout_fails_or_goes_on(run_module):
    fake = Fake([], running=1000)
    try:
        args = {"state": "drained", "metrics_url": fake.url + "/metrics", "interval": 0.05,
                "drain_timeout": 0.3}
        res, failed = run_module(router_worker, args)
        assert failed and "after drain_timeout=0.3 s (on_drain_timeout=fail)" in res["msg"]
        res, failed = run_module(router_worker, dict(args, on_drain_timeout="continue"))
        assert not failed and res["drained"] is False and res["running"] > 0
    finally:
        fake.close()


def test_a_server_that_does_not_listen_is_drained_one_that_errs_is_not(run_module):
    """Nothing listening on the port (a server still loading, as a killed tune leaves it)
    has no request to finish; a server that answers with an error still fails the drain."""
    res, failed = run_module(router_worker, {"state": "drained", "interval": 0.05,
                                             "metrics_url": "http://127.0.0.1:9/metrics"})
    assert not failed and res["drained"] is True
    assert (res["running"], res["queued"], res["listening"]) == (0, 0, False)

    class Refusing(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        res, failed = run_module(router_worker, {
            "state": "drained", "interval": 0.05,
            "metrics_url": "http://127.0.0.1:%d/metrics" % httpd.server_address[1]})
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert failed and res["msg"].endswith("/metrics answered 503")


def test_unreachable_router_is_named(run_module):
    res, failed = run_module(router_worker, {"router_url": "http://127.0.0.1:9",
                                             "urls": ["http://a:1"], "state": "present",
                                             "api": "workers"})
    assert failed and res["msg"].startswith("cannot reach the router at http://127.0.0.1:9")


def test_converged_adds_the_healthy_removes_the_down_and_the_held(run_module):
    fake, other = Fake([]), Fake([])
    up, held, down = fake.url, other.url, "http://127.0.0.1:9"
    fake.workers = {"id-down": down, "id-held": held}
    try:
        args = {"router_url": fake.url, "urls": [up, held, down], "held": [held],
                "state": "converged", "interval": 0.05, "request_timeout": 2,
                "worker_api_keys": {up: "s3cret"}}
        res, failed = run_module(router_worker, dict(args, _ansible_check_mode=True))
        assert not failed and res["changed"] and res["added"] == [up]
        assert sorted(res["removed"]) == sorted([held, down])
        problems = dict((r["url"], r["problem"]) for r in res["membership"])
        assert "does not list it" in problems[up] and "held but listed" in problems[held]
        assert "does not serve" in problems[down]
        assert sorted(fake.workers.values()) == sorted([down, held])  # check mode: no change
        res, failed = run_module(router_worker, args)
        assert not failed and res["changed"] and res["added"] == [up]
        assert list(fake.workers.values()) == [up]
        assert fake.keys == {up: "s3cret"}  # the worker's own key goes with the add
        res, failed = run_module(router_worker, args)
        assert not failed and not res["changed"]
        assert [r["problem"] for r in res["membership"]] == ["", "", ""]
    finally:
        fake.close()
        other.close()


def test_converged_skips_a_router_not_installed_yet_and_names_an_unreachable_one(run_module, tmp_path):
    args = {"router_url": "http://127.0.0.1:9", "urls": ["http://a:1"], "state": "converged",
            "api": "workers", "router_name": "r2", "unit_path": str(tmp_path / "none.service")}
    res, failed = run_module(router_worker, args)
    assert not failed and not res["changed"] and "not installed yet" in res["skipped_reason"]
    (tmp_path / "none.service").write_text("[Unit]\n")
    res, failed = run_module(router_worker, args)
    assert failed and res["msg"].startswith("router r2: cannot reach the router at http://127.0.0.1:9")


def test_a_refusal_names_the_router_and_the_counts(run_module):
    fake = Fake(["http://a:1", "http://b:1"])
    try:
        res, failed = run_module(router_worker, {
            "router_url": fake.url, "router_name": "r2", "urls": ["http://a:1", "http://b:1"],
            "state": "absent", "min_serving": 1, "_ansible_check_mode": True})
        assert failed and res["msg"].startswith("router r2: refusing this batch")
        assert "would leave 0 healthy worker(s)" in res["msg"]
        assert len(fake.workers) == 2
    finally:
        fake.close()


def test_restored_puts_back_only_the_healthy_unlisted_before_a_batch_leaves(run_module):
    """state=restored (router_restore.yml, before the first batch): the stranded server
    that answers /health is added; one that does not answer, and a held one, are not;
    nothing is removed; a router that lists every candidate is asked once and no server's
    /health is asked; then the batch's removal comes after the add."""
    fake, up, held = Fake([]), Fake([]), Fake([])
    down = "http://127.0.0.1:9"
    listed = "http://b:1"
    fake.workers = {"id-b": listed}
    try:
        args = {"router_url": fake.url, "api": "workers", "urls": [up.url, down, held.url, listed],
                "held": [held.url], "state": "restored", "interval": 0.05, "request_timeout": 2,
                "worker_api_keys": {up.url: "s3cret"}}
        res, failed = run_module(router_worker, dict(args, _ansible_check_mode=True))
        assert not failed and res["changed"] and res["added"] == [up.url]
        assert res["unlisted"] == [up.url, down, held.url]
        assert res["not_ready"] == [{"url": down, "reason": "/health does not answer 200"},
                                    {"url": held.url, "reason": "held"}]
        assert [c[0] for c in fake.calls] == ["GET"] and up.calls == [("GET", "/health")]
        assert held.calls == []  # a held server is not even asked
        res, failed = run_module(router_worker, args)
        assert not failed and res["changed"] and res["added"] == [up.url]
        assert sorted(fake.workers.values()) == sorted([listed, up.url])
        assert fake.keys == {up.url: "s3cret"}
        # the first batch leaves after it: the add came before the removal
        res, failed = run_module(router_worker, {"router_url": fake.url, "api": "workers",
                                                 "urls": [listed], "state": "absent",
                                                 "interval": 0.05})
        assert not failed and res["removed"] == [listed]
        kinds = [c[0] for c in fake.calls]
        assert kinds.index("POST") < kinds.index("DELETE")
        # a plain re-run: every candidate listed, one list, no /health asked, no change
        fake.calls[:], up.calls[:] = [], []
        res, failed = run_module(router_worker, dict(args, urls=[up.url]))
        assert not failed and not res["changed"] and res["added"] == [] and res["unlisted"] == []
        assert fake.calls == [("GET", "/workers")] and up.calls == []
    finally:
        fake.close()
        up.close()
        held.close()


def test_restored_skips_a_router_not_installed_yet(run_module, tmp_path):
    res, failed = run_module(router_worker, {
        "router_url": "http://127.0.0.1:9", "urls": ["http://a:1"], "state": "restored",
        "api": "workers", "unit_path": str(tmp_path / "none.service")})
    assert not failed and not res["changed"] and "not installed yet" in res["skipped_reason"]


class PDFake(_Served):
    """smg's /workers with roles: POST and GET keep and list ``worker_type`` and
    ``bootstrap_port``; ``PUT /workers/{id}`` replaces the registration under the same id
    (smg from 1.4.0). ``calls``: (method, path, body)."""

    def __init__(self, rows):
        self.workers = dict((str(uuid.uuid4()), dict(row)) for row in rows)
        self.calls = []
        outer = self

        class Handler(_Handler):

            def _body(self):
                return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

            def do_GET(self):  # noqa: N802
                outer.calls.append(("GET", self.path, None))
                return self._send(200, {"workers": [
                    dict(w, id=i, is_healthy=True, status="ready")
                    for i, w in outer.workers.items()]})

            def do_POST(self):  # noqa: N802
                body = self._body()
                outer.calls.append(("POST", self.path, body))
                outer.workers[str(uuid.uuid4())] = dict(
                    (k, v) for k, v in body.items() if k in ("url", "worker_type", "bootstrap_port"))
                return self._send(202, {"status": "accepted"})

            def do_PUT(self):  # noqa: N802
                body = self._body()
                outer.calls.append(("PUT", self.path, body))
                wid = self.path.rsplit("/", 1)[1]
                outer.workers[wid] = dict(
                    (k, v) for k, v in body.items() if k in ("url", "worker_type", "bootstrap_port"))
                return self._send(202, {"status": "accepted", "worker_id": wid})

        self._serve(Handler)


PAYLOADS = {"http://a:1": {"url": "http://a:1", "worker_type": "prefill", "bootstrap_port": 8998},
            "http://b:1": {"url": "http://b:1", "worker_type": "decode"}}


def test_present_with_payloads_puts_right_the_role_and_adds_with_it(run_module):
    """b was added with its URL alone (a regular worker): PUT with its body and its own key,
    same id; a is added with its body; the result names b in repaired; a re-run changes
    nothing and has no repaired key."""
    fake = PDFake([{"url": "http://b:1", "worker_type": "regular"}])
    b_id = next(iter(fake.workers))
    try:
        args = {"router_url": fake.url, "api": "workers", "urls": ["http://a:1", "http://b:1"],
                "state": "present", "interval": 0.05, "payloads": PAYLOADS,
                "worker_api_keys": {"http://b:1": "kb"}}
        res, failed = run_module(router_worker, dict(args, _ansible_check_mode=True))
        assert not failed and res["changed"] and res["added"] == ["http://a:1"]
        assert res["repaired"] == ["http://b:1"] and [c[0] for c in fake.calls] == ["GET"]
        fake.calls[:] = []
        res, failed = run_module(router_worker, args)
        assert not failed and res["changed"], res
        assert res["added"] == ["http://a:1"] and res["repaired"] == ["http://b:1"]
        assert [c for c in fake.calls if c[0] != "GET"] == [
            ("PUT", "/workers/" + b_id, {"url": "http://b:1", "worker_type": "decode",
                                         "api_key": "kb"}),
            ("POST", "/workers", {"url": "http://a:1", "worker_type": "prefill",
                                  "bootstrap_port": 8998})]
        after = dict((w["url"], (w["worker_type"], w.get("bootstrap_port")))
                     for w in res["workers_after"])
        assert after == {"http://a:1": ("prefill", 8998), "http://b:1": ("decode", None)}
        res, failed = run_module(router_worker, args)
        assert not failed and not res["changed"] and "repaired" not in res
    finally:
        fake.close()


def test_payloads_refuse_a_url_without_a_role_and_a_key_in_a_body(run_module):
    fake = PDFake([])
    try:
        args = {"router_url": fake.url, "api": "workers", "urls": ["http://a:1", "http://c:1"],
                "state": "present", "payloads": PAYLOADS}
        res, failed = run_module(router_worker, args)
        assert failed and "PD payloads but none for http://c:1" in res["msg"]
        keyed = dict(PAYLOADS, **{"http://a:1": dict(PAYLOADS["http://a:1"], api_key="s3cret")})
        res, failed = run_module(router_worker, dict(args, urls=["http://a:1"], payloads=keyed))
        assert failed and res["msg"].startswith("payloads: the body of http://a:1 carries an api_key")
        assert "s3cret" not in res["msg"]
        assert fake.calls == []  # refused before any call
    finally:
        fake.close()


def test_converged_with_payloads_puts_right_a_listed_row(run_module):
    up = Fake([])  # a server whose /health answers 200
    fake = PDFake([{"url": up.url, "worker_type": "regular"}])
    try:
        payloads = {up.url: {"worker_type": "decode"}}
        args = {"router_url": fake.url, "api": "workers", "urls": [up.url], "state": "converged",
                "interval": 0.05, "request_timeout": 2, "payloads": payloads}
        res, failed = run_module(router_worker, dict(args, _ansible_check_mode=True))
        assert not failed and res["changed"] and res["repaired"] == [up.url]
        assert res["added"] == [] and res["removed"] == []
        res, failed = run_module(router_worker, args)
        assert not failed and res["changed"] and res["repaired"] == [up.url]
        assert [c[0] for c in fake.calls if c[0] != "GET"] == ["PUT"]
        res, failed = run_module(router_worker, args)
        assert not failed and not res["changed"] and "repaired" not in res
    finally:
        fake.close()
        up.close()
