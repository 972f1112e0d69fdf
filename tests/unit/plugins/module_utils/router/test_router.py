"""SGLang's router: API by release, launch flags from the real --help texts, the worker
list, the min-serving refusal, and take-out / drain / put-back against a fake router."""

import json
import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router as r
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import (
    alias_index,
    parse_help,
)
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES as _FIXTURES

HELP = os.path.join(_FIXTURES, "router-help")


def flags(name):
    with open(os.path.join(HELP, name + ".txt"), encoding="utf-8") as fh:
        return set(alias_index(parse_help(fh.read())["flags"]))


SETTINGS = {
    "host": "0.0.0.0", "port": 30000, "worker_urls": ["http://a:30000/", "http://b:30000"],
    "policy": "round_robin", "prometheus_host": "127.0.0.1", "prometheus_port": 29000,
    "health_check_interval": 2, "health_check_timeout": 5, "health_failure_threshold": 2,
    "health_success_threshold": 1, "health_check_endpoint": "/health",
    "circuit_breaker": True, "cb_failure_threshold": 10, "cb_success_threshold": 2,
    "cb_timeout": 10, "cb_window": 60, "retries": 3, "request_timeout": 600,
    "worker_startup_timeout": 60, "api_key": "", "hf_endpoint": "", "extra_args": [],
}


@pytest.mark.parametrize("package,version,api", [
    ("smg", "1.13.0", "workers"), ("smg", "1.0.0", "workers"),
    ("sglang-router", "0.3.2", "workers"), ("sglang-router", "0.3.0", "workers"),
    ("sglang-router", "0.2.1", "legacy"), ("sglang-router", "0.1.9", "legacy"),
])
def test_api_by_release(package, version, api):
    assert r.api_for(package, version) == api


def test_api_refusals_name_the_value():
    with pytest.raises(r.RouterError, match=r"sglang-router 0\.2\.2 uses /workers/\{url\}"):
        r.api_for("sglang-router", "0.2.2")
    with pytest.raises(r.RouterError, match="router_package is 'vllm-router'"):
        r.api_for("vllm-router", "1.0")


def test_smg_launch_argv():
    argv, env = r.launch_argv("smg", "/opt/v", flags("smg-1.13.0"), dict(SETTINGS))
    assert argv[:2] == ["/opt/v/bin/smg", "launch"]
    i = argv.index("--worker-urls")
    assert argv[i + 1:i + 3] == ["http://a:30000", "http://b:30000"]
    assert "--disable-tokenizer-autoload" in argv and env == {}
    assert argv[argv.index("--prometheus-host") + 1] == "127.0.0.1"
    assert argv[argv.index("--health-check-interval-secs") + 1] == "2"
    assert argv[argv.index("--retry-max-retries") + 1] == "3"
    assert "--api-key" not in argv


def test_sglang_router_032_needs_a_hub_mirror():
    f = flags("sglang-router-0.3.2")
    with pytest.raises(r.RouterError, match="router_hf_endpoint"):
        r.launch_argv("sglang-router", "/opt/v", f, dict(SETTINGS))
    argv, env = r.launch_argv("sglang-router", "/opt/v", f,
                              dict(SETTINGS, hf_endpoint="http://hub.internal:8080"))
    assert argv[:3] == ["/opt/v/bin/python", "-m", "sglang_router.launch_router"]
    assert env == {"HF_ENDPOINT": "http://hub.internal:8080"}
    assert "--disable-tokenizer-autoload" not in argv


def test_api_key_goes_through_the_launcher_and_switches_map_to_disable_flags():
    argv, _env = r.launch_argv("smg", "/v", flags("smg-1.13.0"),
                               dict(SETTINGS, api_key=True, retries=0,
                                    circuit_breaker=False))
    # smg's script is smg.cli:main; the launcher appends --api-key in the process
    assert argv[:7] == ["/v/bin/python", "/usr/local/libexec/gpufleet-sglang/secret_exec.py",
                        "--api-key=ROUTER_API_KEY", "--", "-m", "smg", "launch"]
    assert "--api-key" not in argv and "${ROUTER_API_KEY}" not in argv
    plain, _env = r.launch_argv("smg", "/v", flags("smg-1.13.0"),
                                dict(SETTINGS, retries=0, circuit_breaker=False))
    assert plain[:2] == ["/v/bin/smg", "launch"] and plain[2:] == argv[7:]
    router, _env = r.launch_argv("sglang-router", "/v", flags("sglang-router-0.3.2"),
                                 dict(SETTINGS, api_key=True, secret_exec="/l.py",
                                      hf_endpoint="http://hub.invalid"))
    assert router[:6] == ["/v/bin/python", "/l.py", "--api-key=ROUTER_API_KEY", "--", "-m",
                          "sglang_router.launch_router"]
    with pytest.raises(r.RouterError, match=r"router_api_key \(needs --api-key\)"):
        r.launch_argv("smg", "/v", flags("smg-1.13.0") - {"--api-key"}, dict(SETTINGS, api_key=True))
    assert "--disable-retries" in argv and "--disable-circuit-breaker" in argv
    assert "--cb-failure-threshold" not in argv


def test_servers_with_a_key_of_their_own_are_left_out_of_the_worker_urls():
    """smg gives a worker a key only when it is added with one: a server with a key is
    added after the start, with it (the router role's run step)."""
    urls = ["http://a:30000", "http://b:30000/"]
    argv, _env = r.launch_argv("smg", "/v", flags("smg-1.13.0"),
                               dict(SETTINGS, worker_urls=urls, own_key_urls=["http://b:30000"]))
    assert argv[argv.index("--worker-urls") + 1:argv.index("--worker-urls") + 3] == [
        "http://a:30000", "--policy"]
    argv, _env = r.launch_argv("smg", "/v", flags("smg-1.13.0"),
                               dict(SETTINGS, worker_urls=urls, own_key_urls=urls))
    assert "--worker-urls" not in argv


