"""The fleet table of status.yml with the routers' view."""
from ansible_collections.gpufleet.sglang.plugins.filter.status import status_fleet
from ansible_collections.gpufleet.sglang.plugins.module_utils.status import _status_fleet


def row(host, ready=True, problems=()):
    return {"host": host, "ready": ready, "ok": not problems, "problems": list(problems),
            "line": "%s-line" % host}


def member(url, listed, healthy=True):
    return {"url": url, "listed": listed, "healthy_in_router": healthy if listed else None}


BY_HOST = {"s1": "http://s1:1", "s2": "http://s2:1", "s3": "http://s3:1"}


def hostvars(held=()):
    hv = {}
    for h, ready in (("s1", True), ("s2", False), ("s3", True)):
        hv[h] = {"__status": {"header": "HEAD", "row": row(h, ready, () if ready else ("not ready",))},
                 "__status_hold": {"held": h in held}}
    return hv


def routers(*per_router):
    return {"results": [{"item": {"host": name}, "membership": m} for name, m in per_router]}


def test_without_routers_the_table_is_the_rows():
    out = status_fleet(["s1", "s2", "s3", "s4"], hostvars())
    assert out["lines"][:4] == ["HEAD", "s1-line", "s2-line", "s3-line"]
    assert "s4  (no status)" in out["lines"]
    assert out["failures"] == ["s2: not ready", "s4: no status (host unreachable or the module failed)"]
    assert out["missing"] == ["s4"] and not out["ok"]


def test_a_serving_server_missing_from_a_router_fails_and_a_down_one_routed_to_fails():
    r1 = [member("http://s1:1", True), member("http://s2:1", True, False), member("http://s3:1", True)]
    r2 = [member("http://s1:1", False), member("http://s2:1", True, True), member("http://s3:1", True)]
    out = status_fleet(["s1", "s2", "s3"], hostvars(), routers(("r1", r1), ("r2", r2)), BY_HOST)
    assert out["lines"][0] == "HEAD  ROUTERS"
    assert out["lines"][1] == "s1-line  r1:ok r2:absent"
    assert out["lines"][2] == "s2-line  r1:unhealthy r2:ok"
    assert out["failures"] == [
        "s1: serves but the router r2 does not list it",
        "s2: not ready; does not serve but the router r2 routes to it"]
    # converged: every serving server listed everywhere, the down one seen unhealthy
    r2 = [member("http://s1:1", True), member("http://s2:1", False), member("http://s3:1", True)]
    out = status_fleet(["s1", "s2", "s3"], hostvars(), routers(("r1", r1), ("r2", r2)), BY_HOST)
    assert out["failures"] == ["s2: not ready"]


def test_a_held_server_is_shown_held_not_missing():
    r1 = [member("http://s1:1", False), member("http://s2:1", False), member("http://s3:1", True)]
    out = status_fleet(["s1", "s2", "s3"], hostvars(held=("s1",)), routers(("r1", r1)), BY_HOST)
    assert out["lines"][1] == "s1-line  held r1:absent"
    assert out["failures"] == ["s2: not ready"]
    assert out["rows"][0]["held"] is True
    r1[0] = member("http://s1:1", True)
    out = status_fleet(["s1", "s2", "s3"], hostvars(held=("s1",)), routers(("r1", r1)), BY_HOST)
    assert "s1: held but the router r1 lists it" in out["failures"]


def test_a_router_without_a_list_fails():
    res = {"results": [{"item": {"host": "r1"}, "failed": True, "msg": "cannot reach"}]}
    out = status_fleet(["s1"], hostvars(), res, BY_HOST)
    assert out["failures"] == ["router r1: no worker list (unreachable or failed)"]
    assert out["lines"][1] == "s1-line  r1:?"


def test_columns_extend_by_one_entry():
    assert [t for t, _c in _status_fleet.EXTRA_COLUMNS] == ["ROUTERS"]


# ------------------------------------------------------------------ prefill/decode

