"""The router control plane's filters over the inventory."""
from ansible_collections.gpufleet.sglang.plugins.filter import router as f
from ansible_collections.gpufleet.sglang.plugins.filter import fleet

GROUPS = {"sglang_servers": ["s1", "s2", "s3"], "sglang_routers": ["r1", "r2"]}


def hostvars():
    return {
        "s1": {"ansible_host": "10.0.0.1", "__server_unit_plan": {"restart": True, "has_last_good": True},
               "__server_router_hold": {"held": False}, "server_api_key": "k1"},
        "s2": {"ansible_host": "10.0.0.2", "__server_unit_plan": {"restart": True, "has_last_good": True},
               "__server_router_hold": {"held": True}},
        "s3": {"ansible_host": "10.0.0.3", "__server_unit_plan": {"restart": False, "has_last_good": True},
               "__server_router_hold": {"held": False}},
        "r1": {"router_port": 30001}, "r2": {"router_api_key": "rk"},
    }


def test_endpoints_are_every_router():
    eps = f.router_endpoints(GROUPS["sglang_routers"], hostvars())
    assert [e["host"] for e in eps] == ["r1", "r2"]
    assert "rk" not in str(eps) and eps[0]["url"].endswith(":30001")


def test_leaving_urls_and_switch_plan():
    hv = hostvars()
    assert f.router_leaving_urls(["s1", "s2", "s3"], GROUPS, hv) == [
        "http://10.0.0.1:30000", "http://10.0.0.2:30000"]
    assert f.router_switch_plan("s2", hv) == {"leave": True, "held": True, "readd": False}
    assert f.router_switch_plan("s3", hv)["leave"] is False


def test_membership_inputs_held_and_unknown():
    hv = hostvars()
    hv["s3"].pop("__server_router_hold")
    got = f.router_membership_inputs(["s1", "s2", "s3"], GROUPS, hv)
    assert got == {"urls": ["http://10.0.0.1:30000", "http://10.0.0.2:30000"],
                   "held": ["http://10.0.0.2:30000"], "unknown": ["s3"],
                   "by_host": {"s1": "http://10.0.0.1:30000", "s2": "http://10.0.0.2:30000",
                               "s3": "http://10.0.0.3:30000"}}
    hv["s3"]["sglang_router_hold"] = True  # held by the inventory even without a read
    got = f.router_membership_inputs(["s1", "s2", "s3"], GROUPS, hv)
    assert got["held"] == ["http://10.0.0.2:30000", "http://10.0.0.3:30000"]
    assert got["unknown"] == []


def test_keys_hosts_with_removed():
    hv = hostvars()
    assert f.router_worker_keys(["s1", "s2"], GROUPS, hv) == {"http://10.0.0.1:30000": "k1"}
    assert fleet.hosts_with(["s1", "s2", "r1"], hv, "server_api_key") == ["s1"]
    res = {"results": [{"removed": ["http://10.0.0.2:30000"]}, {"removed": []}]}
    assert f.router_removed(res, "http://10.0.0.2:30000/")
    assert not f.router_removed(res, "http://10.0.0.1:30000")
    assert not f.router_removed({"skipped": True}, "http://10.0.0.1:30000")


def test_restore_hosts_and_inputs_from_the_registered_reads():
    hv = hostvars()
    for host in ("s1", "s2", "s3"):
        hv[host]["__server_request"] = {"topology": {"members": [host]}}
    # the first task's answers: r1 would put back s1 and s3, r2 only s3; a skipped item
    seen = {"results": [{"added": ["http://10.0.0.1:30000", "http://10.0.0.3:30000"]},
                        {"added": ["http://10.0.0.3:30000"]}, {"skipped": True}]}
    assert f.router_restore_hosts(["s1", "s2", "s3"], seen, GROUPS, hv) == ["s1", "s3"]
    assert f.router_restore_hosts(["s1", "s2", "s3"], {"results": [{"added": []}]}, GROUPS, hv) == []
    assert f.router_restore_hosts(["s1"], {"skipped": True}, GROUPS, hv) == []
    hv["s1"].update(__server_router_restore_hold={"held": False},
                    __server_router_restore_unit={"restart": False, "summary": "no change"})
    hv["s3"].update(__server_router_restore_hold={"held": False},
                    __server_router_restore_unit={"restart": True, "summary": "restart: argv changed"})
    got = f.router_restore_inputs(["s1", "s2", "s3"], GROUPS, hv)
    assert got == {"urls": ["http://10.0.0.1:30000"], "held": [],
                   "not_at_target": {"s3": "s3: it will restart (restart: argv changed)"},
                   "unknown": ["s2"]}
    hv["s1"]["sglang_router_hold"] = True
    assert f.router_restore_inputs(["s1"], GROUPS, hv)["held"] == ["http://10.0.0.1:30000"]