def test_missing_flags_and_empty_worker_list_are_named():
    with pytest.raises(r.RouterError, match=r"router_health_check_endpoint \(needs "
                                            r"--health-check-endpoint\)"):
        r.launch_argv("smg", "/v", flags("smg-1.13.0") - {"--health-check-endpoint"},
                      dict(SETTINGS))
    with pytest.raises(r.RouterError, match="router_worker_urls is empty"):
        r.launch_argv("smg", "/v", flags("smg-1.13.0"), dict(SETTINGS, worker_urls=[]))


SMG_LIST = {"workers": [
    {"id": "i1", "url": "http://a:30000", "is_healthy": True, "status": "ready", "load": 0},
    {"id": "i2", "url": "http://b:30000", "is_healthy": True, "status": "ready", "load": 2},
    {"id": "i3", "url": "http://c:30000", "is_healthy": False, "status": "draining"},
], "total": 3}


def test_worker_table_and_serving():
    rows = r.worker_table("workers", SMG_LIST)
    assert [x["url"] for x in rows] == ["http://a:30000", "http://b:30000", "http://c:30000"]
    assert r.serving(rows) == ["http://a:30000", "http://b:30000"]
    legacy = r.worker_table("legacy", {"urls": ["http://a:30000/"]})
    assert legacy == [{"id": None, "url": "http://a:30000", "healthy": None,
                       "status": "listed"}]
    assert r.serving(legacy) == ["http://a:30000"]


def test_min_serving_refusal():
    rows = r.worker_table("workers", SMG_LIST)
    assert r.check_min_serving(rows, ["http://a:30000"], 1) == ["http://b:30000"]
    with pytest.raises(r.RouterError, match=r"would leave 0 healthy worker\(s\) \(none\), "
                                            r"fewer than sglang_router_min_serving=1"):
        r.check_min_serving(rows, ["http://a:30000", "http://b:30000/"], 1)
    with pytest.raises(r.RouterError, match="fewer than sglang_router_min_serving=2"):
        r.check_min_serving(rows, ["http://a:30000"], 2)
    with pytest.raises(r.RouterError, match="sglang_router_min_serving is 0"):
        r.check_min_serving(rows, [], 0)


def test_min_serving_keeps_a_healthy_worker_of_each_pd_role():
    """Issue 43: a PD router (rows with smg's worker_type) serves nothing without a prefill
    and a decode worker, so a batch that would take the last healthy one of a role out is
    refused naming the role, even where min_serving counts enough workers."""
    pd_list = {"workers": [
        {"id": "p1", "url": "http://a:30000", "is_healthy": True, "worker_type": "prefill", "bootstrap_port": 8998},
        {"id": "d1", "url": "http://b:30000", "is_healthy": True, "worker_type": "decode"},
        {"id": "d2", "url": "http://c:30000", "is_healthy": True, "worker_type": "decode"},
        {"id": "p2", "url": "http://e:30000", "is_healthy": False, "worker_type": "prefill", "bootstrap_port": 8998},
    ]}
    rows = r.worker_table("workers", pd_list)
    # one decode of two may leave: a prefill and a decode still serve
    assert r.check_min_serving(rows, ["http://b:30000"], 2) == ["http://a:30000", "http://c:30000"]
    # the only healthy prefill may not, though two workers (min_serving=2) would be left
    with pytest.raises(r.RouterError, match=r"would leave no healthy prefill worker \(the router's "
                                            r"prefill workers: http://a:30000, http://e:30000\)"):
        r.check_min_serving(rows, ["http://a:30000"], 2)
    with pytest.raises(r.RouterError, match="no healthy decode worker"):
        r.check_min_serving(rows, ["http://b:30000", "http://c:30000"], 1)
    # the control: the same URLs as regular workers (no worker_type): only the count counts
    regular = [dict((k, v) for k, v in row.items() if k not in ("worker_type", "bootstrap_port")) for row in rows]
    assert r.check_min_serving(regular, ["http://a:30000"], 2) == ["http://b:30000", "http://c:30000"]


