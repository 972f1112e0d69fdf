"""Issue 43, item 5: before any batch of a rollout leaves the routers, every router puts
back each ready server it does not list (roles/server/tasks/router_restore.yml). The
decision is Python (module_utils/router/_router_fleet.py, tested there and through
router_worker); this checks the YAML's order: the step runs once, on every router, after
prepare and before the rollout's first removal, and its check-mode unit plan takes the
rollout's own arguments."""

import os

import yaml

from ansible_collections.gpufleet.sglang.tests.paths import ROOT

TASKS = os.path.join(ROOT, "roles", "server", "tasks")


def _load(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _entry_points(play):
    return [t.get("ansible.builtin.include_role", {}).get("tasks_from", "main")
            for t in play.get("tasks", []) if "ansible.builtin.include_role" in t]


def test_deploy_puts_back_after_prepare_and_before_the_rollout():
    plays = _load("playbooks", "deploy.yml")
    order = [entry for play in plays for entry in _entry_points(play)]
    assert order.index("prepare") < order.index("router_restore") < order.index("rollout")
    restore = next(p for p in plays if "router_restore" in _entry_points(p))
    rollout = next(p for p in plays if "rollout" in _entry_points(p))
    assert "serial" not in restore and "serial" in rollout  # every server at once, then batches
    assert restore["hosts"] == rollout["hosts"]


def test_the_step_asks_every_router_once_and_puts_back_on_every_router():
    tasks = _load("roles", "server", "tasks", "router_restore.yml")
    routed = [t for t in tasks if "gpufleet.sglang.router_worker" in t]
    assert [t["gpufleet.sglang.router_worker"]["state"] for t in routed] == ["restored", "restored"]
    for task in routed:
        assert task["loop"] == "{{ __server_routers }}"  # every router (the control run overrides __server_router_selected with -e)
        assert task["run_once"] is True
        assert task["delegate_to"] == "{{ item.host }}"
    ask, put = routed
    assert ask["check_mode"] is True and put.get("check_mode") is not True
    names = [t["name"] for t in tasks]
    # the reads come between the routers' answers and the put-back, only on those servers
    reads = [t for t in tasks if "gpufleet.sglang.router_hold" in t or "gpufleet.sglang.server_unit" in t]
    assert len(reads) == 2
    for task in reads:
        assert names.index(ask["name"]) < names.index(task["name"]) < names.index(put["name"])
        assert task["when"][0] == "__server_router_restore_seen is changed"
        assert "inventory_hostname in __server_router_restore_targets" in task["when"]
    assert put["when"][0] == "__server_router_restore_seen is changed"


def test_the_unit_plan_takes_the_rollouts_arguments():
    """router_restore.yml's check-mode unit plan and rollout.yml's (the rollout's restart
    decision) must be the same call, or 'serves the target' would mean something else."""
    def unit_args(name, register):
        tasks = _load("roles", "server", "tasks", name)
        found = [t for t in tasks if t.get("register") == register]
        assert len(found) == 1 and found[0]["check_mode"] is True
        return found[0]["gpufleet.sglang.server_unit"]

    restore = unit_args("router_restore.yml", "__server_router_restore_unit")
    rollout = unit_args("rollout.yml", "__server_unit_plan")
    assert restore == rollout
    assert "argv" in restore and "record_path" in restore


def _watcher():
    import importlib.util

    path = os.path.join(ROOT, "extensions", "molecule", "router", "files", "watch_routers.py")
    spec = importlib.util.spec_from_file_location("gpufleet_watch_routers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_router_scenarios_verdict_sees_the_order_and_an_overlap():
    """extensions/molecule/router/tasks/stranded.yml judges the re-run with this verdict:
    the killed server k must be routed by both routers before either stops routing to
    another server, and no router may route to neither k nor every other one."""
    w = _watcher()
    k, a, b = "http://k:30000", "http://a:30000", "http://b:30000"

    def polls(*states):
        return [{"t": float(t), "router": r, "ok": True, "routed": routed}
                for t, r, routed in states]

    fixed = polls((0, "r1", [a, b]), (0, "r2", [a, b]), (1, "r1", [a, b, k]), (1, "r2", [a, k, b]),
                  (2, "r1", [a, k]), (2, "r2", [k, a]), (3, "r1", [a, b, k]), (3, "r2", [a, b, k]))
    got = w.judge(fixed, k, [a, b])
    assert got["killed_out_at_start"] and got["back_at"] == 1.0 and got["first_other_out_at"] == 2.0
    assert got["overlap_count"] == 0
    # the bug: b leaves while k is still out of r2
    broken = polls((0, "r1", [a, b]), (0, "r2", [a, b]), (1, "r1", [a, k]), (1, "r2", [a]),
                   (2, "r1", [a, b, k]), (2, "r2", [a, b, k]))
    got = w.judge(broken, k, [a, b])
    assert got["overlap_count"] == 1 and got["overlap"][0] == {"t": 1.0, "router": "r2", "out": [b]}
    assert got["back_at"] == 2.0 and got["first_other_out_at"] == 1.0
    # a poll the router did not answer is not counted
    assert w.judge([{"t": 0.0, "router": "r1", "ok": False, "routed": []}], k, [a])["samples"] == 0
    assert w.routed({"workers": [{"url": k + "/", "is_healthy": True, "status": "ready"},
                                 {"url": a, "is_healthy": True, "status": "draining"},
                                 {"url": b, "is_healthy": False}]}) == [k]
