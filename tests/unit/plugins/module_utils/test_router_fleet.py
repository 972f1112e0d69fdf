"""The router control plane's decisions: every router of the group, the switch plan of a
held server, membership, the status rows."""
import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_fleet as rf


def test_every_router_of_the_group_in_order_with_its_port_and_never_its_key():
    """The entries are loop items, which Ansible prints whole when a task fails: no key."""
    hv = {"r1": {"router_port": 30001, "router_api_key": "k"}, "r2": {}}
    hv["r2"]["router_service_name"] = "rt"
    assert rf.routers(["r1", "r2"], hv) == [
        {"host": "r1", "url": "http://127.0.0.1:30001",
         "unit_path": "/etc/systemd/system/sglang-router.service"},
        {"host": "r2", "url": "http://127.0.0.1:30000",
         "unit_path": "/etc/systemd/system/rt.service"}]
    assert rf.routers([], hv) == []
    with pytest.raises(rf.FleetError, match="r2: router_port is 'x'"):
        rf.routers(["r1", "r2"], {"r1": {}, "r2": {"router_port": "x"}})


@pytest.mark.parametrize("restart,last_good,held,leave,readd", [
    (True, True, False, True, True),
    (True, True, True, True, False),     # held: taken out if listed, never put back
    (True, False, False, False, False),  # first install: not in a router yet
    (False, True, False, False, False),  # no restart: nothing to do
    (False, True, True, False, False),
    ("true", "True", "false", True, True),
])
def test_switch_plan(restart, last_good, held, leave, readd):
    plan = rf.switch_plan(restart, last_good, held)
    assert (plan["leave"], plan["readd"]) == (leave, readd)


def test_hold_marker_and_is_held():
    doc = rf.hold_marker("tune", "playbooks/tune.yml", "2026-01-01T00:00:00Z")
    assert doc == {"reason": "tune", "since": "2026-01-01T00:00:00Z", "by": "playbooks/tune.yml"}
    for bad in ("", "two words", None, "x" * 80):
        with pytest.raises(rf.FleetError, match="server_router_hold_reason is"):
            rf.hold_marker(bad, "", "t")
    assert rf.is_held(doc) and rf.is_held({}) and not rf.is_held(None)
    assert rf.is_held(None, True) and rf.is_held(None, "yes") and not rf.is_held(None, "false")


def test_batch_urls_selects_by_flag_once_each():
    hv = {"a": {"f": True, "u": "http://a:1/"}, "b": {"f": False, "u": "http://b:1"},
          "c": {"u": "http://c:1"}, "d": {"f": True, "u": ""}, "e": {"f": True, "u": "http://a:1"}}
    assert rf.batch_urls(["a", "b", "c", "d", "e"], hv, "f", "u") == ["http://a:1"]


def rows(*pairs):
    return [{"id": str(i), "url": u, "healthy": h, "status": "ready" if h else "unhealthy"}
            for i, (u, h) in enumerate(pairs)]


def test_membership_adds_the_serving_removes_the_down_and_the_held_leaves_the_rest():
    cand = ["http://a:1", "http://b:1", "http://c:1", "http://d:1", "http://e:1"]
    healthy = {"http://a:1": True, "http://b:1": False, "http://c:1": True,
               "http://d:1": None, "http://e:1": True}
    listed = rows(("http://b:1", False), ("http://c:1", True), ("http://x:1", True),
                  ("http://d:1", True))
    plan = rf.membership(cand, ["http://c:1/"], healthy, listed)
    assert plan["add"] == ["http://a:1", "http://e:1"]
    assert plan["remove"] == ["http://b:1", "http://c:1"]
    assert plan["keep"] == ["http://d:1"]          # unknown: left as it is
    # converged: nothing to do
    done = rows(("http://a:1", True), ("http://e:1", True), ("http://d:1", True))
    assert rf.membership(cand, ["http://c:1"], healthy, done)["add"] == []
    assert rf.membership(cand, ["http://c:1"], healthy, done)["remove"] == []


def test_membership_report_names_each_problem():
    cand = ["http://a:1", "http://b:1", "http://c:1", "http://d:1"]
    healthy = {"http://a:1": True, "http://b:1": False, "http://c:1": True, "http://d:1": True}
    listed = rows(("http://b:1", True), ("http://c:1", True), ("http://d:1", True))
    rep = rf.membership_report("r1", listed, cand, ["http://c:1"], healthy)
    problems = [r["problem"] for r in rep]
    assert problems == ["serves but the router r1 does not list it",
                        "does not serve but the router r1 routes to it",
                        "held but listed by the router r1", ""]
    assert [r["held"] for r in rep] == [False, False, True, False]
    # a down server the router already sees unhealthy is not routed to: no problem
    rep = rf.membership_report("r1", rows(("http://b:1", False)), ["http://b:1"], [],
                               {"http://b:1": False})
    assert rep[0]["problem"] == ""


def test_membership_reads_a_draining_row_as_not_listed():
    """smg keeps a removed worker listed as draining for about 5 s and routes nothing to
    it: a serving server with only that row is added (once the row has gone), and a held
    one with it needs no second removal."""
    cand = ["http://a:1", "http://b:1"]
    healthy = {"http://a:1": True, "http://b:1": True}
    draining = [{"id": "1", "url": "http://a:1", "healthy": False, "status": "draining"},
                {"id": "2", "url": "http://b:1", "healthy": False, "status": "draining"}]
    plan = rf.membership(cand, ["http://b:1"], healthy, draining)
    assert plan == {"add": ["http://a:1"], "remove": [], "keep": ["http://b:1"]}
    ready = [dict(row, healthy=True, status="ready") for row in draining]
    plan = rf.membership(cand, ["http://b:1"], healthy, ready)
    assert plan == {"add": [], "remove": ["http://b:1"], "keep": ["http://a:1"]}