METRICS = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} %s
sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} %s
"""


def test_is_drained():
    assert r.is_drained(METRICS % ("0.0", "0.0")) == (True, 0, 0)
    assert r.is_drained(METRICS % ("2.0", "0.0")) == (False, 2, 0)
    assert r.is_drained(METRICS % ("0.0", "1.0")) == (False, 0, 1)
    with pytest.raises(r.RouterError, match="--enable-metrics"):
        r.is_drained("# nothing\n")


# A /metrics text of 0.5.9's shape: the scheduler gauges, its realtime token counter (by
# mode) and the tokenizer's inter-token histogram count.
BUSY_METRICS = METRICS + """sglang:realtime_tokens_total{engine_type="unified",mode="decode",model_name="m",pp_rank="0",tp_rank="0"} %s
sglang:realtime_tokens_total{engine_type="unified",mode="prefill_compute",model_name="m",pp_rank="0",tp_rank="0"} 100.0
sglang:inter_token_latency_seconds_count{model_name="m"} %s
"""


class FakeTime:
    """A clock that moves only when the waiter sleeps."""

    def __init__(self):
        self.now = 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def readings(texts):
    """``read_metrics`` over ``texts``, the last one repeated; the readings are counted."""
    seen = []

    def read():
        seen.append(texts[min(len(seen), len(texts) - 1)])
        return seen[-1]
    return read, seen


def test_work_done_sums_each_progress_counter():
    assert r.work_done(BUSY_METRICS % (0, 0, 7, 3)) == (107.0, None, 3.0) + (None,) * 7
    assert r.work_done(METRICS % (0, 0)) == (None,) * len(r.PROGRESS_COUNTERS)


def test_one_idle_reading_is_not_a_drained_server():
    """Before this check the first 0 ended the drain (0.02 s in the router scenario); a 0 is
    a stale report while requests decode between two scheduler reports, which only the
    counters show."""
    t = FakeTime()
    read, seen = readings([BUSY_METRICS % (0, 0, 40, 39),    # a stale 0: the counters move
                           BUSY_METRICS % (0, 0, 56, 55),
                           BUSY_METRICS % (0, 0, 64, 63)])   # then they stop: idle
    d = r.drain(read, 60, 0.5, quiet=3, clock=t.clock, sleep=t.sleep)
    assert d["drained"] and (d["running"], d["queued"], d["listening"]) == (0, 0, True)
    # the quiet time counts from the third reading (t=1.0): 3 s later, at t=4.0
    assert len(seen) == 9 and d["elapsed_s"] == 4.0 and d["quiet_s"] == 3.0


def test_a_busy_reading_restarts_the_quiet_time():
    t = FakeTime()
    texts = [METRICS % (0, 0)] * 3 + [METRICS % (2, 0)] + [METRICS % (0, 0)]
    read, seen = readings(texts)
    d = r.drain(read, 60, 1, quiet=3, clock=t.clock, sleep=t.sleep)
    # the 0s at t=0..2 do not count once t=3 reads 2 running; quiet from t=4 to t=7
    assert d["drained"] and d["elapsed_s"] == 7.0 and len(seen) == 8
    assert d["busy"] == 2  # what the drain waited for
    d = r.drain(readings([METRICS % (0, 0)])[0], 60, 1, quiet=3, clock=t.clock, sleep=t.sleep)
    assert d["drained"] and d["busy"] == 0


def test_without_counters_two_idle_readings_quiet_apart_drain():
    """Older releases (0.4.6.post5, 0.5.4.post3 have no realtime_tokens_total) and a text
    with the gauges only: the gauges alone, read over the quiet time."""
    t = FakeTime()
    read, seen = readings([METRICS % (0, 0)])
    d = r.drain(read, 60, 0.5, quiet=0, clock=t.clock, sleep=t.sleep)
    assert d["drained"] and len(seen) == 2 and d["elapsed_s"] == 0.5


def test_counters_that_never_stop_time_the_drain_out():
    t = FakeTime()
    n = iter(range(10 ** 6))
    d = r.drain(lambda: BUSY_METRICS % (0, 0, next(n), 0), 10, 0.5, quiet=3,
                clock=t.clock, sleep=t.sleep)
    assert not d["drained"] and d["elapsed_s"] == 10.0 and (d["running"], d["queued"]) == (0, 0)
    assert d["quiet_s"] == 0.0


def test_nothing_listening_is_drained_at_once():
    t = FakeTime()
    d = r.drain(lambda: None, 10, 0.5, clock=t.clock, sleep=t.sleep)
    assert d["drained"] and d["elapsed_s"] == 0 and d["listening"] is False


class FakeRouter(object):
    """The smg 1.x worker API in memory: DELETE keeps a worker draining for ``drain_polls``
    list calls; a new worker becomes healthy after ``ready_polls`` list calls."""

    def __init__(self, urls, drain_polls=2, ready_polls=2, legacy=False):
        self.workers = {}
        self.next_id = 0
        self.drain_polls, self.ready_polls, self.legacy = drain_polls, ready_polls, legacy
        self.calls = []
        self.ignore_deletes = False
        for u in urls:
            self._new(u, 0)

    def _new(self, url, polls):
        self.next_id += 1
        self.workers["id%d" % self.next_id] = {"url": url, "ready_in": polls, "gone_in": None}

    def _tick(self):
        for wid, w in list(self.workers.items()):
            if w["gone_in"] is not None:
                w["gone_in"] -= 1
                if w["gone_in"] < 0:
                    del self.workers[wid]
            elif w["ready_in"] > 0:
                w["ready_in"] -= 1

    def __call__(self, method, url, body, headers, timeout):
        path = url.split("://", 1)[1].split("/", 1)[1]
        self.calls.append((method, "/" + path))
        if self.legacy:
            if path == "list_workers":
                return 200, json.dumps({"urls": [w["url"] for w in self.workers.values()]})
            target = path.split("url=", 1)[-1]
            if path.startswith("add_worker"):
                self._new(target, 0)
                return 200, "ok"
            for wid, w in list(self.workers.items()):
                if w["url"] == target:
                    del self.workers[wid]
            return 200, "ok"
        if method == "GET":
            self._tick()
            return 200, json.dumps({"workers": [
                {"id": wid, "url": w["url"], "is_healthy": w["ready_in"] == 0 and w["gone_in"] is None,
                 "status": "draining" if w["gone_in"] is not None else
                 ("ready" if w["ready_in"] == 0 else "pending")}
                for wid, w in self.workers.items()]})
        if method == "POST":
            u = json.loads(body)["url"]
            if any(w["url"] == u for w in self.workers.values()):
                return 409, '{"code": "WORKER_ALREADY_EXISTS"}'
            self._new(u, self.ready_polls)
            return 202, '{"status": "accepted"}'
        wid = path.split("/", 1)[1]
        if wid not in self.workers:
            return 404, "{}"
        if not self.ignore_deletes:
            self.workers[wid]["gone_in"] = self.drain_polls
        return 202, '{"status": "accepted"}'


CLOCK = {"clock": iter(range(0, 10000)).__next__, "sleep": lambda s: None}


def test_take_out_drain_put_back_with_the_smg_api():
    fake = FakeRouter(["http://a:1", "http://b:1", "http://c:1"])
    router = r.Router("http://router:30000/", "workers", fake, api_key="k")
    out = r.take_out(router, ["http://a:1"], 1, 30, 0.1, **dict(CLOCK))
    assert out["removed"] == ["http://a:1"]
    # done at the first list after the DELETE: a is draining (routed to no more), not gone
    assert [c for c in fake.calls if c[0] == "GET"] == [("GET", "/workers")] * 2
    assert r.serving(out["after"]) == ["http://b:1", "http://c:1"]
    assert r.leaving(out["after"], ["http://a:1"]) == ["http://a:1"]
    assert ("DELETE", "/workers/id1") in fake.calls
    read, seen = readings([METRICS % (2, 1), METRICS % (1, 0), METRICS % (0, 0)])
    d = r.drain(read, 30, 0.1, **dict(CLOCK))
    assert d["drained"] and (d["running"], d["queued"]) == (0, 0)
    assert len(seen) > 3  # one idle reading is not enough
    # the re-add waits until the draining row has gone: smg would answer 409 before
    fake.calls[:] = []
    back = r.put_back(router, ["http://a:1"], 30, 0.1, **dict(CLOCK))
    assert back["added"] == ["http://a:1"]
    posts = [n for n, c in enumerate(fake.calls) if c[0] == "POST"]
    assert posts == [2]  # a list that shows it draining, the next without it, then the add
    assert r.serving(back["after"]) == ["http://a:1", "http://b:1", "http://c:1"]
    # a no-op put-back adds nothing
    assert r.put_back(router, ["http://a:1"], 30, 0.1, **dict(CLOCK))["added"] == []


def test_refused_batch_changes_nothing():
    fake = FakeRouter(["http://a:1", "http://b:1"])
    router = r.Router("http://router:30000", "workers", fake)
    with pytest.raises(r.RouterError, match="refusing this batch"):
        r.take_out(router, ["http://a:1", "http://b:1"], 1, 30, 0.1, **dict(CLOCK))
    assert [call[0] for call in fake.calls] == ["GET"]


def test_timeouts_are_errors_or_reported():
    fake = FakeRouter(["http://a:1", "http://b:1"])
    fake.ignore_deletes = True  # a router that goes on routing to a after the DELETE
    router = r.Router("http://router:30000", "workers", fake)
    with pytest.raises(r.RouterError, match="still routes to http://a:1"):
        r.take_out(router, ["http://a:1"], 1, 5, 0.1, **dict(CLOCK))
    # a draining row that never goes: the re-add is refused, named, and nothing is added
    fake = FakeRouter(["http://a:1", "http://b:1"], drain_polls=10 ** 6)
    router = r.Router("http://router:30000", "workers", fake)
    r.take_out(router, ["http://a:1"], 1, 5, 0.1, **dict(CLOCK))
    with pytest.raises(r.RouterError, match="still lists http://a:1 as draining 5 s"):
        r.put_back(router, ["http://a:1"], 5, 0.1, **dict(CLOCK))
    assert [c for c in fake.calls if c[0] == "POST"] == []
    d = r.drain(lambda: METRICS % (3, 0), 5, 0.1, **dict(CLOCK))
    assert not d["drained"] and d["running"] == 3
    fake = FakeRouter(["http://b:1"], ready_polls=10 ** 6)
    router = r.Router("http://router:30000", "workers", fake)
    with pytest.raises(r.RouterError, match="does not route to http://a:1"):
        r.put_back(router, ["http://a:1"], 5, 0.1, **dict(CLOCK))


def test_legacy_api():
    fake = FakeRouter(["http://a:1", "http://b:1"], legacy=True)
    router = r.Router("http://router:30000", "legacy", fake)
    r.take_out(router, ["http://a:1"], 1, 30, 0.1, **dict(CLOCK))
    assert ("POST", "/remove_worker?url=http://a:1") in fake.calls
    back = r.put_back(router, ["http://a:1"], 30, 0.1, **dict(CLOCK))
    assert back["added"] == ["http://a:1"]
    assert ("POST", "/add_worker?url=http://a:1") in fake.calls


def test_router_errors_name_the_answer():
    router = r.Router("http://router:30000", "workers",
                      lambda *a: (401, '{"error": "unauthorized"}'))
    with pytest.raises(r.RouterError, match="GET http://router:30000/workers answered 401"):
        router.workers()
    with pytest.raises(r.RouterError, match="router api is 'grpc'"):
        r.Router("http://x", "grpc", None)


def test_worker_urls_from_the_inventory():
    groups = {"all": ["s1", "m0", "m1"], "kimi_tp16": ["m0", "m1"]}
    hostvars = {
        "s1": {"ansible_host": "10.0.0.1"},
        "m0": {"sglang_nnodes": 2, "sglang_server_group": "kimi_tp16",
               "sglang_node_address": "10.0.1.1", "server_port": 31000},
        "m1": {"sglang_nnodes": 2, "sglang_server_group": "kimi_tp16",
               "sglang_node_address": "10.0.1.2", "server_port": 31000},
    }
    assert r.worker_urls(["s1", "m0", "m1"], groups, hostvars) == [
        "http://10.0.0.1:30000", "http://10.0.1.1:31000"]
    hostvars["m0"]["sglang_node_rank"] = 1
    hostvars["m1"]["sglang_node_rank"] = 0
    hostvars["s1"]["sglang_router_worker_url"] = "http://s1.internal:30000/"
    assert r.worker_urls(["s1", "m0", "m1"], groups, hostvars) == [
        "http://s1.internal:30000", "http://10.0.1.2:31000"]
    hostvars["m1"]["sglang_node_rank"] = 1
    with pytest.raises(r.RouterError, match="m0: the hosts of the server must have"):
        r.worker_urls(["m0"], groups, hostvars)


def test_converge_that_empties_the_router_ends_at_once():
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router as r

    class One(object):
        api = "workers"
        base = "http://r"

        def __init__(self):
            self.rows = [{"id": "1", "url": "http://a:1", "healthy": False, "status": "ready"}]

        def workers(self):
            return list(self.rows)

        def remove(self, url, rows=None):
            self.rows = [x for x in self.rows if x["url"] != url]
            return True

    t = [0.0]
    res = r.converge(One(), {"add": [], "remove": ["http://a:1"]}, 30, 1,
                     clock=lambda: t[0], sleep=lambda s: t.__setitem__(0, t[0] + s))
    assert res["removed"] == ["http://a:1"] and res["after"] == [] and res["elapsed_s"] == 0


def _two_routers(listed, stranded):
    """Two routers (smg API) behind one timeline of calls: each lists ``listed``, neither
    ``stranded`` (a controller killed between its removal and its re-add)."""
    timeline = []
    routers = []
    for name in ("r1", "r2"):
        fake = FakeRouter(listed)

        def fetch(method, url, body, headers, timeout, _fake=fake, _name=name):
            status, text = _fake(method, url, body, headers, timeout)
            added = (json.loads(body)["url"],) if method == "POST" else ()
            timeline.append((_name,) + _fake.calls[-1] + added)
            return status, text

        routers.append((fake, r.Router("http://%s:30000" % name, "workers", fetch)))
    assert all(stranded not in r.serving(router.workers()) for _f, router in routers)
    timeline[:] = []
    return timeline, routers


def _rerun(routers, candidates, healthy, batch):
    """The re-run's order, as playbooks/deploy.yml runs it: the put-back on every router
    (router_restore.yml, router_worker state=restored), then the first batch leaves every
    router (router_leave.yml, state=absent)."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_fleet as rf

    for _fake, router in routers:
        rf.put_back_unlisted(router, candidates, [], lambda u: healthy[u], 30, 0.1, **dict(CLOCK))
    for _fake, router in routers:
        r.take_out(router, batch, 1, 30, 0.1, **dict(CLOCK))


