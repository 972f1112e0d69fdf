"""router_hold: the hold marker written, kept, read and removed through _files."""
import json
import os

from ansible_collections.gpufleet.sglang.plugins.modules import router_hold


def test_hold_is_written_once_read_and_removed(run_module, tmp_path):
    path = str(tmp_path / "state" / "router-hold.json")
    res, failed = run_module(router_hold, {"path": path})
    assert not failed and not res["changed"] and res["held"] is False and res["marker"] is None
    res, failed = run_module(router_hold, {"path": path, "state": "present", "reason": "tune",
                                           "by": "tune.yml", "_ansible_check_mode": True})
    assert not failed and res["changed"] and not os.path.exists(path)
    res, failed = run_module(router_hold, {"path": path, "state": "present", "reason": "tune",
                                           "by": "tune.yml"})
    assert not failed and res["changed"] and res["held"]
    doc = json.load(open(path))
    assert doc["reason"] == "tune" and doc["by"] == "tune.yml" and doc["since"].endswith("Z")
    res, failed = run_module(router_hold, {"path": path, "state": "present", "reason": "other"})
    assert not failed and not res["changed"] and res["marker"] == doc  # the first hold stays
    res, failed = run_module(router_hold, {"path": path, "state": "absent"})
    assert not failed and res["changed"] and not res["held"] and not os.path.exists(path)
    res, failed = run_module(router_hold, {"path": path, "state": "absent", "inventory_hold": True})
    assert not failed and not res["changed"] and res["held"]  # the inventory still holds it


def test_a_bad_reason_is_refused(run_module, tmp_path):
    path = str(tmp_path / "router-hold.json")
    res, failed = run_module(router_hold, {"path": path, "state": "present", "reason": "a b"})
    assert failed and "server_router_hold_reason is 'a b'" in res["msg"]
    assert not os.path.exists(path)
