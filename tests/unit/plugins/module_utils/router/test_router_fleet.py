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


# ---- before any batch leaves: put back the ready servers a router does not list ----

def test_unlisted_counts_a_draining_row_as_not_listed():
    listed = rows(("http://b:1", True), ("http://c:1", False))
    listed.append({"id": "9", "url": "http://d:1", "healthy": False, "status": "draining"})
    got = rf.unlisted(["http://a:1/", "http://b:1", "http://c:1", "http://d:1", "http://a:1"], listed)
    assert got == ["http://a:1", "http://d:1"]  # c is listed (unhealthy): not ours to add


def test_restore_adds_only_the_healthy_unlisted_not_held_and_never_removes():
    cand = ["http://a:1", "http://b:1", "http://c:1", "http://d:1", "http://e:1"]
    listed = rows(("http://b:1", True), ("http://x:1", True))
    healthy = {"http://a:1": True, "http://c:1": False, "http://e:1": True}
    plan = rf.restore(cand, ["http://e:1/"], healthy, listed)
    assert plan["add"] == ["http://a:1"]
    assert plan["unlisted"] == ["http://a:1", "http://c:1", "http://d:1", "http://e:1"]
    assert plan["not_ready"] == [{"url": "http://c:1", "reason": "/health does not answer 200"},
                                 {"url": "http://d:1", "reason": "health not asked"},
                                 {"url": "http://e:1", "reason": "held"}]
    assert "remove" not in plan
    # every candidate listed: nothing to add, nothing to ask
    full = rows(*[(u, True) for u in cand])
    assert rf.restore(cand, [], {}, full) == {"add": [], "unlisted": [], "not_ready": []}


def test_restore_hosts_are_every_host_of_a_server_a_router_would_put_back():
    servers = [{"host": "s1", "url": "http://s1:1", "members": ["s1"]},
               {"host": "m0", "url": "http://m0:1", "members": ["m0", "m1"]},
               {"host": "s3", "url": "http://s3:1", "members": ["s3"]}]
    assert rf.restore_hosts(servers, ["http://m0:1/", "http://s3:1"]) == ["m0", "m1", "s3"]
    assert rf.restore_hosts(servers, []) == []


def _plan(restart, summary="no change"):
    return {"changed": restart, "restart": restart, "summary": summary, "action": "none"}


def test_restore_inputs_only_the_servers_at_target_and_not_held():
    free = {"changed": False, "held": False}
    servers = [
        # killed before its re-add: it serves the target, nothing to restart
        {"host": "s1", "url": "http://s1:1", "hold": free, "plans": {"s1": _plan(False)}},
        # killed before its unit was installed: it still runs what this run replaces
        {"host": "s2", "url": "http://s2:1", "hold": free,
         "plans": {"s2": _plan(True, "restart: argv changed")}},
        # held by its marker, and one held by the inventory with no read
        {"host": "s3", "url": "http://s3:1", "hold": {"held": True}, "plans": {"s3": _plan(False)}},
        {"host": "s4", "url": "http://s4:1", "hold": None, "inventory_hold": "yes", "plans": {}},
        # not read this run (the first task found it listed everywhere): left alone
        {"host": "s5", "url": "http://s5:1", "hold": {"skipped": True, "changed": False},
         "plans": {"s5": {"skipped": True, "changed": False}}},
        # a multi-node server: rank 1 will restart, so the server is not at target
        {"host": "m0", "url": "http://m0:1", "hold": free,
         "plans": {"m0": _plan(False), "m1": _plan(True, "restart: owed")}},
        # a multi-node server whose rank 1 plan was not made: unknown
        {"host": "n0", "url": "http://n0:1", "hold": free, "plans": {"n0": _plan(False), "n1": None}},
        {"host": "r1", "url": "", "hold": None, "plans": {}},  # a rank >= 1 row: no URL
    ]
    got = rf.restore_inputs(servers)
    assert got["urls"] == ["http://s1:1"]
    assert got["held"] == ["http://s3:1", "http://s4:1"]
    assert got["not_at_target"] == {"s2": "s2: it will restart (restart: argv changed)",
                                    "m0": "m1: it will restart (restart: owed)"}
    assert got["unknown"] == ["s5", "n0"]


# ---- a router in PD mode: payloads (issue 43, docs/experiments/pd-rollout-design.md 2) ----

PD = {"http://a:1": {"worker_type": "prefill", "bootstrap_port": 8998},
      "http://b:1": {"worker_type": "decode"}, "http://c:1": {"worker_type": "decode"}}


def roled(*triples):
    """Rows as smg lists them: (url, healthy, worker_type)."""
    out = rows(*[(u, h) for u, h, _t in triples])
    for row, (_u, _h, kind) in zip(out, triples):
        row["worker_type"] = kind
        if kind == "prefill":
            row["bootstrap_port"] = 8998
    return out


@pytest.mark.parametrize("listed,healthy,plan", [
    # b listed as regular and serving: kept, and put right
    (roled(("http://a:1", True, "prefill"), ("http://b:1", True, "regular")),
     {"http://a:1": True, "http://b:1": True, "http://c:1": True},
     {"add": ["http://c:1"], "remove": [], "keep": ["http://a:1", "http://b:1"],
      "repair": ["http://b:1"]}),
    # b listed as regular but down: removed, not put right
    (roled(("http://a:1", True, "prefill"), ("http://b:1", True, "regular")),
     {"http://a:1": True, "http://b:1": False, "http://c:1": None},
     {"add": [], "remove": ["http://b:1"], "keep": ["http://a:1", "http://c:1"], "repair": []}),
    # a prefill row with another bootstrap port than its body's
    ([dict(roled(("http://a:1", True, "prefill"))[0], bootstrap_port=9000)],
     {"http://a:1": True, "http://b:1": None, "http://c:1": None},
     {"add": [], "remove": [], "keep": ["http://a:1", "http://b:1", "http://c:1"],
      "repair": ["http://a:1"]}),
])
def test_membership_with_payloads_names_the_rows_to_put_right(listed, healthy, plan):
    assert rf.membership(["http://a:1", "http://b:1", "http://c:1"], [], healthy, listed,
                         PD) == plan


@pytest.mark.parametrize("payloads", [None, {}])
def test_membership_and_restore_without_payloads_answer_as_before(payloads):
    listed = roled(("http://b:1", True, "regular"))
    cand = ["http://a:1", "http://b:1"]
    assert rf.membership(cand, [], {"http://a:1": True, "http://b:1": True}, listed,
                         payloads) == {"add": ["http://a:1"], "remove": [], "keep": ["http://b:1"]}
    assert rf.restore(cand, [], {"http://a:1": True}, listed, payloads) == {
        "add": ["http://a:1"], "unlisted": ["http://a:1"], "not_ready": []}


def test_restore_with_payloads_names_the_rows_to_put_right_and_refuses_a_url_without_a_body():
    listed = roled(("http://b:1", True, "regular"), ("http://c:1", True, "decode"))
    plan = rf.restore(["http://a:1", "http://b:1", "http://c:1"], [], {"http://a:1": True},
                      listed, PD)
    assert plan == {"add": ["http://a:1"], "unlisted": ["http://a:1"], "not_ready": [],
                    "repair": ["http://b:1"]}
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router._router import RouterError
    for call in (rf.restore, rf.membership):
        with pytest.raises(RouterError, match=r"^given PD payloads but none for http://x:1, "
                                              r"http://y:1: a router in PD mode"):
            call(["http://a:1", "http://x:1/", "http://y:1"], [], {}, listed, PD)