def test_a_stranded_ready_server_is_put_back_into_every_router_before_the_first_removal():
    """Issue 43, item 5: the killed host 'a' serves the target and answers /health, but
    neither router lists it; the re-run's first batch takes 'b' out. 'a' is added to both
    routers, and each routes to it, before the first DELETE on either router."""
    timeline, routers = _two_routers(["http://b:1", "http://c:1"], "http://a:1")
    _rerun(routers, ["http://a:1", "http://b:1", "http://c:1"],
           {"http://a:1": True, "http://b:1": True, "http://c:1": True}, ["http://b:1"])
    first_delete = next(i for i, call in enumerate(timeline) if call[1] == "DELETE")
    adds = [i for i, call in enumerate(timeline) if call[1] == "POST"]
    assert [timeline[i][0] for i in adds] == ["r1", "r2"]
    assert [timeline[i][3] for i in adds] == ["http://a:1", "http://a:1"]
    assert max(adds) < first_delete
    # each router saw it healthy (its put-back's last list) before the removal began
    gets_before = [call for call in timeline[:first_delete] if call[1] == "GET"]
    assert {call[0] for call in gets_before} == {"r1", "r2"}
    for _fake, router in routers:
        assert r.serving(router.workers()) == ["http://a:1", "http://c:1"]


