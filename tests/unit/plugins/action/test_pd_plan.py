# -*- coding: utf-8 -*-
"""gpufleet.sglang.pd_plan: every PD host's transport facts read from hostvars (fake ones
here, as the other action tests do; one run through ansible-playbook reads real ones), one
backend for the fleet, and this host's servers by slot."""

import json
import os
import subprocess
import sys
from unittest import mock

import pytest
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.sglang.plugins.action import pd_plan
from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd_roles
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import parse_pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import parse_help
from ansible_collections.gpufleet.sglang.tests.doubles import ActionTask
from ansible_collections.gpufleet.sglang.tests.paths import SGLANG_HELP

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BIN = os.path.dirname(sys.executable)

RDMA = {"ib_devices": [{"name": "mlx5_0", "state": "ACTIVE"}, {"name": "mlx5_1", "state": "ACTIVE"}],
        "peermem": True, "topology": None}
NO_RDMA = {"ib_devices": [], "peermem": False, "topology": None}
LAYOUT = "prefill:ep8+decode:2xep8"
HOSTS = ["gpu-1", "gpu-2", "gpu-3"]


def check_pd(layout=LAYOUT, hosts=None, backend=None):
    """What deploy_check returns as ``pd`` for each host (the part pd_plan reads)."""
    plan, problems = _pd_roles.fleet_plan(parse_pd(layout), hosts or HOSTS, None, 8)
    assert problems == []
    return dict((h, {"layout": layout, "roles": parse_pd(layout), "plan": plan, "placements": plan["hosts"][h],
                     "release": "0.5.23", "transfer_backend": backend}) for h in plan["hosts"])


def run_action(monkeypatch, args, host, hostvars, play_hosts=None):
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action = pd_plan.ActionModule(ActionTask(args, "gpufleet.sglang.pd_plan"), mock.MagicMock(), mock.MagicMock(),
                                  mock.MagicMock(), mock.MagicMock(), mock.MagicMock())
    task_vars = {"inventory_hostname": host, "hostvars": json.loads(json.dumps(hostvars)),
                 "ansible_play_hosts_all": play_hosts or sorted(hostvars)}
    return action.run(task_vars=task_vars)