from ansible_collections.gpufleet.sglang.plugins.module_utils.status._status import (  # noqa: E402
    row as status_row,
    table_header,
)

PREFILL = ["--model-path", "/m", "--disaggregation-mode", "prefill",
           "--disaggregation-bootstrap-port", "9001"]
DECODE = ["--model-path", "/m", "--disaggregation-mode", "decode"]
CO = ["--model-path", "/m"]
PROPS = {"ActiveState": "active", "MainPID": "1234", "ExecMainStartTimestampMonotonic": "1000000"}


def pd_row(host, argv, process=True, ready=True):
    """A module row: what runs (``argv`` on its command line) and its record say the same."""
    record = {"strategy": "ep8", "release": "0.5.23", "argv": argv,
              "deployed_at": "2026-12-01T00:50:00Z"}
    return status_row(host, record, PROPS, 10000000, {"route": "/ready", "ready": ready,
                                                      "detail": "200"},
                      {"detail": "ok"}, [], 30000, "sglang.service", "/rec",
                      ["python", "-m", "sglang.launch_server"] + argv if process else None)


def pd_hostvars(rows, **more):
    hv = dict((h, {"__status": {"header": "HEAD", "row": r}}) for h, r in rows.items())
    for host, extra in more.items():
        hv.setdefault(host, {}).update(extra)
    return hv


def test_each_pd_server_shows_its_role_and_peers():
    rows = {"gpu-1": pd_row("gpu-1", PREFILL), "gpu-2": pd_row("gpu-2", DECODE),
            "gpu-3": pd_row("gpu-3", DECODE)}
    groups = {"sglang_servers": ["gpu-1", "gpu-2", "gpu-3"]}
    out = status_fleet(["gpu-1", "gpu-2", "gpu-3"], pd_hostvars(rows), groups=groups,
                       servers_group="sglang_servers")
    assert out["ok"], out["failures"]
    assert out["lines"][0] == table_header(pd=True)
    cells = [line.split()[:4] for line in out["lines"][1:]]
    assert cells == [["gpu-1", "ep8", "prefill:9001", "gpu-2,gpu-3"],
                     ["gpu-2", "ep8", "decode", "gpu-1"],
                     ["gpu-3", "ep8", "decode", "gpu-1"]]
    by_host = dict((r["host"], r) for r in out["rows"])
    assert by_host["gpu-2"]["pd_peers"] == [
        {"host": "gpu-1", "role": "prefill", "bootstrap_port": 9001, "source": "process"}]
    assert [p["host"] for p in by_host["gpu-1"]["pd_peers"]] == ["gpu-2", "gpu-3"]
    assert all(p["bootstrap_port"] is None for p in by_host["gpu-1"]["pd_peers"])
    assert by_host["gpu-1"]["pd_problems"] == []


def test_a_co_located_fleet_keeps_its_table():
    rows = {"s1": pd_row("s1", CO), "s2": pd_row("s2", CO)}
    out = status_fleet(["s1", "s2"], pd_hostvars(rows), groups={"g": ["s1", "s2"]},
                       servers_group="g")
    assert out["lines"][0] == "HEAD"
    assert out["lines"][1] == rows["s1"]["line"] and out["ok"]
    assert all(r["pd_peers"] is None and r["pd_problems"] == [] for r in out["rows"])


def test_a_prefill_server_without_a_decode_peer_fails_when_the_fleet_is_known():
    """Issue 43 item 9's demo: --disaggregation-mode prefill through server_extra_args on both
    hosts; health 200, no decode server anywhere. Status names it."""
    rows = {"s1": pd_row("s1", PREFILL), "s2": pd_row("s2", PREFILL)}
    groups = {"sglang_servers": ["s1", "s2"]}
    out = status_fleet(["s1", "s2"], pd_hostvars(rows), groups=groups,
                       servers_group="sglang_servers")
    assert not out["ok"]
    assert out["failures"] == [
        "s1: serves prefill, but no server of the fleet serves decode: no request completes "
        "through it",
        "s2: serves prefill, but no server of the fleet serves decode: no request completes "
        "through it"]
    assert [line.split()[2:4] for line in out["lines"][1:3]] == [["prefill:9001", "none"]] * 2
    # the control: the same play without the inventory's group cannot know the fleet: "?"
    out = status_fleet(["s1", "s2"], pd_hostvars(rows))
    assert out["ok"] and [line.split()[3] for line in out["lines"][1:3]] == ["?", "?"]