def test_an_unhealthy_stranded_server_is_not_put_back_and_a_listed_fleet_costs_one_list():
    timeline, routers = _two_routers(["http://b:1", "http://c:1"], "http://a:1")
    asked = []

    def healthy(url):
        asked.append(url)
        return False

    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_fleet as rf

    for _fake, router in routers:
        res = rf.put_back_unlisted(router, ["http://a:1", "http://b:1", "http://c:1"], [],
                                   healthy, 30, 0.1, **dict(CLOCK))
        assert res["added"] == [] and res["not_ready"] == [
            {"url": "http://a:1", "reason": "/health does not answer 200"}]
    assert asked == ["http://a:1", "http://a:1"]
    assert [call[1] for call in timeline] == ["GET", "GET"]  # no POST
    # every router lists every candidate: one list per router, no health asked, no change
    timeline[:] = []
    asked[:] = []
    for _fake, router in routers:
        res = rf.put_back_unlisted(router, ["http://b:1", "http://c:1"], [], healthy, 30, 0.1,
                                   **dict(CLOCK))
        assert res["added"] == [] and res["unlisted"] == []
    assert asked == [] and [call[1] for call in timeline] == ["GET", "GET"]


def test_a_stale_running_gauge_drains_where_the_release_counts_each_forward():
    """Up to 0.5.9 the idle report that zeroes the gauges comes 30 s after the last report:
    where realtime_tokens_total exists, readings over the quiet time in which it stays put
    drain the server though the gauge still says 1 (no forward ran). Without that counter
    (older releases) the same stale gauge is trusted until the drain times out."""
    t = FakeTime()
    stale = BUSY_METRICS % (1, 0, 64, 63)
    d = r.drain(readings([stale])[0], 60, 1, quiet=3, clock=t.clock, sleep=t.sleep)
    assert d["drained"] and d["elapsed_s"] == 3.0 and d["running"] == 1 and d["busy"] == 1
    t = FakeTime()
    d = r.drain(readings([METRICS % (1, 0)])[0], 10, 1, quiet=3, clock=t.clock, sleep=t.sleep)
    assert not d["drained"] and d["elapsed_s"] == 10.0
    # and the counter moving keeps the server busy whatever the gauges say
    t = FakeTime()
    n = iter(range(10 ** 6))
    d = r.drain(lambda: BUSY_METRICS % (1, 0, next(n), 0), 10, 1, quiet=3, clock=t.clock, sleep=t.sleep)
    assert not d["drained"]


# A PD prefill server of 0.5.23's shape, idle in its scheduler (the gauges 0, the forward
# counter still): requests in its bootstrap and inflight queues, its KV transfers counted.
PD_PREFILL_METRICS = BUSY_METRICS + """sglang:num_prefill_bootstrap_queue_reqs{engine_type="prefill",model_name="m",pp_rank="0",tp_rank="0"} %s
sglang:num_prefill_inflight_queue_reqs{engine_type="prefill",model_name="m",pp_rank="0",tp_rank="0"} %s
sglang:kv_transfer_latency_ms_count{engine_type="prefill",model_name="m",pp_rank="0",tp_rank="0"} %s
"""