def test_the_checks_pd_gives_roles_placements_and_the_plan_hosts(monkeypatch):
    """gpu-1 answered the whole gpu_prereqs result, gpu-2 and gpu-3 only its transport: one
    host without RDMA makes it mooncake_tcp for every host, each with its own servers."""
    pd = check_pd()
    hostvars = {"gpu-1": {"__server_pd_facts": {"ok": True, "changed": False, "transport": RDMA}},
                "gpu-2": {"__server_pd_facts": RDMA}, "gpu-3": {"__server_pd_facts": NO_RDMA},
                "other": {}}  # a host of the play outside the plan is not asked
    seen = {}
    for host in HOSTS:
        res = run_action(monkeypatch, {"pd": pd[host], "release": "0.5.23", "server_port": 30000}, host, hostvars)
        assert not res.get("failed"), res
        seen[host] = res
    assert set(r["backend"] for r in seen.values()) == {"mooncake_tcp"}
    assert "gpu-3: no RDMA device" in seen["gpu-1"]["backend_reason"]
    prefill = seen["gpu-1"]["slots"]
    assert [(s["slot"], s["role"], s["server"], s["unit"], s["port"], s["bootstrap_port"]) for s in prefill] == \
        [(0, "prefill", "prefill-0", "sglang.service", 30000, 8998)]
    assert prefill[0]["environment"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "MC_FORCE_TCP": "1"}
    assert ["--disaggregation-transfer-backend", "mooncake_tcp"] in prefill[0]["flags"]
    assert seen["gpu-3"]["slots"][0]["server"] == "decode-1" and seen["gpu-3"]["slots"][0]["bootstrap_port"] is None
    assert seen["gpu-1"]["msg"].startswith("gpu-1: mooncake_tcp (not every PD host can do RDMA")
    assert "slot 0 prefill prefill-0 on sglang.service, port 30000, bootstrap port 8998" in seen["gpu-1"]["msg"]
    # control: RDMA everywhere is mooncake, with the devices (no matrix: every device)
    hostvars["gpu-3"]["__server_pd_facts"] = RDMA
    res = run_action(monkeypatch, {"pd": pd["gpu-3"], "release": "0.5.23", "server_port": 30000}, "gpu-3", hostvars)
    assert res["backend"] == "mooncake" and ["--disaggregation-ib-device", "mlx5_0,mlx5_1"] in res["slots"][0]["flags"]
    assert res["slots"][0]["environment"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def test_a_backend_forced_in_the_check_and_the_layout_as_text(monkeypatch):
    pd = check_pd(backend="nixl")
    hostvars = dict((h, {"__server_pd_facts": RDMA}) for h in HOSTS)
    res = run_action(monkeypatch, {"pd": pd["gpu-2"], "release": "0.5.23", "server_port": 30000}, "gpu-2", hostvars)
    assert (res["backend"], res["backend_reason"]) == ("nixl", "sglang_pd_transfer_backend")
    # the layout as its text: placements, hosts and the forced backend are the task's
    res = run_action(monkeypatch, {"pd": LAYOUT, "placements": pd["gpu-2"]["placements"], "hosts": HOSTS,
                                   "release": "0.5.23", "server_port": "30000", "forced_backend": "mooncake"},
                     "gpu-2", hostvars)
    assert res["backend"] == "mooncake" and res["slots"][0]["port"] == 30000


def test_every_problem_at_once_naming_the_host(monkeypatch):
    pd = check_pd(LAYOUT)
    hostvars = {"gpu-1": {"__server_pd_facts": RDMA},
                "gpu-2": {"__server_pd_facts": {"skipped": True, "changed": False}},  # the probe did not run
                "gpu-3": {}}
    res = run_action(monkeypatch, {"pd": pd["gpu-1"], "release": "0.5.23", "server_port": 30000,
                                   "bootstrap_port": 30000, "ib_device": "mlx5 0"}, "gpu-1", hostvars)
    assert res["failed"] and res["backend"] is None
    assert res["msg"].startswith("gpu-1: 3 problems with the PD plan:\n- ")
    assert any(p.startswith("sglang_pd_ib_device must be an RDMA device") for p in res["problems"])
    assert any(p.startswith("gpu-2, gpu-3 have no transport facts") for p in res["problems"])
    assert any(p.startswith("gpu-1, slot 0 (prefill prefill-0): its bootstrap port 30000 is its own HTTP port")
               for p in res["problems"])


def test_fact_name_and_the_installed_help(monkeypatch):
    """A release the collection has no help text of renders from the installed help's flags."""
    with open(os.path.join(SGLANG_HELP, "sglang-0.5.23.txt")) as handle:
        flags = parse_help(handle.read())["flags"]
    pd = check_pd()
    hostvars = dict((h, {"pd_facts": NO_RDMA}) for h in HOSTS)
    args = {"pd": pd["gpu-1"], "release": "0.5.99", "server_port": 30000, "fact_name": "pd_facts"}
    res = run_action(monkeypatch, args, "gpu-1", hostvars)
    assert res["failed"] and "sglang 0.5.99 is no release the collection has a --help text of" in res["msg"]
    res = run_action(monkeypatch, dict(args, help_flags=flags), "gpu-1", hostvars)
    assert not res.get("failed") and res["backend"] == "mooncake_tcp"


PLAYBOOK = """
- hosts: pd
  gather_facts: false
  tasks:
    - ansible.builtin.set_fact:
        __server_pd_facts: "{{ facts[inventory_hostname] }}"
    - name: Plan
      gpufleet.sglang.pd_plan:
        pd: "{{ pd[inventory_hostname] }}"
        release: "0.5.23"
        server_port: 30000
"""

INVENTORY = """
all:
  children:
    pd:
      hosts:
        gpu-1: {ansible_connection: local}
        gpu-2: {ansible_connection: local}
        gpu-3: {ansible_connection: local}
"""


@pytest.mark.parametrize("facts, backend", [
    ({"gpu-1": RDMA, "gpu-2": RDMA, "gpu-3": NO_RDMA}, "mooncake_tcp"),
    ({"gpu-1": RDMA, "gpu-2": RDMA, "gpu-3": RDMA}, "mooncake"),  # control
])
def test_through_ansible_playbook_the_hostvars_are_the_other_hosts_registered_facts(tmp_path, facts, backend):
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"), ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml"), "-e", json.dumps({"facts": facts, "pd": check_pd()}),
                           "-e", "ansible_python_interpreter=%s" % sys.executable],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env,
                          cwd=str(tmp_path), timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    results = [t["hosts"] for p in data["plays"] for t in p["tasks"] if t["task"]["name"] == "Plan"][0]
    assert set(r["backend"] for r in results.values()) == {backend}
    assert [s["server"] for h in HOSTS for s in results[h]["slots"]] == ["prefill-0", "decode-0", "decode-1"]
