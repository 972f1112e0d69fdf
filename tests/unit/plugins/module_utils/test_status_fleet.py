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