def test_pd_queues_keep_a_server_busy_though_no_forward_runs():
    """Issue 43: a prefill server sending KV runs no forward, so the forward counter stands
    still while requests wait in its PD queues; the drain waits until those read 0 over the
    quiet time, and a transfer that completes (its count moves) restarts the quiet time."""
    assert r.pd_queued(PD_PREFILL_METRICS % (0, 0, 64, 63, 2, 1, 5)) == 3.0
    assert r.pd_queued(BUSY_METRICS % (0, 0, 64, 63)) is None  # a co-located server
    t = FakeTime()
    read, seen = readings([PD_PREFILL_METRICS % (0, 0, 64, 63, 2, 1, 5)] * 4
                          + [PD_PREFILL_METRICS % (0, 0, 64, 63, 0, 1, 7)] * 2   # one sent
                          + [PD_PREFILL_METRICS % (0, 0, 64, 63, 0, 0, 8)])      # all sent
    d = r.drain(read, 60, 1, quiet=3, clock=t.clock, sleep=t.sleep)
    # quiet from the last change (t=6) for 3 s
    assert d["drained"] and d["elapsed_s"] == 9.0 and d["busy"] == 3
    # the control: the same readings without the PD queues drain at once after the quiet
    # time (the forward counter still): what the drain did before it read them
    t = FakeTime()
    d = r.drain(readings([BUSY_METRICS % (0, 0, 64, 63)])[0], 60, 1, quiet=3, clock=t.clock, sleep=t.sleep)
    assert d["drained"] and d["elapsed_s"] == 3.0
    # and requests that stay in the queues time the drain out
    t = FakeTime()
    d = r.drain(readings([PD_PREFILL_METRICS % (0, 0, 64, 63, 0, 2, 5)])[0], 10, 1, quiet=3,
                clock=t.clock, sleep=t.sleep)
    assert not d["drained"] and d["elapsed_s"] == 10.0 and d["busy"] == 2


# ---- PD mode: workers with their role (issue 43, docs/experiments/pd-rollout-design.md 2) ----

class PDFakeRouter(FakeRouter):
    """The fake smg with roles: a POST keeps its body's ``worker_type`` and
    ``bootstrap_port``, GET lists ``worker_type`` always and ``bootstrap_port`` when set
    (as smg 1.13.0's answer, tests/fixtures/smg/workers-pd-1.13.0.json), and ``PUT
    /workers/{id}`` replaces the registration under the same id once ``put_polls`` lists
    have passed (smg from 1.4.0), or, with ``replaces=False``, answers 202 and keeps the role
    (a partial update: smg up to 1.3.3, sglang-router 0.3.x). ``sent`` records every call
    with its decoded body."""

    def __init__(self, urls, roles=None, replaces=True, put_polls=0, **kw):
        self.replaces, self.put_polls, self.sent = replaces, put_polls, []
        super().__init__(urls, **kw)
        for w in self.workers.values():
            w.update(dict((roles or {}).get(w["url"], {"worker_type": "regular"})))

    def _new(self, url, polls):
        super()._new(url, polls)
        self.workers["id%d" % self.next_id]["worker_type"] = "regular"

    def _tick(self):
        super()._tick()
        for w in self.workers.values():
            if w.get("put_in") is not None:
                w["put_in"] -= 1
                if w["put_in"] < 0:
                    w.update(w.pop("pending"))
                    w["put_in"] = None

    def __call__(self, method, url, body, headers, timeout):
        path = "/" + url.split("://", 1)[1].split("/", 1)[1]
        self.sent.append((method, path, json.loads(body) if body is not None else None))
        if method == "PUT":
            self.calls.append((method, path))
            w = self.workers.get(path.rsplit("/", 1)[1])
            if w is None:
                return 404, '{"code": "WORKER_NOT_FOUND"}'
            if self.replaces:
                b = json.loads(body)
                w["pending"] = {"worker_type": b["worker_type"],
                                "bootstrap_port": b.get("bootstrap_port")}
                w["put_in"] = self.put_polls
            return 202, '{"status": "accepted"}'
        status, text = FakeRouter.__call__(self, method, url, body, headers, timeout)
        if method == "POST" and status == 202:
            b = json.loads(body)
            self.workers["id%d" % self.next_id].update(
                worker_type=b.get("worker_type", "regular"), bootstrap_port=b.get("bootstrap_port"))
        if method == "GET":
            answer = json.loads(text)
            for row in answer["workers"]:
                w = self.workers[row["id"]]
                row["worker_type"] = w["worker_type"]
                if w.get("bootstrap_port") is not None:
                    row["bootstrap_port"] = w["bootstrap_port"]
            text = json.dumps(answer)
        return status, text


P = {"worker_type": "prefill", "bootstrap_port": 8998}
D = {"worker_type": "decode"}
PAYLOADS = {"http://a:1": dict(P, url="http://a:1"), "http://b:1": dict(D, url="http://b:1"),
            "http://c:1": dict(D, url="http://c:1")}


def test_worker_table_keeps_the_role_and_the_bootstrap_port_of_smgs_answer():
    with open(os.path.join(_FIXTURES, "smg", "workers-pd-1.13.0.json"), encoding="utf-8") as fh:
        rows = r.worker_table("workers", json.load(fh))
    assert [(x["url"][-5:], x["worker_type"], x.get("bootstrap_port")) for x in rows] == [
        ("18011", "decode", None), ("18001", "prefill", 18998), ("18002", "prefill", None),
        ("18012", "regular", None)]
    assert "bootstrap_port" not in rows[2]  # smg leaves an unset port out; so does the row
    # an answer without them (sglang-router before roles, the fakes above): the row as before
    assert r.worker_table("workers", SMG_LIST)[0] == {"id": "i1", "url": "http://a:30000",
                                                      "healthy": True, "status": "ready"}