def test_peers_outside_the_play_come_from_the_inventory():
    """-l gpu-2: gpu-1 is pinned prefill (sglang_pd_role, its own bootstrap port), gpu-4 is in
    the group sglang_prefill, gpu-3 has a cached record (decode); gpu-5 is unknown."""
    rows = {"gpu-2": pd_row("gpu-2", DECODE)}
    hv = pd_hostvars(rows, **{
        "gpu-1": {"sglang_pd_role": "prefill", "sglang_pd_bootstrap_port": 9100},
        "gpu-3": {"ansible_local": {"sglang": {"argv": DECODE}}},
        "gpu-4": {},
        "gpu-5": {}})
    groups = {"sglang_servers": ["gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5"],
              "sglang_prefill": ["gpu-4"]}
    out = status_fleet(["gpu-2"], hv, groups=groups, servers_group="sglang_servers")
    peers = out["rows"][0]["pd_peers"]
    assert peers == [
        {"host": "gpu-1", "role": "prefill", "bootstrap_port": 9100, "source": "inventory"},
        {"host": "gpu-4", "role": "prefill", "bootstrap_port": 8998, "source": "inventory"}]
    assert out["ok"] and out["lines"][1].split()[3] == "gpu-1,gpu-4"
    # no prefill known, one host unknown (gpu-5): "?" and no failure
    del hv["gpu-1"]["sglang_pd_role"]
    out = status_fleet(["gpu-2"], hv, groups=dict(groups, sglang_prefill=[]),
                       servers_group="sglang_servers")
    assert out["ok"] and out["rows"][0]["pd_peers"] is None


def test_a_multi_node_server_is_one_peer_and_a_missing_host_its_inventory_role():
    rows = {"p1": pd_row("p1", PREFILL), "p2": pd_row("p2", PREFILL + ["--node-rank", "1"]),
            "d1": pd_row("d1", DECODE)}
    hv = pd_hostvars(rows, d2={"sglang_pd_role": ["decode"]})
    groups = {"sglang_servers": ["p1", "p2", "d1", "d2"]}
    out = status_fleet(["p1", "p2", "d1", "d2"], hv, groups=groups, servers_group="sglang_servers")
    by_host = dict((r["host"], r) for r in out["rows"])
    assert [p["host"] for p in by_host["d1"]["pd_peers"]] == ["p1"]  # p2 is p1's rank 1
    assert [p["host"] for p in by_host["p2"]["pd_peers"]] == ["d1", "d2"]
    assert out["failures"] == ["d2: no status (host unreachable or the module failed)"]


def test_inventory_pd():
    hv = {"a": {"sglang_pd_role": "decode"}, "b": {}, "c": {"ansible_local": {"sglang": {
        "argv": CO}}}, "d": {"sglang_pd_role": "prefill", "sglang_pd_bootstrap_port": "none",
                             "sglang_node_rank": 1}}
    got = _status_fleet.inventory_pd(["a", "b", "c", "d", "zz"], hv, {"sglang_prefill": ["b"]})
    assert got == {
        "a": {"role": "decode", "bootstrap_port": None, "node_rank": 0, "source": "inventory"},
        "b": {"role": "prefill", "bootstrap_port": 8998, "node_rank": 0, "source": "inventory"},
        "c": {"role": None, "bootstrap_port": None, "node_rank": 0, "source": "record"},
        "d": {"role": "prefill", "bootstrap_port": 8998, "node_rank": 1, "source": "inventory"}}