@pytest.mark.parametrize("key,body,sent", [
    (None, None, {"url": "http://a:1"}),
    ("k", None, {"url": "http://a:1", "api_key": "k"}),
    (None, dict(P, url="http://a:1"), {"url": "http://a:1", "worker_type": "prefill",
                                       "bootstrap_port": 8998}),
    ("k", D, {"url": "http://a:1", "worker_type": "decode", "api_key": "k"}),
    ("k", dict(D, api_key="own"), {"url": "http://a:1", "worker_type": "decode",
                                   "api_key": "own"}),
])
def test_add_posts_the_pd_body_when_given_else_the_url(key, body, sent):
    fake = PDFakeRouter([])
    r.Router("http://router:30000", "workers", fake).add("http://a:1/", key, body)
    assert fake.sent == [("POST", "/workers", sent)]


def test_put_and_a_body_on_the_legacy_api_are_refused_or_named():
    fake = PDFakeRouter(["http://a:1"])
    router = r.Router("http://router:30000", "workers", fake)
    router.put("id1", dict(D, url="http://a:1"))
    assert fake.sent == [("PUT", "/workers/id1", {"url": "http://a:1", "worker_type": "decode"})]
    with pytest.raises(r.RouterError, match=r"PUT http://router:30000/workers/id9 "
                                            r"\(http://a:1 as decode\) answered 404"):
        router.put("id9", dict(D, url="http://a:1"))
    legacy = r.Router("http://router:30000", "legacy", FakeRouter([], legacy=True))
    with pytest.raises(r.RouterError, match="legacy worker API .* takes a URL alone"):
        legacy.add("http://a:1", None, D)
    with pytest.raises(r.RouterError, match="has no PUT"):
        legacy.put("x", D)


def test_put_back_repairs_a_misregistered_row_in_place_and_adds_with_the_role():
    """b is listed as regular (added with its URL alone): PUT with its body, same id; a is
    added with its prefill body and the worker's own key; the wait lasts until the PUT
    shows (two lists), not only until every URL serves."""
    fake = PDFakeRouter(["http://b:1", "http://c:1"], put_polls=2,
                        roles={"http://c:1": D, "http://b:1": {"worker_type": "regular"}})
    router = r.Router("http://router:30000", "workers", fake)
    res = r.put_back(router, ["http://a:1", "http://b:1"], 30, 0.1, {"http://a:1": "ka"},
                     payloads=PAYLOADS, **dict(CLOCK))
    assert res["added"] == ["http://a:1"] and res["repaired"] == ["http://b:1"]
    changes = [s for s in fake.sent if s[0] != "GET"]
    assert changes == [
        ("PUT", "/workers/id1", {"url": "http://b:1", "worker_type": "decode"}),
        ("POST", "/workers", {"url": "http://a:1", "worker_type": "prefill",
                              "bootstrap_port": 8998, "api_key": "ka"})]
    roles = dict((x["url"], (x["id"], x["worker_type"], x.get("bootstrap_port")))
                 for x in res["after"])
    assert roles == {"http://a:1": ("id3", "prefill", 8998), "http://b:1": ("id1", "decode", None),
                     "http://c:1": ("id2", "decode", None)}
    # a re-run finds nothing to put right or add: one list to settle, one to check
    fake.sent[:] = []
    again = r.put_back(router, ["http://a:1", "http://b:1"], 30, 0.1, payloads=PAYLOADS,
                       **dict(CLOCK))
    assert again["added"] == [] and again["repaired"] == []
    assert [s[0] for s in fake.sent] == ["GET", "GET"]


def test_where_put_cannot_change_the_role_the_row_is_removed_and_added_again():
    """put_replaces=False (smg up to 1.3.3, sglang-router 0.3.x): DELETE, wait until the
    row has gone (a draining row would refuse the add), then POST with the role."""
    fake = PDFakeRouter(["http://b:1", "http://c:1"], replaces=False,
                        roles={"http://c:1": D, "http://b:1": {"worker_type": "regular"}})
    router = r.Router("http://router:30000", "workers", fake, put_replaces=False)
    res = r.put_back(router, ["http://b:1"], 30, 0.1, payloads=PAYLOADS, **dict(CLOCK))
    assert res["added"] == [] and res["repaired"] == ["http://b:1"]
    changes = [s for s in fake.sent if s[0] != "GET"]
    assert changes == [("DELETE", "/workers/id1", None),
                       ("POST", "/workers", {"url": "http://b:1", "worker_type": "decode"})]
    delete, post = fake.sent.index(changes[0]), fake.sent.index(changes[1])
    # lists until the row had gone (smg drains a deleted worker first; the fake 3 lists)
    assert fake.sent[delete + 1:post] == [("GET", "/workers", None)] * 3
    assert [(x["id"], x["worker_type"]) for x in res["after"] if x["url"] == "http://b:1"] == [
        ("id3", "decode")]


def test_a_put_that_keeps_the_role_is_named_with_the_releases_that_do_that():
    fake = PDFakeRouter(["http://b:1"], replaces=False)
    router = r.Router("http://router:30000", "workers", fake)  # expects PUT to replace
    with pytest.raises(r.RouterError, match=r"does not list http://b:1 with the role of its "
                                            r"payload 5 s after PUT /workers/\{id\}.*smg up to "
                                            r"1\.3\.3, sglang-router 0\.3\.x"):
        r.put_back(router, ["http://b:1"], 5, 0.1, payloads=PAYLOADS, **dict(CLOCK))


@pytest.mark.parametrize("call", [
    lambda router: r.put_back(router, ["http://a:1", "http://x:1/"], 30, 0.1,
                              payloads=PAYLOADS, **dict(CLOCK)),
    lambda router: r.converge(router, {"add": ["http://x:1"], "remove": ["http://a:1"]}, 30, 0.1,
                              payloads=PAYLOADS, **dict(CLOCK)),
    lambda router: rfleet().put_back_unlisted(router, ["http://x:1"], [], lambda u: True, 30,
                                              0.1, payloads=PAYLOADS, **dict(CLOCK)),
])
def test_a_pd_router_never_gets_a_worker_without_a_role(call):
    """Payloads given and a URL to add without one: refused, naming it, before any call."""
    fake = PDFakeRouter(["http://a:1"])
    with pytest.raises(r.RouterError, match=r"PD payloads but none for http://x:1: a router in "
                                            r"PD mode routes nothing"):
        call(r.Router("http://router:30000", "workers", fake))
    assert fake.sent == []


def test_payloads_on_the_legacy_api_are_refused_before_any_call():
    fake = FakeRouter(["http://a:1"], legacy=True)
    with pytest.raises(r.RouterError, match="legacy worker API"):
        r.put_back(r.Router("http://router:30000", "legacy", fake), ["http://a:1"], 30, 0.1,
                   payloads=PAYLOADS, **dict(CLOCK))
    assert fake.calls == []


def rfleet():
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_fleet
    return _router_fleet


# today's calls (before PD mode) of a put-back of a and a convergence that removes b and
# adds a, on a router that lists b and c: the control for payloads None and {}
# (recorded with the code of 6183788 against this fake)
TODAY_PUT_BACK = [("GET", "/workers", None),
                  ("POST", "/workers", {"url": "http://a:1", "api_key": "ka"}),
                  ("GET", "/workers", None), ("GET", "/workers", None)]
TODAY_CONVERGE = [("GET", "/workers", None), ("DELETE", "/workers/id1", None),
                  ("GET", "/workers", None), ("GET", "/workers", None),
                  ("POST", "/workers", {"url": "http://a:1", "api_key": "ka"}),
                  ("GET", "/workers", None), ("GET", "/workers", None)]


@pytest.mark.parametrize("payloads", [None, {}])
def test_without_payloads_the_calls_and_the_results_are_todays(payloads):
    extra = {} if payloads is None else {"payloads": payloads}
    fake = PDFakeRouter(["http://b:1", "http://c:1"])
    router = r.Router("http://router:30000", "workers", fake)
    res = r.put_back(router, ["http://a:1"], 30, 0.1, {"http://a:1": "ka"}, **dict(CLOCK, **extra))
    assert fake.sent == TODAY_PUT_BACK
    assert sorted(res) == ["added", "after", "before", "elapsed_s"] and res["added"] == ["http://a:1"]
    fake = PDFakeRouter(["http://b:1", "http://c:1"])
    router = r.Router("http://router:30000", "workers", fake)
    res = r.converge(router, {"add": ["http://a:1"], "remove": ["http://b:1"]}, 30, 0.1,
                     {"http://a:1": "ka"}, **dict(CLOCK, **extra))
    assert fake.sent == TODAY_CONVERGE
    assert sorted(res) == ["added", "after", "before", "elapsed_s", "removed"]
    # the rows carry smg's worker_type (the fake lists it), and nothing else is new
    assert set(res["after"][0]) == {"id", "url", "healthy", "status", "worker_type"}


def test_converge_repairs_with_nothing_to_add_and_removes_first():
    fake = PDFakeRouter(["http://a:1", "http://b:1", "http://c:1"],
                        roles={"http://a:1": P, "http://c:1": D})  # b listed as regular
    router = r.Router("http://router:30000", "workers", fake)
    res = r.converge(router, {"add": [], "remove": ["http://c:1"]}, 30, 0.1, payloads=PAYLOADS,
                     **dict(CLOCK))
    assert res["removed"] == ["http://c:1"] and res["added"] == [] and res["repaired"] == ["http://b:1"]
    changes = [s[:2] for s in fake.sent if s[0] != "GET"]
    assert changes == [("DELETE", "/workers/id3"), ("PUT", "/workers/id2")]
    # every row as its body says: nothing changes, and without an add no put-back runs
    fake.sent[:] = []
    res = r.converge(router, {"add": [], "remove": []}, 30, 0.1, payloads=PAYLOADS, **dict(CLOCK))
    assert res["repaired"] == [] and [s[0] for s in fake.sent] == ["GET"]


def test_restored_with_payloads_puts_right_a_listed_row_and_adds_the_stranded_with_its_role():
    fleet = rfleet()
    fake = PDFakeRouter(["http://b:1", "http://c:1"], roles={"http://c:1": D})
    router = r.Router("http://router:30000", "workers", fake)
    cands = ["http://a:1", "http://b:1", "http://c:1"]
    check = fleet.put_back_unlisted(router, cands, [], lambda u: True, 30, 0.1, check=True,
                                    payloads=PAYLOADS, **dict(CLOCK))
    assert check["added"] == ["http://a:1"] and check["repaired"] == ["http://b:1"]
    assert [s[0] for s in fake.sent] == ["GET"]  # check mode: named only
    res = fleet.put_back_unlisted(router, cands, [], lambda u: True, 30, 0.1,
                                  payloads=PAYLOADS, **dict(CLOCK))
    assert res["added"] == ["http://a:1"] and res["repaired"] == ["http://b:1"]
    assert [s[:2] for s in fake.sent if s[0] not in ("GET",)] == [
        ("PUT", "/workers/id1"), ("POST", "/workers")]
    # every candidate listed with its role: one list, nothing else
    fake.sent[:] = []
    res = fleet.put_back_unlisted(router, cands, [], lambda u: True, 30, 0.1,
                                  payloads=PAYLOADS, **dict(CLOCK))
    assert res["added"] == [] and res["repaired"] == [] and [s[0] for s in fake.sent] == ["GET"]
